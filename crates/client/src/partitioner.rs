//! The producer's partitioning, as kafka-clients 4.4 does it:
//! - keyed records: `toPositive(murmur2(key)) % numPartitions` ([`partition_for_key`]), unless
//!   `partitioner.ignore.keys`;
//! - records without a key (or with keys ignored): [`BuiltInPartitioner`], KIP-794's adaptive
//!   sticky partitioning: one partition until `batch.size` bytes have been produced to it,
//!   then a new one chosen at random among the partitions with a leader, weighted away from
//!   partitions with long queues (`partitioner.adaptive.partitioning.enable`) and leaving out
//!   partitions whose leader has not been drained for `partitioner.availability.timeout.ms`;
//!   with `partitioner.rack.aware`, partitions led in `client.rack` are chosen when there
//!   are any (KIP-1123);
//! - `partitioner.class=org.apache.kafka.clients.producer.RoundRobinPartitioner`:
//!   [`RoundRobinPartitioner`], every record (keyed or not) to the next available partition.
//!
//! The state here is pure bookkeeping; the producer feeds it queue sizes and availability. The
//! random source is injectable so that sequences can be compared with Kafka's classes.
use std::collections::HashMap;

/// Kafka's `Utils.murmur2`: 32-bit MurmurHash2 with seed `0x9747b28c`.
pub fn murmur2(data: &[u8]) -> i32 {
    let length = data.len();
    let seed: u32 = 0x9747_b28c;
    let m: u32 = 0x5bd1_e995;
    let r = 24;
    let mut h: u32 = seed ^ (length as u32);
    let length4 = length / 4;
    for i in 0..length4 {
        let i4 = i * 4;
        let mut k = u32::from_le_bytes([data[i4], data[i4 + 1], data[i4 + 2], data[i4 + 3]]);
        k = k.wrapping_mul(m);
        k ^= k >> r;
        k = k.wrapping_mul(m);
        h = h.wrapping_mul(m);
        h ^= k;
    }
    let tail = length4 * 4;
    let rem = length % 4;
    if rem >= 3 {
        h ^= (data[tail + 2] as u32) << 16;
    }
    if rem >= 2 {
        h ^= (data[tail + 1] as u32) << 8;
    }
    if rem >= 1 {
        h ^= data[tail] as u32;
        h = h.wrapping_mul(m);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(m);
    h ^= h >> 15;
    h as i32
}

/// Kafka's `Utils.toPositive`: clears the sign bit.
pub fn to_positive(n: i32) -> i32 {
    n & 0x7fff_ffff
}

/// The partition Kafka's default partitioner picks for `key`.
/// `num_partitions` below 1 (no partition to pick) gives 0 rather than a division by zero.
pub fn partition_for_key(key: &[u8], num_partitions: i32) -> i32 {
    if num_partitions < 1 {
        return 0;
    }
    to_positive(murmur2(key)) % num_partitions
}

/// `partitioner.class`: which partitioner picks partitions for records without an explicit one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PartitionerKind {
    /// Unset: keys hashed with murmur2, the rest to [`BuiltInPartitioner`].
    #[default]
    BuiltIn,
    /// `org.apache.kafka.clients.producer.RoundRobinPartitioner`.
    RoundRobin,
}

/// Kafka's class name of the round-robin partitioner.
pub const ROUND_ROBIN_CLASS: &str = "org.apache.kafka.clients.producer.RoundRobinPartitioner";

impl PartitionerKind {
    /// Parses a `partitioner.class` value: Kafka's class name (or its simple name); the empty
    /// string is the built-in partitioner, as an unset `partitioner.class`.
    pub fn from_class(v: &str) -> Option<PartitionerKind> {
        match v.trim() {
            "" => Some(PartitionerKind::BuiltIn),
            ROUND_ROBIN_CLASS | "RoundRobinPartitioner" => Some(PartitionerKind::RoundRobin),
            _ => None,
        }
    }
}

/// A source of random ints; Kafka's `randomPartition()` is `toPositive(nextInt())`, so only
/// non-negative values matter.
pub type RandomSource = Box<dyn FnMut() -> i32 + Send>;

fn thread_random() -> RandomSource {
    Box::new(|| to_positive(rand::random::<i32>()))
}

/// The partitions of a topic as the partitioner sees them: how many there are, and which have
/// a leader (`Cluster.availablePartitionsForTopic`), in partition order, with the rack of each
/// one's leader (`leader_racks[i]` for `available[i]`; missing entries have no rack).
#[derive(Debug, Clone, Copy)]
pub struct TopicPartitions<'a> {
    pub num_partitions: i32,
    pub available: &'a [i32],
    pub leader_racks: &'a [Option<&'a str>],
}

/// The cumulative frequency table of KIP-794: a random number in `0..cft[len-1]` maps to the
/// first entry strictly greater than it, whose partition is picked.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PartitionLoadStats {
    cumulative_frequency_table: Vec<i32>,
    partition_ids: Vec<i32>,
}

/// The sticky partition and the bytes produced to it since it was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct StickyPartitionInfo {
    partition: i32,
    produced_bytes: i64,
}

/// Kafka's `BuiltInPartitioner` for one topic.
pub struct BuiltInPartitioner {
    sticky_batch_size: i64,
    /// `partitioner.rack.aware`: `client.rack`, preferred for the leaders of new sticky
    /// partitions; `None` when not rack-aware.
    rack: Option<String>,
    load_stats: Option<PartitionLoadStats>,
    /// Rack-aware: the load stats of the partitions led in `rack` (possibly none).
    load_stats_in_rack: Option<PartitionLoadStats>,
    current: Option<StickyPartitionInfo>,
    random: RandomSource,
}

impl std::fmt::Debug for BuiltInPartitioner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BuiltInPartitioner")
            .field("sticky_batch_size", &self.sticky_batch_size)
            .field("rack", &self.rack)
            .field("load_stats", &self.load_stats)
            .field("load_stats_in_rack", &self.load_stats_in_rack)
            .field("current", &self.current)
            .finish()
    }
}

impl BuiltInPartitioner {
    /// `sticky_batch_size` is `batch.size`; Kafka's producer passes `max(1, batch.size)`, and
    /// so does this (the class itself refuses values below 1).
    pub fn new(sticky_batch_size: usize) -> BuiltInPartitioner {
        Self::with_random(sticky_batch_size, thread_random())
    }

    /// Like [`BuiltInPartitioner::new`], drawing random ints from `random`.
    pub fn with_random(sticky_batch_size: usize, random: RandomSource) -> BuiltInPartitioner {
        BuiltInPartitioner {
            sticky_batch_size: sticky_batch_size.clamp(1, i32::MAX as usize) as i64,
            rack: None,
            load_stats: None,
            load_stats_in_rack: None,
            current: None,
            random,
        }
    }

    /// Rack-aware (`partitioner.rack.aware=true` with `client.rack` = `rack`): new sticky
    /// partitions are chosen among those whose leader is in `rack` when there are any.
    pub fn rack_aware(mut self, rack: &str) -> BuiltInPartitioner {
        self.rack = Some(rack.to_string());
        self
    }

    /// Picks the next sticky partition: weighted by the load stats when there are any,
    /// otherwise uniformly among the available partitions (those led in the producer's rack
    /// first, when rack-aware), or among all when none is.
    fn next_partition(&mut self, topic: TopicPartitions<'_>) -> i32 {
        // Drawn first, whatever the branch, as Kafka does.
        let random = to_positive((self.random)());
        let stats = match (&self.load_stats, &self.load_stats_in_rack) {
            (Some(_), Some(r)) if !r.partition_ids.is_empty() => Some(r),
            (s, _) => s.as_ref(),
        };
        match stats {
            None => {
                let in_rack: Vec<i32> = match &self.rack {
                    Some(rack) => topic
                        .available
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| {
                            topic.leader_racks.get(*i).copied().flatten() == Some(rack.as_str())
                        })
                        .map(|(_, &p)| p)
                        .collect(),
                    None => Vec::new(),
                };
                let list = if in_rack.is_empty() {
                    topic.available
                } else {
                    &in_rack[..]
                };
                if !list.is_empty() {
                    list[random as usize % list.len()]
                } else if topic.num_partitions > 0 {
                    random % topic.num_partitions
                } else {
                    0
                }
            }
            Some(stats) => {
                let cft = &stats.cumulative_frequency_table;
                let total = cft.last().copied().unwrap_or(1).max(1);
                let weighted = random % total;
                // The first entry strictly greater than `weighted` (the table is increasing).
                let i = cft.partition_point(|&c| c <= weighted);
                stats.partition_ids[i.min(stats.partition_ids.len() - 1)]
            }
        }
    }

    /// The current sticky partition, choosing one if there is none yet
    /// (`peekCurrentPartitionInfo`).
    pub fn peek_current_partition(&mut self, topic: TopicPartitions<'_>) -> i32 {
        if let Some(c) = self.current {
            return c.partition;
        }
        let partition = self.next_partition(topic);
        self.current = Some(StickyPartitionInfo {
            partition,
            produced_bytes: 0,
        });
        partition
    }

    /// Counts `appended_bytes` produced to the sticky partition and switches to a new one
    /// once `batch.size` bytes have been produced, if `enable_switch` (the partition's queue
    /// has no incomplete batch), or regardless once twice that has been (`updatePartitionInfo`).
    pub fn update_partition_info(
        &mut self,
        appended_bytes: usize,
        topic: TopicPartitions<'_>,
        enable_switch: bool,
    ) {
        let Some(c) = self.current.as_mut() else {
            return;
        };
        // Kafka keeps an int; sizes are far below its range, saturate rather than wrap.
        c.produced_bytes = c.produced_bytes.saturating_add(appended_bytes as i64);
        let produced = c.produced_bytes;
        if (produced >= self.sticky_batch_size && enable_switch)
            || produced >= self.sticky_batch_size * 2
        {
            let partition = self.next_partition(topic);
            self.current = Some(StickyPartitionInfo {
                partition,
                produced_bytes: 0,
            });
        }
    }

    /// Rebuilds the load stats from the queue sizes of the partitions with a leader
    /// (`updatePartitionLoadStats`): `queue_sizes[i]` is the number of batches queued for
    /// `partition_ids[i]`; only the first `length` entries count (partitions left out for
    /// unavailability are dropped from the end), while `queue_sizes.len()` is the number of
    /// partitions considered. `None` (adaptive partitioning off, or not every partition seen
    /// yet) clears them, as do fewer than two partitions or equal queues with none left out.
    pub fn update_partition_load_stats(
        &mut self,
        queue_sizes: Option<&[i32]>,
        partition_ids: &[i32],
        length: usize,
    ) {
        self.update_partition_load_stats_with_racks(queue_sizes, partition_ids, &[], length)
    }

    /// [`BuiltInPartitioner::update_partition_load_stats`] with the rack of each partition's
    /// leader (`leader_racks[i]` for `partition_ids[i]`), for the rack-aware stats.
    pub fn update_partition_load_stats_with_racks(
        &mut self,
        queue_sizes: Option<&[i32]>,
        partition_ids: &[i32],
        leader_racks: &[Option<&str>],
        length: usize,
    ) {
        self.load_stats_in_rack = None;
        let Some(queue_sizes) = queue_sizes else {
            self.load_stats = None;
            return;
        };
        let length = length.min(queue_sizes.len()).min(partition_ids.len());
        if length < 1 || queue_sizes.len() < 2 {
            self.load_stats = None;
            return;
        }
        let sizes = &queue_sizes[..length];
        let max_plus_1 = sizes.iter().copied().max().unwrap_or(0).saturating_add(1);
        let all_equal = sizes.iter().all(|&q| q == sizes[0]);
        if all_equal && length == queue_sizes.len() {
            self.load_stats = None;
            return;
        }
        // Rack-aware: the same over the partitions led in the producer's rack, with their own
        // maximum (from -1: none may be there).
        if let Some(rack) = &self.rack {
            let (mut in_sizes, mut in_ids) = (Vec::new(), Vec::new());
            for i in 0..length {
                if leader_racks.get(i).copied().flatten() == Some(rack.as_str()) {
                    in_sizes.push(sizes[i]);
                    in_ids.push(partition_ids[i]);
                }
            }
            let max = in_sizes
                .iter()
                .copied()
                .max()
                .unwrap_or(-1)
                .saturating_add(1);
            self.load_stats_in_rack = Some(PartitionLoadStats {
                cumulative_frequency_table: invert_and_fold(&in_sizes, max),
                partition_ids: in_ids,
            });
        }
        self.load_stats = Some(PartitionLoadStats {
            cumulative_frequency_table: invert_and_fold(sizes, max_plus_1),
            partition_ids: partition_ids[..length].to_vec(),
        });
    }

    /// The end of the random range of the load stats (`loadStatsRangeEnd`), if there are any.
    pub fn load_stats_range_end(&self) -> Option<i32> {
        self.load_stats
            .as_ref()
            .and_then(|s| s.cumulative_frequency_table.last().copied())
    }
}

/// Inverts queue sizes (a longer queue, a lower weight: `max_plus_1 - size`) and folds them
/// into a running sum: the cumulative frequency table.
fn invert_and_fold(sizes: &[i32], max_plus_1: i32) -> Vec<i32> {
    let mut sum: i32 = 0;
    sizes
        .iter()
        .map(|&q| {
            sum = sum.saturating_add(max_plus_1.saturating_sub(q));
            sum
        })
        .collect()
}

/// Kafka's `RoundRobinPartitioner`: a counter per topic; each record goes to the next
/// available partition (`toPositive(counter) % available`), or, with none available, to
/// `toPositive(counter) % numPartitions`. Keys are ignored.
#[derive(Debug, Default)]
pub struct RoundRobinPartitioner {
    counters: HashMap<String, i32>,
}

impl RoundRobinPartitioner {
    pub fn partition(&mut self, topic_name: &str, topic: TopicPartitions<'_>) -> i32 {
        let counter = self.counters.entry(topic_name.to_string()).or_insert(0);
        // Java's AtomicInteger.getAndIncrement: wraps at i32::MAX.
        let v = *counter;
        *counter = counter.wrapping_add(1);
        let v = to_positive(v);
        if !topic.available.is_empty() {
            topic.available[v as usize % topic.available.len()]
        } else if topic.num_partitions > 0 {
            v % topic.num_partitions
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cases of Kafka's `UtilsTest.testMurmur2`.
    #[test]
    fn murmur2_matches_kafka() {
        assert_eq!(murmur2(b"21"), -973932308);
        assert_eq!(murmur2(b"foobar"), -790332482);
        assert_eq!(murmur2(b"a-little-bit-long-string"), -985981536);
        assert_eq!(murmur2(b"a-little-bit-longer-string"), -1486304829);
        assert_eq!(
            murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8"),
            -58897971
        );
        assert_eq!(murmur2(b"abc"), 479470107);
    }

    #[test]
    fn keyed_partitioning() {
        // toPositive(-973932308) = 1173551340; % 3 = 0, % 10 = 0, % 7 = 5
        assert_eq!(to_positive(-973932308), 1173551340);
        assert_eq!(partition_for_key(b"21", 7), 1173551340 % 7);
        for n in 1..20 {
            let p = partition_for_key(b"foobar", n);
            assert!((0..n).contains(&p));
            assert_eq!(p, partition_for_key(b"foobar", n));
        }
        assert_eq!(partition_for_key(b"abc", 4), 479470107 % 4);
    }

    fn fixed(values: &[i32]) -> RandomSource {
        let v = values.to_vec();
        let mut i = 0;
        Box::new(move || {
            let x = v.get(i % v.len().max(1)).copied().unwrap_or(0);
            i += 1;
            x
        })
    }

    /// batch.size 100, 4 partitions all available, no load stats: the partition stays until
    /// 100 bytes are produced, waits for enable_switch until 200, then moves to
    /// available[random % 4].
    #[test]
    fn sticky_switches_after_batch_size_bytes() {
        let all = [0, 1, 2, 3];
        let t = TopicPartitions {
            num_partitions: 4,
            available: &all,
            leader_racks: &[],
        };
        let mut p = BuiltInPartitioner::with_random(100, fixed(&[5, 2, 7]));
        assert_eq!(p.peek_current_partition(t), 1); // 5 % 4
        p.update_partition_info(60, t, true);
        assert_eq!(p.peek_current_partition(t), 1);
        p.update_partition_info(60, t, false); // 120 >= 100 but the batch is not full
        assert_eq!(p.peek_current_partition(t), 1);
        p.update_partition_info(79, t, false); // 199
        assert_eq!(p.peek_current_partition(t), 1);
        p.update_partition_info(1, t, false); // 200 = 2 x batch.size: switches anyway
        assert_eq!(p.peek_current_partition(t), 2); // 2 % 4
        p.update_partition_info(100, t, true);
        assert_eq!(p.peek_current_partition(t), 3); // 7 % 4
    }

    #[test]
    fn only_partitions_with_a_leader_are_picked() {
        let avail = [1, 3];
        let t = TopicPartitions {
            num_partitions: 4,
            available: &avail,
            leader_racks: &[],
        };
        let mut p = BuiltInPartitioner::with_random(1, fixed(&[0, 1, 2, 3]));
        let seq: Vec<i32> = (0..4)
            .map(|_| {
                let q = p.peek_current_partition(t);
                p.update_partition_info(1, t, true);
                q
            })
            .collect();
        assert_eq!(seq, [1, 3, 1, 3]);
        // None available: any partition.
        let none = TopicPartitions {
            num_partitions: 4,
            available: &[],
            leader_racks: &[],
        };
        let mut p = BuiltInPartitioner::with_random(1, fixed(&[6]));
        assert_eq!(p.peek_current_partition(none), 2);
    }

    /// Kafka's worked example: queue sizes 0 3 1 give the table 4 5 8; randoms 0-3 pick the
    /// first partition, 4 the second, 5-7 the third.
    #[test]
    fn load_stats_weight_away_from_long_queues() {
        let ids = [10, 11, 12];
        let t = TopicPartitions {
            num_partitions: 13,
            available: &ids,
            leader_racks: &[],
        };
        let picks: Vec<i32> = (0..9)
            .map(|r| {
                let mut p = BuiltInPartitioner::with_random(1, fixed(&[r]));
                p.update_partition_load_stats(Some(&[0, 3, 1]), &ids, 3);
                assert_eq!(p.load_stats_range_end(), Some(8));
                p.peek_current_partition(t)
            })
            .collect();
        assert_eq!(picks, [10, 10, 10, 10, 11, 12, 12, 12, 10]);
        // Equal queues with nothing left out: no stats; one left out: stats.
        let mut p = BuiltInPartitioner::new(1);
        p.update_partition_load_stats(Some(&[2, 2, 2]), &ids, 3);
        assert_eq!(p.load_stats_range_end(), None);
        p.update_partition_load_stats(Some(&[2, 2, 2]), &ids, 2);
        assert_eq!(p.load_stats_range_end(), Some(2));
        p.update_partition_load_stats(None, &ids, 3);
        assert_eq!(p.load_stats_range_end(), None);
        p.update_partition_load_stats(Some(&[4]), &ids, 1);
        assert_eq!(p.load_stats_range_end(), None);
    }

    #[test]
    fn round_robin_cycles_over_available_partitions() {
        let mut rr = RoundRobinPartitioner::default();
        let all = TopicPartitions {
            num_partitions: 3,
            available: &[0, 1, 2],
            leader_racks: &[],
        };
        let got: Vec<i32> = (0..5).map(|_| rr.partition("t", all)).collect();
        assert_eq!(got, [0, 1, 2, 0, 1]);
        let some = TopicPartitions {
            num_partitions: 3,
            available: &[0, 2],
            leader_racks: &[],
        };
        // Counter 5, 6: 5 % 2 = 1 -> partition 2, then 0.
        assert_eq!(rr.partition("t", some), 2);
        assert_eq!(rr.partition("t", some), 0);
        // Another topic has its own counter.
        assert_eq!(rr.partition("u", all), 0);
    }

    #[test]
    fn partitioner_class_values() {
        assert_eq!(
            PartitionerKind::from_class(ROUND_ROBIN_CLASS),
            Some(PartitionerKind::RoundRobin)
        );
        assert_eq!(
            PartitionerKind::from_class(""),
            Some(PartitionerKind::BuiltIn)
        );
        assert_eq!(PartitionerKind::from_class("com.example.Mine"), None);
    }
}

//! The producer's side of partitioning: which partitioner a record without an explicit
//! partition goes to (`partitioner.class`, `partitioner.ignore.keys`), and the bookkeeping
//! Kafka's `RecordAccumulator` and `Sender` feed the built-in partitioner with: bytes appended
//! to the sticky partition and whether its queue's batches are all full (switching waits for
//! that), the queue sizes of the partitions with a leader (`partitioner.adaptive.partitioning.
//! enable`), and how long each leader has had data ready without being drained
//! (`partitioner.availability.timeout.ms`); with `partitioner.rack.aware`, the racks of the
//! leaders, so that sticky partitions led in `client.rack` come first.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::client::{ClusterMetadata, TopicMetadata};
use crate::idempotence::Tp;
use crate::partitioner::{
    partition_for_key, BuiltInPartitioner, PartitionerKind, RoundRobinPartitioner, TopicPartitions,
};
use crate::producer_batch::ProducerBatch;
use crate::producer_config::ProducerConfig;

/// Kafka's `NodeLatencyStats`: the last time the node had batches ready, and the last time it
/// could be drained.
#[derive(Debug, Clone, Copy)]
struct NodeLatency {
    ready: Instant,
    drain: Instant,
}

#[derive(Debug)]
pub(crate) struct Partitioning {
    kind: PartitionerKind,
    ignore_keys: bool,
    adaptive: bool,
    availability_timeout: Duration,
    batch_size: usize,
    built_in: HashMap<String, BuiltInPartitioner>,
    round_robin: RoundRobinPartitioner,
    /// Partitions of each topic that ever had a batch: Kafka's accumulator keeps a deque per
    /// such partition (empty ones too) and does adaptive partitioning only once every
    /// partition of the topic has one.
    seen: HashMap<String, BTreeSet<i32>>,
    nodes: HashMap<i32, NodeLatency>,
    /// `partitioner.rack.aware`: `client.rack`; `None` when not rack-aware.
    rack: Option<String>,
    /// Broker -> rack, from the latest metadata (rack-aware only).
    broker_racks: HashMap<i32, String>,
}

/// The partitions with a leader, in partition order (`availablePartitionsForTopic`).
fn available(tm: &TopicMetadata) -> Vec<i32> {
    tm.partitions
        .iter()
        .filter(|p| p.leader >= 0)
        .map(|p| p.partition)
        .collect()
}

/// The rack of `partition`'s leader, if it has a leader with a rack.
fn leader_rack<'a>(
    racks: &'a HashMap<i32, String>,
    tm: &TopicMetadata,
    partition: i32,
) -> Option<&'a str> {
    let leader = tm.leader(partition)?;
    racks.get(&leader).map(String::as_str)
}

/// Kafka's `allBatchesFull`: only the last batch of a queue may be incomplete.
fn all_batches_full(q: Option<&VecDeque<ProducerBatch>>, batch_size: usize) -> bool {
    q.and_then(|q| q.back())
        .is_none_or(|b| b.full || b.is_closed() || b.has_sequence() || b.size() >= batch_size)
}

impl Partitioning {
    pub(crate) fn new(config: &ProducerConfig) -> Partitioning {
        Partitioning {
            kind: config.partitioner,
            ignore_keys: config.partitioner_ignore_keys,
            adaptive: config.partitioner_adaptive_partitioning,
            availability_timeout: config.partitioner_availability_timeout,
            batch_size: config.batch_size,
            built_in: HashMap::new(),
            round_robin: RoundRobinPartitioner::default(),
            seen: HashMap::new(),
            nodes: HashMap::new(),
            rack: config
                .partitioner_rack_aware
                .then(|| config.client_rack.clone()),
            broker_racks: HashMap::new(),
        }
    }

    /// Takes the brokers' racks from `md` (rack-aware only; the rest ignores racks).
    pub(crate) fn note_brokers(&mut self, md: &ClusterMetadata) {
        if self.rack.is_none() {
            return;
        }
        self.broker_racks = md
            .brokers
            .values()
            .filter_map(|b| Some((b.node_id, b.rack.clone()?)))
            .collect();
    }

    /// The partition of a record without an explicit one (`KafkaProducer.partition`, then the
    /// accumulator's sticky choice for records the built-in partitioner places); true when
    /// that is the built-in partitioner's sticky partition.
    pub(crate) fn partition(
        &mut self,
        topic: &str,
        key: Option<&Bytes>,
        tm: &TopicMetadata,
        queues: &HashMap<Tp, VecDeque<ProducerBatch>>,
    ) -> (i32, bool) {
        let n = tm.partitions.len() as i32;
        let avail = available(tm);
        let racks: Vec<Option<&str>> = avail
            .iter()
            .map(|&p| leader_rack(&self.broker_racks, tm, p))
            .collect();
        let view = TopicPartitions {
            num_partitions: n,
            available: &avail,
            leader_racks: &racks,
        };
        match (self.kind, key) {
            (PartitionerKind::RoundRobin, _) => (self.round_robin.partition(topic, view), false),
            (PartitionerKind::BuiltIn, Some(k)) if !self.ignore_keys => {
                (partition_for_key(k, n), false)
            }
            (PartitionerKind::BuiltIn, _) => {
                let batch_size = self.batch_size;
                let rack = self.rack.as_deref();
                let bp = self.built_in.entry(topic.to_string()).or_insert_with(|| {
                    let bp = BuiltInPartitioner::new(batch_size.max(1));
                    match rack {
                        Some(r) => bp.rack_aware(r),
                        None => bp,
                    }
                });
                let p = bp.peek_current_partition(view);
                // A switch held back while the queue had an incomplete batch happens as soon
                // as its batches are all full (the accumulator's `partitionChanged`).
                if all_batches_full(queues.get(&(topic.to_string(), p)), batch_size) {
                    bp.update_partition_info(0, view, true);
                }
                (bp.peek_current_partition(view), true)
            }
        }
    }

    /// `appended` bytes went to `partition`'s queue `q`; when the built-in partitioner chose
    /// it (`sticky`) this may switch its sticky partition (`updatePartitionInfo`).
    pub(crate) fn appended(
        &mut self,
        tm: &TopicMetadata,
        partition: i32,
        sticky: bool,
        appended: usize,
        q: &VecDeque<ProducerBatch>,
    ) {
        self.seen
            .entry(tm.name.clone())
            .or_default()
            .insert(partition);
        if !sticky {
            return;
        }
        let avail = available(tm);
        let racks: Vec<Option<&str>> = avail
            .iter()
            .map(|&p| leader_rack(&self.broker_racks, tm, p))
            .collect();
        let Some(bp) = self.built_in.get_mut(&tm.name) else {
            return;
        };
        let view = TopicPartitions {
            num_partitions: tm.partitions.len() as i32,
            available: &avail,
            leader_racks: &racks,
        };
        bp.update_partition_info(appended, view, all_batches_full(Some(q), self.batch_size));
    }

    /// The load stats of every topic the built-in partitioner places records of, from the
    /// queue sizes (the accumulator's `partitionReady`), once per drain.
    pub(crate) fn update_load_stats(
        &mut self,
        md: &ClusterMetadata,
        queues: &HashMap<Tp, VecDeque<ProducerBatch>>,
    ) {
        self.note_brokers(md);
        for (topic, bp) in self.built_in.iter_mut() {
            let seen = self.seen.get(topic);
            let Some(tm) = md.topics.get(topic) else {
                continue;
            };
            let all_seen = seen.is_some_and(|s| s.len() >= tm.partitions.len());
            let (Some(seen), true) = (seen, self.adaptive && all_seen) else {
                bp.update_partition_load_stats(None, &[], 0);
                continue;
            };
            // Kafka's arrays: one slot per queue; partitions with a leader take the next slot,
            // an unavailable leader's partition gives its slot back (the next overwrites it).
            let mut sizes = vec![0i32; seen.len()];
            let mut ids = vec![0i32; seen.len()];
            let mut index: isize = -1;
            for &p in seen {
                let Some(leader) = tm.leader(p) else { continue };
                index += 1;
                let i = index as usize;
                ids[i] = p;
                let len = queues.get(&(topic.clone(), p)).map_or(0, |q| q.len());
                if len == 0 {
                    continue;
                }
                sizes[i] = len.min(i32::MAX as usize) as i32;
                if !self.availability_timeout.is_zero() {
                    if let Some(n) = self.nodes.get(&leader) {
                        if n.ready.saturating_duration_since(n.drain) > self.availability_timeout {
                            index -= 1;
                        }
                    }
                }
            }
            let racks: Vec<Option<&str>> = ids
                .iter()
                .map(|&p| leader_rack(&self.broker_racks, tm, p))
                .collect();
            bp.update_partition_load_stats_with_racks(
                Some(&sizes),
                &ids,
                &racks,
                (index + 1) as usize,
            );
        }
    }

    /// `node` had batches ready at `now`; `can_drain`: it could take a request
    /// (`updateNodeLatencyStats`).
    pub(crate) fn node_ready(&mut self, node: i32, now: Instant, can_drain: bool) {
        if self.availability_timeout.is_zero() {
            return;
        }
        let n = self.nodes.entry(node).or_insert(NodeLatency {
            ready: now,
            drain: now,
        });
        if can_drain {
            n.drain = now;
        }
        n.ready = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::PartitionMetadata;
    use crate::producer_batch::ProducerRecord;
    use crate::producer_config::ProducerConfig;
    use uuid::Uuid;

    fn topic(leaders: &[i32]) -> TopicMetadata {
        TopicMetadata {
            name: "t".into(),
            topic_id: Uuid::nil(),
            is_internal: false,
            partitions: leaders
                .iter()
                .enumerate()
                .map(|(p, &leader)| PartitionMetadata {
                    partition: p as i32,
                    leader,
                    leader_epoch: 0,
                    replicas: vec![],
                    isr: vec![],
                    offline_replicas: vec![],
                    error: None,
                })
                .collect(),
            error: None,
        }
    }

    fn config(props: &[(&str, &str)]) -> ProducerConfig {
        ProducerConfig::from_properties(props).unwrap()
    }

    fn rec(value: usize) -> ProducerRecord {
        ProducerRecord {
            topic: "t".into(),
            partition: None,
            key: None,
            value: Some(Bytes::from(vec![b'x'; value])),
            headers: vec![],
            timestamp: None,
        }
    }

    /// Appends `value`-byte unkeyed records the way the producer does, returning the partition
    /// of each; with `drain` every queue is sent (emptied) after each record, as with a
    /// linger shorter than the time between records.
    fn produce(
        p: &mut Partitioning,
        tm: &TopicMetadata,
        batch_size: usize,
        values: usize,
        count: usize,
        drain: bool,
    ) -> Vec<i32> {
        let mut queues: HashMap<Tp, VecDeque<ProducerBatch>> = HashMap::new();
        (0..count)
            .map(|i| {
                let (part, sticky) = p.partition("t", None, tm, &queues);
                assert!(sticky);
                let q = queues.entry(("t".into(), part)).or_default();
                let before: usize = q.iter().map(|b| b.size()).sum();
                let r = rec(values);
                let r = match q.back_mut() {
                    Some(b) => match b.try_append(r, None, batch_size) {
                        Ok(()) => None,
                        Err((r, _)) => {
                            b.full = true;
                            Some(r)
                        }
                    },
                    None => Some(r),
                };
                if let Some(r) = r {
                    let mut b = ProducerBatch::new("t", part, i as u64);
                    let _ = b.try_append(r, None, batch_size);
                    q.push_back(b);
                }
                let after: usize = q.iter().map(|b| b.size()).sum();
                p.appended(tm, part, true, after - before, q);
                if drain {
                    q.clear();
                }
                part
            })
            .collect()
    }

    /// Lengths of the runs of equal partitions (a switch may pick the same partition again,
    /// so a run is a whole number of stints).
    fn runs(parts: &[i32]) -> Vec<usize> {
        let mut runs: Vec<(i32, usize)> = Vec::new();
        for &x in parts {
            match runs.last_mut() {
                Some((q, n)) if *q == x => *n += 1,
                _ => runs.push((x, 1)),
            }
        }
        runs.into_iter().map(|(_, n)| n).collect()
    }

    #[test]
    fn the_sticky_partition_holds_for_batch_size_bytes_then_moves_to_a_led_partition() {
        let tm = topic(&[1, -1, 2, 3]);
        // Sent right away: every append opens a batch (overhead + record, c bytes), and the
        // partition switches once batch.size bytes went to it: after ceil(1000 / c) records.
        let mut p = Partitioning::new(&config(&[("batch.size", "1000")]));
        let parts = produce(&mut p, &tm, 1000, 90, 400, true);
        assert!(parts.iter().all(|&x| x != 1), "partition 1 has no leader");
        let value = Some(Bytes::from(vec![b'x'; 90]));
        let rec_size = crate::producer_batch::record_size(&None, &value, &[]);
        let c = ProducerBatch::new("t", 0, 0).size() + rec_size;
        let stint = 1000usize.div_ceil(c);
        let r = runs(&parts);
        assert!(r.len() >= 10, "{r:?}");
        assert!(
            r[..r.len() - 1].iter().all(|n| n % stint == 0),
            "{stint}: {r:?}"
        );
        // Never sent: the open batch is never full, so the switch waits for 2 x batch.size.
        let mut p = Partitioning::new(&config(&[("batch.size", "1000")]));
        let r = runs(&produce(&mut p, &tm, 1000, 90, 400, false));
        let min = *r[..r.len() - 1].iter().min().unwrap();
        // At least 2000 bytes (records plus batch headers), and not one record more.
        assert!(
            min > stint && (min - 1) * rec_size < 2000 && min * c >= 2000,
            "{stint}: {r:?}"
        );
        assert!(r[..r.len() - 1].iter().all(|n| n % min == 0), "{r:?}");
    }

    #[test]
    fn rack_aware_sticky_partitions_are_led_in_the_client_rack() {
        let tm = topic(&[1, 2, 3, 4]);
        let mut md = ClusterMetadata::default();
        for (id, rack) in [(1, "a"), (2, "b"), (3, "a"), (4, "b")] {
            md.brokers.insert(
                id,
                crate::client::BrokerInfo {
                    node_id: id,
                    host: "h".into(),
                    port: 1,
                    rack: Some(rack.into()),
                },
            );
        }
        let mut p = Partitioning::new(&config(&[
            ("batch.size", "200"),
            ("partitioner.rack.aware", "true"),
            ("client.rack", "b"),
        ]));
        p.note_brokers(&md);
        let parts = produce(&mut p, &tm, 200, 50, 300, true);
        assert!(parts.iter().all(|&x| x == 1 || x == 3), "{parts:?}");
        assert!(parts.contains(&1) && parts.contains(&3), "{parts:?}");
        // A rack no leader is in: every partition.
        let mut p = Partitioning::new(&config(&[
            ("batch.size", "200"),
            ("partitioner.rack.aware", "true"),
            ("client.rack", "c"),
        ]));
        p.note_brokers(&md);
        let parts = produce(&mut p, &tm, 200, 50, 300, true);
        assert!((0..4).all(|x| parts.contains(&x)), "{parts:?}");
    }

    #[test]
    fn keys_hash_unless_ignored_and_round_robin_takes_every_record() {
        let tm = topic(&[1, 1, 1]);
        let queues = HashMap::new();
        let key = Bytes::from_static(b"21");
        let mut p = Partitioning::new(&config(&[]));
        assert_eq!(
            p.partition("t", Some(&key), &tm, &queues),
            (partition_for_key(b"21", 3), false)
        );
        let mut p = Partitioning::new(&config(&[("partitioner.ignore.keys", "true")]));
        assert!(p.partition("t", Some(&key), &tm, &queues).1);
        let mut p = Partitioning::new(&config(&[(
            "partitioner.class",
            "org.apache.kafka.clients.producer.RoundRobinPartitioner",
        )]));
        let got: Vec<i32> = (0..4)
            .map(|_| p.partition("t", Some(&key), &tm, &queues).0)
            .collect();
        assert_eq!(got, [0, 1, 2, 0]);
    }

    /// With queues on every partition, a partition with a long queue gets (almost) no new
    /// sticky picks, and one whose leader has not been drained for the availability timeout
    /// gets none.
    #[test]
    fn load_stats_and_availability_steer_the_sticky_choice() {
        let tm = topic(&[1, 2, 3]);
        let mut md = ClusterMetadata::default();
        md.topics.insert("t".into(), tm.clone());
        let mut p = Partitioning::new(&config(&[
            ("batch.size", "1"),
            ("partitioner.availability.timeout.ms", "100"),
        ]));
        let mut queues: HashMap<Tp, VecDeque<ProducerBatch>> = HashMap::new();
        for (part, len) in [(0, 40), (1, 1), (2, 1)] {
            let q = queues.entry(("t".into(), part)).or_default();
            for i in 0..len {
                q.push_back(ProducerBatch::new("t", part, i));
            }
            p.seen.entry("t".into()).or_default().insert(part);
        }
        p.built_in.insert("t".into(), BuiltInPartitioner::new(1));
        let t0 = Instant::now();
        p.node_ready(3, t0, true);
        p.node_ready(3, t0 + Duration::from_millis(500), false);
        p.update_load_stats(&md, &queues);
        let bp = p.built_in.get_mut("t").unwrap();
        // Queues 40 1 (1 left out): max + 1 = 41, weights 1 40.
        assert_eq!(bp.load_stats_range_end(), Some(41));
        let view = TopicPartitions {
            num_partitions: 3,
            available: &[0, 1, 2],
            leader_racks: &[],
        };
        let mut counts = [0; 3];
        for _ in 0..2000 {
            bp.update_partition_info(1, view, true);
            counts[bp.peek_current_partition(view) as usize] += 1;
        }
        assert_eq!(counts[2], 0, "{counts:?}");
        assert!(counts[1] > 1800 && counts[0] < 200, "{counts:?}");
        // Adaptive partitioning off: no stats.
        p.adaptive = false;
        p.update_load_stats(&md, &queues);
        assert_eq!(p.built_in["t"].load_stats_range_end(), None);
    }
}

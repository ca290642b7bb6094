//! Kafka's default partitioning: `toPositive(murmur2(key)) % numPartitions` for keyed records,
//! a sticky partition (changed when a batch is completed) for records without a key.

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
pub fn partition_for_key(key: &[u8], num_partitions: i32) -> i32 {
    to_positive(murmur2(key)) % num_partitions
}

/// Picks partitions for records without a key: the same partition until
/// [`StickyPartitioner::batch_completed`] is called for it, then a different random one.
#[derive(Debug, Default)]
pub struct StickyPartitioner {
    current: HashMap<String, i32>,
}

impl StickyPartitioner {
    /// The sticky partition for `topic`.
    pub fn partition(&mut self, topic: &str, num_partitions: i32) -> i32 {
        if let Some(&p) = self.current.get(topic) {
            if p < num_partitions {
                return p;
            }
        }
        let p = rand::random_range(0..num_partitions.max(1));
        self.current.insert(topic.to_string(), p);
        p
    }

    /// A batch for `topic`/`partition` was closed: move on to another partition.
    pub fn batch_completed(&mut self, topic: &str, partition: i32, num_partitions: i32) {
        if self.current.get(topic) != Some(&partition) {
            return;
        }
        let next = if num_partitions <= 1 {
            0
        } else {
            let r = rand::random_range(0..num_partitions - 1);
            if r >= partition {
                r + 1
            } else {
                r
            }
        };
        self.current.insert(topic.to_string(), next);
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

    #[test]
    fn sticky_switches_after_batch() {
        let mut s = StickyPartitioner::default();
        let p = s.partition("t", 4);
        assert_eq!(s.partition("t", 4), p);
        s.batch_completed("t", p, 4);
        let q = s.partition("t", 4);
        assert_ne!(p, q);
        assert!((0..4).contains(&q));
        // Completing a batch on another partition does not move the sticky one.
        s.batch_completed("t", (q + 1) % 4, 4);
        assert_eq!(s.partition("t", 4), q);
        let mut one = StickyPartitioner::default();
        assert_eq!(one.partition("x", 1), 0);
        one.batch_completed("x", 0, 1);
        assert_eq!(one.partition("x", 1), 0);
    }
}

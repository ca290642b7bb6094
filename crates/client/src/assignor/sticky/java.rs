//! Java's hash-based iteration orders, reproduced where the sticky assignors' result depends on
//! them: the order of a `HashMap<String, _>` of member ids (which member claims an owned
//! partition first, which previous owner wins a generation tie) and the first element of a
//! `HashSet<TopicPartition>` (which partition the general path moves back).
//!
//! A `java.util.HashMap` iterates its table bucket by bucket; a bucket holds its entries in
//! insertion order (resizing splits a bucket preserving that order), and the table only grows:
//! from 16 buckets, doubling whenever the size exceeds three quarters of it. Buckets that
//! Java would turn into trees (more than 8 colliding entries) are not modelled; with the
//! spread hash below that needs 9 keys in one bucket, which the assignors' maps of member ids
//! and partitions of one topic do not produce in practice.

use crate::assignor::TopicPartition;

use strom_protocol::java::hash_spread as spread;
pub(crate) use strom_protocol::java::string_cmp as java_cmp;
pub(crate) use strom_protocol::java::{hash_map_order as hash_order, string_hash};

/// `TopicPartition.hashCode()`.
pub(crate) fn topic_partition_hash(tp: &TopicPartition) -> i32 {
    31i32
        .wrapping_add(tp.partition)
        .wrapping_mul(31)
        .wrapping_add(string_hash(&tp.topic))
}

/// A `HashSet<TopicPartition>` that knows which element Java's iterator yields first.
#[derive(Debug, Clone)]
pub(crate) struct PartitionHashSet {
    entries: Vec<(TopicPartition, u64)>,
    capacity: usize,
    next_seq: u64,
}

impl Default for PartitionHashSet {
    /// Java's default table of 16 buckets.
    fn default() -> Self {
        Self::new()
    }
}

impl PartitionHashSet {
    pub(crate) fn new() -> Self {
        Self {
            entries: Vec::new(),
            capacity: 16,
            next_seq: 0,
        }
    }

    pub(crate) fn insert(&mut self, tp: TopicPartition) {
        if self.entries.iter().any(|(e, _)| *e == tp) {
            return;
        }
        self.entries.push((tp, self.next_seq));
        self.next_seq += 1;
        if self.entries.len() > self.capacity / 4 * 3 {
            self.capacity *= 2;
        }
    }

    pub(crate) fn remove(&mut self, tp: &TopicPartition) {
        self.entries.retain(|(e, _)| e != tp);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// `set.iterator().next()`.
    pub(crate) fn first(&self) -> Option<&TopicPartition> {
        let mask = self.capacity - 1;
        self.entries
            .iter()
            .min_by_key(|(tp, seq)| ((spread(topic_partition_hash(tp)) as usize) & mask, *seq))
            .map(|(tp, _)| tp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strom_protocol::java::hash_map_capacity as capacity_for;

    #[test]
    fn string_hash_matches_java() {
        // "hello".hashCode() == 99162322, "".hashCode() == 0.
        assert_eq!(string_hash("hello"), 99_162_322);
        assert_eq!(string_hash(""), 0);
        // Overflows wrap: "polygenelubricants".hashCode() == Integer.MIN_VALUE.
        assert_eq!(string_hash("polygenelubricants"), i32::MIN);
    }

    #[test]
    fn capacity_grows_past_three_quarters() {
        assert_eq!(capacity_for(0), 16);
        assert_eq!(capacity_for(12), 16);
        assert_eq!(capacity_for(13), 32);
        assert_eq!(capacity_for(25), 64);
    }
}

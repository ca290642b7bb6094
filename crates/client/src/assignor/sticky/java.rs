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

use std::cmp::Ordering;

use crate::assignor::TopicPartition;

/// `String.hashCode()`: over UTF-16 code units, wrapping.
pub(crate) fn string_hash(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)))
}

/// `TopicPartition.hashCode()`.
pub(crate) fn topic_partition_hash(tp: &TopicPartition) -> i32 {
    31i32
        .wrapping_add(tp.partition)
        .wrapping_mul(31)
        .wrapping_add(string_hash(&tp.topic))
}

/// `String.compareTo`: Java compares UTF-16 code units, which differs from Rust's byte order
/// for characters above U+FFFF against U+E000..U+FFFF.
pub(crate) fn java_cmp(a: &str, b: &str) -> Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}

/// `HashMap.hash()`: the high half folded into the low half.
fn spread(h: i32) -> u32 {
    let h = h as u32;
    h ^ (h >> 16)
}

/// The table size of a `new HashMap<>()` after `n` distinct insertions.
fn capacity_for(n: usize) -> usize {
    let mut cap = 16usize;
    while n > cap / 4 * 3 {
        cap *= 2;
    }
    cap
}

/// The iteration order of a `new HashMap<>()` (or `HashSet`) into which `items` were put in
/// this order (distinct keys).
pub(crate) fn hash_order<T>(items: Vec<T>, hash: impl Fn(&T) -> i32) -> Vec<T> {
    let mask = capacity_for(items.len()) - 1;
    let mut keyed: Vec<(usize, T)> = items
        .into_iter()
        .map(|t| ((spread(hash(&t)) as usize) & mask, t))
        .collect();
    // Stable: ties (one bucket) keep insertion order.
    keyed.sort_by_key(|(bucket, _)| *bucket);
    keyed.into_iter().map(|(_, t)| t).collect()
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

//! State a coordinator shard can roll back and read as of its committed offset.
//!
//! A shard applies a write's records the moment it makes them (so the next write sees them),
//! but they are only durable once the partition's high watermark passes them. Until then two
//! things must stay possible: reading the state as it is *committed* (reads must not see what
//! could still be lost) and *reverting* everything a failed append applied. Kafka keeps the
//! shard's state in timeline structures over a snapshot registry for this; here each structure
//! keeps an undo log: every change made at write offset `at` remembers what it replaced, the
//! log is cut below the committed offset as the high watermark advances, and reverting replays
//! it backwards. Memory for the history is proportional to the uncommitted writes only.
//!
//! Offsets: a change is tagged with the base offset of the batch its write appends. With the
//! high watermark `hw`, changes tagged `< hw` are committed.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

/// What a shard calls on each of its timeline structures.
pub trait Timeline {
    /// Undoes every change tagged `>= offset` (a failed append of the batch at `offset`, and
    /// of any written after it).
    fn revert_to(&mut self, offset: i64);
    /// Forgets the history of changes tagged `< committed`: they can no longer be reverted.
    fn commit(&mut self, committed: i64);
}

/// A map with history (Kafka's `TimelineHashMap`).
#[derive(Debug, Clone)]
pub struct TimelineMap<K, V> {
    current: HashMap<K, V>,
    /// (tag, key, value before the change), in the order the changes were made.
    undo: VecDeque<(i64, K, Option<V>)>,
    /// How many undo entries each key has, so a committed read of a key without
    /// uncommitted changes does not scan the log.
    pending: HashMap<K, usize>,
}

impl<K: Eq + Hash + Clone, V: Clone> Default for TimelineMap<K, V> {
    fn default() -> Self {
        Self {
            current: HashMap::new(),
            undo: VecDeque::new(),
            pending: HashMap::new(),
        }
    }
}

impl<K: Eq + Hash + Clone, V: Clone> TimelineMap<K, V> {
    pub fn new() -> Self {
        Self::default()
    }

    fn remember(&mut self, at: i64, key: &K, before: Option<V>) {
        debug_assert!(
            self.undo.back().is_none_or(|(t, _, _)| *t <= at),
            "changes are tagged in offset order"
        );
        self.undo.push_back((at, key.clone(), before));
        *self.pending.entry(key.clone()).or_default() += 1;
    }

    /// Sets `key` by the write at offset `at`; returns the value it replaced.
    pub fn insert(&mut self, at: i64, key: K, value: V) -> Option<V> {
        let before = self.current.insert(key.clone(), value);
        self.remember(at, &key, before.clone());
        before
    }

    /// Removes `key` by the write at offset `at`.
    pub fn remove(&mut self, at: i64, key: &K) -> Option<V> {
        let before = self.current.remove(key);
        if before.is_some() {
            self.remember(at, key, before.clone());
        }
        before
    }

    /// The latest value, uncommitted changes included (what a write works on).
    pub fn get(&self, key: &K) -> Option<&V> {
        self.current.get(key)
    }

    pub fn contains_key(&self, key: &K) -> bool {
        self.current.contains_key(key)
    }

    /// The value as of offset `committed`: the latest change tagged below it.
    pub fn get_committed(&self, key: &K, committed: i64) -> Option<&V> {
        if !self.pending.contains_key(key) {
            return self.current.get(key);
        }
        // The oldest uncommitted change of this key holds the committed value.
        match self
            .undo
            .iter()
            .find(|(at, k, _)| *at >= committed && k == key)
        {
            Some((_, _, before)) => before.as_ref(),
            None => self.current.get(key),
        }
    }

    /// Every key and its latest value.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.current.iter()
    }

    /// Every key with a value as of offset `committed`.
    pub fn committed_entries(&self, committed: i64) -> Vec<(K, V)> {
        let mut out: HashMap<K, Option<V>> = self
            .current
            .iter()
            .map(|(k, v)| (k.clone(), Some(v.clone())))
            .collect();
        // Walking the uncommitted changes newest first leaves each key at its oldest
        // uncommitted change's "before", which is the committed value.
        for (at, k, before) in self.undo.iter().rev() {
            if *at < committed {
                break;
            }
            out.insert(k.clone(), before.clone());
        }
        out.into_iter()
            .filter_map(|(k, v)| v.map(|v| (k, v)))
            .collect()
    }

    pub fn len(&self) -> usize {
        self.current.len()
    }

    pub fn is_empty(&self) -> bool {
        self.current.is_empty()
    }

    /// Changes not yet committed (for tests and metrics).
    pub fn uncommitted_changes(&self) -> usize {
        self.undo.len()
    }

    fn forget_pending(&mut self, key: &K) {
        if let Some(n) = self.pending.get_mut(key) {
            *n -= 1;
            if *n == 0 {
                self.pending.remove(key);
            }
        }
    }
}

impl<K: Eq + Hash + Clone, V: Clone> Timeline for TimelineMap<K, V> {
    fn revert_to(&mut self, offset: i64) {
        while let Some((at, _, _)) = self.undo.back() {
            if *at < offset {
                break;
            }
            let (_, key, before) = self.undo.pop_back().expect("checked above");
            match before {
                Some(v) => self.current.insert(key.clone(), v),
                None => self.current.remove(&key),
            };
            self.forget_pending(&key);
        }
    }

    fn commit(&mut self, committed: i64) {
        while let Some((at, _, _)) = self.undo.front() {
            if *at >= committed {
                break;
            }
            let (_, key, _) = self.undo.pop_front().expect("checked above");
            self.forget_pending(&key);
        }
    }
}

/// One value with history (Kafka's `TimelineObject`).
#[derive(Debug, Clone)]
pub struct TimelineValue<T> {
    current: T,
    undo: VecDeque<(i64, T)>,
}

impl<T: Clone> TimelineValue<T> {
    pub fn new(value: T) -> Self {
        Self {
            current: value,
            undo: VecDeque::new(),
        }
    }

    pub fn get(&self) -> &T {
        &self.current
    }

    pub fn set(&mut self, at: i64, value: T) {
        let before = std::mem::replace(&mut self.current, value);
        self.undo.push_back((at, before));
    }

    pub fn get_committed(&self, committed: i64) -> &T {
        self.undo
            .iter()
            .find(|(at, _)| *at >= committed)
            .map_or(&self.current, |(_, before)| before)
    }
}

impl<T: Clone> Timeline for TimelineValue<T> {
    fn revert_to(&mut self, offset: i64) {
        while self.undo.back().is_some_and(|(at, _)| *at >= offset) {
            let (_, before) = self.undo.pop_back().expect("checked above");
            self.current = before;
        }
    }

    fn commit(&mut self, committed: i64) {
        while self.undo.front().is_some_and(|(at, _)| *at < committed) {
            self.undo.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_as_of_the_committed_offset_and_reverts_a_failed_write() {
        let mut m: TimelineMap<&str, i64> = TimelineMap::new();
        m.insert(0, "a", 1); // write at offset 0
        m.insert(1, "a", 2); // write at offset 1
        m.insert(1, "b", 10);
        m.insert(3, "a", 3); // write at offset 3
        m.remove(3, &"b");
        assert_eq!(m.get(&"a"), Some(&3));
        assert_eq!(m.get(&"b"), None);
        // HW 0: nothing committed.
        assert_eq!(m.get_committed(&"a", 0), None);
        // HW 1: the write at 0.
        assert_eq!(m.get_committed(&"a", 1), Some(&1));
        assert_eq!(m.get_committed(&"b", 1), None);
        // HW 3: the writes at 0 and 1.
        assert_eq!(m.get_committed(&"a", 3), Some(&2));
        assert_eq!(m.get_committed(&"b", 3), Some(&10));
        let mut committed = m.committed_entries(3);
        committed.sort();
        assert_eq!(committed, vec![("a", 2), ("b", 10)]);
        // The append at 3 failed: back to the state after offset 1.
        m.revert_to(3);
        assert_eq!(m.get(&"a"), Some(&2));
        assert_eq!(m.get(&"b"), Some(&10));
        // HW reaches 3: history below it is gone, the state stays.
        m.commit(3);
        assert_eq!(m.uncommitted_changes(), 0);
        assert_eq!(m.get_committed(&"a", 3), Some(&2));
        m.revert_to(3);
        assert_eq!(m.get(&"a"), Some(&2), "committed changes are not reverted");
    }

    #[test]
    fn a_value_reverts_and_reads_committed() {
        let mut v = TimelineValue::new("Empty");
        v.set(5, "PreparingRebalance");
        v.set(6, "CompletingRebalance");
        assert_eq!(*v.get_committed(5), "Empty");
        assert_eq!(*v.get_committed(6), "PreparingRebalance");
        assert_eq!(*v.get_committed(7), "CompletingRebalance");
        v.revert_to(6);
        assert_eq!(*v.get(), "PreparingRebalance");
        v.commit(6);
        v.revert_to(0);
        assert_eq!(*v.get(), "PreparingRebalance");
    }
}

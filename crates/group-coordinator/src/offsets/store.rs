//! The committed offsets of one shard, by group, with history (Kafka's `Offsets`: a timeline
//! map of group -> topic -> partition -> offset).
//!
//! Each group has its own [`TimelineMap`] so a fetch or a deletion of one group touches only
//! that group's offsets. The shard-wide undo order lives in `touched`: which group each
//! uncommitted change went to, so committing or reverting visits only the groups that changed
//! since the high watermark, and a group whose offsets are all gone is dropped once no
//! uncommitted change can bring them back.

use std::collections::{HashMap, VecDeque};

use strom_coordinator_common::timeline::{Timeline, TimelineMap};
use uuid::Uuid;

use crate::records::{LegacyOffsetCommitValue, OffsetCommitValue};

/// One committed offset as the coordinator keeps it (Kafka's `OffsetAndMetadata`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetAndMetadata {
    /// Where the record that set it lies in `__consumer_offsets` (transactional offsets
    /// materialise only over older records, as Kafka compares them).
    pub record_offset: i64,
    pub committed_offset: i64,
    /// `None` for the -1 sentinel.
    pub leader_epoch: Option<i32>,
    pub metadata: String,
    pub commit_timestamp_ms: i64,
    /// Only offsets committed with an explicit retention (OffsetCommit v2-v4
    /// `retention_time_ms`) carry one; they expire at it whatever the group does.
    pub expire_timestamp_ms: Option<i64>,
    /// Nil unless the commit named the topic by id.
    pub topic_id: Uuid,
}

impl OffsetAndMetadata {
    /// From an `OffsetCommitValue` record at `record_offset` (Kafka's `fromRecord`).
    pub fn from_record(record_offset: i64, v: &OffsetCommitValue) -> Self {
        Self {
            record_offset,
            committed_offset: v.offset,
            leader_epoch: (v.leader_epoch != -1).then_some(v.leader_epoch),
            metadata: v.metadata.clone(),
            commit_timestamp_ms: v.commit_timestamp,
            expire_timestamp_ms: (v.expire_timestamp != -1).then_some(v.expire_timestamp),
            topic_id: v.topic_id,
        }
    }

    /// From a record of the legacy (type 0) schema, which has neither leader epoch nor
    /// expire timestamp.
    pub fn from_legacy_record(record_offset: i64, v: &LegacyOffsetCommitValue) -> Self {
        Self {
            record_offset,
            committed_offset: v.offset,
            leader_epoch: None,
            metadata: v.metadata.clone(),
            commit_timestamp_ms: v.commit_timestamp,
            expire_timestamp_ms: None,
            topic_id: Uuid::nil(),
        }
    }
}

/// (topic, partition).
pub type PartitionKey = (String, i32);

#[derive(Default)]
pub struct OffsetStore {
    groups: HashMap<String, TimelineMap<PartitionKey, OffsetAndMetadata>>,
    /// (write offset, group) of every change not yet committed, oldest first.
    touched: VecDeque<(i64, String)>,
}

impl OffsetStore {
    pub fn put(&mut self, at: i64, group: &str, key: PartitionKey, value: OffsetAndMetadata) {
        self.groups
            .entry(group.to_string())
            .or_default()
            .insert(at, key, value);
        self.touched.push_back((at, group.to_string()));
    }

    /// Removes one offset; returns whether there was one.
    pub fn remove(&mut self, at: i64, group: &str, key: &PartitionKey) -> bool {
        let Some(map) = self.groups.get_mut(group) else {
            return false;
        };
        let removed = map.remove(at, key).is_some();
        if removed {
            self.touched.push_back((at, group.to_string()));
        }
        removed
    }

    /// The latest value (what writes work on).
    pub fn get(&self, group: &str, topic: &str, partition: i32) -> Option<&OffsetAndMetadata> {
        self.groups.get(group)?.get(&(topic.to_string(), partition))
    }

    /// The value as of `committed` (`i64::MAX`: the latest).
    pub fn get_committed(
        &self,
        group: &str,
        topic: &str,
        partition: i32,
        committed: i64,
    ) -> Option<&OffsetAndMetadata> {
        self.groups
            .get(group)?
            .get_committed(&(topic.to_string(), partition), committed)
    }

    /// Every offset of `group` as of `committed`, sorted by topic then partition.
    pub fn group_committed(
        &self,
        group: &str,
        committed: i64,
    ) -> Vec<(PartitionKey, OffsetAndMetadata)> {
        let Some(map) = self.groups.get(group) else {
            return Vec::new();
        };
        let mut v = if committed == i64::MAX {
            map.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
        } else {
            map.committed_entries(committed)
        };
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    /// The latest offsets of `group`, sorted by topic then partition.
    pub fn group_latest(&self, group: &str) -> Vec<(PartitionKey, OffsetAndMetadata)> {
        self.group_committed(group, i64::MAX)
    }

    /// Whether `group` has an offset now.
    pub fn has_group(&self, group: &str) -> bool {
        self.groups.get(group).is_some_and(|m| !m.is_empty())
    }

    /// Groups with at least one offset now, sorted.
    pub fn group_ids(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .groups
            .iter()
            .filter(|(_, m)| !m.is_empty())
            .map(|(g, _)| g.clone())
            .collect();
        v.sort();
        v
    }

    /// How many offsets the shard holds now.
    pub fn len(&self) -> usize {
        self.groups.values().map(|m| m.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn drop_if_gone(&mut self, group: &str) {
        if self
            .groups
            .get(group)
            .is_some_and(|m| m.is_empty() && m.uncommitted_changes() == 0)
        {
            self.groups.remove(group);
        }
    }
}

impl Timeline for OffsetStore {
    fn revert_to(&mut self, offset: i64) {
        let mut groups = Vec::new();
        while self.touched.back().is_some_and(|(at, _)| *at >= offset) {
            let (_, g) = self.touched.pop_back().expect("checked above");
            groups.push(g);
        }
        groups.sort();
        groups.dedup();
        for g in groups {
            if let Some(m) = self.groups.get_mut(&g) {
                m.revert_to(offset);
            }
            self.drop_if_gone(&g);
        }
    }

    fn commit(&mut self, committed: i64) {
        let mut groups = Vec::new();
        while self.touched.front().is_some_and(|(at, _)| *at < committed) {
            let (_, g) = self.touched.pop_front().expect("checked above");
            groups.push(g);
        }
        groups.sort();
        groups.dedup();
        for g in groups {
            if let Some(m) = self.groups.get_mut(&g) {
                m.commit(committed);
            }
            self.drop_if_gone(&g);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn om(offset: i64) -> OffsetAndMetadata {
        OffsetAndMetadata {
            record_offset: 0,
            committed_offset: offset,
            leader_epoch: None,
            metadata: String::new(),
            commit_timestamp_ms: 0,
            expire_timestamp_ms: None,
            topic_id: Uuid::nil(),
        }
    }

    fn key(t: &str, p: i32) -> PartitionKey {
        (t.to_string(), p)
    }

    #[test]
    fn committed_reads_revert_and_dropping_empty_groups() {
        let mut s = OffsetStore::default();
        s.put(0, "g", key("t", 0), om(5));
        s.commit(1);
        s.put(1, "g", key("t", 0), om(6));
        s.put(1, "h", key("t", 1), om(1));
        // HW 1: the write at 1 is not committed.
        assert_eq!(s.get_committed("g", "t", 0, 1).unwrap().committed_offset, 5);
        assert!(s.get_committed("h", "t", 1, 1).is_none());
        assert!(s.group_committed("h", 1).is_empty());
        assert_eq!(s.get("g", "t", 0).unwrap().committed_offset, 6);
        // The append at 1 failed.
        s.revert_to(1);
        assert_eq!(s.get("g", "t", 0).unwrap().committed_offset, 5);
        assert!(!s.has_group("h"));
        assert!(
            !s.groups.contains_key("h"),
            "a group with nothing left is dropped"
        );
        // A tombstone, committed: the group goes.
        assert!(s.remove(2, "g", &key("t", 0)));
        assert_eq!(s.group_committed("g", 2).len(), 1, "still there as of HW 2");
        s.commit(3);
        assert!(s.groups.is_empty());
        assert!(s.touched.is_empty());
    }
}

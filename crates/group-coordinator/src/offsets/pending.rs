//! Transactional offsets waiting for their transaction's end marker (Kafka's
//! `pendingTransactionalOffsets` and `openTransactionsByGroup`).
//!
//! A TxnOffsetCommit's records are written in a transactional batch of the producer; replayed,
//! they land here instead of in the committed offsets, invisible to OffsetFetch. The
//! producer's COMMIT marker moves them to the committed offsets, an ABORT drops them. Until
//! then, OffsetFetch with `require_stable` answers UNSTABLE_OFFSET_COMMIT for their
//! partitions, and expiry, OffsetDelete and DeleteGroups take them into account.
//!
//! Everything is kept in timeline maps tagged with the offset of the record or marker that
//! made the change, so a failed append (of the offsets or of the marker) rolls it back.

use std::collections::BTreeSet;

use strom_coordinator_common::timeline::{Timeline, TimelineMap};

use super::store::{OffsetAndMetadata, PartitionKey};

/// (producer id, group, (topic, partition)).
type PendingKey = (i64, String, PartitionKey);

#[derive(Default)]
pub struct PendingTransactionalOffsets {
    /// Producer ids with pending offsets, by group.
    open_by_group: TimelineMap<String, BTreeSet<i64>>,
    /// Groups each producer has pending offsets in (what its marker visits).
    groups_by_producer: TimelineMap<i64, BTreeSet<String>>,
    offsets: TimelineMap<PendingKey, OffsetAndMetadata>,
}

impl PendingTransactionalOffsets {
    /// Whether some open transaction holds an offset of this partition for `group`.
    pub fn has_pending(&self, group: &str, topic: &str, partition: i32) -> bool {
        let Some(pids) = self.open_by_group.get(&group.to_string()) else {
            return false;
        };
        let key = (topic.to_string(), partition);
        pids.iter().any(|pid| {
            self.offsets
                .contains_key(&(*pid, group.to_string(), key.clone()))
        })
    }

    /// Whether `group` has an open transaction.
    pub fn has_open_transactions(&self, group: &str) -> bool {
        self.open_by_group.contains_key(&group.to_string())
    }

    /// Every partition with a pending offset for `group`.
    pub fn pending_partitions(&self, group: &str) -> BTreeSet<PartitionKey> {
        if !self.has_open_transactions(group) {
            return BTreeSet::new();
        }
        self.offsets
            .iter()
            .filter(|((_, g, _), _)| g == group)
            .map(|((_, _, key), _)| key.clone())
            .collect()
    }

    /// The pending offset of `producer_id` for this partition of `group`.
    pub fn get(
        &self,
        producer_id: i64,
        group: &str,
        topic: &str,
        partition: i32,
    ) -> Option<&OffsetAndMetadata> {
        self.offsets.get(&(
            producer_id,
            group.to_string(),
            (topic.to_string(), partition),
        ))
    }

    /// A transactional offset commit record of `producer_id` replayed at `at`.
    pub fn put(
        &mut self,
        at: i64,
        producer_id: i64,
        group: &str,
        key: PartitionKey,
        value: OffsetAndMetadata,
    ) {
        self.offsets
            .insert(at, (producer_id, group.to_string(), key), value);
        let group = group.to_string();
        if !self
            .open_by_group
            .get(&group)
            .is_some_and(|s| s.contains(&producer_id))
        {
            let mut pids = self.open_by_group.get(&group).cloned().unwrap_or_default();
            pids.insert(producer_id);
            self.open_by_group.insert(at, group.clone(), pids);
        }
        if !self
            .groups_by_producer
            .get(&producer_id)
            .is_some_and(|s| s.contains(&group))
        {
            let mut groups = self
                .groups_by_producer
                .get(&producer_id)
                .cloned()
                .unwrap_or_default();
            groups.insert(group);
            self.groups_by_producer.insert(at, producer_id, groups);
        }
    }

    /// A tombstone of the partition replayed at `at` also drops its pending offsets (Kafka's
    /// replay of a tombstone; the transactions stay open).
    pub fn remove_partition(&mut self, at: i64, group: &str, key: &PartitionKey) {
        let Some(pids) = self.open_by_group.get(&group.to_string()).cloned() else {
            return;
        };
        for pid in pids {
            self.offsets
                .remove(at, &(pid, group.to_string(), key.clone()));
        }
    }

    /// The end marker of `producer_id`'s transaction, replayed at `at`: its pending offsets
    /// leave (returned, sorted by group and partition) and its transactions close.
    pub fn take_producer(
        &mut self,
        at: i64,
        producer_id: i64,
    ) -> Vec<(String, PartitionKey, OffsetAndMetadata)> {
        let Some(groups) = self.groups_by_producer.remove(at, &producer_id) else {
            return Vec::new();
        };
        for group in &groups {
            if let Some(mut pids) = self.open_by_group.get(group).cloned() {
                pids.remove(&producer_id);
                if pids.is_empty() {
                    self.open_by_group.remove(at, group);
                } else {
                    self.open_by_group.insert(at, group.clone(), pids);
                }
            }
        }
        let mut keys: Vec<PendingKey> = self
            .offsets
            .iter()
            .filter(|((pid, _, _), _)| *pid == producer_id)
            .map(|(k, _)| k.clone())
            .collect();
        keys.sort();
        keys.into_iter()
            .filter_map(|k| {
                let v = self.offsets.remove(at, &k)?;
                Some((k.1, k.2, v))
            })
            .collect()
    }
}

impl Timeline for PendingTransactionalOffsets {
    fn revert_to(&mut self, offset: i64) {
        self.open_by_group.revert_to(offset);
        self.groups_by_producer.revert_to(offset);
        self.offsets.revert_to(offset);
    }

    fn commit(&mut self, committed: i64) {
        self.open_by_group.commit(committed);
        self.groups_by_producer.commit(committed);
        self.offsets.commit(committed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    fn om(record_offset: i64, offset: i64) -> OffsetAndMetadata {
        OffsetAndMetadata {
            record_offset,
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
    fn a_producers_offsets_leave_at_its_marker_and_a_failed_marker_brings_them_back() {
        let mut p = PendingTransactionalOffsets::default();
        p.put(0, 7, "g", key("t", 0), om(0, 10));
        p.put(1, 7, "h", key("t", 1), om(1, 11));
        p.put(2, 8, "g", key("t", 0), om(2, 20));
        assert!(p.has_pending("g", "t", 0));
        assert!(!p.has_pending("g", "t", 1));
        assert_eq!(p.pending_partitions("h"), BTreeSet::from([key("t", 1)]));
        let taken = p.take_producer(3, 7);
        assert_eq!(
            taken,
            vec![
                ("g".to_string(), key("t", 0), om(0, 10)),
                ("h".to_string(), key("t", 1), om(1, 11)),
            ]
        );
        assert!(!p.has_open_transactions("h"));
        assert!(p.has_pending("g", "t", 0), "producer 8's offset stays");
        // The marker's append failed: everything comes back.
        p.revert_to(3);
        assert_eq!(p.get(7, "h", "t", 1), Some(&om(1, 11)));
        assert!(p.has_open_transactions("h"));
        // A tombstone drops the partition's pending offsets, the transactions stay open.
        p.remove_partition(4, "g", &key("t", 0));
        assert!(!p.has_pending("g", "t", 0));
        assert!(p.has_open_transactions("g"));
        p.commit(5);
        assert!(p.take_producer(5, 8).is_empty());
        assert!(
            p.has_open_transactions("g"),
            "producer 7 is still open in g"
        );
        assert_eq!(p.take_producer(6, 7).len(), 1);
        assert!(!p.has_open_transactions("g"));
    }
}

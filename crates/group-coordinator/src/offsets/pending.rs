//! Transactional offsets waiting for their transaction's end marker (Kafka's
//! `pendingTransactionalOffsets` and, as of 4.4, `OpenTransactions` by group and partition).
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

/// (group, (topic, partition)).
type GroupPartition = (String, PartitionKey);

#[derive(Default)]
pub struct PendingTransactionalOffsets {
    /// Producers with a pending offset, by group and partition (Kafka 4.4's
    /// `OpenTransactions`): a partition is unstable while its set is not empty.
    open: TimelineMap<GroupPartition, BTreeSet<i64>>,
    /// How many partitions of each group have an open transaction (a group with any is not
    /// deleted by expiry).
    open_partitions_by_group: TimelineMap<String, usize>,
    /// The partitions each producer has pending offsets in (what its marker visits).
    by_producer: TimelineMap<i64, BTreeSet<GroupPartition>>,
    offsets: TimelineMap<PendingKey, OffsetAndMetadata>,
}

impl PendingTransactionalOffsets {
    /// Whether some open transaction holds an offset of this partition for `group`.
    pub fn has_pending(&self, group: &str, topic: &str, partition: i32) -> bool {
        self.open
            .contains_key(&(group.to_string(), (topic.to_string(), partition)))
    }

    /// Whether `group` has an open transaction.
    pub fn has_open_transactions(&self, group: &str) -> bool {
        self.open_partitions_by_group
            .contains_key(&group.to_string())
    }

    /// Every partition with a pending offset for `group`.
    pub fn pending_partitions(&self, group: &str) -> BTreeSet<PartitionKey> {
        if !self.has_open_transactions(group) {
            return BTreeSet::new();
        }
        self.open
            .iter()
            .filter(|((g, _), _)| g == group)
            .map(|((_, key), _)| key.clone())
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
        let gp: GroupPartition = (group.to_string(), key.clone());
        self.offsets
            .insert(at, (producer_id, group.to_string(), key), value);
        match self.open.get(&gp) {
            Some(pids) if pids.contains(&producer_id) => {}
            Some(pids) => {
                let mut pids = pids.clone();
                pids.insert(producer_id);
                self.open.insert(at, gp.clone(), pids);
            }
            None => {
                self.open
                    .insert(at, gp.clone(), BTreeSet::from([producer_id]));
                let n = self
                    .open_partitions_by_group
                    .get(&gp.0)
                    .copied()
                    .unwrap_or(0);
                self.open_partitions_by_group
                    .insert(at, gp.0.clone(), n + 1);
            }
        }
        if !self
            .by_producer
            .get(&producer_id)
            .is_some_and(|s| s.contains(&gp))
        {
            let mut parts = self
                .by_producer
                .get(&producer_id)
                .cloned()
                .unwrap_or_default();
            parts.insert(gp);
            self.by_producer.insert(at, producer_id, parts);
        }
    }

    /// The partition no longer has an open transaction of `group` (Kafka's
    /// `OpenTransactions.clear`).
    fn close_partition(&mut self, at: i64, gp: &GroupPartition) {
        if self.open.remove(at, gp).is_none() {
            return;
        }
        match self.open_partitions_by_group.get(&gp.0).copied() {
            Some(n) if n > 1 => {
                self.open_partitions_by_group
                    .insert(at, gp.0.clone(), n - 1);
            }
            _ => {
                self.open_partitions_by_group.remove(at, &gp.0);
            }
        }
    }

    /// A tombstone of the partition replayed at `at` also drops its pending offsets, and the
    /// partition's open transactions with them (Kafka's replay of a tombstone).
    pub fn remove_partition(&mut self, at: i64, group: &str, key: &PartitionKey) {
        let gp: GroupPartition = (group.to_string(), key.clone());
        let Some(pids) = self.open.get(&gp).cloned() else {
            return;
        };
        for pid in pids {
            self.offsets
                .remove(at, &(pid, group.to_string(), key.clone()));
            if let Some(mut parts) = self.by_producer.get(&pid).cloned() {
                parts.remove(&gp);
                self.by_producer.insert(at, pid, parts);
            }
        }
        self.close_partition(at, &gp);
    }

    /// The end marker of `producer_id`'s transaction, replayed at `at`: its pending offsets
    /// leave (returned, sorted by group and partition) and their partitions no longer have
    /// its transaction open.
    pub fn take_producer(
        &mut self,
        at: i64,
        producer_id: i64,
    ) -> Vec<(String, PartitionKey, OffsetAndMetadata)> {
        let Some(parts) = self.by_producer.remove(at, &producer_id) else {
            return Vec::new();
        };
        let mut out = Vec::with_capacity(parts.len());
        for gp in parts {
            if let Some(mut pids) = self.open.get(&gp).cloned() {
                pids.remove(&producer_id);
                if pids.is_empty() {
                    self.close_partition(at, &gp);
                } else {
                    self.open.insert(at, gp.clone(), pids);
                }
            }
            let (group, key) = gp;
            if let Some(v) = self
                .offsets
                .remove(at, &(producer_id, group.clone(), key.clone()))
            {
                out.push((group, key, v));
            }
        }
        out
    }
}

impl Timeline for PendingTransactionalOffsets {
    fn revert_to(&mut self, offset: i64) {
        self.open.revert_to(offset);
        self.open_partitions_by_group.revert_to(offset);
        self.by_producer.revert_to(offset);
        self.offsets.revert_to(offset);
    }

    fn commit(&mut self, committed: i64) {
        self.open.commit(committed);
        self.open_partitions_by_group.commit(committed);
        self.by_producer.commit(committed);
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
        // A tombstone drops the partition's pending offsets of every producer, and with them
        // the group's last open partition (as Kafka 4.4's OpenTransactions).
        p.remove_partition(4, "g", &key("t", 0));
        assert!(!p.has_pending("g", "t", 0));
        assert!(!p.has_open_transactions("g"));
        assert!(p.has_open_transactions("h"));
        p.commit(5);
        assert!(p.take_producer(5, 8).is_empty());
        assert_eq!(p.take_producer(6, 7).len(), 1, "h's offset");
        assert!(!p.has_open_transactions("h"));
    }
}

//! Committed offsets (Kafka's `OffsetMetadataManager`): OffsetCommit, OffsetFetch,
//! OffsetDelete, DeleteGroups' offsets, expiry after `offsets.retention.ms`, their
//! `OffsetCommit` records (a tombstone deletes).
//!
//! The state is only ever changed by replaying records ([`OffsetMetadataManager::replay`]),
//! from the shard's own writes or from loading the partition; the request handlers in
//! [`ops`] read it and return records. It is kept in timeline structures, so reads see it as
//! of the high watermark and a failed append rolls it back.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::Duration;

use strom_coordinator_common::timeline::{Timeline, TimelineMap};

use crate::records::CoordinatorRecord;
use crate::shard::ShardEnv;

pub mod expiry;
pub mod ops;
pub mod store;

pub use store::{OffsetAndMetadata, OffsetStore, PartitionKey};

/// The key of the shard timer that expires offsets (Kafka's `expire-group-metadata`).
pub const EXPIRE_TIMER_KEY: &str = "expire-group-metadata";

/// Transactional offsets waiting for their transaction's marker (Kafka's
/// `pendingTransactionalOffsets` / `openTransactionsByGroup`). Nothing writes them until
/// TxnOffsetCommit exists (the transactions issue); OffsetFetch with `require_stable`,
/// OffsetDelete, DeleteGroups and expiry already consult them as Kafka does.
#[derive(Default)]
pub struct PendingTransactionalOffsets {
    /// Producer ids with pending offsets, by group.
    open_by_group: HashMap<String, BTreeSet<i64>>,
    /// (producer id, group) -> pending offsets.
    offsets: HashMap<(i64, String), HashMap<PartitionKey, OffsetAndMetadata>>,
}

impl PendingTransactionalOffsets {
    /// Whether some open transaction holds an offset of this partition for `group`.
    pub fn has_pending(&self, group: &str, topic: &str, partition: i32) -> bool {
        let Some(pids) = self.open_by_group.get(group) else {
            return false;
        };
        let key = (topic.to_string(), partition);
        pids.iter().any(|pid| {
            self.offsets
                .get(&(*pid, group.to_string()))
                .is_some_and(|m| m.contains_key(&key))
        })
    }

    /// Whether `group` has an open transaction.
    pub fn has_open_transactions(&self, group: &str) -> bool {
        self.open_by_group.contains_key(group)
    }

    /// Every partition with a pending offset for `group`.
    pub fn pending_partitions(&self, group: &str) -> BTreeSet<PartitionKey> {
        let mut out = BTreeSet::new();
        if let Some(pids) = self.open_by_group.get(group) {
            for pid in pids {
                if let Some(m) = self.offsets.get(&(*pid, group.to_string())) {
                    out.extend(m.keys().cloned());
                }
            }
        }
        out
    }

    /// A tombstone of the partition also drops its pending offsets (Kafka's replay of a
    /// tombstone).
    fn remove_partition(&mut self, group: &str, key: &PartitionKey) {
        if let Some(pids) = self.open_by_group.get(group) {
            for pid in pids {
                if let Some(m) = self.offsets.get_mut(&(*pid, group.to_string())) {
                    m.remove(key);
                }
            }
        }
    }
}

#[derive(Default)]
pub struct OffsetMetadataManager {
    pub offsets: OffsetStore,
    pub pending: PendingTransactionalOffsets,
    /// Groups made to exist by an offset commit (Kafka's "simple" groups: an empty classic
    /// group without protocol type), until their GroupMetadata tombstone. The classic
    /// manager holds them too once it keeps simple groups; until then the offset APIs treat a
    /// group listed here that no manager holds as that empty classic group.
    pub simple_groups: TimelineMap<String, ()>,
    /// Simple groups a commit made exist without writing anything (every offset of it was
    /// refused): Kafka keeps such a group in memory only, and so does this (not in the
    /// timeline: a later refused operation reverts to the same offset and must not undo it).
    pub unwritten_simple_groups: HashSet<String>,
}

impl OffsetMetadataManager {
    /// Applies an offset commit record or tombstone at `offset` (Kafka's `replay` of
    /// `OffsetCommitKey/Value`; legacy type-0 records carry the same key).
    pub fn replay(&mut self, _env: &ShardEnv, offset: i64, record: &CoordinatorRecord) {
        let (group, key, value) = match record {
            CoordinatorRecord::OffsetCommit(k, v) => (
                &k.group,
                (k.topic.clone(), k.partition),
                v.as_ref()
                    .map(|(_, v)| OffsetAndMetadata::from_record(offset, v)),
            ),
            CoordinatorRecord::LegacyOffsetCommit(k, v) => (
                &k.group,
                (k.topic.clone(), k.partition),
                v.as_ref()
                    .map(|(_, v)| OffsetAndMetadata::from_legacy_record(offset, v)),
            ),
            CoordinatorRecord::GroupMetadata(k, None) => {
                self.simple_groups.remove(offset, &k.group);
                self.unwritten_simple_groups.remove(&k.group);
                return;
            }
            _ => return,
        };
        match value {
            Some(v) => {
                if !self.simple_groups.contains_key(group) {
                    self.simple_groups.insert(offset, group.clone(), ());
                }
                self.offsets.put(offset, group, key, v)
            }
            None => {
                self.offsets.remove(offset, group, &key);
                self.pending.remove_partition(group, &key);
            }
        }
    }

    /// The partition is loaded: start the periodic expiry (Kafka's
    /// `scheduleGroupMetadataExpiration`, first run one interval after loading).
    pub fn on_loaded(&mut self, env: &ShardEnv) {
        schedule_expiry(env);
    }

    /// The latest offset of a partition for `group`.
    pub fn offset(&self, group: &str, topic: &str, partition: i32) -> Option<&OffsetAndMetadata> {
        self.offsets.get(group, topic, partition)
    }

    /// Whether `group` is a simple group only this manager knows (no group manager holds it).
    pub fn is_simple_group_only_here(&self, group: &str, held_elsewhere: bool) -> bool {
        !held_elsewhere
            && (self.simple_groups.contains_key(&group.to_string())
                || self.unwritten_simple_groups.contains(group))
    }

    /// Whether `group` has no offsets (and no pending transactional ones) as of `committed`.
    pub fn group_has_no_offsets(&self, group: &str, committed: i64) -> bool {
        self.offsets.group_committed(group, committed).is_empty()
            && !self.pending.has_open_transactions(group)
    }
}

/// Sets the expiry timer one `offsets.retention.check.interval.ms` from now.
pub(crate) fn schedule_expiry(env: &ShardEnv) {
    let interval = env.config.offsets_retention_check_interval_ms.max(1) as u64;
    env.timer.schedule(
        EXPIRE_TIMER_KEY,
        Duration::from_millis(interval),
        expiry::expire_offsets_timer,
    );
}

impl Timeline for OffsetMetadataManager {
    fn revert_to(&mut self, offset: i64) {
        self.offsets.revert_to(offset);
        self.simple_groups.revert_to(offset);
    }
    fn commit(&mut self, committed: i64) {
        self.offsets.commit(committed);
        self.simple_groups.commit(committed);
    }
}

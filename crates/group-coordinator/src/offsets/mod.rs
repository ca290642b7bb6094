//! Committed offsets (Kafka's `OffsetMetadataManager`): OffsetCommit, OffsetFetch,
//! OffsetDelete, DeleteGroups' offsets, expiry after `offsets.retention.ms`, their
//! `OffsetCommit` records (a tombstone deletes).
//!
//! The state is only ever changed by replaying records ([`OffsetMetadataManager::replay`]),
//! from the shard's own writes or from loading the partition; the request handlers in
//! [`ops`] read it and return records. It is kept in timeline structures, so reads see it as
//! of the high watermark and a failed append rolls it back.

use std::collections::HashSet;
use std::time::Duration;

use strom_coordinator_common::timeline::{Timeline, TimelineMap};

use crate::records::CoordinatorRecord;
use crate::shard::ShardEnv;

pub mod expiry;
pub mod ops;
pub mod pending;
pub mod store;

pub use pending::PendingTransactionalOffsets;
pub use store::{OffsetAndMetadata, OffsetStore, PartitionKey};

/// The key of the shard timer that expires offsets (Kafka's `expire-group-metadata`).
pub const EXPIRE_TIMER_KEY: &str = "expire-group-metadata";

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
    /// `OffsetCommitKey/Value`; legacy type-0 records carry the same key). A commit in a
    /// transactional batch (`producer_id` set) waits for its producer's marker; a tombstone
    /// deletes whatever its batch.
    pub fn replay(
        &mut self,
        _env: &ShardEnv,
        offset: i64,
        producer_id: Option<i64>,
        record: &CoordinatorRecord,
    ) {
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
                match producer_id {
                    None => self.offsets.put(offset, group, key, v),
                    Some(pid) => {
                        tracing::debug!(group = %group, topic = %key.0, partition = key.1, producer_id = pid, "pending transactional offset");
                        self.pending.put(offset, pid, group, key, v)
                    }
                }
            }
            None => {
                self.offsets.remove(offset, group, &key);
                self.pending.remove_partition(offset, group, &key);
            }
        }
    }

    /// The end marker of `producer_id`'s transaction at `offset` (Kafka's
    /// `replayEndTransactionMarker`): on COMMIT its pending offsets become the committed ones,
    /// except where a commit recorded later in the log is already there (the most recent
    /// record wins, as compaction of the offsets topic would leave it); on ABORT they are
    /// dropped.
    pub fn replay_end_transaction_marker(&mut self, offset: i64, producer_id: i64, commit: bool) {
        let taken = self.pending.take_producer(offset, producer_id);
        if taken.is_empty() {
            tracing::debug!(producer_id, commit, "end marker without pending offsets");
            return;
        }
        if !commit {
            tracing::debug!(
                producer_id,
                offsets = taken.len(),
                "transactional offsets aborted"
            );
            return;
        }
        for (group, key, value) in taken {
            let newer = self
                .offsets
                .get(&group, &key.0, key.1)
                .is_some_and(|existing| existing.record_offset >= value.record_offset);
            if newer {
                tracing::info!(
                    group = %group,
                    topic = %key.0,
                    partition = key.1,
                    producer_id,
                    "transactional offset not materialised: a later commit is there"
                );
                continue;
            }
            self.offsets.put(offset, &group, key, value);
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
        self.pending.revert_to(offset);
        self.simple_groups.revert_to(offset);
    }
    fn commit(&mut self, committed: i64) {
        self.offsets.commit(committed);
        self.pending.commit(committed);
        self.simple_groups.commit(committed);
    }
}

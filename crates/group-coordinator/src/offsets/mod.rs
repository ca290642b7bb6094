//! Committed offsets (Kafka's `OffsetMetadataManager`): OffsetCommit, OffsetFetch,
//! OffsetDelete, DeleteGroups' offsets, expiry after `offsets.retention.ms`, their
//! `OffsetCommit` records (a tombstone deletes).
//!
//! SKELETON: the methods below are the interface the shard and the service rely on; the
//! offsets manager fills them in.

use strom_coordinator_common::timeline::Timeline;

use crate::records::CoordinatorRecord;
use crate::shard::ShardEnv;

#[derive(Default)]
pub struct OffsetMetadataManager {}

impl OffsetMetadataManager {
    pub fn replay(&mut self, _env: &ShardEnv, _offset: i64, _record: &CoordinatorRecord) {}

    pub fn on_loaded(&mut self, _env: &ShardEnv) {}
}

impl Timeline for OffsetMetadataManager {
    fn revert_to(&mut self, _offset: i64) {}
    fn commit(&mut self, _committed: i64) {}
}

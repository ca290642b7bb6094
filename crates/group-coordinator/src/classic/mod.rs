//! Classic groups (Kafka's `ClassicGroup` and the classic half of `GroupMetadataManager`):
//! JoinGroup / SyncGroup / Heartbeat / LeaveGroup, static membership, simple groups that only
//! commit offsets, their `GroupMetadata` records.
//!
//! SKELETON: the methods below are the interface the shard and the service rely on; the
//! classic group state machine fills them in.

use strom_coordinator_common::timeline::Timeline;
use strom_protocol::ErrorCode;

use crate::records::CoordinatorRecord;
use crate::shard::{ListedGroup, OffsetCommitAuth, OffsetExpirationView, ShardEnv};

#[derive(Default)]
pub struct ClassicGroups {}

impl ClassicGroups {
    pub fn contains(&self, _group_id: &str) -> bool {
        false
    }

    pub fn validate_offset_commit(
        &mut self,
        _env: &ShardEnv,
        auth: &OffsetCommitAuth<'_>,
    ) -> Result<(), ErrorCode> {
        // Until the classic state machine lands: simple consumers (no member, generation -1)
        // only.
        if auth.generation_id_or_member_epoch < 0 && auth.member_id.is_empty() {
            Ok(())
        } else {
            Err(ErrorCode::IllegalGeneration)
        }
    }

    pub fn is_subscribed_to_topic(&self, _group_id: &str, _topic: &str) -> bool {
        false
    }

    pub fn offset_expiration_view(&self, _group_id: &str) -> Option<OffsetExpirationView> {
        None
    }

    pub fn deletion_records(
        &mut self,
        _env: &ShardEnv,
        _group_id: &str,
    ) -> Result<Vec<CoordinatorRecord>, ErrorCode> {
        Err(ErrorCode::GroupIdNotFound)
    }

    pub fn maybe_delete_empty_group(
        &mut self,
        _env: &ShardEnv,
        _group_id: &str,
    ) -> Vec<CoordinatorRecord> {
        Vec::new()
    }

    pub fn list_groups(&self, _states: &[String], _committed_offset: i64) -> Vec<ListedGroup> {
        Vec::new()
    }

    pub fn replay(&mut self, _env: &ShardEnv, _offset: i64, _record: &CoordinatorRecord) {}

    /// An offset commit of `group_id` was replayed and no group of that id exists.
    pub fn replay_simple_group(&mut self, _env: &ShardEnv, _offset: i64, _group_id: &str) {}

    pub fn on_loaded(&mut self, _env: &ShardEnv) {}
}

impl Timeline for ClassicGroups {
    fn revert_to(&mut self, _offset: i64) {}
    fn commit(&mut self, _committed: i64) {}
}

//! Consumer groups of the KIP-848 protocol (Kafka's `ConsumerGroup` and the consumer half of
//! `GroupMetadataManager`): ConsumerGroupHeartbeat, member epochs, the target assignment and
//! its reconciliation, their `ConsumerGroup*` records.
//!
//! SKELETON: the methods below are the interface the shard and the service rely on; the
//! consumer group state machine fills them in.

use strom_coordinator_common::timeline::Timeline;
use strom_protocol::ErrorCode;

use crate::records::CoordinatorRecord;
use crate::shard::{ListedGroup, OffsetCommitAuth, OffsetExpirationView, ShardEnv};

#[derive(Default)]
pub struct ConsumerGroups {}

impl ConsumerGroups {
    pub fn contains(&self, _group_id: &str) -> bool {
        false
    }

    /// Whether `record` is one of this manager's (`ConsumerGroup*`).
    pub fn handles(&self, record: &CoordinatorRecord) -> bool {
        matches!(
            record,
            CoordinatorRecord::ConsumerGroupMetadata(..)
                | CoordinatorRecord::ConsumerGroupPartitionMetadata(..)
                | CoordinatorRecord::ConsumerGroupMemberMetadata(..)
                | CoordinatorRecord::ConsumerGroupTargetAssignmentMetadata(..)
                | CoordinatorRecord::ConsumerGroupTargetAssignmentMember(..)
                | CoordinatorRecord::ConsumerGroupCurrentMemberAssignment(..)
                | CoordinatorRecord::ConsumerGroupRegularExpression(..)
        )
    }

    pub fn validate_offset_commit(
        &mut self,
        _env: &ShardEnv,
        _auth: &OffsetCommitAuth<'_>,
    ) -> Result<(), ErrorCode> {
        Err(ErrorCode::CoordinatorNotAvailable)
    }

    pub fn validate_offset_fetch(
        &self,
        _group_id: &str,
        _member_id: Option<&str>,
        _member_epoch: i32,
        _committed_offset: i64,
    ) -> Result<(), ErrorCode> {
        Ok(())
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

    pub fn on_loaded(&mut self, _env: &ShardEnv) {}

    /// The topics image changed (`env.metadata()` is the new one): the records of new target
    /// assignments for groups whose subscribed topics changed.
    pub fn on_new_metadata(
        &mut self,
        _env: &ShardEnv,
        _ctx: &strom_coordinator_common::runtime::WriteContext,
    ) -> Vec<CoordinatorRecord> {
        Vec::new()
    }
}

impl Timeline for ConsumerGroups {
    fn revert_to(&mut self, _offset: i64) {}
    fn commit(&mut self, _committed: i64) {}
}

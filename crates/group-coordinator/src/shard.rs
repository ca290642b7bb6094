//! One `__consumer_offsets` partition's group coordinator state (Kafka's
//! `GroupCoordinatorShard`): its classic groups, its consumer (KIP-848) groups and its
//! committed offsets, rebuilt from the partition's records and changed only by replaying them
//! (plus the in-memory-only parts of classic groups, as in Kafka).
//!
//! The three managers each own their state; what one needs of another (may this member
//! commit? since when is this group empty?) goes through the methods here, so a group id lives
//! in exactly one of `classic` or `consumer`.

use std::sync::Arc;

use bytes::Bytes;
use parking_lot::RwLock;
use strom_coordinator_common::runtime::{
    CoordinatorError, CoordinatorShard, RawRecord, TopicPartition, TxnProducer, TxnResult,
};
use strom_coordinator_common::timeline::Timeline;
use strom_coordinator_common::timer::{Clock, CoordinatorTimer, ShardContext};
use strom_protocol::ErrorCode;

use crate::classic::{ClassicGroup, ClassicGroups, GroupState};
use crate::config::GroupCoordinatorConfig;
use crate::consumer::ConsumerGroups;
use crate::metadata::GroupMetadataImage;
use crate::offsets::OffsetMetadataManager;
use crate::records::CoordinatorRecord;

/// What every manager of a shard may use: where it runs, its settings, timers, clock and the
/// latest topic metadata.
pub struct ShardEnv {
    pub tp: TopicPartition,
    /// The leader epoch the shard was loaded at.
    pub epoch: i32,
    pub config: Arc<GroupCoordinatorConfig>,
    pub timer: CoordinatorTimer<GroupCoordinatorShard>,
    pub clock: Arc<dyn Clock>,
    /// The service's current image (replaced as metadata changes; read it, never hold it).
    pub metadata: Arc<RwLock<Arc<GroupMetadataImage>>>,
}

impl ShardEnv {
    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    pub fn metadata(&self) -> Arc<GroupMetadataImage> {
        self.metadata.read().clone()
    }
}

/// The kinds of group a shard holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupType {
    Classic,
    Consumer,
}

impl GroupType {
    /// The name ListGroups and DescribeGroups use.
    pub fn name(self) -> &'static str {
        match self {
            GroupType::Classic => "classic",
            GroupType::Consumer => "consumer",
        }
    }
}

/// Who asks to commit offsets (OffsetCommit, TxnOffsetCommit): classic members send their
/// generation, consumer-protocol members their member epoch, simple consumers -1.
#[derive(Debug, Clone)]
pub struct OffsetCommitAuth<'a> {
    pub group_id: &'a str,
    pub member_id: &'a str,
    pub generation_id_or_member_epoch: i32,
    pub group_instance_id: Option<&'a str>,
    pub api_version: i16,
    pub transactional: bool,
}

/// What offset expiry needs to know of a group (Kafka's `OffsetExpirationCondition`), read by
/// `offsets::expiry::expiration_base`: `empty_since_ms` set — offsets expire counted from then
/// (an empty classic group with a protocol type); else `subscribed_topics` set — by their
/// commit timestamps, those topics excepted (a Stable classic group of the consumer protocol
/// type, or a consumer-protocol group, whose offsets Kafka always counts from the commit);
/// neither — not now (a rebalancing classic group). No view at all (`None` from
/// `offset_expiration_view`): by commit timestamp, as for a simple group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OffsetExpirationView {
    /// When the group became empty, if it is empty (offsets expire counted from then).
    pub empty_since_ms: Option<i64>,
    /// Topics the group's members are subscribed to while it is not empty (their offsets do
    /// not expire); `None` when the group does not use the consumer protocol type.
    pub subscribed_topics: Option<std::collections::BTreeSet<String>>,
}

/// One row of ListGroups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedGroup {
    pub group_id: String,
    pub protocol_type: String,
    pub group_state: String,
    pub group_type: GroupType,
}

pub struct GroupCoordinatorShard {
    pub env: ShardEnv,
    pub classic: ClassicGroups,
    pub consumer: ConsumerGroups,
    pub offsets: OffsetMetadataManager,
}

impl GroupCoordinatorShard {
    pub fn new(
        ctx: ShardContext<Self>,
        config: Arc<GroupCoordinatorConfig>,
        metadata: Arc<RwLock<Arc<GroupMetadataImage>>>,
    ) -> Self {
        Self {
            env: ShardEnv {
                tp: ctx.tp,
                epoch: ctx.epoch,
                config,
                timer: ctx.timer,
                clock: ctx.clock,
                metadata,
            },
            classic: ClassicGroups::default(),
            consumer: ConsumerGroups::default(),
            offsets: OffsetMetadataManager::default(),
        }
    }

    /// Which kind of group `group_id` is, if it exists on this shard.
    pub fn group_type(&self, group_id: &str) -> Option<GroupType> {
        if self.consumer.contains(group_id) {
            Some(GroupType::Consumer)
        } else if self.classic.contains(group_id) {
            Some(GroupType::Classic)
        } else {
            None
        }
    }

    /// May this member commit offsets for its group? (Kafka's `validateOffsetCommit` of the
    /// group kind.) A commit with generation -1 to a group that does not exist creates an empty
    /// classic group (a "simple" group), as Kafka does.
    pub fn validate_offset_commit(&mut self, auth: &OffsetCommitAuth<'_>) -> Result<(), ErrorCode> {
        match self.group_type(auth.group_id) {
            Some(GroupType::Consumer) => self.consumer.validate_offset_commit(&self.env, auth),
            // A simple group an earlier commit made exist without writing anything: Kafka
            // holds it as an empty classic group, which checks a named member or generation
            // (UNKNOWN_MEMBER_ID) rather than answering for a group that does not exist.
            None if self.offsets.unwritten_simple_groups.contains(auth.group_id) => {
                ClassicGroup::new(
                    auth.group_id.to_string(),
                    GroupState::Empty,
                    self.env.now_ms(),
                )
                .validate_offset_commit(
                    auth.member_id,
                    auth.group_instance_id,
                    auth.generation_id_or_member_epoch,
                    auth.transactional,
                )
            }
            _ => self.classic.validate_offset_commit(&self.env, auth),
        }
    }

    /// May this member fetch offsets (OffsetFetch v9+ carries the member id and epoch)?
    pub fn validate_offset_fetch(
        &self,
        group_id: &str,
        member_id: Option<&str>,
        member_epoch: i32,
        committed_offset: i64,
    ) -> Result<(), ErrorCode> {
        match self.group_type(group_id) {
            Some(GroupType::Consumer) => self.consumer.validate_offset_fetch(
                group_id,
                member_id,
                member_epoch,
                committed_offset,
            ),
            Some(GroupType::Classic) => Ok(()),
            None => Ok(()),
        }
    }

    /// Whether a member of the group is subscribed to `topic` (OffsetDelete refuses those
    /// partitions with GROUP_SUBSCRIBED_TO_TOPIC).
    pub fn is_subscribed_to_topic(&self, group_id: &str, topic: &str) -> bool {
        match self.group_type(group_id) {
            Some(GroupType::Consumer) => self.consumer.is_subscribed_to_topic(group_id, topic),
            Some(GroupType::Classic) => self.classic.is_subscribed_to_topic(group_id, topic),
            None => false,
        }
    }

    /// What offset expiry needs of the group (`None`: no such group, offsets expire by their
    /// commit timestamps alone).
    pub fn offset_expiration_view(&self, group_id: &str) -> Option<OffsetExpirationView> {
        match self.group_type(group_id) {
            Some(GroupType::Consumer) => self.consumer.offset_expiration_view(group_id),
            Some(GroupType::Classic) => self.classic.offset_expiration_view(group_id),
            None => None,
        }
    }

    /// Checks that `group_id` can be deleted (DeleteGroups: only an empty or dead group) and
    /// returns the records that delete the group itself (its offsets are the offsets
    /// manager's).
    pub fn group_deletion_records(
        &mut self,
        group_id: &str,
    ) -> Result<Vec<CoordinatorRecord>, ErrorCode> {
        match self.group_type(group_id) {
            Some(GroupType::Consumer) => self.consumer.deletion_records(&self.env, group_id),
            Some(GroupType::Classic) => self.classic.deletion_records(&self.env, group_id),
            None => Err(ErrorCode::GroupIdNotFound),
        }
    }

    /// A group whose last offsets expired and that has no members is removed (Kafka's
    /// `maybeDeleteGroup` after offset expiry): the records that do it, if it can go.
    pub fn maybe_delete_empty_group(&mut self, group_id: &str) -> Vec<CoordinatorRecord> {
        match self.group_type(group_id) {
            Some(GroupType::Consumer) => {
                self.consumer.maybe_delete_empty_group(&self.env, group_id)
            }
            Some(GroupType::Classic) => self.classic.maybe_delete_empty_group(&self.env, group_id),
            None => Vec::new(),
        }
    }

    /// ListGroups rows of this shard as of `committed_offset` (states / types filters are
    /// lower-cased names; empty = all).
    pub fn list_groups(
        &self,
        states: &[String],
        types: &[String],
        committed_offset: i64,
    ) -> Vec<ListedGroup> {
        let want_type = |t: GroupType| types.is_empty() || types.iter().any(|x| x == t.name());
        let mut v = Vec::new();
        if want_type(GroupType::Classic) {
            v.extend(self.classic.list_groups(states, committed_offset));
        }
        if want_type(GroupType::Consumer) {
            v.extend(self.consumer.list_groups(states, committed_offset));
        }
        v
    }
}

impl GroupCoordinatorShard {
    /// Kafka's `GroupCoordinatorShard.replay(offset, producerId, producerEpoch, record)`.
    fn replay_with_producer(
        &mut self,
        offset: i64,
        producer_id: Option<i64>,
        record: &CoordinatorRecord,
    ) {
        match record {
            CoordinatorRecord::LegacyOffsetCommit(..) | CoordinatorRecord::OffsetCommit(..) => {
                self.offsets.replay(&self.env, offset, producer_id, record);
                // A commit to a group nobody knows makes the simple (classic) group exist.
                if let Some(group_id) = offset_commit_group(record) {
                    if self.group_type(&group_id).is_none() {
                        self.classic
                            .replay_simple_group(&self.env, offset, &group_id);
                    }
                }
            }
            CoordinatorRecord::GroupMetadata(..) => {
                // The offsets manager forgets a simple group at its tombstone.
                self.offsets.replay(&self.env, offset, None, record);
                self.classic.replay(&self.env, offset, record);
            }
            other => {
                if self.consumer.handles(other) {
                    self.consumer.replay(&self.env, offset, other);
                }
                // Share and streams group records (and anything newer) are skipped, as a
                // coordinator without those group types skips them.
            }
        }
    }
}

impl Timeline for GroupCoordinatorShard {
    fn revert_to(&mut self, offset: i64) {
        self.classic.revert_to(offset);
        self.consumer.revert_to(offset);
        self.offsets.revert_to(offset);
    }

    fn commit(&mut self, committed: i64) {
        self.classic.commit(committed);
        self.consumer.commit(committed);
        self.offsets.commit(committed);
    }
}

impl CoordinatorShard for GroupCoordinatorShard {
    type Record = CoordinatorRecord;

    fn replay(&mut self, offset: i64, record: &CoordinatorRecord) {
        self.replay_with_producer(offset, None, record)
    }

    /// An offset commit of a TxnOffsetCommit: pending until its producer's marker (other
    /// records are never written transactionally by this coordinator; should a log hold
    /// some, they apply as written).
    fn replay_transactional(
        &mut self,
        offset: i64,
        producer: TxnProducer,
        record: &CoordinatorRecord,
    ) {
        self.replay_with_producer(offset, Some(producer.producer_id), record)
    }

    fn replay_end_transaction_marker(
        &mut self,
        offset: i64,
        producer: TxnProducer,
        result: TxnResult,
    ) {
        self.offsets.replay_end_transaction_marker(
            offset,
            producer.producer_id,
            result == TxnResult::Commit,
        );
    }

    fn serialize(record: &CoordinatorRecord) -> Result<RawRecord, CoordinatorError> {
        let key = record.encode_key().map_err(encode_error)?;
        let value = record.encode_value().map_err(encode_error)?;
        Ok((key, value))
    }

    fn deserialize(key: &Bytes, value: Option<&Bytes>) -> Option<CoordinatorRecord> {
        match CoordinatorRecord::decode(key, value.map(|v| v.as_ref())) {
            Ok(r) => Some(r),
            Err(e) => {
                tracing::debug!(error = %e, "skipping a __consumer_offsets record");
                None
            }
        }
    }

    fn on_loaded(&mut self) {
        self.classic.on_loaded(&self.env);
        self.consumer.on_loaded(&self.env);
        self.offsets.on_loaded(&self.env);
    }
}

fn encode_error(e: crate::records::RecordError) -> CoordinatorError {
    CoordinatorError::Operation {
        code: ErrorCode::UnknownServerError,
        message: format!("encoding a __consumer_offsets record: {e}"),
    }
}

/// The group of an offset commit record, unless it is a tombstone (as in Kafka, only a commit
/// makes a simple group exist; a tombstone replayed after its group's deletion must not).
fn offset_commit_group(record: &CoordinatorRecord) -> Option<String> {
    match record {
        CoordinatorRecord::OffsetCommit(k, Some(_)) => Some(k.group.clone()),
        CoordinatorRecord::LegacyOffsetCommit(k, Some(_)) => Some(k.group.clone()),
        _ => None,
    }
}

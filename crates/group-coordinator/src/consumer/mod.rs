//! Consumer groups of the KIP-848 protocol (Kafka's `ConsumerGroup` and the consumer half of
//! `GroupMetadataManager`): ConsumerGroupHeartbeat, member epochs, the target assignment and
//! its reconciliation, their `ConsumerGroup*` records.
//!
//! Each group is one value of a timeline map, replaced as each of its records is replayed, so
//! a failed append reverts it and reads see it as of the committed offset.
//!
//! Classic and consumer-protocol members share a group as Kafka 4.4 allows it
//! (`group.consumer.migration.policy`): [`classic_members`] serves JoinGroup / SyncGroup /
//! Heartbeat / LeaveGroup of classic members inside a consumer group, [`migration`] converts a
//! classic group when a consumer-protocol member joins it (upgrade) and back when the last
//! consumer-protocol member leaves (downgrade). An empty group of the other kind is replaced.
//!
//! Not done: the downgrade Kafka does when a classic static member replaces the last
//! consumer-protocol static member (`validateOnlineDowngradeWithReplacedMember`); the classic
//! group a downgrade makes lists its members in the consumer group's (sorted) order, not in
//! Java's `HashMap` order, so its leader may differ from Kafka's.

pub mod classic_members;
pub mod classic_protocol;
pub mod current_assignment;
pub mod group;
pub mod heartbeat;
pub mod member;
pub mod migration;
pub mod target_assignment;

use std::collections::BTreeSet;

use strom_coordinator_common::timeline::{Timeline, TimelineMap};
use strom_protocol::kafka::messages::consumer_group_describe_response::{
    Assignment as DescribeAssignment, DescribedGroup, Member as DescribeMember,
    TopicPartitions as DescribeTopicPartitions,
};
use strom_protocol::kafka::messages::TopicName;
use strom_protocol::kafka::protocol::StrBytes;
use strom_protocol::ErrorCode;

use crate::assignor::MemberAssignment;
use crate::metadata::GroupMetadataImage;
use crate::records::CoordinatorRecord;
use crate::shard::{GroupType, ListedGroup, OffsetCommitAuth, OffsetExpirationView, ShardEnv};

pub use group::{ConsumerGroup, ConsumerGroupState};
pub use heartbeat::{validate_heartbeat, GroupError, HeartbeatContext};
pub use member::{ConsumerGroupMember, MemberState};

#[derive(Default)]
pub struct ConsumerGroups {
    groups: TimelineMap<String, ConsumerGroup>,
}

fn record_group_id(record: &CoordinatorRecord) -> Option<&str> {
    Some(match record {
        CoordinatorRecord::ConsumerGroupMetadata(k, _) => &k.group_id,
        CoordinatorRecord::ConsumerGroupPartitionMetadata(k, _) => &k.group_id,
        CoordinatorRecord::ConsumerGroupMemberMetadata(k, _) => &k.group_id,
        CoordinatorRecord::ConsumerGroupTargetAssignmentMetadata(k, _) => &k.group_id,
        CoordinatorRecord::ConsumerGroupTargetAssignmentMember(k, _) => &k.group_id,
        CoordinatorRecord::ConsumerGroupCurrentMemberAssignment(k, _) => &k.group_id,
        CoordinatorRecord::ConsumerGroupRegularExpression(k, _) => &k.group_id,
        _ => return None,
    })
}

fn is_tombstone(record: &CoordinatorRecord) -> bool {
    matches!(
        record,
        CoordinatorRecord::ConsumerGroupMetadata(_, None)
            | CoordinatorRecord::ConsumerGroupPartitionMetadata(_, None)
            | CoordinatorRecord::ConsumerGroupMemberMetadata(_, None)
            | CoordinatorRecord::ConsumerGroupTargetAssignmentMetadata(_, None)
            | CoordinatorRecord::ConsumerGroupTargetAssignmentMember(_, None)
            | CoordinatorRecord::ConsumerGroupCurrentMemberAssignment(_, None)
            | CoordinatorRecord::ConsumerGroupRegularExpression(_, None)
    )
}

impl ConsumerGroups {
    pub fn contains(&self, group_id: &str) -> bool {
        self.groups.contains_key(&group_id.to_string())
    }

    /// The group as the latest writes left it.
    pub fn group(&self, group_id: &str) -> Option<&ConsumerGroup> {
        self.groups.get(&group_id.to_string())
    }

    /// The group as of `committed_offset`.
    pub fn committed_group(&self, group_id: &str, committed_offset: i64) -> Option<&ConsumerGroup> {
        self.groups
            .get_committed(&group_id.to_string(), committed_offset)
    }

    /// Whether `record` is one of this manager's (`ConsumerGroup*`).
    pub fn handles(&self, record: &CoordinatorRecord) -> bool {
        record_group_id(record).is_some()
    }

    /// Kafka's `ConsumerGroup.validateOffsetCommit`: a commit without a member (epoch < 0) is
    /// only allowed while the group is empty; a member must send its current epoch.
    pub fn validate_offset_commit(
        &mut self,
        _env: &ShardEnv,
        auth: &OffsetCommitAuth<'_>,
    ) -> Result<(), ErrorCode> {
        let Some(group) = self.group(auth.group_id) else {
            return Err(ErrorCode::GroupIdNotFound);
        };
        if auth.generation_id_or_member_epoch < 0 && group.members.is_empty() {
            return Ok(());
        }
        let member = group
            .members
            .get(auth.member_id)
            .ok_or(ErrorCode::UnknownMemberId)?;
        // Consumer-protocol members commit with OffsetCommit v9+ (it carries the epoch);
        // classic members with any version, their generation being their member epoch.
        let classic = member.uses_classic_protocol();
        if !auth.transactional && !classic && auth.api_version < 9 {
            return Err(ErrorCode::UnsupportedVersion);
        }
        check_member_epoch(auth.generation_id_or_member_epoch, member)
    }

    /// Kafka's `ConsumerGroup.validateOffsetFetch`: the admin (epoch < 0) may always fetch; a
    /// member must be known at that epoch as of the committed offset.
    pub fn validate_offset_fetch(
        &self,
        group_id: &str,
        member_id: Option<&str>,
        member_epoch: i32,
        committed_offset: i64,
    ) -> Result<(), ErrorCode> {
        if member_epoch < 0 {
            return Ok(());
        }
        let Some(group) = self.committed_group(group_id, committed_offset) else {
            return Err(ErrorCode::GroupIdNotFound);
        };
        let member = group
            .members
            .get(member_id.unwrap_or(""))
            .ok_or(ErrorCode::UnknownMemberId)?;
        check_member_epoch(member_epoch, member)
    }

    pub fn is_subscribed_to_topic(&self, group_id: &str, topic: &str) -> bool {
        self.group(group_id)
            .is_some_and(|g| g.subscribed_topics().contains(topic))
    }

    /// Consumer group offsets expire by their commit time (Kafka's condition for this group
    /// type), except those of topics the members subscribe to.
    pub fn offset_expiration_view(&self, group_id: &str) -> Option<OffsetExpirationView> {
        let g = self.group(group_id)?;
        Some(OffsetExpirationView {
            empty_since_ms: None,
            subscribed_topics: Some(g.subscribed_topics()),
        })
    }

    /// DeleteGroups: only an empty group can go.
    pub fn deletion_records(
        &mut self,
        _env: &ShardEnv,
        group_id: &str,
    ) -> Result<Vec<CoordinatorRecord>, ErrorCode> {
        let g = self.group(group_id).ok_or(ErrorCode::GroupIdNotFound)?;
        if g.state() != ConsumerGroupState::Empty {
            return Err(ErrorCode::NonEmptyGroup);
        }
        Ok(g.tombstone_records())
    }

    pub fn maybe_delete_empty_group(
        &mut self,
        _env: &ShardEnv,
        group_id: &str,
    ) -> Vec<CoordinatorRecord> {
        match self.group(group_id) {
            Some(g) if g.state() == ConsumerGroupState::Empty => g.tombstone_records(),
            _ => Vec::new(),
        }
    }

    /// ListGroups rows as of `committed_offset`; `states` are lower-case names (empty: all).
    pub fn list_groups(&self, states: &[String], committed_offset: i64) -> Vec<ListedGroup> {
        let mut v: Vec<ListedGroup> =
            self.groups
                .committed_entries(committed_offset)
                .into_iter()
                .filter_map(|(id, g)| {
                    let state = g.state().name();
                    let lower = state.to_ascii_lowercase();
                    (states.is_empty() || states.iter().any(|s| s.to_ascii_lowercase() == lower))
                        .then(|| ListedGroup {
                            group_id: id,
                            protocol_type: "consumer".to_string(),
                            group_state: state.to_string(),
                            group_type: GroupType::Consumer,
                        })
                })
                .collect();
        v.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        v
    }

    pub fn replay(&mut self, _env: &ShardEnv, offset: i64, record: &CoordinatorRecord) {
        let Some(group_id) = record_group_id(record) else {
            return;
        };
        let key = group_id.to_string();
        let mut g = match self.groups.get(&key) {
            Some(g) => g.clone(),
            // A tombstone of a group nobody knows has nothing to delete.
            None if is_tombstone(record) => return,
            None => ConsumerGroup::new(group_id),
        };
        g.apply(record);
        if g.deleted {
            self.groups.remove(offset, &key);
        } else {
            self.groups.insert(offset, key, g);
        }
    }

    /// The partition was loaded: every member's session runs from now (and its revocation
    /// deadline, if it is revoking), as Kafka's `onLoaded`.
    pub fn on_loaded(&mut self, env: &ShardEnv) {
        for (group_id, g) in self.groups.iter() {
            for m in g.members.values() {
                match &m.classic {
                    Some(c) => heartbeat::schedule_session_timeout_ms(
                        env,
                        group_id,
                        &m.member_id,
                        c.session_timeout_ms,
                    ),
                    None => heartbeat::schedule_session_timeout(env, group_id, &m.member_id),
                }
                if m.state == MemberState::UnrevokedPartitions {
                    heartbeat::schedule_rebalance_timeout(env, group_id, m);
                }
            }
        }
    }

    /// The topics image changed (`env.metadata()` is the new one): regexes are resolved
    /// again and groups whose subscribed topics changed get a new group epoch; the next
    /// heartbeat computes their new target assignment.
    pub fn on_new_metadata(
        &mut self,
        env: &ShardEnv,
        _ctx: &strom_coordinator_common::runtime::WriteContext,
    ) -> Vec<CoordinatorRecord> {
        self.metadata_changed(env)
    }

    /// ConsumerGroupDescribe of one group as of `committed_offset`.
    pub fn describe(
        &self,
        group_id: &str,
        committed_offset: i64,
        default_assignor: &str,
        image: &GroupMetadataImage,
    ) -> DescribedGroup {
        let Some(g) = self.committed_group(group_id, committed_offset) else {
            return DescribedGroup::default()
                .with_group_id(StrBytes::from_string(group_id.to_string()).into())
                .with_error_code(ErrorCode::GroupIdNotFound.code())
                .with_error_message(Some(StrBytes::from_string(format!(
                    "Group {group_id} not found."
                ))));
        };
        let members = g
            .members
            .values()
            .map(|m| {
                DescribeMember::default()
                    .with_member_id(str_bytes(&m.member_id))
                    .with_instance_id(m.instance_id.as_deref().map(str_bytes))
                    .with_rack_id(m.rack_id.as_deref().map(str_bytes))
                    .with_member_epoch(m.member_epoch)
                    .with_client_id(str_bytes(&m.client_id))
                    .with_client_host(str_bytes(&m.client_host))
                    .with_subscribed_topic_names(
                        m.subscribed_topic_names
                            .iter()
                            .map(|n| TopicName(str_bytes(n)))
                            .collect(),
                    )
                    .with_subscribed_topic_regex(m.subscribed_topic_regex.as_deref().map(str_bytes))
                    .with_assignment(describe_assignment(&m.assigned_partitions, image))
                    .with_target_assignment(describe_assignment(
                        &g.target_assignment
                            .get(&m.member_id)
                            .cloned()
                            .unwrap_or_default(),
                        image,
                    ))
                    // 0: the member uses the classic protocol, 1: the consumer protocol.
                    .with_member_type(if m.uses_classic_protocol() { 0 } else { 1 })
            })
            .collect();
        DescribedGroup::default()
            .with_group_id(StrBytes::from_string(group_id.to_string()).into())
            .with_group_state(str_bytes(g.state().name()))
            .with_group_epoch(g.group_epoch)
            .with_assignment_epoch(g.assignment_epoch)
            .with_assignor_name(str_bytes(
                &g.preferred_assignor()
                    .unwrap_or_else(|| default_assignor.to_string()),
            ))
            .with_members(members)
    }

    /// Every topic some group subscribes to (for tests and the broker's metadata interest).
    pub fn subscribed_topics(&self) -> BTreeSet<String> {
        let mut all = BTreeSet::new();
        for (_, g) in self.groups.iter() {
            all.extend(g.subscribed_topics());
        }
        all
    }
}

/// Kafka's `validateMemberEpoch`: a classic member that is behind gets ILLEGAL_GENERATION (what
/// its client understands), a consumer-protocol member STALE_MEMBER_EPOCH.
fn check_member_epoch(received: i32, member: &ConsumerGroupMember) -> Result<(), ErrorCode> {
    if received == member.member_epoch {
        Ok(())
    } else if member.uses_classic_protocol() {
        Err(ErrorCode::IllegalGeneration)
    } else {
        Err(ErrorCode::StaleMemberEpoch)
    }
}

fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// Partitions with topic names; topics the image no longer has are left out, as Kafka does.
fn describe_assignment(a: &MemberAssignment, image: &GroupMetadataImage) -> DescribeAssignment {
    DescribeAssignment::default().with_topic_partitions(
        a.iter()
            .filter_map(|(t, ps)| {
                let name = image.names_by_id.get(t)?;
                Some(
                    DescribeTopicPartitions::default()
                        .with_topic_id(*t)
                        .with_topic_name(TopicName(str_bytes(name)))
                        .with_partitions(ps.iter().copied().collect()),
                )
            })
            .collect(),
    )
}

impl Timeline for ConsumerGroups {
    fn revert_to(&mut self, offset: i64) {
        self.groups.revert_to(offset);
    }

    fn commit(&mut self, committed: i64) {
        self.groups.commit(committed);
    }
}

//! One member of a consumer group (Kafka's `ConsumerGroupMember`): its subscription (kept in
//! `ConsumerGroupMemberMetadata` records) and its current assignment with member epoch and
//! reconciliation state (kept in `ConsumerGroupCurrentMemberAssignment` records).

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use crate::assignor::MemberAssignment;
use crate::classic::Protocol;
use crate::records::{
    ClassicMemberMetadata, ClassicProtocol, ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue, ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue, CoordinatorRecord, TopicPartitions,
};

/// What a member using the classic protocol inside a consumer group joined with (Kafka's
/// `ClassicMemberMetadata` of the member metadata record): its session timeout and its
/// JoinGroup protocols, in its order of preference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassicMemberInfo {
    pub session_timeout_ms: i32,
    pub protocols: Vec<Protocol>,
}

impl ClassicMemberInfo {
    /// The protocol the member is answered with (its first, as Kafka's JoinGroup / SyncGroup
    /// of a classic member in a consumer group).
    pub fn protocol_name(&self) -> &str {
        self.protocols.first().map_or("", |p| p.name.as_str())
    }
}

/// Epoch a member sends to leave the group.
pub const LEAVE_GROUP_MEMBER_EPOCH: i32 = -1;
/// Epoch a static member sends to leave temporarily (its assignment is kept for its return).
pub const LEAVE_GROUP_STATIC_MEMBER_EPOCH: i32 = -2;

/// Where a member is in its reconciliation (Kafka's `MemberState`, with its record values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberState {
    /// The member owns its whole share of the target assignment at its epoch.
    Stable,
    /// The member must first give up partitions it still owns.
    UnrevokedPartitions,
    /// The member waits for partitions other members have not released yet.
    UnreleasedPartitions,
    /// A state written by a newer coordinator.
    Unknown,
}

impl MemberState {
    pub fn value(self) -> i8 {
        match self {
            MemberState::Stable => 0,
            MemberState::UnrevokedPartitions => 1,
            MemberState::UnreleasedPartitions => 2,
            MemberState::Unknown => 127,
        }
    }

    pub fn from_value(v: i8) -> Self {
        match v {
            0 => MemberState::Stable,
            1 => MemberState::UnrevokedPartitions,
            2 => MemberState::UnreleasedPartitions,
            _ => MemberState::Unknown,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerGroupMember {
    pub member_id: String,
    pub member_epoch: i32,
    pub previous_member_epoch: i32,
    pub state: MemberState,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub rebalance_timeout_ms: i32,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_topic_names: BTreeSet<String>,
    pub subscribed_topic_regex: Option<String>,
    pub server_assignor_name: Option<String>,
    pub assigned_partitions: MemberAssignment,
    pub partitions_pending_revocation: MemberAssignment,
    /// The member epoch at which each partition it holds (assigned or pending revocation)
    /// was assigned to it (Kafka 4.4's per-partition assignment epochs).
    pub assignment_epochs: BTreeMap<(Uuid, i32), i32>,
    /// Set when the member uses the classic protocol (JoinGroup / SyncGroup / Heartbeat).
    pub classic: Option<ClassicMemberInfo>,
}

impl ConsumerGroupMember {
    /// A member as Kafka's builder starts one: epoch 0, no previous epoch, stable, nothing
    /// owned.
    pub fn new(member_id: impl Into<String>) -> Self {
        Self {
            member_id: member_id.into(),
            member_epoch: 0,
            previous_member_epoch: -1,
            state: MemberState::Stable,
            instance_id: None,
            rack_id: None,
            rebalance_timeout_ms: -1,
            client_id: String::new(),
            client_host: String::new(),
            subscribed_topic_names: BTreeSet::new(),
            subscribed_topic_regex: None,
            server_assignor_name: None,
            assigned_partitions: BTreeMap::new(),
            partitions_pending_revocation: BTreeMap::new(),
            assignment_epochs: BTreeMap::new(),
            classic: None,
        }
    }

    /// Whether the member joined with the classic protocol.
    pub fn uses_classic_protocol(&self) -> bool {
        self.classic.is_some()
    }

    /// The epoch at which the member got the partition (its member epoch when unknown).
    pub fn assignment_epoch(&self, topic_id: Uuid, partition: i32) -> i32 {
        self.assignment_epochs
            .get(&(topic_id, partition))
            .copied()
            .unwrap_or(self.member_epoch)
    }

    /// Whether the member is stable at `target_epoch` (nothing left to reconcile).
    pub fn is_reconciled_to(&self, target_epoch: i32) -> bool {
        self.state == MemberState::Stable && self.member_epoch == target_epoch
    }

    /// The regex the member subscribes with, if any (an empty one subscribes to nothing).
    pub fn regex(&self) -> Option<&str> {
        self.subscribed_topic_regex
            .as_deref()
            .filter(|r| !r.is_empty())
    }

    /// Whether the subscription parts (names, regex) differ.
    pub fn subscription_differs(&self, other: &Self) -> bool {
        self.subscribed_topic_names != other.subscribed_topic_names
            || self.subscribed_topic_regex != other.subscribed_topic_regex
    }

    /// Whether the parts kept in the member metadata record differ.
    pub fn metadata_differs(&self, other: &Self) -> bool {
        self.instance_id != other.instance_id
            || self.rack_id != other.rack_id
            || self.client_id != other.client_id
            || self.client_host != other.client_host
            || self.subscription_differs(other)
            || self.rebalance_timeout_ms != other.rebalance_timeout_ms
            || self.server_assignor_name != other.server_assignor_name
            || self.classic != other.classic
    }

    pub fn metadata_record(&self, group_id: &str) -> CoordinatorRecord {
        CoordinatorRecord::ConsumerGroupMemberMetadata(
            ConsumerGroupMemberMetadataKey {
                group_id: group_id.to_string(),
                member_id: self.member_id.clone(),
                ..Default::default()
            },
            Some((
                0,
                ConsumerGroupMemberMetadataValue {
                    instance_id: self.instance_id.clone(),
                    rack_id: self.rack_id.clone(),
                    client_id: self.client_id.clone(),
                    client_host: self.client_host.clone(),
                    subscribed_topic_names: self.subscribed_topic_names.iter().cloned().collect(),
                    subscribed_topic_regex: self.subscribed_topic_regex.clone(),
                    rebalance_timeout_ms: self.rebalance_timeout_ms,
                    server_assignor: self.server_assignor_name.clone(),
                    classic_member_metadata: self.classic.as_ref().map(|c| ClassicMemberMetadata {
                        session_timeout_ms: c.session_timeout_ms,
                        supported_protocols: c
                            .protocols
                            .iter()
                            .map(|p| ClassicProtocol {
                                name: p.name.clone(),
                                metadata: p.metadata.clone(),
                                ..Default::default()
                            })
                            .collect(),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            )),
        )
    }

    pub fn current_assignment_record(&self, group_id: &str) -> CoordinatorRecord {
        CoordinatorRecord::ConsumerGroupCurrentMemberAssignment(
            current_assignment_key(group_id, &self.member_id),
            Some((
                0,
                ConsumerGroupCurrentMemberAssignmentValue {
                    member_epoch: self.member_epoch,
                    previous_member_epoch: self.previous_member_epoch,
                    state: self.state.value(),
                    assigned_partitions: self.to_record_partitions(&self.assigned_partitions),
                    partitions_pending_revocation: self
                        .to_record_partitions(&self.partitions_pending_revocation),
                    ..Default::default()
                },
            )),
        )
    }

    /// Applies a replayed member metadata value.
    pub fn apply_metadata(&mut self, v: &ConsumerGroupMemberMetadataValue) {
        self.instance_id = v.instance_id.clone();
        self.rack_id = v.rack_id.clone();
        self.client_id = v.client_id.clone();
        self.client_host = v.client_host.clone();
        self.subscribed_topic_names = v.subscribed_topic_names.iter().cloned().collect();
        self.subscribed_topic_regex = v.subscribed_topic_regex.clone();
        self.rebalance_timeout_ms = v.rebalance_timeout_ms;
        self.server_assignor_name = v.server_assignor.clone();
        self.classic = v
            .classic_member_metadata
            .as_ref()
            .map(|c| ClassicMemberInfo {
                session_timeout_ms: c.session_timeout_ms,
                protocols: c
                    .supported_protocols
                    .iter()
                    .map(|p| Protocol {
                        name: p.name.clone(),
                        metadata: p.metadata.clone(),
                    })
                    .collect(),
            });
    }

    /// Applies a replayed current assignment value.
    pub fn apply_current_assignment(&mut self, v: &ConsumerGroupCurrentMemberAssignmentValue) {
        self.member_epoch = v.member_epoch;
        self.previous_member_epoch = v.previous_member_epoch;
        self.state = MemberState::from_value(v.state);
        self.assignment_epochs.clear();
        self.assigned_partitions = self.read_record_partitions(&v.assigned_partitions);
        self.partitions_pending_revocation =
            self.read_record_partitions(&v.partitions_pending_revocation);
    }

    fn to_record_partitions(&self, a: &MemberAssignment) -> Vec<TopicPartitions> {
        a.iter()
            .filter(|(_, p)| !p.is_empty())
            .map(|(t, p)| TopicPartitions {
                topic_id: *t,
                partitions: p.iter().copied().collect(),
                assignment_epochs: Some(p.iter().map(|p| self.assignment_epoch(*t, *p)).collect()),
                ..Default::default()
            })
            .collect()
    }

    /// Reads partitions and their assignment epochs (a record without them, from an older
    /// coordinator, leaves them at the member epoch).
    fn read_record_partitions(&mut self, v: &[TopicPartitions]) -> MemberAssignment {
        let mut a: BTreeMap<Uuid, BTreeSet<i32>> = BTreeMap::new();
        for tp in v {
            let epochs = tp
                .assignment_epochs
                .as_ref()
                .filter(|e| e.len() == tp.partitions.len());
            for (i, p) in tp.partitions.iter().enumerate() {
                a.entry(tp.topic_id).or_default().insert(*p);
                if let Some(e) = epochs {
                    self.assignment_epochs.insert((tp.topic_id, *p), e[i]);
                }
            }
        }
        a
    }
}

pub fn current_assignment_key(
    group_id: &str,
    member_id: &str,
) -> ConsumerGroupCurrentMemberAssignmentKey {
    ConsumerGroupCurrentMemberAssignmentKey {
        group_id: group_id.to_string(),
        member_id: member_id.to_string(),
        ..Default::default()
    }
}

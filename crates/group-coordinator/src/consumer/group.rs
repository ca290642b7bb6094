//! One consumer group (Kafka's `ConsumerGroup`): group epoch, members, target assignment,
//! who owns which partition at which epoch, resolved regular expressions — all rebuilt from the
//! group's `ConsumerGroup*` records by [`ConsumerGroup::apply`].

use std::collections::{BTreeMap, BTreeSet, HashMap};

use uuid::Uuid;

use super::member::{ConsumerGroupMember, MemberState};
use crate::assignor::MemberAssignment;
use crate::metadata::GroupMetadataImage;
use crate::records::*;

/// Kafka's `ConsumerGroup.ConsumerGroupState`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumerGroupState {
    Empty,
    Assigning,
    Reconciling,
    Stable,
    Dead,
}

impl ConsumerGroupState {
    /// The name ListGroups and ConsumerGroupDescribe show.
    pub fn name(self) -> &'static str {
        match self {
            ConsumerGroupState::Empty => "Empty",
            ConsumerGroupState::Assigning => "Assigning",
            ConsumerGroupState::Reconciling => "Reconciling",
            ConsumerGroupState::Stable => "Stable",
            ConsumerGroupState::Dead => "Dead",
        }
    }
}

/// The topics a regular expression matched when it was last resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedRegex {
    pub topics: BTreeSet<String>,
    pub version: i64,
    pub timestamp: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerGroup {
    pub group_id: String,
    pub group_epoch: i32,
    /// Hash of the subscribed topics' metadata when the epoch was last bumped for it.
    pub metadata_hash: i64,
    /// The epoch of the target assignment (-1 before the first).
    pub assignment_epoch: i32,
    pub members: BTreeMap<String, ConsumerGroupMember>,
    /// Instance id -> member id of the static members.
    pub static_members: BTreeMap<String, String>,
    pub target_assignment: BTreeMap<String, MemberAssignment>,
    /// Owner epoch of each partition assigned or pending revocation (Kafka's
    /// `currentPartitionEpoch`): a partition is free for a new owner only when absent.
    pub partition_epochs: HashMap<(Uuid, i32), i32>,
    pub resolved_regexes: BTreeMap<String, ResolvedRegex>,
    /// Set by a group metadata tombstone: the group is to be removed.
    pub deleted: bool,
}

impl ConsumerGroup {
    pub fn new(group_id: impl Into<String>) -> Self {
        Self {
            group_id: group_id.into(),
            group_epoch: 0,
            metadata_hash: 0,
            assignment_epoch: -1,
            members: BTreeMap::new(),
            static_members: BTreeMap::new(),
            target_assignment: BTreeMap::new(),
            partition_epochs: HashMap::new(),
            resolved_regexes: BTreeMap::new(),
            deleted: false,
        }
    }

    /// Kafka's `maybeUpdateGroupState`, computed on demand.
    pub fn state(&self) -> ConsumerGroupState {
        if self.members.is_empty() {
            ConsumerGroupState::Empty
        } else if self.group_epoch > self.assignment_epoch {
            ConsumerGroupState::Assigning
        } else if self
            .members
            .values()
            .any(|m| !m.is_reconciled_to(self.assignment_epoch))
        {
            ConsumerGroupState::Reconciling
        } else {
            ConsumerGroupState::Stable
        }
    }

    /// The member holding `instance_id`, if any.
    pub fn static_member(&self, instance_id: &str) -> Option<&ConsumerGroupMember> {
        self.static_members
            .get(instance_id)
            .and_then(|id| self.members.get(id))
    }

    /// The epoch of the member owning the partition, -1 when it is free.
    pub fn current_partition_epoch(&self, topic_id: Uuid, partition: i32) -> i32 {
        self.partition_epochs
            .get(&(topic_id, partition))
            .copied()
            .unwrap_or(-1)
    }

    /// The target assignment of a member, or of the static member it replaces (Kafka's
    /// `targetAssignment(memberId, instanceId)`).
    pub fn target_of(&self, member_id: &str, instance_id: Option<&str>) -> MemberAssignment {
        if let Some(a) = self.target_assignment.get(member_id) {
            return a.clone();
        }
        instance_id
            .and_then(|i| self.static_members.get(i))
            .and_then(|prev| self.target_assignment.get(prev))
            .cloned()
            .unwrap_or_default()
    }

    /// The topics a member subscribes to: its names plus what its regex resolved to.
    pub fn member_topics(&self, member: &ConsumerGroupMember) -> BTreeSet<String> {
        let mut topics = member.subscribed_topic_names.clone();
        if let Some(r) = member.regex().and_then(|r| self.resolved_regexes.get(r)) {
            topics.extend(r.topics.iter().cloned());
        }
        topics
    }

    /// Every topic some member subscribes to.
    pub fn subscribed_topics(&self) -> BTreeSet<String> {
        let mut all = BTreeSet::new();
        for m in self.members.values() {
            all.extend(self.member_topics(m));
        }
        all
    }

    /// Whether some member still subscribes with `regex`.
    pub fn regex_in_use(&self, regex: &str) -> bool {
        self.members.values().any(|m| m.regex() == Some(regex))
    }

    /// The assignor most members asked for (Kafka's preferred server assignor); ties go to
    /// the smaller name so the choice does not depend on map order.
    pub fn preferred_assignor(&self) -> Option<String> {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for m in self.members.values() {
            if let Some(a) = &m.server_assignor_name {
                *counts.entry(a.as_str()).or_default() += 1;
            }
        }
        let max = counts.values().copied().max()?;
        counts
            .into_iter()
            .find(|(_, c)| *c == max)
            .map(|(a, _)| a.to_string())
    }

    /// Adds or replaces a member, keeping the static member index and partition owners.
    pub fn update_member(&mut self, member: ConsumerGroupMember) {
        let old = self.members.get(&member.member_id).cloned();
        if let Some(old) = &old {
            self.release_partitions(old);
            if let Some(i) = &old.instance_id {
                if self.static_members.get(i) == Some(&old.member_id) {
                    self.static_members.remove(i);
                }
            }
        }
        if let Some(i) = &member.instance_id {
            self.static_members
                .insert(i.clone(), member.member_id.clone());
        }
        for (t, ps) in member
            .assigned_partitions
            .iter()
            .chain(member.partitions_pending_revocation.iter())
        {
            for p in ps {
                self.partition_epochs.insert((*t, *p), member.member_epoch);
            }
        }
        self.members.insert(member.member_id.clone(), member);
    }

    pub fn remove_member(&mut self, member_id: &str) {
        if let Some(old) = self.members.remove(member_id) {
            self.release_partitions(&old);
            if let Some(i) = &old.instance_id {
                if self.static_members.get(i).map(String::as_str) == Some(member_id) {
                    self.static_members.remove(i);
                }
            }
        }
    }

    fn release_partitions(&mut self, m: &ConsumerGroupMember) {
        for (t, ps) in m
            .assigned_partitions
            .iter()
            .chain(m.partitions_pending_revocation.iter())
        {
            for p in ps {
                // Only if it is still this member's (its epoch), as Kafka checks.
                if self.partition_epochs.get(&(*t, *p)) == Some(&m.member_epoch) {
                    self.partition_epochs.remove(&(*t, *p));
                }
            }
        }
    }

    /// Applies one of the group's records (replay). Records of another group are ignored.
    pub fn apply(&mut self, record: &CoordinatorRecord) {
        match record {
            CoordinatorRecord::ConsumerGroupMetadata(_, Some((_, v))) => {
                self.group_epoch = v.epoch;
                self.metadata_hash = v.metadata_hash;
                self.deleted = false;
            }
            CoordinatorRecord::ConsumerGroupMetadata(_, None) => self.deleted = true,
            // Kafka 4.4 keeps the subscribed topics' state as a hash in the group metadata;
            // the older partition metadata record carries nothing it still reads.
            CoordinatorRecord::ConsumerGroupPartitionMetadata(..) => {}
            CoordinatorRecord::ConsumerGroupMemberMetadata(k, Some((_, v))) => {
                let mut m = self
                    .members
                    .get(&k.member_id)
                    .cloned()
                    .unwrap_or_else(|| ConsumerGroupMember::new(k.member_id.clone()));
                m.apply_metadata(v);
                self.update_member(m);
            }
            CoordinatorRecord::ConsumerGroupMemberMetadata(k, None) => {
                self.remove_member(&k.member_id)
            }
            CoordinatorRecord::ConsumerGroupTargetAssignmentMetadata(_, Some((_, v))) => {
                self.assignment_epoch = v.assignment_epoch;
            }
            CoordinatorRecord::ConsumerGroupTargetAssignmentMetadata(_, None) => {
                self.assignment_epoch = -1;
            }
            CoordinatorRecord::ConsumerGroupTargetAssignmentMember(k, Some((_, v))) => {
                let mut a: MemberAssignment = BTreeMap::new();
                for tp in &v.topic_partitions {
                    if !tp.partitions.is_empty() {
                        a.entry(tp.topic_id)
                            .or_default()
                            .extend(tp.partitions.iter().copied());
                    }
                }
                self.target_assignment.insert(k.member_id.clone(), a);
            }
            CoordinatorRecord::ConsumerGroupTargetAssignmentMember(k, None) => {
                self.target_assignment.remove(&k.member_id);
            }
            CoordinatorRecord::ConsumerGroupCurrentMemberAssignment(k, Some((_, v))) => {
                // Kafka requires the member's metadata first; a stray assignment for an
                // unknown member still creates it so nothing it owns is lost.
                let mut m = self
                    .members
                    .get(&k.member_id)
                    .cloned()
                    .unwrap_or_else(|| ConsumerGroupMember::new(k.member_id.clone()));
                m.apply_current_assignment(v);
                self.update_member(m);
            }
            CoordinatorRecord::ConsumerGroupCurrentMemberAssignment(k, None) => {
                if let Some(mut m) = self.members.get(&k.member_id).cloned() {
                    m.member_epoch = super::member::LEAVE_GROUP_MEMBER_EPOCH;
                    m.previous_member_epoch = super::member::LEAVE_GROUP_MEMBER_EPOCH;
                    m.state = MemberState::Stable;
                    m.assigned_partitions.clear();
                    m.partitions_pending_revocation.clear();
                    self.update_member(m);
                }
            }
            CoordinatorRecord::ConsumerGroupRegularExpression(k, Some((_, v))) => {
                self.resolved_regexes.insert(
                    k.regular_expression.clone(),
                    ResolvedRegex {
                        topics: v.topics.iter().cloned().collect(),
                        version: v.version,
                        timestamp: v.timestamp,
                    },
                );
            }
            CoordinatorRecord::ConsumerGroupRegularExpression(k, None) => {
                self.resolved_regexes.remove(&k.regular_expression);
            }
            _ => {}
        }
    }

    /// The records that delete the group and everything in it (Kafka's
    /// `createGroupTombstoneRecords`, in its order).
    pub fn tombstone_records(&self) -> Vec<CoordinatorRecord> {
        let g = &self.group_id;
        let mut v = Vec::new();
        for id in self.members.keys() {
            v.push(current_assignment_tombstone(g, id));
        }
        for id in self.members.keys() {
            v.push(target_assignment_tombstone(g, id));
        }
        v.push(CoordinatorRecord::ConsumerGroupTargetAssignmentMetadata(
            ConsumerGroupTargetAssignmentMetadataKey {
                group_id: g.clone(),
                ..Default::default()
            },
            None,
        ));
        for id in self.members.keys() {
            v.push(member_metadata_tombstone(g, id));
        }
        for r in self.resolved_regexes.keys() {
            v.push(regex_tombstone(g, r));
        }
        v.push(CoordinatorRecord::ConsumerGroupMetadata(
            ConsumerGroupMetadataKey {
                group_id: g.clone(),
                ..Default::default()
            },
            None,
        ));
        v
    }
}

pub fn current_assignment_tombstone(group_id: &str, member_id: &str) -> CoordinatorRecord {
    CoordinatorRecord::ConsumerGroupCurrentMemberAssignment(
        super::member::current_assignment_key(group_id, member_id),
        None,
    )
}

pub fn target_assignment_tombstone(group_id: &str, member_id: &str) -> CoordinatorRecord {
    CoordinatorRecord::ConsumerGroupTargetAssignmentMember(
        ConsumerGroupTargetAssignmentMemberKey {
            group_id: group_id.to_string(),
            member_id: member_id.to_string(),
            ..Default::default()
        },
        None,
    )
}

pub fn member_metadata_tombstone(group_id: &str, member_id: &str) -> CoordinatorRecord {
    CoordinatorRecord::ConsumerGroupMemberMetadata(
        ConsumerGroupMemberMetadataKey {
            group_id: group_id.to_string(),
            member_id: member_id.to_string(),
            ..Default::default()
        },
        None,
    )
}

pub fn regex_tombstone(group_id: &str, regex: &str) -> CoordinatorRecord {
    CoordinatorRecord::ConsumerGroupRegularExpression(
        ConsumerGroupRegularExpressionKey {
            group_id: group_id.to_string(),
            regular_expression: regex.to_string(),
            ..Default::default()
        },
        None,
    )
}

pub fn regex_record(group_id: &str, regex: &str, r: &ResolvedRegex) -> CoordinatorRecord {
    CoordinatorRecord::ConsumerGroupRegularExpression(
        ConsumerGroupRegularExpressionKey {
            group_id: group_id.to_string(),
            regular_expression: regex.to_string(),
            ..Default::default()
        },
        Some((
            0,
            ConsumerGroupRegularExpressionValue {
                topics: r.topics.iter().cloned().collect(),
                version: r.version,
                timestamp: r.timestamp,
                ..Default::default()
            },
        )),
    )
}

pub fn group_epoch_record(group_id: &str, epoch: i32, metadata_hash: i64) -> CoordinatorRecord {
    CoordinatorRecord::ConsumerGroupMetadata(
        ConsumerGroupMetadataKey {
            group_id: group_id.to_string(),
            ..Default::default()
        },
        Some((
            0,
            ConsumerGroupMetadataValue {
                epoch,
                metadata_hash,
                ..Default::default()
            },
        )),
    )
}

pub fn target_assignment_record(
    group_id: &str,
    member_id: &str,
    a: &MemberAssignment,
) -> CoordinatorRecord {
    CoordinatorRecord::ConsumerGroupTargetAssignmentMember(
        ConsumerGroupTargetAssignmentMemberKey {
            group_id: group_id.to_string(),
            member_id: member_id.to_string(),
            ..Default::default()
        },
        Some((
            0,
            ConsumerGroupTargetAssignmentMemberValue {
                topic_partitions: a
                    .iter()
                    .filter(|(_, p)| !p.is_empty())
                    .map(|(t, p)| TopicPartition {
                        topic_id: *t,
                        partitions: p.iter().copied().collect(),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            },
        )),
    )
}

pub fn target_assignment_epoch_record(
    group_id: &str,
    epoch: i32,
    now_ms: i64,
) -> CoordinatorRecord {
    CoordinatorRecord::ConsumerGroupTargetAssignmentMetadata(
        ConsumerGroupTargetAssignmentMetadataKey {
            group_id: group_id.to_string(),
            ..Default::default()
        },
        Some((
            0,
            ConsumerGroupTargetAssignmentMetadataValue {
                assignment_epoch: epoch,
                assignment_timestamp: now_ms,
                ..Default::default()
            },
        )),
    )
}

/// A hash of the subscribed topics' metadata (name, id, partition count, racks), so a change
/// of any of them bumps the group epoch (Kafka 4.4's group metadata hash). It is 0 for no
/// topics, as Kafka's; otherwise it is Strom's own 64-bit FNV-1a over a canonical encoding,
/// not bit-equal to Kafka's XXH3, so a group loaded from a Kafka-written log rebalances once.
pub fn metadata_hash(topics: &BTreeSet<String>, image: &GroupMetadataImage) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut any = false;
    let eat = |bytes: &[u8], h: &mut u64| {
        for b in bytes {
            *h ^= u64::from(*b);
            *h = h.wrapping_mul(0x0100_0000_01b3);
        }
    };
    for name in topics {
        let Some(t) = image.topic(name) else { continue };
        any = true;
        eat(&(name.len() as u32).to_be_bytes(), &mut h);
        eat(name.as_bytes(), &mut h);
        eat(t.id.as_bytes(), &mut h);
        eat(&t.num_partitions.to_be_bytes(), &mut h);
        for (p, racks) in &t.partition_racks {
            eat(&p.to_be_bytes(), &mut h);
            for r in racks {
                eat(&(r.len() as u32).to_be_bytes(), &mut h);
                eat(r.as_bytes(), &mut h);
            }
        }
    }
    if any {
        h as i64
    } else {
        0
    }
}

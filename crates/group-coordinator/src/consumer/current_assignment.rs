//! Reconciliation of one member towards its target assignment (Kafka's
//! `CurrentAssignmentBuilder`): partitions the member must give up are revoked first (the
//! member stays at its epoch in UNREVOKED_PARTITIONS until its heartbeat no longer reports
//! them); partitions still owned by another member are held back (UNRELEASED_PARTITIONS) until
//! that member released them; otherwise the member moves to the target epoch, STABLE.

use std::collections::BTreeSet;

use uuid::Uuid;

use super::member::{ConsumerGroupMember, MemberState};
use crate::assignor::MemberAssignment;

/// A partition the member reports owning in its heartbeat.
pub type OwnedPartitions = [(Uuid, Vec<i32>)];

/// Why a member cannot be reconciled: Kafka fences it (FENCED_MEMBER_EPOCH).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("The consumer group member is in a unknown state. The member must abandon all its partitions and rejoin.")]
pub struct UnknownMemberState;

pub struct CurrentAssignmentBuilder<'a> {
    member: &'a ConsumerGroupMember,
    target_epoch: i32,
    target: &'a MemberAssignment,
    /// The epoch of the owner of a partition, -1 when it is free.
    partition_epoch: &'a dyn Fn(Uuid, i32) -> i32,
    /// What the member reported owning (`None`: it did not say).
    owned: Option<&'a OwnedPartitions>,
}

impl<'a> CurrentAssignmentBuilder<'a> {
    pub fn new(
        member: &'a ConsumerGroupMember,
        target_epoch: i32,
        target: &'a MemberAssignment,
        partition_epoch: &'a dyn Fn(Uuid, i32) -> i32,
        owned: Option<&'a OwnedPartitions>,
    ) -> Self {
        Self {
            member,
            target_epoch,
            target,
            partition_epoch,
            owned,
        }
    }

    pub fn build(&self) -> Result<ConsumerGroupMember, UnknownMemberState> {
        let m = self.member;
        match m.state {
            MemberState::Stable => {
                if m.member_epoch != self.target_epoch {
                    Ok(self.next(m.member_epoch, &m.assigned_partitions))
                } else {
                    Ok(m.clone())
                }
            }
            MemberState::UnrevokedPartitions => {
                // Until the heartbeat stops reporting the revoked partitions the member
                // cannot move on.
                if self.owns_any(&m.partitions_pending_revocation) {
                    Ok(m.clone())
                } else {
                    Ok(self.next(m.member_epoch + 1, &m.assigned_partitions))
                }
            }
            MemberState::UnreleasedPartitions => {
                Ok(self.next(m.member_epoch, &m.assigned_partitions))
            }
            MemberState::Unknown => {
                // A state from a newer coordinator: only a member that gave up everything
                // can be reconciled from scratch.
                match self.owned {
                    Some(o) if o.iter().all(|(_, p)| p.is_empty()) => {
                        Ok(self.next(self.target_epoch, &m.assigned_partitions))
                    }
                    _ => Err(UnknownMemberState),
                }
            }
        }
    }

    /// Whether the member still reports owning any of `a` (without a report it must be
    /// assumed to).
    fn owns_any(&self, a: &MemberAssignment) -> bool {
        let Some(owned) = self.owned else {
            return true;
        };
        owned.iter().any(|(t, ps)| {
            a.get(t)
                .is_some_and(|set| ps.iter().any(|p| set.contains(p)))
        })
    }

    fn next(&self, member_epoch: i32, assigned: &MemberAssignment) -> ConsumerGroupMember {
        let mut has_unreleased = false;
        let mut new_assigned = MemberAssignment::new();
        let mut new_revoking = MemberAssignment::new();
        let mut new_assigning = MemberAssignment::new();
        let empty = BTreeSet::new();
        let topics: BTreeSet<Uuid> = self.target.keys().chain(assigned.keys()).copied().collect();
        for t in topics {
            let target = self.target.get(&t).unwrap_or(&empty);
            let current = assigned.get(&t).unwrap_or(&empty);
            // Kept: what the member has and should have.
            let keep: BTreeSet<i32> = current.intersection(target).copied().collect();
            // To revoke: what it has and should not.
            let revoke: BTreeSet<i32> = current.difference(&keep).copied().collect();
            // To assign: what it should have, once nobody else owns it.
            let mut assign = BTreeSet::new();
            for p in target.difference(&keep) {
                if (self.partition_epoch)(t, *p) != -1 {
                    has_unreleased = true;
                } else {
                    assign.insert(*p);
                }
            }
            if !keep.is_empty() {
                new_assigned.insert(t, keep);
            }
            if !revoke.is_empty() {
                new_revoking.insert(t, revoke);
            }
            if !assign.is_empty() {
                new_assigning.insert(t, assign);
            }
        }
        let mut out = self.member.clone();
        let bump = |out: &mut ConsumerGroupMember, e: i32| {
            out.previous_member_epoch = out.member_epoch;
            out.member_epoch = e;
        };
        if !new_revoking.is_empty() && self.owns_any(&new_revoking) {
            // Revoke first, staying at the current epoch.
            out.state = MemberState::UnrevokedPartitions;
            bump(&mut out, member_epoch);
            out.assigned_partitions = new_assigned;
            out.partitions_pending_revocation = new_revoking;
        } else {
            for (t, ps) in new_assigning {
                new_assigned.entry(t).or_default().extend(ps);
            }
            out.state = if has_unreleased {
                MemberState::UnreleasedPartitions
            } else {
                MemberState::Stable
            };
            bump(&mut out, self.target_epoch);
            out.assigned_partitions = new_assigned;
            out.partitions_pending_revocation = MemberAssignment::new();
        }
        out
    }
}

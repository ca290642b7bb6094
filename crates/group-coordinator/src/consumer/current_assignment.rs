//! Reconciliation of one member towards its target assignment (Kafka's
//! `CurrentAssignmentBuilder`): partitions the member must give up are revoked first (the
//! member stays at its epoch in UNREVOKED_PARTITIONS until its heartbeat no longer reports
//! them); partitions still owned by another member are held back (UNRELEASED_PARTITIONS) until
//! that member released them; otherwise the member moves to the target epoch, STABLE.

use std::collections::{BTreeMap, BTreeSet};

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
    /// The topics the member subscribes to (names and resolved regex, as ids of the image):
    /// the target of any other topic counts as empty.
    subscribed: &'a BTreeSet<Uuid>,
    /// Whether this heartbeat changed the member's subscription (partitions of topics it
    /// dropped are revoked at once, even at the target epoch).
    subscription_changed: bool,
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
        subscribed: &'a BTreeSet<Uuid>,
        subscription_changed: bool,
        partition_epoch: &'a dyn Fn(Uuid, i32) -> i32,
        owned: Option<&'a OwnedPartitions>,
    ) -> Self {
        Self {
            member,
            target_epoch,
            target,
            subscribed,
            subscription_changed,
            partition_epoch,
            owned,
        }
    }

    pub fn build(&self) -> Result<ConsumerGroupMember, UnknownMemberState> {
        let m = self.member;
        match m.state {
            MemberState::Stable => {
                if m.member_epoch != self.target_epoch {
                    Ok(self.next(m.member_epoch))
                } else if self.subscription_changed {
                    Ok(self.drop_unsubscribed(m.member_epoch))
                } else {
                    Ok(m.clone())
                }
            }
            MemberState::UnrevokedPartitions => {
                // Until the heartbeat stops reporting the revoked partitions the member
                // cannot move on (but may have more to revoke if it dropped topics).
                if self.owns_any(&m.partitions_pending_revocation) {
                    if self.subscription_changed {
                        Ok(self.drop_unsubscribed(m.member_epoch))
                    } else {
                        Ok(m.clone())
                    }
                } else {
                    Ok(self.next(m.member_epoch))
                }
            }
            MemberState::UnreleasedPartitions => Ok(self.next(m.member_epoch)),
            MemberState::Unknown => {
                // A state from a newer coordinator: only a member that reports owning nothing
                // can be reconciled from scratch.
                match self.owned {
                    Some([]) => Ok(self.next(self.target_epoch)),
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

    fn bump(out: &mut ConsumerGroupMember, epoch: i32) {
        out.previous_member_epoch = out.member_epoch;
        out.member_epoch = epoch;
    }

    /// The subscription changed at the target epoch: partitions of topics no longer
    /// subscribed move to pending revocation (Kafka's `updateCurrentAssignment`).
    fn drop_unsubscribed(&self, member_epoch: i32) -> ConsumerGroupMember {
        let m = self.member;
        let mut assigned = m.assigned_partitions.clone();
        let mut pending = m.partitions_pending_revocation.clone();
        let mut removed = false;
        for (t, ps) in &m.assigned_partitions {
            if !self.subscribed.contains(t) {
                assigned.remove(t);
                pending.entry(*t).or_default().extend(ps.iter().copied());
                removed = true;
            }
        }
        // Kafka treats "subscribed to nothing, nothing pending" as removing everything, even
        // when nothing is assigned (its fresh empty map is never the member's own), so such a
        // member still moves its previous epoch.
        if self.subscribed.is_empty() && m.partitions_pending_revocation.is_empty() {
            removed = true;
        }
        if !removed {
            return m.clone();
        }
        let mut out = m.clone();
        Self::bump(&mut out, member_epoch);
        out.assigned_partitions = assigned;
        if !pending.is_empty() && self.owns_any(&pending) {
            out.state = MemberState::UnrevokedPartitions;
            out.partitions_pending_revocation = pending;
        }
        out.assignment_epochs = held_epochs(m, &out);
        out
    }

    fn next(&self, member_epoch: i32) -> ConsumerGroupMember {
        let m = self.member;
        let assigned = &m.assigned_partitions;
        let mut has_unreleased = false;
        let mut new_assigned = MemberAssignment::new();
        let mut new_revoking = MemberAssignment::new();
        let mut new_assigning = MemberAssignment::new();
        let empty = BTreeSet::new();
        let topics: BTreeSet<Uuid> = self.target.keys().chain(assigned.keys()).copied().collect();
        for t in topics {
            let target = if self.subscribed.contains(&t) {
                self.target.get(&t).unwrap_or(&empty)
            } else {
                &empty
            };
            let current = assigned.get(&t).unwrap_or(&empty);
            let own_pending = m.partitions_pending_revocation.get(&t).unwrap_or(&empty);
            // Kept: what the member has and should have.
            let keep: BTreeSet<i32> = current.intersection(target).copied().collect();
            // To revoke: what it has and should not.
            let revoke: BTreeSet<i32> = current.difference(&keep).copied().collect();
            // To assign: what it should have, once nobody else owns it (its own pending
            // revocation does not hold it back: only one member owns a partition).
            let mut assign = BTreeSet::new();
            for p in target.difference(&keep) {
                if (self.partition_epoch)(t, *p) != -1 && !own_pending.contains(p) {
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
        let mut out = m.clone();
        if !new_revoking.is_empty() && self.owns_any(&new_revoking) {
            // Revoke first, staying at the current epoch.
            out.state = MemberState::UnrevokedPartitions;
            Self::bump(&mut out, member_epoch);
            out.assigned_partitions = new_assigned;
            out.partitions_pending_revocation = new_revoking;
        } else {
            let mut epochs = BTreeMap::new();
            for (t, ps) in &new_assigning {
                for p in ps {
                    epochs.insert((*t, *p), self.target_epoch);
                }
            }
            for (t, ps) in new_assigning {
                new_assigned.entry(t).or_default().extend(ps);
            }
            out.state = if has_unreleased {
                MemberState::UnreleasedPartitions
            } else {
                MemberState::Stable
            };
            Self::bump(&mut out, self.target_epoch);
            out.assigned_partitions = new_assigned;
            out.partitions_pending_revocation = MemberAssignment::new();
            // Partitions kept keep the epoch they were assigned at; new ones get the target's.
            for (t, ps) in &out.assigned_partitions {
                for p in ps {
                    epochs
                        .entry((*t, *p))
                        .or_insert_with(|| m.assignment_epoch(*t, *p));
                }
            }
            out.assignment_epochs = epochs;
            return out;
        }
        out.assignment_epochs = held_epochs(m, &out);
        out
    }
}

/// The assignment epochs of what `out` holds, as `m` had them (explicit, so they do not move
/// with the member epoch).
fn held_epochs(m: &ConsumerGroupMember, out: &ConsumerGroupMember) -> BTreeMap<(Uuid, i32), i32> {
    out.assigned_partitions
        .iter()
        .chain(out.partitions_pending_revocation.iter())
        .flat_map(|(t, ps)| {
            ps.iter()
                .map(move |p| ((*t, *p), m.assignment_epoch(*t, *p)))
        })
        .collect()
}

//! SyncGroup, Heartbeat, LeaveGroup and DescribeGroups of classic groups (Kafka's
//! `classicGroupSync*`, `classicGroupHeartbeat*`, `classicGroupLeave*`, `describeGroups`).

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use strom_coordinator_common::runtime::{AfterCommit, WriteResult};
use strom_protocol::kafka::messages::describe_groups_response::DescribedGroup;
use strom_protocol::kafka::messages::SyncGroupResponse;
use strom_protocol::ErrorCode;
use tokio::sync::oneshot;

use super::group::{ClassicGroup, GroupState};
use super::join::{
    maybe_complete_join_phase, maybe_prepare_rebalance_or_complete_join, reschedule_heartbeat,
    reset_and_propagate_assignment_with_error, set_and_propagate_assignment,
};
use super::member::s;
use super::responses::{join_error, sync_error, sync_ok};
use super::{group_record, heartbeat_key, sync_key, ClassicGroups, Outcome};
use crate::shard::ShardEnv;

/// A SyncGroup request as the state machine needs it.
#[derive(Debug, Clone)]
pub struct SyncParams {
    pub group_id: String,
    pub generation_id: i32,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignments: Vec<(String, Bytes)>,
}

/// A request's protocol type or name disagrees with the group's (both known).
fn inconsistent(req: Option<&str>, group: Option<&str>) -> bool {
    matches!((req, group), (Some(a), Some(b)) if a != b)
}

impl ClassicGroups {
    /// SyncGroup: the response goes to `tx`, now or once the leader's assignment is committed.
    pub fn sync(
        &mut self,
        env: &ShardEnv,
        at: i64,
        p: SyncParams,
        tx: oneshot::Sender<SyncGroupResponse>,
    ) -> Outcome {
        let Some(g) = self.group_mut(&p.group_id) else {
            let _ = tx.send(sync_error(ErrorCode::UnknownMemberId));
            return Outcome::none();
        };
        if g.is_empty() {
            let _ = tx.send(sync_error(ErrorCode::UnknownMemberId));
            return Outcome::none();
        }
        if let Err(code) = validate_sync(g, &p) {
            let _ = tx.send(sync_error(code));
            return Outcome::none();
        }
        let out = match g.state {
            GroupState::PreparingRebalance => {
                let _ = tx.send(sync_error(ErrorCode::RebalanceInProgress));
                Outcome::none()
            }
            GroupState::CompletingRebalance => {
                if let Some(m) = g.member_mut(&p.member_id) {
                    m.sync_tx = Some(tx);
                }
                remove_pending_sync_member(env, g, &p.member_id);
                if g.is_leader(&p.member_id) {
                    leader_sync(env, g, at, &p)
                } else {
                    Outcome::none()
                }
            }
            GroupState::Stable => {
                remove_pending_sync_member(env, g, &p.member_id);
                let a = g
                    .member(&p.member_id)
                    .map(|m| m.assignment.clone())
                    .unwrap_or_default();
                let _ = tx.send(sync_ok(g, a));
                Outcome::none()
            }
            GroupState::Empty | GroupState::Dead => {
                let _ = tx.send(sync_error(ErrorCode::UnknownServerError));
                Outcome::none()
            }
        };
        self.finish(out)
    }

    /// Heartbeat: the session timer starts again; the code tells the member whether to rejoin.
    pub fn heartbeat(
        &mut self,
        env: &ShardEnv,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation_id: i32,
    ) -> Result<(), ErrorCode> {
        let g = self.group_mut(group_id).ok_or(ErrorCode::UnknownMemberId)?;
        if g.is_in(GroupState::Dead) {
            return Err(ErrorCode::CoordinatorNotAvailable);
        }
        g.validate_member(member_id, instance_id)?;
        if generation_id != g.generation_id {
            return Err(ErrorCode::IllegalGeneration);
        }
        let session = g.member(member_id).map_or(0, |m| m.session_timeout_ms) as i64;
        match g.state {
            GroupState::Empty => Err(ErrorCode::UnknownMemberId),
            GroupState::PreparingRebalance => {
                reschedule_heartbeat(env, group_id, member_id, session);
                Err(ErrorCode::RebalanceInProgress)
            }
            // Members heartbeat from their JoinGroup response on, before SyncGroup.
            GroupState::CompletingRebalance | GroupState::Stable => {
                reschedule_heartbeat(env, group_id, member_id, session);
                Ok(())
            }
            GroupState::Dead => Err(ErrorCode::CoordinatorNotAvailable),
        }
    }

    /// LeaveGroup of `members` (member id, group.instance.id): one code per member, and what
    /// the departures set off (`None`: the member left).
    pub fn leave(
        &mut self,
        env: &ShardEnv,
        group_id: &str,
        members: &[(String, Option<String>)],
    ) -> Result<(Vec<Option<ErrorCode>>, Outcome), ErrorCode> {
        let g = self.group_mut(group_id).ok_or(ErrorCode::UnknownMemberId)?;
        if g.is_in(GroupState::Dead) {
            return Err(ErrorCode::CoordinatorNotAvailable);
        }
        let mut codes = Vec::with_capacity(members.len());
        for (member_id, instance_id) in members {
            let code = if member_id.is_empty() {
                // An admin removes a static member by its instance id alone.
                match instance_id
                    .as_deref()
                    .and_then(|i| g.static_member_id(i).cloned())
                {
                    Some(id) => {
                        remove_current_member(env, g, &id);
                        None
                    }
                    None => Some(ErrorCode::UnknownMemberId),
                }
            } else if g.is_pending_member(member_id) {
                g.remove(member_id);
                env.timer.cancel(&heartbeat_key(group_id, member_id));
                None
            } else {
                match g.validate_member(member_id, instance_id.as_deref()) {
                    Ok(()) => {
                        remove_current_member(env, g, member_id);
                        None
                    }
                    Err(code) => Some(code),
                }
            };
            codes.push(code);
        }
        let mut out = Outcome::none();
        if codes.contains(&None) {
            out = match g.state {
                GroupState::Stable | GroupState::CompletingRebalance => {
                    maybe_prepare_rebalance_or_complete_join(env, g)
                }
                GroupState::PreparingRebalance => maybe_complete_join_phase(env, g),
                _ => Outcome::none(),
            };
        }
        Ok((codes, self.finish(out)))
    }

    /// DescribeGroups of one group as of `committed`.
    pub fn describe(&self, group_id: &str, committed: i64, api_version: i16) -> DescribedGroup {
        let not_found = |message: String| {
            let d = DescribedGroup::default()
                .with_group_id(s(group_id).into())
                .with_group_state(s(GroupState::Dead.name()));
            if api_version >= 6 {
                // KIP-1043: v6 tells an unknown (or non-classic) group apart from a dead one.
                d.with_error_code(ErrorCode::GroupIdNotFound.code())
                    .with_error_message(Some(s(&message)))
            } else {
                d
            }
        };
        let Some(g) = self.committed_group(group_id, committed) else {
            return not_found(format!("Group {group_id} not found."));
        };
        let stable = g.is_in(GroupState::Stable);
        let protocol = if stable {
            g.protocol_name.as_deref()
        } else {
            None
        };
        DescribedGroup::default()
            .with_group_id(s(group_id).into())
            .with_group_state(s(g.state.name()))
            .with_protocol_type(s(g.protocol_type.as_deref().unwrap_or("")))
            .with_protocol_data(s(protocol.unwrap_or("")))
            .with_members(
                g.members_in_order()
                    .into_iter()
                    // Member metadata only while the group is stable.
                    .map(|m| m.describe(protocol))
                    .collect(),
            )
    }
}

fn validate_sync(g: &ClassicGroup, p: &SyncParams) -> Result<(), ErrorCode> {
    if g.is_in(GroupState::Dead) {
        return Err(ErrorCode::CoordinatorNotAvailable);
    }
    g.validate_member(&p.member_id, p.group_instance_id.as_deref())?;
    if p.generation_id != g.generation_id {
        return Err(ErrorCode::IllegalGeneration);
    }
    if inconsistent(p.protocol_type.as_deref(), g.protocol_type.as_deref())
        || inconsistent(p.protocol_name.as_deref(), g.protocol_name.as_deref())
    {
        return Err(ErrorCode::InconsistentGroupProtocol);
    }
    Ok(())
}

fn remove_pending_sync_member(env: &ShardEnv, g: &mut ClassicGroup, member_id: &str) {
    g.remove_pending_sync_member(member_id);
    let done = match g.state {
        GroupState::Dead | GroupState::Empty | GroupState::PreparingRebalance => true,
        GroupState::CompletingRebalance | GroupState::Stable => g.has_received_sync_from_all(),
    };
    if done {
        env.timer.cancel(&sync_key(&g.group_id));
    }
}

/// The leader's SyncGroup: its assignments (an empty one for members it left out) are written;
/// once committed the group is Stable and every waiting member gets its assignment; if the
/// append fails, everyone waiting gets the error and the group rebalances.
fn leader_sync(env: &ShardEnv, g: &mut ClassicGroup, at: i64, p: &SyncParams) -> Outcome {
    let mut assignment: HashMap<String, Bytes> = HashMap::new();
    for (id, a) in &p.assignments {
        assignment.insert(id.clone(), a.clone());
    }
    for id in g.member_ids() {
        assignment.entry(id).or_default();
    }
    let record = group_record(&g.group_id, g.to_record_value(&assignment));
    let timer = env.timer.clone();
    let gid = g.group_id.clone();
    let generation = p.generation_id;
    let after: AfterCommit = Box::new(move |r| {
        let failed = r.err().map(|e| e.code());
        // The state changes run as an event of the shard, right behind this commit.
        timer.schedule(
            format!("sync-append-{gid}-{generation}-{at}"),
            Duration::ZERO,
            move |shard, _ctx| {
                let env = &shard.env;
                let mut out = Outcome::none();
                if let Some(g) = shard.classic.group_mut(&gid) {
                    // Another member may have joined meanwhile: only this generation's
                    // CompletingRebalance takes the result.
                    if g.is_in(GroupState::CompletingRebalance) && g.generation_id == generation {
                        match failed {
                            Some(code) => {
                                reset_and_propagate_assignment_with_error(env, g, code);
                                out = maybe_prepare_rebalance_or_complete_join(env, g);
                            }
                            None => {
                                set_and_propagate_assignment(env, g, &assignment);
                                g.transition_to(GroupState::Stable, env.now_ms());
                            }
                        }
                    }
                }
                let out = shard.classic.finish(out);
                Ok(WriteResult {
                    records: out.records,
                    response: out.after,
                })
            },
        );
    });
    Outcome {
        records: vec![record],
        after: Some(after),
    }
}

fn remove_current_member(env: &ShardEnv, g: &mut ClassicGroup, member_id: &str) {
    env.timer.cancel(&heartbeat_key(&g.group_id, member_id));
    // A member parked in JoinGroup is told to join again.
    g.complete_join(member_id, join_error("", ErrorCode::UnknownMemberId));
    g.remove(member_id);
}

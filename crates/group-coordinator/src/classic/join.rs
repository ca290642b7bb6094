//! JoinGroup and the rebalance it drives (Kafka's `classicGroupJoin*`, `prepareRebalance`,
//! `completeClassicGroupJoin` and the timers around them).

use std::collections::HashMap;

use bytes::Bytes;
use strom_protocol::kafka::messages::JoinGroupResponse;
use strom_protocol::ErrorCode;
use tokio::sync::oneshot;

use super::group::{ClassicGroup, GroupState};
use super::member::{s, ClassicGroupMember, Protocol};
use super::responses::{join_error, join_ok, sync_error, sync_ok};
use super::{
    group_record, heartbeat_key, join_key, schedule, sync_key, ClassicGroups, Outcome,
    NEW_MEMBER_JOIN_TIMEOUT_MS,
};
use crate::shard::ShardEnv;

type JoinTx = oneshot::Sender<JoinGroupResponse>;

/// A JoinGroup request as the state machine needs it.
#[derive(Debug, Clone)]
pub struct JoinParams {
    pub group_id: String,
    /// Empty for a member that joins for the first time.
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub protocol_type: String,
    pub protocols: Vec<Protocol>,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub client_id: String,
    pub client_host: String,
    pub api_version: i16,
}

impl JoinParams {
    /// v4+: a member without an id is given one and must join again with it (KIP-394).
    fn requires_known_member_id(&self) -> bool {
        self.api_version >= 4
    }

    /// v9+: a static leader rejoining a stable group is told to skip the assignment.
    fn supports_skipping_assignment(&self) -> bool {
        self.api_version >= 9
    }
}

impl ClassicGroups {
    /// JoinGroup: the response goes to `tx`, now or when the rebalance completes.
    pub fn join(&mut self, env: &ShardEnv, at: i64, p: JoinParams, tx: JoinTx) -> Outcome {
        let is_unknown = p.member_id.is_empty();
        let gid = p.group_id.clone();
        let is_new_group = !self.contains(&p.group_id);
        if is_new_group {
            if !is_unknown {
                let _ = tx.send(join_error(&p.member_id, ErrorCode::UnknownMemberId));
                return Outcome::none();
            }
            self.insert_group(
                at,
                ClassicGroup::new(p.group_id.clone(), GroupState::Empty, env.now_ms()),
            );
        }
        let g = self
            .group_mut(&p.group_id)
            .expect("present or just created");
        let mut out = if !accept_joining_member(env, g, &p.member_id) {
            g.remove(&p.member_id);
            let _ = tx.send(join_error("", ErrorCode::GroupMaxSizeReached));
            Outcome::none()
        } else if is_unknown {
            join_new_member(env, g, p, tx)
        } else {
            join_existing_member(env, g, p, tx)
        };
        if is_new_group && out.records.is_empty() && out.after.is_none() {
            // A new group is made durable with an empty record; if that append fails the group
            // is reverted away and the caller gets the append's error.
            if let Some(g) = self.group(&gid) {
                out.records
                    .push(group_record(&gid, g.to_empty_record_value()));
            }
        }
        self.finish(out)
    }
}

fn accept_joining_member(env: &ShardEnv, g: &ClassicGroup, member_id: &str) -> bool {
    let max = env.config.classic_max_size.max(0) as usize;
    match g.state {
        GroupState::Empty | GroupState::Dead => true,
        // Awaiting members, not members: the group may be above a lowered max size, and the
        // last members to rejoin are the ones turned away.
        GroupState::PreparingRebalance => {
            g.member(member_id).is_some_and(|m| m.is_awaiting_join()) || g.num_awaiting_join() < max
        }
        GroupState::CompletingRebalance | GroupState::Stable => {
            g.has_member(member_id) || g.num_members() < max
        }
    }
}

fn join_new_member(env: &ShardEnv, g: &mut ClassicGroup, p: JoinParams, tx: JoinTx) -> Outcome {
    if g.is_in(GroupState::Dead) {
        let _ = tx.send(join_error("", ErrorCode::CoordinatorNotAvailable));
        return Outcome::none();
    }
    if !g.supports_protocols(&p.protocol_type, &p.protocols) {
        let _ = tx.send(join_error("", ErrorCode::InconsistentGroupProtocol));
        return Outcome::none();
    }
    let new_id = ClassicGroup::generate_member_id(&p.client_id, p.group_instance_id.as_deref());
    match p.group_instance_id.clone() {
        Some(iid) => match g.static_member_id(&iid).cloned() {
            Some(existing) => update_static_member_then_rebalance_or_complete_join(
                env, g, p, existing, new_id, tx,
            ),
            None => add_member_then_rebalance_or_complete_join(env, g, p, new_id, tx),
        },
        None if p.requires_known_member_id() => {
            g.add_pending_member(new_id.clone());
            reschedule_heartbeat(env, &g.group_id, &new_id, p.session_timeout_ms as i64);
            let _ = tx.send(join_error(&new_id, ErrorCode::MemberIdRequired));
            Outcome::none()
        }
        None => add_member_then_rebalance_or_complete_join(env, g, p, new_id, tx),
    }
}

fn join_existing_member(
    env: &ShardEnv,
    g: &mut ClassicGroup,
    p: JoinParams,
    tx: JoinTx,
) -> Outcome {
    let member_id = p.member_id.clone();
    if g.is_in(GroupState::Dead) {
        let _ = tx.send(join_error(&member_id, ErrorCode::CoordinatorNotAvailable));
        return Outcome::none();
    }
    if !g.supports_protocols(&p.protocol_type, &p.protocols) {
        let _ = tx.send(join_error(&member_id, ErrorCode::InconsistentGroupProtocol));
        return Outcome::none();
    }
    if g.is_pending_member(&member_id) {
        if p.group_instance_id.is_some() {
            // A pending member is always dynamic; Kafka fails this request as an internal error.
            let _ = tx.send(join_error(&member_id, ErrorCode::UnknownServerError));
            return Outcome::none();
        }
        return add_member_then_rebalance_or_complete_join(env, g, p, member_id, tx);
    }
    if let Err(code) = g.validate_member(&member_id, p.group_instance_id.as_deref()) {
        let _ = tx.send(join_error(&member_id, code));
        return Outcome::none();
    }
    let matches = g
        .member(&member_id)
        .is_some_and(|m| m.matches(&p.protocols));
    match g.state {
        GroupState::PreparingRebalance => {
            update_member_then_rebalance_or_complete_join(env, g, p, tx)
        }
        GroupState::CompletingRebalance => {
            if matches {
                // The member lost its JoinGroup response: give it this generation again.
                let leader = g.is_leader(&member_id);
                let _ = tx.send(join_ok(g, &member_id, leader, false));
                Outcome::none()
            } else {
                update_member_then_rebalance_or_complete_join(env, g, p, tx)
            }
        }
        GroupState::Stable => {
            if g.is_leader(&member_id) || !matches {
                // A leader's JoinGroup asks for a rebalance (e.g. topic metadata changed).
                update_member_then_rebalance_or_complete_join(env, g, p, tx)
            } else {
                let _ = tx.send(join_ok(g, &member_id, false, false));
                Outcome::none()
            }
        }
        GroupState::Empty | GroupState::Dead => {
            let _ = tx.send(join_error(&member_id, ErrorCode::UnknownMemberId));
            Outcome::none()
        }
    }
}

fn add_member_then_rebalance_or_complete_join(
    env: &ShardEnv,
    g: &mut ClassicGroup,
    p: JoinParams,
    member_id: String,
    tx: JoinTx,
) -> Outcome {
    let mut m = ClassicGroupMember::new(
        member_id.clone(),
        p.group_instance_id,
        p.client_id,
        p.client_host,
        p.rebalance_timeout_ms,
        p.session_timeout_ms,
        p.protocol_type,
        p.protocols,
        Bytes::new(),
    );
    m.is_new = true;
    m.join_tx = Some(tx);
    if g.is_in(GroupState::PreparingRebalance) && g.previous_state == GroupState::Empty {
        // The initial rebalance waits a little longer for more members.
        g.new_member_added = true;
    }
    g.add(m);
    // A new member cannot heartbeat while its JoinGroup is parked; it is dropped if the join
    // takes this long (it retries if it is still there).
    reschedule_heartbeat(env, &g.group_id, &member_id, NEW_MEMBER_JOIN_TIMEOUT_MS);
    maybe_prepare_rebalance_or_complete_join(env, g)
}

fn update_member_then_rebalance_or_complete_join(
    env: &ShardEnv,
    g: &mut ClassicGroup,
    p: JoinParams,
    tx: JoinTx,
) -> Outcome {
    g.update_member(
        &p.member_id,
        p.protocols,
        p.rebalance_timeout_ms,
        p.session_timeout_ms,
        Some(tx),
    );
    maybe_prepare_rebalance_or_complete_join(env, g)
}

fn update_static_member_then_rebalance_or_complete_join(
    env: &ShardEnv,
    g: &mut ClassicGroup,
    p: JoinParams,
    old_id: String,
    new_id: String,
    tx: JoinTx,
) -> Outcome {
    let iid = p.group_instance_id.clone().unwrap_or_default();
    let current_leader = g.leader_id.clone();
    if g.replace_static_member(&iid, &old_id, &new_id).is_none() {
        let _ = tx.send(join_error("", ErrorCode::UnknownServerError));
        return Outcome::none();
    }
    let (old_protocols, old_rebalance, old_session) = {
        let m = g.member(&new_id).expect("just replaced");
        (
            m.protocols.clone(),
            m.rebalance_timeout_ms,
            m.session_timeout_ms,
        )
    };
    reschedule_heartbeat(env, &g.group_id, &new_id, old_session as i64);
    g.update_member(
        &new_id,
        p.protocols.clone(),
        p.rebalance_timeout_ms,
        p.session_timeout_ms,
        Some(tx),
    );
    match g.state {
        GroupState::Stable => {
            let selected = g.select_protocol();
            if g.protocol_name.as_deref().unwrap_or("") != selected.as_deref().unwrap_or("") {
                return maybe_prepare_rebalance_or_complete_join(env, g);
            }
            // Same protocol: the member keeps its assignment, no rebalance; the new member id is
            // persisted and the member answered once that is committed.
            let assignment = g.assignments();
            let record = group_record(&g.group_id, g.to_record_value(&assignment));
            let timer_env = env.timer.clone();
            let gid = g.group_id.clone();
            let skip = p.supports_skipping_assignment();
            let after: strom_coordinator_common::runtime::AfterCommit = Box::new(move |r| {
                let failed = r.err().map(|e| e.code());
                let key = format!("static-join-{gid}-{new_id}");
                timer_env.schedule(key, std::time::Duration::ZERO, move |shard, _ctx| {
                    if let Some(g) = shard.classic.group_mut(&gid) {
                        static_member_persisted(
                            &shard.env,
                            g,
                            StaticRejoin {
                                instance_id: iid,
                                old_id,
                                new_id,
                                old_protocols,
                                old_rebalance,
                                old_session,
                                current_leader,
                                skip_assignment: skip,
                            },
                            failed,
                        );
                    }
                    Ok(strom_coordinator_common::runtime::WriteResult {
                        records: Vec::new(),
                        response: None,
                    })
                });
            });
            Outcome {
                records: vec![record],
                after: Some(after),
            }
        }
        // The leader may already have the old member id in its assignment: rebalance.
        GroupState::CompletingRebalance => prepare_rebalance(env, g),
        GroupState::PreparingRebalance => maybe_complete_join_phase(env, g),
        GroupState::Empty | GroupState::Dead => Outcome::none(),
    }
}

struct StaticRejoin {
    instance_id: String,
    old_id: String,
    new_id: String,
    old_protocols: Vec<Protocol>,
    old_rebalance: i32,
    old_session: i32,
    current_leader: Option<String>,
    skip_assignment: bool,
}

/// The record of a static member's new id committed (answer it) or failed (undo the
/// replacement and answer the error).
fn static_member_persisted(
    env: &ShardEnv,
    g: &mut ClassicGroup,
    s_: StaticRejoin,
    failed: Option<ErrorCode>,
) {
    if !g.has_member(&s_.new_id) {
        return;
    }
    match failed {
        Some(code) => {
            let tx = g.take_join_tx(&s_.new_id);
            g.update_member(
                &s_.new_id,
                s_.old_protocols,
                s_.old_rebalance,
                s_.old_session,
                None,
            );
            g.replace_static_member(&s_.instance_id, &s_.new_id, &s_.old_id);
            reschedule_heartbeat(env, &g.group_id, &s_.old_id, s_.old_session as i64);
            if let Some(tx) = tx {
                let resp = JoinGroupResponse::default()
                    .with_member_id(s(""))
                    .with_generation_id(g.generation_id)
                    .with_protocol_name(g.protocol_name.as_deref().map(s))
                    .with_protocol_type(g.protocol_type.as_deref().map(s))
                    .with_leader(s(s_.current_leader.as_deref().unwrap_or("")))
                    .with_error_code(code.code());
                let _ = tx.send(resp);
            }
        }
        None if s_.skip_assignment => {
            let leader = g.is_leader(&s_.new_id);
            let resp = join_ok(g, &s_.new_id, leader, leader);
            g.complete_join(&s_.new_id, resp);
        }
        None => {
            let resp = JoinGroupResponse::default()
                .with_member_id(s(&s_.new_id))
                .with_generation_id(g.generation_id)
                .with_protocol_name(g.protocol_name.as_deref().map(s))
                .with_protocol_type(g.protocol_type.as_deref().map(s))
                .with_leader(s(s_.current_leader.as_deref().unwrap_or("")));
            g.complete_join(&s_.new_id, resp);
        }
    }
}

pub(crate) fn maybe_prepare_rebalance_or_complete_join(
    env: &ShardEnv,
    g: &mut ClassicGroup,
) -> Outcome {
    if g.can_rebalance() {
        prepare_rebalance(env, g)
    } else {
        maybe_complete_join_phase(env, g)
    }
}

pub(crate) fn prepare_rebalance(env: &ShardEnv, g: &mut ClassicGroup) -> Outcome {
    if g.is_in(GroupState::CompletingRebalance) {
        // Members waiting in SyncGroup must rejoin.
        reset_and_propagate_assignment_with_error(env, g, ErrorCode::RebalanceInProgress);
    }
    remove_sync_expiration(env, g);
    let initial = g.is_empty();
    if initial {
        // A new group waits group.initial.rebalance.delay.ms for more members, extended while
        // they keep coming, up to the rebalance timeout.
        let delay = env.config.initial_rebalance_delay_ms;
        let remaining = (g.rebalance_timeout_ms() as i64 - delay).max(0);
        schedule_initial_rebalance(env, &g.group_id, delay, remaining);
    }
    g.transition_to(GroupState::PreparingRebalance, env.now_ms());
    if initial {
        Outcome::none()
    } else {
        maybe_complete_join_else_schedule(env, g)
    }
}

fn schedule_initial_rebalance(env: &ShardEnv, group_id: &str, delay: i64, remaining: i64) {
    let gid = group_id.to_string();
    schedule(env, join_key(group_id), delay, move |groups, env, _| {
        let Some(g) = groups.group_mut(&gid) else {
            return Outcome::none();
        };
        if g.new_member_added && remaining != 0 {
            g.new_member_added = false;
            let new_delay = env.config.initial_rebalance_delay_ms.min(remaining);
            let new_remaining = (remaining - delay).max(0);
            schedule_initial_rebalance(env, &gid, new_delay, new_remaining);
            Outcome::none()
        } else {
            complete_join(env, g)
        }
    });
}

fn schedule_complete_join(env: &ShardEnv, g: &ClassicGroup) {
    let gid = g.group_id.clone();
    schedule(
        env,
        join_key(&gid),
        g.rebalance_timeout_ms() as i64,
        move |groups, env, _| match groups.group_mut(&gid) {
            Some(g) => complete_join(env, g),
            None => Outcome::none(),
        },
    );
}

fn maybe_complete_join_else_schedule(env: &ShardEnv, g: &mut ClassicGroup) -> Outcome {
    if g.has_all_members_joined() {
        complete_join(env, g)
    } else {
        schedule_complete_join(env, g);
        Outcome::none()
    }
}

pub(crate) fn maybe_complete_join_phase(env: &ShardEnv, g: &mut ClassicGroup) -> Outcome {
    if !g.is_in(GroupState::PreparingRebalance)
        || g.previous_state == GroupState::Empty
        || !g.has_all_members_joined()
    {
        // Not rebalancing, the initial rebalance (its delay decides), or members missing.
        return Outcome::none();
    }
    complete_join(env, g)
}

/// The join phase ends: dynamic members that did not rejoin are removed, the next generation
/// starts, everyone waiting gets its JoinGroup response (the leader with the members).
pub(crate) fn complete_join(env: &ShardEnv, g: &mut ClassicGroup) -> Outcome {
    env.timer.cancel(&join_key(&g.group_id));
    for id in g.not_yet_rejoined() {
        if g.member(&id).is_some_and(|m| !m.is_static()) {
            g.remove(&id);
            env.timer.cancel(&heartbeat_key(&g.group_id, &id));
        }
    }
    if g.is_in(GroupState::Dead) {
        return Outcome::none();
    }
    if !g.maybe_elect_new_joined_leader() && g.num_members() > 0 {
        // Nobody rejoined (only static members that did not come back): wait another round
        // for their sessions to expire.
        schedule_complete_join(env, g);
        return Outcome::none();
    }
    g.init_next_generation(env.now_ms());
    if g.is_empty() {
        let record = group_record(&g.group_id, g.to_record_value(&HashMap::new()));
        return Outcome {
            records: vec![record],
            after: None,
        };
    }
    for id in g.member_ids() {
        let leader = g.is_leader(&id);
        let resp = join_ok(g, &id, leader, false);
        g.complete_join(&id, resp);
        let session = g.member(&id).map_or(0, |m| m.session_timeout_ms);
        reschedule_heartbeat(env, &g.group_id, &id, session as i64);
        if let Some(m) = g.member_mut(&id) {
            m.is_new = false;
        }
        g.add_pending_sync_member(&id);
    }
    schedule_pending_sync(env, g);
    Outcome::none()
}

/// Members that do not send SyncGroup within the rebalance timeout are removed.
fn schedule_pending_sync(env: &ShardEnv, g: &ClassicGroup) {
    let gid = g.group_id.clone();
    let generation = g.generation_id;
    schedule(
        env,
        sync_key(&gid),
        g.rebalance_timeout_ms() as i64,
        move |groups, env, _| {
            let Some(g) = groups.group_mut(&gid) else {
                return Outcome::none();
            };
            if generation != g.generation_id
                || !matches!(
                    g.state,
                    GroupState::CompletingRebalance | GroupState::Stable
                )
                || g.has_received_sync_from_all()
            {
                return Outcome::none();
            }
            for id in g.pending_sync_members() {
                g.remove(&id);
                env.timer.cancel(&heartbeat_key(&gid, &id));
            }
            prepare_rebalance(env, g)
        },
    );
}

pub(crate) fn remove_sync_expiration(env: &ShardEnv, g: &mut ClassicGroup) {
    g.clear_pending_sync_members();
    env.timer.cancel(&sync_key(&g.group_id));
}

pub(crate) fn reset_and_propagate_assignment_with_error(
    env: &ShardEnv,
    g: &mut ClassicGroup,
    code: ErrorCode,
) {
    for id in g.member_ids() {
        if let Some(m) = g.member_mut(&id) {
            m.assignment = Bytes::new();
        }
    }
    propagate_assignment(env, g, Some(code));
}

pub(crate) fn set_and_propagate_assignment(
    env: &ShardEnv,
    g: &mut ClassicGroup,
    assignment: &HashMap<String, Bytes>,
) {
    for id in g.member_ids() {
        let a = assignment.get(&id).cloned().unwrap_or_default();
        if let Some(m) = g.member_mut(&id) {
            m.assignment = a;
        }
    }
    propagate_assignment(env, g, None);
}

fn propagate_assignment(env: &ShardEnv, g: &mut ClassicGroup, error: Option<ErrorCode>) {
    for id in g.member_ids() {
        let assignment = g
            .member(&id)
            .map(|m| m.assignment.clone())
            .unwrap_or_default();
        let resp = match error {
            None => sync_ok(g, assignment),
            Some(code) => sync_error(code).with_assignment(assignment),
        };
        if g.complete_sync(&id, resp) {
            // A session that expired while the member waited was ignored: start it again.
            let session = g.member(&id).map_or(0, |m| m.session_timeout_ms);
            reschedule_heartbeat(env, &g.group_id, &id, session as i64);
        }
    }
}

/// (Re)arms a member's session timer.
pub(crate) fn reschedule_heartbeat(env: &ShardEnv, group_id: &str, member_id: &str, ms: i64) {
    let (gid, mid) = (group_id.to_string(), member_id.to_string());
    schedule(
        env,
        heartbeat_key(group_id, member_id),
        ms,
        move |groups, env, _| match groups.group_mut(&gid) {
            Some(g) => expire_heartbeat(env, g, &mid),
            None => Outcome::none(),
        },
    );
}

fn expire_heartbeat(env: &ShardEnv, g: &mut ClassicGroup, member_id: &str) -> Outcome {
    if g.is_in(GroupState::Dead) {
        return Outcome::none();
    }
    if g.is_pending_member(member_id) {
        g.remove(member_id);
        if g.is_in(GroupState::PreparingRebalance) && g.has_all_members_joined() {
            return complete_join(env, g);
        }
        return Outcome::none();
    }
    match g.member(member_id) {
        Some(m) if !m.has_satisfied_heartbeat() => remove_member_and_update(env, g, member_id),
        _ => Outcome::none(),
    }
}

fn remove_member_and_update(env: &ShardEnv, g: &mut ClassicGroup, member_id: &str) -> Outcome {
    // A new member may time out while its JoinGroup is parked: tell it to join again.
    g.complete_join(member_id, join_error("", ErrorCode::UnknownMemberId));
    g.remove(member_id);
    match g.state {
        GroupState::Stable | GroupState::CompletingRebalance => {
            maybe_prepare_rebalance_or_complete_join(env, g)
        }
        GroupState::PreparingRebalance if g.has_all_members_joined() => complete_join(env, g),
        _ => Outcome::none(),
    }
}

//! The consumer group protocol of KIP-848, as kafka-clients' `ConsumerMembershipManager` and
//! `ConsumerHeartbeatRequestManager` run it: a heartbeat task sends ConsumerGroupHeartbeat
//! (member epoch 0 to join), the coordinator answers with the member's epoch and target
//! assignment (by topic id); `poll` reconciles it (revoke what moved, commit before that,
//! assign what is new) and the next heartbeat, sent at once, acknowledges what the member owns.
//! Leaving sends epoch -1, or -2 for a static member (which keeps its assignment for it).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use strom_protocol::kafka::messages::consumer_group_heartbeat_request::TopicPartitions;
use strom_protocol::kafka::messages::{
    ApiKey, ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, GroupId, TopicName,
};
use strom_protocol::kafka::protocol::StrBytes;
use strom_protocol::ErrorCode;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use uuid::Uuid;

use super::coordinator::{is_coordinator_moved, Coordinator};
use super::member::Env;
use super::{GroupConfig, GroupError, Subscription, TopicPartition};
use crate::error::{Error, Result};

/// Member epoch of a dynamic member leaving.
const LEAVE_EPOCH: i32 = -1;
/// Member epoch of a static member leaving temporarily.
const LEAVE_STATIC_EPOCH: i32 = -2;

type IdAssignment = Vec<(Uuid, Vec<i32>)>;

#[derive(Debug)]
struct State {
    member_id: String,
    member_epoch: i32,
    /// The latest assignment from the coordinator not yet reconciled.
    target: Option<IdAssignment>,
    /// What the member owns, as sent in heartbeats.
    owned: IdAssignment,
    heartbeat_interval: Duration,
    /// Fenced (FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID): `poll` must drop the partitions as
    /// lost before the member rejoins with epoch 0.
    fenced: bool,
    fatal: Option<(ErrorCode, String)>,
    subscription: Option<Subscription>,
    /// When the application last polled (`max.poll.interval.ms` is measured from it).
    last_poll: Instant,
}

struct Shared {
    state: Mutex<State>,
    wake: Notify,
}

/// One consumer-protocol membership.
pub(crate) struct ConsumerMember {
    shared: Arc<Shared>,
    heartbeat: Option<JoinHandle<()>>,
}

impl Drop for ConsumerMember {
    fn drop(&mut self) {
        if let Some(h) = self.heartbeat.take() {
            h.abort();
        }
    }
}

impl ConsumerMember {
    pub fn new() -> Self {
        ConsumerMember {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    // Since Kafka 4.0 the member generates its id (KIP-1082), a Kafka Uuid.
                    member_id: crate::topic_id_string(&Uuid::new_v4()),
                    member_epoch: 0,
                    target: None,
                    owned: Vec::new(),
                    heartbeat_interval: Duration::from_secs(5),
                    fenced: false,
                    fatal: None,
                    subscription: None,
                    last_poll: Instant::now(),
                }),
                wake: Notify::new(),
            }),
            heartbeat: None,
        }
    }

    pub fn epoch_and_id(&self) -> (i32, String) {
        let s = self.shared.state.lock().unwrap();
        (s.member_epoch, s.member_id.clone())
    }

    pub async fn poll(&mut self, env: &mut Env<'_>, sub: &Subscription) -> Result<()> {
        {
            let mut s = self.shared.state.lock().unwrap();
            if let Some((code, message)) = &s.fatal {
                return Err(GroupError::Fatal {
                    code: *code,
                    message: message.clone(),
                }
                .into());
            }
            s.last_poll = Instant::now();
            if s.subscription.as_ref() != Some(sub) {
                s.subscription = Some(sub.clone());
                self.shared.wake.notify_one();
            }
        }
        if self.heartbeat.as_ref().is_none_or(|h| h.is_finished()) {
            self.heartbeat = Some(tokio::spawn(heartbeat_loop(
                env.coord.clone(),
                self.shared.clone(),
                env.config.clone(),
            )));
        }
        let fenced = self.shared.state.lock().unwrap().fenced;
        if fenced {
            let owned = env.assigned.clone();
            env.lose(&owned);
            let mut s = self.shared.state.lock().unwrap();
            s.owned.clear();
            s.target = None;
            s.member_epoch = 0;
            s.fenced = false;
            drop(s);
            self.shared.wake.notify_one();
        }
        let target = self.shared.state.lock().unwrap().target.clone();
        if let Some(target) = target {
            self.reconcile(env, sub, target).await?;
        }
        Ok(())
    }

    /// Java's reconciliation: resolve the target's topic ids, revoke what the member must give
    /// up (committing first when auto-commit is on), assign what is new, then acknowledge.
    async fn reconcile(
        &mut self,
        env: &mut Env<'_>,
        sub: &Subscription,
        target: IdAssignment,
    ) -> Result<()> {
        let client = env.coord.client().clone();
        let names = |ids: &IdAssignment| -> (BTreeSet<TopicPartition>, bool) {
            let md = client.metadata();
            let mut out = BTreeSet::new();
            let mut complete = true;
            for (id, parts) in ids {
                match md.topics.values().find(|t| t.topic_id == *id) {
                    Some(t) => out.extend(
                        parts
                            .iter()
                            .map(|&p| TopicPartition::new(t.name.clone(), p)),
                    ),
                    None => complete = false,
                }
            }
            (out, complete)
        };
        let (mut resolved, mut complete) = names(&target);
        if !complete {
            // New topic ids: look them up (all topics for a pattern, else the subscribed ones).
            let refresh = match sub {
                Subscription::Topics(t) => {
                    let list: Vec<String> = t.iter().cloned().collect();
                    client.refresh_metadata(Some(&list)).await
                }
                Subscription::Pattern(_) => client.refresh_metadata(None).await,
            };
            if let Err(e) = refresh {
                tracing::debug!(error = %e, "metadata refresh for the assignment failed");
            }
            (resolved, complete) = names(&target);
        }
        if resolved != *env.assigned {
            let revoked: BTreeSet<TopicPartition> =
                env.assigned.difference(&resolved).cloned().collect();
            let added: BTreeSet<TopicPartition> =
                resolved.difference(env.assigned).cloned().collect();
            if !revoked.is_empty() {
                if env.config.enable_auto_commit {
                    let (epoch, member_id) = self.epoch_and_id();
                    let meta = super::GroupMetadata {
                        group_id: env.coord.group_id().to_string(),
                        generation_id: epoch,
                        member_id,
                        group_instance_id: env.config.group_instance_id.clone(),
                    };
                    let offsets = env.consumed();
                    let deadline = Instant::now() + Duration::from_secs(30);
                    if let Err(e) =
                        super::commit::commit(env.coord, &meta, &offsets, deadline).await
                    {
                        tracing::warn!(error = %e, "auto-commit before revocation failed");
                    }
                }
                env.revoke(&revoked, false);
            }
            env.assign(resolved.clone(), &added);
        }
        // Acknowledge what is owned now: the resolved part of the target, by id.
        let md = client.metadata();
        let owned: IdAssignment = target
            .iter()
            .filter(|(id, _)| md.topics.values().any(|t| t.topic_id == *id))
            .cloned()
            .collect();
        let mut s = self.shared.state.lock().unwrap();
        s.owned = owned;
        if complete && s.target.as_ref() == Some(&target) {
            s.target = None;
        }
        drop(s);
        self.shared.wake.notify_one();
        Ok(())
    }

    /// Java's close: revoke (or lose, when fenced) everything, then leave with epoch -1 (-2
    /// for a static member).
    pub async fn leave(&mut self, env: &mut Env<'_>, _sub: &Subscription) {
        if let Some(h) = self.heartbeat.take() {
            h.abort();
        }
        let (fenced, epoch, member_id) = {
            let s = self.shared.state.lock().unwrap();
            (s.fenced, s.member_epoch, s.member_id.clone())
        };
        let owned = env.assigned.clone();
        if fenced {
            env.lose(&owned);
        } else {
            env.revoke(&owned, false);
        }
        if epoch > 0 && !fenced {
            let leave_epoch = if env.config.group_instance_id.is_some() {
                LEAVE_STATIC_EPOCH
            } else {
                LEAVE_EPOCH
            };
            let group = env.coord.group_id().to_string();
            let instance = env.config.group_instance_id.clone();
            let r = env
                .coord
                .send(ApiKey::ConsumerGroupHeartbeat, |_| {
                    let mut req = ConsumerGroupHeartbeatRequest::default();
                    req.group_id = GroupId(StrBytes::from_string(group));
                    req.member_id = StrBytes::from_string(member_id);
                    req.member_epoch = leave_epoch;
                    req.instance_id = instance.map(StrBytes::from_string);
                    Ok(req)
                })
                .await;
            match r {
                Ok(resp) => {
                    if let Some(e) = Error::kafka(resp.error_code, None) {
                        tracing::info!(error = %e, "leaving the group failed");
                    }
                }
                Err(e) => tracing::info!(error = %e, "leaving the group failed"),
            }
        }
        let mut s = self.shared.state.lock().unwrap();
        s.member_epoch = 0;
        s.owned.clear();
        s.target = None;
        s.subscription = None;
    }
}

fn heartbeat_request(
    s: &State,
    coord: &Coordinator,
    config: &GroupConfig,
    version: i16,
) -> Result<ConsumerGroupHeartbeatRequest> {
    let mut req = ConsumerGroupHeartbeatRequest::default();
    req.group_id = GroupId(StrBytes::from_string(coord.group_id().to_string()));
    req.member_id = StrBytes::from_string(s.member_id.clone());
    req.member_epoch = s.member_epoch;
    req.instance_id = config.group_instance_id.clone().map(StrBytes::from_string);
    req.rack_id = config.client_rack.clone().map(StrBytes::from_string);
    req.rebalance_timeout_ms = config.max_poll_interval.as_millis().min(i32::MAX as u128) as i32;
    match &s.subscription {
        Some(Subscription::Topics(t)) => {
            req.subscribed_topic_names = Some(
                t.iter()
                    .map(|n| TopicName(StrBytes::from_string(n.clone())))
                    .collect(),
            );
        }
        Some(Subscription::Pattern(p)) => {
            if version < 1 {
                return Err(Error::UnsupportedVersion(
                    "ConsumerGroupHeartbeat v1+ (pattern subscription)",
                ));
            }
            req.subscribed_topic_regex = Some(StrBytes::from_string(p.clone()));
        }
        None => req.subscribed_topic_names = Some(Vec::new()),
    }
    req.server_assignor = config
        .group_remote_assignor
        .clone()
        .map(StrBytes::from_string);
    // Joining (epoch 0) must not claim partitions.
    let owned = if s.member_epoch == 0 {
        &[][..]
    } else {
        &s.owned[..]
    };
    req.topic_partitions = Some(
        owned
            .iter()
            .map(|(id, parts)| {
                let mut tp = TopicPartitions::default();
                tp.topic_id = *id;
                tp.partitions = parts.clone();
                tp
            })
            .collect(),
    );
    Ok(req)
}

/// Applies a heartbeat answer; returns the delay before the next heartbeat.
fn handle_response(
    shared: &Shared,
    coord: &Coordinator,
    sent_epoch: i32,
    resp: ConsumerGroupHeartbeatResponse,
    backoff: Duration,
) -> Duration {
    let mut s = shared.state.lock().unwrap();
    let message = resp
        .error_message
        .as_ref()
        .map(|m| m.to_string())
        .unwrap_or_default();
    match ErrorCode::try_from_code(resp.error_code) {
        None => {
            if let Some(id) = resp.member_id {
                s.member_id = id.to_string();
            }
            if s.member_epoch != resp.member_epoch {
                tracing::debug!(
                    from = s.member_epoch,
                    to = resp.member_epoch,
                    "member epoch"
                );
            }
            s.member_epoch = resp.member_epoch;
            if resp.heartbeat_interval_ms > 0 {
                s.heartbeat_interval = Duration::from_millis(resp.heartbeat_interval_ms as u64);
            }
            if let Some(a) = resp.assignment {
                let mut target: IdAssignment = a
                    .topic_partitions
                    .into_iter()
                    .map(|tp| {
                        let mut ps = tp.partitions;
                        ps.sort_unstable();
                        (tp.topic_id, ps)
                    })
                    .collect();
                target.sort();
                s.target = Some(target);
            }
            s.heartbeat_interval
        }
        Some(ErrorCode::FencedMemberEpoch | ErrorCode::UnknownMemberId) => {
            // An answer to an old request after a rejoin started is stale.
            if sent_epoch == s.member_epoch {
                tracing::info!(code = resp.error_code, %message, "member fenced; rejoining");
                s.fenced = true;
                s.target = None;
            }
            backoff
        }
        Some(code) if is_coordinator_moved(code) => {
            drop(s);
            coord.mark_unknown("ConsumerGroupHeartbeat");
            backoff
        }
        Some(code) if code.is_retriable() => backoff,
        Some(code) => {
            tracing::warn!(?code, %message, "fatal ConsumerGroupHeartbeat error");
            s.fatal = Some((code, message));
            backoff
        }
    }
}

async fn leave_on_poll_timeout(coord: &Coordinator, shared: &Shared, config: &GroupConfig) {
    let (member_id, epoch) = {
        let s = shared.state.lock().unwrap();
        (s.member_id.clone(), s.member_epoch)
    };
    let leave_epoch = if config.group_instance_id.is_some() {
        LEAVE_STATIC_EPOCH
    } else {
        LEAVE_EPOCH
    };
    let group = coord.group_id().to_string();
    let instance = config.group_instance_id.clone();
    let r = coord
        .send(ApiKey::ConsumerGroupHeartbeat, |_| {
            let mut req = ConsumerGroupHeartbeatRequest::default();
            req.group_id = GroupId(StrBytes::from_string(group));
            req.member_id = StrBytes::from_string(member_id);
            req.member_epoch = leave_epoch;
            req.instance_id = instance.map(StrBytes::from_string);
            Ok(req)
        })
        .await;
    if let Err(e) = r {
        tracing::info!(error = %e, "leaving the group after the poll timeout failed");
    }
    let mut s = shared.state.lock().unwrap();
    if s.member_epoch == epoch {
        s.fenced = true;
        s.target = None;
    }
}

async fn heartbeat_loop(coord: Coordinator, shared: Arc<Shared>, config: GroupConfig) {
    let mut delay = Duration::ZERO;
    let mut attempt = 0u32;
    loop {
        // Wait for the next heartbeat in short slices so that the poll timeout is noticed in
        // time; a reconciliation (or subscription change) wakes the loop to acknowledge at once.
        let next = Instant::now() + delay;
        loop {
            let now = Instant::now();
            if now >= next {
                break;
            }
            let slice = (next - now).min(Duration::from_millis(250));
            if tokio::time::timeout(slice, shared.wake.notified())
                .await
                .is_ok()
            {
                break;
            }
            let s = shared.state.lock().unwrap();
            if s.member_epoch > 0 && s.last_poll.elapsed() > config.max_poll_interval {
                break;
            }
        }
        let (sent_epoch, waiting) = {
            let s = shared.state.lock().unwrap();
            if s.fatal.is_some() {
                return;
            }
            (s.member_epoch, s.fenced || s.subscription.is_none())
        };
        if waiting {
            // Fenced: `poll` first drops the partitions as lost, then the member rejoins.
            delay = Duration::from_millis(100);
            continue;
        }
        if sent_epoch > 0
            && shared.state.lock().unwrap().last_poll.elapsed() > config.max_poll_interval
        {
            // Java: the member leaves so that its partitions can move; the next poll finds them
            // lost and rejoins.
            tracing::warn!("no poll for longer than max.poll.interval.ms; leaving the group");
            leave_on_poll_timeout(&coord, &shared, &config).await;
            delay = Duration::from_millis(100);
            continue;
        }
        let r = coord
            .send(ApiKey::ConsumerGroupHeartbeat, |v| {
                let s = shared.state.lock().unwrap();
                heartbeat_request(&s, &coord, &config, v)
            })
            .await;
        let backoff = coord.client().config().backoff(attempt);
        match r {
            Ok(resp) => {
                let failed = resp.error_code != 0;
                delay = handle_response(&shared, &coord, sent_epoch, resp, backoff);
                attempt = if failed { attempt + 1 } else { 0 };
            }
            Err(e) if e.is_retriable() => {
                tracing::debug!(error = %e, "ConsumerGroupHeartbeat failed, retrying");
                delay = backoff;
                attempt += 1;
            }
            Err(e) => {
                let code = e.code().unwrap_or(ErrorCode::UnknownServerError);
                shared.state.lock().unwrap().fatal = Some((code, e.to_string()));
                return;
            }
        }
    }
}

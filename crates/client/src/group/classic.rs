//! The classic group protocol, as kafka-clients' `AbstractCoordinator` and
//! `ConsumerCoordinator` run it: JoinGroup (retried with the member id on MEMBER_ID_REQUIRED),
//! the leader's assignment, SyncGroup, a heartbeat task, LeaveGroup; eager or cooperative
//! revocation depending on the assignors.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use strom_protocol::kafka::messages::join_group_request::JoinGroupRequestProtocol;
use strom_protocol::kafka::messages::leave_group_request::MemberIdentity;
use strom_protocol::kafka::messages::sync_group_request::SyncGroupRequestAssignment;
use strom_protocol::kafka::messages::{
    ApiKey, GroupId, HeartbeatRequest, JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest,
    SyncGroupRequest,
};
use strom_protocol::kafka::protocol::StrBytes;
use strom_protocol::ErrorCode;
use tokio::task::JoinHandle;

use super::coordinator::{is_coordinator_moved, Coordinator};
use super::member::Env;
use super::protocol::{
    decode_assignment, decode_subscription, encode_assignment, encode_subscription,
};
use super::{GroupConfig, GroupError, Subscription, TopicPartition};
use crate::assignor::sticky::{CooperativeStickyAssignor, StickyAssignor};
use crate::assignor::{
    self, Assignment, Cluster, PartitionAssignor, PartitionInfo, RebalanceProtocol,
};
use crate::error::{Error, Result};

/// The protocol type of consumer groups.
const PROTOCOL_TYPE: &str = "consumer";

/// A subscription pattern of the classic protocol, matched on the client against whole topic
/// names as Java's `Pattern.matcher(topic).matches()` (Rust `regex` syntax, which agrees with
/// Java's for the usual patterns: literals, classes, `.*`, alternation).
pub(crate) fn compile_pattern(pattern: &str) -> Result<regex_automata::meta::Regex> {
    regex_automata::meta::Regex::new(&format!("^(?:{pattern})$"))
        .map_err(|e| Error::Config(format!("invalid subscription pattern {pattern:?}: {e}")))
}

/// A configured assignor. The sticky ones are kept by type: after each SyncGroup they
/// remember what they got (Java's `onAssignment`) for their next subscription user data.
enum Assignor {
    Plain(Box<dyn PartitionAssignor>),
    Sticky(StickyAssignor),
    CooperativeSticky(CooperativeStickyAssignor),
}

impl Assignor {
    fn by_name(name: &str) -> Result<Assignor> {
        Ok(match name {
            "sticky" => Assignor::Sticky(StickyAssignor::new()),
            "cooperative-sticky" => Assignor::CooperativeSticky(CooperativeStickyAssignor::new()),
            other => Assignor::Plain(assignor::by_name(other).ok_or_else(|| {
                Error::Config(format!(
                    "unknown partition.assignment.strategy {other:?}: expected range, roundrobin, sticky or cooperative-sticky"
                ))
            })?),
        })
    }

    fn get(&self) -> &dyn PartitionAssignor {
        match self {
            Assignor::Plain(a) => a.as_ref(),
            Assignor::Sticky(a) => a,
            Assignor::CooperativeSticky(a) => a,
        }
    }

    fn on_assignment(&self, a: &Assignment, generation: i32) {
        match self {
            Assignor::Plain(_) => {}
            Assignor::Sticky(s) => s.on_assignment(a.partitions.clone(), generation),
            Assignor::CooperativeSticky(s) => s.on_assignment(generation),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MemberState {
    Unjoined,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
}

/// What the heartbeat task and `poll` share.
#[derive(Debug)]
pub(crate) struct Shared {
    generation_id: i32,
    member_id: String,
    protocol_name: Option<String>,
    state: MemberState,
    rejoin_needed: bool,
    fatal: Option<(ErrorCode, String)>,
    last_poll: Instant,
}

impl Shared {
    fn reset_generation(&mut self) {
        self.generation_id = -1;
        self.member_id.clear();
        self.protocol_name = None;
        self.state = MemberState::Unjoined;
        self.rejoin_needed = true;
    }
}

/// A commit error seen by an async commit, applied to the membership as Java's handler does.
pub(crate) fn note_commit_error(shared: &Arc<Mutex<Shared>>, code: ErrorCode) {
    let mut s = shared.lock().unwrap();
    match code {
        ErrorCode::IllegalGeneration | ErrorCode::UnknownMemberId => s.reset_generation(),
        ErrorCode::RebalanceInProgress => s.rejoin_needed = true,
        ErrorCode::FencedInstanceId => s.fatal = Some((code, "fenced by a newer instance".into())),
        _ => {}
    }
}

/// One classic group membership.
pub(crate) struct ClassicMember {
    shared: Arc<Mutex<Shared>>,
    assignors: Vec<Assignor>,
    protocol: RebalanceProtocol,
    heartbeat: Option<JoinHandle<()>>,
    needs_join_prepare: bool,
    /// The topics of the last JoinGroup (a different subscription means a rejoin).
    joined: Option<BTreeSet<String>>,
    /// A pattern subscription: the pattern, its compiled form and the topics it matched at
    /// the last metadata refresh.
    pattern: Option<(String, regex_automata::meta::Regex, BTreeSet<String>)>,
    /// When the member last refreshed metadata for the pattern or the leader's snapshot.
    metadata_checked: Instant,
    /// The leader's partition counts at its last assignment (Java's `assignmentSnapshot`): a
    /// change means the group must rebalance.
    assignment_snapshot: Option<BTreeMap<String, usize>>,
}

impl Drop for ClassicMember {
    fn drop(&mut self) {
        if let Some(h) = self.heartbeat.take() {
            h.abort();
        }
    }
}

impl ClassicMember {
    pub fn new(config: &GroupConfig) -> Result<Self> {
        if config.partition_assignment_strategy.is_empty() {
            return Err(Error::Config(
                "partition.assignment.strategy must name at least one assignor".into(),
            ));
        }
        let assignors: Vec<Assignor> = config
            .partition_assignment_strategy
            .iter()
            .map(|n| Assignor::by_name(n.trim()))
            .collect::<Result<_>>()?;
        // Java: cooperative only when every assignor supports it.
        let protocol = if assignors.iter().all(|a| {
            a.get()
                .supported_protocols()
                .contains(&RebalanceProtocol::Cooperative)
        }) {
            RebalanceProtocol::Cooperative
        } else {
            RebalanceProtocol::Eager
        };
        if config.heartbeat_interval >= config.session_timeout {
            return Err(Error::ConfigException(
                "heartbeat.interval.ms must be lower than session.timeout.ms".into(),
            ));
        }
        Ok(ClassicMember {
            shared: Arc::new(Mutex::new(Shared {
                generation_id: -1,
                member_id: String::new(),
                protocol_name: None,
                state: MemberState::Unjoined,
                rejoin_needed: true,
                fatal: None,
                last_poll: Instant::now(),
            })),
            assignors,
            protocol,
            heartbeat: None,
            needs_join_prepare: true,
            joined: None,
            pattern: None,
            metadata_checked: Instant::now(),
            assignment_snapshot: None,
        })
    }

    pub fn shared(&self) -> Arc<Mutex<Shared>> {
        self.shared.clone()
    }

    pub fn generation(&self) -> (i32, String) {
        let s = self.shared.lock().unwrap();
        (s.generation_id, s.member_id.clone())
    }

    /// Java's `generationIfStable`.
    pub fn generation_if_stable(&self) -> Option<(i32, String)> {
        let s = self.shared.lock().unwrap();
        (s.state == MemberState::Stable && s.generation_id >= 0)
            .then(|| (s.generation_id, s.member_id.clone()))
    }

    pub fn rebalance_in_progress(&self) -> bool {
        let s = self.shared.lock().unwrap();
        matches!(
            s.state,
            MemberState::PreparingRebalance | MemberState::CompletingRebalance
        ) || s.rejoin_needed
    }

    pub fn reset_generation(&mut self, _rejoin: bool) {
        self.shared.lock().unwrap().reset_generation();
    }

    pub fn request_rejoin(&mut self) {
        self.shared.lock().unwrap().rejoin_needed = true;
    }

    pub fn set_fatal(&mut self, code: ErrorCode, message: String) {
        self.shared.lock().unwrap().fatal = Some((code, message));
    }

    fn check_fatal(&self) -> Result<()> {
        match &self.shared.lock().unwrap().fatal {
            Some((code, message)) => Err(GroupError::Fatal {
                code: *code,
                message: message.clone(),
            }
            .into()),
            None => Ok(()),
        }
    }

    /// Java's `ConsumerCoordinator.poll`: (re)join when needed, until the member is stable.
    pub async fn poll(
        &mut self,
        env: &mut Env<'_>,
        sub: &Subscription,
        deadline: Instant,
    ) -> Result<()> {
        let topics = &self.subscribed_topics(env, sub).await?;
        self.check_assignment_snapshot(env).await;
        {
            let mut s = self.shared.lock().unwrap();
            s.last_poll = Instant::now();
            if self.joined.as_ref().is_some_and(|j| j != topics) {
                s.rejoin_needed = true;
            }
        }
        self.check_fatal()?;
        if self.heartbeat.as_ref().is_none_or(|h| h.is_finished()) {
            self.heartbeat = Some(tokio::spawn(heartbeat_loop(
                env.coord.clone(),
                self.shared.clone(),
                env.config.clone(),
            )));
        }
        let mut attempt = 0;
        loop {
            self.check_fatal()?;
            {
                let s = self.shared.lock().unwrap();
                if s.state == MemberState::Stable && !s.rejoin_needed {
                    return Ok(());
                }
            }
            if self.needs_join_prepare {
                self.on_join_prepare(env, topics).await;
                self.needs_join_prepare = false;
            }
            match self.join_and_sync(env, topics).await {
                Ok(Some((assignment, generation))) => {
                    self.on_join_complete(env, topics, assignment, generation);
                    self.needs_join_prepare = true;
                    attempt = 0;
                }
                Ok(None) => {}
                // Out of time for this poll: the next one carries on.
                Err(e) if e.is_retriable() && Instant::now() >= deadline => return Ok(()),
                Err(e) if e.is_retriable() => {
                    tracing::debug!(error = %e, "join failed, retrying");
                    tokio::time::sleep(env.coord.client().config().backoff(attempt)).await;
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn metadata_due(&self, env: &Env<'_>) -> bool {
        self.metadata_checked.elapsed() >= env.coord.client().config().metadata_max_age
    }

    /// The topics to join with: the subscribed ones, or those matching the pattern (all
    /// topics' metadata is refreshed every `metadata.max.age.ms`, as Java does).
    async fn subscribed_topics(
        &mut self,
        env: &Env<'_>,
        sub: &Subscription,
    ) -> Result<BTreeSet<String>> {
        let pattern = match sub {
            Subscription::Topics(t) => return Ok(t.clone()),
            Subscription::Pattern(p) => p,
        };
        let fresh =
            self.pattern.as_ref().is_some_and(|(p, _, _)| p == pattern) && !self.metadata_due(env);
        if !fresh {
            let re = match self.pattern.take() {
                Some((p, re, _)) if p == *pattern => re,
                _ => compile_pattern(pattern)?,
            };
            let client = env.coord.client();
            client.refresh_metadata(None).await?;
            self.metadata_checked = Instant::now();
            let md = client.metadata();
            let matched: BTreeSet<String> = md
                .topics
                .values()
                .filter(|t| !t.is_internal && re.is_match(&t.name))
                .map(|t| t.name.clone())
                .collect();
            self.pattern = Some((pattern.clone(), re, matched));
        }
        Ok(self
            .pattern
            .as_ref()
            .map(|(_, _, t)| t.clone())
            .unwrap_or_default())
    }

    /// The leader rebalances the group when a topic it assigned changed its partition count
    /// (checked every `metadata.max.age.ms`).
    async fn check_assignment_snapshot(&mut self, env: &Env<'_>) {
        let Some(snapshot) = &self.assignment_snapshot else {
            return;
        };
        if !self.metadata_due(env) {
            return;
        }
        self.metadata_checked = Instant::now();
        let topics: Vec<String> = snapshot.keys().cloned().collect();
        let client = env.coord.client();
        if client.refresh_metadata(Some(&topics)).await.is_err() {
            return;
        }
        if partition_counts(&client.metadata(), &topics) != *snapshot {
            tracing::info!("partition counts of assigned topics changed; rebalancing");
            self.request_rejoin();
        }
    }

    /// Java's `onJoinPrepare`: commit, then revoke (eager: all; cooperative: what is no longer
    /// subscribed) or, when the generation was lost, call the partitions lost.
    async fn on_join_prepare(&mut self, env: &mut Env<'_>, topics: &BTreeSet<String>) {
        let (generation, member_id, stable) = {
            let s = self.shared.lock().unwrap();
            (
                s.generation_id,
                s.member_id.clone(),
                s.state == MemberState::Stable,
            )
        };
        if env.config.enable_auto_commit && generation >= 0 && stable {
            let offsets = env.consumed();
            let meta = super::GroupMetadata {
                group_id: env.coord.group_id().to_string(),
                generation_id: generation,
                member_id: member_id.clone(),
                group_instance_id: env.config.group_instance_id.clone(),
            };
            let deadline =
                Instant::now() + env.config.max_poll_interval.min(Duration::from_secs(30));
            if let Err(e) = super::commit::commit(env.coord, &meta, &offsets, deadline).await {
                tracing::warn!(error = %e, "auto-commit before rebalance failed");
                if let Some(code) = e.code() {
                    note_commit_error(&self.shared, code);
                }
            }
        }
        let (generation, member_id) = self.generation();
        let owned = env.assigned.clone();
        if generation < 0 || member_id.is_empty() {
            env.lose(&owned);
            return;
        }
        match self.protocol {
            RebalanceProtocol::Eager => env.revoke(&owned, true),
            RebalanceProtocol::Cooperative => {
                let gone: BTreeSet<TopicPartition> = owned
                    .into_iter()
                    .filter(|tp| !topics.contains(&tp.topic))
                    .collect();
                env.revoke(&gone, false);
            }
        }
    }

    fn join_request(
        &self,
        env: &Env<'_>,
        topics: &BTreeSet<String>,
        version: i16,
    ) -> Result<JoinGroupRequest> {
        let (generation, member_id) = self.generation();
        let topic_list: Vec<String> = topics.iter().cloned().collect();
        let owned: Vec<TopicPartition> = env.assigned.iter().cloned().collect();
        let mut req = JoinGroupRequest::default();
        req.group_id = GroupId(StrBytes::from_string(env.coord.group_id().to_string()));
        req.session_timeout_ms = millis(env.config.session_timeout);
        req.rebalance_timeout_ms = millis(env.config.max_poll_interval);
        req.member_id = StrBytes::from_string(member_id);
        if let Some(id) = &env.config.group_instance_id {
            if version < 5 {
                return Err(Error::UnsupportedVersion(
                    "JoinGroup v5+ (static membership)",
                ));
            }
            req.group_instance_id = Some(StrBytes::from_string(id.clone()));
        }
        req.protocol_type = StrBytes::from_static_str(PROTOCOL_TYPE);
        for a in &self.assignors {
            let a = a.get();
            let sub = assignor::Subscription {
                topics: topic_list.clone(),
                user_data: a.subscription_user_data(&topic_list),
                owned_partitions: owned.clone(),
                generation_id: generation,
                rack_id: env.config.client_rack.clone(),
                group_instance_id: None,
            };
            let mut p = JoinGroupRequestProtocol::default();
            p.name = StrBytes::from_static_str(a.name());
            p.metadata = encode_subscription(&sub)?;
            req.protocols.push(p);
        }
        if version >= 8 {
            req.reason = Some(StrBytes::from_static_str("joining or rebalancing"));
        }
        Ok(req)
    }

    /// One JoinGroup + SyncGroup round. `Ok(None)`: retry at once (new member id, the group
    /// rebalanced again, the generation was reset).
    async fn join_and_sync(
        &mut self,
        env: &mut Env<'_>,
        topics: &BTreeSet<String>,
    ) -> Result<Option<(Assignment, i32)>> {
        self.shared.lock().unwrap().state = MemberState::PreparingRebalance;
        let req_env = &*env;
        let resp = env
            .coord
            .send(ApiKey::JoinGroup, |v| self.join_request(req_env, topics, v))
            .await?;
        self.joined = Some(topics.clone());
        match ErrorCode::try_from_code(resp.error_code) {
            None => {}
            Some(ErrorCode::MemberIdRequired) => {
                tracing::debug!(member_id = %resp.member_id, "joining again with the assigned member id");
                self.shared.lock().unwrap().member_id = resp.member_id.to_string();
                return Ok(None);
            }
            Some(ErrorCode::UnknownMemberId | ErrorCode::IllegalGeneration) => {
                self.shared.lock().unwrap().reset_generation();
                return Ok(None);
            }
            Some(ErrorCode::RebalanceInProgress) => return Ok(None),
            Some(code) if is_coordinator_moved(code) => {
                env.coord.mark_unknown("JoinGroup");
                return Err(Error::Kafka {
                    code,
                    message: None,
                });
            }
            Some(code) if code.is_retriable() => {
                return Err(Error::Kafka {
                    code,
                    message: None,
                })
            }
            Some(code) => return Err(self.fatal(code, "JoinGroup")),
        }
        let generation = resp.generation_id;
        let member_id = resp.member_id.to_string();
        let protocol = resp.protocol_name.as_ref().map(|p| p.to_string());
        {
            let mut s = self.shared.lock().unwrap();
            s.generation_id = generation;
            s.member_id = member_id.clone();
            s.protocol_name = protocol.clone();
            s.state = MemberState::CompletingRebalance;
        }
        let protocol = protocol.ok_or_else(|| {
            Error::from(GroupError::Assignment("JoinGroup chose no protocol".into()))
        })?;
        let assignor_idx = self
            .assignors
            .iter()
            .position(|a| a.get().name() == protocol)
            .ok_or_else(|| {
                Error::from(GroupError::Assignment(format!(
                    "the group chose assignor {protocol:?}, which this member did not offer"
                )))
            })?;
        self.assignment_snapshot = None;
        let assignments = if resp.leader == resp.member_id && !resp.skip_assignment {
            self.lead(env, &resp, assignor_idx).await?
        } else {
            Vec::new()
        };
        let instance = env.config.group_instance_id.clone();
        let group = env.coord.group_id().to_string();
        let sync = env
            .coord
            .send(ApiKey::SyncGroup, |v| {
                let mut req = SyncGroupRequest::default();
                req.group_id = GroupId(StrBytes::from_string(group));
                req.generation_id = generation;
                req.member_id = StrBytes::from_string(member_id.clone());
                if v >= 3 {
                    req.group_instance_id = instance.map(StrBytes::from_string);
                }
                if v >= 5 {
                    req.protocol_type = Some(StrBytes::from_static_str(PROTOCOL_TYPE));
                    req.protocol_name = Some(StrBytes::from_string(protocol.clone()));
                }
                req.assignments = assignments;
                Ok(req)
            })
            .await?;
        match ErrorCode::try_from_code(sync.error_code) {
            None => {}
            Some(ErrorCode::RebalanceInProgress) => {
                self.shared.lock().unwrap().rejoin_needed = true;
                return Ok(None);
            }
            Some(ErrorCode::UnknownMemberId | ErrorCode::IllegalGeneration) => {
                self.shared.lock().unwrap().reset_generation();
                return Ok(None);
            }
            Some(code) if is_coordinator_moved(code) => {
                env.coord.mark_unknown("SyncGroup");
                return Err(Error::Kafka {
                    code,
                    message: None,
                });
            }
            Some(code) if code.is_retriable() => {
                return Err(Error::Kafka {
                    code,
                    message: None,
                })
            }
            Some(code) => return Err(self.fatal(code, "SyncGroup")),
        }
        let assignment = decode_assignment(sync.assignment)?;
        self.assignors[assignor_idx].on_assignment(&assignment, generation);
        let mut s = self.shared.lock().unwrap();
        // A heartbeat may have asked for another rebalance meanwhile; keep that request.
        if s.generation_id == generation {
            s.state = MemberState::Stable;
            s.rejoin_needed = false;
        }
        drop(s);
        Ok(Some((assignment, generation)))
    }

    fn fatal(&self, code: ErrorCode, what: &str) -> Error {
        if code == ErrorCode::FencedInstanceId {
            self.shared.lock().unwrap().fatal = Some((
                code,
                format!("{what}: another instance with this group.instance.id joined"),
            ));
        }
        Error::from(GroupError::Fatal {
            code,
            message: format!("{what} failed"),
        })
    }

    /// The leader's part: run the chosen assignor over every member's subscription.
    async fn lead(
        &mut self,
        env: &Env<'_>,
        resp: &JoinGroupResponse,
        assignor_idx: usize,
    ) -> Result<Vec<SyncGroupRequestAssignment>> {
        let mut subs = BTreeMap::new();
        for m in &resp.members {
            let sub = decode_subscription(
                m.metadata.clone(),
                m.group_instance_id.as_ref().map(|s| s.to_string()),
            )?;
            subs.insert(m.member_id.to_string(), sub);
        }
        let all_topics: Vec<String> = subs
            .values()
            .flat_map(|s| s.topics.iter().cloned())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let client = env.coord.client();
        client.refresh_metadata(Some(&all_topics)).await?;
        let md = client.metadata();
        let mut cluster = Cluster::default();
        for t in &all_topics {
            let Some(tm) = md.topics.get(t) else { continue };
            if tm.partitions.is_empty() {
                continue;
            }
            let parts = tm
                .partitions
                .iter()
                .map(|p| PartitionInfo {
                    partition: p.partition,
                    replica_racks: p
                        .replicas
                        .iter()
                        .filter_map(|r| md.brokers.get(r).and_then(|b| b.rack.clone()))
                        .collect(),
                })
                .collect();
            cluster.topics.insert(t.clone(), parts);
        }
        self.assignment_snapshot = Some(partition_counts(&md, &all_topics));
        self.metadata_checked = Instant::now();
        let assignor = self.assignors[assignor_idx].get();
        let result = assignor
            .assign(&cluster, &subs)
            .map_err(|e| Error::from(GroupError::Assignment(e.to_string())))?;
        tracing::info!(
            assignor = assignor.name(),
            members = subs.len(),
            "leader computed the assignment"
        );
        result
            .iter()
            .map(|(member, a)| {
                let mut sa = SyncGroupRequestAssignment::default();
                sa.member_id = StrBytes::from_string(member.clone());
                sa.assignment = encode_assignment(a)?;
                Ok(sa)
            })
            .collect()
    }

    /// Java's `onJoinComplete`: cooperative members first give up what moved (and rejoin so
    /// that the group can hand it over); then the new partitions are assigned.
    fn on_join_complete(
        &mut self,
        env: &mut Env<'_>,
        topics: &BTreeSet<String>,
        assignment: Assignment,
        generation: i32,
    ) {
        let new: BTreeSet<TopicPartition> = assignment.partitions.into_iter().collect();
        if new.iter().any(|tp| !topics.contains(&tp.topic)) {
            tracing::warn!(
                generation,
                "assigned partitions of topics not subscribed to; rejoining"
            );
            self.request_rejoin();
        }
        let owned = env.assigned.clone();
        if self.protocol == RebalanceProtocol::Cooperative {
            let revoked: BTreeSet<TopicPartition> = owned.difference(&new).cloned().collect();
            if !revoked.is_empty() {
                env.revoke(&revoked, false);
                self.request_rejoin();
            }
        }
        let added: BTreeSet<TopicPartition> = new.difference(&owned).cloned().collect();
        tracing::info!(generation, protocol = ?self.protocol, "joined the group");
        env.assign(new, &added);
    }

    /// Java's `close` for the membership: revoke (or lose) everything, then LeaveGroup unless
    /// the member is static (a static member's partitions wait for it for the session timeout).
    pub async fn leave(&mut self, env: &mut Env<'_>) {
        if let Some(h) = self.heartbeat.take() {
            h.abort();
        }
        let (generation, member_id) = self.generation();
        let state = self.shared.lock().unwrap().state;
        let owned = env.assigned.clone();
        // Java: lost, not revoked, when the generation is gone or a rebalance is under way.
        let rebalancing = matches!(
            state,
            MemberState::PreparingRebalance | MemberState::CompletingRebalance
        );
        if generation < 0 || member_id.is_empty() || rebalancing {
            env.lose(&owned);
        } else {
            env.revoke(&owned, false);
        }
        let dynamic = env.config.group_instance_id.is_none();
        if dynamic && state != MemberState::Unjoined && !member_id.is_empty() {
            if let Err(e) = send_leave(env.coord, &member_id, "the consumer is closing").await {
                tracing::info!(error = %e, "LeaveGroup failed");
            }
        }
        self.shared.lock().unwrap().reset_generation();
        self.joined = None;
    }
}

/// Partition counts of `topics` (0 for a topic without metadata).
fn partition_counts(
    md: &crate::client::ClusterMetadata,
    topics: &[String],
) -> BTreeMap<String, usize> {
    topics
        .iter()
        .map(|t| {
            (
                t.clone(),
                md.topics.get(t).map_or(0, |tm| tm.partitions.len()),
            )
        })
        .collect()
}

fn millis(d: Duration) -> i32 {
    d.as_millis().min(i32::MAX as u128) as i32
}

async fn send_leave(coord: &Coordinator, member_id: &str, reason: &str) -> Result<()> {
    if coord.known().is_none() {
        return Ok(());
    }
    let group = coord.group_id().to_string();
    let resp = coord
        .send(ApiKey::LeaveGroup, |v| {
            let mut req = LeaveGroupRequest::default();
            req.group_id = GroupId(StrBytes::from_string(group));
            if v >= 3 {
                let mut m = MemberIdentity::default();
                m.member_id = StrBytes::from_string(member_id.to_string());
                if v >= 5 {
                    m.reason = Some(StrBytes::from_string(reason.to_string()));
                }
                req.members = vec![m];
            } else {
                req.member_id = StrBytes::from_string(member_id.to_string());
            }
            Ok(req)
        })
        .await?;
    if let Some(e) = Error::kafka(resp.error_code, None) {
        return Err(e);
    }
    if let Some(e) = resp
        .members
        .iter()
        .find_map(|m| Error::kafka(m.error_code, None))
    {
        return Err(e);
    }
    Ok(())
}

/// Java's heartbeat thread: heartbeats while stable, asks for a rejoin when the group
/// rebalances, resets the generation when fenced, leaves when the application stopped
/// polling for longer than `max.poll.interval.ms`, and gives up on a coordinator that has not
/// answered for a session timeout.
async fn heartbeat_loop(coord: Coordinator, shared: Arc<Mutex<Shared>>, config: GroupConfig) {
    let mut last_ok = Instant::now();
    loop {
        tokio::time::sleep(config.heartbeat_interval).await;
        let (state, generation, member_id, last_poll) = {
            let s = shared.lock().unwrap();
            if s.fatal.is_some() {
                return;
            }
            (s.state, s.generation_id, s.member_id.clone(), s.last_poll)
        };
        if state == MemberState::Unjoined {
            last_ok = Instant::now();
            continue;
        }
        if last_poll.elapsed() > config.max_poll_interval {
            tracing::warn!(
                "no poll for longer than max.poll.interval.ms; leaving the group so that its partitions can move"
            );
            if config.group_instance_id.is_none() && !member_id.is_empty() {
                let _ = send_leave(&coord, &member_id, "consumer poll timeout has expired").await;
            }
            shared.lock().unwrap().reset_generation();
            continue;
        }
        if state != MemberState::Stable {
            last_ok = Instant::now();
            continue;
        }
        let group = coord.group_id().to_string();
        let instance = config.group_instance_id.clone();
        let r = coord
            .send(ApiKey::Heartbeat, |v| {
                let mut req = HeartbeatRequest::default();
                req.group_id = GroupId(StrBytes::from_string(group));
                req.generation_id = generation;
                req.member_id = StrBytes::from_string(member_id.clone());
                if v >= 3 {
                    req.group_instance_id = instance.map(StrBytes::from_string);
                }
                Ok(req)
            })
            .await;
        match r {
            Ok(resp) => {
                let mut s = shared.lock().unwrap();
                if s.generation_id != generation {
                    // A rejoin completed meanwhile; this answer is about the old generation.
                    continue;
                }
                match ErrorCode::try_from_code(resp.error_code) {
                    None => last_ok = Instant::now(),
                    Some(ErrorCode::RebalanceInProgress) => {
                        last_ok = Instant::now();
                        if !s.rejoin_needed {
                            tracing::info!("the group is rebalancing; rejoining on the next poll");
                        }
                        s.rejoin_needed = true;
                    }
                    Some(ErrorCode::IllegalGeneration | ErrorCode::UnknownMemberId) => {
                        tracing::info!(code = resp.error_code, "heartbeat: generation reset");
                        s.reset_generation();
                    }
                    Some(ErrorCode::FencedInstanceId) => {
                        s.fatal = Some((
                            ErrorCode::FencedInstanceId,
                            "another instance with this group.instance.id joined".into(),
                        ));
                        return;
                    }
                    Some(code) if is_coordinator_moved(code) => {
                        drop(s);
                        coord.mark_unknown("Heartbeat");
                    }
                    Some(code) => tracing::debug!(?code, "heartbeat error"),
                }
            }
            Err(e) => tracing::debug!(error = %e, "heartbeat failed"),
        }
        if last_ok.elapsed() > config.session_timeout {
            coord.mark_unknown("no successful heartbeat for session.timeout.ms");
            last_ok = Instant::now();
        }
    }
}

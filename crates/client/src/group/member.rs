//! The group side of a [`Consumer`](crate::Consumer): subscription, listener, the classic or
//! consumer-protocol membership, positions of assigned partitions, commits and auto-commit.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use strom_protocol::ErrorCode;
use tokio::task::JoinHandle;

use super::classic::ClassicMember;
use super::commit::{self, DEFAULT_API_TIMEOUT};
use super::consumer_group::ConsumerMember;
use super::coordinator::Coordinator;
use super::{
    GroupConfig, GroupError, GroupMetadata, GroupProtocol, RebalanceListener, Subscription,
    TopicPartition,
};
use crate::client::Client;
use crate::consumer::{OffsetReset, Position, Positions};
use crate::error::{Error, Result};

/// What the memberships need from the consumer while they rebalance: the listener, the
/// positions of the partitions and the set of auto-assigned ones.
pub(crate) struct Env<'a> {
    pub coord: &'a Coordinator,
    pub config: &'a GroupConfig,
    pub listener: &'a mut Option<Box<dyn RebalanceListener>>,
    pub positions: &'a mut Positions,
    pub assigned: &'a mut BTreeSet<TopicPartition>,
}

impl Env<'_> {
    /// `on_partitions_revoked` (when `always` or non-empty), then drops the partitions.
    pub fn revoke(&mut self, parts: &BTreeSet<TopicPartition>, always: bool) {
        let list: Vec<TopicPartition> = parts.iter().cloned().collect();
        if always || !list.is_empty() {
            tracing::info!(partitions = ?list, "revoking partitions");
            if let Some(l) = self.listener.as_mut() {
                l.on_partitions_revoked(&list);
            }
        }
        self.drop_partitions(parts);
    }

    /// `on_partitions_lost` (when non-empty), then drops the partitions.
    pub fn lose(&mut self, parts: &BTreeSet<TopicPartition>) {
        if parts.is_empty() {
            return;
        }
        let list: Vec<TopicPartition> = parts.iter().cloned().collect();
        tracing::info!(partitions = ?list, "partitions lost");
        if let Some(l) = self.listener.as_mut() {
            l.on_partitions_lost(&list);
        }
        self.drop_partitions(parts);
    }

    fn drop_partitions(&mut self, parts: &BTreeSet<TopicPartition>) {
        for tp in parts {
            self.assigned.remove(tp);
            self.positions.remove(&(tp.topic.clone(), tp.partition));
        }
    }

    /// Makes `all` the assignment; the partitions new in it start from their committed offset.
    /// `on_partitions_assigned` gets `added`.
    pub fn assign(&mut self, all: BTreeSet<TopicPartition>, added: &BTreeSet<TopicPartition>) {
        let gone: BTreeSet<TopicPartition> = self.assigned.difference(&all).cloned().collect();
        self.drop_partitions(&gone);
        for tp in &all {
            self.positions
                .entry((tp.topic.clone(), tp.partition))
                .or_insert(Position::Committed);
        }
        *self.assigned = all;
        let list: Vec<TopicPartition> = added.iter().cloned().collect();
        tracing::info!(partitions = ?list, "partitions assigned");
        if let Some(l) = self.listener.as_mut() {
            l.on_partitions_assigned(&list);
        }
    }

    /// The consumed positions of the auto-assigned partitions (Java's `allConsumed`).
    pub fn consumed(&self) -> BTreeMap<TopicPartition, i64> {
        consumed(self.positions, self.assigned)
    }
}

fn consumed(
    positions: &Positions,
    assigned: &BTreeSet<TopicPartition>,
) -> BTreeMap<TopicPartition, i64> {
    positions
        .iter()
        .filter_map(|((t, p), pos)| match pos {
            Position::Offset(o) => Some((TopicPartition::new(t.clone(), *p), *o)),
            _ => None,
        })
        .filter(|(tp, _)| assigned.is_empty() || assigned.contains(tp))
        .collect()
}

pub(crate) enum Membership {
    Classic(ClassicMember),
    Consumer(ConsumerMember),
}

/// A consumer's group state.
pub(crate) struct Group {
    config: GroupConfig,
    coord: Coordinator,
    subscription: Option<Subscription>,
    listener: Option<Box<dyn RebalanceListener>>,
    membership: Membership,
    assigned: BTreeSet<TopicPartition>,
    next_auto_commit: Instant,
    /// The last async auto-commit, so that at most one is in flight (as Java).
    auto_commit: Option<JoinHandle<Result<()>>>,
}

impl std::fmt::Debug for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Group")
            .field("group_id", &self.coord.group_id())
            .field("subscription", &self.subscription)
            .field("assigned", &self.assigned)
            .finish()
    }
}

impl Group {
    /// The group state for `config`, or `None` without a `group.id`.
    pub fn new(client: &Client, config: &GroupConfig) -> Result<Option<Group>> {
        let Some(group_id) = config.group_id.clone() else {
            return Ok(None);
        };
        if group_id.trim().is_empty() {
            return Err(GroupError::InvalidGroupId.into());
        }
        if config.group_instance_id.as_deref() == Some("") {
            return Err(Error::Config("group.instance.id must not be empty".into()));
        }
        let coord = Coordinator::new(client.clone(), group_id, config.max_poll_interval);
        let membership = match config.group_protocol {
            GroupProtocol::Classic => Membership::Classic(ClassicMember::new(config)?),
            GroupProtocol::Consumer => {
                if config.partition_assignment_strategy
                    != GroupConfig::default().partition_assignment_strategy
                {
                    // Java rejects partition.assignment.strategy with the consumer protocol.
                    return Err(Error::ConfigException(
                        "partition.assignment.strategy cannot be set when group.protocol=consumer; use group.remote.assignor".into(),
                    ));
                }
                Membership::Consumer(ConsumerMember::new())
            }
        };
        Ok(Some(Group {
            config: config.clone(),
            coord,
            subscription: None,
            listener: None,
            membership,
            assigned: BTreeSet::new(),
            next_auto_commit: Instant::now() + config.auto_commit_interval,
            auto_commit: None,
        }))
    }

    pub fn is_subscribed(&self) -> bool {
        self.subscription.is_some()
    }

    pub fn subscribe(
        &mut self,
        subscription: Subscription,
        listener: Option<Box<dyn RebalanceListener>>,
    ) -> Result<()> {
        if let (Subscription::Pattern(p), Membership::Classic(_)) =
            (&subscription, &self.membership)
        {
            super::classic::compile_pattern(p)?;
        }
        self.subscription = Some(subscription);
        if listener.is_some() {
            self.listener = listener;
        }
        Ok(())
    }

    /// The group id, generation (or member epoch) and member id (Java's `groupMetadata()`).
    pub fn metadata(&self) -> GroupMetadata {
        let (generation_id, member_id) = match &self.membership {
            Membership::Classic(m) => m.generation(),
            Membership::Consumer(m) => m.epoch_and_id(),
        };
        GroupMetadata {
            group_id: self.coord.group_id().to_string(),
            generation_id,
            member_id,
            group_instance_id: self.config.group_instance_id.clone(),
        }
    }

    pub fn assignment(&self) -> &BTreeSet<TopicPartition> {
        &self.assigned
    }

    fn env<'a>(
        coord: &'a Coordinator,
        config: &'a GroupConfig,
        listener: &'a mut Option<Box<dyn RebalanceListener>>,
        positions: &'a mut Positions,
        assigned: &'a mut BTreeSet<TopicPartition>,
    ) -> Env<'a> {
        Env {
            coord,
            config,
            listener,
            positions,
            assigned,
        }
    }

    /// Everything `poll` does for the group before fetching: keep or (re)join the membership,
    /// run the listener, start new partitions from their committed offsets, auto-commit.
    pub async fn poll(
        &mut self,
        positions: &mut Positions,
        reset: OffsetReset,
        deadline: Instant,
    ) -> Result<()> {
        if let Some(sub) = self.subscription.clone() {
            let mut env = Self::env(
                &self.coord,
                &self.config,
                &mut self.listener,
                positions,
                &mut self.assigned,
            );
            match &mut self.membership {
                Membership::Classic(m) => m.poll(&mut env, &sub, deadline).await?,
                Membership::Consumer(m) => m.poll(&mut env, &sub).await?,
            }
        }
        self.refresh_committed(positions, reset).await?;
        self.maybe_auto_commit(positions);
        Ok(())
    }

    /// Java's `refreshCommittedOffsetsIfNeeded` + reset: partitions waiting for their committed
    /// offset get it, or the reset policy.
    async fn refresh_committed(
        &mut self,
        positions: &mut Positions,
        reset: OffsetReset,
    ) -> Result<()> {
        let waiting: Vec<TopicPartition> = positions
            .iter()
            .filter(|(_, p)| **p == Position::Committed)
            .map(|((t, p), _)| TopicPartition::new(t.clone(), *p))
            .collect();
        if waiting.is_empty() {
            return Ok(());
        }
        let committed =
            commit::fetch_committed(&self.coord, &waiting, Instant::now() + DEFAULT_API_TIMEOUT)
                .await?;
        let mut undefined = Vec::new();
        for tp in waiting {
            let key = (tp.topic.clone(), tp.partition);
            // Skip partitions a listener or seek moved meanwhile.
            if positions.get(&key) != Some(&Position::Committed) {
                continue;
            }
            match committed.get(&tp).copied().flatten() {
                Some(o) => {
                    positions.insert(key, Position::Offset(o));
                }
                None if reset == OffsetReset::None => {
                    undefined.push(format!("{}-{}", tp.topic, tp.partition))
                }
                None => {
                    positions.insert(key, Position::Reset(reset));
                }
            }
        }
        if !undefined.is_empty() {
            return Err(GroupError::NoOffsetForPartition(undefined.join(", ")).into());
        }
        Ok(())
    }

    fn maybe_auto_commit(&mut self, positions: &Positions) {
        if !self.config.enable_auto_commit || Instant::now() < self.next_auto_commit {
            return;
        }
        if self.auto_commit.as_ref().is_some_and(|h| !h.is_finished()) {
            return;
        }
        self.next_auto_commit = Instant::now() + self.config.auto_commit_interval;
        let offsets = consumed(positions, &self.assigned);
        if offsets.is_empty() || !self.can_commit() {
            return;
        }
        self.auto_commit = Some(self.commit_async(offsets));
    }

    /// False while a classic member is not in a stable generation, or a consumer-protocol
    /// member has no epoch: Java skips auto-commits then.
    fn can_commit(&self) -> bool {
        if self.subscription.is_none() {
            return true;
        }
        match &self.membership {
            Membership::Classic(m) => m.generation_if_stable().is_some(),
            Membership::Consumer(m) => m.epoch_and_id().0 > 0,
        }
    }

    /// The generation a commit is sent in, or Java's error when the member is not part of an
    /// active generation (commits from manual assignment use generation -1).
    fn commit_metadata(&self) -> Result<GroupMetadata> {
        let mut meta = self.metadata();
        if self.subscription.is_none() {
            meta.generation_id = -1;
            meta.member_id = String::new();
            meta.group_instance_id = None;
            return Ok(meta);
        }
        match &self.membership {
            Membership::Classic(m) => match m.generation_if_stable() {
                Some((g, id)) => {
                    meta.generation_id = g;
                    meta.member_id = id;
                    Ok(meta)
                }
                None if m.rebalance_in_progress() => Err(GroupError::RebalanceInProgress(
                    "the consumer is in the middle of a rebalance; poll to complete it, then retry"
                        .into(),
                )
                .into()),
                None => Err(GroupError::CommitFailed(
                    "the consumer is not part of an active group generation".into(),
                )
                .into()),
            },
            Membership::Consumer(_) => Ok(meta),
        }
    }

    /// Interprets a commit failure as Java's coordinators do (generation errors mean the
    /// member must rejoin).
    fn commit_error(&mut self, e: Error) -> Error {
        let Some(code) = e.code() else { return e };
        match (&mut self.membership, code) {
            (Membership::Classic(m), ErrorCode::IllegalGeneration | ErrorCode::UnknownMemberId) => {
                m.reset_generation(true);
                GroupError::CommitFailed(format!(
                    "{e}: the group rebalanced and the partitions may belong to another member now"
                ))
                .into()
            }
            (Membership::Classic(m), ErrorCode::RebalanceInProgress) => {
                m.request_rejoin();
                GroupError::RebalanceInProgress(e.to_string()).into()
            }
            (Membership::Classic(m), ErrorCode::FencedInstanceId) => {
                m.set_fatal(code, e.to_string());
                e
            }
            (
                Membership::Consumer(_),
                ErrorCode::UnknownMemberId | ErrorCode::FencedMemberEpoch,
            ) => GroupError::CommitFailed(e.to_string()).into(),
            _ => e,
        }
    }

    /// Commits `offsets` (`None`: the consumed positions of the assigned partitions) and waits.
    pub async fn commit_sync(
        &mut self,
        positions: &Positions,
        offsets: Option<BTreeMap<TopicPartition, i64>>,
    ) -> Result<()> {
        let offsets = offsets.unwrap_or_else(|| consumed(positions, &self.assigned));
        let deadline = Instant::now() + DEFAULT_API_TIMEOUT;
        let mut attempt = 0;
        loop {
            let meta = self.commit_metadata()?;
            match commit::commit(&self.coord, &meta, &offsets, deadline).await {
                Ok(()) => return Ok(()),
                // The consumer protocol: the epoch moved on; the next heartbeat brings it.
                Err(e)
                    if e.code() == Some(ErrorCode::StaleMemberEpoch)
                        && Instant::now() < deadline =>
                {
                    tokio::time::sleep(self.coord.client().config().backoff(attempt)).await;
                    attempt += 1;
                }
                Err(e) => return Err(self.commit_error(e)),
            }
        }
    }

    /// Sends the commit now and returns its outcome as a task (Java's `commitAsync`; requests
    /// on the coordinator connection keep their order).
    pub fn commit_async(
        &mut self,
        offsets: BTreeMap<TopicPartition, i64>,
    ) -> JoinHandle<Result<()>> {
        let meta = self.commit_metadata();
        let coord = self.coord.clone();
        let shared = match &self.membership {
            Membership::Classic(m) => Some(m.shared()),
            Membership::Consumer(_) => None,
        };
        // Queue the request synchronously when the coordinator is known so async commits
        // reach it in call order.
        let queued = match (&meta, coord.known()) {
            (Ok(meta), Some(conn)) => super::coordinator::group_version(
                &conn,
                strom_protocol::kafka::messages::ApiKey::OffsetCommit,
            )
            .ok()
            .and_then(|v| {
                conn.send_ordered(&commit::commit_request(meta, &offsets, v), v)
                    .ok()
            }),
            _ => None,
        };
        tokio::spawn(async move {
            let meta = meta?;
            let r = match queued {
                Some(fut) => fut
                    .await
                    .and_then(|resp| commit::commit_response_error(&resp).map_or(Ok(()), Err)),
                None => {
                    commit::commit(
                        &coord,
                        &meta,
                        &offsets,
                        Instant::now() + DEFAULT_API_TIMEOUT,
                    )
                    .await
                }
            };
            if let Err(e) = &r {
                if let Some(code) = e.code() {
                    if super::coordinator::is_coordinator_moved(code) {
                        coord.mark_unknown("async commit");
                    }
                    if let Some(shared) = shared {
                        super::classic::note_commit_error(&shared, code);
                    }
                }
                tracing::debug!(error = %e, "async commit failed");
            }
            r
        })
    }

    /// The last committed offsets of `partitions` (`None` where nothing is committed).
    pub async fn committed(
        &self,
        partitions: &[TopicPartition],
    ) -> Result<BTreeMap<TopicPartition, Option<i64>>> {
        commit::fetch_committed(
            &self.coord,
            partitions,
            Instant::now() + DEFAULT_API_TIMEOUT,
        )
        .await
    }

    /// Java's `close`: commit (auto-commit), revoke, leave the group.
    pub async fn close(&mut self, positions: &mut Positions) -> Result<()> {
        if let Some(h) = self.auto_commit.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), h).await;
        }
        if self.config.enable_auto_commit && self.can_commit() {
            if let Err(e) = self.commit_sync(positions, None).await {
                tracing::warn!(error = %e, "auto-commit on close failed");
            }
        }
        let Some(sub) = self.subscription.take() else {
            return Ok(());
        };
        let mut env = Self::env(
            &self.coord,
            &self.config,
            &mut self.listener,
            positions,
            &mut self.assigned,
        );
        match &mut self.membership {
            Membership::Classic(m) => m.leave(&mut env).await,
            Membership::Consumer(m) => m.leave(&mut env, &sub).await,
        }
        Ok(())
    }

    /// Java's `unsubscribe`: like close, but the consumer stays usable.
    pub async fn unsubscribe(&mut self, positions: &mut Positions) -> Result<()> {
        self.close(positions).await?;
        self.membership = match self.config.group_protocol {
            GroupProtocol::Classic => Membership::Classic(ClassicMember::new(&self.config)?),
            GroupProtocol::Consumer => Membership::Consumer(ConsumerMember::new()),
        };
        Ok(())
    }
}

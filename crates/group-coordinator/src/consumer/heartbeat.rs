//! ConsumerGroupHeartbeat (the consumer half of Kafka's `GroupMetadataManager`): join, update,
//! reconcile, leave, fencing on session or rebalance timeout, and the group epoch bumps of
//! metadata changes.
//!
//! Like Kafka, an operation never changes the group itself: it computes the records that do,
//! and the runtime replays them. To compute what follows from its own records (the group's
//! subscriptions after a member changed, the epoch after a bump), an operation applies each
//! record it makes to a scratch copy of the group with the same code replay uses.

use std::collections::BTreeSet;
use std::time::Duration;

use strom_protocol::kafka::messages::consumer_group_heartbeat_response::{
    Assignment, TopicPartitions as ResponseTopicPartitions,
};
use strom_protocol::kafka::messages::{
    ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse,
};
use strom_protocol::kafka::protocol::StrBytes;
use strom_protocol::ErrorCode;
use uuid::Uuid;

use super::current_assignment::CurrentAssignmentBuilder;
use super::group::*;
use super::member::{
    ConsumerGroupMember, MemberState, LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH,
};
use super::target_assignment::TargetAssignmentBuilder;
use super::ConsumerGroups;
use crate::assignor::{
    ConsumerGroupPartitionAssignor, MemberAssignment, RangeAssignor, UniformAssignor,
};
use crate::config::GroupCoordinatorConfig;
use crate::metadata::GroupMetadataImage;
use crate::records::CoordinatorRecord;
use crate::shard::{GroupCoordinatorShard, ShardEnv};
use strom_coordinator_common::timer::TimerResult;

/// An error a consumer group operation answers with (Kafka's `ApiException`s).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code:?}: {message}")]
pub struct GroupError {
    pub code: ErrorCode,
    pub message: String,
}

impl GroupError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

/// What the heartbeat needs besides the request.
#[derive(Debug, Clone, Default)]
pub struct HeartbeatContext {
    pub api_version: i16,
    pub client_id: String,
    pub client_host: String,
}

/// The assignors of `group.consumer.assignors` Strom has, in the configured order (the first
/// is the default).
pub fn configured_assignors(
    config: &GroupCoordinatorConfig,
) -> Vec<Box<dyn ConsumerGroupPartitionAssignor>> {
    config
        .consumer_assignors
        .iter()
        .filter_map(|n| assignor_by_name(n))
        .collect()
}

fn assignor_by_name(name: &str) -> Option<Box<dyn ConsumerGroupPartitionAssignor>> {
    match name {
        "uniform" => Some(Box::new(UniformAssignor)),
        "range" => Some(Box::new(RangeAssignor)),
        _ => None,
    }
}

/// Kafka's request checks done before the group is looked at
/// (`throwIfConsumerGroupHeartbeatRequestIsInvalid` of GroupCoordinatorService 4.4).
pub fn validate_heartbeat(
    config: &GroupCoordinatorConfig,
    api_version: i16,
    req: &ConsumerGroupHeartbeatRequest,
) -> Result<(), GroupError> {
    let invalid = |m: &str| Err(GroupError::new(ErrorCode::InvalidRequest, m));
    // From v1 the client generates its member id, so it is always required.
    if (api_version >= 1 || req.member_epoch > 0 || req.member_epoch == LEAVE_GROUP_MEMBER_EPOCH)
        && req.member_id.is_empty()
    {
        return invalid("MemberId can't be empty.");
    }
    if req.group_id.is_empty() {
        return invalid("GroupId can't be empty.");
    }
    if req.instance_id.as_ref().is_some_and(|s| s.is_empty()) {
        return invalid("InstanceId can't be empty.");
    }
    if req.rack_id.as_ref().is_some_and(|s| s.is_empty()) {
        return invalid("RackId can't be empty.");
    }
    if req.member_epoch == 0 {
        if req.rebalance_timeout_ms == -1 {
            return invalid("RebalanceTimeoutMs must be provided in first request.");
        }
        if req.topic_partitions.as_ref().is_none_or(|t| !t.is_empty()) {
            return invalid("TopicPartitions must be empty when (re-)joining.");
        }
        if req.subscribed_topic_names.is_none() && req.subscribed_topic_regex.is_none() {
            return invalid(
                "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.",
            );
        }
    } else if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH {
        if req.instance_id.is_none() {
            return invalid("InstanceId can't be null.");
        }
    } else if req.member_epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH {
        return invalid("MemberEpoch is invalid.");
    }
    if let Some(a) = &req.server_assignor {
        let names: Vec<&'static str> = configured_assignors(config)
            .iter()
            .map(|a| a.name())
            .collect();
        if !names.contains(&a.as_str()) {
            return Err(GroupError::new(
                ErrorCode::UnsupportedAssignor,
                format!(
                    "ServerAssignor {} is not supported. Supported assignors: {}.",
                    a.as_str(),
                    names.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

pub(super) fn session_timer_key(group_id: &str, member_id: &str) -> String {
    format!("session-timeout-{group_id}-{member_id}")
}

pub(super) fn rebalance_timer_key(group_id: &str, member_id: &str) -> String {
    format!("rebalance-timeout-{group_id}-{member_id}")
}

/// A classic member of a consumer group must rejoin within its rebalance timeout once told to.
pub(super) fn join_timer_key(group_id: &str, member_id: &str) -> String {
    format!("join-{group_id}-{member_id}")
}

/// A classic member of a consumer group must send SyncGroup within its rebalance timeout.
pub(super) fn sync_timer_key(group_id: &str, member_id: &str) -> String {
    format!("sync-{group_id}-{member_id}")
}

/// Every timer of a member of a consumer group (Kafka's `cancelTimers`).
pub(super) fn cancel_member_timers(env: &ShardEnv, group_id: &str, member_id: &str) {
    env.timer.cancel(&session_timer_key(group_id, member_id));
    env.timer.cancel(&rebalance_timer_key(group_id, member_id));
    env.timer.cancel(&join_timer_key(group_id, member_id));
    env.timer.cancel(&sync_timer_key(group_id, member_id));
}

/// Topic names a regex matches in the image. The whole name must match, as RE2J's `matches()`.
/// Every topic of the image is a candidate, internal ones (`__consumer_offsets`, ...) included:
/// Kafka's `TopicRegexResolver.resolveRegularExpressions` scans all topic names and removes only
/// those the member may not DESCRIBE.
pub(super) fn resolve_regex(
    regex: &str,
    image: &GroupMetadataImage,
) -> Result<BTreeSet<String>, String> {
    let re =
        regex_automata::meta::Regex::new(&format!("^(?:{regex})$")).map_err(|e| e.to_string())?;
    // Authorization hook: once Strom has an authorizer, the matched topics the member's
    // principal may not DESCRIBE are removed here (Kafka's `filterTopicDescribeAuthorizedTopics`);
    // without one every matched topic stays, as in Kafka without `authorizer.class.name`.
    Ok(image
        .topics
        .keys()
        .filter(|n| re.is_match(n.as_str()))
        .cloned()
        .collect())
}

/// Records being made for one group, each applied to a scratch copy as it is added.
pub(super) struct Pending {
    pub(super) scratch: ConsumerGroup,
    pub(super) records: Vec<CoordinatorRecord>,
}

impl Pending {
    pub(super) fn push(&mut self, r: CoordinatorRecord) {
        self.scratch.apply(&r);
        self.records.push(r);
    }
}

fn s(x: &StrBytes) -> String {
    x.as_str().to_string()
}

/// Is the reported ownership a subset of `target`? (A lost response with the bumped epoch is
/// forgiven when the member owns nothing beyond its assignment.)
fn is_subset(owned: Option<&[(Uuid, Vec<i32>)]>, target: &MemberAssignment) -> bool {
    let Some(owned) = owned else { return false };
    owned.iter().all(|(t, ps)| {
        target
            .get(t)
            .is_some_and(|set| ps.iter().all(|p| set.contains(p)))
    })
}

fn check_member_epoch(
    member: &ConsumerGroupMember,
    received: i32,
    owned: Option<&[(Uuid, Vec<i32>)]>,
) -> Result<(), GroupError> {
    let fenced = |rel: &str| {
        Err(GroupError::new(
            ErrorCode::FencedMemberEpoch,
            format!(
                "The consumer group member has a {rel} member epoch ({received}) than the one known by the group coordinator ({}). The member must abandon all its partitions and rejoin.",
                member.member_epoch
            ),
        ))
    };
    if received > member.member_epoch {
        return fenced("greater");
    }
    if received < member.member_epoch
        && (received != member.previous_member_epoch
            || !is_subset(owned, &member.assigned_partitions))
    {
        return fenced("smaller");
    }
    Ok(())
}

impl ConsumerGroups {
    /// One ConsumerGroupHeartbeat (already validated by [`validate_heartbeat`]): the records
    /// to append and the response to give once they are committed.
    pub fn heartbeat(
        &mut self,
        env: &ShardEnv,
        hctx: &HeartbeatContext,
        req: &ConsumerGroupHeartbeatRequest,
    ) -> Result<(Vec<CoordinatorRecord>, ConsumerGroupHeartbeatResponse), GroupError> {
        self.heartbeat_on(env, hctx, req, None)
    }

    /// As [`Self::heartbeat`], against `base` rather than the stored group when given (the
    /// consumer group a classic group is being converted into by this same write).
    pub fn heartbeat_on(
        &mut self,
        env: &ShardEnv,
        hctx: &HeartbeatContext,
        req: &ConsumerGroupHeartbeatRequest,
        base: Option<ConsumerGroup>,
    ) -> Result<(Vec<CoordinatorRecord>, ConsumerGroupHeartbeatResponse), GroupError> {
        let group_id = req.group_id.as_str();
        if req.member_epoch == LEAVE_GROUP_MEMBER_EPOCH
            || req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH
        {
            return self.leave(env, req);
        }
        let now = env.now_ms();
        let image = env.metadata();
        let create = req.member_epoch == 0;
        let group = match base.or_else(|| self.groups.get(&group_id.to_string()).cloned()) {
            Some(g) => g,
            None if create => ConsumerGroup::new(group_id),
            None => {
                return Err(GroupError::new(
                    ErrorCode::GroupIdNotFound,
                    format!("Consumer group {group_id} not found."),
                ))
            }
        };
        let max = env.config.consumer_max_size;
        let req_member_id = req.member_id.as_str();
        if group.members.len() >= max.max(0) as usize
            && (req_member_id.is_empty() || !group.members.contains_key(req_member_id))
        {
            return Err(GroupError::new(
                ErrorCode::GroupMaxSizeReached,
                format!("The consumer group has reached its maximum capacity of {max} members."),
            ));
        }
        let member_id = if req_member_id.is_empty() {
            Uuid::new_v4().to_string()
        } else {
            req_member_id.to_string()
        };
        let owned: Option<Vec<(Uuid, Vec<i32>)>> = req.topic_partitions.as_ref().map(|v| {
            v.iter()
                .map(|t| (t.topic_id, t.partitions.clone()))
                .collect()
        });
        let owned = owned.as_deref();
        let mut p = Pending {
            scratch: group.clone(),
            records: Vec::new(),
        };
        let instance_id = req.instance_id.as_ref().map(s);
        let member = match &instance_id {
            None => match group.members.get(&member_id) {
                Some(m) => {
                    check_member_epoch(m, req.member_epoch, owned)?;
                    m.clone()
                }
                None if create => ConsumerGroupMember::new(member_id.clone()),
                None => {
                    return Err(GroupError::new(
                        ErrorCode::UnknownMemberId,
                        format!("Member {member_id} is not a member of group {group_id}."),
                    ))
                }
            },
            Some(instance) => {
                self.static_member(&group, &member_id, instance, req, owned, &mut p)?
            }
        };

        // 1. The member as the request updates it.
        let mut updated = member.clone();
        if instance_id.is_some() {
            updated.instance_id = instance_id.clone();
        }
        if let Some(r) = &req.rack_id {
            updated.rack_id = Some(s(r));
        }
        if req.rebalance_timeout_ms != -1 {
            updated.rebalance_timeout_ms = req.rebalance_timeout_ms;
        }
        if let Some(a) = &req.server_assignor {
            updated.server_assignor_name = Some(s(a));
        }
        if let Some(names) = &req.subscribed_topic_names {
            updated.subscribed_topic_names = names.iter().map(|n| s(&n.0)).collect();
        }
        if let Some(r) = &req.subscribed_topic_regex {
            updated.subscribed_topic_regex = Some(s(r));
        }
        updated.client_id = hctx.client_id.clone();
        updated.client_host = hctx.client_host.clone();
        // A member heartbeating with the consumer protocol no longer uses the classic one.
        updated.classic = None;

        // A new group must move away from epoch 0.
        let mut bump = p.scratch.group_epoch == 0;
        let subscription_changed = updated.subscription_differs(&member);
        if updated.metadata_differs(&member) || !p.scratch.members.contains_key(&member_id) {
            p.push(updated.metadata_record(group_id));
            bump |= subscription_changed;
        }
        if updated.regex() != member.regex() {
            if let Some(r) = updated.regex() {
                if !p.scratch.resolved_regexes.contains_key(r) {
                    let topics = resolve_regex(r, &image).map_err(|e| {
                        GroupError::new(
                            ErrorCode::InvalidRegularExpression,
                            format!("SubscribedTopicRegex `{r}` is not a valid regular expression: {e}."),
                        )
                    })?;
                    let resolved = ResolvedRegex {
                        topics,
                        version: 1,
                        timestamp: now,
                    };
                    p.push(regex_record(group_id, r, &resolved));
                }
                bump = true;
            }
            if let Some(old) = member.regex() {
                if !p.scratch.regex_in_use(old) && p.scratch.resolved_regexes.contains_key(old) {
                    p.push(regex_tombstone(group_id, old));
                }
                bump = true;
            }
        }
        let group_epoch = bump_group_epoch_if_needed(
            &mut p,
            group_id,
            &member_id,
            bump,
            subscription_changed,
            &image,
        );

        // 2. A new target assignment when the group epoch moved past it.
        let (target_epoch, target) = if group_epoch > p.scratch.assignment_epoch {
            let target = self.update_target_assignment(
                env,
                &group,
                &mut p,
                group_epoch,
                &updated,
                instance_id.as_deref(),
                &image,
                now,
            )?;
            (group_epoch, target)
        } else {
            (
                p.scratch.assignment_epoch,
                group.target_of(&member_id, updated.instance_id.as_deref()),
            )
        };

        // 3. Reconcile the member towards its target.
        let reconciled = if !subscription_changed && updated.is_reconciled_to(target_epoch) {
            updated.clone()
        } else {
            reconcile(
                &p.scratch,
                &image,
                &updated,
                target_epoch,
                &target,
                subscription_changed,
                owned,
            )?
        };
        let is_new = !p.scratch.members.contains_key(&member_id);
        write_reconciled_assignment(env, &mut p, group_id, &updated, &reconciled, is_new);
        schedule_session_timeout(env, group_id, &member_id);

        let mut resp = ConsumerGroupHeartbeatResponse::default()
            .with_member_id(Some(StrBytes::from_string(member_id.clone())))
            .with_member_epoch(reconciled.member_epoch)
            .with_heartbeat_interval_ms(env.config.consumer_heartbeat_interval_ms);
        let full = req.member_epoch == 0
            || (req.rebalance_timeout_ms != -1
                && req.subscribed_topic_names.is_some()
                && req.topic_partitions.is_some());
        if full || reconciled.assigned_partitions != member.assigned_partitions {
            resp = resp.with_assignment(Some(response_assignment(&reconciled.assigned_partitions)));
        }
        Ok((p.records, resp))
    }

    /// The member a static member's heartbeat is for; a rejoin under a new member id replaces
    /// the departed instance (its removal records go to `p`).
    fn static_member(
        &self,
        group: &ConsumerGroup,
        member_id: &str,
        instance: &str,
        req: &ConsumerGroupHeartbeatRequest,
        owned: Option<&[(Uuid, Vec<i32>)]>,
        p: &mut Pending,
    ) -> Result<ConsumerGroupMember, GroupError> {
        let group_id = &group.group_id;
        let existing = group.static_member(instance);
        if req.member_epoch == 0 {
            match existing {
                None => Ok(group
                    .members
                    .get(member_id)
                    .cloned()
                    .unwrap_or_else(|| ConsumerGroupMember::new(member_id))),
                Some(e) => {
                    // Only an instance that left (epoch -2) can be taken over, even by its
                    // own member id; a classic instance can be replaced at any time (it
                    // never sends that epoch).
                    if !e.uses_classic_protocol()
                        && e.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH
                    {
                        return Err(GroupError::new(
                            ErrorCode::UnreleasedInstanceId,
                            format!(
                                "Static member {member_id} with instance id {instance} cannot join the group because the instance id is owned by {} member.",
                                e.member_id
                            ),
                        ));
                    }
                    Ok(replace_member(p, group, group_id, e, member_id))
                }
            }
        } else {
            let e = throw_if_static_member_is_unknown(existing, instance)?;
            throw_if_instance_id_is_fenced(e, member_id, instance)?;
            check_member_epoch(e, req.member_epoch, owned)?;
            Ok(e.clone())
        }
    }

    /// A member leaving (epoch -1), or a static member leaving for now (epoch -2).
    fn leave(
        &mut self,
        env: &ShardEnv,
        req: &ConsumerGroupHeartbeatRequest,
    ) -> Result<(Vec<CoordinatorRecord>, ConsumerGroupHeartbeatResponse), GroupError> {
        let group_id = req.group_id.as_str();
        let member_id = req.member_id.as_str();
        let Some(group) = self.groups.get(&group_id.to_string()) else {
            return Err(GroupError::new(
                ErrorCode::GroupIdNotFound,
                format!("Group {group_id} not found."),
            ));
        };
        let resp = ConsumerGroupHeartbeatResponse::default()
            .with_member_id(Some(StrBytes::from_string(member_id.to_string())))
            .with_member_epoch(req.member_epoch);
        let member = match &req.instance_id {
            None => group.members.get(member_id).ok_or_else(|| {
                GroupError::new(
                    ErrorCode::UnknownMemberId,
                    format!("Member {member_id} is not a member of group {group_id}."),
                )
            })?,
            Some(instance) => {
                let instance = instance.as_str();
                let m = throw_if_static_member_is_unknown(group.static_member(instance), instance)?;
                throw_if_instance_id_is_fenced(m, member_id, instance)?;
                if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH {
                    // The instance keeps its assignment for its return (until its session
                    // expires).
                    let mut left = m.clone();
                    left.member_epoch = LEAVE_GROUP_STATIC_MEMBER_EPOCH;
                    left.partitions_pending_revocation.clear();
                    return Ok((vec![left.current_assignment_record(group_id)], resp));
                }
                m
            }
        };
        let records = fence_records(env, group, &member.member_id);
        Ok((records, resp))
    }

    /// Kafka's `updateTargetAssignment`: the group's target assignment at `group_epoch` with
    /// `updated` in it, and out of it the member a static instance rejoining under a new id
    /// replaced. Its records go to `p`; the member's own target is returned.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn update_target_assignment(
        &self,
        env: &ShardEnv,
        group: &ConsumerGroup,
        p: &mut Pending,
        group_epoch: i32,
        updated: &ConsumerGroupMember,
        instance_id: Option<&str>,
        image: &GroupMetadataImage,
        now: i64,
    ) -> Result<MemberAssignment, GroupError> {
        let member_id = &updated.member_id;
        let assignor = self.assignor_for(env, p.scratch.preferred_assignor().as_deref())?;
        let mut b = TargetAssignmentBuilder::new(
            group,
            &p.scratch,
            group_epoch,
            assignor.as_ref(),
            image,
            now,
        )
        .add_or_update_member(updated.clone());
        if let Some(prev) = instance_id.and_then(|i| group.static_members.get(i)) {
            if prev != member_id {
                b = b.remove_member(prev);
            }
        }
        let res = b.build().map_err(|e| {
            GroupError::new(
                ErrorCode::UnknownServerError,
                format!("Failed to compute a new target assignment for epoch {group_epoch}: {e}."),
            )
        })?;
        for r in res.records {
            p.push(r);
        }
        Ok(res.target.get(member_id).cloned().unwrap_or_default())
    }

    pub(super) fn assignor_for(
        &self,
        env: &ShardEnv,
        preferred: Option<&str>,
    ) -> Result<Box<dyn ConsumerGroupPartitionAssignor>, GroupError> {
        let mut all = configured_assignors(&env.config);
        if let Some(i) = preferred.and_then(|n| all.iter().position(|a| a.name() == n)) {
            return Ok(all.swap_remove(i));
        }
        if all.is_empty() {
            return Err(GroupError::new(
                ErrorCode::UnknownServerError,
                "group.consumer.assignors names no assignor this broker has.",
            ));
        }
        Ok(all.swap_remove(0))
    }

    /// A timer found the member's session (or its revocation) expired: the records removing
    /// it, if it is still the member the timer was set for.
    pub fn fence_on_timeout(
        &self,
        env: &ShardEnv,
        group_id: &str,
        member_id: &str,
        revoking_at_epoch: Option<i32>,
    ) -> Vec<CoordinatorRecord> {
        let Some(group) = self.groups.get(&group_id.to_string()) else {
            return Vec::new();
        };
        let Some(m) = group.members.get(member_id) else {
            return Vec::new();
        };
        if let Some(epoch) = revoking_at_epoch {
            if m.member_epoch != epoch || m.state != MemberState::UnrevokedPartitions {
                return Vec::new();
            }
        }
        tracing::info!(
            group_id,
            member_id,
            revoking = revoking_at_epoch.is_some(),
            "consumer group member fenced by timeout"
        );
        fence_records(env, group, member_id)
    }

    /// The image changed: regexes are resolved again, and groups whose subscribed topics'
    /// metadata changed get a new epoch (their next heartbeat computes the new target
    /// assignment, as in Kafka).
    pub(super) fn metadata_changed(&self, env: &ShardEnv) -> Vec<CoordinatorRecord> {
        let image = env.metadata();
        let now = env.now_ms();
        let mut out = Vec::new();
        let mut ids: Vec<&String> = self.groups.iter().map(|(k, _)| k).collect();
        ids.sort();
        for id in ids {
            let Some(group) = self.groups.get(id) else {
                continue;
            };
            let mut p = Pending {
                scratch: group.clone(),
                records: Vec::new(),
            };
            for (regex, resolved) in &group.resolved_regexes {
                if let Ok(topics) = resolve_regex(regex, &image) {
                    if topics != resolved.topics {
                        let r = ResolvedRegex {
                            topics,
                            version: resolved.version + 1,
                            timestamp: now,
                        };
                        p.push(regex_record(id, regex, &r));
                    }
                }
            }
            if !p.scratch.members.is_empty() {
                let hash = metadata_hash(&p.scratch.subscribed_topics(), &image);
                if hash != p.scratch.metadata_hash {
                    let epoch = p.scratch.group_epoch + 1;
                    p.push(group_epoch_record(id, epoch, hash));
                }
            }
            out.extend(p.records);
        }
        out
    }
}

/// Bumps the group epoch when `bump` is set (the member's subscription changed, a new group)
/// or the metadata hash of the subscribed topics moved, writing the group epoch record; the
/// group epoch after.
pub(super) fn bump_group_epoch_if_needed(
    p: &mut Pending,
    group_id: &str,
    member_id: &str,
    mut bump: bool,
    subscription_changed: bool,
    image: &GroupMetadataImage,
) -> i32 {
    let hash = metadata_hash(&p.scratch.subscribed_topics(), image);
    bump |= hash != p.scratch.metadata_hash;
    let mut group_epoch = p.scratch.group_epoch;
    if bump {
        tracing::debug!(
            group = group_id,
            member = member_id,
            subscription_changed,
            old_hash = p.scratch.metadata_hash,
            new_hash = hash,
            "consumer group epoch bump"
        );
        group_epoch += 1;
        p.push(group_epoch_record(group_id, group_epoch, hash));
    }
    group_epoch
}

/// The member reconciled towards `target` at `target_epoch` with what it says it owns
/// (Kafka's `CurrentAssignmentBuilder` run of `maybeReconcile`).
pub(super) fn reconcile(
    scratch: &ConsumerGroup,
    image: &GroupMetadataImage,
    updated: &ConsumerGroupMember,
    target_epoch: i32,
    target: &MemberAssignment,
    subscription_changed: bool,
    owned: Option<&[(Uuid, Vec<i32>)]>,
) -> Result<ConsumerGroupMember, GroupError> {
    let epoch_of = |t: Uuid, part: i32| scratch.current_partition_epoch(t, part);
    let subscribed: BTreeSet<Uuid> = scratch
        .member_topics(updated)
        .iter()
        .filter_map(|n| image.topic(n).map(|t| t.id))
        .collect();
    CurrentAssignmentBuilder::new(
        updated,
        target_epoch,
        target,
        &subscribed,
        subscription_changed,
        &epoch_of,
        owned,
    )
    .build()
    .map_err(|e| GroupError::new(ErrorCode::FencedMemberEpoch, e.to_string()))
}

/// Writes the reconciled member's assignment when reconciling changed it (or `always`), and
/// starts its rebalance timeout while it has partitions to revoke, cancels it otherwise (the
/// end of Kafka's `maybeReconcile`).
pub(super) fn write_reconciled_assignment(
    env: &ShardEnv,
    p: &mut Pending,
    group_id: &str,
    updated: &ConsumerGroupMember,
    reconciled: &ConsumerGroupMember,
    always: bool,
) {
    if reconciled != updated || always {
        p.push(reconciled.current_assignment_record(group_id));
        if reconciled.state == MemberState::UnrevokedPartitions {
            schedule_rebalance_timeout(env, group_id, reconciled);
        } else {
            env.timer
                .cancel(&rebalance_timer_key(group_id, &reconciled.member_id));
        }
    }
}

/// Kafka's `replaceMember`: the departed static instance `e` under the new `member_id`, with
/// its subscription, assignment and target; the records removing `e` and adding the new
/// member go to `p`.
pub(super) fn replace_member(
    p: &mut Pending,
    group: &ConsumerGroup,
    group_id: &str,
    e: &ConsumerGroupMember,
    member_id: &str,
) -> ConsumerGroupMember {
    let mut m = e.clone();
    m.member_id = member_id.to_string();
    m.member_epoch = 0;
    m.previous_member_epoch = 0;
    let target = group
        .target_assignment
        .get(&e.member_id)
        .cloned()
        .unwrap_or_default();
    for r in remove_member_records(group_id, &e.member_id) {
        p.push(r);
    }
    p.push(m.metadata_record(group_id));
    p.push(target_assignment_record(group_id, member_id, &target));
    p.push(m.current_assignment_record(group_id));
    m
}

/// Kafka's `throwIfStaticMemberIsUnknown`.
pub(super) fn throw_if_static_member_is_unknown<'a>(
    existing: Option<&'a ConsumerGroupMember>,
    instance: &str,
) -> Result<&'a ConsumerGroupMember, GroupError> {
    existing.ok_or_else(|| {
        GroupError::new(
            ErrorCode::UnknownMemberId,
            format!("Instance id {instance} is unknown."),
        )
    })
}

/// Kafka's `throwIfInstanceIdIsFenced`: the instance belongs to another member id.
pub(super) fn throw_if_instance_id_is_fenced(
    m: &ConsumerGroupMember,
    member_id: &str,
    instance: &str,
) -> Result<(), GroupError> {
    if m.member_id != member_id {
        return Err(GroupError::new(
            ErrorCode::FencedInstanceId,
            format!(
                "Static member {member_id} with instance id {instance} was fenced by member {}.",
                m.member_id
            ),
        ));
    }
    Ok(())
}

/// The member's removal, in Kafka's order (assignment, target, then the member).
pub(super) fn remove_member_records(group_id: &str, member_id: &str) -> Vec<CoordinatorRecord> {
    vec![
        current_assignment_tombstone(group_id, member_id),
        target_assignment_tombstone(group_id, member_id),
        member_metadata_tombstone(group_id, member_id),
    ]
}

/// Removes a member and bumps the group epoch (Kafka's `consumerGroupFenceMember`); the next
/// heartbeat of another member computes the assignment without it.
pub(super) fn fence_records(
    env: &ShardEnv,
    group: &ConsumerGroup,
    member_id: &str,
) -> Vec<CoordinatorRecord> {
    let group_id = &group.group_id;
    let mut p = Pending {
        scratch: group.clone(),
        records: Vec::new(),
    };
    let regex = group
        .members
        .get(member_id)
        .and_then(|m| m.regex().map(str::to_string));
    for r in remove_member_records(group_id, member_id) {
        p.push(r);
    }
    if let Some(r) = regex {
        if !p.scratch.regex_in_use(&r) && p.scratch.resolved_regexes.contains_key(&r) {
            p.push(regex_tombstone(group_id, &r));
        }
    }
    let hash = metadata_hash(&p.scratch.subscribed_topics(), &env.metadata());
    let epoch = p.scratch.group_epoch + 1;
    p.push(group_epoch_record(group_id, epoch, hash));
    cancel_member_timers(env, group_id, member_id);
    p.records
}

pub(super) fn schedule_session_timeout(env: &ShardEnv, group_id: &str, member_id: &str) {
    schedule_session_timeout_ms(
        env,
        group_id,
        member_id,
        env.config.consumer_session_timeout_ms,
    );
}

/// The member's session expires in `ms` (classic members have their own session timeout).
pub(super) fn schedule_session_timeout_ms(
    env: &ShardEnv,
    group_id: &str,
    member_id: &str,
    ms: i32,
) {
    schedule_fence(
        env,
        session_timer_key(group_id, member_id),
        ms,
        group_id,
        member_id,
        None,
    );
}

/// Fences the member when the timer under `key` fires after `ms` (if it is still the member the
/// timer was set for, at `revoking_at_epoch` if given); the last consumer-protocol member
/// fenced may downgrade the group.
pub(super) fn schedule_fence(
    env: &ShardEnv,
    key: String,
    ms: i32,
    group_id: &str,
    member_id: &str,
    revoking_at_epoch: Option<i32>,
) {
    let (g, m) = (group_id.to_string(), member_id.to_string());
    env.timer.schedule(
        key,
        Duration::from_millis(ms.max(0) as u64),
        move |shard: &mut GroupCoordinatorShard, ctx| {
            let mut records =
                shard
                    .consumer
                    .fence_on_timeout(&shard.env, &g, &m, revoking_at_epoch);
            if !records.is_empty() {
                if let Some(r) = super::migration::maybe_downgrade(shard, ctx.offset, &g, &m) {
                    records = r;
                }
            }
            Ok(TimerResult {
                records,
                response: None,
            })
        },
    );
}

pub(super) fn schedule_rebalance_timeout(
    env: &ShardEnv,
    group_id: &str,
    member: &ConsumerGroupMember,
) {
    schedule_fence(
        env,
        rebalance_timer_key(group_id, &member.member_id),
        member.rebalance_timeout_ms,
        group_id,
        &member.member_id,
        Some(member.member_epoch),
    );
}

pub(super) fn response_assignment(a: &MemberAssignment) -> Assignment {
    Assignment::default().with_topic_partitions(
        a.iter()
            .map(|(t, ps)| {
                ResponseTopicPartitions::default()
                    .with_topic_id(*t)
                    .with_partitions(ps.iter().copied().collect())
            })
            .collect(),
    )
}

//! Classic members inside a consumer group (Kafka's `classicGroupJoinToConsumerGroup`,
//! `classicGroupSyncToConsumerGroup`, `classicGroupHeartbeatToConsumerGroup`,
//! `classicGroupLeaveToConsumerGroup`).
//!
//! A classic member is a consumer group member like any other, with its JoinGroup protocols
//! kept in its metadata record: its subscription (and what it owns) is read from its
//! `ConsumerProtocolSubscription`, the server-side assignor computes its target, and JoinGroup
//! reconciles it exactly as a heartbeat reconciles a consumer-protocol member. The generation
//! it is given is its member epoch; SyncGroup hands out its assigned partitions as a
//! `ConsumerProtocolAssignment`; Heartbeat answers REBALANCE_IN_PROGRESS when it must rejoin to
//! move on (the group epoch moved, it must revoke, or what it waits for was released).

use bytes::Bytes;
use strom_protocol::kafka::messages::{JoinGroupResponse, SyncGroupResponse};
use strom_protocol::kafka::protocol::StrBytes;
use strom_protocol::ErrorCode;
use uuid::Uuid;

use super::classic_protocol;
use super::group::*;
use super::heartbeat::{
    bump_group_epoch_if_needed, cancel_member_timers, join_timer_key, reconcile,
    remove_member_records, replace_member, schedule_fence, schedule_session_timeout_ms,
    sync_timer_key, throw_if_instance_id_is_fenced, throw_if_static_member_is_unknown,
    write_reconciled_assignment, GroupError, Pending,
};
use super::member::{ClassicMemberInfo, ConsumerGroupMember, MemberState};
use super::ConsumerGroups;
use crate::classic::group::CONSUMER_PROTOCOL_TYPE;
use crate::classic::{JoinParams, SyncParams};
use crate::config::MigrationPolicy;
use crate::records::CoordinatorRecord;
use crate::shard::ShardEnv;

/// What a classic member's JoinGroup to a consumer group comes to.
pub enum ClassicJoin {
    /// A dynamic member without an id (JoinGroup v4+) is given one to join again with.
    MemberIdRequired(String),
    /// The member joined: the records, and the response to give once they are committed.
    Joined {
        records: Vec<CoordinatorRecord>,
        response: JoinGroupResponse,
    },
}

fn err(code: ErrorCode, message: String) -> GroupError {
    GroupError::new(code, message)
}

fn sb(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

impl ConsumerGroup {
    /// Kafka's `supportsClassicProtocols`: the `consumer` protocol type, and a protocol every
    /// classic member supports.
    pub fn supports_classic_protocols(&self, protocol_type: &str, names: &[&str]) -> bool {
        if protocol_type != CONSUMER_PROTOCOL_TYPE {
            return false;
        }
        if self.members.is_empty() {
            return !names.is_empty();
        }
        let classic: Vec<&ClassicMemberInfo> = self
            .members
            .values()
            .filter_map(|m| m.classic.as_ref())
            .collect();
        names.iter().any(|n| {
            classic
                .iter()
                .all(|c| c.protocols.iter().any(|p| p.name == *n))
        })
    }

    /// Kafka's `waitingOnUnreleasedPartition`: a partition of the member's target is still
    /// owned by another member.
    pub fn waiting_on_unreleased_partition(&self, m: &ConsumerGroupMember) -> bool {
        if m.state != MemberState::UnreleasedPartitions {
            return false;
        }
        let Some(target) = self.target_assignment.get(&m.member_id) else {
            return false;
        };
        target.iter().any(|(t, ps)| {
            ps.iter().any(|p| {
                !m.assigned_partitions
                    .get(t)
                    .is_some_and(|owned| owned.contains(p))
                    && self.current_partition_epoch(*t, *p) != -1
            })
        })
    }

    /// Kafka's `validateConsumerGroupMember`, and that the member uses the classic protocol.
    fn classic_member(
        &self,
        member_id: &str,
        instance_id: Option<&str>,
    ) -> Result<&ConsumerGroupMember, GroupError> {
        let gid = &self.group_id;
        let m = match instance_id {
            None => self.members.get(member_id).ok_or_else(|| {
                err(
                    ErrorCode::UnknownMemberId,
                    format!("Member {member_id} is not a member of group {gid}."),
                )
            })?,
            Some(i) => {
                let m = self.static_member(i).ok_or_else(|| {
                    err(
                        ErrorCode::UnknownMemberId,
                        format!("Member with instance id {i} is not a member of group {gid}."),
                    )
                })?;
                throw_if_instance_id_is_fenced(m, member_id, i)?;
                m
            }
        };
        if !m.uses_classic_protocol() {
            return Err(err(
                ErrorCode::UnknownMemberId,
                format!("Member {} does not use the classic protocol.", m.member_id),
            ));
        }
        Ok(m)
    }
}

fn check_generation(m: &ConsumerGroupMember, generation: i32) -> Result<(), GroupError> {
    if m.member_epoch != generation {
        return Err(err(
            ErrorCode::IllegalGeneration,
            format!(
                "The request generation id {generation} is not equal to the member epoch {} of member {}.",
                m.member_epoch, m.member_id
            ),
        ));
    }
    Ok(())
}

impl ConsumerGroups {
    /// JoinGroup of a classic member to a non-empty consumer group.
    pub fn classic_join(
        &mut self,
        env: &ShardEnv,
        p: &JoinParams,
    ) -> Result<ClassicJoin, GroupError> {
        let gid = p.group_id.as_str();
        if env.config.migration_policy == MigrationPolicy::Disabled {
            return Err(err(
                ErrorCode::InconsistentGroupProtocol,
                format!("Cannot join the consumer group {gid} with the classic protocol because the group migration is disabled."),
            ));
        }
        let group = self.group(gid).cloned().ok_or_else(|| {
            err(
                ErrorCode::GroupIdNotFound,
                format!("Group {gid} not found."),
            )
        })?;
        let unknown = p.member_id.is_empty();
        let member_id = if unknown {
            Uuid::new_v4().to_string()
        } else {
            p.member_id.clone()
        };
        let max = env.config.consumer_max_size.max(0) as usize;
        if group.members.len() >= max && !group.members.contains_key(&member_id) {
            return Err(err(
                ErrorCode::GroupMaxSizeReached,
                format!("The consumer group has reached its maximum capacity of {max} members."),
            ));
        }
        let names: Vec<&str> = p.protocols.iter().map(|x| x.name.as_str()).collect();
        if !group.supports_classic_protocols(&p.protocol_type, &names) {
            return Err(err(
                ErrorCode::InconsistentGroupProtocol,
                format!("Member {member_id}'s protocols are not supported."),
            ));
        }
        if unknown && p.group_instance_id.is_none() && p.api_version >= 4 {
            return Ok(ClassicJoin::MemberIdRequired(member_id));
        }
        let subscription = p
            .protocols
            .first()
            .ok_or(classic_protocol::MalformedProtocol("protocols"))
            .and_then(|x| classic_protocol::decode_subscription(&x.metadata))
            .map_err(|e| {
                err(
                    ErrorCode::InconsistentGroupProtocol,
                    format!("Malformed embedded consumer protocol in subscription deserialization: {e}."),
                )
            })?;
        let now = env.now_ms();
        let image = env.metadata();
        let mut pend = Pending {
            scratch: group.clone(),
            records: Vec::new(),
        };
        // The member as it is, or as it starts (a static instance rejoining under a new id
        // takes over the departed member, as Kafka's `replaceMember`).
        let member = match &p.group_instance_id {
            None => group
                .members
                .get(&member_id)
                .cloned()
                .unwrap_or_else(|| ConsumerGroupMember::new(member_id.clone())),
            Some(i) if unknown => match group.static_member(i) {
                None => ConsumerGroupMember::new(member_id.clone()),
                Some(e) => {
                    cancel_member_timers(env, gid, &e.member_id);
                    replace_member(&mut pend, &group, gid, e, &member_id)
                }
            },
            Some(i) => {
                let e = throw_if_static_member_is_unknown(group.static_member(i), i)?;
                throw_if_instance_id_is_fenced(e, &member_id, i)?;
                e.clone()
            }
        };

        // 1. The member as the JoinGroup updates it.
        let mut updated = member.clone();
        if p.group_instance_id.is_some() {
            updated.instance_id = p.group_instance_id.clone();
        }
        if let Some(r) = &subscription.rack_id {
            updated.rack_id = Some(r.clone());
        }
        if p.rebalance_timeout_ms != -1 {
            updated.rebalance_timeout_ms = p.rebalance_timeout_ms;
        }
        updated.subscribed_topic_names = subscription.topics.iter().cloned().collect();
        updated.client_id = p.client_id.clone();
        updated.client_host = p.client_host.clone();
        updated.classic = Some(ClassicMemberInfo {
            session_timeout_ms: p.session_timeout_ms,
            protocols: p.protocols.clone(),
        });
        let is_new = !pend.scratch.members.contains_key(&member_id);
        let subscription_changed = updated.subscription_differs(&member);
        let mut bump = pend.scratch.group_epoch == 0;
        if updated.metadata_differs(&member) || is_new {
            pend.push(updated.metadata_record(gid));
            bump |= subscription_changed || is_new;
        }
        let group_epoch = bump_group_epoch_if_needed(
            &mut pend,
            gid,
            &member_id,
            bump,
            subscription_changed,
            &image,
        );

        // 2. A new target assignment when the group epoch moved past it.
        let (target_epoch, target) = if group_epoch > pend.scratch.assignment_epoch {
            let target = self.update_target_assignment(
                env,
                &group,
                &mut pend,
                group_epoch,
                &updated,
                p.group_instance_id.as_deref(),
                &image,
                now,
            )?;
            (group_epoch, target)
        } else {
            (
                pend.scratch.assignment_epoch,
                pend.scratch
                    .target_of(&member_id, updated.instance_id.as_deref()),
            )
        };

        // 3. Reconcile towards the target with what the member says it owns.
        let owned = classic_protocol::owned_list(&subscription.owned_partitions, &image);
        let reconciled = reconcile(
            &pend.scratch,
            &image,
            &updated,
            target_epoch,
            &target,
            subscription_changed,
            Some(&owned),
        )?;
        write_reconciled_assignment(env, &mut pend, gid, &updated, &reconciled, is_new);
        // The member answered; its session, and the SyncGroup it must send, run from now.
        env.timer.cancel(&join_timer_key(gid, &member_id));
        schedule_session_timeout_ms(env, gid, &member_id, p.session_timeout_ms);
        schedule_fence(
            env,
            sync_timer_key(gid, &member_id),
            p.rebalance_timeout_ms,
            gid,
            &member_id,
            None,
        );
        let protocol = updated
            .classic
            .as_ref()
            .map_or(String::new(), |c| c.protocol_name().to_string());
        let response = JoinGroupResponse::default()
            .with_member_id(sb(&member_id))
            .with_generation_id(reconciled.member_epoch)
            .with_protocol_type(Some(sb(CONSUMER_PROTOCOL_TYPE)))
            .with_protocol_name(Some(sb(&protocol)))
            .with_leader(sb(""));
        Ok(ClassicJoin::Joined {
            records: pend.records,
            response,
        })
    }

    /// SyncGroup of a classic member of a consumer group: its assigned partitions.
    pub fn classic_sync(
        &self,
        env: &ShardEnv,
        p: &SyncParams,
    ) -> Result<SyncGroupResponse, GroupError> {
        let gid = p.group_id.as_str();
        let g = self.group(gid).ok_or_else(|| {
            err(
                ErrorCode::UnknownMemberId,
                format!("Group {gid} not found."),
            )
        })?;
        let m = g.classic_member(&p.member_id, p.group_instance_id.as_deref())?;
        check_generation(m, p.generation_id)?;
        let c = m.classic.as_ref().expect("a classic member");
        let name = c.protocol_name();
        if p.protocol_type
            .as_deref()
            .is_some_and(|t| t != CONSUMER_PROTOCOL_TYPE)
        {
            return Err(err(
                ErrorCode::InconsistentGroupProtocol,
                format!("The protocol type {:?} from member {} request is not equal to the group protocol type {CONSUMER_PROTOCOL_TYPE}.", p.protocol_type, m.member_id),
            ));
        }
        if p.protocol_name.as_deref().is_some_and(|n| n != name) {
            return Err(err(
                ErrorCode::InconsistentGroupProtocol,
                format!("The protocol name {:?} from member {} request is not equal to the protocol name {name} returned in the join response.", p.protocol_name, m.member_id),
            ));
        }
        // A rebalance started since it joined: it must rejoin, unless it still has to revoke
        // (it rejoins on its own once done).
        if g.group_epoch > m.member_epoch && m.state != MemberState::UnrevokedPartitions {
            schedule_join_timeout_if_absent(env, gid, m);
            return Err(err(
                ErrorCode::RebalanceInProgress,
                format!("A new rebalance is triggered in group {gid} and member {} should rejoin to catch up.", m.member_id),
            ));
        }
        env.timer.cancel(&sync_timer_key(gid, &m.member_id));
        schedule_session_timeout_ms(env, gid, &m.member_id, c.session_timeout_ms);
        let version = c
            .protocols
            .first()
            .and_then(|x| classic_protocol::version(&x.metadata).ok())
            .unwrap_or(0);
        let assignment: Bytes =
            classic_protocol::encode_assignment(&m.assigned_partitions, &env.metadata(), version);
        Ok(SyncGroupResponse::default()
            .with_protocol_type(p.protocol_type.as_deref().map(sb))
            .with_protocol_name(p.protocol_name.as_deref().map(sb))
            .with_assignment(assignment))
    }

    /// Heartbeat of a classic member of a consumer group: REBALANCE_IN_PROGRESS when it must
    /// rejoin (the group epoch moved past it, it must revoke, or the partitions it waited for
    /// were released).
    pub fn classic_heartbeat(
        &self,
        env: &ShardEnv,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
    ) -> Result<(), ErrorCode> {
        let g = self.group(group_id).ok_or(ErrorCode::UnknownMemberId)?;
        let m = g
            .classic_member(member_id, instance_id)
            .map_err(|e| e.code)?;
        check_generation(m, generation).map_err(|e| e.code)?;
        let session = m.classic.as_ref().map_or(0, |c| c.session_timeout_ms);
        schedule_session_timeout_ms(env, group_id, &m.member_id, session);
        if m.member_epoch < g.group_epoch
            || m.state == MemberState::UnrevokedPartitions
            || (m.state == MemberState::UnreleasedPartitions
                && !g.waiting_on_unreleased_partition(m))
        {
            schedule_join_timeout_if_absent(env, group_id, m);
            return Err(ErrorCode::RebalanceInProgress);
        }
        Ok(())
    }

    /// LeaveGroup of classic members of a consumer group: each member's outcome (by id or
    /// instance id) and the records removing those that left, with one group epoch bump.
    pub fn classic_leave(
        &self,
        env: &ShardEnv,
        group_id: &str,
        members: &[(String, Option<String>)],
    ) -> Result<(Vec<Option<ErrorCode>>, Vec<CoordinatorRecord>), ErrorCode> {
        let g = self.group(group_id).ok_or(ErrorCode::UnknownMemberId)?;
        let mut pend = Pending {
            scratch: g.clone(),
            records: Vec::new(),
        };
        let mut codes = Vec::with_capacity(members.len());
        for (member_id, instance_id) in members {
            let found = match instance_id {
                None => g.classic_member(member_id, None),
                Some(i) => match g.static_member(i) {
                    None => Err(err(
                        ErrorCode::UnknownMemberId,
                        format!("Instance id {i} is unknown."),
                    )),
                    // An admin removes a static member by instance id alone.
                    Some(m) if member_id.is_empty() => g.classic_member(&m.member_id, Some(i)),
                    Some(_) => g.classic_member(member_id, Some(i)),
                },
            };
            match found {
                Ok(m) if pend.scratch.members.contains_key(&m.member_id) => {
                    for r in remove_member_records(group_id, &m.member_id) {
                        pend.push(r);
                    }
                    cancel_member_timers(env, group_id, &m.member_id);
                    codes.push(None);
                }
                // Named twice: already gone.
                Ok(_) => codes.push(Some(ErrorCode::UnknownMemberId)),
                Err(e) => codes.push(Some(e.code)),
            }
        }
        if !pend.records.is_empty() {
            let hash = metadata_hash(&pend.scratch.subscribed_topics(), &env.metadata());
            let epoch = pend.scratch.group_epoch + 1;
            pend.push(group_epoch_record(group_id, epoch, hash));
        }
        Ok((codes, pend.records))
    }
}

/// A classic member told to rejoin is fenced if it does not within its rebalance timeout
/// (Kafka's `scheduleConsumerGroupJoinTimeoutIfAbsent`).
fn schedule_join_timeout_if_absent(env: &ShardEnv, group_id: &str, m: &ConsumerGroupMember) {
    let key = join_timer_key(group_id, &m.member_id);
    if !env.timer.is_scheduled(&key) {
        schedule_fence(
            env,
            key,
            m.rebalance_timeout_ms,
            group_id,
            &m.member_id,
            None,
        );
    }
}

//! The classic group APIs: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, DescribeGroups,
//! ListGroups (Kafka's `GroupCoordinatorService` methods of the same names).
//!
//! JoinGroup and SyncGroup are long polls: the write hands the shard a oneshot sender that the
//! group state machine answers when the rebalance gets there; the write itself only makes the
//! request's own records durable. An answer that depends on records being committed is given
//! from an after-commit step the state machine returns; it runs whether the append succeeded or
//! failed.

use std::sync::Arc;

use parking_lot::Mutex;
use strom_coordinator_common::runtime::{AfterCommit, CoordinatorError, WriteResult};
use strom_protocol::kafka::messages::describe_groups_response::DescribedGroup;
use strom_protocol::kafka::messages::leave_group_response::MemberResponse;
use strom_protocol::kafka::messages::list_groups_response::ListedGroup as ListedGroupRow;
use strom_protocol::kafka::messages::*;
use strom_protocol::ErrorCode;
use tokio::sync::oneshot;

use super::{GroupCoordinatorService, GroupRequestContext};
use crate::classic::responses::{join_error, sync_error};
use crate::classic::{JoinParams, Outcome, Protocol, SyncParams};
use crate::consumer::classic_members::ClassicJoin;
use crate::shard::GroupType;

fn st(s: &str) -> strom_protocol::kafka::protocol::StrBytes {
    strom_protocol::kafka::protocol::StrBytes::from_string(s.to_string())
}

/// Where a write's after-commit step waits for the write's result (a failed write returns no
/// response, so the step cannot travel in it).
type AfterSlot = Arc<Mutex<Option<AfterCommit>>>;

fn run_after(slot: &AfterSlot, r: &Result<(), CoordinatorError>) {
    if let Some(after) = slot.lock().take() {
        after(r.clone());
    }
}

/// JoinGroup of a classic member to a non-empty consumer group: answered once its records are
/// committed.
fn join_to_consumer_group(
    shard: &mut crate::shard::GroupCoordinatorShard,
    params: JoinParams,
    tx: oneshot::Sender<JoinGroupResponse>,
) -> Outcome {
    match shard.consumer.classic_join(&shard.env, &params) {
        Err(e) => {
            let _ = tx.send(join_error(&params.member_id, e.code));
            Outcome::none()
        }
        Ok(ClassicJoin::MemberIdRequired(id)) => {
            let _ = tx.send(join_error(&id, ErrorCode::MemberIdRequired));
            Outcome::none()
        }
        Ok(ClassicJoin::Joined { records, response }) => Outcome {
            records,
            after: Some(Box::new(move |r| {
                if r.is_ok() {
                    let _ = tx.send(response);
                }
            })),
        },
    }
}

impl GroupCoordinatorService {
    /// Writes an `Outcome` of the classic state machine, running its after-commit step with the
    /// append's result.
    async fn write_classic(
        &self,
        group_id: &str,
        op: impl FnOnce(&mut crate::shard::GroupCoordinatorShard, i64) -> Outcome + Send + 'static,
    ) -> Result<(), CoordinatorError> {
        let slot: AfterSlot = Arc::new(Mutex::new(None));
        let s2 = slot.clone();
        let r = self
            .write(group_id, move |shard, ctx| {
                let out = op(shard, ctx.offset);
                *s2.lock() = out.after;
                Ok(WriteResult {
                    records: out.records,
                    response: (),
                })
            })
            .await;
        run_after(&slot, &r);
        r
    }

    pub async fn join_group(
        &self,
        ctx: &GroupRequestContext,
        req: JoinGroupRequest,
    ) -> JoinGroupResponse {
        let group_id = req.group_id.0.to_string();
        let member_id = req.member_id.to_string();
        if group_id.is_empty() {
            return join_error(&member_id, ErrorCode::InvalidGroupId);
        }
        let cfg = self.config();
        if req.session_timeout_ms < cfg.min_session_timeout_ms
            || req.session_timeout_ms > cfg.max_session_timeout_ms
        {
            return join_error(&member_id, ErrorCode::InvalidSessionTimeout);
        }
        let params = JoinParams {
            group_id: group_id.clone(),
            member_id: member_id.clone(),
            group_instance_id: req.group_instance_id.as_ref().map(|s| s.to_string()),
            protocol_type: req.protocol_type.to_string(),
            protocols: req
                .protocols
                .iter()
                .map(|p| Protocol {
                    name: p.name.to_string(),
                    metadata: p.metadata.clone(),
                })
                .collect(),
            session_timeout_ms: req.session_timeout_ms,
            // v0 has no rebalance timeout: it is the session timeout.
            rebalance_timeout_ms: if ctx.api_version == 0 {
                req.session_timeout_ms
            } else {
                req.rebalance_timeout_ms
            },
            client_id: ctx.client_id.clone(),
            client_host: ctx.client_host.clone(),
            api_version: ctx.api_version,
        };
        let (tx, mut rx) = oneshot::channel();
        let r = self
            .write_classic(&group_id, move |shard, at| {
                let gid = params.group_id.clone();
                let consumer_empty = shard.consumer.group(&gid).map(|g| g.members.is_empty());
                match consumer_empty {
                    Some(false) => join_to_consumer_group(shard, params, tx),
                    Some(true) if params.member_id.is_empty() => {
                        // An empty consumer group is replaced by the classic group this join
                        // creates (Kafka's `maybeDeleteEmptyConsumerGroup`).
                        let mut records = shard
                            .consumer
                            .deletion_records(&shard.env, &gid)
                            .unwrap_or_default();
                        let out = shard.classic.join(&shard.env, at, params, tx);
                        records.extend(out.records);
                        Outcome {
                            records,
                            after: out.after,
                        }
                    }
                    Some(true) => {
                        let _ = tx.send(join_error(&params.member_id, ErrorCode::UnknownMemberId));
                        Outcome::none()
                    }
                    None => shard.classic.join(&shard.env, at, params, tx),
                }
            })
            .await;
        let resp = match r {
            Err(e) => rx.try_recv().unwrap_or_else(|_| join_error("", e.code())),
            Ok(()) => rx
                .await
                .unwrap_or_else(|_| join_error(&member_id, ErrorCode::NotCoordinator)),
        };
        if ctx.api_version < 7 && resp.protocol_name.is_none() {
            // The protocol name is nullable from v7 only; Kafka sends "" to older clients.
            resp.with_protocol_name(Some(st("")))
        } else {
            resp
        }
    }

    pub async fn sync_group(
        &self,
        _ctx: &GroupRequestContext,
        req: SyncGroupRequest,
    ) -> SyncGroupResponse {
        let group_id = req.group_id.0.to_string();
        if group_id.is_empty() {
            return sync_error(ErrorCode::InvalidGroupId);
        }
        let params = SyncParams {
            group_id: group_id.clone(),
            generation_id: req.generation_id,
            member_id: req.member_id.to_string(),
            group_instance_id: req.group_instance_id.as_ref().map(|s| s.to_string()),
            protocol_type: req.protocol_type.as_ref().map(|s| s.to_string()),
            protocol_name: req.protocol_name.as_ref().map(|s| s.to_string()),
            assignments: req
                .assignments
                .iter()
                .map(|a| (a.member_id.to_string(), a.assignment.clone()))
                .collect(),
        };
        let (tx, mut rx) = oneshot::channel();
        let r = self
            .write_classic(&group_id, move |shard, at| {
                if shard.group_type(&params.group_id) == Some(GroupType::Consumer) {
                    let _ = tx.send(
                        shard
                            .consumer
                            .classic_sync(&shard.env, &params)
                            .unwrap_or_else(|e| sync_error(e.code)),
                    );
                    return Outcome::none();
                }
                shard.classic.sync(&shard.env, at, params, tx)
            })
            .await;
        match r {
            Err(e) => rx.try_recv().unwrap_or_else(|_| sync_error(e.code())),
            Ok(()) => rx
                .await
                .unwrap_or_else(|_| sync_error(ErrorCode::NotCoordinator)),
        }
    }

    pub async fn heartbeat(
        &self,
        _ctx: &GroupRequestContext,
        req: HeartbeatRequest,
    ) -> HeartbeatResponse {
        let group_id = req.group_id.0.to_string();
        if group_id.is_empty() {
            return HeartbeatResponse::default().with_error_code(ErrorCode::InvalidGroupId.code());
        }
        let member_id = req.member_id.to_string();
        let instance_id = req.group_instance_id.as_ref().map(|s| s.to_string());
        let generation = req.generation_id;
        let r = self
            .write(&group_id.clone(), move |shard, _ctx| {
                let code = if shard.group_type(&group_id) == Some(GroupType::Consumer) {
                    shard.consumer.classic_heartbeat(
                        &shard.env,
                        &group_id,
                        &member_id,
                        instance_id.as_deref(),
                        generation,
                    )
                } else {
                    shard.classic.heartbeat(
                        &shard.env,
                        &group_id,
                        &member_id,
                        instance_id.as_deref(),
                        generation,
                    )
                };
                Ok(WriteResult {
                    records: Vec::new(),
                    response: code,
                })
            })
            .await;
        let code = match r {
            Ok(Ok(())) => 0,
            Ok(Err(code)) => code.code(),
            Err(e) => e.code().code(),
        };
        HeartbeatResponse::default().with_error_code(code)
    }

    pub async fn leave_group(
        &self,
        ctx: &GroupRequestContext,
        req: LeaveGroupRequest,
    ) -> LeaveGroupResponse {
        let group_id = req.group_id.0.to_string();
        // v0-2 name one member by id; v3+ a batch by id or group.instance.id.
        let members: Vec<(String, Option<String>)> = if ctx.api_version < 3 {
            vec![(req.member_id.to_string(), None)]
        } else {
            req.members
                .iter()
                .map(|m| {
                    (
                        m.member_id.to_string(),
                        m.group_instance_id.as_ref().map(|s| s.to_string()),
                    )
                })
                .collect()
        };
        let top = |code: ErrorCode| LeaveGroupResponse::default().with_error_code(code.code());
        if group_id.is_empty() {
            return top(ErrorCode::InvalidGroupId);
        }
        let slot: AfterSlot = Arc::new(Mutex::new(None));
        let s2 = slot.clone();
        let ms = members.clone();
        let r = self
            .write(&group_id.clone(), move |shard, _ctx| {
                let res = if shard.group_type(&group_id) == Some(GroupType::Consumer) {
                    shard
                        .consumer
                        .classic_leave(&shard.env, &group_id, &ms)
                        .map(|(codes, records)| {
                            (
                                codes,
                                Outcome {
                                    records,
                                    after: None,
                                },
                            )
                        })
                } else {
                    shard.classic.leave(&shard.env, &group_id, &ms)
                };
                let (response, records) = match res {
                    Ok((codes, out)) => {
                        *s2.lock() = out.after;
                        (Ok(codes), out.records)
                    }
                    Err(code) => (Err(code), Vec::new()),
                };
                Ok(WriteResult { records, response })
            })
            .await;
        run_after(&slot, &r.as_ref().map(|_| ()).map_err(|e| e.clone()));
        let codes = match r {
            Err(e) => return top(e.code()),
            Ok(Err(code)) => return top(code),
            Ok(Ok(codes)) => codes,
        };
        if ctx.api_version < 3 {
            // One member, its error as the response's.
            let code = codes.first().copied().flatten().map_or(0, |c| c.code());
            return LeaveGroupResponse::default().with_error_code(code);
        }
        LeaveGroupResponse::default().with_members(
            members
                .iter()
                .zip(codes)
                .map(|((id, iid), code)| {
                    MemberResponse::default()
                        .with_member_id(st(id))
                        .with_group_instance_id(iid.as_deref().map(st))
                        .with_error_code(code.map_or(0, |c| c.code()))
                })
                .collect(),
        )
    }

    pub async fn describe_groups(
        &self,
        ctx: &GroupRequestContext,
        req: DescribeGroupsRequest,
    ) -> DescribeGroupsResponse {
        let mut groups = Vec::with_capacity(req.groups.len());
        for g in &req.groups {
            let group_id = g.0.to_string();
            let version = ctx.api_version;
            let gid = group_id.clone();
            let r = self
                .read(&group_id, move |shard, committed| {
                    if shard.consumer.contains(&gid) {
                        // DescribeGroups is the classic API: Kafka answers a consumer-protocol
                        // group as one that is not a classic group.
                        let d = DescribedGroup::default()
                            .with_group_id(st(&gid).into())
                            .with_group_state(st("Dead"));
                        return if version >= 6 {
                            d.with_error_code(ErrorCode::GroupIdNotFound.code())
                                .with_error_message(Some(st(&format!(
                                    "Group {gid} is not a classic group."
                                ))))
                        } else {
                            d
                        };
                    }
                    shard.classic.describe(&gid, committed, version)
                })
                .await;
            groups.push(r.unwrap_or_else(|e| {
                DescribedGroup::default()
                    .with_group_id(st(&group_id).into())
                    .with_error_code(e.code().code())
            }));
        }
        DescribeGroupsResponse::default().with_groups(groups)
    }

    pub async fn list_groups(
        &self,
        _ctx: &GroupRequestContext,
        req: ListGroupsRequest,
    ) -> ListGroupsResponse {
        let states: Vec<String> = req
            .states_filter
            .iter()
            .map(|s| s.trim().to_lowercase())
            .collect();
        let types: Vec<String> = req
            .types_filter
            .iter()
            .map(|s| s.trim().to_lowercase())
            .collect();
        let mut rows = Vec::new();
        for (tp, loaded) in self.runtime().partitions() {
            if !loaded {
                continue;
            }
            let (st_, ty) = (states.clone(), types.clone());
            let r = self
                .runtime()
                .read(&tp, move |shard, committed| {
                    shard.list_groups(&st_, &ty, committed)
                })
                .await;
            match r {
                Ok(v) => rows.extend(v),
                // The partition moved away meanwhile: its groups are another broker's.
                Err(CoordinatorError::NotCoordinator(_)) => {}
                Err(e) => {
                    return ListGroupsResponse::default().with_error_code(e.code().code());
                }
            }
        }
        ListGroupsResponse::default().with_groups(
            rows.into_iter()
                .map(|g| {
                    ListedGroupRow::default()
                        .with_group_id(st(&g.group_id).into())
                        .with_protocol_type(st(&g.protocol_type))
                        .with_group_state(st(&g.group_state))
                        .with_group_type(st(g.group_type.name()))
                })
                .collect(),
        )
    }
}

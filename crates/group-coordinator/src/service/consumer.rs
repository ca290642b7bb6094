//! The consumer group (KIP-848) APIs: ConsumerGroupHeartbeat, ConsumerGroupDescribe.

use std::collections::BTreeMap;

use strom_coordinator_common::runtime::{CoordinatorError, WriteResult};
use strom_protocol::kafka::messages::consumer_group_describe_response::DescribedGroup;
use strom_protocol::kafka::messages::*;
use strom_protocol::kafka::protocol::StrBytes;
use strom_protocol::ErrorCode;

use super::{GroupCoordinatorService, GroupRequestContext};
use crate::consumer::heartbeat::configured_assignors;
use crate::consumer::member::LEAVE_GROUP_MEMBER_EPOCH;
use crate::consumer::{migration, validate_heartbeat, HeartbeatContext};

fn error_message(e: &CoordinatorError) -> Option<StrBytes> {
    match e {
        CoordinatorError::Operation { message, .. } => Some(StrBytes::from_string(message.clone())),
        _ => None,
    }
}

impl GroupCoordinatorService {
    pub async fn consumer_group_heartbeat(
        &self,
        ctx: &GroupRequestContext,
        req: ConsumerGroupHeartbeatRequest,
    ) -> ConsumerGroupHeartbeatResponse {
        if let Err(e) = validate_heartbeat(self.config(), ctx.api_version, &req) {
            return ConsumerGroupHeartbeatResponse::default()
                .with_error_code(e.code.code())
                .with_error_message(Some(StrBytes::from_string(e.message)));
        }
        let group_id = req.group_id.as_str().to_string();
        let hctx = HeartbeatContext {
            api_version: ctx.api_version,
            client_id: ctx.client_id.clone(),
            client_host: ctx.client_host.clone(),
        };
        let gid = group_id.clone();
        let r = self
            .write(&group_id, move |shard, wctx| {
                // A classic group: an empty one is replaced by the consumer group a join
                // creates, a non-empty one is upgraded by a join if it can be (Kafka's
                // `getOrMaybeCreateConsumerGroup`).
                let mut records = Vec::new();
                let mut base = None;
                if let Some(g) = shard.classic.group(&gid) {
                    let not_consumer = || CoordinatorError::Operation {
                        code: ErrorCode::GroupIdNotFound,
                        message: format!("Group {gid} is not a consumer group."),
                    };
                    if req.member_epoch != 0 {
                        return Err(not_consumer());
                    }
                    if g.is_empty() {
                        records = shard
                            .classic
                            .deletion_records(&shard.env, &gid)
                            .map_err(|_| not_consumer())?;
                    } else {
                        let (conversion, group) = migration::convert_to_consumer_group(shard, &gid)
                            .map_err(|e| CoordinatorError::Operation {
                                code: e.code,
                                message: e.message,
                            })?;
                        records = conversion;
                        base = Some(group);
                    }
                }
                let (more, response) = shard
                    .consumer
                    .heartbeat_on(&shard.env, &hctx, &req, base)
                    .map_err(|e| CoordinatorError::Operation {
                    code: e.code,
                    message: e.message,
                })?;
                records.extend(more);
                if req.member_epoch == LEAVE_GROUP_MEMBER_EPOCH {
                    // The last consumer-protocol member leaving may downgrade the group.
                    if let Some(r) =
                        migration::maybe_downgrade(shard, wctx.offset, &gid, req.member_id.as_str())
                    {
                        records = r;
                    }
                }
                Ok(WriteResult { records, response })
            })
            .await;
        match r {
            Ok(resp) => resp,
            Err(e) => ConsumerGroupHeartbeatResponse::default()
                .with_error_code(e.code().code())
                .with_error_message(error_message(&e)),
        }
    }

    pub async fn consumer_group_describe(
        &self,
        _ctx: &GroupRequestContext,
        req: ConsumerGroupDescribeRequest,
    ) -> ConsumerGroupDescribeResponse {
        let default_assignor = configured_assignors(self.config())
            .first()
            .map(|a| a.name().to_string())
            .unwrap_or_default();
        // Groups by offsets partition, answered in the request's order.
        let mut by_partition: BTreeMap<i32, Vec<(usize, String)>> = BTreeMap::new();
        let mut out: Vec<Option<DescribedGroup>> = vec![None; req.group_ids.len()];
        for (i, g) in req.group_ids.iter().enumerate() {
            let id = g.as_str().to_string();
            if id.is_empty() {
                out[i] = Some(
                    DescribedGroup::default()
                        .with_group_id(g.clone())
                        .with_error_code(ErrorCode::InvalidGroupId.code()),
                );
            } else {
                by_partition
                    .entry(self.partition_for(&id))
                    .or_default()
                    .push((i, id));
            }
        }
        for (_, groups) in by_partition {
            let first = groups[0].1.clone();
            let metadata = self.metadata.clone();
            let assignor = default_assignor.clone();
            let ids: Vec<String> = groups.iter().map(|(_, id)| id.clone()).collect();
            let r = self
                .read(&first, move |shard, committed| {
                    let image = metadata.read().clone();
                    ids.iter()
                        .map(|id| {
                            if shard.consumer.committed_group(id, committed).is_none()
                                && shard.classic.contains(id)
                            {
                                DescribedGroup::default()
                                    .with_group_id(StrBytes::from_string(id.clone()).into())
                                    .with_error_code(ErrorCode::GroupIdNotFound.code())
                                    .with_error_message(Some(StrBytes::from_string(format!(
                                        "Group {id} is not a consumer group."
                                    ))))
                            } else {
                                shard.consumer.describe(id, committed, &assignor, &image)
                            }
                        })
                        .collect::<Vec<_>>()
                })
                .await;
            match r {
                Ok(described) => {
                    for ((i, _), d) in groups.iter().zip(described) {
                        out[*i] = Some(d);
                    }
                }
                Err(e) => {
                    for (i, id) in &groups {
                        out[*i] = Some(
                            DescribedGroup::default()
                                .with_group_id(StrBytes::from_string(id.clone()).into())
                                .with_error_code(e.code().code()),
                        );
                    }
                }
            }
        }
        ConsumerGroupDescribeResponse::default().with_groups(out.into_iter().flatten().collect())
    }
}

//! The group APIs (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch,
//! DescribeGroups, ListGroups, DeleteGroups, OffsetDelete, ConsumerGroupHeartbeat,
//! ConsumerGroupDescribe): each hands its request to the group coordinator service with what
//! the coordinator needs of the connection, as Kafka's `KafkaApis` does. What `KafkaApis`
//! itself decides before the coordinator is done here: offsets of topics that do not exist are
//! answered UNKNOWN_TOPIC_OR_PARTITION without reaching it.

use std::net::IpAddr;
use std::sync::Arc;

use strom_group_coordinator::GroupRequestContext;
use strom_protocol::kafka::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use strom_protocol::kafka::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use strom_protocol::kafka::messages::*;
use strom_protocol::ErrorCode;

use crate::request_context::RequestContext;
use crate::server::Broker;

/// The coordinator's view of the request's connection.
pub fn group_context(ctx: &RequestContext) -> GroupRequestContext {
    GroupRequestContext {
        client_id: ctx.client_id().to_string(),
        client_host: java_host(ctx.client_address.ip()),
        api_version: ctx.api_version,
    }
}

/// The client's address as Java's `InetAddress.toString()` prints it for an address without a
/// host name, which is what Kafka shows as a member's client host: `/` and the address, an
/// IPv4-mapped IPv6 address as IPv4, IPv6 as eight hex groups without compression.
pub fn java_host(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => format!("/{v4}"),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => format!("/{v4}"),
            None => {
                let groups: Vec<String> = v6.segments().iter().map(|s| format!("{s:x}")).collect();
                format!("/{}", groups.join(":"))
            }
        },
    }
}

pub async fn join_group(
    b: &Arc<Broker>,
    ctx: &RequestContext,
    req: JoinGroupRequest,
) -> JoinGroupResponse {
    b.group_coordinator
        .join_group(&group_context(ctx), req)
        .await
}

pub async fn sync_group(
    b: &Arc<Broker>,
    ctx: &RequestContext,
    req: SyncGroupRequest,
) -> SyncGroupResponse {
    b.group_coordinator
        .sync_group(&group_context(ctx), req)
        .await
}

pub async fn heartbeat(
    b: &Arc<Broker>,
    ctx: &RequestContext,
    req: HeartbeatRequest,
) -> HeartbeatResponse {
    b.group_coordinator
        .heartbeat(&group_context(ctx), req)
        .await
}

pub async fn leave_group(
    b: &Arc<Broker>,
    ctx: &RequestContext,
    req: LeaveGroupRequest,
) -> LeaveGroupResponse {
    b.group_coordinator
        .leave_group(&group_context(ctx), req)
        .await
}

pub async fn describe_groups(
    b: &Arc<Broker>,
    ctx: &RequestContext,
    req: DescribeGroupsRequest,
) -> DescribeGroupsResponse {
    b.group_coordinator
        .describe_groups(&group_context(ctx), req)
        .await
}

pub async fn list_groups(
    b: &Arc<Broker>,
    ctx: &RequestContext,
    req: ListGroupsRequest,
) -> ListGroupsResponse {
    b.group_coordinator
        .list_groups(&group_context(ctx), req)
        .await
}

pub async fn delete_groups(
    b: &Arc<Broker>,
    ctx: &RequestContext,
    req: DeleteGroupsRequest,
) -> DeleteGroupsResponse {
    b.group_coordinator
        .delete_groups(&group_context(ctx), req)
        .await
}

pub async fn offset_fetch(
    b: &Arc<Broker>,
    ctx: &RequestContext,
    req: OffsetFetchRequest,
) -> OffsetFetchResponse {
    b.group_coordinator
        .offset_fetch(&group_context(ctx), req)
        .await
}

pub async fn consumer_group_heartbeat(
    b: &Arc<Broker>,
    ctx: &RequestContext,
    req: ConsumerGroupHeartbeatRequest,
) -> ConsumerGroupHeartbeatResponse {
    b.group_coordinator
        .consumer_group_heartbeat(&group_context(ctx), req)
        .await
}

pub async fn consumer_group_describe(
    b: &Arc<Broker>,
    ctx: &RequestContext,
    req: ConsumerGroupDescribeRequest,
) -> ConsumerGroupDescribeResponse {
    b.group_coordinator
        .consumer_group_describe(&group_context(ctx), req)
        .await
}

/// OffsetCommit: topics the metadata does not know are answered UNKNOWN_TOPIC_OR_PARTITION
/// here (Kafka's `handleOffsetCommitRequest`); the rest go to the coordinator, and the two
/// answers are merged.
pub async fn offset_commit(
    b: &Arc<Broker>,
    ctx: &RequestContext,
    mut req: OffsetCommitRequest,
) -> OffsetCommitResponse {
    let image = b.image();
    let (known, unknown): (Vec<_>, Vec<_>) = std::mem::take(&mut req.topics)
        .into_iter()
        .partition(|t| image.topic(t.name.0.as_str()).is_some());
    req.topics = known;
    let mut resp = if req.topics.is_empty() {
        // Nothing left for the coordinator: Kafka answers without asking it.
        OffsetCommitResponse::default()
    } else {
        b.group_coordinator
            .offset_commit(&group_context(ctx), req)
            .await
    };
    resp.topics.extend(unknown.into_iter().map(|t| {
        OffsetCommitResponseTopic::default()
            .with_name(t.name)
            .with_topic_id(t.topic_id)
            .with_partitions(
                t.partitions
                    .iter()
                    .map(|p| {
                        OffsetCommitResponsePartition::default()
                            .with_partition_index(p.partition_index)
                            .with_error_code(ErrorCode::UnknownTopicOrPartition.code())
                    })
                    .collect(),
            )
    }));
    resp
}

/// OffsetDelete: as OffsetCommit, unknown topics are answered here (Kafka's
/// `handleOffsetDeleteRequest`); the group itself is still checked by the coordinator.
pub async fn offset_delete(
    b: &Arc<Broker>,
    ctx: &RequestContext,
    mut req: OffsetDeleteRequest,
) -> OffsetDeleteResponse {
    let image = b.image();
    let (known, unknown): (Vec<_>, Vec<_>) = std::mem::take(&mut req.topics)
        .into_iter()
        .partition(|t| image.topic(t.name.0.as_str()).is_some());
    req.topics = known;
    let mut resp = b
        .group_coordinator
        .offset_delete(&group_context(ctx), req)
        .await;
    if resp.error_code == 0 {
        resp.topics.extend(unknown.into_iter().map(|t| {
            OffsetDeleteResponseTopic::default()
                .with_name(t.name)
                .with_partitions(
                    t.partitions
                        .iter()
                        .map(|p| {
                            OffsetDeleteResponsePartition::default()
                                .with_partition_index(p.partition_index)
                                .with_error_code(ErrorCode::UnknownTopicOrPartition.code())
                        })
                        .collect(),
                )
        }));
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_hosts_print_as_java_does() {
        assert_eq!(java_host("127.0.0.1".parse().unwrap()), "/127.0.0.1");
        assert_eq!(java_host("::1".parse().unwrap()), "/0:0:0:0:0:0:0:1");
        assert_eq!(java_host("::ffff:10.0.0.7".parse().unwrap()), "/10.0.0.7");
        assert_eq!(
            java_host("fe80::1:abcd".parse().unwrap()),
            "/fe80:0:0:0:0:0:1:abcd"
        );
    }
}

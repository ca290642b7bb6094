//! The one table of the APIs Strom serves: (API key, version range, listener scope, handler).
//! ApiVersions answers from it per listener, dispatch looks requests up in it, and the fuzz
//! target decodes through it.
//!
//! A range must only cover versions whose every field the handler handles; ranges are clamped
//! to what the generated `kafka-protocol` structs decode (Kafka 4.x dropped Produce < 3 and
//! Fetch < 4, and so did the generator). Scopes follow the `listeners` field of Kafka's JSON
//! message specs: the broker-to-controller APIs (BrokerRegistration, BrokerHeartbeat,
//! AlterPartition, AllocateProducerIds, Envelope) are on controller listeners only; admin APIs
//! decided by the controller are on both; the data-plane APIs on broker listeners only.
//!
//! Strom-private APIs ([`PRIVATE`]) have keys no Kafka API has: today Raft between the
//! controller quorum's voters ([`RAFT`], `strom_raft::wire`), on controller listeners only.
//! Their requests are not decoded with `kafka-protocol` structs and need no broker: the
//! controller listener's dispatch hands a Raft body to the quorum, which is served from
//! start-up on, before the broker exists.
//!
//! Adding an API: a handler module with `async fn(&Arc<Broker>, Request, ...) -> Response` and
//! one `api!` line below (or a hand-written [`HandlerFn`] when the handler needs the
//! [`RequestContext`] or decides itself whether to answer).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use strom_protocol::kafka::messages::*;
use strom_protocol::kafka::protocol::Decodable;

use super::*;
use crate::listeners::ListenerScope;
use crate::request_context::RequestContext;
use crate::response::ResponseFrame;
use crate::server::Broker;

pub type HandlerResult = Result<Option<ResponseFrame>, HandleError>;
pub type HandlerFuture<'a> = Pin<Box<dyn Future<Output = HandlerResult> + Send + 'a>>;
/// Decodes the body (the bytes after the request header), runs the API and returns the framed
/// response (`None`: no response is due, as for Produce with acks=0).
pub type HandlerFn = for<'a> fn(&'a Arc<Broker>, &'a RequestContext, Bytes) -> HandlerFuture<'a>;
/// Decodes a body of this API at a version and drops it (the fuzz target's view of dispatch).
pub type DecodeFn = fn(Bytes, i16) -> Result<(), String>;

/// Which listeners serve an API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scopes {
    pub broker: bool,
    pub controller: bool,
}

impl Scopes {
    pub fn contains(self, scope: ListenerScope) -> bool {
        match scope {
            ListenerScope::Broker => self.broker,
            ListenerScope::Controller => self.controller,
        }
    }
}

const BROKER: Scopes = Scopes {
    broker: true,
    controller: false,
};
const CONTROLLER: Scopes = Scopes {
    broker: false,
    controller: true,
};
const BOTH: Scopes = Scopes {
    broker: true,
    controller: true,
};

pub struct ApiEntry {
    pub key: ApiKey,
    pub min_version: i16,
    pub max_version: i16,
    pub scopes: Scopes,
    /// Decided by the active controller: on a broker listener of another node the request is
    /// forwarded there in an Envelope (Kafka's `forwardable` APIs).
    pub forwardable: bool,
    pub handle: HandlerFn,
    pub decode: DecodeFn,
}

impl ApiEntry {
    pub fn serves(&self, version: i16) -> bool {
        (self.min_version..=self.max_version).contains(&version)
    }
}

/// Decodes a request body, mapping a failure to the error that closes the connection.
pub(crate) fn decode_body<T: Decodable>(
    body: &mut Bytes,
    ctx: &RequestContext,
) -> Result<T, HandleError> {
    T::decode(body, ctx.api_version).map_err(|e| HandleError::Decode {
        api: ctx.api_key,
        version: ctx.api_version,
        reason: e.to_string(),
    })
}

/// One registry entry whose handler is `|broker, ctx, request, version| response-expression`.
macro_rules! api {
    ($key:ident, $min:expr, $max:expr, $scopes:expr, forward = $fwd:expr, $req:ty,
     |$b:ident, $ctx:ident, $r:ident, $v:ident| $body:expr) => {
        ApiEntry {
            key: ApiKey::$key,
            min_version: $min,
            max_version: $max,
            scopes: $scopes,
            forwardable: $fwd,
            handle: {
                fn handle<'a>(
                    broker: &'a Arc<Broker>,
                    ctx: &'a RequestContext,
                    mut body: Bytes,
                ) -> HandlerFuture<'a> {
                    Box::pin(async move {
                        let $r: $req = decode_body(&mut body, ctx)?;
                        #[allow(unused_variables)]
                        let ($b, $ctx, $v) = (broker, ctx, ctx.api_version);
                        let resp = $body;
                        encode(ctx.api_key, ctx.api_version, ctx.correlation_id(), &resp)
                            .map(|b| Some(b.into()))
                    })
                }
                handle
            },
            decode: {
                fn decode(mut body: Bytes, version: i16) -> Result<(), String> {
                    <$req>::decode(&mut body, version)
                        .map(drop)
                        .map_err(|e| e.to_string())
                }
                decode
            },
        }
    };
}

fn decode_produce(mut body: Bytes, version: i16) -> Result<(), String> {
    ProduceRequest::decode(&mut body, version)
        .map(drop)
        .map_err(|e| e.to_string())
}

/// Produce: with acks=0 there is no response, and an error closes the connection so the
/// client notices (Kafka's behaviour).
fn produce<'a>(
    broker: &'a Arc<Broker>,
    ctx: &'a RequestContext,
    mut body: Bytes,
) -> HandlerFuture<'a> {
    Box::pin(async move {
        let req: ProduceRequest = decode_body(&mut body, ctx)?;
        let acks = req.acks;
        let internal_allowed = ctx.client_id() == produce::ADMIN_CLIENT_ID;
        let resp = produce::handle_for_client(broker, req, ctx.api_version, internal_allowed).await;
        if acks == 0 {
            let failed = resp
                .responses
                .iter()
                .flat_map(|t| &t.partition_responses)
                .any(|p| p.error_code != 0);
            return if failed {
                Err(HandleError::AcksZeroFailure)
            } else {
                Ok(None)
            };
        }
        encode(ctx.api_key, ctx.api_version, ctx.correlation_id(), &resp).map(|b| Some(b.into()))
    })
}

fn decode_fetch(mut body: Bytes, version: i16) -> Result<(), String> {
    FetchRequest::decode(&mut body, version)
        .map(drop)
        .map_err(|e| e.to_string())
}

/// Fetch: the records go into the response as file ranges, read while it is written.
fn fetch<'a>(
    broker: &'a Arc<Broker>,
    ctx: &'a RequestContext,
    mut body: Bytes,
) -> HandlerFuture<'a> {
    Box::pin(async move {
        let req: FetchRequest = decode_body(&mut body, ctx)?;
        let (resp, records) = fetch::handle_for(broker, ctx, req, ctx.api_version).await;
        fetch::encode(ctx.api_version, ctx.correlation_id(), resp, records).map(Some)
    })
}

fn decode_envelope(mut body: Bytes, version: i16) -> Result<(), String> {
    EnvelopeRequest::decode(&mut body, version)
        .map(drop)
        .map_err(|e| e.to_string())
}

/// Every API Strom serves.
pub static REGISTRY: &[ApiEntry] = &[
    ApiEntry {
        key: ApiKey::Produce,
        // v0-2 (message format 0/1) were removed in Kafka 4.0: a request at those versions
        // closes the connection, as Kafka's. ApiVersions still advertises them, see
        // [`PRODUCE_API_VERSIONS_RESPONSE_MIN_VERSION`].
        min_version: 3,
        // v12: transactions v2 (KIP-890), the broker adds partitions to the transaction. v13:
        // topics named by id (KIP-516).
        max_version: 13,
        scopes: BROKER,
        forwardable: false,
        handle: produce,
        decode: decode_produce,
    },
    // v17 (the follower's directory id, KIP-853) and v18 (the follower's high watermark,
    // KIP-1166) add tagged fields only KRaft's own fetch uses; a broker ignores them, as Kafka's.
    ApiEntry {
        key: ApiKey::Fetch,
        min_version: 4,
        max_version: 18,
        scopes: BROKER,
        forwardable: false,
        handle: fetch,
        decode: decode_fetch,
    },
    // v9 adds the latest-tiered timestamp (-5), v10 a timeout for remote reads; v11 (Kafka
    // 4.4) is beyond the generated structs.
    api!(
        ListOffsets,
        1,
        10,
        BROKER,
        forward = false,
        ListOffsetsRequest,
        |b, ctx, req, v| list_offsets::handle(b, req, v)
    ),
    // v13 (KIP-1102) adds a top-level error code, only ever REBOOTSTRAP_REQUIRED, which a
    // broker that knows its cluster never sends.
    api!(
        Metadata,
        0,
        13,
        BROKER,
        forward = false,
        MetadataRequest,
        |b, ctx, req, v| metadata::handle(b, req, v).await
    ),
    api!(
        ApiVersions,
        0,
        4,
        BOTH,
        forward = false,
        ApiVersionsRequest,
        |b, ctx, req, v| api_versions::handle(b, ctx, req)
    ),
    api!(
        CreateTopics,
        2,
        7,
        BOTH,
        forward = true,
        CreateTopicsRequest,
        |b, ctx, req, v| topics::create_topics(b, req, v).await
    ),
    api!(
        DeleteTopics,
        1,
        6,
        BOTH,
        forward = true,
        DeleteTopicsRequest,
        |b, ctx, req, v| topics::delete_topics(b, req, v).await
    ),
    api!(
        CreatePartitions,
        0,
        3,
        BOTH,
        forward = true,
        CreatePartitionsRequest,
        |b, ctx, req, v| topics::create_partitions(b, req).await
    ),
    api!(
        DescribeConfigs,
        1,
        4,
        BROKER,
        forward = false,
        DescribeConfigsRequest,
        |b, ctx, req, v| configs::describe_configs(b, req, v)
    ),
    api!(
        AlterConfigs,
        0,
        2,
        BOTH,
        forward = true,
        AlterConfigsRequest,
        |b, ctx, req, v| configs::alter_configs(b, req).await
    ),
    api!(
        IncrementalAlterConfigs,
        0,
        1,
        BOTH,
        forward = true,
        IncrementalAlterConfigsRequest,
        |b, ctx, req, v| configs::incremental_alter_configs(b, req).await
    ),
    api!(
        DescribeCluster,
        0,
        2,
        BROKER,
        forward = false,
        DescribeClusterRequest,
        |b, ctx, req, v| describe_cluster::handle(b, req)
    ),
    api!(
        WriteTxnMarkers,
        1,
        2,
        BROKER,
        forward = false,
        WriteTxnMarkersRequest,
        |b, ctx, req, v| write_txn_markers::handle_for(b, ctx, req).await
    ),
    api!(
        DescribeLogDirs,
        1,
        4,
        BROKER,
        forward = false,
        DescribeLogDirsRequest,
        |b, ctx, req, v| describe_log_dirs::handle(b, req)
    ),
    api!(
        DescribeProducers,
        0,
        0,
        BROKER,
        forward = false,
        DescribeProducersRequest,
        |b, ctx, req, v| describe_producers::handle(b, req)
    ),
    api!(
        InitProducerId,
        0,
        5,
        BROKER,
        forward = false,
        InitProducerIdRequest,
        |b, ctx, req, v| init_producer_id::handle(b, req, v).await
    ),
    // The transaction coordinator's APIs at Kafka 4.4's ranges (InitProducerId above; its
    // v6, two-phase commit, is not decoded by the generated structs).
    api!(
        AddPartitionsToTxn,
        0,
        5,
        BROKER,
        forward = false,
        AddPartitionsToTxnRequest,
        |b, ctx, req, v| transactions::add_partitions_to_txn(b, req, v).await
    ),
    api!(
        AddOffsetsToTxn,
        0,
        4,
        BROKER,
        forward = false,
        AddOffsetsToTxnRequest,
        |b, ctx, req, v| transactions::add_offsets_to_txn(b, req, v).await
    ),
    api!(
        EndTxn,
        0,
        5,
        BROKER,
        forward = false,
        EndTxnRequest,
        |b, ctx, req, v| transactions::end_txn(b, req, v).await
    ),
    api!(
        DescribeTransactions,
        0,
        0,
        BROKER,
        forward = false,
        DescribeTransactionsRequest,
        |b, ctx, req, v| transactions::describe_transactions(b, req).await
    ),
    api!(
        ListTransactions,
        0,
        2,
        BROKER,
        forward = false,
        ListTransactionsRequest,
        |b, ctx, req, v| transactions::list_transactions(b, req).await
    ),
    api!(
        OffsetForLeaderEpoch,
        2,
        4,
        BROKER,
        forward = false,
        OffsetForLeaderEpochRequest,
        |b, ctx, req, v| offset_for_leader_epoch::handle(b, req)
    ),
    api!(
        DeleteRecords,
        0,
        2,
        BROKER,
        forward = false,
        DeleteRecordsRequest,
        |b, ctx, req, v| delete_records::handle(b, req).await
    ),
    api!(
        ElectLeaders,
        0,
        2,
        BOTH,
        forward = true,
        ElectLeadersRequest,
        |b, ctx, req, v| elect_leaders::handle(b, req, v).await
    ),
    api!(
        AlterPartitionReassignments,
        0,
        0,
        BOTH,
        forward = true,
        AlterPartitionReassignmentsRequest,
        |b, ctx, req, v| reassignments::alter(b, req).await
    ),
    api!(
        ListPartitionReassignments,
        0,
        0,
        BOTH,
        forward = true,
        ListPartitionReassignmentsRequest,
        |b, ctx, req, v| reassignments::list(b, req).await
    ),
    // The group coordinator's APIs, at Kafka 4.4's ranges (OffsetCommit, OffsetFetch and
    // DeleteGroups clamped to what the generated structs decode).
    api!(
        FindCoordinator,
        0,
        6,
        BROKER,
        forward = false,
        FindCoordinatorRequest,
        |b, ctx, req, v| find_coordinator::handle(b, req, v).await
    ),
    api!(
        JoinGroup,
        0,
        9,
        BROKER,
        forward = false,
        JoinGroupRequest,
        |b, ctx, req, v| groups::join_group(b, ctx, req).await
    ),
    api!(
        SyncGroup,
        0,
        5,
        BROKER,
        forward = false,
        SyncGroupRequest,
        |b, ctx, req, v| groups::sync_group(b, ctx, req).await
    ),
    api!(
        Heartbeat,
        0,
        4,
        BROKER,
        forward = false,
        HeartbeatRequest,
        |b, ctx, req, v| groups::heartbeat(b, ctx, req).await
    ),
    api!(
        LeaveGroup,
        0,
        5,
        BROKER,
        forward = false,
        LeaveGroupRequest,
        |b, ctx, req, v| groups::leave_group(b, ctx, req).await
    ),
    api!(
        OffsetCommit,
        2,
        9,
        BROKER,
        forward = false,
        OffsetCommitRequest,
        |b, ctx, req, v| groups::offset_commit(b, ctx, req).await
    ),
    api!(
        OffsetFetch,
        1,
        9,
        BROKER,
        forward = false,
        OffsetFetchRequest,
        |b, ctx, req, v| groups::offset_fetch(b, ctx, req).await
    ),
    // Kafka 4.4 serves 0-6; v6 (topic ids) is beyond the generated structs.
    api!(
        TxnOffsetCommit,
        0,
        5,
        BROKER,
        forward = false,
        TxnOffsetCommitRequest,
        |b, ctx, req, v| txn_offset_commit::txn_offset_commit(b, ctx, req).await
    ),
    api!(
        DescribeGroups,
        0,
        6,
        BROKER,
        forward = false,
        DescribeGroupsRequest,
        |b, ctx, req, v| groups::describe_groups(b, ctx, req).await
    ),
    api!(
        ListGroups,
        0,
        5,
        BROKER,
        forward = false,
        ListGroupsRequest,
        |b, ctx, req, v| groups::list_groups(b, ctx, req).await
    ),
    api!(
        DeleteGroups,
        0,
        2,
        BROKER,
        forward = false,
        DeleteGroupsRequest,
        |b, ctx, req, v| groups::delete_groups(b, ctx, req).await
    ),
    api!(
        OffsetDelete,
        0,
        0,
        BROKER,
        forward = false,
        OffsetDeleteRequest,
        |b, ctx, req, v| groups::offset_delete(b, ctx, req).await
    ),
    api!(
        ConsumerGroupHeartbeat,
        0,
        1,
        BROKER,
        forward = false,
        ConsumerGroupHeartbeatRequest,
        |b, ctx, req, v| groups::consumer_group_heartbeat(b, ctx, req).await
    ),
    api!(
        ConsumerGroupDescribe,
        0,
        1,
        BROKER,
        forward = false,
        ConsumerGroupDescribeRequest,
        |b, ctx, req, v| groups::consumer_group_describe(b, ctx, req).await
    ),
    // Broker-to-controller APIs: controller listeners only, and only for a principal with
    // CLUSTER_ACTION (the whole request answers CLUSTER_AUTHORIZATION_FAILED otherwise).
    api!(
        BrokerRegistration,
        0,
        4,
        CONTROLLER,
        forward = false,
        BrokerRegistrationRequest,
        |b, ctx, req, v| match internal::cluster_action(b, ctx) {
            Ok(()) => internal::broker_registration(b, req, v).await,
            Err(code) => BrokerRegistrationResponse::default().with_error_code(code.code()),
        }
    ),
    api!(
        BrokerHeartbeat,
        0,
        1,
        CONTROLLER,
        forward = false,
        BrokerHeartbeatRequest,
        |b, ctx, req, v| match internal::cluster_action(b, ctx) {
            Ok(()) => internal::broker_heartbeat(b, req).await,
            Err(code) => BrokerHeartbeatResponse::default().with_error_code(code.code()),
        }
    ),
    api!(
        AlterPartition,
        2,
        3,
        CONTROLLER,
        forward = false,
        AlterPartitionRequest,
        |b, ctx, req, v| match internal::cluster_action(b, ctx) {
            Ok(()) => internal::alter_partition(b, req, v).await,
            Err(code) => AlterPartitionResponse::default().with_error_code(code.code()),
        }
    ),
    api!(
        AllocateProducerIds,
        0,
        0,
        CONTROLLER,
        forward = false,
        AllocateProducerIdsRequest,
        |b, ctx, req, v| match internal::cluster_action(b, ctx) {
            Ok(()) => internal::allocate_producer_ids(b, req).await,
            Err(code) => AllocateProducerIdsResponse::default().with_error_code(code.code()),
        }
    ),
    api!(
        AssignReplicasToDirs,
        0,
        0,
        CONTROLLER,
        forward = false,
        AssignReplicasToDirsRequest,
        |b, ctx, req, v| match internal::cluster_action(b, ctx) {
            Ok(()) => internal::assign_replicas_to_dirs(b, req).await,
            Err(code) => AssignReplicasToDirsResponse::default().with_error_code(code.code()),
        }
    ),
    ApiEntry {
        key: ApiKey::Envelope,
        min_version: 0,
        max_version: 0,
        scopes: CONTROLLER,
        forwardable: false,
        handle: internal::envelope,
        decode: decode_envelope,
    },
];

/// A Strom-private API: a key no Kafka API has, served only on the listeners of its scopes,
/// never forwarded, listed by ApiVersions only where it is served.
pub struct PrivateApi {
    pub key: i16,
    pub name: &'static str,
    pub min_version: i16,
    pub max_version: i16,
    pub scopes: Scopes,
    pub request_header_version: i16,
}

impl PrivateApi {
    pub fn serves(&self, version: i16) -> bool {
        (self.min_version..=self.max_version).contains(&version)
    }
}

/// Raft between the controller quorum's voters, as Kafka's KRaft carries its Raft RPCs on the
/// controller listener (and Kafka's `ControllerApis` authorizes them with CLUSTER_ACTION).
pub static RAFT: PrivateApi = PrivateApi {
    key: strom_raft::wire::API_KEY,
    name: strom_raft::wire::API_NAME,
    min_version: strom_raft::wire::MIN_VERSION,
    max_version: strom_raft::wire::MAX_VERSION,
    scopes: CONTROLLER,
    request_header_version: strom_raft::wire::REQUEST_HEADER_VERSION,
};

/// Every Strom-private API.
pub static PRIVATE: &[&PrivateApi] = &[&RAFT];

/// The private API `api_key` if a listener of `scope` serves it.
pub fn lookup_private(api_key: i16, scope: ListenerScope) -> Option<&'static PrivateApi> {
    PRIVATE
        .iter()
        .copied()
        .find(|e| e.key == api_key && e.scopes.contains(scope))
}

/// The entry for `api_key` if a listener of `scope` serves it.
pub fn lookup(api_key: i16, scope: ListenerScope) -> Option<&'static ApiEntry> {
    REGISTRY
        .iter()
        .find(|e| e.key as i16 == api_key && e.scopes.contains(scope))
}

/// The oldest Produce version ApiVersions advertises on a broker listener although only v3+
/// is served: Kafka 4.x does the same (`ApiKeys.PRODUCE_API_VERSIONS_RESPONSE_MIN_VERSION`,
/// KAFKA-18659) because librdkafka releases before the fix of its issue 4956 decide from
/// Produce v0 being listed whether the broker supports gzip, snappy and lz4, and without it
/// silently produce uncompressed batches (the librdkafka 2.12 the tests link is fixed). Clients
/// negotiate the highest common version, so none sends v0-2 to a broker that lists v3+.
pub const PRODUCE_API_VERSIONS_RESPONSE_MIN_VERSION: i16 = 0;

/// `(api key, min, max)` as ApiVersions on a listener of `scope` advertises them: the Kafka
/// APIs, then the private ones.
pub fn api_versions(scope: ListenerScope) -> Vec<(i16, i16, i16)> {
    let kafka = REGISTRY
        .iter()
        .filter(|e| e.scopes.contains(scope))
        .map(|e| {
            let min = if e.key == ApiKey::Produce && scope == ListenerScope::Broker {
                PRODUCE_API_VERSIONS_RESPONSE_MIN_VERSION
            } else {
                e.min_version
            };
            (e.key as i16, min, e.max_version)
        });
    let private = PRIVATE
        .iter()
        .filter(|e| e.scopes.contains(scope))
        .map(|e| (e.key, e.min_version, e.max_version));
    kafka.chain(private).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_fit_the_generated_structs() {
        for e in REGISTRY {
            let valid = e.key.valid_versions();
            assert!(
                e.min_version >= valid.min && e.max_version <= valid.max,
                "{:?} {}..{} vs {valid}",
                e.key,
                e.min_version,
                e.max_version
            );
            assert!(e.min_version <= e.max_version);
            assert!(e.scopes.broker || e.scopes.controller, "{:?}", e.key);
        }
        for p in PRIVATE {
            assert!(ApiKey::try_from(p.key).is_err(), "{} is a Kafka key", p.key);
            assert!(p.min_version <= p.max_version);
            assert!(!p.scopes.broker, "{} on a client listener", p.name);
        }
        let mut keys: Vec<i16> = REGISTRY.iter().map(|e| e.key as i16).collect();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), REGISTRY.len(), "one entry per API key");
    }

    #[test]
    fn internal_apis_only_on_controller_listeners() {
        for key in [
            ApiKey::BrokerRegistration,
            ApiKey::BrokerHeartbeat,
            ApiKey::AlterPartition,
            ApiKey::AllocateProducerIds,
            ApiKey::AssignReplicasToDirs,
            ApiKey::Envelope,
        ] {
            assert!(
                lookup(key as i16, ListenerScope::Broker).is_none(),
                "{key:?}"
            );
            assert!(
                lookup(key as i16, ListenerScope::Controller).is_some(),
                "{key:?}"
            );
        }
        assert!(lookup(ApiKey::Produce as i16, ListenerScope::Controller).is_none());
        // Raft: controller listeners only, listed only there.
        assert!(lookup_private(RAFT.key, ListenerScope::Broker).is_none());
        assert!(lookup_private(RAFT.key, ListenerScope::Controller).is_some());
        assert!(api_versions(ListenerScope::Controller)
            .iter()
            .any(|&(k, _, _)| k == RAFT.key));
        assert!(!api_versions(ListenerScope::Broker)
            .iter()
            .any(|&(k, _, _)| k == RAFT.key));
        assert!(lookup(ApiKey::ApiVersions as i16, ListenerScope::Controller).is_some());
        assert!(lookup(9999, ListenerScope::Broker).is_none());
    }
}

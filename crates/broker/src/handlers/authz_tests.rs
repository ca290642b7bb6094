//! The APIs that trusted the network ask the authorizer first, as Kafka 4.4's do (the operations
//! read from `KafkaApis` / `ControllerApis`): a follower's Fetch needs CLUSTER_ACTION, else every
//! partition answers TOPIC_AUTHORIZATION_FAILED; WriteTxnMarkers needs ALTER or CLUSTER_ACTION,
//! else every partition answers CLUSTER_AUTHORIZATION_FAILED; BrokerRegistration,
//! BrokerHeartbeat, AlterPartition, AllocateProducerIds, AssignReplicasToDirs and Envelope need
//! CLUSTER_ACTION, else their response's error is CLUSTER_AUTHORIZATION_FAILED; StromRaft needs
//! CLUSTER_ACTION, else the connection closes. Each request runs through the registry, as the
//! connection runs it, against a broker started with an authorizer that denies the cluster
//! operations named; the same requests with the default (allow-all) authorizer pass the check.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use strom_protocol::kafka::messages::fetch_request::{FetchPartition, FetchTopic, ReplicaState};
use strom_protocol::kafka::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use strom_protocol::kafka::messages::*;
use strom_protocol::kafka::protocol::{Decodable, Encodable, StrBytes};
use strom_protocol::ErrorCode;
use strom_server_common::authorizer::{
    AclOperation, Action, AuthHelper, AuthorizableRequestContext, AuthorizationResult, Authorizer,
    ResourceType,
};

use super::{registry, HandleError};
use crate::connection::ConnectionInfo;
use crate::listeners::{ListenerScope, SecurityProtocol};
use crate::request_context::{ListenerInfo, RequestContext};
use crate::server::{Broker, Plugins, Server};

/// Denies the listed operations on the cluster, allows everything else, and records every
/// question (API key, operation).
#[derive(Default)]
struct DenyCluster {
    denied: Vec<AclOperation>,
    asked: Mutex<Vec<(i16, AclOperation)>>,
}

impl Authorizer for DenyCluster {
    fn authorize(
        &self,
        ctx: &dyn AuthorizableRequestContext,
        actions: &[Action],
    ) -> Vec<AuthorizationResult> {
        actions
            .iter()
            .map(|a| {
                self.asked.lock().push((ctx.request_type(), a.operation));
                if a.resource.resource_type == ResourceType::Cluster
                    && self.denied.contains(&a.operation)
                {
                    AuthorizationResult::Denied
                } else {
                    AuthorizationResult::Allowed
                }
            })
            .collect()
    }

    fn authorize_by_resource_type(
        &self,
        _ctx: &dyn AuthorizableRequestContext,
        _op: AclOperation,
        _resource_type: ResourceType,
    ) -> AuthorizationResult {
        AuthorizationResult::Allowed
    }
}

async fn start(dir: &tempfile::TempDir, auth: Option<Arc<DenyCluster>>) -> (Server, Arc<Broker>) {
    let plugins = match auth {
        Some(a) => Plugins {
            auth: AuthHelper::new(a),
        },
        None => Plugins::default(),
    };
    let server = super::test_server(dir, plugins).await;
    let b = server.broker();
    (server, b)
}

/// Runs `req` through the registry entry of `key` for a listener of `scope`, as a connection
/// would, and decodes the response body.
async fn call<Req: Encodable, Resp: Decodable>(
    b: &Arc<Broker>,
    scope: ListenerScope,
    key: ApiKey,
    version: i16,
    req: &Req,
) -> Resp {
    let entry = registry::lookup(key as i16, scope).expect("served on the scope");
    let header = RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(7)
        .with_client_id(Some(StrBytes::from_static_str("authz-test")));
    let mut ctx = RequestContext::internal(header, key);
    ctx.listener.scope = scope;
    let mut body = BytesMut::new();
    req.encode(&mut body, version).unwrap();
    let framed = (entry.handle)(b, &ctx, body.freeze())
        .await
        .expect("answered")
        .expect("a response is due")
        .into_bytes()
        .unwrap();
    let mut resp = Bytes::from(framed).split_off(4);
    ResponseHeader::decode(&mut resp, key.response_header_version(version)).unwrap();
    Resp::decode(&mut resp, version).unwrap()
}

fn fetch_request(version: i16, replica: i32) -> FetchRequest {
    let mut req = FetchRequest::default()
        .with_max_bytes(1 << 20)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_static_str("t")))
            .with_partitions(vec![
                FetchPartition::default()
                    .with_partition(0)
                    .with_partition_max_bytes(1 << 20),
                FetchPartition::default()
                    .with_partition(1)
                    .with_partition_max_bytes(1 << 20),
            ])]);
    if version >= 15 {
        req.replica_state = ReplicaState::default()
            .with_replica_id(replica.into())
            .with_replica_epoch(3);
    } else {
        req.replica_id = replica.into();
    }
    req
}

async fn fetch_codes(b: &Arc<Broker>, version: i16, replica: i32) -> Vec<i16> {
    let resp: FetchResponse = call(
        b,
        ListenerScope::Broker,
        ApiKey::Fetch,
        version,
        &fetch_request(version, replica),
    )
    .await;
    resp.responses
        .iter()
        .flat_map(|t| &t.partitions)
        .map(|p| p.error_code)
        .collect()
}

fn markers_request() -> WriteTxnMarkersRequest {
    WriteTxnMarkersRequest::default().with_markers(vec![WritableTxnMarker::default()
        .with_producer_id(5.into())
        .with_producer_epoch(1)
        .with_transaction_result(true)
        .with_coordinator_epoch(0)
        .with_topics(vec![WritableTxnMarkerTopic::default()
            .with_name(TopicName(StrBytes::from_static_str("t")))
            .with_partition_indexes(vec![0, 1])])])
}

async fn marker_codes(b: &Arc<Broker>) -> Vec<i16> {
    let resp: WriteTxnMarkersResponse = call(
        b,
        ListenerScope::Broker,
        ApiKey::WriteTxnMarkers,
        1,
        &markers_request(),
    )
    .await;
    resp.markers
        .iter()
        .flat_map(|m| &m.topics)
        .flat_map(|t| &t.partitions)
        .map(|p| p.error_code)
        .collect()
}

/// The error code of each broker-to-controller API's answer, in a fixed order.
async fn controller_api_codes(b: &Arc<Broker>) -> Vec<(ApiKey, i16)> {
    use ListenerScope::Controller as C;
    let mut codes = Vec::new();
    let r: BrokerRegistrationResponse = call(
        b,
        C,
        ApiKey::BrokerRegistration,
        4,
        &BrokerRegistrationRequest::default().with_broker_id(9.into()),
    )
    .await;
    codes.push((ApiKey::BrokerRegistration, r.error_code));
    let r: BrokerHeartbeatResponse = call(
        b,
        C,
        ApiKey::BrokerHeartbeat,
        1,
        &BrokerHeartbeatRequest::default().with_broker_id(9.into()),
    )
    .await;
    codes.push((ApiKey::BrokerHeartbeat, r.error_code));
    let r: AlterPartitionResponse = call(
        b,
        C,
        ApiKey::AlterPartition,
        3,
        &AlterPartitionRequest::default().with_broker_id(9.into()),
    )
    .await;
    codes.push((ApiKey::AlterPartition, r.error_code));
    let r: AllocateProducerIdsResponse = call(
        b,
        C,
        ApiKey::AllocateProducerIds,
        0,
        &AllocateProducerIdsRequest::default().with_broker_id(9.into()),
    )
    .await;
    codes.push((ApiKey::AllocateProducerIds, r.error_code));
    let r: AssignReplicasToDirsResponse = call(
        b,
        C,
        ApiKey::AssignReplicasToDirs,
        0,
        &AssignReplicasToDirsRequest::default().with_broker_id(9.into()),
    )
    .await;
    codes.push((ApiKey::AssignReplicasToDirs, r.error_code));
    let r: EnvelopeResponse = call(
        b,
        C,
        ApiKey::Envelope,
        0,
        &EnvelopeRequest::default()
            .with_request_data(Bytes::from_static(b"not a request"))
            .with_client_host_address(Bytes::from_static(&[127, 0, 0, 1])),
    )
    .await;
    codes.push((ApiKey::Envelope, r.error_code));
    codes
}

#[tokio::test]
async fn follower_fetch_needs_cluster_action() {
    let dir = tempfile::tempdir().unwrap();
    let auth = Arc::new(DenyCluster {
        denied: vec![AclOperation::ClusterAction],
        ..Default::default()
    });
    let (_server, b) = start(&dir, Some(auth.clone())).await;
    for version in [4, 12, 15, 18] {
        assert_eq!(
            fetch_codes(&b, version, 2).await,
            vec![ErrorCode::TopicAuthorizationFailed.code(); 2],
            "follower fetch v{version}"
        );
        // A consumer (replica -1) is not a follower: the topic is simply unknown (by id from
        // v13).
        let unknown = if version >= 13 {
            ErrorCode::UnknownTopicId
        } else {
            ErrorCode::UnknownTopicOrPartition
        };
        assert_eq!(
            fetch_codes(&b, version, -1).await,
            vec![unknown.code(); 2],
            "consumer fetch v{version}"
        );
    }
    assert!(auth
        .asked
        .lock()
        .contains(&(ApiKey::Fetch as i16, AclOperation::ClusterAction)));

    // Kafka without an authorizer: the follower's fetch reaches the replica manager.
    let dir = tempfile::tempdir().unwrap();
    let (_server, b) = start(&dir, None).await;
    assert_eq!(
        fetch_codes(&b, 12, 2).await,
        vec![ErrorCode::UnknownTopicOrPartition.code(); 2]
    );
}

#[tokio::test]
async fn write_txn_markers_need_alter_or_cluster_action() {
    let dir = tempfile::tempdir().unwrap();
    let both = Arc::new(DenyCluster {
        denied: vec![AclOperation::ClusterAction, AclOperation::Alter],
        ..Default::default()
    });
    let (_server, b) = start(&dir, Some(both.clone())).await;
    assert_eq!(
        marker_codes(&b).await,
        vec![ErrorCode::ClusterAuthorizationFailed.code(); 2]
    );
    let asked = both.asked.lock().clone();
    assert_eq!(
        asked,
        vec![
            (ApiKey::WriteTxnMarkers as i16, AclOperation::Alter),
            (ApiKey::WriteTxnMarkers as i16, AclOperation::ClusterAction)
        ],
        "ALTER first, then CLUSTER_ACTION, as Kafka"
    );
    drop(_server);

    // Either operation is enough: the markers reach the partitions (unknown here).
    for denied in [AclOperation::ClusterAction, AclOperation::Alter] {
        let dir = tempfile::tempdir().unwrap();
        let auth = Arc::new(DenyCluster {
            denied: vec![denied],
            ..Default::default()
        });
        let (_server, b) = start(&dir, Some(auth)).await;
        let codes = marker_codes(&b).await;
        assert_eq!(codes.len(), 2);
        assert!(
            codes
                .iter()
                .all(|&c| c != ErrorCode::ClusterAuthorizationFailed.code()),
            "{denied:?} denied, the other allowed: {codes:?}"
        );
    }
}

#[tokio::test]
async fn controller_apis_need_cluster_action() {
    let dir = tempfile::tempdir().unwrap();
    let auth = Arc::new(DenyCluster {
        denied: vec![AclOperation::ClusterAction],
        ..Default::default()
    });
    let (_server, b) = start(&dir, Some(auth)).await;
    for (api, code) in controller_api_codes(&b).await {
        assert_eq!(
            code,
            ErrorCode::ClusterAuthorizationFailed.code(),
            "{api:?}"
        );
    }
    drop(_server);

    let dir = tempfile::tempdir().unwrap();
    let (_server, b) = start(&dir, None).await;
    for (api, code) in controller_api_codes(&b).await {
        assert_ne!(
            code,
            ErrorCode::ClusterAuthorizationFailed.code(),
            "{api:?} with no authorizer"
        );
    }
}

#[tokio::test]
async fn raft_needs_cluster_action() {
    let (service, _slot) = strom_raft::raft_service();
    let conn = ConnectionInfo::new(
        ListenerInfo {
            name: Arc::from("CONTROLLER"),
            security_protocol: SecurityProtocol::Plaintext,
            scope: ListenerScope::Controller,
        },
        "127.0.0.1:9093".parse().unwrap(),
        "127.0.0.1:40000".parse().unwrap(),
        0,
    );
    let header = || {
        RequestHeader::default()
            .with_request_api_key(registry::RAFT.key)
            .with_request_api_version(registry::RAFT.max_version)
            .with_correlation_id(1)
    };
    let deny = Arc::new(DenyCluster {
        denied: vec![AclOperation::ClusterAction],
        ..Default::default()
    });
    let r = super::raft::handle(
        &service,
        &AuthHelper::new(deny.clone()),
        &conn,
        header(),
        Bytes::from_static(b"vote"),
    )
    .await;
    assert!(
        matches!(r, Err(HandleError::ClusterAuthorization { .. })),
        "{r:?}"
    );
    assert_eq!(
        deny.asked.lock().clone(),
        vec![(registry::RAFT.key, AclOperation::ClusterAction)]
    );
    // Allowed, the body goes on to the voter (which has not started here, so it may wait).
    let allowed = tokio::time::timeout(
        std::time::Duration::from_millis(200),
        super::raft::handle(
            &service,
            &AuthHelper::default(),
            &conn,
            header(),
            Bytes::from_static(b"vote"),
        ),
    )
    .await;
    assert!(
        !matches!(allowed, Ok(Err(HandleError::ClusterAuthorization { .. }))),
        "{allowed:?}"
    );
}

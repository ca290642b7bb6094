//! The broker-to-controller APIs (BrokerRegistration, BrokerHeartbeat, AlterPartition,
//! AllocateProducerIds, Envelope) are served on the controller listener only. On a client
//! listener ApiVersions does not list them and a request for one closes the connection without
//! effect, as Kafka's SocketServer does for an API not enabled on a listener; a client cannot
//! move another broker's leaderships away with a forged BrokerHeartbeat (want_shut_down).

mod common;

use std::collections::BTreeMap;
use std::net::TcpStream;
use std::time::Duration;

use common::cluster::*;
use common::{encode_request, raw_call, wait_closed, write_frame};
use strom_protocol::kafka::messages::alter_partition_request::{PartitionData, TopicData};
use strom_protocol::kafka::messages::broker_registration_request::Listener;
use strom_protocol::kafka::messages::*;
use strom_protocol::kafka::protocol::{Encodable, StrBytes};
use strom_protocol::ErrorCode;

const INTERNAL: [ApiKey; 5] = [
    ApiKey::BrokerRegistration,
    ApiKey::BrokerHeartbeat,
    ApiKey::AlterPartition,
    ApiKey::AllocateProducerIds,
    ApiKey::Envelope,
];

fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

fn advertised(port: u16) -> Vec<i16> {
    let mut s = connect(port);
    let resp: ApiVersionsResponse = raw_call(
        &mut s,
        ApiKey::ApiVersions,
        3,
        &ApiVersionsRequest::default(),
    );
    assert_eq!(resp.error_code, 0);
    resp.api_keys.iter().map(|k| k.api_key).collect()
}

/// Sends `req` on a fresh connection to `port` and asserts the broker closes it unanswered.
fn assert_refused<T: Encodable>(port: u16, api: ApiKey, version: i16, req: &T) {
    let mut s = connect(port);
    write_frame(&mut s, &encode_request(api, version, 7, req)).unwrap();
    assert!(
        wait_closed_unanswered(&mut s),
        "{api:?} on the client listener on port {port} was answered"
    );
}

/// True when the peer closes without sending a single byte.
fn wait_closed_unanswered(s: &mut TcpStream) -> bool {
    use std::io::Read;
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = [0u8; 64];
    match s.read(&mut buf) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    }
}

fn topic_id(c: &Cluster, node: i32, topic: &str) -> uuid::Uuid {
    let port = c.nodes.iter().find(|n| n.id == node).unwrap().port;
    let mut s = connect(port);
    let resp: MetadataResponse = raw_call(
        &mut s,
        ApiKey::Metadata,
        12,
        &MetadataRequest::default()
            .with_topics(Some(vec![metadata_request::MetadataRequestTopic::default(
            )
            .with_name(Some(TopicName(StrBytes::from_string(topic.into()))))])),
    );
    resp.topics[0].topic_id
}

/// Kafka's principal serialization for an Envelope: a version (i16), then DefaultPrincipalData.
fn principal(kind: &str, name: &str) -> bytes::Bytes {
    let mut b = 0i16.to_be_bytes().to_vec();
    DefaultPrincipalData::default()
        .with_type(StrBytes::from_string(kind.into()))
        .with_name(StrBytes::from_string(name.into()))
        .encode(&mut b, 0)
        .unwrap();
    b.into()
}

#[test]
fn client_listener_refuses_internal_apis_without_effect() {
    let c = Cluster::start(3);
    eventually("all brokers registered everywhere", || {
        (1..=3)
            .all(|n| metadata(&c, n, "").0.len() == 3 && admin_controller(&c, n) > 0)
            .then_some(())
    });
    create_topic(&c, &[1], "guarded", 3, 3).unwrap();
    let before: BTreeMap<i32, i32> = eventually("leaders of the topic", || {
        let (_, _, leaders) = metadata(&c, 1, "guarded");
        (leaders.len() == 3 && leaders.values().all(|&l| l > 0)).then_some(leaders)
    });
    let id = topic_id(&c, 1, "guarded");
    let isr_before = isr(&c, 1, "guarded");

    for n in &c.nodes {
        // Not advertised on the client listener...
        let keys = advertised(n.port);
        for api in INTERNAL {
            assert!(
                !keys.contains(&(api as i16)),
                "node {} advertises {api:?} on its client listener",
                n.id
            );
        }
        assert!(keys.contains(&(ApiKey::Produce as i16)));
        // ...and refused there: the connection is closed, nothing is answered.
        for (&p, &leader) in &before {
            let _ = p;
            let hb = BrokerHeartbeatRequest::default()
                .with_broker_id(BrokerId(leader))
                .with_broker_epoch(-1)
                .with_want_shut_down(true);
            assert_refused(n.port, ApiKey::BrokerHeartbeat, 0, &hb);
        }
        let ap = AlterPartitionRequest::default()
            .with_broker_id(BrokerId(before[&0]))
            .with_topics(vec![TopicData::default()
                .with_topic_id(id)
                .with_partitions(vec![PartitionData::default()
                    .with_partition_index(0)
                    .with_leader_epoch(0)
                    .with_partition_epoch(0)
                    .with_new_isr(vec![BrokerId(before[&0])])])]);
        assert_refused(n.port, ApiKey::AlterPartition, 2, &ap);
        let reg = BrokerRegistrationRequest::default()
            .with_broker_id(BrokerId(99))
            .with_incarnation_id(uuid::Uuid::new_v4())
            .with_listeners(vec![Listener::default()
                .with_name(StrBytes::from_static_str("PLAINTEXT"))
                .with_host(StrBytes::from_static_str("127.0.0.1"))
                .with_port(1)]);
        assert_refused(n.port, ApiKey::BrokerRegistration, 0, &reg);
        let alloc = AllocateProducerIdsRequest::default().with_broker_id(BrokerId(99));
        assert_refused(n.port, ApiKey::AllocateProducerIds, 0, &alloc);
        let env = EnvelopeRequest::default()
            .with_request_data(bytes::Bytes::from_static(b"x"))
            .with_client_host_address(bytes::Bytes::from_static(&[127, 0, 0, 1]));
        assert_refused(n.port, ApiKey::Envelope, 0, &env);
    }

    // Nothing moved: the same leaders, the same ISR, no broker 99, and every node still
    // serves clients.
    std::thread::sleep(Duration::from_millis(500));
    for n in 1..=3 {
        let (brokers, _, leaders) = metadata(&c, n, "guarded");
        assert_eq!(leaders, before, "leaders as node {n} reports them");
        assert!(!brokers.contains(&99), "{brokers:?}");
    }
    assert_eq!(isr(&c, 1, "guarded"), isr_before);
    produce(&c, "guarded", 30);
    assert_eq!(consume_count(&c, &[1, 2, 3], "guarded", 3, 30), 30);
}

#[test]
fn controller_listener_serves_the_internal_apis() {
    let c = Cluster::start(3);
    let active = eventually("an active controller and every broker registered", || {
        let id = admin_controller(&c, 1);
        (id > 0 && metadata(&c, 1, "").0.len() == 3).then_some(id)
    });
    let port = c.controller_ports[&active];
    let keys = advertised(port);
    for api in INTERNAL {
        assert!(
            keys.contains(&(api as i16)),
            "{api:?} not on the controller listener"
        );
    }
    // The data-plane APIs are not served there.
    assert!(!keys.contains(&(ApiKey::Produce as i16)));
    assert!(!keys.contains(&(ApiKey::Fetch as i16)));
    // A heartbeat is answered; one that does not carry the broker's registered epoch is
    // STALE_BROKER_EPOCH and changes nothing (Kafka's `checkBrokerEpoch`).
    let mut s = connect(port);
    let resp: BrokerHeartbeatResponse = raw_call(
        &mut s,
        ApiKey::BrokerHeartbeat,
        0,
        &BrokerHeartbeatRequest::default()
            .with_broker_id(BrokerId(active))
            .with_broker_epoch(-1),
    );
    assert_eq!(resp.error_code, ErrorCode::StaleBrokerEpoch.code());
    // Kafka's `ClusterControlManager.registerBroker`: a broker formatted for another cluster
    // is INCONSISTENT_CLUSTER_ID; another incarnation of a live broker may not register
    // (DUPLICATE_BROKER_REGISTRATION).
    let cluster_id = {
        let port = c.nodes.iter().find(|n| n.id == active).unwrap().port;
        let md: MetadataResponse = raw_call(
            &mut connect(port),
            ApiKey::Metadata,
            12,
            &MetadataRequest::default().with_topics(Some(vec![])),
        );
        md.cluster_id.expect("a cluster id").to_string()
    };
    let register = |s: &mut TcpStream, cluster: &str| -> BrokerRegistrationResponse {
        raw_call(
            s,
            ApiKey::BrokerRegistration,
            3,
            &BrokerRegistrationRequest::default()
                .with_broker_id(BrokerId(active))
                .with_cluster_id(StrBytes::from_string(cluster.to_string()))
                .with_incarnation_id(uuid::Uuid::new_v4())
                .with_listeners(vec![Listener::default()
                    .with_name(StrBytes::from_static_str("PLAINTEXT"))
                    .with_host(StrBytes::from_static_str("127.0.0.1"))
                    .with_port(1)]),
        )
    };
    let resp = register(&mut s, "another-cluster");
    assert_eq!(
        (resp.error_code, resp.broker_epoch),
        (ErrorCode::InconsistentClusterId.code(), -1)
    );
    let resp = register(&mut s, &cluster_id);
    assert_eq!(
        (resp.error_code, resp.broker_epoch),
        (ErrorCode::DuplicateBrokerRegistration.code(), -1)
    );
    assert_eq!(metadata(&c, 1, "").0.len(), 3, "nothing changed");
    // An admin request on a node that is not the active controller is forwarded there in an
    // Envelope and answered with the controller's result, not NOT_CONTROLLER.
    let other = c.nodes.iter().find(|n| n.id != active).unwrap();
    let mut s = connect(other.port);
    let create = CreateTopicsRequest::default()
        .with_timeout_ms(10_000)
        .with_topics(vec![create_topics_request::CreatableTopic::default()
            .with_name(TopicName(StrBytes::from_static_str("forwarded")))
            .with_num_partitions(2)
            .with_replication_factor(3)]);
    let resp: CreateTopicsResponse = raw_call(&mut s, ApiKey::CreateTopics, 7, &create);
    assert_eq!(resp.topics[0].error_code, 0, "{resp:?}");
    assert_eq!(resp.topics[0].num_partitions, 2);
    // Envelope itself is served on the controller listener only.
    let mut s = connect(port);
    let inner = encode_request(ApiKey::CreateTopics, 7, 5, &create);
    let env = EnvelopeRequest::default()
        .with_request_data(bytes::Bytes::from(inner))
        .with_request_principal(Some(principal("User", "alice")))
        .with_client_host_address(bytes::Bytes::from_static(&[127, 0, 0, 1]));
    let resp: EnvelopeResponse = raw_call(&mut s, ApiKey::Envelope, 0, &env);
    assert_eq!(resp.error_code, 0, "{resp:?}");
    assert!(resp.response_data.is_some());

    // And a Produce there closes the connection, as an internal API does on a client listener.
    let p = ProduceRequest::default().with_acks(1).with_timeout_ms(1000);
    let mut s = connect(port);
    write_frame(&mut s, &encode_request(ApiKey::Produce, 9, 1, &p)).unwrap();
    assert!(wait_closed(&mut s, Duration::from_secs(10)));
}

//! The group coordinator inside real `strom` processes: FindCoordinator from a client creates
//! `__consumer_offsets` as Kafka does (50 partitions, RF 1 on a single node and 3 on three
//! nodes, compacted, internal, not writable by clients) and names the leader of the group's
//! partition; the group APIs are advertised at Kafka 4.4's ranges.

mod common;

use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{raw_call, Broker};
use strom_group_coordinator::topic::{partition_for, GROUP_METADATA_TOPIC_NAME};
use strom_protocol::kafka::messages::describe_configs_request::DescribeConfigsResource;
use strom_protocol::kafka::messages::metadata_request::MetadataRequestTopic;
use strom_protocol::kafka::messages::produce_request::{PartitionProduceData, TopicProduceData};
use strom_protocol::kafka::messages::*;
use strom_protocol::kafka::protocol::StrBytes;

fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// FindCoordinator v3 for `group` until it names a node (the first answers are
/// COORDINATOR_NOT_AVAILABLE while the topic is created and its leaders elected, which a
/// client retries). Returns the node and how many retriable answers came first.
fn find_coordinator(port: u16, group: &str) -> (FindCoordinatorResponse, usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut retries = 0;
    loop {
        let mut c = connect(port);
        let r: FindCoordinatorResponse = raw_call(
            &mut c,
            ApiKey::FindCoordinator,
            3,
            &FindCoordinatorRequest::default()
                .with_key(s(group))
                .with_key_type(0),
        );
        if r.error_code == 0 {
            return (r, retries);
        }
        assert_eq!(
            r.error_code, 15,
            "only COORDINATOR_NOT_AVAILABLE is retriable here"
        );
        assert!(Instant::now() < deadline, "no coordinator for {group}");
        retries += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn offsets_topic(port: u16) -> metadata_response::MetadataResponseTopic {
    let mut c = connect(port);
    let r: MetadataResponse = raw_call(
        &mut c,
        ApiKey::Metadata,
        12,
        &MetadataRequest::default()
            .with_topics(Some(vec![MetadataRequestTopic::default()
                .with_name(Some(TopicName(s(GROUP_METADATA_TOPIC_NAME))))]))
            .with_allow_auto_topic_creation(false),
    );
    let t = r.topics.into_iter().next().unwrap();
    assert_eq!(t.error_code, 0);
    t
}

fn broker_count(port: u16) -> usize {
    let mut c = connect(port);
    let r: MetadataResponse = raw_call(
        &mut c,
        ApiKey::Metadata,
        12,
        &MetadataRequest::default().with_topics(Some(vec![])),
    );
    r.brokers.len()
}

#[test]
fn find_coordinator_creates_the_offsets_topic_on_a_single_node() {
    let b = Broker::start();
    let port = b.port();

    // The group APIs at Kafka 4.4's ranges (clamped to what the protocol structs decode).
    let mut c = connect(port);
    let v: ApiVersionsResponse = raw_call(
        &mut c,
        ApiKey::ApiVersions,
        3,
        &ApiVersionsRequest::default(),
    );
    let range = |k: ApiKey| {
        v.api_keys
            .iter()
            .find(|a| a.api_key == k as i16)
            .map(|a| (a.min_version, a.max_version))
    };
    for (k, want) in [
        (ApiKey::FindCoordinator, (0, 6)),
        (ApiKey::JoinGroup, (0, 9)),
        (ApiKey::SyncGroup, (0, 5)),
        (ApiKey::Heartbeat, (0, 4)),
        (ApiKey::LeaveGroup, (0, 5)),
        (ApiKey::OffsetCommit, (2, 9)),
        (ApiKey::OffsetFetch, (1, 9)),
        (ApiKey::DescribeGroups, (0, 6)),
        (ApiKey::ListGroups, (0, 5)),
        (ApiKey::DeleteGroups, (0, 2)),
        (ApiKey::OffsetDelete, (0, 0)),
        (ApiKey::ConsumerGroupHeartbeat, (0, 1)),
        (ApiKey::ConsumerGroupDescribe, (0, 1)),
    ] {
        assert_eq!(range(k), Some(want), "{k:?}");
    }

    let (r, retries) = find_coordinator(port, "my-group");
    assert!(
        retries >= 1,
        "the first FindCoordinator answers COORDINATOR_NOT_AVAILABLE"
    );
    assert_eq!((r.node_id.0, r.port), (1, port as i32));
    assert_eq!(r.error_message.as_deref(), Some("NONE"));

    // Every partition's coordinator shard was loaded on election.
    let deadline = Instant::now() + Duration::from_secs(30);
    while b.logs().matches("coordinator loaded").count() < 50 {
        assert!(Instant::now() < deadline, "shards loaded: {}", b.logs());
        std::thread::sleep(Duration::from_millis(100));
    }

    let t = offsets_topic(port);
    assert!(t.is_internal);
    assert_eq!(t.partitions.len(), 50);
    assert!(t.partitions.iter().all(|p| p.replica_nodes.len() == 1));

    let mut c = connect(port);
    let d: DescribeConfigsResponse = raw_call(
        &mut c,
        ApiKey::DescribeConfigs,
        4,
        &DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(s(GROUP_METADATA_TOPIC_NAME))
            .with_configuration_keys(Some(vec![s("cleanup.policy"), s("segment.bytes")]))]),
    );
    let configs: Vec<(String, String)> = d.results[0]
        .configs
        .iter()
        .map(|c| {
            (
                c.name.to_string(),
                c.value.as_deref().unwrap_or("").to_string(),
            )
        })
        .collect();
    assert!(
        configs.contains(&("cleanup.policy".into(), "compact".into())),
        "{configs:?}"
    );
    assert!(
        configs.contains(&("segment.bytes".into(), "104857600".into())),
        "{configs:?}"
    );

    // The broker's group coordinator settings, at Kafka's defaults and types.
    let mut c = connect(port);
    let d: DescribeConfigsResponse = raw_call(
        &mut c,
        ApiKey::DescribeConfigs,
        4,
        &DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(4)
            .with_resource_name(s("1"))
            .with_configuration_keys(Some(vec![
                s("offsets.topic.num.partitions"),
                s("offsets.topic.replication.factor"),
                s("group.consumer.assignors"),
            ]))]),
    );
    let got: Vec<(String, String, i8, i8)> = d.results[0]
        .configs
        .iter()
        .map(|c| {
            (
                c.name.to_string(),
                c.value.as_deref().unwrap_or("").to_string(),
                c.config_source,
                c.config_type,
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (
                "group.consumer.assignors".into(),
                "uniform,range".into(),
                5,
                7
            ),
            ("offsets.topic.num.partitions".into(), "50".into(), 5, 3),
            ("offsets.topic.replication.factor".into(), "3".into(), 5, 4),
        ]
    );

    // A client may not write the coordinator's log (Kafka: INVALID_TOPIC_EXCEPTION).
    let mut c = connect(port);
    let p: ProduceResponse = raw_call(
        &mut c,
        ApiKey::Produce,
        9,
        &ProduceRequest::default()
            .with_acks(1)
            .with_timeout_ms(5000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(TopicName(s(GROUP_METADATA_TOPIC_NAME)))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(0)
                    .with_records(Some(
                        strom_protocol::testing::value_batch(1, 0).into(),
                    ))])]),
    );
    assert_eq!(p.responses[0].partition_responses[0].error_code, 17);

    // Batched FindCoordinator (v4+) names the same node for every key.
    let mut c = connect(port);
    let r: FindCoordinatorResponse = raw_call(
        &mut c,
        ApiKey::FindCoordinator,
        6,
        &FindCoordinatorRequest::default()
            .with_key_type(0)
            .with_coordinator_keys(vec![s("a"), s("b"), s("c")]),
    );
    assert_eq!(r.coordinators.len(), 3);
    assert!(r
        .coordinators
        .iter()
        .all(|c| c.error_code == 0 && c.node_id.0 == 1));

    // A clean shutdown unloads the shards; after a restart they load again from the log.
    let mut b = b;
    common::assert_clean_exit(b.stop());
    b.restart();
    let (r, _) = find_coordinator(b.port(), "my-group");
    assert_eq!(r.node_id.0, 1);
    let deadline = Instant::now() + Duration::from_secs(30);
    while b.logs().matches("coordinator loaded").count() < 100 {
        assert!(Instant::now() < deadline, "shards reloaded: {}", b.logs());
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn on_three_nodes_the_coordinator_is_the_leader_of_the_groups_partition() {
    let c = common::cluster::Cluster::start(3);
    let port = c.nodes[0].port;
    let deadline = Instant::now() + Duration::from_secs(30);
    while broker_count(port) < 3 {
        assert!(Instant::now() < deadline, "three brokers never registered");
        std::thread::sleep(Duration::from_millis(100));
    }
    for group in ["g-1", "orders", "console-consumer-12345"] {
        let (r, _) = find_coordinator(port, group);
        let t = offsets_topic(port);
        assert_eq!(t.partitions.len(), 50);
        assert!(t.partitions.iter().all(|p| p.replica_nodes.len() == 3));
        let p = partition_for(group, 50);
        let leader = t
            .partitions
            .iter()
            .find(|x| x.partition_index == p)
            .map(|x| x.leader_id.0)
            .unwrap();
        assert_eq!(r.node_id.0, leader, "{group} lives on partition {p}");
        let node = c.nodes.iter().find(|n| n.id == leader).unwrap();
        assert_eq!(r.port, node.port as i32);
        // Every broker names the same coordinator.
        for n in &c.nodes {
            assert_eq!(find_coordinator(n.port, group).0.node_id.0, leader);
        }
    }
}

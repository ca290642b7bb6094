//! New partitions with a node down (defect 3 of issue 9): in a 3-node cluster with one node
//! SIGKILLed and fenced, every partition created by CreateTopics, CreatePartitions, a manual
//! assignment or auto-creation (Metadata and produce) is led by a live node with an ISR of live
//! nodes only, and takes produce and consume on every partition; a replication factor the live
//! nodes cannot reach is INVALID_REPLICATION_FACTOR, as in Kafka.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::cluster::*;
use rdkafka::admin::{AdminClient, AdminOptions, NewPartitions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;
use strom_protocol::kafka::messages::metadata_request::MetadataRequestTopic;
use strom_protocol::kafka::messages::{ApiKey, MetadataRequest, MetadataResponse, TopicName};
use strom_protocol::kafka::protocol::StrBytes;

/// A raw Metadata v12 for `topic` through `node`; `auto_create` asks for auto-creation.
fn raw_metadata(c: &Cluster, node: i32, topic: &str, auto_create: bool) -> MetadataResponse {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port_of(c, node))).unwrap();
    let req = MetadataRequest::default()
        .with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(
            TopicName(StrBytes::from_string(topic.to_string())),
        ))]))
        .with_allow_auto_topic_creation(auto_create);
    common::raw_call(&mut s, ApiKey::Metadata, 12, &req)
}

/// partition -> (leader, replicas, ISR) as `node` reports them; empty while it does not know
/// the topic (or some partition has no leader yet).
fn partitions(c: &Cluster, node: i32, topic: &str) -> BTreeMap<i32, Part> {
    let resp = raw_metadata(c, node, topic, false);
    registrations(&resp)
}

/// Waits until `node` knows all `count` partitions of `topic`, then checks each is led by a
/// live node and has only live nodes in its ISR (and, placed automatically, as replicas).
fn check_live(
    c: &Cluster,
    node: i32,
    topic: &str,
    count: usize,
    live: &[i32],
    automatic: bool,
) -> BTreeMap<i32, Part> {
    let parts = eventually(&format!("{count} partitions of {topic}"), || {
        let p = partitions(c, node, topic);
        (p.len() == count).then_some(p)
    });
    for (i, p) in &parts {
        assert!(
            live.contains(&p.leader),
            "{topic}-{i} led by a dead node: {p:?}"
        );
        assert!(
            !p.isr.is_empty() && p.isr.iter().all(|b| live.contains(b)),
            "{topic}-{i}: ISR not all live: {p:?}"
        );
        if automatic {
            assert!(
                p.replicas.iter().all(|b| live.contains(b)),
                "{topic}-{i} placed on a dead node: {p:?}"
            );
            assert_eq!(p.isr, p.replicas, "{topic}-{i}");
        }
    }
    parts
}

/// `per` records with acks=all to every partition of `topic`, through the live nodes only, all
/// acknowledged; then every one of them consumed back.
fn produce_and_consume(c: &Cluster, live: &[i32], topic: &str, partitions: i32, per: usize) {
    let p: ThreadedProducer<DefaultProducerContext> = c
        .config(live)
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("message.timeout.ms", "30000")
        .create()
        .unwrap();
    for part in 0..partitions {
        for i in 0..per {
            let v = format!("{topic}-{part}-{i}");
            p.send(
                BaseRecord::<str, str>::to(topic)
                    .payload(&v)
                    .partition(part),
            )
            .map_err(|(e, _)| e)
            .unwrap();
        }
    }
    assert_eq!(
        p.flush(Duration::from_secs(60)),
        Ok(()),
        "produce to {topic}"
    );
    let expect = partitions as usize * per;
    assert_eq!(
        consume_count(c, live, topic, partitions, expect),
        expect,
        "{topic}"
    );
}

fn create(c: &Cluster, live: &[i32], topic: NewTopic) -> Result<(), RDKafkaErrorCode> {
    let admin: AdminClient<DefaultClientContext> = c.config(live).create().unwrap();
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let r = common::block_on(admin.create_topics([&topic], &opts)).expect("CreateTopics");
    r.into_iter()
        .next()
        .unwrap()
        .map(|_| ())
        .map_err(|(_, e)| e)
}

#[test]
fn topics_created_with_a_node_down_are_fully_available() {
    let c_settings = [
        "broker.session.timeout.ms=3000",
        "broker.heartbeat.interval.ms=500",
        "replica.fetch.wait.max.ms=100",
        "num.partitions=6",
        "default.replication.factor=2",
    ];
    let mut c = Cluster::start_with(3, &c_settings);
    wait_all_registered(&c, 3);
    // Kill a node that is not the active controller, so the cluster needs no failover.
    let controller = eventually("an active controller", || {
        let id = admin_controller(&c, 1);
        (id > 0).then_some(id)
    });
    let victim = (1..=3).rev().find(|&n| n != controller).unwrap();
    let live: Vec<i32> = (1..=3).filter(|&n| n != victim).collect();
    let via = live[0];
    c.kill(victim);
    // Metadata lists unfenced brokers only: the victim's session has expired once it is gone.
    eventually("the killed node fenced", || {
        live.iter()
            .all(|&n| {
                let brokers: Vec<i32> = metadata(&c, n, "").0;
                brokers.len() == 2 && !brokers.contains(&victim)
            })
            .then_some(())
    });

    // CreateTopics: RF 2 fits on the live nodes, RF 3 does not.
    create(
        &c,
        &live,
        NewTopic::new("rf2", 6, TopicReplication::Fixed(2)),
    )
    .unwrap();
    check_live(&c, via, "rf2", 6, &live, true);
    assert_eq!(
        create(
            &c,
            &live,
            NewTopic::new("rf3", 1, TopicReplication::Fixed(3))
        ),
        Err(RDKafkaErrorCode::InvalidReplicationFactor)
    );
    assert!(partitions(&c, via, "rf3").is_empty(), "rf3 was not created");

    // CreatePartitions places the new partitions on live nodes too.
    let admin: AdminClient<DefaultClientContext> = c.config(&live).create().unwrap();
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let r = common::block_on(admin.create_partitions([&NewPartitions::new("rf2", 10)], &opts))
        .expect("CreatePartitions");
    assert!(r[0].is_ok(), "{r:?}");
    check_live(&c, via, "rf2", 10, &live, true);

    // A manual assignment naming the dead node: it stays a replica, out of the ISR, and the
    // first live replica leads.
    let assignment: Vec<Vec<i32>> = vec![
        vec![victim, live[0], live[1]],
        vec![victim, live[1], live[0]],
    ];
    let refs: Vec<&[i32]> = assignment.iter().map(Vec::as_slice).collect();
    create(
        &c,
        &live,
        NewTopic::new("manual", 2, TopicReplication::Variable(&refs)),
    )
    .unwrap();
    let parts = check_live(&c, via, "manual", 2, &live, false);
    assert_eq!(parts[&0].leader, live[0]);
    assert_eq!(parts[&1].leader, live[1]);
    assert_eq!(parts[&0].isr, vec![live[0], live[1]]);
    // Only the dead node: refused.
    let dead_only: &[&[i32]] = &[&[victim]];
    assert_eq!(
        create(
            &c,
            &live,
            NewTopic::new("dead-only", 1, TopicReplication::Variable(dead_only))
        ),
        Err(RDKafkaErrorCode::InvalidReplicaAssignment)
    );

    // Auto-creation by a Metadata request (through each live node) and by a produce.
    for &n in &live {
        let name = format!("auto-md-{n}");
        raw_metadata(&c, n, &name, true);
        check_live(&c, n, &name, 6, &live, true);
    }
    {
        let p: ThreadedProducer<DefaultProducerContext> = c
            .config(&live)
            .set("message.timeout.ms", "30000")
            .create()
            .unwrap();
        p.send(BaseRecord::<str, str>::to("auto-produce").payload("first"))
            .map_err(|(e, _)| e)
            .unwrap();
        assert_eq!(p.flush(Duration::from_secs(60)), Ok(()));
    }
    check_live(&c, via, "auto-produce", 6, &live, true);

    for (topic, n) in [
        ("rf2", 10),
        ("manual", 2),
        ("auto-md-1", 6),
        ("auto-produce", 6),
    ] {
        let topic = if topic == "auto-md-1" {
            format!("auto-md-{}", live[0])
        } else {
            topic.to_string()
        };
        produce_and_consume(&c, &live, &topic, n, 5);
    }
}

//! Leader elections in a 3-node cluster: a topic created with `strom topics create
//! --replica-assignment` gets exactly those replicas, its first replicas leading; after the
//! preferred leader is SIGKILLed and comes back into the ISR, ElectLeaders PREFERRED moves
//! leadership back to it (ELECTION_NOT_NEEDED when the preferred replica already leads); with
//! `auto.leader.rebalance.enable` the controller does the same by itself.

mod common;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use common::cluster::*;
use strom_protocol::kafka::messages::elect_leaders_request::TopicPartitions;
use strom_protocol::kafka::messages::metadata_request::MetadataRequestTopic;
use strom_protocol::kafka::messages::{
    ApiKey, ElectLeadersRequest, ElectLeadersResponse, MetadataRequest, MetadataResponse, TopicName,
};
use strom_protocol::kafka::protocol::StrBytes;

const FAST: &[&str] = &[
    "broker.session.timeout.ms=3000",
    "broker.heartbeat.interval.ms=500",
    "replica.fetch.wait.max.ms=100",
];

fn topic_name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

/// partition -> (leader, replicas, isr) as `node` reports them (Metadata v12, raw).
fn partitions(c: &Cluster, node: i32, topic: &str) -> BTreeMap<i32, Part> {
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port_of(c, node))) else {
        return BTreeMap::new();
    };
    let req = MetadataRequest::default().with_topics(Some(vec![
        MetadataRequestTopic::default().with_name(Some(topic_name(topic)))
    ]));
    let resp: MetadataResponse = common::raw_call(&mut s, ApiKey::Metadata, 12, &req);
    registrations(&resp)
}

/// Polls `node`'s metadata for `topic` until `ok` holds, for up to `secs` seconds.
fn wait_for(
    c: &Cluster,
    node: i32,
    topic: &str,
    secs: u64,
    what: &str,
    ok: impl Fn(&BTreeMap<i32, Part>) -> bool,
) -> BTreeMap<i32, Part> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let p = partitions(c, node, topic);
        if ok(&p) {
            return p;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {p:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A raw ElectLeaders; `partitions` `None` asks for every partition.
fn elect(
    c: &Cluster,
    node: i32,
    version: i16,
    election_type: i8,
    partitions: Option<Vec<(&str, Vec<i32>)>>,
) -> ElectLeadersResponse {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port_of(c, node))).unwrap();
    let req = ElectLeadersRequest::default()
        .with_election_type(election_type)
        .with_timeout_ms(10_000)
        .with_topic_partitions(partitions.map(|ps| {
            ps.into_iter()
                .map(|(t, p)| {
                    TopicPartitions::default()
                        .with_topic(topic_name(t))
                        .with_partitions(p)
                })
                .collect()
        }));
    common::raw_call(&mut s, ApiKey::ElectLeaders, version, &req)
}

/// `(topic, partition) -> error code` of an ElectLeaders answer.
fn codes(resp: &ElectLeadersResponse) -> BTreeMap<(String, i32), i16> {
    resp.replica_election_results
        .iter()
        .flat_map(|t| {
            t.partition_result
                .iter()
                .map(move |p| ((t.topic.0.to_string(), p.partition_id), p.error_code))
        })
        .collect()
}

/// Waits until `node`'s Metadata lists all three brokers (registered and unfenced).
fn wait_brokers(c: &Cluster, node: i32) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port_of(c, node))).unwrap();
        let req = MetadataRequest::default().with_topics(Some(vec![]));
        let resp: MetadataResponse = common::raw_call(&mut s, ApiKey::Metadata, 12, &req);
        if resp.brokers.len() == 3 {
            return;
        }
        assert!(Instant::now() < deadline, "brokers never registered");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn cli_create(c: &Cluster, topic: &str, assignment: &str) {
    wait_brokers(c, 2);
    let out = Command::new(env!("CARGO_BIN_EXE_strom"))
        .args(["topics", "create", "--bootstrap-server", &c.bootstrap(&[2])])
        .args(["--topic", topic, "--replica-assignment", assignment])
        .output()
        .expect("run strom topics");
    assert!(
        out.status.success(),
        "strom topics create failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn expected_assignment() -> BTreeMap<i32, Vec<i32>> {
    BTreeMap::from([(0, vec![1, 2]), (1, vec![2, 3]), (2, vec![3, 1])])
}

fn assigned_and_preferred(p: &BTreeMap<i32, Part>) -> bool {
    let want = expected_assignment();
    p.len() == 3
        && p.iter().all(|(i, part)| {
            part.replicas == want[i] && part.leader == want[i][0] && part.isr.len() == 2
        })
}

/// Kills broker 1 (preferred leader of partition 0), waits for 2 to take over, restarts 1 and
/// waits until it is back in partition 0's ISR.
fn kill_and_return_preferred_leader(c: &mut Cluster, topic: &str) {
    c.kill(1);
    wait_for(c, 2, topic, 30, "broker 2 to lead partition 0", |p| {
        p.get(&0).is_some_and(|x| x.leader == 2 && x.isr == vec![2])
    });
    c.restart(1);
    wait_for(
        c,
        2,
        topic,
        30,
        "broker 1 back in the ISR of partition 0",
        |p| p.get(&0).is_some_and(|x| x.isr.contains(&1)),
    );
}

#[test]
fn replica_assignment_and_preferred_election() {
    let mut settings = FAST.to_vec();
    settings.push("auto.leader.rebalance.enable=false");
    let mut c = Cluster::start_with(3, &settings);
    let topic = "elect";
    cli_create(&c, topic, "1:2,2:3,3:1");
    for node in 1..=3 {
        wait_for(
            &c,
            node,
            topic,
            30,
            "the assignment on every node",
            assigned_and_preferred,
        );
    }

    // Every partition is led by its preferred replica: nothing to do.
    let r = elect(&c, 3, 2, 0, Some(vec![(topic, vec![0, 1, 2, 7])]));
    assert_eq!(r.error_code, 0);
    let got = codes(&r);
    for p in 0..3 {
        assert_eq!(
            got[&(topic.to_string(), p)],
            84,
            "ELECTION_NOT_NEEDED for {p}: {got:?}"
        );
    }
    assert_eq!(
        got[&(topic.to_string(), 7)],
        3,
        "UNKNOWN_TOPIC_OR_PARTITION: {got:?}"
    );
    let r = elect(&c, 1, 2, 0, Some(vec![("no-such-topic", vec![0])]));
    assert_eq!(codes(&r)[&("no-such-topic".to_string(), 0)], 3);
    // UNCLEAN with a leader in place: not needed either; v0 (always PREFERRED) likewise.
    let r = elect(&c, 2, 1, 1, Some(vec![(topic, vec![1])]));
    assert_eq!(codes(&r)[&(topic.to_string(), 1)], 84);
    let r = elect(&c, 2, 0, 0, Some(vec![(topic, vec![2])]));
    assert_eq!(codes(&r)[&(topic.to_string(), 2)], 84);
    // All partitions (null): the ones needing no election are left out.
    let r = elect(&c, 1, 2, 0, None);
    assert_eq!(r.error_code, 0);
    assert!(codes(&r).is_empty(), "{:?}", codes(&r));

    kill_and_return_preferred_leader(&mut c, topic);
    // Still led by 2: auto rebalance is off.
    assert_eq!(partitions(&c, 2, topic)[&0].leader, 2);

    // The preferred replica may need a moment to be unfenced; until then the election cannot
    // pick it (PREFERRED_LEADER_NOT_AVAILABLE).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = elect(&c, 3, 2, 0, Some(vec![(topic, vec![0])]));
        assert_eq!(r.error_code, 0);
        let code = codes(&r)[&(topic.to_string(), 0)];
        if code == 0 {
            break;
        }
        assert_eq!(
            code, 80,
            "only PREFERRED_LEADER_NOT_AVAILABLE may precede success"
        );
        assert!(
            Instant::now() < deadline,
            "preferred election never succeeded"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    for node in 1..=3 {
        wait_for(
            &c,
            node,
            topic,
            30,
            "broker 1 leading partition 0 again",
            |p| p.get(&0).is_some_and(|x| x.leader == 1),
        );
    }
    let r = elect(&c, 2, 2, 0, Some(vec![(topic, vec![0])]));
    assert_eq!(codes(&r)[&(topic.to_string(), 0)], 84);
}

#[test]
fn auto_leader_rebalance_moves_leaders_back() {
    let mut settings = FAST.to_vec();
    settings.push("leader.imbalance.check.interval.seconds=1");
    let mut c = Cluster::start_with(3, &settings);
    let topic = "rebalance";
    cli_create(&c, topic, "1:2,2:3,3:1");
    wait_for(&c, 1, topic, 30, "the assignment", assigned_and_preferred);
    kill_and_return_preferred_leader(&mut c, topic);
    for node in 1..=3 {
        wait_for(
            &c,
            node,
            topic,
            30,
            "the controller to move leadership back",
            |p| p.get(&0).is_some_and(|x| x.leader == 1),
        );
    }
}

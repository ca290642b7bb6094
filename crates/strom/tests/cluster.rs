//! A 3-node cluster on loopback: every node a Raft controller voter and a broker. Metadata is
//! the same on every node, admin requests sent to any node reach the active controller, data
//! goes to the partition leaders, and the cluster survives a SIGKILL of the active controller
//! (a new one is elected, the killed node catches up when it restarts); with replication factor
//! 3 and min.insync.replicas 2, a SIGKILL of the partition leader under an acks=all producer
//! loses no acknowledged record, and the replicas agree byte for byte afterwards. A restarted
//! node answers for its partitions only once it has caught up with the metadata.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::block_on;
use common::cluster::*;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
use rdkafka::{Message, Offset, TopicPartitionList};

#[test]
fn three_nodes_share_metadata_and_survive_a_controller_kill() {
    let t0 = Instant::now();
    let step = |what: &str| eprintln!("[{:>6.1}s] {what}", t0.elapsed().as_secs_f64());
    // The restarted controller is a new incarnation: it registers once the session the new
    // active controller gave its previous incarnation (a full one, from the failover) expired
    // (Kafka's DUPLICATE_BROKER_REGISTRATION): a short session keeps that wait short.
    let mut c = Cluster::start_with(
        3,
        &[
            "broker.session.timeout.ms=3000",
            "broker.heartbeat.interval.ms=500",
        ],
    );
    step("started");
    eventually("all brokers registered everywhere", || {
        (1..=3)
            .all(|n| metadata(&c, n, "").0.len() == 3 && admin_controller(&c, n) > 0)
            .then_some(())
    });
    step("registered");
    // Created through a node that may not be the active controller: forwarded.
    create_topic(&c, &[2], "spread", 6, 1).unwrap();
    let leaders = eventually("the topic on every node", || {
        let views: Vec<_> = (1..=3).map(|n| metadata(&c, n, "spread")).collect();
        let same = views
            .iter()
            .all(|v| v.2.len() == 6 && v.2 == views[0].2 && v.1 == views[0].1);
        same.then(|| views[0].2.clone())
    });
    let led: std::collections::BTreeSet<i32> = leaders.values().copied().collect();
    assert_eq!(led.len(), 3, "leaders spread over the brokers: {leaders:?}");
    assert!(create_topic(&c, &[1], "too-many", 3, 4)
        .unwrap_err()
        .contains("InvalidReplicationFactor"));

    step("topic everywhere");
    produce(&c, "spread", 3000);
    step("produced");
    assert_eq!(consume_count(&c, &[1, 2, 3], "spread", 6, 3000), 3000);

    step("produced and consumed");
    // SIGKILL the active controller: another is elected and the cluster goes on.
    let old = admin_controller(&c, 1);
    c.kill(old);
    let others: Vec<i32> = (1..=3).filter(|&n| n != old).collect();
    let new = eventually("a new controller", || {
        let ids: Vec<i32> = others.iter().map(|&n| admin_controller(&c, n)).collect();
        (ids.iter().all(|&i| i > 0 && i != old && i == ids[0])).then_some(ids[0])
    });
    assert_ne!(new, old);
    eventually("a topic created after the failover", || {
        create_topic(&c, &others, "after", 2, 1).ok()
    });

    step("failover done");
    // The killed node restarts, catches up on the metadata log and serves its partitions again.
    c.restart(old);
    eventually("the restarted node knows the new topic", || {
        (metadata(&c, old, "after").2.len() == 2).then_some(())
    });
    assert_eq!(consume_count(&c, &[old], "spread", 6, 3000), 3000);
}

#[test]
fn leader_kill_under_acks_all_loses_nothing() {
    let mut c = Cluster::start_with(
        3,
        &[
            "broker.session.timeout.ms=3000",
            "broker.heartbeat.interval.ms=500",
            "replica.fetch.wait.max.ms=100",
        ],
    );
    wait_all_registered(&c, 3);
    let admin: AdminClient<DefaultClientContext> = c.config(&[1, 2, 3]).create().unwrap();
    let topic = NewTopic::new("r3", 1, TopicReplication::Fixed(3)).set("min.insync.replicas", "2");
    let r = block_on(admin.create_topics([&topic], &AdminOptions::new())).unwrap();
    assert!(r[0].is_ok(), "{r:?}");
    let leader = eventually("a leader for r3", || {
        let l = metadata(&c, 1, "r3").2.get(&0).copied().unwrap_or(-1);
        (l > 0).then_some(l)
    });

    // An idempotent acks=all producer writes while the leader is killed part-way.
    let acked = std::sync::Arc::new(std::sync::Mutex::new(Vec::<(i64, String)>::new()));
    struct Ctx(std::sync::Arc<std::sync::Mutex<Vec<(i64, String)>>>);
    impl rdkafka::ClientContext for Ctx {}
    impl rdkafka::producer::ProducerContext for Ctx {
        type DeliveryOpaque = ();
        fn delivery(&self, r: &rdkafka::message::DeliveryResult<'_>, _: ()) {
            if let Ok(m) = r {
                let v = String::from_utf8(m.payload().unwrap().to_vec()).unwrap();
                self.0.lock().unwrap().push((m.offset(), v));
            }
        }
    }
    let p: ThreadedProducer<Ctx> = c
        .config(&[1, 2, 3])
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("linger.ms", "2")
        .set("message.timeout.ms", "60000")
        .create_with_context(Ctx(acked.clone()))
        .unwrap();
    const N: usize = 50_000;
    for i in 0..N {
        if i == N / 4 {
            // Kill a leader in steady acknowledged traffic, not one still answering its first
            // requests.
            let deadline = Instant::now() + Duration::from_secs(30);
            while acked.lock().unwrap().len() < N / 16 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            c.kill(leader);
        }
        let v = format!("seq-{i}");
        let mut rec = BaseRecord::<str, str>::to("r3").payload(&v).partition(0);
        loop {
            match p.send(rec) {
                Ok(()) => break,
                Err((_, back)) => {
                    rec = back;
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
        }
    }
    assert_eq!(p.flush(Duration::from_secs(90)), Ok(()));
    let acked = acked.lock().unwrap().clone();
    assert_eq!(
        acked.len(),
        N,
        "every record acknowledged (idempotent retries)"
    );
    let survivors: Vec<i32> = (1..=3).filter(|&n| n != leader).collect();
    let new_leader = metadata(&c, survivors[0], "r3").2[&0];
    assert!(
        survivors.contains(&new_leader),
        "a new leader from the ISR: {new_leader}"
    );

    // Every acknowledged record exactly once, in order, at its acknowledged offset.
    let consumer: BaseConsumer = consumer_config(&c, &survivors).create().unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset("r3", 0, Offset::Beginning)
        .unwrap();
    consumer.assign(&tpl).unwrap();
    let mut got: Vec<(i64, String)> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while got.len() < N && Instant::now() < deadline {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
            got.push((
                m.offset(),
                String::from_utf8(m.payload().unwrap().to_vec()).unwrap(),
            ));
        }
    }
    assert_eq!(got.len(), N, "records in the topic");
    let values: Vec<&str> = got.iter().map(|(_, v)| v.as_str()).collect();
    let expect: Vec<String> = (0..N).map(|i| format!("seq-{i}")).collect();
    assert_eq!(
        values,
        expect.iter().map(String::as_str).collect::<Vec<_>>(),
        "no duplicate, no reordering, no loss"
    );
    let by_value: std::collections::HashMap<&str, i64> =
        got.iter().map(|(o, v)| (v.as_str(), *o)).collect();
    for (off, v) in &acked {
        assert_eq!(by_value[v.as_str()], *off, "{v} at its acknowledged offset");
    }

    // The killed leader restarts, truncates whatever diverged, catches up and rejoins the ISR;
    // then all three logs are byte-identical.
    c.restart(leader);
    eventually("the old leader back in the ISR with the same log", || {
        let a = log_bytes(&c, 1, "r3");
        let same = (2..=3).all(|n| log_bytes(&c, n, "r3") == a) && !a.is_empty();
        same.then_some(())
    });
}

#[test]
fn paused_follower_leaves_the_isr_and_rejoins() {
    // A paused follower must drop out through replica lag, not through fencing.
    let c = Cluster::start_with(
        3,
        &[
            "replica.lag.time.max.ms=1500",
            "broker.session.timeout.ms=30000",
            "replica.fetch.wait.max.ms=100",
        ],
    );
    wait_all_registered(&c, 3);
    let admin: AdminClient<DefaultClientContext> = c.config(&[1, 2, 3]).create().unwrap();
    let topic = NewTopic::new("lag", 1, TopicReplication::Fixed(3)).set("min.insync.replicas", "2");
    let r = block_on(admin.create_topics([&topic], &AdminOptions::new())).unwrap();
    assert!(r[0].is_ok(), "{r:?}");
    let leader = eventually("a full ISR", || {
        let l = metadata(&c, 1, "lag").2.get(&0).copied().unwrap_or(-1);
        (l > 0 && isr(&c, l, "lag") == vec![1, 2, 3]).then_some(l)
    });
    let follower = (1..=3).find(|&n| n != leader).unwrap();
    let pid = c.pid(follower);
    let signal = |sig: &str| {
        assert!(Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()
            .unwrap()
            .success());
    };

    signal("-STOP");
    // acks=all still completes once the lagging follower is out of the ISR.
    produce_to(&c, "lag", 500);
    let shrunk = eventually("the paused follower out of the ISR", || {
        let i = isr(&c, leader, "lag");
        (!i.contains(&follower)).then_some(i)
    });
    assert_eq!(shrunk.len(), 2, "{shrunk:?}");
    assert_eq!(
        consume_count(&c, &[leader], "lag", 1, 500),
        500,
        "the HW advanced without it"
    );

    signal("-CONT");
    eventually("the follower back in the ISR with the leader's log", || {
        let back = isr(&c, leader, "lag") == vec![1, 2, 3];
        (back && log_bytes(&c, follower, "lag") == log_bytes(&c, leader, "lag")).then_some(())
    });
}

/// Replicas [1, 2] of five brokers: the follower dies, the ISR shrinks to the leader, the leader dies, then the
/// follower comes back. Clean election leaves the partition leaderless; with
/// `unclean.leader.election.enable` the out-of-sync follower takes over.
fn last_isr_member_dies(unclean: bool) -> i32 {
    // Five voters, so the metadata quorum survives losing both replicas of the partition.
    let mut c = Cluster::start_with(
        5,
        &[
            "broker.session.timeout.ms=2000",
            "broker.heartbeat.interval.ms=300",
            "replica.fetch.wait.max.ms=100",
        ],
    );
    wait_all_registered(&c, 5);
    let admin: AdminClient<DefaultClientContext> = c.config(&[3, 4, 5]).create().unwrap();
    let assignment: &[&[i32]] = &[&[1, 2]];
    let mut topic = NewTopic::new("unclean", 1, TopicReplication::Variable(assignment));
    if unclean {
        topic = topic.set("unclean.leader.election.enable", "true");
    }
    let r = block_on(admin.create_topics([&topic], &AdminOptions::new())).unwrap();
    assert!(r[0].is_ok(), "{r:?}");
    eventually("leader 1 with ISR [1, 2]", || {
        (metadata(&c, 3, "unclean").2.get(&0) == Some(&1) && isr(&c, 3, "unclean") == vec![1, 2])
            .then_some(())
    });
    c.kill(2);
    eventually("ISR shrunk to the leader", || {
        (isr(&c, 3, "unclean") == vec![1]).then_some(())
    });
    c.kill(1);
    eventually("no leader, both replicas fenced", || {
        (metadata(&c, 3, "unclean").2.get(&0) == Some(&-1)
            && offline_replicas(&c, 3, "unclean") == vec![1, 2])
        .then_some(())
    });
    c.restart(2);
    // Unfencing broker 2 and any election it allows are one metadata batch, so once broker 3's
    // image has broker 2 back online it also has the leader the controller chose.
    eventually("broker 2 unfenced in broker 3's image", || {
        (offline_replicas(&c, 3, "unclean") == vec![1]).then_some(())
    });
    metadata(&c, 3, "unclean").2[&0]
}

#[test]
fn clean_election_waits_for_the_isr() {
    assert_eq!(
        last_isr_member_dies(false),
        -1,
        "an out-of-sync replica must not lead"
    );
}

#[test]
fn unclean_election_takes_any_live_replica() {
    assert_eq!(
        last_isr_member_dies(true),
        2,
        "unclean election picks the live replica"
    );
}

#[test]
fn delete_records_answers_with_the_low_watermark_of_all_replicas() {
    use strom_protocol::kafka::messages::delete_records_request::{
        DeleteRecordsPartition, DeleteRecordsTopic,
    };
    use strom_protocol::kafka::messages::{
        ApiKey, DeleteRecordsRequest, DeleteRecordsResponse, TopicName,
    };
    use strom_protocol::kafka::protocol::StrBytes;
    let c = Cluster::start_with(3, &["replica.fetch.wait.max.ms=100"]);
    wait_all_registered(&c, 3);
    let admin: AdminClient<DefaultClientContext> = c.config(&[1, 2, 3]).create().unwrap();
    let r = block_on(admin.create_topics(
        [&NewTopic::new("lw", 1, TopicReplication::Fixed(3))],
        &AdminOptions::new(),
    ))
    .unwrap();
    assert!(r[0].is_ok(), "{r:?}");
    let leader = eventually("a full ISR", || {
        let l = metadata(&c, 1, "lw").2.get(&0).copied().unwrap_or(-1);
        (l > 0 && isr(&c, l, "lw") == vec![1, 2, 3]).then_some(l)
    });
    produce_to(&c, "lw", 300);
    let req = DeleteRecordsRequest::default()
        .with_timeout_ms(15_000)
        .with_topics(vec![DeleteRecordsTopic::default()
            .with_name(TopicName(StrBytes::from_static_str("lw")))
            .with_partitions(vec![DeleteRecordsPartition::default()
                .with_partition_index(0)
                .with_offset(120)])]);
    let port = c.nodes.iter().find(|n| n.id == leader).unwrap().port;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let resp: DeleteRecordsResponse = common::raw_call(&mut s, ApiKey::DeleteRecords, 2, &req);
    let p = &resp.topics[0].partitions[0];
    assert_eq!(
        (p.error_code, p.low_watermark),
        (0, 120),
        "every replica moved its log start"
    );
}

/// SIGTERM of a partition leader is a controlled shutdown (Kafka's wantShutDown heartbeat):
/// its leadership moves to another ISR member before the process exits, not when its session
/// expires — the session here (60 s) is longer than every wait below (30 s). Restarted, it is a
/// new incarnation that rejoins the ISR.
#[test]
fn sigterm_moves_leadership_before_the_leader_exits() {
    let mut c = Cluster::start_with(
        3,
        &[
            "broker.session.timeout.ms=60000",
            "broker.heartbeat.interval.ms=500",
            "replica.fetch.wait.max.ms=100",
        ],
    );
    wait_all_registered(&c, 3);
    create_topic(&c, &[1, 2, 3], "cs", 1, 3).unwrap();
    let leader = eventually("a full ISR", || {
        let l = metadata(&c, 1, "cs").2.get(&0).copied().unwrap_or(-1);
        (l > 0 && isr(&c, l, "cs") == vec![1, 2, 3]).then_some(l)
    });
    produce(&c, "cs", 200);
    let others: Vec<i32> = (1..=3).filter(|&n| n != leader).collect();

    let mut child = c.take_process(leader);
    assert!(Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap()
        .success());
    let status = eventually("the leader to exit after SIGTERM", || {
        child.try_wait().unwrap()
    });
    assert!(status.success(), "{status}");
    let new_leader = eventually("another leader, well before the session expires", || {
        let l = metadata(&c, others[0], "cs")
            .2
            .get(&0)
            .copied()
            .unwrap_or(-1);
        others.contains(&l).then_some(l)
    });
    let mut expected = others.clone();
    expected.sort_unstable();
    assert_eq!(isr(&c, new_leader, "cs"), expected);
    assert_eq!(consume_count(&c, &others, "cs", 1, 200), 200);

    c.restart(leader);
    eventually("the restarted broker back in the ISR", || {
        (isr(&c, new_leader, "cs") == vec![1, 2, 3]).then_some(())
    });
}

/// The earliest and latest offsets of `partitions` of `topic`, each with its error code, from a
/// raw ListOffsets v7 on a fresh connection to `node` (the answer waits until the node serves).
fn raw_list_offsets(c: &Cluster, node: i32, topic: &str, partitions: &[i32]) -> Vec<(i16, i64)> {
    use strom_protocol::kafka::messages::list_offsets_request::{
        ListOffsetsPartition, ListOffsetsTopic,
    };
    use strom_protocol::kafka::messages::{
        ApiKey, BrokerId, ListOffsetsRequest, ListOffsetsResponse, TopicName,
    };
    use strom_protocol::kafka::protocol::StrBytes;
    const LATEST: i64 = -1;
    const EARLIEST: i64 = -2;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port_of(c, node))).unwrap();
    [EARLIEST, LATEST]
        .into_iter()
        .flat_map(|timestamp| {
            let req = ListOffsetsRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_topics(vec![ListOffsetsTopic::default()
                    .with_name(TopicName(StrBytes::from_string(topic.to_string())))
                    .with_partitions(
                        partitions
                            .iter()
                            .map(|&p| {
                                ListOffsetsPartition::default()
                                    .with_partition_index(p)
                                    .with_current_leader_epoch(-1)
                                    .with_timestamp(timestamp)
                            })
                            .collect(),
                    )]);
            let resp: ListOffsetsResponse = common::raw_call(&mut s, ApiKey::ListOffsets, 7, &req);
            resp.topics[0]
                .partitions
                .iter()
                .map(|p| (p.error_code, p.offset))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// A restarted node takes client requests only once the active controller says it has caught
/// up with the metadata (its held metadata loader is released). Before, the image it replayed
/// from its own log still showed it unfenced and leading its partitions while none was hosted
/// yet: ListOffsets answered UNKNOWN_TOPIC_OR_PARTITION, and librdkafka then reset a consumer
/// of those partitions to their end. A topic created while the node is down puts its log
/// behind, and the long heartbeat interval keeps it held for a while (the release waits for a
/// heartbeat answer); the request is sent as soon as the node listens.
#[test]
fn a_restarted_node_answers_for_its_partitions_only_once_caught_up() {
    let mut c = Cluster::start_with(
        3,
        &[
            "broker.heartbeat.interval.ms=500",
            // The killed node's restart is a new incarnation: it registers once its previous
            // incarnation's session (kept alive until then: it led its partitions) expired and
            // that one was fenced; while it catches up it serves nothing.
            "broker.session.timeout.ms=4000",
        ],
    );
    wait_all_registered(&c, 3);
    create_topic(&c, &[1], "own", 3, 1).unwrap();
    let leaders = eventually("the topic with its leaders", || {
        let l = metadata(&c, 1, "own").2;
        (l.len() == 3 && l.values().all(|&b| b > 0)).then_some(l)
    });
    produce(&c, "own", 300);
    let node = leaders[&0];
    let mine: Vec<i32> = leaders
        .iter()
        .filter(|&(_, &b)| b == node)
        .map(|(&p, _)| p)
        .collect();
    let before = raw_list_offsets(&c, node, "own", &mine);
    assert!(
        before.iter().all(|&(code, _)| code == 0),
        "before the kill: {before:?}"
    );

    c.kill(node);
    let others: Vec<i32> = (1..=3).filter(|&n| n != node).collect();
    eventually("a topic created while the node is down", || {
        create_topic(&c, &others, "while-down", 1, 1).ok()
    });
    c.restart(node);
    assert_eq!(
        raw_list_offsets(&c, node, "own", &mine),
        before,
        "the restarted node's first answer for its partitions"
    );
}

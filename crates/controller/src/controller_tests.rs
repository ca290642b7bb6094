use super::*;
use crate::placement::*;
use std::collections::HashMap;

fn block<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(f)
}

fn controller(dir: &Path) -> QuorumController {
    let c = QuorumController::open(
        &dir.join("meta.log"),
        TopicDefaults {
            num_partitions: 1,
            replication_factor: 1,
        },
    )
    .unwrap();
    block(c.register_broker(1, "127.0.0.1", 9092, None, 1)).unwrap();
    c
}

fn spec(name: &str, p: i32) -> CreateTopicSpec {
    CreateTopicSpec {
        name: name.into(),
        num_partitions: p,
        replication_factor: -1,
        ..Default::default()
    }
}

#[test]
fn create_describe_delete_survive_restart() {
    let dir = tempfile::tempdir().unwrap();
    let c = controller(dir.path());
    let r = block(c.create_topics(&[spec("a", 3), spec("b", -1)], false));
    assert!(r.iter().all(|r| r.is_ok()));
    assert_eq!(c.image().topic("a").unwrap().partitions.len(), 3);
    assert_eq!(c.image().topic("b").unwrap().partitions.len(), 1);
    let id = c.image().topic("a").unwrap().id;
    block(c.incremental_alter_topic_configs(
        "a",
        &[("retention.ms".into(), AlterConfigOp::Set, Some("5".into()))],
        false,
    ))
    .unwrap();
    block(c.create_partitions("a", 5, None, false)).unwrap();
    assert!(block(c.delete_topics(&[(Some("b".into()), None)]))[0].is_ok());
    drop(c);
    let c = controller(dir.path());
    let img = c.image();
    let a = img.topic("a").unwrap();
    assert_eq!(a.id, id);
    assert_eq!(a.partitions.len(), 5);
    assert_eq!(a.configs["retention.ms"], "5");
    assert!(img.topic("b").is_none());
}

#[test]
fn create_errors_follow_kafka() {
    let dir = tempfile::tempdir().unwrap();
    let c = controller(dir.path());
    assert!(block(c.create_topics(&[spec("a.b", 1)], false))[0].is_ok());
    let code = |s: CreateTopicSpec| {
        block(c.create_topics(&[s], false))[0]
            .clone()
            .unwrap_err()
            .code()
    };
    assert_eq!(code(spec("a.b", 1)), 36);
    assert_eq!(code(spec("a_b", 1)), 17);
    assert_eq!(code(spec("bad name", 1)), 17);
    assert_eq!(code(spec("__cluster_metadata", 1)), 42);
    assert_eq!(code(spec("x", 0)), 37);
    assert_eq!(
        code(CreateTopicSpec {
            replication_factor: 3,
            ..spec("x", 1)
        }),
        38
    );
    assert_eq!(
        code(CreateTopicSpec {
            configs: vec![("nope".into(), Some("1".into()))],
            ..spec("x", 1)
        }),
        40
    );
    assert_eq!(
        code(CreateTopicSpec {
            assignments: vec![(0, vec![2])],
            ..spec("x", -1)
        }),
        39
    );
    // A name given twice is refused each time (Kafka's `ControllerApis.createTopics`).
    let dup = block(c.create_topics(&[spec("d", 1), spec("d", 1)], false));
    assert_eq!(dup[0].clone().unwrap_err().code(), 42);
    assert_eq!(dup[1].clone().unwrap_err().code(), 42);
    assert!(c.image().topic("d").is_none());
}

#[test]
fn producer_id_blocks_never_repeat_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let c = controller(dir.path());
    let a = block(c.allocate_producer_ids(1)).unwrap();
    let b = block(c.allocate_producer_ids(1)).unwrap();
    assert_eq!((a.start, a.len, b.start), (0, 1000, 1000));
    drop(c);
    let c = controller(dir.path());
    assert_eq!(block(c.allocate_producer_ids(2)).unwrap().start, 2000);
}

#[test]
fn validate_only_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let c = controller(dir.path());
    assert!(block(c.create_topics(&[spec("v", 2)], true))[0].is_ok());
    assert!(c.image().topic("v").is_none());
}

#[test]
fn rack_alternated_list_matches_kafka() {
    // AdminUtilsTest: brokers 0..5 in racks rack1, rack3, rack3, rack2, rack2, rack1.
    let b: Vec<(i32, String)> = [
        (0, "rack1"),
        (1, "rack3"),
        (2, "rack3"),
        (3, "rack2"),
        (4, "rack2"),
        (5, "rack1"),
    ]
    .iter()
    .map(|(b, r)| (*b, r.to_string()))
    .collect();
    assert_eq!(rack_alternated_brokers(&b), vec![0, 3, 1, 5, 4, 2]);
    // The same test's assignment of 7 partitions, RF 3, fixed start index and shift 0.
    let a = assign_replicas_rack_aware(7, 3, &b, Some(0), 0);
    let want: Vec<Vec<i32>> = vec![
        vec![0, 3, 1],
        vec![3, 1, 5],
        vec![1, 5, 4],
        vec![5, 4, 2],
        vec![4, 2, 0],
        vec![2, 0, 3],
        vec![0, 4, 2],
    ];
    assert_eq!(a, want);
}

#[test]
fn rack_aware_spreads_racks_and_balances() {
    let b: Vec<(i32, String)> = (0..6).map(|i| (i, format!("rack{}", i % 3))).collect();
    for start in 0..6 {
        let a = assign_replicas_rack_aware(12, 3, &b, Some(start), 0);
        let mut leaders = HashMap::new();
        let mut replicas = HashMap::new();
        for r in &a {
            let racks: HashSet<i32> = r.iter().map(|x| x % 3).collect();
            assert_eq!(racks.len(), 3, "one replica per rack: {r:?}");
            *leaders.entry(r[0]).or_insert(0) += 1;
            for x in r {
                *replicas.entry(*x).or_insert(0) += 1;
            }
        }
        let spread = |m: &HashMap<i32, i32>| m.values().max().unwrap() - m.values().min().unwrap();
        assert!(spread(&leaders) <= 1 && leaders.len() == 6, "{leaders:?}");
        assert!(spread(&replicas) <= 1, "{replicas:?}");
    }
    // Fewer racks than replicas: every rack still used.
    let two: Vec<(i32, String)> = (0..4).map(|i| (i, format!("r{}", i % 2))).collect();
    for r in assign_replicas_rack_aware(8, 3, &two, Some(0), 0) {
        assert_eq!(r.iter().map(|x| x % 2).collect::<HashSet<_>>().len(), 2);
        assert_eq!(r.iter().collect::<HashSet<_>>().len(), 3);
    }
}

#[test]
fn rack_unaware_is_balanced() {
    let a = assign_replicas_rack_unaware(30, 3, &[1, 2, 3, 4, 5], None, 0);
    let mut leaders = HashMap::new();
    for r in &a {
        assert_eq!(r.iter().collect::<HashSet<_>>().len(), 3);
        *leaders.entry(r[0]).or_insert(0) += 1;
    }
    assert!(leaders.values().all(|&n| n == 6));
}

#[test]
fn rack_unaware_matches_kafka_layout() {
    // Kafka's AdminUtils with startIndex 0 and shift 0 over brokers 0..5 and RF 3.
    let a = assign_replicas_rack_unaware(10, 3, &[0, 1, 2, 3, 4], Some(0), 0);
    assert_eq!(a[0], vec![0, 1, 2]);
    assert_eq!(a[1], vec![1, 2, 3]);
    assert_eq!(a[4], vec![4, 0, 1]);
    assert_eq!(a[5], vec![0, 2, 3]);
    assert_eq!(a[9], vec![4, 1, 2]);
}

/// Session fencing through the controller on an injected monotonic clock (Kafka's
/// `BrokerHeartbeatManager`): a session is valid while last contact + timeout >= now, so the
/// broker is fenced by the first check 1 ms past it; the fencing moves its leadership to the
/// ISR; a heartbeat unfences it without taking leadership back; regular heartbeats keep every
/// other broker unfenced.
#[test]
fn broker_fenced_exactly_after_its_session_timeout() {
    const TIMEOUT: u64 = crate::cluster_control::DEFAULT_BROKER_SESSION_TIMEOUT_MS;
    const T0: u64 = 50_000;
    let dir = tempfile::tempdir().unwrap();
    let c = controller(dir.path());
    for b in [2, 3] {
        block(c.register_broker(b, "127.0.0.1", 9090 + b, None, 1)).unwrap();
    }
    let mut s = spec("t", 1);
    s.replication_factor = 3;
    assert!(block(c.create_topics(&[s], false))[0].is_ok());
    let partition = |c: &QuorumController| c.image().topic("t").unwrap().partitions[&0].clone();
    let fenced = |c: &QuorumController, b: i32| c.image().brokers[&b].fenced;
    let leader = partition(&c).leader;
    let others: Vec<i32> = [1, 2, 3].into_iter().filter(|&b| b != leader).collect();
    for b in [1, 2, 3] {
        assert!(!block(c.heartbeat(b, T0, false)).unwrap());
    }
    for &b in &others {
        block(c.heartbeat(b, T0 + 4_000, false)).unwrap();
    }

    block(c.fence_stale_brokers(T0 + TIMEOUT, TIMEOUT, false));
    assert!(!fenced(&c, leader), "exactly at last contact + timeout");
    assert_eq!(partition(&c).leader, leader);
    block(c.fence_stale_brokers(T0 + TIMEOUT + 1, TIMEOUT, false));
    assert!(fenced(&c, leader), "1 ms past the session timeout");
    let p = partition(&c);
    assert!(others.contains(&p.leader), "{p:?}");
    let mut isr = p.isr.clone();
    isr.sort_unstable();
    assert_eq!(isr, others);
    assert!(others.iter().all(|&b| !fenced(&c, b)));

    // A heartbeat unfences it; leadership stays where it went.
    block(c.heartbeat(leader, T0 + TIMEOUT + 2, false)).unwrap();
    assert!(!fenced(&c, leader));
    assert!(others.contains(&partition(&c).leader));

    // A minute of heartbeats every 2 s (broker.heartbeat.interval.ms) and fence checks every
    // 500 ms (the broker's chore) fences nobody.
    let mut now = T0 + TIMEOUT + 2;
    for step in 1..=120 {
        now += 500;
        if step % 4 == 0 {
            for b in [1, 2, 3] {
                block(c.heartbeat(b, now, false)).unwrap();
            }
        }
        block(c.fence_stale_brokers(now, TIMEOUT, false));
        assert!([1, 2, 3].iter().all(|&b| !fenced(&c, b)), "at {now}");
    }
}

/// A broker's session starts at its registration (Kafka's `BrokerHeartbeatManager.register`):
/// one that registers and never heartbeats is fenced after the session timeout too.
#[test]
fn registration_starts_the_session() {
    const TIMEOUT: u64 = 2_000;
    let dir = tempfile::tempdir().unwrap();
    let c = controller(dir.path());
    block(c.heartbeat(1, 10_000, false)).unwrap();
    block(c.register_broker(2, "127.0.0.1", 9093, None, 10_000)).unwrap();
    block(c.fence_stale_brokers(12_000, TIMEOUT, false));
    assert!(!c.image().brokers[&2].fenced);
    block(c.fence_stale_brokers(12_001, TIMEOUT, false));
    assert!(c.image().brokers[&2].fenced);
    // Re-registering (a restart) renews the session, it does not unfence.
    block(c.register_broker(2, "127.0.0.1", 9093, None, 20_000)).unwrap();
    assert!(c.image().brokers[&2].fenced);
    block(c.heartbeat(2, 20_001, false)).unwrap();
    assert!(!c.image().brokers[&2].fenced);
}

/// Kafka's controlled shutdown: a heartbeat with wantShutDown moves the broker's leaderships
/// to other ISR members and takes it out of every ISR, and `shouldShutDown` is true once it
/// leads nothing. Back before its session expired, it registers as a new incarnation (fenced,
/// the shutdown flag cleared) and its first heartbeat unfences it.
#[test]
fn controlled_shutdown_moves_leaderships_first() {
    let dir = tempfile::tempdir().unwrap();
    let c = controller(dir.path());
    for b in [2, 3] {
        block(c.register_broker(b, "127.0.0.1", 9090 + b, None, 1)).unwrap();
    }
    let mut s = spec("t", 3);
    s.replication_factor = 3;
    assert!(block(c.create_topics(&[s], false))[0].is_ok());
    let parts = |c: &QuorumController| c.image().topic("t").unwrap().partitions.clone();
    let leaders_of =
        |c: &QuorumController, b: i32| parts(c).values().filter(|p| p.leader == b).count();
    let b = 1;
    assert!(
        leaders_of(&c, b) > 0,
        "placement gives every broker a leadership"
    );
    let epochs_before: Vec<i32> = parts(&c).values().map(|p| p.leader_epoch).collect();

    assert!(block(c.controlled_shutdown(b, 10, false)).unwrap());
    assert_eq!(leaders_of(&c, b), 0);
    for (p, before) in parts(&c).values().zip(epochs_before) {
        assert!(!p.isr.contains(&b), "{p:?}");
        assert!(p.leader >= 0 && p.leader != b, "{p:?}");
        assert!(p.leader_epoch >= before);
    }
    let info = c.image().brokers[&b].clone();
    assert!(info.in_controlled_shutdown && !info.fenced, "{info:?}");
    // Asking again changes nothing and still says yes.
    let offset = c.image().offset;
    assert!(block(c.controlled_shutdown(b, 20, false)).unwrap());
    assert_eq!(c.image().offset, offset);

    // The restarted broker registers again: fenced, no longer shutting down; its heartbeat
    // unfences it.
    block(c.register_broker(b, "127.0.0.1", 9091, None, 30)).unwrap();
    let info = c.image().brokers[&b].clone();
    assert!(info.fenced && !info.in_controlled_shutdown, "{info:?}");
    block(c.heartbeat(b, 40, false)).unwrap();
    assert!(!c.image().brokers[&b].fenced);
}

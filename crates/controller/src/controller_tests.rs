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
    block(c.add_broker_for_test(1, 1)).unwrap();
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
        block(c.add_broker_for_test(b, 1)).unwrap();
    }
    let mut s = spec("t", 1);
    s.replication_factor = 3;
    assert!(block(c.create_topics(&[s], false))[0].is_ok());
    let partition = |c: &QuorumController| c.image().topic("t").unwrap().partitions[&0].clone();
    let fenced = |c: &QuorumController, b: i32| c.image().brokers[&b].fenced;
    let leader = partition(&c).leader;
    let others: Vec<i32> = [1, 2, 3].into_iter().filter(|&b| b != leader).collect();
    for b in [1, 2, 3] {
        assert!(!block(c.heartbeat_for_test(b, T0)).unwrap().is_fenced);
    }
    for &b in &others {
        block(c.heartbeat_for_test(b, T0 + 4_000)).unwrap();
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
    block(c.heartbeat_for_test(leader, T0 + TIMEOUT + 2)).unwrap();
    assert!(!fenced(&c, leader));
    assert!(others.contains(&partition(&c).leader));

    // A minute of heartbeats every 2 s (broker.heartbeat.interval.ms) and fence checks every
    // 500 ms (the broker's chore) fences nobody.
    let mut now = T0 + TIMEOUT + 2;
    for step in 1..=120 {
        now += 500;
        if step % 4 == 0 {
            for b in [1, 2, 3] {
                block(c.heartbeat_for_test(b, now)).unwrap();
            }
        }
        block(c.fence_stale_brokers(now, TIMEOUT, false));
        assert!([1, 2, 3].iter().all(|&b| !fenced(&c, b)), "at {now}");
    }
}

/// A new incarnation registers fenced, without a session (Kafka's `register(id, fenced)`):
/// its first heartbeat that has replayed its own registration unfences it and starts the
/// session, which then expires as any other.
#[test]
fn registration_is_fenced_until_a_caught_up_heartbeat() {
    const TIMEOUT: u64 = 2_000;
    let dir = tempfile::tempdir().unwrap();
    let c = controller(dir.path());
    let epoch = block(c.register_for_test(2, 2, -1, 10_000)).unwrap();
    assert_eq!(epoch, c.image().offset as i64 - 1, "its record's offset");
    assert!(c.image().brokers[&2].fenced);
    // Nothing to expire while fenced.
    block(c.fence_stale_brokers(20_000, TIMEOUT, false));
    // Not yet replayed its own registration: stays fenced.
    let r = block(c.heartbeat(2, epoch, epoch - 1, 20_000, false)).unwrap();
    assert!(r.is_fenced && c.image().brokers[&2].fenced);
    let r = block(c.heartbeat(2, epoch, epoch, 20_001, false)).unwrap();
    assert!(!r.is_fenced && !c.image().brokers[&2].fenced);
    block(c.fence_stale_brokers(22_001, TIMEOUT, false));
    assert!(!c.image().brokers[&2].fenced, "exactly at the timeout");
    block(c.fence_stale_brokers(22_002, TIMEOUT, false));
    assert!(c.image().brokers[&2].fenced);
}

/// Kafka's `checkBrokerEpoch` on heartbeats: one under another epoch than the registered one
/// (an earlier incarnation, a guess) or from an unregistered broker is STALE_BROKER_EPOCH and
/// keeps no session alive.
#[test]
fn heartbeat_under_a_stale_epoch_is_refused_and_renews_nothing() {
    const TIMEOUT: u64 = 2_000;
    let dir = tempfile::tempdir().unwrap();
    let c = controller(dir.path());
    let first = block(c.add_broker_for_test(2, 1_000)).unwrap();
    let code = |r: Result<crate::HeartbeatReply, ControllerError>| r.unwrap_err().code();
    assert_eq!(code(block(c.heartbeat(2, first + 1, 99, 1_500, false))), 77);
    assert_eq!(code(block(c.heartbeat(9, 0, 99, 1_500, false))), 77);
    // A restart: a new epoch; the old incarnation's heartbeats are refused.
    let second = block(c.register_for_test(2, 22, first, 1_600)).unwrap();
    assert!(second > first);
    assert_eq!(code(block(c.heartbeat(2, first, 99, 1_700, false))), 77);
    assert_eq!(
        block(c.heartbeat(2, first, 99, 1_700, false))
            .unwrap_err()
            .to_string(),
        format!("Expected broker epoch {second}, but got broker epoch {first}")
    );
    block(c.heartbeat_for_test(2, 1_800)).unwrap();
    // Refused heartbeats do not renew the session: fenced 1 ms after last good contact +
    // timeout.
    assert_eq!(code(block(c.heartbeat(2, first, 99, 3_700, false))), 77);
    block(c.fence_stale_brokers(3_801, TIMEOUT, false));
    assert!(c.image().brokers[&2].fenced);
}

/// A new incarnation while the registered one has a live session is
/// DUPLICATE_BROKER_REGISTRATION (Kafka's `registerBroker`), with or without a clean previous
/// epoch; the same incarnation amends its registration. Once the old session expired and it
/// was fenced, the new incarnation registers: an unclean one out of every ISR, fenced, with
/// the next broker epoch.
#[test]
fn new_incarnation_waits_for_the_old_session_and_leaves_the_isrs() {
    const TIMEOUT: u64 = crate::cluster_control::DEFAULT_BROKER_SESSION_TIMEOUT_MS;
    let dir = tempfile::tempdir().unwrap();
    let c = controller(dir.path());
    c.check_registration_sessions_for_test();
    for b in [2, 3] {
        block(c.add_broker_for_test(b, 1)).unwrap();
    }
    let mut s = spec("t", 1);
    s.replication_factor = 3;
    assert!(block(c.create_topics(&[s], false))[0].is_ok());
    let p = || c.image().topic("t").unwrap().partitions[&0].clone();
    let leader = p().leader;
    let epoch = c.image().brokers[&leader].epoch;
    for b in [1, 2, 3] {
        block(c.heartbeat_for_test(b, 1_000)).unwrap();
    }
    // The leader is SIGKILLed and restarts at once: a new incarnation.
    let e = block(c.register_for_test(leader, 77, -1, 1_500)).unwrap_err();
    assert_eq!(e.code(), 101, "{e}");
    let e = block(c.register_for_test(leader, 77, epoch, 1_500)).unwrap_err();
    assert_eq!(e.code(), 101, "{e}");
    assert_eq!(p().leader, leader, "nothing changed");
    // The old incarnation may amend its own registration.
    assert_eq!(
        block(c.register_for_test(leader, leader as u128, -1, 1_500)).unwrap(),
        epoch
    );
    // Its session expires; the others heartbeat.
    for b in [1, 2, 3].into_iter().filter(|&b| b != leader) {
        block(c.heartbeat_for_test(b, 8_000)).unwrap();
    }
    block(c.fence_stale_brokers(1_000 + TIMEOUT + 1, TIMEOUT, false));
    assert!(c.image().brokers[&leader].fenced);
    let moved = p();
    assert_ne!(moved.leader, leader);
    assert!(!moved.isr.contains(&leader));
    // Now the new incarnation registers: fenced, a new epoch, still out of the ISR.
    let new_epoch = block(c.register_for_test(leader, 77, -1, 10_100)).unwrap();
    assert!(new_epoch > epoch);
    let info = c.image().brokers[&leader].clone();
    assert!(info.fenced && info.epoch == new_epoch, "{info:?}");
    assert_eq!(info.incarnation_id, Uuid::from_u128(77));
    block(c.heartbeat_for_test(leader, 10_200)).unwrap();
    assert!(!c.image().brokers[&leader].fenced);
    let after = p();
    assert_eq!((after.leader, after.isr.clone()), (moved.leader, moved.isr));
}

/// An unclean restart noticed only at registration (the old session expired without the
/// controller fencing it yet, or the controller failed over): the registration itself takes
/// the broker out of every ISR and moves its leaderships, unless its previous broker epoch
/// says it shut down cleanly.
#[test]
fn unclean_registration_takes_the_broker_out_of_every_isr() {
    let dir = tempfile::tempdir().unwrap();
    let c = controller(dir.path());
    for b in [2, 3] {
        block(c.add_broker_for_test(b, 1)).unwrap();
    }
    let mut s = spec("t", 1);
    s.replication_factor = 3;
    assert!(block(c.create_topics(&[s], false))[0].is_ok());
    let p = || c.image().topic("t").unwrap().partitions[&0].clone();
    let leader = p().leader;
    let epoch = c.image().brokers[&leader].epoch;
    // Clean: nothing moves but the registration.
    block(c.register_for_test(leader, 50, epoch, 100)).unwrap();
    assert_eq!((p().leader, p().isr.len()), (leader, 3));
    let clean_epoch = c.image().brokers[&leader].epoch;
    block(c.heartbeat_for_test(leader, 110)).unwrap();
    // Unclean (the clean-shutdown file had another epoch, or none).
    for (incarnation, previous) in [(51, clean_epoch - 1), (52, -1)] {
        let before = p();
        block(c.register_for_test(leader, incarnation, previous, 200)).unwrap();
        let after = p();
        assert!(!after.isr.contains(&leader), "{after:?}");
        if before.leader == leader {
            assert_ne!(after.leader, leader);
            assert_eq!(after.leader_epoch, before.leader_epoch + 1);
        }
        assert!(c.image().brokers[&leader].fenced);
    }
}

/// Kafka's controlled shutdown: a heartbeat with wantShutDown moves the broker's leaderships
/// to other ISR members and takes it out of every ISR, and `shouldShutDown` is true once it
/// leads nothing, when it is fenced (Kafka's SHUTDOWN_NOW) so that its session ends. Restarted,
/// it registers at once as a new incarnation (fenced, the shutdown flag cleared) and its first
/// heartbeat unfences it.
#[test]
fn controlled_shutdown_moves_leaderships_first() {
    let dir = tempfile::tempdir().unwrap();
    let c = controller(dir.path());
    c.check_registration_sessions_for_test();
    for b in [2, 3] {
        block(c.add_broker_for_test(b, 1)).unwrap();
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
    let epoch = c.image().brokers[&b].epoch;

    assert!(block(c.controlled_shutdown_for_test(b, 10)).unwrap());
    assert_eq!(leaders_of(&c, b), 0);
    for (p, before) in parts(&c).values().zip(epochs_before) {
        assert!(!p.isr.contains(&b), "{p:?}");
        assert!(p.leader >= 0 && p.leader != b, "{p:?}");
        assert!(p.leader_epoch >= before);
    }
    let info = c.image().brokers[&b].clone();
    assert!(info.in_controlled_shutdown && info.fenced, "{info:?}");
    // Asking again changes nothing and still says yes.
    let offset = c.image().offset;
    assert!(block(c.controlled_shutdown_for_test(b, 20)).unwrap());
    assert_eq!(c.image().offset, offset);

    // The restarted broker registers again at once (no live session): fenced, no longer
    // shutting down; its heartbeat unfences it.
    block(c.register_for_test(b, 10, epoch, 30)).unwrap();
    let info = c.image().brokers[&b].clone();
    assert!(info.fenced && !info.in_controlled_shutdown, "{info:?}");
    block(c.heartbeat_for_test(b, 40)).unwrap();
    assert!(!c.image().brokers[&b].fenced);
}

/// KIP-903 through the controller: AlterPartition under a stale broker epoch is refused as a
/// whole, and a member known by an earlier incarnation's epoch is INELIGIBLE_REPLICA.
#[test]
fn alter_partition_with_broker_epochs() {
    use crate::partition_change::BrokerState;
    let dir = tempfile::tempdir().unwrap();
    let c = controller(dir.path());
    for b in [2, 3] {
        block(c.add_broker_for_test(b, 1)).unwrap();
    }
    let mut s = spec("t", 1);
    s.replication_factor = 3;
    assert!(block(c.create_topics(&[s], false))[0].is_ok());
    let p = c.image().topic("t").unwrap().partitions[&0].clone();
    let id = c.image().topic("t").unwrap().id;
    let epochs: std::collections::BTreeMap<i32, i64> = c
        .image()
        .brokers
        .iter()
        .map(|(&b, i)| (b, i.epoch))
        .collect();
    let leader = p.leader;
    let follower = *p.isr.iter().find(|&&b| b != leader).unwrap();
    let shrunk: Vec<i32> = p.isr.iter().copied().filter(|&b| b != follower).collect();
    let call = |broker_epoch: i64, isr: Vec<BrokerState>, pe: i32| {
        block(c.alter_partition(leader, broker_epoch, id, 0, p.leader_epoch, pe, &isr))
    };
    let with_epochs = |ids: &[i32]| -> Vec<BrokerState> {
        ids.iter()
            .map(|&b| BrokerState {
                broker_id: b,
                broker_epoch: epochs[&b],
            })
            .collect()
    };
    let e = call(epochs[&leader] - 1, with_epochs(&shrunk), p.partition_epoch).unwrap_err();
    assert_eq!(e.code(), 77, "{e}");
    call(epochs[&leader], with_epochs(&shrunk), p.partition_epoch).unwrap();
    // The follower restarts (new incarnation); the leader proposes it back with the epoch of
    // a fetch its previous incarnation sent.
    block(c.register_for_test(follower, 99, epochs[&follower], 50)).unwrap();
    block(c.heartbeat_for_test(follower, 60)).unwrap();
    let mut back = with_epochs(&shrunk);
    back.push(BrokerState {
        broker_id: follower,
        broker_epoch: epochs[&follower],
    });
    let e = call(epochs[&leader], back.clone(), p.partition_epoch + 1).unwrap_err();
    assert_eq!(e.code(), 107, "{e}");
    back.last_mut().unwrap().broker_epoch = c.image().brokers[&follower].epoch;
    call(epochs[&leader], back, p.partition_epoch + 1).unwrap();
    assert_eq!(c.image().topic("t").unwrap().partitions[&0].isr.len(), 3);
}

/// The broker epoch is the registration record's offset in the metadata log, the same after
/// the log is replayed at a restart.
#[test]
fn broker_epochs_survive_replay() {
    let dir = tempfile::tempdir().unwrap();
    let c = controller(dir.path());
    let e2 = block(c.add_broker_for_test(2, 1)).unwrap();
    assert!(block(c.create_topics(&[spec("x", 2)], false))[0].is_ok());
    let e2b = block(c.register_for_test(2, 222, -1, 5)).unwrap();
    assert!(e2b > e2);
    let before: Vec<(i32, i64)> = c
        .image()
        .brokers
        .iter()
        .map(|(&b, i)| (b, i.epoch))
        .collect();
    let offset = c.image().offset;
    drop(c);
    let c = QuorumController::open(
        &dir.path().join("meta.log"),
        TopicDefaults {
            num_partitions: 1,
            replication_factor: 1,
        },
    )
    .unwrap();
    let after: Vec<(i32, i64)> = c
        .image()
        .brokers
        .iter()
        .map(|(&b, i)| (b, i.epoch))
        .collect();
    assert_eq!(before, after);
    assert_eq!(c.image().offset, offset);
}

//! New partitions with a broker down (Kafka's `ReplicationControlManager.createTopic` /
//! `createPartitions`): automatic placement only on brokers that can lead, leader and ISR from
//! the live replicas of a manual assignment, and Kafka's errors when that is impossible.

use super::*;
use crate::image::PartitionRegistration;
use strom_protocol::ErrorCode;

fn block<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(f)
}

/// Brokers 1, 2, 3 with broker 3 fenced: its session (started at registration, time 1) expired
/// while 1 and 2 kept heart-beating.
fn cluster_with_broker_3_fenced(dir: &Path) -> QuorumController {
    let c = QuorumController::open(
        &dir.join("meta.log"),
        TopicDefaults {
            num_partitions: 1,
            replication_factor: 1,
        },
    )
    .unwrap();
    for b in [1, 2, 3] {
        block(c.add_broker_for_test(b, 1)).unwrap();
    }
    for b in [1, 2] {
        block(c.heartbeat_for_test(b, 10_000)).unwrap();
    }
    block(c.fence_stale_brokers(10_000, 2_000, false));
    let img = c.image();
    assert!(img.brokers[&3].fenced && !img.brokers[&1].fenced && !img.brokers[&2].fenced);
    c
}

fn spec(name: &str, partitions: i32, rf: i16) -> CreateTopicSpec {
    CreateTopicSpec {
        name: name.into(),
        num_partitions: partitions,
        replication_factor: rf,
        ..Default::default()
    }
}

fn manual(name: &str, assignments: Vec<(i32, Vec<i32>)>) -> CreateTopicSpec {
    CreateTopicSpec {
        name: name.into(),
        num_partitions: -1,
        replication_factor: -1,
        assignments,
        ..Default::default()
    }
}

fn partitions(c: &QuorumController, topic: &str) -> Vec<PartitionRegistration> {
    c.image()
        .topic(topic)
        .unwrap()
        .partitions
        .values()
        .cloned()
        .collect()
}

fn err(r: Result<impl std::fmt::Debug, ControllerError>) -> (i16, String) {
    let e = r.unwrap_err();
    (e.code(), e.to_string())
}

#[test]
fn automatic_placement_skips_fenced_brokers() {
    let dir = tempfile::tempdir().unwrap();
    let c = cluster_with_broker_3_fenced(dir.path());
    let r = block(c.create_topics(&[spec("t", 12, 2), spec("one", 12, 1)], false));
    assert!(r.iter().all(|r| r.is_ok()), "{r:?}");
    for p in partitions(&c, "t").into_iter().chain(partitions(&c, "one")) {
        assert!(!p.replicas.contains(&3), "{p:?}");
        assert_eq!(p.isr, p.replicas, "{p:?}");
        assert_eq!(p.leader, p.replicas[0], "{p:?}");
    }
    // Both live brokers lead some partitions.
    let leaders: HashSet<i32> = partitions(&c, "one").iter().map(|p| p.leader).collect();
    assert_eq!(leaders, HashSet::from([1, 2]));

    block(c.create_partitions("t", 20, None, false)).unwrap();
    let ps = partitions(&c, "t");
    assert_eq!(ps.len(), 20);
    assert!(ps
        .iter()
        .all(|p| !p.replicas.contains(&3) && p.isr == p.replicas));
}

#[test]
fn too_few_usable_brokers_is_invalid_replication_factor() {
    let dir = tempfile::tempdir().unwrap();
    let c = cluster_with_broker_3_fenced(dir.path());
    let r = block(c.create_topics(&[spec("t", 1, 3)], false)).remove(0);
    assert_eq!(
        err(r),
        (
            ErrorCode::InvalidReplicationFactor.code(),
            "Unable to replicate the partition 3 time(s): The target replication factor of 3 \
             cannot be reached because only 2 broker(s) are registered."
                .into()
        )
    );
    // A topic of RF 3 made while all three were up cannot grow while one is down.
    let dir2 = tempfile::tempdir().unwrap();
    let c2 = QuorumController::open(
        &dir2.path().join("meta.log"),
        TopicDefaults {
            num_partitions: 1,
            replication_factor: 1,
        },
    )
    .unwrap();
    for b in [1, 2, 3] {
        block(c2.add_broker_for_test(b, 1)).unwrap();
    }
    assert!(block(c2.create_topics(&[spec("t3", 1, 3)], false))[0].is_ok());
    for b in [1, 2] {
        block(c2.heartbeat_for_test(b, 10_000)).unwrap();
    }
    block(c2.fence_stale_brokers(10_000, 2_000, false));
    assert_eq!(
        err(block(c2.create_partitions("t3", 2, None, false))),
        (
            ErrorCode::InvalidReplicationFactor.code(),
            "The target replication factor of 3 cannot be reached because only 2 broker(s) are \
             registered."
                .into()
        )
    );
    assert_eq!(partitions(&c2, "t3").len(), 1);
}

#[test]
fn controlled_shutdown_and_all_fenced_leave_no_usable_broker() {
    let dir = tempfile::tempdir().unwrap();
    let c = cluster_with_broker_3_fenced(dir.path());
    // Broker 2 shuts down: only broker 1 remains usable.
    assert!(block(c.controlled_shutdown_for_test(2, 10_001)).unwrap());
    assert_eq!(
        err(block(c.create_topics(&[spec("t", 1, 2)], false)).remove(0)).0,
        ErrorCode::InvalidReplicationFactor.code()
    );
    assert!(block(c.create_topics(&[spec("t", 4, 1)], false))[0].is_ok());
    assert!(partitions(&c, "t").iter().all(|p| p.replicas == vec![1]));
    // Broker 1's session expires too: nobody can lead.
    block(c.fence_stale_brokers(20_000, 2_000, false));
    assert_eq!(
        err(block(c.create_topics(&[spec("u", 1, 1)], false)).remove(0)),
        (
            ErrorCode::InvalidReplicationFactor.code(),
            "Unable to replicate the partition 1 time(s): All brokers are currently fenced.".into()
        )
    );
}

#[test]
fn manual_assignment_leader_and_isr_are_the_live_replicas() {
    let dir = tempfile::tempdir().unwrap();
    let c = cluster_with_broker_3_fenced(dir.path());
    let r = block(c.create_topics(
        &[manual("m", vec![(0, vec![3, 2, 1]), (1, vec![1, 3, 2])])],
        false,
    ));
    assert!(r[0].is_ok(), "{r:?}");
    let ps = partitions(&c, "m");
    assert_eq!(
        (ps[0].replicas.clone(), ps[0].isr.clone(), ps[0].leader),
        (vec![3, 2, 1], vec![2, 1], 2)
    );
    assert_eq!(
        (ps[1].replicas.clone(), ps[1].isr.clone(), ps[1].leader),
        (vec![1, 3, 2], vec![1, 2], 1)
    );
    block(c.create_partitions("m", 3, Some(vec![vec![3, 1, 2]]), false)).unwrap();
    let p = &partitions(&c, "m")[2];
    assert_eq!((p.isr.clone(), p.leader), (vec![1, 2], 1));

    // Only fenced replicas: Kafka refuses the assignment.
    assert_eq!(
        err(block(c.create_topics(&[manual("f", vec![(0, vec![3])])], false)).remove(0)),
        (
            ErrorCode::InvalidReplicaAssignment.code(),
            "All brokers specified in the manual partition assignment for partition 0 are \
             fenced or in controlled shutdown."
                .into()
        )
    );
    assert!(block(c.create_topics(&[manual("f1", vec![(0, vec![1])])], false))[0].is_ok());
    assert_eq!(
        err(block(c.create_partitions(
            "f1",
            2,
            Some(vec![vec![3]]),
            false
        ))),
        (
            ErrorCode::InvalidReplicaAssignment.code(),
            "All brokers specified in the manual partition assignment for partition 1 are \
             fenced or in controlled shutdown."
                .into()
        )
    );
    assert!(c.image().topic("f").is_none());
    assert_eq!(partitions(&c, "f1").len(), 1);
}

#[test]
fn manual_assignment_errors_follow_kafka() {
    let dir = tempfile::tempdir().unwrap();
    let c = cluster_with_broker_3_fenced(dir.path());
    let create =
        |a: Vec<(i32, Vec<i32>)>| err(block(c.create_topics(&[manual("x", a)], false)).remove(0));
    let m = |s: &str| (ErrorCode::InvalidReplicaAssignment.code(), s.to_string());
    assert_eq!(
        create(vec![(0, vec![1]), (0, vec![2])]),
        m("Found multiple manual partition assignments for partition 0")
    );
    assert_eq!(
        create(vec![(0, vec![])]),
        m("The manual partition assignment includes an empty replica list.")
    );
    assert_eq!(
        create(vec![(0, vec![1, 9])]),
        m("The manual partition assignment includes broker 9, but no such broker is registered.")
    );
    assert_eq!(
        create(vec![(0, vec![2, 1, 2])]),
        m("The manual partition assignment includes the broker 2 more than once.")
    );
    assert_eq!(
        create(vec![(0, vec![1, 2]), (1, vec![1])]),
        m(
            "The manual partition assignment includes a partition with 1 replica(s), but this is \
           not consistent with previous partitions, which have 2 replica(s)."
        )
    );
    assert_eq!(
        create(vec![(0, vec![1]), (2, vec![2])]),
        m("partitions should be a consecutive 0-based integer sequence")
    );
    // Growing a topic keeps its replication factor.
    assert!(block(c.create_topics(&[spec("g", 1, 2)], false))[0].is_ok());
    assert_eq!(
        err(block(c.create_partitions(
            "g",
            2,
            Some(vec![vec![1]]),
            false
        ))),
        m(
            "The manual partition assignment includes a partition with 1 replica(s), but this is \
           not consistent with previous partitions, which have 2 replica(s)."
        )
    );
}

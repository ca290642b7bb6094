use super::*;

pub(crate) fn reg(replicas: &[i32], isr: &[i32], leader: i32) -> PartitionRegistration {
    PartitionRegistration {
        replicas: replicas.to_vec(),
        isr: isr.to_vec(),
        leader,
        leader_epoch: 5,
        partition_epoch: 10,
        adding_replicas: Vec::new(),
        removing_replicas: Vec::new(),
    }
}

/// An image with brokers `1..=n` (all active) and topic "t" with the given partitions.
pub(crate) fn image(n: i32, parts: &[PartitionRegistration]) -> (MetadataImage, Uuid) {
    let id = Uuid::from_u128(7);
    let mut img = MetadataImage::default();
    for b in 1..=n {
        img.replay(&MetadataRecord::RegisterBroker {
            node_id: b,
            host: "localhost".into(),
            port: 9000 + b,
            rack: None,
            incarnation_id: Uuid::from_u128(b as u128),
            broker_epoch: None,
            fenced: Some(false),
            in_controlled_shutdown: Some(false),
        });
    }
    img.replay(&MetadataRecord::Topic {
        name: "t".into(),
        topic_id: id,
    });
    for (i, p) in parts.iter().enumerate() {
        img.replay(&MetadataRecord::Partition {
            topic_id: id,
            partition: i as i32,
            replicas: p.replicas.clone(),
            isr: p.isr.clone(),
            leader: p.leader,
            leader_epoch: p.leader_epoch,
            partition_epoch: p.partition_epoch,
            adding_replicas: Vec::new(),
            removing_replicas: Vec::new(),
        });
    }
    (img, id)
}

pub(crate) fn set(img: &mut MetadataImage, b: i32, fenced: Option<bool>, cs: Option<bool>) {
    img.replay(&MetadataRecord::BrokerRegistrationChange {
        broker_id: b,
        fenced,
        in_controlled_shutdown: cs,
    });
}

/// AlterPartition from `b` under its registered broker epoch (-1 if unregistered), the ISR
/// without broker epochs (as AlterPartition v2 sends it).
pub(crate) fn ap(
    img: &MetadataImage,
    b: i32,
    id: Uuid,
    p: i32,
    leader_epoch: i32,
    partition_epoch: i32,
    isr: Vec<i32>,
) -> Result<Vec<MetadataRecord>, AlterPartitionError> {
    let epoch = img.brokers.get(&b).map_or(-1, |i| i.epoch);
    alter_partition(
        img,
        b,
        epoch,
        id,
        p,
        leader_epoch,
        partition_epoch,
        &BrokerState::without_epochs(&isr),
    )
}

fn change(id: Uuid, p: i32, leader: Option<i32>, isr: Option<Vec<i32>>) -> MetadataRecord {
    MetadataRecord::PartitionChange {
        topic_id: id,
        partition: p,
        leader,
        isr,
        replicas: None,
        adding_replicas: None,
        removing_replicas: None,
    }
}

fn all(_: i32) -> bool {
    true
}

fn el(leader: i32, isr: &[i32], unclean: bool) -> Election {
    Election {
        leader,
        isr: isr.to_vec(),
        unclean,
    }
}

#[test]
fn online_election_keeps_a_valid_leader() {
    let r = reg(&[1, 2, 3], &[1, 2, 3], 2);
    assert_eq!(
        elect_leader(&r, all, false, false),
        el(2, &[1, 2, 3], false)
    );
}

#[test]
fn online_election_takes_isr_members_in_replica_order() {
    // ISR order differs from replica order: replica order wins.
    let r = reg(&[3, 1, 2], &[2, 1], 3);
    assert_eq!(
        elect_leader(&r, |b| b != 3, false, false),
        el(1, &[2, 1], false)
    );
    // Unusable ISR members are skipped.
    assert_eq!(
        elect_leader(&r, |b| b == 2, false, false),
        el(2, &[2, 1], false)
    );
    // A leader outside the ISR is not kept.
    let r = reg(&[1, 2, 3], &[2, 3], 1);
    assert_eq!(elect_leader(&r, all, false, false), el(2, &[2, 3], false));
}

#[test]
fn no_usable_isr_member_without_unclean_leaves_no_leader_and_the_isr() {
    let r = reg(&[1, 2, 3], &[1], 1);
    assert_eq!(
        elect_leader(&r, |b| b != 1, false, false),
        el(NO_LEADER, &[1], false)
    );
}

#[test]
fn unclean_election_only_when_allowed_and_only_without_isr_candidates() {
    let r = reg(&[1, 2, 3], &[1], 1);
    assert_eq!(elect_leader(&r, |b| b != 1, true, false), el(2, &[2], true));
    assert_eq!(elect_leader(&r, |b| b == 3, true, false), el(3, &[3], true));
    // An ISR candidate is preferred to an unclean one even when unclean is allowed.
    let r = reg(&[1, 2, 3], &[1, 3], 1);
    assert_eq!(
        elect_leader(&r, |b| b != 1, true, false),
        el(3, &[1, 3], false)
    );
    // Nobody usable at all.
    let r = reg(&[1, 2], &[1], 1);
    assert_eq!(
        elect_leader(&r, |_| false, true, false),
        el(NO_LEADER, &[1], false)
    );
}

#[test]
fn preferred_election_outcomes() {
    // Preferred in ISR and usable: elected even though the current leader is fine.
    let r = reg(&[1, 2, 3], &[1, 2, 3], 2);
    assert_eq!(elect_leader(&r, all, false, true), el(1, &[1, 2, 3], false));
    // Preferred not in ISR: current leader kept.
    let r = reg(&[1, 2, 3], &[2, 3], 2);
    assert_eq!(elect_leader(&r, all, false, true), el(2, &[2, 3], false));
    // Preferred unusable, current leader unusable: next valid replica.
    let r = reg(&[1, 2, 3], &[1, 2, 3], 2);
    assert_eq!(
        elect_leader(&r, |b| b == 3, false, true),
        el(3, &[1, 2, 3], false)
    );
    // Preferred never unclean.
    let r = reg(&[1, 2, 3], &[1], NO_LEADER);
    assert_eq!(
        elect_leader(&r, |b| b != 1, true, true),
        el(NO_LEADER, &[1], false)
    );
}

#[test]
fn build_isr_shrink_keeps_leader_epoch() {
    let id = Uuid::nil();
    let r = reg(&[1, 2, 3], &[1, 2, 3], 1);
    assert_eq!(
        build_partition_change(id, 0, &r, vec![1, 2], all, ElectionKind::Online),
        Some(change(id, 0, None, Some(vec![1, 2])))
    );
    // Nothing changes: no record.
    assert_eq!(
        build_partition_change(id, 0, &r, vec![1, 2, 3], all, ElectionKind::Online),
        None
    );
}

#[test]
fn build_never_writes_an_empty_isr() {
    let id = Uuid::nil();
    let r = reg(&[1, 2, 3], &[1], 1);
    assert_eq!(
        build_partition_change(id, 0, &r, vec![], |b| b != 1, ElectionKind::Online),
        Some(change(id, 0, Some(NO_LEADER), None))
    );
    // Unclean: new leader and ISR = just it.
    assert_eq!(
        build_partition_change(id, 0, &r, vec![], |b| b != 1, ElectionKind::Unclean),
        Some(change(id, 0, Some(2), Some(vec![2])))
    );
    // Already leaderless and still no candidate: no record.
    let r = reg(&[1, 2, 3], &[1], NO_LEADER);
    assert_eq!(
        build_partition_change(id, 0, &r, vec![], |b| b != 1, ElectionKind::Online),
        None
    );
}

#[test]
fn alter_partition_shrinks_and_expands_isr() {
    let (img, id) = image(3, &[reg(&[1, 2, 3], &[1, 2, 3], 1)]);
    let recs = ap(&img, 1, id, 0, 5, 10, vec![1, 3]).unwrap();
    assert_eq!(recs, vec![change(id, 0, None, Some(vec![1, 3]))]);
    let mut next = img.clone();
    next.replay(&recs[0]);
    let p = &next.topic("t").unwrap().partitions[&0];
    assert_eq!((p.leader_epoch, p.partition_epoch), (5, 11));
    // Expand back with the new partition epoch.
    let recs = ap(&next, 1, id, 0, 5, 11, vec![1, 3, 2]).unwrap();
    assert_eq!(recs, vec![change(id, 0, None, Some(vec![1, 3, 2]))]);
    // Same ISR: nothing to write.
    assert_eq!(ap(&img, 1, id, 0, 5, 10, vec![1, 2, 3]).unwrap(), vec![]);
}

#[test]
fn alter_partition_rejections_follow_kafka() {
    use AlterPartitionError as E;
    let (mut img, id) = image(4, &[reg(&[1, 2, 3], &[1, 2, 3], 1)]);
    let code = |r: Result<Vec<MetadataRecord>, E>| r.unwrap_err().code();
    assert_eq!(code(ap(&img, 9, id, 0, 5, 10, vec![1])), 77);
    assert_eq!(
        code(ap(&img, 1, Uuid::from_u128(1), 0, 5, 10, vec![1])),
        100
    );
    assert_eq!(code(ap(&img, 1, id, 3, 5, 10, vec![1])), 3);
    // Newer epochs than ours: NOT_CONTROLLER (checked before staleness and leadership).
    assert_eq!(code(ap(&img, 2, id, 0, 6, 10, vec![1])), 41);
    assert_eq!(code(ap(&img, 1, id, 0, 5, 11, vec![1])), 41);
    // Stale leader epoch, even from a non-leader.
    assert_eq!(code(ap(&img, 2, id, 0, 4, 10, vec![1])), 74);
    // Not the leader: INVALID_REQUEST.
    assert_eq!(code(ap(&img, 2, id, 0, 5, 10, vec![1, 2])), 42);
    // Stale partition epoch.
    assert_eq!(code(ap(&img, 1, id, 0, 5, 9, vec![1])), 95);
    // Not a replica, duplicate, without the leader, empty: INVALID_REQUEST.
    assert_eq!(code(ap(&img, 1, id, 0, 5, 10, vec![1, 4])), 42);
    assert_eq!(code(ap(&img, 1, id, 0, 5, 10, vec![1, 1])), 42);
    assert_eq!(code(ap(&img, 1, id, 0, 5, 10, vec![2, 3])), 42);
    assert_eq!(code(ap(&img, 1, id, 0, 5, 10, vec![])), 42);
    // Fenced or shutting-down member: INELIGIBLE_REPLICA.
    set(&mut img, 3, Some(true), None);
    assert_eq!(code(ap(&img, 1, id, 0, 5, 10, vec![1, 3])), 107);
    set(&mut img, 3, Some(false), Some(true));
    assert_eq!(code(ap(&img, 1, id, 0, 5, 10, vec![1, 3])), 107);
    // Shrinking away the ineligible one is fine.
    assert!(ap(&img, 1, id, 0, 5, 10, vec![1, 2]).is_ok());
}

/// KIP-903: the request-level broker epoch of the leader (Kafka's `checkBrokerEpoch`, no
/// exception for -1) and the epoch the leader knows each new ISR member by (-1: unknown, not
/// checked) against the members' registrations.
#[test]
fn alter_partition_checks_broker_epochs() {
    use AlterPartitionError as E;
    let (mut img, id) = image(3, &[reg(&[1, 2, 3], &[1, 2], 1)]);
    let epoch = |img: &MetadataImage, b: i32| img.brokers[&b].epoch;
    let st = |b: i32, e: i64| BrokerState {
        broker_id: b,
        broker_epoch: e,
    };
    let (e1, e3) = (epoch(&img, 1), epoch(&img, 3));
    let call = |img: &MetadataImage, leader_epoch: i64, isr: &[BrokerState]| {
        alter_partition(img, 1, leader_epoch, id, 0, 5, 10, isr)
    };
    // The leader's own epoch.
    for stale in [-1, e1 + 1] {
        let e = call(&img, stale, &[st(1, e1), st(2, -1)]).unwrap_err();
        assert_eq!(e.code(), 77, "{e}");
        assert!(matches!(e, E::StaleBrokerEpoch(_)));
    }
    // A member's epoch: the current one or -1 pass, another is an earlier incarnation.
    assert!(call(&img, e1, &[st(1, e1), st(2, -1), st(3, e3)]).is_ok());
    let e = call(&img, e1, &[st(1, e1), st(2, -1), st(3, e3 - 1)]).unwrap_err();
    assert_eq!(e.code(), 107);
    assert_eq!(
        e.to_string(),
        format!(
            "The new ISR [1, 2, 3] for t-0 contains ineligible replicas: 3 (broker epoch \
             mismatch: requested={} VS expected={e3}).",
            e3 - 1
        )
    );
    // Broker 3 restarts: a new incarnation, a new epoch; a proposal built from a fetch of
    // the old one is refused, one from the new one's fetch accepted once it is unfenced.
    img.replay(&MetadataRecord::RegisterBroker {
        node_id: 3,
        host: "localhost".into(),
        port: 9003,
        rack: None,
        incarnation_id: Uuid::from_u128(33),
        broker_epoch: None,
        fenced: Some(false),
        in_controlled_shutdown: Some(false),
    });
    let new3 = epoch(&img, 3);
    assert!(new3 > e3);
    assert_eq!(
        call(&img, e1, &[st(1, e1), st(2, -1), st(3, e3)])
            .unwrap_err()
            .code(),
        107
    );
    assert!(call(&img, e1, &[st(1, e1), st(2, -1), st(3, new3)]).is_ok());
}

#[test]
fn alter_partition_by_a_shutting_down_leader_is_ineligible() {
    let (mut img, id) = image(3, &[reg(&[1, 2, 3], &[1, 2], 1)]);
    set(&mut img, 1, None, Some(true));
    let e = ap(&img, 1, id, 0, 5, 10, vec![1, 2]).unwrap_err();
    assert_eq!(e.code(), 107);
}

#[test]
fn preferred_leader_election_outcomes() {
    let (mut img, id) = image(
        3,
        &[
            reg(&[1, 2, 3], &[1, 2, 3], 1),         // already preferred
            reg(&[1, 2, 3], &[1, 2, 3], 2),         // preferred available
            reg(&[1, 2, 3], &[2, 3], 2),            // preferred not in ISR
            reg(&[1, 2, 3], &[1, 2, 3], NO_LEADER), // leaderless
        ],
    );
    let e = preferred_leader_election(&img, "t", 0).unwrap_err();
    assert_eq!((e.code(), e), (84, ElectLeadersError::ElectionNotNeeded));
    assert_eq!(
        preferred_leader_election(&img, "t", 1).unwrap(),
        vec![change(id, 1, Some(1), None)]
    );
    assert_eq!(
        preferred_leader_election(&img, "t", 2).unwrap_err().code(),
        80
    );
    assert_eq!(
        preferred_leader_election(&img, "t", 3).unwrap(),
        vec![change(id, 3, Some(1), None)]
    );
    assert_eq!(
        preferred_leader_election(&img, "t", 9).unwrap_err().code(),
        3
    );
    assert_eq!(
        preferred_leader_election(&img, "x", 0).unwrap_err().code(),
        3
    );
    // Preferred replica fenced: not available, leader stays.
    set(&mut img, 1, Some(true), None);
    assert_eq!(
        preferred_leader_election(&img, "t", 1).unwrap_err().code(),
        80
    );
    // Leaderless with the preferred fenced: another ISR member is elected (as Kafka).
    assert_eq!(
        preferred_leader_election(&img, "t", 3).unwrap(),
        vec![change(id, 3, Some(2), None)]
    );
}

#[test]
fn unclean_leader_election_outcomes() {
    let (mut img, id) = image(
        3,
        &[
            reg(&[1, 2, 3], &[1, 2, 3], 1),
            reg(&[1, 2, 3], &[1], NO_LEADER),
            reg(&[1, 2], &[1], NO_LEADER),
        ],
    );
    assert_eq!(
        unclean_leader_election(&img, "t", 0).unwrap_err().code(),
        84
    );
    set(&mut img, 1, Some(true), None);
    assert_eq!(
        unclean_leader_election(&img, "t", 1).unwrap(),
        vec![change(id, 1, Some(2), Some(vec![2]))]
    );
    set(&mut img, 2, Some(true), None);
    assert_eq!(
        unclean_leader_election(&img, "t", 2).unwrap_err().code(),
        83
    );
    // An ISR member that came back is elected cleanly.
    set(&mut img, 1, Some(false), None);
    assert_eq!(
        unclean_leader_election(&img, "t", 2).unwrap(),
        vec![change(id, 2, Some(1), None)]
    );
    assert_eq!(unclean_leader_election(&img, "t", 7).unwrap_err().code(), 3);
}

#[test]
fn reassignment_starts_completes_on_isr_and_cancels() {
    let (mut img, id) = image(3, &[reg(&[1, 2], &[1, 2], 1)]);
    let e = |r: Result<Vec<MetadataRecord>, ReassignmentError>| r.unwrap_err().code();
    assert_eq!(
        e(alter_partition_reassignment(&img, "x", 0, Some(vec![1]))),
        3
    );
    assert_eq!(
        e(alter_partition_reassignment(&img, "t", 0, Some(vec![2, 9]))),
        39
    );
    assert_eq!(e(alter_partition_reassignment(&img, "t", 0, None)), 85);
    for r in alter_partition_reassignment(&img, "t", 0, Some(vec![2, 3])).unwrap() {
        img.replay(&r);
    }
    let p = &img.topic("t").unwrap().partitions[&0];
    assert_eq!(
        (
            &p.replicas[..],
            &p.adding_replicas[..],
            &p.removing_replicas[..]
        ),
        (&[2, 3, 1][..], &[3][..], &[1][..])
    );
    // The leader's ISR expansion to include 3 completes it; leader 1 is removed.
    let (le, pe) = (p.leader_epoch, p.partition_epoch);
    let recs = ap(&img, 1, id, 0, le, pe, vec![1, 2, 3]).unwrap();
    for r in &recs {
        img.replay(r);
    }
    let p = &img.topic("t").unwrap().partitions[&0];
    assert_eq!(p.replicas, vec![2, 3]);
    assert_eq!(p.isr, vec![2, 3]);
    assert_eq!(p.leader, 2);
    assert_eq!(p.leader_epoch, le + 1);
    assert!(!p.is_reassigning());
    // Start another, then cancel it: the adding replica goes away.
    for r in alter_partition_reassignment(&img, "t", 0, Some(vec![3, 1])).unwrap() {
        img.replay(&r);
    }
    assert!(img.topic("t").unwrap().partitions[&0].is_reassigning());
    for r in alter_partition_reassignment(&img, "t", 0, None).unwrap() {
        img.replay(&r);
    }
    let p = &img.topic("t").unwrap().partitions[&0];
    assert_eq!(p.replicas, vec![3, 2]);
    assert_eq!(p.isr, vec![2, 3]);
    assert!(!p.is_reassigning());
    // Shrinking to a subset of the ISR completes at once.
    for r in alter_partition_reassignment(&img, "t", 0, Some(vec![3])).unwrap() {
        img.replay(&r);
    }
    let p = &img.topic("t").unwrap().partitions[&0];
    assert_eq!(
        (p.replicas.clone(), p.isr.clone(), p.leader),
        (vec![3], vec![3], 3)
    );
}

#[test]
fn old_partition_json_replays_without_reassignment_fields() {
    let r: MetadataRecord = serde_json::from_str(
        r#"{"type":"Partition","topic_id":"00000000-0000-0000-0000-000000000000","partition":0,"replicas":[1],"isr":[1],"leader":1,"leader_epoch":0,"partition_epoch":0}"#,
    )
    .unwrap();
    assert!(
        matches!(r, MetadataRecord::Partition { ref adding_replicas, .. } if adding_replicas.is_empty())
    );
}

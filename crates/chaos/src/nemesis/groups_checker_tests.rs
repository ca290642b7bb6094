//! Crafted histories: a clean one passes; each violation is caught; the legitimate lags and
//! races the rules allow are not reported.

use super::*;

fn acked(producer: usize, seq: u64, partition: i32, offset: i64) -> Acked {
    Acked {
        producer,
        seq,
        partition,
        offset,
    }
}

fn consumed(member: &str, partition: i32, offset: i64, generation: i32, at: u64) -> Consumed {
    Consumed {
        member: member.into(),
        partition,
        offset,
        value: value_of(0, (partition as u64) * 100 + offset as u64),
        generation,
        at,
    }
}

fn commit(member: &str, partition: i32, offset: i64, sent: u64, outcome: Outcome) -> Commit {
    Commit {
        member: member.into(),
        generation: 1,
        partition,
        offset,
        sent,
        done: sent + 10,
        outcome,
    }
}

fn sample(start: u64, offsets: &[(i32, i64)]) -> Sample {
    Sample {
        start,
        end: start + 10,
        offsets: offsets.iter().copied().collect(),
    }
}

fn event(member: &str, at: u64, kind: EventKind, partitions: &[i32]) -> Event {
    Event {
        member: member.into(),
        at,
        kind,
        partitions: partitions.to_vec(),
        generation: 1,
    }
}

fn holding(member: &str, at: u64, generation: i32, partitions: &[i32]) -> Holding {
    Holding {
        member: member.into(),
        at,
        generation,
        partitions: partitions.to_vec(),
    }
}

/// Partitions 0 and 1, four records each (value p0-<partition*100+offset>). Classic: a0 owns
/// both in generation 1, consumes 0..2 of each and commits 2; a rebalance (generation 2) gives
/// partition 1 to b0, which resumes from 2 and commits 4; a0 keeps partition 0 and commits 4.
fn clean() -> (GroupHistory, Vec<Acked>) {
    let mut produced = Vec::new();
    for p in 0..2 {
        for o in 0..4 {
            produced.push(acked(0, (p as u64) * 100 + o as u64, p, o));
        }
    }
    let mut h = GroupHistory {
        group: "g".into(),
        protocol: Some(Protocol::Classic),
        ..Default::default()
    };
    h.holdings.push(holding("a0", 10, 1, &[0, 1]));
    h.events.push(event("a0", 10, EventKind::Assigned, &[0, 1]));
    for p in 0..2 {
        for o in 0..2 {
            h.consumed.push(consumed("a0", p, o, 1, 20));
        }
        h.commits.push(commit("a0", p, 2, 30, Outcome::Acked));
    }
    h.samples.push(sample(50, &[(0, 2), (1, 2)]));
    h.events.push(event("a0", 60, EventKind::Revoked, &[1]));
    h.holdings.push(holding("a0", 70, 2, &[0]));
    h.holdings.push(holding("b0", 70, 2, &[1]));
    h.events.push(event("b0", 70, EventKind::Assigned, &[1]));
    for o in 2..4 {
        h.consumed.push(consumed("a0", 0, o, 2, 80));
        h.consumed.push(consumed("b0", 1, o, 2, 80));
    }
    h.commits.push(commit("a0", 0, 4, 90, Outcome::Acked));
    h.commits.push(commit("b0", 1, 4, 90, Outcome::Acked));
    h.last = Some(sample(200, &[(0, 4), (1, 4)]));
    (h, produced)
}

fn kinds(r: &GroupReport) -> Vec<&'static str> {
    r.violations.iter().map(|v| v.kind()).collect()
}

#[test]
fn a_clean_history_passes() {
    let (h, produced) = clean();
    let r = check_group(&h, &produced);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert_eq!(r.distinct_consumed, 8);
    assert_eq!(r.acked_commits, 4);
    assert_eq!(r.generations, 2);
}

#[test]
fn the_same_history_under_the_consumer_protocol_passes() {
    let (mut h, produced) = clean();
    h.protocol = Some(Protocol::Consumer);
    let r = check_group(&h, &produced);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
}

#[test]
fn a_skipped_record_is_reported() {
    let (mut h, produced) = clean();
    // b0 never received partition 1 offset 2, yet the group committed 4.
    h.consumed
        .retain(|c| !(c.member == "b0" && c.partition == 1 && c.offset == 2));
    let r = check_group(&h, &produced);
    assert_eq!(kinds(&r), vec!["group-skipped"], "{:?}", r.violations);
    assert!(r.violations[0].to_string().contains("p0-102"));
}

#[test]
fn records_at_or_above_the_committed_offset_may_be_unconsumed() {
    let (h, mut produced) = clean();
    produced.push(acked(0, 4, 0, 4));
    produced.push(acked(0, 5, 0, 5));
    let r = check_group(&h, &produced);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
}

#[test]
fn a_lost_commit_is_reported() {
    let (mut h, produced) = clean();
    // The final OffsetFetch answers 2 for partition 1 though 4 was acknowledged.
    h.last = Some(sample(200, &[(0, 4), (1, 2)]));
    let r = check_group(&h, &produced);
    assert!(
        kinds(&r).contains(&"group-offset-lost"),
        "{:?}",
        r.violations
    );
    // A sample begun before the ack is not held to it.
    let (mut h, produced) = clean();
    h.samples.push(sample(95, &[(0, 2), (1, 2)]));
    let r = check_group(&h, &produced);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
}

#[test]
fn a_partition_missing_from_the_final_fetch_is_lost() {
    let (mut h, produced) = clean();
    h.last = Some(sample(200, &[(0, 4)]));
    let r = check_group(&h, &produced);
    assert_eq!(kinds(&r), vec!["group-offset-lost"], "{:?}", r.violations);
}

#[test]
fn samples_going_backwards_are_reported() {
    let (mut h, produced) = clean();
    h.samples.push(sample(100, &[(0, 4), (1, 4)]));
    h.samples.push(sample(150, &[(0, 4), (1, 3)]));
    let r = check_group(&h, &produced);
    assert!(
        kinds(&r).contains(&"group-offset-backwards"),
        "{:?}",
        r.violations
    );
}

#[test]
fn an_acked_commit_below_an_earlier_one_is_reported() {
    let (mut h, produced) = clean();
    h.commits.push(commit("b0", 1, 3, 120, Outcome::Acked));
    let r = check_group(&h, &produced);
    assert!(
        kinds(&r).contains(&"group-offset-backwards"),
        "{:?}",
        r.violations
    );
}

#[test]
fn a_late_commit_of_unknown_outcome_excuses_a_regression_to_its_offset() {
    let (mut h, produced) = clean();
    // a0's commit of 3 on partition 1 timed out before b0 committed 4; the broker applied it
    // after 4, so the stored offset is 3. Exactly that is excused; 2 would not be.
    h.commits.push(commit("a0", 1, 3, 55, Outcome::Unknown));
    h.samples.push(sample(150, &[(0, 4), (1, 3)]));
    h.last = Some(sample(200, &[(0, 4), (1, 3)]));
    let r = check_group(&h, &produced);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert!(r.excused > 0);
    h.last = Some(sample(200, &[(0, 4), (1, 2)]));
    let r = check_group(&h, &produced);
    assert!(!r.violations.is_empty());
}

#[test]
fn two_classic_owners_in_one_generation_are_reported() {
    let (mut h, produced) = clean();
    // b0 also got partition 0 in generation 2.
    h.holdings.push(holding("b0", 75, 2, &[0, 1]));
    let r = check_group(&h, &produced);
    assert_eq!(kinds(&r), vec!["group-two-owners"], "{:?}", r.violations);
    assert!(r.violations[0].to_string().contains("generation 2"));
    // Seen through a record it received, too.
    let (mut h, produced) = clean();
    h.consumed.push(consumed("b0", 0, 3, 2, 85));
    let r = check_group(&h, &produced);
    assert_eq!(kinds(&r), vec!["group-two-owners"], "{:?}", r.violations);
}

#[test]
fn a_fenced_classic_member_lagging_into_the_next_generation_is_not_reported() {
    let (mut h, produced) = clean();
    // a0 still believes it holds partition 1 (generation 1) after b0 got it in generation 2;
    // and a reset member (generation -1) holds nothing.
    h.holdings.push(holding("a0", 80, 1, &[0, 1]));
    h.holdings.push(holding("a0", 85, -1, &[0, 1]));
    let r = check_group(&h, &produced);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
}

#[test]
fn a_consumer_protocol_handover_before_the_revocation_is_counted_not_reported() {
    let (mut h, produced) = clean();
    h.protocol = Some(Protocol::Consumer);
    // b0 assigned partition 1 at 70, but a0 revoked it only at 72 (the clients' view).
    h.events
        .retain(|e| !(e.member == "a0" && e.kind == EventKind::Revoked));
    h.events.push(event("a0", 72, EventKind::Revoked, &[1]));
    let r = check_group(&h, &produced);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert_eq!(r.client_overlaps.len(), 1, "{:?}", r.client_overlaps);
}

fn held(offset: i64, member: &str, epoch: i32, parts: Option<&[i32]>) -> CoordinatorAssignment {
    CoordinatorAssignment {
        offset,
        member: member.into(),
        epoch,
        held: parts.map(|ps| ps.iter().map(|&p| ("t".to_string(), p)).collect()),
    }
}

#[test]
fn the_coordinators_handover_through_revocation_passes() {
    let (mut h, produced) = clean();
    h.protocol = Some(Protocol::Consumer);
    // a0 holds 0 and 1 (1 then pending revocation), gives 1 up, then b0 gets it; a removed
    // member (tombstone) holds nothing.
    h.coordinator = Some(vec![
        held(1, "a0", 1, Some(&[0, 1])),
        held(2, "b0", 2, Some(&[])),
        held(3, "a0", 1, Some(&[0, 1])),
        held(4, "a0", 2, Some(&[0])),
        held(5, "b0", 2, Some(&[1])),
        held(6, "b0", -1, None),
        held(7, "a0", 3, Some(&[0, 1])),
    ]);
    let r = check_group(&h, &produced);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert_eq!(r.coordinator_records, 7);
}

#[test]
fn a_partition_the_coordinator_gives_while_pending_revocation_is_reported() {
    let (mut h, produced) = clean();
    h.protocol = Some(Protocol::Consumer);
    // b0 gets partition 1 while a0 still holds it.
    h.coordinator = Some(vec![
        held(1, "a0", 1, Some(&[0, 1])),
        held(2, "b0", 2, Some(&[1])),
        held(3, "a0", 2, Some(&[0])),
    ]);
    let r = check_group(&h, &produced);
    assert_eq!(kinds(&r), vec!["group-two-owners"], "{:?}", r.violations);
    assert!(r.violations[0].to_string().contains("offset 2"));
}

#[test]
fn a_consumer_protocol_member_that_lost_its_partitions_may_overlap() {
    let (mut h, produced) = clean();
    h.protocol = Some(Protocol::Consumer);
    // a0 was fenced (it learns at 72, as lost), or dropped without callbacks: the coordinator
    // may have given partition 1 to b0 at 70 already.
    h.events
        .retain(|e| !(e.member == "a0" && e.kind == EventKind::Revoked));
    h.events.push(event("a0", 72, EventKind::Lost, &[1]));
    let r = check_group(&h, &produced);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    let (mut h, produced) = clean();
    h.protocol = Some(Protocol::Consumer);
    h.events
        .retain(|e| !(e.member == "a0" && e.kind == EventKind::Revoked));
    h.events.push(event("a0", 72, EventKind::Gone, &[]));
    let r = check_group(&h, &produced);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
}

//! Crafted histories: a clean one (committed, aborted and unknown transactions, consumers at
//! different depths) passes; each fault the checker is for is caught, and only by its rule.

use super::*;

/// A transaction of `size` records, record i in partition i % 2 at `offsets[i]` (acked).
fn txn(producer: usize, t: u64, outcome: TxnOutcome, offsets: &[i64]) -> Txn {
    Txn {
        producer,
        txn: t,
        intended_commit: outcome != TxnOutcome::Aborted,
        outcome,
        records: offsets
            .iter()
            .enumerate()
            .map(|(i, &o)| ((i % 2) as i32, Some(o)))
            .collect(),
    }
}

fn served(consumer: &str, partition: i32, offset: i64, value: &str) -> Served {
    Served {
        consumer: consumer.into(),
        partition,
        offset,
        value: value.into(),
    }
}

/// Producer 0: txn 0 committed (p0@0, p1@0), txn 1 aborted (p0@2, p1@2; markers at 1), txn 2
/// unknown and committed (p0@4, p1@4), txn 3 unknown and aborted (p0@6, p1@6). Producer 1:
/// txn 0 committed (p0@8, p1@8). Markers take the odd offsets.
fn clean() -> (TxnHistory, FinalLog) {
    let h = TxnHistory {
        txns: vec![
            txn(0, 0, TxnOutcome::Committed, &[0, 0]),
            txn(0, 1, TxnOutcome::Aborted, &[2, 2]),
            txn(0, 2, TxnOutcome::Unknown, &[4, 4]),
            txn(0, 3, TxnOutcome::Unknown, &[6, 6]),
            txn(1, 0, TxnOutcome::Committed, &[8, 8]),
        ],
        ..Default::default()
    };
    let mut log = FinalLog::new();
    for p in 0..2 {
        log.insert(
            p,
            vec![
                (0, txn_value(0, 0, p as usize, true)),
                (4, txn_value(0, 2, p as usize, true)),
                (8, txn_value(1, 0, p as usize, true)),
            ],
        );
    }
    (h, log)
}

fn kinds(r: &TxnReport) -> Vec<&'static str> {
    r.violations.iter().map(|v| v.kind()).collect()
}

#[test]
fn values_round_trip() {
    assert_eq!(
        parse_txn_value(&txn_value(3, 17, 9, true)),
        Some((3, 17, 9, true))
    );
    assert_eq!(
        parse_txn_value(&txn_value(0, 0, 0, false)),
        Some((0, 0, 0, false))
    );
    assert_eq!(parse_txn_value("p1-2"), None);
    assert_eq!(parse_txn_value("t1-2-3-x"), None);
    assert_eq!(parse_txn_value("t1-2-3-c-4"), None);
}

#[test]
fn clean_history_passes() {
    let (mut h, log) = clean();
    // c0.1 read everything; c1.1 read p0 to 5 (past txn 2) and p1 only to 1; c2.1 nothing yet.
    for p in 0..2 {
        for (o, v) in &log[&p] {
            h.served.push(served("c0.1", p, *o, v));
        }
        h.progress.insert(("c0.1".into(), p), 10);
    }
    h.served.push(served("c1.1", 0, 0, &log[&0][0].1));
    h.served.push(served("c1.1", 0, 4, &log[&0][1].1));
    // Served again after a re-fetch: the same offset twice is no duplicate.
    h.served.push(served("c1.1", 0, 4, &log[&0][1].1));
    h.served.push(served("c1.1", 1, 0, &log[&1][0].1));
    h.progress.insert(("c1.1".into(), 0), 5);
    h.progress.insert(("c1.1".into(), 1), 1);
    h.progress.insert(("c2.1".into(), 0), 0);
    let r = check_txns(&h, &log);
    assert!(r.violations.is_empty(), "{:#?}", r.violations);
    assert_eq!(
        (
            r.committed,
            r.aborted,
            r.unknown_committed,
            r.unknown_aborted
        ),
        (2, 1, 1, 1)
    );
    assert_eq!(r.records_in_log, 6);
}

#[test]
fn aborted_read_by_a_consumer() {
    let (mut h, log) = clean();
    h.served
        .push(served("c0.1", 0, 2, &txn_value(0, 1, 0, false)));
    let r = check_txns(&h, &log);
    assert_eq!(kinds(&r), ["txn-aborted-read"], "{:#?}", r.violations);
}

#[test]
fn aborted_transaction_in_the_final_read() {
    let (h, mut log) = clean();
    for p in 0..2 {
        log.get_mut(&p)
            .unwrap()
            .insert(1, (2, txn_value(0, 1, p as usize, false)));
    }
    let r = check_txns(&h, &log);
    assert_eq!(
        kinds(&r),
        ["txn-aborted-read", "txn-aborted-read"],
        "{:#?}",
        r.violations
    );
}

#[test]
fn lost_commit() {
    let (h, mut log) = clean();
    for p in 0..2 {
        log.get_mut(&p).unwrap().retain(|(o, _)| *o != 8);
    }
    let r = check_txns(&h, &log);
    assert_eq!(kinds(&r), ["txn-lost-commit"], "{:#?}", r.violations);
}

#[test]
fn transaction_partly_in_the_final_read() {
    // Committed: half of it gone; unknown: half of it there.
    let (h, mut log) = clean();
    log.get_mut(&1).unwrap().retain(|(o, _)| *o != 0);
    log.get_mut(&1).unwrap().push((6, txn_value(0, 3, 1, true)));
    log.get_mut(&1).unwrap().sort();
    let r = check_txns(&h, &log);
    assert_eq!(
        kinds(&r),
        ["txn-partial", "txn-partial"],
        "{:#?}",
        r.violations
    );
}

#[test]
fn consumer_sees_a_transaction_partly() {
    // c0.1 got txn 0's record in p0, and read past its record in p1 without getting it.
    let (mut h, log) = clean();
    h.served.push(served("c0.1", 0, 0, &log[&0][0].1));
    h.progress.insert(("c0.1".into(), 0), 1);
    h.progress.insert(("c0.1".into(), 1), 3);
    let r = check_txns(&h, &log);
    assert_eq!(kinds(&r), ["txn-partial-view"], "{:#?}", r.violations);
    match &r.violations[0] {
        TxnViolation::PartialView { missed, txn, .. } => {
            assert_eq!(missed, &[(1, 0)]);
            assert_eq!(*txn, 0);
        }
        v => panic!("{v:?}"),
    }
}

#[test]
fn consumer_not_yet_past_a_record_is_fine() {
    // Position 0 in p1: not past the record at offset 0.
    let (mut h, log) = clean();
    h.served.push(served("c0.1", 0, 0, &log[&0][0].1));
    h.progress.insert(("c0.1".into(), 0), 1);
    h.progress.insert(("c0.1".into(), 1), 0);
    assert!(check_txns(&h, &log).violations.is_empty());
}

#[test]
fn consumer_skips_a_committed_record() {
    let (mut h, log) = clean();
    h.served.push(served("c0.1", 0, 0, &log[&0][0].1));
    h.progress.insert(("c0.1".into(), 0), 9);
    let r = check_txns(&h, &log);
    // Offsets 4 (txn 2 of producer 0) and 8 (producer 1) were passed over.
    assert_eq!(
        kinds(&r),
        ["txn-skipped", "txn-skipped"],
        "{:#?}",
        r.violations
    );
}

#[test]
fn consumer_served_what_the_final_read_lacks() {
    // An unknown transaction the consumer read, which the final read shows aborted.
    let (mut h, log) = clean();
    h.served
        .push(served("c0.1", 0, 6, &txn_value(0, 3, 0, true)));
    let r = check_txns(&h, &log);
    assert_eq!(kinds(&r), ["txn-vanished"], "{:#?}", r.violations);
}

#[test]
fn duplicates() {
    let (mut h, mut log) = clean();
    log.get_mut(&0)
        .unwrap()
        .push((10, txn_value(1, 0, 0, true)));
    let r = check_txns(&h, &log);
    assert_eq!(
        kinds(&r),
        ["txn-reordered", "txn-duplicate"],
        "{:#?}",
        r.violations
    );
    // A consumer served one record at two offsets.
    let (_, log) = clean();
    h.served
        .push(served("c0.1", 0, 8, &txn_value(1, 0, 0, true)));
    h.served
        .push(served("c0.1", 0, 9, &txn_value(1, 0, 0, true)));
    let r = check_txns(&h, &log);
    assert_eq!(
        kinds(&r),
        ["txn-vanished", "txn-duplicate"],
        "{:#?}",
        r.violations
    );
}

#[test]
fn reordered_transactions_of_one_producer() {
    let (h, mut log) = clean();
    // Producer 0's txn 2 before its txn 0 in p0.
    let p0 = log.get_mut(&0).unwrap();
    let (a, b) = (p0[0].1.clone(), p0[1].1.clone());
    p0[0].1 = b;
    p0[1].1 = a;
    let r = check_txns(&h, &log);
    assert!(kinds(&r).contains(&"txn-reordered"), "{:#?}", r.violations);
}

#[test]
fn wrong_offset() {
    let (mut h, log) = clean();
    h.txns[0].records[1] = (1, Some(3));
    let r = check_txns(&h, &log);
    assert_eq!(kinds(&r), ["txn-wrong-offset"], "{:#?}", r.violations);
}

#[test]
fn phantom_transaction() {
    let (h, mut log) = clean();
    log.get_mut(&0)
        .unwrap()
        .push((12, txn_value(2, 0, 0, true)));
    let r = check_txns(&h, &log);
    assert_eq!(kinds(&r), ["txn-phantom"], "{:#?}", r.violations);
}

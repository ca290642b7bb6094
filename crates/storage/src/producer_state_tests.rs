//! Unit tests of the producer state (sequences, duplicates, snapshots, expiration,
//! transactions).

use super::*;

fn batch(pid: i64, epoch: i16, first_seq: i32, n: i32) -> ProducerBatch {
    ProducerBatch {
        producer_id: pid,
        producer_epoch: epoch,
        first_seq,
        offset_delta: n - 1,
        max_timestamp: 1_000,
        is_control: false,
        is_transactional: false,
        marker: None,
    }
}

fn psm() -> (tempfile::TempDir, ProducerStateManager) {
    let dir = tempfile::tempdir().unwrap();
    let m = ProducerStateManager::new(dir.path(), 86_400_000).unwrap();
    (dir, m)
}

#[test]
fn sequences_duplicates_and_gaps() {
    let (_d, mut m) = psm();
    let c = AppendOrigin::Client;
    // A new producer at sequence 0.
    assert_eq!(m.validate(&[batch(7, 0, 0, 2)], c), Ok(None));
    m.update(&batch(7, 0, 0, 2), 1);
    // In sequence.
    assert_eq!(m.validate(&[batch(7, 0, 2, 3)], c), Ok(None));
    m.update(&batch(7, 0, 2, 3), 4);
    // A retry of either retained batch is a duplicate with its original offsets.
    let dup = m.validate(&[batch(7, 0, 0, 2)], c).unwrap().unwrap();
    assert_eq!((dup.first_offset(), dup.last_offset), (0, 1));
    let dup = m.validate(&[batch(7, 0, 2, 3)], c).unwrap().unwrap();
    assert_eq!((dup.first_offset(), dup.last_offset), (2, 4));
    // A gap, and a partial overlap, are out of order.
    assert!(matches!(
        m.validate(&[batch(7, 0, 6, 1)], c),
        Err(ProducerStateError::OutOfOrderSequence(_))
    ));
    assert!(matches!(
        m.validate(&[batch(7, 0, 1, 1)], c),
        Err(ProducerStateError::OutOfOrderSequence(_))
    ));
    // An older epoch is fenced; a newer one must start at 0.
    assert!(matches!(
        m.validate(&[batch(7, 1, 3, 1)], c),
        Err(ProducerStateError::OutOfOrderSequence(_))
    ));
    assert_eq!(m.validate(&[batch(7, 1, 0, 1)], c), Ok(None));
    m.update(&batch(7, 1, 0, 1), 5);
    assert!(matches!(
        m.validate(&[batch(7, 0, 5, 1)], c),
        Err(ProducerStateError::InvalidProducerEpoch(_))
    ));
    // Replication never refuses.
    assert_eq!(
        m.validate(&[batch(7, 1, 9, 1)], AppendOrigin::Replication),
        Ok(None)
    );
    // Idempotence off passes unchecked.
    assert_eq!(m.validate(&[batch(-1, -1, -1, 3)], c), Ok(None));
}

#[test]
fn only_the_last_five_batches_are_duplicates() {
    let (_d, mut m) = psm();
    for i in 0..7 {
        m.update(&batch(1, 0, i, 1), i as i64);
    }
    let e = &m.producers()[&1];
    assert_eq!(e.batches.len(), NUM_BATCHES_TO_RETAIN);
    assert!(m
        .validate(&[batch(1, 0, 1, 1)], AppendOrigin::Client)
        .is_err());
    assert!(m
        .validate(&[batch(1, 0, 2, 1)], AppendOrigin::Client)
        .unwrap()
        .is_some());
    assert_eq!(
        m.validate(&[batch(1, 0, 7, 1)], AppendOrigin::Client),
        Ok(None)
    );
}

#[test]
fn sequence_wraps_at_int_max() {
    let (_d, mut m) = psm();
    m.update(&batch(1, 0, i32::MAX - 1, 2), 1);
    assert_eq!(m.producers()[&1].last_seq(), i32::MAX);
    assert_eq!(
        m.validate(&[batch(1, 0, 0, 1)], AppendOrigin::Client),
        Ok(None)
    );
    m.update(&batch(1, 0, i32::MAX, 2), 3);
    assert_eq!(m.producers()[&1].last_seq(), 0);
}

#[test]
fn unknown_producer_accepted_at_any_sequence() {
    let (_d, m) = psm();
    assert_eq!(
        m.validate(&[batch(9, 3, 42, 1)], AppendOrigin::Client),
        Ok(None)
    );
}

#[test]
fn several_batches_in_one_append_are_chained() {
    let (_d, m) = psm();
    let c = AppendOrigin::Client;
    assert_eq!(
        m.validate(&[batch(1, 0, 0, 2), batch(1, 0, 2, 1)], c),
        Ok(None)
    );
    assert!(m
        .validate(&[batch(1, 0, 0, 2), batch(1, 0, 3, 1)], c)
        .is_err());
}

#[test]
fn snapshot_round_trip_keeps_all_five_batches() {
    let (dir, mut m) = psm();
    for i in 0..6 {
        m.update(&batch(1, 2, i * 2, 2), i as i64 * 2 + 1);
    }
    m.update(&batch(2, 0, 0, 1), 20);
    m.take_snapshot().unwrap();
    assert!(dir.path().join(snapshot_file_name(21)).exists());
    let mut m2 = ProducerStateManager::new(dir.path(), 86_400_000).unwrap();
    assert_eq!(m2.load(0, 21, 1_000).unwrap(), 21);
    assert_eq!(m2.producers(), m.producers());
    assert_eq!(m2.producers()[&1].batches.len(), 5);
    // A snapshot above the log end (a cut tail) is dropped; expired producers are not loaded.
    let mut m3 = ProducerStateManager::new(dir.path(), 10).unwrap();
    assert_eq!(m3.load(0, 20, 1_000_000).unwrap(), 0);
    assert!(m3.producers().is_empty());
    assert!(!dir.path().join(snapshot_file_name(21)).exists());
}

#[test]
fn corrupt_snapshot_is_skipped() {
    let (dir, mut m) = psm();
    m.update(&batch(1, 0, 0, 1), 0);
    m.take_snapshot().unwrap();
    let p = dir.path().join(snapshot_file_name(1));
    let mut b = std::fs::read(&p).unwrap();
    let n = b.len();
    b[n - 1] ^= 1;
    std::fs::write(&p, b).unwrap();
    let mut m2 = ProducerStateManager::new(dir.path(), 86_400_000).unwrap();
    assert_eq!(m2.load(0, 1, 1_000).unwrap(), 0);
    assert!(m2.producers().is_empty());
    assert!(read_snapshot(&[0, 1, 2]).is_err());
}

#[test]
fn snapshot_layout_matches_kafka() {
    let mut e = ProducerStateEntry::empty(14011);
    e.add_batch(
        0,
        BatchMetadata {
            last_seq: 24,
            last_offset: 74,
            offset_delta: 0,
            timestamp: 1_700_000_000_000,
        },
    );
    let bytes = write_snapshot(&[&e]);
    assert_eq!(bytes.len(), 2 + 4 + 4 + ENTRY_SIZE);
    assert_eq!(&bytes[0..2], &[0, 1]);
    assert_eq!(&bytes[6..10], &1i32.to_be_bytes());
    assert_eq!(&bytes[10..18], &14011i64.to_be_bytes());
    assert_eq!(&bytes[20..24], &24i32.to_be_bytes());
    assert_eq!(&bytes[24..32], &74i64.to_be_bytes());
    assert_eq!(&bytes[44..48], &(-1i32).to_be_bytes());
    assert_eq!(&bytes[48..56], &(-1i64).to_be_bytes());
}

#[test]
fn expiration() {
    let (_d, mut m) = psm();
    m.set_expiration_ms(100);
    // The batch's max timestamp (1000) starts the clock; Kafka expires at now - last >= limit.
    m.update(&batch(1, 0, 0, 1), 0);
    m.update(&batch(2, 0, 0, 1), 1);
    assert_eq!(
        m.remove_expired_producers(1_099),
        0,
        "1 ms before the limit"
    );
    let mut later = batch(2, 0, 1, 1);
    later.max_timestamp = 1_050;
    m.update(&later, 2);
    assert_eq!(m.remove_expired_producers(1_100), 1, "exactly at the limit");
    assert_eq!(m.remove_expired_producers(1_149), 0);
    assert_eq!(m.remove_expired_producers(1_150), 1);
}

fn txn(pid: i64, n: i32) -> ProducerBatch {
    ProducerBatch {
        is_transactional: true,
        ..batch(pid, 0, 0, n)
    }
}

fn end(pid: i64, result: TxnResult, coordinator_epoch: i32) -> ProducerBatch {
    ProducerBatch {
        producer_id: pid,
        producer_epoch: 0,
        first_seq: -1,
        offset_delta: 0,
        max_timestamp: 2_000,
        is_control: true,
        is_transactional: true,
        marker: Some(EndTxnMarker {
            result,
            coordinator_epoch,
        }),
    }
}

#[test]
fn open_completed_and_unreplicated_transactions() {
    let (_d, mut m) = psm();
    m.update(&txn(1, 2), 1); // 0..1
    m.update(&txn(2, 1), 2); // 2
    assert_eq!(m.first_unstable_offset(), Some(0));
    // pid 1 aborts at 3 while pid 2's transaction (2) is open: its LSO is 2.
    let placed = [PlacedBatch {
        batch: end(1, TxnResult::Abort, 0),
        base_offset: 3,
        last_offset: 3,
    }];
    let Prepared::Append(a) = m.prepare(&placed, AppendOrigin::Coordinator).unwrap() else {
        panic!("not a duplicate")
    };
    assert_eq!(
        a.completed,
        vec![CompletedTxn {
            producer_id: 1,
            first_offset: 0,
            last_offset: 3,
            is_aborted: true
        }]
    );
    m.apply(&a);
    assert_eq!(m.last_stable_offset_of(&a.completed[0]), 2);
    m.complete_txn(&a.completed[0]);
    let e = &m.producers()[&1];
    assert_eq!(
        (
            e.current_txn_first_offset,
            e.coordinator_epoch,
            e.last_timestamp
        ),
        (None, 0, 2_000)
    );
    // Completed but unreplicated: still unstable until the HW passes the marker.
    assert_eq!(m.first_unstable_offset(), Some(0));
    m.on_high_watermark_updated(3);
    assert_eq!(m.first_unstable_offset(), Some(0));
    m.on_high_watermark_updated(4);
    assert_eq!(m.first_unstable_offset(), Some(2));
    // pid 2 commits at 4 with nobody else open: LSO after it is 5.
    let done = CompletedTxn {
        producer_id: 2,
        first_offset: 2,
        last_offset: 4,
        is_aborted: false,
    };
    assert_eq!(m.last_stable_offset_of(&done), 5);
}

#[test]
fn open_transactions_survive_snapshots_and_expiration() {
    let (dir, mut m) = psm();
    m.set_expiration_ms(100);
    m.update(&txn(1, 2), 1);
    m.update(&batch(2, 0, 0, 1), 2);
    // Idle far past the limit: only the producer without an open transaction goes.
    assert_eq!(m.remove_expired_producers(1_000_000), 1);
    assert!(m.producers().contains_key(&1));
    m.take_snapshot().unwrap();
    let mut m2 = ProducerStateManager::new(dir.path(), 100).unwrap();
    m2.load(0, 3, 1_000_000).unwrap();
    assert_eq!(m2.first_unstable_offset(), Some(0));
    assert_eq!(
        m2.ongoing_transactions().copied().collect::<Vec<_>>(),
        vec![TxnMetadata {
            producer_id: 1,
            first_offset: 0,
            last_offset: None
        }]
    );
}

#[test]
fn marker_checks_as_kafka() {
    let (_d, mut m) = psm();
    m.update(&txn(1, 1), 0);
    let placed = |b: ProducerBatch| {
        [PlacedBatch {
            batch: b,
            base_offset: 1,
            last_offset: 1,
        }]
    };
    let mut older = end(1, TxnResult::Commit, 5);
    older.producer_epoch = -1;
    assert!(matches!(
        m.prepare(&placed(older), AppendOrigin::Coordinator),
        Err(ProducerStateError::InvalidProducerEpoch(_))
    ));
    // Replication only logs.
    assert!(m.prepare(&placed(older), AppendOrigin::Replication).is_ok());
    m.update(&end(1, TxnResult::Commit, 5), 1);
    assert!(matches!(
        m.prepare(
            &placed(end(1, TxnResult::Abort, 4)),
            AppendOrigin::Coordinator
        ),
        Err(ProducerStateError::TransactionCoordinatorFenced(_))
    ));
    // Non-transactional data while a transaction is open.
    m.update(
        &ProducerBatch {
            first_seq: 1,
            ..txn(1, 1)
        },
        2,
    );
    assert!(matches!(
        m.validate(&[batch(1, 0, 2, 1)], AppendOrigin::Client),
        Err(ProducerStateError::InvalidTxnState(_))
    ));
}

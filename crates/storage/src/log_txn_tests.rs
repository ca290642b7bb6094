//! Transactions through the log: open transactions, markers, LSO, `.txnindex`, recovery and
//! truncation.

use super::*;
use crate::txn_index::{parse_txn_index, txn_index_file_name, AbortedTxn};
use strom_protocol::memory_records::{end_txn_marker, TxnResult};

fn txn_batch(pid: i64, epoch: i16, first_seq: i32, n: usize, transactional: bool) -> Vec<u8> {
    let records: Vec<Record> = (0..n)
        .map(|i| Record {
            transactional,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: pid,
            producer_epoch: epoch,
            timestamp_type: RecordTs::Creation,
            offset: i as i64,
            sequence: first_seq + i as i32,
            timestamp: T0 + i as i64,
            key: None,
            value: Some(Bytes::from_static(b"v")),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .unwrap();
    buf.to_vec()
}

fn config() -> LogConfig {
    LogConfig {
        producer_id_expiration_ms: i64::MAX / 2,
        ..LogConfig::default()
    }
}

fn client(log: &mut UnifiedLog, b: &[u8]) -> Result<LogAppendInfo, StorageError> {
    log.append_as_leader(b, 0, AppendOrigin::Client, T0)
}

fn marker(
    log: &mut UnifiedLog,
    pid: i64,
    epoch: i16,
    coordinator_epoch: i32,
    result: TxnResult,
) -> Result<LogAppendInfo, StorageError> {
    let m = end_txn_marker(pid, epoch, coordinator_epoch, result, T0 + 100);
    log.append_as_leader(&m, 0, AppendOrigin::Coordinator, T0)
}

fn txn_index_file(dir: &Path, base: i64) -> Vec<AbortedTxn> {
    match std::fs::read(dir.join(txn_index_file_name(base))) {
        Ok(b) => parse_txn_index(&b).unwrap(),
        Err(_) => Vec::new(),
    }
}

/// Offsets: pid 1 txn at 0..2 (aborted at 5), pid 2 txn at 2..4 (committed at 6), plain at 4.
fn two_transactions(log: &mut UnifiedLog) {
    client(log, &txn_batch(1, 0, 0, 2, true)).unwrap();
    client(log, &txn_batch(2, 0, 0, 2, true)).unwrap();
    client(log, &txn_batch(3, 0, 0, 1, false)).unwrap();
    assert_eq!(log.first_unstable_offset(), Some(0));
    assert_eq!(
        marker(log, 1, 0, 5, TxnResult::Abort).unwrap().first_offset,
        5
    );
    assert_eq!(
        marker(log, 2, 0, 5, TxnResult::Commit)
            .unwrap()
            .first_offset,
        6
    );
}

#[test]
fn markers_complete_transactions_and_index_aborts() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), config());
    assert_eq!(log.first_unstable_offset(), None);
    client(&mut log, &txn_batch(1, 0, 0, 2, true)).unwrap();
    assert_eq!(log.first_unstable_offset(), Some(0));
    assert_eq!(log.last_stable_offset(2), 0);
    assert!(!dir.path().join(txn_index_file_name(0)).exists());
    two_transactions_rest(&mut log);
    // pid 1 aborted while pid 2's transaction (first offset 2) was open: LSO 2 after it.
    let expect = vec![AbortedTxn {
        producer_id: 1,
        first_offset: 0,
        last_offset: 5,
        last_stable_offset: 2,
    }];
    assert_eq!(txn_index_file(dir.path(), 0), expect);
    // Both completed but unreplicated until the HW passes their markers.
    assert_eq!(log.first_unstable_offset(), Some(0));
    log.update_high_watermark(6);
    assert_eq!(
        log.first_unstable_offset(),
        Some(2),
        "pid 1's marker is below 6"
    );
    assert_eq!(log.last_stable_offset(6), 2);
    log.update_high_watermark(7);
    assert_eq!(log.first_unstable_offset(), None);
    assert_eq!(log.last_stable_offset(7), 7);
    assert_eq!(log.collect_aborted_transactions(0, 7), expect);
    assert_eq!(log.collect_aborted_transactions(6, 7), vec![]);
    // A read_committed read up to the LSO carries the aborted list; other reads none.
    let r = log
        .reader()
        .read_isolated(0, usize::MAX / 2, 7, false, true)
        .unwrap();
    assert_eq!(r.aborted_transactions, Some(expect.clone()));
    assert_eq!(
        log.reader()
            .read(0, 1 << 20, 7, false)
            .unwrap()
            .aborted_transactions,
        None
    );
    let at_lso = log
        .reader()
        .read_isolated(7, 1 << 20, 7, false, true)
        .unwrap();
    assert_eq!(at_lso.aborted_transactions, Some(vec![]));
    // The producers' entries: coordinator epoch recorded, no open transaction.
    let e = &log.producer_state().producers()[&1];
    assert_eq!((e.coordinator_epoch, e.current_txn_first_offset), (5, None));
}

fn two_transactions_rest(log: &mut UnifiedLog) {
    client(log, &txn_batch(2, 0, 0, 2, true)).unwrap();
    client(log, &txn_batch(3, 0, 0, 1, false)).unwrap();
    assert_eq!(
        marker(log, 1, 0, 5, TxnResult::Abort).unwrap().first_offset,
        5
    );
    assert_eq!(
        marker(log, 2, 0, 5, TxnResult::Commit)
            .unwrap()
            .first_offset,
        6
    );
}

#[test]
fn marker_and_transactional_write_checks() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), config());
    client(&mut log, &txn_batch(1, 3, 0, 1, true)).unwrap();
    // A non-transactional write inside the open transaction.
    let err = client(&mut log, &txn_batch(1, 3, 1, 1, false)).unwrap_err();
    assert!(matches!(err, StorageError::InvalidTxnState(_)), "{err:?}");
    // A marker from an older producer epoch.
    let err = marker(&mut log, 1, 2, 0, TxnResult::Commit).unwrap_err();
    assert!(
        matches!(err, StorageError::InvalidProducerEpoch(_)),
        "{err:?}"
    );
    marker(&mut log, 1, 3, 4, TxnResult::Commit).unwrap();
    // An older coordinator epoch is fenced; the same one is not.
    let err = marker(&mut log, 1, 3, 3, TxnResult::Abort).unwrap_err();
    assert!(
        matches!(err, StorageError::TransactionCoordinatorFenced(_)),
        "{err:?}"
    );
    // A marker without data (an empty transaction) completes nothing.
    let leo = log.log_end_offset();
    marker(&mut log, 1, 3, 4, TxnResult::Abort).unwrap();
    assert_eq!(log.log_end_offset(), leo + 1);
    assert!(txn_index_file(dir.path(), 0).is_empty());
    // Clients may not write markers.
    let m = end_txn_marker(1, 3, 4, TxnResult::Abort, T0);
    assert!(client(&mut log, &m).is_err());
    // After the marker, non-transactional writes are fine again.
    client(&mut log, &txn_batch(1, 3, 1, 1, false)).unwrap();
}

#[test]
fn follower_appends_track_transactions_and_index() {
    let dir = tempfile::tempdir().unwrap();
    let mut leader = open(dir.path(), config());
    two_transactions(&mut leader);
    let all = leader
        .read(0, usize::MAX / 2, leader.log_end_offset(), false)
        .unwrap();
    let fdir = tempfile::tempdir().unwrap();
    let mut follower = open(fdir.path(), config());
    follower.append_as_follower(&all.records, T0).unwrap();
    assert_eq!(
        txn_index_file(fdir.path(), 0),
        txn_index_file(dir.path(), 0)
    );
    assert_eq!(follower.first_unstable_offset(), Some(0));
    follower.update_high_watermark(7);
    assert_eq!(follower.first_unstable_offset(), None);
}

#[test]
fn crash_mid_transaction_keeps_it_open() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), config());
    client(&mut log, &txn_batch(9, 0, 0, 1, false)).unwrap();
    client(&mut log, &txn_batch(1, 0, 0, 2, true)).unwrap();
    log.roll(T0).unwrap(); // a snapshot at 3 records the open transaction
    client(&mut log, &txn_batch(2, 0, 0, 1, true)).unwrap();
    drop(log); // no close: an unclean shutdown
    let log = UnifiedLog::open(dir.path(), config(), 0, false).unwrap();
    assert_eq!(log.first_unstable_offset(), Some(1));
    let open: Vec<(i64, i64)> = log
        .producer_state()
        .ongoing_transactions()
        .map(|t| (t.producer_id, t.first_offset))
        .collect();
    assert_eq!(open, vec![(1, 1), (2, 3)]);
    // Same after a clean restart from the closing snapshot alone.
    let mut log = log;
    log.close().unwrap();
    drop(log);
    let log = UnifiedLog::open(dir.path(), config(), 4, true).unwrap();
    assert_eq!(log.first_unstable_offset(), Some(1));
    assert_eq!(log.producer_state().ongoing_transactions().count(), 2);
}

#[test]
fn crash_after_abort_marker_rebuilds_the_txn_index() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), config());
    two_transactions(&mut log);
    let before = txn_index_file(dir.path(), 0);
    assert_eq!(before.len(), 1);
    drop(log); // unclean
               // The index was lost with the crash (never flushed): recovery writes it again.
    std::fs::remove_file(dir.path().join(txn_index_file_name(0))).unwrap();
    let mut log = UnifiedLog::open(dir.path(), config(), 0, false).unwrap();
    assert_eq!(txn_index_file(dir.path(), 0), before);
    assert_eq!(log.collect_aborted_transactions(0, 7), before);
    // Completed transactions hold the LSO until the HW is known to pass them.
    assert_eq!(log.first_unstable_offset(), Some(0));
    log.update_high_watermark(7);
    assert_eq!(log.last_stable_offset(7), 7);
    // A corrupt index makes the segment recover, which rebuilds it too.
    drop(log);
    std::fs::write(dir.path().join(txn_index_file_name(0)), [1u8; 10]).unwrap();
    let log = UnifiedLog::open(dir.path(), config(), 7, true).unwrap();
    assert_eq!(txn_index_file(dir.path(), 0), before);
    drop(log);
}

#[test]
fn truncation_below_a_marker_reopens_the_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), config());
    two_transactions(&mut log);
    log.update_high_watermark(7);
    assert_eq!(log.first_unstable_offset(), None);
    // Cut the abort marker (offset 5) and what follows.
    log.truncate_to(5).unwrap();
    assert!(txn_index_file(dir.path(), 0).is_empty());
    assert!(log.collect_aborted_transactions(0, 5).is_empty());
    let open: Vec<(i64, i64)> = log
        .producer_state()
        .ongoing_transactions()
        .map(|t| (t.producer_id, t.first_offset))
        .collect();
    assert_eq!(open, vec![(1, 0), (2, 2)]);
    assert_eq!(log.first_unstable_offset(), Some(0));
    // The new leader's abort arrives again by replication.
    let m = end_txn_marker(1, 0, 5, TxnResult::Abort, T0);
    let mut b = m.clone();
    strom_protocol::batch::set_base_offset(&mut b, 5);
    log.append_as_follower(&b, T0).unwrap();
    assert_eq!(txn_index_file(dir.path(), 0).len(), 1);
    assert_eq!(log.first_unstable_offset(), Some(0));
    log.update_high_watermark(6);
    assert_eq!(log.first_unstable_offset(), Some(2));
}

#[test]
fn txn_index_goes_with_its_segment() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(
        dir.path(),
        LogConfig {
            file_delete_delay_ms: 0,
            ..config()
        },
    );
    two_transactions(&mut log);
    log.roll(T0).unwrap();
    client(&mut log, &txn_batch(4, 0, 0, 1, false)).unwrap();
    assert!(dir.path().join(txn_index_file_name(0)).exists());
    log.update_high_watermark(8);
    log.maybe_increment_log_start_offset(7).unwrap();
    assert!(!dir.path().join(txn_index_file_name(0)).exists());
    assert!(!dir
        .path()
        .join(format!("{}.deleted", txn_index_file_name(0)))
        .exists());
    assert_eq!(log.first_unstable_offset(), None);
}

#[test]
fn transaction_version_2_markers_need_a_bumped_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), config());
    let tv2 = |log: &mut UnifiedLog, epoch: i16, result: TxnResult| {
        let m = end_txn_marker(1, epoch, 0, result, T0 + 100);
        log.append_as_leader_with_txn_version(&m, 0, AppendOrigin::Coordinator, 2, T0)
    };
    client(&mut log, &txn_batch(1, 4, 0, 1, true)).unwrap();
    // The data's epoch is not enough for a TV2 marker while the transaction is open.
    let err = tv2(&mut log, 4, TxnResult::Commit).unwrap_err();
    assert!(
        matches!(err, StorageError::InvalidProducerEpoch(_)),
        "{err:?}"
    );
    tv2(&mut log, 5, TxnResult::Commit).unwrap();
    assert_eq!(log.producer_state().producers()[&1].producer_epoch, 5);
    // A retry of that marker (same epoch, transaction over) is written again, as Kafka does.
    let leo = log.log_end_offset();
    tv2(&mut log, 5, TxnResult::Commit).unwrap();
    assert_eq!(log.log_end_offset(), leo + 1);
    // An older one is still fenced.
    assert!(tv2(&mut log, 4, TxnResult::Abort).is_err());
}

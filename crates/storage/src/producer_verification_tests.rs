//! KIP-890 in the producer state: a client's transactional batch opens a transaction only with
//! the guard of its verification, which any transactional write of the producer voids.

use super::*;

fn txn(pid: i64, epoch: i16, seq: i32) -> ProducerBatch {
    ProducerBatch {
        producer_id: pid,
        producer_epoch: epoch,
        first_seq: seq,
        offset_delta: 0,
        max_timestamp: 1_000,
        is_control: false,
        is_transactional: true,
        marker: None,
    }
}

fn marker(pid: i64, epoch: i16, result: TxnResult) -> ProducerBatch {
    ProducerBatch {
        first_seq: -1,
        is_control: true,
        marker: Some(EndTxnMarker {
            result,
            coordinator_epoch: 0,
        }),
        ..txn(pid, epoch, 0)
    }
}

fn abort_marker(pid: i64, epoch: i16) -> ProducerBatch {
    marker(pid, epoch, TxnResult::Abort)
}

fn at(batch: ProducerBatch, offset: i64) -> [PlacedBatch; 1] {
    [PlacedBatch {
        batch,
        base_offset: offset,
        last_offset: offset,
    }]
}

fn psm() -> (tempfile::TempDir, ProducerStateManager) {
    let dir = tempfile::tempdir().unwrap();
    let mut m = ProducerStateManager::new(dir.path(), 86_400_000).unwrap();
    m.set_verification_enabled(true);
    (dir, m)
}

fn append(
    m: &mut ProducerStateManager,
    b: ProducerBatch,
    offset: i64,
    origin: AppendOrigin,
    guard: VerificationGuard,
) -> Result<(), ProducerStateError> {
    append_tv(m, b, offset, origin, guard, 0)
}

/// [`append`] of markers written at `transaction_version` (WriteTxnMarkers v2: 2).
fn append_tv(
    m: &mut ProducerStateManager,
    b: ProducerBatch,
    offset: i64,
    origin: AppendOrigin,
    guard: VerificationGuard,
    transaction_version: i16,
) -> Result<(), ProducerStateError> {
    match m.prepare_verified(&at(b, offset), origin, transaction_version, guard)? {
        Prepared::Append(a) => {
            m.apply(&a);
            for done in &a.completed {
                m.complete_txn(done);
            }
            m.update_map_end_offset(offset + 1);
            Ok(())
        }
        Prepared::Duplicate(_) => panic!("not a duplicate"),
    }
}

const CLIENT: AppendOrigin = AppendOrigin::Client;
const SENTINEL: VerificationGuard = VerificationGuard::SENTINEL;

#[test]
fn a_transaction_opens_only_with_the_verification_guard() {
    let (_d, mut m) = psm();
    let refused = Err(ProducerStateError::InvalidTxnState(
        "Record was not part of an ongoing transaction".to_string(),
    ));
    assert_eq!(append(&mut m, txn(1, 0, 0), 0, CLIENT, SENTINEL), refused);
    let g = m.maybe_start_transaction_verification(1, 0, 0, false, 10);
    assert!(!g.is_sentinel());
    assert_eq!(m.verification_guard(1), g);
    assert_eq!(append(&mut m, txn(1, 0, 0), 0, CLIENT, SENTINEL), refused);
    assert_eq!(append(&mut m, txn(1, 0, 0), 0, CLIENT, g), Ok(()));
    // Written: the verification is over and the open transaction needs none.
    assert_eq!(m.verification_guard(1), SENTINEL);
    assert_eq!(
        m.maybe_start_transaction_verification(1, 1, 0, false, 10),
        SENTINEL
    );
    assert_eq!(append(&mut m, txn(1, 0, 1), 1, CLIENT, SENTINEL), Ok(()));
    // Replication is never checked.
    assert_eq!(
        append(&mut m, txn(2, 0, 0), 2, AppendOrigin::Replication, SENTINEL),
        Ok(())
    );
}

#[test]
fn a_marker_written_during_the_verification_voids_its_guard() {
    let (_d, mut m) = psm();
    let g = m.maybe_start_transaction_verification(1, 0, 0, false, 10);
    // The coordinator answered "in the transaction", but before the append the transaction
    // was aborted (its marker written): the stale answer cannot open a transaction here.
    append(
        &mut m,
        abort_marker(1, 0),
        0,
        AppendOrigin::Coordinator,
        SENTINEL,
    )
    .unwrap();
    assert_eq!(m.verification_guard(1), SENTINEL);
    assert!(matches!(
        append(&mut m, txn(1, 0, 0), 1, CLIENT, g),
        Err(ProducerStateError::InvalidTxnState(_))
    ));
    // A new verification gets a new guard.
    let g2 = m.maybe_start_transaction_verification(1, 0, 0, false, 20);
    assert_ne!(g, g2);
    assert_eq!(append(&mut m, txn(1, 0, 0), 1, CLIENT, g2), Ok(()));
}

/// Transactions v2 (Kafka's `UnifiedLog.updateProducers`, `isV2NextTransactionStarted`):
/// EndTxn bumps the epoch and the previous transaction's markers carry the bumped epoch, which
/// the client already produces its next transaction with. That produce may be verified here
/// before the commit marker lands (the coordinator answers CONCURRENT_TRANSACTIONS until the
/// markers are all written, then "added"): the marker at the verification's own epoch ended
/// the previous transaction, so the guard outlives it and the produce is appended.
#[test]
fn a_v2_marker_at_the_verifications_epoch_keeps_its_guard() {
    let (_d, mut m) = psm();
    const COORDINATOR: AppendOrigin = AppendOrigin::Coordinator;
    let g0 = m.maybe_start_transaction_verification(1, 0, 0, true, 10);
    append(&mut m, txn(1, 0, 0), 0, CLIENT, g0).unwrap();
    // EndTxn(commit) at epoch 0 answered epoch 1; the next transaction's first produce here.
    let g1 = m.maybe_start_transaction_verification(1, 0, 1, true, 20);
    assert!(!g1.is_sentinel());
    append_tv(
        &mut m,
        marker(1, 1, TxnResult::Commit),
        1,
        COORDINATOR,
        SENTINEL,
        2,
    )
    .unwrap();
    assert_eq!(m.verification_guard(1), g1);
    assert_eq!(append(&mut m, txn(1, 1, 0), 2, CLIENT, g1), Ok(()));
    assert_eq!(m.verification_guard(1), SENTINEL);

    // A marker at another epoch (the coordinator fencing a timed-out transaction) still voids
    // the verification, and so does the same marker for a transactions-v1 client's.
    append_tv(
        &mut m,
        marker(1, 2, TxnResult::Abort),
        3,
        COORDINATOR,
        SENTINEL,
        2,
    )
    .unwrap();
    assert!(!m
        .maybe_start_transaction_verification(1, 0, 2, true, 30)
        .is_sentinel());
    append_tv(
        &mut m,
        marker(1, 3, TxnResult::Abort),
        4,
        COORDINATOR,
        SENTINEL,
        2,
    )
    .unwrap();
    assert_eq!(m.verification_guard(1), SENTINEL);
    let (_d, mut m) = psm();
    let g0 = m.maybe_start_transaction_verification(1, 0, 0, false, 10);
    append(&mut m, txn(1, 0, 0), 0, CLIENT, g0).unwrap();
    let g1 = m.maybe_start_transaction_verification(1, 0, 1, false, 20);
    append_tv(
        &mut m,
        marker(1, 1, TxnResult::Commit),
        1,
        COORDINATOR,
        SENTINEL,
        2,
    )
    .unwrap();
    assert_eq!(m.verification_guard(1), SENTINEL);
    assert!(matches!(
        append(&mut m, txn(1, 1, 0), 2, CLIENT, g1),
        Err(ProducerStateError::InvalidTxnState(_))
    ));
}

#[test]
fn no_batch_overtakes_the_lowest_sequence_seen_while_verifying() {
    let (_d, mut m) = psm();
    let g = m.maybe_start_transaction_verification(1, 5, 0, false, 10);
    assert_eq!(
        m.maybe_start_transaction_verification(1, 3, 0, false, 10),
        g
    );
    assert!(matches!(
        append(&mut m, txn(1, 0, 5), 0, CLIENT, g),
        Err(ProducerStateError::OutOfOrderSequence(_))
    ));
    assert_eq!(append(&mut m, txn(1, 0, 3), 0, CLIENT, g), Ok(()));
}

#[test]
fn verification_off_appends_as_before_and_expired_verifications_go() {
    let (_d, mut m) = psm();
    let g = m.maybe_start_transaction_verification(1, 0, 0, false, 10);
    m.remove_expired_producers(10 + 86_400_000);
    assert_eq!(m.verification_guard(1), SENTINEL);
    assert!(append(&mut m, txn(1, 0, 0), 0, CLIENT, g).is_err());
    m.set_verification_enabled(false);
    assert_eq!(append(&mut m, txn(1, 0, 0), 0, CLIENT, SENTINEL), Ok(()));
}

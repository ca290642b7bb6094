//! Cases of Kafka's `TransactionMetadataTest`.

use super::*;
use TransactionState::*;

const PID: i64 = 23423;
const TIMEOUT: i32 = 30_000;

fn md(state: TransactionState, epoch: i16, last: i16) -> TransactionMetadata {
    let mut m = TransactionMetadata::new("txn", PID, TIMEOUT, 0);
    m.state = state;
    m.producer_epoch = epoch;
    m.last_producer_epoch = last;
    if matches!(state, Ongoing | PrepareCommit | PrepareAbort) {
        m.topic_partitions.insert(("t".into(), 0));
        m.txn_start_timestamp = 1;
    }
    m
}

fn apply(m: &mut TransactionMetadata, t: TxnTransitMetadata) {
    m.complete_transition_to(&t).unwrap();
}

#[test]
fn initialize_epoch() {
    let mut m = md(Empty, NO_PRODUCER_EPOCH, NO_PRODUCER_EPOCH);
    let t = m
        .prepare_increment_producer_epoch(TIMEOUT, None, 5)
        .unwrap();
    apply(&mut m, t);
    assert_eq!(
        (m.producer_id, m.producer_epoch, m.last_producer_epoch),
        (PID, 0, -1)
    );
    assert_eq!(m.txn_last_update_timestamp, 5);
    assert_eq!(m.pending_state, None);
}

#[test]
fn normal_epoch_bump() {
    let mut m = md(Empty, 735, NO_PRODUCER_EPOCH);
    let t = m
        .prepare_increment_producer_epoch(TIMEOUT, None, 5)
        .unwrap();
    apply(&mut m, t);
    assert_eq!((m.producer_epoch, m.last_producer_epoch), (736, -1));
}

#[test]
fn bump_epoch_not_allowed_if_epochs_exhausted() {
    let mut m = md(Empty, i16::MAX - 1, NO_PRODUCER_EPOCH);
    assert!(m.is_producer_epoch_exhausted());
    assert!(matches!(
        m.prepare_increment_producer_epoch(TIMEOUT, None, 5),
        Err(TxnError::IllegalState(_))
    ));
}

#[test]
fn tolerate_time_shift_during_add_partitions_and_commit() {
    let mut m = md(Empty, 1, NO_PRODUCER_EPOCH);
    m.txn_last_update_timestamp = 100;
    // The clock went back: still accepted, and the timestamps follow it.
    let parts: BTreeSet<_> = [("t".to_string(), 1)].into();
    let t = m
        .prepare_add_partitions(&parts, 50, TransactionVersion::TV_0)
        .unwrap();
    apply(&mut m, t);
    assert_eq!(
        (m.state, m.txn_start_timestamp, m.txn_last_update_timestamp),
        (Ongoing, 50, 50)
    );
    let t = m
        .prepare_abort_or_commit(
            PrepareCommit,
            TransactionVersion::TV_0,
            NO_PRODUCER_ID,
            40,
            false,
        )
        .unwrap();
    apply(&mut m, t);
    assert_eq!(
        (m.state, m.txn_start_timestamp, m.txn_last_update_timestamp),
        (PrepareCommit, 50, 40)
    );
    let t = m.prepare_complete(30).unwrap();
    apply(&mut m, t);
    assert_eq!(m.state, CompleteCommit);
    assert!(m.topic_partitions.is_empty());
    assert_eq!(m.producer_epoch, 1);
}

#[test]
fn fence_producer_after_epochs_exhausted() {
    let mut m = md(Ongoing, i16::MAX - 1, NO_PRODUCER_EPOCH);
    let fence = m.prepare_fence_producer_epoch().unwrap();
    assert_eq!(fence.producer_epoch, i16::MAX);
    assert_eq!(m.pending_state, Some(PrepareEpochFence));
    // As the coordinator does: the fence becomes the abort in the same step.
    m.pending_state = None;
    m.producer_epoch = fence.producer_epoch;
    m.last_producer_epoch = NO_PRODUCER_EPOCH;
    let t = m
        .prepare_abort_or_commit(
            PrepareAbort,
            TransactionVersion::TV_0,
            NO_PRODUCER_ID,
            2,
            false,
        )
        .unwrap();
    apply(&mut m, t);
    assert_eq!((m.state, m.producer_epoch), (PrepareAbort, i16::MAX));
    let t = m.prepare_complete(3).unwrap();
    apply(&mut m, t);
    assert_eq!((m.state, m.producer_epoch), (CompleteAbort, i16::MAX));
}

#[test]
fn fence_producer_at_max_epoch_does_not_overflow() {
    let mut m = md(Ongoing, i16::MAX, NO_PRODUCER_EPOCH);
    let t = m.prepare_fence_producer_epoch().unwrap();
    assert_eq!(t.producer_epoch, i16::MAX);
}

#[test]
fn failed_epoch_fence_is_not_bumped_again() {
    let mut m = md(Ongoing, 5, NO_PRODUCER_EPOCH);
    m.has_failed_epoch_fence = true;
    assert_eq!(m.prepare_fence_producer_epoch().unwrap().producer_epoch, 5);
}

#[test]
fn rotate_producer_id() {
    let mut m = md(CompleteCommit, i16::MAX - 1, NO_PRODUCER_EPOCH);
    let t = m
        .prepare_producer_id_rotation(9999, TIMEOUT, 7, true)
        .unwrap();
    apply(&mut m, t);
    assert_eq!(
        (m.producer_id, m.producer_epoch, m.last_producer_epoch),
        (9999, 0, i16::MAX - 1)
    );
    assert_eq!(m.prev_producer_id, PID);
    assert_eq!(m.state, Empty);
}

#[test]
fn rotate_producer_id_in_ongoing_state_is_illegal() {
    let mut m = md(Ongoing, i16::MAX - 1, NO_PRODUCER_EPOCH);
    assert!(matches!(
        m.prepare_producer_id_rotation(9999, TIMEOUT, 7, true),
        Err(TxnError::IllegalState(_))
    ));
}

#[test]
fn rotate_producer_id_without_last_epoch() {
    let mut m = md(Empty, i16::MAX - 1, NO_PRODUCER_EPOCH);
    let t = m
        .prepare_producer_id_rotation(9999, TIMEOUT, 7, false)
        .unwrap();
    apply(&mut m, t);
    assert_eq!(
        (m.producer_id, m.producer_epoch, m.last_producer_epoch),
        (9999, 0, -1)
    );
}

#[test]
fn attempted_epoch_bump_with_newly_created_metadata() {
    let mut m = md(Empty, NO_PRODUCER_EPOCH, NO_PRODUCER_EPOCH);
    let t = m
        .prepare_increment_producer_epoch(TIMEOUT, Some(5), 1)
        .unwrap();
    apply(&mut m, t);
    assert_eq!((m.producer_epoch, m.last_producer_epoch), (0, -1));
}

#[test]
fn epoch_bump_with_current_epoch_provided() {
    let mut m = md(Empty, 735, NO_PRODUCER_EPOCH);
    let t = m
        .prepare_increment_producer_epoch(TIMEOUT, Some(735), 1)
        .unwrap();
    apply(&mut m, t);
    assert_eq!((m.producer_epoch, m.last_producer_epoch), (736, 735));
}

#[test]
fn attempted_epoch_bump_with_last_epoch() {
    let mut m = md(Empty, 735, 734);
    let t = m
        .prepare_increment_producer_epoch(TIMEOUT, Some(734), 1)
        .unwrap();
    apply(&mut m, t);
    assert_eq!((m.producer_epoch, m.last_producer_epoch), (735, 734));
}

#[test]
fn attempted_epoch_bump_with_fenced_epoch() {
    let mut m = md(Empty, 735, 734);
    assert_eq!(
        m.prepare_increment_producer_epoch(TIMEOUT, Some(733), 1),
        Err(TxnError::Code(ErrorCode::ProducerFenced))
    );
}

#[test]
fn epoch_bump_on_end_txn_for_tv2() {
    let mut m = md(Ongoing, 735, NO_PRODUCER_EPOCH);
    let t = m
        .prepare_abort_or_commit(
            PrepareCommit,
            TransactionVersion::TV_2,
            NO_PRODUCER_ID,
            2,
            false,
        )
        .unwrap();
    apply(&mut m, t);
    assert_eq!(
        (m.state, m.producer_epoch, m.last_producer_epoch),
        (PrepareCommit, 736, 735)
    );
    let t = m.prepare_complete(3).unwrap();
    apply(&mut m, t);
    assert_eq!(
        (m.state, m.producer_id, m.producer_epoch),
        (CompleteCommit, PID, 736)
    );
}

#[test]
fn epoch_bump_on_end_txn_for_tv2_with_overflow() {
    let mut m = md(Ongoing, i16::MAX - 1, NO_PRODUCER_EPOCH);
    let t = m
        .prepare_abort_or_commit(PrepareCommit, TransactionVersion::TV_2, 9999, 2, false)
        .unwrap();
    apply(&mut m, t);
    assert_eq!(
        (m.producer_epoch, m.last_producer_epoch, m.next_producer_id),
        (i16::MAX, i16::MAX - 1, 9999)
    );
    let t = m.prepare_complete(3).unwrap();
    apply(&mut m, t);
    assert_eq!(
        (m.state, m.producer_id, m.producer_epoch),
        (CompleteCommit, 9999, 0)
    );
    assert_eq!(
        (
            m.prev_producer_id,
            m.last_producer_epoch,
            m.next_producer_id
        ),
        (PID, i16::MAX - 1, -1)
    );
}

#[test]
fn tv2_abort_from_empty_and_complete_states() {
    for from in [Empty, CompleteCommit, CompleteAbort] {
        let mut m = md(from, 3, NO_PRODUCER_EPOCH);
        let t = m
            .prepare_abort_or_commit(
                PrepareAbort,
                TransactionVersion::TV_2,
                NO_PRODUCER_ID,
                9,
                true,
            )
            .unwrap();
        assert_eq!(t.txn_start_timestamp, 9);
        apply(&mut m, t);
        assert_eq!((m.state, m.producer_epoch), (PrepareAbort, 4));
    }
    // Commit from Empty is no transition.
    let mut m = md(Empty, 3, NO_PRODUCER_EPOCH);
    assert!(m
        .prepare_abort_or_commit(
            PrepareCommit,
            TransactionVersion::TV_2,
            NO_PRODUCER_ID,
            9,
            true
        )
        .is_err());
}

#[test]
fn no_second_prepare_while_pending() {
    let mut m = md(Empty, 1, NO_PRODUCER_EPOCH);
    m.prepare_increment_producer_epoch(TIMEOUT, None, 1)
        .unwrap();
    assert!(matches!(
        m.prepare_increment_producer_epoch(TIMEOUT, None, 1),
        Err(TxnError::IllegalState(_))
    ));
}

#[test]
fn dead_is_never_completed() {
    let mut m = md(CompleteCommit, 1, NO_PRODUCER_EPOCH);
    let t = m.prepare_dead().unwrap();
    assert!(matches!(
        m.complete_transition_to(&t),
        Err(TxnError::IllegalState(_))
    ));
    let mut m = md(Ongoing, 1, NO_PRODUCER_EPOCH);
    assert!(m.prepare_dead().is_err());
}

#[test]
fn state_ids_and_names() {
    for s in TransactionState::ALL {
        assert_eq!(TransactionState::from_id(s.id()), Some(s));
        assert_eq!(TransactionState::from_name(s.name()), Some(s));
    }
    assert_eq!(TransactionState::from_id(8), None);
}

//! The transactional producer's state machine, after Java's `TransactionManager` (the
//! transactional part; [`crate::idempotence`] holds the per-partition sequence bookkeeping):
//! the states and their valid transitions, which partitions are in the transaction or waiting
//! for AddPartitionsToTxn, the last error and whether it is fatal or abortable, and whether the
//! epoch must be bumped when the transaction ends.
//!
//! Transactions v2 (KIP-890 part 2, the broker's finalized `transaction.version` >= 2): the
//! client no longer sends AddPartitionsToTxn (a Produce v12+ adds the partition implicitly) nor
//! AddOffsetsToTxn (TxnOffsetCommit v5 does), and every EndTxn returns a bumped epoch.
//!
//! The producer's background task owns one [`Transactions`] and sends the requests it asks for
//! (see `producer_txn.rs`); everything here is synchronous so the rules can be unit tested.

use std::collections::{BTreeSet, HashSet};
use std::sync::{Arc, Mutex};

use strom_protocol::ErrorCode;

use crate::error::Error;
use crate::idempotence::Tp;
use crate::producer_batch::clone_error;

/// Java's `TransactionManager.State`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnState {
    Uninitialized,
    Initializing,
    Ready,
    InTransaction,
    CommittingTransaction,
    AbortingTransaction,
    AbortableError,
    FatalError,
}

impl TxnState {
    /// Java's `State.isTransitionValid`.
    pub fn is_transition_valid(self, target: TxnState) -> bool {
        use TxnState::*;
        match target {
            Uninitialized => self == Initializing,
            Initializing => matches!(self, Uninitialized | AbortingTransaction),
            Ready => matches!(
                self,
                Initializing | CommittingTransaction | AbortingTransaction
            ),
            InTransaction => self == Ready,
            CommittingTransaction => self == InTransaction,
            AbortingTransaction => matches!(self, InTransaction | AbortableError),
            AbortableError => matches!(
                self,
                InTransaction | CommittingTransaction | AbortableError | Initializing
            ),
            // Any state may become fatal; nothing leaves it.
            FatalError => true,
        }
    }

    /// Java's state names, for messages.
    pub fn name(self) -> &'static str {
        use TxnState::*;
        match self {
            Uninitialized => "UNINITIALIZED",
            Initializing => "INITIALIZING",
            Ready => "READY",
            InTransaction => "IN_TRANSACTION",
            CommittingTransaction => "COMMITTING_TRANSACTION",
            AbortingTransaction => "ABORTING_TRANSACTION",
            AbortableError => "ABORTABLE_ERROR",
            FatalError => "FATAL_ERROR",
        }
    }
}

/// True for the errors Java's `maybeTransitionToErrorState` makes fatal when a batch fails.
pub fn is_fatal_batch_error(e: &Error) -> bool {
    matches!(e, Error::UnsupportedVersion(_))
        || matches!(
            e.code(),
            Some(
                ErrorCode::ClusterAuthorizationFailed
                    | ErrorCode::TransactionalIdAuthorizationFailed
                    | ErrorCode::ProducerFenced
                    | ErrorCode::UnsupportedVersion
            )
        )
}

/// The transactional state of one producer.
#[derive(Debug)]
pub struct Transactions {
    transactional_id: String,
    state: TxnState,
    last_error: Option<Error>,
    /// Transactions v2 in use for the current transaction (decided at `begin_transaction`).
    tv2: bool,
    /// Partitions the coordinator has in the transaction: batches may be sent to them.
    partitions_in_txn: HashSet<Tp>,
    /// Partitions written to and not yet sent in an AddPartitionsToTxn.
    new_partitions: BTreeSet<Tp>,
    /// Partitions in the AddPartitionsToTxn on the wire.
    pending_partitions: BTreeSet<Tp>,
    /// A partition or offsets were added: the transaction exists on the coordinator, so ending
    /// it needs an EndTxn.
    transaction_started: bool,
    epoch_bump_required: bool,
    /// Where every new state is published (read by `Producer::transaction_state`), written
    /// before any caller is answered.
    observer: Option<Arc<Mutex<Option<TxnState>>>>,
}

impl Transactions {
    pub fn new(transactional_id: String) -> Self {
        Transactions {
            transactional_id,
            state: TxnState::Uninitialized,
            last_error: None,
            tv2: false,
            partitions_in_txn: HashSet::new(),
            new_partitions: BTreeSet::new(),
            pending_partitions: BTreeSet::new(),
            transaction_started: false,
            epoch_bump_required: false,
            observer: None,
        }
    }

    /// Publishes the state to `observer` on every transition.
    pub fn with_observer(mut self, observer: Arc<Mutex<Option<TxnState>>>) -> Self {
        *observer.lock().unwrap() = Some(self.state);
        self.observer = Some(observer);
        self
    }

    pub fn transactional_id(&self) -> &str {
        &self.transactional_id
    }

    pub fn state(&self) -> TxnState {
        self.state
    }

    /// Transactions v2 in use for the current transaction.
    pub fn tv2(&self) -> bool {
        self.tv2
    }

    pub fn last_error(&self) -> Option<&Error> {
        self.last_error.as_ref()
    }

    pub fn has_fatal_error(&self) -> bool {
        self.state == TxnState::FatalError
    }

    pub fn has_abortable_error(&self) -> bool {
        self.state == TxnState::AbortableError
    }

    pub fn is_completing(&self) -> bool {
        matches!(
            self.state,
            TxnState::CommittingTransaction | TxnState::AbortingTransaction
        )
    }

    pub fn is_aborting(&self) -> bool {
        self.state == TxnState::AbortingTransaction
    }

    pub fn transaction_started(&self) -> bool {
        self.transaction_started
    }

    pub fn epoch_bump_required(&self) -> bool {
        self.epoch_bump_required
    }

    fn transition(&mut self, target: TxnState, error: Option<Error>) -> Result<(), Error> {
        if !self.state.is_transition_valid(target) {
            return Err(Error::IllegalState(format!(
                "TransactionalId {}: Invalid transition attempted from state {} to state {}",
                self.transactional_id,
                self.state.name(),
                target.name()
            )));
        }
        tracing::debug!(transactional_id = %self.transactional_id, from = self.state.name(), to = target.name(), "transition");
        self.last_error = error;
        self.state = target;
        if let Some(o) = &self.observer {
            *o.lock().unwrap() = Some(target);
        }
        Ok(())
    }

    /// Java's `maybeFailWithError`: the error an API call fails with in an error state.
    pub fn maybe_fail_with_error(&self) -> Result<(), Error> {
        if !matches!(self.state, TxnState::AbortableError | TxnState::FatalError) {
            return Ok(());
        }
        let fatal = self.state == TxnState::FatalError;
        match &self.last_error {
            // Java rethrows a fenced producer's error as itself, not wrapped.
            Some(e)
                if matches!(
                    e.code(),
                    Some(ErrorCode::ProducerFenced | ErrorCode::InvalidProducerEpoch)
                ) =>
            {
                Err(clone_error(e))
            }
            Some(e) => Err(Error::TransactionError {
                fatal,
                source: Box::new(clone_error(e)),
            }),
            None => Err(Error::TransactionError {
                fatal,
                source: Box::new(Error::IllegalState("no error recorded".into())),
            }),
        }
    }

    /// `initTransactions`: UNINITIALIZED -> INITIALIZING.
    pub fn begin_init(&mut self) -> Result<(), Error> {
        self.transition(TxnState::Initializing, None)
    }

    /// InitProducerId succeeded (first init or an epoch bump): READY.
    pub fn init_done(&mut self) {
        let _ = self.transition(TxnState::Ready, None);
    }

    /// InitProducerId failed with an error the application may retry after (a timeout):
    /// back to UNINITIALIZED so `init_transactions` can be called again.
    pub fn init_failed_retriable(&mut self) {
        let _ = self.transition(TxnState::Uninitialized, None);
    }

    /// `beginTransaction`.
    pub fn begin_transaction(&mut self, tv2: bool) -> Result<(), Error> {
        self.maybe_fail_with_error()?;
        self.transition(TxnState::InTransaction, None)?;
        self.tv2 = tv2;
        Ok(())
    }

    /// The checks of Java's `maybeAddPartition`, made when `send` is called (before the
    /// record's partition may be known: Java's `send` waits for metadata, this client's does
    /// not, so the record is accepted now and added to the transaction when appended).
    pub fn check_send(&self, topic: &str, has_producer_id: bool) -> Result<(), Error> {
        self.maybe_fail_with_error()?;
        if !has_producer_id {
            return Err(Error::IllegalState(format!(
                "Cannot add partition of {topic} to transaction before completing a call to initTransactions"
            )));
        }
        if self.state != TxnState::InTransaction {
            return Err(Error::IllegalState(format!(
                "Cannot add partition of {topic} to transaction while in state  {}",
                self.state.name()
            )));
        }
        Ok(())
    }

    /// Java's `maybeAddPartition`, on every send: the partition joins the transaction (v2:
    /// at once, the broker adds it with the Produce; v1: queued for AddPartitionsToTxn).
    pub fn maybe_add_partition(&mut self, tp: &Tp, has_producer_id: bool) -> Result<(), Error> {
        self.check_send(&tp.0, has_producer_id)?;
        self.add_accepted_partition(tp)
    }

    /// Adds the partition of a record accepted by [`Transactions::check_send`]; the commit may
    /// have begun meanwhile (it waits for such records), an abort or error may not.
    pub fn add_accepted_partition(&mut self, tp: &Tp) -> Result<(), Error> {
        self.maybe_fail_with_error()?;
        if !matches!(
            self.state,
            TxnState::InTransaction | TxnState::CommittingTransaction
        ) {
            return Err(Error::TransactionAborted);
        }
        if self.tv2 {
            self.partitions_in_txn.insert(tp.clone());
            self.transaction_started = true;
        } else if !self.partitions_in_txn.contains(tp) && !self.pending_partitions.contains(tp) {
            self.new_partitions.insert(tp.clone());
        }
        Ok(())
    }

    /// Java's `isSendToPartitionAllowed`: batches of `tp` may be drained.
    pub fn is_send_allowed(&self, tp: &Tp) -> bool {
        !self.has_fatal_error() && self.partitions_in_txn.contains(tp)
    }

    /// The partitions for the next AddPartitionsToTxn (they become pending), or `None`.
    pub fn take_partitions_to_add(&mut self) -> Option<Vec<Tp>> {
        if self.new_partitions.is_empty() || !self.pending_partitions.is_empty() {
            return None;
        }
        self.pending_partitions = std::mem::take(&mut self.new_partitions);
        Some(self.pending_partitions.iter().cloned().collect())
    }

    /// True while partitions wait to be added (EndTxn waits for them).
    pub fn has_partitions_to_add(&self) -> bool {
        !self.new_partitions.is_empty() || !self.pending_partitions.is_empty()
    }

    /// AddPartitionsToTxn answered: `added` joined the transaction. Failed partitions leave
    /// the pending set too (their batches are failed by the error state).
    pub fn partitions_added(&mut self, added: &[Tp], failed: &[Tp]) {
        for tp in added.iter().chain(failed) {
            self.pending_partitions.remove(tp);
        }
        if failed.is_empty() {
            self.partitions_in_txn.extend(added.iter().cloned());
            self.transaction_started = true;
        }
    }

    /// AddOffsetsToTxn succeeded (or, with v2, TxnOffsetCommit is about to be sent).
    pub fn offsets_added(&mut self) {
        self.transaction_started = true;
    }

    /// `sendOffsetsToTransaction` precondition.
    pub fn check_send_offsets(&self) -> Result<(), Error> {
        self.maybe_fail_with_error()?;
        if self.state != TxnState::InTransaction {
            return Err(Error::IllegalState(format!(
                "Cannot send offsets if a transaction is not in progress (currentState= {})",
                self.state.name()
            )));
        }
        Ok(())
    }

    /// `commitTransaction`: IN_TRANSACTION -> COMMITTING_TRANSACTION.
    pub fn begin_commit(&mut self) -> Result<(), Error> {
        self.maybe_fail_with_error()?;
        self.transition(TxnState::CommittingTransaction, None)
    }

    /// `abortTransaction`: from IN_TRANSACTION or ABORTABLE_ERROR (not from a fatal error).
    pub fn begin_abort(&mut self) -> Result<(), Error> {
        if self.state != TxnState::AbortableError {
            self.maybe_fail_with_error()?;
        }
        self.transition(TxnState::AbortingTransaction, None)?;
        // Nothing more is added to a transaction being aborted.
        self.new_partitions.clear();
        Ok(())
    }

    /// Java's `transitionToAbortableError` (ignored while aborting: the transaction is being
    /// aborted anyway).
    pub fn transition_to_abortable_error(&mut self, e: Error) {
        if self.state == TxnState::AbortingTransaction {
            tracing::debug!(error = %e, "skipping transition to abortable error while aborting");
            return;
        }
        if let Err(ie) = self.transition(TxnState::AbortableError, Some(e)) {
            tracing::warn!(error = %ie, "invalid transition");
        }
    }

    /// An abortable error after which the epoch is bumped when the transaction is aborted.
    pub fn abortable_error_with_epoch_bump(&mut self, e: Error) {
        self.epoch_bump_required = true;
        self.transition_to_abortable_error(e);
    }

    /// Java's `transitionToFatalError`.
    pub fn transition_to_fatal_error(&mut self, e: Error) {
        tracing::error!(transactional_id = %self.transactional_id, error = %e, "transactional producer in fatal error state");
        let _ = self.transition(TxnState::FatalError, Some(e));
    }

    /// Java's `maybeTransitionToErrorState` for a failed batch.
    pub fn batch_failed(&mut self, e: &Error) {
        if is_fatal_batch_error(e) {
            self.transition_to_fatal_error(clone_error(e));
        } else {
            if !self.is_completing() {
                self.epoch_bump_required = true;
            }
            self.transition_to_abortable_error(clone_error(e));
        }
    }

    /// Java's `completeTransaction`, after EndTxn succeeded or when there was nothing to end:
    /// READY, or INITIALIZING when the epoch must be bumped first (the caller sends
    /// InitProducerId with the current producer id and epoch).
    pub fn complete_transaction(&mut self) {
        let target = if self.epoch_bump_required && !self.tv2 {
            TxnState::Initializing
        } else {
            TxnState::Ready
        };
        if let Err(e) = self.transition(target, None) {
            tracing::warn!(error = %e, "completing transaction");
        }
        self.epoch_bump_required = false;
        self.transaction_started = false;
        self.new_partitions.clear();
        self.pending_partitions.clear();
        self.partitions_in_txn.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(p: i32) -> Tp {
        ("t".to_string(), p)
    }

    fn fenced() -> Error {
        Error::Kafka {
            code: ErrorCode::ProducerFenced,
            message: None,
        }
    }

    fn ready() -> Transactions {
        let mut t = Transactions::new("tx".into());
        t.begin_init().unwrap();
        t.init_done();
        t
    }

    #[test]
    fn transitions_follow_java() {
        use TxnState::*;
        assert!(Uninitialized.is_transition_valid(Initializing));
        assert!(!Ready.is_transition_valid(Initializing));
        assert!(AbortingTransaction.is_transition_valid(Initializing));
        assert!(!Ready.is_transition_valid(CommittingTransaction));
        assert!(!AbortableError.is_transition_valid(CommittingTransaction));
        assert!(AbortableError.is_transition_valid(AbortingTransaction));
        assert!(!FatalError.is_transition_valid(AbortingTransaction));
        assert!(Ready.is_transition_valid(FatalError));
    }

    #[test]
    fn calls_in_the_wrong_state_are_illegal() {
        let mut t = Transactions::new("tx".into());
        assert!(matches!(
            t.begin_transaction(false),
            Err(Error::IllegalState(_))
        ));
        assert!(matches!(
            t.maybe_add_partition(&tp(0), false),
            Err(Error::IllegalState(_))
        ));
        let mut t = ready();
        assert!(matches!(t.begin_init(), Err(Error::IllegalState(_))));
        assert!(matches!(t.begin_commit(), Err(Error::IllegalState(_))));
        assert!(matches!(t.begin_abort(), Err(Error::IllegalState(_))));
        assert!(matches!(
            t.check_send_offsets(),
            Err(Error::IllegalState(_))
        ));
        t.begin_transaction(false).unwrap();
        assert!(matches!(
            t.begin_transaction(false),
            Err(Error::IllegalState(_))
        ));
        t.begin_commit().unwrap();
        assert!(matches!(
            t.maybe_add_partition(&tp(0), true),
            Err(Error::IllegalState(_))
        ));
    }

    #[test]
    fn v1_partitions_wait_for_add_partitions() {
        let mut t = ready();
        t.begin_transaction(false).unwrap();
        t.maybe_add_partition(&tp(0), true).unwrap();
        t.maybe_add_partition(&tp(1), true).unwrap();
        assert!(!t.is_send_allowed(&tp(0)));
        let batch = t.take_partitions_to_add().unwrap();
        assert_eq!(batch, vec![tp(0), tp(1)]);
        // One AddPartitionsToTxn at a time; a partition written meanwhile waits.
        t.maybe_add_partition(&tp(2), true).unwrap();
        t.maybe_add_partition(&tp(0), true).unwrap();
        assert!(t.take_partitions_to_add().is_none());
        assert!(!t.transaction_started());
        t.partitions_added(&batch, &[]);
        assert!(t.is_send_allowed(&tp(0)) && t.is_send_allowed(&tp(1)));
        assert!(t.transaction_started());
        assert_eq!(t.take_partitions_to_add().unwrap(), vec![tp(2)]);
        t.partitions_added(&[tp(2)], &[]);
        assert!(!t.has_partitions_to_add());
        t.begin_commit().unwrap();
        t.complete_transaction();
        assert_eq!(t.state(), TxnState::Ready);
        assert!(!t.is_send_allowed(&tp(0)));
        assert!(!t.transaction_started());
    }

    #[test]
    fn v2_adds_partitions_implicitly() {
        let mut t = ready();
        t.begin_transaction(true).unwrap();
        assert!(!t.transaction_started());
        t.maybe_add_partition(&tp(3), true).unwrap();
        assert!(t.is_send_allowed(&tp(3)));
        assert!(t.take_partitions_to_add().is_none());
        assert!(t.transaction_started());
    }

    #[test]
    fn failed_batch_is_abortable_then_abort_bumps_epoch() {
        let mut t = ready();
        t.begin_transaction(false).unwrap();
        t.batch_failed(&Error::Kafka {
            code: ErrorCode::MessageTooLarge,
            message: None,
        });
        assert_eq!(t.state(), TxnState::AbortableError);
        assert!(t.epoch_bump_required());
        // Commit and further sends fail with the error, not fatally.
        let e = t.begin_commit().unwrap_err();
        assert!(matches!(e, Error::TransactionError { fatal: false, .. }));
        assert!(!e.is_fatal_transaction_error());
        assert!(t.maybe_add_partition(&tp(0), true).is_err());
        t.begin_abort().unwrap();
        t.complete_transaction();
        // Transactions v1: InitProducerId bumps the epoch before the next transaction.
        assert_eq!(t.state(), TxnState::Initializing);
        t.init_done();
        t.begin_transaction(false).unwrap();
    }

    #[test]
    fn v2_abort_needs_no_init_producer_id() {
        let mut t = ready();
        t.begin_transaction(true).unwrap();
        t.batch_failed(&Error::Kafka {
            code: ErrorCode::InvalidRecord,
            message: None,
        });
        t.begin_abort().unwrap();
        t.complete_transaction();
        assert_eq!(t.state(), TxnState::Ready);
    }

    #[test]
    fn fenced_is_fatal_and_reported_as_itself() {
        let mut t = ready();
        t.begin_transaction(false).unwrap();
        t.batch_failed(&fenced());
        assert!(t.has_fatal_error());
        let e = t.begin_commit().unwrap_err();
        assert_eq!(e.code(), Some(ErrorCode::ProducerFenced));
        assert!(e.is_fatal_transaction_error());
        assert!(t.begin_abort().is_err());
        assert!(t.begin_transaction(false).is_err());
        let mut t = ready();
        t.transition_to_fatal_error(Error::Kafka {
            code: ErrorCode::TransactionalIdAuthorizationFailed,
            message: None,
        });
        assert!(matches!(
            t.maybe_fail_with_error(),
            Err(Error::TransactionError { fatal: true, .. })
        ));
    }

    #[test]
    fn errors_while_aborting_are_ignored() {
        let mut t = ready();
        t.begin_transaction(false).unwrap();
        t.begin_abort().unwrap();
        t.transition_to_abortable_error(Error::TransactionAborted);
        assert_eq!(t.state(), TxnState::AbortingTransaction);
    }
}

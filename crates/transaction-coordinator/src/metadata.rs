//! One transactional id's state (Kafka's `TransactionMetadata`) and the transitions between
//! its states (`TxnTransitMetadata`).
//!
//! A change is made in two steps, as in Kafka: a `prepare_*` method checks that the
//! transition is allowed from the current state, marks it pending and returns the state to
//! become ([`TxnTransitMetadata`], what the log record stores); once that record is written,
//! [`TransactionMetadata::complete_transition_to`] checks it against the current state again
//! and makes it the current state. The shard prepares on a copy and appends the record; the
//! record's replay is what changes the state it keeps.

use std::collections::BTreeSet;

use strom_protocol::ErrorCode;

use crate::state::{TransactionState, TransactionVersion};

/// A partition of a transaction: (topic, partition).
pub type TxnPartition = (String, i32);

/// `RecordBatch.NO_PRODUCER_ID` / `NO_PRODUCER_EPOCH`.
pub const NO_PRODUCER_ID: i64 = -1;
pub const NO_PRODUCER_EPOCH: i16 = -1;

/// Why a transition was refused: a Kafka error the client gets, or a broken invariant
/// (Kafka's `IllegalStateException`, answered as UNKNOWN_SERVER_ERROR).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TxnError {
    #[error("{0:?}")]
    Code(ErrorCode),
    #[error("illegal transaction state: {0}")]
    IllegalState(String),
}

impl TxnError {
    pub fn code(&self) -> ErrorCode {
        match self {
            TxnError::Code(c) => *c,
            TxnError::IllegalState(_) => ErrorCode::UnknownServerError,
        }
    }
}

/// Epochs stop one short of `i16::MAX` so the coordinator can always fence a producer.
pub fn is_epoch_exhausted(producer_epoch: i16) -> bool {
    producer_epoch >= i16::MAX - 1
}

/// The state a transition leads to: what a `__transaction_state` record holds (some fields
/// only in memory: the record stores neither the last epoch nor, as Kafka writes it, the
/// previous and next producer ids).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnTransitMetadata {
    pub producer_id: i64,
    pub prev_producer_id: i64,
    pub next_producer_id: i64,
    pub producer_epoch: i16,
    pub last_producer_epoch: i16,
    pub txn_timeout_ms: i32,
    pub txn_state: TransactionState,
    pub topic_partitions: BTreeSet<TxnPartition>,
    pub txn_start_timestamp: i64,
    pub txn_last_update_timestamp: i64,
    pub client_transaction_version: TransactionVersion,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionMetadata {
    pub transactional_id: String,
    pub producer_id: i64,
    /// The producer id before the last transition (after a load: -1).
    pub prev_producer_id: i64,
    /// The producer id a transactions-v2 EndTxn that exhausted the epoch moves to.
    pub next_producer_id: i64,
    pub producer_epoch: i16,
    /// The epoch before the last bump (KIP-360 retries; not stored, -1 after a load).
    pub last_producer_epoch: i16,
    pub txn_timeout_ms: i32,
    pub state: TransactionState,
    pub topic_partitions: BTreeSet<TxnPartition>,
    pub txn_start_timestamp: i64,
    pub txn_last_update_timestamp: i64,
    pub client_transaction_version: TransactionVersion,
    /// The transition prepared and not yet completed.
    pub pending_state: Option<TransactionState>,
    pub has_failed_epoch_fence: bool,
}

impl TransactionMetadata {
    /// A new transactional id's state: Empty, no epoch yet.
    pub fn new(transactional_id: &str, producer_id: i64, txn_timeout_ms: i32, now: i64) -> Self {
        Self {
            transactional_id: transactional_id.to_string(),
            producer_id,
            prev_producer_id: NO_PRODUCER_ID,
            next_producer_id: NO_PRODUCER_ID,
            producer_epoch: NO_PRODUCER_EPOCH,
            last_producer_epoch: NO_PRODUCER_EPOCH,
            txn_timeout_ms,
            state: TransactionState::Empty,
            topic_partitions: BTreeSet::new(),
            txn_start_timestamp: -1,
            txn_last_update_timestamp: now,
            client_transaction_version: TransactionVersion::TV_0,
            pending_state: None,
            has_failed_epoch_fence: false,
        }
    }

    /// The state a record holds, as a loaded or replayed entry.
    pub fn from_transit(transactional_id: &str, t: &TxnTransitMetadata) -> Self {
        Self {
            transactional_id: transactional_id.to_string(),
            producer_id: t.producer_id,
            prev_producer_id: t.prev_producer_id,
            next_producer_id: t.next_producer_id,
            producer_epoch: t.producer_epoch,
            last_producer_epoch: t.last_producer_epoch,
            txn_timeout_ms: t.txn_timeout_ms,
            state: t.txn_state,
            topic_partitions: t.topic_partitions.clone(),
            txn_start_timestamp: t.txn_start_timestamp,
            txn_last_update_timestamp: t.txn_last_update_timestamp,
            client_transaction_version: t.client_transaction_version,
            pending_state: None,
            has_failed_epoch_fence: false,
        }
    }

    pub fn is_producer_epoch_exhausted(&self) -> bool {
        is_epoch_exhausted(self.producer_epoch)
    }

    pub fn pending_transition_in_progress(&self) -> bool {
        self.pending_state.is_some()
    }

    fn has_pending_transaction(&self) -> bool {
        matches!(
            self.state,
            TransactionState::Ongoing
                | TransactionState::PrepareAbort
                | TransactionState::PrepareCommit
        )
    }

    /// The current state unchanged (tests; the load path).
    pub fn prepare_no_transit(&self) -> TxnTransitMetadata {
        self.transit(self.state)
    }

    /// The current values with a new state: each prepare method overrides what it changes.
    fn transit(&self, state: TransactionState) -> TxnTransitMetadata {
        TxnTransitMetadata {
            producer_id: self.producer_id,
            prev_producer_id: self.prev_producer_id,
            next_producer_id: self.next_producer_id,
            producer_epoch: self.producer_epoch,
            last_producer_epoch: self.last_producer_epoch,
            txn_timeout_ms: self.txn_timeout_ms,
            txn_state: state,
            topic_partitions: self.topic_partitions.clone(),
            txn_start_timestamp: self.txn_start_timestamp,
            txn_last_update_timestamp: self.txn_last_update_timestamp,
            client_transaction_version: self.client_transaction_version,
        }
    }

    /// Bumps the epoch to fence the current producer before aborting its transaction (not
    /// again if a previous fence failed to be written: that epoch was never given out).
    pub fn prepare_fence_producer_epoch(&mut self) -> Result<TxnTransitMetadata, TxnError> {
        if self.producer_epoch == i16::MAX {
            tracing::error!(
                transactional_id = %self.transactional_id,
                producer_id = self.producer_id,
                "fencing a producer whose epoch is already i16::MAX"
            );
        }
        let mut t = self.transit(TransactionState::PrepareEpochFence);
        if !(self.has_failed_epoch_fence || self.producer_epoch == i16::MAX) {
            t.producer_epoch = self.producer_epoch + 1;
        }
        self.prepare_transition_to(t)
    }

    /// InitProducerId on an existing id: bump the epoch (KIP-360: with the producer's
    /// expected epoch, a retry of a bump it never heard about gets the same epoch again).
    pub fn prepare_increment_producer_epoch(
        &mut self,
        new_txn_timeout_ms: i32,
        expected_producer_epoch: Option<i16>,
        update_timestamp: i64,
    ) -> Result<TxnTransitMetadata, TxnError> {
        if self.is_producer_epoch_exhausted() {
            return Err(TxnError::IllegalState(format!(
                "cannot allocate any more producer epochs for producer id {}",
                self.producer_id
            )));
        }
        let mut t = self.transit(TransactionState::Empty);
        let bumped = self.producer_epoch + 1;
        match expected_producer_epoch {
            None => {
                t.producer_epoch = bumped;
                t.last_producer_epoch = NO_PRODUCER_EPOCH;
            }
            Some(e) if self.producer_epoch == NO_PRODUCER_EPOCH || e == self.producer_epoch => {
                t.producer_epoch = bumped;
                t.last_producer_epoch = self.producer_epoch;
            }
            Some(e) if e == self.last_producer_epoch => {
                // A retry of a bump that succeeded: the same epoch again.
            }
            Some(e) => {
                tracing::info!(
                    expected = e,
                    current = self.producer_epoch,
                    last = self.last_producer_epoch,
                    "expected producer epoch matches neither the current nor the last"
                );
                return Err(TxnError::Code(ErrorCode::ProducerFenced));
            }
        }
        t.txn_timeout_ms = new_txn_timeout_ms;
        t.topic_partitions = BTreeSet::new();
        t.txn_start_timestamp = -1;
        t.txn_last_update_timestamp = update_timestamp;
        self.prepare_transition_to(t)
    }

    /// A new producer id at epoch 0 (the epochs of the current one are exhausted).
    pub fn prepare_producer_id_rotation(
        &mut self,
        new_producer_id: i64,
        new_txn_timeout_ms: i32,
        update_timestamp: i64,
        record_last_epoch: bool,
    ) -> Result<TxnTransitMetadata, TxnError> {
        if self.has_pending_transaction() {
            return Err(TxnError::IllegalState(
                "cannot rotate producer ids while a transaction is still pending".into(),
            ));
        }
        let mut t = self.transit(TransactionState::Empty);
        t.producer_id = new_producer_id;
        t.producer_epoch = 0;
        t.last_producer_epoch = if record_last_epoch {
            self.producer_epoch
        } else {
            NO_PRODUCER_EPOCH
        };
        t.txn_timeout_ms = new_txn_timeout_ms;
        t.topic_partitions = BTreeSet::new();
        t.txn_start_timestamp = -1;
        t.txn_last_update_timestamp = update_timestamp;
        self.prepare_transition_to(t)
    }

    /// Adds partitions; a transaction starts (its start time is set) when the first are added.
    pub fn prepare_add_partitions(
        &mut self,
        added: &BTreeSet<TxnPartition>,
        update_timestamp: i64,
        client_transaction_version: TransactionVersion,
    ) -> Result<TxnTransitMetadata, TxnError> {
        let mut t = self.transit(TransactionState::Ongoing);
        if matches!(
            self.state,
            TransactionState::Empty
                | TransactionState::CompleteAbort
                | TransactionState::CompleteCommit
        ) {
            t.txn_start_timestamp = update_timestamp;
        }
        t.topic_partitions.extend(added.iter().cloned());
        t.txn_last_update_timestamp = update_timestamp;
        t.client_transaction_version = client_transaction_version;
        self.prepare_transition_to(t)
    }

    /// EndTxn: PrepareCommit or PrepareAbort. Transactions v2 bumps the epoch here (an abort
    /// at i16::MAX is let through unbumped so a broken state can recover).
    pub fn prepare_abort_or_commit(
        &mut self,
        new_state: TransactionState,
        client_transaction_version: TransactionVersion,
        next_producer_id: i64,
        update_timestamp: i64,
        no_partition_added: bool,
    ) -> Result<TxnTransitMetadata, TxnError> {
        let mut t = self.transit(new_state);
        if client_transaction_version.supports_epoch_bump() {
            if self.producer_epoch == i16::MAX && new_state == TransactionState::PrepareAbort {
                tracing::error!(
                    transactional_id = %self.transactional_id,
                    "aborting a producer whose epoch is i16::MAX"
                );
            } else {
                t.producer_epoch = self.producer_epoch.checked_add(1).ok_or_else(|| {
                    TxnError::IllegalState("producer epoch would overflow".into())
                })?;
            }
            t.last_producer_epoch = self.producer_epoch;
        }
        // Transactions v2 may abort without any partition added: the start time is then now.
        t.txn_start_timestamp = if no_partition_added {
            update_timestamp
        } else {
            self.txn_start_timestamp
        };
        t.next_producer_id = next_producer_id;
        t.txn_last_update_timestamp = update_timestamp;
        t.client_transaction_version = client_transaction_version;
        self.prepare_transition_to(t)
    }

    /// Every marker is written: CompleteCommit or CompleteAbort. After an epoch overflow in
    /// transactions v2 the producer moves to the next producer id at epoch 0.
    pub fn prepare_complete(
        &mut self,
        update_timestamp: i64,
    ) -> Result<TxnTransitMetadata, TxnError> {
        self.has_failed_epoch_fence = false;
        let state = if self.state == TransactionState::PrepareCommit {
            TransactionState::CompleteCommit
        } else {
            TransactionState::CompleteAbort
        };
        let mut t = self.transit(state);
        if self.client_transaction_version.supports_epoch_bump()
            && self.next_producer_id != NO_PRODUCER_ID
        {
            t.producer_id = self.next_producer_id;
            t.producer_epoch = 0;
        }
        t.next_producer_id = NO_PRODUCER_ID;
        t.topic_partitions = BTreeSet::new();
        t.txn_last_update_timestamp = update_timestamp;
        self.prepare_transition_to(t)
    }

    /// The id expires: its tombstone is written and it is removed.
    pub fn prepare_dead(&mut self) -> Result<TxnTransitMetadata, TxnError> {
        let mut t = self.transit(TransactionState::Dead);
        t.topic_partitions = BTreeSet::new();
        self.prepare_transition_to(t)
    }

    fn prepare_transition_to(
        &mut self,
        mut t: TxnTransitMetadata,
    ) -> Result<TxnTransitMetadata, TxnError> {
        if let Some(p) = self.pending_state {
            return Err(TxnError::IllegalState(format!(
                "preparing a transition from {:?} while {p:?} is pending",
                self.state
            )));
        }
        if t.producer_id < 0 {
            return Err(TxnError::IllegalState(format!(
                "illegal new producer id {}",
                t.producer_id
            )));
        }
        // A new id has no epoch until InitProducerId completes; it may expire before that.
        if t.txn_state != TransactionState::Dead && t.producer_epoch < 0 {
            return Err(TxnError::IllegalState(format!(
                "illegal new producer epoch {}",
                t.producer_epoch
            )));
        }
        if !t.txn_state.valid_previous_states().contains(&self.state) {
            return Err(TxnError::IllegalState(format!(
                "{:?} is not a valid previous state of {:?}",
                self.state, t.txn_state
            )));
        }
        t.prev_producer_id = self.producer_id;
        self.pending_state = Some(t.txn_state);
        Ok(t)
    }

    /// The record of a prepared transition is written: it becomes the current state, after
    /// the same checks Kafka makes (a failure is a coordinator bug, not a client error).
    pub fn complete_transition_to(&mut self, t: &TxnTransitMetadata) -> Result<(), TxnError> {
        use TransactionState::*;
        let Some(to) = self.pending_state else {
            return Err(TxnError::IllegalState(format!(
                "{}: completing a transition without a pending state",
                self.transactional_id
            )));
        };
        let fail = || {
            Err(TxnError::IllegalState(format!(
                "{}: transition to {t:?} from {self:?} does not fit",
                self.transactional_id
            )))
        };
        if to != t.txn_state {
            return fail();
        }
        match to {
            Empty => {
                if (self.producer_epoch != t.producer_epoch && !self.valid_producer_epoch_bump(t))
                    || !t.topic_partitions.is_empty()
                    || t.txn_start_timestamp != -1
                {
                    return fail();
                }
            }
            Ongoing => {
                if !self.valid_producer_epoch(t)
                    || !t.topic_partitions.is_superset(&self.topic_partitions)
                    || self.txn_timeout_ms != t.txn_timeout_ms
                {
                    return fail();
                }
            }
            PrepareAbort | PrepareCommit => {
                let allowed_empty_abort = to == PrepareAbort
                    && t.client_transaction_version.supports_epoch_bump()
                    && matches!(self.state, Empty | CompleteCommit | CompleteAbort);
                let valid_timestamp =
                    self.txn_start_timestamp == t.txn_start_timestamp || allowed_empty_abort;
                if !self.valid_producer_epoch(t)
                    || self.topic_partitions != t.topic_partitions
                    || self.txn_timeout_ms != t.txn_timeout_ms
                    || !valid_timestamp
                {
                    return fail();
                }
            }
            CompleteAbort | CompleteCommit => {
                if !self.valid_producer_epoch(t)
                    || self.txn_timeout_ms != t.txn_timeout_ms
                    || t.txn_start_timestamp == -1
                {
                    return fail();
                }
            }
            PrepareEpochFence => return fail(),
            Dead => {
                return Err(TxnError::IllegalState(format!(
                    "{}: a Dead transition is completed by removing the id, never stored",
                    self.transactional_id
                )))
            }
        }
        self.producer_id = t.producer_id;
        self.prev_producer_id = t.prev_producer_id;
        self.next_producer_id = t.next_producer_id;
        self.producer_epoch = t.producer_epoch;
        self.last_producer_epoch = t.last_producer_epoch;
        self.txn_timeout_ms = t.txn_timeout_ms;
        self.topic_partitions = t.topic_partitions.clone();
        self.txn_start_timestamp = t.txn_start_timestamp;
        self.txn_last_update_timestamp = t.txn_last_update_timestamp;
        self.client_transaction_version = t.client_transaction_version;
        self.pending_state = None;
        self.state = to;
        Ok(())
    }

    /// Kafka's `validProducerEpoch`: in transactions v2 a Prepare state carries the bumped
    /// epoch (its last epoch is the current one), and a Complete after an overflow carries the
    /// new producer id at epoch 0 (its previous id is the current one).
    fn valid_producer_epoch(&self, t: &TxnTransitMetadata) -> bool {
        use TransactionState::*;
        let v2 = t.client_transaction_version.supports_epoch_bump();
        if v2 && matches!(t.txn_state, CompleteCommit | CompleteAbort) && t.producer_epoch == 0 {
            return t.last_producer_epoch == self.last_producer_epoch
                && t.prev_producer_id == self.producer_id;
        }
        if v2 && matches!(t.txn_state, PrepareCommit | PrepareAbort) {
            return t.last_producer_epoch == self.producer_epoch
                && t.producer_id == self.producer_id;
        }
        t.producer_epoch == self.producer_epoch && t.producer_id == self.producer_id
    }

    fn valid_producer_epoch_bump(&self, t: &TxnTransitMetadata) -> bool {
        t.producer_epoch == self.producer_epoch.wrapping_add(1)
            || (t.producer_epoch == 0 && t.producer_id != self.producer_id)
    }
}

#[cfg(test)]
#[path = "metadata_tests.rs"]
mod tests;

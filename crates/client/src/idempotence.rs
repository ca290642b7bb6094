//! The idempotent producer's bookkeeping, after Kafka's `TransactionManager` (idempotent,
//! non-transactional part), `TxnPartitionMap` and `TxnPartitionEntry`: the producer id and
//! epoch, per partition the next sequence, the last acknowledged sequence and offset and the
//! in-flight batches ordered by sequence, epoch bumps and the decisions of `canRetry` and
//! `handleFailedBatch`.
//!
//! The producer's background task owns one [`TransactionManager`]; batches themselves live in
//! the accumulator queues or in requests on the wire, so a rewrite of their producer state
//! after an epoch bump is recorded here by batch id and applied with
//! [`TransactionManager::sync_batch`] when the batch is next handled.

use std::collections::{BTreeMap, HashMap, HashSet};

use strom_protocol::records::{NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE};
use strom_protocol::ErrorCode;

use crate::error::Error;
use crate::producer::{increment_sequence, ProducerBatch};

/// A producer id and epoch as handed out by InitProducerId.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProducerIdAndEpoch {
    pub producer_id: i64,
    pub epoch: i16,
}

impl ProducerIdAndEpoch {
    /// No producer id (idempotence off, or not initialized yet): -1 / -1.
    pub const NONE: ProducerIdAndEpoch = ProducerIdAndEpoch {
        producer_id: NO_PRODUCER_ID,
        epoch: NO_PRODUCER_EPOCH,
    };

    /// True for an id handed out by a broker.
    pub fn is_valid(&self) -> bool {
        self.producer_id != NO_PRODUCER_ID
    }
}

impl Default for ProducerIdAndEpoch {
    fn default() -> Self {
        Self::NONE
    }
}

/// A topic partition.
pub type Tp = (String, i32);

const NO_LAST_ACKED_SEQUENCE_NUMBER: i32 = -1;

#[derive(Debug, Clone, Copy)]
struct Inflight {
    id: u64,
    record_count: i32,
}

/// Kafka's `TxnPartitionEntry`.
#[derive(Debug)]
struct PartitionEntry {
    producer_id_and_epoch: ProducerIdAndEpoch,
    next_sequence: i32,
    last_acked_sequence: i32,
    /// Sent (or re-queued) batches not yet completed, by (producer id, epoch, base sequence).
    inflight: BTreeMap<(i64, i16, i32), Inflight>,
    last_acked_offset: i64,
}

impl PartitionEntry {
    fn new() -> Self {
        PartitionEntry {
            producer_id_and_epoch: ProducerIdAndEpoch::NONE,
            next_sequence: 0,
            last_acked_sequence: NO_LAST_ACKED_SEQUENCE_NUMBER,
            inflight: BTreeMap::new(),
            last_acked_offset: -1,
        }
    }
}

/// Where the producer id stands (Kafka's `TransactionManager.State`, idempotent part).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdState {
    Uninitialized,
    Initializing,
    Ready,
}

/// Kafka's `TransactionManager` for an idempotent, non-transactional producer.
#[derive(Debug)]
pub struct TransactionManager {
    producer_id_and_epoch: ProducerIdAndEpoch,
    state: IdState,
    partitions: HashMap<Tp, PartitionEntry>,
    unresolved: HashMap<Tp, i32>,
    epoch_bump_required: bool,
    partitions_to_rewrite: HashSet<Tp>,
    /// Producer state rewrites (after an epoch bump) not yet applied to their batches.
    resets: HashMap<u64, (ProducerIdAndEpoch, i32)>,
    /// A transactional producer never bumps its epoch locally: a failed batch makes the
    /// transaction abortable and the coordinator bumps the epoch (see [`crate::transactions`]).
    transactional: bool,
}

impl Default for TransactionManager {
    fn default() -> Self {
        Self::new()
    }
}

fn key(b: &ProducerBatch) -> (i64, i16, i32) {
    (b.producer_id, b.producer_epoch, b.base_sequence)
}

impl TransactionManager {
    /// A manager without a producer id.
    pub fn new() -> Self {
        TransactionManager {
            producer_id_and_epoch: ProducerIdAndEpoch::NONE,
            state: IdState::Uninitialized,
            partitions: HashMap::new(),
            unresolved: HashMap::new(),
            epoch_bump_required: false,
            partitions_to_rewrite: HashSet::new(),
            resets: HashMap::new(),
            transactional: false,
        }
    }

    /// Marks the producer transactional (Java's `isTransactional()` branches).
    pub fn set_transactional(&mut self, transactional: bool) {
        self.transactional = transactional;
    }

    /// Java's `resetSequenceNumbers`: after the epoch changed (InitProducerId bump, or EndTxn
    /// with transactions v2) every partition starts again at sequence 0.
    pub fn reset_sequence_numbers(&mut self) {
        self.partitions.clear();
        self.unresolved.clear();
    }

    /// The current producer id and epoch (possibly [`ProducerIdAndEpoch::NONE`]).
    pub fn producer_id_and_epoch(&self) -> ProducerIdAndEpoch {
        self.producer_id_and_epoch
    }

    /// The id state.
    pub fn state(&self) -> IdState {
        self.state
    }

    /// True when a producer id is held.
    pub fn has_producer_id(&self) -> bool {
        self.producer_id_and_epoch.is_valid()
    }

    /// Kafka's `bumpIdempotentEpochAndResetIdIfNeeded`: performs a requested epoch bump
    /// (locally: epoch + 1, or a new producer id once the epoch is exhausted) and returns true
    /// when an InitProducerId request must be sent now (the state is then Initializing).
    pub fn bump_epoch_and_reset_id_if_needed(&mut self) -> bool {
        if self.epoch_bump_required {
            self.bump_idempotent_producer_epoch();
        }
        if self.state != IdState::Initializing && !self.has_producer_id() {
            self.state = IdState::Initializing;
            return true;
        }
        false
    }

    /// InitProducerId answered.
    pub fn set_producer_id_and_epoch(&mut self, pid: ProducerIdAndEpoch) {
        tracing::info!(
            producer_id = pid.producer_id,
            epoch = pid.epoch,
            "ProducerId set to {} with epoch {}",
            pid.producer_id,
            pid.epoch
        );
        self.producer_id_and_epoch = pid;
        self.state = IdState::Ready;
    }

    /// InitProducerId failed with a retriable error: back to Uninitialized so it is sent again.
    pub fn init_failed(&mut self) {
        self.state = IdState::Uninitialized;
    }

    fn reset_idempotent_producer_id(&mut self) {
        tracing::debug!(pid = ?self.producer_id_and_epoch, "resetting idempotent producer id");
        self.producer_id_and_epoch = ProducerIdAndEpoch::NONE;
        self.state = IdState::Uninitialized;
    }

    fn request_epoch_bump_for_partition(&mut self, tp: &Tp) {
        self.epoch_bump_required = true;
        self.partitions_to_rewrite.insert(tp.clone());
    }

    /// True when an epoch bump has been requested and not yet performed.
    pub fn epoch_bump_required(&self) -> bool {
        self.epoch_bump_required
    }

    fn bump_idempotent_producer_epoch(&mut self) {
        if self.producer_id_and_epoch.epoch == i16::MAX {
            self.reset_idempotent_producer_id();
        } else {
            self.producer_id_and_epoch = ProducerIdAndEpoch {
                producer_id: self.producer_id_and_epoch.producer_id,
                epoch: self.producer_id_and_epoch.epoch + 1,
            };
            tracing::info!(pid = ?self.producer_id_and_epoch, "incremented producer epoch");
        }
        let tps: Vec<Tp> = self.partitions_to_rewrite.drain().collect();
        let new = self.producer_id_and_epoch;
        for tp in tps {
            self.start_sequences_at_beginning(&tp, new);
            self.unresolved.remove(&tp);
        }
        self.epoch_bump_required = false;
    }

    /// Kafka's `TxnPartitionEntry.startSequencesAtBeginning`: the in-flight batches of `tp`
    /// get `new` and sequences from 0 in their current order.
    fn start_sequences_at_beginning(&mut self, tp: &Tp, new: ProducerIdAndEpoch) {
        let Some(entry) = self.partitions.get_mut(tp) else {
            return;
        };
        let mut sequence = 0i32;
        let mut inflight = BTreeMap::new();
        for (_, f) in std::mem::take(&mut entry.inflight) {
            self.resets.insert(f.id, (new, sequence));
            inflight.insert((new.producer_id, new.epoch, sequence), f);
            sequence = sequence.wrapping_add(f.record_count);
        }
        entry.inflight = inflight;
        entry.producer_id_and_epoch = new;
        entry.next_sequence = sequence;
        entry.last_acked_sequence = NO_LAST_ACKED_SEQUENCE_NUMBER;
    }

    /// Applies a pending producer-state rewrite to `batch` (after an epoch bump).
    pub fn sync_batch(&mut self, batch: &mut ProducerBatch) {
        if let Some((pid, seq)) = self.resets.remove(&batch.id) {
            batch.reset_producer_state(pid, seq);
        }
    }

    /// True when rewrites are waiting to be applied.
    pub fn has_pending_resets(&self) -> bool {
        !self.resets.is_empty()
    }

    fn entry(&mut self, tp: &Tp) -> &mut PartitionEntry {
        if !self.partitions.contains_key(tp) {
            self.partitions.insert(tp.clone(), PartitionEntry::new());
        }
        self.partitions.get_mut(tp).unwrap()
    }

    /// Kafka's `maybeUpdateProducerIdAndEpoch`: a partition whose batches all completed under
    /// an older id/epoch starts again at sequence 0 with the current one.
    pub fn maybe_update_producer_id_and_epoch(&mut self, tp: &Tp) {
        if self.has_stale_producer_id_and_epoch(tp) && !self.has_inflight_batches(tp) {
            let new = self.producer_id_and_epoch;
            self.entry(tp);
            self.start_sequences_at_beginning(tp, new);
        }
    }

    /// The base sequence for the next batch of `tp`.
    pub fn sequence_number(&mut self, tp: &Tp) -> i32 {
        self.entry(tp).next_sequence
    }

    /// Advances the next sequence of `tp` by `increment` records (wrapping at `i32::MAX`).
    pub fn increment_sequence_number(&mut self, tp: &Tp, increment: i32) {
        let e = self.entry(tp);
        e.next_sequence = increment_sequence(e.next_sequence, increment);
    }

    /// Starts tracking a drained batch (it must have a sequence).
    pub fn add_inflight_batch(&mut self, tp: &Tp, batch: &ProducerBatch) {
        debug_assert!(batch.has_sequence());
        self.entry(tp).inflight.insert(
            key(batch),
            Inflight {
                id: batch.id,
                record_count: batch.len() as i32,
            },
        );
    }

    fn remove_inflight_batch(&mut self, tp: &Tp, batch: &ProducerBatch) {
        if let Some(e) = self.partitions.get_mut(tp) {
            if e.inflight
                .get(&key(batch))
                .is_some_and(|f| f.id == batch.id)
            {
                e.inflight.remove(&key(batch));
            } else {
                e.inflight.retain(|_, f| f.id != batch.id);
            }
        }
    }

    /// True while `tp` has batches sent and not completed.
    pub fn has_inflight_batches(&self, tp: &Tp) -> bool {
        self.partitions
            .get(tp)
            .is_some_and(|e| !e.inflight.is_empty())
    }

    /// The lowest base sequence in flight for `tp`, or -1.
    pub fn first_inflight_sequence(&self, tp: &Tp) -> i32 {
        self.partitions
            .get(tp)
            .and_then(|e| e.inflight.keys().next())
            .map_or(NO_SEQUENCE, |k| k.2)
    }

    /// True when `tp` still uses an older producer id or epoch.
    pub fn has_stale_producer_id_and_epoch(&self, tp: &Tp) -> bool {
        let current = self
            .partitions
            .get(tp)
            .map_or(ProducerIdAndEpoch::NONE, |e| e.producer_id_and_epoch);
        current != self.producer_id_and_epoch
    }

    /// True when `tp` has batches of unknown fate (expired after being sent).
    pub fn has_unresolved_sequence(&self, tp: &Tp) -> bool {
        self.unresolved.contains_key(tp)
    }

    /// The last acknowledged sequence of `tp`, or -1.
    pub fn last_acked_sequence(&self, tp: &Tp) -> i32 {
        self.partitions
            .get(tp)
            .map_or(NO_LAST_ACKED_SEQUENCE_NUMBER, |e| e.last_acked_sequence)
    }

    fn last_acked_offset(&self, tp: &Tp) -> i64 {
        self.partitions.get(tp).map_or(-1, |e| e.last_acked_offset)
    }

    fn is_next_sequence(&self, tp: &Tp, sequence: i32) -> bool {
        sequence.wrapping_sub(self.last_acked_sequence(tp)) == 1
    }

    fn is_next_sequence_for_unresolved_partition(&self, tp: &Tp, sequence: i32) -> bool {
        self.unresolved.get(tp) == Some(&sequence)
    }

    /// Kafka's `markSequenceUnresolved`: a batch that had been sent expired.
    pub fn mark_sequence_unresolved(&mut self, tp: &Tp, batch: &ProducerBatch) {
        let next = batch.last_sequence().wrapping_add(1);
        let v = self.unresolved.entry(tp.clone()).or_insert(next);
        *v = (*v).max(next);
    }

    /// Kafka's `maybeResolveSequences` (idempotent part): once an unresolved partition has
    /// nothing in flight it is resolved if the acknowledged sequences caught up, else the epoch
    /// is bumped.
    pub fn maybe_resolve_sequences(&mut self) {
        let tps: Vec<Tp> = self.unresolved.keys().cloned().collect();
        for tp in tps {
            if self.has_inflight_batches(&tp) {
                continue;
            }
            let next = self.sequence_number(&tp);
            if !self.is_next_sequence(&tp, next) {
                tracing::info!(
                    topic = %tp.0,
                    partition = tp.1,
                    last_acked = self.last_acked_sequence(&tp),
                    next,
                    "no inflight batches remaining; bumping epoch and resetting sequence numbers"
                );
                self.request_epoch_bump_for_partition(&tp);
            }
            self.unresolved.remove(&tp);
        }
    }

    /// Kafka's `handleCompletedBatch`.
    pub fn handle_completed_batch(&mut self, tp: &Tp, batch: &ProducerBatch, base_offset: i64) {
        let last = batch.last_sequence();
        if let Some(e) = self.partitions.get_mut(tp) {
            if last > e.last_acked_sequence {
                e.last_acked_sequence = last;
            }
        }
        if base_offset >= 0 {
            let last_offset = base_offset + batch.len() as i64 - 1;
            let e = self.entry(tp);
            if last_offset > e.last_acked_offset {
                e.last_acked_offset = last_offset;
            }
        }
        self.remove_inflight_batch(tp, batch);
    }

    /// Kafka's `handleFailedBatch` for an idempotent producer: OUT_OF_ORDER_SEQUENCE_NUMBER
    /// bumps the epoch of the partition, UNKNOWN_PRODUCER_ID forgets its sequences, any other
    /// failure of a batch that had retries left (`adjust_sequence_numbers`) bumps the epoch too.
    pub fn handle_failed_batch(
        &mut self,
        tp: &Tp,
        batch: &ProducerBatch,
        error: &Error,
        adjust_sequence_numbers: bool,
    ) {
        self.remove_inflight_batch(tp, batch);
        if self.transactional {
            // The transaction becomes abortable; aborting it bumps the epoch and resets the
            // sequences, so nothing is adjusted here.
            if error.code() == Some(ErrorCode::UnknownProducerId) {
                self.partitions.remove(tp);
                self.unresolved.remove(tp);
            }
            return;
        }
        match error.code() {
            Some(ErrorCode::OutOfOrderSequenceNumber) => {
                tracing::error!(
                    topic = %tp.0,
                    partition = tp.1,
                    producer_id = batch.producer_id,
                    epoch = batch.producer_epoch,
                    sequence = batch.base_sequence,
                    "The broker returned {error}"
                );
                self.request_epoch_bump_for_partition(tp);
            }
            Some(ErrorCode::UnknownProducerId) => {
                self.partitions.remove(tp);
                self.unresolved.remove(tp);
            }
            _ => {
                if adjust_sequence_numbers {
                    self.request_epoch_bump_for_partition(tp);
                }
            }
        }
    }

    /// Kafka's `TransactionManager.canRetry` for an idempotent producer: whether a batch that
    /// failed with `error` is retried (requesting an epoch bump where Kafka does).
    /// `log_start_offset` comes from the Produce response (-1 when unknown).
    pub fn can_retry(
        &mut self,
        tp: &Tp,
        batch: &ProducerBatch,
        error: &Error,
        log_start_offset: i64,
    ) -> bool {
        match error.code() {
            Some(ErrorCode::UnknownProducerId) => {
                if log_start_offset == -1 {
                    return true;
                }
                if batch.sequence_has_been_reset() {
                    return true;
                }
                if self.transactional {
                    // Java: retried (sequences restarted) only when the log head was removed
                    // by retention; otherwise the batch fails and the transaction is aborted.
                    if self.last_acked_offset(tp) < log_start_offset {
                        let current = self.producer_id_and_epoch;
                        self.start_sequences_at_beginning(tp, current);
                        return true;
                    }
                    return false;
                }
                // Whether the head of the log was removed (last acked offset below the log
                // start offset: retention) or the broker lost the state otherwise, the
                // idempotent producer bumps the epoch and retries.
                tracing::debug!(
                    last_acked_offset = self.last_acked_offset(tp),
                    log_start_offset,
                    "UNKNOWN_PRODUCER_ID"
                );
                self.request_epoch_bump_for_partition(tp);
                true
            }
            Some(ErrorCode::OutOfOrderSequenceNumber) => {
                if !self.has_unresolved_sequence(tp)
                    && (batch.sequence_has_been_reset()
                        || !self.is_next_sequence(tp, batch.base_sequence))
                {
                    // Not the next batch: an earlier one failed, so this one is retried.
                    return true;
                }
                if self.transactional {
                    return false;
                }
                if !self.has_unresolved_sequence(tp)
                    || self.is_next_sequence_for_unresolved_partition(tp, batch.base_sequence)
                {
                    self.request_epoch_bump_for_partition(tp);
                }
                true
            }
            _ => error.is_retriable(),
        }
    }
}

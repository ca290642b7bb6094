//! Transactions in [`UnifiedLog`]: producer-state updates of an append (open transactions,
//! markers, the `.txnindex` of aborted ones), the first unstable and last stable offsets, the
//! aborted transactions a read_committed fetch returns, and the producer-state replay after a
//! restart or truncation (Kafka's `UnifiedLog` transaction parts, `LogSegment.updateTxnIndex`
//! and `LogLoader`'s rebuild of the state and the indexes of recovered segments).

use strom_protocol::batch::BatchView;
use strom_protocol::memory_records::{parse_end_txn_marker, EndTxnMarker};
use strom_protocol::records::RecordBatchDecoder;

use super::UnifiedLog;
use crate::producer_state::{
    PlacedBatch, Prepared, ProducerAppend, ProducerBatch, ProducerStateError,
};
use crate::txn_index::AbortedTxn;
use crate::verification::VerificationGuard;
use crate::{AppendOrigin, StorageError};

/// The end-transaction marker a control batch carries (`None`: empty, or another control
/// type). Control batches are a single small uncompressed record, so decoding it is cheap.
pub(crate) fn control_marker(batch: &[u8]) -> Option<EndTxnMarker> {
    let set = RecordBatchDecoder::decode(&mut &batch[..]).ok()?;
    let r = set.records.first()?;
    parse_end_txn_marker(r.key.as_deref()?, r.value.as_deref())
}

/// The producer fields of a batch, with its marker when it is a control batch.
pub(crate) fn producer_batch(view: &BatchView<'_>) -> ProducerBatch {
    ProducerBatch {
        producer_id: view.producer_id(),
        producer_epoch: view.producer_epoch(),
        first_seq: view.base_sequence(),
        offset_delta: view.last_offset_delta(),
        max_timestamp: view.max_timestamp(),
        is_control: view.is_control(),
        is_transactional: view.is_transactional(),
        marker: if view.is_control() && view.producer_id() >= 0 {
            control_marker(view.bytes())
        } else {
            None
        },
    }
}

pub(crate) fn producer_state_error(e: ProducerStateError) -> StorageError {
    match e {
        ProducerStateError::OutOfOrderSequence(m) => StorageError::OutOfOrderSequence(m),
        ProducerStateError::InvalidProducerEpoch(m) => StorageError::InvalidProducerEpoch(m),
        ProducerStateError::InvalidTxnState(m) => StorageError::InvalidTxnState(m),
        ProducerStateError::TransactionCoordinatorFenced(m) => {
            StorageError::TransactionCoordinatorFenced(m)
        }
    }
}

impl UnifiedLog {
    /// Checks an append's batches (placed at their offsets) against the producer state.
    pub(super) fn prepare_producer_append(
        &self,
        placed: &[PlacedBatch],
        origin: AppendOrigin,
        transaction_version: i16,
        verification_guard: VerificationGuard,
    ) -> Result<Prepared, StorageError> {
        self.producer_state
            .prepare_verified(placed, origin, transaction_version, verification_guard)
            .map_err(producer_state_error)
    }

    /// Kafka's `UnifiedLog.maybeStartTransactionVerification`: the guard a client's
    /// transactional batch must carry once the coordinator verified it (the sentinel when the
    /// producer's transaction is open here at `epoch`: nothing to verify;
    /// `supports_epoch_bump`: the produce is a transactions-v2 client's).
    pub fn maybe_start_transaction_verification(
        &mut self,
        producer_id: i64,
        sequence: i32,
        epoch: i16,
        supports_epoch_bump: bool,
        now_ms: i64,
    ) -> VerificationGuard {
        self.producer_state.maybe_start_transaction_verification(
            producer_id,
            sequence,
            epoch,
            supports_epoch_bump,
            now_ms,
        )
    }

    /// The producer's verification guard (the sentinel when none is under way).
    pub fn verification_guard(&self, producer_id: i64) -> VerificationGuard {
        self.producer_state.verification_guard(producer_id)
    }

    /// After the batches are written (Kafka's tail of `UnifiedLog.append`): the producers'
    /// entries and started transactions go into the state; each completed transaction gets its
    /// LSO and, if aborted, an entry in the `.txnindex` of the segment holding the marker (the
    /// one that segment base `segment` names); the map end moves to `next_offset`.
    pub(super) fn apply_producer_append(
        &mut self,
        append: &ProducerAppend,
        segment: i64,
        next_offset: i64,
        index_aborted: bool,
    ) -> Result<(), StorageError> {
        self.producer_state.apply(append);
        for done in &append.completed {
            let lso = self.producer_state.last_stable_offset_of(done);
            if index_aborted {
                if let Some(seg) = self.segments.get(&segment) {
                    seg.update_txn_index(done, lso)?;
                }
            }
            self.producer_state.complete_txn(done);
        }
        self.producer_state.update_map_end_offset(next_offset);
        Ok(())
    }

    /// Kafka's `firstUnstableOffset`: the first offset of the oldest transaction that is open,
    /// or completed with its marker not yet below the HW; never below the log start.
    pub fn first_unstable_offset(&self) -> Option<i64> {
        self.producer_state
            .first_unstable_offset()
            .map(|o| o.max(self.log_start_offset))
    }

    /// The LSO given the partition's high watermark: the first unstable offset if below it, else
    /// the HW.
    pub fn last_stable_offset(&self, high_watermark: i64) -> i64 {
        self.first_unstable_offset()
            .map_or(high_watermark, |o| o.min(high_watermark))
    }

    /// Tells the producer state the partition's HW moved (Kafka's `updateHighWatermarkMetadata`
    /// -> `onHighWatermarkUpdated`): completed transactions below it stop holding the LSO.
    pub fn update_high_watermark(&mut self, high_watermark: i64) {
        self.producer_state
            .on_high_watermark_updated(high_watermark);
    }

    /// Kafka's `collectAbortedTransactions`: the aborted transactions overlapping
    /// [`start_offset`, `upper_bound_offset`), from the segment holding `start_offset` on.
    pub fn collect_aborted_transactions(
        &self,
        start_offset: i64,
        upper_bound_offset: i64,
    ) -> Vec<AbortedTxn> {
        let segments = self.shared.snapshot();
        let first = segments
            .partition_point(|s| s.base_offset() <= start_offset)
            .saturating_sub(1);
        crate::reader::collect_aborted(&segments[first..], start_offset, upper_bound_offset)
    }

    /// Rebuilds producer state: the newest snapshot at or below the log end, then the batches
    /// after it (Kafka's `loadProducerState`). Only headers are read, plus the (tiny) control
    /// batches for their markers. With `rebuild_txn_index_from` (the first segment recovery
    /// rewrote), the replay starts at or below that segment and refills the `.txnindex` of it
    /// and every later segment, as Kafka's `LogSegment.recover` with the producer state does.
    pub(super) fn load_producer_state(
        &mut self,
        rebuild_txn_index_from: Option<i64>,
    ) -> Result<(), StorageError> {
        let now = crate::segment::now_ms();
        let limit =
            rebuild_txn_index_from.map_or(self.log_end_offset, |b| b.min(self.log_end_offset));
        let from = self
            .producer_state
            .load(self.log_start_offset, limit, now)?;
        let bases: Vec<i64> = self.segments.keys().copied().collect();
        for base in bases {
            let seg = &self.segments[&base];
            if seg.next_offset() <= from {
                continue;
            }
            let rebuild = rebuild_txn_index_from.is_some_and(|b| base >= b);
            if rebuild {
                seg.txn_index().reset()?;
            }
            let mut pos = match seg.translate_offset(from)? {
                Some((pos, _)) => pos,
                None => continue,
            };
            while pos < self.segments[&base].size() {
                let seg = &self.segments[&base];
                let h = seg.read_header(pos)?;
                pos += h.size as u64;
                if h.last_offset < from {
                    continue;
                }
                let mut b = ProducerBatch::from_header(&h);
                if h.is_control() && h.producer_id >= 0 {
                    let bytes = seg.read_at(pos - h.size as u64, h.size)?;
                    b.marker = control_marker(&bytes);
                }
                let placed = [PlacedBatch {
                    batch: b,
                    base_offset: h.base_offset,
                    last_offset: h.last_offset,
                }];
                match self
                    .producer_state
                    .prepare(&placed, AppendOrigin::Replication)
                {
                    Ok(Prepared::Append(a)) => {
                        self.apply_producer_append(&a, base, h.last_offset + 1, rebuild)?
                    }
                    Ok(Prepared::Duplicate(_)) => {}
                    Err(e) => {
                        // The log holds it already; Kafka would fail the load, Strom keeps
                        // the state it has and says so.
                        tracing::warn!(dir = %self.dir.display(), offset = h.base_offset, "producer state replay: {e:?}");
                        self.producer_state.update_map_end_offset(h.last_offset + 1);
                    }
                }
            }
        }
        Ok(())
    }
}

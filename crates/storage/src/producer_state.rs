//! Idempotent-producer state of one partition: Kafka's `ProducerStateManager`,
//! `ProducerStateEntry` and `ProducerAppendInfo`.
//!
//! For every producer id the partition remembers its epoch and the metadata of its last
//! [`NUM_BATCHES_TO_RETAIN`] batches. A client batch that matches one of them is a retry of a
//! batch already in the log (answered with its original offsets, nothing written); one whose
//! first sequence does not follow the last is refused with OUT_OF_ORDER_SEQUENCE_NUMBER; an older
//! epoch is refused with INVALID_PRODUCER_EPOCH. Appends from replication update the state
//! without checks, so a follower has the same state when it becomes leader.
//!
//! The state is kept durable in `<offset>.snapshot` files in Kafka's ProducerSnapshot layout
//! (version 1, CRC32C), written when a segment rolls and at clean shutdown. Kafka's snapshot holds
//! only each producer's last batch; Strom writes one entry per retained batch, oldest first, so a
//! restarted broker still recognises a retry of any of the last five (Kafka's reader keeps the
//! newest entry, so the files stay readable by Kafka's tools).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::{Path, PathBuf};

use strom_protocol::batch::{first_sequence, last_sequence};
use strom_protocol::memory_records::{EndTxnMarker, TxnResult};

use crate::segment::BatchHeader;
use crate::verification::{VerificationGuard, VerificationStates};
use crate::{AppendOrigin, StorageError};

pub const NUM_BATCHES_TO_RETAIN: usize = 5;
pub const NO_PRODUCER_EPOCH: i16 = -1;
const SNAPSHOT_VERSION: i16 = 1;
const SNAPSHOT_SUFFIX: &str = ".snapshot";
/// Fixed size of one snapshot entry (Kafka's PRODUCER_SNAPSHOT_ENTRY_SCHEMA).
const ENTRY_SIZE: usize = 8 + 2 + 4 + 8 + 4 + 8 + 4 + 8;

/// One retained batch of a producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchMetadata {
    pub last_seq: i32,
    pub last_offset: i64,
    pub offset_delta: i32,
    pub timestamp: i64,
}

impl BatchMetadata {
    pub fn first_seq(&self) -> i32 {
        first_sequence(self.last_seq, self.offset_delta)
    }
    pub fn first_offset(&self) -> i64 {
        self.last_offset - self.offset_delta as i64
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerStateEntry {
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// Oldest first, at most [`NUM_BATCHES_TO_RETAIN`].
    pub batches: VecDeque<BatchMetadata>,
    pub coordinator_epoch: i32,
    /// Max timestamp of the last batch; drives `producer.id.expiration.ms`.
    pub last_timestamp: i64,
    pub current_txn_first_offset: Option<i64>,
}

impl ProducerStateEntry {
    fn empty(producer_id: i64) -> Self {
        Self {
            producer_id,
            producer_epoch: NO_PRODUCER_EPOCH,
            batches: VecDeque::new(),
            coordinator_epoch: -1,
            last_timestamp: -1,
            current_txn_first_offset: None,
        }
    }

    pub fn last_seq(&self) -> i32 {
        self.batches.back().map_or(-1, |b| b.last_seq)
    }

    pub fn last_data_offset(&self) -> i64 {
        self.batches.back().map_or(-1, |b| b.last_offset)
    }

    /// The retained batch with exactly this epoch and sequence range, if any.
    pub fn find_duplicate_batch(
        &self,
        epoch: i16,
        first_seq: i32,
        last_seq: i32,
    ) -> Option<BatchMetadata> {
        if epoch != self.producer_epoch {
            return None;
        }
        self.batches
            .iter()
            .find(|b| b.first_seq() == first_seq && b.last_seq == last_seq)
            .copied()
    }

    fn maybe_update_producer_epoch(&mut self, epoch: i16) {
        if epoch != self.producer_epoch {
            // A new epoch starts a new sequence space: older batches can never match again.
            self.batches.clear();
            self.producer_epoch = epoch;
        }
    }

    fn add_batch(&mut self, epoch: i16, meta: BatchMetadata) {
        self.maybe_update_producer_epoch(epoch);
        self.batches.push_back(meta);
        while self.batches.len() > NUM_BATCHES_TO_RETAIN {
            self.batches.pop_front();
        }
        self.last_timestamp = meta.timestamp;
    }
}

/// Why a client batch is refused; the broker maps each to its Kafka error code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProducerStateError {
    /// OUT_OF_ORDER_SEQUENCE_NUMBER (45).
    OutOfOrderSequence(String),
    /// INVALID_PRODUCER_EPOCH (47).
    InvalidProducerEpoch(String),
    /// INVALID_TXN_STATE (48): a non-transactional batch while the producer's transaction is
    /// open.
    InvalidTxnState(String),
    /// TRANSACTION_COORDINATOR_FENCED (52): a marker from an older coordinator epoch.
    TransactionCoordinatorFenced(String),
}

/// A transaction open in this partition (Kafka's `TxnMetadata`): its producer and its first
/// offset; `last_offset` is the marker's offset once it completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnMetadata {
    pub producer_id: i64,
    pub first_offset: i64,
    pub last_offset: Option<i64>,
}

/// A transaction ended by a marker (Kafka's `CompletedTxn`); `last_offset` is the marker's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompletedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    pub last_offset: i64,
    pub is_aborted: bool,
}

/// A batch with the offsets it has (or will have) in the log.
#[derive(Debug, Clone, Copy)]
pub struct PlacedBatch {
    pub batch: ProducerBatch,
    pub base_offset: i64,
    pub last_offset: i64,
}

/// What one append does to the producer state (Kafka's `ProducerAppendInfo`s of one append,
/// with their started and completed transactions), computed before anything is written.
#[derive(Debug, Default)]
pub struct ProducerAppend {
    updated: HashMap<i64, ProducerStateEntry>,
    started: Vec<TxnMetadata>,
    /// In log order.
    pub completed: Vec<CompletedTxn>,
    /// Producers with a transactional batch or marker in the append that ends their
    /// verification (if any) once it is written.
    verifications_ended: Vec<i64>,
}

/// The outcome of checking a client append.
#[derive(Debug)]
pub enum Prepared {
    /// The (single) batch repeats a retained one; nothing may be written.
    Duplicate(BatchMetadata),
    Append(ProducerAppend),
}

/// The sequence and epoch fields of one batch, as the state machine needs them.
#[derive(Debug, Clone, Copy)]
pub struct ProducerBatch {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub first_seq: i32,
    pub offset_delta: i32,
    pub max_timestamp: i64,
    pub is_control: bool,
    pub is_transactional: bool,
    /// The end-transaction marker of a control batch (`None`: not a marker, or empty).
    pub marker: Option<EndTxnMarker>,
}

impl ProducerBatch {
    pub fn last_seq(&self) -> i32 {
        last_sequence(self.first_seq, self.offset_delta)
    }

    pub fn from_header(h: &BatchHeader) -> Self {
        Self {
            producer_id: h.producer_id,
            producer_epoch: h.producer_epoch,
            first_seq: h.base_sequence,
            offset_delta: h.offset_delta(),
            max_timestamp: h.max_timestamp,
            is_control: h.is_control(),
            is_transactional: h.is_transactional(),
            marker: None,
        }
    }
}

fn in_sequence(last: i32, next: i32) -> bool {
    next as i64 == last as i64 + 1 || (next == 0 && last == i32::MAX)
}

/// Kafka's `checkProducerEpoch`: data batches and markers of transaction versions 0 and 1 may
/// carry the producer's epoch; a marker of version 2 must carry a newer one, except a retry of
/// the marker that already ended the transaction (same epoch, no transaction open: written
/// again, as Kafka does). Replication only logs.
fn check_producer_epoch(
    entry: &ProducerStateEntry,
    epoch: i16,
    offset: i64,
    origin: AppendOrigin,
    transaction_version: i16,
) -> Result<(), ProducerStateError> {
    let current = entry.producer_epoch;
    let invalid = if transaction_version >= 2 {
        epoch <= current
    } else {
        epoch < current
    };
    if invalid {
        if transaction_version >= 2 && epoch == current && entry.current_txn_first_offset.is_none()
        {
            tracing::info!(
                producer_id = entry.producer_id,
                epoch,
                "transaction marker retry of a completed transaction"
            );
            return Ok(());
        }
        let comparison = if transaction_version >= 2 { "<=" } else { "<" };
        let msg = format!(
            "Epoch of producer {} at offset {offset} is {epoch}, which is {comparison} the last seen epoch {current} (TV{transaction_version})",
            entry.producer_id
        );
        if origin == AppendOrigin::Replication {
            tracing::warn!("{msg}");
        } else {
            return Err(ProducerStateError::InvalidProducerEpoch(msg));
        }
    }
    Ok(())
}

/// Kafka's `appendEndTxnMarker`: checks the producer and coordinator epochs, then ends the
/// producer's transaction (if it has one: a marker of an empty transaction completes nothing).
fn append_end_txn_marker(
    entry: &mut ProducerStateEntry,
    b: &ProducerBatch,
    marker: EndTxnMarker,
    offset: i64,
    origin: AppendOrigin,
    transaction_version: i16,
) -> Result<Option<CompletedTxn>, ProducerStateError> {
    // Replication does not know the version (it is not in the batch): the lenient check.
    let version = if origin == AppendOrigin::Replication {
        0
    } else {
        transaction_version
    };
    check_producer_epoch(entry, b.producer_epoch, offset, origin, version)?;
    if entry.coordinator_epoch > marker.coordinator_epoch {
        if origin == AppendOrigin::Replication {
            tracing::info!(
                producer_id = entry.producer_id,
                offset,
                "marker coordinator epoch {} is older than the known {}",
                marker.coordinator_epoch,
                entry.coordinator_epoch
            );
        } else {
            return Err(ProducerStateError::TransactionCoordinatorFenced(format!(
                "Invalid coordinator epoch for producerId {} at offset {offset}: {} (zombie), {} (current)",
                entry.producer_id, marker.coordinator_epoch, entry.coordinator_epoch
            )));
        }
    }
    let completed = entry.current_txn_first_offset.map(|first| CompletedTxn {
        producer_id: entry.producer_id,
        first_offset: first,
        last_offset: offset,
        is_aborted: marker.result == TxnResult::Abort,
    });
    entry.maybe_update_producer_epoch(b.producer_epoch);
    entry.current_txn_first_offset = None;
    entry.coordinator_epoch = marker.coordinator_epoch;
    entry.last_timestamp = b.max_timestamp;
    Ok(completed)
}

pub struct ProducerStateManager {
    dir: PathBuf,
    producers: HashMap<i64, ProducerStateEntry>,
    /// Snapshot files by offset.
    snapshots: BTreeMap<i64, PathBuf>,
    /// The log offset up to which the state is built (exclusive).
    map_end_offset: i64,
    expiration_ms: i64,
    /// Open transactions by first offset (Kafka's `ongoingTxns`).
    ongoing_txns: BTreeMap<i64, TxnMetadata>,
    /// Completed transactions whose marker the high watermark has not passed yet, by first
    /// offset (Kafka's `unreplicatedTxns`): they still hold the LSO back.
    unreplicated_txns: BTreeMap<i64, TxnMetadata>,
    /// KIP-890 verifications under way (Kafka's `verificationStates`).
    verification: VerificationStates,
    /// Kafka's `transaction.partition.verification.enable` (the broker sets it): a client's
    /// transactional batch that opens a transaction must carry the producer's guard.
    verification_enabled: bool,
}

impl ProducerStateManager {
    pub fn new(dir: &Path, expiration_ms: i64) -> Result<Self, StorageError> {
        let mut snapshots = BTreeMap::new();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(offset) = parse_snapshot_name(&name) {
                snapshots.insert(offset, entry.path());
            }
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            producers: HashMap::new(),
            snapshots,
            map_end_offset: 0,
            expiration_ms,
            ongoing_txns: BTreeMap::new(),
            unreplicated_txns: BTreeMap::new(),
            verification: VerificationStates::default(),
            verification_enabled: false,
        })
    }

    pub fn producers(&self) -> &HashMap<i64, ProducerStateEntry> {
        &self.producers
    }

    pub fn map_end_offset(&self) -> i64 {
        self.map_end_offset
    }

    pub fn set_verification_enabled(&mut self, enabled: bool) {
        self.verification_enabled = enabled;
    }

    /// Whether `producer_id` has a transaction open here at `epoch` (Kafka's
    /// `hasOngoingTransaction`).
    pub fn has_ongoing_transaction(&self, producer_id: i64, epoch: i16) -> bool {
        self.producers
            .get(&producer_id)
            .is_some_and(|e| e.producer_epoch == epoch && e.current_txn_first_offset.is_some())
    }

    /// Kafka's `maybeStartTransactionVerification`: the sentinel when the producer's
    /// transaction is open here already (nothing to verify), else the guard of its
    /// verification, started now if none is under way (`supports_epoch_bump`: the produce is
    /// a transactions-v2 client's).
    pub fn maybe_start_transaction_verification(
        &mut self,
        producer_id: i64,
        sequence: i32,
        epoch: i16,
        supports_epoch_bump: bool,
        now_ms: i64,
    ) -> VerificationGuard {
        if self.has_ongoing_transaction(producer_id, epoch) {
            return VerificationGuard::SENTINEL;
        }
        self.verification
            .maybe_create(producer_id, sequence, epoch, supports_epoch_bump, now_ms)
            .guard
    }

    /// The producer's verification guard (the sentinel when none is under way).
    pub fn verification_guard(&self, producer_id: i64) -> VerificationGuard {
        self.verification.guard(producer_id)
    }

    pub fn set_expiration_ms(&mut self, ms: i64) {
        self.expiration_ms = ms;
    }

    pub fn snapshot_offsets(&self) -> Vec<i64> {
        self.snapshots.keys().copied().collect()
    }

    /// Loads the newest valid snapshot at or below `log_end_offset`, deleting any above it (they
    /// describe a tail that recovery cut off) and any that fail their CRC. Returns the offset
    /// from which the log must be replayed to finish rebuilding the state.
    pub fn load(
        &mut self,
        log_start_offset: i64,
        log_end_offset: i64,
        now_ms: i64,
    ) -> Result<i64, StorageError> {
        self.producers.clear();
        self.ongoing_txns.clear();
        self.unreplicated_txns.clear();
        self.verification.clear_all();
        let above: Vec<i64> = self
            .snapshots
            .range(log_end_offset + 1..)
            .map(|(o, _)| *o)
            .collect();
        for o in above {
            self.remove_snapshot(o)?;
        }
        while let Some((&offset, path)) = self.snapshots.iter().next_back() {
            match std::fs::read(path)
                .map_err(StorageError::from)
                .and_then(|b| read_snapshot(&b))
            {
                Ok(entries) => {
                    for e in entries {
                        if !self.is_expired(now_ms, &e) {
                            // Kafka's `loadProducerEntry`: an open transaction is ongoing again.
                            if let Some(first) = e.current_txn_first_offset {
                                self.ongoing_txns.insert(
                                    first,
                                    TxnMetadata {
                                        producer_id: e.producer_id,
                                        first_offset: first,
                                        last_offset: None,
                                    },
                                );
                            }
                            self.producers.insert(e.producer_id, e);
                        }
                    }
                    self.map_end_offset = offset.max(log_start_offset);
                    return Ok(self.map_end_offset);
                }
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "deleting unreadable producer snapshot");
                    self.remove_snapshot(offset)?;
                }
            }
        }
        self.map_end_offset = log_start_offset;
        Ok(log_start_offset)
    }

    /// The KIP-890 checks of one client data batch (Kafka's `batchMissingRequiredVerification`
    /// in `analyzeAndValidateProducerState` and the lowest-sequence check of
    /// `ProducerAppendInfo.checkSequence`).
    fn check_verification(
        &self,
        b: &ProducerBatch,
        request_guard: VerificationGuard,
    ) -> Result<(), ProducerStateError> {
        if let Some(v) = self.verification.get(b.producer_id) {
            if b.first_seq > v.lowest_sequence {
                return Err(ProducerStateError::OutOfOrderSequence(format!(
                    "Out of order sequence number for producer {}: {} (incoming seq. number), {} (earliest seen sequence)",
                    b.producer_id, b.first_seq, v.lowest_sequence
                )));
            }
        }
        if b.is_transactional
            && !self.has_ongoing_transaction(b.producer_id, b.producer_epoch)
            && !self.verification.guard(b.producer_id).verify(request_guard)
        {
            return Err(ProducerStateError::InvalidTxnState(
                "Record was not part of an ongoing transaction".to_string(),
            ));
        }
        Ok(())
    }

    fn is_expired(&self, now_ms: i64, e: &ProducerStateEntry) -> bool {
        e.current_txn_first_offset.is_none() && now_ms - e.last_timestamp >= self.expiration_ms
    }

    /// Checks an append batch by batch and computes what it changes (Kafka's
    /// `analyzeAndValidateProducerState` with one `ProducerAppendInfo` per producer). Client
    /// appends get every check; replication only logs fenced epochs (but, as Kafka, still refuses
    /// a non-transactional batch inside an open transaction).
    pub fn prepare(
        &self,
        batches: &[PlacedBatch],
        origin: AppendOrigin,
    ) -> Result<Prepared, ProducerStateError> {
        self.prepare_with_txn_version(batches, origin, 0)
    }

    /// [`Self::prepare`] with the transaction version of the markers being written
    /// (WriteTxnMarkers v2): from 2 on, a marker's producer epoch must be above the producer's
    /// (the coordinator bumped it), except a retry of the marker that ended the transaction.
    pub fn prepare_with_txn_version(
        &self,
        batches: &[PlacedBatch],
        origin: AppendOrigin,
        transaction_version: i16,
    ) -> Result<Prepared, ProducerStateError> {
        self.prepare_verified(
            batches,
            origin,
            transaction_version,
            VerificationGuard::SENTINEL,
        )
    }

    /// [`Self::prepare_with_txn_version`] of a client append that carries `request_guard`
    /// (KIP-890): with verification enabled, a client's transactional batch for a producer
    /// whose transaction is not open here is refused (INVALID_TXN_STATE) unless the guard is
    /// the one its verification was started with, and no batch may overtake the lowest
    /// sequence seen while verifying.
    pub fn prepare_verified(
        &self,
        batches: &[PlacedBatch],
        origin: AppendOrigin,
        transaction_version: i16,
        request_guard: VerificationGuard,
    ) -> Result<Prepared, ProducerStateError> {
        let mut append = ProducerAppend::default();
        for p in batches.iter().filter(|p| p.batch.producer_id >= 0) {
            let b = &p.batch;
            let current = self.producers.get(&b.producer_id);
            if origin == AppendOrigin::Client && append.updated.is_empty() {
                if let Some(dup) = current.and_then(|e| {
                    e.find_duplicate_batch(b.producer_epoch, b.first_seq, b.last_seq())
                }) {
                    return Ok(Prepared::Duplicate(dup));
                }
            }
            if b.is_transactional
                && !append.verifications_ended.contains(&b.producer_id)
                && self
                    .verification
                    .get(b.producer_id)
                    .is_some_and(|v| v.is_ended_by(b.is_control, b.producer_epoch))
            {
                append.verifications_ended.push(b.producer_id);
            }
            if origin == AppendOrigin::Client && self.verification_enabled && !b.is_control {
                self.check_verification(b, request_guard)?;
            }
            let entry = append.updated.entry(b.producer_id).or_insert_with(|| {
                current
                    .cloned()
                    .unwrap_or_else(|| ProducerStateEntry::empty(b.producer_id))
            });
            if b.is_control {
                let Some(marker) = b.marker else {
                    // An empty control batch (its transaction was cleaned away) or another
                    // control type: nothing for the producer state.
                    continue;
                };
                if let Some(done) = append_end_txn_marker(
                    entry,
                    b,
                    marker,
                    p.base_offset,
                    origin,
                    transaction_version,
                )? {
                    append.completed.push(done);
                }
                continue;
            }
            check_producer_epoch(entry, b.producer_epoch, p.base_offset, origin, 0)?;
            if origin == AppendOrigin::Client {
                let cur_epoch = entry.producer_epoch;
                let cur_last_seq = entry.last_seq();
                if b.producer_epoch != cur_epoch {
                    if b.first_seq != 0 && cur_epoch != NO_PRODUCER_EPOCH {
                        return Err(ProducerStateError::OutOfOrderSequence(format!(
                            "Invalid sequence number for new epoch of producer {}: {} (request epoch), {} (seq. number), {} (current producer epoch)",
                            b.producer_id, b.producer_epoch, b.first_seq, cur_epoch
                        )));
                    }
                } else if cur_epoch != NO_PRODUCER_EPOCH && !in_sequence(cur_last_seq, b.first_seq)
                {
                    // An unknown producer (state expired or removed with old segments) is
                    // accepted at any sequence, as Kafka does since KIP-360.
                    return Err(ProducerStateError::OutOfOrderSequence(format!(
                        "Out of order sequence number for producer {}: {} (incoming seq. number), {} (current end sequence number)",
                        b.producer_id, b.first_seq, cur_last_seq
                    )));
                }
            }
            entry.add_batch(
                b.producer_epoch,
                BatchMetadata {
                    last_seq: b.last_seq(),
                    last_offset: p.last_offset,
                    offset_delta: (p.last_offset - p.base_offset) as i32,
                    timestamp: b.max_timestamp,
                },
            );
            match entry.current_txn_first_offset {
                Some(_) if !b.is_transactional => {
                    return Err(ProducerStateError::InvalidTxnState(format!(
                        "Expected transactional write from producer {} at offset {}",
                        b.producer_id, p.base_offset
                    )));
                }
                None if b.is_transactional => {
                    entry.current_txn_first_offset = Some(p.base_offset);
                    append.started.push(TxnMetadata {
                        producer_id: b.producer_id,
                        first_offset: p.base_offset,
                        last_offset: None,
                    });
                }
                _ => {}
            }
        }
        Ok(Prepared::Append(append))
    }

    /// Checks a client append placed at the map end (tests): `Ok(Some(meta))` for a duplicate.
    #[cfg(test)]
    pub(crate) fn validate(
        &self,
        batches: &[ProducerBatch],
        origin: AppendOrigin,
    ) -> Result<Option<BatchMetadata>, ProducerStateError> {
        let mut next = self.map_end_offset;
        let placed: Vec<PlacedBatch> = batches
            .iter()
            .map(|b| {
                let base = next;
                next += b.offset_delta as i64 + 1;
                PlacedBatch {
                    batch: *b,
                    base_offset: base,
                    last_offset: next - 1,
                }
            })
            .collect();
        match self.prepare(&placed, origin)? {
            Prepared::Duplicate(d) => Ok(Some(d)),
            Prepared::Append(_) => Ok(None),
        }
    }

    /// Makes a prepared append the state (Kafka's `update(appendInfo)` for each producer): the
    /// producers' entries, and the transactions it started are ongoing. Its completed
    /// transactions are then finished one by one with [`Self::last_stable_offset_of`] and
    /// [`Self::complete_txn`], by the log, which indexes the aborted ones in between.
    pub fn apply(&mut self, append: &ProducerAppend) {
        for (id, e) in &append.updated {
            self.producers.insert(*id, e.clone());
        }
        // Written: the transaction is open (or over) in the log, the verification done with.
        for id in &append.verifications_ended {
            self.verification.clear(*id);
        }
        for t in &append.started {
            self.ongoing_txns.insert(t.first_offset, *t);
        }
    }

    /// Kafka's `updateMapEndOffset`: the state now covers the log below `offset`.
    pub fn update_map_end_offset(&mut self, offset: i64) {
        self.map_end_offset = offset;
    }

    /// Records a batch now in the log at `last_offset` as replication would (tests): completed
    /// transactions finished at once, none indexed.
    #[cfg(test)]
    pub(crate) fn update(&mut self, b: &ProducerBatch, last_offset: i64) {
        let placed = PlacedBatch {
            batch: *b,
            base_offset: last_offset - b.offset_delta as i64,
            last_offset,
        };
        match self.prepare(&[placed], AppendOrigin::Replication) {
            Ok(Prepared::Append(a)) => {
                self.apply(&a);
                for t in &a.completed {
                    self.complete_txn(t);
                }
            }
            Ok(Prepared::Duplicate(_)) => {}
            Err(e) => tracing::warn!("producer state not updated: {e:?}"),
        }
        self.map_end_offset = self.map_end_offset.max(last_offset + 1);
    }

    /// Kafka's `lastStableOffset(completedTxn)`: the LSO right after this transaction's marker:
    /// the first offset of the oldest transaction of another producer still open, else the
    /// offset after the marker. Called before [`Self::complete_txn`].
    pub fn last_stable_offset_of(&self, completed: &CompletedTxn) -> i64 {
        self.ongoing_txns
            .values()
            .find(|t| t.producer_id != completed.producer_id)
            .map_or(completed.last_offset + 1, |t| t.first_offset)
    }

    /// Kafka's `completeTxn`: the transaction stops being ongoing and waits, unreplicated, for
    /// the high watermark to pass its marker.
    pub fn complete_txn(&mut self, completed: &CompletedTxn) {
        match self.ongoing_txns.remove(&completed.first_offset) {
            Some(mut t) => {
                t.last_offset = Some(completed.last_offset);
                self.unreplicated_txns.insert(completed.first_offset, t);
            }
            None => tracing::warn!(
                producer_id = completed.producer_id,
                first_offset = completed.first_offset,
                "completed a transaction that was not ongoing"
            ),
        }
    }

    /// Kafka's `onHighWatermarkUpdated`: completed transactions whose marker is below the HW
    /// no longer hold the LSO back.
    pub fn on_high_watermark_updated(&mut self, high_watermark: i64) {
        self.remove_unreplicated_transactions(high_watermark);
    }

    /// Kafka's `onLogStartOffsetIncremented`.
    pub fn on_log_start_offset_incremented(&mut self, log_start_offset: i64) {
        self.remove_unreplicated_transactions(log_start_offset);
        self.map_end_offset = self.map_end_offset.max(log_start_offset);
    }

    fn remove_unreplicated_transactions(&mut self, offset: i64) {
        self.unreplicated_txns
            .retain(|_, t| t.last_offset.is_none_or(|last| last >= offset));
    }

    /// Kafka's `firstUndecidedOffset`: the first offset of the oldest open transaction.
    pub fn first_undecided_offset(&self) -> Option<i64> {
        self.ongoing_txns.keys().next().copied()
    }

    /// Kafka's `firstUnstableOffset`: the oldest first offset of an open transaction or of a
    /// completed one whose marker is not yet below the HW.
    pub fn first_unstable_offset(&self) -> Option<i64> {
        let unreplicated = self.unreplicated_txns.keys().next().copied();
        match (unreplicated, self.first_undecided_offset()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The open transactions, oldest first.
    pub fn ongoing_transactions(&self) -> impl Iterator<Item = &TxnMetadata> {
        self.ongoing_txns.values()
    }

    /// Writes `<map end offset>.snapshot` (atomically: temp file, fsync, rename).
    pub fn take_snapshot(&mut self) -> Result<(), StorageError> {
        let offset = self.map_end_offset;
        if self.snapshots.contains_key(&offset) {
            return Ok(());
        }
        let mut ids: Vec<&i64> = self.producers.keys().collect();
        ids.sort_unstable();
        let entries: Vec<&ProducerStateEntry> =
            ids.into_iter().map(|id| &self.producers[id]).collect();
        let bytes = write_snapshot(&entries);
        let path = self.dir.join(snapshot_file_name(offset));
        let tmp = self.dir.join(format!("{}.tmp", snapshot_file_name(offset)));
        std::fs::write(&tmp, &bytes)?;
        crate::slow_io::before_sync(&tmp);
        std::fs::File::open(&tmp)?.sync_all()?;
        std::fs::rename(&tmp, &path)?;
        self.snapshots.insert(offset, path);
        Ok(())
    }

    fn remove_snapshot(&mut self, offset: i64) -> Result<(), StorageError> {
        if let Some(path) = self.snapshots.remove(&offset) {
            match std::fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
                _ => {}
            }
        }
        Ok(())
    }

    /// Kafka's `removeAndMarkSnapshotForDeletion`: the snapshot at `offset` (of a segment the
    /// cleaner merged into an earlier one) leaves the manager and is renamed `.deleted`, for
    /// removal with the segment's files; the renamed path, if there was one.
    pub(crate) fn remove_and_mark_snapshot_for_deletion(
        &mut self,
        offset: i64,
    ) -> Result<Option<PathBuf>, StorageError> {
        let Some(path) = self.snapshots.remove(&offset) else {
            return Ok(None);
        };
        let mut to = path.clone().into_os_string();
        to.push(crate::DELETED_FILE_SUFFIX);
        let to = PathBuf::from(to);
        match std::fs::rename(&path, &to) {
            Ok(()) => Ok(Some(to)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Deletes snapshots below `offset` (the segments they belong to are gone).
    pub fn delete_snapshots_before(&mut self, offset: i64) -> Result<(), StorageError> {
        let old: Vec<i64> = self.snapshots.range(..offset).map(|(o, _)| *o).collect();
        for o in old {
            self.remove_snapshot(o)?;
        }
        Ok(())
    }

    /// Drops producers idle for `producer.id.expiration.ms`.
    pub fn remove_expired_producers(&mut self, now_ms: i64) -> usize {
        let before = self.producers.len();
        let expiration = self.expiration_ms;
        self.verification.remove_expired(now_ms, expiration);
        self.producers.retain(|_, e| {
            !(e.current_txn_first_offset.is_none() && now_ms - e.last_timestamp >= expiration)
        });
        before - self.producers.len()
    }
}

pub fn snapshot_file_name(offset: i64) -> String {
    format!("{offset:020}{SNAPSHOT_SUFFIX}")
}

fn parse_snapshot_name(name: &str) -> Option<i64> {
    let digits = name.strip_suffix(SNAPSHOT_SUFFIX)?;
    (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// Kafka's ProducerSnapshot v1: version i16, crc u32 (CRC32C of what follows), then an array
/// (i32 count) of entries.
pub fn write_snapshot(entries: &[&ProducerStateEntry]) -> Vec<u8> {
    let mut body = Vec::new();
    let count: usize = entries.iter().map(|e| e.batches.len().max(1)).sum();
    body.extend_from_slice(&(count as i32).to_be_bytes());
    for e in entries {
        // The newest entry carries the producer's last timestamp, as Kafka's only entry does
        // (a marker after the last batch moves it).
        let newest = e.batches.len().saturating_sub(1);
        let put = |body: &mut Vec<u8>, b: Option<&BatchMetadata>, i: usize| {
            let timestamp = match b {
                Some(b) if i != newest => b.timestamp,
                _ => e.last_timestamp,
            };
            body.extend_from_slice(&e.producer_id.to_be_bytes());
            body.extend_from_slice(&e.producer_epoch.to_be_bytes());
            body.extend_from_slice(&b.map_or(-1, |b| b.last_seq).to_be_bytes());
            body.extend_from_slice(&b.map_or(-1, |b| b.last_offset).to_be_bytes());
            body.extend_from_slice(&b.map_or(0, |b| b.offset_delta).to_be_bytes());
            body.extend_from_slice(&timestamp.to_be_bytes());
            body.extend_from_slice(&e.coordinator_epoch.to_be_bytes());
            body.extend_from_slice(&e.current_txn_first_offset.unwrap_or(-1).to_be_bytes());
        };
        if e.batches.is_empty() {
            put(&mut body, None, 0);
        }
        for (i, b) in e.batches.iter().enumerate() {
            put(&mut body, Some(b), i);
        }
    }
    let mut out = Vec::with_capacity(6 + body.len());
    out.extend_from_slice(&SNAPSHOT_VERSION.to_be_bytes());
    out.extend_from_slice(&crc32c::crc32c(&body).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

/// Parses a snapshot, merging the entries of one producer id back into its retained batches.
pub fn read_snapshot(bytes: &[u8]) -> Result<Vec<ProducerStateEntry>, StorageError> {
    let corrupt = |why: &str| StorageError::CorruptRecord(format!("producer snapshot: {why}"));
    if bytes.len() < 10 {
        return Err(corrupt("too short"));
    }
    let version = i16::from_be_bytes([bytes[0], bytes[1]]);
    if version != SNAPSHOT_VERSION {
        return Err(corrupt(&format!("unknown version {version}")));
    }
    let crc = u32::from_be_bytes(bytes[2..6].try_into().expect("4 bytes"));
    if crc32c::crc32c(&bytes[6..]) != crc {
        return Err(corrupt("CRC mismatch"));
    }
    let count = i32::from_be_bytes(bytes[6..10].try_into().expect("4 bytes"));
    let body = &bytes[10..];
    if count < 0 || body.len() != count as usize * ENTRY_SIZE {
        return Err(corrupt("entry count does not match the file size"));
    }
    let mut by_id: BTreeMap<i64, ProducerStateEntry> = BTreeMap::new();
    for chunk in body.chunks_exact(ENTRY_SIZE) {
        let i64_at = |at: usize| i64::from_be_bytes(chunk[at..at + 8].try_into().expect("8 bytes"));
        let i32_at = |at: usize| i32::from_be_bytes(chunk[at..at + 4].try_into().expect("4 bytes"));
        let producer_id = i64_at(0);
        let epoch = i16::from_be_bytes([chunk[8], chunk[9]]);
        let last_seq = i32_at(10);
        let last_offset = i64_at(14);
        let offset_delta = i32_at(22);
        let timestamp = i64_at(26);
        let coordinator_epoch = i32_at(34);
        let txn_first = i64_at(38);
        let e = by_id
            .entry(producer_id)
            .or_insert_with(|| ProducerStateEntry::empty(producer_id));
        e.coordinator_epoch = coordinator_epoch;
        e.current_txn_first_offset = (txn_first >= 0).then_some(txn_first);
        e.last_timestamp = timestamp;
        if last_offset >= 0 {
            e.add_batch(
                epoch,
                BatchMetadata {
                    last_seq,
                    last_offset,
                    offset_delta,
                    timestamp,
                },
            );
        } else {
            e.producer_epoch = epoch;
        }
    }
    Ok(by_id.into_values().collect())
}

#[cfg(test)]
#[path = "producer_state_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "producer_verification_tests.rs"]
mod verification_tests;

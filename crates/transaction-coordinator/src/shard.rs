//! One `__transaction_state` partition's transactional ids (Kafka's `TransactionStateManager`
//! for one partition) on the coordinator runtime.
//!
//! Every change is a record: an operation prepares the transition on a copy of the id's
//! metadata, checks it as Kafka's `completeTransitionTo` would, and returns the record; the
//! runtime replays it here at once and answers the caller when it is committed. Kafka's
//! *pending state* (a transition written but not yet replicated, during which other requests
//! for the id get CONCURRENT_TRANSACTIONS) is an entry whose record lies at or above the high
//! watermark. Reads (DescribeTransactions, ListTransactions, verification) see the committed
//! state, as Kafka's cache only holds completed transitions.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use strom_coordinator_common::runtime::{
    AfterCommit, CoordinatorError, CoordinatorShard, RawRecord, TopicPartition, WriteContext,
    WriteResult,
};
use strom_coordinator_common::timeline::{Timeline, TimelineMap};
use strom_coordinator_common::timer::{Clock, CoordinatorTimer, ShardContext, TimerResult};
use strom_protocol::memory_records::TxnResult;
use strom_protocol::ErrorCode;
use tokio::sync::mpsc;

use crate::config::TransactionCoordinatorConfig;
use crate::markers::TxnMarkerEntry;
use crate::metadata::{
    TransactionMetadata, TxnError, TxnTransitMetadata, NO_PRODUCER_EPOCH, NO_PRODUCER_ID,
};
use crate::records::TxnLogRecord;
use crate::state::{TransactionState, TransactionVersion};

const ABORT_TIMER_KEY: &str = "abort-timed-out-transactions";
const EXPIRE_TIMER_KEY: &str = "remove-expired-transactional-ids";

/// A transactional id's metadata and the offset of the record that made it.
#[derive(Debug, Clone)]
pub struct TxnEntry {
    pub metadata: TransactionMetadata,
    pub written_at: i64,
}

/// A transaction whose Prepare state is written: its markers are to be sent, then its
/// Complete state written (Kafka's `PendingCompleteTxn` with its `TxnMarkerEntry`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingCompletion {
    pub tp: TopicPartition,
    pub transactional_id: String,
    pub markers: TxnMarkerEntry,
}

/// What an operation that may need a new producer id answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Needs<T> {
    /// Ask the producer id source, then run the operation again with the id.
    ProducerId,
    Done(T),
}

/// InitProducerId's answer once its record is committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InitAnswer {
    Initialized {
        producer_id: i64,
        producer_epoch: i16,
    },
    /// The id had a transaction in progress: it is being aborted (the producer is fenced);
    /// the client gets CONCURRENT_TRANSACTIONS and retries.
    AbortingOngoing(PendingCompletion),
}

/// What an EndTxn asks.
#[derive(Debug, Clone)]
pub struct EndTxnArgs {
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub result: TxnResult,
    /// Transactions v2 (EndTxn v5+) or not.
    pub client_tv: TransactionVersion,
}

/// EndTxn's answer: the producer id and epoch the client continues with (transactions v2
/// bumps it) and, if a Prepare state was written, what remains to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndAnswer {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub completion: Option<PendingCompletion>,
}

pub type OpResult<T> = Result<WriteResult<TxnLogRecord, T>, CoordinatorError>;

fn err(code: ErrorCode, message: impl Into<String>) -> CoordinatorError {
    CoordinatorError::Operation {
        code,
        message: message.into(),
    }
}

fn txn_err(e: TxnError) -> CoordinatorError {
    if let TxnError::IllegalState(m) = &e {
        tracing::error!(message = %m, "transaction coordinator state error");
    }
    err(e.code(), e.to_string())
}

fn answer<T>(response: T) -> OpResult<T> {
    Ok(WriteResult {
        records: Vec::new(),
        response,
    })
}

pub struct TransactionShard {
    pub(crate) tp: TopicPartition,
    /// The leader epoch the shard was loaded at (the coordinator epoch of its markers).
    pub(crate) epoch: i32,
    pub(crate) config: Arc<TransactionCoordinatorConfig>,
    timer: CoordinatorTimer<TransactionShard>,
    clock: Arc<dyn Clock>,
    pub(crate) txns: TimelineMap<String, TxnEntry>,
    /// The high watermark: records below it are committed.
    committed: i64,
    /// Where transactions found in a Prepare state go to be completed.
    completions: mpsc::UnboundedSender<PendingCompletion>,
}

impl TransactionShard {
    pub fn new(
        ctx: ShardContext<TransactionShard>,
        config: Arc<TransactionCoordinatorConfig>,
        completions: mpsc::UnboundedSender<PendingCompletion>,
    ) -> Self {
        Self {
            tp: ctx.tp,
            epoch: ctx.epoch,
            config,
            timer: ctx.timer,
            clock: ctx.clock,
            txns: TimelineMap::new(),
            committed: 0,
            completions,
        }
    }

    fn now(&self) -> i64 {
        self.clock.now_ms()
    }

    fn is_pending(&self, e: &TxnEntry) -> bool {
        e.written_at >= self.committed
    }

    /// Kafka's `pendingTransitionInProgress`: a record not yet replicated, or a transaction in
    /// a Prepare state. Kafka marks CompleteCommit / CompleteAbort pending as soon as the
    /// Prepare record is written and until the Complete record is, while the markers are
    /// being written; requests for the id get CONCURRENT_TRANSACTIONS meanwhile.
    fn transition_in_progress(&self, e: &TxnEntry) -> bool {
        self.is_pending(e)
            || matches!(
                e.metadata.state,
                TransactionState::PrepareCommit | TransactionState::PrepareAbort
            )
    }

    fn record(&self, id: &str, t: TxnTransitMetadata) -> TxnLogRecord {
        TxnLogRecord {
            transactional_id: id.to_string(),
            value: Some(t),
            transaction_version_level: self.config.transaction_version_level,
        }
    }

    /// `md` (a copy) takes the transition `t` as the replay of its record will: checked
    /// as Kafka's `completeTransitionTo` checks it.
    fn check(md: &mut TransactionMetadata, t: &TxnTransitMetadata) -> Result<(), CoordinatorError> {
        md.complete_transition_to(t).map_err(txn_err)
    }

    /// The committed metadata of `id` (what reads see).
    pub fn committed_metadata(&self, id: &str, hw: i64) -> Option<&TransactionMetadata> {
        self.txns
            .get_committed(&id.to_string(), hw)
            .map(|e| &e.metadata)
    }

    /// Every committed transactional id's metadata.
    pub fn committed_all(&self, hw: i64) -> Vec<TransactionMetadata> {
        self.txns
            .committed_entries(hw)
            .into_iter()
            .map(|(_, e)| e.metadata)
            .collect()
    }

    /// The markers of a transaction just moved to a Prepare state (`md` after the move).
    fn completion_for(&self, md: &TransactionMetadata, epoch: i32) -> PendingCompletion {
        PendingCompletion {
            tp: self.tp.clone(),
            transactional_id: md.transactional_id.clone(),
            markers: TxnMarkerEntry {
                producer_id: md.producer_id,
                producer_epoch: md.producer_epoch,
                result: if md.state == TransactionState::PrepareCommit {
                    TxnResult::Commit
                } else {
                    TxnResult::Abort
                },
                coordinator_epoch: epoch,
                partitions: md.topic_partitions.iter().cloned().collect(),
                transaction_version: md.client_transaction_version.feature_level(),
            },
        }
    }

    /// Fences the producer of an Ongoing transaction and aborts it (Kafka: an epoch fence,
    /// then `endTransaction(ABORT, isFromClient = false)` at the cluster's transaction
    /// version). `md` is a copy; returns the PrepareAbort to write.
    fn fence_and_abort(
        &self,
        md: &mut TransactionMetadata,
        now: i64,
    ) -> Result<TxnTransitMetadata, CoordinatorError> {
        let fence = md.prepare_fence_producer_epoch().map_err(txn_err)?;
        md.pending_state = None;
        md.producer_epoch = fence.producer_epoch;
        md.last_producer_epoch = NO_PRODUCER_EPOCH;
        let server_tv = self.config.transaction_version_level;
        let tv = if server_tv.supports_epoch_bump() {
            server_tv
        } else {
            TransactionVersion::TV_0
        };
        let t = md
            .prepare_abort_or_commit(
                TransactionState::PrepareAbort,
                tv,
                NO_PRODUCER_ID,
                now,
                false,
            )
            .map_err(txn_err)?;
        Self::check(md, &t)?;
        Ok(t)
    }

    /// InitProducerId for a transactional id (Kafka's `handleInitProducerId` and
    /// `prepareInitProducerIdTransit`). `expected`: the producer id and epoch the request
    /// carried (KIP-360). `new_producer_id`: an id from the producer id source, when a
    /// previous run answered [`Needs::ProducerId`].
    pub fn init_producer_id(
        &mut self,
        ctx: &WriteContext,
        id: &str,
        txn_timeout_ms: i32,
        expected: Option<(i64, i16)>,
        new_producer_id: Option<i64>,
    ) -> OpResult<Needs<InitAnswer>> {
        let now = self.now();
        let mut md = match self.txns.get(&id.to_string()) {
            // Before the expected producer id is checked, as Kafka's
            // `prepareInitProducerIdTransit` does.
            Some(e) if self.transition_in_progress(e) => {
                return Err(err(
                    ErrorCode::ConcurrentTransactions,
                    "a transition is pending",
                ))
            }
            Some(e) => e.metadata.clone(),
            None => match new_producer_id {
                None => return answer(Needs::ProducerId),
                Some(pid) => TransactionMetadata::new(id, pid, txn_timeout_ms, now),
            },
        };
        let valid_expected = |(pid, epoch): (i64, i16)| {
            md.producer_epoch == NO_PRODUCER_EPOCH
                || pid == md.producer_id
                || (pid == md.prev_producer_id && crate::metadata::is_epoch_exhausted(epoch))
        };
        if !expected.is_none_or(valid_expected) {
            return Err(err(
                ErrorCode::ProducerFenced,
                "the expected producer id is not current",
            ));
        }
        use TransactionState::*;
        let t = match md.state {
            PrepareAbort | PrepareCommit => {
                return Err(err(
                    ErrorCode::ConcurrentTransactions,
                    "markers are being written",
                ))
            }
            CompleteAbort | CompleteCommit | Empty => {
                if md.is_producer_epoch_exhausted()
                    && expected.is_none_or(|(_, e)| e == md.producer_epoch)
                {
                    // The id keeps its metadata; only a fresh id for it is needed. (A new
                    // id's metadata has no epoch yet, so it is never exhausted.)
                    let Some(pid) = new_producer_id.filter(|p| *p != md.producer_id) else {
                        return answer(Needs::ProducerId);
                    };
                    md.prepare_producer_id_rotation(pid, txn_timeout_ms, now, expected.is_some())
                        .map_err(txn_err)?
                } else {
                    md.prepare_increment_producer_epoch(txn_timeout_ms, expected.map(|e| e.1), now)
                        .map_err(txn_err)?
                }
            }
            Ongoing => {
                let t = self.fence_and_abort(&mut md, now)?;
                let completion = self.completion_for(&md, ctx.epoch);
                return Ok(WriteResult {
                    records: vec![self.record(id, t)],
                    response: Needs::Done(InitAnswer::AbortingOngoing(completion)),
                });
            }
            Dead | PrepareEpochFence => {
                return Err(txn_err(TxnError::IllegalState(format!(
                    "{id} found in state {:?}",
                    md.state
                ))))
            }
        };
        Self::check(&mut md, &t)?;
        Ok(WriteResult {
            response: Needs::Done(InitAnswer::Initialized {
                producer_id: t.producer_id,
                producer_epoch: t.producer_epoch,
            }),
            records: vec![self.record(id, t)],
        })
    }

    /// AddPartitionsToTxn / AddOffsetsToTxn (Kafka's `handleAddPartitionsToTransaction`).
    pub fn add_partitions(
        &mut self,
        id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &std::collections::BTreeSet<(String, i32)>,
        client_tv: TransactionVersion,
    ) -> OpResult<()> {
        let Some(e) = self.txns.get(&id.to_string()) else {
            return Err(err(
                ErrorCode::InvalidProducerIdMapping,
                "unknown transactional id",
            ));
        };
        let mut md = e.metadata.clone();
        if md.producer_id != producer_id {
            return Err(err(
                ErrorCode::InvalidProducerIdMapping,
                "another producer id",
            ));
        }
        if md.producer_epoch != producer_epoch {
            return Err(err(ErrorCode::ProducerFenced, "another producer epoch"));
        }
        if self.is_pending(e) {
            return Err(err(
                ErrorCode::ConcurrentTransactions,
                "a transition is pending",
            ));
        }
        if matches!(
            md.state,
            TransactionState::PrepareCommit | TransactionState::PrepareAbort
        ) {
            return Err(err(
                ErrorCode::ConcurrentTransactions,
                "markers are being written",
            ));
        }
        if md.state == TransactionState::Ongoing && partitions.is_subset(&md.topic_partitions) {
            return answer(());
        }
        let t = md
            .prepare_add_partitions(partitions, self.now(), client_tv)
            .map_err(txn_err)?;
        Self::check(&mut md, &t)?;
        Ok(WriteResult {
            records: vec![self.record(id, t)],
            response: (),
        })
    }

    /// EndTxn (Kafka's `endTransaction`, transactions v1 and v2).
    pub fn end_txn(
        &mut self,
        ctx: &WriteContext,
        req: &EndTxnArgs,
        new_producer_id: Option<i64>,
    ) -> OpResult<Needs<EndAnswer>> {
        use TransactionState::*;
        let EndTxnArgs {
            transactional_id: id,
            producer_id,
            producer_epoch,
            result,
            client_tv,
        } = req;
        let (id, producer_id, producer_epoch, result, client_tv) = (
            id.as_str(),
            *producer_id,
            *producer_epoch,
            *result,
            *client_tv,
        );
        let invalid_state = |md: &TransactionMetadata| {
            tracing::warn!(
                transactional_id = id,
                state = ?md.state,
                ?result,
                "EndTxn does not fit the transaction's state"
            );
            Err(err(
                ErrorCode::InvalidTxnState,
                format!("{:?} in {:?}", result, md.state),
            ))
        };
        let Some(e) = self.txns.get(&id.to_string()) else {
            return Err(err(
                ErrorCode::InvalidProducerIdMapping,
                "unknown transactional id",
            ));
        };
        let pending = self.transition_in_progress(e);
        let mut md = e.metadata.clone();
        let now = self.now();
        let commit = result == TxnResult::Commit;
        let v2 = client_tv.supports_epoch_bump();
        let mut no_partition_added = false;
        let next_state = if commit { PrepareCommit } else { PrepareAbort };

        if !v2 {
            if md.producer_id != producer_id {
                return Err(err(
                    ErrorCode::InvalidProducerIdMapping,
                    "another producer id",
                ));
            }
            // A client's EndTxn never bumps the epoch: strict equality.
            if producer_epoch != md.producer_epoch {
                return Err(err(ErrorCode::ProducerFenced, "another producer epoch"));
            }
            if pending {
                return Err(err(
                    ErrorCode::ConcurrentTransactions,
                    "a transition is pending",
                ));
            }
            match md.state {
                Ongoing => {}
                CompleteCommit if commit => return answer(Needs::Done(self.unchanged(&md))),
                CompleteAbort if !commit => return answer(Needs::Done(self.unchanged(&md))),
                PrepareCommit if commit => {
                    return Err(err(ErrorCode::ConcurrentTransactions, "committing"))
                }
                PrepareAbort if !commit => {
                    return Err(err(ErrorCode::ConcurrentTransactions, "aborting"))
                }
                Dead | PrepareEpochFence => {
                    return Err(txn_err(TxnError::IllegalState(format!(
                        "{id} found in state {:?}",
                        md.state
                    ))))
                }
                _ => return invalid_state(&md),
            }
            let t = md
                .prepare_abort_or_commit(
                    next_state,
                    TransactionVersion::TV_0,
                    NO_PRODUCER_ID,
                    now,
                    false,
                )
                .map_err(txn_err)?;
            return self.prepared(ctx, id, md, t, true);
        }

        // Transactions v2: while the previous transaction's markers are written, every EndTxn
        // waits, before its producer id and epoch are looked at (Kafka's `endTransaction`
        // since KAFKA-18464): an EndTxn with the epoch the previous one returned (an empty
        // abort, or the next transaction's end) is not a stale producer.
        if pending {
            return Err(err(
                ErrorCode::ConcurrentTransactions,
                "a transition is pending",
            ));
        }
        // The epoch was bumped by the previous EndTxn, so a retry carries the epoch before it
        // (or the last epoch of an overflowed producer id).
        let retry_on_overflow = md.prev_producer_id == producer_id
            && producer_epoch == i16::MAX - 1
            && md.producer_epoch == 0;
        let retry_on_epoch_bump = md.producer_epoch == producer_epoch.wrapping_add(1);
        let valid_epoch = match md.state {
            Ongoing | Empty | Dead | PrepareEpochFence => producer_epoch == md.producer_epoch,
            PrepareCommit | PrepareAbort => retry_on_epoch_bump,
            CompleteCommit | CompleteAbort => {
                retry_on_epoch_bump || retry_on_overflow || producer_epoch == md.producer_epoch
            }
        };
        let is_retry = retry_on_epoch_bump || retry_on_overflow;
        if md.producer_id != producer_id && !retry_on_overflow {
            return Err(err(
                ErrorCode::InvalidProducerIdMapping,
                "another producer id",
            ));
        }
        if !valid_epoch {
            return Err(err(ErrorCode::ProducerFenced, "another producer epoch"));
        }
        let next_state = match md.state {
            Ongoing => next_state,
            CompleteCommit if commit && is_retry => {
                return answer(Needs::Done(self.unchanged(&md)))
            }
            CompleteCommit if !commit && !is_retry => {
                no_partition_added = true;
                PrepareAbort
            }
            CompleteAbort if !commit && is_retry => {
                return answer(Needs::Done(self.unchanged(&md)))
            }
            CompleteAbort if !commit => {
                no_partition_added = true;
                PrepareAbort
            }
            PrepareCommit if commit => {
                return Err(err(ErrorCode::ConcurrentTransactions, "committing"))
            }
            PrepareAbort if !commit => {
                return Err(err(ErrorCode::ConcurrentTransactions, "aborting"))
            }
            Empty if !commit => {
                no_partition_added = true;
                PrepareAbort
            }
            Dead | PrepareEpochFence => {
                return Err(txn_err(TxnError::IllegalState(format!(
                    "{id} found in state {:?}",
                    md.state
                ))))
            }
            _ => return invalid_state(&md),
        };
        // The last epoch of this producer id: the next one continues on a new id.
        let next_producer_id = if md.is_producer_epoch_exhausted() {
            match new_producer_id {
                None => return answer(Needs::ProducerId),
                Some(p) => p,
            }
        } else {
            NO_PRODUCER_ID
        };
        let t = md
            .prepare_abort_or_commit(
                next_state,
                client_tv,
                next_producer_id,
                now,
                no_partition_added,
            )
            .map_err(txn_err)?;
        self.prepared(ctx, id, md, t, false)
    }

    /// EndTxn's answer when nothing is to be written (a retry of an EndTxn that completed).
    fn unchanged(&self, md: &TransactionMetadata) -> EndAnswer {
        EndAnswer {
            producer_id: md.producer_id,
            producer_epoch: md.producer_epoch,
            completion: None,
        }
    }

    /// A Prepare state to write: the record, the markers to send after it, and the producer
    /// id and epoch the client gets (transactions v2: those of the Complete state to come).
    fn prepared(
        &self,
        ctx: &WriteContext,
        id: &str,
        mut md: TransactionMetadata,
        t: TxnTransitMetadata,
        v1: bool,
    ) -> OpResult<Needs<EndAnswer>> {
        Self::check(&mut md, &t)?;
        let completion = self.completion_for(&md, ctx.epoch);
        let (producer_id, producer_epoch) = if v1 {
            (NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
        } else {
            let mut after = md.clone();
            let c = after.prepare_complete(self.now()).map_err(txn_err)?;
            (c.producer_id, c.producer_epoch)
        };
        Ok(WriteResult {
            records: vec![self.record(id, t)],
            response: Needs::Done(EndAnswer {
                producer_id,
                producer_epoch,
                completion: Some(completion),
            }),
        })
    }

    /// Every marker of `c` is written: CompleteCommit / CompleteAbort (Kafka's
    /// `TransactionMarkerChannelManager.writeTxnCompletion`). Refused if the transaction is
    /// no longer the one the markers were for.
    pub fn complete(&mut self, ctx: &WriteContext, c: &PendingCompletion) -> OpResult<()> {
        if ctx.epoch != c.markers.coordinator_epoch {
            return Err(CoordinatorError::NotCoordinator(self.tp.clone()));
        }
        let Some(e) = self.txns.get(&c.transactional_id) else {
            return Err(err(
                ErrorCode::InvalidProducerIdMapping,
                "the transaction is gone",
            ));
        };
        let mut md = e.metadata.clone();
        let expected = match c.markers.result {
            TxnResult::Commit => TransactionState::PrepareCommit,
            TxnResult::Abort => TransactionState::PrepareAbort,
        };
        if md.state != expected
            || md.producer_id != c.markers.producer_id
            || md.producer_epoch != c.markers.producer_epoch
        {
            return Err(err(
                ErrorCode::InvalidTxnState,
                format!("{} moved on to {:?}", c.transactional_id, md.state),
            ));
        }
        let t = md.prepare_complete(self.now()).map_err(txn_err)?;
        Self::check(&mut md, &t)?;
        Ok(WriteResult {
            records: vec![self.record(&c.transactional_id, t)],
            response: (),
        })
    }

    /// Aborts every transaction past its timeout (Kafka's `abortTimedOutTransactions`,
    /// fencing the producer with an epoch bump), then sets the next check.
    fn abort_timed_out(
        &mut self,
        ctx: &WriteContext,
    ) -> Result<TimerResult<TxnLogRecord>, CoordinatorError> {
        schedule_abort(self);
        let now = self.now();
        let mut records = Vec::new();
        let mut completions = Vec::new();
        let timed_out: Vec<TransactionMetadata> = self
            .txns
            .iter()
            .filter(|(_, e)| {
                e.metadata.state == TransactionState::Ongoing
                    && !self.is_pending(e)
                    && e.metadata.txn_start_timestamp + i64::from(e.metadata.txn_timeout_ms) < now
            })
            .map(|(_, e)| e.metadata.clone())
            .collect();
        for mut md in timed_out {
            match self.fence_and_abort(&mut md, now) {
                Ok(t) => {
                    tracing::info!(
                        transactional_id = %md.transactional_id,
                        producer_id = md.producer_id,
                        "aborting a transaction past its timeout"
                    );
                    completions.push(self.completion_for(&md, ctx.epoch));
                    records.push(self.record(&md.transactional_id, t));
                }
                Err(e) => {
                    tracing::warn!(transactional_id = %md.transactional_id, error = %e, "could not abort a timed-out transaction")
                }
            }
        }
        Ok(WriteResult {
            records,
            response: self.after_commit_complete(completions),
        })
    }

    /// Once the Prepare records are committed, their markers go out.
    fn after_commit_complete(&self, completions: Vec<PendingCompletion>) -> Option<AfterCommit> {
        if completions.is_empty() {
            return None;
        }
        let tx = self.completions.clone();
        Some(Box::new(move |r: Result<(), CoordinatorError>| {
            if r.is_ok() {
                for c in completions {
                    let _ = tx.send(c);
                }
            }
        }))
    }

    /// Removes transactional ids idle past `transactional.id.expiration.ms` (Kafka's
    /// `removeExpiredTransactionalIds`): a tombstone each.
    fn remove_expired(&mut self) -> Result<TimerResult<TxnLogRecord>, CoordinatorError> {
        schedule_expire(self);
        let now = self.now();
        let expiration = self.config.transactional_id_expiration_ms;
        let mut records = Vec::new();
        let expired: Vec<TransactionMetadata> = self
            .txns
            .iter()
            .filter(|(_, e)| {
                e.metadata.state.is_expiration_allowed()
                    && !self.is_pending(e)
                    && e.metadata.txn_last_update_timestamp <= now - expiration
            })
            .map(|(_, e)| e.metadata.clone())
            .collect();
        for mut md in expired {
            if md.prepare_dead().is_ok() {
                tracing::info!(transactional_id = %md.transactional_id, "transactional id expired");
                records.push(TxnLogRecord {
                    transactional_id: md.transactional_id.clone(),
                    value: None,
                    transaction_version_level: self.config.transaction_version_level,
                });
            }
        }
        Ok(WriteResult {
            records,
            response: None,
        })
    }
}

fn schedule_abort(s: &TransactionShard) {
    let every = s.config.abort_timed_out_transactions_interval_ms.max(1) as u64;
    s.timer.schedule(
        ABORT_TIMER_KEY,
        Duration::from_millis(every),
        |s: &mut TransactionShard, ctx| s.abort_timed_out(ctx),
    );
}

fn schedule_expire(s: &TransactionShard) {
    let every = s.config.remove_expired_transactional_ids_interval_ms.max(1) as u64;
    s.timer.schedule(
        EXPIRE_TIMER_KEY,
        Duration::from_millis(every),
        |s: &mut TransactionShard, _| s.remove_expired(),
    );
}

impl Timeline for TransactionShard {
    fn revert_to(&mut self, offset: i64) {
        self.txns.revert_to(offset);
    }

    fn commit(&mut self, committed: i64) {
        self.committed = self.committed.max(committed);
        self.txns.commit(committed);
    }
}

impl CoordinatorShard for TransactionShard {
    type Record = TxnLogRecord;

    fn replay(&mut self, offset: i64, r: &TxnLogRecord) {
        let id = r.transactional_id.clone();
        match &r.value {
            None => {
                self.txns.remove(offset, &id);
            }
            Some(t) => {
                let metadata = TransactionMetadata::from_transit(&id, t);
                self.txns.insert(
                    offset,
                    id,
                    TxnEntry {
                        metadata,
                        written_at: offset,
                    },
                );
            }
        }
    }

    fn serialize(r: &TxnLogRecord) -> Result<RawRecord, CoordinatorError> {
        r.encode()
            .map_err(|e| err(ErrorCode::UnknownServerError, e.to_string()))
    }

    fn deserialize(key: &Bytes, value: Option<&Bytes>) -> Option<TxnLogRecord> {
        match TxnLogRecord::decode(key, value.map(|v| &v[..])) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "unreadable __transaction_state record skipped");
                None
            }
        }
    }

    /// Transactions loaded in a Prepare state get their markers (again) and are completed;
    /// the timers start.
    fn on_loaded(&mut self) {
        let pending: Vec<PendingCompletion> = self
            .txns
            .iter()
            .filter(|(_, e)| {
                matches!(
                    e.metadata.state,
                    TransactionState::PrepareCommit | TransactionState::PrepareAbort
                )
            })
            .map(|(_, e)| self.completion_for(&e.metadata, self.epoch))
            .collect();
        for c in pending {
            tracing::info!(transactional_id = %c.transactional_id, result = ?c.markers.result, "completing a transaction found prepared at load");
            let _ = self.completions.send(c);
        }
        schedule_abort(self);
        schedule_expire(self);
    }
}

//! The coordinator runtime (Kafka's `CoordinatorRuntime`).
//!
//! One [`CoordinatorShard`] per internal partition this broker leads, owned by one task: every
//! event of that partition (a write, a read, a timer, a high-watermark advance, unloading) goes
//! through its queue and runs alone, so a shard never needs a lock and two events of a
//! partition never interleave. Shards of different partitions run in parallel.
//!
//! A **write** runs an operation against the shard's latest state; the operation returns
//! records and a response. The runtime replays the records into the shard at once (tagged with
//! the offsets they will get, so the next write sees them), appends them as one batch through
//! the [`PartitionWriter`] — the broker's leader append with origin Coordinator, at the leader
//! epoch the shard was loaded with — and holds the response until the partition's high
//! watermark passes the batch. If the append fails, the shard is reverted to the batch's base
//! offset ([`crate::timeline`]) and the caller gets the error. A **read** sees the state as of
//! the high watermark.
//!
//! **Lifecycle**: [`CoordinatorRuntime::schedule_load`] on becoming leader of a partition
//! (the shard is rebuilt by replaying the partition from its log start; requests meanwhile get
//! COORDINATOR_LOAD_IN_PROGRESS), [`CoordinatorRuntime::schedule_unload`] on losing it (the
//! shard is dropped, pending responses and later requests get NOT_COORDINATOR). An append that
//! lands at another offset than the shard expected (someone else wrote to the partition: a
//! client allowed to produce to internal topics) fails its write with NOT_COORDINATOR and
//! reloads the shard from the log at the same epoch, the foreign batch replayed if its records
//! parse and skipped otherwise, as Kafka's runtime goes FAILED then LOADING.
//!
//! **Transactional writes** ([`CoordinatorRuntime::transactional_write`], Kafka's
//! `scheduleTransactionalWriteOperation`): the records of a write made for a producer's
//! transaction (TxnOffsetCommit) are appended as one transactional batch of that producer and
//! replayed with it ([`CoordinatorShard::replay_transactional`]), so the shard keeps them
//! pending. [`CoordinatorRuntime::schedule_transaction_completion`] (Kafka's
//! `scheduleTransactionCompletion`, for WriteTxnMarkers) replays the end-transaction marker
//! into the shard ([`CoordinatorShard::replay_end_transaction_marker`]), appends it after
//! everything written before, and completes once the high watermark passes it. Loading hands
//! the shard every record with its batch's producer and every marker in log order
//! ([`CoordinatorLoader::load_records`]), so pending, committed and aborted transactional
//! state comes back exactly as it was.
//!
//! **Write timeout** ([`CoordinatorRuntime::set_write_timeout`], the group coordinator's
//! `offsets.commit.timeout.ms`): a write whose records are not committed within it answers
//! COORDINATOR_NOT_AVAILABLE, as Kafka's runtime fails the write with a timeout that the
//! coordinators normalise so. Its records stay in the log and in the shard, as Kafka's do: the
//! caller only stops waiting (a high watermark held back by slow followers must not hang a
//! client's commit).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use strom_protocol::memory_records::EndTxnMarker;
pub use strom_protocol::memory_records::TxnResult;
use strom_protocol::ErrorCode;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::timeline::Timeline;
use crate::timer::{Clock, CoordinatorTimer, ShardContext, TokioClock};

/// An internal topic partition: (topic, partition).
pub type TopicPartition = (String, i32);

/// One record as appended: key, and value (`None` = tombstone).
pub type RawRecord = (Bytes, Option<Bytes>);

/// Why a coordinator request did not succeed, mapped to the code Kafka's coordinators answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CoordinatorError {
    /// This broker does not (or no longer) lead the partition.
    #[error("not the coordinator for {0:?}")]
    NotCoordinator(TopicPartition),
    /// The partition is being replayed.
    #[error("coordinator for {0:?} is loading")]
    LoadInProgress(TopicPartition),
    /// The append failed for a reason the client may retry on another attempt (not enough
    /// replicas, timed out): Kafka answers COORDINATOR_NOT_AVAILABLE.
    #[error("coordinator not available: {0}")]
    NotAvailable(String),
    /// An error of the operation itself, with the code to answer.
    #[error("{code:?}: {message}")]
    Operation { code: ErrorCode, message: String },
}

impl CoordinatorError {
    /// The code a response carries for this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            CoordinatorError::NotCoordinator(_) => ErrorCode::NotCoordinator,
            CoordinatorError::LoadInProgress(_) => ErrorCode::CoordinatorLoadInProgress,
            CoordinatorError::NotAvailable(_) => ErrorCode::CoordinatorNotAvailable,
            CoordinatorError::Operation { code, .. } => *code,
        }
    }

    /// How Kafka's coordinators translate a failed append of their records
    /// (`GroupCoordinatorService` / `TransactionCoordinator` normalisation): leadership or
    /// storage lost means the client must find the coordinator again; a temporary shortage of
    /// replicas or a timeout means retry; a batch too large is the server's own fault.
    pub fn from_append(tp: &TopicPartition, e: &WriteError) -> Self {
        match e.code {
            ErrorCode::NotLeaderOrFollower
            | ErrorCode::KafkaStorageError
            | ErrorCode::FencedLeaderEpoch
            | ErrorCode::UnknownLeaderEpoch => CoordinatorError::NotCoordinator(tp.clone()),
            ErrorCode::UnknownTopicOrPartition
            | ErrorCode::NotEnoughReplicas
            | ErrorCode::NotEnoughReplicasAfterAppend
            | ErrorCode::RequestTimedOut => CoordinatorError::NotAvailable(e.message.clone()),
            _ => CoordinatorError::Operation {
                code: ErrorCode::UnknownServerError,
                message: e.message.clone(),
            },
        }
    }
}

/// A failed append or load, as the broker reports it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code:?}: {message}")]
pub struct WriteError {
    pub code: ErrorCode,
    pub message: String,
}

/// Where an append landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendResult {
    pub base_offset: i64,
    pub last_offset: i64,
    /// The partition's high watermark right after the append (with one replica, or when the
    /// followers were already caught up, it may already pass the batch).
    pub high_watermark: i64,
}

/// The producer a transactional batch or marker belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TxnProducer {
    pub producer_id: i64,
    pub producer_epoch: i16,
}

/// What a writer answers for the transactional appends it does not make (a partition whose
/// coordinator never writes transactionally, e.g. a test writer).
fn no_transactional_appends(tp: &TopicPartition) -> WriteError {
    WriteError {
        code: ErrorCode::UnknownServerError,
        message: format!(
            "the partition writer of {}-{} does not append transactional batches",
            tp.0, tp.1
        ),
    }
}

/// The runtime's narrow way into the broker's partitions.
pub trait PartitionWriter: Send + Sync + 'static {
    /// Appends `records` as one batch to `tp` as its leader with origin Coordinator, refused
    /// unless this broker still leads it at `leader_epoch`.
    fn append(
        &self,
        tp: &TopicPartition,
        leader_epoch: i32,
        records: &[RawRecord],
    ) -> Result<AppendResult, WriteError>;

    /// As [`Self::append`], as one transactional batch of `producer` (Kafka's runtime builds
    /// it with the producer's id and epoch, base sequence 0 and the transactional attribute).
    /// Only coordinators that write for transactions (the group coordinator's TxnOffsetCommit)
    /// need it.
    fn append_transactional(
        &self,
        tp: &TopicPartition,
        _leader_epoch: i32,
        _producer: TxnProducer,
        _records: &[RawRecord],
    ) -> Result<AppendResult, WriteError> {
        Err(no_transactional_appends(tp))
    }

    /// Appends the control batch that ends `producer`'s transaction in `tp` with `result`,
    /// carrying the transaction coordinator's `coordinator_epoch` (Kafka's
    /// `MemoryRecords.withEndTransactionMarker`), as leader at `leader_epoch`.
    fn append_end_txn_marker(
        &self,
        tp: &TopicPartition,
        _leader_epoch: i32,
        _producer: TxnProducer,
        _coordinator_epoch: i32,
        _result: TxnResult,
    ) -> Result<AppendResult, WriteError> {
        Err(no_transactional_appends(tp))
    }
}

/// One entry of a partition as loading reads it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadedRecord {
    /// A record of a data batch; `producer` is the batch's when it has a producer id (the
    /// coordinators write transactional batches only; their own batches have none).
    Record {
        offset: i64,
        producer: Option<TxnProducer>,
        key: Bytes,
        value: Option<Bytes>,
    },
    /// An end-transaction marker (a control batch) of `producer`.
    EndTxnMarker {
        offset: i64,
        producer: TxnProducer,
        marker: EndTxnMarker,
    },
}

/// Reads a partition from its log start for loading (blocking I/O: run off the async
/// threads). Calls `sink(offset, key, value)` per record in offset order and returns the log
/// end offset and high watermark it read up to.
pub trait CoordinatorLoader: Send + Sync + 'static {
    fn load(
        &self,
        tp: &TopicPartition,
        leader_epoch: i32,
        sink: &mut dyn FnMut(i64, Bytes, Option<Bytes>),
    ) -> Result<AppendResult, WriteError>;

    /// What the runtime loads with: every record with its batch's producer and every
    /// end-transaction marker, in offset order (Kafka's loader hands the shard both). A
    /// partition never written transactionally has neither: by default, what [`Self::load`]
    /// reads, without producers.
    fn load_records(
        &self,
        tp: &TopicPartition,
        leader_epoch: i32,
        sink: &mut dyn FnMut(LoadedRecord),
    ) -> Result<AppendResult, WriteError> {
        self.load(tp, leader_epoch, &mut |offset, key, value| {
            sink(LoadedRecord::Record {
                offset,
                producer: None,
                key,
                value,
            })
        })
    }
}

/// A coordinator's state for one partition, built from its records.
pub trait CoordinatorShard: Timeline + Send + 'static {
    type Record: Send + 'static;

    /// Applies one record at `offset` (from a write of this shard, or from loading).
    fn replay(&mut self, offset: i64, record: &Self::Record);

    /// Applies one record of `producer`'s transaction at `offset` (Kafka's `replay` with a
    /// producer id): it stays pending until the marker. A shard that never writes
    /// transactionally treats it as any record.
    fn replay_transactional(&mut self, offset: i64, _producer: TxnProducer, record: &Self::Record) {
        self.replay(offset, record)
    }

    /// Applies the end-transaction marker of `producer` at `offset` (Kafka's
    /// `replayEndTransactionMarker`): a commit makes its pending records take effect, an abort
    /// drops them. Nothing to do for a shard without transactional records.
    fn replay_end_transaction_marker(
        &mut self,
        _offset: i64,
        _producer: TxnProducer,
        _result: TxnResult,
    ) {
    }

    /// The records in the form they are appended (an error fails the write that made them,
    /// with the code it carries).
    fn serialize(record: &Self::Record) -> Result<RawRecord, CoordinatorError>;

    /// A stored record, or `None` for one this coordinator does not know (skipped, as Kafka
    /// skips unknown record types when loading).
    fn deserialize(key: &Bytes, value: Option<&Bytes>) -> Option<Self::Record>;

    /// The partition has been replayed and the shard starts serving (Kafka's `onLoaded`):
    /// the place to set the timers the loaded state needs (session expiry of the members it
    /// knows, offset expiry).
    fn on_loaded(&mut self) {}
}

/// What a write returns: the records to append and the response to give once they are
/// committed.
pub struct WriteResult<R, T> {
    pub records: Vec<R>,
    pub response: T,
}

/// What runs once a write's records are committed (`Ok`) or failed.
pub type AfterCommit = Box<dyn FnOnce(Result<(), CoordinatorError>) + Send>;
type Completion = AfterCommit;
/// A write as the shard task runs it: `None` when the operation refused (it has answered its
/// caller with the error itself).
pub(crate) type WriteOp<S> = Box<
    dyn FnOnce(&mut S, &WriteContext) -> Option<(Vec<<S as CoordinatorShard>::Record>, Completion)>
        + Send,
>;
type ReadOp<S> = Box<dyn FnOnce(&S, i64) + Send>;

/// What an operation knows about where its records go.
#[derive(Debug, Clone, Copy)]
pub struct WriteContext {
    /// The offset the first record of this write will get.
    pub offset: i64,
    /// The leader epoch the shard was loaded with (Kafka's coordinator epoch).
    pub epoch: i32,
}

pub(crate) enum Event<S: CoordinatorShard> {
    Write(WriteOp<S>),
    /// A write whose records are appended as one transactional batch of the producer.
    TransactionalWrite(TxnProducer, WriteOp<S>),
    /// Writes the end-transaction marker of a producer.
    CompleteTransaction {
        producer: TxnProducer,
        coordinator_epoch: i32,
        result: TxnResult,
        done: Completion,
    },
    Read(ReadOp<S>),
    HighWatermark(i64),
    /// Leadership lost: stop and fail what waits.
    Unload,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Loading,
    Active,
    Failed,
}

struct ShardHandle<S: CoordinatorShard> {
    epoch: i32,
    status: Arc<Mutex<Status>>,
    events: mpsc::UnboundedSender<Event<S>>,
    task: JoinHandle<()>,
}

/// Runs one coordinator's shards (the group coordinator's on `__consumer_offsets`, the
/// transaction coordinator's on `__transaction_state`).
pub struct CoordinatorRuntime<S: CoordinatorShard> {
    writer: Arc<dyn PartitionWriter>,
    loader: Arc<dyn CoordinatorLoader>,
    new_shard: Arc<NewShard<S>>,
    clock: Arc<dyn Clock>,
    shards: Mutex<HashMap<TopicPartition, ShardHandle<S>>>,
    /// How long a write waits for its records to be committed, in ms (0: no limit).
    write_timeout_ms: AtomicU64,
}

type NewShard<S> = dyn Fn(ShardContext<S>) -> S + Send + Sync;

impl<S: CoordinatorShard> CoordinatorRuntime<S> {
    pub fn new(
        writer: Arc<dyn PartitionWriter>,
        loader: Arc<dyn CoordinatorLoader>,
        new_shard: impl Fn(ShardContext<S>) -> S + Send + Sync + 'static,
    ) -> Arc<Self> {
        Self::with_clock(writer, loader, Arc::new(TokioClock::new()), new_shard)
    }

    /// As [`Self::new`], with the clock shards read (tests inject one).
    pub fn with_clock(
        writer: Arc<dyn PartitionWriter>,
        loader: Arc<dyn CoordinatorLoader>,
        clock: Arc<dyn Clock>,
        new_shard: impl Fn(ShardContext<S>) -> S + Send + Sync + 'static,
    ) -> Arc<Self> {
        Arc::new(Self {
            writer,
            loader,
            new_shard: Arc::new(new_shard),
            clock,
            shards: Mutex::new(HashMap::new()),
            write_timeout_ms: AtomicU64::new(0),
        })
    }

    /// Writes not committed within `timeout` answer COORDINATOR_NOT_AVAILABLE (see the module
    /// page); `Duration::ZERO` waits without limit.
    pub fn set_write_timeout(&self, timeout: Duration) {
        let ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        self.write_timeout_ms.store(ms, Ordering::Relaxed);
    }

    /// The clock shards read.
    pub fn clock(&self) -> Arc<dyn Clock> {
        self.clock.clone()
    }

    /// This broker became leader of `tp` at `epoch`: rebuild its shard from the log. A shard
    /// already loaded at this or a newer epoch stays; an older one is replaced.
    pub fn schedule_load(self: &Arc<Self>, tp: TopicPartition, epoch: i32) {
        let mut shards = self.shards.lock();
        if shards.get(&tp).is_some_and(|h| h.epoch >= epoch) {
            return;
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let status = Arc::new(Mutex::new(Status::Loading));
        let task = tokio::spawn(run_shard(
            self.clone(),
            tp.clone(),
            epoch,
            status.clone(),
            tx.downgrade(),
            rx,
        ));
        if let Some(old) = shards.insert(
            tp,
            ShardHandle {
                epoch,
                status,
                events: tx,
                task,
            },
        ) {
            old.task.abort();
        }
    }

    /// This broker no longer leads `tp` (or leads it at a newer epoch than `epoch` says is
    /// being resigned): drop the shard; whatever waited on it gets NOT_COORDINATOR.
    pub fn schedule_unload(&self, tp: &TopicPartition, epoch: Option<i32>) {
        let mut shards = self.shards.lock();
        if shards
            .get(tp)
            .is_some_and(|h| epoch.is_none_or(|e| h.epoch <= e))
        {
            // The task fails what is pending and ends; requests already queued behind this
            // event get NOT_COORDINATOR as their senders see the channel close.
            if let Some(h) = shards.remove(tp) {
                let _ = h.events.send(Event::Unload);
            }
        }
    }

    /// The partitions with a shard, and whether each is loaded.
    pub fn partitions(&self) -> Vec<(TopicPartition, bool)> {
        let mut v: Vec<_> = self
            .shards
            .lock()
            .iter()
            .map(|(tp, h)| (tp.clone(), *h.status.lock() == Status::Active))
            .collect();
        v.sort();
        v
    }

    fn sender(
        &self,
        tp: &TopicPartition,
    ) -> Result<mpsc::UnboundedSender<Event<S>>, CoordinatorError> {
        let shards = self.shards.lock();
        let h = shards
            .get(tp)
            .ok_or_else(|| CoordinatorError::NotCoordinator(tp.clone()))?;
        let status = *h.status.lock();
        match status {
            Status::Active => Ok(h.events.clone()),
            Status::Loading => Err(CoordinatorError::LoadInProgress(tp.clone())),
            Status::Failed => Err(CoordinatorError::NotCoordinator(tp.clone())),
        }
    }

    /// Runs `op` against `tp`'s latest state; its records are appended and its response
    /// returned once they are committed.
    pub async fn write<T: Send + 'static>(
        &self,
        tp: &TopicPartition,
        op: impl FnOnce(&mut S, &WriteContext) -> Result<WriteResult<S::Record, T>, CoordinatorError>
            + Send
            + 'static,
    ) -> Result<T, CoordinatorError> {
        self.write_as(tp, None, op).await
    }

    /// As [`Self::write`] for a producer's transaction (Kafka's
    /// `scheduleTransactionalWriteOperation`): the records are replayed as `producer`'s and
    /// appended as one transactional batch of it, after everything written before. Whether
    /// the producer may write to this partition in its transaction (KIP-890 verification) is
    /// the caller's to check first.
    pub async fn transactional_write<T: Send + 'static>(
        &self,
        tp: &TopicPartition,
        producer_id: i64,
        producer_epoch: i16,
        op: impl FnOnce(&mut S, &WriteContext) -> Result<WriteResult<S::Record, T>, CoordinatorError>
            + Send
            + 'static,
    ) -> Result<T, CoordinatorError> {
        let producer = TxnProducer {
            producer_id,
            producer_epoch,
        };
        self.write_as(tp, Some(producer), op).await
    }

    async fn write_as<T: Send + 'static>(
        &self,
        tp: &TopicPartition,
        producer: Option<TxnProducer>,
        op: impl FnOnce(&mut S, &WriteContext) -> Result<WriteResult<S::Record, T>, CoordinatorError>
            + Send
            + 'static,
    ) -> Result<T, CoordinatorError> {
        let events = self.sender(tp)?;
        let (tx, rx) = oneshot::channel::<Result<T, CoordinatorError>>();
        let boxed: WriteOp<S> = Box::new(move |shard, ctx| match op(shard, ctx) {
            Ok(WriteResult { records, response }) => {
                let done: Completion = Box::new(move |r| {
                    let _ = tx.send(r.map(|()| response));
                });
                Some((records, done))
            }
            Err(e) => {
                let _ = tx.send(Err(e));
                None
            }
        });
        let event = match producer {
            None => Event::Write(boxed),
            Some(p) => Event::TransactionalWrite(p, boxed),
        };
        events
            .send(event)
            .map_err(|_| CoordinatorError::NotCoordinator(tp.clone()))?;
        // Not held while waiting: the shard's channel closes when it is unloaded.
        drop(events);
        let timeout_ms = self.write_timeout_ms.load(Ordering::Relaxed);
        self.wait_committed(tp, Waited::Write, timeout_ms, rx).await
    }

    /// Ends `producer_id`'s transaction in `tp` with `result` (Kafka's
    /// `scheduleTransactionCompletion`, what WriteTxnMarkers asks of a coordinator's
    /// partition): the marker is replayed into the shard — a commit makes the producer's
    /// pending records take effect, an abort drops them — and appended with the transaction
    /// coordinator's `coordinator_epoch` after everything written before; answered once the
    /// high watermark passes it, or COORDINATOR_NOT_AVAILABLE after `timeout` (Kafka gives
    /// the broker's `request.timeout.ms`; zero: no limit). A failed append undoes the replay.
    pub async fn schedule_transaction_completion(
        &self,
        tp: &TopicPartition,
        producer_id: i64,
        producer_epoch: i16,
        coordinator_epoch: i32,
        result: TxnResult,
        timeout: Duration,
    ) -> Result<(), CoordinatorError> {
        let events = self.sender(tp)?;
        let (tx, rx) = oneshot::channel::<Result<(), CoordinatorError>>();
        let done: Completion = Box::new(move |r| {
            let _ = tx.send(r);
        });
        events
            .send(Event::CompleteTransaction {
                producer: TxnProducer {
                    producer_id,
                    producer_epoch,
                },
                coordinator_epoch,
                result,
                done,
            })
            .map_err(|_| CoordinatorError::NotCoordinator(tp.clone()))?;
        drop(events);
        let ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        self.wait_committed(tp, Waited::Marker, ms, rx).await
    }

    /// Waits for a write's answer, at most `timeout_ms` (0: no limit).
    async fn wait_committed<T>(
        &self,
        tp: &TopicPartition,
        what: Waited,
        timeout_ms: u64,
        rx: oneshot::Receiver<Result<T, CoordinatorError>>,
    ) -> Result<T, CoordinatorError> {
        let not_coordinator = |_| Err(CoordinatorError::NotCoordinator(tp.clone()));
        match timeout_ms {
            0 => rx.await.unwrap_or_else(not_coordinator),
            ms => match tokio::time::timeout(Duration::from_millis(ms), rx).await {
                Ok(r) => r.unwrap_or_else(not_coordinator),
                Err(_) => {
                    let message =
                        format!("the {what:?} to {tp:?} was not committed within {ms} ms");
                    Err(match what {
                        Waited::Write => CoordinatorError::NotAvailable(message),
                        // Kafka's runtime fails the completion with a TimeoutException, which
                        // WriteTxnMarkers answers as REQUEST_TIMED_OUT.
                        Waited::Marker => CoordinatorError::Operation {
                            code: ErrorCode::RequestTimedOut,
                            message,
                        },
                    })
                }
            },
        }
    }

    /// Runs `op` against `tp`'s state as of its high watermark (the shard passes the offset;
    /// timeline structures read at it).
    pub async fn read<T: Send + 'static>(
        &self,
        tp: &TopicPartition,
        op: impl FnOnce(&S, i64) -> T + Send + 'static,
    ) -> Result<T, CoordinatorError> {
        let events = self.sender(tp)?;
        let (tx, rx) = oneshot::channel();
        events
            .send(Event::Read(Box::new(move |s, hw| {
                let _ = tx.send(op(s, hw));
            })))
            .map_err(|_| CoordinatorError::NotCoordinator(tp.clone()))?;
        drop(events);
        rx.await
            .map_err(|_| CoordinatorError::NotCoordinator(tp.clone()))
    }

    /// The broker saw `tp`'s high watermark move to `hw`.
    pub fn on_high_watermark(&self, tp: &TopicPartition, hw: i64) {
        if let Some(h) = self.shards.lock().get(tp) {
            let _ = h.events.send(Event::HighWatermark(hw));
        }
    }

    /// Runs `op` as a write of `tp` after `delay` (timers — session expiry, rebalance and join
    /// delays, offset expiry — are events of their partition). Dropped if the partition is
    /// unloaded first; the returned handle cancels it.
    pub fn schedule_write_after<T: Send + 'static>(
        self: &Arc<Self>,
        tp: TopicPartition,
        delay: Duration,
        op: impl FnOnce(&mut S, &WriteContext) -> Result<WriteResult<S::Record, T>, CoordinatorError>
            + Send
            + 'static,
    ) -> JoinHandle<()> {
        let rt = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            if let Err(e) = rt.write(&tp, op).await {
                tracing::debug!(?tp, error = %e, "coordinator timer");
            }
        })
    }
}

impl<S: CoordinatorShard> Drop for CoordinatorRuntime<S> {
    fn drop(&mut self) {
        for (_, h) in self.shards.lock().drain() {
            h.task.abort();
        }
    }
}

/// What a caller waits for (the error its timeout gives).
#[derive(Debug, Clone, Copy)]
enum Waited {
    Write,
    Marker,
}

/// A shard's state while it runs.
struct Running<S: CoordinatorShard> {
    shard: S,
    epoch: i32,
    /// The offset the next batch gets: this shard is the partition's only writer.
    next_offset: i64,
    high_watermark: i64,
    /// Responses waiting for the high watermark: (last offset of their batch, completion).
    deferred: VecDeque<(i64, Completion)>,
}

impl<S: CoordinatorShard> Running<S> {
    /// Runs one write; `false` when the shard must be reloaded (its view of the log is wrong).
    fn run_write(
        &mut self,
        tp: &TopicPartition,
        writer: &dyn PartitionWriter,
        producer: Option<TxnProducer>,
        op: WriteOp<S>,
    ) -> bool {
        let ctx = WriteContext {
            offset: self.next_offset,
            epoch: self.epoch,
        };
        let Some((records, done)) = op(&mut self.shard, &ctx) else {
            // The operation refused: undo whatever it changed before refusing.
            self.shard.revert_to(ctx.offset);
            return true;
        };
        if records.is_empty() {
            // Nothing to append: answer once everything before it is committed (it may
            // depend on state still uncommitted).
            let last = ctx.offset - 1;
            if last < self.high_watermark {
                done(Ok(()));
            } else {
                self.deferred.push_back((last, done));
            }
            return true;
        }
        let raw: Vec<RawRecord> = match records.iter().map(S::serialize).collect() {
            Ok(raw) => raw,
            Err(e) => {
                self.shard.revert_to(ctx.offset);
                done(Err(e));
                return true;
            }
        };
        for (i, r) in records.iter().enumerate() {
            let offset = ctx.offset + i as i64;
            match producer {
                None => self.shard.replay(offset, r),
                Some(p) => self.shard.replay_transactional(offset, p, r),
            }
        }
        let appended = match producer {
            None => writer.append(tp, self.epoch, &raw),
            Some(p) => writer.append_transactional(tp, self.epoch, p, &raw),
        };
        let failed = |e: &WriteError| CoordinatorError::from_append(tp, e);
        self.appended(tp, ctx.offset, appended, failed, done)
    }

    /// Replays and appends an end-transaction marker (Kafka's `completeTransaction`); `false`
    /// when the shard must be reloaded.
    fn complete_transaction(
        &mut self,
        tp: &TopicPartition,
        writer: &dyn PartitionWriter,
        producer: TxnProducer,
        coordinator_epoch: i32,
        result: TxnResult,
        done: Completion,
    ) -> bool {
        let offset = self.next_offset;
        self.shard
            .replay_end_transaction_marker(offset, producer, result);
        let appended =
            writer.append_end_txn_marker(tp, self.epoch, producer, coordinator_epoch, result);
        tracing::debug!(
            ?tp,
            producer_id = producer.producer_id,
            producer_epoch = producer.producer_epoch,
            result = result.name(),
            ok = appended.is_ok(),
            "transaction marker"
        );
        // Kafka's runtime fails the completion with the append's own error (the broker maps
        // only the coordinator errors for WriteTxnMarkers): e.g. NOT_ENOUGH_REPLICAS, or
        // INVALID_PRODUCER_EPOCH for a marker of a fenced epoch, stay as they are.
        let failed = |e: &WriteError| CoordinatorError::Operation {
            code: e.code,
            message: e.message.clone(),
        };
        self.appended(tp, offset, appended, failed, done)
    }

    /// What follows an append of the batch expected at `offset`: its answer waits for the
    /// high watermark, or a failure undoes what was replayed for it. `false` when the batch
    /// landed elsewhere than expected.
    fn appended(
        &mut self,
        tp: &TopicPartition,
        offset: i64,
        appended: Result<AppendResult, WriteError>,
        failed: impl FnOnce(&WriteError) -> CoordinatorError,
        done: Completion,
    ) -> bool {
        match appended {
            Ok(res) if res.base_offset == offset => {
                self.next_offset = res.last_offset + 1;
                self.deferred.push_back((res.last_offset, done));
                self.advance_high_watermark(res.high_watermark);
                true
            }
            Ok(res) => {
                // Someone else wrote to the partition: this shard's view of it is wrong. Keep
                // the records (they are in the log); the caller reloads the shard from the log
                // and this write's caller gets NOT_COORDINATOR, as in Kafka.
                tracing::error!(
                    ?tp,
                    expected = offset,
                    got = res.base_offset,
                    "coordinator partition written by another writer; reloading it"
                );
                done(Err(CoordinatorError::NotCoordinator(tp.clone())));
                false
            }
            Err(e) => {
                self.shard.revert_to(offset);
                done(Err(failed(&e)));
                true
            }
        }
    }

    fn advance_high_watermark(&mut self, hw: i64) {
        if hw <= self.high_watermark {
            return;
        }
        self.high_watermark = hw;
        self.shard.commit(hw);
        while self.deferred.front().is_some_and(|(last, _)| *last < hw) {
            let (_, done) = self.deferred.pop_front().expect("checked above");
            done(Ok(()));
        }
    }
}

async fn run_shard<S: CoordinatorShard>(
    rt: Arc<CoordinatorRuntime<S>>,
    tp: TopicPartition,
    epoch: i32,
    status: Arc<Mutex<Status>>,
    own_events: mpsc::WeakUnboundedSender<Event<S>>,
    mut events: mpsc::UnboundedReceiver<Event<S>>,
) {
    let loader = rt.loader.clone();
    let writer = rt.writer.clone();
    let new_shard = rt.new_shard.clone();
    let clock = rt.clock.clone();
    // The runtime owns this task's handle: the task must not keep the runtime alive.
    drop(rt);
    let timer = CoordinatorTimer::new(own_events);
    loop {
        let shard = new_shard(ShardContext {
            tp: tp.clone(),
            epoch,
            timer: timer.clone(),
            clock: clock.clone(),
        });
        let Some(mut st) = load_shard(shard, &loader, &tp, epoch).await else {
            *status.lock() = Status::Failed;
            return;
        };
        *status.lock() = Status::Active;
        let stop = serve(&mut st, &tp, writer.as_ref(), &mut events).await;
        if stop == Stop::OutOfSync {
            // Kafka's `CoordinatorRuntime` (FAILED, then LOADING at the same epoch): the shard's
            // view of the log is wrong (a batch it did not write, e.g. a Produce from a client
            // allowed to write internal topics), so it is rebuilt from the log, that batch
            // included. Requests meanwhile get COORDINATOR_LOAD_IN_PROGRESS.
            *status.lock() = Status::Loading;
        }
        // Whatever waits for the high watermark will not get it from this shard.
        timer.cancel_all();
        for (_, done) in st.deferred.drain(..) {
            done(Err(CoordinatorError::NotCoordinator(tp.clone())));
        }
        if stop == Stop::Unloaded {
            return;
        }
        tracing::warn!(?tp, epoch, "reloading the coordinator shard from the log");
    }
}

/// Why a shard stopped serving.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// Unloaded, or every sender is gone.
    Unloaded,
    /// An append landed elsewhere than this shard expected.
    OutOfSync,
}

/// Rebuilds `shard` by replaying `tp` from its log start; `None` when the log cannot be read.
async fn load_shard<S: CoordinatorShard>(
    mut shard: S,
    loader: &Arc<dyn CoordinatorLoader>,
    tp: &TopicPartition,
    epoch: i32,
) -> Option<Running<S>> {
    let loader = loader.clone();
    // Loading reads the log: blocking I/O, off the async threads.
    let load_tp = tp.clone();
    let loaded = tokio::task::spawn_blocking(move || {
        let mut skipped = 0u64;
        // Records and markers in log order, each record with its batch's producer, so a
        // transaction's pending records and its marker replay as they were written.
        let r = loader.load_records(&load_tp, epoch, &mut |loaded| match loaded {
            LoadedRecord::Record {
                offset,
                producer,
                key,
                value,
            } => match S::deserialize(&key, value.as_ref()) {
                Some(record) => match producer {
                    None => shard.replay(offset, &record),
                    Some(p) => shard.replay_transactional(offset, p, &record),
                },
                None => skipped += 1,
            },
            LoadedRecord::EndTxnMarker {
                offset,
                producer,
                marker,
            } => shard.replay_end_transaction_marker(offset, producer, marker.result),
        });
        // Everything read is committed as far as the log says; what lies above the high
        // watermark stays revertible.
        r.map(|end| (shard, end, skipped))
    })
    .await;
    let (shard, end, skipped) = match loaded {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            tracing::warn!(?tp, epoch, error = %e, "coordinator load failed");
            return None;
        }
        Err(e) => {
            tracing::warn!(?tp, epoch, error = %e, "coordinator load panicked");
            return None;
        }
    };
    let mut st = Running {
        shard,
        epoch,
        next_offset: end.last_offset + 1,
        high_watermark: -1,
        deferred: VecDeque::new(),
    };
    st.advance_high_watermark(end.high_watermark);
    st.shard.on_loaded();
    tracing::info!(
        ?tp,
        epoch,
        end_offset = st.next_offset,
        skipped,
        "coordinator loaded"
    );
    Some(st)
}

/// Runs the shard's events until it is unloaded or finds the log out of sync with it.
async fn serve<S: CoordinatorShard>(
    st: &mut Running<S>,
    tp: &TopicPartition,
    writer: &dyn PartitionWriter,
    events: &mut mpsc::UnboundedReceiver<Event<S>>,
) -> Stop {
    while let Some(event) = events.recv().await {
        let in_sync = match event {
            Event::HighWatermark(hw) => {
                st.advance_high_watermark(hw);
                true
            }
            Event::Unload => return Stop::Unloaded,
            Event::Read(op) => {
                op(&st.shard, st.high_watermark);
                true
            }
            Event::Write(op) => st.run_write(tp, writer, None, op),
            Event::TransactionalWrite(producer, op) => st.run_write(tp, writer, Some(producer), op),
            Event::CompleteTransaction {
                producer,
                coordinator_epoch,
                result,
                done,
            } => st.complete_transaction(tp, writer, producer, coordinator_epoch, result, done),
        };
        if !in_sync {
            return Stop::OutOfSync;
        }
    }
    Stop::Unloaded
}

#[cfg(test)]
#[path = "runtime_tests.rs"]
mod tests;

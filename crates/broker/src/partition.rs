//! One partition replica on this broker: its log, its offsets and its role.
//!
//! Everything that decides who may write the log lives in one [`PartitionState`] behind one
//! lock, Kafka's `leaderIsrUpdateLock`: the role, the leader epoch, the replication state
//! (partition epoch, ISR, followers) and the log with its high watermark. Appends, reads and
//! follower-fetch bookkeeping take the read side (plus the log mutex for the log); leadership
//! changes take the write side. So an append checked against leader epoch E either runs wholly
//! before a change to E+1 or sees it and is refused, never stamped with the new epoch by a broker
//! that was just deposed. Lock order: `state`, then `log`, then `replication`; none is held
//! across an `.await`, and no public method that takes them is called with one held (a read lock
//! is not re-entrant once a writer waits; the plain getters use a recursive read, and the
//! offsets are also published in atomics for readers that decide nothing on them).
//!
//! Operations waiting on this partition (acks=all produce, fetch long-poll, DeleteRecords) sit
//! in the replica manager's purgatories ([`DelayedOperations`]); every method that moves what
//! they wait for (an append, the HW, the low watermark, a leadership change) checks them after
//! releasing the locks, as Kafka's `tryCompleteDelayedRequests`.

mod delayed;
mod follower;
mod read;

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard, RwLock};
use strom_protocol::ErrorCode;
use strom_storage::verification::VerificationGuard;
use strom_storage::{AppendOrigin, LogAppendInfo, LogConfig, StorageError, UnifiedLog};
use thiserror::Error;
use uuid::Uuid;

pub use delayed::DelayedOperations;
pub use read::{EpochEndOffset, FetchIsolation, LogReadInfo, PartitionFetch};

use crate::replica_manager::TopicPartition;
use crate::replication::{AlterPartitionProposal, AlterPartitionSender, LeaderAndIsr, LeaderState};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Leader,
    Follower { leader: i32 },
}

/// Why a partition refused an operation; [`Self::error_code`] is the Kafka answer.
#[derive(Debug, Error)]
pub enum PartitionError {
    #[error("broker {broker} is not the leader of {topic}-{partition}")]
    NotLeaderOrFollower {
        broker: i32,
        topic: String,
        partition: i32,
    },
    /// The caller's leader epoch is older than this replica's (Kafka's
    /// `checkCurrentLeaderEpoch`).
    #[error("leader epoch {requested} is older than the current leader epoch {current}")]
    FencedLeaderEpoch { requested: i32, current: i32 },
    /// The caller's leader epoch is newer than this replica knows.
    #[error("leader epoch {requested} is newer than the current leader epoch {current}")]
    UnknownLeaderEpoch { requested: i32, current: i32 },
    #[error("{topic}-{partition} is not hosted on this broker any more")]
    UnknownTopicOrPartition { topic: String, partition: i32 },
    #[error("{0}")]
    NotEnoughReplicas(String),
    #[error("{0}")]
    OffsetOutOfRange(String),
    /// A read asked for a negative number of bytes (Kafka's `LogSegment.read` throws
    /// IllegalArgumentException, which a fetch answers UNKNOWN_SERVER_ERROR).
    #[error("Invalid max size {0} for log read")]
    InvalidMaxSize(i32),
    #[error(transparent)]
    Storage(#[from] StorageError),
}

impl PartitionError {
    pub fn error_code(&self) -> ErrorCode {
        match self {
            Self::NotLeaderOrFollower { .. } => ErrorCode::NotLeaderOrFollower,
            Self::UnknownTopicOrPartition { .. } => ErrorCode::UnknownTopicOrPartition,
            Self::FencedLeaderEpoch { .. } => ErrorCode::FencedLeaderEpoch,
            Self::UnknownLeaderEpoch { .. } => ErrorCode::UnknownLeaderEpoch,
            Self::NotEnoughReplicas(_) => ErrorCode::NotEnoughReplicas,
            Self::OffsetOutOfRange(_) => ErrorCode::OffsetOutOfRange,
            Self::InvalidMaxSize(_) => ErrorCode::UnknownServerError,
            Self::Storage(e) => e.error_code(),
        }
    }
}

/// The log and its high watermark; reached only through [`PartitionState`].
struct LocalLog {
    log: UnifiedLog,
    high_watermark: i64,
}

impl LocalLog {
    /// After the log start or end moved: log start <= HW <= LEO.
    fn clamp_high_watermark(&mut self) {
        let (start, end) = (self.log.log_start_offset(), self.log.log_end_offset());
        self.set_high_watermark(self.high_watermark.min(end).max(start));
    }

    /// The one place the HW changes: the producer state hears of it too, so completed
    /// transactions below it stop holding the LSO back (Kafka's `updateHighWatermarkMetadata`).
    fn set_high_watermark(&mut self, hw: i64) {
        self.high_watermark = hw;
        self.log.update_high_watermark(hw);
    }

    /// The last stable offset: the first unstable offset if below the HW, else the HW.
    fn last_stable_offset(&self) -> i64 {
        self.log.last_stable_offset(self.high_watermark)
    }
}

/// The log's offsets as of its last change, for readers that need no decision on them (metrics,
/// checkpoints, a fetcher building its next request); they never run ahead of the log. Every
/// decision (append, HW move, read bound) is taken on the locked [`LocalLog`] instead.
#[derive(Default)]
struct Published {
    high_watermark: AtomicI64,
    log_end_offset: AtomicI64,
    log_start_offset: AtomicI64,
}

impl Published {
    fn publish(&self, log: &LocalLog) {
        self.log_start_offset
            .store(log.log.log_start_offset(), Ordering::Release);
        self.log_end_offset
            .store(log.log.log_end_offset(), Ordering::Release);
        self.high_watermark
            .store(log.high_watermark, Ordering::Release);
    }
}

/// The locked log; publishes its offsets when released.
struct LogGuard<'a> {
    guard: MutexGuard<'a, LocalLog>,
    published: &'a Published,
}

impl std::ops::Deref for LogGuard<'_> {
    type Target = LocalLog;
    fn deref(&self) -> &LocalLog {
        &self.guard
    }
}

impl std::ops::DerefMut for LogGuard<'_> {
    fn deref_mut(&mut self) -> &mut LocalLog {
        &mut self.guard
    }
}

impl Drop for LogGuard<'_> {
    fn drop(&mut self) {
        self.published.publish(&self.guard);
    }
}

/// Kafka's `leaderIsrUpdateLock` and what it guards.
struct PartitionState {
    role: Role,
    leader_epoch: i32,
    log: Mutex<LocalLog>,
    /// Replicas, committed ISR and partition epoch (as last published by the controller),
    /// follower fetch states and any pending ISR change. On a single node the ISR is just this
    /// broker, so the HW follows the LEO.
    replication: Mutex<LeaderState>,
    /// No longer hosted (deleted, or moved off this broker): refuses everything, and the
    /// operations still waiting on it answer UNKNOWN_TOPIC_OR_PARTITION.
    removed: bool,
}

/// Told when a leader's high watermark moves (the group coordinator completes the responses
/// waiting for their records to commit). Called with no lock of the partition held, from
/// whatever thread moved the HW: it must only queue, never block.
pub trait HighWatermarkListener: Send + Sync {
    fn on_high_watermark(&self, topic: &str, partition: i32, high_watermark: i64);
}

/// Kafka's `LogDeleteRecordsResult`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogDeleteRecordsResult {
    /// The new log start asked for (the HW for DeleteRecords' -1).
    pub requested_offset: i64,
    pub low_watermark: i64,
}

pub struct Partition {
    pub topic: String,
    pub topic_id: Uuid,
    pub index: i32,
    node_id: i32,
    key: TopicPartition,
    state: RwLock<PartitionState>,
    /// Where ISR changes go (set by the replica manager); without one none are proposed.
    alter_partition_sender: Mutex<Option<Arc<dyn AlterPartitionSender>>>,
    delayed: Arc<DelayedOperations>,
    /// Told after every move of this leader's HW (set for coordinator partitions).
    hw_listener: Mutex<Option<Arc<dyn HighWatermarkListener>>>,
    published: Published,
    /// Reads the log without its mutex (segments are append-only; the reader is bounded by
    /// what the writer has published), so a fetch never waits for an append or blocks one.
    reader: strom_storage::LogReader,
}

impl Partition {
    /// A replica that leads (epoch 0, ISR = itself) until a registration says otherwise, with
    /// purgatories of its own; the replica manager's partitions share its purgatories
    /// ([`Self::with_delayed_operations`]).
    pub fn new(
        topic: String,
        topic_id: Uuid,
        index: i32,
        node_id: i32,
        log: UnifiedLog,
        hw: i64,
    ) -> Self {
        let reader = log.reader();
        let mut local = LocalLog {
            log,
            high_watermark: hw,
        };
        local.clamp_high_watermark();
        let published = Published::default();
        published.publish(&local);
        Self {
            published,
            reader,
            key: (topic.clone(), index),
            topic,
            topic_id,
            index,
            node_id,
            state: RwLock::new(PartitionState {
                role: Role::Leader,
                leader_epoch: 0,
                removed: false,
                log: Mutex::new(local),
                replication: Mutex::new(LeaderState::new(node_id)),
            }),
            alter_partition_sender: Mutex::new(None),
            delayed: Arc::new(DelayedOperations::default()),
            hw_listener: Mutex::new(None),
        }
    }

    /// Sets (or clears) who is told when this leader's HW moves.
    pub fn set_high_watermark_listener(&self, listener: Option<Arc<dyn HighWatermarkListener>>) {
        *self.hw_listener.lock() = listener;
    }

    /// After the HW moved, with every lock of the partition released: tells the listener the
    /// HW as published now (it only goes up while this replica leads, so a late call with an
    /// older value cannot be told after a newer one of the same leadership).
    fn notify_high_watermark(&self) {
        let listener = self.hw_listener.lock().clone();
        if let Some(l) = listener {
            l.on_high_watermark(&self.topic, self.index, self.high_watermark());
        }
    }

    /// Uses these purgatories (the replica manager's, shared by all its partitions).
    pub fn with_delayed_operations(mut self, delayed: Arc<DelayedOperations>) -> Self {
        self.delayed = delayed;
        self
    }

    pub fn delayed_operations(&self) -> &Arc<DelayedOperations> {
        &self.delayed
    }

    /// The key delayed operations on this partition are watched under.
    pub fn key(&self) -> &TopicPartition {
        &self.key
    }

    /// The log, with the state lock held (read or write side) by the caller.
    fn lock_log<'a>(&'a self, st: &'a PartitionState) -> LogGuard<'a> {
        LogGuard {
            guard: st.log.lock(),
            published: &self.published,
        }
    }

    /// This replica must be hosted and lead.
    fn check_leader(&self, st: &PartitionState) -> Result<(), PartitionError> {
        if st.removed {
            return Err(self.removed_error());
        }
        if st.role != Role::Leader {
            return Err(self.not_leader());
        }
        Ok(())
    }

    fn removed_error(&self) -> PartitionError {
        PartitionError::UnknownTopicOrPartition {
            topic: self.topic.clone(),
            partition: self.index,
        }
    }

    /// Kafka's `stopPartitions` for this replica: the replica manager no longer hosts it. Every
    /// later append, read or delete is refused, and the operations waiting on it answer now
    /// (UNKNOWN_TOPIC_OR_PARTITION) instead of at their timeouts.
    pub fn mark_removed(&self) {
        self.state.write().removed = true;
        self.delayed.check_and_complete_all(&self.key);
    }

    pub fn is_removed(&self) -> bool {
        self.state.read().removed
    }

    fn not_leader(&self) -> PartitionError {
        PartitionError::NotLeaderOrFollower {
            broker: self.node_id,
            topic: self.topic.clone(),
            partition: self.index,
        }
    }

    /// Kafka's `checkCurrentLeaderEpoch` (`None`: the caller does not know, no check).
    fn check_leader_epoch(
        st: &PartitionState,
        requested: Option<i32>,
    ) -> Result<(), PartitionError> {
        match requested {
            Some(e) if e < st.leader_epoch => Err(PartitionError::FencedLeaderEpoch {
                requested: e,
                current: st.leader_epoch,
            }),
            Some(e) if e > st.leader_epoch => Err(PartitionError::UnknownLeaderEpoch {
                requested: e,
                current: st.leader_epoch,
            }),
            _ => Ok(()),
        }
    }

    /// Applies the controller's view of this partition (leader, epoch, ISR), without the
    /// replica list and partition epoch (replicas = ISR + leader). See
    /// [`Self::apply_leader_and_isr`].
    pub fn update_registration(&self, leader: i32, leader_epoch: i32, isr: Vec<i32>, now_ms: i64) {
        let mut replicas = isr.clone();
        if !replicas.contains(&leader) && leader >= 0 {
            replicas.push(leader);
        }
        let partition_epoch = self
            .state
            .read_recursive()
            .replication
            .lock()
            .partition_epoch();
        self.apply_leader_and_isr(
            &LeaderAndIsr {
                leader,
                leader_epoch,
                partition_epoch,
                replicas,
                isr,
            },
            now_ms,
        );
    }

    /// Applies the controller's view of this partition from a metadata image (Kafka's
    /// `makeLeader` / `makeFollower`), under the write side of the state lock: no append or read
    /// is in flight while role and epochs change. A new leader epoch resets the follower states
    /// and records the epoch's start offset; a changed ISR or partition epoch is a committed ISR
    /// change and ends a pending one. Re-applying the same registration changes nothing.
    /// `now_ms` starts the followers' catch-up clocks.
    pub fn apply_leader_and_isr(&self, reg: &LeaderAndIsr, now_ms: i64) {
        let (hw_moved, hw) = {
            let mut guard = self.state.write();
            let st = &mut *guard;
            let was_leader = st.role == Role::Leader;
            let is_leader = reg.leader == self.node_id;
            st.role = if is_leader {
                Role::Leader
            } else {
                Role::Follower { leader: reg.leader }
            };
            st.leader_epoch = reg.leader_epoch;
            let log = st.log.get_mut();
            let repl = st.replication.get_mut();
            repl.apply_registration(
                is_leader && !was_leader,
                reg.leader_epoch,
                reg.partition_epoch,
                &reg.replicas,
                &reg.isr,
                log.log.log_end_offset(),
                now_ms,
            );
            let moved = is_leader && Self::maybe_increment_leader_hw(log, repl, now_ms);
            self.published.publish(log);
            (moved, log.high_watermark)
        };
        if hw_moved {
            tracing::debug!(topic = %self.topic, partition = self.index, isr = ?reg.isr, hw,
                "high watermark moved on a registration change");
            self.notify_high_watermark();
        }
        // Waiting produces re-check ISR and leadership, fetches and deletes their leader.
        self.delayed.check_and_complete_all(&self.key);
    }

    /// The low watermark (LW): the smallest log start offset over the replicas whose log start
    /// this leader knows (its own, and each follower's from its fetches), as Kafka's
    /// `lowWatermarkIfLeader`. DeleteRecords completes when it passes the requested offset.
    pub fn low_watermark(&self) -> i64 {
        let st = self.state.read_recursive();
        let own = self.log_start_offset();
        let repl = st.replication.lock();
        self.low_watermark_of(own, &repl)
    }

    fn low_watermark_of(&self, own_log_start: i64, repl: &LeaderState) -> i64 {
        repl.replicas()
            .iter()
            .filter(|&&r| r != self.node_id)
            .filter_map(|&r| repl.follower(r).map(|f| f.log_start_offset))
            .filter(|&lso| lso >= 0)
            .fold(own_log_start, i64::min)
    }

    /// The committed ISR.
    pub fn isr(&self) -> Vec<i32> {
        self.state
            .read_recursive()
            .replication
            .lock()
            .isr()
            .to_vec()
    }

    /// A snapshot of the leader-side replication state (followers, ISR, pending change).
    pub fn leader_state(&self) -> LeaderState {
        self.state.read_recursive().replication.lock().clone()
    }

    fn with_replication<T>(&self, f: impl FnOnce(&mut LeaderState) -> T) -> T {
        f(&mut self.state.read_recursive().replication.lock())
    }

    /// The topic's `min.insync.replicas` (the replica manager sets it from the topic config).
    pub fn set_min_insync_replicas(&self, n: i32) {
        self.with_replication(|r| r.min_insync_replicas = n);
    }
    pub fn min_insync_replicas(&self) -> i32 {
        self.with_replication(|r| r.min_insync_replicas)
    }
    /// The brokers fenced or in controlled shutdown (the replica manager sets them from each
    /// image before applying the registration): the HW does not wait for them to join the ISR,
    /// and they do not rejoin it.
    pub fn set_ineligible_replicas(&self, ids: impl IntoIterator<Item = i32>) {
        let ids = ids.into_iter().collect();
        self.with_replication(|r| r.ineligible_replicas = ids);
    }
    /// The registered broker epoch of every broker (from each image): followers fetching as
    /// another incarnation may not join the ISR (KIP-903).
    pub fn set_broker_epochs(&self, epochs: &std::collections::BTreeMap<i32, i64>) {
        self.with_replication(|r| {
            if &r.broker_epochs != epochs {
                r.broker_epochs = epochs.clone();
            }
        });
    }
    pub fn set_replica_lag_time_max_ms(&self, ms: i64) {
        self.with_replication(|r| r.replica_lag_time_max_ms = ms);
    }
    pub fn set_alter_partition_sender(&self, sender: Arc<dyn AlterPartitionSender>) {
        *self.alter_partition_sender.lock() = Some(sender);
    }

    pub fn role(&self) -> Role {
        self.state.read_recursive().role
    }
    pub fn is_leader(&self) -> bool {
        self.role() == Role::Leader
    }
    pub fn leader_epoch(&self) -> i32 {
        self.state.read_recursive().leader_epoch
    }
    /// The leader epoch if this replica leads, else NOT_LEADER_OR_FOLLOWER: what a writer
    /// checks first and then passes to [`Self::append_records_to_leader`], which refuses the
    /// append if leadership moved in between.
    pub fn leader_epoch_if_leader(&self) -> Result<i32, PartitionError> {
        let st = self.state.read();
        self.check_leader(&st)?;
        Ok(st.leader_epoch)
    }
    pub fn high_watermark(&self) -> i64 {
        self.published.high_watermark.load(Ordering::Acquire)
    }
    /// The last stable offset now (read_committed consumers see only below it).
    pub fn last_stable_offset(&self) -> i64 {
        self.offset_snapshot().last_stable_offset
    }
    pub fn log_end_offset(&self) -> i64 {
        self.published.log_end_offset.load(Ordering::Acquire)
    }
    pub fn log_start_offset(&self) -> i64 {
        self.published.log_start_offset.load(Ordering::Acquire)
    }

    /// HW = min LEO over the ISR (see [`LeaderState::high_watermark_candidate`]); only up.
    /// Kafka's `maybeIncrementLeaderHW`; the caller checks that this replica leads and, on
    /// true, completes delayed operations once its locks are released. `now_ms` decides which
    /// followers outside the ISR are caught up enough to be waited for.
    fn maybe_increment_leader_hw(log: &mut LocalLog, repl: &LeaderState, now_ms: i64) -> bool {
        match repl.high_watermark_candidate(log.log.log_end_offset(), now_ms) {
            Some(hw) if hw > log.high_watermark => {
                log.set_high_watermark(hw);
                true
            }
            _ => false,
        }
    }

    /// Kafka's `appendRecordsToLeader`: appends `records` stamped with the current leader
    /// epoch, which must still be `expected_leader_epoch` (the epoch the caller checked
    /// leadership in: a produce, or a coordinator that loaded its state in that epoch) and this
    /// replica must still lead; else NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH (the caller's
    /// epoch is older) or UNKNOWN_LEADER_EPOCH (newer), and nothing is written. With
    /// `required_acks` -1 the ISR must meet `min.insync.replicas` (NOT_ENOUGH_REPLICAS).
    pub fn append_records_to_leader(
        &self,
        records: &[u8],
        origin: AppendOrigin,
        required_acks: i16,
        expected_leader_epoch: i32,
        now_ms: i64,
    ) -> Result<LogAppendInfo, PartitionError> {
        self.append_records_to_leader_with_txn_version(
            records,
            origin,
            required_acks,
            expected_leader_epoch,
            0,
            now_ms,
        )
    }

    /// [`Self::append_records_to_leader`] of transaction markers of `transaction_version`
    /// (WriteTxnMarkers v2), which decides how strictly their producer epoch is checked.
    pub fn append_records_to_leader_with_txn_version(
        &self,
        records: &[u8],
        origin: AppendOrigin,
        required_acks: i16,
        expected_leader_epoch: i32,
        transaction_version: i16,
        now_ms: i64,
    ) -> Result<LogAppendInfo, PartitionError> {
        self.append_records_to_leader_verified(
            records,
            origin,
            required_acks,
            expected_leader_epoch,
            transaction_version,
            VerificationGuard::SENTINEL,
            now_ms,
        )
    }

    /// Kafka's `maybeStartTransactionVerification` on the leader: the guard a produce's
    /// transactional batch carries through its verification with the transaction coordinator
    /// (the sentinel if the producer's transaction is open here: nothing to verify;
    /// `supports_epoch_bump`: the produce is a transactions-v2 client's).
    pub fn maybe_start_transaction_verification(
        &self,
        producer_id: i64,
        sequence: i32,
        epoch: i16,
        supports_epoch_bump: bool,
        now_ms: i64,
    ) -> Result<VerificationGuard, PartitionError> {
        let st = self.state.read();
        self.check_leader(&st)?;
        let mut log = self.lock_log(&st);
        Ok(log.log.maybe_start_transaction_verification(
            producer_id,
            sequence,
            epoch,
            supports_epoch_bump,
            now_ms,
        ))
    }

    /// Whether an append of `size` bytes to this leader now may block its thread: on the disk
    /// (a roll, a new epoch's checkpoint, a flush: [`UnifiedLog::append_may_sync`]) or on a lock
    /// another thread holds (an append elsewhere that is itself waiting on the disk, a
    /// leadership change). The produce path runs such appends off the async workers
    /// ([`crate::disk_io::blocking`]) and the others in place. Only a guess, taken without
    /// waiting: a lock taken in between costs that append a wait, not a wrong result.
    pub fn append_may_block(&self, size: usize, now_ms: i64) -> bool {
        let Some(st) = self.state.try_read() else {
            return true;
        };
        let Some(log) = st.log.try_lock() else {
            return true;
        };
        st.role != Role::Leader || log.log.append_may_sync(size, st.leader_epoch, now_ms)
    }

    /// [`Self::append_records_to_leader_with_txn_version`] with the guard of the KIP-890
    /// verification of a client's transactional batch.
    #[allow(clippy::too_many_arguments)]
    pub fn append_records_to_leader_verified(
        &self,
        records: &[u8],
        origin: AppendOrigin,
        required_acks: i16,
        expected_leader_epoch: i32,
        transaction_version: i16,
        verification_guard: VerificationGuard,
        now_ms: i64,
    ) -> Result<LogAppendInfo, PartitionError> {
        let (info, hw_moved) = {
            let st = self.state.read();
            self.check_leader(&st)?;
            Self::check_leader_epoch(&st, Some(expected_leader_epoch))?;
            let mut log = self.lock_log(&st);
            if required_acks == -1 {
                let repl = st.replication.lock();
                if repl.is_under_min_isr() {
                    return Err(PartitionError::NotEnoughReplicas(
                        self.not_enough_replicas_message(&repl),
                    ));
                }
            }
            let info = log.log.append_as_leader_verified(
                records,
                st.leader_epoch,
                origin,
                transaction_version,
                verification_guard,
                now_ms,
            )?;
            let repl = st.replication.lock();
            let moved = Self::maybe_increment_leader_hw(&mut log, &repl, now_ms);
            (info, moved)
        };
        if hw_moved {
            self.notify_high_watermark();
            self.delayed.check_and_complete_all(&self.key);
        } else {
            // Followers long-polling for new data.
            self.delayed.fetch.check_and_complete(&self.key);
        }
        Ok(info)
    }

    /// Runs `f` on the log under the state lock (read side) and the log mutex. The HW is kept
    /// within the log's new bounds afterwards (a truncation, a moved log start).
    pub fn with_log<T>(&self, f: impl FnOnce(&mut UnifiedLog) -> T) -> T {
        let st = self.state.read();
        let mut log = self.lock_log(&st);
        let out = f(&mut log.log);
        log.clamp_high_watermark();
        out
    }

    pub fn update_config(&self, config: LogConfig) {
        self.with_log(|log| {
            if *log.config() != config {
                log.update_config(config)
            }
        });
    }

    /// Kafka's `deleteRecordsOnLeader`: moves the log start to `offset` (-1: the HW), which
    /// must not pass the HW; answers with the low watermark, which reaches the offset once every
    /// follower has moved its log start too (DeleteRecords waits for that in the purgatory).
    pub fn delete_records_on_leader(
        &self,
        offset: i64,
    ) -> Result<LogDeleteRecordsResult, PartitionError> {
        const HIGH_WATERMARK: i64 = -1;
        let (result, lw_moved) = {
            let st = self.state.read();
            self.check_leader(&st)?;
            let mut log = self.lock_log(&st);
            let hw = log.high_watermark;
            let requested = if offset == HIGH_WATERMARK { hw } else { offset };
            if requested < 0 || requested > hw {
                return Err(PartitionError::OffsetOutOfRange(format!(
                    "Cannot increment the log start offset to {requested} of partition {}-{} since it is larger than the high watermark {hw}",
                    self.topic, self.index
                )));
            }
            let old_start = log.log.log_start_offset();
            log.log.maybe_increment_log_start_offset(requested)?;
            let new_start = log.log.log_start_offset();
            let repl = st.replication.lock();
            let old_lw = self.low_watermark_of(old_start, &repl);
            let low_watermark = self.low_watermark_of(new_start, &repl);
            (
                LogDeleteRecordsResult {
                    requested_offset: requested,
                    low_watermark,
                },
                low_watermark > old_lw,
            )
        };
        if lw_moved {
            self.delayed.delete_records.check_and_complete(&self.key);
        }
        Ok(result)
    }

    // ---- Leader side of replication ----

    /// Records a follower's fetch (Kafka's `updateFollowerFetchState`): its fetch offset is its
    /// LEO; `leader_log_end_offset` is this log's end before the read; `broker_epoch` the
    /// follower's (Fetch v15+; -1 before), which decides whether it may join the ISR. May propose an ISR
    /// expansion and move the HW or the low watermark (completing delayed produces, fetches and
    /// deletes). `false`: not an assigned replica.
    pub fn update_follower_fetch_state(
        &self,
        follower: i32,
        fetch_offset: i64,
        follower_log_start_offset: i64,
        now_ms: i64,
        leader_log_end_offset: i64,
        broker_epoch: i64,
    ) -> bool {
        let (hw_moved, lw_moved, proposal) = {
            let st = self.state.read();
            let mut log = self.lock_log(&st);
            let mut repl = st.replication.lock();
            let own_start = log.log.log_start_offset();
            let old_lw = self.low_watermark_of(own_start, &repl);
            let Some(leo_moved) = repl.update_follower_fetch_state(
                follower,
                fetch_offset,
                follower_log_start_offset,
                now_ms,
                leader_log_end_offset,
                broker_epoch,
            ) else {
                return false;
            };
            let lw_moved = self.low_watermark_of(own_start, &repl) > old_lw;
            let proposal = (self.alter_partition_sender.lock().is_some()
                && repl.isr_expand_candidate(follower, log.high_watermark))
            .then(|| {
                let isr = repl.prepare_isr_expand(follower);
                tracing::info!(topic = %self.topic, partition = self.index, follower, ?isr, "expanding ISR");
                self.proposal(st.leader_epoch, &repl, isr)
            });
            let hw_moved = leo_moved
                && st.role == Role::Leader
                && Self::maybe_increment_leader_hw(&mut log, &repl, now_ms);
            (hw_moved, lw_moved, proposal)
        };
        if let Some(p) = proposal {
            self.submit(p);
        }
        if hw_moved {
            self.notify_high_watermark();
        }
        if hw_moved || lw_moved {
            self.delayed.check_and_complete_all(&self.key);
        }
        true
    }

    /// Kafka's `maybeShrinkIsr`, run every `replica.lag.time.max.ms / 2`: proposes the ISR
    /// without the followers not caught up within `replica.lag.time.max.ms`. The old ISR stays
    /// in use until the change comes back committed.
    pub fn maybe_shrink_isr(&self, now_ms: i64) -> Option<AlterPartitionProposal> {
        if self.alter_partition_sender.lock().is_none() {
            return None;
        }
        let proposal = {
            let st = self.state.read();
            if st.role != Role::Leader {
                return None;
            }
            let leo = self.lock_log(&st).log.log_end_offset();
            let mut repl = st.replication.lock();
            let lag = repl.replica_lag_time_max_ms;
            let out = repl.isr_shrink_candidates(now_ms, lag, leo);
            if out.is_empty() {
                return None;
            }
            let isr = repl.prepare_isr_shrink(&out);
            tracing::info!(topic = %self.topic, partition = self.index, out_of_sync = ?out, ?isr, "shrinking ISR");
            self.proposal(st.leader_epoch, &repl, isr)
        };
        self.submit(proposal.clone());
        Some(proposal)
    }

    /// Whether `replica` is a follower in this leader's assignment.
    pub fn is_known_replica(&self, replica: i32) -> bool {
        replica != self.node_id && self.with_replication(|r| r.follower(replica).is_some())
    }

    /// The controller refused an ISR change (or it was lost): forget it so it can be proposed
    /// again. Ignored if the partition epoch moved on meanwhile.
    pub fn alter_partition_failed(&self, partition_epoch: i32) {
        self.with_replication(|r| {
            if r.partition_epoch() == partition_epoch {
                r.clear_pending();
            }
        });
    }

    fn proposal(
        &self,
        leader_epoch: i32,
        repl: &LeaderState,
        new_isr: Vec<i32>,
    ) -> AlterPartitionProposal {
        AlterPartitionProposal {
            topic: self.topic.clone(),
            topic_id: self.topic_id,
            partition: self.index,
            leader_id: self.node_id,
            leader_epoch,
            partition_epoch: repl.partition_epoch(),
            new_isr_broker_epochs: repl.isr_broker_epochs(&new_isr),
            new_isr,
        }
    }

    /// Sends a proposal; never called with the state lock held (the sender may call back).
    fn submit(&self, p: AlterPartitionProposal) {
        let sender = self.alter_partition_sender.lock().clone();
        if let Some(s) = sender {
            s.submit(p);
        }
    }

    /// OffsetForLeaderEpoch / the fetch divergence check on a leader (see
    /// [`Self::end_offset_for_epoch_locked`]).
    pub fn end_offset_for_epoch(&self, epoch: i32) -> (i32, i64) {
        let st = self.state.read();
        let log = self.lock_log(&st);
        Self::end_offset_for_epoch_locked(&st, &log, epoch)
    }

    /// The log's epoch cache plus the current epoch from its start offset, which Kafka writes
    /// into the cache on becoming leader and Strom only on the epoch's first append.
    fn end_offset_for_epoch_locked(st: &PartitionState, log: &LocalLog, epoch: i32) -> (i32, i64) {
        let log = &log.log;
        let answer = log.end_offset_for_epoch(epoch);
        if st.role != Role::Leader || epoch < 0 {
            return answer;
        }
        let current = st.leader_epoch;
        let start = st.replication.lock().leader_epoch_start_offset();
        if log.latest_epoch().is_some_and(|e| e >= current) || epoch > current {
            return answer;
        }
        if epoch == current {
            return (current, log.log_end_offset());
        }
        let entries = log.leader_epoch_cache().entries();
        if entries.iter().any(|e| e.epoch > epoch) {
            return answer;
        }
        match entries.iter().rev().find(|e| e.epoch <= epoch) {
            Some(floor) => (floor.epoch, start),
            None => (epoch, start),
        }
    }

    /// Whether the ISR meets the effective `min.insync.replicas` now (the check an acks=all
    /// append makes under the lock); the message is Kafka's NOT_ENOUGH_REPLICAS text.
    pub fn check_min_isr_for_acks_all(&self) -> Result<(), String> {
        let st = self.state.read();
        let repl = st.replication.lock();
        if repl.is_under_min_isr() {
            return Err(self.not_enough_replicas_message(&repl));
        }
        Ok(())
    }

    fn not_enough_replicas_message(&self, repl: &LeaderState) -> String {
        format!(
            "The size of the current ISR {:?} is insufficient to satisfy the min.isr requirement of {} for partition {}-{}",
            repl.isr(),
            repl.effective_min_isr(),
            self.topic,
            self.index
        )
    }

    /// Kafka's `checkEnoughReplicasReachOffset` for a waiting acks=all produce: `None` while the
    /// HW is below `required_offset`; then `Ok` or NOT_ENOUGH_REPLICAS_AFTER_APPEND; a replica
    /// that is no longer leader answers NOT_LEADER_OR_FOLLOWER.
    pub fn check_enough_replicas_reach_offset(
        &self,
        required_offset: i64,
    ) -> Option<Result<(), ErrorCode>> {
        let st = self.state.read();
        if let Err(e) = self.check_leader(&st) {
            return Some(Err(e.error_code()));
        }
        let hw = self.lock_log(&st).high_watermark;
        let repl = st.replication.lock();
        repl.enough_replicas_reach_offset(hw, required_offset)
            .map(|ok| {
                if ok {
                    Ok(())
                } else {
                    Err(ErrorCode::NotEnoughReplicasAfterAppend)
                }
            })
    }

    /// Closes the log (flush, trim indexes); used at shutdown.
    pub fn close(&self) -> Result<(), StorageError> {
        self.with_log(|log| log.close())
    }

    pub fn recovery_point(&self) -> i64 {
        self.with_log(|log| log.recovery_point())
    }
}

mod cleaning;
#[cfg(test)]
mod tests;

//! One partition replica on this broker: its log, its offsets and its role.
//!
//! The log, producer state and high watermark change only inside [`Partition`] methods, under
//! the log lock, which is never held across an `.await`. Readers get the published offsets from
//! atomics without the lock. Fetches waiting for data register a [`Notify`] here and are woken by
//! the append that brings it (Kafka's fetch purgatory, keyed by partition).

use std::sync::atomic::{AtomicI32, AtomicI64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use strom_protocol::ErrorCode;
use strom_storage::{
    AppendOrigin, FetchDataInfo, LogAppendInfo, LogConfig, StorageError, UnifiedLog,
};
use tokio::sync::Notify;
use uuid::Uuid;

use crate::replication::{AlterPartitionProposal, AlterPartitionSender, LeaderAndIsr, LeaderState};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Leader,
    Follower { leader: i32 },
}

pub struct Partition {
    pub topic: String,
    pub topic_id: Uuid,
    pub index: i32,
    log: Mutex<UnifiedLog>,
    role: Mutex<Role>,
    leader_epoch: AtomicI32,
    high_watermark: AtomicI64,
    log_end_offset: AtomicI64,
    log_start_offset: AtomicI64,
    /// Replicas, committed ISR (as last published by the controller), follower fetch states and
    /// any pending ISR change. On a single node the ISR is just this broker, so the HW follows
    /// the LEO. Lock order: `log`, then `replication`.
    replication: Mutex<LeaderState>,
    /// Where ISR changes go (set by the replica manager); without one none are proposed.
    alter_partition_sender: Mutex<Option<Arc<dyn AlterPartitionSender>>>,
    node_id: i32,
    waiters: Mutex<Vec<Weak<Notify>>>,
}

impl Partition {
    pub fn new(
        topic: String,
        topic_id: Uuid,
        index: i32,
        node_id: i32,
        log: UnifiedLog,
        hw: i64,
    ) -> Self {
        let leo = log.log_end_offset();
        let lso = log.log_start_offset();
        Self {
            topic,
            topic_id,
            index,
            log: Mutex::new(log),
            role: Mutex::new(Role::Leader),
            leader_epoch: AtomicI32::new(0),
            high_watermark: AtomicI64::new(hw.clamp(lso, leo)),
            log_end_offset: AtomicI64::new(leo),
            log_start_offset: AtomicI64::new(lso),
            replication: Mutex::new(LeaderState::new(node_id)),
            alter_partition_sender: Mutex::new(None),
            node_id,
            waiters: Mutex::new(Vec::new()),
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
        let partition_epoch = self.replication.lock().partition_epoch();
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
    /// `makeLeader` / `makeFollower`). A new leader epoch resets the follower states and records
    /// the epoch's start offset; a changed ISR or partition epoch is a committed ISR change and
    /// ends a pending one. Re-applying the same registration changes nothing. `now_ms` starts
    /// the followers' catch-up clocks.
    pub fn apply_leader_and_isr(&self, reg: &LeaderAndIsr, now_ms: i64) {
        let was_leader = self.is_leader();
        let is_leader = reg.leader == self.node_id;
        *self.role.lock() = if is_leader {
            Role::Leader
        } else {
            Role::Follower { leader: reg.leader }
        };
        self.leader_epoch.store(reg.leader_epoch, Ordering::Release);
        let hw_moved = {
            let log = self.log.lock();
            let leo = log.log_end_offset();
            self.replication.lock().apply_registration(
                is_leader && !was_leader,
                reg.leader_epoch,
                reg.partition_epoch,
                &reg.replicas,
                &reg.isr,
                leo,
                now_ms,
            );
            self.maybe_increment_high_watermark(now_ms)
        };
        if hw_moved {
            tracing::debug!(topic = %self.topic, partition = self.index, isr = ?reg.isr,
                hw = self.high_watermark(), "high watermark moved on a registration change");
        }
        // Delayed produces re-check their ISR / leadership; fetches re-read.
        self.wake_waiters();
    }

    /// The low watermark (LW): the smallest log start offset over the replicas whose log start
    /// this leader knows (its own, and each follower's from its fetches), as Kafka's
    /// `lowWatermarkIfLeader`. DeleteRecords completes when it passes the requested offset.
    pub fn low_watermark(&self) -> i64 {
        let own = self.log_start_offset();
        let st = self.replication.lock();
        st.replicas()
            .iter()
            .filter(|&&r| r != self.node_id)
            .filter_map(|&r| st.follower(r).map(|f| f.log_start_offset))
            .filter(|&lso| lso >= 0)
            .fold(own, i64::min)
    }

    /// The committed ISR.
    pub fn isr(&self) -> Vec<i32> {
        self.replication.lock().isr().to_vec()
    }

    /// A snapshot of the leader-side replication state (followers, ISR, pending change).
    pub fn leader_state(&self) -> LeaderState {
        self.replication.lock().clone()
    }

    /// The topic's `min.insync.replicas` (the replica manager sets it from the topic config).
    pub fn set_min_insync_replicas(&self, n: i32) {
        self.replication.lock().min_insync_replicas = n;
    }
    pub fn min_insync_replicas(&self) -> i32 {
        self.replication.lock().min_insync_replicas
    }
    /// The brokers fenced or in controlled shutdown (the replica manager sets them from each
    /// image before applying the registration): the HW does not wait for them to join the ISR,
    /// and they do not rejoin it.
    pub fn set_ineligible_replicas(&self, ids: impl IntoIterator<Item = i32>) {
        self.replication.lock().ineligible_replicas = ids.into_iter().collect();
    }
    pub fn set_replica_lag_time_max_ms(&self, ms: i64) {
        self.replication.lock().replica_lag_time_max_ms = ms;
    }
    pub fn set_alter_partition_sender(&self, sender: Arc<dyn AlterPartitionSender>) {
        *self.alter_partition_sender.lock() = Some(sender);
    }

    pub fn role(&self) -> Role {
        *self.role.lock()
    }
    pub fn is_leader(&self) -> bool {
        self.role() == Role::Leader
    }
    pub fn leader_epoch(&self) -> i32 {
        self.leader_epoch.load(Ordering::Acquire)
    }
    pub fn high_watermark(&self) -> i64 {
        self.high_watermark.load(Ordering::Acquire)
    }
    pub fn log_end_offset(&self) -> i64 {
        self.log_end_offset.load(Ordering::Acquire)
    }
    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset.load(Ordering::Acquire)
    }

    /// HW = min LEO over the ISR (see [`LeaderState::high_watermark_candidate`]). With only this
    /// replica in the ISR that is its own LEO. Only a leader moves it, and only up. Returns
    /// whether it moved; the caller wakes the waiters. `now_ms` decides which followers outside
    /// the ISR are caught up enough to be waited for.
    fn maybe_increment_high_watermark(&self, now_ms: i64) -> bool {
        if !self.is_leader() {
            return false;
        }
        let leo = self.log_end_offset.load(Ordering::Acquire);
        let candidate = self
            .replication
            .lock()
            .high_watermark_candidate(leo, now_ms);
        match candidate {
            Some(hw) => self.high_watermark.fetch_max(hw, Ordering::AcqRel) < hw,
            None => false,
        }
    }

    /// Kafka's `appendRecordsToLeader`.
    pub fn append_records_to_leader(
        &self,
        records: &[u8],
        origin: AppendOrigin,
        now_ms: i64,
    ) -> Result<LogAppendInfo, StorageError> {
        let info = {
            let mut log = self.log.lock();
            let info = log.append_as_leader(records, self.leader_epoch(), origin, now_ms)?;
            self.log_end_offset
                .store(log.log_end_offset(), Ordering::Release);
            self.maybe_increment_high_watermark(now_ms);
            info
        };
        self.wake_waiters();
        Ok(info)
    }

    /// Reads for a consumer (up to the HW) or a replica (`max_offset` = LEO).
    pub fn read(
        &self,
        fetch_offset: i64,
        max_bytes: usize,
        min_one_message: bool,
        up_to_hw: bool,
    ) -> Result<FetchDataInfo, StorageError> {
        let log = self.log.lock();
        let max_offset = if up_to_hw {
            self.high_watermark()
        } else {
            log.log_end_offset()
        };
        log.read(fetch_offset, max_bytes, max_offset, min_one_message)
    }

    pub fn with_log<T>(&self, f: impl FnOnce(&mut UnifiedLog) -> T) -> T {
        let mut log = self.log.lock();
        let out = f(&mut log);
        self.log_start_offset
            .store(log.log_start_offset(), Ordering::Release);
        self.log_end_offset
            .store(log.log_end_offset(), Ordering::Release);
        out
    }

    pub fn update_config(&self, config: LogConfig) {
        self.with_log(|log| {
            if *log.config() != config {
                log.update_config(config)
            }
        });
    }

    /// Registers a waiting fetch; it is notified by the next append.
    pub fn register_waiter(&self, waiter: &Arc<Notify>) {
        let mut w = self.waiters.lock();
        w.retain(|x| x.strong_count() > 0);
        w.push(Arc::downgrade(waiter));
    }

    fn wake_waiters(&self) {
        let waiters = std::mem::take(&mut *self.waiters.lock());
        for w in waiters {
            if let Some(n) = w.upgrade() {
                n.notify_one();
            }
        }
    }

    // ---- Leader side of replication ----

    /// Records a follower's fetch (Kafka's `updateFollowerFetchState`): its fetch offset is its
    /// LEO; `leader_log_end_offset` is this log's end before the read. May propose an ISR
    /// expansion and move the HW (waking delayed produces). `false`: not an assigned replica.
    pub fn update_follower_fetch_state(
        &self,
        follower: i32,
        fetch_offset: i64,
        follower_log_start_offset: i64,
        now_ms: i64,
        leader_log_end_offset: i64,
    ) -> bool {
        let (leo_moved, proposal) = {
            let mut st = self.replication.lock();
            let Some(moved) = st.update_follower_fetch_state(
                follower,
                fetch_offset,
                follower_log_start_offset,
                now_ms,
                leader_log_end_offset,
            ) else {
                return false;
            };
            let proposal = (self.alter_partition_sender.lock().is_some()
                && st.isr_expand_candidate(follower, self.high_watermark()))
            .then(|| {
                let isr = st.prepare_isr_expand(follower);
                tracing::info!(topic = %self.topic, partition = self.index, follower, ?isr, "expanding ISR");
                self.proposal(&st, isr)
            });
            (moved, proposal)
        };
        if let Some(p) = proposal {
            self.submit(p);
        }
        if leo_moved && self.maybe_increment_high_watermark(now_ms) {
            self.wake_waiters();
        }
        true
    }

    /// Kafka's `maybeShrinkIsr`, run every `replica.lag.time.max.ms / 2`: proposes the ISR
    /// without the followers not caught up within `replica.lag.time.max.ms`. The old ISR stays
    /// in use until the change comes back committed.
    pub fn maybe_shrink_isr(&self, now_ms: i64) -> Option<AlterPartitionProposal> {
        if !self.is_leader() || self.alter_partition_sender.lock().is_none() {
            return None;
        }
        let leo = self.log_end_offset();
        let proposal = {
            let mut st = self.replication.lock();
            let lag = st.replica_lag_time_max_ms;
            let out = st.isr_shrink_candidates(now_ms, lag, leo);
            if out.is_empty() {
                return None;
            }
            let isr = st.prepare_isr_shrink(&out);
            tracing::info!(topic = %self.topic, partition = self.index, out_of_sync = ?out, ?isr, "shrinking ISR");
            self.proposal(&st, isr)
        };
        self.submit(proposal.clone());
        Some(proposal)
    }

    /// Whether `replica` is a follower in this leader's assignment.
    pub fn is_known_replica(&self, replica: i32) -> bool {
        replica != self.node_id && self.replication.lock().follower(replica).is_some()
    }

    /// The controller refused an ISR change (or it was lost): forget it so it can be proposed
    /// again. Ignored if the partition epoch moved on meanwhile.
    pub fn alter_partition_failed(&self, partition_epoch: i32) {
        let mut st = self.replication.lock();
        if st.partition_epoch() == partition_epoch {
            st.clear_pending();
        }
    }

    fn proposal(&self, st: &LeaderState, new_isr: Vec<i32>) -> AlterPartitionProposal {
        AlterPartitionProposal {
            topic: self.topic.clone(),
            topic_id: self.topic_id,
            partition: self.index,
            leader_id: self.node_id,
            leader_epoch: self.leader_epoch(),
            partition_epoch: st.partition_epoch(),
            new_isr,
        }
    }

    fn submit(&self, p: AlterPartitionProposal) {
        let sender = self.alter_partition_sender.lock().clone();
        if let Some(s) = sender {
            s.submit(p);
        }
    }

    /// OffsetForLeaderEpoch / the fetch divergence check on a leader: the log's epoch cache plus
    /// the current epoch from its start offset, which Kafka writes into the cache on becoming
    /// leader and Strom only on the epoch's first append.
    pub fn end_offset_for_epoch(&self, epoch: i32) -> (i32, i64) {
        let log = self.log.lock();
        let answer = log.end_offset_for_epoch(epoch);
        if !self.is_leader() || epoch < 0 {
            return answer;
        }
        let current = self.leader_epoch();
        let start = self.replication.lock().leader_epoch_start_offset();
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

    /// acks=all is refused before the append while the ISR is below the effective
    /// `min.insync.replicas` (NOT_ENOUGH_REPLICAS).
    pub fn check_min_isr_for_acks_all(&self) -> Result<(), String> {
        let st = self.replication.lock();
        if st.is_under_min_isr() {
            return Err(format!(
                "The size of the current ISR {:?} is insufficient to satisfy the min.isr requirement of {} for partition {}-{}",
                st.isr(),
                st.effective_min_isr(),
                self.topic,
                self.index
            ));
        }
        Ok(())
    }

    /// Kafka's `checkEnoughReplicasReachOffset` for a waiting acks=all produce: `None` while the
    /// HW is below `required_offset`; then `Ok` or NOT_ENOUGH_REPLICAS_AFTER_APPEND; a replica
    /// that is no longer leader answers NOT_LEADER_OR_FOLLOWER.
    pub fn check_enough_replicas_reach_offset(
        &self,
        required_offset: i64,
    ) -> Option<Result<(), ErrorCode>> {
        if !self.is_leader() {
            return Some(Err(ErrorCode::NotLeaderOrFollower));
        }
        let hw = self.high_watermark();
        self.replication
            .lock()
            .enough_replicas_reach_offset(hw, required_offset)
            .map(|ok| {
                if ok {
                    Ok(())
                } else {
                    Err(ErrorCode::NotEnoughReplicasAfterAppend)
                }
            })
    }

    // ---- Follower side of replication ----

    /// The newest epoch in this replica's log (a follower's `last_fetched_epoch`).
    pub fn latest_epoch(&self) -> Option<i32> {
        self.log.lock().latest_epoch()
    }

    /// Kafka's `appendRecordsToFollowerOrFutureReplica`: batches as the leader wrote them. An
    /// empty log whose start falls inside the first batch restarts at that batch.
    pub fn append_records_to_follower(
        &self,
        records: &[u8],
        now_ms: i64,
    ) -> Result<LogAppendInfo, StorageError> {
        let info = self.with_log(|log| match log.append_as_follower(records, now_ms) {
            Err(StorageError::UnexpectedAppendOffset {
                first_offset,
                log_end,
            }) if log_end == log.log_start_offset() && first_offset < log_end => {
                log.truncate_fully_and_start_at(first_offset)?;
                log.append_as_follower(records, now_ms)
            }
            other => other,
        })?;
        self.wake_waiters();
        Ok(info)
    }

    /// A follower takes the leader's HW, capped at its own LEO (Kafka's follower
    /// `updateHighWatermark`, which may also lower it).
    pub fn update_follower_high_watermark(&self, leader_hw: i64) -> i64 {
        let _log = self.log.lock();
        let hw = leader_hw
            .min(self.log_end_offset())
            .max(self.log_start_offset());
        self.high_watermark.store(hw, Ordering::Release);
        hw
    }

    /// A follower follows the leader's log start (DeleteRecords, retention) up to its own HW.
    pub fn follower_maybe_increment_log_start_offset(
        &self,
        leader_log_start: i64,
    ) -> Result<(), StorageError> {
        let hw = self.high_watermark();
        if leader_log_start <= self.log_start_offset() || leader_log_start > hw {
            return Ok(());
        }
        self.with_log(|log| log.maybe_increment_log_start_offset(leader_log_start))
    }

    /// Truncates this replica's log to `offset` (divergence); the HW never exceeds the LEO.
    pub fn truncate_to(&self, offset: i64) -> Result<(), StorageError> {
        self.with_log(|log| log.truncate_to(offset))?;
        let _log = self.log.lock();
        let leo = self.log_end_offset();
        if self.high_watermark() > leo {
            self.high_watermark.store(leo, Ordering::Release);
        }
        Ok(())
    }

    /// Empties this replica's log and restarts it at `offset` (behind the leader's log start).
    pub fn truncate_fully_and_start_at(&self, offset: i64) -> Result<(), StorageError> {
        self.with_log(|log| log.truncate_fully_and_start_at(offset))?;
        self.high_watermark.store(offset, Ordering::Release);
        Ok(())
    }

    /// Closes the log (flush, trim indexes); used at shutdown.
    pub fn close(&self) -> Result<(), StorageError> {
        self.log.lock().close()
    }

    pub fn recovery_point(&self) -> i64 {
        self.log.lock().recovery_point()
    }
}

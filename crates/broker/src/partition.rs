//! One partition replica on this broker: its log, its offsets and its role.
//!
//! The log, producer state and high watermark change only inside [`Partition`] methods, under
//! the log lock, which is never held across an `.await`. Readers get the published offsets from
//! atomics without the lock. Fetches waiting for data register a [`Notify`] here and are woken by
//! the append that brings it (Kafka's fetch purgatory, keyed by partition).

use std::sync::atomic::{AtomicI32, AtomicI64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use strom_storage::{
    AppendOrigin, FetchDataInfo, LogAppendInfo, LogConfig, StorageError, UnifiedLog,
};
use tokio::sync::Notify;
use uuid::Uuid;

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
    /// In-sync replica set as last published by the controller. On a single node it is just this
    /// broker, so the HW follows the LEO.
    isr: Mutex<Vec<i32>>,
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
            isr: Mutex::new(vec![node_id]),
            node_id,
            waiters: Mutex::new(Vec::new()),
        }
    }

    /// Applies the controller's view of this partition (leader, epoch, ISR).
    pub fn update_registration(&self, leader: i32, leader_epoch: i32, isr: Vec<i32>) {
        *self.role.lock() = if leader == self.node_id {
            Role::Leader
        } else {
            Role::Follower { leader }
        };
        self.leader_epoch.store(leader_epoch, Ordering::Release);
        *self.isr.lock() = isr;
        let _guard = self.log.lock();
        self.maybe_increment_high_watermark();
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

    /// HW = min LEO over the ISR. With only this replica in the ISR that is its own LEO; follower
    /// LEOs join the minimum when replication lands. Called with the log lock held.
    fn maybe_increment_high_watermark(&self) {
        let isr = self.isr.lock();
        if isr.len() == 1 && isr[0] == self.node_id {
            let leo = self.log_end_offset.load(Ordering::Acquire);
            self.high_watermark.fetch_max(leo, Ordering::AcqRel);
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
            self.maybe_increment_high_watermark();
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

    /// Closes the log (flush, trim indexes); used at shutdown.
    pub fn close(&self) -> Result<(), StorageError> {
        self.log.lock().close()
    }

    pub fn recovery_point(&self) -> i64 {
        self.log.lock().recovery_point()
    }
}

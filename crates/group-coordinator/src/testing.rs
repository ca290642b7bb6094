//! An in-memory `__consumer_offsets` for tests of the coordinator without a broker: a
//! [`MemPartitions`] is both the runtime's partition writer and its loader; the high
//! watermark follows each append at once (one replica) unless a test holds it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;
use strom_coordinator_common::runtime::{
    AppendResult, CoordinatorLoader, PartitionWriter, RawRecord, TopicPartition, WriteError,
};
use strom_protocol::ErrorCode;

#[derive(Default)]
pub struct MemPartitions {
    pub logs: Mutex<HashMap<TopicPartition, Vec<RawRecord>>>,
    /// When set, the HW stays where it is (followers behind); `release_hw` moves it.
    pub hold_hw: AtomicBool,
    hw: Mutex<HashMap<TopicPartition, i64>>,
    /// The next append fails with this code.
    pub fail_next: Mutex<Option<ErrorCode>>,
}

impl MemPartitions {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// The records of `tp` so far.
    pub fn records(&self, tp: &TopicPartition) -> Vec<RawRecord> {
        self.logs.lock().get(tp).cloned().unwrap_or_default()
    }

    /// Moves `tp`'s HW to its log end; returns it (tell the service with `on_high_watermark`).
    pub fn release_hw(&self, tp: &TopicPartition) -> i64 {
        let end = self.logs.lock().get(tp).map_or(0, |l| l.len() as i64);
        self.hw.lock().insert(tp.clone(), end);
        end
    }
}

impl PartitionWriter for MemPartitions {
    fn append(
        &self,
        tp: &TopicPartition,
        _leader_epoch: i32,
        records: &[RawRecord],
    ) -> Result<AppendResult, WriteError> {
        if let Some(code) = self.fail_next.lock().take() {
            return Err(WriteError {
                code,
                message: "injected".into(),
            });
        }
        let mut logs = self.logs.lock();
        let log = logs.entry(tp.clone()).or_default();
        let base = log.len() as i64;
        log.extend(records.iter().cloned());
        let end = log.len() as i64;
        let mut hw = self.hw.lock();
        let h = hw.entry(tp.clone()).or_insert(0);
        if !self.hold_hw.load(Ordering::SeqCst) {
            *h = end;
        }
        Ok(AppendResult {
            base_offset: base,
            last_offset: end - 1,
            high_watermark: *h,
        })
    }
}

impl CoordinatorLoader for MemPartitions {
    fn load(
        &self,
        tp: &TopicPartition,
        _leader_epoch: i32,
        sink: &mut dyn FnMut(i64, Bytes, Option<Bytes>),
    ) -> Result<AppendResult, WriteError> {
        let log = self.records(tp);
        for (i, (k, v)) in log.iter().enumerate() {
            sink(i as i64, k.clone(), v.clone());
        }
        let end = log.len() as i64;
        let hw = *self.hw.lock().entry(tp.clone()).or_insert(end);
        Ok(AppendResult {
            base_offset: 0,
            last_offset: end - 1,
            high_watermark: hw,
        })
    }
}

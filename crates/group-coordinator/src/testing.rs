//! An in-memory `__consumer_offsets` for tests of the coordinator without a broker: a
//! [`MemPartitions`] is both the runtime's partition writer and its loader; the high
//! watermark follows each append at once (one replica) unless a test holds it. Transactional
//! batches and end-transaction markers are kept as Kafka's log has them: their records in the
//! log (a marker as its control record), which offsets are whose in `transactional`.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;
use strom_coordinator_common::runtime::{
    AppendResult, CoordinatorLoader, LoadedRecord, PartitionWriter, RawRecord, TopicPartition,
    TxnProducer, TxnResult, WriteError,
};
use strom_protocol::memory_records::EndTxnMarker;
use strom_protocol::ErrorCode;

/// What an offset of a transactional batch or marker is: its producer, and the marker.
pub type TxnEntry = (TxnProducer, Option<EndTxnMarker>);

#[derive(Default)]
pub struct MemPartitions {
    pub logs: Mutex<HashMap<TopicPartition, Vec<RawRecord>>>,
    /// Offsets written transactionally or holding a marker, per partition.
    pub transactional: Mutex<HashMap<TopicPartition, BTreeMap<i64, TxnEntry>>>,
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

impl MemPartitions {
    /// The transactional entries of `tp` so far (offset, producer, marker).
    pub fn transactional_entries(&self, tp: &TopicPartition) -> BTreeMap<i64, TxnEntry> {
        self.transactional
            .lock()
            .get(tp)
            .cloned()
            .unwrap_or_default()
    }

    fn append_as(
        &self,
        tp: &TopicPartition,
        records: &[RawRecord],
        txn: Option<TxnEntry>,
    ) -> Result<AppendResult, WriteError> {
        let r = self.append_records(tp, records)?;
        if let Some(entry) = txn {
            let mut t = self.transactional.lock();
            let m = t.entry(tp.clone()).or_default();
            for o in r.base_offset..=r.last_offset {
                m.insert(o, entry);
            }
        }
        Ok(r)
    }

    fn append_records(
        &self,
        tp: &TopicPartition,
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

impl PartitionWriter for MemPartitions {
    fn append(
        &self,
        tp: &TopicPartition,
        _leader_epoch: i32,
        records: &[RawRecord],
    ) -> Result<AppendResult, WriteError> {
        self.append_as(tp, records, None)
    }

    fn append_transactional(
        &self,
        tp: &TopicPartition,
        _leader_epoch: i32,
        producer: TxnProducer,
        records: &[RawRecord],
    ) -> Result<AppendResult, WriteError> {
        self.append_as(tp, records, Some((producer, None)))
    }

    fn append_end_txn_marker(
        &self,
        tp: &TopicPartition,
        _leader_epoch: i32,
        producer: TxnProducer,
        coordinator_epoch: i32,
        result: TxnResult,
    ) -> Result<AppendResult, WriteError> {
        // The control record as Kafka writes it: key (version 0, type), value (version 0,
        // coordinator epoch).
        let mut key = 0i16.to_be_bytes().to_vec();
        key.extend_from_slice(&result.control_type().to_be_bytes());
        let mut value = 0i16.to_be_bytes().to_vec();
        value.extend_from_slice(&coordinator_epoch.to_be_bytes());
        let marker = EndTxnMarker {
            result,
            coordinator_epoch,
        };
        self.append_as(
            tp,
            &[(Bytes::from(key), Some(Bytes::from(value)))],
            Some((producer, Some(marker))),
        )
    }
}

impl CoordinatorLoader for MemPartitions {
    fn load(
        &self,
        tp: &TopicPartition,
        _leader_epoch: i32,
        sink: &mut dyn FnMut(i64, Bytes, Option<Bytes>),
    ) -> Result<AppendResult, WriteError> {
        self.load_records(tp, _leader_epoch, &mut |r| {
            if let LoadedRecord::Record {
                offset, key, value, ..
            } = r
            {
                sink(offset, key, value)
            }
        })
    }

    fn load_records(
        &self,
        tp: &TopicPartition,
        _leader_epoch: i32,
        sink: &mut dyn FnMut(LoadedRecord),
    ) -> Result<AppendResult, WriteError> {
        let log = self.records(tp);
        let txn = self.transactional_entries(tp);
        for (i, (k, v)) in log.iter().enumerate() {
            let offset = i as i64;
            sink(match txn.get(&offset) {
                Some((producer, Some(marker))) => LoadedRecord::EndTxnMarker {
                    offset,
                    producer: *producer,
                    marker: *marker,
                },
                entry => LoadedRecord::Record {
                    offset,
                    producer: entry.map(|(p, _)| *p),
                    key: k.clone(),
                    value: v.clone(),
                },
            });
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

//! The coordinator runtime's way into this broker's partitions (Kafka's
//! `CoordinatorPartitionWriter` and `CoordinatorLoaderImpl`): appends a shard's records to the
//! internal partition it leads, and reads the partition back from its log start when the shard
//! is loaded.

use std::sync::Arc;

use bytes::Bytes;
use strom_coordinator_common::runtime::{
    AppendResult, CoordinatorLoader, LoadedRecord, PartitionWriter, RawRecord, TopicPartition,
    TxnProducer, TxnResult, WriteError,
};
use strom_protocol::batch::{peek_batch_size, BatchView};
use strom_protocol::memory_records::{end_txn_marker, parse_end_txn_marker};
use strom_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use strom_protocol::ErrorCode;
use strom_storage::AppendOrigin;

use crate::partition::{FetchIsolation, Partition, PartitionError, PartitionFetch};
use crate::replica_manager::ReplicaManager;

/// How much of the log one read takes while loading (Kafka's `offsets.load.buffer.size`,
/// 5 MiB); a larger first batch is still read whole.
const LOAD_BUFFER_BYTES: i32 = 5 * 1024 * 1024;

/// Both ends of the runtime's I/O over the replica manager's partitions.
pub struct CoordinatorPartitions {
    replica_manager: Arc<ReplicaManager>,
}

impl CoordinatorPartitions {
    pub fn new(replica_manager: Arc<ReplicaManager>) -> Arc<Self> {
        Arc::new(Self { replica_manager })
    }

    fn partition(&self, tp: &TopicPartition) -> Result<Arc<Partition>, WriteError> {
        self.replica_manager
            .get_partition_or_error(&tp.0, tp.1)
            .map_err(|code| WriteError {
                code,
                message: format!("{}-{} is not hosted on this broker", tp.0, tp.1),
            })
    }

    /// A partition's refusal as the runtime sees it; a failed log also takes the replica
    /// offline, as a failed produce does.
    fn refused(&self, partition: &Partition, e: PartitionError) -> WriteError {
        if let PartitionError::Storage(se) = &e {
            self.replica_manager.handle_storage_error(partition, se);
        }
        WriteError {
            code: e.error_code(),
            message: e.to_string(),
        }
    }
}

impl CoordinatorPartitions {
    /// Appends one batch built by the runtime as leader with origin Coordinator at
    /// `leader_epoch` (an empty one writes nothing).
    fn append_batch(
        &self,
        tp: &TopicPartition,
        leader_epoch: i32,
        batch: &[u8],
        now: i64,
    ) -> Result<AppendResult, WriteError> {
        let partition = self.partition(tp)?;
        // The shard's task may block on the disk here: off the async workers.
        let info = crate::disk_io::blocking(|| {
            partition.append_records_to_leader(
                batch,
                AppendOrigin::Coordinator,
                -1,
                leader_epoch,
                now,
            )
        })
        .map_err(|e| self.refused(&partition, e))?;
        Ok(AppendResult {
            base_offset: info.first_offset,
            last_offset: info.last_offset,
            // With one replica (or followers already caught up) the append moved it already.
            high_watermark: partition.high_watermark(),
        })
    }
}

/// One transactional batch of `producer` (Kafka's coordinator runtime builds it with
/// `MemoryRecordsBuilder`: the producer's id and epoch, base sequence 0, the transactional
/// attribute, magic 2, uncompressed, every record stamped `timestamp`).
fn transactional_batch(producer: TxnProducer, records: &[RawRecord], timestamp: i64) -> Vec<u8> {
    let records: Vec<Record> = records
        .iter()
        .enumerate()
        .map(|(i, (key, value))| Record {
            transactional: true,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: producer.producer_id,
            producer_epoch: producer.producer_epoch,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: i as i32,
            timestamp,
            key: Some(key.clone()),
            value: value.clone(),
            headers: Default::default(),
        })
        .collect();
    let mut buf = bytes::BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .expect("encoding an uncompressed batch cannot fail");
    buf.to_vec()
}

fn corrupt(tp: &TopicPartition, offset: i64, why: impl std::fmt::Display) -> WriteError {
    WriteError {
        code: ErrorCode::CorruptMessage,
        message: format!("cannot load {}-{} at offset {offset}: {why}", tp.0, tp.1),
    }
}

impl PartitionWriter for CoordinatorPartitions {
    /// One batch, magic 2, uncompressed, no producer id, stamped now (Kafka's coordinator
    /// writes `offsets.topic.compression.codec`, none by default), appended as leader with
    /// origin Coordinator and acks=all at the epoch the shard was loaded in: a broker that lost
    /// leadership meanwhile is refused (NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH) and
    /// nothing is written.
    fn append(
        &self,
        tp: &TopicPartition,
        leader_epoch: i32,
        records: &[RawRecord],
    ) -> Result<AppendResult, WriteError> {
        let partition = self.partition(tp)?;
        if records.is_empty() {
            let end = partition.log_end_offset();
            return Ok(AppendResult {
                base_offset: end,
                last_offset: end - 1,
                high_watermark: partition.high_watermark(),
            });
        }
        let now = crate::now_ms();
        let batch = strom_protocol::memory_records::with_records(records, now);
        self.append_batch(tp, leader_epoch, &batch, now)
    }

    /// The records of a TxnOffsetCommit as one transactional batch of the producer, appended
    /// as any coordinator batch: the partition's producer state opens (or continues) the
    /// producer's transaction with it.
    fn append_transactional(
        &self,
        tp: &TopicPartition,
        leader_epoch: i32,
        producer: TxnProducer,
        records: &[RawRecord],
    ) -> Result<AppendResult, WriteError> {
        if records.is_empty() {
            return self.append(tp, leader_epoch, records);
        }
        let now = crate::now_ms();
        let batch = transactional_batch(producer, records, now);
        self.append_batch(tp, leader_epoch, &batch, now)
    }

    /// The end-transaction marker, as the group coordinator writes it on WriteTxnMarkers
    /// (Kafka's runtime appends `MemoryRecords.withEndTransactionMarker` with the transaction
    /// coordinator's epoch through this same leader append, origin Coordinator).
    fn append_end_txn_marker(
        &self,
        tp: &TopicPartition,
        leader_epoch: i32,
        producer: TxnProducer,
        coordinator_epoch: i32,
        result: TxnResult,
    ) -> Result<AppendResult, WriteError> {
        let now = crate::now_ms();
        let batch = end_txn_marker(
            producer.producer_id,
            producer.producer_epoch,
            coordinator_epoch,
            result,
            now,
        );
        self.append_batch(tp, leader_epoch, &batch, now)
    }
}

impl CoordinatorLoader for CoordinatorPartitions {
    /// The records of [`Self::load_records`] without producers or markers.
    fn load(
        &self,
        tp: &TopicPartition,
        leader_epoch: i32,
        sink: &mut dyn FnMut(i64, Bytes, Option<Bytes>),
    ) -> Result<AppendResult, WriteError> {
        self.load_records(tp, leader_epoch, &mut |r| {
            if let LoadedRecord::Record {
                offset, key, value, ..
            } = r
            {
                sink(offset, key, value)
            }
        })
    }

    /// Reads the local log from its start to the end it had when the load began (this shard
    /// is the only writer while it leads, so nothing is appended meanwhile), through the
    /// leader's read path at `leader_epoch` (a newer leadership fails the load). Batches
    /// written by Kafka may be compressed. Each record comes with its batch's producer (a
    /// TxnOffsetCommit's transactional batch), each end-transaction marker as one (Kafka's
    /// loader replays both); other control records and records without a key are skipped.
    fn load_records(
        &self,
        tp: &TopicPartition,
        leader_epoch: i32,
        sink: &mut dyn FnMut(LoadedRecord),
    ) -> Result<AppendResult, WriteError> {
        let partition = self.partition(tp)?;
        // Checked before reading too: an empty log is never read.
        let current = partition
            .leader_epoch_if_leader()
            .map_err(|e| self.refused(&partition, e))?;
        if current != leader_epoch {
            let e = if leader_epoch < current {
                PartitionError::FencedLeaderEpoch {
                    requested: leader_epoch,
                    current,
                }
            } else {
                PartitionError::UnknownLeaderEpoch {
                    requested: leader_epoch,
                    current,
                }
            };
            return Err(self.refused(&partition, e));
        }
        let start = partition.offset_snapshot();
        let end = start.log_end_offset;
        let mut offset = start.log_start_offset;
        let mut keyless = 0u64;
        while offset < end {
            let fetch = PartitionFetch {
                fetch_offset: offset,
                current_leader_epoch: Some(leader_epoch),
                last_fetched_epoch: None,
                log_start_offset: -1,
                max_bytes: LOAD_BUFFER_BYTES,
            };
            let info = partition
                .fetch_records(
                    None,
                    -1,
                    FetchIsolation::LogEnd,
                    &fetch,
                    LOAD_BUFFER_BYTES,
                    true,
                    true,
                    crate::now_ms(),
                )
                .map_err(|e| self.refused(&partition, e))?;
            let mut buf = info
                .records
                .read_all()
                .map_err(|e| self.refused(&partition, e.into()))?;
            if buf.is_empty() {
                return Err(corrupt(tp, offset, "no batch below the log end"));
            }
            while !buf.is_empty() && offset < end {
                let size = peek_batch_size(&buf).map_err(|e| corrupt(tp, offset, e))?;
                if size > buf.len() {
                    // A partial batch at the end of the read: the next read starts with it.
                    break;
                }
                let mut batch = buf.split_to(size);
                let view = BatchView::parse(&batch).map_err(|e| corrupt(tp, offset, e))?;
                let next = view.next_offset();
                let producer = (view.producer_id() >= 0).then(|| TxnProducer {
                    producer_id: view.producer_id(),
                    producer_epoch: view.producer_epoch(),
                });
                let is_control = view.is_control();
                let set =
                    RecordBatchDecoder::decode(&mut batch).map_err(|e| corrupt(tp, offset, e))?;
                for r in set.records {
                    if r.offset < offset {
                        continue;
                    }
                    if is_control {
                        let marker = r
                            .key
                            .as_ref()
                            .and_then(|k| parse_end_txn_marker(k, r.value.as_deref()));
                        if let (Some(marker), Some(producer)) = (marker, producer) {
                            sink(LoadedRecord::EndTxnMarker {
                                offset: r.offset,
                                producer,
                                marker,
                            });
                        }
                        continue;
                    }
                    match r.key {
                        Some(key) => sink(LoadedRecord::Record {
                            offset: r.offset,
                            producer,
                            key,
                            value: r.value,
                        }),
                        None => keyless += 1,
                    }
                }
                offset = offset.max(next);
            }
        }
        if keyless > 0 {
            tracing::warn!(topic = %tp.0, partition = tp.1, keyless, "records without a key skipped while loading");
        }
        Ok(AppendResult {
            base_offset: start.log_start_offset,
            last_offset: end - 1,
            high_watermark: partition.high_watermark().min(end),
        })
    }
}

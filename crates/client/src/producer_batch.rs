//! A producer batch: records of one partition, encoded once when it is closed and retried
//! unchanged, with the producer id, epoch and base sequence it was given.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use strom_protocol::kafka::indexmap::IndexMap;
use strom_protocol::kafka::protocol::StrBytes;
use strom_protocol::records::{
    Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType, NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE,
};
use tokio::sync::oneshot;

pub use strom_protocol::records::Compression;

use crate::error::{Error, Result};
pub use crate::idempotence::ProducerIdAndEpoch;

/// A record to send.
#[derive(Debug, Clone, Default)]
pub struct ProducerRecord {
    pub topic: String,
    /// `None`: chosen by the partitioner.
    pub partition: Option<i32>,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Option<Bytes>)>,
    /// Creation time in ms since the epoch; `None`: now.
    pub timestamp: Option<i64>,
}

/// Where a record was written: `(partition, offset)`.
pub type RecordMetadata = (i32, i64);

pub(crate) type Delivery = oneshot::Sender<Result<RecordMetadata>>;

/// Resolves once the record is acknowledged (or failed).
#[derive(Debug)]
pub struct DeliveryFuture {
    pub(crate) rx: oneshot::Receiver<Result<RecordMetadata>>,
}

impl Future for DeliveryFuture {
    type Output = Result<RecordMetadata>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.rx)
            .poll(cx)
            .map(|r| r.unwrap_or(Err(Error::Closed)))
    }
}

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// A batch of records for one partition. Built open, then closed (encoded) exactly once; a
/// closed batch is retried byte-for-byte unchanged.
#[derive(Debug)]
pub struct ProducerBatch {
    pub topic: String,
    pub partition: i32,
    /// Creation order, used to keep retried batches in order.
    pub id: u64,
    pub(crate) records: Vec<Record>,
    pub(crate) deliveries: Vec<Delivery>,
    pub(crate) size: usize,
    pub(crate) created: Instant,
    /// Set once the batch is closed.
    pub(crate) encoded: Option<Bytes>,
    pub attempts: u32,
    pub(crate) retry_at: Option<Instant>,
    /// No more records fit: send it without waiting for linger.
    pub(crate) full: bool,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    /// Set when an epoch bump rewrote the producer state of this already sent batch
    /// (Kafka's `ProducerBatch.sequenceHasBeenReset`).
    pub(crate) sequence_has_been_reset: bool,
    /// Part of a transaction: the batch's transactional attribute is set when it is encoded.
    pub transactional: bool,
}

/// Kafka's `DefaultRecordBatch.incrementSequence`: sequences wrap from `i32::MAX` to 0.
pub fn increment_sequence(sequence: i32, increment: i32) -> i32 {
    if sequence > i32::MAX - increment {
        increment - (i32::MAX - sequence) - 1
    } else {
        sequence + increment
    }
}

/// Bytes of a RecordBatch v2 header.
const BATCH_OVERHEAD: usize = 61;

pub(crate) fn record_size(
    key: &Option<Bytes>,
    value: &Option<Bytes>,
    headers: &[(String, Option<Bytes>)],
) -> usize {
    let h: usize = headers
        .iter()
        .map(|(k, v)| k.len() + v.as_ref().map_or(0, |v| v.len()) + 4)
        .sum();
    // attributes, timestamp and offset deltas, lengths: at most ~21 bytes.
    21 + key.as_ref().map_or(0, |k| k.len()) + value.as_ref().map_or(0, |v| v.len()) + h
}

impl ProducerBatch {
    /// An empty open batch.
    pub fn new(topic: &str, partition: i32, id: u64) -> Self {
        ProducerBatch {
            topic: topic.to_string(),
            partition,
            id,
            records: Vec::new(),
            deliveries: Vec::new(),
            size: BATCH_OVERHEAD,
            created: Instant::now(),
            encoded: None,
            attempts: 0,
            retry_at: None,
            full: false,
            producer_id: NO_PRODUCER_ID,
            producer_epoch: NO_PRODUCER_EPOCH,
            base_sequence: NO_SEQUENCE,
            sequence_has_been_reset: false,
            transactional: false,
        }
    }

    /// True once a base sequence is assigned (idempotence).
    pub fn has_sequence(&self) -> bool {
        self.base_sequence != NO_SEQUENCE
    }

    /// The sequence of the last record (wrapping at `i32::MAX`), or -1 without a sequence.
    pub fn last_sequence(&self) -> i32 {
        if !self.has_sequence() || self.records.is_empty() {
            return NO_SEQUENCE;
        }
        increment_sequence(self.base_sequence, self.records.len() as i32 - 1)
    }

    /// Assigns producer id, epoch and base sequence to a batch about to be closed (Kafka's
    /// `setProducerState`). Refused once the batch is closed: a sent batch keeps its
    /// sequence, or a retry could be written twice.
    pub fn set_producer_state(
        &mut self,
        pid: ProducerIdAndEpoch,
        base_sequence: i32,
    ) -> Result<()> {
        if self.is_closed() {
            return Err(Error::Protocol(
                "Trying to set producer state of an already closed batch. This indicates a bug on the client."
                    .into(),
            ));
        }
        self.producer_id = pid.producer_id;
        self.producer_epoch = pid.epoch;
        self.base_sequence = base_sequence;
        Ok(())
    }

    /// Rewrites the producer state of a sent batch after an epoch bump (Kafka's
    /// `resetProducerState`): the batch is reopened and encoded again with the new values.
    pub fn reset_producer_state(&mut self, pid: ProducerIdAndEpoch, base_sequence: i32) {
        self.producer_id = pid.producer_id;
        self.producer_epoch = pid.epoch;
        self.base_sequence = base_sequence;
        self.encoded = None;
        self.sequence_has_been_reset = true;
    }

    /// See [`ProducerBatch::reset_producer_state`].
    pub fn sequence_has_been_reset(&self) -> bool {
        self.sequence_has_been_reset
    }

    pub(crate) fn in_retry(&self) -> bool {
        self.attempts > 0
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// True when the batch holds no record.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Estimated encoded size (uncompressed).
    pub fn size(&self) -> usize {
        self.size
    }

    /// True once encoded.
    pub fn is_closed(&self) -> bool {
        self.encoded.is_some()
    }

    /// Appends a record unless the batch is closed, or non-empty and the record would take it
    /// past `batch_size`. On refusal the record is handed back.
    #[allow(clippy::result_large_err)]
    pub fn try_append(
        &mut self,
        rec: ProducerRecord,
        delivery: Option<Delivery>,
        batch_size: usize,
    ) -> std::result::Result<(), (ProducerRecord, Option<Delivery>)> {
        let sz = record_size(&rec.key, &rec.value, &rec.headers);
        if self.is_closed()
            || self.full
            || self.has_sequence()
            || (!self.records.is_empty() && self.size + sz > batch_size)
        {
            return Err((rec, delivery));
        }
        let offset = self.records.len() as i64;
        let headers: IndexMap<StrBytes, Option<Bytes>> = rec
            .headers
            .into_iter()
            .map(|(k, v)| (StrBytes::from_string(k), v))
            .collect();
        self.records.push(Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: NO_PARTITION_LEADER_EPOCH,
            producer_id: NO_PRODUCER_ID,
            producer_epoch: NO_PRODUCER_EPOCH,
            timestamp_type: TimestampType::Creation,
            offset,
            sequence: 0,
            timestamp: rec.timestamp.unwrap_or_else(now_ms),
            key: rec.key,
            value: rec.value,
            headers,
        });
        if let Some(d) = delivery {
            self.deliveries.push(d);
        }
        self.size += sz;
        Ok(())
    }

    /// Encodes the batch (RecordBatch v2) with the batch's producer id, epoch and base
    /// sequence. Idempotent: a closed batch keeps its bytes.
    pub fn close(&mut self, compression: Compression) -> Result<&Bytes> {
        if self.encoded.is_none() {
            for (i, r) in self.records.iter_mut().enumerate() {
                r.producer_id = self.producer_id;
                r.producer_epoch = self.producer_epoch;
                r.transactional = self.transactional;
                // The encoder splits batches where offset - sequence changes, so sequences
                // must advance with offsets even without idempotence (base -1).
                r.sequence = self.base_sequence.wrapping_add(i as i32);
            }
            let mut buf = BytesMut::with_capacity(self.size);
            RecordBatchEncoder::encode(
                &mut buf,
                self.records.iter(),
                &RecordEncodeOptions {
                    version: 2,
                    compression,
                },
            )
            .map_err(|e| Error::Protocol(format!("encoding record batch: {e}")))?;
            self.encoded = Some(buf.freeze());
        }
        Ok(self.encoded.as_ref().unwrap())
    }

    /// The encoded bytes, once closed.
    pub fn encoded(&self) -> Option<&Bytes> {
        self.encoded.as_ref()
    }

    pub(crate) fn complete(self, base_offset: i64) {
        for (i, d) in self.deliveries.into_iter().enumerate() {
            let off = if base_offset < 0 {
                -1
            } else {
                base_offset + i as i64
            };
            let _ = d.send(Ok((self.partition, off)));
        }
    }

    pub(crate) fn fail(self, err: &Error) {
        for d in self.deliveries {
            let _ = d.send(Err(clone_error(err)));
        }
    }
}

pub(crate) fn clone_error(e: &Error) -> Error {
    match e {
        Error::Kafka { code, message } => Error::Kafka {
            code: *code,
            message: message.clone(),
        },
        Error::Timeout {
            api,
            addr,
            timeout_ms,
        } => Error::Timeout {
            api,
            addr: addr.clone(),
            timeout_ms: *timeout_ms,
        },
        Error::Disconnected(a) => Error::Disconnected(a.clone()),
        Error::DeliveryTimeout(ms) => Error::DeliveryTimeout(*ms),
        Error::IllegalState(s) => Error::IllegalState(s.clone()),
        Error::TransactionError { fatal, source } => Error::TransactionError {
            fatal: *fatal,
            source: Box::new(clone_error(source)),
        },
        Error::TransactionAborted => Error::TransactionAborted,
        Error::Closed => Error::Closed,
        Error::UnsupportedVersion(a) => Error::UnsupportedVersion(a),
        Error::Config(s) => Error::Config(s.clone()),
        Error::ConfigException(s) => Error::ConfigException(s.clone()),
        Error::Protocol(s) => Error::Protocol(s.clone()),
        Error::NoBrokerAvailable(s) => Error::NoBrokerAvailable(s.clone()),
        // The producer never fails with a group error; keep its text if one arrives.
        Error::Group(g) => Error::Protocol(g.to_string()),
        Error::Io { addr, source } => Error::Io {
            addr: addr.clone(),
            source: std::io::Error::new(source.kind(), source.to_string()),
        },
    }
}

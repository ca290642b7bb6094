//! The producer: a record accumulator with one open batch per partition, linger, compression,
//! acks, bounded in-flight requests per broker and retries.
//!
//! All state lives in one background task; [`Producer::send`] only enqueues a command, so it
//! never blocks and keeps the order of calls. A [`ProducerBatch`] is encoded once, when it is
//! closed, and retried unchanged: producer id, epoch and base sequence are fields of the batch,
//! so idempotence can assign them once per batch at close time.

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use strom_protocol::kafka::indexmap::IndexMap;
use strom_protocol::kafka::messages::produce_request::{PartitionProduceData, TopicProduceData};
use strom_protocol::kafka::messages::{
    ApiKey, InitProducerIdRequest, ProduceRequest, ProduceResponse, TopicName,
};
use strom_protocol::kafka::protocol::StrBytes;
use strom_protocol::records::{
    Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType, NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE,
};
use tokio::sync::{mpsc, oneshot};

pub use strom_protocol::records::Compression;

use crate::client::{Client, ClientConfig, TopicMetadata};
use crate::connection::Connection;
use crate::error::{Error, Result};
pub use crate::idempotence::ProducerIdAndEpoch;
use crate::idempotence::{Tp, TransactionManager};
use crate::partitioner::{partition_for_key, StickyPartitioner};
use crate::ErrorCode;

/// `acks`: how many replicas must have the batch before the broker answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acks {
    /// `acks=0`: no response at all; offsets are reported as -1.
    None,
    /// `acks=1`: the leader has it.
    Leader,
    /// `acks=all` / `-1`: all in-sync replicas have it.
    All,
}

impl Acks {
    /// The wire value.
    pub fn value(self) -> i16 {
        match self {
            Acks::None => 0,
            Acks::Leader => 1,
            Acks::All => -1,
        }
    }
}

impl std::str::FromStr for Acks {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "0" => Ok(Acks::None),
            "1" => Ok(Acks::Leader),
            "-1" | "all" => Ok(Acks::All),
            _ => Err(Error::Config(format!(
                "invalid acks {s:?} (0, 1, -1 or all)"
            ))),
        }
    }
}

/// Parses Kafka's `compression.type` names.
pub fn parse_compression(s: &str) -> Result<Compression> {
    match s.to_ascii_lowercase().as_str() {
        "none" => Ok(Compression::None),
        "gzip" => Ok(Compression::Gzip),
        "snappy" => Ok(Compression::Snappy),
        "lz4" => Ok(Compression::Lz4),
        "zstd" => Ok(Compression::Zstd),
        _ => Err(Error::Config(format!(
            "invalid compression {s:?} (none, gzip, snappy, lz4, zstd)"
        ))),
    }
}

/// `max.in.flight.requests.per.connection` at most this with idempotence (Kafka's
/// `MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION_FOR_IDEMPOTENCE`).
pub const MAX_IN_FLIGHT_FOR_IDEMPOTENCE: usize = 5;

/// Producer settings, named after Kafka's.
#[derive(Debug, Clone)]
pub struct ProducerConfig {
    /// `bootstrap.servers`: used by [`Producer::connect`] (a producer made with
    /// [`Producer::new`] uses its [`Client`]).
    pub bootstrap_servers: Vec<String>,
    /// `client.id` (for [`Producer::connect`]); `None`: the client's default.
    pub client_id: Option<String>,
    /// `enable.idempotence`. `None` means "not set": idempotence is on unless `acks` or
    /// `retries` conflict with it, in which case it is silently turned off, as in Kafka.
    /// `Some(true)`: a conflicting setting fails construction with Kafka's message.
    pub enable_idempotence: Option<bool>,
    pub acks: Acks,
    pub compression: Compression,
    /// `batch.size`: bytes per batch before it is closed.
    pub batch_size: usize,
    /// `linger.ms`.
    pub linger: Duration,
    /// `max.in.flight.requests.per.connection`.
    pub max_in_flight: usize,
    /// `retries` (bounded by `delivery_timeout` as well).
    pub retries: u32,
    /// `retry.backoff.ms` (doubled per attempt, capped at 1 s).
    pub retry_backoff: Duration,
    /// `delivery.timeout.ms`: a record fails once this long has passed since `send`.
    pub delivery_timeout: Duration,
    /// `request.timeout.ms`, also sent as the Produce timeout.
    pub request_timeout: Duration,
    /// `max.request.size`: limit on a Produce request's batches.
    pub max_request_size: usize,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        ProducerConfig {
            bootstrap_servers: vec!["localhost:9092".into()],
            client_id: None,
            enable_idempotence: None,
            acks: Acks::All,
            compression: Compression::None,
            batch_size: 16384,
            linger: Duration::from_millis(5),
            max_in_flight: 5,
            retries: i32::MAX as u32,
            retry_backoff: Duration::from_millis(100),
            delivery_timeout: Duration::from_secs(120),
            request_timeout: Duration::from_secs(30),
            max_request_size: 1024 * 1024,
        }
    }
}

fn invalid_value(key: &str, value: &str, why: &str) -> Error {
    Error::ConfigException(format!(
        "Invalid value {value} for configuration {key}: {why}"
    ))
}

fn parse_int(key: &str, value: &str, min: i64) -> Result<i64> {
    let v: i32 = value
        .trim()
        .parse()
        .map_err(|_| invalid_value(key, value, "Not a number of type INT"))?;
    if (v as i64) < min {
        return Err(invalid_value(
            key,
            value,
            &format!("Value must be at least {min}"),
        ));
    }
    Ok(v as i64)
}

fn parse_long(key: &str, value: &str, min: i64) -> Result<i64> {
    let v: i64 = value
        .trim()
        .parse()
        .map_err(|_| invalid_value(key, value, "Not a number of type LONG"))?;
    if v < min {
        return Err(invalid_value(
            key,
            value,
            &format!("Value must be at least {min}"),
        ));
    }
    Ok(v)
}

impl ProducerConfig {
    /// Builds a config from Kafka producer properties, as `new ProducerConfig(props)` does:
    /// `bootstrap.servers`, `client.id`, `acks`, `enable.idempotence`, `retries`,
    /// `max.in.flight.requests.per.connection`, `batch.size`, `linger.ms`, `compression.type`,
    /// `delivery.timeout.ms`, `request.timeout.ms`, `retry.backoff.ms`, `max.request.size`.
    /// Other keys are ignored with a warning (Kafka logs them as unused). Fails with
    /// [`Error::ConfigException`] and Kafka's message on an invalid value or on a setting that
    /// conflicts with an explicitly enabled idempotence (see [`ProducerConfig::idempotence`]).
    pub fn from_properties<K: AsRef<str>, V: AsRef<str>>(props: &[(K, V)]) -> Result<Self> {
        let mut c = ProducerConfig::default();
        let mut delivery_timeout_set = false;
        for (k, v) in props {
            let (k, v) = (k.as_ref(), v.as_ref());
            match k {
                "bootstrap.servers" => {
                    c.bootstrap_servers = v
                        .split(',')
                        .map(|s| s.trim().to_string())
                        .filter(|s| !s.is_empty())
                        .collect();
                }
                "client.id" => c.client_id = Some(v.to_string()),
                "acks" => {
                    c.acks = v
                        .trim()
                        .parse()
                        .map_err(|_| invalid_value(k, v, "String must be one of: all, -1, 0, 1"))?
                }
                "enable.idempotence" => {
                    c.enable_idempotence = Some(match v.trim().to_ascii_lowercase().as_str() {
                        "true" => true,
                        "false" => false,
                        _ => {
                            return Err(invalid_value(
                                k,
                                v,
                                "Expected value to be either true or false",
                            ))
                        }
                    })
                }
                "retries" => c.retries = parse_int(k, v, 0)? as u32,
                "max.in.flight.requests.per.connection" => {
                    c.max_in_flight = parse_int(k, v, 1)? as usize
                }
                "batch.size" => c.batch_size = parse_int(k, v, 0)? as usize,
                "linger.ms" => c.linger = Duration::from_millis(parse_long(k, v, 0)? as u64),
                "compression.type" => {
                    c.compression = parse_compression(v).map_err(|_| {
                        invalid_value(k, v, "String must be one of: none, gzip, snappy, lz4, zstd")
                    })?
                }
                "delivery.timeout.ms" => {
                    c.delivery_timeout = Duration::from_millis(parse_int(k, v, 0)? as u64);
                    delivery_timeout_set = true;
                }
                "request.timeout.ms" => {
                    c.request_timeout = Duration::from_millis(parse_int(k, v, 0)? as u64)
                }
                "retry.backoff.ms" => {
                    c.retry_backoff = Duration::from_millis(parse_long(k, v, 0)? as u64)
                }
                "max.request.size" => c.max_request_size = parse_int(k, v, 0)? as usize,
                _ => tracing::warn!(
                    config = k,
                    "The configuration '{k}' was supplied but isn't a known config."
                ),
            }
        }
        c.idempotence()?;
        // KafkaProducer.configureDeliveryTimeout.
        let min_delivery = c.linger + c.request_timeout;
        if c.delivery_timeout < min_delivery {
            if delivery_timeout_set {
                return Err(Error::ConfigException(
                    "delivery.timeout.ms should be equal to or larger than linger.ms + request.timeout.ms"
                        .into(),
                ));
            }
            c.delivery_timeout = min_delivery;
        }
        Ok(c)
    }

    /// Whether the producer is idempotent, after Kafka's
    /// `ProducerConfig.postProcessAndValidateIdempotenceConfigs` (kafka-clients 4.x):
    /// idempotence is on by default; `retries=0` or `acks` other than `all` turn it off
    /// silently when `enable.idempotence` was not set, and fail when it was set to true;
    /// `max.in.flight.requests.per.connection` above 5 fails whenever idempotence is on
    /// (explicitly or by default), as in Kafka 4.
    pub fn idempotence(&self) -> Result<bool> {
        let user_configured = self.enable_idempotence.is_some();
        let enabled = self.enable_idempotence.unwrap_or(true);
        let mut should_disable = false;
        if enabled {
            if self.retries == 0 {
                if user_configured {
                    return Err(Error::ConfigException(
                        "Must set retries to non-zero when using the idempotent producer.".into(),
                    ));
                }
                tracing::info!("Idempotence will be disabled because retries is set to 0.");
                should_disable = true;
            }
            if self.acks != Acks::All {
                if user_configured {
                    return Err(Error::ConfigException(
                        "Must set acks to all in order to use the idempotent producer. Otherwise we cannot guarantee idempotence."
                            .into(),
                    ));
                }
                tracing::info!(
                    "Idempotence will be disabled because acks is set to {}, not set to 'all'.",
                    self.acks.value()
                );
                should_disable = true;
            }
            if self.max_in_flight > MAX_IN_FLIGHT_FOR_IDEMPOTENCE {
                return Err(Error::ConfigException(format!(
                    "To use the idempotent producer, max.in.flight.requests.per.connection must be set to at most 5. Current value is {}.",
                    self.max_in_flight
                )));
            }
        }
        Ok(enabled && !should_disable)
    }

    /// The client settings for [`Producer::connect`].
    pub fn client_config(&self) -> ClientConfig {
        let mut c = ClientConfig {
            bootstrap_servers: self.bootstrap_servers.clone(),
            request_timeout: self.request_timeout,
            retry_backoff: self.retry_backoff,
            ..Default::default()
        };
        if let Some(id) = &self.client_id {
            c.client_id = id.clone();
        }
        c
    }

    fn backoff(&self, attempt: u32) -> Duration {
        let base = self.retry_backoff.as_millis() as u64;
        Duration::from_millis(
            base.saturating_mul(1 << attempt.min(10))
                .min(1000.max(base)),
        )
    }
}

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

type Delivery = oneshot::Sender<Result<RecordMetadata>>;

/// Resolves once the record is acknowledged (or failed).
#[derive(Debug)]
pub struct DeliveryFuture {
    rx: oneshot::Receiver<Result<RecordMetadata>>,
}

impl Future for DeliveryFuture {
    type Output = Result<RecordMetadata>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.rx)
            .poll(cx)
            .map(|r| r.unwrap_or(Err(Error::Closed)))
    }
}

fn now_ms() -> i64 {
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
    records: Vec<Record>,
    deliveries: Vec<Delivery>,
    size: usize,
    created: Instant,
    /// Set once the batch is closed.
    encoded: Option<Bytes>,
    pub attempts: u32,
    retry_at: Option<Instant>,
    /// No more records fit: send it without waiting for linger.
    full: bool,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    /// Set when an epoch bump rewrote the producer state of this already sent batch
    /// (Kafka's `ProducerBatch.sequenceHasBeenReset`).
    sequence_has_been_reset: bool,
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

fn record_size(
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

    fn in_retry(&self) -> bool {
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

    fn complete(self, base_offset: i64) {
        for (i, d) in self.deliveries.into_iter().enumerate() {
            let off = if base_offset < 0 {
                -1
            } else {
                base_offset + i as i64
            };
            let _ = d.send(Ok((self.partition, off)));
        }
    }

    fn fail(self, err: &Error) {
        for d in self.deliveries {
            let _ = d.send(Err(clone_error(err)));
        }
    }
}

fn clone_error(e: &Error) -> Error {
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
        Error::Closed => Error::Closed,
        Error::UnsupportedVersion(a) => Error::UnsupportedVersion(a),
        Error::Config(s) => Error::Config(s.clone()),
        Error::ConfigException(s) => Error::ConfigException(s.clone()),
        Error::Protocol(s) => Error::Protocol(s.clone()),
        Error::NoBrokerAvailable(s) => Error::NoBrokerAvailable(s.clone()),
        Error::Io { addr, source } => Error::Io {
            addr: addr.clone(),
            source: std::io::Error::new(source.kind(), source.to_string()),
        },
    }
}

enum Command {
    Send(ProducerRecord, Delivery),
    Flush(oneshot::Sender<()>),
}

enum Event {
    Metadata(String, Result<TopicMetadata>),
    Connected(i32, Result<Arc<Connection>>),
    ProducerId(Result<ProducerIdAndEpoch>),
    Produced {
        node: i32,
        conn: Option<Arc<Connection>>,
        batches: Vec<ProducerBatch>,
        result: Result<Option<ProduceResponse>>,
    },
}

/// The producer handle. Cloning shares the same background task.
#[derive(Clone)]
pub struct Producer {
    commands: mpsc::UnboundedSender<Command>,
    producer_id: Arc<Mutex<ProducerIdAndEpoch>>,
    idempotent: bool,
    retries: Arc<AtomicU64>,
    _task: Arc<TaskGuard>,
}

struct TaskGuard(Option<tokio::task::JoinHandle<()>>);

impl Drop for TaskGuard {
    fn drop(&mut self) {
        // The task keeps running to deliver what was sent, then exits once its command channel
        // is closed and everything is done.
        self.0.take();
    }
}

impl std::fmt::Debug for Producer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer")
            .field("idempotent", &self.idempotent)
            .field("producer_id", &self.producer_id_and_epoch())
            .finish()
    }
}

impl Producer {
    /// Starts a producer on `client`. Must be called within a tokio runtime.
    ///
    /// # Panics
    /// When the config is rejected (see [`ProducerConfig::idempotence`]); use
    /// [`Producer::try_new`] to get the error instead.
    pub fn new(client: Client, config: ProducerConfig) -> Producer {
        match Self::try_new(client, config) {
            Ok(p) => p,
            Err(e) => panic!("invalid producer config: {e}"),
        }
    }

    /// Starts a producer on `client`, or fails with [`Error::ConfigException`] carrying Kafka's
    /// message when the config conflicts with idempotence. Must be called within a tokio
    /// runtime. With idempotence, InitProducerId is sent right away; batches wait for it.
    pub fn try_new(client: Client, config: ProducerConfig) -> Result<Producer> {
        let idempotent = config.idempotence()?;
        let (tx, rx) = mpsc::unbounded_channel();
        let (etx, erx) = mpsc::unbounded_channel();
        let producer_id = Arc::new(Mutex::new(ProducerIdAndEpoch::NONE));
        let retries = Arc::new(AtomicU64::new(0));
        let state = State {
            retried: retries.clone(),
            client,
            guarantee_order: config.max_in_flight == 1,
            config,
            queues: HashMap::new(),
            waiting: HashMap::new(),
            metadata_pending: HashSet::new(),
            in_flight: HashMap::new(),
            conns: HashMap::new(),
            connecting: HashSet::new(),
            node_backoff: HashMap::new(),
            muted: HashSet::new(),
            flush_waiters: Vec::new(),
            sticky: StickyPartitioner::default(),
            next_batch_id: 0,
            events: etx,
            closing: false,
            tm: idempotent.then(TransactionManager::new),
            fatal: None,
            init_attempt: 0,
            shared_pid: producer_id.clone(),
        };
        let task = tokio::spawn(state.run(rx, erx));
        Ok(Producer {
            commands: tx,
            producer_id,
            idempotent,
            retries,
            _task: Arc::new(TaskGuard(Some(task))),
        })
    }

    /// Connects to `config.bootstrap_servers` and starts a producer (Kafka's
    /// `new KafkaProducer(props)`); see [`ProducerConfig::from_properties`].
    pub async fn connect(config: ProducerConfig) -> Result<Producer> {
        config.idempotence()?;
        let client = Client::connect(config.client_config()).await?;
        Self::try_new(client, config)
    }

    /// True when the producer is idempotent (after Kafka's config rules).
    pub fn is_idempotent(&self) -> bool {
        self.idempotent
    }

    /// The producer id and epoch in use: [`ProducerIdAndEpoch::NONE`] (-1, -1) without
    /// idempotence or before InitProducerId answered.
    pub fn producer_id_and_epoch(&self) -> ProducerIdAndEpoch {
        *self.producer_id.lock().unwrap()
    }

    /// The producer id in use, -1 when none (see [`Producer::producer_id_and_epoch`]).
    pub fn producer_id(&self) -> i64 {
        self.producer_id_and_epoch().producer_id
    }

    /// How many times a batch was re-queued for a retry so far (Kafka's `record-retry-total`
    /// counts records; this counts batches).
    pub fn retried_batches(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }

    /// The producer epoch in use, -1 when none.
    pub fn producer_epoch(&self) -> i16 {
        self.producer_id_and_epoch().epoch
    }

    /// Sends a record; the returned future resolves to `(partition, offset)` once acknowledged.
    /// The record is queued immediately, whether or not the future is polled.
    pub fn send(
        &self,
        topic: &str,
        partition: Option<i32>,
        key: Option<Bytes>,
        value: Option<Bytes>,
        headers: Vec<(String, Option<Bytes>)>,
    ) -> DeliveryFuture {
        self.send_record(ProducerRecord {
            topic: topic.to_string(),
            partition,
            key,
            value,
            headers,
            timestamp: None,
        })
    }

    /// Like [`Producer::send`], taking a [`ProducerRecord`].
    pub fn send_record(&self, record: ProducerRecord) -> DeliveryFuture {
        let (tx, rx) = oneshot::channel();
        if let Err(mpsc::error::SendError(Command::Send(_, tx))) =
            self.commands.send(Command::Send(record, tx))
        {
            let _ = tx.send(Err(Error::Closed));
        }
        DeliveryFuture { rx }
    }

    /// Sends everything queued now (ignoring linger) and waits until every record sent before
    /// this call is acknowledged or failed. Per-record errors are reported by their futures.
    pub async fn flush(&self) -> Result<()> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(Command::Flush(tx))
            .map_err(|_| Error::Closed)?;
        rx.await.map_err(|_| Error::Closed)
    }
}

/// The outcome of one batch in a Produce response (Kafka's `PartitionResponse`).
struct PartitionResult {
    error: Option<Error>,
    base_offset: i64,
    log_start_offset: i64,
}

struct State {
    client: Client,
    config: ProducerConfig,
    /// `max.in.flight.requests.per.connection=1`: a partition is muted while it has a batch in
    /// flight (Kafka's `guaranteeMessageOrder`).
    guarantee_order: bool,
    /// Per partition: batches to send, oldest (lowest sequence) first; at most the last one
    /// is open.
    queues: HashMap<Tp, VecDeque<ProducerBatch>>,
    /// Records for topics whose metadata is being fetched, in send order.
    waiting: HashMap<String, Vec<(ProducerRecord, Delivery, Instant)>>,
    metadata_pending: HashSet<String>,
    /// Produce requests in flight per broker.
    in_flight: HashMap<i32, usize>,
    /// The connection used for Produce requests, per broker. Requests are queued on it from
    /// this task, so they reach the broker in the order they were drained.
    conns: HashMap<i32, Arc<Connection>>,
    connecting: HashSet<i32>,
    /// No connection attempt to the broker before this time (after a failed one).
    node_backoff: HashMap<i32, Instant>,
    muted: HashSet<Tp>,
    flush_waiters: Vec<oneshot::Sender<()>>,
    sticky: StickyPartitioner,
    next_batch_id: u64,
    events: mpsc::UnboundedSender<Event>,
    closing: bool,
    /// Idempotence bookkeeping; `None` without idempotence.
    tm: Option<TransactionManager>,
    /// A fatal error (InitProducerId refused): every batch fails with it.
    fatal: Option<Error>,
    init_attempt: u32,
    shared_pid: Arc<Mutex<ProducerIdAndEpoch>>,
    retried: Arc<AtomicU64>,
}

impl State {
    async fn run(
        mut self,
        mut commands: mpsc::UnboundedReceiver<Command>,
        mut events: mpsc::UnboundedReceiver<Event>,
    ) {
        loop {
            self.maybe_init_producer_id();
            self.drain();
            self.check_flush();
            if self.closing && self.is_idle() {
                return;
            }
            let deadline = self.next_deadline();
            let sleep = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d.into()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                cmd = commands.recv(), if !self.closing => match cmd {
                    Some(c) => {
                        self.handle_command(c);
                        // Take whatever else is queued before draining.
                        for _ in 0..1024 {
                            match commands.try_recv() {
                                Ok(c) => self.handle_command(c),
                                Err(_) => break,
                            }
                        }
                    }
                    None => self.closing = true,
                },
                Some(ev) = events.recv() => self.handle_event(ev),
                _ = sleep => {}
            }
        }
    }

    fn is_idle(&self) -> bool {
        self.queues.values().all(|q| q.is_empty())
            && self.waiting.is_empty()
            && self.in_flight.values().all(|&n| n == 0)
    }

    fn check_flush(&mut self) {
        if !self.flush_waiters.is_empty() && self.is_idle() {
            for w in self.flush_waiters.drain(..) {
                let _ = w.send(());
            }
        }
    }

    fn flushing(&self) -> bool {
        self.closing || !self.flush_waiters.is_empty()
    }

    fn handle_command(&mut self, c: Command) {
        match c {
            Command::Send(rec, d) => self.append(rec, d, Instant::now()),
            Command::Flush(w) => self.flush_waiters.push(w),
        }
    }

    /// Kafka's Sender.runOnce prologue: resolve sequences, bump the epoch when requested and
    /// send InitProducerId when there is no producer id.
    fn maybe_init_producer_id(&mut self) {
        if self.fatal.is_some() {
            return;
        }
        let Some(tm) = self.tm.as_mut() else { return };
        tm.maybe_resolve_sequences();
        let send = tm.bump_epoch_and_reset_id_if_needed();
        *self.shared_pid.lock().unwrap() = tm.producer_id_and_epoch();
        if tm.has_pending_resets() {
            // Rewrite the producer state of re-queued batches now; those on the wire are
            // rewritten when they come back.
            for q in self.queues.values_mut() {
                for b in q.iter_mut() {
                    tm.sync_batch(b);
                }
            }
        }
        if !send {
            return;
        }
        let client = self.client.clone();
        let events = self.events.clone();
        let delay = if self.init_attempt == 0 {
            Duration::ZERO
        } else {
            self.config.backoff(self.init_attempt - 1)
        };
        self.init_attempt += 1;
        let timeout_ms = i32::MAX;
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let r = async {
                let conn = client.any_connection().await?;
                let resp = conn
                    .request(|_| {
                        let mut req = InitProducerIdRequest::default();
                        req.transactional_id = None;
                        req.transaction_timeout_ms = timeout_ms;
                        req
                    })
                    .await?;
                if let Some(e) = Error::kafka(resp.error_code, None) {
                    return Err(e);
                }
                Ok(ProducerIdAndEpoch {
                    producer_id: resp.producer_id.0,
                    epoch: resp.producer_epoch,
                })
            }
            .await;
            let _ = events.send(Event::ProducerId(r));
        });
    }

    fn append(&mut self, rec: ProducerRecord, d: Delivery, enqueued: Instant) {
        if let Some(e) = &self.fatal {
            let _ = d.send(Err(clone_error(e)));
            return;
        }
        // Records of a topic whose metadata is being fetched queue up behind the first one, even
        // if the metadata has meanwhile reached the cache: otherwise a later record could be
        // appended before an earlier one still waiting (the reordering `strom produce` saw).
        if self.waiting.contains_key(&rec.topic) {
            self.wait_for_metadata(rec, d, enqueued);
            return;
        }
        let md = self.client.metadata();
        let Some(tm) = md
            .topics
            .get(&rec.topic)
            .filter(|t| !t.partitions.is_empty())
        else {
            self.wait_for_metadata(rec, d, enqueued);
            return;
        };
        let n = tm.partitions.len() as i32;
        let partition = match (rec.partition, &rec.key) {
            (Some(p), _) if p < 0 || p >= n => {
                let _ = d.send(Err(Error::Kafka {
                    code: ErrorCode::UnknownTopicOrPartition,
                    message: Some(format!(
                        "partition {p} of topic {} does not exist ({n} partitions)",
                        rec.topic
                    )),
                }));
                return;
            }
            (Some(p), _) => p,
            (None, Some(k)) => partition_for_key(k, n),
            (None, None) => self.sticky.partition(&rec.topic, n),
        };
        let key = (rec.topic.clone(), partition);
        let batch_size = self.config.batch_size;
        let q = self.queues.entry(key).or_default();
        let mut pending = Some((rec, Some(d)));
        if let Some(open) = q.back_mut().filter(|b| !b.is_closed() && !b.has_sequence()) {
            let (rec, d) = pending.take().unwrap();
            if let Err(back) = open.try_append(rec, d, batch_size) {
                pending = Some(back);
                // Full: it is sent as it is, and the sticky partition moves on. (It is encoded
                // when drained, once its producer state is known.)
                open.full = true;
                self.sticky.batch_completed(&open.topic, partition, n);
            }
        }
        if let Some((rec, d)) = pending {
            let mut b = ProducerBatch::new(&rec.topic, partition, self.next_batch_id);
            b.created = enqueued;
            self.next_batch_id += 1;
            let _ = b.try_append(rec, d, batch_size);
            q.push_back(b);
        }
    }

    fn wait_for_metadata(&mut self, rec: ProducerRecord, d: Delivery, enqueued: Instant) {
        let topic = rec.topic.clone();
        self.waiting
            .entry(topic.clone())
            .or_default()
            .push((rec, d, enqueued));
        self.request_metadata(&topic);
    }

    fn request_metadata(&mut self, topic: &str) {
        if !self.metadata_pending.insert(topic.to_string()) {
            return;
        }
        let client = self.client.clone();
        let events = self.events.clone();
        let topic = topic.to_string();
        tokio::spawn(async move {
            let r = client.topic_metadata(&topic).await;
            let _ = events.send(Event::Metadata(topic, r));
        });
    }

    fn handle_event(&mut self, ev: Event) {
        match ev {
            Event::Metadata(topic, r) => {
                self.metadata_pending.remove(&topic);
                let waiting = self.waiting.remove(&topic).unwrap_or_default();
                match r {
                    Ok(_) => {
                        for (rec, d, t) in waiting {
                            self.append(rec, d, t);
                        }
                    }
                    Err(e) => {
                        for (_, d, _) in waiting {
                            let _ = d.send(Err(clone_error(&e)));
                        }
                    }
                }
            }
            Event::Connected(node, r) => {
                self.connecting.remove(&node);
                match r {
                    Ok(c) => {
                        self.conns.insert(node, c);
                    }
                    Err(e) => {
                        tracing::debug!(node, error = %e, "producer connection failed");
                        self.node_backoff
                            .insert(node, Instant::now() + self.config.retry_backoff);
                        // The leader may have moved.
                        let md = self.client.metadata();
                        let topics: HashSet<String> = self
                            .queues
                            .keys()
                            .filter(|(t, p)| {
                                md.topics.get(t).and_then(|tm| tm.leader(*p)) == Some(node)
                            })
                            .map(|(t, _)| t.clone())
                            .collect();
                        for t in topics {
                            self.client.invalidate_topic(&t);
                            self.request_metadata(&t);
                        }
                    }
                }
            }
            Event::ProducerId(r) => self.handle_producer_id(r),
            Event::Produced {
                node,
                conn,
                batches,
                result,
            } => {
                if let Some(n) = self.in_flight.get_mut(&node) {
                    *n = n.saturating_sub(1);
                }
                if let (Err(Error::Timeout { .. }), Some(c)) = (&result, &conn) {
                    // As Kafka's NetworkClient: a request timeout closes the connection.
                    c.close("request timed out");
                }
                if let Some(c) = &conn {
                    if c.is_closed() {
                        if let Some(cur) = self.conns.get(&node) {
                            if Arc::ptr_eq(cur, c) {
                                self.conns.remove(&node);
                            }
                        }
                    }
                }
                self.handle_produced(batches, result);
            }
        }
    }

    fn handle_producer_id(&mut self, r: Result<ProducerIdAndEpoch>) {
        let Some(tm) = self.tm.as_mut() else { return };
        match r {
            Ok(pid) => {
                self.init_attempt = 0;
                tm.set_producer_id_and_epoch(pid);
                *self.shared_pid.lock().unwrap() = pid;
            }
            Err(e) if e.is_retriable() => {
                tracing::debug!(error = %e, "InitProducerId failed; retrying");
                tm.init_failed();
            }
            Err(e) => {
                tracing::error!(error = %e, "InitProducerId failed");
                tm.init_failed();
                // Kafka's transitionToFatalError + maybeAbortBatches.
                for (_, q) in self.queues.drain() {
                    for b in q {
                        b.fail(&e);
                    }
                }
                for (_, w) in self.waiting.drain() {
                    for (_, d, _) in w {
                        let _ = d.send(Err(clone_error(&e)));
                    }
                }
                self.fatal = Some(e);
            }
        }
    }

    fn handle_produced(
        &mut self,
        batches: Vec<ProducerBatch>,
        result: Result<Option<ProduceResponse>>,
    ) {
        let resp = match result {
            Ok(Some(r)) => r,
            Ok(None) => {
                for b in batches {
                    self.complete_batch(
                        b,
                        PartitionResult {
                            error: None,
                            base_offset: -1,
                            log_start_offset: -1,
                        },
                    );
                }
                return;
            }
            Err(e) => {
                for b in batches {
                    self.complete_batch(
                        b,
                        PartitionResult {
                            error: Some(e_clone(&e)),
                            base_offset: -1,
                            log_start_offset: -1,
                        },
                    );
                }
                return;
            }
        };
        for b in batches {
            let pr = resp
                .responses
                .iter()
                .filter(|t| t.name.0.as_str() == b.topic)
                .flat_map(|t| t.partition_responses.iter())
                .find(|p| p.index == b.partition);
            let r = match pr {
                None => PartitionResult {
                    error: Some(Error::Protocol(
                        "no response for partition in Produce response".into(),
                    )),
                    base_offset: -1,
                    log_start_offset: -1,
                },
                Some(p) => PartitionResult {
                    error: Error::kafka(
                        p.error_code,
                        p.error_message.as_ref().map(|m| m.to_string()),
                    ),
                    base_offset: p.base_offset,
                    log_start_offset: p.log_start_offset,
                },
            };
            self.complete_batch(b, r);
        }
    }

    /// Kafka's `Sender.completeBatch`: complete, retry or fail one batch.
    fn complete_batch(&mut self, mut b: ProducerBatch, r: PartitionResult) {
        let tp = (b.topic.clone(), b.partition);
        if let Some(tm) = self.tm.as_mut() {
            tm.sync_batch(&mut b);
        }
        if self.guarantee_order {
            self.muted.remove(&tp);
        }
        let Some(e) = r.error else {
            if let Some(tm) = self.tm.as_mut() {
                tm.handle_completed_batch(&tp, &b, r.base_offset);
            }
            b.complete(r.base_offset);
            return;
        };
        if e.invalidates_metadata() {
            self.client.invalidate_topic(&b.topic);
            self.request_metadata(&b.topic.clone());
        }
        if self.can_retry(&tp, &b, &e, r.log_start_offset) {
            tracing::warn!(topic = %b.topic, partition = b.partition, error = %e, attempt = b.attempts, sequence = b.base_sequence, "retrying batch");
            self.reenqueue(b);
        } else if e.code() == Some(ErrorCode::DuplicateSequenceNumber) {
            // The broker has the batch but no longer its offset.
            if let Some(tm) = self.tm.as_mut() {
                tm.handle_completed_batch(&tp, &b, -1);
            }
            b.complete(-1);
        } else {
            let expired = b.created.elapsed() >= self.config.delivery_timeout;
            let e = if expired && e.is_retriable() {
                Error::DeliveryTimeout(self.config.delivery_timeout.as_millis() as u64)
            } else {
                e
            };
            // Sequences are only adjusted when the batch had retries left: otherwise its fate
            // is unknown and reusing its sequence is unsafe.
            let adjust = b.attempts < self.config.retries;
            self.fail_batch(b, &e, adjust);
        }
    }

    /// Kafka's `Sender.canRetry`.
    fn can_retry(&mut self, tp: &Tp, b: &ProducerBatch, e: &Error, log_start_offset: i64) -> bool {
        if b.created.elapsed() >= self.config.delivery_timeout || b.attempts >= self.config.retries
        {
            return false;
        }
        match self.tm.as_mut() {
            Some(tm) => tm.can_retry(tp, b, e, log_start_offset),
            None => e.is_retriable(),
        }
    }

    fn fail_batch(&mut self, b: ProducerBatch, e: &Error, adjust_sequence_numbers: bool) {
        let tp = (b.topic.clone(), b.partition);
        if let Some(tm) = self.tm.as_mut() {
            tm.handle_failed_batch(&tp, &b, e, adjust_sequence_numbers);
        }
        b.fail(e);
    }

    /// Kafka's `RecordAccumulator.reenqueue`: with idempotence the batch goes back in sequence
    /// order (`insertInSequenceOrder`), else before every batch created after it.
    fn reenqueue(&mut self, mut b: ProducerBatch) {
        self.retried.fetch_add(1, Ordering::Relaxed);
        b.retry_at = Some(Instant::now() + self.config.backoff(b.attempts));
        b.attempts += 1;
        let q = self
            .queues
            .entry((b.topic.clone(), b.partition))
            .or_default();
        let pos = if self.tm.is_some() {
            q.iter()
                .position(|x| !(x.has_sequence() && x.base_sequence < b.base_sequence))
                .unwrap_or(q.len())
        } else {
            q.iter().position(|x| x.id > b.id).unwrap_or(q.len())
        };
        q.insert(pos, b);
    }

    /// When the loop must wake up next: the earliest linger expiry, retry or backoff time.
    fn next_deadline(&self) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        let mut min = |t: Instant| next = Some(next.map_or(t, |n: Instant| n.min(t)));
        let mut any = false;
        for q in self.queues.values() {
            if let Some(b) = q.front() {
                any = true;
                match b.retry_at {
                    Some(t) => min(t),
                    None if b.full || q.len() > 1 => {}
                    None => min(b.created + self.config.linger),
                }
                min(b.created + self.config.delivery_timeout);
            }
        }
        for t in self.node_backoff.values() {
            min(*t);
        }
        // Batches waiting for a leader, a connection, a producer id or a slot are re-checked
        // periodically as well.
        if any {
            min(Instant::now() + self.config.retry_backoff.max(Duration::from_millis(10)));
        }
        next
    }

    /// A connection to `node` ready for a Produce request, or `None` (a connect is started).
    fn ready_connection(&mut self, node: i32) -> Option<Arc<Connection>> {
        if let Some(c) = self.conns.get(&node) {
            if !c.is_closed() {
                return Some(c.clone());
            }
            self.conns.remove(&node);
        }
        if self.connecting.contains(&node) {
            return None;
        }
        if self
            .node_backoff
            .get(&node)
            .is_some_and(|t| *t > Instant::now())
        {
            return None;
        }
        self.node_backoff.remove(&node);
        self.connecting.insert(node);
        let client = self.client.clone();
        let events = self.events.clone();
        tokio::spawn(async move {
            let r = client.connection(node).await;
            let _ = events.send(Event::Connected(node, r));
        });
        None
    }

    /// Kafka's `shouldStopDrainBatchesForPartition`.
    fn should_stop_drain(&self, first: &ProducerBatch, tp: &Tp) -> bool {
        let Some(tm) = &self.tm else { return false };
        if !tm.has_producer_id() {
            return true;
        }
        if !first.has_sequence() {
            if tm.has_inflight_batches(tp) && tm.has_stale_producer_id_and_epoch(tp) {
                // Batches of an older epoch are still in flight; a batch of the new epoch
                // starting at sequence 0 must not overtake them.
                return true;
            }
            if tm.has_unresolved_sequence(tp) {
                return true;
            }
        }
        // A batch with a sequence is being retried: it goes only when it is the first in
        // flight, so retries go one at a time, in sequence order.
        let first_inflight = tm.first_inflight_sequence(tp);
        first_inflight != NO_SEQUENCE
            && first.has_sequence()
            && first.base_sequence != first_inflight
    }

    /// Expires, then sends every ready batch whose leader has a connection and a free
    /// in-flight slot (one batch per partition per request, as Kafka drains).
    fn drain(&mut self) {
        let now = Instant::now();
        self.expire_batches();
        if self.fatal.is_some() {
            return;
        }
        let flushing = self.flushing();
        let md = self.client.metadata();
        let mut per_node: HashMap<i32, Vec<Tp>> = HashMap::new();
        let mut need_md = Vec::new();
        for (key, q) in self.queues.iter() {
            let Some(b) = q.front() else { continue };
            if b.retry_at.is_some_and(|t| t > now) || self.muted.contains(key) {
                continue;
            }
            let ready = b.full || flushing || b.created + self.config.linger <= now || q.len() > 1;
            if !ready {
                continue;
            }
            match md.topics.get(&key.0).and_then(|t| t.leader(key.1)) {
                Some(leader) => per_node.entry(leader).or_default().push(key.clone()),
                None => need_md.push(key.0.clone()),
            }
        }
        for t in need_md {
            self.request_metadata(&t);
        }
        for (node, mut keys) in per_node {
            if *self.in_flight.get(&node).unwrap_or(&0) >= self.config.max_in_flight {
                continue;
            }
            let Some(conn) = self.ready_connection(node) else {
                continue;
            };
            keys.sort();
            let mut batches = Vec::new();
            let mut total = 0;
            for key in keys {
                let q = self.queues.get(&key).unwrap();
                let first = q.front().unwrap();
                if !batches.is_empty() && total + first.size() > self.config.max_request_size {
                    break;
                }
                if self.should_stop_drain(first, &key) {
                    continue;
                }
                let q = self.queues.get_mut(&key).unwrap();
                let mut b = q.pop_front().unwrap();
                if q.is_empty() {
                    self.queues.remove(&key);
                }
                if let Some(tm) = self.tm.as_mut() {
                    tm.sync_batch(&mut b);
                    if !b.has_sequence() {
                        // Sequences are assigned once, when the batch is first drained; a
                        // retried batch keeps its sequence (and its bytes).
                        tm.maybe_update_producer_id_and_epoch(&key);
                        let pid = tm.producer_id_and_epoch();
                        let seq = tm.sequence_number(&key);
                        if b.set_producer_state(pid, seq).is_ok() {
                            tm.increment_sequence_number(&key, b.len() as i32);
                            tm.add_inflight_batch(&key, &b);
                        }
                    }
                }
                if let Err(e) = b.close(self.config.compression) {
                    self.fail_batch(b, &e, false);
                    continue;
                }
                total += b.encoded().map_or(0, |e| e.len());
                let n = md
                    .topics
                    .get(&b.topic)
                    .map_or(1, |t| t.partitions.len() as i32);
                self.sticky.batch_completed(&b.topic, b.partition, n);
                if self.guarantee_order {
                    self.muted.insert(key);
                }
                batches.push(b);
            }
            if batches.is_empty() {
                continue;
            }
            *self.in_flight.entry(node).or_insert(0) += 1;
            self.dispatch(node, conn, batches);
        }
    }

    /// Fails batches at the head of their queue whose `delivery.timeout.ms` passed (Kafka's
    /// `expiredBatches`); a batch that had been sent leaves its partition's sequences
    /// unresolved.
    fn expire_batches(&mut self) {
        let timeout = self.config.delivery_timeout;
        let mut expired = Vec::new();
        for q in self.queues.values_mut() {
            while q.front().is_some_and(|b| b.created.elapsed() >= timeout) {
                expired.push(q.pop_front().unwrap());
            }
        }
        self.queues.retain(|_, q| !q.is_empty());
        for mut b in expired {
            let tp = (b.topic.clone(), b.partition);
            if let Some(tm) = self.tm.as_mut() {
                tm.sync_batch(&mut b);
            }
            let in_retry = b.in_retry();
            if let Some(tm) = self.tm.as_mut() {
                tm.handle_failed_batch(
                    &tp,
                    &b,
                    &Error::DeliveryTimeout(timeout.as_millis() as u64),
                    false,
                );
                if in_retry && b.has_sequence() {
                    tm.mark_sequence_unresolved(&tp, &b);
                }
            }
            b.fail(&Error::DeliveryTimeout(timeout.as_millis() as u64));
        }
    }

    /// Queues the Produce request on the connection now (so requests reach the broker in
    /// drain order) and awaits the response in a task.
    fn dispatch(&self, node: i32, conn: Arc<Connection>, batches: Vec<ProducerBatch>) {
        let events = self.events.clone();
        let acks = self.config.acks.value();
        let timeout_ms = self
            .config
            .request_timeout
            .as_millis()
            .min(i32::MAX as u128) as i32;
        let mut topics: Vec<TopicProduceData> = Vec::new();
        for b in &batches {
            let mut pd = PartitionProduceData::default();
            pd.index = b.partition;
            pd.records = b.encoded().cloned();
            match topics.iter_mut().find(|t| t.name.0.as_str() == b.topic) {
                Some(t) => t.partition_data.push(pd),
                None => {
                    let mut t = TopicProduceData::default();
                    t.name = TopicName(StrBytes::from_string(b.topic.clone()));
                    t.partition_data.push(pd);
                    topics.push(t);
                }
            }
        }
        let mut req = ProduceRequest::default();
        req.acks = acks;
        req.timeout_ms = timeout_ms;
        req.topic_data = topics;
        let version = match conn.version_for(ApiKey::Produce) {
            Ok(v) => v,
            Err(e) => {
                let _ = events.send(Event::Produced {
                    node,
                    conn: Some(conn),
                    batches,
                    result: Err(e),
                });
                return;
            }
        };
        if acks == 0 {
            let result = conn.send_no_response(&req, version).map(|_| None);
            let _ = events.send(Event::Produced {
                node,
                conn: Some(conn),
                batches,
                result,
            });
            return;
        }
        match conn.send_ordered(&req, version) {
            Ok(fut) => {
                tokio::spawn(async move {
                    let result = fut.await.map(Some);
                    let _ = events.send(Event::Produced {
                        node,
                        conn: Some(conn),
                        batches,
                        result,
                    });
                });
            }
            Err(e) => {
                let _ = events.send(Event::Produced {
                    node,
                    conn: Some(conn),
                    batches,
                    result: Err(e),
                });
            }
        }
    }
}

fn e_clone(e: &Error) -> Error {
    clone_error(e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::idempotence::Tp;
    use strom_protocol::records::RecordBatchDecoder;

    fn rec(v: &str) -> ProducerRecord {
        ProducerRecord {
            topic: "t".into(),
            value: Some(Bytes::from(v.to_string())),
            key: Some(Bytes::from_static(b"k")),
            headers: vec![("h".into(), Some(Bytes::from_static(b"x")))],
            ..Default::default()
        }
    }

    #[test]
    fn batch_fills_up_to_batch_size() {
        let mut b = ProducerBatch::new("t", 0, 0);
        let mut n = 0;
        while b.try_append(rec(&"x".repeat(100)), None, 1000).is_ok() {
            n += 1;
        }
        assert!((6..=8).contains(&n), "{n}");
        assert!(b.size() <= 1000);
        // A single record larger than batch.size still gets its own batch.
        let mut big = ProducerBatch::new("t", 0, 1);
        assert!(big.try_append(rec(&"x".repeat(5000)), None, 1000).is_ok());
        assert!(big.try_append(rec("y"), None, 1000).is_err());
    }

    #[test]
    fn closed_batch_round_trips_with_every_compression() {
        for c in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let mut b = ProducerBatch::new("t", 3, 0);
            for i in 0..10 {
                b.try_append(rec(&format!("value-{i}")), None, 16384)
                    .unwrap();
            }
            let bytes = b.close(c).unwrap().clone();
            // Closing again keeps the same bytes (retries resend them unchanged).
            assert_eq!(b.close(Compression::None).unwrap(), &bytes);
            assert!(b.try_append(rec("late"), None, 16384).is_err());
            let mut buf = bytes.clone();
            let sets = RecordBatchDecoder::decode_all(&mut buf).unwrap();
            assert_eq!(sets.len(), 1, "{c:?}: one batch");
            assert_eq!(sets[0].compression, c);
            let recs = &sets[0].records;
            assert_eq!(recs.len(), 10);
            for (i, r) in recs.iter().enumerate() {
                assert_eq!(r.offset, i as i64);
                assert_eq!(r.value.as_deref(), Some(format!("value-{i}").as_bytes()));
                assert_eq!(r.key.as_deref(), Some(&b"k"[..]));
                assert_eq!(r.producer_id, -1);
                assert_eq!(r.headers.len(), 1);
            }
            // Base sequence -1 in the header (bytes 53..57).
            assert_eq!(&bytes[53..57], &(-1i32).to_be_bytes());
            assert_eq!(bytes[16], 2, "magic");
        }
    }

    #[test]
    fn idempotent_fields_are_encoded_once() {
        let mut b = ProducerBatch::new("t", 0, 0);
        for i in 0..5 {
            b.try_append(rec(&i.to_string()), None, 16384).unwrap();
        }
        let pid = ProducerIdAndEpoch {
            producer_id: 42,
            epoch: 3,
        };
        b.set_producer_state(pid, 100).unwrap();
        // A batch with a sequence takes no more records.
        assert!(b.try_append(rec("late"), None, 16384).is_err());
        let bytes = b.close(Compression::Lz4).unwrap().clone();
        // Closed: the producer state can no longer change (a retry resends the same bytes).
        assert!(b.set_producer_state(pid, 7).is_err());
        assert_eq!(b.close(Compression::Lz4).unwrap(), &bytes);
        assert_eq!(&bytes[43..51], &42i64.to_be_bytes());
        assert_eq!(&bytes[51..53], &3i16.to_be_bytes());
        assert_eq!(&bytes[53..57], &100i32.to_be_bytes());
        assert_eq!(&bytes[57..61], &5i32.to_be_bytes());
        let sets = RecordBatchDecoder::decode_all(&mut bytes.clone()).unwrap();
        assert_eq!(sets.len(), 1);
    }

    fn batch(id: u64, n: usize) -> ProducerBatch {
        let mut b = ProducerBatch::new("t", 0, id);
        for i in 0..n {
            b.try_append(rec(&i.to_string()), None, 1 << 20).unwrap();
        }
        b
    }

    /// What the accumulator does when it drains a batch.
    fn assign(tm: &mut TransactionManager, tp: &Tp, b: &mut ProducerBatch) {
        tm.maybe_update_producer_id_and_epoch(tp);
        let seq = tm.sequence_number(tp);
        b.set_producer_state(tm.producer_id_and_epoch(), seq)
            .unwrap();
        tm.increment_sequence_number(tp, b.len() as i32);
        tm.add_inflight_batch(tp, b);
        b.close(Compression::None).unwrap();
    }

    #[test]
    fn sequences_count_records_per_partition() {
        let pid = ProducerIdAndEpoch {
            producer_id: 7,
            epoch: 0,
        };
        let mut tm = TransactionManager::new();
        assert!(
            tm.bump_epoch_and_reset_id_if_needed(),
            "InitProducerId first"
        );
        assert!(!tm.bump_epoch_and_reset_id_if_needed(), "only once");
        tm.set_producer_id_and_epoch(pid);
        let (p0, p1) = (("t".to_string(), 0), ("t".to_string(), 1));
        let mut bs: Vec<ProducerBatch> = [3, 1, 5].iter().map(|&n| batch(0, n)).collect();
        for (i, b) in bs.iter_mut().enumerate() {
            b.id = i as u64;
            assign(&mut tm, &p0, b);
        }
        assert_eq!(
            bs.iter().map(|b| b.base_sequence).collect::<Vec<_>>(),
            [0, 3, 4]
        );
        assert_eq!(bs[2].last_sequence(), 8);
        let mut other = batch(10, 2);
        assign(&mut tm, &p1, &mut other);
        assert_eq!(other.base_sequence, 0, "sequences are per partition");
        assert_eq!(&other.encoded().unwrap()[43..51], &7i64.to_be_bytes());
        assert_eq!(tm.first_inflight_sequence(&p0), 0);
        // A retried batch keeps its sequence; completion advances the acked sequence.
        tm.handle_completed_batch(&p0, &bs[0], 0);
        assert_eq!(tm.first_inflight_sequence(&p0), 3);
        assert_eq!(tm.last_acked_sequence(&p0), 2);
        // OUT_OF_ORDER for a batch that is not the next one: retried without an epoch bump.
        let oos = Error::Kafka {
            code: ErrorCode::OutOfOrderSequenceNumber,
            message: None,
        };
        assert!(tm.can_retry(&p0, &bs[2], &oos, 0));
        assert!(!tm.epoch_bump_required());
        // For the next batch it is a real gap: retried after an epoch bump.
        assert!(tm.can_retry(&p0, &bs[1], &oos, 0));
        assert!(tm.epoch_bump_required());
        assert!(!tm.bump_epoch_and_reset_id_if_needed());
        assert_eq!(tm.producer_id_and_epoch().epoch, 1);
        // The in-flight batches of the partition restart at 0 under the new epoch.
        for b in bs.iter_mut().skip(1) {
            tm.sync_batch(b);
            assert!(b.sequence_has_been_reset());
            assert!(!b.is_closed(), "re-encoded when drained again");
        }
        assert_eq!((bs[1].base_sequence, bs[2].base_sequence), (0, 1));
        assert_eq!(bs[2].producer_epoch, 1);
        assert_eq!(tm.sequence_number(&p0), 6);
        // The other partition moves to the new epoch once its batch completed.
        tm.handle_completed_batch(&p1, &other, 0);
        let mut next = batch(11, 1);
        assign(&mut tm, &p1, &mut next);
        assert_eq!((next.base_sequence, next.producer_epoch), (0, 1));
    }

    #[test]
    fn sequences_wrap_at_i32_max() {
        assert_eq!(increment_sequence(0, 5), 5);
        assert_eq!(increment_sequence(i32::MAX - 5, 5), i32::MAX);
        assert_eq!(increment_sequence(i32::MAX, 1), 0);
        assert_eq!(increment_sequence(i32::MAX - 1, 5), 3);
        let mut tm = TransactionManager::new();
        tm.set_producer_id_and_epoch(ProducerIdAndEpoch {
            producer_id: 1,
            epoch: 0,
        });
        let tp = ("t".to_string(), 0);
        tm.maybe_update_producer_id_and_epoch(&tp);
        tm.increment_sequence_number(&tp, i32::MAX - 2);
        let mut b = batch(0, 5);
        assign(&mut tm, &tp, &mut b);
        assert_eq!(b.base_sequence, i32::MAX - 2);
        assert_eq!(b.last_sequence(), 1);
        assert_eq!(tm.sequence_number(&tp), 2);
        // Encoded as one batch with the base sequence in the header.
        let bytes = b.encoded().unwrap().clone();
        assert_eq!(&bytes[53..57], &(i32::MAX - 2).to_be_bytes());
        let sets = RecordBatchDecoder::decode_all(&mut bytes.clone()).unwrap();
        assert_eq!(sets.len(), 1);
        tm.handle_completed_batch(&tp, &b, 0);
        let mut c = batch(1, 1);
        assign(&mut tm, &tp, &mut c);
        assert_eq!(c.base_sequence, 2);
    }

    #[test]
    fn epoch_exhausted_gets_a_new_producer_id() {
        let mut tm = TransactionManager::new();
        tm.set_producer_id_and_epoch(ProducerIdAndEpoch {
            producer_id: 1,
            epoch: i16::MAX,
        });
        let tp = ("t".to_string(), 0);
        let mut b = batch(0, 1);
        assign(&mut tm, &tp, &mut b);
        let e = Error::Kafka {
            code: ErrorCode::OutOfOrderSequenceNumber,
            message: None,
        };
        tm.handle_failed_batch(&tp, &b, &e, true);
        assert!(
            tm.bump_epoch_and_reset_id_if_needed(),
            "InitProducerId again"
        );
        assert!(!tm.has_producer_id());
    }

    fn props(p: &[(&str, &str)]) -> Result<ProducerConfig> {
        ProducerConfig::from_properties(p)
    }

    fn config_error(p: &[(&str, &str)]) -> String {
        match props(p) {
            Err(Error::ConfigException(m)) => m,
            other => panic!("{p:?}: expected ConfigException, got {other:?}"),
        }
    }

    #[test]
    fn idempotence_config_rules() {
        let d = props(&[]).unwrap();
        assert_eq!(d.enable_idempotence, None);
        assert_eq!(
            (d.acks, d.max_in_flight, d.retries),
            (Acks::All, 5, i32::MAX as u32)
        );
        assert!(d.idempotence().unwrap());
        assert_eq!(
            config_error(&[("enable.idempotence", "true"), ("acks", "1")]),
            "Must set acks to all in order to use the idempotent producer. Otherwise we cannot guarantee idempotence."
        );
        assert_eq!(
            config_error(&[
                ("enable.idempotence", "true"),
                ("max.in.flight.requests.per.connection", "6")
            ]),
            "To use the idempotent producer, max.in.flight.requests.per.connection must be set to at most 5. Current value is 6."
        );
        assert_eq!(
            config_error(&[("enable.idempotence", "true"), ("retries", "0")]),
            "Must set retries to non-zero when using the idempotent producer."
        );
        // Explicitly off: anything goes.
        let c = props(&[
            ("enable.idempotence", "false"),
            ("acks", "1"),
            ("max.in.flight.requests.per.connection", "6"),
        ])
        .unwrap();
        assert!(!c.idempotence().unwrap());
        // Not set: acks=1 or retries=0 silently turn idempotence off.
        assert!(!props(&[("acks", "1")]).unwrap().idempotence().unwrap());
        assert!(!props(&[("acks", "0")]).unwrap().idempotence().unwrap());
        assert!(!props(&[("retries", "0")]).unwrap().idempotence().unwrap());
        assert!(props(&[
            ("acks", "all"),
            ("max.in.flight.requests.per.connection", "5")
        ])
        .unwrap()
        .idempotence()
        .unwrap());
        // ... but in Kafka 4 max.in.flight > 5 fails even when idempotence is only the default.
        assert_eq!(
            config_error(&[("max.in.flight.requests.per.connection", "6")]),
            "To use the idempotent producer, max.in.flight.requests.per.connection must be set to at most 5. Current value is 6."
        );
        assert_eq!(
            config_error(&[("acks", "1"), ("max.in.flight.requests.per.connection", "6")]),
            "To use the idempotent producer, max.in.flight.requests.per.connection must be set to at most 5. Current value is 6."
        );
        // The same rules for a config built in code.
        let c = ProducerConfig {
            enable_idempotence: Some(true),
            acks: Acks::Leader,
            ..Default::default()
        };
        assert!(matches!(c.idempotence(), Err(Error::ConfigException(_))));
        // Other properties.
        let c = props(&[
            ("bootstrap.servers", "a:1, b:2"),
            ("client.id", "me"),
            ("batch.size", "100"),
            ("linger.ms", "7"),
            ("compression.type", "zstd"),
            ("delivery.timeout.ms", "40000"),
            ("request.timeout.ms", "1000"),
            ("retry.backoff.ms", "50"),
        ])
        .unwrap();
        assert_eq!(c.bootstrap_servers, ["a:1", "b:2"]);
        assert_eq!(c.client_config().client_id, "me");
        assert_eq!(c.batch_size, 100);
        assert_eq!(c.linger, Duration::from_millis(7));
        assert_eq!(c.compression, Compression::Zstd);
        assert_eq!(c.delivery_timeout, Duration::from_secs(40));
        assert_eq!(c.retry_backoff, Duration::from_millis(50));
        assert_eq!(
            config_error(&[("retries", "x")]),
            "Invalid value x for configuration retries: Not a number of type INT"
        );
        assert_eq!(
            config_error(&[("delivery.timeout.ms", "100")]),
            "delivery.timeout.ms should be equal to or larger than linger.ms + request.timeout.ms"
        );
    }

    #[test]
    fn parses_settings() {
        assert_eq!("all".parse::<Acks>().unwrap(), Acks::All);
        assert_eq!("-1".parse::<Acks>().unwrap().value(), -1);
        assert_eq!("0".parse::<Acks>().unwrap().value(), 0);
        assert!("2".parse::<Acks>().is_err());
        assert_eq!(parse_compression("ZSTD").unwrap(), Compression::Zstd);
        assert!(parse_compression("brotli").is_err());
    }
}

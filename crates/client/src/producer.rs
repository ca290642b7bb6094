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
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use strom_protocol::kafka::indexmap::IndexMap;
use strom_protocol::kafka::messages::produce_request::{PartitionProduceData, TopicProduceData};
use strom_protocol::kafka::messages::{ApiKey, ProduceRequest, ProduceResponse, TopicName};
use strom_protocol::kafka::protocol::StrBytes;
use strom_protocol::records::{
    Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType, NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE,
};
use tokio::sync::{mpsc, oneshot};

pub use strom_protocol::records::Compression;

use crate::client::{Client, TopicMetadata};
use crate::error::{Error, Result};
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

/// Producer settings, named after Kafka's.
#[derive(Debug, Clone)]
pub struct ProducerConfig {
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

impl ProducerConfig {
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
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
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
            producer_id: NO_PRODUCER_ID,
            producer_epoch: NO_PRODUCER_EPOCH,
            base_sequence: NO_SEQUENCE,
        }
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
        if self.is_closed() || (!self.records.is_empty() && self.size + sz > batch_size) {
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
    Produced {
        node: i32,
        batches: Vec<ProducerBatch>,
        result: Result<Option<ProduceResponse>>,
    },
}

/// The producer handle. Cloning shares the same background task.
#[derive(Clone)]
pub struct Producer {
    commands: mpsc::UnboundedSender<Command>,
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
        f.write_str("Producer")
    }
}

impl Producer {
    /// Starts a producer on `client`. Must be called within a tokio runtime.
    pub fn new(client: Client, config: ProducerConfig) -> Producer {
        let (tx, rx) = mpsc::unbounded_channel();
        let (etx, erx) = mpsc::unbounded_channel();
        let state = State {
            client,
            config,
            queues: HashMap::new(),
            waiting: HashMap::new(),
            metadata_pending: HashSet::new(),
            in_flight: HashMap::new(),
            flush_waiters: Vec::new(),
            sticky: StickyPartitioner::default(),
            next_batch_id: 0,
            events: etx,
            closing: false,
        };
        let task = tokio::spawn(state.run(rx, erx));
        Producer {
            commands: tx,
            _task: Arc::new(TaskGuard(Some(task))),
        }
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

struct State {
    client: Client,
    config: ProducerConfig,
    /// Per partition: closed batches (possibly awaiting retry) then at most one open batch.
    queues: HashMap<(String, i32), VecDeque<ProducerBatch>>,
    /// Records for topics whose metadata is being fetched.
    waiting: HashMap<String, Vec<(ProducerRecord, Delivery, Instant)>>,
    metadata_pending: HashSet<String>,
    /// Produce requests in flight per broker.
    in_flight: HashMap<i32, usize>,
    flush_waiters: Vec<oneshot::Sender<()>>,
    sticky: StickyPartitioner,
    next_batch_id: u64,
    events: mpsc::UnboundedSender<Event>,
    closing: bool,
}

impl State {
    async fn run(
        mut self,
        mut commands: mpsc::UnboundedReceiver<Command>,
        mut events: mpsc::UnboundedReceiver<Event>,
    ) {
        loop {
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
            self.drain();
            self.check_flush();
            if self.closing && self.is_idle() {
                return;
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

    fn append(&mut self, rec: ProducerRecord, d: Delivery, enqueued: Instant) {
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
        if let Some(open) = q.back_mut().filter(|b| !b.is_closed()) {
            let (rec, d) = pending.take().unwrap();
            if let Err(back) = open.try_append(rec, d, batch_size) {
                pending = Some(back);
                // Full: close it so it is sent, and move the sticky partition on.
                if let Err(e) = open.close(self.config.compression) {
                    tracing::error!(error = %e, "encoding batch");
                }
                self.sticky.batch_completed(&open.topic, partition, n);
            }
        }
        if let Some((rec, d)) = pending {
            let mut b = ProducerBatch::new(&rec.topic, partition, self.next_batch_id);
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
            Event::Produced {
                node,
                batches,
                result,
            } => {
                if let Some(n) = self.in_flight.get_mut(&node) {
                    *n = n.saturating_sub(1);
                }
                self.handle_produced(batches, result);
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
                    b.complete(-1);
                }
                return;
            }
            Err(e) => {
                for b in batches {
                    self.retry_or_fail(b, e_clone(&e));
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
            match pr {
                None => self.retry_or_fail(
                    b,
                    Error::Protocol("no response for partition in Produce response".into()),
                ),
                Some(p) => match Error::kafka(
                    p.error_code,
                    p.error_message.as_ref().map(|m| m.to_string()),
                ) {
                    None => b.complete(p.base_offset),
                    Some(e) => self.retry_or_fail(b, e),
                },
            }
        }
    }

    fn retry_or_fail(&mut self, mut b: ProducerBatch, e: Error) {
        let expired = b.created.elapsed() >= self.config.delivery_timeout;
        if e.invalidates_metadata() {
            self.client.invalidate_topic(&b.topic);
            self.request_metadata(&b.topic.clone());
        }
        if e.is_retriable() && b.attempts < self.config.retries && !expired {
            tracing::debug!(topic = %b.topic, partition = b.partition, error = %e, attempt = b.attempts, "retrying batch");
            b.retry_at = Some(Instant::now() + self.config.backoff(b.attempts));
            b.attempts += 1;
            let q = self
                .queues
                .entry((b.topic.clone(), b.partition))
                .or_default();
            // Keep creation order among the closed batches.
            let pos = q.iter().position(|x| x.id > b.id).unwrap_or(q.len());
            q.insert(pos, b);
        } else if expired && e.is_retriable() {
            b.fail(&Error::DeliveryTimeout(
                self.config.delivery_timeout.as_millis() as u64,
            ));
        } else {
            b.fail(&e);
        }
    }

    /// When the loop must wake up next: the earliest linger expiry or retry time.
    fn next_deadline(&self) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        for q in self.queues.values() {
            if let Some(b) = q.front() {
                let t = match b.retry_at {
                    Some(t) => t,
                    None if b.is_closed() => continue,
                    None => b.created + self.config.linger,
                };
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        }
        // Batches without a leader are re-checked periodically.
        if next.is_none() && self.queues.values().any(|q| !q.is_empty()) {
            next = Some(Instant::now() + self.config.retry_backoff);
        }
        next
    }

    /// Sends every ready batch whose leader has a free in-flight slot.
    fn drain(&mut self) {
        let now = Instant::now();
        let flushing = self.flushing();
        let md = self.client.metadata();
        let mut per_node: HashMap<i32, Vec<(String, i32)>> = HashMap::new();
        let mut expired = Vec::new();
        let mut need_md = Vec::new();
        for (key, q) in self.queues.iter_mut() {
            let Some(b) = q.front_mut() else { continue };
            if b.created.elapsed() >= self.config.delivery_timeout {
                expired.push(key.clone());
                continue;
            }
            if b.retry_at.is_some_and(|t| t > now) {
                continue;
            }
            let ready =
                b.is_closed() || flushing || b.created + self.config.linger <= now || q.len() > 1;
            if !ready {
                continue;
            }
            match md.topics.get(&key.0).and_then(|t| t.leader(key.1)) {
                Some(leader) => per_node.entry(leader).or_default().push(key.clone()),
                None => need_md.push(key.0.clone()),
            }
        }
        for key in expired {
            if let Some(q) = self.queues.get_mut(&key) {
                if let Some(b) = q.pop_front() {
                    b.fail(&Error::DeliveryTimeout(
                        self.config.delivery_timeout.as_millis() as u64,
                    ));
                }
            }
        }
        for t in need_md {
            self.request_metadata(&t);
        }
        for (node, keys) in per_node {
            let slots = self.in_flight.entry(node).or_insert(0);
            if *slots >= self.config.max_in_flight {
                continue;
            }
            let mut batches = Vec::new();
            let mut total = 0;
            for key in keys {
                let q = self.queues.get_mut(&key).unwrap();
                let b = q.front_mut().unwrap();
                if b.close(self.config.compression).is_err() {
                    let b = q.pop_front().unwrap();
                    b.fail(&Error::Protocol("could not encode batch".into()));
                    continue;
                }
                let sz = b.encoded().map_or(0, |e| e.len());
                if !batches.is_empty() && total + sz > self.config.max_request_size {
                    continue;
                }
                total += sz;
                let b = q.pop_front().unwrap();
                if q.is_empty() {
                    self.queues.remove(&key);
                }
                let n = md
                    .topics
                    .get(&b.topic)
                    .map_or(1, |t| t.partitions.len() as i32);
                self.sticky.batch_completed(&b.topic, b.partition, n);
                batches.push(b);
            }
            if batches.is_empty() {
                continue;
            }
            *slots += 1;
            self.dispatch(node, batches);
        }
    }

    fn dispatch(&self, node: i32, batches: Vec<ProducerBatch>) {
        let client = self.client.clone();
        let events = self.events.clone();
        let acks = self.config.acks.value();
        let timeout_ms = self
            .config
            .request_timeout
            .as_millis()
            .min(i32::MAX as u128) as i32;
        tokio::spawn(async move {
            let result = async {
                let conn = client.connection(node).await?;
                let version = conn.version_for(ApiKey::Produce)?;
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
                if acks == 0 {
                    conn.send_no_response(&req, version)?;
                    Ok(None)
                } else {
                    Ok(Some(conn.send(&req, version).await?))
                }
            }
            .await;
            let _ = events.send(Event::Produced {
                node,
                batches,
                result,
            });
        });
    }
}

fn e_clone(e: &Error) -> Error {
    clone_error(e)
}

#[cfg(test)]
mod tests {
    use super::*;
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
        b.producer_id = 42;
        b.producer_epoch = 3;
        b.base_sequence = 100;
        for i in 0..5 {
            b.try_append(rec(&i.to_string()), None, 16384).unwrap();
        }
        let bytes = b.close(Compression::Lz4).unwrap().clone();
        assert_eq!(&bytes[43..51], &42i64.to_be_bytes());
        assert_eq!(&bytes[51..53], &3i16.to_be_bytes());
        assert_eq!(&bytes[53..57], &100i32.to_be_bytes());
        assert_eq!(&bytes[57..61], &5i32.to_be_bytes());
        let sets = RecordBatchDecoder::decode_all(&mut bytes.clone()).unwrap();
        assert_eq!(sets.len(), 1);
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

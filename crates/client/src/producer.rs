//! The producer: a record accumulator with one open batch per partition, linger, compression,
//! acks, bounded in-flight requests per broker and retries.
//!
//! All state lives in one background task; [`Producer::send`] only enqueues a command, so it
//! never blocks and keeps the order of calls. A [`ProducerBatch`] is encoded once, when it is
//! closed, and retried unchanged: producer id, epoch and base sequence are fields of the batch,
//! so idempotence can assign them once per batch at close time.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use strom_protocol::kafka::messages::{InitProducerIdRequest, ProduceResponse};
use strom_protocol::records::NO_SEQUENCE;
use tokio::sync::{mpsc, oneshot};

pub use strom_protocol::records::Compression;

use crate::client::{Client, TopicMetadata};
use crate::connection::Connection;
use crate::error::{Error, Result};
pub use crate::idempotence::ProducerIdAndEpoch;
use crate::idempotence::{Tp, TransactionManager};
use crate::producer_partitioning::Partitioning;
use crate::ErrorCode;

pub use crate::producer_batch::*;
pub use crate::producer_config::*;

enum Command {
    Send(ProducerRecord, Delivery),
    Flush(oneshot::Sender<()>),
    Txn(txn::TxnCommand),
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
    Txn(txn::TxnEvent),
}

/// The producer handle. Cloning shares the same background task.
#[derive(Clone)]
pub struct Producer {
    commands: mpsc::UnboundedSender<Command>,
    producer_id: Arc<Mutex<ProducerIdAndEpoch>>,
    idempotent: bool,
    retries: Arc<AtomicU64>,
    txn_state: Arc<Mutex<Option<crate::transactions::TxnState>>>,
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
        let partitioning = Partitioning::new(&config);
        let txn_state = Arc::new(Mutex::new(None));
        let txn = config.transactional_id.clone().map(|id| {
            let env = crate::txn_requests::TxnEnv::new(
                client.clone(),
                id,
                config.transaction_timeout.as_millis().min(i32::MAX as u128) as i32,
                config.retry_backoff,
                config.max_block,
            );
            txn::TxnDriver::new(env, txn_state.clone())
        });
        let transactional = txn.is_some();
        let state = State {
            txn,
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
            partitioning,
            next_batch_id: 0,
            events: etx,
            closing: false,
            tm: idempotent.then(|| {
                let mut tm = TransactionManager::new();
                tm.set_transactional(transactional);
                tm
            }),
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
            txn_state,
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
    /// The transactional side; `None` without `transactional.id`.
    txn: Option<txn::TxnDriver>,
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
    partitioning: Partitioning,
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
            self.drive_txn();
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
        self.closing || !self.flush_waiters.is_empty() || self.txn_completing()
    }

    fn handle_command(&mut self, c: Command) {
        match c {
            Command::Send(rec, d) => match self.txn_check_send(&rec.topic) {
                Ok(()) => self.append(rec, d, Instant::now()),
                Err(e) => {
                    let _ = d.send(Err(e));
                }
            },
            Command::Flush(w) => self.flush_waiters.push(w),
            Command::Txn(c) => self.handle_txn_command(c),
        }
    }

    /// Kafka's Sender.runOnce prologue: resolve sequences, bump the epoch when requested and
    /// send InitProducerId when there is no producer id.
    fn maybe_init_producer_id(&mut self) {
        if self.fatal.is_some() || self.txn.is_some() {
            // A transactional producer gets its id from init_transactions.
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
            (Some(p), _) => (p, false),
            (None, _) => {
                self.partitioning.note_brokers(&md);
                self.partitioning
                    .partition(&rec.topic, rec.key.as_ref(), tm, &self.queues)
            }
        };
        let (partition, sticky) = partition;
        let key = (rec.topic.clone(), partition);
        if let Err(e) = self.txn_add_partition(&key) {
            let _ = d.send(Err(e));
            return;
        }
        let batch_size = self.config.batch_size;
        let q = self.queues.entry(key).or_default();
        let before: usize = q.iter().map(|b| b.size()).sum();
        let mut pending = Some((rec, Some(d)));
        if let Some(open) = q.back_mut().filter(|b| !b.is_closed() && !b.has_sequence()) {
            let (rec, d) = pending.take().unwrap();
            if let Err(back) = open.try_append(rec, d, batch_size) {
                pending = Some(back);
                // Full: it is sent as it is. (It is encoded when drained, once its producer
                // state is known.)
                open.full = true;
            }
        }
        if let Some((rec, d)) = pending {
            let mut b = ProducerBatch::new(&rec.topic, partition, self.next_batch_id);
            b.transactional = self.txn.is_some();
            b.created = enqueued;
            self.next_batch_id += 1;
            let _ = b.try_append(rec, d, batch_size);
            q.push_back(b);
        }
        let after: usize = q.iter().map(|b| b.size()).sum();
        self.partitioning
            .appended(tm, partition, sticky, after.saturating_sub(before), q);
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
            Event::Txn(ev) => self.handle_txn_event(ev),
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
                            error: Some(clone_error(&e)),
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
        // As Java's failBatch: the transaction state changes before the sender learns.
        self.txn_batch_failed(e);
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
        self.partitioning.update_load_stats(&md, &self.queues);
        let mut per_node: HashMap<i32, Vec<Tp>> = HashMap::new();
        let mut need_md = Vec::new();
        for (key, q) in self.queues.iter() {
            let Some(b) = q.front() else { continue };
            if b.retry_at.is_some_and(|t| t > now)
                || self.muted.contains(key)
                || !self.txn_send_allowed(key)
            {
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
                self.partitioning.node_ready(node, now, false);
                continue;
            }
            let Some(conn) = self.ready_connection(node) else {
                self.partitioning.node_ready(node, now, false);
                continue;
            };
            self.partitioning.node_ready(node, now, true);
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
            self.txn_batch_failed(&Error::DeliveryTimeout(timeout.as_millis() as u64));
            b.fail(&Error::DeliveryTimeout(timeout.as_millis() as u64));
        }
    }
}

#[path = "producer_dispatch.rs"]
mod dispatch;
#[path = "producer_txn.rs"]
mod txn;

#[cfg(test)]
#[path = "producer_tests.rs"]
mod tests;

//! The transactions workload (`--txn-producers N`): N transactional producers (transactional
//! ids `nemesis-txn-<k>`) writing transactions of `--txn-size` records spread over the
//! partitions of their own topic, a seeded share of them aborted on purpose, and read_committed
//! consumers reading that topic from the beginning throughout, each recording every record it
//! is served and how far it got in each partition. After the run the topic is read back under
//! read_committed once its last stable offsets reached the high watermarks (every transaction
//! decided). `txn_checker` judges it all.
//!
//! A producer records a transaction as aborted from its start (nothing can commit it but
//! EndTxn(commit)), as unknown just before it asks to commit, and as committed once the commit
//! succeeded. Any error in a transaction's course other than a failed record (which the
//! producer answers with an abort, as Kafka's abortable errors ask) drops the producer and a
//! new instance with the same transactional id is initialized, as an application does after a
//! fatal error: InitProducerId fences the old instance and completes or aborts its transaction.
//!
//! Producers with an even number are patient (`max.block.ms` 15 s: the client retries a moved
//! or paused coordinator through most faults), odd ones impatient (3 s: a commit during a
//! coordinator fault fails, its outcome unknown, and the producer re-inits), so that both
//! kinds of history are checked.
//!
//! Every client call is bounded, as in `workload`.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use bytes::Bytes;
use futures_util::future::join_all;
use strom_client::consumer::{list_offsets, LATEST_TIMESTAMP, READ_COMMITTED, READ_UNCOMMITTED};
use strom_client::ProducerConfig;
use strom_client::{Admin, Client, Consumer, ConsumerConfig, OffsetReset, Producer};

use super::checker::FinalLog;
use super::nemesis::Rng;
use super::txn_checker::{txn_value, Served, Txn, TxnHistory, TxnOutcome, TxnReport};
use super::workload::client_config;

pub const TXN_TOPIC: &str = "nemesis-txn";

/// Producer `k`'s transactional id.
pub fn transactional_id(k: usize) -> String {
    format!("nemesis-txn-{k}")
}
/// `transaction.timeout.ms`: a transaction abandoned with its producer (a commit of unknown
/// outcome) is aborted by the coordinator within it, so the last stable offsets catch up
/// with the high watermarks before the final read.
const TRANSACTION_TIMEOUT_MS: u64 = 20_000;
/// Bound on init_transactions (the client retries within `max.block.ms`).
const INIT_BOUND: Duration = Duration::from_secs(20);
/// Bound on the sends of one transaction (`delivery.timeout.ms` is 30 s).
const SEND_BOUND: Duration = Duration::from_secs(35);
/// Bound on commit / abort.
const END_BOUND: Duration = Duration::from_secs(20);
/// Bound on one admin query / consumer creation.
const QUERY_BOUND: Duration = Duration::from_secs(6);

#[derive(Default)]
struct TxnShared {
    stop_producing: AtomicBool,
    stop_consuming: AtomicBool,
    txns: Mutex<Vec<Txn>>,
    served: Mutex<Vec<Served>>,
    progress: Mutex<BTreeMap<(String, i32), i64>>,
    first_error: Mutex<Option<String>>,
    instances: AtomicU64,
    /// Transactions aborted because a record failed / aborts that failed (producer replaced).
    send_failed: AtomicU64,
    abort_failed: AtomicU64,
}

impl TxnShared {
    fn note(&self, e: String) {
        self.first_error.lock().unwrap().get_or_insert(e);
    }

    fn set_outcome(&self, i: usize, o: TxnOutcome) {
        self.txns.lock().unwrap()[i].outcome = o;
    }
}

/// The running transactions workload.
pub struct TxnWorkload {
    shared: Arc<TxnShared>,
    producers: Vec<tokio::task::JoinHandle<()>>,
    consumers: Vec<tokio::task::JoinHandle<()>>,
    bootstrap: String,
    partitions: i32,
    pub producer_count: usize,
    pub size: usize,
}

/// What the run's end hands the checker and the summary.
pub struct TxnOutcomeOfRun {
    pub history: TxnHistory,
    pub report: TxnReport,
    /// partition -> (last stable offset, high watermark) of the final read.
    pub ends: BTreeMap<i32, (i64, i64)>,
    pub problems: Vec<String>,
}

/// Creates the topic (RF 3, min.insync.replicas 2, no unclean election) and waits until every
/// partition has a leader and a full ISR.
pub async fn set_up_topic(bootstrap: &str, partitions: i32, replicas: usize) -> anyhow::Result<()> {
    let configs = vec![
        // 2 of 3; 1 when a test runs a single broker.
        (
            "min.insync.replicas".to_string(),
            replicas.min(2).to_string(),
        ),
        (
            "unclean.leader.election.enable".to_string(),
            "false".to_string(),
        ),
    ];
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = String::new();
    while Instant::now() < deadline {
        let r = tokio::time::timeout(QUERY_BOUND, async {
            let admin =
                Admin::new(Client::connect(client_config(bootstrap, "nemesis-txn-setup")).await?);
            crate::nodes::ensure_topic(&admin, TXN_TOPIC, partitions, replicas as i16, &configs)
                .await?;
            let d = admin
                .describe_topics(Some(&[TXN_TOPIC.to_string()]))
                .await?;
            let ps = d
                .into_iter()
                .next()
                .map(|t| t.partitions)
                .unwrap_or_default();
            let whole = ps.len() == partitions as usize
                && ps.iter().all(|p| p.leader >= 0 && p.isr.len() == replicas);
            anyhow::Ok(whole)
        })
        .await;
        match r {
            Ok(Ok(true)) => return Ok(()),
            Ok(Ok(false)) => last = "ISR not full yet".into(),
            Ok(Err(e)) => last = format!("{e:#}"),
            Err(_) => last = "timed out".into(),
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    bail!("topic {TXN_TOPIC}: no leader and full ISR on every partition within 60 s: {last}")
}

impl TxnWorkload {
    pub fn start(
        producers: usize,
        consumers: usize,
        size: usize,
        abort_ratio: f64,
        seed: u64,
        bootstrap: &str,
        partitions: i32,
    ) -> TxnWorkload {
        let shared = Arc::new(TxnShared::default());
        let p = (0..producers)
            .map(|k| {
                let cfg = ProducerRun {
                    k,
                    bootstrap: bootstrap.to_string(),
                    partitions,
                    size,
                    abort_ratio,
                    rng: Rng::new(seed ^ (0x7478_0000 + k as u64)),
                    shared: shared.clone(),
                };
                tokio::spawn(cfg.run())
            })
            .collect();
        let c = (0..consumers)
            .map(|k| tokio::spawn(consume(k, bootstrap.to_string(), shared.clone())))
            .collect();
        TxnWorkload {
            shared,
            producers: p,
            consumers: c,
            bootstrap: bootstrap.to_string(),
            partitions,
            producer_count: producers,
            size,
        }
    }

    pub fn abort_handles(&self) -> Vec<tokio::task::AbortHandle> {
        self.producers
            .iter()
            .chain(self.consumers.iter())
            .map(|h| h.abort_handle())
            .collect()
    }

    /// Producers finish the transaction they are in and stop (awaited by [`Self::finish`]).
    pub fn stop_producing(&self) {
        self.shared.stop_producing.store(true, Ordering::Relaxed);
    }

    async fn stop_producers(&mut self) {
        self.stop_producing();
        for h in self.producers.drain(..) {
            let _ = h.await;
        }
    }

    /// Stops the consumers, waits (bounded) until every transaction is decided (last stable
    /// offset = high watermark), reads the topic back under read_committed and checks.
    pub async fn finish(&mut self) -> TxnOutcomeOfRun {
        self.stop_producers().await;
        self.shared.stop_consuming.store(true, Ordering::Relaxed);
        for h in self.consumers.drain(..) {
            let _ = h.await;
        }
        let mut problems = Vec::new();
        let ends = match stable_ends(&self.bootstrap, self.partitions).await {
            Ok((ends, true)) => ends,
            Ok((ends, false)) => {
                problems.push(format!(
                    "{TXN_TOPIC}: last stable offsets still below the high watermarks 60 s after \
                     the producers stopped (a hanging transaction?): (LSO, HW) {ends:?}"
                ));
                ends
            }
            Err(e) => {
                problems.push(format!("{TXN_TOPIC}: offsets not listed: {e:#}"));
                BTreeMap::new()
            }
        };
        let log = if ends.is_empty() {
            FinalLog::new()
        } else {
            let upto: HashMap<i32, i64> = ends.iter().map(|(&p, &(lso, _))| (p, lso)).collect();
            match read_committed(&self.bootstrap, &upto).await {
                Ok(l) => l,
                Err(e) => {
                    problems.push(format!("{e:#}"));
                    FinalLog::new()
                }
            }
        };
        let history = TxnHistory {
            txns: self.shared.txns.lock().unwrap().clone(),
            served: self.shared.served.lock().unwrap().clone(),
            progress: self.shared.progress.lock().unwrap().clone(),
            first_error: self.shared.first_error.lock().unwrap().clone(),
            producer_instances: self.shared.instances.load(Ordering::Relaxed),
        };
        let report = super::txn_checker::check_txns(&history, &log);
        TxnOutcomeOfRun {
            history,
            report,
            ends,
            problems,
        }
    }
}

/// `max.block.ms` of producer `k`: patient (even) or impatient (odd).
pub fn max_block_ms(k: usize) -> u64 {
    if k.is_multiple_of(2) {
        15_000
    } else {
        3_000
    }
}

struct ProducerRun {
    k: usize,
    bootstrap: String,
    partitions: i32,
    size: usize,
    abort_ratio: f64,
    rng: Rng,
    shared: Arc<TxnShared>,
}

impl ProducerRun {
    async fn connect(&self) -> anyhow::Result<Producer> {
        let k = self.k;
        let props: Vec<(String, String)> = [
            ("client.id", format!("nemesis-txn-p{k}")),
            ("transactional.id", transactional_id(k)),
            ("transaction.timeout.ms", TRANSACTION_TIMEOUT_MS.to_string()),
            ("acks", "all".into()),
            ("linger.ms", "5".into()),
            ("request.timeout.ms", "5000".into()),
            ("delivery.timeout.ms", "30000".into()),
            ("retry.backoff.ms", "100".into()),
            ("max.block.ms", max_block_ms(k).to_string()),
        ]
        .into_iter()
        .map(|(a, b)| (a.to_string(), b))
        .collect();
        let cfg = ProducerConfig::from_properties(&props)?;
        let client =
            Client::connect(client_config(&self.bootstrap, &format!("nemesis-txn-p{k}"))).await?;
        let p = Producer::try_new(client, cfg)?;
        self.shared.instances.fetch_add(1, Ordering::Relaxed);
        p.init_transactions().await?;
        Ok(p)
    }

    async fn run(mut self) {
        let k = self.k;
        let shared = self.shared.clone();
        let mut producer: Option<Producer> = None;
        let mut t: u64 = 0;
        while !shared.stop_producing.load(Ordering::Relaxed) {
            let p = match &producer {
                Some(p) => p,
                None => match tokio::time::timeout(INIT_BOUND, self.connect()).await {
                    Ok(Ok(p)) => producer.insert(p),
                    other => {
                        let e = match other {
                            Ok(Err(e)) => format!("{e:#}"),
                            _ => "timed out".into(),
                        };
                        shared.note(format!("txn producer {k} init: {e}"));
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        continue;
                    }
                },
            };
            let commit = (self.rng.next_u64() % 1_000_000) as f64 / 1_000_000.0 >= self.abort_ratio;
            if let Err(e) = p.begin_transaction().await {
                shared.note(format!("txn producer {k} begin: {e}"));
                producer = None;
                continue;
            }
            let records: Vec<(i32, Option<i64>)> = (0..self.size)
                .map(|i| {
                    (
                        ((t as usize * self.size + i) % self.partitions as usize) as i32,
                        None,
                    )
                })
                .collect();
            // Recorded before the first send: aborted until EndTxn(commit) is asked for.
            let idx = {
                let mut txns = shared.txns.lock().unwrap();
                txns.push(Txn {
                    producer: k,
                    txn: t,
                    intended_commit: commit,
                    outcome: TxnOutcome::Aborted,
                    records: records.clone(),
                });
                txns.len() - 1
            };
            let sends: Vec<_> = records
                .iter()
                .enumerate()
                .map(|(i, &(partition, _))| {
                    p.send(
                        TXN_TOPIC,
                        Some(partition),
                        None,
                        Some(Bytes::from(txn_value(k, t, i, commit))),
                        Vec::new(),
                    )
                })
                .collect();
            let results = tokio::time::timeout(SEND_BOUND, join_all(sends)).await;
            let mut all_acked = true;
            match results {
                Ok(rs) => {
                    let mut failed = Vec::new();
                    {
                        let mut txns = shared.txns.lock().unwrap();
                        for (i, r) in rs.into_iter().enumerate() {
                            match r {
                                Ok((partition, offset)) => {
                                    txns[idx].records[i] = (partition, Some(offset))
                                }
                                Err(e) => failed.push(format!("record {i}: {e}")),
                            }
                        }
                    }
                    if let Some(e) = failed.first() {
                        all_acked = false;
                        shared.send_failed.fetch_add(1, Ordering::Relaxed);
                        shared.note(format!("txn producer {k} txn {t} {e}"));
                    }
                }
                Err(_) => {
                    all_acked = false;
                    shared.send_failed.fetch_add(1, Ordering::Relaxed);
                    shared.note(format!("txn producer {k} txn {t}: sends timed out"));
                }
            }
            t += 1;
            if commit && all_acked {
                shared.set_outcome(idx, TxnOutcome::Unknown);
                match tokio::time::timeout(END_BOUND, p.commit_transaction()).await {
                    Ok(Ok(())) => shared.set_outcome(idx, TxnOutcome::Committed),
                    other => {
                        let e = match other {
                            Ok(Err(e)) => format!("{e}"),
                            _ => "timed out".into(),
                        };
                        shared.note(format!("txn producer {k} commit of txn {}: {e}", t - 1));
                        producer = None;
                    }
                }
            } else {
                match tokio::time::timeout(END_BOUND, p.abort_transaction()).await {
                    Ok(Ok(())) => {}
                    other => {
                        let e = match other {
                            Ok(Err(e)) => format!("{e}"),
                            _ => "timed out".into(),
                        };
                        shared.abort_failed.fetch_add(1, Ordering::Relaxed);
                        shared.note(format!("txn producer {k} abort of txn {}: {e}", t - 1));
                        producer = None;
                    }
                }
            }
        }
    }
}

/// Consumer `k`: read_committed, every partition from the beginning, until told to stop. A
/// consumer replaced after errors is a new instance ("c<k>.<n>") reading from 0 again.
async fn consume(k: usize, bootstrap: String, shared: Arc<TxnShared>) {
    let config = ConsumerConfig {
        auto_offset_reset: OffsetReset::Earliest,
        fetch_max_wait: Duration::from_millis(200),
        isolation_level: READ_COMMITTED,
        ..Default::default()
    };
    let mut consumer: Option<(Consumer, String)> = None;
    let mut instance = 0u32;
    let mut errors = 0u32;
    while !shared.stop_consuming.load(Ordering::Relaxed) {
        let (c, name) = match &mut consumer {
            Some(c) => c,
            None => {
                let made = async {
                    let client =
                        Client::connect(client_config(&bootstrap, &format!("nemesis-txn-c{k}")))
                            .await?;
                    let mut c = Consumer::new(client, config.clone());
                    c.assign(TXN_TOPIC, None).await?;
                    c.seek_to_beginning(TXN_TOPIC, None);
                    anyhow::Ok(c)
                };
                match tokio::time::timeout(QUERY_BOUND, made).await {
                    Ok(Ok(c)) => {
                        instance += 1;
                        errors = 0;
                        consumer.insert((c, format!("c{k}.{instance}")))
                    }
                    _ => {
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        continue;
                    }
                }
            }
        };
        match tokio::time::timeout(Duration::from_secs(8), c.poll(Duration::from_millis(500))).await
        {
            Ok(Ok(records)) => {
                errors = 0;
                {
                    let mut o = shared.served.lock().unwrap();
                    for r in records {
                        o.push(Served {
                            consumer: name.clone(),
                            partition: r.partition,
                            offset: r.offset,
                            value: String::from_utf8_lossy(r.value.as_deref().unwrap_or(&[]))
                                .into_owned(),
                        });
                    }
                }
                // The position after the poll: everything below it was decided and, if
                // committed, served (by this poll or an earlier one).
                let mut prog = shared.progress.lock().unwrap();
                for (topic, p) in c.assignment() {
                    if let Some(pos) = c.position(&topic, p) {
                        let e = prog.entry((name.clone(), p)).or_insert(pos);
                        *e = (*e).max(pos);
                    }
                }
            }
            // Leader moves, timeouts: try again; a consumer failing for long is replaced.
            Ok(Err(_)) | Err(_) => {
                errors += 1;
                if errors >= 60 {
                    consumer = None;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// partition -> (LSO, HW), waiting (bounded) until they are equal everywhere; the bool says
/// whether they got there.
async fn stable_ends(
    bootstrap: &str,
    partitions: i32,
) -> anyhow::Result<(BTreeMap<i32, (i64, i64)>, bool)> {
    let parts: Vec<i32> = (0..partitions).collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last: Option<BTreeMap<i32, (i64, i64)>> = None;
    let mut last_err = None;
    while Instant::now() < deadline {
        let r = tokio::time::timeout(QUERY_BOUND, async {
            let c = Client::connect(client_config(bootstrap, "nemesis-txn-probe")).await?;
            let lso = list_offsets(&c, TXN_TOPIC, &parts, LATEST_TIMESTAMP, READ_COMMITTED).await?;
            let hw =
                list_offsets(&c, TXN_TOPIC, &parts, LATEST_TIMESTAMP, READ_UNCOMMITTED).await?;
            anyhow::Ok(
                parts
                    .iter()
                    .map(|p| {
                        (
                            *p,
                            (
                                lso.get(p).copied().unwrap_or(-1),
                                hw.get(p).copied().unwrap_or(-1),
                            ),
                        )
                    })
                    .collect::<BTreeMap<_, _>>(),
            )
        })
        .await;
        match r {
            Ok(Ok(m)) => {
                let settled = m.values().all(|(l, h)| *h >= 0 && l == h);
                if settled {
                    return Ok((m, true));
                }
                last = Some(m);
            }
            Ok(Err(e)) => last_err = Some(e),
            Err(_) => last_err = Some(anyhow!("list offsets timed out")),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    match (last, last_err) {
        (Some(m), _) => Ok((m, false)),
        (None, Some(e)) => Err(e),
        (None, None) => bail!("no answer"),
    }
}

/// Reads every partition from offset 0 until the consumer's position reaches `ends` (the last
/// stable offsets: under read_committed the last records below them may be markers or
/// aborted, so the position, not the last record, tells when a partition is done).
async fn read_committed(bootstrap: &str, ends: &HashMap<i32, i64>) -> anyhow::Result<FinalLog> {
    let client = Client::connect(client_config(bootstrap, "nemesis-txn-readback")).await?;
    let config = ConsumerConfig {
        auto_offset_reset: OffsetReset::Earliest,
        fetch_max_wait: Duration::from_millis(200),
        isolation_level: READ_COMMITTED,
        ..Default::default()
    };
    let mut consumer = Consumer::new(client, config);
    consumer.assign(TXN_TOPIC, None).await?;
    consumer.seek_to_beginning(TXN_TOPIC, None);
    let mut log = FinalLog::new();
    let done = |c: &Consumer| {
        ends.iter()
            .all(|(p, e)| c.position(TXN_TOPIC, *p).is_some_and(|pos| pos >= *e))
    };
    let mut last_progress = Instant::now();
    while !done(&consumer) {
        let polled = tokio::time::timeout(
            Duration::from_secs(8),
            consumer.poll(Duration::from_secs(1)),
        )
        .await;
        match polled {
            Ok(Ok(b)) => {
                if !b.is_empty() {
                    last_progress = Instant::now();
                }
                for r in b {
                    if r.offset >= ends.get(&r.partition).copied().unwrap_or(0) {
                        continue;
                    }
                    let v = String::from_utf8_lossy(r.value.as_deref().unwrap_or(&[])).into_owned();
                    log.entry(r.partition).or_default().push((r.offset, v));
                }
            }
            other => {
                if last_progress.elapsed() > Duration::from_secs(45) {
                    let why = match other {
                        Ok(Err(e)) => format!("{e}"),
                        _ => "poll timed out".into(),
                    };
                    let at: Vec<_> = ends
                        .keys()
                        .map(|p| (*p, consumer.position(TXN_TOPIC, *p)))
                        .collect();
                    bail!("reading {TXN_TOPIC} back: stuck at {at:?} of {ends:?}: {why}");
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        if last_progress.elapsed() > Duration::from_secs(60) {
            bail!("reading {TXN_TOPIC} back: no progress for 60 s towards {ends:?}");
        }
    }
    for recs in log.values_mut() {
        recs.sort_by_key(|(o, _)| *o);
        recs.dedup_by_key(|(o, _)| *o);
    }
    Ok(log)
}

/// The summary lines of the transactions workload.
pub fn print_summary(w: &TxnWorkload, o: &TxnOutcomeOfRun) {
    let r = &o.report;
    let h = &o.history;
    let consumers = {
        let mut c: Vec<&str> = h.progress.keys().map(|(c, _)| c.as_str()).collect();
        c.dedup();
        c.len()
    };
    println!(
        "  transactions: {} producers ({} instances, so {} re-inits), {} records each; \
         {} transactions: committed {}, aborted {}, unknown {} (final read: {} committed, {} \
         aborted)",
        w.producer_count,
        h.producer_instances,
        h.producer_instances.saturating_sub(w.producer_count as u64),
        w.size,
        h.txns.len(),
        r.committed,
        r.aborted,
        r.unknown_committed + r.unknown_aborted,
        r.unknown_committed,
        r.unknown_aborted
    );
    println!(
        "    {} transactions aborted after a record failed, {} aborts failed (producer replaced)",
        w.shared.send_failed.load(Ordering::Relaxed),
        w.shared.abort_failed.load(Ordering::Relaxed)
    );
    println!(
        "    read_committed consumers: {} instances served {} records; final read {} records \
         ({} unparsable) below the last stable offsets, (LSO, HW) {:?}",
        consumers, r.served, r.records_in_log, r.unparsable, o.ends
    );
    if let Some(e) = &h.first_error {
        println!("    first transactional client error: {e}");
    }
}

#[cfg(test)]
#[path = "txn_kafka_tests.rs"]
mod kafka_tests;

//! The workload: idempotent producers (acks=all) and tailing consumers running while the
//! nemesis works, each recording what it was told (acks with their offsets, records read);
//! plus [`Probe`], the admin view the nemesis and the final checks use (partition leaders and
//! ISRs, the active controller, high watermarks) and reading the whole topic back at the end.
//!
//! Every client call is bounded by a timeout: a paused (SIGSTOPped) or cut-off broker accepts
//! connections or drops packets and would otherwise hang a request for the client's default
//! 30 s.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use bytes::Bytes;
use futures_util::stream::{FuturesUnordered, StreamExt};
use strom_client::consumer::LATEST_TIMESTAMP;
use strom_client::{Admin, Client, ClientConfig, Consumer, ConsumerConfig, OffsetReset};
use strom_client::{PartitionMetadata, Producer, ProducerConfig};

use super::checker::{value_of, Acked, FinalLog, History, Observed};

pub const TOPIC: &str = "nemesis";
/// Request timeout of every client: short, so a paused or cut-off broker costs seconds.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound on one admin query.
const QUERY_TIMEOUT: Duration = Duration::from_secs(6);

pub fn client_config(bootstrap: &str, id: &str) -> ClientConfig {
    let mut c = ClientConfig::new(bootstrap);
    c.client_id = id.to_string();
    c.request_timeout = REQUEST_TIMEOUT;
    c.connect_timeout = Duration::from_secs(3);
    c
}

async fn bounded<T>(
    what: &str,
    f: impl std::future::Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    tokio::time::timeout(QUERY_TIMEOUT, f)
        .await
        .map_err(|_| anyhow!("{what}: timed out after {} s", QUERY_TIMEOUT.as_secs()))?
}

/// Admin queries against the cluster, through every node's address (a fresh client each
/// time, so a dead connection or stale metadata from a previous fault never sticks).
pub struct Probe {
    pub bootstrap: String,
    pub partitions: i32,
    pub replicas: usize,
}

impl Probe {
    async fn admin(&self) -> anyhow::Result<Admin> {
        let c = Client::connect(client_config(&self.bootstrap, "nemesis-probe")).await?;
        Ok(Admin::new(c))
    }

    /// Every partition of the topic as Metadata describes it.
    pub async fn partition_metadata(&self) -> anyhow::Result<Vec<PartitionMetadata>> {
        bounded("describe topic", async {
            let admin = self.admin().await?;
            let d = admin.describe_topics(Some(&[TOPIC.to_string()])).await?;
            Ok(d.into_iter()
                .next()
                .map(|t| t.partitions)
                .unwrap_or_default())
        })
        .await
    }

    /// partition -> (leader, isr), for partitions with a leader.
    pub async fn partition_state(&self) -> anyhow::Result<BTreeMap<i32, (i32, Vec<i32>)>> {
        Ok(self
            .partition_metadata()
            .await?
            .into_iter()
            .filter(|p| p.leader >= 0)
            .map(|p| (p.partition, (p.leader, p.isr)))
            .collect())
    }

    /// (partition, leader) pairs.
    pub async fn leaders(&self) -> anyhow::Result<Vec<(i32, i32)>> {
        Ok(self
            .partition_state()
            .await?
            .into_iter()
            .map(|(p, (l, _))| (p, l))
            .collect())
    }

    /// The active controller (Raft leader of the metadata quorum) as a broker reports it in
    /// DescribeCluster: Strom fills `controller_id` from its quorum's current leader.
    pub async fn active_controller(&self) -> Option<i32> {
        bounded("describe cluster", async {
            Ok(self.admin().await?.describe_cluster().await?.controller_id)
        })
        .await
        .ok()
        .filter(|&c| c >= 0)
    }

    pub async fn registered_brokers(&self) -> anyhow::Result<usize> {
        bounded("describe cluster", async {
            Ok(self.admin().await?.describe_cluster().await?.brokers.len())
        })
        .await
    }

    /// Every partition has a leader and a full ISR.
    pub async fn is_whole(&self) -> bool {
        match self.partition_state().await {
            Ok(s) => {
                s.len() == self.partitions as usize
                    && s.values().all(|(_, isr)| isr.len() == self.replicas)
            }
            Err(_) => false,
        }
    }

    /// Waits (bounded) until [`Probe::is_whole`]; false on timeout.
    pub async fn wait_whole(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.is_whole().await {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    /// partition -> high watermark (ListOffsets latest, read_uncommitted, answered by the
    /// leader).
    pub async fn high_watermarks(&self) -> anyhow::Result<HashMap<i32, i64>> {
        bounded("list offsets", async {
            let c = Client::connect(client_config(&self.bootstrap, "nemesis-probe")).await?;
            let consumer = Consumer::new(c, ConsumerConfig::default());
            let parts: Vec<i32> = (0..self.partitions).collect();
            Ok(consumer
                .list_offsets(TOPIC, &parts, LATEST_TIMESTAMP)
                .await?)
        })
        .await
    }
}

/// What the producers and consumers share with the orchestrator.
#[derive(Default)]
pub struct Shared {
    /// Producers stop sending new records.
    pub stop_producing: AtomicBool,
    /// Consumers stop polling.
    pub stop_consuming: AtomicBool,
    pub sent: AtomicU64,
    pub acked: Mutex<Vec<Acked>>,
    pub failed: Mutex<Vec<(usize, u64)>>,
    pub pending: AtomicU64,
    pub first_error: Mutex<Option<String>>,
    pub observed: Mutex<Vec<Observed>>,
}

impl Shared {
    pub fn history(&self) -> History {
        History {
            sent: self.sent.load(Ordering::Relaxed),
            acked: self.acked.lock().unwrap().clone(),
            failed: self.failed.lock().unwrap().clone(),
            pending: self.pending.load(Ordering::Relaxed),
            first_error: self.first_error.lock().unwrap().clone(),
            observed: self.observed.lock().unwrap().clone(),
        }
    }
}

/// How long producers keep waiting for outstanding acks after they stop sending.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(75);

/// Producer `k`: sends "p<k>-<seq>" to partition seq % partitions every few ms (so each
/// producer's sequence interleaves across all partitions), at most 200 unacknowledged.
pub async fn produce(k: usize, bootstrap: String, partitions: i32, shared: Arc<Shared>) {
    let props = vec![
        ("bootstrap.servers".to_string(), bootstrap),
        ("client.id".to_string(), format!("nemesis-p{k}")),
        ("acks".to_string(), "all".to_string()),
        ("enable.idempotence".to_string(), "true".to_string()),
        (
            "max.in.flight.requests.per.connection".to_string(),
            "5".to_string(),
        ),
        ("linger.ms".to_string(), "5".to_string()),
        ("batch.size".to_string(), "4096".to_string()),
        ("request.timeout.ms".to_string(), "5000".to_string()),
        ("delivery.timeout.ms".to_string(), "60000".to_string()),
        ("retry.backoff.ms".to_string(), "100".to_string()),
    ];
    let note = |e: String| {
        shared.first_error.lock().unwrap().get_or_insert(e);
    };
    // The cluster may be mid-fault when a producer starts: retry the connection (bounded by
    // the run: stop_producing ends it).
    let producer = loop {
        match ProducerConfig::from_properties(&props) {
            Ok(cfg) => match Producer::connect(cfg).await {
                Ok(p) => break p,
                Err(e) => note(format!("producer {k} connect: {e}")),
            },
            Err(e) => {
                note(format!("producer {k} config: {e}"));
                return;
            }
        }
        if shared.stop_producing.load(Ordering::Relaxed) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let mut pending = FuturesUnordered::new();
    let record = |seq: u64, r: strom_client::Result<(i32, i64)>| match r {
        Ok((partition, offset)) => shared.acked.lock().unwrap().push(Acked {
            producer: k,
            seq,
            partition,
            offset,
        }),
        Err(e) => {
            shared.failed.lock().unwrap().push((k, seq));
            note(format!("producer {k} record {seq}: {e}"));
        }
    };
    let mut seq = 0u64;
    let mut tick = tokio::time::interval(Duration::from_millis(4));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while !shared.stop_producing.load(Ordering::Relaxed) {
        if pending.len() >= 200 {
            // Back-pressure: wait for one outcome (or a tick to re-check the stop flag).
            tokio::select! {
                Some((s, r)) = pending.next() => record(s, r),
                _ = tick.tick() => {}
            }
            continue;
        }
        tokio::select! {
            Some((s, r)) = pending.next() => { record(s, r); continue; }
            _ = tick.tick() => {}
        }
        let partition = (seq % partitions as u64) as i32;
        let fut = producer.send(
            TOPIC,
            Some(partition),
            None,
            Some(Bytes::from(value_of(k, seq))),
            Vec::new(),
        );
        shared.sent.fetch_add(1, Ordering::Relaxed);
        pending.push(async move { (seq, fut.await) });
        seq += 1;
    }
    let drain = async {
        while let Some((s, r)) = pending.next().await {
            record(s, r);
        }
    };
    if tokio::time::timeout(DRAIN_TIMEOUT, drain).await.is_err() {
        shared
            .pending
            .fetch_add(pending.len() as u64, Ordering::Relaxed);
    }
}

/// Consumer `k`: assigned every partition from the beginning, polling until told to stop,
/// recording every (partition, offset, value) it is served.
pub async fn consume(k: usize, bootstrap: String, shared: Arc<Shared>) {
    let config = ConsumerConfig {
        auto_offset_reset: OffsetReset::Earliest,
        fetch_max_wait: Duration::from_millis(200),
        ..Default::default()
    };
    let mut consumer: Option<Consumer> = None;
    while !shared.stop_consuming.load(Ordering::Relaxed) {
        let c = match &mut consumer {
            Some(c) => c,
            None => {
                let made = async {
                    let client =
                        Client::connect(client_config(&bootstrap, &format!("nemesis-c{k}")))
                            .await?;
                    let mut c = Consumer::new(client, config.clone());
                    c.assign(TOPIC, None).await?;
                    c.seek_to_beginning(TOPIC, None);
                    anyhow::Ok(c)
                };
                match tokio::time::timeout(QUERY_TIMEOUT, made).await {
                    Ok(Ok(c)) => consumer.insert(c),
                    _ => {
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        continue;
                    }
                }
            }
        };
        // poll's own timeout bounds the wait for records, not a hung request: bound both.
        match tokio::time::timeout(Duration::from_secs(8), c.poll(Duration::from_millis(500))).await
        {
            Ok(Ok(records)) => {
                let mut o = shared.observed.lock().unwrap();
                for r in records {
                    o.push(Observed {
                        consumer: k,
                        partition: r.partition,
                        offset: r.offset,
                        value: String::from_utf8_lossy(r.value.as_deref().unwrap_or(&[]))
                            .into_owned(),
                    });
                }
            }
            // Leader moves, timeouts: try again (the client refreshes its metadata on
            // retriable errors).
            Ok(Err(_)) | Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// Reads every partition from offset 0 up to `ends` (the high watermarks), bounded.
pub async fn read_all(bootstrap: &str, ends: &HashMap<i32, i64>) -> anyhow::Result<FinalLog> {
    let client = Client::connect(client_config(bootstrap, "nemesis-readback")).await?;
    let config = ConsumerConfig {
        auto_offset_reset: OffsetReset::Earliest,
        fetch_max_wait: Duration::from_millis(200),
        ..Default::default()
    };
    let mut consumer = Consumer::new(client, config);
    consumer.assign(TOPIC, None).await?;
    consumer.seek_to_beginning(TOPIC, None);
    let mut log = FinalLog::new();
    let mut next: HashMap<i32, i64> = ends.keys().map(|&p| (p, 0)).collect();
    let done = |next: &HashMap<i32, i64>| ends.iter().all(|(p, e)| next.get(p).unwrap_or(&0) >= e);
    let mut last_progress = Instant::now();
    while !done(&next) {
        let polled = tokio::time::timeout(
            Duration::from_secs(8),
            consumer.poll(Duration::from_secs(1)),
        )
        .await;
        let batch = match polled {
            Ok(Ok(b)) if !b.is_empty() => b,
            other => {
                if last_progress.elapsed() > Duration::from_secs(45) {
                    let why = match other {
                        Ok(Err(e)) => format!("{e}"),
                        Err(_) => "poll timed out".into(),
                        Ok(Ok(_)) => "no records".into(),
                    };
                    bail!("reading the topic back: stuck at {next:?} of {ends:?}: {why}");
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        last_progress = Instant::now();
        for r in batch {
            let end = ends.get(&r.partition).copied().unwrap_or(0);
            if r.offset >= end {
                continue;
            }
            next.insert(r.partition, r.offset + 1);
            let v = String::from_utf8_lossy(r.value.as_deref().unwrap_or(&[])).into_owned();
            log.entry(r.partition).or_default().push((r.offset, v));
        }
    }
    for recs in log.values_mut() {
        // Offsets are served in order; a re-fetch after an error could repeat some.
        recs.sort_by_key(|(o, _)| *o);
        recs.dedup_by_key(|(o, _)| *o);
    }
    Ok(log)
}

/// Waits until every node is registered with the controller, the topic exists (replication
/// factor `probe.replicas`, topic configs `configs`) with a leader and a full ISR on every
/// partition. With `away_from_controller` every partition is placed on the nodes other than
/// the active controller (the first of them the preferred leader), so that faults on the
/// partition's replicas leave the metadata quorum's leader alone.
pub async fn set_up_topic(
    probe: &Probe,
    nodes: usize,
    configs: &[(String, String)],
    away_from_controller: bool,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let last = match probe.registered_brokers().await {
            Ok(n) if n >= nodes => break,
            Ok(n) => format!("{n} registered"),
            Err(e) => format!("{e:#}"),
        };
        if Instant::now() >= deadline {
            bail!("timed out waiting for {nodes} brokers to register: {last}");
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let assignments = if away_from_controller {
        let controller = loop {
            if let Some(c) = probe.active_controller().await {
                break c;
            }
            if Instant::now() >= deadline {
                bail!("timed out waiting for an active controller");
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        };
        let others: Vec<i32> = (1..=nodes as i32)
            .filter(|&n| n != controller)
            .take(probe.replicas)
            .collect();
        if others.len() < probe.replicas {
            bail!(
                "{} replicas away from controller {controller} need more than {nodes} nodes",
                probe.replicas
            );
        }
        vec![others; probe.partitions as usize]
    } else {
        Vec::new()
    };
    loop {
        let r = bounded("create topic", async {
            let admin = probe.admin().await?;
            if assignments.is_empty() {
                return crate::nodes::ensure_topic(
                    &admin,
                    TOPIC,
                    probe.partitions,
                    probe.replicas as i16,
                    configs,
                )
                .await;
            }
            match admin
                .create_topic_with_assignments(TOPIC, assignments.clone(), configs, false)
                .await
            {
                Ok(()) => Ok(()),
                Err(e) if e.code() == Some(strom_client::ErrorCode::TopicAlreadyExists) => Ok(()),
                Err(e) => Err(e.into()),
            }
        })
        .await;
        match r {
            Ok(()) => break,
            Err(e) if Instant::now() >= deadline => return Err(e).context("creating the topic"),
            Err(_) => tokio::time::sleep(Duration::from_millis(300)).await,
        }
    }
    if !probe.wait_whole(Duration::from_secs(30)).await {
        bail!("timed out waiting for a leader and a full ISR on every partition");
    }
    Ok(())
}

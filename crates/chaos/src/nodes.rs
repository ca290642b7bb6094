//! The system under test of a chaos experiment: a local Strom cluster or a local Apache Kafka
//! 4.4 cluster, behind one surface (start, kill, signal, restart, addresses, partition dirs) so
//! that every experiment runs unchanged on both.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use strom_client::{Admin, Client, ClientConfig, Consumer, ConsumerConfig, OffsetReset};

use super::kafka_cluster::KafkaCluster;
use strom_launcher::LocalCluster;
use strom_launcher::NodeProcs;

/// Which system an experiment runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Broker {
    Strom,
    Kafka,
}

impl Broker {
    pub fn name(self) -> &'static str {
        match self {
            Broker::Strom => "strom",
            Broker::Kafka => "kafka",
        }
    }

    /// `strom`, `kafka` or `both` (Strom first).
    pub fn parse_list(s: &str) -> anyhow::Result<Vec<Broker>> {
        match s {
            "strom" => Ok(vec![Broker::Strom]),
            "kafka" => Ok(vec![Broker::Kafka]),
            "both" => Ok(vec![Broker::Strom, Broker::Kafka]),
            other => bail!("--broker must be strom, kafka or both, not '{other}'"),
        }
    }
}

/// A Strom or a Kafka cluster of local processes.
pub enum Nodes {
    Strom(LocalCluster),
    Kafka(KafkaCluster),
}

impl Nodes {
    /// Starts `nodes` fresh nodes of `broker` under `dir`; `set` holds `key=value` broker
    /// configs (Strom takes Kafka's names). Kafka needs its jars in `libs`.
    pub fn start(
        broker: Broker,
        dir: &Path,
        nodes: u16,
        libs: Option<&Path>,
        set: &[String],
    ) -> anyhow::Result<Nodes> {
        Ok(match broker {
            Broker::Strom => Nodes::Strom(crate::launch_strom(dir, nodes, set, Vec::new())?),
            Broker::Kafka => Nodes::Kafka(KafkaCluster::start(
                dir,
                nodes,
                libs.context("--broker kafka needs the Kafka jars")?,
                set,
            )?),
        })
    }

    pub fn bootstrap_without(&self, exclude: &[i32]) -> String {
        match self {
            Nodes::Strom(c) => c.bootstrap_without(exclude),
            Nodes::Kafka(c) => (1..=c.nodes())
                .filter(|id| !exclude.contains(id))
                .map(|id| c.broker_addr(id))
                .collect::<Vec<_>>()
                .join(","),
        }
    }

    pub fn nodes(&self) -> i32 {
        match self {
            Nodes::Strom(c) => c.nodes(),
            Nodes::Kafka(c) => c.nodes(),
        }
    }

    /// The nodes' processes.
    pub fn procs(&self) -> &NodeProcs {
        match self {
            Nodes::Strom(c) => &c.procs,
            Nodes::Kafka(c) => &c.procs,
        }
    }

    pub fn procs_mut(&mut self) -> &mut NodeProcs {
        match self {
            Nodes::Strom(c) => &mut c.procs,
            Nodes::Kafka(c) => &mut c.procs,
        }
    }

    pub fn spawn(&mut self, id: i32) -> anyhow::Result<()> {
        match self {
            Nodes::Strom(c) => Ok(c.spawn(id)?),
            Nodes::Kafka(c) => c.spawn(id),
        }
    }

    /// Waits for every broker to register, creates `topic` (1 partition, replication factor
    /// 3, `configs`) and waits for a leader and a full ISR; the leader.
    pub async fn create_topic(
        &mut self,
        topic: &str,
        configs: &[(String, String)],
    ) -> anyhow::Result<i32> {
        let nodes = self.nodes();
        let all = self.bootstrap_without(&[]);
        // A node that dies at start (a port taken, a bad flag) fails the run at once rather
        // than after the wait.
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut last = String::new();
        loop {
            self.procs_mut().check_alive()?;
            let registered = async {
                let admin = Admin::new(connect(&all).await?);
                let c = admin.describe_cluster().await?;
                anyhow::Ok(c.brokers.len() as i32 >= nodes)
            };
            match registered.await {
                Ok(true) => break,
                Ok(false) => {}
                Err(e) => last = format!("{e:#}"),
            }
            if Instant::now() >= deadline {
                bail!("timed out after 60 s waiting for all brokers to register {last}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        self.procs_mut().check_alive()?;
        wait_for("the topic to be created", Duration::from_secs(30), || {
            let all = all.clone();
            async move {
                let admin = Admin::new(connect(&all).await?);
                ensure_topic(&admin, topic, 1, 3, configs).await?;
                Ok(Some(()))
            }
        })
        .await?;
        let (leader, _) = wait_for("a leader and a full ISR", Duration::from_secs(30), || {
            let all = all.clone();
            async move {
                Ok(partition_state(&all, topic)
                    .await?
                    .filter(|(_, isr)| isr.len() == 3))
            }
        })
        .await?;
        Ok(leader)
    }

    /// Where node `id` keeps partition `topic-p`.
    pub fn partition_dir(&self, id: i32, topic: &str, p: i32) -> PathBuf {
        match self {
            Nodes::Strom(c) => c.node_dir(id).join(format!("{topic}-{p}")),
            Nodes::Kafka(c) => c.partition_dir(id, topic, p),
        }
    }

    /// Waits up to `limit` for node `id` to exit by itself (after SIGTERM) and reaps it; how
    /// long that took.
    pub fn wait_exit(&mut self, id: i32, limit: Duration) -> anyhow::Result<Duration> {
        let start = Instant::now();
        loop {
            if self.procs_mut().try_reap(id)? {
                return Ok(start.elapsed());
            }
            if start.elapsed() > limit {
                bail!("node {id} did not exit within {limit:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

pub async fn connect(bootstrap: &str) -> anyhow::Result<Client> {
    let mut config = ClientConfig::new(bootstrap);
    config.client_id = "strom-chaos".into();
    Ok(Client::connect(config).await?)
}

/// Retries `f` every 200 ms until it returns `Ok(Some(_))` or `timeout` passes.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = Instant::now() + timeout;
    let mut last = String::new();
    loop {
        match f().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last = format!("{e:#}"),
        }
        if Instant::now() >= deadline {
            bail!(
                "timed out after {} s waiting for {what} {last}",
                timeout.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// (leader, isr) of `topic`'s partition 0 as seen through `bootstrap`, when it has a leader.
pub async fn partition_state(
    bootstrap: &str,
    topic: &str,
) -> anyhow::Result<Option<(i32, Vec<i32>)>> {
    let admin = Admin::new(connect(bootstrap).await?);
    let d = admin.describe_topics(Some(&[topic.to_string()])).await?;
    Ok(d.first()
        .and_then(|t| t.partitions.first())
        .filter(|p| p.leader >= 0)
        .map(|p| (p.leader, p.isr.clone())))
}

/// Every value's sequence number (values are "seq-N"), in offset order, from offset 0 to the
/// end offset of `topic`'s partition 0.
pub async fn read_all(bootstrap: &str, topic: &str) -> anyhow::Result<Vec<u64>> {
    let client = connect(bootstrap).await?;
    let config = ConsumerConfig {
        auto_offset_reset: OffsetReset::Earliest,
        fetch_max_wait: Duration::from_millis(200),
        ..Default::default()
    };
    let mut consumer = Consumer::new(client, config);
    consumer.assign(topic, Some(&[0])).await?;
    let end = wait_for("the end offset", Duration::from_secs(30), || {
        let c = &consumer;
        async move {
            let m = c
                .list_offsets(topic, &[0], strom_client::consumer::LATEST_TIMESTAMP)
                .await?;
            Ok(m.get(&0).copied())
        }
    })
    .await?;
    consumer.seek_to_beginning(topic, Some(&[0]));
    let mut seen = Vec::new();
    let mut last_progress = Instant::now();
    let mut next = 0i64;
    while next < end {
        let batch = match consumer.poll(Duration::from_secs(1)).await {
            Ok(b) => b,
            Err(e) => {
                if last_progress.elapsed() > Duration::from_secs(30) {
                    return Err(e).context("reading the topic back");
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        if batch.is_empty() {
            if last_progress.elapsed() > Duration::from_secs(30) {
                bail!("reading the topic back: stuck at offset {next} of {end}");
            }
            continue;
        }
        last_progress = Instant::now();
        for r in batch {
            next = r.offset + 1;
            let v = r.value.as_deref().unwrap_or(&[]);
            let s = std::str::from_utf8(v)
                .ok()
                .and_then(|s| s.strip_prefix("seq-"))
                .and_then(|n| n.parse::<u64>().ok())
                .ok_or_else(|| anyhow!("unexpected value at offset {}: {v:?}", r.offset))?;
            seen.push(s);
        }
    }
    Ok(seen)
}

/// The last `n` lines of every node's `server.log` under a run's `dir`: attached to a failed
/// run's error, so that it says why a node died or never served even when the data dir is
/// thrown away afterwards (as the tests' temporary dirs are).
pub fn log_tails(dir: &Path, n: usize) -> String {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return String::new();
    };
    let mut nodes: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|f| f.to_str())
                .is_some_and(|f| f.starts_with("node-"))
        })
        .collect();
    nodes.sort();
    let mut out = String::new();
    for node in nodes {
        let Ok(text) = std::fs::read_to_string(node.join("server.log")) else {
            continue;
        };
        let lines: Vec<&str> = text.lines().collect();
        out.push_str(&format!(
            "--- {}/server.log (last {n} lines)\n",
            node.display()
        ));
        for l in &lines[lines.len().saturating_sub(n)..] {
            out.push_str(l);
            out.push('\n');
        }
    }
    out
}

/// Creates `topic`, counting TOPIC_ALREADY_EXISTS as done: an earlier attempt whose answer was
/// lost (a node killed or paused meanwhile) may have created it.
pub async fn ensure_topic(
    admin: &Admin,
    topic: &str,
    partitions: i32,
    replication_factor: i16,
    configs: &[(String, String)],
) -> anyhow::Result<()> {
    match admin
        .create_topic(topic, partitions, replication_factor, configs, false)
        .await
    {
        Ok(()) => Ok(()),
        Err(e) if e.code() == Some(strom_client::ErrorCode::TopicAlreadyExists) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

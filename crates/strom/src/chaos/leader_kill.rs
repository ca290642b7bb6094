//! `strom chaos leader-kill`: seed 003's leader-failure experiment.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use bytes::Bytes;
use futures_util::stream::{FuturesUnordered, StreamExt};
use strom_client::{Admin, Client, ClientConfig, Consumer, ConsumerConfig, OffsetReset};
use strom_client::{Producer, ProducerConfig};

use super::cluster::LocalCluster;

const TOPIC: &str = "chaos-leader-kill";

#[derive(clap::Args, Debug, Clone)]
pub struct LeaderKillArgs {
    /// Records to send ("seq-0" .. "seq-N-1").
    #[arg(long, default_value_t = 30_000)]
    pub records: u64,
    /// SIGKILL the partition leader just before sending this record.
    #[arg(long, default_value_t = 6_000)]
    pub kill_at: u64,
    /// enable.idempotence: on, off or both (off first, then on).
    #[arg(long, default_value = "both")]
    pub idempotence: String,
    /// Runs per idempotence setting, each on a fresh cluster.
    #[arg(long, default_value_t = 3)]
    pub runs: u32,
    /// acks: 0, 1, -1 or all.
    #[arg(long, default_value = "all", allow_hyphen_values = true)]
    pub acks: String,
    /// max.in.flight.requests.per.connection.
    #[arg(long, default_value_t = 5)]
    pub max_in_flight: usize,
    /// batch.size in bytes.
    #[arg(long, default_value_t = 2000)]
    pub batch_size: usize,
    /// Nodes in the local cluster (each a controller voter and a broker).
    #[arg(long, default_value_t = 3)]
    pub nodes: u16,
    /// Producer client: rust (librdkafka and java are not supported yet).
    #[arg(long, default_value = "rust")]
    pub client: String,
    /// Parent of the runs' data dirs (each run uses a fresh DIR/<setting>-run-<n>).
    #[arg(long, default_value = "./strom-chaos")]
    pub data_dir: PathBuf,
}

/// What one run measured.
#[derive(Debug, Default)]
pub struct Outcome {
    pub ok: u64,
    pub failed: u64,
    pub in_topic: u64,
    pub unique: u64,
    pub duplicates: u64,
    pub reorderings: u64,
    pub lost: u64,
    pub killed: i32,
    pub first_error: Option<String>,
    /// producerId -> batches, from dump-log of the leader's segment(s) after the run.
    pub pids: BTreeMap<i64, u64>,
    pub dump_leader: i32,
}

pub async fn run(args: LeaderKillArgs) -> anyhow::Result<()> {
    if args.client != "rust" {
        bail!(
            "--client {} is not supported yet (only the Rust client `rust`; librdkafka and the \
             Java producer are future work)",
            args.client
        );
    }
    let settings: Vec<bool> = match args.idempotence.as_str() {
        "on" => vec![true],
        "off" => vec![false],
        "both" => vec![false, true],
        other => bail!("--idempotence must be on, off or both, not '{other}'"),
    };
    if args.kill_at >= args.records {
        bail!("--kill-at must be smaller than --records");
    }
    if args.nodes < 3 {
        bail!("--nodes must be at least 3 (replication factor 3, min.insync.replicas 2)");
    }
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    // The experiment runs inside select! so that Ctrl-C / SIGTERM return an error and the
    // cluster's Drop kills every child.
    tokio::select! {
        r = experiment(&args, &settings) => r,
        _ = tokio::signal::ctrl_c() => Err(anyhow!("interrupted")),
        _ = term.recv() => Err(anyhow!("terminated")),
    }
}

async fn experiment(args: &LeaderKillArgs, settings: &[bool]) -> anyhow::Result<()> {
    println!(
        "leader-kill: {} records \"seq-N\", SIGKILL the leader at record {}, acks={} \
         max.in.flight={} batch.size={}, {} nodes, topic 1 partition RF 3 min.insync.replicas 2",
        args.records, args.kill_at, args.acks, args.max_in_flight, args.batch_size, args.nodes
    );
    let mut results: Vec<(bool, u32, Outcome)> = Vec::new();
    for &idem in settings {
        for n in 1..=args.runs {
            let dir = args
                .data_dir
                .join(format!("idempotence-{}-run-{n}", on_off(idem)));
            let o = one_run(args, idem, &dir)
                .await
                .with_context(|| format!("idempotence {} run {n}", on_off(idem)))?;
            println!(
                "  idempotence {:3} run {n}: killed node {}; dump-log of node {}'s segment, \
                 batches per producerId: {}",
                on_off(idem),
                o.killed,
                o.dump_leader,
                o.pids
                    .iter()
                    .map(|(p, c)| format!("{c} x {p}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            if let Some(e) = &o.first_error {
                println!("    first delivery error: {e}");
            }
            results.push((idem, n, o));
        }
    }
    println!();
    print!("{}", table(&results));
    let bad: Vec<_> = results
        .iter()
        .filter(|(idem, _, o)| *idem && (o.duplicates > 0 || o.reorderings > 0 || o.lost > 0))
        .collect();
    if !bad.is_empty() {
        bail!(
            "with idempotence on, {} run(s) saw duplicates, reorderings or lost records",
            bad.len()
        );
    }
    Ok(())
}

fn on_off(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

/// The per-run table, one line per run.
pub fn table(results: &[(bool, u32, Outcome)]) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "{:<12} {:>4} {:>9} {:>9} {:>9} {:>9} {:>10} {:>11} {:>6}\n",
        "idempotence",
        "run",
        "cb-ok",
        "cb-failed",
        "in-topic",
        "unique",
        "duplicates",
        "reorderings",
        "lost"
    ));
    for (idem, n, o) in results {
        s.push_str(&format!(
            "{:<12} {:>4} {:>9} {:>9} {:>9} {:>9} {:>10} {:>11} {:>6}\n",
            on_off(*idem),
            n,
            o.ok,
            o.failed,
            o.in_topic,
            o.unique,
            o.duplicates,
            o.reorderings,
            o.lost
        ));
    }
    s
}

async fn connect(bootstrap: &str) -> anyhow::Result<Client> {
    let mut config = ClientConfig::new(bootstrap);
    config.client_id = "strom-chaos".into();
    Ok(Client::connect(config).await?)
}

/// Retries `f` every 200 ms until it returns `Ok(Some(_))` or `timeout` passes.
async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> anyhow::Result<T>
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

/// (leader, isr) of partition 0 as seen through `bootstrap`.
async fn partition_state(bootstrap: &str) -> anyhow::Result<Option<(i32, Vec<i32>)>> {
    let admin = Admin::new(connect(bootstrap).await?);
    let d = admin.describe_topics(Some(&[TOPIC.to_string()])).await?;
    Ok(d.first()
        .and_then(|t| t.partitions.first())
        .filter(|p| p.leader >= 0)
        .map(|p| (p.leader, p.isr.clone())))
}

async fn one_run(args: &LeaderKillArgs, idem: bool, dir: &Path) -> anyhow::Result<Outcome> {
    let set = [
        "broker.session.timeout.ms=3000".to_string(),
        "broker.heartbeat.interval.ms=500".to_string(),
        "replica.fetch.wait.max.ms=100".to_string(),
    ];
    let mut cluster = LocalCluster::start(dir, args.nodes, &set)?;
    let nodes = cluster.nodes();
    let all = cluster.bootstrap_without(&[]);

    // Every broker registered, then the topic, then a full ISR.
    wait_for("all brokers to register", Duration::from_secs(60), || {
        let all = all.clone();
        async move {
            let admin = Admin::new(connect(&all).await?);
            let c = admin.describe_cluster().await?;
            Ok((c.brokers.len() as i32 >= nodes).then_some(()))
        }
    })
    .await?;
    cluster.check_alive()?;
    wait_for("the topic to be created", Duration::from_secs(30), || {
        let all = all.clone();
        async move {
            let admin = Admin::new(connect(&all).await?);
            let configs = [("min.insync.replicas".to_string(), "2".to_string())];
            match admin.create_topic(TOPIC, 1, 3, &configs, false).await {
                Ok(()) => Ok(Some(())),
                Err(e) if e.code() == Some(strom_client::ErrorCode::TopicAlreadyExists) => {
                    Ok(Some(()))
                }
                Err(e) => Err(e.into()),
            }
        }
    })
    .await?;
    let (leader, _) = wait_for("a leader and a full ISR", Duration::from_secs(30), || {
        let all = all.clone();
        async move {
            Ok(partition_state(&all)
                .await?
                .filter(|(_, isr)| isr.len() == 3))
        }
    })
    .await?;

    // The node to kill is known now: the producer never bootstraps from it.
    let bootstrap = cluster.bootstrap_without(&[leader]);
    let props = vec![
        ("bootstrap.servers".to_string(), bootstrap.clone()),
        ("client.id".to_string(), format!("chaos-{}", on_off(idem))),
        ("acks".to_string(), args.acks.clone()),
        ("enable.idempotence".to_string(), idem.to_string()),
        (
            "max.in.flight.requests.per.connection".to_string(),
            args.max_in_flight.to_string(),
        ),
        ("batch.size".to_string(), args.batch_size.to_string()),
    ];
    let config = ProducerConfig::from_properties(&props)?;
    let producer = Producer::connect(config).await?;

    let mut pending = FuturesUnordered::new();
    for i in 0..args.records {
        if i == args.kill_at {
            cluster.kill(leader)?;
        }
        let fut = producer.send(
            TOPIC,
            None,
            None,
            Some(Bytes::from(format!("seq-{i}"))),
            Vec::new(),
        );
        pending.push(async move { (i, fut.await) });
        if i % 50 == 49 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    let mut out = Outcome {
        killed: leader,
        ..Default::default()
    };
    let mut acked: HashSet<u64> = HashSet::new();
    let deadline = Duration::from_secs(180);
    let wait_all = async {
        while let Some((i, r)) = pending.next().await {
            match r {
                Ok(_) => {
                    out.ok += 1;
                    acked.insert(i);
                }
                Err(e) => {
                    out.failed += 1;
                    out.first_error.get_or_insert_with(|| e.to_string());
                }
            }
        }
    };
    tokio::time::timeout(deadline, wait_all)
        .await
        .map_err(|_| {
            anyhow!(
                "delivery callbacks still pending after {} s",
                deadline.as_secs()
            )
        })?;
    drop(producer);

    // Bring the killed node back and let it rejoin the ISR (a note, not a failure, if slow).
    cluster.spawn(leader)?;
    let rejoined = wait_for(
        "the killed node to rejoin the ISR",
        Duration::from_secs(60),
        || {
            let b = bootstrap.clone();
            async move { Ok(partition_state(&b).await?.filter(|(_, isr)| isr.len() == 3)) }
        },
    )
    .await;
    if let Err(e) = &rejoined {
        println!("    note: {e:#}");
    }
    cluster.check_alive()?;

    // Read the topic from the beginning up to its end offset.
    let seen = read_all(&bootstrap).await?;
    out.in_topic = seen.len() as u64;
    let mut uniq: HashSet<u64> = HashSet::new();
    let mut max_seen: Option<u64> = None;
    for &s in &seen {
        uniq.insert(s);
        if let Some(m) = max_seen {
            if s < m {
                out.reorderings += 1;
            }
        }
        max_seen = Some(max_seen.map_or(s, |m| m.max(s)));
    }
    out.unique = uniq.len() as u64;
    out.duplicates = out.in_topic - out.unique;
    out.lost = acked.iter().filter(|s| !uniq.contains(s)).count() as u64;

    // dump-log of the current leader's segment(s): batches per producerId.
    let now_leader = partition_state(&bootstrap)
        .await?
        .map(|(l, _)| l)
        .unwrap_or(leader);
    out.dump_leader = now_leader;
    out.pids = dump_log_pids(&cluster.node_dir(now_leader).join(format!("{TOPIC}-0")))?;
    drop(cluster);
    Ok(out)
}

/// Every value's sequence number, in offset order, from offset 0 to the end offset.
async fn read_all(bootstrap: &str) -> anyhow::Result<Vec<u64>> {
    let client = connect(bootstrap).await?;
    let config = ConsumerConfig {
        auto_offset_reset: OffsetReset::Earliest,
        fetch_max_wait: Duration::from_millis(200),
        ..Default::default()
    };
    let mut consumer = Consumer::new(client, config);
    consumer.assign(TOPIC, Some(&[0])).await?;
    let end = wait_for("the end offset", Duration::from_secs(30), || {
        let c = &consumer;
        async move {
            let m = c
                .list_offsets(TOPIC, &[0], strom_client::consumer::LATEST_TIMESTAMP)
                .await?;
            Ok(m.get(&0).copied())
        }
    })
    .await?;
    consumer.seek_to_beginning(TOPIC, Some(&[0]));
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

/// Runs this binary's `dump-log` on the partition dir's .log files; counts batches per
/// producerId.
fn dump_log_pids(partition_dir: &Path) -> anyhow::Result<BTreeMap<i64, u64>> {
    let mut logs: Vec<PathBuf> = std::fs::read_dir(partition_dir)
        .with_context(|| format!("listing {}", partition_dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    if logs.is_empty() {
        bail!("no .log segment in {}", partition_dir.display());
    }
    let files = logs
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(",");
    let out = std::process::Command::new(std::env::current_exe()?)
        .arg("dump-log")
        .arg("--files")
        .arg(&files)
        .output()
        .context("running dump-log")?;
    if !out.status.success() {
        bail!(
            "dump-log failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut pids = BTreeMap::new();
    for line in text.lines().filter(|l| l.starts_with("baseOffset:")) {
        if let Some(at) = line.find(" producerId: ") {
            let pid = line[at + 13..]
                .split_whitespace()
                .next()
                .and_then(|s| s.parse::<i64>().ok())
                .ok_or_else(|| anyhow!("unparsable dump-log line: {line}"))?;
            *pids.entry(pid).or_insert(0) += 1;
        }
    }
    Ok(pids)
}

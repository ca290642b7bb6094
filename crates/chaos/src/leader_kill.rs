//! `strom-chaos leader-kill`: seed 003's leader-failure experiment.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, bail, Context};

use super::kafka_cluster::kafka_libs;
use super::nodes::{log_tails, partition_state, read_all, wait_for, Broker, Nodes};
use super::producers::{self, ClientKind, Workload};

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
    /// Producer client: rust (Strom's), librdkafka (needs a build with `--features strom-chaos/librdkafka`)
    /// or java (kafka-clients 4.4 in a child JVM, the client seed 003 used).
    #[arg(long, default_value = "rust")]
    pub client: String,
    /// The cluster under test: strom, kafka (Apache Kafka 4.4 KRaft nodes from the Maven jars)
    /// or both (strom first, then kafka, tables side by side).
    #[arg(long, default_value = "strom")]
    pub broker: String,
    /// Directory of the Kafka 4.4 jars (for --client java and --broker kafka); default
    /// $STROM_KAFKA_LIBS, ./.cache/kafka-4.4/libs, or ~/.cache/strom (fetched with Maven).
    #[arg(long)]
    pub kafka_libs: Option<PathBuf>,
    /// Parent of the runs' data dirs (each run uses a fresh DIR/<broker>-<setting>-run-<n>).
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

/// One line of the table.
pub struct RunResult {
    pub broker: Broker,
    pub client: ClientKind,
    pub idempotence: bool,
    pub run: u32,
    pub outcome: Outcome,
}

pub async fn run(args: LeaderKillArgs) -> anyhow::Result<()> {
    let client = ClientKind::parse(&args.client)?;
    let brokers = Broker::parse_list(&args.broker)?;
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
    let libs = if client == ClientKind::Java || brokers.contains(&Broker::Kafka) {
        Some(kafka_libs(args.kafka_libs.as_deref())?)
    } else {
        None
    };
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    // The experiment runs inside select! so that Ctrl-C / SIGTERM return an error and the
    // cluster's Drop kills every child.
    tokio::select! {
        r = experiment(&args, client, &brokers, &settings, libs.as_deref()) => r,
        _ = tokio::signal::ctrl_c() => Err(anyhow!("interrupted")),
        _ = term.recv() => Err(anyhow!("terminated")),
    }
}

async fn experiment(
    args: &LeaderKillArgs,
    client: ClientKind,
    brokers: &[Broker],
    settings: &[bool],
    libs: Option<&Path>,
) -> anyhow::Result<()> {
    println!(
        "leader-kill: {} records \"seq-N\" with the {} producer, SIGKILL the leader at record {}, \
         acks={} max.in.flight={} batch.size={}, {} nodes, topic 1 partition RF 3 \
         min.insync.replicas 2",
        args.records,
        client.name(),
        args.kill_at,
        args.acks,
        args.max_in_flight,
        args.batch_size,
        args.nodes
    );
    let mut results: Vec<RunResult> = Vec::new();
    for &broker in brokers {
        for &idem in settings {
            for n in 1..=args.runs {
                let dir = args.data_dir.join(format!(
                    "{}-idempotence-{}-run-{n}",
                    broker.name(),
                    on_off(idem)
                ));
                let o = match one_run(args, broker, client, libs, idem, &dir).await {
                    Ok(o) => o,
                    Err(e) => {
                        eprintln!("{}", log_tails(&dir, 20));
                        return Err(e.context(format!(
                            "{} idempotence {} run {n}",
                            broker.name(),
                            on_off(idem)
                        )));
                    }
                };
                println!(
                    "  {} idempotence {:3} run {n}: killed node {}; dump-log of node {}'s \
                     segment, batches per producerId: {}",
                    broker.name(),
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
                results.push(RunResult {
                    broker,
                    client,
                    idempotence: idem,
                    run: n,
                    outcome: o,
                });
            }
        }
    }
    println!();
    print!("{}", table(&results));
    let bad: Vec<_> = results
        .iter()
        .filter(|r| {
            let o = &r.outcome;
            r.idempotence && (o.duplicates > 0 || o.reorderings > 0 || o.lost > 0)
        })
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
pub fn table(results: &[RunResult]) -> String {
    let row = |c: [&str; 11]| {
        format!(
            "{:<6} {:<10} {:<12} {:>4} {:>9} {:>9} {:>9} {:>9} {:>10} {:>11} {:>6}\n",
            c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9], c[10]
        )
    };
    let mut s = row([
        "broker",
        "client",
        "idempotence",
        "run",
        "cb-ok",
        "cb-failed",
        "in-topic",
        "unique",
        "duplicates",
        "reorderings",
        "lost",
    ]);
    for r in results {
        let o = &r.outcome;
        let nums = [
            r.run as u64,
            o.ok,
            o.failed,
            o.in_topic,
            o.unique,
            o.duplicates,
            o.reorderings,
            o.lost,
        ]
        .map(|n| n.to_string());
        s.push_str(&row([
            r.broker.name(),
            r.client.name(),
            on_off(r.idempotence),
            &nums[0],
            &nums[1],
            &nums[2],
            &nums[3],
            &nums[4],
            &nums[5],
            &nums[6],
            &nums[7],
        ]));
    }
    s
}

async fn one_run(
    args: &LeaderKillArgs,
    broker: Broker,
    client: ClientKind,
    libs: Option<&Path>,
    idem: bool,
    dir: &Path,
) -> anyhow::Result<Outcome> {
    // The same failure detection on both systems: Kafka takes these config names too.
    let set = [
        "broker.session.timeout.ms=3000".to_string(),
        "broker.heartbeat.interval.ms=500".to_string(),
        "replica.fetch.wait.max.ms=100".to_string(),
    ];
    let mut cluster = Nodes::start(broker, dir, args.nodes, libs, &set)?;
    let configs = [("min.insync.replicas".to_string(), "2".to_string())];
    let leader = cluster.create_topic(TOPIC, &configs).await?;

    // The node to kill is known now: the producer never bootstraps from it.
    let bootstrap = cluster.bootstrap_without(&[leader]);
    let workload = Workload {
        bootstrap: &bootstrap,
        topic: TOPIC,
        records: args.records,
        kill_at: args.kill_at,
        acks: &args.acks,
        idempotence: idem,
        max_in_flight: args.max_in_flight,
        batch_size: args.batch_size,
    };
    let deadline = Duration::from_secs(180);
    let mut kill = || Ok(cluster.procs_mut().kill(leader)?);
    let sent = tokio::time::timeout(
        deadline,
        producers::produce(client, &workload, &mut kill, libs, dir),
    )
    .await
    .map_err(|_| {
        anyhow!(
            "delivery callbacks still pending after {} s",
            deadline.as_secs()
        )
    })??;
    let mut out = Outcome {
        killed: leader,
        ok: sent.ok,
        failed: sent.failed,
        first_error: sent.first_error,
        ..Default::default()
    };
    let acked = sent.acked;

    // Bring the killed node back and let it rejoin the ISR (a note, not a failure, if slow).
    cluster.spawn(leader)?;
    let rejoined = wait_for(
        "the killed node to rejoin the ISR",
        Duration::from_secs(60),
        || {
            let b = bootstrap.clone();
            async move {
                Ok(partition_state(&b, TOPIC)
                    .await?
                    .filter(|(_, isr)| isr.len() == 3))
            }
        },
    )
    .await;
    if let Err(e) = &rejoined {
        println!("    note: {e:#}");
    }
    cluster.procs_mut().check_alive()?;

    // Read the topic from the beginning up to its end offset.
    let seen = read_all(&bootstrap, TOPIC).await?;
    out.in_topic = seen.len() as u64;
    let mut uniq: std::collections::HashSet<u64> = Default::default();
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
    let now_leader = partition_state(&bootstrap, TOPIC)
        .await?
        .map(|(l, _)| l)
        .unwrap_or(leader);
    out.dump_leader = now_leader;
    out.pids = dump_log_pids(&cluster.partition_dir(now_leader, TOPIC, 0))?;
    drop(cluster);
    Ok(out)
}

/// Runs `strom dump-log` on the partition dir's .log files; counts batches per
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
    let out = std::process::Command::new(crate::strom_exe()?)
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

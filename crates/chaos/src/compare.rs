//! `strom-chaos compare`: the replication scenarios of the cluster issue run the same way on
//! Strom and on Apache Kafka 4.4, measured from outside as a user sees them (Metadata's leader
//! and ISR, a producer's acknowledgements, what can be read back), so that where Kafka's
//! behaviour is in doubt the two stand side by side.
//!
//! - `follower-pause`: SIGSTOP a follower; when does it leave the ISR, how long does acks=all
//!   stall, when does it rejoin after SIGCONT.
//! - `leader-term`: SIGTERM the leader; how long until another replica leads, and until the
//!   process has exited.
//! - `isr-loss` / `isr-loss-unclean`: kill the followers one by one, then the leader, restart the
//!   first follower (the one with the shortest log): does it become leader (unclean election), and
//!   are acknowledged records lost once everything is back.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use bytes::Bytes;
use strom_client::{Producer, ProducerConfig};

use super::kafka_cluster::kafka_libs;
use super::nodes::{log_tails, partition_state, read_all, Broker, Nodes};

const TOPIC: &str = "chaos-compare";
const LAG_TIME_MS: u64 = 3000;
const SCENARIOS: [&str; 4] = [
    "follower-pause",
    "leader-term",
    "isr-loss",
    "isr-loss-unclean",
];

#[derive(clap::Args, Debug, Clone)]
pub struct CompareArgs {
    /// strom, kafka or both.
    #[arg(long, default_value = "both")]
    pub broker: String,
    /// follower-pause, leader-term, isr-loss, isr-loss-unclean or all.
    #[arg(long, default_value = "all")]
    pub scenario: String,
    /// Directory of the Kafka 4.4 jars (see `strom-chaos leader-kill --help`).
    #[arg(long)]
    pub kafka_libs: Option<PathBuf>,
    /// Parent of the scenarios' data dirs.
    #[arg(long, default_value = "./strom-compare")]
    pub data_dir: PathBuf,
}

pub async fn run(args: CompareArgs) -> anyhow::Result<()> {
    let brokers = Broker::parse_list(&args.broker)?;
    let scenarios: Vec<&str> = match args.scenario.as_str() {
        "all" => SCENARIOS.to_vec(),
        s if SCENARIOS.contains(&s) => vec![s],
        other => bail!("--scenario must be one of {SCENARIOS:?} or all, not '{other}'"),
    };
    let libs = if brokers.contains(&Broker::Kafka) {
        Some(kafka_libs(args.kafka_libs.as_deref())?)
    } else {
        None
    };
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    tokio::select! {
        r = all_scenarios(&args, &brokers, &scenarios, libs.as_deref()) => r,
        _ = tokio::signal::ctrl_c() => Err(anyhow!("interrupted")),
        _ = term.recv() => Err(anyhow!("terminated")),
    }
}

async fn all_scenarios(
    args: &CompareArgs,
    brokers: &[Broker],
    scenarios: &[&str],
    libs: Option<&Path>,
) -> anyhow::Result<()> {
    println!(
        "compare: 3 nodes (5 for isr-loss), topic 1 partition RF 3 min.insync.replicas 2, \
         replica.lag.time.max.ms={LAG_TIME_MS}, broker.session.timeout.ms=3000; an idempotent \
         acks=all producer sends one record every 5 ms throughout"
    );
    let mut lines = Vec::new();
    for &scenario in scenarios {
        for &broker in brokers {
            let dir = args.data_dir.join(format!("{}-{scenario}", broker.name()));
            let line = match one(broker, scenario, libs, &dir).await {
                Ok(line) => line,
                Err(e) => {
                    eprintln!("{}", log_tails(&dir, 20));
                    return Err(e.context(format!("{scenario} on {}", broker.name())));
                }
            };
            println!("{:<17} {:<6} {line}", scenario, broker.name());
            lines.push((scenario, broker, line));
        }
    }
    println!();
    for (scenario, broker, line) in &lines {
        println!("{:<17} {:<6} {line}", scenario, broker.name());
    }
    Ok(())
}

async fn one(
    broker: Broker,
    scenario: &str,
    libs: Option<&Path>,
    dir: &Path,
) -> anyhow::Result<String> {
    let set = [
        "broker.session.timeout.ms=3000".to_string(),
        "broker.heartbeat.interval.ms=500".to_string(),
        "replica.fetch.wait.max.ms=100".to_string(),
        format!("replica.lag.time.max.ms={LAG_TIME_MS}"),
    ];
    let unclean = scenario == "isr-loss-unclean";
    // Killing all three replicas of the partition must leave a metadata quorum (a majority of
    // the controller voters) to elect from, as every node is a voter: five nodes.
    let nodes = if scenario.starts_with("isr-loss") {
        5
    } else {
        3
    };
    let mut cluster = Nodes::start(broker, dir, nodes, libs, &set)?;
    let configs = [
        ("min.insync.replicas".to_string(), "2".to_string()),
        (
            "unclean.leader.election.enable".to_string(),
            unclean.to_string(),
        ),
    ];
    let leader = cluster.create_topic(TOPIC, &configs).await?;
    let (_, isr) = partition_state(&cluster.bootstrap_without(&[]), TOPIC)
        .await?
        .context("the partition has no leader")?;
    let followers: Vec<i32> = isr.into_iter().filter(|&id| id != leader).collect();
    match scenario {
        "follower-pause" => follower_pause(&mut cluster, leader, followers[0]).await,
        "leader-term" => leader_term(&mut cluster, leader).await,
        _ => isr_loss(&mut cluster, leader, &followers).await,
    }
}

/// An idempotent acks=all producer sending "seq-N" one at a time in the background, recording
/// when each acknowledgement came.
struct Probe {
    acks: Arc<Mutex<Vec<(Instant, u64)>>>,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Probe {
    async fn start(bootstrap: &str) -> anyhow::Result<Probe> {
        let props = [
            ("bootstrap.servers", bootstrap),
            ("client.id", "chaos-compare"),
            ("acks", "all"),
            ("enable.idempotence", "true"),
            // Records stuck behind an outage fail after this instead of holding the end of the
            // scenario for the default two minutes.
            ("delivery.timeout.ms", "35000"),
        ];
        let producer = Producer::connect(ProducerConfig::from_properties(&props)?).await?;
        let acks = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (a, s) = (acks.clone(), stop.clone());
        let task = tokio::spawn(async move {
            let mut pending = futures_util::stream::FuturesUnordered::new();
            let mut i = 0u64;
            let mut tick = tokio::time::interval(Duration::from_millis(5));
            use futures_util::StreamExt;
            while !s.load(Ordering::Relaxed) {
                tokio::select! {
                    _ = tick.tick() => {
                        let f = producer.send(TOPIC, None, None,
                            Some(Bytes::from(format!("seq-{i}"))), Vec::new());
                        let n = i;
                        pending.push(async move { (n, f.await) });
                        i += 1;
                    }
                    Some((n, r)) = pending.next(), if !pending.is_empty() => {
                        if r.is_ok() {
                            a.lock().unwrap().push((Instant::now(), n));
                        }
                    }
                }
            }
            // Let what is in flight finish (bounded by the producer's delivery timeout).
            while let Some((n, r)) = pending.next().await {
                if r.is_ok() {
                    a.lock().unwrap().push((Instant::now(), n));
                }
            }
        });
        Ok(Probe { acks, stop, task })
    }

    /// The longest time without an acknowledgement between `from` and `to`.
    fn max_gap(&self, from: Instant, to: Instant) -> Duration {
        let acks = self.acks.lock().unwrap();
        let mut last = from;
        let mut gap = Duration::ZERO;
        for &(t, _) in acks.iter().filter(|(t, _)| *t > from && *t <= to) {
            gap = gap.max(t - last);
            last = t;
        }
        gap.max(to.saturating_duration_since(last))
    }

    fn acked(&self) -> usize {
        self.acks.lock().unwrap().len()
    }

    async fn finish(self) -> HashSet<u64> {
        self.stop.store(true, Ordering::Relaxed);
        let _ = tokio::time::timeout(Duration::from_secs(150), self.task).await;
        let acks = self.acks.lock().unwrap();
        acks.iter().map(|&(_, n)| n).collect()
    }
}

/// Polls (leader, isr) through `bootstrap` every 100 ms until `pred` holds or `limit` passes;
/// the time it took, or None.
async fn until<F: Fn(i32, &[i32]) -> bool>(
    bootstrap: &str,
    limit: Duration,
    pred: F,
) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if let Ok(Ok(Some((l, isr)))) =
            tokio::time::timeout(Duration::from_secs(2), partition_state(bootstrap, TOPIC)).await
        {
            if pred(l, &isr) {
                return Some(start.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

fn secs(d: Option<Duration>, limit: Duration) -> String {
    match d {
        Some(d) => format!("{:.1} s", d.as_secs_f64()),
        None => format!("not within {} s", limit.as_secs()),
    }
}

async fn follower_pause(cluster: &mut Nodes, leader: i32, f: i32) -> anyhow::Result<String> {
    let observe = cluster.bootstrap_without(&[f]);
    let probe = Probe::start(&observe).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let limit = Duration::from_secs(30);
    let t0 = Instant::now();
    cluster.procs().signal(f, "STOP")?;
    let shrink = until(&observe, limit, |_, isr| !isr.contains(&f)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let t1 = Instant::now();
    cluster.procs().signal(f, "CONT")?;
    let rejoin = until(&observe, limit, |_, isr| isr.contains(&f)).await;
    let stall = probe.max_gap(t0, t1);
    let acked = probe.acked();
    probe.finish().await;
    Ok(format!(
        "leader {leader}, follower {f} SIGSTOPped: left the ISR after {}, longest acks=all \
         stall {:.1} s; SIGCONT: back in the ISR after {}; {acked} records acked",
        secs(shrink, limit),
        stall.as_secs_f64(),
        secs(rejoin, limit)
    ))
}

async fn leader_term(cluster: &mut Nodes, leader: i32) -> anyhow::Result<String> {
    let observe = cluster.bootstrap_without(&[leader]);
    let probe = Probe::start(&observe).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let limit = Duration::from_secs(30);
    let t0 = Instant::now();
    cluster.procs().signal(leader, "TERM")?;
    let moved = until(&observe, limit, |l, _| l >= 0 && l != leader).await;
    cluster.wait_exit(leader, Duration::from_secs(60))?;
    let exited = t0.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let stall = probe.max_gap(t0, Instant::now());
    let acked = probe.acked();
    probe.finish().await;
    Ok(format!(
        "leader {leader} SIGTERMed: another leader after {}, process exited after {:.1} s, \
         longest acks=all stall {:.1} s; {acked} records acked",
        secs(moved, limit),
        exited.as_secs_f64(),
        stall.as_secs_f64()
    ))
}

async fn isr_loss(cluster: &mut Nodes, leader: i32, followers: &[i32]) -> anyhow::Result<String> {
    let (a, b) = (followers[0], followers[1]);
    let limit = Duration::from_secs(30);
    let all = cluster.bootstrap_without(&[]);
    let probe = Probe::start(&cluster.bootstrap_without(&[a, b])).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    // a dies first: the records acknowledged from here on are on the leader and b only.
    cluster.procs_mut().kill(a)?;
    let observe = cluster.bootstrap_without(&[a]);
    let a_out = until(&observe, limit, |_, isr| !isr.contains(&a)).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let acked_without_a = probe.acked();
    cluster.procs_mut().kill(b)?;
    let observe = cluster.bootstrap_without(&[a, b]);
    let b_out = until(&observe, limit, |_, isr| !isr.contains(&b)).await;
    cluster.procs_mut().kill(leader)?;
    // Only a comes back: its log lacks what was acknowledged after it died.
    cluster.spawn(a)?;
    let only_a = cluster.bootstrap_without(&[leader, b]);
    let wait = Duration::from_secs(15);
    let a_leads = until(&only_a, wait, |l, _| l == a).await;
    let after_a = partition_state(&only_a, TOPIC)
        .await
        .ok()
        .flatten()
        .map_or("no leader".to_string(), |(l, isr)| {
            format!("leader {l} isr {isr:?}")
        });
    cluster.spawn(leader)?;
    cluster.spawn(b)?;
    let full = until(&all, Duration::from_secs(60), |l, isr| {
        l >= 0 && isr.len() == 3
    })
    .await;
    let acked = probe.finish().await;
    let seen: HashSet<u64> = read_all(&all, TOPIC).await?.into_iter().collect();
    let lost = acked.iter().filter(|s| !seen.contains(s)).count();
    Ok(format!(
        "follower {a} killed (left ISR after {}), follower {b} killed (left ISR after {}), \
         leader {leader} killed, {a} restarted alone: {} ({after_a}); all back: full ISR \
         after {}; {} acked ({acked_without_a} before {b} died), {lost} acked records lost",
        secs(a_out, limit),
        secs(b_out, limit),
        if a_leads.is_some() {
            format!("{a} elected after {}", secs(a_leads, wait))
        } else {
            format!("{a} not elected within {} s", wait.as_secs())
        },
        secs(full, Duration::from_secs(60)),
        acked.len()
    ))
}

//! `strom-chaos nemesis`: a Jepsen-style run. A 3-node cluster (optionally each node in its own
//! network namespace, `--net`), idempotent producers and tailing consumers, and a seeded
//! nemesis killing, pausing and restarting nodes (and with `--net` cutting links), one fault at
//! a time, while consumer groups (classic and KIP-848) consume and commit. At the end
//! everything is healed and checked: acknowledged records present exactly once, in order, at
//! their acked offsets (also after a node lost the tail of its segments or a partition
//! directory and came back at once, `lost_data`); nothing consumers saw vanished; replicas agree below the high
//! watermark; all acked records readable and the ISR full again within 60 s; no group skipped
//! a record, lost or moved back a committed offset, or had a partition owned twice. With
//! `--txn-producers`, transactional producers and read_committed consumers work on a topic of
//! their own: no aborted record read, no committed transaction lost, none seen partly.
//!
//! This module owns the arguments and the run's phases; the parts are in `workload` (clients),
//! `groups` (the group members and the OffsetFetch sampler), `groups_checker` (properties of
//! the groups' histories), `nemesis` (faults), `checker` (properties over histories),
//! `replicas` (log agreement) and
//! `netns` (the test network), `txn` and `txn_checker` (transactions), `lost_data` (the
//! lost-data fault); `unclean` is the known-unsafe scripted scenario of `--unsafe-unclean`, and
//! `lost_data::run_unsafe` the one of `--unsafe-lost-data`, each of which must end in reported
//! loss.

mod checker;
mod groups;
mod groups_checker;
mod lost_data;
#[allow(clippy::module_inception)]
mod nemesis;
mod netns;
mod replicas;
mod txn;
mod txn_checker;
mod unclean;
mod workload;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};

use workload::{Probe, Shared, TOPIC};

#[derive(clap::Args, Debug, Clone)]
pub struct NemesisArgs {
    /// How long the nemesis runs (e.g. 120s, 2m); setup and the final checks come on top.
    #[arg(long, default_value = "120s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Seed of the fault schedule (default: random, printed).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Run each node in its own network namespace joined by veth links, and cut links too
    /// (needs root).
    #[arg(long)]
    pub net: bool,
    /// Idempotent producers.
    #[arg(long, default_value_t = 3)]
    pub producers: usize,
    /// Tailing consumers.
    #[arg(long, default_value_t = 2)]
    pub consumers: usize,
    /// Members of each consumer group subscribed to the topic (0: no groups).
    #[arg(long, default_value_t = 3)]
    pub group_consumers: usize,
    /// The groups: one classic group, one consumer-protocol (KIP-848) group, or both.
    #[arg(long, value_enum, default_value = "mixed")]
    pub group_protocol: groups::GroupMode,
    /// Partitions of the topic (replication factor 3, min.insync.replicas 2).
    #[arg(long, default_value_t = 3)]
    pub partitions: i32,
    /// Transactional producers (0: no transactions). Each writes transactions to the topic
    /// 'nemesis-txn' (same partitions, RF 3, min.insync.replicas 2), which as many
    /// read_committed consumers as --consumers read throughout.
    #[arg(long, default_value_t = 0)]
    pub txn_producers: usize,
    /// Records per transaction, spread over the partitions.
    #[arg(long, default_value_t = 10)]
    pub txn_size: usize,
    /// Share of the transactions aborted on purpose.
    #[arg(long, default_value_t = 0.3)]
    pub txn_abort_ratio: f64,
    /// Parent of the run's data dir (a fresh DIR/nemesis-<seed>).
    #[arg(long, default_value = "./strom-chaos")]
    pub data_dir: PathBuf,
    /// Keep the data dir (logs, server.log of each node) after a clean run too.
    #[arg(long)]
    pub keep_data: bool,
    /// Known-unsafe: instead of the random schedule, a topic with replication factor 2,
    /// min.insync.replicas=1 and unclean.leader.election.enable=true; partition 0's follower is
    /// cut off (paused, or with --net its link to the leader cut) until the ISR is the leader,
    /// which then acknowledges records alone; the leader is killed and the stale follower
    /// elected uncleanly. The run succeeds only if the checker reports the lost records.
    #[arg(long)]
    pub unsafe_unclean: bool,
    /// Known-unsafe: the brokers trust a restarted broker whatever it lost
    /// (`strom.unsafe.trust.restarted.brokers=true`: no broker-epoch checks, as Strom before
    /// them); instead of the random schedule, partition 0's leader is killed, loses the tail of
    /// its active segment (its unflushed page cache) and is restarted at once. The run
    /// succeeds only if the checker reports the lost records.
    #[arg(long)]
    pub unsafe_lost_data: bool,
}

/// "120s", "2m", "500ms" or plain seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = s
        .find(|c: char| !c.is_ascii_digit())
        .map_or((s, "s"), |i| (&s[..i], &s[i..]));
    let n: u64 = num
        .parse()
        .map_err(|_| format!("invalid duration '{s}' (e.g. 120s, 2m)"))?;
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        _ => Err(format!("invalid duration unit in '{s}' (ms, s or m)")),
    }
}

const NODES: u16 = 3;
/// After the nemesis stops: every acknowledged record readable and the ISR full within this.
const RECOVERY: Duration = Duration::from_secs(60);

pub async fn run(args: NemesisArgs) -> anyhow::Result<()> {
    if args.net {
        netns::check_prerequisites()?;
    }
    if args.partitions < 1 || args.producers < 1 {
        bail!("--partitions and --producers must be at least 1");
    }
    if args.txn_producers > 0 {
        if args.txn_size < 1 || !(0.0..=1.0).contains(&args.txn_abort_ratio) {
            bail!("--txn-size must be at least 1 and --txn-abort-ratio within 0..=1");
        }
        if args.unsafe_unclean || args.unsafe_lost_data {
            bail!("the --unsafe-* modes are scripted scenarios without transactions");
        }
    }
    if args.unsafe_unclean && args.unsafe_lost_data {
        bail!("--unsafe-unclean and --unsafe-lost-data are two scenarios: pick one");
    }
    let seed = args.seed.unwrap_or_else(|| {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        nemesis::Rng::new(t ^ std::process::id() as u64).next_u64() % 1_000_000
    });
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    // The run is inside select! so that Ctrl-C / SIGTERM drop it: the cluster's Drop kills
    // every node, then the network lab's Drop removes namespaces and bridge.
    tokio::select! {
        r = experiment(&args, seed) => r,
        _ = tokio::signal::ctrl_c() => Err(anyhow!("interrupted")),
        _ = term.recv() => Err(anyhow!("terminated")),
    }
}

async fn experiment(args: &NemesisArgs, seed: u64) -> anyhow::Result<()> {
    let start = Instant::now();
    let unsafe_mode = args.unsafe_unclean || args.unsafe_lost_data;
    let (replication, topic_configs) = if args.unsafe_unclean {
        (2, unclean::topic_configs())
    } else {
        (
            NODES as usize,
            vec![
                ("min.insync.replicas".to_string(), "2".to_string()),
                (
                    "unclean.leader.election.enable".to_string(),
                    "false".to_string(),
                ),
            ],
        )
    };
    let shown: Vec<String> = topic_configs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    println!(
        "nemesis{}: seed {seed}, duration {} s, {} nodes{}, {} producers (idempotent, acks=all), \
         {} consumers, topic '{TOPIC}' {} partitions RF {replication} {}",
        if args.unsafe_unclean {
            " (UNSAFE: unclean election)"
        } else if args.unsafe_lost_data {
            " (UNSAFE: restarted brokers trusted)"
        } else {
            ""
        },
        args.duration.as_secs(),
        NODES,
        if args.net {
            " in network namespaces"
        } else {
            ""
        },
        args.producers,
        args.consumers,
        args.partitions,
        shown.join(" ")
    );
    // Declared before the cluster so that it is dropped after it: nodes die first, then their
    // namespaces go.
    let mut lab = if args.net {
        let l = netns::NetLab::create(NODES as i32)?;
        println!(
            "network: namespaces {} on bridge, nodes at {}, {}, {}",
            l.namespaces().join(", "),
            l.addr(1),
            l.addr(2),
            l.addr(3)
        );
        Some(l)
    } else {
        None
    };
    let dir = args.data_dir.join(format!("nemesis-{seed}"));
    let mut set = vec![
        "broker.session.timeout.ms=3000".to_string(),
        "broker.heartbeat.interval.ms=500".to_string(),
        "replica.lag.time.max.ms=4000".to_string(),
        "replica.fetch.wait.max.ms=100".to_string(),
        "replica.socket.timeout.ms=3000".to_string(),
        "unclean.leader.election.enable=false".to_string(),
        "min.insync.replicas=2".to_string(),
        // Group sessions short enough that a member dropped unannounced leaves within the
        // run; an initial rebalance delay that does not dominate it; a few offsets partitions
        // rather than Kafka's 50, so that after a fault the ISRs the nemesis waits for are not
        // queued behind 150 replicas of a topic two groups use.
        "group.initial.rebalance.delay.ms=500".to_string(),
        "offsets.topic.num.partitions=5".to_string(),
        "group.consumer.session.timeout.ms=10000".to_string(),
        "group.consumer.min.session.timeout.ms=6000".to_string(),
        "group.consumer.heartbeat.interval.ms=1000".to_string(),
        "group.consumer.min.heartbeat.interval.ms=500".to_string(),
    ];
    if args.unsafe_lost_data {
        // The broker's `server::UNSAFE_TRUST_RESTARTED_BROKERS` (the harness talks to the
        // brokers as processes and does not link them).
        set.push("strom.unsafe.trust.restarted.brokers=true".to_string());
    }
    let placement = lab.as_ref().map(|l| l.placement()).unwrap_or_default();
    let mut cluster = crate::launch_strom(&dir, NODES, &set, placement)?;
    let probe = Probe {
        bootstrap: cluster.bootstrap_without(&[]),
        partitions: args.partitions,
        replicas: replication,
    };
    workload::set_up_topic(&probe, NODES as usize, &topic_configs, args.unsafe_unclean).await?;
    if args.txn_producers > 0 {
        txn::set_up_topic(&probe.bootstrap, args.partitions, NODES as usize).await?;
    }
    cluster.procs.check_alive()?;
    println!(
        "[{:7.2}s] cluster up, topic created, ISR full; starting the workload",
        start.elapsed().as_secs_f64()
    );

    let shared = Arc::new(Shared::default());
    let mut producers = Vec::new();
    for k in 0..args.producers {
        producers.push(tokio::spawn(workload::produce(
            k,
            probe.bootstrap.clone(),
            args.partitions,
            shared.clone(),
        )));
    }
    let mut consumers = Vec::new();
    for k in 0..args.consumers {
        consumers.push(tokio::spawn(workload::consume(
            k,
            probe.bootstrap.clone(),
            shared.clone(),
        )));
    }
    let mut groups = if unsafe_mode {
        groups::Groups::start(
            args.group_protocol,
            0,
            seed,
            &probe.bootstrap,
            args.partitions,
        )
    } else {
        groups::Groups::start(
            args.group_protocol,
            args.group_consumers,
            seed,
            &probe.bootstrap,
            args.partitions,
        )
    };
    for g in &groups.groups {
        println!(
            "[{:7.2}s] group '{}': {} members, {} protocol{}, committing after each batch",
            start.elapsed().as_secs_f64(),
            g.name,
            args.group_consumers,
            match g.protocol {
                groups_checker::Protocol::Classic => "classic",
                groups_checker::Protocol::Consumer => "consumer",
            },
            g.assignor
                .as_ref()
                .map(|a| format!(" with the {a} assignor"))
                .unwrap_or_default()
        );
    }
    let mut txns = (args.txn_producers > 0).then(|| {
        txn::TxnWorkload::start(
            args.txn_producers,
            args.consumers.max(1),
            args.txn_size,
            args.txn_abort_ratio,
            seed,
            &probe.bootstrap,
            args.partitions,
        )
    });
    if txns.is_some() {
        println!(
            "[{:7.2}s] transactions: {} transactional producers, {} records per transaction, \
             {:.0}% aborted on purpose, {} read_committed consumers on '{}' (odd producers \
             impatient: max.block.ms {} ms)",
            start.elapsed().as_secs_f64(),
            args.txn_producers,
            args.txn_size,
            args.txn_abort_ratio * 100.0,
            args.consumers.max(1),
            txn::TXN_TOPIC,
            txn::max_block_ms(1)
        );
    }
    // Aborted on any early return, so that no task outlives the run.
    let _abort = AbortOnDrop(
        producers
            .iter()
            .chain(consumers.iter())
            .map(|h| h.abort_handle())
            .chain(groups.abort_handles())
            .chain(txns.iter().flat_map(|t| t.abort_handles()))
            .collect(),
    );

    let nemesis_start = Instant::now();
    let mut nem = nemesis::Nemesis::new(seed, args.net, start);
    if txns.is_some() {
        nem.txn_ids = (0..args.txn_producers).map(txn::transactional_id).collect();
    }
    let r = if args.unsafe_unclean {
        unclean::run(&mut nem, &mut cluster, lab.as_mut(), &probe, &shared).await
    } else if args.unsafe_lost_data {
        lost_data::run_unsafe(&mut nem, &mut cluster, &probe, &shared).await
    } else {
        nem.run(
            &mut cluster,
            lab.as_mut(),
            &probe,
            nemesis_start + args.duration,
        )
        .await
    };
    nem.heal_all(&mut cluster, lab.as_mut())?;
    r?;
    let nemesis_minutes = nemesis_start.elapsed().as_secs_f64() / 60.0;
    let healed = nem.last_heal.unwrap_or_else(Instant::now);
    println!(
        "[{:7.2}s] nemesis stopped, everything healed; stopping the producers; recovery counts \
         from the last healing {:.1} s ago",
        start.elapsed().as_secs_f64(),
        healed.elapsed().as_secs_f64()
    );
    shared.stop_producing.store(true, Ordering::Relaxed);
    if let Some(t) = &txns {
        t.stop_producing();
    }

    // Recovery, timed from the healing: every record acknowledged so far below the HW and a
    // full ISR on every partition. (Records acknowledged later are below the HW when acked:
    // acks=all.) Checked while the producers drain, so that a slow drain does not count.
    let max_acked = |shared: &Shared| {
        let mut m: HashMap<i32, i64> = HashMap::new();
        for a in shared.acked.lock().unwrap().iter() {
            let e = m.entry(a.partition).or_insert(-1);
            *e = (*e).max(a.offset);
        }
        m
    };
    let acked_at_heal = max_acked(&shared);
    let covers = |h: &HashMap<i32, i64>, m: &HashMap<i32, i64>| {
        m.iter().all(|(p, o)| h.get(p).is_some_and(|hw| hw > o))
    };
    let mut recovered: Option<f64> = None;
    let mut last_state = String::new();
    while healed.elapsed() < RECOVERY {
        if let Ok(h) = probe.high_watermarks().await {
            let whole = probe.is_whole().await;
            last_state = format!(
                "high watermarks {:?}, highest acked offsets {:?}, ISR full: {whole}",
                sorted(&h),
                sorted(&acked_at_heal)
            );
            // After an unclean election acknowledged offsets may never be below the HW again:
            // that is the loss the checker reports, so only the ISR counts as recovery.
            if whole && (unsafe_mode || covers(&h, &acked_at_heal)) {
                recovered = Some(healed.elapsed().as_secs_f64());
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    if let Some(s) = recovered {
        println!(
            "[{:7.2}s] recovered {s:.1} s after healing",
            start.elapsed().as_secs_f64()
        );
    }
    for p in producers {
        let _ = p.await;
    }
    cluster.procs.check_alive()?;
    println!("[{:7.2}s] producers done", start.elapsed().as_secs_f64());
    let all_acked = max_acked(&shared);
    let mut hws = probe.high_watermarks().await.unwrap_or_default();
    let mut problems: Vec<String> = Vec::new();
    if recovered.is_none() {
        problems.push(format!(
            "not recovered {} s after the nemesis stopped: {last_state}",
            RECOVERY.as_secs()
        ));
    } else if !unsafe_mode && !covers(&hws, &all_acked) {
        // Should not happen: each was below the HW when acknowledged.
        problems.push(format!(
            "high watermarks {:?} below acknowledged offsets {:?}",
            sorted(&hws),
            sorted(&all_acked)
        ));
    }
    if hws.is_empty() {
        hws = probe.high_watermarks().await.unwrap_or_default();
    }
    shared.stop_consuming.store(true, Ordering::Relaxed);
    for c in consumers {
        let _ = c.await;
    }
    groups.finish().await;
    let txn_run = match &mut txns {
        Some(t) => Some(t.finish().await),
        None => None,
    };

    // Read everything back and check the history against it.
    let final_log = if hws.is_empty() {
        problems.push("no high watermarks: the topic could not be read back".into());
        Default::default()
    } else {
        match workload::read_all(&probe.bootstrap, &hws).await {
            Ok(l) => l,
            Err(e) => {
                problems.push(format!("{e:#}"));
                Default::default()
            }
        }
    };
    let history = shared.history();
    let report = checker::check(&history, &final_log);
    let group_reports: Vec<(groups_checker::GroupHistory, groups_checker::GroupReport)> = groups
        .groups
        .iter()
        .map(|g| {
            let h = g.history();
            let r = groups_checker::check_group(&h, &history.acked);
            (h, r)
        })
        .collect();

    // Replicas agree below the HW (the replicas of each partition: all nodes unless the
    // replication factor is lower).
    let replica_sets: HashMap<i32, Vec<i32>> = probe
        .partition_metadata()
        .await
        .map(|ps| ps.into_iter().map(|p| (p.partition, p.replicas)).collect())
        .unwrap_or_default();
    let all_nodes: Vec<i32> = (1..=cluster.nodes()).collect();
    let mut batches_compared = 0;
    let mut replica_problems = Vec::new();
    for (&p, &hw) in &hws {
        let mut logs = Vec::new();
        for &n in replica_sets.get(&p).unwrap_or(&all_nodes) {
            let pdir = cluster.node_dir(n).join(format!("{TOPIC}-{p}"));
            logs.push((
                n,
                replicas::read_batches(&pdir).context("reading a replica's log")?,
            ));
        }
        let (bad, n) = replicas::compare(p, hw, &logs);
        batches_compared += n;
        replica_problems.extend(bad);
    }
    // The transactions topic's replicas (every node: RF 3), markers included.
    for (&p, &(_, hw)) in txn_run.iter().flat_map(|r| r.ends.iter()) {
        let mut logs = Vec::new();
        for &n in &all_nodes {
            let pdir = cluster.node_dir(n).join(format!("{}-{p}", txn::TXN_TOPIC));
            logs.push((
                n,
                replicas::read_batches(&pdir).context("reading a replica's log")?,
            ));
        }
        let (bad, n) = replicas::compare(p, hw, &logs);
        batches_compared += n;
        replica_problems.extend(bad.into_iter().map(|b| format!("{}: {b}", txn::TXN_TOPIC)));
    }
    cluster.procs.check_alive()?;
    drop(cluster);
    drop(lab);

    // Summary.
    println!();
    println!(
        "nemesis summary (seed {seed}{})",
        if args.net { ", --net" } else { "" }
    );
    println!(
        "  nemesis ran {:.2} min; total run {:.1} s",
        nemesis_minutes,
        start.elapsed().as_secs_f64()
    );
    let kinds: Vec<String> = nem.done.iter().map(|(k, n)| format!("{k}={n}")).collect();
    println!(
        "  actions: {} (total {}, skipped {})",
        kinds.join(" "),
        nem.total(),
        nem.skipped
    );
    println!(
        "  records: sent {}, acked {}, failed {} ({} of them in the log anyway), no outcome {}",
        history.sent,
        history.acked.len(),
        history.failed.len(),
        report.failed_present,
        history.pending
    );
    if let Some(e) = &history.first_error {
        println!("  first client error: {e}");
    }
    println!("  consumers: {} records observed", history.observed.len());
    println!(
        "  final log: {} records below the high watermarks {:?} ({} duplicates of unacknowledged \
         records, {} unparsable)",
        report.records_in_log,
        sorted(&hws),
        report.unacked_duplicates,
        report.unparsable
    );
    match recovered {
        Some(s) => {
            println!("  recovery: all acked records readable and ISR full {s:.1} s after healing")
        }
        None => println!("  recovery: NOT within {} s", RECOVERY.as_secs()),
    }
    println!(
        "  replicas: {} batches below the HW compared on the {} replicas of each partition, {}",
        batches_compared,
        replication,
        if replica_problems.is_empty() {
            "all agree".to_string()
        } else {
            format!("{} disagreements", replica_problems.len())
        }
    );
    let counts: Vec<String> = report
        .counts()
        .iter()
        .map(|(k, n)| format!("{k}={n}"))
        .collect();
    for (h, r) in &group_reports {
        groups::print_summary(h, r);
        if h.protocol == Some(groups_checker::Protocol::Consumer) && h.coordinator.is_none() {
            problems.push(format!(
                "group {}: the coordinator's records could not be read, so its assignments \
                 were not checked",
                h.group
            ));
        }
    }
    if let (Some(w), Some(r)) = (&txns, &txn_run) {
        txn::print_summary(w, r);
        problems.extend(r.problems.iter().cloned());
    }
    let txn_violations: &[txn_checker::TxnViolation] = txn_run
        .as_ref()
        .map(|r| r.report.violations.as_slice())
        .unwrap_or_default();
    let group_violations: Vec<&groups_checker::GroupViolation> = group_reports
        .iter()
        .flat_map(|(_, r)| &r.violations)
        .collect();
    let mut counts = counts;
    let mut group_counts: std::collections::BTreeMap<&str, usize> = Default::default();
    for v in &group_violations {
        *group_counts.entry(v.kind()).or_insert(0) += 1;
    }
    counts.extend(group_counts.iter().map(|(k, n)| format!("{k}={n}")));
    if let Some(r) = &txn_run {
        counts.extend(r.report.counts().iter().map(|(k, n)| format!("{k}={n}")));
    }
    let total = report.violations.len()
        + group_violations.len()
        + txn_violations.len()
        + replica_problems.len()
        + problems.len();
    println!(
        "  violations: {total}{}",
        if counts.is_empty() {
            String::new()
        } else {
            format!(" ({})", counts.join(" "))
        }
    );
    for v in report.violations.iter().take(10) {
        println!("    {v}");
    }
    if report.violations.len() > 10 {
        println!("    ... and {} more", report.violations.len() - 10);
    }
    for v in group_violations.iter().take(10) {
        println!("    {v}");
    }
    if group_violations.len() > 10 {
        println!("    ... and {} more", group_violations.len() - 10);
    }
    for v in txn_violations.iter().take(10) {
        println!("    {v}");
    }
    if txn_violations.len() > 10 {
        println!("    ... and {} more", txn_violations.len() - 10);
    }
    for p in replica_problems.iter().chain(problems.iter()) {
        println!("    {p}");
    }
    let lost = report.counts().get("lost").copied().unwrap_or(0);
    let group_commits: u64 = group_reports.iter().map(|(_, r)| r.acked_commits).sum();
    let txn_committed = txn_run.as_ref().map_or(0, |r| r.report.committed);
    let txn_aborted = txn_run.as_ref().map_or(0, |r| r.report.aborted);
    println!(
        "nemesis-result: actions={} acked={} violations={total} lost={lost} \
         group_commits={group_commits} txn_committed={txn_committed} txn_aborted={txn_aborted}",
        nem.total(),
        history.acked.len()
    );
    if unsafe_mode {
        // The expected outcome of the unsafe setting is loss: finding none means the checker
        // (or the scenario) is blind, which is the failure here.
        let what = if args.unsafe_unclean {
            "unclean leader election"
        } else {
            "a leader that lost data and was trusted again"
        };
        if lost == 0 {
            bail!(
                "unsafe mode: the checker reported no lost acknowledged records after {what}; \
                 data dir {}",
                dir.display()
            );
        }
        println!("unsafe mode: {lost} acknowledged records lost, as expected of {what}");
    } else if total > 0 {
        bail!("{total} violation(s); data dir {}", dir.display());
    }
    // A clean run's data is of no further use unless asked for.
    if args.keep_data {
        println!("data dir kept: {}", dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(())
}

fn sorted(m: &HashMap<i32, i64>) -> Vec<(i32, i64)> {
    let mut v: Vec<_> = m.iter().map(|(a, b)| (*a, *b)).collect();
    v.sort_unstable();
    v
}

struct AbortOnDrop(Vec<tokio::task::AbortHandle>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for h in &self.0 {
            h.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse_duration;
    use std::time::Duration;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("120s"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert!(parse_duration("x").is_err());
    }
}

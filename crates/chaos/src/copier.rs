//! `strom-chaos copier`: Kafka's own transactions system test
//! (`tests/kafkatest/tests/core/transactions_test.py`), run on Strom or on Apache Kafka 4.4.
//!
//! An input topic (2 partitions) is seeded with the values "0".."N-1" (value `i` in partition
//! `i % 2`, so each input partition holds increasing values). One Kafka
//! `TransactionalMessageCopier` per input partition (Java kafka-clients 4.4, the tool Kafka's
//! system test runs) copies its partition to an output topic (3 partitions) in transactions of
//! 750 records, committing its consumed offsets in the same transaction
//! (`sendOffsetsToTransaction` with the group's metadata), optionally aborting transactions at
//! random. Meanwhile brokers are SIGKILLed and restarted, the copiers are SIGKILLed and
//! restarted (a new instance with the same transactional id recovers from the last committed
//! offsets and aborts what the dead one left open), and a read_committed Java consumer reads
//! the output throughout. At the end a second read_committed consumer drains the output.
//!
//! The checks are Kafka's: the output is the input as a set, with no duplicate; in each output
//! partition the values copied from one input partition keep their order; the concurrent
//! consumer saw no duplicate and nothing that is not in the final output (no aborted read).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use bytes::Bytes;
use futures_util::stream::{FuturesUnordered, StreamExt};
use strom_client::{Admin, Producer, ProducerConfig};

use super::kafka_cluster::kafka_libs;
use super::nodes::{connect, ensure_topic, log_tails, wait_for, Broker, Nodes};

const INPUT: &str = "input-topic";
const OUTPUT: &str = "output-topic";
const GROUP: &str = "transactions-test-consumer-group";

#[derive(clap::Args, Debug, Clone)]
pub struct CopierArgs {
    /// Records seeded into the input topic (Kafka's test: 100000).
    #[arg(long, default_value_t = 100_000)]
    pub records: u64,
    /// Records per transaction (Kafka's test: 750).
    #[arg(long, default_value_t = 750)]
    pub transaction_size: u32,
    /// Input partitions (one copier each).
    #[arg(long, default_value_t = 2)]
    pub input_partitions: i32,
    /// Output partitions.
    #[arg(long, default_value_t = 3)]
    pub output_partitions: i32,
    /// Broker SIGKILLs (each followed by a restart), round robin over the nodes.
    #[arg(long, default_value_t = 3)]
    pub broker_kills: u32,
    /// Copier SIGKILLs (each followed by a restart with the same transactional id).
    #[arg(long, default_value_t = 3)]
    pub copier_kills: u32,
    /// Let the copiers abort transactions at random (`--enable-random-aborts`).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub random_aborts: bool,
    /// The cluster under test: strom, kafka or both.
    #[arg(long, default_value = "strom")]
    pub broker: String,
    /// Directory of the Kafka 4.4 jars (the copier and consumers always need them).
    #[arg(long)]
    pub kafka_libs: Option<PathBuf>,
    /// Parent of the runs' data dirs.
    #[arg(long, default_value = "./strom-chaos-copier")]
    pub data_dir: PathBuf,
    /// Give up (and fail) when the copy has not finished after this many seconds.
    #[arg(long, default_value_t = 900)]
    pub timeout_secs: u64,
}

/// What one run found.
#[derive(Debug, Default)]
pub struct CopierOutcome {
    pub input: u64,
    pub output: u64,
    pub unique: u64,
    pub duplicates: u64,
    pub missing: u64,
    pub unexpected: u64,
    pub order_violations: u64,
    pub concurrent_seen: u64,
    pub concurrent_duplicates: u64,
    pub aborted_reads: u64,
    pub broker_kills: u32,
    pub copier_kills: u32,
    pub copier_failures: u32,
    pub elapsed: Duration,
}

impl CopierOutcome {
    pub fn violations(&self) -> u64 {
        self.duplicates
            + self.missing
            + self.unexpected
            + self.order_violations
            + self.concurrent_duplicates
            + self.aborted_reads
    }
}

pub async fn run(args: CopierArgs) -> anyhow::Result<()> {
    let brokers = Broker::parse_list(&args.broker)?;
    let libs = kafka_libs(args.kafka_libs.as_deref())?;
    let mut results = Vec::new();
    for broker in brokers {
        let dir = args.data_dir.join(broker.name());
        let out = run_one(broker, &args, &libs, &dir)
            .await
            .with_context(|| format!("copier run on {}", broker.name()))?;
        results.push((broker, out));
    }
    println!(
        "{:<7} {:>7} {:>7} {:>7} {:>5} {:>7} {:>5} {:>5} {:>9} {:>5} {:>7} {:>6} {:>6} {:>6} {:>7}",
        "broker",
        "input",
        "output",
        "unique",
        "dups",
        "missing",
        "extra",
        "order",
        "conc.seen",
        "c.dup",
        "aborted",
        "b.kill",
        "c.kill",
        "c.fail",
        "secs"
    );
    for (b, o) in &results {
        println!(
            "{:<7} {:>7} {:>7} {:>7} {:>5} {:>7} {:>5} {:>5} {:>9} {:>5} {:>7} {:>6} {:>6} {:>6} {:>7.1}",
            b.name(),
            o.input,
            o.output,
            o.unique,
            o.duplicates,
            o.missing,
            o.unexpected,
            o.order_violations,
            o.concurrent_seen,
            o.concurrent_duplicates,
            o.aborted_reads,
            o.broker_kills,
            o.copier_kills,
            o.copier_failures,
            o.elapsed.as_secs_f64()
        );
    }
    let bad: Vec<_> = results
        .iter()
        .filter(|(_, o)| o.violations() > 0)
        .map(|(b, _)| b.name())
        .collect();
    if !bad.is_empty() {
        bail!("violations on {}", bad.join(", "));
    }
    println!("copier: no violations");
    Ok(())
}

async fn run_one(
    broker: Broker,
    args: &CopierArgs,
    libs: &Path,
    dir: &Path,
) -> anyhow::Result<CopierOutcome> {
    let started = Instant::now();
    if dir.exists() {
        std::fs::remove_dir_all(dir)?;
    }
    std::fs::create_dir_all(dir)?;
    let mut nodes = Nodes::start(broker, dir, 3, Some(libs), &[])?;
    let res = drive(&mut nodes, args, libs, dir).await;
    let res = res.map_err(|e| anyhow!("{e:#}\n{}", log_tails(dir, 30)));
    drop(nodes);
    let mut out = res?;
    out.elapsed = started.elapsed();
    Ok(out)
}

/// A copier process and the file its JSON progress lines go to.
struct Copier {
    partition: i32,
    child: Option<Child>,
    log: PathBuf,
    starts: u32,
}

impl Copier {
    fn spawn(&mut self, libs: &Path, bootstrap: &str, args: &CopierArgs) -> anyhow::Result<()> {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let mut cmd = java(libs);
        cmd.arg("org.apache.kafka.tools.TransactionalMessageCopier")
            .args(["--broker-list", bootstrap])
            .args(["--input-topic", INPUT])
            .args(["--input-partition", &self.partition.to_string()])
            .args(["--output-topic", OUTPUT])
            .args(["--transactional-id", &format!("copier-{}", self.partition)])
            .args(["--transaction-size", &args.transaction_size.to_string()])
            .args(["--transaction-timeout", "10000"])
            .args(["--consumer-group", GROUP])
            .arg("--use-group-metadata");
        if args.random_aborts {
            cmd.arg("--enable-random-aborts");
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .context("starting TransactionalMessageCopier (is Java installed?)")?;
        self.child = Some(child);
        self.starts += 1;
        Ok(())
    }

    /// The copier's last reported `remaining` (records left up to the input's end offset as
    /// of its start), if it has reported any.
    fn remaining(&self) -> Option<u64> {
        let text = std::fs::read_to_string(&self.log).ok()?;
        text.lines().rev().find_map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).ok()?;
            v.get("remaining")?.as_u64()
        })
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Copier {
    fn drop(&mut self) {
        self.kill();
    }
}

fn java(libs: &Path) -> Command {
    let mut cmd = Command::new("java");
    cmd.args(["-Xmx256m", "-XX:+UseSerialGC"])
        .arg("-Dlog4j2.rootLogger.level=WARN")
        .arg("-cp")
        .arg(format!("{}/*", libs.display()));
    cmd
}

/// A read_committed Java console consumer of the output topic printing
/// `Partition:P\tOffset:O\tVALUE` lines; with `timeout_ms` it exits after that long without a
/// record.
fn console_consumer(
    libs: &Path,
    bootstrap: &str,
    out: &Path,
    timeout_ms: Option<u64>,
) -> anyhow::Result<Child> {
    let mut cmd = java(libs);
    cmd.arg("org.apache.kafka.tools.consumer.ConsoleConsumer")
        .args(["--bootstrap-server", bootstrap])
        .args(["--topic", OUTPUT])
        .arg("--from-beginning")
        .args(["--isolation-level", "read_committed"])
        .args(["--formatter-property", "print.partition=true"])
        .args(["--formatter-property", "print.offset=true"]);
    if let Some(t) = timeout_ms {
        cmd.args(["--timeout-ms", &t.to_string()]);
    }
    let file = std::fs::File::create(out)?;
    let err = std::fs::File::create(out.with_extension("err"))?;
    cmd.stdin(Stdio::null())
        .stdout(file)
        .stderr(err)
        .spawn()
        .context("starting the console consumer")
}

/// (partition, offset, value) of each consumer output line.
fn read_consumed(path: &Path) -> anyhow::Result<Vec<(i32, i64, u64)>> {
    let f = std::fs::File::open(path)?;
    let mut out = Vec::new();
    for line in BufReader::new(f).lines() {
        let line = line?;
        let mut parts = line.split('\t');
        let (Some(p), Some(o), Some(v)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let (Some(p), Some(o)) = (p.strip_prefix("Partition:"), o.strip_prefix("Offset:")) else {
            continue;
        };
        out.push((p.parse()?, o.parse()?, v.trim().parse()?));
    }
    Ok(out)
}

async fn drive(
    nodes: &mut Nodes,
    args: &CopierArgs,
    libs: &Path,
    dir: &Path,
) -> anyhow::Result<CopierOutcome> {
    let all = nodes.bootstrap_without(&[]);
    create_topics(nodes, args).await?;
    seed(&all, args).await?;
    println!(
        "copier: seeded {} records into {INPUT} ({} partitions)",
        args.records, args.input_partitions
    );

    let concurrent_out = dir.join("concurrent-consumer.out");
    let mut concurrent = console_consumer(libs, &all, &concurrent_out, None)?;
    let mut copiers: Vec<Copier> = (0..args.input_partitions)
        .map(|p| Copier {
            partition: p,
            child: None,
            log: dir.join(format!("copier-{p}.log")),
            starts: 0,
        })
        .collect();
    for c in &mut copiers {
        c.spawn(libs, &all, args)?;
    }

    let per_copier = args.records / args.input_partitions as u64;
    let deadline = Instant::now() + Duration::from_secs(args.timeout_secs);
    let mut outcome = CopierOutcome::default();
    // Faults begin once every copier is 20% through, as Kafka's test waits for.
    let mut faults_due = false;
    let mut next_fault = Instant::now();
    let mut fault_no = 0u32;
    let total_faults = args.broker_kills + args.copier_kills;
    loop {
        nodes.procs_mut().check_alive()?;
        let mut done = 0;
        for c in &mut copiers {
            let exited = match c.child.as_mut() {
                Some(ch) => ch.try_wait()?,
                None => None,
            };
            if let Some(st) = exited {
                c.child = None;
                if st.success() && c.remaining() == Some(0) {
                    done += 1;
                    continue;
                }
                // A copier that exits on its own without finishing is a failure of the
                // system under test (Kafka's copier survives broker bounces); it is restarted
                // so the run can still check the data, and counted.
                outcome.copier_failures += 1;
                eprintln!(
                    "copier: copier-{} exited with {st} before finishing; restarting it",
                    c.partition
                );
                c.spawn(libs, &all, args)?;
            } else if c.child.is_none() {
                done += 1;
            }
        }
        if done == copiers.len() && fault_no >= total_faults {
            break;
        }
        if done == copiers.len() {
            // Finished before every fault was injected: the remaining ones have nothing left
            // to disturb.
            break;
        }
        if Instant::now() > deadline {
            bail!(
                "the copy did not finish within {} s (remaining: {:?})",
                args.timeout_secs,
                copiers.iter().map(|c| c.remaining()).collect::<Vec<_>>()
            );
        }
        if !faults_due {
            faults_due = copiers
                .iter()
                .all(|c| c.remaining().is_some_and(|r| r <= per_copier * 8 / 10));
            next_fault = Instant::now();
        }
        if faults_due && fault_no < total_faults && Instant::now() >= next_fault {
            // Alternate: a broker, a copier, a broker, ...
            let broker_turn = (fault_no.is_multiple_of(2)
                && outcome.broker_kills < args.broker_kills)
                || outcome.copier_kills >= args.copier_kills;
            if broker_turn {
                let id = (outcome.broker_kills as i32 % nodes.nodes()) + 1;
                println!("copier: SIGKILL broker {id}");
                nodes.procs_mut().kill(id)?;
                tokio::time::sleep(Duration::from_secs(2)).await;
                nodes.spawn(id)?;
                wait_full_isr(&all, args).await?;
                outcome.broker_kills += 1;
            } else {
                let i = outcome.copier_kills as usize % copiers.len();
                if copiers[i].child.is_some() {
                    println!("copier: SIGKILL copier-{}", copiers[i].partition);
                    copiers[i].kill();
                    copiers[i].spawn(libs, &all, args)?;
                }
                outcome.copier_kills += 1;
            }
            fault_no += 1;
            next_fault = Instant::now() + Duration::from_secs(3);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    println!(
        "copier: copy done ({} broker kills, {} copier kills, {} copier failures)",
        outcome.broker_kills, outcome.copier_kills, outcome.copier_failures
    );

    // The concurrent consumer gets a moment to read the last transactions, then stops.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let _ = concurrent.kill();
    let _ = concurrent.wait();

    let drain_out = dir.join("drain-consumer.out");
    let mut drain = console_consumer(libs, &all, &drain_out, Some(20_000))?;
    let drain_deadline = Instant::now() + Duration::from_secs(300);
    loop {
        if drain.try_wait()?.is_some() {
            break;
        }
        if Instant::now() > drain_deadline {
            let _ = drain.kill();
            let _ = drain.wait();
            bail!("the draining consumer did not finish within 300 s");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let output = read_consumed(&drain_out)?;
    let seen = read_consumed(&concurrent_out)?;
    check(args, &output, &seen, &mut outcome);
    Ok(outcome)
}

/// Kafka's checks over the drained output and what the concurrent consumer saw.
fn check(
    args: &CopierArgs,
    output: &[(i32, i64, u64)],
    concurrent: &[(i32, i64, u64)],
    o: &mut CopierOutcome,
) {
    o.input = args.records;
    o.output = output.len() as u64;
    let mut counts: HashMap<u64, u64> = HashMap::new();
    for (_, _, v) in output {
        *counts.entry(*v).or_default() += 1;
    }
    o.unique = counts.len() as u64;
    o.duplicates = counts.values().map(|n| n - 1).sum();
    o.missing = (0..args.records)
        .filter(|v| !counts.contains_key(v))
        .count() as u64;
    o.unexpected = counts.keys().filter(|v| **v >= args.records).count() as u64;
    // Per output partition, the values from one input partition (value % input partitions)
    // appear in increasing order.
    let mut last: BTreeMap<(i32, u64), u64> = BTreeMap::new();
    let mut sorted = output.to_vec();
    sorted.sort_by_key(|(p, off, _)| (*p, *off));
    for (p, _, v) in sorted {
        let src = v % args.input_partitions as u64;
        if let Some(prev) = last.insert((p, src), v) {
            if prev >= v {
                o.order_violations += 1;
            }
        }
    }
    o.concurrent_seen = concurrent.len() as u64;
    let mut offsets = BTreeSet::new();
    let mut values = BTreeSet::new();
    let final_set: BTreeSet<(i32, i64, u64)> = output.iter().copied().collect();
    for r in concurrent {
        // The console consumer may re-read after a rebalance of its own group: the same
        // (partition, offset) twice is a re-read, not a duplicate in the topic.
        if !offsets.insert((r.0, r.1)) {
            continue;
        }
        if !values.insert(r.2) {
            o.concurrent_duplicates += 1;
        }
        if !final_set.contains(r) {
            o.aborted_reads += 1;
        }
    }
}

async fn create_topics(nodes: &mut Nodes, args: &CopierArgs) -> anyhow::Result<()> {
    let all = nodes.bootstrap_without(&[]);
    let n = nodes.nodes();
    wait_for("every broker to register", Duration::from_secs(90), || {
        let all = all.clone();
        async move {
            let admin = Admin::new(connect(&all).await?);
            Ok((admin.describe_cluster().await?.brokers.len() as i32 >= n).then_some(()))
        }
    })
    .await?;
    let configs = vec![("min.insync.replicas".to_string(), "2".to_string())];
    for (topic, partitions) in [
        (INPUT, args.input_partitions),
        (OUTPUT, args.output_partitions),
    ] {
        wait_for("the topic to be created", Duration::from_secs(60), || {
            let all = all.clone();
            let configs = configs.clone();
            async move {
                let admin = Admin::new(connect(&all).await?);
                ensure_topic(&admin, topic, partitions, 3, &configs).await?;
                Ok(Some(()))
            }
        })
        .await?;
    }
    wait_full_isr(&all, args).await
}

/// Waits until every partition of both topics has a leader and all 3 replicas in sync.
async fn wait_full_isr(all: &str, args: &CopierArgs) -> anyhow::Result<()> {
    let expect = (args.input_partitions + args.output_partitions) as usize;
    wait_for("full ISRs", Duration::from_secs(120), || {
        let all = all.to_string();
        async move {
            let admin = Admin::new(connect(&all).await?);
            let d = admin
                .describe_topics(Some(&[INPUT.to_string(), OUTPUT.to_string()]))
                .await?;
            let ok = d
                .iter()
                .flat_map(|t| t.partitions.iter())
                .filter(|p| p.leader >= 0 && p.isr.len() == 3)
                .count();
            Ok((ok == expect).then_some(()))
        }
    })
    .await
}

/// Value `i` (as a decimal string, as Kafka's VerifiableProducer writes) to input partition
/// `i % input_partitions`, idempotent with acks=all.
async fn seed(all: &str, args: &CopierArgs) -> anyhow::Result<()> {
    let props = vec![
        ("bootstrap.servers".to_string(), all.to_string()),
        ("client.id".to_string(), "copier-seed".to_string()),
        ("acks".to_string(), "all".to_string()),
        ("enable.idempotence".to_string(), "true".to_string()),
        ("linger.ms".to_string(), "5".to_string()),
    ];
    let producer = Producer::connect(ProducerConfig::from_properties(&props)?).await?;
    let mut pending = FuturesUnordered::new();
    for i in 0..args.records {
        let p = (i % args.input_partitions as u64) as i32;
        pending.push(producer.send(
            INPUT,
            Some(p),
            None,
            Some(Bytes::from(i.to_string())),
            Vec::new(),
        ));
        while pending.len() >= 10_000 {
            pending
                .next()
                .await
                .expect("non-empty")
                .context("seeding the input topic")?;
        }
    }
    while let Some(r) = pending.next().await {
        r.context("seeding the input topic")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(records: u64) -> CopierArgs {
        CopierArgs {
            records,
            transaction_size: 750,
            input_partitions: 2,
            output_partitions: 3,
            broker_kills: 0,
            copier_kills: 0,
            random_aborts: true,
            broker: "strom".into(),
            kafka_libs: None,
            data_dir: PathBuf::new(),
            timeout_secs: 1,
        }
    }

    #[test]
    fn a_clean_copy_has_no_violation() {
        let out = vec![
            (0, 0, 0),
            (0, 1, 1),
            (1, 0, 2),
            (1, 1, 3),
            (2, 0, 5),
            (2, 1, 4),
        ];
        let mut o = CopierOutcome::default();
        check(&args(6), &out, &out, &mut o);
        assert_eq!(o.violations(), 0, "{o:?}");
        assert_eq!((o.output, o.unique), (6, 6));
    }

    #[test]
    fn the_checker_catches_each_fault() {
        // A duplicate, a missing value, an out-of-order pair from input partition 0, and
        // a concurrent read of a record that is not in the final output (aborted read).
        let out = vec![(0, 0, 2), (0, 1, 0), (1, 0, 1), (2, 0, 1)];
        let conc = vec![(0, 0, 2), (2, 7, 9)];
        let mut o = CopierOutcome::default();
        check(&args(4), &out, &conc, &mut o);
        assert_eq!(o.duplicates, 1);
        assert_eq!(o.missing, 1, "value 3");
        assert_eq!(o.order_violations, 1, "0 after 2 in partition 0");
        assert_eq!(o.aborted_reads, 1);
        assert_eq!(o.unexpected, 0);
    }
}

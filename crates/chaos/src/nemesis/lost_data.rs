//! The lost-data fault (issue 18, defect 3): a node is SIGKILLed, loses what the crash of its
//! machine would lose, and is restarted at once — well within `broker.session.timeout.ms`:
//!
//! - the tail of the active segment of each of its replicas (the second half): the page cache
//!   it never flushed (Kafka and Strom do not fsync appends unless `flush.messages` /
//!   `flush.ms` say so; acks=all counts on the other replicas instead);
//! - or a whole partition directory: a lost disk.
//!
//! A broker that comes back with less than it acknowledged must not lead again at the same
//! leader epoch, or the followers that are ahead truncate to it and acknowledged records are
//! gone. Kafka's protection (broker epochs, DUPLICATE_BROKER_REGISTRATION, the ISR removal of an
//! unclean restart, KIP-903) keeps the checker quiet under this fault. `--unsafe-lost-data`
//! turns it off on every broker (`strom.unsafe.trust.restarted.brokers=true`, Strom before
//! broker epochs) and runs the fault once, scripted, on a partition leader: the run must end in
//! reported loss, which shows that the checker sees it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use super::nemesis::Nemesis;
use super::workload::{Probe, Shared, TOPIC};
use strom_launcher::LocalCluster;

/// What a node loses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loss {
    /// The second half of the active segment of every replica of the given topics.
    SegmentTail,
    /// One partition's whole directory.
    PartitionDir,
}

/// The replica directories of `topic` in `node_dir`.
fn partition_dirs(node_dir: &Path, topic: &str) -> Vec<PathBuf> {
    let prefix = format!("{topic}-");
    let mut out: Vec<PathBuf> = std::fs::read_dir(node_dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            e.file_name().to_str().is_some_and(|n| {
                n.strip_prefix(&prefix)
                    .is_some_and(|p| p.parse::<i32>().is_ok())
            })
        })
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    out.sort();
    out
}

/// Truncates the active (highest base offset) segment of `dir` to half its size; returns the
/// bytes dropped.
fn drop_segment_tail(dir: &Path) -> anyhow::Result<u64> {
    let mut logs: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    let Some(active) = logs.pop() else {
        return Ok(0);
    };
    let len = std::fs::metadata(&active)?.len();
    let keep = len / 2;
    std::fs::OpenOptions::new()
        .write(true)
        .open(&active)
        .and_then(|f| f.set_len(keep))
        .with_context(|| format!("truncating {}", active.display()))?;
    Ok(len - keep)
}

/// Applies `loss` to a stopped node's data in `node_dir`: the segment tails of every replica
/// of `topics`, or the directory of `topic`-`partition`. Returns what was done, for the log.
pub fn lose(
    node_dir: &Path,
    loss: Loss,
    topics: &[&str],
    partition: (&str, i32),
) -> anyhow::Result<String> {
    match loss {
        Loss::SegmentTail => {
            let mut dropped = 0;
            let mut replicas = 0;
            for t in topics {
                for d in partition_dirs(node_dir, t) {
                    dropped += drop_segment_tail(&d)?;
                    replicas += 1;
                }
            }
            Ok(format!(
                "dropped the second half of the active segment of {replicas} replicas \
                 ({dropped} bytes)"
            ))
        }
        Loss::PartitionDir => {
            let d = node_dir.join(format!("{}-{}", partition.0, partition.1));
            if d.exists() {
                std::fs::remove_dir_all(&d).with_context(|| format!("removing {}", d.display()))?;
            }
            Ok(format!("removed {}", d.display()))
        }
    }
}

/// Kills node `n`, makes it lose `loss`, and starts it again at once.
pub fn kill_lose_restart(
    nem: &Nemesis,
    cluster: &mut LocalCluster,
    n: i32,
    loss: Loss,
    topics: &[&str],
    partition: (&str, i32),
) -> anyhow::Result<()> {
    cluster.procs.kill(n)?;
    let what = lose(&cluster.node_dir(n), loss, topics, partition)?;
    nem.log(&format!("node {n}: {what}; restart it at once"));
    cluster.spawn(n)?;
    Ok(())
}

/// The partition the scripted run hits.
const PARTITION: i32 = 0;
/// Records acknowledged before the fault: the dropped half of the leader's segment holds
/// hundreds of them.
const ACKED_BEFORE: usize = 1000;

fn acked(shared: &Shared, partition: i32) -> usize {
    shared
        .acked
        .lock()
        .unwrap()
        .iter()
        .filter(|a| a.partition == partition)
        .count()
}

/// `--unsafe-lost-data`: once enough records are acknowledged on partition 0 and its ISR is
/// full, its leader is killed, loses its segment tail and is restarted at once; the workload
/// goes on for a while after it. The brokers trust the restarted one, so it leads again.
pub async fn run_unsafe(
    nem: &mut Nemesis,
    cluster: &mut LocalCluster,
    probe: &Probe,
    shared: &Shared,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let leader = loop {
        let state = probe.partition_state().await.ok();
        let ready = state
            .as_ref()
            .and_then(|s| s.get(&PARTITION))
            .filter(|(l, isr)| *l >= 0 && isr.len() == probe.replicas)
            .map(|(l, _)| *l);
        if let Some(l) = ready.filter(|_| acked(shared, PARTITION) >= ACKED_BEFORE) {
            break l;
        }
        if Instant::now() > deadline {
            bail!(
                "--unsafe-lost-data: partition {PARTITION} never had {ACKED_BEFORE} acknowledged \
                 records and a full ISR (acked {}, state {state:?})",
                acked(shared, PARTITION)
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    nem.log(&format!(
        "unsafe scenario: SIGKILL node {leader} (leader of partition {PARTITION}) after {} \
         acknowledged records",
        acked(shared, PARTITION)
    ));
    kill_lose_restart(
        nem,
        cluster,
        leader,
        Loss::SegmentTail,
        &[TOPIC],
        (TOPIC, PARTITION),
    )?;
    nem.count("kill-lose-data");
    // The workload goes on across the restart.
    tokio::time::sleep(Duration::from_secs(10)).await;
    nem.last_heal = Some(Instant::now());
    Ok(())
}

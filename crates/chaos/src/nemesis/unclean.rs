//! `--unsafe-unclean`: a scripted, known-unsafe fault instead of the random schedule, run to
//! prove that the checker catches real data loss end to end.
//!
//! The topic is created with replication factor 2, `min.insync.replicas=1` and
//! `unclean.leader.election.enable=true` (topic level; the brokers keep the default `false`).
//! On partition 0 with leader L and follower F:
//! 1. F is cut off from L (`--net`: the F-L link; otherwise F is SIGSTOPped) until the ISR
//!    has shrunk to [L];
//! 2. producers keep writing with acks=all, which L alone now acknowledges
//!    (min.insync.replicas=1), until enough records are acknowledged beyond what F holds;
//! 3. L is SIGKILLed, then F is reconnected (or continued): no ISR member is alive, so the
//!    controller elects F uncleanly, with a log missing the records L acknowledged alone;
//! 4. L is restarted and truncates its log to F's as a follower: the records are gone.
//!
//! The partition's two replicas are the nodes other than the active controller, so that neither
//! fault touches the quorum's leader (a paused or killed controller would add a controller
//! failover to the scenario and slow the ISR shrink past the clients' request timeout).
//!
//! The run then goes through the normal healing, read-back and checks, which must report the
//! acknowledged records as `lost`. The metadata quorum is the three nodes, so at most one
//! voter is down at a time apart from the instant between killing L and reconnecting F; that
//! is also why the partition has two replicas: the third node keeps the quorum alive.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use super::nemesis::Nemesis;
use super::netns::NetLab;
use super::workload::{Probe, Shared};
use strom_launcher::LocalCluster;

/// The partition the scenario hits.
const PARTITION: i32 = 0;
/// Records L must acknowledge alone before it is killed: enough that the loss is not a
/// matter of one in-flight batch.
const ACKED_ALONE: usize = 200;

/// Topic configs of the unsafe mode.
pub fn topic_configs() -> Vec<(String, String)> {
    vec![
        ("min.insync.replicas".to_string(), "1".to_string()),
        (
            "unclean.leader.election.enable".to_string(),
            "true".to_string(),
        ),
    ]
}

/// Acknowledged records of `partition` at offsets above `above`.
fn acked_above(shared: &Shared, partition: i32, above: i64) -> usize {
    shared
        .acked
        .lock()
        .unwrap()
        .iter()
        .filter(|a| a.partition == partition && a.offset > above)
        .count()
}

fn max_acked(shared: &Shared, partition: i32) -> i64 {
    shared
        .acked
        .lock()
        .unwrap()
        .iter()
        .filter(|a| a.partition == partition)
        .map(|a| a.offset)
        .max()
        .unwrap_or(-1)
}

/// The clients' progress, for errors.
fn progress(shared: &Shared) -> String {
    let h = shared.history();
    format!(
        "sent {}, acked {}, failed {}, first client error {:?}",
        h.sent,
        h.acked.len(),
        h.failed.len(),
        h.first_error
    )
}

/// Polls `probe` until `f` returns Some, at most `limit`.
async fn wait_for<T>(
    what: &str,
    limit: Duration,
    mut f: impl FnMut() -> Option<T>,
) -> anyhow::Result<T> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return Ok(v);
        }
        if Instant::now() >= deadline {
            bail!("timed out after {} s waiting for {what}", limit.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// (leader, replicas, isr) of the scenario's partition, if it has a leader.
async fn state(probe: &Probe) -> Option<(i32, Vec<i32>, Vec<i32>)> {
    probe
        .partition_metadata()
        .await
        .ok()?
        .into_iter()
        .find(|p| p.partition == PARTITION && p.leader >= 0)
        .map(|p| (p.leader, p.replicas, p.isr))
}

/// Polls the partition's state until `f` accepts it, at most `limit`.
async fn wait_state(
    probe: &Probe,
    what: &str,
    limit: Duration,
    f: impl Fn(i32, &[i32]) -> bool,
) -> anyhow::Result<(i32, Vec<i32>)> {
    let deadline = Instant::now() + limit;
    let mut last = None;
    loop {
        if let Some((l, _, isr)) = state(probe).await {
            if f(l, &isr) {
                return Ok((l, isr));
            }
            last = Some((l, isr));
        }
        if Instant::now() >= deadline {
            bail!(
                "timed out after {} s waiting for {what}; last (leader, isr) {last:?}",
                limit.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Runs the scenario (steps 1-4 above); every fault is undone on return except on error,
/// where the caller's `heal_all` does it.
pub async fn run(
    nem: &mut Nemesis,
    cluster: &mut LocalCluster,
    mut lab: Option<&mut NetLab>,
    probe: &Probe,
    shared: &Shared,
) -> anyhow::Result<()> {
    let (leader, replicas, isr) = state(probe)
        .await
        .context("partition 0 has no leader at the start")?;
    let follower = replicas
        .iter()
        .copied()
        .find(|&r| r != leader)
        .with_context(|| format!("partition 0 has no follower: replicas {replicas:?}"))?;
    if isr.len() != 2 {
        bail!("partition 0's ISR is {isr:?}, not both replicas {replicas:?}");
    }
    nem.log(&format!(
        "unsafe scenario on partition {PARTITION}: leader {leader}, follower {follower}, \
         replicas {replicas:?}"
    ));
    // Some records replicated to both first, so that F's log is not empty.
    wait_for(
        "records acknowledged by both replicas",
        Duration::from_secs(15),
        || (acked_above(shared, PARTITION, -1) >= 50).then_some(()),
    )
    .await
    .with_context(|| progress(shared))?;

    // 1. F cut off until the ISR is the leader alone.
    match lab.as_deref_mut() {
        Some(lab) => {
            nem.log(&format!(
                "cut the link between node {follower} and node {leader} (follower and leader)"
            ));
            lab.cut(follower, leader)?;
            nem.count("cut-follower");
        }
        None => {
            nem.log(&format!("SIGSTOP node {follower} (follower)"));
            cluster.procs.pause(follower)?;
            nem.count("pause");
        }
    }
    wait_state(
        probe,
        "the ISR to shrink to the leader",
        Duration::from_secs(30),
        |l, isr| l == leader && isr == [leader],
    )
    .await?;
    nem.log(&format!("ISR of partition {PARTITION} is [{leader}]"));

    // 2. Records acknowledged by the leader alone.
    let mark = max_acked(shared, PARTITION);
    wait_for(
        "records acknowledged by the leader alone",
        Duration::from_secs(20),
        || (acked_above(shared, PARTITION, mark) >= ACKED_ALONE).then_some(()),
    )
    .await
    .with_context(|| progress(shared))?;
    nem.log(&format!(
        "{} records acknowledged above offset {mark} by node {leader} alone",
        acked_above(shared, PARTITION, mark)
    ));

    // 3. The leader dies, the stale follower comes back and is elected uncleanly.
    nem.log(&format!(
        "SIGKILL node {leader} (leader, the only ISR member)"
    ));
    cluster.procs.kill(leader)?;
    nem.count("kill-leader");
    match lab {
        Some(lab) => {
            nem.log("heal the network");
            lab.heal()?;
        }
        None => {
            nem.log(&format!("SIGCONT node {follower}"));
            cluster.procs.resume(follower)?;
        }
    }
    let (l, isr) = wait_state(
        probe,
        "the out-of-sync follower to be elected",
        Duration::from_secs(30),
        |l, _| l == follower,
    )
    .await?;
    nem.log(&format!(
        "node {l} is leader of partition {PARTITION} (unclean election), ISR {isr:?}"
    ));
    nem.count("unclean-election");

    // 4. The old leader comes back as a follower and truncates to the new leader's log.
    nem.log(&format!("restart node {leader}"));
    cluster.spawn(leader)?;
    nem.last_heal = Some(Instant::now());
    Ok(())
}

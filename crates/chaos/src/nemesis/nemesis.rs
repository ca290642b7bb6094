//! The nemesis: a seeded schedule of faults, applied one at a time to the cluster and healed
//! before the next one. Owns the fault kinds, choosing them (from the seed) and their targets
//! (from the cluster's state: a partition leader, the active controller), applying and healing
//! them, and counting what was done.
//!
//! The seed fixes the sequence of fault kinds, hold times and gaps; the concrete node a
//! "leader" or "controller" fault hits depends on the cluster at that moment, so it is printed
//! with each action rather than promised by the seed.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context;

use super::lost_data::{kill_lose_restart, Loss};
use super::netns::{NetLab, CLIENTS};
use super::txn::TXN_TOPIC;
use super::workload::{Probe, TOPIC};
use strom_launcher::LocalCluster;

/// splitmix64: a tiny deterministic generator (the crate has no `rand` dependency).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }

    pub fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(self.range(lo, hi))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// SIGKILL a random node, restart it after the hold time.
    Kill,
    /// SIGKILL the leader of a random partition.
    KillLeader,
    /// SIGKILL the active controller (the Raft leader of the metadata quorum).
    KillController,
    /// SIGSTOP a random node, SIGCONT after the hold time.
    Pause,
    /// SIGSTOP the leader of a random partition.
    PauseLeader,
    /// `--net`: a partition leader cut off from the other nodes; clients still reach it (the
    /// Kafka 0.8 Jepsen case: producers keep writing to an isolated leader).
    IsolateLeader,
    /// `--net`: a 2/1 split: one node cut off from the other nodes and from the clients.
    Split,
    /// `--net`: one follower of a partition cut off from that partition's leader only; it still
    /// reaches the third node and the clients (a non-transitive partition).
    CutFollower,
    /// With transactions: SIGKILL the transaction coordinator of a transactional producer (the
    /// leader of its `__transaction_state` partition), likely in the middle of a commit.
    KillTxnCoordinator,
    /// With transactions: SIGSTOP the transaction coordinator of a transactional producer.
    PauseTxnCoordinator,
    /// SIGKILL the leader of a random partition, drop the tail of its active segments (its
    /// unflushed page cache) or that partition's whole directory (a lost disk), restart it at
    /// once (`lost_data`).
    KillLoseData,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Kill => "kill",
            Kind::KillLeader => "kill-leader",
            Kind::KillController => "kill-controller",
            Kind::Pause => "pause",
            Kind::PauseLeader => "pause-leader",
            Kind::IsolateLeader => "isolate-leader",
            Kind::Split => "split-2/1",
            Kind::CutFollower => "cut-follower",
            Kind::KillTxnCoordinator => "kill-txn-coordinator",
            Kind::PauseTxnCoordinator => "pause-txn-coordinator",
            Kind::KillLoseData => "kill-lose-data",
        }
    }

    /// The kinds to draw from; the transaction coordinator's only with transactional
    /// producers, appended so that runs without them keep their seeds' schedules.
    fn choices(net: bool, txn: bool) -> Vec<Kind> {
        let mut k = Self::base_choices(net).to_vec();
        if txn {
            k.extend([Kind::KillTxnCoordinator, Kind::PauseTxnCoordinator]);
        }
        k
    }

    fn base_choices(net: bool) -> &'static [Kind] {
        const PROCESS: &[Kind] = &[
            Kind::Kill,
            Kind::KillLeader,
            Kind::KillController,
            Kind::Pause,
            Kind::PauseLeader,
            Kind::KillLoseData,
        ];
        const ALL: &[Kind] = &[
            Kind::Kill,
            Kind::KillLeader,
            Kind::KillController,
            Kind::Pause,
            Kind::PauseLeader,
            Kind::IsolateLeader,
            Kind::Split,
            Kind::CutFollower,
            Kind::KillLoseData,
        ];
        if net {
            ALL
        } else {
            PROCESS
        }
    }
}

/// The fault in force, to heal.
enum Fault {
    Killed(i32),
    Paused(i32),
    Cut,
    /// Killed and restarted already (the lost-data fault): nothing to heal.
    Restarted(i32),
}

pub struct Nemesis {
    rng: Rng,
    net: bool,
    start: Instant,
    pub done: BTreeMap<&'static str, u64>,
    /// Faults whose target could not be found (no leader known, ...) and were skipped.
    pub skipped: u64,
    /// When the last fault was healed: the recovery deadline counts from here.
    pub last_heal: Option<Instant>,
    /// The transactional ids of the run (whose coordinators the txn kinds target).
    pub txn_ids: Vec<String>,
}

impl Nemesis {
    pub fn new(seed: u64, net: bool, start: Instant) -> Nemesis {
        Nemesis {
            rng: Rng::new(seed),
            net,
            start,
            done: BTreeMap::new(),
            skipped: 0,
            last_heal: None,
            txn_ids: Vec::new(),
        }
    }

    pub fn log(&self, msg: &str) {
        println!(
            "[{:7.2}s] nemesis: {msg}",
            self.start.elapsed().as_secs_f64()
        );
    }

    /// Counts one action of kind `name` done.
    pub fn count(&mut self, name: &'static str) {
        *self.done.entry(name).or_insert(0) += 1;
    }

    pub fn total(&self) -> u64 {
        self.done.values().sum()
    }

    /// Runs faults until `until`, each one healed before the next, so never more than one
    /// node is down, paused or cut off at a time. Between faults it waits a random gap and
    /// (bounded) for the cluster to be whole again, so that each fault hits a healthy cluster.
    pub async fn run(
        &mut self,
        cluster: &mut LocalCluster,
        mut lab: Option<&mut NetLab>,
        probe: &Probe,
        until: Instant,
    ) -> anyhow::Result<()> {
        let nodes = cluster.nodes();
        loop {
            // Decided before anything else so that the schedule depends on the seed only.
            let gap = self.rng.millis(1000, 3000);
            let kinds = Kind::choices(self.net, !self.txn_ids.is_empty());
            let kind = kinds[self.rng.range(0, kinds.len() as u64 - 1) as usize];
            let hold = self.rng.millis(2000, 6000);
            let pick_node = self.rng.range(1, nodes as u64) as i32;
            let pick_partition = self.rng.range(0, 1 << 16) as i32;
            // Drawn only for the kind that uses it, so that the other kinds' schedules stay.
            let loss = if kind == Kind::KillLoseData && self.rng.range(0, 1) == 1 {
                Loss::PartitionDir
            } else {
                Loss::SegmentTail
            };
            tokio::time::sleep(gap).await;
            if Instant::now() + hold >= until {
                return Ok(());
            }
            let fault = match self
                .apply(
                    cluster,
                    lab.as_deref_mut(),
                    probe,
                    kind,
                    pick_node,
                    pick_partition,
                    loss,
                )
                .await
            {
                Ok(Some(f)) => f,
                Ok(None) => {
                    self.skipped += 1;
                    continue;
                }
                Err(e) => {
                    // Heal whatever part of it took effect before failing the run.
                    let _ = self.heal_all(cluster, lab.as_deref_mut());
                    return Err(e.context(format!("applying {}", kind.name())));
                }
            };
            *self.done.entry(kind.name()).or_insert(0) += 1;
            tokio::time::sleep(hold).await;
            self.heal(cluster, lab.as_deref_mut(), fault)?;
            self.last_heal = Some(Instant::now());
            cluster.procs.check_alive()?;
            if Instant::now() + Duration::from_secs(1) >= until {
                return Ok(());
            }
            // Bounded: a cluster that does not recover in time still gets the next fault; the
            // final check reports it if it never recovers.
            let t = Instant::now();
            let whole = probe.wait_whole(Duration::from_secs(15)).await;
            if !whole {
                self.log(&format!(
                    "cluster not whole again after {:.1} s; going on",
                    t.elapsed().as_secs_f64()
                ));
            }
            if Instant::now() >= until {
                return Ok(());
            }
        }
    }

    async fn apply(
        &mut self,
        cluster: &mut LocalCluster,
        lab: Option<&mut NetLab>,
        probe: &Probe,
        kind: Kind,
        pick_node: i32,
        pick_partition: i32,
        loss: Loss,
    ) -> anyhow::Result<Option<Fault>> {
        let leader = || async {
            let leaders = probe.leaders().await.ok()?;
            if leaders.is_empty() {
                return None;
            }
            let (p, l) = leaders[pick_partition as usize % leaders.len()];
            Some((p, l))
        };
        Ok(match kind {
            Kind::Kill => {
                self.log(&format!("SIGKILL node {pick_node}"));
                cluster.procs.kill(pick_node)?;
                Some(Fault::Killed(pick_node))
            }
            Kind::KillLeader => {
                let Some((p, l)) = leader().await else {
                    self.log("kill-leader: no partition leader known; skipped");
                    return Ok(None);
                };
                self.log(&format!("SIGKILL node {l} (leader of partition {p})"));
                cluster.procs.kill(l)?;
                Some(Fault::Killed(l))
            }
            Kind::KillLoseData => {
                let Some((p, l)) = leader().await else {
                    self.log("kill-lose-data: no partition leader known; skipped");
                    return Ok(None);
                };
                self.log(&format!(
                    "SIGKILL node {l} (leader of partition {p}); it loses {}",
                    match loss {
                        Loss::SegmentTail => "the tail of its active segments",
                        Loss::PartitionDir => "that partition's directory",
                    }
                ));
                kill_lose_restart(self, cluster, l, loss, &[TOPIC, TXN_TOPIC], (TOPIC, p))?;
                Some(Fault::Restarted(l))
            }
            Kind::KillController => {
                let Some(c) = probe.active_controller().await else {
                    self.log("kill-controller: no active controller known; skipped");
                    return Ok(None);
                };
                self.log(&format!("SIGKILL node {c} (active controller)"));
                cluster.procs.kill(c)?;
                Some(Fault::Killed(c))
            }
            Kind::Pause => {
                self.log(&format!("SIGSTOP node {pick_node}"));
                cluster.procs.pause(pick_node)?;
                Some(Fault::Paused(pick_node))
            }
            Kind::PauseLeader => {
                let Some((p, l)) = leader().await else {
                    self.log("pause-leader: no partition leader known; skipped");
                    return Ok(None);
                };
                self.log(&format!("SIGSTOP node {l} (leader of partition {p})"));
                cluster.procs.pause(l)?;
                Some(Fault::Paused(l))
            }
            Kind::KillTxnCoordinator | Kind::PauseTxnCoordinator => {
                let id = &self.txn_ids[pick_node as usize % self.txn_ids.len()];
                let Some((p, l)) = txn_coordinator(probe, id).await else {
                    self.log(&format!(
                        "{}: no coordinator known for '{id}'; skipped",
                        kind.name()
                    ));
                    return Ok(None);
                };
                if kind == Kind::KillTxnCoordinator {
                    self.log(&format!(
                        "SIGKILL node {l} (transaction coordinator of '{id}', \
                         __transaction_state-{p})"
                    ));
                    cluster.procs.kill(l)?;
                    Some(Fault::Killed(l))
                } else {
                    self.log(&format!(
                        "SIGSTOP node {l} (transaction coordinator of '{id}', \
                         __transaction_state-{p})"
                    ));
                    cluster.procs.pause(l)?;
                    Some(Fault::Paused(l))
                }
            }
            Kind::IsolateLeader | Kind::Split | Kind::CutFollower => {
                let lab = lab.context("network faults need --net")?;
                let nodes = cluster.nodes();
                match kind {
                    Kind::IsolateLeader => {
                        let Some((p, l)) = leader().await else {
                            self.log("isolate-leader: no partition leader known; skipped");
                            return Ok(None);
                        };
                        self.log(&format!(
                            "cut node {l} (leader of partition {p}) off from the other nodes; \
                             clients still reach it"
                        ));
                        for o in (1..=nodes).filter(|&o| o != l) {
                            lab.cut(l, o)?;
                        }
                    }
                    Kind::Split => {
                        let n = pick_node;
                        let rest: Vec<i32> = (1..=nodes).filter(|&o| o != n).collect();
                        self.log(&format!(
                            "2/1 split: {{{n}}} | {rest:?} (node {n} cut off from the clients too)"
                        ));
                        for &o in &rest {
                            lab.cut(n, o)?;
                        }
                        lab.cut(n, CLIENTS)?;
                    }
                    _ => {
                        let Some((p, l)) = leader().await else {
                            self.log("cut-follower: no partition leader known; skipped");
                            return Ok(None);
                        };
                        let followers: Vec<i32> = (1..=nodes).filter(|&o| o != l).collect();
                        let f = followers[pick_node as usize % followers.len()];
                        self.log(&format!(
                            "cut the link between node {f} and node {l} (follower and leader \
                             of partition {p}); both still reach the others"
                        ));
                        lab.cut(f, l)?;
                    }
                }
                Some(Fault::Cut)
            }
        })
    }

    fn heal(
        &mut self,
        cluster: &mut LocalCluster,
        lab: Option<&mut NetLab>,
        fault: Fault,
    ) -> anyhow::Result<()> {
        match fault {
            Fault::Killed(n) => {
                self.log(&format!("restart node {n}"));
                Ok(cluster.spawn(n)?)
            }
            Fault::Paused(n) => {
                self.log(&format!("SIGCONT node {n}"));
                Ok(cluster.procs.resume(n)?)
            }
            Fault::Cut => {
                self.log("heal the network");
                lab.context("network faults need --net")?.heal()
            }
            Fault::Restarted(n) => {
                self.log(&format!("node {n} was restarted at once; nothing to heal"));
                Ok(())
            }
        }
    }

    /// Undoes every fault: continues paused nodes, restarts killed ones, restores links.
    pub fn heal_all(
        &mut self,
        cluster: &mut LocalCluster,
        lab: Option<&mut NetLab>,
    ) -> anyhow::Result<()> {
        for n in 1..=cluster.nodes() {
            if cluster.procs.is_paused(n) {
                self.log(&format!("SIGCONT node {n}"));
                cluster.procs.resume(n)?;
                self.last_heal = Some(Instant::now());
            }
            if !cluster.procs.is_running(n) {
                self.log(&format!("restart node {n}"));
                cluster.spawn(n)?;
                self.last_heal = Some(Instant::now());
            }
        }
        if let Some(lab) = lab {
            if lab.has_cuts() {
                self.log("heal the network");
                lab.heal()?;
                self.last_heal = Some(Instant::now());
            }
        }
        Ok(())
    }
}

/// The `__transaction_state` partition of `transactional_id` and its leader: Kafka routes a
/// transactional id as a group id (`abs(hashCode) % partition count`).
async fn txn_coordinator(probe: &Probe, transactional_id: &str) -> Option<(i32, i32)> {
    let f = async {
        let c = strom_client::Client::connect(super::workload::client_config(
            &probe.bootstrap,
            "nemesis-probe",
        ))
        .await
        .ok()?;
        let md = c.topic_metadata("__transaction_state").await.ok()?;
        let n = md.partitions.len() as i32;
        if n == 0 {
            return None;
        }
        let p = strom_group_coordinator::topic::partition_for(transactional_id, n);
        let l = md.partitions.iter().find(|m| m.partition == p)?.leader;
        (l >= 0).then_some((p, l))
    };
    tokio::time::timeout(Duration::from_secs(6), f)
        .await
        .ok()
        .flatten()
}

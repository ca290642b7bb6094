//! `strom-chaos`: fault-injection experiments against a local cluster this command starts — a
//! test harness beside the shipped `strom` binary, not part of it. The Strom nodes are `strom
//! server` processes started through `strom_launcher` (the binary next to `strom-chaos`, or
//! `--strom PATH`); Apache Kafka nodes are JVMs from Kafka 4.4's jars (`kafka_cluster`).
//!
//! `strom-chaos leader-kill` is seed 003's experiment: async sends of "seq-N" to a 1-partition,
//! 3-replica topic, the partition leader's process killed with SIGKILL part-way, then the topic
//! read back and checked for duplicates, reorderings and lost acknowledged records. It runs
//! with Strom's Rust producer, librdkafka or the Java producer, against Strom or (for the side
//! by side comparison) a local Apache Kafka 4.4 cluster. `strom-chaos compare` runs the
//! replication scenarios on both systems.
//!
//! `strom-chaos nemesis` is the Jepsen-style run: producers and consumers while a seeded
//! nemesis kills, pauses and (with `--net`) partitions nodes, then a check of every
//! acknowledged record, of what consumers saw, and of replica agreement.
//!
//! `strom-chaos copier` is Kafka's own transactions system test: transactional copiers under
//! broker and copier SIGKILLs, checked for exactly-once output and no aborted read.

mod compare;
mod copier;
mod kafka_cluster;
mod leader_kill;
mod nemesis;
mod nodes;
mod producers;

pub use leader_kill::LeaderKillArgs;
pub use nemesis::NemesisArgs;

use std::path::PathBuf;
use std::sync::OnceLock;

use anyhow::Context;

static STROM_EXE: OnceLock<PathBuf> = OnceLock::new();

/// Sets the `strom` binary the experiments start (`--strom`); once, before any experiment.
pub fn set_strom_exe(path: PathBuf) {
    let _ = STROM_EXE.set(path);
}

/// The `strom` binary the experiments start: `--strom`, else the `strom` next to this
/// executable (cargo puts both in `target/<profile>/`).
pub fn strom_exe() -> anyhow::Result<PathBuf> {
    if let Some(p) = STROM_EXE.get() {
        return Ok(p.clone());
    }
    let me = std::env::current_exe().context("locating strom-chaos")?;
    let dir = me.parent().context("strom-chaos has no directory")?;
    // A test binary lives one level deeper, in target/<profile>/deps.
    for d in [Some(dir), dir.parent()].into_iter().flatten() {
        let candidate = d.join("strom");
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    anyhow::bail!(
        "no strom binary next to {} (build it with `cargo build -p strom`, or pass --strom PATH)",
        me.display()
    )
}

/// Starts a fresh Strom cluster of `nodes` nodes under `dir` through the launcher.
pub(crate) fn launch_strom(
    dir: &std::path::Path,
    nodes: u16,
    set: &[String],
    placement: Vec<(String, String)>,
) -> anyhow::Result<strom_launcher::LocalCluster> {
    let mut opts = strom_launcher::LaunchOptions::new(strom_exe()?, dir, nodes).set(set);
    opts.placement = placement;
    Ok(strom_launcher::LocalCluster::launch(opts)?)
}

#[derive(clap::Subcommand)]
pub enum ChaosCommand {
    /// Kill the partition leader with SIGKILL while producing; count duplicates, reorderings
    /// and lost acknowledged records, with idempotence on and off.
    LeaderKill(LeaderKillArgs),
    /// The replication scenarios (follower pause, leader SIGTERM, ISR loss with clean and
    /// unclean election) on Strom and on Apache Kafka 4.4, measured side by side.
    Compare(compare::CompareArgs),
    /// Jepsen-style: producers and consumers while a seeded nemesis kills, pauses and (with
    /// --net) partitions nodes; then check every acknowledged record and replica agreement.
    Nemesis(NemesisArgs),
    /// Kafka's transactions system test: TransactionalMessageCopier instances copy an input
    /// topic to an output topic in transactions while brokers and copiers are SIGKILLed; the
    /// output must equal the input, without duplicates, in order, and read_committed readers
    /// never see an aborted record.
    Copier(copier::CopierArgs),
}

pub async fn run(command: ChaosCommand) -> anyhow::Result<()> {
    match command {
        ChaosCommand::LeaderKill(a) => leader_kill::run(a).await,
        ChaosCommand::Compare(a) => compare::run(a).await,
        ChaosCommand::Nemesis(a) => nemesis::run(a).await,
        ChaosCommand::Copier(a) => copier::run(a).await,
    }
}

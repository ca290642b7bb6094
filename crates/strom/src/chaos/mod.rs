//! `strom chaos`: fault-injection experiments against a local cluster this command starts.
//!
//! `strom chaos leader-kill` is seed 003's experiment: async sends of "seq-N" to a 1-partition,
//! 3-replica topic, the partition leader's process killed with SIGKILL part-way, then the topic
//! read back and checked for duplicates, reorderings and lost acknowledged records. It runs
//! with Strom's Rust producer, librdkafka or the Java producer, against Strom or (for the side
//! by side comparison) a local Apache Kafka 4.4 cluster. `strom chaos compare` runs the
//! replication scenarios on both systems.
//!
//! `strom chaos nemesis` is the Jepsen-style run: producers and consumers while a seeded
//! nemesis kills, pauses and (with `--net`) partitions nodes, then a check of every
//! acknowledged record, of what consumers saw, and of replica agreement.
//!
//! `strom chaos copier` is Kafka's own transactions system test: transactional copiers under
//! broker and copier SIGKILLs, checked for exactly-once output and no aborted read.

mod cluster;
mod compare;
mod copier;
mod kafka_cluster;
mod leader_kill;
mod nemesis;
mod nodes;
mod procs;
mod producers;

pub use leader_kill::LeaderKillArgs;
pub use nemesis::NemesisArgs;

#[derive(clap::Args)]
pub struct ChaosArgs {
    #[command(subcommand)]
    pub command: ChaosCommand,
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

pub async fn run(args: ChaosArgs) -> anyhow::Result<()> {
    match args.command {
        ChaosCommand::LeaderKill(a) => leader_kill::run(a).await,
        ChaosCommand::Compare(a) => compare::run(a).await,
        ChaosCommand::Nemesis(a) => nemesis::run(a).await,
        ChaosCommand::Copier(a) => copier::run(a).await,
    }
}

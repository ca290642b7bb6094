//! `strom bench produce|consume`: drive a Kafka-compatible broker through the project's own
//! client (`strom_client`) and report records/s, MB/s and latency percentiles.
//!
//! ```text
//! strom bench produce --topic bench --records 1000000 --record-size 1024 --acks 1
//! strom bench consume --topic bench --records 1000000
//! ```
//!
//! Each prints a human-readable summary and one `RESULT key=value ...` line for scripts
//! (`scripts/bench/compare.sh`). MB are 10^6 bytes.

mod consume;
mod produce;
pub mod stats;

use std::time::Duration;

use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use strom_client::{Admin, Client, ClientConfig, ErrorCode};

/// Arguments of `strom bench`.
#[derive(Debug, Args)]
#[command(
    about = "Benchmark a broker: produce or consume records and report throughput and latency"
)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub command: BenchCommand,
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Send records as fast as the producer allows; latency is send -> acknowledgement.
    Produce(produce::ProduceBenchArgs),
    /// Read records from the beginning (or the end) of a topic; reports throughput and, for
    /// records sent by `strom bench produce` while it runs, end-to-end latency.
    Consume(consume::ConsumeBenchArgs),
}

/// Flags shared by both benchmarks.
#[derive(Debug, Clone, Args)]
pub struct CommonArgs {
    /// The broker(s) to connect to.
    #[arg(long, default_value = crate::cli::DEFAULT_BOOTSTRAP, value_name = "HOST:PORT")]
    pub bootstrap_server: String,
    /// The topic.
    #[arg(long, default_value = "strom-bench")]
    pub topic: String,
    /// How many records to send / read.
    #[arg(long, default_value_t = 1_000_000)]
    pub records: u64,
    /// Partitions of the topic, created with this many if it does not exist.
    #[arg(long, default_value_t = 1)]
    pub partitions: i32,
    /// Do not draw a progress bar.
    #[arg(long)]
    pub no_progress: bool,
}

/// Runs `strom bench`.
pub async fn run(args: BenchArgs) -> crate::Result<()> {
    match args.command {
        BenchCommand::Produce(a) => produce::run(a).await,
        BenchCommand::Consume(a) => consume::run(a).await,
    }
}

async fn connect(bootstrap: &str) -> crate::Result<Client> {
    let mut config = ClientConfig::new(bootstrap);
    config.client_id = "strom-bench".into();
    Ok(Client::connect(config).await?)
}

/// Creates `topic` with `partitions` partitions unless it exists; returns its partition count.
async fn ensure_topic(client: &Client, topic: &str, partitions: i32) -> crate::Result<usize> {
    match Admin::new(client.clone())
        .create_topic(topic, partitions, 1, &[], false)
        .await
    {
        Ok(()) => {}
        Err(e) if e.code() == Some(ErrorCode::TopicAlreadyExists) => {}
        Err(e) => {
            return Err(crate::ToolError::msg(format!(
                "cannot create topic {topic}: {e}"
            )))
        }
    }
    let tm = client.topic_metadata(topic).await?;
    if tm.partitions.len() as i32 != partitions {
        eprintln!(
            "note: topic {topic} exists with {} partitions (asked for {partitions})",
            tm.partitions.len()
        );
    }
    Ok(tm.partitions.len())
}

fn progress_bar(total: u64, hidden: bool) -> ProgressBar {
    if hidden {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr_with_hz(4));
    pb.set_style(
        ProgressStyle::with_template(
            "{prefix} [{elapsed_precise}] {wide_bar} {human_pos}/{human_len} {per_sec} eta {eta}",
        )
        .expect("valid progress template"),
    );
    pb
}

/// How often the progress bar's position is updated (records; a power of two).
const PROGRESS_EVERY: u64 = 4096;

/// A stall longer than this ends a benchmark with an error.
const STALL_TIMEOUT: Duration = Duration::from_secs(60);

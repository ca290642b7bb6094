//! `strom bench consume`.

use std::time::{Duration, Instant};

use clap::Args;
use strom_client::{Consumer, ConsumerConfig, OffsetReset};

use super::stats::{self, Throughput};
use super::{connect, ensure_topic, progress_bar, CommonArgs, PROGRESS_EVERY};

/// Arguments of `strom bench consume`.
#[derive(Debug, Args)]
pub struct ConsumeBenchArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Start at the end of the log (to measure end-to-end latency against a running
    /// `strom bench produce --stamp`) instead of the beginning.
    #[arg(long)]
    pub from_latest: bool,
    /// fetch.max.bytes.
    #[arg(long, default_value_t = 50 * 1024 * 1024)]
    pub fetch_max_bytes: i32,
    /// max.partition.fetch.bytes.
    #[arg(long, default_value_t = 1024 * 1024)]
    pub max_partition_fetch_bytes: i32,
    /// fetch.max.wait.ms.
    #[arg(long, default_value_t = 500)]
    pub fetch_max_wait_ms: u64,
    /// Stop when no record arrived for this long.
    #[arg(long, default_value_t = 10_000)]
    pub timeout_ms: u64,
}

/// Runs `strom bench consume`.
pub async fn run(args: ConsumeBenchArgs) -> crate::Result<()> {
    let c = &args.common;
    let client = connect(&c.bootstrap_server).await?;
    ensure_topic(&client, &c.topic, c.partitions).await?;
    let config = ConsumerConfig {
        fetch_max_bytes: args.fetch_max_bytes,
        max_partition_fetch_bytes: args.max_partition_fetch_bytes,
        fetch_max_wait: Duration::from_millis(args.fetch_max_wait_ms),
        auto_offset_reset: if args.from_latest {
            OffsetReset::Latest
        } else {
            OffsetReset::Earliest
        },
        ..Default::default()
    };
    let mut consumer = Consumer::new(client, config);
    consumer.assign(&c.topic, None).await?;
    if args.from_latest {
        consumer.seek_to_end(&c.topic, None);
    } else {
        consumer.seek_to_beginning(&c.topic, None);
    }

    let pb = progress_bar(c.records, c.no_progress);
    pb.set_prefix("consume");
    let mut e2e = stats::new_histogram();
    let idle = Duration::from_millis(args.timeout_ms);
    let mut records = 0u64;
    let mut bytes = 0u64;
    // Timed from the first poll (the offset look-up included) to the last record.
    let start = Instant::now();
    let mut last = start;
    while records < c.records {
        let batch = consumer.poll(idle.min(Duration::from_secs(1))).await?;
        if batch.is_empty() {
            if last.elapsed() >= idle {
                eprintln!(
                    "note: no record for {} ms; stopping after {records} records",
                    args.timeout_ms
                );
                break;
            }
            continue;
        }
        last = Instant::now();
        let now_us = stats::now_micros();
        let before = records;
        for r in &batch {
            records += 1;
            let v = r.value.as_deref().unwrap_or(&[]);
            bytes += (v.len() + r.key.as_ref().map_or(0, |k| k.len())) as u64;
            if let Some(sent_us) = stats::payload_stamp(v) {
                stats::record(
                    &mut e2e,
                    Duration::from_micros(now_us.saturating_sub(sent_us)),
                );
            }
        }
        if records / PROGRESS_EVERY != before / PROGRESS_EVERY {
            pb.set_position(records.min(c.records));
        }
    }
    pb.finish_and_clear();
    let elapsed = last.duration_since(start);
    let t = Throughput {
        records,
        bytes,
        elapsed,
    };
    let p = stats::percentiles(&e2e);
    let lat: Vec<(&str, Option<stats::Percentiles>)> = if p.is_some() {
        vec![("end-to-end (send -> consume)", p)]
    } else {
        Vec::new()
    };
    print!("{}", stats::format_report("consume", &t, &lat));
    println!(
        "{}",
        stats::format_result_line("consume", &t, &[("e2e", p)])
    );
    Ok(())
}

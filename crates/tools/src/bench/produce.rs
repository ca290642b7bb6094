//! `strom bench produce`.

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use clap::Args;
use futures_util::stream::{FuturesUnordered, StreamExt};
use strom_client::producer::parse_compression;
use strom_client::{Acks, Producer, ProducerConfig, ProducerRecord};

use super::stats::{self, Throughput};
use super::{connect, ensure_topic, progress_bar, CommonArgs, PROGRESS_EVERY, STALL_TIMEOUT};

/// Arguments of `strom bench produce`.
#[derive(Debug, Args)]
pub struct ProduceBenchArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Value size of each record in bytes (no key).
    #[arg(long, default_value_t = 1024)]
    pub record_size: usize,
    /// acks: 0, 1, -1 or all.
    #[arg(long, default_value = "1", allow_hyphen_values = true)]
    pub acks: String,
    /// max.in.flight.requests.per.connection.
    #[arg(long, default_value_t = 5)]
    pub max_in_flight: usize,
    /// batch.size in bytes.
    #[arg(long, default_value_t = 16384)]
    pub batch_size: usize,
    /// linger.ms.
    #[arg(long, default_value_t = 5)]
    pub linger_ms: u64,
    /// none, gzip, snappy, lz4 or zstd.
    #[arg(long, default_value = "none")]
    pub compression: String,
    /// Bytes of records sent but not yet acknowledged before `send` waits (buffer.memory).
    #[arg(long, default_value_t = 32 * 1024 * 1024)]
    pub buffer_memory: usize,
    /// Stamp each value with its send time (the first 16 bytes) so that a concurrent
    /// `strom bench consume` can report end-to-end latency. Costs one copy per record.
    #[arg(long)]
    pub stamp: bool,
}

/// Runs `strom bench produce`.
pub async fn run(args: ProduceBenchArgs) -> crate::Result<()> {
    let c = &args.common;
    let client = connect(&c.bootstrap_server).await?;
    ensure_topic(&client, &c.topic, c.partitions).await?;
    let config = ProducerConfig {
        acks: args.acks.parse::<Acks>()?,
        compression: parse_compression(&args.compression)?,
        batch_size: args.batch_size,
        linger: Duration::from_millis(args.linger_ms),
        max_in_flight: args.max_in_flight.max(1),
        max_request_size: (args.batch_size + 1024).max(1024 * 1024),
        ..Default::default()
    };
    let producer = Producer::new(client, config);

    // A fixed, not very compressible payload; cloning `Bytes` shares it.
    let payload: Bytes = {
        let mut v = vec![0u8; args.record_size];
        let mut x: u32 = 0x9e37_79b9;
        for b in v.iter_mut() {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            *b = (x % 26) as u8 + b'a';
        }
        Bytes::from(v)
    };
    let window = (args.buffer_memory / args.record_size.max(1)).max(1) as u64;

    let pb = progress_bar(c.records, c.no_progress);
    pb.set_prefix("produce");
    let mut hist = stats::new_histogram();
    let mut pending = FuturesUnordered::new();
    let mut sent = 0u64;
    let mut acked = 0u64;
    let mut failed = 0u64;
    let mut first_error: Option<String> = None;
    let start = Instant::now();
    while acked + failed < c.records {
        while sent < c.records && sent - acked - failed < window {
            let value = if args.stamp {
                let mut b = BytesMut::from(&payload[..]);
                stats::stamp_payload(&mut b, stats::now_micros());
                b.freeze()
            } else {
                payload.clone()
            };
            let t0 = Instant::now();
            let fut = producer.send_record(ProducerRecord {
                topic: c.topic.clone(),
                partition: None,
                key: None,
                value: Some(value),
                headers: Vec::new(),
                timestamp: None,
            });
            pending.push(async move {
                let r = fut.await;
                (t0, Instant::now(), r)
            });
            sent += 1;
        }
        let next = tokio::time::timeout(STALL_TIMEOUT, pending.next()).await;
        let Ok(Some(mut item)) = next else {
            return Err(crate::ToolError::msg(format!(
                "no acknowledgement for {} s",
                STALL_TIMEOUT.as_secs()
            )));
        };
        loop {
            let (t0, t1, r) = item;
            match r {
                Ok(_) => {
                    acked += 1;
                    stats::record(&mut hist, t1 - t0);
                }
                Err(e) => {
                    failed += 1;
                    first_error.get_or_insert_with(|| e.to_string());
                }
            }
            if (acked + failed) & (PROGRESS_EVERY - 1) == 0 {
                pb.set_position(acked + failed);
            }
            // Take whatever else has completed without yielding.
            match futures_util::FutureExt::now_or_never(pending.next()) {
                Some(Some(i)) => item = i,
                _ => break,
            }
        }
    }
    let elapsed = start.elapsed();
    pb.finish_and_clear();
    producer.flush().await?;

    let t = Throughput {
        records: acked,
        bytes: acked * args.record_size as u64,
        elapsed,
    };
    let lat = [("send->ack", stats::percentiles(&hist))];
    print!("{}", stats::format_report("produce", &t, &lat));
    println!(
        "{}",
        stats::format_result_line("produce", &t, &[("lat", lat[0].1)])
    );
    if failed > 0 {
        return Err(crate::ToolError::msg(format!(
            "{failed} records failed; first error: {}",
            first_error.unwrap_or_default()
        )));
    }
    Ok(())
}

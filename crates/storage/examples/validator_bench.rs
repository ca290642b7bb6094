//! The leader's `LogValidator` alone, in release mode, for its cost per MB of produced batches:
//!
//! ```text
//! cargo build --release -p strom-storage --example validator_bench
//! perf stat -e instructions target/release/examples/validator_bench CODEC ITERATIONS
//! ```
//!
//! CODEC is none|gzip|snappy|lz4|zstd (the batch as the producer compressed it; the topic keeps
//! it: `compression.type=producer`), or `none-to-zstd` (an uncompressed batch re-encoded for a
//! `compression.type=zstd` topic). The batch is ~1 MiB: 1,000 records of a 16-byte key and a
//! 1 KiB value of text-like bytes. The batch is built before the timed loop; run it with
//! ITERATIONS=0 and subtract to get the validation's own instructions, divided by the MB
//! validated (printed). Also prints the wall-clock MB/s of the loop. A third argument
//! `decompress` times only the decompression of the records section, for comparison.

use std::time::Instant;

use strom_protocol::crafted::CraftedBatch;
use strom_storage::log_validator::{LogValidator, TargetCompression};
use strom_storage::{AppendOrigin, TimestampType};

const NOW: i64 = 1_700_000_000_000;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let codec_name = args.get(1).map(String::as_str).unwrap_or("none");
    let iterations: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(1000);
    let (codec, target) = match codec_name {
        "none" => (0, TargetCompression::Producer),
        "gzip" => (1, TargetCompression::Producer),
        "snappy" => (2, TargetCompression::Producer),
        "lz4" => (3, TargetCompression::Producer),
        "zstd" => (4, TargetCompression::Producer),
        "none-to-zstd" => (0, TargetCompression::Codec { id: 4, level: None }),
        other => panic!("unknown codec {other}"),
    };
    let mut b = CraftedBatch::new(NOW, 1000);
    b.codec = codec;
    let mut seed: u64 = 42;
    let words = [
        "order", "id", "customer", "amount", "status", "shipped", "2024", "eur", "{", "}", ":", ",",
    ];
    for (i, r) in b.records.iter_mut().enumerate() {
        r.key = Some(format!("key-{i:012}").into_bytes());
        let mut v = Vec::with_capacity(1024);
        while v.len() < 1024 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            v.extend_from_slice(words[(seed >> 59) as usize % words.len()].as_bytes());
            v.extend_from_slice(format!("{}", (seed >> 40) % 1000).as_bytes());
        }
        v.truncate(1024);
        r.value = Some(v);
    }
    let bytes = b.encode();
    let v = LogValidator {
        topic_partition: "bench-0",
        now_ms: NOW,
        target_compression: target,
        compacted_topic: false,
        timestamp_type: TimestampType::CreateTime,
        timestamp_before_max_ms: i64::MAX,
        timestamp_after_max_ms: 3_600_000,
        origin: AppendOrigin::Client,
        max_record_body_size: i32::MAX - 8,
        max_message_bytes: 64 << 20,
    };
    let uncompressed_mb = 1000.0 * (16.0 + 1024.0 + 10.0) / 1e6;
    // `decompress` as a third argument: only decompress the records section into a vector
    // (the floor any validation of a compressed batch pays), for comparison.
    let decompress_only = args.get(3).map(String::as_str) == Some("decompress");
    let start = Instant::now();
    for _ in 0..iterations {
        if decompress_only {
            let r = strom_protocol::compression::decompress(codec, &bytes[61..]).expect("codec");
            std::hint::black_box(r);
        } else {
            let r = v.validate(std::hint::black_box(&bytes)).expect("valid");
            std::hint::black_box(r);
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let mb = iterations as f64 * bytes.len() as f64 / 1e6;
    println!(
        "RESULT codec={codec_name} batch_bytes={} records_mb_per_batch={uncompressed_mb:.3} iterations={iterations} mb_validated={mb:.1} mb_per_sec={:.0} records_mb_per_sec={:.0}",
        bytes.len(),
        mb / secs.max(1e-9),
        iterations as f64 * uncompressed_mb / secs.max(1e-9)
    );
}

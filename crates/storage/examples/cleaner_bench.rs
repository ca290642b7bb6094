//! The log cleaner alone, in release mode: `cargo run --release -p strom-storage --example
//! cleaner_bench`. The workload is `scripts/bench/cleaner.sh`'s: MB megabytes of RECORD_BYTES
//! values over KEYS uniformly drawn keys (`key-N`), one idempotent producer, BATCH records a
//! batch (64 KiB batches as the Java producer's `batch.size`), SEGMENT_MB segments, no
//! compression (CODEC: none|gzip|snappy|lz4|zstd), TOMBSTONE_PCT percent tombstones.
//!
//! The log is written once into `$DIR/source` (kept between runs when KEEP=1, so that two builds
//! clean the very same bytes); each of ROUNDS rounds copies it to `$DIR/work`, then times
//! `cleanable` + `prepare_clean` + `run` (with the swaps) and prints MB/s of dirty bytes, with a
//! CRC32C of the cleaned `.log` files so that two builds can be checked for identical output.
//! All variables are environment variables; DIR defaults to a directory under /tmp, removed at
//! the end unless KEEP=1.

use std::path::{Path, PathBuf};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use strom_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use strom_storage::{AppendOrigin, FileCache, LogConfig, OffsetMap, Throttler, UnifiedLog};

/// A fixed "now" (the delete horizon stamped into batches with tombstones depends on it).
const NOW: i64 = 1_700_000_000_000;

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn config(segment_bytes: u64) -> LogConfig {
    LogConfig {
        compact: true,
        delete: false,
        segment_bytes,
        file_delete_delay_ms: 0,
        producer_id_expiration_ms: i64::MAX / 4,
        ..LogConfig::default()
    }
}

/// xorshift64*: reproducible keys without a dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

fn write_source(dir: &Path, segment_bytes: u64) {
    let mb: u64 = env("MB", 1000);
    let keys: u64 = env("KEYS", 100_000);
    let record_bytes: usize = env("RECORD_BYTES", 1000);
    let batch: usize = env("BATCH", 64);
    let tombstone_pct: u64 = env("TOMBSTONE_PCT", 0);
    let compression = match std::env::var("CODEC").as_deref() {
        Ok("gzip") => Compression::Gzip,
        Ok("snappy") => Compression::Snappy,
        Ok("lz4") => Compression::Lz4,
        Ok("zstd") => Compression::Zstd,
        _ => Compression::None,
    };
    let cache = FileCache::new(64);
    let mut log = UnifiedLog::open_in(&cache, dir, config(segment_bytes), 0, false).unwrap();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let total = mb * 1_000_000 / record_bytes as u64;
    let mut seq = 0i32;
    let mut written = 0u64;
    let t = Instant::now();
    while written < total {
        let n = (batch as u64).min(total - written) as usize;
        let records: Vec<Record> = (0..n)
            .map(|i| {
                let r = rng.next();
                let value = (r % 100 >= tombstone_pct).then(|| {
                    let mut v = vec![0u8; record_bytes];
                    for (j, b) in v.iter_mut().enumerate() {
                        *b = b'a' + ((r as usize + j * 7) % 26) as u8;
                    }
                    Bytes::from(v)
                });
                Record {
                    transactional: false,
                    control: false,
                    delete_horizon: false,
                    partition_leader_epoch: 0,
                    producer_id: 1000,
                    producer_epoch: 0,
                    timestamp_type: TimestampType::Creation,
                    offset: i as i64,
                    sequence: seq + i as i32,
                    timestamp: NOW - 60_000 + (written + i as u64) as i64 / 1000,
                    key: Some(Bytes::from(format!("key-{}", (r >> 8) % keys))),
                    value,
                    headers: Default::default(),
                }
            })
            .collect();
        let mut buf = BytesMut::new();
        RecordBatchEncoder::encode(
            &mut buf,
            &records,
            &RecordEncodeOptions {
                version: 2,
                compression,
            },
        )
        .unwrap();
        log.append_as_leader(&buf, 0, AppendOrigin::Client, NOW)
            .unwrap();
        seq += n as i32;
        written += n as u64;
    }
    // Everything but the (empty) active segment is cleanable.
    log.roll(NOW).unwrap();
    log.close().unwrap();
    eprintln!(
        "wrote {} records ({} batches of {batch}) in {:.1} s",
        written,
        written.div_ceil(batch as u64),
        t.elapsed().as_secs_f64()
    );
}

fn copy_dir(from: &Path, to: &Path) {
    let _ = std::fs::remove_dir_all(to);
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

/// CRC32C over the `.log` files in name order, and their total size.
fn logs_crc(dir: &Path) -> (u32, u64) {
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    names.sort();
    let mut crc = 0;
    let mut size = 0;
    for p in names {
        let b = std::fs::read(&p).unwrap();
        size += b.len() as u64;
        crc = crc32c::crc32c_append(crc, &b);
    }
    (crc, size)
}

fn main() {
    let segment_bytes: u64 = env::<u64>("SEGMENT_MB", 64) << 20;
    let rounds: usize = env("ROUNDS", 3);
    let map_bytes: usize = env("MAP_MB", 128) << 20;
    let keep = std::env::var("KEEP").is_ok_and(|v| v == "1");
    let dir = PathBuf::from(
        std::env::var("DIR")
            .unwrap_or_else(|_| format!("/tmp/strom-cleaner-bench.{}", std::process::id())),
    );
    let source = dir.join("source").join("ct-0");
    if !source.join("00000000000000000000.log").exists() {
        write_source(&source, segment_bytes);
    }
    let mut map = OffsetMap::new(map_bytes);
    let throttler = Throttler::new(f64::MAX);
    for round in 0..rounds {
        let work = dir.join("work").join("ct-0");
        copy_dir(&source, &work);
        let cache = FileCache::new(64);
        let mut log = UnifiedLog::open_in(&cache, &work, config(segment_bytes), 0, false).unwrap();
        let t = Instant::now();
        log.update_high_watermark(log.log_end_offset());
        let lso = log.last_stable_offset(log.log_end_offset());
        let to_clean = log.cleanable(None, lso, NOW).expect("compacted");
        let task = log.prepare_clean(&to_clean);
        let stats = task
            .run(&mut map, &throttler, NOW, &mut |g| log.replace_segments(g))
            .unwrap();
        let secs = t.elapsed().as_secs_f64();
        assert!(!stats.aborted);
        let (crc, size) = logs_crc(&work);
        println!(
            "round {round}: {:.1} MB dirty in {:.3} s = {:.1} MB/s (read {} written {} bytes, \
             {} -> {} messages, {} groups, end offset {}); cleaned .log files {size} bytes \
             crc32c {crc:08x}",
            to_clean.cleanable_bytes as f64 / 1e6,
            secs,
            to_clean.cleanable_bytes as f64 / 1e6 / secs,
            stats.bytes_read,
            stats.bytes_written,
            stats.messages_read,
            stats.messages_written,
            stats.groups_swapped,
            stats.end_offset,
        );
        drop(log);
        std::fs::remove_dir_all(dir.join("work")).unwrap();
    }
    if !keep {
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

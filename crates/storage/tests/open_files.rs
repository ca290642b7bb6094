//! Defect 5 (storage half): open file handles stay bounded however many logs and segments a
//! broker has. Kept alone in its own test binary so nothing else opens files meanwhile and the
//! process's descriptor count (`/proc/self/fd`) measures the logs only.

use std::path::Path;

use bytes::Bytes;
use strom_protocol::batch::BatchIter;
use strom_storage::file_cache::open_descriptor_count;
use strom_storage::{AppendOrigin, FileCache, LogConfig, UnifiedLog};

const T0: i64 = 1_700_000_000_000;
const LOGS: usize = 500;
const BATCHES_PER_LOG: i64 = 12;
const CAP: usize = 64;
/// Descriptors a log operation may hold outside the cache while it runs (the directory fsync,
/// the checkpoint and snapshot files, a header read at open), plus the test harness's own.
const SLACK: usize = 16;

fn batch(i: i64) -> Vec<u8> {
    strom_protocol::testing::plain_batch(
        (0..3).map(|_| (None, Some(Bytes::from(vec![b'v'; 40])))),
        T0 + i,
    )
}

fn config() -> LogConfig {
    LogConfig {
        // A few batches per segment: every log gets several segments.
        segment_bytes: 600,
        index_interval_bytes: 100,
        ..LogConfig::default()
    }
}

fn read_everything(log: &UnifiedLog) -> Vec<i64> {
    let data = log
        .read(0, usize::MAX / 2, log.log_end_offset(), false)
        .unwrap();
    BatchIter::new(&data.records)
        .map(|b| {
            let b = b.unwrap();
            b.validate().unwrap();
            b.base_offset()
        })
        .collect()
}

fn assert_bounded(baseline: usize, cache: &FileCache, what: &str) {
    let now = open_descriptor_count().expect("/proc/self/fd");
    assert!(cache.open_files() <= CAP, "{what}: cache over its cap");
    assert!(
        now <= baseline + CAP + SLACK,
        "{what}: {now} descriptors open (baseline {baseline}, cap {CAP})"
    );
}

fn open_all(cache: &std::sync::Arc<FileCache>, root: &Path, clean: bool) -> Vec<UnifiedLog> {
    (0..LOGS)
        .map(|i| {
            UnifiedLog::open_in(cache, &root.join(format!("t-{i}")), config(), 0, clean).unwrap()
        })
        .collect()
}

#[test]
fn five_hundred_logs_with_many_segments_stay_under_the_cap() {
    let root = tempfile::tempdir().unwrap();
    let cache = FileCache::new(CAP);
    let baseline = open_descriptor_count().expect("/proc/self/fd");
    let expected: Vec<i64> = (0..BATCHES_PER_LOG).map(|i| i * 3).collect();

    let mut logs = open_all(&cache, root.path(), false);
    for (n, log) in logs.iter_mut().enumerate() {
        for i in 0..BATCHES_PER_LOG {
            log.append_as_leader(&batch(i), 1, AppendOrigin::Client, T0 + i)
                .unwrap();
        }
        assert!(log.num_segments() >= 3, "log {n} has several segments");
        if n % 50 == 0 {
            assert_bounded(baseline, &cache, "while writing");
        }
    }
    assert_bounded(baseline, &cache, "after writing");
    for log in &logs {
        assert_eq!(read_everything(log), expected);
        // The lock-free reader shares the same handles.
        let r = log.reader().read(0, 1 << 20, i64::MAX, false).unwrap();
        assert_eq!(r.log_end_offset, BATCHES_PER_LOG * 3);
    }
    assert_bounded(baseline, &cache, "after reading");
    for log in &mut logs {
        log.flush().unwrap();
        log.close().unwrap();
    }
    assert_bounded(baseline, &cache, "after flush and close");
    drop(logs);
    assert_eq!(cache.open_files(), 0, "dropped logs release their handles");

    // A clean restart opens no inactive segment's files; a crash restart recovers through the
    // cache too. Both serve the same data.
    for clean in [true, false] {
        let logs = open_all(&cache, root.path(), clean);
        assert_bounded(baseline, &cache, "after reopening");
        for log in &logs {
            assert_eq!(log.log_end_offset(), BATCHES_PER_LOG * 3);
            assert_eq!(read_everything(log), expected);
        }
        assert_bounded(baseline, &cache, "after reading reopened logs");
    }
}

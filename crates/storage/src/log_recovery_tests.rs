//! Reopen, crash recovery and index rebuilding.

use super::*;
use crate::segment::{log_file_name, offset_index_file_name, time_index_file_name};

#[test]
fn reopen_after_clean_close_keeps_everything() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        segment_bytes: 500,
        index_interval_bytes: 100,
        ..LogConfig::default()
    };
    let mut log = open(dir.path(), config.clone());
    for i in 0..12 {
        append(&mut log, &batch_with(&[T0 + i, T0 + 2 * i], 20));
    }
    log.close().unwrap();
    let before = read_all(&log, 0);
    let leo = log.log_end_offset();
    let max = log.max_timestamp_and_offset().unwrap();
    let by_ts = log.fetch_offset_by_timestamp(T0 + 9).unwrap();
    let names = |d: &Path| {
        let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (
                    e.file_name().into_string().unwrap(),
                    std::fs::read(e.path()).unwrap(),
                )
            })
            .collect();
        v.sort();
        v
    };
    let files = names(dir.path());
    drop(log);
    let mut log = UnifiedLog::open(dir.path(), config.clone(), leo, true).unwrap();
    assert_eq!(names(dir.path()), files);
    assert_eq!(log.log_end_offset(), leo);
    assert_eq!(log.recovery_point(), leo);
    assert_eq!(read_all(&log, 0), before);
    assert_eq!(log.max_timestamp_and_offset().unwrap(), max);
    assert_eq!(log.fetch_offset_by_timestamp(T0 + 9).unwrap(), by_ts);
    assert_eq!(append(&mut log, &batch(1)).first_offset, leo);
    // An unclean open of intact files changes nothing either.
    drop(log);
    let log = UnifiedLog::open(dir.path(), config, 0, false).unwrap();
    assert_eq!(log.log_end_offset(), leo + 1);
    assert_eq!(offsets(&read_all(&log, 0)).len(), 13);
}

#[test]
fn recovery_drops_torn_batch() {
    let dir = tempfile::tempdir().unwrap();
    let b = batch(2);
    let mut log = open(dir.path(), LogConfig::default());
    for _ in 0..3 {
        append(&mut log, &b);
    }
    drop(log); // no close: an unclean shutdown
    let path = dir.path().join(log_file_name(0));
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len((b.len() * 3 - 7) as u64).unwrap();
    let mut log = UnifiedLog::open(dir.path(), LogConfig::default(), 0, false).unwrap();
    assert_eq!(log.log_end_offset(), 4);
    assert_eq!(log.recovery_point(), 4);
    assert_eq!(file_len(path), (b.len() * 2) as u64);
    assert_eq!(offsets(&read_all(&log, 0)), vec![(0, 1), (2, 3)]);
    assert_eq!(append(&mut log, &b).first_offset, 4);
}

#[test]
fn recovery_truncates_at_crc_failure_and_drops_later_segments() {
    let dir = tempfile::tempdir().unwrap();
    let b = batch(2);
    let config = LogConfig {
        segment_bytes: (b.len() * 3) as u64,
        ..LogConfig::default()
    };
    let mut log = open(dir.path(), config.clone());
    for _ in 0..5 {
        append(&mut log, &b);
    }
    assert_eq!(log.num_segments(), 2);
    drop(log);
    let path = dir.path().join(log_file_name(0));
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[b.len() + b.len() - 3] ^= 0x40; // inside the second batch's records
    std::fs::write(&path, &bytes).unwrap();
    // A clean shutdown with a consistent index does not re-check CRCs.
    let log = UnifiedLog::open(dir.path(), config.clone(), 10, true).unwrap();
    assert_eq!(log.log_end_offset(), 10);
    drop(log);
    let log = UnifiedLog::open(dir.path(), config, 0, false).unwrap();
    assert_eq!(log.log_end_offset(), 2);
    assert_eq!(log.num_segments(), 1);
    assert!(!dir.path().join(log_file_name(6)).exists());
    assert_eq!(file_len(path), b.len() as u64);
}

#[test]
fn recovery_starts_at_the_recovery_point_segment() {
    let dir = tempfile::tempdir().unwrap();
    let b = batch(2);
    let config = LogConfig {
        segment_bytes: (b.len() * 2) as u64,
        ..LogConfig::default()
    };
    let mut log = open(dir.path(), config.clone());
    for _ in 0..6 {
        append(&mut log, &b);
    }
    drop(log);
    // Corrupt a segment below the recovery point: left alone, as Kafka does.
    let first = dir.path().join(log_file_name(0));
    let mut bytes = std::fs::read(&first).unwrap();
    let n = bytes.len();
    bytes[n - 2] ^= 1;
    std::fs::write(&first, &bytes).unwrap();
    let last = dir.path().join(log_file_name(8));
    let f = std::fs::OpenOptions::new().write(true).open(&last).unwrap();
    f.set_len((b.len() + 10) as u64).unwrap();
    let log = UnifiedLog::open(dir.path(), config, 4, false).unwrap();
    assert_eq!(log.log_end_offset(), 10);
    assert_eq!(file_len(first), (b.len() * 2) as u64);
}

#[test]
fn missing_or_garbage_indexes_are_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        index_interval_bytes: 150,
        segment_bytes: 2000,
        ..LogConfig::default()
    };
    let mut log = open(dir.path(), config.clone());
    for i in 0..20 {
        append(&mut log, &batch_with(&[T0 + i * 10, T0 + i * 10 + 5], 25));
    }
    log.close().unwrap();
    let leo = log.log_end_offset();
    drop(log);
    let oi = dir.path().join(offset_index_file_name(0));
    let ti = dir.path().join(time_index_file_name(0));
    let (oi_bytes, ti_bytes) = (std::fs::read(&oi).unwrap(), std::fs::read(&ti).unwrap());
    assert!(oi_bytes.len() >= 16);
    let check = |label: &str| {
        let log = UnifiedLog::open(dir.path(), config.clone(), leo, true).unwrap();
        assert_eq!(log.log_end_offset(), leo, "{label}");
        assert_eq!(std::fs::read(&oi).unwrap(), oi_bytes, "{label}");
        assert_eq!(std::fs::read(&ti).unwrap(), ti_bytes, "{label}");
        assert_eq!(
            offsets(&read_all(&log, 17)).first().unwrap().0,
            16,
            "{label}"
        );
    };
    std::fs::remove_file(&oi).unwrap();
    check("missing offset index");
    std::fs::remove_file(&ti).unwrap();
    check("missing time index");
    std::fs::write(&oi, [0u8; 24]).unwrap();
    check("zeroed offset index");
    std::fs::write(&oi, &oi_bytes[..oi_bytes.len() - 3]).unwrap();
    check("odd-sized offset index");
    let mut past_end = oi_bytes.clone();
    past_end.extend_from_slice(&[0, 0, 1, 0, 0x7f, 0, 0, 0]);
    std::fs::write(&oi, &past_end).unwrap();
    check("entry past the end of the log");
    let mut wrong = oi_bytes.clone();
    wrong[3] += 1; // names an offset that is not the batch's last
    std::fs::write(&oi, &wrong).unwrap();
    // Only the last entry is verified against the log; make it the wrong one.
    let n = wrong.len();
    wrong[n - 5] += 1;
    std::fs::write(&oi, &wrong).unwrap();
    check("entry naming the wrong offset");
    std::fs::write(&ti, b"garbage garbage garbage!").unwrap();
    check("garbage time index");
}

#[test]
fn open_cleans_leftovers_and_recovers_compressed_batches() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), LogConfig::default());
    let ts: Vec<i64> = (0..50).map(|i| T0 + i * 7).collect();
    for codec in [
        Compression::Lz4,
        Compression::Gzip,
        Compression::Zstd,
        Compression::Snappy,
    ] {
        append(&mut log, &encode(&ts, 30, codec));
    }
    drop(log);
    std::fs::write(dir.path().join("00000000000000000500.index"), [0u8; 8]).unwrap();
    std::fs::write(dir.path().join("00000000000000000300.log.deleted"), b"x").unwrap();
    let log = UnifiedLog::open(dir.path(), LogConfig::default(), 0, false).unwrap();
    assert!(!dir.path().join("00000000000000000500.index").exists());
    assert!(!dir.path().join("00000000000000000300.log.deleted").exists());
    assert_eq!(log.log_end_offset(), 200);
    assert_eq!(offsets(&read_all(&log, 120)), vec![(100, 149), (150, 199)]);
    // Timestamp search decodes compressed batches.
    let found = log
        .fetch_offset_by_timestamp(T0 + 7 * 20 + 1)
        .unwrap()
        .unwrap();
    assert_eq!((found.offset, found.timestamp), (21, T0 + 7 * 21));
    let max = log.max_timestamp_and_offset().unwrap().unwrap();
    assert_eq!((max.offset, max.timestamp), (49, T0 + 7 * 49));
}

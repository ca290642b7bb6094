//! [`LogReader`]: the same answers as `UnifiedLog::read`, and safe against a concurrent writer
//! (appends, rolls, retention, truncation) without the writer's lock.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::*;

/// (base offset, last offset, leader epoch) of each batch, checking every one is whole and
/// passes its CRC.
fn batches(bytes: &[u8]) -> Vec<(i64, i64, i32)> {
    let mut it = BatchIter::new(bytes);
    let out = it
        .by_ref()
        .map(|b| {
            let b = b.expect("whole batch");
            b.validate().expect("valid batch");
            (b.base_offset(), b.last_offset(), b.partition_leader_epoch())
        })
        .collect();
    assert_eq!(it.valid_bytes(), bytes.len(), "only whole batches");
    out
}

fn small_segments(b: &[u8]) -> LogConfig {
    LogConfig {
        segment_bytes: (b.len() * 3) as u64,
        index_interval_bytes: 1,
        retention_ms: -1,
        ..LogConfig::default()
    }
}

/// The broker hands readers to fetch tasks and threads: this fails to compile if one of the
/// bounds is lost.
#[test]
fn reader_is_clone_send_sync_and_static() {
    fn assert_bounds<T: Clone + Send + Sync + 'static>() {}
    assert_bounds::<LogReader>();
}

#[test]
fn reader_answers_as_read_does() {
    let dir = tempfile::tempdir().unwrap();
    let b = batch(3);
    let mut log = open(dir.path(), small_segments(&b));
    for _ in 0..10 {
        append(&mut log, &b);
    }
    assert!(log.num_segments() > 2);
    let reader = log.reader();
    assert_eq!(reader.log_end_offset(), 30);
    assert_eq!(reader.log_start_offset(), 0);
    for start in [0, 1, 2, 3, 8, 9, 17, 29, 30] {
        for max_bytes in [0, 1, b.len(), b.len() + 1, b.len() * 4, 1 << 20] {
            for max_offset in [0, 3, 4, 14, 30, i64::MAX] {
                for min_one in [false, true] {
                    let want = log.read(start, max_bytes, max_offset, min_one).unwrap();
                    let got = reader.read(start, max_bytes, max_offset, min_one).unwrap();
                    assert_eq!(got, want, "{start} {max_bytes} {max_offset} {min_one}");
                }
            }
        }
    }
    for bad in [-1, 31] {
        assert!(matches!(
            reader.read(bad, 100, i64::MAX, true),
            Err(StorageError::OffsetOutOfRange { .. })
        ));
    }
    // DeleteRecords and retention are visible to an existing reader.
    log.maybe_increment_log_start_offset(10).unwrap();
    assert_eq!(reader.log_start_offset(), 10);
    assert!(matches!(
        reader.read(5, 100, i64::MAX, true),
        Err(StorageError::OffsetOutOfRange { .. })
    ));
    assert_eq!(
        batches(&reader.read(10, 1 << 20, i64::MAX, false).unwrap().records)[0].0,
        9
    );
    log.truncate_to(12).unwrap();
    assert_eq!(reader.log_end_offset(), 12);
    assert_eq!(
        reader.read(10, 1 << 20, i64::MAX, false).unwrap(),
        log.read(10, 1 << 20, i64::MAX, false).unwrap()
    );
    log.truncate_fully_and_start_at(100).unwrap();
    assert_eq!(
        (reader.log_start_offset(), reader.log_end_offset()),
        (100, 100)
    );
    assert!(reader
        .read(100, 100, i64::MAX, true)
        .unwrap()
        .records
        .is_empty());
}

#[test]
fn concurrent_appends_rolls_and_retention_never_show_a_torn_batch() {
    let dir = tempfile::tempdir().unwrap();
    let b = batch(2);
    let config = LogConfig {
        retention_bytes: (b.len() * 20) as i64,
        ..small_segments(&b)
    };
    let log = Arc::new(Mutex::new(open(dir.path(), config)));
    let reader = log.lock().reader();
    let done = AtomicBool::new(false);
    let reads = AtomicUsize::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..600 {
                let mut log = log.lock();
                append(&mut log, &b);
                if i % 25 == 0 {
                    log.delete_old_segments(T0).unwrap();
                }
            }
            done.store(true, Ordering::Release);
        });
        for t in 0..3 {
            let reader = reader.clone();
            let (done, reads, batch_len) = (&done, &reads, b.len());
            s.spawn(move || {
                let mut n = t as i64;
                while !done.load(Ordering::Acquire) {
                    let end = reader.log_end_offset();
                    let start = reader.log_start_offset();
                    let from = start + n % (end - start + 1);
                    n += 7;
                    let max_bytes = [batch_len * 3, 1 << 20][(n % 2) as usize];
                    match reader.read(from, max_bytes, i64::MAX, true) {
                        Ok(data) => {
                            let got = batches(&data.records);
                            // A prefix of the log from the batch holding `from`, contiguous,
                            // within the published end.
                            let mut expect = (from / 2) * 2;
                            for (base, last, _) in &got {
                                assert_eq!(*base, expect, "read from {from}");
                                assert!(*last < data.log_end_offset);
                                expect = last + 1;
                            }
                            if from < data.log_end_offset {
                                assert!(!got.is_empty(), "min_one_message read from {from}");
                            }
                        }
                        // Retention moved the start past `from` meanwhile.
                        Err(StorageError::OffsetOutOfRange { .. }) => {}
                        Err(e) => panic!("read from {from}: {e}"),
                    }
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    });
    assert!(reads.load(Ordering::Relaxed) > 0);
    let log = log.lock();
    assert_eq!(log.log_end_offset(), 1200);
    assert!(log.log_start_offset() > 0, "retention ran");
}

#[test]
fn truncated_ranges_are_never_served_after_truncate_returns() {
    let dir = tempfile::tempdir().unwrap();
    let b = batch(2);
    let log = Arc::new(Mutex::new(open(dir.path(), small_segments(&b))));
    let reader = log.lock().reader();
    // (cut offset, epoch of the data it cut) for every truncation done so far.
    let cuts: Mutex<Vec<(i64, i32)>> = Mutex::new(Vec::new());
    let done = AtomicBool::new(false);
    const ROUNDS: i32 = 150;
    std::thread::scope(|s| {
        s.spawn(|| {
            for round in 0..ROUNDS {
                let epoch = round + 1;
                let mut log = log.lock();
                for _ in 0..6 {
                    log.append_as_leader(&b, epoch, AppendOrigin::Client, T0)
                        .unwrap();
                }
                // Cut this round's last batches (and, every few rounds, earlier rounds' too).
                let back = if round % 5 == 4 { 10 } else { 4 };
                let cut = log.log_end_offset() - back;
                log.truncate_to(cut).unwrap();
                drop(log);
                cuts.lock().push((cut, epoch));
            }
            done.store(true, Ordering::Release);
        });
        for t in 0..3i64 {
            let reader = reader.clone();
            let (done, cuts) = (&done, &cuts);
            s.spawn(move || {
                let mut n = t;
                while !done.load(Ordering::Acquire) {
                    // Truncations that returned before this read starts.
                    let finished = cuts.lock().clone();
                    let end = reader.log_end_offset();
                    let from = n % (end + 1);
                    n += 5;
                    let data = match reader.read(from, 1 << 20, i64::MAX, false) {
                        Ok(data) => data,
                        // A truncation moved the end below `from` meanwhile.
                        Err(StorageError::OffsetOutOfRange { .. }) => continue,
                        Err(e) => panic!("read from {from}: {e}"),
                    };
                    for (base, last, epoch) in batches(&data.records) {
                        for &(cut, cut_epoch) in &finished {
                            assert!(
                                !(epoch <= cut_epoch && last >= cut),
                                "batch {base}..={last} of epoch {epoch} served after the cut \
                                 at {cut} (epoch {cut_epoch})"
                            );
                        }
                    }
                }
            });
        }
    });
    let log = log.lock();
    let survivors = batches(&read_all(&log, 0));
    assert_eq!(survivors.last().unwrap().1 + 1, log.log_end_offset());
}

/// File-range reads (which find where a byte limit falls from the offset index and a few batch
/// headers, never reading records) return exactly the greedy run of whole batches a reader of
/// the whole log would pick: from the batch holding the start offset, each batch below the max
/// offset while it fits, the first one whole with min-one-message. Batch sizes vary, the log
/// spans segments, and the offset index is dense, default (4 KiB) and so sparse it is empty.
#[test]
fn file_records_are_the_whole_batches_that_fit() {
    for index_interval_bytes in [1, 4096, 1 << 30] {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig {
            segment_bytes: 20_000,
            index_interval_bytes,
            retention_ms: -1,
            ..LogConfig::default()
        };
        let mut log = open(dir.path(), config);
        for i in 0..60usize {
            let n = 1 + i % 4;
            let ts: Vec<i64> = (0..n as i64).map(|j| T0 + j).collect();
            append(&mut log, &batch_with(&ts, [10, 700, 3000][i % 3]));
        }
        assert!(log.num_segments() > 3);
        let end = log.log_end_offset();
        let all = log.read(0, usize::MAX / 2, end, false).unwrap().records;
        // (base, last, position in `all`, size) of every batch.
        let mut model = Vec::new();
        let mut at = 0;
        for b in BatchIter::new(&all) {
            let b = b.unwrap();
            let size = b.bytes().len();
            model.push((b.base_offset(), b.last_offset(), at, size));
            at += size;
        }
        let reader = log.reader();
        for start in [0, 1, 5, 37, end / 2, end - 1, end] {
            for max_bytes in [0, 1, 100, 800, 3100, 5000, 9000, 25_000, 1 << 20] {
                for max_offset in [3, end / 3, end - 2, end, i64::MAX] {
                    for min_one in [false, true] {
                        let max = max_offset.min(end);
                        let mut want = Vec::new();
                        if start < max {
                            for &(base, last, pos, size) in model.iter().skip_while(|m| m.1 < start)
                            {
                                let _ = last;
                                if base >= max {
                                    break;
                                }
                                if want.len() + size > max_bytes {
                                    if want.is_empty() && min_one {
                                        want.extend_from_slice(&all[pos..pos + size]);
                                    }
                                    break;
                                }
                                want.extend_from_slice(&all[pos..pos + size]);
                            }
                        }
                        let ctx = format!(
                            "index {index_interval_bytes} start {start} max_bytes {max_bytes} \
                             max_offset {max_offset} min_one {min_one}"
                        );
                        let planned = reader
                            .read_file_records(start, max_bytes, max_offset, min_one, false)
                            .unwrap();
                        assert_eq!(planned.records.len(), want.len(), "{ctx}");
                        assert_eq!(&planned.records.read_all().unwrap()[..], &want[..], "{ctx}");
                        let read = reader.read(start, max_bytes, max_offset, min_one).unwrap();
                        assert_eq!(&read.records[..], &want[..], "{ctx}");
                    }
                }
            }
        }
    }
}

/// Ranges planned before a truncation are not served after it: reading them fails instead of
/// returning bytes that may be other batches now.
#[test]
fn file_records_planned_before_a_truncation_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let b = batch(3);
    let mut log = open(dir.path(), small_segments(&b));
    for _ in 0..6 {
        append(&mut log, &b);
    }
    let planned = log
        .reader()
        .read_file_records(0, 1 << 20, i64::MAX, false, false)
        .unwrap();
    assert!(planned.records.still_valid());
    assert_eq!(batches(&planned.records.read_all().unwrap()).len(), 6);
    log.truncate_to(9).unwrap();
    assert!(!planned.records.still_valid());
    // The truncated segments' files are gone (an I/O error) or the check refuses the bytes.
    assert!(planned.records.read_all().is_err());
}

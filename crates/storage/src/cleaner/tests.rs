//! The cleaner against real logs in temporary directories, mirroring Kafka's
//! `LogCleanerTest` cases. Time is injected (`now`), never slept.

use std::collections::BTreeMap;
use std::path::Path;

use bytes::{Bytes, BytesMut};
use strom_protocol::batch::{BatchIter, BatchView};
use strom_protocol::memory_records::{end_txn_marker, TxnResult};
use strom_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

use super::*;
use crate::{AppendOrigin, FileCache, LogConfig, UnifiedLog};

const T0: i64 = 1_700_000_000_000;
const RETENTION: i64 = 10_000;

type Kv<'a> = (Option<&'a str>, Option<&'a str>);

#[derive(Clone, Copy)]
struct Producer {
    pid: i64,
    epoch: i16,
    seq: i32,
    txn: bool,
}

const PLAIN: Producer = Producer {
    pid: -1,
    epoch: -1,
    seq: -1,
    txn: false,
};

fn encode(p: Producer, kvs: &[Kv<'_>], ts: i64, compression: Compression) -> Vec<u8> {
    let records: Vec<Record> = kvs
        .iter()
        .enumerate()
        .map(|(i, (k, v))| Record {
            transactional: p.txn,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: p.pid,
            producer_epoch: p.epoch,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: p.seq.wrapping_add(i as i32),
            timestamp: ts,
            key: k.map(|k| Bytes::from(k.to_string())),
            value: v.map(|v| Bytes::from(v.to_string())),
            headers: Default::default(),
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
    buf.to_vec()
}

fn config() -> LogConfig {
    LogConfig {
        compact: true,
        delete: false,
        delete_retention_ms: RETENTION,
        file_delete_delay_ms: 0,
        producer_id_expiration_ms: i64::MAX / 4,
        ..LogConfig::default()
    }
}

fn open(dir: &Path, config: LogConfig) -> UnifiedLog {
    UnifiedLog::open_in(&FileCache::new(64), dir, config, 0, false).unwrap()
}

fn append(log: &mut UnifiedLog, p: Producer, kvs: &[Kv<'_>], ts: i64) -> i64 {
    let b = encode(p, kvs, ts, Compression::None);
    log.append_as_leader(&b, 0, AppendOrigin::Client, ts)
        .unwrap()
        .first_offset
}

fn marker(log: &mut UnifiedLog, pid: i64, epoch: i16, result: TxnResult, ts: i64) -> i64 {
    let m = end_txn_marker(pid, epoch, 0, result, ts);
    log.append_as_leader(&m, 0, AppendOrigin::Coordinator, ts)
        .unwrap()
        .first_offset
}

/// One record per batch, `key=value` strings ("k=" for a tombstone of k), then a roll.
fn fill(log: &mut UnifiedLog, entries: &[&str]) {
    for e in entries {
        let (k, v) = e.split_once('=').unwrap();
        let v = (!v.is_empty()).then_some(v);
        append(log, PLAIN, &[(Some(k), v)], T0);
    }
    log.roll(T0).unwrap();
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Rec {
    offset: i64,
    key: Option<String>,
    value: Option<String>,
    control: bool,
}

fn s(b: &Option<Bytes>) -> Option<String> {
    b.as_ref().map(|b| String::from_utf8_lossy(b).into_owned())
}

/// Every batch of the log, as stored.
fn raw(log: &UnifiedLog) -> Vec<u8> {
    log.read(log.log_start_offset(), 1 << 30, log.log_end_offset(), true)
        .unwrap()
        .records
        .to_vec()
}

/// Every record of the log, decoded the way a client decodes it.
fn records(log: &UnifiedLog) -> Vec<Rec> {
    let bytes = raw(log);
    let mut out = Vec::new();
    for view in BatchIter::new(&bytes) {
        let view = view.unwrap();
        view.validate().unwrap();
        if view.records_count() == 0 {
            continue;
        }
        let set = RecordBatchDecoder::decode(&mut Bytes::copy_from_slice(view.bytes())).unwrap();
        for r in set.records {
            out.push(Rec {
                offset: r.offset,
                key: s(&r.key),
                value: s(&r.value),
                control: r.control,
            });
        }
    }
    out
}

fn data(log: &UnifiedLog) -> Vec<(i64, String, Option<String>)> {
    records(log)
        .into_iter()
        .filter(|r| !r.control)
        .map(|r| (r.offset, r.key.unwrap_or_default(), r.value))
        .collect()
}

/// The latest value per key (tombstones remove the key), what compaction must preserve.
fn latest(log: &UnifiedLog) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    for (_, k, v) in data(log) {
        match v {
            Some(v) => m.insert(k, v),
            None => m.remove(&k),
        };
    }
    m
}

/// (base offset, last offset, record count, delete horizon) of every batch.
fn batches(log: &UnifiedLog) -> Vec<(i64, i64, i32, Option<i64>)> {
    let bytes = raw(log);
    BatchIter::new(&bytes)
        .map(|v| {
            let v = v.unwrap();
            (
                v.base_offset(),
                v.last_offset(),
                v.records_count(),
                delete_horizon_ms(&v),
            )
        })
        .collect()
}

fn clean_with(
    log: &mut UnifiedLog,
    checkpoint: Option<i64>,
    now: i64,
    map: &mut OffsetMap,
    crash_at: Option<&str>,
) -> Result<CleanerStats, StorageError> {
    // The partition's HW is the log end: completed transactions stop holding the LSO.
    log.update_high_watermark(log.log_end_offset());
    let lso = log.last_stable_offset(log.log_end_offset());
    let to_clean = log.cleanable(checkpoint, lso, now).expect("compacted");
    let mut task = log.prepare_clean(&to_clean);
    task.set_crash_at(crash_at);
    let throttler = Throttler::new(f64::MAX);
    task.run(map, &throttler, now, &mut |g| log.replace_segments(g))
}

fn clean(log: &mut UnifiedLog, now: i64) -> CleanerStats {
    clean_with(log, None, now, &mut OffsetMap::new(1 << 20), None).unwrap()
}

fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".cleaned") || n.ends_with(".swap") || n.ends_with(".deleted"))
        .collect()
}

#[test]
fn keeps_the_latest_record_per_key_at_its_offset() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), config());
    fill(&mut log, &["a=1", "b=1", "a=2", "c=1"]);
    fill(&mut log, &["b=2", "a=3", "c=2"]);
    fill(&mut log, &["d=1"]);
    append(&mut log, PLAIN, &[(Some("a"), Some("active"))], T0);
    let before = latest(&log);
    let end = log.log_end_offset();
    let stats = clean(&mut log, T0);
    // Everything below the active segment (offset 8) was cleanable; one group.
    assert_eq!(stats.end_offset, 8);
    assert_eq!(stats.groups_swapped, 1);
    assert!(!stats.aborted);
    assert_eq!(
        data(&log),
        vec![
            (4, "b".into(), Some("2".into())),
            (5, "a".into(), Some("3".into())),
            (6, "c".into(), Some("2".into())),
            (7, "d".into(), Some("1".into())),
            (8, "a".into(), Some("active".into())),
        ]
    );
    assert_eq!(latest(&log), before);
    assert_eq!(log.log_end_offset(), end);
    assert_eq!(log.log_start_offset(), 0);
    assert_eq!(stats.messages_read, 8);
    assert_eq!(stats.messages_written, 4);
    // Untouched batches are copied byte for byte (no horizon, nothing removed).
    assert!(batches(&log).iter().all(|b| b.3.is_none()));
    // A fetch at a removed offset answers from the next batch.
    let at = log.read(1, 1 << 20, end, true).unwrap().records;
    assert_eq!(BatchView::parse(&at).unwrap().base_offset(), 4);
    let at = log.reader().read(0, 1 << 20, end, true).unwrap().records;
    assert_eq!(BatchView::parse(&at).unwrap().base_offset(), 4);
    assert!(leftovers(dir.path()).is_empty());
    // The segments are the cleaned one and the active one; both survive a reopen.
    assert_eq!(
        log.segments().map(|s| s.base_offset()).collect::<Vec<_>>(),
        vec![0, 8]
    );
    let expect = records(&log);
    drop(log);
    let log = open(dir.path(), config());
    assert_eq!(records(&log), expect);
    assert_eq!(log.log_end_offset(), end);
}

#[test]
fn records_without_a_key_are_dropped_and_the_round_keeps_its_last_batch() {
    let dir = tempfile::tempdir().unwrap();
    // Keyless records reach a compacted log only from before its policy became compact (a
    // compacted topic refuses them at produce).
    let mut log = open(
        dir.path(),
        LogConfig {
            compact: false,
            ..config()
        },
    );
    append(
        &mut log,
        PLAIN,
        &[(None, Some("x")), (Some("k"), Some("1"))],
        T0,
    );
    append(&mut log, PLAIN, &[(Some("k"), Some("2"))], T0);
    append(&mut log, PLAIN, &[(None, Some("y"))], T0);
    log.roll(T0).unwrap();
    log.update_config(config());
    let stats = clean(&mut log, T0);
    assert_eq!(stats.invalid_messages, 2);
    assert_eq!(data(&log), vec![(2, "k".into(), Some("2".into()))]);
    // The batch ending the cleaning round stays, emptied, so the log end is still known.
    assert_eq!(batches(&log), vec![(2, 2, 1, None), (3, 3, 0, None)]);
}

#[test]
fn tombstones_stay_until_the_delete_horizon() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), config());
    fill(&mut log, &["a=1", "b=1", "a=", "c=1"]);
    let now = T0 + 1_000;
    clean(&mut log, now);
    assert_eq!(
        data(&log),
        vec![
            (1, "b".into(), Some("1".into())),
            (2, "a".into(), None),
            (3, "c".into(), Some("1".into())),
        ]
    );
    // The tombstone's batch got the horizon stamped into its base timestamp (bit 6).
    let horizon = now + RETENTION;
    let b = batches(&log);
    assert_eq!(b.iter().find(|b| b.0 == 2).unwrap().3, Some(horizon));
    assert!(b.iter().filter(|b| b.0 != 2).all(|b| b.3.is_none()));
    // Before the horizon a later clean keeps it (and the horizon, not a new one).
    clean(&mut log, horizon - 1);
    assert_eq!(data(&log).len(), 3);
    assert_eq!(
        batches(&log).iter().find(|b| b.0 == 2).unwrap().3,
        Some(horizon)
    );
    // The record timestamps are still the producer's.
    let bytes = raw(&log);
    for v in BatchIter::new(&bytes) {
        let set = RecordBatchDecoder::decode(&mut Bytes::copy_from_slice(v.unwrap().bytes()));
        for r in set.unwrap().records {
            assert_eq!(r.timestamp, T0);
        }
    }
    // At the horizon it goes.
    clean(&mut log, horizon);
    assert_eq!(
        data(&log),
        vec![
            (1, "b".into(), Some("1".into())),
            (3, "c".into(), Some("1".into())),
        ]
    );
}

#[test]
fn aborted_transactions_go_and_markers_follow_kafkas_rules() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), config());
    let p1 = |seq| Producer {
        pid: 1,
        epoch: 0,
        seq,
        txn: true,
    };
    let p2 = Producer {
        pid: 2,
        epoch: 0,
        seq: 0,
        txn: true,
    };
    append(
        &mut log,
        p1(0),
        &[(Some("a"), Some("aborted")), (Some("x"), Some("aborted"))],
        T0,
    ); // 0-1
    append(&mut log, p2, &[(Some("b"), Some("committed"))], T0); // 2
    marker(&mut log, 1, 0, TxnResult::Abort, T0); // 3
    marker(&mut log, 2, 0, TxnResult::Commit, T0); // 4
    append(&mut log, p1(2), &[(Some("c"), Some("later"))], T0); // 5
    marker(&mut log, 1, 0, TxnResult::Commit, T0); // 6
    append(&mut log, PLAIN, &[(Some("b"), Some("plain"))], T0); // 7
    log.roll(T0).unwrap();
    assert_eq!(
        log.segments().next().unwrap().txn_index().entries().len(),
        1
    );
    let now = T0 + 1_000;
    clean(&mut log, now);
    // The aborted records are gone; pid 2's batch is its producer's last: kept empty.
    let recs = records(&log);
    let offsets: Vec<(i64, bool)> = recs.iter().map(|r| (r.offset, r.control)).collect();
    assert_eq!(
        offsets,
        vec![(3, true), (4, true), (5, false), (6, true), (7, false)]
    );
    assert!(batches(&log).contains(&(2, 2, 0, None)));
    // The abort marker stays (its transaction's records were seen this pass) and is indexed in
    // the cleaned segment; so does pid 2's commit (its batch was seen).
    let idx = log.segments().next().unwrap().txn_index().entries();
    assert_eq!(idx.len(), 1);
    assert_eq!((idx[0].producer_id, idx[0].last_offset), (1, 3));
    // Next pass: no record of the aborted transaction left, so its marker may go: it gets a
    // horizon first.
    clean(&mut log, now);
    let b = batches(&log);
    assert_eq!(
        b.iter().find(|b| b.0 == 3).unwrap().3,
        Some(now + RETENTION)
    );
    assert!(log
        .segments()
        .next()
        .unwrap()
        .txn_index()
        .entries()
        .is_empty());
    // After the horizon it is removed; pid 2's commit follows its (empty, still seen) batch.
    clean(&mut log, now + RETENTION);
    let offsets: Vec<i64> = records(&log).iter().map(|r| r.offset).collect();
    assert_eq!(offsets, vec![4, 5, 6, 7]);
    // A read_committed reader of the cleaned log sees no aborted data.
    assert!(data(&log).iter().all(|r| r.2.as_deref() != Some("aborted")));
}

#[test]
fn the_last_batch_of_a_producer_survives_and_dedup_works_after_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), config());
    let p = |seq| Producer {
        pid: 7,
        epoch: 3,
        seq,
        txn: false,
    };
    append(&mut log, p(0), &[(Some("a"), Some("1"))], T0); // 0
    append(
        &mut log,
        p(1),
        &[(Some("a"), Some("2")), (Some("b"), Some("1"))],
        T0,
    ); // 1-2
    append(
        &mut log,
        PLAIN,
        &[(Some("a"), Some("3")), (Some("b"), Some("2"))],
        T0,
    ); // 3-4
    log.roll(T0).unwrap();
    clean(&mut log, T0);
    // Producer 7's first batch is gone; its last one stays without records.
    assert_eq!(batches(&log), vec![(1, 2, 0, None), (3, 4, 2, None)]);
    let bytes = raw(&log);
    let empty = BatchView::parse(&bytes).unwrap();
    assert_eq!(
        (
            empty.producer_id(),
            empty.producer_epoch(),
            empty.base_sequence(),
            empty.last_sequence()
        ),
        (7, 3, 1, 2)
    );
    // Reopen without producer snapshots, so the state is replayed from the cleaned log.
    drop(log);
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "snapshot") {
            std::fs::remove_file(p).unwrap();
        }
    }
    let mut log = open(dir.path(), config());
    let end = log.log_end_offset();
    // A retry of the last batch is answered as the duplicate it is.
    let retry = encode(
        p(1),
        &[(Some("a"), Some("2")), (Some("b"), Some("1"))],
        T0,
        Compression::None,
    );
    let info = log
        .append_as_leader(&retry, 0, AppendOrigin::Client, T0)
        .unwrap();
    assert_eq!((info.first_offset, info.last_offset), (1, 2));
    assert_eq!(log.log_end_offset(), end);
    // The next sequence is accepted.
    assert_eq!(append(&mut log, p(3), &[(Some("c"), Some("1"))], T0), end);
}

#[test]
fn min_and_max_compaction_lag() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = LogConfig {
        min_compaction_lag_ms: 1_000,
        max_compaction_lag_ms: 60_000,
        ..config()
    };
    let mut log = open(dir.path(), cfg);
    append(&mut log, PLAIN, &[(Some("a"), Some("1"))], T0);
    append(&mut log, PLAIN, &[(Some("a"), Some("2"))], T0);
    log.roll(T0).unwrap();
    append(&mut log, PLAIN, &[(Some("a"), Some("3"))], T0 + 5_000);
    append(&mut log, PLAIN, &[(Some("a"), Some("4"))], T0 + 5_000);
    log.roll(T0).unwrap();
    append(&mut log, PLAIN, &[(Some("z"), Some("active"))], T0 + 5_000);
    let now = T0 + 5_500;
    let lso = log.log_end_offset();
    let c = log.cleanable(None, lso, now).unwrap();
    // The second segment is younger than the lag: uncleanable from its base on.
    assert_eq!((c.first_dirty_offset, c.first_uncleanable_offset), (0, 2));
    assert!(!c.needs_compaction_now);
    assert!(c.cleanable_bytes > 0 && c.clean_bytes == 0);
    assert!((c.cleanable_ratio - 1.0).abs() < 1e-9);
    assert!(c.should_clean());
    // The LSO bounds it too, rounded down to its segment.
    assert_eq!(
        log.cleanable(None, 1, now)
            .unwrap()
            .first_uncleanable_offset,
        0
    );
    // A checkpoint past the log end is reset to the log start.
    let reset = log.cleanable(Some(99), lso, now).unwrap();
    assert_eq!(
        (reset.first_dirty_offset, reset.reset_checkpoint),
        (0, true)
    );
    clean(&mut log, now);
    assert_eq!(
        data(&log),
        vec![
            (1, "a".into(), Some("2".into())),
            (2, "a".into(), Some("3".into())),
            (3, "a".into(), Some("4".into())),
            (4, "z".into(), Some("active".into())),
        ]
    );
    // Past max.compaction.lag.ms of the first batch, the log must be cleaned now.
    let late = log.cleanable(Some(2), lso, T0 + 66_000).unwrap();
    assert!(late.needs_compaction_now);
    assert_eq!(late.max_compaction_delay_ms, 1_000);
    // Not compacted: nothing to clean.
    log.update_config(LogConfig {
        compact: false,
        ..config()
    });
    assert!(log.cleanable(None, lso, now).is_none());
}

#[test]
fn a_small_map_cleans_part_of_the_log_and_the_next_run_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), config());
    let keys: Vec<String> = (0..12).map(|i| format!("k{i}=1")).collect();
    let keys2: Vec<String> = (0..12).map(|i| format!("k{i}=2")).collect();
    fill(
        &mut log,
        &keys.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    fill(
        &mut log,
        &keys2.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let before = latest(&log);
    // 8 slots, 7 usable: the map ends inside the first segment.
    let mut map = OffsetMap::new(8 * BYTES_PER_ENTRY);
    let first = clean_with(&mut log, None, T0, &mut map, None).unwrap();
    assert_eq!(first.end_offset, 7);
    assert!(first.map_messages_read >= 7);
    // Duplicates beyond the map's end are untouched.
    assert_eq!(data(&log).len(), 24);
    let mut checkpoint = first.end_offset;
    for _ in 0..10 {
        if checkpoint >= 24 {
            break;
        }
        let s = clean_with(&mut log, Some(checkpoint), T0, &mut map, None).unwrap();
        assert!(s.end_offset > checkpoint);
        checkpoint = s.end_offset;
    }
    assert_eq!(checkpoint, 24);
    assert_eq!(latest(&log), before);
    let offsets: Vec<i64> = data(&log).iter().map(|r| r.0).collect();
    assert_eq!(offsets, (12..24).collect::<Vec<_>>());
}

#[test]
fn an_empty_map_is_an_error_not_a_loop() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), config());
    fill(&mut log, &["a=1"]);
    let mut map = OffsetMap::new(BYTES_PER_ENTRY);
    assert!(clean_with(&mut log, None, T0, &mut map, None).is_err());
    assert!(leftovers(dir.path()).is_empty());
}

#[test]
fn a_reader_holding_the_old_segments_reads_the_old_files() {
    let dir = tempfile::tempdir().unwrap();
    let cache = FileCache::new(16);
    let cfg = LogConfig {
        file_delete_delay_ms: 60_000,
        ..config()
    };
    let mut log = UnifiedLog::open_in(&cache, dir.path(), cfg, 0, false).unwrap();
    fill(&mut log, &["a=1", "a=2", "a=3", "b=1"]);
    let end = log.log_end_offset();
    let old = log.reader_snapshot();
    let before = crate::reader::read_segments(&old, 0, end, 0, 1 << 20, end, true, false)
        .unwrap()
        .records;
    clean(&mut log, T0);
    assert_eq!(data(&log).len(), 2);
    // Every cached descriptor is evicted, so the old segment's file is opened again by name:
    // it must be the renamed old file, not the new one now at the old name.
    let others: Vec<_> = (0..40)
        .map(|i| {
            crate::file_cache::FileSlot::create(&cache, dir.path().join(format!("x{i}"))).unwrap()
        })
        .collect();
    let again = crate::reader::read_segments(&old, 0, end, 0, 1 << 20, end, true, false)
        .unwrap()
        .records;
    assert_eq!(again, before);
    drop(others);
    // Once the old files are deleted, the old snapshot fails (readers retry on a fresh one).
    let due = log.take_due_files(i64::MAX);
    assert!(!due.is_empty());
    crate::remove_deleted_files(&due).unwrap();
    assert!(log.reader().read(0, 1 << 20, end, true).is_ok());
}

#[test]
fn compressed_batches_are_recompressed_with_their_codec() {
    for codec in [
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path(), config());
        let b = encode(
            PLAIN,
            &[
                (Some("a"), Some("1")),
                (Some("b"), Some("1")),
                (Some("c"), Some("1")),
            ],
            T0,
            codec,
        );
        log.append_as_leader(&b, 0, AppendOrigin::Client, T0)
            .unwrap();
        append(&mut log, PLAIN, &[(Some("b"), Some("2"))], T0);
        log.roll(T0).unwrap();
        clean(&mut log, T0);
        assert_eq!(
            data(&log),
            vec![
                (0, "a".into(), Some("1".into())),
                (2, "c".into(), Some("1".into())),
                (3, "b".into(), Some("2".into())),
            ]
        );
        let bytes = raw(&log);
        let v = BatchView::parse(&bytes).unwrap();
        v.validate().unwrap();
        assert_eq!(
            v.compression().name(),
            BatchView::parse(&b).unwrap().compression().name()
        );
        assert_eq!(
            (v.base_offset(), v.last_offset(), v.records_count()),
            (0, 2, 2)
        );
    }
}

#[test]
fn a_crash_at_any_swap_step_loses_and_duplicates_nothing() {
    for step in CRASH_STEPS {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path(), config());
        fill(&mut log, &["a=1", "b=1", "a=2"]);
        fill(&mut log, &["c=1", "b=2", "a=3"]);
        append(&mut log, PLAIN, &[(Some("d"), Some("active"))], T0);
        let original = data(&log);
        let expect_latest = latest(&log);
        let end = log.log_end_offset();
        let err = clean_with(&mut log, None, T0, &mut OffsetMap::new(1 << 20), Some(step));
        assert!(err.is_err(), "{step}");
        drop(log);
        let log = open(dir.path(), config());
        let after = data(&log);
        assert_eq!(latest(&log), expect_latest, "{step}");
        assert_eq!(log.log_end_offset(), end, "{step}");
        // Offsets strictly increase and every record is one of the originals, unchanged.
        assert!(
            after.windows(2).all(|w| w[0].0 < w[1].0),
            "{step}: {after:?}"
        );
        assert!(after.iter().all(|r| original.contains(r)), "{step}");
        if step == "after_cleaned" {
            assert_eq!(after, original, "{step}: the clean is undone");
        } else {
            let offsets: Vec<i64> = after.iter().map(|r| r.0).collect();
            assert_eq!(offsets, vec![3, 4, 5, 6], "{step}: the swap is finished");
        }
        assert!(leftovers(dir.path()).is_empty(), "{step}");
        // The recovered log cleans again normally.
        let mut log = log;
        clean(&mut log, T0);
        assert_eq!(latest(&log), expect_latest);
    }
}

#[test]
fn a_swap_is_refused_when_the_log_changed() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), config());
    fill(&mut log, &["a=1", "a=2"]);
    fill(&mut log, &["a=3"]);
    let lso = log.log_end_offset();
    let to_clean = log.cleanable(None, lso, T0).unwrap();
    let task = log.prepare_clean(&to_clean);
    // Retention takes the first segment meanwhile.
    log.maybe_increment_log_start_offset(2).unwrap();
    let stats = task
        .run(
            &mut OffsetMap::new(1 << 20),
            &Throttler::new(f64::MAX),
            T0,
            &mut |g| log.replace_segments(g),
        )
        .unwrap();
    assert!(stats.aborted);
    assert_eq!(stats.groups_swapped, 0);
    assert!(leftovers(dir.path()).is_empty());
    assert_eq!(data(&log), vec![(2, "a".into(), Some("3".into()))]);
}

#[test]
fn groups_respect_size_and_offset_range() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), config());
    for _ in 0..4 {
        fill(&mut log, &["a=1"]);
    }
    let to_clean = log.cleanable(None, log.log_end_offset(), T0).unwrap();
    let task = log.prepare_clean(&to_clean);
    let size = task.segments[0].size;
    let g = group_segments_by_size(&task.segments, size * 2, 1 << 20, 4);
    assert_eq!(g, vec![0..2, 2..4]);
    let g = group_segments_by_size(&task.segments, size * 4, 1 << 20, 4);
    assert_eq!(g, vec![0..4]);
}

type Data = Vec<(i64, String, Option<String>)>;

/// Fills a log whose clean changes it, for the crash tests.
fn crash_fixture(dir: &Path) -> (Data, BTreeMap<String, String>) {
    let mut log = open(dir, config());
    fill(&mut log, &["a=1", "b=1", "a=2"]);
    fill(&mut log, &["c=1", "b=2", "a=3"]);
    append(&mut log, PLAIN, &[(Some("d"), Some("active"))], T0);
    log.close().unwrap();
    (data(&log), latest(&log))
}

const CHILD_DIR_ENV: &str = "STROM_CLEANER_TEST_DIR";

#[test]
fn the_process_aborting_at_each_swap_step_recovers() {
    use std::os::unix::process::ExitStatusExt;
    for step in CRASH_STEPS {
        let dir = tempfile::tempdir().unwrap();
        let (original, expect_latest) = crash_fixture(dir.path());
        // The child is this test binary running `crash_child`, which cleans the log with
        // STROM_CLEANER_CRASH_AT set: it must die by SIGABRT at the step.
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "cleaner::tests::crash_child",
                "--ignored",
                "--test-threads=1",
            ])
            .env(CRASH_ENV, step)
            .env(CHILD_DIR_ENV, dir.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        assert_eq!(status.signal(), Some(6), "{step}: {status:?}");
        let log = open(dir.path(), config());
        let after = data(&log);
        assert_eq!(latest(&log), expect_latest, "{step}");
        assert_eq!(log.log_end_offset(), 7, "{step}");
        assert!(after.windows(2).all(|w| w[0].0 < w[1].0), "{step}");
        assert!(after.iter().all(|r| original.contains(r)), "{step}");
        if step == "after_cleaned" {
            assert_eq!(after, original, "{step}");
        } else {
            assert_eq!(after.len(), 4, "{step}");
        }
        assert!(leftovers(dir.path()).is_empty(), "{step}");
    }
}

#[test]
#[ignore = "the child process of the_process_aborting_at_each_swap_step_recovers"]
fn crash_child() {
    let Ok(dir) = std::env::var(CHILD_DIR_ENV) else {
        return;
    };
    // The abort is expected: no core file.
    let _ = rustix::process::setrlimit(
        rustix::process::Resource::Core,
        rustix::process::Rlimit {
            current: Some(0),
            maximum: Some(0),
        },
    );
    let mut log =
        UnifiedLog::open_in(&FileCache::new(64), Path::new(&dir), config(), 0, true).unwrap();
    let _ = clean_with(&mut log, None, T0, &mut OffsetMap::new(1 << 20), None);
    panic!("the failpoint did not abort");
}

#[test]
fn the_cleaner_types_cross_threads() {
    fn send<T: Send>() {}
    fn shared<T: Send + Sync>() {}
    send::<CleanTask>();
    send::<CleanedGroup>();
    send::<OffsetMap>();
    send::<CleanerStats>();
    shared::<Throttler>();
    shared::<LogToClean>();
}

#[test]
fn a_producers_last_marker_keeps_its_epoch_through_cleaning() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), config());
    let p = Producer {
        pid: 4,
        epoch: 0,
        seq: 0,
        txn: true,
    };
    append(&mut log, p, &[(Some("a"), Some("aborted"))], T0); // 0
                                                              // The coordinator aborts with a bumped epoch (fencing): the producer has no data batch
                                                              // of its current epoch, so its marker is what must survive.
    marker(&mut log, 4, 1, TxnResult::Abort, T0); // 1
    append(&mut log, PLAIN, &[(Some("a"), Some("x"))], T0); // 2
    log.roll(T0).unwrap();
    assert_eq!(log.producer_state().producers()[&4].producer_epoch, 1);
    let now = T0 + 1_000;
    for t in [now, now, now + RETENTION, now + RETENTION] {
        clean(&mut log, t);
    }
    let bytes = raw(&log);
    let first = BatchView::parse(&bytes).unwrap();
    assert!(first.is_control());
    assert_eq!((first.base_offset(), first.records_count()), (1, 0));
    assert_eq!((first.producer_id(), first.producer_epoch()), (4, 1));
    assert_eq!(data(&log), vec![(2, "a".into(), Some("x".into()))]);
    // The producer's epoch survives a restart (from its snapshot: as in Kafka, replaying an
    // emptied control batch restores nothing, its header only keeps the offsets and epoch).
    let mut log = log;
    log.close().unwrap();
    drop(log);
    let log = UnifiedLog::open_in(&FileCache::new(64), dir.path(), config(), 0, true).unwrap();
    assert_eq!(log.producer_state().producers()[&4].producer_epoch, 1);
}

#[test]
fn snapshots_of_merged_segments_go_with_them() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), config());
    fill(&mut log, &["a=1", "b=1"]);
    fill(&mut log, &["a=2", "b=2"]);
    fill(&mut log, &["a=3"]);
    append(&mut log, PLAIN, &[(Some("a"), Some("active"))], T0);
    let snapshots = |dir: &Path| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".snapshot"))
            .collect();
        v.sort();
        v
    };
    // A snapshot at each roll: at 2, 4 and 5.
    assert_eq!(
        snapshots(dir.path()).len(),
        3,
        "{:?}",
        snapshots(dir.path())
    );
    let stats = clean(&mut log, T0);
    assert_eq!(stats.groups_swapped, 1);
    assert_eq!(
        log.segments().map(|s| s.base_offset()).collect::<Vec<_>>(),
        vec![0, 5]
    );
    log.delete_due_files(i64::MAX).unwrap();
    // The segments at 2 and 4 were merged into 0: their snapshots left with them; the
    // snapshot at the active segment's base stays.
    assert_eq!(snapshots(dir.path()), vec![format!("{:020}.snapshot", 5)]);
    assert_eq!(log.producer_state().snapshot_offsets(), vec![5]);
    assert!(leftovers(dir.path()).is_empty());
}

use super::*;
use crate::config::TimestampType;
use crate::segment::{log_file_name, offset_index_file_name, time_index_file_name};
use bytes::{Bytes, BytesMut};
use strom_protocol::batch::{BatchIter, CRC_OFFSET, MAGIC_OFFSET};
use strom_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType as RecordTs,
};

const T0: i64 = 1_700_000_000_000;

#[path = "log_recovery_tests.rs"]
mod recovery;

#[path = "log_reader_tests.rs"]
mod reader;

#[path = "log_delete_tests.rs"]
mod delete;

#[path = "log_txn_tests.rs"]
mod txn;

fn batch_with(timestamps: &[i64], value_len: usize) -> Vec<u8> {
    encode(timestamps, value_len, Compression::None)
}

fn encode(timestamps: &[i64], value_len: usize, compression: Compression) -> Vec<u8> {
    let records: Vec<Record> = timestamps
        .iter()
        .enumerate()
        .map(|(i, &ts)| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            // Idempotence off (the encoder wants contiguous sequences to build one batch): these
            // tests are about the log, not producer state.
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: RecordTs::Creation,
            offset: i as i64,
            sequence: i as i32,
            timestamp: ts,
            key: None,
            value: Some(Bytes::from(vec![b'x'; value_len])),
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

/// `n` records with timestamps T0, T0+1, ...
fn batch(n: usize) -> Vec<u8> {
    let ts: Vec<i64> = (0..n as i64).map(|i| T0 + i).collect();
    batch_with(&ts, 10)
}

/// (base offset, last offset) of each batch in `bytes`, checking every one is intact.
fn offsets(bytes: &[u8]) -> Vec<(i64, i64)> {
    let mut it = BatchIter::new(bytes);
    let out = it
        .by_ref()
        .map(|b| {
            let b = b.unwrap();
            b.validate().unwrap();
            (b.base_offset(), b.last_offset())
        })
        .collect();
    assert_eq!(it.valid_bytes(), bytes.len());
    out
}

fn open(dir: &Path, config: LogConfig) -> UnifiedLog {
    UnifiedLog::open(dir, config, 0, true).unwrap()
}

fn append(log: &mut UnifiedLog, records: &[u8]) -> LogAppendInfo {
    log.append_as_leader(records, 3, AppendOrigin::Client, T0)
        .unwrap()
}

fn read_all(log: &UnifiedLog, from: i64) -> Bytes {
    log.read(from, usize::MAX / 2, log.log_end_offset(), false)
        .unwrap()
        .records
}

fn file_len(path: PathBuf) -> u64 {
    std::fs::metadata(path).unwrap().len()
}

#[test]
fn append_and_read_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), LogConfig::default());
    let info = append(&mut log, &batch(3));
    assert_eq!(
        (info.first_offset, info.last_offset, info.num_messages),
        (0, 2, 3)
    );
    assert_eq!(info.max_timestamp, T0 + 2);
    assert_eq!(info.log_append_time, -1);
    // A leader append is one batch, as Kafka's `LogValidator` insists.
    let mut two = batch(2);
    two.extend(batch(1));
    assert!(matches!(
        log.append_as_leader(&two, 3, AppendOrigin::Client, T0),
        Err(StorageError::InvalidRecord(_))
    ));
    let info = append(&mut log, &batch(2));
    assert_eq!((info.first_offset, info.last_offset), (3, 4));
    assert_eq!(info.valid_bytes, batch(2).len());
    append(&mut log, &batch(1));
    assert_eq!(log.log_end_offset(), 6);
    let all = read_all(&log, 0);
    assert_eq!(offsets(&all), vec![(0, 2), (3, 4), (5, 5)]);
    for b in BatchIter::new(&all) {
        assert_eq!(b.unwrap().partition_leader_epoch(), 3);
    }
    // The file is exactly the batches.
    assert_eq!(
        std::fs::read(dir.path().join(log_file_name(0))).unwrap(),
        all.to_vec()
    );
    // Starting mid-batch returns that whole batch.
    assert_eq!(offsets(&read_all(&log, 4)), vec![(3, 4), (5, 5)]);
    assert!(read_all(&log, 6).is_empty());
    // Records decode with the assigned offsets.
    let sets = strom_protocol::records::RecordBatchDecoder::decode_all(&mut &all[..]).unwrap();
    let offs: Vec<i64> = sets
        .iter()
        .flat_map(|s| s.records.iter().map(|r| r.offset))
        .collect();
    assert_eq!(offs, vec![0, 1, 2, 3, 4, 5]);
}

#[test]
fn read_limits_max_bytes_first_batch_and_high_watermark() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), LogConfig::default());
    let b = batch(2);
    let size = b.len();
    for _ in 0..4 {
        append(&mut log, &b);
    }
    let r = |start, max_bytes, max_offset, min_one| {
        offsets(
            &log.read(start, max_bytes, max_offset, min_one)
                .unwrap()
                .records,
        )
    };
    assert_eq!(r(0, size * 2 + size / 2, 8, false), vec![(0, 1), (2, 3)]);
    assert_eq!(r(0, size - 1, 8, true), vec![(0, 1)]);
    assert_eq!(r(0, size - 1, 8, false), vec![]);
    assert_eq!(r(2, 0, 8, false), vec![]);
    // High watermark: a batch whose base offset is >= max_offset is never returned.
    assert_eq!(r(0, 1 << 20, 5, false), vec![(0, 1), (2, 3), (4, 5)]);
    assert_eq!(r(0, 1 << 20, 4, false), vec![(0, 1), (2, 3)]);
    assert_eq!(r(4, 1 << 20, 4, true), vec![]);
    let info = log.read(3, 1 << 20, 8, false).unwrap();
    assert_eq!((info.log_start_offset, info.log_end_offset), (0, 8));
}

#[test]
fn offset_out_of_range() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), LogConfig::default());
    append(&mut log, &batch(2));
    assert!(matches!(
        log.read(3, 100, 2, false),
        Err(StorageError::OffsetOutOfRange {
            requested: 3,
            log_start: 0,
            log_end: 2
        })
    ));
    assert!(log.read(2, 100, 2, false).unwrap().records.is_empty());
    log.maybe_increment_log_start_offset(1).unwrap();
    assert!(matches!(
        log.read(0, 100, 2, false),
        Err(StorageError::OffsetOutOfRange { .. })
    ));
    assert_eq!(offsets(&read_all(&log, 1)), vec![(0, 1)]);
    assert!(log.maybe_increment_log_start_offset(3).is_err());
}

#[test]
fn rolls_by_size_and_reads_across_segments() {
    let dir = tempfile::tempdir().unwrap();
    let b = batch(2);
    let config = LogConfig {
        segment_bytes: (b.len() * 2) as u64,
        ..LogConfig::default()
    };
    let mut log = open(dir.path(), config);
    for _ in 0..5 {
        append(&mut log, &b);
    }
    assert_eq!(log.num_segments(), 3);
    let bases: Vec<i64> = log.segments().map(|s| s.base_offset()).collect();
    assert_eq!(bases, vec![0, 4, 8]);
    for base in bases {
        assert!(dir.path().join(format!("{base:020}.log")).exists());
        assert!(dir.path().join(format!("{base:020}.index")).exists());
        assert!(dir.path().join(format!("{base:020}.timeindex")).exists());
    }
    assert_eq!(log.size_in_bytes(), (b.len() * 5) as u64);
    let expect: Vec<(i64, i64)> = (0..5).map(|i| (i * 2, i * 2 + 1)).collect();
    assert_eq!(offsets(&read_all(&log, 0)), expect);
    assert_eq!(offsets(&read_all(&log, 5)), expect[2..].to_vec());
    // Byte limits still apply across the boundary.
    let r = log.read(2, b.len() * 2, 10, false).unwrap();
    assert_eq!(offsets(&r.records), vec![(2, 3), (4, 5)]);
    // Rolled segments got their max timestamp into the time index.
    let first = log.segments().next().unwrap();
    assert_eq!(first.time_index().last_entry().unwrap().timestamp, T0 + 1);
}

#[test]
fn rolls_by_segment_ms_and_explicitly() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        segment_ms: 1000,
        ..LogConfig::default()
    };
    let mut log = open(dir.path(), config);
    append(&mut log, &batch_with(&[T0], 10));
    append(&mut log, &batch_with(&[T0 + 1000], 10));
    assert_eq!(log.num_segments(), 1);
    append(&mut log, &batch_with(&[T0 + 1001], 10));
    assert_eq!(log.num_segments(), 2);
    assert_eq!(log.segments().last().unwrap().base_offset(), 2);
    log.roll(T0).unwrap();
    assert_eq!(log.num_segments(), 3);
    // Rolling an empty active segment does nothing.
    log.roll(T0).unwrap();
    assert_eq!(log.num_segments(), 3);
    assert_eq!(offsets(&read_all(&log, 0)), vec![(0, 0), (1, 1), (2, 2)]);
}

/// Without record timestamps `segment.ms` counts from the segment's creation, on the `now_ms`
/// passed to the roll and the appends (Kafka's `timeWaitedForRoll`, rolling when over the limit).
#[test]
fn rolls_by_segment_ms_from_creation_without_timestamps() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        segment_ms: 1000,
        ..LogConfig::default()
    };
    let mut log = open(dir.path(), config);
    append(&mut log, &batch_with(&[T0], 10));
    log.roll(T0).unwrap();
    let untimed = batch_with(&[-1], 10);
    let append_at = |log: &mut UnifiedLog, now: i64| {
        log.append_as_leader(&untimed, 3, AppendOrigin::Client, now)
            .unwrap();
    };
    append_at(&mut log, T0 + 1);
    append_at(&mut log, T0 + 1000);
    assert_eq!(log.num_segments(), 2, "exactly segment.ms after creation");
    append_at(&mut log, T0 + 1001);
    assert_eq!(log.num_segments(), 3);
    assert_eq!(log.segments().last().unwrap().base_offset(), 3);
}

#[test]
fn rolls_when_index_full() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        index_interval_bytes: 0,
        // Three offset-index entries, two time-index entries.
        segment_index_bytes: 24,
        ..LogConfig::default()
    };
    let mut log = open(dir.path(), config);
    for _ in 0..5 {
        // Same timestamp every time: the time index never grows past one entry.
        append(&mut log, &batch(1));
    }
    // Entries for batches 2, 3 and 4 (the first batch of a segment never gets one), then full.
    assert_eq!(log.num_segments(), 2);
    assert_eq!(file_len(dir.path().join(offset_index_file_name(0))), 24);
    assert_eq!(file_len(dir.path().join(time_index_file_name(0))), 12);
    assert_eq!(log.segments().last().unwrap().base_offset(), 4);
    // A full time index rolls too.
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        index_interval_bytes: 0,
        segment_index_bytes: 16,
        ..LogConfig::default()
    };
    let mut log = open(dir.path(), config);
    for i in 0..3 {
        append(&mut log, &batch_with(&[T0 + i], 10));
    }
    assert_eq!(log.segments().last().unwrap().base_offset(), 2);
}

#[test]
fn sparse_index_entries_point_at_batches() {
    let dir = tempfile::tempdir().unwrap();
    let b = batch(3);
    let size = b.len();
    let config = LogConfig {
        index_interval_bytes: (size + size / 2) as u32,
        ..LogConfig::default()
    };
    let mut log = open(dir.path(), config);
    for _ in 0..7 {
        append(&mut log, &b);
    }
    // Kafka's rule: an entry for a batch once more than index_interval_bytes were written
    // since the last one, keyed by the batch's last offset, pointing at its position.
    let raw = std::fs::read(dir.path().join(offset_index_file_name(0))).unwrap();
    let entries: Vec<(i32, i32)> = raw
        .chunks(8)
        .map(|c| {
            (
                i32::from_be_bytes(c[0..4].try_into().unwrap()),
                i32::from_be_bytes(c[4..8].try_into().unwrap()),
            )
        })
        .collect();
    let s = size as i32;
    assert_eq!(entries, vec![(8, 2 * s), (14, 4 * s), (20, 6 * s)]);
    let seg = log.segments().next().unwrap();
    assert_eq!(seg.offset_index().lookup(13).position, 2 * s as u32);
    for start in 0..21 {
        let got = offsets(&read_all(&log, start));
        assert_eq!(got[0].0, start / 3 * 3, "start {start}");
    }
    // Time index entries go with offset-index entries: (max timestamp so far, its offset).
    let raw = std::fs::read(dir.path().join(time_index_file_name(0))).unwrap();
    assert_eq!(raw.len(), 12);
    assert_eq!(i64::from_be_bytes(raw[0..8].try_into().unwrap()), T0 + 2);
    assert_eq!(i32::from_be_bytes(raw[8..12].try_into().unwrap()), 2);
}

#[test]
fn offset_by_timestamp() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        index_interval_bytes: 1,
        segment_bytes: 400,
        ..LogConfig::default()
    };
    let mut log = open(dir.path(), config);
    for i in 0..10 {
        let t = T0 + i * 100;
        append(&mut log, &batch_with(&[t, t + 10, t + 20], 30));
    }
    assert!(log.num_segments() > 2);
    let at = |log: &UnifiedLog, ts| {
        log.fetch_offset_by_timestamp(ts)
            .unwrap()
            .map(|t: TimestampAndOffset| (t.offset, t.timestamp))
    };
    assert_eq!(at(&log, 0), Some((0, T0)));
    assert_eq!(at(&log, T0), Some((0, T0)));
    assert_eq!(at(&log, T0 + 1), Some((1, T0 + 10)));
    assert_eq!(at(&log, T0 + 515), Some((17, T0 + 520)));
    assert_eq!(at(&log, T0 + 521), Some((18, T0 + 600)));
    assert_eq!(at(&log, T0 + 920), Some((29, T0 + 920)));
    assert_eq!(at(&log, T0 + 921), None);
    let found = log.fetch_offset_by_timestamp(T0 + 300).unwrap().unwrap();
    assert_eq!(found.leader_epoch, Some(3));
    let latest = log
        .fetch_offset_by_timestamp(LATEST_TIMESTAMP)
        .unwrap()
        .unwrap();
    assert_eq!(latest.offset, 30);
    // Records below the log start offset are not answers.
    log.maybe_increment_log_start_offset(4).unwrap();
    assert_eq!(at(&log, T0), Some((4, T0 + 110)));
    let earliest = log
        .fetch_offset_by_timestamp(EARLIEST_TIMESTAMP)
        .unwrap()
        .unwrap();
    assert_eq!(earliest.offset, 4);
}

#[test]
fn max_timestamp_and_offset_finds_the_record() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        segment_bytes: 300,
        ..LogConfig::default()
    };
    let mut log = open(dir.path(), config);
    assert_eq!(log.max_timestamp_and_offset().unwrap(), None);
    append(&mut log, &batch_with(&[T0, T0 + 5, T0 + 1], 30));
    append(
        &mut log,
        &batch_with(&[T0 + 50, T0 + 90, T0 + 90, T0 + 2], 30),
    );
    append(&mut log, &batch_with(&[T0 + 3], 30));
    assert!(log.num_segments() >= 2);
    let max = log.max_timestamp_and_offset().unwrap().unwrap();
    assert_eq!(
        (max.offset, max.timestamp, max.leader_epoch),
        (4, T0 + 90, Some(3))
    );
    assert_eq!(
        log.fetch_offset_by_timestamp(MAX_TIMESTAMP).unwrap(),
        Some(max)
    );
}

#[test]
fn log_append_time() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        message_timestamp_type: TimestampType::LogAppendTime,
        ..LogConfig::default()
    };
    let mut log = open(dir.path(), config);
    let now = T0 + 777_000;
    let info = log
        .append_as_leader(&batch(3), 0, AppendOrigin::Client, now)
        .unwrap();
    assert_eq!((info.log_append_time, info.max_timestamp), (now, now));
    let all = read_all(&log, 0);
    let view = BatchView::parse(&all).unwrap();
    view.validate().unwrap();
    assert!(view.is_log_append_time());
    assert_eq!(view.max_timestamp(), now);
    let found = log.fetch_offset_by_timestamp(now).unwrap().unwrap();
    assert_eq!((found.offset, found.timestamp), (0, now));
    assert_eq!(log.max_timestamp_and_offset().unwrap().unwrap().offset, 0);
}

#[test]
fn invalid_batches_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        max_message_bytes: 200,
        ..LogConfig::default()
    };
    let mut log = open(dir.path(), config);
    append(&mut log, &batch(1));
    let size_before = log.size_in_bytes();
    let good = batch(1);

    let mut bad_crc = good.clone();
    let last = bad_crc.len() - 1;
    bad_crc[last] ^= 1;
    let mut bad_magic = good.clone();
    bad_magic[MAGIC_OFFSET] = 1;
    let mut trailing = good.clone();
    trailing.extend_from_slice(&[0, 0, 0]);
    let mut good_then_bad = good.clone();
    good_then_bad.extend(&bad_crc);
    let too_large = batch_with(&[T0], 300);
    let mut truncated = good.clone();
    truncated.truncate(good.len() - 4);

    type Check = fn(&StorageError) -> bool;
    let cases: Vec<(&str, Vec<u8>, Check)> = vec![
        ("crc", bad_crc, |e| {
            matches!(e, StorageError::CorruptRecord(_))
        }),
        ("magic", bad_magic, |e| {
            matches!(e, StorageError::InvalidRecord(_))
        }),
        ("trailing", trailing, |e| {
            matches!(e, StorageError::CorruptRecord(_))
        }),
        ("second bad", good_then_bad, |e| {
            matches!(e, StorageError::CorruptRecord(_))
        }),
        ("too large", too_large, |e| {
            matches!(e, StorageError::RecordTooLarge { max: 200, .. })
        }),
        ("truncated", truncated, |e| {
            matches!(e, StorageError::CorruptRecord(_))
        }),
    ];
    for (name, records, check) in cases {
        let err = log
            .append_as_leader(&records, 0, AppendOrigin::Client, T0)
            .unwrap_err();
        assert!(check(&err), "{name}: {err:?}");
        assert_eq!(log.log_end_offset(), 1, "{name}");
        assert_eq!(log.size_in_bytes(), size_before, "{name}");
        assert_eq!(
            file_len(dir.path().join(log_file_name(0))),
            size_before,
            "{name}"
        );
    }
}

#[test]
fn follower_append_keeps_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), LogConfig::default());
    let mut b = batch(2);
    strom_protocol::batch::set_base_offset(&mut b, 0);
    strom_protocol::batch::set_partition_leader_epoch(&mut b, 7);
    let info = log.append_as_follower(&b, T0).unwrap();
    assert_eq!((info.first_offset, info.last_offset), (0, 1));
    strom_protocol::batch::set_base_offset(&mut b, 1);
    assert!(matches!(
        log.append_as_follower(&b, T0),
        Err(StorageError::UnexpectedAppendOffset {
            first_offset: 1,
            log_end: 2
        })
    ));
    strom_protocol::batch::set_base_offset(&mut b, 10);
    log.append_as_follower(&b, T0).unwrap();
    assert_eq!(log.log_end_offset(), 12);
    let all = read_all(&log, 0);
    assert_eq!(offsets(&all), vec![(0, 1), (10, 11)]);
    assert_eq!(BatchView::parse(&all).unwrap().partition_leader_epoch(), 7);
    assert_eq!(offsets(&read_all(&log, 5)), vec![(10, 11)]);
}

#[test]
fn retention_by_time() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        retention_ms: 1000,
        ..LogConfig::default()
    };
    let mut log = open(dir.path(), config);
    append(&mut log, &batch_with(&[T0], 10));
    log.roll(T0).unwrap();
    append(&mut log, &batch_with(&[T0 + 500], 10));
    log.roll(T0).unwrap();
    append(&mut log, &batch_with(&[T0 + 2000], 10));
    assert_eq!(log.delete_old_segments(T0 + 1000).unwrap(), 0);
    assert_eq!(log.delete_old_segments(T0 + 1001).unwrap(), 1);
    assert_eq!(log.log_start_offset(), 1);
    assert!(!dir.path().join(log_file_name(0)).exists());
    assert!(!dir.path().join(offset_index_file_name(0)).exists());
    // Everything expired: the active segment goes too, after a roll keeps the log writable.
    assert_eq!(log.delete_old_segments(T0 + 10_000).unwrap(), 2);
    assert_eq!(log.num_segments(), 1);
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (3, 3));
    assert_eq!(append(&mut log, &batch(1)).first_offset, 3);
}

#[test]
fn retention_by_size() {
    let dir = tempfile::tempdir().unwrap();
    let b = batch(2);
    let config = LogConfig {
        segment_bytes: b.len() as u64,
        retention_bytes: (b.len() * 2) as i64,
        retention_ms: -1,
        ..LogConfig::default()
    };
    let mut log = open(dir.path(), config);
    for _ in 0..5 {
        append(&mut log, &b);
    }
    assert_eq!(log.num_segments(), 5);
    assert_eq!(log.delete_old_segments(T0).unwrap(), 3);
    assert_eq!(log.log_start_offset(), 6);
    assert_eq!(log.size_in_bytes(), (b.len() * 2) as u64);
    // Over by less than a segment: nothing to do.
    assert_eq!(log.delete_old_segments(T0).unwrap(), 0);
    // The high watermark protects segments not yet below it.
    append(&mut log, &b);
    assert_eq!(log.delete_old_segments_below(T0, 7).unwrap(), 0);
    assert_eq!(log.delete_old_segments_below(T0, 8).unwrap(), 1);
    assert_eq!(log.log_start_offset(), 8);
}

#[test]
fn truncate_to_and_flush_interval() {
    let dir = tempfile::tempdir().unwrap();
    let b = batch(2);
    let config = LogConfig {
        segment_bytes: (b.len() * 2) as u64,
        flush_interval_messages: 4,
        ..LogConfig::default()
    };
    let mut log = open(dir.path(), config);
    append(&mut log, &b);
    assert_eq!(log.recovery_point(), 0);
    append(&mut log, &b);
    assert_eq!(log.recovery_point(), 4);
    for _ in 0..4 {
        append(&mut log, &b);
    }
    assert_eq!(log.num_segments(), 3);
    log.truncate_to(7).unwrap();
    // The batch holding offset 7 goes whole.
    assert_eq!(log.log_end_offset(), 6);
    assert_eq!(offsets(&read_all(&log, 0)).last(), Some(&(4, 5)));
    assert_eq!(log.num_segments(), 2);
    log.truncate_to(4).unwrap();
    assert_eq!((log.log_end_offset(), log.num_segments()), (4, 2));
    assert_eq!(append(&mut log, &b).first_offset, 4);
    log.truncate_to(0).unwrap();
    assert_eq!((log.log_end_offset(), log.num_segments()), (0, 1));
    assert!(log.recovery_point() <= 0);
}

#[test]
fn delete_removes_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let pdir = dir.path().join("t-0");
    let mut log = open(&pdir, LogConfig::default());
    append(&mut log, &batch(1));
    let reader = log.reader();
    log.delete().unwrap();
    assert!(!pdir.exists());
    // A reader that outlived the log serves nothing (and does not panic).
    assert!(reader
        .read(0, 100, i64::MAX, true)
        .unwrap()
        .records
        .is_empty());
}

#[test]
fn client_batches_get_client_checks() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), LogConfig::default());
    let mut b = batch(2);
    // Claim three records in a batch whose offsets span two.
    b[strom_protocol::batch::RECORDS_COUNT_OFFSET + 3] = 3;
    let crc = crc32c::crc32c(&b[strom_protocol::batch::ATTRIBUTES_OFFSET..]);
    b[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
    assert!(matches!(
        log.append_as_leader(&b, 0, AppendOrigin::Client, T0),
        Err(StorageError::InvalidRecord(_))
    ));
}

/// Writes a small multi-segment log for checking with Kafka's own tool:
/// `STROM_STORAGE_FIXTURE_DIR=/tmp/fx cargo test -p strom-storage -- --ignored fixture`, then
/// `scripts/kafka-dump-log.sh --files /tmp/fx/t-0/00000000000000000000.index,...`.
#[test]
#[ignore]
fn fixture_for_kafka_dump_log() {
    let Ok(root) = std::env::var("STROM_STORAGE_FIXTURE_DIR") else {
        return;
    };
    let dir = Path::new(&root).join("t-0");
    let _ = std::fs::remove_dir_all(&dir);
    let config = LogConfig {
        segment_bytes: 4000,
        index_interval_bytes: 300,
        ..LogConfig::default()
    };
    let mut log = open(&dir, config);
    for i in 0..40 {
        let t = T0 + i * 10;
        let records = batch_with(&[t, t + 3, t + 1], 40 + i as usize);
        log.append_as_leader(&records, 5, AppendOrigin::Client, T0)
            .unwrap();
    }
    log.close().unwrap();
}

#[test]
fn log_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<UnifiedLog>();
}

#[path = "log_producer_tests.rs"]
mod producer;

/// The guess the broker's produce path takes before an append: only the appends that would roll,
/// start an epoch (checkpointed) or flush may wait on the disk; the rest are page-cache writes.
#[test]
fn append_may_sync_says_when_an_append_would_roll_checkpoint_or_flush() {
    let dir = tempfile::tempdir().unwrap();
    let b = batch(3);
    let config = LogConfig {
        segment_bytes: 4 * b.len() as u64,
        ..LogConfig::default()
    };
    let mut log = open(dir.path(), config.clone());
    // Epoch 3's first append writes the epoch checkpoint.
    assert!(log.append_may_sync(b.len(), 3, T0));
    append(&mut log, &b);
    assert!(!log.append_may_sync(b.len(), 3, T0));
    assert!(log.append_may_sync(b.len(), 4, T0), "a new epoch");
    append(&mut log, &b);
    append(&mut log, &b);
    append(&mut log, &b);
    assert!(
        log.append_may_sync(b.len(), 3, T0),
        "the segment is full: a roll"
    );
    assert!(
        log.append_may_sync(1, 3, T0 + config.segment_ms + 1),
        "segment.ms passed: a roll"
    );

    let dir = tempfile::tempdir().unwrap();
    let mut log = open(
        dir.path(),
        LogConfig {
            flush_interval_messages: 1,
            ..LogConfig::default()
        },
    );
    append(&mut log, &b);
    assert!(
        log.append_may_sync(b.len(), 3, T0),
        "flush.messages=1 flushes"
    );
}

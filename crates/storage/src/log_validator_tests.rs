//! The `LogValidator` on crafted batches: each case is one of Kafka 4.4's `LogValidator`
//! branches (the broker-level comparison with Kafka itself is
//! `crates/strom/tests/produce_validation.rs`).

use strom_protocol::batch::BatchView;
use strom_protocol::crafted::CraftedBatch;
use strom_protocol::records::{RecordBatchDecoder, TimestampType as RecordTimestampType};
use strom_protocol::ErrorCode;

use crate::config::TimestampType;
use crate::log_validator::{LogValidator, TargetCompression, ValidationResult};
use crate::{AppendOrigin, StorageError};

const NOW: i64 = 1_700_000_000_000;
const HOUR: i64 = 3_600_000;

fn validator() -> LogValidator<'static> {
    LogValidator {
        topic_partition: "t-0",
        now_ms: NOW,
        target_compression: TargetCompression::Producer,
        compacted_topic: false,
        timestamp_type: TimestampType::CreateTime,
        timestamp_before_max_ms: i64::MAX,
        timestamp_after_max_ms: HOUR,
        origin: AppendOrigin::Client,
        max_record_body_size: i32::MAX - 8,
        max_message_bytes: 1_048_588,
    }
}

fn check(v: &LogValidator<'_>, b: &CraftedBatch) -> Result<ValidationResult, StorageError> {
    v.validate(&b.encode())
}

fn invalid_record(r: Result<ValidationResult, StorageError>) -> String {
    match r {
        Err(StorageError::InvalidRecord(m)) => m,
        other => panic!("expected INVALID_RECORD, got {other:?}"),
    }
}

#[test]
fn a_well_formed_batch_passes_in_place_with_its_true_max_timestamp() {
    for codec in 0..=4 {
        let mut b = CraftedBatch::new(NOW - 10, 3);
        b.codec = codec;
        // The header claims a far-future max; the records do not.
        b.max_timestamp = Some(NOW + 100 * HOUR);
        let r = check(&validator(), &b).unwrap();
        assert_eq!(r.max_timestamp, NOW - 8, "codec {codec}");
        assert_eq!(r.header_max_timestamp, NOW - 8);
        assert!(!r.header_log_append_time);
        assert!(r.rebuilt.is_none());
    }
}

#[test]
fn keyless_records_refuse_the_batch_on_a_compacted_topic() {
    for codec in 0..=4 {
        let mut b = CraftedBatch::new(NOW, 6);
        b.codec = codec;
        for i in [1, 3, 4, 5] {
            b.records[i].key = None;
        }
        let v = LogValidator {
            compacted_topic: true,
            ..validator()
        };
        let err = check(&v, &b).unwrap_err();
        let StorageError::RecordErrors { message, errors } = &err else {
            panic!("{err:?}");
        };
        let indexes: Vec<i32> = errors.iter().map(|e| e.batch_index).collect();
        assert_eq!(indexes, [1, 3, 4, 5]);
        let one = "Compacted topic cannot accept message without key in topic partition t-0";
        assert_eq!(errors[0].message, one);
        assert_eq!(
            message,
            &format!(
                "One or more records have been rejected due to 4 record errors in total, and only showing the first three errors at most: [RecordError(batchIndex=1, message='{one}'), RecordError(batchIndex=3, message='{one}'), RecordError(batchIndex=4, message='{one}')]"
            )
        );
        assert_eq!(err.error_code(), ErrorCode::InvalidRecord);
        // Keyed: fine.
        assert!(check(&v, &CraftedBatch::new(NOW, 3)).is_ok());
    }
}

/// `message.timestamp.after.max.ms` / `before.max.ms`: the bounds are inclusive, -1 is never
/// checked, and every out-of-range record is listed (INVALID_TIMESTAMP).
#[test]
fn timestamps_out_of_range_are_record_errors() {
    let v = LogValidator {
        timestamp_before_max_ms: 2 * HOUR,
        ..validator()
    };
    let mut b = CraftedBatch::new(NOW, 5);
    b.records[0].timestamp_delta = HOUR; // exactly at the upper bound
    b.records[1].timestamp_delta = HOUR + 1;
    b.records[2].timestamp_delta = -2 * HOUR; // exactly at the lower bound
    b.records[3].timestamp_delta = -2 * HOUR - 1;
    b.records[4].timestamp_delta = -1 - NOW; // -1: no timestamp
    for codec in 0..=4 {
        b.codec = codec;
        let err = check(&v, &b).unwrap_err();
        assert_eq!(
            err.error_code(),
            ErrorCode::InvalidTimestamp,
            "codec {codec}"
        );
        assert_eq!(
            err.to_string(),
            "One or more records have been rejected due to invalid timestamp"
        );
        let StorageError::TimestampErrors { errors } = err else {
            unreachable!()
        };
        let bounds = format!("[{}, {}]", NOW - 2 * HOUR, NOW + HOUR);
        assert_eq!(errors.len(), 2);
        assert_eq!(errors[0].batch_index, 1);
        assert_eq!(
            errors[0].message,
            format!(
                "Timestamp {} of message with offset 1 is out of range. The timestamp should be within {bounds}",
                NOW + HOUR + 1
            )
        );
        assert_eq!(errors[1].batch_index, 3);
    }
    // Within the bounds: the largest is the batch's max timestamp; -1 counts for nothing.
    b.records.remove(3);
    b.records.remove(1);
    b.count = None;
    b.codec = 0;
    assert_eq!(check(&v, &b).unwrap().max_timestamp, NOW + HOUR);
}

#[test]
fn a_key_error_and_a_timestamp_error_are_invalid_timestamp_with_both_listed() {
    let v = LogValidator {
        compacted_topic: true,
        ..validator()
    };
    let mut b = CraftedBatch::new(NOW, 2);
    b.records[0].key = None;
    b.records[1].timestamp_delta = 2 * HOUR;
    let err = check(&v, &b).unwrap_err();
    let StorageError::TimestampErrors { errors } = err else {
        panic!("{err:?}")
    };
    assert_eq!(
        errors.iter().map(|e| e.batch_index).collect::<Vec<_>>(),
        [0, 1]
    );
}

/// Java long arithmetic: `now + after.max.ms` overflows to a negative bound, and
/// `before.max.ms = Long.MAX_VALUE` accepts anything in the past.
#[test]
fn bounds_overflow_as_in_java() {
    let v = LogValidator {
        timestamp_after_max_ms: i64::MAX,
        ..validator()
    };
    let mut b = CraftedBatch::new(0, 1);
    b.records[0].timestamp_delta = i64::MAX - 10;
    assert!(check(&v, &b).is_ok());
    let mut past = CraftedBatch::new(0, 1);
    past.base_timestamp = 1;
    assert!(check(&validator(), &past).is_ok());
}

#[test]
fn log_append_time_topics_stamp_the_append_time_and_refuse_producer_log_append_time() {
    let v = LogValidator {
        timestamp_type: TimestampType::LogAppendTime,
        ..validator()
    };
    // Far-future create times are not checked on a LogAppendTime topic.
    let mut b = CraftedBatch::new(NOW + 1000 * HOUR, 2);
    let r = check(&v, &b).unwrap();
    assert!(r.header_log_append_time);
    assert_eq!(r.max_timestamp, NOW);
    assert_eq!(r.header_max_timestamp, NOW);
    // A producer's LogAppendTime batch: every record refused, with Kafka's record string.
    b.attributes = 0x08;
    b.max_timestamp = Some(77);
    for (codec, want) in [
        (
            0,
            "DefaultRecord(offset=0, timestamp=77, key=2 bytes, value=2 bytes)",
        ),
        (
            1,
            "PartialDefaultRecord(offset=0, timestamp=77, key=2 bytes, value=2 bytes)",
        ),
    ] {
        b.codec = codec;
        let StorageError::TimestampErrors { errors } = check(&v, &b).unwrap_err() else {
            panic!()
        };
        assert_eq!(errors.len(), 2);
        assert_eq!(
            errors[0].message,
            format!(
                "Invalid timestamp type in message {want}. Producer should not set timestamp type to LogAppendTime."
            )
        );
    }
    // On a CreateTime topic the same batch is taken: its records read as the header's time,
    // and the header goes back to CreateTime with that max.
    b.max_timestamp = Some(NOW);
    b.codec = 0;
    let r = check(&validator(), &b).unwrap();
    assert!(!r.header_log_append_time);
    assert_eq!(r.header_max_timestamp, NOW);
}

#[test]
fn batch_header_checks_in_kafkas_order_and_words() {
    let v = validator();
    let mut b = CraftedBatch::new(NOW, 3);
    b.last_offset_delta = Some(-1);
    assert_eq!(
        invalid_record(check(&v, &b)),
        "Batch has an invalid offset range: [0, -1] in topic partition t-0"
    );
    let mut b = CraftedBatch::new(NOW, 3);
    b.count = Some(0);
    assert_eq!(
        invalid_record(check(&v, &b)),
        "Invalid reported count for record batch: 0 in topic partition t-0"
    );
    let mut b = CraftedBatch::new(NOW, 3);
    b.last_offset_delta = Some(5);
    assert_eq!(
        invalid_record(check(&v, &b)),
        "Inconsistent batch offset range [0, 5] and count of records 3 in topic partition t-0"
    );
    let mut b = CraftedBatch::new(NOW, 3);
    b.attributes = 0x20;
    assert_eq!(
        invalid_record(check(&v, &b)),
        "Clients are not allowed to write control records in topic partition t-0"
    );
    let mut b = CraftedBatch::new(NOW, 3);
    b.producer_id = 7;
    b.producer_epoch = 0;
    b.base_sequence = -3;
    assert_eq!(
        invalid_record(check(&v, &b)),
        "Invalid sequence number -3 in record batch with producerId 7 in topic partition t-0"
    );
    // Coordinators are not held to the client checks.
    let coordinator = LogValidator {
        origin: AppendOrigin::Coordinator,
        ..validator()
    };
    assert!(check(&coordinator, &b).is_ok());
    let two = [
        CraftedBatch::new(NOW, 1).encode(),
        CraftedBatch::new(NOW, 1).encode(),
    ]
    .concat();
    assert_eq!(
        invalid_record(v.validate(&two)),
        "Compressed outer record has more than one batch"
    );
}

#[test]
fn record_structure_is_walked_for_every_codec() {
    let v = validator();
    for codec in 0..=4 {
        // More records claimed than there are (with a consistent offset range).
        let mut b = CraftedBatch::new(NOW, 3);
        b.codec = codec;
        b.count = Some(4);
        b.last_offset_delta = Some(3);
        invalid_record(check(&v, &b));
        // Bytes after the last record.
        let mut b = CraftedBatch::new(NOW, 3);
        b.codec = codec;
        b.trailing = vec![0; 3];
        assert_eq!(
            invalid_record(check(&v, &b)),
            "Incorrect declared batch size, records still remaining in file"
        );
        // A negative header count or header key size.
        let mut b = CraftedBatch::new(NOW, 1);
        b.codec = codec;
        b.records[0].value = None;
        let mut bytes = b.encode();
        if codec == 0 {
            let last = bytes.len() - 1;
            bytes[last] = 0x01; // header count -1
            let crc = crc32c::crc32c(&bytes[21..]);
            bytes[17..21].copy_from_slice(&crc.to_be_bytes());
            assert_eq!(
                invalid_record(v.validate(&bytes)),
                "Found invalid number of record headers -1"
            );
        }
    }
}

/// Kafka checks a record's declared size against what it read for uncompressed batches, and
/// on the in-place compressed path reads field by field without that check.
#[test]
fn a_wrong_record_size_is_refused_uncompressed_and_read_through_compressed() {
    let v = validator();
    let mut b = CraftedBatch::new(NOW, 2);
    b.records[0].size_adjust = 1;
    b.records[1].size_adjust = -1;
    invalid_record(check(&v, &b));
    b.codec = 1;
    assert!(check(&v, &b).is_ok());
    // Past `max.decompressed.message.bytes` on the compressed path only.
    let small = LogValidator {
        max_record_body_size: 4,
        ..validator()
    };
    assert_eq!(
        invalid_record(check(&small, &b)),
        "Invalid record size: 11 exceeds the configured maximum record size of 4."
    );
    b.codec = 0;
    b.records[0].size_adjust = 0;
    b.records[1].size_adjust = 0;
    assert!(check(&small, &b).is_ok());
}

/// Kafka 4.4 reads a compressed batch it keeps in place without keys and values; when its
/// inner offsets are not 0..n it then tries to re-encode those partial records and fails with
/// an internal error (UNKNOWN_SERVER_ERROR to the producer). Uncompressed batches keep their
/// offset deltas unchecked.
#[test]
fn inner_offsets_out_of_order() {
    let mut b = CraftedBatch::new(NOW, 3);
    b.records[1].offset_delta = 5;
    assert!(check(&validator(), &b).is_ok());
    b.codec = 4;
    let err = check(&validator(), &b).unwrap_err();
    assert_eq!(err.error_code(), ErrorCode::UnknownServerError);
}

fn decode(bytes: &[u8]) -> strom_protocol::records::RecordSet {
    let mut b = bytes::Bytes::copy_from_slice(bytes);
    RecordBatchDecoder::decode(&mut b).unwrap()
}

/// `compression.type` other than `producer`: a batch with another codec is re-encoded with the
/// topic's, offsets 0..n, timestamps and producer fields kept.
#[test]
fn batches_are_recompressed_to_the_topics_codec() {
    for (source, target) in [(0, 1), (1, 0), (2, 4), (3, 2), (4, 3), (0, 2)] {
        let v = LogValidator {
            target_compression: TargetCompression::Codec {
                id: target,
                level: None,
            },
            ..validator()
        };
        let mut b = CraftedBatch::new(NOW - 5, 4);
        b.codec = source;
        b.producer_id = 9;
        b.producer_epoch = 2;
        b.base_sequence = 40;
        b.records[2].key = None;
        b.records[1].headers = vec![(b"h".to_vec(), None)];
        b.records[3].offset_delta = 17; // offsets are reassigned
        b.max_timestamp = Some(NOW + 50 * HOUR);
        let r = check(&v, &b).unwrap();
        let rebuilt = r.rebuilt.expect("re-encoded");
        let view = BatchView::parse(&rebuilt).unwrap();
        view.validate().unwrap();
        assert_eq!(view.attributes() & 7, target, "{source} -> {target}");
        assert_eq!(view.records_count(), 4);
        assert_eq!(view.last_offset_delta(), 3);
        assert_eq!(view.max_timestamp(), NOW - 2);
        assert_eq!(view.base_timestamp(), NOW - 5);
        assert_eq!(
            (
                view.producer_id(),
                view.producer_epoch(),
                view.base_sequence()
            ),
            (9, 2, 40)
        );
        let set = decode(&rebuilt);
        let offsets: Vec<i64> = set.records.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, [0, 1, 2, 3]);
        assert!(set.records[2].key.is_none());
        assert_eq!(set.records[1].headers.len(), 1);
        assert_eq!(set.records[3].timestamp, NOW - 2);
        assert_eq!(set.records[0].value.as_deref(), Some(&b"v0"[..]));
    }
    // LogAppendTime topic: the re-encoded batch carries the append time.
    let v = LogValidator {
        target_compression: TargetCompression::Codec {
            id: 4,
            level: Some(7),
        },
        timestamp_type: TimestampType::LogAppendTime,
        ..validator()
    };
    let r = check(&v, &CraftedBatch::new(NOW - 5, 2)).unwrap();
    let rebuilt = r.rebuilt.unwrap();
    let view = BatchView::parse(&rebuilt).unwrap();
    assert!(view.is_log_append_time());
    assert_eq!(view.max_timestamp(), NOW);
    let set = decode(&rebuilt);
    assert!(set
        .records
        .iter()
        .all(|r| r.timestamp_type == RecordTimestampType::LogAppend));
}

#[test]
fn a_re_encoded_batch_larger_than_max_message_bytes_is_too_large() {
    let v = LogValidator {
        target_compression: TargetCompression::Codec { id: 0, level: None },
        max_message_bytes: 2_000,
        ..validator()
    };
    let mut b = CraftedBatch::new(NOW, 1);
    b.records[0].value = Some(vec![b'x'; 100_000]);
    b.codec = 4;
    let err = check(&v, &b).unwrap_err();
    assert_eq!(err.error_code(), ErrorCode::MessageTooLarge);
}

/// Hostile sections: a record count far beyond the bytes, a zstd bomb, garbage for a codec;
/// each ends quickly with an error and no large allocation.
#[test]
fn hostile_compressed_sections() {
    let v = validator();
    let mut b = CraftedBatch::new(NOW, 1);
    b.codec = 3;
    b.count = Some(i32::MAX);
    b.last_offset_delta = Some(i32::MAX - 1);
    invalid_record(check(&v, &b));
    // 64 MiB of zeros in one record value, compressed to a few KiB: walked, not held.
    let mut bomb = CraftedBatch::new(NOW, 1);
    bomb.codec = 4;
    bomb.records[0].value = Some(vec![0; 64 << 20]);
    let bytes = bomb.encode();
    assert!(bytes.len() < 100_000);
    drop(bomb);
    assert!(v.validate(&bytes).is_ok());
    // Garbage: a clear error, never a panic.
    let mut g = CraftedBatch::new(NOW, 1).encode();
    g[22] = 2; // snappy, records section is not snappy
    let crc = crc32c::crc32c(&g[21..]);
    g[17..21].copy_from_slice(&crc.to_be_bytes());
    assert!(v.validate(&g).is_err());
}

/// Through the log: the segment, its time index and ListOffsets(MAX_TIMESTAMP) see the records'
/// max timestamp, not a header's far-future claim; a client batch's base offset must be 0.
#[test]
fn the_log_stores_the_validated_max_timestamp() {
    let dir = tempfile::tempdir().unwrap();
    let mut log =
        crate::UnifiedLog::open(dir.path(), crate::LogConfig::default(), 0, true).unwrap();
    let mut b = CraftedBatch::new(NOW - 10, 3);
    b.max_timestamp = Some(NOW + 1000 * HOUR);
    let info = log
        .append_as_leader(&b.encode(), 4, AppendOrigin::Client, NOW)
        .unwrap();
    assert_eq!(info.max_timestamp, NOW - 8);
    assert_eq!(info.log_append_time, -1);
    let stored = log.read(0, 1 << 20, log.log_end_offset(), false).unwrap();
    let view = BatchView::parse(&stored.records).unwrap();
    view.validate().unwrap();
    assert_eq!(view.max_timestamp(), NOW - 8);
    assert_eq!(view.partition_leader_epoch(), 4);
    assert_eq!(
        log.max_timestamp_and_offset().unwrap().unwrap().timestamp,
        NOW - 8
    );
    let mut b = CraftedBatch::new(NOW, 1);
    b.base_offset = 5;
    assert_eq!(
        invalid_record(
            log.append_as_leader(&b.encode(), 4, AppendOrigin::Client, NOW)
                .map(|_| unreachable!())
        ),
        "The baseOffset of the record batch in the append to ".to_string()
            + &dir.path().file_name().unwrap().to_string_lossy()
            + " should be 0, but it is 5"
    );
}

//! Kafka's `LogValidator.validateKey`: a compacted topic keeps the latest record per key, so a
//! client record without a key has no meaning there and the leader refuses its whole batch with
//! INVALID_RECORD, one record error per keyless record. Only compacted topics pay for walking
//! the records (decompressing if needed); every other append stays header-only.

use std::path::Path;

use strom_protocol::batch::BatchView;

use crate::StorageError;

/// Where the records start in a v2 batch (after the 61-byte header).
const RECORDS_OFFSET: usize = 61;

/// Kafka's `ProduceResponse.RecordError`: the index of the record inside its batch and why it
/// was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordError {
    pub batch_index: i32,
    pub message: String,
}

impl std::fmt::Display for RecordError {
    /// `RecordError.toString`, which Kafka puts into the produce error message.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "RecordError(batchIndex={}, message='{}')",
            self.batch_index, self.message
        )
    }
}

/// Kafka's `LogValidator.processRecordErrors` for INVALID_RECORD: the exception message lists
/// the first three errors and the count of all of them.
pub(crate) fn record_errors(errors: Vec<RecordError>) -> StorageError {
    let shown: Vec<String> = errors.iter().take(3).map(|e| e.to_string()).collect();
    StorageError::RecordErrors {
        message: format!(
            "One or more records have been rejected due to {} record errors in total, and only showing the first three errors at most: [{}]",
            errors.len(),
            shown.join(", ")
        ),
        errors,
    }
}

/// Refuses `batch`, appended to the log in `dir`, when one of its records has no key.
pub(crate) fn check_keys(batch: &BatchView<'_>, dir: &Path) -> Result<(), StorageError> {
    let count = batch.records_count();
    if count <= 0 || batch.is_control() {
        return Ok(());
    }
    let body = batch.bytes().get(RECORDS_OFFSET..).unwrap_or(&[]);
    let decompressed;
    let records: &[u8] = match batch.attributes() & 0x07 {
        0 => body,
        codec => {
            decompressed = decompress(codec, body)?;
            &decompressed
        }
    };
    // Kafka's `TopicPartition.toString`, which is the log directory's name.
    let topic_partition = dir
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    let mut errors = Vec::new();
    let mut pos = 0;
    for index in 0..count {
        let key_len = record_key_length(records, &mut pos).ok_or_else(|| {
            StorageError::CorruptRecord(format!(
                "record {index} of the batch at offset {} does not parse",
                batch.base_offset()
            ))
        })?;
        if key_len < 0 {
            errors.push(RecordError {
                batch_index: index,
                message: format!(
                    "Compacted topic cannot accept message without key in topic partition {topic_partition}"
                ),
            });
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(record_errors(errors))
    }
}

fn decompress(codec: i16, data: &[u8]) -> Result<Vec<u8>, StorageError> {
    strom_protocol::compression::decompress(codec, data)
        .map_err(|e| StorageError::CorruptRecord(e.to_string()))
}

/// Reads one v2 record at `*pos` (Kafka's `DefaultRecord.readFrom` layout: length, attributes,
/// timestamp delta, offset delta, key length, ...) and returns its key length (-1 for a null
/// key), leaving `*pos` at the next record. None when the bytes do not hold a whole record.
fn record_key_length(buf: &[u8], pos: &mut usize) -> Option<i64> {
    let length = varint(buf, pos)?;
    let body_start = *pos;
    let end = body_start.checked_add(usize::try_from(length).ok()?)?;
    if end > buf.len() {
        return None;
    }
    let body = &buf[..end];
    let mut p = body_start + 1; // attributes
    varint(body, &mut p)?; // timestamp delta
    varint(body, &mut p)?; // offset delta
    let key_len = varint(body, &mut p)?;
    *pos = end;
    Some(key_len)
}

/// A zig-zag varint of up to 10 bytes (covers both varint and varlong fields).
fn varint(buf: &[u8], pos: &mut usize) -> Option<i64> {
    let mut raw: u64 = 0;
    for shift in (0..70).step_by(7) {
        let b = *buf.get(*pos)?;
        *pos += 1;
        raw |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some((raw >> 1) as i64 ^ -((raw & 1) as i64));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use strom_protocol::kafka::records::{
        Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };

    fn batch(keys: &[Option<&str>], compression: Compression) -> Vec<u8> {
        let records: Vec<Record> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: 0,
                producer_id: -1,
                producer_epoch: -1,
                timestamp_type: TimestampType::Creation,
                offset: i as i64,
                // The encoder groups records into one batch while offset - sequence is even.
                sequence: i as i32,
                timestamp: 1000,
                key: k.map(|k| bytes::Bytes::copy_from_slice(k.as_bytes())),
                value: Some(bytes::Bytes::from_static(b"v")),
                headers: Default::default(),
            })
            .collect();
        let mut out = bytes::BytesMut::new();
        RecordBatchEncoder::encode(
            &mut out,
            &records,
            &RecordEncodeOptions {
                version: 2,
                compression,
            },
        )
        .unwrap();
        out.to_vec()
    }

    fn check(bytes: &[u8]) -> Result<(), StorageError> {
        check_keys(&BatchView::parse(bytes).unwrap(), Path::new("/data/t-0"))
    }

    #[test]
    fn keyed_records_pass() {
        for c in [Compression::None, Compression::Gzip, Compression::Zstd] {
            assert!(check(&batch(&[Some("a"), Some(""), Some("b")], c)).is_ok());
        }
    }

    #[test]
    fn keyless_records_refuse_the_batch_with_kafkas_errors() {
        for c in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let err =
                check(&batch(&[Some("a"), None, Some("b"), None, None, None], c)).unwrap_err();
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
            assert_eq!(err.error_code(), strom_protocol::ErrorCode::InvalidRecord);
        }
    }

    #[test]
    fn truncated_records_are_corrupt() {
        let mut b = batch(&[Some("a"), Some("b")], Compression::None);
        // Claim a third record that is not there (count field at 57..61).
        b[57..61].copy_from_slice(&3i32.to_be_bytes());
        assert!(matches!(check(&b), Err(StorageError::CorruptRecord(_))));
    }
}

//! Building a batch from records (Kafka's `MemoryRecords.withRecords`), for the broker's own
//! writers — the coordinators appending their records — and never for data clients send, which
//! stays bytes. Made with kafka-protocol's encoder: magic 2, no compression, no producer id.

use bytes::Bytes;
use bytes::BytesMut;

use crate::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};

/// One non-idempotent, non-transactional batch of `(key, value)` records (a `None` value is a
/// tombstone) at relative offsets 0.., every record stamped `timestamp`, as Kafka's
/// coordinators write: producer id and epoch -1, base sequence -1.
pub fn with_records(records: &[(Bytes, Option<Bytes>)], timestamp: i64) -> Vec<u8> {
    let records: Vec<Record> = records
        .iter()
        .enumerate()
        .map(|(i, (key, value))| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            // The encoder takes the batch's base sequence from the first record (offset minus
            // sequence constant across the batch): -1 for "no sequence", as Kafka writes.
            sequence: (i as i32).wrapping_sub(1),
            timestamp,
            key: Some(key.clone()),
            value: value.clone(),
            headers: Default::default(),
        })
        .collect();
    encode_uncompressed(&records)
}

/// `records` encoded as magic-2 uncompressed batches (one, when offsets, sequences and the
/// producer fields line up as a batch's do).
pub(crate) fn encode_uncompressed(records: &[Record]) -> Vec<u8> {
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        records,
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .expect("encoding an uncompressed batch cannot fail");
    buf.to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::BatchView;

    #[test]
    fn one_batch_without_producer_or_sequence_and_one_timestamp() {
        let recs = vec![
            (Bytes::from_static(b"k1"), Some(Bytes::from_static(b"v1"))),
            (Bytes::from_static(b"k2"), None),
            (Bytes::from_static(b"k3"), Some(Bytes::from_static(b"v3"))),
        ];
        let b = with_records(&recs, 1_700_000_000_123);
        let v = BatchView::parse(&b).expect("one batch");
        assert_eq!(v.size(), b.len(), "a single batch");
        assert!(v.validate().is_ok());
        assert_eq!(v.producer_id(), -1);
        assert_eq!(v.producer_epoch(), -1);
        assert_eq!(v.base_sequence(), -1);
        assert_eq!(v.records_count(), 3);
        assert_eq!(v.last_offset_delta(), 2);
        assert_eq!(v.base_timestamp(), 1_700_000_000_123);
        assert_eq!(v.max_timestamp(), 1_700_000_000_123);
        assert!(!v.is_transactional() && !v.is_control());
    }
}

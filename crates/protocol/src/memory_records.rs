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

/// Whether an end-transaction marker commits or aborts (Kafka's `ControlRecordType`: ABORT 0,
/// COMMIT 1, the record key's second field).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TxnResult {
    Abort,
    Commit,
}

impl TxnResult {
    pub fn control_type(self) -> i16 {
        match self {
            TxnResult::Abort => 0,
            TxnResult::Commit => 1,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            TxnResult::Abort => "ABORT",
            TxnResult::Commit => "COMMIT",
        }
    }
}

/// An end-transaction marker as read back from a control record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndTxnMarker {
    pub result: TxnResult,
    pub coordinator_epoch: i32,
}

/// The control batch a partition leader appends to end a producer's transaction (Kafka's
/// `MemoryRecords.withEndTransactionMarker`): transactional and control attributes set, the
/// producer's id and epoch, base sequence -1, one record whose key is the control record type
/// (version 0, type) and whose value is the marker (version 0, coordinator epoch).
pub fn end_txn_marker(
    producer_id: i64,
    producer_epoch: i16,
    coordinator_epoch: i32,
    result: TxnResult,
    timestamp: i64,
) -> Vec<u8> {
    let mut key = Vec::with_capacity(4);
    key.extend_from_slice(&0i16.to_be_bytes());
    key.extend_from_slice(&result.control_type().to_be_bytes());
    let mut value = Vec::with_capacity(6);
    value.extend_from_slice(&0i16.to_be_bytes());
    value.extend_from_slice(&coordinator_epoch.to_be_bytes());
    let record = Record {
        transactional: true,
        control: true,
        delete_horizon: false,
        partition_leader_epoch: -1,
        producer_id,
        producer_epoch,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence: -1,
        timestamp,
        key: Some(Bytes::from(key)),
        value: Some(Bytes::from(value)),
        headers: Default::default(),
    };
    encode_uncompressed(&[record])
}

/// The marker a control record carries, from its key and value (Kafka's
/// `ControlRecordType.parse` and `EndTransactionMarker.deserialize`): `None` for a control record
/// that is not an end-transaction marker (Kafka has others, e.g. leader change) or is too short.
pub fn parse_end_txn_marker(key: &[u8], value: Option<&[u8]>) -> Option<EndTxnMarker> {
    let i16_at = |b: &[u8], at: usize| b.get(at..at + 2).map(|s| i16::from_be_bytes([s[0], s[1]]));
    let result = match i16_at(key, 2)? {
        0 => TxnResult::Abort,
        1 => TxnResult::Commit,
        _ => return None,
    };
    let value = value?;
    let epoch = value.get(2..6)?;
    Some(EndTxnMarker {
        result,
        coordinator_epoch: i32::from_be_bytes([epoch[0], epoch[1], epoch[2], epoch[3]]),
    })
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

    #[test]
    fn an_end_txn_marker_is_one_transactional_control_record_that_reads_back() {
        for result in [TxnResult::Commit, TxnResult::Abort] {
            let b = end_txn_marker(4000, 3, 17, result, 1_700_000_000_999);
            let v = BatchView::parse(&b).expect("one batch");
            assert_eq!(v.size(), b.len());
            assert!(v.validate().is_ok());
            assert!(v.is_transactional() && v.is_control());
            assert_eq!((v.producer_id(), v.producer_epoch()), (4000, 3));
            assert_eq!(v.base_sequence(), -1);
            assert_eq!(v.records_count(), 1);
            let mut buf = bytes::Bytes::copy_from_slice(&b);
            let recs = crate::records::RecordBatchDecoder::decode(&mut buf).unwrap();
            let r = &recs.records[0];
            let m = parse_end_txn_marker(r.key.as_ref().unwrap(), r.value.as_deref()).unwrap();
            assert_eq!(
                m,
                EndTxnMarker {
                    result,
                    coordinator_epoch: 17
                }
            );
        }
    }
}

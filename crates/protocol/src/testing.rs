//! Small, plain record batches for tests and tools, made with kafka-protocol's encoder (never
//! by hand): magic 2, no compression, no producer id.

use bytes::Bytes;

use crate::records::{Record, TimestampType};

/// One batch of `(key, value)` records, offsets 0.., timestamps `first_timestamp`.. (1 ms apart).
pub fn plain_batch(
    records: impl IntoIterator<Item = (Option<Bytes>, Option<Bytes>)>,
    first_timestamp: i64,
) -> Vec<u8> {
    let records: Vec<Record> = records
        .into_iter()
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
            sequence: i as i32,
            timestamp: first_timestamp + i as i64,
            key,
            value,
            headers: Default::default(),
        })
        .collect();
    crate::memory_records::encode_uncompressed(&records)
}

/// `n` records with values "v0", "v1", ... and no keys.
pub fn value_batch(n: usize, first_timestamp: i64) -> Vec<u8> {
    plain_batch(
        (0..n).map(|i| (None, Some(Bytes::from(format!("v{i}"))))),
        first_timestamp,
    )
}

#[cfg(test)]
mod tests {
    use crate::batch::BatchView;

    #[test]
    fn value_batch_is_one_valid_batch() {
        let b = super::value_batch(3, 1_000);
        let v = BatchView::parse(&b).unwrap();
        v.validate().unwrap();
        assert_eq!(v.records_count(), 3);
        assert_eq!(v.last_offset_delta(), 2);
        assert_eq!(v.max_timestamp(), 1_002);
    }
}

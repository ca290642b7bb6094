//! Turning a Fetch response's record batches into consumer records, for both isolation levels.
//!
//! Under `read_committed` the broker returns data only up to the last stable offset (LSO) plus
//! the list of aborted transactions overlapping the returned range (producer id, first offset).
//! As Java's `CompletedFetch` does, the consumer then walks the batches in offset order, keeps a
//! set of producers whose current transaction is aborted (a producer enters it once the batch
//! walk reaches its aborted transaction's first offset, and leaves it at that transaction's
//! ABORT marker) and drops transactional batches of producers in the set. Control batches
//! (commit / abort markers) are never returned under either isolation level.

use std::collections::HashSet;

use bytes::{Buf, Bytes};
use strom_protocol::memory_records::{parse_end_txn_marker, TxnResult};
use strom_protocol::records::RecordBatchDecoder;

use crate::consumer::ConsumerRecord;

/// `isolation.level=read_uncommitted` on the wire.
pub const READ_UNCOMMITTED: i8 = 0;
/// `isolation.level=read_committed` on the wire.
pub const READ_COMMITTED: i8 = 1;

/// One entry of a Fetch response's `aborted_transactions`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTransaction {
    pub producer_id: i64,
    pub first_offset: i64,
}

/// Bytes of a RecordBatch v2 header.
const BATCH_HEADER: usize = 61;
const ATTR_TRANSACTIONAL: i16 = 0x10;
const ATTR_CONTROL: i16 = 0x20;

/// The header fields the filter needs (offsets per Kafka's `DefaultRecordBatch` layout).
struct BatchHeader {
    base_offset: i64,
    /// Bytes of the whole batch, length prefix included.
    size: usize,
    last_offset: i64,
    transactional: bool,
    control: bool,
    producer_id: i64,
}

fn header(buf: &[u8]) -> Option<BatchHeader> {
    if buf.len() < BATCH_HEADER {
        return None;
    }
    let base_offset = (&buf[0..8]).get_i64();
    let batch_len = (&buf[8..12]).get_i32();
    if batch_len < 49 || buf.len() < 12 + batch_len as usize {
        return None;
    }
    let attributes = (&buf[21..23]).get_i16();
    let last_offset_delta = (&buf[23..27]).get_i32();
    Some(BatchHeader {
        base_offset,
        size: 12 + batch_len as usize,
        last_offset: base_offset + last_offset_delta as i64,
        transactional: attributes & ATTR_TRANSACTIONAL != 0,
        control: attributes & ATTR_CONTROL != 0,
        producer_id: (&buf[43..51]).get_i64(),
    })
}

/// Decodes the whole batches in `records` (a trailing partial batch is ignored), appending the
/// records at or above `fetch_offset` that the isolation level lets through to `out`. Returns
/// the offset to fetch next (`fetch_offset` if nothing complete was found).
///
/// `aborted` is the partition's `aborted_transactions` (used only with [`READ_COMMITTED`]; any
/// order).
pub fn decode_fetched(
    topic: &str,
    partition: i32,
    fetch_offset: i64,
    mut records: Bytes,
    isolation_level: i8,
    aborted: &[AbortedTransaction],
    out: &mut Vec<ConsumerRecord>,
) -> i64 {
    let read_committed = isolation_level == READ_COMMITTED;
    // Aborted transactions by first offset, consumed front to back as the walk passes them.
    let mut pending: Vec<AbortedTransaction> = aborted.to_vec();
    pending.sort_by_key(|a| std::cmp::Reverse(a.first_offset));
    let mut aborted_producers: HashSet<i64> = HashSet::new();
    let mut next = fetch_offset;
    while let Some(h) = header(&records) {
        let mut batch = records.split_to(h.size);
        let batch_end = h.last_offset + 1;
        // Batches wholly below the fetch offset (the broker returns whole batches) still go
        // through the walk: an ABORT marker among them ends a producer's aborted transaction.
        if batch_end <= fetch_offset && !(read_committed && h.control) {
            next = next.max(batch_end);
            continue;
        }
        let decoded = match RecordBatchDecoder::decode(&mut batch) {
            Ok(set) => set.records,
            Err(e) => {
                tracing::warn!(topic, partition, base_offset = h.base_offset, error = %e, "undecodable batch skipped");
                next = next.max(batch_end);
                continue;
            }
        };
        if read_committed && h.producer_id >= 0 {
            while pending
                .last()
                .is_some_and(|a| a.first_offset <= h.last_offset)
            {
                let a = pending.pop().unwrap();
                aborted_producers.insert(a.producer_id);
            }
            if h.control {
                let is_abort = decoded.first().is_some_and(|r| {
                    r.key
                        .as_deref()
                        .and_then(|k| parse_end_txn_marker(k, r.value.as_deref()))
                        .is_some_and(|m| m.result == TxnResult::Abort)
                });
                if is_abort {
                    aborted_producers.remove(&h.producer_id);
                }
            } else if h.transactional && aborted_producers.contains(&h.producer_id) {
                tracing::trace!(
                    topic,
                    partition,
                    base_offset = h.base_offset,
                    producer_id = h.producer_id,
                    "skipping aborted batch"
                );
                next = next.max(batch_end);
                continue;
            }
        }
        if !h.control {
            for r in decoded {
                if r.control || r.offset < fetch_offset {
                    continue;
                }
                out.push(ConsumerRecord {
                    topic: topic.to_string(),
                    partition,
                    offset: r.offset,
                    timestamp: r.timestamp,
                    key: r.key,
                    value: r.value,
                    headers: r
                        .headers
                        .into_iter()
                        .map(|(k, v)| (k.to_string(), v))
                        .collect(),
                });
            }
        }
        next = next.max(batch_end);
    }
    next
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::producer::{Compression, ProducerBatch, ProducerIdAndEpoch, ProducerRecord};
    use bytes::BytesMut;
    use strom_protocol::memory_records::end_txn_marker;

    /// A batch of `n` records at `base` from producer `pid` (transactional when `txn`).
    fn batch(base: i64, n: usize, pid: i64, txn: bool) -> Bytes {
        let mut b = ProducerBatch::new("t", 0, 0);
        for i in 0..n {
            b.try_append(
                ProducerRecord {
                    topic: "t".into(),
                    value: Some(Bytes::from(format!("p{pid}-{}", base + i as i64))),
                    ..Default::default()
                },
                None,
                1 << 20,
            )
            .unwrap();
        }
        if pid >= 0 {
            b.set_producer_state(
                ProducerIdAndEpoch {
                    producer_id: pid,
                    epoch: 0,
                },
                0,
            )
            .unwrap();
        }
        b.transactional = txn;
        let mut bytes = BytesMut::from(&b.close(Compression::None).unwrap()[..]);
        // The base offset is not covered by the CRC.
        bytes[0..8].copy_from_slice(&base.to_be_bytes());
        bytes.freeze()
    }

    fn marker(offset: i64, pid: i64, result: TxnResult) -> Bytes {
        let mut bytes = BytesMut::from(&end_txn_marker(pid, 0, 0, result, 0)[..]);
        bytes[0..8].copy_from_slice(&offset.to_be_bytes());
        bytes.freeze()
    }

    fn concat(parts: &[Bytes]) -> Bytes {
        let mut b = BytesMut::new();
        for p in parts {
            b.extend_from_slice(p);
        }
        b.freeze()
    }

    fn offsets(out: &[ConsumerRecord]) -> Vec<i64> {
        out.iter().map(|r| r.offset).collect()
    }

    /// Producer 7 aborts [0, 3) (marker at 3), producer 8 commits [4, 6) (marker at 6), a
    /// non-transactional batch at 7, then producer 7 commits [8, 10) (marker at 10).
    fn log() -> Bytes {
        concat(&[
            batch(0, 2, 7, true),
            batch(2, 1, 7, true),
            marker(3, 7, TxnResult::Abort),
            batch(4, 2, 8, true),
            marker(6, 8, TxnResult::Commit),
            batch(7, 1, -1, false),
            batch(8, 2, 7, true),
            marker(10, 7, TxnResult::Commit),
        ])
    }

    const ABORTED: [AbortedTransaction; 1] = [AbortedTransaction {
        producer_id: 7,
        first_offset: 0,
    }];

    #[test]
    fn read_committed_drops_aborted_batches_and_markers() {
        let mut out = Vec::new();
        let next = decode_fetched("t", 0, 0, log(), READ_COMMITTED, &ABORTED, &mut out);
        assert_eq!(next, 11);
        assert_eq!(offsets(&out), vec![4, 5, 7, 8, 9]);
    }

    #[test]
    fn read_uncommitted_keeps_aborted_data_but_never_markers() {
        let mut out = Vec::new();
        let next = decode_fetched("t", 0, 0, log(), READ_UNCOMMITTED, &ABORTED, &mut out);
        assert_eq!(next, 11);
        assert_eq!(offsets(&out), vec![0, 1, 2, 4, 5, 7, 8, 9]);
    }

    #[test]
    fn producer_leaves_aborted_set_at_its_abort_marker() {
        // The same producer aborts twice; its committed transaction in between survives.
        let log = concat(&[
            batch(0, 1, 7, true),
            marker(1, 7, TxnResult::Abort),
            batch(2, 1, 7, true),
            marker(3, 7, TxnResult::Commit),
            batch(4, 2, 7, true),
            marker(6, 7, TxnResult::Abort),
        ]);
        let aborted = [
            AbortedTransaction {
                producer_id: 7,
                first_offset: 4,
            },
            AbortedTransaction {
                producer_id: 7,
                first_offset: 0,
            },
        ];
        let mut out = Vec::new();
        let next = decode_fetched("t", 0, 0, log, READ_COMMITTED, &aborted, &mut out);
        assert_eq!(next, 7);
        assert_eq!(offsets(&out), vec![2]);
    }

    #[test]
    fn fetch_offset_inside_the_log_and_partial_tail() {
        let full = log();
        let mut buf = BytesMut::from(&full[..]);
        let partial = batch(11, 3, 9, true);
        buf.extend_from_slice(&partial[..partial.len() - 5]);
        let mut out = Vec::new();
        let next = decode_fetched("t", 0, 5, buf.freeze(), READ_COMMITTED, &ABORTED, &mut out);
        assert_eq!(next, 11);
        assert_eq!(offsets(&out), vec![5, 7, 8, 9]);
    }

    #[test]
    fn open_transaction_without_entry_is_returned() {
        // Data the broker returned (below the LSO) with no aborted entry is committed data.
        let log = concat(&[batch(0, 2, 5, true), marker(2, 5, TxnResult::Commit)]);
        let mut out = Vec::new();
        let next = decode_fetched("t", 0, 0, log, READ_COMMITTED, &[], &mut out);
        assert_eq!((next, offsets(&out)), (3, vec![0, 1]));
    }
}

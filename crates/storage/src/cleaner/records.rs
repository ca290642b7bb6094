//! The records inside a v2 batch, as far as the cleaner needs them: parsed (after
//! decompression) into offset, timestamp, key and value, and written back into a batch that
//! keeps the original's header fields (Kafka's `MemoryRecords.buildRetainedRecordsInto`).
//!
//! Record layout (Kafka's `DefaultRecord`): varint length, attributes (i8, unused, written 0),
//! varlong timestamp delta, varint offset delta, varint key length (-1 = null) and key, varint
//! value length (-1 = null) and value, then the headers, which the cleaner carries over as raw
//! bytes. Offsets and timestamps are relative to the batch's base offset and base timestamp.
//! Compression is kafka-protocol's codecs, the ones the client side uses.

use std::borrow::Cow;

use bytes::BytesMut;
use strom_protocol::batch::{self, BatchView, HEADER_SIZE};
use strom_protocol::kafka::compression::{Compressor, Gzip, Lz4, Snappy, Zstd};

use crate::StorageError;

const COMPRESSION_MASK: i16 = 0x07;
const TIMESTAMP_TYPE_MASK: i16 = 0x08;
pub(crate) const DELETE_HORIZON_MASK: i16 = 0x40;
/// `RecordBatch.NO_TIMESTAMP`.
pub(crate) const NO_TIMESTAMP: i64 = -1;

fn corrupt(what: impl std::fmt::Display) -> StorageError {
    StorageError::CorruptRecord(format!("cleaner: {what}"))
}

/// One record of a batch, borrowing the (decompressed) records bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ParsedRecord<'a> {
    pub offset: i64,
    /// As Kafka reads it: the batch's max timestamp for LogAppendTime batches, else base
    /// timestamp plus delta.
    pub timestamp: i64,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    /// The header count and headers, unparsed.
    pub headers: &'a [u8],
    /// The record's bytes after its timestamp delta (offset delta, key, value, headers), when
    /// they are exactly what re-encoding them would write (attributes 0, shortest varints):
    /// a rewrite then copies them as they are.
    pub tail: Option<&'a [u8]>,
}

/// The batch's delete horizon (KIP-534), when attributes bit 6 says its base timestamp is one.
pub(crate) fn delete_horizon_ms(view: &BatchView<'_>) -> Option<i64> {
    (view.attributes() & DELETE_HORIZON_MASK != 0).then(|| view.base_timestamp())
}

/// The records section of `view`, decompressed.
pub(crate) fn records_bytes<'a>(view: &BatchView<'a>) -> Result<Cow<'a, [u8]>, StorageError> {
    let raw = view.records_bytes();
    match view.attributes() & COMPRESSION_MASK {
        0 => Ok(Cow::Borrowed(raw)),
        codec => strom_protocol::compression::decompress(codec, raw)
            .map(Cow::Owned)
            .map_err(|e| {
                corrupt(format!(
                    "decompressing batch at {}: {e}",
                    view.base_offset()
                ))
            }),
    }
}

/// `raw` compressed with the codec numbered `codec` (attributes bits 0-2).
fn compress(codec: i16, raw: &[u8], out: &mut Vec<u8>) -> Result<(), StorageError> {
    let fill = |tmp: &mut BytesMut| {
        tmp.extend_from_slice(raw);
        Ok(())
    };
    let r = match codec {
        0 => {
            out.extend_from_slice(raw);
            return Ok(());
        }
        1 => Gzip::compress(out, fill),
        2 => Snappy::compress(out, fill),
        3 => Lz4::compress(out, fill),
        4 => Zstd::compress(out, fill),
        n => return Err(corrupt(format!("unknown compression codec {n}"))),
    };
    r.map_err(|e| corrupt(format!("compressing: {e}")))
}

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    /// A varint, and whether it was written in its shortest form.
    fn varlong_canonical(&mut self) -> Result<(i64, bool), StorageError> {
        let at = self.pos;
        let v = self.varlong()?;
        Ok((v, self.pos - at == varlong_len(v)))
    }

    fn varlong(&mut self) -> Result<i64, StorageError> {
        let mut value: u64 = 0;
        let mut shift = 0;
        loop {
            let b = *self
                .buf
                .get(self.pos)
                .ok_or_else(|| corrupt("truncated varint"))?;
            self.pos += 1;
            value |= ((b & 0x7f) as u64) << shift;
            if b & 0x80 == 0 {
                break;
            }
            shift += 7;
            if shift > 63 {
                return Err(corrupt("varint too long"));
            }
        }
        Ok(((value >> 1) as i64) ^ -((value & 1) as i64))
    }

    fn varint(&mut self) -> Result<i32, StorageError> {
        let v = self.varlong()?;
        i32::try_from(v).map_err(|_| corrupt("varint out of range"))
    }

    fn bytes(&mut self, len: usize) -> Result<&'a [u8], StorageError> {
        let end = self
            .pos
            .checked_add(len)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| corrupt("record runs past its batch"))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    /// A length-prefixed nullable field, and whether its length was in its shortest form.
    fn nullable(&mut self) -> Result<(Option<&'a [u8]>, bool), StorageError> {
        let (len, canonical) = self.varlong_canonical()?;
        let len = i32::try_from(len).map_err(|_| corrupt("varint out of range"))?;
        if len < 0 {
            // Any negative length reads as null, which is written back as -1.
            Ok((None, canonical && len == -1))
        } else {
            self.bytes(len as usize).map(|b| (Some(b), canonical))
        }
    }
}

/// The records of a batch one by one, borrowing its (decompressed) records bytes.
pub(crate) struct RecordIter<'a> {
    cursor: Cursor<'a>,
    remaining: usize,
    base_offset: i64,
    base_timestamp: i64,
    /// `Some(max timestamp)` for a LogAppendTime batch.
    log_append_time: Option<i64>,
}

impl<'a> RecordIter<'a> {
    pub(crate) fn new(view: &BatchView<'_>, data: &'a [u8]) -> Self {
        Self {
            cursor: Cursor { buf: data, pos: 0 },
            remaining: view.records_count().max(0) as usize,
            base_offset: view.base_offset(),
            base_timestamp: view.base_timestamp(),
            log_append_time: (view.attributes() & TIMESTAMP_TYPE_MASK != 0)
                .then(|| view.max_timestamp()),
        }
    }

    fn parse_next(&mut self) -> Result<ParsedRecord<'a>, StorageError> {
        let len = self.cursor.varint()?;
        if len < 0 {
            return Err(corrupt(format!("negative record length {len}")));
        }
        let body = self.cursor.bytes(len as usize)?;
        let mut r = Cursor { buf: body, pos: 0 };
        let attributes = r.bytes(1)?[0];
        let ts_delta = r.varlong()?;
        let tail_start = r.pos;
        let (offset_delta, offset_canonical) = r.varlong_canonical()?;
        let offset_delta =
            i32::try_from(offset_delta).map_err(|_| corrupt("varint out of range"))?;
        let (key, key_canonical) = r.nullable()?;
        let (value, value_canonical) = r.nullable()?;
        let headers = &body[r.pos..];
        let canonical = attributes == 0 && offset_canonical && key_canonical && value_canonical;
        Ok(ParsedRecord {
            offset: self.base_offset + offset_delta as i64,
            timestamp: self
                .log_append_time
                .unwrap_or_else(|| self.base_timestamp.wrapping_add(ts_delta)),
            key,
            value,
            headers,
            tail: canonical.then(|| &body[tail_start..]),
        })
    }
}

impl<'a> Iterator for RecordIter<'a> {
    type Item = Result<ParsedRecord<'a>, StorageError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.remaining == 0 {
            return None;
        }
        let r = self.parse_next();
        // A corrupt record ends the batch.
        self.remaining = if r.is_ok() { self.remaining - 1 } else { 0 };
        Some(r)
    }
}

/// Parses the `count` records of `view` from its decompressed records bytes `data`.
pub(crate) fn parse_records<'a>(
    view: &BatchView<'_>,
    data: &'a [u8],
) -> Result<Vec<ParsedRecord<'a>>, StorageError> {
    let count = view.records_count().max(0) as usize;
    let mut out = Vec::with_capacity(count.min(data.len()));
    for r in RecordIter::new(view, data) {
        out.push(r?);
    }
    Ok(out)
}

/// Bytes of `v` as a zigzag varint.
fn varlong_len(v: i64) -> usize {
    let z = ((v << 1) ^ (v >> 63)) as u64;
    (64 - (z | 1).leading_zeros() as usize).div_ceil(7)
}

fn nullable_len(b: Option<&[u8]>) -> usize {
    match b {
        Some(b) => varlong_len(b.len() as i64) + b.len(),
        None => 1,
    }
}

fn put_varlong(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

fn put_nullable(out: &mut Vec<u8>, b: Option<&[u8]>) {
    match b {
        Some(b) => {
            put_varlong(out, b.len() as i64);
            out.extend_from_slice(b);
        }
        None => put_varlong(out, -1),
    }
}

/// Writes a header into `out[at..at + HEADER_SIZE]`, then the CRC over the rest.
#[allow(clippy::too_many_arguments)]
fn finish_header(
    out: &mut [u8],
    orig: &BatchView<'_>,
    attributes: i16,
    base_timestamp: i64,
    max_timestamp: i64,
    count: i32,
) {
    let len = (out.len() - batch::LOG_OVERHEAD) as i32;
    out[batch::BASE_OFFSET_OFFSET..][..8].copy_from_slice(&orig.base_offset().to_be_bytes());
    out[batch::LENGTH_OFFSET..][..4].copy_from_slice(&len.to_be_bytes());
    out[batch::PARTITION_LEADER_EPOCH_OFFSET..][..4]
        .copy_from_slice(&orig.partition_leader_epoch().to_be_bytes());
    out[batch::MAGIC_OFFSET] = batch::CURRENT_MAGIC as u8;
    out[batch::ATTRIBUTES_OFFSET..][..2].copy_from_slice(&attributes.to_be_bytes());
    // The original's last offset delta: the last sequence must survive (Kafka's
    // `overrideLastOffset`).
    out[batch::LAST_OFFSET_DELTA_OFFSET..][..4]
        .copy_from_slice(&orig.last_offset_delta().to_be_bytes());
    out[batch::BASE_TIMESTAMP_OFFSET..][..8].copy_from_slice(&base_timestamp.to_be_bytes());
    out[batch::MAX_TIMESTAMP_OFFSET..][..8].copy_from_slice(&max_timestamp.to_be_bytes());
    out[batch::PRODUCER_ID_OFFSET..][..8].copy_from_slice(&orig.producer_id().to_be_bytes());
    out[batch::PRODUCER_EPOCH_OFFSET..][..2].copy_from_slice(&orig.producer_epoch().to_be_bytes());
    out[batch::BASE_SEQUENCE_OFFSET..][..4].copy_from_slice(&orig.base_sequence().to_be_bytes());
    out[batch::RECORDS_COUNT_OFFSET..][..4].copy_from_slice(&count.to_be_bytes());
    let crc = crc32c::crc32c(&out[batch::ATTRIBUTES_OFFSET..]);
    out[batch::CRC_OFFSET..][..4].copy_from_slice(&crc.to_be_bytes());
}

/// Appends to `out` the batch `orig` with only `records` (in offset order, at least one)
/// left, as Kafka's `buildRetainedRecordsInto`: same base offset, last offset delta, producer
/// fields, leader epoch, timestamp type and codec; base timestamp the delete horizon if there
/// is one, else the first record's timestamp; max timestamp the records' (LogAppendTime: the
/// original's). Uncompressed records are written straight into `out`, each record's bytes
/// after its timestamp delta copied in one piece when they are already in their final form.
pub(crate) fn build_retained(
    orig: &BatchView<'_>,
    records: &[ParsedRecord<'_>],
    delete_horizon_ms: Option<i64>,
    out: &mut Vec<u8>,
) -> Result<(), StorageError> {
    let log_append = orig.attributes() & TIMESTAMP_TYPE_MASK != 0;
    let base_timestamp = delete_horizon_ms.unwrap_or(records[0].timestamp);
    let max_timestamp = if log_append {
        orig.max_timestamp()
    } else {
        records
            .iter()
            .map(|r| r.timestamp)
            .max()
            .unwrap_or(NO_TIMESTAMP)
    };
    let codec = orig.attributes() & COMPRESSION_MASK;
    let start = out.len();
    out.resize(start + HEADER_SIZE, 0);
    if codec == 0 {
        encode_records(orig, records, base_timestamp, out);
    } else {
        let mut raw = Vec::new();
        encode_records(orig, records, base_timestamp, &mut raw);
        compress(codec, &raw, out)?;
    }
    let mut attributes = orig.attributes() & !DELETE_HORIZON_MASK;
    if delete_horizon_ms.is_some() {
        attributes |= DELETE_HORIZON_MASK;
    }
    finish_header(
        &mut out[start..],
        orig,
        attributes,
        base_timestamp,
        max_timestamp,
        records.len() as i32,
    );
    Ok(())
}

/// Kafka's `DefaultRecord.writeTo` for each record, timestamps relative to `base_timestamp`
/// and offsets to the batch's base offset, attributes 0, headers as they were.
fn encode_records(
    orig: &BatchView<'_>,
    records: &[ParsedRecord<'_>],
    base_timestamp: i64,
    out: &mut Vec<u8>,
) {
    for r in records {
        let ts_delta = r.timestamp.wrapping_sub(base_timestamp);
        match r.tail {
            Some(tail) => {
                let body_len = 1 + varlong_len(ts_delta) + tail.len();
                put_varlong(out, body_len as i64);
                out.push(0);
                put_varlong(out, ts_delta);
                out.extend_from_slice(tail);
            }
            None => {
                let offset_delta = r.offset - orig.base_offset();
                let body_len = 1
                    + varlong_len(ts_delta)
                    + varlong_len(offset_delta)
                    + nullable_len(r.key)
                    + nullable_len(r.value)
                    + r.headers.len();
                put_varlong(out, body_len as i64);
                out.push(0);
                put_varlong(out, ts_delta);
                put_varlong(out, offset_delta);
                put_nullable(out, r.key);
                put_nullable(out, r.value);
                out.extend_from_slice(r.headers);
            }
        }
    }
}

/// Kafka's `DefaultRecordBatch.writeEmptyHeader`: a batch of no records that keeps the
/// original's offsets, producer fields and max timestamp (RETAIN_EMPTY), uncompressed, base
/// timestamp -1, no delete horizon.
pub(crate) fn build_empty(orig: &BatchView<'_>) -> Vec<u8> {
    let mut out = vec![0u8; HEADER_SIZE];
    let attributes = orig.attributes() & !(COMPRESSION_MASK | DELETE_HORIZON_MASK);
    finish_header(
        &mut out,
        orig,
        attributes,
        NO_TIMESTAMP,
        orig.max_timestamp(),
        0,
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use strom_protocol::records::{
        Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions,
        TimestampType,
    };

    fn batch(compression: Compression, n: i64) -> Vec<u8> {
        let records: Vec<Record> = (0..n)
            .map(|i| Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: 3,
                producer_id: 9,
                producer_epoch: 1,
                timestamp_type: TimestampType::Creation,
                offset: 100 + i,
                sequence: 5 + i as i32,
                timestamp: 1_000 + i,
                key: Some(Bytes::from(format!("k{i}"))),
                value: (i % 2 == 0).then(|| Bytes::from(format!("v{i}"))),
                headers: [("h".into(), Some(Bytes::from_static(b"x")))]
                    .into_iter()
                    .collect(),
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

    #[test]
    fn parse_filter_and_rebuild_keeps_offsets_and_codec() {
        for compression in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let b = batch(compression, 5);
            let view = BatchView::parse(&b).unwrap();
            let data = records_bytes(&view).unwrap();
            let recs = parse_records(&view, &data).unwrap();
            assert_eq!(recs.len(), 5);
            assert_eq!(recs[3].offset, 103);
            assert_eq!(recs[3].key, Some(&b"k3"[..]));
            assert_eq!(recs[3].value, None);
            assert_eq!(recs[2].timestamp, 1_002);
            // Keep records 1 and 3: base offset, last offset delta, sequence stay.
            let kept = [recs[1], recs[3]];
            let mut out = Vec::new();
            build_retained(&view, &kept, Some(77_000), &mut out).unwrap();
            let v2 = BatchView::parse(&out).unwrap();
            v2.validate().unwrap();
            assert_eq!(v2.size(), out.len());
            assert_eq!(v2.base_offset(), 100);
            assert_eq!(v2.last_offset(), 104);
            assert_eq!(v2.base_sequence(), 5);
            assert_eq!(v2.records_count(), 2);
            assert_eq!(v2.compression(), view.compression());
            assert_eq!(v2.partition_leader_epoch(), 3);
            assert_eq!(v2.max_timestamp(), 1_003);
            assert_eq!(delete_horizon_ms(&v2), Some(77_000));
            let decoded = RecordBatchDecoder::decode(&mut Bytes::from(out.clone())).unwrap();
            let got: Vec<_> = decoded
                .records
                .iter()
                .map(|r| (r.offset, r.timestamp, r.key.clone(), r.value.clone()))
                .collect();
            assert_eq!(
                got,
                vec![
                    (101, 1_001, Some(Bytes::from("k1")), None),
                    (103, 1_003, Some(Bytes::from("k3")), None)
                ]
            );
            assert_eq!(decoded.records[0].headers.len(), 1);
            // Read back again by the cleaner: timestamps relative to the horizon survive.
            let data2 = records_bytes(&v2).unwrap();
            let again = parse_records(&v2, &data2).unwrap();
            assert_eq!(again[1].timestamp, 1_003);
            assert_eq!(again[1].offset, 103);
        }
    }

    #[test]
    fn empty_batch_keeps_offsets_and_producer() {
        let b = batch(Compression::Gzip, 3);
        let view = BatchView::parse(&b).unwrap();
        let e = build_empty(&view);
        let v = BatchView::parse(&e).unwrap();
        v.validate().unwrap();
        assert_eq!((v.base_offset(), v.last_offset()), (100, 102));
        assert_eq!(v.records_count(), 0);
        assert_eq!(v.base_sequence(), 5);
        assert_eq!(v.last_sequence(), 7);
        assert_eq!(v.producer_id(), 9);
        assert_eq!(v.base_timestamp(), -1);
        assert_eq!(v.max_timestamp(), 1_002);
        assert_eq!(v.compression().name(), "none");
    }
}

/// The rewrite of retained records compared with the encoder it replaced (one record body at a
/// time, every field re-encoded): the same bytes for every codec, timestamp type, horizon,
/// subset of records, null key or value, headers, and for records whose varints are not in
/// their shortest form or whose attributes byte is not 0.
#[cfg(test)]
mod equivalence_tests {
    use super::*;
    use bytes::Bytes;
    use strom_protocol::records::{
        Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };

    /// The previous `build_retained`, verbatim but for its name.
    fn reference(
        orig: &BatchView<'_>,
        records: &[ParsedRecord<'_>],
        delete_horizon_ms: Option<i64>,
    ) -> Vec<u8> {
        let log_append = orig.attributes() & TIMESTAMP_TYPE_MASK != 0;
        let base_timestamp = delete_horizon_ms.unwrap_or(records[0].timestamp);
        let max_timestamp = if log_append {
            orig.max_timestamp()
        } else {
            records
                .iter()
                .map(|r| r.timestamp)
                .max()
                .unwrap_or(NO_TIMESTAMP)
        };
        let mut raw = Vec::new();
        let mut body = Vec::new();
        for r in records {
            body.clear();
            body.push(0);
            put_varlong(&mut body, r.timestamp.wrapping_sub(base_timestamp));
            put_varlong(&mut body, r.offset - orig.base_offset());
            put_nullable(&mut body, r.key);
            put_nullable(&mut body, r.value);
            body.extend_from_slice(r.headers);
            put_varlong(&mut raw, body.len() as i64);
            raw.extend_from_slice(&body);
        }
        let codec = orig.attributes() & COMPRESSION_MASK;
        let mut out = vec![0u8; HEADER_SIZE];
        compress(codec, &raw, &mut out).unwrap();
        let mut attributes = orig.attributes() & !DELETE_HORIZON_MASK;
        if delete_horizon_ms.is_some() {
            attributes |= DELETE_HORIZON_MASK;
        }
        finish_header(
            &mut out,
            orig,
            attributes,
            base_timestamp,
            max_timestamp,
            records.len() as i32,
        );
        out
    }

    fn encode(compression: Compression, log_append: bool, n: i64, seed: u64) -> Vec<u8> {
        let mut x = seed;
        let records: Vec<Record> = (0..n)
            .map(|i| {
                x = x
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                let r = x >> 33;
                Record {
                    transactional: false,
                    control: false,
                    delete_horizon: false,
                    partition_leader_epoch: 7,
                    producer_id: 42,
                    producer_epoch: 3,
                    timestamp_type: if log_append {
                        TimestampType::LogAppend
                    } else {
                        TimestampType::Creation
                    },
                    offset: 1_000 + i,
                    sequence: i as i32,
                    // Deltas of every size, some negative.
                    timestamp: 1_700_000_000_000 + (r % 5_000_000) as i64 - 1_000_000,
                    key: (!r.is_multiple_of(7)).then(|| Bytes::from(format!("key-{}", r % 100))),
                    value: (!r.is_multiple_of(5))
                        .then(|| Bytes::from(vec![b'v'; (r % 300) as usize])),
                    headers: if r.is_multiple_of(3) {
                        [("h".into(), Some(Bytes::from_static(b"x")))]
                            .into_iter()
                            .collect()
                    } else {
                        Default::default()
                    },
                }
            })
            .collect();
        let mut buf = bytes::BytesMut::new();
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

    fn compare(batch: &[u8]) -> usize {
        let view = BatchView::parse(batch).unwrap();
        let data = records_bytes(&view).unwrap();
        let recs = parse_records(&view, &data).unwrap();
        let mut compared = 0;
        for mask in [u64::MAX, 1, 2, 0b1010_1010, 0xF0F0_F0F0_F0F0_F0F0, 1 << 40] {
            let kept: Vec<ParsedRecord<'_>> = recs
                .iter()
                .enumerate()
                .filter(|(i, _)| mask & (1 << (i % 64)) != 0)
                .map(|(_, r)| *r)
                .collect();
            if kept.is_empty() {
                continue;
            }
            for horizon in [None, Some(1_700_000_500_000)] {
                let mut out = b"previous batch".to_vec();
                build_retained(&view, &kept, horizon, &mut out).unwrap();
                assert_eq!(&out[..14], b"previous batch");
                assert_eq!(out[14..], reference(&view, &kept, horizon)[..]);
                compared += 1;
            }
        }
        compared
    }

    #[test]
    fn retained_batches_are_byte_identical_to_the_previous_encoder() {
        let mut compared = 0;
        for (seed, compression) in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ]
        .into_iter()
        .enumerate()
        {
            for log_append in [false, true] {
                for n in [1, 2, 17, 64] {
                    compared += compare(&encode(compression, log_append, n, seed as u64 + 1));
                }
            }
        }
        assert!(compared > 300, "{compared}");
    }

    /// A varint written in `len` bytes (zero padding continuation bytes when longer than
    /// needed).
    fn long_varint(out: &mut Vec<u8>, v: i64, len: usize) {
        let mut z = ((v << 1) ^ (v >> 63)) as u64;
        for i in 0..len {
            let last = i + 1 == len;
            out.push((z & 0x7f) as u8 | if last { 0 } else { 0x80 });
            z >>= 7;
        }
    }

    #[test]
    fn records_not_in_shortest_form_are_re_encoded_as_before() {
        // Four records: attributes 5; an overlong offset delta; an overlong key length and a
        // null value written as -7; a plain one.
        let mut raw = Vec::new();
        for i in 0..4i64 {
            let mut body = vec![if i == 0 { 5 } else { 0 }];
            long_varint(&mut body, i * 3, 1); // timestamp delta
            long_varint(&mut body, i, if i == 1 { 3 } else { 1 });
            long_varint(&mut body, 2, if i == 2 { 2 } else { 1 });
            body.extend_from_slice(format!("k{i}").as_bytes());
            if i == 2 {
                long_varint(&mut body, -7, 1);
            } else {
                long_varint(&mut body, 1, 1);
                body.push(b'v');
            }
            long_varint(&mut body, 0, 1); // no headers
            long_varint(&mut raw, body.len() as i64, 1);
            raw.extend_from_slice(&body);
        }
        let template = encode(Compression::None, false, 4, 9);
        let mut batch = template[..HEADER_SIZE].to_vec();
        batch.extend_from_slice(&raw);
        let len = (batch.len() - batch::LOG_OVERHEAD) as i32;
        batch[batch::LENGTH_OFFSET..][..4].copy_from_slice(&len.to_be_bytes());
        let view = BatchView::parse(&batch).unwrap();
        let recs = parse_records(&view, &raw).unwrap();
        assert_eq!(recs.len(), 4);
        assert_eq!(recs[2].value, None);
        assert!(recs[..3].iter().all(|r| r.tail.is_none()));
        assert!(recs[3].tail.is_some());
        assert!(compare(&batch) > 0);
    }
}

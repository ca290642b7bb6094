//! A zero-copy view of RecordBatch v2 ("magic 2") headers.
//!
//! Layout (big endian), as in Kafka's `DefaultRecordBatch`:
//!
//! ```text
//! 0  baseOffset: int64          8  batchLength: int32       12 partitionLeaderEpoch: int32
//! 16 magic: int8                17 crc: uint32 (CRC32C of bytes 21..end)
//! 21 attributes: int16          23 lastOffsetDelta: int32   27 baseTimestamp: int64
//! 35 maxTimestamp: int64        43 producerId: int64        51 producerEpoch: int16
//! 53 baseSequence: int32        57 recordsCount: int32      61 records...
//! ```
//!
//! The broker only ever reads these 61 bytes; records stay opaque bytes.

use thiserror::Error;

pub const BASE_OFFSET_OFFSET: usize = 0;
pub const LENGTH_OFFSET: usize = 8;
pub const PARTITION_LEADER_EPOCH_OFFSET: usize = 12;
pub const MAGIC_OFFSET: usize = 16;
pub const CRC_OFFSET: usize = 17;
pub const ATTRIBUTES_OFFSET: usize = 21;
pub const LAST_OFFSET_DELTA_OFFSET: usize = 23;
pub const BASE_TIMESTAMP_OFFSET: usize = 27;
pub const MAX_TIMESTAMP_OFFSET: usize = 35;
pub const PRODUCER_ID_OFFSET: usize = 43;
pub const PRODUCER_EPOCH_OFFSET: usize = 51;
pub const BASE_SEQUENCE_OFFSET: usize = 53;
pub const RECORDS_COUNT_OFFSET: usize = 57;
/// Size of the fixed batch header.
pub const HEADER_SIZE: usize = 61;
/// `baseOffset` + `batchLength`: the part of the header not counted in `batchLength`.
pub const LOG_OVERHEAD: usize = 12;
pub const CURRENT_MAGIC: i8 = 2;

const COMPRESSION_MASK: i16 = 0x07;
const TIMESTAMP_TYPE_MASK: i16 = 0x08;
const TRANSACTIONAL_MASK: i16 = 0x10;
const CONTROL_MASK: i16 = 0x20;
const DELETE_HORIZON_MASK: i16 = 0x40;

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum BatchError {
    /// Fewer bytes than a header or than the declared length: a torn write or a short frame.
    #[error("truncated batch: need {needed} bytes, have {available}")]
    Truncated { needed: usize, available: usize },
    #[error("unsupported magic {0}")]
    UnsupportedMagic(i8),
    #[error("invalid batch length {0}")]
    InvalidLength(i32),
    #[error("CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch { stored: u32, computed: u32 },
    #[error("invalid record count {count} for last offset delta {last_offset_delta}")]
    InvalidCount { count: i32, last_offset_delta: i32 },
    /// A negative last offset delta, or one that takes the last offset past `i64::MAX`.
    #[error("invalid last offset delta {last_offset_delta} for base offset {base_offset}")]
    InvalidOffsetDelta {
        base_offset: i64,
        last_offset_delta: i32,
    },
}

/// The compression codec of a batch (attributes bits 0-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompressionType {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
    Unknown(u8),
}

impl CompressionType {
    pub fn from_id(id: u8) -> Self {
        match id {
            0 => Self::None,
            1 => Self::Gzip,
            2 => Self::Snappy,
            3 => Self::Lz4,
            4 => Self::Zstd,
            n => Self::Unknown(n),
        }
    }

    /// The name Kafka's tools print (`compresscodec: none`).
    pub fn name(&self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Gzip => "gzip",
            Self::Snappy => "snappy",
            Self::Lz4 => "lz4",
            Self::Zstd => "zstd",
            Self::Unknown(_) => "unknown",
        }
    }
}

fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}
fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn be_i64(b: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// A borrowed view over one whole batch (header and records).
#[derive(Clone, Copy)]
pub struct BatchView<'a> {
    bytes: &'a [u8],
}

impl std::fmt::Debug for BatchView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchView")
            .field("base_offset", &self.base_offset())
            .field("last_offset_delta", &self.last_offset_delta())
            .field("size", &self.size())
            .field("producer_id", &self.producer_id())
            .field("base_sequence", &self.base_sequence())
            .finish()
    }
}

impl<'a> BatchView<'a> {
    /// Views the batch at the start of `buf`, checking only that the header and the declared
    /// length fit. The batch may be followed by more bytes; [`BatchView::bytes`] covers just it.
    pub fn parse(buf: &'a [u8]) -> Result<Self, BatchError> {
        let view = Self::parse_unchecked_offsets(buf)?;
        check_offset_delta(view.base_offset(), view.last_offset_delta())?;
        Ok(view)
    }

    /// [`Self::parse`] without the offset-delta check, for a produced batch whose header the
    /// leader's `LogValidator` judges field by field as Kafka does (a negative last offset
    /// delta is INVALID_RECORD there, not a corrupt batch). Its base offset is 0, so
    /// [`Self::last_offset`] cannot overflow.
    pub fn parse_unchecked_offsets(buf: &'a [u8]) -> Result<Self, BatchError> {
        let size = peek_batch_size(buf)?;
        if buf.len() < size {
            return Err(BatchError::Truncated {
                needed: size,
                available: buf.len(),
            });
        }
        let bytes = &buf[..size];
        let magic = bytes[MAGIC_OFFSET] as i8;
        if magic != CURRENT_MAGIC {
            return Err(BatchError::UnsupportedMagic(magic));
        }
        if bytes.len() < HEADER_SIZE {
            return Err(BatchError::Truncated {
                needed: HEADER_SIZE,
                available: bytes.len(),
            });
        }
        Ok(Self { bytes })
    }

    /// Full structural validation of a batch: magic, length, count and CRC32C. This is what the
    /// broker runs on produce and on recovery.
    pub fn validate(&self) -> Result<(), BatchError> {
        let count = self.records_count();
        let delta = self.last_offset_delta();
        if count < 0 || delta < 0 || (count > 0 && (delta as i64) + 1 < count as i64) {
            return Err(BatchError::InvalidCount {
                count,
                last_offset_delta: delta,
            });
        }
        let stored = self.crc();
        let computed = self.compute_crc();
        if stored != computed {
            return Err(BatchError::CrcMismatch { stored, computed });
        }
        Ok(())
    }

    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }
    /// Total bytes of the batch including the 12-byte log overhead.
    pub fn size(&self) -> usize {
        self.bytes.len()
    }
    pub fn base_offset(&self) -> i64 {
        be_i64(self.bytes, BASE_OFFSET_OFFSET)
    }
    pub fn batch_length(&self) -> i32 {
        be_i32(self.bytes, LENGTH_OFFSET)
    }
    pub fn partition_leader_epoch(&self) -> i32 {
        be_i32(self.bytes, PARTITION_LEADER_EPOCH_OFFSET)
    }
    pub fn magic(&self) -> i8 {
        self.bytes[MAGIC_OFFSET] as i8
    }
    pub fn crc(&self) -> u32 {
        be_i32(self.bytes, CRC_OFFSET) as u32
    }
    pub fn compute_crc(&self) -> u32 {
        crc32c::crc32c(&self.bytes[ATTRIBUTES_OFFSET..])
    }
    pub fn attributes(&self) -> i16 {
        be_i16(self.bytes, ATTRIBUTES_OFFSET)
    }
    pub fn compression(&self) -> CompressionType {
        CompressionType::from_id((self.attributes() & COMPRESSION_MASK) as u8)
    }
    /// True when timestamps are LogAppendTime, false for CreateTime.
    pub fn is_log_append_time(&self) -> bool {
        self.attributes() & TIMESTAMP_TYPE_MASK != 0
    }
    pub fn is_transactional(&self) -> bool {
        self.attributes() & TRANSACTIONAL_MASK != 0
    }
    pub fn is_control(&self) -> bool {
        self.attributes() & CONTROL_MASK != 0
    }
    pub fn has_delete_horizon(&self) -> bool {
        self.attributes() & DELETE_HORIZON_MASK != 0
    }
    pub fn last_offset_delta(&self) -> i32 {
        be_i32(self.bytes, LAST_OFFSET_DELTA_OFFSET)
    }
    pub fn last_offset(&self) -> i64 {
        self.base_offset() + self.last_offset_delta() as i64
    }
    /// The offset after this batch.
    pub fn next_offset(&self) -> i64 {
        self.last_offset() + 1
    }
    pub fn base_timestamp(&self) -> i64 {
        be_i64(self.bytes, BASE_TIMESTAMP_OFFSET)
    }
    pub fn max_timestamp(&self) -> i64 {
        be_i64(self.bytes, MAX_TIMESTAMP_OFFSET)
    }
    pub fn producer_id(&self) -> i64 {
        be_i64(self.bytes, PRODUCER_ID_OFFSET)
    }
    pub fn producer_epoch(&self) -> i16 {
        be_i16(self.bytes, PRODUCER_EPOCH_OFFSET)
    }
    pub fn base_sequence(&self) -> i32 {
        be_i32(self.bytes, BASE_SEQUENCE_OFFSET)
    }
    /// The last sequence, wrapping at `i32::MAX` as Kafka's `DefaultRecordBatch.lastSequence`.
    pub fn last_sequence(&self) -> i32 {
        last_sequence(self.base_sequence(), self.last_offset_delta())
    }
    pub fn records_count(&self) -> i32 {
        be_i32(self.bytes, RECORDS_COUNT_OFFSET)
    }
    /// The records section (possibly compressed).
    pub fn records_bytes(&self) -> &'a [u8] {
        &self.bytes[HEADER_SIZE..]
    }
}

/// A batch's last offset must not precede its base offset nor pass `i64::MAX`; every header
/// reader checks this once so later arithmetic on offsets cannot overflow.
pub fn check_offset_delta(base_offset: i64, last_offset_delta: i32) -> Result<(), BatchError> {
    if last_offset_delta < 0 || base_offset.checked_add(last_offset_delta as i64).is_none() {
        return Err(BatchError::InvalidOffsetDelta {
            base_offset,
            last_offset_delta,
        });
    }
    Ok(())
}

/// `base + delta` with Kafka's wrap at `i32::MAX` (`DefaultRecordBatch.incrementSequence`);
/// -1 (no sequence) stays -1. Computed in i64 so hostile headers cannot overflow it.
pub fn last_sequence(base: i32, delta: i32) -> i32 {
    if base == -1 {
        return -1;
    }
    let sum = base as i64 + delta as i64;
    if sum > i32::MAX as i64 {
        (sum - i32::MAX as i64 - 1) as i32
    } else {
        sum as i32
    }
}

/// The inverse of [`last_sequence`]: the first sequence of a batch from its last one.
pub fn first_sequence(last: i32, delta: i32) -> i32 {
    if last == -1 {
        return -1;
    }
    let diff = last as i64 - delta as i64;
    if diff < 0 {
        (i32::MAX as i64 + diff + 1) as i32
    } else {
        diff as i32
    }
}

/// Returns the total size (with log overhead) that the batch starting at `buf` declares,
/// checking the length field is sane. Needs at least the 17 bytes up to `magic`.
pub fn peek_batch_size(buf: &[u8]) -> Result<usize, BatchError> {
    if buf.len() < MAGIC_OFFSET + 1 {
        return Err(BatchError::Truncated {
            needed: HEADER_SIZE,
            available: buf.len(),
        });
    }
    let length = be_i32(buf, LENGTH_OFFSET);
    if (length as i64) < (HEADER_SIZE - LOG_OVERHEAD) as i64 {
        return Err(BatchError::InvalidLength(length));
    }
    Ok(LOG_OVERHEAD + length as usize)
}

/// Patches a batch in place: the CRC does not cover these two fields, so no recomputation.
pub fn set_base_offset(batch: &mut [u8], base_offset: i64) {
    batch[BASE_OFFSET_OFFSET..BASE_OFFSET_OFFSET + 8].copy_from_slice(&base_offset.to_be_bytes());
}

pub fn set_partition_leader_epoch(batch: &mut [u8], epoch: i32) {
    batch[PARTITION_LEADER_EPOCH_OFFSET..PARTITION_LEADER_EPOCH_OFFSET + 4]
        .copy_from_slice(&epoch.to_be_bytes());
}

/// Sets LogAppendTime: the timestamp-type bit and maxTimestamp, then recomputes the CRC (both
/// fields are covered by it), as Kafka's `setMaxTimestamp` does.
pub fn set_log_append_time(batch: &mut [u8], now_ms: i64) {
    set_max_timestamp(batch, true, now_ms);
}

/// Kafka's `DefaultRecordBatch.setMaxTimestamp`: when the timestamp type (`log_append_time`) or
/// maxTimestamp differs from the header's, sets both and recomputes the CRC (it covers them);
/// otherwise leaves the batch alone, so the common case costs no CRC pass. True if it changed.
pub fn set_max_timestamp(batch: &mut [u8], log_append_time: bool, max_timestamp: i64) -> bool {
    let attrs = be_i16(batch, ATTRIBUTES_OFFSET);
    let is_lat = attrs & TIMESTAMP_TYPE_MASK != 0;
    if is_lat == log_append_time && be_i64(batch, MAX_TIMESTAMP_OFFSET) == max_timestamp {
        return false;
    }
    let attrs = if log_append_time {
        attrs | TIMESTAMP_TYPE_MASK
    } else {
        attrs & !TIMESTAMP_TYPE_MASK
    };
    batch[ATTRIBUTES_OFFSET..ATTRIBUTES_OFFSET + 2].copy_from_slice(&attrs.to_be_bytes());
    batch[MAX_TIMESTAMP_OFFSET..MAX_TIMESTAMP_OFFSET + 8]
        .copy_from_slice(&max_timestamp.to_be_bytes());
    let crc = crc32c::crc32c(&batch[ATTRIBUTES_OFFSET..]);
    batch[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
    true
}

/// Iterates over the batches in a buffer of concatenated batches (a produce request's records, a
/// segment read). Stops at the first error; [`BatchIter::valid_bytes`] tells how far it got,
/// which is what recovery truncates to.
pub struct BatchIter<'a> {
    buf: &'a [u8],
    pos: usize,
    failed: bool,
}

impl<'a> BatchIter<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Self {
            buf,
            pos: 0,
            failed: false,
        }
    }

    /// Bytes consumed by the batches returned so far.
    pub fn valid_bytes(&self) -> usize {
        self.pos
    }
}

impl<'a> Iterator for BatchIter<'a> {
    type Item = Result<BatchView<'a>, BatchError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.buf.len() {
            return None;
        }
        match BatchView::parse(&self.buf[self.pos..]) {
            Ok(view) => {
                self.pos += view.size();
                Some(Ok(view))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::records::{
        Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };

    pub(crate) fn encode(n: usize, compression: Compression) -> Vec<u8> {
        let records: Vec<Record> = (0..n)
            .map(|i| Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: -1,
                producer_id: 7,
                producer_epoch: 0,
                timestamp_type: TimestampType::Creation,
                offset: i as i64,
                sequence: i as i32,
                timestamp: 1_700_000_000_000 + i as i64,
                key: Some(bytes::Bytes::from(format!("k{i}"))),
                value: Some(bytes::Bytes::from(format!("v{i}"))),
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

    #[test]
    fn parses_header_fields() {
        let b = encode(3, Compression::None);
        let v = BatchView::parse(&b).unwrap();
        assert_eq!(v.size(), b.len());
        assert_eq!(v.magic(), 2);
        assert_eq!(v.records_count(), 3);
        assert_eq!(v.last_offset_delta(), 2);
        assert_eq!(v.producer_id(), 7);
        assert_eq!(v.base_sequence(), 0);
        assert_eq!(v.last_sequence(), 2);
        assert_eq!(v.base_timestamp(), 1_700_000_000_000);
        assert_eq!(v.max_timestamp(), 1_700_000_000_002);
        assert_eq!(v.compression(), CompressionType::None);
        v.validate().unwrap();
    }

    #[test]
    fn compressed_batch_keeps_codec() {
        let b = encode(10, Compression::Lz4);
        let v = BatchView::parse(&b).unwrap();
        assert_eq!(v.compression(), CompressionType::Lz4);
        v.validate().unwrap();
    }

    #[test]
    fn crc_detects_flipped_byte() {
        let mut b = encode(2, Compression::None);
        let last = b.len() - 1;
        b[last] ^= 0xff;
        let v = BatchView::parse(&b).unwrap();
        assert!(matches!(v.validate(), Err(BatchError::CrcMismatch { .. })));
    }

    #[test]
    fn patching_offset_and_epoch_keeps_crc_valid() {
        let mut b = encode(2, Compression::None);
        set_base_offset(&mut b, 1234);
        set_partition_leader_epoch(&mut b, 9);
        let v = BatchView::parse(&b).unwrap();
        assert_eq!(v.base_offset(), 1234);
        assert_eq!(v.last_offset(), 1235);
        assert_eq!(v.partition_leader_epoch(), 9);
        v.validate().unwrap();
    }

    #[test]
    fn log_append_time_recomputes_crc() {
        let mut b = encode(2, Compression::None);
        set_log_append_time(&mut b, 42);
        let v = BatchView::parse(&b).unwrap();
        assert!(v.is_log_append_time());
        assert_eq!(v.max_timestamp(), 42);
        v.validate().unwrap();
    }

    #[test]
    fn truncated_and_bad_magic_and_bad_length() {
        let b = encode(2, Compression::None);
        assert!(matches!(
            BatchView::parse(&b[..b.len() - 1]),
            Err(BatchError::Truncated { .. })
        ));
        assert!(matches!(
            BatchView::parse(&b[..10]),
            Err(BatchError::Truncated { .. })
        ));
        let mut m = b.clone();
        m[MAGIC_OFFSET] = 1;
        assert_eq!(
            BatchView::parse(&m).unwrap_err(),
            BatchError::UnsupportedMagic(1)
        );
        let mut l = b.clone();
        l[LENGTH_OFFSET..LENGTH_OFFSET + 4].copy_from_slice(&3i32.to_be_bytes());
        assert_eq!(
            BatchView::parse(&l).unwrap_err(),
            BatchError::InvalidLength(3)
        );
    }

    #[test]
    fn iterator_stops_at_torn_tail() {
        let mut buf = encode(2, Compression::None);
        let one = buf.len();
        buf.extend(encode(3, Compression::None));
        buf.extend(&encode(1, Compression::None)[..20]);
        let mut it = BatchIter::new(&buf);
        assert!(it.next().unwrap().is_ok());
        assert!(it.next().unwrap().is_ok());
        assert!(it.next().unwrap().is_err());
        assert!(it.next().is_none());
        assert_eq!(it.valid_bytes(), buf.len() - 20);
        assert!(it.valid_bytes() > one);
    }

    #[test]
    fn hostile_offsets_are_rejected_not_overflowed() {
        let mut b = encode(2, Compression::None);
        b[LAST_OFFSET_DELTA_OFFSET..LAST_OFFSET_DELTA_OFFSET + 4]
            .copy_from_slice(&(-1i32).to_be_bytes());
        assert!(matches!(
            BatchView::parse(&b),
            Err(BatchError::InvalidOffsetDelta { .. })
        ));
        let mut b = encode(2, Compression::None);
        set_base_offset(&mut b, i64::MAX);
        assert!(matches!(
            BatchView::parse(&b),
            Err(BatchError::InvalidOffsetDelta { .. })
        ));
        let mut b = encode(2, Compression::None);
        b[LAST_OFFSET_DELTA_OFFSET..LAST_OFFSET_DELTA_OFFSET + 4]
            .copy_from_slice(&i32::MAX.to_be_bytes());
        let v = BatchView::parse(&b).unwrap();
        assert!(v.validate().is_err());
        assert_eq!(last_sequence(5, i32::MAX), 4);
        // Nonsense inputs give nonsense answers, never a panic.
        let _ = last_sequence(i32::MIN, -5);
        let _ = first_sequence(i32::MIN, i32::MAX);
    }

    #[test]
    fn last_sequence_wraps() {
        let mut b = encode(3, Compression::None);
        b[BASE_SEQUENCE_OFFSET..BASE_SEQUENCE_OFFSET + 4]
            .copy_from_slice(&(i32::MAX - 1).to_be_bytes());
        let v = BatchView::parse(&b).unwrap();
        assert_eq!(v.last_sequence(), 0);
        assert_eq!(first_sequence(0, 2), i32::MAX - 1);
        assert_eq!(first_sequence(10, 2), 8);
        assert_eq!(first_sequence(-1, 2), -1);
    }
}

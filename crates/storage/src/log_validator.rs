//! Kafka's `LogValidator` (`storage/.../log/LogValidator.java`, 4.4): what the leader checks in
//! a batch before it assigns offsets, on every leader append (clients and coordinators):
//!
//! - the batch (client appends): offset range against the record count, no control batch, a
//!   sequence with every producer id (`validateBatch`);
//! - every record: its structure (walked, never decoded into objects), a key on compacted
//!   topics (`validateKey`), its timestamp against `message.timestamp.before.max.ms` /
//!   `message.timestamp.after.max.ms` on a CreateTime topic, and no LogAppendTime batch from a
//!   producer on a LogAppendTime topic (`validateTimestamp`);
//! - record errors are gathered for the whole batch and refuse it together
//!   (`processRecordErrors`): INVALID_TIMESTAMP if any is about a timestamp, else INVALID_RECORD,
//!   each with its record index for the produce response;
//! - the batch's maxTimestamp is what its records hold, not what its header claims (LogAppendTime
//!   topics: the append time), so a header claiming a far-future time cannot pin its segment
//!   or skew the time index.
//!
//! The common case costs one walk over the records' varints: an uncompressed batch is walked in
//! place, a compressed one whose codec is the topic's (`compression.type=producer` or equal) is
//! streamed through its decoder (a window of memory, never the whole section) and stays
//! byte-for-byte what the producer sent; only the header is patched afterwards. A batch whose
//! codec differs from the topic's `compression.type` is re-encoded as Kafka does
//! (`buildRecordsAndAssignOffsets`): offsets 0..n, the topic's codec and level, streamed from
//! decoder to encoder record by record.

use std::io::{BufRead, BufReader, Write};

use strom_protocol::batch::BatchView;
use strom_protocol::compression::{RecordsReader, RecordsWriter};

use crate::config::TimestampType;
use crate::{AppendOrigin, StorageError};

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

/// The codec a topic's batches end up with (`compression.type`, Kafka's `BrokerCompressionType`
/// with its `compression.<codec>.level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TargetCompression {
    /// `producer`: the batch keeps the codec it came with.
    #[default]
    Producer,
    /// A codec id (0 = `uncompressed`) and the level to compress at (None: the codec's default).
    Codec { id: i16, level: Option<i32> },
}

/// What the validator found, for the log to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationResult {
    /// The largest record timestamp (the append time on LogAppendTime topics; -1 if none).
    pub max_timestamp: i64,
    /// The timestamp type and maxTimestamp the header must carry (Kafka's `setMaxTimestamp`).
    pub header_log_append_time: bool,
    pub header_max_timestamp: i64,
    /// The batch re-encoded (base offset 0, leader epoch unset) when its codec differs from the
    /// topic's; None when the batch is written as it came, with its header patched.
    pub rebuilt: Option<Vec<u8>>,
}

/// One leader append's validation settings, as Kafka's `LogValidator` constructor takes them.
pub struct LogValidator<'a> {
    /// Kafka's `TopicPartition.toString` (`topic-0`), which its messages name.
    pub topic_partition: &'a str,
    pub now_ms: i64,
    pub target_compression: TargetCompression,
    pub compacted_topic: bool,
    pub timestamp_type: TimestampType,
    pub timestamp_before_max_ms: i64,
    pub timestamp_after_max_ms: i64,
    pub origin: AppendOrigin,
    /// `max.decompressed.message.bytes`: the largest record body a compressed batch may hold.
    pub max_record_body_size: i32,
    /// `max.message.bytes`: a re-encoded batch larger than this is refused, as Kafka does.
    pub max_message_bytes: usize,
}

/// A record as the walk saw it (Kafka's `Record` fields the checks read).
#[derive(Debug, Clone, Copy)]
struct RecordInfo {
    offset: i64,
    timestamp: i64,
    key_size: i64,
    value_size: i64,
}

/// How a walk reads records, mirroring which of Kafka's record readers the path uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// `DefaultRecord.readFrom(ByteBuffer)`: an uncompressed batch, every field, the declared
    /// size checked against what was read.
    Slice,
    /// `DefaultRecord.readPartiallyFrom(InputStream)`: a compressed batch kept as is; keys and
    /// values skipped, the declared size only bounded.
    Partial,
    /// `DefaultRecord.readFrom(InputStream)`: a compressed batch being re-encoded; the declared
    /// size bounded and checked.
    Full,
}

/// Why a walk stopped.
#[derive(Debug)]
enum Fault {
    /// The bytes end inside a record.
    Eof,
    /// A varint longer than Java reads.
    Malformed,
    /// The decoder failed (Kafka's `KafkaException("Failed to decompress record stream")`).
    Io,
    /// A structural error Kafka reports as INVALID_RECORD.
    Invalid(String),
    /// A re-encoded batch grew past `max.message.bytes`.
    TooLarge(usize),
}

/// The bytes a walk reads records from.
trait Input {
    fn byte(&mut self) -> Result<u8, Fault>;
    /// Skips `n` bytes, copying them to `out` when given.
    fn skip(&mut self, n: usize, out: Option<&mut RecordsWriter>) -> Result<(), Fault>;
    fn at_end(&mut self) -> Result<bool, Fault>;
}

struct SliceInput<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Input for SliceInput<'_> {
    #[inline]
    fn byte(&mut self) -> Result<u8, Fault> {
        let b = *self.buf.get(self.pos).ok_or(Fault::Eof)?;
        self.pos += 1;
        Ok(b)
    }
    #[inline]
    fn skip(&mut self, n: usize, out: Option<&mut RecordsWriter>) -> Result<(), Fault> {
        let end = self.pos.checked_add(n).ok_or(Fault::Eof)?;
        let bytes = self.buf.get(self.pos..end).ok_or(Fault::Eof)?;
        if let Some(out) = out {
            out.write_all(bytes).map_err(|_| Fault::Io)?;
        }
        self.pos = end;
        Ok(())
    }
    fn at_end(&mut self) -> Result<bool, Fault> {
        Ok(self.pos >= self.buf.len())
    }
}

struct StreamInput<'a> {
    reader: BufReader<RecordsReader<'a>>,
}

impl Input for StreamInput<'_> {
    fn byte(&mut self) -> Result<u8, Fault> {
        let buf = self.reader.fill_buf().map_err(|_| Fault::Io)?;
        let b = *buf.first().ok_or(Fault::Eof)?;
        self.reader.consume(1);
        Ok(b)
    }
    fn skip(&mut self, mut n: usize, mut out: Option<&mut RecordsWriter>) -> Result<(), Fault> {
        while n > 0 {
            let buf = self.reader.fill_buf().map_err(|_| Fault::Io)?;
            if buf.is_empty() {
                return Err(Fault::Eof);
            }
            let take = n.min(buf.len());
            if let Some(out) = out.as_deref_mut() {
                out.write_all(&buf[..take]).map_err(|_| Fault::Io)?;
            }
            self.reader.consume(take);
            n -= take;
        }
        Ok(())
    }
    fn at_end(&mut self) -> Result<bool, Fault> {
        Ok(self.reader.fill_buf().map_err(|_| Fault::Io)?.is_empty())
    }
}

/// Counts the bytes read from an input, so a record's declared size can be checked.
struct Counted<'i, I: Input> {
    input: &'i mut I,
    read: u64,
}

impl<I: Input> Counted<'_, I> {
    #[inline]
    fn byte(&mut self) -> Result<u8, Fault> {
        self.read += 1;
        self.input.byte()
    }
    /// Java's `ByteUtils.readVarint`: at most 5 bytes, the value cut to 32 bits.
    #[inline]
    fn varint(&mut self) -> Result<(i32, usize), Fault> {
        let mut raw: u32 = 0;
        for i in 0..5 {
            let b = self.byte()?;
            raw |= u32::from(b & 0x7f).wrapping_shl(7 * i);
            if b & 0x80 == 0 {
                return Ok(((raw >> 1) as i32 ^ -((raw & 1) as i32), i as usize + 1));
            }
        }
        Err(Fault::Malformed)
    }
    /// Java's `ByteUtils.readVarlong`: at most 10 bytes.
    #[inline]
    fn varlong(&mut self) -> Result<(i64, usize), Fault> {
        let mut raw: u64 = 0;
        for i in 0..10 {
            let b = self.byte()?;
            raw |= u64::from(b & 0x7f).wrapping_shl(7 * i);
            if b & 0x80 == 0 {
                return Ok(((raw >> 1) as i64 ^ -((raw & 1) as i64), i as usize + 1));
            }
        }
        Err(Fault::Malformed)
    }
    /// A length-prefixed field (`Utils.readBytes` / `skipBytes`): a negative length is null.
    fn field(&mut self, out: Option<&mut RecordsWriter>) -> Result<i64, Fault> {
        let (len, _) = self.varint()?;
        if let Some(out) = out {
            write_varint(out, len as i64)?;
            if len > 0 {
                self.input.skip(len as usize, Some(out))?;
            }
        } else if len > 0 {
            self.input.skip(len as usize, None)?;
        }
        if len > 0 {
            self.read += len as u64;
        }
        Ok(len as i64)
    }
}

fn write_varint(out: &mut RecordsWriter, v: i64) -> Result<(), Fault> {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    let mut buf = [0u8; 10];
    let mut n = 0;
    while z >= 0x80 {
        buf[n] = (z as u8) | 0x80;
        z >>= 7;
        n += 1;
    }
    buf[n] = z as u8;
    out.write_all(&buf[..=n]).map_err(|_| Fault::Io)
}

fn varint_size(v: i64) -> u64 {
    let z = ((v << 1) ^ (v >> 63)) as u64;
    (64 - (z | 1).leading_zeros() as u64).div_ceil(7)
}

/// The fields of the batch header the record walk needs.
#[derive(Clone, Copy)]
struct BatchInfo {
    base_offset: i64,
    base_timestamp: i64,
    /// Set for a batch whose header says LogAppendTime: every record reads as this time.
    log_append_time: Option<i64>,
}

/// Where a re-encoded batch's records go, and what they are re-based on.
struct Rebuild<'w> {
    out: &'w mut RecordsWriter,
    base_timestamp: Option<i64>,
    limit: usize,
}

/// Reads one record (`index` within its batch) in `mode`, re-encoding it into `rebuild` when
/// given.
fn read_record<I: Input>(
    input: &mut I,
    mode: Mode,
    batch: BatchInfo,
    index: i32,
    max_body: i32,
    rebuild: Option<&mut Rebuild<'_>>,
) -> Result<RecordInfo, Fault> {
    let mut c = Counted { input, read: 0 };
    let size = match c.varint() {
        Ok((size, _)) => size,
        // The size is read outside Kafka's structure checks: past the end it is a premature
        // EOF (INVALID_RECORD), a malformed varint escapes as an IllegalArgumentException.
        Err(Fault::Eof) => {
            return Err(Fault::Invalid(
                "Incorrect declared batch size, premature EOF reached".into(),
            ))
        }
        Err(Fault::Malformed) if mode != Mode::Slice => {
            return Err(Fault::Invalid(
                "Incorrect declared batch size, premature EOF reached".into(),
            ))
        }
        Err(e) => return Err(e),
    };
    if mode != Mode::Slice {
        if size < 0 {
            return Err(Fault::Invalid(format!(
                "Invalid record size: {size} is negative."
            )));
        }
        if size > max_body {
            return Err(Fault::Invalid(format!(
                "Invalid record size: {size} exceeds the configured maximum record size of {max_body}."
            )));
        }
    }
    c.read = 0;
    let structure = |e: Fault| match e {
        Fault::Eof | Fault::Malformed => Fault::Invalid("Found invalid record structure".into()),
        other => other,
    };
    c.byte().map_err(structure)?; // attributes
    let (ts_delta, _) = c.varlong().map_err(structure)?;
    let (offset_delta, _) = c.varint().map_err(structure)?;
    let timestamp = batch
        .log_append_time
        .unwrap_or(batch.base_timestamp.wrapping_add(ts_delta));
    let mut out = None;
    if let Some(r) = rebuild {
        // The record as Kafka's `MemoryRecordsBuilder` writes it: attributes 0, its timestamp
        // against the first record's, its index as offset delta; the rest copied.
        let base = *r.base_timestamp.get_or_insert(timestamp);
        let new_ts_delta = timestamp.wrapping_sub(base);
        let rest = (size as u64).saturating_sub(c.read);
        let new_size = rest + 1 + varint_size(new_ts_delta) + varint_size(i64::from(index));
        write_varint(r.out, new_size as i64)?;
        r.out.write_all(&[0]).map_err(|_| Fault::Io)?;
        write_varint(r.out, new_ts_delta)?;
        write_varint(r.out, i64::from(index))?;
        if r.out.output_len() > r.limit {
            return Err(Fault::TooLarge(r.out.output_len()));
        }
        out = Some(&mut *r.out);
    }
    let key_size = c.field(out.as_deref_mut()).map_err(structure)?;
    let value_size = c.field(out.as_deref_mut()).map_err(structure)?;
    let (headers, _) = c.varint().map_err(structure)?;
    if headers < 0 {
        return Err(Fault::Invalid(format!(
            "Found invalid number of record headers {headers}"
        )));
    }
    if let Some(out) = out.as_deref_mut() {
        write_varint(out, i64::from(headers))?;
    }
    for _ in 0..headers {
        let (key_len, _) = c.varint().map_err(structure)?;
        if key_len < 0 {
            return Err(Fault::Invalid(format!(
                "Invalid negative header key size {key_len}"
            )));
        }
        if let Some(out) = out.as_deref_mut() {
            write_varint(out, i64::from(key_len))?;
        }
        c.input
            .skip(key_len as usize, out.as_deref_mut())
            .map_err(structure)?;
        c.read += key_len as u64;
        c.field(out.as_deref_mut()).map_err(structure)?;
    }
    if mode != Mode::Partial && c.read != size as u64 {
        return Err(Fault::Invalid(format!(
            "Invalid record size: expected to read {size} bytes in record payload, but instead read {}",
            c.read
        )));
    }
    Ok(RecordInfo {
        offset: batch.base_offset.wrapping_add(i64::from(offset_delta)),
        timestamp,
        key_size,
        value_size,
    })
}

/// Kafka's `ApiRecordError`: the error code a record error stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RecordErrorKind {
    InvalidRecord,
    InvalidTimestamp,
}

impl LogValidator<'_> {
    fn invalid(&self, message: String) -> StorageError {
        StorageError::InvalidRecord(message)
    }

    /// Validates the one batch of a leader append (`records`), as Kafka's
    /// `validateMessagesAndAssignOffsets`. Nothing is written; the log then assigns offsets and
    /// patches the header ([`ValidationResult`]).
    pub fn validate(&self, records: &[u8]) -> Result<ValidationResult, StorageError> {
        let mut size = 0;
        let mut first = None;
        while size < records.len() {
            let view = BatchView::parse_unchecked_offsets(&records[size..])
                .map_err(|e| StorageError::CorruptRecord(e.to_string()))?;
            size += view.size();
            if first.is_some() {
                return Err(self.invalid("Compressed outer record has more than one batch".into()));
            }
            first = Some(view);
        }
        let batch =
            first.ok_or_else(|| self.invalid("Record batch has no batches at all".into()))?;
        self.validate_batch(&batch)?;
        let source = batch.attributes() & 0x07;
        let target = match self.target_compression {
            TargetCompression::Producer => source,
            TargetCompression::Codec { id, .. } => id,
        };
        // Kafka keeps an uncompressed control batch as it is whatever the topic's codec.
        let in_place = source == target || (source == 0 && batch.is_control());
        if in_place {
            self.validate_in_place(&batch, source)
        } else {
            self.rebuild(&batch, source)
        }
    }

    /// Kafka's `validateBatch`.
    fn validate_batch(&self, batch: &BatchView<'_>) -> Result<(), StorageError> {
        let tp = self.topic_partition;
        if self.origin == AppendOrigin::Client {
            let base = batch.base_offset();
            let last = base.wrapping_add(i64::from(batch.last_offset_delta()));
            let count_from_offsets = i64::from(batch.last_offset_delta()) + 1;
            if count_from_offsets <= 0 {
                return Err(self.invalid(format!(
                    "Batch has an invalid offset range: [{base}, {last}] in topic partition {tp}"
                )));
            }
            let count = batch.records_count();
            if count <= 0 {
                return Err(self.invalid(format!(
                    "Invalid reported count for record batch: {count} in topic partition {tp}"
                )));
            }
            if count_from_offsets != i64::from(count) {
                return Err(self.invalid(format!(
                    "Inconsistent batch offset range [{base}, {last}] and count of records {count} in topic partition {tp}"
                )));
            }
            if batch.is_control() {
                return Err(self.invalid(format!(
                    "Clients are not allowed to write control records in topic partition {tp}"
                )));
            }
            if batch.producer_id() >= 0 && batch.base_sequence() < 0 {
                return Err(self.invalid(format!(
                    "Invalid sequence number {} in record batch with producerId {} in topic partition {tp}",
                    batch.base_sequence(),
                    batch.producer_id()
                )));
            }
        }
        Ok(())
    }

    fn batch_info(batch: &BatchView<'_>) -> BatchInfo {
        BatchInfo {
            base_offset: batch.base_offset(),
            base_timestamp: batch.base_timestamp(),
            log_append_time: batch.is_log_append_time().then(|| batch.max_timestamp()),
        }
    }

    fn count(&self, batch: &BatchView<'_>) -> Result<i32, StorageError> {
        let count = batch.records_count();
        if count < 0 {
            return Err(self.invalid(format!(
                "Found invalid record count {count} in magic v2 batch"
            )));
        }
        Ok(count)
    }

    /// Kafka's `assignOffsetsNonCompressed` and the in-place branch of
    /// `validateMessagesAndAssignOffsetsCompressed`: every record checked, nothing copied.
    fn validate_in_place(
        &self,
        batch: &BatchView<'_>,
        codec: i16,
    ) -> Result<ValidationResult, StorageError> {
        let count = self.count(batch)?;
        let info = Self::batch_info(batch);
        let body = &batch.bytes()[RECORDS_OFFSET..];
        let mut errors = Vec::new();
        let mut max_timestamp = -1i64;
        if codec == 0 {
            let mut input = SliceInput { buf: body, pos: 0 };
            self.walk(&mut input, Mode::Slice, info, count, &mut errors, |r, _| {
                max_timestamp = max_timestamp.max(r.timestamp);
                Ok(())
            })?;
        } else {
            let reader = RecordsReader::new(codec, body).map_err(|e| self.decompress_error(e))?;
            let mut input = StreamInput {
                reader: BufReader::with_capacity(16 * 1024, reader),
            };
            let mut misplaced = false;
            self.walk(
                &mut input,
                Mode::Partial,
                info,
                count,
                &mut errors,
                |r, i| {
                    max_timestamp = max_timestamp.max(r.timestamp);
                    misplaced |= r.offset != i64::from(i);
                    Ok(())
                },
            )?;
            if errors.is_empty() && misplaced {
                // Kafka 4.4 then re-encodes the records it read without their keys and values
                // (`PartialDefaultRecord`), which throws: the producer gets
                // UNKNOWN_SERVER_ERROR and nothing is written.
                return Err(StorageError::RecordStream(
                    "key is skipped in PartialDefaultRecord".into(),
                ));
            }
        }
        self.process_record_errors(errors)?;
        let lat = self.timestamp_type == TimestampType::LogAppendTime;
        let max = if lat { self.now_ms } else { max_timestamp };
        Ok(ValidationResult {
            max_timestamp: max,
            header_log_append_time: lat,
            header_max_timestamp: max,
            rebuilt: None,
        })
    }

    /// Kafka's `buildRecordsAndAssignOffsets`: the records re-encoded with the topic's codec,
    /// offsets 0..n, the first batch's producer fields.
    fn rebuild(
        &self,
        batch: &BatchView<'_>,
        source: i16,
    ) -> Result<ValidationResult, StorageError> {
        let (target, level) = match self.target_compression {
            TargetCompression::Codec { id, level } => (id, level),
            TargetCompression::Producer => (source, None),
        };
        let count = self.count(batch)?;
        let info = Self::batch_info(batch);
        let body = &batch.bytes()[RECORDS_OFFSET..];
        let lat = self.timestamp_type == TimestampType::LogAppendTime;
        let mut out = RecordsWriter::new(target, level, vec![0; RECORDS_OFFSET])
            .map_err(|e| StorageError::RecordStream(e.to_string()))?;
        let mut errors = Vec::new();
        let mut max_timestamp = -1i64;
        let mut rebuild = Rebuild {
            out: &mut out,
            base_timestamp: None,
            limit: self.max_message_bytes,
        };
        let walked = if source == 0 {
            let mut input = SliceInput { buf: body, pos: 0 };
            self.walk_rebuilding(
                &mut input,
                Mode::Slice,
                info,
                count,
                &mut errors,
                &mut rebuild,
                &mut max_timestamp,
            )
        } else {
            let reader = RecordsReader::new(source, body).map_err(|e| self.decompress_error(e))?;
            let mut input = StreamInput {
                reader: BufReader::with_capacity(16 * 1024, reader),
            };
            self.walk_rebuilding(
                &mut input,
                Mode::Full,
                info,
                count,
                &mut errors,
                &mut rebuild,
                &mut max_timestamp,
            )
        };
        walked?;
        self.process_record_errors(errors)?;
        let base_timestamp = rebuild.base_timestamp.unwrap_or(-1);
        let mut bytes = out
            .finish()
            .map_err(|e| StorageError::RecordStream(e.to_string()))?;
        if bytes.len() > self.max_message_bytes {
            return Err(self.too_large(bytes.len()));
        }
        let max = if lat { self.now_ms } else { max_timestamp };
        let mut attributes = target & 0x07;
        if lat {
            attributes |= 0x08;
        }
        if batch.is_transactional() {
            attributes |= 0x10;
        }
        let length = (bytes.len() - 12) as i32;
        bytes[8..12].copy_from_slice(&length.to_be_bytes());
        bytes[12..16].copy_from_slice(&(-1i32).to_be_bytes());
        bytes[16] = 2;
        bytes[21..23].copy_from_slice(&attributes.to_be_bytes());
        bytes[23..27].copy_from_slice(&(count - 1).max(0).to_be_bytes());
        bytes[27..35].copy_from_slice(&base_timestamp.to_be_bytes());
        bytes[35..43].copy_from_slice(&max.to_be_bytes());
        bytes[43..61].copy_from_slice(&batch.bytes()[43..57 + 4]);
        bytes[57..61].copy_from_slice(&count.to_be_bytes());
        let crc = crc32c::crc32c(&bytes[21..]);
        bytes[17..21].copy_from_slice(&crc.to_be_bytes());
        Ok(ValidationResult {
            max_timestamp: max,
            header_log_append_time: lat,
            header_max_timestamp: max,
            rebuilt: Some(bytes),
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn walk_rebuilding<I: Input>(
        &self,
        input: &mut I,
        mode: Mode,
        info: BatchInfo,
        count: i32,
        errors: &mut Vec<(RecordErrorKind, RecordError)>,
        rebuild: &mut Rebuild<'_>,
        max_timestamp: &mut i64,
    ) -> Result<(), StorageError> {
        for index in 0..count {
            let r = read_record(
                input,
                mode,
                info,
                index,
                self.max_record_body_size,
                Some(rebuild),
            )
            .map_err(|f| self.fault(f))?;
            if let Some(e) = self.validate_record(&r, index, mode, info) {
                errors.push(e);
            } else {
                *max_timestamp = (*max_timestamp).max(r.timestamp);
            }
        }
        self.ensure_none_remaining(input)
    }

    /// Reads `count` records, checking each (`validateRecord`) and handing it to `seen` with
    /// its index; then no byte may be left (Kafka's `ensureNoneRemaining`).
    fn walk<I: Input>(
        &self,
        input: &mut I,
        mode: Mode,
        info: BatchInfo,
        count: i32,
        errors: &mut Vec<(RecordErrorKind, RecordError)>,
        mut seen: impl FnMut(&RecordInfo, i32) -> Result<(), StorageError>,
    ) -> Result<(), StorageError> {
        for index in 0..count {
            let r = read_record(input, mode, info, index, self.max_record_body_size, None)
                .map_err(|f| self.fault(f))?;
            if let Some(e) = self.validate_record(&r, index, mode, info) {
                errors.push(e);
            } else {
                seen(&r, index)?;
            }
        }
        self.ensure_none_remaining(input)
    }

    fn ensure_none_remaining<I: Input>(&self, input: &mut I) -> Result<(), StorageError> {
        match input.at_end() {
            Ok(true) => Ok(()),
            Ok(false) => Err(self
                .invalid("Incorrect declared batch size, records still remaining in file".into())),
            Err(f) => Err(self.fault(f)),
        }
    }

    fn fault(&self, f: Fault) -> StorageError {
        match f {
            Fault::Invalid(m) => self.invalid(m),
            Fault::Eof => {
                self.invalid("Incorrect declared batch size, premature EOF reached".into())
            }
            Fault::Malformed => StorageError::RecordStream("Varint is too long".into()),
            Fault::Io => StorageError::RecordStream("Failed to decompress record stream".into()),
            Fault::TooLarge(size) => self.too_large(size),
        }
    }

    fn too_large(&self, size: usize) -> StorageError {
        StorageError::RecordTooLarge {
            size,
            max: self.max_message_bytes,
        }
    }

    fn decompress_error(&self, e: strom_protocol::compression::DecompressError) -> StorageError {
        StorageError::RecordStream(e.to_string())
    }

    /// Kafka's `validateRecord`: the key on a compacted topic, then the timestamp.
    fn validate_record(
        &self,
        r: &RecordInfo,
        index: i32,
        mode: Mode,
        batch: BatchInfo,
    ) -> Option<(RecordErrorKind, RecordError)> {
        let tp = self.topic_partition;
        if self.compacted_topic && r.key_size < 0 {
            return Some((
                RecordErrorKind::InvalidRecord,
                RecordError {
                    batch_index: index,
                    message: format!(
                        "Compacted topic cannot accept message without key in topic partition {tp}"
                    ),
                },
            ));
        }
        if self.timestamp_type == TimestampType::CreateTime && r.timestamp != -1 {
            // Java's long arithmetic, overflow included (`recordHasInvalidTimestamp`).
            let diff = self.now_ms.wrapping_sub(r.timestamp);
            if diff > self.timestamp_before_max_ms
                || diff.wrapping_neg() > self.timestamp_after_max_ms
            {
                return Some((
                    RecordErrorKind::InvalidTimestamp,
                    RecordError {
                        batch_index: index,
                        message: format!(
                            "Timestamp {} of message with offset {} is out of range. The timestamp should be within [{}, {}]",
                            r.timestamp,
                            r.offset,
                            self.now_ms.wrapping_sub(self.timestamp_before_max_ms),
                            self.now_ms.wrapping_add(self.timestamp_after_max_ms)
                        ),
                    },
                ));
            }
        } else if batch.log_append_time.is_some() {
            return Some((
                RecordErrorKind::InvalidTimestamp,
                RecordError {
                    batch_index: index,
                    message: format!(
                        "Invalid timestamp type in message {}. Producer should not set timestamp type to LogAppendTime.",
                        record_to_string(r, mode)
                    ),
                },
            ));
        }
        None
    }

    /// Kafka's `processRecordErrors`.
    fn process_record_errors(
        &self,
        errors: Vec<(RecordErrorKind, RecordError)>,
    ) -> Result<(), StorageError> {
        if errors.is_empty() {
            return Ok(());
        }
        let timestamp = errors
            .iter()
            .any(|(k, _)| *k == RecordErrorKind::InvalidTimestamp);
        let errors: Vec<RecordError> = errors.into_iter().map(|(_, e)| e).collect();
        if timestamp {
            return Err(StorageError::TimestampErrors { errors });
        }
        Err(record_errors(errors))
    }
}

/// Kafka's `toString` of the record the walk read: `PartialDefaultRecord` (key and value
/// skipped, sizes -1 when null) on the in-place compressed path, `DefaultRecord` (sizes 0 when
/// null) elsewhere.
fn record_to_string(r: &RecordInfo, mode: Mode) -> String {
    if mode == Mode::Partial {
        format!(
            "PartialDefaultRecord(offset={}, timestamp={}, key={} bytes, value={} bytes)",
            r.offset, r.timestamp, r.key_size, r.value_size
        )
    } else {
        format!(
            "DefaultRecord(offset={}, timestamp={}, key={} bytes, value={} bytes)",
            r.offset,
            r.timestamp,
            r.key_size.max(0),
            r.value_size.max(0)
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

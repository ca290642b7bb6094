//! `.log` segments (and KRaft `.checkpoint` snapshots): Kafka's `dumpLog`, `printBatchLevel`,
//! `dumpBatchRecords`, with `FileLogInputStream`'s framing rules.

use std::io::Write;

use strom_protocol::batch::BatchView;
use strom_protocol::batch::{
    ATTRIBUTES_OFFSET, BASE_SEQUENCE_OFFSET, BASE_TIMESTAMP_OFFSET, CRC_OFFSET, HEADER_SIZE,
    LAST_OFFSET_DELTA_OFFSET, LENGTH_OFFSET, LOG_OVERHEAD, MAGIC_OFFSET, MAX_TIMESTAMP_OFFSET,
    PARTITION_LEADER_EPOCH_OFFSET, PRODUCER_EPOCH_OFFSET, PRODUCER_ID_OFFSET, RECORDS_COUNT_OFFSET,
};

use super::records::{codec_name, for_each_record, increment_sequence, Rec};
use super::{
    abort, be_i16, be_i32, be_i64, be_u32, crc32c, java_utf8, optional_long, start_offset_of,
    DumpLogArgs, JFile, Report, Res,
};

/// `LegacyRecord.RECORD_OVERHEAD_V0`: the smallest size field `FileLogInputStream` accepts.
const MIN_RECORD_OVERHEAD: i32 = 14;
/// `HEADER_SIZE_UP_TO_MAGIC`.
const HEADER_UP_TO_MAGIC: i64 = (MAGIC_OFFSET + 1) as i64;

/// The v2 batch header fields, read from the 61 bytes at the batch position (like Kafka's
/// `loadBatchHeader`, these may run past a batch whose size field is too small).
#[derive(Debug, Clone)]
pub(crate) struct Header {
    pub base_offset: i64,
    pub partition_leader_epoch: i32,
    pub magic: i8,
    pub crc: u32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub records_count: i32,
}

impl Header {
    /// A well-formed v2 batch, through the protocol crate's view.
    pub fn from_view(v: &BatchView<'_>) -> Header {
        Header {
            base_offset: v.base_offset(),
            partition_leader_epoch: v.partition_leader_epoch(),
            magic: v.magic(),
            crc: v.crc(),
            attributes: v.attributes(),
            last_offset_delta: v.last_offset_delta(),
            base_timestamp: v.base_timestamp(),
            max_timestamp: v.max_timestamp(),
            producer_id: v.producer_id(),
            producer_epoch: v.producer_epoch(),
            base_sequence: v.base_sequence(),
            records_count: v.records_count(),
        }
    }

    /// Reads the header field by field from 61 bytes: a short or odd batch (Kafka still
    /// prints what its header bytes say, even past the batch's end) or another magic.
    pub fn read(b: &[u8]) -> Header {
        Header {
            base_offset: be_i64(b, 0),
            partition_leader_epoch: be_i32(b, PARTITION_LEADER_EPOCH_OFFSET),
            magic: b[MAGIC_OFFSET] as i8,
            crc: be_u32(b, CRC_OFFSET),
            attributes: be_i16(b, ATTRIBUTES_OFFSET),
            last_offset_delta: be_i32(b, LAST_OFFSET_DELTA_OFFSET),
            base_timestamp: be_i64(b, BASE_TIMESTAMP_OFFSET),
            max_timestamp: be_i64(b, MAX_TIMESTAMP_OFFSET),
            producer_id: be_i64(b, PRODUCER_ID_OFFSET),
            producer_epoch: be_i16(b, PRODUCER_EPOCH_OFFSET),
            base_sequence: be_i32(b, BASE_SEQUENCE_OFFSET),
            records_count: be_i32(b, RECORDS_COUNT_OFFSET),
        }
    }

    pub fn last_offset(&self) -> i64 {
        self.base_offset.wrapping_add(self.last_offset_delta as i64)
    }

    /// `DefaultRecordBatch.lastSequence()`.
    pub fn last_sequence(&self) -> i32 {
        if self.base_sequence == -1 {
            -1
        } else {
            increment_sequence(self.base_sequence, self.last_offset_delta)
        }
    }

    pub fn timestamp_type(&self) -> &'static str {
        if self.attributes & 0x08 != 0 {
            "LogAppendTime"
        } else {
            "CreateTime"
        }
    }

    pub fn is_control(&self) -> bool {
        self.attributes & 0x20 != 0
    }
}

/// One batch as `FileLogInputStream.nextBatch` frames it.
pub(crate) struct FileBatch {
    /// Position in the file.
    pub position: usize,
    /// `sizeInBytes()`: the size field plus the 12-byte log overhead.
    pub size: usize,
    pub magic: i8,
}

/// `FileRecords.batches()` over `data[start..end]`: stops (without error) at a batch that does
/// not fit, fails on a size field below 14.
pub(crate) struct Batches<'a> {
    data: &'a [u8],
    pos: usize,
    end: usize,
    path: &'a str,
}

impl<'a> Batches<'a> {
    pub fn new(data: &'a [u8], start: usize, end: usize, path: &'a str) -> Self {
        Self {
            data,
            pos: start,
            end,
            path,
        }
    }

    pub fn next_batch(&mut self) -> Res<Option<FileBatch>> {
        let pos = self.pos as i64;
        if pos >= self.end as i64 - HEADER_UP_TO_MAGIC {
            return Ok(None);
        }
        let size = be_i32(self.data, self.pos + LENGTH_OFFSET);
        if size < MIN_RECORD_OVERHEAD {
            return abort(format!(
                "Found record size {size} smaller than minimum record overhead ({MIN_RECORD_OVERHEAD}) in file {}.",
                self.path
            ));
        }
        if pos > self.end as i64 - LOG_OVERHEAD as i64 - size as i64 {
            return Ok(None);
        }
        let batch = FileBatch {
            position: self.pos,
            size: size as usize + LOG_OVERHEAD,
            magic: self.data[self.pos + MAGIC_OFFSET] as i8,
        };
        self.pos += batch.size;
        Ok(Some(batch))
    }
}

impl FileBatch {
    /// The header, read as Kafka's `loadBatchHeader` reads it: 61 bytes from the whole file.
    pub fn header(&self, file: &[u8], path: &str) -> Res<Header> {
        if self.magic == 2 && self.size >= HEADER_SIZE && self.position + self.size <= file.len() {
            if let Ok(v) = BatchView::parse(&file[self.position..self.position + self.size]) {
                return Ok(Header::from_view(&v));
            }
        }
        match file.get(self.position..self.position + HEADER_SIZE) {
            Some(b) => Ok(Header::read(b)),
            None => abort(format!(
                "Failed to load record batch at position {} from {path}: expected to read {HEADER_SIZE} bytes of the record batch header, but reached end of file after reading {} bytes",
                self.position,
                file.len() - self.position
            )),
        }
    }

    /// The batch's own bytes.
    pub fn bytes<'a>(&self, file: &'a [u8]) -> &'a [u8] {
        &file[self.position..self.position + self.size]
    }

    /// `DefaultRecordBatch.isValid()`.
    pub fn is_valid(&self, file: &[u8], h: &Header) -> bool {
        self.size >= HEADER_SIZE && h.crc == crc32c(&self.bytes(file)[ATTRIBUTES_OFFSET..])
    }
}

/// Kafka's `dumpLog`.
pub(crate) fn dump_log(
    file: &JFile,
    args: &DumpLogArgs,
    out: &mut dyn Write,
    report: &mut Report,
) -> Res<()> {
    if file.name.ends_with(".log") {
        let start = start_offset_of(&file.name)?;
        writeln!(out, "Log starting offset: {start}")?;
    } else if file.name == "bootstrap.checkpoint" {
        writeln!(out, "KRaft bootstrap snapshot")?;
    } else {
        // `Snapshots.parse`: <20-digit end offset>-<10-digit epoch>.checkpoint
        let stem = file.name.trim_end_matches(".checkpoint");
        let parsed = stem.split_once('-').and_then(|(o, e)| {
            (o.len() == 20 && e.len() == 10)
                .then(|| Some((o.parse::<i64>().ok()?, e.parse::<i32>().ok()?)))
                .flatten()
        });
        match parsed {
            Some((offset, epoch)) => {
                writeln!(out, "Snapshot end offset: {offset}, epoch: {epoch}")?
            }
            None => return abort("No value present"),
        }
    }
    let data = file.read()?;
    if args.max_bytes < 0 {
        return abort(format!("Invalid size: {}", args.max_bytes));
    }
    let end = data.len().min(args.max_bytes as usize);
    let mut batches = Batches::new(&data, 0, end, &file.shown);
    let mut valid_bytes: u64 = 0;
    let mut last_offset: i64 = -1;
    let deep = args.deep();
    while let Some(batch) = batches.next_batch()? {
        print_batch_level(&batch, &data, &file.shown, valid_bytes, out)?;
        if deep {
            let h = batch.header(&data, &file.shown)?;
            dump_batch_records(&batch, &h, &data, &mut last_offset, file, args, out, report)?;
        }
        valid_bytes += batch.size as u64;
    }
    let trailing = end as u64 - valid_bytes;
    if trailing > 0 && args.max_bytes == i32::MAX {
        writeln!(
            out,
            "Found {trailing} invalid bytes at the end of {}",
            file.name
        )?;
    }
    Ok(())
}

fn print_batch_level(
    batch: &FileBatch,
    data: &[u8],
    path: &str,
    position: u64,
    out: &mut dyn Write,
) -> Res<()> {
    if batch.magic < 2 {
        return abort(format!(
            "strom dump-log does not read message format v{} (magic {}) batches; found one at position {position} of {path}",
            batch.magic, batch.magic
        ));
    }
    let h = batch.header(data, path)?;
    write!(
        out,
        "baseOffset: {} lastOffset: {} count: {} baseSequence: {} lastSequence: {} producerId: {} producerEpoch: {} partitionLeaderEpoch: {} isTransactional: {} isControl: {} deleteHorizonMs: {}",
        h.base_offset,
        h.last_offset(),
        h.records_count,
        h.base_sequence,
        h.last_sequence(),
        h.producer_id,
        h.producer_epoch,
        h.partition_leader_epoch,
        h.attributes & 0x10 != 0,
        h.is_control(),
        optional_long((h.attributes & 0x40 != 0).then_some(h.base_timestamp)),
    )?;
    let codec = match codec_name(h.attributes & 0x07) {
        Ok(c) => c,
        Err(m) => return abort(m),
    };
    writeln!(
        out,
        " position: {position} {}: {} size: {} magic: {} compresscodec: {codec} crc: {} isvalid: {}",
        h.timestamp_type(),
        h.max_timestamp,
        batch.size,
        h.magic,
        h.crc,
        batch.is_valid(data, &h),
    )?;
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn dump_batch_records(
    batch: &FileBatch,
    h: &Header,
    data: &[u8],
    last_offset: &mut i64,
    file: &JFile,
    args: &DumpLogArgs,
    out: &mut dyn Write,
    report: &mut Report,
) -> Res<()> {
    for_each_record(batch.bytes(data), h, |rec: Rec| {
        let previous = *last_offset;
        if rec.offset != previous.wrapping_add(1) {
            report
                .non_consecutive
                .entry(&file.absolute)
                .insert(previous, rec.offset);
        }
        *last_offset = rec.offset;
        if !args.skip_record_metadata {
            print_record_metadata(h, &rec, out)?;
        }
        if args.offsets_decoder && !h.is_control() {
            let prefix = if args.skip_record_metadata { "| " } else { " " };
            let (k, v) =
                super::offsets::parse(rec.offset, rec.key.as_deref(), rec.value.as_deref())?;
            write!(out, "{prefix}key: {k}")?;
            if let Some(v) = v {
                write!(out, " payload: {v}")?;
            }
        } else if args.print_data() && !h.is_control() {
            let mut prefix = if args.skip_record_metadata { "| " } else { " " };
            if let Some(k) = &rec.key {
                write!(out, "{prefix}key: {}", java_utf8(k))?;
                prefix = " ";
            }
            if let Some(v) = &rec.value {
                write!(out, "{prefix}payload: {}", java_utf8(v))?;
            }
        }
        writeln!(out)?;
        Ok(())
    })
}

fn print_record_metadata(h: &Header, rec: &Rec, out: &mut dyn Write) -> Res<()> {
    let keys: Vec<String> = rec.header_keys.iter().map(|k| java_utf8(k)).collect();
    write!(
        out,
        "| offset: {} {}: {} keySize: {} valueSize: {} sequence: {} headerKeys: [{}]",
        rec.offset,
        h.timestamp_type(),
        rec.timestamp,
        rec.key.as_ref().map_or(-1, |k| k.len() as i64),
        rec.value.as_ref().map_or(-1, |v| v.len() as i64),
        rec.sequence,
        keys.join(","),
    )?;
    if h.is_control() {
        print_control_record(rec, out)?;
    }
    Ok(())
}

/// Kafka's `printControlRecord` for the control records a data partition holds.
fn print_control_record(rec: &Rec, out: &mut dyn Write) -> Res<()> {
    let Some(key) = &rec.key else {
        return abort("Cannot invoke \"java.nio.ByteBuffer.remaining()\" because \"key\" is null");
    };
    if key.len() < 4 {
        return abort(format!(
            "Invalid value size found for end control record key. Must have at least 4 bytes, but found only {}",
            key.len()
        ));
    }
    let version = be_i16(key, 0);
    if version < 0 {
        return abort(format!(
            "Invalid version found for control record: {version}. May indicate data corruption"
        ));
    }
    let type_id = be_i16(key, 2);
    match type_id {
        0 | 1 => {
            let name = if type_id == 0 { "ABORT" } else { "COMMIT" };
            let value = rec.value.as_deref().unwrap_or(&[]);
            if value.len() < 6 {
                return abort(format!(
                    "Invalid value size found for end transaction marker. Must have at least 6 bytes, but found only {}",
                    value.len()
                ));
            }
            let marker_version = be_i16(value, 0);
            if marker_version < 0 {
                return abort(format!(
                    "Invalid version found for end transaction marker: {marker_version}. May indicate data corruption"
                ));
            }
            let epoch = be_i32(value, 2);
            write!(out, " endTxnMarker: {name} coordinatorEpoch: {epoch}")?;
        }
        2..=6 => {
            return abort(format!(
                "strom dump-log does not decode KRaft control records (type {type_id})"
            ));
        }
        _ => write!(out, " controlType: UNKNOWN({type_id})")?,
    }
    Ok(())
}

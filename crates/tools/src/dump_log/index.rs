//! `.index` and `.timeindex` files: Kafka's `dumpIndex` and `dumpTimeIndex`, with the checks
//! against the `.log` beside them and `OffsetIndex` / `TimeIndex` `sanityCheck`.

use std::cmp::Reverse;
use std::io::Write;

use super::log::{Batches, FileBatch};
use super::records::for_each_record;
use super::{abort, be_i32, be_i64, start_offset_of, DumpLogArgs, JFile, Report, Res};

const OFFSET_ENTRY: usize = 8;
const TIME_ENTRY: usize = 12;

/// An index file as `AbstractIndex` maps it read-only.
fn read_index(file: &JFile) -> Res<Vec<u8>> {
    match std::fs::read(&file.shown) {
        Ok(d) => Ok(d),
        // Kafka creates the missing file, then refuses its max size of -1.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => abort("Invalid max index size: -1"),
        Err(e) => abort(super::io_message(&file.shown, &e)),
    }
}

struct OffsetIndex {
    data: Vec<u8>,
    base: i64,
}

impl OffsetIndex {
    fn entries(&self) -> usize {
        self.data.len() / OFFSET_ENTRY
    }
    fn entry(&self, i: usize) -> (i64, i32) {
        let at = i * OFFSET_ENTRY;
        (
            self.base + be_i32(&self.data, at) as i64,
            be_i32(&self.data, at + 4),
        )
    }
    /// `OffsetIndex.lookup`: the entry with the largest offset <= `target`, searched as
    /// `AbstractIndex.largestLowerBoundSlotFor` searches (warm section first).
    fn lookup(&self, target: i64) -> (i64, i32) {
        let n = self.entries();
        if n == 0 {
            return (self.base, 0);
        }
        let warm = 8192 / OFFSET_ENTRY;
        let first_hot = (n as i64 - 1 - warm as i64).max(0) as usize;
        let slot = if self.entry(first_hot).0 < target {
            binary_search(|i| self.entry(i).0, target, first_hot, n - 1)
        } else if self.entry(0).0 > target {
            None
        } else {
            binary_search(|i| self.entry(i).0, target, 0, first_hot)
        };
        match slot {
            Some(s) => self.entry(s),
            None => (self.base, 0),
        }
    }
}

/// `AbstractIndex.binarySearch` for the largest lower bound.
fn binary_search(
    key: impl Fn(usize) -> i64,
    target: i64,
    begin: usize,
    end: usize,
) -> Option<usize> {
    let (mut lo, mut hi) = (begin, end);
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        let found = key(mid);
        match found.cmp(&target) {
            std::cmp::Ordering::Greater => hi = mid - 1,
            std::cmp::Ordering::Less => lo = mid,
            std::cmp::Ordering::Equal => return Some(mid),
        }
    }
    Some(lo)
}

/// `FileRecords.slice(position, size)` bounds over a file of `len` bytes.
fn slice_end(file: &JFile, len: usize, position: i32, size: i32) -> Res<usize> {
    if position < 0 || position as usize > len {
        return abort(format!(
            "Invalid position: {position} in read from FileRecords(size={len}, file={}, start=0, end={len})",
            file.shown
        ));
    }
    let end = position as i64 + size as i64;
    Ok(if end > len as i64 || end > i32::MAX as i64 {
        len
    } else {
        end as usize
    })
}

/// Kafka's `dumpIndex`.
pub(crate) fn dump_index(
    file: &JFile,
    args: &DumpLogArgs,
    out: &mut dyn Write,
    report: &mut Report,
) -> Res<()> {
    let base = start_offset_of(&file.name)?;
    let log_file = file.sibling(".log");
    let log = log_file.read()?;
    let index = OffsetIndex {
        data: read_index(file)?,
        base,
    };
    if index.entries() == 0 {
        writeln!(out, "{} is empty.", file.shown)?;
        return Ok(());
    }
    if args.index_sanity_check {
        let last = index.entry(index.entries() - 1).0;
        if last < base {
            return abort(format!(
                "Corrupt index found, index file ({}) has non-zero size but the last offset is {last} which is less than the base offset {base}",
                file.absolute
            ));
        }
        if !index.data.len().is_multiple_of(OFFSET_ENTRY) {
            return abort(format!(
                "Index file {} is corrupt, found {} bytes which is neither positive nor a multiple of {OFFSET_ENTRY}",
                file.absolute,
                index.data.len()
            ));
        }
        writeln!(out, "{} passed sanity check.", file.shown)?;
        return Ok(());
    }
    for i in 0..index.entries() {
        let (offset, position) = index.entry(i);
        if offset == base && i > 0 {
            return Ok(());
        }
        let end = slice_end(&log_file, log.len(), position, args.max_message_size)?;
        let mut batches = Batches::new(&log, position as usize, end, &log_file.shown);
        let Some(first) = batches.next_batch()? else {
            return abort("null");
        };
        let first_last = first.header(&log, &log_file.shown)?.last_offset();
        if first_last != offset {
            report
                .index_mismatches
                .entry(&file.absolute)
                .insert(Reverse(offset), first_last);
        }
        if !args.verify_index_only {
            writeln!(out, "offset: {offset} position: {position}")?;
        }
    }
    Ok(())
}

/// Kafka's `dumpTimeIndex`.
pub(crate) fn dump_time_index(
    file: &JFile,
    args: &DumpLogArgs,
    out: &mut dyn Write,
    report: &mut Report,
) -> Res<()> {
    let base = start_offset_of(&file.name)?;
    let log_file = file.sibling(".log");
    let index_file = file.sibling(".index");
    let log = log_file.read()?;
    let index = OffsetIndex {
        data: read_index(&index_file)?,
        base,
    };
    let time = read_index(file)?;
    let entries = time.len() / TIME_ENTRY;
    let entry = |i: usize| -> (i64, i64) {
        let at = i * TIME_ENTRY;
        (be_i64(&time, at), base + be_i32(&time, at + 8) as i64)
    };
    if args.index_sanity_check {
        if entries != 0 {
            let (last_ts, last_offset) = entry(entries - 1);
            let first_ts = entry(0).0;
            if last_ts < first_ts {
                return abort(format!(
                    "Corrupt time index found, time index file ({}) has non-zero size but the last timestamp is {last_ts} which is less than the first timestamp {first_ts}",
                    file.absolute
                ));
            }
            if last_offset < base {
                return abort(format!(
                    "Corrupt time index found, time index file ({}) has non-zero size but the last offset is {last_offset} which is less than the first offset {base}",
                    file.absolute
                ));
            }
        }
        if !time.len().is_multiple_of(TIME_ENTRY) {
            return abort(format!(
                "Time index file {} is corrupt, found {} bytes which is neither positive nor a multiple of {TIME_ENTRY}",
                file.absolute,
                time.len()
            ));
        }
        writeln!(out, "{} passed sanity check.", file.shown)?;
        return Ok(());
    }
    let mut prev_ts: i64 = -1;
    for i in 0..entries {
        let (ts, offset) = entry(i);
        if offset == base && i > 0 {
            return Ok(());
        }
        let (_, position) = index.lookup(offset);
        let end = slice_end(&log_file, log.len(), position, i32::MAX)?;
        let mut batches = Batches::new(&log, position as usize, end, &log_file.shown);
        let mut all: Vec<FileBatch> = Vec::new();
        while let Some(b) = batches.next_batch()? {
            all.push(b);
        }
        let mut matching = None;
        for b in all {
            let h = b.header(&log, &log_file.shown)?;
            if h.last_offset() >= offset {
                matching = Some((b, h));
                break;
            }
        }
        match matching {
            None => report
                .time_offset_not_found
                .entry(&file.absolute)
                .push((offset, -1)),
            Some((_, h)) if h.last_offset() != offset => report
                .time_offset_not_found
                .entry(&file.absolute)
                .push((offset, h.last_offset())),
            Some((b, h)) => {
                let mut max_ts: i64 = -1;
                for_each_record(b.bytes(&log), &h, |r| {
                    max_ts = max_ts.max(r.timestamp);
                    Ok(())
                })?;
                if max_ts != ts {
                    report
                        .time_mismatches
                        .entry(&file.absolute)
                        .push((ts, max_ts));
                }
                if prev_ts >= ts {
                    report
                        .time_out_of_order
                        .entry(&file.absolute)
                        .push((ts, prev_ts));
                }
            }
        }
        if !args.verify_index_only {
            writeln!(out, "timestamp: {ts} offset: {offset}")?;
        }
        prev_ts = ts;
    }
    Ok(())
}

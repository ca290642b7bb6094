//! Kafka's log cleaner (compaction) for one partition log: what is cleanable, the clean
//! itself, and the crash-safe swap of cleaned segments into the log.
//!
//! The broker's cleaner threads drive it in three steps, only the first and last under the
//! partition's lock:
//!
//! 1. [`crate::UnifiedLog::cleanable`] (Kafka's `cleanableOffsets` + `LogToClean`): the first dirty
//!    offset (the cleaner-offset-checkpoint entry, reset to the log start when out of range),
//!    the first uncleanable offset (the lowest of the last stable offset, the active segment
//!    and the first segment younger than `min.compaction.lag.ms`, rounded down to a segment
//!    base), the clean and cleanable bytes, their ratio and whether `max.compaction.lag.ms`
//!    forces a clean now. [`crate::UnifiedLog::prepare_clean`] then snapshots what the clean needs.
//! 2. [`CleanTask::run`], without any lock: an [`OffsetMap`] (key MD5 -> latest offset) over
//!    the dirty range, skipping aborted transactions' records and control batches, until the
//!    map is full (`log.cleaner.io.buffer.load.factor`); then every segment from the log
//!    start up to the map's end is rewritten, in groups bounded by `segment.bytes`,
//!    `segment.index.bytes` and the 32-bit relative offset range, into `.cleaned` files.
//!    The rules are Kafka's `Cleaner.cleanInto` and `MemoryRecords.filterTo`:
//!    - a record survives if it is the latest of its key (or beyond the map); records without
//!      a key go;
//!    - tombstones and transaction markers stay until their batch's delete horizon (KIP-534):
//!      the first clean keeping a batch with a tombstone, or a marker that may go, stamps
//!      `now + delete.retention.ms` into its base timestamp with attributes bit 6; a clean
//!      after that horizon removes them;
//!    - aborted transactions' records go; an ABORT marker stays while records of its
//!      transaction were seen in the pass (and is then indexed in the cleaned `.txnindex`), a
//!      COMMIT marker may go once none were (Kafka's `CleanedTransactionMetadata`);
//!    - the last batch of every active producer stays, emptied of records if need be
//!      (RETAIN_EMPTY), so its sequence and epoch survive and idempotent retries still dedup;
//!      so does the batch ending the cleaning round, keeping the log's offsets;
//!    - a batch keeps its base offset, last offset, base sequence, producer, leader epoch,
//!      timestamp type and codec; a batch with nothing removed (and no horizon to stamp) is
//!      copied byte for byte, others are re-encoded (compressed again with their codec) with
//!      a new CRC. Indexes, time index and `.txnindex` of the cleaned segment are rebuilt.
//! 3. [`crate::UnifiedLog::replace_segments`] for each group, as Kafka's `replaceSegments`: the
//!    `.cleaned` files (flushed) are renamed `.swap`, the new segment list is published to
//!    readers, the old segments' files are renamed `.deleted` (removed after
//!    `file.delete.delay.ms`), the `.swap` files take the final names and the directory is
//!    fsynced. A group whose segments are no longer exactly the log's (retention, truncation
//!    since [`crate::UnifiedLog::prepare_clean`]) is discarded and the run stops.
//!
//! A reader holding the old snapshot keeps reading the old files: segment files are opened
//! through their own [`crate::file_cache::FileSlot`], whose path follows renames, never by name.
//!
//! Crash recovery ([`crate::UnifiedLog::open`], Kafka's `LogLoader`): `.cleaned` files are deleted, and
//! so is any `.swap` at or above the lowest `.cleaned` offset (an unfinished rename); a
//! complete `.swap` replaces the segment files whose base offsets lie in its offset range and
//! is renamed to its final name. The environment variable `STROM_CLEANER_CRASH_AT` naming a
//! step ([`CRASH_STEPS`]) aborts the process there, for crash tests.

mod offset_map;
mod records;
mod throttler;
mod txn_meta;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use strom_protocol::batch::{peek_batch_size, BatchView, HEADER_SIZE};

use offset_map::{hash_keys, KeyHash};
pub use offset_map::{md5, OffsetMap, BYTES_PER_ENTRY, DEFAULT_LOAD_FACTOR};
pub use throttler::{ThrottleClock, Throttler, CLEANER_CHECK_INTERVAL_MS};

use crate::config::LogConfig;
use crate::file_cache::FileCache;
use crate::reader::Snapshot;
use crate::segment::{LogSegment, SegmentData};
use crate::StorageError;
use records::{build_empty, build_retained, delete_horizon_ms, parse_records, records_bytes};
use txn_meta::CleanedTransactionMetadata;

/// Suffix of a cleaned segment's files before the swap (Kafka's `CLEANED_FILE_SUFFIX`).
pub const CLEANED_FILE_SUFFIX: &str = ".cleaned";
/// Suffix of a cleaned segment's files during the swap (Kafka's `SWAP_FILE_SUFFIX`).
pub const SWAP_FILE_SUFFIX: &str = ".swap";

/// The failpoint steps of the swap, in order: after the `.cleaned` files are complete, after
/// they are renamed `.swap`, after the old segments are renamed `.deleted`, after the `.swap`
/// files took their final names.
pub const CRASH_STEPS: [&str; 4] = [
    "after_cleaned",
    "after_swap_rename",
    "after_old_deleted",
    "after_swap_done",
];

/// The environment variable naming a [`CRASH_STEPS`] step where the process aborts.
pub const CRASH_ENV: &str = "STROM_CLEANER_CRASH_AT";

/// Reads read at most this much at once (or one batch, if larger).
const READ_CHUNK: usize = 2 << 20;

/// Stops at `step` if a test asked for it (`injected`: an error, the "crash" of a unit test) or
/// the environment names it (the process aborts, as a SIGKILL would stop it).
pub(crate) fn crash_point(step: &str, injected: Option<&str>) -> Result<(), StorageError> {
    if injected == Some(step) {
        return Err(StorageError::Io(std::io::Error::other(format!(
            "cleaner failpoint {step}"
        ))));
    }
    if std::env::var(CRASH_ENV).is_ok_and(|v| v == step) {
        tracing::error!(step, "{CRASH_ENV}: aborting");
        std::process::abort();
    }
    Ok(())
}

/// What [`crate::UnifiedLog::cleanable`] found (Kafka's `LogToClean` with `OffsetsToClean`).
#[derive(Debug, Clone, PartialEq)]
pub struct LogToClean {
    pub first_dirty_offset: i64,
    /// A segment base offset: the clean stops below it.
    pub first_uncleanable_offset: i64,
    /// Bytes of the segments below the first dirty offset.
    pub clean_bytes: u64,
    /// Bytes of the segments from the first dirty offset to the first uncleanable one.
    pub cleanable_bytes: u64,
    /// `cleanable_bytes / (clean_bytes + cleanable_bytes)`.
    pub cleanable_ratio: f64,
    /// `max.compaction.lag.ms` has passed for a dirty record.
    pub needs_compaction_now: bool,
    /// How far past `max.compaction.lag.ms` the oldest dirty segment is (0: not past).
    pub max_compaction_delay_ms: i64,
    /// The checkpointed offset was out of range and the first dirty offset was reset to the log
    /// start: the broker writes it back (Kafka's `forceUpdateCheckpoint`).
    pub reset_checkpoint: bool,
    /// The log's `min.cleanable.dirty.ratio`.
    pub min_cleanable_ratio: f64,
}

impl LogToClean {
    pub fn total_bytes(&self) -> u64 {
        self.clean_bytes + self.cleanable_bytes
    }

    /// Kafka's `grabFilthiestCompactedLog` filter: something to clean, and either past
    /// `max.compaction.lag.ms` or dirtier than `min.cleanable.dirty.ratio`.
    pub fn should_clean(&self) -> bool {
        self.total_bytes() > 0
            && ((self.needs_compaction_now && self.cleanable_bytes > 0)
                || self.cleanable_ratio > self.min_cleanable_ratio)
    }
}

/// The last data batch of an active producer (Kafka's `LastRecord`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LastRecord {
    /// The last offset of its last data batch, if it has one.
    pub last_data_offset: Option<i64>,
    pub producer_epoch: i16,
}

/// One segment as the clean sees it, captured under the lock.
pub(crate) struct SegmentToClean {
    pub data: Arc<SegmentData>,
    pub base: i64,
    pub size: u64,
    /// The offset after its last batch (Kafka's `readNextOffset`).
    pub next_offset: i64,
    pub offset_index_bytes: u64,
    pub time_index_bytes: u64,
    pub last_modified: Option<SystemTime>,
}

/// Kafka's `CleanerStats`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CleanerStats {
    /// The first offset not cleaned: the next first dirty offset, to checkpoint (unless
    /// `aborted`).
    pub end_offset: i64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub messages_read: u64,
    pub messages_written: u64,
    pub map_bytes_read: u64,
    pub map_messages_read: u64,
    /// Records without a key, dropped.
    pub invalid_messages: u64,
    pub buffer_utilization: f64,
    /// Groups swapped into the log.
    pub groups_swapped: usize,
    /// The run stopped early (a swap refused, or the abort flag set): do not checkpoint.
    pub aborted: bool,
}

/// One rewritten group of segments, `.cleaned` files complete and flushed, for
/// [`crate::UnifiedLog::replace_segments`]. Dropped unused, its files are deleted.
pub struct CleanedGroup {
    pub(crate) segment: Option<LogSegment>,
    /// The segments it replaces (base offset and identity).
    pub(crate) replaced: Vec<(i64, Arc<SegmentData>)>,
    /// The readers' truncation generation when the clean was prepared.
    pub(crate) generation: u64,
    pub(crate) crash_at: Option<String>,
}

impl std::fmt::Debug for CleanedGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CleanedGroup")
            .field("base_offset", &self.base_offset())
            .field("replaced", &self.replaced_base_offsets())
            .finish()
    }
}

impl CleanedGroup {
    pub fn base_offset(&self) -> i64 {
        self.replaced.first().map_or(-1, |(b, _)| *b)
    }
    pub fn replaced_base_offsets(&self) -> Vec<i64> {
        self.replaced.iter().map(|(b, _)| *b).collect()
    }
    /// Deletes the cleaned files (the swap was refused).
    pub(crate) fn discard(&mut self) -> Result<(), StorageError> {
        if let Some(seg) = self.segment.take() {
            seg.delete_files()?;
        }
        Ok(())
    }
}

impl Drop for CleanedGroup {
    fn drop(&mut self) {
        if let Err(e) = self.discard() {
            tracing::warn!(error = %e, "could not delete discarded cleaned segment files");
        }
    }
}

/// Everything one clean of one log needs, taken under the partition's lock by
/// [`crate::UnifiedLog::prepare_clean`]; [`Self::run`] needs no lock.
pub struct CleanTask {
    pub(crate) dir: PathBuf,
    pub(crate) config: LogConfig,
    pub(crate) cache: Arc<FileCache>,
    pub(crate) generation: u64,
    /// Every segment of the log (for the aborted transactions indexed with later markers).
    pub(crate) all: Snapshot,
    /// The segments below the first uncleanable offset, oldest first.
    pub(crate) segments: Vec<SegmentToClean>,
    pub(crate) first_dirty_offset: i64,
    pub(crate) first_uncleanable_offset: i64,
    pub(crate) last_records: HashMap<i64, LastRecord>,
    pub(crate) abort: Option<Arc<AtomicBool>>,
    pub(crate) crash_at: Option<String>,
}

impl std::fmt::Debug for CleanTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CleanTask")
            .field("dir", &self.dir)
            .field("first_dirty_offset", &self.first_dirty_offset)
            .field("first_uncleanable_offset", &self.first_uncleanable_offset)
            .finish()
    }
}

/// The state of one pass over batches, shared by the rewrite of a group's segments.
struct Pass<'a> {
    map: &'a mut OffsetMap,
    throttler: &'a Throttler,
    now_ms: i64,
    delete_retention_ms: i64,
    /// The first uncleanable offset: the batch ending there is kept even if emptied.
    upper_bound: i64,
    last_records: &'a HashMap<i64, LastRecord>,
    txn: CleanedTransactionMetadata,
    stats: &'a mut CleanerStats,
    /// The read buffer and the output of one chunk, reused.
    buf: Vec<u8>,
    out: Vec<u8>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BatchRetention {
    Delete,
    DeleteEmpty,
    RetainEmpty,
}

/// The control record type of a control batch's first record; `None` for an emptied batch.
fn control_type(view: &BatchView<'_>) -> Result<Option<i16>, StorageError> {
    if view.records_count() <= 0 {
        return Ok(None);
    }
    let data = records_bytes(view)?;
    let recs = parse_records(view, &data)?;
    // Key: version (i16), type (i16). Unparseable keys count as an unknown type (kept).
    Ok(Some(
        recs.first()
            .and_then(|r| r.key)
            .and_then(|k| k.get(2..4))
            .map_or(-1, |t| i16::from_be_bytes([t[0], t[1]])),
    ))
}

/// Whole batches from `pos` on: about [`READ_CHUNK`] bytes, at least one batch, read into
/// `buf` (reused from chunk to chunk, grown only for a larger batch).
fn read_chunk<'b>(
    seg: &SegmentToClean,
    pos: u64,
    buf: &'b mut Vec<u8>,
) -> Result<&'b [u8], StorageError> {
    let h = seg.data.read_header(pos, seg.size)?;
    let len = (h.size as u64).max((READ_CHUNK as u64).min(seg.size - pos)) as usize;
    if buf.len() < len {
        buf.resize(len, 0);
    }
    seg.data.read_into(pos, &mut buf[..len], seg.size)?;
    let buf = &buf[..len];
    let mut taken = 0;
    while buf.len() - taken >= HEADER_SIZE {
        let size = peek_batch_size(&buf[taken..])
            .map_err(|e| StorageError::CorruptRecord(e.to_string()))?;
        if taken + size > buf.len() {
            break;
        }
        taken += size;
    }
    Ok(&buf[..taken])
}

fn batches(chunk: &[u8]) -> impl Iterator<Item = Result<BatchView<'_>, StorageError>> {
    let mut pos = 0;
    std::iter::from_fn(move || {
        if pos >= chunk.len() {
            return None;
        }
        let r = BatchView::parse(&chunk[pos..])
            .map_err(|e| StorageError::CorruptRecord(format!("cleaner: {e}")));
        match &r {
            Ok(v) => pos += v.size(),
            Err(_) => pos = chunk.len(),
        }
        Some(r)
    })
}

impl CleanTask {
    pub fn first_dirty_offset(&self) -> i64 {
        self.first_dirty_offset
    }
    pub fn first_uncleanable_offset(&self) -> i64 {
        self.first_uncleanable_offset
    }

    /// A flag that stops the run at the next chunk (Kafka's `checkDone`: the partition is
    /// being deleted, truncated or its cleaning aborted); the stats say `aborted`.
    pub fn set_abort_flag(&mut self, flag: Arc<AtomicBool>) {
        self.abort = Some(flag);
    }

    /// Makes [`crate::UnifiedLog::replace_segments`] fail at `step` (one of [`CRASH_STEPS`]) for the
    /// groups of this run, leaving the files as a crash there would: the crash tests' hook.
    pub fn set_crash_at(&mut self, step: Option<&str>) {
        self.crash_at = step.map(str::to_string);
    }

    fn aborted(&self) -> bool {
        self.abort
            .as_ref()
            .is_some_and(|f| f.load(Ordering::Acquire))
    }

    /// [`read_chunk`], or `None` when the read failed because the segment left the log
    /// meanwhile (retention, truncation, deletion): the run stops, as Kafka's `checkDone`.
    fn read<'b>(
        &self,
        seg: &SegmentToClean,
        pos: u64,
        buf: &'b mut Vec<u8>,
    ) -> Result<Option<&'b [u8]>, StorageError> {
        match read_chunk(seg, pos, buf) {
            Ok(c) => Ok(Some(c)),
            Err(_) if seg.data.is_removed() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The aborted transactions overlapping [`start`, `upper`), from the segment holding
    /// `start` on (Kafka's `collectAbortedTransactions`).
    fn aborted_txns(&self, start: i64, upper: i64) -> Vec<crate::txn_index::AbortedTxn> {
        let first = self
            .all
            .partition_point(|s| s.base_offset() <= start)
            .saturating_sub(1);
        crate::reader::collect_aborted(&self.all[first..], start, upper)
    }

    /// Builds the offset map over the dirty range, then rewrites the log from its start up to
    /// the map's end in groups, handing each to `swap` (the broker runs it as
    /// `partition.with_log(|l| l.replace_segments(g))`); stops early when `swap` returns
    /// false. See the module docs.
    pub fn run(
        self,
        map: &mut OffsetMap,
        throttler: &Throttler,
        now_ms: i64,
        swap: &mut dyn FnMut(CleanedGroup) -> Result<bool, StorageError>,
    ) -> Result<CleanerStats, StorageError> {
        let mut stats = CleanerStats::default();
        if self.first_dirty_offset >= self.first_uncleanable_offset {
            stats.end_offset = self.first_dirty_offset;
            return Ok(stats);
        }
        if !self.build_offset_map(map, throttler, &mut stats)? {
            stats.aborted = true;
            stats.end_offset = self.first_dirty_offset;
            return Ok(stats);
        }
        let end_offset = map.latest_offset() + 1;
        stats.end_offset = end_offset;
        if end_offset <= self.first_dirty_offset {
            return Err(StorageError::InvalidRecord(format!(
                "{}: the cleaner's offset map ({} slots) cannot hold the first batch at {}",
                self.dir.display(),
                map.slots(),
                self.first_dirty_offset
            )));
        }
        stats.buffer_utilization = map.utilization();
        let in_range = self.segments.partition_point(|s| s.base < end_offset);
        let groups = group_segments_by_size(
            &self.segments[..in_range],
            self.config.segment_bytes.min(i32::MAX as u64),
            self.config.segment_index_bytes as u64,
            self.first_uncleanable_offset,
        );
        let mut pass = Pass {
            map,
            throttler,
            now_ms,
            delete_retention_ms: self.config.delete_retention_ms,
            upper_bound: self.first_uncleanable_offset,
            last_records: &self.last_records,
            txn: CleanedTransactionMetadata::default(),
            stats: &mut stats,
            buf: Vec::new(),
            out: Vec::new(),
        };
        for range in groups {
            let group = &self.segments[range];
            let Some(cleaned) = self.clean_segments(group, &mut pass)? else {
                pass.stats.aborted = true;
                break;
            };
            if !swap(cleaned)? {
                pass.stats.aborted = true;
                break;
            }
            pass.stats.groups_swapped += 1;
        }
        Ok(stats)
    }

    /// Kafka's `buildOffsetMap`; false if aborted.
    fn build_offset_map(
        &self,
        map: &mut OffsetMap,
        throttler: &Throttler,
        stats: &mut CleanerStats,
    ) -> Result<bool, StorageError> {
        map.clear();
        let start = self.first_dirty_offset;
        let end = self.first_uncleanable_offset;
        // Kafka's `logSegments(start, end)`: from the segment holding `start`.
        let from = self
            .segments
            .partition_point(|s| s.base <= start)
            .saturating_sub(1);
        let dirty: Vec<&SegmentToClean> = self.segments[from..]
            .iter()
            .filter(|s| s.base < end)
            .collect();
        let mut txn = CleanedTransactionMetadata::default();
        txn.add_aborted_transactions(self.aborted_txns(start, end));
        let mut buf = Vec::new();
        for (i, seg) in dirty.iter().enumerate() {
            let next_start = dirty.get(i + 1).map_or(end, |n| n.base);
            let range = (start, next_start);
            match self.map_segment(seg, map, range, &mut txn, throttler, stats, &mut buf)? {
                MapOutcome::Done => {}
                MapOutcome::Full => break,
                MapOutcome::Aborted => return Ok(false),
            }
        }
        Ok(true)
    }

    /// Kafka's `buildOffsetMapForSegment`.
    #[allow(clippy::too_many_arguments)]
    fn map_segment(
        &self,
        seg: &SegmentToClean,
        map: &mut OffsetMap,
        (start, next_start): (i64, i64),
        txn: &mut CleanedTransactionMetadata,
        throttler: &Throttler,
        stats: &mut CleanerStats,
        buf: &mut Vec<u8>,
    ) -> Result<MapOutcome, StorageError> {
        let mut pos = seg.data.offset_index().lookup(start).position as u64;
        let max_desired = map.max_desired_size();
        let mut hashes = Vec::new();
        while pos < seg.size {
            if self.aborted() {
                return Ok(MapOutcome::Aborted);
            }
            let Some(chunk) = self.read(seg, pos, buf)? else {
                return Ok(MapOutcome::Aborted);
            };
            throttler.maybe_throttle(chunk.len() as f64);
            for view in batches(chunk) {
                let view = view?;
                if view.is_control() {
                    txn.on_control_batch_read(
                        view.last_offset(),
                        view.producer_id(),
                        control_type(&view)?,
                    );
                    stats.map_messages_read += 1;
                } else if txn.on_batch_read(
                    view.last_offset(),
                    view.producer_id(),
                    view.is_transactional(),
                ) {
                    stats.map_messages_read += view.records_count().max(0) as u64;
                } else {
                    let data = records_bytes(&view)?;
                    let recs = parse_records(&view, &data)?;
                    let keys: Vec<&[u8]> = recs
                        .iter()
                        .filter(|r| r.offset >= start)
                        .filter_map(|r| r.key)
                        .collect();
                    hashes.clear();
                    hash_keys(&keys, &mut hashes);
                    let mut next_hash = hashes.iter();
                    for r in &recs {
                        if r.key.is_some() && r.offset >= start {
                            let hash = *next_hash.next().expect("one hash per key");
                            if map.size() < max_desired {
                                map.put_hash(hash, r.offset);
                            } else {
                                return Ok(MapOutcome::Full);
                            }
                        }
                        stats.map_messages_read += 1;
                    }
                }
                if view.last_offset() >= start {
                    map.update_latest_offset(view.last_offset());
                }
            }
            pos += chunk.len() as u64;
            stats.map_bytes_read += chunk.len() as u64;
        }
        // Offsets may have gaps (an earlier clean): the whole segment is mapped.
        map.update_latest_offset(next_start - 1);
        Ok(MapOutcome::Done)
    }

    /// Kafka's `cleanSegments`: one group into one `.cleaned` segment; `None` if aborted.
    fn clean_segments(
        &self,
        group: &[SegmentToClean],
        pass: &mut Pass<'_>,
    ) -> Result<Option<CleanedGroup>, StorageError> {
        let base = group[0].base;
        let dest = LogSegment::create_cleaned(
            &self.cache,
            &self.dir,
            base,
            &self.config,
            crate::segment::now_ms(),
        )?;
        let mut cleaned = CleanedGroup {
            segment: Some(dest),
            replaced: group.iter().map(|s| (s.base, s.data.clone())).collect(),
            generation: self.generation,
            crash_at: self.crash_at.clone(),
        };
        let dest = cleaned.segment.as_mut().expect("just set");
        for (i, seg) in group.iter().enumerate() {
            // The whole segment's aborted transactions: its `.txnindex` is rebuilt in full.
            let upper = group.get(i + 1).map_or(seg.next_offset, |n| n.base);
            pass.txn
                .add_aborted_transactions(self.aborted_txns(seg.base, upper));
            if !self.clean_into(seg, dest, pass)? {
                return Ok(None);
            }
        }
        dest.on_become_inactive()?;
        dest.flush()?;
        // Retention by time of a segment without timestamps goes by the file's age.
        if let Some(t) = group.last().and_then(|s| s.last_modified) {
            dest.set_last_modified(t)?;
        }
        Ok(Some(cleaned))
    }

    /// Kafka's `cleanInto`: one source segment's retained batches appended to `dest`.
    fn clean_into(
        &self,
        seg: &SegmentToClean,
        dest: &mut LogSegment,
        pass: &mut Pass<'_>,
    ) -> Result<bool, StorageError> {
        let mut pos = 0;
        while pos < seg.size {
            if self.aborted() {
                return Ok(false);
            }
            let mut buf = std::mem::take(&mut pass.buf);
            let Some(chunk) = self.read(seg, pos, &mut buf)? else {
                return Ok(false);
            };
            pass.throttler.maybe_throttle(chunk.len() as f64);
            let mut out = std::mem::take(&mut pass.out);
            out.clear();
            for view in batches(chunk) {
                pass.filter_batch(&view?, &mut out)?;
            }
            let chunk_len = chunk.len();
            pass.buf = buf;
            for txn in pass.txn.take_retained_aborts() {
                dest.txn_index().append(txn)?;
            }
            pos += chunk_len as u64;
            if !out.is_empty() {
                dest.append(&out)?;
                pass.stats.bytes_written += out.len() as u64;
                pass.throttler.maybe_throttle(out.len() as f64);
            }
            pass.out = out;
        }
        Ok(true)
    }
}

enum MapOutcome {
    Done,
    Full,
    Aborted,
}

impl Pass<'_> {
    /// Kafka's `checkBatchRetention` + `filterTo` for one batch, appending what stays to `out`.
    fn filter_batch(
        &mut self,
        view: &BatchView<'_>,
        out: &mut Vec<u8>,
    ) -> Result<(), StorageError> {
        let pid = view.producer_id();
        let control = view.is_control();
        let can_discard = if control {
            self.txn
                .on_control_batch_read(view.last_offset(), pid, control_type(view)?)
        } else {
            self.txn
                .on_batch_read(view.last_offset(), pid, view.is_transactional())
        };
        let horizon = delete_horizon_ms(view);
        let discard_records = if control {
            // Markers ride on the tombstone horizon: never removed before it.
            can_discard && horizon.is_some_and(|h| h <= self.now_ms)
        } else {
            can_discard
        };
        let last_of_producer = pid >= 0
            && self
                .last_records
                .get(&pid)
                .is_some_and(|lr| match lr.last_data_offset {
                    Some(o) => view.last_offset() == o,
                    None => control && view.producer_epoch() == lr.producer_epoch,
                });
        let retention = if last_of_producer || view.next_offset() == self.upper_bound {
            BatchRetention::RetainEmpty
        } else if discard_records {
            BatchRetention::Delete
        } else {
            BatchRetention::DeleteEmpty
        };
        let marker_for_empty_txn = can_discard && control;
        self.stats.bytes_read += view.size() as u64;
        if retention == BatchRetention::Delete {
            return Ok(());
        }
        let data = records_bytes(view)?;
        let records = parse_records(view, &data)?;
        // The keys whose latest offset is asked and the map cannot tell by offset alone (records
        // it did not map: below the dirty range), hashed together (see `hash_keys`).
        let latest = self.map.latest_offset();
        let keys: Vec<&[u8]> = if discard_records || control {
            Vec::new()
        } else {
            records
                .iter()
                .filter(|r| r.offset <= latest && self.map.is_latest_put(r.offset).is_none())
                .filter_map(|r| r.key)
                .collect()
        };
        let mut hashes = Vec::with_capacity(keys.len());
        hash_keys(&keys, &mut hashes);
        let mut next_hash = hashes.iter();
        let mut retained = Vec::with_capacity(records.len());
        let mut write_original = true;
        let mut tombstones = false;
        for r in &records {
            self.stats.messages_read += 1;
            let keep = if discard_records {
                false
            } else if control {
                true
            } else {
                self.should_retain_record(r, horizon, &mut next_hash)
            };
            if keep {
                tombstones |= r.value.is_none();
                retained.push(*r);
            } else {
                write_original = false;
            }
        }
        if !retained.is_empty() {
            let set_horizon = (tombstones || marker_for_empty_txn) && horizon.is_none();
            if write_original && !set_horizon {
                out.extend_from_slice(view.bytes());
            } else {
                let horizon = if set_horizon {
                    Some(self.now_ms.saturating_add(self.delete_retention_ms))
                } else {
                    horizon
                };
                build_retained(view, &retained, horizon, out)?;
            }
            self.stats.messages_written += retained.len() as u64;
        } else if retention == BatchRetention::RetainEmpty {
            out.extend_from_slice(&build_empty(view));
        }
        Ok(())
    }

    /// Kafka's `Cleaner.shouldRetainRecord` for v2 batches.
    fn should_retain_record(
        &mut self,
        r: &records::ParsedRecord<'_>,
        horizon: Option<i64>,
        hashes: &mut std::slice::Iter<'_, KeyHash>,
    ) -> bool {
        if r.offset > self.map.latest_offset() {
            return true;
        }
        match r.key {
            Some(_) => {
                let latest = match self.map.is_latest_put(r.offset) {
                    Some(latest) => latest,
                    None => {
                        let hash = *hashes.next().expect("one hash per key asked");
                        r.offset >= self.map.get_hash(hash)
                    }
                };
                let retain_deletes = horizon.is_none_or(|h| self.now_ms < h);
                latest && (r.value.is_some() || retain_deletes)
            }
            None => {
                self.stats.invalid_messages += 1;
                false
            }
        }
    }
}

/// Kafka's `groupSegmentsBySize`: consecutive segments whose log, offset index and time index
/// sizes each fit the limits and whose offsets stay within 2^31 of the group's base.
pub(crate) fn group_segments_by_size(
    segs: &[SegmentToClean],
    max_size: u64,
    max_index_size: u64,
    first_uncleanable_offset: i64,
) -> Vec<std::ops::Range<usize>> {
    let mut groups = Vec::new();
    let mut i = 0;
    while i < segs.len() {
        let start = i;
        let mut log_size = segs[i].size;
        let mut index_size = segs[i].offset_index_bytes;
        let mut time_index_size = segs[i].time_index_bytes;
        i += 1;
        while i < segs.len() {
            let s = &segs[i];
            // The next segment's last offset, estimated from the one after it.
            let last_offset = segs
                .get(i + 1)
                .map_or(first_uncleanable_offset - 1, |n| n.base - 1);
            if log_size + s.size <= max_size
                && index_size + s.offset_index_bytes <= max_index_size
                && time_index_size + s.time_index_bytes <= max_index_size
                && (s.size == 0 || last_offset - segs[start].base <= i32::MAX as i64)
            {
                log_size += s.size;
                index_size += s.offset_index_bytes;
                time_index_size += s.time_index_bytes;
                i += 1;
            } else {
                break;
            }
        }
        groups.push(start..i);
    }
    groups
}

#[cfg(test)]
mod tests;

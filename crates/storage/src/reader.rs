//! [`LogReader`]: reads of a partition log that do not take the log's append lock.
//!
//! Segments are append-only, so a read only needs (a) the list of segments, (b) for each the
//! number of bytes known to hold whole batches, and (c) the log start and end offsets. The writer
//! ([`crate::UnifiedLog`], behind the broker's lock) publishes all three only after the bytes they
//! describe are on the file: the segment list as an immutable snapshot (`Arc<Vec<..>>` swapped
//! under a `RwLock` held for the pointer copy only), sizes and offsets as atomics stored with
//! `Release` after the write. A read takes the snapshot, then reads with `pread` on the shared
//! file handles, never past a published size.
//!
//! Truncation is the one operation that takes published bytes back. It is bracketed by a
//! generation counter (odd while it runs, a seqlock): a read that overlapped one is retried, so
//! once `truncate_to` returns no read serves the truncated range. Retention and DeleteRecords only
//! remove whole segments from the front: a read that already holds such a segment may still
//! return its data (as in Kafka), and one whose file vanished retries with a fresh snapshot,
//! which then answers OFFSET_OUT_OF_RANGE.

use std::sync::atomic::{fence, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

use crate::file_records::{FileFetchDataInfo, FileRecords};
use crate::segment::SegmentData;
use crate::txn_index::AbortedTxn;
use crate::{FetchDataInfo, StorageError};

/// How often a read retries after racing a truncation or a segment deletion before giving up
/// with the last error (a truncation storm this long is not a steady state).
const MAX_READ_ATTEMPTS: usize = 64;

pub(crate) type Snapshot = Arc<Vec<Arc<SegmentData>>>;

/// State the writer publishes for readers.
pub(crate) struct Shared {
    segments: RwLock<Snapshot>,
    log_start_offset: AtomicI64,
    log_end_offset: AtomicI64,
    /// Odd while a truncation is taking bytes back.
    generation: AtomicU64,
}

impl Shared {
    pub(crate) fn new(segments: Snapshot, log_start: i64, log_end: i64) -> Arc<Self> {
        Arc::new(Self {
            segments: RwLock::new(segments),
            log_start_offset: AtomicI64::new(log_start),
            log_end_offset: AtomicI64::new(log_end),
            generation: AtomicU64::new(0),
        })
    }

    /// Counts truncations (odd while one runs): the cleaner refuses a swap prepared before one.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    pub(crate) fn snapshot(&self) -> Snapshot {
        self.segments.read().clone()
    }

    pub(crate) fn publish_segments(&self, segments: Snapshot) {
        *self.segments.write() = segments;
    }

    pub(crate) fn publish_offsets(&self, log_start: i64, log_end: i64) {
        self.log_start_offset.store(log_start, Ordering::Release);
        self.log_end_offset.store(log_end, Ordering::Release);
    }

    /// Marks a truncation as running until the guard drops (also on an error return).
    pub(crate) fn begin_truncation(self: &Arc<Self>) -> TruncationGuard {
        self.generation.fetch_add(1, Ordering::AcqRel);
        TruncationGuard(self.clone())
    }
}

pub(crate) struct TruncationGuard(Arc<Shared>);

impl Drop for TruncationGuard {
    fn drop(&mut self) {
        self.0.generation.fetch_add(1, Ordering::Release);
    }
}

/// A handle for reading one partition's log without its append lock; cheap to clone, and
/// valid for as long as the log lives (a reader of a deleted log gets I/O or out-of-range
/// errors, never bytes of another log).
#[derive(Clone)]
pub struct LogReader {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for LogReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogReader")
            .field("log_start_offset", &self.log_start_offset())
            .field("log_end_offset", &self.log_end_offset())
            .finish()
    }
}

impl LogReader {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }

    /// The published log start offset.
    pub fn log_start_offset(&self) -> i64 {
        self.shared.log_start_offset.load(Ordering::Acquire)
    }

    /// The published log end offset: every offset below it is readable.
    pub fn log_end_offset(&self) -> i64 {
        self.shared.log_end_offset.load(Ordering::Acquire)
    }

    /// Whole batches starting with the one containing `fetch_offset`, up to `max_bytes`, never
    /// including a batch whose base offset is >= `max_offset` (nor any past the published log
    /// end). With `min_one_message` a first batch larger than `max_bytes` is returned whole
    /// (Kafka's first-batch exception). Same answers as [`crate::UnifiedLog::read`].
    pub fn read(
        &self,
        fetch_offset: i64,
        max_bytes: usize,
        max_offset: i64,
        min_one_message: bool,
    ) -> Result<FetchDataInfo, StorageError> {
        self.read_isolated(fetch_offset, max_bytes, max_offset, min_one_message, false)
    }

    /// [`Self::read`], and with `include_aborted` (read_committed, `max_offset` the LSO) also
    /// the aborted transactions overlapping what was read (Kafka's `LocalLog.read` with
    /// `includeAbortedTxns`).
    pub fn read_isolated(
        &self,
        fetch_offset: i64,
        max_bytes: usize,
        max_offset: i64,
        min_one_message: bool,
        include_aborted: bool,
    ) -> Result<FetchDataInfo, StorageError> {
        self.read_with(
            fetch_offset,
            max_bytes,
            max_offset,
            min_one_message,
            include_aborted,
            |planned| {
                Ok(FetchDataInfo {
                    records: planned.records.read_unchecked()?,
                    log_start_offset: planned.log_start_offset,
                    log_end_offset: planned.log_end_offset,
                    aborted_transactions: planned.aborted_transactions,
                })
            },
        )
    }

    /// [`Self::read_isolated`] without reading the records: which ranges of which segment
    /// files hold them ([`FileRecords`], read later by whoever sends them). Only batch headers
    /// are read here.
    pub fn read_file_records(
        &self,
        fetch_offset: i64,
        max_bytes: usize,
        max_offset: i64,
        min_one_message: bool,
        include_aborted: bool,
    ) -> Result<FileFetchDataInfo, StorageError> {
        self.read_with(
            fetch_offset,
            max_bytes,
            max_offset,
            min_one_message,
            include_aborted,
            Ok,
        )
    }

    /// One consistent read: plans it over a snapshot, runs `finish` on the plan, and starts
    /// again if a truncation overlapped either (or a segment of the snapshot left the log and
    /// the read failed). The records planned remember the truncation count they were planned
    /// at, for [`FileRecords::still_valid`].
    fn read_with<T>(
        &self,
        fetch_offset: i64,
        max_bytes: usize,
        max_offset: i64,
        min_one_message: bool,
        include_aborted: bool,
        finish: impl Fn(FileFetchDataInfo) -> Result<T, StorageError>,
    ) -> Result<T, StorageError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let generation = self.shared.generation.load(Ordering::Acquire);
            if generation % 2 == 1 {
                std::thread::yield_now();
                continue;
            }
            let segments = self.shared.snapshot();
            // End before start: an end offset read first is never below the start read after.
            let log_end = self.log_end_offset();
            let log_start = self.log_start_offset();
            let result = plan_segments(
                &segments,
                log_start,
                log_end,
                fetch_offset,
                max_bytes,
                max_offset,
                min_one_message,
                include_aborted,
            )
            .and_then(|mut planned| {
                planned.records = planned.records.guarded(self.shared.clone(), generation);
                finish(planned)
            });
            fence(Ordering::Acquire);
            if self.shared.generation.load(Ordering::Acquire) != generation {
                // A truncation ran meanwhile: what was read may be gone.
                continue;
            }
            match result {
                Err(_)
                    if attempt < MAX_READ_ATTEMPTS && segments.iter().any(|s| s.is_removed()) =>
                {
                    // A segment left the log (its file may be gone): read the new state.
                    continue;
                }
                r => return r,
            }
        }
    }
}

/// The read itself over one consistent view (a snapshot and the offsets published with it),
/// into memory.
#[allow(clippy::too_many_arguments)]
pub(crate) fn read_segments(
    segments: &[Arc<SegmentData>],
    log_start: i64,
    log_end: i64,
    start_offset: i64,
    max_bytes: usize,
    max_offset: i64,
    min_one_message: bool,
    include_aborted: bool,
) -> Result<FetchDataInfo, StorageError> {
    let planned = plan_segments(
        segments,
        log_start,
        log_end,
        start_offset,
        max_bytes,
        max_offset,
        min_one_message,
        include_aborted,
    )?;
    Ok(FetchDataInfo {
        records: planned.records.read_all()?,
        log_start_offset: planned.log_start_offset,
        log_end_offset: planned.log_end_offset,
        aborted_transactions: planned.aborted_transactions,
    })
}

/// Which bytes a read returns, without reading them: whole batches from the one holding
/// `start_offset`, up to `max_bytes` (the first batch whole with `min_one_message`), none with
/// a base offset at or past `max_offset` or the log end. Only batch headers are read: where
/// the first batch is, where the high watermark's batch ends, and where the byte limit falls
/// (from the offset index's entry before it).
#[allow(clippy::too_many_arguments)]
pub(crate) fn plan_segments(
    segments: &[Arc<SegmentData>],
    log_start: i64,
    log_end: i64,
    start_offset: i64,
    max_bytes: usize,
    max_offset: i64,
    min_one_message: bool,
    include_aborted: bool,
) -> Result<FileFetchDataInfo, StorageError> {
    if start_offset < log_start || start_offset > log_end {
        return Err(StorageError::OffsetOutOfRange {
            requested: start_offset,
            log_start,
            log_end,
        });
    }
    // Bytes appended after `log_end` was read are not served, so the answer matches its offsets.
    let max_offset = max_offset.min(log_end);
    let mut out = FileRecords::default();
    // The segment holding `start_offset`: the last whose base is <= it.
    let first = segments
        .partition_point(|s| s.base_offset() <= start_offset)
        .saturating_sub(1);
    if start_offset >= max_offset {
        // Nothing readable yet (at the HW or LSO): no records, no aborted transactions.
        return Ok(FileFetchDataInfo {
            records: out,
            log_start_offset: log_start,
            log_end_offset: log_end,
            aborted_transactions: include_aborted.then(Vec::new),
        });
    }
    // Where the read ended: the last segment read (index), the position it was read from and
    // the bytes taken from it (Kafka's fetch upper bound for the aborted transactions).
    let mut extent = (first, 0u64, 0usize);
    let mut from = start_offset;
    for (i, seg) in segments[first..].iter().enumerate() {
        if from >= log_end {
            break;
        }
        let size = seg.size();
        let next_offset = seg.next_offset();
        let Some((pos, first_batch)) = seg.translate_offset(from, size)? else {
            continue;
        };
        if first_batch.base_offset >= max_offset {
            break;
        }
        extent = (first + i, pos, 0);
        let remaining = max_bytes - out.len();
        if first_batch.size > remaining {
            if out.is_empty() && min_one_message {
                out.push(seg, pos, first_batch.size);
                extent.2 = first_batch.size;
            }
            break;
        }
        // Bound the read at the high watermark's batch so a consumer at the tail does not
        // get bytes past it.
        let mut end = size;
        if max_offset < next_offset {
            if let Some((hw_pos, hw)) = seg.translate_offset(max_offset, size)? {
                end = if hw.base_offset >= max_offset {
                    hw_pos
                } else {
                    hw_pos + hw.size as u64
                };
            }
        }
        let available = end.saturating_sub(pos) as usize;
        let taken = if available <= remaining {
            available
        } else {
            let first_end = pos + first_batch.size as u64;
            (seg.last_batch_end_within(first_end, pos + remaining as u64, end)? - pos) as usize
        };
        let finished_segment = taken == available && end == size;
        extent.2 = taken;
        out.push(seg, pos, taken);
        if !finished_segment {
            break;
        }
        from = next_offset;
    }
    let aborted_transactions = if include_aborted {
        let (last, pos, bytes) = extent;
        let upper = segments[last]
            .offset_index()
            .fetch_upper_bound_offset(pos + bytes as u64)
            .or_else(|| segments.get(last + 1).map(|s| s.base_offset()))
            .unwrap_or(log_end);
        Some(collect_aborted(&segments[first..], start_offset, upper))
    } else {
        None
    };
    Ok(FileFetchDataInfo {
        records: out,
        log_start_offset: log_start,
        log_end_offset: log_end,
        aborted_transactions,
    })
}

/// Kafka's `collectAbortedTransactions`: walks the segments' transaction indexes from the one
/// holding `start_offset` until one shows no later segment can add an overlapping transaction.
pub(crate) fn collect_aborted(
    segments: &[Arc<SegmentData>],
    start_offset: i64,
    upper_bound: i64,
) -> Vec<AbortedTxn> {
    let mut out = Vec::new();
    for seg in segments {
        let r = seg
            .txn_index()
            .collect_aborted_txns(start_offset, upper_bound);
        out.extend(r.aborted);
        if r.is_complete {
            break;
        }
    }
    out
}

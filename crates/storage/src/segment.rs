//! One segment of a partition log: the `.log` file of concatenated batches and its two indexes,
//! as Kafka's `LogSegment`.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use strom_protocol::batch::{self, peek_batch_size, BatchError, BatchIter, HEADER_SIZE};
use strom_protocol::records::RecordBatchDecoder;

use crate::config::LogConfig;
use crate::file_cache::{FileCache, FileSlot};
use crate::index::{OffsetIndex, TimeIndex, TimestampOffset};
use crate::producer_state::CompletedTxn;
use crate::txn_index::{txn_index_file_name, AbortedTxn, TransactionIndex};
use crate::{StorageError, TimestampAndOffset};

/// Recovery reads the log in chunks of this size (or one batch, if larger).
const RECOVERY_CHUNK: usize = 1 << 20;

pub fn log_file_name(base_offset: i64) -> String {
    format!("{base_offset:020}.log")
}
pub fn offset_index_file_name(base_offset: i64) -> String {
    format!("{base_offset:020}.index")
}
pub fn time_index_file_name(base_offset: i64) -> String {
    format!("{base_offset:020}.timeindex")
}

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn be_i64(b: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// The header fields the log acts on, read from the first [`HEADER_SIZE`] bytes of a batch
/// without needing the rest of it in memory (the protocol crate's `BatchView` wants the whole
/// batch, which a header walk over a file does not have).
#[derive(Debug, Clone, Copy)]
pub struct BatchHeader {
    pub base_offset: i64,
    pub last_offset: i64,
    pub size: usize,
    pub max_timestamp: i64,
    pub partition_leader_epoch: i32,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub attributes: i16,
}

impl BatchHeader {
    pub fn parse(buf: &[u8]) -> Result<Self, BatchError> {
        let size = peek_batch_size(buf)?;
        if buf.len() < HEADER_SIZE {
            return Err(BatchError::Truncated {
                needed: HEADER_SIZE,
                available: buf.len(),
            });
        }
        let base_offset = be_i64(buf, batch::BASE_OFFSET_OFFSET);
        let delta = be_i32(buf, batch::LAST_OFFSET_DELTA_OFFSET);
        batch::check_offset_delta(base_offset, delta)?;
        Ok(Self {
            base_offset,
            last_offset: base_offset + delta as i64,
            size,
            max_timestamp: be_i64(buf, batch::MAX_TIMESTAMP_OFFSET),
            partition_leader_epoch: be_i32(buf, batch::PARTITION_LEADER_EPOCH_OFFSET),
            producer_id: be_i64(buf, batch::PRODUCER_ID_OFFSET),
            producer_epoch: i16::from_be_bytes([
                buf[batch::PRODUCER_EPOCH_OFFSET],
                buf[batch::PRODUCER_EPOCH_OFFSET + 1],
            ]),
            base_sequence: be_i32(buf, batch::BASE_SEQUENCE_OFFSET),
            attributes: i16::from_be_bytes([
                buf[batch::ATTRIBUTES_OFFSET],
                buf[batch::ATTRIBUTES_OFFSET + 1],
            ]),
        })
    }

    pub fn offset_delta(&self) -> i32 {
        (self.last_offset - self.base_offset) as i32
    }

    pub fn last_sequence(&self) -> i32 {
        batch::last_sequence(self.base_sequence, self.offset_delta())
    }

    pub fn is_control(&self) -> bool {
        self.attributes & 0x20 != 0
    }

    pub fn is_transactional(&self) -> bool {
        self.attributes & 0x10 != 0
    }

    fn leader_epoch(&self) -> Option<i32> {
        (self.partition_leader_epoch >= 0).then_some(self.partition_leader_epoch)
    }
}

fn corrupt(path: &Path, pos: u64, what: impl std::fmt::Display) -> StorageError {
    StorageError::CorruptRecord(format!("{} at position {pos}: {what}", path.display()))
}

/// The part of a segment that lock-free readers ([`crate::LogReader`]) share with the log's
/// writer: the `.log` file, its published size and next offset, and the offset index.
pub(crate) struct SegmentData {
    base_offset: i64,
    log: FileSlot,
    /// Bytes of whole batches in the file. Stored (Release) only after the bytes are written,
    /// so a reader never reads past what is complete.
    size: AtomicU64,
    next_offset: AtomicI64,
    offset_index: OffsetIndex,
    /// Aborted transactions whose marker is in this segment (read_committed fetches).
    txn_index: TransactionIndex,
    /// Set when the segment leaves the log (retention, truncation, deletion); a reader whose
    /// read of it fails retries with a fresh snapshot.
    removed: AtomicBool,
}

impl SegmentData {
    pub(crate) fn base_offset(&self) -> i64 {
        self.base_offset
    }
    pub(crate) fn size(&self) -> u64 {
        self.size.load(Ordering::Acquire)
    }
    fn set_size(&self, size: u64) {
        self.size.store(size, Ordering::Release)
    }
    pub(crate) fn next_offset(&self) -> i64 {
        self.next_offset.load(Ordering::Acquire)
    }
    fn set_next_offset(&self, next: i64) {
        self.next_offset.store(next, Ordering::Release)
    }
    pub(crate) fn is_removed(&self) -> bool {
        self.removed.load(Ordering::Acquire)
    }
    pub(crate) fn mark_removed(&self) {
        self.removed.store(true, Ordering::Release)
    }
    pub(crate) fn txn_index(&self) -> &TransactionIndex {
        &self.txn_index
    }
    pub(crate) fn offset_index(&self) -> &OffsetIndex {
        &self.offset_index
    }

    /// The header of the batch at `pos`, which must lie wholly below `size`.
    pub(crate) fn read_header(&self, pos: u64, size: u64) -> Result<BatchHeader, StorageError> {
        if pos + HEADER_SIZE as u64 > size {
            return Err(corrupt(&self.log.path(), pos, "truncated batch header"));
        }
        let mut buf = [0u8; HEADER_SIZE];
        self.log.read_exact_at(&mut buf, pos)?;
        let h = BatchHeader::parse(&buf).map_err(|e| corrupt(&self.log.path(), pos, e))?;
        if pos + h.size as u64 > size {
            return Err(corrupt(
                &self.log.path(),
                pos,
                "batch runs past end of file",
            ));
        }
        Ok(h)
    }

    /// Reads `len` bytes at `pos`, clamped to `size`, without zero-filling the buffer first.
    pub(crate) fn read_at(&self, pos: u64, len: usize, size: u64) -> Result<Vec<u8>, StorageError> {
        let len = (len as u64).min(size.saturating_sub(pos)) as usize;
        Ok(self.log.read_exact_vec(pos, len)?)
    }

    /// Fills `buf` from `pos`, which with `buf` must lie below `size`: the cleaner's reads into
    /// one reused buffer.
    pub(crate) fn read_into(
        &self,
        pos: u64,
        buf: &mut [u8],
        size: u64,
    ) -> Result<(), StorageError> {
        if pos + buf.len() as u64 > size {
            return Err(corrupt(
                &self.log.path(),
                pos,
                "read past the end of the segment",
            ));
        }
        Ok(self.log.read_exact_at(buf, pos)?)
    }

    /// Sends up to `count` bytes from `pos` (which with `count` must lie below `size`) to the
    /// socket `out` with sendfile(2): page cache to socket in the kernel, as Kafka's
    /// `FileRecords.writeTo` with `transferTo`. Returns the bytes sent, which may be fewer (a
    /// non-blocking socket's room); `WouldBlock` when it has none. A file that ends early (it
    /// was truncated under the range) is an error, never a silent short send.
    pub(crate) fn send_into(
        &self,
        out: std::os::fd::BorrowedFd<'_>,
        pos: u64,
        count: usize,
        size: u64,
    ) -> std::io::Result<usize> {
        if pos + count as u64 > size {
            return Err(std::io::Error::other(corrupt(
                &self.log.path(),
                pos,
                "send past the end of the segment",
            )));
        }
        let file = self.log.file()?;
        let mut at = pos;
        loop {
            match rustix::fs::sendfile(out, &*file, Some(&mut at), count) {
                Ok(0) if count > 0 => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        StorageError::TruncatedDuringRead,
                    ))
                }
                Ok(n) => return Ok(n),
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Whether the batch at `pos` ends inside `size` and has `last_offset` as its last offset:
    /// the cheap check of an inactive segment's offset index at open. The log is read through a
    /// descriptor closed at once, so opening many logs does not fill the cache.
    fn entry_names_its_batch(
        &self,
        last_offset: i64,
        pos: u64,
        size: u64,
    ) -> Result<bool, StorageError> {
        use std::os::unix::fs::FileExt;
        if pos + HEADER_SIZE as u64 > size {
            return Ok(false);
        }
        let mut buf = [0u8; HEADER_SIZE];
        std::fs::File::open(self.log.path())?.read_exact_at(&mut buf, pos)?;
        Ok(BatchHeader::parse(&buf)
            .is_ok_and(|h| h.last_offset == last_offset && pos + h.size as u64 <= size))
    }

    /// The end of the last whole batch that ends at or before `limit`, walking batch headers
    /// from `start` (a batch start) or from the offset index's last entry at or before `limit`
    /// if that is later, so only the few batches after an index entry are looked at. Batches
    /// are read in windows of headers, never whole; nothing is read at or past `end`.
    pub(crate) fn last_batch_end_within(
        &self,
        start: u64,
        limit: u64,
        end: u64,
    ) -> Result<u64, StorageError> {
        const WINDOW: usize = 8 * 1024;
        let limit = limit.min(end);
        let mut at = start.max(self.offset_index.floor_position(limit).unwrap_or(0));
        let mut window = [0u8; WINDOW];
        loop {
            if at + HEADER_SIZE as u64 > limit {
                return Ok(at);
            }
            let n = (WINDOW as u64).min(end - at) as usize;
            self.read_into(at, &mut window[..n], end)?;
            let mut off = 0usize;
            while off + HEADER_SIZE <= n {
                let h = BatchHeader::parse(&window[off..n])
                    .map_err(|e| corrupt(&self.log.path(), at + off as u64, e))?;
                if at + (off + h.size) as u64 > limit {
                    return Ok(at + off as u64);
                }
                off += h.size;
            }
            at += off as u64;
        }
    }

    /// The position and header of the first batch below `size` whose last offset is >= `offset`.
    pub(crate) fn translate_offset(
        &self,
        offset: i64,
        size: u64,
    ) -> Result<Option<(u64, BatchHeader)>, StorageError> {
        let mut pos = self.offset_index.lookup(offset).position as u64;
        while pos < size {
            let h = self.read_header(pos, size)?;
            if h.last_offset >= offset {
                return Ok(Some((pos, h)));
            }
            pos += h.size as u64;
        }
        Ok(None)
    }
}

pub struct LogSegment {
    data: Arc<SegmentData>,
    time_index: TimeIndex,
    index_interval_bytes: u64,
    bytes_since_last_index_entry: u64,
    /// Largest timestamp in the segment and the (batch last) offset carrying it; (-1, base)
    /// while unknown, as Kafka's `TimestampOffset.UNKNOWN`.
    max_timestamp: TimestampOffset,
    /// The first batch's max timestamp, which `segment.ms` rolling is measured from.
    rolling_based_timestamp: Option<i64>,
    created_ms: i64,
}

impl LogSegment {
    /// Creates a new, empty segment, replacing any files of the same base offset. Its three
    /// files start out open in `cache` (they are about to be written).
    pub fn create(
        cache: &Arc<FileCache>,
        dir: &Path,
        base_offset: i64,
        config: &LogConfig,
        now: i64,
    ) -> io::Result<Self> {
        Self::create_with_suffix(cache, dir, base_offset, config, now, "")
    }

    /// [`Self::create`] with `suffix` after each file's name (the cleaner's `.cleaned`).
    pub(crate) fn create_with_suffix(
        cache: &Arc<FileCache>,
        dir: &Path,
        base_offset: i64,
        config: &LogConfig,
        now: i64,
        suffix: &str,
    ) -> io::Result<Self> {
        let path = |name: String| dir.join(name + suffix);
        let log = FileSlot::create(cache, path(log_file_name(base_offset)))?;
        let offset_index = OffsetIndex::create(
            cache,
            &path(offset_index_file_name(base_offset)),
            base_offset,
            config.max_offset_index_entries(),
        )?;
        let time_index = TimeIndex::create(
            cache,
            &path(time_index_file_name(base_offset)),
            base_offset,
            config.max_time_index_entries(),
        )?;
        // Created on the first abort; a stale file of an earlier segment at this base goes.
        let txn_index = TransactionIndex::empty(path(txn_index_file_name(base_offset)));
        txn_index.delete_file()?;
        Ok(Self::assemble(
            log,
            base_offset,
            0,
            offset_index,
            time_index,
            txn_index,
            config,
            now,
        ))
    }

    #[allow(clippy::too_many_arguments)]
    fn assemble(
        log: FileSlot,
        base_offset: i64,
        size: u64,
        offset_index: OffsetIndex,
        time_index: TimeIndex,
        txn_index: TransactionIndex,
        config: &LogConfig,
        now: i64,
    ) -> Self {
        Self {
            data: Arc::new(SegmentData {
                base_offset,
                log,
                size: AtomicU64::new(size),
                next_offset: AtomicI64::new(base_offset),
                offset_index,
                txn_index,
                removed: AtomicBool::new(false),
            }),
            time_index,
            index_interval_bytes: config.index_interval_bytes as u64,
            bytes_since_last_index_entry: 0,
            max_timestamp: TimestampOffset {
                timestamp: -1,
                offset: base_offset,
            },
            rolling_based_timestamp: None,
            created_ms: now,
        }
    }

    /// Opens an existing segment without keeping any of its files open: the log's size comes
    /// from the file system and the indexes are read into memory (their descriptors closed at
    /// once). The bool is true when its indexes were missing or failed the sanity checks (or
    /// the log tail does not parse): the caller must then [`Self::recover`] it before use.
    ///
    /// `next_base` is the base offset of the following segment when this one is an inactive
    /// segment of a cleanly shut down log: its tail is then not walked at all (its next offset
    /// is taken to be `next_base` and its largest timestamp is the time index's last entry, which
    /// a clean close writes), so opening a log touches only its active segment's data.
    pub fn open(
        cache: &Arc<FileCache>,
        dir: &Path,
        base_offset: i64,
        config: &LogConfig,
        next_base: Option<i64>,
    ) -> Result<(Self, bool), StorageError> {
        let log_path = dir.join(log_file_name(base_offset));
        let size = std::fs::metadata(&log_path)?.len();
        let log = FileSlot::existing(cache, log_path);
        let oi_path = dir.join(offset_index_file_name(base_offset));
        let ti_path = dir.join(time_index_file_name(base_offset));
        let max_oi = config.max_offset_index_entries();
        let max_ti = config.max_time_index_entries();
        let loaded = OffsetIndex::load(cache, &oi_path, base_offset, max_oi, size)?;
        let offset_ok = loaded.is_some();
        let offset_index = match loaded {
            Some(i) => i,
            None => OffsetIndex::create(cache, &oi_path, base_offset, max_oi)?,
        };
        let loaded = TimeIndex::load(cache, &ti_path, base_offset, max_ti, next_base)?;
        let time_ok = loaded.is_some();
        let time_index = match loaded {
            Some(i) => i,
            None => TimeIndex::create(cache, &ti_path, base_offset, max_ti)?,
        };
        let txn_path = dir.join(txn_index_file_name(base_offset));
        let loaded = TransactionIndex::load(txn_path.clone())?;
        let txn_ok = loaded.is_some();
        let txn_index = match loaded {
            Some(i) => i,
            None => {
                // Rebuilt by recovery with the producer state.
                let i = TransactionIndex::empty(txn_path);
                i.delete_file()?;
                i
            }
        };
        let mut seg = Self::assemble(
            log,
            base_offset,
            size,
            offset_index,
            time_index,
            txn_index,
            config,
            now_ms(),
        );
        if !offset_ok || !time_ok || !txn_ok {
            return Ok((seg, true));
        }
        if let Some(next) = next_base {
            if let Some(e) = seg.data.offset_index.last_entry() {
                if !seg
                    .data
                    .entry_names_its_batch(e.offset, e.position as u64, size)?
                {
                    return Ok((seg, true));
                }
            }
            seg.data.set_next_offset(next.max(base_offset));
            if let Some(last) = seg.time_index.last_entry() {
                seg.max_timestamp = last;
            }
            return Ok((seg, false));
        }
        if seg.load_tail().is_err() {
            return Ok((seg, true));
        }
        match seg.time_index.last_entry() {
            // An entry beyond the data means the time index belongs to a longer log.
            Some(last) if last.offset >= seg.next_offset() => return Ok((seg, true)),
            Some(last) if last.timestamp > seg.max_timestamp.timestamp => seg.max_timestamp = last,
            _ => {}
        }
        Ok((seg, false))
    }

    /// Derives the in-memory state Kafka keeps (next offset, max timestamp after the last index
    /// entry, first batch timestamp, bytes since the last index entry) by walking batch headers
    /// from the last offset-index entry to the end. Fails if the walk does not land exactly on
    /// the end of the file or the last index entry does not name the batch it points at.
    fn load_tail(&mut self) -> Result<(), StorageError> {
        self.rolling_based_timestamp = None;
        if self.size() > 0 {
            self.rolling_based_timestamp = Some(self.read_header(0)?.max_timestamp);
        }
        let start = self.data.offset_index.last_entry();
        let mut pos = start.map_or(0, |e| e.position as u64);
        let mut max = TimestampOffset {
            timestamp: -1,
            offset: self.base_offset(),
        };
        let mut next = self.base_offset();
        let mut first = true;
        let size = self.size();
        while pos < size {
            let h = self.read_header(pos)?;
            if first {
                if let Some(e) = start {
                    if h.last_offset != e.offset {
                        return Err(corrupt(&self.data.log.path(), pos, "index entry mismatch"));
                    }
                }
                first = false;
            }
            if h.max_timestamp > max.timestamp {
                max = TimestampOffset {
                    timestamp: h.max_timestamp,
                    offset: h.last_offset,
                };
            }
            next = h.last_offset + 1;
            pos += h.size as u64;
        }
        if pos != size {
            return Err(corrupt(
                &self.data.log.path(),
                pos,
                "batch runs past end of file",
            ));
        }
        self.data.set_next_offset(next);
        self.max_timestamp = max;
        // The last indexed batch itself counts, as in Kafka's append bookkeeping.
        self.bytes_since_last_index_entry = size - start.map_or(0, |e| e.position as u64);
        Ok(())
    }

    /// Kafka's `LogSegment.recover`: re-validates every batch (structure, CRC, offset order),
    /// rebuilds both indexes and truncates the log at the first bad batch. Returns the number of
    /// bytes truncated.
    pub fn recover(&mut self) -> Result<u64, StorageError> {
        self.data.offset_index.reset()?;
        self.time_index.reset()?;
        // Refilled by the log's producer-state replay over this segment (Kafka recovers the
        // segment with the producer state manager; Strom replays the headers right after).
        self.data.txn_index.reset()?;
        self.bytes_since_last_index_entry = 0;
        self.max_timestamp = TimestampOffset {
            timestamp: -1,
            offset: self.base_offset(),
        };
        self.rolling_based_timestamp = None;
        self.data.set_next_offset(self.base_offset());
        let file_len = self.data.log.len_on_disk()?;
        let log_path = self.data.log.path();
        let mut valid = 0u64;
        let mut chunk = RECOVERY_CHUNK;
        'scan: while valid < file_len {
            let len = (chunk as u64).min(file_len - valid) as usize;
            let buf = self.data.log.read_exact_vec(valid, len)?;
            let mut consumed = 0usize;
            let mut need = None;
            for item in BatchIter::new(&buf) {
                let view = match item {
                    Ok(v) => v,
                    Err(BatchError::Truncated { needed, .. }) => {
                        need = Some(needed);
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(path = %log_path.display(), pos = valid + consumed as u64, "recovery: {e}");
                        valid += consumed as u64;
                        break 'scan;
                    }
                };
                let in_order = view.base_offset() >= self.next_offset()
                    && view.last_offset() >= view.base_offset()
                    && view.last_offset() - self.base_offset() <= i32::MAX as i64;
                if let Err(e) = view.validate() {
                    tracing::warn!(path = %log_path.display(), pos = valid + consumed as u64, "recovery: {e}");
                    valid += consumed as u64;
                    break 'scan;
                }
                if !in_order {
                    tracing::warn!(path = %log_path.display(), pos = valid + consumed as u64, "recovery: offsets out of order");
                    valid += consumed as u64;
                    break 'scan;
                }
                self.on_batch(
                    valid + consumed as u64,
                    view.last_offset(),
                    view.max_timestamp(),
                    view.size(),
                )?;
                consumed += view.size();
            }
            valid += consumed as u64;
            match need {
                Some(needed) if valid + needed as u64 <= file_len => {
                    chunk = needed.max(RECOVERY_CHUNK);
                }
                Some(_) => break,
                None => chunk = RECOVERY_CHUNK,
            }
        }
        let truncated = file_len - valid;
        if truncated > 0 {
            tracing::warn!(path = %log_path.display(), truncated, "recovery truncated invalid bytes");
            self.data.log.set_len(valid)?;
        }
        self.data.set_size(valid);
        // A normally closed segment ends with its largest timestamp in the time index.
        self.time_index
            .maybe_append(self.max_timestamp.timestamp, self.max_timestamp.offset)?;
        Ok(truncated)
    }

    /// Per-batch bookkeeping shared by append and recovery, so a rebuilt index is identical to
    /// the one written while appending.
    fn on_batch(
        &mut self,
        position: u64,
        last_offset: i64,
        max_ts: i64,
        size: usize,
    ) -> io::Result<()> {
        if self.rolling_based_timestamp.is_none() {
            self.rolling_based_timestamp = Some(max_ts);
        }
        if max_ts > self.max_timestamp.timestamp {
            self.max_timestamp = TimestampOffset {
                timestamp: max_ts,
                offset: last_offset,
            };
        }
        if self.bytes_since_last_index_entry > self.index_interval_bytes {
            self.data
                .offset_index
                .append(last_offset, position as u32)?;
            self.time_index
                .maybe_append(self.max_timestamp.timestamp, self.max_timestamp.offset)?;
            self.bytes_since_last_index_entry = 0;
        }
        self.bytes_since_last_index_entry += size as u64;
        self.data.set_next_offset(last_offset + 1);
        Ok(())
    }

    /// Appends already validated batches with their final offsets.
    pub fn append(&mut self, records: &[u8]) -> Result<(), StorageError> {
        let start = self.size();
        if let Err(e) = self.data.log.write_all_at(records, start) {
            // Leave no partial batch behind for the next append to land after.
            let _ = self.data.log.set_len(start);
            return Err(e.into());
        }
        let mut pos = start;
        for view in BatchIter::new(records) {
            let view = view.map_err(|e| StorageError::CorruptRecord(e.to_string()))?;
            self.on_batch(pos, view.last_offset(), view.max_timestamp(), view.size())?;
            pos += view.size() as u64;
        }
        // Published last: readers may now read up to `pos`.
        self.data.set_size(pos);
        Ok(())
    }

    /// Kafka's `LogSegment.shouldRoll` (without jitter).
    pub fn should_roll(
        &self,
        config: &LogConfig,
        messages_size: usize,
        max_timestamp_in_messages: i64,
        max_offset_in_messages: i64,
        now: i64,
    ) -> bool {
        // Rolling an empty segment would only replace it with another empty one.
        if self.size() == 0 {
            return false;
        }
        // Positions in the index are int32.
        let max_bytes = config.segment_bytes.min(i32::MAX as u64);
        let waited = match self.rolling_based_timestamp {
            Some(ts) if ts >= 0 => max_timestamp_in_messages - ts,
            _ => now - self.created_ms,
        };
        self.size() + messages_size as u64 > max_bytes
            || waited > config.segment_ms
            || self.data.offset_index.is_full()
            || self.time_index.is_full()
            || max_offset_in_messages - self.base_offset() > i32::MAX as i64
    }

    pub fn read_header(&self, pos: u64) -> Result<BatchHeader, StorageError> {
        self.data.read_header(pos, self.size())
    }

    /// Reads `len` bytes at `pos` (clamped to the segment size).
    pub fn read_at(&self, pos: u64, len: usize) -> Result<Vec<u8>, StorageError> {
        self.data.read_at(pos, len, self.size())
    }

    /// The position and header of the first batch whose last offset is >= `offset`.
    pub fn translate_offset(
        &self,
        offset: i64,
    ) -> Result<Option<(u64, BatchHeader)>, StorageError> {
        self.data.translate_offset(offset, self.size())
    }

    /// The first record at or after `starting_offset` whose timestamp is >= `ts`.
    pub fn find_offset_by_timestamp(
        &self,
        ts: i64,
        starting_offset: i64,
    ) -> Result<Option<TimestampAndOffset>, StorageError> {
        let from = self
            .time_index
            .lookup_before(ts)
            .map_or(self.base_offset(), |e| e.offset);
        let mut pos = self
            .data
            .offset_index
            .lookup(from.max(starting_offset))
            .position as u64;
        while pos < self.size() {
            let h = self.read_header(pos)?;
            if h.last_offset >= starting_offset && h.max_timestamp >= ts {
                let found =
                    self.search_batch(pos, &h, |offset, t| offset >= starting_offset && t >= ts)?;
                if found.is_some() {
                    return Ok(found);
                }
            }
            pos += h.size as u64;
        }
        Ok(None)
    }

    /// The record with the segment's largest timestamp (the first such, by offset).
    pub fn max_timestamp_and_offset(&self) -> Result<Option<TimestampAndOffset>, StorageError> {
        let max = self.max_timestamp;
        if max.timestamp < 0 {
            return Ok(None);
        }
        let mut pos = self.data.offset_index.lookup(max.offset).position as u64;
        // `max.offset` is the last offset of the batch holding the max, so the index entry found
        // for it points at that batch or an earlier one.
        while pos < self.size() {
            let h = self.read_header(pos)?;
            if h.max_timestamp == max.timestamp {
                return self.search_batch(pos, &h, |_, t| t == max.timestamp);
            }
            pos += h.size as u64;
        }
        Ok(None)
    }

    /// Decodes one batch and returns the first record matching `pred(offset, timestamp)`.
    fn search_batch(
        &self,
        pos: u64,
        h: &BatchHeader,
        pred: impl Fn(i64, i64) -> bool,
    ) -> Result<Option<TimestampAndOffset>, StorageError> {
        let bytes = self.read_at(pos, h.size)?;
        let view =
            batch::BatchView::parse(&bytes).map_err(|e| corrupt(&self.data.log.path(), pos, e))?;
        if view.is_log_append_time() {
            // Every record of a LogAppendTime batch has the batch's max timestamp.
            for offset in h.base_offset..=h.last_offset {
                if pred(offset, h.max_timestamp) {
                    return Ok(Some(TimestampAndOffset {
                        timestamp: h.max_timestamp,
                        offset,
                        leader_epoch: h.leader_epoch(),
                    }));
                }
            }
            return Ok(None);
        }
        let set = RecordBatchDecoder::decode(&mut &bytes[..])
            .map_err(|e| corrupt(&self.data.log.path(), pos, e))?;
        Ok(set
            .records
            .iter()
            .find(|r| pred(r.offset, r.timestamp))
            .map(|r| TimestampAndOffset {
                timestamp: r.timestamp,
                offset: r.offset,
                leader_epoch: h.leader_epoch(),
            }))
    }

    /// Drops every batch whose last offset is >= `offset` (so a batch containing `offset` goes
    /// whole). Returns the bytes removed. The smaller size is published before the file shrinks,
    /// so a reader starting now does not read the bytes being cut.
    pub fn truncate_to(&mut self, offset: i64) -> Result<u64, StorageError> {
        let mapping = self.translate_offset(offset)?;
        let mut removed = 0;
        if let Some((pos, _)) = mapping {
            removed = self.size() - pos;
            self.data.set_size(pos);
        }
        self.data.offset_index.truncate_to(offset)?;
        self.time_index.truncate_to(offset)?;
        self.data.txn_index.truncate_to(offset)?;
        if let Some((pos, _)) = mapping {
            self.data.log.set_len(pos)?;
        }
        self.load_tail()?;
        if let Some(last) = self.time_index.last_entry() {
            if last.timestamp > self.max_timestamp.timestamp {
                self.max_timestamp = last;
            }
        }
        if self.size() == 0 {
            self.created_ms = now_ms();
        }
        Ok(removed)
    }

    /// Called when the segment stops being the active one: its largest timestamp goes into the
    /// time index so retention can find it after a restart.
    pub fn on_become_inactive(&mut self) -> io::Result<()> {
        self.time_index
            .maybe_append(self.max_timestamp.timestamp, self.max_timestamp.offset)
    }

    /// Fsyncs whichever of the three files were written since their last fsync.
    pub fn flush(&self) -> io::Result<()> {
        self.data.log.sync()?;
        self.data.offset_index.flush()?;
        self.data.txn_index.flush()?;
        self.time_index.flush()
    }

    pub fn close(&mut self) -> io::Result<()> {
        self.on_become_inactive()?;
        self.flush()
    }

    /// Closes the segment's descriptors (they reopen on the next use).
    pub fn close_handles(&self) {
        self.data.log.close();
        self.data.offset_index.slot().close();
        self.time_index.slot().close();
    }

    fn slots(&self) -> [&FileSlot; 3] {
        [
            &self.data.log,
            self.data.offset_index.slot(),
            self.time_index.slot(),
        ]
    }

    /// Takes the segment out of service: readers holding it retry elsewhere on failure.
    pub(crate) fn mark_removed(&self) {
        self.data.mark_removed();
    }

    pub fn delete_files(self) -> io::Result<()> {
        self.mark_removed();
        for slot in self.slots() {
            slot.close();
            match std::fs::remove_file(slot.path()) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        self.data.txn_index.delete_file()
    }

    /// Kafka's asynchronous delete, first step: renames the three files with the `.deleted`
    /// suffix and returns their new paths, for removal after `file.delete.delay.ms`.
    pub(crate) fn rename_for_delete(&self) -> io::Result<Vec<PathBuf>> {
        self.mark_removed();
        let mut renamed = Vec::new();
        for slot in self.slots() {
            let mut to = slot.path().into_os_string();
            to.push(crate::DELETED_FILE_SUFFIX);
            let to = PathBuf::from(to);
            match slot.rename(to.clone()) {
                Ok(()) => renamed.push(to),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
            slot.close();
        }
        let mut to = self.data.txn_index.path().into_os_string();
        to.push(crate::DELETED_FILE_SUFFIX);
        let to = PathBuf::from(to);
        if self.data.txn_index.rename_to(to.clone())? {
            renamed.push(to);
        }
        Ok(renamed)
    }

    /// Kafka's `updateTxnIndex`: an aborted transaction whose marker is in this segment is
    /// indexed with the LSO right after its marker.
    pub fn update_txn_index(
        &self,
        completed: &CompletedTxn,
        last_stable_offset: i64,
    ) -> Result<(), StorageError> {
        if completed.is_aborted {
            self.data.txn_index.append(AbortedTxn {
                producer_id: completed.producer_id,
                first_offset: completed.first_offset,
                last_offset: completed.last_offset,
                last_stable_offset,
            })?;
        }
        Ok(())
    }

    pub fn txn_index(&self) -> &TransactionIndex {
        &self.data.txn_index
    }

    pub fn update_config(&mut self, config: &LogConfig) {
        self.index_interval_bytes = config.index_interval_bytes as u64;
        self.data
            .offset_index
            .set_max_entries(config.max_offset_index_entries());
        self.time_index
            .set_max_entries(config.max_time_index_entries());
    }

    pub(crate) fn data(&self) -> &Arc<SegmentData> {
        &self.data
    }

    pub fn base_offset(&self) -> i64 {
        self.data.base_offset
    }
    pub fn size(&self) -> u64 {
        self.data.size()
    }
    /// The offset after the last batch, or the base offset if the segment is empty.
    pub fn next_offset(&self) -> i64 {
        self.data.next_offset()
    }
    pub fn max_timestamp(&self) -> TimestampOffset {
        self.max_timestamp
    }
    /// Kafka's `largestTimestamp`: the max record timestamp, or the file's mtime if none.
    pub fn largest_timestamp(&self) -> i64 {
        if self.max_timestamp.timestamp >= 0 {
            return self.max_timestamp.timestamp;
        }
        std::fs::metadata(self.data.log.path())
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_millis() as i64)
    }
    pub fn offset_index(&self) -> &OffsetIndex {
        &self.data.offset_index
    }
    pub fn time_index(&self) -> &TimeIndex {
        &self.time_index
    }
}

#[path = "cleaner/segment_files.rs"]
mod cleaner_files;

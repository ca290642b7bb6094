//! The sparse `.index` (offset -> position) and `.timeindex` (timestamp -> offset) files.
//!
//! Both are append-only arrays of big-endian fixed-size entries, as Kafka writes them, with
//! offsets stored relative to the segment's base offset. The whole array is also kept in a `Vec`
//! so lookups never touch the disk, and the file is only opened (through the [`FileCache`]) to
//! append, truncate or fsync. Files are never preallocated: their length is always exactly the
//! entries written, so Kafka's tools never see trailing zero entries.
//!
//! The offset index is shared with lock-free readers ([`crate::LogReader`]): its entries sit
//! behind a `RwLock` held only for in-memory work, never across file I/O.

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

use crate::file_cache::{FileCache, FileSlot};

pub const OFFSET_ENTRY_SIZE: usize = 8;
pub const TIME_ENTRY_SIZE: usize = 12;

/// Reads a whole index file, or `None` if it does not exist. The descriptor is closed at once.
fn read_file(path: &Path) -> io::Result<Option<Vec<u8>>> {
    match std::fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// An offset-index entry resolved to absolute terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetPosition {
    pub offset: i64,
    pub position: u32,
}

/// `.index`: relative offset (i32) + physical position (i32). Entries are keyed by the last
/// offset of the batch that starts at `position`, which is what Kafka writes and what
/// kafka-dump-log checks.
pub struct OffsetIndex {
    file: FileSlot,
    base_offset: i64,
    entries: RwLock<Vec<(u32, u32)>>,
    /// Atomic so a topic-config change can reach a segment readers share.
    max_entries: AtomicUsize,
}

impl OffsetIndex {
    /// Creates an empty index, replacing whatever was at `path`.
    pub fn create(
        cache: &Arc<FileCache>,
        path: &Path,
        base_offset: i64,
        max_entries: usize,
    ) -> io::Result<Self> {
        Ok(Self {
            file: FileSlot::create(cache, path.to_path_buf())?,
            base_offset,
            entries: RwLock::new(Vec::new()),
            max_entries: AtomicUsize::new(max_entries),
        })
    }

    /// Loads an existing index. `Ok(None)` when the file is missing or fails the sanity checks
    /// (size, ordering, positions inside a log of `log_size` bytes): the caller rebuilds it.
    pub fn load(
        cache: &Arc<FileCache>,
        path: &Path,
        base_offset: i64,
        max_entries: usize,
        log_size: u64,
    ) -> io::Result<Option<Self>> {
        let Some(bytes) = read_file(path)? else {
            return Ok(None);
        };
        if bytes.len() % OFFSET_ENTRY_SIZE != 0 {
            return Ok(None);
        }
        let mut entries = Vec::with_capacity(bytes.len() / OFFSET_ENTRY_SIZE);
        for chunk in bytes.chunks_exact(OFFSET_ENTRY_SIZE) {
            let rel = i32::from_be_bytes(chunk[0..4].try_into().expect("4"));
            let pos = i32::from_be_bytes(chunk[4..8].try_into().expect("4"));
            if rel < 0 || pos < 0 || pos as u64 >= log_size {
                return Ok(None);
            }
            if let Some(&(prev_rel, prev_pos)) = entries.last() {
                if rel as u32 <= prev_rel || pos as u32 <= prev_pos {
                    return Ok(None);
                }
            }
            entries.push((rel as u32, pos as u32));
        }
        Ok(Some(Self {
            file: FileSlot::existing(cache, path.to_path_buf()),
            base_offset,
            entries: RwLock::new(entries),
            max_entries: AtomicUsize::new(max_entries),
        }))
    }

    pub fn path(&self) -> std::path::PathBuf {
        self.file.path()
    }

    pub(crate) fn slot(&self) -> &FileSlot {
        &self.file
    }

    pub fn len(&self) -> usize {
        self.entries.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.read().is_empty()
    }

    pub fn is_full(&self) -> bool {
        self.len() >= self.max_entries.load(Ordering::Relaxed)
    }

    pub fn set_max_entries(&self, max_entries: usize) {
        self.max_entries.store(max_entries, Ordering::Relaxed);
    }

    fn resolve(&self, (rel, position): (u32, u32)) -> OffsetPosition {
        OffsetPosition {
            offset: self.base_offset + rel as i64,
            position,
        }
    }

    pub fn entry(&self, i: usize) -> OffsetPosition {
        self.resolve(self.entries.read()[i])
    }

    pub fn last_entry(&self) -> Option<OffsetPosition> {
        self.entries.read().last().map(|&e| self.resolve(e))
    }

    /// Appends an entry; callers guarantee `offset` is larger than the last entry's and fits
    /// in an i32 relative to the base offset (the segment rolls before it would not).
    /// The entry goes to the file first and into memory after, so a reader never finds an
    /// entry the file lacks. Only the log's single writer calls this.
    pub fn append(&self, offset: i64, position: u32) -> io::Result<()> {
        let rel = (offset - self.base_offset) as u32;
        let len = {
            let entries = self.entries.read();
            debug_assert!(entries.last().is_none_or(|&(r, _)| r < rel));
            entries.len()
        };
        let mut buf = [0u8; OFFSET_ENTRY_SIZE];
        buf[0..4].copy_from_slice(&rel.to_be_bytes());
        buf[4..8].copy_from_slice(&position.to_be_bytes());
        self.file
            .write_all_at(&buf, (len * OFFSET_ENTRY_SIZE) as u64)?;
        self.entries.write().push((rel, position));
        Ok(())
    }

    /// The entry with the largest offset <= `target`, or the segment start when none is.
    pub fn lookup(&self, target: i64) -> OffsetPosition {
        let rel = target - self.base_offset;
        let entries = self.entries.read();
        let idx = entries.partition_point(|&(r, _)| (r as i64) <= rel);
        if idx == 0 {
            OffsetPosition {
                offset: self.base_offset,
                position: 0,
            }
        } else {
            self.resolve(entries[idx - 1])
        }
    }

    /// The position of the last entry at or before `position`: the start of a batch there or
    /// earlier, from which a header walk finds the last batch ending within a byte limit.
    pub fn floor_position(&self, position: u64) -> Option<u64> {
        let entries = self.entries.read();
        let idx = entries.partition_point(|&(_, p)| (p as u64) <= position);
        idx.checked_sub(1).map(|i| entries[i].1 as u64)
    }

    /// Kafka's `fetchUpperBoundOffset`: the offset of the first entry at or past `position`
    /// (where a fetch's bytes end), if any.
    pub fn fetch_upper_bound_offset(&self, position: u64) -> Option<i64> {
        let entries = self.entries.read();
        let idx = entries.partition_point(|&(_, p)| (p as u64) < position);
        entries.get(idx).map(|&e| self.resolve(e).offset)
    }

    /// Drops every entry whose offset is >= `offset`.
    pub fn truncate_to(&self, offset: i64) -> io::Result<()> {
        let rel = offset - self.base_offset;
        let keep = self
            .entries
            .read()
            .partition_point(|&(r, _)| (r as i64) < rel);
        self.truncate_entries(keep)
    }

    pub fn reset(&self) -> io::Result<()> {
        self.truncate_entries(0)
    }

    /// Memory first (readers stop using the entries), then the file.
    fn truncate_entries(&self, keep: usize) -> io::Result<()> {
        let shrunk = {
            let mut entries = self.entries.write();
            let shrunk = keep < entries.len();
            entries.truncate(keep);
            shrunk
        };
        if shrunk {
            self.file.set_len((keep * OFFSET_ENTRY_SIZE) as u64)?;
        }
        Ok(())
    }

    pub fn flush(&self) -> io::Result<()> {
        self.file.sync()
    }
}

/// A time-index entry resolved to absolute terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimestampOffset {
    pub timestamp: i64,
    pub offset: i64,
}

/// `.timeindex`: timestamp (i64) + relative offset (i32). An entry (t, o) promises that no
/// record at an offset <= o has a timestamp > t; timestamps are strictly increasing.
pub struct TimeIndex {
    file: FileSlot,
    base_offset: i64,
    entries: Vec<(i64, u32)>,
    max_entries: usize,
}

impl TimeIndex {
    pub fn create(
        cache: &Arc<FileCache>,
        path: &Path,
        base_offset: i64,
        max_entries: usize,
    ) -> io::Result<Self> {
        Ok(Self {
            file: FileSlot::create(cache, path.to_path_buf())?,
            base_offset,
            entries: Vec::new(),
            max_entries,
        })
    }

    /// Loads an existing time index; `Ok(None)` when missing or insane. Offsets must stay below
    /// `next_offset` when it is known.
    pub fn load(
        cache: &Arc<FileCache>,
        path: &Path,
        base_offset: i64,
        max_entries: usize,
        next_offset: Option<i64>,
    ) -> io::Result<Option<Self>> {
        let Some(bytes) = read_file(path)? else {
            return Ok(None);
        };
        if bytes.len() % TIME_ENTRY_SIZE != 0 {
            return Ok(None);
        }
        let mut entries: Vec<(i64, u32)> = Vec::with_capacity(bytes.len() / TIME_ENTRY_SIZE);
        for chunk in bytes.chunks_exact(TIME_ENTRY_SIZE) {
            let ts = i64::from_be_bytes(chunk[0..8].try_into().expect("8"));
            let rel = i32::from_be_bytes(chunk[8..12].try_into().expect("4"));
            if rel < 0 || next_offset.is_some_and(|n| base_offset + rel as i64 >= n) {
                return Ok(None);
            }
            if let Some(&(prev_ts, prev_rel)) = entries.last() {
                if ts <= prev_ts || (rel as u32) < prev_rel {
                    return Ok(None);
                }
            }
            entries.push((ts, rel as u32));
        }
        Ok(Some(Self {
            file: FileSlot::existing(cache, path.to_path_buf()),
            base_offset,
            entries,
            max_entries,
        }))
    }

    pub fn path(&self) -> std::path::PathBuf {
        self.file.path()
    }

    pub(crate) fn slot(&self) -> &FileSlot {
        &self.file
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn is_full(&self) -> bool {
        self.entries.len() >= self.max_entries
    }

    pub fn set_max_entries(&mut self, max_entries: usize) {
        self.max_entries = max_entries;
    }

    pub fn entry(&self, i: usize) -> TimestampOffset {
        let (timestamp, rel) = self.entries[i];
        TimestampOffset {
            timestamp,
            offset: self.base_offset + rel as i64,
        }
    }

    pub fn last_entry(&self) -> Option<TimestampOffset> {
        (!self.entries.is_empty()).then(|| self.entry(self.entries.len() - 1))
    }

    /// Kafka's `TimeIndex.maybeAppend`: only a strictly larger timestamp is worth an entry.
    pub fn maybe_append(&mut self, timestamp: i64, offset: i64) -> io::Result<()> {
        // An empty index behaves as if its last entry were (-1, base): batches without a
        // timestamp (-1) never get an entry.
        if timestamp <= self.last_entry().map_or(-1, |e| e.timestamp) {
            return Ok(());
        }
        let rel = (offset - self.base_offset) as u32;
        let mut buf = [0u8; TIME_ENTRY_SIZE];
        buf[0..8].copy_from_slice(&timestamp.to_be_bytes());
        buf[8..12].copy_from_slice(&rel.to_be_bytes());
        let at = (self.entries.len() * TIME_ENTRY_SIZE) as u64;
        self.file.write_all_at(&buf, at)?;
        self.entries.push((timestamp, rel));
        Ok(())
    }

    /// The last entry whose timestamp is strictly below `ts`. Strictly, because records before
    /// an entry's offset may carry a timestamp equal to the entry's.
    pub fn lookup_before(&self, ts: i64) -> Option<TimestampOffset> {
        let idx = self.entries.partition_point(|&(t, _)| t < ts);
        (idx > 0).then(|| self.entry(idx - 1))
    }

    /// Drops every entry whose offset is >= `offset`.
    pub fn truncate_to(&mut self, offset: i64) -> io::Result<()> {
        let rel = offset - self.base_offset;
        let keep = self.entries.partition_point(|&(_, r)| (r as i64) < rel);
        self.truncate_entries(keep)
    }

    pub fn reset(&mut self) -> io::Result<()> {
        self.truncate_entries(0)
    }

    fn truncate_entries(&mut self, keep: usize) -> io::Result<()> {
        if keep < self.entries.len() {
            self.entries.truncate(keep);
            self.file.set_len((keep * TIME_ENTRY_SIZE) as u64)?;
        }
        Ok(())
    }

    pub fn flush(&self) -> io::Result<()> {
        self.file.sync()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache() -> Arc<FileCache> {
        FileCache::new(64)
    }

    #[test]
    fn offset_index_lookup_and_reload() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("00000000000000000100.index");
        let idx = OffsetIndex::create(&cache(), &p, 100, 10).unwrap();
        idx.append(105, 4100).unwrap();
        idx.append(120, 8300).unwrap();
        assert_eq!(idx.lookup(99).position, 0);
        assert_eq!(
            idx.lookup(104),
            OffsetPosition {
                offset: 100,
                position: 0
            }
        );
        assert_eq!(
            idx.lookup(105),
            OffsetPosition {
                offset: 105,
                position: 4100
            }
        );
        assert_eq!(idx.lookup(119).position, 4100);
        assert_eq!(idx.lookup(500).position, 8300);
        let raw = std::fs::read(&p).unwrap();
        assert_eq!(raw.len(), 16);
        assert_eq!(&raw[0..8], &[0, 0, 0, 5, 0, 0, 0x10, 0x04]);
        let again = OffsetIndex::load(&cache(), &p, 100, 10, 9000)
            .unwrap()
            .unwrap();
        assert_eq!(again.len(), 2);
        assert_eq!(
            again.entry(1),
            OffsetPosition {
                offset: 120,
                position: 8300
            }
        );
        // A position past the end of the log makes the index unusable.
        assert!(OffsetIndex::load(&cache(), &p, 100, 10, 8000)
            .unwrap()
            .is_none());
        idx.truncate_to(120).unwrap();
        assert_eq!(idx.len(), 1);
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 8);
    }

    #[test]
    fn offset_index_rejects_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.index");
        std::fs::write(&p, [1u8; 7]).unwrap();
        assert!(OffsetIndex::load(&cache(), &p, 0, 10, 1 << 20)
            .unwrap()
            .is_none());
        // Zeroed preallocation: (0,0) twice is not increasing.
        std::fs::write(&p, [0u8; 16]).unwrap();
        assert!(OffsetIndex::load(&cache(), &p, 0, 10, 1 << 20)
            .unwrap()
            .is_none());
        assert!(
            OffsetIndex::load(&cache(), &dir.path().join("missing.index"), 0, 10, 1)
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn time_index_appends_only_increasing_timestamps() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("00000000000000000000.timeindex");
        let mut idx = TimeIndex::create(&cache(), &p, 0, 10).unwrap();
        idx.maybe_append(1000, 3).unwrap();
        idx.maybe_append(1000, 5).unwrap();
        idx.maybe_append(900, 6).unwrap();
        idx.maybe_append(2000, 9).unwrap();
        assert_eq!(idx.len(), 2);
        assert_eq!(idx.lookup_before(1000), None);
        assert_eq!(idx.lookup_before(1001).unwrap().offset, 3);
        assert_eq!(idx.lookup_before(5000).unwrap().offset, 9);
        let again = TimeIndex::load(&cache(), &p, 0, 10, Some(10))
            .unwrap()
            .unwrap();
        assert_eq!(
            again.last_entry(),
            Some(TimestampOffset {
                timestamp: 2000,
                offset: 9
            })
        );
        assert!(TimeIndex::load(&cache(), &p, 0, 10, Some(9))
            .unwrap()
            .is_none());
        idx.truncate_to(9).unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 12);
    }
}

//! The durable Raft log, vote, committed index and purge point of one voter.
//!
//! Layout under the quorum's directory:
//!
//! - `log/<first index, 20 digits>.log`: segments of log entries. A record is
//!   `[len: u32 LE][crc32c(body): u32 LE][body: bincode(openraft Entry)]`. Entries in a segment
//!   have consecutive indexes starting at the segment's base; a new segment starts when the active
//!   one reaches `segment_bytes`, or when the next index does not follow the last one (after a
//!   purge past the end of the log, as a snapshot install does).
//! - `vote`, `committed`, `purged`: `[crc32c: u32 LE][bincode value]`, replaced atomically
//!   (write a temporary file, fsync, rename, fsync the directory). The vote and the purge point
//!   are fsynced before the call returns; the committed log id is not (it is an optimisation that
//!   lets a restarted node apply its committed entries before it hears from a leader).
//!
//! Appends are fsynced before openraft is told they are flushed. On open, a torn or corrupt tail
//! of the last segment (a crash mid-write) is truncated; corruption anywhere else is an error.
//! Truncation on conflict cuts the segment that holds the first conflicting entry and deletes the
//! later segments (the last one first, so that a crash leaves a contiguous log). Purging writes
//! the purge point first and then deletes the segments that hold only purged entries.
//!
//! All entries after the purge point are also kept in memory (the metadata log is small and is
//! compacted by snapshots); reads never touch the disk. File I/O is synchronous: a metadata log
//! append is one small write and one fsync.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{AnyError, RaftLogReader, StorageIOError};
use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::types::{Entry, LogId, StorageError, TypeConfig, Vote};

/// Largest record body accepted when reading a segment (a torn length field must not make us
/// allocate gigabytes).
const MAX_RECORD: usize = 256 << 20;
const HEADER: usize = 8;

struct Segment {
    base: u64,
    path: PathBuf,
    file: File,
    len: u64,
    /// `offsets[i]` is where the record of index `base + i` starts.
    offsets: Vec<u64>,
}

impl Segment {
    /// The index the next record of this segment must have.
    fn next_index(&self) -> u64 {
        self.base + self.offsets.len() as u64
    }
}

struct LogInner {
    log_dir: PathBuf,
    state_dir: PathBuf,
    segment_bytes: u64,
    segments: Vec<Segment>,
    entries: BTreeMap<u64, Entry>,
    last_purged: Option<LogId>,
    vote: Option<Vote>,
    committed: Option<LogId>,
}

/// The log storage handed to openraft. Cloning shares the same files.
#[derive(Clone)]
pub struct LogStore {
    inner: Arc<Mutex<LogInner>>,
}

/// A reader of the same log (openraft's replication tasks read through it).
#[derive(Clone)]
pub struct LogReader {
    inner: Arc<Mutex<LogInner>>,
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

fn segment_name(base: u64) -> String {
    format!("{base:020}.log")
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Writes `[crc][bincode(value)]` to `dir/name` atomically.
pub(crate) fn write_state_file<T: Serialize>(
    dir: &Path,
    name: &str,
    value: &T,
    fsync: bool,
) -> io::Result<()> {
    let body = bincode::serialize(value).map_err(io::Error::other)?;
    write_blob_file(dir, name, &body, fsync)
}

pub(crate) fn write_blob_file(dir: &Path, name: &str, body: &[u8], fsync: bool) -> io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let mut f = File::create(&tmp)?;
    let mut buf = Vec::with_capacity(body.len() + 4);
    buf.extend_from_slice(&crc32c::crc32c(body).to_le_bytes());
    buf.extend_from_slice(body);
    f.write_all(&buf)?;
    if fsync {
        f.sync_all()?;
    }
    drop(f);
    std::fs::rename(&tmp, dir.join(name))?;
    if fsync {
        sync_dir(dir)?;
    }
    Ok(())
}

/// Reads a file written by [`write_blob_file`]; `Ok(None)` if it is absent, an error if its
/// checksum does not match.
pub(crate) fn read_blob_file(dir: &Path, name: &str) -> io::Result<Option<Vec<u8>>> {
    let path = dir.join(name);
    let data = match std::fs::read(&path) {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    if data.len() < 4 {
        return Err(invalid(format!("{} is truncated", path.display())));
    }
    let crc = u32::from_le_bytes([data[0], data[1], data[2], data[3]]);
    let body = &data[4..];
    if crc32c::crc32c(body) != crc {
        return Err(invalid(format!("{} has a bad checksum", path.display())));
    }
    Ok(Some(body.to_vec()))
}

pub(crate) fn read_state_file<T: DeserializeOwned>(
    dir: &Path,
    name: &str,
) -> io::Result<Option<T>> {
    match read_blob_file(dir, name)? {
        None => Ok(None),
        Some(body) => bincode::deserialize(&body)
            .map(Some)
            .map_err(|e| invalid(format!("{}: {e}", dir.join(name).display()))),
    }
}

fn encode_record(entry: &Entry, buf: &mut Vec<u8>) -> io::Result<()> {
    let body = bincode::serialize(entry).map_err(io::Error::other)?;
    buf.extend_from_slice(&(body.len() as u32).to_le_bytes());
    buf.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
    buf.extend_from_slice(&body);
    Ok(())
}

/// The valid records of a segment as `(offset, entry)` pairs, the length of the valid prefix
/// and the file's length.
struct Scan {
    records: Vec<(u64, Entry)>,
    valid: u64,
    total: u64,
}

/// Reads a segment up to its first torn, corrupt or out-of-sequence record.
fn scan_segment(path: &Path, base: u64) -> io::Result<Scan> {
    let data = std::fs::read(path)?;
    let mut pos = 0usize;
    let mut out = Vec::new();
    while pos + HEADER <= data.len() {
        let len = u32::from_le_bytes(data[pos..pos + 4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(data[pos + 4..pos + 8].try_into().expect("4 bytes"));
        if len > MAX_RECORD || pos + HEADER + len > data.len() {
            break;
        }
        let body = &data[pos + HEADER..pos + HEADER + len];
        if crc32c::crc32c(body) != crc {
            break;
        }
        let Ok(entry) = bincode::deserialize::<Entry>(body) else {
            break;
        };
        if entry.log_id.index != base + out.len() as u64 {
            break;
        }
        out.push((pos as u64, entry));
        pos += HEADER + len;
    }
    Ok(Scan {
        records: out,
        valid: pos as u64,
        total: data.len() as u64,
    })
}

impl LogStore {
    /// Opens (or creates) the log under `dir` (`dir/log/` holds the segments, `dir` the vote,
    /// committed and purge-point files).
    pub fn open(dir: &Path, segment_bytes: u64) -> io::Result<Self> {
        let log_dir = dir.join("log");
        std::fs::create_dir_all(&log_dir)?;
        let last_purged: Option<LogId> = read_state_file(dir, "purged")?;
        let vote: Option<Vote> = read_state_file(dir, "vote")?;
        // The committed log id is written without fsync: a damaged file only loses an
        // optimisation.
        let committed: Option<LogId> = read_state_file::<Option<LogId>>(dir, "committed")
            .unwrap_or_else(|e| {
                tracing::warn!(error = %e, "ignoring unreadable committed log id");
                None
            })
            .flatten();

        let mut bases = Vec::new();
        for de in std::fs::read_dir(&log_dir)? {
            let name = de?.file_name();
            let name = name.to_string_lossy();
            if let Some(stem) = name.strip_suffix(".log") {
                if let Ok(base) = stem.parse::<u64>() {
                    bases.push(base);
                }
            } else if name.ends_with(".tmp") {
                std::fs::remove_file(log_dir.join(&*name))?;
            }
        }
        bases.sort_unstable();

        let purged_index = last_purged.map(|l| l.index);
        let mut segments = Vec::new();
        let mut entries = BTreeMap::new();
        let count = bases.len();
        for (i, base) in bases.into_iter().enumerate() {
            let path = log_dir.join(segment_name(base));
            let Scan {
                records,
                valid,
                total,
            } = scan_segment(&path, base)?;
            let file = OpenOptions::new().read(true).append(true).open(&path)?;
            if valid < total {
                if i + 1 == count {
                    tracing::warn!(
                        path = %path.display(),
                        valid,
                        total,
                        "truncating torn tail of the raft log"
                    );
                    file.set_len(valid)?;
                    file.sync_all()?;
                } else {
                    return Err(invalid(format!(
                        "corrupt raft log record at byte {valid} of {}",
                        path.display()
                    )));
                }
            }
            let mut offsets = Vec::with_capacity(records.len());
            for (off, e) in records {
                offsets.push(off);
                if purged_index.is_none_or(|p| e.log_id.index > p) {
                    entries.insert(e.log_id.index, e);
                }
            }
            segments.push(Segment {
                base,
                path,
                file,
                len: valid,
                offsets,
            });
        }

        // The live entries must be contiguous and follow the purge point.
        let mut expect: Option<u64> = None;
        for &idx in entries.keys() {
            if let Some(x) = expect {
                if idx != x {
                    return Err(invalid(format!(
                        "raft log under {} has a gap before index {idx}",
                        log_dir.display()
                    )));
                }
            }
            expect = Some(idx + 1);
        }

        let mut inner = LogInner {
            log_dir,
            state_dir: dir.to_path_buf(),
            segment_bytes: segment_bytes.max(1),
            segments,
            entries,
            last_purged,
            vote,
            committed,
        };
        // A crash between writing the purge point and deleting segments leaves them behind.
        if let Some(p) = purged_index {
            inner.delete_purged_segments(p)?;
        }
        Ok(Self {
            inner: Arc::new(Mutex::new(inner)),
        })
    }

    /// The index of the last entry, if any (for start-up decisions).
    pub fn is_fresh(&self) -> bool {
        let inner = self.inner.lock();
        inner.entries.is_empty() && inner.last_purged.is_none() && inner.vote.is_none()
    }
}

impl LogInner {
    fn last_log_id(&self) -> Option<LogId> {
        self.entries
            .values()
            .next_back()
            .map(|e| e.log_id)
            .or(self.last_purged)
    }

    fn new_segment(&mut self, base: u64) -> io::Result<()> {
        let path = self.log_dir.join(segment_name(base));
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .truncate(false)
            .open(&path)?;
        file.set_len(0)?;
        sync_dir(&self.log_dir)?;
        self.segments.push(Segment {
            base,
            path,
            file,
            len: 0,
            offsets: Vec::new(),
        });
        Ok(())
    }

    fn append(&mut self, entries: Vec<Entry>) -> io::Result<()> {
        let mut buf = Vec::new();
        for entry in entries {
            let idx = entry.log_id.index;
            if let Some((&last, _)) = self.entries.iter().next_back() {
                if idx != last + 1 {
                    return Err(invalid(format!(
                        "append of index {idx} after last index {last}"
                    )));
                }
            }
            let roll = match self.segments.last() {
                None => true,
                Some(s) => {
                    s.next_index() != idx
                        || (!s.offsets.is_empty() && s.len + buf.len() as u64 >= self.segment_bytes)
                }
            };
            if roll {
                self.flush_active(&mut buf)?;
                if let Some(s) = self.segments.last() {
                    if s.offsets.is_empty() {
                        // An empty segment whose base does not fit: replace it.
                        let s = self.segments.pop().expect("checked");
                        std::fs::remove_file(&s.path)?;
                    }
                }
                self.new_segment(idx)?;
            }
            let seg = self.segments.last_mut().expect("a segment exists");
            seg.offsets.push(seg.len + buf.len() as u64);
            encode_record(&entry, &mut buf)?;
            self.entries.insert(idx, entry);
        }
        self.flush_active(&mut buf)
    }

    /// Writes `buf` to the active segment and fsyncs it.
    fn flush_active(&mut self, buf: &mut Vec<u8>) -> io::Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        let seg = self.segments.last_mut().expect("a segment exists");
        seg.file.write_all(buf)?;
        seg.file.sync_data()?;
        seg.len += buf.len() as u64;
        buf.clear();
        Ok(())
    }

    /// Removes every entry with index >= `idx`.
    fn truncate(&mut self, idx: u64) -> io::Result<()> {
        self.entries.split_off(&idx);
        while let Some(seg) = self.segments.last_mut() {
            if seg.base >= idx {
                let seg = self.segments.pop().expect("checked");
                drop(seg.file);
                std::fs::remove_file(&seg.path)?;
                continue;
            }
            if seg.next_index() > idx {
                let keep = (idx - seg.base) as usize;
                let off = seg.offsets[keep];
                seg.file.set_len(off)?;
                seg.file.sync_all()?;
                seg.offsets.truncate(keep);
                seg.len = off;
            }
            break;
        }
        sync_dir(&self.log_dir)
    }

    fn purge(&mut self, log_id: LogId) -> io::Result<()> {
        let upto = match self.last_purged {
            Some(p) if p.index >= log_id.index => p.index,
            _ => {
                write_state_file(&self.state_dir, "purged", &log_id, true)?;
                self.last_purged = Some(log_id);
                log_id.index
            }
        };
        let keep = self.entries.split_off(&(upto + 1));
        self.entries = keep;
        self.delete_purged_segments(upto)
    }

    /// Deletes the segments that hold only entries <= `upto` (oldest first).
    fn delete_purged_segments(&mut self, upto: u64) -> io::Result<()> {
        let mut deleted = false;
        while let Some(seg) = self.segments.first() {
            if seg.offsets.is_empty() || seg.next_index() - 1 > upto {
                break;
            }
            let seg = self.segments.remove(0);
            drop(seg.file);
            std::fs::remove_file(&seg.path)?;
            deleted = true;
        }
        if deleted {
            sync_dir(&self.log_dir)?;
        }
        Ok(())
    }
}

fn read_range<RB: RangeBounds<u64>>(inner: &Mutex<LogInner>, range: RB) -> Vec<Entry> {
    inner
        .lock()
        .entries
        .range(range)
        .map(|(_, e)| e.clone())
        .collect()
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        Ok(read_range(&self.inner, range))
    }
}

impl RaftLogReader<TypeConfig> for LogReader {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        Ok(read_range(&self.inner, range))
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogReader;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let inner = self.inner.lock();
        Ok(LogState {
            last_purged_log_id: inner.last_purged,
            last_log_id: inner.last_log_id(),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        LogReader {
            inner: self.inner.clone(),
        }
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        let mut inner = self.inner.lock();
        write_state_file(&inner.state_dir, "vote", vote, true)
            .map_err(|e| StorageIOError::write_vote(AnyError::new(&e)))?;
        inner.vote = Some(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        Ok(self.inner.lock().vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        let mut inner = self.inner.lock();
        if inner.committed == committed {
            return Ok(());
        }
        write_state_file(&inner.state_dir, "committed", &committed, false)
            .map_err(|e| StorageIOError::write(AnyError::new(&e)))?;
        inner.committed = committed;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(self.inner.lock().committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let entries: Vec<Entry> = entries.into_iter().collect();
        let res = self.inner.lock().append(entries);
        match res {
            Ok(()) => {
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                let err = StorageIOError::write_logs(AnyError::new(&e));
                callback.log_io_completed(Err(e));
                Err(err.into())
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.inner
            .lock()
            .truncate(log_id.index)
            .map_err(|e| StorageIOError::write_logs(AnyError::new(&e)).into())
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.inner
            .lock()
            .purge(log_id)
            .map_err(|e| StorageIOError::write_logs(AnyError::new(&e)).into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::{CommittedLeaderId, EntryPayload};

    use crate::types::Payload;

    fn ent(term: u64, index: u64, data: &[u8]) -> Entry {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(term, 1), index),
            payload: EntryPayload::Normal(Payload(data.to_vec())),
        }
    }

    fn indexes(store: &LogStore) -> Vec<u64> {
        store.inner.lock().entries.keys().copied().collect()
    }

    fn segment_files(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir.join("log"))
            .unwrap()
            .map(|d| d.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn torn_tail_is_truncated_on_open() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = LogStore::open(dir.path(), 1 << 20).unwrap();
            store
                .inner
                .lock()
                .append((1..=5).map(|i| ent(1, i, b"abc")).collect())
                .unwrap();
        }
        let seg = dir.path().join("log").join(segment_name(1));
        let full = std::fs::metadata(&seg).unwrap().len();
        // A crash in the middle of writing record 6: its header and half its body.
        let mut rec = Vec::new();
        encode_record(&ent(1, 6, b"torn record"), &mut rec).unwrap();
        let mut f = OpenOptions::new().append(true).open(&seg).unwrap();
        f.write_all(&rec[..rec.len() / 2]).unwrap();
        drop(f);

        let store = LogStore::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(indexes(&store), vec![1, 2, 3, 4, 5]);
        assert_eq!(std::fs::metadata(&seg).unwrap().len(), full);
        store.inner.lock().append(vec![ent(2, 6, b"x")]).unwrap();
        drop(store);

        // A flipped bit in the last record's body: that record goes, the rest stays.
        let mut bytes = std::fs::read(&seg).unwrap();
        let n = bytes.len();
        bytes[n - 1] ^= 0x55;
        std::fs::write(&seg, bytes).unwrap();
        let store = LogStore::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(indexes(&store), vec![1, 2, 3, 4, 5]);
    }

    #[test]
    fn corruption_in_an_older_segment_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = LogStore::open(dir.path(), 64).unwrap();
            for i in 1..=6 {
                store
                    .inner
                    .lock()
                    .append(vec![ent(1, i, &[7; 40])])
                    .unwrap();
            }
        }
        let files = segment_files(dir.path());
        assert!(files.len() > 1, "{files:?}");
        let first = dir.path().join("log").join(&files[0]);
        let mut bytes = std::fs::read(&first).unwrap();
        bytes[10] ^= 1;
        std::fs::write(&first, bytes).unwrap();
        assert!(LogStore::open(dir.path(), 64).is_err());
    }

    #[test]
    fn truncate_purge_and_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = LogStore::open(dir.path(), 100).unwrap();
            let mut inner = store.inner.lock();
            inner
                .append((1..=20).map(|i| ent(1, i, &[1; 30])).collect())
                .unwrap();
            inner.truncate(15).unwrap();
            inner
                .append((15..=17).map(|i| ent(2, i, &[2; 30])).collect())
                .unwrap();
            inner
                .purge(LogId::new(CommittedLeaderId::new(1, 1), 8))
                .unwrap();
        }
        let store = LogStore::open(dir.path(), 100).unwrap();
        assert_eq!(indexes(&store), (9..=17).collect::<Vec<_>>());
        let inner = store.inner.lock();
        assert_eq!(inner.entries[&16].log_id.leader_id.term, 2);
        assert_eq!(inner.entries[&14].log_id.leader_id.term, 1);
        assert_eq!(inner.last_purged.unwrap().index, 8);
        // Segments holding only purged entries are gone.
        assert!(inner.segments.first().unwrap().base > 1);
        drop(inner);
        // Purge past the end (a snapshot install), then append after it.
        {
            let mut inner = store.inner.lock();
            inner
                .purge(LogId::new(CommittedLeaderId::new(3, 1), 30))
                .unwrap();
            inner
                .append(vec![ent(3, 31, b"a"), ent(3, 32, b"b")])
                .unwrap();
        }
        drop(store);
        let store = LogStore::open(dir.path(), 100).unwrap();
        assert_eq!(indexes(&store), vec![31, 32]);
    }
}

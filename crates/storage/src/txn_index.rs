//! `.txnindex`: the aborted transactions whose end marker lies in a segment (Kafka's
//! `TransactionIndex` and `AbortedTxn`).
//!
//! Each entry is 34 big-endian bytes: version (i16, 0), producer id (i64), first offset (i64),
//! last offset (i64, the abort marker's offset) and last stable offset (i64, the LSO right after
//! the marker was written). A read_committed fetch collects the entries overlapping the range it
//! returns, so the consumer can drop the aborted records.
//!
//! The file is created on the first abort in its segment (most segments never have one), and
//! the entries are also kept in memory behind a lock held only for in-memory work, so fetches
//! (which share the segment with the writer) never read the file.

use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::{Mutex, RwLock};

pub const ABORTED_TXN_SIZE: usize = 34;
const CURRENT_VERSION: i16 = 0;

pub fn txn_index_file_name(base_offset: i64) -> String {
    format!("{base_offset:020}.txnindex")
}

/// One aborted transaction (Kafka's `AbortedTxn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    pub last_offset: i64,
    pub last_stable_offset: i64,
}

impl AbortedTxn {
    pub fn to_bytes(&self) -> [u8; ABORTED_TXN_SIZE] {
        let mut b = [0u8; ABORTED_TXN_SIZE];
        b[0..2].copy_from_slice(&CURRENT_VERSION.to_be_bytes());
        b[2..10].copy_from_slice(&self.producer_id.to_be_bytes());
        b[10..18].copy_from_slice(&self.first_offset.to_be_bytes());
        b[18..26].copy_from_slice(&self.last_offset.to_be_bytes());
        b[26..34].copy_from_slice(&self.last_stable_offset.to_be_bytes());
        b
    }

    /// Parses one entry; `Err` names the unknown version (Kafka refuses those too).
    pub fn parse(b: &[u8]) -> Result<Self, i16> {
        let i64_at = |at: usize| i64::from_be_bytes(b[at..at + 8].try_into().expect("8 bytes"));
        let version = i16::from_be_bytes([b[0], b[1]]);
        if version != CURRENT_VERSION {
            return Err(version);
        }
        Ok(Self {
            producer_id: i64_at(2),
            first_offset: i64_at(10),
            last_offset: i64_at(18),
            last_stable_offset: i64_at(26),
        })
    }
}

/// Parses a whole `.txnindex` file (also used by dump-log).
pub fn parse_txn_index(bytes: &[u8]) -> Result<Vec<AbortedTxn>, String> {
    if !bytes.len().is_multiple_of(ABORTED_TXN_SIZE) {
        return Err(format!(
            "transaction index size {} is not a multiple of {ABORTED_TXN_SIZE}",
            bytes.len()
        ));
    }
    bytes
        .chunks_exact(ABORTED_TXN_SIZE)
        .map(|c| AbortedTxn::parse(c).map_err(|v| format!("unexpected aborted txn version {v}")))
        .collect()
}

/// What one segment's index contributes to a fetch (Kafka's `TxnIndexSearchResult`): the
/// entries overlapping the range, and whether later segments cannot add any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnIndexSearchResult {
    pub aborted: Vec<AbortedTxn>,
    pub is_complete: bool,
}

pub struct TransactionIndex {
    path: Mutex<PathBuf>,
    entries: RwLock<Vec<AbortedTxn>>,
    /// Written since the last fsync.
    dirty: AtomicBool,
}

impl TransactionIndex {
    /// Loads `path` if it exists (no file: no aborted transaction in the segment). `None`: the
    /// file is corrupt, and the caller rebuilds it by recovering the segment.
    pub fn load(path: PathBuf) -> io::Result<Option<Self>> {
        let entries = match std::fs::read(&path) {
            Ok(b) => match parse_txn_index(&b) {
                Ok(e) => e,
                Err(why) => {
                    tracing::warn!(path = %path.display(), "{why}");
                    return Ok(None);
                }
            },
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e),
        };
        Ok(Some(Self {
            path: Mutex::new(path),
            entries: RwLock::new(entries),
            dirty: AtomicBool::new(false),
        }))
    }

    /// An empty index whose file does not exist yet.
    pub fn empty(path: PathBuf) -> Self {
        Self {
            path: Mutex::new(path),
            entries: RwLock::new(Vec::new()),
            dirty: AtomicBool::new(false),
        }
    }

    pub fn path(&self) -> PathBuf {
        self.path.lock().clone()
    }

    pub fn entries(&self) -> Vec<AbortedTxn> {
        self.entries.read().clone()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.read().is_empty()
    }

    /// Appends an entry (creating the file on the first one). Last offsets only grow, as
    /// Kafka's `TransactionIndex.append` insists.
    pub fn append(&self, txn: AbortedTxn) -> io::Result<()> {
        if let Some(last) = self.entries.read().last() {
            if last.last_offset >= txn.last_offset {
                return Err(io::Error::other(format!(
                    "The last offset of appended transactions must increase sequentially, but {} is not greater than current last offset {} of index {}",
                    txn.last_offset,
                    last.last_offset,
                    self.path().display()
                )));
            }
        }
        let path = self.path();
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)?;
        f.write_all(&txn.to_bytes())?;
        self.entries.write().push(txn);
        self.dirty.store(true, Ordering::Release);
        Ok(())
    }

    /// Drops the entries whose last offset is >= `offset` (Kafka's `truncateTo`).
    pub fn truncate_to(&self, offset: i64) -> io::Result<()> {
        let keep = self
            .entries
            .read()
            .iter()
            .take_while(|t| t.last_offset < offset)
            .count();
        self.truncate_entries(keep)
    }

    /// Empties the index (recovery rebuilds it).
    pub fn reset(&self) -> io::Result<()> {
        self.truncate_entries(0)
    }

    fn truncate_entries(&self, keep: usize) -> io::Result<()> {
        if self.entries.read().len() <= keep {
            return Ok(());
        }
        let path = self.path();
        match std::fs::OpenOptions::new().write(true).open(&path) {
            Ok(f) => f.set_len((keep * ABORTED_TXN_SIZE) as u64)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        self.entries.write().truncate(keep);
        self.dirty.store(true, Ordering::Release);
        Ok(())
    }

    pub fn flush(&self) -> io::Result<()> {
        if !self.dirty.swap(false, Ordering::AcqRel) {
            return Ok(());
        }
        crate::slow_io::before_sync(&self.path());
        match std::fs::File::open(self.path()) {
            Ok(f) => f.sync_all(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => {
                self.dirty.store(true, Ordering::Release);
                Err(e)
            }
        }
    }

    /// Renames the file (if it exists) to `to`; later writes go there.
    pub fn rename_to(&self, to: PathBuf) -> io::Result<bool> {
        let mut path = self.path.lock();
        let existed = match std::fs::rename(&*path, &to) {
            Ok(()) => true,
            Err(e) if e.kind() == io::ErrorKind::NotFound => false,
            Err(e) => return Err(e),
        };
        *path = to;
        Ok(existed)
    }

    pub fn delete_file(&self) -> io::Result<()> {
        match std::fs::remove_file(self.path()) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Kafka's `collectAbortedTxns`: the entries overlapping [fetch_offset, upper_bound), in
    /// order; complete once an entry's LSO reaches `upper_bound` (no later segment can hold an
    /// aborted transaction that started below it).
    pub fn collect_aborted_txns(
        &self,
        fetch_offset: i64,
        upper_bound: i64,
    ) -> TxnIndexSearchResult {
        let mut aborted = Vec::new();
        for t in self.entries.read().iter() {
            if t.last_offset >= fetch_offset && t.first_offset < upper_bound {
                aborted.push(*t);
            }
            if t.last_stable_offset >= upper_bound {
                return TxnIndexSearchResult {
                    aborted,
                    is_complete: true,
                };
            }
        }
        TxnIndexSearchResult {
            aborted,
            is_complete: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn txn(pid: i64, first: i64, last: i64, lso: i64) -> AbortedTxn {
        AbortedTxn {
            producer_id: pid,
            first_offset: first,
            last_offset: last,
            last_stable_offset: lso,
        }
    }

    #[test]
    fn layout_is_kafkas() {
        let b = txn(7, 10, 20, 11).to_bytes();
        assert_eq!(b.len(), 34);
        assert_eq!(&b[0..2], &[0, 0]);
        assert_eq!(&b[2..10], &7i64.to_be_bytes());
        assert_eq!(&b[10..18], &10i64.to_be_bytes());
        assert_eq!(&b[18..26], &20i64.to_be_bytes());
        assert_eq!(&b[26..34], &11i64.to_be_bytes());
        assert_eq!(AbortedTxn::parse(&b), Ok(txn(7, 10, 20, 11)));
    }

    #[test]
    fn lazy_file_append_truncate_reload() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(txn_index_file_name(0));
        let idx = TransactionIndex::load(path.clone()).unwrap().unwrap();
        assert!(!path.exists(), "created on the first abort only");
        idx.append(txn(1, 0, 5, 6)).unwrap();
        idx.append(txn(2, 3, 9, 10)).unwrap();
        assert!(
            idx.append(txn(3, 4, 9, 10)).is_err(),
            "last offsets must grow"
        );
        idx.flush().unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 68);
        let again = TransactionIndex::load(path.clone()).unwrap().unwrap();
        assert_eq!(again.entries(), vec![txn(1, 0, 5, 6), txn(2, 3, 9, 10)]);
        again.truncate_to(9).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 34);
        assert_eq!(again.entries(), vec![txn(1, 0, 5, 6)]);
        std::fs::write(&path, [0u8; 35]).unwrap();
        assert!(TransactionIndex::load(path).unwrap().is_none());
    }

    #[test]
    fn collect_stops_at_upper_bound_lso() {
        let dir = tempfile::tempdir().unwrap();
        let idx = TransactionIndex::empty(dir.path().join(txn_index_file_name(0)));
        idx.append(txn(1, 0, 5, 6)).unwrap();
        idx.append(txn(2, 3, 9, 10)).unwrap();
        idx.append(txn(3, 12, 14, 15)).unwrap();
        // Fetch [6, 10): only pid 2 overlaps; its LSO reaches the bound: complete.
        let r = idx.collect_aborted_txns(6, 10);
        assert_eq!(r.aborted, vec![txn(2, 3, 9, 10)]);
        assert!(r.is_complete);
        // Fetch [0, 20): everything, and later segments may add more.
        let r = idx.collect_aborted_txns(0, 20);
        assert_eq!(r.aborted.len(), 3);
        assert!(!r.is_complete);
    }
}

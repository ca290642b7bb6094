//! A bounded cache of open segment files shared by every log of a broker.
//!
//! Kafka keeps every segment's `.log` open and maps its indexes; with thousands of partitions
//! that is three descriptors each and a node runs out of them ("Too many open files"). Here a
//! segment names its files through [`FileSlot`]s and a file is only open while it sits in the
//! [`FileCache`]: the least recently used one is closed when more than `capacity` are open and
//! reopened on the next use. Index contents live in memory, so an index file is only touched
//! to append, truncate or fsync it.
//!
//! A handle taken from the cache is an `Arc<File>`: an eviction while a read or write is using
//! it only closes the descriptor once that operation is done, so the cap can be exceeded
//! briefly by in-flight operations, never by idle files.

use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

/// The smallest cap the cache accepts: a log needs its active segment's three files at once.
pub const MIN_OPEN_FILES: usize = 16;

/// The default cap: half the process's soft `RLIMIT_NOFILE`, leaving the other half to
/// sockets, checkpoint files and whatever else the broker opens. Read when the cache is
/// created, so a broker that raises its soft limit first gets the raised figure.
pub fn default_max_open_files() -> usize {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    let soft = limit.current.unwrap_or(1 << 20).min(1 << 24) as usize;
    (soft / 2).max(MIN_OPEN_FILES)
}

/// The number of descriptors this process has open (entries of `/proc/self/fd`), for tests and
/// diagnostics. `None` where `/proc` is not mounted.
pub fn open_descriptor_count() -> Option<usize> {
    std::fs::read_dir("/proc/self/fd")
        .ok()
        .map(|d| d.count().saturating_sub(1))
}

struct Entry {
    file: Arc<File>,
    tick: u64,
}

#[derive(Default)]
struct Inner {
    open: HashMap<u64, Entry>,
    /// tick -> slot id, oldest first.
    lru: BTreeMap<u64, u64>,
    tick: u64,
}

/// An LRU of open files keyed by slot; see the module docs.
pub struct FileCache {
    capacity: AtomicUsize,
    next_id: AtomicU64,
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for FileCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileCache")
            .field("capacity", &self.capacity())
            .field("open", &self.open_files())
            .finish()
    }
}

impl FileCache {
    pub fn new(capacity: usize) -> Arc<Self> {
        Arc::new(Self {
            capacity: AtomicUsize::new(capacity.max(MIN_OPEN_FILES)),
            next_id: AtomicU64::new(0),
            inner: Mutex::new(Inner::default()),
        })
    }

    /// The process-wide cache [`crate::UnifiedLog::open`] uses, created on first use with
    /// [`default_max_open_files`]; the broker sets `strom.log.max.open.files` on it.
    pub fn global() -> &'static Arc<FileCache> {
        static GLOBAL: OnceLock<Arc<FileCache>> = OnceLock::new();
        GLOBAL.get_or_init(|| FileCache::new(default_max_open_files()))
    }

    pub fn capacity(&self) -> usize {
        self.capacity.load(Ordering::Relaxed)
    }

    /// The cap in force: the configured one, but never more than half the process's soft
    /// open-files limit as it is now (the limit can be lowered while the broker runs, e.g. with
    /// `prlimit`), so the cache never takes the descriptors sockets and checkpoints need.
    /// `getrlimit` is read on each cache miss, which costs far less than the `open` it precedes.
    pub fn effective_capacity(&self) -> usize {
        self.capacity().min(default_max_open_files())
    }

    /// Changes the cap; files over it are closed at once (oldest first).
    pub fn set_capacity(&self, capacity: usize) {
        self.capacity
            .store(capacity.max(MIN_OPEN_FILES), Ordering::Relaxed);
        let cap = self.effective_capacity();
        let closed = {
            let mut inner = self.inner.lock();
            Self::evict(&mut inner, cap)
        };
        drop(closed);
    }

    /// Files the cache holds open right now.
    pub fn open_files(&self) -> usize {
        self.inner.lock().open.len()
    }

    /// Removes the oldest entries over the cap and returns them, so the caller closes them after
    /// the lock is released (`close` can block on NFS). `cap` is read before the lock is taken
    /// (it costs a `getrlimit`).
    fn evict(inner: &mut Inner, cap: usize) -> Vec<Arc<File>> {
        let mut closed = Vec::new();
        while inner.open.len() > cap {
            let Some((_, id)) = inner.lru.pop_first() else {
                break;
            };
            if let Some(e) = inner.open.remove(&id) {
                closed.push(e.file);
            }
        }
        closed
    }

    /// Runs `open`; if the process is out of descriptors (EMFILE/ENFILE: the cap was set above
    /// what the limit leaves, or sockets took the room) closes the older half of the cached
    /// files, lowers the cap to what stays open so the cache does not refill into the same
    /// wall, and tries once more. A second failure is returned (the broker answers
    /// KAFKA_STORAGE_ERROR for it).
    fn open_relieving(&self, open: impl Fn() -> io::Result<File>) -> io::Result<File> {
        match open() {
            Err(e) if is_out_of_descriptors(&e) => {
                let (closed, cap) = {
                    let mut inner = self.inner.lock();
                    let cap = (inner.open.len() / 2).max(MIN_OPEN_FILES);
                    self.capacity.store(cap, Ordering::Relaxed);
                    (Self::evict(&mut inner, cap), cap)
                };
                tracing::warn!(
                    error = %e,
                    closed = closed.len(),
                    max_open_files = cap,
                    "out of file descriptors: closed idle segment files and lowered the cap"
                );
                drop(closed);
                open()
            }
            r => r,
        }
    }

    fn get(&self, id: u64) -> Option<Arc<File>> {
        let mut inner = self.inner.lock();
        inner.tick += 1;
        let tick = inner.tick;
        let e = inner.open.get_mut(&id)?;
        let old = std::mem::replace(&mut e.tick, tick);
        let file = e.file.clone();
        inner.lru.remove(&old);
        inner.lru.insert(tick, id);
        Some(file)
    }

    /// Inserts a freshly opened file; if another thread opened the same slot meanwhile, its
    /// handle wins and ours is closed.
    fn insert(&self, id: u64, file: File) -> Arc<File> {
        let cap = self.effective_capacity();
        let (file, closed) = {
            let mut inner = self.inner.lock();
            inner.tick += 1;
            let tick = inner.tick;
            if let Some(e) = inner.open.get_mut(&id) {
                let old = std::mem::replace(&mut e.tick, tick);
                let existing = e.file.clone();
                inner.lru.remove(&old);
                inner.lru.insert(tick, id);
                (existing, Vec::new())
            } else {
                let file = Arc::new(file);
                inner.open.insert(
                    id,
                    Entry {
                        file: file.clone(),
                        tick,
                    },
                );
                inner.lru.insert(tick, id);
                let closed = Self::evict(&mut inner, cap);
                (file, closed)
            }
        };
        drop(closed);
        file
    }

    fn remove(&self, id: u64) {
        let closed = {
            let mut inner = self.inner.lock();
            match inner.open.remove(&id) {
                Some(e) => {
                    inner.lru.remove(&e.tick);
                    Some(e.file)
                }
                None => None,
            }
        };
        drop(closed);
    }
}

/// One file of a segment, opened through a [`FileCache`] when used. Never creates the file on
/// reopen: a file that vanished is an I/O error ([`crate::StorageError::Io`]).
pub struct FileSlot {
    id: u64,
    cache: Arc<FileCache>,
    path: Mutex<PathBuf>,
    /// Written since the last fsync (an evicted file keeps its dirty pages; fsync through a new
    /// descriptor flushes them, as fsync works on the file, not the descriptor).
    dirty: AtomicBool,
}

impl std::fmt::Debug for FileSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileSlot")
            .field("path", &*self.path.lock())
            .finish()
    }
}

fn is_out_of_descriptors(e: &io::Error) -> bool {
    matches!(
        rustix::io::Errno::from_io_error(e),
        Some(rustix::io::Errno::MFILE | rustix::io::Errno::NFILE)
    )
}

fn open_rw(path: &Path, create: bool) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .truncate(create)
        .open(path)
}

impl FileSlot {
    /// A slot for an existing file; nothing is opened until it is used.
    pub fn existing(cache: &Arc<FileCache>, path: PathBuf) -> Self {
        Self {
            id: cache.next_id.fetch_add(1, Ordering::Relaxed),
            cache: cache.clone(),
            path: Mutex::new(path),
            dirty: AtomicBool::new(false),
        }
    }

    /// Creates (or empties) the file and keeps it open in the cache, since a new file is about
    /// to be written.
    pub fn create(cache: &Arc<FileCache>, path: PathBuf) -> io::Result<Self> {
        let file = cache.open_relieving(|| open_rw(&path, true))?;
        let slot = Self::existing(cache, path);
        slot.dirty.store(true, Ordering::Relaxed);
        cache.insert(slot.id, file);
        Ok(slot)
    }

    pub fn path(&self) -> PathBuf {
        self.path.lock().clone()
    }

    /// The open file, opening it (and closing the least recently used one) if needed. The open
    /// itself happens outside the cache lock.
    pub fn file(&self) -> io::Result<Arc<File>> {
        if let Some(f) = self.cache.get(self.id) {
            return Ok(f);
        }
        // The name is held across the open: a rename (a segment leaving the log while the
        // cleaner's swap gives its old name to the new segment) cannot slip in between, so a
        // slot never opens a file other than its own.
        let path = self.path.lock();
        let file = self.cache.open_relieving(|| open_rw(&path, false))?;
        drop(path);
        Ok(self.cache.insert(self.id, file))
    }

    pub fn write_all_at(&self, buf: &[u8], at: u64) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        self.dirty.store(true, Ordering::Relaxed);
        self.file()?.write_all_at(buf, at)
    }

    pub fn set_len(&self, len: u64) -> io::Result<()> {
        self.dirty.store(true, Ordering::Relaxed);
        self.file()?.set_len(len)
    }

    /// Fsyncs the file if it was written since the last fsync (so clean files are not reopened).
    pub fn sync(&self) -> io::Result<()> {
        if self.dirty.swap(false, Ordering::AcqRel) {
            crate::slow_io::before_sync(&self.path.lock());
            if let Err(e) = self.file().and_then(|f| f.sync_all()) {
                self.dirty.store(true, Ordering::Relaxed);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Reads exactly `len` bytes at `pos` into a new buffer without zero-filling it first: the
    /// bytes go straight into the vector's spare capacity.
    pub fn read_exact_vec(&self, pos: u64, len: usize) -> io::Result<Vec<u8>> {
        let mut buf = Vec::with_capacity(len);
        if len == 0 {
            return Ok(buf);
        }
        let file = self.file()?;
        while buf.len() < len {
            let at = pos + buf.len() as u64;
            // `spare_capacity` fills at most the reserved capacity, which is exactly `len`.
            match rustix::io::pread(&*file, rustix::buffer::spare_capacity(&mut buf), at) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!("{}: short read at {at}", self.path().display()),
                    ))
                }
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(buf)
    }

    /// Reads exactly `buf.len()` bytes at `pos` (small, fixed-size reads such as headers).
    pub fn read_exact_at(&self, buf: &mut [u8], pos: u64) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        self.file()?.read_exact_at(buf, pos)
    }

    /// The file's length from the file system (no descriptor needed).
    pub fn len_on_disk(&self) -> io::Result<u64> {
        std::fs::metadata(self.path()).map(|m| m.len())
    }

    /// Renames the file; an open descriptor stays valid and a reopen uses the new name.
    pub fn rename(&self, to: PathBuf) -> io::Result<()> {
        let mut path = self.path.lock();
        std::fs::rename(&*path, &to)?;
        *path = to;
        Ok(())
    }

    /// Closes the descriptor (if open); the next use reopens it.
    pub fn close(&self) {
        self.cache.remove(self.id);
    }
}

impl Drop for FileSlot {
    fn drop(&mut self) {
        self.cache.remove(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_closes_the_oldest_and_reopens_on_use() {
        let dir = tempfile::tempdir().unwrap();
        let cache = FileCache::new(MIN_OPEN_FILES);
        let slots: Vec<FileSlot> = (0..40)
            .map(|i| FileSlot::create(&cache, dir.path().join(format!("{i}.log"))).unwrap())
            .collect();
        assert_eq!(cache.open_files(), MIN_OPEN_FILES);
        for (i, s) in slots.iter().enumerate() {
            s.write_all_at(format!("file {i}").as_bytes(), 0).unwrap();
            assert!(cache.open_files() <= MIN_OPEN_FILES);
        }
        for (i, s) in slots.iter().enumerate() {
            let want = format!("file {i}");
            assert_eq!(s.read_exact_vec(0, want.len()).unwrap(), want.as_bytes());
            s.sync().unwrap();
        }
        // A read past the end is an error, not zeros.
        assert_eq!(
            slots[0].read_exact_vec(0, 100).unwrap_err().kind(),
            io::ErrorKind::UnexpectedEof
        );
        drop(slots);
        assert_eq!(cache.open_files(), 0);
    }

    #[test]
    fn out_of_descriptors_closes_half_lowers_the_cap_and_retries_once() {
        let dir = tempfile::tempdir().unwrap();
        let cache = FileCache::new(1000);
        let slots: Vec<FileSlot> = (0..100)
            .map(|i| FileSlot::create(&cache, dir.path().join(format!("{i}.log"))).unwrap())
            .collect();
        assert_eq!(cache.open_files(), 100);
        let emfile = || io::Error::from(rustix::io::Errno::MFILE);
        let attempts = AtomicUsize::new(0);
        let path = dir.path().join("0.log");
        let file = cache
            .open_relieving(|| {
                if attempts.fetch_add(1, Ordering::Relaxed) == 0 {
                    Err(emfile())
                } else {
                    open_rw(&path, false)
                }
            })
            .unwrap();
        drop(file);
        assert_eq!(attempts.load(Ordering::Relaxed), 2);
        assert_eq!((cache.capacity(), cache.open_files()), (50, 50));
        // The most recently used files stayed open.
        assert!(cache.get(slots[99].id).is_some());
        assert!(cache.get(slots[0].id).is_none());
        // Still out of descriptors after the relief: the error is returned, not retried again.
        let attempts = AtomicUsize::new(0);
        let err = cache
            .open_relieving(|| {
                attempts.fetch_add(1, Ordering::Relaxed);
                Err(emfile())
            })
            .unwrap_err();
        assert!(is_out_of_descriptors(&err));
        assert_eq!(attempts.load(Ordering::Relaxed), 2);
        // Other errors are returned at once.
        let attempts = AtomicUsize::new(0);
        let err = cache
            .open_relieving(|| {
                attempts.fetch_add(1, Ordering::Relaxed);
                Err(io::Error::from(io::ErrorKind::NotFound))
            })
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert_eq!(attempts.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_vanished_file_is_an_error_not_a_new_file() {
        let dir = tempfile::tempdir().unwrap();
        let cache = FileCache::new(MIN_OPEN_FILES);
        let path = dir.path().join("x.log");
        let slot = FileSlot::create(&cache, path.clone()).unwrap();
        slot.close();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(
            slot.write_all_at(b"x", 0).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        assert!(!path.exists());
    }

    #[test]
    fn rename_keeps_the_slot_usable() {
        let dir = tempfile::tempdir().unwrap();
        let cache = FileCache::new(MIN_OPEN_FILES);
        let slot = FileSlot::create(&cache, dir.path().join("a.log")).unwrap();
        slot.write_all_at(b"abc", 0).unwrap();
        slot.rename(dir.path().join("a.log.deleted")).unwrap();
        slot.close();
        assert_eq!(slot.read_exact_vec(0, 3).unwrap(), b"abc");
        assert!(cache.capacity() >= MIN_OPEN_FILES);
        assert!(default_max_open_files() >= MIN_OPEN_FILES);
    }
}

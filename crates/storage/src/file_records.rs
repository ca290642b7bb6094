//! [`FileRecords`]: the records a read returns, as byte ranges of segment files not read yet
//! (Kafka's `FileRecords` slices, which its network threads send without copying them into
//! the heap). A fetch response carries them to the connection, which reads them through a
//! small buffer while it writes (or materializes them with [`FileRecords::read_all`]), so a
//! response of any size costs memory for its headers only.
//!
//! A range stays readable while it is held: it keeps its segment's [`SegmentData`] (file slot
//! and name) alive, a file evicted from the [`crate::FileCache`] is reopened on use, and a
//! deleted segment's open descriptor still reads its old bytes. A truncation can take bytes
//! back, so the ranges remember the log's truncation count (see [`crate::LogReader`]) and
//! [`FileRecords::still_valid`] says whether bytes read from them are still the ones planned.

use std::sync::Arc;

use bytes::Bytes;

use crate::reader::Shared;
use crate::segment::SegmentData;
use crate::txn_index::AbortedTxn;
use crate::StorageError;

/// One range of one segment's `.log` file.
#[derive(Clone)]
pub struct FileSlice {
    segment: Arc<SegmentData>,
    position: u64,
    len: usize,
}

impl FileSlice {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Fills `buf` with the slice's bytes from `offset` (relative to the slice's start);
    /// `offset + buf.len()` must not pass the slice's end.
    pub fn read_at(&self, offset: usize, buf: &mut [u8]) -> Result<(), StorageError> {
        if offset + buf.len() > self.len {
            return Err(StorageError::CorruptRecord(format!(
                "read of {} bytes at {offset} past the end of a {}-byte slice",
                buf.len(),
                self.len
            )));
        }
        let at = self.position + offset as u64;
        self.segment
            .read_into(at, buf, self.position + self.len as u64)
    }

    /// Sends up to `count` of the slice's bytes from `offset` (relative to the slice's start)
    /// to the socket `out` without copying them through user space (sendfile(2)); returns how
    /// many went, `WouldBlock` when the socket has no room. `offset + count` must not pass
    /// the slice's end. Check [`FileRecords::still_valid`] after each call, as after a read.
    pub fn send_to(
        &self,
        out: std::os::fd::BorrowedFd<'_>,
        offset: usize,
        count: usize,
    ) -> std::io::Result<usize> {
        if offset + count > self.len {
            return Err(std::io::Error::other(StorageError::CorruptRecord(format!(
                "send of {count} bytes at {offset} past the end of a {}-byte slice",
                self.len
            ))));
        }
        let at = self.position + offset as u64;
        self.segment
            .send_into(out, at, count, self.position + self.len as u64)
    }
}

/// Whole batches of one log, as ranges of its segment files, in log order.
#[derive(Clone, Default)]
pub struct FileRecords {
    slices: Vec<FileSlice>,
    len: usize,
    /// The log's shared state and its truncation count when the ranges were planned.
    guard: Option<(Arc<Shared>, u64)>,
}

impl std::fmt::Debug for FileRecords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(
                self.slices
                    .iter()
                    .map(|s| (s.segment.base_offset(), s.position, s.len)),
            )
            .finish()
    }
}

impl PartialEq for FileRecords {
    fn eq(&self, other: &Self) -> bool {
        self.slices.len() == other.slices.len()
            && self.slices.iter().zip(&other.slices).all(|(a, b)| {
                Arc::ptr_eq(&a.segment, &b.segment) && a.position == b.position && a.len == b.len
            })
    }
}

impl Eq for FileRecords {}

impl FileRecords {
    pub(crate) fn push(&mut self, segment: &Arc<SegmentData>, position: u64, len: usize) {
        if len == 0 {
            return;
        }
        self.len += len;
        self.slices.push(FileSlice {
            segment: segment.clone(),
            position,
            len,
        });
    }

    pub(crate) fn guarded(mut self, shared: Arc<Shared>, generation: u64) -> Self {
        self.guard = Some((shared, generation));
        self
    }

    /// Bytes in all ranges.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn slices(&self) -> &[FileSlice] {
        &self.slices
    }

    /// Whether no truncation of the log began since the ranges were planned: checked after
    /// reading bytes from them, it says those bytes are the batches planned (a truncation
    /// marks itself before it changes a file).
    pub fn still_valid(&self) -> bool {
        self.guard
            .as_ref()
            .is_none_or(|(shared, generation)| shared.generation() == *generation)
    }

    /// The bytes, read into one buffer (for readers that need them in memory: the
    /// coordinators' loads, tests). Fails when a truncation overlapped the read.
    pub fn read_all(&self) -> Result<Bytes, StorageError> {
        let out = self.read_unchecked()?;
        if !self.still_valid() {
            return Err(StorageError::TruncatedDuringRead);
        }
        Ok(out)
    }

    /// The bytes, without the truncation check (the caller checks as it needs).
    pub(crate) fn read_unchecked(&self) -> Result<Bytes, StorageError> {
        let mut out: Vec<u8> = Vec::new();
        for s in &self.slices {
            let end = s.position + s.len as u64;
            let bytes = s.segment.read_at(s.position, s.len, end)?;
            if bytes.len() != s.len {
                return Err(StorageError::TruncatedDuringRead);
            }
            if out.is_empty() {
                out = bytes;
            } else {
                out.extend_from_slice(&bytes);
            }
        }
        Ok(Bytes::from(out))
    }
}

/// [`crate::FetchDataInfo`] with its records not read yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileFetchDataInfo {
    pub records: FileRecords,
    pub log_start_offset: i64,
    pub log_end_offset: i64,
    pub aborted_transactions: Option<Vec<AbortedTxn>>,
}

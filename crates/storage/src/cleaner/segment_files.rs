//! The cleaner's file operations on a [`LogSegment`]: a segment written under the `.cleaned`
//! suffix, renamed through `.swap` to its final names, with its modification time carried over
//! from the segments it replaces (Kafka's `createNewCleanedSegment`, `changeFileSuffixes`,
//! `setLastModified`).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use super::LogSegment;
use crate::config::LogConfig;
use crate::file_cache::FileCache;

/// `path` with `old` replaced by `new` at its end (Kafka's `Utils.replaceSuffix`).
fn replace_suffix(path: &Path, old: &str, new: &str) -> io::Result<PathBuf> {
    let s = path.to_string_lossy();
    let stem = s
        .strip_suffix(old)
        .ok_or_else(|| io::Error::other(format!("{} does not end with {old:?}", path.display())))?;
    Ok(PathBuf::from(format!("{stem}{new}")))
}

impl LogSegment {
    /// A new, empty segment whose four files carry the `.cleaned` suffix.
    pub(crate) fn create_cleaned(
        cache: &Arc<FileCache>,
        dir: &Path,
        base_offset: i64,
        config: &LogConfig,
        now: i64,
    ) -> io::Result<Self> {
        Self::create_with_suffix(
            cache,
            dir,
            base_offset,
            config,
            now,
            crate::cleaner::CLEANED_FILE_SUFFIX,
        )
    }

    /// Renames the segment's files from suffix `old` to `new` (`""`: the final names); the
    /// transaction index only if it exists. Open descriptors stay valid.
    pub(crate) fn change_file_suffixes(&self, old: &str, new: &str) -> io::Result<()> {
        for slot in self.slots() {
            slot.rename(replace_suffix(&slot.path(), old, new)?)?;
        }
        let txn = &self.data.txn_index;
        txn.rename_to(replace_suffix(&txn.path(), old, new)?)?;
        Ok(())
    }

    /// Sets the `.log` file's modification time.
    pub(crate) fn set_last_modified(&self, t: SystemTime) -> io::Result<()> {
        self.data.log.file()?.set_modified(t)
    }

    /// The `.log` file's modification time (Kafka's `lastModified`).
    pub(crate) fn last_modified(&self) -> Option<SystemTime> {
        std::fs::metadata(self.data.log.path())
            .and_then(|m| m.modified())
            .ok()
    }
}

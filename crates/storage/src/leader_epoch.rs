//! Kafka's `LeaderEpochFileCache`: for every leader epoch, the first offset written in it,
//! persisted in `leader-epoch-checkpoint` (`0`, the entry count, then `epoch start_offset`
//! lines). It answers OffsetForLeaderEpoch: where a given epoch's log ends, which is how a
//! follower or a restarted ex-leader finds the divergent tail it must truncate (KIP-101/279/320).

use std::path::{Path, PathBuf};

use crate::checkpoint::sync_dir;
use crate::StorageError;

pub const LEADER_EPOCH_CHECKPOINT_FILE: &str = "leader-epoch-checkpoint";
const VERSION: i32 = 0;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEntry {
    pub epoch: i32,
    pub start_offset: i64,
}

pub struct LeaderEpochFileCache {
    path: PathBuf,
    /// Ascending in both epoch and start offset.
    entries: Vec<EpochEntry>,
}

impl LeaderEpochFileCache {
    /// Loads the checkpoint in `dir`; `None` when there is no file (the caller rebuilds).
    pub fn load(dir: &Path) -> Result<(Self, bool), StorageError> {
        let path = dir.join(LEADER_EPOCH_CHECKPOINT_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok((
                    Self {
                        path,
                        entries: Vec::new(),
                    },
                    false,
                ))
            }
            Err(e) => return Err(e.into()),
        };
        let corrupt = |reason: &str| StorageError::CorruptCheckpoint {
            path: path.clone(),
            reason: reason.to_string(),
        };
        let mut lines = text.lines();
        if lines.next().and_then(|l| l.trim().parse::<i32>().ok()) != Some(VERSION) {
            return Err(corrupt("bad version line"));
        }
        let count: usize = lines
            .next()
            .and_then(|l| l.trim().parse().ok())
            .ok_or_else(|| corrupt("bad count line"))?;
        let mut entries = Vec::with_capacity(count);
        for line in lines.by_ref().take(count) {
            let mut parts = line.split_whitespace();
            let epoch = parts.next().and_then(|p| p.parse().ok());
            let start = parts.next().and_then(|p| p.parse().ok());
            match (epoch, start, parts.next()) {
                (Some(epoch), Some(start_offset), None) => entries.push(EpochEntry {
                    epoch,
                    start_offset,
                }),
                _ => return Err(corrupt("bad entry line")),
            }
        }
        if entries.len() != count {
            return Err(corrupt("fewer entries than the count"));
        }
        Ok((Self { path, entries }, true))
    }

    pub fn entries(&self) -> &[EpochEntry] {
        &self.entries
    }

    pub fn latest_epoch(&self) -> Option<i32> {
        self.entries.last().map(|e| e.epoch)
    }

    /// Records that `epoch` starts at `start_offset`, if it is newer than the latest epoch
    /// (Kafka's `assign`). Returns whether the cache changed.
    pub fn assign(&mut self, epoch: i32, start_offset: i64) -> bool {
        if epoch < 0 || self.latest_epoch().is_some_and(|l| epoch <= l) {
            return false;
        }
        // A new epoch cannot start before an older one: drop entries it overrides.
        self.entries.retain(|e| e.start_offset < start_offset);
        self.entries.push(EpochEntry {
            epoch,
            start_offset,
        });
        true
    }

    /// OffsetForLeaderEpoch, as Kafka's `endOffsetFor`: the latest epoch ends at the log end;
    /// an older one at the start of the next higher epoch, paired with the largest epoch <= the
    /// requested one (or the requested one itself when it predates every known epoch); an
    /// undefined or unknown newer epoch gives `(-1, -1)`.
    pub fn end_offset_for(&self, requested: i32, log_end_offset: i64) -> (i32, i64) {
        if requested < 0 {
            return (-1, -1);
        }
        if self.latest_epoch() == Some(requested) {
            return (requested, log_end_offset);
        }
        let Some(higher) = self.entries.iter().find(|e| e.epoch > requested) else {
            return (-1, -1);
        };
        match self.entries.iter().rev().find(|e| e.epoch <= requested) {
            Some(floor) => (floor.epoch, higher.start_offset),
            None => (requested, higher.start_offset),
        }
    }

    /// Removes epochs starting at or after `offset` (log truncated to `offset`).
    pub fn truncate_from_end(&mut self, offset: i64) -> bool {
        let before = self.entries.len();
        self.entries.retain(|e| e.start_offset < offset);
        self.entries.len() != before
    }

    /// The log now starts at `offset`: epochs that ended before it go, and the one containing it
    /// starts there (Kafka's `truncateFromStart`).
    pub fn truncate_from_start(&mut self, offset: i64) -> bool {
        let Some(i) = self.entries.iter().rposition(|e| e.start_offset <= offset) else {
            return false;
        };
        let changed = i > 0 || self.entries[0].start_offset != offset;
        self.entries.drain(..i);
        self.entries[0].start_offset = offset;
        changed
    }

    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// Writes the checkpoint atomically (temp file, fsync, rename, directory fsync).
    pub fn flush(&self) -> Result<(), StorageError> {
        let mut text = format!("{VERSION}\n{}\n", self.entries.len());
        for e in &self.entries {
            text.push_str(&format!("{} {}\n", e.epoch, e.start_offset));
        }
        let tmp = self.path.with_extension("tmp");
        std::fs::write(&tmp, text)?;
        crate::slow_io::before_sync(&tmp);
        std::fs::File::open(&tmp)?.sync_all()?;
        std::fs::rename(&tmp, &self.path)?;
        if let Some(dir) = self.path.parent() {
            sync_dir(dir)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(entries: &[(i32, i64)]) -> (tempfile::TempDir, LeaderEpochFileCache) {
        let dir = tempfile::tempdir().unwrap();
        let (mut c, found) = LeaderEpochFileCache::load(dir.path()).unwrap();
        assert!(!found);
        for &(e, o) in entries {
            c.assign(e, o);
        }
        (dir, c)
    }

    #[test]
    fn end_offsets_follow_kafka() {
        let (_d, c) = cache(&[(0, 0), (2, 10), (5, 30)]);
        assert_eq!(c.end_offset_for(5, 42), (5, 42));
        assert_eq!(c.end_offset_for(7, 42), (-1, -1));
        assert_eq!(c.end_offset_for(2, 42), (2, 30));
        assert_eq!(c.end_offset_for(3, 42), (2, 30));
        assert_eq!(c.end_offset_for(0, 42), (0, 10));
        assert_eq!(c.end_offset_for(-1, 42), (-1, -1));
        let (_d, c) = cache(&[(4, 100), (6, 130)]);
        assert_eq!(c.end_offset_for(1, 200), (1, 100));
    }

    #[test]
    fn assign_ignores_old_epochs_and_truncates() {
        let (_d, mut c) = cache(&[(1, 0), (3, 5)]);
        assert!(!c.assign(3, 9));
        assert!(!c.assign(2, 9));
        assert!(c.assign(4, 9));
        assert!(c.truncate_from_end(5));
        assert_eq!(
            c.entries(),
            &[EpochEntry {
                epoch: 1,
                start_offset: 0
            }]
        );
        assert!(c.assign(6, 3));
        assert!(c.truncate_from_start(4));
        assert_eq!(
            c.entries(),
            &[EpochEntry {
                epoch: 6,
                start_offset: 4
            }]
        );
    }

    #[test]
    fn checkpoint_round_trip_in_kafka_format() {
        let (dir, c) = cache(&[(0, 0), (3, 17)]);
        c.flush().unwrap();
        let text = std::fs::read_to_string(dir.path().join(LEADER_EPOCH_CHECKPOINT_FILE)).unwrap();
        assert_eq!(text, "0\n2\n0 0\n3 17\n");
        let (c2, found) = LeaderEpochFileCache::load(dir.path()).unwrap();
        assert!(found);
        assert_eq!(c2.entries(), c.entries());
        std::fs::write(dir.path().join(LEADER_EPOCH_CHECKPOINT_FILE), "0\n2\n0 0\n").unwrap();
        assert!(LeaderEpochFileCache::load(dir.path()).is_err());
    }
}

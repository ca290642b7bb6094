//! Retention, DeleteRecords, `flush.ms` and Kafka's delayed file deletion for [`UnifiedLog`].
//!
//! A segment that leaves the log (retention, DeleteRecords, truncation) is not unlinked at once:
//! as Kafka's `LocalLog.deleteSegmentFiles(asyncDelete = true)`, its files are renamed with the
//! `.deleted` suffix and removed `file.delete.delay.ms` later by [`UnifiedLog::delete_due_files`],
//! which the broker's chores call. `.deleted` files left by a crash are removed when the log
//! opens. Readers still holding the segment keep reading through its open handle meanwhile.

use std::path::PathBuf;

use super::UnifiedLog;
use crate::segment::LogSegment;
use crate::StorageError;

impl UnifiedLog {
    /// Retention with the whole log eligible (the high watermark taken to be the log end).
    pub fn delete_old_segments(&mut self, now_ms: i64) -> Result<usize, StorageError> {
        self.delete_old_segments_below(now_ms, self.log_end_offset)
    }

    /// Retention as Kafka runs it: only segments wholly below `high_watermark` are eligible.
    /// Deletes segments past `retention.ms`, then the oldest while the log exceeds
    /// `retention.bytes` by at least a segment, then those wholly below the log start offset.
    pub fn delete_old_segments_below(
        &mut self,
        now_ms: i64,
        high_watermark: i64,
    ) -> Result<usize, StorageError> {
        let mut deleted = 0;
        let retention_ms = self.config.retention_ms;
        if retention_ms >= 0 {
            deleted += self.delete_segments_while(high_watermark, now_ms, |seg, _| {
                now_ms - seg.largest_timestamp() > retention_ms
            })?;
        }
        let retention_bytes = self.config.retention_bytes;
        if retention_bytes >= 0 && self.size_in_bytes() as i64 >= retention_bytes {
            let mut diff = self.size_in_bytes() as i64 - retention_bytes;
            deleted += self.delete_segments_while(high_watermark, now_ms, |seg, _| {
                if diff - seg.size() as i64 >= 0 {
                    diff -= seg.size() as i64;
                    true
                } else {
                    false
                }
            })?;
        }
        let start = self.log_start_offset;
        deleted += self.delete_segments_while(high_watermark, now_ms, |_, next| {
            next.is_some_and(|n| n.base_offset() <= start)
        })?;
        Ok(deleted)
    }

    /// Kafka's `deleteOldSegments(predicate)`: deletes from the oldest segment while
    /// `pred(segment, next)` holds, rolling first if every segment is to go.
    fn delete_segments_while(
        &mut self,
        high_watermark: i64,
        now_ms: i64,
        mut pred: impl FnMut(&LogSegment, Option<&LogSegment>) -> bool,
    ) -> Result<usize, StorageError> {
        let mut doomed = Vec::new();
        let mut iter = self.segments.values().peekable();
        while let Some(seg) = iter.next() {
            let next = iter.peek().copied();
            let upper = next.map_or(self.log_end_offset, |n| n.base_offset());
            let last_and_empty = next.is_none() && seg.size() == 0;
            if high_watermark >= upper && !last_and_empty && pred(seg, next) {
                doomed.push(seg.base_offset());
            } else {
                break;
            }
        }
        if doomed.is_empty() {
            return Ok(0);
        }
        if doomed.len() == self.segments.len() {
            self.roll(now_ms)?;
        }
        // The new start is published before the segments go, so a reader that no longer sees
        // them also refuses offsets below it.
        let first = *self
            .segments
            .range(doomed[doomed.len() - 1] + 1..)
            .next()
            .expect("active kept")
            .0;
        self.log_start_offset = self.log_start_offset.max(first);
        self.publish_offsets();
        let mut removed = Vec::with_capacity(doomed.len());
        for base in &doomed {
            removed.push(self.segments.remove(base).expect("listed"));
        }
        self.publish_segments();
        for seg in removed {
            self.remove_segment(seg, now_ms)?;
        }
        self.dir_dirty = true;
        self.recovery_point = self.recovery_point.max(self.log_start_offset);
        self.producer_state.delete_snapshots_before(first)?;
        self.producer_state
            .on_log_start_offset_incremented(self.log_start_offset);
        if self
            .leader_epoch_cache
            .truncate_from_start(self.log_start_offset)
        {
            self.leader_epoch_cache.flush()?;
        }
        Ok(doomed.len())
    }

    /// Moves the log start offset forward (DeleteRecords, or a checkpointed value after open)
    /// and deletes segments wholly below it.
    pub fn maybe_increment_log_start_offset(&mut self, new_start: i64) -> Result<(), StorageError> {
        if new_start > self.log_end_offset {
            return Err(StorageError::OffsetOutOfRange {
                requested: new_start,
                log_start: self.log_start_offset,
                log_end: self.log_end_offset,
            });
        }
        if new_start <= self.log_start_offset {
            return Ok(());
        }
        self.log_start_offset = new_start;
        self.publish_offsets();
        self.producer_state
            .on_log_start_offset_incremented(new_start);
        let hw = self.log_end_offset;
        self.delete_segments_while(hw, crate::segment::now_ms(), |_, next| {
            next.is_some_and(|n| n.base_offset() <= new_start)
        })?;
        if self.leader_epoch_cache.truncate_from_start(new_start) {
            self.leader_epoch_cache.flush()?;
        }
        Ok(())
    }

    /// Takes a segment (already out of `self.segments` and the published snapshot) out of
    /// service: renamed `.deleted` now, removed after `file.delete.delay.ms`.
    pub(super) fn remove_segment(
        &mut self,
        seg: LogSegment,
        now_ms: i64,
    ) -> Result<(), StorageError> {
        let paths = seg.rename_for_delete()?;
        drop(seg);
        self.schedule_delete(paths, now_ms)
    }

    /// Queues renamed files for removal; with no delay they go at once.
    pub(super) fn schedule_delete(
        &mut self,
        paths: Vec<PathBuf>,
        now_ms: i64,
    ) -> Result<(), StorageError> {
        self.dir_dirty = true;
        if paths.is_empty() {
            return Ok(());
        }
        let delay = self.config.file_delete_delay_ms;
        if delay <= 0 {
            return remove_files(&paths);
        }
        self.pending_deletes
            .push((now_ms.saturating_add(delay), paths));
        Ok(())
    }

    /// Removes the `.deleted` files whose `file.delete.delay.ms` has passed by `now_ms` (the
    /// broker's chore calls this). Returns how many files went.
    pub fn delete_due_files(&mut self, now_ms: i64) -> Result<usize, StorageError> {
        let mut removed = 0;
        let mut i = 0;
        while i < self.pending_deletes.len() {
            if self.pending_deletes[i].0 <= now_ms {
                let (_, paths) = self.pending_deletes.swap_remove(i);
                if let Err(e) = remove_files(&paths) {
                    // Keep them queued: the next run tries again.
                    self.pending_deletes.push((now_ms, paths));
                    return Err(e);
                }
                removed += paths.len();
                self.dir_dirty = true;
            } else {
                i += 1;
            }
        }
        Ok(removed)
    }

    /// Takes the `.deleted` files whose `file.delete.delay.ms` has passed by `now_ms` off the
    /// queue without removing them, so the caller can remove them ([`remove_deleted_files`])
    /// after releasing its lock on the log. Files whose removal then fails stay on disk and go
    /// when the log is next opened.
    pub fn take_due_files(&mut self, now_ms: i64) -> Vec<PathBuf> {
        let mut due = Vec::new();
        self.pending_deletes.retain_mut(|(at, paths)| {
            if *at <= now_ms {
                due.append(paths);
                false
            } else {
                true
            }
        });
        due
    }

    /// Files renamed `.deleted` and not yet removed.
    pub fn pending_deleted_files(&self) -> Vec<PathBuf> {
        self.pending_deletes
            .iter()
            .flat_map(|(_, p)| p.iter().cloned())
            .collect()
    }

    /// Kafka's `flush.ms` check in `LogManager.flushDirtyLogs`: flushes when `now_ms` is at
    /// least `flush.ms` after the last flush. Returns whether it flushed.
    pub fn flush_if_due(&mut self, now_ms: i64) -> Result<bool, StorageError> {
        if now_ms.saturating_sub(self.last_flush_ms) < self.config.flush_ms {
            return Ok(false);
        }
        self.flush()?;
        self.last_flush_ms = now_ms;
        Ok(true)
    }

    /// When the log was last flushed (ms since the epoch).
    pub fn last_flush_ms(&self) -> i64 {
        self.last_flush_ms
    }
}

/// Removes segment files taken with [`UnifiedLog::take_due_files`]; already gone is fine.
pub fn remove_deleted_files(paths: &[PathBuf]) -> Result<(), StorageError> {
    remove_files(paths)
}

fn remove_files(paths: &[PathBuf]) -> Result<(), StorageError> {
    for p in paths {
        match std::fs::remove_file(p) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

//! [`UnifiedLog`]'s truncations: a follower cutting its log back to its leader's, and a log
//! emptied and restarted at an offset (Kafka's `UnifiedLog.truncateTo` /
//! `truncateFullyAndStartAt`).

use std::collections::BTreeMap;

use super::UnifiedLog;
use crate::segment::LogSegment;
use crate::StorageError;

impl UnifiedLog {
    /// Removes every batch whose last offset is >= `offset` (a batch containing `offset` goes
    /// whole, so the log end offset may end up below `offset`). A target below the first segment
    /// empties the log and restarts it at `offset`.
    pub fn truncate_to(&mut self, offset: i64) -> Result<(), StorageError> {
        if offset < 0 {
            return Err(StorageError::OffsetOutOfRange {
                requested: offset,
                log_start: self.log_start_offset,
                log_end: self.log_end_offset,
            });
        }
        if offset >= self.log_end_offset {
            return Ok(());
        }
        // Readers overlapping this retry, so none serves the cut range once this returns.
        let _truncating = self.shared.begin_truncation();
        let now = crate::segment::now_ms();
        let first = *self.segments.keys().next().expect("non-empty");
        if offset < first {
            // The new segment goes in first (its base is below every old one, so no file name
            // is shared) so the log keeps an active segment even if a delete below fails.
            let seg = LogSegment::create(&self.cache, &self.dir, offset, &self.config, now)?;
            let old = std::mem::replace(&mut self.segments, BTreeMap::from([(offset, seg)]));
            self.log_start_offset = offset;
            self.log_end_offset = offset;
            self.recovery_point = self.recovery_point.min(offset);
            self.dir_dirty = true;
            self.publish_segments();
            self.publish_offsets();
            for (_, seg) in old {
                self.remove_segment(seg, now)?;
            }
        } else {
            let doomed: Vec<i64> = self.segments.range(offset + 1..).map(|(b, _)| *b).collect();
            let mut removed = Vec::new();
            for base in doomed {
                removed.push(self.segments.remove(&base).expect("listed"));
            }
            self.publish_segments();
            let active = self.active_mut();
            active.truncate_to(offset)?;
            self.log_end_offset = self.active().next_offset();
            self.log_start_offset = self.log_start_offset.min(self.log_end_offset);
            self.publish_offsets();
            for seg in removed {
                self.remove_segment(seg, now)?;
            }
        }
        self.dir_dirty = true;
        self.recovery_point = self.recovery_point.min(self.log_end_offset);
        if self
            .leader_epoch_cache
            .truncate_from_end(self.log_end_offset)
        {
            self.leader_epoch_cache.flush()?;
        }
        // Kafka's `truncateAndReload`: open and unreplicated transactions follow the cut log
        // (the segments' `.txnindex` were cut with them).
        self.load_producer_state(None)
    }

    /// Deletes every segment and restarts the log, empty, at `offset` (Kafka's
    /// `truncateFullyAndStartAt`): a follower whose log end is below the leader's log start, or
    /// a follower append whose first batch starts below an empty log's start. Epochs and
    /// producer state go with the data.
    pub fn truncate_fully_and_start_at(&mut self, offset: i64) -> Result<(), StorageError> {
        if offset < 0 {
            return Err(StorageError::OffsetOutOfRange {
                requested: offset,
                log_start: self.log_start_offset,
                log_end: self.log_end_offset,
            });
        }
        let _truncating = self.shared.begin_truncation();
        let now = crate::segment::now_ms();
        // Old files are renamed away first: a segment at the same base offset would share
        // their names. If that or the new segment fails, the old segments stay (renamed, still
        // readable through their handles) so the log is never without an active segment.
        let old = std::mem::take(&mut self.segments);
        let mut renamed = Vec::new();
        let mut result = Ok(());
        for seg in old.values() {
            match seg.rename_for_delete() {
                Ok(paths) => renamed.extend(paths),
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        let created = result
            .and_then(|()| LogSegment::create(&self.cache, &self.dir, offset, &self.config, now));
        let seg = match created {
            Ok(seg) => seg,
            Err(e) => {
                self.segments = old;
                return Err(e.into());
            }
        };
        drop(old);
        self.schedule_delete(renamed, now)?;
        self.segments.insert(offset, seg);
        self.log_start_offset = offset;
        self.log_end_offset = offset;
        self.publish_segments();
        self.publish_offsets();
        self.recovery_point = offset;
        self.dir_dirty = true;
        self.leader_epoch_cache.clear();
        self.leader_epoch_cache.flush()?;
        self.producer_state.delete_snapshots_before(i64::MAX)?;
        self.load_producer_state(None)
    }
}

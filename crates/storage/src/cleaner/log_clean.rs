//! [`UnifiedLog`]'s side of the cleaner (see [`crate::cleaner`]): what is cleanable, the
//! snapshot a clean works from, the swap of a cleaned group into the log, and the recovery of
//! an interrupted swap when the log opens.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::UnifiedLog;
use crate::checkpoint::sync_dir;
use crate::cleaner::{
    crash_point, CleanTask, CleanedGroup, LastRecord, LogToClean, SegmentToClean,
    CLEANED_FILE_SUFFIX, SWAP_FILE_SUFFIX,
};
use crate::segment::{BatchHeader, LogSegment};
use crate::StorageError;

impl UnifiedLog {
    /// Kafka's `LogSegments.values(from, to)`: the segment holding `from` and the later ones
    /// whose base is below `to`.
    fn segments_in(&self, from: i64, to: i64) -> impl Iterator<Item = &LogSegment> {
        let floor = if from >= to {
            None
        } else {
            Some(
                self.segments
                    .range(..=from)
                    .next_back()
                    .map_or(i64::MIN, |(b, _)| *b),
            )
        };
        floor
            .into_iter()
            .flat_map(move |f| self.segments.range(f..to).map(|(_, s)| s))
    }

    /// Kafka's `nonActiveLogSegmentsFrom`.
    fn non_active_segments_from(&self, from: i64) -> impl Iterator<Item = &LogSegment> {
        let active = self.active().base_offset();
        let to = if from > active { from } else { active };
        self.segments_in(from, to)
    }

    /// What the cleaner may clean now (Kafka's `cleanableOffsets`, `LogToClean` and
    /// `maxCompactionDelay`); `None` unless `cleanup.policy` has `compact`. `checkpointed`: the
    /// cleaner-offset-checkpoint entry; `last_stable_offset`: min(first unstable offset, HW)
    /// from the partition.
    pub fn cleanable(
        &self,
        checkpointed: Option<i64>,
        last_stable_offset: i64,
        now_ms: i64,
    ) -> Option<LogToClean> {
        if !self.config.compact {
            return None;
        }
        let start = self.log_start_offset;
        let checkpoint = checkpointed.unwrap_or(start);
        let (first_dirty, reset_checkpoint) =
            if checkpoint < start || checkpoint > self.log_end_offset {
                (start, checkpointed.is_some())
            } else {
                (checkpoint, false)
            };
        let active = self.active().base_offset();
        let mut uncleanable = last_stable_offset.min(active);
        let min_lag = self.config.min_compaction_lag_ms.max(0);
        if min_lag > 0 {
            if let Some(young) = self
                .non_active_segments_from(first_dirty)
                .find(|s| s.largest_timestamp() > now_ms - min_lag)
            {
                uncleanable = uncleanable.min(young.base_offset());
            }
        }
        let uncleanable = uncleanable.max(first_dirty);
        // Kafka's `calculateCleanableBytes`: rounded down to the segment holding it.
        let first_uncleanable = self
            .non_active_segments_from(uncleanable)
            .next()
            .map_or(active, |s| s.base_offset());
        let cleanable_bytes: u64 = self
            .segments_in(first_dirty.min(first_uncleanable), first_uncleanable)
            .map(|s| s.size())
            .sum();
        let clean_bytes: u64 = self
            .segments
            .range(..first_dirty)
            .map(|(_, s)| s.size())
            .sum();
        let total = clean_bytes + cleanable_bytes;
        let max_compaction_delay_ms = self.max_compaction_delay(first_dirty, now_ms);
        Some(LogToClean {
            first_dirty_offset: first_dirty,
            first_uncleanable_offset: first_uncleanable,
            clean_bytes,
            cleanable_bytes,
            cleanable_ratio: if total == 0 {
                0.0
            } else {
                cleanable_bytes as f64 / total as f64
            },
            needs_compaction_now: max_compaction_delay_ms > 0,
            max_compaction_delay_ms,
            reset_checkpoint,
            min_cleanable_ratio: self.config.min_cleanable_dirty_ratio,
        })
    }

    /// Kafka's `maxCompactionDelay`: how long ago `max.compaction.lag.ms` passed for the
    /// earliest first-batch timestamp of a dirty inactive segment (0 if it has not).
    fn max_compaction_delay(&self, first_dirty: i64, now_ms: i64) -> i64 {
        let earliest = self
            .non_active_segments_from(first_dirty)
            .filter(|s| s.size() > 0)
            .filter_map(|s| match s.read_header(0) {
                Ok(h) => Some(h.max_timestamp),
                Err(e) => {
                    tracing::warn!(dir = %self.dir.display(), base = s.base_offset(), error = %e, "cannot read first batch timestamp");
                    None
                }
            })
            .filter(|&t| t > 0)
            .min()
            .unwrap_or(i64::MAX);
        let clean_until = now_ms.saturating_sub(self.config.max_compaction_lag_ms.max(0));
        if earliest < clean_until {
            clean_until - earliest
        } else {
            0
        }
    }

    /// Under the partition's lock: a snapshot of what one clean of `to_clean` needs (the
    /// segments below the first uncleanable offset, every segment's aborted transactions, the
    /// last batch of each active producer, the config); see [`CleanTask::run`].
    pub fn prepare_clean(&self, to_clean: &LogToClean) -> CleanTask {
        let upper = to_clean.first_uncleanable_offset;
        let segments = self
            .segments
            .range(..upper)
            .map(|(_, s)| SegmentToClean {
                data: s.data().clone(),
                base: s.base_offset(),
                size: s.size(),
                next_offset: s.next_offset(),
                offset_index_bytes: (s.offset_index().len() * crate::index::OFFSET_ENTRY_SIZE)
                    as u64,
                time_index_bytes: (s.time_index().len() * crate::index::TIME_ENTRY_SIZE) as u64,
                last_modified: s.last_modified(),
            })
            .collect();
        let last_records: HashMap<i64, LastRecord> = self
            .producer_state
            .producers()
            .iter()
            .map(|(&pid, e)| {
                let last = e.last_data_offset();
                (
                    pid,
                    LastRecord {
                        last_data_offset: (last >= 0).then_some(last),
                        producer_epoch: e.producer_epoch,
                    },
                )
            })
            .collect();
        CleanTask {
            dir: self.dir.clone(),
            config: self.config.clone(),
            cache: self.cache.clone(),
            generation: self.shared.generation(),
            all: self.shared.snapshot(),
            segments,
            first_dirty_offset: to_clean.first_dirty_offset,
            first_uncleanable_offset: upper,
            last_records,
            abort: None,
            crash_at: None,
        }
    }

    /// Under the partition's lock: swaps one cleaned group in, as Kafka's `replaceSegments`
    /// (`.cleaned` -> `.swap`, readers switched to the new segment, old segments `.deleted`,
    /// `.swap` -> final names, directory fsynced). `Ok(false)`, the files discarded, when the
    /// segments it replaces are no longer exactly the log's (retention, truncation since the
    /// clean was prepared). An error mid-swap leaves the files for recovery to finish or undo:
    /// the log must be reopened (Kafka takes the log dir offline).
    pub fn replace_segments(&mut self, mut group: CleanedGroup) -> Result<bool, StorageError> {
        let crash = group.crash_at.clone();
        let fail = |step: &str| crash_point(step, crash.as_deref());
        let active = self.active().base_offset();
        let unchanged = self.shared.generation() == group.generation
            && !group.replaced.is_empty()
            && group.replaced.iter().all(|(base, data)| {
                *base < active
                    && self
                        .segments
                        .get(base)
                        .is_some_and(|s| Arc::ptr_eq(s.data(), data))
            });
        if !unchanged {
            tracing::info!(dir = %self.dir.display(), base = group.base_offset(), "log changed during cleaning: cleaned segment discarded");
            group.discard()?;
            return Ok(false);
        }
        let seg = group.segment.take().expect("a group is swapped once");
        let base = seg.base_offset();
        fail("after_cleaned")?;
        seg.change_file_suffixes(CLEANED_FILE_SUFFIX, SWAP_FILE_SUFFIX)?;
        sync_dir(&self.dir)?;
        fail("after_swap_rename")?;
        let old: Vec<LogSegment> = group
            .replaced
            .iter()
            .map(|(b, _)| self.segments.remove(b).expect("checked above"))
            .collect();
        self.segments.insert(base, seg);
        // Readers move to the new segment before the old files are renamed or removed; one
        // still holding an old segment reads its files through their (renamed) slots.
        self.publish_segments();
        let mut renamed: Vec<PathBuf> = Vec::new();
        for s in &old {
            renamed.extend(s.rename_for_delete()?);
        }
        fail("after_old_deleted")?;
        self.segments[&base].change_file_suffixes(SWAP_FILE_SUFFIX, "")?;
        sync_dir(&self.dir)?;
        fail("after_swap_done")?;
        // The producer snapshots of the segments merged into the new one go with them (Kafka's
        // `deleteProducerSnapshots` of the replaced-but-not-reused segments).
        for s in old.iter().filter(|s| s.base_offset() != base) {
            renamed.extend(
                self.producer_state
                    .remove_and_mark_snapshot_for_deletion(s.base_offset())?,
            );
        }
        drop(old);
        self.schedule_delete(renamed, crate::segment::now_ms())?;
        Ok(true)
    }
}

/// The base offset a segment file's name starts with (Kafka's `offsetFromFileName`).
fn offset_from_file_name(name: &str) -> Option<i64> {
    let digits = name.split('.').next()?;
    (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

fn is_segment_file(name: &str) -> bool {
    [".log", ".index", ".timeindex", ".txnindex"]
        .iter()
        .any(|s| name.ends_with(s))
}

/// The offset after the last whole batch of a `.log` file, or its base if it has none (Kafka's
/// `readNextOffset` of a recovered swap segment): a walk over the batch headers.
fn next_offset_of_log_file(path: &Path, base: i64) -> Result<i64, StorageError> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    let mut next = base;
    let mut pos = 0u64;
    let mut buf = [0u8; strom_protocol::batch::HEADER_SIZE];
    while pos + buf.len() as u64 <= len {
        file.read_exact_at(&mut buf, pos)?;
        let Ok(h) = BatchHeader::parse(&buf) else {
            break;
        };
        if pos + h.size as u64 > len {
            break;
        }
        next = h.last_offset + 1;
        pos += h.size as u64;
    }
    Ok(next)
}

fn remove_if_exists(path: &Path) -> Result<(), StorageError> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
        _ => Ok(()),
    }
}

/// Kafka's `LogLoader` first passes over a partition directory: `.deleted` and `.cleaned`
/// files removed, and with them any `.swap` at or above the lowest `.cleaned` offset (its
/// rename from `.cleaned` did not finish); the remaining `.swap` segments replace the segment
/// files whose base offsets lie in their offset range and take their final names.
pub(super) fn recover_swap_files(dir: &Path) -> Result<(), StorageError> {
    let mut swaps: Vec<(String, i64)> = Vec::new();
    let mut cleaned: Vec<String> = Vec::new();
    let mut min_cleaned = i64::MAX;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if !entry.file_type()?.is_file() {
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(crate::DELETED_FILE_SUFFIX) {
            remove_if_exists(&entry.path())?;
        } else if let Some(stem) = name.strip_suffix(CLEANED_FILE_SUFFIX) {
            if let Some(o) = offset_from_file_name(stem) {
                min_cleaned = min_cleaned.min(o);
            }
            cleaned.push(name);
        } else if let Some(stem) = name.strip_suffix(SWAP_FILE_SUFFIX) {
            if let Some(o) = offset_from_file_name(stem) {
                swaps.push((name, o));
            }
        }
    }
    if swaps.is_empty() && cleaned.is_empty() {
        return Ok(());
    }
    let mut valid = Vec::new();
    for (name, offset) in swaps {
        if offset >= min_cleaned {
            tracing::info!(dir = %dir.display(), file = name, "deleting swap file of an unfinished swap");
            remove_if_exists(&dir.join(&name))?;
        } else {
            valid.push((name, offset));
        }
    }
    for name in cleaned {
        remove_if_exists(&dir.join(name))?;
    }
    let (mut min_swap, mut max_swap) = (i64::MAX, i64::MIN);
    for (name, base) in &valid {
        if name
            .strip_suffix(SWAP_FILE_SUFFIX)
            .is_some_and(|n| n.ends_with(".log"))
        {
            let next = next_offset_of_log_file(&dir.join(name), *base)?;
            min_swap = min_swap.min(*base);
            max_swap = max_swap.max(next);
        }
    }
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(SWAP_FILE_SUFFIX) || !is_segment_file(&name) {
            continue;
        }
        if offset_from_file_name(&name).is_some_and(|o| o >= min_swap && o < max_swap) {
            tracing::info!(dir = %dir.display(), file = name, "deleting segment file replaced by an interrupted clean");
            remove_if_exists(&entry.path())?;
        }
    }
    for (name, _) in &valid {
        let to = name.strip_suffix(SWAP_FILE_SUFFIX).expect("a swap file");
        tracing::info!(dir = %dir.display(), file = name, "finishing an interrupted swap");
        std::fs::rename(dir.join(name), dir.join(to))?;
    }
    sync_dir(dir)?;
    Ok(())
}

#[cfg(test)]
impl UnifiedLog {
    /// The segment list readers see now (a reader mid-read holds one like it).
    pub(crate) fn reader_snapshot(&self) -> crate::reader::Snapshot {
        self.shared.snapshot()
    }
}

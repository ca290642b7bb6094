//! [`UnifiedLog`]: one partition's ordered segments, as Kafka's `UnifiedLog` + `LocalLog`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use strom_protocol::batch::{
    set_base_offset, set_max_timestamp, set_partition_leader_epoch, BatchError, BatchIter,
    BatchView,
};

use crate::checkpoint::sync_dir;
use crate::config::LogConfig;
use crate::file_cache::FileCache;
use crate::leader_epoch::LeaderEpochFileCache;
use crate::log_validator::LogValidator;
use crate::producer_state::{PlacedBatch, Prepared, ProducerBatch, ProducerStateManager};
use crate::reader::{LogReader, Shared};
use crate::segment::{log_file_name, offset_index_file_name, time_index_file_name, LogSegment};
use crate::txn_index::txn_index_file_name;
use crate::verification::VerificationGuard;
use crate::{AppendOrigin, FetchDataInfo, LogAppendInfo, StorageError, TimestampAndOffset};

/// ListOffsets' special timestamps, as Kafka's `ListOffsetsRequest`.
pub const LATEST_TIMESTAMP: i64 = -1;
pub const EARLIEST_TIMESTAMP: i64 = -2;
pub const MAX_TIMESTAMP: i64 = -3;

/// What validation learned about the batches of one append.
struct Analyzed {
    first_offset: i64,
    last_offset: i64,
    max_timestamp: i64,
    num_messages: i64,
    batches: usize,
    producer_batches: Vec<ProducerBatch>,
}

pub struct UnifiedLog {
    dir: PathBuf,
    config: LogConfig,
    /// Where the segments' files are opened; shared by every log of a broker.
    cache: Arc<FileCache>,
    /// What lock-free readers see; republished after every change below.
    shared: Arc<Shared>,
    /// Keyed by base offset; the last one is the active segment. Never empty.
    segments: BTreeMap<i64, LogSegment>,
    log_start_offset: i64,
    log_end_offset: i64,
    recovery_point: i64,
    /// A segment file was created or deleted since the directory was last fsynced.
    dir_dirty: bool,
    producer_state: ProducerStateManager,
    leader_epoch_cache: LeaderEpochFileCache,
    /// When the log was last flushed (`flush.ms` counts from here).
    last_flush_ms: i64,
    /// Segment files renamed `.deleted`, with the time they may be removed
    /// (`file.delete.delay.ms` after the rename).
    pending_deletes: Vec<(i64, Vec<PathBuf>)>,
}

fn parse_log_file_name(name: &str) -> Option<i64> {
    let digits = name.strip_suffix(".log")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

fn batch_error(e: BatchError) -> StorageError {
    match e {
        BatchError::UnsupportedMagic(m) => StorageError::InvalidRecord(format!(
            "unsupported magic {m}, only v2 batches are accepted"
        )),
        BatchError::InvalidCount { .. } => StorageError::InvalidRecord(e.to_string()),
        _ => StorageError::CorruptRecord(e.to_string()),
    }
}

impl UnifiedLog {
    /// Opens (creating if needed) the partition dir, loads segments, recovers. After an unclean
    /// shutdown every segment from the one holding `recovery_point` on is re-validated and cut
    /// at the first bad batch (later segments deleted); any segment whose indexes are missing or
    /// inconsistent has them rebuilt either way. The log start offset is the first segment's base
    /// offset: a checkpointed one is applied afterwards with
    /// [`Self::maybe_increment_log_start_offset`].
    ///
    /// Segment files are opened through the process-wide [`FileCache::global`]; see
    /// [`Self::open_in`].
    pub fn open(
        dir: &Path,
        config: LogConfig,
        recovery_point: i64,
        had_clean_shutdown: bool,
    ) -> Result<Self, StorageError> {
        Self::open_in(
            FileCache::global(),
            dir,
            config,
            recovery_point,
            had_clean_shutdown,
        )
    }

    /// [`Self::open`] with the segments' files opened through `cache`. After a clean shutdown
    /// only the active segment's data is read; no file stays open unless the cache keeps it.
    pub fn open_in(
        cache: &Arc<FileCache>,
        dir: &Path,
        config: LogConfig,
        recovery_point: i64,
        had_clean_shutdown: bool,
    ) -> Result<Self, StorageError> {
        std::fs::create_dir_all(dir)?;
        // An interrupted clean's swap is finished (or undone) first, as Kafka's `LogLoader`.
        clean::recover_swap_files(dir)?;
        let mut bases = Vec::new();
        let mut others = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(base) = parse_log_file_name(&name) {
                bases.push(base);
            } else if name.ends_with(".deleted") || name.ends_with(".cleaned") {
                // Leftovers of an interrupted delete or compaction, as Kafka removes them.
                std::fs::remove_file(entry.path())?;
            } else {
                others.push(name);
            }
        }
        bases.sort_unstable();
        // Index files whose log is gone would otherwise be picked up by a future segment.
        for name in others {
            let stem = name
                .strip_suffix(".index")
                .or_else(|| name.strip_suffix(".timeindex"))
                .or_else(|| name.strip_suffix(".txnindex"));
            if let Some(stem) = stem {
                if stem.len() == 20 && !bases.iter().any(|b| format!("{b:020}") == stem) {
                    std::fs::remove_file(dir.join(&name))?;
                }
            }
        }

        let recover_from = if had_clean_shutdown {
            None
        } else {
            // The segment holding the recovery point, or the first one.
            Some(
                bases
                    .iter()
                    .rev()
                    .find(|&&b| b <= recovery_point)
                    .or(bases.first())
                    .copied()
                    .unwrap_or(0),
            )
        };
        let mut segments = BTreeMap::new();
        let mut first_recovered: Option<i64> = None;
        let mut cut_at = None;
        for (i, &base) in bases.iter().enumerate() {
            // Inactive segments of a clean shutdown are trusted as Kafka does: no tail walk.
            let next_base = bases.get(i + 1).copied().filter(|_| had_clean_shutdown);
            let (mut seg, needs_rebuild) = LogSegment::open(cache, dir, base, &config, next_base)?;
            let unflushed = recover_from.is_some_and(|from| base >= from);
            if needs_rebuild || unflushed {
                if needs_rebuild {
                    tracing::info!(dir = %dir.display(), base, "rebuilding indexes");
                }
                let truncated = seg.recover()?;
                first_recovered.get_or_insert(base);
                segments.insert(base, seg);
                if truncated > 0 && unflushed {
                    cut_at = Some(i + 1);
                    break;
                }
            } else {
                segments.insert(base, seg);
            }
        }
        let mut dir_dirty = false;
        if let Some(cut) = cut_at {
            // Everything after a torn batch was written after it, so it cannot be trusted.
            for &base in &bases[cut..] {
                tracing::warn!(dir = %dir.display(), base, "deleting segment after corruption");
                for name in [
                    log_file_name(base),
                    offset_index_file_name(base),
                    time_index_file_name(base),
                    txn_index_file_name(base),
                ] {
                    match std::fs::remove_file(dir.join(name)) {
                        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
                        _ => {}
                    }
                }
                dir_dirty = true;
            }
        }
        if segments.is_empty() {
            segments.insert(
                0,
                LogSegment::create(cache, dir, 0, &config, crate::segment::now_ms())?,
            );
            dir_dirty = true;
        }
        let log_start_offset = *segments.keys().next().expect("non-empty");
        let log_end_offset = segments
            .values()
            .next_back()
            .expect("non-empty")
            .next_offset();
        let mut producer_state = ProducerStateManager::new(dir, config.producer_id_expiration_ms)?;
        producer_state.set_verification_enabled(config.transaction_verification_enabled);
        let (leader_epoch_cache, epochs_found) = match LeaderEpochFileCache::load(dir) {
            Ok(loaded) => loaded,
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "rebuilding unreadable leader-epoch-checkpoint");
                std::fs::remove_file(dir.join(crate::leader_epoch::LEADER_EPOCH_CHECKPOINT_FILE))?;
                LeaderEpochFileCache::load(dir)?
            }
        };
        let shared = Shared::new(
            Arc::new(segments.values().map(|s| s.data().clone()).collect()),
            log_start_offset,
            log_end_offset,
        );
        let mut log = Self {
            dir: dir.to_path_buf(),
            config,
            cache: cache.clone(),
            shared,
            segments,
            log_start_offset,
            log_end_offset,
            recovery_point: log_end_offset,
            dir_dirty,
            producer_state,
            leader_epoch_cache,
            last_flush_ms: crate::segment::now_ms(),
            pending_deletes: Vec::new(),
        };
        // Segments recovery rewrote get their `.txnindex` back from the replay.
        log.load_producer_state(first_recovered)?;
        log.load_leader_epochs(epochs_found)?;
        if let Some(base) = first_recovered {
            // Make what recovery rewrote durable, so the recovery point can move to the end.
            log.recovery_point = base;
            log.flush()?;
        } else if log.dir_dirty {
            log.flush()?;
        }
        Ok(log)
    }

    /// Kafka's `TopicPartition.toString`, which is the log directory's name.
    fn topic_partition(&self) -> String {
        self.dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// Checks every batch's header before anything is written (Kafka's
    /// `analyzeAndValidateRecords`); leader appends then go through the [`LogValidator`].
    /// Offsets are only checked for followers (`expected_next` set): leaders overwrite them.
    fn analyze(
        &self,
        records: &[u8],
        origin: AppendOrigin,
        expected_next: Option<i64>,
    ) -> Result<Analyzed, StorageError> {
        let mut a = Analyzed {
            first_offset: -1,
            last_offset: -1,
            max_timestamp: -1,
            num_messages: 0,
            batches: 0,
            producer_batches: Vec::new(),
        };
        let max = self.config.max_message_bytes as usize;
        let tp = || self.topic_partition();
        let mut pos = 0;
        while pos < records.len() {
            // A client's batch is judged field by field by the `LogValidator` (a bad offset
            // delta is INVALID_RECORD there), so its header is read without that check.
            let view = if origin == AppendOrigin::Client {
                BatchView::parse_unchecked_offsets(&records[pos..])
            } else {
                BatchView::parse(&records[pos..])
            }
            .map_err(batch_error)?;
            pos += view.size();
            // Kafka's `analyzeAndValidateRecords`, in its order.
            if origin == AppendOrigin::Client && view.base_offset() != 0 {
                return Err(StorageError::InvalidRecord(format!(
                    "The baseOffset of the record batch in the append to {} should be 0, but it is {}",
                    tp(),
                    view.base_offset()
                )));
            }
            if view.size() > max {
                return Err(StorageError::RecordTooLarge {
                    size: view.size(),
                    max,
                });
            }
            if view.compute_crc() != view.crc() {
                return Err(StorageError::CorruptRecord(format!(
                    "Record is corrupt (stored crc = {}) in topic partition {}.",
                    view.crc(),
                    tp()
                )));
            }
            if let strom_protocol::batch::CompressionType::Unknown(id) = view.compression() {
                // Kafka's `CompressionType.forId` throws IllegalArgumentException here.
                return Err(StorageError::RecordStream(format!(
                    "Unknown compression type id: {id}"
                )));
            }
            if origin != AppendOrigin::Client {
                let (count, delta) = (view.records_count(), view.last_offset_delta());
                if count < 0 || (count > 0 && i64::from(delta) + 1 < i64::from(count)) {
                    return Err(batch_error(BatchError::InvalidCount {
                        count,
                        last_offset_delta: delta,
                    }));
                }
            }
            if let Some(next) = expected_next {
                let min = if a.batches == 0 {
                    next
                } else {
                    a.last_offset + 1
                };
                if a.batches == 0 && view.base_offset() < next {
                    return Err(StorageError::UnexpectedAppendOffset {
                        first_offset: view.base_offset(),
                        log_end: next,
                    });
                }
                if view.base_offset() < min {
                    return Err(StorageError::InvalidRecord(format!(
                        "offsets out of order: batch at {} after {}",
                        view.base_offset(),
                        a.last_offset
                    )));
                }
                if a.batches == 0 {
                    a.first_offset = view.base_offset();
                }
                a.last_offset = view.last_offset();
            }
            a.max_timestamp = a.max_timestamp.max(view.max_timestamp());
            a.num_messages += view.records_count() as i64;
            a.batches += 1;
            a.producer_batches.push(txn::producer_batch(&view));
        }
        Ok(a)
    }

    /// The `LogValidator` of a leader append, with this log's settings.
    fn validator(&self, origin: AppendOrigin, now_ms: i64) -> LogValidator<'_> {
        LogValidator {
            topic_partition: self.dir.file_name().and_then(|n| n.to_str()).unwrap_or(""),
            now_ms,
            target_compression: self.config.compression,
            compacted_topic: self.config.compact,
            timestamp_type: self.config.message_timestamp_type,
            timestamp_before_max_ms: self.config.message_timestamp_before_max_ms,
            timestamp_after_max_ms: self.config.message_timestamp_after_max_ms,
            origin,
            max_record_body_size: self.config.max_decompressed_message_bytes,
            max_message_bytes: self.config.max_message_bytes as usize,
        }
    }

    fn empty_append_info(&self) -> LogAppendInfo {
        LogAppendInfo {
            first_offset: -1,
            last_offset: -1,
            max_timestamp: -1,
            log_append_time: -1,
            num_messages: 0,
            valid_bytes: 0,
            log_start_offset: self.log_start_offset,
        }
    }

    /// Validates every batch of `records` first, writing nothing if any fails; then copies the
    /// bytes once, assigns offsets from the log end offset, stamps the leader epoch (and
    /// LogAppendTime when configured), rolls if needed, writes and indexes.
    pub fn append_as_leader(
        &mut self,
        records: &[u8],
        leader_epoch: i32,
        origin: AppendOrigin,
        now_ms: i64,
    ) -> Result<LogAppendInfo, StorageError> {
        self.append_as_leader_with_txn_version(records, leader_epoch, origin, 0, now_ms)
    }

    /// [`Self::append_as_leader`] of transaction markers of `transaction_version` (from
    /// WriteTxnMarkers v2 on; 0 before), which decides how their producer epoch is checked.
    pub fn append_as_leader_with_txn_version(
        &mut self,
        records: &[u8],
        leader_epoch: i32,
        origin: AppendOrigin,
        transaction_version: i16,
        now_ms: i64,
    ) -> Result<LogAppendInfo, StorageError> {
        self.append_as_leader_verified(
            records,
            leader_epoch,
            origin,
            transaction_version,
            VerificationGuard::SENTINEL,
            now_ms,
        )
    }

    /// [`Self::append_as_leader_with_txn_version`] carrying the guard of the KIP-890
    /// verification its transactional batch went through (see [`crate::verification`]).
    pub fn append_as_leader_verified(
        &mut self,
        records: &[u8],
        leader_epoch: i32,
        origin: AppendOrigin,
        transaction_version: i16,
        verification_guard: VerificationGuard,
        now_ms: i64,
    ) -> Result<LogAppendInfo, StorageError> {
        let mut analyzed = self.analyze(records, origin, None)?;
        if analyzed.batches == 0 {
            return Ok(self.empty_append_info());
        }
        // Kafka's `LogValidator`, before the producer's state is checked (as Kafka orders it).
        let validated = self.validator(origin, now_ms).validate(records)?;
        if let Some(rebuilt) = &validated.rebuilt {
            let view = BatchView::parse(rebuilt).map_err(batch_error)?;
            analyzed.producer_batches = vec![txn::producer_batch(&view)];
        }
        for b in &mut analyzed.producer_batches {
            b.max_timestamp = validated.header_max_timestamp;
        }
        // The offsets the batches will get, so transactions know where they start.
        let mut next = self.log_end_offset;
        let placed: Vec<PlacedBatch> = analyzed
            .producer_batches
            .iter()
            .map(|b| {
                let base = next;
                next += b.offset_delta as i64 + 1;
                PlacedBatch {
                    batch: *b,
                    base_offset: base,
                    last_offset: next - 1,
                }
            })
            .collect();
        let producer_append = match self.prepare_producer_append(
            &placed,
            origin,
            transaction_version,
            verification_guard,
        )? {
            Prepared::Append(a) => a,
            Prepared::Duplicate(dup) => {
                // A retry of a batch already in the log: answer with where it went.
                // Kafka answers the duplicate's timestamp as its log append time.
                return Ok(LogAppendInfo {
                    first_offset: dup.first_offset(),
                    last_offset: dup.last_offset,
                    max_timestamp: dup.timestamp,
                    log_append_time: dup.timestamp,
                    num_messages: 0,
                    valid_bytes: 0,
                    log_start_offset: self.log_start_offset,
                });
            }
        };
        let log_append = validated.header_log_append_time;
        // The one copy of the batch: the request's bytes are shared, the header is patched.
        let mut buf = match validated.rebuilt {
            Some(b) => b,
            None => records.to_vec(),
        };
        let first_offset = self.log_end_offset;
        let size = buf.len();
        let delta = BatchView::parse(&buf)
            .map_err(batch_error)?
            .last_offset_delta();
        set_base_offset(&mut buf, first_offset);
        set_partition_leader_epoch(&mut buf, leader_epoch);
        set_max_timestamp(&mut buf, log_append, validated.header_max_timestamp);
        let max_timestamp = validated.max_timestamp;
        debug_assert_eq!(size, buf.len());
        let next = first_offset + delta as i64 + 1;
        let last_offset = next - 1;
        self.maybe_roll(buf.len(), max_timestamp, last_offset, first_offset, now_ms)?;
        self.active_mut().append(&buf)?;
        self.log_end_offset = next;
        self.publish_offsets();
        if self.leader_epoch_cache.assign(leader_epoch, first_offset) {
            self.leader_epoch_cache.flush()?;
        }
        let active = self.active().base_offset();
        self.apply_producer_append(&producer_append, active, next, true)?;
        self.maybe_flush()?;
        Ok(LogAppendInfo {
            first_offset,
            last_offset,
            max_timestamp,
            log_append_time: if log_append { now_ms } else { -1 },
            num_messages: analyzed.num_messages,
            valid_bytes: buf.len(),
            log_start_offset: self.log_start_offset,
        })
    }

    /// Follower append: offsets and epochs as the leader assigned them. The first batch must
    /// start at or after the log end offset and batches must be in offset order.
    pub fn append_as_follower(
        &mut self,
        records: &[u8],
        now_ms: i64,
    ) -> Result<LogAppendInfo, StorageError> {
        let a = self.analyze(
            records,
            AppendOrigin::Replication,
            Some(self.log_end_offset),
        )?;
        if a.batches == 0 {
            return Ok(self.empty_append_info());
        }
        let mut placed = Vec::with_capacity(a.batches);
        for (b, view) in a.producer_batches.iter().zip(BatchIter::new(records)) {
            let view = view.map_err(batch_error)?;
            placed.push(PlacedBatch {
                batch: *b,
                base_offset: view.base_offset(),
                last_offset: view.last_offset(),
            });
        }
        // Replication only logs fenced epochs; as Kafka, it still refuses a non-transactional
        // batch inside an open transaction (the leader never wrote one).
        let producer_append = match self.prepare_producer_append(
            &placed,
            AppendOrigin::Replication,
            0,
            VerificationGuard::SENTINEL,
        )? {
            Prepared::Append(p) => p,
            Prepared::Duplicate(_) => {
                unreachable!("replication is never checked for duplicates")
            }
        };
        self.maybe_roll(
            records.len(),
            a.max_timestamp,
            a.last_offset,
            a.first_offset,
            now_ms,
        )?;
        self.active_mut().append(records)?;
        self.log_end_offset = a.last_offset + 1;
        self.publish_offsets();
        let mut iter = BatchIter::new(records);
        let mut epochs_changed = false;
        for view in (&mut iter).flatten() {
            epochs_changed |= self
                .leader_epoch_cache
                .assign(view.partition_leader_epoch(), view.base_offset());
        }
        if epochs_changed {
            self.leader_epoch_cache.flush()?;
        }
        let active = self.active().base_offset();
        self.apply_producer_append(&producer_append, active, self.log_end_offset, true)?;
        self.maybe_flush()?;
        Ok(LogAppendInfo {
            first_offset: a.first_offset,
            last_offset: a.last_offset,
            max_timestamp: a.max_timestamp,
            log_append_time: -1,
            num_messages: a.num_messages,
            valid_bytes: records.len(),
            log_start_offset: self.log_start_offset,
        })
    }

    fn maybe_roll(
        &mut self,
        size: usize,
        max_timestamp: i64,
        max_offset: i64,
        first_offset: i64,
        now_ms: i64,
    ) -> Result<(), StorageError> {
        let roll = self
            .active()
            .should_roll(&self.config, size, max_timestamp, max_offset, now_ms)
            || (self.active().size() == 0
                && max_offset - self.active().base_offset() > i32::MAX as i64);
        if roll {
            self.roll_at(first_offset.max(self.log_end_offset), now_ms)?;
        }
        Ok(())
    }

    /// Whether a leader append of `size` bytes at `leader_epoch` now may wait on the disk for
    /// more than a write to the page cache: a roll (new files, the producer-state snapshot's
    /// fsync), a new epoch's checkpoint (fsynced), or a `flush.messages` flush. Conservative,
    /// as the records are not looked at: `size` stands in for their count, and now for their
    /// timestamps. The broker runs the appends that may wait off its async workers; the others
    /// run in place, which saves the hand-off (a quarter of a Java producer's throughput).
    pub fn append_may_sync(&self, size: usize, leader_epoch: i32, now_ms: i64) -> bool {
        let last = self.log_end_offset.saturating_add(size as i64);
        self.active()
            .should_roll(&self.config, size, now_ms, last, now_ms)
            || self.leader_epoch_cache.latest_epoch() != Some(leader_epoch)
            || last - self.recovery_point >= self.config.flush_interval_messages
    }

    /// Starts a new active segment at `base`. An empty active segment is replaced rather than
    /// left behind.
    fn roll_at(&mut self, base: i64, now_ms: i64) -> Result<(), StorageError> {
        let active_base = self.active().base_offset();
        let replace_empty = self.active().size() == 0;
        if replace_empty && active_base == base {
            return Ok(());
        }
        if !replace_empty {
            self.active_mut().on_become_inactive()?;
        }
        // The new segment goes in before the empty one goes out (their bases differ, so no
        // file name is shared): a failed rename below must not leave the log without one.
        let seg = LogSegment::create(&self.cache, &self.dir, base, &self.config, now_ms)?;
        self.segments.insert(base, seg);
        // Empty, so readers still holding it read nothing from it.
        let replaced = if replace_empty {
            self.segments.remove(&active_base)
        } else {
            None
        };
        self.publish_segments();
        self.dir_dirty = true;
        if self.segments.len() == 1 {
            self.log_start_offset = self.log_start_offset.max(base);
            self.publish_offsets();
        }
        if let Some(old) = replaced {
            self.remove_segment(old, now_ms)?;
        }
        // Kafka snapshots producer state at each roll, so recovery replays at most one segment.
        if self.producer_state.map_end_offset() == base {
            self.producer_state.take_snapshot()?;
        }
        Ok(())
    }

    /// Starts a new active segment at the log end offset (no-op if the active one is empty).
    pub fn roll(&mut self, now_ms: i64) -> Result<(), StorageError> {
        self.roll_at(self.log_end_offset, now_ms)
    }

    fn maybe_flush(&mut self) -> Result<(), StorageError> {
        if self.log_end_offset - self.recovery_point >= self.config.flush_interval_messages {
            self.flush()?;
        }
        Ok(())
    }

    /// Whole batches starting with the one containing `start_offset`, up to `max_bytes`, never
    /// including a batch whose base offset is >= `max_offset`. With `min_one_message` a first
    /// batch larger than `max_bytes` is returned whole (Kafka's first-batch exception).
    /// [`LogReader::read`] answers the same without the caller holding the log.
    pub fn read(
        &self,
        start_offset: i64,
        max_bytes: usize,
        max_offset: i64,
        min_one_message: bool,
    ) -> Result<FetchDataInfo, StorageError> {
        // The published snapshot is current: only `&mut self` changes it.
        let segments = self.shared.snapshot();
        crate::reader::read_segments(
            &segments,
            self.log_start_offset,
            self.log_end_offset,
            start_offset,
            max_bytes,
            max_offset,
            min_one_message,
            false,
        )
    }

    /// A handle that reads this log without `&self` (so without the broker's lock on it), for
    /// as long as the log lives. Clone it freely.
    pub fn reader(&self) -> LogReader {
        LogReader::new(self.shared.clone())
    }

    /// Makes the segment list visible to readers (after any segment came or went).
    fn publish_segments(&self) {
        self.shared.publish_segments(Arc::new(
            self.segments.values().map(|s| s.data().clone()).collect(),
        ));
    }

    /// Makes the log start and end offsets visible to readers (after the bytes are written).
    fn publish_offsets(&self) {
        self.shared
            .publish_offsets(self.log_start_offset, self.log_end_offset);
    }

    /// ListOffsets by timestamp: the first offset at or after the log start whose record
    /// timestamp is >= `ts`. Also answers Kafka's special timestamps: -1 (latest: the log end
    /// offset), -2 (earliest: the log start offset) and -3 (max timestamp). The leader epoch is
    /// the epoch stamped in the batch holding the record (`None` for -1/-2).
    pub fn fetch_offset_by_timestamp(
        &self,
        ts: i64,
    ) -> Result<Option<TimestampAndOffset>, StorageError> {
        match ts {
            LATEST_TIMESTAMP | EARLIEST_TIMESTAMP => {
                let offset = if ts == LATEST_TIMESTAMP {
                    self.log_end_offset
                } else {
                    self.log_start_offset
                };
                return Ok(Some(TimestampAndOffset {
                    timestamp: -1,
                    offset,
                    leader_epoch: None,
                }));
            }
            MAX_TIMESTAMP => return self.max_timestamp_and_offset(),
            _ => {}
        }
        for seg in self.segments.values() {
            if seg.max_timestamp().timestamp < ts || seg.next_offset() <= self.log_start_offset {
                continue;
            }
            if let Some(found) = seg.find_offset_by_timestamp(ts, self.log_start_offset)? {
                return Ok(Some(found));
            }
        }
        Ok(None)
    }

    /// ListOffsets MAX_TIMESTAMP: the record with the largest timestamp (the first such).
    pub fn max_timestamp_and_offset(&self) -> Result<Option<TimestampAndOffset>, StorageError> {
        let mut best: Option<&LogSegment> = None;
        for seg in self.segments.values() {
            if best.is_none_or(|b| seg.max_timestamp().timestamp > b.max_timestamp().timestamp) {
                best = Some(seg);
            }
        }
        match best {
            Some(seg) => seg.max_timestamp_and_offset(),
            None => Ok(None),
        }
    }

    /// Makes the epoch cache agree with the recovered log: entries past the log end go (a cut
    /// tail), and a missing checkpoint is rebuilt from the batch headers.
    fn load_leader_epochs(&mut self, found: bool) -> Result<(), StorageError> {
        let mut changed = false;
        if !found {
            for seg in self.segments.values() {
                let mut pos = 0;
                while pos < seg.size() {
                    let h = seg.read_header(pos)?;
                    changed |= self
                        .leader_epoch_cache
                        .assign(h.partition_leader_epoch, h.base_offset);
                    pos += h.size as u64;
                }
            }
        }
        changed |= self
            .leader_epoch_cache
            .truncate_from_end(self.log_end_offset);
        changed |= self
            .leader_epoch_cache
            .truncate_from_start(self.log_start_offset);
        if changed || !found {
            self.leader_epoch_cache.flush()?;
        }
        Ok(())
    }

    /// The newest leader epoch in the log, if any batch carries one.
    pub fn latest_epoch(&self) -> Option<i32> {
        self.leader_epoch_cache.latest_epoch()
    }

    /// OffsetForLeaderEpoch: the largest epoch <= `epoch` and the offset where it ends.
    pub fn end_offset_for_epoch(&self, epoch: i32) -> (i32, i64) {
        self.leader_epoch_cache
            .end_offset_for(epoch, self.log_end_offset)
    }

    pub fn leader_epoch_cache(&self) -> &LeaderEpochFileCache {
        &self.leader_epoch_cache
    }

    /// Drops the state of producers idle for `producer.id.expiration.ms`.
    pub fn remove_expired_producers(&mut self, now_ms: i64) -> usize {
        self.producer_state.remove_expired_producers(now_ms)
    }

    /// The partition's producer state (for DescribeProducers and tests).
    pub fn producer_state(&self) -> &ProducerStateManager {
        &self.producer_state
    }

    /// Fsyncs every segment that may hold unflushed data (and the directory, if segments came
    /// or went), then moves the recovery point to the log end offset.
    pub fn flush(&mut self) -> Result<(), StorageError> {
        let floor = self
            .segments
            .range(..=self.recovery_point)
            .next_back()
            .map_or(i64::MIN, |(b, _)| *b);
        for seg in self.segments.range(floor..).map(|(_, s)| s) {
            seg.flush()?;
        }
        if self.dir_dirty {
            sync_dir(&self.dir)?;
            self.dir_dirty = false;
        }
        self.recovery_point = self.log_end_offset;
        Ok(())
    }

    /// Flushes and leaves the files as Kafka's clean shutdown does (the active segment's largest
    /// timestamp in its time index). Index files are never preallocated, so nothing to trim.
    pub fn close(&mut self) -> Result<(), StorageError> {
        self.active_mut().close()?;
        self.flush()?;
        // With a snapshot at the log end, the next start replays nothing.
        self.producer_state.take_snapshot()
    }

    pub fn update_config(&mut self, config: LogConfig) {
        self.producer_state
            .set_expiration_ms(config.producer_id_expiration_ms);
        self.producer_state
            .set_verification_enabled(config.transaction_verification_enabled);
        for seg in self.segments.values_mut() {
            seg.update_config(&config);
        }
        self.config = config;
    }

    /// Removes the partition directory (DeleteTopics).
    /// Readers still holding the log get errors from now on, and its descriptors are closed
    /// now rather than when the last reader goes (they would keep the unlinked files' space).
    pub fn delete(self) -> Result<(), StorageError> {
        let dir = self.dir.clone();
        {
            let _truncating = self.shared.begin_truncation();
            self.shared.publish_segments(Arc::new(Vec::new()));
            for seg in self.segments.values() {
                seg.mark_removed();
                seg.close_handles();
            }
        }
        drop(self);
        std::fs::remove_dir_all(&dir)?;
        if let Some(parent) = dir.parent() {
            sync_dir(parent)?;
        }
        Ok(())
    }

    fn active(&self) -> &LogSegment {
        self.segments.values().next_back().expect("never empty")
    }

    fn active_mut(&mut self) -> &mut LogSegment {
        self.segments.values_mut().next_back().expect("never empty")
    }

    /// The segments, oldest first (the last is the active one).
    pub fn segments(&self) -> impl Iterator<Item = &LogSegment> {
        self.segments.values()
    }

    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset
    }
    pub fn log_end_offset(&self) -> i64 {
        self.log_end_offset
    }
    pub fn recovery_point(&self) -> i64 {
        self.recovery_point
    }
    pub fn config(&self) -> &LogConfig {
        &self.config
    }
    pub fn dir(&self) -> &Path {
        &self.dir
    }
    pub fn size_in_bytes(&self) -> u64 {
        self.segments.values().map(|s| s.size()).sum()
    }
    pub fn num_segments(&self) -> usize {
        self.segments.len()
    }
}

#[path = "cleaner/log_clean.rs"]
mod clean;
#[path = "log_retention.rs"]
mod retention;
#[path = "log_truncate.rs"]
mod truncate;
#[path = "log_txn.rs"]
mod txn;
pub use retention::remove_deleted_files;

#[cfg(test)]
#[path = "log_tests.rs"]
mod tests;

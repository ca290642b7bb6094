//! The broker's log cleaner: Kafka's `LogCleaner` (the cleaner threads) and
//! `LogCleanerManager` (which log is cleaned next, which are being cleaned, and each log dir's
//! `cleaner-offset-checkpoint`).
//!
//! What one clean does to a log is the storage crate's (`strom_storage::cleaner`); this module
//! decides when and on which partition, and keeps the bookkeeping:
//!
//! - `log.cleaner.threads` threads (plain OS threads: a clean is file I/O and hashing, never
//!   async). Each owns an offset map of `log.cleaner.dedupe.buffer.size / threads` bytes, the
//!   cap on the cleaner's memory, and all share one `log.cleaner.io.max.bytes.per.second`
//!   throttle. A thread with nothing to clean sleeps `log.cleaner.backoff.ms`.
//! - The filthiest log goes first (Kafka's `grabFilthiestCompactedLog`): among compacted
//!   partitions not being cleaned, those whose cleanable ratio passes `min.cleanable.dirty.ratio`
//!   or that hold a record older than `max.compaction.lag.ms`, the one with the highest ratio.
//! - A clean reads and writes files without the partition's lock: produce and fetch of the
//!   partition go on. Only taking the snapshot of what to clean and swapping each cleaned group
//!   in take the lock, briefly (`partition/cleaning.rs`); a swap is refused when the log changed
//!   underneath (truncation, retention), and the clean ends there.
//! - After a clean the partition's first dirty offset goes into its dir's
//!   `cleaner-offset-checkpoint` (Kafka's format), so a restart does not re-clean what is clean.
//!   A deleted partition's clean is aborted and awaited before its directory goes, and its entry
//!   leaves the checkpoint.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use strom_storage::checkpoint::OffsetCheckpointFile;
use strom_storage::cleaner::{LogToClean, OffsetMap, Throttler};

use crate::config::{parse, ConfigError};
use crate::partition::Partition;
use crate::replica_manager::{ReplicaManager, TopicPartition};

/// Kafka's `LogCleanerManager.offsetCheckpointFile`.
pub const CLEANER_OFFSET_CHECKPOINT: &str = "cleaner-offset-checkpoint";

/// The broker's `log.cleaner.*` settings (Kafka's `CleanerConfig`).
#[derive(Debug, Clone, PartialEq)]
pub struct CleanerConfig {
    /// `log.cleaner.enable`
    pub enable: bool,
    /// `log.cleaner.threads`
    pub threads: usize,
    /// `log.cleaner.dedupe.buffer.size`: the offset maps' memory, all threads together.
    pub dedupe_buffer_size: u64,
    /// `log.cleaner.io.buffer.load.factor`: how full an offset map may get.
    pub io_buffer_load_factor: f64,
    /// `log.cleaner.io.max.bytes.per.second`: read + write rate of all threads together.
    pub io_max_bytes_per_second: f64,
    /// `log.cleaner.backoff.ms`: a thread's sleep when no log needs cleaning.
    pub backoff_ms: u64,
}

impl Default for CleanerConfig {
    fn default() -> Self {
        Self {
            enable: true,
            threads: 1,
            dedupe_buffer_size: 128 * 1024 * 1024,
            io_buffer_load_factor: 0.9,
            io_max_bytes_per_second: f64::MAX,
            backoff_ms: 15_000,
        }
    }
}

impl CleanerConfig {
    /// Reads the `log.cleaner.*` keys, with Kafka's defaults and bounds.
    pub fn from_props(props: &BTreeMap<String, String>) -> Result<Self, ConfigError> {
        let d = Self::default();
        let c = Self {
            enable: parse(props, "log.cleaner.enable", d.enable)?,
            threads: parse(props, "log.cleaner.threads", d.threads)?,
            dedupe_buffer_size: parse(
                props,
                "log.cleaner.dedupe.buffer.size",
                d.dedupe_buffer_size,
            )?,
            io_buffer_load_factor: parse(
                props,
                "log.cleaner.io.buffer.load.factor",
                d.io_buffer_load_factor,
            )?,
            io_max_bytes_per_second: parse(
                props,
                "log.cleaner.io.max.bytes.per.second",
                d.io_max_bytes_per_second,
            )?,
            backoff_ms: parse(props, "log.cleaner.backoff.ms", d.backoff_ms)?,
        };
        let bad = |key: &str, value: String, why: &str| ConfigError::InvalidValue {
            key: key.into(),
            value,
            why: why.into(),
        };
        if c.threads == 0 {
            return Err(bad(
                "log.cleaner.threads",
                "0".into(),
                "Value must be at least 1",
            ));
        }
        // Kafka's lower bound: each thread needs room for a real map.
        if c.dedupe_buffer_size < 1024 * 1024 * c.threads as u64 {
            return Err(bad(
                "log.cleaner.dedupe.buffer.size",
                c.dedupe_buffer_size.to_string(),
                "Value must be at least 1 MiB per cleaner thread",
            ));
        }
        if !(c.io_buffer_load_factor > 0.0 && c.io_buffer_load_factor <= 1.0) {
            return Err(bad(
                "log.cleaner.io.buffer.load.factor",
                c.io_buffer_load_factor.to_string(),
                "Value must be in (0, 1]",
            ));
        }
        if c.io_max_bytes_per_second <= 0.0 {
            return Err(bad(
                "log.cleaner.io.max.bytes.per.second",
                c.io_max_bytes_per_second.to_string(),
                "Value must be positive",
            ));
        }
        Ok(c)
    }

    /// Each thread's offset map: an equal share of the dedupe buffer (Kafka caps it below 2 GiB).
    fn map_bytes_per_thread(&self) -> usize {
        (self.dedupe_buffer_size / self.threads as u64).min(i32::MAX as u64) as usize
    }
}

#[derive(Default)]
struct ManagerState {
    /// The partitions being cleaned, each with the flag that stops its clean (Kafka's
    /// `LogCleaningInProgress` / `LogCleaningAborted`): set by `abort_cleaning` for a partition
    /// being deleted and at shutdown; the clean sees it at its next chunk.
    in_progress: HashMap<TopicPartition, Arc<AtomicBool>>,
    /// The first dirty offset of each cleaned partition, per log dir (the checkpoint files).
    checkpoints: HashMap<PathBuf, HashMap<TopicPartition, i64>>,
    /// Partitions whose last clean failed with an error: skipped until the broker restarts, as
    /// Kafka marks them uncleanable, so one bad log does not stop the others' cleaning.
    uncleanable: HashSet<TopicPartition>,
}

/// Kafka's `LogCleanerManager`: the cleaning state of every partition and the checkpoints.
pub struct LogCleanerManager {
    state: Mutex<ManagerState>,
    /// Signalled when a partition leaves `in_progress`.
    done: Condvar,
}

/// What a cleaner thread picked.
struct Grabbed {
    partition: Arc<Partition>,
    key: TopicPartition,
    dir: PathBuf,
    to_clean: LogToClean,
    abort: Arc<AtomicBool>,
}

impl LogCleanerManager {
    /// Reads every log dir's `cleaner-offset-checkpoint` (a missing file is empty; an unreadable
    /// one is logged and treated as empty: the cleaner then starts over from the log start).
    pub fn open(dirs: &[PathBuf]) -> Self {
        let mut checkpoints = HashMap::new();
        for dir in dirs {
            let file = OffsetCheckpointFile::new(dir.join(CLEANER_OFFSET_CHECKPOINT));
            let offsets = file.read().unwrap_or_else(|e| {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot read the cleaner checkpoint; starting over");
                HashMap::new()
            });
            checkpoints.insert(dir.clone(), offsets);
        }
        Self {
            state: Mutex::new(ManagerState {
                checkpoints,
                ..Default::default()
            }),
            done: Condvar::new(),
        }
    }

    /// The checkpointed first dirty offset of a partition.
    pub fn checkpointed(&self, dir: &PathBuf, key: &TopicPartition) -> Option<i64> {
        self.state.lock().checkpoints.get(dir)?.get(key).copied()
    }

    /// Kafka's `abortCleaning`: stops a running clean of the partition (at its next chunk) and
    /// waits for it, then forgets the partition's checkpoint entry. For a partition about to be
    /// deleted: its files must not be written while its directory goes.
    pub fn abort_cleaning(&self, key: &TopicPartition, dir: Option<&PathBuf>) {
        let mut st = self.state.lock();
        if let Some(flag) = st.in_progress.get(key) {
            flag.store(true, Ordering::Release);
        }
        // A clean stops at its next chunk; the bound only guards against a stuck file system.
        let deadline = Instant::now() + Duration::from_secs(60);
        while st.in_progress.contains_key(key) {
            if self.done.wait_until(&mut st, deadline).timed_out() {
                tracing::warn!(topic = %key.0, partition = key.1, "clean did not stop within 60 s");
                break;
            }
        }
        st.uncleanable.remove(key);
        if let Some(dir) = dir {
            let changed = st
                .checkpoints
                .get_mut(dir)
                .is_some_and(|m| m.remove(key).is_some());
            if changed {
                Self::write_checkpoint(&st, dir);
            }
        }
    }

    /// Stops every running clean at its next chunk (shutdown).
    fn abort_all(&self) {
        for flag in self.state.lock().in_progress.values() {
            flag.store(true, Ordering::Release);
        }
    }

    /// Kafka's `grabFilthiestCompactedLog`: picks the log to clean and marks it in progress.
    fn grab_filthiest(&self, rm: &ReplicaManager, now_ms: i64) -> Option<Grabbed> {
        // The partitions' own locks are taken before, not under, this manager's.
        let compacted: Vec<Arc<Partition>> =
            rm.all().into_iter().filter(|p| p.is_compacted()).collect();
        let candidates: Vec<(Arc<Partition>, TopicPartition, PathBuf)> = {
            let st = self.state.lock();
            compacted
                .into_iter()
                .filter_map(|p| {
                    let key = (p.topic.clone(), p.index);
                    if st.in_progress.contains_key(&key) || st.uncleanable.contains(&key) {
                        return None;
                    }
                    let dir = rm.log_dir_path(&key)?;
                    Some((p, key, dir))
                })
                .collect()
        };
        let mut best: Option<(Arc<Partition>, TopicPartition, PathBuf, LogToClean)> = None;
        for (partition, key, dir) in candidates {
            let checkpointed = self.checkpointed(&dir, &key);
            let Some(to_clean) = partition.cleanable(checkpointed, now_ms) else {
                continue;
            };
            if to_clean.reset_checkpoint {
                // Kafka's `forceUpdateCheckpoint`: the checkpointed offset is out of the log's
                // range (the log start passed it, or the log was truncated below it).
                self.update_checkpoint(&dir, &key, to_clean.first_dirty_offset);
            }
            if !to_clean.should_clean() {
                continue;
            }
            if best
                .as_ref()
                .is_none_or(|b| to_clean.cleanable_ratio > b.3.cleanable_ratio)
            {
                best = Some((partition, key, dir, to_clean));
            }
        }
        let (partition, key, dir, to_clean) = best?;
        let mut st = self.state.lock();
        // Deleted or grabbed by another thread since the scan.
        if st.in_progress.contains_key(&key) || partition.is_removed() {
            return None;
        }
        let abort = Arc::new(AtomicBool::new(false));
        st.in_progress.insert(key.clone(), abort.clone());
        Some(Grabbed {
            partition,
            key,
            dir,
            to_clean,
            abort,
        })
    }

    /// Kafka's `doneCleaning`: records the new first dirty offset (when the clean completed)
    /// and releases the partition.
    fn done_cleaning(&self, g: &Grabbed, end_offset: Option<i64>, failed: bool) {
        let mut st = self.state.lock();
        st.in_progress.remove(&g.key);
        let aborted = g.abort.load(Ordering::Acquire);
        if failed {
            st.uncleanable.insert(g.key.clone());
        }
        if let (Some(end), false) = (end_offset, aborted) {
            st.checkpoints
                .entry(g.dir.clone())
                .or_default()
                .insert(g.key.clone(), end);
            Self::write_checkpoint(&st, &g.dir);
        }
        self.done.notify_all();
    }

    fn update_checkpoint(&self, dir: &PathBuf, key: &TopicPartition, offset: i64) {
        let mut st = self.state.lock();
        st.checkpoints
            .entry(dir.clone())
            .or_default()
            .insert(key.clone(), offset);
        Self::write_checkpoint(&st, dir);
    }

    fn write_checkpoint(st: &ManagerState, dir: &PathBuf) {
        let empty = HashMap::new();
        let offsets = st.checkpoints.get(dir).unwrap_or(&empty);
        let file = OffsetCheckpointFile::new(dir.join(CLEANER_OFFSET_CHECKPOINT));
        if let Err(e) = file.write(offsets) {
            // The next clean starts from an older first dirty offset: more work, no harm.
            tracing::warn!(dir = %dir.display(), error = %e, "cannot write the cleaner checkpoint");
        }
    }
}

/// Kafka's `LogCleaner`: the cleaner threads.
pub struct LogCleaner {
    stop: Arc<(Mutex<bool>, Condvar)>,
    threads: Vec<std::thread::JoinHandle<()>>,
    manager: Arc<LogCleanerManager>,
}

impl LogCleaner {
    /// Starts `log.cleaner.threads` threads (none when `log.cleaner.enable` is false).
    pub fn start(config: &CleanerConfig, rm: Arc<ReplicaManager>) -> Self {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let manager = rm.cleaner_manager().clone();
        let mut threads = Vec::new();
        if config.enable {
            let throttler = Arc::new(Throttler::new(config.io_max_bytes_per_second));
            for i in 0..config.threads {
                let (rm, stop, throttler, config) =
                    (rm.clone(), stop.clone(), throttler.clone(), config.clone());
                let spawned = std::thread::Builder::new()
                    .name(format!("kafka-log-cleaner-thread-{i}"))
                    .spawn(move || cleaner_thread(config, rm, throttler, stop));
                match spawned {
                    Ok(h) => threads.push(h),
                    Err(e) => tracing::error!(error = %e, "cannot start a log cleaner thread"),
                }
            }
        }
        Self {
            stop,
            threads,
            manager,
        }
    }

    /// Stops the threads; a running clean stops at its next chunk, leaving the log as it was
    /// or with the groups swapped so far (its checkpoint is not advanced).
    pub fn shutdown(&mut self) {
        *self.stop.0.lock() = true;
        self.manager.abort_all();
        self.stop.1.notify_all();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for LogCleaner {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn cleaner_thread(
    config: CleanerConfig,
    rm: Arc<ReplicaManager>,
    throttler: Arc<Throttler>,
    stop: Arc<(Mutex<bool>, Condvar)>,
) {
    // The map is allocated on first use: a broker without compacted topics never pays for it.
    let mut map: Option<OffsetMap> = None;
    let manager = rm.cleaner_manager().clone();
    loop {
        if *stop.0.lock() {
            return;
        }
        let now = crate::now_ms();
        let cleaned = match manager.grab_filthiest(&rm, now) {
            Some(g) => {
                let map = map.get_or_insert_with(|| {
                    OffsetMap::with_load_factor(
                        config.map_bytes_per_thread(),
                        config.io_buffer_load_factor,
                    )
                });
                clean_one(&rm, &manager, g, map, &throttler);
                true
            }
            None => false,
        };
        if !cleaned {
            let mut stopped = stop.0.lock();
            if !*stopped {
                stop.1.wait_for(
                    &mut stopped,
                    Duration::from_millis(config.backoff_ms.max(1)),
                );
            }
        }
    }
}

/// Kafka's `cleanLog`: one clean of one partition, with its bookkeeping.
fn clean_one(
    rm: &ReplicaManager,
    manager: &LogCleanerManager,
    g: Grabbed,
    map: &mut OffsetMap,
    throttler: &Throttler,
) {
    let started = Instant::now();
    let mut task = g.partition.prepare_clean(&g.to_clean);
    task.set_abort_flag(g.abort.clone());
    let partition = g.partition.clone();
    let mut swap = move |group| partition.replace_cleaned(group);
    let result = task.run(map, throttler, crate::now_ms(), &mut swap);
    match result {
        Ok(stats) => {
            let completed = !stats.aborted;
            tracing::info!(
                topic = %g.key.0, partition = g.key.1,
                first_dirty = g.to_clean.first_dirty_offset,
                end_offset = stats.end_offset,
                read_bytes = stats.bytes_read, written_bytes = stats.bytes_written,
                read_messages = stats.messages_read, written_messages = stats.messages_written,
                elapsed_ms = started.elapsed().as_millis() as u64,
                completed,
                "cleaned log"
            );
            manager.done_cleaning(&g, completed.then_some(stats.end_offset), false);
        }
        Err(e) => {
            manager.done_cleaning(&g, None, true);
            if matches!(e, strom_storage::StorageError::Io(_)) {
                // The files may be half swapped: the log in memory no longer matches the disk,
                // and only a reopen (the recovery of `.swap` files) settles it. Kafka takes the
                // log dir offline; Strom takes the replica offline until the restart.
                rm.mark_offline(&g.key.0, g.key.1, g.partition.topic_id, &e);
            } else {
                tracing::error!(topic = %g.key.0, partition = g.key.1, error = %e,
                    "log cleaning failed; the partition is marked uncleanable until restart");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn cleaner_config_defaults_and_bounds() {
        let c = CleanerConfig::from_props(&BTreeMap::new()).unwrap();
        assert_eq!(c, CleanerConfig::default());
        assert_eq!(c.map_bytes_per_thread(), 128 * 1024 * 1024);
        let c = CleanerConfig::from_props(&props(&[
            ("log.cleaner.threads", "4"),
            ("log.cleaner.dedupe.buffer.size", "8388608"),
        ]))
        .unwrap();
        assert_eq!(c.map_bytes_per_thread(), 2 * 1024 * 1024);
        assert!(CleanerConfig::from_props(&props(&[("log.cleaner.threads", "0")])).is_err());
        assert!(
            CleanerConfig::from_props(&props(&[("log.cleaner.dedupe.buffer.size", "1000")]))
                .is_err()
        );
        assert!(CleanerConfig::from_props(&props(&[("log.cleaner.enable", "maybe")])).is_err());
    }

    #[test]
    fn checkpoints_are_read_written_and_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_path_buf();
        let m = LogCleanerManager::open(std::slice::from_ref(&path));
        let key: TopicPartition = ("t".into(), 0);
        assert_eq!(m.checkpointed(&path, &key), None);
        {
            let mut st = m.state.lock();
            st.checkpoints
                .entry(path.clone())
                .or_default()
                .insert(key.clone(), 42);
            LogCleanerManager::write_checkpoint(&st, &path);
        }
        let again = LogCleanerManager::open(std::slice::from_ref(&path));
        assert_eq!(again.checkpointed(&path, &key), Some(42));
        let text = std::fs::read_to_string(path.join(CLEANER_OFFSET_CHECKPOINT)).unwrap();
        assert_eq!(text, "0\n1\nt 0 42\n");
        again.abort_cleaning(&key, Some(&path));
        assert_eq!(again.checkpointed(&path, &key), None);
        let reopened = LogCleanerManager::open(std::slice::from_ref(&path));
        assert_eq!(reopened.checkpointed(&path, &key), None);
    }
}

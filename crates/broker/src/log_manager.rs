//! The log directories (Kafka's `LogManager`): `log.dirs`, each with its own `meta.properties`
//! (`directory.id`), `.lock`, offset checkpoints and clean-shutdown marker; where each
//! partition's log lives (found at start-up in whichever dir holds it, new ones placed in the
//! dir with the fewest partitions, as Kafka's `nextLogDirs`); and the open-files limit.
//!
//! Failures: a dir that cannot be created, locked or formatted at start-up stops the broker
//! (Kafka marks it offline and goes on with the others; Strom does not serve a subset of its
//! dirs yet). A dir whose checkpoints cannot be written later goes offline, as Kafka's
//! `LogDirFailureChannel` takes it: no new partition is placed there and the replica manager
//! makes its replicas offline. A partition whose log cannot be opened or written is made
//! offline by the replica manager, replica by replica (see `directory_assignments`).

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use parking_lot::Mutex;
use strom_storage::checkpoint::OffsetCheckpointFile;
use strom_storage::{parse_partition_dir_name, StorageError, CLEAN_SHUTDOWN_FILE};
use uuid::Uuid;

use crate::meta_properties::read_directory_id;
use crate::replica_manager::TopicPartition;
use crate::server::ServerError;

const RECOVERY_POINT_CHECKPOINT: &str = "recovery-point-offset-checkpoint";
const LOG_START_OFFSET_CHECKPOINT: &str = "log-start-offset-checkpoint";
const REPLICATION_OFFSET_CHECKPOINT: &str = "replication-offset-checkpoint";

/// Raises the soft open-files limit to the hard limit (each partition holds several files open)
/// and logs both. Failure to raise it is logged, not fatal.
pub fn raise_open_files_limit() -> Option<u64> {
    let before = rlimit::getrlimit(rlimit::Resource::NOFILE).ok();
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(soft) => {
            tracing::info!(
                soft_before = before.map(|b| b.0),
                soft = soft,
                hard = before.map(|b| b.1),
                "open files limit (RLIMIT_NOFILE): soft limit set to the hard limit"
            );
            Some(soft)
        }
        Err(e) => {
            tracing::warn!(error = %e, limit = ?before, "cannot raise the open files limit");
            before.map(|b| b.0)
        }
    }
}

fn dir_error(dir: &Path) -> impl Fn(std::io::Error) -> ServerError + '_ {
    move |source| ServerError::DataDir {
        path: dir.display().to_string(),
        source,
    }
}

/// Creates every dir and takes its `.lock` (flock, held while the returned files live).
pub fn lock_dirs(dirs: &[PathBuf]) -> Result<Vec<File>, ServerError> {
    let mut locks = Vec::with_capacity(dirs.len());
    for dir in dirs {
        std::fs::create_dir_all(dir).map_err(dir_error(dir))?;
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(".lock"))
            .map_err(dir_error(dir))?;
        if lock.try_lock().is_err() {
            return Err(ServerError::DataDirLocked(dir.display().to_string()));
        }
        locks.push(lock);
    }
    Ok(locks)
}

/// The broker epoch a clean shutdown wrote into a dir's `.kafka_cleanshutdown` (Kafka's
/// `CleanShutdownFileHandler`: `{"version":0,"brokerEpoch":N}`); `None` when the file is
/// missing or says nothing (an empty marker, as earlier versions of Strom wrote).
fn read_clean_shutdown_epoch(dir: &Path) -> Option<i64> {
    #[derive(serde::Deserialize)]
    struct Content {
        #[serde(rename = "brokerEpoch")]
        broker_epoch: Option<i64>,
    }
    let text = std::fs::read(dir.join(CLEAN_SHUTDOWN_FILE)).ok()?;
    serde_json::from_slice::<Content>(&text).ok()?.broker_epoch
}

/// One log dir and what it held when the broker started.
pub struct LogDir {
    pub path: PathBuf,
    pub directory_id: Uuid,
    /// The previous run left this dir's clean-shutdown marker.
    pub had_clean_shutdown: bool,
}

/// The set of log dirs, the checkpoints read from them at start-up and where each partition
/// lives.
pub struct LogManager {
    dirs: Vec<LogDir>,
    /// The broker epoch every dir's clean-shutdown marker named, if they all did and agreed
    /// (Kafka's `readBrokerEpochFromCleanShutdownFiles`): what the broker registers as its
    /// previous broker epoch.
    previous_broker_epoch: Option<i64>,
    recovery_points: HashMap<TopicPartition, i64>,
    log_start_offsets: HashMap<TopicPartition, i64>,
    high_watermarks: HashMap<TopicPartition, i64>,
    /// Partition -> index into `dirs`: found on disk at start-up, or chosen for a new one.
    placement: Mutex<HashMap<TopicPartition, usize>>,
    /// Indexes of the dirs that failed.
    offline_dirs: Mutex<std::collections::BTreeSet<usize>>,
}

/// The offsets one partition contributes to its dir's checkpoints.
pub struct CheckpointEntry {
    pub partition: TopicPartition,
    pub recovery_point: i64,
    pub log_start_offset: i64,
    pub high_watermark: i64,
}

impl LogManager {
    /// Reads each dir's checkpoints and clean-shutdown marker (removing the marker, so a crash
    /// from now on is seen as unclean) and finds the partition dirs in each.
    pub fn open(paths: &[PathBuf]) -> Result<Self, StorageError> {
        let mut dirs = Vec::with_capacity(paths.len());
        let mut recovery_points = HashMap::new();
        let mut log_start_offsets = HashMap::new();
        let mut high_watermarks = HashMap::new();
        let mut placement = HashMap::new();
        let mut epochs = Vec::with_capacity(paths.len());
        for (i, path) in paths.iter().enumerate() {
            std::fs::create_dir_all(path)?;
            let marker = path.join(CLEAN_SHUTDOWN_FILE);
            let had_clean_shutdown = marker.exists();
            epochs.push(read_clean_shutdown_epoch(path));
            if had_clean_shutdown {
                std::fs::remove_file(&marker)?;
            }
            recovery_points
                .extend(OffsetCheckpointFile::new(path.join(RECOVERY_POINT_CHECKPOINT)).read()?);
            log_start_offsets
                .extend(OffsetCheckpointFile::new(path.join(LOG_START_OFFSET_CHECKPOINT)).read()?);
            high_watermarks.extend(
                OffsetCheckpointFile::new(path.join(REPLICATION_OFFSET_CHECKPOINT)).read()?,
            );
            for e in std::fs::read_dir(path)?.flatten() {
                let name = e.file_name().to_string_lossy().to_string();
                let Some(tp) = parse_partition_dir_name(&name) else {
                    continue;
                };
                if tp.0 == strom_controller::names::METADATA_TOPIC || !e.path().is_dir() {
                    continue;
                }
                if let Some(&first) = placement.get(&tp) {
                    let first: &PathBuf = &paths[first];
                    // Kafka refuses to start; Strom uses the first and leaves the other alone.
                    tracing::error!(dir = %name, first = %first.display(),
                        second = %path.display(), "partition found in two log dirs; using the first");
                    continue;
                }
                placement.insert(tp, i);
            }
            tracing::info!(dir = %path.display(), had_clean_shutdown, "log dir loaded");
            dirs.push(LogDir {
                path: path.clone(),
                directory_id: read_directory_id(path),
                had_clean_shutdown,
            });
        }
        let previous_broker_epoch = match epochs.first() {
            Some(Some(e)) if epochs.iter().all(|x| *x == Some(*e)) => Some(*e),
            _ => None,
        };
        tracing::info!(
            ?previous_broker_epoch,
            "broker epoch of the last clean shutdown"
        );
        Ok(Self {
            dirs,
            previous_broker_epoch,
            recovery_points,
            log_start_offsets,
            high_watermarks,
            placement: Mutex::new(placement),
            offline_dirs: Mutex::new(Default::default()),
        })
    }

    pub fn dirs(&self) -> &[LogDir] {
        &self.dirs
    }

    /// The broker epoch the last clean shutdown recorded in every dir, if any.
    pub fn previous_broker_epoch(&self) -> Option<i64> {
        self.previous_broker_epoch
    }

    /// Whether every dir had a clean shutdown.
    pub fn had_clean_shutdown(&self) -> bool {
        self.dirs.iter().all(|d| d.had_clean_shutdown)
    }

    /// The dir holding the partition's log, if it has one.
    pub fn log_dir_of(&self, tp: &TopicPartition) -> Option<&LogDir> {
        let i = *self.placement.lock().get(tp)?;
        Some(&self.dirs[i])
    }

    /// The partition's directory: where it already is, else in the dir with the fewest
    /// partitions (the choice is remembered).
    pub fn partition_dir(&self, topic: &str, partition: i32) -> (PathBuf, &LogDir) {
        let tp = (topic.to_string(), partition);
        let mut placement = self.placement.lock();
        let i = match placement.get(&tp) {
            Some(&i) => i,
            None => {
                let i = next_log_dir(self.dirs.len(), &placement, &self.offline_dirs.lock());
                placement.insert(tp, i);
                i
            }
        };
        let dir = &self.dirs[i];
        (dir.path.join(format!("{topic}-{partition}")), dir)
    }

    /// Forgets a deleted partition; the path its log was at, if it had one.
    pub fn remove(&self, tp: &TopicPartition) -> Option<PathBuf> {
        let i = self.placement.lock().remove(tp)?;
        Some(self.dirs[i].path.join(format!("{}-{}", tp.0, tp.1)))
    }

    /// Every partition with a directory (found at start-up or placed since).
    pub fn placed(&self) -> Vec<(TopicPartition, PathBuf)> {
        self.placement
            .lock()
            .iter()
            .map(|(tp, &i)| {
                let path = self.dirs[i].path.join(format!("{}-{}", tp.0, tp.1));
                (tp.clone(), path)
            })
            .collect()
    }

    pub fn recovery_point(&self, tp: &TopicPartition) -> i64 {
        self.recovery_points.get(tp).copied().unwrap_or(0)
    }
    pub fn checkpointed_log_start_offset(&self, tp: &TopicPartition) -> Option<i64> {
        self.log_start_offsets.get(tp).copied()
    }
    pub fn checkpointed_high_watermark(&self, tp: &TopicPartition) -> i64 {
        self.high_watermarks.get(tp).copied().unwrap_or(0)
    }

    /// Whether the dir at `path` failed.
    pub fn is_dir_offline(&self, path: &Path) -> bool {
        let offline = self.offline_dirs.lock();
        self.dirs
            .iter()
            .position(|d| d.path == path)
            .is_some_and(|i| offline.contains(&i))
    }

    /// The partitions placed in the dir at `path`.
    pub fn partitions_in(&self, path: &Path) -> Vec<TopicPartition> {
        let Some(i) = self.dirs.iter().position(|d| d.path == path) else {
            return Vec::new();
        };
        self.placement
            .lock()
            .iter()
            .filter(|(_, &d)| d == i)
            .map(|(tp, _)| tp.clone())
            .collect()
    }

    /// Writes each online dir's recovery-point, log-start-offset and high-watermark checkpoints
    /// with the partitions it holds. A partition placed but not open (offline, or not yet in
    /// the image) keeps what was read at start-up rather than losing its offsets. A dir whose
    /// checkpoint cannot be written goes offline; the dirs that failed now are returned.
    pub fn checkpoint(&self, entries: Vec<CheckpointEntry>) -> Vec<(PathBuf, StorageError)> {
        let placement = self.placement.lock().clone();
        type Maps = [HashMap<TopicPartition, i64>; 3];
        let mut per_dir: Vec<Maps> = (0..self.dirs.len()).map(|_| Default::default()).collect();
        let mut seen = std::collections::HashSet::new();
        for e in entries {
            let Some(&i) = placement.get(&e.partition) else {
                continue;
            };
            seen.insert(e.partition.clone());
            let [rp, lso, hw] = &mut per_dir[i];
            rp.insert(e.partition.clone(), e.recovery_point);
            lso.insert(e.partition.clone(), e.log_start_offset);
            hw.insert(e.partition, e.high_watermark);
        }
        for (tp, &i) in &placement {
            if seen.contains(tp) {
                continue;
            }
            let [rp, lso, hw] = &mut per_dir[i];
            let old = [
                (&self.recovery_points, rp),
                (&self.log_start_offsets, lso),
                (&self.high_watermarks, hw),
            ];
            for (from, to) in old {
                if let Some(&v) = from.get(tp) {
                    to.insert(tp.clone(), v);
                }
            }
        }
        let mut failed = Vec::new();
        for (i, (dir, [rp, lso, hw])) in self.dirs.iter().zip(per_dir).enumerate() {
            if self.offline_dirs.lock().contains(&i) {
                continue;
            }
            let write = || -> Result<(), StorageError> {
                OffsetCheckpointFile::new(dir.path.join(RECOVERY_POINT_CHECKPOINT)).write(&rp)?;
                OffsetCheckpointFile::new(dir.path.join(LOG_START_OFFSET_CHECKPOINT))
                    .write(&lso)?;
                OffsetCheckpointFile::new(dir.path.join(REPLICATION_OFFSET_CHECKPOINT))
                    .write(&hw)?;
                Ok(())
            };
            if let Err(e) = write() {
                tracing::error!(dir = %dir.path.display(), error = %e,
                    "cannot write checkpoints: log dir offline");
                self.offline_dirs.lock().insert(i);
                failed.push((dir.path.clone(), e));
            }
        }
        failed
    }

    /// Writes every dir's clean-shutdown marker (after the logs are closed and checkpointed)
    /// with the broker epoch of this run (Kafka's `CleanShutdownFileHandler.write`), which the
    /// next start registers as its previous broker epoch: the proof that nothing was lost.
    pub fn write_clean_shutdown_markers(&self, broker_epoch: i64) -> Result<(), StorageError> {
        let offline = self.offline_dirs.lock().clone();
        let content = format!("{{\"version\":0,\"brokerEpoch\":{broker_epoch}}}");
        for (_, dir) in self
            .dirs
            .iter()
            .enumerate()
            .filter(|(i, _)| !offline.contains(i))
        {
            let path = dir.path.join(CLEAN_SHUTDOWN_FILE);
            let mut f = File::create(&path)?;
            std::io::Write::write_all(&mut f, content.as_bytes())?;
            f.sync_all()?;
            File::open(&dir.path)?.sync_all()?;
        }
        Ok(())
    }
}

/// Kafka's `nextLogDirs`: the online dir holding the fewest partitions, the first such in
/// `log.dirs` order on a tie (the first dir when all are offline: the open then fails).
fn next_log_dir(
    n: usize,
    placement: &HashMap<TopicPartition, usize>,
    offline: &std::collections::BTreeSet<usize>,
) -> usize {
    let mut counts = vec![0usize; n];
    for &i in placement.values() {
        counts[i] += 1;
    }
    (0..n)
        .filter(|i| !offline.contains(i))
        .min_by_key(|&i| (counts[i], i))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dirs(n: usize) -> (Vec<tempfile::TempDir>, Vec<PathBuf>) {
        let t: Vec<_> = (0..n).map(|_| tempfile::tempdir().unwrap()).collect();
        let p = t.iter().map(|d| d.path().to_path_buf()).collect();
        (t, p)
    }

    #[test]
    fn new_partitions_go_to_the_dir_with_the_fewest() {
        let (_t, paths) = dirs(3);
        // Dir 0 already holds two partitions, dir 2 one.
        for name in ["a-0", "a-1"] {
            std::fs::create_dir(paths[0].join(name)).unwrap();
        }
        std::fs::create_dir(paths[2].join("b-0")).unwrap();
        let lm = LogManager::open(&paths).unwrap();
        let placed: Vec<PathBuf> = (0..5)
            .map(|p| lm.partition_dir("new", p).0.parent().unwrap().to_path_buf())
            .collect();
        // Counts 2/0/1 -> 2/1/1 -> 2/2/1 (a tie goes to the earlier dir) -> 2/2/2 -> 3/2/2.
        assert_eq!(
            placed,
            vec![
                paths[1].clone(),
                paths[1].clone(),
                paths[2].clone(),
                paths[0].clone(),
                paths[1].clone()
            ]
        );
        // A partition keeps its dir.
        assert_eq!(lm.partition_dir("new", 0).0, paths[1].join("new-0"));
        assert_eq!(lm.partition_dir("a", 1).0, paths[0].join("a-1"));
    }

    #[test]
    fn start_up_finds_partitions_and_checkpoints_in_each_dir() {
        let (_t, paths) = dirs(2);
        {
            let lm = LogManager::open(&paths).unwrap();
            let (a, _) = lm.partition_dir("t", 0);
            let (b, _) = lm.partition_dir("t", 1);
            std::fs::create_dir_all(&a).unwrap();
            std::fs::create_dir_all(&b).unwrap();
            assert_ne!(a.parent(), b.parent(), "spread over both dirs");
            let entry = |p: i32, base: i64| CheckpointEntry {
                partition: ("t".into(), p),
                recovery_point: base,
                log_start_offset: base + 1,
                high_watermark: base + 2,
            };
            assert!(lm.checkpoint(vec![entry(0, 10), entry(1, 20)]).is_empty());
            lm.write_clean_shutdown_markers(42).unwrap();
        }
        // Each dir's checkpoint names only its own partition.
        for (i, p) in paths.iter().enumerate() {
            let rp = OffsetCheckpointFile::new(p.join(RECOVERY_POINT_CHECKPOINT))
                .read()
                .unwrap();
            assert_eq!(rp.len(), 1, "dir {i}: {rp:?}");
            assert!(p.join(CLEAN_SHUTDOWN_FILE).exists());
        }
        assert_eq!(
            std::fs::read_to_string(paths[0].join(CLEAN_SHUTDOWN_FILE)).unwrap(),
            r#"{"version":0,"brokerEpoch":42}"#,
            "Kafka's CleanShutdownFileHandler content"
        );
        let lm = LogManager::open(&paths).unwrap();
        assert!(lm.had_clean_shutdown());
        assert_eq!(lm.previous_broker_epoch(), Some(42));
        assert!(!paths[0].join(CLEAN_SHUTDOWN_FILE).exists());
        let t0 = ("t".to_string(), 0);
        let t1 = ("t".to_string(), 1);
        assert_eq!(lm.recovery_point(&t0), 10);
        assert_eq!(lm.checkpointed_log_start_offset(&t1), Some(21));
        assert_eq!(lm.checkpointed_high_watermark(&t1), 22);
        assert_eq!(lm.log_dir_of(&t0).unwrap().path, paths[0]);
        assert_eq!(lm.log_dir_of(&t1).unwrap().path, paths[1]);
        // A partition not open at the next checkpoint keeps its offsets.
        assert!(lm.checkpoint(Vec::new()).is_empty());
        let lm = LogManager::open(&paths).unwrap();
        assert_eq!(lm.recovery_point(&t0), 10);
        assert!(!lm.had_clean_shutdown());
        assert_eq!(lm.previous_broker_epoch(), None);
    }

    /// Kafka's `readBrokerEpochFromCleanShutdownFiles`: every dir must name the same epoch; a
    /// dir without one (a crash there, an empty marker) means no previous epoch.
    #[test]
    fn previous_broker_epoch_needs_every_dir_to_agree() {
        let (_t, paths) = dirs(2);
        let write = |i: usize, text: &str| {
            std::fs::write(paths[i].join(CLEAN_SHUTDOWN_FILE), text).unwrap()
        };
        for (a, b, want) in [
            (
                r#"{"version":0,"brokerEpoch":7}"#,
                r#"{"version":0,"brokerEpoch":7}"#,
                Some(7),
            ),
            (
                r#"{"version":0,"brokerEpoch":7}"#,
                r#"{"version":0,"brokerEpoch":8}"#,
                None,
            ),
            (r#"{"version":0,"brokerEpoch":7}"#, "", None),
            ("", "", None),
        ] {
            write(0, a);
            write(1, b);
            let lm = LogManager::open(&paths).unwrap();
            assert_eq!(lm.previous_broker_epoch(), want, "{a} / {b}");
            assert!(lm.had_clean_shutdown());
        }
        write(0, r#"{"version":0,"brokerEpoch":7}"#);
        assert_eq!(
            LogManager::open(&paths).unwrap().previous_broker_epoch(),
            None
        );
    }

    #[test]
    fn a_dir_whose_checkpoint_fails_goes_offline_and_gets_no_new_partitions() {
        let (_t, paths) = dirs(2);
        let lm = LogManager::open(&paths).unwrap();
        let (a, _) = lm.partition_dir("t", 0);
        assert_eq!(a.parent().unwrap(), paths[0]);
        // A directory where dir 0's checkpoint file goes: the write's rename fails.
        std::fs::create_dir_all(paths[0].join(RECOVERY_POINT_CHECKPOINT).join("x")).unwrap();
        let failed = lm.checkpoint(Vec::new());
        assert_eq!(failed.len(), 1);
        assert_eq!(failed[0].0, paths[0]);
        assert!(lm.is_dir_offline(&paths[0]) && !lm.is_dir_offline(&paths[1]));
        assert_eq!(lm.partitions_in(&paths[0]), vec![("t".to_string(), 0)]);
        // Dir 0 would have the fewest after one more, but it is offline: all go to dir 1.
        for p in 1..4 {
            assert_eq!(lm.partition_dir("t", p).0.parent().unwrap(), paths[1]);
        }
        // Not retried, and no marker for it at shutdown.
        assert!(lm.checkpoint(Vec::new()).is_empty());
        lm.write_clean_shutdown_markers(42).unwrap();
        assert!(!paths[0].join(CLEAN_SHUTDOWN_FILE).exists());
        assert!(paths[1].join(CLEAN_SHUTDOWN_FILE).exists());
    }

    #[test]
    fn a_locked_dir_is_refused() {
        let (_t, paths) = dirs(2);
        let locks = lock_dirs(&paths).unwrap();
        assert!(matches!(
            lock_dirs(&paths[1..]),
            Err(ServerError::DataDirLocked(_))
        ));
        drop(locks);
    }
}

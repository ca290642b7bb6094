//! The replica manager: every partition replica this broker hosts, created, updated and deleted
//! from metadata images (Kafka's `ReplicaManager.applyDelta`), plus the log-manager chores:
//! checkpoints, retention and the clean-shutdown marker. The data path goes through it too:
//! [`fetch`] (Kafka's `fetchMessages`) and [`delete_records`]; its partitions share one set of
//! purgatories ([`DelayedOperations`]).

pub mod delete_records;
pub mod fetch;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::RwLock;
use strom_controller::MetadataImage;
use strom_storage::checkpoint::OffsetCheckpointFile;
use strom_storage::{parse_partition_dir_name, StorageError, UnifiedLog, CLEAN_SHUTDOWN_FILE};
use uuid::Uuid;

use crate::config::BrokerConfig;
use crate::partition::{DelayedOperations, Partition};
use crate::replication::{min_insync_replicas, AlterPartitionSender, FetcherManager, LeaderAndIsr};

pub type TopicPartition = (String, i32);

const RECOVERY_POINT_CHECKPOINT: &str = "recovery-point-offset-checkpoint";
const LOG_START_OFFSET_CHECKPOINT: &str = "log-start-offset-checkpoint";
const REPLICATION_OFFSET_CHECKPOINT: &str = "replication-offset-checkpoint";
const PARTITION_METADATA_FILE: &str = "partition.metadata";

pub struct ReplicaManager {
    config: Arc<BrokerConfig>,
    partitions: RwLock<HashMap<TopicPartition, Arc<Partition>>>,
    /// Whether the previous run ended with a clean shutdown; decides how much recovery scans.
    had_clean_shutdown: bool,
    recovery_points: HashMap<TopicPartition, i64>,
    log_start_offsets: HashMap<TopicPartition, i64>,
    high_watermarks: HashMap<TopicPartition, i64>,
    /// Cluster mode only: follower fetchers and the way ISR changes reach the controller.
    replication: std::sync::OnceLock<Replication>,
    /// The (leader, leader epoch) each followed partition is fetched from, so an unchanged
    /// image does not restart a fetch.
    followed: parking_lot::Mutex<HashMap<TopicPartition, (i32, i32)>>,
    /// The produce, fetch and delete-records purgatories of every hosted partition.
    delayed: Arc<DelayedOperations>,
}

pub struct Replication {
    pub fetchers: FetcherManager,
    pub alter_partition: Arc<dyn AlterPartitionSender>,
}

impl ReplicaManager {
    /// Reads the log dir's checkpoints and the clean-shutdown marker. The marker is removed so
    /// that a crash from now on is seen as unclean at the next start.
    pub fn new(config: Arc<BrokerConfig>) -> Result<Self, StorageError> {
        let dir = &config.data_dir;
        let marker = dir.join(CLEAN_SHUTDOWN_FILE);
        let had_clean_shutdown = marker.exists();
        if had_clean_shutdown {
            std::fs::remove_file(&marker)?;
        }
        let recovery_points =
            OffsetCheckpointFile::new(dir.join(RECOVERY_POINT_CHECKPOINT)).read()?;
        let log_start_offsets =
            OffsetCheckpointFile::new(dir.join(LOG_START_OFFSET_CHECKPOINT)).read()?;
        let high_watermarks =
            OffsetCheckpointFile::new(dir.join(REPLICATION_OFFSET_CHECKPOINT)).read()?;
        tracing::info!(had_clean_shutdown, "log manager starting");
        Ok(Self {
            config,
            partitions: RwLock::new(HashMap::new()),
            had_clean_shutdown,
            recovery_points,
            log_start_offsets,
            high_watermarks,
            replication: std::sync::OnceLock::new(),
            followed: parking_lot::Mutex::new(HashMap::new()),
            delayed: Arc::new(DelayedOperations::default()),
        })
    }

    /// Turns on replication (cluster mode), before the first image is applied.
    pub fn enable_replication(&self, replication: Replication) {
        let _ = self.replication.set(replication);
    }

    pub fn replication(&self) -> Option<&Replication> {
        self.replication.get()
    }

    /// The purgatories of the delayed operations on this broker's partitions.
    pub fn delayed(&self) -> &Arc<DelayedOperations> {
        &self.delayed
    }

    pub fn get(&self, topic: &str, partition: i32) -> Option<Arc<Partition>> {
        self.partitions
            .read()
            .get(&(topic.to_string(), partition))
            .cloned()
    }

    pub fn all(&self) -> Vec<Arc<Partition>> {
        self.partitions.read().values().cloned().collect()
    }

    fn partition_dir(&self, topic: &str, partition: i32) -> PathBuf {
        self.config.data_dir.join(format!("{topic}-{partition}"))
    }

    /// Makes the hosted partitions match `image`: opens logs for new replicas, updates leadership
    /// and configs, deletes the logs of removed topics (and of a topic re-created under the same
    /// name, recognised by its topic id).
    pub fn apply_image(&self, image: &MetadataImage) {
        let now_ms = crate::now_ms();
        let node = self.config.node_id;
        let mut wanted: HashMap<TopicPartition, (Uuid, &BTreeMap<String, String>)> = HashMap::new();
        for t in image.topics.values() {
            for (p, reg) in &t.partitions {
                if reg.replicas.contains(&node) {
                    wanted.insert((t.name.clone(), *p), (t.id, &t.configs));
                }
            }
        }
        let stale: Vec<Arc<Partition>> = {
            let mut parts = self.partitions.write();
            let keys: Vec<TopicPartition> = parts
                .iter()
                .filter(|(k, p)| wanted.get(*k).is_none_or(|(id, _)| *id != p.topic_id))
                .map(|(k, _)| k.clone())
                .collect();
            keys.iter().filter_map(|k| parts.remove(k)).collect()
        };
        self.stop_partitions(&stale);
        if let Some(r) = self.replication.get() {
            let keys: Vec<TopicPartition> =
                stale.iter().map(|p| (p.topic.clone(), p.index)).collect();
            r.fetchers.remove_partitions(&keys);
            let mut followed = self.followed.lock();
            for k in &keys {
                followed.remove(k);
            }
        }
        for p in stale {
            tracing::info!(topic = %p.topic, partition = p.index, "deleting partition log");
            let dir = self.partition_dir(&p.topic, p.index);
            drop(p);
            if let Err(e) = std::fs::remove_dir_all(&dir) {
                tracing::warn!(dir = %dir.display(), error = %e, "failed to delete partition dir");
            }
        }
        // Kafka's `isReplicaIsrEligible`: a fenced or shutting-down broker cannot join an ISR.
        let ineligible: Vec<i32> = image
            .brokers
            .iter()
            .filter(|(_, b)| b.fenced || b.in_controlled_shutdown)
            .map(|(&id, _)| id)
            .collect();
        for ((topic, p), (id, configs)) in wanted {
            let t = &image.topics[&topic];
            let reg = &t.partitions[&p];
            let existing = self.get(&topic, p);
            let part = match existing {
                Some(part) => {
                    part.update_config(self.config.log_config(configs));
                    part
                }
                None => match self.open_partition(&topic, p, id, configs) {
                    Ok(part) => part,
                    Err(e) => {
                        tracing::error!(%topic, partition = p, error = %e, "cannot open partition log");
                        continue;
                    }
                },
            };
            part.set_min_insync_replicas(min_insync_replicas(
                configs,
                self.config.min_insync_replicas,
            ));
            part.set_replica_lag_time_max_ms(self.config.replica_lag_time_max_ms);
            part.set_ineligible_replicas(ineligible.iter().copied());
            if let Some(r) = self.replication.get() {
                part.set_alter_partition_sender(r.alter_partition.clone());
            }
            part.apply_leader_and_isr(
                &LeaderAndIsr {
                    leader: reg.leader,
                    leader_epoch: reg.leader_epoch,
                    partition_epoch: reg.partition_epoch,
                    replicas: reg.replicas.clone(),
                    isr: reg.isr.clone(),
                },
                now_ms,
            );
            self.update_fetcher(image, &part, reg.leader, reg.leader_epoch);
        }
    }

    /// Kafka's `stopPartitions` (the data-path half; the caller has taken them out of the map):
    /// each refuses from now on and its waiting produces, fetches and deletes answer now.
    fn stop_partitions(&self, stopped: &[Arc<Partition>]) {
        for p in stopped {
            p.mark_removed();
        }
    }

    /// Follows the partition's leader, or stops following when this broker leads it or it has
    /// no reachable leader.
    fn update_fetcher(
        &self,
        image: &MetadataImage,
        part: &Arc<Partition>,
        leader: i32,
        epoch: i32,
    ) {
        let Some(r) = self.replication.get() else {
            return;
        };
        let key = (part.topic.clone(), part.index);
        let leader_addr = image
            .brokers
            .get(&leader)
            .filter(|b| leader != self.config.node_id && !b.fenced)
            .map(|b| format!("{}:{}", b.host, b.port));
        let mut followed = self.followed.lock();
        match leader_addr {
            Some(addr) => {
                if followed.get(&key) != Some(&(leader, epoch)) {
                    r.fetchers
                        .add_partitions(leader, &addr, vec![(part.clone(), epoch)]);
                    followed.insert(key, (leader, epoch));
                }
            }
            None => {
                if followed.remove(&key).is_some() {
                    r.fetchers.remove_partitions(&[key]);
                }
            }
        }
    }

    /// How often the ISR shrink pass runs: every `replica.lag.time.max.ms / 2`, as Kafka's
    /// `isr-expiration` task, so a follower is out of the ISR at most 1.5 x the lag time after
    /// it last caught up.
    pub fn isr_shrink_interval(replica_lag_time_max_ms: i64) -> std::time::Duration {
        std::time::Duration::from_millis((replica_lag_time_max_ms / 2).max(1) as u64)
    }

    /// ISR shrink pass (every [`Self::isr_shrink_interval`]).
    pub fn maybe_shrink_isr(&self, now_ms: i64) {
        for p in self.all() {
            if p.is_leader() {
                if let Some(proposal) = p.maybe_shrink_isr(now_ms) {
                    tracing::info!(topic = %p.topic, partition = p.index, isr = ?proposal.new_isr, "shrinking ISR");
                }
            }
        }
    }

    fn open_partition(
        &self,
        topic: &str,
        p: i32,
        id: Uuid,
        configs: &BTreeMap<String, String>,
    ) -> Result<Arc<Partition>, StorageError> {
        let dir = self.partition_dir(topic, p);
        let key = (topic.to_string(), p);
        // A directory left by an earlier topic of the same name must not be reused.
        if let Some(old) = read_partition_metadata(&dir) {
            if old != id {
                tracing::warn!(%topic, partition = p, "removing log of a deleted topic with the same name");
                std::fs::remove_dir_all(&dir)?;
            }
        }
        let recovery_point = self.recovery_points.get(&key).copied().unwrap_or(0);
        let mut log = UnifiedLog::open(
            &dir,
            self.config.log_config(configs),
            recovery_point,
            self.had_clean_shutdown,
        )?;
        // The log start may sit inside the first segment (DeleteRecords); only the checkpoint knows.
        if let Some(&start) = self.log_start_offsets.get(&key) {
            if start > log.log_start_offset() && start <= log.log_end_offset() {
                log.maybe_increment_log_start_offset(start)?;
            }
        }
        write_partition_metadata(&dir, id)?;
        let hw = self.high_watermarks.get(&key).copied().unwrap_or(0);
        let part = Arc::new(
            Partition::new(topic.to_string(), id, p, self.config.node_id, log, hw)
                .with_delayed_operations(self.delayed.clone()),
        );
        self.partitions.write().insert(key, part.clone());
        Ok(part)
    }

    /// Deletes partition directories on disk that no topic in `image` owns (a topic deleted while
    /// the broker was down). Kafka calls these stray logs.
    pub fn remove_stray_logs(&self, image: &MetadataImage) {
        let Ok(entries) = std::fs::read_dir(&self.config.data_dir) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            let Some((topic, p)) = parse_partition_dir_name(&name) else {
                continue;
            };
            if topic == strom_controller::names::METADATA_TOPIC {
                continue;
            }
            if !e.path().is_dir() || self.get(&topic, p).is_some() {
                continue;
            }
            let owned = image.topic(&topic).is_some_and(|t| {
                t.partitions
                    .get(&p)
                    .is_some_and(|r| r.replicas.contains(&self.config.node_id))
            });
            if !owned {
                tracing::info!(dir = %name, "removing stray partition log");
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }

    /// Writes the recovery-point, log-start-offset and high-watermark checkpoints.
    pub fn checkpoint(&self) -> Result<(), StorageError> {
        let parts = self.all();
        let mut rp = HashMap::new();
        let mut lso = HashMap::new();
        let mut hw = HashMap::new();
        for p in &parts {
            let key = (p.topic.clone(), p.index);
            rp.insert(key.clone(), p.recovery_point());
            lso.insert(key.clone(), p.log_start_offset());
            hw.insert(key, p.high_watermark());
        }
        let dir = &self.config.data_dir;
        OffsetCheckpointFile::new(dir.join(RECOVERY_POINT_CHECKPOINT)).write(&rp)?;
        OffsetCheckpointFile::new(dir.join(LOG_START_OFFSET_CHECKPOINT)).write(&lso)?;
        OffsetCheckpointFile::new(dir.join(REPLICATION_OFFSET_CHECKPOINT)).write(&hw)?;
        Ok(())
    }

    /// Retention pass over every hosted partition.
    pub fn delete_old_segments(&self, now_ms: i64) {
        for p in self.all() {
            // Never delete what consumers cannot read yet: only segments below the HW go.
            let hw = p.high_watermark();
            match p.with_log(|log| log.delete_old_segments_below(now_ms, hw)) {
                Ok(0) => {}
                Ok(n) => {
                    tracing::info!(topic = %p.topic, partition = p.index, deleted = n, "retention deleted segments")
                }
                Err(e) => {
                    tracing::warn!(topic = %p.topic, partition = p.index, error = %e, "retention failed")
                }
            }
        }
    }

    /// Drops the state of producers idle for `producer.id.expiration.ms`.
    pub fn remove_expired_producers(&self, now_ms: i64) {
        for p in self.all() {
            let n = p.with_log(|log| log.remove_expired_producers(now_ms));
            if n > 0 {
                tracing::info!(topic = %p.topic, partition = p.index, expired = n, "expired producer state");
            }
        }
    }

    /// Clean shutdown: flush and close every log, write checkpoints, then the marker that tells
    /// the next start it may skip recovery.
    pub fn shutdown(&self) -> Result<(), StorageError> {
        for p in self.all() {
            p.close()?;
        }
        self.checkpoint()?;
        let marker = self.config.data_dir.join(CLEAN_SHUTDOWN_FILE);
        std::fs::write(&marker, b"")?;
        std::fs::File::open(&self.config.data_dir)?.sync_all()?;
        Ok(())
    }
}

/// Kafka's `PartitionMetadataFile`: `version: 0` and `topic_id: <base64>`.
fn write_partition_metadata(dir: &Path, id: Uuid) -> Result<(), StorageError> {
    let path = dir.join(PARTITION_METADATA_FILE);
    let text = format!("version: 0\ntopic_id: {}\n", crate::topic_id_string(&id));
    if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
        let tmp = dir.join(format!("{PARTITION_METADATA_FILE}.tmp"));
        std::fs::write(&tmp, &text)?;
        std::fs::File::open(&tmp)?.sync_all()?;
        std::fs::rename(&tmp, &path)?;
    }
    Ok(())
}

fn read_partition_metadata(dir: &Path) -> Option<Uuid> {
    let text = std::fs::read_to_string(dir.join(PARTITION_METADATA_FILE)).ok()?;
    let line = text.lines().find_map(|l| l.strip_prefix("topic_id:"))?;
    crate::parse_topic_id_string(line.trim())
}

//! The replica manager: every partition replica this broker hosts, created, updated and deleted
//! from metadata images (Kafka's `ReplicaManager.applyDelta`), plus the log-manager chores:
//! checkpoints, retention and the clean-shutdown marker (the log dirs themselves are
//! `log_manager`'s). The data path goes through it too: [`fetch`] (Kafka's `fetchMessages`) and
//! [`delete_records`]; its partitions share one set of purgatories ([`DelayedOperations`]).
//!
//! A replica whose log cannot be opened or written is offline (Kafka's `HostedPartition.Offline`):
//! requests for it get KAFKA_STORAGE_ERROR, and `directory_assignments` reports it to the
//! controller, which moves its leadership and takes it out of the ISR. It stays offline until
//! the broker restarts or the partition is deleted.

pub mod delete_records;
pub mod fetch;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use parking_lot::RwLock;
use strom_controller::{MetadataDelta, MetadataImage, RemovedTopic};
use strom_protocol::ErrorCode;
use strom_storage::{StorageError, UnifiedLog};
use uuid::Uuid;

use crate::config::BrokerConfig;
use crate::log_cleaner::LogCleanerManager;
use crate::log_manager::{CheckpointEntry, LogManager};
use crate::partition::{DelayedOperations, Partition};
use crate::replication::{min_insync_replicas, AlterPartitionSender, FetcherManager, LeaderAndIsr};

pub type TopicPartition = (String, i32);

const PARTITION_METADATA_FILE: &str = "partition.metadata";

pub struct ReplicaManager {
    config: Arc<BrokerConfig>,
    partitions: RwLock<HashMap<TopicPartition, Arc<Partition>>>,
    /// The log dirs, their checkpoints and where each partition's log is.
    log_manager: LogManager,
    /// Replicas whose log could not be opened or written, with their topic id.
    offline: RwLock<HashMap<TopicPartition, Uuid>>,
    /// Signalled when a replica goes offline, so the controller hears of it without delay.
    pub offline_changed: tokio::sync::Notify,
    /// Cluster mode only: follower fetchers and the way ISR changes reach the controller.
    replication: std::sync::OnceLock<Replication>,
    /// The (leader, leader epoch) each followed partition is fetched from, so an unchanged
    /// image does not restart a fetch.
    followed: parking_lot::Mutex<HashMap<TopicPartition, (i32, i32)>>,
    /// The produce, fetch and delete-records purgatories of every hosted partition.
    delayed: Arc<DelayedOperations>,
    /// Partition count of every topic in the last applied image: a partition the metadata
    /// knows but this broker does not host answers NOT_LEADER_OR_FOLLOWER (clients refresh
    /// their metadata), one it does not know UNKNOWN_TOPIC_OR_PARTITION, as Kafka's
    /// `getPartitionOrError` does with its metadata cache.
    known_topics: RwLock<HashMap<String, i32>>,
    /// Which partitions the log cleaner works on, and its checkpoints.
    cleaner_manager: Arc<LogCleanerManager>,
}

pub struct Replication {
    pub fetchers: FetcherManager,
    pub alter_partition: Arc<dyn AlterPartitionSender>,
}

impl ReplicaManager {
    /// Reads the log dirs' checkpoints and clean-shutdown markers (see [`LogManager::open`]).
    pub fn new(config: Arc<BrokerConfig>) -> Result<Self, StorageError> {
        let log_manager = LogManager::open(&config.log_dirs)?;
        let cleaner_manager = Arc::new(LogCleanerManager::open(&config.log_dirs));
        tracing::info!(
            had_clean_shutdown = log_manager.had_clean_shutdown(),
            dirs = config.log_dirs.len(),
            "log manager starting"
        );
        Ok(Self {
            config,
            partitions: RwLock::new(HashMap::new()),
            log_manager,
            offline: RwLock::new(HashMap::new()),
            offline_changed: tokio::sync::Notify::new(),
            replication: std::sync::OnceLock::new(),
            followed: parking_lot::Mutex::new(HashMap::new()),
            delayed: Arc::new(DelayedOperations::default()),
            known_topics: RwLock::new(HashMap::new()),
            cleaner_manager,
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

    /// The log cleaner's bookkeeping (`crate::log_cleaner`).
    pub fn cleaner_manager(&self) -> &Arc<LogCleanerManager> {
        &self.cleaner_manager
    }

    /// The log dir holding the partition's log.
    pub fn log_dir_path(&self, key: &TopicPartition) -> Option<std::path::PathBuf> {
        self.log_manager.log_dir_of(key).map(|d| d.path.clone())
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

    /// Kafka's `getPartitionOrError`: the hosted replica, KAFKA_STORAGE_ERROR for an offline
    /// one, UNKNOWN_TOPIC_OR_PARTITION for one this broker does not host.
    pub fn get_partition_or_error(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<Arc<Partition>, ErrorCode> {
        if let Some(p) = self.get(topic, partition) {
            return Ok(p);
        }
        if self.is_offline(topic, partition) {
            return Err(ErrorCode::KafkaStorageError);
        }
        let known = self
            .known_topics
            .read()
            .get(topic)
            .is_some_and(|n| (0..*n).contains(&partition));
        if known {
            return Err(ErrorCode::NotLeaderOrFollower);
        }
        Err(ErrorCode::UnknownTopicOrPartition)
    }

    pub fn is_offline(&self, topic: &str, partition: i32) -> bool {
        self.offline
            .read()
            .contains_key(&(topic.to_string(), partition))
    }

    /// The offline replicas: (topic id, partition).
    pub fn offline_replicas(&self) -> Vec<(Uuid, i32)> {
        self.offline
            .read()
            .iter()
            .map(|((_, p), id)| (*id, *p))
            .collect()
    }

    pub fn log_manager(&self) -> &LogManager {
        &self.log_manager
    }

    /// Makes a replica offline after its log failed (`error`): it is no longer served or
    /// fetched, requests for it get KAFKA_STORAGE_ERROR, and the controller is told.
    pub fn mark_offline(&self, topic: &str, partition: i32, topic_id: Uuid, error: &StorageError) {
        let key = (topic.to_string(), partition);
        tracing::error!(%topic, partition, error = %error,
            "partition log failed: replica offline until restart (KAFKA_STORAGE_ERROR)");
        let removed = self.partitions.write().remove(&key);
        if let Some(p) = removed {
            // Appends and waiting operations on it stop at once.
            p.mark_removed();
        }
        self.offline.write().insert(key.clone(), topic_id);
        if let Some(r) = self.replication.get() {
            r.fetchers.remove_partitions(std::slice::from_ref(&key));
            self.followed.lock().remove(&key);
        }
        self.offline_changed.notify_one();
    }

    /// Called with the error of a failed append or read: an I/O error (EIO, ENOSPC, ...) makes
    /// the replica offline rather than failing every request in turn (Kafka marks the log dir
    /// offline on any `IOException`). Other errors are about the request and change nothing.
    pub fn handle_storage_error(&self, part: &Partition, error: &StorageError) {
        if matches!(error, StorageError::Io(_)) {
            self.mark_offline(&part.topic, part.index, part.topic_id, error);
        }
    }

    /// Makes the hosted partitions match `image`, whatever was applied before: every partition
    /// of `image` counts as changed and hosted partitions it lacks as deleted. For tests and
    /// tools; the broker follows the metadata through [`Self::apply_delta`].
    pub fn apply_image(&self, image: &MetadataImage) {
        let mut delta = MetadataDelta::between(&MetadataImage::default(), image);
        for p in self.all() {
            let current = image.topic_by_id(&p.topic_id);
            if current.is_none_or(|t| !t.partitions.contains_key(&p.index)) {
                delta
                    .removed_topics
                    .entry(p.topic_id)
                    .or_insert_with(|| RemovedTopic {
                        name: p.topic.clone(),
                        replicas: BTreeMap::new(),
                    })
                    .replicas
                    .insert(p.index, vec![self.config.node_id]);
            }
        }
        self.apply_delta(&delta, image);
    }

    /// Kafka's `ReplicaManager.applyDelta`: touches only what `delta` changed for this broker.
    /// Replicas removed from it (topic deleted, reassigned away) are closed and their logs
    /// deleted; new replicas get their logs opened; changed ones take the new leadership and
    /// ISR; a topic's config change reaches its hosted partitions; a broker change (fencing,
    /// controlled shutdown, a new endpoint) reaches every hosted partition, since it changes
    /// who may join an ISR and where followers fetch from. Runs on the metadata loader thread,
    /// never under the image lock; the partition map's lock is never held across file I/O.
    pub fn apply_delta(&self, delta: &MetadataDelta, image: &MetadataImage) {
        let now_ms = crate::now_ms();
        // Rebuilt per image: cheap beside opening logs, and never stale.
        let known: HashMap<String, i32> = image
            .topics
            .iter()
            .map(|(name, t)| (name.clone(), t.partitions.len() as i32))
            .collect();
        *self.known_topics.write() = known;
        let node = self.config.node_id;
        let changes = delta.local_changes(node, image);
        // A topic created under the name of one still hosted: the old replicas go too.
        let reused: Vec<(String, Uuid)> = delta
            .created_topics
            .iter()
            .filter_map(|id| image.topic_by_id(id).map(|t| (t.name.clone(), *id)))
            .collect();
        let stale: Vec<Arc<Partition>> = {
            let mut parts = self.partitions.write();
            let mut keys: Vec<TopicPartition> = changes
                .deletes
                .iter()
                .filter(|(topic, id, p)| {
                    // Only the replica of that topic id: the name may be reused already.
                    parts
                        .get(&(topic.clone(), *p))
                        .is_some_and(|part| part.topic_id == *id)
                })
                .map(|(topic, _, p)| (topic.clone(), *p))
                .collect();
            keys.extend(
                parts
                    .iter()
                    .filter(|((t, _), part)| {
                        reused.iter().any(|(n, id)| n == t && *id != part.topic_id)
                    })
                    .map(|(k, _)| k.clone()),
            );
            keys.iter().filter_map(|k| parts.remove(k)).collect()
        };
        {
            // Offline replicas of deleted (or re-created) topics are forgotten.
            let mut offline = self.offline.write();
            for (topic, id, p) in &changes.deletes {
                let key = (topic.clone(), *p);
                if offline.get(&key) == Some(id) {
                    offline.remove(&key);
                }
            }
            offline.retain(|(t, _), id| !reused.iter().any(|(n, rid)| n == t && rid != id));
        }
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
            let key = (p.topic.clone(), p.index);
            drop(p);
            // No clean may write into the directory while it goes (Kafka's `abortCleaning`).
            let log_dir = self.log_dir_path(&key);
            self.cleaner_manager.abort_cleaning(&key, log_dir.as_ref());
            if let Some(dir) = self.log_manager.remove(&key) {
                if let Err(e) = std::fs::remove_dir_all(&dir) {
                    tracing::warn!(dir = %dir.display(), error = %e, "failed to delete partition dir");
                }
            }
        }
        // The replicas to (re)apply: changed ones, plus hosted ones whose topic config changed,
        // plus every hosted one when a broker changed.
        let mut touched: std::collections::BTreeSet<(Uuid, i32)> = changes
            .leaders
            .iter()
            .chain(&changes.followers)
            .map(|p| (p.topic_id, p.partition))
            .collect();
        for p in self.all() {
            if !delta.changed_brokers.is_empty() || delta.changed_configs.contains(&p.topic_id) {
                touched.insert((p.topic_id, p.index));
            }
        }
        if touched.is_empty() {
            return;
        }
        // Kafka's `isReplicaIsrEligible`: a fenced or shutting-down broker cannot join an ISR.
        let ineligible: Vec<i32> = image
            .brokers
            .iter()
            .filter(|(_, b)| b.fenced || b.in_controlled_shutdown)
            .map(|(&id, _)| id)
            .collect();
        // KIP-903: and a follower fetching as another incarnation than the registered one.
        let broker_epochs: BTreeMap<i32, i64> =
            image.brokers.iter().map(|(&id, b)| (id, b.epoch)).collect();
        for (id, p) in touched {
            let Some(t) = image.topic_by_id(&id) else {
                continue;
            };
            let Some(reg) = t.partitions.get(&p).filter(|r| r.replicas.contains(&node)) else {
                continue;
            };
            let (topic, configs) = (&t.name, &t.configs);
            let existing = self.get(topic, p).filter(|part| part.topic_id == id);
            let part = match existing {
                Some(part) => {
                    part.update_config(self.config.log_config(configs));
                    part
                }
                // Offline until restart: not opened again on every image.
                None if self.is_offline(topic, p) => continue,
                None => match self.open_partition(topic, p, id, configs) {
                    Ok(part) => part,
                    Err(e) => {
                        self.mark_offline(topic, p, id, &e);
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
            part.set_broker_epochs(&broker_epochs);
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
        let (dir, _) = self.log_manager.partition_dir(topic, p);
        let key = (topic.to_string(), p);
        // A directory left by an earlier topic of the same name must not be reused.
        if let Some(old) = read_partition_metadata(&dir) {
            if old != id {
                tracing::warn!(%topic, partition = p, "removing log of a deleted topic with the same name");
                std::fs::remove_dir_all(&dir)?;
            }
        }
        let recovery_point = self.log_manager.recovery_point(&key);
        let had_clean_shutdown = self
            .log_manager
            .log_dir_of(&key)
            .is_some_and(|d| d.had_clean_shutdown);
        let mut log = UnifiedLog::open(
            &dir,
            self.config.log_config(configs),
            recovery_point,
            had_clean_shutdown,
        )?;
        // The log start may sit inside the first segment (DeleteRecords); only the checkpoint knows.
        if let Some(start) = self.log_manager.checkpointed_log_start_offset(&key) {
            if start > log.log_start_offset() && start <= log.log_end_offset() {
                log.maybe_increment_log_start_offset(start)?;
            }
        }
        write_partition_metadata(&dir, id)?;
        let hw = self.log_manager.checkpointed_high_watermark(&key);
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
        for ((topic, p), path) in self.log_manager.placed() {
            if self.get(&topic, p).is_some() || !path.is_dir() {
                continue;
            }
            let owned = image.topic(&topic).is_some_and(|t| {
                t.partitions
                    .get(&p)
                    .is_some_and(|r| r.replicas.contains(&self.config.node_id))
            });
            if !owned {
                tracing::info!(dir = %path.display(), "removing stray partition log");
                self.log_manager.remove(&(topic, p));
                let _ = std::fs::remove_dir_all(&path);
            }
        }
    }

    /// Writes the recovery-point, log-start-offset and high-watermark checkpoints. A log dir
    /// whose checkpoints cannot be written is offline, and so are its replicas (Kafka's
    /// `handleLogDirFailure`); the first such error is returned.
    pub fn checkpoint(&self) -> Result<(), StorageError> {
        let entries = self
            .all()
            .iter()
            .map(|p| CheckpointEntry {
                partition: (p.topic.clone(), p.index),
                recovery_point: p.recovery_point(),
                log_start_offset: p.log_start_offset(),
                high_watermark: p.high_watermark(),
            })
            .collect();
        let failed = self.log_manager.checkpoint(entries);
        for (dir, e) in &failed {
            for (topic, p) in self.log_manager.partitions_in(dir) {
                if let Some(part) = self.get(&topic, p) {
                    self.mark_offline(&topic, p, part.topic_id, e);
                }
            }
        }
        match failed.into_iter().next() {
            Some((_, e)) => Err(e),
            None => Ok(()),
        }
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
    /// the next start it may skip recovery and, with `broker_epoch` (-1: never registered),
    /// that this incarnation lost nothing.
    pub fn shutdown(&self, broker_epoch: i64) -> Result<(), StorageError> {
        for p in self.all() {
            p.close()?;
        }
        self.checkpoint()?;
        self.log_manager.write_clean_shutdown_markers(broker_epoch)
    }

    /// The broker epoch the previous run's clean shutdown recorded in every log dir (Kafka's
    /// `readBrokerEpochFromCleanShutdownFiles`), -1 if it did not shut down cleanly.
    pub fn previous_broker_epoch(&self) -> i64 {
        self.log_manager.previous_broker_epoch().unwrap_or(-1)
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

//! The controller: validates admin requests against the current image and turns them into
//! metadata records. Records are made durable in the log, then replayed into a new image, then
//! published to the broker, all under one lock so every observer sees images in log order.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::Path;
use std::sync::Arc;

use parking_lot::Mutex;
use thiserror::Error;
use uuid::Uuid;

use crate::cluster_control::BrokerHeartbeatManager;
use crate::image::MetadataImage;
use crate::log::MetadataLog;
use crate::record::MetadataRecord;
use crate::state::{MetadataState, RaftStateMachine};
use crate::topic_config;
use strom_protocol::ErrorCode;
use strom_raft::{MetadataQuorum, QuorumConfig, QuorumError};

/// Controller failures, each tied to the Kafka error it stands for. The broker maps them to wire
/// codes per API.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ControllerError {
    #[error("{0}")]
    TopicAlreadyExists(String),
    #[error("{0}")]
    InvalidTopic(String),
    #[error("{0}")]
    InvalidPartitions(String),
    #[error("{0}")]
    InvalidReplicationFactor(String),
    #[error("{0}")]
    InvalidReplicaAssignment(String),
    #[error("{0}")]
    InvalidConfig(String),
    #[error("{0}")]
    InvalidRequest(String),
    /// Beyond what one operation may ask of the controller ([`crate::limits`]).
    #[error("{0}")]
    PolicyViolation(String),
    #[error("This server does not host this topic-partition.")]
    UnknownTopicOrPartition,
    #[error("This server does not host this topic ID.")]
    UnknownTopicId,
    #[error("metadata log I/O error: {0}")]
    Io(String),
    /// A Kafka error decided by the cluster-control rules (AlterPartition and the like).
    #[error("{message}")]
    Code { code: i16, message: String },
    /// This node is not the active controller; `leader` is, if known.
    #[error("This is not the correct controller for this cluster.")]
    NotController { leader: Option<i32> },
}

impl ControllerError {
    /// The Kafka error code (`Errors.java`) this error is answered with.
    pub fn code(&self) -> i16 {
        match self {
            Self::TopicAlreadyExists(_) => ErrorCode::TopicAlreadyExists.code(),
            Self::InvalidTopic(_) => ErrorCode::InvalidTopicException.code(),
            Self::InvalidPartitions(_) => ErrorCode::InvalidPartitions.code(),
            Self::InvalidReplicationFactor(_) => ErrorCode::InvalidReplicationFactor.code(),
            Self::InvalidReplicaAssignment(_) => ErrorCode::InvalidReplicaAssignment.code(),
            Self::InvalidConfig(_) => ErrorCode::InvalidConfig.code(),
            Self::InvalidRequest(_) => ErrorCode::InvalidRequest.code(),
            Self::PolicyViolation(_) => ErrorCode::PolicyViolation.code(),
            Self::UnknownTopicOrPartition => ErrorCode::UnknownTopicOrPartition.code(),
            Self::UnknownTopicId => ErrorCode::UnknownTopicId.code(),
            Self::Io(_) => ErrorCode::UnknownServerError.code(),
            Self::NotController { .. } => ErrorCode::NotController.code(),
            Self::Code { code, .. } => *code,
        }
    }

    /// The message a response carries with [`Self::code`]: none for the errors whose message
    /// is their code's generic one, as Kafka's `ApiError.fromThrowable` leaves those null.
    pub fn api_message(&self) -> Option<String> {
        match self {
            Self::UnknownTopicOrPartition | Self::UnknownTopicId | Self::NotController { .. } => {
                None
            }
            other => Some(other.to_string()),
        }
    }
}

/// One topic of a CreateTopics request, already decoded from the wire.
#[derive(Debug, Clone, Default)]
pub struct CreateTopicSpec {
    pub name: String,
    /// -1: the broker default.
    pub num_partitions: i32,
    /// -1: the broker default.
    pub replication_factor: i16,
    /// Explicit `(partition, replicas)`; when non-empty the two counts above must be -1.
    pub assignments: Vec<(i32, Vec<i32>)>,
    pub configs: Vec<(String, Option<String>)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatedTopic {
    pub topic_id: Uuid,
    pub num_partitions: i32,
    pub replication_factor: i16,
    pub configs: BTreeMap<String, String>,
}

/// One topic of a CreatePartitions request, already decoded from the wire.
#[derive(Debug, Clone, Default)]
pub struct CreatePartitionsSpec {
    pub name: String,
    /// The partition count the topic grows to.
    pub count: i32,
    /// The replicas of each new partition, in order; `None`: placed by the controller.
    pub assignments: Option<Vec<Vec<i32>>>,
}

/// IncrementalAlterConfigs operations (`AlterConfigOp.OpType` wire values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlterConfigOp {
    Set = 0,
    Delete = 1,
    Append = 2,
    Subtract = 3,
}

impl AlterConfigOp {
    pub fn from_i8(v: i8) -> Option<Self> {
        Some(match v {
            0 => Self::Set,
            1 => Self::Delete,
            2 => Self::Append,
            3 => Self::Subtract,
            _ => return None,
        })
    }
}

/// Producer ids are handed to brokers in blocks of this many (Kafka's `PRODUCER_ID_BLOCK_SIZE`).
pub const PRODUCER_ID_BLOCK_SIZE: i32 = 1000;

/// Ids `start .. start + len` belong to one broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerIdBlock {
    pub start: i64,
    pub len: i32,
}

impl ProducerIdBlock {
    pub fn end(&self) -> i64 {
        self.start + self.len as i64
    }
}

#[derive(Debug, Clone, Copy)]
pub struct TopicDefaults {
    pub num_partitions: i32,
    pub replication_factor: i16,
}

/// Receives every new metadata image with what changed, in log order. It is called on the
/// replay path (openraft's apply, under the image lock), so it must only hand the two on — the
/// broker's `MetadataLoader` queues them for its publishers — and never block or do I/O.
pub type Publisher = Box<dyn Fn(crate::delta::MetadataDelta, &Arc<MetadataImage>) + Send + Sync>;

/// Where records are made durable: a local file (a single-node cluster) or the Raft quorum.
enum Backend {
    Local(Mutex<MetadataLog>),
    Raft(MetadataQuorum),
}

pub struct QuorumController {
    backend: Backend,
    state: Arc<MetadataState>,
    /// Validation and commit of one request happen under this lock, so every request is checked
    /// against the image its records will apply to (Kafka's single-threaded controller).
    op_lock: tokio::sync::Mutex<()>,
    defaults: TopicDefaults,
    /// The broker's value for each topic config it sets (`log.cleaner.min.compaction.lag.ms`
    /// for `min.compaction.lag.ms`, ...), which Kafka's controller validates a topic's own
    /// values against (`KafkaConfig.extractLogConfigMap`). Unset: the topic configs' defaults.
    broker_topic_defaults: std::sync::OnceLock<BTreeMap<String, String>>,
    /// Last contact per broker; only meaningful on the active controller, so it is reset
    /// (every broker gets a fresh session) whenever this node becomes active.
    heartbeats: Mutex<(bool, BrokerHeartbeatManager)>,
    /// The cluster id of this node's log dirs (`meta.properties`); registrations from brokers
    /// formatted for another cluster are refused. Unset: not checked.
    cluster_id: std::sync::OnceLock<String>,
    /// `broker.session.timeout.ms`, for the registration's live-session check.
    broker_session_timeout_ms: std::sync::atomic::AtomicU64,
    /// `strom.unsafe.trust.restarted.brokers`: registrations skip Kafka's incarnation checks
    /// (see `broker_registration::Incarnations`). Only for tests of the nemesis checker.
    unsafe_trust_restarted_brokers: std::sync::atomic::AtomicBool,
    /// Tests: check live sessions at registration on a single node too.
    #[cfg(test)]
    check_registration_sessions: std::sync::atomic::AtomicBool,
}

impl QuorumController {
    /// A single-node controller: opens the metadata log at `path` and replays it.
    pub fn open(path: &Path, defaults: TopicDefaults) -> Result<Self, ControllerError> {
        let (log, records) =
            MetadataLog::open(path).map_err(|e| ControllerError::Io(e.to_string()))?;
        let state = Arc::new(MetadataState::default());
        state.apply(&records);
        tracing::info!(
            records = records.len(),
            topics = state.image().topics.len(),
            "metadata log replayed"
        );
        Ok(Self {
            backend: Backend::Local(Mutex::new(log)),
            state,
            op_lock: tokio::sync::Mutex::new(()),
            defaults,
            broker_topic_defaults: std::sync::OnceLock::new(),
            heartbeats: Mutex::new((false, BrokerHeartbeatManager::new())),
            cluster_id: std::sync::OnceLock::new(),
            broker_session_timeout_ms: std::sync::atomic::AtomicU64::new(
                crate::cluster_control::DEFAULT_BROKER_SESSION_TIMEOUT_MS,
            ),
            unsafe_trust_restarted_brokers: std::sync::atomic::AtomicBool::new(false),
            #[cfg(test)]
            check_registration_sessions: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// A controller that is one voter of a Raft quorum. Every voter replays the committed
    /// records through the same [`MetadataImage::replay`]; only the leader (the active
    /// controller) accepts requests.
    pub async fn start_quorum(
        config: QuorumConfig,
        defaults: TopicDefaults,
    ) -> Result<Self, ControllerError> {
        let state = Arc::new(MetadataState::default());
        let quorum = MetadataQuorum::start(config, Arc::new(RaftStateMachine(state.clone())))
            .await
            .map_err(|e| ControllerError::Io(e.to_string()))?;
        Ok(Self {
            backend: Backend::Raft(quorum),
            state,
            op_lock: tokio::sync::Mutex::new(()),
            defaults,
            broker_topic_defaults: std::sync::OnceLock::new(),
            heartbeats: Mutex::new((false, BrokerHeartbeatManager::new())),
            cluster_id: std::sync::OnceLock::new(),
            broker_session_timeout_ms: std::sync::atomic::AtomicU64::new(
                crate::cluster_control::DEFAULT_BROKER_SESSION_TIMEOUT_MS,
            ),
            unsafe_trust_restarted_brokers: std::sync::atomic::AtomicBool::new(false),
            #[cfg(test)]
            check_registration_sessions: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Registers the function that receives every new image and its delta. It is called at once
    /// with the current image (and a delta from nothing).
    pub fn set_publisher(&self, publisher: Publisher) {
        self.state.set_publisher(publisher);
    }

    pub fn image(&self) -> Arc<MetadataImage> {
        self.state.image()
    }

    pub fn defaults(&self) -> TopicDefaults {
        self.defaults
    }

    /// Sets, once at start-up, the broker's values of topic configs (keyed by the topic
    /// config's name) that topic configs are validated over; later calls are ignored.
    pub fn set_broker_topic_defaults(&self, values: BTreeMap<String, String>) {
        let _ = self.broker_topic_defaults.set(values);
    }

    /// Sets, once at start-up, this node's cluster id (later calls are ignored).
    pub fn set_cluster_id(&self, cluster_id: String) {
        let _ = self.cluster_id.set(cluster_id);
    }

    /// Sets `broker.session.timeout.ms` (default Kafka's 9 s).
    pub fn set_broker_session_timeout_ms(&self, ms: u64) {
        self.broker_session_timeout_ms
            .store(ms, std::sync::atomic::Ordering::Relaxed);
    }

    /// Turns Kafka's checks of restarted brokers off (`strom.unsafe.trust.restarted.brokers`):
    /// a broker that lost data may lead again with what it has left. Tests only.
    pub fn set_unsafe_trust_restarted_brokers(&self, on: bool) {
        if on {
            tracing::warn!(
                "strom.unsafe.trust.restarted.brokers=true: restarted brokers are trusted; a \
                 broker that lost data may lead again and acknowledged records may be lost"
            );
        }
        self.unsafe_trust_restarted_brokers
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    fn unsafe_trust_restarted_brokers(&self) -> bool {
        self.unsafe_trust_restarted_brokers
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    fn broker_session_timeout_ms(&self) -> u64 {
        self.broker_session_timeout_ms
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether a single node checks the registered incarnation's session as a cluster does
    /// (never outside tests: there the old incarnation was this very process).
    fn registration_sessions_checked(&self) -> bool {
        #[cfg(test)]
        return self
            .check_registration_sessions
            .load(std::sync::atomic::Ordering::Relaxed);
        #[cfg(not(test))]
        false
    }

    /// A topic config's value when the topic does not set it.
    fn topic_default(&self, name: &str) -> String {
        self.broker_topic_defaults
            .get()
            .and_then(|m| m.get(name).cloned())
            .or_else(|| topic_config::find(name).map(|d| d.default.to_string()))
            .unwrap_or_default()
    }

    /// Kafka's `LogConfig.validateValues` over `configs` and the broker's defaults.
    fn validate_topic_values(
        &self,
        configs: &BTreeMap<String, String>,
    ) -> Result<(), ControllerError> {
        let effective = |k: &str| {
            configs
                .get(k)
                .cloned()
                .unwrap_or_else(|| self.topic_default(k))
        };
        topic_config::validate_values(&effective).map_err(ControllerError::InvalidConfig)
    }

    /// How far this node has replayed the metadata log: the offset of the last record replayed
    /// (Kafka's `currentMetadataOffset`), -1 before anything; record offsets are those broker
    /// epochs are. A broker's heartbeat carries its own: the active controller unfences it once
    /// it has replayed its registration, and tells it it has caught up once it has replayed
    /// what the controller has.
    pub fn applied_offset(&self) -> i64 {
        self.state.image().offset as i64 - 1
    }

    /// Whether this node is the active controller as the quorum knows it, with everything in its
    /// log replayed: only such a controller may tell a broker (itself included) that it has
    /// caught up. Unlike [`Self::is_active`], false for a voter that restarted with a vote for
    /// itself and calls itself leader until it learns of the newer term.
    pub fn is_confirmed_active(&self) -> bool {
        match &self.backend {
            Backend::Local(_) => true,
            Backend::Raft(q) => {
                let s = q.status();
                s.leader_acknowledged && s.last_applied >= s.last_log_index
            }
        }
    }

    /// Whether this node is the active controller (always, on a single node).
    pub fn is_active(&self) -> bool {
        match &self.backend {
            Backend::Local(_) => true,
            Backend::Raft(q) => q.is_leader(),
        }
    }

    /// The active controller's node id, if known.
    pub fn active_controller(&self) -> Option<i32> {
        match &self.backend {
            Backend::Local(_) => None,
            Backend::Raft(q) => q.leader().map(|l| l as i32),
        }
    }

    /// The controller epoch (the Raft term; 0 on a single node).
    pub fn epoch(&self) -> u64 {
        match &self.backend {
            Backend::Local(_) => 0,
            Backend::Raft(q) => q.term(),
        }
    }

    /// Waits (bounded) until a controller is elected; returns its node id.
    pub async fn wait_for_leader(
        &self,
        timeout: std::time::Duration,
    ) -> Result<Option<i32>, ControllerError> {
        match &self.backend {
            Backend::Local(_) => Ok(None),
            Backend::Raft(q) => q
                .wait_for_leader(timeout)
                .await
                .map(|l| Some(l as i32))
                .map_err(|e| ControllerError::Io(e.to_string())),
        }
    }

    pub async fn shutdown(&self) {
        if let Backend::Raft(q) = &self.backend {
            let _ = q.shutdown().await;
        }
    }

    /// Makes records durable, then replays them and publishes the new image. With Raft the
    /// replay happens in the state machine when the entry commits, before `propose` returns.
    async fn commit(&self, records: Vec<MetadataRecord>) -> Result<(), ControllerError> {
        if records.is_empty() {
            return Ok(());
        }
        match &self.backend {
            Backend::Local(log) => {
                log.lock()
                    .append(&records)
                    .map_err(|e| ControllerError::Io(e.to_string()))?;
                self.state.apply(&records);
                Ok(())
            }
            Backend::Raft(q) => {
                let payload =
                    serde_json::to_vec(&records).map_err(|e| ControllerError::Io(e.to_string()))?;
                match q.propose(payload).await {
                    Ok(_) => Ok(()),
                    Err(QuorumError::NotLeader { leader }) => Err(ControllerError::NotController {
                        leader: leader.map(|l| l as i32),
                    }),
                    // Kafka's Raft client refuses a batch over its bound with
                    // RecordBatchTooLargeException, which the controller answers as is.
                    Err(e @ QuorumError::PayloadTooLarge { .. }) => Err(ControllerError::Code {
                        code: ErrorCode::RecordListTooLarge.code(),
                        message: e.to_string(),
                    }),
                    Err(e) => Err(ControllerError::Io(e.to_string())),
                }
            }
        }
    }

    /// AlterPartition from a partition leader registered under `broker_epoch`: an ISR change
    /// checked against the broker epochs, the partition and leader epochs (Kafka's
    /// `ReplicationControlManager.alterPartition`, KIP-903).
    #[allow(clippy::too_many_arguments)]
    pub async fn alter_partition(
        &self,
        broker_id: i32,
        broker_epoch: i64,
        topic_id: Uuid,
        partition: i32,
        leader_epoch: i32,
        partition_epoch: i32,
        new_isr: &[crate::partition_change::BrokerState],
    ) -> Result<(), ControllerError> {
        let _op = self.op_lock.lock().await;
        self.check_active()?;
        let image = self.image();
        let records = crate::partition_change::alter_partition(
            &image,
            broker_id,
            broker_epoch,
            topic_id,
            partition,
            leader_epoch,
            partition_epoch,
            new_isr,
        )
        .map_err(|e| ControllerError::Code {
            code: e.code(),
            message: e.to_string(),
        })?;
        self.commit(records).await
    }

    /// ElectLeaders (Kafka's `ReplicationControlManager.electLeaders`): `election_type` 0 is
    /// PREFERRED, 1 UNCLEAN; `partitions` `None` means every partition, and then partitions that
    /// need no election are left out of the results, as in Kafka. All changes are committed in
    /// one batch. Per-partition results carry Kafka codes (`ElectLeadersError::code`).
    #[allow(clippy::type_complexity)]
    pub async fn elect_leaders(
        &self,
        election_type: i8,
        partitions: Option<Vec<(String, i32)>>,
    ) -> Result<
        Vec<(
            String,
            i32,
            Result<(), crate::partition_change::ElectLeadersError>,
        )>,
        ControllerError,
    > {
        use crate::partition_change::{
            preferred_leader_election, unclean_leader_election, ElectLeadersError,
        };
        let _op = self.op_lock.lock().await;
        self.check_active()?;
        if election_type != 0 && election_type != 1 {
            return Err(ControllerError::InvalidRequest(format!(
                "Unknown election type {election_type}"
            )));
        }
        let image = self.image();
        let all = partitions.is_none();
        let targets: Vec<(String, i32)> = match partitions {
            Some(p) => {
                let mut seen = HashSet::new();
                p.into_iter().filter(|x| seen.insert(x.clone())).collect()
            }
            None => image
                .topics
                .values()
                .flat_map(|t| t.partitions.keys().map(|&p| (t.name.clone(), p)))
                .collect(),
        };
        let mut records = Vec::new();
        let mut results = Vec::new();
        for (topic, partition) in targets {
            let r = if election_type == 0 {
                preferred_leader_election(&image, &topic, partition)
            } else {
                unclean_leader_election(&image, &topic, partition)
            };
            let r = r.map(|recs| records.extend(recs));
            if all && r == Err(ElectLeadersError::ElectionNotNeeded) {
                continue;
            }
            results.push((topic, partition, r));
        }
        self.commit(records).await?;
        Ok(results)
    }

    /// AlterPartitionReassignments: starts (`Some(target)`) or cancels (`None`) the
    /// reassignment of each `(topic, partition)`; one result per partition, in order.
    pub async fn alter_partition_reassignments(
        &self,
        partitions: Vec<(String, i32, Option<Vec<i32>>)>,
    ) -> Result<
        Vec<(
            String,
            i32,
            Result<(), crate::partition_change::ReassignmentError>,
        )>,
        ControllerError,
    > {
        let _op = self.op_lock.lock().await;
        self.check_active()?;
        let mut image = (*self.image()).clone();
        let mut records = Vec::new();
        let mut results = Vec::new();
        for (topic, partition, target) in partitions {
            let r = crate::partition_change::alter_partition_reassignment(
                &image, &topic, partition, target,
            )
            .map(|recs| {
                // Later entries for the same partition see this change.
                for rec in &recs {
                    image.replay(rec);
                }
                records.extend(recs);
            });
            results.push((topic, partition, r));
        }
        self.commit(records).await?;
        Ok(results)
    }

    /// ListPartitionReassignments: the ongoing reassignments among `topics` (name and
    /// partitions; unknown ones are skipped), or all of them, as
    /// `(topic, partition, replicas, adding, removing)`.
    #[allow(clippy::type_complexity)]
    pub async fn list_partition_reassignments(
        &self,
        topics: Option<Vec<(String, Vec<i32>)>>,
    ) -> Result<Vec<(String, i32, Vec<i32>, Vec<i32>, Vec<i32>)>, ControllerError> {
        let _op = self.op_lock.lock().await;
        self.check_active()?;
        let image = self.image();
        let wanted: Vec<(String, i32)> = match topics {
            Some(ts) => ts
                .into_iter()
                .flat_map(|(t, ps)| ps.into_iter().map(move |p| (t.clone(), p)))
                .collect(),
            None => image
                .topics
                .values()
                .flat_map(|t| t.partitions.keys().map(|&p| (t.name.clone(), p)))
                .collect(),
        };
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        for (topic, p) in wanted {
            if !seen.insert((topic.clone(), p)) {
                continue;
            }
            if let Some(reg) = image.topic(&topic).and_then(|t| t.partitions.get(&p)) {
                if reg.is_reassigning() {
                    out.push((
                        topic,
                        p,
                        reg.replicas.clone(),
                        reg.adding_replicas.clone(),
                        reg.removing_replicas.clone(),
                    ));
                }
            }
        }
        Ok(out)
    }

    /// `auto.leader.rebalance.enable`: on the active controller, moves leadership back to the
    /// preferred replica of every partition where that replica can lead (Kafka's
    /// `maybeBalancePartitionLeaders`), in batches of at most `max` changes. Returns how many
    /// partitions changed.
    pub async fn balance_partition_leaders(&self, max: usize) -> usize {
        let mut changed = 0;
        loop {
            let _op = self.op_lock.lock().await;
            if self.check_active().is_err() {
                return changed;
            }
            let (records, more) =
                crate::cluster_control::balance_partition_leaders(&self.image(), max.max(1));
            let n = records.len();
            if let Err(e) = self.commit(records).await {
                tracing::warn!(error = %e, "leader rebalance failed");
                return changed;
            }
            changed += n;
            if !more || n == 0 {
                return changed;
            }
        }
    }

    /// Refuses requests on a standby controller before any validation.
    fn check_active(&self) -> Result<(), ControllerError> {
        if self.is_active() {
            Ok(())
        } else {
            Err(ControllerError::NotController {
                leader: self.active_controller(),
            })
        }
    }

    /// Hands `broker_id` the next block of [`PRODUCER_ID_BLOCK_SIZE`] producer ids (Kafka's
    /// AllocateProducerIds, KIP-730). The block is durable before it is returned, so no id is
    /// ever issued twice, across restarts and brokers.
    pub async fn allocate_producer_ids(
        &self,
        broker_id: i32,
    ) -> Result<ProducerIdBlock, ControllerError> {
        let _op = self.op_lock.lock().await;
        self.check_active()?;
        let image = self.image();
        let start = image.next_producer_id;
        if start > i64::MAX - PRODUCER_ID_BLOCK_SIZE as i64 {
            return Err(ControllerError::InvalidRequest(
                "Exhausted all producer ids.".into(),
            ));
        }
        let next = start + PRODUCER_ID_BLOCK_SIZE as i64;
        self.commit(vec![MetadataRecord::ProducerIds {
            broker_id,
            next_producer_id: next,
        }])
        .await?;
        Ok(ProducerIdBlock {
            start,
            len: PRODUCER_ID_BLOCK_SIZE,
        })
    }

    /// IncrementalAlterConfigs for one topic.
    pub async fn incremental_alter_topic_configs(
        &self,
        topic: &str,
        ops: &[(String, AlterConfigOp, Option<String>)],
        validate_only: bool,
    ) -> Result<(), ControllerError> {
        let _op = self.op_lock.lock().await;
        self.check_active()?;
        self.alter_topic_configs_locked(topic, ops, validate_only)
            .await
    }

    /// The legacy AlterConfigs for one topic: `configs` become the topic's whole set (every
    /// config not named goes back to its default), validated as IncrementalAlterConfigs is.
    pub async fn alter_topic_configs(
        &self,
        topic: &str,
        configs: &[(String, Option<String>)],
        validate_only: bool,
    ) -> Result<(), ControllerError> {
        let _op = self.op_lock.lock().await;
        self.check_active()?;
        let image = self.image();
        let t = image
            .topic(topic)
            .ok_or(ControllerError::UnknownTopicOrPartition)?;
        let mut ops: Vec<(String, AlterConfigOp, Option<String>)> = configs
            .iter()
            .map(|(k, v)| (k.clone(), AlterConfigOp::Set, v.clone()))
            .collect();
        for k in t.configs.keys() {
            if !configs.iter().any(|(n, _)| n == k) {
                ops.push((k.clone(), AlterConfigOp::Delete, None));
            }
        }
        self.alter_topic_configs_locked(topic, &ops, validate_only)
            .await
    }

    /// Applies config `ops` to `topic` under the op lock (held by the caller).
    async fn alter_topic_configs_locked(
        &self,
        topic: &str,
        ops: &[(String, AlterConfigOp, Option<String>)],
        validate_only: bool,
    ) -> Result<(), ControllerError> {
        let image = self.image();
        let t = image
            .topic(topic)
            .ok_or(ControllerError::UnknownTopicOrPartition)?;
        let mut configs = t.configs.clone();
        let mut seen = HashSet::new();
        for (name, op, value) in ops {
            if !seen.insert(name.as_str()) {
                return Err(ControllerError::InvalidRequest(format!(
                    "Error due to duplicate config keys: {name}"
                )));
            }
            let def = topic_config::find(name).ok_or_else(|| {
                ControllerError::InvalidConfig(format!("Unknown topic config name: {name}"))
            })?;
            match op {
                AlterConfigOp::Set => {
                    let v = value.clone().ok_or_else(|| {
                        ControllerError::InvalidRequest(format!(
                            "Null value not supported for: {name}"
                        ))
                    })?;
                    topic_config::validate_for_topic(topic, name, &v)
                        .map_err(ControllerError::InvalidConfig)?;
                    configs.insert(name.clone(), v);
                }
                AlterConfigOp::Delete => {
                    configs.remove(name);
                }
                AlterConfigOp::Append | AlterConfigOp::Subtract => {
                    if def.ty != topic_config::ConfigType::List {
                        let verb = if *op == AlterConfigOp::Append {
                            "APPEND"
                        } else {
                            "SUBTRACT"
                        };
                        return Err(ControllerError::InvalidConfig(format!(
                            "Can't {verb} to key {name} because its type is not LIST."
                        )));
                    }
                    // Kafka appends to (subtracts from) the value in force, the broker's
                    // default when the topic has none.
                    let current = configs
                        .get(name)
                        .cloned()
                        .unwrap_or_else(|| self.topic_default(name));
                    let mut items: Vec<String> = topic_config::list_items(&current)
                        .into_iter()
                        .map(str::to_string)
                        .collect();
                    for v in topic_config::list_items(value.as_deref().unwrap_or("")) {
                        if *op == AlterConfigOp::Append {
                            if !items.iter().any(|i| i == v) {
                                items.push(v.to_string());
                            }
                        } else {
                            items.retain(|i| i != v);
                        }
                    }
                    let joined = items.join(",");
                    topic_config::validate(name, &joined)
                        .map_err(ControllerError::InvalidConfig)?;
                    configs.insert(name.clone(), joined);
                }
            }
        }
        self.validate_topic_values(&configs)?;
        if validate_only {
            return Ok(());
        }
        let old = &t.configs;
        let keys: BTreeSet<&String> = old.keys().chain(configs.keys()).collect();
        let records = keys
            .into_iter()
            .filter(|k| old.get(*k) != configs.get(*k))
            .map(|k| MetadataRecord::TopicConfig {
                topic: topic.to_string(),
                name: k.clone(),
                value: configs.get(k).cloned(),
            })
            .collect();
        self.commit(records).await
    }
}

#[path = "topics.rs"]
mod topics;

#[path = "broker_lifecycle.rs"]
mod broker_lifecycle;
pub use broker_lifecycle::HeartbeatReply;

#[path = "log_dirs.rs"]
pub mod log_dirs;

/// Broker lifecycle shortcuts for the tests of this crate.
#[cfg(test)]
impl QuorumController {
    /// Registers incarnation `incarnation` of broker `b` (after a clean shutdown in epoch
    /// `previous_broker_epoch`, -1: none).
    pub(crate) async fn register_for_test(
        &self,
        b: i32,
        incarnation: u128,
        previous_broker_epoch: i64,
        now_ms: u64,
    ) -> Result<i64, ControllerError> {
        let req = crate::broker_registration::BrokerRegistration {
            node_id: b,
            incarnation_id: Uuid::from_u128(incarnation),
            host: "127.0.0.1".into(),
            port: 9090 + b,
            rack: None,
            previous_broker_epoch,
        };
        self.register_broker(&req, None, now_ms, false).await
    }

    /// A heartbeat of broker `b` under its registered epoch, having replayed everything.
    pub(crate) async fn heartbeat_for_test(
        &self,
        b: i32,
        now_ms: u64,
    ) -> Result<HeartbeatReply, ControllerError> {
        let epoch = self.image().brokers.get(&b).map_or(-1, |i| i.epoch);
        self.heartbeat(b, epoch, self.applied_offset(), now_ms, false)
            .await
    }

    /// Broker `b`'s first incarnation (id `b`), registered and unfenced at `now_ms`.
    pub(crate) async fn add_broker_for_test(
        &self,
        b: i32,
        now_ms: u64,
    ) -> Result<i64, ControllerError> {
        let epoch = self.register_for_test(b, b as u128, -1, now_ms).await?;
        self.heartbeat_for_test(b, now_ms).await?;
        Ok(epoch)
    }

    /// Makes this single-node controller check live sessions at registration, as a quorum's.
    pub(crate) fn check_registration_sessions_for_test(&self) {
        self.check_registration_sessions
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// A heartbeat with `wantShutDown` under the registered epoch.
    pub(crate) async fn controlled_shutdown_for_test(
        &self,
        b: i32,
        now_ms: u64,
    ) -> Result<bool, ControllerError> {
        let epoch = self.image().brokers.get(&b).map_or(-1, |i| i.epoch);
        self.controlled_shutdown(b, epoch, now_ms, false).await
    }
}

#[cfg(test)]
#[path = "controller_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "placement_tests.rs"]
mod placement_tests;

//! The group coordinator inside the broker: the service (crate `strom-group-coordinator`) is
//! given this broker's partitions to write and load ([`partitions`]), follows the metadata
//! ([`GroupCoordinatorPublisher`]: elected / resigned for the `__consumer_offsets` partitions
//! this broker starts or stops leading, the topics image when topics change), hears every move
//! of those partitions' high watermarks ([`HighWatermarkForwarder`]), and gets
//! `__consumer_offsets` created on first use ([`offsets_topic_spec`]), as Kafka's
//! `BrokerMetadataPublisher`, `CoordinatorPartitionWriter` and `AutoTopicCreationManager` do.

pub mod partitions;
#[cfg(test)]
mod tests;
pub mod transactions;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use parking_lot::Mutex;
use strom_controller::{CreateTopicSpec, MetadataDelta, MetadataImage};
use strom_group_coordinator::config::GroupCoordinatorConfig;
use strom_group_coordinator::metadata::{GroupMetadataImage, TopicImage};
use strom_group_coordinator::topic::GROUP_METADATA_TOPIC_NAME;
use strom_group_coordinator::GroupCoordinatorService;

use crate::metadata_loader::MetadataPublisher;
use crate::partition::HighWatermarkListener;
use crate::replica_manager::ReplicaManager;

pub use partitions::CoordinatorPartitions;

/// Starts the group coordinator over `replica_manager`'s partitions with the broker's
/// properties (Kafka's names and defaults).
pub fn start_group_coordinator(
    props: &BTreeMap<String, String>,
    replica_manager: &Arc<ReplicaManager>,
) -> Arc<GroupCoordinatorService> {
    let io = CoordinatorPartitions::new(replica_manager.clone());
    GroupCoordinatorService::new(GroupCoordinatorConfig::from_props(props), io.clone(), io)
}

/// What the metadata drives on a coordinator service. Kafka's two coordinators (group,
/// transaction) are elected, resigned and told HW moves per partition of their internal topic
/// in the same way (`BrokerMetadataPublisher.updateCoordinator`), so one
/// [`CoordinatorElections`] and one [`HighWatermarkForwarder`] serve both.
pub trait PartitionCoordinator: Send + Sync + 'static {
    /// The coordinator's internal topic (`__consumer_offsets`, `__transaction_state`).
    const TOPIC: &'static str;
    fn on_elected(&self, partition: i32, leader_epoch: i32);
    fn on_resigned(&self, partition: i32, leader_epoch: Option<i32>);
    fn on_high_watermark(&self, partition: i32, high_watermark: i64);
}

impl PartitionCoordinator for GroupCoordinatorService {
    const TOPIC: &'static str = GROUP_METADATA_TOPIC_NAME;
    fn on_elected(&self, partition: i32, leader_epoch: i32) {
        GroupCoordinatorService::on_elected(self, partition, leader_epoch)
    }
    fn on_resigned(&self, partition: i32, leader_epoch: Option<i32>) {
        GroupCoordinatorService::on_resigned(self, partition, leader_epoch)
    }
    fn on_high_watermark(&self, partition: i32, high_watermark: i64) {
        GroupCoordinatorService::on_high_watermark(self, partition, high_watermark)
    }
}

/// Tells a coordinator every HW move of a partition of its topic.
pub struct HighWatermarkForwarder<S>(pub Arc<S>);

impl<S: PartitionCoordinator> HighWatermarkListener for HighWatermarkForwarder<S> {
    fn on_high_watermark(&self, topic: &str, partition: i32, high_watermark: i64) {
        if topic == S::TOPIC {
            self.0.on_high_watermark(partition, high_watermark);
        }
    }
}

/// Elects and resigns a coordinator's partitions as this broker starts or stops leading them
/// (Kafka's `BrokerMetadataPublisher.updateCoordinator`), attaching the HW listener while it
/// leads.
pub struct CoordinatorElections<S> {
    node_id: i32,
    service: Arc<S>,
    replica_manager: Arc<ReplicaManager>,
    listener: Arc<dyn HighWatermarkListener>,
}

impl<S: PartitionCoordinator> CoordinatorElections<S> {
    pub fn new(node_id: i32, service: Arc<S>, replica_manager: Arc<ReplicaManager>) -> Self {
        let listener = Arc::new(HighWatermarkForwarder(service.clone()));
        Self {
            node_id,
            service,
            replica_manager,
            listener,
        }
    }

    fn set_listener(&self, partition: i32, on: bool) {
        if let Some(p) = self.replica_manager.get(S::TOPIC, partition) {
            p.set_high_watermark_listener(on.then(|| self.listener.clone()));
        }
    }

    /// Applies this delta's leadership changes of the coordinator's topic.
    pub fn update(&self, delta: &MetadataDelta, image: &Arc<MetadataImage>) {
        let changes = delta.local_changes(self.node_id, image);
        for p in changes.leaders.iter().filter(|p| p.topic == S::TOPIC) {
            // The listener first, so no HW move after the load's snapshot is missed. The
            // runtime keeps a shard already loaded at this epoch (an ISR change re-lists
            // the partition among the leaders).
            self.set_listener(p.partition, true);
            self.service
                .on_elected(p.partition, p.registration.leader_epoch);
        }
        for p in changes.followers.iter().filter(|p| p.topic == S::TOPIC) {
            self.set_listener(p.partition, false);
            self.service
                .on_resigned(p.partition, Some(p.registration.leader_epoch));
        }
        for (topic, _, partition) in &changes.deletes {
            if topic == S::TOPIC {
                self.service.on_resigned(*partition, None);
            }
        }
    }
}

/// Follows the metadata for the group coordinator (Kafka's `BrokerMetadataPublisher` calling
/// `GroupCoordinator.onElection` / `onResignation` / `onNewMetadataImage`). Runs on the loader
/// thread after the replica manager has applied the same delta, so an elected partition is
/// already leader here; the service's methods only queue, so this never blocks the loader.
pub struct GroupCoordinatorPublisher {
    elections: CoordinatorElections<GroupCoordinatorService>,
    service: Arc<GroupCoordinatorService>,
    /// The topics image last handed to the service (only a change is handed on).
    last_image: Mutex<Option<GroupMetadataImage>>,
}

impl GroupCoordinatorPublisher {
    pub fn new(
        node_id: i32,
        service: Arc<GroupCoordinatorService>,
        replica_manager: Arc<ReplicaManager>,
    ) -> Arc<Self> {
        Arc::new(Self {
            elections: CoordinatorElections::new(node_id, service.clone(), replica_manager),
            service,
            last_image: Mutex::new(None),
        })
    }
}

impl MetadataPublisher for GroupCoordinatorPublisher {
    fn name(&self) -> &str {
        "GroupCoordinatorPublisher"
    }

    fn on_metadata_update(&self, delta: &MetadataDelta, image: &Arc<MetadataImage>) {
        self.elections.update(delta, image);
        let topics_touched = !delta.created_topics.is_empty()
            || !delta.removed_topics.is_empty()
            || !delta.changed_partitions.is_empty()
            || !delta.changed_brokers.is_empty();
        if topics_touched {
            let next = group_metadata_image(image);
            let mut last = self.last_image.lock();
            if last.as_ref() != Some(&next) {
                *last = Some(next.clone());
                drop(last);
                self.service.on_new_metadata(next);
            }
        }
    }
}

/// The topics as the group coordinator sees them: names, ids, partition counts, and for each
/// partition the racks of the brokers holding its replicas (brokers without a rack add none).
pub fn group_metadata_image(image: &MetadataImage) -> GroupMetadataImage {
    GroupMetadataImage::new(image.topics.values().map(|t| {
        let partition_racks = t
            .partitions
            .iter()
            .filter_map(|(p, reg)| {
                let racks: BTreeSet<String> = reg
                    .replicas
                    .iter()
                    .filter_map(|r| image.brokers.get(r).and_then(|b| b.rack.clone()))
                    .collect();
                (!racks.is_empty()).then_some((*p, racks))
            })
            .collect();
        TopicImage {
            name: t.name.clone(),
            id: t.id,
            num_partitions: t.partitions.len() as i32,
            partition_racks,
        }
    }))
}

/// The group coordinator's broker settings that Strom reads, with Kafka 4.4's types
/// (`ConfigEntry.ConfigType` numbering: 3 INT, 4 SHORT, 5 LONG, 7 LIST, 2 STRING) and defaults
/// (`GroupCoordinatorConfig.CONFIG_DEF`, equal to `GroupCoordinatorConfig::default()`), for
/// DescribeConfigs of the broker.
pub const BROKER_CONFIGS: &[(&str, i8, &str)] = &[
    ("group.consumer.assignors", 7, "uniform,range"),
    ("group.consumer.heartbeat.interval.ms", 3, "5000"),
    ("group.consumer.max.heartbeat.interval.ms", 3, "15000"),
    ("group.consumer.max.session.timeout.ms", 3, "60000"),
    ("group.consumer.max.size", 3, "2147483647"),
    ("group.consumer.migration.policy", 2, "bidirectional"),
    ("group.consumer.min.heartbeat.interval.ms", 3, "5000"),
    ("group.consumer.min.session.timeout.ms", 3, "45000"),
    ("group.consumer.session.timeout.ms", 3, "45000"),
    ("group.initial.rebalance.delay.ms", 3, "3000"),
    ("group.max.session.timeout.ms", 3, "1800000"),
    ("group.max.size", 3, "2147483647"),
    ("group.min.session.timeout.ms", 3, "6000"),
    ("offset.metadata.max.bytes", 3, "4096"),
    ("offsets.commit.timeout.ms", 3, "5000"),
    ("offsets.retention.check.interval.ms", 5, "600000"),
    ("offsets.topic.num.partitions", 3, "50"),
    ("offsets.topic.replication.factor", 4, "3"),
    ("offsets.topic.segment.bytes", 3, "104857600"),
];

/// `__consumer_offsets` as Kafka's `AutoTopicCreationManager` creates it: the configured
/// partition count, the configured replication factor but at most the brokers that can host a
/// replica now (so a single node gets a usable topic), compacted, with the configured segment
/// size.
pub fn offsets_topic_spec(
    config: &GroupCoordinatorConfig,
    image: &MetadataImage,
) -> CreateTopicSpec {
    let cfg = &config.offsets_topic;
    let usable = image
        .brokers
        .values()
        .filter(|b| !b.fenced && !b.in_controlled_shutdown)
        .count();
    CreateTopicSpec {
        name: GROUP_METADATA_TOPIC_NAME.to_string(),
        num_partitions: cfg.num_partitions,
        replication_factor: cfg.effective_replication_factor(usable),
        assignments: Vec::new(),
        configs: cfg
            .topic_configs()
            .into_iter()
            .map(|(k, v)| (k, Some(v)))
            .collect(),
    }
}

//! The group coordinator's API surface (Kafka's `GroupCoordinatorService`): the broker's
//! handlers call these methods with decoded requests and send back what they return. Each
//! request is routed to the shard of its group's `__consumer_offsets` partition; batched
//! requests (OffsetFetch of many groups, DescribeGroups, DeleteGroups, ListGroups) are split
//! by partition and their answers merged.
//!
//! The broker drives the lifecycle: [`GroupCoordinatorService::on_elected`] /
//! [`GroupCoordinatorService::on_resigned`] as it gains or loses leadership of an offsets
//! partition, [`GroupCoordinatorService::on_high_watermark`] as a partition's HW moves, and
//! [`GroupCoordinatorService::on_new_metadata`] when topics change.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use strom_coordinator_common::runtime::{
    CoordinatorError, CoordinatorLoader, CoordinatorRuntime, PartitionWriter, TopicPartition,
    WriteContext, WriteResult,
};
use strom_coordinator_common::timer::{Clock, TokioClock};

use crate::config::GroupCoordinatorConfig;
use crate::metadata::GroupMetadataImage;
use crate::records::CoordinatorRecord;
use crate::shard::GroupCoordinatorShard;
use crate::topic::{partition_for, GROUP_METADATA_TOPIC_NAME};

mod classic;
mod consumer;
mod offsets;
mod transactions;

pub use transactions::{txn_offset_commit_error, write_txn_markers_error};

/// What a group request carries besides its body (Kafka's `AuthorizableRequestContext` as the
/// group coordinator uses it).
#[derive(Debug, Clone, Default)]
pub struct GroupRequestContext {
    pub client_id: String,
    /// The client's address, as DescribeGroups and kafka-consumer-groups show it (`/1.2.3.4`).
    pub client_host: String,
    pub api_version: i16,
}

pub struct GroupCoordinatorService {
    config: Arc<GroupCoordinatorConfig>,
    runtime: Arc<CoordinatorRuntime<GroupCoordinatorShard>>,
    metadata: Arc<RwLock<Arc<GroupMetadataImage>>>,
}

impl GroupCoordinatorService {
    pub fn new(
        config: GroupCoordinatorConfig,
        writer: Arc<dyn PartitionWriter>,
        loader: Arc<dyn CoordinatorLoader>,
    ) -> Arc<Self> {
        Self::with_clock(config, writer, loader, Arc::new(TokioClock::new()))
    }

    /// As [`Self::new`] with the clock the shards read (tests inject one).
    pub fn with_clock(
        config: GroupCoordinatorConfig,
        writer: Arc<dyn PartitionWriter>,
        loader: Arc<dyn CoordinatorLoader>,
        clock: Arc<dyn Clock>,
    ) -> Arc<Self> {
        let config = Arc::new(config);
        let metadata = Arc::new(RwLock::new(Arc::new(GroupMetadataImage::default())));
        let (c, m) = (config.clone(), metadata.clone());
        let runtime = CoordinatorRuntime::with_clock(writer, loader, clock, move |ctx| {
            GroupCoordinatorShard::new(ctx, c.clone(), m.clone())
        });
        // Kafka's GroupCoordinatorService gives every write this timeout.
        runtime.set_write_timeout(Duration::from_millis(
            u64::try_from(config.offsets_commit_timeout_ms).unwrap_or(0),
        ));
        Arc::new(Self {
            config,
            runtime,
            metadata,
        })
    }

    pub fn config(&self) -> &GroupCoordinatorConfig {
        &self.config
    }

    /// The `__consumer_offsets` partition of `group_id`.
    pub fn partition_for(&self, group_id: &str) -> i32 {
        partition_for(group_id, self.config.offsets_topic.num_partitions)
    }

    pub fn topic_partition(&self, group_id: &str) -> TopicPartition {
        (
            GROUP_METADATA_TOPIC_NAME.to_string(),
            self.partition_for(group_id),
        )
    }

    /// This broker became leader of offsets partition `partition` at `leader_epoch`.
    pub fn on_elected(&self, partition: i32, leader_epoch: i32) {
        self.runtime.schedule_load(
            (GROUP_METADATA_TOPIC_NAME.to_string(), partition),
            leader_epoch,
        );
    }

    /// This broker no longer leads `partition` (`leader_epoch`: the epoch it lost, if known).
    pub fn on_resigned(&self, partition: i32, leader_epoch: Option<i32>) {
        self.runtime.schedule_unload(
            &(GROUP_METADATA_TOPIC_NAME.to_string(), partition),
            leader_epoch,
        );
    }

    /// The high watermark of offsets partition `partition` moved to `hw`.
    pub fn on_high_watermark(&self, partition: i32, hw: i64) {
        self.runtime
            .on_high_watermark(&(GROUP_METADATA_TOPIC_NAME.to_string(), partition), hw);
    }

    /// The offsets partitions this broker has a shard for, and whether each is loaded.
    pub fn partitions(&self) -> Vec<(i32, bool)> {
        self.runtime
            .partitions()
            .into_iter()
            .map(|((_, p), loaded)| (p, loaded))
            .collect()
    }

    /// Topics changed: every shard sees the new image (consumer groups compute new target
    /// assignments when a subscribed topic gains partitions or a matching topic appears).
    pub fn on_new_metadata(self: &Arc<Self>, image: GroupMetadataImage) {
        let image = Arc::new(image);
        *self.metadata.write() = image;
        for (tp, loaded) in self.runtime.partitions() {
            if !loaded {
                // A loading shard reads the image when it finishes loading.
                continue;
            }
            let rt = self.runtime.clone();
            tokio::spawn(async move {
                let r = rt
                    .write(
                        &tp,
                        |shard: &mut GroupCoordinatorShard, ctx: &WriteContext| {
                            let records = shard.consumer.on_new_metadata(&shard.env, ctx);
                            Ok(WriteResult {
                                records,
                                response: (),
                            })
                        },
                    )
                    .await;
                if let Err(e) = r {
                    tracing::debug!(?tp, error = %e, "group coordinator metadata update");
                }
            });
        }
    }

    /// A write against the shard of `group_id`'s partition.
    pub async fn write<T: Send + 'static>(
        &self,
        group_id: &str,
        op: impl FnOnce(
                &mut GroupCoordinatorShard,
                &WriteContext,
            ) -> Result<WriteResult<CoordinatorRecord, T>, CoordinatorError>
            + Send
            + 'static,
    ) -> Result<T, CoordinatorError> {
        self.runtime
            .write(&self.topic_partition(group_id), op)
            .await
    }

    /// A read of committed state of the shard of `group_id`'s partition.
    pub async fn read<T: Send + 'static>(
        &self,
        group_id: &str,
        op: impl FnOnce(&GroupCoordinatorShard, i64) -> T + Send + 'static,
    ) -> Result<T, CoordinatorError> {
        self.runtime.read(&self.topic_partition(group_id), op).await
    }

    pub fn runtime(&self) -> &Arc<CoordinatorRuntime<GroupCoordinatorShard>> {
        &self.runtime
    }
}

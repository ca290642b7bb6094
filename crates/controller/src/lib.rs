//! The cluster metadata: the records that describe the cluster, the log they are kept in, the
//! image replayed from them, and the controller that turns admin requests into records.
//!
//! As in KRaft, request handlers never change state directly: [`QuorumController`] validates a
//! request against the current [`MetadataImage`] and returns [`MetadataRecord`]s; the records are
//! appended to the [`MetadataLog`] and only [`MetadataImage::replay`] applies them. Start-up
//! replays the same log through the same function. Today the log is a local file on a single
//! node; the Raft quorum replaces [`MetadataLog`] without touching the records or the replay.
//!
//! - [`record`]: the metadata records.
//! - [`image`]: the replayed state, published to the broker as an immutable snapshot.
//! - [`delta`]: what one replayed batch changed, published with the new image.
//! - [`log`]: the durable, checksummed record log.
//! - [`topic_config`]: the topic-level configs, their defaults, types and validation.
//! - [`names`]: Kafka's topic-name rules.
//! - [`controller`]: request handling (create/delete topics, partitions, configs).
//! - [`limits`]: how much one request may ask for (partitions, records), checked first.

pub mod controller;
pub mod delta;
pub mod image;
pub mod limits;
pub mod log;
pub mod names;
pub mod record;
pub mod state;
pub mod topic_config;

pub use controller::log_dirs;
pub use controller::{
    ControllerError, CreatePartitionsSpec, CreateTopicSpec, ProducerIdBlock, QuorumController,
    PRODUCER_ID_BLOCK_SIZE,
};
pub use delta::{LocalPartition, LocalReplicaChanges, MetadataDelta, RemovedTopic};
pub use image::{BrokerInfo, MetadataImage, PartitionRegistration, TopicImage};
pub use log::MetadataLog;
pub use record::MetadataRecord;
pub mod cluster_control;
pub mod partition_change;
pub mod placement;

//! The cluster metadata: the records that describe the cluster, the log they are kept in, the
//! image replayed from them, and the controller that turns admin requests into records.
//!
//! As in KRaft, request handlers never change state directly: [`QuorumController`] validates a
//! request against the current [`MetadataImage`] and returns [`MetadataRecord`]s; the records are
//! appended to the [`MetadataLog`] and only [`MetadataImage::replay`] applies them. Start-up
//! replays the same log through the same function. On a single node the log is a local file
//! ([`MetadataLog`]); in a cluster it is the Raft quorum's (`strom_raft`), with the same records
//! and replay. Every record has an offset — its position in the log, kept across replays and
//! snapshots ([`MetadataImage::offset`]) — and a broker's epoch is the offset of its
//! registration record.
//!
//! - [`record`]: the metadata records.
//! - [`image`]: the replayed state, published to the broker as an immutable snapshot.
//! - [`delta`]: what one replayed batch changed, published with the new image.
//! - [`log`]: the durable, checksummed record log.
//! - [`topic_config`]: the topic-level configs, their defaults, types and validation.
//! - [`names`]: Kafka's topic-name rules.
//! - [`controller`]: request handling (create/delete topics, partitions, configs), broker
//!   registration, heartbeats and fencing.
//! - [`limits`]: how much one request may ask for (partitions, records), checked first.
//! - [`broker_registration`]: Kafka's registration rules: incarnations, broker epochs (the
//!   offset of the registration record), DUPLICATE_BROKER_REGISTRATION, an unclean
//!   shutdown taking the broker out of every ISR.
//! - [`cluster_control`], [`partition_change`], [`placement`]: the pure rules of fencing,
//!   elections, ISR changes (AlterPartition with KIP-903's broker epochs) and placement.

pub mod broker_registration;
pub mod controller;
pub mod delta;
pub mod image;
pub mod limits;
pub mod log;
pub mod names;
pub mod record;
pub mod state;
pub mod topic_config;

pub use broker_registration::BrokerRegistration;
pub use controller::log_dirs;
pub use controller::{
    ControllerError, CreatePartitionsSpec, CreateTopicSpec, HeartbeatReply, ProducerIdBlock,
    QuorumController, PRODUCER_ID_BLOCK_SIZE,
};
pub use delta::{LocalPartition, LocalReplicaChanges, MetadataDelta, RemovedTopic};
pub use image::{BrokerInfo, MetadataImage, PartitionRegistration, TopicImage};
pub use log::MetadataLog;
pub use partition_change::BrokerState;
pub use record::MetadataRecord;
pub mod cluster_control;
pub mod partition_change;
pub mod placement;

//! The group coordinator (Kafka's `group-coordinator` module), beside the broker.
//!
//! What it owns:
//! - [`service`]: the API surface the broker's handlers call (Kafka's
//!   `GroupCoordinatorService`), routing each group to the shard of its `__consumer_offsets`
//!   partition on the [`strom_coordinator_common`] runtime; the broker gives it a partition
//!   writer and loader, tells it which offsets partitions it leads, their high watermarks and
//!   the topics image;
//! - [`shard`]: one partition's state (Kafka's `GroupCoordinatorShard`): [`classic`] groups,
//!   [`consumer`] (KIP-848) groups, [`offsets`], rebuilt from and changed by its records;
//! - [`records`]: the key/value records of `__consumer_offsets` in Kafka's own schemas
//!   (`OffsetCommitKey/Value`, `GroupMetadataKey/Value`, `ConsumerGroup*`), so Kafka's
//!   `kafka-dump-log --offsets-decoder` reads Strom's offsets topic and Strom reads Kafka's;
//! - [`assignor`]: the server-side assignors of the KIP-848 consumer protocol (`uniform`,
//!   `range`), equal to group-coordinator 4.4's `UniformAssignor` and `RangeAssignor`;
//! - [`topic`]: `__consumer_offsets` itself — its settings and which partition holds a group
//!   (`abs(groupId.hashCode()) % partitions`, bit-exact with Kafka's);
//! - [`config`], [`metadata`]: its settings under Kafka's names, and the topics it sees.
//! - [`testing`]: an in-memory offsets topic for tests of the coordinator without a broker.

pub mod assignor;
pub mod classic;
pub mod config;
pub mod consumer;
pub mod metadata;
pub mod offsets;
pub mod records;
pub mod service;
pub mod shard;
pub mod testing;
pub mod topic;

pub use service::{GroupCoordinatorService, GroupRequestContext};

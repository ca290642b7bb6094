//! The group coordinator (Kafka's `group-coordinator` module), beside the broker.
//!
//! What it owns:
//! - `records`: the key/value records of `__consumer_offsets` in Kafka's own schemas
//!   (`OffsetCommitKey/Value`, `GroupMetadataKey/Value`, `ConsumerGroup*`), so Kafka's
//!   `kafka-dump-log --offsets-decoder` reads Strom's offsets topic and Strom reads Kafka's;
//! - `assignor`: the server-side assignors of the KIP-848 consumer protocol (`uniform`,
//!   `range`), equal to group-coordinator 4.4's `UniformAssignor` and `RangeAssignor`;
//! - `topic`: `__consumer_offsets` itself — its settings and which partition holds a group
//!   (`abs(groupId.hashCode()) % partitions`, bit-exact with Kafka's).
//!
//! Coming with the rest of the consumer-groups issue: one coordinator shard per
//! `__consumer_offsets` partition this broker leads (the classic and consumer group state
//! machines, offsets), run by a coordinator runtime that appends their records through a narrow
//! partition-writer interface and answers once the high watermark passes them.

pub mod assignor;
pub mod records;
pub mod topic;

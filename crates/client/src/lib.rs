//! `strom_client`: an async (tokio) client for Kafka-compatible brokers, used by Strom's CLI
//! tools, benchmarks and tests.
//!
//! - [`Connection`]: one TCP connection to one broker, with the ApiVersions handshake, per-request
//!   version negotiation, correlation ids, pipelining and request timeouts.
//! - [`Client`]: the cluster view: bootstrap servers, cached [`ClusterMetadata`], one connection
//!   per broker, leader lookup and retries with backoff.
//! - [`Admin`]: create/delete/list/describe topics, describe and alter topic configs, describe
//!   the cluster; consumer groups ([`admin_groups`]) and transactions ([`admin_txn`]: list,
//!   describe, describe producers, abort a hanging transaction).
//! - [`Producer`]: a batching producer (record accumulator, linger, compression, acks, retries,
//!   Kafka's murmur2 key partitioner and a sticky partitioner for null keys), idempotent by
//!   default as Kafka's (producer id, epoch and per-partition sequences; see [`idempotence`]),
//!   and transactional with a `transactional_id` (Java's `initTransactions` ..
//!   `commitTransaction`, `sendOffsetsToTransaction`; see [`transactions`]).
//! - [`Consumer`]: manual assignment, seek and poll, or consumer-group subscription (classic
//!   and KIP-848 protocols, see [`group`]) with commits; `read_committed` isolation drops
//!   aborted transactions (see [`read_committed`]).
//!
//! Message structs come from the `kafka-protocol` crate via [`strom_protocol::kafka`].
//!
//! ```no_run
//! # async fn demo() -> strom_client::Result<()> {
//! use strom_client::{Admin, Client, ClientConfig, Producer, ProducerConfig};
//! let client = Client::connect(ClientConfig::new("localhost:9092")).await?;
//! Admin::new(client.clone()).create_topic("t", 3, 1, &[], false).await?;
//! let producer = Producer::new(client, ProducerConfig::default());
//! let (partition, offset) = producer.send("t", None, None, Some("hello".into()), vec![]).await?;
//! # let _ = (partition, offset);
//! producer.flush().await?;
//! # Ok(()) }
//! ```

pub mod admin;
pub mod admin_groups;
pub mod admin_txn;
pub mod assignor;
pub mod client;
pub mod connection;
pub mod consumer;
pub mod error;
pub mod group;
pub mod idempotence;
pub mod partitioner;
pub mod producer;
mod producer_batch;
mod producer_config;
mod producer_partitioning;
pub mod read_committed;
pub mod transactions;
pub mod txn_requests;
pub mod versions;

pub use admin::{Admin, ConfigEntry, NewTopic, TopicDescription};
pub use client::{
    BrokerInfo, Client, ClientConfig, ClusterMetadata, PartitionMetadata, TopicMetadata,
};
pub use connection::{Connection, ConnectionConfig};
pub use consumer::{Consumer, ConsumerConfig, ConsumerRecord, OffsetReset};
pub use error::{Error, Result};
pub use group::{GroupConfig, GroupProtocol, RebalanceListener, TopicPartition};
pub use producer::{
    Acks, Compression, DeliveryFuture, Producer, ProducerConfig, ProducerIdAndEpoch,
    ProducerRecord, RecordMetadata,
};
pub use strom_protocol::kafka;
pub use strom_protocol::ErrorCode;

/// Formats a topic id the way Kafka prints it: URL-safe base64 without padding.
pub fn topic_id_string(id: &uuid::Uuid) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(id.as_bytes())
}

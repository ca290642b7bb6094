//! The transaction coordinator (Kafka's `kafka.coordinator.transaction` and
//! `transaction-coordinator` module), beside the broker.
//!
//! - [`records`]: `__transaction_state` records in Kafka's `TransactionLog` schemas, so
//!   Kafka's `kafka-dump-log --transaction-log-decoder` reads Strom's log and Strom reads Kafka's;
//! - [`state`], [`metadata`]: a transactional id's states, transitions and epochs (Kafka's
//!   `TransactionState`, `TransactionMetadata`, `TxnTransitMetadata`);
//! - [`shard`]: one `__transaction_state` partition's transactional ids on the coordinator
//!   runtime, rebuilt from and changed by its records, with its timers (timed-out
//!   transactions, expired ids);
//! - [`service`]: the API the broker's handlers call (InitProducerId, AddPartitionsToTxn,
//!   AddOffsetsToTxn, EndTxn, DescribeTransactions, ListTransactions), routing each
//!   transactional id to its partition's shard;
//! - [`markers`]: the ports the broker implements (producer ids, the marker channel to
//!   partition leaders) and the sending of markers until every partition has its own;
//! - [`config`]: its settings under Kafka's names.

pub mod config;
pub mod markers;
pub mod metadata;
pub mod records;
pub mod service;
pub mod shard;
pub mod state;

pub use service::TransactionCoordinatorService;

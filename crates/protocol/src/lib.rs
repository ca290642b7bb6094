//! The Kafka wire format as Strom speaks it, with no I/O.
//!
//! - [`frame`]: length-prefixed framing and request-header peeking.
//! - [`batch`]: a zero-copy view of RecordBatch v2 headers (the only part of a batch the broker
//!   reads on the hot path), CRC32C validation and in-place offset/epoch patching.
//! - [`crafted`]: hand-made batches with every field settable, for tests of hostile input.
//! - [`ErrorCode`]: Kafka's numeric error codes.
//! - [`memory_records`]: a batch built from records, for the broker's own writers (the
//!   coordinators), as Kafka's `MemoryRecords.withRecords`.
//! - [`records`]: encoding and decoding individual records, for clients and tools only (never on
//!   the broker's hot path).
//!
//! Message structs come from the `kafka-protocol` crate, which is generated from Kafka's JSON
//! message specs; it is re-exported as [`kafka`].

pub mod batch;
pub mod compression;
pub mod crafted;
pub mod frame;
pub mod java;
pub mod memory_records;
pub mod testing;

pub use kafka_protocol as kafka;
pub use kafka_protocol::error::ResponseError as ErrorCode;
pub use kafka_protocol::records;

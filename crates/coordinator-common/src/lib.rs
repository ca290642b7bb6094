//! What the group and transaction coordinators share (Kafka's `coordinator-common`).
//!
//! - [`timeline`]: state that can be rolled back to an offset and read as of the high
//!   watermark (Kafka's `SnapshotRegistry` + `TimelineHashMap` / `TimelineObject`).
//! - [`runtime`]: the `CoordinatorRuntime` — one shard per internal partition this broker
//!   leads, events of a partition run one at a time, a write's records are applied in memory
//!   at once, appended through a [`runtime::PartitionWriter`] (the broker's leader append with
//!   origin Coordinator, at the leader epoch the shard loaded with) and its response released
//!   once the high watermark passes them; a failed append rolls the shard back.
//!
//! - [`timer`]: keyed timers a shard sets from its own operations (session expiry, join and
//!   rebalance delays, offset expiry), run as writes of its partition; the injectable clock.
//!
//! Nothing here knows about groups or transactions: a coordinator plugs in a
//! [`runtime::CoordinatorShard`] (its state, built from its records) and a record serde.

pub mod runtime;
pub mod timeline;
pub mod timer;

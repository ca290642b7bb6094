//! The broker: it owns the listener and connections, decodes requests, runs the handlers, and
//! hosts partition replicas through the [`replica_manager::ReplicaManager`].
//!
//! - [`server`]: start-up, the accept loop, background chores, clean shutdown.
//! - [`connection`]: one task per connection; requests are answered in order, on the task that
//!   read them (no hand-off to another thread on the request path).
//! - [`controller_listener`]: the controller listener's dispatch: Raft between the voters (a
//!   Strom-private Kafka API) from start-up on, then the broker-to-controller APIs.
//! - [`handlers`]: one module per Kafka API; each maps internal errors to that API's codes.
//! - [`replica_manager`] / [`partition`]: hosted partitions, their logs, HW, the fetch path.
//! - [`purgatory`]: delayed operations (acks=all produce, fetch long-poll, DeleteRecords; later
//!   join / sync / heartbeat and transaction markers), completed on events or timeouts.
//! - [`disk_io`]: appends (which may roll segments and fsync) run off the async workers.
//! - [`config`]: Kafka-named broker properties and per-topic log configs.
//! - [`meta_properties`]: the log dirs' `meta.properties`, `strom format`, and their check at
//!   start-up (unformatted or foreign dirs refused).
//! - [`broker_lifecycle`]: this broker's incarnation and broker epoch, registration and
//!   heartbeats (Kafka's `BrokerLifecycleManager`).

pub mod broker_lifecycle;
pub mod config;
pub mod connection;
pub mod controller_channel;
pub mod controller_listener;
pub mod coordinator;
pub mod directory_assignments;
pub mod disk_io;
pub mod handlers;
pub mod inter_broker;
pub mod listeners;
pub mod log_chores;
pub mod log_cleaner;
pub mod log_manager;
pub mod meta_properties;
pub mod metadata_loader;
pub mod partition;
pub mod producer_ids;
pub mod purgatory;
pub mod replica_manager;
pub mod replication;
pub mod request_context;
pub mod request_limits;
pub mod request_queue;
pub mod response;
pub mod server;
pub mod txn_verification;

use base64::Engine;
use uuid::Uuid;

pub use request_context::RequestContext;
pub use server::{Broker, Plugins, Server};

/// Kafka prints topic and cluster ids as URL-safe base64 without padding.
pub fn topic_id_string(id: &Uuid) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(id.as_bytes())
}

pub fn parse_topic_id_string(s: &str) -> Option<Uuid> {
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s)
        .ok()?;
    Uuid::from_slice(&bytes).ok()
}

/// Milliseconds on a clock that never goes back (heartbeat sessions).
pub(crate) fn monotonic_ms() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_millis() as u64
        + 1
}

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn topic_id_round_trip() {
        let id = uuid::Uuid::new_v4();
        let s = super::topic_id_string(&id);
        assert_eq!(s.len(), 22);
        assert_eq!(super::parse_topic_id_string(&s), Some(id));
    }
}

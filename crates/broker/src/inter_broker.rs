//! The one client this broker uses to talk to other nodes (the role Kafka's `NetworkClient`
//! plays for `ReplicaFetcherThread` and `NodeToControllerChannelManager`).
//!
//! Every outgoing request — a follower's Fetch to its leader, a heartbeat, AlterPartition, a
//! forwarded admin request in an Envelope — goes over a [`strom_client::connection::Connection`]
//! taken from here: the same framing, ApiVersions handshake, version check, correlation ids and
//! request timeouts as the Rust client, not a second hand-rolled transport.
//!
//! Connections are keyed by (node, [`Channel`]). A connection is served by its peer one request
//! at a time, in order, so requests that must not wait for each other get separate channels:
//! a heartbeat that keeps this broker unfenced never queues behind a forwarded CreateTopics,
//! and AlterPartition never behind either (Kafka keeps a channel manager per purpose for the
//! same reason). Within a channel requests are pipelined.
//!
//! The pool's lock is held only to look up or insert; connecting and every call run outside
//! it. Two callers that find no connection at once may both connect; the second to finish
//! keeps the first's connection and closes its own.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use strom_client::connection::{Connection, ConnectionConfig};
use strom_client::Error as ClientError;

/// What a connection to another node is for; each gets its own connection per node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Channel {
    /// Fetch as a follower from a partition leader.
    ReplicaFetch,
    /// BrokerRegistration and BrokerHeartbeat to the active controller.
    ControllerLifecycle,
    /// AlterPartition (ISR changes) to the active controller.
    ControllerAlterPartition,
    /// Forwarded admin requests (Envelope), auto-creation, AllocateProducerIds,
    /// AssignReplicasToDirs.
    ControllerForwarding,
    /// WriteTxnMarkers from this broker's transaction coordinator to partition leaders.
    TxnMarkers,
    /// AddPartitionsToTxn from this broker as partition leader to transaction coordinators
    /// (KIP-890 verification of produces).
    TxnVerification,
}

impl Channel {
    fn name(self) -> &'static str {
        match self {
            Channel::ReplicaFetch => "fetcher",
            Channel::ControllerLifecycle => "lifecycle",
            Channel::ControllerAlterPartition => "alter-partition",
            Channel::ControllerForwarding => "forwarding",
            Channel::TxnMarkers => "txn-markers",
            Channel::TxnVerification => "txn-verification",
        }
    }
}

/// This broker's connections to other nodes.
pub struct InterBrokerClient {
    node_id: i32,
    conns: Mutex<HashMap<(i32, Channel), Arc<Connection>>>,
}

impl InterBrokerClient {
    pub fn new(node_id: i32) -> Arc<Self> {
        Arc::new(Self {
            node_id,
            conns: Mutex::new(HashMap::new()),
        })
    }

    /// The open connection to `node` at `addr` for `channel`, connecting (with the ApiVersions
    /// handshake) if there is none, it closed, or the node moved to another address. Requests
    /// on it time out after `request_timeout`.
    pub async fn connection(
        &self,
        node: i32,
        addr: &str,
        channel: Channel,
        request_timeout: Duration,
    ) -> Result<Arc<Connection>, ClientError> {
        let key = (node, channel);
        if let Some(c) = self.usable(key, addr) {
            return Ok(c);
        }
        let config = ConnectionConfig {
            client_id: format!("broker-{}-{}-{node}", self.node_id, channel.name()),
            request_timeout,
            connect_timeout: request_timeout.min(Duration::from_secs(10)),
            ..ConnectionConfig::default()
        };
        let fresh = Arc::new(Connection::connect(addr, config).await?);
        let mut conns = self.conns.lock();
        match conns.get(&key) {
            Some(c) if !c.is_closed() && c.addr() == addr => {
                let kept = c.clone();
                drop(conns);
                fresh.close("another caller connected first");
                Ok(kept)
            }
            _ => {
                if let Some(old) = conns.insert(key, fresh.clone()) {
                    old.close("replaced");
                }
                Ok(fresh)
            }
        }
    }

    fn usable(&self, key: (i32, Channel), addr: &str) -> Option<Arc<Connection>> {
        let conns = self.conns.lock();
        conns
            .get(&key)
            .filter(|c| !c.is_closed() && c.addr() == addr)
            .cloned()
    }

    /// Closes the connection to `node` for `channel` if it is still `conn` (a caller that saw
    /// a failure or a timeout on it: its state is unknown, so nothing more goes over it).
    /// Requests waiting on it fail; the next [`Self::connection`] opens a new one.
    pub fn disconnect(&self, node: i32, channel: Channel, conn: &Arc<Connection>, reason: &str) {
        let removed = {
            let mut conns = self.conns.lock();
            match conns.get(&(node, channel)) {
                Some(c) if Arc::ptr_eq(c, conn) => conns.remove(&(node, channel)),
                _ => None,
            }
        };
        drop(removed);
        conn.close(reason);
    }

    /// Closes whatever connection to `node` is open for `channel` (a call on it was given up
    /// without knowing which connection it had, e.g. because its peer lost its role).
    pub fn close_channel(&self, node: i32, channel: Channel, reason: &str) {
        let removed = self.conns.lock().remove(&(node, channel));
        if let Some(c) = removed {
            c.close(reason);
        }
    }

    /// The channels with a connection open now, for tests and diagnostics.
    pub fn open_channels(&self) -> Vec<(i32, Channel)> {
        let mut v: Vec<_> = self
            .conns
            .lock()
            .iter()
            .filter(|(_, c)| !c.is_closed())
            .map(|(k, _)| *k)
            .collect();
        v.sort();
        v
    }

    /// Closes every connection (shutdown).
    pub fn close_all(&self) {
        let all: Vec<_> = self.conns.lock().drain().map(|(_, c)| c).collect();
        for c in all {
            c.close("broker shutting down");
        }
    }
}

#[cfg(test)]
#[path = "inter_broker_tests.rs"]
mod tests;

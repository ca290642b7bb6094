//! The Raft-replicated metadata log of Strom's controller quorum (Kafka's KRaft), built on the
//! [`openraft`] crate (0.9).
//!
//! Each voter runs a [`MetadataQuorum`]. Log entries carry opaque payloads (the controller puts
//! serialized batches of metadata records in them); committed entries are handed, in log order,
//! to the application's [`StateMachineHandler`], which also produces and restores snapshots.
//!
//! ```no_run
//! use std::collections::BTreeMap;
//! use std::sync::Arc;
//! use std::time::Duration;
//! use strom_raft::{HandlerError, MetadataQuorum, QuorumConfig, StateMachineHandler};
//!
//! struct Image;
//! impl StateMachineHandler for Image {
//!     fn apply(&self, index: u64, term: u64, payload: &[u8]) { /* replay records */ }
//!     fn snapshot(&self) -> Vec<u8> { Vec::new() /* serialized image */ }
//!     fn restore(&self, snapshot: Vec<u8>) -> Result<(), HandlerError> { Ok(()) }
//! }
//!
//! # async fn run() -> Result<(), strom_raft::QuorumError> {
//! let voters: BTreeMap<u64, _> = [
//!     (1, "127.0.0.1:9093".parse().unwrap()),
//!     (2, "127.0.0.1:9094".parse().unwrap()),
//!     (3, "127.0.0.1:9095".parse().unwrap()),
//! ]
//! .into();
//! let config = QuorumConfig::new(1, voters.clone(), voters[&1], "/var/lib/strom/__cluster_metadata");
//! let quorum = MetadataQuorum::start(config, Arc::new(Image)).await?;
//! let leader = quorum.wait_for_leader(Duration::from_secs(10)).await?;
//! if leader == quorum.node_id() {
//!     let index = quorum.propose(b"records".to_vec()).await?; // committed and applied here
//! }
//! let epoch = quorum.term();
//! quorum.shutdown().await?;
//! # Ok(()) }
//! ```
//!
//! # API
//!
//! - [`MetadataQuorum::start`]`(`[`QuorumConfig`]`, Arc<dyn StateMachineHandler>)`: opens the
//!   storage, restores the handler from the local snapshot if any, listens for the other voters
//!   (or plugs into the application's [`RaftService`]) and joins the quorum. On a fresh cluster the voter with the lowest id bootstraps it with the
//!   full voter set (unless a reachable voter says the cluster exists); the others wait for it.
//!   Starting all voters at once and restarting any of them are both safe.
//! - [`MetadataQuorum::propose`]`(Vec<u8>) -> Result<u64>`: on the leader, appends the payload
//!   and returns its log index once it is committed and applied locally; elsewhere
//!   [`QuorumError::NotLeader`]` { leader }`. Bounded by [`QuorumConfig::propose_timeout_ms`];
//!   a payload that cannot fit one request frame is [`QuorumError::PayloadTooLarge`].
//! - [`MetadataQuorum::leader`], [`MetadataQuorum::term`] (the controller epoch),
//!   [`MetadataQuorum::status`], [`MetadataQuorum::wait_for_leader`],
//!   [`MetadataQuorum::wait_for_applied`], [`MetadataQuorum::snapshot`] (build one now and purge
//!   the log behind it), [`MetadataQuorum::shutdown`].
//! - [`StateMachineHandler`]: `apply(index, term, &[u8])` for every committed application entry,
//!   in order, exactly once per process lifetime after the snapshot it was last restored from
//!   (Raft's own blank and membership entries are skipped, so indexes have gaps);
//!   `snapshot() -> Vec<u8>`; `restore(Vec<u8>)`.
//!
//! # Storage (under [`QuorumConfig::dir`])
//!
//! `log/*.log` segments of CRC-checked entries (torn tail truncated on open, truncation on
//! conflict, purge behind a snapshot), `vote` (fsynced before any reply that depends on it),
//! `committed`, `purged`, and `snapshot` (the handler's bytes with the last included log id and
//! membership). See [`log_store`] and [`state_machine`].
//!
//! # Network
//!
//! Raft RPCs are Kafka requests of the Strom-private API `StromRaft` ([`wire`]: Kafka request
//! and response headers, a bincode body of openraft's append-entries, vote and install-snapshot
//! RPCs) on the voters' controller listeners, so the broker serves them through the same
//! connection pipeline as its other controller APIs and hands each body to the voter
//! ([`RaftService`], [`QuorumConfig::service`]); a voter without one binds
//! [`QuorumConfig::listen`] itself. Frames are bounded by [`QuorumConfig::max_frame_bytes`]
//! (appends split, snapshots chunked, proposals bounded), read only as their bytes arrive, and
//! sent over any byte stream a [`Connector`] makes ([`transport`]); reconnect on failure; every
//! RPC bounded by openraft's deadlines. See [`network`].
//!
//! # Limits
//!
//! - Static membership: the voter set is fixed by configuration (no add/remove voter yet).
//! - A voter whose directory is wiped loses its vote: it may vote twice in one term. Replace a
//!   voter's disk only while the rest of the quorum is healthy (Kafka's KIP-853 directory ids
//!   solve this; not done here).
//! - The log after the last snapshot is also held in memory; log and snapshot I/O is synchronous
//!   on the Raft tasks (fine for the metadata log's small writes).
//! - The term only grows, but not necessarily on every restart: a leader whose committed vote
//!   survived a full-cluster restart resumes its term (openraft restores it).
//! - Call [`MetadataQuorum::shutdown`] before dropping a quorum (dropping only stops the
//!   listener).

pub mod log_store;
pub mod network;
mod quorum;
pub mod state_machine;
pub mod transport;
pub mod types;
pub mod wire;

pub use network::{raft_service, RaftService, RaftServiceSlot};
pub use quorum::{MetadataQuorum, QuorumConfig, QuorumError, QuorumStatus, Result};
pub use state_machine::{HandlerError, StateMachineHandler};
pub use transport::{Connector, TcpConnector};

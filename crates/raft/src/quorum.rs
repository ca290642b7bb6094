//! [`MetadataQuorum`]: one voter of the metadata quorum.

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{ClientWriteError, Fatal, InitializeError, RaftError};
use openraft::{BasicNode, Config, SnapshotPolicy};
use parking_lot::Mutex;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::log_store::LogStore;
use crate::network::{self, NetworkFactory, PeerClient, RaftServiceSlot};
use crate::state_machine::{StateMachine, StateMachineHandler};
use crate::transport::{Connector, TcpConnector};
use crate::types::{NodeId, Payload, Raft};
use crate::wire::{self, RaftResponse, RaftRpc, WireError};

/// How a voter runs.
#[derive(Debug, Clone)]
pub struct QuorumConfig {
    /// This voter's id; must be a key of `voters`.
    pub node_id: u64,
    /// Every voter's id and controller listener address (static membership).
    pub voters: BTreeMap<u64, SocketAddr>,
    /// Where this voter accepts Raft connections from the others.
    pub listen: SocketAddr,
    /// Where the log, vote and snapshot are kept.
    pub dir: PathBuf,
    /// A follower that hears nothing from a leader for a random time between this and twice
    /// this starts an election.
    pub election_timeout_ms: u64,
    /// How often a leader sends heartbeats; must be less than `election_timeout_ms`.
    pub heartbeat_ms: u64,
    /// Build a snapshot after this many entries since the last one; 0: only on
    /// [`MetadataQuorum::snapshot`].
    pub snapshot_every: u64,
    /// Entries kept in the log behind the last snapshot (the rest is purged), so that a slightly
    /// lagging follower catches up from the log rather than with a snapshot.
    pub keep_after_snapshot: u64,
    /// Size at which a log segment is closed and a new one started.
    pub segment_bytes: u64,
    /// How long [`MetadataQuorum::propose`] waits for the entry to be committed and applied.
    pub propose_timeout_ms: u64,
    /// The largest request frame a voter sends or accepts (the payload after the 4-byte
    /// size; the broker's `socket.request.max.bytes`, which must be the same on every voter).
    /// Appends are split under it, snapshots sent in chunks of at most half of it, and a
    /// proposal must fit in one request.
    pub max_frame_bytes: usize,
    /// StromRaft requests served by the application on its own listener
    /// ([`network::raft_service`]; the broker's controller listener). `None`: the voter binds
    /// `listen` itself.
    pub service: Option<RaftServiceSlot>,
}

impl QuorumConfig {
    /// A configuration with default timings (election timeout 1000 ms, heartbeat 100 ms, a
    /// snapshot every 10,000 entries keeping 1,000 behind it, 16 MiB segments, 10 s proposals)
    /// and Kafka's default `socket.request.max.bytes` (100 MiB) as the frame bound.
    pub fn new(
        node_id: u64,
        voters: BTreeMap<u64, SocketAddr>,
        listen: SocketAddr,
        dir: impl Into<PathBuf>,
    ) -> Self {
        Self {
            node_id,
            voters,
            listen,
            dir: dir.into(),
            election_timeout_ms: 1000,
            heartbeat_ms: 100,
            snapshot_every: 10_000,
            keep_after_snapshot: 1_000,
            segment_bytes: 16 << 20,
            propose_timeout_ms: 10_000,
            max_frame_bytes: strom_protocol::frame::DEFAULT_MAX_REQUEST_SIZE,
            service: None,
        }
    }
}

/// Errors of the quorum.
#[derive(Debug, thiserror::Error)]
pub enum QuorumError {
    /// Only the leader accepts proposals; `leader` is the current one if known.
    #[error("this voter is not the leader (leader: {leader:?})")]
    NotLeader { leader: Option<u64> },
    #[error("invalid quorum configuration: {0}")]
    Config(String),
    #[error("metadata quorum I/O error: {0}")]
    Io(#[from] io::Error),
    #[error(transparent)]
    Wire(#[from] WireError),
    /// A proposal that cannot fit in one Raft request.
    #[error("a metadata batch of {size} bytes exceeds the limit of {max} bytes")]
    PayloadTooLarge { size: usize, max: usize },
    /// The wait ended before the outcome was known. A timed-out proposal may still be committed.
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    #[error("the metadata quorum is shut down")]
    ShutDown,
    /// Raft stopped on a storage error or a panic.
    #[error("raft failure: {0}")]
    Raft(String),
}

pub type Result<T, E = QuorumError> = std::result::Result<T, E>;

fn fatal(f: Fatal<NodeId>) -> QuorumError {
    match f {
        Fatal::Stopped => QuorumError::ShutDown,
        other => QuorumError::Raft(other.to_string()),
    }
}

/// A snapshot of a voter's Raft state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuorumStatus {
    pub node_id: u64,
    pub leader: Option<u64>,
    pub term: u64,
    pub last_log_index: Option<u64>,
    pub last_applied: Option<u64>,
    /// Last log index included in this voter's latest snapshot.
    pub snapshot: Option<u64>,
    /// Last log index purged from this voter's log.
    pub purged: Option<u64>,
    /// This voter is the leader and a quorum has acknowledged it as such. A voter restarted
    /// with a vote for itself calls itself leader at once, before it learns of a newer term.
    pub leader_acknowledged: bool,
}

/// One running voter of the metadata quorum: a Raft node with its storage under
/// [`QuorumConfig::dir`] and its listener on [`QuorumConfig::listen`].
pub struct MetadataQuorum {
    node_id: NodeId,
    raft: Raft,
    metrics: watch::Receiver<openraft::RaftMetrics<NodeId, BasicNode>>,
    server: Mutex<Option<JoinHandle<()>>>,
    service: Option<RaftServiceSlot>,
    propose_timeout: Duration,
    max_payload: usize,
}

impl MetadataQuorum {
    /// Opens the storage under `config.dir` (restoring `state_machine` from the local snapshot
    /// if there is one), starts listening on `config.listen` and joins the quorum.
    ///
    /// Bootstrap of a fresh cluster: the voter with the lowest id, when it has no log, vote or
    /// snapshot and none of the other voters it can reach says it is initialized, initializes
    /// the cluster with the full voter set (log entry 0, the membership). Every other voter
    /// waits to hear from a leader. Starting all voters at once is therefore safe, and
    /// restarting is idempotent.
    pub async fn start(
        config: QuorumConfig,
        state_machine: Arc<dyn StateMachineHandler>,
    ) -> Result<MetadataQuorum> {
        Self::start_with_connector(config, state_machine, Arc::new(TcpConnector)).await
    }

    /// [`Self::start`] with the RPCs to the other voters sent over streams from `connector`
    /// (TLS or SASL-authenticated streams; [`TcpConnector`] for plain TCP).
    pub async fn start_with_connector<C: Connector>(
        config: QuorumConfig,
        state_machine: Arc<dyn StateMachineHandler>,
        connector: Arc<C>,
    ) -> Result<MetadataQuorum>
    where
        C::Stream: Sync,
    {
        if !config.voters.contains_key(&config.node_id) {
            return Err(QuorumError::Config(format!(
                "node {} is not one of the voters {:?}",
                config.node_id,
                config.voters.keys().collect::<Vec<_>>()
            )));
        }
        if config.heartbeat_ms == 0 || config.heartbeat_ms >= config.election_timeout_ms {
            return Err(QuorumError::Config(format!(
                "heartbeat ({} ms) must be positive and less than the election timeout ({} ms)",
                config.heartbeat_ms, config.election_timeout_ms
            )));
        }
        std::fs::create_dir_all(&config.dir)?;
        let log = LogStore::open(&config.dir, config.segment_bytes)?;
        let sm = StateMachine::open(&config.dir, state_machine)?;
        let fresh = log.is_fresh() && sm.snapshot_last_log_id().is_none();

        let raft_config = Config {
            cluster_name: "strom-metadata".into(),
            election_timeout_min: config.election_timeout_ms,
            election_timeout_max: config.election_timeout_ms * 2,
            heartbeat_interval: config.heartbeat_ms,
            install_snapshot_timeout: (config.election_timeout_ms * 2).max(2000),
            snapshot_policy: if config.snapshot_every == 0 {
                SnapshotPolicy::Never
            } else {
                SnapshotPolicy::LogsSinceLast(config.snapshot_every)
            },
            max_in_snapshot_log_to_keep: config.keep_after_snapshot,
            // A chunk and its request fit one frame (openraft's default is 3 MiB).
            snapshot_max_chunk_size: (config.max_frame_bytes as u64 / 2).clamp(1, 3 << 20),
            ..Default::default()
        }
        .validate()
        .map_err(|e| QuorumError::Config(e.to_string()))?;

        let listener = match &config.service {
            Some(_) => None,
            None => Some(TcpListener::bind(config.listen).await?),
        };
        let voters = Arc::new(config.voters.clone());
        let connect_timeout = Duration::from_millis(config.election_timeout_ms.clamp(100, 1000));
        let factory = NetworkFactory {
            node_id: config.node_id,
            voters: voters.clone(),
            connect_timeout,
            max_frame: config.max_frame_bytes,
            connector: connector.clone(),
        };
        let raft = Raft::new(config.node_id, Arc::new(raft_config), factory, log, sm)
            .await
            .map_err(fatal)?;
        let server = match (listener, &config.service) {
            (Some(l), _) => {
                let (service, slot) = network::raft_service();
                slot.start(raft.clone(), config.node_id)?;
                Some(tokio::spawn(network::serve(
                    l,
                    service,
                    config.max_frame_bytes,
                )))
            }
            (None, Some(slot)) => {
                slot.start(raft.clone(), config.node_id)?;
                None
            }
            (None, None) => unreachable!("a listener is bound when there is no service"),
        };
        let quorum = MetadataQuorum {
            node_id: config.node_id,
            metrics: raft.metrics(),
            raft,
            server: Mutex::new(server),
            service: config.service.clone(),
            propose_timeout: Duration::from_millis(config.propose_timeout_ms),
            max_payload: config
                .max_frame_bytes
                .saturating_sub(wire::REQUEST_OVERHEAD),
        };

        let lowest = *config.voters.keys().next().expect("voters is not empty");
        if fresh && config.node_id == lowest {
            quorum
                .bootstrap(&voters, connect_timeout, config.max_frame_bytes, connector)
                .await?;
        }
        Ok(quorum)
    }

    async fn bootstrap<C: Connector>(
        &self,
        voters: &BTreeMap<NodeId, SocketAddr>,
        timeout: Duration,
        max_frame: usize,
        connector: Arc<C>,
    ) -> Result<()> {
        // A voter whose directory was wiped must not bootstrap a cluster that exists.
        let mut probes = tokio::task::JoinSet::new();
        for (&id, &addr) in voters.iter().filter(|(&id, _)| id != self.node_id) {
            let mut client = PeerClient::new(
                self.node_id,
                id,
                Some(addr),
                timeout,
                max_frame,
                connector.clone(),
            );
            probes.spawn(async move { (id, client.call(RaftRpc::Status, timeout).await) });
        }
        while let Some(res) = probes.join_next().await {
            if let Ok((id, Ok(RaftResponse::Status { initialized: true }))) = res {
                tracing::info!(
                    peer = id,
                    "the metadata quorum exists already; not bootstrapping"
                );
                return Ok(());
            }
        }
        let members: BTreeMap<NodeId, BasicNode> = voters
            .iter()
            .map(|(&id, addr)| (id, BasicNode::new(addr.to_string())))
            .collect();
        tracing::info!(node_id = self.node_id, voters = ?members.keys().collect::<Vec<_>>(), "bootstrapping the metadata quorum");
        match self.raft.initialize(members).await {
            Ok(()) => Ok(()),
            Err(RaftError::APIError(InitializeError::NotAllowed(_))) => Ok(()),
            Err(RaftError::APIError(e)) => Err(QuorumError::Raft(e.to_string())),
            Err(RaftError::Fatal(f)) => Err(fatal(f)),
        }
    }

    /// This voter's id.
    pub fn node_id(&self) -> u64 {
        self.node_id
    }

    /// Appends `payload` to the replicated log and returns its log index once it is committed
    /// and applied on this voter. Only the leader accepts proposals; elsewhere this returns
    /// [`QuorumError::NotLeader`] with the leader if known. After a [`QuorumError::Timeout`], or
    /// a `NotLeader` from a leader that lost its leadership meanwhile, the entry may or may not
    /// be committed.
    pub async fn propose(&self, payload: Vec<u8>) -> Result<u64> {
        // Every entry must fit one AppendEntries request to every voter; one that did not
        // could never be replicated.
        if payload.len() > self.max_payload {
            return Err(QuorumError::PayloadTooLarge {
                size: payload.len(),
                max: self.max_payload,
            });
        }
        let write = self.raft.client_write(Payload(payload));
        match tokio::time::timeout(self.propose_timeout, write).await {
            Err(_) => Err(QuorumError::Timeout(self.propose_timeout)),
            Ok(Ok(resp)) => Ok(resp.log_id.index),
            Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f)))) => {
                Err(QuorumError::NotLeader {
                    leader: f.leader_id,
                })
            }
            Ok(Err(RaftError::APIError(e))) => Err(QuorumError::Raft(e.to_string())),
            Ok(Err(RaftError::Fatal(f))) => Err(fatal(f)),
        }
    }

    /// The current leader as this voter knows it.
    pub fn leader(&self) -> Option<u64> {
        self.metrics.borrow().current_leader
    }

    /// Whether this voter is the leader.
    pub fn is_leader(&self) -> bool {
        self.leader() == Some(self.node_id)
    }

    /// The current Raft term: the controller epoch.
    pub fn term(&self) -> u64 {
        self.metrics.borrow().current_term
    }

    /// This voter's Raft state.
    pub fn status(&self) -> QuorumStatus {
        let m = self.metrics.borrow();
        QuorumStatus {
            node_id: self.node_id,
            leader: m.current_leader,
            term: m.current_term,
            last_log_index: m.last_log_index,
            last_applied: m.last_applied.map(|l| l.index),
            snapshot: m.snapshot.map(|l| l.index),
            purged: m.purged.map(|l| l.index),
            leader_acknowledged: m.current_leader == Some(self.node_id)
                && m.millis_since_quorum_ack.is_some(),
        }
    }

    /// Waits until this voter knows a leader and returns it.
    pub async fn wait_for_leader(&self, timeout: Duration) -> Result<u64> {
        self.wait_until(timeout, |s| s.leader).await
    }

    /// Waits until this voter has applied the entry at `index` (or a later one).
    pub async fn wait_for_applied(&self, index: u64, timeout: Duration) -> Result<()> {
        self.wait_until(timeout, |s| {
            s.last_applied.filter(|&a| a >= index).map(|_| ())
        })
        .await
    }

    /// Waits until `f` of the status returns `Some`.
    pub async fn wait_until<T>(
        &self,
        timeout: Duration,
        mut f: impl FnMut(&QuorumStatus) -> Option<T>,
    ) -> Result<T> {
        let mut rx = self.metrics.clone();
        let wait = async {
            loop {
                if let Some(t) = f(&self.status()) {
                    return Ok(t);
                }
                if rx.borrow_and_update().running_state.is_err() {
                    return Err(QuorumError::ShutDown);
                }
                if rx.changed().await.is_err() {
                    return Err(QuorumError::ShutDown);
                }
            }
        };
        tokio::time::timeout(timeout, wait)
            .await
            .map_err(|_| QuorumError::Timeout(timeout))?
    }

    /// Builds a snapshot of everything applied so far (the handler's
    /// [`StateMachineHandler::snapshot`]), stores it, lets Raft purge the log behind it (keeping
    /// [`QuorumConfig::keep_after_snapshot`] entries), and returns the last index it includes.
    pub async fn snapshot(&self, timeout: Duration) -> Result<u64> {
        let applied = self.status().last_applied.unwrap_or(0);
        self.raft.trigger().snapshot().await.map_err(fatal)?;
        self.wait_until(timeout, |s| s.snapshot.filter(|&i| i >= applied))
            .await
    }

    /// Stops Raft and the listener. Idempotent.
    pub async fn shutdown(&self) -> Result<()> {
        let res = self.raft.shutdown().await;
        if let Some(slot) = &self.service {
            slot.stop();
        }
        let server = self.server.lock().take();
        if let Some(server) = server {
            server.abort();
            let _ = server.await;
        }
        res.map_err(|e| QuorumError::Raft(e.to_string()))
    }
}

impl Drop for MetadataQuorum {
    fn drop(&mut self) {
        if let Some(server) = self.server.lock().take() {
            server.abort();
        }
        if let Some(slot) = &self.service {
            slot.stop();
        }
    }
}

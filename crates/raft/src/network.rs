//! The transport between voters: Raft RPCs as Kafka requests of the Strom-private `StromRaft`
//! API ([`crate::wire`]) on the voters' controller listeners.
//!
//! Serving: the application that owns the controller listener (the broker) reads Kafka frames
//! there with its connection pipeline (frame bound, idle timeout, connection quotas) and hands
//! each StromRaft body to [`RaftService::handle`]; the voter plugs its Raft into the service's
//! [`RaftServiceSlot`] when it starts ([`raft_service`], [`crate::QuorumConfig::service`]).
//! Requests that arrive before the voter has started wait for it. A voter started without an
//! application listener binds [`crate::QuorumConfig::listen`] and serves the same frames itself
//! ([`serve`]).
//!
//! Sending: a [`PeerClient`] per openraft client (each replication stream, its snapshot
//! stream, each election and each heartbeat round of a linearizable read gets its own), so a
//! snapshot transfer never holds up the entries and heartbeats of its replication stream. A
//! client connects lazily through a [`Connector`], drops its connection on any error and
//! connects again on the next call (a request that fails on a reused connection is retried once
//! on a fresh one: a peer that restarted closed the old one). Every call is bounded by
//! openraft's RPC deadline, connecting by `connect_timeout`. A peer that cannot be reached is
//! reported as `Unreachable`, which makes openraft back off before retrying.
//!
//! Frame bounds: a request is at most `max_frame` bytes (the receiver's
//! `socket.request.max.bytes`, the same on every voter). An AppendEntries carries at most
//! [`APPEND_BUDGET`] of entries (a single larger entry goes alone): the entries that do not fit
//! are left out and reported unsent with openraft's `PartialSuccess`, and openraft sends them
//! next. Snapshots travel in chunks of at most half the bound (and 3 MiB); a proposal must fit
//! one request ([`crate::MetadataQuorum::propose`]).

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Timeout, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{BasicNode, RPCTypes};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::quorum::QuorumError;
use crate::transport::{self, Connector, RaftConnection};
use crate::types::{NodeId, Raft, TypeConfig};
use crate::wire::{self, RaftRequest, RaftResponse, RaftRpc, WireError};

/// Where the voter is, as its [`RaftService`] sees it.
#[derive(Clone)]
enum VoterState {
    Starting,
    Running { raft: Raft, node_id: NodeId },
    Stopped,
}

/// Runs the StromRaft requests an application reads on its own listener on this node's voter.
#[derive(Clone)]
pub struct RaftService {
    voter: watch::Receiver<VoterState>,
}

impl fmt::Debug for RaftService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RaftService")
    }
}

/// The voter's side of a [`RaftService`], given in [`crate::QuorumConfig::service`].
#[derive(Clone)]
pub struct RaftServiceSlot(Arc<watch::Sender<VoterState>>);

impl fmt::Debug for RaftServiceSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RaftServiceSlot")
    }
}

impl RaftServiceSlot {
    pub(crate) fn start(&self, raft: Raft, node_id: NodeId) -> Result<(), QuorumError> {
        let mut taken = false;
        self.0.send_if_modified(|s| match s {
            VoterState::Starting => {
                *s = VoterState::Running { raft, node_id };
                true
            }
            _ => {
                taken = true;
                false
            }
        });
        if taken {
            return Err(QuorumError::Config(
                "the raft service is already in use by another voter".into(),
            ));
        }
        Ok(())
    }

    pub(crate) fn stop(&self) {
        self.0.send_replace(VoterState::Stopped);
    }
}

/// A service for the StromRaft requests of an application's listener, and the slot its voter
/// fills when it starts.
pub fn raft_service() -> (RaftService, RaftServiceSlot) {
    let (tx, rx) = watch::channel(VoterState::Starting);
    (RaftService { voter: rx }, RaftServiceSlot(Arc::new(tx)))
}

impl RaftService {
    /// Decodes one StromRaft request body, runs it on this node's voter (waiting until the
    /// voter has started) and returns the response body. An error means the body is not a Raft
    /// request ([`QuorumError::Wire`]; close the connection) or the voter has stopped.
    pub async fn handle(&self, body: &[u8]) -> Result<Vec<u8>, QuorumError> {
        let req = wire::decode_request(body)?;
        let mut rx = self.voter.clone();
        let (raft, node_id) = match &*rx
            .wait_for(|s| !matches!(s, VoterState::Starting))
            .await
            .map_err(|_| QuorumError::ShutDown)?
        {
            VoterState::Running { raft, node_id } => (raft.clone(), *node_id),
            _ => return Err(QuorumError::ShutDown),
        };
        let resp = run(&raft, node_id, req).await;
        Ok(wire::encode_body(&resp, usize::MAX)?)
    }
}

/// Runs one decoded request on `raft`.
async fn run(raft: &Raft, node_id: NodeId, req: RaftRequest) -> RaftResponse {
    if req.to != node_id {
        tracing::warn!(
            from = req.from,
            to = req.to,
            node_id,
            "raft request for another node"
        );
        return RaftResponse::WrongNode { node_id };
    }
    match req.rpc {
        RaftRpc::AppendEntries(r) => RaftResponse::AppendEntries(raft.append_entries(r).await),
        RaftRpc::Vote(r) => RaftResponse::Vote(raft.vote(r).await),
        RaftRpc::InstallSnapshot(r) => {
            RaftResponse::InstallSnapshot(raft.install_snapshot(r).await)
        }
        RaftRpc::Status => RaftResponse::Status {
            initialized: raft.is_initialized().await.unwrap_or(true),
        },
    }
}

/// Serves StromRaft frames of at most `max_frame` bytes on `listener` (a voter without an
/// application listener) until the task is aborted. Any other frame closes its connection.
pub(crate) async fn serve(listener: TcpListener, service: RaftService, max_frame: usize) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((mut stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    let service = service.clone();
                    conns.spawn(async move {
                        if let Err(e) = serve_connection(&mut stream, &service, max_frame).await {
                            tracing::debug!(%peer, error = %e, "raft connection closed");
                        }
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a raft connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

async fn serve_connection(
    stream: &mut tokio::net::TcpStream,
    service: &RaftService,
    max_frame: usize,
) -> Result<(), QuorumError> {
    while let Some(payload) = transport::read_frame(stream, max_frame).await? {
        let (header, body) = wire::parse_request_frame(payload)?;
        let resp = service.handle(&body).await?;
        stream
            .write_all(&wire::response_frame(header.correlation_id, &resp))
            .await?;
    }
    Ok(())
}

/// Builds a [`PeerClient`] per openraft replication stream, snapshot stream or election.
pub(crate) struct NetworkFactory<C> {
    pub node_id: NodeId,
    pub voters: Arc<BTreeMap<NodeId, SocketAddr>>,
    pub connect_timeout: Duration,
    pub max_frame: usize,
    pub connector: Arc<C>,
}

impl<C: Connector> RaftNetworkFactory<TypeConfig> for NetworkFactory<C>
where
    C::Stream: Sync,
{
    type Network = PeerClient<C>;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> PeerClient<C> {
        let addr = self
            .voters
            .get(&target)
            .copied()
            .or_else(|| node.addr.parse().ok());
        PeerClient::new(
            self.node_id,
            target,
            addr,
            self.connect_timeout,
            self.max_frame,
            self.connector.clone(),
        )
    }
}

pub(crate) enum CallError {
    Unreachable(io::Error),
    Network(io::Error),
    Timeout(Duration),
    /// The request would exceed the frame bound (`size` bytes of body, `max` allowed).
    TooLarge {
        size: u64,
        max: u64,
    },
}

pub(crate) struct PeerClient<C: Connector> {
    from: NodeId,
    target: NodeId,
    addr: Option<SocketAddr>,
    connect_timeout: Duration,
    max_frame: usize,
    client_id: String,
    connector: Arc<C>,
    conn: Option<RaftConnection<C::Stream>>,
}

impl<C: Connector> PeerClient<C> {
    pub(crate) fn new(
        from: NodeId,
        target: NodeId,
        addr: Option<SocketAddr>,
        connect_timeout: Duration,
        max_frame: usize,
        connector: Arc<C>,
    ) -> Self {
        Self {
            from,
            target,
            addr,
            connect_timeout,
            max_frame,
            client_id: format!("strom-raft-{from}"),
            connector,
            conn: None,
        }
    }

    /// The largest request body: the frame bound less the request header.
    fn max_body(&self) -> usize {
        // api key, version, correlation id, client id (length + bytes), no tagged fields.
        self.max_frame
            .saturating_sub(2 + 2 + 4 + 2 + self.client_id.len() + 1)
    }

    async fn connect(&mut self) -> Result<(), CallError> {
        let addr = self.addr.ok_or_else(|| {
            CallError::Unreachable(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no address for node {}", self.target),
            ))
        })?;
        let stream =
            match tokio::time::timeout(self.connect_timeout, self.connector.connect(addr)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => return Err(CallError::Unreachable(e)),
                Err(_) => {
                    return Err(CallError::Unreachable(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("connecting to node {} at {addr} timed out", self.target),
                    )))
                }
            };
        self.conn = Some(RaftConnection::new(
            stream,
            self.client_id.clone(),
            self.max_frame,
        ));
        Ok(())
    }

    async fn exchange(&mut self, body: &[u8]) -> io::Result<RaftResponse> {
        let conn = self.conn.as_mut().expect("connected");
        let resp = conn.call(body).await?;
        wire::decode_response(&resp).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }

    async fn call_inner(&mut self, body: &[u8]) -> Result<RaftResponse, CallError> {
        let reused = self.conn.is_some();
        if !reused {
            self.connect().await?;
        }
        match self.exchange(body).await {
            Ok(r) => Ok(r),
            Err(_) if reused => {
                // The peer may have restarted and closed the old connection: try a new one.
                self.conn = None;
                self.connect().await?;
                self.exchange(body).await.map_err(CallError::Network)
            }
            Err(e) => Err(CallError::Network(e)),
        }
    }

    /// Sends one request and waits for its response, at most `timeout`.
    pub(crate) async fn call(
        &mut self,
        rpc: RaftRpc,
        timeout: Duration,
    ) -> Result<RaftResponse, CallError> {
        let req = RaftRequest {
            from: self.from,
            to: self.target,
            rpc,
        };
        self.call_request(req, timeout).await
    }

    async fn call_request(
        &mut self,
        req: RaftRequest,
        timeout: Duration,
    ) -> Result<RaftResponse, CallError> {
        let body = match wire::encode_body(&req, self.max_body()) {
            Ok(b) => b,
            Err(WireError::TooLarge { size, max }) => {
                return Err(CallError::TooLarge { size, max })
            }
            Err(e) => return Err(CallError::Network(io::Error::other(e))),
        };
        let res = match tokio::time::timeout(timeout, self.call_inner(&body)).await {
            Ok(r) => r,
            Err(_) => Err(CallError::Timeout(timeout)),
        };
        match res {
            Ok(RaftResponse::WrongNode { node_id }) => {
                self.conn = None;
                Err(CallError::Unreachable(io::Error::other(format!(
                    "{:?} is node {node_id}, not node {}",
                    self.addr, self.target
                ))))
            }
            Ok(r) => Ok(r),
            Err(e) => {
                self.conn = None;
                Err(e)
            }
        }
    }

    fn rpc_error<E: std::error::Error>(
        &self,
        e: CallError,
        action: RPCTypes,
    ) -> RPCError<NodeId, BasicNode, E> {
        match e {
            CallError::Unreachable(e) => RPCError::Unreachable(Unreachable::new(&e)),
            CallError::Network(e) => RPCError::Network(NetworkError::new(&e)),
            CallError::Timeout(timeout) => RPCError::Timeout(Timeout {
                action,
                id: self.from,
                target: self.target,
                timeout,
            }),
            CallError::TooLarge { size, max } => {
                RPCError::Network(NetworkError::new(&io::Error::other(format!(
                    "a {action:?} request of {size} bytes exceeds the frame bound of {max} bytes"
                ))))
            }
        }
    }
}

/// The most entry bytes one AppendEntries carries when it holds more than one entry. openraft
/// gives an AppendEntries one heartbeat interval and sends the stream's heartbeats after it, so
/// a catching-up follower gets many small appends rather than one of the frame bound's size
/// (Kafka's KRaft fetches likewise return at most 8 MiB). A single entry goes alone whatever
/// its size, up to the frame bound.
pub(crate) const APPEND_BUDGET: u64 = 1 << 20;

/// How many of `entries` entries to keep when they took `size` bytes and `budget` fit:
/// proportionally fewer, with a margin for entries larger than the average; at least one, and
/// fewer than before.
pub(crate) fn entries_to_keep(entries: usize, size: u64, budget: u64) -> usize {
    let fit = (entries as u128 * budget as u128 / size.max(1) as u128) as usize;
    (fit * 3 / 4).clamp(1, entries.saturating_sub(1).max(1))
}

fn unexpected<E: std::error::Error>() -> RPCError<NodeId, BasicNode, E> {
    RPCError::Network(NetworkError::new(&io::Error::new(
        io::ErrorKind::InvalidData,
        "unexpected response type",
    )))
}

impl<C: Connector> RaftNetwork<TypeConfig> for PeerClient<C>
where
    C::Stream: Sync,
{
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        // Send only the entries that fit the budget and report the rest unsent: openraft
        // accepts a partial success and sends the next entries at once.
        let max = self.max_body() as u64;
        let budget = max.min(APPEND_BUDGET);
        let mut req = RaftRequest {
            from: self.from,
            to: self.target,
            rpc: RaftRpc::AppendEntries(rpc),
        };
        let mut sent_up_to = None;
        loop {
            let size = wire::body_size(&req).map_err(|e| {
                self.rpc_error(
                    CallError::Network(io::Error::other(e)),
                    RPCTypes::AppendEntries,
                )
            })?;
            let RaftRpc::AppendEntries(r) = &mut req.rpc else {
                unreachable!("built above")
            };
            let n = r.entries.len();
            if size <= budget || (n <= 1 && size <= max) {
                break;
            }
            if n <= 1 {
                // Proposals are bounded so that every entry fits one request.
                return Err(
                    self.rpc_error(CallError::TooLarge { size, max }, RPCTypes::AppendEntries)
                );
            }
            r.entries.truncate(entries_to_keep(n, size, budget));
            sent_up_to = r.entries.last().map(|e| e.log_id);
        }
        match self.call_request(req, option.hard_ttl()).await {
            Ok(RaftResponse::AppendEntries(Ok(AppendEntriesResponse::Success)))
                if sent_up_to.is_some() =>
            {
                Ok(AppendEntriesResponse::PartialSuccess(sent_up_to))
            }
            Ok(RaftResponse::AppendEntries(r)) => {
                r.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
            }
            Ok(_) => Err(unexpected()),
            Err(e) => Err(self.rpc_error(e, RPCTypes::AppendEntries)),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        match self
            .call(RaftRpc::InstallSnapshot(rpc), option.hard_ttl())
            .await
        {
            Ok(RaftResponse::InstallSnapshot(r)) => {
                r.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
            }
            Ok(_) => Err(unexpected()),
            Err(e) => Err(self.rpc_error(e, RPCTypes::InstallSnapshot)),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        match self.call(RaftRpc::Vote(rpc), option.hard_ttl()).await {
            Ok(RaftResponse::Vote(r)) => {
                r.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
            }
            Ok(_) => Err(unexpected()),
            Err(e) => Err(self.rpc_error(e, RPCTypes::Vote)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::entries_to_keep;

    #[test]
    fn fewer_entries_are_kept_than_did_not_fit() {
        assert_eq!(entries_to_keep(300, 200, 100), 112);
        assert_eq!(entries_to_keep(2, 1000, 10), 1);
        assert_eq!(entries_to_keep(10, 11, 10), 6);
        // Never the same count again, never zero.
        assert_eq!(entries_to_keep(3, 4, 4), 2);
        assert_eq!(entries_to_keep(2, u64::MAX, 1), 1);
    }
}

//! The transport between voters: one TCP connection per (peer, openraft client), opened with
//! [`PREAMBLE`] and then carrying length-prefixed frames (`[len: u32 BE][bincode body]`) of
//! [`Envelope`] requests and [`RpcResponse`] responses, one request in flight per connection.
//!
//! The preamble lets one port carry both Raft and Kafka requests, as a Kafka controller
//! listener does: read as a Kafka frame size its first four bytes are negative, which no Kafka
//! client sends. The application that owns such a shared listener reads the preamble itself and
//! hands the stream over through [`raft_connections`]; a voter started without one binds
//! [`crate::QuorumConfig::listen`] itself and checks the preamble on every connection.
//!
//! A client connects lazily, drops its connection on any error and connects again on the next
//! call (a request that fails on a reused connection is retried once on a fresh one: a peer that
//! restarted closed the old one). Every call is bounded by openraft's RPC deadline, connecting by
//! `connect_timeout`. A peer that cannot be reached is reported as `Unreachable`, which makes
//! openraft back off before retrying.

use std::collections::BTreeMap;
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
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::types::{NodeId, Raft, TypeConfig};

/// Largest frame accepted (a snapshot chunk or a batch of entries is far smaller).
const MAX_FRAME: usize = 256 << 20;

/// The first bytes a Raft client sends on a new connection. The first byte has its high bit
/// set, so as the start of a Kafka frame size it would be negative: a listener that also serves
/// Kafka requests tells the two apart by the first byte.
pub const PREAMBLE: [u8; 8] = [0xFF, b'S', b'T', b'R', b'A', b'F', b'T', 1];

/// The sending side of [`raft_connections`]: where the owner of a shared listener hands each
/// Raft connection, its preamble already read.
#[derive(Clone, Debug)]
pub struct RaftConnectionSender(mpsc::Sender<TcpStream>);

impl RaftConnectionSender {
    /// Hands `stream` (preamble consumed) to the voter. Connections that arrive before the
    /// voter has started wait in the channel; after it has stopped they are dropped.
    pub async fn hand_over(&self, stream: TcpStream) {
        let _ = self.0.send(stream).await;
    }
}

/// The receiving side of [`raft_connections`], given to the voter in
/// [`crate::QuorumConfig::incoming`]; taken once, when the voter starts.
#[derive(Clone, Debug)]
pub struct RaftInbox(Arc<parking_lot::Mutex<Option<mpsc::Receiver<TcpStream>>>>);

impl RaftInbox {
    pub(crate) fn take(&self) -> Option<mpsc::Receiver<TcpStream>> {
        self.0.lock().take()
    }
}

/// A channel for Raft connections accepted by the application (a controller listener that
/// also carries Kafka requests) instead of a listener of the voter's own.
pub fn raft_connections() -> (RaftConnectionSender, RaftInbox) {
    let (tx, rx) = mpsc::channel(64);
    (
        RaftConnectionSender(tx),
        RaftInbox(Arc::new(parking_lot::Mutex::new(Some(rx)))),
    )
}

#[derive(Serialize, Deserialize)]
pub(crate) struct Envelope {
    pub from: NodeId,
    pub to: NodeId,
    pub req: RpcRequest,
}

#[derive(Serialize, Deserialize)]
pub(crate) enum RpcRequest {
    AppendEntries(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<NodeId>),
    InstallSnapshot(InstallSnapshotRequest<TypeConfig>),
    /// Is the peer's Raft state initialized (used before bootstrapping a fresh cluster)?
    Status,
}

#[derive(Serialize, Deserialize)]
pub(crate) enum RpcResponse {
    AppendEntries(Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>),
    Vote(Result<VoteResponse<NodeId>, RaftError<NodeId>>),
    InstallSnapshot(
        Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>,
    ),
    Status {
        initialized: bool,
    },
    /// The request was addressed to another node id (a misconfigured quorum).
    WrongNode {
        node_id: NodeId,
    },
}

async fn write_frame(s: &mut TcpStream, body: &[u8]) -> io::Result<()> {
    let mut buf = Vec::with_capacity(body.len() + 4);
    buf.extend_from_slice(&(body.len() as u32).to_be_bytes());
    buf.extend_from_slice(body);
    s.write_all(&buf).await
}

/// Reads one frame; `Ok(None)` on a clean end of stream before a frame starts.
async fn read_frame(s: &mut TcpStream) -> io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 4];
    match s.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame of {len} bytes is too large"),
        ));
    }
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).await?;
    Ok(Some(body))
}

/// Serves the Raft RPCs of `raft` on `listener` until the task is aborted.
pub(crate) async fn serve(listener: TcpListener, raft: Raft, node_id: NodeId) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((mut stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    let raft = raft.clone();
                    conns.spawn(async move {
                        let mut preamble = [0u8; PREAMBLE.len()];
                        let r = match stream.read_exact(&mut preamble).await {
                            Ok(_) if preamble == PREAMBLE => serve_connection(stream, raft, node_id).await,
                            Ok(_) => Err(io::Error::new(io::ErrorKind::InvalidData, "not a raft connection")),
                            Err(e) => Err(e),
                        };
                        if let Err(e) = r {
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

/// Serves the Raft connections handed over through [`raft_connections`] until the task is
/// aborted or every sender is gone.
pub(crate) async fn serve_incoming(
    mut incoming: mpsc::Receiver<TcpStream>,
    raft: Raft,
    node_id: NodeId,
) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            stream = incoming.recv() => match stream {
                Some(stream) => {
                    let raft = raft.clone();
                    conns.spawn(async move {
                        let peer = stream.peer_addr().ok();
                        if let Err(e) = serve_connection(stream, raft, node_id).await {
                            tracing::debug!(?peer, error = %e, "raft connection closed");
                        }
                    });
                }
                None => return,
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

/// Serves one Raft connection whose preamble has been read, until the peer closes it.
async fn serve_connection(mut stream: TcpStream, raft: Raft, node_id: NodeId) -> io::Result<()> {
    let _ = stream.set_nodelay(true);
    while let Some(body) = read_frame(&mut stream).await? {
        let env: Envelope = bincode::deserialize(&body)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        let resp = if env.to != node_id {
            tracing::warn!(
                from = env.from,
                to = env.to,
                node_id,
                "raft request for another node"
            );
            RpcResponse::WrongNode { node_id }
        } else {
            match env.req {
                RpcRequest::AppendEntries(r) => {
                    RpcResponse::AppendEntries(raft.append_entries(r).await)
                }
                RpcRequest::Vote(r) => RpcResponse::Vote(raft.vote(r).await),
                RpcRequest::InstallSnapshot(r) => {
                    RpcResponse::InstallSnapshot(raft.install_snapshot(r).await)
                }
                RpcRequest::Status => RpcResponse::Status {
                    initialized: raft.is_initialized().await.unwrap_or(true),
                },
            }
        };
        let out = bincode::serialize(&resp).map_err(io::Error::other)?;
        write_frame(&mut stream, &out).await?;
    }
    Ok(())
}

/// Builds a [`PeerClient`] per openraft replication stream or election.
pub(crate) struct NetworkFactory {
    pub node_id: NodeId,
    pub voters: Arc<BTreeMap<NodeId, SocketAddr>>,
    pub connect_timeout: Duration,
}

impl RaftNetworkFactory<TypeConfig> for NetworkFactory {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> PeerClient {
        let addr = self
            .voters
            .get(&target)
            .copied()
            .or_else(|| node.addr.parse().ok());
        PeerClient::new(self.node_id, target, addr, self.connect_timeout)
    }
}

pub(crate) enum CallError {
    Unreachable(io::Error),
    Network(io::Error),
    Timeout(Duration),
}

pub(crate) struct PeerClient {
    from: NodeId,
    target: NodeId,
    addr: Option<SocketAddr>,
    connect_timeout: Duration,
    stream: Option<TcpStream>,
}

impl PeerClient {
    pub(crate) fn new(
        from: NodeId,
        target: NodeId,
        addr: Option<SocketAddr>,
        connect_timeout: Duration,
    ) -> Self {
        Self {
            from,
            target,
            addr,
            connect_timeout,
            stream: None,
        }
    }

    async fn connect(&mut self) -> Result<(), CallError> {
        let addr = self.addr.ok_or_else(|| {
            CallError::Unreachable(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no address for node {}", self.target),
            ))
        })?;
        let stream =
            match tokio::time::timeout(self.connect_timeout, TcpStream::connect(addr)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => return Err(CallError::Unreachable(e)),
                Err(_) => {
                    return Err(CallError::Unreachable(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("connecting to node {} at {addr} timed out", self.target),
                    )))
                }
            };
        let _ = stream.set_nodelay(true);
        let mut stream = stream;
        stream
            .write_all(&PREAMBLE)
            .await
            .map_err(CallError::Unreachable)?;
        self.stream = Some(stream);
        Ok(())
    }

    async fn exchange(&mut self, body: &[u8]) -> io::Result<RpcResponse> {
        let s = self.stream.as_mut().expect("connected");
        write_frame(s, body).await?;
        let resp = read_frame(s).await?.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed by the peer",
            )
        })?;
        bincode::deserialize(&resp).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }

    async fn call_inner(&mut self, body: &[u8]) -> Result<RpcResponse, CallError> {
        let reused = self.stream.is_some();
        if !reused {
            self.connect().await?;
        }
        match self.exchange(body).await {
            Ok(r) => Ok(r),
            Err(_) if reused => {
                // The peer may have restarted and closed the old connection: try a new one.
                self.stream = None;
                self.connect().await?;
                self.exchange(body).await.map_err(CallError::Network)
            }
            Err(e) => Err(CallError::Network(e)),
        }
    }

    /// Sends one request and waits for its response, at most `timeout`.
    pub(crate) async fn call(
        &mut self,
        req: RpcRequest,
        timeout: Duration,
    ) -> Result<RpcResponse, CallError> {
        let env = Envelope {
            from: self.from,
            to: self.target,
            req,
        };
        let body = bincode::serialize(&env).map_err(|e| CallError::Network(io::Error::other(e)))?;
        let res = match tokio::time::timeout(timeout, self.call_inner(&body)).await {
            Ok(r) => r,
            Err(_) => Err(CallError::Timeout(timeout)),
        };
        match res {
            Ok(RpcResponse::WrongNode { node_id }) => {
                self.stream = None;
                Err(CallError::Unreachable(io::Error::other(format!(
                    "{:?} is node {node_id}, not node {}",
                    self.addr, self.target
                ))))
            }
            Ok(r) => Ok(r),
            Err(e) => {
                self.stream = None;
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
        }
    }
}

fn unexpected<E: std::error::Error>() -> RPCError<NodeId, BasicNode, E> {
    RPCError::Network(NetworkError::new(&io::Error::new(
        io::ErrorKind::InvalidData,
        "unexpected response type",
    )))
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        match self
            .call(RpcRequest::AppendEntries(rpc), option.hard_ttl())
            .await
        {
            Ok(RpcResponse::AppendEntries(r)) => {
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
            .call(RpcRequest::InstallSnapshot(rpc), option.hard_ttl())
            .await
        {
            Ok(RpcResponse::InstallSnapshot(r)) => {
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
        match self.call(RpcRequest::Vote(rpc), option.hard_ttl()).await {
            Ok(RpcResponse::Vote(r)) => {
                r.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
            }
            Ok(_) => Err(unexpected()),
            Err(e) => Err(self.rpc_error(e, RPCTypes::Vote)),
        }
    }
}

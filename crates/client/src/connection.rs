//! One TCP connection to one broker: ApiVersions handshake, version negotiation, correlation
//! ids, pipelining and request timeouts.
//!
//! Writes go through a writer task and reads through a reader task, so any number of requests
//! may be in flight; a response is routed to its caller by correlation id. Dropping a request
//! future (e.g. on timeout) is safe: the frame is either written whole or not at all, and a late
//! response is discarded.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use strom_protocol::frame;
use strom_protocol::kafka::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, RequestHeader, ResponseHeader,
};
use strom_protocol::kafka::protocol::{Decodable, Encodable, Request, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::error::{Error, Result};
use crate::versions::{client_range, pick_version, BrokerVersions};

/// Settings for a connection.
#[derive(Debug, Clone)]
pub struct ConnectionConfig {
    /// Sent in every request header.
    pub client_id: String,
    /// How long to wait for each response.
    pub request_timeout: Duration,
    /// How long to wait for the TCP connect.
    pub connect_timeout: Duration,
    /// The largest response frame accepted.
    pub max_response_size: usize,
}

impl Default for ConnectionConfig {
    fn default() -> Self {
        ConnectionConfig {
            client_id: "strom-client".into(),
            request_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            max_response_size: frame::DEFAULT_MAX_REQUEST_SIZE,
        }
    }
}

type Waiter = oneshot::Sender<Result<Bytes>>;

#[derive(Default)]
struct Pending {
    waiters: HashMap<i32, Waiter>,
    closed: Option<String>,
}

struct Shared {
    addr: String,
    pending: Mutex<Pending>,
}

impl Shared {
    fn close(&self, reason: String) {
        let waiters = {
            let mut p = self.pending.lock().unwrap();
            if p.closed.is_none() {
                p.closed = Some(reason);
            }
            std::mem::take(&mut p.waiters)
        };
        for (_, w) in waiters {
            let _ = w.send(Err(Error::Disconnected(self.addr.clone())));
        }
    }
}

/// A connection to one broker. Cheap to share behind an `Arc`; all methods take `&self`.
pub struct Connection {
    shared: Arc<Shared>,
    frames: mpsc::UnboundedSender<Bytes>,
    next_correlation_id: AtomicI32,
    versions: RwLock<BrokerVersions>,
    /// Finalized feature levels from ApiVersions v3+ (`transaction.version`, ...): name -> max
    /// version level.
    features: RwLock<std::collections::HashMap<String, i16>>,
    config: ConnectionConfig,
    tasks: [JoinHandle<()>; 2],
}

impl Drop for Connection {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("addr", &self.shared.addr)
            .finish()
    }
}

impl Connection {
    /// Connects to `addr` (`host:port`) and performs the ApiVersions handshake.
    pub async fn connect(addr: &str, config: ConnectionConfig) -> Result<Connection> {
        let io_err = |source| Error::Io {
            addr: addr.to_string(),
            source,
        };
        let stream = tokio::time::timeout(config.connect_timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| {
                io_err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "connect timed out",
                ))
            })?
            .map_err(io_err)?;
        stream.set_nodelay(true).map_err(io_err)?;
        let (rd, wr) = stream.into_split();
        let shared = Arc::new(Shared {
            addr: addr.to_string(),
            pending: Mutex::new(Pending::default()),
        });
        let (tx, rx) = mpsc::unbounded_channel();
        let reader = tokio::spawn(read_loop(rd, shared.clone(), config.max_response_size));
        let writer = tokio::spawn(write_loop(wr, rx, shared.clone()));
        let conn = Connection {
            shared,
            frames: tx,
            next_correlation_id: AtomicI32::new(0),
            versions: RwLock::new(BrokerVersions::default()),
            features: RwLock::new(std::collections::HashMap::new()),
            config,
            tasks: [reader, writer],
        };
        conn.handshake().await?;
        Ok(conn)
    }

    /// The address this connection was opened to.
    pub fn addr(&self) -> &str {
        &self.shared.addr
    }

    /// True once the socket failed or closed; a new connection is needed.
    pub fn is_closed(&self) -> bool {
        self.shared.pending.lock().unwrap().closed.is_some()
    }

    /// Closes the connection: every request awaiting a response fails with
    /// [`Error::Disconnected`] and the socket is shut. Kafka's clients do this when a request
    /// times out, so that nothing more is read from or written to a connection in an unknown
    /// state.
    pub fn close(&self, reason: &str) {
        self.shared.close(reason.to_string());
        for t in &self.tasks {
            t.abort();
        }
    }

    /// Requests currently awaiting a response.
    pub fn in_flight(&self) -> usize {
        self.shared.pending.lock().unwrap().waiters.len()
    }

    /// The broker's advertised version ranges.
    pub fn broker_versions(&self) -> BrokerVersions {
        self.versions.read().unwrap().clone()
    }

    /// The finalized level of a cluster feature as the broker advertised it in ApiVersions
    /// (e.g. `transaction.version`), or `None` when not advertised.
    pub fn finalized_feature(&self, name: &str) -> Option<i16> {
        self.features.read().unwrap().get(name).copied()
    }

    /// The version to use for `api`: the highest both this client and the broker support.
    pub fn version_for(&self, api: ApiKey) -> Result<i16> {
        self.versions
            .read()
            .unwrap()
            .pick(api)
            .ok_or(Error::UnsupportedVersion(api_name(api)))
    }

    /// Sends ApiVersions v3 (falling back to what the broker says, or v0, on
    /// UNSUPPORTED_VERSION) and records the broker's ranges.
    async fn handshake(&self) -> Result<()> {
        let (_, client_max) = client_range(ApiKey::ApiVersions).unwrap();
        let mut version = client_max;
        for _ in 0..3 {
            let mut req = ApiVersionsRequest::default();
            if version >= 3 {
                req.client_software_name = StrBytes::from_static_str("strom-client");
                req.client_software_version = StrBytes::from_static_str(env!("CARGO_PKG_VERSION"));
            }
            let body = self.roundtrip_raw(&req, version).await?;
            // The error code is the first field in every version; on UNSUPPORTED_VERSION the
            // broker answers in v0 format, listing the ApiVersions range it does support.
            if body.len() >= 2 && i16::from_be_bytes([body[0], body[1]]) == 35 && version > 0 {
                let fallback = ApiVersionsResponse::decode(&mut body.clone(), 0).ok();
                let broker_range = fallback.and_then(|r| {
                    r.api_keys
                        .iter()
                        .find(|k| k.api_key == ApiKey::ApiVersions as i16)
                        .map(|k| (k.min_version, k.max_version))
                });
                let next = broker_range
                    .and_then(|r| pick_version((0, version - 1), r))
                    .unwrap_or(0);
                tracing::debug!(addr = self.addr(), version, next, "ApiVersions fallback");
                version = next;
                continue;
            }
            let resp = ApiVersionsResponse::decode(&mut body.clone(), version)
                .map_err(|e| Error::Protocol(format!("ApiVersions v{version}: {e}")))?;
            if let Some(err) = Error::kafka(resp.error_code, None) {
                return Err(err);
            }
            *self.versions.write().unwrap() = BrokerVersions::new(
                resp.api_keys
                    .iter()
                    .map(|k| (k.api_key, k.min_version, k.max_version)),
            );
            *self.features.write().unwrap() = resp
                .finalized_features
                .iter()
                .map(|f| (f.name.to_string(), f.max_version_level))
                .collect();
            return Ok(());
        }
        Err(Error::UnsupportedVersion("ApiVersions"))
    }

    /// Sends `req` as `version` and decodes the response.
    pub async fn send<R: Request>(&self, req: &R, version: i16) -> Result<R::Response> {
        let body = self.roundtrip_raw(req, version).await?;
        let mut body = body;
        R::Response::decode(&mut body, version)
            .map_err(|e| Error::Protocol(format!("decoding {} v{version}: {e}", key_name(R::KEY))))
    }

    /// Negotiates the version for `R`, builds the request for it and sends it.
    pub async fn request<R: Request>(&self, build: impl FnOnce(i16) -> R) -> Result<R::Response> {
        let api = ApiKey::try_from(R::KEY).map_err(|_| Error::Protocol("bad api key".into()))?;
        let version = self.version_for(api)?;
        let req = build(version);
        self.send(&req, version).await
    }

    /// Sends a request that gets no response (Produce with acks=0).
    pub fn send_no_response<R: Request>(&self, req: &R, version: i16) -> Result<()> {
        let correlation_id = self.next_correlation_id.fetch_add(1, Ordering::Relaxed);
        let frame = self.encode(req, version, correlation_id)?;
        if self.is_closed() {
            return Err(Error::Disconnected(self.shared.addr.clone()));
        }
        self.frames
            .send(frame)
            .map_err(|_| Error::Disconnected(self.shared.addr.clone()))
    }

    fn encode<R: Request>(&self, req: &R, version: i16, correlation_id: i32) -> Result<Bytes> {
        let api = ApiKey::try_from(R::KEY).map_err(|_| Error::Protocol("bad api key".into()))?;
        let mut header = RequestHeader::default();
        header.request_api_key = R::KEY;
        header.request_api_version = version;
        header.correlation_id = correlation_id;
        header.client_id = Some(StrBytes::from_string(self.config.client_id.clone()));
        let mut buf = BytesMut::with_capacity(256);
        buf.put_i32(0);
        header
            .encode(&mut buf, api.request_header_version(version))
            .map_err(|e| Error::Protocol(format!("encoding {} header: {e}", api_name(api))))?;
        req.encode(&mut buf, version)
            .map_err(|e| Error::Protocol(format!("encoding {} v{version}: {e}", api_name(api))))?;
        let size = (buf.len() - 4) as i32;
        buf[..4].copy_from_slice(&size.to_be_bytes());
        Ok(buf.freeze())
    }

    /// Sends and returns the response body (after the response header).
    async fn roundtrip_raw<R: Request>(&self, req: &R, version: i16) -> Result<Bytes> {
        let pending = self.start_raw(req, version)?;
        self.finish_raw(pending).await
    }

    /// Encodes `req`, registers its correlation id and queues the frame for writing, all
    /// before returning: frames queued by successive calls are written in call order.
    fn start_raw<R: Request>(&self, req: &R, version: i16) -> Result<PendingResponse> {
        let api = ApiKey::try_from(R::KEY).map_err(|_| Error::Protocol("bad api key".into()))?;
        let correlation_id = self.next_correlation_id.fetch_add(1, Ordering::Relaxed);
        let frame = self.encode(req, version, correlation_id)?;
        let (tx, rx) = oneshot::channel();
        {
            let mut p = self.shared.pending.lock().unwrap();
            if p.closed.is_some() {
                return Err(Error::Disconnected(self.shared.addr.clone()));
            }
            p.waiters.insert(correlation_id, tx);
        }
        if self.frames.send(frame).is_err() {
            self.shared
                .pending
                .lock()
                .unwrap()
                .waiters
                .remove(&correlation_id);
            return Err(Error::Disconnected(self.shared.addr.clone()));
        }
        Ok(PendingResponse {
            api,
            version,
            correlation_id,
            rx,
        })
    }

    async fn finish_raw(&self, pending: PendingResponse) -> Result<Bytes> {
        let PendingResponse {
            api,
            version,
            correlation_id,
            rx,
        } = pending;
        let timeout = self.config.request_timeout;
        let payload = match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(r)) => r?,
            Ok(Err(_)) => return Err(Error::Disconnected(self.shared.addr.clone())),
            Err(_) => {
                self.shared
                    .pending
                    .lock()
                    .unwrap()
                    .waiters
                    .remove(&correlation_id);
                return Err(Error::Timeout {
                    api: api_name(api),
                    addr: self.shared.addr.clone(),
                    timeout_ms: timeout.as_millis() as u64,
                });
            }
        };
        let mut payload = payload;
        let header = ResponseHeader::decode(&mut payload, api.response_header_version(version))
            .map_err(|e| Error::Protocol(format!("response header: {e}")))?;
        if header.correlation_id != correlation_id {
            return Err(Error::Protocol(format!(
                "correlation id mismatch: sent {correlation_id}, got {}",
                header.correlation_id
            )));
        }
        Ok(payload)
    }

    /// Queues `req` on the socket now (synchronously) and returns a future for its response.
    /// Requests queued by successive calls reach the broker in call order, which is what
    /// the producer relies on to keep a partition's batches in order; with [`Connection::send`]
    /// the order is only that in which the futures are first polled.
    pub fn send_ordered<R: Request>(
        self: &Arc<Self>,
        req: &R,
        version: i16,
    ) -> Result<impl Future<Output = Result<R::Response>> + Send + 'static> {
        let pending = self.start_raw(req, version)?;
        let conn = self.clone();
        Ok(async move {
            let mut body = conn.finish_raw(pending).await?;
            R::Response::decode(&mut body, version).map_err(|e| {
                Error::Protocol(format!("decoding {} v{version}: {e}", key_name(R::KEY)))
            })
        })
    }
}

/// A request written (or queued for writing) whose response has not been read yet.
struct PendingResponse {
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    rx: oneshot::Receiver<Result<Bytes>>,
}

async fn write_loop(
    mut wr: OwnedWriteHalf,
    mut rx: mpsc::UnboundedReceiver<Bytes>,
    shared: Arc<Shared>,
) {
    while let Some(frame) = rx.recv().await {
        if let Err(e) = wr.write_all(&frame).await {
            shared.close(format!("write failed: {e}"));
            return;
        }
    }
    let _ = wr.shutdown().await;
}

async fn read_loop(mut rd: OwnedReadHalf, shared: Arc<Shared>, max: usize) {
    let reason = loop {
        let mut len = [0u8; 4];
        if let Err(e) = rd.read_exact(&mut len).await {
            break format!("read failed: {e}");
        }
        let size = match frame::check(&len, max) {
            Err(e) => break e.to_string(),
            Ok(_) => i32::from_be_bytes(len) as usize,
        };
        let mut buf = BytesMut::zeroed(size);
        if let Err(e) = rd.read_exact(&mut buf).await {
            break format!("read failed: {e}");
        }
        if size < 4 {
            break "short response frame".to_string();
        }
        let payload = buf.freeze();
        let correlation_id = (&payload[..4]).get_i32();
        let waiter = shared
            .pending
            .lock()
            .unwrap()
            .waiters
            .remove(&correlation_id);
        match waiter {
            Some(w) => {
                let _ = w.send(Ok(payload));
            }
            None => tracing::debug!(correlation_id, "dropping response nobody waits for"),
        }
    };
    tracing::debug!(addr = %shared.addr, %reason, "connection closed");
    shared.close(reason);
}

/// A printable name for an API key.
pub fn api_name(api: ApiKey) -> &'static str {
    match api {
        ApiKey::Produce => "Produce",
        ApiKey::Fetch => "Fetch",
        ApiKey::ListOffsets => "ListOffsets",
        ApiKey::Metadata => "Metadata",
        ApiKey::ApiVersions => "ApiVersions",
        ApiKey::CreateTopics => "CreateTopics",
        ApiKey::DeleteTopics => "DeleteTopics",
        ApiKey::CreatePartitions => "CreatePartitions",
        ApiKey::DescribeConfigs => "DescribeConfigs",
        ApiKey::IncrementalAlterConfigs => "IncrementalAlterConfigs",
        ApiKey::DescribeCluster => "DescribeCluster",
        ApiKey::InitProducerId => "InitProducerId",
        _ => "request",
    }
}

fn key_name(key: i16) -> &'static str {
    ApiKey::try_from(key).map(api_name).unwrap_or("request")
}

#[cfg(test)]
mod tests {
    use super::*;
    use strom_protocol::kafka::messages::api_versions_response::ApiVersion;
    use strom_protocol::kafka::messages::ResponseHeader;
    use tokio::net::TcpListener;

    /// A fake broker that only speaks ApiVersions up to v2: it answers v3 with
    /// UNSUPPORTED_VERSION in v0 format, as Kafka does, and records the versions it saw.
    async fn fake_broker(listener: TcpListener) -> Vec<i16> {
        let (mut sock, _) = listener.accept().await.unwrap();
        let mut seen = Vec::new();
        loop {
            let mut len = [0u8; 4];
            if sock.read_exact(&mut len).await.is_err() {
                return seen;
            }
            let mut buf = vec![0u8; i32::from_be_bytes(len) as usize];
            sock.read_exact(&mut buf).await.unwrap();
            let h = frame::peek_header(&buf).unwrap();
            assert_eq!(h.api_key, ApiKey::ApiVersions as i16);
            seen.push(h.api_version);
            let key = |k: ApiKey, min, max| {
                let mut v = ApiVersion::default();
                v.api_key = k as i16;
                v.min_version = min;
                v.max_version = max;
                v
            };
            let mut resp = ApiVersionsResponse::default();
            let version = if h.api_version > 2 {
                resp.error_code = 35;
                resp.api_keys = vec![key(ApiKey::ApiVersions, 0, 2)];
                0
            } else {
                resp.api_keys = vec![
                    key(ApiKey::ApiVersions, 0, 2),
                    key(ApiKey::Produce, 3, 9),
                    key(ApiKey::Fetch, 4, 15),
                ];
                h.api_version
            };
            let mut out = BytesMut::new();
            out.put_i32(0);
            let mut rh = ResponseHeader::default();
            rh.correlation_id = h.correlation_id;
            rh.encode(&mut out, 0).unwrap();
            resp.encode(&mut out, version).unwrap();
            let n = (out.len() - 4) as i32;
            out[..4].copy_from_slice(&n.to_be_bytes());
            sock.write_all(&out).await.unwrap();
        }
    }

    #[tokio::test]
    async fn api_versions_falls_back_and_versions_are_clamped() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let broker = tokio::spawn(fake_broker(listener));
        let conn = Connection::connect(&addr, ConnectionConfig::default())
            .await
            .unwrap();
        assert_eq!(conn.version_for(ApiKey::Produce).unwrap(), 9);
        // The broker offers Fetch up to 15; the client implements up to 12.
        assert_eq!(conn.version_for(ApiKey::Fetch).unwrap(), 12);
        assert!(matches!(
            conn.version_for(ApiKey::Metadata),
            Err(Error::UnsupportedVersion("Metadata"))
        ));
        drop(conn);
        assert_eq!(broker.await.unwrap(), vec![3, 2]);
    }

    #[tokio::test]
    async fn request_timeout_and_disconnect() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        // Accepts and never answers.
        let t = tokio::spawn(async move {
            let (s, _) = listener.accept().await.unwrap();
            tokio::time::sleep(Duration::from_millis(500)).await;
            drop(s);
        });
        let cfg = ConnectionConfig {
            request_timeout: Duration::from_millis(100),
            ..Default::default()
        };
        let err = Connection::connect(&addr, cfg).await.unwrap_err();
        assert!(
            matches!(
                err,
                Error::Timeout {
                    api: "ApiVersions",
                    ..
                }
            ),
            "{err}"
        );
        t.await.unwrap();
    }
}

//! One task per client connection. Requests are read, handled and answered one at a time on
//! this task, as Kafka does by muting a socket while its request is in flight: a response is
//! written in full before the next request is handled. A malformed frame, an unknown API or an
//! undecodable request closes the connection; nothing else is affected.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{Buf, Bytes, BytesMut};
use strom_protocol::frame;
use strom_protocol::kafka::messages::{ApiKey, ApiVersionsRequest, RequestHeader};
use strom_protocol::kafka::protocol::Decodable;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::config::BrokerConfig;
use crate::handlers::{self, registry::HandlerResult};
use crate::request_context::{ClientInformation, KafkaPrincipal, ListenerInfo, RequestContext};
use crate::request_queue::{PoolLease, RequestQueue};
use crate::response;
use crate::server::Broker;

const READ_CHUNK: usize = 256 * 1024;

/// The number of requests being handled, across connections. A connection counts itself in
/// before it checks the stop signal, so once shutdown has sent the signal and seen the count at
/// zero no request can start any more.
#[derive(Debug, Default)]
pub struct InFlight {
    count: std::sync::atomic::AtomicUsize,
    idle: tokio::sync::Notify,
}

impl InFlight {
    fn enter(&self) {
        self.count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    fn leave(&self) {
        if self.count.fetch_sub(1, std::sync::atomic::Ordering::SeqCst) == 1 {
            self.idle.notify_waiters();
        }
    }

    /// Waits until no request is being handled, at most `limit`; false on timeout.
    pub async fn wait_idle(&self, limit: std::time::Duration) -> bool {
        let wait = async {
            loop {
                let idle = self.idle.notified();
                if self.count.load(std::sync::atomic::Ordering::SeqCst) == 0 {
                    return;
                }
                idle.await;
            }
        };
        tokio::time::timeout(limit, wait).await.is_ok()
    }
}

/// `max.connections` and `max.connections.per.ip` (Kafka's `ConnectionQuotas`): a slot of the
/// total is taken before accepting (the acceptor waits while the broker is full); a connection
/// over its address's limit is closed at once.
pub struct ConnectionQuotas {
    total: Arc<tokio::sync::Semaphore>,
    per_ip: parking_lot::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>,
    default_per_ip: usize,
    overrides: std::collections::BTreeMap<std::net::IpAddr, usize>,
}

/// A connection's place in [`ConnectionQuotas`], given back on drop.
pub struct ConnectionSlot {
    quotas: Arc<ConnectionQuotas>,
    ip: std::net::IpAddr,
    _total: tokio::sync::OwnedSemaphorePermit,
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        let mut m = self.quotas.per_ip.lock();
        if let Some(n) = m.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.ip);
            }
        }
    }
}

impl ConnectionQuotas {
    pub fn new(config: &crate::config::BrokerConfig) -> Self {
        Self {
            total: Arc::new(tokio::sync::Semaphore::new(
                config
                    .max_connections
                    .min(tokio::sync::Semaphore::MAX_PERMITS),
            )),
            per_ip: parking_lot::Mutex::new(Default::default()),
            default_per_ip: config.max_connections_per_ip,
            overrides: config.max_connections_per_ip_overrides.clone(),
        }
    }

    /// Waits for a free slot of `max.connections`.
    pub async fn acquire_total(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        self.total.clone().acquire_owned().await.ok()
    }

    /// Takes a slot for a connection from `ip`, or `None` when `ip` is at its limit.
    pub fn admit(
        self: &Arc<Self>,
        ip: std::net::IpAddr,
        total: tokio::sync::OwnedSemaphorePermit,
    ) -> Option<ConnectionSlot> {
        let limit = self
            .overrides
            .get(&ip)
            .copied()
            .unwrap_or(self.default_per_ip);
        let mut m = self.per_ip.lock();
        let n = m.entry(ip).or_insert(0);
        if *n >= limit {
            if *n == 0 {
                m.remove(&ip);
            }
            return None;
        }
        *n += 1;
        Some(ConnectionSlot {
            quotas: self.clone(),
            ip,
            _total: total,
        })
    }
}

/// What a connection knows about itself, for the [`RequestContext`] of each of its requests.
#[derive(Debug, Clone)]
pub struct ConnectionInfo {
    pub id: Arc<str>,
    pub peer: SocketAddr,
    pub listener: ListenerInfo,
    pub principal: KafkaPrincipal,
    pub client_information: ClientInformation,
}

impl ConnectionInfo {
    /// `local` and `peer` addresses and a per-listener counter make Kafka's connection id
    /// (`localAddr:localPort-remoteAddr:remotePort-index`).
    pub fn new(listener: ListenerInfo, local: SocketAddr, peer: SocketAddr, index: u64) -> Self {
        Self {
            id: Arc::from(format!("{local}-{peer}-{index}")),
            peer,
            listener,
            principal: KafkaPrincipal::anonymous(),
            client_information: ClientInformation::default(),
        }
    }

    pub fn context(&self, header: RequestHeader, api_key: ApiKey) -> RequestContext {
        RequestContext {
            api_version: header.request_api_version,
            header,
            api_key,
            connection_id: self.id.clone(),
            client_address: self.peer,
            listener: self.listener.clone(),
            principal: self.principal.clone(),
            client_information: self.client_information.clone(),
            forwarded: false,
        }
    }

    /// KIP-511: an ApiVersions v3+ request names the client software; a valid name and
    /// version (Kafka's `ApiVersionsRequest.isValid`) are kept for the rest of the connection.
    pub fn remember_client_software(&mut self, body: &Bytes, version: i16) {
        if version < 3 {
            return;
        }
        let Ok(req) = ApiVersionsRequest::decode(&mut body.clone(), version) else {
            return;
        };
        if valid_software_field(&req.client_software_name)
            && valid_software_field(&req.client_software_version)
        {
            self.client_information = ClientInformation {
                software_name: req.client_software_name,
                software_version: req.client_software_version,
            };
        }
    }
}

/// Kafka's pattern for client software names and versions: `[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?`.
fn valid_software_field(s: &str) -> bool {
    let b = s.as_bytes();
    let edge = |c: &u8| c.is_ascii_alphanumeric();
    let inner = |c: &u8| c.is_ascii_alphanumeric() || *c == b'-' || *c == b'.';
    match b {
        [] => false,
        [only] => edge(only),
        [first, mid @ .., last] => edge(first) && edge(last) && mid.iter().all(inner),
    }
}

/// Where a connection's requests go: the broker's handlers on a broker listener; on the
/// controller listener Raft first (served from start-up on, before the broker exists), then
/// the broker's handlers (`controller_listener.rs`). Every listener's connections share one
/// loop ([`serve_stream`]): its frame bound, idle timeout, request queue and in-flight
/// accounting.
pub trait Dispatch: Send + Sync + 'static {
    fn config(&self) -> &BrokerConfig;
    /// Where the requests being handled are counted, for shutdown.
    fn in_flight(&self) -> &InFlight;
    /// `queued.max.requests` and `queued.max.request.bytes` of the listener's connections.
    fn request_queue(&self) -> &RequestQueue;
    /// Handles one request frame (without its size prefix). `Ok(None)`: no response is due;
    /// an error closes the connection.
    fn handle<'a>(
        &'a self,
        conn: &'a mut ConnectionInfo,
        payload: Bytes,
    ) -> impl Future<Output = HandlerResult> + Send + 'a;
}

impl Dispatch for Arc<Broker> {
    fn config(&self) -> &BrokerConfig {
        &self.config
    }

    fn in_flight(&self) -> &InFlight {
        &self.in_flight
    }

    fn request_queue(&self) -> &RequestQueue {
        &self.request_queue
    }

    fn handle<'a>(
        &'a self,
        conn: &'a mut ConnectionInfo,
        payload: Bytes,
    ) -> impl Future<Output = HandlerResult> + Send + 'a {
        handlers::handle(self, conn, payload)
    }
}

/// Serves one Kafka connection over TCP.
pub async fn serve<D: Dispatch>(
    dispatch: D,
    stream: TcpStream,
    conn: ConnectionInfo,
    stop: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    serve_stream(dispatch, stream, conn, stop).await
}

/// The connection loop, over any byte stream (a TLS stream can take the `TcpStream`'s place;
/// a plaintext socket sends fetched records with sendfile, see [`crate::response`]).
/// One request at a time, as Kafka mutes a channel while its request is in flight: a frame is
/// handled and its response written in full before the next frame is looked at, so however
/// many requests a client pipelines, at most one response per connection is ever held, and
/// that one holds its records as file ranges ([`crate::response`]). Bytes read ahead stay in
/// the read buffer (one read chunk, or one frame of up to `socket.request.max.bytes`).
pub async fn serve_stream<D: Dispatch, S: AsyncRead + response::ResponseSink>(
    dispatch: D,
    mut stream: S,
    mut conn: ConnectionInfo,
    mut stop: watch::Receiver<bool>,
) {
    let peer = conn.peer;
    let max = dispatch.config().socket_request_max_bytes;
    let idle = std::time::Duration::from_millis(dispatch.config().connections_max_idle_ms.max(1));
    let queue = dispatch.request_queue();
    let mut buf = BytesMut::with_capacity(READ_CHUNK);
    // `queued.max.request.bytes`: the memory of the frame at the head of `buf`, taken once its
    // size is known and given back when its request is handled.
    let mut memory: Option<PoolLease> = None;
    loop {
        match frame::check(&buf, max) {
            Ok(Some(n)) => {
                let lease = match memory.take() {
                    Some(lease) => Some(lease),
                    None => tokio::select! {
                        m = queue.memory(4 + n) => m,
                        _ = stop.changed() => return,
                    },
                };
                // `queued.max.requests`: wait for a slot, reading nothing meanwhile.
                let slot = tokio::select! {
                    s = queue.slot() => s,
                    _ = stop.changed() => return,
                };
                let Some(slot) = slot else { return };
                buf.advance(4);
                let payload = buf.split_to(n).freeze();
                dispatch.in_flight().enter();
                if *stop.borrow() {
                    // Shutting down: the logs may be closing; take no new request.
                    dispatch.in_flight().leave();
                    return;
                }
                let r = RequestQueue::run_in_slot(slot, dispatch.handle(&mut conn, payload)).await;
                dispatch.in_flight().leave();
                // The request's bytes are dropped with its handler: its memory goes back.
                drop(lease);
                match r {
                    Ok(Some(resp)) => {
                        let written = tokio::select! {
                            r = response::write_response(&mut stream, &resp, idle) => r,
                            _ = stop.changed() => return,
                        };
                        if let Err(e) = written {
                            tracing::debug!(%peer, error = %e, "closing connection: response not written");
                            return;
                        }
                    }
                    Ok(None) => {}
                    Err(e) => {
                        tracing::debug!(%peer, error = %e, "closing connection");
                        return;
                    }
                }
                continue;
            }
            Ok(None) if memory.is_none() && buf.len() >= 4 => {
                // The size is known (and within `socket.request.max.bytes`): its memory
                // before its body, as Kafka allocates the receive buffer.
                let size = i32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
                memory = tokio::select! {
                    m = queue.memory(4 + size) => m,
                    _ = stop.changed() => return,
                };
            }
            Ok(None) => {}
            Err(e) => {
                tracing::info!(%peer, error = %e, "closing connection: bad frame");
                return;
            }
        }
        if buf.capacity() - buf.len() < READ_CHUNK / 4 {
            buf.reserve(read_reservation(&buf));
        }
        tokio::select! {
            r = stream.read_buf(&mut buf) => match r {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            },
            _ = stop.changed() => return,
            // connections.max.idle.ms: nothing received for that long (Kafka's Selector
            // closes idle connections the same way).
            _ = tokio::time::sleep(idle) => {
                tracing::debug!(%peer, "closing idle connection");
                return;
            }
        }
    }
}

/// How much room to make before the next read. The frame at the head of `buf` may claim up to
/// `socket.request.max.bytes`; that is the sender's word, not bytes received, so the buffer
/// grows with what has arrived (at most doubling, never below one read chunk) instead of
/// reserving the claim up front: a 4-byte header claiming 100 MB costs one chunk, and a real
/// large request is read with a handful of reallocations.
fn read_reservation(buf: &[u8]) -> usize {
    let missing = if buf.len() < 4 {
        0
    } else {
        let size = i32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]).max(0) as usize;
        (4 + size).saturating_sub(buf.len())
    };
    missing.min(buf.len()).max(READ_CHUNK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn shutdown_waits_for_requests_in_flight() {
        let f = Arc::new(InFlight::default());
        assert!(f.wait_idle(std::time::Duration::from_millis(1)).await);
        f.enter();
        f.enter();
        assert!(
            !f.wait_idle(std::time::Duration::from_secs(5)).await,
            "two in flight"
        );
        let g = f.clone();
        let waiter =
            tokio::spawn(async move { g.wait_idle(std::time::Duration::from_secs(5)).await });
        tokio::task::yield_now().await;
        f.leave();
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "one still in flight");
        f.leave();
        assert!(waiter.await.unwrap(), "idle once the last request is done");
    }

    #[test]
    fn a_claimed_frame_size_is_not_reserved_before_its_bytes_arrive() {
        let mut claim = (100 * 1024 * 1024i32).to_be_bytes().to_vec();
        assert_eq!(read_reservation(&claim), READ_CHUNK, "a bare 100 MB claim");
        claim.resize(4 + 3 * READ_CHUNK, 0);
        assert_eq!(
            read_reservation(&claim),
            4 + 3 * READ_CHUNK,
            "grows with what has arrived"
        );
        let mut small = 10i32.to_be_bytes().to_vec();
        small.extend_from_slice(&[0; 3]);
        assert_eq!(read_reservation(&small), READ_CHUNK);
        assert_eq!(read_reservation(&[]), READ_CHUNK);
    }

    #[test]
    fn client_software_validation_as_kafka() {
        for ok in ["librdkafka", "apache-kafka-java", "2.3.0", "a", "v1.0-rc.1"] {
            assert!(valid_software_field(ok), "{ok}");
        }
        for bad in ["", "-x", "x-", "a b", "x_y", ".1"] {
            assert!(!valid_software_field(bad), "{bad}");
        }
    }
}

//! One task per client connection. Requests are read, handled and answered in order on this
//! task, as Kafka does by muting a socket while its request is in flight. A malformed frame, an
//! unknown API or an undecodable request closes the connection; nothing else is affected.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{Buf, Bytes, BytesMut};
use strom_protocol::frame;
use strom_protocol::kafka::messages::{ApiKey, ApiVersionsRequest, RequestHeader};
use strom_protocol::kafka::protocol::Decodable;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::handlers;
use crate::request_context::{ClientInformation, KafkaPrincipal, ListenerInfo, RequestContext};
use crate::server::Broker;

const READ_CHUNK: usize = 256 * 1024;

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

/// Serves one Kafka connection. `initial` holds bytes already read from the stream (a shared
/// controller listener reads the first byte to tell Kafka from Raft).
pub async fn serve(
    broker: Arc<Broker>,
    mut stream: TcpStream,
    mut conn: ConnectionInfo,
    initial: BytesMut,
    mut stop: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let peer = conn.peer;
    let max = broker.config.socket_request_max_bytes;
    let mut buf = initial;
    buf.reserve(READ_CHUNK);
    let mut out = BytesMut::new();
    loop {
        // Handle every complete frame already buffered, then write their responses together.
        loop {
            match frame::check(&buf, max) {
                Ok(Some(n)) => {
                    buf.advance(4);
                    let payload = buf.split_to(n).freeze();
                    match handlers::handle(&broker, &mut conn, payload).await {
                        // The common case is one response per read: hand its buffer over
                        // instead of copying it (a fetch response is mostly record bytes).
                        Ok(Some(resp)) if out.is_empty() => out = resp,
                        Ok(Some(resp)) => out.extend_from_slice(&resp),
                        Ok(None) => {}
                        Err(e) => {
                            tracing::debug!(%peer, error = %e, "closing connection");
                            let _ = stream.write_all(&out).await;
                            return;
                        }
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::info!(%peer, error = %e, "closing connection: bad frame");
                    let _ = stream.write_all(&out).await;
                    return;
                }
            }
        }
        if !out.is_empty() {
            if stream.write_all(&out).await.is_err() {
                return;
            }
            // Keep a small buffer for the next responses, but not a large fetch's: an idle
            // connection should not pin megabytes.
            if out.capacity() > 64 * 1024 {
                out = BytesMut::new();
            } else {
                out.clear();
            }
        }
        if buf.capacity() - buf.len() < READ_CHUNK / 4 {
            let need = frame_remaining(&buf).max(READ_CHUNK);
            buf.reserve(need);
        }
        tokio::select! {
            r = stream.read_buf(&mut buf) => match r {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            },
            _ = stop.changed() => return,
        }
    }
}

/// Bytes still missing for the frame at the head of `buf`, so a large request is read into one
/// allocation instead of growing it step by step.
fn frame_remaining(buf: &[u8]) -> usize {
    if buf.len() < 4 {
        return 0;
    }
    let size = i32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]).max(0) as usize;
    (4 + size).saturating_sub(buf.len())
}

#[cfg(test)]
mod tests {
    use super::*;

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

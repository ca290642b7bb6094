//! One task per client connection. Requests are read, handled and answered in order on this
//! task, as Kafka does by muting a socket while its request is in flight. A malformed frame, an
//! unknown API or an undecodable request closes the connection; nothing else is affected.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{Buf, BytesMut};
use strom_protocol::frame;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::handlers;
use crate::server::Broker;

const READ_CHUNK: usize = 256 * 1024;

pub async fn serve(
    broker: Arc<Broker>,
    mut stream: TcpStream,
    peer: SocketAddr,
    mut stop: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let max = broker.config.socket_request_max_bytes;
    let mut buf = BytesMut::with_capacity(READ_CHUNK);
    let mut out = BytesMut::new();
    loop {
        // Handle every complete frame already buffered, then write their responses together.
        loop {
            match frame::check(&buf, max) {
                Ok(Some(n)) => {
                    buf.advance(4);
                    let payload = buf.split_to(n).freeze();
                    match handlers::handle(&broker, payload).await {
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

//! Kafka framing over any byte stream: reading a frame no larger than a bound and only as
//! large as the bytes that arrived, and the client connection a voter sends its RPCs over.
//!
//! [`RaftConnection`] is generic over the stream and [`Connector`] makes the streams, so TLS
//! (a connector that wraps the TCP stream) and SASL (a connector that authenticates with
//! SaslHandshake/SaslAuthenticate frames before handing the stream over) plug in without
//! touching the RPC code. [`TcpConnector`] is plain TCP.

use std::future::Future;
use std::io;
use std::net::SocketAddr;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::wire;

/// Bytes read at a time while a frame's body arrives: the buffer grows with what came, never
/// with what the size field claims.
const READ_CHUNK: usize = 64 * 1024;

/// Reads one frame's payload (after its 4-byte size) of at most `max` bytes. `Ok(None)` on a
/// clean end of stream before a frame starts. A negative size, or one over `max`, is an error
/// before anything is allocated for it; the payload buffer grows as its bytes arrive (at most
/// doubling per step), so a claim costs one chunk until the bytes are really sent.
pub async fn read_frame<S: AsyncRead + Unpin>(s: &mut S, max: usize) -> io::Result<Option<Bytes>> {
    let mut size = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match s.read(&mut size[got..]).await? {
            0 if got == 0 => return Ok(None),
            0 => return Err(io::ErrorKind::UnexpectedEof.into()),
            n => got += n,
        }
    }
    let size = i32::from_be_bytes(size);
    let size = usize::try_from(size).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("negative frame size {size}"),
        )
    })?;
    if size > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame size {size} exceeds the limit of {max} bytes"),
        ));
    }
    let mut buf = Vec::with_capacity(size.min(READ_CHUNK));
    while buf.len() < size {
        let want = (size - buf.len()).min(buf.len().max(READ_CHUNK));
        buf.reserve(want);
        let n = (&mut *s).take(want as u64).read_buf(&mut buf).await?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
    }
    Ok(Some(Bytes::from(buf)))
}

/// Makes the byte streams a voter's RPCs travel on.
pub trait Connector: Send + Sync + 'static {
    type Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static;

    /// Opens a stream to `addr`, ready for Kafka frames.
    fn connect(&self, addr: SocketAddr) -> impl Future<Output = io::Result<Self::Stream>> + Send;
}

/// Plain TCP (PLAINTEXT listeners), with Nagle off: Raft RPCs are small and latency-bound.
#[derive(Debug, Clone, Copy, Default)]
pub struct TcpConnector;

impl Connector for TcpConnector {
    type Stream = TcpStream;

    async fn connect(&self, addr: SocketAddr) -> io::Result<TcpStream> {
        let s = TcpStream::connect(addr).await?;
        let _ = s.set_nodelay(true);
        Ok(s)
    }
}

/// One client connection to a voter's controller listener: StromRaft requests, one at a time,
/// each answered before the next is sent (the peer serves a connection in order).
pub struct RaftConnection<S> {
    stream: S,
    client_id: String,
    next_correlation_id: i32,
    /// The largest response accepted.
    max_frame: usize,
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send> RaftConnection<S> {
    pub fn new(stream: S, client_id: String, max_frame: usize) -> Self {
        Self {
            stream,
            client_id,
            next_correlation_id: 0,
            max_frame,
        }
    }

    /// Sends one request body and returns the response body.
    pub async fn call(&mut self, body: &[u8]) -> io::Result<Bytes> {
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1);
        let frame = wire::request_frame(correlation_id, &self.client_id, body);
        self.stream.write_all(&frame).await?;
        self.stream.flush().await?;
        let payload = read_frame(&mut self.stream, self.max_frame)
            .await?
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed by the peer",
                )
            })?;
        let (got, body) = wire::parse_response_frame(payload)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        if got != correlation_id {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("correlation id {got} in the response to request {correlation_id}"),
            ));
        }
        Ok(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_are_bounded_and_grow_with_the_bytes() {
        let mut ok = &[0u8, 0, 0, 3, 7, 8, 9][..];
        assert_eq!(
            read_frame(&mut ok, 10).await.unwrap().unwrap().as_ref(),
            &[7, 8, 9]
        );
        assert!(
            read_frame(&mut ok, 10).await.unwrap().is_none(),
            "clean end"
        );
        let mut over = &[0u8, 0, 0, 11][..];
        assert!(read_frame(&mut over, 10).await.is_err());
        let mut negative = &[0xffu8, b'S', b'T', b'R', b'A', b'F', b'T', 1][..];
        assert!(read_frame(&mut negative, usize::MAX).await.is_err());
        let mut cut = &[0u8, 0, 0, 3, 7][..];
        assert!(read_frame(&mut cut, 10).await.is_err());
        let mut half_size = &[0u8, 0][..];
        assert!(read_frame(&mut half_size, 10).await.is_err());
    }

    /// A claim of 256 MiB whose bytes never come costs one read chunk, not the claim.
    #[tokio::test]
    async fn a_claim_is_not_reserved() {
        let (mut client, mut server) = tokio::io::duplex(1024);
        client
            .write_all(&(256i32 << 20).to_be_bytes())
            .await
            .unwrap();
        client.write_all(&[1; 100]).await.unwrap();
        drop(client);
        let err = read_frame(&mut server, usize::MAX).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
    }

    #[tokio::test]
    async fn a_connection_calls_in_order_over_any_stream() {
        let (client, mut server) = tokio::io::duplex(1 << 16);
        let peer = tokio::spawn(async move {
            while let Some(payload) = read_frame(&mut server, 1 << 20).await.unwrap() {
                let (header, body) = wire::parse_request_frame(payload).unwrap();
                let mut echo = body.to_vec();
                echo.reverse();
                server
                    .write_all(&wire::response_frame(header.correlation_id, &echo))
                    .await
                    .unwrap();
            }
        });
        let mut conn = RaftConnection::new(client, "t".into(), 1 << 20);
        assert_eq!(conn.call(&[1, 2, 3]).await.unwrap().as_ref(), &[3, 2, 1]);
        assert_eq!(conn.call(&[4]).await.unwrap().as_ref(), &[4]);
        drop(conn);
        peer.await.unwrap();
    }
}

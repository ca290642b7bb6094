//! A response as a connection writes it: its size prefix and encoded parts in memory, and the
//! records of a fetch as ranges of segment files ([`FileRecords`]) that are read only while
//! they are written, through one bounded buffer. A fetch response of `fetch.max.bytes`
//! (55 MiB by default) thus costs its connection [`WRITE_CHUNK`] bytes, not 55 MiB, however
//! slowly the client reads (Kafka sends `FileRecords` with `transferTo` for the same reason).
//!
//! On a plaintext socket the file ranges go with sendfile(2), page cache to socket in the
//! kernel (Kafka's `transferTo`): no buffer, no copy through user space, one system call per
//! socket-buffer's worth. Any other stream ([`ResponseSink`] without a socket: TLS, tests)
//! gets them through the bounded buffer. Run 8 in `docs/PERFORMANCE.md` measured the buffered
//! path alone at about half the consume throughput of reading a response whole.

use std::io;
use std::time::Duration;

use std::os::fd::AsFd;

use bytes::{Bytes, BytesMut};
use strom_storage::{FileRecords, FileSlice};
use tokio::io::{AsyncWrite, AsyncWriteExt, Interest};
use tokio::net::TcpStream;

/// A connection's byte stream as the response writer sees it: where the bytes go, and the
/// plaintext socket under it if there is one (file ranges then skip user space).
pub trait ResponseSink: AsyncWrite + Unpin {
    /// The socket the stream writes to unchanged, or `None` when bytes are transformed on
    /// the way (TLS) or there is no socket (in-memory streams).
    fn plaintext_socket(&self) -> Option<&TcpStream> {
        None
    }
}

impl ResponseSink for TcpStream {
    fn plaintext_socket(&self) -> Option<&TcpStream> {
        Some(self)
    }
}

impl ResponseSink for tokio::io::DuplexStream {}
impl ResponseSink for Vec<u8> {}

/// The buffer through which file ranges are read and small parts gathered before a write.
pub const WRITE_CHUNK: usize = 256 * 1024;

/// One part of a response, in order.
#[derive(Debug, Clone)]
pub enum ResponsePart {
    Bytes(Bytes),
    Records(FileRecords),
}

/// A framed response: the 4-byte size prefix is the start of the first part.
#[derive(Debug, Clone, Default)]
pub struct ResponseFrame {
    parts: Vec<ResponsePart>,
    len: usize,
}

impl From<BytesMut> for ResponseFrame {
    fn from(b: BytesMut) -> Self {
        let mut f = Self::default();
        f.push_bytes(b.freeze());
        f
    }
}

impl ResponseFrame {
    pub fn push_bytes(&mut self, b: Bytes) {
        if b.is_empty() {
            return;
        }
        self.len += b.len();
        self.parts.push(ResponsePart::Bytes(b));
    }

    pub fn push_records(&mut self, r: FileRecords) {
        if r.is_empty() {
            return;
        }
        self.len += r.len();
        self.parts.push(ResponsePart::Records(r));
    }

    /// Bytes on the wire, size prefix included.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn parts(&self) -> &[ResponsePart] {
        &self.parts
    }

    /// The whole frame in memory (an Envelope carries a forwarded response as bytes; tests).
    pub fn into_bytes(self) -> Result<BytesMut, strom_storage::StorageError> {
        let mut out = BytesMut::with_capacity(self.len);
        for p in self.parts {
            match p {
                ResponsePart::Bytes(b) => out.extend_from_slice(&b),
                ResponsePart::Records(r) => out.extend_from_slice(&r.read_all()?),
            }
        }
        Ok(out)
    }
}

/// Writes `frame` to `w`. In-memory parts smaller than a chunk are gathered into one buffer
/// (at most [`WRITE_CHUNK`], allocated here and dropped after), so a small response is one
/// write. File ranges go with sendfile on a plaintext socket, otherwise they are read into
/// that buffer piece by piece. Either way each piece is checked against a truncation of its
/// log once it is sent (a truncated log closes the connection, as Kafka's
/// `FileRecords.writeTo` fails; the client, holding an incomplete frame, fetches again).
///
/// Each write must make its way within `stall` (`connections.max.idle.ms`): a client that
/// stops reading is closed as an idle one is, instead of holding the connection forever.
pub async fn write_response<W: ResponseSink>(
    w: &mut W,
    frame: &ResponseFrame,
    stall: Duration,
) -> io::Result<()> {
    let zero_copy = w.plaintext_socket().is_some();
    // With sendfile the buffer holds the in-memory parts only.
    let buffered = if zero_copy {
        frame
            .parts
            .iter()
            .map(|p| match p {
                ResponsePart::Bytes(b) => b.len(),
                ResponsePart::Records(_) => 0,
            })
            .sum()
    } else {
        frame.len()
    };
    let mut chunk = Chunk {
        buf: vec![0; buffered.min(WRITE_CHUNK)],
        filled: 0,
        stall,
    };
    for part in &frame.parts {
        match part {
            ResponsePart::Bytes(b) if b.len() >= chunk.buf.len() => {
                chunk.flush(w).await?;
                write_within(w, b, stall).await?;
            }
            ResponsePart::Bytes(b) => {
                if chunk.room() < b.len() {
                    chunk.flush(w).await?;
                }
                chunk.buf[chunk.filled..chunk.filled + b.len()].copy_from_slice(b);
                chunk.filled += b.len();
            }
            ResponsePart::Records(records) if zero_copy => {
                chunk.flush(w).await?;
                w.flush().await?;
                let socket = w.plaintext_socket().expect("checked above");
                for slice in records.slices() {
                    send_slice(socket, slice, records, stall).await?;
                }
            }
            ResponsePart::Records(records) => {
                for slice in records.slices() {
                    let mut done = 0;
                    while done < slice.len() {
                        if chunk.room() == 0 {
                            chunk.flush(w).await?;
                        }
                        let n = (slice.len() - done).min(chunk.room());
                        let at = chunk.filled;
                        slice
                            .read_at(done, &mut chunk.buf[at..at + n])
                            .map_err(io::Error::other)?;
                        check_not_truncated(records)?;
                        chunk.filled += n;
                        done += n;
                    }
                }
            }
        }
    }
    chunk.flush(w).await?;
    w.flush().await
}

fn check_not_truncated(records: &FileRecords) -> io::Result<()> {
    if records.still_valid() {
        Ok(())
    } else {
        Err(io::Error::other(
            strom_storage::StorageError::TruncatedDuringRead,
        ))
    }
}

/// One file range to the socket with sendfile, as the socket takes it: each call sends what
/// fits in the socket buffer, and waits (within `stall`) for room when there is none.
async fn send_slice(
    socket: &TcpStream,
    slice: &FileSlice,
    records: &FileRecords,
    stall: Duration,
) -> io::Result<()> {
    let mut done = 0;
    while done < slice.len() {
        let send = async {
            loop {
                socket.writable().await?;
                match socket.try_io(Interest::WRITABLE, || {
                    slice.send_to(socket.as_fd(), done, slice.len() - done)
                }) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    r => return r,
                }
            }
        };
        let n = match tokio::time::timeout(stall, send).await {
            Ok(r) => r?,
            Err(_) => return Err(stalled()),
        };
        check_not_truncated(records)?;
        done += n;
    }
    Ok(())
}

fn stalled() -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        "the client read nothing of its response for connections.max.idle.ms",
    )
}

async fn write_within<W: AsyncWrite + Unpin>(
    w: &mut W,
    b: &[u8],
    stall: Duration,
) -> io::Result<()> {
    match tokio::time::timeout(stall, w.write_all(b)).await {
        Ok(r) => r,
        Err(_) => Err(stalled()),
    }
}

/// The write buffer: zeroed once, then refilled in place.
struct Chunk {
    buf: Vec<u8>,
    filled: usize,
    stall: Duration,
}

impl Chunk {
    fn room(&self) -> usize {
        self.buf.len() - self.filled
    }

    async fn flush<W: AsyncWrite + Unpin>(&mut self, w: &mut W) -> io::Result<()> {
        if self.filled > 0 {
            write_within(w, &self.buf[..self.filled], self.stall).await?;
            self.filled = 0;
        }
        Ok(())
    }
}

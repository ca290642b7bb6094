//! Raw protocol helpers for the tests that speak Kafka's wire format themselves (bad input,
//! versions no client sends), built on the kafka-protocol crate.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use strom_protocol::kafka::messages::{ApiKey, RequestHeader, ResponseHeader};
use strom_protocol::kafka::protocol::{Decodable, Encodable, StrBytes};

/// A request frame payload (header + body) encoded with the kafka-protocol crate.
pub fn encode_request<T: Encodable>(api: ApiKey, version: i16, corr: i32, body: &T) -> Vec<u8> {
    let mut buf = Vec::new();
    RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(corr)
        .with_client_id(Some(StrBytes::from_static_str("strom-it")))
        .encode(&mut buf, api.request_header_version(version))
        .unwrap();
    body.encode(&mut buf, version).unwrap();
    buf
}

/// Decodes a response frame payload, checking nothing is left over; returns the correlation id.
pub fn decode_response<T: Decodable>(api: ApiKey, version: i16, frame: Vec<u8>) -> (i32, T) {
    let mut b = bytes::Bytes::from(frame);
    let h = ResponseHeader::decode(&mut b, api.response_header_version(version))
        .unwrap_or_else(|e| panic!("{api:?} v{version} response header: {e}"));
    let r =
        T::decode(&mut b, version).unwrap_or_else(|e| panic!("{api:?} v{version} response: {e}"));
    assert!(
        b.is_empty(),
        "{api:?} v{version}: {} trailing bytes in response",
        b.len()
    );
    (h.correlation_id, r)
}

/// Reads one response frame, failing the test on a close or a timeout.
pub fn expect_frame(s: &mut TcpStream, what: &str, timeout: Duration) -> Vec<u8> {
    match read_frame(s, timeout) {
        Reply::Frame(f) => f,
        other => panic!("{what}: expected a response, got {other:?}"),
    }
}

/// One request/response round trip on a raw connection.
pub fn raw_call<Req: Encodable, Resp: Decodable>(
    s: &mut TcpStream,
    api: ApiKey,
    version: i16,
    req: &Req,
) -> Resp {
    static CORR: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(1000);
    let corr = CORR.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    write_frame(s, &encode_request(api, version, corr, req)).unwrap();
    let f = expect_frame(s, &format!("{api:?} v{version}"), Duration::from_secs(20));
    let (got, resp) = decode_response(api, version, f);
    assert_eq!(got, corr, "{api:?} correlation id");
    resp
}

/// Writes one frame: 4-byte big-endian size + payload.
pub fn write_frame(s: &mut TcpStream, payload: &[u8]) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(payload.len() + 4);
    buf.extend_from_slice(&(payload.len() as i32).to_be_bytes());
    buf.extend_from_slice(payload);
    s.write_all(&buf)
}

/// What came back on a raw connection.
#[derive(Debug)]
pub enum Reply {
    Frame(Vec<u8>),
    Closed,
    TimedOut,
}

/// Reads one response frame, or reports the connection closed (EOF/reset) or silent.
pub fn read_frame(s: &mut TcpStream, timeout: Duration) -> Reply {
    s.set_read_timeout(Some(timeout)).unwrap();
    let mut size = [0u8; 4];
    match read_exact_or(s, &mut size) {
        Ok(true) => {}
        Ok(false) => return Reply::Closed,
        Err(e) if is_timeout(&e) => return Reply::TimedOut,
        Err(_) => return Reply::Closed,
    }
    let n = i32::from_be_bytes(size);
    assert!((0..=64 * 1024 * 1024).contains(&n), "bad response size {n}");
    let mut buf = vec![0u8; n as usize];
    match read_exact_or(s, &mut buf) {
        Ok(true) => Reply::Frame(buf),
        Ok(false) => Reply::Closed,
        Err(e) if is_timeout(&e) => Reply::TimedOut,
        Err(_) => Reply::Closed,
    }
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

/// Ok(false) on clean EOF before the buffer is full.
fn read_exact_or(s: &mut TcpStream, buf: &mut [u8]) -> std::io::Result<bool> {
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) => return Ok(false),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// Waits (bounded) until the peer closes the connection, draining anything it sends.
/// Returns true when closed, false on timeout.
pub fn wait_closed(s: &mut TcpStream, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if is_timeout(&e) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return true,
        }
    }
    false
}

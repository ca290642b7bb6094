//! Untrusted bytes on the controller listener: the connection loop's framing with the default
//! `socket.request.max.bytes`, then the controller listener's dispatch up to (not including)
//! running a handler: `handlers::parse_request` for the controller scope, a StromRaft body
//! through `strom_raft::wire::decode_request` (what `RaftService::handle` decodes before it
//! touches the voter), any other API through its registry entry's body decoder; an Envelope's
//! embedded request through the same parse, as `handlers::internal::envelope` unwraps it.
#![no_main]

use bytes::{Buf, Bytes};
use libfuzzer_sys::fuzz_target;
use strom_broker::handlers::{self, ParsedRequest};
use strom_broker::listeners::ListenerScope;
use strom_protocol::frame;
use strom_protocol::kafka::messages::{ApiKey, EnvelopeRequest};
use strom_protocol::kafka::protocol::Decodable;

fuzz_target!(|data: &[u8]| {
    let mut buf = Bytes::copy_from_slice(data);
    loop {
        match frame::check(&buf, frame::DEFAULT_MAX_REQUEST_SIZE) {
            Ok(Some(n)) => {
                buf.advance(4);
                let payload = buf.split_to(n);
                if dispatch(&payload, 0).is_err() {
                    // The listener closes the connection here.
                    return;
                }
            }
            Ok(None) | Err(_) => return,
        }
    }
});

/// `ControllerDispatch` without the voter and the broker: what decides whether a frame is
/// answered or closes the connection. `depth` bounds Envelope nesting (the broker refuses an
/// Envelope inside an Envelope: only forwardable APIs are unwrapped).
fn dispatch(payload: &Bytes, depth: u8) -> Result<(), ()> {
    match handlers::parse_request(payload, ListenerScope::Controller).map_err(drop)? {
        ParsedRequest::Raft { body, .. } => {
            strom_raft::wire::decode_request(&body).map_err(drop)?;
        }
        ParsedRequest::ApiVersionsFallback { .. } => {}
        ParsedRequest::Request {
            entry,
            header,
            body,
        } => {
            let version = header.request_api_version;
            (entry.decode)(body.clone(), version).map_err(drop)?;
            if entry.key == ApiKey::Envelope && depth == 0 {
                let mut b = body;
                if let Ok(env) = EnvelopeRequest::decode(&mut b, version) {
                    // Refused inner requests are answered with an error code, not a close.
                    let _ = dispatch(&env.request_data, depth + 1);
                }
            }
        }
    }
    Ok(())
}

//! Everything a peer reaches before it is authenticated, on a client and on a controller
//! listener: the framing, the request header (`handlers::parse_request`), and the APIs served
//! to an unauthenticated connection, answered exactly as the broker answers them. Today that is
//! ApiVersions at every version (the v0 fallback for a version Strom does not speak; the
//! KIP-511 client software name and version a v3+ request carries, validated and remembered
//! for the connection by `ConnectionInfo::remember_client_software`; the response with the
//! listener's API ranges and features, encoded at the request's version).
//!
//! Kafka's `SaslServerAuthenticator` lets exactly ApiVersions, SaslHandshake and
//! SaslAuthenticate through before authentication; when SASL comes, its two APIs get their arm
//! in [`pre_auth`] and their seeds in `gen_corpus`. Any other API is refused before
//! authentication, which this target does not need to run.
#![no_main]

use bytes::{Buf, Bytes};
use libfuzzer_sys::fuzz_target;
use strom_broker::connection::ConnectionInfo;
use strom_broker::handlers::{self, api_versions, ParsedRequest};
use strom_broker::listeners::{ListenerScope, SecurityProtocol};
use strom_broker::request_context::ListenerInfo;
use strom_protocol::frame;
use strom_protocol::kafka::messages::{ApiKey, ApiVersionsRequest};
use strom_protocol::kafka::protocol::Decodable;

fuzz_target!(|data: &[u8]| {
    for scope in [ListenerScope::Broker, ListenerScope::Controller] {
        let mut conn = connection(scope);
        let mut buf = Bytes::copy_from_slice(data);
        loop {
            match frame::check(&buf, frame::DEFAULT_MAX_REQUEST_SIZE) {
                Ok(Some(n)) => {
                    buf.advance(4);
                    let payload = buf.split_to(n);
                    if pre_auth(&mut conn, payload).is_err() {
                        break;
                    }
                }
                Ok(None) | Err(_) => break,
            }
        }
    }
});

fn connection(scope: ListenerScope) -> ConnectionInfo {
    let listener = ListenerInfo {
        name: match scope {
            ListenerScope::Broker => "PLAINTEXT".into(),
            ListenerScope::Controller => "CONTROLLER".into(),
        },
        security_protocol: SecurityProtocol::Plaintext,
        scope,
    };
    let local = "127.0.0.1:9092".parse().unwrap();
    let peer = "127.0.0.1:40000".parse().unwrap();
    ConnectionInfo::new(listener, local, peer, 0)
}

/// One request of an unauthenticated connection. `Err`: the connection is closed.
fn pre_auth(conn: &mut ConnectionInfo, payload: Bytes) -> Result<(), ()> {
    let scope = conn.listener.scope;
    match handlers::parse_request(&payload, scope).map_err(drop)? {
        ParsedRequest::ApiVersionsFallback { correlation_id } => {
            api_versions::fallback(scope, correlation_id).expect("the fallback encodes");
            Ok(())
        }
        ParsedRequest::Request {
            entry,
            header,
            body,
        } => match entry.key {
            ApiKey::ApiVersions => {
                let version = header.request_api_version;
                conn.remember_client_software(&body, version);
                let mut b = body;
                ApiVersionsRequest::decode(&mut b, version).map_err(drop)?;
                let framed = api_versions::answer(scope, version, header.correlation_id, 2, 0)
                    .expect("an ApiVersions answer encodes at every served version");
                let size = i32::from_be_bytes(framed[..4].try_into().unwrap());
                assert_eq!(size as usize, framed.len() - 4, "frame size");
                Ok(())
            }
            // ApiKey::SaslHandshake | ApiKey::SaslAuthenticate => with SASL.
            // Every other API waits for authentication; its parsing up to here is covered.
            _ => Ok(()),
        },
        // Raft before authentication: refused when the controller listener authenticates;
        // its decoding is the controller_listener and raft_rpc targets'.
        ParsedRequest::Raft { .. } => Ok(()),
    }
}

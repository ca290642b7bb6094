//! Untrusted connection bytes: framing, then the broker's own dispatch
//! (`strom_broker::handlers::parse_request`, the registry lookup per listener scope) and the
//! registry entry's body decoder, for every API key/version the registry serves on a client or
//! a controller listener. Produce record sets are then walked the way the produce handler and
//! `UnifiedLog::analyze` walk them.
#![no_main]

use bytes::{Buf, Bytes};
use libfuzzer_sys::fuzz_target;
use strom_broker::handlers::{self, ParsedRequest};
use strom_broker::listeners::ListenerScope;
use strom_protocol::batch::BatchIter;
use strom_protocol::frame;
use strom_protocol::kafka::messages::{ApiKey, ProduceRequest};
use strom_protocol::kafka::protocol::Decodable;

fuzz_target!(|data: &[u8]| {
    // The connection loop: handle every complete frame in the buffer, stop at the first
    // incomplete one or framing error.
    let mut buf = Bytes::copy_from_slice(data);
    loop {
        match frame::check(&buf, frame::DEFAULT_MAX_REQUEST_SIZE) {
            Ok(Some(n)) => {
                buf.advance(4);
                let payload = buf.split_to(n);
                if handle(payload).is_err() {
                    // The broker closes the connection here.
                    return;
                }
            }
            Ok(None) | Err(_) => return,
        }
    }
});

/// `handlers::handle` up to (not including) running the API handler, through the broker's own
/// dispatch (`parse_request`: registry lookup for the listener's scope, version check, header)
/// and the registry entry's body decoder, on a client and on a controller listener.
fn handle(payload: Bytes) -> Result<(), ()> {
    let mut ok = false;
    for scope in [ListenerScope::Broker, ListenerScope::Controller] {
        match handlers::parse_request(&payload, scope) {
            Ok(ParsedRequest::ApiVersionsFallback { .. }) => ok = true,
            // Raft (controller listeners): the body is the voter's to decode.
            Ok(ParsedRequest::Raft { body, .. }) => {
                ok |= strom_raft::wire::decode_request(&body).is_ok();
            }
            Ok(ParsedRequest::Request {
                entry,
                header,
                body,
            }) => {
                let version = header.request_api_version;
                if (entry.decode)(body.clone(), version).is_ok() {
                    ok = true;
                    if entry.key == ApiKey::Produce {
                        let mut b = body;
                        if let Ok(req) = ProduceRequest::decode(&mut b, version) {
                            for topic in &req.topic_data {
                                for p in &topic.partition_data {
                                    if let Some(records) = &p.records {
                                        walk_records(records);
                                    }
                                }
                            }
                        }
                    }
                }
            }
            Err(_) => {}
        }
    }
    // The broker closes the connection when the request is refused on the listener.
    if ok {
        Ok(())
    } else {
        Err(())
    }
}

/// What the produce path does with a partition's records before they reach the log: the
/// one-batch check, then per-batch size/validate/count checks.
fn walk_records(records: &[u8]) {
    for view in BatchIter::new(records) {
        let Ok(view) = view else { break };
        if view.validate().is_err() {
            break;
        }
        let _ = (
            view.records_count(),
            view.last_offset_delta(),
            view.is_control(),
            view.producer_id(),
            view.base_sequence(),
            view.last_offset(),
            view.max_timestamp(),
        );
    }
}

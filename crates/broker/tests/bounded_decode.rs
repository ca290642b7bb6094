//! A crafted request must not make the broker reserve memory far beyond its size, whatever the
//! allocator. This test binary runs with the system allocator (the broker crate sets none; the
//! `strom` binary's mimalloc only maps address space for a huge reservation, which would hide
//! the fault), and drives every API and version the registry serves, on both listener scopes,
//! through the broker's own dispatch (`parse_request`) and the registry entry's body decoder
//! with small bodies that claim huge element counts and lengths at every position.
//!
//! Before the decoders were patched (third_party/kafka-protocol/STROM-PATCH.md) a 60-byte
//! Metadata request claiming `0x7fffffff` topics asked for ~150 GiB and the system allocator
//! aborted the process; smaller claims reserved gigabytes of address space. The check is the
//! process's peak virtual size (`VmPeak`), which counts a reservation even if its pages are
//! never touched.

use bytes::{BufMut, Bytes, BytesMut};
use strom_broker::handlers::{self, registry::REGISTRY, ParsedRequest};
use strom_broker::listeners::ListenerScope;
use strom_protocol::kafka::messages::{ApiKey, RequestHeader};
use strom_protocol::kafka::protocol::{Encodable, StrBytes};

/// What a few dozen bytes of request may cost in address space, with generous slack for the
/// test harness itself (thread stacks, allocator arenas).
const ALLOWED_GROWTH: u64 = 256 * 1024 * 1024;

fn vm_peak() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmPeak:"))
        .expect("VmPeak");
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("VmPeak value");
    kb * 1024
}

fn payload(api: ApiKey, version: i16, body: &[u8]) -> Bytes {
    let mut buf = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(7)
        .with_client_id(Some(StrBytes::from_static_str("crafted")))
        .encode(&mut buf, api.request_header_version(version))
        .expect("header");
    buf.put_slice(body);
    buf.freeze()
}

/// Bodies that put a huge claim at each of the first `positions` byte offsets: an INT32 array
/// length or BYTES length of `i32::MAX`, and an unsigned varint (compact array / string / bytes
/// length) of `u32::MAX`, on a background of 0x00 (empty / null / zero) or 0x01 (compact empty).
fn crafted_bodies(positions: usize) -> Vec<Vec<u8>> {
    let claims: [&[u8]; 3] = [
        &[0x7f, 0xff, 0xff, 0xff],
        &[0xff, 0xff, 0xff, 0xff, 0x0f],
        &[0x00, 0x00, 0x7f, 0xff, 0xff, 0xff],
    ];
    let mut bodies = Vec::new();
    for fill in [0x00u8, 0x01] {
        for at in 0..positions {
            for claim in claims {
                let mut body = vec![fill; at];
                body.extend_from_slice(claim);
                body.extend(std::iter::repeat_n(fill, 16));
                bodies.push(body);
            }
        }
    }
    bodies
}

#[test]
fn crafted_element_counts_reserve_no_more_than_the_request_holds() {
    let bodies = crafted_bodies(48);
    let before = vm_peak();
    let mut decoded = 0usize;
    let mut refused = 0usize;
    let mut largest = 0usize;
    for entry in REGISTRY {
        for version in entry.min_version..=entry.max_version {
            for scope in [ListenerScope::Broker, ListenerScope::Controller] {
                if !entry.scopes.contains(scope) {
                    continue;
                }
                for body in &bodies {
                    let p = payload(entry.key, version, body);
                    largest = largest.max(p.len());
                    match handlers::parse_request(&p, scope) {
                        Ok(ParsedRequest::Request {
                            entry,
                            header,
                            body,
                        }) => match (entry.decode)(body, header.request_api_version) {
                            Ok(()) => decoded += 1,
                            Err(_) => refused += 1,
                        },
                        // Raft bodies are the raft crate's (its fuzz target and tests).
                        Ok(ParsedRequest::ApiVersionsFallback { .. })
                        | Ok(ParsedRequest::Raft { .. })
                        | Err(_) => refused += 1,
                    }
                }
                let grown = vm_peak().saturating_sub(before);
                assert!(
                    grown <= ALLOWED_GROWTH,
                    "{:?} v{version}: requests of at most {largest} bytes grew the peak virtual \
                     size by {grown} bytes",
                    entry.key
                );
            }
        }
    }
    assert!(
        refused > 0 && decoded > 0,
        "{decoded} decoded, {refused} refused"
    );

    // The check catches the fault it looks for: one reservation of the size an unpatched
    // decoder made for a claimed 0x7fffffff-element array of 1-byte elements shows in VmPeak,
    // untouched. (In the same test, after the decodes: a test running beside them would move
    // the peak they are measured against.)
    let before = vm_peak();
    let v: Vec<u8> = std::hint::black_box(Vec::with_capacity(i32::MAX as usize));
    let grown = vm_peak().saturating_sub(before);
    assert!(v.capacity() >= i32::MAX as usize);
    assert!(
        grown > ALLOWED_GROWTH,
        "a 2 GiB reservation grew VmPeak by only {grown}"
    );
}

//! Raft on the wire: the voters' RPCs are Kafka requests of a Strom-private API, so that the
//! controller listener speaks nothing but Kafka framing (as Kafka's KRaft carries Vote,
//! BeginQuorumEpoch, Fetch and FetchSnapshot on its controller listener) and one connection
//! pipeline — frame bounds, idle timeout, connection quotas, later TLS, SASL and the
//! CLUSTER_ACTION authorization — serves Raft and the broker-to-controller APIs alike.
//!
//! API `StromRaft`, key [`API_KEY`], version 0, flexible:
//!
//! ```text
//! request  = size:int32 | RequestHeader v2 (key, version, correlation id, client id, tags) | body
//! response = size:int32 | ResponseHeader v1 (correlation id, tags)                          | body
//! ```
//!
//! A request body is the bincode encoding (varint integers, little-endian, no trailing bytes) of
//! a [`RaftRequest`], a response body that of a [`RaftResponse`]. Bodies are decoded from the
//! bytes of a frame already bounded by the receiver's `socket.request.max.bytes`: every length
//! inside is checked against the bytes left before anything is allocated for it (bincode's slice
//! reader; sequences grow as their elements decode), so a body claims nothing it does not carry.
//!
//! Key 10000 is far above every key Kafka has assigned (below 100 in 4.4); it is served on
//! controller listeners only and is unknown (the connection closed) on a client listener.

use bincode::Options;
use bytes::Bytes;
use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::{Deserialize, Serialize};
use strom_protocol::kafka::messages::{RequestHeader, ResponseHeader};
use strom_protocol::kafka::protocol::{Decodable, Encodable, StrBytes};

use crate::types::{NodeId, TypeConfig};

/// The API key of Raft requests. Strom-private: no Kafka API has it.
pub const API_KEY: i16 = 10_000;
/// The API's name, for logs and ApiVersions tooling.
pub const API_NAME: &str = "StromRaft";
pub const MIN_VERSION: i16 = 0;
pub const MAX_VERSION: i16 = 0;
/// Flexible versions: the request header with tagged fields (v2), the response header v1.
pub const REQUEST_HEADER_VERSION: i16 = 2;
pub const RESPONSE_HEADER_VERSION: i16 = 1;

/// Bytes a request needs beyond its RPC's entries or snapshot data: the size, the header (with
/// a client id of up to a few dozen bytes) and the request's fixed fields (vote, log ids,
/// snapshot meta with the voter set). Generous: a proposal may use the frame bound minus this.
pub const REQUEST_OVERHEAD: usize = 4096;

/// Errors of the Raft wire format.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("not a StromRaft frame: {0}")]
    Header(String),
    #[error("undecodable Raft body: {0}")]
    Decode(String),
    #[error("cannot encode a Raft body: {0}")]
    Encode(String),
    /// The encoded request would exceed the frame bound.
    #[error("a Raft request of {size} bytes exceeds the frame bound of {max} bytes")]
    TooLarge { size: u64, max: u64 },
}

/// One Raft RPC from voter `from` to voter `to`.
#[derive(Debug, Serialize, Deserialize)]
pub struct RaftRequest {
    pub from: NodeId,
    pub to: NodeId,
    pub rpc: RaftRpc,
}

#[derive(Debug, Serialize, Deserialize)]
pub enum RaftRpc {
    AppendEntries(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<NodeId>),
    InstallSnapshot(InstallSnapshotRequest<TypeConfig>),
    /// Is the peer's Raft state initialized (asked before bootstrapping a fresh cluster)?
    Status,
}

#[derive(Debug, Serialize, Deserialize)]
pub enum RaftResponse {
    AppendEntries(Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>),
    Vote(Result<VoteResponse<NodeId>, RaftError<NodeId>>),
    InstallSnapshot(
        Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>,
    ),
    Status {
        initialized: bool,
    },
    /// The request was addressed to another node id (a misconfigured quorum).
    WrongNode {
        node_id: NodeId,
    },
}

fn options() -> impl Options {
    bincode::DefaultOptions::new()
}

/// The size of `value`'s body encoding, without encoding it.
pub fn body_size<T: Serialize>(value: &T) -> Result<u64, WireError> {
    options()
        .serialized_size(value)
        .map_err(|e| WireError::Encode(e.to_string()))
}

/// Encodes a body of at most `max` bytes (refused before anything is written otherwise).
pub fn encode_body<T: Serialize>(value: &T, max: usize) -> Result<Vec<u8>, WireError> {
    let size = body_size(value)?;
    if size > max as u64 {
        return Err(WireError::TooLarge {
            size,
            max: max as u64,
        });
    }
    options()
        .serialize(value)
        .map_err(|e| WireError::Encode(e.to_string()))
}

/// Decodes a request body (all of `body`, nothing left over).
pub fn decode_request(body: &[u8]) -> Result<RaftRequest, WireError> {
    decode(body)
}

/// Decodes a response body (all of `body`, nothing left over).
pub fn decode_response(body: &[u8]) -> Result<RaftResponse, WireError> {
    decode(body)
}

fn decode<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, WireError> {
    options()
        .with_limit(body.len() as u64)
        .deserialize(body)
        .map_err(|e| WireError::Decode(e.to_string()))
}

/// A whole request frame: `size | RequestHeader v2 | body`.
pub fn request_frame(correlation_id: i32, client_id: &str, body: &[u8]) -> Vec<u8> {
    let header = RequestHeader::default()
        .with_request_api_key(API_KEY)
        .with_request_api_version(MAX_VERSION)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_string(client_id.to_string())));
    let mut out = Vec::with_capacity(4 + 64 + body.len());
    out.extend_from_slice(&[0; 4]);
    header
        .encode(&mut out, REQUEST_HEADER_VERSION)
        .expect("a request header always encodes");
    out.extend_from_slice(body);
    let size = (out.len() - 4) as i32;
    out[..4].copy_from_slice(&size.to_be_bytes());
    out
}

/// A whole response frame: `size | ResponseHeader v1 | body`.
pub fn response_frame(correlation_id: i32, body: &[u8]) -> Vec<u8> {
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    let mut out = Vec::with_capacity(4 + 8 + body.len());
    out.extend_from_slice(&[0; 4]);
    header
        .encode(&mut out, RESPONSE_HEADER_VERSION)
        .expect("a response header always encodes");
    out.extend_from_slice(body);
    let size = (out.len() - 4) as i32;
    out[..4].copy_from_slice(&size.to_be_bytes());
    out
}

/// Splits a request frame's payload (after the size) into its header and body; a frame of
/// another API or version is refused.
pub fn parse_request_frame(payload: Bytes) -> Result<(RequestHeader, Bytes), WireError> {
    let prefix = strom_protocol::frame::peek_header(&payload)
        .ok_or_else(|| WireError::Header("shorter than a request header".into()))?;
    if prefix.api_key != API_KEY {
        return Err(WireError::Header(format!("API key {}", prefix.api_key)));
    }
    if !(MIN_VERSION..=MAX_VERSION).contains(&prefix.api_version) {
        return Err(WireError::Header(format!("version {}", prefix.api_version)));
    }
    let mut body = payload;
    let header = RequestHeader::decode(&mut body, REQUEST_HEADER_VERSION)
        .map_err(|e| WireError::Header(e.to_string()))?;
    Ok((header, body))
}

/// Splits a response frame's payload (after the size) into its correlation id and body.
pub fn parse_response_frame(payload: Bytes) -> Result<(i32, Bytes), WireError> {
    let mut body = payload;
    let header = ResponseHeader::decode(&mut body, RESPONSE_HEADER_VERSION)
        .map_err(|e| WireError::Header(e.to_string()))?;
    Ok((header.correlation_id, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_round_trips_through_kafka_frames() {
        let req = RaftRequest {
            from: 9,
            to: 1,
            rpc: RaftRpc::Status,
        };
        let body = encode_body(&req, 1024).unwrap();
        // The layout the integration tests build by hand: varint from, to, variant index.
        assert_eq!(body, [9, 1, 3]);
        let frame = request_frame(77, "strom-raft-9", &body);
        assert_eq!(
            i32::from_be_bytes(frame[..4].try_into().unwrap()) as usize,
            frame.len() - 4
        );
        let (header, got) = parse_request_frame(Bytes::from(frame).slice(4..)).unwrap();
        assert_eq!(header.correlation_id, 77);
        assert_eq!(header.client_id.as_deref(), Some("strom-raft-9"));
        let back = decode_request(&got).unwrap();
        assert!(matches!(
            back,
            RaftRequest {
                from: 9,
                to: 1,
                rpc: RaftRpc::Status
            }
        ));

        let resp = encode_body(&RaftResponse::Status { initialized: true }, 1024).unwrap();
        let frame = response_frame(77, &resp);
        let (corr, got) = parse_response_frame(Bytes::from(frame).slice(4..)).unwrap();
        assert_eq!(corr, 77);
        assert!(matches!(
            decode_response(&got).unwrap(),
            RaftResponse::Status { initialized: true }
        ));
    }

    #[test]
    fn another_api_or_version_is_not_a_raft_frame() {
        let mut frame = request_frame(1, "x", &[9, 1, 3]);
        frame[4..6].copy_from_slice(&18i16.to_be_bytes());
        assert!(parse_request_frame(Bytes::from(frame).slice(4..)).is_err());
        let mut frame = request_frame(1, "x", &[9, 1, 3]);
        frame[6..8].copy_from_slice(&1i16.to_be_bytes());
        assert!(parse_request_frame(Bytes::from(frame).slice(4..)).is_err());
        assert!(parse_request_frame(Bytes::from_static(&[0, 1, 2])).is_err());
    }

    /// The bincode varint of a length of at least 2^32: a marker byte, then a u64.
    fn huge_len(n: u64) -> Vec<u8> {
        let mut v = vec![0xfd];
        v.extend_from_slice(&n.to_le_bytes());
        v
    }

    #[test]
    fn claimed_lengths_beyond_the_body_are_refused_before_allocation() {
        let vote = openraft::Vote::<NodeId>::new(3, 1);
        // AppendEntries whose entry vector claims 2^60 entries, in a body of a few bytes.
        let mut body = options()
            .serialize(&(5u64, 1u64, 0u32, &vote, None::<crate::types::LogId>))
            .unwrap();
        body.extend(huge_len(1 << 60));
        assert!(decode_request(&body).is_err());
        // InstallSnapshot whose chunk claims 2^62 bytes.
        let meta = crate::types::SnapshotMeta::default();
        let mut body = options()
            .serialize(&(5u64, 1u64, 2u32, &vote, &meta, 0u64))
            .unwrap();
        body.extend(huge_len(1 << 62));
        assert!(decode_request(&body).is_err());
        // The same prefix with a real (empty) chunk decodes: the layout above is the real one.
        let mut ok = options()
            .serialize(&(5u64, 1u64, 2u32, &vote, &meta, 0u64))
            .unwrap();
        ok.extend([0, 1]);
        assert!(matches!(
            decode_request(&ok).unwrap().rpc,
            RaftRpc::InstallSnapshot(r) if r.data.is_empty() && r.done
        ));
        // Trailing bytes are refused too.
        assert!(decode_request(&[9, 1, 3, 0]).is_err());
    }

    #[test]
    fn encoding_over_the_bound_is_refused_without_encoding() {
        let req = RaftRequest {
            from: 1,
            to: 2,
            rpc: RaftRpc::InstallSnapshot(InstallSnapshotRequest {
                vote: openraft::Vote::new(1, 1),
                meta: Default::default(),
                offset: 0,
                data: vec![7; 10_000],
                done: false,
            }),
        };
        let size = body_size(&req).unwrap();
        assert!(size > 10_000);
        assert!(matches!(
            encode_body(&req, 10_000),
            Err(WireError::TooLarge { .. })
        ));
        assert_eq!(encode_body(&req, size as usize).unwrap().len() as u64, size);
    }
}

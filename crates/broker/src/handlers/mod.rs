//! Request dispatch: look the API up in the [`registry`] for the listener's scope, decode the
//! header, build the [`crate::RequestContext`], forward controller-decided APIs from a broker
//! that is not the active controller, and run the registry entry's handler (which decodes the
//! body with the generated `kafka-protocol` structs and encodes the response with its header).
//! Each handler module maps internal errors to the codes its API uses.

pub mod api_versions;
#[cfg(test)]
mod authz_tests;
mod configs;
mod delete_records;
mod describe_cluster;
mod describe_log_dirs;
mod describe_producers;
mod elect_leaders;
mod fetch;
#[cfg(test)]
mod fetch_tests;
mod find_coordinator;
mod groups;
mod init_producer_id;
mod internal;
mod list_offsets;
mod metadata;
#[cfg(test)]
mod offline_tests;
mod offset_for_leader_epoch;
mod produce;
#[cfg(test)]
mod purgatory_tests;
pub(crate) mod raft;
mod reassignments;
pub mod registry;
mod topics;
mod transactions;
mod txn_offset_commit;
mod write_txn_markers;

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use strom_protocol::frame;
use strom_protocol::kafka::messages::*;
use strom_protocol::kafka::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};
use thiserror::Error;

use crate::connection::ConnectionInfo;
use crate::listeners::ListenerScope;
use crate::server::Broker;

/// Reasons to close a connection instead of answering.
#[derive(Debug, Error)]
pub enum HandleError {
    #[error("request shorter than a header")]
    Malformed,
    #[error("unknown API key {0}")]
    UnknownApi(i16),
    #[error("Received request api key {api:?} with version {version} which is not enabled on this {scope:?} listener")]
    NotEnabled {
        api: ApiKey,
        version: i16,
        scope: ListenerScope,
    },
    #[error("unsupported version {version} of API {api_key}")]
    UnsupportedVersion { api_key: i16, version: i16 },
    #[error("cannot decode {api:?} v{version}: {reason}")]
    Decode {
        api: ApiKey,
        version: i16,
        reason: String,
    },
    #[error("cannot encode {api:?} v{version} response: {reason}")]
    Encode {
        api: ApiKey,
        version: i16,
        reason: String,
    },
    #[error("cannot decode the header of a {api} v{version} request: {reason}")]
    PrivateHeader {
        api: &'static str,
        version: i16,
        reason: String,
    },
    /// A Raft request the quorum refused (an undecodable body, or the voter has stopped).
    #[error("raft request: {0}")]
    Raft(#[from] strom_raft::QuorumError),
    #[error("error in a produce with acks=0: closing so the client notices")]
    AcksZeroFailure,
    /// A private API whose principal lacks CLUSTER_ACTION (its wire has no error field).
    #[error("{api}: CLUSTER_ACTION on the cluster denied")]
    ClusterAuthorization { api: &'static str },
    /// The broker is shutting down and takes no new request.
    #[error("the broker is shutting down")]
    ShuttingDown,
}

/// What dispatch makes of a request frame before running its handler.
pub enum ParsedRequest {
    Request {
        entry: &'static registry::ApiEntry,
        header: RequestHeader,
        /// The body, after the header.
        body: Bytes,
    },
    /// ApiVersions at a version Strom does not speak: answered at v0 with UNSUPPORTED_VERSION
    /// and the supported ranges, so the client can retry (Kafka's fallback).
    ApiVersionsFallback { correlation_id: i32 },
    /// A Raft RPC between the controller quorum's voters ([`registry::RAFT`], controller
    /// listeners only): its body goes to the quorum.
    Raft {
        header: RequestHeader,
        /// The body, after the header.
        body: Bytes,
    },
}

/// Looks the request up in the registry for a listener of `scope` and decodes its header. An
/// API the listener does not serve closes the connection, as Kafka's SocketServer does for an
/// API not enabled on a listener (and ApiVersions on that listener does not list it).
pub fn parse_request(payload: &Bytes, scope: ListenerScope) -> Result<ParsedRequest, HandleError> {
    let prefix = frame::peek_header(payload).ok_or(HandleError::Malformed)?;
    if let Some(api) = registry::lookup_private(prefix.api_key, scope) {
        let version = prefix.api_version;
        if !api.serves(version) {
            return Err(HandleError::UnsupportedVersion {
                api_key: prefix.api_key,
                version,
            });
        }
        let mut body = payload.clone();
        let header = RequestHeader::decode(&mut body, api.request_header_version).map_err(|e| {
            HandleError::PrivateHeader {
                api: api.name,
                version,
                reason: e.to_string(),
            }
        })?;
        return Ok(ParsedRequest::Raft { header, body });
    }
    let api_key =
        ApiKey::try_from(prefix.api_key).map_err(|_| HandleError::UnknownApi(prefix.api_key))?;
    let version = prefix.api_version;
    let entry = registry::lookup(prefix.api_key, scope).ok_or(HandleError::NotEnabled {
        api: api_key,
        version,
        scope,
    })?;
    if !entry.serves(version) {
        if api_key == ApiKey::ApiVersions {
            return Ok(ParsedRequest::ApiVersionsFallback {
                correlation_id: prefix.correlation_id,
            });
        }
        return Err(HandleError::UnsupportedVersion {
            api_key: prefix.api_key,
            version,
        });
    }
    let mut body = payload.clone();
    let header = RequestHeader::decode(&mut body, api_key.request_header_version(version))
        .map_err(|e| HandleError::Decode {
            api: api_key,
            version,
            reason: e.to_string(),
        })?;
    Ok(ParsedRequest::Request {
        entry,
        header,
        body,
    })
}

/// Handles one request frame (without its size prefix) that arrived on `conn`. `Ok(None)`: no
/// response is due.
pub async fn handle(
    broker: &Arc<Broker>,
    conn: &mut ConnectionInfo,
    payload: Bytes,
) -> registry::HandlerResult {
    let parsed = parse_request(&payload, conn.listener.scope)?;
    handle_parsed(broker, conn, parsed, payload).await
}

/// [`handle`] after [`parse_request`].
pub(crate) async fn handle_parsed(
    broker: &Arc<Broker>,
    conn: &mut ConnectionInfo,
    parsed: ParsedRequest,
    payload: Bytes,
) -> registry::HandlerResult {
    let scope = conn.listener.scope;
    let (entry, header, body) = match parsed {
        ParsedRequest::ApiVersionsFallback { correlation_id } => {
            return api_versions::fallback(scope, correlation_id).map(|b| Some(b.into()));
        }
        // The controller listener's dispatch hands Raft to the quorum before a request gets
        // here (it needs no broker); nothing else parses as Raft.
        ParsedRequest::Raft { .. } => {
            return Err(HandleError::UnknownApi(registry::RAFT.key));
        }
        ParsedRequest::Request {
            entry,
            header,
            body,
        } => (entry, header, body),
    };
    if entry.key == ApiKey::ApiVersions {
        // KIP-511: the client's software name and version, kept for the connection (Kafka
        // records them at the socket layer, before the API layer).
        conn.remember_client_software(&body, header.request_api_version);
    }
    let ctx = conn.context(header, entry.key);
    if hands_off(entry) {
        crate::request_queue::parked();
    }
    if entry.forwardable && scope == ListenerScope::Broker && !broker.controller.is_active() {
        // Admin requests are decided by the active controller: forward them there in an
        // Envelope with the client's principal, and relay its answer. If that fails, the local
        // handler answers NOT_CONTROLLER per item and the client retries.
        if let Ok(resp) = broker.channel.forward(&ctx, &payload).await {
            return Ok(Some(crate::controller_channel::frame(resp).into()));
        }
    }
    (entry.handle)(broker, &ctx, body).await
}

/// APIs a coordinator or the controller answers: Kafka's handler threads hand them over and
/// return at once, so while they wait they take no slot of `queued.max.requests`
/// ([`crate::request_queue`]).
fn hands_off(entry: &registry::ApiEntry) -> bool {
    use ApiKey::*;
    entry.forwardable
        || !entry.scopes.broker
        || matches!(
            entry.key,
            FindCoordinator
                | JoinGroup
                | SyncGroup
                | Heartbeat
                | LeaveGroup
                | OffsetCommit
                | OffsetFetch
                | TxnOffsetCommit
                | DescribeGroups
                | ListGroups
                | DeleteGroups
                | OffsetDelete
                | ConsumerGroupHeartbeat
                | ConsumerGroupDescribe
                | InitProducerId
                | AddPartitionsToTxn
                | AddOffsetsToTxn
                | EndTxn
                | DescribeTransactions
                | ListTransactions
                | WriteTxnMarkers
        )
}

/// Encodes `size | response header | body`.
fn encode<R: Encodable + HeaderVersion>(
    api_key: ApiKey,
    version: i16,
    correlation_id: i32,
    resp: &R,
) -> Result<BytesMut, HandleError> {
    let header_version = api_key.response_header_version(version);
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    macro_rules! enc {
        ($e:expr) => {
            $e.map_err(|e| HandleError::Encode {
                api: api_key,
                version,
                reason: e.to_string(),
            })?
        };
    }
    let size = enc!(header.compute_size(header_version)) + enc!(resp.compute_size(version));
    let mut buf = BytesMut::with_capacity(4 + size);
    buf.put_i32(size as i32);
    enc!(header.encode(&mut buf, header_version));
    enc!(resp.encode(&mut buf, version));
    Ok(buf)
}

/// The handlers' tests' broker: a formatted single node on a fresh port and `dir`, started with
/// `plugins` (not serving clients: the tests call the handlers).
#[cfg(test)]
pub(crate) async fn test_server(
    dir: &tempfile::TempDir,
    plugins: crate::server::Plugins,
) -> crate::server::Server {
    let config = crate::config::BrokerConfig::new(
        1,
        "127.0.0.1:0".parse().unwrap(),
        None,
        dir.path().to_path_buf(),
        std::collections::BTreeMap::new(),
    )
    .unwrap();
    crate::meta_properties::format(&config.log_dirs, config.node_id, "test-cluster", true).unwrap();
    crate::server::Server::start_with(config, plugins)
        .await
        .unwrap()
}

pub(crate) fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

//! Raft between the controller quorum's voters (the private API [`super::registry::RAFT`]):
//! the body goes to this node's voter ([`strom_raft::RaftService`]) and its answer back in a
//! Kafka response frame. Served on controller listeners only, from start-up on: the quorum
//! must elect and replicate while the broker is still opening its logs.
//!
//! Kafka's `ControllerApis` authorizes its Raft RPCs (Vote, BeginQuorumEpoch, EndQuorumEpoch,
//! Fetch, FetchSnapshot) with CLUSTER_ACTION on the cluster; so does this handler. The private
//! wire has no error field, so a denied request closes the connection (and is logged).

use bytes::{Bytes, BytesMut};
use strom_protocol::kafka::messages::RequestHeader;
use strom_raft::RaftService;
use strom_server_common::authorizer::{AclOperation, AuthHelper, AuthorizableRequestContext};
use strom_server_common::KafkaPrincipal;

use super::HandleError;
use crate::connection::ConnectionInfo;

/// Runs one Raft request. An error (a principal without CLUSTER_ACTION, a body that is no Raft
/// RPC, a stopped voter) closes the connection.
pub(crate) async fn handle(
    service: &RaftService,
    auth: &AuthHelper,
    conn: &ConnectionInfo,
    header: RequestHeader,
    body: Bytes,
) -> Result<Option<BytesMut>, HandleError> {
    let ctx = RaftContext {
        conn,
        header: &header,
    };
    if !auth.authorize_cluster(&ctx, AclOperation::ClusterAction) {
        tracing::info!(
            principal = %conn.principal,
            client = %conn.peer,
            "denied: CLUSTER_ACTION on the cluster for StromRaft"
        );
        return Err(HandleError::ClusterAuthorization {
            api: strom_raft::wire::API_NAME,
        });
    }
    let resp = service.handle(&body).await?;
    let frame = strom_raft::wire::response_frame(header.correlation_id, &resp);
    Ok(Some(BytesMut::from(&frame[..])))
}

/// What the authorizer sees of a Raft request: the connection and the request header (a private
/// API has no [`crate::RequestContext`], whose API is one of Kafka's).
struct RaftContext<'a> {
    conn: &'a ConnectionInfo,
    header: &'a RequestHeader,
}

impl AuthorizableRequestContext for RaftContext<'_> {
    fn listener_name(&self) -> &str {
        &self.conn.listener.name
    }

    fn security_protocol_name(&self) -> &'static str {
        self.conn.listener.security_protocol.name()
    }

    fn principal(&self) -> &KafkaPrincipal {
        &self.conn.principal
    }

    fn client_address(&self) -> std::net::SocketAddr {
        self.conn.peer
    }

    fn request_type(&self) -> i16 {
        self.header.request_api_key
    }

    fn request_version(&self) -> i16 {
        self.header.request_api_version
    }

    fn client_id(&self) -> &str {
        self.header.client_id.as_deref().unwrap_or("")
    }

    fn correlation_id(&self) -> i32 {
        self.header.correlation_id
    }
}

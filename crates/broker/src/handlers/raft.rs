//! Raft between the controller quorum's voters (the private API [`super::registry::RAFT`]):
//! the body goes to this node's voter ([`strom_raft::RaftService`]) and its answer back in a
//! Kafka response frame. Served on controller listeners only, from start-up on: the quorum
//! must elect and replicate while the broker is still opening its logs.
//!
//! Kafka's `ControllerApis` authorizes its Raft RPCs (Vote, BeginQuorumEpoch, EndQuorumEpoch,
//! Fetch, FetchSnapshot) with CLUSTER_ACTION on the cluster; the authorizer's check belongs
//! here, with the other controller APIs', once there is one.

use bytes::{Bytes, BytesMut};
use strom_protocol::kafka::messages::RequestHeader;
use strom_raft::RaftService;

use super::HandleError;

/// Runs one Raft request. An error (a body that is no Raft RPC, a stopped voter) closes the
/// connection.
pub(crate) async fn handle(
    service: &RaftService,
    header: RequestHeader,
    body: Bytes,
) -> Result<Option<BytesMut>, HandleError> {
    let resp = service.handle(&body).await?;
    let frame = strom_raft::wire::response_frame(header.correlation_id, &resp);
    Ok(Some(BytesMut::from(&frame[..])))
}

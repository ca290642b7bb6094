//! The consumer group (KIP-848) APIs: ConsumerGroupHeartbeat, ConsumerGroupDescribe.
//!
//! SKELETON: answered with COORDINATOR_NOT_AVAILABLE until the consumer group state machine
//! lands.

use strom_protocol::kafka::messages::*;
use strom_protocol::ErrorCode;

use super::{GroupCoordinatorService, GroupRequestContext};

impl GroupCoordinatorService {
    pub async fn consumer_group_heartbeat(
        &self,
        _ctx: &GroupRequestContext,
        _req: ConsumerGroupHeartbeatRequest,
    ) -> ConsumerGroupHeartbeatResponse {
        ConsumerGroupHeartbeatResponse::default()
            .with_error_code(ErrorCode::CoordinatorNotAvailable.code())
    }

    pub async fn consumer_group_describe(
        &self,
        _ctx: &GroupRequestContext,
        _req: ConsumerGroupDescribeRequest,
    ) -> ConsumerGroupDescribeResponse {
        ConsumerGroupDescribeResponse::default()
    }
}

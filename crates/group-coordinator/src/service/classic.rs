//! The classic group APIs: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, DescribeGroups,
//! ListGroups.
//!
//! SKELETON: answered with COORDINATOR_NOT_AVAILABLE until the classic group state machine
//! lands.

use strom_protocol::kafka::messages::*;
use strom_protocol::ErrorCode;

use super::{GroupCoordinatorService, GroupRequestContext};

impl GroupCoordinatorService {
    pub async fn join_group(
        &self,
        _ctx: &GroupRequestContext,
        _req: JoinGroupRequest,
    ) -> JoinGroupResponse {
        JoinGroupResponse::default().with_error_code(ErrorCode::CoordinatorNotAvailable.code())
    }

    pub async fn sync_group(
        &self,
        _ctx: &GroupRequestContext,
        _req: SyncGroupRequest,
    ) -> SyncGroupResponse {
        SyncGroupResponse::default().with_error_code(ErrorCode::CoordinatorNotAvailable.code())
    }

    pub async fn heartbeat(
        &self,
        _ctx: &GroupRequestContext,
        _req: HeartbeatRequest,
    ) -> HeartbeatResponse {
        HeartbeatResponse::default().with_error_code(ErrorCode::CoordinatorNotAvailable.code())
    }

    pub async fn leave_group(
        &self,
        _ctx: &GroupRequestContext,
        _req: LeaveGroupRequest,
    ) -> LeaveGroupResponse {
        LeaveGroupResponse::default().with_error_code(ErrorCode::CoordinatorNotAvailable.code())
    }

    pub async fn describe_groups(
        &self,
        _ctx: &GroupRequestContext,
        _req: DescribeGroupsRequest,
    ) -> DescribeGroupsResponse {
        DescribeGroupsResponse::default()
    }

    pub async fn list_groups(
        &self,
        _ctx: &GroupRequestContext,
        _req: ListGroupsRequest,
    ) -> ListGroupsResponse {
        ListGroupsResponse::default().with_error_code(ErrorCode::CoordinatorNotAvailable.code())
    }
}

//! The JoinGroup / SyncGroup answers the state machine gives, built in one place.

use bytes::Bytes;
use strom_protocol::kafka::messages::{JoinGroupResponse, SyncGroupResponse};
use strom_protocol::ErrorCode;

use super::group::ClassicGroup;
use super::member::s;

/// An error answer to JoinGroup carrying `member_id`.
pub fn join_error(member_id: &str, code: ErrorCode) -> JoinGroupResponse {
    JoinGroupResponse::default()
        .with_member_id(s(member_id))
        .with_error_code(code.code())
}

/// The answer to the member a static member's rejoin replaced.
pub fn join_fenced(old_member_id: &str) -> JoinGroupResponse {
    JoinGroupResponse::default()
        .with_member_id(s(old_member_id))
        .with_protocol_name(None)
        .with_protocol_type(None)
        .with_leader(s(""))
        .with_error_code(ErrorCode::FencedInstanceId.code())
}

/// The current generation's JoinGroup answer for `member_id`; the leader (or whoever `with_members`
/// says) gets the members and their metadata.
pub fn join_ok(
    group: &ClassicGroup,
    member_id: &str,
    with_members: bool,
    skip_assignment: bool,
) -> JoinGroupResponse {
    let protocol = group.protocol_name.as_deref();
    let members = if with_members {
        group
            .members_in_order()
            .into_iter()
            .map(|m| m.as_join_member(protocol))
            .collect()
    } else {
        Vec::new()
    };
    JoinGroupResponse::default()
        .with_members(members)
        .with_member_id(s(member_id))
        .with_generation_id(group.generation_id)
        .with_protocol_name(group.protocol_name.as_deref().map(s))
        .with_protocol_type(group.protocol_type.as_deref().map(s))
        .with_leader(s(group.leader_id.as_deref().unwrap_or("")))
        .with_skip_assignment(skip_assignment)
}

pub fn sync_error(code: ErrorCode) -> SyncGroupResponse {
    SyncGroupResponse::default().with_error_code(code.code())
}

pub fn sync_ok(group: &ClassicGroup, assignment: Bytes) -> SyncGroupResponse {
    SyncGroupResponse::default()
        .with_protocol_type(group.protocol_type.as_deref().map(s))
        .with_protocol_name(group.protocol_name.as_deref().map(s))
        .with_assignment(assignment)
}

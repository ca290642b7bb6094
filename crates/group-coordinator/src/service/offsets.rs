//! The offset APIs: OffsetCommit, OffsetFetch, OffsetDelete, DeleteGroups.
//!
//! SKELETON: answered with COORDINATOR_NOT_AVAILABLE until the offsets manager lands.

use strom_protocol::kafka::messages::*;

use super::{GroupCoordinatorService, GroupRequestContext};

impl GroupCoordinatorService {
    pub async fn offset_commit(
        &self,
        _ctx: &GroupRequestContext,
        _req: OffsetCommitRequest,
    ) -> OffsetCommitResponse {
        OffsetCommitResponse::default()
    }

    pub async fn offset_fetch(
        &self,
        _ctx: &GroupRequestContext,
        _req: OffsetFetchRequest,
    ) -> OffsetFetchResponse {
        OffsetFetchResponse::default()
    }

    pub async fn offset_delete(
        &self,
        _ctx: &GroupRequestContext,
        _req: OffsetDeleteRequest,
    ) -> OffsetDeleteResponse {
        OffsetDeleteResponse::default()
    }

    pub async fn delete_groups(
        &self,
        _ctx: &GroupRequestContext,
        _req: DeleteGroupsRequest,
    ) -> DeleteGroupsResponse {
        DeleteGroupsResponse::default()
    }
}

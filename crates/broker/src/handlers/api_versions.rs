//! ApiVersions: exactly the registry's ranges for the listener the request came in on.

use strom_protocol::kafka::messages::api_versions_response::ApiVersion;
use strom_protocol::kafka::messages::{ApiVersionsRequest, ApiVersionsResponse};

use super::registry;
use crate::listeners::ListenerScope;
use crate::request_context::RequestContext;

pub fn handle(ctx: &RequestContext, _req: ApiVersionsRequest) -> ApiVersionsResponse {
    response(ctx.listener.scope, 0)
}

pub fn response(scope: ListenerScope, error_code: i16) -> ApiVersionsResponse {
    let api_keys = registry::api_versions(scope)
        .into_iter()
        .map(|(key, min, max)| {
            ApiVersion::default()
                .with_api_key(key as i16)
                .with_min_version(min)
                .with_max_version(max)
        })
        .collect();
    ApiVersionsResponse::default()
        .with_error_code(error_code)
        .with_api_keys(api_keys)
}

//! ApiVersions: exactly the ranges in `strom_protocol::apis::SUPPORTED`.

use strom_protocol::apis;
use strom_protocol::kafka::messages::api_versions_response::ApiVersion;
use strom_protocol::kafka::messages::{ApiVersionsRequest, ApiVersionsResponse};
use strom_protocol::kafka::protocol::StrBytes;

pub fn handle(_req: ApiVersionsRequest) -> ApiVersionsResponse {
    response(StrBytes::default(), 0)
}

pub fn response(_client: StrBytes, error_code: i16) -> ApiVersionsResponse {
    let api_keys = apis::SUPPORTED
        .iter()
        .map(|&(key, min, max)| {
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

//! ApiVersions: exactly the registry's ranges for the listener the request came in on, and
//! (v3+) the features: the only one Strom implements is `transaction.version` (KIP-890), at
//! the level the broker property `transaction.version` finalizes (default 2, as a new Kafka
//! 4.4 cluster). Clients decide on it whether to use transactions v2 (Java's producer does:
//! EndTxn v5, Produce v12 and no AddPartitionsToTxn of its own).

use std::sync::Arc;

use bytes::BytesMut;
use strom_protocol::kafka::messages::api_versions_response::{
    ApiVersion, FinalizedFeatureKey, SupportedFeatureKey,
};
use strom_protocol::kafka::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse};
use strom_protocol::kafka::protocol::StrBytes;
use strom_protocol::ErrorCode;

use super::{encode, registry, HandleError};
use crate::listeners::ListenerScope;
use crate::request_context::RequestContext;
use crate::server::Broker;

/// The feature's name in ApiVersions and in Kafka's `TransactionVersion.FEATURE_NAME`.
pub const TRANSACTION_VERSION_FEATURE: &str = "transaction.version";
/// The `transaction.version` levels Strom supports (Kafka 4.4's range).
pub const TRANSACTION_VERSION_SUPPORTED: (i16, i16) = (0, 2);

pub fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    _req: ApiVersionsRequest,
) -> ApiVersionsResponse {
    // The metadata position stands for the epoch of the finalized features (Kafka uses the
    // offset of the image they were read from): it only grows, so a client keeps the newest.
    let epoch = broker.image().offset as i64;
    build(
        ctx.listener.scope,
        ctx.api_version,
        broker.config.transaction_version,
        epoch,
    )
}

/// The answer to ApiVersions at `version` on a listener of `scope`, with the features (v3+)
/// at `transaction_version`, finalized at `features_epoch`.
pub fn build(
    scope: ListenerScope,
    version: i16,
    transaction_version: i16,
    features_epoch: i64,
) -> ApiVersionsResponse {
    let resp = response(scope, 0);
    if version < 3 {
        return resp;
    }
    with_features(resp, version, transaction_version, features_epoch)
}

/// The framed answer to an ApiVersions request (a pre-authentication API: it needs nothing of
/// the connection but its listener; the fuzz target runs it on untrusted requests).
pub fn answer(
    scope: ListenerScope,
    version: i16,
    correlation_id: i32,
    transaction_version: i16,
    features_epoch: i64,
) -> Result<BytesMut, HandleError> {
    let resp = build(scope, version, transaction_version, features_epoch);
    encode(ApiKey::ApiVersions, version, correlation_id, &resp)
}

/// The answer to ApiVersions at a version Strom does not speak: v0 with UNSUPPORTED_VERSION
/// and the supported ranges, so the client can retry at one of them (Kafka's fallback).
pub fn fallback(scope: ListenerScope, correlation_id: i32) -> Result<BytesMut, HandleError> {
    let resp = response(scope, ErrorCode::UnsupportedVersion.code());
    encode(ApiKey::ApiVersions, 0, correlation_id, &resp)
}

/// Kafka's `ApiVersionsResponse.createApiVersionsResponse` feature fields: below v4 a feature
/// whose minimum supported level is 0 is left out of `supported_features` (older clients fail
/// to read it, KAFKA-17492); a feature finalized at level 0 is not finalized at all.
pub fn with_features(
    resp: ApiVersionsResponse,
    api_version: i16,
    transaction_version: i16,
    epoch: i64,
) -> ApiVersionsResponse {
    let (min, max) = TRANSACTION_VERSION_SUPPORTED;
    let name = || StrBytes::from_static_str(TRANSACTION_VERSION_FEATURE);
    let supported = if api_version < 4 && min == 0 {
        Vec::new()
    } else {
        vec![SupportedFeatureKey::default()
            .with_name(name())
            .with_min_version(min)
            .with_max_version(max)]
    };
    let finalized = if transaction_version == 0 {
        Vec::new()
    } else {
        vec![FinalizedFeatureKey::default()
            .with_name(name())
            .with_min_version_level(transaction_version)
            .with_max_version_level(transaction_version)]
    };
    resp.with_supported_features(supported)
        .with_finalized_features_epoch(epoch)
        .with_finalized_features(finalized)
}

pub fn response(scope: ListenerScope, error_code: i16) -> ApiVersionsResponse {
    let api_keys = registry::api_versions(scope)
        .into_iter()
        .map(|(key, min, max)| {
            ApiVersion::default()
                .with_api_key(key)
                .with_min_version(min)
                .with_max_version(max)
        })
        .collect();
    ApiVersionsResponse::default()
        .with_error_code(error_code)
        .with_api_keys(api_keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn features_as_kafka_lists_them() {
        let v4 = with_features(ApiVersionsResponse::default(), 4, 2, 7);
        assert_eq!(v4.supported_features.len(), 1);
        assert_eq!(v4.supported_features[0].min_version, 0);
        assert_eq!(v4.supported_features[0].max_version, 2);
        assert_eq!(v4.finalized_features[0].max_version_level, 2);
        assert_eq!(v4.finalized_features[0].min_version_level, 2);
        assert_eq!(v4.finalized_features_epoch, 7);
        // v3: the min-0 feature is left out of the supported ones, still finalized.
        let v3 = with_features(ApiVersionsResponse::default(), 3, 1, 7);
        assert!(v3.supported_features.is_empty());
        assert_eq!(v3.finalized_features[0].max_version_level, 1);
        // Level 0 is not finalized.
        assert!(with_features(ApiVersionsResponse::default(), 4, 0, 7)
            .finalized_features
            .is_empty());
    }
}

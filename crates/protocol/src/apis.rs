//! The APIs Strom implements, with the exact version ranges it advertises in ApiVersions.
//!
//! A range here must only cover versions whose every field the broker handles. Ranges are clamped
//! to what the generated `kafka-protocol` structs can decode (Kafka 4.x dropped Produce < 3 and
//! Fetch < 4, and so did the generator).

use kafka_protocol::messages::ApiKey;

/// `(api, min, max)` for every API the broker serves.
pub const SUPPORTED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 11),
    (ApiKey::Fetch, 4, 16),
    (ApiKey::ListOffsets, 1, 8),
    (ApiKey::Metadata, 0, 12),
    (ApiKey::ApiVersions, 0, 4),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::DescribeCluster, 0, 1),
    (ApiKey::InitProducerId, 0, 5),
    (ApiKey::OffsetForLeaderEpoch, 2, 4),
    (ApiKey::DeleteRecords, 0, 2),
    (ApiKey::ElectLeaders, 0, 2),
    (ApiKey::AlterPartitionReassignments, 0, 0),
    (ApiKey::ListPartitionReassignments, 0, 0),
];

/// Broker-to-controller APIs: served by the active controller, never advertised to clients.
pub const INTERNAL: &[(ApiKey, i16, i16)] = &[
    (ApiKey::BrokerRegistration, 0, 4),
    (ApiKey::AllocateProducerIds, 0, 0),
    (ApiKey::AlterPartition, 2, 3),
    (ApiKey::BrokerHeartbeat, 0, 1),
    (ApiKey::AssignReplicasToDirs, 0, 0),
];

/// True when `version` of `api_key` is accepted, advertised or internal.
pub fn is_served(api_key: i16, version: i16) -> bool {
    is_supported(api_key, version)
        || INTERNAL
            .iter()
            .any(|&(k, min, max)| k as i16 == api_key && version >= min && version <= max)
}

/// The advertised range for an API key, if Strom serves it.
pub fn supported_range(api_key: i16) -> Option<(i16, i16)> {
    SUPPORTED
        .iter()
        .find(|(k, _, _)| *k as i16 == api_key)
        .map(|&(_, min, max)| (min, max))
}

/// True when `version` of `api_key` is served.
pub fn is_supported(api_key: i16, version: i16) -> bool {
    matches!(supported_range(api_key), Some((min, max)) if version >= min && version <= max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_fit_the_generated_structs() {
        for &(key, min, max) in SUPPORTED {
            let valid = key.valid_versions();
            assert!(
                min >= valid.min && max <= valid.max,
                "{key:?} {min}..{max} vs {valid}"
            );
            assert!(min <= max);
        }
    }

    #[test]
    fn unknown_key_is_unsupported() {
        assert!(!is_supported(9999, 0));
        assert!(is_supported(18, 3));
        assert!(!is_supported(18, 99));
    }
}

//! API version negotiation: which versions the client implements, and how one is picked given
//! the broker's ApiVersions answer.

use std::collections::HashMap;

use strom_protocol::kafka::messages::ApiKey;

/// `(api, min, max)` for every API this client can build requests for and decode responses of.
///
/// Fetch stops at 12 (13+ address topics by id only) and Produce at 12 (13 does too; 12 is
/// 11 on the wire and tells the broker the producer uses transactions v2, so a transactional
/// producer without transactions v2 stays at 11, see [`crate::transactions`]).
pub const CLIENT_VERSIONS: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 12),
    (ApiKey::Fetch, 4, 12),
    (ApiKey::ListOffsets, 1, 8),
    (ApiKey::Metadata, 1, 12),
    (ApiKey::ApiVersions, 0, 3),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::DescribeCluster, 0, 1),
    (ApiKey::InitProducerId, 0, 5),
    // The transactional producer (transactions.rs). AddPartitionsToTxn 4+ is broker-to-broker;
    // EndTxn 5 and TxnOffsetCommit 5 only with transactions v2.
    (ApiKey::AddPartitionsToTxn, 0, 3),
    (ApiKey::AddOffsetsToTxn, 0, 4),
    (ApiKey::EndTxn, 0, 5),
    (ApiKey::TxnOffsetCommit, 0, 5),
    // The group admin calls (admin_groups.rs).
    (ApiKey::FindCoordinator, 1, 6),
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::DescribeGroups, 0, 5),
    (ApiKey::ConsumerGroupDescribe, 0, 1),
    (ApiKey::OffsetFetch, 1, 9),
    (ApiKey::OffsetCommit, 2, 9),
    (ApiKey::OffsetDelete, 0, 0),
    (ApiKey::DeleteGroups, 0, 2),
    // The transaction admin calls (admin_txn.rs). WriteTxnMarkers is the admin's abort.
    (ApiKey::ListTransactions, 0, 2),
    (ApiKey::DescribeTransactions, 0, 0),
    (ApiKey::DescribeProducers, 0, 0),
    (ApiKey::WriteTxnMarkers, 1, 2),
];

/// The client's range for `api`, if it implements it.
pub fn client_range(api: ApiKey) -> Option<(i16, i16)> {
    CLIENT_VERSIONS
        .iter()
        .find(|(k, _, _)| *k == api)
        .map(|&(_, min, max)| (min, max))
}

/// The highest version in both ranges, or `None` when they do not overlap.
pub fn pick_version(client: (i16, i16), broker: (i16, i16)) -> Option<i16> {
    let min = client.0.max(broker.0);
    let max = client.1.min(broker.1);
    (min <= max).then_some(max)
}

/// What a broker advertised in ApiVersions: api key -> (min, max).
#[derive(Debug, Clone, Default)]
pub struct BrokerVersions {
    ranges: HashMap<i16, (i16, i16)>,
}

impl BrokerVersions {
    /// Builds the table from `(api_key, min, max)` triples.
    pub fn new(ranges: impl IntoIterator<Item = (i16, i16, i16)>) -> Self {
        BrokerVersions {
            ranges: ranges
                .into_iter()
                .map(|(k, min, max)| (k, (min, max)))
                .collect(),
        }
    }

    /// The broker's range for `api`.
    pub fn range(&self, api: ApiKey) -> Option<(i16, i16)> {
        self.ranges.get(&(api as i16)).copied()
    }

    /// The version to use for `api`: the highest both sides support.
    pub fn pick(&self, api: ApiKey) -> Option<i16> {
        pick_version(client_range(api)?, self.range(api)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_highest_common_version() {
        assert_eq!(pick_version((3, 11), (0, 9)), Some(9));
        assert_eq!(pick_version((3, 11), (0, 13)), Some(11));
        assert_eq!(pick_version((4, 12), (4, 4)), Some(4));
        assert_eq!(pick_version((4, 12), (0, 3)), None);
        assert_eq!(pick_version((4, 12), (13, 16)), None);
    }

    #[test]
    fn table_lookup() {
        let v = BrokerVersions::new([(0, 3, 9), (1, 4, 16), (3, 0, 12)]);
        assert_eq!(v.pick(ApiKey::Produce), Some(9));
        assert_eq!(
            BrokerVersions::new([(0, 3, 13)]).pick(ApiKey::Produce),
            Some(12)
        );
        assert_eq!(v.pick(ApiKey::Fetch), Some(12));
        assert_eq!(v.pick(ApiKey::Metadata), Some(12));
        assert_eq!(v.pick(ApiKey::CreateTopics), None);
    }

    #[test]
    fn client_ranges_fit_generated_structs() {
        for &(key, min, max) in CLIENT_VERSIONS {
            let valid = key.valid_versions();
            assert!(min >= valid.min && max <= valid.max, "{key:?}");
        }
    }
}

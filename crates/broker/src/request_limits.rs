//! The broker settings that bound what requests may hold in memory: Kafka's
//! `queued.max.requests` and `queued.max.request.bytes` (`SocketServerConfigs`),
//! `fetch.max.bytes` (`ServerConfigs`) and `replica.fetch.response.max.bytes`
//! (`ReplicationConfigs`), with Kafka's defaults and validation.

use std::collections::BTreeMap;

use crate::config::{parse, ConfigError};

/// The keys read here, for the unused-key warning.
pub const KEYS: &[&str] = &[
    "fetch.max.bytes",
    "replica.fetch.response.max.bytes",
    "queued.max.requests",
    "queued.max.request.bytes",
];

/// What DescribeConfigs of the broker shows for these when unset: name, Kafka's config type
/// (INT 3, LONG 5) and default.
pub const BROKER_CONFIGS: &[(&str, i8, &str)] = &[
    ("fetch.max.bytes", 3, "57671680"),
    ("queued.max.request.bytes", 5, "-1"),
    ("queued.max.requests", 3, "500"),
    ("replica.fetch.response.max.bytes", 3, "10485760"),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestLimits {
    /// `fetch.max.bytes` (55 MiB, at least 1024): the most a fetch response holds (its first
    /// batch aside), whatever the request asks.
    pub fetch_max_bytes: i32,
    /// `replica.fetch.response.max.bytes` (10 MiB): what this broker's followers ask of a
    /// leader per fetch (the fetcher reads it too).
    pub replica_fetch_response_max_bytes: i32,
    /// `queued.max.requests` (500, at least 1): requests handled at once across the broker.
    pub queued_max_requests: usize,
    /// `queued.max.request.bytes` (-1: unbounded): request bytes held at once across the
    /// broker; when set, at least `socket.request.max.bytes`.
    pub queued_max_request_bytes: i64,
}

impl RequestLimits {
    pub fn from_props(
        props: &BTreeMap<String, String>,
        socket_request_max_bytes: usize,
    ) -> Result<Self, ConfigError> {
        let bad = |key: &str, value: String, why: &str| ConfigError::InvalidValue {
            key: key.into(),
            value,
            why: why.into(),
        };
        let fetch_max_bytes: i32 = parse(props, "fetch.max.bytes", 55 * 1024 * 1024)?;
        if fetch_max_bytes < 1024 {
            return Err(bad(
                "fetch.max.bytes",
                fetch_max_bytes.to_string(),
                "Value must be at least 1024",
            ));
        }
        let replica_fetch_response_max_bytes: i32 =
            parse(props, "replica.fetch.response.max.bytes", 10 * 1024 * 1024)?;
        if replica_fetch_response_max_bytes < 0 {
            return Err(bad(
                "replica.fetch.response.max.bytes",
                replica_fetch_response_max_bytes.to_string(),
                "Value must be at least 0",
            ));
        }
        let queued_max_requests: i32 = parse(props, "queued.max.requests", 500)?;
        if queued_max_requests < 1 {
            return Err(bad(
                "queued.max.requests",
                queued_max_requests.to_string(),
                "Value must be at least 1",
            ));
        }
        let queued_max_request_bytes: i64 = parse(props, "queued.max.request.bytes", -1)?;
        if queued_max_request_bytes > 0
            && queued_max_request_bytes < socket_request_max_bytes as i64
        {
            return Err(bad(
                "queued.max.request.bytes",
                queued_max_request_bytes.to_string(),
                "queued.max.request.bytes must be larger or equal to socket.request.max.bytes",
            ));
        }
        Ok(Self {
            fetch_max_bytes,
            replica_fetch_response_max_bytes,
            queued_max_requests: queued_max_requests as usize,
            queued_max_request_bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn defaults_and_validation_as_kafka() {
        let d = RequestLimits::from_props(&BTreeMap::new(), 104_857_600).unwrap();
        assert_eq!(
            d,
            RequestLimits {
                fetch_max_bytes: 57_671_680,
                replica_fetch_response_max_bytes: 10_485_760,
                queued_max_requests: 500,
                queued_max_request_bytes: -1,
            }
        );
        for (k, _, v) in BROKER_CONFIGS {
            let one = RequestLimits::from_props(&props(&[(k, v)]), 104_857_600).unwrap();
            assert_eq!(one, d, "{k}'s listed default is the parsed one");
        }
        for bad in [
            ("fetch.max.bytes", "1023"),
            ("replica.fetch.response.max.bytes", "-1"),
            ("queued.max.requests", "0"),
            ("queued.max.request.bytes", "1000"),
            ("fetch.max.bytes", "lots"),
        ] {
            assert!(
                RequestLimits::from_props(&props(&[bad]), 104_857_600).is_err(),
                "{bad:?}"
            );
        }
        let set = RequestLimits::from_props(
            &props(&[
                ("queued.max.request.bytes", "2000"),
                ("fetch.max.bytes", "1024"),
            ]),
            1000,
        )
        .unwrap();
        assert_eq!(
            (set.queued_max_request_bytes, set.fetch_max_bytes),
            (2000, 1024)
        );
        assert_eq!(
            RequestLimits::from_props(&props(&[("queued.max.request.bytes", "0")]), 1000)
                .unwrap()
                .queued_max_request_bytes,
            0,
            "0 or less: unbounded"
        );
    }
}

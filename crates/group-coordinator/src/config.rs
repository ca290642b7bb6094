//! The group coordinator's settings, under Kafka's broker property names and defaults.

use std::collections::BTreeMap;

use crate::topic::OffsetsTopicConfig;

/// `group.consumer.migration.policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MigrationPolicy {
    Disabled,
    Upgrade,
    Downgrade,
    Bidirectional,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupCoordinatorConfig {
    pub offsets_topic: OffsetsTopicConfig,
    /// `group.initial.rebalance.delay.ms` (3000).
    pub initial_rebalance_delay_ms: i64,
    /// `group.min.session.timeout.ms` (6000) / `group.max.session.timeout.ms` (1800000).
    pub min_session_timeout_ms: i32,
    pub max_session_timeout_ms: i32,
    /// `group.max.size` (classic groups; unbounded by default).
    pub classic_max_size: i32,
    /// `group.consumer.session.timeout.ms` (45000), with its min / max bounds.
    pub consumer_session_timeout_ms: i32,
    pub consumer_min_session_timeout_ms: i32,
    pub consumer_max_session_timeout_ms: i32,
    /// `group.consumer.heartbeat.interval.ms` (5000), with its min / max bounds.
    pub consumer_heartbeat_interval_ms: i32,
    pub consumer_min_heartbeat_interval_ms: i32,
    pub consumer_max_heartbeat_interval_ms: i32,
    /// `group.consumer.max.size`.
    pub consumer_max_size: i32,
    /// `group.consumer.assignors` (uniform, range); the first is the default.
    pub consumer_assignors: Vec<String>,
    /// `group.consumer.migration.policy` (bidirectional).
    pub migration_policy: MigrationPolicy,
    /// `offsets.retention.ms` (7 days).
    pub offsets_retention_ms: i64,
    /// `offsets.retention.check.interval.ms` (600000).
    pub offsets_retention_check_interval_ms: i64,
    /// `offset.metadata.max.bytes` (4096).
    pub offset_metadata_max_bytes: usize,
    /// `offsets.commit.timeout.ms` (5000).
    pub offsets_commit_timeout_ms: i64,
}

impl Default for GroupCoordinatorConfig {
    fn default() -> Self {
        Self {
            offsets_topic: OffsetsTopicConfig::default(),
            initial_rebalance_delay_ms: 3000,
            min_session_timeout_ms: 6000,
            max_session_timeout_ms: 1_800_000,
            classic_max_size: i32::MAX,
            consumer_session_timeout_ms: 45_000,
            consumer_min_session_timeout_ms: 45_000,
            consumer_max_session_timeout_ms: 60_000,
            consumer_heartbeat_interval_ms: 5000,
            consumer_min_heartbeat_interval_ms: 5000,
            consumer_max_heartbeat_interval_ms: 15_000,
            consumer_max_size: i32::MAX,
            consumer_assignors: vec!["uniform".into(), "range".into()],
            migration_policy: MigrationPolicy::Bidirectional,
            offsets_retention_ms: 7 * 24 * 3600 * 1000,
            offsets_retention_check_interval_ms: 600_000,
            offset_metadata_max_bytes: 4096,
            offsets_commit_timeout_ms: 5000,
        }
    }
}

impl GroupCoordinatorConfig {
    /// Reads the Kafka-named broker properties; a value that does not parse keeps the default.
    pub fn from_props(props: &BTreeMap<String, String>) -> Self {
        let mut c = Self {
            offsets_topic: OffsetsTopicConfig::from_props(props),
            ..Self::default()
        };
        let num = |k: &str| props.get(k).and_then(|v| v.trim().parse::<i64>().ok());
        let i32v = |k: &str, d: i32| {
            num(k)
                .map(|v| v.clamp(0, i32::MAX as i64) as i32)
                .unwrap_or(d)
        };
        c.initial_rebalance_delay_ms = num("group.initial.rebalance.delay.ms")
            .filter(|v| *v >= 0)
            .unwrap_or(c.initial_rebalance_delay_ms);
        c.min_session_timeout_ms = i32v("group.min.session.timeout.ms", c.min_session_timeout_ms);
        c.max_session_timeout_ms = i32v("group.max.session.timeout.ms", c.max_session_timeout_ms);
        c.classic_max_size = i32v("group.max.size", c.classic_max_size);
        c.consumer_session_timeout_ms = i32v(
            "group.consumer.session.timeout.ms",
            c.consumer_session_timeout_ms,
        );
        c.consumer_min_session_timeout_ms = i32v(
            "group.consumer.min.session.timeout.ms",
            c.consumer_min_session_timeout_ms,
        );
        c.consumer_max_session_timeout_ms = i32v(
            "group.consumer.max.session.timeout.ms",
            c.consumer_max_session_timeout_ms,
        );
        c.consumer_heartbeat_interval_ms = i32v(
            "group.consumer.heartbeat.interval.ms",
            c.consumer_heartbeat_interval_ms,
        );
        c.consumer_min_heartbeat_interval_ms = i32v(
            "group.consumer.min.heartbeat.interval.ms",
            c.consumer_min_heartbeat_interval_ms,
        );
        c.consumer_max_heartbeat_interval_ms = i32v(
            "group.consumer.max.heartbeat.interval.ms",
            c.consumer_max_heartbeat_interval_ms,
        );
        c.consumer_max_size = i32v("group.consumer.max.size", c.consumer_max_size);
        if let Some(v) = props.get("group.consumer.assignors") {
            let names: Vec<String> = v
                .split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect();
            if !names.is_empty() {
                c.consumer_assignors = names;
            }
        }
        if let Some(v) = props.get("group.consumer.migration.policy") {
            c.migration_policy = match v.trim().to_ascii_lowercase().as_str() {
                "disabled" => MigrationPolicy::Disabled,
                "upgrade" => MigrationPolicy::Upgrade,
                "downgrade" => MigrationPolicy::Downgrade,
                _ => MigrationPolicy::Bidirectional,
            };
        }
        // Kafka's property is `offsets.retention.minutes`; `offsets.retention.ms` wins if set.
        c.offsets_retention_ms = num("offsets.retention.ms")
            .or_else(|| num("offsets.retention.minutes").map(|m| m.saturating_mul(60_000)))
            .filter(|v| *v > 0)
            .unwrap_or(c.offsets_retention_ms);
        c.offsets_retention_check_interval_ms = num("offsets.retention.check.interval.ms")
            .filter(|v| *v > 0)
            .unwrap_or(c.offsets_retention_check_interval_ms);
        if let Some(v) = num("offset.metadata.max.bytes").filter(|v| *v >= 0) {
            c.offset_metadata_max_bytes = v as usize;
        }
        c.offsets_commit_timeout_ms = num("offsets.commit.timeout.ms")
            .filter(|v| *v > 0)
            .unwrap_or(c.offsets_commit_timeout_ms);
        c
    }
}

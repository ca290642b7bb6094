//! `__consumer_offsets`: its name, its settings, and which of its partitions holds a group.

use std::collections::BTreeMap;

/// Kafka's `Topic.GROUP_METADATA_TOPIC_NAME`.
pub const GROUP_METADATA_TOPIC_NAME: &str = "__consumer_offsets";

/// Java's `String.hashCode()` (shared with everything else that needs it).
pub use strom_protocol::java::string_hash as java_string_hash;

/// Kafka's `Utils.abs`: `Math.abs`, except that `Integer.MIN_VALUE` (whose absolute value does
/// not fit) maps to 0.
fn kafka_abs(n: i32) -> i32 {
    if n == i32::MIN {
        0
    } else {
        n.abs()
    }
}

/// The `__consumer_offsets` partition of `group_id`: `abs(groupId.hashCode()) % partitions`,
/// as Kafka's group coordinator computes it, so a group lives on the same partition number in
/// Strom as in Kafka. `partitions` must be positive.
pub fn partition_for(group_id: &str, partitions: i32) -> i32 {
    kafka_abs(java_string_hash(group_id)) % partitions.max(1)
}

/// The broker settings that shape `__consumer_offsets` when it is created on first use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetsTopicConfig {
    /// `offsets.topic.num.partitions` (50).
    pub num_partitions: i32,
    /// `offsets.topic.replication.factor` (3).
    pub replication_factor: i16,
    /// `offsets.topic.segment.bytes` (100 MiB).
    pub segment_bytes: i32,
}

impl Default for OffsetsTopicConfig {
    fn default() -> Self {
        Self {
            num_partitions: 50,
            replication_factor: 3,
            segment_bytes: 100 * 1024 * 1024,
        }
    }
}

impl OffsetsTopicConfig {
    /// Reads the Kafka-named broker properties, defaults for the rest (an unparsable or
    /// non-positive value keeps the default, as the broker's config validation would refuse it).
    pub fn from_props(props: &BTreeMap<String, String>) -> Self {
        let mut c = Self::default();
        let get = |k: &str| props.get(k).and_then(|v| v.trim().parse::<i64>().ok());
        if let Some(v) = get("offsets.topic.num.partitions").filter(|v| *v > 0) {
            c.num_partitions = v.min(i32::MAX as i64) as i32;
        }
        if let Some(v) = get("offsets.topic.replication.factor").filter(|v| *v > 0) {
            c.replication_factor = v.min(i16::MAX as i64) as i16;
        }
        if let Some(v) = get("offsets.topic.segment.bytes").filter(|v| *v > 0) {
            c.segment_bytes = v.min(i32::MAX as i64) as i32;
        }
        c
    }

    /// The replication factor to create the topic with given the brokers that can host
    /// replicas now: the configured one, or all of them when there are fewer (so a small
    /// cluster and a single node get a usable offsets topic rather than none).
    pub fn effective_replication_factor(&self, usable_brokers: usize) -> i16 {
        let usable = usable_brokers.clamp(1, i16::MAX as usize) as i16;
        self.replication_factor.min(usable)
    }

    /// The topic configs it is created with (Kafka's `groupMetadataTopicConfigs`): compacted,
    /// so that the latest record per key survives (the log cleaner comes with compaction;
    /// until then nothing of this topic is deleted by retention), the configured segment size,
    /// and batches kept as the coordinator wrote them.
    pub fn topic_configs(&self) -> Vec<(String, String)> {
        vec![
            ("cleanup.policy".into(), "compact".into()),
            ("compression.type".into(), "producer".into()),
            ("segment.bytes".into(), self.segment_bytes.to_string()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values printed by Java 21 with kafka-clients 4.4 (`s.hashCode()`,
    /// `Utils.abs(s.hashCode()) % 50`).
    #[test]
    fn group_partitions_are_kafkas() {
        let cases = [
            ("", 0, 0),
            ("group-1", 293427299, 49),
            ("my-group", -1906497762, 12),
            ("Ω-ünïcödé", -859885359, 9),
            ("😀emoji", -1233692477, 27),
            // hashCode() == Integer.MIN_VALUE: Utils.abs gives 0, not a negative partition.
            ("polygenelubricants", i32::MIN, 0),
            ("console-consumer-12345", 158455506, 6),
            ("\u{0}x", 120, 20),
        ];
        for (group, hash, partition) in cases {
            assert_eq!(java_string_hash(group), hash, "{group:?}");
            assert_eq!(partition_for(group, 50), partition, "{group:?}");
        }
    }

    #[test]
    fn replication_factor_follows_the_brokers_available() {
        let c = OffsetsTopicConfig::default();
        assert_eq!(c.effective_replication_factor(1), 1);
        assert_eq!(c.effective_replication_factor(2), 2);
        assert_eq!(c.effective_replication_factor(5), 3);
        assert_eq!(c.effective_replication_factor(0), 1);
    }

    #[test]
    fn settings_from_kafka_properties() {
        let props: BTreeMap<String, String> = [
            ("offsets.topic.num.partitions", "12"),
            ("offsets.topic.replication.factor", "1"),
            ("offsets.topic.segment.bytes", "nonsense"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let c = OffsetsTopicConfig::from_props(&props);
        assert_eq!((c.num_partitions, c.replication_factor), (12, 1));
        assert_eq!(c.segment_bytes, OffsetsTopicConfig::default().segment_bytes);
        assert!(c
            .topic_configs()
            .contains(&("cleanup.policy".into(), "compact".into())));
    }
}

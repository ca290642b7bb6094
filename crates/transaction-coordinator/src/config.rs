//! The transaction coordinator's settings, under Kafka's names and with Kafka's defaults
//! (`TransactionLogConfig`, `TransactionStateManagerConfig`).

use std::collections::BTreeMap;

use crate::state::TransactionVersion;

/// `__transaction_state`.
pub const TRANSACTION_STATE_TOPIC_NAME: &str = "__transaction_state";

#[derive(Debug, Clone)]
pub struct TransactionCoordinatorConfig {
    /// `transaction.state.log.num.partitions`.
    pub transaction_state_log_num_partitions: i32,
    /// `transaction.state.log.replication.factor`.
    pub transaction_state_log_replication_factor: i16,
    /// `transaction.state.log.min.isr`.
    pub transaction_state_log_min_isr: i32,
    /// `transaction.state.log.segment.bytes`.
    pub transaction_state_log_segment_bytes: i32,
    /// `transaction.max.timeout.ms`: the longest `transaction.timeout.ms` a producer may ask.
    pub transaction_max_timeout_ms: i32,
    /// `transactional.id.expiration.ms`: an id idle this long (and not in a transaction) is
    /// removed.
    pub transactional_id_expiration_ms: i64,
    /// `transaction.abort.timed.out.transaction.cleanup.interval.ms`.
    pub abort_timed_out_transactions_interval_ms: i64,
    /// `transaction.remove.expired.transaction.cleanup.interval.ms`.
    pub remove_expired_transactional_ids_interval_ms: i64,
    /// `offsets.topic.num.partitions`: AddOffsetsToTxn adds the group's offsets partition.
    pub offsets_topic_num_partitions: i32,
    /// The cluster's `transaction.version` feature level: the value version written, and the
    /// protocol the coordinator's own aborts (timeouts, fencing) follow.
    pub transaction_version_level: TransactionVersion,
    /// How long the marker sender waits before retrying a partition whose marker failed
    /// with a retriable error (Kafka retries on its next send-thread round).
    pub marker_retry_backoff_ms: u64,
}

impl Default for TransactionCoordinatorConfig {
    fn default() -> Self {
        Self {
            transaction_state_log_num_partitions: 50,
            transaction_state_log_replication_factor: 3,
            transaction_state_log_min_isr: 2,
            transaction_state_log_segment_bytes: 100 * 1024 * 1024,
            transaction_max_timeout_ms: 900_000,
            transactional_id_expiration_ms: 7 * 24 * 3600 * 1000,
            abort_timed_out_transactions_interval_ms: 10_000,
            remove_expired_transactional_ids_interval_ms: 3_600_000,
            offsets_topic_num_partitions: 50,
            transaction_version_level: TransactionVersion::TV_2,
            marker_retry_backoff_ms: 100,
        }
    }
}

impl TransactionCoordinatorConfig {
    /// Reads the Kafka-named broker properties, defaults for the rest (an unparsable or
    /// out-of-range value keeps the default, as the broker's config validation would refuse
    /// it). `transaction.version` stands for the cluster's finalized feature level.
    pub fn from_props(props: &BTreeMap<String, String>) -> Self {
        let mut c = Self::default();
        let num = |k: &str| props.get(k).and_then(|v| v.trim().parse::<i64>().ok());
        let pos32 = |k: &str, d: i32| {
            num(k)
                .filter(|v| *v > 0)
                .map_or(d, |v| v.min(i64::from(i32::MAX)) as i32)
        };
        let pos64 = |k: &str, d: i64| num(k).filter(|v| *v > 0).unwrap_or(d);
        c.transaction_state_log_num_partitions = pos32(
            "transaction.state.log.num.partitions",
            c.transaction_state_log_num_partitions,
        );
        c.transaction_state_log_replication_factor =
            num("transaction.state.log.replication.factor")
                .filter(|v| *v > 0)
                .map_or(c.transaction_state_log_replication_factor, |v| {
                    v.min(i64::from(i16::MAX)) as i16
                });
        c.transaction_state_log_min_isr = pos32(
            "transaction.state.log.min.isr",
            c.transaction_state_log_min_isr,
        );
        c.transaction_state_log_segment_bytes = pos32(
            "transaction.state.log.segment.bytes",
            c.transaction_state_log_segment_bytes,
        );
        c.transaction_max_timeout_ms =
            pos32("transaction.max.timeout.ms", c.transaction_max_timeout_ms);
        c.transactional_id_expiration_ms = pos64(
            "transactional.id.expiration.ms",
            c.transactional_id_expiration_ms,
        );
        c.abort_timed_out_transactions_interval_ms = pos64(
            "transaction.abort.timed.out.transaction.cleanup.interval.ms",
            c.abort_timed_out_transactions_interval_ms,
        );
        c.remove_expired_transactional_ids_interval_ms = pos64(
            "transaction.remove.expired.transaction.cleanup.interval.ms",
            c.remove_expired_transactional_ids_interval_ms,
        );
        c.offsets_topic_num_partitions = pos32(
            "offsets.topic.num.partitions",
            c.offsets_topic_num_partitions,
        );
        if let Some(v) = num("transaction.version").filter(|v| (0..=2).contains(v)) {
            c.transaction_version_level = TransactionVersion(v as i16);
        }
        c
    }

    /// The replication factor `__transaction_state` is created with given the brokers that
    /// can host a replica now: the configured one, or all of them when there are fewer.
    pub fn effective_replication_factor(&self, usable_brokers: usize) -> i16 {
        let usable = usable_brokers.clamp(1, i16::MAX as usize) as i16;
        self.transaction_state_log_replication_factor.min(usable)
    }

    /// The topic configs it is created with (Kafka's `transactionTopicConfigs`): compacted,
    /// `uncompressed` as Kafka (true without recompression: only the coordinator writes there,
    /// always uncompressed), no unclean election, the configured segment size, and
    /// `transaction.state.log.min.isr` as far as the replication factor allows (a single node
    /// gets 1, so its writes with acks=all can succeed).
    pub fn topic_configs(&self, replication_factor: i16) -> Vec<(String, String)> {
        let min_isr = self
            .transaction_state_log_min_isr
            .min(i32::from(replication_factor))
            .max(1);
        vec![
            ("cleanup.policy".into(), "compact".into()),
            ("compression.type".into(), "uncompressed".into()),
            ("unclean.leader.election.enable".into(), "false".into()),
            ("min.insync.replicas".into(), min_isr.to_string()),
            (
                "segment.bytes".into(),
                self.transaction_state_log_segment_bytes.to_string(),
            ),
        ]
    }

    /// Kafka's `validateTransactionTimeoutMs`.
    pub fn validate_transaction_timeout_ms(&self, txn_timeout_ms: i32) -> bool {
        txn_timeout_ms > 0 && txn_timeout_ms <= self.transaction_max_timeout_ms
    }
}

//! The transaction coordinator's settings, under Kafka's names and with Kafka's defaults
//! (`TransactionLogConfig`, `TransactionStateManagerConfig`).

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
    /// Kafka's `validateTransactionTimeoutMs`.
    pub fn validate_transaction_timeout_ms(&self, txn_timeout_ms: i32) -> bool {
        txn_timeout_ms > 0 && txn_timeout_ms <= self.transaction_max_timeout_ms
    }
}

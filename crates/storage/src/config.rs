//! Per-log settings, named and defaulted as Kafka's topic configs.

pub use crate::log_validator::TargetCompression;

/// Kafka's `LogConfig.DEFAULT_MAX_DECOMPRESSED_MESSAGE_BYTES` (the largest array a JVM makes).
pub const MAX_DECOMPRESSED_MESSAGE_BYTES: i32 = 2_147_483_639;

/// Which timestamp a batch carries once it is in the log (`message.timestamp.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TimestampType {
    #[default]
    CreateTime,
    LogAppendTime,
}

/// The topic-level settings the log itself acts on. `Default` gives Kafka's defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct LogConfig {
    /// `segment.bytes`
    pub segment_bytes: u64,
    /// `segment.ms`
    pub segment_ms: i64,
    /// `cleanup.policy` has `delete`: retention by time and size applies.
    pub delete: bool,
    /// `cleanup.policy` has `compact`: the log cleaner keeps the latest record per key.
    pub compact: bool,
    /// `min.cleanable.dirty.ratio`: the dirty share of the log at which it is cleaned.
    pub min_cleanable_dirty_ratio: f64,
    /// `min.compaction.lag.ms`: records younger than this are not cleaned.
    pub min_compaction_lag_ms: i64,
    /// `max.compaction.lag.ms`: a log with a record older than this is cleaned whatever its
    /// dirty ratio.
    pub max_compaction_lag_ms: i64,
    /// `delete.retention.ms`: how long tombstones and transaction markers stay after the
    /// cleaner first saw them.
    pub delete_retention_ms: i64,
    /// `retention.ms`; -1 = unlimited.
    pub retention_ms: i64,
    /// `retention.bytes`; -1 = unlimited.
    pub retention_bytes: i64,
    /// `index.interval.bytes`
    pub index_interval_bytes: u32,
    /// `segment.index.bytes`
    pub segment_index_bytes: u32,
    /// `max.message.bytes`: the largest batch accepted.
    pub max_message_bytes: u32,
    /// `flush.messages`
    pub flush_interval_messages: i64,
    /// `flush.ms` (broker: `log.flush.interval.ms`): a log is flushed once this long has passed
    /// since its last flush, checked every `log.flush.scheduler.interval.ms`.
    pub flush_ms: i64,
    /// `file.delete.delay.ms` (broker: `log.segment.delete.delay.ms`): how long a segment's
    /// files stay, renamed `.deleted`, after it left the log.
    pub file_delete_delay_ms: i64,
    /// `message.timestamp.type`
    pub message_timestamp_type: TimestampType,
    /// `message.timestamp.before.max.ms`: how far before the broker's clock a CreateTime
    /// record's timestamp may be.
    pub message_timestamp_before_max_ms: i64,
    /// `message.timestamp.after.max.ms`: how far after the broker's clock a CreateTime record's
    /// timestamp may be (Kafka 4: an hour).
    pub message_timestamp_after_max_ms: i64,
    /// `compression.type` with its `compression.<codec>.level`.
    pub compression: TargetCompression,
    /// `max.decompressed.message.bytes`: the largest record body a compressed batch may hold.
    pub max_decompressed_message_bytes: i32,
    /// The broker's `producer.id.expiration.ms`: idle producers' state is dropped after it.
    pub producer_id_expiration_ms: i64,
    /// The broker's `transaction.partition.verification.enable` (KIP-890 part 1): a client's
    /// transactional batch that opens a transaction in the partition must carry the guard of
    /// its verification with the transaction coordinator. Off unless the broker turns it on.
    pub transaction_verification_enabled: bool,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            segment_bytes: 1024 * 1024 * 1024,
            segment_ms: 7 * 24 * 60 * 60 * 1000,
            delete: true,
            compact: false,
            min_cleanable_dirty_ratio: 0.5,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
            delete_retention_ms: 86_400_000,
            retention_ms: 7 * 24 * 60 * 60 * 1000,
            retention_bytes: -1,
            index_interval_bytes: 4096,
            segment_index_bytes: 10 * 1024 * 1024,
            max_message_bytes: 1024 * 1024 + 12,
            flush_interval_messages: i64::MAX,
            flush_ms: i64::MAX,
            file_delete_delay_ms: 60_000,
            message_timestamp_type: TimestampType::CreateTime,
            message_timestamp_before_max_ms: i64::MAX,
            message_timestamp_after_max_ms: 3_600_000,
            compression: TargetCompression::Producer,
            max_decompressed_message_bytes: MAX_DECOMPRESSED_MESSAGE_BYTES,
            producer_id_expiration_ms: 86_400_000,
            transaction_verification_enabled: false,
        }
    }
}

impl LogConfig {
    /// Entries an offset index may hold before the segment must roll.
    pub(crate) fn max_offset_index_entries(&self) -> usize {
        (self.segment_index_bytes as usize / crate::index::OFFSET_ENTRY_SIZE).max(1)
    }

    /// Entries a time index may hold before the segment must roll.
    pub(crate) fn max_time_index_entries(&self) -> usize {
        (self.segment_index_bytes as usize / crate::index::TIME_ENTRY_SIZE).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_kafka() {
        let c = LogConfig::default();
        assert_eq!(c.segment_bytes, 1_073_741_824);
        assert_eq!(c.segment_ms, 604_800_000);
        assert_eq!(c.retention_ms, 604_800_000);
        assert_eq!(c.retention_bytes, -1);
        assert_eq!(c.index_interval_bytes, 4096);
        assert_eq!(c.segment_index_bytes, 10_485_760);
        assert_eq!(c.max_message_bytes, 1_048_588);
        assert_eq!(c.flush_interval_messages, i64::MAX);
        assert_eq!(c.flush_ms, i64::MAX);
        assert_eq!(c.file_delete_delay_ms, 60_000);
        assert_eq!(c.message_timestamp_type, TimestampType::CreateTime);
        assert_eq!(c.message_timestamp_before_max_ms, i64::MAX);
        assert_eq!(c.message_timestamp_after_max_ms, 3_600_000);
        assert_eq!(c.compression, TargetCompression::Producer);
        assert_eq!(c.max_decompressed_message_bytes, 2_147_483_639);
        assert_eq!(c.max_offset_index_entries(), 1_310_720);
    }
}

//! The partition log on disk, in Apache Kafka's own on-disk format, so Kafka's tools
//! (`kafka-dump-log`) read Strom's files and the other way round.
//!
//! This crate owns everything under one partition directory (`<topic>-<partition>/`):
//!
//! - [`log_validator::LogValidator`]: Kafka's checks of a leader append (record timestamps,
//!   keys on compacted topics, batch fields, record structure, the topic's codec).
//! - [`UnifiedLog`]: the ordered set of segments of one partition: append (leader: offsets
//!   assigned here; follower: offsets as given), read of whole raw batches, offset lookup by
//!   timestamp, rolling, retention, truncation, flushing and crash recovery.
//! - [`LogSegment`]: one `<base offset>.log` of concatenated RecordBatch v2 bytes with its sparse
//!   [`OffsetIndex`] (`.index`) and [`TimeIndex`] (`.timeindex`).
//! - [`checkpoint::OffsetCheckpointFile`]: Kafka's `*-checkpoint` files, which the broker uses
//!   to remember recovery points and log start offsets across restarts.
//! - [`LogReader`] ([`UnifiedLog::reader`]): reads without the log's append lock, from a
//!   snapshot of the segments and offsets the writer publishes only after the bytes are written.
//! - [`FileCache`]: the bounded set of open segment files all logs share. Segments open their
//!   files on use and the least recently used are closed over the cap, so thousands of
//!   partitions do not need three descriptors each. The broker sets the cap with the Strom
//!   property `strom.log.max.open.files` (Kafka has no such key: it keeps every file open);
//!   it never exceeds half the process's soft `RLIMIT_NOFILE` (read again on each cache miss),
//!   which is also the default. An open that still fails with EMFILE closes the older half
//!   of the cached files and is retried once.
//!
//! Segments that leave a log (retention, DeleteRecords, truncation) are renamed with Kafka's
//! `.deleted` suffix and removed `file.delete.delay.ms` later ([`UnifiedLog::delete_due_files`]);
//! `flush.ms` is honoured by [`UnifiedLog::flush_if_due`]. The broker's chores call both every
//! `log.flush.scheduler.interval.ms`.
//!
//! - [`producer_state::ProducerStateManager`]: idempotent producers and their transactions
//!   (open, completed, not yet below the HW), which give the first unstable offset; the log
//!   indexes aborted transactions in each segment's `.txnindex` ([`txn_index`]) for
//!   read_committed fetches, and rebuilds both after a crash or a truncation.
//!
//! - [`cleaner`]: Kafka's log cleaner for `cleanup.policy=compact` logs. [`UnifiedLog::cleanable`]
//!   says what may be cleaned (first dirty offset from the broker's cleaner-offset-checkpoint,
//!   first uncleanable offset from the LSO, the active segment and `min.compaction.lag.ms`, the
//!   dirty ratio, `max.compaction.lag.ms`); [`UnifiedLog::prepare_clean`] snapshots it under the
//!   partition's lock; [`CleanTask::run`] builds the key -> latest offset map ([`OffsetMap`],
//!   MD5 as Kafka's `SkimpyOffsetMap`) and rewrites segment groups into `.cleaned` files with no
//!   lock held, throttled by the shared [`Throttler`]; [`UnifiedLog::replace_segments`] swaps
//!   each group in (`.cleaned` -> `.swap` -> old segments `.deleted` -> final names), and
//!   [`UnifiedLog::open`] finishes or undoes a swap a crash interrupted. The cleaner is the one
//!   place records are decoded and re-encoded (and recompressed with their batch's codec);
//!   surviving records keep their offsets, and batches nothing was removed from are copied
//!   byte for byte.
//!
//! It does not own the set of partitions (the broker's log manager does), the high watermark
//! (the broker's partition tells the log where it is) or replication. Batches are never decoded
//! into records on the append or read path: a leader append's [`log_validator::LogValidator`]
//! walks the records' varints where they lie (compressed ones through a streaming decoder) and
//! only the 61-byte header is patched (via `strom_protocol::batch`); a batch is re-encoded only
//! when the topic's `compression.type` asks for another codec. Reads return stored bytes.

pub mod checkpoint;
pub mod cleaner;
pub mod config;
pub mod file_cache;
pub mod file_records;
pub mod index;
pub mod leader_epoch;
mod log;
pub mod log_validator;
#[cfg(test)]
mod log_validator_tests;
pub mod producer_state;
mod reader;
pub mod segment;
pub mod slow_io;
pub mod txn_index;
pub mod verification;

use std::path::PathBuf;

use strom_protocol::kafka::messages::ApiKey;
use strom_protocol::ErrorCode;
use thiserror::Error;

pub use cleaner::{CleanTask, CleanedGroup, CleanerStats, LogToClean, OffsetMap, Throttler};
pub use config::{LogConfig, TimestampType};
pub use file_cache::FileCache;
pub use file_records::{FileFetchDataInfo, FileRecords, FileSlice};
pub use index::{OffsetIndex, OffsetPosition, TimeIndex, TimestampOffset};
pub use log::{remove_deleted_files, UnifiedLog};
pub use reader::LogReader;
pub use segment::LogSegment;

/// Present in a log directory when the broker shut down cleanly (Kafka's marker name).
pub const CLEAN_SHUTDOWN_FILE: &str = ".kafka_cleanshutdown";

/// Appended to a segment's file names when it leaves the log; removed after
/// `file.delete.delay.ms` (Kafka's `LogFileUtils.DELETED_FILE_SUFFIX`).
pub const DELETED_FILE_SUFFIX: &str = ".deleted";

#[derive(Debug, Error)]
pub enum StorageError {
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// CRC mismatch or a batch whose structure does not parse.
    #[error("corrupt record: {0}")]
    CorruptRecord(String),
    #[error("record batch of {size} bytes exceeds the maximum of {max}")]
    RecordTooLarge { size: usize, max: usize },
    /// A well-formed batch the log refuses (wrong magic, control batch from a client, ...).
    #[error("invalid record: {0}")]
    InvalidRecord(String),
    /// Records of a client batch refused one by one (Kafka's `RecordValidationException` with
    /// INVALID_RECORD): `message` is the produce response's error message as Kafka words it and
    /// `errors` its `record_errors`.
    #[error("{message}")]
    RecordErrors {
        message: String,
        errors: Vec<log_validator::RecordError>,
    },
    /// Records of a client batch refused for their timestamps (and maybe more): Kafka's
    /// `RecordValidationException` with INVALID_TIMESTAMP, every record error listed.
    #[error("One or more records have been rejected due to invalid timestamp")]
    TimestampErrors {
        errors: Vec<log_validator::RecordError>,
    },
    /// A batch Kafka's validation fails outside its own error types (a codec that cannot
    /// decompress the records, a malformed record length): UNKNOWN_SERVER_ERROR, as Kafka
    /// answers its `KafkaException` / `IllegalArgumentException` there.
    #[error("{0}")]
    RecordStream(String),
    #[error("offset {requested} is out of range [{log_start}, {log_end}]")]
    OffsetOutOfRange {
        requested: i64,
        log_start: i64,
        log_end: i64,
    },
    /// A follower append whose first offset is below the log end offset.
    #[error("unexpected append offset {first_offset}: log end offset is {log_end}")]
    UnexpectedAppendOffset { first_offset: i64, log_end: i64 },
    #[error("corrupt checkpoint file {path}: {reason}")]
    CorruptCheckpoint { path: PathBuf, reason: String },
    /// A client batch whose sequence does not follow the producer's last one.
    #[error("{0}")]
    OutOfOrderSequence(String),
    /// A client batch from a fenced (older) producer epoch.
    #[error("{0}")]
    InvalidProducerEpoch(String),
    /// A non-transactional batch while the producer's transaction is open.
    #[error("{0}")]
    InvalidTxnState(String),
    /// An end-transaction marker from an older transaction coordinator epoch.
    #[error("{0}")]
    TransactionCoordinatorFenced(String),
    /// Records planned as file ranges ([`FileRecords`]) overlapped a truncation of their log
    /// before they were read: the bytes may not be the batches planned (Kafka's
    /// "FileRecords has been truncated during write"). The reader asks again.
    #[error("the log was truncated while its records were being read")]
    TruncatedDuringRead,
}

impl StorageError {
    /// The Kafka error code a produce/fetch response should carry for this error.
    pub fn error_code(&self) -> ErrorCode {
        match self {
            Self::Io(_) | Self::CorruptCheckpoint { .. } => ErrorCode::KafkaStorageError,
            Self::CorruptRecord(_) => ErrorCode::CorruptMessage,
            Self::RecordTooLarge { .. } => ErrorCode::MessageTooLarge,
            Self::InvalidRecord(_) | Self::RecordErrors { .. } => ErrorCode::InvalidRecord,
            Self::TimestampErrors { .. } => ErrorCode::InvalidTimestamp,
            Self::RecordStream(_) => ErrorCode::UnknownServerError,
            Self::OffsetOutOfRange { .. } => ErrorCode::OffsetOutOfRange,
            Self::UnexpectedAppendOffset { .. } | Self::TruncatedDuringRead => {
                ErrorCode::UnknownServerError
            }
            Self::OutOfOrderSequence(_) => ErrorCode::OutOfOrderSequenceNumber,
            Self::InvalidProducerEpoch(_) => ErrorCode::InvalidProducerEpoch,
            Self::InvalidTxnState(_) => ErrorCode::InvalidTxnState,
            Self::TransactionCoordinatorFenced(_) => ErrorCode::TransactionCoordinatorFenced,
        }
    }
}

impl StorageError {
    /// The code for this error in a response to `api` at `version`, where Kafka answers
    /// differently from [`Self::error_code`]:
    /// - Fetch v5 and older: clients of that age do not know KAFKA_STORAGE_ERROR and would fail
    ///   for good, so Kafka answers NOT_LEADER_OR_FOLLOWER, which makes them refresh metadata and
    ///   move to the new leader.
    /// - Requests a group or transaction coordinator answers after appending to its internal
    ///   topic: a failed log is NOT_COORDINATOR (the client finds the coordinator again) and an
    ///   append too large is UNKNOWN_SERVER_ERROR (the client's request was not too large).
    pub fn error_code_for(&self, api: ApiKey, version: i16) -> ErrorCode {
        storage_error_code_for(self.error_code(), api, version)
    }
}

/// [`StorageError::error_code_for`] for a code already mapped from a storage failure (e.g.
/// KAFKA_STORAGE_ERROR for a replica that is offline since an earlier failure).
pub fn storage_error_code_for(code: ErrorCode, api: ApiKey, version: i16) -> ErrorCode {
    match api {
        ApiKey::Fetch if version <= 5 && code == ErrorCode::KafkaStorageError => {
            ErrorCode::NotLeaderOrFollower
        }
        ApiKey::OffsetCommit
        | ApiKey::TxnOffsetCommit
        | ApiKey::JoinGroup
        | ApiKey::SyncGroup
        | ApiKey::InitProducerId
        | ApiKey::AddPartitionsToTxn
        | ApiKey::AddOffsetsToTxn
        | ApiKey::EndTxn => match code {
            ErrorCode::KafkaStorageError => ErrorCode::NotCoordinator,
            ErrorCode::MessageTooLarge => ErrorCode::UnknownServerError,
            other => other,
        },
        _ => code,
    }
}

/// Who is appending, as Kafka's `AppendOrigin`: client batches get the strictest checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppendOrigin {
    Client,
    Replication,
    Coordinator,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogAppendInfo {
    pub first_offset: i64,
    pub last_offset: i64,
    pub max_timestamp: i64,
    /// The time stamped into the batches, or -1 unless the log uses LogAppendTime.
    pub log_append_time: i64,
    pub num_messages: i64,
    pub valid_bytes: usize,
    pub log_start_offset: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchDataInfo {
    /// Whole batches, exactly as stored.
    pub records: bytes::Bytes,
    pub log_start_offset: i64,
    pub log_end_offset: i64,
    /// For read_committed reads: the aborted transactions overlapping the range read (Kafka's
    /// `FetchDataInfo.abortedTransactions`); `None` for other reads.
    pub aborted_transactions: Option<Vec<txn_index::AbortedTxn>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimestampAndOffset {
    pub timestamp: i64,
    pub offset: i64,
    pub leader_epoch: Option<i32>,
}

/// Splits a partition directory name `<topic>-<partition>` (the topic may itself contain `-`).
/// Directories being deleted or moved (`-delete`, `-future`, `-stray` suffixes) are not live
/// partitions and yield `None`.
pub fn parse_partition_dir_name(name: &str) -> Option<(String, i32)> {
    if name.ends_with("-delete") || name.ends_with("-future") || name.ends_with("-stray") {
        return None;
    }
    let (topic, partition) = name.rsplit_once('-')?;
    if topic.is_empty() || partition.is_empty() || !partition.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((topic.to_string(), partition.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_dir_names() {
        assert_eq!(
            parse_partition_dir_name("orders-0"),
            Some(("orders".into(), 0))
        );
        assert_eq!(
            parse_partition_dir_name("my-topic-12"),
            Some(("my-topic".into(), 12))
        );
        assert_eq!(
            parse_partition_dir_name("__consumer_offsets-49"),
            Some(("__consumer_offsets".into(), 49))
        );
        assert_eq!(parse_partition_dir_name("a.b-3"), Some(("a.b".into(), 3)));
        assert_eq!(parse_partition_dir_name("orders"), None);
        assert_eq!(parse_partition_dir_name("orders-"), None);
        assert_eq!(parse_partition_dir_name("-1"), None);
        assert_eq!(parse_partition_dir_name("orders-x"), None);
        assert_eq!(
            parse_partition_dir_name("orders--1"),
            Some(("orders-".into(), 1))
        );
        assert_eq!(parse_partition_dir_name("orders-99999999999"), None);
        assert_eq!(
            parse_partition_dir_name("orders-0.5f1c2d3e4b5a69788796a5b4c3d2e1f0-delete"),
            None
        );
        assert_eq!(
            parse_partition_dir_name("orders-0.5f1c2d3e4b5a69788796a5b4c3d2e1f0-future"),
            None
        );
    }

    #[test]
    fn error_codes_per_api() {
        let io = || StorageError::Io(std::io::Error::other("disk gone"));
        assert_eq!(io().error_code(), ErrorCode::KafkaStorageError);
        assert_eq!(
            io().error_code_for(ApiKey::Fetch, 5),
            ErrorCode::NotLeaderOrFollower
        );
        assert_eq!(
            io().error_code_for(ApiKey::Fetch, 6),
            ErrorCode::KafkaStorageError
        );
        for v in [3, 11] {
            assert_eq!(
                io().error_code_for(ApiKey::Produce, v),
                ErrorCode::KafkaStorageError
            );
        }
        assert_eq!(
            io().error_code_for(ApiKey::ListOffsets, 1),
            ErrorCode::KafkaStorageError
        );
        assert_eq!(
            io().error_code_for(ApiKey::DeleteRecords, 0),
            ErrorCode::KafkaStorageError
        );
        let out_of_range = StorageError::OffsetOutOfRange {
            requested: 9,
            log_start: 0,
            log_end: 1,
        };
        assert_eq!(
            out_of_range.error_code_for(ApiKey::Fetch, 4),
            ErrorCode::OffsetOutOfRange
        );
        assert_eq!(
            io().error_code_for(ApiKey::OffsetCommit, 8),
            ErrorCode::NotCoordinator
        );
        assert_eq!(
            StorageError::RecordTooLarge { size: 2, max: 1 }.error_code_for(ApiKey::EndTxn, 4),
            ErrorCode::UnknownServerError
        );
        assert_eq!(
            StorageError::RecordTooLarge { size: 2, max: 1 }.error_code_for(ApiKey::Produce, 9),
            ErrorCode::MessageTooLarge
        );
    }

    #[test]
    fn error_codes() {
        assert_eq!(
            StorageError::RecordTooLarge { size: 2, max: 1 }.error_code(),
            ErrorCode::MessageTooLarge
        );
        assert_eq!(
            StorageError::CorruptRecord(String::new()).error_code(),
            ErrorCode::CorruptMessage
        );
    }
}

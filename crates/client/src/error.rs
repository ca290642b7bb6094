//! The client's error type.

use strom_protocol::ErrorCode;

/// Everything that can go wrong talking to a Kafka-compatible cluster.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A socket error (connect, read or write).
    #[error("I/O error talking to {addr}: {source}")]
    Io {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    /// The connection closed while a request was outstanding, or was already closed.
    #[error("connection to {0} closed")]
    Disconnected(String),
    /// No response within the request timeout.
    #[error("request {api} to {addr} timed out after {timeout_ms} ms")]
    Timeout {
        api: &'static str,
        addr: String,
        timeout_ms: u64,
    },
    /// Encoding or decoding failed, or the peer sent something malformed.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The broker does not serve any version of this API that the client implements.
    #[error("the broker does not support a usable version of {0}")]
    UnsupportedVersion(&'static str),
    /// The broker answered with an error code.
    #[error("{}", kafka_message(.code, .message))]
    Kafka {
        code: ErrorCode,
        message: Option<String>,
    },
    /// None of the bootstrap servers (or brokers) could be reached.
    #[error("could not connect to any broker ({0})")]
    NoBrokerAvailable(String),
    /// A configuration value or argument is invalid.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A configuration Kafka's clients reject with a `ConfigException`; the text is Kafka's
    /// message, unchanged (e.g. "Must set acks to all in order to use the idempotent producer.
    /// Otherwise we cannot guarantee idempotence.").
    #[error("{0}")]
    ConfigException(String),
    /// The producer or consumer was closed.
    #[error("client closed")]
    Closed,
    /// A consumer-group failure (see [`crate::group::GroupError`]).
    #[error(transparent)]
    Group(#[from] crate::group::GroupError),
    /// A call not allowed in the producer's current transactional state, or on a
    /// non-transactional producer (Java's `IllegalStateException`).
    #[error("{0}")]
    IllegalState(String),
    /// A transactional call refused because an earlier error put the producer in an error
    /// state (Java's `KafkaException("Cannot execute transactional method because we are in an
    /// error state")`). `fatal`: the producer can only be closed; otherwise the application must
    /// abort the transaction and may go on.
    #[error("Cannot execute transactional method because we are in an error state: {source}")]
    TransactionError {
        fatal: bool,
        #[source]
        source: Box<Error>,
    },
    /// A batch failed because its transaction is being aborted (Java's `KafkaException("Failing
    /// batch since transaction was aborted")`).
    #[error("Failing batch since transaction was aborted")]
    TransactionAborted,
    /// A record did not complete within `delivery.timeout.ms`.
    #[error("delivery timed out after {0} ms")]
    DeliveryTimeout(u64),
}

fn kafka_message(code: &ErrorCode, message: &Option<String>) -> String {
    match message {
        Some(m) if !m.is_empty() => m.clone(),
        _ => format!("{} ({})", describe(*code), code),
    }
}

/// Kafka's human-readable text for the common error codes (the `Errors` enum's messages).
pub fn describe(code: ErrorCode) -> &'static str {
    match code {
        ErrorCode::UnknownTopicOrPartition => "This server does not host this topic-partition.",
        ErrorCode::LeaderNotAvailable => "There is no leader for this topic-partition as we are in the middle of a leadership election.",
        ErrorCode::NotLeaderOrFollower => "For requests intended only for the leader, this error indicates that the broker is not the current leader.",
        ErrorCode::RequestTimedOut => "The request timed out.",
        ErrorCode::TopicAlreadyExists => "Topic with this name already exists.",
        ErrorCode::InvalidPartitions => "Number of partitions is below 1.",
        ErrorCode::InvalidReplicationFactor => "Replication factor is below 1 or larger than the number of available brokers.",
        ErrorCode::InvalidConfig => "Configuration is invalid.",
        ErrorCode::InvalidTopicException => "The request attempted to perform an operation on an invalid topic.",
        ErrorCode::MessageTooLarge => "The request included a message larger than the max message size the server will accept.",
        ErrorCode::OffsetOutOfRange => "The requested offset is not within the range of offsets maintained by the server.",
        ErrorCode::UnsupportedVersion => "The version of API is not supported.",
        ErrorCode::InvalidRequest => "This most likely occurs because of a request being malformed by the client library or the message was sent to an incompatible broker.",
        ErrorCode::NotEnoughReplicas => "Messages are rejected since there are fewer in-sync replicas than required.",
        ErrorCode::CorruptMessage => "This message has failed its CRC checksum, exceeds the valid size, has a null key for a compacted topic, or is otherwise corrupt.",
        ErrorCode::UnknownServerError => "The server experienced an unexpected error when processing the request.",
        ErrorCode::TopicDeletionDisabled => "Topic deletion is disabled.",
        ErrorCode::PolicyViolation => "Request parameters do not satisfy the configured policy.",
        ErrorCode::OutOfOrderSequenceNumber => "The broker received an out of order sequence number.",
        ErrorCode::DuplicateSequenceNumber => "The broker received a duplicate sequence number.",
        ErrorCode::InvalidProducerEpoch => "Producer attempted to produce with an old epoch.",
        ErrorCode::ProducerFenced => "There is a newer producer with the same transactionalId which fences the current one.",
        ErrorCode::InvalidTxnState => "The producer attempted a transactional operation in an invalid state.",
        ErrorCode::ConcurrentTransactions => "The producer attempted to update a transaction while another concurrent operation on the same transaction was ongoing.",
        ErrorCode::TransactionalIdAuthorizationFailed => "Transactional Id authorization failed.",
        ErrorCode::InvalidProducerIdMapping => "The producer attempted to use a producer id which is not currently assigned to its transactional id.",
        ErrorCode::TransactionAbortable => "The server encountered an error with the transaction. The client can abort the transaction to continue using this transactional ID.",
        ErrorCode::UnknownProducerId => "This exception is raised by the broker if it could not locate the producer metadata associated with the producerId in question.",
        _ => "Kafka error",
    }
}

impl Error {
    /// An error from a non-zero Kafka error code and optional message.
    pub fn kafka(code: i16, message: Option<String>) -> Option<Error> {
        ErrorCode::try_from_code(code).map(|code| Error::Kafka { code, message })
    }

    /// The Kafka error code, if this is a broker-reported error.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Error::Kafka { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// True when retrying the same operation (after a metadata refresh and a backoff) may
    /// succeed: network failures, timeouts and Kafka's retriable error codes.
    pub fn is_retriable(&self) -> bool {
        match self {
            Error::Io { .. } | Error::Disconnected(_) | Error::Timeout { .. } => true,
            Error::NoBrokerAvailable(_) => true,
            Error::Kafka { code, .. } => code.is_retriable(),
            _ => false,
        }
    }

    /// True for an error that ends a transactional producer (Java's fatal errors: fenced,
    /// authorization, unsupported version, invalid transaction state...): it must be closed.
    pub fn is_fatal_transaction_error(&self) -> bool {
        match self {
            Error::TransactionError { fatal, .. } => *fatal,
            Error::UnsupportedVersion(_) => true,
            Error::Kafka { code, .. } => matches!(
                code,
                ErrorCode::ProducerFenced
                    | ErrorCode::InvalidProducerEpoch
                    | ErrorCode::TransactionalIdAuthorizationFailed
                    | ErrorCode::ClusterAuthorizationFailed
                    | ErrorCode::UnsupportedVersion
                    | ErrorCode::InvalidTxnState
                    | ErrorCode::UnsupportedForMessageFormat
            ),
            _ => false,
        }
    }

    /// True when the error means the client's view of partition leadership is stale.
    pub fn invalidates_metadata(&self) -> bool {
        matches!(
            self.code(),
            Some(
                ErrorCode::NotLeaderOrFollower
                    | ErrorCode::LeaderNotAvailable
                    | ErrorCode::UnknownTopicOrPartition
                    | ErrorCode::FencedLeaderEpoch
                    | ErrorCode::UnknownLeaderEpoch
                    | ErrorCode::KafkaStorageError
                    | ErrorCode::NotController
                    | ErrorCode::ReplicaNotAvailable
            )
        ) || matches!(self, Error::Io { .. } | Error::Disconnected(_))
    }
}

/// The client's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

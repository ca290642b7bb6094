//! Consumer-group membership for [`Consumer`](crate::Consumer), as kafka-clients'
//! `KafkaConsumer` does it:
//!
//! - [`coordinator`]: FindCoordinator and a dedicated connection to the group coordinator (its
//!   request timeout covers a JoinGroup held for the whole rebalance timeout), re-found after
//!   NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE or a broken connection.
//! - [`classic`]: the classic protocol (JoinGroup, leader-side assignment with the assignors of
//!   [`crate::assignor`], SyncGroup, a heartbeat task, LeaveGroup), eager and cooperative.
//! - [`consumer_group`]: the consumer protocol of KIP-848 (ConsumerGroupHeartbeat with the
//!   member epoch, assignments by topic id, revoke before acknowledging).
//! - [`commit`]: OffsetCommit and OffsetFetch for the group.
//! - [`protocol`]: the `ConsumerProtocolSubscription` / `ConsumerProtocolAssignment` codec.
//!
//! As in Java, everything that calls the [`RebalanceListener`] happens inside the
//! application's `poll` (or `close`); only heartbeats run in the background.

pub mod classic;
pub mod commit;
pub mod consumer_group;
pub mod coordinator;
mod member;
pub mod protocol;

use std::time::Duration;

use strom_protocol::ErrorCode;

pub use crate::assignor::TopicPartition;
pub(crate) use member::Group;

/// `group.protocol`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GroupProtocol {
    /// JoinGroup / SyncGroup / Heartbeat with client-side assignors.
    #[default]
    Classic,
    /// KIP-848's ConsumerGroupHeartbeat with server-side assignors.
    Consumer,
}

impl std::str::FromStr for GroupProtocol {
    type Err = crate::Error;

    /// Kafka accepts the names in any case.
    fn from_str(s: &str) -> crate::Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "classic" => Ok(GroupProtocol::Classic),
            "consumer" => Ok(GroupProtocol::Consumer),
            _ => Err(crate::Error::Config(format!(
                "invalid group.protocol {s:?}: expected classic or consumer"
            ))),
        }
    }
}

/// The group settings of a consumer, named after Kafka's.
#[derive(Debug, Clone)]
pub struct GroupConfig {
    /// `group.id`; `None` means no group (manual assignment only, no commits).
    pub group_id: Option<String>,
    /// `group.protocol`.
    pub group_protocol: GroupProtocol,
    /// `group.instance.id`: makes the member static.
    pub group_instance_id: Option<String>,
    /// `session.timeout.ms` (classic only; the consumer protocol's is the broker's).
    pub session_timeout: Duration,
    /// `heartbeat.interval.ms` (classic only; the consumer protocol's comes from the broker).
    pub heartbeat_interval: Duration,
    /// `max.poll.interval.ms`: the rebalance timeout, and how long the application may go
    /// without polling before the member leaves the group.
    pub max_poll_interval: Duration,
    /// `partition.assignment.strategy`, by protocol name, in preference order (classic only).
    pub partition_assignment_strategy: Vec<String>,
    /// `group.remote.assignor` (consumer protocol only): the broker-side assignor to use.
    pub group_remote_assignor: Option<String>,
    /// `enable.auto.commit` (effective only with a `group.id`).
    pub enable_auto_commit: bool,
    /// `auto.commit.interval.ms`.
    pub auto_commit_interval: Duration,
    /// `client.rack`.
    pub client_rack: Option<String>,
}

impl Default for GroupConfig {
    /// Kafka 4.4's defaults.
    fn default() -> Self {
        GroupConfig {
            group_id: None,
            group_protocol: GroupProtocol::Classic,
            group_instance_id: None,
            session_timeout: Duration::from_millis(45_000),
            heartbeat_interval: Duration::from_millis(3_000),
            max_poll_interval: Duration::from_millis(300_000),
            partition_assignment_strategy: vec!["range".into(), "cooperative-sticky".into()],
            group_remote_assignor: None,
            enable_auto_commit: true,
            auto_commit_interval: Duration::from_millis(5_000),
            client_rack: None,
        }
    }
}

/// Group failures that are not a single broker error code.
#[derive(Debug, thiserror::Error)]
pub enum GroupError {
    /// A group API was used without `group.id` (Java's `InvalidGroupIdException`).
    #[error(
        "the group management and offset commit APIs need a group.id in the consumer configuration"
    )]
    InvalidGroupId,
    /// `subscribe` after `assign` or the other way round (Java's `IllegalStateException`).
    #[error("subscribing to topics, to a pattern and assigning partitions manually are mutually exclusive")]
    MixedSubscription,
    /// The commit's generation is gone: the partitions may belong to another member now
    /// (Java's `CommitFailedException`).
    #[error("offset commit failed: {0}")]
    CommitFailed(String),
    /// The commit raced a rebalance; poll to finish the rebalance and retry (Java's
    /// `RebalanceInProgressException`).
    #[error("offset commit failed, the consumer is rebalancing: {0}")]
    RebalanceInProgress(String),
    /// `auto.offset.reset=none` and no committed offset (Java's `NoOffsetForPartitionException`).
    #[error("no committed offset and auto.offset.reset is none for partitions: {0}")]
    NoOffsetForPartition(String),
    /// A fatal error from the coordinator: the member cannot continue (fenced static member,
    /// inconsistent protocol, unsupported assignor, authorization...).
    #[error("fatal group error {code:?}: {message}")]
    Fatal { code: ErrorCode, message: String },
    /// Bad ConsumerProtocol bytes from the coordinator or another member.
    #[error("invalid consumer protocol data: {0}")]
    Protocol(String),
    /// An assignor failed or the group chose one this member does not have.
    #[error("assignment failed: {0}")]
    Assignment(String),
}

/// Java's `ConsumerRebalanceListener`. Called from within `poll` (and `close`), in Java's
/// order: revocation before the rebalance (eager: everything, even when empty; cooperative and
/// the consumer protocol: only what moves, only when non-empty), assignment after it (always
/// called once a rebalance completes, even with nothing new), and `lost` instead of `revoked`
/// when the member was fenced and its partitions may already belong to someone else.
pub trait RebalanceListener: Send + Sync {
    fn on_partitions_revoked(&mut self, _partitions: &[TopicPartition]) {}
    fn on_partitions_assigned(&mut self, _partitions: &[TopicPartition]) {}
    /// Java's default delegates to `on_partitions_revoked`.
    fn on_partitions_lost(&mut self, partitions: &[TopicPartition]) {
        self.on_partitions_revoked(partitions)
    }
}

/// What a group member subscribes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subscription {
    Topics(std::collections::BTreeSet<String>),
    /// A regular expression a topic name must match in full.
    Pattern(String),
}

/// The generation (classic) or member epoch (consumer protocol) a commit is made in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMetadata {
    pub group_id: String,
    /// Classic: the generation id; consumer protocol: the member epoch. -1 when not in a group.
    pub generation_id: i32,
    pub member_id: String,
    pub group_instance_id: Option<String>,
}

//! Client-side partition assignors for the classic group protocol (Kafka's
//! `ConsumerPartitionAssignor`): the group leader runs one of them over every member's
//! subscription in the JoinGroup response and sends the result in SyncGroup.
//!
//! Each assignor produces exactly what kafka-clients 4.4's class of the same name produces for
//! the same input (`range` = `RangeAssignor`, `roundrobin` = `RoundRobinAssignor`, `sticky` =
//! `StickyAssignor`, `cooperative-sticky` = `CooperativeStickyAssignor`), including the
//! rack-aware variants of KIP-881; the differential test runs Java's classes on the same inputs.
//!
//! The input mirrors Java's `GroupSubscription` + `Cluster`, the output its `GroupAssignment`.
//! Members are keyed by member id in a `BTreeMap`; where Java's result depends on an iteration
//! order (a `HashMap` of member ids, for instance), the assignor reproduces Java's order
//! explicitly rather than relying on this map's.

pub mod sticky;

use std::collections::BTreeMap;

use bytes::Bytes;

mod java_order;
pub mod range;
pub mod roundrobin;

/// The assignor whose protocol name (the `partition.assignment.strategy` short name sent in
/// JoinGroup) is `name`, or `None` when Strom has none of that name.
pub fn by_name(name: &str) -> Option<Box<dyn PartitionAssignor>> {
    match name {
        "range" => Some(Box::new(range::RangeAssignor)),
        "roundrobin" => Some(Box::new(roundrobin::RoundRobinAssignor)),
        "sticky" => Some(Box::new(sticky::StickyAssignor::new())),
        "cooperative-sticky" => Some(Box::new(sticky::CooperativeStickyAssignor::new())),
        _ => None,
    }
}

/// A topic partition (Java's `TopicPartition`), ordered by topic then partition.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

impl TopicPartition {
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        Self {
            topic: topic.into(),
            partition,
        }
    }
}

/// One member's subscription as the leader sees it (Java's `Subscription`, decoded from the
/// `ConsumerProtocolSubscription` metadata of the JoinGroup response).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Subscription {
    /// Subscribed topics, in the order the member sent them.
    pub topics: Vec<String>,
    /// The assignor's own data (the sticky assignor's previous assignment in old versions).
    pub user_data: Option<Bytes>,
    /// What the member owns now (v1+), in the order it sent them.
    pub owned_partitions: Vec<TopicPartition>,
    /// The generation the owned partitions are from (v2+; -1 when unknown).
    pub generation_id: i32,
    /// `client.rack` (v3+).
    pub rack_id: Option<String>,
    /// `group.instance.id` of a static member (Java's `groupInstanceId`).
    pub group_instance_id: Option<String>,
}

/// A partition of the cluster as the assignors see it: its id and its replicas' racks (the
/// rack-aware assignors of KIP-881 prefer a consumer in a rack holding a replica).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartitionInfo {
    pub partition: i32,
    /// Racks of the partition's replicas, in replica order; empty when the brokers have none.
    pub replica_racks: Vec<String>,
}

/// The cluster metadata an assignor needs (Java's `Cluster`): partitions per topic. A topic a
/// member subscribes to but that is absent here is skipped, as Java's assignors skip a topic
/// without metadata.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cluster {
    pub topics: BTreeMap<String, Vec<PartitionInfo>>,
}

impl Cluster {
    /// A cluster whose topics have `n` partitions each and no racks.
    pub fn from_counts<'a>(counts: impl IntoIterator<Item = (&'a str, i32)>) -> Self {
        Self {
            topics: counts
                .into_iter()
                .map(|(t, n)| {
                    (
                        t.to_string(),
                        (0..n)
                            .map(|partition| PartitionInfo {
                                partition,
                                replica_racks: Vec::new(),
                            })
                            .collect(),
                    )
                })
                .collect(),
        }
    }

    pub fn partition_count(&self, topic: &str) -> Option<usize> {
        self.topics.get(topic).map(Vec::len)
    }
}

/// The rebalance protocols an assignor supports (Java's `RebalanceProtocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RebalanceProtocol {
    Eager,
    Cooperative,
}

/// One member's assignment (Java's `Assignment`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Assignment {
    /// In the order Java's assignor lists them.
    pub partitions: Vec<TopicPartition>,
    pub user_data: Option<Bytes>,
}

/// Errors an assignor reports (Java throws `IllegalStateException` /
/// `IllegalArgumentException` for the same inputs).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AssignorError {
    #[error("invalid assignor input: {0}")]
    InvalidInput(String),
}

/// Each member's partitions as its [`Assignment`], for assignors that send no user data.
pub(crate) fn without_user_data<K: Ord>(
    partitions: BTreeMap<K, Vec<TopicPartition>>,
) -> BTreeMap<K, Assignment> {
    partitions
        .into_iter()
        .map(|(m, partitions)| {
            (
                m,
                Assignment {
                    partitions,
                    user_data: None,
                },
            )
        })
        .collect()
}

/// Kafka's `ConsumerPartitionAssignor`.
pub trait PartitionAssignor: Send + Sync {
    /// The protocol name sent in JoinGroup (`range`, `roundrobin`, `sticky`,
    /// `cooperative-sticky`).
    fn name(&self) -> &'static str;

    /// Eager first, as Java lists them; a cooperative assignor lists both.
    fn supported_protocols(&self) -> &'static [RebalanceProtocol] {
        &[RebalanceProtocol::Eager]
    }

    /// The assignor's user data for this member's subscription (Java's `subscriptionUserData`).
    fn subscription_user_data(&self, _topics: &[String]) -> Option<Bytes> {
        None
    }

    /// The assignment of every member (every member id of `subscriptions` appears in the
    /// result, possibly with no partitions).
    fn assign(
        &self,
        cluster: &Cluster,
        subscriptions: &BTreeMap<String, Subscription>,
    ) -> Result<BTreeMap<String, Assignment>, AssignorError>;
}

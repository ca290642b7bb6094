//! Server-side assignors of the KIP-848 consumer protocol, equal to Kafka 4.4's
//! `org.apache.kafka.coordinator.group.assignor` classes behind the `ConsumerGroupPartitionAssignor`
//! interface of `kafka-group-coordinator-api`.
//!
//! The shapes follow Kafka's: a [`GroupSpec`] (members with their subscribed topic ids, rack,
//! instance id and current assignment, plus the subscription type) and a
//! [`SubscribedTopicDescriber`] (partition counts and racks) go in, a [`GroupAssignment`]
//! (member -> topic id -> partitions) comes out.
//!
//! Ordering: Kafka's coordinator hands its assignors hash maps, so which member gets which
//! partition depends on Java's hash iteration order. Strom fixes the input order instead: members
//! are iterated in member-id order (a `BTreeMap`), a member's topics and partitions in ascending
//! order. Where a Kafka assignor builds its own `HashSet` and its iteration order decides the
//! result, the Rust port reproduces that order ([`java_order`]), so for the same input (in this
//! order) the output equals Java's. The differential test `tests/server_assignor_diff.rs` checks
//! that against the real classes.

mod java_order;
mod range;
mod uniform;
mod uniform_heterogeneous;

pub use range::RangeAssignor;
pub use uniform::UniformAssignor;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use uuid::Uuid;

/// Partitions per topic id: a member's current assignment or its new target assignment.
pub type MemberAssignment = BTreeMap<Uuid, BTreeSet<i32>>;

/// Why an assignor could not compute an assignment. Kafka throws `PartitionAssignorException`
/// for the first two; the others reject input Kafka would never build.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AssignorError {
    #[error("members are subscribed to topic {0} which doesn't exist in the topic metadata")]
    UnknownTopic(Uuid),
    #[error("partitions were left unassigned")]
    PartitionsLeftUnassigned,
    #[error("topic {topic_id} has an invalid partition count {count}")]
    InvalidPartitionCount { topic_id: Uuid, count: i32 },
    #[error(
        "member {member_id} is assigned the negative partition {partition} of topic {topic_id}"
    )]
    NegativePartition {
        member_id: String,
        topic_id: Uuid,
        partition: i32,
    },
    #[error("partition {partition} of topic {topic_id} is assigned to both {first} and {second}")]
    PartitionAssignedTwice {
        topic_id: Uuid,
        partition: i32,
        first: String,
        second: String,
    },
}

/// Kafka's `SubscriptionType`: whether every member subscribes to the same topics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubscriptionType {
    Homogeneous,
    Heterogeneous,
}

/// One member as the assignor sees it (Kafka's `MemberSubscriptionAndAssignmentImpl`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemberSubscriptionAndAssignment {
    pub rack_id: Option<String>,
    pub instance_id: Option<String>,
    pub subscribed_topic_ids: BTreeSet<Uuid>,
    /// The member's current target assignment, which the sticky assignors try to keep.
    pub assignment: MemberAssignment,
}

/// The group as the assignor sees it (Kafka's `GroupSpec` / `GroupSpecImpl`).
#[derive(Debug, Clone)]
pub struct GroupSpec {
    members: BTreeMap<String, MemberSubscriptionAndAssignment>,
    subscription_type: SubscriptionType,
    /// Who currently owns each partition (Kafka's inverted member assignment), for
    /// `is_partition_assigned`.
    owners: HashMap<(Uuid, i32), String>,
}

impl GroupSpec {
    /// Builds the spec; the subscription type is derived the way Kafka's group does it
    /// (homogeneous when every member subscribes to the same topics, also for an empty group).
    /// Rejects negative partitions and a partition in two members' assignments, which the
    /// coordinator never produces and Kafka's assignors would silently mishandle.
    pub fn new(
        members: BTreeMap<String, MemberSubscriptionAndAssignment>,
    ) -> Result<Self, AssignorError> {
        let mut subscriptions = members.values().map(|m| &m.subscribed_topic_ids);
        let subscription_type = match subscriptions.next() {
            Some(first) if subscriptions.any(|s| s != first) => SubscriptionType::Heterogeneous,
            _ => SubscriptionType::Homogeneous,
        };
        let mut owners = HashMap::new();
        for (member_id, member) in &members {
            for (&topic_id, partitions) in &member.assignment {
                for &partition in partitions {
                    if partition < 0 {
                        return Err(AssignorError::NegativePartition {
                            member_id: member_id.clone(),
                            topic_id,
                            partition,
                        });
                    }
                    if let Some(first) = owners.insert((topic_id, partition), member_id.clone()) {
                        return Err(AssignorError::PartitionAssignedTwice {
                            topic_id,
                            partition,
                            first,
                            second: member_id.clone(),
                        });
                    }
                }
            }
        }
        Ok(GroupSpec {
            members,
            subscription_type,
            owners,
        })
    }

    pub fn members(&self) -> &BTreeMap<String, MemberSubscriptionAndAssignment> {
        &self.members
    }

    pub fn subscription_type(&self) -> SubscriptionType {
        self.subscription_type
    }

    /// Whether some member currently owns the partition.
    pub fn is_partition_assigned(&self, topic_id: Uuid, partition: i32) -> bool {
        self.owners.contains_key(&(topic_id, partition))
    }
}

/// Partition counts and racks of the subscribed topics (Kafka's `SubscribedTopicDescriber`).
pub trait SubscribedTopicDescriber {
    /// The topic's partition count, `None` when the topic is not in the metadata.
    fn num_partitions(&self, topic_id: Uuid) -> Option<i32>;
    /// The racks of the partition's replicas (empty when unknown).
    fn racks_for_partition(&self, topic_id: Uuid, partition: i32) -> BTreeSet<String>;
}

/// One topic's metadata for [`TopicsMetadata`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopicMetadata {
    pub num_partitions: i32,
    pub partition_racks: BTreeMap<i32, BTreeSet<String>>,
}

/// A plain [`SubscribedTopicDescriber`] over a map of topic id -> metadata.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopicsMetadata(pub BTreeMap<Uuid, TopicMetadata>);

impl SubscribedTopicDescriber for TopicsMetadata {
    fn num_partitions(&self, topic_id: Uuid) -> Option<i32> {
        self.0.get(&topic_id).map(|t| t.num_partitions)
    }

    fn racks_for_partition(&self, topic_id: Uuid, partition: i32) -> BTreeSet<String> {
        self.0
            .get(&topic_id)
            .and_then(|t| t.partition_racks.get(&partition))
            .cloned()
            .unwrap_or_default()
    }
}

/// The assignor's answer: each member's new target assignment (Kafka's `GroupAssignment`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupAssignment {
    pub members: BTreeMap<String, MemberAssignment>,
}

/// A server-side assignor (Kafka's `ConsumerGroupPartitionAssignor`).
pub trait ConsumerGroupPartitionAssignor: Send + Sync {
    /// The name members ask for in `ConsumerGroupHeartbeat.ServerAssignor`.
    fn name(&self) -> &'static str;
    fn assign(
        &self,
        group: &GroupSpec,
        topics: &dyn SubscribedTopicDescriber,
    ) -> Result<GroupAssignment, AssignorError>;
}

/// The partition count of a subscribed topic, or the error Kafka raises for a missing topic.
fn partition_count(
    topics: &dyn SubscribedTopicDescriber,
    topic_id: Uuid,
) -> Result<i32, AssignorError> {
    match topics.num_partitions(topic_id) {
        None => Err(AssignorError::UnknownTopic(topic_id)),
        Some(count) if count < 0 => Err(AssignorError::InvalidPartitionCount { topic_id, count }),
        Some(count) => Ok(count),
    }
}

//! What the group coordinator knows of the cluster's topics (Kafka hands its coordinators
//! the `MetadataImage` through the metadata publisher): names, ids, partition counts and the
//! racks of each partition's replicas. The broker builds one from its metadata image and
//! gives it to the service whenever topics change.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use crate::assignor::SubscribedTopicDescriber;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopicImage {
    pub name: String,
    pub id: Uuid,
    pub num_partitions: i32,
    /// Racks of the replicas of each partition (absent or empty when brokers have no rack).
    pub partition_racks: BTreeMap<i32, BTreeSet<String>>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupMetadataImage {
    /// Topics by name.
    pub topics: BTreeMap<String, TopicImage>,
    /// Topic name by id.
    pub names_by_id: BTreeMap<Uuid, String>,
}

impl GroupMetadataImage {
    pub fn new(topics: impl IntoIterator<Item = TopicImage>) -> Self {
        let mut img = Self::default();
        for t in topics {
            img.names_by_id.insert(t.id, t.name.clone());
            img.topics.insert(t.name.clone(), t);
        }
        img
    }

    pub fn topic(&self, name: &str) -> Option<&TopicImage> {
        self.topics.get(name)
    }

    pub fn topic_by_id(&self, id: Uuid) -> Option<&TopicImage> {
        self.names_by_id.get(&id).and_then(|n| self.topics.get(n))
    }

    /// Whether `topic` exists with a partition `partition`.
    pub fn has_partition(&self, topic: &str, partition: i32) -> bool {
        self.topics
            .get(topic)
            .is_some_and(|t| partition >= 0 && partition < t.num_partitions)
    }
}

impl SubscribedTopicDescriber for GroupMetadataImage {
    fn num_partitions(&self, topic_id: Uuid) -> Option<i32> {
        self.topic_by_id(topic_id).map(|t| t.num_partitions)
    }

    fn racks_for_partition(&self, topic_id: Uuid, partition: i32) -> BTreeSet<String> {
        self.topic_by_id(topic_id)
            .and_then(|t| t.partition_racks.get(&partition))
            .cloned()
            .unwrap_or_default()
    }
}

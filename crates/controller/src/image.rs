//! The metadata image: cluster state as replayed from the metadata log. Immutable once built;
//! the broker holds an `Arc` to the current one and swaps it when records are replayed.

use std::collections::{BTreeMap, HashMap};

use uuid::Uuid;

use crate::record::MetadataRecord;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerInfo {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionRegistration {
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    pub leader: i32,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicImage {
    pub name: String,
    pub id: Uuid,
    pub partitions: BTreeMap<i32, PartitionRegistration>,
    /// Topic-level overrides only; defaults come from the broker config.
    pub configs: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default)]
pub struct MetadataImage {
    pub brokers: BTreeMap<i32, BrokerInfo>,
    pub topics: BTreeMap<String, TopicImage>,
    pub topic_names_by_id: HashMap<Uuid, String>,
    /// Number of records replayed; the image's position in the log.
    pub offset: u64,
    /// The first producer id not yet handed out in any block.
    pub next_producer_id: i64,
}

impl MetadataImage {
    /// Applies one record. The single place where metadata changes.
    pub fn replay(&mut self, record: &MetadataRecord) {
        self.offset += 1;
        match record {
            MetadataRecord::RegisterBroker {
                node_id,
                host,
                port,
                rack,
            } => {
                self.brokers.insert(
                    *node_id,
                    BrokerInfo {
                        node_id: *node_id,
                        host: host.clone(),
                        port: *port,
                        rack: rack.clone(),
                    },
                );
            }
            MetadataRecord::Topic { name, topic_id } => {
                self.topic_names_by_id.insert(*topic_id, name.clone());
                self.topics.insert(
                    name.clone(),
                    TopicImage {
                        name: name.clone(),
                        id: *topic_id,
                        partitions: BTreeMap::new(),
                        configs: BTreeMap::new(),
                    },
                );
            }
            MetadataRecord::Partition {
                topic_id,
                partition,
                replicas,
                isr,
                leader,
                leader_epoch,
                partition_epoch,
            } => {
                if let Some(topic) = self.topic_by_id_mut(topic_id) {
                    topic.partitions.insert(
                        *partition,
                        PartitionRegistration {
                            replicas: replicas.clone(),
                            isr: isr.clone(),
                            leader: *leader,
                            leader_epoch: *leader_epoch,
                            partition_epoch: *partition_epoch,
                        },
                    );
                }
            }
            MetadataRecord::TopicConfig { topic, name, value } => {
                if let Some(t) = self.topics.get_mut(topic) {
                    match value {
                        Some(v) => t.configs.insert(name.clone(), v.clone()),
                        None => t.configs.remove(name),
                    };
                }
            }
            MetadataRecord::ProducerIds {
                next_producer_id, ..
            } => {
                self.next_producer_id = self.next_producer_id.max(*next_producer_id);
            }
            MetadataRecord::RemoveTopic { topic_id } => {
                if let Some(name) = self.topic_names_by_id.remove(topic_id) {
                    self.topics.remove(&name);
                }
            }
        }
    }

    fn topic_by_id_mut(&mut self, id: &Uuid) -> Option<&mut TopicImage> {
        let name = self.topic_names_by_id.get(id)?;
        self.topics.get_mut(name)
    }

    pub fn topic(&self, name: &str) -> Option<&TopicImage> {
        self.topics.get(name)
    }

    pub fn topic_by_id(&self, id: &Uuid) -> Option<&TopicImage> {
        self.topic_names_by_id
            .get(id)
            .and_then(|n| self.topics.get(n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_builds_and_removes_topics() {
        let id = Uuid::new_v4();
        let mut img = MetadataImage::default();
        for r in [
            MetadataRecord::Topic {
                name: "t".into(),
                topic_id: id,
            },
            MetadataRecord::Partition {
                topic_id: id,
                partition: 0,
                replicas: vec![1],
                isr: vec![1],
                leader: 1,
                leader_epoch: 0,
                partition_epoch: 0,
            },
            MetadataRecord::TopicConfig {
                topic: "t".into(),
                name: "retention.ms".into(),
                value: Some("10".into()),
            },
        ] {
            img.replay(&r);
        }
        let t = img.topic("t").unwrap();
        assert_eq!(t.partitions.len(), 1);
        assert_eq!(t.configs["retention.ms"], "10");
        assert_eq!(img.topic_by_id(&id).unwrap().name, "t");
        img.replay(&MetadataRecord::TopicConfig {
            topic: "t".into(),
            name: "retention.ms".into(),
            value: None,
        });
        assert!(img.topic("t").unwrap().configs.is_empty());
        img.replay(&MetadataRecord::RemoveTopic { topic_id: id });
        assert!(img.topic("t").is_none());
        assert_eq!(img.offset, 5);
    }
}

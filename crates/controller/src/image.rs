//! The metadata image: cluster state as replayed from the metadata log. Immutable once built;
//! the broker holds an `Arc` to the current one and swaps it when records are replayed.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use uuid::Uuid;

use crate::record::MetadataRecord;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerInfo {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
    /// The registered incarnation of the broker process (nil: registered before incarnations
    /// were recorded).
    pub incarnation_id: Uuid,
    /// Kafka's broker epoch: the offset in the metadata log of the record that registered this
    /// incarnation. Heartbeats, AlterPartition and follower fetches carry it; one that differs
    /// is stale (STALE_BROKER_EPOCH, INELIGIBLE_REPLICA).
    pub epoch: i64,
    /// A fenced broker leads no partition and may not join an ISR. A new incarnation registers
    /// fenced and is unfenced by its first heartbeat (Kafka's rule); an amended registration
    /// keeps the flags. Changed by `BrokerRegistrationChange`.
    pub fenced: bool,
    /// The broker asked for a controlled shutdown: it stays a replica but no longer leads or
    /// joins an ISR.
    pub in_controlled_shutdown: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionRegistration {
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    pub leader: i32,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    /// An ongoing reassignment's replicas to add (not yet all in the ISR); empty if none.
    pub adding_replicas: Vec<i32>,
    /// An ongoing reassignment's replicas to remove once it completes; empty if none.
    pub removing_replicas: Vec<i32>,
}

impl PartitionRegistration {
    /// A reassignment is ongoing.
    pub fn is_reassigning(&self) -> bool {
        !self.adding_replicas.is_empty() || !self.removing_replicas.is_empty()
    }

    /// The reassignment's target: the replicas without those being removed.
    pub fn target_replicas(&self) -> Vec<i32> {
        self.replicas
            .iter()
            .copied()
            .filter(|r| !self.removing_replicas.contains(r))
            .collect()
    }
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
    /// The image's position in the metadata log: how many records precede its next record
    /// (Kafka's record offsets). Every record counts, on every node and in every replay, and a
    /// snapshot carries it, so the offset of a record (a broker epoch) never changes.
    pub offset: u64,
    /// The first producer id not yet handed out in any block.
    pub next_producer_id: i64,
    /// Per broker, its replicas (topic id, partition) in an offline log directory
    /// (`ReplicaDirectories` with `DIRECTORY_LOST`): they may not lead or join an ISR and
    /// Metadata lists them in `offline_replicas`.
    pub offline_replicas: BTreeMap<i32, BTreeSet<(Uuid, i32)>>,
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
                incarnation_id,
                broker_epoch,
                fenced,
                in_controlled_shutdown,
            } => {
                let (was_fenced, was_shutting_down) = self
                    .brokers
                    .get(node_id)
                    .map_or((false, false), |b| (b.fenced, b.in_controlled_shutdown));
                self.brokers.insert(
                    *node_id,
                    BrokerInfo {
                        node_id: *node_id,
                        host: host.clone(),
                        port: *port,
                        rack: rack.clone(),
                        incarnation_id: *incarnation_id,
                        // This record's offset: `offset` already counts it.
                        epoch: broker_epoch.unwrap_or(self.offset as i64 - 1),
                        fenced: fenced.unwrap_or(was_fenced),
                        in_controlled_shutdown: in_controlled_shutdown.unwrap_or(was_shutting_down),
                    },
                );
            }
            MetadataRecord::BrokerRegistrationChange {
                broker_id,
                fenced,
                in_controlled_shutdown,
            } => {
                if let Some(b) = self.brokers.get_mut(broker_id) {
                    if let Some(f) = fenced {
                        b.fenced = *f;
                    }
                    if let Some(c) = in_controlled_shutdown {
                        b.in_controlled_shutdown = *c;
                    }
                }
            }
            MetadataRecord::PartitionChange {
                topic_id,
                partition,
                leader,
                isr,
                replicas,
                adding_replicas,
                removing_replicas,
            } => {
                // PartitionRegistration.merge: the partition epoch moves on every change, the
                // leader epoch whenever the record sets a leader.
                if let Some(p) = self
                    .topic_by_id_mut(topic_id)
                    .and_then(|t| t.partitions.get_mut(partition))
                {
                    if let Some(r) = replicas {
                        p.replicas = r.clone();
                    }
                    if let Some(a) = adding_replicas {
                        p.adding_replicas = a.clone();
                    }
                    if let Some(r) = removing_replicas {
                        p.removing_replicas = r.clone();
                    }
                    if let Some(i) = isr {
                        p.isr = i.clone();
                    }
                    if let Some(l) = leader {
                        p.leader = *l;
                        p.leader_epoch += 1;
                    }
                    p.partition_epoch += 1;
                }
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
                adding_replicas,
                removing_replicas,
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
                            adding_replicas: adding_replicas.clone(),
                            removing_replicas: removing_replicas.clone(),
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
                for set in self.offline_replicas.values_mut() {
                    set.retain(|(t, _)| t != topic_id);
                }
                self.offline_replicas.retain(|_, set| !set.is_empty());
            }
            MetadataRecord::ReplicaDirectories {
                broker_id,
                directory,
                replicas,
            } => {
                let set = self.offline_replicas.entry(*broker_id).or_default();
                if *directory == crate::log_dirs::DIRECTORY_LOST {
                    set.extend(replicas.iter().copied());
                } else {
                    for r in replicas {
                        set.remove(r);
                    }
                }
                self.offline_replicas.retain(|_, set| !set.is_empty());
            }
        }
    }

    fn topic_by_id_mut(&mut self, id: &Uuid) -> Option<&mut TopicImage> {
        let name = self.topic_names_by_id.get(id)?;
        self.topics.get_mut(name)
    }

    /// Kafka's `ClusterControlManager.isActive`: registered, unfenced and not in controlled
    /// shutdown — the brokers that may lead a partition or join an ISR.
    pub fn broker_is_active(&self, id: i32) -> bool {
        self.brokers
            .get(&id)
            .is_some_and(|b| !b.fenced && !b.in_controlled_shutdown)
    }

    /// Kafka's `LeaderAcceptor`: `broker` is active and its replica of the partition is not in
    /// an offline log directory.
    pub fn replica_can_lead(&self, broker: i32, topic_id: &Uuid, partition: i32) -> bool {
        self.broker_is_active(broker) && !self.replica_is_offline(broker, topic_id, partition)
    }

    /// Whether `broker`'s replica of the partition is in an offline log directory.
    pub fn replica_is_offline(&self, broker: i32, topic_id: &Uuid, partition: i32) -> bool {
        self.offline_replicas
            .get(&broker)
            .is_some_and(|s| s.contains(&(*topic_id, partition)))
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
                adding_replicas: Vec::new(),
                removing_replicas: Vec::new(),
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

    fn register(img: &mut MetadataImage, id: i32, host: &str) {
        img.replay(&MetadataRecord::RegisterBroker {
            node_id: id,
            host: host.into(),
            port: 9092,
            rack: None,
            incarnation_id: Uuid::nil(),
            broker_epoch: None,
            fenced: None,
            in_controlled_shutdown: None,
        });
    }

    /// A new incarnation's epoch is its record's offset; an amendment names the epoch it keeps;
    /// the flags are the record's when it has them.
    #[test]
    fn broker_epoch_is_the_registration_records_offset() {
        let mut img = MetadataImage::default();
        img.replay(&MetadataRecord::Topic {
            name: "t".into(),
            topic_id: Uuid::new_v4(),
        });
        let reg = |epoch: Option<i64>, fenced: Option<bool>| MetadataRecord::RegisterBroker {
            node_id: 1,
            host: "h".into(),
            port: 9092,
            rack: None,
            incarnation_id: Uuid::from_u128(7),
            broker_epoch: epoch,
            fenced,
            in_controlled_shutdown: Some(false),
        };
        img.replay(&reg(None, Some(true)));
        assert_eq!(img.brokers[&1].epoch, 1, "the record at offset 1");
        assert!(img.brokers[&1].fenced);
        assert_eq!(img.brokers[&1].incarnation_id, Uuid::from_u128(7));
        img.replay(&reg(Some(1), None));
        assert_eq!(img.brokers[&1].epoch, 1, "amended, same epoch");
        assert!(img.brokers[&1].fenced, "flags kept");
        img.replay(&reg(None, Some(false)));
        assert_eq!(img.brokers[&1].epoch, 3);
        assert!(!img.brokers[&1].fenced);
    }

    #[test]
    fn broker_registration_change_fences_and_unfences() {
        let mut img = MetadataImage::default();
        register(&mut img, 1, "a");
        assert!(
            !img.brokers[&1].fenced,
            "first registration starts unfenced"
        );
        assert!(img.broker_is_active(1));
        assert!(
            !img.broker_is_active(2),
            "unregistered brokers are not active"
        );
        img.replay(&MetadataRecord::BrokerRegistrationChange {
            broker_id: 1,
            fenced: Some(true),
            in_controlled_shutdown: None,
        });
        assert!(img.brokers[&1].fenced);
        assert!(!img.broker_is_active(1));
        // Re-registering (new endpoint) keeps the flags.
        register(&mut img, 1, "b");
        assert!(img.brokers[&1].fenced);
        assert_eq!(img.brokers[&1].host, "b");
        img.replay(&MetadataRecord::BrokerRegistrationChange {
            broker_id: 1,
            fenced: Some(false),
            in_controlled_shutdown: Some(true),
        });
        assert!(!img.brokers[&1].fenced);
        assert!(img.brokers[&1].in_controlled_shutdown);
        assert!(
            !img.broker_is_active(1),
            "controlled shutdown is not active"
        );
        img.replay(&MetadataRecord::BrokerRegistrationChange {
            broker_id: 1,
            fenced: None,
            in_controlled_shutdown: Some(false),
        });
        assert!(img.broker_is_active(1));
        // Unknown broker: ignored.
        img.replay(&MetadataRecord::BrokerRegistrationChange {
            broker_id: 9,
            fenced: Some(true),
            in_controlled_shutdown: None,
        });
        assert!(!img.brokers.contains_key(&9));
    }

    #[test]
    fn partition_change_bumps_epochs_like_kafka_merge() {
        let id = Uuid::new_v4();
        let mut img = MetadataImage::default();
        img.replay(&MetadataRecord::Topic {
            name: "t".into(),
            topic_id: id,
        });
        img.replay(&MetadataRecord::Partition {
            topic_id: id,
            partition: 0,
            replicas: vec![1, 2, 3],
            isr: vec![1, 2, 3],
            leader: 1,
            leader_epoch: 4,
            partition_epoch: 7,
            adding_replicas: Vec::new(),
            removing_replicas: Vec::new(),
        });
        let part = |img: &MetadataImage| img.topic("t").unwrap().partitions[&0].clone();
        // ISR-only change (shrink or expand): partition epoch only (KAFKA-15021, MV >= 3.6).
        img.replay(&MetadataRecord::PartitionChange {
            topic_id: id,
            partition: 0,
            leader: None,
            isr: Some(vec![1, 2]),
            replicas: None,
            adding_replicas: None,
            removing_replicas: None,
        });
        let p = part(&img);
        assert_eq!((p.leader, p.leader_epoch, p.partition_epoch), (1, 4, 8));
        assert_eq!(p.isr, vec![1, 2]);
        // Leader change: both epochs.
        img.replay(&MetadataRecord::PartitionChange {
            topic_id: id,
            partition: 0,
            leader: Some(2),
            isr: Some(vec![2]),
            replicas: None,
            adding_replicas: None,
            removing_replicas: None,
        });
        let p = part(&img);
        assert_eq!((p.leader, p.leader_epoch, p.partition_epoch), (2, 5, 9));
        assert_eq!(p.isr, vec![2]);
        // Same leader set explicitly: still a leader-epoch bump.
        img.replay(&MetadataRecord::PartitionChange {
            topic_id: id,
            partition: 0,
            leader: Some(2),
            isr: None,
            replicas: Some(vec![2, 3]),
            adding_replicas: None,
            removing_replicas: None,
        });
        let p = part(&img);
        assert_eq!((p.leader, p.leader_epoch, p.partition_epoch), (2, 6, 10));
        assert_eq!(p.replicas, vec![2, 3]);
        // Leaderless.
        img.replay(&MetadataRecord::PartitionChange {
            topic_id: id,
            partition: 0,
            leader: Some(-1),
            isr: None,
            replicas: None,
            adding_replicas: None,
            removing_replicas: None,
        });
        let p = part(&img);
        assert_eq!((p.leader, p.leader_epoch, p.partition_epoch), (-1, 7, 11));
        // Unknown partition / topic: ignored, offset still advances.
        let before = img.offset;
        img.replay(&MetadataRecord::PartitionChange {
            topic_id: id,
            partition: 5,
            leader: Some(1),
            isr: None,
            replicas: None,
            adding_replicas: None,
            removing_replicas: None,
        });
        img.replay(&MetadataRecord::PartitionChange {
            topic_id: Uuid::new_v4(),
            partition: 0,
            leader: Some(1),
            isr: None,
            replicas: None,
            adding_replicas: None,
            removing_replicas: None,
        });
        assert_eq!(img.offset, before + 2);
        assert_eq!(part(&img), p);
    }

    #[test]
    fn new_records_round_trip_json_and_old_fields_default() {
        let recs = [
            MetadataRecord::BrokerRegistrationChange {
                broker_id: 3,
                fenced: Some(true),
                in_controlled_shutdown: None,
            },
            MetadataRecord::PartitionChange {
                topic_id: Uuid::nil(),
                partition: 2,
                leader: Some(-1),
                isr: Some(vec![1]),
                replicas: None,
                adding_replicas: None,
                removing_replicas: None,
            },
        ];
        for r in &recs {
            let j = serde_json::to_string(r).unwrap();
            assert_eq!(&serde_json::from_str::<MetadataRecord>(&j).unwrap(), r);
        }
        let sparse: MetadataRecord = serde_json::from_str(
            r#"{"type":"PartitionChange","topic_id":"00000000-0000-0000-0000-000000000000","partition":1}"#,
        )
        .unwrap();
        assert_eq!(
            sparse,
            MetadataRecord::PartitionChange {
                topic_id: Uuid::nil(),
                partition: 1,
                leader: None,
                isr: None,
                replicas: None,
                adding_replicas: None,
                removing_replicas: None,
            }
        );
    }
}

//! What one replayed batch of records changed (Kafka's `MetadataDelta`): built alongside the new
//! [`MetadataImage`] and handed with it to the broker's publishers, so that each touches only
//! what changed — the replica manager only the changed partitions, a coordinator only the
//! partitions of its internal topic this broker started or stopped leading
//! ([`MetadataDelta::local_changes`], Kafka's `TopicsDelta.localChanges`).

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use crate::image::{MetadataImage, PartitionRegistration};
use crate::record::MetadataRecord;

/// A topic removed by the delta, as it was before: its replicas are needed to know which
/// brokers must delete their logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemovedTopic {
    pub name: String,
    /// partition -> replicas, before the removal.
    pub replicas: BTreeMap<i32, Vec<i32>>,
}

/// The changes between two images. Topics are named by id (a name can be reused by a new
/// topic); everything is resolved against the new image by the reader.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetadataDelta {
    /// Topics created (present in the new image unless also removed later in the delta).
    pub created_topics: BTreeSet<Uuid>,
    /// Topics removed, with their replicas before. A topic created and removed within one delta
    /// is in neither set.
    pub removed_topics: BTreeMap<Uuid, RemovedTopic>,
    /// Partitions created or changed (leader, ISR, replicas, reassignment).
    pub changed_partitions: BTreeSet<(Uuid, i32)>,
    /// For each changed partition that existed before the delta: its replicas then (to find the
    /// brokers a reassignment removed it from).
    pub previous_replicas: BTreeMap<(Uuid, i32), Vec<i32>>,
    /// For each changed partition that existed before the delta: its leader then.
    pub previous_leaders: BTreeMap<(Uuid, i32), i32>,
    /// Topics whose configs changed.
    pub changed_configs: BTreeSet<Uuid>,
    /// Brokers registered, re-registered, fenced, unfenced or in/out of controlled shutdown.
    pub changed_brokers: BTreeSet<i32>,
    /// The producer-id block counter moved.
    pub producer_ids_changed: bool,
}

/// One partition of a [`LocalReplicaChanges`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalPartition {
    pub topic: String,
    pub topic_id: Uuid,
    pub partition: i32,
    pub registration: PartitionRegistration,
    /// The leader before the delta; `None` for a partition new to this broker.
    pub previous_leader: Option<i32>,
}

/// Kafka's `LocalReplicaChanges`: the changed partitions of one broker.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LocalReplicaChanges {
    /// Changed partitions this broker leads now.
    pub leaders: Vec<LocalPartition>,
    /// Changed partitions this broker is a follower of now.
    pub followers: Vec<LocalPartition>,
    /// `(topic, topic id, partition)` this broker hosted and no longer does: the topic was
    /// deleted or a reassignment moved the replica away.
    pub deletes: Vec<(String, Uuid, i32)>,
}

impl LocalPartition {
    /// This broker became leader with this delta (it did not lead before).
    pub fn became_leader(&self, node: i32) -> bool {
        self.registration.leader == node && self.previous_leader != Some(node)
    }

    /// This broker led the partition before this delta and does not any more.
    pub fn resigned(&self, node: i32) -> bool {
        self.registration.leader != node && self.previous_leader == Some(node)
    }
}

impl MetadataDelta {
    /// Notes what `record` changes; called with the image as it is just before the record is
    /// replayed onto it.
    pub fn record(&mut self, before: &MetadataImage, record: &MetadataRecord) {
        match record {
            MetadataRecord::RegisterBroker { node_id, .. } => {
                self.changed_brokers.insert(*node_id);
            }
            MetadataRecord::BrokerRegistrationChange { broker_id, .. } => {
                self.changed_brokers.insert(*broker_id);
            }
            MetadataRecord::Topic { topic_id, .. } => {
                self.created_topics.insert(*topic_id);
            }
            MetadataRecord::Partition {
                topic_id,
                partition,
                ..
            }
            | MetadataRecord::PartitionChange {
                topic_id,
                partition,
                ..
            } => self.partition_changed(before, *topic_id, *partition),
            MetadataRecord::TopicConfig { topic, .. } => {
                if let Some(t) = before.topic(topic) {
                    self.changed_configs.insert(t.id);
                }
            }
            MetadataRecord::RemoveTopic { topic_id } => {
                let Some(t) = before.topic_by_id(topic_id) else {
                    return;
                };
                if !self.created_topics.remove(topic_id) {
                    // Replicas as they were before the delta, where the delta changed them.
                    let replicas = t
                        .partitions
                        .iter()
                        .map(|(p, reg)| {
                            let before = self.previous_replicas.get(&(*topic_id, *p));
                            (*p, before.unwrap_or(&reg.replicas).clone())
                        })
                        .collect();
                    self.removed_topics.insert(
                        *topic_id,
                        RemovedTopic {
                            name: t.name.clone(),
                            replicas,
                        },
                    );
                }
                self.changed_partitions.retain(|(id, _)| id != topic_id);
                self.previous_replicas.retain(|(id, _), _| id != topic_id);
                self.previous_leaders.retain(|(id, _), _| id != topic_id);
                self.changed_configs.remove(topic_id);
            }
            MetadataRecord::ProducerIds { .. } => self.producer_ids_changed = true,
            // A replica going offline or back online changes who may lead it; the partitions
            // count as changed so their publishers look at them again.
            MetadataRecord::ReplicaDirectories { replicas, .. } => {
                for (topic_id, partition) in replicas {
                    self.partition_changed(before, *topic_id, *partition);
                }
            }
        }
    }

    fn partition_changed(&mut self, before: &MetadataImage, topic_id: Uuid, partition: i32) {
        let key = (topic_id, partition);
        if self.changed_partitions.insert(key) {
            if let Some(reg) = before
                .topic_by_id(&topic_id)
                .and_then(|t| t.partitions.get(&partition))
            {
                self.previous_replicas.insert(key, reg.replicas.clone());
                self.previous_leaders.insert(key, reg.leader);
            }
        }
    }

    /// The delta that turns `old` into `new` wholesale (the first image a publisher sees, or a
    /// snapshot replacing the image): every topic, partition and broker of `new` counts as
    /// changed, and the topics of `old` missing from `new` as removed.
    pub fn between(old: &MetadataImage, new: &MetadataImage) -> Self {
        let mut d = MetadataDelta::default();
        for t in old.topics.values() {
            if new.topic_by_id(&t.id).is_none() {
                d.removed_topics.insert(
                    t.id,
                    RemovedTopic {
                        name: t.name.clone(),
                        replicas: t
                            .partitions
                            .iter()
                            .map(|(p, r)| (*p, r.replicas.clone()))
                            .collect(),
                    },
                );
            }
        }
        for t in new.topics.values() {
            if old.topic_by_id(&t.id).is_none() {
                d.created_topics.insert(t.id);
            }
            d.changed_configs.insert(t.id);
            for p in t.partitions.keys() {
                d.partition_changed(old, t.id, *p);
            }
        }
        d.changed_brokers = old
            .brokers
            .keys()
            .chain(new.brokers.keys())
            .copied()
            .collect();
        d.producer_ids_changed = old.next_producer_id != new.next_producer_id;
        d
    }

    /// Appends `later` (the next delta in log order), so one publication can cover several
    /// batches.
    pub fn merge(&mut self, later: MetadataDelta) {
        for (id, removed) in later.removed_topics {
            if !self.created_topics.remove(&id) {
                // Replicas before this (earlier) delta, where it changed them.
                let mut removed = removed;
                for (p, r) in removed.replicas.iter_mut() {
                    if let Some(before) = self.previous_replicas.get(&(id, *p)) {
                        *r = before.clone();
                    }
                }
                self.removed_topics.insert(id, removed);
            }
            self.changed_partitions.retain(|(t, _)| *t != id);
            self.previous_replicas.retain(|(t, _), _| *t != id);
            self.previous_leaders.retain(|(t, _), _| *t != id);
            self.changed_configs.remove(&id);
        }
        self.created_topics.extend(later.created_topics);
        for key in later.changed_partitions {
            if self.changed_partitions.insert(key) {
                if let Some(r) = later.previous_replicas.get(&key) {
                    self.previous_replicas.insert(key, r.clone());
                }
                if let Some(l) = later.previous_leaders.get(&key) {
                    self.previous_leaders.insert(key, *l);
                }
            }
        }
        self.changed_configs.extend(later.changed_configs);
        self.changed_brokers.extend(later.changed_brokers);
        self.producer_ids_changed |= later.producer_ids_changed;
    }

    pub fn is_empty(&self) -> bool {
        *self == MetadataDelta::default()
    }

    /// The changes that concern broker `node` (Kafka's `TopicsDelta.localChanges`), resolved
    /// against `image`, the image after the delta.
    pub fn local_changes(&self, node: i32, image: &MetadataImage) -> LocalReplicaChanges {
        let mut out = LocalReplicaChanges::default();
        for (id, t) in &self.removed_topics {
            for (p, replicas) in &t.replicas {
                if replicas.contains(&node) {
                    out.deletes.push((t.name.clone(), *id, *p));
                }
            }
        }
        for key @ (id, p) in &self.changed_partitions {
            let Some(t) = image.topic_by_id(id) else {
                continue;
            };
            let Some(reg) = t.partitions.get(p) else {
                continue;
            };
            if reg.replicas.contains(&node) {
                let local = LocalPartition {
                    topic: t.name.clone(),
                    topic_id: *id,
                    partition: *p,
                    registration: reg.clone(),
                    previous_leader: self
                        .previous_replicas
                        .get(key)
                        .filter(|r| r.contains(&node))
                        .and(self.previous_leaders.get(key).copied()),
                };
                if reg.leader == node {
                    out.leaders.push(local);
                } else {
                    out.followers.push(local);
                }
            } else if self
                .previous_replicas
                .get(key)
                .is_some_and(|r| r.contains(&node))
            {
                out.deletes.push((t.name.clone(), *id, *p));
            }
        }
        out
    }
}

#[cfg(test)]
#[path = "delta_tests.rs"]
mod tests;

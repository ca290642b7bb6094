//! Topic and partition creation and deletion (Kafka's `ReplicationControlManager.createTopics`,
//! `deleteTopics`, `createPartitions`): each request is checked against the image and the
//! bounds of [`crate::limits`] under the operation lock, and its records are committed as one
//! batch.

use std::collections::{BTreeMap, HashSet};

use uuid::Uuid;

use super::{
    ControllerError, CreatePartitionsSpec, CreateTopicSpec, CreatedTopic, QuorumController,
};
use crate::image::MetadataImage;
use crate::limits::{self, RequestedTopic, MAX_RECORDS_PER_USER_OP};
use crate::placement::{new_partition_record, place_partitions, validate_assignment};
use crate::record::MetadataRecord;
use crate::{names, topic_config};

impl QuorumController {
    pub async fn create_topics(
        &self,
        specs: &[CreateTopicSpec],
        validate_only: bool,
    ) -> Vec<Result<CreatedTopic, ControllerError>> {
        let _op = self.op_lock.lock().await;
        if let Err(e) = self.check_active() {
            return specs.iter().map(|_| Err(e.clone())).collect();
        }
        // The whole request is refused before any topic is placed when its partitions add up
        // to more than one operation may create (Kafka checks this first, too).
        let requested = specs.iter().map(|s| RequestedTopic {
            name: &s.name,
            num_partitions: s.num_partitions,
            assignments: s.assignments.len(),
        });
        if let Err(e) = limits::check_create_topics(requested, self.defaults.num_partitions) {
            return specs.iter().map(|_| Err(e.clone())).collect();
        }
        let image = self.image();
        // A name given twice is refused each time, and created neither time.
        let duplicates = limits::duplicate_names(specs.iter().map(|s| s.name.as_str()));
        let mut records = Vec::new();
        let mut results = Vec::with_capacity(specs.len());
        // Names created earlier in this same request count as existing for collision checks.
        let mut pending: Vec<String> = Vec::new();
        for spec in specs {
            if duplicates.contains(spec.name.as_str()) {
                results.push(Err(ControllerError::InvalidRequest(
                    "Duplicate topic name.".into(),
                )));
                continue;
            }
            let r = self.plan_topic(&image, &pending, spec);
            match r {
                Ok((created, recs)) => {
                    // A validation builds the records too, so it meets the same bound.
                    records.extend(recs);
                    if records.len() > MAX_RECORDS_PER_USER_OP {
                        let e = limits::too_many_records();
                        return specs.iter().map(|_| Err(e.clone())).collect();
                    }
                    if !validate_only {
                        pending.push(spec.name.clone());
                    }
                    results.push(Ok(created));
                }
                Err(e) => results.push(Err(e)),
            }
        }
        if validate_only {
            return results;
        }
        if let Err(e) = self.commit(records).await {
            return results.into_iter().map(|r| r.and(Err(e.clone()))).collect();
        }
        results
    }

    fn plan_topic(
        &self,
        image: &MetadataImage,
        pending: &[String],
        spec: &CreateTopicSpec,
    ) -> Result<(CreatedTopic, Vec<MetadataRecord>), ControllerError> {
        let name = &spec.name;
        names::validate(name).map_err(ControllerError::InvalidTopic)?;
        // Only the metadata topic (Kafka's `ControllerApis.createTopics`): the group and
        // transaction topics are created through here on first use, and may be by an admin.
        if name == names::METADATA_TOPIC {
            return Err(ControllerError::InvalidRequest(format!(
                "Creation of internal topic {name} is prohibited."
            )));
        }
        if image.topics.contains_key(name) || pending.contains(name) {
            return Err(ControllerError::TopicAlreadyExists(format!(
                "Topic '{name}' already exists."
            )));
        }
        let unified = names::unify_collision_chars(name);
        if let Some(other) = image
            .topics
            .keys()
            .chain(pending.iter())
            .find(|t| names::unify_collision_chars(t) == unified)
        {
            return Err(ControllerError::InvalidTopic(format!(
                "Topic '{name}' collides with existing topic: {other}"
            )));
        }
        let mut configs = BTreeMap::new();
        for (k, v) in &spec.configs {
            let Some(v) = v else {
                return Err(ControllerError::InvalidConfig(format!(
                    "Null value not supported for topic configs: {k}"
                )));
            };
            topic_config::validate_for_topic(name, k, v).map_err(ControllerError::InvalidConfig)?;
            configs.insert(k.clone(), v.clone());
        }
        self.validate_topic_values(&configs)?;
        let assignment = if spec.assignments.is_empty() {
            let rf =
                match spec.replication_factor {
                    -1 => self.defaults.replication_factor,
                    n if n <= 0 => return Err(ControllerError::InvalidReplicationFactor(
                        "Replication factor must be larger than 0, or -1 to use the default value."
                            .into(),
                    )),
                    n => n,
                };
            let partitions = match spec.num_partitions {
                -1 => self.defaults.num_partitions,
                n if n <= 0 => {
                    return Err(ControllerError::InvalidPartitions(
                        "Number of partitions was set to an invalid non-positive value.".into(),
                    ))
                }
                n => n,
            };
            place_partitions(image, partitions, rf as usize, 0).map_err(|e| {
                ControllerError::InvalidReplicationFactor(format!(
                    "Unable to replicate the partition {rf} time(s): {e}"
                ))
            })?
        } else {
            if spec.num_partitions != -1 || spec.replication_factor != -1 {
                return Err(ControllerError::InvalidRequest(
                    "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used at the same time.".into(),
                ));
            }
            validate_assignment(image, &spec.assignments, 0, None)?
        };
        let topic_id = Uuid::new_v4();
        let mut records = vec![MetadataRecord::Topic {
            name: name.clone(),
            topic_id,
        }];
        for (k, v) in &configs {
            records.push(MetadataRecord::TopicConfig {
                topic: name.clone(),
                name: k.clone(),
                value: Some(v.clone()),
            });
        }
        for (p, replicas) in assignment.iter().enumerate() {
            records.push(partition_record(
                image,
                topic_id,
                p as i32,
                replicas.clone(),
            )?);
        }
        Ok((
            CreatedTopic {
                topic_id,
                num_partitions: assignment.len() as i32,
                replication_factor: assignment.first().map_or(0, |r| r.len() as i16),
                configs,
            },
            records,
        ))
    }

    /// Deletes topics named by name or id. Each result carries the resolved `(name, id)`.
    pub async fn delete_topics(
        &self,
        topics: &[(Option<String>, Option<Uuid>)],
    ) -> Vec<Result<(String, Uuid), ControllerError>> {
        let _op = self.op_lock.lock().await;
        if let Err(e) = self.check_active() {
            return topics.iter().map(|_| Err(e.clone())).collect();
        }
        let image = self.image();
        let mut records = Vec::new();
        let mut results = Vec::new();
        let mut seen = HashSet::new();
        for (name, id) in topics {
            let found = match (name, id) {
                (Some(n), _) => image
                    .topic(n)
                    .map(|t| (t.name.clone(), t.id))
                    .ok_or(ControllerError::UnknownTopicOrPartition),
                (None, Some(id)) => image
                    .topic_by_id(id)
                    .map(|t| (t.name.clone(), t.id))
                    .ok_or(ControllerError::UnknownTopicId),
                (None, None) => Err(ControllerError::InvalidRequest(
                    "Neither topic name nor id was given.".into(),
                )),
            };
            let r = found.and_then(|(n, id)| {
                if names::is_internal(&n) {
                    Err(ControllerError::InvalidRequest(format!(
                        "Deletion of internal topic {n} is prohibited."
                    )))
                } else if !seen.insert(id) {
                    Err(ControllerError::InvalidRequest(
                        "Duplicate topic name.".into(),
                    ))
                } else {
                    records.push(MetadataRecord::RemoveTopic { topic_id: id });
                    Ok((n, id))
                }
            });
            results.push(r);
        }
        if let Err(e) = self.commit(records).await {
            return results.into_iter().map(|r| r.and(Err(e.clone()))).collect();
        }
        results
    }

    /// CreatePartitions for one topic: grows `topic` to `count` partitions.
    pub async fn create_partitions(
        &self,
        topic: &str,
        count: i32,
        assignments: Option<Vec<Vec<i32>>>,
        validate_only: bool,
    ) -> Result<(), ControllerError> {
        let spec = CreatePartitionsSpec {
            name: topic.to_string(),
            count,
            assignments,
        };
        let mut r = self.create_partitions_batch(&[spec], validate_only).await;
        r.pop().expect("one result per topic")
    }

    /// CreatePartitions: grows each topic to its `count`, one result per topic in order. The
    /// request is one operation (Kafka's `createPartitions` commits its records atomically):
    /// the partitions it adds over all its topics are bounded, and a topic named twice is
    /// refused.
    pub async fn create_partitions_batch(
        &self,
        topics: &[CreatePartitionsSpec],
        validate_only: bool,
    ) -> Vec<Result<(), ControllerError>> {
        let _op = self.op_lock.lock().await;
        if let Err(e) = self.check_active() {
            return topics.iter().map(|_| Err(e.clone())).collect();
        }
        let image = self.image();
        let requested = topics.iter().map(|t| (t.name.as_str(), t.count));
        let current = |name: &str| image.topic(name).map(|t| t.partitions.len());
        if let Err(e) = limits::check_create_partitions(requested, current) {
            return topics.iter().map(|_| Err(e.clone())).collect();
        }
        let duplicates = limits::duplicate_names(topics.iter().map(|t| t.name.as_str()));
        let mut records = Vec::new();
        let mut results = Vec::with_capacity(topics.len());
        for t in topics {
            if duplicates.contains(t.name.as_str()) {
                results.push(Err(ControllerError::InvalidRequest(
                    "Duplicate topic name.".into(),
                )));
                continue;
            }
            match plan_partitions(&image, t) {
                Ok(recs) => {
                    records.extend(recs);
                    if records.len() > MAX_RECORDS_PER_USER_OP {
                        let e = limits::too_many_records();
                        return topics.iter().map(|_| Err(e.clone())).collect();
                    }
                    results.push(Ok(()));
                }
                Err(e) => results.push(Err(e)),
            }
        }
        if validate_only {
            return results;
        }
        if let Err(e) = self.commit(records).await {
            return results.into_iter().map(|r| r.and(Err(e.clone()))).collect();
        }
        results
    }
}

/// The records that grow one topic of a CreatePartitions request, checked against `image`.
/// The request's total was bounded before, so `count` adds at most
/// [`limits::MAX_PARTITIONS_PER_BATCH`] partitions here.
fn plan_partitions(
    image: &MetadataImage,
    spec: &CreatePartitionsSpec,
) -> Result<Vec<MetadataRecord>, ControllerError> {
    let (topic, count) = (spec.name.as_str(), spec.count);
    let t = image
        .topic(topic)
        .ok_or(ControllerError::UnknownTopicOrPartition)?;
    let current = t.partitions.len() as i32;
    if count < current {
        return Err(ControllerError::InvalidPartitions(format!(
            "The topic {topic} currently has {current} partition(s); {count} would not be an increase."
        )));
    }
    if count == current {
        return Err(ControllerError::InvalidPartitions(format!(
            "Topic already has {current} partition(s)."
        )));
    }
    let new = count - current;
    let rf = t.partitions.values().next().map_or(1, |p| p.replicas.len());
    let plan = match &spec.assignments {
        Some(a) => {
            if a.len() as i64 != new as i64 {
                return Err(ControllerError::InvalidReplicaAssignment(format!(
                    "Attempted to add {new} additional partition(s), but only {} assignment(s) were specified.",
                    a.len()
                )));
            }
            let indexed: Vec<(i32, Vec<i32>)> = a
                .iter()
                .enumerate()
                .map(|(i, r)| (current + i as i32, r.clone()))
                .collect();
            validate_assignment(image, &indexed, current, Some(rf))?
        }
        None => place_partitions(image, new, rf, current)
            .map_err(ControllerError::InvalidReplicationFactor)?,
    };
    plan.into_iter()
        .enumerate()
        .map(|(i, replicas)| partition_record(image, t.id, current + i as i32, replicas))
        .collect()
}

/// A new partition's record, led by its first live replica. Placement and validation only hand
/// out replica sets with one, so the error is a guard, answered as Kafka does for an ISR that
/// would be empty.
fn partition_record(
    image: &MetadataImage,
    topic_id: Uuid,
    partition: i32,
    replicas: Vec<i32>,
) -> Result<MetadataRecord, ControllerError> {
    let rf = replicas.len();
    new_partition_record(image, topic_id, partition, replicas).ok_or_else(|| {
        ControllerError::InvalidReplicationFactor(format!(
            "Unable to replicate the partition {rf} time(s): All brokers are currently fenced or in controlled shutdown."
        ))
    })
}

//! The offset APIs: OffsetCommit (v2-v9), OffsetFetch (v1-v9, batched groups from v8),
//! OffsetDelete, DeleteGroups.
//!
//! What Kafka's broker does before its coordinator sees these requests is done here too:
//! OffsetCommit and OffsetDelete answer UNKNOWN_TOPIC_OR_PARTITION for topics and partitions
//! the topics image does not have (and do not bother the coordinator if nothing is left of an
//! OffsetCommit), DeleteGroups drops repeated group ids, and OffsetFetch answers in the
//! one-group form of versions before 8. The shard operations are in
//! [`crate::offsets::ops`].

use std::collections::HashMap;
use std::future::Future;

use strom_coordinator_common::runtime::{CoordinatorError, WriteContext, WriteResult};
use strom_protocol::kafka::messages::delete_groups_response::DeletableGroupResult;
use strom_protocol::kafka::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use strom_protocol::kafka::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use strom_protocol::kafka::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use strom_protocol::kafka::messages::*;
use strom_protocol::kafka::protocol::StrBytes;
use strom_protocol::ErrorCode;

use super::{GroupCoordinatorService, GroupRequestContext};
use crate::metadata::GroupMetadataImage;
use crate::offsets::ops::{
    self, CommitPartition, CommitRequest, CommitTopic, FetchGroup, FetchTopic, FetchedTopic,
    PartitionResults,
};
use crate::shard::GroupCoordinatorShard;

pub(super) fn op_error(code: ErrorCode, what: &str) -> CoordinatorError {
    CoordinatorError::Operation {
        code,
        message: format!("{what}: {code}"),
    }
}

/// Answers per topic and partition, in the order Kafka's response builders produce them:
/// topics in the order they were first answered, partitions appended.
#[derive(Default)]
pub(super) struct PartitionAnswers {
    pub(super) topics: Vec<(String, Vec<(i32, i16)>)>,
    index: HashMap<String, usize>,
}

impl PartitionAnswers {
    pub(super) fn add(&mut self, topic: &str, partition: i32, code: i16) {
        let i = *self.index.entry(topic.to_string()).or_insert_with(|| {
            self.topics.push((topic.to_string(), Vec::new()));
            self.topics.len() - 1
        });
        self.topics[i].1.push((partition, code));
    }

    pub(super) fn merge(&mut self, results: PartitionResults) {
        for (topic, parts) in results {
            for (p, code) in parts {
                self.add(&topic, p, code);
            }
        }
    }
}

/// Splits `topics` into what the image has (returned) and answers
/// UNKNOWN_TOPIC_OR_PARTITION for the rest (Kafka's broker checks its metadata cache before
/// the coordinator).
pub(super) fn known_partitions<P: Clone>(
    image: &GroupMetadataImage,
    topics: impl IntoIterator<Item = (String, Vec<(i32, P)>)>,
    answers: &mut PartitionAnswers,
) -> Vec<(String, Vec<P>)> {
    let unknown = ErrorCode::UnknownTopicOrPartition.code();
    let mut known = Vec::new();
    for (name, partitions) in topics {
        if image.topic(&name).is_none() {
            for (p, _) in &partitions {
                answers.add(&name, *p, unknown);
            }
            continue;
        }
        let mut valid = Vec::new();
        for (p, data) in partitions {
            if image.has_partition(&name, p) {
                valid.push(data);
            } else {
                answers.add(&name, p, unknown);
            }
        }
        if !valid.is_empty() {
            known.push((name, valid));
        }
    }
    known
}

/// Runs the futures concurrently (each on its own task) and returns their outputs in order.
async fn join_all<T: Send + 'static>(
    futures: Vec<impl Future<Output = T> + Send + 'static>,
) -> Vec<Result<T, tokio::task::JoinError>> {
    let handles: Vec<_> = futures.into_iter().map(tokio::spawn).collect();
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        out.push(h.await);
    }
    out
}

fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

impl GroupCoordinatorService {
    pub async fn offset_commit(
        &self,
        ctx: &GroupRequestContext,
        req: OffsetCommitRequest,
    ) -> OffsetCommitResponse {
        let image = self.metadata.read().clone();
        let mut answers = PartitionAnswers::default();
        let topics = req.topics.iter().map(|t| {
            (
                t.name.0.to_string(),
                t.partitions
                    .iter()
                    .map(|p| {
                        (
                            p.partition_index,
                            (
                                t.topic_id,
                                CommitPartition {
                                    partition: p.partition_index,
                                    offset: p.committed_offset,
                                    leader_epoch: p.committed_leader_epoch,
                                    metadata: p.committed_metadata.as_ref().map(|m| m.to_string()),
                                },
                            ),
                        )
                    })
                    .collect(),
            )
        });
        let known = known_partitions(&image, topics, &mut answers);
        if !known.is_empty() {
            let commit = CommitRequest {
                group_id: req.group_id.0.to_string(),
                member_id: req.member_id.to_string(),
                generation_id_or_member_epoch: req.generation_id_or_member_epoch,
                group_instance_id: req.group_instance_id.as_ref().map(|s| s.to_string()),
                retention_time_ms: req.retention_time_ms,
                api_version: ctx.api_version,
                topics: known
                    .into_iter()
                    .map(|(name, parts)| CommitTopic {
                        // Kafka 4.4's broker names the topic's id (from its metadata) for
                        // commits by name too, so the records carry it.
                        topic_id: image
                            .topic(&name)
                            .map(|t| t.id)
                            .or_else(|| parts.first().map(|(id, _)| *id))
                            .unwrap_or_default(),
                        name,
                        partitions: parts.into_iter().map(|(_, p)| p).collect(),
                    })
                    .collect(),
            };
            let group_id = commit.group_id.clone();
            let sent = commit.clone();
            let r = self
                .write(&group_id, move |shard, _ctx| {
                    let (records, response) = ops::commit_offsets(shard, &sent)
                        .map_err(|code| op_error(code, "offset commit"))?;
                    Ok(WriteResult { records, response })
                })
                .await;
            match r {
                Ok(results) => answers.merge(results),
                Err(e) => {
                    let code = e.code().code();
                    for t in &commit.topics {
                        for p in &t.partitions {
                            answers.add(&t.name, p.partition, code);
                        }
                    }
                }
            }
        }
        OffsetCommitResponse::default().with_topics(
            answers
                .topics
                .into_iter()
                .map(|(name, parts)| {
                    OffsetCommitResponseTopic::default()
                        .with_name(TopicName(StrBytes::from_string(name)))
                        .with_partitions(
                            parts
                                .into_iter()
                                .map(|(p, code)| {
                                    OffsetCommitResponsePartition::default()
                                        .with_partition_index(p)
                                        .with_error_code(code)
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
    }

    pub async fn offset_fetch(
        &self,
        ctx: &GroupRequestContext,
        req: OffsetFetchRequest,
    ) -> OffsetFetchResponse {
        let version = ctx.api_version;
        let groups: Vec<FetchGroup> = if version >= 8 {
            req.groups
                .iter()
                .map(|g| FetchGroup {
                    group_id: g.group_id.0.to_string(),
                    member_id: g.member_id.as_ref().map(|m| m.to_string()),
                    member_epoch: g.member_epoch,
                    topics: g.topics.as_ref().map(|ts| {
                        ts.iter()
                            .map(|t| FetchTopic {
                                name: t.name.0.to_string(),
                                topic_id: t.topic_id,
                                partitions: t.partition_indexes.clone(),
                            })
                            .collect()
                    }),
                })
                .collect()
        } else {
            vec![FetchGroup {
                group_id: req.group_id.0.to_string(),
                member_id: None,
                member_epoch: -1,
                topics: req.topics.as_ref().map(|ts| {
                    ts.iter()
                        .map(|t| FetchTopic {
                            name: t.name.0.to_string(),
                            topic_id: uuid::Uuid::nil(),
                            partitions: t.partition_indexes.clone(),
                        })
                        .collect()
                }),
            }]
        };
        let require_stable = req.require_stable;
        let futures: Vec<_> = groups
            .iter()
            .cloned()
            .map(|g| {
                let rt = self.runtime.clone();
                let tp = self.topic_partition(&g.group_id);
                async move {
                    if require_stable {
                        // Kafka reads the latest offsets with a write that appends nothing:
                        // it is answered once everything before it is committed, so offsets
                        // still in flight are waited for instead of being missed.
                        rt.write(
                            &tp,
                            move |shard: &mut GroupCoordinatorShard, _ctx: &WriteContext| {
                                let response = ops::fetch_offsets(shard, &g, i64::MAX)
                                    .map_err(|c| op_error(c, "offset fetch"))?;
                                Ok(WriteResult {
                                    records: Vec::new(),
                                    response,
                                })
                            },
                        )
                        .await
                    } else {
                        rt.read(&tp, move |shard: &GroupCoordinatorShard, committed| {
                            ops::fetch_offsets(shard, &g, committed)
                        })
                        .await
                        .and_then(|r| r.map_err(|c| op_error(c, "offset fetch")))
                    }
                }
            })
            .collect();
        let results = join_all(futures).await;
        let answered: Vec<OffsetFetchResponseGroup> = groups
            .iter()
            .zip(results)
            .map(|(g, r)| {
                let r = r.unwrap_or_else(|e| {
                    Err(op_error(ErrorCode::UnknownServerError, &format!("{e}")))
                });
                match r {
                    Ok(topics) => fetch_group_response(&g.group_id, topics),
                    Err(e) => fetch_group_error(g, e.code(), version),
                }
            })
            .collect();
        if version >= 8 {
            return OffsetFetchResponse::default().with_groups(answered);
        }
        // One group before v8: its error on top, its partitions in the old form.
        let Some(g) = answered.into_iter().next() else {
            return OffsetFetchResponse::default();
        };
        OffsetFetchResponse::default()
            .with_error_code(g.error_code)
            .with_topics(
                g.topics
                    .into_iter()
                    .map(|t| {
                        OffsetFetchResponseTopic::default()
                            .with_name(t.name)
                            .with_partitions(
                                t.partitions
                                    .into_iter()
                                    .map(|p| {
                                        OffsetFetchResponsePartition::default()
                                            .with_partition_index(p.partition_index)
                                            .with_committed_offset(p.committed_offset)
                                            .with_committed_leader_epoch(p.committed_leader_epoch)
                                            .with_metadata(p.metadata)
                                            .with_error_code(p.error_code)
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            )
    }

    pub async fn offset_delete(
        &self,
        _ctx: &GroupRequestContext,
        req: OffsetDeleteRequest,
    ) -> OffsetDeleteResponse {
        let group_id = req.group_id.0.to_string();
        if group_id.is_empty() {
            return OffsetDeleteResponse::default()
                .with_error_code(ErrorCode::InvalidGroupId.code());
        }
        let image = self.metadata.read().clone();
        let mut answers = PartitionAnswers::default();
        let topics = req.topics.iter().map(|t| {
            (
                t.name.0.to_string(),
                t.partitions
                    .iter()
                    .map(|p| (p.partition_index, p.partition_index))
                    .collect(),
            )
        });
        // Kafka asks the coordinator even with no partition left: it still checks the group.
        let known = known_partitions(&image, topics, &mut answers);
        let g = group_id.clone();
        let r = self
            .write(&group_id, move |shard, _ctx| {
                let (records, response) = ops::delete_offsets(shard, &g, &known)
                    .map_err(|code| op_error(code, "offset delete"))?;
                Ok(WriteResult { records, response })
            })
            .await;
        match r {
            Ok(results) => answers.merge(results),
            // A top-level error replaces every partition answer (Kafka's error response).
            Err(e) => return OffsetDeleteResponse::default().with_error_code(e.code().code()),
        }
        OffsetDeleteResponse::default().with_topics(
            answers
                .topics
                .into_iter()
                .map(|(name, parts)| {
                    OffsetDeleteResponseTopic::default()
                        .with_name(TopicName(StrBytes::from_string(name)))
                        .with_partitions(
                            parts
                                .into_iter()
                                .map(|(p, code)| {
                                    OffsetDeleteResponsePartition::default()
                                        .with_partition_index(p)
                                        .with_error_code(code)
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
    }

    pub async fn delete_groups(
        &self,
        _ctx: &GroupRequestContext,
        req: DeleteGroupsRequest,
    ) -> DeleteGroupsResponse {
        // Each group once, in the order first named (Kafka's broker drops repeats).
        let mut groups: Vec<String> = Vec::with_capacity(req.groups_names.len());
        for g in &req.groups_names {
            let g = g.0.to_string();
            if !groups.contains(&g) {
                groups.push(g);
            }
        }
        let mut by_partition: Vec<(i32, Vec<String>)> = Vec::new();
        for g in &groups {
            let p = self.partition_for(g);
            match by_partition.iter_mut().find(|(q, _)| *q == p) {
                Some((_, v)) => v.push(g.clone()),
                None => by_partition.push((p, vec![g.clone()])),
            }
        }
        let futures: Vec<_> = by_partition
            .iter()
            .map(|(_, list)| {
                let rt = self.runtime.clone();
                let tp = self.topic_partition(&list[0]);
                let list = list.clone();
                async move {
                    rt.write(
                        &tp,
                        move |shard: &mut GroupCoordinatorShard, _ctx: &WriteContext| {
                            let (records, response) = ops::delete_groups(shard, &list);
                            Ok(WriteResult { records, response })
                        },
                    )
                    .await
                }
            })
            .collect();
        let mut codes: HashMap<String, i16> = HashMap::new();
        for ((_, list), r) in by_partition.iter().zip(join_all(futures).await) {
            match r {
                Ok(Ok(results)) => codes.extend(results),
                Ok(Err(e)) => {
                    for g in list {
                        codes.insert(g.clone(), e.code().code());
                    }
                }
                Err(_) => {
                    for g in list {
                        codes.insert(g.clone(), ErrorCode::UnknownServerError.code());
                    }
                }
            }
        }
        DeleteGroupsResponse::default().with_results(
            groups
                .into_iter()
                .map(|g| {
                    let code = codes
                        .get(&g)
                        .copied()
                        .unwrap_or(ErrorCode::UnknownServerError.code());
                    DeletableGroupResult::default()
                        .with_group_id(GroupId(StrBytes::from_string(g)))
                        .with_error_code(code)
                })
                .collect(),
        )
    }
}

fn fetch_group_response(group_id: &str, topics: Vec<FetchedTopic>) -> OffsetFetchResponseGroup {
    OffsetFetchResponseGroup::default()
        .with_group_id(GroupId(str_bytes(group_id)))
        .with_topics(
            topics
                .into_iter()
                .map(|t| {
                    OffsetFetchResponseTopics::default()
                        .with_name(TopicName(StrBytes::from_string(t.name)))
                        .with_partitions(
                            t.partitions
                                .into_iter()
                                .map(|p| {
                                    OffsetFetchResponsePartitions::default()
                                        .with_partition_index(p.partition)
                                        .with_committed_offset(p.committed_offset)
                                        .with_committed_leader_epoch(p.leader_epoch)
                                        .with_metadata(Some(StrBytes::from_string(p.metadata)))
                                        .with_error_code(p.error)
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
}

/// A failed group (Kafka's `OffsetFetchResponse.groupError`): from v2 the error is the
/// group's; v1 has no group error, so each requested partition carries it.
fn fetch_group_error(g: &FetchGroup, code: ErrorCode, version: i16) -> OffsetFetchResponseGroup {
    let group = OffsetFetchResponseGroup::default().with_group_id(GroupId(str_bytes(&g.group_id)));
    if version >= 2 {
        return group.with_error_code(code.code());
    }
    group.with_topics(
        g.topics
            .iter()
            .flatten()
            .map(|t| {
                OffsetFetchResponseTopics::default()
                    .with_name(TopicName(str_bytes(&t.name)))
                    .with_partitions(
                        t.partitions
                            .iter()
                            .map(|&p| {
                                OffsetFetchResponsePartitions::default()
                                    .with_partition_index(p)
                                    .with_error_code(code.code())
                                    .with_committed_offset(-1)
                                    .with_metadata(Some(StrBytes::from_static_str("")))
                                    .with_committed_leader_epoch(-1)
                            })
                            .collect(),
                    )
            })
            .collect(),
    )
}

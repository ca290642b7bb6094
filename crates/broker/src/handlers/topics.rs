//! CreateTopics, DeleteTopics, CreatePartitions: decoded here, decided by the controller.

use std::sync::Arc;

use strom_controller::limits::{self, RequestedTopic};
use strom_controller::{ControllerError, CreatePartitionsSpec, CreateTopicSpec};
use strom_protocol::kafka::messages::create_partitions_response::CreatePartitionsTopicResult;
use strom_protocol::kafka::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use strom_protocol::kafka::messages::delete_topics_response::DeletableTopicResult;
use strom_protocol::kafka::messages::*;
use strom_protocol::ErrorCode;

use super::str_bytes;
use crate::server::Broker;

pub async fn create_topics(
    broker: &Arc<Broker>,
    req: CreateTopicsRequest,
    version: i16,
) -> CreateTopicsResponse {
    // A request over the partition bound is answered before its topics are copied; the
    // controller checks again (auto-creation reaches it without this handler).
    let requested = req.topics.iter().map(|t| RequestedTopic {
        name: t.name.0.as_str(),
        num_partitions: t.num_partitions,
        assignments: t.assignments.len(),
    });
    if let Err(e) =
        limits::check_create_topics(requested, broker.controller.defaults().num_partitions)
    {
        let topics = req
            .topics
            .into_iter()
            .map(|t| {
                CreatableTopicResult::default()
                    .with_name(t.name)
                    .with_error_code(e.code())
                    .with_error_message(Some(str_bytes(&e.to_string())))
                    .with_num_partitions(-1)
                    .with_replication_factor(-1)
            })
            .collect();
        return CreateTopicsResponse::default().with_topics(topics);
    }
    let specs: Vec<CreateTopicSpec> = req
        .topics
        .iter()
        .map(|t| CreateTopicSpec {
            name: t.name.0.to_string(),
            num_partitions: t.num_partitions,
            replication_factor: t.replication_factor,
            assignments: t
                .assignments
                .iter()
                .map(|a| {
                    (
                        a.partition_index,
                        a.broker_ids.iter().map(|b| b.0).collect(),
                    )
                })
                .collect(),
            configs: t
                .configs
                .iter()
                .map(|c| (c.name.to_string(), c.value.as_ref().map(|v| v.to_string())))
                .collect(),
        })
        .collect();
    let results = broker
        .controller
        .create_topics(&specs, req.validate_only)
        .await;
    // Answer once this broker applied the new topics, so the client can use them at once.
    broker.sync_metadata().await;
    // A name given twice is refused, and answered once (Kafka's `ControllerApis.createTopics`).
    let mut answered = std::collections::HashSet::new();
    let topics = req
        .topics
        .into_iter()
        .zip(results)
        .filter(|(t, _)| answered.insert(t.name.0.clone()))
        .map(|(t, r)| {
            let failed = match &r {
                Ok(_) if !req.validate_only => offline_here(broker, &t.name.0),
                _ => Vec::new(),
            };
            let res = CreatableTopicResult::default().with_name(t.name);
            match r {
                Ok(_) if !failed.is_empty() => {
                    // The topic exists, but this broker could not open some of its logs (the
                    // image is applied before the controller answers, so the node handling the
                    // request knows its own replicas' fate). They are offline and the
                    // controller moves them; the client hears of it instead of a success.
                    res.with_error_code(ErrorCode::KafkaStorageError.code())
                        .with_error_message(Some(str_bytes(&format!(
                            "The logs of partitions {failed:?} could not be created on broker {}; \
                             those replicas are offline",
                            broker.config.node_id
                        ))))
                        .with_num_partitions(-1)
                        .with_replication_factor(-1)
                }
                Ok(created) => {
                    let configs = if version >= 5 {
                        let effective = broker.config.effective_topic_configs(&created.configs);
                        Some(
                            effective
                                .into_iter()
                                .map(|(def, value, source)| {
                                    CreatableTopicConfigs::default()
                                        .with_name(str_bytes(def.name))
                                        .with_value(Some(str_bytes(
                                            &strom_controller::topic_config::describe_value(
                                                def.name, &value,
                                            ),
                                        )))
                                        .with_config_source(source as i8)
                                })
                                .collect(),
                        )
                    } else {
                        None
                    };
                    res.with_topic_id(if req.validate_only {
                        uuid::Uuid::nil()
                    } else {
                        created.topic_id
                    })
                    .with_num_partitions(created.num_partitions)
                    .with_replication_factor(created.replication_factor)
                    .with_configs(configs)
                    // Kafka answers success without a message (null), not an empty one.
                    .with_error_message(None)
                }
                Err(e) => res
                    .with_error_code(e.code())
                    .with_error_message(e.api_message().map(|m| str_bytes(&m)))
                    .with_num_partitions(-1)
                    .with_replication_factor(-1),
            }
        })
        .collect();
    CreateTopicsResponse::default().with_topics(topics)
}

/// The partitions of `topic` whose replica on this broker is offline.
fn offline_here(broker: &Broker, topic: &str) -> Vec<i32> {
    let image = broker.image();
    let Some(t) = image.topic(topic) else {
        return Vec::new();
    };
    t.partitions
        .keys()
        .copied()
        .filter(|&p| broker.replica_manager.is_offline(topic, p))
        .collect()
}

pub async fn delete_topics(
    broker: &Arc<Broker>,
    req: DeleteTopicsRequest,
    version: i16,
) -> DeleteTopicsResponse {
    let refs: Vec<(Option<String>, Option<uuid::Uuid>)> = if version >= 6 {
        req.topics
            .iter()
            .map(|t| {
                (
                    t.name.as_ref().map(|n| n.0.to_string()),
                    (!t.topic_id.is_nil()).then_some(t.topic_id),
                )
            })
            .collect()
    } else {
        req.topic_names
            .iter()
            .map(|n| (Some(n.0.to_string()), None))
            .collect()
    };
    let results: Vec<Result<(String, uuid::Uuid), ControllerError>> =
        if broker.config.delete_topic_enable {
            let r = broker.controller.delete_topics(&refs).await;
            broker.sync_metadata().await;
            r
        } else {
            refs.iter()
                .map(|_| {
                    Err(ControllerError::InvalidRequest(
                        "Topic deletion is disabled.".into(),
                    ))
                })
                .collect()
        };
    let responses = refs
        .into_iter()
        .zip(results)
        .map(|((name, id), r)| {
            let res = DeletableTopicResult::default()
                .with_name(name.as_deref().map(|n| TopicName(str_bytes(n))))
                .with_topic_id(id.unwrap_or_default());
            match r {
                Ok((name, id)) => res
                    .with_name(Some(TopicName(str_bytes(&name))))
                    .with_topic_id(id),
                Err(e) if !broker.config.delete_topic_enable => res
                    .with_error_code(ErrorCode::TopicDeletionDisabled.code())
                    .with_error_message(Some(str_bytes(&e.to_string()))),
                Err(e) => res
                    .with_error_code(e.code())
                    .with_error_message(Some(str_bytes(&e.to_string()))),
            }
        })
        .collect();
    DeleteTopicsResponse::default().with_responses(responses)
}

pub async fn create_partitions(
    broker: &Arc<Broker>,
    req: CreatePartitionsRequest,
) -> CreatePartitionsResponse {
    let image = broker.image();
    // The partitions each topic had, to report the new ones this node could not open.
    let before: Vec<i32> = req
        .topics
        .iter()
        .map(|t| {
            image
                .topic(t.name.0.as_str())
                .map_or(0, |t| t.partitions.len() as i32)
        })
        .collect();
    let mut names = Vec::with_capacity(req.topics.len());
    let mut specs = Vec::with_capacity(req.topics.len());
    for t in req.topics {
        specs.push(CreatePartitionsSpec {
            name: t.name.0.to_string(),
            count: t.count,
            assignments: t.assignments.map(|a| {
                a.into_iter()
                    .map(|x| x.broker_ids.into_iter().map(|b| b.0).collect())
                    .collect()
            }),
        });
        names.push(t.name);
    }
    let results = broker
        .controller
        .create_partitions_batch(&specs, req.validate_only)
        .await;
    broker.sync_metadata().await;
    // A name given twice is refused, and answered once (Kafka's `ControllerApis.createPartitions`).
    let mut answered = std::collections::HashSet::new();
    let results = names
        .into_iter()
        .zip(results)
        .zip(before)
        .filter(|((name, _), _)| answered.insert(name.0.clone()))
        .map(|((name, r), before)| {
            // As CreateTopics: new partitions this node could not open are reported.
            let failed: Vec<i32> = match &r {
                Ok(()) if !req.validate_only => offline_here(broker, name.0.as_str())
                    .into_iter()
                    .filter(|&p| p >= before)
                    .collect(),
                _ => Vec::new(),
            };
            let res = CreatePartitionsTopicResult::default().with_name(name);
            match r {
                Ok(()) if !failed.is_empty() => res
                    .with_error_code(ErrorCode::KafkaStorageError.code())
                    .with_error_message(Some(str_bytes(&format!(
                        "The logs of partitions {failed:?} could not be created on broker {}; \
                         those replicas are offline",
                        broker.config.node_id
                    )))),
                Ok(()) => res,
                Err(e) => res
                    .with_error_code(e.code())
                    .with_error_message(e.api_message().map(|m| str_bytes(&m))),
            }
        })
        .collect();
    CreatePartitionsResponse::default().with_results(results)
}

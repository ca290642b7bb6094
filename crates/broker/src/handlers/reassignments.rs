//! AlterPartitionReassignments (v0) and ListPartitionReassignments (v0), decided by the active
//! controller (a standby forwards the request before it reaches these handlers).

use std::collections::BTreeMap;
use std::sync::Arc;

use strom_protocol::kafka::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use strom_protocol::kafka::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use strom_protocol::kafka::messages::*;

use super::str_bytes;
use crate::server::Broker;

pub async fn alter(
    broker: &Arc<Broker>,
    req: AlterPartitionReassignmentsRequest,
) -> AlterPartitionReassignmentsResponse {
    let requested: Vec<(String, i32, Option<Vec<i32>>)> = req
        .topics
        .iter()
        .flat_map(|t| {
            let name = t.name.0.to_string();
            t.partitions.iter().map(move |p| {
                (
                    name.clone(),
                    p.partition_index,
                    p.replicas.as_ref().map(|r| r.iter().map(|b| b.0).collect()),
                )
            })
        })
        .collect();
    let mut by_topic: BTreeMap<String, Vec<ReassignablePartitionResponse>> = BTreeMap::new();
    let mut resp = AlterPartitionReassignmentsResponse::default();
    let outcome = broker
        .controller
        .alter_partition_reassignments(requested.clone())
        .await;
    broker.sync_metadata().await;
    match outcome {
        Ok(results) => {
            for (topic, partition, r) in results {
                let out = ReassignablePartitionResponse::default().with_partition_index(partition);
                let out = match r {
                    Ok(()) => out,
                    Err(e) => out
                        .with_error_code(e.code())
                        .with_error_message(Some(str_bytes(&e.to_string()))),
                };
                by_topic.entry(topic).or_default().push(out);
            }
        }
        Err(e) => {
            resp = resp
                .with_error_code(e.code())
                .with_error_message(Some(str_bytes(&e.to_string())));
            for (topic, partition, _) in requested {
                by_topic.entry(topic).or_default().push(
                    ReassignablePartitionResponse::default()
                        .with_partition_index(partition)
                        .with_error_code(e.code())
                        .with_error_message(Some(str_bytes(&e.to_string()))),
                );
            }
        }
    }
    resp.with_responses(
        by_topic
            .into_iter()
            .map(|(name, partitions)| {
                ReassignableTopicResponse::default()
                    .with_name(str_bytes(&name).into())
                    .with_partitions(partitions)
            })
            .collect(),
    )
}

pub async fn list(
    broker: &Arc<Broker>,
    req: ListPartitionReassignmentsRequest,
) -> ListPartitionReassignmentsResponse {
    let topics = req.topics.as_ref().map(|ts| {
        ts.iter()
            .map(|t| (t.name.0.to_string(), t.partition_indexes.clone()))
            .collect()
    });
    match broker.controller.list_partition_reassignments(topics).await {
        Ok(list) => {
            let mut by_topic: BTreeMap<String, Vec<OngoingPartitionReassignment>> = BTreeMap::new();
            for (topic, p, replicas, adding, removing) in list {
                let ids = |v: Vec<i32>| v.into_iter().map(Into::into).collect();
                by_topic.entry(topic).or_default().push(
                    OngoingPartitionReassignment::default()
                        .with_partition_index(p)
                        .with_replicas(ids(replicas))
                        .with_adding_replicas(ids(adding))
                        .with_removing_replicas(ids(removing)),
                );
            }
            ListPartitionReassignmentsResponse::default().with_topics(
                by_topic
                    .into_iter()
                    .map(|(name, partitions)| {
                        OngoingTopicReassignment::default()
                            .with_name(str_bytes(&name).into())
                            .with_partitions(partitions)
                    })
                    .collect(),
            )
        }
        Err(e) => ListPartitionReassignmentsResponse::default()
            .with_error_code(e.code())
            .with_error_message(Some(str_bytes(&e.to_string()))),
    }
}

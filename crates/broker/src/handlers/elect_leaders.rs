//! ElectLeaders (v0-2): PREFERRED or UNCLEAN leader elections decided by the active controller
//! (a standby forwards the request before it reaches this handler).

use std::collections::BTreeMap;
use std::sync::Arc;

use strom_protocol::kafka::messages::elect_leaders_response::{
    PartitionResult, ReplicaElectionResult,
};
use strom_protocol::kafka::messages::*;

use super::str_bytes;
use crate::server::Broker;

pub async fn handle(
    broker: &Arc<Broker>,
    req: ElectLeadersRequest,
    version: i16,
) -> ElectLeadersResponse {
    // v0 has no election type: it always means PREFERRED.
    let election_type = if version == 0 { 0 } else { req.election_type };
    let requested: Option<Vec<(String, i32)>> = req.topic_partitions.as_ref().map(|tps| {
        tps.iter()
            .flat_map(|t| {
                let name = t.topic.0.to_string();
                t.partitions.iter().map(move |&p| (name.clone(), p))
            })
            .collect()
    });
    let outcome = broker
        .controller
        .elect_leaders(election_type, requested.clone())
        .await;
    broker.sync_metadata().await;
    let mut by_topic: BTreeMap<String, Vec<PartitionResult>> = BTreeMap::new();
    let mut top_error = 0;
    match outcome {
        Ok(results) => {
            for (topic, partition, r) in results {
                let res = PartitionResult::default().with_partition_id(partition);
                let res = match r {
                    Ok(()) => res,
                    Err(e) => res
                        .with_error_code(e.code())
                        .with_error_message(Some(str_bytes(&e.to_string()))),
                };
                by_topic.entry(topic).or_default().push(res);
            }
        }
        Err(e) => {
            // v1+ carries the error at the top; v0 (and the partitions, always) per partition.
            if version >= 1 {
                top_error = e.code();
            }
            for (topic, partition) in requested.unwrap_or_default() {
                by_topic.entry(topic).or_default().push(
                    PartitionResult::default()
                        .with_partition_id(partition)
                        .with_error_code(e.code())
                        .with_error_message(Some(str_bytes(&e.to_string()))),
                );
            }
        }
    }
    let results = by_topic
        .into_iter()
        .map(|(topic, partition_result)| {
            ReplicaElectionResult::default()
                .with_topic(str_bytes(&topic).into())
                .with_partition_result(partition_result)
        })
        .collect();
    ElectLeadersResponse::default()
        .with_error_code(top_error)
        .with_replica_election_results(results)
}

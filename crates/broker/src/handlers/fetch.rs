//! Fetch: decodes the request into the replica manager's [`FetchParams`] and partitions, runs
//! [`crate::replica_manager::ReplicaManager::fetch_messages`] (reads, the fetch purgatory) and
//! encodes its answer. Whole batches, as raw bytes.

use std::sync::Arc;
use std::time::Duration;

use strom_protocol::kafka::messages::fetch_response::{
    AbortedTransaction, FetchableTopicResponse, PartitionData,
};
use strom_protocol::kafka::messages::{ApiKey, FetchRequest, FetchResponse, TopicName};

use super::str_bytes;
use crate::partition::{FetchIsolation, PartitionFetch};
use crate::replica_manager::fetch::{FetchParams, FetchPartitionRequest};
use crate::server::Broker;

const READ_COMMITTED: i8 = 1;

pub async fn handle(broker: &Arc<Broker>, req: FetchRequest, version: i16) -> FetchResponse {
    // Fetch v15+ names the follower in replica_state, earlier versions in replica_id.
    let replica_id = if req.replica_state.replica_id.0 >= 0 {
        req.replica_state.replica_id.0
    } else {
        req.replica_id.0
    };
    let replica_id = (replica_id >= 0).then_some(replica_id);
    let isolation = if replica_id.is_some() {
        FetchIsolation::LogEnd
    } else if req.isolation_level == READ_COMMITTED {
        FetchIsolation::TxnCommitted
    } else {
        FetchIsolation::HighWatermark
    };
    // Kafka's `handleFetchRequest`: the request's limit capped by `fetch.max.bytes` (followers
    // too; their own cap is the `replica.fetch.response.max.bytes` they send), and `min_bytes`
    // by that. Strom has no fetch quotas, so no quota window caps it further. 0 or a negative
    // limit is not "unlimited": see `ReplicaManager::read_from_log`.
    let max_bytes = req.max_bytes.min(broker.config.limits.fetch_max_bytes);
    let params = FetchParams {
        replica_id,
        max_wait: Duration::from_millis(req.max_wait_ms.max(0) as u64),
        min_bytes: req.min_bytes.min(max_bytes),
        max_bytes,
        isolation,
        fetch_only_leader: true,
    };
    let image = broker.image();
    let names: Vec<Option<String>> = req
        .topics
        .iter()
        .map(|t| {
            if version >= 13 {
                image.topic_by_id(&t.topic_id).map(|t| t.name.clone())
            } else {
                Some(t.topic.0.to_string())
            }
        })
        .collect();
    drop(image);
    let mut requests = Vec::new();
    for (topic, name) in req.topics.iter().zip(&names) {
        for fp in &topic.partitions {
            requests.push(FetchPartitionRequest {
                topic: name.clone(),
                partition: fp.partition,
                fetch: PartitionFetch {
                    fetch_offset: fp.fetch_offset,
                    current_leader_epoch: (version >= 9 && fp.current_leader_epoch >= 0)
                        .then_some(fp.current_leader_epoch),
                    last_fetched_epoch: (version >= 12 && fp.last_fetched_epoch >= 0)
                        .then_some(fp.last_fetched_epoch),
                    log_start_offset: fp.log_start_offset,
                    max_bytes: fp.partition_max_bytes,
                },
            });
        }
    }
    let mut results = broker
        .replica_manager
        .fetch_messages(&params, &requests)
        .await
        .into_iter();
    let topics = req
        .topics
        .iter()
        .zip(&names)
        .map(|(topic, name)| {
            let partitions = topic
                .partitions
                .iter()
                .map(|fp| {
                    let r = results.next().expect("one result per partition");
                    let mut data = PartitionData::default()
                        .with_partition_index(fp.partition)
                        .with_error_code(r.error.map_or(0, |e| {
                            strom_storage::storage_error_code_for(e, ApiKey::Fetch, version).code()
                        }))
                        .with_high_watermark(r.high_watermark)
                        .with_last_stable_offset(r.last_stable_offset)
                        .with_log_start_offset(r.log_start_offset)
                        .with_preferred_read_replica((-1).into())
                        .with_records(Some(r.records));
                    if let Some(d) = r.diverging_epoch {
                        data.diverging_epoch.epoch = d.epoch;
                        data.diverging_epoch.end_offset = d.end_offset;
                    }
                    // Kafka answers null unless the read was read_committed (also on errors).
                    if version >= 4 {
                        data.aborted_transactions = r.aborted_transactions.map(|list| {
                            list.iter()
                                .map(|t| {
                                    AbortedTransaction::default()
                                        .with_producer_id(t.producer_id.into())
                                        .with_first_offset(t.first_offset)
                                })
                                .collect()
                        });
                    }
                    data
                })
                .collect();
            FetchableTopicResponse::default()
                .with_topic(TopicName(str_bytes(
                    name.as_deref().unwrap_or(topic.topic.0.as_str()),
                )))
                .with_topic_id(topic.topic_id)
                .with_partitions(partitions)
        })
        .collect();
    FetchResponse::default()
        .with_session_id(0)
        .with_responses(topics)
}

//! DescribeProducers: per partition, the producers the partition's producer state holds (id,
//! epoch, last sequence, last timestamp, coordinator epoch, open transaction's first offset or
//! -1), as Kafka's `handleDescribeProducersRequest` / `UnifiedLog.activeProducers` answer. An
//! invalid topic name answers INVALID_TOPIC_EXCEPTION, an unknown topic
//! UNKNOWN_TOPIC_OR_PARTITION; a partition of a known topic not hosted here
//! NOT_LEADER_OR_FOLLOWER.

use std::sync::Arc;

use strom_controller::names;
use strom_protocol::kafka::messages::describe_producers_response::{
    PartitionResponse, ProducerState, TopicResponse,
};
use strom_protocol::kafka::messages::{DescribeProducersRequest, DescribeProducersResponse};
use strom_protocol::ErrorCode;

use crate::server::Broker;

pub fn handle(broker: &Arc<Broker>, req: DescribeProducersRequest) -> DescribeProducersResponse {
    let image = broker.image();
    let topics = req
        .topics
        .iter()
        .map(|t| {
            let name = t.name.0.as_str();
            let topic_error = if names::validate(name).is_err() {
                Some(ErrorCode::InvalidTopicException)
            } else if image.topic(name).is_none() {
                Some(ErrorCode::UnknownTopicOrPartition)
            } else {
                None
            };
            let partitions = t
                .partition_indexes
                .iter()
                .map(|&index| {
                    let resp = PartitionResponse::default().with_partition_index(index);
                    if let Some(code) = topic_error {
                        return resp.with_error_code(code.code());
                    }
                    let partition = match broker.replica_manager.get_partition_or_error(name, index)
                    {
                        Ok(p) => p,
                        Err(ErrorCode::UnknownTopicOrPartition)
                            if image
                                .topic(name)
                                .is_some_and(|t| t.partitions.contains_key(&index)) =>
                        {
                            return resp.with_error_code(ErrorCode::NotLeaderOrFollower.code())
                        }
                        Err(code) => return resp.with_error_code(code.code()),
                    };
                    let mut producers: Vec<ProducerState> = partition.with_log(|log| {
                        log.producer_state()
                            .producers()
                            .values()
                            .map(|e| {
                                ProducerState::default()
                                    .with_producer_id(e.producer_id.into())
                                    .with_producer_epoch(e.producer_epoch as i32)
                                    .with_last_sequence(e.last_seq())
                                    .with_last_timestamp(e.last_timestamp)
                                    .with_coordinator_epoch(e.coordinator_epoch)
                                    .with_current_txn_start_offset(
                                        e.current_txn_first_offset.unwrap_or(-1),
                                    )
                            })
                            .collect()
                    });
                    producers.sort_by_key(|p| p.producer_id.0);
                    resp.with_error_code(0).with_active_producers(producers)
                })
                .collect();
            TopicResponse::default()
                .with_name(t.name.clone())
                .with_partitions(partitions)
        })
        .collect();
    DescribeProducersResponse::default().with_topics(topics)
}

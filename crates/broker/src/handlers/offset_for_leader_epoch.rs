//! OffsetForLeaderEpoch: where a leader epoch ends in this replica's log (KIP-101/320). Consumers
//! use it to detect log truncation after a leader change; followers to find their divergence.

use std::sync::Arc;

use strom_protocol::kafka::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use strom_protocol::kafka::messages::{OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse};
use strom_protocol::ErrorCode;

use crate::server::Broker;

pub fn handle(
    broker: &Arc<Broker>,
    req: OffsetForLeaderEpochRequest,
) -> OffsetForLeaderEpochResponse {
    let topics = req
        .topics
        .into_iter()
        .map(|t| {
            let name = t.topic.0.to_string();
            let partitions = t
                .partitions
                .into_iter()
                .map(|p| {
                    let res = EpochEndOffset::default()
                        .with_partition(p.partition)
                        .with_leader_epoch(-1)
                        .with_end_offset(-1);
                    let part = match broker
                        .replica_manager
                        .get_partition_or_error(&name, p.partition)
                    {
                        Ok(p) => p,
                        Err(code) => return res.with_error_code(code.code()),
                    };
                    if !part.is_leader() {
                        return res.with_error_code(ErrorCode::NotLeaderOrFollower.code());
                    }
                    let current = part.leader_epoch();
                    if p.current_leader_epoch >= 0 && p.current_leader_epoch != current {
                        let code = if p.current_leader_epoch < current {
                            ErrorCode::FencedLeaderEpoch
                        } else {
                            ErrorCode::UnknownLeaderEpoch
                        };
                        return res.with_error_code(code.code());
                    }
                    let (epoch, end) =
                        part.with_log(|log| log.end_offset_for_epoch(p.leader_epoch));
                    res.with_leader_epoch(epoch).with_end_offset(end)
                })
                .collect();
            OffsetForLeaderTopicResult::default()
                .with_topic(t.topic)
                .with_partitions(partitions)
        })
        .collect();
    OffsetForLeaderEpochResponse::default().with_topics(topics)
}

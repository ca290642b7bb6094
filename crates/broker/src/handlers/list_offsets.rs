//! ListOffsets: earliest (-2), latest (-1, the HW; the LSO for isolation_level 1), max
//! timestamp (-3), earliest local (-4), latest tiered (-5, none without tiered storage) and by
//! timestamp. v10's `timeout_ms` bounds reads from remote storage, which Strom has not.

use std::sync::Arc;

use strom_protocol::kafka::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use strom_protocol::kafka::messages::{ListOffsetsRequest, ListOffsetsResponse};
use strom_protocol::ErrorCode;

use crate::server::Broker;

const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
const EARLIEST_LOCAL: i64 = -4;
/// The highest offset in remote (tiered) storage (KIP-1005, v9+). Without tiered storage
/// there is none: offset and timestamp -1, no epoch, no error, as Kafka's `UnifiedLog` answers
/// for a log whose remote storage is off.
const LATEST_TIERED: i64 = -5;
const READ_COMMITTED: i8 = 1;

/// The first ListOffsets version that knows a special timestamp.
fn min_version_for(timestamp: i64) -> i16 {
    match timestamp {
        MAX_TIMESTAMP => 7,
        EARLIEST_LOCAL => 8,
        LATEST_TIERED => 9,
        _ => 0,
    }
}

pub fn handle(broker: &Arc<Broker>, req: ListOffsetsRequest, version: i16) -> ListOffsetsResponse {
    let topics = req
        .topics
        .into_iter()
        .map(|t| {
            let name = t.name.0.to_string();
            let partitions = t
                .partitions
                .into_iter()
                .map(|lp| {
                    let resp = ListOffsetsPartitionResponse::default()
                        .with_partition_index(lp.partition_index)
                        .with_timestamp(-1)
                        .with_offset(-1)
                        .with_leader_epoch(-1);
                    let p = match broker
                        .replica_manager
                        .get_partition_or_error(&name, lp.partition_index)
                    {
                        Ok(p) => p,
                        Err(code) => return resp.with_error_code(code.code()),
                    };
                    if !p.is_leader() {
                        return resp.with_error_code(ErrorCode::NotLeaderOrFollower.code());
                    }
                    let epoch = p.leader_epoch();
                    if version >= 4
                        && lp.current_leader_epoch >= 0
                        && lp.current_leader_epoch != epoch
                    {
                        let code = if lp.current_leader_epoch < epoch {
                            ErrorCode::FencedLeaderEpoch
                        } else {
                            ErrorCode::UnknownLeaderEpoch
                        };
                        return resp.with_error_code(code.code());
                    }
                    let resp = resp.with_leader_epoch(epoch);
                    // Kafka's `fetchOffsetForTimestamp`: read_committed sees up to the LSO.
                    let last_fetchable = if version >= 2 && req.isolation_level == READ_COMMITTED {
                        p.last_stable_offset()
                    } else {
                        p.high_watermark()
                    };
                    // A special timestamp older than the request's version is refused, as
                    // Kafka 4.4 does (UNSUPPORTED_VERSION for -5 below v9).
                    if lp.timestamp < 0 && version < min_version_for(lp.timestamp) {
                        return resp
                            .with_leader_epoch(-1)
                            .with_error_code(ErrorCode::UnsupportedVersion.code());
                    }
                    match lp.timestamp {
                        LATEST => resp.with_offset(last_fetchable),
                        EARLIEST | EARLIEST_LOCAL => resp.with_offset(p.log_start_offset()),
                        LATEST_TIERED => resp.with_leader_epoch(-1),
                        MAX_TIMESTAMP => match p.with_log(|l| l.max_timestamp_and_offset()) {
                            Ok(Some(t)) => resp
                                .with_offset(t.offset)
                                .with_timestamp(t.timestamp)
                                .with_leader_epoch(t.leader_epoch.unwrap_or(-1)),
                            Ok(None) => resp,
                            Err(e) => resp.with_error_code(e.error_code().code()),
                        },
                        ts if ts < 0 => resp.with_error_code(ErrorCode::InvalidRequest.code()),
                        ts => match p.with_log(|l| l.fetch_offset_by_timestamp(ts)) {
                            // Only offsets below the HW (LSO) are visible to consumers.
                            Ok(Some(t)) if t.offset < last_fetchable => resp
                                .with_offset(t.offset)
                                .with_timestamp(t.timestamp)
                                .with_leader_epoch(t.leader_epoch.unwrap_or(-1)),
                            Ok(_) => resp,
                            Err(e) => resp.with_error_code(e.error_code().code()),
                        },
                    }
                })
                .collect();
            ListOffsetsTopicResponse::default()
                .with_name(t.name)
                .with_partitions(partitions)
        })
        .collect();
    let mut resp = ListOffsetsResponse::default().with_topics(topics);
    if version < 4 {
        // The field does not exist before v4; the codec refuses a non-default value.
        for p in resp.topics.iter_mut().flat_map(|t| t.partitions.iter_mut()) {
            p.leader_epoch = -1;
        }
    }
    resp
}

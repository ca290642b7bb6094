//! Fetch: whole batches from the log up to the high watermark, as raw bytes. A fetch that has
//! less than `min_bytes` waits (at most `max_wait_ms`) until an append to one of its partitions
//! wakes it, then reads again.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use strom_protocol::kafka::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use strom_protocol::kafka::messages::{FetchRequest, FetchResponse, TopicName};
use strom_protocol::ErrorCode;
use strom_storage::StorageError;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::str_bytes;
use crate::server::Broker;

const READ_COMMITTED: i8 = 1;

pub async fn handle(broker: &Arc<Broker>, req: FetchRequest, version: i16) -> FetchResponse {
    let deadline = Instant::now() + Duration::from_millis(req.max_wait_ms.max(0) as u64);
    let waiter = Arc::new(Notify::new());
    let mut last_try = req.max_wait_ms <= 0;
    loop {
        let (resp, bytes, errors) = read_all(broker, &req, version, (!last_try).then_some(&waiter));
        if last_try || errors || bytes >= req.min_bytes.max(0) as usize {
            return resp;
        }
        tokio::select! {
            _ = waiter.notified() => {}
            _ = tokio::time::sleep_until(deadline) => last_try = true,
        }
    }
}

/// One pass over the requested partitions. Returns the response, the record bytes in it and
/// whether any partition had an error (which completes a delayed fetch at once, as in Kafka).
fn read_all(
    broker: &Arc<Broker>,
    req: &FetchRequest,
    version: i16,
    waiter: Option<&Arc<Notify>>,
) -> (FetchResponse, usize, bool) {
    let image = broker.image();
    // Fetch v3+ caps the whole response; the first partition with data may exceed it so a
    // consumer never gets stuck behind a batch larger than its limits.
    let mut remaining = if req.max_bytes > 0 {
        req.max_bytes as usize
    } else {
        usize::MAX
    };
    let mut min_one_message = true;
    let mut total = 0usize;
    let mut errors = false;
    // Fetch v15+ names the follower in replica_state, earlier versions in replica_id.
    let replica_id = if req.replica_state.replica_id.0 >= 0 {
        req.replica_state.replica_id.0
    } else {
        req.replica_id.0
    };
    let is_replica = replica_id >= 0;
    let now = crate::now_ms();
    let mut topics = Vec::with_capacity(req.topics.len());
    for topic in &req.topics {
        let name: Option<String> = if version >= 13 {
            image.topic_by_id(&topic.topic_id).map(|t| t.name.clone())
        } else {
            Some(topic.topic.0.to_string())
        };
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for fp in &topic.partitions {
            let mut data = PartitionData::default()
                .with_partition_index(fp.partition)
                .with_high_watermark(-1)
                .with_last_stable_offset(-1)
                .with_log_start_offset(-1)
                .with_preferred_read_replica((-1).into())
                .with_records(Some(Bytes::new()));
            if req.isolation_level == READ_COMMITTED {
                data.aborted_transactions = Some(Vec::new());
            }
            let Some(name) = &name else {
                errors = true;
                partitions.push(data.with_error_code(ErrorCode::UnknownTopicId.code()));
                continue;
            };
            let Some(partition) = broker.replica_manager.get(name, fp.partition) else {
                errors = true;
                partitions.push(data.with_error_code(ErrorCode::UnknownTopicOrPartition.code()));
                continue;
            };
            if !partition.is_leader() {
                errors = true;
                partitions.push(data.with_error_code(ErrorCode::NotLeaderOrFollower.code()));
                continue;
            }
            let epoch = partition.leader_epoch();
            if version >= 9 && fp.current_leader_epoch >= 0 && fp.current_leader_epoch != epoch {
                errors = true;
                let code = if fp.current_leader_epoch < epoch {
                    ErrorCode::FencedLeaderEpoch
                } else {
                    ErrorCode::UnknownLeaderEpoch
                };
                partitions.push(data.with_error_code(code.code()));
                continue;
            }
            if let Some(w) = waiter {
                partition.register_waiter(w);
            }
            let limit = (fp.partition_max_bytes.max(0) as usize).min(remaining);
            let hw = partition.high_watermark();
            data.high_watermark = hw;
            data.last_stable_offset = hw;
            // The LEO before the read: appends after it must not keep a follower out of sync.
            let leader_leo = partition.log_end_offset();
            if version >= 12 && fp.last_fetched_epoch >= 0 {
                // KIP-320: the fetcher's last epoch must end at or after its fetch offset here,
                // else it holds a divergent tail; tell it where that epoch ends instead of data.
                let (epoch, end) = partition.end_offset_for_epoch(fp.last_fetched_epoch);
                if epoch < 0 || end < 0 || fp.fetch_offset < partition.log_start_offset() {
                    errors = true;
                    data.log_start_offset = partition.log_start_offset();
                    partitions.push(data.with_error_code(ErrorCode::OffsetOutOfRange.code()));
                    continue;
                }
                if epoch < fp.last_fetched_epoch || end < fp.fetch_offset {
                    errors = true;
                    data.log_start_offset = partition.log_start_offset();
                    data.diverging_epoch.epoch = epoch;
                    data.diverging_epoch.end_offset = end;
                    partitions.push(data);
                    continue;
                }
            }
            if is_replica && !partition.is_known_replica(replica_id) {
                errors = true;
                let code = if version >= 9 && fp.current_leader_epoch >= 0 {
                    ErrorCode::UnknownLeaderEpoch
                } else {
                    ErrorCode::NotLeaderOrFollower
                };
                partitions.push(data.with_error_code(code.code()));
                continue;
            }
            match partition.read(fp.fetch_offset, limit, min_one_message, !is_replica) {
                Ok(info) => {
                    if is_replica {
                        partition.update_follower_fetch_state(
                            replica_id,
                            fp.fetch_offset,
                            fp.log_start_offset,
                            now,
                            leader_leo,
                        );
                    }
                    data.log_start_offset = info.log_start_offset;
                    let n = info.records.len();
                    if n > 0 {
                        min_one_message = false;
                        remaining = remaining.saturating_sub(n);
                        total += n;
                    }
                    data.records = Some(info.records);
                }
                Err(e) => {
                    errors = true;
                    data.log_start_offset = partition.log_start_offset();
                    // Per version: Fetch v5 and older get NOT_LEADER_OR_FOLLOWER for a storage error.
                    data.error_code = e
                        .error_code_for(strom_protocol::kafka::messages::ApiKey::Fetch, version)
                        .code();
                    if !matches!(e, StorageError::OffsetOutOfRange { .. }) {
                        tracing::warn!(topic = %name, partition = fp.partition, error = %e, "fetch read failed");
                    }
                }
            }
            partitions.push(data);
        }
        topics.push(
            FetchableTopicResponse::default()
                .with_topic(TopicName(str_bytes(
                    name.as_deref().unwrap_or(topic.topic.0.as_str()),
                )))
                .with_topic_id(topic.topic_id)
                .with_partitions(partitions),
        );
    }
    let resp = FetchResponse::default()
        .with_session_id(0)
        .with_responses(topics);
    (resp, total, errors)
}

//! WriteTxnMarkers (inter-broker, from the transaction coordinator): for each marker and each of
//! its partitions, the leader appends the end-transaction control batch with origin Coordinator
//! and answers once the HW passes it, as an acks=all produce waits (the produce purgatory), at
//! most `request.timeout.ms` (Kafka's `handleWriteTxnMarkersRequest`). Errors are per partition:
//! UNKNOWN_TOPIC_OR_PARTITION for a partition the metadata does not know,
//! NOT_LEADER_OR_FOLLOWER for one not hosted here, then whatever the append or the
//! wait answers (NOT_LEADER_OR_FOLLOWER, INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED,
//! NOT_ENOUGH_REPLICAS, REQUEST_TIMED_OUT, ...).

use std::sync::Arc;
use std::time::Duration;

use strom_group_coordinator::topic::GROUP_METADATA_TOPIC_NAME;
use strom_protocol::kafka::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use strom_protocol::kafka::messages::{WriteTxnMarkersRequest, WriteTxnMarkersResponse};
use strom_protocol::memory_records::{end_txn_marker, TxnResult};
use strom_protocol::ErrorCode;
use strom_server_common::authorizer::AclOperation;
use strom_storage::AppendOrigin;

use crate::partition::{Partition, PartitionError};
use crate::replication::{wait_for_acks, AckResult};
use crate::request_context::RequestContext;
use crate::server::Broker;

/// WriteTxnMarkers as `ctx`'s principal. A marker ends transactions of any producer, so it needs
/// ALTER on the cluster (an admin aborting a hanging transaction, KIP-664) or CLUSTER_ACTION (a
/// transaction coordinator); without either every partition answers
/// CLUSTER_AUTHORIZATION_FAILED (Kafka's `KafkaApis.handleWriteTxnMarkersRequest` and
/// `WriteTxnMarkersRequest.getErrorResponse`).
pub async fn handle_for(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    req: WriteTxnMarkersRequest,
) -> WriteTxnMarkersResponse {
    if broker.auth.authorize_cluster(ctx, AclOperation::Alter)
        || broker
            .auth
            .authorize_cluster(ctx, AclOperation::ClusterAction)
    {
        return handle(broker, req).await;
    }
    let code = ErrorCode::ClusterAuthorizationFailed.code();
    let markers = req
        .markers
        .iter()
        .map(|marker| {
            let topics = marker
                .topics
                .iter()
                .map(|topic| {
                    let partitions = topic
                        .partition_indexes
                        .iter()
                        .map(|&index| {
                            WritableTxnMarkerPartitionResult::default()
                                .with_partition_index(index)
                                .with_error_code(code)
                        })
                        .collect();
                    WritableTxnMarkerTopicResult::default()
                        .with_name(topic.name.clone())
                        .with_partitions(partitions)
                })
                .collect();
            WritableTxnMarkerResult::default()
                .with_producer_id(marker.producer_id)
                .with_topics(topics)
        })
        .collect();
    WriteTxnMarkersResponse::default().with_markers(markers)
}

/// Versions 1 and 2 (v2 adds each marker's transaction version; v1's markers are version 0).
pub async fn handle(broker: &Arc<Broker>, req: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse {
    // `request.timeout.ms` bounds the wait for the markers' HW.
    let timeout = Duration::from_millis(broker.config.request_timeout_ms);
    let now = crate::now_ms();
    // (marker, topic, partition) of each append waiting for its HW.
    let mut pending: Vec<(usize, usize, usize, Arc<Partition>, i64)> = Vec::new();
    // (marker, topic, partition) of each `__consumer_offsets` completion, and the completions.
    let mut group_pending: Vec<(usize, usize, usize)> = Vec::new();
    let mut group_waits = Vec::new();
    let mut markers = Vec::with_capacity(req.markers.len());
    for (mi, marker) in req.markers.iter().enumerate() {
        let result = if marker.transaction_result {
            TxnResult::Commit
        } else {
            TxnResult::Abort
        };
        let mut topics = Vec::with_capacity(marker.topics.len());
        for (ti, topic) in marker.topics.iter().enumerate() {
            let name = topic.name.0.to_string();
            let mut partitions = Vec::with_capacity(topic.partition_indexes.len());
            for (pi, &index) in topic.partition_indexes.iter().enumerate() {
                // `__consumer_offsets`: the group coordinator appends the marker itself and
                // applies it to its pending transactional offsets (Kafka's
                // `groupCoordinator.completeTransaction`); answered below with the rest.
                if name == GROUP_METADATA_TOPIC_NAME {
                    group_pending.push((mi, ti, pi));
                    let gc = broker.group_coordinator.clone();
                    let (pid, epoch, coordinator_epoch) = (
                        marker.producer_id.0,
                        marker.producer_epoch,
                        marker.coordinator_epoch,
                    );
                    // Spawned so that every completion is scheduled at once.
                    group_waits.push(tokio::spawn(async move {
                        gc.complete_transaction(
                            index,
                            pid,
                            epoch,
                            coordinator_epoch,
                            result,
                            timeout,
                        )
                        .await
                    }));
                    partitions.push(
                        WritableTxnMarkerPartitionResult::default().with_partition_index(index),
                    );
                    continue;
                }
                let code: i16 = match crate::disk_io::blocking(|| {
                    append_marker(
                        broker,
                        &name,
                        index,
                        marker.producer_id.0,
                        marker.producer_epoch,
                        marker.coordinator_epoch,
                        marker.transaction_version as i16,
                        result,
                        now,
                    )
                }) {
                    Ok((partition, required_offset)) => {
                        pending.push((mi, ti, pi, partition, required_offset));
                        0
                    }
                    Err(code) => code.code(),
                };
                partitions.push(
                    WritableTxnMarkerPartitionResult::default()
                        .with_partition_index(index)
                        .with_error_code(code),
                );
            }
            topics.push(
                WritableTxnMarkerTopicResult::default()
                    .with_name(topic.name.clone())
                    .with_partitions(partitions),
            );
        }
        markers.push(
            WritableTxnMarkerResult::default()
                .with_producer_id(marker.producer_id)
                .with_topics(topics),
        );
    }
    for ((mi, ti, pi), wait) in group_pending.into_iter().zip(group_waits) {
        let code = match wait.await {
            Ok(Ok(())) => continue,
            Ok(Err(code)) => code,
            Err(_) => ErrorCode::UnknownServerError,
        };
        markers[mi].topics[ti].partitions[pi].error_code = code.code();
    }
    if !pending.is_empty() {
        let waits: Vec<(Arc<Partition>, i64)> = pending
            .iter()
            .map(|(_, _, _, p, r)| (p.clone(), *r))
            .collect();
        let results = wait_for_acks(&waits, timeout).await;
        for ((mi, ti, pi, _, _), result) in pending.iter().zip(results) {
            if let AckResult::Error(code) = result {
                markers[*mi].topics[*ti].partitions[*pi].error_code = code.code();
            }
        }
    }
    WriteTxnMarkersResponse::default().with_markers(markers)
}

/// Appends one marker as leader (acks=all: `min.insync.replicas` checked first); returns the
/// partition and the offset its HW must reach.
#[allow(clippy::too_many_arguments)]
fn append_marker(
    broker: &Arc<Broker>,
    topic: &str,
    index: i32,
    producer_id: i64,
    producer_epoch: i16,
    coordinator_epoch: i32,
    transaction_version: i16,
    result: TxnResult,
    now: i64,
) -> Result<(Arc<Partition>, i64), ErrorCode> {
    let partition = broker
        .replica_manager
        .get_partition_or_error(topic, index)?;
    let leader_epoch = partition
        .leader_epoch_if_leader()
        .map_err(|e| e.error_code())?;
    let batch = end_txn_marker(producer_id, producer_epoch, coordinator_epoch, result, now);
    match partition.append_records_to_leader_with_txn_version(
        &batch,
        AppendOrigin::Coordinator,
        -1,
        leader_epoch,
        transaction_version,
        now,
    ) {
        Ok(info) => Ok((partition, info.last_offset + 1)),
        Err(e) => {
            tracing::debug!(topic, partition = index, producer_id, error = %e, "transaction marker rejected");
            if let PartitionError::Storage(se) = &e {
                broker.replica_manager.handle_storage_error(&partition, se);
            }
            Err(match e {
                // The coordinator retries on a leader change, as on NOT_LEADER_OR_FOLLOWER.
                PartitionError::FencedLeaderEpoch { .. }
                | PartitionError::UnknownLeaderEpoch { .. } => ErrorCode::NotLeaderOrFollower,
                other => other.error_code(),
            })
        }
    }
}

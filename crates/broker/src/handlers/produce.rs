//! Produce: validate the request shape, then append each partition's batch as leader. The batch
//! stays bytes: only its header is read here and in storage. With acks=all the response waits
//! until each partition's HW covers its append ([`handle_async`]; see
//! [`crate::replication::delayed_produce`]); `min.insync.replicas` is checked before the append
//! (NOT_ENOUGH_REPLICAS, under the partition's lock with the append) and at completion
//! (NOT_ENOUGH_REPLICAS_AFTER_APPEND), as in Kafka.

use std::sync::Arc;
use std::time::Duration;

use strom_controller::{names, CreateTopicSpec};
use strom_protocol::batch::{BatchError, BatchIter};
use strom_protocol::kafka::messages::produce_response::{
    PartitionProduceResponse, TopicProduceResponse,
};
use strom_protocol::kafka::messages::{ProduceRequest, ProduceResponse};
use strom_protocol::ErrorCode;
use strom_storage::AppendOrigin;

use super::str_bytes;
use crate::partition::{Partition, PartitionError};
use crate::replication::{wait_for_acks, AckResult};
use crate::server::Broker;

/// An acks=all append waiting for the HW: (topic index, partition index) in the response, the
/// partition and the offset the HW must reach.
type PendingAck = (usize, usize, Arc<Partition>, i64);

/// Produce; with acks=all the response waits (at most the request's `timeout_ms`) until each
/// partition's HW passes its append, woken by follower fetches (Kafka's `DelayedProduce`).
#[cfg(test)]
pub async fn handle(broker: &Arc<Broker>, req: ProduceRequest, version: i16) -> ProduceResponse {
    handle_for_client(broker, req, version, false).await
}

/// Kafka's admin client id: only its produce requests may write the internal topics
/// (`AdminUtils.ADMIN_CLIENT_ID`, checked by `KafkaApis` as `internalTopicsAllowed`).
pub const ADMIN_CLIENT_ID: &str = "__admin_client";

/// [`handle`], where `internal_topics_allowed` says whether the internal topics
/// (`__consumer_offsets`, `__transaction_state`) may be written: they belong to their
/// coordinators, and a client's batch there would corrupt a coordinator's log.
pub async fn handle_for_client(
    broker: &Arc<Broker>,
    req: ProduceRequest,
    version: i16,
    internal_topics_allowed: bool,
) -> ProduceResponse {
    if matches!(req.acks, -1..=1) && broker.config.auto_create_topics_enable {
        let image = broker.image();
        let missing: Vec<CreateTopicSpec> = req
            .topic_data
            .iter()
            .filter(|t| image.topic(t.name.0.as_str()).is_none())
            // The internal topics are created by their coordinators, with their own settings.
            .filter(|t| !names::is_internal(t.name.0.as_str()))
            .map(|t| CreateTopicSpec {
                name: t.name.0.to_string(),
                num_partitions: -1,
                replication_factor: -1,
                ..Default::default()
            })
            .collect();
        if !missing.is_empty() {
            broker.create_topics(&missing).await;
        }
    }
    if req.transactional_id.is_none() && has_transactional_records(&req) {
        // Kafka authorizes transactional batches by the request's transactional id; without
        // one, nothing is written. (With one, batches are appended: KIP-890 verification with
        // the transaction coordinator is the lead's part.)
        return error_response(req, ErrorCode::TransactionalIdAuthorizationFailed);
    }
    let timeout = Duration::from_millis(req.timeout_ms.max(0) as u64);
    let (mut resp, pending) = append_all(broker, req, version, internal_topics_allowed);
    if pending.is_empty() {
        return resp;
    }
    let waits: Vec<(Arc<Partition>, i64)> =
        pending.iter().map(|(_, _, p, r)| (p.clone(), *r)).collect();
    let results = wait_for_acks(&waits, timeout).await;
    for ((t, p, _, _), result) in pending.iter().zip(results) {
        if let AckResult::Error(code) = result {
            resp.responses[*t].partition_responses[*p].error_code = code.code();
        }
    }
    resp
}

/// Kafka's `ProduceRequest.hasTransactionalRecords`: some partition's batch is transactional.
fn has_transactional_records(req: &ProduceRequest) -> bool {
    req.topic_data
        .iter()
        .flat_map(|t| t.partition_data.iter())
        .filter_map(|p| p.records.as_ref())
        .any(|r| {
            BatchIter::new(r)
                .next()
                .is_some_and(|b| b.is_ok_and(|b| b.is_transactional()))
        })
}

/// Kafka's `ProduceRequest.getErrorResponse`: every partition answers `code`.
fn error_response(req: ProduceRequest, code: ErrorCode) -> ProduceResponse {
    let responses = req
        .topic_data
        .into_iter()
        .map(|t| {
            let partitions = t
                .partition_data
                .iter()
                .map(|p| {
                    PartitionProduceResponse::default()
                        .with_index(p.index)
                        .with_error_code(code.code())
                        .with_base_offset(-1)
                        .with_log_append_time_ms(-1)
                        .with_log_start_offset(-1)
                })
                .collect();
            TopicProduceResponse::default()
                .with_name(t.name)
                .with_partition_responses(partitions)
        })
        .collect();
    ProduceResponse::default().with_responses(responses)
}

fn append_all(
    broker: &Arc<Broker>,
    req: ProduceRequest,
    version: i16,
    internal_topics_allowed: bool,
) -> (ProduceResponse, Vec<PendingAck>) {
    let acks_all = req.acks == -1;
    let mut pending: Vec<PendingAck> = Vec::new();
    let acks_ok = matches!(req.acks, -1..=1);
    let now = crate::now_ms();
    let responses = req
        .topic_data
        .into_iter()
        .enumerate()
        .map(|(ti, topic)| {
            let name = topic.name.0.to_string();
            let partition_responses = topic
                .partition_data
                .into_iter()
                .enumerate()
                .map(|(pi, pd)| {
                    let mut resp = PartitionProduceResponse::default()
                        .with_index(pd.index)
                        .with_base_offset(-1)
                        .with_log_append_time_ms(-1)
                        .with_log_start_offset(-1);
                    if !acks_ok {
                        return resp.with_error_code(ErrorCode::InvalidRequiredAcks.code());
                    }
                    if !internal_topics_allowed && names::is_internal(&name) {
                        return resp
                            .with_error_code(ErrorCode::InvalidTopicException.code())
                            .with_error_message(Some(str_bytes(&format!("Cannot append to internal topic {name}"))));
                    }
                    let partition = match broker.replica_manager.get_partition_or_error(&name, pd.index) {
                        Ok(p) => p,
                        Err(code) => return resp.with_error_code(code.code()),
                    };
                    // The leader epoch checked here goes with the append, which is refused if
                    // leadership moved in between (never stamped with a newer leader's epoch).
                    let leader_epoch = match partition.leader_epoch_if_leader() {
                        Ok(e) => e,
                        Err(e) => return resp.with_error_code(e.error_code().code()),
                    };
                    let records = pd.records.unwrap_or_default();
                    if let Err((code, msg)) = check_one_batch(&records, version) {
                        return resp.with_error_code(code.code()).with_error_message(Some(str_bytes(&msg)));
                    }
                    // lead: KIP-890 part 1 goes here: a transactional batch for a partition the
                    // transaction coordinator has not verified is held until it answers
                    // (Kafka's `maybeStartTransactionVerificationForPartition`); until then
                    // transactional batches are appended as they come.
                    match partition.append_records_to_leader(&records, AppendOrigin::Client, req.acks, leader_epoch, now) {
                        Ok(info) => {
                            if acks_all {
                                pending.push((ti, pi, partition.clone(), info.last_offset + 1));
                            }
                            resp.base_offset = info.first_offset;
                            resp.log_append_time_ms = info.log_append_time;
                            resp.log_start_offset = info.log_start_offset;
                            resp
                        }
                        Err(e) => {
                            tracing::debug!(topic = %name, partition = pd.index, error = %e, "produce rejected");
                            if let PartitionError::Storage(se) = &e {
                                broker.replica_manager.handle_storage_error(&partition, se);
                            }
                            resp.with_error_code(produce_error_code(&e).code())
                                .with_error_message(Some(str_bytes(&e.to_string())))
                                .with_log_start_offset(match e {
                                    PartitionError::Storage(_) => partition.log_start_offset(),
                                    _ => -1,
                                })
                        }
                    }
                })
                .collect();
            TopicProduceResponse::default()
                .with_name(topic.name)
                .with_partition_responses(partition_responses)
        })
        .collect();
    (
        ProduceResponse::default().with_responses(responses),
        pending,
    )
}

/// A produce carries no leader epoch, so a leadership change between the check and the append
/// (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH from the partition) is NOT_LEADER_OR_FOLLOWER to
/// the client: retriable with a metadata refresh everywhere, where librdkafka treats a fenced
/// epoch on produce as fatal for the message.
fn produce_error_code(e: &PartitionError) -> ErrorCode {
    match e {
        PartitionError::FencedLeaderEpoch { .. } | PartitionError::UnknownLeaderEpoch { .. } => {
            ErrorCode::NotLeaderOrFollower
        }
        other => other.error_code(),
    }
}

/// Produce v3+ carries exactly one magic-2 batch per partition (Kafka's
/// `ProduceRequest.validateRecords`).
fn check_one_batch(records: &[u8], version: i16) -> Result<(), (ErrorCode, String)> {
    let one = || {
        format!("Produce requests with version {version} must have exactly one record batch per partition")
    };
    let mut it = BatchIter::new(records);
    match it.next() {
        None => return Err((ErrorCode::InvalidRecord, one())),
        Some(Err(BatchError::UnsupportedMagic(m))) => {
            return Err((
                ErrorCode::InvalidRecord,
                format!("Produce requests with version {version} are only allowed to contain record batches with magic version 2, got {m}"),
            ))
        }
        Some(Err(e)) => return Err((ErrorCode::CorruptMessage, e.to_string())),
        Some(Ok(_)) => {}
    }
    match it.next() {
        None => Ok(()),
        Some(Ok(_)) => Err((ErrorCode::InvalidRecord, one())),
        Some(Err(e)) => Err((ErrorCode::CorruptMessage, e.to_string())),
    }
}

//! Produce: validate the request shape, then append each partition's batch as leader. A topic
//! that does not exist is answered UNKNOWN_TOPIC_OR_PARTITION and never created here: Kafka
//! creates topics only from Metadata and FindCoordinator (`KafkaApis.handleProduceRequest`).
//! The batch stays bytes: only its header is read here and in storage. With acks=all the response waits
//! until each partition's HW covers its append ([`handle_async`]; see
//! [`crate::replication::delayed_produce`]); `min.insync.replicas` is checked before the append
//! (NOT_ENOUGH_REPLICAS, under the partition's lock with the append) and at completion
//! (NOT_ENOUGH_REPLICAS_AFTER_APPEND), as in Kafka.
//!
//! KIP-890: a transactional batch that would open a transaction in a partition is appended only
//! once the transaction coordinator confirmed the partition is in the producer's transaction
//! (Produce v3-v11) or added it (v12, transactions v2), with the verification guard taken
//! before asking ([`verify_transactional_batches`], [`crate::txn_verification`]).
//!
//! Produce v13 names topics by id (KIP-516): the ids are resolved to names first
//! ([`resolve_topic_ids`]) and the answer names them by id again.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use strom_controller::names;
use strom_protocol::batch::BatchIter;
use strom_protocol::kafka::messages::produce_response::{
    BatchIndexAndErrorMessage, PartitionProduceResponse, TopicProduceResponse,
};
use strom_protocol::kafka::messages::{ProduceRequest, ProduceResponse, TopicName};
use strom_protocol::ErrorCode;
use strom_storage::verification::VerificationGuard;
use strom_storage::{AppendOrigin, StorageError};
use uuid::Uuid;

use super::str_bytes;
use crate::partition::{Partition, PartitionError};
use crate::replication::{wait_for_acks, AckResult};
use crate::server::Broker;
use crate::txn_verification::{TopicPartition, TransactionSupportedOperation};

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
    mut req: ProduceRequest,
    version: i16,
    internal_topics_allowed: bool,
) -> ProduceResponse {
    if version < TOPIC_ID_VERSION {
        return handle_named(broker, req, version, internal_topics_allowed).await;
    }
    let (ids, unknown) = resolve_topic_ids(broker, &mut req);
    let mut resp = handle_named(broker, req, version, internal_topics_allowed).await;
    for t in &mut resp.responses {
        t.topic_id = ids.get(t.name.0.as_str()).copied().unwrap_or_default();
    }
    resp.responses.extend(unknown);
    resp
}

/// The first Produce version that names topics by id instead of by name (KIP-516).
const TOPIC_ID_VERSION: i16 = 13;

/// Produce v13+: each topic id is resolved to its name from the metadata image, so everything
/// after works on names as for older versions. A topic whose id is unknown (or the zero id) is
/// answered UNKNOWN_TOPIC_ID on every partition and appended nowhere, as Kafka's
/// `KafkaApis.handleProduceRequest` does for a request version that uses topic ids. Returns
/// the ids by name (for the response, which names topics by id too) and the unknown topics'
/// answers.
fn resolve_topic_ids(
    broker: &Arc<Broker>,
    req: &mut ProduceRequest,
) -> (HashMap<String, Uuid>, Vec<TopicProduceResponse>) {
    let image = broker.image();
    let mut ids = HashMap::new();
    let mut unknown = Vec::new();
    req.topic_data
        .retain_mut(|t| match image.topic_by_id(&t.topic_id) {
            Some(topic) => {
                t.name = TopicName(str_bytes(&topic.name));
                ids.insert(topic.name.clone(), topic.id);
                true
            }
            None => {
                let partitions = t
                    .partition_data
                    .iter()
                    .map(|p| partition_error(p.index, ErrorCode::UnknownTopicId))
                    .collect();
                unknown.push(
                    TopicProduceResponse::default()
                        .with_topic_id(t.topic_id)
                        .with_partition_responses(partitions),
                );
                false
            }
        });
    (ids, unknown)
}

fn partition_error(index: i32, code: ErrorCode) -> PartitionProduceResponse {
    PartitionProduceResponse::default()
        .with_index(index)
        .with_error_code(code.code())
        .with_base_offset(-1)
        .with_log_append_time_ms(-1)
        .with_log_start_offset(-1)
}

/// Produce once every topic is named.
async fn handle_named(
    broker: &Arc<Broker>,
    req: ProduceRequest,
    version: i16,
    internal_topics_allowed: bool,
) -> ProduceResponse {
    if req.transactional_id.is_none() && has_transactional_records(&req) {
        // Kafka authorizes transactional batches by the request's transactional id; without
        // one, nothing is written.
        return error_response(req, ErrorCode::TransactionalIdAuthorizationFailed);
    }
    // KIP-890: the transaction coordinator is asked first (no lock is held meanwhile); the
    // appends then carry the guards their verification started with.
    let mut verified = match verify_transactional_batches(broker, &req, version).await {
        Ok(v) => v,
        Err(code) => return error_response(req, code),
    };
    if verified
        .errors
        .values()
        .any(|c| *c == ErrorCode::ConcurrentTransactions)
        && wait_out_concurrent_transactions(broker, &req, version, &verified).await
    {
        // The coordinator now takes the partitions: verify again with fresh guards, taken
        // after every marker of the previous transaction has landed (a guard taken while one
        // was still in flight would be voided by it).
        verified = match verify_transactional_batches(broker, &req, version).await {
            Ok(v) => v,
            Err(code) => return error_response(req, code),
        };
    }
    let timeout = Duration::from_millis(req.timeout_ms.max(0) as u64);
    // Appends that may block on the disk (a roll, a flush) or on a partition busy with one run
    // off the async workers; the rest (nearly all) in place, without the hand-off's cost.
    let may_block = appends_may_block(broker, &req);
    let append = || append_all(broker, req, version, internal_topics_allowed, &verified);
    let (mut resp, pending) = if may_block {
        crate::disk_io::blocking(append)
    } else {
        append()
    };
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

/// CONCURRENT_TRANSACTIONS from the coordinator (usually the producer's previous transaction
/// still writing its markers) is asked again every `add.partitions.to.txn.retry.backoff.ms`
/// (20) for up to `add.partitions.to.txn.retry.backoff.max.ms` (100) before it is answered, as
/// Kafka's broker does, so the producer's next transaction does not wait out its own 100 ms
/// backoff. The questions here take no guard; true once the coordinator answered without it.
async fn wait_out_concurrent_transactions(
    broker: &Arc<Broker>,
    req: &ProduceRequest,
    version: i16,
    verified: &Verified,
) -> bool {
    let Some(transactional_id) = req.transactional_id.as_ref().map(|t| t.0.to_string()) else {
        return false;
    };
    let Some((producer_id, producer_epoch, _)) = req
        .topic_data
        .iter()
        .flat_map(|t| t.partition_data.iter())
        .find_map(|p| p.records.as_deref().and_then(transactional_producer))
    else {
        return false;
    };
    let partitions: Vec<TopicPartition> = verified
        .errors
        .iter()
        .filter(|(_, c)| **c == ErrorCode::ConcurrentTransactions)
        .map(|(tp, _)| tp.clone())
        .collect();
    let backoff = Duration::from_millis(broker.config.add_partitions_to_txn_retry_backoff_ms);
    let max = Duration::from_millis(broker.config.add_partitions_to_txn_retry_backoff_max_ms);
    let op = TransactionSupportedOperation::for_produce_version(version);
    let started = std::time::Instant::now();
    while started.elapsed() + backoff <= max {
        tokio::time::sleep(backoff).await;
        let errors = broker
            .add_partitions_to_txn_manager
            .verify_transaction(
                &transactional_id,
                producer_id,
                producer_epoch,
                &partitions,
                op,
            )
            .await;
        if !errors
            .values()
            .any(|c| *c == ErrorCode::ConcurrentTransactions)
        {
            return errors.is_empty();
        }
    }
    false
}

/// The outcome of a produce's KIP-890 verification: per partition, the guard its append must
/// carry, or the error that refuses it.
#[derive(Default)]
struct Verified {
    guards: HashMap<TopicPartition, VerificationGuard>,
    errors: HashMap<TopicPartition, ErrorCode>,
}

/// The producer of a partition's batch if it is transactional: (producer id, epoch, base
/// sequence).
fn transactional_producer(records: &[u8]) -> Option<(i64, i16, i32)> {
    let b = BatchIter::new(records).next()?.ok()?;
    (b.is_transactional() && b.producer_id() >= 0)
        .then(|| (b.producer_id(), b.producer_epoch(), b.base_sequence()))
}

/// Kafka's `handleProduceAppend` before the append: each partition whose transactional batch
/// would open a transaction here gets a verification guard, and the transaction coordinator is
/// asked about them all at once ([`crate::txn_verification`]). A request whose transactional
/// batches name more than one producer is refused whole (INVALID_PRODUCER_ID_MAPPING).
async fn verify_transactional_batches(
    broker: &Arc<Broker>,
    req: &ProduceRequest,
    version: i16,
) -> Result<Verified, ErrorCode> {
    let mut verified = Verified::default();
    let Some(transactional_id) = req.transactional_id.as_ref().map(|t| t.0.to_string()) else {
        return Ok(verified);
    };
    let mut producers: HashSet<(i64, i16)> = HashSet::new();
    let mut batches: Vec<(TopicPartition, i32)> = Vec::new();
    for t in &req.topic_data {
        for p in &t.partition_data {
            let Some((pid, epoch, seq)) = p.records.as_deref().and_then(transactional_producer)
            else {
                continue;
            };
            producers.insert((pid, epoch));
            batches.push(((t.name.0.to_string(), p.index), seq));
        }
    }
    if producers.len() > 1 {
        return Err(ErrorCode::InvalidProducerIdMapping);
    }
    let Some(&(producer_id, producer_epoch)) = producers.iter().next() else {
        return Ok(verified);
    };
    // With verification off a transactions-v1 produce is appended unchecked; a v2 one (Produce
    // v12) still adds its partitions, since its producer sends no AddPartitionsToTxn (Kafka's
    // ReplicaManager does the same).
    if !broker.config.transaction_partition_verification_enable
        && !TransactionSupportedOperation::for_produce_version(version).supports_epoch_bump()
    {
        return Ok(verified);
    }
    let now = crate::now_ms();
    let supports_epoch_bump =
        TransactionSupportedOperation::for_produce_version(version).supports_epoch_bump();
    for ((topic, index), seq) in batches {
        let guard = broker
            .replica_manager
            .get_partition_or_error(&topic, index)
            .and_then(|p| {
                p.maybe_start_transaction_verification(
                    producer_id,
                    seq,
                    producer_epoch,
                    supports_epoch_bump,
                    now,
                )
                .map_err(|e| e.error_code())
            });
        match guard {
            Ok(g) if g.is_sentinel() => {}
            Ok(g) => {
                verified.guards.insert((topic, index), g);
            }
            Err(code) => {
                verified.errors.insert((topic, index), code);
            }
        }
    }
    if verified.guards.is_empty() {
        return Ok(verified);
    }
    let partitions: Vec<TopicPartition> = verified.guards.keys().cloned().collect();
    let op = TransactionSupportedOperation::for_produce_version(version);
    tracing::debug!(transactional_id = %transactional_id, version, ?op, ?partitions, "verifying a transactional produce with the coordinator");
    let errors = broker
        .add_partitions_to_txn_manager
        .verify_transaction(
            &transactional_id,
            producer_id,
            producer_epoch,
            &partitions,
            op,
        )
        .await;
    if !errors.is_empty() {
        tracing::debug!(transactional_id = %transactional_id, ?errors, "produce partitions not verified");
    }
    verified.errors.extend(errors);
    Ok(verified)
}

/// Kafka's translation of a verification error for the producer (`ReplicaManager`'s
/// `postVerificationCallback`): retriable coordinator errors become NOT_ENOUGH_REPLICAS, which
/// every client retries without a metadata refresh; except CONCURRENT_TRANSACTIONS for a
/// transactions-v2 producer (Produce v12), which knows it (it is common while the previous
/// transaction completes).
fn verification_error(
    code: ErrorCode,
    op: TransactionSupportedOperation,
) -> (ErrorCode, Option<String>) {
    match code {
        ErrorCode::ConcurrentTransactions if op.supports_epoch_bump() => (code, None),
        ErrorCode::InvalidTxnState => (
            code,
            Some("Partition was not added to the transaction".to_string()),
        ),
        ErrorCode::ConcurrentTransactions
        | ErrorCode::NetworkException
        | ErrorCode::CoordinatorLoadInProgress
        | ErrorCode::CoordinatorNotAvailable
        | ErrorCode::NotCoordinator => (
            ErrorCode::NotEnoughReplicas,
            Some(format!(
                "Unable to verify the partition has been added to the transaction. Underlying error: {}",
                error_name(code)
            )),
        ),
        other => (other, None),
    }
}

/// Kafka's `Errors` name of `code` (as its `toString` shows in messages).
fn error_name(code: ErrorCode) -> String {
    let camel = format!("{code:?}");
    let mut out = String::new();
    for (i, ch) in camel.chars().enumerate() {
        if ch.is_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(ch.to_ascii_uppercase());
    }
    out
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
                .map(|p| partition_error(p.index, code))
                .collect();
            TopicProduceResponse::default()
                .with_name(t.name)
                .with_partition_responses(partitions)
        })
        .collect();
    ProduceResponse::default().with_responses(responses)
}

/// Whether any append of the request may block its thread ([`Partition::append_may_block`]).
fn appends_may_block(broker: &Broker, req: &ProduceRequest) -> bool {
    let now = crate::now_ms();
    req.topic_data.iter().any(|t| {
        t.partition_data.iter().any(|pd| {
            broker
                .replica_manager
                .get_partition_or_error(&t.name.0, pd.index)
                .is_ok_and(|p| p.append_may_block(pd.records.as_ref().map_or(0, |r| r.len()), now))
        })
    })
}

fn append_all(
    broker: &Arc<Broker>,
    req: ProduceRequest,
    version: i16,
    internal_topics_allowed: bool,
    verified: &Verified,
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
                    let tp = (name.clone(), pd.index);
                    if let Some(code) = verified.errors.get(&tp) {
                        let op = TransactionSupportedOperation::for_produce_version(version);
                        let (code, msg) = verification_error(*code, op);
                        return resp.with_error_code(code.code()).with_error_message(msg.map(|m| str_bytes(&m)));
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
                    let mut records = pd.records.unwrap_or_default();
                    match validate_records(&records, version) {
                        // Kafka appends the valid bytes only (`trimInvalidBytes`).
                        Ok(size) => records.truncate(size),
                        Err((code, msg)) => {
                            return resp
                                .with_error_code(code.code())
                                .with_error_message(msg.map(|m| str_bytes(&m)))
                        }
                    }
                    let guard = verified.guards.get(&tp).copied().unwrap_or(VerificationGuard::SENTINEL);
                    match partition.append_records_to_leader_verified(&records, AppendOrigin::Client, req.acks, leader_epoch, 0, guard, now) {
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
                            // Kafka words only a record validation failure; every other
                            // append error is answered by its code alone
                            // (`LogAppendResult.errorMessage`).
                            let (record_errors, message) = record_errors(&e);
                            resp.with_error_code(produce_error_code(&e).code())
                                .with_error_message(message.map(|m| str_bytes(&m)))
                                .with_record_errors(record_errors)
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

/// The records a refused batch was refused for (Kafka's `RecordValidationException`), which
/// produce v8+ reports one by one, and the message Kafka sends with them.
fn record_errors(e: &PartitionError) -> (Vec<BatchIndexAndErrorMessage>, Option<String>) {
    let errors = match e {
        PartitionError::Storage(
            StorageError::RecordErrors { errors, .. } | StorageError::TimestampErrors { errors },
        ) => errors,
        _ => return (Vec::new(), None),
    };
    let list = errors
        .iter()
        .map(|r| {
            BatchIndexAndErrorMessage::default()
                .with_batch_index(r.batch_index)
                .with_batch_index_error_message(Some(str_bytes(&r.message)))
        })
        .collect();
    (list, Some(e.to_string()))
}

/// A request-level refusal of a partition's records: the code, and the message Kafka sends
/// with it (only its `CorruptRecordException`s from reading the first batch's header carry
/// one).
type RecordsRefusal = (ErrorCode, Option<String>);

/// The size of the batch at the start of `rest` as Kafka's `ByteBufferLogInputStream` reads
/// it: None where Kafka's iteration ends (fewer bytes than a header or than the batch
/// declares), CORRUPT_MESSAGE for a length or magic no batch has.
fn next_batch(rest: &[u8]) -> Result<Option<(usize, i8)>, RecordsRefusal> {
    if rest.len() < 12 {
        return Ok(None);
    }
    let length = i32::from_be_bytes(rest[8..12].try_into().expect("4 bytes"));
    if length < 14 {
        return Err((
            ErrorCode::CorruptMessage,
            Some(format!(
                "Record size {length} is less than the minimum record overhead (14)"
            )),
        ));
    }
    if rest.len() < 17 {
        return Ok(None);
    }
    let magic = rest[16] as i8;
    if !(0..=2).contains(&magic) {
        return Err((
            ErrorCode::CorruptMessage,
            Some(format!("Invalid magic found in record: {magic}")),
        ));
    }
    let size = length as usize + 12;
    Ok((rest.len() >= size).then_some((size, magic)))
}

/// Kafka's `ProduceRequest.validateRecords` (every version): exactly one batch per partition,
/// of magic 2, and no zstd before v7. Returns the batch's size: bytes after it that do not
/// make a whole batch are dropped, as Kafka's iteration ignores them. Kafka answers its own
/// checks here by code alone.
fn validate_records(records: &[u8], version: i16) -> Result<usize, RecordsRefusal> {
    let Some((size, magic)) = next_batch(records)? else {
        return Err((ErrorCode::InvalidRecord, None));
    };
    if magic != 2 {
        return Err((ErrorCode::InvalidRecord, None));
    }
    let codec = i16::from_be_bytes([records[21], records[22]]) & 0x07;
    if version < 7 && codec == strom_protocol::compression::ZSTD {
        return Err((ErrorCode::UnsupportedCompressionType, None));
    }
    // Kafka 4.4 words a corrupt header of the first batch (read before its validation) but
    // not of a second one.
    match next_batch(&records[size..]) {
        Ok(None) => Ok(size),
        Ok(Some(_)) => Err((ErrorCode::InvalidRecord, None)),
        Err((code, _)) => Err((code, None)),
    }
}

#[cfg(test)]
mod verification_tests {
    use super::*;
    use TransactionSupportedOperation::*;

    #[test]
    fn verification_errors_as_kafka_answers_them() {
        assert_eq!(
            verification_error(ErrorCode::InvalidTxnState, DefaultError),
            (
                ErrorCode::InvalidTxnState,
                Some("Partition was not added to the transaction".to_string())
            )
        );
        assert_eq!(
            verification_error(ErrorCode::ConcurrentTransactions, GenericErrorSupported),
            (
                ErrorCode::NotEnoughReplicas,
                Some("Unable to verify the partition has been added to the transaction. Underlying error: CONCURRENT_TRANSACTIONS".to_string())
            )
        );
        // Transactions v2 producers are told CONCURRENT_TRANSACTIONS as it is.
        assert_eq!(
            verification_error(ErrorCode::ConcurrentTransactions, AddPartition),
            (ErrorCode::ConcurrentTransactions, None)
        );
        assert_eq!(
            verification_error(ErrorCode::NotCoordinator, AddPartition).0,
            ErrorCode::NotEnoughReplicas
        );
        assert_eq!(
            verification_error(ErrorCode::InvalidProducerEpoch, DefaultError),
            (ErrorCode::InvalidProducerEpoch, None)
        );
    }
}

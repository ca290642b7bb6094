//! The transactional producer's requests: FindCoordinator (TRANSACTION and GROUP keys),
//! InitProducerId with a transactional id, AddPartitionsToTxn (v3 and below, the client
//! versions), AddOffsetsToTxn, TxnOffsetCommit and EndTxn, each retried while Kafka's handlers
//! retry it (coordinator moved or loading, CONCURRENT_TRANSACTIONS, broken connection) up to a
//! deadline; what is left is classified as Java's handlers do (fatal, abortable, abortable with
//! an epoch bump) by [`classify`].

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use strom_protocol::kafka::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use strom_protocol::kafka::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use strom_protocol::kafka::messages::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, ApiKey, EndTxnRequest,
    FindCoordinatorRequest, GroupId, InitProducerIdRequest, ProducerId, TopicName, TransactionalId,
    TxnOffsetCommitRequest,
};
use strom_protocol::kafka::protocol::StrBytes;
use strom_protocol::ErrorCode;

use crate::client::Client;
use crate::connection::Connection;
use crate::error::{Error, Result};
use crate::group::{GroupMetadata, TopicPartition};
use crate::idempotence::{ProducerIdAndEpoch, Tp};

/// FindCoordinator key types.
pub const COORDINATOR_GROUP: i8 = 0;
pub const COORDINATOR_TRANSACTION: i8 = 1;

/// Java's backoff for CONCURRENT_TRANSACTIONS (`ADD_PARTITIONS_RETRY_BACKOFF_MS`): the previous
/// transaction's markers are usually written within milliseconds.
const CONCURRENT_TRANSACTIONS_BACKOFF: Duration = Duration::from_millis(20);

fn is_coordinator_moved(e: &Error) -> bool {
    matches!(
        e.code(),
        Some(ErrorCode::NotCoordinator | ErrorCode::CoordinatorNotAvailable)
    ) || matches!(
        e,
        Error::Io { .. } | Error::Disconnected(_) | Error::Timeout { .. }
    )
}

/// The errors Kafka's transactional handlers retry (`RetriableException`s, of which
/// CONCURRENT_TRANSACTIONS is one in Java although the protocol table does not say so).
pub fn is_retriable_txn_error(e: &Error) -> bool {
    e.is_retriable()
        || matches!(
            e.code(),
            Some(
                ErrorCode::ConcurrentTransactions
                    | ErrorCode::CoordinatorLoadInProgress
                    | ErrorCode::NotCoordinator
                    | ErrorCode::CoordinatorNotAvailable
                    | ErrorCode::UnknownTopicOrPartition
                    | ErrorCode::RequestTimedOut
            )
        )
}

/// Which request failed, for [`classify`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnApi {
    InitProducerId,
    AddPartitions,
    AddOffsets,
    TxnOffsetCommit,
    EndTxn,
}

/// What a non-retriable transactional request error does to the producer.
#[derive(Debug)]
pub enum TxnFailure {
    Fatal(Error),
    Abortable(Error),
    /// Abortable; the epoch is bumped when the transaction is aborted (Java's
    /// `abortableErrorIfPossible`).
    AbortableBump(Error),
}

fn fenced() -> Error {
    Error::Kafka {
        code: ErrorCode::ProducerFenced,
        message: Some(
            "There is a newer producer with the same transactionalId which fences the current one."
                .into(),
        ),
    }
}

/// Java's handler tables (InitProducerIdHandler, AddPartitionsToTxnHandler,
/// AddOffsetsToTxnHandler, TxnOffsetCommitHandler, EndTxnHandler) for an error that is not
/// retried.
pub fn classify(api: TxnApi, e: Error) -> TxnFailure {
    use ErrorCode::*;
    let Some(code) = e.code() else {
        // Out of retries on a network error or timeout: the application may abort (or call
        // init_transactions again); Java surfaces a TimeoutException the same way.
        return match e {
            Error::UnsupportedVersion(_) => TxnFailure::Fatal(e),
            _ => TxnFailure::Abortable(e),
        };
    };
    match code {
        ProducerFenced | InvalidProducerEpoch => TxnFailure::Fatal(fenced()),
        TransactionalIdAuthorizationFailed | ClusterAuthorizationFailed | UnsupportedVersion => {
            TxnFailure::Fatal(e)
        }
        InvalidTxnState | UnsupportedForMessageFormat => TxnFailure::Fatal(e),
        UnknownProducerId | InvalidProducerIdMapping
            if matches!(
                api,
                TxnApi::AddPartitions | TxnApi::AddOffsets | TxnApi::EndTxn
            ) =>
        {
            TxnFailure::AbortableBump(e)
        }
        TransactionAbortable
        | TopicAuthorizationFailed
        | GroupAuthorizationFailed
        | FencedInstanceId
        | UnknownMemberId
        | IllegalGeneration => TxnFailure::Abortable(e),
        _ => TxnFailure::Fatal(e),
    }
}

/// FindCoordinator for `key` of `key_type` to any broker, then a connection to it.
pub async fn find_coordinator(client: &Client, key_type: i8, key: &str) -> Result<Arc<Connection>> {
    let conn = client.any_connection().await?;
    let resp = conn
        .request(|version| {
            let mut req = FindCoordinatorRequest::default();
            req.key_type = key_type;
            let key = StrBytes::from_string(key.to_string());
            if version >= 4 {
                req.coordinator_keys = vec![key];
            } else {
                req.key = key;
            }
            req
        })
        .await?;
    let (code, message, host, port) = match resp.coordinators.first() {
        Some(c) => (
            c.error_code,
            c.error_message.as_ref().map(|m| m.to_string()),
            c.host.to_string(),
            c.port,
        ),
        None => (
            resp.error_code,
            resp.error_message.as_ref().map(|m| m.to_string()),
            resp.host.to_string(),
            resp.port,
        ),
    };
    if let Some(e) = Error::kafka(code, message) {
        return Err(e);
    }
    client.connection_to_addr(&format!("{host}:{port}")).await
}

/// What the transactional requests share: the client, the transactional id and the cached
/// transaction coordinator. Cheap to clone into the tasks that send the requests.
#[derive(Clone)]
pub struct TxnEnv {
    pub client: Client,
    pub transactional_id: String,
    pub transaction_timeout_ms: i32,
    pub retry_backoff: Duration,
    /// How long one request keeps being retried (`max.block.ms`).
    pub max_block: Duration,
    coordinator: Arc<Mutex<Option<Arc<Connection>>>>,
}

impl TxnEnv {
    pub fn new(
        client: Client,
        transactional_id: String,
        transaction_timeout_ms: i32,
        retry_backoff: Duration,
        max_block: Duration,
    ) -> Self {
        TxnEnv {
            client,
            transactional_id,
            transaction_timeout_ms,
            retry_backoff,
            max_block,
            coordinator: Arc::new(Mutex::new(None)),
        }
    }

    fn txn_id(&self) -> TransactionalId {
        TransactionalId(StrBytes::from_string(self.transactional_id.clone()))
    }

    async fn coordinator(&self) -> Result<Arc<Connection>> {
        let known = self.coordinator.lock().unwrap().clone();
        if let Some(c) = known.filter(|c| !c.is_closed()) {
            return Ok(c);
        }
        let c = find_coordinator(
            &self.client,
            COORDINATOR_TRANSACTION,
            &self.transactional_id,
        )
        .await?;
        *self.coordinator.lock().unwrap() = Some(c.clone());
        Ok(c)
    }

    /// The transaction coordinator's connection, when found already.
    pub fn known_coordinator(&self) -> Option<Arc<Connection>> {
        self.coordinator.lock().unwrap().clone()
    }

    fn forget_coordinator(&self) {
        self.coordinator.lock().unwrap().take();
    }

    /// Runs `op` against the transaction coordinator until it succeeds, fails with an error
    /// that is not retried, or `max_block` passed.
    async fn retrying<T, F, Fut>(&self, what: &str, mut op: F) -> Result<T>
    where
        F: FnMut(Arc<Connection>) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let deadline = Instant::now() + self.max_block;
        let mut attempt = 0u32;
        loop {
            let r = match self.coordinator().await {
                Ok(conn) => op(conn).await,
                Err(e) => Err(e),
            };
            let e = match r {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            if !is_retriable_txn_error(&e) || Instant::now() >= deadline {
                return Err(e);
            }
            if is_coordinator_moved(&e) {
                self.forget_coordinator();
            }
            let backoff = if e.code() == Some(ErrorCode::ConcurrentTransactions) {
                CONCURRENT_TRANSACTIONS_BACKOFF
            } else {
                let base = self.retry_backoff.as_millis() as u64;
                Duration::from_millis(base.saturating_mul(1 << attempt.min(4)).min(1000))
            };
            tracing::debug!(transactional_id = %self.transactional_id, what, error = %e, "retrying transactional request");
            tokio::time::sleep(backoff).await;
            attempt += 1;
        }
    }

    /// InitProducerId with the transactional id; `current` is the producer id and epoch being
    /// bumped (NONE for the first call).
    pub async fn init_producer_id(
        &self,
        current: ProducerIdAndEpoch,
    ) -> Result<ProducerIdAndEpoch> {
        self.retrying("InitProducerId", |conn| async move {
            let resp = conn
                .request(|version| {
                    let mut req = InitProducerIdRequest::default();
                    req.transactional_id = Some(self.txn_id());
                    req.transaction_timeout_ms = self.transaction_timeout_ms;
                    if version >= 3 {
                        req.producer_id = ProducerId(current.producer_id);
                        req.producer_epoch = current.epoch;
                    }
                    req
                })
                .await?;
            if let Some(e) = Error::kafka(resp.error_code, None) {
                return Err(e);
            }
            Ok(ProducerIdAndEpoch {
                producer_id: resp.producer_id.0,
                epoch: resp.producer_epoch,
            })
        })
        .await
    }

    /// AddPartitionsToTxn (client versions, at most 3). Returns the per-partition errors of
    /// the first answer without a retriable one.
    pub async fn add_partitions(
        &self,
        pid: ProducerIdAndEpoch,
        partitions: &[Tp],
    ) -> Result<Vec<(Tp, Option<Error>)>> {
        let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for (t, p) in partitions {
            by_topic.entry(t.as_str()).or_default().push(*p);
        }
        self.retrying("AddPartitionsToTxn", |conn| {
            let by_topic = &by_topic;
            async move {
                let resp = conn
                    .request(|_| {
                        let mut req = AddPartitionsToTxnRequest::default();
                        req.v3_and_below_transactional_id = self.txn_id();
                        req.v3_and_below_producer_id = ProducerId(pid.producer_id);
                        req.v3_and_below_producer_epoch = pid.epoch;
                        req.v3_and_below_topics = by_topic
                            .iter()
                            .map(|(t, ps)| {
                                let mut topic = AddPartitionsToTxnTopic::default();
                                topic.name = TopicName(StrBytes::from_string(t.to_string()));
                                topic.partitions = ps.clone();
                                topic
                            })
                            .collect();
                        req
                    })
                    .await?;
                let mut out = Vec::new();
                for t in &resp.results_by_topic_v3_and_below {
                    for p in &t.results_by_partition {
                        let e = Error::kafka(
                            p.partition_error_code,
                            ErrorCode::try_from_code(p.partition_error_code).map(|c| {
                                format!(
                                    "adding {}-{} to the transaction: {c}",
                                    t.name.0, p.partition_index
                                )
                            }),
                        );
                        out.push(((t.name.0.to_string(), p.partition_index), e));
                    }
                }
                // A retriable error on any partition retries the whole request, as Java does
                // (the others come back OPERATION_NOT_ATTEMPTED).
                if let Some(e) = out.iter().find_map(|(_, e)| {
                    e.as_ref()
                        .filter(|e| is_retriable_txn_error(e))
                        .map(crate::producer_batch::clone_error)
                }) {
                    return Err(e);
                }
                Ok(out)
            }
        })
        .await
    }

    /// AddOffsetsToTxn for `group_id` (transactions v1 only).
    pub async fn add_offsets(&self, pid: ProducerIdAndEpoch, group_id: &str) -> Result<()> {
        self.retrying("AddOffsetsToTxn", |conn| async move {
            let resp = conn
                .request(|_| {
                    let mut req = AddOffsetsToTxnRequest::default();
                    req.transactional_id = self.txn_id();
                    req.producer_id = ProducerId(pid.producer_id);
                    req.producer_epoch = pid.epoch;
                    req.group_id = GroupId(StrBytes::from_string(group_id.to_string()));
                    req
                })
                .await?;
            Error::kafka(resp.error_code, None).map_or(Ok(()), Err)
        })
        .await
    }

    /// EndTxn. With transactions v2 (EndTxn v5) the response carries the bumped producer id
    /// and epoch to use next.
    pub async fn end_txn(
        &self,
        pid: ProducerIdAndEpoch,
        commit: bool,
        tv2: bool,
    ) -> Result<Option<ProducerIdAndEpoch>> {
        self.retrying("EndTxn", |conn| async move {
            let mut version = conn.version_for(ApiKey::EndTxn)?;
            if !tv2 {
                version = version.min(4);
            }
            let mut req = EndTxnRequest::default();
            req.transactional_id = self.txn_id();
            req.producer_id = ProducerId(pid.producer_id);
            req.producer_epoch = pid.epoch;
            req.committed = commit;
            let resp = conn.send(&req, version).await?;
            if let Some(e) = Error::kafka(resp.error_code, None) {
                return Err(e);
            }
            Ok(
                (version >= 5 && resp.producer_id.0 >= 0).then_some(ProducerIdAndEpoch {
                    producer_id: resp.producer_id.0,
                    epoch: resp.producer_epoch,
                }),
            )
        })
        .await
    }

    /// TxnOffsetCommit to the group's coordinator with the consumer's generation, member id and
    /// instance id; partitions failing with a retriable error are sent again.
    pub async fn txn_offset_commit(
        &self,
        pid: ProducerIdAndEpoch,
        group: &GroupMetadata,
        offsets: &BTreeMap<TopicPartition, i64>,
        tv2: bool,
    ) -> Result<()> {
        let deadline = Instant::now() + self.max_block;
        let mut pending = offsets.clone();
        let mut coordinator: Option<Arc<Connection>> = None;
        let mut attempt = 0u32;
        loop {
            let r: Result<()> = async {
                let conn = match coordinator.clone().filter(|c| !c.is_closed()) {
                    Some(c) => c,
                    None => {
                        let c = find_coordinator(&self.client, COORDINATOR_GROUP, &group.group_id)
                            .await?;
                        coordinator = Some(c.clone());
                        c
                    }
                };
                let mut version = conn.version_for(ApiKey::TxnOffsetCommit)?;
                if !tv2 {
                    version = version.min(4);
                }
                let req = txn_offset_commit_request(
                    &self.transactional_id,
                    pid,
                    group,
                    &pending,
                    version,
                );
                let resp = conn.send(&req, version).await?;
                let mut retry: Option<Error> = None;
                for t in &resp.topics {
                    for p in &t.partitions {
                        let tp = TopicPartition::new(t.name.0.to_string(), p.partition_index);
                        match Error::kafka(
                            p.error_code,
                            ErrorCode::try_from_code(p.error_code).map(|c| {
                                format!("TxnOffsetCommit {}-{}: {c}", tp.topic, tp.partition)
                            }),
                        ) {
                            None => {
                                pending.remove(&tp);
                            }
                            Some(e) if is_retriable_txn_error(&e) => retry = Some(e),
                            Some(e) => return Err(e),
                        }
                    }
                }
                retry.map_or(Ok(()), Err)
            }
            .await;
            match r {
                Ok(()) if pending.is_empty() => return Ok(()),
                Ok(()) => {}
                Err(e) if is_retriable_txn_error(&e) && Instant::now() < deadline => {
                    if is_coordinator_moved(&e) {
                        coordinator = None;
                    }
                    tracing::debug!(group = %group.group_id, error = %e, "retrying TxnOffsetCommit");
                }
                Err(e) => return Err(e),
            }
            if Instant::now() >= deadline {
                return Err(Error::Protocol(format!(
                    "TxnOffsetCommit for group {} did not complete within max.block.ms",
                    group.group_id
                )));
            }
            let base = self.retry_backoff.as_millis() as u64;
            tokio::time::sleep(Duration::from_millis(
                base.saturating_mul(1 << attempt.min(4)).min(1000),
            ))
            .await;
            attempt += 1;
        }
    }
}

/// The TxnOffsetCommit request (member fields from v3).
pub fn txn_offset_commit_request(
    transactional_id: &str,
    pid: ProducerIdAndEpoch,
    group: &GroupMetadata,
    offsets: &BTreeMap<TopicPartition, i64>,
    version: i16,
) -> TxnOffsetCommitRequest {
    let mut req = TxnOffsetCommitRequest::default();
    req.transactional_id = TransactionalId(StrBytes::from_string(transactional_id.to_string()));
    req.group_id = GroupId(StrBytes::from_string(group.group_id.clone()));
    req.producer_id = ProducerId(pid.producer_id);
    req.producer_epoch = pid.epoch;
    if version >= 3 {
        req.generation_id = group.generation_id;
        req.member_id = StrBytes::from_string(group.member_id.clone());
        req.group_instance_id = group.group_instance_id.clone().map(StrBytes::from_string);
    }
    let mut topics: BTreeMap<&str, Vec<TxnOffsetCommitRequestPartition>> = BTreeMap::new();
    for (tp, offset) in offsets {
        let mut p = TxnOffsetCommitRequestPartition::default();
        p.partition_index = tp.partition;
        p.committed_offset = *offset;
        p.committed_leader_epoch = -1;
        topics.entry(tp.topic.as_str()).or_default().push(p);
    }
    req.topics = topics
        .into_iter()
        .map(|(t, ps)| {
            let mut topic = TxnOffsetCommitRequestTopic::default();
            topic.name = TopicName(StrBytes::from_string(t.to_string()));
            topic.partitions = ps;
            topic
        })
        .collect();
    req
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kafka(code: ErrorCode) -> Error {
        Error::Kafka {
            code,
            message: None,
        }
    }

    #[test]
    fn classification_follows_java_handlers() {
        let fatal = |api, c| matches!(classify(api, kafka(c)), TxnFailure::Fatal(_));
        assert!(fatal(TxnApi::EndTxn, ErrorCode::ProducerFenced));
        assert!(fatal(
            TxnApi::InitProducerId,
            ErrorCode::InvalidProducerEpoch
        ));
        assert!(fatal(
            TxnApi::AddPartitions,
            ErrorCode::TransactionalIdAuthorizationFailed
        ));
        assert!(fatal(TxnApi::EndTxn, ErrorCode::InvalidTxnState));
        // Fenced is reported as PRODUCER_FENCED whichever code the coordinator used.
        match classify(TxnApi::EndTxn, kafka(ErrorCode::InvalidProducerEpoch)) {
            TxnFailure::Fatal(e) => assert_eq!(e.code(), Some(ErrorCode::ProducerFenced)),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            classify(TxnApi::AddPartitions, kafka(ErrorCode::UnknownProducerId)),
            TxnFailure::AbortableBump(_)
        ));
        assert!(matches!(
            classify(TxnApi::TxnOffsetCommit, kafka(ErrorCode::IllegalGeneration)),
            TxnFailure::Abortable(_)
        ));
        assert!(matches!(
            classify(
                TxnApi::AddOffsets,
                kafka(ErrorCode::GroupAuthorizationFailed)
            ),
            TxnFailure::Abortable(_)
        ));
        assert!(is_retriable_txn_error(&kafka(
            ErrorCode::ConcurrentTransactions
        )));
        assert!(is_retriable_txn_error(&kafka(
            ErrorCode::CoordinatorLoadInProgress
        )));
        assert!(!is_retriable_txn_error(&kafka(ErrorCode::ProducerFenced)));
    }

    #[test]
    fn txn_offset_commit_carries_member_fields_from_v3() {
        let group = GroupMetadata {
            group_id: "g".into(),
            generation_id: 4,
            member_id: "m-1".into(),
            group_instance_id: Some("i".into()),
        };
        let mut offsets = BTreeMap::new();
        offsets.insert(TopicPartition::new("a".to_string(), 1), 10);
        offsets.insert(TopicPartition::new("a".to_string(), 0), 7);
        let pid = ProducerIdAndEpoch {
            producer_id: 3,
            epoch: 2,
        };
        let req = txn_offset_commit_request("tx", pid, &group, &offsets, 3);
        assert_eq!(req.generation_id, 4);
        assert_eq!(req.member_id.as_str(), "m-1");
        assert_eq!(req.group_instance_id.as_deref(), Some("i"));
        assert_eq!(req.topics.len(), 1);
        assert_eq!(req.topics[0].partitions.len(), 2);
        let old = txn_offset_commit_request("tx", pid, &group, &offsets, 2);
        assert_eq!(old.generation_id, -1);
    }
}

//! KIP-890 on the produce path: the partition leader asks the transaction coordinator of a
//! transactional id about the partitions a produce would open a transaction in (Kafka's
//! `AddPartitionsToTxnManager`). The question is AddPartitionsToTxn in its batched broker form
//! (v4+): `verify_only` for clients of transactions v1 (Produce v11 and older: "is the partition
//! in your ongoing transaction?"), an add for transactions-v2 clients (Produce v12: the broker
//! adds the partition itself, as the client sends no AddPartitionsToTxn).
//!
//! A coordinator on this node is called directly. A remote one gets the questions of all
//! produces for it batched into one request on a connection of its own
//! ([`Channel::TxnVerification`]): while a request to a node is in flight, new questions for
//! it queue and go together in the next one, as Kafka's sender thread does. Only one question
//! per transactional id may be queued: a newer one replaces it (the replaced produce gets
//! INVALID_PRODUCER_EPOCH if the newer one has a higher epoch, NETWORK_EXCEPTION if the same:
//! a client retry), an older one is refused at once.
//!
//! No lock is held while waiting: the queue's mutex only guards pushing and taking.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use strom_controller::MetadataImage;
use strom_protocol::kafka::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
};
use strom_protocol::kafka::messages::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, ApiKey, ProducerId, TopicName,
    TransactionalId,
};
use strom_protocol::kafka::protocol::StrBytes;
use strom_protocol::ErrorCode;
use strom_transaction_coordinator::config::TRANSACTION_STATE_TOPIC_NAME;
use strom_transaction_coordinator::TransactionCoordinatorService;
use tokio::sync::oneshot;

use crate::inter_broker::{Channel, InterBrokerClient};

/// A partition of a produce: (topic, partition).
pub type TopicPartition = (String, i32);

/// The errors of the partitions that were not verified (absent: verified).
pub type VerificationErrors = HashMap<TopicPartition, ErrorCode>;

/// The AddPartitionsToTxn version a leader sends: v5 marks a transactions-v2 add (the
/// coordinator takes the client's transaction version from it), and means nothing more for
/// a verification.
const ADD_PARTITIONS_BROKER_VERSION: i16 = 5;
/// The first version of the batched broker form.
const ADD_PARTITIONS_MIN_BROKER_VERSION: i16 = 4;

/// What a produce's client can take (Kafka's `TransactionSupportedOperation`, from the
/// Produce version).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransactionSupportedOperation {
    /// Produce v10 and older: TRANSACTION_ABORTABLE is unknown, INVALID_TXN_STATE stands in.
    DefaultError,
    /// Produce v11: the client aborts on TRANSACTION_ABORTABLE.
    GenericErrorSupported,
    /// Produce v12 (transactions v2): the broker adds the partition to the transaction.
    AddPartition,
}

impl TransactionSupportedOperation {
    pub fn for_produce_version(version: i16) -> Self {
        match version {
            v if v > 11 => Self::AddPartition,
            11 => Self::GenericErrorSupported,
            _ => Self::DefaultError,
        }
    }

    pub fn supports_epoch_bump(self) -> bool {
        self == Self::AddPartition
    }
}

type Answer = oneshot::Sender<VerificationErrors>;

/// One transactional id's question waiting for its node's next request.
struct Queued {
    txn: AddPartitionsToTxnTransaction,
    op: TransactionSupportedOperation,
    answer: Answer,
}

#[derive(Default)]
struct NodeQueue {
    /// By transactional id.
    queued: BTreeMap<String, Queued>,
    /// A sender task is running for the node (it takes what is queued until none is left).
    sending: bool,
}

pub struct AddPartitionsToTxnManager {
    node_id: i32,
    metadata: Arc<RwLock<Arc<MetadataImage>>>,
    inter_broker: Arc<InterBrokerClient>,
    coordinator: Arc<TransactionCoordinatorService>,
    request_timeout: Duration,
    nodes: Mutex<HashMap<i32, NodeQueue>>,
}

fn partitions_to(parts: &[TopicPartition], code: ErrorCode) -> VerificationErrors {
    parts.iter().map(|p| (p.clone(), code)).collect()
}

fn txn_partitions(txn: &AddPartitionsToTxnTransaction) -> Vec<TopicPartition> {
    txn.topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(move |p| (t.name.0.to_string(), *p)))
        .collect()
}

/// Kafka's `AddPartitionsToTxnHandler.onComplete` for one transaction's results: a fenced
/// producer is INVALID_PRODUCER_EPOCH to the producer, TRANSACTION_ABORTABLE is
/// INVALID_TXN_STATE for clients that do not know it.
fn map_partition_error(code: ErrorCode, op: TransactionSupportedOperation) -> ErrorCode {
    match code {
        ErrorCode::ProducerFenced => ErrorCode::InvalidProducerEpoch,
        ErrorCode::TransactionAbortable if op == TransactionSupportedOperation::DefaultError => {
            ErrorCode::InvalidTxnState
        }
        c => c,
    }
}

/// The per-transaction answers of a response: each transactional id's unverified partitions.
fn results_by_transaction(
    resp: &AddPartitionsToTxnResponse,
) -> Result<HashMap<String, Vec<(TopicPartition, i16)>>, ErrorCode> {
    if resp.error_code != 0 {
        // The client is not told about the cluster's authorization: the verification did not
        // complete.
        let code =
            ErrorCode::try_from_code(resp.error_code).unwrap_or(ErrorCode::UnknownServerError);
        return Err(if code == ErrorCode::ClusterAuthorizationFailed {
            ErrorCode::InvalidTxnState
        } else {
            code
        });
    }
    Ok(resp
        .results_by_transaction
        .iter()
        .map(|t| {
            let parts = t
                .topic_results
                .iter()
                .flat_map(|tr| {
                    tr.results_by_partition.iter().map(move |p| {
                        (
                            (tr.name.0.to_string(), p.partition_index),
                            p.partition_error_code,
                        )
                    })
                })
                .collect();
            (t.transactional_id.0.to_string(), parts)
        })
        .collect())
}

fn errors_of(
    parts: &[(TopicPartition, i16)],
    op: TransactionSupportedOperation,
) -> VerificationErrors {
    parts
        .iter()
        .filter(|(_, c)| *c != 0)
        .map(|(tp, c)| {
            let code = ErrorCode::try_from_code(*c).unwrap_or(ErrorCode::UnknownServerError);
            (tp.clone(), map_partition_error(code, op))
        })
        .collect()
}

impl AddPartitionsToTxnManager {
    pub fn new(
        node_id: i32,
        metadata: Arc<RwLock<Arc<MetadataImage>>>,
        inter_broker: Arc<InterBrokerClient>,
        coordinator: Arc<TransactionCoordinatorService>,
        request_timeout: Duration,
    ) -> Arc<Self> {
        Arc::new(Self {
            node_id,
            metadata,
            inter_broker,
            coordinator,
            request_timeout,
            nodes: Mutex::new(HashMap::new()),
        })
    }

    /// The node leading the transactional id's `__transaction_state` partition, with its
    /// address (Kafka's `getTransactionCoordinator`).
    fn coordinator_node(&self, transactional_id: &str) -> Option<(i32, String)> {
        let image = self.metadata.read().clone();
        let partition = self.coordinator.partition_for(transactional_id);
        let leader = image
            .topic(TRANSACTION_STATE_TOPIC_NAME)?
            .partitions
            .get(&partition)?
            .leader;
        let b = image.brokers.get(&leader).filter(|b| !b.fenced)?;
        Some((leader, format!("{}:{}", b.host, b.port)))
    }

    /// Asks the coordinator of `transactional_id` whether `partitions` are in the producer's
    /// ongoing transaction (or, for [`TransactionSupportedOperation::AddPartition`], adds
    /// them): the partitions not verified, with the error for the producer.
    pub async fn verify_transaction(
        self: &Arc<Self>,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[TopicPartition],
        op: TransactionSupportedOperation,
    ) -> VerificationErrors {
        let Some((node, addr)) = self.coordinator_node(transactional_id) else {
            return partitions_to(partitions, ErrorCode::CoordinatorNotAvailable);
        };
        let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for (t, p) in partitions {
            by_topic.entry(t.as_str()).or_default().push(*p);
        }
        let txn = AddPartitionsToTxnTransaction::default()
            .with_transactional_id(TransactionalId(StrBytes::from_string(
                transactional_id.to_string(),
            )))
            .with_producer_id(ProducerId(producer_id))
            .with_producer_epoch(producer_epoch)
            .with_verify_only(!op.supports_epoch_bump())
            .with_topics(
                by_topic
                    .into_iter()
                    .map(|(t, ps)| {
                        AddPartitionsToTxnTopic::default()
                            .with_name(TopicName(StrBytes::from_string(t.to_string())))
                            .with_partitions(ps)
                    })
                    .collect(),
            );
        if node == self.node_id {
            let req = AddPartitionsToTxnRequest::default().with_transactions(vec![txn]);
            let resp = self
                .coordinator
                .add_partitions_to_txn(req, ADD_PARTITIONS_BROKER_VERSION)
                .await;
            return match results_by_transaction(&resp) {
                Ok(by_txn) => by_txn
                    .get(transactional_id)
                    .map(|parts| errors_of(parts, op))
                    .unwrap_or_default(),
                Err(code) => partitions_to(partitions, code),
            };
        }
        let (tx, rx) = oneshot::channel();
        if let Some(refused) = self.enqueue(node, addr, txn, op, tx) {
            return refused;
        }
        // A dropped sender (the broker shutting down) is a network failure to the producer.
        crate::request_queue::parked();
        rx.await
            .unwrap_or_else(|_| partitions_to(partitions, ErrorCode::NetworkException))
    }

    /// Queues the question for `node`, starting its sender unless one runs; `Some` when the
    /// question is refused at once (an older epoch than the one queued).
    fn enqueue(
        self: &Arc<Self>,
        node: i32,
        addr: String,
        txn: AddPartitionsToTxnTransaction,
        op: TransactionSupportedOperation,
        answer: Answer,
    ) -> Option<VerificationErrors> {
        let id = txn.transactional_id.0.to_string();
        let start = {
            let mut nodes = self.nodes.lock();
            let q = nodes.entry(node).or_default();
            if let Some(existing) = q.queued.get(&id) {
                if existing.txn.producer_epoch > txn.producer_epoch {
                    return Some(partitions_to(
                        &txn_partitions(&txn),
                        ErrorCode::InvalidProducerEpoch,
                    ));
                }
                let code = if existing.txn.producer_epoch < txn.producer_epoch {
                    ErrorCode::InvalidProducerEpoch
                } else {
                    ErrorCode::NetworkException
                };
                let old = q.queued.remove(&id).expect("present");
                let _ = old
                    .answer
                    .send(partitions_to(&txn_partitions(&old.txn), code));
            }
            q.queued.insert(id, Queued { txn, op, answer });
            !std::mem::replace(&mut q.sending, true)
        };
        if start {
            let this = self.clone();
            tokio::spawn(async move { this.send_loop(node, addr).await });
        }
        None
    }

    /// Sends what is queued for `node`, one request at a time, until nothing is left.
    async fn send_loop(self: Arc<Self>, node: i32, addr: String) {
        loop {
            let batch: Vec<Queued> = {
                let mut nodes = self.nodes.lock();
                let q = nodes.entry(node).or_default();
                if q.queued.is_empty() {
                    q.sending = false;
                    return;
                }
                std::mem::take(&mut q.queued).into_values().collect()
            };
            self.send_batch(node, &addr, batch).await;
        }
    }

    async fn send_batch(&self, node: i32, addr: &str, batch: Vec<Queued>) {
        let fail_all = |batch: Vec<Queued>, code: Option<ErrorCode>| {
            for q in batch {
                let errors =
                    code.map_or_else(HashMap::new, |c| partitions_to(&txn_partitions(&q.txn), c));
                let _ = q.answer.send(errors);
            }
        };
        let conn = match self
            .inter_broker
            .connection(node, addr, Channel::TxnVerification, self.request_timeout)
            .await
        {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(node, error = %e, "cannot reach the transaction coordinator to verify partitions");
                return fail_all(batch, Some(ErrorCode::NetworkException));
            }
        };
        let version = match conn.broker_versions().range(ApiKey::AddPartitionsToTxn) {
            Some((_, max)) if max >= ADD_PARTITIONS_MIN_BROKER_VERSION => {
                max.min(ADD_PARTITIONS_BROKER_VERSION)
            }
            _ => {
                // As Kafka: a coordinator that cannot verify does not hold produces back.
                tracing::warn!(node, "the transaction coordinator cannot verify partitions; produce continues unverified");
                return fail_all(batch, None);
            }
        };
        tracing::debug!(
            node,
            transactions = batch.len(),
            version,
            "AddPartitionsToTxn to a transaction coordinator"
        );
        let req = AddPartitionsToTxnRequest::default()
            .with_transactions(batch.iter().map(|q| q.txn.clone()).collect());
        match conn.send(&req, version).await {
            Ok(resp) => match results_by_transaction(&resp) {
                Ok(mut by_txn) => {
                    for q in batch {
                        let parts = by_txn
                            .remove(q.txn.transactional_id.0.as_str())
                            .unwrap_or_default();
                        let _ = q.answer.send(errors_of(&parts, q.op));
                    }
                }
                Err(code) => fail_all(batch, Some(code)),
            },
            Err(e) => {
                tracing::warn!(node, error = %e, "AddPartitionsToTxn to verify partitions failed");
                self.inter_broker.disconnect(
                    node,
                    Channel::TxnVerification,
                    &conn,
                    "AddPartitionsToTxn failed",
                );
                fail_all(batch, Some(ErrorCode::NetworkException))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn produce_versions_map_to_supported_operations() {
        use TransactionSupportedOperation::*;
        assert_eq!(
            TransactionSupportedOperation::for_produce_version(3),
            DefaultError
        );
        assert_eq!(
            TransactionSupportedOperation::for_produce_version(10),
            DefaultError
        );
        assert_eq!(
            TransactionSupportedOperation::for_produce_version(11),
            GenericErrorSupported
        );
        assert_eq!(
            TransactionSupportedOperation::for_produce_version(12),
            AddPartition
        );
        assert!(AddPartition.supports_epoch_bump());
        assert!(!GenericErrorSupported.supports_epoch_bump());
    }

    #[test]
    fn coordinator_errors_become_producer_errors() {
        use TransactionSupportedOperation::*;
        assert_eq!(
            map_partition_error(ErrorCode::ProducerFenced, AddPartition),
            ErrorCode::InvalidProducerEpoch
        );
        assert_eq!(
            map_partition_error(ErrorCode::TransactionAbortable, DefaultError),
            ErrorCode::InvalidTxnState
        );
        assert_eq!(
            map_partition_error(ErrorCode::TransactionAbortable, GenericErrorSupported),
            ErrorCode::TransactionAbortable
        );
        assert_eq!(
            map_partition_error(ErrorCode::ConcurrentTransactions, DefaultError),
            ErrorCode::ConcurrentTransactions
        );
    }
}

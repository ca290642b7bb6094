//! Transaction administration (KIP-664): the admin calls behind `strom transactions` (Kafka's
//! `kafka-transactions.sh`), routed as Kafka's admin client routes them:
//!
//! - ListTransactions goes to every broker at once (each lists the transactions its
//!   coordinator partitions own), results kept per broker (`allByBrokerId`).
//! - DescribeTransactions goes to each transactional id's coordinator (FindCoordinator with
//!   key type TRANSACTION), one request per coordinator carrying all its ids.
//! - DescribeProducers goes to each partition's leader, or to one named broker (a replica).
//! - Aborting a transaction is Kafka's `Admin.abortTransaction`: a WriteTxnMarkers ABORT sent
//!   to the partition leader as the coordinator would send it, with the producer id, epoch and
//!   coordinator epoch read from DescribeProducers (Kafka's `AbortTransactionHandler`). It is
//!   for hanging transactions, which no coordinator will ever end.

use std::collections::BTreeMap;

use strom_protocol::kafka::messages::describe_producers_request::TopicRequest;
use strom_protocol::kafka::messages::describe_transactions_response::TransactionState;
use strom_protocol::kafka::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use strom_protocol::kafka::messages::{
    ApiKey, DescribeProducersRequest, DescribeTransactionsRequest, ListTransactionsRequest,
    ProducerId, TransactionalId, WriteTxnMarkersRequest,
};
use strom_protocol::kafka::protocol::StrBytes;
use strom_protocol::ErrorCode;

use crate::admin::Admin;
use crate::admin_groups::{
    by_topic, fan_out, kafka_err, retry_group, topic_name, version_for, Tp, TRANSACTION_KEY,
};
use crate::client::BrokerInfo;
use crate::error::{Error, Result};

/// One transaction as ListTransactions reports it (Kafka's `TransactionListing`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct TransactionListing {
    pub transactional_id: String,
    pub producer_id: i64,
    /// Kafka's state name ("Ongoing", "PrepareCommit", "CompleteAbort", ...).
    pub state: String,
}

/// The filters of ListTransactions (Kafka's `ListTransactionsOptions`); the default lists all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListTransactionsFilter {
    /// Only transactions in these states (Kafka's names); empty: any.
    pub states: Vec<String>,
    /// Only these producer ids; empty: any.
    pub producer_ids: Vec<i64>,
    /// Only transactions running longer than this (ms; ListTransactions v1+).
    pub duration_ms: Option<i64>,
    /// Only transactional ids matching this regular expression (ListTransactions v2+).
    pub transactional_id_pattern: Option<String>,
}

/// A described transactional id (Kafka's `TransactionDescription`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionDescription {
    pub coordinator_id: i32,
    pub transactional_id: String,
    pub state: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub transaction_timeout_ms: i64,
    /// When the current transaction started; `None` when there is none (-1 on the wire).
    pub transaction_start_time_ms: Option<i64>,
    /// The partitions in the transaction (in PrepareCommit/PrepareAbort: those still waiting
    /// for their marker), sorted.
    pub topic_partitions: Vec<Tp>,
}

/// An active producer of a partition (Kafka's `ProducerState`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerState {
    pub producer_id: i64,
    pub producer_epoch: i32,
    pub last_sequence: i32,
    pub last_timestamp: i64,
    /// The coordinator epoch of the producer's last marker; `None` before any (-1).
    pub coordinator_epoch: Option<i32>,
    /// The first offset of the producer's open transaction; `None` when none is open.
    pub current_transaction_start_offset: Option<i64>,
}

/// Which transaction to abort (Kafka's `AbortTransactionSpec`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AbortTransactionSpec {
    pub topic_partition: Tp,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub coordinator_epoch: i32,
}

impl std::fmt::Display for AbortTransactionSpec {
    // Kafka's `AbortTransactionSpec.toString`, which its tool prints in failures.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "AbortTransactionSpec(topicPartition={}-{}, producerId={}, producerEpoch={}, coordinatorEpoch={})",
            self.topic_partition.0,
            self.topic_partition.1,
            self.producer_id,
            self.producer_epoch,
            self.coordinator_epoch
        )
    }
}

/// The result of a per-partition call.
pub type PartitionResults<T> = BTreeMap<Tp, Result<T>>;

fn opt_nonneg_i64(v: i64) -> Option<i64> {
    (v >= 0).then_some(v)
}

fn opt_nonneg_i32(v: i32) -> Option<i32> {
    (v >= 0).then_some(v)
}

/// A DescribeTransactions answer for one id, as Kafka's `TransactionDescription`.
fn transaction_description(
    coordinator_id: i32,
    id: &str,
    t: &TransactionState,
) -> TransactionDescription {
    let mut tps: Vec<Tp> = t
        .topics
        .iter()
        .flat_map(|tp| {
            let name = tp.topic.0.to_string();
            tp.partitions.iter().map(move |&p| (name.clone(), p))
        })
        .collect();
    tps.sort();
    TransactionDescription {
        coordinator_id,
        transactional_id: id.to_string(),
        state: t.transaction_state.to_string(),
        producer_id: t.producer_id.0,
        producer_epoch: t.producer_epoch,
        transaction_timeout_ms: t.transaction_timeout_ms as i64,
        transaction_start_time_ms: opt_nonneg_i64(t.transaction_start_time_ms),
        topic_partitions: tps,
    }
}

impl Admin {
    /// ListTransactions on every broker at once; the listings of each broker (by node id),
    /// sorted by transactional id. Any broker's failure fails the call, as Kafka's
    /// `allByBrokerId`.
    pub async fn list_transactions(
        &self,
        filter: &ListTransactionsFilter,
    ) -> Result<BTreeMap<i32, Vec<TransactionListing>>> {
        self.client()
            .retry(|| self.client().refresh_metadata(Some(&[])))
            .await?;
        let brokers: Vec<BrokerInfo> = self.client().metadata().brokers.values().cloned().collect();
        let mut requests = Vec::new();
        for b in brokers {
            let addr = b.addr();
            let conn = self
                .client()
                .retry(|| self.client().connection_to_addr(&addr))
                .await?;
            let version = version_for(&conn, ApiKey::ListTransactions)?;
            if filter.duration_ms.is_some() && version < 1 {
                return Err(Error::UnsupportedVersion(
                    "ListTransactions (duration filter)",
                ));
            }
            if filter.transactional_id_pattern.is_some() && version < 2 {
                return Err(Error::UnsupportedVersion(
                    "ListTransactions (transactional id pattern filter)",
                ));
            }
            let mut req = ListTransactionsRequest::default();
            req.state_filters = filter
                .states
                .iter()
                .map(|s| StrBytes::from_string(s.clone()))
                .collect();
            req.producer_id_filters = filter.producer_ids.iter().map(|&p| ProducerId(p)).collect();
            req.duration_filter = filter.duration_ms.unwrap_or(-1);
            req.transactional_id_pattern = filter
                .transactional_id_pattern
                .as_ref()
                .map(|p| StrBytes::from_string(p.clone()));
            requests.push((b.node_id, conn, version, req));
        }
        let mut out = BTreeMap::new();
        for (node, resp) in fan_out(requests).await {
            let resp = resp?;
            if let Some(e) = Error::kafka(resp.error_code, None) {
                return Err(e);
            }
            let mut listings: Vec<TransactionListing> = resp
                .transaction_states
                .into_iter()
                .map(|t| TransactionListing {
                    transactional_id: t.transactional_id.0.to_string(),
                    producer_id: t.producer_id.0,
                    state: t.transaction_state.to_string(),
                })
                .collect();
            listings.sort();
            out.insert(node, listings);
        }
        Ok(out)
    }

    /// DescribeTransactions, each id at its coordinator (one request per coordinator carrying
    /// all its ids); one result per id. Ids whose coordinator moved or was loading, or that are
    /// in a concurrent transaction change, are looked up again (bounded by the retries).
    pub async fn describe_transactions(
        &self,
        transactional_ids: &[String],
    ) -> Result<BTreeMap<String, Result<TransactionDescription>>> {
        self.per_key_coordinator(
            TRANSACTION_KEY,
            transactional_ids,
            ApiKey::DescribeTransactions,
            |_, ids| {
                let mut req = DescribeTransactionsRequest::default();
                req.transactional_ids = ids
                    .iter()
                    .map(|i| TransactionalId(StrBytes::from_string(i.clone())))
                    .collect();
                vec![(ids.to_vec(), req)]
            },
            |broker, _, resp| {
                resp.transaction_states
                    .into_iter()
                    .map(|t| {
                        let id = t.transactional_id.0.to_string();
                        let r = match Error::kafka(t.error_code, None) {
                            // Kafka's DescribeTransactionsHandler names the id.
                            Some(Error::Kafka {
                                code: ErrorCode::TransactionalIdNotFound,
                                ..
                            }) => Err(Error::Kafka {
                                code: ErrorCode::TransactionalIdNotFound,
                                message: Some(format!(
                                    "DescribeTransactions request for transactionalId `{id}` failed because the ID could not be found"
                                )),
                            }),
                            Some(e) => Err(e),
                            None => Ok(transaction_description(broker.node_id, &id, &t)),
                        };
                        (id, r)
                    })
                    .collect()
            },
            // The coordinator answers CONCURRENT_TRANSACTIONS while it changes the id's
            // state; Kafka's handler retries it as it does a moved coordinator.
            |r| {
                retry_group(r)
                    || matches!(
                        r,
                        Err(Error::Kafka {
                            code: ErrorCode::ConcurrentTransactions,
                            ..
                        })
                    )
            },
        )
        .await
    }

    /// DescribeProducers: the active producers of each partition, asked of its leader, or of
    /// `broker_id` when given (any replica can answer for its copy). Partitions that do not
    /// exist or have no leader map to an error.
    pub async fn describe_producers(
        &self,
        partitions: &[Tp],
        broker_id: Option<i32>,
    ) -> Result<PartitionResults<Vec<ProducerState>>> {
        self.per_leader(
            partitions,
            broker_id,
            ApiKey::DescribeProducers,
            false,
            |tps| {
                let mut req = DescribeProducersRequest::default();
                req.topics = by_topic(tps)
                    .into_iter()
                    .map(|(t, ps)| {
                        let mut r = TopicRequest::default();
                        r.name = topic_name(&t);
                        r.partition_indexes = ps;
                        r
                    })
                    .collect();
                req
            },
            |resp| {
                resp.topics
                    .into_iter()
                    .flat_map(|t| {
                        let name = t.name.0.to_string();
                        t.partitions.into_iter().map(move |p| {
                            let r = match kafka_err(p.error_code, p.error_message.as_ref()) {
                                Some(e) => Err(e),
                                None => Ok(p
                                    .active_producers
                                    .iter()
                                    .map(|s| ProducerState {
                                        producer_id: s.producer_id.0,
                                        producer_epoch: s.producer_epoch,
                                        last_sequence: s.last_sequence,
                                        last_timestamp: s.last_timestamp,
                                        coordinator_epoch: opt_nonneg_i32(s.coordinator_epoch),
                                        current_transaction_start_offset: opt_nonneg_i64(
                                            s.current_txn_start_offset,
                                        ),
                                    })
                                    .collect()),
                            };
                            ((name.clone(), p.partition_index), r)
                        })
                    })
                    .collect()
            },
        )
        .await
    }

    /// Aborts a (hanging) transaction on one partition: WriteTxnMarkers ABORT at the
    /// partition's leader, retried on a new leader as Kafka's `AbortTransactionHandler` does
    /// (NOT_LEADER_OR_FOLLOWER, REPLICA_NOT_AVAILABLE, BROKER_NOT_AVAILABLE,
    /// UNKNOWN_TOPIC_OR_PARTITION); other errors fail it.
    pub async fn abort_transaction(&self, spec: &AbortTransactionSpec) -> Result<()> {
        let topic = spec.topic_partition.0.clone();
        let retries = self.client().config().retries;
        let mut attempt = 0;
        loop {
            let last = attempt >= retries;
            let r = self.abort_once(spec).await;
            match r {
                Err(Error::Kafka { code, .. })
                    if !last
                        && matches!(
                            code,
                            ErrorCode::NotLeaderOrFollower
                                | ErrorCode::ReplicaNotAvailable
                                | ErrorCode::BrokerNotAvailable
                                | ErrorCode::UnknownTopicOrPartition
                        ) =>
                {
                    self.client().invalidate_topic(&topic);
                }
                Err(e) if e.is_retriable() && !last && e.code().is_none() => {}
                Err(Error::Kafka { code, message }) => {
                    return Err(Error::Kafka {
                        code,
                        message: Some(message.unwrap_or_else(|| match code {
                            ErrorCode::InvalidProducerEpoch => format!(
                                "WriteTxnMarkers request with {spec} failed due an invalid producer epoch"
                            ),
                            ErrorCode::TransactionCoordinatorFenced => format!(
                                "WriteTxnMarkers request with {spec} failed since the provided coordinator epoch {} has been fenced by the active coordinator",
                                spec.coordinator_epoch
                            ),
                            ErrorCode::ClusterAuthorizationFailed => format!(
                                "WriteTxnMarkers request with {spec} failed due to cluster authorization error"
                            ),
                            _ => format!(
                                "WriteTxnMarkers request with {spec} failed due to unexpected error: {}",
                                Error::Kafka { code, message: None }
                            ),
                        })),
                    })
                }
                other => return other,
            }
            tokio::time::sleep(self.client().config().backoff(attempt)).await;
            attempt += 1;
        }
    }

    async fn abort_once(&self, spec: &AbortTransactionSpec) -> Result<()> {
        let (topic, partition) = &spec.topic_partition;
        let leader = match self
            .leaders(std::slice::from_ref(&spec.topic_partition))
            .await?
            .remove(&spec.topic_partition)
        {
            Some(r) => r?,
            None => return Err(Error::Protocol("no metadata".into())),
        };
        let conn = self.client().connection(leader).await?;
        let version = version_for(&conn, ApiKey::WriteTxnMarkers)?;
        let mut marker = WritableTxnMarker::default();
        marker.producer_id = ProducerId(spec.producer_id);
        marker.producer_epoch = spec.producer_epoch;
        marker.coordinator_epoch = spec.coordinator_epoch;
        marker.transaction_result = false;
        let mut t = WritableTxnMarkerTopic::default();
        t.name = topic_name(topic);
        t.partition_indexes = vec![*partition];
        marker.topics = vec![t];
        let mut req = WriteTxnMarkersRequest::default();
        req.markers = vec![marker];
        let resp = conn.send(&req, version).await?;
        let code = resp
            .markers
            .iter()
            .filter(|m| m.producer_id.0 == spec.producer_id)
            .flat_map(|m| m.topics.iter())
            .filter(|t| t.name.0.as_str() == topic)
            .flat_map(|t| t.partitions.iter())
            .find(|p| p.partition_index == *partition)
            .map(|p| p.error_code)
            .ok_or_else(|| {
                Error::Protocol(format!(
                    "WriteTxnMarkers response has no entry for {topic}-{partition}"
                ))
            })?;
        match Error::kafka(code, None) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

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

use std::collections::{BTreeMap, HashMap};

use strom_protocol::kafka::messages::describe_producers_request::TopicRequest;
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
    by_topic, coordinator_moved, dup, fan_out, kafka_err, topic_name, version_for, Tp,
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

    /// DescribeTransactions, each id at its coordinator; one result per id. Ids whose
    /// coordinator moved or was loading are looked up again (bounded by the retries).
    pub async fn describe_transactions(
        &self,
        transactional_ids: &[String],
    ) -> Result<BTreeMap<String, Result<TransactionDescription>>> {
        let mut out = BTreeMap::new();
        let mut pending: Vec<String> = transactional_ids.to_vec();
        pending.sort();
        pending.dedup();
        let retries = self.client().config().retries;
        let mut attempt = 0;
        while !pending.is_empty() {
            let last = attempt >= retries;
            let mut next = Vec::new();
            let mut by_node: BTreeMap<i32, (BrokerInfo, Vec<String>)> = BTreeMap::new();
            for (id, r) in self.find_coordinators(1, &pending).await? {
                match r {
                    Ok(b) => by_node
                        .entry(b.node_id)
                        .or_insert_with(|| (b.clone(), Vec::new()))
                        .1
                        .push(id),
                    Err(e) => {
                        out.insert(id, Err(e));
                    }
                }
            }
            let mut requests = Vec::new();
            for (_, (broker, ids)) in by_node {
                let conn = match self.client().connection_to_addr(&broker.addr()).await {
                    Ok(c) => c,
                    Err(e) => {
                        for id in ids {
                            if e.is_retriable() && !last {
                                next.push(id);
                            } else {
                                out.insert(id, Err(dup(&e)));
                            }
                        }
                        continue;
                    }
                };
                let version = version_for(&conn, ApiKey::DescribeTransactions)?;
                let mut req = DescribeTransactionsRequest::default();
                req.transactional_ids = ids
                    .iter()
                    .map(|i| TransactionalId(StrBytes::from_string(i.clone())))
                    .collect();
                requests.push(((broker, ids), conn, version, req));
            }
            for ((broker, ids), resp) in fan_out(requests).await {
                let resp = match resp {
                    Ok(r) => r,
                    Err(e) => {
                        for id in ids {
                            if e.is_retriable() && !last {
                                next.push(id);
                            } else {
                                out.insert(id, Err(dup(&e)));
                            }
                        }
                        continue;
                    }
                };
                let mut answered = Vec::new();
                for t in resp.transaction_states {
                    let id = t.transactional_id.0.to_string();
                    answered.push(id.clone());
                    match Error::kafka(t.error_code, None) {
                        Some(Error::Kafka { code, .. })
                            if !last
                                && (coordinator_moved(code)
                                    || code == ErrorCode::ConcurrentTransactions) =>
                        {
                            next.push(id)
                        }
                        Some(Error::Kafka {
                            code: ErrorCode::TransactionalIdNotFound,
                            ..
                        }) => {
                            // Kafka's DescribeTransactionsHandler names the id.
                            out.insert(
                                id.clone(),
                                Err(Error::Kafka {
                                    code: ErrorCode::TransactionalIdNotFound,
                                    message: Some(format!(
                                        "DescribeTransactions request for transactionalId `{id}` failed because the ID could not be found"
                                    )),
                                }),
                            );
                        }
                        Some(e) => {
                            out.insert(id, Err(e));
                        }
                        None => {
                            let mut tps: Vec<Tp> = t
                                .topics
                                .iter()
                                .flat_map(|tp| {
                                    let name = tp.topic.0.to_string();
                                    tp.partitions.iter().map(move |&p| (name.clone(), p))
                                })
                                .collect();
                            tps.sort();
                            out.insert(
                                id.clone(),
                                Ok(TransactionDescription {
                                    coordinator_id: broker.node_id,
                                    transactional_id: id,
                                    state: t.transaction_state.to_string(),
                                    producer_id: t.producer_id.0,
                                    producer_epoch: t.producer_epoch,
                                    transaction_timeout_ms: t.transaction_timeout_ms as i64,
                                    transaction_start_time_ms: opt_nonneg_i64(
                                        t.transaction_start_time_ms,
                                    ),
                                    topic_partitions: tps,
                                }),
                            );
                        }
                    }
                }
                for id in ids {
                    if !answered.contains(&id) {
                        let e = Error::Protocol(format!("no DescribeTransactions answer for {id}"));
                        out.insert(id, Err(e));
                    }
                }
            }
            pending = next;
            if !pending.is_empty() {
                tokio::time::sleep(self.client().config().backoff(attempt)).await;
                attempt += 1;
            }
        }
        Ok(out)
    }

    /// DescribeProducers: the active producers of each partition, asked of its leader, or of
    /// `broker_id` when given (any replica can answer for its copy). Partitions that do not
    /// exist or have no leader map to an error.
    pub async fn describe_producers(
        &self,
        partitions: &[Tp],
        broker_id: Option<i32>,
    ) -> Result<PartitionResults<Vec<ProducerState>>> {
        let mut out: PartitionResults<Vec<ProducerState>> = BTreeMap::new();
        let mut pending: Vec<Tp> = partitions.to_vec();
        pending.sort();
        pending.dedup();
        let retries = self.client().config().retries;
        let mut attempt = 0;
        while !pending.is_empty() {
            let last = attempt >= retries;
            let mut next = Vec::new();
            let mut by_broker: BTreeMap<i32, Vec<Tp>> = BTreeMap::new();
            match broker_id {
                Some(b) => {
                    by_broker.insert(b, std::mem::take(&mut pending));
                }
                None => {
                    let leaders = self.leaders(&pending).await?;
                    for tp in std::mem::take(&mut pending) {
                        match leaders.get(&tp) {
                            Some(Ok(l)) => by_broker.entry(*l).or_default().push(tp),
                            Some(Err(e)) if e.is_retriable() && !last => next.push(tp),
                            Some(Err(e)) => {
                                out.insert(tp, Err(dup(e)));
                            }
                            None => {
                                out.insert(tp, Err(Error::Protocol("no metadata".into())));
                            }
                        }
                    }
                }
            }
            let mut requests = Vec::new();
            for (node, tps) in by_broker {
                let conn = match self.client().connection(node).await {
                    Ok(c) => c,
                    Err(e) => {
                        for tp in tps {
                            if e.is_retriable() && !last {
                                next.push(tp);
                            } else {
                                out.insert(tp, Err(dup(&e)));
                            }
                        }
                        continue;
                    }
                };
                let version = version_for(&conn, ApiKey::DescribeProducers)?;
                let mut req = DescribeProducersRequest::default();
                req.topics = by_topic(&tps)
                    .into_iter()
                    .map(|(t, ps)| {
                        let mut r = TopicRequest::default();
                        r.name = topic_name(&t);
                        r.partition_indexes = ps;
                        r
                    })
                    .collect();
                requests.push((tps, conn, version, req));
            }
            for (tps, resp) in fan_out(requests).await {
                let resp = match resp {
                    Ok(r) => r,
                    Err(e) => {
                        for tp in tps {
                            if e.is_retriable() && !last {
                                next.push(tp);
                            } else {
                                out.insert(tp, Err(dup(&e)));
                            }
                        }
                        continue;
                    }
                };
                let mut answered = Vec::new();
                for t in resp.topics {
                    let name = t.name.0.to_string();
                    for p in t.partitions {
                        let tp = (name.clone(), p.partition_index);
                        answered.push(tp.clone());
                        match kafka_err(p.error_code, p.error_message.as_ref()) {
                            // A named broker is asked once: its answer is the answer.
                            Some(e) if e.is_retriable() && !last && broker_id.is_none() => {
                                if e.invalidates_metadata() {
                                    self.client().invalidate_topic(&name);
                                }
                                next.push(tp);
                            }
                            Some(e) => {
                                out.insert(tp, Err(e));
                            }
                            None => {
                                let states = p
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
                                    .collect();
                                out.insert(tp, Ok(states));
                            }
                        }
                    }
                }
                for tp in tps {
                    if !answered.contains(&tp) {
                        out.insert(
                            tp,
                            Err(Error::Protocol("no DescribeProducers answer".into())),
                        );
                    }
                }
            }
            pending = next;
            if !pending.is_empty() {
                tokio::time::sleep(self.client().config().backoff(attempt)).await;
                attempt += 1;
            }
        }
        Ok(out)
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

    /// The leader of each partition from fresh metadata; an error for partitions whose topic
    /// does not exist or that have no leader.
    async fn leaders(&self, partitions: &[Tp]) -> Result<HashMap<Tp, Result<i32>>> {
        let topics: Vec<String> = by_topic(partitions).into_keys().collect();
        let md = self
            .client()
            .retry(|| self.client().refresh_metadata(Some(&topics)))
            .await?;
        let mut leaders: HashMap<Tp, i32> = HashMap::new();
        let mut topic_errors: HashMap<String, i16> = HashMap::new();
        for t in &md.topics {
            let name = t.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default();
            if t.error_code != 0 {
                topic_errors.insert(name.clone(), t.error_code);
            }
            for p in &t.partitions {
                leaders.insert((name.clone(), p.partition_index), p.leader_id.0);
            }
        }
        let mut out = HashMap::new();
        for tp in partitions {
            let r = match leaders.get(tp) {
                Some(&l) if l >= 0 => Ok(l),
                Some(_) => Err(Error::Kafka {
                    code: ErrorCode::LeaderNotAvailable,
                    message: None,
                }),
                None => {
                    let code = topic_errors
                        .get(&tp.0)
                        .copied()
                        .unwrap_or(ErrorCode::UnknownTopicOrPartition.code());
                    Err(Error::kafka(code, None).unwrap_or(Error::Kafka {
                        code: ErrorCode::UnknownTopicOrPartition,
                        message: None,
                    }))
                }
            };
            out.insert(tp.clone(), r);
        }
        Ok(out)
    }
}

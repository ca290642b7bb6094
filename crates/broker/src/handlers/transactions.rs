//! The transaction coordinator's APIs (Kafka's `KafkaApis` handlers for them): the requests go
//! to the service (crate `strom-transaction-coordinator`); what needs the broker's metadata is
//! decided here: AddPartitionsToTxn refuses partitions of topics that do not exist
//! (UNKNOWN_TOPIC_OR_PARTITION, the rest of that transaction OPERATION_NOT_ATTEMPTED), as Kafka
//! does before asking the coordinator.

use std::sync::Arc;

use strom_protocol::kafka::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use strom_protocol::kafka::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use strom_protocol::kafka::messages::*;
use strom_protocol::ErrorCode;

use crate::server::Broker;

pub async fn init_producer_id(
    broker: &Arc<Broker>,
    req: InitProducerIdRequest,
    version: i16,
) -> InitProducerIdResponse {
    broker
        .transaction_coordinator
        .init_producer_id(req, version)
        .await
}

/// Partitions of `topics` that do not exist in this broker's metadata.
fn unknown_partitions(broker: &Broker, topics: &[AddPartitionsToTxnTopic]) -> Vec<(String, i32)> {
    let image = broker.image();
    topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(move |p| (t.name.0.to_string(), *p)))
        .filter(|(t, p)| {
            image
                .topic(t)
                .is_none_or(|ti| !ti.partitions.contains_key(p))
        })
        .collect()
}

/// Every partition of `topics` answered with `code`, except the `unknown` ones.
fn refused(
    topics: &[AddPartitionsToTxnTopic],
    unknown: &[(String, i32)],
) -> Vec<AddPartitionsToTxnTopicResult> {
    topics
        .iter()
        .map(|t| {
            AddPartitionsToTxnTopicResult::default()
                .with_name(t.name.clone())
                .with_results_by_partition(
                    t.partitions
                        .iter()
                        .map(|p| {
                            let code = if unknown.contains(&(t.name.0.to_string(), *p)) {
                                ErrorCode::UnknownTopicOrPartition
                            } else {
                                ErrorCode::OperationNotAttempted
                            };
                            AddPartitionsToTxnPartitionResult::default()
                                .with_partition_index(*p)
                                .with_partition_error_code(code.code())
                        })
                        .collect(),
                )
        })
        .collect()
}

pub async fn add_partitions_to_txn(
    broker: &Arc<Broker>,
    mut req: AddPartitionsToTxnRequest,
    version: i16,
) -> AddPartitionsToTxnResponse {
    let coordinator = &broker.transaction_coordinator;
    if version < 4 {
        let unknown = unknown_partitions(broker, &req.v3_and_below_topics);
        if !unknown.is_empty() {
            return AddPartitionsToTxnResponse::default()
                .with_results_by_topic_v3_and_below(refused(&req.v3_and_below_topics, &unknown));
        }
        return coordinator.add_partitions_to_txn(req, version).await;
    }
    // Transactions naming unknown partitions are answered here; the rest go to the service.
    let mut refused_results = Vec::new();
    req.transactions.retain(|t| {
        let unknown = unknown_partitions(broker, &t.topics);
        if unknown.is_empty() {
            return true;
        }
        refused_results.push(
            AddPartitionsToTxnResult::default()
                .with_transactional_id(t.transactional_id.clone())
                .with_topic_results(refused(&t.topics, &unknown)),
        );
        false
    });
    let mut resp = if req.transactions.is_empty() {
        AddPartitionsToTxnResponse::default()
    } else {
        coordinator.add_partitions_to_txn(req, version).await
    };
    resp.results_by_transaction.extend(refused_results);
    resp
}

pub async fn add_offsets_to_txn(
    broker: &Arc<Broker>,
    req: AddOffsetsToTxnRequest,
    version: i16,
) -> AddOffsetsToTxnResponse {
    broker
        .transaction_coordinator
        .add_offsets_to_txn(req, version)
        .await
}

pub async fn end_txn(broker: &Arc<Broker>, req: EndTxnRequest, version: i16) -> EndTxnResponse {
    // Which protocol clients use (v5+: transactions v2) shows in the debug log.
    tracing::debug!(transactional_id = %req.transactional_id.0, version, committed = req.committed, "EndTxn");
    broker.transaction_coordinator.end_txn(req, version).await
}

pub async fn describe_transactions(
    broker: &Arc<Broker>,
    req: DescribeTransactionsRequest,
) -> DescribeTransactionsResponse {
    broker
        .transaction_coordinator
        .describe_transactions(req)
        .await
}

pub async fn list_transactions(
    broker: &Arc<Broker>,
    req: ListTransactionsRequest,
) -> ListTransactionsResponse {
    broker.transaction_coordinator.list_transactions(req).await
}

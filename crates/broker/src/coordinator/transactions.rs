//! The transaction coordinator inside the broker (the service is crate
//! `strom-transaction-coordinator`): it writes and loads `__transaction_state` through the
//! same [`CoordinatorPartitions`] as the group coordinator, follows the metadata
//! ([`TransactionCoordinatorPublisher`]: elected / resigned as this broker starts or stops
//! leading a `__transaction_state` partition, every HW move forwarded), gets producer ids from
//! the controller ([`BrokerProducerIds`]) and sends transaction markers to partition leaders
//! ([`BrokerMarkerChannel`], Kafka's `TransactionMarkerChannelManager`: WriteTxnMarkers over a
//! connection of its own per leader). `__transaction_state` is created on the first
//! FindCoordinator for a transactional id ([`transaction_state_topic_spec`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use strom_controller::{CreateTopicSpec, MetadataDelta, MetadataImage};
use strom_protocol::kafka::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use strom_protocol::kafka::messages::{ApiKey, ProducerId, TopicName, WriteTxnMarkersRequest};
use strom_protocol::kafka::protocol::StrBytes;
use strom_protocol::memory_records::TxnResult;
use strom_protocol::ErrorCode;
use strom_transaction_coordinator::config::{
    TransactionCoordinatorConfig, TRANSACTION_STATE_TOPIC_NAME,
};
use strom_transaction_coordinator::markers::{
    BoxFuture, MarkerChannel, MarkerOutcome, ProducerIdSource, TxnMarkerEntry,
};
use strom_transaction_coordinator::metadata::TxnPartition;
use strom_transaction_coordinator::TransactionCoordinatorService;

use super::{CoordinatorElections, CoordinatorPartitions, PartitionCoordinator};
use crate::inter_broker::{Channel, InterBrokerClient};
use crate::metadata_loader::MetadataPublisher;
use crate::producer_ids::ProducerIdManager;
use crate::replica_manager::ReplicaManager;

/// The transaction coordinator's broker settings with Kafka 4.4's types (3 INT, 4 SHORT) and
/// defaults (`TransactionLogConfig`, `TransactionStateManagerConfig`; equal to
/// `TransactionCoordinatorConfig::default()`), for DescribeConfigs of the broker.
pub const BROKER_CONFIGS: &[(&str, i8, &str)] = &[
    (
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        3,
        "10000",
    ),
    ("transaction.max.timeout.ms", 3, "900000"),
    (
        "transaction.remove.expired.transaction.cleanup.interval.ms",
        3,
        "3600000",
    ),
    ("transaction.state.log.min.isr", 3, "2"),
    ("transaction.state.log.num.partitions", 3, "50"),
    ("transaction.state.log.replication.factor", 4, "3"),
    ("transaction.state.log.segment.bytes", 3, "104857600"),
    ("transactional.id.expiration.ms", 3, "604800000"),
];

/// WriteTxnMarkers v1, and v2 (KIP-890: with the transaction version), sent when the leader
/// serves it.
const WRITE_TXN_MARKERS_V1: i16 = 1;
const WRITE_TXN_MARKERS_V2: i16 = 2;

/// Starts the transaction coordinator over `replica_manager`'s partitions.
pub fn start_transaction_coordinator(
    props: &BTreeMap<String, String>,
    replica_manager: &Arc<ReplicaManager>,
    producer_ids: Arc<ProducerIdManager>,
    markers: Arc<BrokerMarkerChannel>,
) -> Arc<TransactionCoordinatorService> {
    let io = CoordinatorPartitions::new(replica_manager.clone());
    TransactionCoordinatorService::new(
        TransactionCoordinatorConfig::from_props(props),
        io.clone(),
        io,
        Arc::new(BrokerProducerIds(producer_ids)),
        markers,
    )
}

/// Producer ids from the controller's blocks.
pub struct BrokerProducerIds(pub Arc<ProducerIdManager>);

impl ProducerIdSource for BrokerProducerIds {
    fn generate_producer_id(&self) -> BoxFuture<'_, Result<i64, ErrorCode>> {
        // Never waits for the controller: without a ready block the client is told to retry.
        let id = self.0.generate_producer_id().map_err(|e| e.code());
        Box::pin(std::future::ready(id))
    }
}

/// `__transaction_state` as Kafka creates it on first use: the configured partition count,
/// replication factor at most the brokers that can host a replica now, its topic configs.
pub fn transaction_state_topic_spec(
    config: &TransactionCoordinatorConfig,
    image: &MetadataImage,
) -> CreateTopicSpec {
    let usable = image
        .brokers
        .values()
        .filter(|b| !b.fenced && !b.in_controlled_shutdown)
        .count();
    let rf = config.effective_replication_factor(usable);
    CreateTopicSpec {
        name: TRANSACTION_STATE_TOPIC_NAME.to_string(),
        num_partitions: config.transaction_state_log_num_partitions,
        replication_factor: rf,
        assignments: Vec::new(),
        configs: config
            .topic_configs(rf)
            .into_iter()
            .map(|(k, v)| (k, Some(v)))
            .collect(),
    }
}

impl PartitionCoordinator for TransactionCoordinatorService {
    const TOPIC: &'static str = TRANSACTION_STATE_TOPIC_NAME;
    fn on_elected(&self, partition: i32, leader_epoch: i32) {
        TransactionCoordinatorService::on_elected(self, partition, leader_epoch)
    }
    fn on_resigned(&self, partition: i32, leader_epoch: Option<i32>) {
        TransactionCoordinatorService::on_resigned(self, partition, leader_epoch)
    }
    fn on_high_watermark(&self, partition: i32, high_watermark: i64) {
        TransactionCoordinatorService::on_high_watermark(self, partition, high_watermark)
    }
}

/// Follows the metadata for the transaction coordinator (Kafka's `BrokerMetadataPublisher`
/// calling `TransactionCoordinator.onElection` / `onResignation`).
pub struct TransactionCoordinatorPublisher {
    elections: CoordinatorElections<TransactionCoordinatorService>,
    service: Arc<TransactionCoordinatorService>,
}

impl TransactionCoordinatorPublisher {
    pub fn new(
        node_id: i32,
        service: Arc<TransactionCoordinatorService>,
        replica_manager: Arc<ReplicaManager>,
    ) -> Arc<Self> {
        Arc::new(Self {
            elections: CoordinatorElections::new(node_id, service.clone(), replica_manager),
            service,
        })
    }
}

impl MetadataPublisher for TransactionCoordinatorPublisher {
    fn name(&self) -> &str {
        "TransactionCoordinatorPublisher"
    }

    fn on_metadata_update(&self, delta: &MetadataDelta, image: &Arc<MetadataImage>) {
        // The topic's own partition count (Kafka's `transactionTopicPartitionCount`) is set
        // before any of its partitions is elected below.
        if let Some(t) = image.topic(TRANSACTION_STATE_TOPIC_NAME) {
            self.service.set_partition_count(t.partitions.len() as i32);
        }
        self.elections.update(delta, image);
    }
}

/// Sends WriteTxnMarkers to partition leaders (Kafka's `TransactionMarkerChannelManager`):
/// the partitions are grouped by their leader in this broker's metadata image, one request per
/// leader on the [`Channel::TxnMarkers`] connection (markers never queue behind replication or
/// controller traffic). A partition whose topic is gone is reported deleted; one without a
/// live leader, or whose leader could not be reached, is retried by the service.
pub struct BrokerMarkerChannel {
    metadata: Arc<RwLock<Arc<MetadataImage>>>,
    inter_broker: Arc<InterBrokerClient>,
    request_timeout: Duration,
}

impl BrokerMarkerChannel {
    pub fn new(
        metadata: Arc<RwLock<Arc<MetadataImage>>>,
        inter_broker: Arc<InterBrokerClient>,
        request_timeout: Duration,
    ) -> Arc<Self> {
        Arc::new(Self {
            metadata,
            inter_broker,
            request_timeout,
        })
    }

    /// One leader's markers: its per-partition answers, or the request's failure for all.
    async fn send_to(
        &self,
        leader: i32,
        addr: &str,
        entry: &TxnMarkerEntry,
        partitions: &[TxnPartition],
    ) -> Vec<(TxnPartition, MarkerOutcome)> {
        let all = |code: ErrorCode| -> Vec<(TxnPartition, MarkerOutcome)> {
            partitions
                .iter()
                .map(|p| (p.clone(), MarkerOutcome::Error(code)))
                .collect()
        };
        let conn = match self
            .inter_broker
            .connection(leader, addr, Channel::TxnMarkers, self.request_timeout)
            .await
        {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(leader, error = %e, "cannot reach a partition leader for markers");
                return all(ErrorCode::NetworkException);
            }
        };
        let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for (t, p) in partitions {
            by_topic.entry(t.as_str()).or_default().push(*p);
        }
        let version = match conn.broker_versions().range(ApiKey::WriteTxnMarkers) {
            Some((_, max)) if max >= WRITE_TXN_MARKERS_V2 => WRITE_TXN_MARKERS_V2,
            _ => WRITE_TXN_MARKERS_V1,
        };
        let req =
            WriteTxnMarkersRequest::default().with_markers(vec![WritableTxnMarker::default()
                .with_producer_id(ProducerId(entry.producer_id))
                .with_producer_epoch(entry.producer_epoch)
                .with_transaction_result(entry.result == TxnResult::Commit)
                .with_coordinator_epoch(entry.coordinator_epoch)
                // v1 has no such field (the leader takes the original protocol).
                .with_transaction_version(if version >= WRITE_TXN_MARKERS_V2 {
                    entry.transaction_version as i8
                } else {
                    0
                })
                .with_topics(
                    by_topic
                        .into_iter()
                        .map(|(t, ps)| {
                            WritableTxnMarkerTopic::default()
                                .with_name(TopicName(StrBytes::from_string(t.to_string())))
                                .with_partition_indexes(ps)
                        })
                        .collect(),
                )]);
        match conn.send(&req, version).await {
            Ok(resp) => {
                let mut answered: HashMap<TxnPartition, i16> = HashMap::new();
                for m in resp.markers {
                    for t in m.topics {
                        for p in t.partitions {
                            answered
                                .insert((t.name.0.to_string(), p.partition_index), p.error_code);
                        }
                    }
                }
                partitions
                    .iter()
                    .map(|tp| {
                        let outcome = match answered.get(tp) {
                            Some(0) => MarkerOutcome::Written,
                            Some(c) => MarkerOutcome::Error(
                                ErrorCode::try_from_code(*c)
                                    .unwrap_or(ErrorCode::UnknownServerError),
                            ),
                            // Not answered: asked again on the next round.
                            None => MarkerOutcome::Error(ErrorCode::NetworkException),
                        };
                        (tp.clone(), outcome)
                    })
                    .collect()
            }
            Err(strom_client::Error::UnsupportedVersion(api)) => {
                tracing::error!(
                    leader,
                    api,
                    "the partition leader does not serve WriteTxnMarkers"
                );
                all(ErrorCode::UnsupportedVersion)
            }
            Err(e) => {
                tracing::debug!(leader, error = %e, "WriteTxnMarkers failed; retried");
                self.inter_broker.disconnect(
                    leader,
                    Channel::TxnMarkers,
                    &conn,
                    "WriteTxnMarkers failed",
                );
                all(ErrorCode::NetworkException)
            }
        }
    }
}

impl MarkerChannel for BrokerMarkerChannel {
    fn write_markers(
        &self,
        entry: TxnMarkerEntry,
    ) -> BoxFuture<'_, Vec<(TxnPartition, MarkerOutcome)>> {
        Box::pin(async move {
            let image = self.metadata.read().clone();
            let mut out = Vec::new();
            let mut by_leader: BTreeMap<(i32, String), Vec<TxnPartition>> = BTreeMap::new();
            for tp in &entry.partitions {
                let Some(reg) = image.topic(&tp.0).and_then(|t| t.partitions.get(&tp.1)) else {
                    out.push((tp.clone(), MarkerOutcome::TopicDeleted));
                    continue;
                };
                match image.brokers.get(&reg.leader).filter(|b| !b.fenced) {
                    Some(b) if reg.leader >= 0 => by_leader
                        .entry((reg.leader, format!("{}:{}", b.host, b.port)))
                        .or_default()
                        .push(tp.clone()),
                    _ => out.push((
                        tp.clone(),
                        MarkerOutcome::Error(ErrorCode::LeaderNotAvailable),
                    )),
                }
            }
            for ((leader, addr), parts) in by_leader {
                out.extend(self.send_to(leader, &addr, &entry, &parts).await);
            }
            out
        })
    }
}

#[cfg(test)]
#[path = "transactions_tests.rs"]
mod tests;

//! The transaction coordinator's API (Kafka's `TransactionCoordinator`): the broker's handlers
//! call these methods with decoded requests and send back what they return. Each
//! transactional id is routed to the shard of its `__transaction_state` partition
//! (`abs(transactionalId.hashCode()) % transaction.state.log.num.partitions`).
//!
//! The broker drives the lifecycle as for the group coordinator: [`on_elected`] /
//! [`on_resigned`] as it gains or loses leadership of a partition, [`on_high_watermark`] as a
//! partition's high watermark moves.
//!
//! After a Prepare state is committed, the transaction's markers are sent through the
//! [`MarkerChannel`] and its Complete state written by a task of the service (the completion
//! loop), whatever became of the request that started it: EndTxn, an InitProducerId that
//! aborted an open transaction, a timeout, or the load of a partition that held it.
//!
//! [`on_elected`]: TransactionCoordinatorService::on_elected
//! [`on_resigned`]: TransactionCoordinatorService::on_resigned
//! [`on_high_watermark`]: TransactionCoordinatorService::on_high_watermark

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use strom_coordinator_common::runtime::{
    CoordinatorError, CoordinatorLoader, CoordinatorRuntime, PartitionWriter, TopicPartition,
};
use strom_coordinator_common::timer::{Clock, TokioClock};
use strom_group_coordinator::topic::{partition_for, GROUP_METADATA_TOPIC_NAME};
use strom_protocol::kafka::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use strom_protocol::kafka::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use strom_protocol::kafka::messages::describe_transactions_response::{self, TopicData};
use strom_protocol::kafka::messages::list_transactions_response;
use strom_protocol::kafka::messages::*;
use strom_protocol::kafka::protocol::StrBytes;
use strom_protocol::memory_records::TxnResult;
use strom_protocol::ErrorCode;
use tokio::sync::mpsc;

use crate::config::{TransactionCoordinatorConfig, TRANSACTION_STATE_TOPIC_NAME};
use crate::markers::{send_markers, MarkerChannel, ProducerIdSource, SendOutcome};
use crate::metadata::{TxnPartition, NO_PRODUCER_EPOCH, NO_PRODUCER_ID};
use crate::shard::{EndAnswer, EndTxnArgs, InitAnswer, Needs, PendingCompletion, TransactionShard};
use crate::state::{TransactionState, TransactionVersion};

/// How many times an operation that needed a new producer id is run again with one (each run
/// may find the state changed by another request meanwhile).
const PRODUCER_ID_ATTEMPTS: usize = 3;

fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// Clients before KIP-588 know INVALID_PRODUCER_EPOCH, not PRODUCER_FENCED.
fn fenced_for(code: ErrorCode, api_version: i16, first_with_fenced: i16) -> ErrorCode {
    if code == ErrorCode::ProducerFenced && api_version < first_with_fenced {
        ErrorCode::InvalidProducerEpoch
    } else {
        code
    }
}

pub struct TransactionCoordinatorService {
    config: Arc<TransactionCoordinatorConfig>,
    runtime: Arc<CoordinatorRuntime<TransactionShard>>,
    producer_ids: Arc<dyn ProducerIdSource>,
    markers: Arc<dyn MarkerChannel>,
    completions: mpsc::UnboundedSender<PendingCompletion>,
    /// The partition count of `__transaction_state`: the configured one until the topic
    /// exists, then the topic's own (Kafka's `transactionTopicPartitionCount`), so ids keep
    /// their partition whatever the configuration says later.
    partition_count: AtomicI32,
}

impl TransactionCoordinatorService {
    /// Must run inside a tokio runtime (it starts the completion loop).
    pub fn new(
        config: TransactionCoordinatorConfig,
        writer: Arc<dyn PartitionWriter>,
        loader: Arc<dyn CoordinatorLoader>,
        producer_ids: Arc<dyn ProducerIdSource>,
        markers: Arc<dyn MarkerChannel>,
    ) -> Arc<Self> {
        Self::with_clock(
            config,
            writer,
            loader,
            producer_ids,
            markers,
            Arc::new(TokioClock::new()),
        )
    }

    /// As [`Self::new`] with the clock the shards read (tests inject one).
    pub fn with_clock(
        config: TransactionCoordinatorConfig,
        writer: Arc<dyn PartitionWriter>,
        loader: Arc<dyn CoordinatorLoader>,
        producer_ids: Arc<dyn ProducerIdSource>,
        markers: Arc<dyn MarkerChannel>,
        clock: Arc<dyn Clock>,
    ) -> Arc<Self> {
        let config = Arc::new(config);
        let (tx, rx) = mpsc::unbounded_channel();
        let (c, t) = (config.clone(), tx.clone());
        let runtime = CoordinatorRuntime::with_clock(writer, loader, clock, move |ctx| {
            TransactionShard::new(ctx, c.clone(), t.clone())
        });
        // No write timeout: a Prepare state that commits late must still get its markers,
        // which the completion loop only learns of from the write's answer.
        let service = Arc::new(Self {
            partition_count: AtomicI32::new(config.transaction_state_log_num_partitions),
            config,
            runtime,
            producer_ids,
            markers,
            completions: tx,
        });
        tokio::spawn(completion_loop(Arc::downgrade(&service), rx));
        service
    }

    pub fn config(&self) -> &TransactionCoordinatorConfig {
        &self.config
    }

    /// The `__transaction_state` partition of `transactional_id`.
    pub fn partition_for(&self, transactional_id: &str) -> i32 {
        partition_for(
            transactional_id,
            self.partition_count.load(Ordering::Relaxed),
        )
    }

    /// `__transaction_state` exists with `count` partitions.
    pub fn set_partition_count(&self, count: i32) {
        if count > 0 {
            self.partition_count.store(count, Ordering::Relaxed);
        }
    }

    fn topic_partition(&self, transactional_id: &str) -> TopicPartition {
        (
            TRANSACTION_STATE_TOPIC_NAME.to_string(),
            self.partition_for(transactional_id),
        )
    }

    /// This broker became leader of `partition` at `leader_epoch`: load it (transactions it
    /// holds in a Prepare state are completed once it is loaded).
    pub fn on_elected(&self, partition: i32, leader_epoch: i32) {
        self.runtime.schedule_load(
            (TRANSACTION_STATE_TOPIC_NAME.to_string(), partition),
            leader_epoch,
        );
    }

    /// This broker no longer leads `partition`.
    pub fn on_resigned(&self, partition: i32, leader_epoch: Option<i32>) {
        self.runtime.schedule_unload(
            &(TRANSACTION_STATE_TOPIC_NAME.to_string(), partition),
            leader_epoch,
        );
    }

    pub fn on_high_watermark(&self, partition: i32, hw: i64) {
        self.runtime
            .on_high_watermark(&(TRANSACTION_STATE_TOPIC_NAME.to_string(), partition), hw);
    }

    /// The partitions this broker has a shard for, and whether each is loaded.
    pub fn partitions(&self) -> Vec<(i32, bool)> {
        self.runtime
            .partitions()
            .into_iter()
            .map(|((_, p), loaded)| (p, loaded))
            .collect()
    }

    async fn generate_producer_id(&self) -> Result<i64, ErrorCode> {
        self.producer_ids.generate_producer_id().await
    }

    /// Runs a write whose answer may start a transaction's completion; the write and the
    /// hand-over run in a task of their own, so a caller that goes away (a client
    /// disconnecting) cannot lose a committed Prepare state's markers.
    async fn write_dispatching<T: Send + 'static>(
        &self,
        tp: TopicPartition,
        op: impl FnOnce(
                &mut TransactionShard,
                &strom_coordinator_common::runtime::WriteContext,
            ) -> crate::shard::OpResult<T>
            + Send
            + 'static,
        completion_of: fn(&T) -> Option<PendingCompletion>,
    ) -> Result<T, CoordinatorError> {
        let runtime = self.runtime.clone();
        let completions = self.completions.clone();
        let task = tokio::spawn(async move {
            let r = runtime.write(&tp, op).await;
            if let Ok(answer) = &r {
                if let Some(c) = completion_of(answer) {
                    let _ = completions.send(c);
                }
            }
            r
        });
        task.await.unwrap_or_else(|e| {
            Err(CoordinatorError::Operation {
                code: ErrorCode::UnknownServerError,
                message: format!("transaction coordinator task failed: {e}"),
            })
        })
    }

    /// InitProducerId (Kafka's `handleInitProducerId`).
    pub async fn init_producer_id(
        &self,
        req: InitProducerIdRequest,
        api_version: i16,
    ) -> InitProducerIdResponse {
        let error = |code: ErrorCode| {
            InitProducerIdResponse::default()
                .with_error_code(fenced_for(code, api_version, 4).code())
                .with_producer_id(ProducerId(NO_PRODUCER_ID))
                .with_producer_epoch(NO_PRODUCER_EPOCH)
        };
        let Some(id) = req.transactional_id.as_ref().map(|t| t.0.to_string()) else {
            // Without a transactional id: any fresh producer id, epoch 0.
            return match self.generate_producer_id().await {
                Ok(pid) => InitProducerIdResponse::default()
                    .with_producer_id(ProducerId(pid))
                    .with_producer_epoch(0),
                Err(code) => error(code),
            };
        };
        if id.is_empty() {
            return error(ErrorCode::InvalidRequest);
        }
        let pid = req.producer_id.0;
        if (pid == NO_PRODUCER_ID) != (req.producer_epoch == NO_PRODUCER_EPOCH) {
            return error(ErrorCode::InvalidRequest);
        }
        if !self
            .config
            .validate_transaction_timeout_ms(req.transaction_timeout_ms)
        {
            return error(ErrorCode::InvalidTransactionTimeout);
        }
        let expected = (pid != NO_PRODUCER_ID).then_some((pid, req.producer_epoch));
        let timeout = req.transaction_timeout_ms;
        let tp = self.topic_partition(&id);
        let mut new_pid = None;
        for _ in 0..PRODUCER_ID_ATTEMPTS {
            let id2 = id.clone();
            let r = self
                .write_dispatching(
                    tp.clone(),
                    move |s, ctx| s.init_producer_id(ctx, &id2, timeout, expected, new_pid),
                    |a| match a {
                        Needs::Done(InitAnswer::AbortingOngoing(c)) => Some(c.clone()),
                        _ => None,
                    },
                )
                .await;
            match r {
                Ok(Needs::ProducerId) => match self.generate_producer_id().await {
                    Ok(p) => new_pid = Some(p),
                    Err(code) => return error(code),
                },
                Ok(Needs::Done(InitAnswer::Initialized {
                    producer_id,
                    producer_epoch,
                })) => {
                    tracing::info!(transactional_id = %id, producer_id, producer_epoch, partition = tp.1, "initialized transactional id");
                    return InitProducerIdResponse::default()
                        .with_producer_id(ProducerId(producer_id))
                        .with_producer_epoch(producer_epoch);
                }
                // The open transaction is being aborted: the client retries.
                Ok(Needs::Done(InitAnswer::AbortingOngoing(_))) => {
                    return error(ErrorCode::ConcurrentTransactions)
                }
                Err(e) => return error(e.code()),
            }
        }
        error(ErrorCode::ConcurrentTransactions)
    }

    /// AddPartitionsToTxn: v0-3 from a producer (one transaction), v4+ from a partition
    /// leader (a batch of transactions; `verify_only` asks whether partitions are already in
    /// the transaction, KIP-890 part 1).
    pub async fn add_partitions_to_txn(
        &self,
        req: AddPartitionsToTxnRequest,
        api_version: i16,
    ) -> AddPartitionsToTxnResponse {
        if api_version < 4 {
            let parts = partitions_of(&req.v3_and_below_topics);
            let code = self
                .add_partitions(
                    req.v3_and_below_transactional_id.0.as_str(),
                    req.v3_and_below_producer_id.0,
                    req.v3_and_below_producer_epoch,
                    parts.clone(),
                    TransactionVersion::TV_0,
                )
                .await
                .err()
                .map(|c| fenced_for(c, api_version, 2));
            let results = parts.iter().map(|p| (p.clone(), code)).collect();
            return AddPartitionsToTxnResponse::default()
                .with_results_by_topic_v3_and_below(topic_results(results));
        }
        let client_tv = TransactionVersion::from_add_partitions_version(api_version);
        let mut out = Vec::with_capacity(req.transactions.len());
        for t in &req.transactions {
            let id = t.transactional_id.0.to_string();
            let parts = partitions_of(&t.topics);
            let results: Vec<(TxnPartition, Option<ErrorCode>)> = if t.verify_only {
                self.verify_partitions(&id, t.producer_id.0, t.producer_epoch, &parts)
                    .await
            } else {
                let code = self
                    .add_partitions(
                        &id,
                        t.producer_id.0,
                        t.producer_epoch,
                        parts.clone(),
                        client_tv,
                    )
                    .await
                    .err();
                parts.iter().map(|p| (p.clone(), code)).collect()
            };
            out.push(
                AddPartitionsToTxnResult::default()
                    .with_transactional_id(TransactionalId(str_bytes(&id)))
                    .with_topic_results(topic_results(results)),
            );
        }
        AddPartitionsToTxnResponse::default().with_results_by_transaction(out)
    }

    async fn add_partitions(
        &self,
        id: &str,
        producer_id: i64,
        producer_epoch: i16,
        parts: BTreeSet<TxnPartition>,
        client_tv: TransactionVersion,
    ) -> Result<(), ErrorCode> {
        if id.is_empty() {
            return Err(ErrorCode::InvalidRequest);
        }
        let id2 = id.to_string();
        self.runtime
            .write(&self.topic_partition(id), move |s, _| {
                s.add_partitions(&id2, producer_id, producer_epoch, &parts, client_tv)
            })
            .await
            .map_err(|e| e.code())
    }

    /// Kafka's `handleVerifyPartitionsInTransaction`: on the committed state.
    async fn verify_partitions(
        &self,
        id: &str,
        producer_id: i64,
        producer_epoch: i16,
        parts: &BTreeSet<TxnPartition>,
    ) -> Vec<(TxnPartition, Option<ErrorCode>)> {
        let all = |code: ErrorCode| parts.iter().map(|p| (p.clone(), Some(code))).collect();
        if id.is_empty() {
            return all(ErrorCode::InvalidRequest);
        }
        let id2 = id.to_string();
        let parts2 = parts.clone();
        let r = self
            .runtime
            .read(&self.topic_partition(id), move |s, hw| {
                let Some(md) = s.committed_metadata(&id2, hw) else {
                    return Err(ErrorCode::InvalidProducerIdMapping);
                };
                if md.producer_id != producer_id {
                    return Err(ErrorCode::InvalidProducerIdMapping);
                }
                if md.producer_epoch != producer_epoch {
                    return Err(ErrorCode::ProducerFenced);
                }
                if matches!(
                    md.state,
                    TransactionState::PrepareCommit | TransactionState::PrepareAbort
                ) {
                    return Err(ErrorCode::ConcurrentTransactions);
                }
                Ok(parts2
                    .into_iter()
                    .map(|p| {
                        let code = (!md.topic_partitions.contains(&p))
                            .then_some(ErrorCode::TransactionAbortable);
                        (p, code)
                    })
                    .collect::<Vec<_>>())
            })
            .await;
        match r {
            Ok(Ok(v)) => v,
            Ok(Err(code)) => all(code),
            Err(e) => all(e.code()),
        }
    }

    /// AddOffsetsToTxn: the group's `__consumer_offsets` partition joins the transaction.
    pub async fn add_offsets_to_txn(
        &self,
        req: AddOffsetsToTxnRequest,
        api_version: i16,
    ) -> AddOffsetsToTxnResponse {
        let group = req.group_id.0.as_str();
        let offsets_partition = (
            GROUP_METADATA_TOPIC_NAME.to_string(),
            partition_for(group, self.config.offsets_topic_num_partitions),
        );
        let code = self
            .add_partitions(
                req.transactional_id.0.as_str(),
                req.producer_id.0,
                req.producer_epoch,
                [offsets_partition].into(),
                TransactionVersion::TV_0,
            )
            .await
            .err()
            .map_or(0, |c| fenced_for(c, api_version, 2).code());
        AddOffsetsToTxnResponse::default().with_error_code(code)
    }

    /// EndTxn (Kafka's `handleEndTransaction`): answered once the Prepare state is committed;
    /// the markers and the Complete state follow. v5+ (transactions v2) answers the bumped
    /// producer epoch (and the new producer id after an epoch overflow).
    pub async fn end_txn(&self, req: EndTxnRequest, api_version: i16) -> EndTxnResponse {
        let error = |code: ErrorCode| {
            EndTxnResponse::default()
                .with_error_code(fenced_for(code, api_version, 2).code())
                .with_producer_id(ProducerId(NO_PRODUCER_ID))
                .with_producer_epoch(NO_PRODUCER_EPOCH)
        };
        let id = req.transactional_id.0.to_string();
        if id.is_empty() {
            return error(ErrorCode::InvalidRequest);
        }
        let client_tv = TransactionVersion::from_end_txn_version(api_version);
        let result = if req.committed {
            TxnResult::Commit
        } else {
            TxnResult::Abort
        };
        let args = EndTxnArgs {
            transactional_id: id.clone(),
            producer_id: req.producer_id.0,
            producer_epoch: req.producer_epoch,
            result,
            client_tv,
        };
        let tp = self.topic_partition(&id);
        let mut new_pid = None;
        for _ in 0..PRODUCER_ID_ATTEMPTS {
            let args = args.clone();
            let r = self
                .write_dispatching(
                    tp.clone(),
                    move |s, ctx| s.end_txn(ctx, &args, new_pid),
                    |a| match a {
                        Needs::Done(EndAnswer { completion, .. }) => completion.clone(),
                        Needs::ProducerId => None,
                    },
                )
                .await;
            match r {
                Ok(Needs::ProducerId) => match self.generate_producer_id().await {
                    Ok(p) => new_pid = Some(p),
                    Err(code) => return error(code),
                },
                Ok(Needs::Done(a)) => {
                    return EndTxnResponse::default()
                        .with_producer_id(ProducerId(a.producer_id))
                        .with_producer_epoch(a.producer_epoch)
                }
                Err(e) => return error(e.code()),
            }
        }
        error(ErrorCode::ConcurrentTransactions)
    }

    /// DescribeTransactions (Kafka's `handleDescribeTransactions`, per id).
    pub async fn describe_transactions(
        &self,
        req: DescribeTransactionsRequest,
    ) -> DescribeTransactionsResponse {
        let mut states = Vec::with_capacity(req.transactional_ids.len());
        for t in &req.transactional_ids {
            states.push(self.describe_one(t.0.as_str()).await);
        }
        DescribeTransactionsResponse::default().with_transaction_states(states)
    }

    async fn describe_one(&self, id: &str) -> describe_transactions_response::TransactionState {
        let base = describe_transactions_response::TransactionState::default()
            .with_transactional_id(TransactionalId(str_bytes(id)));
        if id.is_empty() {
            return base.with_error_code(ErrorCode::InvalidRequest.code());
        }
        let id2 = id.to_string();
        let r = self
            .runtime
            .read(&self.topic_partition(id), move |s, hw| {
                s.committed_metadata(&id2, hw).cloned()
            })
            .await;
        match r {
            Err(e) => base.with_error_code(e.code().code()),
            Ok(None) => base.with_error_code(ErrorCode::TransactionalIdNotFound.code()),
            Ok(Some(md)) if md.state == TransactionState::Dead => {
                base.with_error_code(ErrorCode::TransactionalIdNotFound.code())
            }
            Ok(Some(md)) => {
                let mut topics: BTreeMap<String, Vec<i32>> = BTreeMap::new();
                for (t, p) in &md.topic_partitions {
                    topics.entry(t.clone()).or_default().push(*p);
                }
                base.with_producer_id(ProducerId(md.producer_id))
                    .with_producer_epoch(md.producer_epoch)
                    .with_transaction_state(str_bytes(md.state.name()))
                    .with_transaction_timeout_ms(md.txn_timeout_ms)
                    .with_transaction_start_time_ms(md.txn_start_timestamp)
                    .with_topics(
                        topics
                            .into_iter()
                            .map(|(t, ps)| {
                                TopicData::default()
                                    .with_topic(TopicName(str_bytes(&t)))
                                    .with_partitions(ps)
                            })
                            .collect(),
                    )
            }
        }
    }

    /// ListTransactions (Kafka's `listTransactionStates`) over every partition this broker
    /// coordinates.
    pub async fn list_transactions(
        &self,
        req: ListTransactionsRequest,
    ) -> ListTransactionsResponse {
        let partitions = self.partitions();
        if partitions.iter().any(|(_, loaded)| !loaded) {
            return ListTransactionsResponse::default()
                .with_error_code(ErrorCode::CoordinatorLoadInProgress.code());
        }
        let mut unknown = Vec::new();
        let mut states = BTreeSet::new();
        for name in &req.state_filters {
            match TransactionState::from_name(name.as_str()) {
                Some(s) => {
                    states.insert(s);
                }
                None => unknown.push(name.clone()),
            }
        }
        let pattern = match req.transactional_id_pattern.as_ref().map(|p| p.as_str()) {
            None | Some("") => None,
            Some(p) => match regex_automata::meta::Regex::new(&format!("^(?:{p})$")) {
                Ok(r) => Some(r),
                Err(_) => {
                    return ListTransactionsResponse::default()
                        .with_error_code(ErrorCode::InvalidRegularExpression.code())
                }
            },
        };
        let pids: BTreeSet<i64> = req.producer_id_filters.iter().map(|p| p.0).collect();
        let filter_states = !req.state_filters.is_empty();
        let duration = req.duration_filter;
        let now = self.runtime.clock().now_ms();
        let mut out = Vec::new();
        for (p, _) in partitions {
            let tp = (TRANSACTION_STATE_TOPIC_NAME.to_string(), p);
            let all = match self.runtime.read(&tp, |s, hw| s.committed_all(hw)).await {
                Ok(all) => all,
                // Lost or reloading meanwhile: as Kafka, only what is loaded is listed.
                Err(_) => continue,
            };
            for md in all {
                let keep = md.state != TransactionState::Dead
                    && (pids.is_empty() || pids.contains(&md.producer_id))
                    && (!filter_states || states.contains(&md.state))
                    && !(duration >= 0 && now - md.txn_start_timestamp <= duration)
                    && pattern
                        .as_ref()
                        .is_none_or(|r| r.is_match(md.transactional_id.as_str()));
                if keep {
                    out.push(
                        list_transactions_response::TransactionState::default()
                            .with_transactional_id(TransactionalId(str_bytes(&md.transactional_id)))
                            .with_producer_id(ProducerId(md.producer_id))
                            .with_transaction_state(str_bytes(md.state.name())),
                    );
                }
            }
        }
        ListTransactionsResponse::default()
            .with_unknown_state_filters(unknown)
            .with_transaction_states(out)
    }

    /// Sends a prepared transaction's markers, then writes its Complete state.
    async fn complete_transaction(&self, c: PendingCompletion) {
        let backoff = Duration::from_millis(self.config.marker_retry_backoff_ms.max(1));
        let (tp, epoch) = (c.tp.clone(), c.markers.coordinator_epoch);
        let outcome = send_markers(&*self.markers, c.markers.clone(), backoff, || {
            self.still_coordinator(&tp, epoch)
        })
        .await;
        if let SendOutcome::Abandoned(why) = outcome {
            tracing::info!(transactional_id = %c.transactional_id, %why, "transaction markers not completed here");
            return;
        }
        loop {
            let c2 = c.clone();
            match self
                .runtime
                .write(&tp, move |s, ctx| s.complete(ctx, &c2))
                .await
            {
                Ok(()) => {
                    tracing::debug!(transactional_id = %c.transactional_id, result = ?c.markers.result, "transaction completed");
                    return;
                }
                Err(CoordinatorError::NotAvailable(_))
                | Err(CoordinatorError::LoadInProgress(_))
                    if self.still_coordinator(&tp, epoch).await =>
                {
                    tokio::time::sleep(backoff).await;
                }
                Err(e) => {
                    tracing::info!(transactional_id = %c.transactional_id, error = %e, "transaction completion not written");
                    return;
                }
            }
        }
    }

    /// Whether this broker still coordinates `tp` at `epoch` (a shard still loading counts:
    /// it is the one that will complete the transaction).
    async fn still_coordinator(&self, tp: &TopicPartition, epoch: i32) -> bool {
        match self.runtime.read(tp, move |s, _| s.epoch == epoch).await {
            Ok(same) => same,
            Err(CoordinatorError::LoadInProgress(_)) => {
                self.runtime.partitions().iter().any(|(p, _)| p == tp)
            }
            Err(_) => false,
        }
    }
}

/// Runs each prepared transaction's completion as its own task.
async fn completion_loop(
    service: Weak<TransactionCoordinatorService>,
    mut rx: mpsc::UnboundedReceiver<PendingCompletion>,
) {
    while let Some(c) = rx.recv().await {
        let Some(s) = service.upgrade() else {
            return;
        };
        tokio::spawn(async move { s.complete_transaction(c).await });
    }
}

fn partitions_of(topics: &[AddPartitionsToTxnTopic]) -> BTreeSet<TxnPartition> {
    topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(move |p| (t.name.0.to_string(), *p)))
        .collect()
}

fn topic_results(
    results: Vec<(TxnPartition, Option<ErrorCode>)>,
) -> Vec<AddPartitionsToTxnTopicResult> {
    let mut by_topic: BTreeMap<String, Vec<AddPartitionsToTxnPartitionResult>> = BTreeMap::new();
    for ((t, p), code) in results {
        by_topic.entry(t).or_default().push(
            AddPartitionsToTxnPartitionResult::default()
                .with_partition_index(p)
                .with_partition_error_code(code.map_or(0, |c| c.code())),
        );
    }
    by_topic
        .into_iter()
        .map(|(t, parts)| {
            AddPartitionsToTxnTopicResult::default()
                .with_name(TopicName(str_bytes(&t)))
                .with_results_by_partition(parts)
        })
        .collect()
}

#[cfg(test)]
#[path = "service_tests.rs"]
mod tests;

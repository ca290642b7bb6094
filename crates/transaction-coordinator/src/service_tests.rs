//! Cases of Kafka's `TransactionCoordinatorTest` and `TransactionStateManagerTest`, against
//! the service on an in-memory `__transaction_state`, a counting producer id source and a
//! marker channel that records what it is asked and answers what the test says.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, Ordering};

use parking_lot::Mutex;
use strom_group_coordinator::testing::MemPartitions;
use strom_protocol::kafka::messages::add_partitions_to_txn_request::AddPartitionsToTxnTransaction;

use super::*;
use crate::markers::{BoxFuture, MarkerOutcome, TxnMarkerEntry};
use crate::records::TxnLogRecord;

struct Pids(AtomicI64);

impl ProducerIdSource for Pids {
    fn generate_producer_id(&self) -> BoxFuture<'_, Result<i64, ErrorCode>> {
        Box::pin(async move { Ok(self.0.fetch_add(1, Ordering::SeqCst)) })
    }
}

/// Records every request; answers the scripted outcomes first, then Written.
struct Markers {
    sent: Mutex<Vec<TxnMarkerEntry>>,
    script: Mutex<VecDeque<MarkerOutcome>>,
    /// Partitions whose topic is gone.
    deleted: Mutex<BTreeSet<TxnPartition>>,
    /// While true, requests wait (a partition leader that does not answer yet).
    held: tokio::sync::watch::Sender<bool>,
}

impl Default for Markers {
    fn default() -> Self {
        Self {
            sent: Mutex::default(),
            script: Mutex::default(),
            deleted: Mutex::default(),
            held: tokio::sync::watch::Sender::new(false),
        }
    }
}

impl MarkerChannel for Markers {
    fn write_markers(
        &self,
        entry: TxnMarkerEntry,
    ) -> BoxFuture<'_, Vec<(TxnPartition, MarkerOutcome)>> {
        Box::pin(async move {
            self.sent.lock().push(entry.clone());
            let mut held = self.held.subscribe();
            let _ = held.wait_for(|h| !*h).await;
            entry
                .partitions
                .iter()
                .map(|p| {
                    if self.deleted.lock().contains(p) {
                        return (p.clone(), MarkerOutcome::TopicDeleted);
                    }
                    let o = self
                        .script
                        .lock()
                        .pop_front()
                        .unwrap_or(MarkerOutcome::Written);
                    (p.clone(), o)
                })
                .collect()
        })
    }
}

struct Env {
    svc: Arc<TransactionCoordinatorService>,
    log: Arc<MemPartitions>,
    markers: Arc<Markers>,
}

const ID: &str = "txn-1";
const FIRST_PID: i64 = 1000;

fn config() -> TransactionCoordinatorConfig {
    TransactionCoordinatorConfig {
        transaction_state_log_num_partitions: 1,
        marker_retry_backoff_ms: 5,
        ..Default::default()
    }
}

async fn env_with(config: TransactionCoordinatorConfig, log: Arc<MemPartitions>) -> Env {
    let markers = Arc::new(Markers::default());
    let svc = TransactionCoordinatorService::new(
        config,
        log.clone(),
        log.clone(),
        Arc::new(Pids(AtomicI64::new(FIRST_PID))),
        markers.clone(),
    );
    svc.on_elected(0, 5);
    for _ in 0..100 {
        if svc.partitions() == vec![(0, true)] {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(svc.partitions(), vec![(0, true)]);
    Env { svc, log, markers }
}

async fn env() -> Env {
    env_with(config(), MemPartitions::new()).await
}

fn tp() -> TopicPartition {
    (TRANSACTION_STATE_TOPIC_NAME.to_string(), 0)
}

impl Env {
    async fn init(
        &self,
        id: &str,
        expected: Option<(i64, i16)>,
        version: i16,
    ) -> InitProducerIdResponse {
        let (pid, epoch) = expected.unwrap_or((-1, -1));
        self.svc
            .init_producer_id(
                InitProducerIdRequest::default()
                    .with_transactional_id(Some(TransactionalId(str_bytes(id))))
                    .with_transaction_timeout_ms(60_000)
                    .with_producer_id(ProducerId(pid))
                    .with_producer_epoch(epoch),
                version,
            )
            .await
    }

    async fn add(&self, pid: i64, epoch: i16, parts: &[(&str, i32)], version: i16) -> i16 {
        let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for (t, p) in parts {
            topics.entry(t).or_default().push(*p);
        }
        let topics: Vec<_> = topics
            .into_iter()
            .map(|(t, ps)| {
                AddPartitionsToTxnTopic::default()
                    .with_name(TopicName(str_bytes(t)))
                    .with_partitions(ps)
            })
            .collect();
        let r = self
            .svc
            .add_partitions_to_txn(
                AddPartitionsToTxnRequest::default()
                    .with_v3_and_below_transactional_id(TransactionalId(str_bytes(ID)))
                    .with_v3_and_below_producer_id(ProducerId(pid))
                    .with_v3_and_below_producer_epoch(epoch)
                    .with_v3_and_below_topics(topics),
                version,
            )
            .await;
        let codes: BTreeSet<i16> = r
            .results_by_topic_v3_and_below
            .iter()
            .flat_map(|t| {
                t.results_by_partition
                    .iter()
                    .map(|p| p.partition_error_code)
            })
            .collect();
        assert_eq!(codes.len(), 1, "one code for the whole request: {r:?}");
        codes.into_iter().next().unwrap()
    }

    async fn end(&self, pid: i64, epoch: i16, commit: bool, version: i16) -> EndTxnResponse {
        self.svc
            .end_txn(
                EndTxnRequest::default()
                    .with_transactional_id(TransactionalId(str_bytes(ID)))
                    .with_producer_id(ProducerId(pid))
                    .with_producer_epoch(epoch)
                    .with_committed(commit),
                version,
            )
            .await
    }

    async fn describe(&self, id: &str) -> describe_transactions_response::TransactionState {
        self.svc
            .describe_transactions(
                DescribeTransactionsRequest::default()
                    .with_transactional_ids(vec![TransactionalId(str_bytes(id))]),
            )
            .await
            .transaction_states
            .remove(0)
    }

    async fn state(&self, id: &str) -> String {
        self.describe(id).await.transaction_state.to_string()
    }

    /// Waits (bounded) until `id` is in `state`.
    async fn wait_state(&self, id: &str, state: &str) {
        for _ in 0..500 {
            if self.state(id).await == state {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("{id} never reached {state}: {:?}", self.describe(id).await);
    }

    /// The states of the records written so far, in order.
    fn logged_states(&self) -> Vec<Option<(TransactionState, i64, i16)>> {
        self.log
            .records(&tp())
            .iter()
            .map(|(k, v)| {
                TxnLogRecord::decode(k, v.as_deref())
                    .unwrap()
                    .unwrap()
                    .value
                    .map(|t| (t.txn_state, t.producer_id, t.producer_epoch))
            })
            .collect()
    }
}

fn code(c: ErrorCode) -> i16 {
    c.code()
}

#[tokio::test]
async fn init_producer_id_new_then_bumps_epoch() {
    let e = env().await;
    let r = e.init(ID, None, 4).await;
    assert_eq!(
        (r.error_code, r.producer_id.0, r.producer_epoch),
        (0, FIRST_PID, 0)
    );
    let r = e.init(ID, None, 4).await;
    assert_eq!(
        (r.error_code, r.producer_id.0, r.producer_epoch),
        (0, FIRST_PID, 1)
    );
    assert_eq!(
        e.logged_states(),
        vec![
            Some((TransactionState::Empty, FIRST_PID, 0)),
            Some((TransactionState::Empty, FIRST_PID, 1))
        ]
    );
    assert_eq!(e.state(ID).await, "Empty");
}

#[tokio::test]
async fn init_producer_id_request_errors() {
    let e = env().await;
    let r = e
        .svc
        .init_producer_id(
            InitProducerIdRequest::default()
                .with_transactional_id(Some(TransactionalId(str_bytes(ID))))
                .with_transaction_timeout_ms(900_001)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
            4,
        )
        .await;
    assert_eq!(r.error_code, code(ErrorCode::InvalidTransactionTimeout));
    assert_eq!(
        e.init("", None, 4).await.error_code,
        code(ErrorCode::InvalidRequest)
    );
    // A producer id without an epoch.
    let r = e
        .svc
        .init_producer_id(
            InitProducerIdRequest::default()
                .with_transactional_id(Some(TransactionalId(str_bytes(ID))))
                .with_transaction_timeout_ms(1000)
                .with_producer_id(ProducerId(5))
                .with_producer_epoch(-1),
            4,
        )
        .await;
    assert_eq!(r.error_code, code(ErrorCode::InvalidRequest));
    // Without a transactional id: a fresh producer id at epoch 0.
    let r = e
        .svc
        .init_producer_id(
            InitProducerIdRequest::default()
                .with_transactional_id(None)
                .with_transaction_timeout_ms(1000)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
            4,
        )
        .await;
    assert_eq!(
        (r.error_code, r.producer_id.0, r.producer_epoch),
        (0, FIRST_PID, 0)
    );
    // A transactional id of a partition this broker does not lead.
    e.svc.on_resigned(0, None);
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(
        e.init(ID, None, 4).await.error_code,
        code(ErrorCode::NotCoordinator)
    );
}

#[tokio::test]
async fn init_producer_id_kip360_expected_epoch() {
    let e = env().await;
    e.init(ID, None, 4).await; // epoch 0
                               // The current epoch: bumped, the last epoch remembered.
    let r = e.init(ID, Some((FIRST_PID, 0)), 4).await;
    assert_eq!((r.error_code, r.producer_epoch), (0, 1));
    // A retry of that call (the producer did not hear back): the same epoch again.
    let r = e.init(ID, Some((FIRST_PID, 0)), 4).await;
    assert_eq!((r.error_code, r.producer_epoch), (0, 1));
    // An older epoch: fenced (INVALID_PRODUCER_EPOCH before v4).
    e.init(ID, None, 4).await; // epoch 2, last -1
    assert_eq!(
        e.init(ID, Some((FIRST_PID, 1)), 4).await.error_code,
        code(ErrorCode::ProducerFenced)
    );
    assert_eq!(
        e.init(ID, Some((FIRST_PID, 1)), 3).await.error_code,
        code(ErrorCode::InvalidProducerEpoch)
    );
    // Another producer id: fenced.
    assert_eq!(
        e.init(ID, Some((77, 2)), 4).await.error_code,
        code(ErrorCode::ProducerFenced)
    );
}

#[tokio::test]
async fn add_partitions_errors_and_ongoing() {
    let e = env().await;
    assert_eq!(
        e.add(FIRST_PID, 0, &[("t", 0)], 3).await,
        code(ErrorCode::InvalidProducerIdMapping)
    );
    e.init(ID, None, 4).await;
    assert_eq!(
        e.add(FIRST_PID + 1, 0, &[("t", 0)], 3).await,
        code(ErrorCode::InvalidProducerIdMapping)
    );
    assert_eq!(
        e.add(FIRST_PID, 1, &[("t", 0)], 3).await,
        code(ErrorCode::ProducerFenced)
    );
    assert_eq!(
        e.add(FIRST_PID, 1, &[("t", 0)], 1).await,
        code(ErrorCode::InvalidProducerEpoch)
    );
    assert_eq!(e.add(FIRST_PID, 0, &[("t", 0), ("u", 3)], 3).await, 0);
    let d = e.describe(ID).await;
    assert_eq!(d.transaction_state.as_str(), "Ongoing");
    assert_eq!(d.topics.len(), 2);
    assert!(d.transaction_start_time_ms > 0);
    // Already in the transaction: answered without a record.
    let before = e.logged_states().len();
    assert_eq!(e.add(FIRST_PID, 0, &[("t", 0)], 3).await, 0);
    assert_eq!(e.logged_states().len(), before);
}

#[tokio::test]
async fn end_txn_v1_commit_sends_markers_and_completes() {
    let e = env().await;
    e.init(ID, None, 4).await;
    e.add(FIRST_PID, 0, &[("t", 0), ("t", 1)], 3).await;
    let r = e.end(FIRST_PID, 0, true, 4).await;
    assert_eq!(
        (r.error_code, r.producer_id.0, r.producer_epoch),
        (0, -1, -1)
    );
    e.wait_state(ID, "CompleteCommit").await;
    let sent = e.markers.sent.lock().clone();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].result, TxnResult::Commit);
    assert_eq!(
        (
            sent[0].producer_id,
            sent[0].producer_epoch,
            sent[0].coordinator_epoch
        ),
        (FIRST_PID, 0, 5)
    );
    assert_eq!(
        sent[0].partitions,
        vec![("t".to_string(), 0), ("t".to_string(), 1)]
    );
    use TransactionState::*;
    assert_eq!(
        e.logged_states(),
        vec![
            Some((Empty, FIRST_PID, 0)),
            Some((Ongoing, FIRST_PID, 0)),
            Some((PrepareCommit, FIRST_PID, 0)),
            Some((CompleteCommit, FIRST_PID, 0)),
        ]
    );
    // A retry of the commit: fine; an abort now: invalid.
    assert_eq!(e.end(FIRST_PID, 0, true, 4).await.error_code, 0);
    assert_eq!(
        e.end(FIRST_PID, 0, false, 4).await.error_code,
        code(ErrorCode::InvalidTxnState)
    );
    // From Empty nothing can end.
    e.init(ID, None, 4).await;
    assert_eq!(
        e.end(FIRST_PID, 1, true, 4).await.error_code,
        code(ErrorCode::InvalidTxnState)
    );
    assert_eq!(
        e.end(FIRST_PID, 0, true, 4).await.error_code,
        code(ErrorCode::ProducerFenced)
    );
    assert_eq!(
        e.end(FIRST_PID, 0, true, 1).await.error_code,
        code(ErrorCode::InvalidProducerEpoch)
    );
}

#[tokio::test]
async fn end_txn_v2_bumps_the_epoch_and_tolerates_retries() {
    let e = env().await;
    e.init(ID, None, 5).await; // epoch 0
    e.add(FIRST_PID, 0, &[("t", 0)], 3).await;
    let r = e.end(FIRST_PID, 0, true, 5).await;
    assert_eq!(
        (r.error_code, r.producer_id.0, r.producer_epoch),
        (0, FIRST_PID, 1)
    );
    e.wait_state(ID, "CompleteCommit").await;
    // The marker carries the bumped epoch.
    assert_eq!(e.markers.sent.lock()[0].producer_epoch, 1);
    // A retry with the old epoch: the answer again, nothing written.
    let n = e.logged_states().len();
    let r = e.end(FIRST_PID, 0, true, 5).await;
    assert_eq!((r.error_code, r.producer_epoch), (0, 1));
    assert_eq!(e.logged_states().len(), n);
    // Retry as abort: invalid; commit at the current epoch from CompleteCommit: invalid.
    assert_eq!(
        e.end(FIRST_PID, 0, false, 5).await.error_code,
        code(ErrorCode::InvalidTxnState)
    );
    assert_eq!(
        e.end(FIRST_PID, 1, true, 5).await.error_code,
        code(ErrorCode::InvalidTxnState)
    );
    // Abort at the current epoch with nothing added: allowed in v2, epoch bumped, no marker.
    let r = e.end(FIRST_PID, 1, false, 5).await;
    assert_eq!((r.error_code, r.producer_epoch), (0, 2));
    e.wait_state(ID, "CompleteAbort").await;
    assert_eq!(e.markers.sent.lock().len(), 1);
    // An epoch two behind: fenced.
    assert_eq!(
        e.end(FIRST_PID, 0, false, 5).await.error_code,
        code(ErrorCode::ProducerFenced)
    );
}

/// KAFKA-18464 (Kafka's `TransactionCoordinator.endTransaction` and
/// `prepareInitProducerIdTransit`): while a transaction's markers are being written (Kafka's
/// pending CompleteCommit), every EndTxn and InitProducerId for the id is answered
/// CONCURRENT_TRANSACTIONS before its producer id and epoch are looked at. In transactions v2
/// the client holds the epoch the commit returned, and an EndTxn(abort) with it in that window
/// is its next (empty) transaction's end, not a fenced producer.
#[tokio::test]
async fn an_end_txn_during_the_previous_markers_waits_for_them() {
    let e = env().await;
    e.init(ID, None, 5).await; // epoch 0
    e.add(FIRST_PID, 0, &[("t", 0)], 3).await;
    e.markers.held.send_replace(true);
    let r = e.end(FIRST_PID, 0, true, 5).await;
    assert_eq!((r.error_code, r.producer_epoch), (0, 1));
    assert_eq!(e.state(ID).await, "PrepareCommit");
    let concurrent = code(ErrorCode::ConcurrentTransactions);
    // The epoch the commit returned, the retry's epoch, another producer id: all wait.
    assert_eq!(e.end(FIRST_PID, 1, false, 5).await.error_code, concurrent);
    assert_eq!(e.end(FIRST_PID, 1, true, 5).await.error_code, concurrent);
    assert_eq!(e.end(FIRST_PID, 0, true, 5).await.error_code, concurrent);
    assert_eq!(
        e.end(FIRST_PID + 7, 1, false, 5).await.error_code,
        concurrent
    );
    // InitProducerId too, whatever producer id it expects.
    assert_eq!(
        e.init(ID, Some((FIRST_PID + 7, 3)), 5).await.error_code,
        concurrent
    );
    e.markers.held.send_replace(false);
    e.wait_state(ID, "CompleteCommit").await;
    // Then the abort is the next transaction's, with nothing in it: the epoch is bumped.
    let r = e.end(FIRST_PID, 1, false, 5).await;
    assert_eq!((r.error_code, r.producer_epoch), (0, 2));
    e.wait_state(ID, "CompleteAbort").await;
}

/// The same window in transactions v1 (Kafka's `endTransactionWithTV1`: producer id and epoch
/// first, then the pending transition): an abort at the committing epoch waits too.
#[tokio::test]
async fn an_end_txn_v1_during_the_markers_waits_for_them() {
    let e = env().await;
    e.init(ID, None, 4).await;
    e.add(FIRST_PID, 0, &[("t", 0)], 3).await;
    e.markers.held.send_replace(true);
    assert_eq!(e.end(FIRST_PID, 0, true, 4).await.error_code, 0);
    let concurrent = code(ErrorCode::ConcurrentTransactions);
    assert_eq!(e.end(FIRST_PID, 0, false, 4).await.error_code, concurrent);
    assert_eq!(
        e.end(FIRST_PID, 1, false, 4).await.error_code,
        code(ErrorCode::ProducerFenced)
    );
    assert_eq!(
        e.end(FIRST_PID + 7, 0, false, 4).await.error_code,
        code(ErrorCode::InvalidProducerIdMapping)
    );
    e.markers.held.send_replace(false);
    e.wait_state(ID, "CompleteCommit").await;
    assert_eq!(
        e.end(FIRST_PID, 0, false, 4).await.error_code,
        code(ErrorCode::InvalidTxnState)
    );
}

#[tokio::test]
async fn retriable_marker_errors_are_retried_and_block_the_id_meanwhile() {
    let e = env().await;
    e.init(ID, None, 4).await;
    e.add(FIRST_PID, 0, &[("t", 0)], 3).await;
    {
        let mut s = e.markers.script.lock();
        for _ in 0..20 {
            s.push_back(MarkerOutcome::Error(ErrorCode::NotLeaderOrFollower));
        }
    }
    assert_eq!(e.end(FIRST_PID, 0, true, 4).await.error_code, 0);
    // While the markers are in flight: CONCURRENT_TRANSACTIONS.
    assert_eq!(
        e.init(ID, None, 4).await.error_code,
        code(ErrorCode::ConcurrentTransactions)
    );
    assert_eq!(
        e.add(FIRST_PID, 0, &[("t", 1)], 3).await,
        code(ErrorCode::ConcurrentTransactions)
    );
    assert_eq!(
        e.end(FIRST_PID, 0, true, 4).await.error_code,
        code(ErrorCode::ConcurrentTransactions)
    );
    e.wait_state(ID, "CompleteCommit").await;
    assert_eq!(e.markers.sent.lock().len(), 21);
    assert_eq!(e.init(ID, None, 4).await.producer_epoch, 1);
}

#[tokio::test]
async fn fenced_marker_stops_without_completing() {
    let e = env().await;
    e.init(ID, None, 4).await;
    e.add(FIRST_PID, 0, &[("t", 0)], 3).await;
    e.markers.script.lock().push_back(MarkerOutcome::Error(
        ErrorCode::TransactionCoordinatorFenced,
    ));
    assert_eq!(e.end(FIRST_PID, 0, true, 4).await.error_code, 0);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(e.state(ID).await, "PrepareCommit");
    assert_eq!(e.markers.sent.lock().len(), 1);
}

#[tokio::test]
async fn deleted_topic_partitions_are_dropped() {
    let e = env().await;
    e.init(ID, None, 4).await;
    e.add(FIRST_PID, 0, &[("gone", 0), ("t", 0)], 3).await;
    e.markers.deleted.lock().insert(("gone".to_string(), 0));
    assert_eq!(e.end(FIRST_PID, 0, false, 4).await.error_code, 0);
    e.wait_state(ID, "CompleteAbort").await;
}

#[tokio::test]
async fn init_on_ongoing_aborts_and_fences() {
    let e = env().await;
    e.init(ID, None, 4).await; // epoch 0
    e.add(FIRST_PID, 0, &[("t", 0)], 3).await;
    // A new producer with the same id: the open transaction is aborted first.
    assert_eq!(
        e.init(ID, None, 4).await.error_code,
        code(ErrorCode::ConcurrentTransactions)
    );
    e.wait_state(ID, "CompleteAbort").await;
    let sent = e.markers.sent.lock().clone();
    assert_eq!(sent[0].result, TxnResult::Abort);
    // Transactions v2 (the cluster's level): fenced to 1, bumped again by the abort to 2.
    assert_eq!(sent[0].producer_epoch, 2);
    // The old producer is fenced; the new one gets the next epoch.
    assert_eq!(
        e.end(FIRST_PID, 0, true, 4).await.error_code,
        code(ErrorCode::ProducerFenced)
    );
    let r = e.init(ID, None, 4).await;
    assert_eq!((r.error_code, r.producer_epoch), (0, 3));
}

#[tokio::test]
async fn init_on_ongoing_with_transaction_version_1_bumps_once() {
    let e = env_with(
        TransactionCoordinatorConfig {
            transaction_version_level: TransactionVersion::TV_1,
            ..config()
        },
        MemPartitions::new(),
    )
    .await;
    e.init(ID, None, 4).await;
    e.add(FIRST_PID, 0, &[("t", 0)], 3).await;
    assert_eq!(
        e.init(ID, None, 4).await.error_code,
        code(ErrorCode::ConcurrentTransactions)
    );
    e.wait_state(ID, "CompleteAbort").await;
    assert_eq!(e.markers.sent.lock()[0].producer_epoch, 1);
    assert_eq!(e.init(ID, None, 4).await.producer_epoch, 2);
}

#[tokio::test]
async fn a_write_not_yet_replicated_is_a_pending_transition() {
    let e = env().await;
    e.init(ID, None, 4).await;
    e.log.hold_hw.store(true, Ordering::SeqCst);
    let svc = e.svc.clone();
    let first = tokio::spawn(async move {
        svc.init_producer_id(
            InitProducerIdRequest::default()
                .with_transactional_id(Some(TransactionalId(str_bytes(ID))))
                .with_transaction_timeout_ms(60_000)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
            4,
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(!first.is_finished());
    assert_eq!(
        e.init(ID, None, 4).await.error_code,
        code(ErrorCode::ConcurrentTransactions)
    );
    // Reads see the committed state.
    let d = e.describe(ID).await;
    assert_eq!(d.producer_epoch, 0);
    let hw = e.log.release_hw(&tp());
    e.svc.on_high_watermark(0, hw);
    assert_eq!(first.await.unwrap().producer_epoch, 1);
    assert_eq!(e.describe(ID).await.producer_epoch, 1);
}

#[tokio::test]
async fn failed_append_reverts() {
    let e = env().await;
    e.init(ID, None, 4).await;
    *e.log.fail_next.lock() = Some(ErrorCode::NotEnoughReplicas);
    assert_eq!(
        e.init(ID, None, 4).await.error_code,
        code(ErrorCode::CoordinatorNotAvailable)
    );
    *e.log.fail_next.lock() = Some(ErrorCode::NotLeaderOrFollower);
    assert_eq!(
        e.init(ID, None, 4).await.error_code,
        code(ErrorCode::NotCoordinator)
    );
    assert_eq!(e.init(ID, None, 4).await.producer_epoch, 1);
}

#[tokio::test]
async fn a_prepared_transaction_is_completed_by_the_next_coordinator() {
    let log = MemPartitions::new();
    let e = env_with(config(), log.clone()).await;
    e.init(ID, None, 4).await;
    e.add(FIRST_PID, 0, &[("t", 0)], 3).await;
    // The coordinator dies right after PrepareCommit is written (its markers never go out).
    e.markers
        .script
        .lock()
        .push_back(MarkerOutcome::Error(ErrorCode::CorruptMessage));
    assert_eq!(e.end(FIRST_PID, 0, true, 4).await.error_code, 0);
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(e.state(ID).await, "PrepareCommit");
    e.svc.on_resigned(0, None);
    drop(e);
    // A new coordinator loads the partition: it sends the markers and completes.
    let e2 = env_with(config(), log).await;
    e2.wait_state(ID, "CompleteCommit").await;
    let sent = e2.markers.sent.lock().clone();
    assert_eq!(sent.len(), 1);
    assert_eq!(
        (sent[0].result, sent[0].coordinator_epoch),
        (TxnResult::Commit, 5)
    );
    // Loaded state: the producer continues where it was.
    assert_eq!(e2.init(ID, None, 4).await.producer_epoch, 1);
}

#[tokio::test]
async fn producer_id_rotates_when_epochs_are_exhausted() {
    let log = MemPartitions::new();
    // A transactional id at the last epoch, as a previous coordinator left it.
    let rec = TxnLogRecord {
        transactional_id: ID.into(),
        value: Some(crate::metadata::TxnTransitMetadata {
            producer_id: 7,
            prev_producer_id: -1,
            next_producer_id: -1,
            producer_epoch: i16::MAX - 1,
            last_producer_epoch: -1,
            txn_timeout_ms: 60_000,
            txn_state: TransactionState::CompleteCommit,
            topic_partitions: BTreeSet::new(),
            txn_start_timestamp: 1,
            txn_last_update_timestamp: 1,
            client_transaction_version: TransactionVersion::TV_2,
        }),
        transaction_version_level: TransactionVersion::TV_2,
    };
    log.logs.lock().insert(tp(), vec![rec.encode().unwrap()]);
    let e = env_with(config(), log).await;
    let r = e.init(ID, Some((7, i16::MAX - 1)), 4).await;
    assert_eq!(
        (r.error_code, r.producer_id.0, r.producer_epoch),
        (0, FIRST_PID, 0)
    );
    // A retry of that InitProducerId (old id at its last epoch): the same answer.
    let r = e.init(ID, Some((7, i16::MAX - 1)), 4).await;
    assert_eq!(
        (r.error_code, r.producer_id.0, r.producer_epoch),
        (0, FIRST_PID, 0)
    );
}

#[tokio::test]
async fn end_txn_v2_at_the_last_epoch_moves_to_a_new_producer_id() {
    let log = MemPartitions::new();
    let rec = TxnLogRecord {
        transactional_id: ID.into(),
        value: Some(crate::metadata::TxnTransitMetadata {
            producer_id: 7,
            prev_producer_id: -1,
            next_producer_id: -1,
            producer_epoch: i16::MAX - 1,
            last_producer_epoch: -1,
            txn_timeout_ms: 60_000,
            txn_state: TransactionState::Ongoing,
            topic_partitions: [("t".to_string(), 0)].into(),
            txn_start_timestamp: 1,
            txn_last_update_timestamp: 1,
            client_transaction_version: TransactionVersion::TV_2,
        }),
        transaction_version_level: TransactionVersion::TV_2,
    };
    log.logs.lock().insert(tp(), vec![rec.encode().unwrap()]);
    let e = env_with(
        TransactionCoordinatorConfig {
            transaction_max_timeout_ms: i32::MAX,
            ..config()
        },
        log,
    )
    .await;
    let r = e.end(7, i16::MAX - 1, true, 5).await;
    assert_eq!(
        (r.error_code, r.producer_id.0, r.producer_epoch),
        (0, FIRST_PID, 0)
    );
    e.wait_state(ID, "CompleteCommit").await;
    // The markers fence the old id at i16::MAX.
    assert_eq!(e.markers.sent.lock()[0].producer_epoch, i16::MAX);
    let d = e.describe(ID).await;
    assert_eq!((d.producer_id.0, d.producer_epoch), (FIRST_PID, 0));
    // A retry of the EndTxn from the old id: the new id's answer.
    let r = e.end(7, i16::MAX - 1, true, 5).await;
    assert_eq!(
        (r.error_code, r.producer_id.0, r.producer_epoch),
        (0, FIRST_PID, 0)
    );
}

#[tokio::test(start_paused = true)]
async fn timed_out_transactions_are_aborted_with_an_epoch_bump() {
    let e = env().await;
    let r = e
        .svc
        .init_producer_id(
            InitProducerIdRequest::default()
                .with_transactional_id(Some(TransactionalId(str_bytes(ID))))
                .with_transaction_timeout_ms(15_000)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
            4,
        )
        .await;
    assert_eq!(r.producer_epoch, 0);
    e.add(FIRST_PID, 0, &[("t", 0)], 3).await;
    // First check (10 s): not yet past 15 s.
    tokio::time::sleep(Duration::from_millis(10_500)).await;
    assert_eq!(e.state(ID).await, "Ongoing");
    // Second check (20 s): aborted.
    tokio::time::sleep(Duration::from_millis(10_000)).await;
    e.wait_state(ID, "CompleteAbort").await;
    let sent = e.markers.sent.lock().clone();
    assert_eq!(
        (sent[0].result, sent[0].producer_epoch),
        (TxnResult::Abort, 2)
    );
    assert_eq!(
        e.end(FIRST_PID, 0, true, 4).await.error_code,
        code(ErrorCode::ProducerFenced)
    );
}

#[tokio::test(start_paused = true)]
async fn idle_transactional_ids_expire() {
    let e = env().await;
    e.init(ID, None, 4).await;
    e.init("other", None, 4).await;
    tokio::time::sleep(Duration::from_secs(6 * 24 * 3600)).await;
    // Still there after 6 days; "other" is used again.
    assert_eq!(e.state(ID).await, "Empty");
    e.init("other", None, 4).await;
    tokio::time::sleep(Duration::from_secs(24 * 3600 + 3600)).await;
    let d = e.describe(ID).await;
    assert_eq!(d.error_code, code(ErrorCode::TransactionalIdNotFound));
    assert_eq!(e.state("other").await, "Empty");
    assert!(e.logged_states().contains(&None), "a tombstone was written");
    // The id can be used again: a new producer id.
    let r = e.init(ID, None, 4).await;
    assert_eq!(
        (r.error_code, r.producer_id.0, r.producer_epoch),
        (0, FIRST_PID + 2, 0)
    );
}

#[tokio::test]
async fn verify_only_answers_whether_partitions_are_in_the_transaction() {
    let e = env().await;
    e.init(ID, None, 4).await;
    e.add(FIRST_PID, 0, &[("t", 0)], 3).await;
    let verify = |pid: i64, epoch: i16| {
        AddPartitionsToTxnRequest::default().with_transactions(vec![
            AddPartitionsToTxnTransaction::default()
                .with_transactional_id(TransactionalId(str_bytes(ID)))
                .with_producer_id(ProducerId(pid))
                .with_producer_epoch(epoch)
                .with_verify_only(true)
                .with_topics(vec![AddPartitionsToTxnTopic::default()
                    .with_name(TopicName(str_bytes("t")))
                    .with_partitions(vec![0, 1])]),
        ])
    };
    let codes = |r: AddPartitionsToTxnResponse| -> Vec<(i32, i16)> {
        r.results_by_transaction[0].topic_results[0]
            .results_by_partition
            .iter()
            .map(|p| (p.partition_index, p.partition_error_code))
            .collect()
    };
    let r = e.svc.add_partitions_to_txn(verify(FIRST_PID, 0), 4).await;
    assert_eq!(
        codes(r),
        vec![(0, 0), (1, code(ErrorCode::TransactionAbortable))]
    );
    let r = e.svc.add_partitions_to_txn(verify(FIRST_PID, 1), 4).await;
    assert_eq!(
        codes(r),
        vec![
            (0, code(ErrorCode::ProducerFenced)),
            (1, code(ErrorCode::ProducerFenced))
        ]
    );
    let r = e
        .svc
        .add_partitions_to_txn(verify(FIRST_PID + 9, 0), 4)
        .await;
    assert_eq!(codes(r)[0].1, code(ErrorCode::InvalidProducerIdMapping));
    // The broker form without verify_only adds (transactions v2 at v5).
    let mut add = verify(FIRST_PID, 0);
    add.transactions[0].verify_only = false;
    let r = e.svc.add_partitions_to_txn(add, 5).await;
    assert_eq!(codes(r), vec![(0, 0), (1, 0)]);
    let r = e.svc.add_partitions_to_txn(verify(FIRST_PID, 0), 4).await;
    assert_eq!(codes(r), vec![(0, 0), (1, 0)]);
}

#[tokio::test]
async fn add_offsets_adds_the_groups_offsets_partition() {
    let e = env().await;
    e.init(ID, None, 4).await;
    let r = e
        .svc
        .add_offsets_to_txn(
            AddOffsetsToTxnRequest::default()
                .with_transactional_id(TransactionalId(str_bytes(ID)))
                .with_producer_id(ProducerId(FIRST_PID))
                .with_producer_epoch(0)
                .with_group_id(GroupId(str_bytes("my-group"))),
            3,
        )
        .await;
    assert_eq!(r.error_code, 0);
    let d = e.describe(ID).await;
    assert_eq!(d.topics[0].topic.0.as_str(), "__consumer_offsets");
    assert_eq!(d.topics[0].partitions, vec![partition_for("my-group", 50)]);
}

#[tokio::test]
async fn list_transactions_filters() {
    let e = env().await;
    e.init(ID, None, 4).await;
    e.add(FIRST_PID, 0, &[("t", 0)], 3).await;
    e.init("idle", None, 4).await;
    let list = |req: ListTransactionsRequest| {
        let svc = e.svc.clone();
        async move {
            let r = svc.list_transactions(req).await;
            let mut ids: Vec<String> = r
                .transaction_states
                .iter()
                .map(|t| t.transactional_id.0.to_string())
                .collect();
            ids.sort();
            (r.error_code, ids, r.unknown_state_filters.len())
        }
    };
    assert_eq!(
        list(ListTransactionsRequest::default().with_duration_filter(-1)).await,
        (0, vec!["idle".into(), ID.into()], 0)
    );
    let r = list(
        ListTransactionsRequest::default()
            .with_duration_filter(-1)
            .with_state_filters(vec![str_bytes("Ongoing"), str_bytes("Bogus")]),
    )
    .await;
    assert_eq!(r, (0, vec![ID.into()], 1));
    let r = list(
        ListTransactionsRequest::default()
            .with_duration_filter(-1)
            .with_producer_id_filters(vec![ProducerId(FIRST_PID + 1)]),
    )
    .await;
    assert_eq!(r, (0, vec!["idle".into()], 0));
    // Running for longer than an hour: not the open one. (An Empty id has no start time,
    // -1, so Kafka's `now - start > duration` keeps it.)
    let r = list(ListTransactionsRequest::default().with_duration_filter(3_600_000)).await;
    assert_eq!(r, (0, vec!["idle".into()], 0));
    let r = list(
        ListTransactionsRequest::default()
            .with_duration_filter(-1)
            .with_transactional_id_pattern(Some(str_bytes("txn-.*"))),
    )
    .await;
    assert_eq!(r, (0, vec![ID.into()], 0));
    let r = list(
        ListTransactionsRequest::default()
            .with_duration_filter(-1)
            .with_transactional_id_pattern(Some(str_bytes("("))),
    )
    .await;
    assert_eq!(r.0, code(ErrorCode::InvalidRegularExpression));
}

#[path = "service_lifecycle_tests.rs"]
mod lifecycle;

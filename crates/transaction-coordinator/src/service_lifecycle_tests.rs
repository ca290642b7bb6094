//! The service's lifecycle around failures: failed appends, loads, moves of the partition.

use super::*;

#[tokio::test]
async fn a_failed_prepare_sends_no_markers() {
    let e = env().await;
    e.init(ID, None, 4).await;
    e.add(FIRST_PID, 0, &[("t", 0)], 3).await;
    *e.log.fail_next.lock() = Some(ErrorCode::NotEnoughReplicas);
    let r = e.end(FIRST_PID, 0, true, 5).await;
    assert_eq!(
        (r.error_code, r.producer_epoch),
        (code(ErrorCode::CoordinatorNotAvailable), -1)
    );
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(e.markers.sent.lock().is_empty());
    // Reverted: the same EndTxn goes through, with the same bump.
    assert_eq!(e.state(ID).await, "Ongoing");
    let r = e.end(FIRST_PID, 0, true, 5).await;
    assert_eq!((r.error_code, r.producer_epoch), (0, 1));
    e.wait_state(ID, "CompleteCommit").await;
}

/// A loader that holds the load until the test lets it go.
struct GatedLoader {
    inner: Arc<MemPartitions>,
    gate: Mutex<Option<std::sync::mpsc::Receiver<()>>>,
}

impl CoordinatorLoader for GatedLoader {
    fn load(
        &self,
        tp: &TopicPartition,
        leader_epoch: i32,
        sink: &mut dyn FnMut(i64, bytes::Bytes, Option<bytes::Bytes>),
    ) -> Result<
        strom_coordinator_common::runtime::AppendResult,
        strom_coordinator_common::runtime::WriteError,
    > {
        if let Some(rx) = self.gate.lock().take() {
            let _ = rx.recv_timeout(Duration::from_secs(10));
        }
        self.inner.load(tp, leader_epoch, sink)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_during_a_load_get_load_in_progress() {
    let log = MemPartitions::new();
    let (tx, rx) = std::sync::mpsc::channel();
    let loader = Arc::new(GatedLoader {
        inner: log.clone(),
        gate: Mutex::new(Some(rx)),
    });
    let svc = TransactionCoordinatorService::new(
        config(),
        log.clone(),
        loader,
        Arc::new(Pids(AtomicI64::new(FIRST_PID))),
        Arc::new(Markers::default()),
    );
    svc.on_elected(0, 1);
    let req = || {
        InitProducerIdRequest::default()
            .with_transactional_id(Some(TransactionalId(str_bytes(ID))))
            .with_transaction_timeout_ms(1000)
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1)
    };
    let r = svc.init_producer_id(req(), 4).await;
    assert_eq!(r.error_code, code(ErrorCode::CoordinatorLoadInProgress));
    let l = svc
        .list_transactions(ListTransactionsRequest::default().with_duration_filter(-1))
        .await;
    assert_eq!(l.error_code, code(ErrorCode::CoordinatorLoadInProgress));
    tx.send(()).unwrap();
    for _ in 0..200 {
        if svc.partitions() == vec![(0, true)] {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(svc.init_producer_id(req(), 4).await.error_code, 0);
}

#[tokio::test]
async fn markers_stop_when_the_partition_moves_and_the_next_coordinator_completes() {
    let log = MemPartitions::new();
    let e = env_with(config(), log.clone()).await;
    e.init(ID, None, 4).await;
    e.add(FIRST_PID, 0, &[("t", 0)], 3).await;
    {
        let mut s = e.markers.script.lock();
        for _ in 0..1000 {
            s.push_back(MarkerOutcome::Error(ErrorCode::NotLeaderOrFollower));
        }
    }
    assert_eq!(e.end(FIRST_PID, 0, false, 4).await.error_code, 0);
    tokio::time::sleep(Duration::from_millis(20)).await;
    // This broker loses the partition: its sender gives up (no Complete written by it).
    e.svc.on_resigned(0, None);
    tokio::time::sleep(Duration::from_millis(30)).await;
    let sent = e.markers.sent.lock().len();
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert_eq!(e.markers.sent.lock().len(), sent, "the old sender stopped");
    assert!(e
        .logged_states()
        .iter()
        .all(|s| s.map(|s| s.0) != Some(TransactionState::CompleteAbort)));
    // The partition's next leader (a higher epoch) completes it.
    e.svc.on_elected(0, 6);
    e.markers.script.lock().clear();
    e.wait_state(ID, "CompleteAbort").await;
    assert_eq!(e.markers.sent.lock().last().unwrap().coordinator_epoch, 6);
}

#[tokio::test]
async fn ids_are_routed_by_the_topics_partition_count() {
    let e = env_with(
        TransactionCoordinatorConfig {
            transaction_state_log_num_partitions: 50,
            ..config()
        },
        MemPartitions::new(),
    )
    .await;
    assert_eq!(
        e.svc.partition_for("my-group"),
        partition_for("my-group", 50)
    );
    // The topic exists with one partition (created before the setting changed).
    e.svc.set_partition_count(1);
    assert_eq!(e.svc.partition_for("my-group"), 0);
    assert_eq!(e.init("my-group", None, 4).await.error_code, 0);
}

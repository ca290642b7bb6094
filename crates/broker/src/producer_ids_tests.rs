//! The producer id manager with a controller whose answers the test hands out (slow, failing,
//! silent) under paused tokio time, and with the real `QuorumController`.

use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::RwLock;
use strom_controller::controller::TopicDefaults;
use strom_controller::QuorumController;
use tokio::sync::mpsc;

use super::*;

type Answer = Result<ProducerIdBlock, ControllerError>;

/// A controller that answers each AllocateProducerIds with what the test sends, when it sends it:
/// until then the request waits, as behind a slow or unreachable controller.
struct Gate {
    requests: AtomicUsize,
    answers: tokio::sync::Mutex<mpsc::UnboundedReceiver<Answer>>,
}

impl Gate {
    fn new() -> (Arc<Gate>, mpsc::UnboundedSender<Answer>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let gate = Arc::new(Gate {
            requests: AtomicUsize::new(0),
            answers: tokio::sync::Mutex::new(rx),
        });
        (gate, tx)
    }

    fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

impl ProducerIdBlockSource for Gate {
    fn allocate_producer_ids(
        &self,
    ) -> Pin<Box<dyn Future<Output = Result<ProducerIdBlock, ControllerError>> + Send + '_>> {
        self.requests.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            let answer = self.answers.lock().await.recv().await;
            answer.unwrap_or(Err(ControllerError::NotController { leader: None }))
        })
    }
}

fn block(start: i64, len: i32) -> ProducerIdBlock {
    ProducerIdBlock { start, len }
}

/// Lets the spawned requests run (no time passes: the clock is paused and nothing sleeps).
async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

const NOT_READY: Result<i64, ProducerIdError> = Err(ProducerIdError::BlockNotReady);

#[tokio::test(start_paused = true)]
async fn a_slow_controller_never_blocks_a_caller() {
    let (gate, answers) = Gate::new();
    let m = ProducerIdManager::new(gate.clone());
    // No block yet: each call is answered at once; one request goes out however often asked.
    for _ in 0..5 {
        assert_eq!(m.generate_producer_id(), NOT_READY);
        settle().await;
    }
    assert_eq!(gate.requests(), 1);
    assert_eq!(
        NOT_READY.unwrap_err().code(),
        ErrorCode::CoordinatorLoadInProgress
    );

    answers.send(Ok(block(0, 10))).unwrap();
    settle().await;
    for id in 0..8 {
        assert_eq!(m.generate_producer_id(), Ok(id));
    }
    settle().await;
    assert_eq!(
        gate.requests(),
        1,
        "nothing requested before 90% of the block"
    );
    // The ninth id uses 90%: the next block is requested, in the background.
    assert_eq!(m.generate_producer_id(), Ok(8));
    settle().await;
    assert_eq!(gate.requests(), 2);
    assert_eq!(m.generate_producer_id(), Ok(9));
    // The controller has not answered and the block is used up: callers are told to retry, and
    // no second request joins the one in flight.
    for _ in 0..5 {
        assert_eq!(m.generate_producer_id(), NOT_READY);
        settle().await;
    }
    assert_eq!(gate.requests(), 2);

    answers.send(Ok(block(10, 10))).unwrap();
    settle().await;
    assert_eq!(m.generate_producer_id(), Ok(10));
    assert_eq!(gate.requests(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_failed_request_is_retried_after_the_backoff_only() {
    let (gate, answers) = Gate::new();
    let m = ProducerIdManager::new(gate.clone());
    answers
        .send(Err(ControllerError::NotController { leader: None }))
        .unwrap();
    assert_eq!(m.generate_producer_id(), NOT_READY);
    settle().await;
    assert_eq!(gate.requests(), 1);
    // Within the backoff, calls do not reach the controller.
    for _ in 0..5 {
        assert_eq!(m.generate_producer_id(), NOT_READY);
        settle().await;
    }
    assert_eq!(gate.requests(), 1);
    tokio::time::advance(RETRY_BACKOFF).await;
    assert_eq!(m.generate_producer_id(), NOT_READY);
    settle().await;
    assert_eq!(gate.requests(), 2);
    answers.send(Ok(block(1000, 10))).unwrap();
    settle().await;
    assert_eq!(m.generate_producer_id(), Ok(1000));
}

#[tokio::test(start_paused = true)]
async fn a_silent_controller_is_given_up_and_asked_again() {
    let (gate, answers) = Gate::new();
    let m = ProducerIdManager::new(gate.clone());
    m.prefetch();
    settle().await;
    assert_eq!(gate.requests(), 1);
    tokio::time::advance(ALLOCATION_TIMEOUT).await;
    settle().await;
    assert_eq!(m.generate_producer_id(), NOT_READY);
    settle().await;
    assert_eq!(gate.requests(), 1, "backoff after the timeout");
    tokio::time::advance(RETRY_BACKOFF).await;
    assert_eq!(m.generate_producer_id(), NOT_READY);
    settle().await;
    assert_eq!(gate.requests(), 2);
    answers.send(Ok(block(0, 10))).unwrap();
    settle().await;
    assert_eq!(m.generate_producer_id(), Ok(0));
}

#[tokio::test(start_paused = true)]
async fn a_block_overlapping_the_current_one_is_refused() {
    let (gate, answers) = Gate::new();
    let m = ProducerIdManager::new(gate.clone());
    m.prefetch();
    answers.send(Ok(block(0, 10))).unwrap();
    settle().await;
    for id in 0..10 {
        assert_eq!(m.generate_producer_id(), Ok(id));
    }
    // The prefetch asked at 90% gets a block that reuses ids, then an invalid range.
    answers.send(Ok(block(5, 10))).unwrap();
    settle().await;
    assert_eq!(m.generate_producer_id(), NOT_READY);
    tokio::time::advance(RETRY_BACKOFF).await;
    answers.send(Ok(block(i64::MAX - 5, 10))).unwrap();
    assert_eq!(m.generate_producer_id(), NOT_READY);
    settle().await;
    tokio::time::advance(RETRY_BACKOFF).await;
    answers.send(Ok(block(10, 10))).unwrap();
    assert_eq!(m.generate_producer_id(), NOT_READY);
    settle().await;
    assert_eq!(m.generate_producer_id(), Ok(10));
    assert_eq!(gate.requests(), 4);
}

fn controller(dir: &std::path::Path) -> Arc<QuorumController> {
    Arc::new(
        QuorumController::open(
            &dir.join("m.log"),
            TopicDefaults {
                num_partitions: 1,
                replication_factor: 1,
            },
        )
        .unwrap(),
    )
}

fn manager(c: Arc<QuorumController>) -> ProducerIdManager {
    let image = Arc::new(RwLock::new(c.image()));
    ProducerIdManager::new(Arc::new(ControllerChannel::new(1, c, image)))
}

/// The next id, retried as a client retries COORDINATOR_LOAD_IN_PROGRESS (bounded).
async fn next_id(m: &ProducerIdManager) -> i64 {
    for _ in 0..10_000 {
        match m.generate_producer_id() {
            Ok(id) => return id,
            Err(ProducerIdError::BlockNotReady) => {
                tokio::time::sleep(Duration::from_millis(1)).await
            }
        }
    }
    panic!("no producer id block arrived");
}

#[tokio::test]
async fn ids_are_unique_across_blocks_and_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let mut seen = std::collections::HashSet::new();
    {
        let m = manager(controller(dir.path()));
        for _ in 0..2500 {
            assert!(seen.insert(next_id(&m).await));
        }
    }
    // Prefetching took the block after the one in use.
    assert_eq!(controller(dir.path()).image().next_producer_id, 3000);
    let m = manager(controller(dir.path()));
    for _ in 0..1500 {
        assert!(seen.insert(next_id(&m).await));
    }
    assert_eq!(seen.len(), 4000);
}

#[tokio::test]
async fn prefetches_at_ninety_percent() {
    let dir = tempfile::tempdir().unwrap();
    let c = controller(dir.path());
    let m = manager(c.clone());
    for _ in 0..899 {
        next_id(&m).await;
    }
    assert_eq!(c.image().next_producer_id, 1000);
    next_id(&m).await;
    for _ in 0..10_000 {
        if c.image().next_producer_id == 2000 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("the next block was not requested at 90%");
}

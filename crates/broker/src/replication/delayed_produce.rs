//! acks=all: a produce waits until every partition's HW covers its append (Kafka's
//! `DelayedProduce` in the produce purgatory, [`crate::purgatory`]). It is checked when a
//! partition's HW moves (a follower fetch, an ISR change) or its leadership changes, and
//! expires at the request's timeout. No polling.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use strom_protocol::ErrorCode;
use tokio::sync::oneshot;

use crate::partition::Partition;
use crate::purgatory::DelayedOperation;

/// The outcome for one partition of a waiting produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckResult {
    /// The HW reached the append and the ISR met `min.insync.replicas`.
    Done,
    /// Completed with this error (NOT_ENOUGH_REPLICAS_AFTER_APPEND, NOT_LEADER_OR_FOLLOWER), or
    /// REQUEST_TIMED_OUT when the produce's timeout passed first.
    Error(ErrorCode),
}

struct Status {
    partition: Arc<Partition>,
    /// The append's last offset + 1: the HW must reach it.
    required_offset: i64,
    result: Option<AckResult>,
}

/// A produce waiting for its acks; answers through a channel, results in input order.
pub struct DelayedProduce {
    statuses: Mutex<Vec<Status>>,
    respond: Mutex<Option<oneshot::Sender<Vec<AckResult>>>>,
}

impl DelayedProduce {
    pub fn new(
        pending: Vec<(Arc<Partition>, i64)>,
        respond: oneshot::Sender<Vec<AckResult>>,
    ) -> Self {
        let statuses = pending
            .into_iter()
            .map(|(partition, required_offset)| Status {
                partition,
                required_offset,
                result: None,
            })
            .collect();
        Self {
            statuses: Mutex::new(statuses),
            respond: Mutex::new(Some(respond)),
        }
    }
}

fn check(s: &Status) -> Option<AckResult> {
    s.partition
        .check_enough_replicas_reach_offset(s.required_offset)
        .map(|r| match r {
            Ok(()) => AckResult::Done,
            Err(code) => AckResult::Error(code),
        })
}

impl DelayedOperation for DelayedProduce {
    /// Kafka's `DelayedProduce.tryComplete`: each partition is done once its HW passes the
    /// append (or it failed); the produce once all are.
    fn try_complete(&self) -> bool {
        let mut statuses = self.statuses.lock();
        for s in statuses.iter_mut().filter(|s| s.result.is_none()) {
            s.result = check(s);
        }
        statuses.iter().all(|s| s.result.is_some())
    }

    fn on_complete(&self, expired: bool) {
        let results = self
            .statuses
            .lock()
            .iter()
            .map(|s| {
                s.result
                    // One last look at the timeout, then REQUEST_TIMED_OUT.
                    .or_else(|| expired.then(|| check(s)).flatten())
                    .unwrap_or(AckResult::Error(ErrorCode::RequestTimedOut))
            })
            .collect();
        if let Some(tx) = self.respond.lock().take() {
            let _ = tx.send(results);
        }
    }
}

/// Waits until, for each `(partition, required_offset)` (the append's last offset + 1), the
/// partition's HW reaches `required_offset`, or `timeout` passes. Results are in input order.
/// Completes without waiting when every entry is already satisfied (ISR = {self}). The
/// partitions share one set of purgatories (as a replica manager's do); the produce waits in
/// the first one's.
pub async fn wait_for_acks(pending: &[(Arc<Partition>, i64)], timeout: Duration) -> Vec<AckResult> {
    let Some((first, _)) = pending.first() else {
        return Vec::new();
    };
    let purgatory = &first.delayed_operations().produce;
    debug_assert!(pending
        .iter()
        .all(|(p, _)| Arc::ptr_eq(p.delayed_operations(), first.delayed_operations())));
    let keys: Vec<_> = pending.iter().map(|(p, _)| p.key().clone()).collect();
    let (tx, rx) = oneshot::channel();
    purgatory.try_complete_else_watch(DelayedProduce::new(pending.to_vec(), tx), timeout, &keys);
    crate::request_queue::parked();
    rx.await
        .unwrap_or_else(|_| vec![AckResult::Error(ErrorCode::RequestTimedOut); pending.len()])
}

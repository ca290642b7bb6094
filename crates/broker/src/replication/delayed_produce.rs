//! acks=all: a produce waits until every partition's HW covers its append (Kafka's
//! `DelayedProduce` in the produce purgatory). Waiting is event-driven: the wait registers a
//! [`Notify`] with each partition, which wakes it whenever its HW moves (a follower fetch), its
//! registration changes (ISR, leadership) or data is appended. No polling.

use std::sync::Arc;
use std::time::Duration;

use strom_protocol::ErrorCode;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::partition::Partition;

/// The outcome for one partition of a waiting produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckResult {
    /// The HW reached the append and the ISR met `min.insync.replicas`.
    Done,
    /// Completed with this error (NOT_ENOUGH_REPLICAS_AFTER_APPEND, NOT_LEADER_OR_FOLLOWER), or
    /// REQUEST_TIMED_OUT when the produce's timeout passed first.
    Error(ErrorCode),
}

/// Waits until, for each `(partition, required_offset)` (the append's last offset + 1), the
/// partition's HW reaches `required_offset`, or `timeout` passes. Results are in input order.
/// Completes without waiting when every entry is already satisfied (ISR = {self}).
pub async fn wait_for_acks(pending: &[(Arc<Partition>, i64)], timeout: Duration) -> Vec<AckResult> {
    let mut results: Vec<Option<AckResult>> = vec![None; pending.len()];
    let deadline = Instant::now() + timeout;
    let waiter = Arc::new(Notify::new());
    loop {
        // Register before checking: a wake between the check and the await leaves a permit.
        for ((p, required), slot) in pending.iter().zip(results.iter_mut()) {
            if slot.is_some() {
                continue;
            }
            p.register_waiter(&waiter);
            *slot = p
                .check_enough_replicas_reach_offset(*required)
                .map(|r| match r {
                    Ok(()) => AckResult::Done,
                    Err(code) => AckResult::Error(code),
                });
        }
        if results.iter().all(Option::is_some) {
            break;
        }
        tokio::select! {
            _ = waiter.notified() => {}
            _ = tokio::time::sleep_until(deadline) => {
                // One last look, then whatever is left times out.
                for ((p, required), slot) in pending.iter().zip(results.iter_mut()) {
                    if slot.is_none() {
                        *slot = Some(match p.check_enough_replicas_reach_offset(*required) {
                            Some(Ok(())) => AckResult::Done,
                            Some(Err(code)) => AckResult::Error(code),
                            None => AckResult::Error(ErrorCode::RequestTimedOut),
                        });
                    }
                }
                break;
            }
        }
    }
    results.into_iter().map(|r| r.expect("all set")).collect()
}

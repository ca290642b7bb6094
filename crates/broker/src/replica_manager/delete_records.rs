//! DeleteRecords in the replica manager (Kafka's `ReplicaManager.deleteRecords` and
//! `DelayedDeleteRecords`): each leader moves its log start at once; the answer waits in the
//! delete-records purgatory until every replica has moved its own (the low watermark, learned
//! from the followers' fetches), checked on those fetches and on leadership changes.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use strom_protocol::ErrorCode;
use tokio::sync::oneshot;

use super::ReplicaManager;
use crate::partition::Partition;
use crate::purgatory::DelayedOperation;

/// One partition's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeleteRecordsResult {
    pub error: Option<ErrorCode>,
    /// -1 when unknown.
    pub low_watermark: i64,
}

struct Status {
    partition: Option<Arc<Partition>>,
    required_offset: i64,
    result: DeleteRecordsResult,
    pending: bool,
}

/// DeleteRecords waiting for the low watermark of its partitions.
pub struct DelayedDeleteRecords {
    statuses: Mutex<Vec<Status>>,
    respond: Mutex<Option<oneshot::Sender<Vec<DeleteRecordsResult>>>>,
}

impl DelayedOperation for DelayedDeleteRecords {
    /// Kafka's `DelayedDeleteRecords.tryComplete`: a partition is done when its low watermark
    /// reaches the requested offset, or with NOT_LEADER_OR_FOLLOWER once this broker no longer
    /// leads it.
    fn try_complete(&self) -> bool {
        let mut statuses = self.statuses.lock();
        for s in statuses.iter_mut().filter(|s| s.pending) {
            let Some(p) = &s.partition else {
                s.pending = false;
                continue;
            };
            if p.is_removed() {
                s.pending = false;
                s.result.error = Some(ErrorCode::UnknownTopicOrPartition);
                continue;
            }
            if !p.is_leader() {
                s.pending = false;
                s.result.error = Some(ErrorCode::NotLeaderOrFollower);
                continue;
            }
            let lw = p.low_watermark();
            s.result.low_watermark = lw;
            if lw >= s.required_offset {
                s.pending = false;
                s.result.error = None;
            }
        }
        statuses.iter().all(|s| !s.pending)
    }

    fn on_complete(&self, _expired: bool) {
        let results = self.statuses.lock().iter().map(|s| s.result).collect();
        if let Some(tx) = self.respond.lock().take() {
            let _ = tx.send(results);
        }
    }
}

impl ReplicaManager {
    /// Moves the log start of each `(topic, partition, offset)` (offset -1: the HW) and waits,
    /// at most `timeout`, until every replica has; a partition still waiting then answers
    /// REQUEST_TIMED_OUT with the low watermark reached so far. Results in request order.
    pub async fn delete_records(
        &self,
        timeout: Duration,
        requests: &[(String, i32, i64)],
    ) -> Vec<DeleteRecordsResult> {
        let mut statuses = Vec::with_capacity(requests.len());
        for (topic, index, offset) in requests {
            let found = self.get_partition_or_error(topic, *index);
            let partition = found.as_ref().ok().cloned();
            let (result, required_offset, pending) = match &partition {
                None => (
                    DeleteRecordsResult {
                        error: found.err(),
                        low_watermark: -1,
                    },
                    -1,
                    false,
                ),
                Some(p) => match p.delete_records_on_leader(*offset) {
                    Ok(r) => {
                        let pending = r.low_watermark < r.requested_offset;
                        (
                            DeleteRecordsResult {
                                error: pending.then_some(ErrorCode::RequestTimedOut),
                                low_watermark: r.low_watermark,
                            },
                            r.requested_offset,
                            pending,
                        )
                    }
                    Err(e) => {
                        tracing::debug!(%topic, partition = index, error = %e, "delete records refused");
                        (
                            DeleteRecordsResult {
                                error: Some(e.error_code()),
                                low_watermark: -1,
                            },
                            -1,
                            false,
                        )
                    }
                },
            };
            statuses.push(Status {
                partition,
                required_offset,
                result,
                pending,
            });
        }
        if !statuses.iter().any(|s| s.pending) {
            return statuses.into_iter().map(|s| s.result).collect();
        }
        let keys: Vec<_> = statuses
            .iter()
            .filter_map(|s| s.partition.as_ref().map(|p| p.key().clone()))
            .collect();
        let fallback: Vec<DeleteRecordsResult> = statuses.iter().map(|s| s.result).collect();
        let (tx, rx) = oneshot::channel();
        let op = DelayedDeleteRecords {
            statuses: Mutex::new(statuses),
            respond: Mutex::new(Some(tx)),
        };
        self.delayed()
            .delete_records
            .try_complete_else_watch(op, timeout, &keys);
        crate::request_queue::parked();
        rx.await.unwrap_or(fallback)
    }
}

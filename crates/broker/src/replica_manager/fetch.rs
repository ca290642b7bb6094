//! The fetch path of the replica manager (Kafka's `ReplicaManager.fetchMessages` /
//! `readFromLog` and `DelayedFetch`): each partition is read through
//! [`Partition::fetch_records`], which checks leadership and the fetcher's epoch and takes the
//! partition's offsets at one point ([`crate::partition::LogReadInfo`]); a fetch short of
//! `min_bytes` waits in the fetch purgatory until new data, a leadership change or a moved log
//! start on one of its partitions, or `max_wait_ms`. The Fetch handler only decodes and encodes;
//! read_committed reads stop at the LSO and carry the aborted transactions of what they return;
//! a read_committed fetch waiting in the purgatory wakes when the LSO moves (it watches the LSO
//! it read up to). Fetch sessions and preferred read replicas belong here.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use strom_protocol::ErrorCode;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::ReplicaManager;
use crate::partition::{EpochEndOffset, FetchIsolation, Partition, PartitionError, PartitionFetch};
use crate::purgatory::DelayedOperation;

/// The request-level part of a fetch (Kafka's `FetchParams`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchParams {
    /// The follower fetching (`None`: a consumer).
    pub replica_id: Option<i32>,
    /// The follower's broker epoch (Fetch v15+'s `ReplicaState.ReplicaEpoch`; -1 before).
    pub replica_epoch: i64,
    pub max_wait: Duration,
    /// Answer once this much is readable; at most `max_bytes` (Kafka's `fetchMinBytes`), so 0
    /// or less answers at once.
    pub min_bytes: i32,
    /// The whole response's limit (Fetch v3+): the request's `max_bytes` capped by the broker's
    /// `fetch.max.bytes` (Kafka's `fetchMaxBytes`). The first partition with data may exceed it
    /// by its first batch; a negative limit fails the first partition that has data.
    pub max_bytes: i32,
    pub isolation: FetchIsolation,
    /// Only the leader serves (no follower reads yet, KIP-392).
    pub fetch_only_leader: bool,
}

impl FetchParams {
    pub fn is_from_follower(&self) -> bool {
        self.replica_id.is_some()
    }
}

/// One partition to fetch: `topic` is `None` when the request named an unknown topic id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchPartitionRequest {
    pub topic: Option<String>,
    pub partition: i32,
    pub fetch: PartitionFetch,
}

/// One partition's answer (Kafka's `FetchPartitionData`); offsets are -1 when unknown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchPartitionData {
    pub error: Option<ErrorCode>,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    /// Not read yet: the connection sends them from the segment files.
    pub records: strom_storage::FileRecords,
    pub diverging_epoch: Option<EpochEndOffset>,
    /// read_committed: the aborted transactions overlapping `records`.
    pub aborted_transactions: Option<Vec<strom_storage::txn_index::AbortedTxn>>,
}

impl FetchPartitionData {
    fn error(code: ErrorCode) -> Self {
        Self {
            error: Some(code),
            high_watermark: -1,
            last_stable_offset: -1,
            log_start_offset: -1,
            records: Default::default(),
            diverging_epoch: None,
            aborted_transactions: None,
        }
    }
}

/// One pass over the partitions of a fetch.
struct LogReadResults {
    data: Vec<FetchPartitionData>,
    bytes: usize,
    /// An error or a diverging epoch: the fetch answers at once, as in Kafka.
    complete_now: bool,
    /// What a delayed fetch watches: each partition read, and the end it could read up to.
    watch: Vec<(Arc<Partition>, PartitionFetch, i64)>,
}

impl ReplicaManager {
    /// Kafka's `fetchMessages`: reads every partition; answers at once when there is an error,
    /// a diverging epoch, `min_bytes` of data or no wait; otherwise waits in the fetch purgatory
    /// and reads again when an event on one of its partitions may have brought enough, or at
    /// `max_wait`. Results are in request order.
    pub async fn fetch_messages(
        &self,
        params: &FetchParams,
        requests: &[FetchPartitionRequest],
    ) -> Vec<FetchPartitionData> {
        let deadline = Instant::now() + params.max_wait;
        loop {
            let read = self.read_from_log(params, requests);
            let now = Instant::now();
            if read.complete_now
                || read.bytes as i64 >= params.min_bytes as i64
                || now >= deadline
                || read.watch.is_empty()
            {
                return read.data;
            }
            let (tx, rx) = oneshot::channel();
            let keys: Vec<_> = read.watch.iter().map(|(p, _, _)| p.key().clone()).collect();
            let op = DelayedFetch {
                params: *params,
                partitions: read.watch,
                respond: Mutex::new(Some(tx)),
            };
            self.delayed()
                .fetch
                .try_complete_else_watch(op, deadline - now, &keys);
            // Parked: the request no longer takes a slot of `queued.max.requests`.
            crate::request_queue::parked();
            let expired = rx.await.unwrap_or(true);
            if expired {
                // Kafka's onComplete at the timeout: whatever there is now.
                return self.read_from_log(params, requests).data;
            }
        }
    }

    /// Kafka's `readFromLog`: one read of every partition, within the response's byte limit.
    /// Each partition reads at most min(its `partition_max_bytes`, what is left of the limit);
    /// until one returns data the first batch is returned even when larger (min-one-message).
    /// What is left never goes below 0 after a partition, so a negative limit fails only the
    /// first partition that has data and leaves the others a limit of 0 (Kafka's arithmetic).
    fn read_from_log(
        &self,
        params: &FetchParams,
        requests: &[FetchPartitionRequest],
    ) -> LogReadResults {
        let now_ms = crate::now_ms();
        let mut remaining = params.max_bytes as i64;
        let mut min_one_message = true;
        let mut out = LogReadResults {
            data: Vec::with_capacity(requests.len()),
            bytes: 0,
            complete_now: false,
            watch: Vec::with_capacity(requests.len()),
        };
        for req in requests {
            let Some(topic) = &req.topic else {
                // Kafka leaves these out of `readFromLog` (not read, no effect on the limit).
                out.complete_now = true;
                out.data
                    .push(FetchPartitionData::error(ErrorCode::UnknownTopicId));
                continue;
            };
            let limit = (req.fetch.max_bytes as i64).min(remaining) as i32;
            // What a partition does not read is still taken off: a negative limit is 0 after it.
            remaining = remaining.max(0);
            let partition = match self.get_partition_or_error(topic, req.partition) {
                Ok(p) => p,
                Err(code) => {
                    out.complete_now = true;
                    out.data.push(FetchPartitionData::error(code));
                    continue;
                }
            };
            let result = partition.fetch_records(
                params.replica_id,
                params.replica_epoch,
                params.isolation,
                &req.fetch,
                limit,
                min_one_message,
                params.fetch_only_leader,
                now_ms,
            );
            match result {
                Ok(info) => {
                    let n = info.records.len();
                    if n > 0 {
                        min_one_message = false;
                        out.bytes += n;
                    }
                    remaining = (remaining - n as i64).max(0);
                    if info.diverging_epoch.is_some() {
                        out.complete_now = true;
                    }
                    let seen_end = match params.isolation {
                        FetchIsolation::LogEnd => info.log_end_offset,
                        FetchIsolation::HighWatermark => info.high_watermark,
                        FetchIsolation::TxnCommitted => info.last_stable_offset,
                    };
                    out.watch.push((partition.clone(), req.fetch, seen_end));
                    out.data.push(FetchPartitionData {
                        error: None,
                        high_watermark: info.high_watermark,
                        last_stable_offset: info.last_stable_offset,
                        log_start_offset: info.log_start_offset,
                        records: info.records,
                        diverging_epoch: info.diverging_epoch,
                        aborted_transactions: info.aborted_transactions,
                    });
                }
                Err(e) => {
                    out.complete_now = true;
                    let mut data = FetchPartitionData::error(e.error_code());
                    match &e {
                        // A follower handles an out-of-range offset from the leader's log start
                        // and HW (behind: restart there; ahead: truncate).
                        PartitionError::OffsetOutOfRange(_)
                        | PartitionError::Storage(
                            strom_storage::StorageError::OffsetOutOfRange { .. },
                        ) => {
                            let at = partition.offset_snapshot();
                            data.high_watermark = at.high_watermark;
                            data.last_stable_offset = at.last_stable_offset;
                            data.log_start_offset = at.log_start_offset;
                        }
                        PartitionError::Storage(se) => {
                            tracing::warn!(%topic, partition = req.partition, error = %e, "fetch read failed");
                            self.handle_storage_error(&partition, se);
                        }
                        _ => {}
                    }
                    out.data.push(data);
                }
            }
        }
        out
    }
}

/// A fetch waiting for data (Kafka's `DelayedFetch`). It completes when one of its partitions
/// may have something new for it (see [`Partition::fetch_may_complete`]); the fetch then reads
/// again on its own task, so the append that woke it does not pay for the read.
pub struct DelayedFetch {
    params: FetchParams,
    partitions: Vec<(Arc<Partition>, PartitionFetch, i64)>,
    /// `true`: expired.
    respond: Mutex<Option<oneshot::Sender<bool>>>,
}

impl DelayedOperation for DelayedFetch {
    fn try_complete(&self) -> bool {
        self.partitions.iter().any(|(p, fetch, seen_end)| {
            p.fetch_may_complete(
                self.params.isolation,
                fetch,
                self.params.fetch_only_leader,
                *seen_end,
            )
        })
    }

    fn on_complete(&self, expired: bool) {
        if let Some(tx) = self.respond.lock().take() {
            let _ = tx.send(expired);
        }
    }
}

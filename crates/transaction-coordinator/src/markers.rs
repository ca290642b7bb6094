//! The broker's side of the coordinator (ports it implements) and the sending of transaction
//! markers (Kafka's `TransactionMarkerChannelManager` and its completion handler).
//!
//! Once a PrepareCommit/PrepareAbort is written, every partition of the transaction must get
//! its marker before CompleteCommit/CompleteAbort is written. The [`MarkerChannel`] writes a
//! transaction's markers to the partitions' leaders (WriteTxnMarkers) and reports each
//! partition's outcome; [`send_markers`] retries what failed for a retriable reason with a
//! backoff until every partition is done, drops partitions whose topic was deleted, and gives
//! up only if the coordinator was fenced (a newer coordinator owns the transaction and will
//! finish it) or on an error that cannot succeed by retrying.

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use strom_protocol::memory_records::TxnResult;
use strom_protocol::ErrorCode;

use crate::metadata::TxnPartition;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Where new producer ids come from (Kafka's `ProducerIdManager`; the broker allocates blocks
/// from the controller).
pub trait ProducerIdSource: Send + Sync + 'static {
    fn generate_producer_id(&self) -> BoxFuture<'_, Result<i64, ErrorCode>>;
}

/// One transaction's markers (Kafka's `TxnMarkerEntry`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnMarkerEntry {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub result: TxnResult,
    /// The leader epoch of the coordinator's `__transaction_state` partition: a partition
    /// leader refuses markers from an older coordinator (TRANSACTION_COORDINATOR_FENCED).
    pub coordinator_epoch: i32,
    pub partitions: Vec<TxnPartition>,
    /// The transaction's client transaction version (WriteTxnMarkers v2's
    /// `transaction_version`): from 2 on, the partition leaders check the marker's epoch as
    /// one the coordinator bumped.
    pub transaction_version: i16,
}

/// What became of one partition's marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerOutcome {
    Written,
    /// The partition's leader answered this error (or the request to it failed with it).
    Error(ErrorCode),
    /// The partition no longer exists (its topic was deleted): nothing to mark.
    TopicDeleted,
}

/// Writes markers to the partitions' leaders (WriteTxnMarkers, one request per leader).
pub trait MarkerChannel: Send + Sync + 'static {
    /// The outcome for every partition of `entry`.
    fn write_markers(
        &self,
        entry: TxnMarkerEntry,
    ) -> BoxFuture<'_, Vec<(TxnPartition, MarkerOutcome)>>;
}

/// How [`send_markers`] ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendOutcome {
    /// Every partition has its marker (or is gone): the transaction can be completed.
    Done,
    /// Stopped without completing: fenced by a newer coordinator, this coordinator no longer
    /// owns the transaction, or an error retrying cannot fix.
    Abandoned(String),
}

/// Kafka's `TransactionMarkerRequestCompletionHandler`: which errors are retried.
fn classify(code: ErrorCode) -> Classified {
    match code {
        ErrorCode::UnknownTopicOrPartition
        | ErrorCode::NotLeaderOrFollower
        | ErrorCode::NotEnoughReplicas
        | ErrorCode::NotEnoughReplicasAfterAppend
        | ErrorCode::RequestTimedOut
        | ErrorCode::KafkaStorageError
        // The request did not reach the leader or it is moving: Kafka re-enqueues these.
        | ErrorCode::NetworkException
        | ErrorCode::LeaderNotAvailable
        | ErrorCode::BrokerNotAvailable => Classified::Retry,
        ErrorCode::InvalidProducerEpoch | ErrorCode::TransactionCoordinatorFenced => {
            Classified::Fenced
        }
        _ => Classified::Fatal,
    }
}

enum Classified {
    Retry,
    Fenced,
    Fatal,
}

/// Sends `entry`'s markers until each partition has one. `still_current` is asked before
/// every round (a coordinator that lost the partition stops; the new one resends).
pub async fn send_markers<F, Fut>(
    channel: &dyn MarkerChannel,
    entry: TxnMarkerEntry,
    backoff: Duration,
    mut still_current: F,
) -> SendOutcome
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let mut remaining: BTreeSet<TxnPartition> = entry.partitions.iter().cloned().collect();
    let mut round = 0u32;
    while !remaining.is_empty() {
        if !still_current().await {
            return SendOutcome::Abandoned("the coordinator no longer owns the transaction".into());
        }
        if round > 0 {
            tokio::time::sleep(backoff).await;
        }
        round += 1;
        let this_round = TxnMarkerEntry {
            partitions: remaining.iter().cloned().collect(),
            ..entry.clone()
        };
        for (tp, outcome) in channel.write_markers(this_round).await {
            match outcome {
                MarkerOutcome::Written => {
                    remaining.remove(&tp);
                }
                MarkerOutcome::TopicDeleted => {
                    tracing::info!(?tp, "transaction marker skipped: the topic was deleted");
                    remaining.remove(&tp);
                }
                MarkerOutcome::Error(code) => match classify(code) {
                    Classified::Retry => {
                        tracing::debug!(?tp, ?code, "transaction marker will be retried");
                    }
                    Classified::Fenced => {
                        return SendOutcome::Abandoned(format!(
                            "{tp:?} answered {code:?}: a newer coordinator owns the transaction"
                        ));
                    }
                    Classified::Fatal => {
                        tracing::error!(
                            ?tp,
                            ?code,
                            producer_id = entry.producer_id,
                            "transaction marker failed"
                        );
                        return SendOutcome::Abandoned(format!("{tp:?} answered {code:?}"));
                    }
                },
            }
        }
    }
    SendOutcome::Done
}

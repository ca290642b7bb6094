//! The group coordinator's part in transactions: TxnOffsetCommit (Kafka's
//! `GroupCoordinatorService.commitTransactionalOffsets`) and the end markers WriteTxnMarkers
//! asks of a `__consumer_offsets` partition (`completeTransaction`).
//!
//! A TxnOffsetCommit's offsets are written as one transactional batch of the producer, so they
//! stay pending — invisible to OffsetFetch — until the transaction coordinator's marker for
//! the producer reaches the partition: a COMMIT makes them the group's committed offsets, an
//! ABORT drops them (see [`crate::offsets::pending`]).

use std::time::Duration;

use strom_coordinator_common::runtime::{
    CoordinatorError, TopicPartition, TxnResult, WriteContext, WriteResult,
};
use strom_protocol::kafka::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use strom_protocol::kafka::messages::*;
use strom_protocol::kafka::protocol::StrBytes;
use strom_protocol::ErrorCode;

use super::offsets::{known_partitions, op_error, PartitionAnswers};
use super::{GroupCoordinatorService, GroupRequestContext};
use crate::offsets::ops::{
    self, CommitPartition, CommitRequest, CommitTopic, DEFAULT_RETENTION_TIME,
};
use crate::shard::GroupCoordinatorShard;
use crate::topic::GROUP_METADATA_TOPIC_NAME;

impl GroupCoordinatorService {
    /// TxnOffsetCommit (v0-v5): partitions the topics image does not have answer
    /// UNKNOWN_TOPIC_OR_PARTITION (Kafka's broker checks its metadata first); the rest are
    /// validated as KIP-447 asks and written in the producer's transaction. An empty group id
    /// is INVALID_GROUP_ID; a failed write answers its code for every partition.
    ///
    /// Whether the producer's transaction includes this group (AddOffsetsToTxn, or KIP-890
    /// verification) is the transaction coordinator's to check before this is called.
    pub async fn txn_offset_commit(
        &self,
        ctx: &GroupRequestContext,
        req: TxnOffsetCommitRequest,
    ) -> TxnOffsetCommitResponse {
        let group_id = req.group_id.0.to_string();
        if group_id.is_empty() {
            return txn_offset_commit_error(&req, ErrorCode::InvalidGroupId);
        }
        let mut answers = PartitionAnswers::default();
        let image = self.metadata.read().clone();
        let topics = req.topics.iter().map(|t| {
            (
                t.name.0.to_string(),
                t.partitions
                    .iter()
                    .map(|p| {
                        (
                            p.partition_index,
                            CommitPartition {
                                partition: p.partition_index,
                                offset: p.committed_offset,
                                leader_epoch: p.committed_leader_epoch,
                                metadata: p.committed_metadata.as_ref().map(|m| m.to_string()),
                            },
                        )
                    })
                    .collect(),
            )
        });
        let known = known_partitions(&image, topics, &mut answers);
        if known.is_empty() {
            // Nothing left for the coordinator: Kafka answers without asking it.
            return txn_offset_commit_response(answers);
        }
        let commit = CommitRequest {
            group_id: group_id.clone(),
            member_id: req.member_id.to_string(),
            generation_id_or_member_epoch: req.generation_id,
            group_instance_id: req.group_instance_id.as_ref().map(|s| s.to_string()),
            retention_time_ms: DEFAULT_RETENTION_TIME,
            api_version: ctx.api_version,
            topics: known
                .into_iter()
                .map(|(name, partitions)| CommitTopic {
                    name,
                    topic_id: uuid::Uuid::nil(),
                    partitions,
                })
                .collect(),
        };
        let sent = commit.clone();
        let r = self
            .runtime
            .transactional_write(
                &self.topic_partition(&group_id),
                req.producer_id.0,
                req.producer_epoch,
                move |shard: &mut GroupCoordinatorShard, _ctx: &WriteContext| {
                    let (records, response) = ops::commit_transactional_offsets(shard, &sent)
                        .map_err(|code| op_error(code, "transactional offset commit"))?;
                    Ok(WriteResult { records, response })
                },
            )
            .await;
        match r {
            Ok(results) => answers.merge(results),
            Err(e) => {
                let code = e.code().code();
                for t in &commit.topics {
                    for p in &t.partitions {
                        answers.add(&t.name, p.partition, code);
                    }
                }
            }
        }
        txn_offset_commit_response(answers)
    }

    /// Writes the end marker of `producer_id`'s transaction to offsets partition `partition`
    /// (what WriteTxnMarkers asks of it): a COMMIT makes the producer's pending offsets the
    /// committed ones, an ABORT drops them; answered once the marker is committed, or
    /// REQUEST_TIMED_OUT after `timeout` (Kafka's broker gives `request.timeout.ms`). The
    /// error is the code the WriteTxnMarkers response carries for the partition: a failed
    /// append's own code (e.g. NOT_ENOUGH_REPLICAS, INVALID_PRODUCER_EPOCH), except that the
    /// transaction coordinator does not expect the coordinator codes, so NOT_COORDINATOR,
    /// COORDINATOR_NOT_AVAILABLE and COORDINATOR_LOAD_IN_PROGRESS become
    /// NOT_LEADER_OR_FOLLOWER (it retries), as Kafka's `KafkaApis` translates them.
    pub async fn complete_transaction(
        &self,
        partition: i32,
        producer_id: i64,
        producer_epoch: i16,
        coordinator_epoch: i32,
        result: TxnResult,
        timeout: Duration,
    ) -> Result<(), ErrorCode> {
        let tp: TopicPartition = (GROUP_METADATA_TOPIC_NAME.to_string(), partition);
        self.runtime
            .schedule_transaction_completion(
                &tp,
                producer_id,
                producer_epoch,
                coordinator_epoch,
                result,
                timeout,
            )
            .await
            .map_err(|e| write_txn_markers_error(&e))
    }
}

/// The code WriteTxnMarkers answers for a failed completion on an offsets partition.
pub fn write_txn_markers_error(e: &CoordinatorError) -> ErrorCode {
    match e.code() {
        ErrorCode::NotCoordinator
        | ErrorCode::CoordinatorNotAvailable
        | ErrorCode::CoordinatorLoadInProgress => ErrorCode::NotLeaderOrFollower,
        other => other,
    }
}

/// `code` for every partition of `req` (Kafka's `TxnOffsetCommitRequest.getErrorResponse`).
pub fn txn_offset_commit_error(
    req: &TxnOffsetCommitRequest,
    code: ErrorCode,
) -> TxnOffsetCommitResponse {
    let mut answers = PartitionAnswers::default();
    for t in &req.topics {
        for p in &t.partitions {
            answers.add(t.name.0.as_str(), p.partition_index, code.code());
        }
    }
    txn_offset_commit_response(answers)
}

fn txn_offset_commit_response(answers: PartitionAnswers) -> TxnOffsetCommitResponse {
    TxnOffsetCommitResponse::default().with_topics(
        answers
            .topics
            .into_iter()
            .map(|(name, parts)| {
                TxnOffsetCommitResponseTopic::default()
                    .with_name(TopicName(StrBytes::from_string(name)))
                    .with_partitions(
                        parts
                            .into_iter()
                            .map(|(p, code)| {
                                TxnOffsetCommitResponsePartition::default()
                                    .with_partition_index(p)
                                    .with_error_code(code)
                            })
                            .collect(),
                    )
            })
            .collect(),
    )
}

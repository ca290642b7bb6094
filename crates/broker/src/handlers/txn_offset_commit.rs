//! TxnOffsetCommit (v0-v5; Kafka 4.4 serves v6 too, which names topics by id and which the
//! generated structs do not decode): a transactional producer commits a consumer group's
//! offsets inside its transaction (`sendOffsetsToTransaction`). The group coordinator
//! validates the member (KIP-447) and writes the offsets in the producer's transactional
//! batch; they stay pending until the transaction's marker reaches the offsets partition.

use std::sync::Arc;

use strom_group_coordinator::service::txn_offset_commit_error;
use strom_group_coordinator::topic::GROUP_METADATA_TOPIC_NAME;
use strom_protocol::kafka::messages::*;
use strom_protocol::ErrorCode;

use super::groups::group_context;
use crate::request_context::RequestContext;
use crate::server::Broker;
use crate::txn_verification::TransactionSupportedOperation;

pub async fn txn_offset_commit(
    b: &Arc<Broker>,
    ctx: &RequestContext,
    req: TxnOffsetCommitRequest,
) -> TxnOffsetCommitResponse {
    // KIP-890: the offsets partition must be in the producer's transaction before its
    // offsets are written. Kafka's coordinator runtime asks the transaction coordinator first
    // (`maybeStartTransactionVerification` of the offsets partition): with transactions v2
    // (v5+) it adds the partition, before that it checks that AddOffsetsToTxn added it.
    let op = match ctx.api_version {
        v if v >= 5 => TransactionSupportedOperation::AddPartition,
        4 => TransactionSupportedOperation::GenericErrorSupported,
        _ => TransactionSupportedOperation::DefaultError,
    };
    // With verification off only transactions v2 asks (it has no AddOffsetsToTxn to add the
    // partition otherwise), as for a produce.
    let ask = b.config.transaction_partition_verification_enable || op.supports_epoch_bump();
    if ask && !req.group_id.0.is_empty() {
        let tp = (
            GROUP_METADATA_TOPIC_NAME.to_string(),
            b.group_coordinator.partition_for(&req.group_id.0),
        );
        let errors = b
            .add_partitions_to_txn_manager
            .verify_transaction(
                &req.transactional_id.0,
                req.producer_id.0,
                req.producer_epoch,
                std::slice::from_ref(&tp),
                op,
            )
            .await;
        if let Some(&code) = errors.get(&tp) {
            return txn_offset_commit_error(&req, coordinator_error(code, op));
        }
    }
    b.group_coordinator
        .txn_offset_commit(&group_context(ctx), req)
        .await
}

/// A verification failure as the group coordinator's service answers it (Kafka's
/// `handleOperationException`: the storage-side codes become coordinator codes the client
/// retries on), and TRANSACTION_ABORTABLE as INVALID_TXN_STATE for a client older than v4.
fn coordinator_error(code: ErrorCode, op: TransactionSupportedOperation) -> ErrorCode {
    match code {
        ErrorCode::UnknownTopicOrPartition
        | ErrorCode::NotEnoughReplicas
        | ErrorCode::RequestTimedOut => ErrorCode::CoordinatorNotAvailable,
        ErrorCode::NotLeaderOrFollower | ErrorCode::KafkaStorageError => ErrorCode::NotCoordinator,
        ErrorCode::TransactionAbortable if op == TransactionSupportedOperation::DefaultError => {
            ErrorCode::InvalidTxnState
        }
        other => other,
    }
}

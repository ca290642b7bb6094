//! TxnOffsetCommit (v0-v5; Kafka 4.4 serves v6 too, which names topics by id and which the
//! generated structs do not decode): a transactional producer commits a consumer group's
//! offsets inside its transaction (`sendOffsetsToTransaction`). The group coordinator
//! validates the member (KIP-447) and writes the offsets in the producer's transactional
//! batch; they stay pending until the transaction's marker reaches the offsets partition.

use std::sync::Arc;

use strom_protocol::kafka::messages::*;

use super::groups::group_context;
use crate::request_context::RequestContext;
use crate::server::Broker;

pub async fn txn_offset_commit(
    b: &Arc<Broker>,
    ctx: &RequestContext,
    req: TxnOffsetCommitRequest,
) -> TxnOffsetCommitResponse {
    // lead: before the coordinator, Kafka checks that the producer's transaction contains
    // the group's offsets partition: with transaction version 2 (request v5+) by KIP-890
    // verification through the transaction coordinator (`maybeStartTransactionVerification`
    // of the offsets partition, answering e.g. INVALID_PRODUCER_EPOCH, PRODUCER_FENCED,
    // INVALID_TXN_STATE; TRANSACTION_ABORTABLE from v4), before that by AddOffsetsToTxn having
    // added it. Wire that here once the transaction coordinator exists.
    b.group_coordinator
        .txn_offset_commit(&group_context(ctx), req)
        .await
}

//! InitProducerId for idempotent producers (no transactional id): a fresh producer id with
//! epoch 0, as Kafka's coordinator answers a producer without a transactional id, whatever id
//! and epoch the request carries.

use std::sync::Arc;

use strom_protocol::kafka::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};
use strom_protocol::ErrorCode;

use crate::server::Broker;

pub async fn handle(broker: &Arc<Broker>, req: InitProducerIdRequest) -> InitProducerIdResponse {
    let resp = InitProducerIdResponse::default()
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    if req.transactional_id.is_some() {
        // Transactions need the transaction coordinator, which clients find with
        // FindCoordinator; neither is served yet, so a transactional producer cannot get here
        // through a real client.
        return resp.with_error_code(ErrorCode::TransactionalIdAuthorizationFailed.code());
    }
    match broker.producer_ids.generate_producer_id().await {
        Ok(id) => resp.with_producer_id(ProducerId(id)).with_producer_epoch(0),
        Err(e) => {
            tracing::warn!(error = %e, "cannot allocate a producer id");
            resp.with_error_code(ErrorCode::CoordinatorNotAvailable.code())
        }
    }
}

//! InitProducerId for idempotent producers (no transactional id): a fresh producer id with
//! epoch 0, as Kafka's coordinator answers a producer without a transactional id, whatever id
//! and epoch the request carries. With a transactional id it goes to the transaction
//! coordinator.

use std::sync::Arc;

use strom_protocol::kafka::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};

use crate::server::Broker;

pub async fn handle(
    broker: &Arc<Broker>,
    req: InitProducerIdRequest,
    version: i16,
) -> InitProducerIdResponse {
    let resp = InitProducerIdResponse::default()
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    if req.transactional_id.is_some() {
        return super::transactions::init_producer_id(broker, req, version).await;
    }
    // Kafka's `TransactionCoordinator.handleInitProducerId` answers the producer id manager's
    // error: COORDINATOR_LOAD_IN_PROGRESS while the next block is on its way.
    match broker.producer_ids.generate_producer_id() {
        Ok(id) => resp.with_producer_id(ProducerId(id)).with_producer_epoch(0),
        Err(e) => {
            tracing::debug!(error = %e, "no producer id ready");
            resp.with_error_code(e.code().code())
        }
    }
}

//! Broker-to-controller APIs, served by the active controller (in combined mode on its broker
//! listener): BrokerRegistration and AllocateProducerIds (KIP-730).

use std::sync::Arc;

use strom_controller::ControllerError;
use strom_protocol::kafka::messages::{
    AllocateProducerIdsRequest, AllocateProducerIdsResponse, BrokerRegistrationRequest,
    BrokerRegistrationResponse, ProducerId,
};

use crate::server::Broker;

pub async fn broker_registration(broker: &Arc<Broker>, req: BrokerRegistrationRequest) -> BrokerRegistrationResponse {
    let r = match req.listeners.first() {
        Some(l) => {
            broker
                .controller
                .register_broker(
                    req.broker_id.0,
                    l.host.as_str(),
                    l.port as i32,
                    req.rack.as_ref().map(|r| r.to_string()),
                )
                .await
        }
        None => Err(ControllerError::InvalidRequest("no listener to register".into())),
    };
    match r {
        Ok(()) => BrokerRegistrationResponse::default().with_broker_epoch(broker.controller.epoch() as i64),
        Err(e) => BrokerRegistrationResponse::default()
            .with_error_code(e.code())
            .with_broker_epoch(-1),
    }
}

pub async fn allocate_producer_ids(broker: &Arc<Broker>, req: AllocateProducerIdsRequest) -> AllocateProducerIdsResponse {
    match broker.controller.allocate_producer_ids(req.broker_id.0).await {
        Ok(block) => AllocateProducerIdsResponse::default()
            .with_producer_id_start(ProducerId(block.start))
            .with_producer_id_len(block.len),
        Err(e) => AllocateProducerIdsResponse::default()
            .with_error_code(e.code())
            .with_producer_id_start(ProducerId(-1)),
    }
}

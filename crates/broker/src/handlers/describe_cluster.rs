//! DescribeCluster: the brokers and the controller, for the admin client.

use std::sync::Arc;

use strom_protocol::kafka::messages::describe_cluster_response::DescribeClusterBroker;
use strom_protocol::kafka::messages::{BrokerId, DescribeClusterRequest, DescribeClusterResponse};
use strom_protocol::ErrorCode;

use super::str_bytes;
use crate::server::Broker;

const ENDPOINT_TYPE_BROKER: i8 = 1;

pub fn handle(broker: &Arc<Broker>, req: DescribeClusterRequest) -> DescribeClusterResponse {
    let resp = DescribeClusterResponse::default()
        .with_endpoint_type(ENDPOINT_TYPE_BROKER)
        .with_cluster_authorized_operations(i32::MIN);
    if req.endpoint_type != ENDPOINT_TYPE_BROKER {
        return resp
            .with_error_code(ErrorCode::UnsupportedEndpointType.code())
            .with_error_message(Some(str_bytes("The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type CONTROLLER")));
    }
    let image = broker.image();
    // Unfenced brokers only, as Kafka's `getAliveBrokerNodes`, unless a v2 request asks for
    // the fenced ones too (KIP-1073: `include_fenced_brokers`, each marked `is_fenced`).
    let brokers = image
        .brokers
        .values()
        .filter(|b| req.include_fenced_brokers || !b.fenced)
        .map(|b| {
            DescribeClusterBroker::default()
                .with_broker_id(BrokerId(b.node_id))
                .with_host(str_bytes(&b.host))
                .with_port(b.port)
                .with_rack(b.rack.as_deref().map(str_bytes))
                .with_is_fenced(req.include_fenced_brokers && b.fenced)
        })
        .collect();
    resp.with_cluster_id(str_bytes(&broker.cluster_id))
        .with_controller_id(BrokerId(broker.controller_id()))
        .with_brokers(brokers)
}

//! Broker-to-controller APIs, served on controller listeners only (Kafka's
//! `controller.listener.names`): BrokerRegistration, BrokerHeartbeat, AlterPartition,
//! AllocateProducerIds (KIP-730) and Envelope, which carries an admin request a broker forwards
//! with its client's principal and address. Each needs CLUSTER_ACTION on the cluster
//! ([`cluster_action`]).

use std::sync::Arc;

use strom_controller::ControllerError;
use strom_protocol::kafka::messages::alter_partition_response::{
    PartitionData as AlterPartitionData, TopicData as AlterTopicData,
};
use strom_protocol::kafka::messages::{
    AllocateProducerIdsRequest, AllocateProducerIdsResponse, AlterPartitionRequest,
    AlterPartitionResponse, AssignReplicasToDirsRequest, AssignReplicasToDirsResponse,
    BrokerHeartbeatRequest, BrokerHeartbeatResponse, BrokerRegistrationRequest,
    BrokerRegistrationResponse, ProducerId,
};

use bytes::Bytes;
use strom_protocol::kafka::messages::{EnvelopeRequest, EnvelopeResponse};
use strom_protocol::ErrorCode;
use strom_server_common::authorizer::AclOperation;

use super::registry::{decode_body, HandlerFuture};
use super::{encode, parse_request, ParsedRequest};
use crate::listeners::ListenerScope;
use crate::request_context::{deserialize_principal, RequestContext};
use crate::server::Broker;

/// Whether the request may use a broker-to-controller API: CLUSTER_ACTION on the cluster, as
/// Kafka's `ControllerApis` asks for BrokerRegistration, BrokerHeartbeat, AlterPartition,
/// AllocateProducerIds, AssignReplicasToDirs and Envelope. A denied request answers
/// CLUSTER_AUTHORIZATION_FAILED as its whole response.
pub fn cluster_action(broker: &Broker, ctx: &RequestContext) -> Result<(), ErrorCode> {
    if broker
        .auth
        .authorize_cluster(ctx, AclOperation::ClusterAction)
    {
        Ok(())
    } else {
        tracing::info!(
            api = ?ctx.api_key,
            principal = %ctx.principal,
            client = %ctx.client_address,
            "denied: CLUSTER_ACTION on the cluster"
        );
        Err(ErrorCode::ClusterAuthorizationFailed)
    }
}

/// BrokerRegistration (Kafka's `ClusterControlManager.registerBroker`, see
/// `strom_controller::broker_registration`): the broker epoch of the registered incarnation,
/// or DUPLICATE_BROKER_REGISTRATION while another incarnation's session lives,
/// INCONSISTENT_CLUSTER_ID for a broker formatted for another cluster.
pub async fn broker_registration(
    broker: &Arc<Broker>,
    req: BrokerRegistrationRequest,
    version: i16,
) -> BrokerRegistrationResponse {
    let r = match req.listeners.first() {
        Some(l) => {
            let registration = strom_controller::BrokerRegistration {
                node_id: req.broker_id.0,
                incarnation_id: req.incarnation_id,
                host: l.host.to_string(),
                port: l.port as i32,
                rack: req.rack.as_ref().map(|r| r.to_string()),
                // v3+ (KIP-966); earlier brokers cannot tell, so their restarts are unclean.
                previous_broker_epoch: if version >= 3 {
                    req.previous_broker_epoch
                } else {
                    -1
                },
            };
            broker
                .controller
                .register_broker(
                    &registration,
                    Some(req.cluster_id.as_str()),
                    crate::monotonic_ms(),
                    broker.config.unclean_leader_election_enable,
                )
                .await
        }
        None => Err(ControllerError::InvalidRequest(
            "no listener to register".into(),
        )),
    };
    match r {
        Ok(epoch) => BrokerRegistrationResponse::default().with_broker_epoch(epoch),
        Err(e) => BrokerRegistrationResponse::default()
            .with_error_code(e.code())
            .with_broker_epoch(-1),
    }
}

pub async fn allocate_producer_ids(
    broker: &Arc<Broker>,
    req: AllocateProducerIdsRequest,
) -> AllocateProducerIdsResponse {
    match broker
        .controller
        .allocate_producer_ids(req.broker_id.0)
        .await
    {
        Ok(block) => AllocateProducerIdsResponse::default()
            .with_producer_id_start(ProducerId(block.start))
            .with_producer_id_len(block.len),
        Err(e) => AllocateProducerIdsResponse::default()
            .with_error_code(e.code())
            .with_producer_id_start(ProducerId(-1)),
    }
}

pub async fn alter_partition(
    broker: &Arc<Broker>,
    req: AlterPartitionRequest,
    version: i16,
) -> AlterPartitionResponse {
    // Kafka's `checkBrokerEpoch`: a request from another incarnation than the registered one
    // is refused as a whole.
    let checked = match broker.controller.is_active() {
        true => strom_controller::partition_change::check_broker_epoch(
            &broker.controller.image(),
            req.broker_id.0,
            req.broker_epoch,
        ),
        // A standby answers NOT_CONTROLLER per partition below.
        false => Ok(()),
    };
    if let Err(message) = checked {
        tracing::info!(broker = req.broker_id.0, %message, "AlterPartition refused");
        return AlterPartitionResponse::default()
            .with_error_code(ErrorCode::StaleBrokerEpoch.code());
    }
    let mut topics = Vec::new();
    for t in req.topics {
        let mut partitions = Vec::new();
        for p in t.partitions {
            // v3 carries each new ISR member's broker epoch (KIP-903); before, none is known.
            let isr: Vec<strom_controller::BrokerState> = if version >= 3 {
                p.new_isr_with_epochs
                    .iter()
                    .map(|b| strom_controller::BrokerState {
                        broker_id: b.broker_id.0,
                        broker_epoch: b.broker_epoch,
                    })
                    .collect()
            } else {
                let ids: Vec<i32> = p.new_isr.iter().map(|b| b.0).collect();
                strom_controller::BrokerState::without_epochs(&ids)
            };
            let r = broker
                .controller
                .alter_partition(
                    req.broker_id.0,
                    req.broker_epoch,
                    t.topic_id,
                    p.partition_index,
                    p.leader_epoch,
                    p.partition_epoch,
                    &isr,
                )
                .await;
            let mut out = AlterPartitionData::default().with_partition_index(p.partition_index);
            match r {
                Ok(()) => {
                    let image = broker.image();
                    if let Some(reg) = image
                        .topic_by_id(&t.topic_id)
                        .and_then(|tp| tp.partitions.get(&p.partition_index))
                    {
                        out = out
                            .with_leader_id(reg.leader.into())
                            .with_leader_epoch(reg.leader_epoch)
                            .with_partition_epoch(reg.partition_epoch)
                            .with_isr(reg.isr.iter().map(|&b| b.into()).collect());
                    }
                }
                Err(e) => out = out.with_error_code(e.code()),
            }
            partitions.push(out);
        }
        topics.push(
            AlterTopicData::default()
                .with_topic_id(t.topic_id)
                .with_partitions(partitions),
        );
    }
    AlterPartitionResponse::default().with_topics(topics)
}

/// Whether a broker that has replayed the metadata log up to `broker_offset` is caught up with
/// this (active) controller, which has replayed it up to `controller_offset`. Both are record
/// offsets (`QuorumController::applied_offset`); a broker restarted after the quorum moved on
/// holds a stale image until then (its publishing is held, see `MetadataLoader::start_held`).
pub fn is_caught_up(broker_offset: i64, controller_offset: i64) -> bool {
    broker_offset >= controller_offset
}

pub async fn broker_heartbeat(
    broker: &Arc<Broker>,
    req: BrokerHeartbeatRequest,
) -> BrokerHeartbeatResponse {
    let now = crate::monotonic_ms();
    let unclean = broker.config.unclean_leader_election_enable;
    if req.want_shut_down {
        return match broker
            .controller
            .controlled_shutdown(req.broker_id.0, req.broker_epoch, now, unclean)
            .await
        {
            Ok(done) => BrokerHeartbeatResponse::default()
                .with_is_caught_up(true)
                .with_should_shut_down(done),
            Err(e) => BrokerHeartbeatResponse::default().with_error_code(e.code()),
        };
    }
    match broker
        .controller
        .heartbeat(
            req.broker_id.0,
            req.broker_epoch,
            req.current_metadata_offset,
            now,
            unclean,
        )
        .await
    {
        Ok(reply) => BrokerHeartbeatResponse::default()
            .with_is_caught_up(
                broker.controller.is_confirmed_active()
                    && is_caught_up(
                        req.current_metadata_offset,
                        broker.controller.applied_offset(),
                    ),
            )
            .with_is_fenced(reply.is_fenced)
            .with_should_shut_down(reply.should_shut_down),
        Err(e) => BrokerHeartbeatResponse::default().with_error_code(e.code()),
    }
}

/// AssignReplicasToDirs (KIP-858) from a broker: its replicas' log dirs, offline ones in
/// Kafka's `DirectoryId.LOST` (`strom_controller::log_dirs`).
pub async fn assign_replicas_to_dirs(
    broker: &Arc<Broker>,
    req: AssignReplicasToDirsRequest,
) -> AssignReplicasToDirsResponse {
    use strom_protocol::kafka::messages::assign_replicas_to_dirs_response::{
        DirectoryData, PartitionData, TopicData,
    };
    let dirs = crate::directory_assignments::from_request(&req);
    let unclean = broker.config.unclean_leader_election_enable;
    match broker
        .controller
        .assign_replicas_to_dirs(req.broker_id.0, &dirs, unclean)
        .await
    {
        Ok(results) => {
            let directories = dirs
                .iter()
                .zip(results)
                .map(|((dir, _), codes)| {
                    let mut topics: Vec<TopicData> = Vec::new();
                    for (topic_id, p, code) in codes {
                        let part = PartitionData::default()
                            .with_partition_index(p)
                            .with_error_code(code);
                        match topics.iter_mut().find(|t| t.topic_id == topic_id) {
                            Some(t) => t.partitions.push(part),
                            None => topics.push(
                                TopicData::default()
                                    .with_topic_id(topic_id)
                                    .with_partitions(vec![part]),
                            ),
                        }
                    }
                    DirectoryData::default().with_id(*dir).with_topics(topics)
                })
                .collect();
            AssignReplicasToDirsResponse::default().with_directories(directories)
        }
        Err(e) => AssignReplicasToDirsResponse::default().with_error_code(e.code()),
    }
}

/// Envelope (KIP-590): runs the embedded request as the original client (principal and address
/// from the envelope) through the controller listener's registry, and wraps its response.
pub fn envelope<'a>(
    broker: &'a Arc<Broker>,
    ctx: &'a RequestContext,
    mut body: Bytes,
) -> HandlerFuture<'a> {
    Box::pin(async move {
        let req: EnvelopeRequest = decode_body(&mut body, ctx)?;
        // The forwarding broker must be allowed CLUSTER_ACTION (Kafka's
        // `ControllerApis.handleEnvelopeRequest`); the embedded request is then authorized as
        // the client it names.
        if let Err(code) = cluster_action(broker, ctx) {
            let resp = EnvelopeResponse::default().with_error_code(code.code());
            return encode(ctx.api_key, ctx.api_version, ctx.correlation_id(), &resp)
                .map(|b| Some(b.into()));
        }
        let resp = match unwrap_envelope(ctx, req) {
            Ok((inner_ctx, entry, inner_body)) => {
                tracing::debug!(
                    api = ?inner_ctx.api_key,
                    principal = %inner_ctx.principal,
                    client = %inner_ctx.client_address.ip(),
                    "forwarded request"
                );
                match (entry.handle)(broker, &inner_ctx, inner_body).await {
                    Ok(Some(framed)) => match framed.into_bytes() {
                        // The handler framed its response; the envelope carries it unframed.
                        Ok(mut framed) => {
                            let data = framed.split_off(4).freeze();
                            EnvelopeResponse::default().with_response_data(Some(data))
                        }
                        Err(e) => {
                            tracing::debug!(error = %e, "forwarded request failed");
                            EnvelopeResponse::default()
                                .with_error_code(ErrorCode::UnknownServerError.code())
                        }
                    },
                    Ok(None) => EnvelopeResponse::default(),
                    Err(e) => {
                        tracing::debug!(error = %e, "forwarded request failed");
                        EnvelopeResponse::default()
                            .with_error_code(ErrorCode::InvalidRequest.code())
                    }
                }
            }
            Err(code) => EnvelopeResponse::default().with_error_code(code.code()),
        };
        encode(ctx.api_key, ctx.api_version, ctx.correlation_id(), &resp).map(|b| Some(b.into()))
    })
}

type Unwrapped = (RequestContext, &'static super::registry::ApiEntry, Bytes);

fn unwrap_envelope(ctx: &RequestContext, req: EnvelopeRequest) -> Result<Unwrapped, ErrorCode> {
    let principal = match &req.request_principal {
        Some(p) => deserialize_principal(p).ok_or(ErrorCode::PrincipalDeserializationFailure)?,
        None => return Err(ErrorCode::PrincipalDeserializationFailure),
    };
    let ip: std::net::IpAddr = match req.client_host_address.len() {
        4 => {
            let b: [u8; 4] = req.client_host_address[..]
                .try_into()
                .map_err(|_| ErrorCode::InvalidRequest)?;
            b.into()
        }
        16 => {
            let b: [u8; 16] = req.client_host_address[..]
                .try_into()
                .map_err(|_| ErrorCode::InvalidRequest)?;
            b.into()
        }
        _ => return Err(ErrorCode::InvalidRequest),
    };
    let (entry, header, body) = match parse_request(&req.request_data, ListenerScope::Controller) {
        Ok(ParsedRequest::Request {
            entry,
            header,
            body,
        }) if entry.forwardable => (entry, header, body),
        _ => return Err(ErrorCode::InvalidRequest),
    };
    let inner = RequestContext {
        api_version: header.request_api_version,
        header,
        api_key: entry.key,
        connection_id: ctx.connection_id.clone(),
        client_address: std::net::SocketAddr::new(ip, 0),
        listener: ctx.listener.clone(),
        principal,
        client_information: ctx.client_information.clone(),
        forwarded: true,
    };
    Ok((inner, entry, body))
}

#[cfg(test)]
mod tests {
    use super::is_caught_up;

    /// A restarted broker that replayed only its own (older) log is not caught up; once it has
    /// replayed what the active controller has, it is (and stays so when it is ahead, as the
    /// controller's own replay may lag its commit).
    #[test]
    fn caught_up_once_the_broker_has_replayed_what_the_controller_has() {
        assert!(!is_caught_up(-1, 0));
        assert!(!is_caught_up(64, 65));
        assert!(is_caught_up(65, 65));
        assert!(is_caught_up(66, 65));
    }
}

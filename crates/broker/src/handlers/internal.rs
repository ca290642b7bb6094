//! Broker-to-controller APIs, served by the active controller (in combined mode on its broker
//! listener): BrokerRegistration and AllocateProducerIds (KIP-730).

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

use crate::server::Broker;

pub async fn broker_registration(
    broker: &Arc<Broker>,
    req: BrokerRegistrationRequest,
) -> BrokerRegistrationResponse {
    let r = match req.listeners.first() {
        Some(l) => {
            broker
                .controller
                .register_broker(
                    req.broker_id.0,
                    l.host.as_str(),
                    l.port as i32,
                    req.rack.as_ref().map(|r| r.to_string()),
                    crate::monotonic_ms(),
                )
                .await
        }
        None => Err(ControllerError::InvalidRequest(
            "no listener to register".into(),
        )),
    };
    match r {
        Ok(()) => BrokerRegistrationResponse::default()
            .with_broker_epoch(broker.controller.epoch() as i64),
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
    let mut topics = Vec::new();
    for t in req.topics {
        let mut partitions = Vec::new();
        for p in t.partitions {
            let isr: Vec<i32> = if version >= 3 {
                p.new_isr_with_epochs
                    .iter()
                    .map(|b| b.broker_id.0)
                    .collect()
            } else {
                p.new_isr.iter().map(|b| b.0).collect()
            };
            let r = broker
                .controller
                .alter_partition(
                    req.broker_id.0,
                    t.topic_id,
                    p.partition_index,
                    p.leader_epoch,
                    p.partition_epoch,
                    isr,
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

pub async fn broker_heartbeat(
    broker: &Arc<Broker>,
    req: BrokerHeartbeatRequest,
) -> BrokerHeartbeatResponse {
    let now = crate::monotonic_ms();
    let unclean = broker.config.unclean_leader_election_enable;
    if req.want_shut_down {
        return match broker
            .controller
            .controlled_shutdown(req.broker_id.0, now, unclean)
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
        .heartbeat(req.broker_id.0, now, unclean)
        .await
    {
        Ok(fenced) => BrokerHeartbeatResponse::default()
            .with_is_caught_up(true)
            .with_is_fenced(fenced),
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

//! Metadata: brokers, controller and topic/partition leadership from the broker's image, with
//! auto-creation of unknown topics when `auto.create.topics.enable` allows it.

use std::sync::Arc;

use strom_controller::{names, CreateTopicSpec, MetadataImage, TopicImage};
use strom_group_coordinator::topic::GROUP_METADATA_TOPIC_NAME;
use strom_protocol::kafka::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use strom_protocol::kafka::messages::{BrokerId, MetadataRequest, MetadataResponse, TopicName};
use strom_protocol::ErrorCode;

use super::str_bytes;
use crate::server::Broker;

/// Kafka's "authorized operations not requested" value.
const AUTHORIZED_OPERATIONS_OMITTED: i32 = i32::MIN;

pub async fn handle(broker: &Arc<Broker>, req: MetadataRequest, version: i16) -> MetadataResponse {
    let mut image = broker.image();
    let all = match &req.topics {
        None => true,
        Some(t) => version == 0 && t.is_empty(),
    };
    let mut topics = Vec::new();
    if all {
        topics.extend(
            image
                .topics
                .values()
                .map(|t| topic_response(broker, &image, t)),
        );
    } else {
        let requested = req.topics.unwrap_or_default();
        // Auto-create first, in one controller call, then answer from the new image.
        let allow_create = broker.config.auto_create_topics_enable && req.allow_auto_topic_creation;
        if allow_create {
            let missing: Vec<CreateTopicSpec> = requested
                .iter()
                .filter_map(|t| t.name.as_ref())
                .map(|n| n.0.as_str())
                .filter(|n| image.topic(n).is_none() && names::validate(n).is_ok())
                .filter_map(|n| {
                    // Kafka's `AutoTopicCreationManager`: the group topic with the group
                    // coordinator's settings; the other internal topics only by their own
                    // coordinators (none for transactions yet).
                    if n == GROUP_METADATA_TOPIC_NAME {
                        return Some(crate::coordinator::offsets_topic_spec(
                            broker.group_coordinator.config(),
                            &image,
                        ));
                    }
                    (!names::is_internal(n)).then(|| CreateTopicSpec {
                        name: n.to_string(),
                        num_partitions: -1,
                        replication_factor: -1,
                        ..Default::default()
                    })
                })
                .collect();
            if !missing.is_empty() {
                broker.create_topics(&missing).await;
                image = broker.image();
            }
        }
        for t in requested {
            let found = match (&t.name, t.topic_id) {
                (Some(name), _) => image.topic(name.0.as_str()),
                (None, id) => image.topic_by_id(&id),
            };
            match found {
                Some(topic) => topics.push(topic_response(broker, &image, topic)),
                None => {
                    let code = match &t.name {
                        Some(n) if names::validate(n.0.as_str()).is_err() => {
                            ErrorCode::InvalidTopicException
                        }
                        None => ErrorCode::UnknownTopicId,
                        _ => ErrorCode::UnknownTopicOrPartition,
                    };
                    topics.push(
                        MetadataResponseTopic::default()
                            .with_error_code(code.code())
                            .with_name(t.name.clone())
                            .with_topic_id(t.topic_id)
                            .with_topic_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED),
                    );
                }
            }
        }
    }
    MetadataResponse::default()
        .with_brokers(brokers(&image))
        .with_cluster_id(Some(str_bytes(&broker.cluster_id)))
        .with_controller_id(BrokerId(broker.controller_id()))
        .with_topics(topics)
        .with_cluster_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED)
}

/// The live brokers: a fenced one is left out (Kafka's `getAliveBrokerNodes`), so clients stop
/// connecting to it; its replicas show up in `offline_replicas` instead.
fn brokers(image: &MetadataImage) -> Vec<MetadataResponseBroker> {
    image
        .brokers
        .values()
        .filter(|b| !b.fenced)
        .map(|b| {
            MetadataResponseBroker::default()
                .with_node_id(BrokerId(b.node_id))
                .with_host(str_bytes(&b.host))
                .with_port(b.port)
                .with_rack(b.rack.as_deref().map(str_bytes))
        })
        .collect()
}

/// Kafka's `KRaftMetadataCache.getOfflineReplicas`: a replica is offline when its broker is
/// unregistered or fenced, or its log dir is offline (here: the replica is offline in the image,
/// or — fresher than the image, and the only source on a single node before the controller
/// has recorded it — in this broker's own replica manager).
fn topic_response(broker: &Broker, image: &MetadataImage, t: &TopicImage) -> MetadataResponseTopic {
    let node = broker.config.node_id;
    let partitions = t
        .partitions
        .iter()
        .map(|(p, reg)| {
            let offline: Vec<BrokerId> = reg
                .replicas
                .iter()
                .filter(|&&r| {
                    image.brokers.get(&r).is_none_or(|b| b.fenced)
                        || image.replica_is_offline(r, &t.id, *p)
                        || (r == node && broker.replica_manager.is_offline(&t.name, *p))
                })
                .map(|&r| BrokerId(r))
                .collect();
            let error = if reg.leader < 0 {
                ErrorCode::LeaderNotAvailable.code()
            } else {
                0
            };
            MetadataResponsePartition::default()
                .with_error_code(error)
                .with_partition_index(*p)
                .with_leader_id(BrokerId(reg.leader))
                .with_leader_epoch(reg.leader_epoch)
                .with_replica_nodes(reg.replicas.iter().map(|&r| BrokerId(r)).collect())
                .with_isr_nodes(reg.isr.iter().map(|&r| BrokerId(r)).collect())
                .with_offline_replicas(offline)
        })
        .collect();
    MetadataResponseTopic::default()
        .with_name(Some(TopicName(str_bytes(&t.name))))
        .with_topic_id(t.id)
        .with_is_internal(names::is_internal(&t.name))
        .with_partitions(partitions)
        .with_topic_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED)
}

#[cfg(test)]
mod tests {
    use strom_controller::MetadataRecord;

    use super::*;

    #[test]
    fn fenced_brokers_are_not_listed() {
        let mut image = MetadataImage::default();
        for node_id in [1, 2, 3] {
            image.replay(&MetadataRecord::RegisterBroker {
                node_id,
                host: "127.0.0.1".into(),
                port: 9090 + node_id,
                rack: None,
                incarnation_id: uuid::Uuid::nil(),
                broker_epoch: None,
                fenced: None,
                in_controlled_shutdown: None,
            });
        }
        let fence = |fenced| MetadataRecord::BrokerRegistrationChange {
            broker_id: 2,
            fenced: Some(fenced),
            in_controlled_shutdown: None,
        };
        let ids = |image: &MetadataImage| -> Vec<i32> {
            brokers(image).iter().map(|b| b.node_id.0).collect()
        };
        assert_eq!(ids(&image), vec![1, 2, 3]);
        image.replay(&fence(true));
        assert_eq!(ids(&image), vec![1, 3]);
        image.replay(&fence(false));
        assert_eq!(ids(&image), vec![1, 2, 3]);
    }
}

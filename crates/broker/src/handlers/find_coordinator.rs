//! FindCoordinator v0-v6 (Kafka's `KafkaApis.getCoordinator`): the leader of the key's
//! internal partition, from this broker's metadata image. The first request for a group finds
//! no `__consumer_offsets`, has it created and answers COORDINATOR_NOT_AVAILABLE (the client
//! retries, as against Kafka). A TRANSACTION key is found the same way on `__transaction_state`
//! (created on first use); an unknown key type is INVALID_REQUEST.

use std::sync::Arc;

use strom_group_coordinator::topic::GROUP_METADATA_TOPIC_NAME;
use strom_protocol::kafka::messages::find_coordinator_response::Coordinator;
use strom_protocol::kafka::messages::{BrokerId, FindCoordinatorRequest, FindCoordinatorResponse};
use strom_protocol::ErrorCode;
use strom_transaction_coordinator::config::TRANSACTION_STATE_TOPIC_NAME;

use super::str_bytes;
use crate::server::Broker;

/// Kafka's `CoordinatorType` ids.
const KEY_TYPE_GROUP: i8 = 0;
const KEY_TYPE_TRANSACTION: i8 = 1;

/// The first version with batched `coordinator_keys`.
const MIN_BATCHED_VERSION: i16 = 4;

/// A coordinator's endpoint, or why there is none (Kafka's `Node.noNode()` then: -1, "", -1).
type Found = Result<(i32, String, i32), ErrorCode>;

pub async fn handle(
    broker: &Arc<Broker>,
    req: FindCoordinatorRequest,
    version: i16,
) -> FindCoordinatorResponse {
    let keys: Vec<String> = if version < MIN_BATCHED_VERSION {
        vec![req.key.to_string()]
    } else {
        req.coordinator_keys.iter().map(|k| k.to_string()).collect()
    };
    // v0 has no key type: always a group.
    let key_type = if version == 0 {
        KEY_TYPE_GROUP
    } else {
        req.key_type
    };
    let found = find(broker, key_type, &keys).await;
    if version < MIN_BATCHED_VERSION {
        let f = found
            .into_iter()
            .next()
            .unwrap_or(Err(ErrorCode::InvalidRequest));
        let (code, message, (node, host, port)) = parts(f);
        return FindCoordinatorResponse::default()
            .with_error_code(code)
            .with_error_message(Some(str_bytes(&message)))
            .with_node_id(BrokerId(node))
            .with_host(str_bytes(&host))
            .with_port(port);
    }
    let coordinators = keys
        .iter()
        .zip(found)
        .map(|(key, f)| {
            let (code, message, (node, host, port)) = parts(f);
            Coordinator::default()
                .with_key(str_bytes(key))
                .with_node_id(BrokerId(node))
                .with_host(str_bytes(&host))
                .with_port(port)
                .with_error_code(code)
                .with_error_message(Some(str_bytes(&message)))
        })
        .collect();
    FindCoordinatorResponse::default().with_coordinators(coordinators)
}

/// Error code, Kafka's message for it (`Errors.message()`: "NONE" on success) and the node.
fn parts(f: Found) -> (i16, String, (i32, String, i32)) {
    match f {
        Ok(node) => (0, "NONE".to_string(), node),
        Err(code) => (code.code(), kafka_message(code), (-1, String::new(), -1)),
    }
}

/// Kafka's `Errors.message()` for the codes this API answers (its error messages are the
/// error's default message, not a reason of the moment).
fn kafka_message(code: ErrorCode) -> String {
    match code {
        ErrorCode::CoordinatorNotAvailable => "The coordinator is not available.".into(),
        ErrorCode::InvalidRequest => "This most likely occurs because of a request being malformed by the client library or the message was sent to an incompatible broker. See the broker logs for more details.".into(),
        other => other.to_string(),
    }
}

/// One answer per key, in order.
async fn find(broker: &Arc<Broker>, key_type: i8, keys: &[String]) -> Vec<Found> {
    let image = broker.image();
    let topic_name = match key_type {
        KEY_TYPE_GROUP => GROUP_METADATA_TOPIC_NAME,
        KEY_TYPE_TRANSACTION => TRANSACTION_STATE_TOPIC_NAME,
        _ => return vec![Err(ErrorCode::InvalidRequest); keys.len()],
    };
    let Some(topic) = image.topic(topic_name) else {
        if !keys.is_empty() {
            let spec = if key_type == KEY_TYPE_TRANSACTION {
                crate::coordinator::transactions::transaction_state_topic_spec(
                    broker.transaction_coordinator.config(),
                    &image,
                )
            } else {
                crate::coordinator::offsets_topic_spec(broker.group_coordinator.config(), &image)
            };
            broker.create_topics(&[spec]).await;
        }
        return vec![Err(ErrorCode::CoordinatorNotAvailable); keys.len()];
    };
    keys.iter()
        .map(|key| {
            let p = if key_type == KEY_TYPE_TRANSACTION {
                broker.transaction_coordinator.partition_for(key)
            } else {
                broker.group_coordinator.partition_for(key)
            };
            topic
                .partitions
                .get(&p)
                .map(|reg| reg.leader)
                .filter(|&l| l >= 0)
                .and_then(|l| image.brokers.get(&l))
                .filter(|b| !b.fenced)
                .map(|b| (b.node_id, b.host.clone(), b.port))
                .ok_or(ErrorCode::CoordinatorNotAvailable)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use strom_protocol::kafka::protocol::StrBytes;

    use super::*;
    use crate::config::BrokerConfig;
    use crate::server::Server;

    fn request(key_type: i8, keys: &[&str]) -> FindCoordinatorRequest {
        FindCoordinatorRequest::default()
            .with_key(StrBytes::from_string(keys[0].to_string()))
            .with_key_type(key_type)
            .with_coordinator_keys(
                keys.iter()
                    .map(|k| StrBytes::from_string(k.to_string()))
                    .collect(),
            )
    }

    #[tokio::test]
    async fn the_first_request_creates_the_offsets_topic_then_the_leader_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let props: BTreeMap<String, String> =
            [("offsets.topic.num.partitions".to_string(), "4".to_string())].into();
        let config = BrokerConfig::new(
            1,
            "127.0.0.1:0".parse().unwrap(),
            None,
            dir.path().to_path_buf(),
            props,
        )
        .unwrap();
        crate::meta_properties::format(&config.log_dirs, config.node_id, "test-cluster", true)
            .unwrap();
        let server = Server::start(config).await.unwrap();
        let b = server.broker();
        let r = handle(&b, request(0, &["g"]), 3).await;
        assert_eq!(r.error_code, ErrorCode::CoordinatorNotAvailable.code());
        assert_eq!(
            r.error_message.as_deref(),
            Some("The coordinator is not available.")
        );
        assert_eq!((r.node_id.0, r.host.as_str(), r.port), (-1, "", -1));
        let topic = b.image().topic(GROUP_METADATA_TOPIC_NAME).cloned().unwrap();
        assert_eq!(topic.partitions.len(), 4);
        assert!(topic.partitions.values().all(|p| p.replicas == vec![1]));

        let me = b.image().brokers[&1].clone();
        for v in [0, 3] {
            let r = handle(&b, request(0, &["g"]), v).await;
            assert_eq!(r.error_code, 0, "v{v}");
            assert_eq!(r.error_message.as_deref(), Some("NONE"));
            assert_eq!(
                (r.node_id.0, r.host.as_str(), r.port),
                (1, me.host.as_str(), me.port)
            );
        }
        let r = handle(&b, request(0, &["a", "b"]), 4).await;
        let keys: Vec<(&str, i32, i16)> = r
            .coordinators
            .iter()
            .map(|c| (c.key.as_str(), c.node_id.0, c.error_code))
            .collect();
        assert_eq!(keys, vec![("a", 1, 0), ("b", 1, 0)]);
        // A transactional id: the first request creates __transaction_state (compacted,
        // min.insync.replicas as far as one replica allows), then its leader is named.
        let r = handle(&b, request(1, &["tx"]), 6).await;
        assert_eq!(
            r.coordinators[0].error_code,
            ErrorCode::CoordinatorNotAvailable.code()
        );
        let topic = b
            .image()
            .topic(TRANSACTION_STATE_TOPIC_NAME)
            .cloned()
            .unwrap();
        assert_eq!(topic.partitions.len(), 50);
        assert!(topic.partitions.values().all(|p| p.replicas == vec![1]));
        let configs = &topic.configs;
        assert_eq!(
            configs.get("cleanup.policy").map(String::as_str),
            Some("compact")
        );
        assert_eq!(
            configs.get("min.insync.replicas").map(String::as_str),
            Some("1")
        );
        let r = handle(&b, request(1, &["tx"]), 6).await;
        assert_eq!(
            (r.coordinators[0].error_code, r.coordinators[0].node_id.0),
            (0, 1)
        );
        // An unknown key type is the client's fault.
        let r = handle(&b, request(9, &["x", "y"]), 6).await;
        assert!(r
            .coordinators
            .iter()
            .all(|c| c.error_code == ErrorCode::InvalidRequest.code() && c.node_id.0 == -1));
        let r = handle(&b, request(9, &["x"]), 2).await;
        assert_eq!(r.error_code, ErrorCode::InvalidRequest.code());
        b.metadata_loader.shutdown().await;
    }
}

//! DescribeConfigs, IncrementalAlterConfigs and the legacy AlterConfigs for topics (and
//! describe for the broker).

use std::collections::BTreeMap;
use std::sync::Arc;

use strom_controller::controller::AlterConfigOp;
use strom_controller::topic_config;
use strom_protocol::kafka::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use strom_protocol::kafka::messages::incremental_alter_configs_request::AlterConfigsResource;
use strom_protocol::kafka::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use strom_protocol::kafka::messages::*;
use strom_protocol::ErrorCode;

use super::str_bytes;
use crate::config::ConfigSource;
use crate::server::Broker;

const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;

pub fn describe_configs(
    broker: &Arc<Broker>,
    req: DescribeConfigsRequest,
    version: i16,
) -> DescribeConfigsResponse {
    let image = broker.image();
    let results = req
        .resources
        .into_iter()
        .map(|r| {
            let res = DescribeConfigsResult::default()
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name.clone());
            let keys: Option<Vec<String>> = r
                .configuration_keys
                .map(|k| k.iter().map(|s| s.to_string()).collect());
            let wanted = |name: &str| keys.as_ref().is_none_or(|k| k.iter().any(|x| x == name));
            match r.resource_type {
                RESOURCE_TOPIC => {
                    let Some(topic) = image.topic(r.resource_name.as_str()) else {
                        return res
                            .with_error_code(ErrorCode::UnknownTopicOrPartition.code())
                            .with_error_message(Some(str_bytes(&format!(
                                "Topic '{}' does not exist.",
                                r.resource_name.as_str()
                            ))));
                    };
                    let configs = broker
                        .config
                        .effective_topic_configs(&topic.configs)
                        .into_iter()
                        .filter(|(def, _, _)| wanted(def.name))
                        .map(|(def, value, source)| {
                            let value = topic_config::describe_value(def.name, &value);
                            let mut synonyms = Vec::new();
                            if req.include_synonyms {
                                if source == ConfigSource::DynamicTopic {
                                    synonyms.push(synonym(
                                        def.name,
                                        &value,
                                        ConfigSource::DynamicTopic,
                                    ));
                                }
                                if let Some((v, key)) = broker.config.broker_default(def.name) {
                                    let v = topic_config::describe_value(def.name, &v);
                                    synonyms.push(synonym(key, &v, ConfigSource::StaticBroker));
                                }
                                synonyms.push(synonym(
                                    def.broker_key,
                                    &topic_config::describe_value(def.name, def.default),
                                    ConfigSource::Default,
                                ));
                            }
                            entry(
                                def.name,
                                &value,
                                source,
                                def.ty as i8,
                                synonyms,
                                version,
                                req.include_documentation.then_some(def.doc),
                            )
                        })
                        .collect();
                    res.with_configs(configs)
                }
                RESOURCE_BROKER => {
                    let me = broker.config.node_id.to_string();
                    if !r.resource_name.is_empty() && r.resource_name.as_str() != me {
                        return res
                            .with_error_code(ErrorCode::InvalidRequest.code())
                            .with_error_message(Some(str_bytes("Unexpected broker id")));
                    }
                    // The properties set, plus the group and transaction coordinators'
                    // settings at their defaults (typed as Kafka types them).
                    let mut all: BTreeMap<&str, (&str, ConfigSource, i8)> = broker
                        .config
                        .props
                        .iter()
                        .map(|(k, v)| (k.as_str(), (v.as_str(), ConfigSource::StaticBroker, 2)))
                        .collect();
                    for &(k, ty, default) in crate::coordinator::BROKER_CONFIGS
                        .iter()
                        .chain(crate::coordinator::transactions::BROKER_CONFIGS)
                        .chain(crate::request_limits::BROKER_CONFIGS)
                    {
                        all.entry(k).and_modify(|e| e.2 = ty).or_insert((
                            default,
                            ConfigSource::Default,
                            ty,
                        ));
                    }
                    let configs = all
                        .into_iter()
                        .filter(|(k, _)| wanted(k))
                        .map(|(k, (v, source, ty))| {
                            entry(k, v, source, ty, Vec::new(), version, None)
                        })
                        .collect();
                    res.with_configs(configs)
                }
                _ => res
                    .with_error_code(ErrorCode::InvalidRequest.code())
                    .with_error_message(Some(str_bytes("Unsupported resource type"))),
            }
        })
        .collect();
    DescribeConfigsResponse::default().with_results(results)
}

fn synonym(name: &str, value: &str, source: ConfigSource) -> DescribeConfigsSynonym {
    DescribeConfigsSynonym::default()
        .with_name(str_bytes(name))
        .with_value(Some(str_bytes(value)))
        .with_source(source as i8)
}

fn entry(
    name: &str,
    value: &str,
    source: ConfigSource,
    config_type: i8,
    synonyms: Vec<DescribeConfigsSynonym>,
    version: i16,
    doc: Option<&str>,
) -> DescribeConfigsResourceResult {
    let mut e = DescribeConfigsResourceResult::default()
        .with_name(str_bytes(name))
        .with_value(Some(str_bytes(value)))
        .with_config_source(source as i8)
        .with_synonyms(synonyms)
        .with_documentation(doc.map(str_bytes));
    if version >= 3 {
        e.config_type = config_type;
    }
    e
}

pub async fn incremental_alter_configs(
    broker: &Arc<Broker>,
    req: IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    let mut responses = Vec::with_capacity(req.resources.len());
    for r in req.resources {
        let res = AlterConfigsResourceResponse::default()
            .with_resource_type(r.resource_type)
            .with_resource_name(r.resource_name.clone());
        responses.push(alter_one(broker, r, res, req.validate_only).await);
    }
    IncrementalAlterConfigsResponse::default().with_responses(responses)
}

async fn alter_one(
    broker: &Arc<Broker>,
    r: AlterConfigsResource,
    res: AlterConfigsResourceResponse,
    validate_only: bool,
) -> AlterConfigsResourceResponse {
    if r.resource_type != RESOURCE_TOPIC {
        return res
            .with_error_code(ErrorCode::InvalidRequest.code())
            .with_error_message(Some(str_bytes("Only topic configs can be altered")));
    }
    let mut ops = Vec::new();
    for c in &r.configs {
        let Some(op) = AlterConfigOp::from_i8(c.config_operation) else {
            return res
                .with_error_code(ErrorCode::InvalidRequest.code())
                .with_error_message(Some(str_bytes(&format!(
                    "Unknown operation {}",
                    c.config_operation
                ))));
        };
        ops.push((
            c.name.to_string(),
            op,
            c.value.as_ref().map(|v| v.to_string()),
        ));
    }
    let outcome = broker
        .controller
        .incremental_alter_topic_configs(r.resource_name.as_str(), &ops, validate_only)
        .await;
    broker.sync_metadata().await;
    match outcome {
        // Kafka answers success without a message (null), not an empty one.
        Ok(()) => res.with_error_message(None),
        Err(e) => res
            .with_error_code(e.code())
            .with_error_message(Some(str_bytes(&e.to_string()))),
    }
}

/// The legacy AlterConfigs: each topic's configs replaced by the ones given.
pub async fn alter_configs(broker: &Arc<Broker>, req: AlterConfigsRequest) -> AlterConfigsResponse {
    use strom_protocol::kafka::messages::alter_configs_response::AlterConfigsResourceResponse as Res;
    let mut responses = Vec::with_capacity(req.resources.len());
    for r in req.resources {
        let res = Res::default()
            .with_resource_type(r.resource_type)
            .with_resource_name(r.resource_name.clone());
        if r.resource_type != RESOURCE_TOPIC {
            responses.push(
                res.with_error_code(ErrorCode::InvalidRequest.code())
                    .with_error_message(Some(str_bytes("Only topic configs can be altered"))),
            );
            continue;
        }
        let configs: Vec<(String, Option<String>)> = r
            .configs
            .iter()
            .map(|c| (c.name.to_string(), c.value.as_ref().map(|v| v.to_string())))
            .collect();
        let outcome = broker
            .controller
            .alter_topic_configs(r.resource_name.as_str(), &configs, req.validate_only)
            .await;
        broker.sync_metadata().await;
        responses.push(match outcome {
            // Kafka answers success without a message (null), not an empty one.
            Ok(()) => res.with_error_message(None),
            Err(e) => res
                .with_error_code(e.code())
                .with_error_message(Some(str_bytes(&e.to_string()))),
        });
    }
    AlterConfigsResponse::default().with_responses(responses)
}

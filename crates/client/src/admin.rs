//! Topic and cluster administration.

use strom_protocol::kafka::messages::create_partitions_request::CreatePartitionsTopic;
use strom_protocol::kafka::messages::create_topics_request::{
    CreatableReplicaAssignment, CreatableTopic, CreatableTopicConfig,
};
use strom_protocol::kafka::messages::delete_topics_request::DeleteTopicState;
use strom_protocol::kafka::messages::describe_configs_request::DescribeConfigsResource;
use strom_protocol::kafka::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use strom_protocol::kafka::messages::{
    CreatePartitionsRequest, CreateTopicsRequest, DeleteTopicsRequest, DescribeClusterRequest,
    DescribeConfigsRequest, IncrementalAlterConfigsRequest, TopicName,
};
use strom_protocol::kafka::protocol::StrBytes;
use strom_protocol::ErrorCode;
use uuid::Uuid;

use crate::client::partitions_from_metadata;
use crate::client::{BrokerInfo, Client, PartitionMetadata};
use crate::error::{Error, Result};

/// Kafka's ConfigResource type for topics.
const RESOURCE_TOPIC: i8 = 2;
/// Kafka's ConfigSource.DEFAULT_CONFIG.
const SOURCE_DEFAULT: i8 = 5;

/// A topic to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTopic {
    pub name: String,
    /// -1: the broker's default.
    pub num_partitions: i32,
    /// -1: the broker's default.
    pub replication_factor: i16,
    pub configs: Vec<(String, String)>,
    /// Explicit replicas per partition (partition `i` is `assignments[i]`); when non-empty,
    /// `num_partitions` and `replication_factor` must be -1.
    pub assignments: Vec<Vec<i32>>,
}

/// A topic as described by [`Admin::describe_topics`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicDescription {
    pub name: String,
    pub topic_id: Uuid,
    pub is_internal: bool,
    /// Sorted by partition id.
    pub partitions: Vec<PartitionMetadata>,
}

/// One config entry of a resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigEntry {
    pub name: String,
    pub value: Option<String>,
    pub read_only: bool,
    /// Kafka's ConfigSource id (1 = dynamic topic config, 5 = default, ...).
    pub source: i8,
    pub is_default: bool,
    pub is_sensitive: bool,
}

/// An IncrementalAlterConfigs operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AlterConfigOp {
    Set(String, String),
    Delete(String),
    Append(String, String),
    Subtract(String, String),
}

/// What DescribeCluster returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterDescription {
    pub cluster_id: String,
    pub controller_id: i32,
    pub brokers: Vec<BrokerInfo>,
}

/// The admin client.
#[derive(Debug, Clone)]
pub struct Admin {
    client: Client,
}

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

fn str_opt(s: &Option<StrBytes>) -> Option<String> {
    s.as_ref().map(|s| s.to_string())
}

impl Admin {
    /// An admin client over `client`.
    pub fn new(client: Client) -> Self {
        Admin { client }
    }

    /// The underlying cluster client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    fn timeout_ms(&self) -> i32 {
        self.client
            .config()
            .request_timeout
            .as_millis()
            .min(i32::MAX as u128) as i32
    }

    /// Creates one topic. `configs` are `(key, value)` topic configs.
    pub async fn create_topic(
        &self,
        name: &str,
        num_partitions: i32,
        replication_factor: i16,
        configs: &[(String, String)],
        validate_only: bool,
    ) -> Result<()> {
        let topic = NewTopic {
            name: name.to_string(),
            num_partitions,
            replication_factor,
            configs: configs.to_vec(),
            assignments: Vec::new(),
        };
        let mut results = self.create_topics(&[topic], validate_only).await?;
        results.pop().map(|(_, r)| r).unwrap_or(Ok(()))
    }

    /// Creates one topic with explicit replicas: partition `i` on `assignments[i]`, its first
    /// broker the preferred leader (`kafka-topics.sh --replica-assignment`).
    pub async fn create_topic_with_assignments(
        &self,
        name: &str,
        assignments: Vec<Vec<i32>>,
        configs: &[(String, String)],
        validate_only: bool,
    ) -> Result<()> {
        let topic = NewTopic {
            name: name.to_string(),
            num_partitions: -1,
            replication_factor: -1,
            configs: configs.to_vec(),
            assignments,
        };
        let mut results = self.create_topics(&[topic], validate_only).await?;
        results.pop().map(|(_, r)| r).unwrap_or(Ok(()))
    }

    /// Creates topics; returns one result per topic, in request order.
    pub async fn create_topics(
        &self,
        topics: &[NewTopic],
        validate_only: bool,
    ) -> Result<Vec<(String, Result<()>)>> {
        let timeout_ms = self.timeout_ms();
        let resp = self
            .client
            .retry(|| async {
                let conn = self.client.any_connection().await?;
                let resp = conn
                    .request(|_version| {
                        let mut req = CreateTopicsRequest::default();
                        req.timeout_ms = timeout_ms;
                        req.validate_only = validate_only;
                        req.topics = topics
                            .iter()
                            .map(|t| {
                                let mut ct = CreatableTopic::default();
                                ct.name = name(&t.name);
                                ct.num_partitions = t.num_partitions;
                                ct.replication_factor = t.replication_factor;
                                ct.assignments = t
                                    .assignments
                                    .iter()
                                    .enumerate()
                                    .map(|(i, replicas)| {
                                        let mut a = CreatableReplicaAssignment::default();
                                        a.partition_index = i as i32;
                                        a.broker_ids = replicas.iter().map(|&b| b.into()).collect();
                                        a
                                    })
                                    .collect();
                                ct.configs = t
                                    .configs
                                    .iter()
                                    .map(|(k, v)| {
                                        let mut c = CreatableTopicConfig::default();
                                        c.name = StrBytes::from_string(k.clone());
                                        c.value = Some(StrBytes::from_string(v.clone()));
                                        c
                                    })
                                    .collect();
                                ct
                            })
                            .collect();
                        req
                    })
                    .await?;
                // NOT_CONTROLLER is retriable as a whole.
                if let Some(r) = resp
                    .topics
                    .iter()
                    .find(|r| r.error_code == ErrorCode::NotController.code())
                {
                    return Err(Error::kafka(r.error_code, None).unwrap());
                }
                Ok(resp)
            })
            .await?;
        Ok(topics
            .iter()
            .map(|t| {
                let r = resp
                    .topics
                    .iter()
                    .find(|r| r.name.0.as_str() == t.name)
                    .map(
                        |r| match Error::kafka(r.error_code, str_opt(&r.error_message)) {
                            Some(e) => Err(e),
                            None => Ok(()),
                        },
                    )
                    .unwrap_or_else(|| {
                        Err(Error::Protocol(format!("no result for topic {}", t.name)))
                    });
                (t.name.clone(), r)
            })
            .collect())
    }

    /// Deletes topics by name; fails with the first per-topic error.
    pub async fn delete_topics(&self, topics: &[String]) -> Result<()> {
        let timeout_ms = self.timeout_ms();
        let resp = self
            .client
            .retry(|| async {
                let conn = self.client.any_connection().await?;
                conn.request(|version| {
                    let mut req = DeleteTopicsRequest::default();
                    req.timeout_ms = timeout_ms;
                    if version >= 6 {
                        req.topics = topics
                            .iter()
                            .map(|t| {
                                let mut s = DeleteTopicState::default();
                                s.name = Some(name(t));
                                s
                            })
                            .collect();
                    } else {
                        req.topic_names = topics.iter().map(|t| name(t)).collect();
                    }
                    req
                })
                .await
            })
            .await?;
        for r in &resp.responses {
            if let Some(e) = Error::kafka(r.error_code, str_opt(&r.error_message)) {
                return Err(e);
            }
        }
        for t in topics {
            self.client.invalidate_topic(t);
        }
        Ok(())
    }

    /// All topic names, sorted.
    pub async fn list_topics(&self) -> Result<Vec<String>> {
        let resp = self
            .client
            .retry(|| self.client.refresh_metadata(None))
            .await?;
        let mut names: Vec<String> = resp
            .topics
            .iter()
            .filter(|t| t.error_code == 0)
            .filter_map(|t| t.name.as_ref().map(|n| n.0.to_string()))
            .collect();
        names.sort();
        Ok(names)
    }

    /// Describes topics (`None`: all topics). Fails if a named topic does not exist.
    pub async fn describe_topics(
        &self,
        topics: Option<&[String]>,
    ) -> Result<Vec<TopicDescription>> {
        let resp = self
            .client
            .retry(|| self.client.refresh_metadata(topics))
            .await?;
        let mut out = Vec::new();
        for t in &resp.topics {
            let topic_name = t.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default();
            if let Some(e) = Error::kafka(t.error_code, None) {
                if topics.is_some() {
                    return Err(match e.code() {
                        Some(ErrorCode::UnknownTopicOrPartition) => Error::Kafka {
                            code: ErrorCode::UnknownTopicOrPartition,
                            message: Some(format!("Topic '{topic_name}' does not exist")),
                        },
                        _ => e,
                    });
                }
                continue;
            }
            let partitions = partitions_from_metadata(&t.partitions);
            out.push(TopicDescription {
                name: topic_name,
                topic_id: t.topic_id,
                is_internal: t.is_internal,
                partitions,
            });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// All config entries of a topic.
    pub async fn describe_topic_configs(&self, topic: &str) -> Result<Vec<ConfigEntry>> {
        let resp = self
            .client
            .retry(|| async {
                let conn = self.client.any_connection().await?;
                conn.request(|_| {
                    let mut r = DescribeConfigsResource::default();
                    r.resource_type = RESOURCE_TOPIC;
                    r.resource_name = StrBytes::from_string(topic.to_string());
                    r.configuration_keys = None;
                    let mut req = DescribeConfigsRequest::default();
                    req.resources = vec![r];
                    req
                })
                .await
            })
            .await?;
        let result = resp
            .results
            .into_iter()
            .next()
            .ok_or_else(|| Error::Protocol("empty DescribeConfigs response".into()))?;
        if let Some(e) = Error::kafka(result.error_code, str_opt(&result.error_message)) {
            return Err(e);
        }
        Ok(result
            .configs
            .iter()
            .map(|c| ConfigEntry {
                name: c.name.to_string(),
                value: str_opt(&c.value),
                read_only: c.read_only,
                source: c.config_source,
                is_default: c.config_source == SOURCE_DEFAULT,
                is_sensitive: c.is_sensitive,
            })
            .collect())
    }

    /// Applies IncrementalAlterConfigs operations to a topic.
    pub async fn incremental_alter_topic_configs(
        &self,
        topic: &str,
        ops: &[AlterConfigOp],
        validate_only: bool,
    ) -> Result<()> {
        let resp = self
            .client
            .retry(|| async {
                let conn = self.client.any_connection().await?;
                conn.request(|_| {
                    let mut res = AlterConfigsResource::default();
                    res.resource_type = RESOURCE_TOPIC;
                    res.resource_name = StrBytes::from_string(topic.to_string());
                    res.configs = ops
                        .iter()
                        .map(|op| {
                            let (k, v, code) = match op {
                                AlterConfigOp::Set(k, v) => (k, Some(v), 0),
                                AlterConfigOp::Delete(k) => (k, None, 1),
                                AlterConfigOp::Append(k, v) => (k, Some(v), 2),
                                AlterConfigOp::Subtract(k, v) => (k, Some(v), 3),
                            };
                            let mut c = AlterableConfig::default();
                            c.name = StrBytes::from_string(k.clone());
                            c.config_operation = code;
                            c.value = v.map(|v| StrBytes::from_string(v.clone()));
                            c
                        })
                        .collect();
                    let mut req = IncrementalAlterConfigsRequest::default();
                    req.resources = vec![res];
                    req.validate_only = validate_only;
                    req
                })
                .await
            })
            .await?;
        for r in &resp.responses {
            if let Some(e) = Error::kafka(r.error_code, str_opt(&r.error_message)) {
                return Err(e);
            }
        }
        Ok(())
    }

    /// Increases a topic's partition count to `total`.
    pub async fn create_partitions(
        &self,
        topic: &str,
        total: i32,
        validate_only: bool,
    ) -> Result<()> {
        let timeout_ms = self.timeout_ms();
        let resp = self
            .client
            .retry(|| async {
                let conn = self.client.any_connection().await?;
                conn.request(|_| {
                    let mut t = CreatePartitionsTopic::default();
                    t.name = name(topic);
                    t.count = total;
                    t.assignments = None;
                    let mut req = CreatePartitionsRequest::default();
                    req.topics = vec![t];
                    req.timeout_ms = timeout_ms;
                    req.validate_only = validate_only;
                    req
                })
                .await
            })
            .await?;
        for r in &resp.results {
            if let Some(e) = Error::kafka(r.error_code, str_opt(&r.error_message)) {
                return Err(e);
            }
        }
        self.client.invalidate_topic(topic);
        Ok(())
    }

    /// Cluster id, controller and live brokers (DescribeCluster, or Metadata when the broker
    /// does not serve DescribeCluster).
    pub async fn describe_cluster(&self) -> Result<ClusterDescription> {
        let conn = self.client.any_connection().await?;
        if conn
            .version_for(strom_protocol::kafka::messages::ApiKey::DescribeCluster)
            .is_ok()
        {
            let resp = conn.request(|_| DescribeClusterRequest::default()).await?;
            if let Some(e) = Error::kafka(resp.error_code, str_opt(&resp.error_message)) {
                return Err(e);
            }
            return Ok(ClusterDescription {
                cluster_id: resp.cluster_id.to_string(),
                controller_id: resp.controller_id.0,
                brokers: resp
                    .brokers
                    .iter()
                    .map(|b| BrokerInfo {
                        node_id: b.broker_id.0,
                        host: b.host.to_string(),
                        port: b.port,
                        rack: str_opt(&b.rack),
                    })
                    .collect(),
            });
        }
        self.client.refresh_metadata(Some(&[])).await?;
        let md = self.client.metadata();
        Ok(ClusterDescription {
            cluster_id: md.cluster_id.clone().unwrap_or_default(),
            controller_id: md.controller_id,
            brokers: md.brokers.values().cloned().collect(),
        })
    }
}

//! The cluster view: bootstrap, Metadata refresh, one connection per broker, leader lookup and
//! retries.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use strom_protocol::kafka::messages::metadata_request::MetadataRequestTopic;
use strom_protocol::kafka::messages::{MetadataRequest, MetadataResponse, TopicName};
use strom_protocol::kafka::protocol::StrBytes;
use strom_protocol::ErrorCode;
use uuid::Uuid;

use crate::connection::{Connection, ConnectionConfig};

/// The partitions of one Metadata topic, sorted by index (shared by the cluster view and
/// Admin's describe).
pub(crate) fn partitions_from_metadata(
    parts: &[strom_protocol::kafka::messages::metadata_response::MetadataResponsePartition],
) -> Vec<PartitionMetadata> {
    let mut partitions: Vec<PartitionMetadata> = parts
        .iter()
        .map(|p| PartitionMetadata {
            partition: p.partition_index,
            leader: p.leader_id.0,
            leader_epoch: p.leader_epoch,
            replicas: p.replica_nodes.iter().map(|b| b.0).collect(),
            isr: p.isr_nodes.iter().map(|b| b.0).collect(),
            offline_replicas: p.offline_replicas.iter().map(|b| b.0).collect(),
            error: ErrorCode::try_from_code(p.error_code),
        })
        .collect();
    partitions.sort_by_key(|p| p.partition);
    partitions
}
use crate::error::{Error, Result};

/// Settings shared by the admin client, producer and consumer.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// `host:port` of one or more brokers to bootstrap from.
    pub bootstrap_servers: Vec<String>,
    /// Sent in every request header.
    pub client_id: String,
    /// `request.timeout.ms`.
    pub request_timeout: Duration,
    /// Timeout for TCP connects.
    pub connect_timeout: Duration,
    /// `retry.backoff.ms`: the first wait before a retry (doubled each attempt, capped at 1 s).
    pub retry_backoff: Duration,
    /// How many times a retriable operation is retried.
    pub retries: u32,
    /// `metadata.max.age.ms`: cached metadata older than this is refreshed before use.
    pub metadata_max_age: Duration,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            bootstrap_servers: vec!["localhost:9092".into()],
            client_id: "strom-client".into(),
            request_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            retry_backoff: Duration::from_millis(100),
            retries: 10,
            metadata_max_age: Duration::from_secs(300),
        }
    }
}

impl ClientConfig {
    /// A default config bootstrapping from a comma-separated `host:port` list.
    pub fn new(bootstrap_servers: &str) -> Self {
        ClientConfig {
            bootstrap_servers: bootstrap_servers
                .split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect(),
            ..Default::default()
        }
    }

    fn connection_config(&self) -> ConnectionConfig {
        ConnectionConfig {
            client_id: self.client_id.clone(),
            request_timeout: self.request_timeout,
            connect_timeout: self.connect_timeout,
            ..Default::default()
        }
    }

    /// The backoff before retry number `attempt` (0-based).
    pub fn backoff(&self, attempt: u32) -> Duration {
        let base = self.retry_backoff.as_millis() as u64;
        let ms = base
            .saturating_mul(1u64 << attempt.min(10))
            .min(1000.max(base));
        Duration::from_millis(ms)
    }
}

/// A broker as listed in Metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerInfo {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
}

impl BrokerInfo {
    /// `host:port`.
    pub fn addr(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

/// One partition as listed in Metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionMetadata {
    pub partition: i32,
    /// -1 when there is no leader.
    pub leader: i32,
    pub leader_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    pub offline_replicas: Vec<i32>,
    pub error: Option<ErrorCode>,
}

/// One topic as listed in Metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicMetadata {
    pub name: String,
    pub topic_id: Uuid,
    pub is_internal: bool,
    /// Sorted by partition id.
    pub partitions: Vec<PartitionMetadata>,
    pub error: Option<ErrorCode>,
}

impl TopicMetadata {
    /// The leader of `partition`, if known.
    pub fn leader(&self, partition: i32) -> Option<i32> {
        self.partitions
            .iter()
            .find(|p| p.partition == partition)
            .map(|p| p.leader)
            .filter(|&l| l >= 0)
    }
}

/// A snapshot of the cluster as the client last saw it.
#[derive(Debug, Clone)]
pub struct ClusterMetadata {
    pub cluster_id: Option<String>,
    pub controller_id: i32,
    pub brokers: BTreeMap<i32, BrokerInfo>,
    pub topics: HashMap<String, TopicMetadata>,
    pub fetched_at: Instant,
}

impl Default for ClusterMetadata {
    fn default() -> Self {
        ClusterMetadata {
            cluster_id: None,
            controller_id: -1,
            brokers: BTreeMap::new(),
            topics: HashMap::new(),
            fetched_at: Instant::now(),
        }
    }
}

struct Inner {
    config: ClientConfig,
    metadata: RwLock<Arc<ClusterMetadata>>,
    /// Connections by address.
    conns: tokio::sync::Mutex<HashMap<String, Arc<Connection>>>,
}

/// A handle on the cluster: cached metadata plus one connection per broker. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("bootstrap", &self.inner.config.bootstrap_servers)
            .finish()
    }
}

impl Client {
    /// Connects to the bootstrap servers and fetches the broker list.
    pub async fn connect(config: ClientConfig) -> Result<Client> {
        if config.bootstrap_servers.is_empty() {
            return Err(Error::Config("no bootstrap servers".into()));
        }
        let client = Client {
            inner: Arc::new(Inner {
                config,
                metadata: RwLock::new(Arc::new(ClusterMetadata::default())),
                conns: tokio::sync::Mutex::new(HashMap::new()),
            }),
        };
        client.refresh_metadata(Some(&[])).await?;
        Ok(client)
    }

    /// The configuration.
    pub fn config(&self) -> &ClientConfig {
        &self.inner.config
    }

    /// The current metadata snapshot (possibly stale).
    pub fn metadata(&self) -> Arc<ClusterMetadata> {
        self.inner.metadata.read().unwrap().clone()
    }

    /// A connection to `addr`, reusing an open one.
    pub async fn connection_to_addr(&self, addr: &str) -> Result<Arc<Connection>> {
        {
            let conns = self.inner.conns.lock().await;
            if let Some(c) = conns.get(addr) {
                if !c.is_closed() {
                    return Ok(c.clone());
                }
            }
        }
        let conn =
            Arc::new(Connection::connect(addr, self.inner.config.connection_config()).await?);
        let mut conns = self.inner.conns.lock().await;
        match conns.get(addr) {
            Some(c) if !c.is_closed() => Ok(c.clone()),
            _ => {
                conns.insert(addr.to_string(), conn.clone());
                Ok(conn)
            }
        }
    }

    /// A connection to broker `node_id` (refreshing metadata if the broker is unknown).
    pub async fn connection(&self, node_id: i32) -> Result<Arc<Connection>> {
        let mut addr = self.metadata().brokers.get(&node_id).map(|b| b.addr());
        if addr.is_none() {
            self.refresh_metadata(Some(&[])).await?;
            addr = self.metadata().brokers.get(&node_id).map(|b| b.addr());
        }
        match addr {
            Some(a) => self.connection_to_addr(&a).await,
            None => Err(Error::NoBrokerAvailable(format!(
                "unknown broker id {node_id}"
            ))),
        }
    }

    /// A connection to any reachable broker: known brokers first, then the bootstrap list.
    pub async fn any_connection(&self) -> Result<Arc<Connection>> {
        let mut candidates: Vec<String> =
            self.metadata().brokers.values().map(|b| b.addr()).collect();
        if !candidates.is_empty() {
            let start = rand::random_range(0..candidates.len());
            candidates.rotate_left(start);
        }
        for b in &self.inner.config.bootstrap_servers {
            if !candidates.contains(b) {
                candidates.push(b.clone());
            }
        }
        // Prefer an already open connection.
        {
            let conns = self.inner.conns.lock().await;
            for a in &candidates {
                if let Some(c) = conns.get(a) {
                    if !c.is_closed() {
                        return Ok(c.clone());
                    }
                }
            }
        }
        let mut errors = Vec::new();
        for a in &candidates {
            match self.connection_to_addr(a).await {
                Ok(c) => return Ok(c),
                Err(e) => errors.push(format!("{a}: {e}")),
            }
        }
        Err(Error::NoBrokerAvailable(errors.join("; ")))
    }

    /// A connection to the controller when Metadata names one, else to any broker.
    pub async fn controller_connection(&self) -> Result<Arc<Connection>> {
        let controller = self.metadata().controller_id;
        if controller >= 0 {
            if let Ok(c) = self.connection(controller).await {
                return Ok(c);
            }
        }
        self.any_connection().await
    }

    /// Sends a Metadata request for `topics` (`None` = all topics, `Some(&[])` = brokers only)
    /// and merges the answer into the cache. Returns the raw response.
    pub async fn refresh_metadata(&self, topics: Option<&[String]>) -> Result<MetadataResponse> {
        let conn = self.any_connection().await?;
        let resp = conn
            .request(|version| {
                let mut req = MetadataRequest::default();
                req.topics = topics.map(|ts| {
                    ts.iter()
                        .map(|t| {
                            let mut mt = MetadataRequestTopic::default();
                            mt.name = Some(TopicName(StrBytes::from_string(t.clone())));
                            mt
                        })
                        .collect()
                });
                if version >= 4 {
                    req.allow_auto_topic_creation = false;
                }
                req
            })
            .await?;
        self.merge_metadata(&resp, topics.is_none());
        Ok(resp)
    }

    fn merge_metadata(&self, resp: &MetadataResponse, all_topics: bool) {
        let mut md = (**self.inner.metadata.read().unwrap()).clone();
        md.brokers = resp
            .brokers
            .iter()
            .map(|b| {
                (
                    b.node_id.0,
                    BrokerInfo {
                        node_id: b.node_id.0,
                        host: b.host.to_string(),
                        port: b.port,
                        rack: b.rack.as_ref().map(|r| r.to_string()),
                    },
                )
            })
            .collect();
        md.cluster_id = resp.cluster_id.as_ref().map(|c| c.to_string());
        md.controller_id = resp.controller_id.0;
        if all_topics {
            md.topics.clear();
        }
        for t in &resp.topics {
            let Some(name) = t.name.as_ref().map(|n| n.0.to_string()) else {
                continue;
            };
            let error = ErrorCode::try_from_code(t.error_code);
            if error.is_some() && t.partitions.is_empty() {
                md.topics.remove(&name);
                continue;
            }
            let partitions = partitions_from_metadata(&t.partitions);
            md.topics.insert(
                name.clone(),
                TopicMetadata {
                    name,
                    topic_id: t.topic_id,
                    is_internal: t.is_internal,
                    partitions,
                    error,
                },
            );
        }
        md.fetched_at = Instant::now();
        *self.inner.metadata.write().unwrap() = Arc::new(md);
    }

    /// Metadata for one topic, from the cache when fresh, else refreshed. Retries while the
    /// topic is unknown or has partitions without a leader (a topic being created), up to
    /// `retries` times; then fails with UNKNOWN_TOPIC_OR_PARTITION / LEADER_NOT_AVAILABLE.
    pub async fn topic_metadata(&self, topic: &str) -> Result<TopicMetadata> {
        let md = self.metadata();
        if md.fetched_at.elapsed() < self.inner.config.metadata_max_age {
            if let Some(t) = md.topics.get(topic) {
                if t.partitions.iter().all(|p| p.leader >= 0) && !t.partitions.is_empty() {
                    return Ok(t.clone());
                }
            }
        }
        let topics = [topic.to_string()];
        self.retry(|| async {
            let resp = self.refresh_metadata(Some(&topics)).await?;
            let t = resp
                .topics
                .iter()
                .find(|t| t.name.as_ref().map(|n| n.0.as_str()) == Some(topic))
                .ok_or(Error::Kafka {
                    code: ErrorCode::UnknownTopicOrPartition,
                    message: None,
                })?;
            if let Some(e) = Error::kafka(t.error_code, None) {
                return Err(e);
            }
            let tm = self
                .metadata()
                .topics
                .get(topic)
                .cloned()
                .ok_or(Error::Kafka {
                    code: ErrorCode::UnknownTopicOrPartition,
                    message: None,
                })?;
            if tm.partitions.is_empty() || tm.partitions.iter().any(|p| p.leader < 0) {
                return Err(Error::Kafka {
                    code: ErrorCode::LeaderNotAvailable,
                    message: None,
                });
            }
            Ok(tm)
        })
        .await
    }

    /// The leader of a partition, refreshing metadata when unknown.
    pub async fn leader_for(&self, topic: &str, partition: i32) -> Result<i32> {
        if let Some(l) = self
            .metadata()
            .topics
            .get(topic)
            .and_then(|t| t.leader(partition))
        {
            return Ok(l);
        }
        let t = self.topic_metadata(topic).await?;
        t.leader(partition).ok_or(Error::Kafka {
            code: ErrorCode::UnknownTopicOrPartition,
            message: Some(format!("partition {topic}-{partition} does not exist")),
        })
    }

    /// Forgets cached metadata for `topic` so the next lookup refreshes it.
    pub fn invalidate_topic(&self, topic: &str) {
        let mut guard = self.inner.metadata.write().unwrap();
        let mut md = (**guard).clone();
        if md.topics.remove(topic).is_some() {
            *guard = Arc::new(md);
        }
    }

    /// Runs `op` until it succeeds, fails with a non-retriable error, or `retries` is
    /// exhausted, sleeping with exponential backoff between attempts.
    pub async fn retry<T, F, Fut>(&self, mut op: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let mut attempt = 0;
        loop {
            match op().await {
                Ok(v) => return Ok(v),
                Err(e) if e.is_retriable() && attempt < self.inner.config.retries => {
                    tracing::debug!(error = %e, attempt, "retrying");
                    tokio::time::sleep(self.inner.config.backoff(attempt)).await;
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

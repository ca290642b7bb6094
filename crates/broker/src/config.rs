//! Broker configuration: Kafka property names from a `.properties` file and `--set` overrides,
//! resolved into typed settings, plus the per-topic `LogConfig` derived from broker defaults and
//! topic overrides.

use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

use strom_controller::topic_config::{self, TopicConfigDef};
use strom_storage::config::TargetCompression;
use strom_storage::{LogConfig, TimestampType};
use thiserror::Error;

use crate::listeners::{self, Listeners};

#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("Invalid value {value} for configuration {key}: {why}")]
    InvalidValue {
        key: String,
        value: String,
        why: String,
    },
    #[error("cannot read config file {path}: {source}")]
    File {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("malformed property '{0}': expected key=value")]
    Malformed(String),
    /// A valid Kafka setting Strom does not support yet (refused rather than ignored).
    #[error("{0}")]
    Unsupported(String),
}

/// Broker properties Strom understands; anything else is warned about, as Kafka does.
const KNOWN_BROKER_KEYS: &[&str] = &[
    "node.id",
    "log.dirs",
    "log.dir",
    "metadata.log.dir",
    "num.partitions",
    "default.replication.factor",
    "auto.create.topics.enable",
    "delete.topic.enable",
    "socket.request.max.bytes",
    "log.retention.check.interval.ms",
    "log.retention.hours",
    "log.retention.minutes",
    "log.roll.hours",
    "log.flush.scheduler.interval.ms",
    "log.flush.offset.checkpoint.interval.ms",
    "listeners",
    "advertised.listeners",
    "broker.rack",
    "producer.id.expiration.ms",
    "replica.lag.time.max.ms",
    "broker.heartbeat.interval.ms",
    "broker.session.timeout.ms",
    "auto.leader.rebalance.enable",
    "leader.imbalance.check.interval.seconds",
    "replica.fetch.wait.max.ms",
    "replica.fetch.min.bytes",
    "replica.fetch.max.bytes",
    "replica.fetch.response.max.bytes",
    "replica.fetch.backoff.ms",
    "replica.socket.timeout.ms",
    "producer.id.expiration.check.interval.ms",
    crate::log_chores::MAX_OPEN_FILES_KEY,
    "listener.security.protocol.map",
    "inter.broker.listener.name",
    "controller.listener.names",
    "process.roles",
    "controller.quorum.voters",
    "controller.quorum.bootstrap.servers",
    "connections.max.idle.ms",
    "max.connections",
    "max.connections.per.ip",
    "max.connections.per.ip.overrides",
    // The group coordinator's (read by `GroupCoordinatorConfig::from_props`).
    "offsets.topic.num.partitions",
    "offsets.topic.replication.factor",
    "offsets.topic.segment.bytes",
    "offsets.retention.ms",
    "offsets.retention.minutes",
    "offsets.retention.check.interval.ms",
    "offsets.commit.timeout.ms",
    "offset.metadata.max.bytes",
    "group.initial.rebalance.delay.ms",
    "group.min.session.timeout.ms",
    "group.max.session.timeout.ms",
    "group.max.size",
    "group.consumer.session.timeout.ms",
    "group.consumer.min.session.timeout.ms",
    "group.consumer.max.session.timeout.ms",
    "group.consumer.heartbeat.interval.ms",
    "group.consumer.min.heartbeat.interval.ms",
    "group.consumer.max.heartbeat.interval.ms",
    "group.consumer.max.size",
    "group.consumer.assignors",
    "group.consumer.migration.policy",
    // The transaction coordinator's (read by `TransactionCoordinatorConfig::from_props`).
    "transaction.state.log.num.partitions",
    "transaction.state.log.replication.factor",
    "transaction.state.log.min.isr",
    "transaction.state.log.segment.bytes",
    "transaction.max.timeout.ms",
    "transactional.id.expiration.ms",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms",
    "transaction.remove.expired.transaction.cleanup.interval.ms",
    // KIP-890 (the produce path and ApiVersions).
    "transaction.partition.verification.enable",
    "add.partitions.to.txn.retry.backoff.ms",
    "add.partitions.to.txn.retry.backoff.max.ms",
    // WriteTxnMarkers' wait for the HW; the txn-markers / txn-verification requests.
    "request.timeout.ms",
    "transaction.version",
    // The log cleaner's (read by `CleanerConfig::from_props`).
    "log.cleaner.enable",
    "log.cleaner.threads",
    "log.cleaner.dedupe.buffer.size",
    "log.cleaner.io.buffer.load.factor",
    "log.cleaner.io.max.bytes.per.second",
    "log.cleaner.backoff.ms",
];

#[derive(Debug, Clone)]
pub struct BrokerConfig {
    pub node_id: i32,
    /// `listeners`, `advertised.listeners`, `inter.broker.listener.name`,
    /// `controller.listener.names` and the security protocol map.
    pub listeners: Listeners,
    /// The inter-broker listener's advertised endpoint: what this broker registers with the
    /// controller, so what clients and followers are told. A port of 0 in the configuration is
    /// replaced by the bound port at start-up.
    pub advertised_host: String,
    pub advertised_port: i32,
    pub data_dir: PathBuf,
    /// Kafka's `log.dirs` (comma-separated, wins over `log.dir`); default: `data_dir` alone.
    /// New partitions go to the dir with the fewest partitions (`log_manager`).
    pub log_dirs: Vec<PathBuf>,
    /// Kafka's `metadata.log.dir`: where `__cluster_metadata-0` lives; default the first log dir.
    pub metadata_log_dir: PathBuf,
    pub rack: Option<String>,
    /// This node's controller listener (cluster mode): Raft between the voters and the
    /// broker-to-controller APIs, on one port.
    pub controller_listen: Option<SocketAddr>,
    /// The controller voters: node id and controller address. `None`: a single-node cluster
    /// whose metadata log is a local file.
    pub controller_quorum: Option<BTreeMap<i32, SocketAddr>>,
    /// Raw Kafka properties, after file and `--set` merging.
    pub props: BTreeMap<String, String>,
    pub num_partitions: i32,
    pub default_replication_factor: i16,
    pub auto_create_topics_enable: bool,
    pub delete_topic_enable: bool,
    pub socket_request_max_bytes: usize,
    pub retention_check_interval_ms: u64,
    pub flush_scheduler_interval_ms: u64,
    pub checkpoint_interval_ms: u64,
    pub producer_id_expiration_ms: i64,
    pub producer_id_expiration_check_interval_ms: u64,
    pub replica_lag_time_max_ms: i64,
    pub broker_heartbeat_interval_ms: u64,
    pub broker_session_timeout_ms: u64,
    pub min_insync_replicas: i32,
    pub unclean_leader_election_enable: bool,
    /// `auto.leader.rebalance.enable`: the active controller periodically moves leadership back
    /// to preferred replicas.
    pub auto_leader_rebalance_enable: bool,
    pub leader_imbalance_check_interval_seconds: u64,
    /// `connections.max.idle.ms`: a connection with no request for this long is closed.
    pub connections_max_idle_ms: u64,
    /// `max.connections`: accepting on the broker listeners waits while this many are open.
    pub max_connections: usize,
    /// `max.connections.per.ip`, with `max.connections.per.ip.overrides` (`host:count,...`):
    /// a connection over its address's limit is closed at once.
    pub max_connections_per_ip: usize,
    pub max_connections_per_ip_overrides: BTreeMap<std::net::IpAddr, usize>,
    /// `transaction.partition.verification.enable` (KIP-890 part 1, default true): the leader
    /// asks the transaction coordinator before a transactional batch opens a transaction in a
    /// partition.
    pub transaction_partition_verification_enable: bool,
    /// `add.partitions.to.txn.retry.backoff.ms` (20) and `.max.ms` (100): how often and for how
    /// long the leader asks the coordinator again on CONCURRENT_TRANSACTIONS before answering it.
    pub add_partitions_to_txn_retry_backoff_ms: u64,
    pub add_partitions_to_txn_retry_backoff_max_ms: u64,
    /// `request.timeout.ms` (30000): bounds the wait for WriteTxnMarkers' markers to be
    /// replicated, and the transaction markers' and verification's inter-broker requests.
    pub request_timeout_ms: u64,
    /// `log.cleaner.*`: the log cleaner's threads, memory and I/O rate.
    pub cleaner: crate::log_cleaner::CleanerConfig,
    /// The finalized level of the `transaction.version` feature (0..=2; default 2, a new Kafka
    /// 4.4 cluster's). Strom has no feature records: the property stands for the level the
    /// cluster finalized, and every node must be given the same.
    pub transaction_version: i16,
    /// `fetch.max.bytes`, `queued.max.requests` and the other bounds on request memory.
    pub limits: crate::request_limits::RequestLimits,
}

/// Parses `1@host:port,2@host:port,...` (Kafka's `controller.quorum.voters`).
pub fn parse_quorum_voters(s: &str) -> Result<BTreeMap<i32, SocketAddr>, ConfigError> {
    let bad = |why: &str| ConfigError::InvalidValue {
        key: "controller.quorum.voters".into(),
        value: s.to_string(),
        why: why.to_string(),
    };
    let mut out = BTreeMap::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (id, addr) = part
            .split_once('@')
            .ok_or_else(|| bad("expected ID@HOST:PORT"))?;
        let id: i32 = id
            .trim()
            .parse()
            .map_err(|_| bad("node id is not a number"))?;
        let addr = first_address(addr.trim()).ok_or_else(|| bad("cannot resolve HOST:PORT"))?;
        if out.insert(id, addr).is_some() {
            return Err(bad("a node id appears twice"));
        }
    }
    if out.is_empty() {
        return Err(bad("no voters"));
    }
    Ok(out)
}

/// Parses Java `.properties` text: `key=value` or `key: value`, `#`/`!` comments.
pub fn parse_properties(text: &str) -> Result<BTreeMap<String, String>, ConfigError> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        let idx = line
            .find(['=', ':'])
            .ok_or_else(|| ConfigError::Malformed(line.to_string()))?;
        out.insert(
            line[..idx].trim().to_string(),
            line[idx + 1..].trim().to_string(),
        );
    }
    Ok(out)
}

/// `transaction.version`: a level Kafka 4.4 supports (0..=2).
fn transaction_version(props: &BTreeMap<String, String>) -> Result<i16, ConfigError> {
    let v: i16 = parse(props, "transaction.version", 2)?;
    if !(0..=2).contains(&v) {
        return Err(ConfigError::InvalidValue {
            key: "transaction.version".to_string(),
            value: v.to_string(),
            why: "supported levels are 0 to 2".to_string(),
        });
    }
    Ok(v)
}

pub(crate) fn parse<T: std::str::FromStr>(
    props: &BTreeMap<String, String>,
    key: &str,
    default: T,
) -> Result<T, ConfigError> {
    match props.get(key) {
        None => Ok(default),
        Some(v) => v.trim().parse().map_err(|_| ConfigError::InvalidValue {
            key: key.into(),
            value: v.clone(),
            why: "not a valid value of the expected type".into(),
        }),
    }
}

/// `log.dirs` if set, else `log.dir`, else `data_dir` (Kafka's `KafkaConfig.logDirs`).
fn log_dirs_from(
    props: &BTreeMap<String, String>,
    data_dir: &std::path::Path,
) -> Result<Vec<PathBuf>, ConfigError> {
    let Some((key, value)) = ["log.dirs", "log.dir"]
        .iter()
        .find_map(|k| props.get(*k).map(|v| (*k, v)))
    else {
        return Ok(vec![data_dir.to_path_buf()]);
    };
    let dirs: Vec<PathBuf> = value
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .collect();
    let distinct: std::collections::BTreeSet<&PathBuf> = dirs.iter().collect();
    if dirs.is_empty() || distinct.len() != dirs.len() {
        return Err(ConfigError::InvalidValue {
            key: key.into(),
            value: value.clone(),
            why: "expected a comma-separated list of distinct directories".into(),
        });
    }
    Ok(dirs)
}

impl BrokerConfig {
    /// A node with one PLAINTEXT listener on `listen` (advertised as `advertised`, default the
    /// listen address) and `props` for the rest: the command line's `--listen` and
    /// `--advertised-listener`, and tests.
    pub fn new(
        node_id: i32,
        listen: SocketAddr,
        advertised: Option<(String, i32)>,
        data_dir: PathBuf,
        mut props: BTreeMap<String, String>,
    ) -> Result<Self, ConfigError> {
        props.insert("node.id".into(), node_id.to_string());
        props.insert("listeners".into(), format!("PLAINTEXT://{listen}"));
        if let Some((host, port)) = advertised {
            props.insert(
                "advertised.listeners".into(),
                format!("PLAINTEXT://{host}:{port}"),
            );
        }
        Self::from_props(data_dir, props)
    }

    /// The configuration from Kafka properties (a `server.properties` file merged with
    /// `--set` and the command line's flags).
    pub fn from_props(
        data_dir: PathBuf,
        props: BTreeMap<String, String>,
    ) -> Result<Self, ConfigError> {
        log_unused(&props);
        // Validate every topic-default synonym now so a bad value fails start-up, not a request.
        for def in topic_config::TOPIC_CONFIGS {
            if let Some(v) = props.get(def.broker_key) {
                topic_config::validate(def.name, v).map_err(|why| ConfigError::InvalidValue {
                    key: def.broker_key.into(),
                    value: v.clone(),
                    why,
                })?;
            }
        }
        check_process_roles(&props)?;
        let node_id: i32 = parse(&props, "node.id", 1)?;
        if node_id < 0 {
            return Err(ConfigError::InvalidValue {
                key: "node.id".into(),
                value: node_id.to_string(),
                why: "must be a non-negative integer".into(),
            });
        }
        let listeners = listeners::resolve(&props)?;
        let controller_listen = match listeners.controller_listener() {
            Some(l) => Some(resolve_addr("listeners", &l.bind_address())?),
            None => None,
        };
        let controller_quorum = controller_quorum(&props, node_id, &listeners)?;
        match (&controller_quorum, &controller_listen) {
            (Some(_), None) => {
                return Err(ConfigError::InvalidValue {
                    key: "controller.listener.names".into(),
                    value: props
                        .get("controller.listener.names")
                        .cloned()
                        .unwrap_or_default(),
                    why: "a controller quorum needs this node's controller listener: name it in controller.listener.names and bind it in listeners".into(),
                })
            }
            (None, Some(_)) => {
                return Err(ConfigError::InvalidValue {
                    key: "controller.quorum.voters".into(),
                    value: String::new(),
                    why: "a controller listener needs the controller quorum (controller.quorum.voters)".into(),
                })
            }
            _ => {}
        }
        let adv = listeners.inter_broker_advertised();
        let advertised_host = if adv.host.is_empty() {
            local_host_name()
        } else {
            adv.host.clone()
        };
        let advertised_port = adv.port as i32;
        let log_dirs = log_dirs_from(&props, &data_dir)?;
        let metadata_log_dir = props
            .get("metadata.log.dir")
            .map(|d| PathBuf::from(d.trim()))
            .unwrap_or_else(|| log_dirs[0].clone());
        let cfg = Self {
            node_id,
            listeners,
            advertised_host,
            advertised_port,
            data_dir,
            log_dirs,
            metadata_log_dir,
            rack: props.get("broker.rack").cloned(),
            controller_listen,
            controller_quorum,
            num_partitions: parse(&props, "num.partitions", 1)?,
            default_replication_factor: parse(&props, "default.replication.factor", 1)?,
            auto_create_topics_enable: parse(&props, "auto.create.topics.enable", true)?,
            delete_topic_enable: parse(&props, "delete.topic.enable", true)?,
            socket_request_max_bytes: parse(&props, "socket.request.max.bytes", 104_857_600)?,
            retention_check_interval_ms: parse(&props, "log.retention.check.interval.ms", 300_000)?,
            flush_scheduler_interval_ms: parse(&props, "log.flush.scheduler.interval.ms", 1000)?,
            checkpoint_interval_ms: parse(
                &props,
                "log.flush.offset.checkpoint.interval.ms",
                60_000,
            )?,
            producer_id_expiration_ms: parse(&props, "producer.id.expiration.ms", 86_400_000)?,
            producer_id_expiration_check_interval_ms: parse(
                &props,
                "producer.id.expiration.check.interval.ms",
                600_000,
            )?,
            replica_lag_time_max_ms: parse(&props, "replica.lag.time.max.ms", 30_000)?,
            broker_heartbeat_interval_ms: parse(&props, "broker.heartbeat.interval.ms", 2_000)?,
            broker_session_timeout_ms: parse(&props, "broker.session.timeout.ms", 9_000)?,
            min_insync_replicas: parse(&props, "min.insync.replicas", 1)?,
            unclean_leader_election_enable: parse(&props, "unclean.leader.election.enable", false)?,
            auto_leader_rebalance_enable: parse(&props, "auto.leader.rebalance.enable", true)?,
            leader_imbalance_check_interval_seconds: parse(
                &props,
                "leader.imbalance.check.interval.seconds",
                300,
            )?,
            connections_max_idle_ms: parse(&props, "connections.max.idle.ms", 600_000)?,
            max_connections: parse::<i32>(&props, "max.connections", i32::MAX)?.max(0) as usize,
            max_connections_per_ip: parse::<i32>(&props, "max.connections.per.ip", i32::MAX)?.max(0)
                as usize,
            max_connections_per_ip_overrides: per_ip_overrides(&props)?,
            transaction_partition_verification_enable: parse(
                &props,
                "transaction.partition.verification.enable",
                true,
            )?,
            add_partitions_to_txn_retry_backoff_ms: parse(
                &props,
                "add.partitions.to.txn.retry.backoff.ms",
                20,
            )?,
            add_partitions_to_txn_retry_backoff_max_ms: parse(
                &props,
                "add.partitions.to.txn.retry.backoff.max.ms",
                100,
            )?,
            request_timeout_ms: parse(&props, "request.timeout.ms", 30_000)?,
            transaction_version: transaction_version(&props)?,
            limits: crate::request_limits::RequestLimits::from_props(
                &props,
                parse(&props, "socket.request.max.bytes", 104_857_600)?,
            )?,
            cleaner: crate::log_cleaner::CleanerConfig::from_props(&props)?,
            props,
        };
        if cfg.num_partitions < 1 {
            return Err(ConfigError::InvalidValue {
                key: "num.partitions".into(),
                value: cfg.num_partitions.to_string(),
                why: "Value must be at least 1".into(),
            });
        }
        // Surface bad retention/roll unit values at start-up too.
        cfg.broker_default("retention.ms");
        Ok(cfg)
    }

    /// The broker-level value for a topic config (`log.retention.ms` and its hours/minutes
    /// forms for `retention.ms`, and so on), with Kafka's precedence.
    pub fn broker_default(&self, topic_key: &str) -> Option<(String, &'static str)> {
        let def = topic_config::find(topic_key)?;
        let p = &self.props;
        let derived = match topic_key {
            "retention.ms" => p
                .get("log.retention.ms")
                .map(|v| (v.clone(), "log.retention.ms"))
                .or_else(|| {
                    p.get("log.retention.minutes")
                        .and_then(|m| m.parse::<i64>().ok())
                        .map(|m| ((m * 60_000).to_string(), "log.retention.minutes"))
                })
                .or_else(|| {
                    p.get("log.retention.hours")
                        .and_then(|h| h.parse::<i64>().ok())
                        .map(|h| ((h * 3_600_000).to_string(), "log.retention.hours"))
                }),
            "segment.ms" => p
                .get("log.roll.ms")
                .map(|v| (v.clone(), "log.roll.ms"))
                .or_else(|| {
                    p.get("log.roll.hours")
                        .and_then(|h| h.parse::<i64>().ok())
                        .map(|h| ((h * 3_600_000).to_string(), "log.roll.hours"))
                }),
            // Kafka: `log.flush.interval.ms` unset falls back to the flusher's own interval.
            "flush.ms" => p
                .get("log.flush.interval.ms")
                .map(|v| (v.clone(), "log.flush.interval.ms"))
                .or_else(|| {
                    p.get("log.flush.scheduler.interval.ms")
                        .map(|v| (v.clone(), "log.flush.scheduler.interval.ms"))
                }),
            _ => None,
        };
        derived.or_else(|| p.get(def.broker_key).map(|v| (v.clone(), def.broker_key)))
    }

    /// The effective value of every topic config for a topic with `overrides`, with its source.
    pub fn effective_topic_configs(
        &self,
        overrides: &BTreeMap<String, String>,
    ) -> Vec<(&'static TopicConfigDef, String, ConfigSource)> {
        topic_config::TOPIC_CONFIGS
            .iter()
            .map(|def| {
                if let Some(v) = overrides.get(def.name) {
                    (def, v.clone(), ConfigSource::DynamicTopic)
                } else if let Some((v, _)) = self.broker_default(def.name) {
                    (def, v, ConfigSource::StaticBroker)
                } else {
                    (def, def.default.to_string(), ConfigSource::Default)
                }
            })
            .collect()
    }

    /// The storage settings for a topic with `overrides`.
    pub fn log_config(&self, overrides: &BTreeMap<String, String>) -> LogConfig {
        let mut c = LogConfig {
            producer_id_expiration_ms: self.producer_id_expiration_ms,
            transaction_verification_enabled: self.transaction_partition_verification_enable,
            ..LogConfig::default()
        };
        let (mut compression_type, mut gzip_level, mut lz4_level, mut zstd_level) =
            (String::from("producer"), -1, 9, 3);
        for (def, v, _) in self.effective_topic_configs(overrides) {
            let int = || v.trim().parse::<i64>().unwrap_or(0);
            match def.name {
                "segment.bytes" => c.segment_bytes = int() as u64,
                "segment.ms" => c.segment_ms = int(),
                "retention.ms" => c.retention_ms = int(),
                "retention.bytes" => c.retention_bytes = int(),
                "index.interval.bytes" => c.index_interval_bytes = int() as u32,
                "segment.index.bytes" => c.segment_index_bytes = int() as u32,
                "max.message.bytes" => c.max_message_bytes = int() as u32,
                "flush.messages" => c.flush_interval_messages = int(),
                "flush.ms" => c.flush_ms = int(),
                "file.delete.delay.ms" => c.file_delete_delay_ms = int(),
                "cleanup.policy" => {
                    c.delete = v.split(',').any(|p| p.trim() == "delete");
                    c.compact = v.split(',').any(|p| p.trim() == "compact");
                }
                "min.cleanable.dirty.ratio" => {
                    c.min_cleanable_dirty_ratio = v.trim().parse().unwrap_or(0.5)
                }
                "min.compaction.lag.ms" => c.min_compaction_lag_ms = int(),
                "max.compaction.lag.ms" => c.max_compaction_lag_ms = int(),
                "delete.retention.ms" => c.delete_retention_ms = int(),
                "message.timestamp.before.max.ms" => c.message_timestamp_before_max_ms = int(),
                "message.timestamp.after.max.ms" => c.message_timestamp_after_max_ms = int(),
                "max.decompressed.message.bytes" => {
                    c.max_decompressed_message_bytes = int().clamp(1, i64::from(i32::MAX)) as i32
                }
                "compression.type" => compression_type = v.trim().to_string(),
                "compression.gzip.level" => gzip_level = int() as i32,
                "compression.lz4.level" => lz4_level = int() as i32,
                "compression.zstd.level" => zstd_level = int() as i32,
                "message.timestamp.type" => {
                    c.message_timestamp_type = if v == "LogAppendTime" {
                        TimestampType::LogAppendTime
                    } else {
                        TimestampType::CreateTime
                    }
                }
                _ => {}
            }
        }
        // Kafka's `LogConfig.getCompression`: the codec with its level, or the producer's.
        c.compression = match compression_type.as_str() {
            "uncompressed" => TargetCompression::Codec { id: 0, level: None },
            "gzip" => TargetCompression::Codec {
                id: 1,
                level: Some(gzip_level),
            },
            "snappy" => TargetCompression::Codec { id: 2, level: None },
            "lz4" => TargetCompression::Codec {
                id: 3,
                level: Some(lz4_level),
            },
            "zstd" => TargetCompression::Codec {
                id: 4,
                level: Some(zstd_level),
            },
            _ => TargetCompression::Producer,
        };
        // Kafka applies retention by time and size only to topics whose cleanup policy has
        // `delete`; a compacted-only topic loses records to the cleaner alone.
        if !c.delete {
            c.retention_ms = -1;
            c.retention_bytes = -1;
        }
        c
    }
}

/// Kafka's `AbstractConfig.logUnused`: every supplied key that no part of Strom reads, in one
/// line with Kafka's wording, so a setting that does nothing is never silent.
fn log_unused(props: &BTreeMap<String, String>) {
    let unused: Vec<&str> = props
        .keys()
        .map(String::as_str)
        .filter(|key| {
            !(KNOWN_BROKER_KEYS.contains(key)
                || crate::request_limits::KEYS.contains(key)
                || topic_config::TOPIC_CONFIGS
                    .iter()
                    .any(|d| d.broker_key == *key)
                || *key == "log.retention.ms"
                || *key == "log.roll.ms")
        })
        .collect();
    if !unused.is_empty() {
        tracing::info!(
            "These configurations '[{}]' were supplied but are not used yet.",
            unused.join(", ")
        );
    }
}

/// `process.roles`: Strom runs every node as broker and controller (Kafka's combined mode).
/// Without the key it does the same (Strom's own command line); a dedicated broker or
/// controller is refused rather than run as a combined node.
fn check_process_roles(props: &BTreeMap<String, String>) -> Result<(), ConfigError> {
    let Some(v) = props.get("process.roles") else {
        return Ok(());
    };
    let mut roles: Vec<String> = v
        .split(',')
        .map(|r| r.trim().to_ascii_lowercase())
        .filter(|r| !r.is_empty())
        .collect();
    roles.sort();
    roles.dedup();
    let bad = |why: &str| ConfigError::InvalidValue {
        key: "process.roles".into(),
        value: v.clone(),
        why: why.into(),
    };
    if roles.iter().any(|r| r != "broker" && r != "controller") {
        return Err(bad(
            "Unknown process role: the roles are broker and controller",
        ));
    }
    if roles != ["broker", "controller"] {
        return Err(ConfigError::Unsupported(format!(
            "process.roles={v}: Strom runs every node as broker and controller so far; use process.roles=broker,controller"
        )));
    }
    Ok(())
}

/// The controller voters: `controller.quorum.voters`, or a `controller.quorum.bootstrap.servers`
/// that names only this node's own controller listener (Kafka's sample `server.properties`,
/// formatted `--standalone`: this node is the one voter). A dynamic quorum of several
/// bootstrap servers (KIP-853) is refused.
fn controller_quorum(
    props: &BTreeMap<String, String>,
    node_id: i32,
    listeners: &Listeners,
) -> Result<Option<BTreeMap<i32, SocketAddr>>, ConfigError> {
    let voters = if let Some(v) = props.get("controller.quorum.voters") {
        parse_quorum_voters(v)?
    } else if let Some(v) = props.get("controller.quorum.bootstrap.servers") {
        let servers: Vec<&str> = v
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        let own = listeners.controller_listener();
        let bad = |why: String| {
            ConfigError::Unsupported(format!(
            "controller.quorum.bootstrap.servers={v}: {why}; list the voters in controller.quorum.voters (ID@HOST:PORT,...)"
        ))
        };
        let [server] = servers.as_slice() else {
            return Err(bad(
                "a dynamic controller quorum (KIP-853) is not supported yet".into(),
            ));
        };
        let Some(own) = own else {
            return Err(bad("this node has no controller listener".into()));
        };
        let addr = resolve_addr("controller.quorum.bootstrap.servers", server)?;
        if addr.port() != own.port {
            return Err(bad(format!(
                "{server} is not this node's controller listener {own}; joining another node's quorum is not supported yet"
            )));
        }
        BTreeMap::from([(node_id, addr)])
    } else {
        return Ok(None);
    };
    if !voters.contains_key(&node_id) {
        return Err(ConfigError::InvalidValue {
            key: "controller.quorum.voters".into(),
            value: props
                .get("controller.quorum.voters")
                .cloned()
                .unwrap_or_default(),
            why: format!("does not name this node ({node_id}); every Strom node is a voter"),
        });
    }
    Ok(Some(voters))
}

/// `max.connections.per.ip.overrides`: `host-or-ip:count,...`.
fn per_ip_overrides(
    props: &BTreeMap<String, String>,
) -> Result<BTreeMap<std::net::IpAddr, usize>, ConfigError> {
    const KEY: &str = "max.connections.per.ip.overrides";
    let mut out = BTreeMap::new();
    let Some(v) = props.get(KEY) else {
        return Ok(out);
    };
    for entry in v.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let bad = |why: &str| ConfigError::InvalidValue {
            key: KEY.into(),
            value: v.clone(),
            why: format!("{entry}: {why}"),
        };
        let (host, n) = entry
            .rsplit_once(':')
            .ok_or_else(|| bad("expected HOST:COUNT"))?;
        let n: usize = n
            .trim()
            .parse()
            .map_err(|_| bad("the count is not a number"))?;
        let ips: Vec<std::net::IpAddr> = match host.trim().parse() {
            Ok(ip) => vec![ip],
            Err(_) => (host.trim(), 0)
                .to_socket_addrs()
                .map_err(|_| bad("cannot resolve the host"))?
                .map(|a| a.ip())
                .collect(),
        };
        for ip in ips {
            out.insert(ip, n);
        }
    }
    Ok(out)
}

/// The address `HOST:PORT` resolves to, IPv4 first: `localhost` often resolves to `::1` first,
/// while a listener with an empty host binds `0.0.0.0`.
pub fn first_address(addr: &str) -> Option<SocketAddr> {
    let all: Vec<SocketAddr> = addr.to_socket_addrs().ok()?.collect();
    all.iter().find(|a| a.is_ipv4()).or(all.first()).copied()
}

fn resolve_addr(key: &str, addr: &str) -> Result<SocketAddr, ConfigError> {
    first_address(addr).ok_or_else(|| ConfigError::InvalidValue {
        key: key.into(),
        value: addr.into(),
        why: "cannot resolve HOST:PORT".into(),
    })
}

/// The host advertised for a listener bound to every interface (empty host), as Kafka uses
/// the canonical host name.
fn local_host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// DescribeConfigs `config_source` wire values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigSource {
    DynamicTopic = 1,
    StaticBroker = 4,
    Default = 5,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(props: &[(&str, &str)]) -> Result<BrokerConfig, ConfigError> {
        BrokerConfig::new(
            1,
            "127.0.0.1:9092".parse().unwrap(),
            None,
            "/tmp/x".into(),
            props
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    #[test]
    fn properties_file_syntax() {
        let p = parse_properties("# c\n a = 1\nb:2\n!x\n\nc=x=y\n").unwrap();
        assert_eq!(p["a"], "1");
        assert_eq!(p["b"], "2");
        assert_eq!(p["c"], "x=y");
    }

    #[test]
    fn defaults_and_precedence() {
        let c = cfg(&[("log.retention.hours", "1"), ("log.segment.bytes", "1000")]).unwrap();
        let lc = c.log_config(&BTreeMap::new());
        assert_eq!(lc.retention_ms, 3_600_000);
        assert_eq!(lc.segment_bytes, 1000);
        let c = cfg(&[("log.retention.hours", "1"), ("log.retention.ms", "5")]).unwrap();
        assert_eq!(c.log_config(&BTreeMap::new()).retention_ms, 5);
        let over: BTreeMap<String, String> = [("retention.ms".to_string(), "7".to_string())].into();
        assert_eq!(c.log_config(&over).retention_ms, 7);
        assert_eq!(c.num_partitions, 1);
        assert!(c.auto_create_topics_enable);
    }

    #[test]
    fn compacted_topics_are_not_deleted_by_retention() {
        let c = cfg(&[("log.retention.ms", "5"), ("log.retention.bytes", "100")]).unwrap();
        let over = |policy: &str| -> BTreeMap<String, String> {
            [("cleanup.policy".to_string(), policy.to_string())].into()
        };
        let lc = c.log_config(&over("compact"));
        assert_eq!((lc.retention_ms, lc.retention_bytes), (-1, -1));
        let lc = c.log_config(&over("compact,delete"));
        assert_eq!((lc.retention_ms, lc.retention_bytes), (5, 100));
        let lc = c.log_config(&BTreeMap::new());
        assert_eq!((lc.retention_ms, lc.retention_bytes), (5, 100));
    }

    #[test]
    fn log_dirs_precedence() {
        let c = cfg(&[]).unwrap();
        assert_eq!(c.log_dirs, vec![PathBuf::from("/tmp/x")]);
        assert_eq!(c.metadata_log_dir, PathBuf::from("/tmp/x"));
        let c = cfg(&[("log.dir", "/a")]).unwrap();
        assert_eq!(c.log_dirs, vec![PathBuf::from("/a")]);
        let c = cfg(&[("log.dir", "/a"), ("log.dirs", "/b, /c")]).unwrap();
        assert_eq!(c.log_dirs, vec![PathBuf::from("/b"), PathBuf::from("/c")]);
        assert_eq!(c.metadata_log_dir, PathBuf::from("/b"));
        let c = cfg(&[("log.dirs", "/b,/c"), ("metadata.log.dir", "/m")]).unwrap();
        assert_eq!(c.metadata_log_dir, PathBuf::from("/m"));
        assert!(cfg(&[("log.dirs", " , ")]).is_err());
        assert!(cfg(&[("log.dirs", "/b,/b")]).is_err());
    }

    #[test]
    fn bad_values_fail() {
        assert!(cfg(&[("num.partitions", "x")]).is_err());
        assert!(cfg(&[("num.partitions", "0")]).is_err());
        assert!(cfg(&[("log.segment.bytes", "-5")]).is_err());
        assert!(cfg(&[("auto.create.topics.enable", "maybe")]).is_err());
    }

    fn from(props: &[(&str, &str)]) -> Result<BrokerConfig, ConfigError> {
        BrokerConfig::from_props(
            "/tmp/x".into(),
            props
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    const COMBINED: &[(&str, &str)] = &[
        ("process.roles", "broker,controller"),
        ("node.id", "4"),
        (
            "listeners",
            "PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:19093",
        ),
        ("controller.listener.names", "CONTROLLER"),
    ];

    #[test]
    fn kafka_combined_mode_node() {
        let mut p = COMBINED.to_vec();
        p.push(("controller.quorum.voters", "4@127.0.0.1:19093"));
        let c = from(&p).unwrap();
        assert_eq!(c.node_id, 4);
        assert_eq!(
            c.controller_listen,
            Some("127.0.0.1:19093".parse().unwrap())
        );
        assert_eq!(c.controller_quorum.as_ref().unwrap().len(), 1);
        // The sample file's standalone bootstrap server is this node as the one voter.
        let mut p = COMBINED.to_vec();
        p.push(("controller.quorum.bootstrap.servers", "localhost:19093"));
        let c = from(&p).unwrap();
        assert_eq!(
            c.controller_quorum.unwrap().get(&4),
            Some(&"127.0.0.1:19093".parse().unwrap())
        );
    }

    #[test]
    fn unsupported_roles_and_quorums_are_refused() {
        for roles in ["broker", "controller"] {
            let mut p = COMBINED.to_vec();
            p.retain(|(k, _)| *k != "process.roles");
            p.push(("process.roles", roles));
            p.push(("controller.quorum.voters", "4@127.0.0.1:19093"));
            let e = from(&p).unwrap_err();
            assert!(matches!(e, ConfigError::Unsupported(_)), "{roles}: {e}");
        }
        let mut p = COMBINED.to_vec();
        p.push((
            "controller.quorum.bootstrap.servers",
            "localhost:19093,localhost:19094",
        ));
        assert!(matches!(from(&p), Err(ConfigError::Unsupported(_))));
        // A voter set without this node, and a controller listener without a quorum.
        let mut p = COMBINED.to_vec();
        p.push(("controller.quorum.voters", "1@127.0.0.1:19093"));
        assert!(from(&p).is_err());
        assert!(from(COMBINED).is_err());
    }
}

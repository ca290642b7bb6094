//! Producer settings with Kafka's names, defaults and validation (`ProducerConfig`), including
//! the idempotence rules of Kafka's `postProcessAndValidateIdempotenceConfigs`.

use std::time::Duration;

pub use strom_protocol::records::Compression;

use crate::client::ClientConfig;
use crate::error::{Error, Result};
use crate::partitioner::PartitionerKind;

/// `acks`: how many replicas must have the batch before the broker answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acks {
    /// `acks=0`: no response at all; offsets are reported as -1.
    None,
    /// `acks=1`: the leader has it.
    Leader,
    /// `acks=all` / `-1`: all in-sync replicas have it.
    All,
}

impl Acks {
    /// The wire value.
    pub fn value(self) -> i16 {
        match self {
            Acks::None => 0,
            Acks::Leader => 1,
            Acks::All => -1,
        }
    }
}

impl std::str::FromStr for Acks {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "0" => Ok(Acks::None),
            "1" => Ok(Acks::Leader),
            "-1" | "all" => Ok(Acks::All),
            _ => Err(Error::Config(format!(
                "invalid acks {s:?} (0, 1, -1 or all)"
            ))),
        }
    }
}

/// Parses Kafka's `compression.type` names.
pub fn parse_compression(s: &str) -> Result<Compression> {
    match s.to_ascii_lowercase().as_str() {
        "none" => Ok(Compression::None),
        "gzip" => Ok(Compression::Gzip),
        "snappy" => Ok(Compression::Snappy),
        "lz4" => Ok(Compression::Lz4),
        "zstd" => Ok(Compression::Zstd),
        _ => Err(Error::Config(format!(
            "invalid compression {s:?} (none, gzip, snappy, lz4, zstd)"
        ))),
    }
}

/// `max.in.flight.requests.per.connection` at most this with idempotence (Kafka's
/// `MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION_FOR_IDEMPOTENCE`).
pub const MAX_IN_FLIGHT_FOR_IDEMPOTENCE: usize = 5;

/// Producer settings, named after Kafka's.
#[derive(Debug, Clone)]
pub struct ProducerConfig {
    /// `bootstrap.servers`: used by [`Producer::connect`] (a producer made with
    /// [`Producer::new`] uses its [`Client`]).
    pub bootstrap_servers: Vec<String>,
    /// `client.id` (for [`Producer::connect`]); `None`: the client's default.
    pub client_id: Option<String>,
    /// `enable.idempotence`. `None` means "not set": idempotence is on unless `acks` or
    /// `retries` conflict with it, in which case it is silently turned off, as in Kafka.
    /// `Some(true)`: a conflicting setting fails construction with Kafka's message.
    pub enable_idempotence: Option<bool>,
    pub acks: Acks,
    pub compression: Compression,
    /// `batch.size`: bytes per batch before it is closed.
    pub batch_size: usize,
    /// `linger.ms`.
    pub linger: Duration,
    /// `max.in.flight.requests.per.connection`.
    pub max_in_flight: usize,
    /// `retries` (bounded by `delivery_timeout` as well).
    pub retries: u32,
    /// `retry.backoff.ms` (doubled per attempt, capped at 1 s).
    pub retry_backoff: Duration,
    /// `delivery.timeout.ms`: a record fails once this long has passed since `send`.
    pub delivery_timeout: Duration,
    /// `request.timeout.ms`, also sent as the Produce timeout.
    pub request_timeout: Duration,
    /// `max.request.size`: limit on a Produce request's batches.
    pub max_request_size: usize,
    /// `partitioner.class`: unset is the built-in partitioner (see [`crate::partitioner`]).
    pub partitioner: PartitionerKind,
    /// `partitioner.ignore.keys`: keyed records are placed as unkeyed ones.
    pub partitioner_ignore_keys: bool,
    /// `partitioner.adaptive.partitioning.enable`: sticky partitions chosen away from long
    /// queues.
    pub partitioner_adaptive_partitioning: bool,
    /// `partitioner.availability.timeout.ms`: partitions whose leader had data ready but could
    /// not be drained for longer are not chosen; 0 disables it.
    pub partitioner_availability_timeout: Duration,
    /// `partitioner.rack.aware`: sticky partitions led in `client.rack` first.
    pub partitioner_rack_aware: bool,
    /// `client.rack` (the producer uses it for rack-aware partitioning only).
    pub client_rack: String,
    /// `transactional.id`: makes the producer transactional (see [`crate::Producer::init_transactions`]);
    /// requires idempotence.
    pub transactional_id: Option<String>,
    /// `transaction.timeout.ms`: how long the coordinator lets a transaction stay open before
    /// aborting it.
    pub transaction_timeout: Duration,
    /// `max.block.ms`: how long a transactional call (and each of its coordinator requests)
    /// keeps retrying before it fails.
    pub max_block: Duration,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        ProducerConfig {
            bootstrap_servers: vec!["localhost:9092".into()],
            client_id: None,
            enable_idempotence: None,
            acks: Acks::All,
            compression: Compression::None,
            batch_size: 16384,
            linger: Duration::from_millis(5),
            max_in_flight: 5,
            retries: i32::MAX as u32,
            retry_backoff: Duration::from_millis(100),
            delivery_timeout: Duration::from_secs(120),
            request_timeout: Duration::from_secs(30),
            max_request_size: 1024 * 1024,
            partitioner: PartitionerKind::BuiltIn,
            partitioner_ignore_keys: false,
            partitioner_adaptive_partitioning: true,
            partitioner_availability_timeout: Duration::ZERO,
            partitioner_rack_aware: false,
            client_rack: String::new(),
            transactional_id: None,
            transaction_timeout: Duration::from_secs(60),
            max_block: Duration::from_secs(60),
        }
    }
}

pub(crate) fn invalid_value(key: &str, value: &str, why: &str) -> Error {
    Error::ConfigException(format!(
        "Invalid value {value} for configuration {key}: {why}"
    ))
}

pub(crate) fn parse_bool(key: &str, value: &str) -> Result<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(invalid_value(
            key,
            value,
            "Expected value to be either true or false",
        )),
    }
}

pub(crate) fn parse_int(key: &str, value: &str, min: i64) -> Result<i64> {
    let v: i32 = value
        .trim()
        .parse()
        .map_err(|_| invalid_value(key, value, "Not a number of type INT"))?;
    if (v as i64) < min {
        return Err(invalid_value(
            key,
            value,
            &format!("Value must be at least {min}"),
        ));
    }
    Ok(v as i64)
}

pub(crate) fn parse_long(key: &str, value: &str, min: i64) -> Result<i64> {
    let v: i64 = value
        .trim()
        .parse()
        .map_err(|_| invalid_value(key, value, "Not a number of type LONG"))?;
    if v < min {
        return Err(invalid_value(
            key,
            value,
            &format!("Value must be at least {min}"),
        ));
    }
    Ok(v)
}

impl ProducerConfig {
    /// Builds a config from Kafka producer properties, as `new ProducerConfig(props)` does:
    /// `bootstrap.servers`, `client.id`, `acks`, `enable.idempotence`, `retries`,
    /// `max.in.flight.requests.per.connection`, `batch.size`, `linger.ms`, `compression.type`,
    /// `delivery.timeout.ms`, `request.timeout.ms`, `retry.backoff.ms`, `max.request.size`.
    /// Other keys are ignored with a warning (Kafka logs them as unused). Fails with
    /// [`Error::ConfigException`] and Kafka's message on an invalid value or on a setting that
    /// conflicts with an explicitly enabled idempotence (see [`ProducerConfig::idempotence`]).
    pub fn from_properties<K: AsRef<str>, V: AsRef<str>>(props: &[(K, V)]) -> Result<Self> {
        let mut c = ProducerConfig::default();
        let mut delivery_timeout_set = false;
        for (k, v) in props {
            let (k, v) = (k.as_ref(), v.as_ref());
            match k {
                "bootstrap.servers" => {
                    c.bootstrap_servers = v
                        .split(',')
                        .map(|s| s.trim().to_string())
                        .filter(|s| !s.is_empty())
                        .collect();
                }
                "client.id" => c.client_id = Some(v.to_string()),
                "acks" => {
                    c.acks = v
                        .trim()
                        .parse()
                        .map_err(|_| invalid_value(k, v, "String must be one of: all, -1, 0, 1"))?
                }
                "enable.idempotence" => {
                    c.enable_idempotence = Some(match v.trim().to_ascii_lowercase().as_str() {
                        "true" => true,
                        "false" => false,
                        _ => {
                            return Err(invalid_value(
                                k,
                                v,
                                "Expected value to be either true or false",
                            ))
                        }
                    })
                }
                "retries" => c.retries = parse_int(k, v, 0)? as u32,
                "max.in.flight.requests.per.connection" => {
                    c.max_in_flight = parse_int(k, v, 1)? as usize
                }
                "batch.size" => c.batch_size = parse_int(k, v, 0)? as usize,
                "linger.ms" => c.linger = Duration::from_millis(parse_long(k, v, 0)? as u64),
                "compression.type" => {
                    c.compression = parse_compression(v).map_err(|_| {
                        invalid_value(k, v, "String must be one of: none, gzip, snappy, lz4, zstd")
                    })?
                }
                "delivery.timeout.ms" => {
                    c.delivery_timeout = Duration::from_millis(parse_int(k, v, 0)? as u64);
                    delivery_timeout_set = true;
                }
                "request.timeout.ms" => {
                    c.request_timeout = Duration::from_millis(parse_int(k, v, 0)? as u64)
                }
                "retry.backoff.ms" => {
                    c.retry_backoff = Duration::from_millis(parse_long(k, v, 0)? as u64)
                }
                "max.request.size" => c.max_request_size = parse_int(k, v, 0)? as usize,
                "partitioner.class" => {
                    c.partitioner = PartitionerKind::from_class(v).ok_or_else(|| {
                        invalid_value(k, v, &format!("Class {} could not be found.", v.trim()))
                    })?
                }
                "partitioner.ignore.keys" => c.partitioner_ignore_keys = parse_bool(k, v)?,
                "partitioner.adaptive.partitioning.enable" => {
                    c.partitioner_adaptive_partitioning = parse_bool(k, v)?
                }
                "partitioner.rack.aware" => c.partitioner_rack_aware = parse_bool(k, v)?,
                "client.rack" => c.client_rack = v.to_string(),
                "transactional.id" => {
                    c.transactional_id = Some(v.to_string()).filter(|s| !s.is_empty())
                }
                "transaction.timeout.ms" => {
                    c.transaction_timeout = Duration::from_millis(parse_int(k, v, 0)? as u64)
                }
                "max.block.ms" => c.max_block = Duration::from_millis(parse_long(k, v, 0)? as u64),
                "partitioner.availability.timeout.ms" => {
                    c.partitioner_availability_timeout =
                        Duration::from_millis(parse_long(k, v, 0)? as u64)
                }
                _ => tracing::warn!(
                    config = k,
                    "The configuration '{k}' was supplied but isn't a known config."
                ),
            }
        }
        c.idempotence()?;
        // KafkaProducer.configureDeliveryTimeout.
        let min_delivery = c.linger + c.request_timeout;
        if c.delivery_timeout < min_delivery {
            if delivery_timeout_set {
                return Err(Error::ConfigException(
                    "delivery.timeout.ms should be equal to or larger than linger.ms + request.timeout.ms"
                        .into(),
                ));
            }
            c.delivery_timeout = min_delivery;
        }
        Ok(c)
    }

    /// Whether the producer is idempotent, after Kafka's
    /// `ProducerConfig.postProcessAndValidateIdempotenceConfigs` (kafka-clients 4.x):
    /// idempotence is on by default; `retries=0` or `acks` other than `all` turn it off
    /// silently when `enable.idempotence` was not set, and fail when it was set to true;
    /// `max.in.flight.requests.per.connection` above 5 fails whenever idempotence is on
    /// (explicitly or by default), as in Kafka 4.
    pub fn idempotence(&self) -> Result<bool> {
        let user_configured = self.enable_idempotence.is_some();
        let enabled = self.enable_idempotence.unwrap_or(true);
        let mut should_disable = false;
        if enabled {
            if self.retries == 0 {
                if user_configured {
                    return Err(Error::ConfigException(
                        "Must set retries to non-zero when using the idempotent producer.".into(),
                    ));
                }
                tracing::info!("Idempotence will be disabled because retries is set to 0.");
                should_disable = true;
            }
            if self.acks != Acks::All {
                if user_configured {
                    return Err(Error::ConfigException(
                        "Must set acks to all in order to use the idempotent producer. Otherwise we cannot guarantee idempotence."
                            .into(),
                    ));
                }
                tracing::info!(
                    "Idempotence will be disabled because acks is set to {}, not set to 'all'.",
                    self.acks.value()
                );
                should_disable = true;
            }
            if self.max_in_flight > MAX_IN_FLIGHT_FOR_IDEMPOTENCE {
                return Err(Error::ConfigException(format!(
                    "To use the idempotent producer, max.in.flight.requests.per.connection must be set to at most 5. Current value is {}.",
                    self.max_in_flight
                )));
            }
        }
        let idempotent = enabled && !should_disable;
        if !idempotent && self.transactional_id.is_some() {
            return Err(Error::ConfigException(
                "Cannot set a transactional.id without also enabling idempotence.".into(),
            ));
        }
        Ok(idempotent)
    }

    /// The client settings for [`Producer::connect`].
    pub fn client_config(&self) -> ClientConfig {
        let mut c = ClientConfig {
            bootstrap_servers: self.bootstrap_servers.clone(),
            request_timeout: self.request_timeout,
            retry_backoff: self.retry_backoff,
            ..Default::default()
        };
        if let Some(id) = &self.client_id {
            c.client_id = id.clone();
        }
        c
    }

    pub(crate) fn backoff(&self, attempt: u32) -> Duration {
        let base = self.retry_backoff.as_millis() as u64;
        Duration::from_millis(
            base.saturating_mul(1 << attempt.min(10))
                .min(1000.max(base)),
        )
    }
}

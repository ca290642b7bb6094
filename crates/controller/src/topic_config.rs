//! Topic-level configs: names, broker-level synonyms, defaults, types and validation, as in
//! Kafka's `TopicConfig` / `LogConfig` (4.4). Only configs Strom honours are listed, so an unknown or
//! unsupported one is refused instead of silently ignored.

/// Kafka's `ConfigResource.Type`/`ConfigEntry.ConfigType` wire numbering for DescribeConfigs v3+.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigType {
    Boolean = 1,
    String = 2,
    Int = 3,
    Long = 5,
    Double = 6,
    List = 7,
}

#[derive(Debug, Clone, Copy)]
pub enum Validator {
    /// An integer not below the bound.
    AtLeast(i64),
    OneOf(&'static [&'static str]),
    /// A floating point number within the bounds, both included (Kafka's `Range.between`).
    Between(f64, f64),
    /// An integer within the bounds, both included (Kafka's `Range.between` on an INT).
    IntBetween(i64, i64),
    /// `compression.gzip.level`: 1 to 9, or -1 for the deflater's default (Kafka's
    /// `CompressionType.GZIP.levelValidator`).
    GzipLevel,
    Boolean,
}

#[derive(Debug, Clone, Copy)]
pub struct TopicConfigDef {
    pub name: &'static str,
    /// The broker property that supplies the default (`log.retention.ms` for `retention.ms`).
    pub broker_key: &'static str,
    pub default: &'static str,
    pub ty: ConfigType,
    pub validator: Validator,
    pub doc: &'static str,
}

const LONG_MAX: &str = "9223372036854775807";

pub const TOPIC_CONFIGS: &[TopicConfigDef] = &[
    TopicConfigDef {
        name: "cleanup.policy",
        broker_key: "log.cleanup.policy",
        default: "delete",
        ty: ConfigType::List,
        validator: Validator::OneOf(&["compact", "delete"]),
        doc: "The retention policy to use on log segments: delete, compact, or both.",
    },
    TopicConfigDef {
        name: "compression.gzip.level",
        broker_key: "compression.gzip.level",
        default: "-1",
        ty: ConfigType::Int,
        validator: Validator::GzipLevel,
        doc: "The compression level to use if compression.type is set to gzip.",
    },
    TopicConfigDef {
        name: "compression.lz4.level",
        broker_key: "compression.lz4.level",
        default: "9",
        ty: ConfigType::Int,
        validator: Validator::IntBetween(1, 17),
        doc: "The compression level to use if compression.type is set to lz4.",
    },
    TopicConfigDef {
        name: "compression.type",
        broker_key: "compression.type",
        default: "producer",
        ty: ConfigType::String,
        // Kafka's `BrokerCompressionType` names, in its order (its validator is case-sensitive).
        validator: Validator::OneOf(&["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"]),
        doc: "The final compression type for a topic: a codec, uncompressed, or producer (the producer's codec is kept). Batches with another codec are recompressed by the leader.",
    },
    TopicConfigDef {
        name: "compression.zstd.level",
        broker_key: "compression.zstd.level",
        default: "3",
        ty: ConfigType::Int,
        validator: Validator::IntBetween(-131_072, 22),
        doc: "The compression level to use if compression.type is set to zstd.",
    },
    TopicConfigDef {
        name: "delete.retention.ms",
        broker_key: "log.cleaner.delete.retention.ms",
        default: "86400000",
        ty: ConfigType::Long,
        validator: Validator::AtLeast(0),
        doc: "How long tombstones and transaction markers are kept after the segment holding them was cleaned.",
    },
    TopicConfigDef {
        name: "file.delete.delay.ms",
        broker_key: "log.segment.delete.delay.ms",
        default: "60000",
        ty: ConfigType::Long,
        validator: Validator::AtLeast(0),
        doc: "The time to wait before deleting a file from the filesystem.",
    },
    TopicConfigDef {
        name: "flush.messages",
        broker_key: "log.flush.interval.messages",
        default: LONG_MAX,
        ty: ConfigType::Long,
        validator: Validator::AtLeast(1),
        doc: "The number of messages appended to a partition before an fsync.",
    },
    TopicConfigDef {
        name: "flush.ms",
        broker_key: "log.flush.interval.ms",
        default: LONG_MAX,
        ty: ConfigType::Long,
        validator: Validator::AtLeast(0),
        doc: "The maximum time between fsyncs of a partition.",
    },
    TopicConfigDef {
        name: "index.interval.bytes",
        broker_key: "log.index.interval.bytes",
        default: "4096",
        ty: ConfigType::Int,
        validator: Validator::AtLeast(0),
        doc: "How frequently an entry is added to the offset index.",
    },
    TopicConfigDef {
        name: "max.message.bytes",
        broker_key: "message.max.bytes",
        default: "1048588",
        ty: ConfigType::Int,
        validator: Validator::AtLeast(0),
        doc: "The largest record batch size allowed.",
    },
    TopicConfigDef {
        name: "max.decompressed.message.bytes",
        broker_key: "max.decompressed.message.bytes",
        default: "2147483639",
        ty: ConfigType::Int,
        validator: Validator::IntBetween(1, 2_147_483_639),
        doc: "The largest decompressed record a compressed batch may hold; larger records are refused with INVALID_RECORD.",
    },
    TopicConfigDef {
        name: "message.timestamp.after.max.ms",
        broker_key: "log.message.timestamp.after.max.ms",
        default: "3600000",
        ty: ConfigType::Long,
        validator: Validator::AtLeast(0),
        doc: "How far after the broker's clock a CreateTime record's timestamp may be; later records are refused with INVALID_TIMESTAMP.",
    },
    TopicConfigDef {
        name: "message.timestamp.before.max.ms",
        broker_key: "log.message.timestamp.before.max.ms",
        default: LONG_MAX,
        ty: ConfigType::Long,
        validator: Validator::AtLeast(0),
        doc: "How far before the broker's clock a CreateTime record's timestamp may be; earlier records are refused with INVALID_TIMESTAMP.",
    },
    TopicConfigDef {
        name: "message.timestamp.type",
        broker_key: "log.message.timestamp.type",
        default: "CreateTime",
        ty: ConfigType::String,
        validator: Validator::OneOf(&["CreateTime", "LogAppendTime"]),
        doc: "Whether record timestamps are the producer's create time or the log append time.",
    },
    TopicConfigDef {
        name: "max.compaction.lag.ms",
        broker_key: "log.cleaner.max.compaction.lag.ms",
        default: LONG_MAX,
        ty: ConfigType::Long,
        validator: Validator::AtLeast(1),
        doc: "The maximum time a record stays ineligible for compaction.",
    },
    TopicConfigDef {
        name: "min.cleanable.dirty.ratio",
        broker_key: "log.cleaner.min.cleanable.ratio",
        default: "0.5",
        ty: ConfigType::Double,
        validator: Validator::Between(0.0, 1.0),
        doc: "The dirty share of a log at which the cleaner compacts it.",
    },
    TopicConfigDef {
        name: "min.compaction.lag.ms",
        broker_key: "log.cleaner.min.compaction.lag.ms",
        default: "0",
        ty: ConfigType::Long,
        validator: Validator::AtLeast(0),
        doc: "The minimum time a record stays uncompacted in the log.",
    },
    TopicConfigDef {
        name: "min.insync.replicas",
        broker_key: "min.insync.replicas",
        default: "1",
        ty: ConfigType::Int,
        validator: Validator::AtLeast(1),
        doc: "The minimum number of in-sync replicas for a write with acks=all to succeed.",
    },
    TopicConfigDef {
        name: "retention.bytes",
        broker_key: "log.retention.bytes",
        default: "-1",
        ty: ConfigType::Long,
        validator: Validator::AtLeast(-1),
        doc: "The maximum size a partition can grow to before old segments are deleted.",
    },
    TopicConfigDef {
        name: "retention.ms",
        broker_key: "log.retention.ms",
        default: "604800000",
        ty: ConfigType::Long,
        validator: Validator::AtLeast(-1),
        doc: "The maximum time a segment is retained before it is deleted.",
    },
    TopicConfigDef {
        name: "segment.bytes",
        broker_key: "log.segment.bytes",
        default: "1073741824",
        ty: ConfigType::Int,
        validator: Validator::AtLeast(14),
        doc: "The segment file size of the log.",
    },
    TopicConfigDef {
        name: "segment.index.bytes",
        broker_key: "log.index.size.max.bytes",
        default: "10485760",
        ty: ConfigType::Int,
        validator: Validator::AtLeast(8),
        doc: "The maximum size of an offset index file.",
    },
    TopicConfigDef {
        name: "segment.ms",
        broker_key: "log.roll.ms",
        default: "604800000",
        ty: ConfigType::Long,
        validator: Validator::AtLeast(1),
        doc: "The time after which the active segment is rolled even if not full.",
    },
    TopicConfigDef {
        name: "unclean.leader.election.enable",
        broker_key: "unclean.leader.election.enable",
        default: "false",
        ty: ConfigType::Boolean,
        validator: Validator::Boolean,
        doc: "Whether replicas not in the ISR may be elected leader as a last resort.",
    },
];

pub fn find(name: &str) -> Option<&'static TopicConfigDef> {
    TOPIC_CONFIGS.iter().find(|d| d.name == name)
}

/// Validates a topic config value as Kafka's `LogConfig.validate` would, with its messages.
pub fn validate(name: &str, value: &str) -> Result<(), String> {
    let def = find(name).ok_or_else(|| format!("Unknown topic config name: {name}"))?;
    let invalid =
        |shown: &str, why: &str| format!("Invalid value {shown} for configuration {name}: {why}");
    match def.validator {
        Validator::AtLeast(min) => {
            let type_name = if def.ty == ConfigType::Int {
                "INT"
            } else {
                "LONG"
            };
            let not_a_number = || invalid(value, &format!("Not a number of type {type_name}"));
            let v: i64 = value.trim().parse().map_err(|_| not_a_number())?;
            if def.ty == ConfigType::Int && i32::try_from(v).is_err() {
                return Err(not_a_number());
            }
            if v < min {
                return Err(invalid(
                    &v.to_string(),
                    &format!("Value must be at least {min}"),
                ));
            }
        }
        Validator::OneOf(allowed) => {
            // Kafka's LIST: an empty value is an empty list (for `cleanup.policy`, no cleanup
            // at all); items are trimmed; repeats are allowed.
            let items: Vec<&str> = if def.ty == ConfigType::List {
                list_items(value)
            } else {
                vec![value.trim()]
            };
            if let Some(bad) = items.iter().find(|v| !allowed.contains(v)) {
                return Err(invalid(
                    bad,
                    &format!("String must be one of: {}", allowed.join(", ")),
                ));
            }
        }
        Validator::Between(lo, hi) => {
            let v: f64 = value
                .trim()
                .parse()
                .map_err(|_| invalid(value, "Not a number of type DOUBLE"))?;
            // Kafka's `Range` shows the value as Java prints the parsed double ("2" is "2.0").
            if v < lo {
                return Err(invalid(
                    &java_double(v),
                    &format!("Value must be at least {lo}"),
                ));
            }
            if v > hi {
                return Err(invalid(
                    &java_double(v),
                    &format!("Value must be no more than {hi}"),
                ));
            }
        }
        Validator::IntBetween(lo, hi) => {
            let not_a_number = || invalid(value, "Not a number of type INT");
            let v: i64 = value.trim().parse().map_err(|_| not_a_number())?;
            if i32::try_from(v).is_err() {
                return Err(not_a_number());
            }
            if v < lo {
                return Err(invalid(
                    &v.to_string(),
                    &format!("Value must be at least {lo}"),
                ));
            }
            if v > hi {
                return Err(invalid(
                    &v.to_string(),
                    &format!("Value must be no more than {hi}"),
                ));
            }
        }
        Validator::GzipLevel => {
            let v: i32 = value
                .trim()
                .parse()
                .map_err(|_| invalid(value, "Not a number of type INT"))?;
            if !(v == -1 || (1..=9).contains(&v)) {
                return Err(invalid(
                    &v.to_string(),
                    "Value must be between 1 and 9 or equal to -1",
                ));
            }
        }
        Validator::Boolean => {
            if !value.trim().eq_ignore_ascii_case("true")
                && !value.trim().eq_ignore_ascii_case("false")
            {
                return Err(invalid(value, "Expected value to be either true or false"));
            }
        }
    }
    Ok(())
}

/// The items of a LIST value as Kafka's `ConfigDef.parseType` splits it: trimmed, and none at
/// all for a blank value.
pub fn list_items(value: &str) -> Vec<&str> {
    if value.trim().is_empty() {
        Vec::new()
    } else {
        value.split(',').map(str::trim).collect()
    }
}

/// Kafka's `LogConfig.validateValues`: the checks across keys, over a topic's whole effective
/// config (`effective` answers a key with the topic's value or else the broker's default).
/// Each value was validated alone before.
pub fn validate_values(effective: &dyn Fn(&str) -> String) -> Result<(), String> {
    let long = |k: &str| effective(k).trim().parse::<i64>().ok();
    if let (Some(min), Some(max)) = (long("min.compaction.lag.ms"), long("max.compaction.lag.ms")) {
        if min > max {
            return Err(format!(
                "conflict topic config setting min.compaction.lag.ms ({min}) > max.compaction.lag.ms ({max})"
            ));
        }
    }
    Ok(())
}

/// A value as DescribeConfigs shows it: Kafka answers the parsed value written back
/// (`ConfigDef.convertToString`), so a list loses the blanks around its items and a double is
/// printed as Java prints it.
pub fn describe_value(name: &str, value: &str) -> String {
    match find(name).map(|d| d.ty) {
        Some(ConfigType::List) => list_items(value).join(","),
        Some(ConfigType::Double) => match value.trim().parse::<f64>() {
            Ok(v) => java_double(v),
            Err(_) => value.to_string(),
        },
        _ => value.to_string(),
    }
}

/// Java's `Double.toString`: plain decimals in [10^-3, 10^7) with at least one fractional
/// digit, scientific notation (`1.0E-5`) outside.
pub fn java_double(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    let abs = v.abs();
    if abs == 0.0 || (1e-3..1e7).contains(&abs) {
        let s = format!("{v}");
        if s.contains('.') {
            s
        } else {
            format!("{s}.0")
        }
    } else {
        let s = format!("{v:e}");
        let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
        let mantissa = if mantissa.contains('.') {
            mantissa.to_string()
        } else {
            format!("{mantissa}.0")
        };
        format!("{mantissa}E{exp}")
    }
}

/// [`validate`] for a config of `topic` (every topic takes the same values, as in Kafka).
pub fn validate_for_topic(_topic: &str, name: &str, value: &str) -> Result<(), String> {
    validate(name, value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_topics_may_be_compacted() {
        assert!(validate_for_topic("__consumer_offsets", "cleanup.policy", "compact").is_ok());
        assert!(validate_for_topic("__transaction_state", "cleanup.policy", "compact").is_ok());
        assert!(validate_for_topic("orders", "cleanup.policy", "compact,delete").is_ok());
        assert!(validate_for_topic("orders", "cleanup.policy", "compact,other").is_err());
        assert!(validate_for_topic("__consumer_offsets", "cleanup.policy", "delete").is_ok());
        assert!(validate_for_topic("__consumer_offsets", "segment.bytes", "x").is_err());
        assert!(
            validate_for_topic("__transaction_state", "compression.type", "uncompressed").is_ok()
        );
        assert!(validate_for_topic("orders", "compression.type", "uncompressed").is_ok());
    }

    #[test]
    fn cross_checks_compaction_lags() {
        let with = |min: &'static str, max: &'static str| {
            move |k: &str| match k {
                "min.compaction.lag.ms" => min.to_string(),
                "max.compaction.lag.ms" => max.to_string(),
                _ => find(k).unwrap().default.to_string(),
            }
        };
        assert_eq!(
            validate_values(&with("10", "5")).unwrap_err(),
            "conflict topic config setting min.compaction.lag.ms (10) > max.compaction.lag.ms (5)"
        );
        assert!(validate_values(&with("5", "5")).is_ok());
        assert!(validate_values(&with("5", LONG_MAX)).is_ok());
    }

    #[test]
    fn describes_values_as_kafka() {
        assert_eq!(
            describe_value("cleanup.policy", "compact, delete"),
            "compact,delete"
        );
        assert_eq!(describe_value("cleanup.policy", ""), "");
        assert_eq!(describe_value("min.cleanable.dirty.ratio", "1"), "1.0");
        assert_eq!(describe_value("min.cleanable.dirty.ratio", "0.01"), "0.01");
        assert_eq!(
            describe_value("min.cleanable.dirty.ratio", "0.00001"),
            "1.0E-5"
        );
        assert_eq!(describe_value("retention.ms", "100"), "100");
        assert_eq!(java_double(0.0), "0.0");
        assert_eq!(java_double(12345678.0), "1.2345678E7");
    }

    #[test]
    fn validates() {
        assert!(validate("retention.ms", "1000").is_ok());
        assert!(validate("retention.ms", "-1").is_ok());
        assert!(validate("retention.ms", "-2").is_err());
        assert!(validate("retention.ms", "abc").is_err());
        assert!(validate("segment.bytes", "99999999999").is_err());
        assert!(validate("message.timestamp.type", "LogAppendTime").is_ok());
        assert!(validate("message.timestamp.type", "Other").is_err());
        assert!(validate("cleanup.policy", "compact").is_ok());
        assert!(validate("min.cleanable.dirty.ratio", "0.01").is_ok());
        assert!(validate("min.cleanable.dirty.ratio", "1.5").is_err());
        assert!(validate("min.cleanable.dirty.ratio", "x").is_err());
        assert!(validate("unclean.leader.election.enable", "TRUE").is_ok());
        // Kafka 4.4's answers, word for word.
        assert_eq!(
            validate("min.cleanable.dirty.ratio", "2").unwrap_err(),
            "Invalid value 2.0 for configuration min.cleanable.dirty.ratio: Value must be no more than 1"
        );
        assert_eq!(
            validate("min.cleanable.dirty.ratio", "-0.1").unwrap_err(),
            "Invalid value -0.1 for configuration min.cleanable.dirty.ratio: Value must be at least 0"
        );
        assert_eq!(
            validate("min.cleanable.dirty.ratio", "abc").unwrap_err(),
            "Invalid value abc for configuration min.cleanable.dirty.ratio: Not a number of type DOUBLE"
        );
        assert_eq!(
            validate("max.compaction.lag.ms", "0").unwrap_err(),
            "Invalid value 0 for configuration max.compaction.lag.ms: Value must be at least 1"
        );
        assert_eq!(
            validate("cleanup.policy", "compact,other").unwrap_err(),
            "Invalid value other for configuration cleanup.policy: String must be one of: compact, delete"
        );
        assert!(validate("cleanup.policy", "").is_ok());
        assert!(validate("cleanup.policy", "compact, delete").is_ok());
        assert!(validate("cleanup.policy", "compact,compact").is_ok());
        assert!(validate("cleanup.policy", "Compact").is_err());
        assert_eq!(
            validate("compression.type", "GZIP").unwrap_err(),
            "Invalid value GZIP for configuration compression.type: String must be one of: uncompressed, zstd, lz4, snappy, gzip, producer"
        );
        assert!(validate("compression.type", "zstd").is_ok());
        assert_eq!(
            validate("compression.gzip.level", "0").unwrap_err(),
            "Invalid value 0 for configuration compression.gzip.level: Value must be between 1 and 9 or equal to -1"
        );
        assert!(validate("compression.gzip.level", "-1").is_ok());
        assert_eq!(
            validate("compression.lz4.level", "18").unwrap_err(),
            "Invalid value 18 for configuration compression.lz4.level: Value must be no more than 17"
        );
        assert_eq!(
            validate("compression.zstd.level", "-131073").unwrap_err(),
            "Invalid value -131073 for configuration compression.zstd.level: Value must be at least -131072"
        );
        assert_eq!(
            validate("message.timestamp.after.max.ms", "-1").unwrap_err(),
            "Invalid value -1 for configuration message.timestamp.after.max.ms: Value must be at least 0"
        );
        assert_eq!(
            validate("max.decompressed.message.bytes", "0").unwrap_err(),
            "Invalid value 0 for configuration max.decompressed.message.bytes: Value must be at least 1"
        );
        assert_eq!(
            validate("no.such", "1").unwrap_err(),
            "Unknown topic config name: no.such"
        );
    }
}

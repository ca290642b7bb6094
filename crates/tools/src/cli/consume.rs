//! `strom consume`: like `kafka-console-consumer.sh`. Prints record values one per line, and
//! `Processed a total of N messages` on stderr at the end. With `--group G` it joins the
//! consumer group (subscribing to the topic, committing consumed offsets, leaving on exit)
//! instead of reading every partition itself.

use std::io::Write;
use std::time::{Duration, Instant};

use clap::Args;
use strom_client::{Consumer, ConsumerConfig, ConsumerRecord, GroupConfig, OffsetReset};

use super::{connect, parse_kv, unescape, DEFAULT_BOOTSTRAP};

/// Arguments of `strom consume`.
#[derive(Debug, Args)]
#[command(about = "Print records of a topic")]
pub struct ConsumeArgs {
    /// The topic to consume.
    #[arg(value_name = "TOPIC", required_unless_present = "topic_flag")]
    pub topic: Option<String>,
    /// The topic (alternative to the positional argument).
    #[arg(long = "topic", id = "topic_flag", value_name = "TOPIC")]
    pub topic_flag: Option<String>,
    /// The broker(s) to connect to.
    #[arg(long, default_value = DEFAULT_BOOTSTRAP, value_name = "HOST:PORT")]
    pub bootstrap_server: String,
    /// Start at the earliest offset instead of the latest.
    #[arg(long)]
    pub from_beginning: bool,
    /// Exit after this many records.
    #[arg(long)]
    pub max_messages: Option<u64>,
    /// Consume only this partition.
    #[arg(long)]
    pub partition: Option<i32>,
    /// Start offset: a number, `earliest` or `latest`.
    #[arg(long)]
    pub offset: Option<String>,
    /// Exit when no record arrives for this long.
    #[arg(long)]
    pub timeout_ms: Option<u64>,
    /// Join this consumer group (subscribe to the topic; the group assigns partitions and
    /// keeps the committed offsets).
    #[arg(long, value_name = "GROUP")]
    pub group: Option<String>,
    /// Consumer settings under Kafka's names: group.protocol, group.instance.id,
    /// partition.assignment.strategy, group.remote.assignor, enable.auto.commit,
    /// auto.commit.interval.ms, session.timeout.ms, heartbeat.interval.ms,
    /// max.poll.interval.ms, auto.offset.reset, client.rack.
    #[arg(long = "consumer-property", value_name = "KEY=VALUE", value_parser = parse_kv)]
    pub consumer_property: Vec<(String, String)>,
    /// Formatter properties: print.key, print.value, print.timestamp, print.partition,
    /// print.offset, print.headers (true/false), key.separator, line.separator.
    #[arg(long = "property", value_name = "KEY=VALUE", value_parser = parse_kv)]
    pub property: Vec<(String, String)>,
}

#[derive(Debug, Clone)]
struct Formatter {
    print_key: bool,
    print_value: bool,
    print_timestamp: bool,
    print_partition: bool,
    print_offset: bool,
    print_headers: bool,
    key_separator: String,
    line_separator: String,
}

impl Formatter {
    fn new(props: &[(String, String)]) -> Self {
        let mut f = Formatter {
            print_key: false,
            print_value: true,
            print_timestamp: false,
            print_partition: false,
            print_offset: false,
            print_headers: false,
            key_separator: "\t".into(),
            line_separator: "\n".into(),
        };
        for (k, v) in props {
            let b = v.eq_ignore_ascii_case("true");
            match k.as_str() {
                "print.key" => f.print_key = b,
                "print.value" => f.print_value = b,
                "print.timestamp" => f.print_timestamp = b,
                "print.partition" => f.print_partition = b,
                "print.offset" => f.print_offset = b,
                "print.headers" => f.print_headers = b,
                "key.separator" => f.key_separator = unescape(v),
                "line.separator" => f.line_separator = unescape(v),
                _ => {}
            }
        }
        f
    }

    /// Kafka's DefaultMessageFormatter layout.
    fn write(&self, out: &mut impl Write, r: &ConsumerRecord) -> std::io::Result<()> {
        let sep = self.key_separator.as_bytes();
        if self.print_timestamp {
            write!(out, "CreateTime:{}", r.timestamp)?;
            out.write_all(sep)?;
        }
        if self.print_partition {
            write!(out, "Partition:{}", r.partition)?;
            out.write_all(sep)?;
        }
        if self.print_offset {
            write!(out, "Offset:{}", r.offset)?;
            out.write_all(sep)?;
        }
        if self.print_headers {
            if r.headers.is_empty() {
                out.write_all(b"NO_HEADERS")?;
            } else {
                let hs: Vec<String> = r
                    .headers
                    .iter()
                    .map(|(k, v)| {
                        format!(
                            "{k}:{}",
                            v.as_ref()
                                .map_or("null".into(), |v| String::from_utf8_lossy(v).into_owned())
                        )
                    })
                    .collect();
                out.write_all(hs.join(",").as_bytes())?;
            }
            out.write_all(sep)?;
        }
        if self.print_key {
            out.write_all(r.key.as_deref().unwrap_or(b"null"))?;
            out.write_all(sep)?;
        }
        if self.print_value {
            out.write_all(r.value.as_deref().unwrap_or(b"null"))?;
        }
        out.write_all(self.line_separator.as_bytes())
    }
}

/// Runs `strom consume`.
pub async fn run(args: ConsumeArgs) -> crate::Result<()> {
    let topic = args
        .topic
        .clone()
        .or(args.topic_flag.clone())
        .ok_or_else(|| crate::ToolError::msg("a topic is required"))?;
    let formatter = Formatter::new(&args.property);
    let reset = if args.from_beginning {
        OffsetReset::Earliest
    } else {
        OffsetReset::Latest
    };
    let mut config = ConsumerConfig {
        auto_offset_reset: reset,
        ..Default::default()
    };
    config.group.group_id = args.group.clone();
    apply_consumer_properties(&mut config, &args.consumer_property)?;
    if config.group.group_id.is_some() && (args.partition.is_some() || args.offset.is_some()) {
        return Err(crate::ToolError::msg("--group cannot be combined with --partition or --offset: the group assigns partitions and keeps their offsets"));
    }
    let client = connect(&args.bootstrap_server).await?;
    let mut consumer = Consumer::new(client, config);
    let mut assigned = Vec::new();
    if consumer_group(&consumer).is_some() {
        consumer.subscribe(&[topic.as_str()], None)?;
    } else {
        let parts = args.partition.map(|p| vec![p]);
        assigned = consumer.assign(&topic, parts.as_deref()).await?;
    }
    if let Some(o) = &args.offset {
        match o.as_str() {
            "earliest" => consumer.seek_to_beginning(&topic, None),
            "latest" => consumer.seek_to_end(&topic, None),
            n => {
                let off: i64 = n.parse().map_err(|_| {
                    crate::ToolError::msg(format!(
                        "invalid --offset {n:?}: a number, earliest or latest"
                    ))
                })?;
                if off < 0 {
                    return Err(crate::ToolError::msg(format!("invalid --offset {off}")));
                }
                for p in &assigned {
                    consumer.seek(&topic, *p, off);
                }
            }
        }
    }

    let count = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let result = tokio::select! {
        r = consume_loop(&mut consumer, &args, &formatter, count.clone()) => r,
        _ = tokio::signal::ctrl_c() => Ok(()),
    };
    let n = count.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!("Processed a total of {n} messages");
    // Commits (with auto-commit) and leaves the group.
    let closed = consumer.close().await;
    result?;
    closed.map_err(Into::into)
}

fn consumer_group(c: &Consumer) -> Option<&str> {
    c.config().group.group_id.as_deref()
}

fn parse_ms(key: &str, v: &str) -> crate::Result<Duration> {
    v.parse::<u64>()
        .map(Duration::from_millis)
        .map_err(|_| crate::ToolError::msg(format!("invalid {key}={v:?}: expected milliseconds")))
}

fn parse_bool(key: &str, v: &str) -> crate::Result<bool> {
    match v.to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(crate::ToolError::msg(format!(
            "invalid {key}={v:?}: expected true or false"
        ))),
    }
}

/// `--consumer-property` under Kafka's names; unknown names are an error rather than ignored.
fn apply_consumer_properties(
    config: &mut ConsumerConfig,
    props: &[(String, String)],
) -> crate::Result<()> {
    let g: &mut GroupConfig = &mut config.group;
    for (k, v) in props {
        match k.as_str() {
            "group.id" => g.group_id = Some(v.clone()),
            "group.protocol" => g.group_protocol = v.parse()?,
            "group.instance.id" => g.group_instance_id = Some(v.clone()),
            "partition.assignment.strategy" => {
                g.partition_assignment_strategy = v
                    .split(',')
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
                    .collect()
            }
            "group.remote.assignor" => g.group_remote_assignor = Some(v.clone()),
            "enable.auto.commit" => g.enable_auto_commit = parse_bool(k, v)?,
            "auto.commit.interval.ms" => g.auto_commit_interval = parse_ms(k, v)?,
            "session.timeout.ms" => g.session_timeout = parse_ms(k, v)?,
            "heartbeat.interval.ms" => g.heartbeat_interval = parse_ms(k, v)?,
            "max.poll.interval.ms" => g.max_poll_interval = parse_ms(k, v)?,
            "client.rack" => g.client_rack = Some(v.clone()),
            "auto.offset.reset" => {
                config.auto_offset_reset = match v.to_ascii_lowercase().as_str() {
                    "earliest" => OffsetReset::Earliest,
                    "latest" => OffsetReset::Latest,
                    "none" => OffsetReset::None,
                    _ => {
                        return Err(crate::ToolError::msg(format!(
                            "invalid auto.offset.reset={v:?}: expected earliest, latest or none"
                        )))
                    }
                }
            }
            _ => {
                return Err(crate::ToolError::msg(format!(
                    "unknown --consumer-property {k:?}"
                )))
            }
        }
    }
    Ok(())
}

async fn consume_loop(
    consumer: &mut Consumer,
    args: &ConsumeArgs,
    formatter: &Formatter,
    count: std::sync::Arc<std::sync::atomic::AtomicU64>,
) -> crate::Result<()> {
    let idle_limit = args.timeout_ms.map(Duration::from_millis);
    let mut last_record = Instant::now();
    let mut n = 0u64;
    loop {
        if args.max_messages.is_some_and(|m| n >= m) {
            return Ok(());
        }
        let wait = match idle_limit {
            Some(l) => {
                let left = l.saturating_sub(last_record.elapsed());
                if left.is_zero() {
                    return Ok(());
                }
                left.min(Duration::from_millis(1000))
            }
            None => Duration::from_millis(1000),
        };
        let records = consumer.poll(wait).await?;
        if records.is_empty() {
            continue;
        }
        last_record = Instant::now();
        let stdout = std::io::stdout();
        let mut out = std::io::BufWriter::new(stdout.lock());
        for r in &records {
            if args.max_messages.is_some_and(|m| n >= m) {
                break;
            }
            if let Err(e) = formatter.write(&mut out, r) {
                if e.kind() == std::io::ErrorKind::BrokenPipe {
                    return Ok(());
                }
                return Err(e.into());
            }
            n += 1;
            count.store(n, std::sync::atomic::Ordering::Relaxed);
        }
        if let Err(e) = out.flush() {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                return Ok(());
            }
            return Err(e.into());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn consumer_properties() {
        let mut c = ConsumerConfig::default();
        let props = |kv: &[(&str, &str)]| -> Vec<(String, String)> {
            kv.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        apply_consumer_properties(
            &mut c,
            &props(&[
                ("group.protocol", "CONSUMER"),
                ("partition.assignment.strategy", "roundrobin, range"),
                ("session.timeout.ms", "6000"),
                ("auto.offset.reset", "none"),
                ("enable.auto.commit", "false"),
            ]),
        )
        .unwrap();
        assert_eq!(
            c.group.group_protocol,
            strom_client::GroupProtocol::Consumer
        );
        assert_eq!(
            c.group.partition_assignment_strategy,
            vec!["roundrobin", "range"]
        );
        assert_eq!(c.group.session_timeout, Duration::from_secs(6));
        assert_eq!(c.auto_offset_reset, OffsetReset::None);
        assert!(!c.group.enable_auto_commit);
        for bad in [
            ("session.timeout.ms", "x"),
            ("group.protocol", "eager"),
            ("nope", "1"),
        ] {
            assert!(
                apply_consumer_properties(&mut c, &props(&[bad])).is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn formats_like_kafka() {
        let r = ConsumerRecord {
            topic: "t".into(),
            partition: 2,
            offset: 7,
            timestamp: 1000,
            key: Some(Bytes::from_static(b"k")),
            value: Some(Bytes::from_static(b"v")),
            headers: vec![],
        };
        let mut out = Vec::new();
        Formatter::new(&[]).write(&mut out, &r).unwrap();
        assert_eq!(out, b"v\n");
        let f = Formatter::new(&[
            ("print.key".into(), "true".into()),
            ("key.separator".into(), ":".into()),
            ("print.offset".into(), "true".into()),
        ]);
        let mut out = Vec::new();
        f.write(&mut out, &r).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "Offset:7:k:v\n");
        let mut out = Vec::new();
        let null = ConsumerRecord { key: None, ..r };
        Formatter::new(&[("print.key".into(), "true".into())])
            .write(&mut out, &null)
            .unwrap();
        assert_eq!(out, b"null\tv\n");
    }
}

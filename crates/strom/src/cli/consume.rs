//! `strom consume`: like `kafka-console-consumer.sh` (without consumer groups). Prints record
//! values one per line, and `Processed a total of N messages` on stderr at the end.

use std::io::Write;
use std::time::{Duration, Instant};

use clap::Args;
use strom_client::{Consumer, ConsumerConfig, ConsumerRecord, OffsetReset};

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
pub async fn run(args: ConsumeArgs) -> anyhow::Result<()> {
    let topic = args
        .topic
        .clone()
        .or(args.topic_flag.clone())
        .ok_or_else(|| anyhow::anyhow!("a topic is required"))?;
    let formatter = Formatter::new(&args.property);
    let reset = if args.from_beginning {
        OffsetReset::Earliest
    } else {
        OffsetReset::Latest
    };
    let config = ConsumerConfig {
        auto_offset_reset: reset,
        ..Default::default()
    };
    let client = connect(&args.bootstrap_server).await?;
    let mut consumer = Consumer::new(client, config);
    let parts = args.partition.map(|p| vec![p]);
    let assigned = consumer.assign(&topic, parts.as_deref()).await?;
    if let Some(o) = &args.offset {
        match o.as_str() {
            "earliest" => consumer.seek_to_beginning(&topic, None),
            "latest" => consumer.seek_to_end(&topic, None),
            n => {
                let off: i64 = n.parse().map_err(|_| {
                    anyhow::anyhow!("invalid --offset {n:?}: a number, earliest or latest")
                })?;
                if off < 0 {
                    anyhow::bail!("invalid --offset {off}");
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
    result
}

async fn consume_loop(
    consumer: &mut Consumer,
    args: &ConsumeArgs,
    formatter: &Formatter,
    count: std::sync::Arc<std::sync::atomic::AtomicU64>,
) -> anyhow::Result<()> {
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

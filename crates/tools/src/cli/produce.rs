//! `strom produce`: like `kafka-console-producer.sh`. Reads lines from stdin and sends each as a
//! record; with `--key-separator` the text before the first separator is the key.

use std::collections::VecDeque;

use bytes::Bytes;
use clap::Args;
use strom_client::producer::parse_compression;
use strom_client::{Acks, DeliveryFuture, Producer, ProducerConfig};
use tokio::io::{AsyncBufReadExt, BufReader};

use super::{connect, parse_kv, unescape, DEFAULT_BOOTSTRAP};

/// Arguments of `strom produce`.
#[derive(Debug, Args)]
#[command(about = "Send lines from stdin as records")]
pub struct ProduceArgs {
    /// The topic to produce to.
    #[arg(value_name = "TOPIC", required_unless_present = "topic_flag")]
    pub topic: Option<String>,
    /// The topic (alternative to the positional argument).
    #[arg(long = "topic", id = "topic_flag", value_name = "TOPIC")]
    pub topic_flag: Option<String>,
    /// The broker(s) to connect to.
    #[arg(long, default_value = DEFAULT_BOOTSTRAP, value_name = "HOST:PORT")]
    pub bootstrap_server: String,
    /// Split each line at the first SEP into key and value.
    #[arg(long, value_name = "SEP")]
    pub key_separator: Option<String>,
    /// acks: 0, 1, -1 or all.
    #[arg(long, default_value = "-1", allow_hyphen_values = true)]
    pub acks: String,
    /// none, gzip, snappy, lz4 or zstd.
    #[arg(long, alias = "compression-codec", default_value = "none")]
    pub compression: String,
    /// Send every record to this partition.
    #[arg(long)]
    pub partition: Option<i32>,
    /// batch.size in bytes.
    #[arg(long, default_value_t = 16384)]
    pub batch_size: usize,
    /// linger.ms.
    #[arg(long, default_value_t = 5)]
    pub linger_ms: u64,
    /// Reader properties as in kafka-console-producer: parse.key=true, key.separator=SEP.
    #[arg(long = "property", value_name = "KEY=VALUE", value_parser = parse_kv)]
    pub property: Vec<(String, String)>,
}

/// Records awaited at once before reading more input.
const WINDOW: usize = 10_000;

/// Runs `strom produce`. Exits with status 1 if any record could not be delivered.
pub async fn run(args: ProduceArgs) -> crate::Result<()> {
    let topic = args
        .topic
        .clone()
        .or(args.topic_flag.clone())
        .ok_or_else(|| crate::ToolError::msg("a topic is required"))?;
    let mut separator = args.key_separator.as_deref().map(unescape);
    let mut parse_key = separator.is_some();
    for (k, v) in &args.property {
        match k.as_str() {
            "parse.key" => parse_key = v == "true",
            "key.separator" => separator = Some(unescape(v)),
            _ => {}
        }
    }
    let separator = if parse_key {
        Some(separator.unwrap_or_else(|| "\t".into()))
    } else {
        None
    };
    let config = ProducerConfig {
        acks: args.acks.parse::<Acks>()?,
        compression: parse_compression(&args.compression)?,
        batch_size: args.batch_size,
        linger: std::time::Duration::from_millis(args.linger_ms),
        ..Default::default()
    };
    let client = connect(&args.bootstrap_server).await?;
    let producer = Producer::try_new(client, config)?;
    let mut pending: VecDeque<(DeliveryFuture, Option<Bytes>, usize)> = VecDeque::new();
    let mut failures = 0usize;
    let mut stdin = BufReader::new(tokio::io::stdin());
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = stdin.read_until(b'\n', &mut line).await?;
        if n == 0 {
            break;
        }
        if line.last() == Some(&b'\n') {
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
        }
        let (key, value) = match &separator {
            Some(sep) => match find(&line, sep.as_bytes()) {
                Some(i) => (
                    Some(Bytes::copy_from_slice(&line[..i])),
                    Bytes::copy_from_slice(&line[i + sep.len()..]),
                ),
                None => {
                    eprintln!(
                        "No key separator found on line: {}",
                        String::from_utf8_lossy(&line)
                    );
                    failures += 1;
                    continue;
                }
            },
            None => (None, Bytes::copy_from_slice(&line)),
        };
        let len = value.len();
        let f = producer.send(&topic, args.partition, key.clone(), Some(value), vec![]);
        pending.push_back((f, key, len));
        while pending.len() >= WINDOW {
            let (f, key, len) = pending.pop_front().unwrap();
            if let Err(e) = f.await {
                report(&topic, &key, len, &e);
                failures += 1;
            }
        }
    }
    producer.flush().await?;
    for (f, key, len) in pending {
        if let Err(e) = f.await {
            report(&topic, &key, len, &e);
            failures += 1;
        }
    }
    if failures > 0 {
        eprintln!("{failures} record(s) could not be delivered");
        std::process::exit(1);
    }
    Ok(())
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return None;
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Kafka's ErrorLoggingCallback message.
fn report(topic: &str, key: &Option<Bytes>, len: usize, e: &strom_client::Error) {
    let key = key.as_ref().map_or("null".to_string(), |k| {
        String::from_utf8_lossy(k).into_owned()
    });
    eprintln!(
        "Error when sending message to topic {topic} with key: {key}, value: {len} bytes with error: {e}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_separator() {
        assert_eq!(find(b"k1:v:x", b":"), Some(2));
        assert_eq!(find(b"abc", b"::"), None);
        assert_eq!(find(b"a::b", b"::"), Some(1));
    }
}

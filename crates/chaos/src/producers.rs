//! The leader-kill workload as each client runs it: Strom's Rust producer and librdkafka
//! in-process, the Java producer (kafka-clients) as a child process. All three send "seq-N"
//! asynchronously, pause 1 ms every 50 records (as the seed did), call the kill hook just before
//! record `kill_at`, and wait for every delivery callback.

use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use bytes::Bytes;
use futures_util::stream::{FuturesUnordered, StreamExt};
use strom_client::{Producer, ProducerConfig};

/// Which producer implementation runs the workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientKind {
    Rust,
    Librdkafka,
    Java,
}

impl ClientKind {
    pub fn parse(s: &str) -> anyhow::Result<ClientKind> {
        match s {
            "rust" => Ok(ClientKind::Rust),
            "librdkafka" => {
                if cfg!(feature = "librdkafka") {
                    Ok(ClientKind::Librdkafka)
                } else {
                    bail!(
                        "--client librdkafka: this strom was built without librdkafka; rebuild \
                         with `cargo build -p strom-chaos --features librdkafka`"
                    )
                }
            }
            "java" => Ok(ClientKind::Java),
            other => bail!("--client must be rust, librdkafka or java, not '{other}'"),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ClientKind::Rust => "rust",
            ClientKind::Librdkafka => "librdkafka",
            ClientKind::Java => "java",
        }
    }
}

/// The producer settings of one run.
pub struct Workload<'a> {
    pub bootstrap: &'a str,
    pub topic: &'a str,
    pub records: u64,
    pub kill_at: u64,
    pub acks: &'a str,
    pub idempotence: bool,
    pub max_in_flight: usize,
    pub batch_size: usize,
}

/// What the delivery callbacks said.
#[derive(Debug, Default)]
pub struct Sent {
    pub ok: u64,
    pub failed: u64,
    pub acked: HashSet<u64>,
    pub first_error: Option<String>,
}

impl Sent {
    fn record(&mut self, seq: u64, result: Result<(), String>) {
        match result {
            Ok(()) => {
                self.ok += 1;
                self.acked.insert(seq);
            }
            Err(e) => {
                self.failed += 1;
                self.first_error.get_or_insert(e);
            }
        }
    }
}

/// Runs the workload; `kill` is called once, just before record `kill_at` is sent. `java_libs`
/// is the directory of kafka-clients' jars (only for [`ClientKind::Java`]); `run_dir` receives
/// the Java driver's source and stderr.
pub async fn produce(
    client: ClientKind,
    w: &Workload<'_>,
    kill: &mut dyn FnMut() -> anyhow::Result<()>,
    java_libs: Option<&Path>,
    run_dir: &Path,
) -> anyhow::Result<Sent> {
    match client {
        ClientKind::Rust => rust(w, kill).await,
        ClientKind::Librdkafka => librdkafka(w, kill).await,
        ClientKind::Java => {
            let libs = java_libs.ok_or_else(|| anyhow!("--client java needs the Kafka jars"))?;
            java(w, kill, libs, run_dir).await
        }
    }
}

async fn rust(
    w: &Workload<'_>,
    kill: &mut dyn FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<Sent> {
    let props = vec![
        ("bootstrap.servers".to_string(), w.bootstrap.to_string()),
        ("client.id".to_string(), "chaos-rust".to_string()),
        ("acks".to_string(), w.acks.to_string()),
        ("enable.idempotence".to_string(), w.idempotence.to_string()),
        (
            "max.in.flight.requests.per.connection".to_string(),
            w.max_in_flight.to_string(),
        ),
        ("batch.size".to_string(), w.batch_size.to_string()),
    ];
    let producer = Producer::connect(ProducerConfig::from_properties(&props)?).await?;
    let mut pending = FuturesUnordered::new();
    for i in 0..w.records {
        if i == w.kill_at {
            kill()?;
        }
        let fut = producer.send(
            w.topic,
            None,
            None,
            Some(Bytes::from(format!("seq-{i}"))),
            Vec::new(),
        );
        pending.push(async move { (i, fut.await.map(|_| ()).map_err(|e| e.to_string())) });
        if i % 50 == 49 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    let mut sent = Sent::default();
    while let Some((i, r)) = pending.next().await {
        sent.record(i, r);
    }
    Ok(sent)
}

#[cfg(feature = "librdkafka")]
async fn librdkafka(
    w: &Workload<'_>,
    kill: &mut dyn FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<Sent> {
    use rdkafka::error::{KafkaError, RDKafkaErrorCode};
    use rdkafka::producer::{FutureProducer, FutureRecord};

    let producer: FutureProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", w.bootstrap)
        .set("client.id", "chaos-librdkafka")
        .set("acks", w.acks)
        .set("enable.idempotence", w.idempotence.to_string())
        .set(
            "max.in.flight.requests.per.connection",
            w.max_in_flight.to_string(),
        )
        .set("batch.size", w.batch_size.to_string())
        // Java's delivery.timeout.ms default, so every client gives up at the same point.
        .set("message.timeout.ms", "120000")
        // Connection failures to the killed node are the experiment, not news: keep stderr for
        // the table.
        .set_log_level(rdkafka::config::RDKafkaLogLevel::Critical)
        .create()
        .context("creating the librdkafka producer")?;
    let mut pending = FuturesUnordered::new();
    for i in 0..w.records {
        if i == w.kill_at {
            kill()?;
        }
        let payload = format!("seq-{i}");
        loop {
            match producer.send_result(FutureRecord::<(), str>::to(w.topic).payload(&payload)) {
                Ok(fut) => {
                    pending.push(async move {
                        let r = match fut.await {
                            Ok(Ok(_)) => Ok(()),
                            Ok(Err((e, _))) => Err(e.to_string()),
                            Err(_) => Err("delivery future cancelled".to_string()),
                        };
                        (i, r)
                    });
                    break;
                }
                // The local queue is full: wait for deliveries, as a real application would.
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Err((e, _)) => bail!("librdkafka refused record {i}: {e}"),
            }
        }
        if i % 50 == 49 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    let mut sent = Sent::default();
    while let Some((i, r)) = pending.next().await {
        sent.record(i, r);
    }
    Ok(sent)
}

#[cfg(not(feature = "librdkafka"))]
async fn librdkafka(
    _w: &Workload<'_>,
    _kill: &mut dyn FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<Sent> {
    bail!("this strom was built without librdkafka (cargo feature `librdkafka`)")
}

const JAVA_DRIVER: &str = include_str!("ChaosProducer.java");

/// The Java producer in a child JVM (single-file source launch), driven over stdio.
async fn java(
    w: &Workload<'_>,
    kill: &mut dyn FnMut() -> anyhow::Result<()>,
    libs: &Path,
    run_dir: &Path,
) -> anyhow::Result<Sent> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    std::fs::create_dir_all(run_dir)?;
    let source = run_dir.join("ChaosProducer.java");
    std::fs::write(&source, JAVA_DRIVER)?;
    let stderr = std::fs::File::create(run_dir.join("java-producer.log"))?;
    let mut child = tokio::process::Command::new("java")
        .arg("-Xmx256m")
        .arg("-cp")
        // Java expands the trailing `*` itself: every jar in the directory.
        .arg(format!("{}/*", libs.display()))
        .arg(&source)
        .arg(w.bootstrap)
        .arg(w.topic)
        .arg(w.records.to_string())
        .arg(w.kill_at.to_string())
        .arg(w.acks)
        .arg(w.idempotence.to_string())
        .arg(w.max_in_flight.to_string())
        .arg(w.batch_size.to_string())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(stderr)
        .kill_on_drop(true)
        .spawn()
        .context("starting java (is a JDK installed?)")?;
    let mut stdin = child.stdin.take().expect("piped stdin");
    let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
    let mut sent = Sent::default();
    let mut done = false;
    while let Some(line) = lines.next_line().await? {
        let mut parts = line.splitn(3, ' ');
        match (parts.next(), parts.next(), parts.next()) {
            (Some("kill"), None, None) => {
                kill()?;
                stdin.write_all(b"go\n").await?;
                stdin.flush().await?;
            }
            (Some("ack"), Some(n), Some(_offset)) => sent.record(n.parse()?, Ok(())),
            (Some("err"), Some(n), msg) => {
                sent.record(n.parse()?, Err(msg.unwrap_or_default().to_string()))
            }
            (Some("done"), None, None) => {
                done = true;
                break;
            }
            _ => bail!("unexpected line from the Java producer: {line}"),
        }
    }
    let status = child.wait().await?;
    if !done || !status.success() {
        bail!(
            "the Java producer exited ({status}) before its last callback; see {}",
            run_dir.join("java-producer.log").display()
        );
    }
    Ok(sent)
}

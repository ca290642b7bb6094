//! Test harness shared by the integration tests: starts the real `strom` binary on a free
//! loopback port with a temporary data directory, and offers small rdkafka helpers.
//!
//! Every broker is owned by a [`Broker`] value whose `Drop` sends SIGKILL, so no broker outlives
//! its test, even when the test panics. The broker's stdout/stderr go to files in the temporary
//! directory; when a test panics they are printed (the test harness shows them with the failure).
//! Set `STROM_TEST_KEEP=1` to keep the temporary directory after the test.

#![allow(dead_code)]

pub mod cluster;
pub mod kafka_ref;
mod raw;

pub use raw::*;

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use std::sync::{Arc, Mutex};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::message::{Headers, Message};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};

/// How long a broker may take to accept connections after being spawned.
pub const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a broker may take to exit after SIGTERM.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(20);
/// Default timeout for client operations in tests.
pub const OP_TIMEOUT: Duration = Duration::from_secs(30);

/// A running (or stopped) `strom server` child process.
pub struct Broker {
    tmp: Option<tempfile::TempDir>,
    root: PathBuf,
    port: u16,
    extra: Vec<String>,
    child: Option<Child>,
    starts: usize,
    /// Environment variables the next starts get (failpoints).
    env: Vec<(String, String)>,
}

impl Broker {
    /// Starts a broker on a free port with a fresh data dir.
    pub fn start() -> Broker {
        Self::start_with(&[])
    }

    /// Starts a broker with extra `--set key=value` settings, e.g. `&["num.partitions=3"]`.
    pub fn start_with(settings: &[&str]) -> Broker {
        let mut extra = Vec::new();
        for s in settings {
            extra.push("--set".to_string());
            extra.push(s.to_string());
        }
        Self::start_args(extra)
    }

    /// Starts a broker with extra settings and environment variables (failpoints) from its
    /// first start on.
    pub fn start_with_env(settings: &[&str], env: &[(&str, &str)]) -> Broker {
        let extra = settings
            .iter()
            .flat_map(|s| ["--set".to_string(), s.to_string()])
            .collect();
        let env = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Self::start_args_env(extra, env)
    }

    /// Starts a broker with arbitrary extra command-line arguments after the defaults.
    pub fn start_args(extra: Vec<String>) -> Broker {
        Self::start_args_env(extra, Vec::new())
    }

    fn start_args_env(extra: Vec<String>, env: Vec<(String, String)>) -> Broker {
        let tmp = tempfile::Builder::new()
            .prefix("strom-it-")
            .tempdir()
            .expect("create temp dir");
        let root = tmp.path().to_path_buf();
        let data = root.join("data");
        if reference_kafka() {
            fs::create_dir_all(&data).expect("create data dir");
        } else {
            // Formatted as Kafka's are (`strom format`, `kafka-storage format`), so that tests
            // may put files there before the first start.
            let cluster_id = strom_output(&["random-uuid"]);
            strom_output(&[
                "format",
                "--cluster-id",
                cluster_id.trim(),
                "--data-dir",
                data.to_str().expect("utf-8 path"),
            ]);
        }
        let mut b = Broker {
            tmp: Some(tmp),
            root,
            port: free_port(),
            extra,
            child: None,
            starts: 0,
            env,
        };
        b.spawn_and_wait();
        b
    }

    /// `127.0.0.1:PORT`, for `bootstrap.servers`.
    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The broker's `--data-dir`.
    pub fn data_dir(&self) -> PathBuf {
        self.root.join("data")
    }

    /// The directory of one partition's log: `<data>/<topic>-<partition>`.
    pub fn partition_dir(&self, topic: &str, partition: i32) -> PathBuf {
        self.data_dir().join(format!("{topic}-{partition}"))
    }

    /// Replaces the `--set key=value` settings of the next starts.
    pub fn set_settings(&mut self, settings: &[&str]) {
        self.extra = settings
            .iter()
            .flat_map(|s| ["--set".to_string(), s.to_string()])
            .collect();
    }

    /// Sets the environment of the next starts (`None` value: removes the variable).
    pub fn set_env(&mut self, key: &str, value: Option<&str>) {
        self.env.retain(|(k, _)| k != key);
        if let Some(v) = value {
            self.env.push((key.to_string(), v.to_string()));
        }
    }

    /// Waits (bounded) for the process to exit by itself; its status, or `None` at the limit.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(st) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                self.child = None;
                return Some(st);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    /// The pid of the running child. Panics when the broker is not running.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("broker is not running").id()
    }

    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            None => false,
            Some(c) => matches!(c.try_wait(), Ok(None)),
        }
    }

    /// Sends SIGTERM and waits (bounded) for the process to exit. Returns its exit status.
    pub fn stop(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("broker is not running");
        let pid = child.id();
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(pid.to_string())
            .status();
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            match child.try_wait() {
                Ok(Some(st)) => return st,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    self.dump_logs();
                    panic!("broker pid {pid} did not exit within {STOP_TIMEOUT:?} after SIGTERM");
                }
            }
        }
    }

    /// Sends SIGKILL and reaps the process.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the broker again on the same port and data dir (after `stop` or `kill`).
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "restart of a running broker");
        self.spawn_and_wait();
    }

    /// Path of the log file (stdout+stderr) of the n-th start (0-based).
    pub fn log_path(&self, start: usize) -> PathBuf {
        self.root.join(format!("broker-{start}.log"))
    }

    /// All broker output so far, across restarts.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for i in 0..self.starts {
            let mut s = String::new();
            if let Ok(mut f) = File::open(self.log_path(i)) {
                let _ = f.read_to_string(&mut s);
            }
            out.push_str(&format!("----- broker start #{i} -----\n{s}"));
        }
        out
    }

    pub fn dump_logs(&self) {
        eprintln!(
            "===== strom broker output (port {}, dir {}) =====\n{}\n===== end of broker output =====",
            self.port,
            self.root.display(),
            self.logs()
        );
    }

    /// Starts the broker again without waiting for it to accept connections: for a start
    /// that is meant to end by itself (a failpoint that aborts the process), possibly before
    /// the first connection attempt.
    pub fn restart_without_waiting(&mut self) {
        assert!(self.child.is_none(), "restart of a running broker");
        self.spawn();
    }

    fn spawn_and_wait(&mut self) {
        self.spawn();
        self.wait_listening();
    }

    fn spawn(&mut self) {
        let log = File::create(self.log_path(self.starts)).expect("create broker log file");
        let log2 = log.try_clone().expect("clone log file");
        let mut cmd = if reference_kafka() {
            self.kafka_command()
        } else {
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_strom"));
            cmd.arg("server")
                .arg("--listen")
                .arg(self.bootstrap())
                .arg("--data-dir")
                .arg(self.data_dir())
                .args(&self.extra);
            cmd
        };
        cmd.stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log2));
        if std::env::var_os("RUST_LOG").is_none() {
            cmd.env("RUST_LOG", "info");
        }
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        let child = cmd.spawn().expect("spawn strom server");
        self.child = Some(child);
        self.starts += 1;
    }

    fn wait_listening(&mut self) {
        let timeout = if reference_kafka() {
            Duration::from_secs(120)
        } else {
            START_TIMEOUT
        };
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(st) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                self.child = None;
                self.dump_logs();
                panic!("strom server exited during start-up with {st}");
            }
            if TcpStream::connect_timeout(&self.addr(), Duration::from_millis(200)).is_ok() {
                return;
            }
            if Instant::now() > deadline {
                self.kill();
                self.dump_logs();
                panic!(
                    "strom server did not accept connections on {} within {timeout:?}",
                    self.bootstrap()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// `STROM_TEST_REFERENCE=kafka` runs the same tests against Apache Kafka 4.4 (started from the
/// jars that `scripts/kafka-ref.sh fetch` downloads) instead of `strom`, to validate test logic.
pub fn reference_kafka() -> bool {
    std::env::var("STROM_TEST_REFERENCE").is_ok_and(|v| v == "kafka")
}

impl Broker {
    fn kafka_command(&mut self) -> Command {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let script = std::env::var_os("STROM_KAFKA_REF_SCRIPT")
            .map(PathBuf::from)
            .unwrap_or_else(|| repo.join("scripts/kafka-ref.sh"));
        let cp = Command::new("bash")
            .arg(&script)
            .arg("classpath")
            .output()
            .expect("scripts/kafka-ref.sh classpath");
        assert!(cp.status.success(), "kafka-ref.sh classpath failed");
        let cp = String::from_utf8(cp.stdout).unwrap().trim().to_string();
        let props = self.root.join("server.properties");
        if !props.exists() {
            let cport = free_port();
            let mut text = format!(
                "process.roles=broker,controller\nnode.id=1\n\
                 controller.quorum.bootstrap.servers=127.0.0.1:{cport}\n\
                 listeners=PLAINTEXT://127.0.0.1:{p},CONTROLLER://127.0.0.1:{cport}\n\
                 advertised.listeners=PLAINTEXT://127.0.0.1:{p},CONTROLLER://127.0.0.1:{cport}\n\
                 inter.broker.listener.name=PLAINTEXT\ncontroller.listener.names=CONTROLLER\n\
                 listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT\n\
                 log.dirs={d}\nnum.partitions=1\noffsets.topic.replication.factor=1\n\
                 transaction.state.log.replication.factor=1\ntransaction.state.log.min.isr=1\n\
                 share.coordinator.state.topic.replication.factor=1\nshare.coordinator.state.topic.min.isr=1\n\
                 group.initial.rebalance.delay.ms=0\n",
                p = self.port,
                d = self.data_dir().display()
            );
            let mut it = self.extra.iter();
            while let Some(a) = it.next() {
                if a == "--set" {
                    text.push_str(it.next().unwrap());
                    text.push('\n');
                }
            }
            fs::write(&props, text).unwrap();
            let fmt = Command::new("java")
                .args([
                    "-cp",
                    &cp,
                    "kafka.tools.StorageTool",
                    "format",
                    "--standalone",
                    "-t",
                ])
                .arg("q1Sh-9_ISia_zwGINzRvyQ")
                .arg("-c")
                .arg(&props)
                .output()
                .expect("kafka StorageTool format");
            assert!(
                fmt.status.success(),
                "format: {}",
                String::from_utf8_lossy(&fmt.stderr)
            );
        }
        let mut cmd = Command::new("java");
        cmd.args([
            "-Xmx512m",
            "-Xms128m",
            "-XX:+UseG1GC",
            "-cp",
            &cp,
            "kafka.Kafka",
        ])
        .arg(&props);
        cmd
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        // Whether the broker was still running when the test ended: CI runs saw a broker's
        // connections refused or closed right after it started, with nothing in its log.
        let exited = self
            .child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten());
        self.kill();
        if std::thread::panicking() {
            eprintln!("broker exited before the end of the test: {exited:?}");
            self.dump_logs();
        }
        if std::env::var_os("STROM_TEST_KEEP").is_some() {
            if let Some(t) = self.tmp.take() {
                let p = t.keep();
                eprintln!("kept test dir {}", p.display());
            }
        }
    }
}

/// Runs `strom ARGS` to completion and returns its stdout; panics with its stderr on failure.
pub fn strom_output(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_strom"))
        .args(args)
        .output()
        .expect("run strom");
    assert!(
        out.status.success(),
        "strom {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// A loopback port that was free a moment ago, below Linux's ephemeral range (32768+): a port
/// the OS hands out for `:0` can be taken by any outgoing connection before the broker binds it
/// (or binds it again after a restart), which made cluster tests fail with "Address already in
/// use". Ports are handed out from a per-process starting point, each checked with a bind.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const LOW: u32 = 20_000;
    const SPAN: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let start = (std::process::id() % 600) * 20;
    for _ in 0..SPAN {
        let port = (LOW + (start + NEXT.fetch_add(1, Ordering::Relaxed)) % SPAN) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port below the ephemeral range");
}

/// Runs a future to completion on a fresh current-thread runtime, bounded by `OP_TIMEOUT`.
pub fn block_on<F: std::future::Future>(fut: F) -> F::Output {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(async { tokio::time::timeout(OP_TIMEOUT, fut).await })
        .expect("operation timed out")
}

/// Base client config pointed at `broker`.
pub fn client_config(broker: &Broker) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", broker.bootstrap())
        .set("client.id", "strom-it")
        .set("socket.timeout.ms", "20000");
    c
}

pub fn admin(broker: &Broker) -> AdminClient<DefaultClientContext> {
    client_config(broker).create().expect("create admin client")
}

/// Creates topics, each `(name, partitions, configs)`; panics on any error.
pub fn create_topic(broker: &Broker, name: &str, partitions: i32, configs: &[(&str, &str)]) {
    let admin = admin(broker);
    let mut t = NewTopic::new(name, partitions, TopicReplication::Fixed(1));
    for (k, v) in configs {
        t = t.set(k, v);
    }
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(20)));
    let res = block_on(admin.create_topics([&t], &opts)).expect("CreateTopics request");
    assert_eq!(res.len(), 1);
    match &res[0] {
        Ok(n) => assert_eq!(n, name),
        Err((n, code)) => panic!("CreateTopics {n}: {code:?}"),
    }
    wait_for_topic(broker, name, partitions);
}

/// Waits (bounded) until metadata shows `topic` with `partitions` partitions, each with a leader.
pub fn wait_for_topic(broker: &Broker, topic: &str, partitions: i32) {
    let c = consumer(broker);
    let deadline = Instant::now() + OP_TIMEOUT;
    loop {
        if let Ok(md) = c.fetch_metadata(Some(topic), Duration::from_secs(5)) {
            if let Some(t) = md.topics().iter().find(|t| t.name() == topic) {
                if t.error().is_none()
                    && t.partitions().len() == partitions as usize
                    && t.partitions().iter().all(|p| p.leader() >= 0)
                {
                    return;
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "topic {topic} did not appear in metadata"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A consumer that never joins a group: use `assign` with explicit offsets.
pub fn consumer(broker: &Broker) -> BaseConsumer {
    client_config(broker)
        .set("group.id", "strom-it-unused-group")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "error")
        .set("enable.partition.eof", "false")
        .set("fetch.wait.max.ms", "100")
        .create()
        .expect("create consumer")
}

/// One consumed record, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rec {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Option<Vec<u8>>)>,
    pub timestamp: Option<i64>,
}

/// Reads partitions `parts` of `topic` from offset `from` until each partition has reached
/// `until[p]` (exclusive end offset), or fails after `timeout`. Returns records per partition.
pub fn consume_until(
    broker: &Broker,
    topic: &str,
    ends: &HashMap<i32, i64>,
    timeout: Duration,
) -> HashMap<i32, Vec<Rec>> {
    let c = consumer(broker);
    let mut tpl = TopicPartitionList::new();
    for &p in ends.keys() {
        tpl.add_partition_offset(topic, p, Offset::Offset(0))
            .unwrap();
    }
    c.assign(&tpl).expect("assign");
    let mut out: HashMap<i32, Vec<Rec>> = ends.keys().map(|&p| (p, Vec::new())).collect();
    let done = |out: &HashMap<i32, Vec<Rec>>| {
        ends.iter()
            .all(|(p, &end)| out[p].last().map(|r| r.offset + 1).unwrap_or(0) >= end)
    };
    let deadline = Instant::now() + timeout;
    while !done(&out) {
        assert!(
            Instant::now() < deadline,
            "consume of {topic} timed out; got {:?} of {:?}",
            out.iter().map(|(p, v)| (*p, v.len())).collect::<Vec<_>>(),
            ends
        );
        match c.poll(Duration::from_millis(200)) {
            None => {}
            Some(Err(e)) => panic!("consume error: {e}"),
            Some(Ok(m)) => {
                let headers = m
                    .headers()
                    .map(|h| {
                        h.iter()
                            .map(|h| (h.key.to_string(), h.value.map(|v| v.to_vec())))
                            .collect()
                    })
                    .unwrap_or_default();
                out.get_mut(&m.partition())
                    .expect("unassigned partition")
                    .push(Rec {
                        partition: m.partition(),
                        offset: m.offset(),
                        key: m.key().map(|k| k.to_vec()),
                        value: m.payload().map(|v| v.to_vec()),
                        headers,
                        timestamp: m.timestamp().to_millis(),
                    });
            }
        }
    }
    out
}

/// Reads a single partition from 0 to its current high watermark.
pub fn consume_all(broker: &Broker, topic: &str, partition: i32) -> Vec<Rec> {
    let (lo, hi) = watermarks(broker, topic, partition);
    assert_eq!(lo, 0, "log start offset of {topic}-{partition}");
    let ends = HashMap::from([(partition, hi)]);
    consume_until(broker, topic, &ends, Duration::from_secs(120))
        .remove(&partition)
        .unwrap()
}

/// (low, high) watermarks of a partition.
/// Retries for up to 15 s on errors (a just-restarted broker may briefly answer
/// NOT_LEADER/LEADER_NOT_AVAILABLE); every retried error is printed.
pub fn watermarks(broker: &Broker, topic: &str, partition: i32) -> (i64, i64) {
    let c = consumer(broker);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        match c.fetch_watermarks(topic, partition, Duration::from_secs(20)) {
            Ok(w) => return w,
            Err(e) if Instant::now() < deadline => {
                eprintln!("fetch_watermarks {topic}-{partition}: {e} (retrying)");
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("fetch_watermarks {topic}-{partition}: {e}"),
        }
    }
}

/// A clean exit after SIGTERM: status 0 (Kafka's JVM reports 143 = 128 + SIGTERM).
pub fn assert_clean_exit(st: ExitStatus) {
    let ok = st.success() || (reference_kafka() && st.code() == Some(143));
    assert!(ok, "exit status after SIGTERM: {st}");
}

/// Asserts offsets of `recs` are exactly `start..start+len`, contiguous.
pub fn assert_contiguous(recs: &[Rec], start: i64) {
    for (i, r) in recs.iter().enumerate() {
        assert_eq!(r.offset, start + i as i64, "offset gap at index {i}");
    }
}

pub fn rd_code(e: &rdkafka::error::KafkaError) -> Option<RDKafkaErrorCode> {
    e.rdkafka_error_code()
}

// ---------------------------------------------------------------------------------------------
// Producing with delivery reports.

/// A record to produce.
#[derive(Debug, Clone, Default)]
pub struct OutRec {
    pub partition: Option<i32>,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Option<Vec<u8>>)>,
    pub timestamp: Option<i64>,
}

/// Delivery report of one record: `Ok((partition, offset))` or the error text.
pub type Report = Result<(i32, i64), String>;

/// Shared table of delivery reports, indexed by the record's sequence number.
#[derive(Clone, Default)]
pub struct Reports(pub Arc<Mutex<HashMap<usize, Report>>>);

impl Reports {
    pub fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }
    pub fn ok_count(&self) -> usize {
        self.0
            .lock()
            .unwrap()
            .values()
            .filter(|r| r.is_ok())
            .count()
    }
    pub fn snapshot(&self) -> HashMap<usize, Report> {
        self.0.lock().unwrap().clone()
    }
}

pub struct ReportCtx(pub Reports);

impl ClientContext for ReportCtx {}

impl ProducerContext for ReportCtx {
    type DeliveryOpaque = Box<usize>;
    fn delivery(&self, r: &DeliveryResult<'_>, idx: Box<usize>) {
        let rep = match r {
            Ok(m) => Ok((m.partition(), m.offset())),
            Err((e, _)) => Err(e.to_string()),
        };
        let prev = self.0 .0.lock().unwrap().insert(*idx, rep);
        assert!(prev.is_none(), "two delivery reports for record {idx}");
    }
}

/// A producer with acks=all and the given extra settings, reporting into `Reports`.
pub fn producer(
    broker: &Broker,
    settings: &[(&str, &str)],
) -> (ThreadedProducer<ReportCtx>, Reports) {
    let reports = Reports::default();
    let mut cfg = client_config(broker);
    cfg.set("acks", "all")
        .set("linger.ms", "5")
        .set("enable.idempotence", "false")
        .set("max.in.flight.requests.per.connection", "5")
        .set("message.timeout.ms", "60000");
    for (k, v) in settings {
        cfg.set(*k, *v);
    }
    let p = cfg
        .create_with_context(ReportCtx(reports.clone()))
        .unwrap_or_else(|e| panic!("create producer with {settings:?}: {e}"));
    (p, reports)
}

/// Enqueues one record (retrying while the local queue is full, bounded).
pub fn send_one(p: &ThreadedProducer<ReportCtx>, topic: &str, idx: usize, r: &OutRec) {
    let mut headers = None;
    if !r.headers.is_empty() {
        let mut h = OwnedHeaders::new_with_capacity(r.headers.len());
        for (k, v) in &r.headers {
            h = h.insert(Header {
                key: k,
                value: v.as_deref(),
            });
        }
        headers = Some(h);
    }
    let mut rec: BaseRecord<'_, [u8], [u8], Box<usize>> =
        BaseRecord::with_opaque_to(topic, Box::new(idx));
    rec.partition = r.partition;
    rec.key = r.key.as_deref();
    rec.payload = r.value.as_deref();
    rec.timestamp = r.timestamp;
    rec.headers = headers;
    let deadline = Instant::now() + OP_TIMEOUT;
    loop {
        match p.send(rec) {
            Ok(()) => return,
            Err((e, back)) => {
                assert!(
                    e.rdkafka_error_code() == Some(RDKafkaErrorCode::QueueFull),
                    "produce of record {idx} failed to enqueue: {e}"
                );
                assert!(Instant::now() < deadline, "producer queue stayed full");
                rec = back;
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    }
}

/// Produces all records (record i gets sequence number `first_idx + i`), flushes, and returns the
/// delivery reports in record order. Panics if any report is missing.
pub fn produce_all(
    broker: &Broker,
    topic: &str,
    settings: &[(&str, &str)],
    recs: &[OutRec],
) -> Vec<Report> {
    let (p, reports) = producer(broker, settings);
    for (i, r) in recs.iter().enumerate() {
        send_one(&p, topic, i, r);
    }
    p.flush(Duration::from_secs(120)).expect("flush");
    let snap = reports.snapshot();
    (0..recs.len())
        .map(|i| {
            snap.get(&i)
                .cloned()
                .unwrap_or_else(|| panic!("no delivery report for record {i}"))
        })
        .collect()
}

/// Produces and asserts that every record was acknowledged.
pub fn produce_ok(
    broker: &Broker,
    topic: &str,
    settings: &[(&str, &str)],
    recs: &[OutRec],
) -> Vec<(i32, i64)> {
    produce_all(broker, topic, settings, recs)
        .into_iter()
        .enumerate()
        .map(|(i, r)| r.unwrap_or_else(|e| panic!("record {i} not delivered: {e}")))
        .collect()
}

/// Simple records `key-i` / `value-i` for partition `p`.
pub fn simple_records(prefix: &str, n: usize, partition: Option<i32>) -> Vec<OutRec> {
    (0..n)
        .map(|i| OutRec {
            partition,
            key: Some(format!("{prefix}-key-{i}").into_bytes()),
            value: Some(format!("{prefix}-value-{i}").into_bytes()),
            ..Default::default()
        })
        .collect()
}

/// Asserts that `got` holds exactly `want` (key, value, headers, and timestamp when set), in order.
pub fn assert_records_eq(got: &[Rec], want: &[OutRec]) {
    assert_eq!(got.len(), want.len(), "record count");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.key, w.key, "key of record {i} (offset {})", g.offset);
        assert_eq!(
            g.value, w.value,
            "value of record {i} (offset {})",
            g.offset
        );
        assert_eq!(
            g.headers, w.headers,
            "headers of record {i} (offset {})",
            g.offset
        );
        if let Some(ts) = w.timestamp {
            assert_eq!(
                g.timestamp,
                Some(ts),
                "timestamp of record {i} (offset {})",
                g.offset
            );
        }
    }
}

pub fn connect(broker: &Broker) -> TcpStream {
    let s = TcpStream::connect_timeout(&broker.addr(), Duration::from_secs(5)).expect("connect");
    s.set_nodelay(true).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Lists files (not dirs) directly in `dir`, sorted.
pub fn list_files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display()))
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().map(|t| t.is_file()).unwrap_or(false))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Walks the batches of a Kafka `.log` segment: returns `(position, base_offset, size)` for each
/// complete batch (size includes the 12-byte log overhead), and the number of trailing bytes that
/// do not form a complete batch.
pub fn segment_batches(bytes: &[u8]) -> (Vec<(usize, i64, usize)>, usize) {
    let mut v = Vec::new();
    let mut pos = 0usize;
    while pos + 12 <= bytes.len() {
        let base = i64::from_be_bytes(bytes[pos..pos + 8].try_into().unwrap());
        let len = i32::from_be_bytes(bytes[pos + 8..pos + 12].try_into().unwrap());
        assert!(len > 0, "bad batch length {len} at {pos}");
        let size = 12 + len as usize;
        if pos + size > bytes.len() {
            break;
        }
        v.push((pos, base, size));
        pos += size;
    }
    (v, bytes.len() - pos)
}

/// (leader, offline replicas) of `topic`-0 from a raw Metadata v12 answer of the broker at
/// `addr` (rdkafka does not expose offline replicas); `None` while that broker does not know
/// the topic yet.
pub fn partition0_leader_and_offline(
    addr: impl std::net::ToSocketAddrs,
    topic: &str,
) -> Option<(i32, Vec<i32>)> {
    use strom_protocol::kafka::messages::{ApiKey, MetadataRequest, MetadataResponse};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    let resp: MetadataResponse = raw_call(
        &mut s,
        ApiKey::Metadata,
        12,
        &MetadataRequest::default().with_topics(None),
    );
    let t = resp
        .topics
        .iter()
        .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == topic))?;
    let p = t.partitions.iter().find(|p| p.partition_index == 0)?;
    Some((
        p.leader_id.0,
        p.offline_replicas.iter().map(|b| b.0).collect(),
    ))
}

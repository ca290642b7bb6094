//! Kafka 4.4's own KRaft combined-mode `config/server.properties` (its keys and values, with
//! only the ports and the log directory changed) starts a working Strom node with
//! `strom server --config FILE` and nothing else: clients produce and consume on its PLAINTEXT
//! listener, the broker-to-controller APIs are served only on its CONTROLLER listener, and the
//! keys Strom does not use are named in one line with Kafka's wording.

mod common;

use std::io::Read;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{block_on, encode_request, free_port, raw_call, write_frame};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Message, Offset, TopicPartitionList};
use strom_protocol::kafka::messages::*;

/// Kafka 4.4 `config/server.properties`, the settings without the comments; `{PORT}`,
/// `{CONTROLLER_PORT}` and `{LOG_DIR}` stand for what the file has as 9092, 9093 and
/// /tmp/kraft-combined-logs.
const KAFKA_SERVER_PROPERTIES: &str = "\
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=localhost:{CONTROLLER_PORT}
listeners=PLAINTEXT://:{PORT},CONTROLLER://:{CONTROLLER_PORT}
inter.broker.listener.name=PLAINTEXT
advertised.listeners=PLAINTEXT://localhost:{PORT},CONTROLLER://localhost:{CONTROLLER_PORT}
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
log.dirs={LOG_DIR}
num.partitions=1
num.recovery.threads.per.data.dir=1
offsets.topic.replication.factor=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
";

struct Node {
    dir: tempfile::TempDir,
    port: u16,
    controller_port: u16,
    child: Option<Child>,
}

impl Node {
    fn log_dir(&self) -> PathBuf {
        self.dir.path().join("kraft-combined-logs")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    fn start() -> Node {
        let dir = tempfile::tempdir().unwrap();
        let (port, controller_port) = (free_port(), free_port());
        let mut node = Node {
            dir,
            port,
            controller_port,
            child: None,
        };
        let props = KAFKA_SERVER_PROPERTIES
            .replace("{CONTROLLER_PORT}", &controller_port.to_string())
            .replace("{PORT}", &port.to_string())
            .replace("{LOG_DIR}", &node.log_dir().display().to_string());
        let file = node.dir.path().join("server.properties");
        std::fs::write(&file, props).unwrap();
        let log = std::fs::File::create(node.dir.path().join("server.log")).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_strom"))
            .arg("server")
            .arg("--config")
            .arg(&file)
            // Strom's default data dir is relative: keep it inside the test's directory.
            .current_dir(node.dir.path())
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap();
        node.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(st) = node
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!("strom exited with {st}:\n{}", node.log());
            }
            assert!(Instant::now() < deadline, "never listened:\n{}", node.log());
            std::thread::sleep(Duration::from_millis(50));
        }
        node
    }

    fn client(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", format!("localhost:{}", self.port))
            .set("socket.timeout.ms", "10000");
        c
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- strom log ---\n{}", self.log());
        }
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn advertised(port: u16) -> Vec<i16> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let resp: ApiVersionsResponse = raw_call(
        &mut s,
        ApiKey::ApiVersions,
        3,
        &ApiVersionsRequest::default(),
    );
    resp.api_keys.iter().map(|k| k.api_key).collect()
}

fn produce_and_consume(node: &Node, topic: &str, n: usize) {
    let admin: AdminClient<DefaultClientContext> = node.client().create().unwrap();
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let created = block_on(admin.create_topics(
        [&NewTopic::new(topic, 1, TopicReplication::Fixed(1))],
        &opts,
    ))
    .unwrap();
    assert!(created[0].is_ok(), "{created:?}");
    let p: BaseProducer = node.client().set("acks", "all").create().unwrap();
    for i in 0..n {
        let v = format!("v{i}");
        loop {
            match p.send(BaseRecord::<(), str>::to(topic).payload(&v).partition(0)) {
                Ok(()) => break,
                Err(_) => {
                    p.poll(Duration::from_millis(50));
                }
            }
        }
    }
    p.flush(Duration::from_secs(30)).unwrap();
    let c: BaseConsumer = node
        .client()
        .set("group.id", "unused")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning)
        .unwrap();
    c.assign(&tpl).unwrap();
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while got.len() < n && Instant::now() < deadline {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(200)) {
            got.push(String::from_utf8(m.payload().unwrap().to_vec()).unwrap());
        }
    }
    let want: Vec<String> = (0..n).map(|i| format!("v{i}")).collect();
    assert_eq!(got, want);
}

fn segment(dir: &Path, topic: &str) -> PathBuf {
    dir.join(format!("{topic}-0"))
        .join("00000000000000000000.log")
}

#[test]
fn kafka_server_properties_start_a_working_node() {
    let node = Node::start();
    produce_and_consume(&node, "from-kafka-config", 100);

    // The client listener is PLAINTEXT without the internal APIs; the controller listener has
    // them and not the data plane.
    let client = advertised(node.port);
    let controller = advertised(node.controller_port);
    for api in [
        ApiKey::BrokerHeartbeat,
        ApiKey::BrokerRegistration,
        ApiKey::AlterPartition,
        ApiKey::AllocateProducerIds,
    ] {
        assert!(!client.contains(&(api as i16)), "{api:?} on PLAINTEXT");
        assert!(
            controller.contains(&(api as i16)),
            "{api:?} not on CONTROLLER"
        );
    }
    assert!(client.contains(&(ApiKey::Produce as i16)));
    assert!(!controller.contains(&(ApiKey::Produce as i16)));
    let hb = BrokerHeartbeatRequest::default().with_broker_id(BrokerId(1));
    let mut s = TcpStream::connect(("127.0.0.1", node.controller_port)).unwrap();
    // Answered on the controller listener: the heartbeat names no broker epoch of node 1's
    // incarnation, so it is STALE_BROKER_EPOCH, as Kafka's controller answers it.
    let resp: BrokerHeartbeatResponse = raw_call(&mut s, ApiKey::BrokerHeartbeat, 0, &hb);
    assert_eq!(resp.error_code, 77, "STALE_BROKER_EPOCH");
    let mut s = TcpStream::connect(("127.0.0.1", node.port)).unwrap();
    write_frame(&mut s, &encode_request(ApiKey::BrokerHeartbeat, 0, 1, &hb)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    assert_eq!(s.read(&mut [0u8; 16]).ok(), Some(0), "closed unanswered");

    // The settings Strom does not use are named, with Kafka's wording (AbstractConfig.logUnused).
    let log = node.log();
    let line = log
        .lines()
        .find(|l| l.contains("were supplied but are not used yet."))
        .unwrap_or_else(|| panic!("no unused-configs line in:\n{log}"));
    for key in ["num.network.threads", "num.io.threads"] {
        assert!(line.contains(key), "{key} not named in: {line}");
    }
    // The group coordinator reads offsets.topic.replication.factor (for `__consumer_offsets`),
    // the transaction coordinator transaction.state.log.* (for `__transaction_state`).
    for key in [
        "listeners",
        "node.id",
        "process.roles",
        "log.segment.bytes",
        "offsets.topic.replication.factor",
        "transaction.state.log.replication.factor",
        "transaction.state.log.min.isr",
    ] {
        assert!(
            !line.contains(&format!("[{key},")) && !line.contains(&format!(" {key},")),
            "{key} is used but named in: {line}"
        );
    }
}

/// DEPENDS ON THE LOGDIRS BRANCH (log.dirs): the partition data lands in the file's `log.dirs`.
#[test]
fn kafka_server_properties_data_lands_in_log_dirs() {
    let node = Node::start();
    produce_and_consume(&node, "in-log-dirs", 10);
    assert!(
        segment(&node.log_dir(), "in-log-dirs").exists(),
        "no segment under log.dirs {}",
        node.log_dir().display()
    );
}

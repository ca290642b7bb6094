//! Offline replicas and log dirs (issue 9, defects 4 and 5), with the real binary:
//! - a partition whose log cannot be created (a plain file where its directory goes) is offline,
//!   visibly: CreateTopics, Produce, Fetch and ListOffsets answer KAFKA_STORAGE_ERROR, Metadata
//!   lists the replica in `offline_replicas`; after the obstacle is gone a restart brings it back;
//! - in a 3-node cluster the leadership of an offline replica moves to another ISR member and
//!   the topic stays writable and readable;
//! - a broker limited to 600 open files serves 400 partitions, each written once and read back;
//! - `log.dirs=A,B`: partitions are spread over both dirs (fewest first), every dir has its own
//!   `meta.properties` and checkpoints, and everything is read back after a restart.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::cluster::{self, Cluster};
use common::*;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Message, Offset, TopicPartitionList};
use strom_protocol::kafka::messages::create_topics_request::CreatableTopic;
use strom_protocol::kafka::messages::fetch_request::{FetchPartition, FetchTopic};
use strom_protocol::kafka::messages::list_offsets_request::{
    ListOffsetsPartition, ListOffsetsTopic,
};
use strom_protocol::kafka::messages::produce_request::{PartitionProduceData, TopicProduceData};
use strom_protocol::kafka::messages::{
    ApiKey, BrokerId, CreateTopicsRequest, CreateTopicsResponse, FetchRequest, FetchResponse,
    ListOffsetsRequest, ListOffsetsResponse, ProduceRequest, ProduceResponse, TopicName,
};
use strom_protocol::kafka::protocol::StrBytes;
use strom_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use strom_protocol::ErrorCode;

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

fn storage_error() -> i16 {
    ErrorCode::KafkaStorageError.code()
}

fn one_batch() -> bytes::Bytes {
    let record = Record {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: -1,
        producer_id: -1,
        producer_epoch: -1,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence: 0,
        timestamp: 1_700_000_000_000,
        key: None,
        value: Some(bytes::Bytes::from_static(b"v")),
        headers: Default::default(),
    };
    let mut buf = bytes::BytesMut::new();
    let opts = RecordEncodeOptions {
        version: 2,
        compression: Compression::None,
    };
    RecordBatchEncoder::encode(&mut buf, &[record], &opts).unwrap();
    buf.freeze()
}

fn raw_create(broker: &Broker, topic: &str, partitions: i32) -> (i16, Option<String>) {
    let req = CreateTopicsRequest::default()
        .with_timeout_ms(10_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(name(topic))
            .with_num_partitions(partitions)
            .with_replication_factor(1)]);
    let resp: CreateTopicsResponse = raw_call(&mut connect(broker), ApiKey::CreateTopics, 7, &req);
    let t = &resp.topics[0];
    (
        t.error_code,
        t.error_message.as_ref().map(|m| m.to_string()),
    )
}

fn raw_produce(broker: &Broker, topic: &str) -> i16 {
    let req = ProduceRequest::default()
        .with_acks(1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name(topic))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(one_batch()))])]);
    let resp: ProduceResponse = raw_call(&mut connect(broker), ApiKey::Produce, 9, &req);
    resp.responses[0].partition_responses[0].error_code
}

fn raw_fetch(broker: &Broker, topic: &str) -> i16 {
    let req = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_min_bytes(0)
        .with_max_bytes(1 << 20)
        .with_topics(vec![FetchTopic::default()
            .with_topic(name(topic))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_current_leader_epoch(-1)
                .with_fetch_offset(0)
                .with_log_start_offset(-1)
                .with_partition_max_bytes(1 << 20)])]);
    let resp: FetchResponse = raw_call(&mut connect(broker), ApiKey::Fetch, 12, &req);
    resp.responses[0].partitions[0].error_code
}

fn raw_list_offsets(broker: &Broker, topic: &str) -> i16 {
    let req = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(name(topic))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(0)
                .with_current_leader_epoch(-1)
                .with_timestamp(-1)])]);
    let resp: ListOffsetsResponse = raw_call(&mut connect(broker), ApiKey::ListOffsets, 7, &req);
    resp.topics[0].partitions[0].error_code
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_partition_whose_log_cannot_be_created_answers_storage_errors() {
    let mut broker = Broker::start();
    // A plain file where the partition's directory must go: its log cannot be created.
    std::fs::write(broker.partition_dir("bad", 0), b"in the way").unwrap();
    let (code, msg) = raw_create(&broker, "bad", 1);
    assert_eq!(code, storage_error(), "CreateTopics: {msg:?}");
    assert_eq!(raw_produce(&broker, "bad"), storage_error(), "Produce");
    assert_eq!(raw_fetch(&broker, "bad"), storage_error(), "Fetch");
    assert_eq!(
        raw_list_offsets(&broker, "bad"),
        storage_error(),
        "ListOffsets"
    );
    // Listed offline; once the controller has it, the partition (its only replica offline)
    // has no leader, so clients do not send to it.
    wait_for("offline replica without a leader", || {
        partition0_leader_and_offline(broker.addr(), "bad") == Some((-1, vec![1]))
    });
    // The broker and other partitions are fine.
    create_topic(&broker, "good", 1, &[]);
    assert_eq!(raw_produce(&broker, "good"), 0);
    assert_eq!(
        partition0_leader_and_offline(broker.addr(), "good"),
        Some((1, vec![]))
    );

    // Restarted with the obstacle still there: still offline, still answered.
    broker.stop();
    broker.restart();
    assert_eq!(raw_produce(&broker, "bad"), storage_error());
    assert_eq!(
        partition0_leader_and_offline(broker.addr(), "bad"),
        Some((-1, vec![1]))
    );
    // Obstacle removed: the log opens, the controller brings the replica back and elects it.
    broker.stop();
    std::fs::remove_file(broker.partition_dir("bad", 0)).unwrap();
    broker.restart();
    wait_for("replica back online and leader", || {
        partition0_leader_and_offline(broker.addr(), "bad") == Some((1, vec![]))
    });
    assert_eq!(raw_produce(&broker, "bad"), 0);
    assert_eq!(raw_fetch(&broker, "bad"), 0);
}

#[test]
fn the_leadership_of_an_offline_replica_moves_to_another_isr_member() {
    let c = Cluster::start(3);
    cluster::wait_all_registered(&c, 3);
    // Node 1 is the preferred leader but cannot create the log.
    std::fs::write(c.data_dir(1).join("moved-0"), b"in the way").unwrap();
    let admin: AdminClient<DefaultClientContext> = c.config(&[2]).create().unwrap();
    let topic = NewTopic::new("moved", 1, TopicReplication::Variable(&[&[1, 2, 3]]))
        .set("min.insync.replicas", "2");
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let r = block_on(admin.create_topics([&topic], &opts)).unwrap();
    // The node answering is the active controller; it reports its own replica's failure.
    if let Err((_, code)) = &r[0] {
        assert_eq!(
            *code,
            rdkafka::types::RDKafkaErrorCode::KafkaStorageError,
            "{r:?}"
        );
    }
    let addr = |id: i32| {
        let port = c.nodes.iter().find(|n| n.id == id).unwrap().port;
        std::net::SocketAddr::from(([127, 0, 0, 1], port))
    };
    for node in 1..=3 {
        wait_for("leadership moved off the offline replica", || {
            // A node that does not know the topic yet has not seen the move either.
            partition0_leader_and_offline(addr(node), "moved")
                .is_some_and(|(leader, offline)| leader != 1 && leader > 0 && offline == vec![1])
        });
    }
    wait_for("offline replica out of the ISR", || {
        cluster::isr(&c, 2, "moved") == vec![2, 3]
    });
    cluster::produce_to(&c, "moved", 20);
    assert_eq!(cluster::consume_count(&c, &[2, 3], "moved", 1, 20), 20);
}

/// A `strom server` run under `prlimit`, killed on drop.
struct Limited {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Limited {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_with_fd_limit(limit: u32) -> Limited {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let log = std::fs::File::create(dir.path().join("server.log")).unwrap();
    let child = Command::new("prlimit")
        .arg(format!("--nofile={limit}:{limit}"))
        .arg(env!("CARGO_BIN_EXE_strom"))
        .arg("server")
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("prlimit (util-linux) runs strom");
    let b = Limited {
        child,
        port,
        _dir: dir,
    };
    wait_for("broker listening", || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    b
}

#[test]
fn four_hundred_partitions_work_under_a_600_descriptor_limit() {
    const PARTITIONS: i32 = 400;
    let b = start_with_fd_limit(600);
    let bootstrap = format!("127.0.0.1:{}", b.port);
    let mut cfg = rdkafka::config::ClientConfig::new();
    cfg.set("bootstrap.servers", &bootstrap)
        .set("socket.timeout.ms", "20000");
    let admin: AdminClient<DefaultClientContext> = cfg.create().unwrap();
    let topic = NewTopic::new("many", PARTITIONS, TopicReplication::Fixed(1));
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(60)));
    let r = block_on(admin.create_topics([&topic], &opts)).unwrap();
    assert!(r[0].is_ok(), "CreateTopics: {r:?}");
    let producer: ThreadedProducer<DefaultProducerContext> = cfg
        .clone()
        .set("acks", "all")
        .set("message.timeout.ms", "60000")
        .create()
        .unwrap();
    for p in 0..PARTITIONS {
        let v = format!("p{p}");
        producer
            .send(BaseRecord::<str, str>::to("many").payload(&v).partition(p))
            .map_err(|(e, _)| e)
            .unwrap();
    }
    assert_eq!(producer.flush(Duration::from_secs(120)), Ok(()));
    let consumer: BaseConsumer = cfg
        .clone()
        .set("group.id", "unused")
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "100")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition_offset("many", p, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&tpl).unwrap();
    let mut seen: BTreeMap<i32, String> = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while seen.len() < PARTITIONS as usize && Instant::now() < deadline {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
            let v = String::from_utf8_lossy(m.payload().unwrap_or_default()).to_string();
            seen.insert(m.partition(), v);
        }
    }
    assert_eq!(seen.len(), PARTITIONS as usize, "partitions read back");
    assert!(seen.iter().all(|(p, v)| *v == format!("p{p}")));
}

/// The partition directories of `topic` in `dir`.
fn partitions_in(dir: &Path, topic: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| n.rsplit_once('-').is_some_and(|(t, _)| t == topic))
        .collect();
    v.sort();
    v
}

/// The partition logs a log dir holds, of every topic (the test's own and `__consumer_offsets`,
/// which its group.id-carrying consumer makes the broker create), without the metadata log.
fn logs_in(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| n != "__cluster_metadata-0")
        .filter(|n| {
            n.rsplit_once('-')
                .is_some_and(|(_, p)| p.parse::<i32>().is_ok())
        })
        .count()
}

fn meta_property(dir: &Path, key: &str) -> String {
    let text = std::fs::read_to_string(dir.join("meta.properties")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("{key} in {}", dir.display()))
        .to_string()
}

#[test]
fn log_dirs_spread_partitions_and_survive_a_restart() {
    let dirs = tempfile::tempdir().unwrap();
    let a: PathBuf = dirs.path().join("a");
    let b: PathBuf = dirs.path().join("b");
    let setting = format!("log.dirs={},{}", a.display(), b.display());
    let mut broker = Broker::start_with(&[&setting]);
    create_topic(&broker, "first", 1, &[]);
    // One partition: the first dir (a tie goes to the earlier one).
    assert_eq!(partitions_in(&a, "first"), vec!["first-0"]);
    assert!(partitions_in(&b, "first").is_empty());
    // Three more: the dir with the fewest gets each, so both end with two.
    create_topic(&broker, "more", 3, &[]);
    let total = |d: &Path| partitions_in(d, "first").len() + partitions_in(d, "more").len();
    assert_eq!((total(&a), total(&b)), (2, 2));
    // Nothing in --data-dir, the metadata log in the first dir.
    assert!(partitions_in(&broker.data_dir(), "more").is_empty());
    assert!(a.join("__cluster_metadata-0").is_dir());
    assert!(!b.join("__cluster_metadata-0").exists());
    // Each dir: its own directory.id, the same cluster id, a lock.
    assert_ne!(
        meta_property(&a, "directory.id"),
        meta_property(&b, "directory.id")
    );
    assert_eq!(
        meta_property(&a, "cluster.id"),
        meta_property(&b, "cluster.id")
    );
    assert!(a.join(".lock").exists() && b.join(".lock").exists());

    let producer: ThreadedProducer<DefaultProducerContext> =
        client_config(&broker).set("acks", "all").create().unwrap();
    for p in 0..3 {
        for i in 0..5 {
            let v = format!("more-{p}-{i}");
            producer
                .send(BaseRecord::<str, str>::to("more").payload(&v).partition(p))
                .map_err(|(e, _)| e)
                .unwrap();
        }
    }
    producer
        .send(
            BaseRecord::<str, str>::to("first")
                .payload("first-0")
                .partition(0),
        )
        .map_err(|(e, _)| e)
        .unwrap();
    assert_eq!(producer.flush(Duration::from_secs(30)), Ok(()));
    drop(producer);

    assert_clean_exit(broker.stop());
    // A clean shutdown leaves every dir's marker and checkpoints, each naming its own logs.
    for d in [&a, &b] {
        assert!(d.join(".kafka_cleanshutdown").exists(), "{}", d.display());
        let rp = std::fs::read_to_string(d.join("recovery-point-offset-checkpoint")).unwrap();
        let names: Vec<&str> = rp
            .lines()
            .skip(2)
            .filter_map(|l| l.split(' ').next())
            .collect();
        assert_eq!(names.len(), logs_in(d), "{}: {rp}", d.display());
    }
    broker.restart();
    let ends: HashMap<i32, i64> = (0..3).map(|p| (p, 5)).collect();
    let got = consume_until(&broker, "more", &ends, Duration::from_secs(60));
    for p in 0..3 {
        let values: Vec<String> = got[&p]
            .iter()
            .map(|r| String::from_utf8(r.value.clone().unwrap()).unwrap())
            .collect();
        let want: Vec<String> = (0..5).map(|i| format!("more-{p}-{i}")).collect();
        assert_eq!(values, want, "partition {p}");
    }
    let first = consume_all(&broker, "first", 0);
    assert_eq!(first.len(), 1);
    // Still where they were: no partition moved dirs or was duplicated.
    assert_eq!((total(&a), total(&b)), (2, 2));
}

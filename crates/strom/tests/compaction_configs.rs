//! The compaction side of topic configs on real `strom` processes with real clients, against
//! Apache Kafka 4.4 where its jars and Java are here:
//! - CreateTopics / IncrementalAlterConfigs / DescribeConfigs of cleanup.policy and the cleaner
//!   keys (validation messages, min > max compaction lag, validate_only, APPEND/SUBTRACT,
//!   types, synonyms): the Java AdminClient's view, line for line equal to Kafka's;
//! - keyless records on a compacted topic: INVALID_RECORD with Kafka's record errors and
//!   message, for every codec (Java producer, raw Produce, librdkafka);
//! - `compact` -> `compact,delete` at run time turns retention on;
//! - `__consumer_offsets` / `__transaction_state` created with Kafka's configs, and
//!   `strom topics --describe` printing them as kafka-topics.sh does.

mod common;

use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use common::kafka_ref::{self, KafkaRef};
use common::{block_on, client_config, create_topic, raw_call, watermarks, Broker};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::types::RDKafkaErrorCode;
use strom_protocol::kafka::messages::produce_request::{PartitionProduceData, TopicProduceData};
use strom_protocol::kafka::messages::{ApiKey, ProduceRequest, ProduceResponse, TopicName};
use strom_protocol::kafka::protocol::StrBytes;
use strom_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

const CFG_PROBE: &str = include_str!("compaction_configs/CfgProbe.java");
const PRODUCE_PROBE: &str = include_str!("compaction_configs/ProduceProbe.java");

/// The tests of this file one at a time: each may start a JVM broker and Java clients, too
/// much at once for a small machine (client timeouts).
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Kafka 4.4 for the comparison, or why the test runs against Strom alone.
fn oracle() -> Option<KafkaRef> {
    match kafka_ref::oracle_available() {
        Ok(()) => Some(KafkaRef::start_with_props("log.cleaner.backoff.ms=100\n")),
        Err(why) => {
            eprintln!("SKIPPED the Kafka 4.4 comparison: {why}");
            None
        }
    }
}

fn classpath() -> String {
    let out = Command::new(kafka_ref::repo_root().join("scripts/kafka-ref.sh"))
        .arg("classpath")
        .output()
        .expect("kafka-ref.sh classpath");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// Runs a single-file Java program (Java 11+ source launch) with `args`, bounded; its stdout.
fn run_java(source: &str, class: &str, args: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join(format!("{class}.java"));
    std::fs::write(&src, source).unwrap();
    let out_path = dir.path().join("out");
    let mut child = Command::new("java")
        .arg("-Xmx256m")
        .arg("-cp")
        .arg(classpath())
        .arg(&src)
        .args(args)
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .expect("run java");
    let deadline = Instant::now() + Duration::from_secs(180);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{class} did not finish within 180 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let out = std::fs::read_to_string(&out_path).unwrap();
    assert!(
        status.success(),
        "{class} failed ({status}); output:\n{out}"
    );
    out
}

fn java_available() -> bool {
    match kafka_ref::oracle_available() {
        Ok(()) => true,
        Err(why) => {
            eprintln!("SKIPPED (the Java clients are needed): {why}");
            false
        }
    }
}

#[test]
fn topic_configs_answer_as_kafka() {
    let _serial = serial();
    if !java_available() {
        return;
    }
    let strom = Broker::start();
    let got = run_java(CFG_PROBE, "CfgProbe", &[&strom.bootstrap(), "cc-"]);
    // Checked here too, so the test says something when Kafka's answers differ.
    for line in [
        "create lag-conflict {min.compaction.lag.ms=10, max.compaction.lag.ms=5} -> InvalidConfigurationException: conflict topic config setting min.compaction.lag.ms (10) > max.compaction.lag.ms (5)",
        "create lag-conflict-v {min.compaction.lag.ms=10, max.compaction.lag.ms=5} validateOnly -> InvalidConfigurationException: conflict topic config setting min.compaction.lag.ms (10) > max.compaction.lag.ms (5)",
        "exists compact-v -> false",
        "alter x [SET, min.compaction.lag.ms, 10] validateOnly -> InvalidConfigurationException: conflict topic config setting min.compaction.lag.ms (10) > max.compaction.lag.ms (5)",
        "alter x [APPEND, min.compaction.lag.ms, 5] -> InvalidConfigurationException: Can't APPEND to key min.compaction.lag.ms because its type is not LIST.",
        "describe cc-compact min.cleanable.dirty.ratio = 0.01 DYNAMIC_TOPIC_CONFIG DOUBLE readOnly=false sensitive=false doc=true synonyms=[ConfigSynonym(name=min.cleanable.dirty.ratio, value=0.01, source=DYNAMIC_TOPIC_CONFIG), ConfigSynonym(name=log.cleaner.min.cleanable.ratio, value=0.5, source=DEFAULT_CONFIG)]",
    ] {
        let line = line.replace("describe cc-compact", "describe compact");
        assert!(got.contains(&line), "missing {line:?} in:\n{got}");
    }
    if let Some(kafka) = oracle() {
        let want = run_java(CFG_PROBE, "CfgProbe", &[&kafka.bootstrap(), "cc-"]);
        assert_lines_eq(&got, &want);
    }
}

fn assert_lines_eq(strom: &str, kafka: &str) {
    for (i, (s, k)) in strom.lines().zip(kafka.lines()).enumerate() {
        assert_eq!(s, k, "line {} differs (left Strom, right Kafka 4.4)", i + 1);
    }
    assert_eq!(strom.lines().count(), kafka.lines().count(), "line counts");
}

/// One uncompressed or compressed v2 batch of `keys` (None = no key).
fn batch(keys: &[Option<&str>], compression: Compression) -> Vec<u8> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let records: Vec<Record> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: i as i32,
            timestamp: now,
            key: k.map(|k| Bytes::copy_from_slice(k.as_bytes())),
            value: Some(Bytes::from_static(b"v")),
            headers: Default::default(),
        })
        .collect();
    let mut out = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut out,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression,
        },
    )
    .unwrap();
    out.to_vec()
}

/// Produce v9 of one batch; (error code, error message, [(batch index, message)], base offset).
type ProduceAnswer = (i16, Option<String>, Vec<(i32, Option<String>)>, i64);

fn raw_produce(bootstrap: &str, topic: &str, records: Vec<u8>) -> ProduceAnswer {
    let req = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(Bytes::from(records)))])]);
    // A topic just created may not have its leader yet (UNKNOWN_TOPIC_OR_PARTITION,
    // NOT_LEADER_OR_FOLLOWER): asked again, bounded.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut s = TcpStream::connect(bootstrap).unwrap();
        let resp: ProduceResponse = raw_call(&mut s, ApiKey::Produce, 9, &req);
        let p = &resp.responses[0].partition_responses[0];
        if (p.error_code == 3 || p.error_code == 6) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        return (
            p.error_code,
            p.error_message.as_ref().map(|m| m.to_string()),
            p.record_errors
                .iter()
                .map(|e| {
                    (
                        e.batch_index,
                        e.batch_index_error_message.as_ref().map(|m| m.to_string()),
                    )
                })
                .collect(),
            p.base_offset,
        );
    }
}

/// The raw Produce answers for keyless records in every codec, on a compacted topic created
/// here.
fn keyless_answers(bootstrap: &str, topic: &str) -> Vec<ProduceAnswer> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .unwrap();
    let t = NewTopic::new(topic, 1, TopicReplication::Fixed(1)).set("cleanup.policy", "compact");
    let res = block_on(admin.create_topics([&t], &AdminOptions::new())).unwrap();
    assert!(res[0].is_ok(), "{res:?}");
    let mut answers = Vec::new();
    for c in [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        answers.push(raw_produce(
            bootstrap,
            topic,
            batch(&[Some("a"), None, Some("b"), None, None, None], c),
        ));
        // A keyed batch goes through: the refusal left nothing behind.
        answers.push(raw_produce(bootstrap, topic, batch(&[Some("k")], c)));
    }
    answers
}

#[test]
fn keyless_records_refused_on_compacted_topics_as_kafka() {
    let _serial = serial();
    let strom = Broker::start();
    let got = keyless_answers(&strom.bootstrap(), "keyless");
    let one = "Compacted topic cannot accept message without key in topic partition keyless-0";
    let refused: ProduceAnswer = (
        87, // INVALID_RECORD
        Some(format!(
            "One or more records have been rejected due to 4 record errors in total, and only showing the first three errors at most: [RecordError(batchIndex=1, message='{one}'), RecordError(batchIndex=3, message='{one}'), RecordError(batchIndex=4, message='{one}')]"
        )),
        [1, 3, 4, 5].map(|i| (i, Some(one.to_string()))).to_vec(),
        -1,
    );
    for (i, a) in got.iter().enumerate() {
        if i % 2 == 0 {
            assert_eq!(a, &refused, "answer {i}");
        } else {
            assert_eq!((a.0, a.3), (0, i as i64 / 2), "keyed batch {i}: {a:?}");
        }
    }
    // A topic that is not compacted takes records without a key.
    create_topic(&strom, "plain", 1, &[]);
    let plain = raw_produce(
        &strom.bootstrap(),
        "plain",
        batch(&[None, None], Compression::None),
    );
    assert_eq!((plain.0, plain.3), (0, 0), "{plain:?}");

    // librdkafka sees INVALID_RECORD for the record.
    let producer: FutureProducer = client_config(&strom)
        .set("message.send.max.retries", "0")
        .create()
        .unwrap();
    let sent = block_on(producer.send(
        FutureRecord::<(), _>::to("keyless").payload("no key"),
        Duration::from_secs(10),
    ));
    let (err, _) = sent.expect_err("a keyless record on a compacted topic");
    assert_eq!(
        err.rdkafka_error_code(),
        Some(RDKafkaErrorCode::InvalidRecord),
        "{err}"
    );

    if !java_available() {
        return;
    }
    // The Java producer's view: per-record exceptions, as Kafka's.
    let java = run_java(PRODUCE_PROBE, "ProduceProbe", &[&strom.bootstrap(), "nk"]);
    assert!(
        java.contains(&format!(
            "zstd record 1 -> InvalidRecordException: {}",
            one.replace("keyless-0", "nk-0")
        )),
        "{java}"
    );
    if let Some(kafka) = oracle() {
        assert_eq!(got, keyless_answers(&kafka.bootstrap(), "keyless"));
        let want = run_java(PRODUCE_PROBE, "ProduceProbe", &[&kafka.bootstrap(), "nk"]);
        assert_lines_eq(&java, &want);
    }
}

fn strom_cli(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_strom"))
        .args(args)
        .env("RUST_LOG", "off")
        .output()
        .expect("run strom");
    assert!(
        out.status.success(),
        "strom {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn compact_then_compact_delete_turns_retention_on() {
    let _serial = serial();
    let strom = Broker::start_with(&["log.retention.check.interval.ms=100"]);
    create_topic(
        &strom,
        "ret",
        1,
        &[
            ("cleanup.policy", "compact"),
            ("retention.ms", "1000"),
            ("segment.bytes", "200"),
        ],
    );
    // Records an hour old: past retention.ms as soon as retention applies.
    let producer: FutureProducer = client_config(&strom).create().unwrap();
    let old = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
        - 3_600_000;
    for i in 0..30 {
        let key = format!("k{i}");
        block_on(
            producer.send(
                FutureRecord::to("ret")
                    .key(&key)
                    .payload("0123456789")
                    .timestamp(old),
                Duration::from_secs(10),
            ),
        )
        .expect("produce");
    }
    let segments = |dir: &Path| {
        std::fs::read_dir(dir)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .ends_with(".log")
            })
            .count()
    };
    let dir = strom.partition_dir("ret", 0);
    let before = segments(&dir);
    assert!(before > 3, "{before} segments");
    // Compacted only: several retention passes delete nothing.
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(watermarks(&strom, "ret", 0).0, 0);
    assert_eq!(segments(&dir), before);

    strom_cli(&[
        "topics",
        "--bootstrap-server",
        &strom.bootstrap(),
        "--alter",
        "--topic",
        "ret",
        "--config",
        "cleanup.policy=compact,delete",
    ]);
    // Now retention applies: everything but the active segment goes.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (low, high) = watermarks(&strom, "ret", 0);
        if low > 0 && segments(&dir) == 1 {
            assert_eq!(high, 30);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "retention did not start: low {low}, {} segments",
            segments(&dir)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn internal_topics_created_and_described_as_kafka() {
    let _serial = serial();
    let strom = Broker::start_with(&[
        "offsets.topic.num.partitions=2",
        "transaction.state.log.num.partitions=2",
    ]);
    let b = strom.bootstrap();
    // A group commit and a transactional producer make both internal topics.
    let producer: FutureProducer = client_config(&strom)
        .set("transactional.id", "t1")
        .create()
        .unwrap();
    rdkafka::producer::Producer::init_transactions(&producer, Duration::from_secs(30))
        .expect("init transactions");
    create_topic(&strom, "t", 1, &[]);
    let consumer = common::consumer(&strom);
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset("t", 0, rdkafka::Offset::Offset(0))
        .unwrap();
    rdkafka::consumer::Consumer::commit(&consumer, &tpl, rdkafka::consumer::CommitMode::Sync)
        .expect("commit");
    let describe = |topic: &str| {
        strom_cli(&[
            "topics",
            "--bootstrap-server",
            &b,
            "--describe",
            "--topic",
            topic,
        ])
        .lines()
        .next()
        .unwrap()
        .to_string()
    };
    let offsets = describe("__consumer_offsets");
    let txn = describe("__transaction_state");
    for (line, want) in [
        (&offsets, "cleanup.policy=compact"),
        (&offsets, "segment.bytes=104857600"),
        (&offsets, "compression.type=producer"),
        (&txn, "cleanup.policy=compact"),
        (&txn, "segment.bytes=104857600"),
        (&txn, "compression.type=uncompressed"),
        (&txn, "unclean.leader.election.enable=false"),
    ] {
        assert!(line.contains(want), "{want} missing: {line}");
    }
    if !java_available() {
        return;
    }
    // kafka-topics.sh prints the same lines against the same broker.
    for (topic, line) in [
        ("__consumer_offsets", &offsets),
        ("__transaction_state", &txn),
    ] {
        let out = Command::new("java")
            .arg("-Xmx128m")
            .arg("-cp")
            .arg(classpath())
            .arg("org.apache.kafka.tools.TopicCommand")
            .args(["--bootstrap-server", &b, "--describe", "--topic", topic])
            .stderr(Stdio::null())
            .output()
            .unwrap();
        let kafka_line = String::from_utf8(out.stdout).unwrap();
        assert_eq!(kafka_line.lines().next(), Some(line.as_str()));
    }
}

/// The `.log` bytes of a partition directory (Kafka's `UnifiedLog.size`).
fn log_file_bytes(dir: &Path) -> i64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".log"))
        .map(|e| e.metadata().unwrap().len() as i64)
        .sum()
}

/// `ld` with two partitions, three identical batches in partition 0.
fn log_dirs_workload(bootstrap: &str) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .unwrap();
    let t = NewTopic::new("ld", 2, TopicReplication::Fixed(1));
    let res = block_on(admin.create_topics([&t], &AdminOptions::new())).unwrap();
    assert!(res[0].is_ok(), "{res:?}");
    for _ in 0..3 {
        let a = raw_produce(
            bootstrap,
            "ld",
            batch(&[Some("a"), Some("b")], Compression::None),
        );
        assert_eq!(a.0, 0, "{a:?}");
    }
}

/// kafka-log-dirs.sh --describe (Kafka's LogDirsCommand): its JSON line, the log dir's path
/// replaced by `DIR`.
fn log_dirs_json(bootstrap: &str, dir: &str) -> String {
    let out = Command::new("java")
        .arg("-Xmx128m")
        .arg("-cp")
        .arg(classpath())
        .arg("org.apache.kafka.tools.LogDirsCommand")
        .args([
            "--bootstrap-server",
            bootstrap,
            "--describe",
            "--topic-list",
            "ld",
        ])
        .stderr(Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let json = text
        .lines()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON from LogDirsCommand: {text}"));
    json.replace(dir, "DIR")
}

#[test]
fn describe_log_dirs_reports_the_files() {
    use strom_protocol::kafka::messages::{DescribeLogDirsRequest, DescribeLogDirsResponse};
    let _serial = serial();
    let strom = Broker::start();
    log_dirs_workload(&strom.bootstrap());
    let data = std::path::absolute(strom.data_dir()).unwrap();
    let on_disk = log_file_bytes(&strom.partition_dir("ld", 0));
    assert!(on_disk > 0);

    for version in 1..=4 {
        let mut s = TcpStream::connect(strom.bootstrap()).unwrap();
        let resp: DescribeLogDirsResponse = raw_call(
            &mut s,
            ApiKey::DescribeLogDirs,
            version,
            &DescribeLogDirsRequest::default().with_topics(None),
        );
        assert_eq!(resp.results.len(), 1, "v{version}");
        let r = &resp.results[0];
        assert_eq!(r.error_code, 0);
        assert_eq!(r.log_dir.as_str(), data.to_str().unwrap());
        let ld = r
            .topics
            .iter()
            .find(|t| t.name.0.as_str() == "ld")
            .expect("ld listed");
        let sizes: Vec<(i32, i64, i64)> = ld
            .partitions
            .iter()
            .map(|p| (p.partition_index, p.partition_size, p.offset_lag))
            .collect();
        assert_eq!(sizes, [(0, on_disk, 0), (1, 0, 0)], "v{version}");
        if version >= 4 {
            assert!(r.total_bytes > 0 && (0..=r.total_bytes).contains(&r.usable_bytes));
        }
    }
    if !java_available() {
        return;
    }
    let got = log_dirs_json(&strom.bootstrap(), data.to_str().unwrap());
    assert!(
        got.contains(&format!(
            "{{\"partition\":\"ld-0\",\"size\":{on_disk},\"offsetLag\":0,\"isFuture\":false}}"
        )),
        "{got}"
    );
    if let Some(kafka) = oracle() {
        log_dirs_workload(&kafka.bootstrap());
        let kafka_dir = std::path::absolute(kafka.data_dir()).unwrap();
        assert_eq!(
            got,
            log_dirs_json(&kafka.bootstrap(), kafka_dir.to_str().unwrap())
        );
    }
}

/// The legacy AlterConfigs (whole-set) on the compaction keys, as raw v2 requests: per step
/// its error code and message. librdkafka reports every resource as altered (its result
/// ignores the per-resource error), so the answers are read off the wire.
fn legacy_alter_steps(bootstrap: &str) -> Vec<String> {
    use strom_protocol::kafka::messages::alter_configs_request::{
        AlterConfigsResource, AlterableConfig,
    };
    use strom_protocol::kafka::messages::{AlterConfigsRequest, AlterConfigsResponse};
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .unwrap();
    let t = NewTopic::new("lg", 1, TopicReplication::Fixed(1))
        .set("cleanup.policy", "compact")
        .set("min.compaction.lag.ms", "10")
        .set("max.compaction.lag.ms", "20");
    let res = block_on(admin.create_topics([&t], &AdminOptions::new())).unwrap();
    assert!(res[0].is_ok(), "{res:?}");
    let steps: [(bool, &[(&str, &str)]); 7] = [
        (
            true,
            &[
                ("min.compaction.lag.ms", "10"),
                ("max.compaction.lag.ms", "5"),
            ],
        ),
        (
            false,
            &[
                ("min.compaction.lag.ms", "10"),
                ("max.compaction.lag.ms", "5"),
            ],
        ),
        // Every config not named returns to its default: min 10 goes, max 5 alone is fine;
        // then min 6 alone is fine too (max back at its default).
        (false, &[("max.compaction.lag.ms", "5")]),
        (false, &[("min.compaction.lag.ms", "6")]),
        (false, &[("min.cleanable.dirty.ratio", "7")]),
        (false, &[("cleanup.policy", "compact,other")]),
        (
            false,
            &[
                ("cleanup.policy", "compact,delete"),
                ("min.cleanable.dirty.ratio", "0.2"),
            ],
        ),
    ];
    let mut lines = Vec::new();
    for (validate_only, step) in steps {
        let req = AlterConfigsRequest::default()
            .with_validate_only(validate_only)
            .with_resources(vec![AlterConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(StrBytes::from_static_str("lg"))
                .with_configs(
                    step.iter()
                        .map(|(k, v)| {
                            AlterableConfig::default()
                                .with_name(StrBytes::from_string(k.to_string()))
                                .with_value(Some(StrBytes::from_string(v.to_string())))
                        })
                        .collect(),
                )]);
        let mut s = TcpStream::connect(bootstrap).unwrap();
        let resp: AlterConfigsResponse = raw_call(&mut s, ApiKey::AlterConfigs, 2, &req);
        let r = &resp.responses[0];
        lines.push(format!(
            "{step:?} validate_only={validate_only} -> {} {:?}",
            r.error_code,
            r.error_message.as_ref().map(|m| m.to_string())
        ));
    }
    lines
}

#[test]
fn legacy_alter_configs_replace_the_set_as_kafka() {
    use rdkafka::admin::ResourceSpecifier;
    let _serial = serial();
    let strom = Broker::start();
    let got = legacy_alter_steps(&strom.bootstrap());
    let code = |i: usize| {
        got[i]
            .split(" -> ")
            .nth(1)
            .unwrap()
            .split(' ')
            .next()
            .unwrap()
    };
    assert_eq!(
        (0..7).map(code).collect::<Vec<_>>(),
        ["40", "40", "0", "0", "40", "40", "0"],
        "{got:#?}"
    );
    // The last set is the whole set now.
    let admin = common::admin(&strom);
    let described =
        block_on(admin.describe_configs([&ResourceSpecifier::Topic("lg")], &AdminOptions::new()))
            .unwrap();
    let entries = described[0].as_ref().unwrap();
    let value = |k: &str| entries.get(k).unwrap().value.clone().unwrap_or_default();
    assert_eq!(value("cleanup.policy"), "compact,delete");
    assert_eq!(value("min.cleanable.dirty.ratio"), "0.2");
    assert_eq!(value("max.compaction.lag.ms"), i64::MAX.to_string());
    assert_eq!(value("min.compaction.lag.ms"), "0");
    if let Some(kafka) = oracle() {
        assert_eq!(got, legacy_alter_steps(&kafka.bootstrap()));
    }
}

/// CreateTopics v7 answers (error code and message) for topics with these configs, on a
/// broker whose `log.cleaner.min.compaction.lag.ms` is 50.
fn create_with_broker_lag(bootstrap: &str) -> Vec<(i16, Option<String>)> {
    use strom_protocol::kafka::messages::create_topics_request::{
        CreatableTopic, CreatableTopicConfig,
    };
    use strom_protocol::kafka::messages::{CreateTopicsRequest, CreateTopicsResponse};
    let cases: [(&str, &[(&str, &str)]); 3] = [
        ("bl-conflict", &[("max.compaction.lag.ms", "10")]),
        ("bl-fine", &[("max.compaction.lag.ms", "50")]),
        (
            "bl-own-min",
            &[
                ("min.compaction.lag.ms", "5"),
                ("max.compaction.lag.ms", "10"),
            ],
        ),
    ];
    cases
        .iter()
        .map(|(name, configs)| {
            let req = CreateTopicsRequest::default()
                .with_timeout_ms(20_000)
                .with_topics(vec![CreatableTopic::default()
                    .with_name(TopicName(StrBytes::from_string(name.to_string())))
                    .with_num_partitions(1)
                    .with_replication_factor(1)
                    .with_configs(
                        configs
                            .iter()
                            .map(|(k, v)| {
                                CreatableTopicConfig::default()
                                    .with_name(StrBytes::from_string(k.to_string()))
                                    .with_value(Some(StrBytes::from_string(v.to_string())))
                            })
                            .collect(),
                    )]);
            let mut s = TcpStream::connect(bootstrap).unwrap();
            let resp: CreateTopicsResponse = raw_call(&mut s, ApiKey::CreateTopics, 7, &req);
            let t = &resp.topics[0];
            (
                t.error_code,
                t.error_message.as_ref().map(|m| m.to_string()),
            )
        })
        .collect()
}

#[test]
fn broker_compaction_lag_defaults_take_part_in_the_cross_check() {
    let _serial = serial();
    let strom = Broker::start_with(&["log.cleaner.min.compaction.lag.ms=50"]);
    let got = create_with_broker_lag(&strom.bootstrap());
    assert_eq!(
        got[0],
        (
            40,
            Some(
                "conflict topic config setting min.compaction.lag.ms (50) > max.compaction.lag.ms (10)"
                    .into()
            )
        )
    );
    assert_eq!((got[1].0, got[2].0), (0, 0), "{got:?}");
    if kafka_ref::oracle_available().is_ok() {
        let kafka = KafkaRef::start_with_props("log.cleaner.min.compaction.lag.ms=50\n");
        assert_eq!(got, create_with_broker_lag(&kafka.bootstrap()));
    }
}

//! `__consumer_offsets` as a running Strom broker writes it, read by Kafka's own tool: real
//! librdkafka consumers (a classic group with the `range` assignor and a KIP-848 group,
//! `group.protocol=consumer`) subscribe, consume and commit; after a clean stop every
//! `__consumer_offsets` segment that holds records is dumped by `strom dump-log
//! --offsets-decoder` and, when Kafka 4.4's jars and Java are there, by Kafka 4.4's
//! `kafka-dump-log.sh --offsets-decoder`. The outputs must be equal, line for line.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{client_config, create_topic, Broker};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::Message;

const TOPIC: &str = "dumped";
const PARTITIONS: i32 = 4;
const RECORDS: usize = 40;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Subscribes a consumer of `group` (with `protocol` settings), reads until it has seen
/// `RECORDS` records, commits synchronously and closes (leaving the group).
fn consume_and_commit(broker: &Broker, group: &str, protocol: &[(&str, &str)]) {
    let mut cfg = client_config(broker);
    cfg.set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest");
    for (k, v) in protocol {
        cfg.set(*k, *v);
    }
    let c: BaseConsumer = cfg.create().expect("consumer");
    c.subscribe(&[TOPIC]).expect("subscribe");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = 0;
    while seen < RECORDS {
        assert!(
            Instant::now() < deadline,
            "{group}: saw {seen} of {RECORDS}"
        );
        if let Some(m) = c.poll(Duration::from_millis(200)) {
            let m = m.expect("consume");
            assert!(m.payload().is_some());
            seen += 1;
        }
    }
    c.commit_consumer_state(CommitMode::Sync).expect("commit");
    drop(c);
}

/// The non-empty `__consumer_offsets` segment files under `data`.
fn offsets_segments(data: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for e in std::fs::read_dir(data).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if !name.starts_with("__consumer_offsets-") {
            continue;
        }
        for f in std::fs::read_dir(e.path()).unwrap().flatten() {
            let p = f.path();
            if p.extension().is_some_and(|x| x == "log") && std::fs::metadata(&p).unwrap().len() > 0
            {
                files.push(p);
            }
        }
    }
    files.sort();
    files
}

fn dump(cmd: &mut Command) -> String {
    let out = cmd.output().expect("run dump-log");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_broker_written_offsets_topic_prints_what_kafka_prints() {
    let mut broker = Broker::start_with(&["group.initial.rebalance.delay.ms=0"]);
    create_topic(&broker, TOPIC, PARTITIONS, &[]);
    let p: ThreadedProducer<DefaultProducerContext> =
        client_config(&broker).create().expect("producer");
    for i in 0..RECORDS {
        let (k, v) = (format!("k{i}"), format!("v{i}"));
        p.send(BaseRecord::to(TOPIC).key(&k).payload(&v))
            .map_err(|(e, _)| e)
            .unwrap();
    }
    assert_eq!(p.flush(Duration::from_secs(30)), Ok(()));
    drop(p);

    consume_and_commit(
        &broker,
        "dump-classic",
        &[("partition.assignment.strategy", "range")],
    );
    consume_and_commit(&broker, "dump-consumer", &[("group.protocol", "consumer")]);
    common::assert_clean_exit(broker.stop());

    let files = offsets_segments(&broker.data_dir());
    assert!(!files.is_empty(), "no __consumer_offsets segment with data");
    let libs = repo_root().join(".cache/kafka-4.4/libs/.complete");
    let java = Command::new("java").arg("-version").output().is_ok();
    let mut kinds = Vec::new();
    for f in &files {
        let file = f.to_str().unwrap();
        let ours = dump(Command::new(env!("CARGO_BIN_EXE_strom")).args([
            "dump-log",
            "--offsets-decoder",
            "--files",
            file,
        ]));
        for l in ours.lines().filter(|l| l.contains(" key: ")) {
            // The record type of each line: `key: {"type":"N",...`.
            if let Some(t) = l
                .split("\"type\":\"")
                .nth(1)
                .and_then(|r| r.split('"').next())
            {
                kinds.push(t.to_string());
            }
        }
        if !libs.exists() || !java {
            assert!(
                std::env::var_os("CI").is_none(),
                "Kafka 4.4's jars (scripts/kafka-ref.sh fetch) and java are needed in CI"
            );
            eprintln!("SKIPPED comparison with Kafka: no Kafka 4.4 jars or no java");
            continue;
        }
        let theirs = dump(
            Command::new(repo_root().join("scripts/kafka-dump-log.sh")).args([
                "--offsets-decoder",
                "--files",
                file,
            ]),
        );
        assert_eq!(ours, theirs, "strom vs Kafka 4.4 on {file}");
        eprintln!(
            "{file}: {} record lines equal",
            theirs.lines().filter(|l| l.contains(" key: ")).count()
        );
    }
    // Both groups' kinds of record were written and compared: offset commits (1), classic
    // group metadata (2) and the KIP-848 group's records (3 and up).
    kinds.sort();
    kinds.dedup();
    for want in ["1", "2", "3"] {
        assert!(
            kinds.iter().any(|k| k == want),
            "record types seen: {kinds:?}"
        );
    }
}

//! Seed 003's first experiment with librdkafka: two idempotent producer instances and one with
//! idempotence off each send 25 records, one at a time, to the same partition. The log, read by
//! `strom dump-log` and by Apache Kafka's own kafka-dump-log, shows the first instance's producer
//! id with baseSequence 0..24, the second a different id starting again at 0, and the third
//! producerId -1 with baseSequence -1.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;

const TOPIC: &str = "seed003";
const PER_PRODUCER: usize = 25;

/// Sends 25 records one at a time (each flushed before the next), as the seed's loop does.
fn send_25(broker: &Broker, idempotence: bool, tag: &str) {
    let (p, reports) = producer(
        broker,
        &[
            (
                "enable.idempotence",
                if idempotence { "true" } else { "false" },
            ),
            ("linger.ms", "0"),
        ],
    );
    for i in 0..PER_PRODUCER {
        let r = OutRec {
            partition: Some(0),
            key: None,
            value: Some(format!("{tag}-{i}").into_bytes()),
            ..Default::default()
        };
        send_one(&p, TOPIC, i, &r);
        rdkafka::producer::Producer::flush(&p, Duration::from_secs(30)).expect("flush");
    }
    assert_eq!(
        reports.ok_count(),
        PER_PRODUCER,
        "{tag}: every record acknowledged"
    );
}

/// `(producerId, baseSequence)` of every batch line a dump-log prints, in log order.
fn batches(dump: &str) -> Vec<(i64, i32)> {
    dump.lines()
        .filter(|l| l.starts_with("baseOffset:"))
        .map(|l| {
            let field = |name: &str| -> i64 {
                let at = l
                    .find(&format!(" {name}: "))
                    .unwrap_or_else(|| panic!("{name} in {l}"));
                l[at + name.len() + 3..]
                    .split_whitespace()
                    .next()
                    .unwrap()
                    .parse()
                    .unwrap()
            };
            assert!(l.contains("isvalid: true"), "{l}");
            (field("producerId"), field("baseSequence") as i32)
        })
        .collect()
}

fn check(dump: &str, tool: &str) -> Vec<(i64, i32)> {
    let got = batches(dump);
    assert_eq!(
        got.len(),
        3 * PER_PRODUCER,
        "{tool}: one batch per record:\n{dump}"
    );
    let mut by_producer: BTreeMap<i64, Vec<i32>> = BTreeMap::new();
    for (pid, seq) in &got {
        by_producer.entry(*pid).or_default().push(*seq);
    }
    let ids: Vec<i64> = by_producer.keys().copied().collect();
    assert_eq!(ids.len(), 3, "{tool}: three producer ids, got {ids:?}");
    let expect: Vec<i32> = (0..PER_PRODUCER as i32).collect();
    // Log order: first instance, second instance, then idempotence off.
    let first = got[0].0;
    let second = got[PER_PRODUCER].0;
    assert!(
        first >= 0 && second >= 0 && first != second,
        "{tool}: {first} {second}"
    );
    assert_eq!(by_producer[&first], expect, "{tool}: first instance");
    assert_eq!(by_producer[&second], expect, "{tool}: second instance");
    assert_eq!(
        by_producer[&-1],
        vec![-1; PER_PRODUCER],
        "{tool}: idempotence off"
    );
    got
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("run dump tool");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn two_idempotent_producers_and_one_without() {
    let mut broker = Broker::start();
    create_topic(&broker, TOPIC, 1, &[]);
    send_25(&broker, true, "first");
    send_25(&broker, true, "second");
    send_25(&broker, false, "plain");
    assert_clean_exit(broker.stop());

    let log = broker
        .partition_dir(TOPIC, 0)
        .join("00000000000000000000.log");
    let ours = run(Command::new(env!("CARGO_BIN_EXE_strom"))
        .arg("dump-log")
        .arg("--files")
        .arg(&log));
    let ours = check(&ours, "strom dump-log");

    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let kafka = run(Command::new(root.join("scripts/kafka-dump-log.sh"))
        .arg("--files")
        .arg(&log));
    let theirs = check(&kafka, "kafka-dump-log");
    assert_eq!(ours, theirs, "both tools see the same batches");
}

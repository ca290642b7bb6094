//! The coordinators' internal topics are compacted (issue 12): a group's offsets committed over
//! and over, a deleted group and a transactional id used for many transactions leave
//! `__consumer_offsets` and `__transaction_state` cleaned (their segments merged, superseded
//! records and tombstoned groups gone), and a broker restarted on the cleaned logs loads the same
//! state: the latest committed offsets, no deleted group, the transactional id's producer id
//! with its epoch bumped once by the next InitProducerId.

mod common;
mod compaction_util;

use std::process::Command;
use std::time::Duration;

use common::cluster::eventually;
use common::*;
use rdkafka::admin::AdminOptions;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::producer::DefaultProducerContext;
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};

const SETTINGS: &[&str] = &[
    "log.cleaner.backoff.ms=50",
    "offsets.topic.num.partitions=1",
    "offsets.topic.segment.bytes=4096",
    "transaction.state.log.num.partitions=1",
    "transaction.state.log.segment.bytes=4096",
];

fn checkpointed(broker: &Broker, topic: &str) -> Option<i64> {
    compaction_util::cleaner_checkpoint(&broker.data_dir(), topic, 0)
}

fn segments(broker: &Broker, topic: &str) -> usize {
    std::fs::read_dir(broker.partition_dir(topic, 0))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".log")
        })
        .count()
}

fn commit(broker: &Broker, group: &str, topic: &str, offset: i64) {
    let c: BaseConsumer = client_config(broker)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..4 {
        tpl.add_partition_offset(topic, p, Offset::Offset(offset + p as i64))
            .unwrap();
    }
    c.commit(&tpl, CommitMode::Sync).expect("commit");
}

fn committed(broker: &Broker, group: &str, topic: &str) -> Vec<i64> {
    let c: BaseConsumer = client_config(broker)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..4 {
        tpl.add_partition(topic, p);
    }
    let got = c
        .committed_offsets(tpl, Duration::from_secs(20))
        .expect("committed");
    got.elements()
        .iter()
        .map(|e| match e.offset() {
            Offset::Offset(o) => o,
            _ => -1,
        })
        .collect()
}

/// (producer id, producer epoch) of a transactional id, from `strom transactions describe`.
fn describe_txn(broker: &Broker, id: &str) -> (i64, i32) {
    let out = Command::new(env!("CARGO_BIN_EXE_strom"))
        .args(["transactions", "--bootstrap-server", &broker.bootstrap()])
        .args(["describe", "--transactional-id", id])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    let row: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    let col = |name: &str| {
        let i = header
            .iter()
            .position(|h| *h == name)
            .unwrap_or_else(|| panic!("{text}"));
        row[i].parse::<i64>().unwrap()
    };
    (col("ProducerId"), col("ProducerEpoch") as i32)
}

fn txn_producer(broker: &Broker, id: &str) -> ThreadedProducer<DefaultProducerContext> {
    let p: ThreadedProducer<DefaultProducerContext> = client_config(broker)
        .set("transactional.id", id)
        .set("linger.ms", "0")
        .create()
        .unwrap();
    p.init_transactions(Duration::from_secs(30))
        .expect("init_transactions");
    p
}

#[test]
fn coordinators_load_their_state_from_cleaned_internal_topics() {
    let mut broker = Broker::start_with(SETTINGS);
    let topic = "data";
    create_topic(&broker, topic, 4, &[]);
    for i in 0..150 {
        commit(&broker, "kept", topic, i * 10);
    }
    for i in 0..20 {
        commit(&broker, "deleted", topic, i);
    }
    let admin = admin(&broker);
    let r = block_on(admin.delete_groups(&["deleted"], &AdminOptions::new())).unwrap();
    assert!(r[0].is_ok(), "{r:?}");
    let p = txn_producer(&broker, "copier");
    for i in 0..60 {
        p.begin_transaction().unwrap();
        let v = format!("v{i}");
        p.send(BaseRecord::<str, str>::to(topic).payload(&v).partition(0))
            .map_err(|(e, _)| e)
            .unwrap();
        p.commit_transaction(Duration::from_secs(30))
            .expect("commit");
    }
    drop(p);
    let (pid, epoch) = describe_txn(&broker, "copier");
    // Both internal topics rolled many segments and were cleaned.
    for t in ["__consumer_offsets", "__transaction_state"] {
        let end = eventually("the internal topic cleaned", || {
            checkpointed(&broker, t).filter(|&o| o > 100)
        });
        eprintln!(
            "{t}: cleaned up to {end}, {} segments",
            segments(&broker, t)
        );
    }
    let before = committed(&broker, "kept", topic);
    assert_eq!(before, vec![1490, 1491, 1492, 1493]);
    broker.stop();
    broker.restart();
    // The restarted coordinators replayed the cleaned logs.
    assert_eq!(committed(&broker, "kept", topic), before);
    let c: BaseConsumer = client_config(&broker).create().unwrap();
    let list = c
        .fetch_group_list(Some("deleted"), Duration::from_secs(20))
        .expect("describe group");
    let states: Vec<String> = list
        .groups()
        .iter()
        .map(|g| g.state().to_string())
        .collect();
    assert!(states.iter().all(|s| s == "Dead"), "{states:?}");
    let p = txn_producer(&broker, "copier");
    drop(p);
    let (pid2, epoch2) = describe_txn(&broker, "copier");
    assert_eq!(pid2, pid, "the transactional id lost its producer id");
    assert_eq!(epoch2, epoch + 1);
}

//! Log compaction end to end (issue 12): a real `strom server`, librdkafka producing keyed
//! records (one per batch, so offsets are predictable) to a compacted topic with tiny segments,
//! the broker's cleaner threads cleaning it, a consumer reading it back from the beginning.
//!
//! What is checked is Kafka's compaction guarantee: below the cleaner's checkpoint (the first
//! dirty offset) every key appears once, at the offset of its latest record, with that record's
//! value; above it every record is still there; offsets never change; tombstones stay until
//! `delete.retention.ms` has passed after a clean, then go; and a crash at each step of a
//! segment swap loses or duplicates nothing (`STROM_CLEANER_CRASH_AT`).

mod common;
mod compaction_util;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

use common::cluster::eventually;
use common::*;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Message, Offset, TopicPartitionList};

/// Broker settings that make the cleaner look often.
const FAST_CLEANER: &[&str] = &["log.cleaner.backoff.ms=50"];

fn compacted_configs(delete_retention_ms: &str) -> Vec<(&'static str, String)> {
    vec![
        ("cleanup.policy", "compact".into()),
        ("segment.bytes", "2048".into()),
        ("min.cleanable.dirty.ratio", "0.01".into()),
        ("delete.retention.ms", delete_retention_ms.into()),
    ]
}

fn create(broker: &Broker, topic: &str, delete_retention_ms: &str) {
    let cfg = compacted_configs(delete_retention_ms);
    let cfg: Vec<(&str, &str)> = cfg.iter().map(|(k, v)| (*k, v.as_str())).collect();
    create_topic(broker, topic, 1, &cfg);
}

/// What was written: offset -> (key, value; None = tombstone).
type Written = BTreeMap<i64, (String, Option<String>)>;

/// Sends each record alone (a batch of its own) and records the offset it got.
fn produce(broker: &Broker, topic: &str, records: &[(String, Option<String>)], into: &mut Written) {
    produce_via(&broker.bootstrap(), topic, records, into)
}

fn produce_via(
    bootstrap: &str,
    topic: &str,
    records: &[(String, Option<String>)],
    into: &mut Written,
) {
    let p: FutureProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("message.timeout.ms", "60000")
        .set("linger.ms", "0")
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .create()
        .expect("producer");
    for (k, v) in records {
        let mut rec = FutureRecord::to(topic).key(k.as_str()).partition(0);
        if let Some(v) = v {
            rec = rec.payload(v.as_str());
        }
        let delivered = block_on(p.send(rec, Duration::from_secs(60))).expect("delivered");
        into.insert(delivered.offset, (k.clone(), v.clone()));
    }
}

/// Every record of partition 0 from the start to the current end: (offset, key, value).
fn read_all(broker: &Broker, topic: &str) -> Vec<(i64, String, Option<String>)> {
    read_all_via(&broker.bootstrap(), topic)
}

fn read_all_via(bootstrap: &str, topic: &str) -> Vec<(i64, String, Option<String>)> {
    let c: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "compaction-reader")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .create()
        .expect("consumer");
    let (_, high) = c
        .fetch_watermarks(topic, 0, Duration::from_secs(10))
        .expect("watermarks");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning)
        .unwrap();
    c.assign(&tpl).unwrap();
    let mut out = Vec::new();
    let deadline = Instant::now() + OP_TIMEOUT;
    while out.last().is_none_or(|(o, _, _)| *o + 1 < high) {
        assert!(
            Instant::now() < deadline,
            "read did not reach {high}: {out:?}"
        );
        match c.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => out.push((
                m.offset(),
                String::from_utf8(m.key().unwrap_or_default().to_vec()).unwrap(),
                m.payload().map(|v| String::from_utf8(v.to_vec()).unwrap()),
            )),
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) if high == 0 => break,
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => {}
            Some(Err(e)) => panic!("consume: {e}"),
            None => {}
        }
    }
    out
}

/// The partition's first dirty offset in the broker's `cleaner-offset-checkpoint`.
fn checkpointed(data_dir: &Path, topic: &str) -> Option<i64> {
    compaction_util::cleaner_checkpoint(data_dir, topic, 0)
}

/// Kafka's compaction guarantee, checked against what was written: offsets strictly
/// increasing and each one a record that was written there; every record at or above
/// `first_dirty` kept; below it, exactly the latest record of each key among the records below
/// it (tombstones included when `tombstones_kept`, none of them otherwise).
fn check_compacted(
    read: &[(i64, String, Option<String>)],
    written: &Written,
    first_dirty: i64,
    tombstones_kept: bool,
) {
    let mut latest_clean: HashMap<&str, i64> = HashMap::new();
    for (o, (k, _)) in written.range(..first_dirty) {
        latest_clean.insert(k, *o);
    }
    let mut prev = -1;
    for (o, k, v) in read {
        assert!(*o > prev, "offsets not increasing at {o}");
        prev = *o;
        let w = written
            .get(o)
            .unwrap_or_else(|| panic!("offset {o} was never written"));
        assert_eq!((&w.0, &w.1), (k, v), "record at {o} changed");
        if *o < first_dirty {
            assert_eq!(
                latest_clean[k.as_str()],
                *o,
                "key {k} at {o} is not its latest record below {first_dirty}"
            );
            if v.is_none() {
                assert!(
                    tombstones_kept,
                    "tombstone of {k} at {o} outlived delete.retention.ms"
                );
            }
        }
    }
    let read_offsets: std::collections::HashSet<i64> = read.iter().map(|r| r.0).collect();
    for (o, (k, v)) in written {
        let must = *o >= first_dirty
            || (latest_clean[k.as_str()] == *o && (v.is_some() || tombstones_kept));
        if must {
            assert!(read_offsets.contains(o), "record {o} ({k}) was lost");
        }
    }
}

/// Reads everything while the cleaner's checkpoint stays put: (first dirty offset, records).
fn read_stable(broker: &Broker, topic: &str) -> (i64, Vec<(i64, String, Option<String>)>) {
    eventually("a read between two cleans", || {
        let before = checkpointed(&broker.data_dir(), topic)?;
        let read = read_all(broker, topic);
        (checkpointed(&broker.data_dir(), topic) == Some(before)).then_some((before, read))
    })
}

/// After a crash: offsets strictly increasing, each record one written at that offset, and the
/// latest record of every key present (what was superseded may or may not be there yet).
fn check_nothing_lost(read: &[(i64, String, Option<String>)], written: &Written, step: &str) {
    let mut prev = -1;
    for (o, k, v) in read {
        assert!(*o > prev, "{step}: offsets not increasing at {o}");
        prev = *o;
        let w = written
            .get(o)
            .unwrap_or_else(|| panic!("{step}: offset {o} never written"));
        assert_eq!((&w.0, &w.1), (k, v), "{step}: record at {o} changed");
    }
    let mut latest: HashMap<&str, i64> = HashMap::new();
    for (o, (k, _)) in written {
        latest.insert(k, *o);
    }
    for (k, o) in latest {
        assert!(
            read.iter().any(|r| r.0 == o),
            "{step}: latest record of {k} at {o} lost"
        );
    }
}

fn rounds(keys: usize, rounds: usize, tombstones: usize) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    for r in 0..rounds {
        for k in 0..keys {
            out.push((format!("key-{k:03}"), Some(format!("value-{k}-{r}"))));
        }
    }
    for k in 0..tombstones {
        out.push((format!("key-{k:03}"), None));
    }
    out
}

/// Waits until the cleaner's checkpoint for the topic reaches `at_least`.
fn wait_cleaned(broker: &Broker, topic: &str, at_least: i64) -> i64 {
    eventually("the cleaner's checkpoint to reach the dirty end", || {
        checkpointed(&broker.data_dir(), topic).filter(|&o| o >= at_least)
    })
}

#[test]
fn the_cleaner_keeps_the_latest_record_of_each_key_at_its_offset() {
    let mut broker = Broker::start_with(FAST_CLEANER);
    let topic = "compacted-latest";
    create(&broker, topic, "86400000");
    let mut written = Written::new();
    produce(&broker, topic, &rounds(20, 15, 4), &mut written);
    // More records so that all of the above leaves the active segment.
    produce(&broker, topic, &rounds(2, 20, 0), &mut written);
    let last = *written.keys().last().unwrap();
    wait_cleaned(&broker, topic, 300);
    let (first_dirty, read) = read_stable(&broker, topic);
    assert!(first_dirty <= last + 1);
    check_compacted(&read, &written, first_dirty, true);
    assert!(
        read.len() < written.len() / 2,
        "nothing was removed: {} records",
        read.len()
    );
    // A restart reads the cleaned segments and keeps the checkpoint.
    broker.stop();
    broker.restart();
    let again = read_all(&broker, topic);
    assert_eq!(again, read);
    assert_eq!(checkpointed(&broker.data_dir(), topic), Some(first_dirty));
}

#[test]
fn tombstones_go_once_delete_retention_has_passed_after_a_clean() {
    let broker = Broker::start_with(FAST_CLEANER);
    let topic = "compacted-tombstones";
    create(&broker, topic, "0");
    let mut written = Written::new();
    produce(&broker, topic, &rounds(10, 5, 10), &mut written);
    let tombstones_end = *written.keys().last().unwrap();
    // The first clean stamps the tombstones' delete horizon (now + 0); a later clean, made
    // necessary by new dirty records, removes them.
    let mut more = 0;
    let _ = eventually("the tombstones to be removed", || {
        produce(&broker, topic, &rounds(3, 4, 0), &mut written);
        more += 1;
        assert!(more < 200, "tombstones never removed");
        std::thread::sleep(Duration::from_millis(100));
        let read = read_all(&broker, topic);
        let left = read
            .iter()
            .filter(|(o, _, v)| *o <= tombstones_end && v.is_none())
            .count();
        (left == 0).then_some(read)
    });
    let (first_dirty, read) = read_stable(&broker, topic);
    assert!(first_dirty > tombstones_end);
    // Everything of keys 0..10 is gone (their last records were tombstones).
    assert!(read
        .iter()
        .all(|(o, k, _)| *o > tombstones_end || !k.starts_with("key-00")));
    check_compacted(&read, &written, first_dirty, false);
}

/// A crash at each step of the swap (`.cleaned` written; renamed `.swap`; old segments renamed
/// `.deleted`; `.swap` renamed into place) loses no record and duplicates none: after the
/// restart the log reads as the model says, and the cleaner finishes the job.
#[test]
fn a_crash_at_each_step_of_the_swap_loses_and_duplicates_nothing() {
    for step in [
        "after_cleaned",
        "after_swap_rename",
        "after_old_deleted",
        "after_swap_done",
    ] {
        // Written with the cleaner off, so that the first clean happens with the failpoint armed.
        let mut broker = Broker::start_with(&["log.cleaner.enable=false"]);
        let topic = format!("compacted-crash-{}", step.replace('_', "-"));
        create(&broker, &topic, "86400000");
        let mut written = Written::new();
        produce(&broker, &topic, &rounds(8, 12, 0), &mut written);
        broker.stop();
        broker.set_settings(FAST_CLEANER);
        broker.set_env("STROM_CLEANER_CRASH_AT", Some(step));
        // The failpoint may fire before the first connection attempt could see it listening.
        broker.restart_without_waiting();
        let status = broker.wait_exit(Duration::from_secs(60));
        assert!(status.is_some(), "{step}: the failpoint never fired");
        let files: Vec<String> = std::fs::read_dir(broker.partition_dir(&topic, 0))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        broker.set_env("STROM_CLEANER_CRASH_AT", None);
        broker.restart();
        let read = read_all(&broker, &topic);
        // Nothing is lost or duplicated whatever the cleaner had done before the crash.
        eprintln!("{step}: files at the crash: {files:?}");
        check_nothing_lost(&read, &written, step);
        wait_cleaned(&broker, &topic, 50);
        let (first_dirty, read) = read_stable(&broker, &topic);
        check_compacted(&read, &written, first_dirty, true);
    }
}

/// A follower that was down while the leader cleaned catches up across the gaps cleaning left
/// (its appends take batches whose offsets jump), rejoins the ISR, and after the leader is
/// killed the new leader serves every key's latest record at its offset.
#[test]
fn a_follower_catches_up_from_a_cleaned_leader_and_can_take_over() {
    use common::cluster::{isr, metadata, Cluster};
    let mut c = Cluster::start_with(
        3,
        &["log.cleaner.backoff.ms=50", "replica.lag.time.max.ms=2000"],
    );
    common::cluster::wait_all_registered(&c, 3);
    let topic = "compacted-replicated";
    let admin: rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext> =
        c.config(&[1, 2, 3]).create().unwrap();
    let mut t = rdkafka::admin::NewTopic::new(topic, 1, rdkafka::admin::TopicReplication::Fixed(3));
    for (k, v) in compacted_configs("86400000") {
        t = t.set(k, Box::leak(v.into_boxed_str()));
    }
    let opts = rdkafka::admin::AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let r = block_on(admin.create_topics([&t], &opts)).unwrap();
    assert!(r[0].is_ok(), "{r:?}");
    let leader = eventually("a leader with a full ISR", || {
        let (_, _, leaders) = metadata(&c, 1, topic);
        let l = *leaders.get(&0)?;
        (l > 0 && isr(&c, 1, topic) == vec![1, 2, 3]).then_some(l)
    });
    let follower = (1..=3).find(|&n| n != leader).unwrap();
    let alive: Vec<i32> = (1..=3).filter(|&n| n != follower).collect();
    c.kill(follower);
    let mut written = Written::new();
    produce_via(
        &c.bootstrap(&alive),
        topic,
        &rounds(20, 15, 3),
        &mut written,
    );
    produce_via(&c.bootstrap(&alive), topic, &rounds(2, 20, 0), &mut written);
    eventually("the leader to clean", || {
        checkpointed(&c.data_dir(leader), topic).filter(|&o| o >= 250)
    });
    c.restart(follower);
    eventually("the follower back in the ISR", || {
        (isr(&c, leader, topic) == vec![1, 2, 3]).then_some(())
    });
    // The follower's own log: only records the leader still had, none changed, and nothing
    // missing at or above the leader's first dirty offset.
    c.kill(leader);
    let rest: Vec<i32> = (1..=3).filter(|&n| n != leader).collect();
    eventually("a new leader", || {
        let (_, _, leaders) = metadata(&c, rest[0], topic);
        leaders
            .get(&0)
            .filter(|&&l| l > 0 && l != leader)
            .map(|_| ())
    });
    let read = read_all_via(&c.bootstrap(&rest), topic);
    check_nothing_lost(&read, &written, "after failover");
    // Every node cleans its own replica; records above all of their first dirty offsets were
    // cleaned by none and must all be there.
    let cleaned_to = (1..=3)
        .filter_map(|n| checkpointed(&c.data_dir(n), topic))
        .max()
        .unwrap();
    let offsets: std::collections::HashSet<i64> = read.iter().map(|r| r.0).collect();
    for o in written.range(cleaned_to..).map(|(o, _)| o) {
        assert!(
            offsets.contains(o),
            "record {o} above the cleaned range lost"
        );
    }
    assert!(
        read.len() < written.len(),
        "the follower got the uncleaned log"
    );
}

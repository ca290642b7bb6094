//! Classic and KIP-848 members in one group against a real Strom broker with real librdkafka
//! consumers: a classic consumer (`cooperative-sticky`) owns a 6-partition topic; a
//! `group.protocol=consumer` consumer joins the same group, which is upgraded to a consumer
//! group; both consume, every partition owned by exactly one of them, nothing skipped; then
//! the consumer-protocol member leaves, the group is downgraded and the classic consumer gets
//! every partition back.
//!
//! Not compared with Kafka 4.4 here (the oracle run of the same scenario is not written yet).

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::{client_config, create_topic, Broker};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::Message;

const TOPIC: &str = "migrated";
const GROUP: &str = "migrating-group";
const PARTITIONS: i32 = 6;
const RECORDS: usize = 60;

fn consumer(broker: &Broker, settings: &[(&str, &str)]) -> BaseConsumer {
    let mut cfg = client_config(broker);
    cfg.set("group.id", GROUP)
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "true")
        .set("auto.commit.interval.ms", "200");
    for (k, v) in settings {
        cfg.set(*k, *v);
    }
    let c: BaseConsumer = cfg.create().expect("consumer");
    c.subscribe(&[TOPIC]).expect("subscribe");
    c
}

fn owned(c: &BaseConsumer) -> BTreeSet<i32> {
    c.assignment()
        .map(|l| l.elements().iter().map(|e| e.partition()).collect())
        .unwrap_or_default()
}

/// Polls every consumer once, recording what each reads.
fn poll_all(cs: &[&BaseConsumer], seen: &mut BTreeSet<(i32, i64)>) {
    for c in cs {
        if let Some(m) = c.poll(Duration::from_millis(100)) {
            let m = m.expect("consume");
            seen.insert((m.partition(), m.offset()));
        }
    }
}

#[test]
fn a_classic_group_is_upgraded_and_downgraded_with_real_consumers() {
    let broker = Broker::start_with(&["group.initial.rebalance.delay.ms=0"]);
    create_topic(&broker, TOPIC, PARTITIONS, &[]);
    let p: ThreadedProducer<DefaultProducerContext> =
        client_config(&broker).create().expect("producer");
    for i in 0..RECORDS {
        let v = format!("v{i}");
        p.send(
            BaseRecord::<(), String>::to(TOPIC)
                .partition(i as i32 % PARTITIONS)
                .payload(&v),
        )
        .map_err(|(e, _)| e)
        .unwrap();
    }
    assert_eq!(p.flush(Duration::from_secs(30)), Ok(()));
    drop(p);
    let all: BTreeSet<i32> = (0..PARTITIONS).collect();

    // 1. The classic consumer alone.
    let classic = consumer(
        &broker,
        &[
            ("partition.assignment.strategy", "cooperative-sticky"),
            ("session.timeout.ms", "10000"),
        ],
    );
    let mut seen = BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while owned(&classic) != all {
        assert!(Instant::now() < deadline, "classic: {:?}", owned(&classic));
        poll_all(&[&classic], &mut seen);
    }

    // 2. A KIP-848 consumer joins: both end up with a share, never the same partition.
    let modern = consumer(&broker, &[("group.protocol", "consumer")]);
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        poll_all(&[&classic, &modern], &mut seen);
        let (a, b) = (owned(&classic), owned(&modern));
        assert!(
            a.is_disjoint(&b),
            "partitions owned twice: classic {a:?}, consumer {b:?}"
        );
        if !a.is_empty() && !b.is_empty() && a.union(&b).count() == all.len() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no shared assignment: classic {a:?}, consumer {b:?}"
        );
    }
    // Both consume until every record was read by someone.
    let deadline = Instant::now() + Duration::from_secs(60);
    while seen.len() < RECORDS {
        assert!(
            Instant::now() < deadline,
            "read {} of {RECORDS}",
            seen.len()
        );
        poll_all(&[&classic, &modern], &mut seen);
        assert!(owned(&classic).is_disjoint(&owned(&modern)));
    }
    for part in 0..PARTITIONS {
        let n = seen.iter().filter(|(p, _)| *p == part).count();
        assert_eq!(n, RECORDS / PARTITIONS as usize, "partition {part}");
    }

    // 3. The consumer-protocol member leaves: the group is downgraded and the classic
    // consumer gets everything.
    modern.unsubscribe();
    drop(modern);
    let deadline = Instant::now() + Duration::from_secs(90);
    while owned(&classic) != all {
        assert!(Instant::now() < deadline, "classic: {:?}", owned(&classic));
        poll_all(&[&classic], &mut seen);
    }
    drop(classic);
}

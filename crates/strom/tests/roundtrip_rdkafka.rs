//! Round trips through the real `strom` binary with librdkafka (the `rdkafka` crate): admin
//! CreateTopics, Metadata, Produce (acks=all, every compression codec), Fetch with manual
//! assignment (no consumer group), ListOffsets by timestamp and watermarks.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;
use rdkafka::admin::{AdminOptions, NewTopic, TopicReplication};
use rdkafka::consumer::Consumer;
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn create_result(
    broker: &Broker,
    topic: NewTopic<'_>,
    validate_only: bool,
) -> Result<String, (String, RDKafkaErrorCode)> {
    let admin = admin(broker);
    let opts = AdminOptions::new()
        .operation_timeout(Some(Duration::from_secs(20)))
        .validate_only(validate_only);
    let mut res = block_on(admin.create_topics([&topic], &opts)).expect("CreateTopics request");
    assert_eq!(res.len(), 1);
    res.remove(0)
}

#[test]
fn admin_create_topics_validate_duplicate_invalid() {
    let broker = Broker::start_with(&["auto.create.topics.enable=false"]);

    // validate_only: accepted but not created.
    let r = create_result(
        &broker,
        NewTopic::new("only-validated", 3, TopicReplication::Fixed(1)),
        true,
    );
    assert_eq!(
        r,
        Ok("only-validated".to_string()),
        "validate_only CreateTopics"
    );
    let md = consumer(&broker)
        .fetch_metadata(None, Duration::from_secs(20))
        .expect("metadata");
    assert!(
        md.topics().iter().all(|t| t.name() != "only-validated"),
        "validate_only must not create the topic; metadata lists it"
    );

    // Real creation.
    create_topic(&broker, "created", 3, &[]);

    // Duplicate.
    let r = create_result(
        &broker,
        NewTopic::new("created", 3, TopicReplication::Fixed(1)),
        false,
    );
    assert_eq!(
        r,
        Err(("created".to_string(), RDKafkaErrorCode::TopicAlreadyExists)),
        "duplicate CreateTopics"
    );
    // Duplicate with validate_only is also reported.
    let r = create_result(
        &broker,
        NewTopic::new("created", 1, TopicReplication::Fixed(1)),
        true,
    );
    assert_eq!(
        r,
        Err(("created".to_string(), RDKafkaErrorCode::TopicAlreadyExists)),
        "duplicate CreateTopics (validate_only)"
    );

    // Invalid names (Kafka's rules: [a-zA-Z0-9._-]{1,249}, not "." or "..").
    let long = "x".repeat(250);
    for bad in ["bad name", "bad/name", "..", ".", long.as_str(), "ümlaut"] {
        let r = create_result(
            &broker,
            NewTopic::new(bad, 1, TopicReplication::Fixed(1)),
            false,
        );
        assert_eq!(
            r,
            Err((bad.to_string(), RDKafkaErrorCode::InvalidTopic)),
            "CreateTopics with invalid name {bad:?}"
        );
    }

    // Nothing invalid was created; the real topic has 3 partitions.
    let md = consumer(&broker)
        .fetch_metadata(None, Duration::from_secs(20))
        .expect("metadata");
    let names: BTreeSet<&str> = md.topics().iter().map(|t| t.name()).collect();
    assert!(names.contains("created"), "topics: {names:?}");
    for n in &names {
        assert!(
            !n.contains(' ') && !n.contains('/') && *n != "..",
            "invalid topic {n:?} appears in metadata"
        );
    }
    let t = md.topics().iter().find(|t| t.name() == "created").unwrap();
    assert_eq!(t.partitions().len(), 3);
}

#[test]
fn metadata_lists_broker_and_partitions() {
    let broker = Broker::start();
    create_topic(&broker, "meta", 3, &[]);
    let c = consumer(&broker);
    let md = c
        .fetch_metadata(None, Duration::from_secs(20))
        .expect("metadata");
    assert_eq!(md.brokers().len(), 1, "one broker");
    let b = &md.brokers()[0];
    assert_eq!(b.id(), 1, "default node id");
    assert_eq!(b.host(), "127.0.0.1");
    assert_eq!(b.port() as u16, broker.port());

    let md = c
        .fetch_metadata(Some("meta"), Duration::from_secs(20))
        .expect("metadata for one topic");
    assert_eq!(md.topics().len(), 1);
    let t = &md.topics()[0];
    assert_eq!(t.name(), "meta");
    assert!(t.error().is_none(), "topic error {:?}", t.error());
    let mut ids: Vec<i32> = t.partitions().iter().map(|p| p.id()).collect();
    ids.sort();
    assert_eq!(ids, vec![0, 1, 2]);
    for p in t.partitions() {
        assert!(
            p.error().is_none(),
            "partition {} error {:?}",
            p.id(),
            p.error()
        );
        assert_eq!(p.leader(), 1, "leader of partition {}", p.id());
        assert_eq!(p.replicas(), &[1], "replicas of partition {}", p.id());
        assert_eq!(p.isr(), &[1], "isr of partition {}", p.id());
    }
}

#[test]
fn metadata_auto_creates_topic_with_num_partitions() {
    let broker = Broker::start_with(&["num.partitions=2", "auto.create.topics.enable=true"]);
    // A producer's metadata request asks for auto-creation.
    let recs = simple_records("auto", 10, None);
    let reports = produce_ok(&broker, "auto-created", &[], &recs);
    assert_eq!(reports.len(), 10);
    wait_for_topic(&broker, "auto-created", 2);
}

#[test]
fn produce_consume_100k_keyed_lz4_with_headers() {
    const N: usize = 100_000;
    const TOPIC: &str = "roundtrip";
    let broker = Broker::start();
    create_topic(&broker, TOPIC, 3, &[]);

    let recs: Vec<OutRec> = (0..N)
        .map(|i| {
            let mut headers = vec![
                ("idx".to_string(), Some(i.to_string().into_bytes())),
                ("src".to_string(), Some(b"strom-it".to_vec())),
            ];
            if i % 7 == 0 {
                headers.push(("nil".to_string(), None));
            }
            OutRec {
                partition: None,
                key: Some(format!("key-{i}").into_bytes()),
                value: Some(format!("value-{i}-{}", "v".repeat(i % 61)).into_bytes()),
                headers,
                timestamp: None,
            }
        })
        .collect();

    let reports = produce_ok(
        &broker,
        TOPIC,
        &[
            ("compression.type", "lz4"),
            ("linger.ms", "20"),
            ("batch.num.messages", "2000"),
        ],
        &recs,
    );

    // Delivery reports: per partition, offsets are exactly 0..n and increase in send order.
    let mut by_part: HashMap<i32, Vec<(i64, usize)>> = HashMap::new();
    for (i, &(p, o)) in reports.iter().enumerate() {
        assert!((0..3).contains(&p), "record {i} delivered to partition {p}");
        by_part.entry(p).or_default().push((o, i));
    }
    assert_eq!(by_part.len(), 3, "keys should spread over all 3 partitions");
    let mut ends = HashMap::new();
    for (p, v) in &by_part {
        for (j, &(o, _)) in v.iter().enumerate() {
            assert_eq!(
                o, j as i64,
                "partition {p}: delivery offsets must be 0..n in send order"
            );
        }
        ends.insert(*p, v.len() as i64);
        assert_eq!(
            watermarks(&broker, TOPIC, *p),
            (0, v.len() as i64),
            "watermarks of partition {p}"
        );
    }

    let got = consume_until(&broker, TOPIC, &ends, Duration::from_secs(180));
    let mut total = 0;
    for (p, v) in &by_part {
        let recs_p = &got[p];
        assert_eq!(recs_p.len(), v.len(), "record count of partition {p}");
        assert_contiguous(recs_p, 0);
        let want: Vec<OutRec> = v.iter().map(|&(_, i)| recs[i].clone()).collect();
        assert_records_eq(recs_p, &want);
        total += recs_p.len();
    }
    assert_eq!(total, N);
}

#[test]
fn every_compression_codec_round_trips() {
    let broker = Broker::start();
    let mut skipped = Vec::new();
    for codec in ["none", "gzip", "snappy", "lz4", "zstd"] {
        let topic = format!("codec-{codec}");
        // Creating the producer fails if this librdkafka build lacks the codec (zstd).
        let probe = rdkafka::config::ClientConfig::new()
            .set("bootstrap.servers", broker.bootstrap())
            .set("compression.type", codec)
            .create::<rdkafka::producer::BaseProducer>();
        if let Err(e) = probe {
            eprintln!("skipping codec {codec}: this librdkafka build does not support it ({e})");
            skipped.push(codec);
            continue;
        }
        create_topic(&broker, &topic, 1, &[]);
        let recs: Vec<OutRec> = (0..3000)
            .map(|i| OutRec {
                partition: Some(0),
                key: if i % 5 == 0 {
                    None
                } else {
                    Some(format!("k{i}").into_bytes())
                },
                value: Some(format!("{codec} payload {i} {}", "abc".repeat(i % 40)).into_bytes()),
                headers: vec![("codec".to_string(), Some(codec.as_bytes().to_vec()))],
                timestamp: None,
            })
            .collect();
        let reports = produce_ok(&broker, &topic, &[("compression.type", codec)], &recs);
        for (i, r) in reports.iter().enumerate() {
            assert_eq!(*r, (0, i as i64), "{codec}: delivery of record {i}");
        }
        let got = consume_all(&broker, &topic, 0);
        assert_contiguous(&got, 0);
        assert_records_eq(&got, &recs);
    }
    assert!(skipped.len() <= 1, "codecs skipped: {skipped:?}");
}

#[test]
fn list_offsets_by_timestamp_and_watermarks() {
    const TOPIC: &str = "times";
    let broker = Broker::start();
    create_topic(&broker, TOPIC, 1, &[]);
    let base = now_ms() - 3_600_000;
    let recs: Vec<OutRec> = (0..100)
        .map(|i| OutRec {
            partition: Some(0),
            key: Some(format!("t{i}").into_bytes()),
            value: Some(format!("at {}", base + i * 1000).into_bytes()),
            headers: vec![],
            timestamp: Some(base + i * 1000),
        })
        .collect();
    // Ten produce calls of ten records each, so timestamps are looked up across and within batches.
    let (p, reports) = producer(&broker, &[("linger.ms", "50")]);
    for chunk in 0..10 {
        for (i, r) in recs.iter().enumerate().skip(chunk * 10).take(10) {
            send_one(&p, TOPIC, i, r);
        }
        rdkafka::producer::Producer::flush(&p, Duration::from_secs(30)).expect("flush");
    }
    let snap = reports.snapshot();
    for i in 0..100 {
        assert_eq!(
            snap.get(&i),
            Some(&Ok((0, i as i64))),
            "delivery of record {i}"
        );
    }

    let c = consumer(&broker);
    assert_eq!(
        c.fetch_watermarks(TOPIC, 0, Duration::from_secs(20))
            .unwrap(),
        (0, 100),
        "earliest/latest"
    );

    let lookup = |ts: i64| -> Offset {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(TOPIC, 0, Offset::Offset(ts))
            .unwrap();
        let r = c
            .offsets_for_times(tpl, Duration::from_secs(20))
            .unwrap_or_else(|e| panic!("offsets_for_times({ts}): {e}"));
        let e = r.find_partition(TOPIC, 0).expect("partition in answer");
        assert!(
            e.error().is_ok(),
            "offsets_for_times({ts}) error {:?}",
            e.error()
        );
        e.offset()
    };
    assert_eq!(
        lookup(base - 10_000),
        Offset::Offset(0),
        "before all records"
    );
    assert_eq!(
        lookup(base),
        Offset::Offset(0),
        "exactly the first timestamp"
    );
    assert_eq!(lookup(base + 1), Offset::Offset(1), "just after the first");
    assert_eq!(
        lookup(base + 37_000),
        Offset::Offset(37),
        "exact match inside a batch"
    );
    assert_eq!(
        lookup(base + 36_500),
        Offset::Offset(37),
        "between two records"
    );
    assert_eq!(
        lookup(base + 40_000),
        Offset::Offset(40),
        "first record of a batch"
    );
    assert_eq!(
        lookup(base + 39_999),
        Offset::Offset(40),
        "just before a batch"
    );
    assert_eq!(lookup(base + 99_000), Offset::Offset(99), "last record");
    assert_eq!(
        lookup(base + 99_001),
        Offset::End,
        "after all records: no offset (-1)"
    );

    let got = consume_all(&broker, TOPIC, 0);
    assert_contiguous(&got, 0);
    assert_records_eq(&got, &recs);
}

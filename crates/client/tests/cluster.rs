//! The client against a real `strom server`: connection handshake and pipelining, admin
//! operations, producer/consumer round trips with every compression codec and acks setting.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use common::Broker;
use strom_client::admin::AlterConfigOp;
use strom_client::kafka::messages::ApiKey;
use strom_client::partitioner::partition_for_key;
use strom_client::{
    Acks, Admin, Client, ClientConfig, Compression, Connection, ConnectionConfig, Consumer,
    ConsumerConfig, ConsumerRecord, ErrorCode, OffsetReset, Producer, ProducerConfig,
};

async fn client(b: &Broker) -> Client {
    let mut cfg = ClientConfig::new(&b.bootstrap());
    cfg.request_timeout = Duration::from_secs(15);
    Client::connect(cfg).await.expect("connect")
}

async fn consume_n(c: &mut Consumer, n: usize) -> Vec<ConsumerRecord> {
    let mut out = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while out.len() < n {
        assert!(
            std::time::Instant::now() < deadline,
            "got {} of {n}",
            out.len()
        );
        out.extend(c.poll(Duration::from_millis(500)).await.expect("poll"));
    }
    out
}

#[tokio::test]
async fn handshake_negotiates_and_pipelines() {
    let b = Broker::start();
    let conn = Connection::connect(&b.bootstrap(), ConnectionConfig::default())
        .await
        .unwrap();
    for api in [
        ApiKey::Produce,
        ApiKey::Fetch,
        ApiKey::Metadata,
        ApiKey::ListOffsets,
    ] {
        let v = conn.version_for(api).unwrap();
        let (cmin, cmax) = strom_client::versions::client_range(api).unwrap();
        let (bmin, bmax) = conn.broker_versions().range(api).unwrap();
        assert_eq!(v, cmax.min(bmax), "{api:?}");
        assert!(v >= cmin && v >= bmin);
    }
    // Many requests in flight on one connection, answered in order.
    let conn = std::sync::Arc::new(conn);
    let futs: Vec<_> = (0..50)
        .map(|_| {
            let c = conn.clone();
            tokio::spawn(async move {
                c.request(|_| strom_client::kafka::messages::MetadataRequest::default())
                    .await
            })
        })
        .collect();
    for f in futs {
        let r = f.await.unwrap().unwrap();
        assert_eq!(r.brokers.len(), 1);
    }
    assert_eq!(conn.in_flight(), 0);
}

#[tokio::test]
async fn admin_create_describe_alter_delete() {
    let b = Broker::start();
    let admin = Admin::new(client(&b).await);
    admin
        .create_topic(
            "a",
            3,
            1,
            &[("retention.ms".into(), "123456".into())],
            false,
        )
        .await
        .unwrap();
    // validate_only does not create.
    admin.create_topic("v", 2, 1, &[], true).await.unwrap();
    let err = admin.create_topic("a", 3, 1, &[], false).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::TopicAlreadyExists), "{err}");
    let err = admin
        .create_topic("bad", 0, 1, &[], false)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::InvalidPartitions), "{err}");

    let names = admin.list_topics().await.unwrap();
    assert!(names.contains(&"a".to_string()));
    assert!(!names.contains(&"v".to_string()));

    let d = admin
        .describe_topics(Some(&["a".to_string()]))
        .await
        .unwrap();
    assert_eq!(d.len(), 1);
    assert!(!d[0].topic_id.is_nil());
    assert_eq!(d[0].partitions.len(), 3);
    for (i, p) in d[0].partitions.iter().enumerate() {
        assert_eq!(p.partition, i as i32);
        assert_eq!(p.leader, 1);
        assert_eq!(p.replicas, vec![1]);
        assert_eq!(p.isr, vec![1]);
    }
    let err = admin
        .describe_topics(Some(&["missing".to_string()]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::UnknownTopicOrPartition));

    let cfg = admin.describe_topic_configs("a").await.unwrap();
    let r = cfg
        .iter()
        .find(|c| c.name == "retention.ms")
        .expect("retention.ms");
    assert_eq!(r.value.as_deref(), Some("123456"));
    assert!(!r.is_default);
    admin
        .incremental_alter_topic_configs(
            "a",
            &[
                AlterConfigOp::Set("max.message.bytes".into(), "2000000".into()),
                AlterConfigOp::Delete("retention.ms".into()),
            ],
            false,
        )
        .await
        .unwrap();
    let cfg = admin.describe_topic_configs("a").await.unwrap();
    let get = |n: &str| cfg.iter().find(|c| c.name == n).cloned().unwrap();
    assert_eq!(get("max.message.bytes").value.as_deref(), Some("2000000"));
    assert!(get("retention.ms").is_default);

    admin.create_partitions("a", 5, false).await.unwrap();
    let d = admin
        .describe_topics(Some(&["a".to_string()]))
        .await
        .unwrap();
    assert_eq!(d[0].partitions.len(), 5);

    let cluster = admin.describe_cluster().await.unwrap();
    assert_eq!(cluster.brokers.len(), 1);
    assert_eq!(cluster.brokers[0].port, b.port as i32);
    assert!(!cluster.cluster_id.is_empty());

    admin.delete_topics(&["a".to_string()]).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while admin
        .list_topics()
        .await
        .unwrap()
        .contains(&"a".to_string())
    {
        assert!(std::time::Instant::now() < deadline, "topic not deleted");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let err = admin.delete_topics(&["a".to_string()]).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::UnknownTopicOrPartition));
}

async fn round_trip(b: &Broker, topic: &str, compression: Compression, acks: Acks) {
    let c = client(b).await;
    Admin::new(c.clone())
        .create_topic(topic, 3, 1, &[], false)
        .await
        .unwrap();
    let producer = Producer::new(
        c.clone(),
        ProducerConfig {
            compression,
            acks,
            linger: Duration::from_millis(10),
            batch_size: 4096,
            ..Default::default()
        },
    );
    let n: usize = 600;
    let futs: Vec<_> = (0..n)
        .map(|i| {
            let key = if i.is_multiple_of(3) {
                None
            } else {
                Some(Bytes::from(format!("key-{i}")))
            };
            producer.send(
                topic,
                None,
                key,
                Some(Bytes::from(format!("value-{i}-{}", "x".repeat(i % 50)))),
                vec![("h".into(), Some(Bytes::from(format!("{i}"))))],
            )
        })
        .collect();
    producer.flush().await.unwrap();
    let mut placed = HashMap::new();
    for (i, f) in futs.into_iter().enumerate() {
        let (p, off) = f.await.unwrap_or_else(|e| panic!("record {i}: {e}"));
        if !i.is_multiple_of(3) {
            assert_eq!(
                p,
                partition_for_key(format!("key-{i}").as_bytes(), 3),
                "record {i}"
            );
        }
        if acks == Acks::None {
            assert_eq!(off, -1);
        }
        placed.insert(i, (p, off));
    }
    let mut consumer = Consumer::new(
        c,
        ConsumerConfig {
            auto_offset_reset: OffsetReset::Earliest,
            max_partition_fetch_bytes: 2048,
            ..Default::default()
        },
    );
    assert_eq!(consumer.assign(topic, None).await.unwrap(), vec![0, 1, 2]);
    let got = consume_n(&mut consumer, n).await;
    assert_eq!(got.len(), n, "{compression:?}");
    let mut seen = vec![false; n];
    let mut last: HashMap<i32, i64> = HashMap::new();
    for r in &got {
        let h = r.headers.first().expect("header");
        let i: usize = std::str::from_utf8(h.1.as_ref().unwrap())
            .unwrap()
            .parse()
            .unwrap();
        assert!(!seen[i], "duplicate {i}");
        seen[i] = true;
        assert_eq!(
            r.value.as_deref(),
            Some(format!("value-{i}-{}", "x".repeat(i % 50)).as_bytes())
        );
        if i.is_multiple_of(3) {
            assert!(r.key.is_none());
        } else {
            assert_eq!(r.key.as_deref(), Some(format!("key-{i}").as_bytes()));
        }
        let (p, off) = placed[&i];
        assert_eq!(r.partition, p);
        if off >= 0 {
            assert_eq!(r.offset, off);
        }
        // Offsets increase within a partition.
        if let Some(prev) = last.insert(r.partition, r.offset) {
            assert!(r.offset > prev);
        }
    }
    // Nothing more.
    assert!(consumer
        .poll(Duration::from_millis(300))
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn round_trip_every_compression() {
    let b = Broker::start();
    for (name, c) in [
        ("none", Compression::None),
        ("gzip", Compression::Gzip),
        ("snappy", Compression::Snappy),
        ("lz4", Compression::Lz4),
        ("zstd", Compression::Zstd),
    ] {
        round_trip(&b, &format!("rt-{name}"), c, Acks::All).await;
    }
}

#[tokio::test]
async fn round_trip_acks_0_and_1() {
    let b = Broker::start();
    round_trip(&b, "acks1", Compression::Lz4, Acks::Leader).await;
    round_trip(&b, "acks0", Compression::None, Acks::None).await;
}

#[tokio::test]
async fn seek_latest_offset_and_explicit_partition() {
    let b = Broker::start();
    let c = client(&b).await;
    Admin::new(c.clone())
        .create_topic("s", 2, 1, &[], false)
        .await
        .unwrap();
    let producer = Producer::new(c.clone(), ProducerConfig::default());
    for i in 0..10 {
        let (p, off) = producer
            .send(
                "s",
                Some(1),
                None,
                Some(Bytes::from(format!("{i}"))),
                vec![],
            )
            .await
            .unwrap();
        assert_eq!((p, off), (1, i));
    }
    let mut consumer = Consumer::new(c.clone(), ConsumerConfig::default());
    consumer.assign("s", Some(&[1])).await.unwrap();
    // Default: latest, so nothing old.
    assert!(consumer
        .poll(Duration::from_millis(300))
        .await
        .unwrap()
        .is_empty());
    assert_eq!(consumer.position("s", 1), Some(10));
    consumer.seek("s", 1, 7);
    let got = consume_n(&mut consumer, 3).await;
    assert_eq!(
        got.iter().map(|r| r.offset).collect::<Vec<_>>(),
        vec![7, 8, 9]
    );
    consumer.seek_to_beginning("s", None);
    let got = consume_n(&mut consumer, 10).await;
    assert_eq!(got[0].value.as_deref(), Some(&b"0"[..]));
    // New records arrive at a consumer waiting at the end.
    producer
        .send("s", Some(1), None, Some("late".into()), vec![])
        .await
        .unwrap();
    let got = consume_n(&mut consumer, 1).await;
    assert_eq!(got[0].offset, 10);
    let offs = consumer
        .list_offsets("s", &[0, 1], strom_client::consumer::LATEST_TIMESTAMP)
        .await
        .unwrap();
    assert_eq!(offs[&0], 0);
    assert_eq!(offs[&1], 11);
    // A partition that does not exist fails the record.
    let err = producer
        .send("s", Some(5), None, Some("x".into()), vec![])
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::UnknownTopicOrPartition));
}

#[tokio::test]
async fn unknown_topic_fails_after_retries() {
    let b = Broker::start_with(&["auto.create.topics.enable=false"]);
    let mut cfg = ClientConfig::new(&b.bootstrap());
    cfg.retries = 2;
    cfg.retry_backoff = Duration::from_millis(20);
    let c = Client::connect(cfg).await.unwrap();
    let producer = Producer::new(c, ProducerConfig::default());
    let err = producer
        .send("nope", None, None, Some("x".into()), vec![])
        .await
        .unwrap_err();
    assert_eq!(
        err.code(),
        Some(ErrorCode::UnknownTopicOrPartition),
        "{err}"
    );
}

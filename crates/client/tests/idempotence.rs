//! The idempotent producer against a real `strom server`: producer ids and sequences as
//! `strom dump-log` shows them (the seed-003 experiment), ordering with 5 requests in flight,
//! and retries through a stopped broker that neither duplicate nor reorder.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{dump_log, Broker, DumpedBatch};
use strom_client::{
    Admin, Client, ClientConfig, Consumer, ConsumerConfig, ConsumerRecord, Producer, ProducerConfig,
};

async fn client(b: &Broker) -> Client {
    Client::connect(ClientConfig::new(&b.bootstrap()))
        .await
        .expect("connect")
}

async fn create_topic(b: &Broker, topic: &str, partitions: i32) {
    Admin::new(client(b).await)
        .create_topic(topic, partitions, 1, &[], false)
        .await
        .unwrap();
}

async fn producer(b: &Broker, props: &[(&str, &str)]) -> Producer {
    let mut all = vec![("bootstrap.servers", b.bootstrap())];
    all.extend(props.iter().map(|(k, v)| (*k, v.to_string())));
    let config = ProducerConfig::from_properties(&all).expect("config");
    Producer::connect(config).await.expect("producer")
}

async fn consume_all(b: &Broker, topic: &str, partition: i32, n: usize) -> Vec<ConsumerRecord> {
    let mut c = Consumer::new(client(b).await, ConsumerConfig::default());
    c.assign(topic, Some(&[partition])).await.unwrap();
    c.seek_to_beginning(topic, None);
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while out.len() < n {
        assert!(Instant::now() < deadline, "got {} of {n}", out.len());
        out.extend(c.poll(Duration::from_millis(300)).await.unwrap());
    }
    // Nothing more.
    out.extend(c.poll(Duration::from_millis(300)).await.unwrap());
    out
}

fn segment(b: &Broker, topic: &str, partition: i32) -> std::path::PathBuf {
    b.data_dir()
        .join(format!("{topic}-{partition}"))
        .join("00000000000000000000.log")
}

/// Within each (producer id, epoch) run the batches' sequences follow each other, and a new
/// epoch or producer id starts at 0.
fn assert_sequences_contiguous(batches: &[DumpedBatch]) {
    let mut prev: Option<&DumpedBatch> = None;
    for b in batches {
        let same = prev.is_some_and(|p| {
            p.get("producerId") == b.get("producerId")
                && p.get("producerEpoch") == b.get("producerEpoch")
        });
        let expected = if same {
            prev.unwrap().get("lastSequence") + 1
        } else {
            0
        };
        assert_eq!(b.get("baseSequence"), expected, "{b:?} after {prev:?}");
        assert_eq!(
            b.get("lastSequence") - b.get("baseSequence") + 1,
            b.get("count"),
            "{b:?}"
        );
        prev = Some(b);
    }
}

/// Seed 003: two default (idempotent) producer instances and one with idempotence off each
/// send 25 records one at a time to the same partition.
#[tokio::test]
async fn producer_ids_and_sequences_in_the_log() {
    let b = Broker::start();
    create_topic(&b, "idem-demo", 1).await;
    let run_a = producer(&b, &[]).await;
    let run_b = producer(&b, &[]).await;
    let run_c = producer(&b, &[("enable.idempotence", "false"), ("acks", "1")]).await;
    assert!(run_a.is_idempotent() && run_b.is_idempotent() && !run_c.is_idempotent());
    for (run, p) in [("a", &run_a), ("b", &run_b), ("c", &run_c)] {
        for i in 0..25 {
            p.send(
                "idem-demo",
                Some(0),
                None,
                Some(Bytes::from(format!("{run}-{i}"))),
                vec![],
            )
            .await
            .unwrap();
        }
    }
    let (pid_a, pid_b) = (run_a.producer_id(), run_b.producer_id());
    assert!(
        pid_a >= 0 && pid_b >= 0 && pid_a != pid_b,
        "{pid_a} {pid_b}"
    );
    assert_eq!((run_a.producer_epoch(), run_b.producer_epoch()), (0, 0));
    assert_eq!(run_c.producer_id(), -1);
    assert_eq!(run_c.producer_epoch(), -1);

    let batches = dump_log(&segment(&b, "idem-demo", 0));
    assert_eq!(batches.len(), 75, "{batches:?}");
    for (i, batch) in batches.iter().enumerate() {
        let (pid, epoch, seq) = match i / 25 {
            0 => (pid_a, 0, (i % 25) as i64),
            1 => (pid_b, 0, (i % 25) as i64),
            _ => (-1, -1, -1),
        };
        assert_eq!(batch.get("baseOffset"), i as i64);
        assert_eq!(batch.get("count"), 1);
        assert_eq!(batch.get("producerId"), pid, "{batch:?}");
        assert_eq!(batch.get("producerEpoch"), epoch, "{batch:?}");
        assert_eq!(batch.get("baseSequence"), seq, "{batch:?}");
        assert_eq!(batch.get("lastSequence"), seq, "{batch:?}");
    }
}

/// Many small batches per partition with 5 requests in flight: every record lands once, in
/// send order, and each partition's sequences are contiguous.
#[tokio::test]
async fn order_kept_with_five_in_flight() {
    let b = Broker::start();
    create_topic(&b, "ordered", 3).await;
    let p = producer(
        &b,
        &[
            ("batch.size", "300"),
            ("linger.ms", "0"),
            ("max.in.flight.requests.per.connection", "5"),
        ],
    )
    .await;
    let n = 3000usize;
    let futs: Vec<_> = (0..n)
        .map(|i| {
            p.send(
                "ordered",
                Some((i % 3) as i32),
                None,
                Some(Bytes::from(format!("{i:06}"))),
                vec![],
            )
        })
        .collect();
    let mut last = [-1i64; 3];
    for (i, f) in futs.into_iter().enumerate() {
        let (part, off) = f.await.unwrap();
        assert_eq!(part, (i % 3) as i32);
        assert!(off > last[part as usize], "offsets follow send order");
        last[part as usize] = off;
    }
    p.flush().await.unwrap();
    for part in 0..3 {
        let recs = consume_all(&b, "ordered", part, n / 3).await;
        let values: Vec<usize> = recs
            .iter()
            .map(|r| {
                std::str::from_utf8(r.value.as_ref().unwrap())
                    .unwrap()
                    .parse()
                    .unwrap()
            })
            .collect();
        let expected: Vec<usize> = (0..n).filter(|i| i % 3 == part as usize).collect();
        assert_eq!(values, expected, "partition {part}");
        let batches = dump_log(&segment(&b, "ordered", part));
        assert!(batches.len() > 10, "several batches: {}", batches.len());
        assert!(batches
            .iter()
            .all(|x| x.get("producerId") == p.producer_id()));
        assert_sequences_contiguous(&batches);
    }
}

/// Requests time out while the broker is stopped (SIGSTOP) and are retried: once it runs
/// again every record is in the log exactly once and in send order.
#[tokio::test]
async fn retries_through_a_stopped_broker_keep_order_without_duplicates() {
    let b = Broker::start();
    create_topic(&b, "stalled", 1).await;
    let p = producer(
        &b,
        &[
            ("batch.size", "200"),
            ("linger.ms", "1"),
            ("request.timeout.ms", "700"),
            ("retry.backoff.ms", "50"),
            ("delivery.timeout.ms", "60000"),
        ],
    )
    .await;
    let n = 1500usize;
    let mut futs = Vec::new();
    let start = Instant::now();
    let mut stopped = false;
    let mut resumed = false;
    for i in 0..n {
        futs.push(p.send(
            "stalled",
            Some(0),
            None,
            Some(Bytes::from(format!("{i:06}"))),
            vec![],
        ));
        if i % 10 == 0 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        if !stopped && i == 300 {
            b.signal("STOP");
            stopped = true;
        }
        if stopped && !resumed && i == 900 {
            // Long enough for requests to time out and be retried into the stopped broker.
            tokio::time::sleep(Duration::from_millis(2000)).await;
            b.signal("CONT");
            resumed = true;
        }
    }
    assert!(resumed);
    let mut last = -1;
    for f in futs {
        let (_, off) = f.await.expect("delivered");
        assert!(off > last, "offsets follow send order");
        last = off;
    }
    eprintln!(
        "delivered {n} in {:?}, producer {:?}, {} batch retries",
        start.elapsed(),
        p.producer_id_and_epoch(),
        p.retried_batches()
    );
    assert!(
        p.retried_batches() > 0,
        "requests timed out and were retried"
    );
    let recs = consume_all(&b, "stalled", 0, n).await;
    let values: Vec<usize> = recs
        .iter()
        .map(|r| {
            std::str::from_utf8(r.value.as_ref().unwrap())
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    assert_eq!(
        values,
        (0..n).collect::<Vec<_>>(),
        "no duplicates, no gaps, in order"
    );
    let batches = dump_log(&segment(&b, "stalled", 0));
    assert_sequences_contiguous(&batches);
}

/// Construction fails with Kafka's messages for explicitly enabled idempotence, and
/// conflicting settings without `enable.idempotence` turn it off.
#[tokio::test]
async fn config_validation_at_construction() {
    let b = Broker::start();
    create_topic(&b, "validation", 1).await;
    let boot = b.bootstrap();
    type Case<'a> = (&'a [(&'a str, &'a str)], Result<bool, &'a str>);
    let cases: &[Case] = &[
        (&[], Ok(true)),
        (
            &[("enable.idempotence", "true"), ("acks", "1")],
            Err("Must set acks to all in order to use the idempotent producer. Otherwise we cannot guarantee idempotence."),
        ),
        (
            &[("enable.idempotence", "true"), ("max.in.flight.requests.per.connection", "6")],
            Err("To use the idempotent producer, max.in.flight.requests.per.connection must be set to at most 5. Current value is 6."),
        ),
        (
            &[("enable.idempotence", "true"), ("retries", "0")],
            Err("Must set retries to non-zero when using the idempotent producer."),
        ),
        (
            &[("enable.idempotence", "false"), ("acks", "1"), ("max.in.flight.requests.per.connection", "6")],
            Ok(false),
        ),
        (&[("acks", "1")], Ok(false)),
        (&[("retries", "0")], Ok(false)),
    ];
    for (props, expected) in cases {
        let mut all = vec![("bootstrap.servers", boot.as_str())];
        all.extend_from_slice(props);
        // The properties path (Kafka's `new KafkaProducer(props)`).
        let r = match ProducerConfig::from_properties(&all) {
            Ok(c) => Producer::connect(c).await,
            Err(e) => Err(e),
        };
        match (r, expected) {
            (Ok(p), Ok(idem)) => {
                assert_eq!(p.is_idempotent(), *idem, "{props:?}");
                p.send(
                    "validation",
                    None,
                    None,
                    Some(Bytes::from_static(b"x")),
                    vec![],
                )
                .await
                .unwrap();
                if *idem {
                    assert!(p.producer_id() >= 0);
                } else {
                    assert_eq!(p.producer_id(), -1);
                }
            }
            (Err(strom_client::Error::ConfigException(m)), Err(msg)) => {
                assert_eq!(m, *msg, "{props:?}")
            }
            (r, _) => panic!("{props:?}: unexpected {r:?}"),
        }
    }
    // A config built in code is checked by `try_new` the same way.
    let c = ProducerConfig {
        enable_idempotence: Some(true),
        retries: 0,
        ..Default::default()
    };
    let e = Producer::try_new(client(&b).await, c).unwrap_err();
    assert_eq!(
        e.to_string(),
        "Must set retries to non-zero when using the idempotent producer."
    );
}

/// The `strom produce` ordering bug: records sent while the topic's metadata was being fetched
/// could overtake the first one (appended once the metadata reached the cache, while the first
/// still waited for its event), and requests could reach the socket in a different order than
/// they were drained. Also without idempotence (acks=1) the log keeps send order.
#[tokio::test]
async fn records_sent_during_the_first_metadata_fetch_keep_their_order() {
    let b = Broker::start();
    create_topic(&b, "lines", 1).await;
    for (round, props) in [
        vec![("acks", "1"), ("linger.ms", "0"), ("batch.size", "100")],
        vec![("linger.ms", "0"), ("batch.size", "100")],
    ]
    .iter()
    .enumerate()
    {
        // A fresh producer has no metadata for the topic yet.
        let p = producer(&b, props).await;
        let n = 500usize;
        let mut futs = Vec::new();
        for i in 0..n {
            futs.push(p.send(
                "lines",
                None,
                Some(Bytes::from(format!("k{i}"))),
                Some(Bytes::from(format!("{round}-{i:04}"))),
                vec![],
            ));
            tokio::task::yield_now().await;
        }
        let mut last = -1;
        for (i, f) in futs.into_iter().enumerate() {
            let (_, off) = f.await.unwrap();
            assert!(off > last, "record {i} at {off} after {last}");
            last = off;
        }
    }
    let recs = consume_all(&b, "lines", 0, 1000).await;
    let values: Vec<String> = recs
        .iter()
        .map(|r| String::from_utf8_lossy(r.value.as_ref().unwrap()).into_owned())
        .collect();
    let expected: Vec<String> = (0..2)
        .flat_map(|r| (0..500).map(move |i| format!("{r}-{i:04}")))
        .collect();
    assert_eq!(values, expected);
}

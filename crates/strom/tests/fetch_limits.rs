//! The size limits of a fetch, against Apache Kafka 4.4 on the same raw requests.
//!
//! Kafka's rules (`KafkaApis.handleFetchRequest`, `ReplicaManager.readFromLog`,
//! `LogSegment.read`): the response limit is the request's `max_bytes` capped by the broker's
//! `fetch.max.bytes` (and a client's quota window), `min_bytes` is capped by that limit, each
//! partition reads at most min(its `partition_max_bytes`, what is left of the response limit),
//! and the first partition that has data returns its first batch even when that batch is
//! larger (the min-one-message rule). A `max_bytes` of 0 is therefore "one batch", not
//! "unlimited"; a negative limit reaching a partition that has data fails that partition with
//! UNKNOWN_SERVER_ERROR (`LogSegment.read` refuses a negative size) and leaves 0 for the rest.
//! Kafka may end a partition's records with a partial batch; Strom returns whole batches, so the
//! comparison counts whole batches.

mod common;

use std::net::TcpStream;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use strom_protocol::kafka::messages::create_topics_request::CreatableTopic;
use strom_protocol::kafka::messages::describe_configs_request::DescribeConfigsResource;
use strom_protocol::kafka::messages::fetch_request::{FetchPartition, FetchTopic};
use strom_protocol::kafka::messages::produce_request::{PartitionProduceData, TopicProduceData};
use strom_protocol::kafka::messages::{
    ApiKey, CreateTopicsRequest, CreateTopicsResponse, DescribeConfigsRequest,
    DescribeConfigsResponse, FetchRequest, FetchResponse, ProduceRequest, ProduceResponse,
    TopicName,
};
use strom_protocol::kafka::protocol::StrBytes;
use strom_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

const TOPIC: &str = "limits";
const BATCHES: usize = 4;
/// The broker's `fetch.max.bytes` in these tests: room for three of the ~1.1 KB batches.
const FETCH_MAX_BYTES: i32 = 4096;
const MIB: i32 = 1 << 20;

fn batch(i: usize) -> Bytes {
    let rec = Record {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: -1,
        producer_id: -1,
        producer_epoch: -1,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence: -1,
        timestamp: 1_700_000_000_000 + i as i64,
        key: Some(Bytes::from(format!("key-{i}"))),
        value: Some(Bytes::from(vec![b'v'; 1000])),
        headers: Default::default(),
    };
    let mut buf = Vec::new();
    RecordBatchEncoder::encode(
        &mut buf,
        std::iter::once(&rec),
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .unwrap();
    Bytes::from(buf)
}

/// `TOPIC` with two partitions of `BATCHES` one-record batches each.
fn fill(bootstrap: &str) {
    let mut s = TcpStream::connect(bootstrap).unwrap();
    let req = CreateTopicsRequest::default()
        .with_timeout_ms(20_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
            .with_num_partitions(2)
            .with_replication_factor(1)]);
    let resp: CreateTopicsResponse = raw_call(&mut s, ApiKey::CreateTopics, 7, &req);
    assert_eq!(resp.topics[0].error_code, 0, "create: {:?}", resp.topics[0]);
    for i in 0..BATCHES {
        for p in 0..2 {
            let req = ProduceRequest::default()
                .with_acks(-1)
                .with_timeout_ms(10_000)
                .with_topic_data(vec![TopicProduceData::default()
                    .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
                    .with_partition_data(vec![PartitionProduceData::default()
                        .with_index(p)
                        .with_records(Some(batch(i)))])]);
            // The first produce may find the leader not yet known to the broker's metadata.
            let mut tries = 0;
            loop {
                let resp: ProduceResponse = raw_call(&mut s, ApiKey::Produce, 9, &req);
                let code = resp.responses[0].partition_responses[0].error_code;
                if code == 0 {
                    break;
                }
                tries += 1;
                assert!(tries < 100, "produce to {TOPIC}-{p}: error {code}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// Stands for the error code when no response came within 20 s.
const NO_ANSWER: i16 = i16::MIN;

/// One partition's answer as compared: error code, whole batches returned, high watermark.
type Answer = (i16, usize, i64);

fn whole_batches(records: &[u8]) -> usize {
    let mut n = 0;
    let mut at = 0;
    while records.len() - at >= 12 {
        let len = i32::from_be_bytes(records[at + 8..at + 12].try_into().unwrap()) as usize;
        if records.len() - at < 12 + len {
            break;
        }
        at += 12 + len;
        n += 1;
    }
    n
}

/// A Fetch v12 of both partitions from offset 0 (or `offsets`), answered as [`Answer`]s.
fn fetch(
    bootstrap: &str,
    max_bytes: i32,
    min_bytes: i32,
    partition_max: [i32; 2],
    offsets: [i64; 2],
) -> Vec<Answer> {
    let mut s = TcpStream::connect(bootstrap).unwrap();
    let req = FetchRequest::default()
        .with_replica_id((-1).into())
        .with_max_wait_ms(60_000)
        .with_min_bytes(min_bytes)
        .with_max_bytes(max_bytes)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_static_str(TOPIC)))
            .with_partitions(
                (0..2)
                    .map(|p| {
                        FetchPartition::default()
                            .with_partition(p as i32)
                            .with_fetch_offset(offsets[p])
                            .with_partition_max_bytes(partition_max[p])
                    })
                    .collect(),
            )]);
    write_frame(&mut s, &encode_request(ApiKey::Fetch, 12, 7, &req)).unwrap();
    // A fetch that waits for its min_bytes (60 s) is reported as no answer after 20 s.
    let frame = match read_frame(&mut s, Duration::from_secs(20)) {
        Reply::Frame(f) => f,
        other => {
            eprintln!("fetch max_bytes {max_bytes} min_bytes {min_bytes}: {other:?}");
            return vec![(NO_ANSWER, 0, -1); 2];
        }
    };
    let (_, resp): (i32, FetchResponse) = decode_response(ApiKey::Fetch, 12, frame);
    assert_eq!(resp.error_code, 0);
    let t = &resp.responses[0];
    t.partitions
        .iter()
        .map(|p| {
            let recs = p.records.as_deref().unwrap_or_default();
            (p.error_code, whole_batches(recs), p.high_watermark)
        })
        .collect()
}

/// Every case of the comparison, with its name.
fn cases(bootstrap: &str) -> Vec<(&'static str, Vec<Answer>)> {
    let end = BATCHES as i64;
    vec![
        ("max_bytes 0", fetch(bootstrap, 0, 1, [MIB, MIB], [0, 0])),
        ("max_bytes -1", fetch(bootstrap, -1, 1, [MIB, MIB], [0, 0])),
        (
            "max_bytes i32::MIN",
            fetch(bootstrap, i32::MIN, 1, [MIB, MIB], [0, 0]),
        ),
        (
            "max_bytes -1, first partition at its end",
            fetch(bootstrap, -1, 1, [MIB, MIB], [end, 0]),
        ),
        (
            "max_bytes and partition max i32::MAX (fetch.max.bytes caps)",
            fetch(bootstrap, i32::MAX, 1, [i32::MAX, i32::MAX], [0, 0]),
        ),
        (
            "partition max -1",
            fetch(bootstrap, MIB, 1, [-1, MIB], [0, 0]),
        ),
        ("partition max 0", fetch(bootstrap, MIB, 1, [0, 0], [0, 0])),
        (
            "max_bytes 1500",
            fetch(bootstrap, 1500, 1, [MIB, MIB], [0, 0]),
        ),
        (
            "max_bytes 0, min_bytes i32::MAX, at the end: answered at once",
            fetch(bootstrap, 0, i32::MAX, [MIB, MIB], [end, end]),
        ),
        (
            "min_bytes -5 at the end",
            fetch(bootstrap, MIB, -5, [MIB, MIB], [end, end]),
        ),
    ]
}

/// The broker-level settings a DescribeConfigs of the broker shows: (name, value, source).
fn broker_configs(bootstrap: &str, node: &str) -> Vec<(String, Option<String>, i8)> {
    let names = [
        "fetch.max.bytes",
        "replica.fetch.response.max.bytes",
        "queued.max.requests",
        "queued.max.request.bytes",
    ];
    let req =
        DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(4)
            .with_resource_name(StrBytes::from_string(node.to_string()))
            .with_configuration_keys(Some(
                names.iter().map(|n| StrBytes::from_static_str(n)).collect(),
            ))]);
    let mut s = TcpStream::connect(bootstrap).unwrap();
    let resp: DescribeConfigsResponse = raw_call(&mut s, ApiKey::DescribeConfigs, 4, &req);
    let r = &resp.results[0];
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    let mut out: Vec<_> = r
        .configs
        .iter()
        .map(|c| {
            (
                c.name.to_string(),
                c.value.as_ref().map(|v| v.to_string()),
                c.config_source,
            )
        })
        .collect();
    out.sort();
    out
}

fn strom_answers() -> (
    Vec<(&'static str, Vec<Answer>)>,
    Vec<(String, Option<String>, i8)>,
) {
    let broker = Broker::start_with(&[&format!("fetch.max.bytes={FETCH_MAX_BYTES}")]);
    fill(&broker.bootstrap());
    (
        cases(&broker.bootstrap()),
        broker_configs(&broker.bootstrap(), "1"),
    )
}

#[test]
fn fetch_size_limits_as_kafka() {
    let (strom, strom_configs) = strom_answers();
    const UNKNOWN_SERVER_ERROR: i16 = -1;
    fn whole(case: &(&'static str, Vec<Answer>)) -> (&'static str, Vec<(i16, usize)>) {
        (case.0, case.1.iter().map(|a| (a.0, a.1)).collect())
    }
    // What Kafka 4.4 answers (established by the comparison below), so that the test says it
    // without the oracle too.
    let expected: Vec<(&str, Vec<(i16, usize)>)> = vec![
        ("max_bytes 0", vec![(0, 1), (0, 0)]),
        ("max_bytes -1", vec![(UNKNOWN_SERVER_ERROR, 0), (0, 1)]),
        (
            "max_bytes i32::MIN",
            vec![(UNKNOWN_SERVER_ERROR, 0), (0, 1)],
        ),
        (
            "max_bytes -1, first partition at its end",
            vec![(0, 0), (0, 1)],
        ),
        (
            "max_bytes and partition max i32::MAX (fetch.max.bytes caps)",
            vec![(0, 3), (0, 0)],
        ),
        ("partition max -1", vec![(UNKNOWN_SERVER_ERROR, 0), (0, 3)]),
        ("partition max 0", vec![(0, 1), (0, 0)]),
        ("max_bytes 1500", vec![(0, 1), (0, 0)]),
        (
            "max_bytes 0, min_bytes i32::MAX, at the end: answered at once",
            vec![(0, 0), (0, 0)],
        ),
        ("min_bytes -5 at the end", vec![(0, 0), (0, 0)]),
    ];
    let want_configs: Vec<(String, Option<String>, i8)> = vec![
        (
            "fetch.max.bytes".into(),
            Some(FETCH_MAX_BYTES.to_string()),
            4,
        ),
        ("queued.max.request.bytes".into(), Some("-1".into()), 5),
        ("queued.max.requests".into(), Some("500".into()), 5),
        (
            "replica.fetch.response.max.bytes".into(),
            Some("10485760".into()),
            5,
        ),
    ];
    match common::kafka_ref::oracle_available() {
        Err(why) => eprintln!("skipping the comparison with Kafka 4.4: {why}"),
        Ok(()) => {
            let kafka = common::kafka_ref::KafkaRef::start_with_props(&format!(
                "fetch.max.bytes={FETCH_MAX_BYTES}\n"
            ));
            fill(&kafka.bootstrap());
            let theirs = cases(&kafka.bootstrap());
            let theirs_configs = broker_configs(&kafka.bootstrap(), "1");
            drop(kafka);
            let got: Vec<_> = theirs.iter().map(whole).collect();
            assert_eq!(got, expected, "Kafka 4.4's answers (full: {theirs:?})");
            assert_eq!(theirs_configs, want_configs, "Kafka 4.4's broker configs");
            // The high watermarks too (Kafka answers -1 with UNKNOWN_SERVER_ERROR).
            assert_eq!(strom, theirs, "Strom vs Kafka 4.4");
        }
    }
    let got: Vec<_> = strom.iter().map(whole).collect();
    assert_eq!(got, expected, "Strom's answers (full: {strom:?})");
    assert_eq!(strom_configs, want_configs, "Strom's broker configs");
}

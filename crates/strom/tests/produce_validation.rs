//! Issue 18, defect 5: a produced batch is judged record by record as Kafka 4.4's
//! `LogValidator` (and `UnifiedLog.analyzeAndValidateRecords`, `ProduceRequest.validateRecords`)
//! judge it. Crafted batches (timestamps out of `message.timestamp.*.max.ms`, wrong counts and
//! offset deltas, bad sequence fields, control batches, every codec, LogAppendTime, topics whose
//! `compression.type` differs from the batch's, broken record structure) are sent as raw Produce
//! requests to Strom and to Kafka 4.4; the ProduceResponse (error code, message, record errors,
//! whether a log append time came back) and what a consumer then reads (offsets, timestamps
//! and their type, keys, values, the stored codec) must be the same. Without Java or Kafka's
//! jars the cases run against Strom alone with Kafka's answers written in them.

mod common;

use std::net::TcpStream;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use common::kafka_ref::{self, KafkaRef};
use common::{raw_call, Broker};
use strom_protocol::batch::BatchView;
use strom_protocol::crafted::CraftedBatch;
use strom_protocol::kafka::messages::create_topics_request::{
    CreatableTopic, CreatableTopicConfig,
};
use strom_protocol::kafka::messages::fetch_request::{FetchPartition, FetchTopic};
use strom_protocol::kafka::messages::produce_request::{PartitionProduceData, TopicProduceData};
use strom_protocol::kafka::messages::{
    ApiKey, CreateTopicsRequest, CreateTopicsResponse, FetchRequest, FetchResponse, ProduceRequest,
    ProduceResponse, TopicName,
};
use strom_protocol::kafka::protocol::StrBytes;
use strom_protocol::records::{RecordBatchDecoder, TimestampType};

const HOUR: i64 = 3_600_000;

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// The topics every case goes to, with their configs.
const TOPICS: &[(&str, &[(&str, &str)])] = &[
    ("ct", &[]),
    ("lat", &[("message.timestamp.type", "LogAppendTime")]),
    (
        "bounds",
        &[
            ("message.timestamp.before.max.ms", "3600000"),
            ("message.timestamp.after.max.ms", "600000"),
        ],
    ),
    ("compact", &[("cleanup.policy", "compact")]),
    ("gz", &[("compression.type", "gzip")]),
    ("unc", &[("compression.type", "uncompressed")]),
    (
        "zs-lat",
        &[
            ("compression.type", "zstd"),
            ("message.timestamp.type", "LogAppendTime"),
        ],
    ),
];

struct Case {
    name: &'static str,
    topic: &'static str,
    version: i16,
    records: Vec<u8>,
    /// Kafka 4.4's error code for it (checked against Strom when Kafka is not here).
    kafka_code: i16,
}

fn batch(now: i64, n: i32, f: impl FnOnce(&mut CraftedBatch)) -> Vec<u8> {
    let mut b = CraftedBatch::new(now, n);
    f(&mut b);
    b.encode()
}

fn resign(mut b: Vec<u8>) -> Vec<u8> {
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b
}

const NONE: i16 = 0;
const CORRUPT_MESSAGE: i16 = 2;
const INVALID_TIMESTAMP: i16 = 32;
const UNSUPPORTED_COMPRESSION_TYPE: i16 = 76;
const INVALID_RECORD: i16 = 87;
const UNKNOWN_SERVER_ERROR: i16 = -1;

fn cases(now: i64) -> Vec<Case> {
    let case = |name, topic, records, kafka_code| Case {
        name,
        topic,
        version: 11,
        records,
        kafka_code,
    };
    let mut v = vec![
        case("plain", "ct", batch(now, 3, |_| {}), NONE),
        case(
            "far future (+2h, message.timestamp.after.max.ms=1h)",
            "ct",
            batch(now, 3, |b| b.records[1].timestamp_delta = 2 * HOUR),
            INVALID_TIMESTAMP,
        ),
        case(
            "every record far future",
            "ct",
            batch(now + 1000 * HOUR, 4, |_| {}),
            INVALID_TIMESTAMP,
        ),
        case(
            "just inside the future bound",
            "ct",
            batch(now + HOUR - 120_000, 2, |_| {}),
            NONE,
        ),
        case(
            "far past on a topic with before.max.ms=1h",
            "bounds",
            batch(now - 2 * HOUR, 2, |_| {}),
            INVALID_TIMESTAMP,
        ),
        case(
            "just inside the past bound",
            "bounds",
            batch(now - HOUR + 120_000, 2, |_| {}),
            NONE,
        ),
        case(
            "past the 10-minute future bound",
            "bounds",
            batch(now + 20 * 60_000, 1, |_| {}),
            INVALID_TIMESTAMP,
        ),
        case(
            "far past is fine by default (before.max.ms=Long.MAX_VALUE)",
            "ct",
            batch(1, 2, |_| {}),
            NONE,
        ),
        case(
            "timestamps -1",
            "ct",
            batch(-1, 2, |b| {
                for r in &mut b.records {
                    r.timestamp_delta = 0;
                }
            }),
            NONE,
        ),
        case(
            "header claims a far-future max timestamp",
            "ct",
            batch(now, 3, |b| b.max_timestamp = Some(now + 10_000 * HOUR)),
            NONE,
        ),
        case(
            "inner offset deltas all 0, uncompressed",
            "ct",
            batch(now, 3, |b| {
                for r in &mut b.records {
                    r.offset_delta = 0;
                }
            }),
            NONE,
        ),
        case(
            "inner offset deltas all 0, gzip kept as produced",
            "ct",
            batch(now, 3, |b| {
                b.codec = 1;
                for r in &mut b.records {
                    r.offset_delta = 0;
                }
            }),
            UNKNOWN_SERVER_ERROR,
        ),
        case(
            "inner offset deltas all 0, gzip re-encoded to the topic's codec",
            "unc",
            batch(now, 3, |b| {
                b.codec = 1;
                for r in &mut b.records {
                    r.offset_delta = 0;
                }
            }),
            NONE,
        ),
        case(
            "count 4, lastOffsetDelta 3, 3 records",
            "ct",
            batch(now, 3, |b| {
                b.count = Some(4);
                b.last_offset_delta = Some(3);
            }),
            INVALID_RECORD,
        ),
        case(
            "count 3, lastOffsetDelta 5",
            "ct",
            batch(now, 3, |b| b.last_offset_delta = Some(5)),
            INVALID_RECORD,
        ),
        case(
            "lastOffsetDelta -1",
            "ct",
            batch(now, 3, |b| b.last_offset_delta = Some(-1)),
            INVALID_RECORD,
        ),
        case(
            "count 0",
            "ct",
            batch(now, 1, |b| b.count = Some(0)),
            INVALID_RECORD,
        ),
        case(
            "producer id without a sequence",
            "ct",
            batch(now, 2, |b| {
                b.producer_id = 1000;
                b.producer_epoch = 0;
                b.base_sequence = -5;
            }),
            INVALID_RECORD,
        ),
        case(
            "base offset 7",
            "ct",
            batch(now, 2, |b| b.base_offset = 7),
            INVALID_RECORD,
        ),
        case(
            "control batch from a client",
            "ct",
            batch(now, 1, |b| b.attributes = 0x20),
            INVALID_RECORD,
        ),
        case(
            "keyless records on a compacted topic",
            "compact",
            batch(now, 4, |b| {
                b.records[1].key = None;
                b.records[3].key = None;
            }),
            INVALID_RECORD,
        ),
        case(
            "keyless and far future on a compacted topic",
            "compact",
            batch(now, 2, |b| {
                b.records[0].key = None;
                b.records[1].timestamp_delta = 5 * HOUR;
            }),
            INVALID_TIMESTAMP,
        ),
        case(
            "LogAppendTime topic",
            "lat",
            batch(now - 5 * HOUR, 3, |_| {}),
            NONE,
        ),
        case(
            "producer LogAppendTime batch on a LogAppendTime topic",
            "lat",
            batch(now, 2, |b| {
                b.attributes = 0x08;
                b.max_timestamp = Some(123_456);
            }),
            INVALID_TIMESTAMP,
        ),
        case(
            "producer LogAppendTime batch, lz4, on a LogAppendTime topic",
            "lat",
            batch(now, 2, |b| {
                b.codec = 3;
                b.attributes = 0x08;
                b.max_timestamp = Some(123_456);
            }),
            INVALID_TIMESTAMP,
        ),
        case(
            "producer LogAppendTime batch on a CreateTime topic",
            "ct",
            batch(now, 2, |b| {
                b.attributes = 0x08;
                b.max_timestamp = Some(now - 1000);
            }),
            NONE,
        ),
        case(
            "uncompressed to a gzip topic",
            "gz",
            batch(now, 3, |b| {
                b.records[1].headers = vec![(b"h".to_vec(), None)]
            }),
            NONE,
        ),
        case(
            "zstd to an uncompressed topic",
            "unc",
            batch(now, 3, |b| b.codec = 4),
            NONE,
        ),
        case(
            "snappy to a zstd LogAppendTime topic",
            "zs-lat",
            batch(now - 3 * HOUR, 3, |b| b.codec = 2),
            NONE,
        ),
        case(
            "far future to a gzip topic (re-encoded path)",
            "gz",
            batch(now + 3 * HOUR, 2, |_| {}),
            INVALID_TIMESTAMP,
        ),
        case(
            "bytes after the last record",
            "ct",
            batch(now, 2, |b| b.trailing = vec![0, 0]),
            INVALID_RECORD,
        ),
        case(
            "bytes after the last record, zstd",
            "ct",
            batch(now, 2, |b| {
                b.codec = 4;
                b.trailing = vec![0, 0];
            }),
            INVALID_RECORD,
        ),
        case(
            "record sizes off by one, uncompressed",
            "ct",
            batch(now, 2, |b| {
                b.records[0].size_adjust = 1;
                b.records[1].size_adjust = -1;
            }),
            INVALID_RECORD,
        ),
        case(
            "record sizes off by one, gzip kept as produced",
            "ct",
            batch(now, 2, |b| {
                b.codec = 1;
                b.records[0].size_adjust = 1;
                b.records[1].size_adjust = -1;
            }),
            NONE,
        ),
        case(
            "bad CRC",
            "ct",
            batch(now, 2, |b| b.bad_crc = true),
            CORRUPT_MESSAGE,
        ),
        case(
            "two batches",
            "ct",
            [batch(now, 1, |_| {}), batch(now, 1, |_| {})].concat(),
            INVALID_RECORD,
        ),
        case(
            "a torn second batch after the first",
            "ct",
            {
                let second = batch(now, 1, |_| {});
                [batch(now, 1, |_| {}), second[..30].to_vec()].concat()
            },
            NONE,
        ),
        case(
            "magic 1",
            "ct",
            batch(now, 1, |b| b.magic = 1),
            INVALID_RECORD,
        ),
        case(
            "magic 3",
            "ct",
            batch(now, 1, |b| b.magic = 3),
            CORRUPT_MESSAGE,
        ),
        case(
            "a second batch with magic -1",
            "ct",
            [batch(now, 1, |_| {}), batch(now, 1, |b| b.magic = -1)].concat(),
            CORRUPT_MESSAGE,
        ),
        case(
            "batch length 13",
            "ct",
            {
                let mut b = batch(now, 1, |_| {});
                b[8..12].copy_from_slice(&13i32.to_be_bytes());
                b
            },
            CORRUPT_MESSAGE,
        ),
        case(
            "a batch length past the bytes sent",
            "ct",
            {
                let mut b = batch(now, 1, |_| {});
                b[8..12].copy_from_slice(&1000i32.to_be_bytes());
                b
            },
            INVALID_RECORD,
        ),
        case(
            "gzip attribute, records not gzip",
            "ct",
            resign({
                let mut b = batch(now, 2, |_| {});
                b[22] |= 1;
                b
            }),
            UNKNOWN_SERVER_ERROR,
        ),
        case(
            "codec id 5",
            "ct",
            resign({
                let mut b = batch(now, 1, |_| {});
                b[22] |= 5;
                b
            }),
            UNKNOWN_SERVER_ERROR,
        ),
        case(
            "an empty header key and a null header value",
            "ct",
            batch(now, 1, |b| {
                b.records[0].value = None;
                b.records[0].headers = vec![(Vec::new(), None)];
            }),
            NONE,
        ),
        case("empty records", "ct", Vec::new(), INVALID_RECORD),
    ];
    // A header key size of -1 (the record's last bytes: key size, value size).
    let mut neg = batch(now, 1, |b| {
        b.records[0].value = None;
        b.records[0].headers = vec![(Vec::new(), None)];
    });
    let n = neg.len();
    neg[n - 2] = 0x01;
    v.push(case(
        "negative header key size (patched)",
        "ct",
        resign(neg),
        INVALID_RECORD,
    ));
    let mut zstd_v6 = case(
        "zstd at produce v6",
        "ct",
        batch(now, 1, |b| b.codec = 4),
        UNSUPPORTED_COMPRESSION_TYPE,
    );
    zstd_v6.version = 6;
    v.push(zstd_v6);
    let mut gz_v3 = case(
        "gzip at produce v3",
        "ct",
        batch(now, 2, |b| b.codec = 1),
        NONE,
    );
    gz_v3.version = 3;
    v.push(gz_v3);
    v
}

/// What a case came to on one broker, with the broker's clock taken out.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Outcome {
    error_code: i16,
    error_message: Option<String>,
    record_errors: Vec<(i32, Option<String>)>,
    log_append_time_set: bool,
    read: Option<Read>,
}

/// What a consumer reads of the appended batch.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Read {
    decodes: bool,
    codec: i16,
    log_append_time: bool,
    /// The header's max timestamp relative to the case's `now` ("append time" for LAT).
    max_timestamp: String,
    /// (offset from the batch's base, timestamp, key, value, header count)
    records: Vec<(i64, String, Option<Bytes>, Option<Bytes>, usize)>,
}

/// The timestamp bounds in an INVALID_TIMESTAMP message come from the broker's clock; they
/// are checked to be the broker's now +/- the topic's bounds and then replaced.
fn normalize_message(m: &str, now: i64) -> String {
    let marker = "The timestamp should be within [";
    let Some(at) = m.find(marker) else {
        return m.to_string();
    };
    let rest = &m[at + marker.len()..];
    let end = rest.find(']').expect("bounds");
    let (lo, hi) = rest[..end].split_once(", ").expect("two bounds");
    let (lo, hi): (i64, i64) = (lo.parse().unwrap(), hi.parse().unwrap());
    let near = |v: i64, want: i64| (v - want).abs() < 10 * 60_000;
    let lo_s = if lo < 0 {
        "now-Long.MAX".to_string()
    } else {
        assert!(near(lo, now - HOUR), "{m}");
        "now-1h".to_string()
    };
    let hi_s = if near(hi, now + HOUR) {
        "now+1h"
    } else {
        assert!(near(hi, now + 10 * 60_000), "{m}");
        "now+10m"
    };
    format!("{}{marker}{lo_s}, {hi_s}]", &m[..at])
}

fn produce(s: &mut TcpStream, case: &Case) -> ProduceResponse {
    let req = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_static_str(case.topic)))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(Bytes::from(case.records.clone())))])]);
    raw_call(s, ApiKey::Produce, case.version, &req)
}

fn fetch(s: &mut TcpStream, topic: &str, offset: i64) -> Bytes {
    let req = FetchRequest::default()
        .with_replica_id(strom_protocol::kafka::messages::BrokerId(-1))
        .with_max_wait_ms(0)
        .with_min_bytes(0)
        .with_max_bytes(1 << 20)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(1 << 20)])]);
    let resp: FetchResponse = raw_call(s, ApiKey::Fetch, 12, &req);
    let p = &resp.responses[0].partitions[0];
    assert_eq!(p.error_code, 0, "fetch {topic}@{offset}");
    p.records.clone().unwrap_or_default()
}

fn read_back(s: &mut TcpStream, topic: &str, base: i64, now: i64, append_time: i64) -> Read {
    let bytes = fetch(s, topic, base);
    let view = BatchView::parse(&bytes).expect("a batch at the base offset");
    assert_eq!(view.base_offset(), base);
    let rel = |ts: i64| {
        if view.is_log_append_time() && ts == append_time {
            "append time".to_string()
        } else if ts == -1 {
            "-1".to_string()
        } else {
            format!("now{:+}", ts - now)
        }
    };
    let mut one = Bytes::copy_from_slice(view.bytes());
    // A batch stored as it came may be one a consumer's decoder refuses (Kafka keeps a
    // compressed batch whose record sizes are off): then no records are compared.
    let decoded = RecordBatchDecoder::decode(&mut one);
    let records = decoded
        .as_ref()
        .map(|set| set.records.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|r| {
            let ts = if r.timestamp_type == TimestampType::LogAppend {
                view.max_timestamp()
            } else {
                r.timestamp
            };
            (
                r.offset - base,
                rel(ts),
                r.key.clone(),
                r.value.clone(),
                r.headers.len(),
            )
        })
        .collect();
    Read {
        decodes: decoded.is_ok(),
        codec: view.attributes() & 7,
        log_append_time: view.is_log_append_time(),
        max_timestamp: rel(view.max_timestamp()),
        records,
    }
}

fn run(addr: &str, cases: &[Case], now: i64) -> Vec<Outcome> {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_nodelay(true).unwrap();
    create_topics(&mut s);
    cases
        .iter()
        .map(|case| {
            let resp = produce(&mut s, case);
            let p = &resp.responses[0].partition_responses[0];
            let read = (p.error_code == 0)
                .then(|| read_back(&mut s, case.topic, p.base_offset, now, p.log_append_time_ms));
            Outcome {
                error_code: p.error_code,
                error_message: p.error_message.as_ref().map(|m| normalize_message(m, now)),
                record_errors: p
                    .record_errors
                    .iter()
                    .map(|e| {
                        (
                            e.batch_index,
                            e.batch_index_error_message
                                .as_ref()
                                .map(|m| normalize_message(m, now)),
                        )
                    })
                    .collect(),
                log_append_time_set: p.log_append_time_ms >= 0,
                read,
            }
        })
        .collect()
}

fn create_topics(s: &mut TcpStream) {
    let topics = TOPICS
        .iter()
        .map(|(name, configs)| {
            CreatableTopic::default()
                .with_name(TopicName(StrBytes::from_static_str(name)))
                .with_num_partitions(1)
                .with_replication_factor(1)
                .with_configs(
                    configs
                        .iter()
                        .map(|(k, v)| {
                            CreatableTopicConfig::default()
                                .with_name(StrBytes::from_static_str(k))
                                .with_value(Some(StrBytes::from_static_str(v)))
                        })
                        .collect(),
                )
        })
        .collect();
    let req = CreateTopicsRequest::default()
        .with_topics(topics)
        .with_timeout_ms(30_000);
    let resp: CreateTopicsResponse = raw_call(s, ApiKey::CreateTopics, 7, &req);
    for t in &resp.topics {
        assert_eq!(
            t.error_code, 0,
            "create {:?}: {:?}",
            t.name, t.error_message
        );
    }
    // Leadership settles before the first produce.
    std::thread::sleep(Duration::from_millis(1500));
}

#[test]
fn crafted_batches_are_validated_as_kafka_does() {
    let now = now_ms();
    let cases = cases(now);
    let strom = Broker::start();
    let got = run(&strom.bootstrap(), &cases, now);
    let kafka = match kafka_ref::oracle_available() {
        Ok(()) => {
            let k = KafkaRef::start();
            Some(run(&k.bootstrap(), &cases, now))
        }
        Err(why) => {
            eprintln!("SKIPPED the Kafka 4.4 comparison (Strom checked against the codes written in the cases): {why}");
            None
        }
    };
    let mut diffs = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let strom = &got[i];
        match &kafka {
            Some(k) if &k[i] != strom => diffs.push(format!(
                "{} (topic {}, v{}):\n  strom: {strom:?}\n  kafka: {:?}",
                case.name, case.topic, case.version, k[i]
            )),
            None if strom.error_code != case.kafka_code => diffs.push(format!(
                "{}: strom answered {}, Kafka 4.4 answers {}",
                case.name, strom.error_code, case.kafka_code
            )),
            _ => {}
        }
        if let Some(k) = &kafka {
            assert_eq!(
                k[i].error_code, case.kafka_code,
                "{}: the code written in the case is not Kafka's",
                case.name
            );
        }
    }
    assert!(
        diffs.is_empty(),
        "{} differences:\n{}",
        diffs.len(),
        diffs.join("\n")
    );
}

/// The records a consumer reads back keep Kafka's shape whatever was sent: the header's max
/// timestamp is the records' (a far-future claim is gone) and LogAppendTime batches carry the
/// append time. Checked on Strom alone so it holds without the oracle too.
#[test]
fn what_a_consumer_reads_back() {
    let now = now_ms();
    let cases = cases(now);
    let strom = Broker::start();
    let got = run(&strom.bootstrap(), &cases, now);
    let by_name = |n: &str| {
        let i = cases.iter().position(|c| c.name == n).unwrap();
        got[i]
            .read
            .clone()
            .unwrap_or_else(|| panic!("{n}: {:?}", got[i]))
    };
    let claimed = by_name("header claims a far-future max timestamp");
    assert_eq!(claimed.max_timestamp, "now+2");
    let lat = by_name("LogAppendTime topic");
    assert!(lat.log_append_time);
    assert_eq!(lat.max_timestamp, "append time");
    let gz = by_name("uncompressed to a gzip topic");
    assert_eq!(gz.codec, 1);
    assert_eq!(gz.records.len(), 3);
    assert_eq!(gz.records[1].4, 1);
    let unc = by_name("zstd to an uncompressed topic");
    assert_eq!(unc.codec, 0);
    let reassigned = by_name("inner offset deltas all 0, gzip re-encoded to the topic's codec");
    assert_eq!(
        reassigned.records.iter().map(|r| r.0).collect::<Vec<_>>(),
        [0, 1, 2]
    );
    let kept = by_name("inner offset deltas all 0, uncompressed");
    assert_eq!(
        kept.records.iter().map(|r| r.0).collect::<Vec<_>>(),
        [0, 0, 0]
    );
}

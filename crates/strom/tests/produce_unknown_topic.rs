//! A Produce to a topic that does not exist is refused, and the topic is not created, whatever
//! `auto.create.topics.enable` says: Kafka creates topics only from Metadata (when the request
//! allows it, `AutoTopicCreationManager` via `KafkaApis.handleTopicMetadataRequest`) and from
//! FindCoordinator (its internal topics); `KafkaApis.handleProduceRequest` answers
//! UNKNOWN_TOPIC_OR_PARTITION for a topic missing from the metadata cache. The same raw requests
//! go to Kafka 4.4 when its jars are here.

mod common;

use std::net::TcpStream;
use std::time::Duration;

use bytes::Bytes;
use common::kafka_ref::{oracle_available, KafkaRef};
use common::*;
use strom_protocol::kafka::messages::metadata_request::MetadataRequestTopic;
use strom_protocol::kafka::messages::produce_request::{PartitionProduceData, TopicProduceData};
use strom_protocol::kafka::messages::{
    ApiKey, MetadataRequest, MetadataResponse, ProduceRequest, ProduceResponse, TopicName,
};
use strom_protocol::kafka::protocol::StrBytes;
use strom_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use strom_protocol::ErrorCode;

fn batch() -> Bytes {
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
        timestamp: 1_700_000_000_000,
        key: Some(Bytes::from_static(b"k")),
        value: Some(Bytes::from_static(b"v")),
        headers: Default::default(),
    };
    let mut buf = Vec::new();
    RecordBatchEncoder::encode(
        &mut buf,
        [rec].iter(),
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .unwrap();
    Bytes::from(buf)
}

fn produce_request(topic: &str, acks: i16) -> ProduceRequest {
    ProduceRequest::default()
        .with_acks(acks)
        .with_timeout_ms(5_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(batch()))])])
}

/// Whether `topic` exists, by a Metadata that does not create it.
fn exists(s: &mut TcpStream, topic: &str) -> bool {
    let req = MetadataRequest::default()
        .with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(
            TopicName(StrBytes::from_string(topic.to_string())),
        ))]))
        .with_allow_auto_topic_creation(false);
    let resp: MetadataResponse = raw_call(s, ApiKey::Metadata, 12, &req);
    resp.topics[0].error_code == 0
}

/// (what was sent, per partition: code and message; whether the topic exists afterwards).
type Answer = (String, Vec<(i16, Option<String>)>, bool);

fn scenario(port: u16) -> Vec<Answer> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_nodelay(true).unwrap();
    let mut out = Vec::new();
    // Produce v3 is the oldest both serve; v9 the first flexible one; v12 the newest Strom serves.
    for (version, acks) in [(3, 1), (9, -1), (9, 1), (12, -1)] {
        let topic = format!("missing-v{version}-acks{acks}");
        let resp: ProduceResponse = raw_call(
            &mut s,
            ApiKey::Produce,
            version,
            &produce_request(&topic, acks),
        );
        let parts = resp
            .responses
            .iter()
            .flat_map(|t| &t.partition_responses)
            .map(|p| {
                (
                    p.error_code,
                    p.error_message.as_ref().map(|m| m.to_string()),
                )
            })
            .collect();
        out.push((
            format!("v{version} acks={acks}"),
            parts,
            exists(&mut s, &topic),
        ));
    }
    // acks=0: no answer; an error closes the connection so that the client notices
    // (`KafkaApis.handleProduceRequest`).
    let topic = "missing-acks0";
    write_frame(
        &mut s,
        &encode_request(ApiKey::Produce, 9, 1, &produce_request(topic, 0)),
    )
    .unwrap();
    let closed = matches!(read_frame(&mut s, Duration::from_secs(10)), Reply::Closed);
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    out.push((
        format!("v9 acks=0, connection closed: {closed}"),
        Vec::new(),
        exists(&mut s, topic),
    ));
    out
}

#[test]
fn produce_to_a_missing_topic_does_not_create_it() {
    // auto.create.topics.enable is true by default; set it anyway, as the oracle's config does.
    let broker = Broker::start_with(&["auto.create.topics.enable=true"]);
    let answers = scenario(broker.port());
    let unknown = ErrorCode::UnknownTopicOrPartition.code();
    for (what, parts, created) in &answers {
        if what.contains("acks=0") {
            assert_eq!(what, "v9 acks=0, connection closed: true");
        } else {
            assert_eq!(parts, &vec![(unknown, None)], "{what}");
        }
        assert!(!created, "{what}: the Produce created the topic");
    }
    // Metadata still creates topics when asked to.
    let mut s = connect(&broker);
    let req = MetadataRequest::default()
        .with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(
            TopicName(StrBytes::from_static_str("by-metadata")),
        ))]))
        .with_allow_auto_topic_creation(true);
    let _: MetadataResponse = raw_call(&mut s, ApiKey::Metadata, 12, &req);
    assert!(exists(&mut s, "by-metadata"));

    match oracle_available() {
        Ok(()) => {
            let kafka = KafkaRef::start();
            let oracle = scenario(kafka.port);
            drop(kafka);
            assert_eq!(answers, oracle, "Strom (left) and Kafka 4.4 (right) differ");
        }
        Err(why) if std::env::var_os("CI").is_some() => panic!("{why}"),
        Err(why) => eprintln!("skipping the comparison with Kafka 4.4: {why}"),
    }
}

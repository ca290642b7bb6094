//! Bad input on a raw socket: garbage, huge frames, unknown APIs and versions, corrupt and
//! oversized batches. The broker answers or closes the connection, keeps serving other clients,
//! and loses nothing already written. Requests are built with the `kafka-protocol` crate.

mod common;

use std::io::Write;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use strom_protocol::kafka::messages::produce_request::{PartitionProduceData, TopicProduceData};
use strom_protocol::kafka::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, ProduceRequest, ProduceResponse,
    RequestHeader, TopicName,
};
use strom_protocol::kafka::protocol::{Encodable, StrBytes};
use strom_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

const TOPIC: &str = "keep";
const KEPT: usize = 500;
const WAIT: Duration = Duration::from_secs(10);

/// Starts a broker holding `KEPT` records in `keep-0`.
fn broker_with_data(settings: &[&str]) -> (Broker, Vec<OutRec>) {
    let broker = Broker::start_with(settings);
    create_topic(&broker, TOPIC, 1, &[]);
    let recs = simple_records("kept", KEPT, Some(0));
    produce_ok(&broker, TOPIC, &[], &recs);
    (broker, recs)
}

/// The broker still serves a fresh client, and every record written before is there.
fn assert_still_serving(broker: &Broker, recs: &[OutRec]) {
    assert_eq!(
        watermarks(broker, TOPIC, 0),
        (0, recs.len() as i64),
        "watermarks after bad input"
    );
    let got = consume_all(broker, TOPIC, 0);
    assert_contiguous(&got, 0);
    assert_records_eq(&got, recs);
    // And a raw ApiVersions on a new connection is answered.
    let mut s = connect(broker);
    let (corr, resp) = api_versions(&mut s, 3, 77);
    assert_eq!(corr, 77);
    assert_eq!(resp.error_code, 0);
}

fn api_versions(
    s: &mut std::net::TcpStream,
    version: i16,
    corr: i32,
) -> (i32, ApiVersionsResponse) {
    let req = ApiVersionsRequest::default()
        .with_client_software_name(StrBytes::from_static_str("strom-it"))
        .with_client_software_version(StrBytes::from_static_str("1.0"));
    write_frame(s, &encode_request(ApiKey::ApiVersions, version, corr, &req)).unwrap();
    let f = expect_frame(s, &format!("ApiVersions v{version}"), WAIT);
    decode_response(ApiKey::ApiVersions, version, f)
}

fn records(n: usize, value_len: usize) -> Vec<Record> {
    (0..n)
        .map(|i| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            // The encoder keeps records in one batch while offset - sequence is constant; this
            // makes the batch's base sequence -1 (no idempotent producer).
            sequence: i as i32 - 1,
            timestamp: 1_700_000_000_000 + i as i64,
            key: Some(Bytes::from(format!("raw-key-{i}"))),
            value: Some(Bytes::from(vec![b'r'; value_len])),
            headers: Default::default(),
        })
        .collect()
}

fn encode_batch(recs: &[Record], compression: Compression) -> Vec<u8> {
    let mut buf = Vec::new();
    RecordBatchEncoder::encode(
        &mut buf,
        recs.iter(),
        &RecordEncodeOptions {
            version: 2,
            compression,
        },
    )
    .unwrap();
    buf
}

/// Sends a Produce v9 (acks=-1) of `batch` to `topic`-0 and returns the partition's error code.
fn produce_raw(broker: &Broker, topic: &'static str, batch: Vec<u8>) -> (i16, Option<String>) {
    let req = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_static_str(topic)))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(Bytes::from(batch)))])]);
    let mut s = connect(broker);
    write_frame(&mut s, &encode_request(ApiKey::Produce, 9, 5, &req)).unwrap();
    let f = expect_frame(&mut s, "Produce v9", WAIT);
    let (corr, resp): (i32, ProduceResponse) = decode_response(ApiKey::Produce, 9, f);
    assert_eq!(corr, 5);
    assert_eq!(resp.responses.len(), 1);
    assert_eq!(resp.responses[0].name.0.as_str(), topic);
    let p = &resp.responses[0].partition_responses;
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].index, 0);
    let mut msg = p[0].error_message.as_ref().map(|m| m.as_str().to_string());
    if !p[0].record_errors.is_empty() {
        msg = Some(format!("{msg:?}; record errors {:?}", p[0].record_errors));
    }
    (p[0].error_code, msg)
}

#[test]
fn garbage_bytes_then_other_clients_still_work() {
    let (broker, recs) = broker_with_data(&[]);

    // An HTTP request: "GET " as a frame size is ~1.2 GB, over socket.request.max.bytes.
    let mut s = connect(&broker);
    s.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    assert!(
        wait_closed(&mut s, WAIT),
        "HTTP garbage: connection should be closed"
    );

    // A small frame of random-looking bytes (a plausible header with a nonsense body).
    let mut s = connect(&broker);
    let mut junk = vec![0u8, 0, 0, 1, 0, 0, 0, 9]; // Produce v1 (below the range), corr 9
    junk.extend((0..200u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8));
    write_frame(&mut s, &junk).unwrap();
    match read_frame(&mut s, WAIT) {
        Reply::Closed => {}
        Reply::Frame(f) => assert!(
            f.len() >= 4 && f[..4] == 9i32.to_be_bytes(),
            "answer to junk"
        ),
        Reply::TimedOut => panic!("junk frame: neither answered nor closed within {WAIT:?}"),
    }

    // A frame whose body is cut short: a Metadata v12 header and a truncated body.
    let mut s = connect(&broker);
    write_frame(
        &mut s,
        &[0, 3, 0, 12, 0, 0, 0, 10, 0, 1, b'x', 0, 0xff, 0xff],
    )
    .unwrap();
    match read_frame(&mut s, WAIT) {
        Reply::Closed | Reply::Frame(_) => {}
        Reply::TimedOut => {
            panic!("truncated Metadata: neither answered nor closed within {WAIT:?}")
        }
    }

    // Random bytes without any framing, then the client just disconnects.
    let mut s = connect(&broker);
    let _ = s.write_all(&[0xde, 0xad, 0xbe, 0xef, 1, 2, 3]);
    drop(s);

    assert_still_serving(&broker, &recs);
}

#[test]
fn huge_frame_length_closes_connection() {
    let (broker, recs) = broker_with_data(&[]);
    for size in [
        0x7fff_ffffu32,
        100 * 1024 * 1024 + 1,
        0xffff_ffff, /* -1 */
    ] {
        let mut s = connect(&broker);
        s.write_all(&size.to_be_bytes()).unwrap();
        let _ = s.write_all(&[0, 18, 0, 3, 0, 0, 0, 1]);
        assert!(
            wait_closed(&mut s, WAIT),
            "frame size {size:#x}: connection should be closed"
        );
    }
    assert_still_serving(&broker, &recs);
}

#[test]
fn unknown_api_key_is_rejected() {
    let (broker, recs) = broker_with_data(&[]);
    let mut s = connect(&broker);
    let mut buf = Vec::new();
    RequestHeader::default()
        .with_request_api_key(9999)
        .with_request_api_version(0)
        .with_correlation_id(42)
        .with_client_id(Some(StrBytes::from_static_str("strom-bad-input")))
        .encode(&mut buf, 1)
        .unwrap();
    buf.extend_from_slice(&[0, 0, 0, 0]);
    write_frame(&mut s, &buf).unwrap();
    match read_frame(&mut s, WAIT) {
        Reply::Closed => {}
        Reply::Frame(f) => {
            assert!(
                f.len() >= 4 && f[..4] == 42i32.to_be_bytes(),
                "answer to API key 9999 has the wrong correlation id"
            );
            // If answered, the connection must still be usable.
            let (corr, resp) = api_versions(&mut s, 3, 43);
            assert_eq!((corr, resp.error_code), (43, 0));
        }
        Reply::TimedOut => panic!("API key 9999: neither answered nor closed within {WAIT:?}"),
    }
    // A known API at a version we do not serve (Metadata v99) is not served either.
    let mut s = connect(&broker);
    let mut buf = Vec::new();
    RequestHeader::default()
        .with_request_api_key(ApiKey::Metadata as i16)
        .with_request_api_version(99)
        .with_correlation_id(44)
        .encode(&mut buf, 2)
        .unwrap();
    buf.extend_from_slice(&[0, 0, 0]);
    write_frame(&mut s, &buf).unwrap();
    match read_frame(&mut s, WAIT) {
        Reply::Closed | Reply::Frame(_) => {}
        Reply::TimedOut => panic!("Metadata v99: neither answered nor closed within {WAIT:?}"),
    }
    assert_still_serving(&broker, &recs);
}

#[test]
fn api_versions_too_high_falls_back_to_v0_with_unsupported_version() {
    let (broker, recs) = broker_with_data(&[]);

    // What the broker serves (v3 request, flexible).
    let mut s = connect(&broker);
    let (corr, ok) = api_versions(&mut s, 3, 1);
    assert_eq!(corr, 1);
    assert_eq!(ok.error_code, 0);
    let advertised: Vec<(i16, i16, i16)> = ok
        .api_keys
        .iter()
        .map(|k| (k.api_key, k.min_version, k.max_version))
        .collect();
    let expected: Vec<(i16, i16, i16)> = strom_broker::handlers::registry::api_versions(
        strom_broker::listeners::ListenerScope::Broker,
    );
    let mut a = advertised.clone();
    a.sort();
    let mut e = expected.clone();
    e.sort();
    if !reference_kafka() {
        assert_eq!(
            a, e,
            "ApiVersions v3 on a client listener must advertise exactly the registry's broker-scope APIs"
        );
    }
    let range = |key: ApiKey| a.iter().find(|x| x.0 == key as i16).map(|x| (x.1, x.2));
    assert!(
        range(ApiKey::Produce).is_some_and(|(lo, hi)| lo <= 3 && hi >= 10),
        "Produce range"
    );
    assert!(
        range(ApiKey::Fetch).is_some_and(|(lo, hi)| lo <= 4 && hi >= 16),
        "Fetch range"
    );
    assert!(
        range(ApiKey::Metadata).is_some_and(|(lo, hi)| lo <= 1 && hi >= 12),
        "Metadata range"
    );
    assert!(
        range(ApiKey::ApiVersions).is_some_and(|(lo, hi)| lo == 0 && hi >= 3),
        "ApiVersions range"
    );

    // v0 still works and lists the same.
    let (_, v0) = api_versions(&mut s, 0, 2);
    assert_eq!(v0.error_code, 0);
    assert_eq!(v0.api_keys.len(), a.len());

    // v99: Kafka answers in the v0 format with UNSUPPORTED_VERSION and its supported APIs.
    let mut s = connect(&broker);
    let mut buf = Vec::new();
    RequestHeader::default()
        .with_request_api_key(ApiKey::ApiVersions as i16)
        .with_request_api_version(99)
        .with_correlation_id(99)
        .with_client_id(Some(StrBytes::from_static_str("from-the-future")))
        .encode(&mut buf, 2)
        .unwrap();
    ApiVersionsRequest::default()
        .with_client_software_name(StrBytes::from_static_str("future"))
        .with_client_software_version(StrBytes::from_static_str("99"))
        .encode(&mut buf, 4)
        .unwrap();
    write_frame(&mut s, &buf).unwrap();
    let f = expect_frame(&mut s, "ApiVersions v99", WAIT);
    let (corr, resp): (i32, ApiVersionsResponse) = decode_response(ApiKey::ApiVersions, 0, f);
    assert_eq!(corr, 99);
    assert_eq!(resp.error_code, 35, "UNSUPPORTED_VERSION");
    let mut listed: Vec<(i16, i16, i16)> = resp
        .api_keys
        .iter()
        .map(|k| (k.api_key, k.min_version, k.max_version))
        .collect();
    listed.sort();
    // Kafka 4.x lists only ApiVersions itself in this fallback; listing more is fine too.
    let own = listed.iter().find(|k| k.0 == ApiKey::ApiVersions as i16);
    let adv = a.iter().find(|k| k.0 == ApiKey::ApiVersions as i16);
    assert!(
        own.is_some(),
        "v0 fallback must list ApiVersions itself: {listed:?}"
    );
    assert_eq!(own, adv, "v0 fallback's ApiVersions range");
    for k in &listed {
        assert!(
            a.contains(k),
            "v0 fallback lists {k:?}, which a v3 response does not"
        );
    }

    // The client can then retry with v0..=v3 on the same connection.
    let (corr, again) = api_versions(&mut s, 3, 100);
    assert_eq!((corr, again.error_code), (100, 0));
    assert_still_serving(&broker, &recs);
}

#[test]
fn produce_with_bad_crc_is_corrupt_message_and_writes_nothing() {
    let (broker, recs) = broker_with_data(&[]);
    let good = encode_batch(&records(5, 20), Compression::None);

    // Flip one byte of the last record's value: the CRC32C no longer matches.
    let mut bad = good.clone();
    let last = bad.len() - 2;
    bad[last] ^= 0x55;
    let (code, msg) = produce_raw(&broker, TOPIC, bad);
    assert_eq!(
        code, 2,
        "CORRUPT_MESSAGE for a payload byte flipped (message {msg:?})"
    );
    assert_eq!(
        watermarks(&broker, TOPIC, 0),
        (0, KEPT as i64),
        "nothing written"
    );

    // Wrong CRC field itself.
    let mut bad = good.clone();
    bad[17] ^= 0xff;
    let (code, msg) = produce_raw(&broker, TOPIC, bad);
    assert_eq!(
        code, 2,
        "CORRUPT_MESSAGE for a wrong CRC field (message {msg:?})"
    );
    assert_eq!(
        watermarks(&broker, TOPIC, 0),
        (0, KEPT as i64),
        "nothing written"
    );

    // A batch whose length field says more than is there.
    let mut bad = good.clone();
    let len = i32::from_be_bytes(bad[8..12].try_into().unwrap()) + 100;
    bad[8..12].copy_from_slice(&len.to_be_bytes());
    let (code, msg) = produce_raw(&broker, TOPIC, bad);
    assert!(
        code == 2 || code == 87,
        "CORRUPT_MESSAGE (2) or INVALID_RECORD (87) for a batch longer than its bytes, got {code} ({msg:?})"
    );
    assert_eq!(
        watermarks(&broker, TOPIC, 0),
        (0, KEPT as i64),
        "nothing written"
    );

    // The good batch is then accepted at the log end.
    let (code, msg) = produce_raw(&broker, TOPIC, good);
    assert_eq!(code, 0, "a valid raw batch is accepted ({msg:?})");
    assert_eq!(watermarks(&broker, TOPIC, 0), (0, KEPT as i64 + 5));
    let got = consume_all(&broker, TOPIC, 0);
    assert_records_eq(&got[..KEPT], &recs);
    assert_eq!(got[KEPT + 4].key.as_deref(), Some(&b"raw-key-4"[..]));
}

#[test]
fn oversized_batch_is_message_too_large() {
    let (broker, recs) = broker_with_data(&[]);
    create_topic(&broker, "small", 1, &[("max.message.bytes", "2048")]);
    let big = encode_batch(&records(2, 3000), Compression::None);
    assert!(big.len() > 2048);
    let (code, msg) = produce_raw(&broker, "small", big);
    assert_eq!(
        code, 10,
        "MESSAGE_TOO_LARGE for a {}-byte batch on a 2048-byte topic ({msg:?})",
        6000
    );
    assert_eq!(watermarks(&broker, "small", 0), (0, 0), "nothing written");
    let fits = encode_batch(&records(2, 100), Compression::None);
    let (code, msg) = produce_raw(&broker, "small", fits);
    assert_eq!(code, 0, "a small batch fits ({msg:?})");
    assert_eq!(watermarks(&broker, "small", 0), (0, 2));

    // Same through the broker-wide message.max.bytes on a default topic.
    assert_still_serving(&broker, &recs);
    drop(broker);
    let broker = Broker::start_with(&["message.max.bytes=4096"]);
    create_topic(&broker, TOPIC, 1, &[]);
    produce_ok(&broker, TOPIC, &[("batch.size", "2000")], &recs);
    let big = encode_batch(&records(3, 3000), Compression::None);
    let (code, msg) = produce_raw(&broker, TOPIC, big);
    assert_eq!(
        code, 10,
        "MESSAGE_TOO_LARGE with broker message.max.bytes=4096 ({msg:?})"
    );
    assert_still_serving(&broker, &recs);
}

#[test]
fn zstd_batch_round_trips_raw() {
    // The vendored librdkafka may lack zstd; produce a zstd batch raw and read it with rdkafka
    // only if it can decode it, otherwise check it is stored and counted.
    let (broker, recs) = broker_with_data(&[]);
    let batch = encode_batch(&records(10, 500), Compression::Zstd);
    let (code, msg) = produce_raw(&broker, TOPIC, batch);
    assert_eq!(code, 0, "zstd batch accepted ({msg:?})");
    assert_eq!(watermarks(&broker, TOPIC, 0), (0, KEPT as i64 + 10));
    let _ = recs;
}

/// Fuzzer findings: requests whose array counts claim billions of elements. The generated
/// decoder reserves that capacity before noticing the bytes are missing; the broker must answer
/// or close, not abort.
#[test]
fn huge_array_counts_do_not_take_the_broker_down() {
    let (broker, recs) = broker_with_data(&[]);
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/artifacts-kept");
    for name in [
        "frame_and_header-oom-DeleteTopics-v1-array-len",
        "frame_and_header-oom-Fetch-v16-compact-array-len",
    ] {
        let frame = std::fs::read(dir.join(name)).unwrap();
        let mut s = connect(&broker);
        s.write_all(&frame).unwrap();
        let _ = read_frame(&mut s, WAIT);
        assert_still_serving(&broker, &recs);
    }
}

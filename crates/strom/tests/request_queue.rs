//! `queued.max.request.bytes` and `queued.max.requests` (Kafka's `SocketServerConfigs`): with
//! the byte bound set, request memory is taken as soon as a frame's size is read and a
//! connection needing more than is left reads nothing until some is given back (Kafka's
//! `SimpleMemoryPool`, not strict, and the muting of its `Selector`); a request parked in a
//! purgatory takes no slot of `queued.max.requests` (Kafka's handler threads are free while
//! a `DelayedFetch` waits).

mod common;

use std::io::Write;
use std::time::Duration;

use common::*;
use strom_protocol::kafka::messages::fetch_request::{FetchPartition, FetchTopic};
use strom_protocol::kafka::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, FetchRequest, TopicName,
};
use strom_protocol::kafka::protocol::StrBytes;

const MIB: usize = 1 << 20;

fn api_versions_frame(corr: i32) -> Vec<u8> {
    let req = encode_request(ApiKey::ApiVersions, 3, corr, &ApiVersionsRequest::default());
    let mut f = (req.len() as i32).to_be_bytes().to_vec();
    f.extend_from_slice(&req);
    f
}

#[test]
fn exhausted_request_memory_holds_other_requests_until_it_is_given_back() {
    let broker = Broker::start_with(&[
        &format!("socket.request.max.bytes={MIB}"),
        &format!("queued.max.request.bytes={MIB}"),
    ]);
    // Two clients announce ~900 KB requests and send only their first bytes: the first takes
    // 900 KB of the 1 MiB, the second the rest and more (the pool may be overdrawn once).
    let mut stalled: Vec<_> = (0..2)
        .map(|_| {
            let mut s = connect(&broker);
            let mut head = (900_000i32).to_be_bytes().to_vec();
            head.extend_from_slice(&[0u8; 10]);
            s.write_all(&head).unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    // A small request now finds no memory left: not answered while the two hold theirs.
    let mut c = connect(&broker);
    c.write_all(&api_versions_frame(9)).unwrap();
    assert!(
        matches!(read_frame(&mut c, Duration::from_secs(2)), Reply::TimedOut),
        "answered although the request memory is exhausted"
    );
    // One of them goes away: its memory comes back and the small request is answered.
    drop(stalled.remove(0));
    let f = expect_frame(
        &mut c,
        "ApiVersions after memory came back",
        Duration::from_secs(10),
    );
    let (corr, resp): (i32, ApiVersionsResponse) = decode_response(ApiKey::ApiVersions, 3, f);
    assert_eq!((corr, resp.error_code), (9, 0));
    drop(stalled);
}

#[test]
fn a_fetch_parked_in_the_purgatory_takes_no_request_slot() {
    let broker = Broker::start_with(&["queued.max.requests=1"]);
    create_topic(&broker, "parked", 1, &[]);
    // A fetch at the log end waits up to 60 s for data...
    let mut waiting = connect(&broker);
    let fetch = FetchRequest::default()
        .with_replica_id((-1).into())
        .with_max_wait_ms(60_000)
        .with_min_bytes(1)
        .with_max_bytes(MIB as i32)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_static_str("parked")))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(0)
                .with_partition_max_bytes(MIB as i32)])]);
    write_frame(&mut waiting, &encode_request(ApiKey::Fetch, 12, 1, &fetch)).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    // ... while the one slot serves other requests, one after another.
    for corr in 0..5 {
        let mut s = connect(&broker);
        s.write_all(&api_versions_frame(corr)).unwrap();
        let f = expect_frame(&mut s, "ApiVersions", Duration::from_secs(10));
        let (got, _): (i32, ApiVersionsResponse) = decode_response(ApiKey::ApiVersions, 3, f);
        assert_eq!(got, corr);
    }
    assert!(matches!(
        read_frame(&mut waiting, Duration::from_millis(10)),
        Reply::TimedOut
    ));
}

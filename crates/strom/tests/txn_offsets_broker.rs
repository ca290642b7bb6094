//! TxnOffsetCommit on a real `strom` process over the wire: advertised at v0-v5, a simple
//! group's transactional offsets are accepted and stay pending (OffsetFetch does not show
//! them; with `require_stable` the partition answers UNSTABLE_OFFSET_COMMIT), still pending
//! after a restart reloads the offsets partition from disk; KIP-447 refuses a generation for
//! a group that does not exist; the commit then makes the offset visible.
//!
//! The transaction is a real one of the transaction coordinator (InitProducerId with a
//! transactional id, AddOffsetsToTxn, which KIP-890 verification requires before the offsets are
//! written), and its commit (EndTxn, then the markers) makes the offsets visible.

mod common;

use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{create_topic, raw_call, Broker};
use strom_protocol::kafka::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopics,
};
use strom_protocol::kafka::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use strom_protocol::kafka::messages::*;
use strom_protocol::kafka::protocol::StrBytes;

const UNSTABLE_OFFSET_COMMIT: i16 = 88;
const ILLEGAL_GENERATION: i16 = 22;
const COORDINATOR_NOT_AVAILABLE: i16 = 15;
const NOT_COORDINATOR: i16 = 16;
const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;

fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn retriable(code: i16) -> bool {
    [
        COORDINATOR_NOT_AVAILABLE,
        NOT_COORDINATOR,
        COORDINATOR_LOAD_IN_PROGRESS,
    ]
    .contains(&code)
}

/// FindCoordinator until the group's coordinator is named (the first request creates
/// `__consumer_offsets`).
fn wait_for_coordinator(port: u16, group: &str) {
    wait_for_key(port, group, 0)
}

/// The same for a key of `key_type` (1: a transactional id, whose first request creates
/// `__transaction_state`).
fn wait_for_key(port: u16, group: &str, key_type: i8) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r: FindCoordinatorResponse = raw_call(
            &mut connect(port),
            ApiKey::FindCoordinator,
            3,
            &FindCoordinatorRequest::default()
                .with_key(s(group))
                .with_key_type(key_type),
        );
        if r.error_code == 0 {
            return;
        }
        assert!(retriable(r.error_code), "FindCoordinator: {}", r.error_code);
        assert!(Instant::now() < deadline, "no coordinator for {group}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

const CONCURRENT_TRANSACTIONS: i16 = 51;

/// Retries `call` while it answers a retriable coordinator error or CONCURRENT_TRANSACTIONS.
fn until_settled(what: &str, mut call: impl FnMut() -> i16) -> i16 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let code = call();
        if !retriable(code) && code != CONCURRENT_TRANSACTIONS {
            return code;
        }
        assert!(Instant::now() < deadline, "{what}: {code}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// InitProducerId for transactional id "tx-1": (producer id, epoch).
fn init_producer(port: u16) -> (i64, i16) {
    wait_for_key(port, "tx-1", 1);
    let mut out = (0, 0);
    let code = until_settled("InitProducerId", || {
        let r: InitProducerIdResponse = raw_call(
            &mut connect(port),
            ApiKey::InitProducerId,
            4,
            &InitProducerIdRequest::default()
                .with_transactional_id(Some(TransactionalId(s("tx-1"))))
                .with_transaction_timeout_ms(60_000)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
        );
        out = (r.producer_id.0, r.producer_epoch);
        r.error_code
    });
    assert_eq!(code, 0, "InitProducerId");
    out
}

fn add_offsets(port: u16, producer: (i64, i16), group: &str) -> i16 {
    until_settled("AddOffsetsToTxn", || {
        let r: AddOffsetsToTxnResponse = raw_call(
            &mut connect(port),
            ApiKey::AddOffsetsToTxn,
            3,
            &AddOffsetsToTxnRequest::default()
                .with_transactional_id(TransactionalId(s("tx-1")))
                .with_producer_id(ProducerId(producer.0))
                .with_producer_epoch(producer.1)
                .with_group_id(GroupId(s(group))),
        );
        r.error_code
    })
}

fn end_txn(port: u16, producer: (i64, i16), commit: bool) -> i16 {
    until_settled("EndTxn", || {
        let r: EndTxnResponse = raw_call(
            &mut connect(port),
            ApiKey::EndTxn,
            3,
            &EndTxnRequest::default()
                .with_transactional_id(TransactionalId(s("tx-1")))
                .with_producer_id(ProducerId(producer.0))
                .with_producer_epoch(producer.1)
                .with_committed(commit),
        );
        r.error_code
    })
}

fn txn_offset_commit(
    port: u16,
    producer: (i64, i16),
    group: &str,
    generation: i32,
    member: &str,
) -> i16 {
    let req = TxnOffsetCommitRequest::default()
        .with_transactional_id(TransactionalId(s("tx-1")))
        .with_group_id(GroupId(s(group)))
        .with_producer_id(ProducerId(producer.0))
        .with_producer_epoch(producer.1)
        .with_generation_id(generation)
        .with_member_id(s(member))
        .with_topics(vec![TxnOffsetCommitRequestTopic::default()
            .with_name(TopicName(s("t")))
            .with_partitions(vec![TxnOffsetCommitRequestPartition::default()
                .with_partition_index(0)
                .with_committed_offset(17)
                .with_committed_leader_epoch(-1)
                .with_committed_metadata(Some(s("in a transaction")))])]);
    let r: TxnOffsetCommitResponse = raw_call(&mut connect(port), ApiKey::TxnOffsetCommit, 3, &req);
    assert_eq!(r.topics.len(), 1);
    r.topics[0].partitions[0].error_code
}

/// (offset, error) of `t`-0 for `group` (OffsetFetch v9), retried while the coordinator
/// loads.
fn fetch(port: u16, group: &str, require_stable: bool) -> (i64, i16) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r: OffsetFetchResponse = raw_call(
            &mut connect(port),
            ApiKey::OffsetFetch,
            9,
            &OffsetFetchRequest::default()
                .with_require_stable(require_stable)
                .with_groups(vec![OffsetFetchRequestGroup::default()
                    .with_group_id(GroupId(s(group)))
                    .with_member_epoch(-1)
                    .with_topics(Some(vec![OffsetFetchRequestTopics::default()
                        .with_name(TopicName(s("t")))
                        .with_partition_indexes(vec![0])]))]),
        );
        let g = &r.groups[0];
        if retriable(g.error_code) {
            assert!(Instant::now() < deadline, "OffsetFetch: {}", g.error_code);
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        assert_eq!(g.error_code, 0);
        let p = &g.topics[0].partitions[0];
        return (p.committed_offset, p.error_code);
    }
}

#[test]
fn transactional_offsets_stay_pending_across_a_restart() {
    let mut b = Broker::start();
    let port = b.port();
    let v: ApiVersionsResponse = raw_call(
        &mut connect(port),
        ApiKey::ApiVersions,
        3,
        &ApiVersionsRequest::default(),
    );
    let txn = v
        .api_keys
        .iter()
        .find(|a| a.api_key == ApiKey::TxnOffsetCommit as i16)
        .map(|a| (a.min_version, a.max_version));
    assert_eq!(txn, Some((0, 5)));

    create_topic(&b, "t", 1, &[]);
    wait_for_coordinator(port, "g");
    let producer = init_producer(port);
    assert_eq!(add_offsets(port, producer, "g"), 0);
    assert_eq!(add_offsets(port, producer, "other"), 0);
    assert_eq!(txn_offset_commit(port, producer, "g", -1, ""), 0);
    assert_eq!(fetch(port, "g", false), (-1, 0), "pending: not visible");
    assert_eq!(fetch(port, "g", true), (-1, UNSTABLE_OFFSET_COMMIT));
    // KIP-447: a generation for a group that does not exist.
    assert_eq!(
        txn_offset_commit(port, producer, "other", 3, "m"),
        ILLEGAL_GENERATION
    );

    // The offsets partition is loaded again from disk: the transaction is still open.
    b.stop();
    b.restart();
    wait_for_coordinator(port, "g");
    assert_eq!(fetch(port, "g", true), (-1, UNSTABLE_OFFSET_COMMIT));
    assert_eq!(fetch(port, "g", false), (-1, 0));

    // The commit's markers reach the offsets partition: the offset becomes visible and stable.
    assert_eq!(end_txn(port, producer, true), 0);
    let deadline = Instant::now() + Duration::from_secs(30);
    while fetch(port, "g", true) != (17, 0) {
        assert!(
            Instant::now() < deadline,
            "the committed offset never became visible"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

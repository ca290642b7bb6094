//! A batch written to `__consumer_offsets` by someone other than the group coordinator (a real
//! client allowed to produce to internal topics: Kafka lets the client id `__admin_client` do it,
//! `KafkaApis.handleProduceRequest`) does not take the group's coordinator offline. The
//! coordinator's next append lands at an unexpected offset; as Kafka's `CoordinatorRuntime`
//! ("out of sync with the underlying log": FAILED, then LOADING) the write that found it answers
//! NOT_COORDINATOR and the shard is reloaded from the log at the same epoch, replaying the foreign
//! records that parse and skipping the others. Commits and fetches then work again.

mod common;

use std::net::TcpStream;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::*;
use strom_group_coordinator::offsets::ops::offset_commit_record;
use strom_group_coordinator::offsets::OffsetAndMetadata;
use strom_group_coordinator::topic::partition_for;
use strom_protocol::kafka::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use strom_protocol::kafka::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopics,
};
use strom_protocol::kafka::messages::{
    ApiKey, FindCoordinatorRequest, FindCoordinatorResponse, GroupId, OffsetCommitRequest,
    OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse, TopicName,
};
use strom_protocol::kafka::protocol::StrBytes;
use strom_protocol::ErrorCode;

const GROUP: &str = "foreign-writes";
const TOPIC: &str = "orders";
/// `offsets.topic.num.partitions`' default.
const OFFSETS_PARTITIONS: i32 = 50;

fn s(x: &str) -> StrBytes {
    StrBytes::from_string(x.to_string())
}

/// Whether a client retries `code` (the coordinator moving, loading or not yet there).
fn retriable(code: i16) -> bool {
    [
        ErrorCode::CoordinatorLoadInProgress,
        ErrorCode::CoordinatorNotAvailable,
        ErrorCode::NotCoordinator,
    ]
    .iter()
    .any(|c| c.code() == code)
}

/// Calls `call` until it answers something a client would not retry, for at most 30 s.
fn settled(what: &str, mut call: impl FnMut() -> i16) -> i16 {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = Vec::new();
    loop {
        let code = call();
        if !retriable(code) {
            return code;
        }
        if seen.last() != Some(&code) {
            seen.push(code);
        }
        assert!(
            Instant::now() < deadline,
            "{what}: still retriable after 30 s, answers {seen:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn find_coordinator(s_: &mut TcpStream) -> i16 {
    let r: FindCoordinatorResponse = raw_call(
        s_,
        ApiKey::FindCoordinator,
        4,
        &FindCoordinatorRequest::default()
            .with_key_type(0)
            .with_coordinator_keys(vec![s(GROUP)]),
    );
    r.coordinators[0].error_code
}

/// A simple-group commit (generation -1, no member) of `offset` for `TOPIC`'s `partition`.
fn commit(s_: &mut TcpStream, partition: i32, offset: i64) -> i16 {
    let req = OffsetCommitRequest::default()
        .with_group_id(GroupId(s(GROUP)))
        .with_generation_id_or_member_epoch(-1)
        .with_member_id(s(""))
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(TopicName(s(TOPIC)))
            .with_partitions(vec![OffsetCommitRequestPartition::default()
                .with_partition_index(partition)
                .with_committed_offset(offset)
                .with_committed_leader_epoch(-1)
                .with_committed_metadata(Some(s("")))])]);
    let r: OffsetCommitResponse = raw_call(s_, ApiKey::OffsetCommit, 8, &req);
    r.topics[0].partitions[0].error_code
}

/// The committed offsets of `TOPIC`'s partitions 0..3 (-1: none), or the group's error.
fn fetch(s_: &mut TcpStream) -> Result<Vec<i64>, i16> {
    let req = OffsetFetchRequest::default()
        .with_require_stable(true)
        .with_groups(vec![OffsetFetchRequestGroup::default()
            .with_group_id(GroupId(s(GROUP)))
            .with_topics(Some(vec![OffsetFetchRequestTopics::default()
                .with_name(TopicName(s(TOPIC)))
                .with_partition_indexes(vec![0, 1, 2])]))]);
    let r: OffsetFetchResponse = raw_call(s_, ApiKey::OffsetFetch, 8, &req);
    let g = &r.groups[0];
    if g.error_code != 0 {
        return Err(g.error_code);
    }
    Ok(g.topics[0]
        .partitions
        .iter()
        .map(|p| p.committed_offset)
        .collect())
}

#[test]
fn a_foreign_write_to_the_offsets_topic_does_not_take_the_group_offline() {
    let broker = Broker::start();
    create_topic(&broker, TOPIC, 3, &[]);
    let mut c = connect(&broker);
    assert_eq!(settled("FindCoordinator", || find_coordinator(&mut c)), 0);
    assert_eq!(settled("first commit", || commit(&mut c, 0, 5)), 0);

    // The client writes one record the coordinator cannot parse and one it can: an offset commit
    // of partition 1 for the same group, in Kafka's schema.
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let record = offset_commit_record(
        GROUP,
        TOPIC,
        1,
        &OffsetAndMetadata {
            record_offset: 0,
            committed_offset: 42,
            leader_epoch: None,
            metadata: String::new(),
            commit_timestamp_ms: now,
            expire_timestamp_ms: None,
            topic_id: Default::default(),
        },
    );
    let partition = partition_for(GROUP, OFFSETS_PARTITIONS);
    let foreign = [
        OutRec {
            partition: Some(partition),
            key: Some(b"\x7f\x7fnot a coordinator record".to_vec()),
            value: Some(b"garbage".to_vec()),
            ..Default::default()
        },
        OutRec {
            partition: Some(partition),
            key: Some(record.encode_key().unwrap().to_vec()),
            value: Some(record.encode_value().unwrap().unwrap().to_vec()),
            ..Default::default()
        },
    ];
    let delivered = produce_ok(
        &broker,
        "__consumer_offsets",
        &[("client.id", "__admin_client"), ("linger.ms", "0")],
        &foreign,
    );
    assert!(delivered.iter().all(|(p, _)| *p == partition));

    // The next commit finds the log moved under the coordinator: it is answered NOT_COORDINATOR
    // and the shard reloads; before the fix every later request got NOT_COORDINATOR until the
    // partition's leadership moved (never, on one node).
    assert_eq!(
        settled("commit after the foreign write", || commit(&mut c, 2, 9)),
        0
    );
    let mut offsets = Err(0);
    settled("fetch", || {
        offsets = fetch(&mut c);
        offsets.as_ref().err().copied().unwrap_or(0)
    });
    assert_eq!(
        offsets,
        Ok(vec![5, 42, 9]),
        "the first commit, the foreign record replayed, the commit after it"
    );
    assert_eq!(settled("commit", || commit(&mut c, 0, 6)), 0);
    assert_eq!(fetch(&mut c), Ok(vec![6, 42, 9]));
    let logs = broker.logs();
    assert!(
        logs.contains("reloading the coordinator shard"),
        "the foreign write was not noticed; logs:\n{logs}"
    );
}

//! The delayed operations of the request handlers on tokio's paused clock (Kafka's fetch and
//! produce purgatories): a fetch short of `min_bytes` answers when an append wakes it, or with
//! what it has exactly at `max_wait_ms`; an acks=all produce answers when a follower fetch moves
//! the HW past its batch, or with REQUEST_TIMED_OUT exactly at the request's `timeout_ms`; a
//! DeleteRecords answers on the follower fetch that brings the low watermark to its offset, or
//! at its timeout.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use strom_controller::CreateTopicSpec;
use strom_protocol::kafka::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use strom_protocol::kafka::messages::fetch_request::{FetchPartition, FetchTopic};
use strom_protocol::kafka::messages::produce_request::{PartitionProduceData, TopicProduceData};
use strom_protocol::kafka::messages::{
    BrokerId, DeleteRecordsRequest, DeleteRecordsResponse, FetchRequest, FetchResponse,
    ProduceRequest, ProduceResponse, TopicName,
};
use strom_protocol::kafka::protocol::StrBytes;
use strom_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use strom_protocol::ErrorCode;
use strom_storage::AppendOrigin;
use tokio::time::Instant;

use super::{delete_records, fetch, produce};
use crate::partition::Partition;
use crate::replication::LeaderAndIsr;
use crate::server::Server;

fn one_record() -> Vec<u8> {
    let record = Record {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: -1,
        producer_id: -1,
        producer_epoch: -1,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence: 0,
        timestamp: 1_700_000_000_000,
        key: None,
        value: Some(Bytes::from_static(b"v")),
        headers: Default::default(),
    };
    let mut buf = BytesMut::new();
    let opts = RecordEncodeOptions {
        version: 2,
        compression: Compression::None,
    };
    RecordBatchEncoder::encode(&mut buf, &[record], &opts).unwrap();
    buf.to_vec()
}

/// A single-node broker (not serving: no chores run) hosting topic `t` with one partition.
async fn broker(dir: &tempfile::TempDir) -> (Server, Arc<Partition>) {
    let server = super::test_server(dir, Default::default()).await;
    let spec = CreateTopicSpec {
        name: "t".into(),
        num_partitions: 1,
        replication_factor: 1,
        ..Default::default()
    };
    let b = server.broker();
    assert!(b.controller.create_topics(&[spec], false).await[0].is_ok());
    b.sync_metadata().await;
    let p = b.replica_manager.get("t", 0).expect("hosted");
    (server, p)
}

fn request(max_wait_ms: i32) -> FetchRequest {
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_static_str("t")))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_current_leader_epoch(-1)
                .with_fetch_offset(0)
                .with_log_start_offset(-1)
                .with_partition_max_bytes(1 << 20)])])
}

/// The bytes of the one partition's records (passed apart from the response, as file ranges).
fn record_bytes((resp, records): &(FetchResponse, Vec<strom_storage::FileRecords>)) -> usize {
    let p = &resp.responses[0].partitions[0];
    assert_eq!(p.error_code, 0);
    records[0].len()
}

/// Lets spawned tasks run without letting paused time auto-advance.
async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn fetch_waits_exactly_max_wait_ms_for_data() {
    let dir = tempfile::tempdir().unwrap();
    let (server, _) = broker(&dir).await;
    let b = server.broker();
    let start = Instant::now();
    let waiting = tokio::spawn(async move { fetch::handle(&b, request(500), 12).await });
    settle().await;
    tokio::time::advance(Duration::from_millis(499)).await;
    settle().await;
    assert!(!waiting.is_finished(), "1 ms before max_wait_ms");
    tokio::time::advance(Duration::from_millis(1)).await;
    settle().await;
    assert!(waiting.is_finished(), "at max_wait_ms");
    assert_eq!(record_bytes(&waiting.await.unwrap()), 0);
    assert_eq!(start.elapsed(), Duration::from_millis(500));
}

#[tokio::test(start_paused = true)]
async fn fetch_answers_on_the_append_that_brings_min_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let (server, p) = broker(&dir).await;
    let b = server.broker();
    let start = Instant::now();
    let waiting = tokio::spawn(async move { fetch::handle(&b, request(30_000), 12).await });
    settle().await;
    tokio::time::advance(Duration::from_millis(1_234)).await;
    settle().await;
    assert!(!waiting.is_finished());
    p.append_records_to_leader(
        &one_record(),
        AppendOrigin::Client,
        1,
        p.leader_epoch(),
        crate::now_ms(),
    )
    .unwrap();
    settle().await;
    assert!(waiting.is_finished(), "woken by the append, not by a poll");
    assert!(record_bytes(&waiting.await.unwrap()) > 0);
    assert_eq!(start.elapsed(), Duration::from_millis(1_234));
}

fn produce_request(timeout_ms: i32) -> ProduceRequest {
    ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(timeout_ms)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_static_str("t")))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(Bytes::from(one_record())))])])
}

fn produce_error(resp: &ProduceResponse) -> i16 {
    let p = &resp.responses[0].partition_responses[0];
    assert_eq!(p.base_offset, 0, "appended before waiting");
    p.error_code
}

/// Broker 1's partition gets a follower, 2, in its ISR, so acks=all waits for it.
fn add_follower(p: &Partition) {
    let reg = LeaderAndIsr {
        leader: 1,
        leader_epoch: 1,
        partition_epoch: 1,
        replicas: vec![1, 2],
        isr: vec![1, 2],
    };
    p.apply_leader_and_isr(&reg, crate::now_ms());
}

#[tokio::test(start_paused = true)]
async fn acks_all_produce_times_out_exactly_at_timeout_ms() {
    let dir = tempfile::tempdir().unwrap();
    let (server, p) = broker(&dir).await;
    add_follower(&p);
    let b = server.broker();
    let start = Instant::now();
    let waiting = tokio::spawn(async move { produce::handle(&b, produce_request(1_500), 9).await });
    settle().await;
    assert_eq!(p.log_end_offset(), 1);
    tokio::time::advance(Duration::from_millis(1_499)).await;
    settle().await;
    assert!(!waiting.is_finished(), "1 ms before timeout_ms");
    tokio::time::advance(Duration::from_millis(1)).await;
    settle().await;
    assert!(waiting.is_finished(), "at timeout_ms");
    let resp = waiting.await.unwrap();
    assert_eq!(produce_error(&resp), ErrorCode::RequestTimedOut.code());
    assert_eq!(start.elapsed(), Duration::from_millis(1_500));
}

#[tokio::test(start_paused = true)]
async fn acks_all_produce_answers_on_the_follower_fetch() {
    let dir = tempfile::tempdir().unwrap();
    let (server, p) = broker(&dir).await;
    add_follower(&p);
    let b = server.broker();
    let start = Instant::now();
    let waiting =
        tokio::spawn(async move { produce::handle(&b, produce_request(30_000), 9).await });
    settle().await;
    tokio::time::advance(Duration::from_millis(250)).await;
    settle().await;
    assert!(!waiting.is_finished());
    assert!(p.update_follower_fetch_state(2, 1, 0, crate::now_ms(), 1, -1));
    settle().await;
    assert!(waiting.is_finished(), "woken by the fetch, not by a poll");
    assert_eq!(produce_error(&waiting.await.unwrap()), 0);
    assert_eq!(start.elapsed(), Duration::from_millis(250));
}

fn delete_request(offset: i64, timeout_ms: i32) -> DeleteRecordsRequest {
    DeleteRecordsRequest::default()
        .with_timeout_ms(timeout_ms)
        .with_topics(vec![DeleteRecordsTopic::default()
            .with_name(TopicName(StrBytes::from_static_str("t")))
            .with_partitions(vec![DeleteRecordsPartition::default()
                .with_partition_index(0)
                .with_offset(offset)])])
}

fn delete_result(resp: &DeleteRecordsResponse) -> (i16, i64) {
    let p = &resp.topics[0].partitions[0];
    (p.error_code, p.low_watermark)
}

/// Three records, replicated to follower 2 (HW 3), whose log starts at 0.
fn three_replicated_records(p: &Partition) {
    add_follower(p);
    for _ in 0..3 {
        p.append_records_to_leader(
            &one_record(),
            AppendOrigin::Client,
            1,
            p.leader_epoch(),
            crate::now_ms(),
        )
        .unwrap();
    }
    assert!(p.update_follower_fetch_state(2, 3, 0, crate::now_ms(), 3, -1));
    assert_eq!(p.high_watermark(), 3);
}

#[tokio::test(start_paused = true)]
async fn delete_records_answers_on_the_follower_fetch_that_moves_the_low_watermark() {
    let dir = tempfile::tempdir().unwrap();
    let (server, p) = broker(&dir).await;
    three_replicated_records(&p);
    let b = server.broker();
    let start = Instant::now();
    let waiting =
        tokio::spawn(async move { delete_records::handle(&b, delete_request(2, 30_000)).await });
    settle().await;
    assert_eq!(
        p.log_start_offset(),
        2,
        "the leader moved its log start at once"
    );
    assert_eq!(p.low_watermark(), 0, "the follower has not yet");
    tokio::time::advance(Duration::from_millis(400)).await;
    settle().await;
    assert!(!waiting.is_finished());
    // A fetch that moves the follower's log start short of the offset changes nothing.
    assert!(p.update_follower_fetch_state(2, 3, 1, crate::now_ms(), 3, -1));
    settle().await;
    assert!(!waiting.is_finished());
    assert!(p.update_follower_fetch_state(2, 3, 2, crate::now_ms(), 3, -1));
    settle().await;
    assert!(waiting.is_finished(), "woken by the fetch, not by a poll");
    assert_eq!(delete_result(&waiting.await.unwrap()), (0, 2));
    assert_eq!(start.elapsed(), Duration::from_millis(400));
    assert_eq!(p.delayed_operations().delete_records.num_delayed(), 0);
}

#[tokio::test(start_paused = true)]
async fn delete_records_times_out_exactly_at_timeout_ms_with_the_low_watermark_so_far() {
    let dir = tempfile::tempdir().unwrap();
    let (server, p) = broker(&dir).await;
    three_replicated_records(&p);
    let b = server.broker();
    let start = Instant::now();
    // -1: up to the HW.
    let waiting =
        tokio::spawn(async move { delete_records::handle(&b, delete_request(-1, 2_000)).await });
    settle().await;
    assert_eq!(p.log_start_offset(), 3);
    assert!(p.update_follower_fetch_state(2, 3, 1, crate::now_ms(), 3, -1));
    tokio::time::advance(Duration::from_millis(1_999)).await;
    settle().await;
    assert!(!waiting.is_finished(), "1 ms before timeout_ms");
    tokio::time::advance(Duration::from_millis(1)).await;
    settle().await;
    assert!(waiting.is_finished(), "at timeout_ms");
    assert_eq!(
        delete_result(&waiting.await.unwrap()),
        (ErrorCode::RequestTimedOut.code(), 1)
    );
    assert_eq!(start.elapsed(), Duration::from_millis(2_000));
}

#[tokio::test(start_paused = true)]
async fn delete_records_completes_at_once_on_a_single_replica_and_refuses_past_the_hw() {
    let dir = tempfile::tempdir().unwrap();
    let (server, p) = broker(&dir).await;
    for _ in 0..2 {
        p.append_records_to_leader(&one_record(), AppendOrigin::Client, 1, 0, crate::now_ms())
            .unwrap();
    }
    let b = server.broker();
    let resp = delete_records::handle(&b, delete_request(1, 30_000)).await;
    assert_eq!(delete_result(&resp), (0, 1));
    let resp = delete_records::handle(&b, delete_request(5, 30_000)).await;
    assert_eq!(
        delete_result(&resp),
        (ErrorCode::OffsetOutOfRange.code(), -1)
    );
    assert_eq!(p.log_start_offset(), 1);
}

/// A fetch waiting for data answers NOT_LEADER_OR_FOLLOWER on the leadership change, not at
/// `max_wait_ms`.
#[tokio::test(start_paused = true)]
async fn waiting_fetch_answers_on_a_leadership_change() {
    let dir = tempfile::tempdir().unwrap();
    let (server, p) = broker(&dir).await;
    let b = server.broker();
    let start = Instant::now();
    let waiting = tokio::spawn(async move { fetch::handle(&b, request(30_000), 12).await });
    settle().await;
    tokio::time::advance(Duration::from_millis(100)).await;
    settle().await;
    assert!(!waiting.is_finished());
    p.apply_leader_and_isr(
        &LeaderAndIsr {
            leader: 2,
            leader_epoch: 1,
            partition_epoch: 1,
            replicas: vec![1, 2],
            isr: vec![1, 2],
        },
        crate::now_ms(),
    );
    settle().await;
    assert!(waiting.is_finished());
    let (resp, _) = waiting.await.unwrap();
    assert_eq!(
        resp.responses[0].partitions[0].error_code,
        ErrorCode::NotLeaderOrFollower.code()
    );
    assert_eq!(start.elapsed(), Duration::from_millis(100));
}

/// Kafka's `stopPartitions`: the operations waiting on a partition that is no longer hosted
/// answer at once, UNKNOWN_TOPIC_OR_PARTITION, not at their timeouts.
#[tokio::test(start_paused = true)]
async fn waiting_operations_answer_when_their_partition_is_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let (server, p) = broker(&dir).await;
    add_follower(&p);
    let b = server.broker();
    let spawn_produce = |b: Arc<crate::server::Broker>| {
        tokio::spawn(async move { produce::handle(&b, produce_request(30_000), 9).await })
    };
    // The first record is replicated (HW 1); the follower's log start stays 0.
    let first = spawn_produce(b.clone());
    settle().await;
    assert!(p.update_follower_fetch_state(2, 1, 0, crate::now_ms(), 1, -1));
    settle().await;
    assert_eq!(produce_error(&first.await.unwrap()), 0);
    let start = Instant::now();
    // A consumer waits for data past the HW; DeleteRecords for the follower's log start; an
    // acks=all produce for the follower.
    let fetch = {
        let (b, mut req) = (b.clone(), request(30_000));
        req.topics[0].partitions[0].fetch_offset = 1;
        tokio::spawn(async move { fetch::handle(&b, req, 12).await })
    };
    let delete = {
        let b = b.clone();
        tokio::spawn(async move { delete_records::handle(&b, delete_request(1, 30_000)).await })
    };
    settle().await;
    let produce = spawn_produce(b.clone());
    settle().await;
    tokio::time::advance(Duration::from_millis(100)).await;
    settle().await;
    assert!(!fetch.is_finished() && !delete.is_finished() && !produce.is_finished());
    let deleted = b
        .controller
        .delete_topics(&[(Some("t".to_string()), None)])
        .await;
    assert!(deleted[0].is_ok(), "{deleted:?}");
    // The metadata loader applies the deletion on its own thread. Wait for it blocking this
    // (paused-clock) runtime, so that tokio cannot auto-advance time to the 30 s timeouts
    // meanwhile, as an `.await` on the loader would let it.
    for _ in 0..5000 {
        if b.replica_manager.get("t", 0).is_none() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    settle().await;
    assert!(b.replica_manager.get("t", 0).is_none());
    assert!(fetch.is_finished() && delete.is_finished() && produce.is_finished());
    let unknown = ErrorCode::UnknownTopicOrPartition.code();
    let resp = produce.await.unwrap();
    let pr = &resp.responses[0].partition_responses[0];
    assert_eq!((pr.base_offset, pr.error_code), (1, unknown));
    let (resp, _) = fetch.await.unwrap();
    assert_eq!(resp.responses[0].partitions[0].error_code, unknown);
    assert_eq!(delete_result(&delete.await.unwrap()).0, unknown);
    assert_eq!(start.elapsed(), Duration::from_millis(100));
}

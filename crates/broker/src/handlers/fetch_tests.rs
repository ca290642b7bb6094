//! The fetch long poll on tokio's paused clock: a fetch short of `min_bytes` answers when an
//! append wakes it, or with what it has exactly at `max_wait_ms`, never earlier.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use strom_controller::CreateTopicSpec;
use strom_protocol::kafka::messages::fetch_request::{FetchPartition, FetchTopic};
use strom_protocol::kafka::messages::BrokerId;
use strom_protocol::kafka::protocol::StrBytes;
use strom_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use strom_storage::AppendOrigin;
use tokio::time::Instant;

use super::*;
use crate::config::BrokerConfig;
use crate::partition::Partition;
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
    let config = BrokerConfig::new(
        1,
        "127.0.0.1:0".parse().unwrap(),
        None,
        dir.path().to_path_buf(),
        BTreeMap::new(),
    )
    .unwrap();
    let server = Server::start(config).await.unwrap();
    let spec = CreateTopicSpec {
        name: "t".into(),
        num_partitions: 1,
        replication_factor: 1,
        ..Default::default()
    };
    let b = server.broker();
    assert!(b.controller.create_topics(&[spec], false).await[0].is_ok());
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

fn record_bytes(resp: &FetchResponse) -> usize {
    let p = &resp.responses[0].partitions[0];
    assert_eq!(p.error_code, 0);
    p.records.as_ref().map_or(0, |r| r.len())
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
    let waiting = tokio::spawn(async move { handle(&b, request(500), 12).await });
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
    let waiting = tokio::spawn(async move { handle(&b, request(30_000), 12).await });
    settle().await;
    tokio::time::advance(Duration::from_millis(1_234)).await;
    settle().await;
    assert!(!waiting.is_finished());
    p.append_records_to_leader(&one_record(), AppendOrigin::Client, crate::now_ms())
        .unwrap();
    settle().await;
    assert!(waiting.is_finished(), "woken by the append, not by a poll");
    assert!(record_bytes(&waiting.await.unwrap()) > 0);
    assert_eq!(start.elapsed(), Duration::from_millis(1_234));
}

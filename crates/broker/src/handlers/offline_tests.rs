//! Offline replicas through the request handlers: a partition whose log cannot be created, or
//! whose append fails with an I/O error, answers KAFKA_storage_error(), is listed in Metadata's
//! `offline_replicas`, and once reported (AssignReplicasToDirs with `DirectoryId.LOST`) the
//! controller takes its leadership away.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use strom_protocol::kafka::messages::create_partitions_request::CreatePartitionsTopic;
use strom_protocol::kafka::messages::create_topics_request::{
    CreatableTopic, CreatableTopicConfig,
};
use strom_protocol::kafka::messages::fetch_request::{FetchPartition, FetchTopic};
use strom_protocol::kafka::messages::list_offsets_request::{
    ListOffsetsPartition, ListOffsetsTopic,
};
use strom_protocol::kafka::messages::metadata_request::MetadataRequestTopic;
use strom_protocol::kafka::messages::produce_request::{PartitionProduceData, TopicProduceData};
use strom_protocol::kafka::messages::{
    BrokerId, CreatePartitionsRequest, CreateTopicsRequest, FetchRequest, ListOffsetsRequest,
    MetadataRequest, ProduceRequest, TopicName,
};
use strom_protocol::kafka::protocol::StrBytes;
use strom_protocol::ErrorCode;

use super::{fetch, list_offsets, metadata, produce, topics};
use crate::config::BrokerConfig;
use crate::server::{Broker, Server};

fn storage_error() -> i16 {
    ErrorCode::KafkaStorageError.code()
}

fn batch(value: &'static [u8]) -> Bytes {
    Bytes::from(strom_protocol::testing::plain_batch(
        [(None, Some(Bytes::from_static(value)))],
        1_700_000_000_000,
    ))
}

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

async fn start(dir: &tempfile::TempDir) -> (Server, Arc<Broker>) {
    let server = super::test_server(dir, Default::default()).await;
    let b = server.broker();
    (server, b)
}

async fn create(b: &Arc<Broker>, topic: &str, configs: &[(&str, &str)]) -> (i16, Option<String>) {
    let req = CreateTopicsRequest::default()
        .with_timeout_ms(5_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(name(topic))
            .with_num_partitions(1)
            .with_replication_factor(1)
            .with_configs(
                configs
                    .iter()
                    .map(|(k, v)| {
                        CreatableTopicConfig::default()
                            .with_name(StrBytes::from_string(k.to_string()))
                            .with_value(Some(StrBytes::from_string(v.to_string())))
                    })
                    .collect(),
            )]);
    let resp = topics::create_topics(b, req, 7).await;
    let t = &resp.topics[0];
    (
        t.error_code,
        t.error_message.as_ref().map(|m| m.to_string()),
    )
}

async fn produce(b: &Arc<Broker>, topic: &str, value: &'static [u8]) -> i16 {
    let req = ProduceRequest::default()
        .with_acks(1)
        .with_timeout_ms(5_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name(topic))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(batch(value)))])]);
    produce::handle(b, req, 9).await.responses[0].partition_responses[0].error_code
}

async fn fetch(b: &Arc<Broker>, topic: &str) -> i16 {
    let req = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_min_bytes(0)
        .with_max_bytes(1 << 20)
        .with_topics(vec![FetchTopic::default()
            .with_topic(name(topic))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_current_leader_epoch(-1)
                .with_fetch_offset(0)
                .with_log_start_offset(-1)
                .with_partition_max_bytes(1 << 20)])]);
    fetch::handle(b, req, 12).await.0.responses[0].partitions[0].error_code
}

fn list_offsets(b: &Arc<Broker>, topic: &str) -> i16 {
    let req = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(name(topic))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(0)
                .with_current_leader_epoch(-1)
                .with_timestamp(-1)])]);
    list_offsets::handle(b, req, 7).topics[0].partitions[0].error_code
}

/// (leader, offline replicas) of partition 0 as Metadata answers.
async fn metadata(b: &Arc<Broker>, topic: &str) -> (i32, Vec<i32>) {
    let req = MetadataRequest::default().with_topics(Some(vec![
        MetadataRequestTopic::default().with_name(Some(name(topic)))
    ]));
    let resp = metadata::handle(b, req, 12).await;
    let p = &resp.topics[0].partitions[0];
    (
        p.leader_id.0,
        p.offline_replicas.iter().map(|r| r.0).collect(),
    )
}

/// What `directory_assignments::run` does on its next round.
async fn report(b: &Arc<Broker>) {
    let pending = crate::directory_assignments::pending_assignments(
        &b.replica_manager,
        &b.image(),
        b.config.node_id,
    );
    assert!(!pending.is_empty());
    b.channel
        .assign_replicas_to_dirs(&pending, false)
        .await
        .unwrap();
    // Publishing is asynchronous (the metadata loader): wait until the image has it.
    b.sync_metadata().await;
    assert!(crate::directory_assignments::pending_assignments(
        &b.replica_manager,
        &b.image(),
        b.config.node_id
    )
    .is_empty());
}

#[tokio::test]
async fn a_partition_whose_log_cannot_be_created_is_offline() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, b) = start(&dir).await;
    // A plain file where the partition's directory must go.
    std::fs::write(dir.path().join("bad-0"), b"not a directory").unwrap();
    let (code, msg) = create(&b, "bad", &[]).await;
    assert_eq!(code, storage_error(), "{msg:?}");
    assert!(b.replica_manager.is_offline("bad", 0));
    assert_eq!(produce(&b, "bad", b"x").await, storage_error());
    assert_eq!(fetch(&b, "bad").await, storage_error());
    assert_eq!(list_offsets(&b, "bad"), storage_error());
    assert_eq!(metadata(&b, "bad").await, (1, vec![1]));
    // Other topics are unaffected.
    assert_eq!(create(&b, "good", &[]).await.0, 0);
    assert_eq!(produce(&b, "good", b"x").await, 0);
    // The controller hears of it: the only replica is offline, so the partition has no leader.
    report(&b).await;
    assert_eq!(metadata(&b, "bad").await, (-1, vec![1]));
    assert_eq!(metadata(&b, "good").await, (1, vec![]));
    // Offline until restart: a new image does not try again.
    assert_eq!(create(&b, "other", &[]).await.0, 0);
    assert!(b.replica_manager.is_offline("bad", 0));
    // CreatePartitions reports a new partition that cannot be opened, not the old ones.
    std::fs::write(dir.path().join("good-1"), b"not a directory").unwrap();
    let more = |count| {
        CreatePartitionsRequest::default()
            .with_timeout_ms(5_000)
            .with_topics(vec![CreatePartitionsTopic::default()
                .with_name(name("good"))
                .with_count(count)
                .with_assignments(None)])
    };
    let resp = topics::create_partitions(&b, more(2)).await;
    assert_eq!(resp.results[0].error_code, storage_error());
    let resp = topics::create_partitions(&b, more(3)).await;
    assert_eq!(resp.results[0].error_code, 0);
}

#[tokio::test]
async fn an_append_that_fails_with_an_io_error_makes_the_replica_offline() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, b) = start(&dir).await;
    // Tiny segments: the second append rolls, which creates files in the partition dir.
    assert_eq!(create(&b, "w", &[("segment.bytes", "14")]).await.0, 0);
    assert_eq!(produce(&b, "w", b"first").await, 0);
    let pdir = dir.path().join("w-0");
    std::fs::rename(&pdir, dir.path().join("w-0.moved")).unwrap();
    std::fs::write(&pdir, b"not a directory").unwrap();
    assert_eq!(produce(&b, "w", b"second").await, storage_error());
    assert!(b.replica_manager.is_offline("w", 0));
    // From now on refused at the lookup, not by failing writes one after another.
    assert_eq!(produce(&b, "w", b"third").await, storage_error());
    assert_eq!(fetch(&b, "w").await, storage_error());
    assert_eq!(metadata(&b, "w").await, (1, vec![1]));
    report(&b).await;
    assert_eq!(metadata(&b, "w").await, (-1, vec![1]));
}

#[tokio::test]
async fn a_log_dir_whose_checkpoints_fail_takes_its_replicas_offline() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b_dir) = (dir.path().join("a"), dir.path().join("b"));
    let props = BTreeMap::from([(
        "log.dirs".to_string(),
        format!("{},{}", a.display(), b_dir.display()),
    )]);
    let config = BrokerConfig::new(
        1,
        "127.0.0.1:0".parse().unwrap(),
        None,
        dir.path().join("unused"),
        props,
    )
    .unwrap();
    crate::meta_properties::format(&config.log_dirs, config.node_id, "test-cluster", true).unwrap();
    let server = Server::start(config).await.unwrap();
    let b = server.broker();
    assert_eq!(create(&b, "in-a", &[]).await.0, 0);
    assert_eq!(create(&b, "in-b", &[]).await.0, 0);
    assert!(a.join("in-a-0").is_dir() && b_dir.join("in-b-0").is_dir());
    // A directory where a's checkpoint file goes: the checkpoint write fails.
    std::fs::create_dir_all(a.join("replication-offset-checkpoint").join("x")).unwrap();
    assert!(b.replica_manager.checkpoint().is_err());
    assert!(b.replica_manager.is_offline("in-a", 0));
    assert_eq!(produce(&b, "in-a", b"x").await, storage_error());
    assert_eq!(produce(&b, "in-b", b"x").await, 0);
    // New partitions go to the dir still online.
    assert_eq!(create(&b, "new", &[]).await.0, 0);
    assert!(b_dir.join("new-0").is_dir());
    assert!(b.replica_manager.checkpoint().is_ok());
}

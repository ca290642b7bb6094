//! The group coordinator's wiring against real partitions of a single-node broker: the
//! runtime's writer and loader, the HW listener, and election / resignation from metadata.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use strom_controller::{
    BrokerInfo, CreateTopicSpec, MetadataDelta, MetadataImage, PartitionRegistration,
    TopicImage as ControllerTopic,
};
use strom_coordinator_common::runtime::{
    CoordinatorLoader, LoadedRecord, PartitionWriter, RawRecord, TxnProducer, TxnResult,
};
use strom_protocol::kafka::messages::{
    GroupId, OffsetFetchRequest, ProducerId, TopicName, TransactionalId, TxnOffsetCommitRequest,
};
use strom_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use strom_protocol::ErrorCode;
use strom_storage::{AppendOrigin, LogConfig, UnifiedLog};
use uuid::Uuid;

use super::*;
use crate::config::BrokerConfig;
use crate::partition::Partition;
use crate::replication::LeaderAndIsr;
use crate::server::Server;

async fn broker(dir: &tempfile::TempDir) -> Server {
    let props: BTreeMap<String, String> =
        [("offsets.topic.num.partitions".to_string(), "3".to_string())].into();
    let config = BrokerConfig::new(
        1,
        "127.0.0.1:0".parse().unwrap(),
        None,
        dir.path().to_path_buf(),
        props,
    )
    .unwrap();
    crate::meta_properties::format(&config.log_dirs, config.node_id, "test-cluster", true).unwrap();
    Server::start(config).await.unwrap()
}

async fn create(server: &Server, spec: CreateTopicSpec) {
    let b = server.broker();
    let r = b.controller.create_topics(&[spec], false).await;
    assert!(r[0].is_ok(), "{r:?}");
    b.sync_metadata().await;
}

fn plain(name: &str) -> CreateTopicSpec {
    CreateTopicSpec {
        name: name.into(),
        num_partitions: 1,
        replication_factor: 1,
        ..Default::default()
    }
}

fn plain_partitions(name: &str, partitions: i32) -> CreateTopicSpec {
    CreateTopicSpec {
        num_partitions: partitions,
        ..plain(name)
    }
}

fn rec(k: &str, v: Option<&str>) -> RawRecord {
    (
        Bytes::from(k.to_string()),
        v.map(|v| Bytes::from(v.to_string())),
    )
}

type Loaded = Vec<(i64, Bytes, Option<Bytes>)>;

fn load(
    io: &CoordinatorPartitions,
    topic: &str,
    epoch: i32,
) -> Result<(Loaded, strom_coordinator_common::runtime::AppendResult), ErrorCode> {
    let mut seen = Vec::new();
    let r = io.load(&(topic.to_string(), 0), epoch, &mut |o, k, v| {
        seen.push((o, k, v))
    });
    r.map(|end| (seen, end)).map_err(|e| e.code)
}

#[tokio::test]
async fn records_appended_by_the_coordinator_load_back_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let server = broker(&dir).await;
    create(&server, plain("t")).await;
    let b = server.broker();
    let io = CoordinatorPartitions::new(b.replica_manager.clone());
    let tp = ("t".to_string(), 0);
    let epoch = b.replica_manager.get("t", 0).unwrap().leader_epoch();

    let first = [rec("a", Some("1")), rec("b", None)];
    let r = io.append(&tp, epoch, &first).unwrap();
    assert_eq!((r.base_offset, r.last_offset, r.high_watermark), (0, 1, 2));
    let r = io.append(&tp, epoch, &[rec("a", Some("2"))]).unwrap();
    assert_eq!((r.base_offset, r.last_offset, r.high_watermark), (2, 2, 3));

    let (seen, end) = load(&io, "t", epoch).unwrap();
    let expect: Loaded = first
        .iter()
        .chain([rec("a", Some("2"))].iter())
        .enumerate()
        .map(|(i, (k, v))| (i as i64, k.clone(), v.clone()))
        .collect();
    assert_eq!(seen, expect);
    assert_eq!((end.last_offset, end.high_watermark), (2, 3));

    // Each append is one batch of magic 2, uncompressed, without a producer id.
    let p = b.replica_manager.get("t", 0).unwrap();
    let batches = p.with_log(|log| {
        let data = log.read(0, 1 << 20, log.log_end_offset(), false).unwrap();
        strom_protocol::batch::BatchIter::new(&data.records)
            .map(|b| {
                let b = b.unwrap();
                (
                    b.base_offset(),
                    b.records_count(),
                    b.producer_id(),
                    b.magic(),
                )
            })
            .collect::<Vec<_>>()
    });
    assert_eq!(batches, vec![(0, 2, -1, 2), (2, 1, -1, 2)]);
    server.broker().metadata_loader.shutdown().await;
}

/// A log written by Kafka may hold compressed batches; the loader decodes them.
#[tokio::test]
async fn the_loader_reads_compressed_batches() {
    let dir = tempfile::tempdir().unwrap();
    let server = broker(&dir).await;
    create(&server, plain("t")).await;
    let b = server.broker();
    let p = b.replica_manager.get("t", 0).unwrap();
    let records: Vec<Record> = (0..3)
        .map(|i| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i,
            // One batch: kafka-protocol's encoder splits where offset - sequence changes.
            sequence: i as i32,
            // The appends below run at time 0, within message.timestamp.after.max.ms.
            timestamp: 0,
            key: Some(Bytes::from(format!("k{i}"))),
            value: (i != 1).then(|| Bytes::from(format!("v{i}"))),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::Gzip,
        },
    )
    .unwrap();
    let epoch = p.leader_epoch();
    p.append_records_to_leader(&buf, AppendOrigin::Client, 1, epoch, 0)
        .unwrap();
    let io = CoordinatorPartitions::new(b.replica_manager.clone());
    io.append(&("t".into(), 0), epoch, &[rec("k3", Some("v3"))])
        .unwrap();
    let (seen, end) = load(&io, "t", epoch).unwrap();
    let keys: Vec<(i64, String, bool)> = seen
        .iter()
        .map(|(o, k, v)| (*o, String::from_utf8_lossy(k).into_owned(), v.is_some()))
        .collect();
    assert_eq!(
        keys,
        vec![
            (0, "k0".into(), true),
            (1, "k1".into(), false),
            (2, "k2".into(), true),
            (3, "k3".into(), true)
        ]
    );
    assert_eq!(end.last_offset, 3);
    server.broker().metadata_loader.shutdown().await;
}

/// The shard's epoch must still be the partition's: an older one is FENCED_LEADER_EPOCH, a
/// newer one UNKNOWN_LEADER_EPOCH, a lost leadership NOT_LEADER_OR_FOLLOWER; nothing is written.
#[tokio::test]
async fn an_append_or_load_at_another_leader_epoch_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let server = broker(&dir).await;
    create(&server, plain("t")).await;
    let b = server.broker();
    let p = b.replica_manager.get("t", 0).unwrap();
    let reg = |leader, leader_epoch| LeaderAndIsr {
        leader,
        leader_epoch,
        partition_epoch: leader_epoch,
        replicas: vec![1],
        isr: vec![1],
    };
    p.apply_leader_and_isr(&reg(1, 5), 0);
    let io = CoordinatorPartitions::new(b.replica_manager.clone());
    let tp = ("t".to_string(), 0);
    let code = |epoch| io.append(&tp, epoch, &[rec("a", None)]).unwrap_err().code;
    assert_eq!(code(4), ErrorCode::FencedLeaderEpoch);
    assert_eq!(code(6), ErrorCode::UnknownLeaderEpoch);
    assert_eq!(load(&io, "t", 4).unwrap_err(), ErrorCode::FencedLeaderEpoch);
    assert_eq!(p.log_end_offset(), 0);
    assert!(io.append(&tp, 5, &[rec("a", None)]).is_ok());
    p.apply_leader_and_isr(&reg(2, 6), 0);
    assert_eq!(code(6), ErrorCode::NotLeaderOrFollower);
    assert_eq!(p.log_end_offset(), 1);
    let missing = io.append(&("nope".into(), 0), 0, &[rec("a", None)]);
    assert_eq!(
        missing.unwrap_err().code,
        ErrorCode::UnknownTopicOrPartition
    );
    server.broker().metadata_loader.shutdown().await;
}

#[derive(Default)]
struct Heard(Mutex<Vec<(String, i32, i64)>>);

impl HighWatermarkListener for Heard {
    fn on_high_watermark(&self, topic: &str, partition: i32, hw: i64) {
        self.0.lock().push((topic.to_string(), partition, hw));
    }
}

/// Every HW move of a leader is heard: a follower's fetch, and an ISR shrink; an append
/// waiting for the follower is not a move.
#[test]
fn the_listener_hears_every_high_watermark_move() {
    let dir = tempfile::tempdir().unwrap();
    let log = UnifiedLog::open(&dir.path().join("t-0"), LogConfig::default(), 0, true).unwrap();
    let p = Partition::new("t".into(), Uuid::nil(), 0, 1, log, 0);
    let reg = |isr: Vec<i32>, partition_epoch| LeaderAndIsr {
        leader: 1,
        leader_epoch: 1,
        partition_epoch,
        replicas: vec![1, 2],
        isr,
    };
    p.apply_leader_and_isr(&reg(vec![1, 2], 1), 0);
    let heard = Arc::new(Heard::default());
    p.set_high_watermark_listener(Some(heard.clone()));
    let batch = strom_protocol::testing::value_batch(2, 0);
    p.append_records_to_leader(&batch, AppendOrigin::Coordinator, -1, 1, 0)
        .unwrap();
    assert!(heard.0.lock().is_empty(), "the follower has not fetched");
    assert!(p.update_follower_fetch_state(2, 2, 0, 1, 2, -1));
    assert_eq!(*heard.0.lock(), vec![("t".into(), 0, 2)]);
    p.append_records_to_leader(&batch, AppendOrigin::Coordinator, -1, 1, 2)
        .unwrap();
    assert_eq!(heard.0.lock().len(), 1);
    // Follower 2 drops out of the ISR: the leader alone commits what it has.
    // Later than `replica.lag.time.max.ms` after its fetch, so it is not waited for.
    p.apply_leader_and_isr(&reg(vec![1], 2), 1_000_000);
    assert_eq!(heard.0.lock().last(), Some(&("t".into(), 0, 4)));
    p.set_high_watermark_listener(None);
    p.apply_leader_and_isr(&reg(vec![1, 2], 3), 1_000_001);
    assert_eq!(heard.0.lock().len(), 2);
}

async fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..500 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

/// Creating `__consumer_offsets` elects this broker for every partition: each shard loads;
/// when leadership of one moves away, its shard is unloaded.
#[tokio::test]
async fn offsets_partitions_load_when_led_and_unload_when_leadership_moves() {
    let dir = tempfile::tempdir().unwrap();
    let server = broker(&dir).await;
    let b = server.broker();
    let spec = offsets_topic_spec(b.group_coordinator.config(), &b.image());
    assert_eq!((spec.num_partitions, spec.replication_factor), (3, 1));
    create(&server, spec).await;
    let gc = b.group_coordinator.clone();
    wait_for("three loaded shards", || {
        gc.partitions() == vec![(0, true), (1, true), (2, true)]
    })
    .await;
    let topic = b.image().topic(GROUP_METADATA_TOPIC_NAME).cloned().unwrap();
    assert_eq!(
        topic.configs.get("cleanup.policy").map(String::as_str),
        Some("compact")
    );
    let p0 = b.replica_manager.get(GROUP_METADATA_TOPIC_NAME, 0).unwrap();
    assert_eq!(
        p0.with_log(|l| (l.config().retention_ms, l.config().retention_bytes)),
        (-1, -1)
    );

    // Leadership of partition 0 moves to broker 2 (as the controller would publish it).
    let old = b.image();
    let mut new = (*old).clone();
    let t = new.topics.get_mut(GROUP_METADATA_TOPIC_NAME).unwrap();
    let r0 = t.partitions.get_mut(&0).unwrap();
    r0.leader = 2;
    r0.leader_epoch += 1;
    r0.replicas = vec![1, 2];
    let publisher = GroupCoordinatorPublisher::new(1, gc.clone(), b.replica_manager.clone());
    publisher.on_metadata_update(&MetadataDelta::between(&old, &new), &Arc::new(new));
    wait_for("partition 0 unloaded", || {
        gc.partitions() == vec![(1, true), (2, true)]
    })
    .await;
    b.metadata_loader.shutdown().await;
}

#[test]
fn the_topics_image_carries_partition_counts_and_replica_racks() {
    let mut image = MetadataImage::default();
    for (id, rack) in [(1, Some("r1")), (2, None), (3, Some("r3"))] {
        image.brokers.insert(
            id,
            BrokerInfo {
                node_id: id,
                host: "h".into(),
                port: 1,
                rack: rack.map(str::to_string),
                incarnation_id: Uuid::nil(),
                epoch: 0,
                fenced: false,
                in_controlled_shutdown: false,
            },
        );
    }
    let id = Uuid::from_u128(7);
    let reg = |replicas: Vec<i32>| PartitionRegistration {
        leader: replicas[0],
        isr: replicas.clone(),
        replicas,
        leader_epoch: 0,
        partition_epoch: 0,
        adding_replicas: vec![],
        removing_replicas: vec![],
    };
    image.topics.insert(
        "t".into(),
        ControllerTopic {
            name: "t".into(),
            id,
            partitions: [
                (0, reg(vec![1, 2])),
                (1, reg(vec![2])),
                (2, reg(vec![3, 1])),
            ]
            .into(),
            configs: BTreeMap::new(),
        },
    );
    let g = group_metadata_image(&image);
    let t = g.topic("t").unwrap();
    assert_eq!((t.id, t.num_partitions), (id, 3));
    assert_eq!(g.topic_by_id(id).map(|t| t.name.as_str()), Some("t"));
    let racks = |p: i32| -> Vec<String> {
        t.partition_racks
            .get(&p)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    };
    assert_eq!(racks(0), vec!["r1"]);
    assert!(racks(1).is_empty());
    assert_eq!(racks(2), vec!["r1", "r3"]);
}

/// The defaults DescribeConfigs shows are the ones the coordinator runs with.
#[test]
fn described_defaults_are_the_coordinators_defaults() {
    let props: BTreeMap<String, String> = BROKER_CONFIGS
        .iter()
        .map(|(k, _, v)| (k.to_string(), v.to_string()))
        .collect();
    assert_eq!(
        GroupCoordinatorConfig::from_props(&props),
        GroupCoordinatorConfig::default()
    );
}

fn producer(id: i64) -> TxnProducer {
    TxnProducer {
        producer_id: id,
        producer_epoch: 1,
    }
}

/// A TxnOffsetCommit's batch is one transactional batch of the producer (base sequence 0, as
/// Kafka's runtime builds it); the marker is a control batch with the coordinator epoch; the
/// loader gives back each record with its producer and the marker in its place.
#[tokio::test]
async fn transactional_batches_and_markers_load_back_with_their_producer() {
    let dir = tempfile::tempdir().unwrap();
    let server = broker(&dir).await;
    create(&server, plain("t")).await;
    let b = server.broker();
    let io = CoordinatorPartitions::new(b.replica_manager.clone());
    let tp = ("t".to_string(), 0);
    let epoch = b.replica_manager.get("t", 0).unwrap().leader_epoch();

    let txn = [rec("a", Some("1")), rec("b", Some("2"))];
    let r = io
        .append_transactional(&tp, epoch, producer(5), &txn)
        .unwrap();
    assert_eq!((r.base_offset, r.last_offset), (0, 1));
    io.append(&tp, epoch, &[rec("c", Some("3"))]).unwrap();
    let r = io
        .append_end_txn_marker(&tp, epoch, producer(5), 9, TxnResult::Commit)
        .unwrap();
    assert_eq!((r.base_offset, r.last_offset, r.high_watermark), (3, 3, 4));
    // A marker of a leader that lost its epoch is refused.
    let fenced = io.append_end_txn_marker(&tp, epoch - 1, producer(5), 9, TxnResult::Abort);
    assert_eq!(fenced.unwrap_err().code, ErrorCode::FencedLeaderEpoch);

    let p = b.replica_manager.get("t", 0).unwrap();
    let batches = p.with_log(|log| {
        let data = log.read(0, 1 << 20, log.log_end_offset(), false).unwrap();
        strom_protocol::batch::BatchIter::new(&data.records)
            .map(|b| {
                let b = b.unwrap();
                (
                    b.base_offset(),
                    b.records_count(),
                    b.producer_id(),
                    b.producer_epoch(),
                    b.base_sequence(),
                    b.is_transactional(),
                    b.is_control(),
                )
            })
            .collect::<Vec<_>>()
    });
    assert_eq!(
        batches,
        vec![
            (0, 2, 5, 1, 0, true, false),
            (2, 1, -1, -1, -1, false, false),
            (3, 1, 5, 1, -1, true, true),
        ]
    );

    let mut seen = Vec::new();
    let end = io.load_records(&tp, epoch, &mut |r| seen.push(r)).unwrap();
    assert_eq!(end.last_offset, 3);
    let record = |offset, key: &str, value: &str, producer| LoadedRecord::Record {
        offset,
        producer,
        key: Bytes::from(key.to_string()),
        value: Some(Bytes::from(value.to_string())),
    };
    assert_eq!(
        seen,
        vec![
            record(0, "a", "1", Some(producer(5))),
            record(1, "b", "2", Some(producer(5))),
            record(2, "c", "3", None),
            LoadedRecord::EndTxnMarker {
                offset: 3,
                producer: producer(5),
                marker: strom_protocol::memory_records::EndTxnMarker {
                    result: TxnResult::Commit,
                    coordinator_epoch: 9,
                },
            },
        ]
    );
    // The plain load has the records only.
    let (plain_seen, _) = load(&io, "t", epoch).unwrap();
    assert_eq!(
        plain_seen.iter().map(|(o, _, _)| *o).collect::<Vec<_>>(),
        vec![0, 1, 2]
    );
    server.broker().metadata_loader.shutdown().await;
}

fn txn_commit_req(group: &str, pid: i64, partition: i32, offset: i64) -> TxnOffsetCommitRequest {
    use strom_protocol::kafka::messages::txn_offset_commit_request::{
        TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
    };
    use strom_protocol::kafka::protocol::StrBytes;
    TxnOffsetCommitRequest::default()
        .with_transactional_id(TransactionalId(StrBytes::from_static_str("tx")))
        .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(1)
        .with_generation_id(-1)
        .with_topics(vec![TxnOffsetCommitRequestTopic::default()
            .with_name(TopicName(StrBytes::from_static_str("t")))
            .with_partitions(vec![TxnOffsetCommitRequestPartition::default()
                .with_partition_index(partition)
                .with_committed_offset(offset)
                .with_committed_leader_epoch(-1)])])
}

/// (offset, error) of partitions 0 and 1 of `t` for `group`.
async fn fetch_t(
    gc: &strom_group_coordinator::GroupCoordinatorService,
    group: &str,
    require_stable: bool,
) -> Vec<(i64, i16)> {
    use strom_protocol::kafka::messages::offset_fetch_request::{
        OffsetFetchRequestGroup, OffsetFetchRequestTopics,
    };
    use strom_protocol::kafka::protocol::StrBytes;
    let ctx = strom_group_coordinator::GroupRequestContext {
        api_version: 9,
        ..Default::default()
    };
    let req = OffsetFetchRequest::default()
        .with_require_stable(require_stable)
        .with_groups(vec![OffsetFetchRequestGroup::default()
            .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
            .with_member_epoch(-1)
            .with_topics(Some(vec![OffsetFetchRequestTopics::default()
                .with_name(TopicName(StrBytes::from_static_str("t")))
                .with_partition_indexes(vec![0, 1])]))]);
    let r = gc.offset_fetch(&ctx, req).await;
    assert_eq!(r.groups[0].error_code, 0);
    r.groups[0].topics[0]
        .partitions
        .iter()
        .map(|p| (p.committed_offset, p.error_code))
        .collect()
}

/// TxnOffsetCommit and markers through the group coordinator on real `__consumer_offsets`
/// partitions: pending until the commit marker, and after the shard is reloaded from the log
/// a pending transaction is still pending and a committed one committed.
#[tokio::test]
async fn transactional_offsets_survive_a_reload_from_the_real_log() {
    let dir = tempfile::tempdir().unwrap();
    let server = broker(&dir).await;
    let b = server.broker();
    create(&server, plain_partitions("t", 2)).await;
    let spec = offsets_topic_spec(b.group_coordinator.config(), &b.image());
    create(&server, spec).await;
    let gc = b.group_coordinator.clone();
    wait_for("loaded shards", || {
        gc.partitions() == vec![(0, true), (1, true), (2, true)]
    })
    .await;
    let ctx = strom_group_coordinator::GroupRequestContext {
        api_version: 3,
        ..Default::default()
    };
    for (pid, partition, offset) in [(7, 0, 70), (8, 1, 80)] {
        let r = gc
            .txn_offset_commit(&ctx, txn_commit_req("g", pid, partition, offset))
            .await;
        assert_eq!(r.topics[0].partitions[0].error_code, 0);
    }
    let unstable = ErrorCode::UnstableOffsetCommit.code();
    assert_eq!(fetch_t(&gc, "g", false).await, vec![(-1, 0), (-1, 0)]);
    assert_eq!(
        fetch_t(&gc, "g", true).await,
        vec![(-1, unstable), (-1, unstable)]
    );
    let partition = gc.partition_for("g");
    gc.complete_transaction(
        partition,
        7,
        1,
        4,
        TxnResult::Commit,
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    assert_eq!(fetch_t(&gc, "g", true).await, vec![(70, 0), (-1, unstable)]);

    // The shard is rebuilt from the log (as on a new leader).
    let epoch = b
        .replica_manager
        .get(GROUP_METADATA_TOPIC_NAME, partition)
        .unwrap()
        .leader_epoch();
    gc.on_resigned(partition, Some(epoch));
    wait_for("unloaded", || {
        !gc.partitions().iter().any(|(p, _)| *p == partition)
    })
    .await;
    gc.on_elected(partition, epoch);
    wait_for("reloaded", || gc.partitions().contains(&(partition, true))).await;
    assert_eq!(fetch_t(&gc, "g", true).await, vec![(70, 0), (-1, unstable)]);
    gc.complete_transaction(
        partition,
        8,
        1,
        4,
        TxnResult::Abort,
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    assert_eq!(fetch_t(&gc, "g", true).await, vec![(70, 0), (-1, 0)]);
    b.metadata_loader.shutdown().await;
}

//! KIP-890 on the produce path of a real `strom` process, with raw requests (run the same file
//! against Apache Kafka 4.4 with `STROM_TEST_REFERENCE=kafka`: the answers asserted are
//! Kafka's).
//!
//! - Part 1: a transactional Produce (v3-v11) to a partition the producer never added to its
//!   transaction is refused (INVALID_TXN_STATE up to v10, TRANSACTION_ABORTABLE at v11) and
//!   nothing is written; once added (AddPartitionsToTxn v3), it is appended.
//! - Part 2 (transactions v2, the default `transaction.version=2`): ApiVersions finalizes the
//!   feature; a Produce v12 adds the partition itself; an EndTxn v5 bumps the epoch; an EndTxn
//!   delayed past the next transaction's start can neither commit nor abort that transaction;
//!   an EndTxn while the previous commit's markers are still being written waits for them
//!   (CONCURRENT_TRANSACTIONS), whatever its epoch.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::cluster::{eventually, metadata, port_of, wait_all_registered, Cluster};
use common::*;
use strom_client::{Connection, ConnectionConfig};
use strom_protocol::kafka::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use strom_protocol::kafka::messages::create_topics_request::CreatableTopic;
use strom_protocol::kafka::messages::list_offsets_request::{
    ListOffsetsPartition, ListOffsetsTopic,
};
use strom_protocol::kafka::messages::produce_request::{PartitionProduceData, TopicProduceData};
use strom_protocol::kafka::messages::*;
use strom_protocol::kafka::protocol::StrBytes;
use strom_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use strom_protocol::ErrorCode;

const NOT_ENOUGH_REPLICAS: i16 = ErrorCode::NotEnoughReplicas.code();
const INVALID_TXN_STATE: i16 = ErrorCode::InvalidTxnState.code();
const CONCURRENT_TRANSACTIONS: i16 = ErrorCode::ConcurrentTransactions.code();
const PRODUCER_FENCED: i16 = ErrorCode::ProducerFenced.code();
const TRANSACTION_ABORTABLE: i16 = ErrorCode::TransactionAbortable.code();
const RETRIABLE_COORDINATOR: [i16; 3] = [
    ErrorCode::CoordinatorLoadInProgress.code(),
    ErrorCode::CoordinatorNotAvailable.code(),
    ErrorCode::NotCoordinator.code(),
];

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

async fn connect(broker: &Broker) -> Connection {
    connect_to(&broker.bootstrap()).await
}

async fn connect_to(addr: &str) -> Connection {
    let config = ConnectionConfig {
        request_timeout: Duration::from_secs(60),
        ..ConnectionConfig::default()
    };
    Connection::connect(addr, config).await.expect("connect")
}

async fn create_topic(c: &Connection, topic: &str) {
    let req = CreateTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(TopicName(s(topic)))
            .with_num_partitions(1)
            .with_replication_factor(1)]);
    let resp = c.send(&req, 5).await.unwrap();
    assert_eq!(resp.topics[0].error_code, 0, "create {topic}");
}

/// FindCoordinator(TRANSACTION) then InitProducerId, retried while the coordinator is not
/// ready: (producer id, epoch).
async fn init(c: &Connection, id: &str) -> (i64, i16) {
    for _ in 0..200 {
        let f = c
            .send(
                &FindCoordinatorRequest::default()
                    .with_key(s(id))
                    .with_key_type(1),
                3,
            )
            .await
            .unwrap();
        if f.error_code == 0 {
            let r = c
                .send(
                    &InitProducerIdRequest::default()
                        .with_transactional_id(Some(TransactionalId(s(id))))
                        .with_transaction_timeout_ms(60_000)
                        .with_producer_id(ProducerId(-1))
                        .with_producer_epoch(-1),
                    4,
                )
                .await
                .unwrap();
            if r.error_code == 0 {
                return (r.producer_id.0, r.producer_epoch);
            }
            assert!(
                RETRIABLE_COORDINATOR.contains(&r.error_code)
                    || r.error_code == CONCURRENT_TRANSACTIONS,
                "InitProducerId: {}",
                r.error_code
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no transaction coordinator for {id}");
}

/// One transactional batch of one record.
fn batch(pid: i64, epoch: i16, seq: i32) -> Bytes {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let rec = Record {
        transactional: true,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: -1,
        producer_id: pid,
        producer_epoch: epoch,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence: seq,
        timestamp: now,
        key: None,
        value: Some(Bytes::from(format!("{pid}-{epoch}-{seq}"))),
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

/// A transactional Produce at `version` to partition 0: (error, base offset).
async fn produce(
    c: &Connection,
    version: i16,
    topic: &str,
    id: &str,
    producer: (i64, i16, i32),
) -> (i16, i64) {
    produce_to(c, version, (topic, 0), id, producer).await
}

async fn produce_to(
    c: &Connection,
    version: i16,
    (topic, partition): (&str, i32),
    id: &str,
    (pid, epoch, seq): (i64, i16, i32),
) -> (i16, i64) {
    let req = ProduceRequest::default()
        .with_transactional_id(Some(TransactionalId(s(id))))
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(s(topic)))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(batch(pid, epoch, seq)))])]);
    let resp = c.send(&req, version).await.unwrap();
    let p = &resp.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

/// [`produce`], retried while the coordinator finishes the previous transaction (Kafka
/// answers CONCURRENT_TRANSACTIONS to Produce v12, NOT_ENOUGH_REPLICAS to older versions).
async fn produce_retrying(
    c: &Connection,
    version: i16,
    topic: &str,
    id: &str,
    producer: (i64, i16, i32),
) -> (i16, i64) {
    for _ in 0..200 {
        let r = produce(c, version, topic, id, producer).await;
        if r.0 != NOT_ENOUGH_REPLICAS && r.0 != CONCURRENT_TRANSACTIONS {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("produce kept failing with {NOT_ENOUGH_REPLICAS} or {CONCURRENT_TRANSACTIONS}");
}

async fn log_end(c: &Connection, topic: &str) -> i64 {
    log_end_of(c, topic, 0).await
}

async fn log_end_of(c: &Connection, topic: &str, partition: i32) -> i64 {
    let req = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(TopicName(s(topic)))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(partition)
                .with_timestamp(-1)])]);
    let resp = c.send(&req, 1).await.unwrap();
    let p = &resp.topics[0].partitions[0];
    assert_eq!(p.error_code, 0);
    p.offset
}

async fn add_partition_v3(c: &Connection, id: &str, pid: i64, epoch: i16, topic: &str) -> i16 {
    let req = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(TransactionalId(s(id)))
        .with_v3_and_below_producer_id(ProducerId(pid))
        .with_v3_and_below_producer_epoch(epoch)
        .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
            .with_name(TopicName(s(topic)))
            .with_partitions(vec![0])]);
    let resp = c.send(&req, 3).await.unwrap();
    resp.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
}

/// EndTxn at `version`: (error, producer id, epoch) (v5+ answer the bumped epoch).
async fn end_txn(
    c: &Connection,
    version: i16,
    id: &str,
    pid: i64,
    epoch: i16,
    commit: bool,
) -> (i16, i64, i16) {
    let req = EndTxnRequest::default()
        .with_transactional_id(TransactionalId(s(id)))
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_committed(commit);
    let r = c.send(&req, version).await.unwrap();
    (r.error_code, r.producer_id.0, r.producer_epoch)
}

/// DescribeTransactions: (state, epoch, partitions of the transaction).
async fn describe(c: &Connection, id: &str) -> (String, i16, Vec<(String, i32)>) {
    let req =
        DescribeTransactionsRequest::default().with_transactional_ids(vec![TransactionalId(s(id))]);
    let r = c.send(&req, 0).await.unwrap();
    let t = &r.transaction_states[0];
    assert_eq!(t.error_code, 0);
    let parts = t
        .topics
        .iter()
        .flat_map(|tp| tp.partitions.iter().map(|p| (tp.topic.0.to_string(), *p)))
        .collect();
    (t.transaction_state.to_string(), t.producer_epoch, parts)
}

async fn wait_state(c: &Connection, id: &str, state: &str) {
    for _ in 0..200 {
        if describe(c, id).await.0 == state {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{id} never reached {state}: {:?}", describe(c, id).await);
}

#[test]
fn produce_to_a_partition_not_in_the_transaction_is_refused() {
    let broker = Broker::start();
    block_on(async {
        let c = connect(&broker).await;
        let topic = "verify-not-added";
        let id = "tx-not-added";
        create_topic(&c, topic).await;
        let (pid, epoch) = init(&c, id).await;
        // Never added: refused, with the error each Produce version's clients know.
        for v in [3, 7, 9, 10] {
            assert_eq!(
                produce(&c, v, topic, id, (pid, epoch, 0)).await.0,
                INVALID_TXN_STATE,
                "Produce v{v}"
            );
        }
        assert_eq!(
            produce(&c, 11, topic, id, (pid, epoch, 0)).await.0,
            TRANSACTION_ABORTABLE
        );
        assert_eq!(log_end(&c, topic).await, 0, "nothing was written");
        assert_eq!(describe(&c, id).await.0, "Empty");
        // Added by the client (transactions v1 style): verified and appended; the next batch
        // of the open transaction needs no verification.
        assert_eq!(add_partition_v3(&c, id, pid, epoch, topic).await, 0);
        assert_eq!(produce(&c, 9, topic, id, (pid, epoch, 0)).await, (0, 0));
        assert_eq!(produce(&c, 11, topic, id, (pid, epoch, 1)).await, (0, 1));
        assert_eq!(end_txn(&c, 4, id, pid, epoch, false).await.0, 0);
        wait_state(&c, id, "CompleteAbort").await;
        // After the abort marker the partition is not in a transaction any more.
        assert_eq!(
            produce(&c, 10, topic, id, (pid, epoch, 2)).await.0,
            INVALID_TXN_STATE
        );
        assert_eq!(log_end(&c, topic).await, 3, "two records and the marker");
    });
}

#[test]
fn transactions_v2_add_partitions_on_produce_and_fence_a_delayed_end_txn() {
    let broker = Broker::start();
    block_on(async {
        let c = connect(&broker).await;
        let versions = c.broker_versions();
        assert!(versions.range(ApiKey::Produce).unwrap().1 >= 12);
        assert_eq!(c.finalized_feature("transaction.version"), Some(2));
        let topic = "verify-tv2";
        let id = "tx-v2";
        create_topic(&c, topic).await;
        let (pid, e0) = init(&c, id).await;
        // Produce v12: the broker adds the partition to the transaction.
        assert_eq!(produce(&c, 12, topic, id, (pid, e0, 0)).await, (0, 0));
        let (state, _, parts) = describe(&c, id).await;
        assert_eq!(state, "Ongoing");
        assert_eq!(parts, vec![(topic.to_string(), 0)]);
        // EndTxn v5 commits and bumps the epoch.
        let (err, pid1, e1) = end_txn(&c, 5, id, pid, e0, true).await;
        assert_eq!((err, pid1), (0, pid));
        assert_eq!(e1, e0 + 1);
        wait_state(&c, id, "CompleteCommit").await;
        // A retry of that EndTxn is answered as the original was.
        assert_eq!(end_txn(&c, 5, id, pid, e0, true).await, (0, pid, e1));
        // The next transaction, at the bumped epoch, sequences from 0 again.
        assert_eq!(
            produce_retrying(&c, 12, topic, id, (pid, e1, 0)).await,
            (0, 2)
        );
        assert_eq!(describe(&c, id).await.0, "Ongoing");
        // The first transaction's EndTxn, delayed until now, neither commits nor aborts the
        // second one.
        assert_eq!(end_txn(&c, 5, id, pid, e0, true).await.0, PRODUCER_FENCED);
        assert_eq!(end_txn(&c, 5, id, pid, e0, false).await.0, PRODUCER_FENCED);
        let (state, epoch, parts) = describe(&c, id).await;
        assert_eq!((state.as_str(), epoch), ("Ongoing", e1));
        assert_eq!(parts, vec![(topic.to_string(), 0)]);
        // A produce at the old epoch is fenced by the coordinator (PRODUCER_FENCED is
        // INVALID_PRODUCER_EPOCH to a producer).
        assert_eq!(
            produce(&c, 12, topic, id, (pid, e0, 1)).await.0,
            ErrorCode::InvalidProducerEpoch.code()
        );
        // The second transaction's own EndTxn ends it.
        let (err, _, e2) = end_txn(&c, 5, id, pid, e1, false).await;
        assert_eq!((err, e2), (0, e1 + 1));
        wait_state(&c, id, "CompleteAbort").await;
        // Commit marker, the aborted record, the abort marker: nothing else was appended.
        assert_eq!(log_end(&c, topic).await, 4);
    });
}

#[test]
fn transaction_version_feature_follows_the_broker_setting() {
    if reference_kafka() {
        // Kafka's level is finalized at format time, not by a broker property.
        return;
    }
    let broker = Broker::start_with(&["transaction.version=1"]);
    block_on(async {
        let c = connect(&broker).await;
        assert_eq!(c.finalized_feature("transaction.version"), Some(1));
    });
}

/// FindCoordinator(TRANSACTION) through `c` until a node is named.
async fn find_coordinator(c: &Connection, id: &str) -> i32 {
    for _ in 0..200 {
        let f = c
            .send(
                &FindCoordinatorRequest::default()
                    .with_key(s(id))
                    .with_key_type(1),
                3,
            )
            .await
            .unwrap();
        if f.error_code == 0 {
            return f.node_id.0;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no transaction coordinator for {id}");
}

/// In a 3-node cluster the leader of the produced partition asks the coordinator on another
/// node (AddPartitionsToTxn over its own connection): a partition not added is refused,
/// Produce v12 adds it there, and the commit's markers (WriteTxnMarkers v2) come back.
#[test]
fn a_remote_coordinator_verifies_and_adds_partitions() {
    if reference_kafka() {
        // A single reference broker is its own coordinator; this is the multi-node path.
        return;
    }
    let c = Cluster::start(3);
    wait_all_registered(&c, 3);
    let topic = "verify-remote";
    let id = "tx-remote";
    common::cluster::create_topic(&c, &[1, 2, 3], topic, 3, 1).unwrap();
    let (_, _, leaders) = eventually("partition leaders", || {
        let md = metadata(&c, 1, topic);
        (md.2.len() == 3 && md.2.values().all(|l| *l > 0)).then_some(md)
    });
    block_on(async {
        let any = connect_to(&format!("127.0.0.1:{}", port_of(&c, 1))).await;
        let coordinator = find_coordinator(&any, id).await;
        let coord = connect_to(&format!("127.0.0.1:{}", port_of(&c, coordinator))).await;
        let (pid, e0) = init(&coord, id).await;
        let (&partition, &leader) = leaders
            .iter()
            .find(|(_, l)| **l != coordinator)
            .expect("a partition led elsewhere");
        let lc = connect_to(&format!("127.0.0.1:{}", port_of(&c, leader))).await;
        let tp = (topic, partition);
        assert_eq!(
            produce_to(&lc, 10, tp, id, (pid, e0, 0)).await.0,
            INVALID_TXN_STATE
        );
        assert_eq!(
            produce_to(&lc, 11, tp, id, (pid, e0, 0)).await.0,
            TRANSACTION_ABORTABLE
        );
        assert_eq!(log_end_of(&lc, topic, partition).await, 0);
        assert_eq!(produce_to(&lc, 12, tp, id, (pid, e0, 0)).await, (0, 0));
        let (state, _, parts) = describe(&coord, id).await;
        assert_eq!(state, "Ongoing");
        assert_eq!(parts, vec![(topic.to_string(), partition)]);
        let (err, _, e1) = end_txn(&coord, 5, id, pid, e0, true).await;
        assert_eq!((err, e1), (0, e0 + 1));
        wait_state(&coord, id, "CompleteCommit").await;
        assert_eq!(
            log_end_of(&lc, topic, partition).await,
            2,
            "record and commit marker"
        );

        // Many producers at once, each on its own connection to the leader: their questions to
        // a coordinator queue while one request to it is in flight and go in the next one;
        // every producer gets its own answer.
        let mut producers = Vec::new();
        for i in 0..8 {
            let id = format!("tx-many-{i}");
            let node = find_coordinator(&any, &id).await;
            let cc = connect_to(&format!("127.0.0.1:{}", port_of(&c, node))).await;
            let (pid, epoch) = init(&cc, &id).await;
            let conn = connect_to(&format!("127.0.0.1:{}", port_of(&c, leader))).await;
            producers.push((id, pid, epoch, cc, Arc::new(conn)));
        }
        for (version, want) in [(10, INVALID_TXN_STATE), (12, 0)] {
            let mut tasks = tokio::task::JoinSet::new();
            for (id, pid, epoch, _, conn) in &producers {
                let (id, pid, epoch, conn) = (id.clone(), *pid, *epoch, conn.clone());
                tasks.spawn(async move {
                    let tp = ("verify-remote", partition);
                    produce_to(&conn, version, tp, &id, (pid, epoch, 0)).await
                });
            }
            let mut offsets = Vec::new();
            while let Some(r) = tasks.join_next().await {
                let (err, offset) = r.unwrap();
                assert_eq!(err, want, "Produce v{version}");
                offsets.push(offset);
            }
            if want == 0 {
                offsets.sort_unstable();
                assert_eq!(offsets, (2..10).collect::<Vec<i64>>());
            }
        }
        for (id, pid, epoch, cc, _) in &producers {
            let (state, _, parts) = describe(cc, id).await;
            assert_eq!(state, "Ongoing", "{id}");
            assert_eq!(parts, vec![(topic.to_string(), partition)]);
            assert_eq!(end_txn(cc, 5, id, *pid, *epoch, false).await.0, 0);
        }
    });
}

/// Sends `sig` (`-STOP`, `-CONT`) to node `id`'s process.
fn signal_node(c: &Cluster, id: i32, sig: &str) {
    let pid = c.pid(id);
    let ok = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig} {pid}");
}

/// Transactions v2 while the commit's markers cannot be written yet (the leader of the
/// transaction's partition is paused with SIGSTOP): the client holds the epoch the commit
/// returned, and its next EndTxn(abort) with it — an empty transaction's end — is answered
/// CONCURRENT_TRANSACTIONS until the markers are written, then bumps the epoch again. Kafka's
/// `TransactionCoordinator.endTransaction` checks the pending CompleteCommit before the epoch
/// (KAFKA-18464); PRODUCER_FENCED here (Strom before) is fatal to the producer, which franz-go's
/// `TestTxnEtl` hit on 3 nodes.
#[test]
fn an_abort_while_the_commits_markers_wait_is_concurrent_transactions() {
    if reference_kafka() {
        // It needs a partition on another broker than the coordinator.
        return;
    }
    // __transaction_state on one replica: the paused node must not hold up the coordinator's
    // own writes (acks=all) while it is still in their ISR.
    let c = Cluster::start_with(
        3,
        &[
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
        ],
    );
    wait_all_registered(&c, 3);
    let topic = "abort-while-markers-wait";
    let id = "tx-abort-while-markers-wait";
    common::cluster::create_topic(&c, &[1, 2, 3], topic, 3, 1).unwrap();
    // Every node knows the partitions (a coordinator that does not would take the topic for
    // deleted and drop its markers, as Kafka's marker channel does).
    let (_, _, leaders) = eventually("partition leaders on every node", || {
        let mds: Vec<_> = (1..=3).map(|n| metadata(&c, n, topic)).collect();
        let known = |md: &(Vec<i32>, i32, BTreeMap<i32, i32>)| {
            md.2.len() == 3 && md.2.values().all(|l| *l > 0)
        };
        mds.iter().all(known).then(|| mds[0].clone())
    });
    block_on(async {
        let any = connect_to(&format!("127.0.0.1:{}", port_of(&c, 1))).await;
        let coordinator = find_coordinator(&any, id).await;
        let coord = connect_to(&format!("127.0.0.1:{}", port_of(&c, coordinator))).await;
        let (pid, e0) = init(&coord, id).await;
        let (&partition, &leader) = leaders
            .iter()
            .find(|(_, l)| **l != coordinator)
            .expect("a partition led elsewhere");
        let lc = connect_to(&format!("127.0.0.1:{}", port_of(&c, leader))).await;
        let tp = (topic, partition);
        let mut produced = produce_to(&lc, 12, tp, id, (pid, e0, 0)).await;
        for _ in 0..100 {
            // The coordinator's partition may still be loading (NOT_ENOUGH_REPLICAS).
            if produced.0 != NOT_ENOUGH_REPLICAS {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            produced = produce_to(&lc, 12, tp, id, (pid, e0, 0)).await;
        }
        assert_eq!(produced, (0, 0));
        let before = describe(&coord, id).await;
        assert_eq!(
            before,
            (
                "Ongoing".to_string(),
                e0,
                vec![(topic.to_string(), partition)]
            )
        );

        signal_node(&c, leader, "-STOP");
        let (err, _, e1) = end_txn(&coord, 5, id, pid, e0, true).await;
        assert_eq!((err, e1), (0, e0 + 1));
        let state = describe(&coord, id).await;
        let concurrent = [
            end_txn(&coord, 5, id, pid, e1, false).await.0,
            end_txn(&coord, 5, id, pid, e0, true).await.0,
        ];
        signal_node(&c, leader, "-CONT");
        assert_eq!(state.0, "PrepareCommit", "{state:?}");
        assert_eq!(concurrent, [CONCURRENT_TRANSACTIONS; 2]);

        wait_state(&coord, id, "CompleteCommit").await;
        let (err, _, e2) = end_txn(&coord, 5, id, pid, e1, false).await;
        assert_eq!((err, e2), (0, e1 + 1));
        wait_state(&coord, id, "CompleteAbort").await;
        assert_eq!(
            log_end_of(&lc, topic, partition).await,
            2,
            "record and commit marker"
        );
    });
}

//! The idempotent producer on the broker side, driven with raw requests so every duplicate and
//! gap is deliberate: InitProducerId, retries of any of the last five batches answered with their
//! original offsets and nothing written, gaps refused with OUT_OF_ORDER_SEQUENCE_NUMBER, fenced
//! epochs with INVALID_PRODUCER_EPOCH; the same after a SIGTERM and after a SIGKILL of the
//! broker; and producer ids unique over more than one block of 1000 and across restarts.

mod common;

use std::collections::HashSet;
use std::net::TcpStream;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use strom_protocol::kafka::messages::produce_request::{PartitionProduceData, TopicProduceData};
use strom_protocol::kafka::messages::{
    ApiKey, InitProducerIdRequest, InitProducerIdResponse, ProduceRequest, ProduceResponse,
    TopicName,
};
use strom_protocol::kafka::protocol::StrBytes;
use strom_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use strom_protocol::ErrorCode;

const TOPIC: &str = "idem";
const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;
const INVALID_PRODUCER_EPOCH: i16 = 47;

/// InitProducerId without a transactional id, retried while the broker waits for its next
/// producer id block (COORDINATOR_LOAD_IN_PROGRESS, Kafka's `RPCProducerIdManager`), as clients do.
fn init_producer_id(s: &mut TcpStream) -> (i64, i16) {
    let req = InitProducerIdRequest::default()
        .with_transactional_id(None)
        .with_transaction_timeout_ms(60_000);
    for _ in 0..1000 {
        let resp: InitProducerIdResponse = raw_call(s, ApiKey::InitProducerId, 4, &req);
        if resp.error_code == ErrorCode::CoordinatorLoadInProgress.code() {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        }
        assert_eq!(resp.error_code, 0);
        return (resp.producer_id.0, resp.producer_epoch);
    }
    panic!("no producer id block arrived");
}

/// A batch of `n` records from producer `pid`/`epoch` starting at sequence `seq`.
fn batch(pid: i64, epoch: i16, seq: i32, n: usize) -> Bytes {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let recs: Vec<Record> = (0..n)
        .map(|i| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: pid,
            producer_epoch: epoch,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: seq + i as i32,
            timestamp: now,
            key: None,
            value: Some(Bytes::from(format!("{pid}-{}", seq + i as i32))),
            headers: Default::default(),
        })
        .collect();
    let mut buf = Vec::new();
    RecordBatchEncoder::encode(
        &mut buf,
        recs.iter(),
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .unwrap();
    Bytes::from(buf)
}

/// Produce (v9, acks=all) of one batch to partition 0: (error code, base offset).
fn produce(s: &mut TcpStream, records: Bytes) -> (i16, i64) {
    let req = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(records))])]);
    let resp: ProduceResponse = raw_call(s, ApiKey::Produce, 9, &req);
    let p = &resp.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

/// Sends six batches of 3 records (sequences 0..17) and returns their base offsets.
fn write_six(s: &mut TcpStream, pid: i64) -> Vec<i64> {
    (0..6)
        .map(|i| {
            let (err, off) = produce(s, batch(pid, 0, i * 3, 3));
            assert_eq!(err, 0, "batch {i}");
            off
        })
        .collect()
}

/// Every one of the last five batches, resent, comes back with its original offset and the log
/// does not grow; the sixth-oldest is out of the window; a gap and an old epoch are refused.
fn check_dedup(broker: &Broker, pid: i64, offsets: &[i64]) {
    let mut s = connect(broker);
    let before = watermarks(broker, TOPIC, 0);
    for i in 1..6 {
        let (err, off) = produce(&mut s, batch(pid, 0, i * 3, 3));
        assert_eq!((err, off), (0, offsets[i as usize]), "retry of batch {i}");
    }
    let (err, _) = produce(&mut s, batch(pid, 0, 0, 3));
    assert_eq!(
        err, OUT_OF_ORDER_SEQUENCE_NUMBER,
        "batch older than the last five"
    );
    let (err, _) = produce(&mut s, batch(pid, 0, 19, 1));
    assert_eq!(err, OUT_OF_ORDER_SEQUENCE_NUMBER, "gap after sequence 17");
    assert_eq!(watermarks(broker, TOPIC, 0), before, "nothing written");
}

#[test]
fn duplicates_and_gaps_before_and_after_restarts() {
    let mut broker = Broker::start();
    create_topic(&broker, TOPIC, 1, &[]);
    let mut s = connect(&broker);
    let (pid, epoch) = init_producer_id(&mut s);
    assert_eq!(epoch, 0);
    let offsets = write_six(&mut s, pid);
    assert_eq!(offsets, vec![0, 3, 6, 9, 12, 15]);
    check_dedup(&broker, pid, &offsets);

    // Idempotence off passes through unchecked, duplicates and all.
    let plain = batch(-1, -1, -1, 2);
    assert_eq!(produce(&mut s, plain.clone()), (0, 18));
    assert_eq!(produce(&mut s, plain), (0, 20));

    // Clean restart: state comes from the snapshot written at shutdown.
    drop(s);
    assert_clean_exit(broker.stop());
    broker.restart();
    check_dedup(&broker, pid, &offsets);

    // Crash: state comes from the snapshot plus a replay of the log after it.
    let mut s = connect(&broker);
    let (err, off) = produce(&mut s, batch(pid, 0, 18, 3));
    assert_eq!((err, off), (0, 22));
    drop(s);
    broker.kill();
    broker.restart();
    let mut s = connect(&broker);
    assert_eq!(
        produce(&mut s, batch(pid, 0, 18, 3)),
        (0, 22),
        "retry after SIGKILL"
    );
    assert_eq!(
        produce(&mut s, batch(pid, 0, 22, 1)).0,
        OUT_OF_ORDER_SEQUENCE_NUMBER
    );
    assert_eq!(produce(&mut s, batch(pid, 0, 21, 1)), (0, 25));

    // A new epoch must start at sequence 0; afterwards the old epoch is fenced.
    assert_eq!(
        produce(&mut s, batch(pid, 1, 5, 1)).0,
        OUT_OF_ORDER_SEQUENCE_NUMBER
    );
    assert_eq!(produce(&mut s, batch(pid, 1, 0, 1)), (0, 26));
    assert_eq!(
        produce(&mut s, batch(pid, 0, 22, 1)).0,
        INVALID_PRODUCER_EPOCH
    );
    assert_eq!(watermarks(&broker, TOPIC, 0), (0, 27));

    // The snapshot files are Kafka's: named by offset in the partition directory.
    drop(s);
    assert_clean_exit(broker.stop());
    let files = list_files(&broker.partition_dir(TOPIC, 0));
    assert!(
        files.iter().any(|f| f == "00000000000000000027.snapshot"),
        "{files:?}"
    );
}

#[test]
fn producer_ids_unique_across_blocks_and_restarts() {
    let mut broker = Broker::start();
    let mut seen = HashSet::new();
    let mut s = connect(&broker);
    for _ in 0..1200 {
        let (pid, epoch) = init_producer_id(&mut s);
        assert_eq!(epoch, 0);
        assert!(seen.insert(pid), "producer id {pid} issued twice");
    }
    drop(s);
    broker.kill();
    broker.restart();
    let mut s = connect(&broker);
    for _ in 0..300 {
        let (pid, _) = init_producer_id(&mut s);
        assert!(
            seen.insert(pid),
            "producer id {pid} issued twice after restart"
        );
    }
    assert_eq!(seen.len(), 1500);
}

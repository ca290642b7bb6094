//! read_committed on the partition side, driven with raw requests through `strom_client`'s
//! connection (the transaction coordinator does not exist yet, so markers are written with
//! WriteTxnMarkers as a coordinator would): transactional Produce batches keep the LSO at the
//! oldest open transaction; Fetch read_committed stops there and lists the aborted
//! transactions of what it returns (read_uncommitted: up to the HW, no list); ListOffsets latest
//! answers the LSO for isolation level 1; a read_committed long-poll wakes when the LSO moves;
//! WriteTxnMarkers answers per partition (fenced coordinator epoch, unknown partition);
//! DescribeProducers shows the open transaction; and after a SIGKILL and restart the same
//! answers, with a transaction open across the crash still open. The same sequence of
//! transactions, written to a Kafka 4.4 broker by real transactional Java producers, gets the
//! same Fetch answers (LSO, records, aborted list).

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use strom_client::{Connection, ConnectionConfig};
use strom_protocol::kafka::messages::describe_producers_request::TopicRequest;
use strom_protocol::kafka::messages::fetch_request::{FetchPartition, FetchTopic};
use strom_protocol::kafka::messages::list_offsets_request::{
    ListOffsetsPartition, ListOffsetsTopic,
};
use strom_protocol::kafka::messages::produce_request::{PartitionProduceData, TopicProduceData};
use strom_protocol::kafka::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use strom_protocol::kafka::messages::{
    BrokerId, DescribeProducersRequest, FetchRequest, InitProducerIdRequest, ListOffsetsRequest,
    ProduceRequest, ProducerId, TopicName, TransactionalId, WriteTxnMarkersRequest,
};
use strom_protocol::kafka::protocol::StrBytes;
use strom_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

const TOPIC: &str = "rc";
/// These tests write transactional batches without a transaction coordinator (markers come
/// from WriteTxnMarkers directly), so KIP-890's verification with the coordinator is off.
const NO_VERIFICATION: &str = "transaction.partition.verification.enable=false";
const TRANSACTION_COORDINATOR_FENCED: i16 = 52;
const INVALID_PRODUCER_EPOCH: i16 = 47;
const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const READ_COMMITTED: i8 = 1;

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
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

/// A new idempotent producer id. COORDINATOR_LOAD_IN_PROGRESS (no block of ids fetched from the
/// controller yet, just after start-up) is retried, as clients do.
async fn producer_id(c: &Connection) -> i64 {
    let req = InitProducerIdRequest::default()
        .with_transactional_id(None)
        .with_transaction_timeout_ms(60_000);
    for _ in 0..200 {
        let resp = c.send(&req, 4).await.unwrap();
        if resp.error_code != COORDINATOR_LOAD_IN_PROGRESS {
            assert_eq!(resp.error_code, 0);
            return resp.producer_id.0;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no producer id block after 10 s");
}

/// One batch of `n` records from `pid` (epoch 0) at sequence `seq`; `pid` -1: plain.
fn batch(pid: i64, seq: i32, n: usize, transactional: bool) -> Bytes {
    // Now, as the markers are: older timestamps would roll a segment (`segment.ms`) at the
    // first marker.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let recs: Vec<Record> = (0..n)
        .map(|i| Record {
            transactional,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: pid,
            producer_epoch: if pid >= 0 { 0 } else { -1 },
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: if pid >= 0 { seq + i as i32 } else { -1 },
            timestamp: now,
            key: None,
            value: Some(Bytes::from(format!("{pid}-{i}"))),
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

/// Produce v9 acks=all of one batch; (error, base offset).
async fn produce(c: &Connection, records: Bytes, txn_id: Option<&str>) -> (i16, i64) {
    let req = ProduceRequest::default()
        .with_transactional_id(txn_id.map(|t| TransactionalId(StrBytes::from_string(t.into()))))
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name(TOPIC))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(records))])]);
    let resp = c.send(&req, 9).await.unwrap();
    let p = &resp.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

/// WriteTxnMarkers v1 for `pid` (epoch 0) on `partitions` of TOPIC; the per-partition codes.
async fn marker(
    c: &Connection,
    pid: i64,
    commit: bool,
    coord_epoch: i32,
    partitions: &[i32],
) -> Vec<i16> {
    marker_tv(c, pid, 0, commit, coord_epoch, partitions, None).await
}

/// WriteTxnMarkers for `pid`/`epoch`: v1, or v2 with this transaction version.
async fn marker_tv(
    c: &Connection,
    pid: i64,
    epoch: i16,
    commit: bool,
    coord_epoch: i32,
    partitions: &[i32],
    transaction_version: Option<i8>,
) -> Vec<i16> {
    let req = WriteTxnMarkersRequest::default().with_markers(vec![WritableTxnMarker::default()
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_transaction_result(commit)
        .with_coordinator_epoch(coord_epoch)
        .with_transaction_version(transaction_version.unwrap_or(0))
        .with_topics(vec![WritableTxnMarkerTopic::default()
            .with_name(name(TOPIC))
            .with_partition_indexes(partitions.to_vec())])]);
    let version = if transaction_version.is_some() { 2 } else { 1 };
    let resp = c.send(&req, version).await.unwrap();
    assert_eq!(resp.markers.len(), 1);
    assert_eq!(resp.markers[0].producer_id.0, pid);
    resp.markers[0].topics[0]
        .partitions
        .iter()
        .map(|p| p.error_code)
        .collect()
}

#[derive(Debug, PartialEq, Eq)]
struct Fetched {
    error: i16,
    high_watermark: i64,
    last_stable_offset: i64,
    /// (offset, is control) of every record returned.
    records: Vec<(i64, bool)>,
    /// (producer id, first offset); `None`: the field was null.
    aborted: Option<Vec<(i64, i64)>>,
}

fn fetch_request(offset: i64, isolation: i8, max_wait_ms: i32) -> FetchRequest {
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_isolation_level(isolation)
        .with_topics(vec![FetchTopic::default()
            .with_topic(name(TOPIC))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(offset)
                .with_log_start_offset(-1)
                .with_partition_max_bytes(1 << 20)])])
}

async fn fetch_with(c: &Connection, req: FetchRequest) -> Fetched {
    let resp = c.send(&req, 11).await.unwrap();
    let p = &resp.responses[0].partitions[0];
    let mut records = Vec::new();
    let mut bytes = p.records.clone().unwrap_or_default();
    while !bytes.is_empty() {
        let set = RecordBatchDecoder::decode(&mut bytes).unwrap();
        records.extend(set.records.iter().map(|r| (r.offset, r.control)));
    }
    Fetched {
        error: p.error_code,
        high_watermark: p.high_watermark,
        last_stable_offset: p.last_stable_offset,
        records,
        aborted: p.aborted_transactions.as_ref().map(|l| {
            l.iter()
                .map(|a| (a.producer_id.0, a.first_offset))
                .collect()
        }),
    }
}

async fn fetch(c: &Connection, offset: i64, isolation: i8) -> Fetched {
    fetch_with(c, fetch_request(offset, isolation, 0)).await
}

/// ListOffsets v5 latest (-1) at `isolation`.
async fn latest(c: &Connection, isolation: i8) -> i64 {
    let req = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_isolation_level(isolation)
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(name(TOPIC))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(0)
                .with_timestamp(-1)])]);
    let resp = c.send(&req, 5).await.unwrap();
    let p = &resp.topics[0].partitions[0];
    assert_eq!(p.error_code, 0);
    p.offset
}

/// DescribeProducers v0: (producer id, current txn start offset) of each producer.
async fn producers(c: &Connection) -> Vec<(i64, i64)> {
    let req = DescribeProducersRequest::default().with_topics(vec![TopicRequest::default()
        .with_name(name(TOPIC))
        .with_partition_indexes(vec![0])]);
    let resp = c.send(&req, 0).await.unwrap();
    let p = &resp.topics[0].partitions[0];
    assert_eq!(p.error_code, 0);
    p.active_producers
        .iter()
        .map(|s| (s.producer_id.0, s.current_txn_start_offset))
        .collect()
}

fn offsets(range: std::ops::Range<i64>, controls: &[i64]) -> Vec<(i64, bool)> {
    range.map(|o| (o, controls.contains(&o))).collect()
}

#[test]
fn read_committed_fetch_list_offsets_and_markers_survive_sigkill() {
    let mut broker = Broker::start_with(&[NO_VERIFICATION]);
    create_topic(&broker, TOPIC, 1, &[]);
    let (a, b, c_pid) = block_on(async {
        let c = connect(&broker).await;
        let a = producer_id(&c).await;
        let b = producer_id(&c).await;
        let c_pid = producer_id(&c).await;
        // A transactional batch needs the request's transactional id (Kafka authorizes by it).
        assert_eq!(produce(&c, batch(a, 0, 2, true), None).await.0, 53);
        // a: 0..2, b: 2..4 (both open), plain: 4.
        assert_eq!(produce(&c, batch(a, 0, 2, true), Some("ta")).await, (0, 0));
        assert_eq!(produce(&c, batch(b, 0, 2, true), Some("tb")).await, (0, 2));
        assert_eq!(produce(&c, batch(-1, 0, 1, false), None).await, (0, 4));
        let rc = fetch(&c, 0, READ_COMMITTED).await;
        assert_eq!(
            rc,
            Fetched {
                error: 0,
                high_watermark: 5,
                last_stable_offset: 0,
                records: vec![],
                aborted: Some(vec![]),
            }
        );
        let ru = fetch(&c, 0, 0).await;
        assert_eq!(
            (ru.records.len(), ru.last_stable_offset, ru.aborted),
            (5, 0, None)
        );
        assert_eq!(
            (latest(&c, READ_COMMITTED).await, latest(&c, 0).await),
            (0, 5)
        );
        assert_eq!(producers(&c).await, vec![(a, 0), (b, 2)]);

        // Abort a (marker at 5): b still holds the LSO at 2.
        assert_eq!(
            marker(&c, a, false, 3, &[0, 7]).await,
            vec![0, UNKNOWN_TOPIC_OR_PARTITION]
        );
        let rc = fetch(&c, 0, READ_COMMITTED).await;
        assert_eq!(rc.last_stable_offset, 2);
        assert_eq!(rc.records, offsets(0..2, &[]));
        assert_eq!(rc.aborted, Some(vec![(a, 0)]));
        assert_eq!(latest(&c, READ_COMMITTED).await, 2);
        // An older coordinator epoch is fenced.
        assert_eq!(
            marker(&c, a, true, 2, &[0]).await,
            vec![TRANSACTION_COORDINATOR_FENCED]
        );

        // A read_committed long-poll at the LSO wakes when b's commit moves it.
        // Its max wait (25 s) is past the bound below (15 s): only the LSO move answers it in time.
        let long_poll = fetch_request(2, READ_COMMITTED, 25_000);
        let waiting = c.send(&long_poll, 11);
        // A broker answers one connection's requests in order: the marker goes on another.
        let coordinator = connect(&broker).await;
        let commit = async {
            // Give the fetch a head start into the purgatory (it still answers if not).
            tokio::time::sleep(Duration::from_millis(200)).await;
            marker(&coordinator, b, true, 3, &[0]).await
        };
        let (woken, committed) = tokio::time::timeout(Duration::from_secs(15), async {
            tokio::join!(waiting, commit)
        })
        .await
        .expect("the read_committed fetch was not woken by the LSO move");
        assert_eq!(committed, vec![0]);
        let woken = woken.unwrap();
        assert_eq!(woken.responses[0].partitions[0].last_stable_offset, 7);

        // c's transaction stays open across the crash: 7..9.
        assert_eq!(
            produce(&c, batch(c_pid, 0, 3, true), Some("tc")).await,
            (0, 7)
        );
        (a, b, c_pid)
    });
    let expect_before = |rc: &Fetched| {
        assert_eq!(rc.error, 0);
        assert_eq!((rc.high_watermark, rc.last_stable_offset), (10, 7));
        assert_eq!(rc.records, offsets(0..7, &[5, 6]));
        assert_eq!(rc.aborted, Some(vec![(a, 0)]));
    };
    block_on(async {
        let c = connect(&broker).await;
        expect_before(&fetch(&c, 0, READ_COMMITTED).await);
        assert_eq!(latest(&c, READ_COMMITTED).await, 7);
    });

    broker.kill();
    broker.restart();
    block_on(async {
        let c = connect(&broker).await;
        // Bounded: the restarted broker takes leadership back within a few tries.
        let mut rc = fetch(&c, 0, READ_COMMITTED).await;
        for _ in 0..100 {
            if rc.error == 0 && rc.high_watermark == 10 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            rc = fetch(&c, 0, READ_COMMITTED).await;
        }
        expect_before(&rc);
        assert_eq!(
            (latest(&c, READ_COMMITTED).await, latest(&c, 0).await),
            (7, 10)
        );
        assert_eq!(producers(&c).await, vec![(a, -1), (b, -1), (c_pid, 7)]);
        // Abort c after the restart, as a TV2 coordinator does (v2, epoch bumped; the data's
        // epoch is refused): both aborted transactions are listed from 0.
        let tv2 = |epoch| marker_tv(&c, c_pid, epoch, false, 3, &[0], Some(2));
        assert_eq!(tv2(0).await, vec![INVALID_PRODUCER_EPOCH]);
        assert_eq!(tv2(1).await, vec![0]);
        let rc = fetch(&c, 0, READ_COMMITTED).await;
        assert_eq!(rc.last_stable_offset, 11);
        assert_eq!(rc.records, offsets(0..11, &[5, 6, 10]));
        assert_eq!(rc.aborted, Some(vec![(a, 0), (c_pid, 7)]));
        // From past a's marker only c's.
        let rc = fetch(&c, 6, READ_COMMITTED).await;
        assert_eq!(rc.aborted, Some(vec![(c_pid, 7)]));
    });
    let txnindex = broker
        .partition_dir(TOPIC, 0)
        .join("00000000000000000000.txnindex");
    let files = list_files(&broker.partition_dir(TOPIC, 0));
    assert_eq!(
        std::fs::metadata(&txnindex).map(|m| m.len()).ok(),
        Some(2 * 34),
        "{files:?}"
    );
    assert_clean_exit(broker.stop());
}

// ---------------------------------------------------------------------------------------------
// Against Kafka 4.4: the same transactions written by real Java transactional producers.

/// A Java program (run from source with Kafka's client jars) that drives two transactional
/// producers and a plain one, one command per stdin line, answering `ok <command>`.
const JAVA_TXN: &str = r#"
import java.io.*;
import java.util.*;
import java.util.concurrent.Future;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.serialization.StringSerializer;

public class Txn {
    static KafkaProducer<String, String> producer(String bootstrap, String txnId) {
        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("key.serializer", StringSerializer.class.getName());
        c.put("value.serializer", StringSerializer.class.getName());
        if (txnId != null) c.put("transactional.id", txnId);
        return new KafkaProducer<>(c);
    }
    static void send(KafkaProducer<String, String> p, String topic, int n) throws Exception {
        List<Future<RecordMetadata>> sent = new ArrayList<>();
        for (int i = 0; i < n; i++) sent.add(p.send(new ProducerRecord<>(topic, 0, "k" + i, "v" + i)));
        p.flush();
        for (Future<RecordMetadata> f : sent) f.get();
    }
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1];
        KafkaProducer<String, String> a = producer(bootstrap, "ta"), b = producer(bootstrap, "tb");
        KafkaProducer<String, String> plain = producer(bootstrap, null);
        a.initTransactions();
        b.initTransactions();
        System.out.println("ok ready");
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        for (String line; (line = in.readLine()) != null; ) {
            switch (line) {
                case "a": a.beginTransaction(); send(a, topic, 2); break;
                case "b": b.beginTransaction(); send(b, topic, 2); break;
                case "plain": send(plain, topic, 1); break;
                case "abort-a": a.abortTransaction(); break;
                case "commit-b": b.commitTransaction(); break;
                default: a.close(); b.close(); plain.close(); return;
            }
            System.out.println("ok " + line);
        }
    }
}
"#;

/// The Java program, killed on drop.
struct JavaTxn {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    lines: std::sync::mpsc::Receiver<String>,
    _dir: tempfile::TempDir,
}

impl JavaTxn {
    fn start(bootstrap: &str) -> JavaTxn {
        use std::io::BufRead;
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("Txn.java");
        std::fs::write(&src, JAVA_TXN).unwrap();
        let cp =
            std::process::Command::new(common::kafka_ref::repo_root().join("scripts/kafka-ref.sh"))
                .arg("classpath")
                .output()
                .unwrap();
        let cp = String::from_utf8(cp.stdout).unwrap();
        let mut child = std::process::Command::new("java")
            .arg("-cp")
            .arg(cp.trim())
            .arg(&src)
            .arg(bootstrap)
            .arg(TOPIC)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("run java");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut j = JavaTxn {
            child,
            stdin,
            lines,
            _dir: dir,
        };
        j.expect("ready");
        j
    }

    fn expect(&mut self, cmd: &str) {
        let want = format!("ok {cmd}");
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|e| panic!("java producer did not answer {cmd}: {e}"));
            if line == want {
                return;
            }
        }
    }

    fn step(&mut self, cmd: &str) {
        use std::io::Write;
        writeln!(self.stdin, "{cmd}").unwrap();
        self.stdin.flush().unwrap();
        self.expect(cmd);
    }
}

impl Drop for JavaTxn {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A fetch answer with producer ids replaced by their order of first appearance in the log
/// (the brokers allocate different ids): (hw, lso, [(offset, control, producer)], aborted
/// [(producer, first offset)] or null).
type Normalized = (i64, i64, Vec<(i64, bool, usize)>, Option<Vec<(usize, i64)>>);

async fn normalized(c: &Connection, isolation: i8) -> Normalized {
    let resp = c.send(&fetch_request(0, isolation, 0), 11).await.unwrap();
    let all = c.send(&fetch_request(0, 0, 0), 11).await.unwrap();
    let p = &resp.responses[0].partitions[0];
    assert_eq!(p.error_code, 0);
    // Roles from the whole log, so a producer's number does not depend on what this read saw.
    let mut roles: Vec<i64> = Vec::new();
    let mut bytes = all.responses[0].partitions[0]
        .records
        .clone()
        .unwrap_or_default();
    while !bytes.is_empty() {
        let set = RecordBatchDecoder::decode(&mut bytes).unwrap();
        for r in &set.records {
            if !r.control && !roles.contains(&r.producer_id) {
                roles.push(r.producer_id);
            }
        }
    }
    let role = |pid: i64| roles.iter().position(|&r| r == pid).unwrap_or(usize::MAX);
    let mut records = Vec::new();
    let mut bytes = p.records.clone().unwrap_or_default();
    while !bytes.is_empty() {
        let set = RecordBatchDecoder::decode(&mut bytes).unwrap();
        records.extend(
            set.records
                .iter()
                .map(|r| (r.offset, r.control, role(r.producer_id))),
        );
    }
    let aborted = p.aborted_transactions.as_ref().map(|l| {
        l.iter()
            .map(|a| (role(a.producer_id.0), a.first_offset))
            .collect()
    });
    (p.high_watermark, p.last_stable_offset, records, aborted)
}

#[test]
fn same_fetch_answers_as_kafka() {
    if let Err(why) = common::kafka_ref::oracle_available() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let kafka = common::kafka_ref::KafkaRef::start();
    let mut java = JavaTxn::start(&kafka.bootstrap());
    let broker = Broker::start_with(&[NO_VERIFICATION]);
    create_topic(&broker, TOPIC, 1, &[]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let strom = connect(&broker).await;
        let k = connect_to(&kafka.bootstrap()).await;
        let a = producer_id(&strom).await;
        let b = producer_id(&strom).await;
        for step in ["a", "b", "plain", "abort-a", "commit-b"] {
            java.step(step);
            match step {
                "a" => assert_eq!(produce(&strom, batch(a, 0, 2, true), Some("ta")).await.0, 0),
                "b" => assert_eq!(produce(&strom, batch(b, 0, 2, true), Some("tb")).await.0, 0),
                "plain" => assert_eq!(produce(&strom, batch(-1, 0, 1, false), None).await.0, 0),
                "abort-a" => assert_eq!(marker(&strom, a, false, 0, &[0]).await, vec![0]),
                _ => assert_eq!(marker(&strom, b, true, 0, &[0]).await, vec![0]),
            }
            for isolation in [READ_COMMITTED, 0] {
                let ours = normalized(&strom, isolation).await;
                // Kafka's coordinator writes the markers after EndTxn answered: bounded poll
                // until its answer settles on ours (or the last one is reported).
                let mut theirs = normalized(&k, isolation).await;
                for _ in 0..100 {
                    if theirs == ours {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    theirs = normalized(&k, isolation).await;
                }
                assert_eq!(ours, theirs, "after {step}, isolation {isolation}");
                let (lso_ours, lso_theirs) =
                    (latest(&strom, isolation).await, latest(&k, isolation).await);
                assert_eq!(lso_ours, lso_theirs, "ListOffsets latest after {step}");
            }
        }
    });
    drop(java);
}

// ---------------------------------------------------------------------------------------------
// Replication: followers track transactions from the leader's batches.

#[test]
fn a_new_leader_has_the_same_lso_and_aborted_list() {
    use common::cluster::{self, Cluster};
    let mut c = Cluster::start_with(3, &[NO_VERIFICATION]);
    cluster::create_topic_on_all(&c, &[1], TOPIC, 1, 3);
    let leader = cluster::eventually("a leader", || {
        let (_, _, leaders) = cluster::metadata(&c, 1, TOPIC);
        leaders.get(&0).copied().filter(|&l| l > 0)
    });
    let addr = |c: &Cluster, node: i32| format!("127.0.0.1:{}", cluster::port_of(c, node));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (a, b) = rt.block_on(async {
        let l = connect_to(&addr(&c, leader)).await;
        let a = producer_id(&l).await;
        let b = producer_id(&l).await;
        assert_eq!(produce(&l, batch(a, 0, 2, true), Some("ta")).await, (0, 0));
        assert_eq!(produce(&l, batch(b, 0, 2, true), Some("tb")).await, (0, 2));
        // acks=all: answered once every ISR member has the marker.
        assert_eq!(marker(&l, a, false, 0, &[0]).await, vec![0]);
        (a, b)
    });
    c.kill(leader);
    let new_leader = cluster::eventually("a new leader", || {
        let via = if leader == 1 { 2 } else { 1 };
        let (_, _, leaders) = cluster::metadata(&c, via, TOPIC);
        leaders.get(&0).copied().filter(|&l| l > 0 && l != leader)
    });
    rt.block_on(async {
        let l = connect_to(&addr(&c, new_leader)).await;
        // Bounded: the new leader's HW reaches the marker once the other follower fetches.
        let mut rc = fetch(&l, 0, READ_COMMITTED).await;
        for _ in 0..150 {
            if rc.error == 0 && rc.high_watermark == 5 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
            rc = fetch(&l, 0, READ_COMMITTED).await;
        }
        assert_eq!((rc.high_watermark, rc.last_stable_offset), (5, 2));
        assert_eq!(rc.records, offsets(0..2, &[]));
        assert_eq!(rc.aborted, Some(vec![(a, 0)]));
        assert_eq!(producers(&l).await, vec![(a, -1), (b, 2)]);
        // b's transaction, open on the old leader, ends on the new one.
        assert_eq!(marker(&l, b, true, 0, &[0]).await, vec![0]);
        let rc = fetch(&l, 0, READ_COMMITTED).await;
        assert_eq!(rc.last_stable_offset, 6);
        assert_eq!(rc.records, offsets(0..6, &[4, 5]));
        assert_eq!(rc.aborted, Some(vec![(a, 0)]));
    });
}

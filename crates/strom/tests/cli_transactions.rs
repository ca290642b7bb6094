//! `strom transactions` against Kafka 4.4's own `kafka-transactions.sh` (TransactionsCommand,
//! run from the jars in `.cache/kafka-4.4/libs`) on the same broker, and the read_committed lag
//! of `strom groups describe --isolation-level read_committed`.
//!
//! The scenario runs twice: on a Strom broker and on Apache Kafka 4.4 (`scripts/kafka-ref.sh`),
//! both with `transaction.partition.verification.enable=false` so that a marker-less transactional
//! write is accepted, as on the brokers KIP-664 was written for). On each broker:
//! - a transactional producer (the Rust client's) leaves a transaction open on partition 0;
//! - a "ghost" producer writes a transactional batch to partition 1 with Produce v9 and no
//!   AddPartitionsToTxn: no coordinator knows it, so no marker will ever end it (a hanging
//!   transaction, KIP-664's case), and a second one to partition 2;
//! - `list`, `describe`, `describe-producers` and `find-hanging` print the same tables as
//!   Kafka's tool on the same broker (cells compared after trimming the padding; the time-
//!   derived columns TransactionDurationMs and Duration(min) are masked), and the same messages
//!   for a missing transactional id and a wrong start offset;
//! - `find-hanging` finds exactly the ghosts (the open transaction of the live producer is not
//!   hanging: its coordinator lists the partition);
//! - while the ghost is open, a read_committed consumer stops at its start offset and `strom
//!   groups describe --isolation-level read_committed` reports LAG = LSO - committed (the
//!   default stays Kafka's read_uncommitted LAG = high watermark - committed, which Kafka's
//!   kafka-consumer-groups prints too);
//! - `strom transactions abort --start-offset` removes the ghost on partition 1 (Kafka's tool
//!   aborts the one on partition 2 with --producer-id/--producer-epoch/--coordinator-epoch), after
//!   which the LSO moves past the marker, the consumer progresses without the aborted records
//!   and `find-hanging` prints an empty table.
//!
//! Without Java or the jars the tests fail when `CI` is set and are skipped otherwise.

mod common;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::kafka_ref::{libs, oracle_available, KafkaRef};
use strom_client::admin_groups::OffsetSpec;
use strom_client::{
    Admin, Client, ClientConfig, Connection, ConnectionConfig, Consumer, ConsumerConfig, Producer,
    ProducerConfig,
};
use strom_protocol::kafka::messages::produce_request::{PartitionProduceData, TopicProduceData};
use strom_protocol::kafka::messages::{
    InitProducerIdRequest, ProduceRequest, TopicName, TransactionalId,
};
use strom_protocol::kafka::protocol::StrBytes;
use strom_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

/// What one tool printed.
#[derive(Debug, Clone)]
struct Run {
    stdout: String,
    stderr: String,
    code: Option<i32>,
}

fn kafka_tool(bootstrap: &str, args: &[String]) -> Run {
    let cfg = std::env::temp_dir().join("strom-cli-transactions-log4j2.properties");
    let _ = std::fs::write(&cfg, "status = off\nrootLogger.level = OFF\n");
    let out = Command::new("java")
        .args(["-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"])
        .arg(format!("-Dlog4j2.configurationFile={}", cfg.display()))
        .arg("-cp")
        .arg(format!("{}/*", libs().display()))
        .arg("org.apache.kafka.tools.TransactionsCommand")
        .arg("--bootstrap-server")
        .arg(bootstrap)
        .args(args)
        .output()
        .expect("run java");
    Run {
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        code: out.status.code(),
    }
}

fn kafka_consumer_groups(bootstrap: &str, args: &[String]) -> String {
    let out = Command::new("java")
        .args(["-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"])
        .arg("-cp")
        .arg(format!("{}/*", libs().display()))
        .arg("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand")
        .arg("--bootstrap-server")
        .arg(bootstrap)
        .args(args)
        .output()
        .expect("run java");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn strom(tool: &str, bootstrap: &str, args: &[String]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_strom"))
        .arg(tool)
        .arg("--bootstrap-server")
        .arg(bootstrap)
        .args(args)
        .output()
        .expect("run strom");
    Run {
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        code: out.status.code(),
    }
}

fn args(s: &str) -> Vec<String> {
    s.split_whitespace().map(String::from).collect()
}

/// A printed table: the header's cells, and the rows' cells (padding trimmed) with the cells
/// of the `masked` columns replaced by `*`, rows sorted. Every line must end with the tab
/// Kafka's `prettyPrintTable` puts after each cell.
fn table(text: &str, masked: &[&str]) -> (Vec<String>, Vec<Vec<String>>) {
    let mut lines = text.lines().filter(|l| !l.is_empty());
    let header_line = lines
        .next()
        .unwrap_or_else(|| panic!("no table in {text:?}"));
    let cells = |l: &str| -> Vec<String> {
        assert!(l.ends_with('\t'), "line without the trailing tab: {l:?}");
        l.trim_end_matches('\t')
            .split('\t')
            .map(|c| c.trim().to_string())
            .collect()
    };
    let header = cells(header_line);
    let mask: Vec<usize> = masked
        .iter()
        .filter_map(|m| header.iter().position(|h| h == m))
        .collect();
    let mut rows: Vec<Vec<String>> = lines
        .map(|l| {
            let mut r = cells(l);
            assert_eq!(r.len(), header.len(), "row {l:?} under {header:?}");
            for &i in &mask {
                r[i] = "*".into();
            }
            r
        })
        .collect();
    rows.sort();
    (header, rows)
}

/// The last line of stderr (Kafka's tool prints its failure there, after any logging).
fn last_err(run: &Run) -> String {
    run.stderr
        .lines()
        .rfind(|l| !l.trim().is_empty())
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// Both tools, same broker, same arguments: the same table (time columns masked).
fn same_table(bootstrap: &str, case: &str, a: &str, masked: &[&str]) -> Vec<Vec<String>> {
    let k = kafka_tool(bootstrap, &args(a));
    let s = strom("transactions", bootstrap, &args(a));
    assert_eq!(k.code, Some(0), "{case}: kafka-transactions failed: {k:?}");
    assert_eq!(s.code, Some(0), "{case}: strom transactions failed: {s:?}");
    let (kh, kr) = table(&k.stdout, masked);
    let (sh, sr) = table(&s.stdout, masked);
    assert_eq!(
        (sh, &sr),
        (kh, &kr),
        "{case}\n--- kafka-transactions:\n{}\n--- strom transactions:\n{}",
        k.stdout,
        s.stdout
    );
    if std::env::var_os("STROM_TXN_TEST_VERBOSE").is_some() {
        eprintln!("== {case}\n{}", s.stdout);
    }
    sr
}

/// Both tools fail the same way: exit status 1 and the same message.
fn same_failure(bootstrap: &str, case: &str, a: &str) -> String {
    let k = kafka_tool(bootstrap, &args(a));
    let s = strom("transactions", bootstrap, &args(a));
    assert_eq!(k.code, Some(1), "{case}: {k:?}");
    assert_eq!(s.code, Some(1), "{case}: {s:?}");
    assert_eq!(last_err(&s), last_err(&k), "{case}");
    last_err(&s)
}

/// One batch of `n` transactional records from `pid` (epoch 0), sequence 0.
fn txn_batch(pid: i64, n: usize) -> Bytes {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let recs: Vec<Record> = (0..n)
        .map(|i| Record {
            transactional: true,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: pid,
            producer_epoch: 0,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: i as i32,
            timestamp: now,
            key: None,
            value: Some(Bytes::from(format!("ghost-{i}"))),
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

/// A hanging transaction: a producer id from InitProducerId (no transactional id) writes a
/// transactional batch with Produce v9 (pre-KIP-890: no verification with a coordinator), so
/// no coordinator has it. Returns (producer id, base offset).
async fn ghost(bootstrap: &str, topic: &str, partition: i32, txn_id: &str, n: usize) -> (i64, i64) {
    let conn = Connection::connect(bootstrap, ConnectionConfig::default())
        .await
        .expect("connect");
    let init = InitProducerIdRequest::default()
        .with_transactional_id(None)
        .with_transaction_timeout_ms(60_000);
    // COORDINATOR_LOAD_IN_PROGRESS: no block of producer ids yet (just after start-up); retried
    // as clients do.
    let mut tries = 0;
    let resp = loop {
        let resp = conn.send(&init, 4).await.expect("InitProducerId");
        if resp.error_code != 14 || tries == 200 {
            break resp;
        }
        tries += 1;
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(resp.error_code, 0);
    let pid = resp.producer_id.0;
    let req = ProduceRequest::default()
        .with_transactional_id(Some(TransactionalId(StrBytes::from_string(txn_id.into()))))
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(topic.into())))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(txn_batch(pid, n)))])]);
    let resp = conn.send(&req, 9).await.expect("Produce");
    let p = &resp.responses[0].partition_responses[0];
    assert_eq!(p.error_code, 0, "ghost produce");
    (pid, p.base_offset)
}

/// The row of `topic` partition `partition` in `strom groups --describe` output:
/// (CURRENT-OFFSET, LOG-END-OFFSET, LAG).
fn group_row(out: &str, topic: &str, partition: i32) -> (i64, i64, i64) {
    let header: Vec<&str> = out
        .lines()
        .find(|l| l.contains("LOG-END-OFFSET"))
        .unwrap_or_else(|| panic!("no header in {out}"))
        .split_whitespace()
        .collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let row: Vec<&str> = out
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|r| {
            r.get(col("TOPIC")) == Some(&topic)
                && r.get(col("PARTITION")) == Some(&partition.to_string().as_str())
        })
        .unwrap_or_else(|| panic!("no row for {topic}-{partition} in {out}"));
    let n = |name: &str| row[col(name)].parse::<i64>().unwrap();
    (n("CURRENT-OFFSET"), n("LOG-END-OFFSET"), n("LAG"))
}

/// Polls a read_committed consumer of `topic`-`partition` from `from` until its position
/// reaches `until` (or a bounded number of polls); the offsets it returned.
async fn read_committed(
    client: &Client,
    topic: &str,
    partition: i32,
    from: i64,
    polls: usize,
    until: i64,
) -> (Vec<i64>, i64, Option<i64>) {
    let cfg = ConsumerConfig {
        isolation_level: strom_client::consumer::READ_COMMITTED,
        fetch_max_wait: Duration::from_millis(100),
        ..Default::default()
    };
    let mut c = Consumer::new(client.clone(), cfg);
    c.assign(topic, Some(&[partition])).await.expect("assign");
    c.seek(topic, partition, from);
    let mut got = Vec::new();
    for _ in 0..polls {
        for r in c.poll(Duration::from_millis(200)).await.expect("poll") {
            got.push(r.offset);
        }
        if c.position(topic, partition).unwrap_or(from) >= until {
            break;
        }
    }
    (
        got,
        c.position(topic, partition).unwrap_or(from),
        c.lag(topic, partition),
    )
}

static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn oracle_or_skip() -> bool {
    if let Err(why) = oracle_available() {
        if std::env::var_os("CI").is_some() {
            panic!("cli_transactions needs Kafka 4.4 and Java: {why}");
        }
        eprintln!("skipping cli_transactions: {why}");
        return false;
    }
    true
}

#[test]
fn transactions_tool_matches_kafka_transactions_on_strom() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !oracle_or_skip() {
        return;
    }
    // As the Kafka broker below: verification off, so the marker-less write is accepted.
    let broker = common::Broker::start_with(&["transaction.partition.verification.enable=false"]);
    scenario(&broker.bootstrap());
}

#[test]
fn transactions_tool_matches_kafka_transactions_on_kafka() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !oracle_or_skip() {
        return;
    }
    let kafka = KafkaRef::start_with_props("transaction.partition.verification.enable=false\n");
    scenario(&kafka.bootstrap());
}

fn scenario(bootstrap: &str) {
    let started = Instant::now();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let client = rt
        .block_on(Client::connect(ClientConfig::new(bootstrap)))
        .expect("connect");
    let admin = Admin::new(client.clone());
    let run = format!(
        "{:x}",
        std::process::id() ^ (started.elapsed().as_nanos() as u32)
    );
    let topic = format!("tx-{run}");
    let tid = format!("open-{run}");
    let group = format!("g-{run}");

    // Five committed records on partition 1, then the open transaction on partition 0.
    let open_producer = rt.block_on(async {
        admin
            .create_topic(&topic, 3, 1, &[], false)
            .await
            .expect("create");
        let plain = Producer::new(client.clone(), ProducerConfig::default());
        let mut d = Vec::new();
        for i in 0..5 {
            d.push(plain.send(&topic, Some(1), None, Some(format!("p{i}").into()), vec![]));
        }
        plain.flush().await.expect("flush");
        for x in d {
            x.await.expect("delivered");
        }
        let cfg = ProducerConfig {
            transactional_id: Some(tid.clone()),
            ..Default::default()
        };
        let p = Producer::new(client.clone(), cfg);
        p.init_transactions().await.expect("init_transactions");
        p.begin_transaction().await.expect("begin");
        let mut d = Vec::new();
        for i in 0..3 {
            d.push(p.send(&topic, Some(0), None, Some(format!("t{i}").into()), vec![]));
        }
        p.flush().await.expect("flush txn");
        for x in d {
            x.await.expect("delivered txn");
        }
        p
    });
    // The hanging transactions: partition 1 (offsets 5..7) and partition 2.
    let (ghost_pid, ghost_start) =
        rt.block_on(ghost(bootstrap, &topic, 1, &format!("ghost-{run}"), 3));
    assert_eq!(ghost_start, 5);
    let (ghost2_pid, _) = rt.block_on(ghost(bootstrap, &topic, 2, &format!("ghost2-{run}"), 2));
    rt.block_on(async {
        let offsets: BTreeMap<(String, i32), i64> = [((topic.clone(), 1), 2)].into_iter().collect();
        let r = admin
            .alter_group_offsets(&group, &offsets)
            .await
            .expect("commit");
        assert!(r.values().all(|r| r.is_ok()), "{r:?}");
    });
    // find-hanging compares the producers' last timestamps with the clock in minutes: with a
    // maximum timeout of 0 minutes, any transaction older than now is a candidate.
    std::thread::sleep(Duration::from_millis(20));

    // list: the open transaction, with its coordinator and producer id.
    let rows = same_table(bootstrap, "list", "list", &[]);
    let open_row = rows
        .iter()
        .find(|r| r[0] == tid)
        .unwrap_or_else(|| panic!("{tid} not listed: {rows:?}"));
    assert_eq!(open_row[3], "Ongoing");
    let open_pid: i64 = open_row[2].parse().unwrap();
    same_table(
        bootstrap,
        "list filtered",
        &format!("list --duration-filter 0 --transactional-id-pattern open-{run}"),
        &[],
    );

    // describe: state, epoch, timeout, start time and the partition in the transaction.
    let rows = same_table(
        bootstrap,
        "describe",
        &format!("describe --transactional-id {tid}"),
        &["TransactionDurationMs"],
    );
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0][1], tid);
    assert_eq!(rows[0][2], open_pid.to_string());
    assert_eq!(rows[0][4], "Ongoing");
    assert_eq!(rows[0][8], format!("{topic}-0"));
    let msg = same_failure(
        bootstrap,
        "describe missing",
        &format!("describe --transactional-id nosuch-{run}"),
    );
    assert!(
        msg.starts_with("Failed to describe transaction state of transactional-id"),
        "{msg}"
    );

    // describe-producers: the open transaction's producer on 0; the idempotent producer and
    // the ghost on 1.
    let rows = same_table(
        bootstrap,
        "describe-producers 0",
        &format!("describe-producers --topic {topic} --partition 0"),
        &[],
    );
    assert!(
        rows.iter()
            .any(|r| r[0] == open_pid.to_string() && r[5] == "0"),
        "{rows:?}"
    );
    let rows = same_table(
        bootstrap,
        "describe-producers 1",
        &format!("describe-producers --topic {topic} --partition 1"),
        &[],
    );
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(rows.iter().any(|r| r[5] == "None"), "{rows:?}");
    let ghost_row = rows
        .iter()
        .find(|r| r[0] == ghost_pid.to_string())
        .expect("ghost");
    assert_eq!((ghost_row[2].as_str(), ghost_row[5].as_str()), ("-1", "5"));

    // find-hanging: only the ghosts; the live producer's transaction is known to its
    // coordinator.
    let masked = ["Duration(min)"];
    let rows = same_table(
        bootstrap,
        "find-hanging topic",
        &format!("find-hanging --topic {topic} --max-transaction-timeout 0"),
        &masked,
    );
    let found: Vec<(String, String, String)> = rows
        .iter()
        .map(|r| (r[1].clone(), r[2].clone(), r[5].clone()))
        .collect();
    assert_eq!(
        found,
        vec![
            ("1".to_string(), ghost_pid.to_string(), "5".to_string()),
            ("2".to_string(), ghost2_pid.to_string(), "0".to_string()),
        ]
    );
    same_table(
        bootstrap,
        "find-hanging partition",
        &format!("find-hanging --topic {topic} --partition 1 --max-transaction-timeout 0"),
        &masked,
    );
    let node = rt
        .block_on(admin.describe_cluster())
        .expect("cluster")
        .brokers[0]
        .node_id;
    let rows = same_table(
        bootstrap,
        "find-hanging broker",
        &format!("find-hanging --broker-id {node} --max-transaction-timeout 0"),
        &masked,
    );
    assert!(
        rows.iter().any(|r| r[0] == topic && r[1] == "1"),
        "{rows:?}"
    );
    // The default timeout (15 minutes): nothing is that old.
    let rows = same_table(
        bootstrap,
        "find-hanging default",
        &format!("find-hanging --topic {topic}"),
        &masked,
    );
    assert!(rows.is_empty());
    same_failure(bootstrap, "find-hanging unscoped", "find-hanging");
    let msg = same_failure(
        bootstrap,
        "abort wrong start offset",
        &format!("abort --topic {topic} --partition 1 --start-offset 4"),
    );
    assert_eq!(
        msg,
        format!("Could not find any open transactions starting at offset 4 on partition {topic}-1")
    );

    // While the ghost is open: the LSO of partition 1 is its start offset, the read_committed
    // consumer stops there, and the group's read_committed lag is LSO - committed.
    let lso = |admin: &Admin| {
        let tp = (topic.clone(), 1);
        let m = rt
            .block_on(admin.list_offsets_isolated(std::slice::from_ref(&tp), OffsetSpec::Latest, 1))
            .expect("list offsets");
        m[&tp].as_ref().expect("lso").offset
    };
    assert_eq!(lso(&admin), 5);
    let (got, position, lag) = rt.block_on(read_committed(&client, &topic, 1, 2, 10, 9));
    assert_eq!((got, position, lag), (vec![2, 3, 4], 5, Some(0)));
    let describe = |iso: &str| {
        strom(
            "groups",
            bootstrap,
            &args(&format!("--describe --group {group} {iso}")),
        )
    };
    let uncommitted = describe("");
    assert_eq!(
        group_row(&uncommitted.stdout, &topic, 1),
        (2, 8, 6),
        "{uncommitted:?}"
    );
    // The default is what Kafka's kafka-consumer-groups prints: lag to the high watermark.
    let kafka_groups =
        kafka_consumer_groups(bootstrap, &args(&format!("--describe --group {group}")));
    assert_eq!(
        group_row(&kafka_groups, &topic, 1),
        (2, 8, 6),
        "{kafka_groups}"
    );
    let committed = describe("--isolation-level read_committed");
    assert_eq!(
        group_row(&committed.stdout, &topic, 1),
        (2, 5, 3),
        "{committed:?}"
    );

    // abort: strom's tool by start offset (partition 1), Kafka's by producer id, epoch and the
    // -1 coordinator epoch DescribeProducers shows (partition 2). Both print nothing.
    let s = strom(
        "transactions",
        bootstrap,
        &args(&format!(
            "abort --topic {topic} --partition 1 --start-offset 5"
        )),
    );
    assert_eq!((s.code, s.stdout.as_str()), (Some(0), ""), "{s:?}");
    let k = kafka_tool(bootstrap, &args(&format!("abort --topic {topic} --partition 2 --producer-id {ghost2_pid} --producer-epoch 0 --coordinator-epoch -1")));
    assert_eq!((k.code, k.stdout.as_str()), (Some(0), ""), "{k:?}");

    // The LSO moved past the marker (offset 8): the consumer progresses without the aborted
    // records, the read_committed lag is LSO - committed again, nothing hangs any more.
    assert_eq!(lso(&admin), 9);
    let (got, position, lag) = rt.block_on(read_committed(&client, &topic, 1, 2, 50, 9));
    assert_eq!((got, position, lag), (vec![2, 3, 4], 9, Some(0)));
    let committed = describe("--isolation-level read_committed");
    assert_eq!(
        group_row(&committed.stdout, &topic, 1),
        (2, 9, 7),
        "{committed:?}"
    );
    let rows = same_table(
        bootstrap,
        "find-hanging after abort",
        &format!("find-hanging --topic {topic} --max-transaction-timeout 0"),
        &masked,
    );
    assert!(rows.is_empty(), "{rows:?}");
    let rows = same_table(
        bootstrap,
        "describe-producers after abort",
        &format!("describe-producers --topic {topic} --partition 1"),
        &[],
    );
    assert!(rows.iter().all(|r| r[5] == "None"), "{rows:?}");

    rt.block_on(async {
        open_producer.commit_transaction().await.expect("commit");
    });
}

//! The transactional producer and the read_committed consumer end to end, against Apache Kafka
//! 4.4 (`scripts/kafka-ref.sh` from `.cache/kafka-4.4`), or against `$STROM_TXN_BOOTSTRAP` when
//! set (e.g. a Strom broker once it serves transactions):
//!
//! - a committed transaction is visible to read_committed;
//! - an aborted one is invisible to read_committed and visible to read_uncommitted;
//! - an open transaction holds read_committed back at the LSO (ListOffsets, lag, poll) while
//!   read_uncommitted reads it;
//! - a refused record makes the transaction abortable; the abort bumps the epoch and the
//!   producer goes on;
//! - a second producer with the same transactional.id fences the first (fatal errors);
//! - send_offsets_to_transaction commits the group's offsets only when the transaction commits;
//! - a consume-transform-produce loop over 3000 records, with some transactions aborted and
//!   redone, leaves every output record exactly once under read_committed (classic group and
//!   KIP-848 consumer group, whose member epoch is the TxnOffsetCommit generation).
//!
//! Kafka 4.4 finalizes `transaction.version=2` on a new cluster (the client skips
//! AddPartitionsToTxn and AddOffsetsToTxn, EndTxn bumps the epoch); the `_v1` test downgrades it
//! to 1 with kafka-features (`FeatureCommand`) so the AddPartitionsToTxn path runs too.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use bytes::Bytes;
use strom_client::consumer::{list_offsets, LATEST_TIMESTAMP, READ_COMMITTED, READ_UNCOMMITTED};
use strom_client::group::{GroupConfig, GroupProtocol, TopicPartition};
use strom_client::transactions::TxnState;
use strom_client::{
    Admin, Client, ClientConfig, Consumer, ConsumerConfig, ConsumerRecord, Error, ErrorCode,
    OffsetReset, Producer, ProducerConfig,
};

struct Kafka {
    pid: Option<String>,
    script: PathBuf,
    dir: Option<tempfile::TempDir>,
    bootstrap: String,
}

impl Drop for Kafka {
    fn drop(&mut self) {
        if let Some(pid) = &self.pid {
            let _ = Command::new(&self.script).arg("stop").arg(pid).status();
        }
        if let Some(d) = self.dir.take() {
            if std::thread::panicking() {
                let log = std::fs::read_to_string(d.path().join("server.log")).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(40).collect();
                eprintln!(
                    "kafka server.log tail:\n{}",
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                );
            }
        }
    }
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `$STROM_TXN_BOOTSTRAP`, else a fresh Kafka 4.4 (`None` when it cannot run here and `CI` is
/// unset).
fn broker(external_ok: bool) -> Option<Kafka> {
    let script = repo().join("scripts/kafka-ref.sh");
    if let Ok(b) = std::env::var("STROM_TXN_BOOTSTRAP") {
        if !external_ok {
            eprintln!("skipping: STROM_TXN_BOOTSTRAP is set, this test needs its own Kafka");
            return None;
        }
        return Some(Kafka {
            pid: None,
            script,
            dir: None,
            bootstrap: b,
        });
    }
    let jars = repo().join(".cache/kafka-4.4/libs/.complete");
    let java = Command::new("java").arg("-version").output().is_ok();
    if !jars.exists() || !java {
        let why = format!(
            "no Kafka 4.4 to test against (java found: {java}, {} exists: {}); run `make kafka-ref-fetch` or set STROM_TXN_BOOTSTRAP",
            jars.display(),
            jars.exists()
        );
        assert!(std::env::var_os("CI").is_none(), "{why}");
        eprintln!("skipping: {why}");
        return None;
    }
    let port = common::free_port_with(true);
    let dir = tempfile::Builder::new()
        .prefix("transactions-kafka-")
        .tempdir()
        .unwrap();
    let out = Command::new(&script)
        .arg("start")
        .arg(port.to_string())
        .arg(dir.path())
        .output()
        .expect("run kafka-ref.sh");
    assert!(
        out.status.success(),
        "kafka-ref.sh start failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pid = String::from_utf8_lossy(&out.stdout).trim().to_string();
    Some(Kafka {
        pid: Some(pid),
        script,
        dir: Some(dir),
        bootstrap: format!("127.0.0.1:{port}"),
    })
}

/// Sets the cluster's `transaction.version` with Kafka's own FeatureCommand.
fn set_transaction_version(k: &Kafka, level: u8) {
    let cp = Command::new(&k.script).arg("classpath").output().unwrap();
    let cp = String::from_utf8_lossy(&cp.stdout).trim().to_string();
    let out = Command::new("java")
        .args([
            "-Xmx128m",
            "-cp",
            &cp,
            "org.apache.kafka.tools.FeatureCommand",
        ])
        .args(["--bootstrap-server", &k.bootstrap, "downgrade", "--feature"])
        .arg(format!("transaction.version={level}"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "FeatureCommand failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

async fn client(bootstrap: &str) -> Client {
    let mut cfg = ClientConfig::new(bootstrap);
    cfg.request_timeout = Duration::from_secs(20);
    cfg.retries = 30;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match Client::connect(cfg.clone()).await {
            Ok(c) => return c,
            Err(e) if Instant::now() < deadline => {
                eprintln!("connect: {e}");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => panic!("connect to {bootstrap}: {e}"),
        }
    }
}

/// Names unique per run, so an external broker can be reused.
fn unique(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("{name}-{}-{nanos}", std::process::id())
}

async fn create_topic(bootstrap: &str, partitions: i32) -> String {
    let name = unique("txn");
    Admin::new(client(bootstrap).await)
        .create_topic(&name, partitions, 1, &[], false)
        .await
        .unwrap();
    name
}

async fn txn_producer(bootstrap: &str, transactional_id: &str) -> Producer {
    let config = ProducerConfig {
        transactional_id: Some(transactional_id.to_string()),
        linger: Duration::from_millis(2),
        max_block: Duration::from_secs(60),
        ..Default::default()
    };
    let p = Producer::try_new(client(bootstrap).await, config).unwrap();
    p.init_transactions().await.unwrap();
    assert_eq!(p.transaction_state(), Some(TxnState::Ready));
    p
}

fn value(s: &str) -> Option<Bytes> {
    Some(Bytes::from(s.to_string()))
}

fn values(records: &[ConsumerRecord]) -> Vec<String> {
    records
        .iter()
        .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned())
        .collect()
}

fn consumer_config(isolation_level: i8) -> ConsumerConfig {
    ConsumerConfig {
        isolation_level,
        auto_offset_reset: OffsetReset::Earliest,
        fetch_max_wait: Duration::from_millis(100),
        ..Default::default()
    }
}

/// Everything `topic` holds for `isolation_level`, read from the start up to the end offset
/// that isolation level sees, once no transaction is open on it (a commit returns before the
/// coordinator has written its markers, so the LSO may still be behind a committed
/// transaction: wait until it equals the high watermark).
async fn read_all(bootstrap: &str, topic: &str, isolation_level: i8) -> Vec<ConsumerRecord> {
    let mut c = Consumer::new(client(bootstrap).await, consumer_config(isolation_level));
    let parts = c.assign(topic, None).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let cl = client(bootstrap).await;
    let ends = loop {
        let lso = list_offsets(&cl, topic, &parts, LATEST_TIMESTAMP, READ_COMMITTED)
            .await
            .unwrap();
        let hw = list_offsets(&cl, topic, &parts, LATEST_TIMESTAMP, READ_UNCOMMITTED)
            .await
            .unwrap();
        if lso == hw {
            break hw;
        }
        assert!(Instant::now() < deadline, "{topic}: transactions stay open");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while parts
        .iter()
        .any(|p| c.position(topic, *p).is_none_or(|pos| pos < ends[p]))
    {
        assert!(Instant::now() < deadline, "reading {topic} timed out");
        out.extend(c.poll(Duration::from_millis(200)).await.unwrap());
    }
    out.sort_by_key(|r| (r.partition, r.offset));
    out
}

/// `tv2`: whether the broker runs transactions v2 (`None`: unknown, an external broker).
async fn commit_is_visible_to_read_committed(bootstrap: &str, tv2: Option<bool>) {
    let topic = create_topic(bootstrap, 2).await;
    let p = txn_producer(bootstrap, &unique("commit")).await;
    p.begin_transaction().await.unwrap();
    let mut futures = Vec::new();
    for i in 0..20 {
        futures.push(p.send(&topic, Some(i % 2), None, value(&format!("c{i}")), vec![]));
    }
    p.commit_transaction().await.unwrap();
    for f in futures {
        f.await.unwrap();
    }
    let rc = read_all(bootstrap, &topic, READ_COMMITTED).await;
    let mut got: Vec<String> = values(&rc);
    got.sort();
    let mut want: Vec<String> = (0..20).map(|i| format!("c{i}")).collect();
    want.sort();
    assert_eq!(got, want);
    // The commit markers take an offset each and are never returned.
    let ru = read_all(bootstrap, &topic, READ_UNCOMMITTED).await;
    assert_eq!(ru.len(), 20);
    // A second transaction on the same producer: with v2 EndTxn bumped the epoch (which shows
    // the client took the v2 path), with v1 the epoch stays.
    let epoch = p.producer_epoch();
    p.begin_transaction().await.unwrap();
    p.send(&topic, Some(0), None, value("c20"), vec![])
        .await
        .unwrap();
    p.commit_transaction().await.unwrap();
    match tv2 {
        Some(true) => assert_eq!(p.producer_epoch(), epoch + 1),
        Some(false) => assert_eq!(p.producer_epoch(), epoch),
        None => {}
    }
    assert_eq!(read_all(bootstrap, &topic, READ_COMMITTED).await.len(), 21);
}

async fn abort_is_invisible_to_read_committed(bootstrap: &str) {
    let topic = create_topic(bootstrap, 1).await;
    let p = txn_producer(bootstrap, &unique("abort")).await;
    p.begin_transaction().await.unwrap();
    p.send(&topic, None, None, value("kept-1"), vec![])
        .await
        .unwrap();
    p.commit_transaction().await.unwrap();
    p.begin_transaction().await.unwrap();
    for i in 0..5 {
        p.send(&topic, None, None, value(&format!("aborted-{i}")), vec![])
            .await
            .unwrap();
    }
    p.abort_transaction().await.unwrap();
    assert_eq!(p.transaction_state(), Some(TxnState::Ready));
    // The producer goes on after an abort.
    p.begin_transaction().await.unwrap();
    p.send(&topic, None, None, value("kept-2"), vec![])
        .await
        .unwrap();
    p.commit_transaction().await.unwrap();

    let rc = read_all(bootstrap, &topic, READ_COMMITTED).await;
    assert_eq!(values(&rc), vec!["kept-1", "kept-2"]);
    let ru = read_all(bootstrap, &topic, READ_UNCOMMITTED).await;
    let mut want = vec!["kept-1".to_string()];
    want.extend((0..5).map(|i| format!("aborted-{i}")));
    want.push("kept-2".into());
    assert_eq!(values(&ru), want);
}

async fn open_transaction_holds_back_read_committed(bootstrap: &str) {
    let topic = create_topic(bootstrap, 1).await;
    let plain = Producer::new(client(bootstrap).await, ProducerConfig::default());
    for i in 0..3 {
        plain
            .send(&topic, Some(0), None, value(&format!("before-{i}")), vec![])
            .await
            .unwrap();
    }
    let p = txn_producer(bootstrap, &unique("open")).await;
    p.begin_transaction().await.unwrap();
    for i in 0..4 {
        p.send(&topic, Some(0), None, value(&format!("open-{i}")), vec![])
            .await
            .unwrap();
    }
    // Non-transactional records after the open transaction are held back as well.
    plain
        .send(&topic, Some(0), None, value("after"), vec![])
        .await
        .unwrap();

    let mut rc = Consumer::new(client(bootstrap).await, consumer_config(READ_COMMITTED));
    rc.assign(&topic, None).await.unwrap();
    let lso = rc
        .list_offsets(&topic, &[0], LATEST_TIMESTAMP)
        .await
        .unwrap()[&0];
    let mut ru = Consumer::new(client(bootstrap).await, consumer_config(READ_UNCOMMITTED));
    ru.assign(&topic, None).await.unwrap();
    let hw = ru
        .list_offsets(&topic, &[0], LATEST_TIMESTAMP)
        .await
        .unwrap()[&0];
    assert_eq!(
        (lso, hw),
        (3, 8),
        "LSO at the open transaction's first offset"
    );

    let mut seen_rc = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while rc.position(&topic, 0).is_none_or(|p| p < 3) {
        assert!(Instant::now() < deadline);
        seen_rc.extend(rc.poll(Duration::from_millis(200)).await.unwrap());
    }
    // More polls return nothing past the LSO.
    for _ in 0..3 {
        seen_rc.extend(rc.poll(Duration::from_millis(200)).await.unwrap());
    }
    assert_eq!(values(&seen_rc), vec!["before-0", "before-1", "before-2"]);
    assert_eq!(rc.position(&topic, 0), Some(3));
    assert_eq!(
        rc.lag(&topic, 0),
        Some(0),
        "read_committed lag goes by the LSO"
    );

    let mut seen_ru = Vec::new();
    while ru.position(&topic, 0).is_none_or(|p| p < 8) {
        assert!(Instant::now() < deadline);
        seen_ru.extend(ru.poll(Duration::from_millis(200)).await.unwrap());
    }
    assert_eq!(seen_ru.len(), 8);
    assert_eq!(ru.lag(&topic, 0), Some(0));

    p.commit_transaction().await.unwrap();
    while rc.position(&topic, 0).is_none_or(|p| p < 9) {
        assert!(
            Instant::now() < deadline,
            "read_committed never passed the commit"
        );
        seen_rc.extend(rc.poll(Duration::from_millis(200)).await.unwrap());
    }
    assert_eq!(
        values(&seen_rc),
        vec!["before-0", "before-1", "before-2", "open-0", "open-1", "open-2", "open-3", "after"]
    );
}

/// A record the broker refuses (MESSAGE_TOO_LARGE) makes the transaction abortable: commit
/// fails, abort succeeds and bumps the epoch (v1: InitProducerId after EndTxn, v2: EndTxn), and
/// the producer goes on.
async fn abortable_error_then_abort(bootstrap: &str) {
    let topic = create_topic(bootstrap, 1).await;
    let p = txn_producer(bootstrap, &unique("abortable")).await;
    p.begin_transaction().await.unwrap();
    p.send(&topic, Some(0), None, value("lost"), vec![])
        .await
        .unwrap();
    let big = Bytes::from(vec![b'x'; 1_200_000]);
    let e = p
        .send(&topic, Some(0), None, Some(big), vec![])
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::MessageTooLarge), "{e}");
    assert_eq!(p.transaction_state(), Some(TxnState::AbortableError));
    let e = p.commit_transaction().await.unwrap_err();
    assert!(!e.is_fatal_transaction_error(), "{e}");
    let e = p
        .send(&topic, Some(0), None, value("refused"), vec![])
        .await
        .unwrap_err();
    assert!(!e.is_fatal_transaction_error(), "{e}");
    let epoch = p.producer_epoch();
    p.abort_transaction().await.unwrap();
    assert_eq!(p.transaction_state(), Some(TxnState::Ready));
    assert_eq!(p.producer_epoch(), epoch + 1, "abort bumps the epoch");
    p.begin_transaction().await.unwrap();
    p.send(&topic, Some(0), None, value("kept"), vec![])
        .await
        .unwrap();
    p.commit_transaction().await.unwrap();
    let rc = read_all(bootstrap, &topic, READ_COMMITTED).await;
    assert_eq!(values(&rc), vec!["kept"]);
}

async fn zombie_is_fenced(bootstrap: &str) {
    let topic = create_topic(bootstrap, 1).await;
    let id = unique("zombie");
    // The zombie commits after being fenced: EndTxn with its old epoch is refused, fatally.
    let zombie = txn_producer(bootstrap, &id).await;
    zombie.begin_transaction().await.unwrap();
    zombie
        .send(&topic, None, None, value("zombie-1"), vec![])
        .await
        .unwrap();
    let fresh = txn_producer(bootstrap, &id).await;
    let e = zombie.commit_transaction().await.unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::ProducerFenced), "{e}");
    assert!(e.is_fatal_transaction_error());
    assert_eq!(zombie.transaction_state(), Some(TxnState::FatalError));
    let e = zombie.begin_transaction().await.unwrap_err();
    assert!(e.is_fatal_transaction_error(), "{e}");
    let e = zombie
        .send(&topic, None, None, value("zombie-2"), vec![])
        .await
        .unwrap_err();
    assert!(e.is_fatal_transaction_error(), "{e}");

    // A second zombie keeps writing after being fenced: its send fails, commit fails and the
    // abort it must then call reports the fencing.
    let zombie2 = txn_producer(bootstrap, &id).await; // fences `fresh`
    zombie2.begin_transaction().await.unwrap();
    zombie2
        .send(&topic, None, None, value("zombie2-1"), vec![])
        .await
        .unwrap();
    let newest = txn_producer(bootstrap, &id).await;
    let send = zombie2
        .send(&topic, None, None, value("zombie2-2"), vec![])
        .await;
    assert!(send.is_err(), "a fenced producer's send must fail");
    assert!(zombie2.commit_transaction().await.is_err());
    if zombie2.transaction_state() != Some(TxnState::FatalError) {
        let e = zombie2.abort_transaction().await.unwrap_err();
        assert_eq!(e.code(), Some(ErrorCode::ProducerFenced), "{e}");
    }
    assert_eq!(zombie2.transaction_state(), Some(TxnState::FatalError));
    // `fresh` was fenced by zombie2's init_transactions.
    fresh.begin_transaction().await.unwrap();
    let _ = fresh.send(&topic, None, None, value("fresh"), vec![]).await;
    assert!(
        fresh.commit_transaction().await.is_err(),
        "fenced by zombie2"
    );

    newest.begin_transaction().await.unwrap();
    newest
        .send(&topic, None, None, value("newest"), vec![])
        .await
        .unwrap();
    newest.commit_transaction().await.unwrap();
    let rc = read_all(bootstrap, &topic, READ_COMMITTED).await;
    assert_eq!(values(&rc), vec!["newest"]);
}

async fn send_offsets_commit_only_with_the_transaction(bootstrap: &str) {
    let input = create_topic(bootstrap, 1).await;
    let output = create_topic(bootstrap, 1).await;
    let plain = Producer::new(client(bootstrap).await, ProducerConfig::default());
    for i in 0..10 {
        plain
            .send(&input, Some(0), None, value(&format!("in-{i}")), vec![])
            .await
            .unwrap();
    }
    let group = unique("offsets-group");
    let mut consumer = Consumer::new(
        client(bootstrap).await,
        ConsumerConfig {
            group: GroupConfig {
                group_id: Some(group.clone()),
                enable_auto_commit: false,
                ..Default::default()
            },
            ..consumer_config(READ_COMMITTED)
        },
    );
    consumer.subscribe(&[&input], None).unwrap();
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while got.len() < 10 {
        assert!(Instant::now() < deadline, "consumed {} of 10", got.len());
        got.extend(consumer.poll(Duration::from_millis(200)).await.unwrap());
    }
    let meta = consumer.group_metadata().unwrap();
    assert!(meta.generation_id > 0, "{meta:?}");
    assert!(!meta.member_id.is_empty());
    let tp = TopicPartition::new(input.clone(), 0);

    let p = txn_producer(bootstrap, &unique("offsets")).await;
    p.begin_transaction().await.unwrap();
    p.send(&output, None, None, value("x"), vec![])
        .await
        .unwrap();
    p.send_offsets_to_transaction(BTreeMap::from([(tp.clone(), 10)]), meta.clone())
        .await
        .unwrap();
    p.abort_transaction().await.unwrap();
    let committed = consumer.committed(std::slice::from_ref(&tp)).await.unwrap();
    assert_eq!(
        committed[&tp], None,
        "aborted offsets must not be committed"
    );

    p.begin_transaction().await.unwrap();
    p.send_offsets_to_transaction(BTreeMap::from([(tp.clone(), 6)]), meta.clone())
        .await
        .unwrap();
    p.commit_transaction().await.unwrap();
    let committed = consumer.committed(std::slice::from_ref(&tp)).await.unwrap();
    assert_eq!(committed[&tp], Some(6));

    // A wrong generation is refused by the group coordinator (KIP-447): abortable.
    let mut stale = meta.clone();
    stale.generation_id += 100;
    p.begin_transaction().await.unwrap();
    let e = p
        .send_offsets_to_transaction(BTreeMap::from([(tp.clone(), 8)]), stale)
        .await
        .unwrap_err();
    assert!(!e.is_fatal_transaction_error(), "{e}");
    assert_eq!(p.transaction_state(), Some(TxnState::AbortableError));
    p.abort_transaction().await.unwrap();
    let committed = consumer.committed(std::slice::from_ref(&tp)).await.unwrap();
    assert_eq!(committed[&tp], Some(6));

    // Commit called while the offsets are still queued: it waits for them.
    p.begin_transaction().await.unwrap();
    let (sent, done) = tokio::join!(
        p.send_offsets_to_transaction(BTreeMap::from([(tp.clone(), 9)]), meta.clone()),
        p.commit_transaction()
    );
    sent.unwrap();
    done.unwrap();
    let committed = consumer.committed(std::slice::from_ref(&tp)).await.unwrap();
    assert_eq!(committed[&tp], Some(9));
    consumer.close().await.unwrap();
}

/// Reads `input` in a group under read_committed, writes each record transformed to `output`
/// and commits the input offsets in the same transaction; every 5th transaction is aborted and
/// its input read again.
async fn consume_transform_produce(bootstrap: &str, group_protocol: GroupProtocol) {
    const N: usize = 3000;
    let input = create_topic(bootstrap, 3).await;
    let output = create_topic(bootstrap, 3).await;
    let plain = Producer::new(client(bootstrap).await, ProducerConfig::default());
    let mut sent = Vec::new();
    for i in 0..N {
        sent.push(plain.send(
            &input,
            None,
            value(&format!("k{i}")),
            value(&i.to_string()),
            vec![],
        ));
    }
    for f in sent {
        f.await.unwrap();
    }
    let group = unique("ctp-group");
    let mut consumer = Consumer::new(
        client(bootstrap).await,
        ConsumerConfig {
            group: GroupConfig {
                group_id: Some(group),
                group_protocol,
                enable_auto_commit: false,
                ..Default::default()
            },
            ..consumer_config(READ_COMMITTED)
        },
    );
    consumer.subscribe(&[&input], None).unwrap();
    let p = txn_producer(bootstrap, &unique("ctp")).await;
    let mut committed_count = 0usize;
    let mut transactions = 0usize;
    let mut aborted = 0usize;
    let deadline = Instant::now() + Duration::from_secs(180);
    // Polled records not yet processed; transactions take at most 100 of them.
    let mut buffer: std::collections::VecDeque<ConsumerRecord> = Default::default();
    while committed_count < N {
        assert!(
            Instant::now() < deadline,
            "committed {committed_count} of {N} records"
        );
        if buffer.is_empty() {
            buffer.extend(consumer.poll(Duration::from_millis(200)).await.unwrap());
            continue;
        }
        let take = buffer.len().min(100);
        let records: Vec<ConsumerRecord> = buffer.drain(..take).collect();
        transactions += 1;
        let mut next: BTreeMap<TopicPartition, i64> = BTreeMap::new();
        p.begin_transaction().await.unwrap();
        let mut deliveries = Vec::new();
        for r in &records {
            next.insert(
                TopicPartition::new(r.topic.clone(), r.partition),
                r.offset + 1,
            );
            let v = String::from_utf8_lossy(r.value.as_deref().unwrap()).into_owned();
            deliveries.push(p.send(
                &output,
                None,
                r.key.clone(),
                value(&format!("out-{v}")),
                vec![],
            ));
        }
        p.send_offsets_to_transaction(next, consumer.group_metadata().unwrap())
            .await
            .unwrap();
        if transactions.is_multiple_of(5) {
            p.abort_transaction().await.unwrap();
            // Written-then-aborted or failed unsent: either way not visible.
            drop(deliveries);
            aborted += 1;
            // Read the aborted input (and what was polled after it) again.
            let mut first: HashMap<i32, i64> = HashMap::new();
            for r in records.iter().chain(buffer.iter()) {
                first.entry(r.partition).or_insert(r.offset);
            }
            buffer.clear();
            for (partition, offset) in first {
                consumer.seek(&input, partition, offset);
            }
        } else {
            p.commit_transaction().await.unwrap();
            for d in deliveries {
                d.await.unwrap();
            }
            committed_count += records.len();
        }
    }
    assert!(aborted > 0, "the loop must have aborted some transactions");
    let rc = read_all(bootstrap, &output, READ_COMMITTED).await;
    let got: BTreeSet<String> = values(&rc).into_iter().collect();
    assert_eq!(rc.len(), N, "duplicates or losses under read_committed");
    let want: BTreeSet<String> = (0..N).map(|i| format!("out-{i}")).collect();
    assert_eq!(got, want);
    let ru = read_all(bootstrap, &output, READ_UNCOMMITTED).await;
    assert!(
        ru.len() > N,
        "aborted output is visible to read_uncommitted"
    );
    // The group's committed offsets are the input's end.
    let parts: Vec<TopicPartition> = (0..3)
        .map(|p| TopicPartition::new(input.clone(), p))
        .collect();
    let committed = consumer.committed(&parts).await.unwrap();
    let total: i64 = committed.values().map(|o| o.unwrap_or(0)).sum();
    assert_eq!(total as usize, N);
    consumer.close().await.unwrap();
}

async fn wrong_state_calls_are_refused(bootstrap: &str) {
    let topic = create_topic(bootstrap, 1).await;
    let config = ProducerConfig {
        transactional_id: Some(unique("states")),
        ..Default::default()
    };
    let p = Producer::try_new(client(bootstrap).await, config).unwrap();
    assert!(matches!(
        p.begin_transaction().await,
        Err(Error::IllegalState(_))
    ));
    assert!(matches!(
        p.send(&topic, None, None, value("x"), vec![]).await,
        Err(Error::IllegalState(_))
    ));
    p.init_transactions().await.unwrap();
    assert!(matches!(
        p.init_transactions().await,
        Err(Error::IllegalState(_))
    ));
    assert!(matches!(
        p.commit_transaction().await,
        Err(Error::IllegalState(_))
    ));
    assert!(matches!(
        p.send(&topic, None, None, value("x"), vec![]).await,
        Err(Error::IllegalState(_))
    ));
    // A transaction with nothing in it commits without a coordinator round trip.
    p.begin_transaction().await.unwrap();
    p.commit_transaction().await.unwrap();
    let plain = Producer::new(client(bootstrap).await, ProducerConfig::default());
    assert!(matches!(
        plain.init_transactions().await,
        Err(Error::IllegalState(_))
    ));
}

async fn all_scenarios(bootstrap: &str, tv2: Option<bool>) {
    eprintln!("scenario: wrong-state calls");
    wrong_state_calls_are_refused(bootstrap).await;
    eprintln!("scenario: commit");
    commit_is_visible_to_read_committed(bootstrap, tv2).await;
    eprintln!("scenario: abort");
    abort_is_invisible_to_read_committed(bootstrap).await;
    eprintln!("scenario: open transaction / LSO");
    open_transaction_holds_back_read_committed(bootstrap).await;
    eprintln!("scenario: abortable error");
    abortable_error_then_abort(bootstrap).await;
    eprintln!("scenario: zombie fencing");
    zombie_is_fenced(bootstrap).await;
    eprintln!("scenario: send_offsets_to_transaction");
    send_offsets_commit_only_with_the_transaction(bootstrap).await;
    eprintln!("scenario: consume-transform-produce (classic group)");
    consume_transform_produce(bootstrap, GroupProtocol::Classic).await;
    eprintln!("scenario: consume-transform-produce (consumer group protocol)");
    consume_transform_produce(bootstrap, GroupProtocol::Consumer).await;
}

/// Kafka 4.4 as formatted (transactions v2), or `$STROM_TXN_BOOTSTRAP`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_against_a_broker() {
    let Some(k) = broker(true) else { return };
    let tv2 = k.pid.is_some().then_some(true);
    all_scenarios(&k.bootstrap, tv2).await;
}

/// Kafka 4.4 downgraded to `transaction.version=1`: AddPartitionsToTxn, AddOffsetsToTxn,
/// InitProducerId epoch bumps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_v1_against_kafka() {
    let Some(k) = broker(false) else { return };
    set_transaction_version(&k, 1);
    // The broker learns the new level from the metadata log; wait until it advertises it.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let c = client(&k.bootstrap).await;
        let conn = c.any_connection().await.unwrap();
        if conn.finalized_feature("transaction.version") == Some(1) {
            break;
        }
        assert!(Instant::now() < deadline, "transaction.version still not 1");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    all_scenarios(&k.bootstrap, Some(false)).await;
}

/// The same scenarios against a Strom broker this test starts (transactions v1 until Strom
/// advertises `transaction.version`; then whatever level it finalizes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_against_strom() {
    if std::env::var_os("STROM_TXN_BOOTSTRAP").is_some() {
        eprintln!("skipping: STROM_TXN_BOOTSTRAP is set");
        return;
    }
    let strom = common::Broker::start_with(&["group.initial.rebalance.delay.ms=0"]);
    let bootstrap = format!("127.0.0.1:{}", strom.port);
    let c = client(&bootstrap).await;
    let conn = c.any_connection().await.unwrap();
    let tv2 = conn
        .finalized_feature("transaction.version")
        .map(|v| v >= 2);
    all_scenarios(&bootstrap, tv2.or(Some(false))).await;
}

//! `strom dump-log` on a transactional segment written by `strom_storage::UnifiedLog` (the
//! broker's write path): transactional batches, COMMIT and ABORT markers appended with origin
//! Coordinator, the `.txnindex` of the aborted transactions, the offset/time indexes and the
//! producer snapshot with a transaction still open. Checked line by line here and, when Kafka
//! 4.4's jars are present (`scripts/kafka-ref.sh fetch`), against Kafka's `kafka-dump-log.sh` on
//! the same files.

use std::path::{Path, PathBuf};
use std::process::Command;

use bytes::{Bytes, BytesMut};
use strom_protocol::memory_records::{end_txn_marker, TxnResult};
use strom_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use strom_storage::{AppendOrigin, LogConfig, UnifiedLog};

const T0: i64 = 1_700_000_000_000;

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

fn run(cmd: &mut Command) -> Out {
    let out = cmd.output().expect("run dump-log");
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn strom(args: &[&str]) -> Out {
    run(Command::new(env!("CARGO_BIN_EXE_strom"))
        .arg("dump-log")
        .args(args)
        .env("RUST_LOG", "off"))
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn kafka_available() -> bool {
    if !repo_root().join(".cache/kafka-4.4/libs/.complete").exists() {
        eprintln!("SKIPPED: Kafka 4.4 jars not found (run scripts/kafka-ref.sh fetch)");
        return false;
    }
    if Command::new("java").arg("-version").output().is_err() {
        eprintln!("SKIPPED: no java on PATH");
        return false;
    }
    true
}

fn kafka(args: &[&str]) -> Out {
    run(Command::new(repo_root().join("scripts/kafka-dump-log.sh")).args(args))
}

/// `n` records of `pid` (epoch 0) from sequence `seq`, transactional or not.
fn batch(pid: i64, seq: i32, n: usize, transactional: bool, ts: i64) -> Vec<u8> {
    let recs: Vec<Record> = (0..n)
        .map(|i| Record {
            transactional,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: pid,
            producer_epoch: 0,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: seq + i as i32,
            timestamp: ts + i as i64,
            key: Some(Bytes::from(format!("k{i}"))),
            value: Some(Bytes::from(format!("v{pid}-{i}"))),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &recs,
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .unwrap();
    buf.to_vec()
}

/// pid 5: 0..2 aborted at 4; pid 6: 2..4 committed at 6; plain pid 8 at 5; pid 7 open at 7..9.
fn transactional_segment(dir: &Path) -> PathBuf {
    let log_dir = dir.join("t-0");
    let config = LogConfig {
        index_interval_bytes: 1,
        producer_id_expiration_ms: i64::MAX / 2,
        ..Default::default()
    };
    let mut log = UnifiedLog::open(&log_dir, config, 0, true).unwrap();
    let client = |log: &mut UnifiedLog, b: Vec<u8>| {
        log.append_as_leader(&b, 2, AppendOrigin::Client, T0)
            .unwrap();
    };
    let marker = |log: &mut UnifiedLog, pid: i64, result: TxnResult, ts: i64| {
        let m = end_txn_marker(pid, 0, 4, result, ts);
        log.append_as_leader(&m, 2, AppendOrigin::Coordinator, T0)
            .unwrap();
    };
    client(&mut log, batch(5, 0, 2, true, T0));
    client(&mut log, batch(6, 0, 2, true, T0 + 10));
    marker(&mut log, 5, TxnResult::Abort, T0 + 20);
    client(&mut log, batch(8, 0, 1, false, T0 + 30));
    marker(&mut log, 6, TxnResult::Commit, T0 + 40);
    client(&mut log, batch(7, 0, 3, true, T0 + 50));
    log.close().unwrap();
    log_dir
}

#[test]
fn transactional_storage_segment_dumps_like_kafka() {
    let dir = tempfile::tempdir().unwrap();
    let log_dir = transactional_segment(dir.path());
    let seg = |ext: &str| log_dir.join(format!("{:020}.{ext}", 0));
    let path = |p: &PathBuf| p.to_str().unwrap().to_string();

    // The aborted transaction of pid 5, with the LSO (2: pid 6 still open) after its marker.
    let out = strom(&["--files", &path(&seg("txnindex"))]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(
        out.stdout,
        format!(
            "Dumping {}\nversion: 0 producerId: 5 firstOffset: 0 lastOffset: 4 lastStableOffset: 2\n",
            seg("txnindex").display()
        )
    );
    let out = strom(&["--files", &path(&seg("log")), "--deep-iteration"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let text = out.stdout;
    assert!(
        text.contains("isTransactional: true isControl: true"),
        "{text}"
    );
    assert!(
        text.contains("endTxnMarker: ABORT coordinatorEpoch: 4"),
        "{text}"
    );
    assert!(
        text.contains("endTxnMarker: COMMIT coordinatorEpoch: 4"),
        "{text}"
    );
    // The snapshot at the log end keeps pid 7's open transaction.
    let snapshot = log_dir.join(format!("{:020}.snapshot", 10));
    let out = strom(&["--files", &path(&snapshot)]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.contains("producerId: 7")
            && out
                .stdout
                .contains("currentTxnFirstOffset: OptionalLong[7]"),
        "{}",
        out.stdout
    );

    if !kafka_available() {
        return;
    }
    let log = path(&seg("log"));
    let all = [
        path(&seg("txnindex")),
        path(&seg("index")),
        path(&seg("timeindex")),
        path(&snapshot),
    ]
    .join(",");
    for args in [
        vec!["--files", log.as_str()],
        vec!["--files", log.as_str(), "--deep-iteration"],
        vec!["--files", log.as_str(), "--print-data-log"],
        vec![
            "--files",
            log.as_str(),
            "--print-data-log",
            "--skip-record-metadata",
        ],
        vec!["--files", all.as_str()],
        vec!["--files", all.as_str(), "--verify-index-only"],
    ] {
        let ours = strom(&args);
        let theirs = kafka(&args);
        assert_eq!(
            ours.stdout, theirs.stdout,
            "stdout differs for {args:?}\nkafka stderr: {}",
            theirs.stderr
        );
        assert_eq!(ours.code, theirs.code, "exit status for {args:?}");
        assert_eq!(ours.stderr, theirs.stderr, "stderr for {args:?}");
    }
}

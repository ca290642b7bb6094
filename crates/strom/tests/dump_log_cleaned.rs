//! `strom dump-log` on segments Kafka 4.4's own log cleaner wrote: a compacted topic (segments
//! rolled every 100 ms, min.cleanable.dirty.ratio 0.01, log.cleaner.backoff.ms 100) gets a
//! keyed workload with tombstones, compressed batches, an aborted and a committed transaction
//! and a producer's last batch whose records are all superseded; once Kafka has cleaned it,
//! both tools dump every file of the partition with the same flags and must print the same
//! bytes: batches carrying a delete horizon (KIP-534), empty batches kept for producer state,
//! recompressed retained records, markers, indexes and the producer snapshot.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::kafka_ref::{self, KafkaRef};

const WORKLOAD: &str = include_str!("dump_log_cleaned/CleanWorkload.java");
const TOPIC: &str = "cleaned";

fn classpath() -> String {
    let out = Command::new(kafka_ref::repo_root().join("scripts/kafka-ref.sh"))
        .arg("classpath")
        .output()
        .expect("kafka-ref.sh classpath");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// Runs `cmd` to completion within `limit`, killing it otherwise; (exit code, stdout, stderr).
fn run_bounded(cmd: &mut Command, limit: Duration) -> (i32, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let (out, err) = (dir.path().join("out"), dir.path().join("err"));
    let mut child = cmd
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .stdin(Stdio::null())
        .spawn()
        .expect("spawn");
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    (
        status.code().unwrap_or(-1),
        std::fs::read_to_string(out).unwrap(),
        std::fs::read_to_string(err).unwrap(),
    )
}

fn create_topic(kafka: &KafkaRef) {
    let (code, out, err) = run_bounded(
        Command::new("java")
            .arg("-Xmx128m")
            .arg("-cp")
            .arg(classpath())
            .arg("org.apache.kafka.tools.TopicCommand")
            .args(["--bootstrap-server", &kafka.bootstrap(), "--create"])
            .args(["--topic", TOPIC, "--partitions", "1"])
            .args(["--config", "cleanup.policy=compact"])
            .args(["--config", "min.cleanable.dirty.ratio=0.01"])
            .args(["--config", "segment.ms=100"]),
        Duration::from_secs(120),
    );
    assert_eq!(code, 0, "create topic: {out}{err}");
}

/// The offset Kafka's cleaner-offset-checkpoint holds for the partition, if any.
fn cleaned_up_to(data: &Path) -> Option<i64> {
    let text = std::fs::read_to_string(data.join("cleaner-offset-checkpoint")).ok()?;
    text.lines().find_map(|l| {
        let mut f = l.split(' ');
        (f.next() == Some(TOPIC) && f.next() == Some("0"))
            .then(|| f.next()?.parse().ok())
            .flatten()
    })
}

/// The partition's live files (not `.deleted` ones), copied so neither tool races the cleaner.
fn copy_partition(from: &Path, to: &Path) -> Vec<PathBuf> {
    std::fs::create_dir_all(to).unwrap();
    let mut files = Vec::new();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        let wanted = [".log", ".index", ".timeindex", ".txnindex", ".snapshot"]
            .iter()
            .any(|ext| name.ends_with(ext));
        if wanted && name.as_bytes()[0].is_ascii_digit() {
            std::fs::copy(e.path(), to.join(&name)).unwrap();
            files.push(to.join(&name));
        }
    }
    files.sort();
    files
}

#[test]
fn kafka_cleaned_segments_dump_like_kafka() {
    if let Err(why) = kafka_ref::oracle_available() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let kafka = KafkaRef::start_with_props("log.cleaner.backoff.ms=100\n");
    create_topic(&kafka);
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("CleanWorkload.java");
    std::fs::write(&src, WORKLOAD).unwrap();
    let (code, out, err) = run_bounded(
        Command::new("java")
            .arg("-Xmx256m")
            .arg("-cp")
            .arg(classpath())
            .arg(&src)
            .args([&kafka.bootstrap(), TOPIC]),
        Duration::from_secs(180),
    );
    assert_eq!((code, out.trim()), (0, "done"), "workload: {err}");

    // The workload's last segment holds only the last record; everything before it is cleaned
    // once the checkpoint reaches that segment's base offset (within a few backoffs).
    let part = kafka.data_dir().join(format!("{TOPIC}-0"));
    let active_base = || {
        std::fs::read_dir(&part)
            .unwrap()
            .filter_map(|e| {
                let name = e.unwrap().file_name().to_string_lossy().into_owned();
                name.strip_suffix(".log")?.parse::<i64>().ok()
            })
            .max()
            .unwrap_or(0)
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let base = active_base();
        if base > 0 && cleaned_up_to(&kafka.data_dir()) == Some(base) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "Kafka did not clean {TOPIC}-0 up to {base}: checkpoint {:?}",
            cleaned_up_to(&kafka.data_dir())
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let copy = dir.path().join(format!("{TOPIC}-0"));
    let files = copy_partition(&part, &copy);
    let cleaned = copy.join(format!("{:020}.log", 0));
    assert!(files.contains(&cleaned), "{files:?}");

    let cp = classpath();
    let kafka_dump = |args: &[&str]| {
        run_bounded(
            Command::new("java")
                .arg("-Xmx256m")
                .arg("-cp")
                .arg(&cp)
                .arg("-Dlog4j2.level=WARN")
                .arg("org.apache.kafka.tools.DumpLogSegments")
                .args(args),
            Duration::from_secs(120),
        )
    };
    let strom_dump = |args: &[&str]| {
        run_bounded(
            Command::new(env!("CARGO_BIN_EXE_strom"))
                .arg("dump-log")
                .args(args)
                .env("RUST_LOG", "off"),
            Duration::from_secs(60),
        )
    };
    let mut compared = 0;
    for f in &files {
        let path = f.to_str().unwrap();
        for flags in [
            &[][..],
            &["--deep-iteration"][..],
            &["--print-data-log"][..],
            &["--deep-iteration", "--print-data-log"][..],
            &["--verify-index-only"][..],
            &["--index-sanity-check"][..],
        ] {
            let mut args = vec!["--files", path];
            args.extend_from_slice(flags);
            let (kc, kout, _) = kafka_dump(&args);
            let (sc, sout, serr) = strom_dump(&args);
            assert_eq!(sc, kc, "exit code of {args:?}: {serr}");
            assert_eq!(
                sout, kout,
                "dump-log {args:?} (left Strom, right Kafka 4.4)"
            );
            compared += 1;
        }
    }
    assert!(compared >= 12);
    // The cleaned segment shows what cleaning leaves, so the comparison covered it.
    let (_, deep, _) = strom_dump(&["--files", cleaned.to_str().unwrap(), "--deep-iteration"]);
    for want in [
        "deleteHorizonMs: OptionalLong[", // tombstones kept with their horizon
        "count: 0",                       // a producer's last batch, emptied, kept
        "compresscodec: gzip",            // retained records recompressed
        "endTxnMarker: ABORT",            // the aborted transaction's marker
        "endTxnMarker: COMMIT",
    ] {
        assert!(deep.contains(want), "{want:?} missing:\n{deep}");
    }
    // The aborted transaction's record is gone, its marker stays.
    let (_, data, _) = strom_dump(&["--files", cleaned.to_str().unwrap(), "--print-data-log"]);
    assert!(!data.contains("payload: aborted"), "{data}");
    assert!(data.contains("payload: committed"), "{data}");
}

//! Kafka's transactions system test, as `strom-chaos copier` runs it (see
//! `crates/strom/src/chaos/copier.rs`): TransactionalMessageCopier instances (Java
//! kafka-clients 4.4) copy 100,000 records from a 2-partition input topic to a 3-partition
//! output topic (RF 3, min.insync.replicas 2) in transactions of 750, with random aborts, while
//! brokers are SIGKILLed and restarted and the copiers themselves are SIGKILLed and restarted; a
//! read_committed consumer reads throughout. The output must equal the input as a set, without
//! duplicates, in order per partition, and no aborted record may ever be read.
//!
//! The same command on three Apache Kafka 4.4 nodes (a smaller copy) checks the test itself.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(1500);
/// One copier run at a time: each starts three brokers and three or four JVMs.
static SERIAL: Mutex<()> = Mutex::new(());

fn copier(args: &[&str]) -> String {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().expect("tempdir");
    let libs = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.cache/kafka-4.4/libs");
    if !libs.join(".complete").exists() {
        assert!(
            std::env::var_os("CI").is_none(),
            "Kafka 4.4 jars missing: make kafka-ref-fetch"
        );
        eprintln!("skipping: Kafka 4.4 jars missing (make kafka-ref-fetch)");
        return String::new();
    }
    let mut cmd = common::strom_chaos();
    cmd.args(["copier"])
        .args(args)
        .arg("--data-dir")
        .arg(dir.path())
        .arg("--kafka-libs")
        .arg(&libs);
    let done = common::bounded::run_bounded(&mut cmd, LIMIT);
    let (status, out, err) = (done.status, done.stdout, done.stderr);
    let Some(status) = status else {
        panic!("strom-chaos copier took over {LIMIT:?}\nstdout:\n{out}\nstderr:\n{err}");
    };
    assert!(
        status.success(),
        "exit {status}\nstdout:\n{out}\nstderr:\n{err}"
    );
    let ps = Command::new("ps").args(["-eo", "args"]).output().unwrap();
    let ps = String::from_utf8_lossy(&ps.stdout);
    let dir_s = dir.path().display().to_string();
    assert!(
        !ps.lines().any(|l| l.contains(&dir_s)),
        "a process of the experiment is still running:\n{ps}"
    );
    out
}

/// The result line of `broker`: its fields by the table's column names.
fn result(out: &str, broker: &str) -> std::collections::BTreeMap<String, String> {
    let mut lines = out.lines().skip_while(|l| !l.starts_with("broker "));
    let header: Vec<&str> = lines.next().expect("a table").split_whitespace().collect();
    let row: Vec<&str> = lines
        .find(|l| l.split_whitespace().next() == Some(broker))
        .unwrap_or_else(|| panic!("no result line for {broker}:\n{out}"))
        .split_whitespace()
        .collect();
    header
        .iter()
        .zip(row)
        .map(|(h, v)| (h.to_string(), v.to_string()))
        .collect()
}

fn assert_exactly_once(out: &str, broker: &str, records: &str, kills: u32) {
    let r = result(out, broker);
    for (col, want) in [
        ("input", records),
        ("output", records),
        ("unique", records),
        ("dups", "0"),
        ("missing", "0"),
        ("extra", "0"),
        ("order", "0"),
        ("c.dup", "0"),
        ("aborted", "0"),
        ("c.fail", "0"),
    ] {
        assert_eq!(r[col], want, "{col} on {broker}:\n{out}");
    }
    // Faults start once the copiers are 20% through, 3 s apart: a copy that finishes first
    // skips the rest, but every run must see both kinds.
    for col in ["b.kill", "c.kill"] {
        let n: u32 = r[col].parse().unwrap();
        assert!(n >= 1 && n <= kills, "{col} on {broker}: {n}\n{out}");
    }
    assert!(
        r["conc.seen"].parse::<u64>().unwrap() > 0,
        "the concurrent read_committed consumer read nothing:\n{out}"
    );
}

#[test]
fn copier_under_broker_and_copier_sigkills_on_strom() {
    let out = copier(&[
        "--broker",
        "strom",
        "--records",
        "100000",
        "--broker-kills",
        "3",
        "--copier-kills",
        "3",
    ]);
    if !out.is_empty() {
        assert_exactly_once(&out, "strom", "100000", 3);
    }
}

#[test]
fn copier_under_broker_and_copier_sigkills_on_apache_kafka() {
    let out = copier(&[
        "--broker",
        "kafka",
        "--records",
        "20000",
        "--broker-kills",
        "2",
        "--copier-kills",
        "2",
    ]);
    if !out.is_empty() {
        assert_exactly_once(&out, "kafka", "20000", 2);
    }
}

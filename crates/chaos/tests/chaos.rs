//! `strom-chaos leader-kill`, shortened: 5,000 records, the leader SIGKILLed at record 1,000,
//! one run per setting. With idempotence on the topic must hold every record exactly once, in
//! order, and nothing acknowledged may be lost — with Strom's Rust producer, librdkafka and the
//! Java producer. `--broker kafka` runs the same experiment on Apache Kafka 4.4.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(300);

/// Runs `strom-chaos leader-kill` with `args` (plus the shortened workload) and returns its
/// stdout.
fn leader_kill(args: &[&str]) -> String {
    let mut all = vec![
        "leader-kill",
        "--records",
        "5000",
        "--kill-at",
        "1000",
        "--runs",
        "1",
    ];
    all.extend_from_slice(args);
    chaos(&all)
}

/// Runs `strom-chaos <args>` on a fresh data dir and returns its stdout; fails the test on a
/// non-zero exit or a timeout, and if a server outlives it.
fn chaos(args: &[&str]) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cmd = common::strom_chaos();
    cmd.args(args).arg("--data-dir").arg(dir.path());
    // The jars `make test` fetched (scripts/kafka-ref.sh); without them the command fetches its
    // own with Maven.
    let libs = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.cache/kafka-4.4/libs");
    if libs.join(".complete").exists() {
        cmd.arg("--kafka-libs").arg(&libs);
    }
    let done = common::bounded::run_bounded(&mut cmd, LIMIT);
    let (status, out, err) = (done.status, done.stdout, done.stderr);
    let Some(status) = status else {
        panic!("strom-chaos took over {LIMIT:?}\nstdout:\n{out}\nstderr:\n{err}");
    };
    assert!(
        status.success(),
        "exit {status}\nstdout:\n{out}\nstderr:\n{err}"
    );
    // No server of the experiment outlives the command.
    let ps = Command::new("ps").args(["-eo", "args"]).output().unwrap();
    let ps = String::from_utf8_lossy(&ps.stdout);
    let dir_s = dir.path().display().to_string();
    assert!(
        !ps.lines().any(|l| l.contains(&dir_s)),
        "a server of the experiment is still running:\n{ps}"
    );
    out
}

/// The table lines (broker client idempotence run cb-ok cb-failed in-topic unique duplicates
/// reorderings lost) of `broker`/`client` with idempotence `idem`.
fn rows<'a>(out: &'a str, broker: &str, client: &str, idem: &str) -> Vec<Vec<&'a str>> {
    out.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.len() == 11 && f[0] == broker && f[1] == client && f[2] == idem)
        .collect()
}

fn assert_exactly_once(out: &str, broker: &str, client: &str) {
    let on = rows(out, broker, client, "on");
    assert_eq!(on.len(), 1, "one table line for idempotence on:\n{out}");
    let f = &on[0];
    assert_eq!(f[8], "0", "duplicates with idempotence on:\n{out}");
    assert_eq!(f[9], "0", "reorderings with idempotence on:\n{out}");
    assert_eq!(f[10], "0", "lost records with idempotence on:\n{out}");
    assert_eq!(f[7], "5000", "unique records with idempotence on:\n{out}");
    assert_eq!(
        f[4], "5000",
        "acknowledged records with idempotence on:\n{out}"
    );
}

#[test]
fn leader_kill_rust_producer() {
    let out = leader_kill(&["--idempotence", "both", "--client", "rust"]);
    assert_exactly_once(&out, "strom", "rust");
    assert_eq!(
        rows(&out, "strom", "rust", "off").len(),
        1,
        "one table line for idempotence off:\n{out}"
    );
}

#[cfg(feature = "librdkafka")]
#[test]
fn leader_kill_librdkafka_producer() {
    let out = leader_kill(&["--idempotence", "on", "--client", "librdkafka"]);
    assert_exactly_once(&out, "strom", "librdkafka");
}

#[test]
fn leader_kill_java_producer() {
    let out = leader_kill(&["--idempotence", "on", "--client", "java"]);
    assert_exactly_once(&out, "strom", "java");
}

/// The comparison side: the same command against three Apache Kafka 4.4 nodes.
#[test]
fn leader_kill_on_apache_kafka() {
    let out = leader_kill(&[
        "--idempotence",
        "on",
        "--client",
        "java",
        "--broker",
        "kafka",
    ]);
    assert_exactly_once(&out, "kafka", "java");
}

/// `strom-chaos compare` runs a scenario on both systems and reports it for each: a SIGTERMed
/// leader's partition gets another leader. (That Strom's leadership moves by controlled
/// shutdown rather than by session expiry is pinned down in `cluster.rs`.)
#[test]
fn compare_leader_term_on_strom_and_kafka() {
    let out = chaos(&["compare", "--broker", "both", "--scenario", "leader-term"]);
    for broker in ["strom", "kafka"] {
        let line = out
            .lines()
            .rev()
            .find(|l| l.starts_with("leader-term") && l.split_whitespace().nth(1) == Some(broker))
            .unwrap_or_else(|| panic!("no {broker} line:\n{out}"));
        assert!(line.contains("another leader after"), "{line}");
        assert!(!line.contains("not within"), "{line}");
    }
}

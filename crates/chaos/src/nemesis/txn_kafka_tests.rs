//! The transactions workload and its checker end to end against Apache Kafka 4.4, the oracle
//! (`scripts/kafka-ref.sh`, one broker): a run with commits, aborts and a producer fenced by a
//! new instance of its transactional id (which must re-init and go on) finds no violation. This
//! shows the workload records histories the checker accepts from a correct broker; the
//! checker's own unit tests show it catches each fault.

use std::path::PathBuf;
use std::process::Command;

use super::*;

struct Kafka {
    pid: String,
    script: PathBuf,
    dir: tempfile::TempDir,
    bootstrap: String,
}

impl Drop for Kafka {
    fn drop(&mut self) {
        let _ = Command::new(&self.script)
            .arg("stop")
            .arg(&self.pid)
            .status();
        if std::thread::panicking() {
            let log =
                std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(30).collect();
            eprintln!(
                "kafka server.log tail:\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
    }
}

/// A fresh Kafka 4.4 broker, `None` (skip) when there is none to run here and `CI` is unset.
fn kafka() -> Option<Kafka> {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let script = repo.join("scripts/kafka-ref.sh");
    let jars = repo.join(".cache/kafka-4.4/libs/.complete");
    let java = Command::new("java").arg("-version").output().is_ok();
    if !jars.exists() || !java {
        let why = format!(
            "no Kafka 4.4 (java found: {java}, {} exists: {})",
            jars.display(),
            jars.exists()
        );
        assert!(std::env::var_os("CI").is_none(), "{why}");
        eprintln!("skipping: {why}");
        return None;
    }
    // The broker takes PORT and PORT+1 (its controller).
    let port = loop {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let p = l.local_addr().unwrap().port();
        if p < u16::MAX && std::net::TcpListener::bind(("127.0.0.1", p + 1)).is_ok() {
            break p;
        }
    };
    let dir = tempfile::Builder::new()
        .prefix("nemesis-txn-kafka-")
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
    Some(Kafka {
        pid: String::from_utf8_lossy(&out.stdout).trim().to_string(),
        script,
        dir,
        bootstrap: format!("127.0.0.1:{port}"),
    })
}

/// Waits (bounded) until `f` holds.
async fn until(what: &str, limit: Duration, f: impl Fn() -> bool) {
    let deadline = Instant::now() + limit;
    while !f() {
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_violation_against_kafka() {
    let Some(k) = kafka() else { return };
    set_up_topic(&k.bootstrap, 3, 1).await.unwrap();
    let mut w = TxnWorkload::start(2, 2, 10, 0.3, 42, &k.bootstrap, 3);
    let shared = w.shared.clone();
    let decided = move || {
        shared
            .txns
            .lock()
            .unwrap()
            .iter()
            .filter(|t| t.outcome == TxnOutcome::Committed)
            .count()
    };
    let d = decided.clone();
    until(
        "10 committed transactions",
        Duration::from_secs(120),
        move || d() >= 10,
    )
    .await;
    // A new instance of producer 0's transactional id fences it (a zombie's successor): the
    // workload's producer must fail, re-init and carry on.
    let fencer = ProducerRun {
        k: 0,
        bootstrap: k.bootstrap.clone(),
        partitions: 3,
        size: 10,
        abort_ratio: 0.0,
        rng: Rng::new(0),
        shared: Arc::new(TxnShared::default()),
    };
    fencer.connect().await.unwrap();
    let (shared, before) = (w.shared.clone(), decided());
    until(
        "re-init after fencing",
        Duration::from_secs(120),
        move || shared.instances.load(Ordering::Relaxed) >= 3,
    )
    .await;
    let d = decided.clone();
    until(
        "10 more committed transactions",
        Duration::from_secs(120),
        move || d() >= before + 10,
    )
    .await;
    let o = w.finish().await;
    print_summary(&w, &o);
    let r = &o.report;
    assert!(
        r.violations.is_empty() && o.problems.is_empty(),
        "{:#?}\n{:?}",
        r.violations,
        o.problems
    );
    assert!(r.committed >= 20 && r.aborted >= 5, "{r:?}");
    assert!(r.served > 0 && r.records_in_log >= 200, "{r:?}");
    // Every consumer got through the whole topic (its positions reached the LSO).
    for ((c, p), pos) in &o.history.progress {
        assert!(*pos > 0, "consumer {c} partition {p}");
    }
}

//! `strom-chaos nemesis`, 30 s with a fixed seed (and `--net` when the test runs as root): the
//! run must find no violation, must have done faults, had records acknowledged and group
//! commits acknowledged (consumer groups run by default), transactions committed (two
//! transactional producers and read_committed consumers), and must leave no server and (with
//! `--net`) no network namespace behind.

mod common;

use std::process::Command;
use std::time::Duration;

/// Setup, 30 s of faults, recovery and checks take about a minute; the producers' delivery
/// timeout can add one more, the wait for every transaction to be decided another.
const LIMIT: Duration = Duration::from_secs(300);

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .and_then(|l| l.split_whitespace().nth(2))
        == Some("0")
}

fn netns_list() -> String {
    Command::new("ip")
        .args(["netns", "list"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

#[test]
fn nemesis_30s() {
    let dir = tempfile::tempdir().expect("tempdir");
    let net = is_root();
    let mut cmd = common::strom_chaos();
    cmd.args([
        "nemesis",
        "--duration",
        "30s",
        "--seed",
        "7",
        "--txn-producers",
        "2",
        "--data-dir",
    ])
    .arg(dir.path());
    if net {
        cmd.arg("--net");
    }
    let done = common::bounded::run_bounded(&mut cmd, LIMIT);
    let (status, out, err) = (done.status, done.stdout, done.stderr);

    // Whatever the outcome: no server of the run survives, no namespace of the run is left.
    let ps = Command::new("ps").args(["-eo", "args"]).output().unwrap();
    let ps = String::from_utf8_lossy(&ps.stdout);
    let dir_s = dir.path().display().to_string();
    let survivors: Vec<&str> = ps.lines().filter(|l| l.contains(&dir_s)).collect();
    let run_ns: Vec<String> = out
        .lines()
        .find_map(|l| l.strip_prefix("network: namespaces "))
        .map(|l| {
            l.split([',', ' '])
                .filter(|w| w.starts_with("strom-"))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let left = netns_list();
    let Some(status) = status else {
        panic!("chaos nemesis took over {LIMIT:?}\nstdout:\n{out}\nstderr:\n{err}");
    };
    assert!(
        survivors.is_empty(),
        "a server of the run is still running: {survivors:?}"
    );
    if net {
        assert!(!run_ns.is_empty(), "no namespaces announced:\n{out}");
        for ns in &run_ns {
            assert!(
                !left
                    .lines()
                    .any(|l| l.split_whitespace().next() == Some(ns)),
                "namespace {ns} left behind:\n{left}"
            );
        }
    }
    assert!(
        status.success(),
        "exit {status}\nstdout:\n{out}\nstderr:\n{err}"
    );
    // nemesis-result: actions=N acked=M violations=V
    let result = out
        .lines()
        .find_map(|l| l.strip_prefix("nemesis-result: "))
        .unwrap_or_else(|| panic!("no result line:\n{out}"));
    let field = |name: &str| -> u64 {
        result
            .split_whitespace()
            .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {result}"))
    };
    assert!(field("actions") >= 3, "too few faults:\n{out}");
    assert!(
        field("acked") > 1000,
        "too few records acknowledged:\n{out}"
    );
    assert_eq!(field("violations"), 0, "{out}");
    // The groups ran and committed (the checker judged them: violations above).
    assert!(
        field("group_commits") > 100,
        "too few group commits acknowledged:\n{out}"
    );
    // The transactions ran and committed (the checker judged them: violations above).
    assert!(
        field("txn_committed") >= 10,
        "too few transactions committed:\n{out}"
    );
    assert!(field("txn_aborted") >= 1, "no transaction aborted:\n{out}");
    // Shown with --nocapture.
    println!("{out}");
}

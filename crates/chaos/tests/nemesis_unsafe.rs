//! `strom-chaos nemesis --unsafe-unclean`: a known-unsafe setting (RF 2, min.insync.replicas=1,
//! unclean.leader.election.enable=true) and a scripted fault (the follower cut off until the
//! ISR is the leader, records acknowledged by the leader alone, the leader killed, the stale
//! follower elected uncleanly). The run must report the acknowledged records it lost: the
//! checker's `lost` violation, end to end through real brokers and clients.

mod common;

use std::process::Command;
use std::time::Duration;

/// Setup ~10 s, ISR shrink ~5 s, unclean election ~5 s, recovery and read-back ~10 s.
const LIMIT: Duration = Duration::from_secs(90);

#[test]
fn unclean_election_loses_acknowledged_records_and_the_checker_reports_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cmd = common::strom_chaos();
    cmd.args([
        "nemesis",
        "--unsafe-unclean",
        "--seed",
        "7",
        "--partitions",
        "1",
        "--producers",
        "2",
        "--consumers",
        "1",
        "--data-dir",
    ])
    .arg(dir.path());
    let done = common::bounded::run_bounded(&mut cmd, LIMIT);
    let (status, out, err) = (done.status, done.stdout, done.stderr);
    let Some(status) = status else {
        panic!(
            "chaos nemesis --unsafe-unclean took over {LIMIT:?}\nstdout:\n{out}\nstderr:\n{err}"
        );
    };
    let ps = Command::new("ps").args(["-eo", "args"]).output().unwrap();
    let ps = String::from_utf8_lossy(&ps.stdout);
    let dir_s = dir.path().display().to_string();
    let survivors: Vec<&str> = ps.lines().filter(|l| l.contains(&dir_s)).collect();
    assert!(
        survivors.is_empty(),
        "a server of the run is still running: {survivors:?}"
    );
    assert!(
        status.success(),
        "exit {status}\nstdout:\n{out}\nstderr:\n{err}"
    );
    assert!(
        out.contains("(unclean election)"),
        "no unclean election announced:\n{out}"
    );
    // nemesis-result: actions=N acked=M violations=V lost=L
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
    // The leader alone acknowledged at least 200 records before it was killed; each lost one
    // is a violation the checker must name.
    assert!(field("lost") >= 1, "no loss reported:\n{out}");
    assert!(field("violations") >= field("lost"), "{out}");
    assert!(
        out.lines().any(|l| l.trim_start().starts_with("lost: p")),
        "no lost record listed:\n{out}"
    );
    println!("{out}");
}

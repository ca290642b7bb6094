//! `strom-chaos nemesis --unsafe-lost-data`: the brokers trust a restarted broker whatever it
//! lost (`strom.unsafe.trust.restarted.brokers=true`: no broker-epoch checks, Strom before
//! issue 18) and a scripted run of the lost-data fault: partition 0's leader is SIGKILLed,
//! loses the second half of its active segment (its unflushed page cache) and is restarted at
//! once, within the session timeout; it leads again with what is left and the followers
//! truncate to it. The run must report the acknowledged records lost — the checker sees the
//! loss the protection prevents (the same fault with the protection on is in the random
//! schedule of `nemesis.rs`'s run, which must find nothing).

mod common;

use std::process::Command;
use std::time::Duration;

/// Setup ~10 s, 1000 acknowledged records ~5 s, the fault and 10 s of workload after it,
/// recovery and read-back ~10 s.
const LIMIT: Duration = Duration::from_secs(120);

#[test]
fn trusted_leader_that_lost_data_loses_acknowledged_records_and_the_checker_reports_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cmd = common::strom_chaos();
    cmd.args([
        "nemesis",
        "--unsafe-lost-data",
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
            "chaos nemesis --unsafe-lost-data took over {LIMIT:?}\nstdout:\n{out}\nstderr:\n{err}"
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
        out.contains("it at once"),
        "no lost-data fault announced:\n{out}"
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
    // Hundreds of acknowledged records were in the dropped half of the leader's segment; each
    // lost one is a violation the checker must name.
    assert!(field("lost") >= 1, "no loss reported:\n{out}");
    assert!(field("violations") >= field("lost"), "{out}");
    assert!(
        out.lines().any(|l| l.trim_start().starts_with("lost: p")),
        "no lost record listed:\n{out}"
    );
    println!("{out}");
}

//! Defect 5, storage half: a broker whose open-files limit is below three descriptors per
//! partition still creates, writes and reads every partition, because segment files are opened
//! on demand through one bounded cache (`strom.log.max.open.files`) instead of staying open.

mod common;

use std::collections::HashMap;
use std::process::Command;
use std::time::Duration;

use common::*;

/// Descriptors the broker process has open now.
fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("read /proc/<pid>/fd")
        .count()
}

#[test]
fn more_partitions_than_the_fd_limit_allows_at_three_files_each() {
    many_partitions_under_a_low_limit("strom.log.max.open.files=200");
}

/// The cap set above what the limit leaves (as the default also is when the limit is lowered
/// after start): the cache holds itself to half the current soft limit.
#[test]
fn a_cap_above_the_fd_limit_is_held_to_half_the_limit() {
    many_partitions_under_a_low_limit("strom.log.max.open.files=5000");
}

fn many_partitions_under_a_low_limit(cap: &str) {
    const LIMIT: usize = 600;
    // 400 partitions are 1,200 segment files: twice what the limit allows if all stayed open.
    const PARTITIONS: i32 = 400;
    let mut broker = Broker::start_with(&[cap]);
    let pid = broker.pid();
    // Lower the running broker's soft and hard limit (a child cannot raise it back).
    let st = Command::new("prlimit")
        .args([
            "--pid",
            &pid.to_string(),
            &format!("--nofile={LIMIT}:{LIMIT}"),
        ])
        .status()
        .expect("run prlimit");
    assert!(st.success(), "prlimit failed");

    create_topic(&broker, "many", PARTITIONS, &[]);
    let recs: Vec<OutRec> = (0..PARTITIONS)
        .map(|p| OutRec {
            partition: Some(p),
            key: Some(format!("k{p}").into_bytes()),
            value: Some(format!("v{p}").into_bytes()),
            ..Default::default()
        })
        .collect();
    let acked = produce_ok(&broker, "many", &[], &recs);
    assert!(acked.iter().all(|&(_, offset)| offset == 0));

    let ends: HashMap<i32, i64> = (0..PARTITIONS).map(|p| (p, 1)).collect();
    let got = consume_until(&broker, "many", &ends, Duration::from_secs(120));
    for p in 0..PARTITIONS {
        let recs = &got[&p];
        assert_eq!(recs.len(), 1, "partition {p}");
        assert_eq!(recs[0].value.as_deref(), Some(format!("v{p}").as_bytes()));
    }
    let fds = open_fds(pid);
    assert!(fds < LIMIT, "{fds} descriptors open, limit {LIMIT}");
    assert!(broker.is_running(), "broker died:\n{}", broker.logs());
}

//! Offset expiry through the real service and runtime, on paused tokio time: the periodic
//! `offsets.retention.check.interval.ms` timer writes tombstones for offsets older than
//! `offsets.retention.ms` (or past their explicit expire timestamp), then deletes the group
//! whose offsets are all gone.

mod offsets_common;

use std::time::Duration;

use offsets_common::*;
use strom_group_coordinator::records::CoordinatorRecord;

fn retention_config() -> strom_group_coordinator::config::GroupCoordinatorConfig {
    let mut c = config();
    c.offsets_retention_ms = 60_000;
    c.offsets_retention_check_interval_ms = 1_000;
    c
}

fn tombstones(recs: &[CoordinatorRecord], group: &str) -> Vec<(String, i32)> {
    recs.iter()
        .filter_map(|r| match r {
            CoordinatorRecord::OffsetCommit(k, None) if k.group == group => {
                Some((k.topic.clone(), k.partition))
            }
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn offsets_expire_after_the_retention_and_the_simple_group_goes_with_them() {
    let (s, mem) = service(retention_config()).await;
    s.offset_commit(&ctx(8), commit_req("g", &[("t1", &[(0, 5, -1, None)])]))
        .await;
    tokio::time::sleep(Duration::from_millis(30_000)).await;
    // Committed later: expires later.
    s.offset_commit(&ctx(8), commit_req("g", &[("t1", &[(1, 6, -1, None)])]))
        .await;
    tokio::time::sleep(Duration::from_millis(25_000)).await;
    assert_eq!(offset_of(&s, "g", "t1", 0).await, 5, "55 s old: kept");

    tokio::time::sleep(Duration::from_millis(6_000)).await;
    assert_eq!(offset_of(&s, "g", "t1", 0).await, -1, "61 s old: expired");
    assert_eq!(offset_of(&s, "g", "t1", 1).await, 6, "31 s old: kept");
    assert_eq!(
        tombstones(&records_of(&s, &mem, "g"), "g"),
        vec![("t1".into(), 0)]
    );

    tokio::time::sleep(Duration::from_millis(31_000)).await;
    assert_eq!(offset_of(&s, "g", "t1", 1).await, -1);
    let recs = records_of(&s, &mem, "g");
    assert_eq!(
        tombstones(&recs, "g"),
        vec![("t1".into(), 0), ("t1".into(), 1)]
    );
    // The group had nothing but offsets: it is deleted with its last one.
    assert!(
        matches!(recs.last(), Some(CoordinatorRecord::GroupMetadata(k, None)) if k.group == "g")
    );
    let n = recs.len();
    // And nothing more is written on later passes.
    tokio::time::sleep(Duration::from_millis(10_000)).await;
    assert_eq!(records_of(&s, &mem, "g").len(), n);
}

#[tokio::test(start_paused = true)]
async fn an_explicit_retention_of_an_old_client_sets_its_own_deadline() {
    let (s, mem) = service(retention_config()).await;
    // OffsetCommit v2-v4 may carry retention_time_ms: 5 s here, not the broker's 60 s.
    let req =
        commit_req("old-client", &[("t2", &[(0, 3, -1, Some("m"))])]).with_retention_time_ms(5_000);
    let r = s.offset_commit(&ctx(2), req).await;
    assert_eq!(commit_codes(&r), vec![("t2".into(), 0, 0)]);
    // Written at value version 1, the one with an expire timestamp (and no leader epoch).
    let recs = records_of(&s, &mem, "old-client");
    match &recs[0] {
        CoordinatorRecord::OffsetCommit(_, Some((1, v))) => {
            assert_eq!(v.expire_timestamp, v.commit_timestamp + 5_000);
        }
        other => panic!("not an OffsetCommit v1 record: {other:?}"),
    }
    tokio::time::sleep(Duration::from_millis(4_000)).await;
    assert_eq!(offset_of(&s, "old-client", "t2", 0).await, 3);
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert_eq!(offset_of(&s, "old-client", "t2", 0).await, -1);
}

#[tokio::test(start_paused = true)]
async fn expiry_starts_again_after_a_reload() {
    let mem = strom_group_coordinator::testing::MemPartitions::new();
    let all: Vec<i32> = (0..PARTITIONS).collect();
    let clock = std::sync::Arc::new(strom_coordinator_common::timer::TokioClock::new());
    {
        let s = service_on_clock(&mem, retention_config(), &all, clock.clone()).await;
        s.offset_commit(&ctx(8), commit_req("g", &[("t1", &[(2, 8, -1, None)])]))
            .await;
    }
    tokio::time::sleep(Duration::from_millis(20_000)).await;
    let s = service_on_clock(&mem, retention_config(), &all, clock).await;
    assert_eq!(
        offset_of(&s, "g", "t1", 2).await,
        8,
        "loaded with its commit timestamp"
    );
    // Counted from the commit, not from the load.
    tokio::time::sleep(Duration::from_millis(42_000)).await;
    assert_eq!(offset_of(&s, "g", "t1", 2).await, -1);
}

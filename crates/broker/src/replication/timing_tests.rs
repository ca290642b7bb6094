//! Deterministic tests of the time-driven replication rules: ISR shrink and expand, the HW
//! while an AlterPartition is pending, and the acks=all purgatory. Time is either passed in
//! (`now_ms`, as Kafka passes `currentTimeMs`) or tokio's paused clock, never the wall clock,
//! so boundaries can be checked to the millisecond without sleeping.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use strom_protocol::ErrorCode;
use strom_storage::{AppendOrigin, LogConfig, UnifiedLog};
use tokio::time::Instant;
use uuid::Uuid;

use super::{wait_for_acks, AckResult, AlterPartitionProposal, LeaderAndIsr};
use crate::partition::{DelayedOperations, Partition};
use crate::replica_manager::ReplicaManager;

const LAG: i64 = 10_000;
/// A wall-clock-like start, far from 0 so that "last caught up at 0" is long ago.
const T0: i64 = 1_700_000_000_000;

type Proposals = Arc<Mutex<Vec<AlterPartitionProposal>>>;

fn batch(n: usize) -> Vec<u8> {
    strom_protocol::testing::value_batch(n, 1_700_000_000_000)
}

fn registration(partition_epoch: i32, replicas: &[i32], isr: &[i32]) -> LeaderAndIsr {
    LeaderAndIsr {
        leader: 1,
        leader_epoch: 1,
        partition_epoch,
        replicas: replicas.to_vec(),
        isr: isr.to_vec(),
    }
}

/// Broker 1 leads `t-0` (leader epoch 1) with `log_records` already in its log and HW 0,
/// `replica.lag.time.max.ms` = [`LAG`]; proposed ISR changes are collected.
fn leader(
    dir: &tempfile::TempDir,
    log_records: usize,
    replicas: &[i32],
    isr: &[i32],
    now_ms: i64,
) -> (Arc<Partition>, Proposals) {
    leader_sharing(dir, Arc::default(), log_records, replicas, isr, now_ms)
}

/// [`leader`] with the purgatories given (partitions of one replica manager share them).
fn leader_sharing(
    dir: &tempfile::TempDir,
    delayed: Arc<DelayedOperations>,
    log_records: usize,
    replicas: &[i32],
    isr: &[i32],
    now_ms: i64,
) -> (Arc<Partition>, Proposals) {
    let mut log = UnifiedLog::open(&dir.path().join("t-0"), LogConfig::default(), 0, true).unwrap();
    if log_records > 0 {
        log.append_as_leader(&batch(log_records), 0, AppendOrigin::Client, now_ms)
            .unwrap();
    }
    let p = Arc::new(
        Partition::new("t".into(), Uuid::nil(), 0, 1, log, 0).with_delayed_operations(delayed),
    );
    p.set_replica_lag_time_max_ms(LAG);
    let proposals: Proposals = Arc::default();
    let sink = proposals.clone();
    p.set_alter_partition_sender(Arc::new(move |pr: AlterPartitionProposal| {
        sink.lock().push(pr)
    }));
    p.apply_leader_and_isr(&registration(1, replicas, isr), now_ms);
    (p, proposals)
}

fn append(p: &Partition, n: usize, now_ms: i64) {
    p.append_records_to_leader(&batch(n), AppendOrigin::Client, 1, p.leader_epoch(), now_ms)
        .unwrap();
}

fn isr_proposals(proposals: &Proposals) -> Vec<Vec<i32>> {
    proposals.lock().iter().map(|p| p.new_isr.clone()).collect()
}

/// Kafka's `isFollowerOutOfSync`: a follower is removed once `now - lastCaughtUpTimeMs`
/// exceeds `replica.lag.time.max.ms`, not when it equals it. Follower 3 last caught up when
/// broker 1 became leader (T0); follower 2 keeps fetching.
#[test]
fn isr_shrink_removes_a_follower_just_after_the_lag_time() {
    let dir = tempfile::tempdir().unwrap();
    let (p, proposals) = leader(&dir, 0, &[1, 2, 3], &[1, 2, 3], T0);
    append(&p, 10, T0 + 1);
    assert!(p.update_follower_fetch_state(2, 10, 0, T0 + 100, 10, -1));
    assert!(p.update_follower_fetch_state(3, 4, 0, T0 + 100, 10, -1));
    append(&p, 10, T0 + 200);
    assert!(p.update_follower_fetch_state(2, 20, 0, T0 + 9_000, 20, -1));

    assert_eq!(p.maybe_shrink_isr(T0 + LAG), None, "exactly at the limit");
    assert!(proposals.lock().is_empty());
    let shrink = p
        .maybe_shrink_isr(T0 + LAG + 1)
        .expect("1 ms past the limit");
    assert_eq!(shrink.new_isr, vec![1, 2]);
    assert_eq!(shrink.partition_epoch, 1);
    assert_eq!(isr_proposals(&proposals), vec![vec![1, 2]]);

    // In flight: the committed ISR still holds the HW at follower 3, and no second proposal.
    assert_eq!(p.isr(), vec![1, 2, 3]);
    assert_eq!(p.high_watermark(), 4);
    assert_eq!(p.maybe_shrink_isr(T0 + 3 * LAG), None);
    // Committed: the HW moves to follower 2's LEO at once.
    p.apply_leader_and_isr(&registration(2, &[1, 2, 3], &[1, 2]), T0 + LAG + 2);
    assert_eq!(p.isr(), vec![1, 2]);
    assert_eq!(p.high_watermark(), 20);
    // Follower 2 last caught up at T0 + 9000 (a follower at the leader's LEO is never out).
    assert_eq!(p.maybe_shrink_isr(T0 + 9 * LAG), None);
    append(&p, 10, T0 + LAG + 3);
    assert_eq!(p.maybe_shrink_isr(T0 + 9_000 + LAG), None);
    assert!(p.maybe_shrink_isr(T0 + 9_000 + LAG + 1).is_some());
}

/// Kafka's `lastCaughtUpTimeMs` rules keep a follower that is never exactly at the leader's
/// LEO but always fetches what the leader had at its previous fetch; and a follower at the
/// leader's LEO stays however long ago it fetched (an idle partition shrinks nothing).
#[test]
fn isr_shrink_keeps_followers_that_caught_up_within_the_lag_time() {
    let dir = tempfile::tempdir().unwrap();
    let (p, proposals) = leader(&dir, 0, &[1, 2, 3], &[1, 2, 3], T0);
    let mut now = T0;
    let mut leo_at_previous_fetch = 0;
    // 100 s of traffic: an append every 100 ms; both followers fetch every 500 ms, always one
    // fetch behind the leader's end.
    for step in 1..=1_000 {
        now = T0 + step * 100;
        append(&p, 1, now);
        if step % 5 == 0 {
            let leo = p.log_end_offset();
            for f in [2, 3] {
                p.update_follower_fetch_state(f, leo_at_previous_fetch, 0, now, leo, -1);
            }
            leo_at_previous_fetch = leo;
        }
        if step % 50 == 0 {
            assert_eq!(p.maybe_shrink_isr(now), None, "at {}", now - T0);
        }
    }
    assert!(proposals.lock().is_empty());
    // Both catch up fully, then the partition goes idle for ten lag times.
    let leo = p.log_end_offset();
    p.update_follower_fetch_state(2, leo, 0, now, leo, -1);
    p.update_follower_fetch_state(3, leo, 0, now, leo, -1);
    assert_eq!(p.high_watermark(), leo);
    assert_eq!(p.maybe_shrink_isr(now + 10 * LAG), None);
    // One append: neither follower has it, and both last caught up at `now`.
    append(&p, 1, now + 10 * LAG);
    assert_eq!(p.maybe_shrink_isr(now + 10 * LAG + 1), Some(shrink_all(&p)));
}

fn shrink_all(p: &Partition) -> AlterPartitionProposal {
    AlterPartitionProposal {
        topic: "t".into(),
        topic_id: Uuid::nil(),
        partition: 0,
        leader_id: 1,
        leader_epoch: p.leader_epoch(),
        partition_epoch: 1,
        new_isr: vec![1],
        new_isr_broker_epochs: vec![-1],
    }
}

/// The shrink pass runs every `replica.lag.time.max.ms / 2` on tokio's clock (paused here): a
/// follower that stops fetching right after catching up is still in at the tick on its lag
/// limit and out at the next one, 1.5 x the lag time later.
#[tokio::test(start_paused = true)]
async fn isr_shrink_pass_every_half_lag_time() {
    let dir = tempfile::tempdir().unwrap();
    let start = Instant::now();
    let clock = move || T0 + start.elapsed().as_millis() as i64;
    let (p, proposals) = leader(&dir, 0, &[1, 2, 3], &[1, 2, 3], clock());
    append(&p, 5, clock());
    p.update_follower_fetch_state(2, 5, 0, clock(), 5, -1);
    p.update_follower_fetch_state(3, 5, 0, clock(), 5, -1);
    append(&p, 5, clock());

    let mut checks = tokio::time::interval(ReplicaManager::isr_shrink_interval(LAG));
    checks.tick().await; // the immediate first tick, skipped as in the broker's chores
    let removed_at = loop {
        checks.tick().await;
        // Follower 2 keeps up; follower 3 never fetches again.
        let leo = p.log_end_offset();
        p.update_follower_fetch_state(2, leo, 0, clock(), leo, -1);
        if p.maybe_shrink_isr(clock()).is_some() {
            break start.elapsed();
        }
        assert!(start.elapsed() < Duration::from_secs(60), "never shrunk");
    };
    assert_eq!(removed_at, Duration::from_millis(LAG as u64 * 3 / 2));
    assert_eq!(isr_proposals(&proposals), vec![vec![1, 2]]);
}

/// Kafka's `isFollowerInSync` for ISR expansion: LEO >= HW and >= the leader epoch's start
/// offset, checked on each follower fetch; while the expansion is pending the new member
/// already bounds the HW (maximal ISR).
#[test]
fn isr_expand_needs_the_hw_and_the_leader_epoch_start() {
    let dir = tempfile::tempdir().unwrap();
    // The epoch starts at offset 10; follower 3 (in the ISR, not fetched yet) holds the HW at 0.
    let (p, proposals) = leader(&dir, 10, &[1, 2, 3], &[1, 3], T0);
    assert_eq!(p.high_watermark(), 0);
    p.update_follower_fetch_state(2, 5, 0, T0 + 1, 10, -1);
    assert!(
        proposals.lock().is_empty(),
        "LEO >= HW but below the epoch start"
    );
    append(&p, 10, T0 + 2);
    p.update_follower_fetch_state(3, 20, 0, T0 + 3, 20, -1);
    assert_eq!(p.high_watermark(), 20);
    p.update_follower_fetch_state(2, 15, 0, T0 + 4, 20, -1);
    assert!(
        proposals.lock().is_empty(),
        "past the epoch start but below the HW"
    );
    p.update_follower_fetch_state(2, 20, 0, T0 + 5, 20, -1);
    assert_eq!(isr_proposals(&proposals), vec![vec![1, 3, 2]]);
    assert_eq!(p.isr(), vec![1, 3], "pending until committed");

    // Pending expansion: follower 2 bounds the HW even once it is no longer caught up.
    append(&p, 10, T0 + 6);
    p.update_follower_fetch_state(3, 30, 0, T0 + 6, 30, -1);
    assert_eq!(p.high_watermark(), 20);
    p.update_follower_fetch_state(3, 30, 0, T0 + 5 * LAG, 30, -1);
    assert_eq!(
        p.high_watermark(),
        20,
        "maximal ISR holds the HW at follower 2"
    );
    p.update_follower_fetch_state(2, 30, 0, T0 + 5 * LAG, 30, -1);
    assert_eq!(p.high_watermark(), 30);
    p.apply_leader_and_isr(&registration(2, &[1, 2, 3], &[1, 3, 2]), T0 + 5 * LAG);
    assert_eq!(p.isr(), vec![1, 3, 2]);
    assert_eq!(
        proposals.lock().len(),
        1,
        "no proposal while pending or once in"
    );
}

/// A follower outside the ISR holds the HW only while it is caught up (Kafka's
/// `shouldWaitForReplicaToJoinIsr`), to the millisecond.
#[test]
fn hw_waits_for_a_joining_follower_only_within_the_lag_time() {
    let dir = tempfile::tempdir().unwrap();
    let (p, proposals) = leader(&dir, 0, &[1, 2], &[1], T0);
    append(&p, 10, T0);
    assert_eq!(p.high_watermark(), 10);
    p.update_follower_fetch_state(2, 10, 0, T0, 10, -1);
    // It may join; the controller refuses, so only the caught-up rule keeps it counted.
    assert_eq!(isr_proposals(&proposals), vec![vec![1, 2]]);
    p.alter_partition_failed(1);
    append(&p, 10, T0 + LAG);
    assert_eq!(p.high_watermark(), 10, "caught up at T0: waited for");
    append(&p, 10, T0 + LAG + 1);
    assert_eq!(
        p.high_watermark(),
        30,
        "lagging past the limit: not waited for"
    );
}

/// acks=all in the purgatory: completes on the follower fetch that moves the HW past the
/// batch, with no time passing (woken, not polled).
#[tokio::test(start_paused = true)]
async fn acks_all_completes_on_the_follower_fetch_that_moves_the_hw() {
    let dir = tempfile::tempdir().unwrap();
    let (p, _) = leader(&dir, 0, &[1, 2], &[1, 2], T0);
    append(&p, 5, T0);
    let start = Instant::now();
    let waiting = tokio::spawn({
        let p = p.clone();
        async move { wait_for_acks(&[(p, 5)], Duration::from_secs(30)).await }
    });
    settle().await;
    assert!(!waiting.is_finished());
    p.update_follower_fetch_state(2, 3, 0, T0 + 1, 5, -1);
    settle().await;
    assert_eq!(p.high_watermark(), 3);
    assert!(!waiting.is_finished(), "HW below the batch end");
    p.update_follower_fetch_state(2, 5, 0, T0 + 2, 5, -1);
    settle().await;
    assert!(waiting.is_finished());
    assert_eq!(waiting.await.unwrap(), vec![AckResult::Done]);
    assert_eq!(start.elapsed(), Duration::ZERO);
}

/// acks=all times out with REQUEST_TIMED_OUT exactly at the request timeout, not before.
#[tokio::test(start_paused = true)]
async fn acks_all_times_out_exactly_at_the_request_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let (p, _) = leader(&dir, 0, &[1, 2], &[1, 2], T0);
    append(&p, 5, T0);
    let waiting = tokio::spawn({
        let p = p.clone();
        async move { wait_for_acks(&[(p, 5)], Duration::from_millis(1_500)).await }
    });
    settle().await;
    tokio::time::advance(Duration::from_millis(1_499)).await;
    settle().await;
    assert!(!waiting.is_finished(), "1 ms before the timeout");
    // A fetch that does not reach the batch end changes nothing.
    p.update_follower_fetch_state(2, 4, 0, T0 + 1_499, 5, -1);
    settle().await;
    assert!(!waiting.is_finished());
    tokio::time::advance(Duration::from_millis(1)).await;
    settle().await;
    assert!(waiting.is_finished(), "at the timeout");
    assert_eq!(
        waiting.await.unwrap(),
        vec![AckResult::Error(ErrorCode::RequestTimedOut)]
    );
}

/// A produce to two partitions completes per partition: one done by its follower, the other
/// timed out, results in request order.
#[tokio::test(start_paused = true)]
async fn acks_all_over_two_partitions_times_out_only_the_lagging_one() {
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let delayed: Arc<DelayedOperations> = Arc::default();
    let (a, _) = leader_sharing(&d1, delayed.clone(), 0, &[1, 2], &[1, 2], T0);
    let (b, _) = leader_sharing(&d2, delayed, 0, &[1, 2], &[1, 2], T0);
    append(&a, 2, T0);
    append(&b, 2, T0);
    let start = Instant::now();
    let waiting = tokio::spawn({
        let (a, b) = (a.clone(), b.clone());
        async move { wait_for_acks(&[(a, 2), (b, 2)], Duration::from_secs(5)).await }
    });
    settle().await;
    b.update_follower_fetch_state(2, 2, 0, T0 + 1, 2, -1);
    settle().await;
    assert!(!waiting.is_finished());
    let results = waiting.await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(5));
    assert_eq!(
        results,
        vec![
            AckResult::Error(ErrorCode::RequestTimedOut),
            AckResult::Done
        ]
    );
}

/// Lets spawned tasks run without letting paused time auto-advance.
async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

//! Leadership and appends under one lock: an append carries the leader epoch its caller checked
//! and is refused, with nothing written, when leadership moved in between (defect 1 of issue 9).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use strom_protocol::batch::BatchIter;
use strom_storage::{AppendOrigin, LogConfig, UnifiedLog};
use uuid::Uuid;

use super::{Partition, PartitionError};
use crate::replication::LeaderAndIsr;

const ME: i32 = 1;

/// Appended at time 0 below: its timestamp is within `message.timestamp.after.max.ms` of it.
fn batch() -> Vec<u8> {
    strom_protocol::testing::value_batch(1, 0)
}

fn reg(leader: i32, leader_epoch: i32) -> LeaderAndIsr {
    LeaderAndIsr {
        leader,
        leader_epoch,
        partition_epoch: leader_epoch,
        replicas: vec![1, 2],
        isr: vec![1, 2],
    }
}

fn partition(dir: &tempfile::TempDir) -> Partition {
    let log = UnifiedLog::open(&dir.path().join("t-0"), LogConfig::default(), 0, true).unwrap();
    let p = Partition::new("t".into(), Uuid::nil(), 0, ME, log, 0);
    p.apply_leader_and_isr(&reg(ME, 1), 0);
    p
}

/// The epochs stamped into the log's batches, in order.
fn batch_epochs(p: &Partition) -> Vec<i32> {
    p.with_log(|log| {
        let data = log
            .read(0, usize::MAX / 2, log.log_end_offset(), false)
            .unwrap();
        BatchIter::new(&data.records)
            .map(|b| b.unwrap().partition_leader_epoch())
            .collect()
    })
}

#[test]
fn a_deposed_leader_refuses_an_append_checked_as_leader() {
    let dir = tempfile::tempdir().unwrap();
    let p = partition(&dir);
    // The produce handler's check...
    let checked = p.leader_epoch_if_leader().unwrap();
    assert_eq!(checked, 1);
    // ...then broker 2 takes over in epoch 2 before the append runs.
    p.apply_leader_and_isr(&reg(2, 2), 0);
    let r = p.append_records_to_leader(&batch(), AppendOrigin::Client, 1, checked, 0);
    assert!(
        matches!(r, Err(PartitionError::NotLeaderOrFollower { .. })),
        "{r:?}"
    );
    assert_eq!(p.log_end_offset(), 0, "nothing reached the log");
    assert_eq!(p.latest_epoch(), None);
    // A new check answers NOT_LEADER_OR_FOLLOWER at once.
    assert!(matches!(
        p.leader_epoch_if_leader(),
        Err(PartitionError::NotLeaderOrFollower { .. })
    ));
}

#[test]
fn an_append_checked_in_an_older_epoch_is_fenced_even_if_still_leader() {
    let dir = tempfile::tempdir().unwrap();
    let p = partition(&dir);
    // A coordinator loaded its state in epoch 1; leadership went away and came back (epoch 3).
    let loaded_in = p.leader_epoch_if_leader().unwrap();
    p.apply_leader_and_isr(&reg(2, 2), 0);
    p.apply_leader_and_isr(&reg(ME, 3), 0);
    let r = p.append_records_to_leader(&batch(), AppendOrigin::Coordinator, 1, loaded_in, 0);
    assert!(
        matches!(
            r,
            Err(PartitionError::FencedLeaderEpoch {
                requested: 1,
                current: 3
            })
        ),
        "{r:?}"
    );
    assert_eq!(
        r.unwrap_err().error_code(),
        strom_protocol::ErrorCode::FencedLeaderEpoch
    );
    // An epoch this replica has not seen yet is UNKNOWN_LEADER_EPOCH.
    let r = p.append_records_to_leader(&batch(), AppendOrigin::Client, 1, 4, 0);
    assert!(matches!(r, Err(PartitionError::UnknownLeaderEpoch { .. })));
    assert_eq!(p.log_end_offset(), 0);
    // Checked in the current epoch: appended, stamped with it.
    p.append_records_to_leader(&batch(), AppendOrigin::Client, 1, 3, 0)
        .unwrap();
    assert_eq!(batch_epochs(&p), vec![3]);
}

#[test]
fn acks_all_below_min_isr_is_refused_with_nothing_written() {
    let dir = tempfile::tempdir().unwrap();
    let p = partition(&dir);
    p.set_min_insync_replicas(2);
    p.apply_leader_and_isr(
        &LeaderAndIsr {
            isr: vec![1],
            ..reg(ME, 1)
        },
        0,
    );
    let r = p.append_records_to_leader(&batch(), AppendOrigin::Client, -1, 1, 0);
    assert!(
        matches!(r, Err(PartitionError::NotEnoughReplicas(_))),
        "{r:?}"
    );
    assert_eq!(p.log_end_offset(), 0);
    // acks=1 is not held to min.insync.replicas.
    p.append_records_to_leader(&batch(), AppendOrigin::Client, 1, 1, 0)
        .unwrap();
    assert_eq!(p.log_end_offset(), 1);
}

/// Leadership flips between this broker (odd epochs) and broker 2 (even epochs) while another
/// thread checks and appends as fast as it can: every batch that reaches the log carries an
/// epoch in which this broker led, and the one it was checked in.
#[test]
fn racing_leadership_changes_never_stamp_a_foreign_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let p = Arc::new(partition(&dir));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (p, stop) = (p.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut appended = Vec::new();
            while !stop.load(Ordering::Acquire) {
                let Ok(epoch) = p.leader_epoch_if_leader() else {
                    continue;
                };
                std::thread::yield_now();
                if p.append_records_to_leader(&batch(), AppendOrigin::Client, 1, epoch, 0)
                    .is_ok()
                {
                    appended.push(epoch);
                }
            }
            appended
        })
    };
    for epoch in 2..=400 {
        let leader = if epoch % 2 == 1 { ME } else { 2 };
        p.apply_leader_and_isr(&reg(leader, epoch), 0);
        std::thread::yield_now();
    }
    stop.store(true, Ordering::Release);
    let appended = writer.join().unwrap();
    let stamped = batch_epochs(&p);
    assert_eq!(
        stamped, appended,
        "each batch carries the epoch it was checked in"
    );
    assert!(stamped.iter().all(|e| e % 2 == 1), "{stamped:?}");
}

/// This broker took over while its fetcher still had an answer of the previous leader in
/// flight: applying it must not touch the new leader's log.
#[test]
fn a_new_leader_takes_nothing_from_a_stale_fetch_answer() {
    let dir = tempfile::tempdir().unwrap();
    let p = partition(&dir);
    p.apply_leader_and_isr(&reg(2, 2), 0);
    p.append_records_to_follower(&batch(), 0).unwrap();
    p.update_follower_high_watermark(1);
    p.apply_leader_and_isr(&reg(ME, 3), 0);
    let refused = |r: Result<(), PartitionError>| {
        assert!(
            matches!(r, Err(PartitionError::NotLeaderOrFollower { .. })),
            "{r:?}"
        )
    };
    refused(p.append_records_to_follower(&batch(), 0).map(|_| ()));
    refused(p.truncate_to(0));
    refused(p.truncate_fully_and_start_at(5));
    refused(p.follower_maybe_increment_log_start_offset(1));
    assert_eq!(p.update_follower_high_watermark(0), 1);
    assert_eq!((p.log_start_offset(), p.log_end_offset()), (0, 1));
    assert_eq!(p.high_watermark(), 1);
}

/// One transactional record of producer `pid`, epoch 0.
fn txn_batch(pid: i64) -> Vec<u8> {
    use strom_protocol::records::{
        Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };
    let record = Record {
        transactional: true,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: -1,
        producer_id: pid,
        producer_epoch: 0,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence: 0,
        timestamp: 0,
        key: None,
        value: Some(bytes::Bytes::from_static(b"v")),
        headers: Default::default(),
    };
    let mut buf = Vec::new();
    RecordBatchEncoder::encode(
        &mut buf,
        [&record],
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .unwrap();
    buf
}

#[test]
fn the_lso_moves_with_the_hw_and_read_committed_reads_below_it() {
    use super::{FetchIsolation, PartitionFetch};
    use strom_protocol::memory_records::{end_txn_marker, TxnResult};
    let dir = tempfile::tempdir().unwrap();
    let log = UnifiedLog::open(&dir.path().join("t-0"), LogConfig::default(), 0, true).unwrap();
    let p = Partition::new("t".into(), Uuid::nil(), 0, ME, log, 0);
    // Alone in the ISR: the HW follows every append.
    p.apply_leader_and_isr(
        &LeaderAndIsr {
            leader: ME,
            leader_epoch: 1,
            partition_epoch: 1,
            replicas: vec![ME],
            isr: vec![ME],
        },
        0,
    );
    p.append_records_to_leader(&txn_batch(7), AppendOrigin::Client, -1, 1, 0)
        .unwrap();
    let at = p.offset_snapshot();
    assert_eq!((at.high_watermark, at.last_stable_offset), (1, 0));
    let fetch = PartitionFetch {
        fetch_offset: 0,
        current_leader_epoch: None,
        last_fetched_epoch: None,
        log_start_offset: -1,
        max_bytes: 1 << 20,
    };
    let read = |isolation| {
        p.fetch_records(None, -1, isolation, &fetch, 1 << 20, true, true, 0)
            .unwrap()
    };
    let rc = read(FetchIsolation::TxnCommitted);
    assert!(rc.records.is_empty());
    assert_eq!(rc.aborted_transactions, Some(vec![]));
    assert_eq!(
        read(FetchIsolation::HighWatermark).aborted_transactions,
        None
    );
    // A waiting read_committed fetch that saw the LSO at 0 is not due until it moves.
    assert!(!p.fetch_may_complete(FetchIsolation::TxnCommitted, &fetch, true, 0));
    let abort = end_txn_marker(7, 0, 0, TxnResult::Abort, 1);
    p.append_records_to_leader(&abort, AppendOrigin::Coordinator, -1, 1, 0)
        .unwrap();
    assert_eq!(p.last_stable_offset(), 2);
    assert!(p.fetch_may_complete(FetchIsolation::TxnCommitted, &fetch, true, 0));
    let rc = read(FetchIsolation::TxnCommitted);
    assert_eq!(rc.last_stable_offset, 2);
    assert_eq!(
        rc.aborted_transactions
            .unwrap()
            .iter()
            .map(|t| (t.producer_id, t.first_offset))
            .collect::<Vec<_>>(),
        vec![(7, 0)]
    );
}

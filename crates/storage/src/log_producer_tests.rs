//! Producer state through the log: duplicates, gaps, snapshots, recovery.

use super::*;
use bytes::Bytes;
use strom_protocol::ErrorCode;

fn idempotent(pid: i64, epoch: i16, first_seq: i32, n: usize) -> Vec<u8> {
    let records: Vec<Record> = (0..n)
        .map(|i| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: pid,
            producer_epoch: epoch,
            timestamp_type: RecordTs::Creation,
            offset: i as i64,
            sequence: first_seq + i as i32,
            timestamp: T0 + i as i64,
            key: None,
            value: Some(Bytes::from_static(b"v")),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .unwrap();
    buf.to_vec()
}

/// The test timestamps are years old: keep their producers from expiring on load.
fn config() -> LogConfig {
    LogConfig {
        producer_id_expiration_ms: i64::MAX / 2,
        ..LogConfig::default()
    }
}

fn try_append(log: &mut UnifiedLog, b: &[u8]) -> Result<LogAppendInfo, StorageError> {
    log.append_as_leader(b, 0, AppendOrigin::Client, T0)
}

#[test]
fn retried_batches_return_original_offsets_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), config());
    let batches: Vec<Vec<u8>> = (0..6).map(|i| idempotent(42, 0, i * 2, 2)).collect();
    for b in &batches {
        try_append(&mut log, b).unwrap();
    }
    let leo = log.log_end_offset();
    let size = log.size_in_bytes();
    // Each of the last five is answered with where it went; the sixth-oldest is out of order.
    for (i, b) in batches.iter().enumerate().skip(1) {
        let info = try_append(&mut log, b).unwrap();
        assert_eq!(
            (info.first_offset, info.last_offset),
            (i as i64 * 2, i as i64 * 2 + 1)
        );
    }
    assert!(matches!(
        try_append(&mut log, &batches[0]),
        Err(StorageError::OutOfOrderSequence(_))
    ));
    assert_eq!((log.log_end_offset(), log.size_in_bytes()), (leo, size));
    // A gap.
    let gap = idempotent(42, 0, 13, 1);
    let err = try_append(&mut log, &gap).unwrap_err();
    assert_eq!(err.error_code(), ErrorCode::OutOfOrderSequenceNumber);
    // An older epoch after a newer one.
    try_append(&mut log, &idempotent(42, 1, 0, 1)).unwrap();
    let err = try_append(&mut log, &idempotent(42, 0, 12, 1)).unwrap_err();
    assert_eq!(err.error_code(), ErrorCode::InvalidProducerEpoch);
}

#[test]
fn state_survives_clean_and_unclean_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let b0 = idempotent(5, 0, 0, 3);
    let b1 = idempotent(5, 0, 3, 3);
    {
        let mut log = open(dir.path(), config());
        try_append(&mut log, &b0).unwrap();
        try_append(&mut log, &b1).unwrap();
        log.close().unwrap();
    }
    assert!(dir.path().join("00000000000000000006.snapshot").exists());
    {
        let mut log = open(dir.path(), config());
        assert_eq!(log.producer_state().producers()[&5].batches.len(), 2);
        assert_eq!(try_append(&mut log, &b0).unwrap().first_offset, 0);
        assert_eq!(try_append(&mut log, &b1).unwrap().first_offset, 3);
        try_append(&mut log, &idempotent(5, 0, 6, 1)).unwrap();
        // No close: a crash. The state past the snapshot is replayed from the log.
    }
    let mut log = UnifiedLog::open(dir.path(), config(), 0, false).unwrap();
    assert_eq!(log.log_end_offset(), 7);
    let info = try_append(&mut log, &idempotent(5, 0, 6, 1)).unwrap();
    assert_eq!(info.first_offset, 6);
    assert!(try_append(&mut log, &idempotent(5, 0, 8, 1)).is_err());
    try_append(&mut log, &idempotent(5, 0, 7, 1)).unwrap();
    assert_eq!(log.log_end_offset(), 8);
}

#[test]
fn state_rebuilt_without_any_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut log = open(dir.path(), config());
        for i in 0..4 {
            try_append(&mut log, &idempotent(9, 0, i, 1)).unwrap();
        }
        log.close().unwrap();
    }
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "snapshot") {
            std::fs::remove_file(p).unwrap();
        }
    }
    let mut log = open(dir.path(), config());
    assert_eq!(
        try_append(&mut log, &idempotent(9, 0, 2, 1))
            .unwrap()
            .first_offset,
        2
    );
    assert_eq!(log.producer_state().producers()[&9].batches.len(), 4);
}

#[test]
fn snapshots_at_roll_and_deleted_with_segments() {
    let dir = tempfile::tempdir().unwrap();
    let one = idempotent(1, 0, 0, 1);
    let cfg = LogConfig {
        segment_bytes: one.len() as u64 * 2,
        retention_bytes: one.len() as i64 * 2,
        ..config()
    };
    let mut log = open(dir.path(), cfg);
    for i in 0..6 {
        try_append(&mut log, &idempotent(1, 0, i, 1)).unwrap();
    }
    let snaps = log.producer_state().snapshot_offsets();
    assert_eq!(snaps, vec![2, 4]);
    assert!(dir.path().join("00000000000000000002.snapshot").exists());
    log.delete_old_segments(T0).unwrap();
    assert_eq!(log.log_start_offset(), 4);
    assert_eq!(log.producer_state().snapshot_offsets(), vec![4]);
    assert!(!dir.path().join("00000000000000000002.snapshot").exists());
    // Producer state outlives the segments it came from.
    assert_eq!(
        try_append(&mut log, &idempotent(1, 0, 5, 1))
            .unwrap()
            .first_offset,
        5
    );
}

#[test]
fn truncation_rewinds_producer_state() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), config());
    for i in 0..4 {
        try_append(&mut log, &idempotent(3, 0, i, 1)).unwrap();
    }
    log.truncate_to(2).unwrap();
    assert_eq!(log.producer_state().producers()[&3].last_seq(), 1);
    try_append(&mut log, &idempotent(3, 0, 2, 1)).unwrap();
}

#[test]
fn follower_append_tracks_state_without_checks() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), config());
    let mut b = idempotent(8, 0, 10, 2);
    strom_protocol::batch::set_base_offset(&mut b, 0);
    log.append_as_follower(&b, T0).unwrap();
    assert_eq!(log.producer_state().producers()[&8].last_seq(), 11);
}

#[test]
fn leader_epochs_are_checkpointed_truncated_and_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), config());
    for (epoch, n) in [(3, 2), (3, 1), (5, 2), (8, 1)] {
        log.append_as_leader(&idempotent(-1, -1, -1, n), epoch, AppendOrigin::Client, T0)
            .unwrap();
    }
    assert_eq!(log.latest_epoch(), Some(8));
    assert_eq!(log.end_offset_for_epoch(3), (3, 3));
    assert_eq!(log.end_offset_for_epoch(4), (3, 3));
    assert_eq!(log.end_offset_for_epoch(5), (5, 5));
    assert_eq!(log.end_offset_for_epoch(8), (8, 6));
    assert_eq!(log.end_offset_for_epoch(9), (-1, -1));
    assert_eq!(log.end_offset_for_epoch(2), (2, 0));
    let path = dir.path().join("leader-epoch-checkpoint");
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "0\n3\n3 0\n5 3\n8 5\n"
    );
    log.truncate_to(5).unwrap();
    assert_eq!(log.latest_epoch(), Some(5));
    log.close().unwrap();
    drop(log);
    std::fs::remove_file(&path).unwrap();
    let log = open(dir.path(), config());
    assert_eq!(log.end_offset_for_epoch(3), (3, 3));
    assert_eq!(log.end_offset_for_epoch(5), (5, 5));
    assert_eq!(log.latest_epoch(), Some(5));
    assert!(path.exists());
}

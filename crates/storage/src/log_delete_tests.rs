//! `file.delete.delay.ms` (segments renamed `.deleted`, removed later) and `flush.ms`, with an
//! injected clock.

use super::*;

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".log") || n.contains("index"))
        .collect();
    v.sort();
    v
}

#[test]
fn removed_segments_are_renamed_and_deleted_after_the_delay() {
    let dir = tempfile::tempdir().unwrap();
    let b = batch(2);
    let config = LogConfig {
        segment_bytes: b.len() as u64,
        retention_bytes: b.len() as i64,
        retention_ms: -1,
        file_delete_delay_ms: 60_000,
        ..LogConfig::default()
    };
    let mut log = open(dir.path(), config);
    for _ in 0..3 {
        append(&mut log, &b);
    }
    let reader = log.reader();
    assert_eq!(log.delete_old_segments(T0).unwrap(), 2);
    let deleted: Vec<String> = names(dir.path())
        .into_iter()
        .filter(|n| n.ends_with(".deleted"))
        .collect();
    assert_eq!(
        deleted,
        [
            "00000000000000000000.index.deleted",
            "00000000000000000000.log.deleted",
            "00000000000000000000.timeindex.deleted",
            "00000000000000000002.index.deleted",
            "00000000000000000002.log.deleted",
            "00000000000000000002.timeindex.deleted",
        ]
    );
    assert_eq!(log.pending_deleted_files().len(), 6);
    // Retention's offsets are in force at once.
    assert!(reader.read(0, 100, i64::MAX, true).is_err());
    assert_eq!(log.delete_due_files(T0 + 59_999).unwrap(), 0);
    assert_eq!(log.delete_due_files(T0 + 60_000).unwrap(), 6);
    assert!(names(dir.path()).iter().all(|n| !n.ends_with(".deleted")));
    assert!(log.pending_deleted_files().is_empty());

    // Truncation goes the same way; what is left at a restart is removed at open.
    append(&mut log, &b);
    assert_eq!(log.num_segments(), 2);
    log.truncate_to(5).unwrap();
    assert_eq!(log.pending_deleted_files().len(), 3);
    log.close().unwrap();
    drop(log);
    assert!(names(dir.path()).iter().any(|n| n.ends_with(".deleted")));
    let log = UnifiedLog::open(dir.path(), LogConfig::default(), 4, true).unwrap();
    assert!(names(dir.path()).iter().all(|n| !n.ends_with(".deleted")));
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (4, 4));
}

#[test]
fn no_delay_deletes_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let b = batch(2);
    let config = LogConfig {
        segment_bytes: b.len() as u64,
        file_delete_delay_ms: 0,
        ..LogConfig::default()
    };
    let mut log = open(dir.path(), config);
    append(&mut log, &b);
    append(&mut log, &b);
    log.truncate_to(2).unwrap();
    assert!(log.pending_deleted_files().is_empty());
    assert_eq!(
        names(dir.path()),
        [
            "00000000000000000000.index",
            "00000000000000000000.log",
            "00000000000000000000.timeindex",
            "00000000000000000002.index",
            "00000000000000000002.log",
            "00000000000000000002.timeindex",
        ]
    );
}

#[test]
fn flush_ms_flushes_when_due() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        flush_ms: 1000,
        ..LogConfig::default()
    };
    let mut log = open(dir.path(), config);
    let opened = log.last_flush_ms();
    append(&mut log, &batch(3));
    assert_eq!(log.recovery_point(), 0);
    assert!(!log.flush_if_due(opened + 999).unwrap());
    assert_eq!(log.recovery_point(), 0);
    assert!(log.flush_if_due(opened + 1000).unwrap());
    assert_eq!(log.recovery_point(), 3);
    assert_eq!(log.last_flush_ms(), opened + 1000);
    append(&mut log, &batch(1));
    assert!(!log.flush_if_due(opened + 1999).unwrap());
    assert!(log.flush_if_due(opened + 2000).unwrap());
    assert_eq!(log.recovery_point(), 4);

    // Kafka's default (Long.MAX_VALUE) never flushes on time.
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), LogConfig::default());
    append(&mut log, &batch(1));
    assert!(!log.flush_if_due(i64::MAX).unwrap());
    assert_eq!(log.recovery_point(), 0);
}

#[test]
fn due_files_can_be_taken_and_removed_outside_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let b = batch(2);
    let config = LogConfig {
        segment_bytes: b.len() as u64,
        retention_bytes: b.len() as i64,
        retention_ms: -1,
        file_delete_delay_ms: 1_000,
        ..LogConfig::default()
    };
    let mut log = open(dir.path(), config);
    for _ in 0..2 {
        append(&mut log, &b);
    }
    assert_eq!(log.delete_old_segments(T0).unwrap(), 1);
    assert!(log.take_due_files(T0 + 999).is_empty());
    let due = log.take_due_files(T0 + 1_000);
    assert_eq!(due.len(), 3);
    assert!(log.pending_deleted_files().is_empty());
    assert!(due.iter().all(|p| p.exists()));
    crate::remove_deleted_files(&due).unwrap();
    assert!(names(dir.path()).iter().all(|n| !n.ends_with(".deleted")));
    // Removing again (already gone) is not an error.
    crate::remove_deleted_files(&due).unwrap();
}

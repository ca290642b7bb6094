//! Storage chores the broker runs on a timer (Kafka's `LogManager` scheduler tasks that are not
//! retention): `flush.ms` flushes and the removal of segment files renamed `.deleted` once
//! `file.delete.delay.ms` has passed. Also applies `strom.log.max.open.files`, the cap on the
//! segment files kept open by all logs together (see `strom_storage::file_cache`).

use strom_storage::FileCache;

use crate::config::BrokerConfig;
use crate::replica_manager::ReplicaManager;

/// Broker property: how many segment files (`.log`, `.index`, `.timeindex`) all logs may keep
/// open at once. Kafka has no such key (it keeps every file open); Strom's default is half the
/// process's soft open-files limit, read after the broker raised it to the hard limit.
pub const MAX_OPEN_FILES_KEY: &str = "strom.log.max.open.files";

/// Sets the process-wide file cap from `strom.log.max.open.files` if given. Call before logs are
/// opened; a later call closes whatever is over the new cap.
pub fn configure_file_cache(config: &BrokerConfig) {
    let cache = FileCache::global();
    match config
        .props
        .get(MAX_OPEN_FILES_KEY)
        .map(|v| v.trim().parse::<usize>())
    {
        Some(Ok(n)) => cache.set_capacity(n),
        Some(Err(_)) => {
            tracing::warn!(
                key = MAX_OPEN_FILES_KEY,
                "not a number; keeping the default"
            )
        }
        None => {}
    }
    tracing::info!(
        max_open_files = cache.capacity(),
        "segment files are opened on demand through a shared cache"
    );
}

impl ReplicaManager {
    /// Kafka's `LogManager.flushDirtyLogs`: flushes every log whose `flush.ms` has passed since
    /// its last flush. Run every `log.flush.scheduler.interval.ms`.
    pub fn flush_dirty_logs(&self, now_ms: i64) {
        for p in self.all() {
            if let Err(e) = p.with_log(|log| log.flush_if_due(now_ms)) {
                tracing::warn!(topic = %p.topic, partition = p.index, error = %e, "flush failed");
            }
        }
    }

    /// Removes segment files whose `file.delete.delay.ms` has passed since they left their log.
    /// The unlinking happens after each log's lock is released, so produce and fetch on that
    /// partition do not wait on the file system.
    pub fn delete_due_segment_files(&self, now_ms: i64) {
        for p in self.all() {
            let due = p.with_log(|log| log.take_due_files(now_ms));
            if due.is_empty() {
                continue;
            }
            if let Err(e) = strom_storage::remove_deleted_files(&due) {
                // They keep their `.deleted` name, so the next open of the log removes them.
                tracing::warn!(topic = %p.topic, partition = p.index, error = %e, "deleting old segment files failed");
            }
        }
    }
}

/// Period of a chore timer for a configured interval in ms: at least 1 ms, and at most a year
/// so Kafka's "never" (`Long.MAX_VALUE`, the default of `log.flush.scheduler.interval.ms`) does
/// not overflow the timer.
pub fn chore_period(interval_ms: u64) -> std::time::Duration {
    const YEAR_MS: u64 = 365 * 24 * 3_600_000;
    std::time::Duration::from_millis(interval_ms.clamp(1, YEAR_MS))
}

/// How often removal of `.deleted` files is checked. Kafka schedules each removal on its own
/// timer; a one-second sweep keeps the delay within a second of `file.delete.delay.ms`.
pub const DELETE_CHECK_PERIOD: std::time::Duration = std::time::Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn cfg(props: &[(&str, &str)]) -> BrokerConfig {
        BrokerConfig::new(
            1,
            "127.0.0.1:9092".parse().unwrap(),
            None,
            "/tmp/x".into(),
            props
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
        .unwrap()
    }

    #[test]
    fn flush_and_delete_delay_reach_the_log_config() {
        let c = cfg(&[]).log_config(&BTreeMap::new());
        assert_eq!((c.flush_ms, c.file_delete_delay_ms), (i64::MAX, 60_000));
        let c = cfg(&[
            ("log.flush.interval.ms", "5000"),
            ("log.segment.delete.delay.ms", "0"),
        ])
        .log_config(&BTreeMap::new());
        assert_eq!((c.flush_ms, c.file_delete_delay_ms), (5_000, 0));
        let overrides = BTreeMap::from([
            ("flush.ms".to_string(), "7".to_string()),
            ("file.delete.delay.ms".to_string(), "9".to_string()),
        ]);
        let c = cfg(&[("log.flush.interval.ms", "5000")]).log_config(&overrides);
        assert_eq!((c.flush_ms, c.file_delete_delay_ms), (7, 9));
        // As Kafka: without `log.flush.interval.ms`, the flusher's interval is the default.
        let c = cfg(&[("log.flush.scheduler.interval.ms", "2000")]).log_config(&BTreeMap::new());
        assert_eq!(c.flush_ms, 2_000);
    }

    #[test]
    fn chore_period_never_overflows() {
        assert_eq!(chore_period(0), std::time::Duration::from_millis(1));
        assert_eq!(chore_period(1000), std::time::Duration::from_secs(1));
        assert!(chore_period(i64::MAX as u64) <= std::time::Duration::from_secs(366 * 86_400));
    }
}

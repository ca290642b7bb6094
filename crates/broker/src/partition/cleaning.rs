//! What the log cleaner (`crate::log_cleaner`) asks of a partition: how dirty its log is, a
//! snapshot of what to clean, and the swap of each cleaned group. Each takes the log's lock only
//! for the moment it needs; the clean itself runs outside (`strom_storage::cleaner`), so appends
//! and fetches of the partition go on meanwhile.

use strom_storage::cleaner::{CleanTask, CleanedGroup, LogToClean};
use strom_storage::StorageError;

use super::Partition;

impl Partition {
    /// Whether `cleanup.policy` has `compact`.
    pub fn is_compacted(&self) -> bool {
        self.with_log(|log| log.config().compact)
    }

    /// Kafka's `cleanableOffsets` + `LogToClean` for this replica: nothing at or past its last
    /// stable offset (min of the first unstable offset and the HW, on a leader or a follower) is
    /// cleanable. `None` for a removed replica or a log that is not compacted.
    pub fn cleanable(&self, checkpointed: Option<i64>, now_ms: i64) -> Option<LogToClean> {
        let st = self.state.read();
        if st.removed {
            return None;
        }
        let log = self.lock_log(&st);
        let lso = log.last_stable_offset();
        log.log.cleanable(checkpointed, lso, now_ms)
    }

    /// The snapshot a clean works from, taken under the lock.
    pub fn prepare_clean(&self, to_clean: &LogToClean) -> CleanTask {
        self.with_log(|log| log.prepare_clean(to_clean))
    }

    /// Swaps one cleaned group into the log, unless the replica was removed; the log refuses
    /// it itself when its segments changed or it was truncated since the clean was prepared (a
    /// truncation may have cut records the group still holds). `Ok(false)`: not swapped (the
    /// group's files are deleted), the clean must stop.
    pub fn replace_cleaned(&self, group: CleanedGroup) -> Result<bool, StorageError> {
        let st = self.state.read();
        if st.removed {
            return Ok(false);
        }
        let mut log = self.lock_log(&st);
        let swapped = log.log.replace_segments(group)?;
        log.clamp_high_watermark();
        Ok(swapped)
    }
}

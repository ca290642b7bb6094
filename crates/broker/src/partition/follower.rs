//! The follower side of a partition (Kafka's `Partition.appendRecordsToFollowerOrFutureReplica`,
//! `truncateTo`, the follower's HW and log-start updates): what the replica fetcher applies from
//! the leader's answers, refused once this replica leads.

use strom_storage::{LogAppendInfo, StorageError};

use super::{Partition, PartitionError, PartitionState, Role};

impl Partition {
    /// The newest epoch in this replica's log (a follower's `last_fetched_epoch`).
    pub fn latest_epoch(&self) -> Option<i32> {
        let st = self.state.read();
        let epoch = self.lock_log(&st).log.latest_epoch();
        epoch
    }

    /// Kafka's `appendRecordsToFollowerOrFutureReplica`: batches as the leader wrote them. An
    /// empty log whose start falls inside the first batch restarts at that batch. A replica that
    /// leads refuses (a fetch answer from the previous leader, applied after this broker took
    /// over, must not reach its log).
    pub fn append_records_to_follower(
        &self,
        records: &[u8],
        now_ms: i64,
    ) -> Result<LogAppendInfo, PartitionError> {
        let info = {
            let st = self.state.read();
            self.check_follower(&st)?;
            let mut log = self.lock_log(&st);
            let info = match log.log.append_as_follower(records, now_ms) {
                Err(StorageError::UnexpectedAppendOffset {
                    first_offset,
                    log_end,
                }) if log_end == log.log.log_start_offset() && first_offset < log_end => {
                    log.log.truncate_fully_and_start_at(first_offset)?;
                    log.log.append_as_follower(records, now_ms)
                }
                other => other,
            };
            log.clamp_high_watermark();
            info?
        };
        self.delayed.fetch.check_and_complete(&self.key);
        Ok(info)
    }

    /// A replica that leads takes nothing from a fetch answer of the previous leader, applied
    /// after this broker took over (the fetcher is stopped only after the registration is
    /// applied): no follower append, truncation, HW or log-start change reaches a leader's log.
    fn check_follower(&self, st: &PartitionState) -> Result<(), PartitionError> {
        if st.removed {
            return Err(self.removed_error());
        }
        if st.role == Role::Leader {
            return Err(self.not_leader());
        }
        Ok(())
    }

    /// A follower takes the leader's HW, capped at its own LEO (Kafka's follower
    /// `updateHighWatermark`, which may also lower it). A leader keeps its own.
    pub fn update_follower_high_watermark(&self, leader_hw: i64) -> i64 {
        let st = self.state.read();
        let mut log = self.lock_log(&st);
        if st.role == Role::Leader {
            return log.high_watermark;
        }
        let hw = leader_hw
            .min(log.log.log_end_offset())
            .max(log.log.log_start_offset());
        log.set_high_watermark(hw);
        hw
    }

    /// A follower follows the leader's log start (DeleteRecords, retention) up to its own HW.
    pub fn follower_maybe_increment_log_start_offset(
        &self,
        leader_log_start: i64,
    ) -> Result<(), PartitionError> {
        let st = self.state.read();
        self.check_follower(&st)?;
        let mut log = self.lock_log(&st);
        if leader_log_start <= log.log.log_start_offset() || leader_log_start > log.high_watermark {
            return Ok(());
        }
        Ok(log.log.maybe_increment_log_start_offset(leader_log_start)?)
    }

    /// Truncates this follower's log to `offset` (divergence); the HW never exceeds the LEO.
    pub fn truncate_to(&self, offset: i64) -> Result<(), PartitionError> {
        let st = self.state.read();
        self.check_follower(&st)?;
        let mut log = self.lock_log(&st);
        log.log.truncate_to(offset)?;
        log.clamp_high_watermark();
        Ok(())
    }

    /// Empties this replica's log and restarts it at `offset` (behind the leader's log start).
    pub fn truncate_fully_and_start_at(&self, offset: i64) -> Result<(), PartitionError> {
        let st = self.state.read();
        self.check_follower(&st)?;
        let mut log = self.lock_log(&st);
        log.log.truncate_fully_and_start_at(offset)?;
        log.set_high_watermark(offset);
        Ok(())
    }
}

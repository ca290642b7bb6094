//! Reading a partition (Kafka's `Partition.fetchRecords` / `readRecords`): the leadership and
//! epoch checks, the offsets of one [`LogReadInfo`] taken at one point, the KIP-320 divergence
//! check, and the read itself, which goes through [`Partition::read_records`] only, so that it
//! can move to a lock-free log reader in one place.

use strom_storage::txn_index::AbortedTxn;
use strom_storage::{FileFetchDataInfo, FileRecords, StorageError};

use super::{LocalLog, Partition, PartitionError, PartitionState, Role};

/// How far a fetch may read (Kafka's `FetchIsolation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchIsolation {
    /// A follower: up to the log end.
    LogEnd,
    /// A consumer, read_uncommitted: up to the high watermark.
    HighWatermark,
    /// A consumer, read_committed: up to the last stable offset.
    TxnCommitted,
}

/// The leader's answer to a follower whose last fetched epoch diverges (KIP-320).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEndOffset {
    pub epoch: i32,
    pub end_offset: i64,
}

/// One partition of a fetch (Kafka's `FetchRequest.PartitionData` as the read needs it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionFetch {
    pub fetch_offset: i64,
    /// The fetcher's view of the leader epoch; `None`: unknown (old clients), not checked.
    pub current_leader_epoch: Option<i32>,
    /// A follower's newest epoch, for the divergence check; `None`: not checked.
    pub last_fetched_epoch: Option<i32>,
    /// A follower's log start offset (-1 from consumers).
    pub log_start_offset: i64,
    /// The request's `partition_max_bytes`, as sent (Kafka fails a read with a negative size).
    pub max_bytes: i32,
}

/// What a read returns (Kafka's `LogReadInfo`): the records, or where a follower's log
/// diverges, and the partition's offsets, all taken at one point before the read, so that the
/// HW never runs ahead of the LEO in one answer and appends after the read do not keep a
/// follower out of sync.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogReadInfo {
    /// Not read yet: ranges of segment files (a fetch response sends them from the files;
    /// [`FileRecords::read_all`] reads them into memory).
    pub records: FileRecords,
    pub diverging_epoch: Option<EpochEndOffset>,
    pub high_watermark: i64,
    /// The last stable offset: the HW until transactions exist, kept apart for them.
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    pub log_end_offset: i64,
    /// read_committed: the aborted transactions overlapping the records returned (Kafka's
    /// `abortedTransactions`); `None` for other isolations.
    pub aborted_transactions: Option<Vec<AbortedTxn>>,
}

/// What the locked part of a fetch decided: an answer without data, or a read to do.
enum LocalRead {
    Done(LogReadInfo),
    Read {
        at: LogOffsetSnapshot,
        max_offset: i64,
    },
}

/// A partition's offsets at one point (the offsets of a [`LogReadInfo`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogOffsetSnapshot {
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    pub log_end_offset: i64,
}

impl LogOffsetSnapshot {
    fn of(log: &LocalLog) -> Self {
        Self {
            high_watermark: log.high_watermark,
            last_stable_offset: log.last_stable_offset(),
            log_start_offset: log.log.log_start_offset(),
            log_end_offset: log.log.log_end_offset(),
        }
    }

    /// A fetch answer with these offsets.
    fn read_info(
        &self,
        records: FileRecords,
        diverging_epoch: Option<EpochEndOffset>,
    ) -> LogReadInfo {
        LogReadInfo {
            records,
            diverging_epoch,
            aborted_transactions: None,
            high_watermark: self.high_watermark,
            last_stable_offset: self.last_stable_offset,
            log_start_offset: self.log_start_offset,
            log_end_offset: self.log_end_offset,
        }
    }

    /// The end a fetch with this isolation may read up to.
    pub fn fetchable_end(&self, isolation: FetchIsolation) -> i64 {
        match isolation {
            FetchIsolation::LogEnd => self.log_end_offset,
            FetchIsolation::HighWatermark => self.high_watermark,
            FetchIsolation::TxnCommitted => self.last_stable_offset,
        }
    }
}

impl Partition {
    /// Kafka's `localLogWithEpochOrThrow`: the fetcher's epoch must be the current one; then
    /// only a leader serves (`fetch_only_leader`; consumers may later read from followers).
    fn check_readable(
        &self,
        st: &PartitionState,
        current_leader_epoch: Option<i32>,
        fetch_only_leader: bool,
    ) -> Result<(), PartitionError> {
        if st.removed {
            return Err(self.removed_error());
        }
        Self::check_leader_epoch(st, current_leader_epoch)?;
        if fetch_only_leader && st.role != Role::Leader {
            return Err(self.not_leader());
        }
        Ok(())
    }

    /// Kafka's `fetchRecords`: checks leadership and the fetcher's epoch, reads, and for a
    /// follower (`replica_id`, fetching as `replica_epoch`: its broker epoch, -1 before Fetch
    /// v15) records its fetch, unless its log diverges. A replica that is not in the assignment
    /// gets UNKNOWN_LEADER_EPOCH when it sent an epoch, else NOT_LEADER_OR_FOLLOWER. A negative
    /// `max_bytes` (what is left of a negative response limit) fails the read when there is
    /// something to read, as Kafka's `LogSegment.read` refuses a negative size; at or past the
    /// readable end the answer is empty.
    #[allow(clippy::too_many_arguments)]
    pub fn fetch_records(
        &self,
        replica_id: Option<i32>,
        replica_epoch: i64,
        isolation: FetchIsolation,
        fetch: &PartitionFetch,
        max_bytes: i32,
        min_one_message: bool,
        fetch_only_leader: bool,
        now_ms: i64,
    ) -> Result<LogReadInfo, PartitionError> {
        let info = {
            let st = self.state.read();
            self.check_readable(&st, fetch.current_leader_epoch, fetch_only_leader)?;
            if let Some(r) = replica_id {
                if r == self.node_id || st.replication.lock().follower(r).is_none() {
                    return Err(match fetch.current_leader_epoch {
                        Some(e) => PartitionError::UnknownLeaderEpoch {
                            requested: e,
                            current: st.leader_epoch,
                        },
                        None => self.not_leader(),
                    });
                }
            }
            // Offsets and the divergence check under the log mutex; the read itself after it
            // is released (still under the state's read side, so leadership cannot change
            // during it, as Kafka reads under `leaderIsrUpdateLock`).
            let planned = {
                let log = self.lock_log(&st);
                self.plan_local_read(&st, &log, isolation, fetch)?
            };
            match planned {
                LocalRead::Done(info) => info,
                LocalRead::Read { at, max_offset } => {
                    if max_bytes < 0
                        && (at.log_start_offset..max_offset).contains(&fetch.fetch_offset)
                    {
                        return Err(PartitionError::InvalidMaxSize(max_bytes));
                    }
                    let data = self.read_records(
                        fetch.fetch_offset,
                        max_bytes.max(0) as usize,
                        max_offset,
                        min_one_message,
                        isolation == FetchIsolation::TxnCommitted,
                    )?;
                    let mut info = at.read_info(data.records, None);
                    info.aborted_transactions = data.aborted_transactions;
                    info
                }
            }
        };
        if let Some(r) = replica_id {
            if info.diverging_epoch.is_none() {
                self.update_follower_fetch_state(
                    r,
                    fetch.fetch_offset,
                    fetch.log_start_offset,
                    now_ms,
                    info.log_end_offset,
                    replica_epoch,
                );
            }
        }
        Ok(info)
    }

    /// Kafka's `readRecords` up to the read, with the state read-locked and the log locked: the
    /// offsets snapshot and the KIP-320 divergence check. The read follows without the log
    /// mutex ([`Self::read_records`]).
    fn plan_local_read(
        &self,
        st: &PartitionState,
        log: &LocalLog,
        isolation: FetchIsolation,
        fetch: &PartitionFetch,
    ) -> Result<LocalRead, PartitionError> {
        let at = LogOffsetSnapshot::of(log);
        if let Some(last_fetched) = fetch.last_fetched_epoch {
            // KIP-320: the fetcher's last epoch must end at or after its fetch offset here,
            // else it holds a divergent tail; tell it where that epoch ends instead of data.
            let (epoch, end) = Self::end_offset_for_epoch_locked(st, log, last_fetched);
            if epoch < 0 || end < 0 {
                return Err(PartitionError::OffsetOutOfRange(format!(
                    "Could not determine the end offset of the last fetched epoch {last_fetched} from the request"
                )));
            }
            if fetch.fetch_offset < at.log_start_offset {
                return Err(PartitionError::OffsetOutOfRange(format!(
                    "Received request for offset {} for partition {}-{}, but we only have log segments in the range {} to {}.",
                    fetch.fetch_offset, self.topic, self.index, at.log_start_offset, at.log_end_offset
                )));
            }
            if epoch < last_fetched || end < fetch.fetch_offset {
                return Ok(LocalRead::Done(at.read_info(
                    FileRecords::default(),
                    Some(EpochEndOffset {
                        epoch,
                        end_offset: end,
                    }),
                )));
            }
        }
        Ok(LocalRead::Read {
            at,
            max_offset: at.fetchable_end(isolation),
        })
    }

    /// The one place the log is read for a fetch: whole batches from `fetch_offset`, none with a
    /// base offset at or past `max_offset`, through the lock-free [`strom_storage::LogReader`],
    /// as file ranges (only batch headers are read here);
    /// with `include_aborted` (read_committed, `max_offset` the LSO) also the aborted
    /// transactions overlapping them.
    fn read_records(
        &self,
        fetch_offset: i64,
        max_bytes: usize,
        max_offset: i64,
        min_one_message: bool,
        include_aborted: bool,
    ) -> Result<FileFetchDataInfo, StorageError> {
        self.reader.read_file_records(
            fetch_offset,
            max_bytes,
            max_offset,
            min_one_message,
            include_aborted,
        )
    }

    /// The offsets now (one consistent snapshot), without reading.
    pub fn offset_snapshot(&self) -> LogOffsetSnapshot {
        let st = self.state.read();
        let at = LogOffsetSnapshot::of(&self.lock_log(&st));
        at
    }

    /// Whether a delayed fetch of this partition may complete (Kafka's checks in
    /// `DelayedFetch.tryComplete`): leadership or the fetcher's epoch changed, the fetch offset
    /// left the log (truncated below it, or its start moved past it), or there is data beyond
    /// `seen_end` (the fetchable end at its last read). Cheap: offsets only, no read.
    pub fn fetch_may_complete(
        &self,
        isolation: FetchIsolation,
        fetch: &PartitionFetch,
        fetch_only_leader: bool,
        seen_end: i64,
    ) -> bool {
        let st = self.state.read();
        if self
            .check_readable(&st, fetch.current_leader_epoch, fetch_only_leader)
            .is_err()
        {
            return true;
        }
        let at = LogOffsetSnapshot::of(&self.lock_log(&st));
        fetch.fetch_offset < at.log_start_offset
            || fetch.fetch_offset > at.log_end_offset
            || at.fetchable_end(isolation) > seen_end
    }
}

//! What a partition leader knows about its followers, and the ISR / high-watermark math built on
//! it (Kafka's `Replica` fetch state plus `Partition.maybeIncrementLeaderHW`, `maybeShrinkIsr`,
//! `maybeExpandIsr` and the pending-ISR states of KIP-497).
//!
//! Pure bookkeeping: no locks, no I/O, time passed in. [`crate::partition::Partition`] keeps one
//! behind a mutex and turns its answers into HW moves and AlterPartition proposals.

use std::collections::{BTreeMap, BTreeSet};

/// Kafka's default `replica.lag.time.max.ms`.
pub const DEFAULT_REPLICA_LAG_TIME_MAX_MS: i64 = 30_000;

/// One follower as the leader sees it (Kafka's `ReplicaState`). Offsets are -1 until the
/// follower's first fetch in this leader epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowerState {
    /// The follower's fetch offset: everything below it is in its log.
    pub log_end_offset: i64,
    pub log_start_offset: i64,
    /// The leader's log end offset at the follower's previous fetch.
    pub last_fetch_leader_log_end_offset: i64,
    pub last_fetch_time_ms: i64,
    /// The last time the follower had everything the leader had (see [`Self::update`]).
    pub last_caught_up_time_ms: i64,
    /// The broker epoch its last fetch carried (Kafka's `ReplicaState.brokerEpoch`: Fetch v15+
    /// `ReplicaState.ReplicaEpoch`; -1 from older versions); `None` before its first fetch.
    pub broker_epoch: Option<i64>,
}

impl FollowerState {
    /// The state a new leader starts with (Kafka's `resetReplicaState` for a new leader epoch):
    /// offsets unknown; a follower already in the ISR counts as caught up now, so it gets a full
    /// `replica.lag.time.max.ms` to fetch before it can be shrunk out.
    pub fn reset(now_ms: i64, in_sync: bool) -> Self {
        Self {
            log_end_offset: -1,
            log_start_offset: -1,
            last_fetch_leader_log_end_offset: -1,
            last_fetch_time_ms: 0,
            last_caught_up_time_ms: if in_sync { now_ms } else { 0 },
            broker_epoch: None,
        }
    }

    /// A leader re-elected in a new epoch (Kafka's `resetReplicaState` with `isNewLeader` false):
    /// the follower's offsets stay known, so the HW need not wait for its next fetch. Its catch-up
    /// clock restarts as for a new leader, and its previous fetch is taken to have been at the
    /// epoch start, now for an ISR member and at time 0 otherwise, so an out-of-sync follower is
    /// not brought back before it fetches again.
    pub fn reset_for_new_epoch(&mut self, now_ms: i64, in_sync: bool, epoch_start_offset: i64) {
        let t = if in_sync { now_ms } else { 0 };
        self.last_fetch_leader_log_end_offset = epoch_start_offset;
        self.last_fetch_time_ms = t;
        self.last_caught_up_time_ms = t;
    }

    /// Records a fetch at `fetch_offset` (Kafka's `updateFetchStateOrThrow`). The follower is
    /// caught up now if it asked for the leader's log end; it was caught up at its previous fetch
    /// if it now asks for at least what the leader had then.
    pub fn update(
        &mut self,
        fetch_offset: i64,
        follower_log_start_offset: i64,
        now_ms: i64,
        leader_log_end_offset: i64,
        broker_epoch: i64,
    ) {
        self.broker_epoch = Some(broker_epoch);
        if fetch_offset >= leader_log_end_offset {
            self.last_caught_up_time_ms = self.last_caught_up_time_ms.max(now_ms);
        } else if fetch_offset >= self.last_fetch_leader_log_end_offset {
            self.last_caught_up_time_ms = self.last_caught_up_time_ms.max(self.last_fetch_time_ms);
        }
        self.log_start_offset = follower_log_start_offset;
        self.log_end_offset = fetch_offset;
        self.last_fetch_leader_log_end_offset = leader_log_end_offset;
        self.last_fetch_time_ms = now_ms;
    }

    /// Kafka's `isCaughtUp`: at the leader's log end, or caught up within `max_lag_ms`.
    pub fn is_caught_up(&self, leader_log_end_offset: i64, now_ms: i64, max_lag_ms: i64) -> bool {
        self.log_end_offset == leader_log_end_offset
            || now_ms - self.last_caught_up_time_ms <= max_lag_ms
    }
}

/// An ISR change sent to the controller and not yet seen committed in a metadata image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PendingIsr {
    Expand {
        new_replica: i32,
        proposed: Vec<i32>,
    },
    Shrink {
        removed: Vec<i32>,
        proposed: Vec<i32>,
    },
}

/// Leader-side replication state of one partition.
#[derive(Debug, Clone)]
pub struct LeaderState {
    local_id: i32,
    replicas: Vec<i32>,
    /// The committed ISR (as in the last applied metadata image).
    isr: Vec<i32>,
    leader_epoch: i32,
    partition_epoch: i32,
    /// The leader's log end offset when it became leader in `leader_epoch`.
    leader_epoch_start_offset: i64,
    followers: BTreeMap<i32, FollowerState>,
    pending: Option<PendingIsr>,
    pub replica_lag_time_max_ms: i64,
    pub min_insync_replicas: i32,
    /// Brokers that may not join the ISR: fenced or in controlled shutdown in the last applied
    /// metadata image (the negation of Kafka's `isReplicaIsrEligible`). The HW does not wait
    /// for them to join, however recently they were caught up.
    pub ineligible_replicas: BTreeSet<i32>,
    /// The registered broker epoch of every broker in the last applied image (Kafka's
    /// `getAliveBrokerEpoch`): a follower whose fetches come from another incarnation — the
    /// one before a restart — may not join the ISR (KIP-903). Empty: not known (the epoch
    /// check is skipped).
    pub broker_epochs: BTreeMap<i32, i64>,
}

impl LeaderState {
    /// A single-replica partition led by `local_id`: ISR = {local}, so HW = LEO.
    pub fn new(local_id: i32) -> Self {
        Self {
            local_id,
            replicas: vec![local_id],
            isr: vec![local_id],
            leader_epoch: -1,
            partition_epoch: -1,
            leader_epoch_start_offset: 0,
            followers: BTreeMap::new(),
            pending: None,
            replica_lag_time_max_ms: DEFAULT_REPLICA_LAG_TIME_MAX_MS,
            min_insync_replicas: 1,
            ineligible_replicas: BTreeSet::new(),
            broker_epochs: BTreeMap::new(),
        }
    }

    /// Applies a registration in which this broker leads. A new leader epoch records where the
    /// epoch starts and resets every follower (Kafka's `makeLeader` / `resetReplicaState`): a
    /// new leader forgets all follower offsets; a leader re-elected in a new epoch keeps them.
    /// Within the same epoch followers keep their state. A registration that differs from the
    /// applied one (partition epoch, ISR or replicas) is a committed change and ends any pending
    /// ISR change; re-applying the same one keeps it pending. Returns whether anything changed.
    #[allow(clippy::too_many_arguments)]
    pub fn apply_registration(
        &mut self,
        new_leader: bool,
        leader_epoch: i32,
        partition_epoch: i32,
        replicas: &[i32],
        isr: &[i32],
        leader_log_end_offset: i64,
        now_ms: i64,
    ) -> bool {
        let new_epoch = new_leader || leader_epoch != self.leader_epoch;
        let changed = new_epoch
            || partition_epoch != self.partition_epoch
            || isr != self.isr.as_slice()
            || replicas != self.replicas.as_slice();
        if !changed {
            return false;
        }
        if new_epoch {
            self.leader_epoch_start_offset = leader_log_end_offset;
            if new_leader {
                self.followers.clear();
            }
            for (id, f) in self.followers.iter_mut() {
                f.reset_for_new_epoch(now_ms, isr.contains(id), leader_log_end_offset);
            }
        }
        let mut replicas = replicas.to_vec();
        if !replicas.contains(&self.local_id) {
            replicas.push(self.local_id);
        }
        self.followers.retain(|id, _| replicas.contains(id));
        for &id in replicas.iter().filter(|&&id| id != self.local_id) {
            self.followers
                .entry(id)
                .or_insert_with(|| FollowerState::reset(now_ms, isr.contains(&id)));
        }
        self.replicas = replicas;
        self.isr = isr.to_vec();
        self.leader_epoch = leader_epoch;
        self.partition_epoch = partition_epoch;
        self.pending = None;
        true
    }

    pub fn isr(&self) -> &[i32] {
        &self.isr
    }
    pub fn replicas(&self) -> &[i32] {
        &self.replicas
    }
    pub fn partition_epoch(&self) -> i32 {
        self.partition_epoch
    }
    pub fn leader_epoch(&self) -> i32 {
        self.leader_epoch
    }
    pub fn leader_epoch_start_offset(&self) -> i64 {
        self.leader_epoch_start_offset
    }
    pub fn pending(&self) -> Option<&PendingIsr> {
        self.pending.as_ref()
    }
    pub fn follower(&self, id: i32) -> Option<&FollowerState> {
        self.followers.get(&id)
    }

    /// The committed ISR widened by a pending expansion (a pending shrink still counts the
    /// replicas it removes): the set the HW must respect while a change is in flight.
    pub fn maximal_isr(&self) -> Vec<i32> {
        let mut out = self.isr.clone();
        if let Some(PendingIsr::Expand { new_replica, .. }) = &self.pending {
            if !out.contains(new_replica) {
                out.push(*new_replica);
            }
        }
        out
    }

    /// `min.insync.replicas` capped at the replication factor (Kafka's `effectiveMinIsr`).
    pub fn effective_min_isr(&self) -> usize {
        (self.min_insync_replicas.max(1) as usize).min(self.replicas.len())
    }

    pub fn is_under_min_isr(&self) -> bool {
        self.isr.len() < self.effective_min_isr()
    }

    /// Records a follower fetch carrying `broker_epoch` (-1: a Fetch before v15). Returns
    /// `None` for a replica not in the assignment (Kafka answers such fetches with
    /// UNKNOWN_LEADER_EPOCH), else whether its LEO moved.
    pub fn update_follower_fetch_state(
        &mut self,
        follower: i32,
        fetch_offset: i64,
        follower_log_start_offset: i64,
        now_ms: i64,
        leader_log_end_offset: i64,
        broker_epoch: i64,
    ) -> Option<bool> {
        let f = self.followers.get_mut(&follower)?;
        let before = f.log_end_offset;
        f.update(
            fetch_offset,
            follower_log_start_offset,
            now_ms,
            leader_log_end_offset,
            broker_epoch,
        );
        Some(before != fetch_offset)
    }

    /// Kafka's `isReplicaIsrEligible`: not fenced or shutting down, and — when the image's
    /// broker epochs are known — its last fetch came from the registered incarnation or
    /// carried no epoch (`isBrokerEpochIsrEligible`: a fetch from before a restart does not
    /// vouch for what the restarted broker holds).
    pub fn is_replica_isr_eligible(&self, id: i32) -> bool {
        if self.ineligible_replicas.contains(&id) {
            return false;
        }
        if self.broker_epochs.is_empty() {
            return true;
        }
        let Some(&registered) = self.broker_epochs.get(&id) else {
            return false;
        };
        self.followers
            .get(&id)
            .and_then(|f| f.broker_epoch)
            .is_some_and(|e| e == -1 || e == registered)
    }

    /// The broker epoch of each of `isr` for an AlterPartition (Kafka's `addBrokerEpochToIsr`):
    /// this leader's registered one, each follower's last fetch's, -1 where unknown.
    pub fn isr_broker_epochs(&self, isr: &[i32]) -> Vec<i64> {
        isr.iter()
            .map(|&id| {
                if id == self.local_id {
                    self.broker_epochs.get(&id).copied().unwrap_or(-1)
                } else {
                    self.followers
                        .get(&id)
                        .and_then(|f| f.broker_epoch)
                        .unwrap_or(-1)
                }
            })
            .collect()
    }

    /// The HW the leader may move to (Kafka's `maybeIncrementLeaderHW`): the leader's LEO
    /// lowered to the LEO of every follower in the maximal ISR and of every ISR-eligible follower
    /// caught up enough to join it (so a follower trying to join is not outrun; a fenced one
    /// cannot join, so it is not waited for). `None` while the ISR is below the effective
    /// `min.insync.replicas`. The caller only ever moves the HW up.
    pub fn high_watermark_candidate(&self, leader_log_end_offset: i64, now_ms: i64) -> Option<i64> {
        if self.is_under_min_isr() {
            return None;
        }
        let maximal = self.maximal_isr();
        let mut hw = leader_log_end_offset;
        for (id, f) in &self.followers {
            let counts = maximal.contains(id)
                || (self.is_replica_isr_eligible(*id)
                    && f.is_caught_up(leader_log_end_offset, now_ms, self.replica_lag_time_max_ms));
            if counts && f.log_end_offset < hw {
                hw = f.log_end_offset;
            }
        }
        Some(hw)
    }

    /// Followers of the committed ISR that have not caught up within `replica_lag_time_max_ms`
    /// (Kafka's `getOutOfSyncReplicas`); empty while an ISR change is pending.
    pub fn isr_shrink_candidates(
        &self,
        now_ms: i64,
        replica_lag_time_max_ms: i64,
        leader_log_end_offset: i64,
    ) -> Vec<i32> {
        if self.pending.is_some() {
            return Vec::new();
        }
        self.isr
            .iter()
            .copied()
            .filter(|&id| id != self.local_id)
            .filter(|id| {
                self.followers.get(id).is_none_or(|f| {
                    !f.is_caught_up(leader_log_end_offset, now_ms, replica_lag_time_max_ms)
                })
            })
            .collect()
    }

    /// Whether `follower` may rejoin the ISR (Kafka's `needsExpandIsr`): no change pending, an
    /// assigned replica outside the ISR and eligible (not fenced, not shutting down), LEO >= HW
    /// and >= the start of this leader epoch.
    pub fn isr_expand_candidate(&self, follower: i32, high_watermark: i64) -> bool {
        if self.pending.is_some()
            || self.isr.contains(&follower)
            || !self.is_replica_isr_eligible(follower)
        {
            return false;
        }
        let Some(f) = self.followers.get(&follower) else {
            return false;
        };
        f.log_end_offset >= high_watermark && f.log_end_offset >= self.leader_epoch_start_offset
    }

    /// Marks a shrink pending and returns the ISR to propose (Kafka's `prepareIsrShrink`).
    pub fn prepare_isr_shrink(&mut self, out_of_sync: &[i32]) -> Vec<i32> {
        let proposed: Vec<i32> = self
            .isr
            .iter()
            .copied()
            .filter(|id| !out_of_sync.contains(id))
            .collect();
        self.pending = Some(PendingIsr::Shrink {
            removed: out_of_sync.to_vec(),
            proposed: proposed.clone(),
        });
        proposed
    }

    /// Marks an expansion pending and returns the ISR to propose (Kafka's `prepareIsrExpand`).
    pub fn prepare_isr_expand(&mut self, follower: i32) -> Vec<i32> {
        let mut proposed = self.isr.clone();
        proposed.push(follower);
        self.pending = Some(PendingIsr::Expand {
            new_replica: follower,
            proposed: proposed.clone(),
        });
        proposed
    }

    /// The controller refused or never got the change: forget it, so it can be proposed again.
    pub fn clear_pending(&mut self) {
        self.pending = None;
    }

    /// Whether enough replicas have `required_offset` for an acks=all produce (Kafka's
    /// `checkEnoughReplicasReachOffset`): `None` until the HW reaches it, then whether the
    /// maximal ISR still meets `min.insync.replicas`.
    pub fn enough_replicas_reach_offset(
        &self,
        high_watermark: i64,
        required_offset: i64,
    ) -> Option<bool> {
        (high_watermark >= required_offset)
            .then(|| self.effective_min_isr() <= self.maximal_isr().len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn three(now: i64) -> LeaderState {
        let mut s = LeaderState::new(1);
        assert!(s.apply_registration(true, 5, 10, &[1, 2, 3], &[1, 2, 3], 100, now));
        s
    }

    #[test]
    fn single_replica_hw_is_leo() {
        let mut s = LeaderState::new(1);
        assert_eq!(s.high_watermark_candidate(42, 0), Some(42));
        s.min_insync_replicas = 3; // capped at RF = 1
        assert_eq!(s.effective_min_isr(), 1);
        assert_eq!(s.high_watermark_candidate(43, 0), Some(43));
    }

    #[test]
    fn hw_is_min_leo_over_isr() {
        let mut s = three(0);
        // No follower has fetched yet in this epoch: unknown LEOs hold the HW.
        assert_eq!(s.high_watermark_candidate(120, 0), Some(-1));
        s.update_follower_fetch_state(2, 110, 0, 1, 120, -1);
        s.update_follower_fetch_state(3, 105, 0, 1, 120, -1);
        assert_eq!(s.high_watermark_candidate(120, 1), Some(105));
        s.update_follower_fetch_state(3, 120, 0, 2, 120, -1);
        assert_eq!(s.high_watermark_candidate(120, 2), Some(110));
        s.update_follower_fetch_state(2, 120, 0, 3, 120, -1);
        assert_eq!(s.high_watermark_candidate(120, 3), Some(120));
    }

    #[test]
    fn follower_outside_isr_counts_only_while_caught_up() {
        let mut s = LeaderState::new(1);
        s.apply_registration(true, 1, 1, &[1, 2], &[1], 0, 0);
        // Never caught up: not waited for.
        assert_eq!(s.high_watermark_candidate(50, 100_000), Some(50));
        // Caught up recently (trying to join): the HW waits for it.
        s.update_follower_fetch_state(2, 50, 0, 100_000, 50, -1);
        assert_eq!(s.high_watermark_candidate(60, 100_001), Some(50));
        // Lagging past replica.lag.time.max.ms: no longer waited for.
        assert_eq!(s.high_watermark_candidate(60, 100_000 + 30_001), Some(60));
    }

    /// KIP-903 on the leader (Kafka's `isBrokerEpochIsrEligible`): a follower whose last fetch
    /// came from another incarnation than the registered one neither rejoins the ISR nor holds
    /// the HW; a fetch without an epoch (Fetch < v15) passes; the proposal carries the epochs.
    #[test]
    fn follower_from_another_incarnation_is_not_isr_eligible() {
        let mut s = LeaderState::new(1);
        s.apply_registration(true, 1, 1, &[1, 2, 3], &[1, 2], 0, 0);
        s.broker_epochs = [(1, 10), (2, 20), (3, 31)].into();
        // 3 fetched as its incarnation of epoch 30, then restarted (now registered as 31).
        s.update_follower_fetch_state(3, 50, 0, 100, 50, 30);
        assert!(!s.is_replica_isr_eligible(3));
        assert!(!s.isr_expand_candidate(3, 50));
        s.update_follower_fetch_state(2, 40, 0, 100, 50, 20);
        assert_eq!(
            s.high_watermark_candidate(50, 100),
            Some(40),
            "only the ISR holds the HW"
        );
        // Its new incarnation fetches: eligible again.
        s.update_follower_fetch_state(3, 50, 0, 200, 50, 31);
        assert!(s.isr_expand_candidate(3, 50));
        assert_eq!(s.isr_broker_epochs(&[1, 2, 3]), vec![10, 20, 31]);
        // No epoch in the fetch: not checked.
        s.update_follower_fetch_state(3, 50, 0, 300, 50, -1);
        assert!(s.is_replica_isr_eligible(3));
        // Not registered: not eligible; never fetched: -1 in a proposal.
        s.broker_epochs.remove(&3);
        assert!(!s.is_replica_isr_eligible(3));
        let mut fresh = LeaderState::new(1);
        fresh.apply_registration(true, 1, 1, &[1, 2], &[1, 2], 0, 0);
        assert_eq!(fresh.isr_broker_epochs(&[1, 2]), vec![-1, -1]);
    }

    #[test]
    fn fenced_follower_outside_isr_does_not_hold_hw() {
        // Follower 3 was caught up a moment ago, then the controller fenced it (session
        // expired: SIGSTOP, partition) and removed it from the ISR.
        let mut s = three(0);
        s.update_follower_fetch_state(2, 100, 0, 1_000, 100, -1);
        s.update_follower_fetch_state(3, 100, 0, 1_000, 100, -1);
        s.apply_registration(false, 5, 11, &[1, 2, 3], &[1, 2], 130, 2_000);
        s.update_follower_fetch_state(2, 130, 0, 2_000, 130, -1);
        // Not fenced yet: waited for while within replica.lag.time.max.ms, as it may rejoin.
        assert_eq!(s.high_watermark_candidate(130, 2_000), Some(100));
        s.ineligible_replicas.insert(3);
        assert_eq!(s.high_watermark_candidate(130, 2_000), Some(130));
        // Nor does a fenced broker rejoin the ISR.
        s.update_follower_fetch_state(3, 130, 0, 2_100, 130, -1);
        assert!(!s.isr_expand_candidate(3, 130));
        s.ineligible_replicas.clear();
        assert!(s.isr_expand_candidate(3, 130));
    }

    #[test]
    fn under_min_isr_holds_hw() {
        let mut s = LeaderState::new(1);
        s.min_insync_replicas = 2;
        s.apply_registration(true, 1, 1, &[1, 2, 3], &[1], 0, 0);
        assert!(s.is_under_min_isr());
        assert_eq!(s.high_watermark_candidate(10, 0), None);
        assert_eq!(s.enough_replicas_reach_offset(10, 10), Some(false));
        assert_eq!(s.enough_replicas_reach_offset(9, 10), None);
    }

    #[test]
    fn caught_up_time_rules() {
        let mut f = FollowerState::reset(0, false);
        // Fetch below the leader's LEO: not caught up (no earlier fetch).
        f.update(5, 0, 1_000, 10, -1);
        assert_eq!(f.last_caught_up_time_ms, 0);
        // Next fetch asks for at least what the leader had at the previous fetch: caught up
        // as of that previous fetch.
        f.update(10, 0, 2_000, 15, -1);
        assert_eq!(f.last_caught_up_time_ms, 1_000);
        // At the leader's end: caught up now.
        f.update(15, 0, 3_000, 15, -1);
        assert_eq!(f.last_caught_up_time_ms, 3_000);
        assert!(f.is_caught_up(15, 100_000, 30_000));
        assert!(!f.is_caught_up(16, 33_001, 30_000));
        assert!(f.is_caught_up(16, 33_000, 30_000));
    }

    #[test]
    fn shrink_after_lag_time() {
        let mut s = three(0);
        s.update_follower_fetch_state(2, 100, 0, 1_000, 100, -1);
        s.update_follower_fetch_state(3, 100, 0, 1_000, 100, -1);
        // Leader moves on; follower 2 keeps up, follower 3 stops fetching.
        for t in (2_000..40_000).step_by(1_000) {
            s.update_follower_fetch_state(2, 100 + t / 1_000, 0, t, 100 + t / 1_000, -1);
        }
        let leo = 140;
        assert!(s.isr_shrink_candidates(30_000, 30_000, leo).is_empty());
        assert_eq!(s.isr_shrink_candidates(31_001, 30_000, leo), vec![3]);
        // A follower at the leader's LEO is never out of sync, however old its catch-up time.
        assert!(s.isr_shrink_candidates(31_001, 30_000, 100).is_empty());
    }

    #[test]
    fn pending_shrink_keeps_old_isr_until_committed() {
        let mut s = three(0);
        s.update_follower_fetch_state(2, 100, 0, 1, 100, -1);
        s.update_follower_fetch_state(3, 90, 0, 1, 100, -1);
        let out = s.isr_shrink_candidates(40_000, 30_000, 100);
        assert_eq!(out, vec![3]);
        assert_eq!(s.prepare_isr_shrink(&out), vec![1, 2]);
        // In flight: the committed (larger) ISR still bounds the HW; no second proposal.
        assert_eq!(s.isr(), &[1, 2, 3]);
        assert_eq!(s.maximal_isr(), vec![1, 2, 3]);
        assert_eq!(s.high_watermark_candidate(100, 40_000), Some(90));
        assert!(s.isr_shrink_candidates(40_000, 30_000, 100).is_empty());
        // Re-applying the same registration does not commit it.
        assert!(!s.apply_registration(false, 5, 10, &[1, 2, 3], &[1, 2, 3], 100, 40_000));
        assert!(s.pending().is_some());
        // The controller's committed change arrives in a new image.
        assert!(s.apply_registration(false, 5, 11, &[1, 2, 3], &[1, 2], 100, 40_001));
        assert!(s.pending().is_none());
        assert_eq!(s.high_watermark_candidate(100, 40_001), Some(100));
        // Follower state survives an ISR change within the epoch.
        assert_eq!(s.follower(3).unwrap().log_end_offset, 90);
    }

    #[test]
    fn expand_rules_and_pending_expand() {
        let mut s = LeaderState::new(1);
        // Leader of epoch 7 from offset 50.
        s.apply_registration(true, 7, 3, &[1, 2], &[1], 50, 0);
        s.update_follower_fetch_state(2, 40, 0, 1, 60, -1);
        assert!(
            !s.isr_expand_candidate(2, 40),
            "below the epoch start offset"
        );
        s.update_follower_fetch_state(2, 55, 0, 2, 60, -1);
        assert!(!s.isr_expand_candidate(2, 58), "below the HW");
        assert!(s.isr_expand_candidate(2, 55));
        assert!(!s.isr_expand_candidate(3, 0), "not an assigned replica");
        assert_eq!(s.prepare_isr_expand(2), vec![1, 2]);
        assert!(!s.isr_expand_candidate(2, 55), "already pending");
        // The pending member already bounds the HW (maximal ISR).
        assert_eq!(s.maximal_isr(), vec![1, 2]);
        assert_eq!(s.high_watermark_candidate(60, 100_000), Some(55));
        // Refused: forgotten, may be proposed again.
        s.clear_pending();
        assert!(s.isr_expand_candidate(2, 55));
        s.prepare_isr_expand(2);
        assert!(s.apply_registration(false, 7, 4, &[1, 2], &[1, 2], 60, 3));
        assert_eq!(s.isr(), &[1, 2]);
        assert!(!s.isr_expand_candidate(2, 55), "already in the ISR");
    }

    #[test]
    fn new_leader_epoch_resets_followers() {
        let mut s = three(0);
        s.update_follower_fetch_state(2, 100, 7, 1, 100, -1);
        s.update_follower_fetch_state(3, 90, 0, 1, 100, -1);
        // Re-elected in a new epoch: offsets are kept, the catch-up clocks restart
        // (Kafka's resetReplicaState with isNewLeader = false).
        s.apply_registration(false, 6, 11, &[1, 2, 3], &[1, 2], 130, 50_000);
        assert_eq!(s.leader_epoch_start_offset(), 130);
        let f = *s.follower(2).unwrap();
        assert_eq!((f.log_end_offset, f.log_start_offset), (100, 7));
        assert_eq!(f.last_fetch_leader_log_end_offset, 130);
        assert_eq!(
            (f.last_fetch_time_ms, f.last_caught_up_time_ms),
            (50_000, 50_000)
        );
        let f = *s.follower(3).unwrap();
        assert_eq!(f.log_end_offset, 90);
        assert_eq!((f.last_fetch_time_ms, f.last_caught_up_time_ms), (0, 0));
        // The kept LEOs bound the HW at once.
        assert_eq!(s.high_watermark_candidate(130, 50_000), Some(100));
        // Becoming leader (again) forgets every follower offset.
        s.apply_registration(true, 7, 12, &[1, 2, 3], &[1, 2, 3], 130, 60_000);
        let f = *s.follower(2).unwrap();
        assert_eq!(f, FollowerState::reset(60_000, true));
        // Reassignment drops followers no longer assigned.
        s.apply_registration(false, 7, 13, &[1, 2], &[1, 2], 130, 60_001);
        assert!(s.follower(3).is_none());
        assert_eq!(s.update_follower_fetch_state(3, 1, 0, 1, 1, -1), None);
    }

    #[test]
    fn fenced_follower_out_of_the_isr_does_not_hold_the_hw() {
        // Follower 3 dies right after catching up; the controller fences it and drops it from
        // the ISR (session timeout) sooner than replica.lag.time.max.ms after that catch-up.
        let mut s = three(0);
        s.min_insync_replicas = 2;
        s.update_follower_fetch_state(2, 100, 0, 1_000, 100, -1);
        s.update_follower_fetch_state(3, 100, 0, 1_000, 100, -1);
        s.update_follower_fetch_state(2, 110, 0, 1_500, 110, -1);
        // The ISR change alone: 3 is still eligible and recently caught up, so it may be about
        // to rejoin and the HW waits for it (Kafka's shouldWaitForReplicaToJoinIsr).
        assert!(s.apply_registration(false, 5, 11, &[1, 2, 3], &[1, 2], 110, 2_000));
        assert_eq!(s.high_watermark_candidate(110, 2_000), Some(100));
        // Fenced: it cannot join the ISR, so the HW is min LEO over the ISR {1, 2}.
        s.ineligible_replicas = [3].into();
        assert_eq!(s.high_watermark_candidate(110, 2_000), Some(110));
        // An ineligible member of the (maximal) ISR still counts.
        assert!(s.apply_registration(false, 5, 12, &[1, 2, 3], &[1, 2, 3], 110, 2_001));
        assert_eq!(s.high_watermark_candidate(110, 2_001), Some(100));
    }
}

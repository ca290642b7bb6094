//! KIP-890 part 1 in the producer state (Kafka's `VerificationGuard` and
//! `VerificationStateEntry`): before the leader appends a client's transactional batch for a
//! producer with no transaction open in the partition, the broker asks the transaction
//! coordinator whether the partition is in the producer's ongoing transaction. The guard taken
//! when that question is asked must still be the producer's when the answer comes and the batch
//! is appended: any transactional batch or marker of the producer written meanwhile clears it,
//! so a stale "yes" (asked before an abort marker, answered after it) cannot open a
//! transaction the coordinator no longer knows about. The one exception is Kafka's: a
//! transactions-v2 client's verification survives a marker at its own epoch, which is the
//! previous transaction's end (the coordinator bumped the epoch for it and the client already
//! started the next transaction with that epoch).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// One verification's identity; [`VerificationGuard::SENTINEL`] verifies nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VerificationGuard(u64);

static NEXT_GUARD: AtomicU64 = AtomicU64::new(1);

impl VerificationGuard {
    /// What an append that was not verified carries (and what is returned when no
    /// verification is needed: the producer's transaction is open in the partition).
    pub const SENTINEL: VerificationGuard = VerificationGuard(0);

    fn fresh() -> Self {
        VerificationGuard(NEXT_GUARD.fetch_add(1, Ordering::Relaxed))
    }

    pub fn is_sentinel(self) -> bool {
        self == Self::SENTINEL
    }

    /// Whether `request` is this guard (never the sentinel).
    pub fn verify(self, request: VerificationGuard) -> bool {
        !request.is_sentinel() && request == self
    }
}

/// A verification under way for a producer (Kafka's `VerificationStateEntry`).
#[derive(Debug, Clone, Copy)]
pub struct VerificationStateEntry {
    pub timestamp: i64,
    pub guard: VerificationGuard,
    /// The lowest sequence seen while verifying for `epoch`: a higher one may not be appended
    /// first (it would leave the lower one out of order forever).
    pub lowest_sequence: i32,
    pub epoch: i16,
    /// The produce that started it was a transactions-v2 client's (Produce v12): the
    /// coordinator bumps its epoch at every EndTxn.
    pub supports_epoch_bump: bool,
}

impl VerificationStateEntry {
    fn new(timestamp: i64, sequence: i32, epoch: i16, supports_epoch_bump: bool) -> Self {
        Self {
            timestamp,
            guard: VerificationGuard::fresh(),
            lowest_sequence: sequence,
            epoch,
            supports_epoch_bump,
        }
    }

    /// Whether writing `batch_epoch`'s transactional batch (`is_control`: a marker) ends this
    /// verification (Kafka's `UnifiedLog.updateProducers`): a data batch opened the
    /// transaction; a marker ended a transaction the verification may have been answered
    /// for, except a transactions-v2 marker at this verification's epoch, which ended the
    /// previous transaction (its epoch was bumped to this one) before this one started.
    pub fn is_ended_by(&self, is_control: bool, batch_epoch: i16) -> bool {
        !(self.supports_epoch_bump && is_control && batch_epoch == self.epoch)
    }

    /// A lower sequence of the same epoch, or any sequence of a newer epoch, becomes the
    /// lowest.
    fn maybe_update_lowest_sequence_and_epoch(&mut self, sequence: i32, epoch: i16) {
        if epoch == self.epoch && sequence < self.lowest_sequence {
            self.lowest_sequence = sequence;
        }
        if epoch > self.epoch {
            self.epoch = epoch;
            self.lowest_sequence = sequence;
        }
    }
}

/// The verifications under way in one partition, by producer id.
#[derive(Debug, Default)]
pub struct VerificationStates {
    entries: HashMap<i64, VerificationStateEntry>,
}

impl VerificationStates {
    /// The producer's verification, started now if there is none (Kafka's
    /// `maybeCreateVerificationStateEntry`; `supports_epoch_bump` is the starting produce's).
    pub fn maybe_create(
        &mut self,
        producer_id: i64,
        sequence: i32,
        epoch: i16,
        supports_epoch_bump: bool,
        now_ms: i64,
    ) -> VerificationStateEntry {
        let e = self.entries.entry(producer_id).or_insert_with(|| {
            VerificationStateEntry::new(now_ms, sequence, epoch, supports_epoch_bump)
        });
        e.maybe_update_lowest_sequence_and_epoch(sequence, epoch);
        *e
    }

    pub fn get(&self, producer_id: i64) -> Option<&VerificationStateEntry> {
        self.entries.get(&producer_id)
    }

    /// The producer's guard, or the sentinel when no verification is under way.
    pub fn guard(&self, producer_id: i64) -> VerificationGuard {
        self.get(producer_id)
            .map_or(VerificationGuard::SENTINEL, |e| e.guard)
    }

    /// A transactional batch or marker of the producer that ends its verification
    /// ([`VerificationStateEntry::is_ended_by`]) was written: its transaction is open (or
    /// over) in the log now.
    pub fn clear(&mut self, producer_id: i64) {
        self.entries.remove(&producer_id);
    }

    /// Drops verifications older than `expiration_ms` (never answered, or their produce gave
    /// up), as Kafka does with the producers in `removeExpiredProducers`.
    pub fn remove_expired(&mut self, now_ms: i64, expiration_ms: i64) {
        self.entries
            .retain(|_, e| now_ms - e.timestamp < expiration_ms);
    }

    pub fn clear_all(&mut self) {
        self.entries.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guards_are_unique_and_the_sentinel_verifies_nothing() {
        let mut s = VerificationStates::default();
        let g = s.maybe_create(1, 0, 0, false, 0).guard;
        assert!(!g.is_sentinel());
        assert!(g.verify(g));
        assert!(!g.verify(VerificationGuard::SENTINEL));
        assert!(!VerificationGuard::SENTINEL.verify(VerificationGuard::SENTINEL));
        // Asking again while under way keeps the guard.
        assert_eq!(s.maybe_create(1, 3, 0, false, 5).guard, g);
        s.clear(1);
        assert_eq!(s.guard(1), VerificationGuard::SENTINEL);
        let g2 = s.maybe_create(1, 0, 0, false, 0).guard;
        assert_ne!(g, g2);
        assert!(!g2.verify(g));
    }

    #[test]
    fn lowest_sequence_follows_lower_sequences_and_newer_epochs() {
        let mut s = VerificationStates::default();
        s.maybe_create(7, 10, 1, false, 0);
        assert_eq!(s.maybe_create(7, 5, 1, false, 0).lowest_sequence, 5);
        assert_eq!(s.maybe_create(7, 8, 1, false, 0).lowest_sequence, 5);
        // An older epoch changes nothing; a newer one restarts the sequence.
        assert_eq!(s.maybe_create(7, 0, 0, false, 0).lowest_sequence, 5);
        let e = s.maybe_create(7, 20, 2, false, 0);
        assert_eq!((e.epoch, e.lowest_sequence), (2, 20));
    }

    #[test]
    fn expired_verifications_are_dropped() {
        let mut s = VerificationStates::default();
        s.maybe_create(1, 0, 0, false, 100);
        s.maybe_create(2, 0, 0, false, 500);
        s.remove_expired(600, 200);
        assert!(s.get(1).is_none());
        assert!(s.get(2).is_some());
    }
}

//! Kafka's `CleanedTransactionMetadata`: the transactions the cleaner is inside of as it walks
//! the log in offset order, which decides when aborted data and markers may go.
//!
//! - A data batch of a producer with an aborted transaction open at that point (the
//!   transaction's first offset reached, its marker not yet) is discardable.
//! - An ABORT marker stays while any batch of its transaction was seen in this pass (so a
//!   read_committed consumer still learns to drop them); it is then also written to the cleaned
//!   segment's `.txnindex`. Once the transaction's batches are all gone, it may go too.
//! - A COMMIT marker may go once no batch of its transaction was seen in this pass.
//! - Either kind only really goes after its delete horizon (the caller's business).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};

use crate::txn_index::AbortedTxn;

/// An aborted transaction entered, and the last batch of it seen.
struct AbortedTxnMetadata {
    txn: AbortedTxn,
    last_observed_batch_offset: Option<i64>,
}

/// Ordered by first offset, smallest first (a min-heap through `Reverse`).
#[derive(PartialEq, Eq)]
struct ByFirstOffset(AbortedTxn);

impl Ord for ByFirstOffset {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.first_offset.cmp(&other.0.first_offset)
    }
}
impl PartialOrd for ByFirstOffset {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// Kafka's `ControlRecordType` ids the cleaner acts on.
pub(crate) const CONTROL_ABORT: i16 = 0;
pub(crate) const CONTROL_COMMIT: i16 = 1;

#[derive(Default)]
pub(crate) struct CleanedTransactionMetadata {
    ongoing_committed: HashSet<i64>,
    ongoing_aborted: HashMap<i64, AbortedTxnMetadata>,
    aborted: BinaryHeap<Reverse<ByFirstOffset>>,
    /// Aborted transactions whose marker stays, for the cleaned segment's `.txnindex`.
    retained_aborts: Vec<AbortedTxn>,
}

impl CleanedTransactionMetadata {
    pub(crate) fn add_aborted_transactions(&mut self, txns: impl IntoIterator<Item = AbortedTxn>) {
        self.aborted
            .extend(txns.into_iter().map(|t| Reverse(ByFirstOffset(t))));
    }

    fn consume_aborted_up_to(&mut self, offset: i64) {
        while self
            .aborted
            .peek()
            .is_some_and(|Reverse(t)| t.0.first_offset <= offset)
        {
            let Reverse(ByFirstOffset(txn)) = self.aborted.pop().expect("peeked");
            self.ongoing_aborted
                .entry(txn.producer_id)
                .or_insert(AbortedTxnMetadata {
                    txn,
                    last_observed_batch_offset: None,
                });
        }
    }

    /// A control batch read: whether it may be discarded. `control_type` is its first record's
    /// type, `None` for a control batch already emptied by an earlier clean (discardable).
    pub(crate) fn on_control_batch_read(
        &mut self,
        last_offset: i64,
        producer_id: i64,
        control_type: Option<i16>,
    ) -> bool {
        self.consume_aborted_up_to(last_offset);
        match control_type {
            None => true,
            Some(CONTROL_ABORT) => match self.ongoing_aborted.remove(&producer_id) {
                Some(m) if m.last_observed_batch_offset.is_some() => {
                    self.retained_aborts.push(m.txn);
                    false
                }
                _ => true,
            },
            Some(CONTROL_COMMIT) => !self.ongoing_committed.remove(&producer_id),
            Some(_) => false,
        }
    }

    /// A data batch read: whether it belongs to an aborted transaction (discardable).
    pub(crate) fn on_batch_read(
        &mut self,
        last_offset: i64,
        producer_id: i64,
        transactional: bool,
    ) -> bool {
        self.consume_aborted_up_to(last_offset);
        if !transactional {
            return false;
        }
        match self.ongoing_aborted.get_mut(&producer_id) {
            Some(m) => {
                m.last_observed_batch_offset = Some(last_offset);
                true
            }
            None => {
                self.ongoing_committed.insert(producer_id);
                false
            }
        }
    }

    /// The aborted transactions whose marker was kept since the last call (for the `.txnindex`
    /// of the segment being written).
    pub(crate) fn take_retained_aborts(&mut self) -> Vec<AbortedTxn> {
        std::mem::take(&mut self.retained_aborts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn txn(pid: i64, first: i64, last: i64) -> AbortedTxn {
        AbortedTxn {
            producer_id: pid,
            first_offset: first,
            last_offset: last,
            last_stable_offset: last + 1,
        }
    }

    #[test]
    fn aborted_batches_discarded_marker_kept_while_batches_seen() {
        let mut m = CleanedTransactionMetadata::default();
        m.add_aborted_transactions([txn(1, 10, 20)]);
        // Before the transaction starts: a transactional batch of pid 1 is a committed one.
        assert!(!m.on_batch_read(5, 1, true));
        assert!(!m.on_control_batch_read(6, 1, Some(CONTROL_COMMIT)));
        assert!(m.on_batch_read(12, 1, true));
        assert!(!m.on_batch_read(13, 2, false));
        assert!(!m.on_control_batch_read(20, 1, Some(CONTROL_ABORT)));
        assert_eq!(m.take_retained_aborts(), vec![txn(1, 10, 20)]);
        // A second pass where the batches are gone: the marker may go.
        let mut m = CleanedTransactionMetadata::default();
        m.add_aborted_transactions([txn(1, 10, 20)]);
        assert!(m.on_control_batch_read(20, 1, Some(CONTROL_ABORT)));
        assert!(m.take_retained_aborts().is_empty());
        // A commit marker with no batch seen may go; an emptied control batch may go.
        assert!(m.on_control_batch_read(30, 3, Some(CONTROL_COMMIT)));
        assert!(m.on_control_batch_read(31, 3, None));
        // Other control types stay.
        assert!(!m.on_control_batch_read(32, 3, Some(2)));
    }
}

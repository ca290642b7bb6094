//! The transactions checker: pure properties over what the transactional producers were told
//! (each transaction's intended and known outcome, the offsets its records were acknowledged
//! at), what the read_committed consumers were served (records, and how far each had read in
//! each partition), and the final read_committed read of the topic after the nemesis healed,
//! which is the reference. No I/O, so unit tests feed it crafted histories.
//!
//! A transaction is known **committed** when `commit_transaction` succeeded, known **aborted**
//! when EndTxn(commit) was never asked for it (aborted on purpose, or a record failed and the
//! producer aborted or was replaced): only EndTxn(commit) can commit a transaction, so an
//! abort that itself fails still cannot end in a commit. A commit that failed (timed out,
//! coordinator moved, connection lost, fenced) is **unknown**: either outcome is accepted, but
//! all or nothing.
//!
//! The rules:
//! - **aborted read** (G1a): no record of a known-aborted transaction is served to a
//!   read_committed consumer, nor is it in the final read.
//! - **lost commit**: every record of a known-committed transaction is in the final read (at
//!   the offset its send was acknowledged at: **wrong offset** otherwise).
//! - **partial**: in the final read, a transaction has all its records or none.
//! - **partial view** / **skipped**: a consumer's position in a partition only moves past an
//!   offset once the partition's last stable offset is past it, i.e. once every transaction
//!   with a record there is decided (marker written). So for each consumer instance (which reads
//!   every partition from offset 0) and partition, every record of the final read below the
//!   highest position it reached must have been served to it. One missed while the consumer was
//!   served another record of the same transaction is a transaction seen partly; otherwise the
//!   consumer skipped a committed record.
//! - **vanished**: everything a consumer was served is in the final read at the same offset
//!   (a record of an unknown transaction served and then gone means the consumer read a
//!   transaction that ended aborted, or the final read lost it).
//! - **duplicate**: a record is in the final read at most once (a consumer is served it at one
//!   offset only).
//! - **reordered**: per partition, one producer's records are in the final read in the order of
//!   its transactions (a producer runs one transaction at a time) and, within one, of their
//!   index.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use super::checker::FinalLog;

/// A transactional record's value: "t<producer>-<txn>-<index>-<c|a>", the last part the
/// outcome intended when it was sent.
pub fn txn_value(producer: usize, txn: u64, index: usize, commit: bool) -> String {
    format!(
        "t{producer}-{txn}-{index}-{}",
        if commit { 'c' } else { 'a' }
    )
}

/// (producer, txn, index, intended commit).
pub fn parse_txn_value(v: &str) -> Option<(usize, u64, usize, bool)> {
    let mut it = v.strip_prefix('t')?.split('-');
    let p = it.next()?.parse().ok()?;
    let t = it.next()?.parse().ok()?;
    let i = it.next()?.parse().ok()?;
    let c = match it.next()? {
        "c" => true,
        "a" => false,
        _ => return None,
    };
    it.next().is_none().then_some((p, t, i, c))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TxnOutcome {
    Committed,
    Aborted,
    Unknown,
}

/// One transaction as its producer knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Txn {
    pub producer: usize,
    pub txn: u64,
    pub intended_commit: bool,
    pub outcome: TxnOutcome,
    /// Per record index: its partition and the offset its send was acknowledged at.
    pub records: Vec<(i32, Option<i64>)>,
}

/// A record served to a read_committed consumer instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Served {
    /// The consumer instance ("c<k>.<n>": a replaced consumer starts again from offset 0).
    pub consumer: String,
    pub partition: i32,
    pub offset: i64,
    pub value: String,
}

#[derive(Debug, Clone, Default)]
pub struct TxnHistory {
    pub txns: Vec<Txn>,
    pub served: Vec<Served>,
    /// (consumer instance, partition) -> the highest position it reached.
    pub progress: BTreeMap<(String, i32), i64>,
    pub first_error: Option<String>,
    /// Producer instances created (1 per producer plus one per re-init).
    pub producer_instances: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum TxnViolation {
    AbortedRead {
        by: String,
        value: String,
        partition: i32,
        offset: i64,
    },
    LostCommit {
        producer: usize,
        txn: u64,
        records: Vec<(i32, Option<i64>)>,
    },
    Partial {
        producer: usize,
        txn: u64,
        outcome: TxnOutcome,
        visible: Vec<(usize, i32, i64)>,
        size: usize,
    },
    PartialView {
        consumer: String,
        producer: usize,
        txn: u64,
        served: Vec<(i32, i64)>,
        missed: Vec<(i32, i64)>,
    },
    Skipped {
        consumer: String,
        partition: i32,
        offset: i64,
        value: String,
        position: i64,
    },
    Vanished {
        consumer: String,
        partition: i32,
        offset: i64,
        seen: String,
        now: Option<String>,
    },
    Duplicate {
        by: String,
        value: String,
        offsets: Vec<(i32, i64)>,
    },
    WrongOffset {
        value: String,
        acked: (i32, i64),
        found: (i32, i64),
    },
    Reordered {
        partition: i32,
        earlier: String,
        later: String,
    },
    /// A record of a transaction its producer never began.
    Phantom {
        value: String,
        partition: i32,
        offset: i64,
    },
}

impl TxnViolation {
    pub fn kind(&self) -> &'static str {
        match self {
            TxnViolation::AbortedRead { .. } => "txn-aborted-read",
            TxnViolation::LostCommit { .. } => "txn-lost-commit",
            TxnViolation::Partial { .. } => "txn-partial",
            TxnViolation::PartialView { .. } => "txn-partial-view",
            TxnViolation::Skipped { .. } => "txn-skipped",
            TxnViolation::Vanished { .. } => "txn-vanished",
            TxnViolation::Duplicate { .. } => "txn-duplicate",
            TxnViolation::WrongOffset { .. } => "txn-wrong-offset",
            TxnViolation::Reordered { .. } => "txn-reordered",
            TxnViolation::Phantom { .. } => "txn-phantom",
        }
    }
}

impl std::fmt::Display for TxnViolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use TxnViolation::*;
        match self {
            AbortedRead {
                by,
                value,
                partition,
                offset,
            } => write!(
                f,
                "aborted read: {by} read {value} (partition {partition} offset {offset}) of a \
                 transaction never committed"
            ),
            LostCommit {
                producer,
                txn,
                records,
            } => write!(
                f,
                "lost commit: transaction {txn} of producer {producer} was committed, none of \
                 its records {records:?} (partition, acked offset) is in the final read"
            ),
            Partial {
                producer,
                txn,
                outcome,
                visible,
                size,
            } => write!(
                f,
                "partial: transaction {txn} of producer {producer} ({outcome:?}) has {} of its \
                 {size} records in the final read: (index, partition, offset) {visible:?}",
                visible.len()
            ),
            PartialView {
                consumer,
                producer,
                txn,
                served,
                missed,
            } => write!(
                f,
                "partial view: consumer {consumer} was served {served:?} of transaction {txn} \
                 of producer {producer} and read past {missed:?} of it without them"
            ),
            Skipped {
                consumer,
                partition,
                offset,
                value,
                position,
            } => write!(
                f,
                "skipped: consumer {consumer} reached position {position} in partition \
                 {partition} without being served committed {value} at offset {offset}"
            ),
            Vanished {
                consumer,
                partition,
                offset,
                seen,
                now,
            } => write!(
                f,
                "vanished: consumer {consumer} was served {seen} at partition {partition} \
                 offset {offset}, the final read has {now:?} there"
            ),
            Duplicate { by, value, offsets } => {
                write!(f, "duplicate: {by} has {value} at {offsets:?}")
            }
            WrongOffset {
                value,
                acked,
                found,
            } => write!(
                f,
                "wrong offset: {value} was acknowledged at {acked:?}, the final read has it at \
                 {found:?}"
            ),
            Reordered {
                partition,
                earlier,
                later,
            } => write!(
                f,
                "reordered: in partition {partition} {later} comes before {earlier}, which was \
                 produced first"
            ),
            Phantom {
                value,
                partition,
                offset,
            } => write!(
                f,
                "phantom: {value} at partition {partition} offset {offset} belongs to no \
                 transaction its producer began"
            ),
        }
    }
}

#[derive(Debug, Default)]
pub struct TxnReport {
    pub committed: u64,
    pub aborted: u64,
    /// Unknown outcomes the final read shows committed / aborted.
    pub unknown_committed: u64,
    pub unknown_aborted: u64,
    pub records_in_log: u64,
    pub unparsable: u64,
    /// Records the consumers were served (all instances).
    pub served: u64,
    pub violations: Vec<TxnViolation>,
}

impl TxnReport {
    pub fn counts(&self) -> BTreeMap<&'static str, u64> {
        let mut m = BTreeMap::new();
        for v in &self.violations {
            *m.entry(v.kind()).or_insert(0) += 1;
        }
        m
    }
}

type Key = (usize, u64, usize);

pub fn check_txns(h: &TxnHistory, log: &FinalLog) -> TxnReport {
    let mut r = TxnReport {
        served: h.served.len() as u64,
        ..Default::default()
    };
    let txns: HashMap<(usize, u64), &Txn> =
        h.txns.iter().map(|t| ((t.producer, t.txn), t)).collect();
    // (producer, txn, index) -> places in the final read; (partition, offset) -> value.
    let mut places: BTreeMap<Key, Vec<(i32, i64)>> = BTreeMap::new();
    let mut at: HashMap<(i32, i64), &str> = HashMap::new();
    for (&p, recs) in log {
        // producer -> the last (txn, index, value) seen in this partition
        let mut last: HashMap<usize, (u64, usize, &str)> = HashMap::new();
        for (o, v) in recs {
            r.records_in_log += 1;
            at.insert((p, *o), v.as_str());
            let Some((producer, txn, index, _)) = parse_txn_value(v) else {
                r.unparsable += 1;
                continue;
            };
            places
                .entry((producer, txn, index))
                .or_default()
                .push((p, *o));
            if !txns.contains_key(&(producer, txn)) {
                r.violations.push(TxnViolation::Phantom {
                    value: v.clone(),
                    partition: p,
                    offset: *o,
                });
            }
            if let Some(&(lt, li, lv)) = last.get(&producer) {
                if (txn, index) <= (lt, li) {
                    r.violations.push(TxnViolation::Reordered {
                        partition: p,
                        earlier: v.clone(),
                        later: lv.to_string(),
                    });
                }
            }
            last.insert(producer, (txn, index, v.as_str()));
        }
    }
    for (&(producer, txn, index), ps) in &places {
        if ps.len() > 1 {
            let intended = txns.get(&(producer, txn)).is_none_or(|t| t.intended_commit);
            r.violations.push(TxnViolation::Duplicate {
                by: "the final read".into(),
                value: txn_value(producer, txn, index, intended),
                offsets: ps.clone(),
            });
        }
    }

    // Each transaction: all or nothing, as its known outcome allows.
    for t in &h.txns {
        let size = t.records.len();
        let visible: Vec<(usize, i32, i64)> = (0..size)
            .filter_map(|i| {
                places
                    .get(&(t.producer, t.txn, i))
                    .and_then(|ps| ps.first())
                    .map(|&(p, o)| (i, p, o))
            })
            .collect();
        match t.outcome {
            TxnOutcome::Committed => r.committed += 1,
            TxnOutcome::Aborted => r.aborted += 1,
            TxnOutcome::Unknown if visible.is_empty() => r.unknown_aborted += 1,
            TxnOutcome::Unknown => r.unknown_committed += 1,
        }
        if t.outcome == TxnOutcome::Aborted {
            for &(i, p, o) in &visible {
                r.violations.push(TxnViolation::AbortedRead {
                    by: "the final read".into(),
                    value: txn_value(t.producer, t.txn, i, t.intended_commit),
                    partition: p,
                    offset: o,
                });
            }
        } else if visible.is_empty() {
            if t.outcome == TxnOutcome::Committed && size > 0 {
                r.violations.push(TxnViolation::LostCommit {
                    producer: t.producer,
                    txn: t.txn,
                    records: t.records.clone(),
                });
            }
        } else if visible.len() < size {
            r.violations.push(TxnViolation::Partial {
                producer: t.producer,
                txn: t.txn,
                outcome: t.outcome,
                visible,
                size,
            });
        } else {
            for &(i, p, o) in &visible {
                if let Some((ap, Some(ao))) = t.records.get(i).copied() {
                    if (ap, ao) != (p, o) {
                        r.violations.push(TxnViolation::WrongOffset {
                            value: txn_value(t.producer, t.txn, i, t.intended_commit),
                            acked: (ap, ao),
                            found: (p, o),
                        });
                    }
                }
            }
        }
    }

    // The consumers' views.
    let mut by_consumer: BTreeMap<&str, Vec<&Served>> = BTreeMap::new();
    for s in &h.served {
        by_consumer.entry(s.consumer.as_str()).or_default().push(s);
    }
    let no_served = Vec::new();
    let consumers: BTreeSet<&str> = by_consumer
        .keys()
        .copied()
        .chain(h.progress.keys().map(|(c, _)| c.as_str()))
        .collect();
    for c in consumers {
        let served = by_consumer.get(c).unwrap_or(&no_served);
        let mut got: HashSet<(i32, i64)> = HashSet::new();
        // key -> the offsets it was served at; txn -> its records served
        let mut keys: BTreeMap<Key, BTreeSet<(i32, i64)>> = BTreeMap::new();
        let mut txn_served: HashMap<(usize, u64), BTreeSet<(i32, i64)>> = HashMap::new();
        let mut reported: HashSet<(i32, i64)> = HashSet::new();
        for s in served {
            got.insert((s.partition, s.offset));
            let now = at.get(&(s.partition, s.offset)).copied();
            let parsed = parse_txn_value(&s.value);
            if let Some((producer, txn, index, _)) = parsed {
                keys.entry((producer, txn, index))
                    .or_default()
                    .insert((s.partition, s.offset));
                txn_served
                    .entry((producer, txn))
                    .or_default()
                    .insert((s.partition, s.offset));
            }
            if !reported.insert((s.partition, s.offset)) {
                continue;
            }
            let aborted = parsed
                .and_then(|(p, t, _, _)| txns.get(&(p, t)))
                .is_some_and(|t| t.outcome == TxnOutcome::Aborted);
            if aborted {
                r.violations.push(TxnViolation::AbortedRead {
                    by: format!("consumer {c}"),
                    value: s.value.clone(),
                    partition: s.partition,
                    offset: s.offset,
                });
            } else if now != Some(s.value.as_str()) {
                r.violations.push(TxnViolation::Vanished {
                    consumer: c.to_string(),
                    partition: s.partition,
                    offset: s.offset,
                    seen: s.value.clone(),
                    now: now.map(str::to_string),
                });
            }
        }
        for (&(producer, txn, index), offsets) in &keys {
            if offsets.len() > 1 {
                let intended = txns.get(&(producer, txn)).is_none_or(|t| t.intended_commit);
                r.violations.push(TxnViolation::Duplicate {
                    by: format!("consumer {c}"),
                    value: txn_value(producer, txn, index, intended),
                    offsets: offsets.iter().copied().collect(),
                });
            }
        }
        // Everything of the final read below the consumer's highest position was served to it.
        let mut missed_by_txn: BTreeMap<(usize, u64), Vec<(i32, i64)>> = BTreeMap::new();
        for ((pc, p), &position) in &h.progress {
            if pc != c {
                continue;
            }
            let p = *p;
            let Some(recs) = log.get(&p) else { continue };
            for (o, v) in recs.iter().take_while(|(o, _)| *o < position) {
                if got.contains(&(p, *o)) {
                    continue;
                }
                match parse_txn_value(v) {
                    Some((producer, txn, _, _)) if txn_served.contains_key(&(producer, txn)) => {
                        missed_by_txn
                            .entry((producer, txn))
                            .or_default()
                            .push((p, *o))
                    }
                    _ => r.violations.push(TxnViolation::Skipped {
                        consumer: c.to_string(),
                        partition: p,
                        offset: *o,
                        value: v.clone(),
                        position,
                    }),
                }
            }
        }
        for ((producer, txn), missed) in missed_by_txn {
            r.violations.push(TxnViolation::PartialView {
                consumer: c.to_string(),
                producer,
                txn,
                served: txn_served[&(producer, txn)].iter().copied().collect(),
                missed,
            });
        }
    }
    r
}

#[cfg(test)]
#[path = "txn_checker_tests.rs"]
mod tests;

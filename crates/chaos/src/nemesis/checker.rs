//! The checker: pure functions from what the clients saw (the history) and what the topic
//! holds at the end (the final log) to violations. Owns the safety properties of the nemesis
//! run; no I/O here, so unit tests can feed it synthetic histories.
//!
//! Properties, per the issue:
//! - every acknowledged record is in the final log exactly once, at the offset its ack named;
//! - per producer and partition, acknowledged records are in the order they were sent;
//! - every (partition, offset) a consumer saw holds the same value in the final log: nothing a
//!   consumer read (only committed data is served) may later vanish or change.

use std::collections::{BTreeMap, HashMap};

/// A record value is "p<producer>-<seq>".
pub fn value_of(producer: usize, seq: u64) -> String {
    format!("p{producer}-{seq}")
}

pub fn parse_value(v: &str) -> Option<(usize, u64)> {
    let (p, s) = v.strip_prefix('p')?.split_once('-')?;
    Some((p.parse().ok()?, s.parse().ok()?))
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acked {
    pub producer: usize,
    pub seq: u64,
    pub partition: i32,
    pub offset: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    pub consumer: usize,
    pub partition: i32,
    pub offset: i64,
    pub value: String,
}

/// Everything the clients recorded.
#[derive(Debug, Default)]
pub struct History {
    pub sent: u64,
    pub acked: Vec<Acked>,
    /// Sends that failed, as (producer, seq): indeterminate, they may or may not be in the log.
    pub failed: Vec<(usize, u64)>,
    /// Sends with no outcome when the producers were stopped (also indeterminate).
    pub pending: u64,
    pub first_error: Option<String>,
    pub observed: Vec<Observed>,
}

/// partition -> (offset, value) in offset order, read back after the run.
pub type FinalLog = BTreeMap<i32, Vec<(i64, String)>>;

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Violation {
    /// An acknowledged record is not in the log.
    Lost {
        value: String,
        partition: i32,
        offset: i64,
    },
    /// An acknowledged record is in the log more than once.
    Duplicate {
        value: String,
        offsets: Vec<(i32, i64)>,
    },
    /// The ack named another place than where the record is.
    WrongOffset {
        value: String,
        acked: (i32, i64),
        found: (i32, i64),
    },
    /// Two acknowledged records of one producer in one partition are in the log in the
    /// opposite order to the one they were sent in.
    Reordered {
        partition: i32,
        earlier: String,
        later: String,
    },
    /// A consumer saw a record at an offset that now holds something else or nothing.
    Vanished {
        consumer: usize,
        partition: i32,
        offset: i64,
        seen: String,
        now: Option<String>,
    },
}

impl Violation {
    pub fn kind(&self) -> &'static str {
        match self {
            Violation::Lost { .. } => "lost",
            Violation::Duplicate { .. } => "duplicate",
            Violation::WrongOffset { .. } => "wrong-offset",
            Violation::Reordered { .. } => "reordered",
            Violation::Vanished { .. } => "consumer-saw-vanished",
        }
    }
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Violation::Lost {
                value,
                partition,
                offset,
            } => write!(
                f,
                "lost: {value}, acknowledged at partition {partition} offset {offset}, is not in \
                 the log"
            ),
            Violation::Duplicate { value, offsets } => {
                write!(
                    f,
                    "duplicate: acknowledged {value} is in the log at {offsets:?}"
                )
            }
            Violation::WrongOffset {
                value,
                acked,
                found,
            } => write!(
                f,
                "wrong offset: {value} acknowledged at (partition, offset) {acked:?}, found at \
                 {found:?}"
            ),
            Violation::Reordered {
                partition,
                earlier,
                later,
            } => write!(
                f,
                "reordered: in partition {partition}, {later} comes before {earlier}, which was \
                 sent (and acknowledged) first"
            ),
            Violation::Vanished {
                consumer,
                partition,
                offset,
                seen,
                now,
            } => write!(
                f,
                "consumer {consumer} saw {seen} at partition {partition} offset {offset}; the \
                 log now has {}",
                now.as_deref().unwrap_or("nothing there")
            ),
        }
    }
}

#[derive(Debug, Default)]
pub struct Report {
    pub records_in_log: u64,
    /// Values in the log more than once that were never acknowledged (failed sends): not a
    /// violation of the acked-records property, but counted.
    pub unacked_duplicates: u64,
    pub unparsable: u64,
    /// Failed sends that are in the log anyway (allowed: a failure is indeterminate).
    pub failed_present: u64,
    pub violations: Vec<Violation>,
}

impl Report {
    pub fn counts(&self) -> BTreeMap<&'static str, u64> {
        let mut m = BTreeMap::new();
        for v in &self.violations {
            *m.entry(v.kind()).or_insert(0) += 1;
        }
        m
    }
}

pub fn check(h: &History, log: &FinalLog) -> Report {
    let mut r = Report::default();
    // value -> every place it is in the log
    let mut places: HashMap<&str, Vec<(i32, i64)>> = HashMap::new();
    // (partition, offset) -> value
    let mut at: HashMap<(i32, i64), &str> = HashMap::new();
    for (&p, recs) in log {
        for (o, v) in recs {
            r.records_in_log += 1;
            if parse_value(v).is_none() {
                r.unparsable += 1;
            }
            places.entry(v.as_str()).or_default().push((p, *o));
            at.insert((p, *o), v.as_str());
        }
    }
    let mut acked_values = std::collections::HashSet::new();
    // (producer, partition) -> [(seq, offset in the log)]
    let mut order: BTreeMap<(usize, i32), Vec<(u64, i64)>> = BTreeMap::new();
    for a in &h.acked {
        let value = value_of(a.producer, a.seq);
        acked_values.insert(value.clone());
        match places.get(value.as_str()) {
            None => r.violations.push(Violation::Lost {
                value,
                partition: a.partition,
                offset: a.offset,
            }),
            Some(ps) => {
                if ps.len() > 1 {
                    r.violations.push(Violation::Duplicate {
                        value: value.clone(),
                        offsets: ps.clone(),
                    });
                }
                if !ps.contains(&(a.partition, a.offset)) {
                    r.violations.push(Violation::WrongOffset {
                        value: value.clone(),
                        acked: (a.partition, a.offset),
                        found: ps[0],
                    });
                }
                // The first place it is in the log stands for it in the order check.
                let (p, o) = ps[0];
                order.entry((a.producer, p)).or_default().push((a.seq, o));
            }
        }
    }
    r.failed_present = h
        .failed
        .iter()
        .filter(|(k, seq)| places.contains_key(value_of(*k, *seq).as_str()))
        .count() as u64;
    r.unacked_duplicates = places
        .iter()
        .filter(|(v, ps)| ps.len() > 1 && !acked_values.contains(**v))
        .count() as u64;
    for ((producer, partition), mut recs) in order {
        // In send order, the log offsets must increase; report each inversion against the
        // highest offset seen so far once.
        recs.sort_unstable();
        let mut max: Option<(u64, i64)> = None;
        for (seq, off) in recs {
            if let Some((mseq, moff)) = max {
                if off < moff {
                    r.violations.push(Violation::Reordered {
                        partition,
                        earlier: value_of(producer, mseq),
                        later: value_of(producer, seq),
                    });
                    continue;
                }
            }
            max = Some((seq, off));
        }
    }
    // Each distinct (consumer, partition, offset, value) once.
    let mut seen = std::collections::HashSet::new();
    for o in &h.observed {
        if !seen.insert((o.consumer, o.partition, o.offset, o.value.as_str())) {
            continue;
        }
        let now = at.get(&(o.partition, o.offset)).copied();
        if now != Some(o.value.as_str()) {
            r.violations.push(Violation::Vanished {
                consumer: o.consumer,
                partition: o.partition,
                offset: o.offset,
                seen: o.value.clone(),
                now: now.map(str::to_string),
            });
        }
    }
    r.violations.sort();
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acked(producer: usize, seq: u64, partition: i32, offset: i64) -> Acked {
        Acked {
            producer,
            seq,
            partition,
            offset,
        }
    }

    /// Producer 0 sends seq 0..4 to partition 0, producer 1 seq 0..2 to partition 1; all acked
    /// at the offsets they are at.
    fn clean() -> (History, FinalLog) {
        let mut h = History::default();
        let mut log = FinalLog::new();
        for s in 0..4 {
            h.acked.push(acked(0, s, 0, s as i64));
            log.entry(0).or_default().push((s as i64, value_of(0, s)));
        }
        for s in 0..2 {
            h.acked.push(acked(1, s, 1, s as i64));
            log.entry(1).or_default().push((s as i64, value_of(1, s)));
        }
        h.observed.push(Observed {
            consumer: 0,
            partition: 0,
            offset: 2,
            value: value_of(0, 2),
        });
        (h, log)
    }

    #[test]
    fn a_clean_history_passes() {
        let (h, log) = clean();
        let r = check(&h, &log);
        assert!(r.violations.is_empty(), "{:?}", r.violations);
        assert_eq!(r.records_in_log, 6);
    }

    #[test]
    fn a_duplicate_is_reported() {
        let (h, mut log) = clean();
        log.get_mut(&0).unwrap().push((4, value_of(0, 1)));
        let r = check(&h, &log);
        assert_eq!(r.counts().get("duplicate"), Some(&1), "{:?}", r.violations);
    }

    #[test]
    fn a_reordering_is_reported() {
        let (h, mut log) = clean();
        // seq 1 and 2 swapped in the log (and so also at other offsets than acked).
        let p0 = log.get_mut(&0).unwrap();
        p0[1].1 = value_of(0, 2);
        p0[2].1 = value_of(0, 1);
        let r = check(&h, &log);
        assert_eq!(r.counts().get("reordered"), Some(&1), "{:?}", r.violations);
        assert_eq!(
            r.counts().get("wrong-offset"),
            Some(&2),
            "{:?}",
            r.violations
        );
    }

    #[test]
    fn a_lost_record_is_reported() {
        let (h, mut log) = clean();
        log.get_mut(&1).unwrap().pop();
        let r = check(&h, &log);
        let lost: Vec<_> = r.violations.iter().filter(|v| v.kind() == "lost").collect();
        assert_eq!(lost.len(), 1, "{:?}", r.violations);
        assert!(lost[0].to_string().contains("p1-1"), "{}", lost[0]);
    }

    #[test]
    fn a_consumer_seen_offset_that_changed_is_reported() {
        let (mut h, mut log) = clean();
        // A consumer saw an uncommitted record that a new leader later truncated and
        // overwrote, and another that vanished entirely.
        h.observed.push(Observed {
            consumer: 1,
            partition: 1,
            offset: 1,
            value: "p9-9".into(),
        });
        h.observed.push(Observed {
            consumer: 1,
            partition: 0,
            offset: 7,
            value: "p0-7".into(),
        });
        log.get_mut(&0).unwrap().truncate(4);
        let r = check(&h, &log);
        assert_eq!(
            r.counts().get("consumer-saw-vanished"),
            Some(&2),
            "{:?}",
            r.violations
        );
        assert_eq!(r.violations.len(), 2, "{:?}", r.violations);
    }

    #[test]
    fn unacknowledged_records_may_be_missing_or_present() {
        let (mut h, mut log) = clean();
        h.failed = vec![(1, 5), (1, 6)];
        // A failed send that made it anyway, once.
        log.get_mut(&1).unwrap().push((2, value_of(1, 5)));
        let r = check(&h, &log);
        assert!(r.violations.is_empty(), "{:?}", r.violations);
        assert_eq!(r.failed_present, 1);
    }

    #[test]
    fn values_round_trip() {
        assert_eq!(parse_value(&value_of(3, 1234)), Some((3, 1234)));
        assert_eq!(parse_value("x"), None);
    }
}

//! The committed-offsets checker: a pure function from what the clients saw (acknowledged
//! commits and OffsetFetch answers, with the times they happened) to violations. No I/O here,
//! so the unit tests below feed it crafted histories and show it catches each fault.
//!
//! The workload commits each partition's offsets sequentially and increasing, so the latest
//! commit acknowledged before a fetch began is the highest one acknowledged before then.
//! Properties, per (group, partition):
//! - a fetch that began after a commit was acknowledged answers at least that commit's offset
//!   (else the commit was lost: the coordinator answers an older state);
//! - such a fetch answers an offset at all (else the committed offset vanished);
//! - a fetch never answers less than a fetch that ended before it began: the coordinator only
//!   serves offsets whose records passed the high watermark, and those survive a failover, so
//!   even an offset whose commit was never acknowledged (the ack was lost with the coordinator)
//!   may not disappear once served.
//!
//! Failed fetches are part of the history (a coordinator moving answers errors for a while) but
//! are never violations.

use std::collections::BTreeMap;
use std::time::Instant;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The coordinator acknowledged a commit of `offset`; `at` is when the answer arrived.
    CommitAcked {
        group: String,
        partition: i32,
        offset: i64,
        at: Instant,
    },
    /// OffsetFetch answered `offset` (`None`: no committed offset) for a request sent at
    /// `started` and answered at `ended`.
    Fetched {
        group: String,
        partition: i32,
        offset: Option<i64>,
        started: Instant,
        ended: Instant,
    },
    /// OffsetFetch failed (kept for the record; not a violation).
    FetchFailed {
        group: String,
        started: Instant,
        ended: Instant,
        error: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// The fetch answered less than a commit acknowledged before it began.
    Lost {
        group: String,
        partition: i32,
        acked: i64,
        fetched: i64,
    },
    /// The fetch answered no offset although a commit was acknowledged before it began.
    Missing {
        group: String,
        partition: i32,
        acked: i64,
    },
    /// The fetch answered less (or nothing) than a fetch that ended before it began.
    Backwards {
        group: String,
        partition: i32,
        earlier: i64,
        fetched: Option<i64>,
    },
}

impl Violation {
    pub fn kind(&self) -> &'static str {
        match self {
            Violation::Lost { .. } => "lost",
            Violation::Missing { .. } => "missing",
            Violation::Backwards { .. } => "backwards",
        }
    }
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Violation::Lost {
                group,
                partition,
                acked,
                fetched,
            } => write!(
                f,
                "lost: {group} partition {partition}: offset {acked} was acknowledged before \
                 the fetch began, the fetch answered {fetched}"
            ),
            Violation::Missing {
                group,
                partition,
                acked,
            } => write!(
                f,
                "missing: {group} partition {partition}: offset {acked} was acknowledged \
                 before the fetch began, the fetch answered no offset"
            ),
            Violation::Backwards {
                group,
                partition,
                earlier,
                fetched,
            } => write!(
                f,
                "backwards: {group} partition {partition}: an earlier fetch answered \
                 {earlier}, a later one {}",
                fetched.map_or("no offset".to_string(), |o| o.to_string())
            ),
        }
    }
}

/// What the checker found, with counts that show the history was not vacuous.
#[derive(Debug, Default)]
pub struct Report {
    pub acked_commits: usize,
    pub fetches: usize,
    pub failed_fetches: usize,
    pub violations: Vec<Violation>,
}

impl Report {
    pub fn counts(&self) -> BTreeMap<&'static str, usize> {
        let mut m = BTreeMap::new();
        for v in &self.violations {
            *m.entry(v.kind()).or_insert(0) += 1;
        }
        m
    }
}

type Key = (String, i32);

pub fn check(history: &[Event]) -> Report {
    let mut r = Report::default();
    let mut acks: BTreeMap<Key, Vec<(Instant, i64)>> = BTreeMap::new();
    // (started, ended, offset)
    let mut fetches: BTreeMap<Key, Vec<(Instant, Instant, Option<i64>)>> = BTreeMap::new();
    for e in history {
        match e {
            Event::CommitAcked {
                group,
                partition,
                offset,
                at,
            } => {
                r.acked_commits += 1;
                acks.entry((group.clone(), *partition))
                    .or_default()
                    .push((*at, *offset));
            }
            Event::Fetched {
                group,
                partition,
                offset,
                started,
                ended,
            } => {
                r.fetches += 1;
                fetches
                    .entry((group.clone(), *partition))
                    .or_default()
                    .push((*started, *ended, *offset));
            }
            Event::FetchFailed { .. } => r.failed_fetches += 1,
        }
    }
    for ((group, partition), mut fs) in fetches {
        let mut acked = acks.remove(&(group.clone(), partition)).unwrap_or_default();
        acked.sort();
        fs.sort_by_key(|f| f.0);
        let mut by_end: Vec<(Instant, Option<i64>)> = fs.iter().map(|f| (f.1, f.2)).collect();
        by_end.sort_by_key(|f| f.0);
        // Sweep the fetches by start time, folding in the acks and the earlier fetches that
        // happened strictly before each start.
        let (mut ai, mut ei) = (0, 0);
        let mut max_acked: Option<i64> = None;
        let mut max_seen: Option<i64> = None;
        for &(started, _, offset) in &fs {
            while ai < acked.len() && acked[ai].0 < started {
                max_acked = max_acked.max(Some(acked[ai].1));
                ai += 1;
            }
            while ei < by_end.len() && by_end[ei].0 < started {
                max_seen = max_seen.max(by_end[ei].1);
                ei += 1;
            }
            if let Some(a) = max_acked {
                match offset {
                    None => r.violations.push(Violation::Missing {
                        group: group.clone(),
                        partition,
                        acked: a,
                    }),
                    Some(o) if o < a => r.violations.push(Violation::Lost {
                        group: group.clone(),
                        partition,
                        acked: a,
                        fetched: o,
                    }),
                    Some(_) => {}
                }
            }
            if let Some(earlier) = max_seen {
                if offset.is_none_or(|o| o < earlier) {
                    r.violations.push(Violation::Backwards {
                        group: group.clone(),
                        partition,
                        earlier,
                        fetched: offset,
                    });
                }
            }
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Instants `ms` milliseconds after a common origin.
    struct Clock(Instant);
    impl Clock {
        fn at(&self, ms: u64) -> Instant {
            self.0 + Duration::from_millis(ms)
        }
    }

    fn ack(c: &Clock, partition: i32, offset: i64, at: u64) -> Event {
        Event::CommitAcked {
            group: "g".into(),
            partition,
            offset,
            at: c.at(at),
        }
    }

    fn fetch(c: &Clock, partition: i32, offset: Option<i64>, started: u64, ended: u64) -> Event {
        Event::Fetched {
            group: "g".into(),
            partition,
            offset,
            started: c.at(started),
            ended: c.at(ended),
        }
    }

    /// Two partitions committed at 10, 20, 30 ms; fetches that overlap commits may answer the
    /// older or the newer offset; a fetch before any commit answers none; failed fetches.
    fn clean(c: &Clock) -> Vec<Event> {
        vec![
            fetch(c, 0, None, 0, 5),
            ack(c, 0, 1, 10),
            ack(c, 1, 1, 10),
            // Began before the second ack: the older offset is fine.
            fetch(c, 0, Some(1), 15, 25),
            ack(c, 0, 2, 20),
            ack(c, 1, 2, 20),
            // Overlaps the third commit, which it already sees (applied before its ack).
            fetch(c, 1, Some(3), 25, 28),
            Event::FetchFailed {
                group: "g".into(),
                started: c.at(26),
                ended: c.at(27),
                error: "NOT_COORDINATOR".into(),
            },
            ack(c, 0, 3, 30),
            ack(c, 1, 3, 30),
            fetch(c, 0, Some(3), 31, 40),
            fetch(c, 1, Some(3), 31, 40),
            // A commit whose ack was lost is visible and stays visible.
            fetch(c, 1, Some(4), 45, 46),
            fetch(c, 1, Some(4), 50, 51),
        ]
    }

    #[test]
    fn a_clean_history_passes() {
        let c = Clock(Instant::now());
        let r = check(&clean(&c));
        assert!(r.violations.is_empty(), "{:?}", r.violations);
        assert_eq!((r.acked_commits, r.fetches, r.failed_fetches), (6, 7, 1));
    }

    #[test]
    fn a_lost_offset_is_caught() {
        // The failover lost the commit of 3: the new coordinator answers 2.
        let c = Clock(Instant::now());
        let mut h = clean(&c);
        h.push(fetch(&c, 0, Some(2), 60, 70));
        let r = check(&h);
        assert_eq!(
            r.violations,
            vec![
                Violation::Lost {
                    group: "g".into(),
                    partition: 0,
                    acked: 3,
                    fetched: 2
                },
                Violation::Backwards {
                    group: "g".into(),
                    partition: 0,
                    earlier: 3,
                    fetched: Some(2)
                },
            ]
        );
    }

    #[test]
    fn a_lost_offset_is_caught_even_when_no_fetch_saw_it_before() {
        let c = Clock(Instant::now());
        let h = vec![
            ack(&c, 2, 7, 10),
            ack(&c, 2, 8, 20),
            fetch(&c, 2, Some(7), 21, 30),
        ];
        let r = check(&h);
        assert_eq!(r.counts(), BTreeMap::from([("lost", 1)]));
    }

    #[test]
    fn a_backwards_offset_is_caught() {
        // Partition 1 served 4 (never acknowledged), then 3: a served offset moved back.
        let c = Clock(Instant::now());
        let mut h = clean(&c);
        h.push(fetch(&c, 1, Some(3), 60, 61));
        let r = check(&h);
        assert_eq!(
            r.violations,
            vec![Violation::Backwards {
                group: "g".into(),
                partition: 1,
                earlier: 4,
                fetched: Some(3)
            }]
        );
    }

    #[test]
    fn a_missing_offset_is_caught() {
        // The new coordinator knows nothing of the group.
        let c = Clock(Instant::now());
        let mut h = clean(&c);
        h.push(fetch(&c, 0, None, 60, 70));
        let r = check(&h);
        assert_eq!(
            r.counts(),
            BTreeMap::from([("backwards", 1), ("missing", 1)])
        );
        assert!(r.violations.contains(&Violation::Missing {
            group: "g".into(),
            partition: 0,
            acked: 3
        }));
    }

    #[test]
    fn fetches_overlapping_an_ack_may_answer_the_older_offset() {
        // Began at 29, the ack of 3 arrived at 30: 2 is a correct answer, and so is 3.
        let c = Clock(Instant::now());
        let h = vec![
            ack(&c, 0, 2, 20),
            ack(&c, 0, 3, 30),
            fetch(&c, 0, Some(2), 29, 35),
            fetch(&c, 0, Some(3), 29, 31),
        ];
        assert!(check(&h).violations.is_empty());
    }

    #[test]
    fn groups_and_partitions_are_checked_apart() {
        let c = Clock(Instant::now());
        let h = vec![
            ack(&c, 0, 9, 10),
            fetch(&c, 1, Some(1), 20, 21),
            Event::Fetched {
                group: "other".into(),
                partition: 0,
                offset: Some(1),
                started: c.at(20),
                ended: c.at(21),
            },
        ];
        assert!(check(&h).violations.is_empty());
    }
}

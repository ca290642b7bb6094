//! The groups checker: pure properties over what the consumer-group members recorded (records
//! received, rebalance callbacks, the partitions held after each poll, acknowledged and failed
//! commits) and what OffsetFetch answered (sampled during the run and once at the end). No I/O,
//! so unit tests feed it crafted histories. Times are microseconds on the run's one monotonic
//! clock.
//!
//! The rules, as Kafka guarantees them:
//! - **skipped**: every acknowledged produced record at an offset below the group's committed
//!   offset of its partition (the final OffsetFetch, or the highest acknowledged commit if
//!   that is higher) was received by some member of the group. Members start from the committed
//!   offset (or the earliest one) and commit only positions past records they received, so a
//!   gap is a record the group never processed.
//! - **offset lost**: an OffsetFetch that began after a commit was acknowledged answers at
//!   least that commit's offset for its partition. The fetches ask with `require_stable`, as a
//!   consumer resuming a partition does: that answer comes from the coordinator's latest state
//!   once it is committed. Without it Kafka answers from the state as of the partition's high
//!   watermark, which a newly elected (or restarted) leader may still have below records the
//!   previous leader had committed, so older offsets may show for a moment: not a guarantee.
//! - **offset backwards**: per partition, the committed offset OffsetFetch answers never
//!   decreases from one sample to a later one, and no acknowledged commit is lower than one
//!   acknowledged before it was sent. The one legitimate way the stored offset can go down is
//!   a commit whose outcome the member never learnt (timed out on a paused or cut-off
//!   coordinator) that the broker applies late, after a newer one: a regression to exactly the
//!   offset of such a commit, sent before the higher offset was acknowledged, is excused and
//!   counted, not reported.
//! - **two owners**: the guarantee is per generation, not per instant, because a member that
//!   was fenced keeps believing it owns its partitions until it hears so.
//!   - classic protocol: the generation is the group's; one generation's assignment gives each
//!     partition to one member. Two member instances holding one partition in the same
//!     generation (as seen after any poll, the generation the member reported then) is a
//!     violation, whatever the times. Generation -1 (reset, rejoining) holds nothing.
//!   - consumer protocol (KIP-848): member epochs are per member, so the rule is the broker's
//!     own: the coordinator gives a partition to a member only once no other member has it
//!     assigned or pending revocation. Checked on the coordinator's records (each member's
//!     current assignment, `ConsumerGroupCurrentMemberAssignment`, replayed in log order, read
//!     back from `__consumer_offsets` after the run): after every record, no partition is held
//!     (assigned or pending revocation) by two members.
//!
//!     The clients' view is also compared (an interval that ended by a revocation must not
//!     contain the start of another member's interval of the partition), but only counted: it
//!     is stronger than Kafka's guarantee. The coordinator (Strom's as Kafka's
//!     `CurrentAssignmentBuilder`) also releases a partition when the member's heartbeat lists
//!     its owned partitions without it, and a member whose poll was held up (a commit waiting
//!     for a restarted coordinator) sends such a heartbeat before it reconciles an assignment
//!     that added the partition, then takes the partition from that older target for one poll
//!     while the new owner has it (seen once in a dozen 30 s runs; Java's membership manager
//!     finishes a reconciliation started before an epoch change the same way).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use super::checker::{value_of, Acked};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Classic,
    Consumer,
}

/// A record a member received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consumed {
    pub member: String,
    pub partition: i32,
    pub offset: i64,
    pub value: String,
    /// The generation (classic) or member epoch the member reported after the poll.
    pub generation: i32,
    pub at: u64,
}

/// What a member held after a poll, recorded when it changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holding {
    pub member: String,
    pub at: u64,
    pub generation: i32,
    pub partitions: Vec<i32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Assigned,
    Revoked,
    Lost,
    /// The member was dropped without callbacks (a poll or close that did not return in time):
    /// what it held ends as if lost.
    Gone,
}

/// A rebalance callback (or the member being dropped).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub member: String,
    pub at: u64,
    pub kind: EventKind,
    pub partitions: Vec<i32>,
    /// The generation / member epoch reported after the poll that ran the callback.
    pub generation: i32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Acked,
    /// The coordinator refused it (not applied).
    Failed,
    /// Timed out or the connection broke: it may be applied, even later.
    Unknown,
}

/// One partition of a commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commit {
    pub member: String,
    pub generation: i32,
    pub partition: i32,
    pub offset: i64,
    pub sent: u64,
    pub done: u64,
    pub outcome: Outcome,
}

/// One OffsetFetch of the group: partition -> committed offset (absent: none committed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    pub start: u64,
    pub end: u64,
    pub offsets: BTreeMap<i32, i64>,
}

/// One `ConsumerGroupCurrentMemberAssignment` record of the group, in log order: the member's
/// assigned and pending-revocation partitions as `(topic id, partition)`, `None` for the
/// tombstone that removes the member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoordinatorAssignment {
    pub offset: i64,
    pub member: String,
    pub epoch: i32,
    pub held: Option<Vec<(String, i32)>>,
}

#[derive(Debug, Clone, Default)]
pub struct GroupHistory {
    pub group: String,
    pub protocol: Option<Protocol>,
    pub consumed: Vec<Consumed>,
    pub holdings: Vec<Holding>,
    pub events: Vec<Event>,
    pub commits: Vec<Commit>,
    /// In the order taken (one sampler at a time, so they do not overlap).
    pub samples: Vec<Sample>,
    /// The OffsetFetch after every member closed.
    pub last: Option<Sample>,
    /// The coordinator's member assignments (consumer protocol), read back after the run;
    /// `None` if they could not be read (reported).
    pub coordinator: Option<Vec<CoordinatorAssignment>>,
    /// Members created (incarnations).
    pub members: u64,
    pub first_error: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum GroupViolation {
    Skipped {
        group: String,
        partition: i32,
        offset: i64,
        value: String,
        committed: i64,
        seen: Option<String>,
    },
    OffsetLost {
        group: String,
        partition: i32,
        acked: i64,
        by: String,
        fetched: Option<i64>,
        at: u64,
    },
    OffsetBackwards {
        group: String,
        partition: i32,
        from: i64,
        to: i64,
        what: String,
    },
    TwoOwners {
        group: String,
        partition: i32,
        members: (String, String),
        what: String,
    },
}

impl GroupViolation {
    pub fn kind(&self) -> &'static str {
        match self {
            GroupViolation::Skipped { .. } => "group-skipped",
            GroupViolation::OffsetLost { .. } => "group-offset-lost",
            GroupViolation::OffsetBackwards { .. } => "group-offset-backwards",
            GroupViolation::TwoOwners { .. } => "group-two-owners",
        }
    }
}

fn secs(us: u64) -> f64 {
    us as f64 / 1e6
}

impl std::fmt::Display for GroupViolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GroupViolation::Skipped {
                group,
                partition,
                offset,
                value,
                committed,
                seen,
            } => write!(
                f,
                "group {group} skipped {value} at partition {partition} offset {offset} (below \
                 its committed offset {committed}){}",
                seen.as_ref()
                    .map(|s| format!("; a member saw {s} there"))
                    .unwrap_or_default()
            ),
            GroupViolation::OffsetLost {
                group,
                partition,
                acked,
                by,
                fetched,
                at,
            } => write!(
                f,
                "group {group} partition {partition}: commit of {acked} by {by} was acknowledged, \
                 OffsetFetch begun later (at {:.2} s) answered {}",
                secs(*at),
                fetched.map_or("nothing".to_string(), |o| o.to_string())
            ),
            GroupViolation::OffsetBackwards {
                group,
                partition,
                from,
                to,
                what,
            } => write!(
                f,
                "group {group} partition {partition}: committed offset went back from {from} to \
                 {to} ({what})"
            ),
            GroupViolation::TwoOwners {
                group,
                partition,
                members,
                what,
            } => write!(
                f,
                "group {group} partition {partition} owned by {} and {} ({what})",
                members.0, members.1
            ),
        }
    }
}

#[derive(Debug, Default)]
pub struct GroupReport {
    /// Distinct (partition, offset) received.
    pub distinct_consumed: u64,
    pub acked_commits: u64,
    pub failed_commits: u64,
    pub unknown_commits: u64,
    /// Rebalance callbacks of each kind (assigned, revoked, lost, gone).
    pub callbacks: BTreeMap<&'static str, u64>,
    /// Distinct generations (classic) or member epochs seen.
    pub generations: u64,
    /// Offset regressions explained by commits of unknown outcome.
    pub excused: u64,
    /// Consumer protocol: overlaps in the clients' view (a member assigned a partition before
    /// its previous owner revoked it), counted, not violations (see the module doc).
    pub client_overlaps: Vec<String>,
    /// Consumer protocol: coordinator records replayed.
    pub coordinator_records: u64,
    pub final_offsets: BTreeMap<i32, i64>,
    pub violations: Vec<GroupViolation>,
}

pub fn check_group(h: &GroupHistory, acked: &[Acked]) -> GroupReport {
    let mut r = GroupReport::default();
    let g = &h.group;
    for c in &h.commits {
        match c.outcome {
            Outcome::Acked => r.acked_commits += 1,
            Outcome::Failed => r.failed_commits += 1,
            Outcome::Unknown => r.unknown_commits += 1,
        }
    }
    for e in &h.events {
        let k = match e.kind {
            EventKind::Assigned => "assigned",
            EventKind::Revoked => "revoked",
            EventKind::Lost => "lost",
            EventKind::Gone => "gone",
        };
        *r.callbacks.entry(k).or_insert(0) += 1;
    }
    r.generations = h
        .holdings
        .iter()
        .map(|x| x.generation)
        .chain(h.consumed.iter().map(|c| c.generation))
        .filter(|&x| x >= 0)
        .collect::<BTreeSet<_>>()
        .len() as u64;
    skipped(h, acked, &mut r);
    offsets(h, &mut r);
    match h.protocol {
        Some(Protocol::Classic) => owners_per_generation(h, &mut r),
        Some(Protocol::Consumer) => {
            owners_by_handover(h, &mut r);
            owners_by_coordinator(h, &mut r);
        }
        None => {}
    }
    let _ = g;
    r.violations.sort();
    r.violations.dedup();
    r
}

fn skipped(h: &GroupHistory, acked: &[Acked], r: &mut GroupReport) {
    // (partition, offset) -> the values members received there.
    let mut seen: HashMap<(i32, i64), BTreeSet<&str>> = HashMap::new();
    for c in &h.consumed {
        seen.entry((c.partition, c.offset))
            .or_default()
            .insert(c.value.as_str());
    }
    r.distinct_consumed = seen.len() as u64;
    let mut bound: BTreeMap<i32, i64> = h
        .last
        .as_ref()
        .map(|s| s.offsets.clone())
        .unwrap_or_default();
    r.final_offsets = bound.clone();
    for c in h.commits.iter().filter(|c| c.outcome == Outcome::Acked) {
        let e = bound.entry(c.partition).or_insert(c.offset);
        *e = (*e).max(c.offset);
    }
    for a in acked {
        let Some(&committed) = bound.get(&a.partition) else {
            continue;
        };
        if a.offset >= committed {
            continue;
        }
        let value = value_of(a.producer, a.seq);
        let got = seen.get(&(a.partition, a.offset));
        if got.is_some_and(|vs| vs.contains(value.as_str())) {
            continue;
        }
        r.violations.push(GroupViolation::Skipped {
            group: h.group.clone(),
            partition: a.partition,
            offset: a.offset,
            value,
            committed,
            seen: got.and_then(|vs| vs.iter().next()).map(|s| s.to_string()),
        });
    }
}

fn offsets(h: &GroupHistory, r: &mut GroupReport) {
    let g = &h.group;
    // A commit of unknown outcome of `p` at exactly `offset`, sent before `before`: the one
    // way the stored offset may legitimately regress to `offset`.
    let stale = |p: i32, offset: i64, before: u64| {
        h.commits.iter().any(|c| {
            c.outcome == Outcome::Unknown
                && c.partition == p
                && c.offset == offset
                && c.sent < before
        })
    };
    let mut acks: Vec<&Commit> = h
        .commits
        .iter()
        .filter(|c| c.outcome == Outcome::Acked)
        .collect();
    acks.sort_by_key(|c| c.done);
    let samples: Vec<&Sample> = h.samples.iter().chain(h.last.iter()).collect();
    // Every sample against the highest commit acknowledged before it began.
    for s in &samples {
        let mut highest: BTreeMap<i32, &Commit> = BTreeMap::new();
        for c in acks.iter().take_while(|c| c.done < s.start) {
            let e = highest.entry(c.partition).or_insert(c);
            if c.offset > e.offset {
                *e = c;
            }
        }
        for (p, c) in highest {
            let got = s.offsets.get(&p).copied();
            if got.is_some_and(|o| o >= c.offset) {
                continue;
            }
            if got.is_some_and(|o| stale(p, o, c.done)) {
                r.excused += 1;
                continue;
            }
            r.violations.push(GroupViolation::OffsetLost {
                group: g.clone(),
                partition: p,
                acked: c.offset,
                by: c.member.clone(),
                fetched: got,
                at: s.start,
            });
        }
    }
    // Samples never decrease (each against every earlier one: one sampler, in order).
    let mut high: BTreeMap<i32, (i64, u64)> = BTreeMap::new();
    for s in &samples {
        for (&p, &o) in &s.offsets {
            match high.get(&p) {
                Some(&(h_o, h_end)) if o < h_o => {
                    if stale(p, o, h_end) {
                        r.excused += 1;
                    } else {
                        r.violations.push(GroupViolation::OffsetBackwards {
                            group: g.clone(),
                            partition: p,
                            from: h_o,
                            to: o,
                            what: format!(
                                "OffsetFetch at {:.2} s after one that answered {h_o}",
                                secs(s.start)
                            ),
                        });
                    }
                }
                Some(&(h_o, _)) if o == h_o => {}
                _ => {
                    high.insert(p, (o, s.end));
                }
            }
        }
    }
    // No acknowledged commit below one acknowledged before it was sent.
    for c2 in &acks {
        let earlier = acks
            .iter()
            .filter(|c1| c1.partition == c2.partition && c1.done < c2.sent && c1.offset > c2.offset)
            .max_by_key(|c1| c1.offset);
        let Some(c1) = earlier else { continue };
        // A stale commit of unknown outcome applied late could have made the member (or the
        // one it took over from) resume below c1.
        let explained = h.commits.iter().any(|x| {
            x.outcome == Outcome::Unknown
                && x.partition == c2.partition
                && x.offset <= c2.offset
                && x.sent < c1.done
        });
        if explained {
            r.excused += 1;
            continue;
        }
        r.violations.push(GroupViolation::OffsetBackwards {
            group: g.clone(),
            partition: c2.partition,
            from: c1.offset,
            to: c2.offset,
            what: format!(
                "{} committed {} (acknowledged at {:.2} s) after {} had {} acknowledged",
                c2.member,
                c2.offset,
                secs(c2.done),
                c1.member,
                c1.offset
            ),
        });
    }
}

fn owners_per_generation(h: &GroupHistory, r: &mut GroupReport) {
    // (generation, partition) -> members holding it then.
    let mut holders: BTreeMap<(i32, i32), BTreeSet<&str>> = BTreeMap::new();
    for x in &h.holdings {
        for &p in &x.partitions {
            holders
                .entry((x.generation, p))
                .or_default()
                .insert(x.member.as_str());
        }
    }
    for c in &h.consumed {
        holders
            .entry((c.generation, c.partition))
            .or_default()
            .insert(c.member.as_str());
    }
    for ((generation, p), ms) in holders {
        if generation < 0 || ms.len() < 2 {
            continue;
        }
        let ms: Vec<&str> = ms.into_iter().collect();
        r.violations.push(GroupViolation::TwoOwners {
            group: h.group.clone(),
            partition: p,
            members: (ms[0].to_string(), ms[1].to_string()),
            what: format!("both in generation {generation}"),
        });
    }
}

/// An ownership interval of one partition by one member.
#[derive(Debug)]
struct Interval<'a> {
    member: &'a str,
    start: u64,
    end: u64,
    revoked: bool,
}

fn owners_by_handover(h: &GroupHistory, r: &mut GroupReport) {
    let mut events: Vec<&Event> = h.events.iter().collect();
    events.sort_by_key(|e| e.at);
    let mut open: HashMap<(&str, i32), u64> = HashMap::new();
    let mut intervals: BTreeMap<i32, Vec<Interval>> = BTreeMap::new();
    for e in &events {
        let m = e.member.as_str();
        let parts: Vec<i32> = if e.kind == EventKind::Gone {
            // Everything the member still holds.
            open.keys()
                .filter(|(om, _)| *om == m)
                .map(|(_, p)| *p)
                .collect()
        } else {
            e.partitions.clone()
        };
        for p in parts {
            match e.kind {
                EventKind::Assigned => {
                    open.entry((m, p)).or_insert(e.at);
                }
                kind => {
                    if let Some(start) = open.remove(&(m, p)) {
                        intervals.entry(p).or_default().push(Interval {
                            member: m,
                            start,
                            end: e.at,
                            revoked: kind == EventKind::Revoked,
                        });
                    }
                }
            }
        }
    }
    for ((m, p), start) in open {
        intervals.entry(p).or_default().push(Interval {
            member: m,
            start,
            end: u64::MAX,
            revoked: false,
        });
    }
    let mut reported = HashSet::new();
    for (p, ivs) in &intervals {
        for a in ivs.iter().filter(|a| a.revoked) {
            for b in ivs.iter().filter(|b| b.member != a.member) {
                if a.start <= b.start
                    && b.start < a.end
                    && reported.insert((*p, a.member, b.member))
                {
                    r.client_overlaps.push(format!(
                        "partition {p}: {} was assigned it at {:.2} s, while {} held it from \
                         {:.2} s until it revoked it at {:.2} s",
                        b.member,
                        secs(b.start),
                        a.member,
                        secs(a.start),
                        secs(a.end)
                    ));
                }
            }
        }
    }
}

/// Replays the coordinator's member assignments: after each record no partition may be held
/// (assigned or pending revocation) by two members.
fn owners_by_coordinator(h: &GroupHistory, r: &mut GroupReport) {
    let Some(records) = &h.coordinator else {
        return;
    };
    let mut records: Vec<&CoordinatorAssignment> = records.iter().collect();
    records.sort_by_key(|c| c.offset);
    r.coordinator_records = records.len() as u64;
    // member -> (epoch, partitions held as (topic id, partition))
    type Held<'a> = (i32, &'a [(String, i32)]);
    let mut held: BTreeMap<&str, Held> = BTreeMap::new();
    let mut reported = HashSet::new();
    for c in records {
        match &c.held {
            Some(parts) => {
                held.insert(c.member.as_str(), (c.epoch, parts.as_slice()));
            }
            None => {
                held.remove(c.member.as_str());
            }
        }
        let mut owner: HashMap<&(String, i32), (&str, i32)> = HashMap::new();
        for (&m, &(epoch, parts)) in &held {
            for tp in parts {
                if let Some(&(other, other_epoch)) = owner.get(tp) {
                    if reported.insert((tp.1, other, m)) {
                        r.violations.push(GroupViolation::TwoOwners {
                            group: h.group.clone(),
                            partition: tp.1,
                            members: (other.to_string(), m.to_string()),
                            what: format!(
                                "the coordinator's records at __consumer_offsets offset {}: \
                                 assigned or pending revocation to both (member epochs \
                                 {other_epoch} and {epoch})",
                                c.offset
                            ),
                        });
                    }
                } else {
                    owner.insert(tp, (m, epoch));
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "groups_checker_tests.rs"]
mod tests;

//! The `uniform` assignor for members subscribed to different topics (Kafka 4.4's
//! `UniformHeterogeneousAssignmentBuilder`).
//!
//! 1. Each member keeps its current partitions of topics it still subscribes to.
//! 2. Unowned partitions are handed out topic by topic (most partitions per subscriber first,
//!    then fewer subscribers, then topic id), each to the subscriber with the fewest partitions
//!    (ties: lower member index), cycling through equally loaded subscribers.
//! 3. Balancing: for every topic with two or more subscribers, partitions move from its most
//!    loaded subscribers (their highest-numbered partitions first) to its least loaded ones
//!    until their counts differ by at most one; the topics are swept again (up to 16 times)
//!    until a whole sweep moves nothing.
//!
//! Members are numbered in member-id order (the order the group spec gives them); every other
//! choice is by the comparators above, so no hash order is involved.

use std::cmp::Ordering;
use std::collections::{BTreeSet, HashMap};

use uuid::Uuid;

use super::{
    partition_count, AssignorError, GroupAssignment, GroupSpec, MemberAssignment,
    SubscribedTopicDescriber,
};

const MAX_ITERATION_COUNT: usize = 16;

/// Java's `Uuid.compareTo`: most then least significant bits, as signed longs.
fn java_uuid_cmp(a: &Uuid, b: &Uuid) -> Ordering {
    let (am, al) = a.as_u64_pair();
    let (bm, bl) = b.as_u64_pair();
    (am as i64, al as i64).cmp(&(bm as i64, bl as i64))
}

struct Builder {
    member_ids: Vec<String>,
    counts: HashMap<Uuid, i32>,
    subscribers: HashMap<Uuid, Vec<usize>>,
    subscribed: BTreeSet<Uuid>,
    target: Vec<MemberAssignment>,
    sizes: Vec<i64>,
    owners: HashMap<Uuid, Vec<i64>>,
}

/// Picks least and most loaded members of one topic's subscribers (Kafka's
/// `MemberAssignmentBalancer`): two ranges over the subscribers sorted by size, the least
/// loaded growing rightwards and the most loaded leftwards as their levels move.
struct Balancer {
    sorted: Vec<usize>,
    least_end: usize,
    least_count: i64,
    next_least: usize,
    most_start: usize,
    most_end: usize,
    most_count: i64,
    next_most: isize,
}

impl Balancer {
    fn new() -> Self {
        Self {
            sorted: Vec::new(),
            least_end: 0,
            least_count: -1,
            next_least: 0,
            most_start: 0,
            most_end: 0,
            most_count: 1,
            next_most: -1,
        }
    }

    /// Returns the spread between the most and least loaded subscriber.
    fn initialize(&mut self, members: &[usize], sizes: &[i64]) -> i64 {
        self.sorted.clear();
        self.sorted.extend_from_slice(members);
        self.sorted
            .sort_by(|a, b| sizes[*a].cmp(&sizes[*b]).then(a.cmp(b)));
        let first = sizes[self.sorted[0]];
        let last = sizes[self.sorted[self.sorted.len() - 1]];
        self.least_end = 0;
        self.least_count = first - 1;
        self.next_least = 0;
        self.most_start = self.sorted.len();
        self.most_end = self.sorted.len();
        self.most_count = last + 1;
        self.next_most = self.sorted.len() as isize - 1;
        last - first
    }

    fn next_least_loaded(&mut self, sizes: &[i64]) -> usize {
        if self.next_least >= self.least_end {
            // The range is full: raise its level and take in the members now at it.
            self.least_count += 1;
            while self.least_end < self.sorted.len()
                && sizes[self.sorted[self.least_end]] == self.least_count
            {
                self.least_end += 1;
            }
            self.next_least = 0;
        }
        let m = self.sorted[self.next_least];
        self.next_least += 1;
        m
    }

    fn next_most_loaded(&mut self, sizes: &[i64]) -> Option<usize> {
        if self.next_most < self.most_start as isize {
            if self.most_end <= self.most_start && self.most_start > 0 {
                // Emptied by exclusions: restart the level from the next member down so the
                // range is sure to grow.
                self.most_count = sizes[self.sorted[self.most_start - 1]];
            } else {
                self.most_count -= 1;
            }
            while self.most_start > 0 && sizes[self.sorted[self.most_start - 1]] == self.most_count
            {
                self.most_start -= 1;
            }
            self.next_most = self.most_end as isize - 1;
        }
        if self.next_most < 0 {
            return None;
        }
        let m = self.sorted[self.next_most as usize];
        self.next_most -= 1;
        Some(m)
    }

    /// The member just returned has nothing to give: swap it past the end of the range.
    fn exclude_most_loaded(&mut self) {
        let at = (self.next_most + 1) as usize;
        self.sorted.swap(at, self.most_end - 1);
        self.most_end -= 1;
    }

    fn is_balanced(&self) -> bool {
        self.most_count - self.least_count <= 1
    }
}

impl Builder {
    fn count(&self, t: &Uuid) -> i32 {
        self.counts[t]
    }

    /// Topics by partitions per subscriber (descending), subscriber count, then id.
    fn sort_topics(&self, topics: impl IntoIterator<Item = Uuid>) -> Vec<Uuid> {
        let mut v: Vec<Uuid> = topics.into_iter().collect();
        v.sort_by(|a, b| {
            let (pa, pb) = (self.count(a) as f64, self.count(b) as f64);
            let (sa, sb) = (self.subscribers[a].len(), self.subscribers[b].len());
            (pb / sb as f64)
                .partial_cmp(&(pa / sa as f64))
                .unwrap_or(Ordering::Equal)
                .then(sa.cmp(&sb))
                .then_with(|| java_uuid_cmp(a, b))
        });
        v
    }

    fn assign(&mut self, t: Uuid, p: i32, m: usize) {
        let old = self.owners[&t][p as usize];
        if old != -1 {
            let old = old as usize;
            if let Some(set) = self.target[old].get_mut(&t) {
                set.remove(&p);
                if set.is_empty() {
                    self.target[old].remove(&t);
                }
            }
            self.sizes[old] -= 1;
        }
        self.target[m].entry(t).or_default().insert(p);
        if let Some(o) = self.owners.get_mut(&t) {
            o[p as usize] = m as i64;
        }
        self.sizes[m] += 1;
    }

    fn assign_remaining(&mut self) {
        let mut unassigned: HashMap<Uuid, Vec<i32>> = HashMap::new();
        for t in &self.subscribed {
            let free: Vec<i32> = (0..self.count(t))
                .filter(|p| self.owners[t][*p as usize] == -1)
                .collect();
            if !free.is_empty() {
                unassigned.insert(*t, free);
            }
        }
        let mut balancer = Balancer::new();
        for t in self.sort_topics(unassigned.keys().copied()) {
            let subs = self.subscribers[&t].clone();
            balancer.initialize(&subs, &self.sizes);
            for p in unassigned[&t].clone() {
                let m = balancer.next_least_loaded(&self.sizes);
                self.assign(t, p, m);
            }
        }
    }

    fn balance(&mut self) {
        let topics: Vec<Uuid> = self
            .subscribed
            .iter()
            .filter(|t| self.subscribers[*t].len() >= 2)
            .copied()
            .collect();
        if topics.is_empty() {
            return;
        }
        let sorted = self.sort_topics(topics);
        let mut last_rebalanced: Option<usize> = None;
        let mut balancer = Balancer::new();
        for _ in 0..MAX_ITERATION_COUNT {
            for (i, t) in sorted.iter().enumerate() {
                if last_rebalanced == Some(i) {
                    // A whole sweep since this topic moved nothing: done.
                    return;
                }
                let moved = self.balance_topic(*t, &mut balancer);
                if moved > 0 || last_rebalanced.is_none() {
                    last_rebalanced = Some(i);
                }
            }
        }
    }

    fn balance_topic(&mut self, t: Uuid, balancer: &mut Balancer) -> usize {
        let subs = self.subscribers[&t].clone();
        if balancer.initialize(&subs, &self.sizes) <= 1 {
            return 0;
        }
        let owners = self.owners[&t].clone();
        // Partitions grouped by owner, so each owner's are a contiguous range.
        let mut partitions: Vec<i32> = (0..self.count(&t)).collect();
        partitions.sort_by_key(|p| (owners[*p as usize], *p));
        let mut start: HashMap<i64, usize> = HashMap::new();
        let mut end: HashMap<i64, usize> = HashMap::new();
        for (i, p) in partitions.iter().enumerate() {
            let o = owners[*p as usize];
            start.entry(o).or_insert(i);
            end.insert(o, i + 1);
        }
        let mut moved = 0;
        while !balancer.is_balanced() {
            // The most loaded subscriber that still has a partition of this topic.
            let mut from = None;
            while let Some(m) = balancer.next_most_loaded(&self.sizes) {
                let key = m as i64;
                match (start.get(&key), end.get(&key)) {
                    (Some(s), Some(e)) if e > s => {
                        from = Some(m);
                        break;
                    }
                    _ => balancer.exclude_most_loaded(),
                }
            }
            let Some(from) = from else { break };
            let e = end[&(from as i64)];
            let p = partitions[e - 1];
            end.insert(from as i64, e - 1);
            let to = balancer.next_least_loaded(&self.sizes);
            if balancer.is_balanced() {
                break;
            }
            self.assign(t, p, to);
            moved += 1;
        }
        moved
    }
}

pub(super) fn assign_heterogeneous(
    group: &GroupSpec,
    topics: &dyn SubscribedTopicDescriber,
) -> Result<GroupAssignment, AssignorError> {
    let member_ids: Vec<String> = group.members().keys().cloned().collect();
    let mut b = Builder {
        member_ids,
        counts: HashMap::new(),
        subscribers: HashMap::new(),
        subscribed: BTreeSet::new(),
        target: Vec::new(),
        sizes: vec![0; group.members().len()],
        owners: HashMap::new(),
    };
    for (mi, m) in group.members().values().enumerate() {
        for t in &m.subscribed_topic_ids {
            let count = partition_count(topics, *t)?;
            b.counts.insert(*t, count);
            b.subscribed.insert(*t);
            b.subscribers.entry(*t).or_default().push(mi);
        }
    }
    if b.subscribed.is_empty() {
        return Ok(GroupAssignment::default());
    }
    for t in &b.subscribed {
        b.owners.insert(*t, vec![-1; b.counts[t] as usize]);
    }
    // 1. Keep what members own of topics they still subscribe to.
    for (mi, m) in group.members().values().enumerate() {
        let mut kept = MemberAssignment::new();
        for (t, ps) in &m.assignment {
            if !m.subscribed_topic_ids.contains(t) {
                continue;
            }
            let count = b.counts[t];
            // A partition the topic no longer has cannot be kept (Kafka never builds one).
            let ps: BTreeSet<i32> = ps.iter().copied().filter(|p| *p < count).collect();
            b.sizes[mi] += ps.len() as i64;
            if let Some(o) = b.owners.get_mut(t) {
                for p in &ps {
                    o[*p as usize] = mi as i64;
                }
            }
            if !ps.is_empty() {
                kept.insert(*t, ps);
            }
        }
        b.target.push(kept);
    }
    b.assign_remaining();
    b.balance();
    Ok(GroupAssignment {
        members: b.member_ids.into_iter().zip(b.target).collect(),
    })
}

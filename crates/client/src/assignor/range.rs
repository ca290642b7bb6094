//! The `range` assignor (kafka-clients' `RangeAssignor`): per topic, the partitions in order are
//! cut into contiguous ranges, one per subscribed member in member order, the first
//! `partitions % members` members getting one extra.
//!
//! Member order: static members (with a `group.instance.id`) first, by instance id, then the
//! dynamic ones by member id — so a static member that rejoins with a new member id keeps its
//! ranges.
//!
//! Rack-aware mode (KIP-881) is used when some member has a rack, some partition has a replica in
//! a member's rack, and the partitions' rack sets are not all the same. Then, before the plain
//! ranges, each member is first given (up to its range quota) partitions with a replica in its
//! rack: topics with the same members and partition count are matched together, partition by
//! partition, so co-partitioned topics stay co-assigned; other topics that need it are matched
//! alone. The rest is handed out as ranges over what is left, and every member's list is sorted.
//!
//! Java's output also depends on iteration orders of its hash maps (the order of topics in a
//! member's list, without racks); they are reproduced with [`super::java_order`].

use std::collections::{BTreeMap, HashMap, HashSet};

use super::java_order;
use super::{
    without_user_data, Assignment, AssignorError, Cluster, PartitionAssignor, Subscription,
    TopicPartition,
};

/// `RangeAssignor`.
#[derive(Debug, Clone, Copy, Default)]
pub struct RangeAssignor;

/// Java's `MemberInfo` order: static members first by instance id, then dynamic by member id.
pub(crate) fn member_order(a: (&str, Option<&str>), b: (&str, Option<&str>)) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    match (a.1, b.1) {
        (Some(x), Some(y)) => java_order::compare(x, y),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => java_order::compare(a.0, b.0),
    }
}

/// The members of `subscriptions` in the order Java iterates its `HashMap` of them (built by
/// inserting the members in member id order, as the map arrives here).
pub(crate) fn java_member_order(subscriptions: &BTreeMap<String, Subscription>) -> Vec<&str> {
    java_order::hash_map_order(subscriptions.keys().map(String::as_str))
}

/// Java's `TopicAssignmentState`: one topic's members, racks and what is left to hand out.
struct TopicState<'a> {
    topic: &'a str,
    /// Subscribed members in member order, with their rack (non-empty `client.rack`).
    consumers: Vec<(&'a str, Option<&'a str>)>,
    needs_rack_aware: bool,
    /// Replica racks by partition id; empty when no member of this topic has a rack.
    partition_racks: HashMap<i32, HashSet<&'a str>>,
    /// Not yet assigned, in partition order.
    unassigned: Vec<i32>,
    assigned: HashMap<&'a str, usize>,
    per_consumer: usize,
    /// How many members may still get one partition above `per_consumer`; Java's counter,
    /// which can go negative.
    remaining_extra: i64,
}

impl<'a> TopicState<'a> {
    fn new(
        topic: &'a str,
        partitions: &[&'a super::PartitionInfo],
        members: &[(&'a str, Option<&'a str>)],
        racks: &HashMap<&'a str, &'a str>,
    ) -> Self {
        let consumers: Vec<(&str, Option<&str>)> = members
            .iter()
            .map(|(m, _)| (*m, racks.get(m).copied()))
            .collect();
        let mut unassigned: Vec<i32> = Vec::with_capacity(partitions.len());
        for p in partitions {
            // A set in Java: a duplicated partition id is kept once.
            if !unassigned.contains(&p.partition) {
                unassigned.push(p.partition);
            }
        }
        let n = consumers.len();
        // Java: 0 and 0 without members (a topic nobody subscribes to never gets here).
        let per_consumer = partitions.len().checked_div(n).unwrap_or(0);
        let remaining_extra = partitions.len().checked_rem(n).unwrap_or(0) as i64;
        let consumer_racks: HashSet<&str> = consumers.iter().filter_map(|(_, r)| *r).collect();
        let mut partition_racks: HashMap<i32, HashSet<&str>> = HashMap::new();
        let mut all_partition_racks: HashSet<&str> = HashSet::new();
        if !consumer_racks.is_empty() {
            for p in partitions {
                let set: HashSet<&str> = p.replica_racks.iter().map(String::as_str).collect();
                all_partition_racks.extend(set.iter().copied());
                partition_racks.insert(p.partition, set);
            }
        }
        // AbstractPartitionAssignor.useRackAwareAssignment: only when racks can match and the
        // partitions do not all have the same racks (then any member is as good as any other).
        let needs_rack_aware = !consumer_racks.is_empty()
            && !consumer_racks.is_disjoint(&all_partition_racks)
            && !partition_racks.values().all(|r| *r == all_partition_racks);
        let assigned = consumers.iter().map(|(m, _)| (*m, 0)).collect();
        Self {
            topic,
            consumers,
            needs_rack_aware,
            partition_racks,
            unassigned,
            assigned,
            per_consumer,
            remaining_extra,
        }
    }

    fn rack_of(&self, consumer: &str) -> Option<&'a str> {
        self.consumers
            .iter()
            .find(|(m, _)| *m == consumer)
            .and_then(|(_, r)| *r)
    }

    /// A member without a rack matches every partition.
    fn racks_match(&self, consumer: &str, partition: i32) -> bool {
        match self.rack_of(consumer) {
            None => true,
            Some(rack) => self
                .partition_racks
                .get(&partition)
                .is_some_and(|r| r.contains(rack)),
        }
    }

    fn max_assignable(&self, consumer: &str) -> usize {
        let quota = self.per_consumer + usize::from(self.remaining_extra > 0);
        quota.saturating_sub(self.assigned.get(consumer).copied().unwrap_or(0))
    }

    fn on_assigned(&mut self, consumer: &'a str, partitions: &[i32]) {
        let n = self.assigned.entry(consumer).or_insert(0);
        *n += partitions.len();
        if *n > self.per_consumer {
            self.remaining_extra -= 1;
        }
        self.unassigned.retain(|p| !partitions.contains(p));
    }
}

fn give<'a>(
    consumer: &'a str,
    partitions: &[i32],
    state: &mut TopicState<'a>,
    assignment: &mut BTreeMap<String, Vec<TopicPartition>>,
) {
    if let Some(list) = assignment.get_mut(consumer) {
        list.extend(
            partitions
                .iter()
                .map(|p| TopicPartition::new(state.topic, *p)),
        );
    }
    state.on_assigned(consumer, partitions);
}

/// Plain ranges over what is left of one topic, only partitions `may_assign` allows.
fn assign_ranges<'a>(
    state: &mut TopicState<'a>,
    rack_matching: bool,
    assignment: &mut BTreeMap<String, Vec<TopicPartition>>,
) {
    let consumers: Vec<&'a str> = state.consumers.iter().map(|(m, _)| *m).collect();
    for consumer in consumers {
        if state.unassigned.is_empty() {
            break;
        }
        let max = state.max_assignable(consumer);
        let chosen: Vec<i32> = state
            .unassigned
            .iter()
            .copied()
            .filter(|p| !rack_matching || state.racks_match(consumer, *p))
            .take(max)
            .collect();
        if chosen.is_empty() {
            continue;
        }
        give(consumer, &chosen, state, assignment);
    }
}

/// Co-partitioned topics (same members, same partition count): partition `p` of all of them
/// goes to the first member whose rack matches `p` in every one and that still has room in each.
fn assign_co_partitioned<'a>(
    states: &mut [&mut TopicState<'a>],
    num_partitions: usize,
    assignment: &mut BTreeMap<String, Vec<TopicPartition>>,
) {
    let mut remaining: Vec<&'a str> = states[0].consumers.iter().map(|(m, _)| *m).collect();
    for p in 0..num_partitions {
        // Java builds the partition from the index: partition ids are 0..n in real metadata.
        let p = p as i32;
        let matching = remaining.iter().copied().find(|c| {
            states
                .iter()
                .all(|t| t.racks_match(c, p) && t.max_assignable(c) > 0)
        });
        let Some(consumer) = matching else { continue };
        for t in states.iter_mut() {
            give(consumer, &[p], t, assignment);
        }
        if states.iter().all(|t| t.max_assignable(consumer) == 0) {
            remaining.retain(|c| *c != consumer);
            if remaining.is_empty() {
                break;
            }
        }
    }
}

impl PartitionAssignor for RangeAssignor {
    fn name(&self) -> &'static str {
        "range"
    }

    fn assign(
        &self,
        cluster: &Cluster,
        subscriptions: &BTreeMap<String, Subscription>,
    ) -> Result<BTreeMap<String, Assignment>, AssignorError> {
        let members = java_member_order(subscriptions);

        // The subscribed topics as Java's HashSet holds them, then its HashMap of those with
        // partitions: the order ranges are appended to a member's list.
        let mut subscribed: Vec<&str> = Vec::new();
        for m in &members {
            for t in &subscriptions[*m].topics {
                if !subscribed.contains(&t.as_str()) {
                    subscribed.push(t);
                }
            }
        }
        let with_partitions = java_order::hash_map_order(subscribed)
            .into_iter()
            .filter(|t| cluster.topics.get(*t).is_some_and(|p| !p.is_empty()));
        let topics = java_order::hash_map_order(with_partitions);

        let racks: HashMap<&str, &str> = subscriptions
            .iter()
            .filter_map(|(m, s)| {
                s.rack_id
                    .as_deref()
                    .filter(|r| !r.is_empty())
                    .map(|r| (m.as_str(), r))
            })
            .collect();

        let mut states: Vec<TopicState> = Vec::with_capacity(topics.len());
        for topic in topics {
            let Some(infos) = cluster.topics.get(topic) else {
                continue;
            };
            let mut partitions: Vec<&super::PartitionInfo> = infos.iter().collect();
            partitions.sort_by_key(|p| p.partition); // stable, as Java's List.sort
            let mut consumers: Vec<(&str, Option<&str>)> = members
                .iter()
                .filter(|m| subscriptions[**m].topics.iter().any(|t| t == topic))
                .map(|m| (*m, subscriptions[*m].group_instance_id.as_deref()))
                .collect();
            consumers.sort_by(|a, b| member_order(*a, *b));
            states.push(TopicState::new(topic, &partitions, &consumers, &racks));
        }

        let mut assignment: BTreeMap<String, Vec<TopicPartition>> = subscriptions
            .keys()
            .map(|m| (m.clone(), Vec::new()))
            .collect();

        let rack_aware = states.iter().any(|t| t.needs_rack_aware);
        if rack_aware {
            // Group the topics by (members, partition count). Groups touch disjoint topics and
            // the lists are sorted at the end, so the order groups are visited in is immaterial.
            let mut groups: Vec<(Vec<&str>, usize, Vec<usize>)> = Vec::new();
            for (i, t) in states.iter().enumerate() {
                let members: Vec<&str> = t.consumers.iter().map(|(m, _)| *m).collect();
                let n = t.partition_racks.len();
                match groups.iter_mut().find(|(m, k, _)| *m == members && *k == n) {
                    Some(g) => g.2.push(i),
                    None => groups.push((members, n, vec![i])),
                }
            }
            for (_, n, idx) in groups {
                if idx.len() > 1 {
                    let mut group: Vec<&mut TopicState> = states
                        .iter_mut()
                        .enumerate()
                        .filter(|(i, _)| idx.contains(i))
                        .map(|(_, t)| t)
                        .collect();
                    assign_co_partitioned(&mut group, n, &mut assignment);
                } else if states[idx[0]].needs_rack_aware {
                    assign_ranges(&mut states[idx[0]], true, &mut assignment);
                }
            }
        }
        for t in states.iter_mut() {
            assign_ranges(t, false, &mut assignment);
        }
        if rack_aware {
            for list in assignment.values_mut() {
                list.sort_by(|a, b| {
                    java_order::compare(&a.topic, &b.topic).then(a.partition.cmp(&b.partition))
                });
            }
        }
        Ok(without_user_data(assignment))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assignor::PartitionInfo;

    fn member(topics: &[&str]) -> Subscription {
        Subscription {
            topics: topics.iter().map(|t| t.to_string()).collect(),
            generation_id: -1,
            ..Default::default()
        }
    }

    fn run(
        cluster: &Cluster,
        subs: &[(&str, Subscription)],
    ) -> BTreeMap<String, Vec<(String, i32)>> {
        let subs: BTreeMap<String, Subscription> = subs
            .iter()
            .map(|(m, s)| (m.to_string(), s.clone()))
            .collect();
        RangeAssignor
            .assign(cluster, &subs)
            .expect("assign")
            .into_iter()
            .map(|(m, a)| {
                (
                    m,
                    a.partitions
                        .into_iter()
                        .map(|tp| (tp.topic, tp.partition))
                        .collect(),
                )
            })
            .collect()
    }

    fn tps(topic: &str, ids: impl IntoIterator<Item = i32>) -> Vec<(String, i32)> {
        ids.into_iter().map(|p| (topic.to_string(), p)).collect()
    }

    fn three_consumers() -> Vec<(&'static str, Subscription)> {
        ["C1-0", "C2-0", "C2-1"]
            .into_iter()
            .map(|m| (m, member(&["t1", "t2"])))
            .collect()
    }

    #[test]
    fn ten_partitions_over_three_consumers() {
        let a = run(&Cluster::from_counts([("t1", 10)]), &three_consumers());
        assert_eq!(a["C1-0"], tps("t1", 0..4));
        assert_eq!(a["C2-0"], tps("t1", 4..7));
        assert_eq!(a["C2-1"], tps("t1", 7..10));
    }

    #[test]
    fn eleven_partitions_over_three_consumers() {
        let a = run(&Cluster::from_counts([("t1", 11)]), &three_consumers());
        assert_eq!(a["C1-0"], tps("t1", 0..4));
        assert_eq!(a["C2-0"], tps("t1", 4..8));
        assert_eq!(a["C2-1"], tps("t1", 8..11));
    }

    #[test]
    fn two_topics_of_ten_give_each_member_the_same_range_of_both() {
        let a = run(
            &Cluster::from_counts([("t1", 10), ("t2", 10)]),
            &three_consumers(),
        );
        // Java's HashMap lists "t1" (bucket 13) before "t2" (bucket 14).
        let both = |r: std::ops::Range<i32>| [tps("t1", r.clone()), tps("t2", r)].concat();
        assert_eq!(a["C1-0"], both(0..4));
        assert_eq!(a["C2-0"], both(4..7));
        assert_eq!(a["C2-1"], both(7..10));
    }

    #[test]
    fn static_members_come_first_by_instance_id() {
        // Checked against Java: t1 goes c (i1), b (i2), a; t2 goes b, a.
        let mut b = member(&["t2", "t1"]);
        b.group_instance_id = Some("i2".into());
        let mut c = member(&["t1"]);
        c.group_instance_id = Some("i1".into());
        let a = run(
            &Cluster::from_counts([("t1", 3), ("t2", 3)]),
            &[("a", member(&["t1", "t2"])), ("b", b), ("c", c)],
        );
        assert_eq!(a["c"], tps("t1", [0]));
        assert_eq!(a["b"], [tps("t1", [1]), tps("t2", [0, 1])].concat());
        assert_eq!(a["a"], [tps("t1", [2]), tps("t2", [2])].concat());
    }

    #[test]
    fn rack_aware_gives_members_partitions_in_their_rack() {
        // Checked against Java: without racks c1 would get 0-2 and c2 3-5.
        let cluster = Cluster {
            topics: [(
                "t".to_string(),
                (0..6)
                    .map(|partition| PartitionInfo {
                        partition,
                        replica_racks: vec![if partition % 2 == 0 { "a" } else { "b" }.into()],
                    })
                    .collect(),
            )]
            .into(),
        };
        let mut c1 = member(&["t"]);
        c1.rack_id = Some("a".into());
        let mut c2 = member(&["t"]);
        c2.rack_id = Some("b".into());
        let a = run(&cluster, &[("c1", c1), ("c2", c2)]);
        assert_eq!(a["c1"], tps("t", [0, 2, 4]));
        assert_eq!(a["c2"], tps("t", [1, 3, 5]));
    }

    #[test]
    fn topics_without_metadata_are_skipped_and_every_member_is_listed() {
        let a = run(
            &Cluster::from_counts([("t1", 2)]),
            &[("m1", member(&["t1", "gone"])), ("m2", member(&["gone"]))],
        );
        assert_eq!(a["m1"], tps("t1", 0..2));
        assert_eq!(a["m2"], vec![]);
    }
}

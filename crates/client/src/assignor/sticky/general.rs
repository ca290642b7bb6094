//! The general path (Java's `GeneralAssignmentBuilder`): members subscribe to different topics.
//!
//! 1. Every member keeps the owned partitions of topics it still subscribes to (on a matching
//!    rack, when rack-aware).
//! 2. Each unassigned partition (topics with the fewest potential consumers first) goes to the
//!    least loaded member subscribed to its topic; when rack-aware, first only to members on a
//!    replica's rack.
//! 3. While the assignment is not balanced, partitions move to the least loaded eligible
//!    member — back to their previous-generation owner when that one has two fewer — and the
//!    move history keeps a partition of a topic from travelling back and forth between two
//!    members. If the moves do not improve the balance score, the pre-move assignment stands.

use std::cmp::Ordering;
use std::collections::{BTreeSet, HashMap, HashSet};

use super::java::{java_cmp, PartitionHashSet};
use super::{remove_first, Built, Claims, Input, DEFAULT_GENERATION};
use crate::assignor::{AssignorError, TopicPartition};

/// A member id ordered as Java's `String.compareTo`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Member(String);

impl Ord for Member {
    fn cmp(&self, other: &Self) -> Ordering {
        java_cmp(&self.0, &other.0)
    }
}

impl PartialOrd for Member {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Where partitions moved in this rebalance (Java's `PartitionMovements`): per partition its
/// original and current owner, per topic the partitions moved between each pair.
#[derive(Default)]
struct Movements {
    by_partition: HashMap<TopicPartition, (String, String)>,
    by_topic: HashMap<String, HashMap<(String, String), PartitionHashSet>>,
}

impl Movements {
    fn remove_record(&mut self, tp: &TopicPartition) -> Option<(String, String)> {
        let pair = self.by_partition.remove(tp)?;
        if let Some(topic) = self.by_topic.get_mut(&tp.topic) {
            if let Some(set) = topic.get_mut(&pair) {
                set.remove(tp);
                if set.is_empty() {
                    topic.remove(&pair);
                }
            }
            if topic.is_empty() {
                self.by_topic.remove(&tp.topic);
            }
        }
        Some(pair)
    }

    fn add_record(&mut self, tp: TopicPartition, pair: (String, String)) {
        self.by_partition.insert(tp.clone(), pair.clone());
        self.by_topic
            .entry(tp.topic.clone())
            .or_default()
            .entry(pair)
            .or_default()
            .insert(tp);
    }

    fn move_partition(&mut self, tp: &TopicPartition, old: &str, new: &str) {
        match self.remove_record(tp) {
            Some((src, _)) => {
                // A partition moving back to where it started leaves no record.
                if src != new {
                    self.add_record(tp.clone(), (src, new.to_string()));
                }
            }
            None => self.add_record(tp.clone(), (old.to_string(), new.to_string())),
        }
    }

    /// If some partition of the same topic already moved the opposite way, move that one back
    /// instead, so no topic's partitions cross between two members in both directions.
    fn partition_to_move(&self, tp: &TopicPartition, old: &str, new: &str) -> TopicPartition {
        let Some(topic) = self.by_topic.get(&tp.topic) else {
            return tp.clone();
        };
        let old = match self.by_partition.get(tp) {
            Some((src, _)) => src.as_str(),
            None => old,
        };
        match topic
            .get(&(new.to_string(), old.to_string()))
            .and_then(PartitionHashSet::first)
        {
            Some(other) => other.clone(),
            None => tp.clone(),
        }
    }
}

struct Builder<'a, 'b> {
    input: &'a Input<'b>,
    topic_consumers: HashMap<String, Vec<String>>,
    consumer_topics: HashMap<String, Vec<String>>,
    current: HashMap<String, Vec<TopicPartition>>,
    partition_consumer: HashMap<TopicPartition, String>,
    sorted_all_partitions: Vec<TopicPartition>,
    /// Members by (assignment size, id): Java's `sortedCurrentSubscriptions`.
    sorted: BTreeSet<(usize, Member)>,
    revocation_required: bool,
    movements: Movements,
    max_generation: i32,
}

/// Java dereferences a member that is no longer in the working assignment here.
fn missing(consumer: &str) -> AssignorError {
    AssignorError::InvalidInput(format!(
        "member {consumer} is not in the assignment being balanced (Java fails with a NullPointerException)"
    ))
}

pub(super) fn build(input: &Input<'_>, claims: Claims) -> Result<Built, AssignorError> {
    let mut topic_consumers: HashMap<String, Vec<String>> = input
        .partition_counts
        .keys()
        .map(|t| (t.clone(), Vec::new()))
        .collect();
    let mut consumer_topics: HashMap<String, Vec<String>> = HashMap::new();
    for consumer in &input.member_order {
        let topics: Vec<String> = input.subs[consumer]
            .topics
            .iter()
            .filter(|t| input.partition_counts.contains_key(*t))
            .cloned()
            .collect();
        for t in &topics {
            topic_consumers
                .entry(t.clone())
                .or_default()
                .push(consumer.clone());
        }
        consumer_topics.insert(consumer.clone(), topics);
    }
    let current = claims.owned;
    let mut partition_consumer = HashMap::new();
    for consumer in &input.member_order {
        for tp in current.get(consumer).into_iter().flatten() {
            partition_consumer.insert(tp.clone(), consumer.clone());
        }
    }
    let mut topics: Vec<&String> = topic_consumers.keys().collect();
    topics.sort_by(|a, b| {
        topic_consumers[*a]
            .len()
            .cmp(&topic_consumers[*b].len())
            .then_with(|| java_cmp(a, b))
    });
    let sorted_all_partitions = topics
        .iter()
        .flat_map(|t| {
            (0..input.partition_counts[*t] as i32).map(|p| TopicPartition::new((*t).clone(), p))
        })
        .collect();
    let mut b = Builder {
        input,
        topic_consumers,
        consumer_topics,
        current,
        partition_consumer,
        sorted_all_partitions,
        sorted: BTreeSet::new(),
        revocation_required: false,
        movements: Movements::default(),
        max_generation: claims.max_generation,
    };
    let prev = b.previous_assignment();
    let assigned = b.assign_owned();
    let unassigned = b.unassigned_partitions(assigned);
    for consumer in &input.member_order {
        let size = b.current.get(consumer).map_or(0, Vec::len);
        b.sorted.insert((size, Member(consumer.clone())));
    }
    b.balance(&prev, unassigned)?;
    Ok(Built {
        assignment: b.current,
        transferring: None,
    })
}

impl Builder<'_, '_> {
    fn size(&self, consumer: &str) -> Result<usize, AssignorError> {
        self.current
            .get(consumer)
            .map(Vec::len)
            .ok_or_else(|| missing(consumer))
    }

    fn subscribes(&self, consumer: &str, topic: &str) -> bool {
        self.consumer_topics
            .get(consumer)
            .is_some_and(|t| t.iter().any(|x| x == topic))
    }

    /// The owner of each partition in an older generation than the newest (Java's
    /// `prevAssignment`): the newest such generation wins, the first member on a tie.
    fn previous_assignment(&self) -> HashMap<TopicPartition, (String, i32)> {
        let mut prev: HashMap<TopicPartition, (String, i32)> = HashMap::new();
        for consumer in &self.input.member_order {
            let data = self.input.flavor.member_data(&self.input.subs[consumer]);
            let generation = match data.generation {
                Some(g) if g < self.max_generation => g,
                None if self.max_generation > DEFAULT_GENERATION => DEFAULT_GENERATION,
                _ => continue,
            };
            for tp in data.partitions {
                match prev.get(&tp) {
                    Some((_, g)) if generation <= *g => {}
                    _ => {
                        prev.insert(tp, (consumer.clone(), generation));
                    }
                }
            }
        }
        prev
    }

    /// Step 1: drops owned partitions of topics the member left (or on a mismatched rack).
    fn assign_owned(&mut self) -> Vec<TopicPartition> {
        let mut assigned = Vec::new();
        for consumer in &self.input.member_order {
            let sub = &self.input.subs[consumer];
            let Some(list) = self.current.get_mut(consumer) else {
                continue;
            };
            let mut kept = Vec::with_capacity(list.len());
            for tp in list.drain(..) {
                if !self.topic_consumers.contains_key(&tp.topic) {
                    self.partition_consumer.remove(&tp);
                } else if !sub.topics.contains(&tp.topic)
                    || self.input.racks.racks_mismatch(consumer, &tp)
                {
                    // Java leaves the partition's owner entry in place here; it is overwritten
                    // when the partition is assigned again.
                    self.revocation_required = true;
                } else {
                    assigned.push(tp.clone());
                    kept.push(tp);
                }
            }
            *list = kept;
        }
        assigned
    }

    /// `sorted_all_partitions` without `assigned`, walking both in step like Java.
    fn unassigned_partitions(&self, mut assigned: Vec<TopicPartition>) -> Vec<TopicPartition> {
        if assigned.is_empty() {
            return self.sorted_all_partitions.clone();
        }
        assigned.sort_by(|a, b| {
            self.topic_consumers[&a.topic]
                .len()
                .cmp(&self.topic_consumers[&b.topic].len())
                .then_with(|| java_cmp(&a.topic, &b.topic))
                .then(a.partition.cmp(&b.partition))
        });
        let mut next = assigned.iter();
        let mut pending = next.next();
        let mut unassigned = Vec::new();
        for tp in &self.sorted_all_partitions {
            match pending {
                Some(p) if p == tp => pending = next.next(),
                _ => unassigned.push(tp.clone()),
            }
        }
        unassigned
    }

    fn is_balanced(&self) -> Result<bool, AssignorError> {
        let (Some((min, _)), Some((max, _))) = (self.sorted.first(), self.sorted.last()) else {
            return Ok(true);
        };
        if *min + 1 >= *max {
            return Ok(true);
        }
        let mut owner: HashMap<&TopicPartition, &str> = HashMap::new();
        for (consumer, list) in &self.current {
            for tp in list {
                owner.insert(tp, consumer);
            }
        }
        for (_, Member(consumer)) in &self.sorted {
            let list = self
                .current
                .get(consumer)
                .ok_or_else(|| missing(consumer))?;
            let topics = &self.consumer_topics[consumer];
            if list.len() == self.max_assignment_size(topics) {
                continue;
            }
            for topic in topics {
                for i in 0..self.input.partition_counts[topic] as i32 {
                    let tp = TopicPartition::new(topic.clone(), i);
                    if list.contains(&tp) {
                        continue;
                    }
                    let other = owner.get(&tp).ok_or_else(|| missing("(no owner)"))?;
                    if list.len() + 1 < self.size(other)? {
                        return Ok(false);
                    }
                }
            }
        }
        Ok(true)
    }

    fn max_assignment_size(&self, topics: &[String]) -> usize {
        if topics.len() == self.input.partition_counts.len() {
            self.input.total_partitions()
        } else {
            topics.iter().map(|t| self.input.partition_counts[t]).sum()
        }
    }

    /// The sum over all pairs of members of their assignment size difference.
    fn balance_score(assignment: &HashMap<String, Vec<TopicPartition>>) -> usize {
        let sizes: Vec<usize> = assignment.values().map(Vec::len).collect();
        let mut score = 0;
        for (i, a) in sizes.iter().enumerate() {
            for b in &sizes[i + 1..] {
                score += a.abs_diff(*b);
            }
        }
        score
    }

    /// Gives the partition to the least loaded member subscribed to its topic (and on a
    /// replica's rack when `rack_match`).
    fn maybe_assign_partition(&mut self, tp: &TopicPartition, rack_match: bool) -> bool {
        let chosen = self.sorted.iter().find(|(_, Member(c))| {
            self.subscribes(c, &tp.topic)
                && (!rack_match || !self.input.racks.racks_mismatch(c, tp))
        });
        let Some(key) = chosen.cloned() else {
            return false;
        };
        self.sorted.remove(&key);
        let consumer = key.1 .0;
        let list = self.current.entry(consumer.clone()).or_default();
        list.push(tp.clone());
        let size = list.len();
        self.partition_consumer.insert(tp.clone(), consumer.clone());
        self.sorted.insert((size, Member(consumer)));
        true
    }

    fn maybe_assign(
        &mut self,
        partitions: &mut Vec<TopicPartition>,
        rack_match: bool,
        remove_assigned: bool,
    ) {
        let mut remaining = Vec::with_capacity(partitions.len());
        for tp in partitions.drain(..) {
            if self
                .topic_consumers
                .get(&tp.topic)
                .is_none_or(Vec::is_empty)
            {
                remaining.push(tp);
                continue;
            }
            let done = self.maybe_assign_partition(&tp, rack_match);
            if !(done && remove_assigned) {
                remaining.push(tp);
            }
        }
        *partitions = remaining;
    }

    fn topic_can_move(&self, topic: &str) -> bool {
        self.topic_consumers
            .get(topic)
            .is_some_and(|c| c.len() >= 2)
    }

    fn consumer_can_move(&self, consumer: &str) -> bool {
        let list = self.current.get(consumer).map(Vec::as_slice).unwrap_or(&[]);
        if list.len() < self.max_assignment_size(&self.consumer_topics[consumer]) {
            return true;
        }
        list.iter().any(|tp| self.topic_can_move(&tp.topic))
    }

    fn balance(
        &mut self,
        prev: &HashMap<TopicPartition, (String, i32)>,
        mut unassigned: Vec<TopicPartition>,
    ) -> Result<(), AssignorError> {
        let initializing = match self.sorted.last() {
            Some((size, _)) => *size == 0,
            None => true,
        };
        let mut to_assign = unassigned.clone();
        if !self.input.racks.consumer_racks.is_empty() {
            self.maybe_assign(&mut to_assign, true, true);
        }
        self.maybe_assign(&mut to_assign, false, false);

        // Only partitions of topics with two or more potential consumers can move.
        let fixed_partitions: HashSet<TopicPartition> = self
            .topic_consumers
            .iter()
            .filter(|(_, c)| c.len() < 2)
            .flat_map(|(t, _)| {
                (0..self.input.partition_counts[t] as i32)
                    .map(|p| TopicPartition::new(t.clone(), p))
            })
            .collect();
        self.sorted_all_partitions
            .retain(|tp| !fixed_partitions.contains(tp));
        unassigned.retain(|tp| !fixed_partitions.contains(tp));

        // Members that can neither get nor give a partition sit out.
        let mut fixed_assignments: Vec<(String, Vec<TopicPartition>)> = Vec::new();
        for consumer in self.input.member_order.clone() {
            if !self.consumer_can_move(&consumer) {
                let list = self.current.remove(&consumer).unwrap_or_default();
                self.sorted.remove(&(list.len(), Member(consumer.clone())));
                fixed_assignments.push((consumer, list));
            }
        }

        let pre_balance = self.current.clone();
        let pre_balance_owners = self.partition_consumer.clone();
        if !self.revocation_required {
            self.perform_reassignments(&unassigned, prev)?;
        }
        let all = self.sorted_all_partitions.clone();
        let performed = self.perform_reassignments(&all, prev)?;
        if !initializing
            && performed
            && Self::balance_score(&self.current) >= Self::balance_score(&pre_balance)
        {
            self.current = pre_balance;
            self.partition_consumer = pre_balance_owners;
        }
        for (consumer, list) in fixed_assignments {
            self.current.insert(consumer, list);
        }
        Ok(())
    }

    fn perform_reassignments(
        &mut self,
        partitions: &[TopicPartition],
        prev: &HashMap<TopicPartition, (String, i32)>,
    ) -> Result<bool, AssignorError> {
        let mut performed = false;
        loop {
            let mut modified = false;
            for tp in partitions {
                if self.is_balanced()? {
                    break;
                }
                if self
                    .topic_consumers
                    .get(&tp.topic)
                    .is_none_or(|c| c.len() <= 1)
                {
                    continue;
                }
                let Some(consumer) = self.partition_consumer.get(tp).cloned() else {
                    continue;
                };
                if let Some((prev_consumer, _)) = prev.get(tp) {
                    if self.size(&consumer)? > self.size(prev_consumer)? + 1 {
                        self.reassign_to(tp, prev_consumer)?;
                        performed = true;
                        modified = true;
                        continue;
                    }
                }
                let size = self.size(&consumer)?;
                let racks = &self.input.racks;
                let partition_racks = racks.partition_racks.get(tp);
                let mut found = false;
                if let (Some(rack), Some(p_racks)) =
                    (racks.consumer_racks.get(&consumer), partition_racks)
                {
                    if !p_racks.is_empty() && p_racks.contains(rack) {
                        for other in &self.topic_consumers[&tp.topic] {
                            let in_rack = racks
                                .consumer_racks
                                .get(other)
                                .is_some_and(|r| p_racks.contains(r));
                            if in_rack && size > self.size(other)? + 1 {
                                found = true;
                                break;
                            }
                        }
                    }
                }
                if !found {
                    for other in &self.topic_consumers[&tp.topic] {
                        if size > self.size(other)? + 1 {
                            found = true;
                            break;
                        }
                    }
                }
                if found {
                    self.reassign(tp)?;
                    performed = true;
                    modified = true;
                }
            }
            if !modified {
                return Ok(performed);
            }
        }
    }

    /// To the least loaded member subscribed to the partition's topic.
    fn reassign(&mut self, tp: &TopicPartition) -> Result<(), AssignorError> {
        let new = self
            .sorted
            .iter()
            .find(|(_, Member(c))| self.subscribes(c, &tp.topic))
            .map(|(_, Member(c))| c.clone())
            .ok_or_else(|| missing("(no member for the topic)"))?;
        self.reassign_to(tp, &new)
    }

    fn reassign_to(&mut self, tp: &TopicPartition, new: &str) -> Result<(), AssignorError> {
        let consumer = self
            .partition_consumer
            .get(tp)
            .cloned()
            .ok_or_else(|| missing("(no owner)"))?;
        let moved = self.movements.partition_to_move(tp, &consumer, new);
        let old = self
            .partition_consumer
            .get(&moved)
            .cloned()
            .ok_or_else(|| missing("(no owner)"))?;
        let old_size = self.size(&old)?;
        let new_size = self.size(new)?;
        self.sorted.remove(&(old_size, Member(old.clone())));
        self.sorted.remove(&(new_size, Member(new.to_string())));
        self.movements.move_partition(&moved, &old, new);
        if let Some(list) = self.current.get_mut(&old) {
            remove_first(list, &moved);
        }
        if let Some(list) = self.current.get_mut(new) {
            list.push(moved.clone());
        }
        self.partition_consumer.insert(moved, new.to_string());
        let old_size = self.size(&old)?;
        let new_size = self.size(new)?;
        self.sorted.insert((new_size, Member(new.to_string())));
        self.sorted.insert((old_size, Member(old)));
        Ok(())
    }
}

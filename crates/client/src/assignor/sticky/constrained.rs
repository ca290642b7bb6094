//! The constrained path (Java's `ConstrainedAssignmentBuilder`): every member subscribes to the
//! same topics, so each gets ⌊P/N⌋ (`min_quota`) or ⌈P/N⌉ (`max_quota`) partitions, with
//! exactly P mod N members at `max_quota`.
//!
//! 1. Each member keeps its owned partitions (on a matching rack, when rack-aware) up to its
//!    quota, lowest partition number first; the rest may be revoked.
//! 2. Rack-aware only: unassigned partitions go round robin to unfilled members on one of their
//!    replicas' racks.
//! 3. The rest go round robin to the unfilled members: first those under `min_quota`, then
//!    those at `min_quota` while fewer than P mod N members have `max_quota`.

use std::collections::{HashMap, HashSet};

use super::{java::java_cmp, Built, Claims, Input};
use crate::assignor::{AssignorError, TopicPartition};

struct Builder<'a, 'b> {
    input: &'a Input<'b>,
    multiple_owners: HashSet<TopicPartition>,
    maybe_revoked: HashMap<TopicPartition, String>,
    under_min: Vec<String>,
    exactly_min: Vec<String>,
    min_quota: usize,
    max_quota: usize,
    expected_over_min: usize,
    current_over_min: usize,
    assignment: HashMap<String, Vec<TopicPartition>>,
    transferring: HashMap<TopicPartition, String>,
}

pub(super) fn build(input: &Input<'_>, claims: Claims) -> Result<Built, AssignorError> {
    let members = claims.owned.len().max(1);
    let total = input.total_partitions();
    let mut b = Builder {
        input,
        multiple_owners: claims.multiple_owners,
        maybe_revoked: HashMap::new(),
        under_min: Vec::new(),
        exactly_min: Vec::new(),
        min_quota: total / members,
        max_quota: total.div_ceil(members),
        expected_over_min: total % members,
        current_over_min: 0,
        assignment: claims
            .owned
            .keys()
            .map(|c| (c.clone(), Vec::new()))
            .collect(),
        transferring: HashMap::new(),
    };
    let assigned = b.assign_owned(&claims.owned);
    let mut unassigned = b.unassigned_partitions(assigned);
    b.under_min.sort_by(|x, y| java_cmp(x, y));
    b.exactly_min.sort_by(|x, y| java_cmp(x, y));
    input
        .racks
        .sort_partitions_by_rack_consumers(&mut unassigned);
    let unassigned = b.assign_rack_aware_round_robin(unassigned);
    b.assign_round_robin(&unassigned)?;
    b.verify_unfilled()?;
    Ok(Built {
        assignment: b.assignment,
        transferring: Some(b.transferring),
    })
}

impl Builder<'_, '_> {
    /// Step 1; returns the partitions kept.
    fn assign_owned(
        &mut self,
        owned: &HashMap<String, Vec<TopicPartition>>,
    ) -> Vec<TopicPartition> {
        let mut assigned = Vec::new();
        // Java iterates its HashMap of members.
        for consumer in &self.input.member_order {
            let Some(list) = owned.get(consumer) else {
                continue;
            };
            let mut kept: Vec<TopicPartition> = Vec::new();
            for tp in list {
                if self.input.racks.racks_mismatch(consumer, tp) {
                    self.maybe_revoked.insert(tp.clone(), consumer.clone());
                } else {
                    kept.push(tp.clone());
                }
            }
            kept.sort_by(|a, b| {
                a.partition
                    .cmp(&b.partition)
                    .then_with(|| java_cmp(&a.topic, &b.topic))
            });
            kept.retain(|tp| !self.multiple_owners.contains(tp));
            let target = self.assignment.entry(consumer.clone()).or_default();
            if kept.len() < self.min_quota {
                target.extend(kept.iter().cloned());
                assigned.extend(kept);
                self.under_min.push(consumer.clone());
            } else if kept.len() >= self.max_quota && self.current_over_min < self.expected_over_min
            {
                self.current_over_min += 1;
                if self.current_over_min == self.expected_over_min {
                    self.exactly_min.clear();
                }
                target.extend(kept[..self.max_quota].iter().cloned());
                assigned.extend(kept[..self.max_quota].iter().cloned());
                for tp in &kept[self.max_quota..] {
                    self.maybe_revoked.insert(tp.clone(), consumer.clone());
                }
            } else {
                target.extend(kept[..self.min_quota].iter().cloned());
                assigned.extend(kept[..self.min_quota].iter().cloned());
                for tp in &kept[self.min_quota..] {
                    self.maybe_revoked.insert(tp.clone(), consumer.clone());
                }
                if self.current_over_min < self.expected_over_min {
                    self.exactly_min.push(consumer.clone());
                }
            }
        }
        assigned
    }

    /// All partitions (topics by name, then partition) not in `assigned`. Like Java, this walks
    /// both sorted lists in step, so it relies on `assigned` holding existing partitions.
    fn unassigned_partitions(&self, mut assigned: Vec<TopicPartition>) -> Vec<TopicPartition> {
        let mut topics: Vec<&String> = self.input.partition_counts.keys().collect();
        topics.sort_by(|a, b| java_cmp(a, b));
        assigned.sort_by(|a, b| java_cmp(&a.topic, &b.topic).then(a.partition.cmp(&b.partition)));
        let mut next = assigned.iter();
        let mut pending = next.next();
        let mut unassigned = Vec::new();
        for topic in topics {
            for i in 0..self.input.partition_counts[topic] as i32 {
                match pending {
                    Some(tp) if tp.topic == *topic && tp.partition == i => pending = next.next(),
                    _ => unassigned.push(TopicPartition::new(topic.clone(), i)),
                }
            }
        }
        unassigned
    }

    /// Step 2; returns the partitions still unassigned, in order.
    fn assign_rack_aware_round_robin(
        &mut self,
        unassigned: Vec<TopicPartition>,
    ) -> Vec<TopicPartition> {
        if self.input.racks.consumer_racks.is_empty() {
            return unassigned;
        }
        let racks = &self.input.racks;
        let mut next_unfilled = 0usize;
        let mut remaining = Vec::new();
        for tp in unassigned {
            let mut chosen: Option<String> = None;
            if let Some(mut index) = racks.next_rack_consumer(&tp, &self.under_min, next_unfilled) {
                let consumer = self.under_min[index].clone();
                let count = self.assignment.get(&consumer).map_or(0, Vec::len) + 1;
                if count >= self.min_quota {
                    self.under_min.retain(|c| *c != consumer);
                    if count < self.max_quota && self.current_over_min < self.expected_over_min {
                        self.exactly_min.push(consumer.clone());
                    }
                } else {
                    index += 1;
                }
                next_unfilled = if self.under_min.is_empty() {
                    0
                } else {
                    index % self.under_min.len()
                };
                chosen = Some(consumer);
            } else if !self.exactly_min.is_empty() {
                if let Some(first) = racks.next_rack_consumer(&tp, &self.exactly_min, 0) {
                    let consumer = self.exactly_min[first].clone();
                    if self.assignment.get(&consumer).map_or(0, Vec::len) + 1 == self.max_quota {
                        self.exactly_min.remove(first);
                        self.current_over_min += 1;
                        if self.current_over_min == self.expected_over_min {
                            self.exactly_min.clear();
                        }
                    }
                    chosen = Some(consumer);
                }
            }
            match chosen {
                Some(consumer) => {
                    self.assign_new(tp, &consumer);
                }
                None => remaining.push(tp),
            }
        }
        remaining
    }

    /// Step 3: Java walks the under-quota list with an iterator, restarting it when it runs
    /// out, and polls the at-quota list once the under-quota list is empty.
    fn assign_round_robin(&mut self, unassigned: &[TopicPartition]) -> Result<(), AssignorError> {
        let mut cursor = 0usize;
        for tp in unassigned {
            let (consumer, from_iter) = if cursor < self.under_min.len() {
                cursor += 1;
                (self.under_min[cursor - 1].clone(), Some(cursor - 1))
            } else if self.under_min.is_empty() && self.exactly_min.is_empty() {
                return Err(AssignorError::InvalidInput(
                    "no more unfilled consumers to be assigned".into(),
                ));
            } else if self.under_min.is_empty() {
                (self.exactly_min.remove(0), None)
            } else {
                cursor = 1;
                (self.under_min[0].clone(), Some(0))
            };
            let count = self.assign_new(tp.clone(), &consumer);
            if count == self.min_quota {
                // Only a member from the under-quota list can reach exactly min_quota here.
                if let Some(i) = from_iter {
                    self.under_min.remove(i);
                    cursor = i;
                }
                self.exactly_min.push(consumer);
            } else if count == self.max_quota {
                self.current_over_min += 1;
            }
        }
        Ok(())
    }

    fn assign_new(&mut self, tp: TopicPartition, consumer: &str) -> usize {
        let moving = self
            .maybe_revoked
            .get(&tp)
            .is_some_and(|owner| owner != consumer)
            || self.multiple_owners.contains(&tp);
        if moving {
            self.transferring.insert(tp.clone(), consumer.to_string());
        }
        let list = self.assignment.entry(consumer.to_string()).or_default();
        list.push(tp);
        list.len()
    }

    fn verify_unfilled(&self) -> Result<(), AssignorError> {
        if self.under_min.is_empty() {
            return Ok(());
        }
        if self.current_over_min != self.expected_over_min {
            return Err(AssignorError::InvalidInput(
                "the expected number of members with more than the minQuota partitions was not reached, \
                 but no more partitions are left to assign"
                    .into(),
            ));
        }
        for member in &self.under_min {
            if self.assignment.get(member).map_or(0, Vec::len) != self.min_quota {
                return Err(AssignorError::InvalidInput(format!(
                    "consumer {member} does not reach minQuota partitions, and no more partitions are left to assign"
                )));
            }
        }
        Ok(())
    }
}

//! The `range` assignor (Kafka 4.4's `RangeAssignor`): members sorted by instance id (static
//! members first) then member id; each topic's partitions are cut into contiguous ranges, one per
//! subscribed member in that order, the first `partitions % members` ranges one longer. Members
//! subscribed to the same co-partitioned topics thus get the same partition numbers of each,
//! which is what joins need. It is not sticky: current assignments are ignored.

use super::java_order::java_string_cmp;
use super::{
    partition_count, AssignorError, ConsumerGroupPartitionAssignor, GroupAssignment, GroupSpec,
    MemberAssignment, MemberSubscriptionAndAssignment, SubscribedTopicDescriber,
};
use std::cmp::Ordering;
use std::collections::BTreeMap;
use uuid::Uuid;

/// Kafka's `RangeAssignor`.
#[derive(Debug, Clone, Copy, Default)]
pub struct RangeAssignor;

impl RangeAssignor {
    pub const NAME: &'static str = "range";
}

/// Where one topic's next range starts, and how long the remaining ranges are.
struct TopicRanges {
    num_partitions: i32,
    subscribers: i32,
    next_start: i32,
    /// How many of the remaining ranges get one partition more than the minimum.
    extra_left: i32,
}

impl TopicRanges {
    fn new(num_partitions: i32, subscribers: i32) -> Self {
        TopicRanges {
            num_partitions,
            subscribers,
            next_start: 0,
            extra_left: num_partitions % subscribers,
        }
    }

    /// The next member's range, `None` when it is empty (more members than partitions).
    fn next_range(&mut self) -> Option<std::ops::Range<i32>> {
        let mut quota = self.num_partitions / self.subscribers;
        if self.extra_left > 0 {
            quota += 1;
            self.extra_left -= 1;
        }
        let start = self.next_start;
        let end = (start + quota).min(self.num_partitions);
        self.next_start = end;
        (start < end).then_some(start..end)
    }
}

/// Static members (with an instance id) first, by instance id; then dynamic ones by member id.
/// A stable sort over the member-id-ordered input, like Java's `List.sort`.
fn sorted_members(group: &GroupSpec) -> Vec<(&String, &MemberSubscriptionAndAssignment)> {
    let mut members: Vec<_> = group.members().iter().collect();
    members.sort_by(
        |(id1, m1), (id2, m2)| match (&m1.instance_id, &m2.instance_id) {
            (Some(i1), Some(i2)) => java_string_cmp(i1, i2),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => java_string_cmp(id1, id2),
        },
    );
    members
}

impl ConsumerGroupPartitionAssignor for RangeAssignor {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn assign(
        &self,
        group: &GroupSpec,
        topics: &dyn SubscribedTopicDescriber,
    ) -> Result<GroupAssignment, AssignorError> {
        let members = sorted_members(group);
        // Every subscribed topic with its subscriber count. In a homogeneous group that is all
        // members for every topic, the same as counting.
        let mut ranges: BTreeMap<Uuid, TopicRanges> = BTreeMap::new();
        let mut subscribers: BTreeMap<Uuid, i32> = BTreeMap::new();
        for (_, member) in &members {
            for &topic_id in &member.subscribed_topic_ids {
                *subscribers.entry(topic_id).or_default() += 1;
            }
        }
        for (topic_id, count) in subscribers {
            ranges.insert(
                topic_id,
                TopicRanges::new(partition_count(topics, topic_id)?, count),
            );
        }

        let mut assignment = GroupAssignment::default();
        for (member_id, member) in members {
            let mut partitions = MemberAssignment::new();
            for topic_id in &member.subscribed_topic_ids {
                if let Some(range) = ranges.get_mut(topic_id).and_then(TopicRanges::next_range) {
                    partitions.insert(*topic_id, range.collect());
                }
            }
            assignment.members.insert(member_id.clone(), partitions);
        }
        Ok(assignment)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assignor::{TopicMetadata, TopicsMetadata};
    use std::collections::BTreeSet;

    fn topics(counts: &[(Uuid, i32)]) -> TopicsMetadata {
        TopicsMetadata(
            counts
                .iter()
                .map(|&(id, n)| {
                    (
                        id,
                        TopicMetadata {
                            num_partitions: n,
                            ..Default::default()
                        },
                    )
                })
                .collect(),
        )
    }

    fn member(instance: Option<&str>, subs: &[Uuid]) -> MemberSubscriptionAndAssignment {
        MemberSubscriptionAndAssignment {
            instance_id: instance.map(str::to_string),
            subscribed_topic_ids: subs.iter().copied().collect(),
            ..Default::default()
        }
    }

    fn set(r: std::ops::Range<i32>) -> BTreeSet<i32> {
        r.collect()
    }

    #[test]
    fn seven_partitions_three_members_co_partitioned() {
        let (t1, t2) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let members = [("a", None), ("b", None), ("c", None)]
            .iter()
            .map(|&(id, inst)| (id.to_string(), member(inst, &[t1, t2])))
            .collect();
        let group = GroupSpec::new(members).unwrap();
        let got = RangeAssignor
            .assign(&group, &topics(&[(t1, 7), (t2, 7)]))
            .unwrap();
        for (m, r) in [("a", 0..3), ("b", 3..5), ("c", 5..7)] {
            let want: MemberAssignment = [(t1, set(r.clone())), (t2, set(r))].into();
            assert_eq!(got.members[m], want, "member {m}");
        }
    }

    #[test]
    fn static_members_first_and_more_members_than_partitions() {
        let t = Uuid::from_u128(9);
        let members = [("a", None), ("b", Some("z")), ("c", Some("y"))]
            .iter()
            .map(|&(id, inst)| (id.to_string(), member(inst, &[t])))
            .collect();
        let group = GroupSpec::new(members).unwrap();
        let got = RangeAssignor.assign(&group, &topics(&[(t, 2)])).unwrap();
        assert_eq!(got.members["c"], [(t, set(0..1))].into());
        assert_eq!(got.members["b"], [(t, set(1..2))].into());
        // Still in the answer, with nothing.
        assert_eq!(got.members["a"], MemberAssignment::new());
    }

    #[test]
    fn heterogeneous_counts_subscribers_per_topic() {
        let (t1, t2) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let members = [
            ("a".to_string(), member(None, &[t1])),
            ("b".to_string(), member(None, &[t1, t2])),
        ]
        .into();
        let group = GroupSpec::new(members).unwrap();
        let got = RangeAssignor
            .assign(&group, &topics(&[(t1, 3), (t2, 3)]))
            .unwrap();
        assert_eq!(got.members["a"], [(t1, set(0..2))].into());
        assert_eq!(got.members["b"], [(t1, set(2..3)), (t2, set(0..3))].into());
    }

    #[test]
    fn unknown_topic_is_an_error() {
        let t = Uuid::from_u128(5);
        let group = GroupSpec::new([("a".to_string(), member(None, &[t]))].into()).unwrap();
        assert_eq!(
            RangeAssignor.assign(&group, &topics(&[])),
            Err(AssignorError::UnknownTopic(t))
        );
    }
}

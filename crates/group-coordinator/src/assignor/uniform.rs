//! The `uniform` assignor (Kafka 4.4's `UniformAssignor`, the default server assignor): balance
//! first (member sizes differ by at most one partition), then stickiness (keep as much of each
//! member's current assignment as balance allows).

use super::java_order::java_hash_set_order;
use super::{
    partition_count, AssignorError, ConsumerGroupPartitionAssignor, GroupAssignment, GroupSpec,
    SubscribedTopicDescriber, SubscriptionType,
};
use uuid::Uuid;

/// Kafka's `UniformAssignor`.
#[derive(Debug, Clone, Copy, Default)]
pub struct UniformAssignor;

impl UniformAssignor {
    pub const NAME: &'static str = "uniform";
}

impl ConsumerGroupPartitionAssignor for UniformAssignor {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn assign(
        &self,
        group: &GroupSpec,
        topics: &dyn SubscribedTopicDescriber,
    ) -> Result<GroupAssignment, AssignorError> {
        if group.members().is_empty() {
            return Ok(GroupAssignment::default());
        }
        match group.subscription_type() {
            SubscriptionType::Homogeneous => assign_homogeneous(group, topics),
            SubscriptionType::Heterogeneous => {
                super::uniform_heterogeneous::assign_heterogeneous(group, topics)
            }
        }
    }
}

/// Kafka's `UniformHomogeneousAssignmentBuilder`, for a non-empty group whose members all
/// subscribe to the same topics.
///
/// Every member gets a quota of `total / members`; `total % members` of them one more: in member
/// order, each member takes an extra unless it holds fewer than its quota with one and later
/// members can still take all remaining extras. A member keeps its current partitions of subscribed topics up to its
/// quota (topics and partitions in ascending order); the rest are revoked. Then the members below
/// quota, in member order, take partitions from one list: first the partitions nobody owns (topics
/// in Java `HashSet` order, partitions ascending), then the revoked ones in revocation order.
fn assign_homogeneous(
    group: &GroupSpec,
    topics: &dyn SubscribedTopicDescriber,
) -> Result<GroupAssignment, AssignorError> {
    let Some(first) = group.members().values().next() else {
        return Ok(GroupAssignment::default());
    };
    let subscribed = &first.subscribed_topic_ids;
    if subscribed.is_empty() {
        return Ok(GroupAssignment::default());
    }

    // Kafka copies the subscription into a HashSet and walks it to list the unowned partitions,
    // so that walk's order decides who gets what.
    let topic_order = java_hash_set_order(&subscribed.iter().copied().collect::<Vec<_>>());
    let mut unassigned: Vec<(Uuid, i32)> = Vec::new();
    let mut total: i64 = 0;
    for topic_id in topic_order {
        let count = partition_count(topics, topic_id)?;
        unassigned.extend(
            (0..count)
                .filter(|&p| !group.is_partition_assigned(topic_id, p))
                .map(|p| (topic_id, p)),
        );
        total += i64::from(count);
    }

    let num_members = group.members().len() as i64;
    let min_quota = total / num_members;
    let mut extra_left = total % num_members;

    let mut target = GroupAssignment::default();
    // Members below quota after revocation, with how many partitions they still take.
    let mut unfilled: Vec<(&String, i64)> = Vec::new();
    for (index, (member_id, member)) in group.members().iter().enumerate() {
        let mut quota = min_quota;
        // Tentatively one of the extra partitions; given up below if this member cannot fill it
        // from what it keeps and enough members remain to take the extras (Kafka 4.4 gives the
        // extras to members that already hold them, which moves fewer partitions).
        let mut takes_extra = false;
        if extra_left > 0 {
            quota += 1;
            takes_extra = true;
        }
        let mut kept = member.assignment.clone();
        for (topic_id, partitions) in &member.assignment {
            if !subscribed.contains(topic_id) {
                kept.remove(topic_id);
                continue;
            }
            let size = partitions.len() as i64;
            if size <= quota {
                quota -= size;
                continue;
            }
            // Keep the first `quota` partitions; revoke the rest.
            let keep: std::collections::BTreeSet<i32> =
                partitions.iter().take(quota as usize).copied().collect();
            unassigned.extend(
                partitions
                    .iter()
                    .skip(quota as usize)
                    .map(|&p| (*topic_id, p)),
            );
            quota = 0;
            if keep.is_empty() {
                kept.remove(topic_id);
            } else {
                kept.insert(*topic_id, keep);
            }
        }
        // Kafka keeps an empty partition set given as input as it is; Strom never hands out
        // empty sets, so drop them.
        kept.retain(|_, partitions| !partitions.is_empty());
        let members_left = num_members - index as i64;
        if quota > 0 && takes_extra && members_left > extra_left {
            quota -= 1;
            takes_extra = false;
        }
        if quota > 0 {
            unfilled.push((member_id, quota));
        }
        if takes_extra {
            extra_left -= 1;
        }
        target.members.insert(member_id.clone(), kept);
    }

    let mut next = unassigned.iter();
    for (member_id, quota) in unfilled {
        let Some(assignment) = target.members.get_mut(member_id) else {
            continue;
        };
        for &(topic_id, partition) in next.by_ref().take(quota as usize) {
            assignment.entry(topic_id).or_default().insert(partition);
        }
    }
    if next.next().is_some() {
        return Err(AssignorError::PartitionsLeftUnassigned);
    }
    Ok(target)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assignor::{
        MemberAssignment, MemberSubscriptionAndAssignment, TopicMetadata, TopicsMetadata,
    };
    use std::collections::BTreeMap;

    fn one_topic(t: Uuid, n: i32) -> TopicsMetadata {
        TopicsMetadata(
            [(
                t,
                TopicMetadata {
                    num_partitions: n,
                    ..Default::default()
                },
            )]
            .into(),
        )
    }

    fn member(subs: &[Uuid], assignment: MemberAssignment) -> MemberSubscriptionAndAssignment {
        MemberSubscriptionAndAssignment {
            subscribed_topic_ids: subs.iter().copied().collect(),
            assignment,
            ..Default::default()
        }
    }

    #[test]
    fn fresh_group_gives_extras_to_later_members() {
        let t = Uuid::from_u128(7);
        let members: BTreeMap<_, _> = ["a", "b", "c"]
            .iter()
            .map(|id| (id.to_string(), member(&[t], MemberAssignment::new())))
            .collect();
        let group = GroupSpec::new(members).unwrap();
        let got = UniformAssignor.assign(&group, &one_topic(t, 5)).unwrap();
        // 5 = 1 + 2 + 2: a holds nothing, so it leaves the two extras to b and c.
        assert_eq!(got.members["a"], [(t, [0].into())].into());
        assert_eq!(got.members["b"], [(t, [1, 2].into())].into());
        assert_eq!(got.members["c"], [(t, [3, 4].into())].into());
    }

    #[test]
    fn sticky_when_a_member_joins() {
        // a owned 0..3, b owned 3..6; c joins: each keeps its first two, c gets the revoked ones.
        let t = Uuid::from_u128(7);
        let members: BTreeMap<_, _> = [
            ("a", [(t, (0..3).collect())].into()),
            ("b", [(t, (3..6).collect())].into()),
            ("c", MemberAssignment::new()),
        ]
        .into_iter()
        .map(|(id, a)| (id.to_string(), member(&[t], a)))
        .collect();
        let group = GroupSpec::new(members).unwrap();
        let got = UniformAssignor.assign(&group, &one_topic(t, 6)).unwrap();
        assert_eq!(got.members["a"], [(t, [0, 1].into())].into());
        assert_eq!(got.members["b"], [(t, [3, 4].into())].into());
        assert_eq!(got.members["c"], [(t, [2, 5].into())].into());
    }

    #[test]
    fn unsubscribed_topics_are_dropped_and_unknown_topics_fail() {
        let (t, old) = (Uuid::from_u128(7), Uuid::from_u128(8));
        let group =
            GroupSpec::new([("a".to_string(), member(&[t], [(old, [0].into())].into()))].into())
                .unwrap();
        let got = UniformAssignor.assign(&group, &one_topic(t, 2)).unwrap();
        assert_eq!(got.members["a"], [(t, [0, 1].into())].into());
        assert_eq!(
            UniformAssignor.assign(&group, &TopicsMetadata::default()),
            Err(AssignorError::UnknownTopic(t))
        );
    }
}

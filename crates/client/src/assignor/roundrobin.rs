//! The `roundrobin` assignor (kafka-clients' `RoundRobinAssignor`): every subscribed partition,
//! topics in name order and partitions in id order, is dealt to the members in turn (static
//! members first by instance id, then dynamic ones by member id), skipping a member that is not
//! subscribed to the partition's topic. With identical subscriptions the members' counts differ
//! by at most one.

use std::collections::{BTreeMap, BTreeSet};

use super::range::{java_member_order, member_order};
use super::{
    without_user_data, Assignment, AssignorError, Cluster, PartitionAssignor, Subscription,
    TopicPartition,
};

/// `RoundRobinAssignor`.
#[derive(Debug, Clone, Copy, Default)]
pub struct RoundRobinAssignor;

/// A topic name ordered as Java's `TreeSet<String>` orders it (UTF-16 code units).
#[derive(PartialEq, Eq)]
struct JavaString<'a>(&'a str);

impl PartialOrd for JavaString<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for JavaString<'_> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        super::java_order::compare(self.0, other.0)
    }
}

impl PartitionAssignor for RoundRobinAssignor {
    fn name(&self) -> &'static str {
        "roundrobin"
    }

    fn assign(
        &self,
        cluster: &Cluster,
        subscriptions: &BTreeMap<String, Subscription>,
    ) -> Result<BTreeMap<String, Assignment>, AssignorError> {
        if subscriptions.is_empty() {
            // Java's CircularIterator refuses an empty member list.
            return Err(AssignorError::InvalidInput(
                "round robin assignment needs at least one member".into(),
            ));
        }
        // Java sorts the members as its HashMap lists them; the sort is stable, which matters
        // only for two members claiming one group.instance.id.
        let mut members: Vec<(&str, Option<&str>)> = java_member_order(subscriptions)
            .into_iter()
            .map(|m| (m, subscriptions[m].group_instance_id.as_deref()))
            .collect();
        members.sort_by(|a, b| member_order(*a, *b));

        let topics: BTreeSet<JavaString> = subscriptions
            .values()
            .flat_map(|s| s.topics.iter().map(|t| JavaString(t)))
            .collect();

        let mut assignment: BTreeMap<String, Vec<TopicPartition>> = subscriptions
            .keys()
            .map(|m| (m.clone(), Vec::new()))
            .collect();
        let mut next = 0;
        for JavaString(topic) in topics {
            // Java deals partitions 0..count, whatever ids the metadata lists.
            let count = cluster.partition_count(topic).unwrap_or(0);
            for partition in 0..count {
                // Some member subscribes to `topic` (it came from a subscription), so this ends.
                while !subscriptions[members[next].0]
                    .topics
                    .iter()
                    .any(|t| t == topic)
                {
                    next = (next + 1) % members.len();
                }
                if let Some(list) = assignment.get_mut(members[next].0) {
                    list.push(TopicPartition::new(topic, partition as i32));
                }
                next = (next + 1) % members.len();
            }
        }
        Ok(without_user_data(assignment))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subs(members: &[(&str, &[&str])]) -> BTreeMap<String, Subscription> {
        members
            .iter()
            .map(|(m, topics)| {
                (
                    m.to_string(),
                    Subscription {
                        topics: topics.iter().map(|t| t.to_string()).collect(),
                        generation_id: -1,
                        ..Default::default()
                    },
                )
            })
            .collect()
    }

    fn names(a: &Assignment) -> Vec<String> {
        a.partitions
            .iter()
            .map(|tp| format!("{}-{}", tp.topic, tp.partition))
            .collect()
    }

    #[test]
    fn identical_subscriptions_are_dealt_in_turn() {
        let cluster = Cluster::from_counts([("t0", 3), ("t1", 3)]);
        let a = RoundRobinAssignor
            .assign(
                &cluster,
                &subs(&[("C0", &["t0", "t1"]), ("C1", &["t1", "t0"])]),
            )
            .expect("assign");
        assert_eq!(names(&a["C0"]), ["t0-0", "t0-2", "t1-1"]);
        assert_eq!(names(&a["C1"]), ["t0-1", "t1-0", "t1-2"]);
    }

    #[test]
    fn members_not_subscribed_are_skipped() {
        // The example of Java's documentation, checked against Java.
        let cluster = Cluster::from_counts([("t0", 1), ("t1", 2), ("t2", 3)]);
        let a = RoundRobinAssignor
            .assign(
                &cluster,
                &subs(&[
                    ("C0", &["t0"]),
                    ("C1", &["t0", "t1"]),
                    ("C2", &["t0", "t1", "t2"]),
                ]),
            )
            .expect("assign");
        assert_eq!(names(&a["C0"]), ["t0-0"]);
        assert_eq!(names(&a["C1"]), ["t1-0"]);
        assert_eq!(names(&a["C2"]), ["t1-1", "t2-0", "t2-1", "t2-2"]);
    }

    #[test]
    fn an_empty_group_is_an_error_as_in_java() {
        let r = RoundRobinAssignor.assign(&Cluster::default(), &BTreeMap::new());
        assert!(matches!(r, Err(AssignorError::InvalidInput(_))));
    }

    #[test]
    fn by_name_knows_every_client_assignor() {
        for name in ["range", "roundrobin", "sticky", "cooperative-sticky"] {
            assert_eq!(super::super::by_name(name).map(|a| a.name()), Some(name));
        }
        assert!(super::super::by_name("nope").is_none());
    }
}

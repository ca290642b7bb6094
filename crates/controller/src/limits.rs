//! How much one user operation may ask of the controller (Kafka's `QuorumController` and
//! `ReplicationControlManager` bounds). A request over them is refused as a whole with
//! POLICY_VIOLATION before anything proportional to what it asks for is allocated, so a single
//! CreateTopics or CreatePartitions claiming 2^31-1 partitions costs a few bytes, not the
//! node's memory.

use std::collections::HashSet;

use crate::controller::ControllerError;
use crate::names::METADATA_TOPIC;

/// The partitions one CreateTopics, or the new partitions one CreatePartitions, may ask for
/// in total (`ReplicationControlManager.MAX_PARTITIONS_PER_BATCH`).
pub const MAX_PARTITIONS_PER_BATCH: i64 = 10_000;

/// The metadata records one user operation may produce (`QuorumController.MAX_RECORDS_PER_USER_OP`,
/// equal to its `MAX_RECORDS_PER_BATCH`): a CreateTopics of 10,000 partitions passes the
/// partition bound but makes 10,001 records with its TopicRecord, and is refused.
pub const MAX_RECORDS_PER_USER_OP: usize = 10_000;

/// `validateTotalNumberOfPartitions` for CreateTopics.
pub fn too_many_partitions() -> ControllerError {
    ControllerError::PolicyViolation("Excessively large number of partitions per request.".into())
}

/// `validateTotalNumberOfPartitions` for CreatePartitions.
pub fn too_many_additional_partitions() -> ControllerError {
    ControllerError::PolicyViolation(
        "Excessively large number of additional partitions per request.".into(),
    )
}

/// What Kafka's controller answers when an operation overflows its bounded record list
/// (`EventHandlerExceptionInfo` on a `BoundedListTooLongException`).
pub fn too_many_records() -> ControllerError {
    ControllerError::PolicyViolation("Unable to perform excessively large batch operation.".into())
}

/// One topic of a CreateTopics request as the partition bound sees it.
#[derive(Debug, Clone, Copy)]
pub struct RequestedTopic<'a> {
    pub name: &'a str,
    /// -1: the default (`num.partitions`); 0 or below -1 are refused later and count nothing.
    pub num_partitions: i32,
    /// Explicit assignments, which count instead of `num_partitions` when there are any.
    pub assignments: usize,
}

/// Whether a CreateTopics request stays within [`MAX_PARTITIONS_PER_BATCH`]. The topics the
/// request names more than once, and the metadata topic, are refused on their own (Kafka's
/// `ControllerApis` drops them before the controller counts), so they count nothing; the sum
/// cannot overflow.
pub fn check_create_topics<'a>(
    topics: impl Iterator<Item = RequestedTopic<'a>> + Clone,
    default_partitions: i32,
) -> Result<(), ControllerError> {
    let duplicates = duplicate_names(topics.clone().map(|t| t.name));
    let mut total: i64 = 0;
    let counted = |t: &RequestedTopic| !duplicates.contains(t.name) && t.name != METADATA_TOPIC;
    for t in topics.filter(counted) {
        total += if t.assignments > 0 {
            t.assignments as i64
        } else if t.num_partitions == -1 {
            default_partitions as i64
        } else {
            t.num_partitions.max(0) as i64
        };
        if total > MAX_PARTITIONS_PER_BATCH {
            return Err(too_many_partitions());
        }
    }
    Ok(())
}

/// Whether the partitions a CreatePartitions request adds stay within
/// [`MAX_PARTITIONS_PER_BATCH`]: `(name, count)` per topic, `current(name)` the partitions a
/// topic has (`None`: unknown, it is refused on its own and counts nothing, as do counts that
/// do not grow a topic and duplicated names).
pub fn check_create_partitions<'a>(
    topics: impl Iterator<Item = (&'a str, i32)> + Clone,
    current: impl Fn(&str) -> Option<usize>,
) -> Result<(), ControllerError> {
    let duplicates = duplicate_names(topics.clone().map(|(n, _)| n));
    let mut total: i64 = 0;
    for (name, count) in topics.filter(|(n, _)| !duplicates.contains(n)) {
        let Some(current) = current(name) else {
            continue;
        };
        total += (count as i64 - current as i64).max(0);
        if total > MAX_PARTITIONS_PER_BATCH {
            return Err(too_many_additional_partitions());
        }
    }
    Ok(())
}

/// The names that occur more than once.
pub fn duplicate_names<'a>(names: impl Iterator<Item = &'a str>) -> HashSet<&'a str> {
    let mut seen = HashSet::new();
    names.filter(|n| !seen.insert(*n)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(name: &str, num_partitions: i32, assignments: usize) -> RequestedTopic<'_> {
        RequestedTopic {
            name,
            num_partitions,
            assignments,
        }
    }

    #[test]
    fn create_topics_total() {
        let ok = |v: &[RequestedTopic], d| check_create_topics(v.iter().copied(), d).is_ok();
        assert!(ok(&[t("a", 10_000, 0)], 1));
        assert!(!ok(&[t("a", 10_001, 0)], 1));
        assert!(!ok(&[t("a", 5_000, 0), t("b", 5_001, 0)], 1));
        assert!(!ok(&[t("a", i32::MAX, 0), t("b", i32::MAX, 0)], 1));
        // -1 is the default, which counts as well.
        assert!(!ok(&[t("a", -1, 0)], 1_000_000));
        assert!(ok(&[t("a", -1, 0), t("b", 9_999, 0)], 1));
        // Assignments count instead of the partition count; invalid counts count nothing.
        assert!(!ok(&[t("a", -1, 10_001)], 1));
        assert!(ok(&[t("a", i32::MIN, 0), t("b", 0, 0)], 1));
        // A duplicated topic is refused on its own.
        assert!(ok(&[t("a", i32::MAX, 0), t("a", 1, 0)], 1));
        assert!(ok(&[t(METADATA_TOPIC, i32::MAX, 0)], 1));
    }

    #[test]
    fn create_partitions_total() {
        let current = |n: &str| (n != "missing").then_some(3);
        let ok = |v: &[(&str, i32)]| check_create_partitions(v.iter().copied(), current).is_ok();
        assert!(ok(&[("a", 10_003)]));
        assert!(!ok(&[("a", 10_004)]));
        assert!(!ok(&[("a", 5_003), ("b", 5_004)]));
        assert!(!ok(&[("a", i32::MAX)]));
        assert!(ok(&[("missing", i32::MAX), ("a", 1), ("b", -5)]));
        assert!(ok(&[("a", i32::MAX), ("a", i32::MAX)]));
    }
}

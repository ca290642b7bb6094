//! Worked examples; the differential test (`tests/sticky_diff.rs`) checks the same code
//! against Java's classes on generated inputs.

use std::collections::BTreeMap;

use super::*;
use crate::assignor::PartitionInfo;

fn tp(t: &str, p: i32) -> TopicPartition {
    TopicPartition::new(t, p)
}

fn sub(topics: &[&str], owned: Vec<TopicPartition>, generation: i32) -> Subscription {
    Subscription {
        topics: topics.iter().map(|t| t.to_string()).collect(),
        owned_partitions: owned,
        generation_id: generation,
        ..Subscription::default()
    }
}

fn sizes(result: &BTreeMap<String, Assignment>) -> Vec<usize> {
    result.values().map(|a| a.partitions.len()).collect()
}

#[test]
fn fresh_group_is_balanced_round_robin() {
    let cluster = Cluster::from_counts([("t", 5)]);
    let subs: BTreeMap<String, Subscription> = [
        ("a", sub(&["t"], vec![], -1)),
        ("b", sub(&["t"], vec![], -1)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let result = CooperativeStickyAssignor::new()
        .assign(&cluster, &subs)
        .unwrap();
    assert_eq!(
        result["a"].partitions,
        vec![tp("t", 0), tp("t", 2), tp("t", 4)]
    );
    assert_eq!(result["b"].partitions, vec![tp("t", 1), tp("t", 3)]);
}

#[test]
fn member_leaving_rebalances_and_keeps_the_rest() {
    // a, b, c had two partitions each; c leaves: a and b keep theirs and split c's.
    let cluster = Cluster::from_counts([("t", 6)]);
    let subs: BTreeMap<String, Subscription> = [
        ("a", sub(&["t"], vec![tp("t", 0), tp("t", 3)], 3)),
        ("b", sub(&["t"], vec![tp("t", 1), tp("t", 4)], 3)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let result = CooperativeStickyAssignor::new()
        .assign(&cluster, &subs)
        .unwrap();
    assert_eq!(sizes(&result), vec![3, 3]);
    assert!(result["a"]
        .partitions
        .starts_with(&[tp("t", 0), tp("t", 3)]));
    assert!(result["b"]
        .partitions
        .starts_with(&[tp("t", 1), tp("t", 4)]));
}

#[test]
fn cooperative_withholds_a_moving_partition() {
    // a owns all four; b joins. Two partitions must move to b, but in this round b gets none
    // and a keeps two: a revokes the others first.
    let cluster = Cluster::from_counts([("t", 4)]);
    let owned = vec![tp("t", 0), tp("t", 1), tp("t", 2), tp("t", 3)];
    let subs: BTreeMap<String, Subscription> = [
        ("a", sub(&["t"], owned.clone(), 5)),
        ("b", sub(&["t"], vec![], 5)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let result = CooperativeStickyAssignor::new()
        .assign(&cluster, &subs)
        .unwrap();
    assert_eq!(result["a"].partitions, vec![tp("t", 0), tp("t", 1)]);
    assert!(result["b"].partitions.is_empty());
    // The eager sticky assignor hands them over at once.
    let eager: BTreeMap<String, Subscription> = [
        (
            "a",
            Subscription {
                user_data: Some(encode_sticky_user_data(&owned, Some(5))),
                ..sub(&["t"], vec![], -1)
            },
        ),
        ("b", sub(&["t"], vec![], -1)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let result = StickyAssignor::new().assign(&cluster, &eager).unwrap();
    assert_eq!(result["a"].partitions, vec![tp("t", 0), tp("t", 1)]);
    assert_eq!(result["b"].partitions, vec![tp("t", 2), tp("t", 3)]);
}

#[test]
fn general_path_keeps_owned_partitions_where_balanced() {
    // b also subscribes to u, so subscriptions differ: the general path.
    let cluster = Cluster::from_counts([("t", 3), ("u", 1)]);
    let subs: BTreeMap<String, Subscription> = [
        ("a", sub(&["t"], vec![tp("t", 0), tp("t", 1)], 2)),
        ("b", sub(&["t", "u"], vec![tp("t", 2)], 2)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let result = CooperativeStickyAssignor::new()
        .assign(&cluster, &subs)
        .unwrap();
    assert_eq!(result["a"].partitions, vec![tp("t", 0), tp("t", 1)]);
    assert_eq!(result["b"].partitions, vec![tp("t", 2), tp("u", 0)]);
}

#[test]
fn rack_aware_prefers_a_replica_rack() {
    let racks = |r: &str| PartitionInfo {
        partition: 0,
        replica_racks: vec![r.to_string()],
    };
    let mut cluster = Cluster::default();
    let mut ps = vec![racks("r1"), racks("r2")];
    ps[1].partition = 1;
    cluster.topics.insert("t".into(), ps);
    let with_rack = |r: &str| Subscription {
        rack_id: Some(r.to_string()),
        ..sub(&["t"], vec![], -1)
    };
    let subs: BTreeMap<String, Subscription> = [("a", with_rack("r2")), ("b", with_rack("r1"))]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    let result = StickyAssignor::new().assign(&cluster, &subs).unwrap();
    assert_eq!(result["a"].partitions, vec![tp("t", 1)]);
    assert_eq!(result["b"].partitions, vec![tp("t", 0)]);
}

#[test]
fn unnumbered_partitions_are_an_error_not_a_panic() {
    let mut cluster = Cluster::from_counts([("t", 2)]);
    if let Some(ps) = cluster.topics.get_mut("t") {
        ps[1].partition = 7;
    }
    let subs: BTreeMap<String, Subscription> = [("a".to_string(), sub(&["t"], vec![], -1))]
        .into_iter()
        .collect();
    assert!(StickyAssignor::new().assign(&cluster, &subs).is_err());
}

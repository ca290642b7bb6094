//! Partition reassignment in cluster mode: AlterPartitionReassignments moves a partition's
//! replicas, ListPartitionReassignments shows it while it runs, and the completed move leaves
//! the new replicas with the whole log and the removed one without its partition dir.

mod common;

use std::time::Duration;

use common::block_on;
use common::cluster::*;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use strom_protocol::kafka::messages::alter_partition_reassignments_request::{
    ReassignablePartition, ReassignableTopic,
};
use strom_protocol::kafka::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, ApiKey, BrokerId,
    ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse, MetadataRequest,
    MetadataResponse,
};
use strom_protocol::kafka::protocol::StrBytes;

const SETTINGS: &[&str] = &[
    "broker.session.timeout.ms=3000",
    "broker.heartbeat.interval.ms=500",
    "replica.fetch.wait.max.ms=100",
];

fn port(c: &Cluster, node: i32) -> u16 {
    c.nodes.iter().find(|n| n.id == node).unwrap().port
}

/// (replicas, isr, leader) of partition 0 of `topic` in a raw Metadata v12 answer from `node`.
fn partition_state(c: &Cluster, node: i32, topic: &str) -> Option<(Vec<i32>, Vec<i32>, i32)> {
    use strom_protocol::kafka::messages::metadata_request::MetadataRequestTopic;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port(c, node))).ok()?;
    let resp: MetadataResponse = common::raw_call(
        &mut s,
        ApiKey::Metadata,
        12,
        &MetadataRequest::default().with_topics(Some(vec![MetadataRequestTopic::default()
            .with_name(Some(StrBytes::from_string(topic.to_string()).into()))])),
    );
    let p = resp
        .topics
        .first()?
        .partitions
        .iter()
        .find(|p| p.partition_index == 0)?;
    Some((
        p.replica_nodes.iter().map(|b| b.0).collect(),
        p.isr_nodes.iter().map(|b| b.0).collect(),
        p.leader_id.0,
    ))
}

fn reassign(
    c: &Cluster,
    node: i32,
    topic: &str,
    partition: i32,
    target: Option<&[i32]>,
) -> AlterPartitionReassignmentsResponse {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port(c, node))).unwrap();
    common::raw_call(
        &mut s,
        ApiKey::AlterPartitionReassignments,
        0,
        &AlterPartitionReassignmentsRequest::default()
            .with_timeout_ms(10_000)
            .with_topics(vec![ReassignableTopic::default()
                .with_name(StrBytes::from_string(topic.to_string()).into())
                .with_partitions(vec![ReassignablePartition::default()
                    .with_partition_index(partition)
                    .with_replicas(
                        target.map(|t| t.iter().map(|&b| BrokerId(b)).collect()),
                    )])]),
    )
}

fn list_reassignments(c: &Cluster, node: i32) -> ListPartitionReassignmentsResponse {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port(c, node))).unwrap();
    common::raw_call(
        &mut s,
        ApiKey::ListPartitionReassignments,
        0,
        &ListPartitionReassignmentsRequest::default()
            .with_timeout_ms(10_000)
            .with_topics(None),
    )
}

fn partition_error(r: &AlterPartitionReassignmentsResponse) -> i16 {
    assert_eq!(r.error_code, 0, "{r:?}");
    r.responses[0].partitions[0].error_code
}

#[test]
fn reassignment_moves_a_partition_to_new_replicas() {
    let c = Cluster::start_with(3, SETTINGS);
    let topic = "moved";
    eventually("all brokers registered everywhere", || {
        (1..=3)
            .all(|n| {
                std::net::TcpStream::connect(("127.0.0.1", port(&c, n)))
                    .ok()
                    .is_some_and(|mut s| {
                        let r: MetadataResponse = common::raw_call(
                            &mut s,
                            ApiKey::Metadata,
                            12,
                            &MetadataRequest::default().with_topics(Some(vec![])),
                        );
                        r.brokers.len() == 3 && r.controller_id.0 > 0
                    })
            })
            .then_some(())
    });
    let admin: AdminClient<DefaultClientContext> = c.config(&[1, 2, 3]).create().unwrap();
    let assignment: &[&[i32]] = &[&[1, 2]];
    let new = NewTopic::new(topic, 1, TopicReplication::Variable(assignment));
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    eventually("topic created", || {
        block_on(admin.create_topics([&new], &opts))
            .ok()
            .filter(|r| r[0].is_ok())
    });
    eventually("topic on every node", || {
        (1..=3)
            .all(|n| {
                partition_state(&c, n, topic).is_some_and(|(r, isr, _)| {
                    r == vec![1, 2] && {
                        let mut i = isr.clone();
                        i.sort_unstable();
                        i == vec![1, 2]
                    }
                })
            })
            .then_some(())
    });
    produce(&c, topic, 500);

    // Errors first: unknown partition, bad targets, nothing to cancel.
    assert_eq!(partition_error(&reassign(&c, 1, "nope", 0, Some(&[1]))), 3);
    assert_eq!(partition_error(&reassign(&c, 1, topic, 7, Some(&[1]))), 3);
    assert_eq!(
        partition_error(&reassign(&c, 2, topic, 0, Some(&[2, 9]))),
        39
    );
    assert_eq!(
        partition_error(&reassign(&c, 2, topic, 0, Some(&[2, 2]))),
        39
    );
    assert_eq!(partition_error(&reassign(&c, 3, topic, 0, Some(&[]))), 39);
    assert_eq!(partition_error(&reassign(&c, 3, topic, 0, None)), 85);
    assert!(list_reassignments(&c, 1).topics.is_empty());

    // The move, sent to every node in turn (standbys forward it).
    let r = reassign(&c, 3, topic, 0, Some(&[2, 3]));
    assert_eq!(partition_error(&r), 0, "{r:?}");
    // In progress (replicas [2,3,1], adding [3], removing [1]) or already done.
    let l = list_reassignments(&c, 2);
    assert_eq!(l.error_code, 0);
    if let Some(t) = l.topics.first() {
        let p = &t.partitions[0];
        assert_eq!(
            p.replicas.iter().map(|b| b.0).collect::<Vec<_>>(),
            vec![2, 3, 1]
        );
        assert_eq!(
            p.adding_replicas.iter().map(|b| b.0).collect::<Vec<_>>(),
            vec![3]
        );
        assert_eq!(
            p.removing_replicas.iter().map(|b| b.0).collect::<Vec<_>>(),
            vec![1]
        );
    }

    for n in 1..=3 {
        eventually("reassignment complete", || {
            partition_state(&c, n, topic).and_then(|(r, isr, leader)| {
                (r == vec![2, 3]
                    && !isr.is_empty()
                    && isr.iter().all(|b| [2, 3].contains(b))
                    && [2, 3].contains(&leader))
                .then_some(())
            })
        });
    }
    for n in 1..=3 {
        assert!(list_reassignments(&c, n).topics.is_empty());
    }
    eventually("broker 1 drops its copy", || {
        (!c.data_dir(1).join(format!("{topic}-0")).exists()).then_some(())
    });
    eventually("broker 3 has broker 2's log", || {
        let (a, b) = (log_bytes(&c, 2, topic), log_bytes(&c, 3, topic));
        (!a.is_empty() && a == b).then_some(())
    });
    assert_eq!(consume_count(&c, &[2, 3], topic, 1, 500), 500);
    // More records after the move reach both new replicas.
    produce(&c, topic, 100);
    assert_eq!(consume_count(&c, &[2, 3], topic, 1, 600), 600);
    eventually("ISR [2,3]", || {
        partition_state(&c, 2, topic).and_then(|(_, mut isr, _)| {
            isr.sort_unstable();
            (isr == vec![2, 3]).then_some(())
        })
    });

    // A cancelled reassignment goes back to the replicas it started from.
    assert_eq!(
        partition_error(&reassign(&c, 1, topic, 0, Some(&[3, 1]))),
        0
    );
    let r = reassign(&c, 1, topic, 0, None);
    let code = partition_error(&r);
    // 85 if the move to [3,1] had already finished.
    assert!(code == 0 || code == 85, "{r:?}");
    if code == 0 {
        eventually("cancel applied", || {
            partition_state(&c, 1, topic).and_then(|(mut r, _, _)| {
                // Kafka's revert keeps the reassignment's order: [3, 2].
                r.sort_unstable();
                (r == vec![2, 3]).then_some(())
            })
        });
        assert!(list_reassignments(&c, 2).topics.is_empty());
    }
}

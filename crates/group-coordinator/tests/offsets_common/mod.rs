//! Helpers of the offsets tests: a service over an in-memory `__consumer_offsets`, and
//! requests built the way clients send them.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use strom_coordinator_common::timer::TokioClock;
use strom_group_coordinator::config::GroupCoordinatorConfig;
use strom_group_coordinator::metadata::{GroupMetadataImage, TopicImage};
use strom_group_coordinator::records::CoordinatorRecord;
use strom_group_coordinator::testing::MemPartitions;
use strom_group_coordinator::topic::GROUP_METADATA_TOPIC_NAME;
use strom_group_coordinator::{GroupCoordinatorService, GroupRequestContext};
use strom_protocol::kafka::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use strom_protocol::kafka::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
};
use strom_protocol::kafka::messages::*;
use strom_protocol::kafka::protocol::StrBytes;
use uuid::Uuid;

pub const PARTITIONS: i32 = 4;

pub fn config() -> GroupCoordinatorConfig {
    let mut c = GroupCoordinatorConfig::default();
    c.offsets_topic.num_partitions = PARTITIONS;
    c
}

/// Topics `t1` (4 partitions) and `t2` (2).
pub fn image() -> GroupMetadataImage {
    GroupMetadataImage::new([
        TopicImage {
            name: "t1".into(),
            id: Uuid::from_u128(1),
            num_partitions: 4,
            ..Default::default()
        },
        TopicImage {
            name: "t2".into(),
            id: Uuid::from_u128(2),
            num_partitions: 2,
            ..Default::default()
        },
    ])
}

/// A service over `mem` leading the offsets partitions `elected`, loaded.
pub async fn service_on(
    mem: &Arc<MemPartitions>,
    config: GroupCoordinatorConfig,
    elected: &[i32],
) -> Arc<GroupCoordinatorService> {
    service_on_clock(mem, config, elected, Arc::new(TokioClock::new())).await
}

/// As [`service_on`], reading `clock` (a restarted broker keeps the wall clock).
pub async fn service_on_clock(
    mem: &Arc<MemPartitions>,
    config: GroupCoordinatorConfig,
    elected: &[i32],
    clock: Arc<TokioClock>,
) -> Arc<GroupCoordinatorService> {
    let s = GroupCoordinatorService::with_clock(config, mem.clone(), mem.clone(), clock);
    s.on_new_metadata(image());
    for p in elected {
        s.on_elected(*p, 0);
    }
    for _ in 0..5000 {
        let loaded = s.partitions();
        if elected
            .iter()
            .all(|p| loaded.iter().any(|(q, ok)| q == p && *ok))
        {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("offsets partitions not loaded");
}

pub async fn service(
    config: GroupCoordinatorConfig,
) -> (Arc<GroupCoordinatorService>, Arc<MemPartitions>) {
    let mem = MemPartitions::new();
    let all: Vec<i32> = (0..config.offsets_topic.num_partitions).collect();
    let s = service_on(&mem, config, &all).await;
    (s, mem)
}

pub fn ctx(version: i16) -> GroupRequestContext {
    GroupRequestContext {
        client_id: "test".into(),
        client_host: "/127.0.0.1".into(),
        api_version: version,
    }
}

pub fn sb(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// (partition, offset, leader epoch, metadata)
pub type Part<'a> = (i32, i64, i32, Option<&'a str>);

/// A simple consumer's commit (generation -1, no member).
pub fn commit_req(group: &str, topics: &[(&str, &[Part<'_>])]) -> OffsetCommitRequest {
    OffsetCommitRequest::default()
        .with_group_id(GroupId(sb(group)))
        .with_generation_id_or_member_epoch(-1)
        .with_retention_time_ms(-1)
        .with_topics(
            topics
                .iter()
                .map(|(t, ps)| {
                    OffsetCommitRequestTopic::default()
                        .with_name(TopicName(sb(t)))
                        .with_partitions(
                            ps.iter()
                                .map(|(p, o, e, m)| {
                                    OffsetCommitRequestPartition::default()
                                        .with_partition_index(*p)
                                        .with_committed_offset(*o)
                                        .with_committed_leader_epoch(*e)
                                        .with_committed_metadata(m.map(sb))
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
}

/// (topic, partition) -> error code of a commit response, in response order.
pub fn commit_codes(r: &OffsetCommitResponse) -> Vec<(String, i32, i16)> {
    r.topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(move |p| (t.name.0.to_string(), p.partition_index, p.error_code))
        })
        .collect()
}

/// A v8+ fetch of one group.
pub fn fetch_group(group: &str, topics: Option<&[(&str, &[i32])]>) -> OffsetFetchRequestGroup {
    OffsetFetchRequestGroup::default()
        .with_group_id(GroupId(sb(group)))
        .with_member_epoch(-1)
        .with_topics(topics.map(|ts| {
            ts.iter()
                .map(|(t, ps)| {
                    OffsetFetchRequestTopics::default()
                        .with_name(TopicName(sb(t)))
                        .with_partition_indexes(ps.to_vec())
                })
                .collect()
        }))
}

pub fn fetch_req(groups: Vec<OffsetFetchRequestGroup>, require_stable: bool) -> OffsetFetchRequest {
    OffsetFetchRequest::default()
        .with_groups(groups)
        .with_require_stable(require_stable)
}

/// A fetch in the one-group form of v1-v7.
pub fn fetch_req_old(group: &str, topics: Option<&[(&str, &[i32])]>) -> OffsetFetchRequest {
    OffsetFetchRequest::default()
        .with_group_id(GroupId(sb(group)))
        .with_topics(topics.map(|ts| {
            ts.iter()
                .map(|(t, ps)| {
                    OffsetFetchRequestTopic::default()
                        .with_name(TopicName(sb(t)))
                        .with_partition_indexes(ps.to_vec())
                })
                .collect()
        }))
}

/// One fetched partition: (topic, partition, offset, leader epoch, metadata, error).
pub type Fetched = (String, i32, i64, i32, String, i16);

/// The partitions of group `i` of a v8+ response.
pub fn fetched(r: &OffsetFetchResponse, i: usize) -> Vec<Fetched> {
    r.groups[i]
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(move |p| {
                (
                    t.name.0.to_string(),
                    p.partition_index,
                    p.committed_offset,
                    p.committed_leader_epoch,
                    p.metadata
                        .as_ref()
                        .map(|m| m.to_string())
                        .unwrap_or_default(),
                    p.error_code,
                )
            })
        })
        .collect()
}

/// The committed offset of one partition of one group (v9 fetch; -1 if none).
pub async fn offset_of(s: &GroupCoordinatorService, group: &str, topic: &str, p: i32) -> i64 {
    let r = s
        .offset_fetch(
            &ctx(9),
            fetch_req(vec![fetch_group(group, Some(&[(topic, &[p])]))], false),
        )
        .await;
    assert_eq!(r.groups[0].error_code, 0, "fetch of {group}");
    r.groups[0].topics[0].partitions[0].committed_offset
}

pub fn tp_of(s: &GroupCoordinatorService, group: &str) -> (String, i32) {
    (
        GROUP_METADATA_TOPIC_NAME.to_string(),
        s.partition_for(group),
    )
}

/// The decoded records of the offsets partition of `group`.
pub fn records_of(
    s: &GroupCoordinatorService,
    mem: &MemPartitions,
    group: &str,
) -> Vec<CoordinatorRecord> {
    mem.records(&tp_of(s, group))
        .iter()
        .map(|(k, v)| CoordinatorRecord::decode(k, v.as_deref()).expect("a record Kafka can read"))
        .collect()
}

/// Groups with distinct offsets partitions: `g0` .. found by trying names.
pub fn groups_on_distinct_partitions(s: &GroupCoordinatorService, n: usize) -> Vec<String> {
    let mut seen = Vec::new();
    let mut out = Vec::new();
    for i in 0.. {
        let g = format!("group-{i}");
        let p = s.partition_for(&g);
        if !seen.contains(&p) {
            seen.push(p);
            out.push(g);
            if out.len() == n {
                break;
            }
        }
    }
    out
}

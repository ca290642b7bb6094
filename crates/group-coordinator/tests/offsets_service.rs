//! Committed offsets through the real `GroupCoordinatorService` and coordinator runtime over
//! an in-memory `__consumer_offsets`: OffsetCommit, OffsetFetch (all versions' forms,
//! committed state only, require_stable), OffsetDelete, DeleteGroups, loading.

mod offsets_common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use offsets_common::*;
use strom_group_coordinator::records::CoordinatorRecord;
use strom_protocol::kafka::messages::offset_delete_request::{
    OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
};
use strom_protocol::kafka::messages::*;
use strom_protocol::ErrorCode;

const NONE: i16 = 0;

fn code(e: ErrorCode) -> i16 {
    e.code()
}

#[tokio::test]
async fn a_simple_group_commits_and_fetches_with_metadata_and_leader_epoch() {
    let (s, mem) = service(config()).await;
    let r = s
        .offset_commit(
            &ctx(8),
            commit_req(
                "simple",
                &[
                    ("t1", &[(0, 42, 7, Some("meta")), (3, 9, -1, None)]),
                    ("t2", &[(1, 5, 2, Some(""))]),
                ],
            ),
        )
        .await;
    assert_eq!(
        commit_codes(&r),
        vec![
            ("t1".into(), 0, NONE),
            ("t1".into(), 3, NONE),
            ("t2".into(), 1, NONE)
        ]
    );
    // Named partitions, one never committed.
    let f = s
        .offset_fetch(
            &ctx(9),
            fetch_req(
                vec![fetch_group("simple", Some(&[("t1", &[0, 1, 3])]))],
                false,
            ),
        )
        .await;
    assert_eq!(f.groups[0].error_code, NONE);
    assert_eq!(
        fetched(&f, 0),
        vec![
            ("t1".into(), 0, 42, 7, "meta".into(), NONE),
            ("t1".into(), 1, -1, -1, "".into(), NONE),
            ("t1".into(), 3, 9, -1, "".into(), NONE),
        ]
    );
    // Every partition (topics null), sorted.
    let f = s
        .offset_fetch(&ctx(8), fetch_req(vec![fetch_group("simple", None)], false))
        .await;
    assert_eq!(
        fetched(&f, 0),
        vec![
            ("t1".into(), 0, 42, 7, "meta".into(), NONE),
            ("t1".into(), 3, 9, -1, "".into(), NONE),
            ("t2".into(), 1, 5, 2, "".into(), NONE),
        ]
    );
    // The records are Kafka's: OffsetCommitValue v4 with the commit's timestamp.
    let recs = records_of(&s, &mem, "simple");
    assert_eq!(recs.len(), 3);
    match &recs[0] {
        CoordinatorRecord::OffsetCommit(k, Some((4, v))) => {
            assert_eq!(
                (k.group.as_str(), k.topic.as_str(), k.partition),
                ("simple", "t1", 0)
            );
            assert_eq!(
                (v.offset, v.leader_epoch, v.metadata.as_str()),
                (42, 7, "meta")
            );
            assert_eq!(v.expire_timestamp, -1);
            assert!(v.commit_timestamp > 0);
            // The topic's id, as Kafka 4.4's broker fills it in for a commit by name.
            assert_eq!(v.topic_id, uuid::Uuid::from_u128(1));
        }
        other => panic!("not an OffsetCommit v4 record: {other:?}"),
    }
    // A later commit replaces the offset.
    s.offset_commit(
        &ctx(8),
        commit_req("simple", &[("t1", &[(0, 50, 8, None)])]),
    )
    .await;
    assert_eq!(offset_of(&s, "simple", "t1", 0).await, 50);
}

#[tokio::test]
async fn unknown_topics_and_partitions_too_large_metadata_and_whole_request_errors() {
    let mut c = config();
    c.offset_metadata_max_bytes = 4;
    let (s, mem) = service(c).await;
    let r = s
        .offset_commit(
            &ctx(8),
            commit_req(
                "g",
                &[
                    ("nope", &[(0, 1, -1, None)]),
                    (
                        "t1",
                        &[
                            (9, 1, -1, None),
                            (0, 1, -1, Some("12345")),
                            (1, 1, -1, Some("éééé")),
                        ],
                    ),
                ],
            ),
        )
        .await;
    assert_eq!(
        commit_codes(&r),
        vec![
            ("nope".into(), 0, code(ErrorCode::UnknownTopicOrPartition)),
            ("t1".into(), 9, code(ErrorCode::UnknownTopicOrPartition)),
            ("t1".into(), 0, code(ErrorCode::OffsetMetadataTooLarge)),
            // Four UTF-16 units fit, though they are eight bytes.
            ("t1".into(), 1, NONE),
        ]
    );
    assert_eq!(offset_of(&s, "g", "t1", 0).await, -1);
    assert_eq!(offset_of(&s, "g", "t1", 1).await, 1);

    // Nothing left after the broker's checks: the coordinator is not asked, nothing written.
    let before = records_of(&s, &mem, "h").len();
    let r = s
        .offset_commit(&ctx(8), commit_req("h", &[("nope", &[(0, 1, -1, None)])]))
        .await;
    assert_eq!(
        commit_codes(&r),
        vec![("nope".into(), 0, code(ErrorCode::UnknownTopicOrPartition))]
    );
    assert_eq!(records_of(&s, &mem, "h").len(), before);

    // A member generation for a group nobody knows (v8): ILLEGAL_GENERATION on every
    // partition the coordinator saw; the unknown topic keeps its own answer.
    let req = commit_req(
        "h",
        &[("nope", &[(0, 1, -1, None)]), ("t2", &[(0, 1, -1, None)])],
    )
    .with_generation_id_or_member_epoch(3)
    .with_member_id(sb("m-1"));
    let r = s.offset_commit(&ctx(8), req).await;
    assert_eq!(
        commit_codes(&r),
        vec![
            ("nope".into(), 0, code(ErrorCode::UnknownTopicOrPartition)),
            ("t2".into(), 0, code(ErrorCode::IllegalGeneration)),
        ]
    );
}

#[tokio::test]
async fn fetch_sees_committed_offsets_only_while_the_high_watermark_is_held() {
    let (s, mem) = service(config()).await;
    s.offset_commit(&ctx(8), commit_req("g", &[("t1", &[(0, 10, -1, None)])]))
        .await;
    mem.hold_hw.store(true, Ordering::SeqCst);
    let s2 = s.clone();
    let pending = tokio::spawn(async move {
        s2.offset_commit(&ctx(8), commit_req("g", &[("t1", &[(0, 20, -1, None)])]))
            .await
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !pending.is_finished(),
        "the commit waits for the high watermark"
    );
    assert_eq!(
        offset_of(&s, "g", "t1", 0).await,
        10,
        "reads see committed state"
    );

    // require_stable reads the latest offsets but answers only once they are committed.
    let s3 = s.clone();
    let stable = tokio::spawn(async move {
        s3.offset_fetch(
            &ctx(9),
            fetch_req(vec![fetch_group("g", Some(&[("t1", &[0])]))], true),
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!stable.is_finished());

    let tp = tp_of(&s, "g");
    let hw = mem.release_hw(&tp);
    mem.hold_hw.store(false, Ordering::SeqCst);
    s.on_high_watermark(tp.1, hw);
    let r = pending.await.unwrap();
    assert_eq!(commit_codes(&r), vec![("t1".into(), 0, NONE)]);
    let f = stable.await.unwrap();
    assert_eq!(fetched(&f, 0)[0].2, 20);
    assert_eq!(offset_of(&s, "g", "t1", 0).await, 20);
}

#[tokio::test]
async fn a_failed_append_rolls_back_and_answers_coordinator_not_available() {
    let (s, mem) = service(config()).await;
    s.offset_commit(&ctx(8), commit_req("g", &[("t1", &[(0, 10, -1, None)])]))
        .await;
    *mem.fail_next.lock() = Some(ErrorCode::NotEnoughReplicas);
    let r = s
        .offset_commit(
            &ctx(8),
            commit_req("g", &[("t1", &[(0, 11, -1, None), (1, 3, -1, None)])]),
        )
        .await;
    assert_eq!(
        commit_codes(&r),
        vec![
            ("t1".into(), 0, code(ErrorCode::CoordinatorNotAvailable)),
            ("t1".into(), 1, code(ErrorCode::CoordinatorNotAvailable)),
        ]
    );
    assert_eq!(offset_of(&s, "g", "t1", 0).await, 10);
    assert_eq!(offset_of(&s, "g", "t1", 1).await, -1);
    // The next commit builds on the rolled-back state and lands at the right offset.
    s.offset_commit(&ctx(8), commit_req("g", &[("t1", &[(1, 4, -1, None)])]))
        .await;
    assert_eq!(offset_of(&s, "g", "t1", 0).await, 10);
    assert_eq!(offset_of(&s, "g", "t1", 1).await, 4);
    // A leadership loss while appending: NOT_COORDINATOR.
    *mem.fail_next.lock() = Some(ErrorCode::NotLeaderOrFollower);
    let r = s
        .offset_commit(&ctx(8), commit_req("g", &[("t1", &[(0, 12, -1, None)])]))
        .await;
    assert_eq!(commit_codes(&r)[0].2, code(ErrorCode::NotCoordinator));
}

#[tokio::test]
async fn a_batched_fetch_spans_groups_on_different_partitions() {
    let (s, _mem) = service(config()).await;
    let groups = groups_on_distinct_partitions(&s, 3);
    for (i, g) in groups.iter().enumerate() {
        s.offset_commit(
            &ctx(8),
            commit_req(g, &[("t1", &[(0, 100 + i as i64, -1, None)])]),
        )
        .await;
    }
    let mut req: Vec<_> = groups
        .iter()
        .map(|g| fetch_group(g, Some(&[("t1", &[0])])))
        .collect();
    req.push(fetch_group("never-committed", None));
    let f = s.offset_fetch(&ctx(8), fetch_req(req, false)).await;
    assert_eq!(f.groups.len(), 4);
    for (i, g) in groups.iter().enumerate() {
        assert_eq!(f.groups[i].group_id.0.as_str(), g.as_str());
        assert_eq!(fetched(&f, i)[0].2, 100 + i as i64);
    }
    assert_eq!(f.groups[3].error_code, NONE);
    assert!(f.groups[3].topics.is_empty());
}

#[tokio::test]
async fn old_fetch_versions_answer_in_the_one_group_form() {
    let mem = strom_group_coordinator::testing::MemPartitions::new();
    let probe = service_on(&mem, config(), &[]).await;
    // One group whose partition is led, one whose partition is not.
    let gs = groups_on_distinct_partitions(&probe, PARTITIONS as usize);
    let (g_led, g_other) = (&gs[0], &gs[1]);
    drop(probe);
    let s = service_on(&mem, config(), &[s_partition(g_led)]).await;
    s.offset_commit(
        &ctx(7),
        commit_req(g_led, &[("t1", &[(2, 5, 3, Some("m"))])]),
    )
    .await;

    let f = s
        .offset_fetch(&ctx(5), fetch_req_old(g_led, Some(&[("t1", &[2, 3])])))
        .await;
    assert_eq!(f.error_code, NONE);
    let p = &f.topics[0].partitions;
    assert_eq!((p[0].committed_offset, p[0].committed_leader_epoch), (5, 3));
    assert_eq!(p[0].metadata.as_deref(), Some("m"));
    assert_eq!(p[1].committed_offset, -1);
    // v7, all partitions.
    let f = s.offset_fetch(&ctx(7), fetch_req_old(g_led, None)).await;
    assert_eq!(f.topics.len(), 1);
    assert_eq!(f.topics[0].partitions[0].partition_index, 2);
    // A group this broker does not coordinate: the group error on top from v2 ...
    let f = s
        .offset_fetch(&ctx(3), fetch_req_old(g_other, Some(&[("t1", &[0])])))
        .await;
    assert_eq!(f.error_code, code(ErrorCode::NotCoordinator));
    assert!(f.topics.is_empty());
    // ... and on each partition in v1, which has no group error.
    let f = s
        .offset_fetch(&ctx(1), fetch_req_old(g_other, Some(&[("t1", &[0, 1])])))
        .await;
    assert_eq!(f.topics[0].partitions.len(), 2);
    assert!(f.topics[0]
        .partitions
        .iter()
        .all(|p| p.error_code == code(ErrorCode::NotCoordinator) && p.committed_offset == -1));
    // v8+: per group.
    let f = s
        .offset_fetch(
            &ctx(8),
            fetch_req(
                vec![fetch_group(g_other, None), fetch_group(g_led, None)],
                false,
            ),
        )
        .await;
    assert_eq!(f.groups[0].error_code, code(ErrorCode::NotCoordinator));
    assert_eq!(f.groups[1].error_code, NONE);
}

fn s_partition(group: &str) -> i32 {
    strom_group_coordinator::topic::partition_for(group, PARTITIONS)
}

#[tokio::test]
async fn loading_rebuilds_the_offsets_from_the_records() {
    let mem = strom_group_coordinator::testing::MemPartitions::new();
    let all: Vec<i32> = (0..PARTITIONS).collect();
    {
        let s = service_on(&mem, config(), &all).await;
        s.offset_commit(
            &ctx(8),
            commit_req("a", &[("t1", &[(0, 1, -1, None), (1, 2, 4, Some("x"))])]),
        )
        .await;
        s.offset_commit(&ctx(8), commit_req("a", &[("t1", &[(0, 3, -1, None)])]))
            .await;
        s.offset_commit(&ctx(8), commit_req("b", &[("t2", &[(0, 7, -1, None)])]))
            .await;
        let d = s
            .offset_delete(
                &ctx(0),
                OffsetDeleteRequest::default()
                    .with_group_id(GroupId(sb("b")))
                    .with_topics(vec![OffsetDeleteRequestTopic::default()
                        .with_name(TopicName(sb("t2")))
                        .with_partitions(vec![
                            OffsetDeleteRequestPartition::default().with_partition_index(0)
                        ])]),
            )
            .await;
        assert_eq!(d.error_code, NONE);
    }
    // A legacy (type 0) record written by an old coordinator is read too.
    let legacy = CoordinatorRecord::LegacyOffsetCommit(
        strom_group_coordinator::records::LegacyOffsetCommitKey {
            group: "old".into(),
            topic: "t1".into(),
            partition: 2,
            ..Default::default()
        },
        Some((
            0,
            strom_group_coordinator::records::LegacyOffsetCommitValue {
                offset: 77,
                metadata: "legacy".into(),
                commit_timestamp: 1,
                ..Default::default()
            },
        )),
    );
    let tp = (
        strom_group_coordinator::topic::GROUP_METADATA_TOPIC_NAME.to_string(),
        s_partition("old"),
    );
    mem.logs
        .lock()
        .entry(tp.clone())
        .or_default()
        .push((legacy.encode_key().unwrap(), legacy.encode_value().unwrap()));
    // Replicated: the loader sees it below the high watermark.
    mem.release_hw(&tp);

    let s = service_on(&mem, config(), &all).await;
    let f = s
        .offset_fetch(
            &ctx(9),
            fetch_req(
                vec![
                    fetch_group("a", None),
                    fetch_group("b", None),
                    fetch_group("old", None),
                ],
                false,
            ),
        )
        .await;
    assert_eq!(
        fetched(&f, 0),
        vec![
            ("t1".into(), 0, 3, -1, "".into(), NONE),
            ("t1".into(), 1, 2, 4, "x".into(), NONE),
        ]
    );
    assert!(fetched(&f, 1).is_empty(), "the tombstone is replayed");
    assert_eq!(
        fetched(&f, 2),
        vec![("t1".into(), 2, 77, -1, "legacy".into(), NONE)]
    );
}

fn delete_req(group: &str, topics: &[(&str, &[i32])]) -> OffsetDeleteRequest {
    OffsetDeleteRequest::default()
        .with_group_id(GroupId(sb(group)))
        .with_topics(
            topics
                .iter()
                .map(|(t, ps)| {
                    OffsetDeleteRequestTopic::default()
                        .with_name(TopicName(sb(t)))
                        .with_partitions(
                            ps.iter()
                                .map(|p| {
                                    OffsetDeleteRequestPartition::default().with_partition_index(*p)
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
}

fn delete_codes(r: &OffsetDeleteResponse) -> Vec<(String, i32, i16)> {
    r.topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(move |p| (t.name.0.to_string(), p.partition_index, p.error_code))
        })
        .collect()
}

#[tokio::test]
async fn offset_delete_writes_tombstones_for_the_partitions_it_names() {
    let (s, mem) = service(config()).await;
    s.offset_commit(
        &ctx(8),
        commit_req("g", &[("t1", &[(0, 1, -1, None), (1, 2, -1, None)])]),
    )
    .await;
    let before = records_of(&s, &mem, "g").len();
    let r = s
        .offset_delete(&ctx(0), delete_req("g", &[("t1", &[0, 3]), ("nope", &[0])]))
        .await;
    assert_eq!(r.error_code, NONE);
    assert_eq!(
        delete_codes(&r),
        vec![
            ("nope".into(), 0, code(ErrorCode::UnknownTopicOrPartition)),
            ("t1".into(), 0, NONE),
            ("t1".into(), 3, NONE),
        ]
    );
    // One tombstone: partition 3 had no offset.
    let recs = records_of(&s, &mem, "g");
    assert_eq!(recs.len(), before + 1);
    assert!(matches!(&recs[before], CoordinatorRecord::OffsetCommit(k, None) if k.partition == 0));
    assert_eq!(offset_of(&s, "g", "t1", 0).await, -1);
    assert_eq!(offset_of(&s, "g", "t1", 1).await, 2);

    let r = s
        .offset_delete(&ctx(0), delete_req("unknown", &[("t1", &[0])]))
        .await;
    assert_eq!(r.error_code, code(ErrorCode::GroupIdNotFound));
    assert!(r.topics.is_empty());
    let r = s
        .offset_delete(&ctx(0), delete_req("", &[("t1", &[0])]))
        .await;
    assert_eq!(r.error_code, code(ErrorCode::InvalidGroupId));
}

#[tokio::test]
async fn delete_groups_removes_offsets_and_groups_across_partitions() {
    let (s, mem) = service(config()).await;
    let gs = groups_on_distinct_partitions(&s, 2);
    for g in &gs {
        s.offset_commit(
            &ctx(8),
            commit_req(
                g,
                &[("t1", &[(0, 1, -1, None)]), ("t2", &[(1, 2, -1, None)])],
            ),
        )
        .await;
    }
    s.offset_commit(&ctx(8), commit_req("kept", &[("t1", &[(0, 9, -1, None)])]))
        .await;
    let req = DeleteGroupsRequest::default().with_groups_names(vec![
        GroupId(sb(&gs[0])),
        GroupId(sb("missing")),
        GroupId(sb(&gs[1])),
        GroupId(sb(&gs[0])),
    ]);
    let r = s.delete_groups(&ctx(2), req).await;
    let got: Vec<(String, i16)> = r
        .results
        .iter()
        .map(|x| (x.group_id.0.to_string(), x.error_code))
        .collect();
    assert_eq!(
        got,
        vec![
            (gs[0].clone(), NONE),
            ("missing".into(), code(ErrorCode::GroupIdNotFound)),
            (gs[1].clone(), NONE),
        ]
    );
    for g in &gs {
        let f = s
            .offset_fetch(&ctx(8), fetch_req(vec![fetch_group(g, None)], false))
            .await;
        assert!(f.groups[0].topics.is_empty(), "{g} has no offsets left");
        // Two offset tombstones, then the group's own tombstone.
        let recs = records_of(&s, &mem, g);
        let n = recs.len();
        assert!(matches!(
            &recs[n - 3],
            CoordinatorRecord::OffsetCommit(_, None)
        ));
        assert!(matches!(
            &recs[n - 2],
            CoordinatorRecord::OffsetCommit(_, None)
        ));
        assert!(matches!(&recs[n - 1], CoordinatorRecord::GroupMetadata(k, None) if &k.group == g));
    }
    assert_eq!(offset_of(&s, "kept", "t1", 0).await, 9);
    // Deleted: a second deletion does not find it.
    let r = s
        .delete_groups(
            &ctx(2),
            DeleteGroupsRequest::default().with_groups_names(vec![GroupId(sb(&gs[0]))]),
        )
        .await;
    assert_eq!(r.results[0].error_code, code(ErrorCode::GroupIdNotFound));
}

//! Consumer groups (KIP-848) through the real `GroupCoordinatorService` over an in-memory
//! `__consumer_offsets` (`testing::MemPartitions`), with paused tokio time driving sessions.
//!
//! A simulated client keeps what it owns: it takes every assignment the coordinator sends at
//! once (revoking what is no longer in it) and reports it in its next heartbeat, as the Java
//! consumer does. Every exchange asserts that no partition is owned by two clients, nor by two
//! members in the coordinator's view.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use strom_coordinator_common::runtime::WriteResult;
use strom_group_coordinator::config::GroupCoordinatorConfig;
use strom_group_coordinator::metadata::{GroupMetadataImage, TopicImage};
use strom_group_coordinator::shard::OffsetCommitAuth;
use strom_group_coordinator::testing::MemPartitions;
use strom_group_coordinator::{GroupCoordinatorService, GroupRequestContext};
use strom_protocol::kafka::messages::consumer_group_describe_response::DescribedGroup;
use strom_protocol::kafka::messages::consumer_group_heartbeat_request::TopicPartitions;
use strom_protocol::kafka::messages::*;
use strom_protocol::kafka::protocol::StrBytes;
use strom_protocol::ErrorCode;
use uuid::Uuid;

const GROUP: &str = "g1";

type Owned = BTreeMap<Uuid, BTreeSet<i32>>;

fn sb(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

fn topic(name: &str, n: i32) -> TopicImage {
    TopicImage {
        name: name.into(),
        // A stable id per name, so an image with more partitions keeps the topic's id.
        id: Uuid::from_u64_pair(
            0x5157_0000,
            name.bytes()
                .fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(b as u64)),
        ),
        num_partitions: n,
        partition_racks: BTreeMap::new(),
    }
}

fn tid(name: &str) -> Uuid {
    topic(name, 0).id
}

async fn settle() {
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

async fn service(
    mem: &Arc<MemPartitions>,
    config: GroupCoordinatorConfig,
    image: GroupMetadataImage,
) -> Arc<GroupCoordinatorService> {
    let svc = GroupCoordinatorService::new(config, mem.clone(), mem.clone());
    svc.on_elected(svc.partition_for(GROUP), 0);
    for _ in 0..1000 {
        if svc.partitions().iter().all(|(_, loaded)| *loaded) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!(svc.partitions().iter().all(|(_, l)| *l), "partition loaded");
    svc.on_new_metadata(image);
    settle().await;
    svc
}

fn ctx(v: i16) -> GroupRequestContext {
    GroupRequestContext {
        client_id: "client".into(),
        client_host: "/127.0.0.1".into(),
        api_version: v,
    }
}

/// A consumer as the coordinator sees it over the wire.
struct Client {
    member_id: String,
    instance_id: Option<String>,
    epoch: i32,
    topics: Vec<String>,
    regex: Option<String>,
    owned: Owned,
}

impl Client {
    fn new(member_id: &str, topics: &[&str]) -> Self {
        Self {
            member_id: member_id.into(),
            instance_id: None,
            epoch: 0,
            topics: topics.iter().map(|t| t.to_string()).collect(),
            regex: None,
            owned: Owned::new(),
        }
    }

    fn request(&self) -> ConsumerGroupHeartbeatRequest {
        let mut r = ConsumerGroupHeartbeatRequest::default()
            .with_group_id(sb(GROUP).into())
            .with_member_id(sb(&self.member_id))
            .with_member_epoch(self.epoch)
            .with_instance_id(self.instance_id.as_deref().map(sb))
            .with_rack_id(None)
            .with_rebalance_timeout_ms(30_000)
            .with_server_assignor(None)
            .with_topic_partitions(Some(
                self.owned
                    .iter()
                    .map(|(t, ps)| {
                        TopicPartitions::default()
                            .with_topic_id(*t)
                            .with_partitions(ps.iter().copied().collect())
                    })
                    .collect(),
            ));
        if let Some(re) = &self.regex {
            r = r
                .with_subscribed_topic_regex(Some(sb(re)))
                .with_subscribed_topic_names(None);
        } else {
            r = r
                .with_subscribed_topic_regex(None)
                .with_subscribed_topic_names(Some(
                    self.topics.iter().map(|t| TopicName(sb(t))).collect(),
                ));
        }
        r
    }

    async fn heartbeat(&mut self, svc: &GroupCoordinatorService) -> ConsumerGroupHeartbeatResponse {
        let resp = svc.consumer_group_heartbeat(&ctx(1), self.request()).await;
        assert_eq!(
            resp.error_code, 0,
            "heartbeat of {} failed: {:?}",
            self.member_id, resp.error_message
        );
        self.epoch = resp.member_epoch;
        if let Some(a) = &resp.assignment {
            self.owned = a
                .topic_partitions
                .iter()
                .filter(|t| !t.partitions.is_empty())
                .map(|t| (t.topic_id, t.partitions.iter().copied().collect()))
                .collect();
        }
        resp
    }

    fn count(&self) -> usize {
        self.owned.values().map(BTreeSet::len).sum()
    }
}

async fn describe(svc: &GroupCoordinatorService) -> DescribedGroup {
    let r = svc
        .consumer_group_describe(
            &ctx(0),
            ConsumerGroupDescribeRequest::default().with_group_ids(vec![sb(GROUP).into()]),
        )
        .await;
    r.groups.into_iter().next().expect("one group")
}

/// No partition in two clients' hands, nor in two members' assignments on the coordinator.
async fn assert_exclusive(svc: &GroupCoordinatorService, clients: &[&Client]) {
    let mut seen = BTreeMap::new();
    for c in clients {
        for (t, ps) in &c.owned {
            for p in ps {
                if let Some(other) = seen.insert((*t, *p), c.member_id.clone()) {
                    panic!("partition {t}-{p} owned by {other} and {}", c.member_id);
                }
            }
        }
    }
    let d = describe(svc).await;
    let mut server = BTreeMap::new();
    for m in &d.members {
        for tp in &m.assignment.topic_partitions {
            for p in &tp.partitions {
                if let Some(other) = server.insert((tp.topic_id, *p), m.member_id.to_string()) {
                    panic!(
                        "coordinator assigns {}-{p} to {other} and {}",
                        tp.topic_id,
                        m.member_id.as_str()
                    );
                }
            }
        }
    }
}

/// Heartbeats every client in turn until the group is stable (bounded).
async fn converge(svc: &GroupCoordinatorService, clients: &mut [&mut Client]) -> usize {
    for round in 0..20 {
        for i in 0..clients.len() {
            clients[i].heartbeat(svc).await;
            let view: Vec<&Client> = clients.iter().map(|c| &**c).collect();
            assert_exclusive(svc, &view).await;
        }
        if describe(svc).await.group_state.as_str() == "Stable" {
            return round;
        }
    }
    panic!("group did not stabilise: {:?}", describe(svc).await);
}

#[tokio::test(start_paused = true)]
async fn one_member_gets_all_partitions() {
    let mem = MemPartitions::new();
    let svc = service(
        &mem,
        Default::default(),
        GroupMetadataImage::new([topic("t", 4)]),
    )
    .await;
    let mut a = Client::new("member-a", &["t"]);
    let resp = a.heartbeat(&svc).await;
    assert_eq!(resp.member_epoch, 1);
    assert_eq!(resp.heartbeat_interval_ms, 5000);
    assert_eq!(a.owned, Owned::from([(tid("t"), (0..4).collect())]));
    let d = describe(&svc).await;
    assert_eq!(d.error_code, 0);
    assert_eq!(d.group_state.as_str(), "Stable");
    assert_eq!((d.group_epoch, d.assignment_epoch), (1, 1));
    assert_eq!(d.assignor_name.as_str(), "uniform");
    assert_eq!(d.members.len(), 1);
    assert_eq!(d.members[0].client_host.as_str(), "/127.0.0.1");
    assert_eq!(d.members[0].member_type, 1);
    assert_eq!(
        d.members[0].assignment.topic_partitions[0]
            .topic_name
            .0
            .as_str(),
        "t"
    );
}

#[tokio::test(start_paused = true)]
async fn a_second_member_gets_partitions_only_after_the_first_revoked_them() {
    let mem = MemPartitions::new();
    let svc = service(
        &mem,
        Default::default(),
        GroupMetadataImage::new([topic("t", 6)]),
    )
    .await;
    let mut a = Client::new("member-a", &["t"]);
    a.heartbeat(&svc).await;
    assert_eq!(a.count(), 6);

    // B joins: the group moves to epoch 2, but everything B should get is still A's.
    let mut b = Client::new("member-b", &["t"]);
    let rb = b.heartbeat(&svc).await;
    assert_eq!(rb.member_epoch, 2);
    assert_eq!(b.count(), 0, "B must wait for A's revocation");
    assert_exclusive(&svc, &[&a, &b]).await;
    assert_eq!(describe(&svc).await.group_state.as_str(), "Reconciling");

    // A is asked to give up half, staying at epoch 1 until it acknowledges.
    let ra = a.heartbeat(&svc).await;
    assert_eq!(ra.member_epoch, 1);
    assert_eq!(a.count(), 3);
    // B still gets nothing: the coordinator has not seen A's acknowledgement yet.
    b.heartbeat(&svc).await;
    assert_eq!(b.count(), 0);
    assert_exclusive(&svc, &[&a, &b]).await;
    // A's heartbeat without the revoked partitions acknowledges: A moves to epoch 2.
    let ra = a.heartbeat(&svc).await;
    assert_eq!(ra.member_epoch, 2);
    b.heartbeat(&svc).await;
    assert_eq!(b.count(), 3);
    assert_exclusive(&svc, &[&a, &b]).await;
    converge(&svc, &mut [&mut a, &mut b]).await;
    let all: BTreeSet<i32> = a.owned[&tid("t")]
        .union(&b.owned[&tid("t")])
        .copied()
        .collect();
    assert_eq!(all, (0..6).collect());
}

#[tokio::test(start_paused = true)]
async fn after_a_member_leaves_the_other_gets_everything() {
    let mem = MemPartitions::new();
    let svc = service(
        &mem,
        Default::default(),
        GroupMetadataImage::new([topic("t", 4)]),
    )
    .await;
    let mut a = Client::new("member-a", &["t"]);
    let mut b = Client::new("member-b", &["t"]);
    a.heartbeat(&svc).await;
    b.heartbeat(&svc).await;
    converge(&svc, &mut [&mut a, &mut b]).await;
    assert_eq!((a.count(), b.count()), (2, 2));

    let mut leave = b.request().with_member_epoch(-1);
    leave.topic_partitions = None;
    let r = svc.consumer_group_heartbeat(&ctx(1), leave).await;
    assert_eq!((r.error_code, r.member_epoch), (0, -1));
    b.owned.clear();
    converge(&svc, &mut [&mut a]).await;
    assert_eq!(a.count(), 4);
    assert_eq!(describe(&svc).await.members.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn an_expired_session_fences_the_member_and_the_other_gets_everything() {
    let mem = MemPartitions::new();
    let svc = service(
        &mem,
        Default::default(),
        GroupMetadataImage::new([topic("t", 4)]),
    )
    .await;
    let mut a = Client::new("member-a", &["t"]);
    let mut b = Client::new("member-b", &["t"]);
    a.heartbeat(&svc).await;
    b.heartbeat(&svc).await;
    converge(&svc, &mut [&mut a, &mut b]).await;
    // B goes silent; A keeps heartbeating every 5 s, past B's 45 s session.
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_secs(5)).await;
        a.heartbeat(&svc).await;
    }
    let d = describe(&svc).await;
    assert_eq!(d.members.len(), 1, "B was removed: {d:?}");
    converge(&svc, &mut [&mut a]).await;
    assert_eq!(a.count(), 4);
    // B's next heartbeat: it is no longer a member.
    let r = svc.consumer_group_heartbeat(&ctx(1), b.request()).await;
    assert_eq!(r.error_code, ErrorCode::UnknownMemberId.code());
}

#[tokio::test(start_paused = true)]
async fn a_topic_gaining_partitions_bumps_the_epoch_and_assigns_them() {
    let mem = MemPartitions::new();
    let svc = service(
        &mem,
        Default::default(),
        GroupMetadataImage::new([topic("t", 2)]),
    )
    .await;
    let mut a = Client::new("member-a", &["t"]);
    a.heartbeat(&svc).await;
    assert_eq!((a.epoch, a.count()), (1, 2));
    svc.on_new_metadata(GroupMetadataImage::new([topic("t", 5)]));
    settle().await;
    assert_eq!(describe(&svc).await.group_epoch, 2);
    a.heartbeat(&svc).await;
    assert_eq!((a.epoch, a.count()), (2, 5));
}

#[tokio::test(start_paused = true)]
async fn a_regex_subscription_picks_up_a_created_topic() {
    let mem = MemPartitions::new();
    let image = GroupMetadataImage::new([topic("orders-eu", 2), topic("other", 3)]);
    let svc = service(&mem, Default::default(), image).await;
    let mut a = Client::new("member-a", &[]);
    a.regex = Some("orders-.*".into());
    a.heartbeat(&svc).await;
    assert_eq!(a.owned, Owned::from([(tid("orders-eu"), (0..2).collect())]));
    svc.on_new_metadata(GroupMetadataImage::new([
        topic("orders-eu", 2),
        topic("other", 3),
        topic("orders-us", 1),
    ]));
    settle().await;
    a.heartbeat(&svc).await;
    assert_eq!(
        a.owned,
        Owned::from([
            (tid("orders-eu"), (0..2).collect()),
            (tid("orders-us"), BTreeSet::from([0]))
        ])
    );
    assert_eq!(
        describe(&svc).await.members[0]
            .subscribed_topic_regex
            .as_ref()
            .map(|s| s.as_str()),
        Some("orders-.*")
    );
    // An invalid regex is refused.
    let mut bad = Client::new("member-b", &[]);
    bad.regex = Some("(".into());
    let r = svc.consumer_group_heartbeat(&ctx(1), bad.request()).await;
    assert_eq!(r.error_code, ErrorCode::InvalidRegularExpression.code());
}

/// A regex matches internal topics too: Kafka 4.4's `TopicRegexResolver` scans every topic of the
/// metadata image and drops only those the member may not DESCRIBE (franz-go's
/// `Test848RegexBrokerResolves` expects `__consumer_offsets` to be assigned).
#[tokio::test(start_paused = true)]
async fn a_regex_subscription_matches_internal_topics() {
    let mem = MemPartitions::new();
    let image = GroupMetadataImage::new([
        topic("__consumer_offsets", 3),
        topic("__transaction_state", 2),
        topic("__share_group_state", 1),
        topic("_schemas", 1),
        topic("orders", 1),
    ]);
    let svc = service(&mem, Default::default(), image).await;
    let mut a = Client::new("member-a", &[]);
    a.regex = Some("__.*".into());
    a.heartbeat(&svc).await;
    assert_eq!(
        a.owned,
        Owned::from([
            (tid("__consumer_offsets"), (0..3).collect()),
            (tid("__transaction_state"), (0..2).collect()),
            (tid("__share_group_state"), BTreeSet::from([0])),
        ])
    );
}

#[tokio::test(start_paused = true)]
async fn a_static_member_rejoining_gets_its_assignment_back() {
    let mem = MemPartitions::new();
    let svc = service(
        &mem,
        Default::default(),
        GroupMetadataImage::new([topic("t", 4)]),
    )
    .await;
    let mut a = Client::new("member-a", &["t"]);
    a.instance_id = Some("instance-1".into());
    let mut b = Client::new("member-b", &["t"]);
    a.heartbeat(&svc).await;
    b.heartbeat(&svc).await;
    converge(&svc, &mut [&mut a, &mut b]).await;
    let kept = a.owned.clone();
    let epoch_before = describe(&svc).await.group_epoch;

    // Another process with the same instance id cannot join while A holds it.
    let mut a2 = Client::new("member-a2", &["t"]);
    a2.instance_id = Some("instance-1".into());
    let r = svc.consumer_group_heartbeat(&ctx(1), a2.request()).await;
    assert_eq!(r.error_code, ErrorCode::UnreleasedInstanceId.code());

    // A leaves for now (-2): it keeps its assignment, B does not get it.
    let r = svc
        .consumer_group_heartbeat(&ctx(1), a.request().with_member_epoch(-2))
        .await;
    assert_eq!((r.error_code, r.member_epoch), (0, -2));
    b.heartbeat(&svc).await;
    assert_eq!(b.count(), 2);
    // The instance returns under a new member id and gets the same partitions at once, without
    // a rebalance (it takes the departed member's place, subscription included).
    a2.heartbeat(&svc).await;
    assert_eq!(a2.owned, kept);
    assert_eq!(describe(&svc).await.group_epoch, epoch_before);
    // While it holds the instance, even a join under its own id is refused.
    let r = svc
        .consumer_group_heartbeat(
            &ctx(1),
            a2.request()
                .with_member_epoch(0)
                .with_topic_partitions(Some(vec![])),
        )
        .await;
    assert_eq!(r.error_code, ErrorCode::UnreleasedInstanceId.code());
    let d = describe(&svc).await;
    let ids: BTreeSet<String> = d.members.iter().map(|m| m.member_id.to_string()).collect();
    assert_eq!(
        ids,
        BTreeSet::from(["member-a2".to_string(), "member-b".to_string()])
    );
    converge(&svc, &mut [&mut a2, &mut b]).await;
    assert_eq!(a2.owned, kept);
}

#[tokio::test(start_paused = true)]
async fn reloading_the_partition_rebuilds_the_same_group() {
    let mem = MemPartitions::new();
    let image = GroupMetadataImage::new([topic("t", 5), topic("u", 2)]);
    let svc = service(&mem, Default::default(), image.clone()).await;
    let mut a = Client::new("member-a", &["t", "u"]);
    let mut b = Client::new("member-b", &["t", "u"]);
    b.instance_id = Some("i-b".into());
    a.heartbeat(&svc).await;
    b.heartbeat(&svc).await;
    // Mid-reconciliation: A has been asked to revoke and has not acknowledged yet.
    a.heartbeat(&svc).await;
    let before = describe(&svc).await;
    assert_eq!(before.group_state.as_str(), "Reconciling");
    drop(svc);
    let svc = service(&mem, Default::default(), image).await;
    let after = describe(&svc).await;
    assert_eq!(before, after);
    converge(&svc, &mut [&mut a, &mut b]).await;
    assert_eq!(a.count() + b.count(), 7);
}

#[tokio::test(start_paused = true)]
async fn requests_are_validated_as_kafka_does() {
    let mem = MemPartitions::new();
    let config = GroupCoordinatorConfig {
        consumer_max_size: 1,
        ..Default::default()
    };
    let svc = service(&mem, config, GroupMetadataImage::new([topic("t", 2)])).await;
    let code = |r: ConsumerGroupHeartbeatResponse| r.error_code;
    let a = Client::new("member-a", &["t"]);
    // v1: the client makes its member id.
    let r = svc
        .consumer_group_heartbeat(&ctx(1), a.request().with_member_id(sb("")))
        .await;
    assert_eq!(code(r), ErrorCode::InvalidRequest.code());
    // v0: the coordinator makes it.
    let r = svc
        .consumer_group_heartbeat(&ctx(0), a.request().with_member_id(sb("")))
        .await;
    assert_eq!(r.error_code, 0);
    let generated = r.member_id.expect("member id").to_string();
    assert_eq!(Uuid::parse_str(&generated).map(|_| ()), Ok(()));
    let r = svc
        .consumer_group_heartbeat(
            &ctx(1),
            a.request().with_server_assignor(Some(sb("sticky"))),
        )
        .await;
    assert_eq!(r.error_code, ErrorCode::UnsupportedAssignor.code());
    assert_eq!(
        r.error_message.map(|m| m.to_string()).as_deref(),
        Some("ServerAssignor sticky is not supported. Supported assignors: uniform, range.")
    );
    let r = svc
        .consumer_group_heartbeat(&ctx(1), a.request().with_rebalance_timeout_ms(-1))
        .await;
    assert_eq!(code(r), ErrorCode::InvalidRequest.code());
    let r = svc
        .consumer_group_heartbeat(&ctx(1), a.request().with_member_epoch(-3))
        .await;
    assert_eq!(code(r), ErrorCode::InvalidRequest.code());
    // The group is full (group.consumer.max.size = 1).
    let r = svc.consumer_group_heartbeat(&ctx(1), a.request()).await;
    assert_eq!(code(r), ErrorCode::GroupMaxSizeReached.code());
    // The known member with a wrong epoch is fenced; an unknown one meets the full group first
    // (Kafka checks the size before looking the member up; UNKNOWN_MEMBER_ID is asserted in the
    // session expiry test).
    let mut known = Client::new(&generated, &["t"]);
    known.epoch = 7;
    let r = svc.consumer_group_heartbeat(&ctx(1), known.request()).await;
    assert_eq!(code(r), ErrorCode::FencedMemberEpoch.code());
    let mut stranger = Client::new("stranger", &["t"]);
    stranger.epoch = 1;
    let r = svc
        .consumer_group_heartbeat(&ctx(1), stranger.request())
        .await;
    assert_eq!(code(r), ErrorCode::GroupMaxSizeReached.code());
    // Describe of an unknown group (one on the loaded partition).
    let unknown = (0..)
        .map(|i| format!("nope-{i}"))
        .find(|g| svc.partition_for(g) == svc.partition_for(GROUP))
        .expect("some id");
    let r = svc
        .consumer_group_describe(
            &ctx(0),
            ConsumerGroupDescribeRequest::default()
                .with_group_ids(vec![sb(&unknown).into(), sb("").into()]),
        )
        .await;
    assert_eq!(r.groups[0].error_code, ErrorCode::GroupIdNotFound.code());
    assert_eq!(r.groups[1].error_code, ErrorCode::InvalidGroupId.code());
}

#[tokio::test(start_paused = true)]
async fn offset_commits_and_listing_follow_the_member_epoch() {
    let mem = MemPartitions::new();
    let svc = service(
        &mem,
        Default::default(),
        GroupMetadataImage::new([topic("t", 2)]),
    )
    .await;
    let mut a = Client::new("member-a", &["t"]);
    a.heartbeat(&svc).await;
    let check = |member: &'static str, epoch: i32, version: i16| {
        let svc = svc.clone();
        async move {
            svc.write(GROUP, move |shard, _| {
                let auth = OffsetCommitAuth {
                    group_id: GROUP,
                    member_id: member,
                    generation_id_or_member_epoch: epoch,
                    group_instance_id: None,
                    api_version: version,
                    transactional: false,
                };
                Ok(WriteResult {
                    records: vec![],
                    response: shard.validate_offset_commit(&auth),
                })
            })
            .await
            .expect("write")
        }
    };
    assert_eq!(check("member-a", 1, 9).await, Ok(()));
    assert_eq!(
        check("member-a", 0, 9).await,
        Err(ErrorCode::StaleMemberEpoch)
    );
    assert_eq!(
        check("member-x", 1, 9).await,
        Err(ErrorCode::UnknownMemberId)
    );
    assert_eq!(
        check("member-a", 1, 8).await,
        Err(ErrorCode::UnsupportedVersion)
    );
    assert_eq!(
        check("", -1, 9).await,
        Err(ErrorCode::UnknownMemberId),
        "not empty"
    );
    let listed = svc
        .read(GROUP, |shard, committed| {
            shard.list_groups(&["stable".into()], &[], committed)
        })
        .await
        .expect("read");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].group_state, "Stable");
    assert_eq!(listed[0].protocol_type, "consumer");
    let subscribed = svc
        .read(GROUP, |shard, _| shard.is_subscribed_to_topic(GROUP, "t"))
        .await
        .expect("read");
    assert!(subscribed);
    // Deleting a group with members is refused.
    let del = svc
        .write(GROUP, |shard, _| {
            Ok(WriteResult {
                records: vec![],
                response: shard.group_deletion_records(GROUP).map(|r| r.len()),
            })
        })
        .await
        .expect("write");
    assert_eq!(del, Err(ErrorCode::NonEmptyGroup));
}

#[tokio::test(start_paused = true)]
async fn a_failed_append_leaves_the_group_as_it_was() {
    let mem = MemPartitions::new();
    let svc = service(
        &mem,
        Default::default(),
        GroupMetadataImage::new([topic("t", 4)]),
    )
    .await;
    let mut a = Client::new("member-a", &["t"]);
    a.heartbeat(&svc).await;
    let before = describe(&svc).await;
    let log_len = mem.records(&svc.topic_partition(GROUP)).len();
    // B's join fails to append: nothing of it may remain.
    *mem.fail_next.lock() = Some(ErrorCode::NotEnoughReplicas);
    let b = Client::new("member-b", &["t"]);
    let r = svc.consumer_group_heartbeat(&ctx(1), b.request()).await;
    assert_eq!(r.error_code, ErrorCode::CoordinatorNotAvailable.code());
    assert_eq!(describe(&svc).await, before);
    assert_eq!(mem.records(&svc.topic_partition(GROUP)).len(), log_len);
    // A is undisturbed, and B can join on retry.
    let ra = a.heartbeat(&svc).await;
    assert_eq!((ra.member_epoch, a.count()), (1, 4));
    let mut b = b;
    let rb = b.heartbeat(&svc).await;
    assert_eq!(rb.member_epoch, 2);
}

#[tokio::test(start_paused = true)]
async fn a_member_that_does_not_revoke_within_the_rebalance_timeout_is_fenced() {
    let mem = MemPartitions::new();
    let svc = service(
        &mem,
        Default::default(),
        GroupMetadataImage::new([topic("t", 4)]),
    )
    .await;
    let mut a = Client::new("member-a", &["t"]);
    a.heartbeat(&svc).await;
    let mut b = Client::new("member-b", &["t"]);
    b.heartbeat(&svc).await;
    // A is asked to revoke but keeps reporting everything it had.
    let all = a.owned.clone();
    a.heartbeat(&svc).await;
    assert_eq!(a.count(), 2);
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_secs(5)).await;
        // A stuck client: whatever the coordinator answers, it still holds everything.
        a.owned = all.clone();
        let r = a.heartbeat(&svc).await;
        assert_eq!(r.member_epoch, 1, "A stays at its epoch until it revokes");
        b.heartbeat(&svc).await;
    }
    a.owned = all;
    assert_eq!(
        b.count(),
        0,
        "nothing of A's is given away while A holds it"
    );
    // Past its 30 s rebalance timeout A is removed, and B gets everything.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let r = svc.consumer_group_heartbeat(&ctx(1), a.request()).await;
    assert_eq!(r.error_code, ErrorCode::UnknownMemberId.code());
    a.owned.clear();
    converge(&svc, &mut [&mut b]).await;
    assert_eq!(b.count(), 4);
}

#[tokio::test(start_paused = true)]
async fn an_empty_group_can_be_deleted_and_stays_deleted_after_reload() {
    let mem = MemPartitions::new();
    let image = GroupMetadataImage::new([topic("t", 2)]);
    let svc = service(&mem, Default::default(), image.clone()).await;
    let mut a = Client::new("member-a", &["t"]);
    a.regex = Some("t".into());
    a.heartbeat(&svc).await;
    let leave = a.request().with_member_epoch(-1);
    assert_eq!(
        svc.consumer_group_heartbeat(&ctx(1), leave)
            .await
            .error_code,
        0
    );
    let d = describe(&svc).await;
    assert_eq!((d.group_state.as_str(), d.members.len()), ("Empty", 0));
    let n = svc
        .write(GROUP, |shard, _| {
            let records = shard.group_deletion_records(GROUP).expect("empty group");
            let n = records.len();
            Ok(WriteResult {
                records,
                response: n,
            })
        })
        .await
        .expect("delete");
    assert!(n >= 2, "target epoch and group tombstones");
    assert_eq!(
        describe(&svc).await.error_code,
        ErrorCode::GroupIdNotFound.code()
    );
    drop(svc);
    let svc = service(&mem, Default::default(), image).await;
    assert_eq!(
        describe(&svc).await.error_code,
        ErrorCode::GroupIdNotFound.code()
    );
    let listed = svc
        .read(GROUP, |shard, committed| {
            shard.list_groups(&[], &[], committed)
        })
        .await
        .expect("read");
    assert!(listed.is_empty(), "{listed:?}");
}

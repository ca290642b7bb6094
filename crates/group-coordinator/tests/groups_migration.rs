//! Classic and consumer (KIP-848) members in one group through the real
//! `GroupCoordinatorService` over an in-memory `__consumer_offsets`, on tokio's paused clock:
//! the upgrade of a classic group by a consumer-protocol member, classic members inside the
//! consumer group, the downgrade when the consumer-protocol member leaves, each migration
//! policy, a failed append during the conversion, and the reload of a converted group.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use strom_group_coordinator::config::{GroupCoordinatorConfig, MigrationPolicy};
use strom_group_coordinator::consumer::classic_protocol;
use strom_group_coordinator::metadata::{GroupMetadataImage, TopicImage};
use strom_group_coordinator::records::CoordinatorRecord;
use strom_group_coordinator::testing::MemPartitions;
use strom_group_coordinator::topic::GROUP_METADATA_TOPIC_NAME;
use strom_group_coordinator::{GroupCoordinatorService, GroupRequestContext};
use strom_protocol::kafka::messages::consumer_group_heartbeat_request::TopicPartitions;
use strom_protocol::kafka::messages::join_group_request::JoinGroupRequestProtocol;
use strom_protocol::kafka::messages::leave_group_request::MemberIdentity;
use strom_protocol::kafka::messages::sync_group_request::SyncGroupRequestAssignment;
use strom_protocol::kafka::messages::*;
use strom_protocol::kafka::protocol::StrBytes;
use strom_protocol::ErrorCode;
use uuid::Uuid;

const GROUP: &str = "mig";
const TOPIC: &str = "t";

fn sb(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

fn image() -> GroupMetadataImage {
    GroupMetadataImage::new([TopicImage {
        name: TOPIC.into(),
        id: tid(),
        num_partitions: 6,
        partition_racks: BTreeMap::new(),
    }])
}

fn tid() -> Uuid {
    Uuid::from_u64_pair(0x5157, 0x0001)
}

/// A `ConsumerProtocolSubscription` v1 (topics, no user data, owned partitions).
fn subscription(owned: &BTreeSet<i32>) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(1);
    b.put_i32(1);
    b.put_i16(TOPIC.len() as i16);
    b.put_slice(TOPIC.as_bytes());
    b.put_i32(-1);
    if owned.is_empty() {
        b.put_i32(0);
    } else {
        b.put_i32(1);
        b.put_i16(TOPIC.len() as i16);
        b.put_slice(TOPIC.as_bytes());
        b.put_i32(owned.len() as i32);
        for p in owned {
            b.put_i32(*p);
        }
    }
    b.freeze()
}

fn assignment(ps: &BTreeSet<i32>) -> Bytes {
    let mut a = BTreeMap::new();
    a.insert(tid(), ps.clone());
    classic_protocol::encode_assignment(&a, &image(), 1)
}

fn decode(b: &[u8]) -> BTreeSet<i32> {
    classic_protocol::decode_assignment(b)
        .unwrap()
        .into_iter()
        .flat_map(|(_, ps)| ps)
        .collect()
}

fn ctx(v: i16) -> GroupRequestContext {
    GroupRequestContext {
        client_id: "c".into(),
        client_host: "/127.0.0.1".into(),
        api_version: v,
    }
}

struct Fx {
    svc: Arc<GroupCoordinatorService>,
    mem: Arc<MemPartitions>,
}

async fn start(mem: &Arc<MemPartitions>, policy: MigrationPolicy) -> Arc<GroupCoordinatorService> {
    let config = GroupCoordinatorConfig {
        migration_policy: policy,
        ..Default::default()
    };
    let svc = GroupCoordinatorService::new(config, mem.clone(), mem.clone());
    svc.on_elected(svc.partition_for(GROUP), 0);
    for _ in 0..1000 {
        if svc.partitions().iter().all(|(_, l)| *l) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!(svc.partitions().iter().all(|(_, l)| *l));
    svc.on_new_metadata(image());
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    svc
}

impl Fx {
    async fn new(policy: MigrationPolicy) -> Self {
        let mem = MemPartitions::new();
        let svc = start(&mem, policy).await;
        Self { svc, mem }
    }

    fn join_req(&self, member_id: &str, owned: &BTreeSet<i32>) -> JoinGroupRequest {
        JoinGroupRequest::default()
            .with_group_id(sb(GROUP).into())
            .with_session_timeout_ms(10_000)
            .with_rebalance_timeout_ms(30_000)
            .with_member_id(sb(member_id))
            .with_protocol_type(sb("consumer"))
            .with_protocols(vec![JoinGroupRequestProtocol::default()
                .with_name(sb("cooperative-sticky"))
                .with_metadata(subscription(owned))])
    }

    async fn join(&self, member_id: &str, owned: &BTreeSet<i32>) -> JoinGroupResponse {
        let svc = self.svc.clone();
        let req = self.join_req(member_id, owned);
        tokio::spawn(async move { svc.join_group(&ctx(9), req).await })
            .await
            .unwrap()
    }

    async fn sync(
        &self,
        member_id: &str,
        generation: i32,
        assignments: Vec<(String, Bytes)>,
    ) -> SyncGroupResponse {
        let req = SyncGroupRequest::default()
            .with_group_id(sb(GROUP).into())
            .with_generation_id(generation)
            .with_member_id(sb(member_id))
            .with_protocol_type(Some(sb("consumer")))
            .with_protocol_name(Some(sb("cooperative-sticky")))
            .with_assignments(
                assignments
                    .into_iter()
                    .map(|(m, a)| {
                        SyncGroupRequestAssignment::default()
                            .with_member_id(sb(&m))
                            .with_assignment(a)
                    })
                    .collect(),
            );
        let svc = self.svc.clone();
        tokio::spawn(async move { svc.sync_group(&ctx(5), req).await })
            .await
            .unwrap()
    }

    async fn heartbeat(&self, member_id: &str, generation: i32) -> i16 {
        let req = HeartbeatRequest::default()
            .with_group_id(sb(GROUP).into())
            .with_generation_id(generation)
            .with_member_id(sb(member_id));
        self.svc.heartbeat(&ctx(4), req).await.error_code
    }

    /// A classic consumer alone in a Stable classic group owning every partition:
    /// (member id, generation).
    async fn stable_classic(&self) -> (String, i32) {
        let r = self.join("", &BTreeSet::new()).await;
        assert_eq!(r.error_code, ErrorCode::MemberIdRequired.code());
        let m = r.member_id.to_string();
        let r = self.join(&m, &BTreeSet::new()).await;
        assert_eq!(r.error_code, 0);
        assert_eq!(r.leader.as_str(), m);
        let all: BTreeSet<i32> = (0..6).collect();
        let s = self
            .sync(&m, r.generation_id, vec![(m.clone(), assignment(&all))])
            .await;
        assert_eq!(s.error_code, 0);
        assert_eq!(decode(&s.assignment), all);
        (m, r.generation_id)
    }

    async fn consumer_hb(
        &self,
        member_id: &str,
        epoch: i32,
        owned: &BTreeSet<i32>,
    ) -> ConsumerGroupHeartbeatResponse {
        let req = ConsumerGroupHeartbeatRequest::default()
            .with_group_id(sb(GROUP).into())
            .with_member_id(sb(member_id))
            .with_member_epoch(epoch)
            .with_instance_id(None)
            .with_rack_id(None)
            .with_rebalance_timeout_ms(30_000)
            .with_server_assignor(None)
            .with_subscribed_topic_regex(None)
            .with_subscribed_topic_names(Some(vec![TopicName(sb(TOPIC))]))
            .with_topic_partitions(Some(if owned.is_empty() {
                Vec::new()
            } else {
                vec![TopicPartitions::default()
                    .with_topic_id(tid())
                    .with_partitions(owned.iter().copied().collect())]
            }));
        self.svc.consumer_group_heartbeat(&ctx(1), req).await
    }

    async fn listed(&self) -> (String, String) {
        let r = self
            .svc
            .list_groups(&ctx(5), ListGroupsRequest::default())
            .await;
        let g = r
            .groups
            .iter()
            .find(|g| g.group_id.as_str() == GROUP)
            .expect("the group is listed");
        (g.group_type.to_string(), g.group_state.to_string())
    }

    async fn describe(&self) -> consumer_group_describe_response::DescribedGroup {
        let r = self
            .svc
            .consumer_group_describe(
                &ctx(0),
                ConsumerGroupDescribeRequest::default().with_group_ids(vec![sb(GROUP).into()]),
            )
            .await;
        r.groups.into_iter().next().unwrap()
    }

    /// An OffsetCommit v8 (no member epoch in the protocol, as classic clients send) of
    /// partition 0: its error code.
    async fn commit(&self, member_id: &str, generation: i32) -> i16 {
        let req = OffsetCommitRequest::default()
            .with_group_id(sb(GROUP).into())
            .with_generation_id_or_member_epoch(generation)
            .with_member_id(sb(member_id))
            .with_retention_time_ms(-1)
            .with_topics(vec![
                offset_commit_request::OffsetCommitRequestTopic::default()
                    .with_name(TopicName(sb(TOPIC)))
                    .with_partitions(vec![
                        offset_commit_request::OffsetCommitRequestPartition::default()
                            .with_partition_index(0)
                            .with_committed_offset(1),
                    ]),
            ]);
        let r = self.svc.offset_commit(&ctx(8), req).await;
        r.topics[0].partitions[0].error_code
    }

    fn records(&self) -> Vec<CoordinatorRecord> {
        let tp = (
            GROUP_METADATA_TOPIC_NAME.to_string(),
            self.svc.partition_for(GROUP),
        );
        self.mem
            .records(&tp)
            .iter()
            .map(|(k, v)| CoordinatorRecord::decode(k, v.as_deref()).unwrap())
            .collect()
    }
}

fn parts(a: &Option<consumer_group_heartbeat_response::Assignment>) -> Option<BTreeSet<i32>> {
    a.as_ref().map(|a| {
        a.topic_partitions
            .iter()
            .flat_map(|t| t.partitions.iter().copied())
            .collect()
    })
}

/// Upgrade, a classic member reconciled through JoinGroup / SyncGroup / Heartbeat alongside a
/// consumer-protocol member, then the downgrade when that member leaves.
#[tokio::test(start_paused = true)]
async fn upgrade_mixed_members_then_downgrade() {
    let f = Fx::new(MigrationPolicy::Bidirectional).await;
    let (c1, generation) = f.stable_classic().await;
    assert_eq!(f.listed().await.0, "classic");
    let before = f.records().len();

    // A consumer-protocol member joins: the group is converted.
    let r = f.consumer_hb("k1", 0, &BTreeSet::new()).await;
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    let (ty, _) = f.listed().await;
    assert_eq!(ty, "consumer");
    let written = &f.records()[before..];
    assert!(
        matches!(&written[0], CoordinatorRecord::GroupMetadata(k, None) if k.group == GROUP),
        "the classic group's tombstone comes first: {:?}",
        written[0]
    );
    let member_meta = written
        .iter()
        .find_map(|r| match r {
            CoordinatorRecord::ConsumerGroupMemberMetadata(k, Some((_, v)))
                if k.member_id == c1 =>
            {
                Some(v.clone())
            }
            _ => None,
        })
        .expect("the classic member's metadata record");
    let classic = member_meta
        .classic_member_metadata
        .expect("classic metadata");
    assert_eq!(classic.session_timeout_ms, 10_000);
    assert_eq!(classic.supported_protocols[0].name, "cooperative-sticky");
    // The classic member keeps its partitions until it revokes them.
    let all: BTreeSet<i32> = (0..6).collect();
    assert_eq!(parts(&r.assignment), Some(BTreeSet::new()));
    let d = f.describe().await;
    let m1 = d
        .members
        .iter()
        .find(|m| m.member_id.as_str() == c1)
        .unwrap();
    assert_eq!(m1.member_type, 0);
    assert_eq!(m1.member_epoch, generation);
    let owned1: BTreeSet<i32> = m1.assignment.topic_partitions[0]
        .partitions
        .iter()
        .copied()
        .collect();
    assert_eq!(owned1, all);

    // The classic member is told to rejoin; it must revoke half first.
    assert_eq!(
        f.heartbeat(&c1, generation).await,
        ErrorCode::RebalanceInProgress.code()
    );
    let j = f.join(&c1, &all).await;
    assert_eq!(j.error_code, 0);
    assert_eq!(
        j.generation_id, generation,
        "stays at its epoch while revoking"
    );
    assert_eq!(j.protocol_name.as_deref(), Some("cooperative-sticky"));
    let s = f.sync(&c1, j.generation_id, vec![]).await;
    assert_eq!(s.error_code, 0);
    let kept = decode(&s.assignment);
    assert_eq!(kept.len(), 3, "{kept:?}");
    assert_eq!(
        f.heartbeat(&c1, j.generation_id).await,
        ErrorCode::RebalanceInProgress.code()
    );
    // Revoked: it rejoins owning what it kept and moves to the group epoch.
    let j = f.join(&c1, &kept).await;
    assert_eq!(j.error_code, 0);
    assert!(j.generation_id > generation);
    let s = f.sync(&c1, j.generation_id, vec![]).await;
    assert_eq!(decode(&s.assignment), kept);
    assert_eq!(f.heartbeat(&c1, j.generation_id).await, 0);
    let classic_gen = j.generation_id;
    // A classic member commits with its generation (any OffsetCommit version); a stale one
    // gets what classic clients understand.
    assert_eq!(f.commit(&c1, classic_gen).await, 0);
    assert_eq!(
        f.commit(&c1, classic_gen - 1).await,
        ErrorCode::IllegalGeneration.code()
    );
    assert_eq!(
        f.commit("k1", r.member_epoch).await,
        ErrorCode::UnsupportedVersion.code(),
        "a consumer-protocol member must use OffsetCommit v9+"
    );

    // The consumer-protocol member now gets the released half.
    let r = f.consumer_hb("k1", r.member_epoch, &BTreeSet::new()).await;
    assert_eq!(r.error_code, 0);
    let got = parts(&r.assignment).unwrap_or_default();
    assert_eq!(got.len(), 3);
    assert!(got.is_disjoint(&kept));
    assert_eq!(f.listed().await, ("consumer".into(), "Stable".into()));

    // The consumer-protocol member leaves: the group is a classic group again, rebalancing.
    let r = f.consumer_hb("k1", -1, &got).await;
    assert_eq!(r.error_code, 0);
    assert_eq!(
        f.listed().await,
        ("classic".into(), "PreparingRebalance".into())
    );
    let last = f.records().last().cloned().unwrap();
    match last {
        CoordinatorRecord::GroupMetadata(_, Some((_, v))) => {
            assert_eq!(v.members.len(), 1);
            assert_eq!(v.protocol.as_deref(), Some("cooperative-sticky"));
            assert_eq!(decode(&v.members[0].assignment), kept);
        }
        other => panic!("the classic group's record comes last: {other:?}"),
    }
    // The classic member rejoins the classic group and gets a new generation as leader.
    assert_eq!(
        f.heartbeat(&c1, classic_gen).await,
        ErrorCode::RebalanceInProgress.code()
    );
    let j = f.join(&c1, &kept).await;
    assert_eq!(j.error_code, 0);
    assert_eq!(j.leader.as_str(), c1);
    assert_eq!(j.generation_id, classic_gen + 1);
    let s = f
        .sync(&c1, j.generation_id, vec![(c1.clone(), assignment(&all))])
        .await;
    assert_eq!(decode(&s.assignment), all);
    assert_eq!(f.listed().await, ("classic".into(), "Stable".into()));
}

#[tokio::test(start_paused = true)]
async fn a_classic_member_joins_and_leaves_a_consumer_group() {
    let f = Fx::new(MigrationPolicy::Bidirectional).await;
    let r = f.consumer_hb("k1", 0, &BTreeSet::new()).await;
    assert_eq!(parts(&r.assignment).unwrap().len(), 6);
    let k_epoch = r.member_epoch;
    let j = f.join("", &BTreeSet::new()).await;
    assert_eq!(j.error_code, ErrorCode::MemberIdRequired.code());
    let c = j.member_id.to_string();
    let j = f.join(&c, &BTreeSet::new()).await;
    assert_eq!(j.error_code, 0);
    assert_eq!(j.protocol_type.as_deref(), Some("consumer"));
    // Nothing free yet: the consumer member must release first.
    let s = f.sync(&c, j.generation_id, vec![]).await;
    assert_eq!(s.error_code, 0);
    assert!(decode(&s.assignment).is_empty());
    let r = f.consumer_hb("k1", k_epoch, &(0..6).collect()).await;
    let k_owned = parts(&r.assignment).unwrap();
    assert_eq!(k_owned.len(), 3);
    // Still revoking: the classic member keeps waiting.
    assert_eq!(f.heartbeat(&c, j.generation_id).await, 0);
    let r = f.consumer_hb("k1", r.member_epoch, &k_owned).await;
    assert_eq!(r.error_code, 0);
    // What it waited for is released: its heartbeat asks it to rejoin to collect it.
    assert_eq!(
        f.heartbeat(&c, j.generation_id).await,
        ErrorCode::RebalanceInProgress.code()
    );
    let j = f.join(&c, &BTreeSet::new()).await;
    let s = f.sync(&c, j.generation_id, vec![]).await;
    let c_owned = decode(&s.assignment);
    assert_eq!(c_owned.len(), 3);
    assert!(c_owned.is_disjoint(&k_owned));
    assert_eq!(f.heartbeat(&c, j.generation_id).await, 0);
    assert_eq!(
        f.heartbeat(&c, j.generation_id - 1).await,
        ErrorCode::IllegalGeneration.code()
    );
    // LeaveGroup removes it; the group stays a consumer group.
    let resp = f
        .svc
        .leave_group(
            &ctx(3),
            LeaveGroupRequest::default()
                .with_group_id(sb(GROUP).into())
                .with_members(vec![MemberIdentity::default().with_member_id(sb(&c))]),
        )
        .await;
    assert_eq!(resp.error_code, 0);
    assert_eq!(resp.members[0].error_code, 0);
    let d = f.describe().await;
    assert_eq!(d.members.len(), 1);
    assert_eq!(f.listed().await.0, "consumer");
    assert_eq!(
        f.heartbeat(&c, j.generation_id).await,
        ErrorCode::UnknownMemberId.code()
    );
}

#[tokio::test(start_paused = true)]
async fn the_disabled_policy_refuses_both_ways() {
    let f = Fx::new(MigrationPolicy::Disabled).await;
    let (c1, generation) = f.stable_classic().await;
    let r = f.consumer_hb("k1", 0, &BTreeSet::new()).await;
    assert_eq!(r.error_code, ErrorCode::GroupIdNotFound.code());
    assert_eq!(f.listed().await.0, "classic");
    assert_eq!(f.heartbeat(&c1, generation).await, 0);

    let g = Fx::new(MigrationPolicy::Disabled).await;
    let r = g.consumer_hb("k1", 0, &BTreeSet::new()).await;
    assert_eq!(r.error_code, 0);
    let j = g.join("", &BTreeSet::new()).await;
    assert_eq!(j.error_code, ErrorCode::InconsistentGroupProtocol.code());
}

#[tokio::test(start_paused = true)]
async fn upgrade_only_and_downgrade_only_policies() {
    // `upgrade`: converted on the way in, never back.
    let f = Fx::new(MigrationPolicy::Upgrade).await;
    let _ = f.stable_classic().await;
    let r = f.consumer_hb("k1", 0, &BTreeSet::new()).await;
    assert_eq!(r.error_code, 0);
    let r = f.consumer_hb("k1", -1, &BTreeSet::new()).await;
    assert_eq!(r.error_code, 0);
    assert_eq!(f.listed().await.0, "consumer");

    // `downgrade`: a classic group is not upgraded, but a consumer group with classic
    // members is downgraded when its last consumer-protocol member leaves.
    let g = Fx::new(MigrationPolicy::Downgrade).await;
    let _ = g.stable_classic().await;
    let r = g.consumer_hb("k1", 0, &BTreeSet::new()).await;
    assert_eq!(r.error_code, ErrorCode::GroupIdNotFound.code());

    let h = Fx::new(MigrationPolicy::Downgrade).await;
    let r = h.consumer_hb("k1", 0, &BTreeSet::new()).await;
    assert_eq!(r.error_code, 0);
    let j = h.join("", &BTreeSet::new()).await;
    let c = j.member_id.to_string();
    let j = h.join(&c, &BTreeSet::new()).await;
    assert_eq!(j.error_code, 0);
    let r = h.consumer_hb("k1", -1, &BTreeSet::new()).await;
    assert_eq!(r.error_code, 0);
    assert_eq!(h.listed().await.0, "classic");
}

#[tokio::test(start_paused = true)]
async fn a_failed_append_leaves_the_classic_group_as_it_was() {
    let f = Fx::new(MigrationPolicy::Bidirectional).await;
    let (c1, generation) = f.stable_classic().await;
    let before = f.records().len();
    *f.mem.fail_next.lock() = Some(ErrorCode::NotEnoughReplicas);
    let r = f.consumer_hb("k1", 0, &BTreeSet::new()).await;
    assert_ne!(r.error_code, 0);
    assert_eq!(f.records().len(), before);
    assert_eq!(f.listed().await, ("classic".into(), "Stable".into()));
    assert_eq!(f.heartbeat(&c1, generation).await, 0);
    // The timers the conversion armed find no consumer group once they fire.
    tokio::time::sleep(Duration::from_secs(11)).await;
    assert_eq!(f.listed().await.0, "classic");
    // And the next try converts it.
    let r = f.consumer_hb("k1", 0, &BTreeSet::new()).await;
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    assert_eq!(f.listed().await.0, "consumer");
}

#[tokio::test(start_paused = true)]
async fn a_converted_group_is_rebuilt_from_its_records() {
    let f = Fx::new(MigrationPolicy::Bidirectional).await;
    let (c1, generation) = f.stable_classic().await;
    let r = f.consumer_hb("k1", 0, &BTreeSet::new()).await;
    assert_eq!(r.error_code, 0);
    let d1 = f.describe().await;
    // A new coordinator loads the partition.
    let svc2 = start(&f.mem, MigrationPolicy::Bidirectional).await;
    let f2 = Fx {
        svc: svc2,
        mem: f.mem.clone(),
    };
    let d2 = f2.describe().await;
    assert_eq!(d1, d2);
    let m1 = d2
        .members
        .iter()
        .find(|m| m.member_id.as_str() == c1)
        .unwrap();
    assert_eq!(m1.member_type, 0);
    // The classic member is still served as one, at its epoch.
    assert_eq!(
        f2.heartbeat(&c1, generation).await,
        ErrorCode::RebalanceInProgress.code()
    );
}

#[tokio::test(start_paused = true)]
async fn a_consumer_member_fenced_by_its_session_downgrades_the_group() {
    let f = Fx::new(MigrationPolicy::Bidirectional).await;
    let (c1, generation) = f.stable_classic().await;
    let r = f.consumer_hb("k1", 0, &BTreeSet::new()).await;
    assert_eq!(r.error_code, 0);
    assert_eq!(f.listed().await.0, "consumer");
    // The classic member keeps up (rejoining when told to, as its client does); the
    // consumer-protocol member goes silent past its 45 s session.
    let (mut generation, mut owned): (i32, BTreeSet<i32>) = (generation, (0..6).collect());
    let mut downgraded = false;
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let code = f.heartbeat(&c1, generation).await;
        if f.listed().await.0 == "classic" {
            downgraded = true;
            break;
        }
        if code == ErrorCode::RebalanceInProgress.code() {
            let j = f.join(&c1, &owned).await;
            assert_eq!(j.error_code, 0);
            let s = f.sync(&c1, j.generation_id, vec![]).await;
            assert_eq!(s.error_code, 0);
            generation = j.generation_id;
            owned = decode(&s.assignment);
        } else {
            assert_eq!(code, 0);
        }
    }
    assert!(downgraded, "the group was not downgraded");
    // The classic group rebalances at the generation the consumer group had reached.
    assert_eq!(
        f.heartbeat(&c1, generation).await,
        ErrorCode::RebalanceInProgress.code()
    );
    assert_eq!(
        f.listed().await,
        ("classic".into(), "PreparingRebalance".into())
    );
    let r = f.consumer_hb("k1", r.member_epoch, &BTreeSet::new()).await;
    assert_eq!(r.error_code, ErrorCode::GroupIdNotFound.code());
}

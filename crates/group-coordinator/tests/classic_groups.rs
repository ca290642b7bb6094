//! The classic group protocol through the real `GroupCoordinatorService` and runtime over an
//! in-memory `__consumer_offsets` (`testing::MemPartitions`), on tokio's paused clock.

use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use strom_group_coordinator::config::GroupCoordinatorConfig;
use strom_group_coordinator::records::CoordinatorRecord;
use strom_group_coordinator::testing::MemPartitions;
use strom_group_coordinator::topic::GROUP_METADATA_TOPIC_NAME;
use strom_group_coordinator::{GroupCoordinatorService, GroupRequestContext};
use strom_protocol::kafka::messages::join_group_request::JoinGroupRequestProtocol;
use strom_protocol::kafka::messages::leave_group_request::MemberIdentity;
use strom_protocol::kafka::messages::sync_group_request::SyncGroupRequestAssignment;
use strom_protocol::kafka::messages::*;
use strom_protocol::kafka::protocol::StrBytes;
use strom_protocol::ErrorCode;

const GROUP: &str = "g";
const SESSION_MS: i32 = 10_000;
const REBALANCE_MS: i32 = 30_000;

fn st(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

fn subscription(topics: &[&str]) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(0);
    b.put_i32(topics.len() as i32);
    for t in topics {
        b.put_i16(t.len() as i16);
        b.put_slice(t.as_bytes());
    }
    b.put_i32(-1);
    b.freeze()
}

fn ctx(client: &str) -> GroupRequestContext {
    GroupRequestContext {
        client_id: client.into(),
        client_host: "/127.0.0.1".into(),
        api_version: 9,
    }
}

struct Fixture {
    svc: Arc<GroupCoordinatorService>,
    mem: Arc<MemPartitions>,
    partition: i32,
}

impl Fixture {
    async fn new() -> Self {
        let mem = MemPartitions::new();
        let svc = GroupCoordinatorService::new(
            GroupCoordinatorConfig::default(),
            mem.clone(),
            mem.clone(),
        );
        let partition = svc.partition_for(GROUP);
        let f = Self {
            svc,
            mem,
            partition,
        };
        f.elect(1).await;
        f
    }

    async fn elect(&self, epoch: i32) {
        self.svc.on_elected(self.partition, epoch);
        for _ in 0..1000 {
            if self
                .svc
                .partitions()
                .iter()
                .any(|(p, loaded)| *p == self.partition && *loaded)
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        panic!("the offsets partition did not load");
    }

    fn join_req(
        &self,
        member_id: &str,
        instance: Option<&str>,
        topics: &[&str],
    ) -> JoinGroupRequest {
        JoinGroupRequest::default()
            .with_group_id(st(GROUP).into())
            .with_session_timeout_ms(SESSION_MS)
            .with_rebalance_timeout_ms(REBALANCE_MS)
            .with_member_id(st(member_id))
            .with_group_instance_id(instance.map(st))
            .with_protocol_type(st("consumer"))
            .with_protocols(vec![JoinGroupRequestProtocol::default()
                .with_name(st("range"))
                .with_metadata(subscription(topics))])
    }

    /// A JoinGroup that may be held: runs in its own task.
    fn join(
        &self,
        client: &str,
        member_id: &str,
        instance: Option<&str>,
    ) -> tokio::task::JoinHandle<JoinGroupResponse> {
        let svc = self.svc.clone();
        let req = self.join_req(member_id, instance, &["t"]);
        let c = ctx(client);
        tokio::spawn(async move { svc.join_group(&c, req).await })
    }

    /// A dynamic member's first join: MEMBER_ID_REQUIRED hands it its id.
    async fn member_id(&self, client: &str) -> String {
        let r = self.join(client, "", None).await.unwrap();
        assert_eq!(r.error_code, ErrorCode::MemberIdRequired.code());
        let id = r.member_id.to_string();
        assert!(id.starts_with(&format!("{client}-")), "{id}");
        id
    }

    fn sync(
        &self,
        member_id: &str,
        instance: Option<&str>,
        generation: i32,
        assignments: Vec<(&str, &[u8])>,
    ) -> tokio::task::JoinHandle<SyncGroupResponse> {
        let svc = self.svc.clone();
        let req = SyncGroupRequest::default()
            .with_group_id(st(GROUP).into())
            .with_generation_id(generation)
            .with_member_id(st(member_id))
            .with_group_instance_id(instance.map(st))
            .with_protocol_type(Some(st("consumer")))
            .with_protocol_name(Some(st("range")))
            .with_assignments(
                assignments
                    .into_iter()
                    .map(|(m, a)| {
                        SyncGroupRequestAssignment::default()
                            .with_member_id(st(m))
                            .with_assignment(Bytes::copy_from_slice(a))
                    })
                    .collect(),
            );
        tokio::spawn(async move { svc.sync_group(&ctx("c"), req).await })
    }

    async fn heartbeat(&self, member_id: &str, instance: Option<&str>, generation: i32) -> i16 {
        let req = HeartbeatRequest::default()
            .with_group_id(st(GROUP).into())
            .with_generation_id(generation)
            .with_member_id(st(member_id))
            .with_group_instance_id(instance.map(st));
        self.svc.heartbeat(&ctx("c"), req).await.error_code
    }

    async fn describe(&self) -> describe_groups_response::DescribedGroup {
        let mut c = ctx("c");
        c.api_version = 6;
        let r = self
            .svc
            .describe_groups(
                &c,
                DescribeGroupsRequest::default().with_groups(vec![st(GROUP).into()]),
            )
            .await;
        r.groups.into_iter().next().unwrap()
    }

    fn records(&self) -> Vec<CoordinatorRecord> {
        let tp = (GROUP_METADATA_TOPIC_NAME.to_string(), self.partition);
        self.mem
            .records(&tp)
            .iter()
            .map(|(k, v)| CoordinatorRecord::decode(k, v.as_deref()).expect("decodes"))
            .collect()
    }

    /// The last GroupMetadata value written for the group.
    fn last_group_record(&self) -> strom_group_coordinator::records::GroupMetadataValue {
        self.records()
            .into_iter()
            .rev()
            .find_map(|r| match r {
                CoordinatorRecord::GroupMetadata(k, Some((v, value))) if k.group == GROUP => {
                    assert_eq!(v, 3, "Kafka 4.4 writes GroupMetadataValue v3");
                    Some(value)
                }
                _ => None,
            })
            .expect("a GroupMetadata record")
    }

    /// Two dynamic members joined (the second a second later, extending the initial delay) and
    /// synced: (leader id, follower id).
    async fn stable_pair(&self) -> (String, String) {
        let m1 = self.member_id("c1").await;
        let start = tokio::time::Instant::now();
        let j1 = self.join("c1", &m1, None);
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let m2 = self.member_id("c2").await;
        let j2 = self.join("c2", &m2, None);
        let (r1, r2) = (j1.await.unwrap(), j2.await.unwrap());
        // Initial delay 3 s, extended once by 3 s as m2 came in during it.
        assert_eq!(start.elapsed().as_millis() / 1000, 6);
        assert_eq!(r1.error_code, 0);
        assert_eq!(r2.error_code, 0);
        assert_eq!(r1.generation_id, 1);
        assert_eq!(r2.generation_id, 1);
        assert_eq!(r1.leader.as_str(), m1);
        assert_eq!(r1.protocol_name.as_deref(), Some("range"));
        assert_eq!(r1.members.len(), 2, "the leader gets the members");
        assert!(r2.members.is_empty());
        let s2 = self.sync(&m2, None, 1, vec![]);
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(
            !s2.is_finished(),
            "a follower waits for the leader's assignment"
        );
        let s1 = self.sync(&m1, None, 1, vec![(&m1, b"A1"), (&m2, b"A2")]);
        let (s1, s2) = (s1.await.unwrap(), s2.await.unwrap());
        assert_eq!((s1.error_code, &s1.assignment[..]), (0, &b"A1"[..]));
        assert_eq!((s2.error_code, &s2.assignment[..]), (0, &b"A2"[..]));
        assert_eq!(s2.protocol_name.as_deref(), Some("range"));
        (m1, m2)
    }
}

#[tokio::test(start_paused = true)]
async fn two_members_join_sync_and_heartbeat() {
    let f = Fixture::new().await;
    let (m1, m2) = f.stable_pair().await;
    assert_eq!(f.heartbeat(&m1, None, 1).await, 0);
    assert_eq!(f.heartbeat(&m2, None, 1).await, 0);
    assert_eq!(
        f.heartbeat(&m2, None, 7).await,
        ErrorCode::IllegalGeneration.code()
    );
    assert_eq!(
        f.heartbeat("nobody", None, 1).await,
        ErrorCode::UnknownMemberId.code()
    );
    let d = f.describe().await;
    assert_eq!(d.error_code, 0);
    assert_eq!(d.group_state.as_str(), "Stable");
    assert_eq!(d.protocol_type.as_str(), "consumer");
    assert_eq!(d.protocol_data.as_str(), "range");
    assert_eq!(d.members.len(), 2);
    let d1 = d
        .members
        .iter()
        .find(|m| m.member_id.as_str() == m1)
        .unwrap();
    assert_eq!(d1.client_id.as_str(), "c1");
    assert_eq!(d1.client_host.as_str(), "/127.0.0.1");
    assert_eq!(&d1.member_assignment[..], b"A1");
    assert_eq!(d1.member_metadata, subscription(&["t"]));
    // Records: the empty group (generation 0) on creation, then the synced generation 1.
    let first = f.records().into_iter().find_map(|r| match r {
        CoordinatorRecord::GroupMetadata(_, Some((_, v))) => Some(v),
        _ => None,
    });
    let first = first.unwrap();
    assert_eq!((first.generation, first.members.len()), (0, 0));
    let v = f.last_group_record();
    assert_eq!(v.generation, 1);
    assert_eq!(v.protocol.as_deref(), Some("range"));
    assert_eq!(v.leader.as_deref(), Some(m1.as_str()));
    assert_eq!(v.members.len(), 2);
    let a2 = v.members.iter().find(|m| m.member_id == m2).unwrap();
    assert_eq!(&a2.assignment[..], b"A2");
    assert_eq!(a2.session_timeout, SESSION_MS);
    assert_eq!(a2.rebalance_timeout, REBALANCE_MS);
    // ListGroups sees it, with the state filter applied case-insensitively.
    let l = f
        .svc
        .list_groups(
            &ctx("c"),
            ListGroupsRequest::default().with_states_filter(vec![st("stable")]),
        )
        .await;
    assert_eq!(l.groups.len(), 1);
    assert_eq!(l.groups[0].group_state.as_str(), "Stable");
    assert_eq!(l.groups[0].group_type.as_str(), "classic");
    let l = f
        .svc
        .list_groups(
            &ctx("c"),
            ListGroupsRequest::default().with_states_filter(vec![st("Empty")]),
        )
        .await;
    assert!(l.groups.is_empty());
    // v5 type filter, case-insensitive as Kafka parses it.
    let by_type = |t: &str| ListGroupsRequest::default().with_types_filter(vec![st(t)]);
    let l = f.svc.list_groups(&ctx("c"), by_type("CLASSIC")).await;
    assert_eq!(l.groups.len(), 1);
    assert_eq!(l.groups[0].protocol_type.as_str(), "consumer");
    let l = f.svc.list_groups(&ctx("c"), by_type("consumer")).await;
    assert!(l.groups.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_member_leaving_makes_the_group_rebalance() {
    let f = Fixture::new().await;
    let (m1, m2) = f.stable_pair().await;
    let mut c = ctx("c");
    c.api_version = 3;
    let r = f
        .svc
        .leave_group(
            &c,
            LeaveGroupRequest::default()
                .with_group_id(st(GROUP).into())
                .with_members(vec![
                    MemberIdentity::default().with_member_id(st(&m2)),
                    MemberIdentity::default().with_member_id(st("ghost")),
                ]),
        )
        .await;
    assert_eq!(r.error_code, 0);
    assert_eq!(r.members.len(), 2);
    assert_eq!(r.members[0].error_code, 0);
    assert_eq!(r.members[1].error_code, ErrorCode::UnknownMemberId.code());
    assert_eq!(
        f.describe().await.group_state.as_str(),
        "PreparingRebalance"
    );
    assert_eq!(
        f.heartbeat(&m1, None, 1).await,
        ErrorCode::RebalanceInProgress.code()
    );
    // m1 rejoins: every remaining member is in, the join completes at once.
    let r = f.join("c1", &m1, None).await.unwrap();
    assert_eq!((r.error_code, r.generation_id), (0, 2));
    assert_eq!(r.members.len(), 1);
    let s = f.sync(&m1, None, 2, vec![(&m1, b"all")]).await.unwrap();
    assert_eq!(&s.assignment[..], b"all");
    assert_eq!(f.describe().await.members.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn an_expired_session_removes_the_member_and_rebalances() {
    let f = Fixture::new().await;
    let (m1, m2) = f.stable_pair().await;
    // m1 heartbeats every 3 s, m2 never again.
    let mut saw_rebalance = false;
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(3000)).await;
        let code = f.heartbeat(&m1, None, 1).await;
        if code == ErrorCode::RebalanceInProgress.code() {
            saw_rebalance = true;
            break;
        }
        assert_eq!(code, 0);
    }
    assert!(saw_rebalance, "m2's session (10 s) expired");
    let d = f.describe().await;
    assert_eq!(d.members.len(), 1);
    assert_eq!(d.members[0].member_id.as_str(), m1);
    assert_eq!(
        f.heartbeat(&m2, None, 1).await,
        ErrorCode::UnknownMemberId.code()
    );
    let r = f.join("c1", &m1, None).await.unwrap();
    assert_eq!((r.error_code, r.generation_id), (0, 2));
}

#[tokio::test(start_paused = true)]
async fn a_restarted_static_member_gets_its_assignment_back_without_a_rebalance() {
    let f = Fixture::new().await;
    // A static member joins without MEMBER_ID_REQUIRED.
    let r = f.join("c1", "", Some("i1")).await.unwrap();
    assert_eq!((r.error_code, r.generation_id), (0, 1));
    let old = r.member_id.to_string();
    assert!(old.starts_with("i1-"), "{old}");
    let s = f
        .sync(&old, Some("i1"), 1, vec![(&old, b"P0")])
        .await
        .unwrap();
    assert_eq!(&s.assignment[..], b"P0");
    // Restarted: unknown member id, same instance id and protocols.
    let r = f.join("c1", "", Some("i1")).await.unwrap();
    assert_eq!(r.error_code, 0);
    assert_eq!(r.generation_id, 1, "no new generation");
    let new = r.member_id.to_string();
    assert_ne!(new, old);
    // v9: the leader is told it may skip the assignment.
    assert!(r.skip_assignment);
    assert_eq!(r.leader.as_str(), new);
    assert_eq!(f.describe().await.group_state.as_str(), "Stable");
    let s = f.sync(&new, Some("i1"), 1, vec![]).await.unwrap();
    assert_eq!((s.error_code, &s.assignment[..]), (0, &b"P0"[..]));
    // The old incarnation is fenced.
    assert_eq!(
        f.heartbeat(&old, Some("i1"), 1).await,
        ErrorCode::FencedInstanceId.code()
    );
    let r = f.join("c1", &old, Some("i1")).await.unwrap();
    assert_eq!(r.error_code, ErrorCode::FencedInstanceId.code());
    assert_eq!(f.heartbeat(&new, Some("i1"), 1).await, 0);
    // The new member id is what the log says.
    let v = f.last_group_record();
    assert_eq!(v.generation, 1);
    assert_eq!(v.members.len(), 1);
    assert_eq!(v.members[0].member_id, new);
    assert_eq!(v.members[0].group_instance_id.as_deref(), Some("i1"));
    assert_eq!(&v.members[0].assignment[..], b"P0");
}

#[tokio::test(start_paused = true)]
async fn join_checks_session_timeout_group_id_and_members() {
    let f = Fixture::new().await;
    let mut req = f.join_req("", None, &["t"]);
    req.session_timeout_ms = 1000;
    let r = f.svc.join_group(&ctx("c"), req).await;
    assert_eq!(r.error_code, ErrorCode::InvalidSessionTimeout.code());
    let mut req = f.join_req("", None, &["t"]);
    req.group_id = st("").into();
    let r = f.svc.join_group(&ctx("c"), req).await;
    assert_eq!(r.error_code, ErrorCode::InvalidGroupId.code());
    // A member id the coordinator never gave, for a group that does not exist.
    let r = f.join("c", "made-up", None).await.unwrap();
    assert_eq!(r.error_code, ErrorCode::UnknownMemberId.code());
    // v3 and older: no MEMBER_ID_REQUIRED round trip.
    let mut c = ctx("old");
    c.api_version = 3;
    let svc = f.svc.clone();
    let req = f.join_req("", None, &["t"]);
    let r = tokio::spawn(async move { svc.join_group(&c, req).await })
        .await
        .unwrap();
    assert_eq!((r.error_code, r.generation_id), (0, 1));
    // A different protocol type is refused once the group has members.
    let mut req = f.join_req("", None, &["t"]);
    req.protocol_type = st("connect");
    let r = f.svc.join_group(&ctx("c"), req).await;
    assert_eq!(r.error_code, ErrorCode::InconsistentGroupProtocol.code());
    // Describe of an unknown group (of a partition this broker leads), v6: GROUP_ID_NOT_FOUND.
    let nope = (0..)
        .map(|i| format!("nope{i}"))
        .find(|g| f.svc.partition_for(g) == f.partition)
        .unwrap();
    let mut c = ctx("c");
    c.api_version = 6;
    let d = f
        .svc
        .describe_groups(
            &c,
            DescribeGroupsRequest::default().with_groups(vec![st(&nope).into()]),
        )
        .await;
    assert_eq!(d.groups[0].error_code, ErrorCode::GroupIdNotFound.code());
    assert_eq!(d.groups[0].group_state.as_str(), "Dead");
    assert_eq!(
        d.groups[0].error_message.as_deref(),
        Some(format!("Group {nope} not found.").as_str())
    );
}

#[tokio::test(start_paused = true)]
async fn group_max_size_turns_away_the_extra_member() {
    let mem = MemPartitions::new();
    let config = GroupCoordinatorConfig {
        classic_max_size: 1,
        ..GroupCoordinatorConfig::default()
    };
    let svc = GroupCoordinatorService::new(config, mem.clone(), mem.clone());
    let partition = svc.partition_for(GROUP);
    let f = Fixture {
        svc,
        mem,
        partition,
    };
    f.elect(1).await;
    let m1 = f.member_id("c1").await;
    let j1 = f.join("c1", &m1, None);
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The group is rebalancing with one member awaiting: a second one is turned away.
    let r = f.join("c2", "", None).await.unwrap();
    assert_eq!(r.error_code, ErrorCode::GroupMaxSizeReached.code());
    let r1 = j1.await.unwrap();
    assert_eq!((r1.error_code, r1.generation_id), (0, 1));
}

#[tokio::test(start_paused = true)]
async fn reloading_the_partition_rebuilds_the_group_and_its_session_timers() {
    let f = Fixture::new().await;
    let (m1, m2) = f.stable_pair().await;
    f.svc.on_resigned(f.partition, None);
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(
        f.heartbeat(&m1, None, 1).await,
        ErrorCode::NotCoordinator.code()
    );
    f.elect(2).await;
    let d = f.describe().await;
    assert_eq!(d.group_state.as_str(), "Stable");
    assert_eq!(d.protocol_data.as_str(), "range");
    let mut ids: Vec<_> = d.members.iter().map(|m| m.member_id.to_string()).collect();
    ids.sort();
    let mut want = vec![m1.clone(), m2.clone()];
    want.sort();
    assert_eq!(ids, want);
    let d2 = d
        .members
        .iter()
        .find(|m| m.member_id.as_str() == m2)
        .unwrap();
    assert_eq!(&d2.member_assignment[..], b"A2");
    assert_eq!(d2.client_id.as_str(), "c2");
    assert_eq!(f.heartbeat(&m1, None, 1).await, 0);
    // A follower that finds its JoinGroup unchanged gets the generation back.
    let r = f.join("c2", &m2, None).await.unwrap();
    assert_eq!((r.error_code, r.generation_id), (0, 1));
    // Nobody heartbeats: the re-armed session timers remove both, the group ends Empty and
    // says so in a record.
    tokio::time::sleep(Duration::from_millis(3 * SESSION_MS as u64)).await;
    let d = f.describe().await;
    assert_eq!(d.group_state.as_str(), "Empty");
    assert!(d.members.is_empty());
    let v = f.last_group_record();
    assert_eq!((v.generation, v.members.len()), (2, 0));
}

#[tokio::test(start_paused = true)]
async fn a_failed_append_of_the_assignment_resets_and_rebalances() {
    let f = Fixture::new().await;
    let m1 = f.member_id("c1").await;
    let j1 = f.join("c1", &m1, None);
    let m2 = f.member_id("c2").await;
    let j2 = f.join("c2", &m2, None);
    let (r1, r2) = (j1.await.unwrap(), j2.await.unwrap());
    assert_eq!((r1.generation_id, r2.generation_id), (1, 1));
    let s2 = f.sync(&m2, None, 1, vec![]);
    tokio::time::sleep(Duration::from_millis(10)).await;
    *f.mem.fail_next.lock() = Some(ErrorCode::NotEnoughReplicas);
    let s1 = f.sync(&m1, None, 1, vec![(&m1, b"A1"), (&m2, b"A2")]);
    let (s1, s2) = (s1.await.unwrap(), s2.await.unwrap());
    // Kafka maps the append error to COORDINATOR_NOT_AVAILABLE for everyone waiting.
    assert_eq!(s1.error_code, ErrorCode::CoordinatorNotAvailable.code());
    assert_eq!(s2.error_code, ErrorCode::CoordinatorNotAvailable.code());
    assert!(s2.assignment.is_empty());
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(
        f.describe().await.group_state.as_str(),
        "PreparingRebalance"
    );
    assert_eq!(
        f.heartbeat(&m2, None, 1).await,
        ErrorCode::RebalanceInProgress.code()
    );
    // Both rejoin: generation 2, and this time the assignment sticks.
    let j1 = f.join("c1", &m1, None);
    let j2 = f.join("c2", &m2, None);
    let (r1, r2) = (j1.await.unwrap(), j2.await.unwrap());
    assert_eq!((r1.generation_id, r2.generation_id), (2, 2));
    let leader = r1.leader.to_string();
    let follower = if leader == m1 { &m2 } else { &m1 };
    let sf = f.sync(follower, None, 2, vec![]);
    let sl = f
        .sync(&leader, None, 2, vec![(&m1, b"B1"), (&m2, b"B2")])
        .await
        .unwrap();
    assert_eq!(sl.error_code, 0);
    assert_eq!(sf.await.unwrap().error_code, 0);
    assert_eq!(f.describe().await.group_state.as_str(), "Stable");
}

#[tokio::test(start_paused = true)]
async fn an_admin_removes_a_static_member_by_instance_id() {
    let f = Fixture::new().await;
    let r = f.join("c1", "", Some("i1")).await.unwrap();
    let id = r.member_id.to_string();
    let s = f.sync(&id, Some("i1"), 1, vec![(&id, b"P")]).await.unwrap();
    assert_eq!(s.error_code, 0);
    let r = f
        .svc
        .leave_group(
            &ctx("admin"),
            LeaveGroupRequest::default()
                .with_group_id(st(GROUP).into())
                .with_members(vec![
                    MemberIdentity::default()
                        .with_member_id(st(""))
                        .with_group_instance_id(Some(st("i1"))),
                    MemberIdentity::default()
                        .with_member_id(st(""))
                        .with_group_instance_id(Some(st("i9"))),
                ]),
        )
        .await;
    assert_eq!(r.members[0].error_code, 0);
    assert_eq!(r.members[1].error_code, ErrorCode::UnknownMemberId.code());
    // The last member left: the rebalance completes at once into an empty generation.
    let d = f.describe().await;
    assert_eq!(d.group_state.as_str(), "Empty");
    let v = f.last_group_record();
    assert_eq!((v.generation, v.members.len()), (2, 0));
    // v0-2: one member by id; the top-level code is its code.
    let mut c = ctx("c");
    c.api_version = 1;
    let r = f
        .svc
        .leave_group(
            &c,
            LeaveGroupRequest::default()
                .with_group_id(st(GROUP).into())
                .with_member_id(st("gone")),
        )
        .await;
    assert_eq!(r.error_code, ErrorCode::UnknownMemberId.code());
}

#[tokio::test(start_paused = true)]
async fn a_group_loaded_above_a_lowered_max_size_rebalances() {
    let f = Fixture::new().await;
    let (m1, m2) = f.stable_pair().await;
    f.svc.on_resigned(f.partition, None);
    // Another coordinator, with group.max.size 1, loads the same partition.
    let config = GroupCoordinatorConfig {
        classic_max_size: 1,
        ..GroupCoordinatorConfig::default()
    };
    let svc = GroupCoordinatorService::new(config, f.mem.clone(), f.mem.clone());
    let g = Fixture {
        svc,
        mem: f.mem.clone(),
        partition: f.partition,
    };
    g.elect(2).await;
    assert_eq!(
        g.describe().await.group_state.as_str(),
        "PreparingRebalance"
    );
    assert_eq!(
        g.heartbeat(&m1, None, 1).await,
        ErrorCode::RebalanceInProgress.code()
    );
    // The first to rejoin stays; the other is turned away.
    let r = g.join("c1", &m1, None);
    tokio::time::sleep(Duration::from_millis(10)).await;
    let r2 = g.join("c2", &m2, None).await.unwrap();
    assert_eq!(r2.error_code, ErrorCode::GroupMaxSizeReached.code());
    let r = r.await.unwrap();
    assert_eq!((r.error_code, r.generation_id), (0, 2));
    assert_eq!(r.members.len(), 1);
}

/// Heartbeats `member` every 3 s for `secs` seconds; returns the codes seen.
async fn keep_alive(f: &Fixture, member: &str, generation: i32, secs: u64) -> Vec<i16> {
    let mut codes = Vec::new();
    for _ in 0..secs / 3 {
        tokio::time::sleep(Duration::from_millis(3000)).await;
        codes.push(f.heartbeat(member, None, generation).await);
    }
    codes
}

#[tokio::test(start_paused = true)]
async fn a_member_that_does_not_rejoin_within_the_rebalance_timeout_is_removed() {
    let f = Fixture::new().await;
    let (m1, m2) = f.stable_pair().await;
    let start = tokio::time::Instant::now();
    // The leader's JoinGroup in a stable group starts a rebalance.
    let j1 = f.join("c1", &m1, None);
    // m2 stays alive by heartbeating, but does not rejoin.
    let codes = keep_alive(&f, &m2, 1, 27).await;
    assert!(codes
        .iter()
        .all(|c| *c == ErrorCode::RebalanceInProgress.code()));
    let r = j1.await.unwrap();
    assert_eq!(start.elapsed().as_secs(), REBALANCE_MS as u64 / 1000);
    assert_eq!((r.error_code, r.generation_id), (0, 2));
    assert_eq!(r.members.len(), 1);
    assert_eq!(
        f.heartbeat(&m2, None, 1).await,
        ErrorCode::UnknownMemberId.code()
    );
}

#[tokio::test(start_paused = true)]
async fn members_that_do_not_sync_within_the_rebalance_timeout_are_removed() {
    let f = Fixture::new().await;
    let m1 = f.member_id("c1").await;
    let j1 = f.join("c1", &m1, None);
    let m2 = f.member_id("c2").await;
    let j2 = f.join("c2", &m2, None);
    let (r1, _r2) = (j1.await.unwrap(), j2.await.unwrap());
    assert_eq!(r1.leader.as_str(), m1);
    let s1 = f
        .sync(&m1, None, 1, vec![(&m1, b"A1"), (&m2, b"A2")])
        .await
        .unwrap();
    assert_eq!(s1.error_code, 0);
    assert_eq!(f.describe().await.group_state.as_str(), "Stable");
    // Both heartbeat (Stable: fine); m2 never sends SyncGroup.
    let mut codes = Vec::new();
    for _ in 0..11 {
        tokio::time::sleep(Duration::from_millis(3000)).await;
        codes.push((
            f.heartbeat(&m1, None, 1).await,
            f.heartbeat(&m2, None, 1).await,
        ));
    }
    // The sync timer (rebalance timeout, 30 s from the JoinGroup responses) removed m2 and
    // started a rebalance.
    assert_eq!(
        codes.last().copied(),
        Some((
            ErrorCode::RebalanceInProgress.code(),
            ErrorCode::UnknownMemberId.code()
        )),
        "{codes:?}"
    );
    assert_eq!(codes[8], (0, 0), "{codes:?}");
    assert_eq!(
        f.describe().await.group_state.as_str(),
        "PreparingRebalance"
    );
}

#[tokio::test(start_paused = true)]
async fn a_pending_member_that_never_joins_holds_the_rebalance_until_its_session_expires() {
    let f = Fixture::new().await;
    let m1 = f.member_id("c1").await;
    let r = f.join("c1", &m1, None).await.unwrap();
    assert_eq!(r.generation_id, 1);
    let s = f.sync(&m1, None, 1, vec![(&m1, b"A")]).await.unwrap();
    assert_eq!(s.error_code, 0);
    // A new member gets its id and is pending; then the leader rejoins.
    let _m2 = f.member_id("c2").await;
    let start = tokio::time::Instant::now();
    let r = f.join("c1", &m1, None).await.unwrap();
    // Not all members joined while m2 was pending: the join waited for its session (10 s).
    assert_eq!(start.elapsed().as_secs(), SESSION_MS as u64 / 1000);
    assert_eq!((r.error_code, r.generation_id), (0, 2));
    assert_eq!(r.members.len(), 1);
}

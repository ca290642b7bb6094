//! Transactional offsets (TxnOffsetCommit) through the real `GroupCoordinatorService` and
//! coordinator runtime over an in-memory `__consumer_offsets`: pending until the producer's
//! marker, `require_stable`, KIP-447 member checks for classic and consumer groups, mixing with
//! plain commits, reloading, a failed marker, deleting a group with pending offsets.

mod offsets_common;

use std::time::Duration;

use bytes::{BufMut, BytesMut};
use offsets_common::*;
use strom_coordinator_common::runtime::{TxnProducer, TxnResult};
use strom_group_coordinator::records::CoordinatorRecord;
use strom_group_coordinator::GroupCoordinatorService;
use strom_protocol::kafka::messages::consumer_group_heartbeat_request::TopicPartitions;
use strom_protocol::kafka::messages::join_group_request::JoinGroupRequestProtocol;
use strom_protocol::kafka::messages::sync_group_request::SyncGroupRequestAssignment;
use strom_protocol::kafka::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use strom_protocol::kafka::messages::*;
use strom_protocol::ErrorCode;

const NONE: i16 = 0;
const PID: i64 = 1000;
const EPOCH: i16 = 3;
const NO_TIMEOUT: Duration = Duration::ZERO;

fn code(e: ErrorCode) -> i16 {
    e.code()
}

/// Who commits: (member id, generation or member epoch, group instance id).
type Member<'a> = (&'a str, i32, Option<&'a str>);

const SIMPLE: Member<'static> = ("", -1, None);

fn txn_req(
    group: &str,
    pid: i64,
    member: Member<'_>,
    topics: &[(&str, &[(i32, i64)])],
) -> TxnOffsetCommitRequest {
    TxnOffsetCommitRequest::default()
        .with_transactional_id(TransactionalId(sb("txn")))
        .with_group_id(GroupId(sb(group)))
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(EPOCH)
        .with_member_id(sb(member.0))
        .with_generation_id(member.1)
        .with_group_instance_id(member.2.map(sb))
        .with_topics(
            topics
                .iter()
                .map(|(t, ps)| {
                    TxnOffsetCommitRequestTopic::default()
                        .with_name(TopicName(sb(t)))
                        .with_partitions(
                            ps.iter()
                                .map(|(p, o)| {
                                    TxnOffsetCommitRequestPartition::default()
                                        .with_partition_index(*p)
                                        .with_committed_offset(*o)
                                        .with_committed_leader_epoch(-1)
                                        .with_committed_metadata(Some(sb("txn-meta")))
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
}

async fn txn_commit(
    s: &GroupCoordinatorService,
    version: i16,
    req: TxnOffsetCommitRequest,
) -> Vec<(String, i32, i16)> {
    let r = s.txn_offset_commit(&ctx(version), req).await;
    r.topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(move |p| (t.name.0.to_string(), p.partition_index, p.error_code))
        })
        .collect()
}

/// One simple-group partition committed in `pid`'s transaction: its error code.
async fn txn_commit_one(s: &GroupCoordinatorService, group: &str, pid: i64, p: i32, o: i64) -> i16 {
    txn_commit(s, 3, txn_req(group, pid, SIMPLE, &[("t1", &[(p, o)])])).await[0].2
}

async fn end_txn(s: &GroupCoordinatorService, group: &str, pid: i64, result: TxnResult) {
    s.complete_transaction(s.partition_for(group), pid, EPOCH, 7, result, NO_TIMEOUT)
        .await
        .expect("marker written");
}

/// A v9 fetch of partitions of `t1` (offset, error) per partition.
async fn fetch_t1(
    s: &GroupCoordinatorService,
    group: &str,
    partitions: &[i32],
    require_stable: bool,
) -> Vec<(i64, i16)> {
    let r = s
        .offset_fetch(
            &ctx(9),
            fetch_req(
                vec![fetch_group(group, Some(&[("t1", partitions)]))],
                require_stable,
            ),
        )
        .await;
    assert_eq!(r.groups[0].error_code, NONE);
    fetched(&r, 0).iter().map(|f| (f.2, f.5)).collect()
}

#[tokio::test]
async fn transactional_offsets_are_invisible_until_the_commit_marker() {
    let (s, mem) = service(config()).await;
    let codes = txn_commit(
        &s,
        3,
        txn_req("g", PID, SIMPLE, &[("t1", &[(0, 10), (1, 11)])]),
    )
    .await;
    assert_eq!(codes, vec![("t1".into(), 0, NONE), ("t1".into(), 1, NONE)]);
    // Written as OffsetCommit records of one transactional batch of the producer.
    let tp = tp_of(&s, "g");
    let records = records_of(&s, &mem, "g");
    assert_eq!(records.len(), 2);
    assert!(
        matches!(&records[0], CoordinatorRecord::OffsetCommit(k, Some(_)) if k.group == "g" && k.topic == "t1" && k.partition == 0)
    );
    let producer = TxnProducer {
        producer_id: PID,
        producer_epoch: EPOCH,
    };
    assert_eq!(
        mem.transactional_entries(&tp)
            .into_iter()
            .collect::<Vec<_>>(),
        vec![(0, (producer, None)), (1, (producer, None))]
    );
    // Pending: a plain fetch does not see them; require_stable answers UNSTABLE_OFFSET_COMMIT
    // for exactly the partitions with a pending offset.
    assert_eq!(
        fetch_t1(&s, "g", &[0, 1, 2], false).await,
        vec![(-1, NONE), (-1, NONE), (-1, NONE)]
    );
    let unstable = code(ErrorCode::UnstableOffsetCommit);
    assert_eq!(
        fetch_t1(&s, "g", &[0, 1, 2], true).await,
        vec![(-1, unstable), (-1, unstable), (-1, NONE)]
    );

    end_txn(&s, "g", PID, TxnResult::Commit).await;
    assert_eq!(
        fetch_t1(&s, "g", &[0, 1, 2], false).await,
        vec![(10, NONE), (11, NONE), (-1, NONE)]
    );
    assert_eq!(
        fetch_t1(&s, "g", &[0, 1], true).await,
        vec![(10, NONE), (11, NONE)]
    );
    let f = s
        .offset_fetch(&ctx(9), fetch_req(vec![fetch_group("g", None)], true))
        .await;
    assert_eq!(fetched(&f, 0)[0].4, "txn-meta");
    // The marker is in the log after the offsets.
    let marker = mem.transactional_entries(&tp)[&2];
    assert_eq!(marker.0, producer);
    assert_eq!(
        marker.1.map(|m| (m.result, m.coordinator_epoch)),
        Some((TxnResult::Commit, 7))
    );
}

#[tokio::test]
async fn an_abort_marker_drops_the_pending_offsets_and_leaves_the_committed_ones() {
    let (s, _mem) = service(config()).await;
    let r = s
        .offset_commit(&ctx(8), commit_req("g", &[("t1", &[(0, 5, -1, None)])]))
        .await;
    assert_eq!(commit_codes(&r)[0].2, NONE);
    assert_eq!(txn_commit_one(&s, "g", PID, 0, 50).await, NONE);
    assert_eq!(txn_commit_one(&s, "g", PID + 1, 1, 60).await, NONE);
    let unstable = code(ErrorCode::UnstableOffsetCommit);
    // Every partition of the group (no topics named): a committed offset with a pending one
    // over it is unstable.
    let f = s
        .offset_fetch(&ctx(9), fetch_req(vec![fetch_group("g", None)], true))
        .await;
    assert_eq!(
        fetched(&f, 0)
            .iter()
            .map(|p| (p.1, p.2, p.5))
            .collect::<Vec<_>>(),
        vec![(0, -1, unstable)]
    );
    end_txn(&s, "g", PID, TxnResult::Abort).await;
    assert_eq!(fetch_t1(&s, "g", &[0], true).await, vec![(5, NONE)]);
    // The other producer's transaction is untouched by this abort.
    assert_eq!(fetch_t1(&s, "g", &[1], true).await, vec![(-1, unstable)]);
    end_txn(&s, "g", PID + 1, TxnResult::Commit).await;
    assert_eq!(
        fetch_t1(&s, "g", &[0, 1], true).await,
        vec![(5, NONE), (60, NONE)]
    );
}

/// Kafka keeps whichever commit was recorded last in the log: a plain commit written after
/// the transactional one wins over it when the marker comes; one written before loses.
#[tokio::test]
async fn mixed_plain_and_transactional_commits_keep_the_latest_record() {
    let (s, _mem) = service(config()).await;
    assert_eq!(txn_commit_one(&s, "g", PID, 0, 50).await, NONE);
    let plain = |p: i32, o: i64| commit_req("g", &[("t1", &[(p, o, -1, None)])]);
    assert_eq!(
        commit_codes(&s.offset_commit(&ctx(8), plain(0, 60)).await)[0].2,
        NONE
    );
    assert_eq!(
        commit_codes(&s.offset_commit(&ctx(8), plain(1, 70)).await)[0].2,
        NONE
    );
    assert_eq!(txn_commit_one(&s, "g", PID, 1, 80).await, NONE);
    // Before the marker the plain commits are visible, the partitions unstable.
    assert_eq!(
        fetch_t1(&s, "g", &[0, 1], false).await,
        vec![(60, NONE), (70, NONE)]
    );
    end_txn(&s, "g", PID, TxnResult::Commit).await;
    assert_eq!(
        fetch_t1(&s, "g", &[0, 1], true).await,
        vec![(60, NONE), (80, NONE)]
    );
}

#[tokio::test]
async fn pending_committed_and_aborted_transactions_load_back_as_they_were() {
    let mem = strom_group_coordinator::testing::MemPartitions::new();
    let all: Vec<i32> = (0..PARTITIONS).collect();
    {
        let s = service_on(&mem, config(), &all).await;
        assert_eq!(txn_commit_one(&s, "g", 1, 0, 10).await, NONE);
        assert_eq!(txn_commit_one(&s, "g", 2, 1, 20).await, NONE);
        assert_eq!(txn_commit_one(&s, "g", 3, 2, 30).await, NONE);
        end_txn(&s, "g", 1, TxnResult::Commit).await;
        end_txn(&s, "g", 2, TxnResult::Abort).await;
    }
    let s = service_on(&mem, config(), &all).await;
    let unstable = code(ErrorCode::UnstableOffsetCommit);
    assert_eq!(
        fetch_t1(&s, "g", &[0, 1, 2], true).await,
        vec![(10, NONE), (-1, NONE), (-1, unstable)]
    );
    // Producer 3's transaction completes on the new leader.
    end_txn(&s, "g", 3, TxnResult::Commit).await;
    assert_eq!(fetch_t1(&s, "g", &[2], true).await, vec![(30, NONE)]);
}

#[tokio::test]
async fn a_failed_marker_answers_its_append_error_and_the_retry_commits() {
    let (s, mem) = service(config()).await;
    assert_eq!(txn_commit_one(&s, "g", PID, 0, 10).await, NONE);
    *mem.fail_next.lock() = Some(ErrorCode::NotEnoughReplicas);
    let e = s
        .complete_transaction(
            s.partition_for("g"),
            PID,
            EPOCH,
            7,
            TxnResult::Commit,
            NO_TIMEOUT,
        )
        .await;
    assert_eq!(
        e,
        Err(ErrorCode::NotEnoughReplicas),
        "the append's own error, retriable for the transaction coordinator"
    );
    let unstable = code(ErrorCode::UnstableOffsetCommit);
    assert_eq!(
        fetch_t1(&s, "g", &[0], true).await,
        vec![(-1, unstable)],
        "still pending"
    );
    end_txn(&s, "g", PID, TxnResult::Commit).await;
    assert_eq!(fetch_t1(&s, "g", &[0], true).await, vec![(10, NONE)]);
    // A partition this broker does not lead (or not yet loaded): the coordinator errors
    // become NOT_LEADER_OR_FOLLOWER, which the transaction coordinator retries.
    let s2 = service_on(&mem, config(), &[]).await;
    let e = s2
        .complete_transaction(0, PID, EPOCH, 7, TxnResult::Commit, NO_TIMEOUT)
        .await;
    assert_eq!(e, Err(ErrorCode::NotLeaderOrFollower));
}

#[tokio::test]
async fn a_failed_transactional_append_answers_coordinator_not_available_and_leaves_nothing() {
    let (s, mem) = service(config()).await;
    *mem.fail_next.lock() = Some(ErrorCode::NotEnoughReplicas);
    assert_eq!(
        txn_commit_one(&s, "g", PID, 0, 10).await,
        code(ErrorCode::CoordinatorNotAvailable)
    );
    assert_eq!(fetch_t1(&s, "g", &[0], true).await, vec![(-1, NONE)]);
    end_txn(&s, "g", PID, TxnResult::Commit).await;
    assert_eq!(fetch_t1(&s, "g", &[0], true).await, vec![(-1, NONE)]);
}

#[tokio::test]
async fn unknown_topics_empty_group_id_and_too_large_metadata() {
    let (s, mem) = service(config()).await;
    let codes = txn_commit(
        &s,
        3,
        txn_req(
            "g",
            PID,
            SIMPLE,
            &[("nope", &[(0, 1)]), ("t1", &[(9, 1), (0, 1)])],
        ),
    )
    .await;
    let unknown = code(ErrorCode::UnknownTopicOrPartition);
    assert_eq!(
        codes,
        vec![
            ("nope".into(), 0, unknown),
            ("t1".into(), 9, unknown),
            ("t1".into(), 0, NONE)
        ]
    );
    let codes = txn_commit(&s, 3, txn_req("", PID, SIMPLE, &[("t1", &[(0, 1)])])).await;
    assert_eq!(
        codes,
        vec![("t1".into(), 0, code(ErrorCode::InvalidGroupId))]
    );
    let mut req = txn_req("g2", PID, SIMPLE, &[("t1", &[(0, 1)])]);
    req.topics[0].partitions[0].committed_metadata = Some(sb(&"x".repeat(4097)));
    let codes = txn_commit(&s, 3, req).await;
    assert_eq!(
        codes,
        vec![("t1".into(), 0, code(ErrorCode::OffsetMetadataTooLarge))]
    );
    assert!(records_of(&s, &mem, "g2")
        .iter()
        .all(|r| !matches!(r, CoordinatorRecord::OffsetCommit(k, _) if k.group == "g2")));
}

/// DeleteGroups writes tombstones for pending offsets too; the marker then finds nothing.
#[tokio::test]
async fn deleting_a_group_drops_its_pending_offsets() {
    let (s, _mem) = service(config()).await;
    assert_eq!(txn_commit_one(&s, "g", PID, 2, 10).await, NONE);
    let r = s
        .delete_groups(
            &ctx(2),
            DeleteGroupsRequest::default().with_groups_names(vec![GroupId(sb("g"))]),
        )
        .await;
    assert_eq!(r.results[0].error_code, NONE);
    assert_eq!(fetch_t1(&s, "g", &[2], true).await, vec![(-1, NONE)]);
    end_txn(&s, "g", PID, TxnResult::Commit).await;
    assert_eq!(fetch_t1(&s, "g", &[2], true).await, vec![(-1, NONE)]);
}

// KIP-447: who may commit in a transaction.

fn subscription() -> bytes::Bytes {
    let mut b = BytesMut::new();
    b.put_i16(0);
    b.put_i32(1);
    b.put_i16(2);
    b.put_slice(b"t1");
    b.put_i32(-1);
    b.freeze()
}

/// A classic group `g` with one static member (instance `i1`) at generation 1: its member id.
async fn classic_member(s: &GroupCoordinatorService) -> String {
    let join = JoinGroupRequest::default()
        .with_group_id(GroupId(sb("g")))
        .with_session_timeout_ms(10_000)
        .with_rebalance_timeout_ms(10_000)
        .with_member_id(sb(""))
        .with_group_instance_id(Some(sb("i1")))
        .with_protocol_type(sb("consumer"))
        .with_protocols(vec![JoinGroupRequestProtocol::default()
            .with_name(sb("range"))
            .with_metadata(subscription())]);
    let j = s.join_group(&ctx(9), join).await;
    assert_eq!(j.error_code, NONE);
    assert_eq!(j.generation_id, 1);
    let member = j.member_id.to_string();
    let sync = SyncGroupRequest::default()
        .with_group_id(GroupId(sb("g")))
        .with_generation_id(1)
        .with_member_id(sb(&member))
        .with_group_instance_id(Some(sb("i1")))
        .with_protocol_type(Some(sb("consumer")))
        .with_protocol_name(Some(sb("range")))
        .with_assignments(vec![SyncGroupRequestAssignment::default()
            .with_member_id(sb(&member))
            .with_assignment(bytes::Bytes::from_static(b"A"))]);
    assert_eq!(s.sync_group(&ctx(5), sync).await.error_code, NONE);
    member
}

#[tokio::test]
async fn classic_group_members_are_checked_by_member_id_instance_and_generation() {
    let mut c = config();
    c.initial_rebalance_delay_ms = 0;
    let (s, _mem) = service(c).await;
    let illegal = code(ErrorCode::IllegalGeneration);
    // A group that does not exist: only generation -1 (a simple group) may commit.
    let one = |m: Member<'_>| txn_req("g", PID, m, &[("t1", &[(0, 1)])]);
    assert_eq!(txn_commit(&s, 3, one(("m", 1, None))).await[0].2, illegal);

    let member = classic_member(&s).await;
    let m = member.as_str();
    assert_eq!(txn_commit(&s, 3, one((m, 1, Some("i1")))).await[0].2, NONE);
    assert_eq!(
        txn_commit(&s, 3, one((m, 2, Some("i1")))).await[0].2,
        illegal
    );
    assert_eq!(
        txn_commit(&s, 3, one(("other", 1, None))).await[0].2,
        code(ErrorCode::UnknownMemberId)
    );
    assert_eq!(
        txn_commit(&s, 3, one(("other", 1, Some("i1")))).await[0].2,
        code(ErrorCode::FencedInstanceId)
    );
    // Before v3 the request has no member: a transactional commit of a group with members is
    // accepted (Kafka checks the member only when one is named).
    assert_eq!(txn_commit(&s, 2, one(SIMPLE)).await[0].2, NONE);
    end_txn(&s, "g", PID, TxnResult::Commit).await;
    assert_eq!(fetch_t1(&s, "g", &[0], true).await, vec![(1, NONE)]);
}

#[tokio::test]
async fn consumer_group_members_are_checked_by_member_epoch() {
    let (s, _mem) = service(config()).await;
    let hb = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(sb("g")))
        .with_member_id(sb("m1"))
        .with_member_epoch(0)
        .with_rebalance_timeout_ms(30_000)
        .with_subscribed_topic_names(Some(vec![TopicName(sb("t1"))]))
        .with_topic_partitions(Some(Vec::<TopicPartitions>::new()));
    let r = s.consumer_group_heartbeat(&ctx(1), hb).await;
    assert_eq!(r.error_code, NONE, "{:?}", r.error_message);
    let epoch = r.member_epoch;
    assert!(epoch > 0);
    let one = |m: Member<'_>| txn_req("g", PID, m, &[("t1", &[(0, 1)])]);
    assert_eq!(txn_commit(&s, 3, one(("m1", epoch, None))).await[0].2, NONE);
    // A stale epoch is ILLEGAL_GENERATION before version 6.
    assert_eq!(
        txn_commit(&s, 5, one(("m1", epoch + 1, None))).await[0].2,
        code(ErrorCode::IllegalGeneration)
    );
    assert_eq!(
        txn_commit(&s, 5, one(("m2", epoch, None))).await[0].2,
        code(ErrorCode::UnknownMemberId)
    );
    // A commit without a member into a group with members is refused.
    assert_eq!(
        txn_commit(&s, 2, one(SIMPLE)).await[0].2,
        code(ErrorCode::UnknownMemberId)
    );
}

/// The records of `group`'s offsets partition, markers left out (their control records are
/// not coordinator records).
fn data_records(
    s: &GroupCoordinatorService,
    mem: &strom_group_coordinator::testing::MemPartitions,
    group: &str,
) -> Vec<CoordinatorRecord> {
    let tp = tp_of(s, group);
    let txn = mem.transactional_entries(&tp);
    mem.records(&tp)
        .iter()
        .enumerate()
        .filter(|(i, _)| !txn.get(&(*i as i64)).is_some_and(|(_, m)| m.is_some()))
        .map(|(_, (k, v))| CoordinatorRecord::decode(k, v.as_deref()).expect("a record"))
        .collect()
}

/// Expiry waits for a partition's pending transactional offset, and a group with an open
/// transaction is not deleted; once the transaction is aborted both go.
#[tokio::test(start_paused = true)]
async fn expiry_waits_for_pending_transactional_offsets() {
    let mut c = config();
    c.offsets_retention_ms = 60_000;
    c.offsets_retention_check_interval_ms = 1_000;
    let (s, mem) = service(c).await;
    s.offset_commit(&ctx(8), commit_req("g", &[("t1", &[(0, 5, -1, None)])]))
        .await;
    assert_eq!(txn_commit_one(&s, "g", PID, 0, 50).await, NONE);
    tokio::time::sleep(Duration::from_millis(61_000)).await;
    assert_eq!(offset_of(&s, "g", "t1", 0).await, 5, "pending: not expired");
    end_txn(&s, "g", PID, TxnResult::Abort).await;
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    assert_eq!(
        offset_of(&s, "g", "t1", 0).await,
        -1,
        "expired after the abort"
    );
    let recs = data_records(&s, &mem, "g");
    assert!(
        matches!(recs.last(), Some(CoordinatorRecord::GroupMetadata(k, None)) if k.group == "g"),
        "the simple group is deleted with its last offset: {recs:?}"
    );
}

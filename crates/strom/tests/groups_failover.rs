//! Committed offsets survive restarts and coordinator failover (issue 10's durability tests).
//!
//! - One node: a librdkafka group (classic protocol, and KIP-848's consumer protocol) consumes
//!   part of a topic and commits; the broker is SIGKILLed and restarted on the same data dir;
//!   OffsetFetch answers every acknowledged commit, and a new member resumes exactly at the
//!   committed offsets (nothing skipped, nothing below them read again). Then the same after a
//!   clean SIGTERM restart.
//! - Three nodes (`__consumer_offsets` with RF 3): a committer and a reader run continuously
//!   while the coordinator's broker is SIGKILLed, restarted, and the next coordinator killed.
//!   Right after each restart, OffsetFetch goes straight to the restarted broker for a second:
//!   it must not answer from the stale metadata its own log replays (it did: it led its old
//!   partitions and answered "no offset" until the broker's loader was held until caught up).
//!
//! Every acknowledged commit and every OffsetFetch answer goes into a history that the checker
//! (`groups_failover/checker.rs`) judges: no acknowledged commit lost, missing, or moved back.

mod common;

// A test crate root resolves `mod x;` beside itself, so the helpers' directory is named.
#[path = "groups_failover/checker.rs"]
mod checker;
#[path = "groups_failover/workload.rs"]
mod workload;

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use strom_client::{Admin, Client};
use strom_group_coordinator::topic::{partition_for, GROUP_METADATA_TOPIC_NAME};
use strom_protocol::kafka::protocol::StrBytes;

use checker::{check, Event};
use common::cluster::{registrations, wait_all_registered, Cluster};
use common::Broker;
use workload::{client_config, committer, reader, History, Progress};

const TOPIC: &str = "orders";
const PARTITIONS: i32 = 4;
const PER_PARTITION: i64 = 100;

fn value(p: i32, offset: i64) -> String {
    format!("p{p}-value-{offset}")
}

/// A librdkafka group member of `protocol` ("classic" or "consumer") subscribed to `TOPIC`.
fn member(bootstrap: &str, group: &str, protocol: &str) -> BaseConsumer {
    let c: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("group.protocol", protocol)
        .set("client.id", format!("{group}-member"))
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("fetch.wait.max.ms", "100")
        .set("socket.timeout.ms", "10000")
        .create()
        .expect("create consumer");
    c.subscribe(&[TOPIC]).expect("subscribe");
    c
}

/// Polls `c` until `want` records arrived or `done` says so (bounded), checking that each
/// partition's records come in offset order without a gap, starting at `from[p]`, with the
/// values produced there. Returns partition -> next offset to read.
fn consume(
    c: &BaseConsumer,
    from: &BTreeMap<i32, i64>,
    want: usize,
    mut on_batch: impl FnMut(&BTreeMap<i32, i64>),
) -> BTreeMap<i32, i64> {
    let mut next = from.clone();
    let mut got = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while got < want {
        assert!(
            Instant::now() < deadline,
            "only {got} of {want} records in 60 s (positions {next:?})"
        );
        match c.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                let p = m.partition();
                let expected = next[&p];
                assert_eq!(
                    m.offset(),
                    expected,
                    "partition {p}: next record should be at {expected}"
                );
                assert_eq!(
                    m.payload(),
                    Some(value(p, m.offset()).as_bytes()),
                    "value at {p}/{}",
                    m.offset()
                );
                next.insert(p, m.offset() + 1);
                got += 1;
                if got % 20 == 0 {
                    on_batch(&next);
                }
            }
            Some(Err(e)) => eprintln!("poll: {e}"),
            None => {}
        }
    }
    next
}

/// Commits `offsets` synchronously through librdkafka and records the acknowledgement.
fn rd_commit(c: &BaseConsumer, group: &str, offsets: &BTreeMap<i32, i64>, history: &History) {
    let mut tpl = TopicPartitionList::new();
    for (&p, &o) in offsets {
        tpl.add_partition_offset(TOPIC, p, Offset::Offset(o))
            .unwrap();
    }
    c.commit(&tpl, CommitMode::Sync)
        .unwrap_or_else(|e| panic!("commit {offsets:?}: {e}"));
    let at = Instant::now();
    let mut h = history.lock().unwrap();
    for (&partition, &offset) in offsets {
        h.push(Event::CommitAcked {
            group: group.into(),
            partition,
            offset,
            at,
        });
    }
}

/// OffsetFetch through librdkafka's `committed`, recorded.
fn rd_committed(c: &BaseConsumer, group: &str, history: &History) -> BTreeMap<i32, Option<i64>> {
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition(TOPIC, p);
    }
    let started = Instant::now();
    let got = c
        .committed_offsets(tpl, Duration::from_secs(20))
        .expect("committed offsets");
    let ended = Instant::now();
    let mut out = BTreeMap::new();
    for e in got.elements() {
        let o = match e.offset() {
            Offset::Offset(o) => Some(o),
            _ => None,
        };
        out.insert(e.partition(), o);
        history.lock().unwrap().push(Event::Fetched {
            group: group.into(),
            partition: e.partition(),
            offset: o,
            started,
            ended,
        });
    }
    out
}

/// OffsetFetch through `strom_client`'s admin (which retries while the coordinator loads),
/// recorded. Partitions without a committed offset map to `None`.
fn admin_committed(bootstrap: &str, group: &str, history: &History) -> BTreeMap<i32, Option<i64>> {
    let started = Instant::now();
    let all = common::block_on(async {
        let admin = Admin::new(Client::connect(client_config(bootstrap)).await?);
        admin.list_group_offsets(&[group.to_string()]).await
    })
    .expect("list group offsets")
    .remove(group)
    .expect("an answer for the group")
    .expect("the group's offsets");
    let ended = Instant::now();
    let mut out = BTreeMap::new();
    for p in 0..PARTITIONS {
        let o = all
            .get(&(TOPIC.to_string(), p))
            .and_then(|c| c.as_ref().map(|c| c.offset));
        out.insert(p, o);
        history.lock().unwrap().push(Event::Fetched {
            group: group.into(),
            partition: p,
            offset: o,
            started,
            ended,
        });
    }
    out
}

fn as_committed(offsets: &BTreeMap<i32, i64>) -> BTreeMap<i32, Option<i64>> {
    (0..PARTITIONS)
        .map(|p| (p, offsets.get(&p).copied()))
        .collect()
}

fn assert_no_violations(history: &History) -> checker::Report {
    let r = check(&history.lock().unwrap());
    for v in r.violations.iter().take(20) {
        eprintln!("violation: {v}");
    }
    assert!(
        r.violations.is_empty(),
        "{} violations {:?} over {} acked commits and {} fetches",
        r.violations.len(),
        r.counts(),
        r.acked_commits,
        r.fetches
    );
    r
}

/// One node, one group of `protocol`: half the records consumed and committed, SIGKILL and
/// restart, resume; all consumed and committed, SIGTERM and restart.
fn survives_restarts(protocol: &str) {
    let mut b = Broker::start_with(&["group.initial.rebalance.delay.ms=0"]);
    common::create_topic(&b, TOPIC, PARTITIONS, &[]);
    for p in 0..PARTITIONS {
        let recs: Vec<common::OutRec> = (0..PER_PARTITION)
            .map(|o| common::OutRec {
                partition: Some(p),
                value: Some(value(p, o).into_bytes()),
                ..Default::default()
            })
            .collect();
        common::produce_ok(&b, TOPIC, &[], &recs);
    }
    let group = format!("survivor-{protocol}");
    let t0 = Instant::now();
    let phase = |what: &str| eprintln!("{protocol}: {what} at {:?}", t0.elapsed());
    let history: History = Arc::new(Mutex::new(Vec::new()));
    let start: BTreeMap<i32, i64> = (0..PARTITIONS).map(|p| (p, 0)).collect();

    // Half of the records, committed every 20 records and at the end.
    let c1 = member(&b.bootstrap(), &group, protocol);
    let half = (PARTITIONS as i64 * PER_PARTITION / 2) as usize;
    // Partitions not read yet are committed at 0, which is a commit like any other.
    let committed = consume(&c1, &start, half, |next| {
        rd_commit(&c1, &group, next, &history)
    });
    rd_commit(&c1, &group, &committed, &history);
    assert_eq!(
        rd_committed(&c1, &group, &history),
        as_committed(&committed)
    );

    phase("half consumed and committed");
    // SIGKILL with the member alive, restart on the same data dir.
    b.kill();
    b.restart();
    assert_eq!(
        admin_committed(&b.bootstrap(), &group, &history),
        as_committed(&committed),
        "after SIGKILL and restart"
    );
    // The first member, still running, reads the same offsets once it has reconnected; then it
    // leaves (closing while disconnected would leave its partitions to it until its session
    // times out) and a new member resumes exactly at the committed offsets.
    assert_eq!(
        rd_committed(&c1, &group, &history),
        as_committed(&committed),
        "the first member, after SIGKILL and restart"
    );
    phase("restarted after SIGKILL");
    drop(c1);
    phase("first member closed");
    let c2 = member(&b.bootstrap(), &group, protocol);
    assert_eq!(
        rd_committed(&c2, &group, &history),
        as_committed(&committed)
    );
    let resume = committed.clone();
    let rest = (PARTITIONS as i64 * PER_PARTITION - resume.values().sum::<i64>()) as usize;
    let end = consume(&c2, &resume, rest, |next| {
        rd_commit(&c2, &group, next, &history)
    });
    phase("second member read the rest");
    let all: BTreeMap<i32, i64> = (0..PARTITIONS).map(|p| (p, PER_PARTITION)).collect();
    assert_eq!(end, all, "every record read once");
    // Nothing more arrives: nothing was re-read.
    let extra = c2.poll(Duration::from_millis(500));
    assert!(
        !matches!(extra, Some(Ok(_))),
        "a record after the end: {:?}",
        extra.map(|r| r.map(|m| (m.partition(), m.offset())))
    );
    rd_commit(&c2, &group, &end, &history);

    // A clean SIGTERM restart keeps the final commits too.
    common::assert_clean_exit(b.stop());
    b.restart();
    assert_eq!(
        admin_committed(&b.bootstrap(), &group, &history),
        as_committed(&end),
        "after SIGTERM and restart"
    );
    phase("restarted after SIGTERM");
    drop(c2);
    phase("second member closed");
    let r = assert_no_violations(&history);
    assert!(r.acked_commits >= 10 && r.fetches >= 4 * PARTITIONS as usize);
}

#[test]
fn classic_group_offsets_survive_sigkill_and_sigterm_restarts() {
    survives_restarts("classic");
}

#[test]
fn consumer_group_offsets_survive_sigkill_and_sigterm_restarts() {
    survives_restarts("consumer");
}

// ---------------------------------------------------------------------------------------------
// Three nodes: continuous commits and fetches across two kills of the coordinator's broker.

/// Quick failure detection, as the other cluster tests use.
const FAST: &[&str] = &[
    "broker.session.timeout.ms=3000",
    "broker.heartbeat.interval.ms=500",
    "replica.fetch.wait.max.ms=100",
];
const GROUP: &str = "failover";
const WORKLOAD_PARTITIONS: i32 = 6;

/// Waits (bounded) until `what` in `progress` grew by `by` past `from`.
fn wait_progress(
    progress: &Progress,
    what: &str,
    counter: impl Fn(&Progress) -> usize,
    from: usize,
    by: usize,
    limit: Duration,
) {
    let deadline = Instant::now() + limit;
    while counter(progress) < from + by {
        assert!(
            Instant::now() < deadline,
            "{what}: {} after {limit:?}, wanted {} (acked {}, failed commits {}, fetches {}, \
             failed fetches {})",
            counter(progress),
            from + by,
            progress.acked_commits.load(Ordering::SeqCst),
            progress.failed_commits.load(Ordering::SeqCst),
            progress.fetches_ok.load(Ordering::SeqCst),
            progress.fetches_failed.load(Ordering::SeqCst),
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Commits and fetches both carry on (bounded) from where they are now.
fn wait_both_progress(progress: &Progress, what: &str) {
    let acked = progress.acked_commits.load(Ordering::SeqCst);
    let fetched = progress.fetches_ok.load(Ordering::SeqCst);
    let limit = Duration::from_secs(45);
    wait_progress(
        progress,
        &format!("commits {what}"),
        |p| p.acked_commits.load(Ordering::SeqCst),
        acked,
        20,
        limit,
    );
    wait_progress(
        progress,
        &format!("fetches {what}"),
        |p| p.fetches_ok.load(Ordering::SeqCst),
        fetched,
        20,
        limit,
    );
}

/// The group's coordinator as FindCoordinator names it now.
fn coordinator_of(rt: &tokio::runtime::Runtime, bootstrap: &str) -> i32 {
    let found = rt
        .block_on(async {
            let admin = Admin::new(Client::connect(client_config(bootstrap)).await?);
            admin.find_group_coordinators(&[GROUP.to_string()]).await
        })
        .expect("FindCoordinator")
        .remove(GROUP)
        .expect("an answer for the group")
        .expect("a coordinator");
    found.node_id
}

/// Waits (bounded) until `node` is back in the ISR of the group's `__consumer_offsets`
/// partition, as node `via` reports it, so the next kill leaves two in-sync replicas.
fn wait_in_isr(c: &Cluster, via: i32, node: i32) {
    use strom_protocol::kafka::messages::metadata_request::MetadataRequestTopic;
    use strom_protocol::kafka::messages::{ApiKey, MetadataRequest, MetadataResponse, TopicName};
    let partition = partition_for(GROUP, 50);
    common::cluster::eventually(
        &format!("node {node} in the ISR of {GROUP_METADATA_TOPIC_NAME}-{partition}"),
        || {
            let mut s =
                std::net::TcpStream::connect(("127.0.0.1", common::cluster::port_of(c, via)))
                    .ok()?;
            let mut t = MetadataRequestTopic::default();
            t.name = Some(TopicName(StrBytes::from_static_str(
                GROUP_METADATA_TOPIC_NAME,
            )));
            let resp: MetadataResponse = common::raw_call(
                &mut s,
                ApiKey::Metadata,
                12,
                &MetadataRequest::default().with_topics(Some(vec![t])),
            );
            let part = registrations(&resp).remove(&partition)?;
            part.isr.contains(&node).then_some(())
        },
    );
}

/// A raw OffsetFetch v8 sent to `node` itself (no coordinator lookup): `Err(code)` for a
/// group-level error, else partition -> offset.
fn raw_offset_fetch(c: &Cluster, node: i32) -> Result<BTreeMap<i32, i64>, i16> {
    use strom_protocol::kafka::messages::offset_fetch_request::{
        OffsetFetchRequestGroup, OffsetFetchRequestTopics,
    };
    use strom_protocol::kafka::messages::{
        ApiKey, GroupId, OffsetFetchRequest, OffsetFetchResponse, TopicName,
    };
    let mut s = std::net::TcpStream::connect(("127.0.0.1", common::cluster::port_of(c, node)))
        .expect("connect");
    let mut t = OffsetFetchRequestTopics::default();
    t.name = TopicName(StrBytes::from_static_str(TOPIC));
    t.partition_indexes = (0..WORKLOAD_PARTITIONS).collect();
    let mut g = OffsetFetchRequestGroup::default();
    g.group_id = GroupId(StrBytes::from_static_str(GROUP));
    g.topics = Some(vec![t]);
    let mut req = OffsetFetchRequest::default();
    req.require_stable = true;
    req.groups = vec![g];
    let resp: OffsetFetchResponse = common::raw_call(&mut s, ApiKey::OffsetFetch, 8, &req);
    let g = &resp.groups[0];
    if g.error_code != 0 {
        return Err(g.error_code);
    }
    let mut out = BTreeMap::new();
    for t in &g.topics {
        for p in &t.partitions {
            assert_eq!(p.error_code, 0, "partition {}", p.partition_index);
            out.insert(p.partition_index, p.committed_offset);
        }
    }
    Ok(out)
}

#[test]
fn committed_offsets_survive_two_coordinator_kills_on_three_nodes() {
    use strom_protocol::ErrorCode;
    let began = Instant::now();
    let mut c = Cluster::start_with(3, FAST);
    wait_all_registered(&c, 3);
    common::cluster::create_topic(&c, &[1, 2, 3], TOPIC, WORKLOAD_PARTITIONS, 3)
        .expect("create topic");
    let bootstrap = c.bootstrap(&[1, 2, 3]);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let history: History = Arc::new(Mutex::new(Vec::new()));
    let progress = Arc::new(Progress::default());
    let committer_task = rt.spawn(committer(
        bootstrap.clone(),
        GROUP.into(),
        TOPIC.into(),
        WORKLOAD_PARTITIONS,
        progress.clone(),
        history.clone(),
    ));
    let reader_task = rt.spawn(reader(
        bootstrap.clone(),
        GROUP.into(),
        TOPIC.into(),
        WORKLOAD_PARTITIONS,
        progress.clone(),
        history.clone(),
    ));
    // The first commit also waits for `__consumer_offsets` to be created.
    wait_progress(
        &progress,
        "first commits",
        |p| p.acked_commits.load(Ordering::SeqCst),
        0,
        20,
        Duration::from_secs(60),
    );
    wait_both_progress(&progress, "before any kill");

    let mut killed = Vec::new();
    for round in 1..=2 {
        let victim = coordinator_of(&rt, &bootstrap);
        eprintln!(
            "round {round}: SIGKILL of coordinator {victim} after {} acked commits ({:?})",
            progress.acked_commits.load(Ordering::SeqCst),
            began.elapsed()
        );
        c.kill(victim);
        killed.push(victim);
        wait_both_progress(&progress, &format!("after killing coordinator {victim}"));
        let now = coordinator_of(&rt, &bootstrap);
        assert_ne!(now, victim, "a new coordinator answers");
        c.restart(victim);
        let probe = rt.block_on(workload::probe(
            c.bootstrap(&[victim]),
            GROUP.into(),
            TOPIC.into(),
            WORKLOAD_PARTITIONS,
            Duration::from_secs(1),
            history.clone(),
        ));
        eprintln!("round {round}: node {victim} right after its restart: {probe:?}");
        wait_in_isr(&c, now, victim);
        wait_both_progress(&progress, &format!("after restarting {victim}"));
    }

    progress.stop.store(true, Ordering::SeqCst);
    let end = rt
        .block_on(async { tokio::time::timeout(Duration::from_secs(60), committer_task).await })
        .expect("the committer stops")
        .expect("committer task")
        .expect("committer");
    rt.block_on(async { tokio::time::timeout(Duration::from_secs(30), reader_task).await })
        .expect("the reader stops")
        .expect("reader task")
        .expect("reader");
    eprintln!(
        "killed {killed:?}; last acked commit {}; {} acked / {} failed commits, {} / {} fetches \
         ok / failed; first commit errors {:?}",
        end.last_acked,
        progress.acked_commits.load(Ordering::SeqCst),
        progress.failed_commits.load(Ordering::SeqCst),
        progress.fetches_ok.load(Ordering::SeqCst),
        progress.fetches_failed.load(Ordering::SeqCst),
        end.first_errors
    );

    let r = assert_no_violations(&history);
    assert!(r.acked_commits > 0 && r.fetches > 0);

    // Every node, as a client's only bootstrap server, leads to the same final offsets, and a
    // node asked directly either is the coordinator and answers them, or says it is not.
    let want: BTreeMap<i32, i64> = (0..WORKLOAD_PARTITIONS)
        .map(|p| (p, end.last_acked))
        .collect();
    let mut coordinators = Vec::new();
    for node in 1..=3 {
        let via = c.bootstrap(&[node]);
        let got = rt
            .block_on(async {
                let admin = Admin::new(Client::connect(client_config(&via)).await?);
                admin.list_group_offsets(&[GROUP.to_string()]).await
            })
            .expect("list group offsets")
            .remove(GROUP)
            .expect("an answer")
            .expect("the group's offsets");
        let got: BTreeMap<i32, i64> = got
            .into_iter()
            .filter(|((t, _), _)| t == TOPIC)
            .map(|((_, p), o)| (p, o.map_or(-1, |o| o.offset)))
            .collect();
        assert_eq!(got, want, "offsets through node {node}");
        let direct =
            common::cluster::eventually(&format!("node {node} loaded"), || match raw_offset_fetch(
                &c, node,
            ) {
                Err(code) if code == ErrorCode::CoordinatorLoadInProgress.code() => None,
                other => Some(other),
            });
        match direct {
            Ok(got) => {
                assert_eq!(got, want, "node {node} answering as the coordinator");
                coordinators.push(node);
            }
            Err(code) => assert_eq!(
                code,
                ErrorCode::NotCoordinator.code(),
                "node {node} is not the coordinator"
            ),
        }
    }
    assert_eq!(coordinators.len(), 1, "one coordinator: {coordinators:?}");
    eprintln!("done in {:?}", began.elapsed());
}

//! One CreateTopics or CreatePartitions request cannot make a node allocate in proportion to the
//! partition count it claims. Kafka 4.4's controller refuses the whole request with
//! POLICY_VIOLATION when its partitions add up to more than `MAX_PARTITIONS_PER_BATCH` (10,000,
//! `ReplicationControlManager.validateTotalNumberOfPartitions`, checked before anything is
//! placed), and refuses an operation that would produce more than `MAX_RECORDS_PER_USER_OP`
//! (10,000) metadata records (`QuorumController`, a `BoundedList` whose overflow
//! `EventHandlerExceptionInfo` turns into POLICY_VIOLATION "Unable to perform excessively large
//! batch operation."). The same raw requests go to one Strom node, to each kind of node of a
//! 3-node cluster (the active controller, and a broker that forwards to it), and to Kafka 4.4
//! when its jars are here: same codes and messages, the node's memory stays bounded (VmHWM from
//! /proc), and it keeps serving.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use common::cluster::Cluster;
use common::kafka_ref::{oracle_available, KafkaRef};
use common::*;
use strom_protocol::kafka::messages::create_partitions_request::{
    CreatePartitionsAssignment, CreatePartitionsTopic,
};
use strom_protocol::kafka::messages::create_topics_request::{
    CreatableReplicaAssignment, CreatableTopic,
};
use strom_protocol::kafka::messages::{
    ApiKey, BrokerId, CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest,
    CreateTopicsResponse, TopicName,
};
use strom_protocol::kafka::protocol::StrBytes;
use strom_protocol::ErrorCode;

/// A node's resident set may not pass this while the requests are handled (an idle Strom node
/// sits near 30 MiB; creating 2^31-1 partitions' records took 23.9 GB before the fix).
const RSS_BOUND_KIB: u64 = 256 * 1024;
/// Past this the watchdog kills the node at once, so that a regression fails the test instead
/// of pushing the shared machine into its OOM killer.
const RSS_KILL_KIB: u64 = 1024 * 1024;

const HUGE_COUNTS: [i32; 3] = [i32::MAX, 1_000_000, 100_000];

/// One Kafka 4.4 at a time: two JVMs at once on a small machine made one of them drop a
/// connection under memory pressure.
static ORACLE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// (topic, error code, error message) of each topic result, in response order.
type Answer = Vec<(String, i16, Option<String>)>;

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

fn topic(n: &str, partitions: i32) -> CreatableTopic {
    CreatableTopic::default()
        .with_name(name(n))
        .with_num_partitions(partitions)
        .with_replication_factor(1)
}

/// A topic with an explicit assignment of `partitions` partitions, each on broker 1.
fn assigned_topic(n: &str, partitions: i32) -> CreatableTopic {
    CreatableTopic::default()
        .with_name(name(n))
        .with_num_partitions(-1)
        .with_replication_factor(-1)
        .with_assignments(
            (0..partitions)
                .map(|p| {
                    CreatableReplicaAssignment::default()
                        .with_partition_index(p)
                        .with_broker_ids(vec![BrokerId(1)])
                })
                .collect(),
        )
}

fn create_topics(port: u16, topics: Vec<CreatableTopic>, validate_only: bool) -> Answer {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let req = CreateTopicsRequest::default()
        .with_topics(topics)
        .with_timeout_ms(30_000)
        .with_validate_only(validate_only);
    let resp: CreateTopicsResponse = raw_call(&mut s, ApiKey::CreateTopics, 7, &req);
    resp.topics
        .into_iter()
        .map(|t| {
            (
                t.name.0.to_string(),
                t.error_code,
                t.error_message.map(|m| m.to_string()),
            )
        })
        .collect()
}

fn grow(n: &str, count: i32) -> CreatePartitionsTopic {
    CreatePartitionsTopic::default()
        .with_name(name(n))
        .with_count(count)
        .with_assignments(None)
}

fn create_partitions(port: u16, topics: Vec<CreatePartitionsTopic>, validate_only: bool) -> Answer {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let req = CreatePartitionsRequest::default()
        .with_topics(topics)
        .with_timeout_ms(30_000)
        .with_validate_only(validate_only);
    let resp: CreatePartitionsResponse = raw_call(&mut s, ApiKey::CreatePartitions, 3, &req);
    let mut out: Answer = resp
        .results
        .into_iter()
        .map(|t| {
            (
                t.name.0.to_string(),
                t.error_code,
                t.error_message.map(|m| m.to_string()),
            )
        })
        .collect();
    // Kafka answers the duplicates of a request before the others; order is not the point.
    out.sort();
    out
}

/// Every request of the test, sent to the node on `port`; what each got, labelled. The topic
/// `grow` (1 partition) and `grow2` (1 partition) are created first. `huge_arrays`: also the
/// requests carrying 100,000 replica assignments, which Kafka 4.4 itself takes minutes to
/// decode (its `ImplicitLinkedHashCollection` of assignments rehashes on every growth), so the
/// oracle does not get them.
fn scenario(
    port: u16,
    prefix: &str,
    huge_arrays: bool,
    after_each: &dyn Fn(&str),
) -> Vec<(String, Answer)> {
    let n = |s: &str| format!("{prefix}{s}");
    let mut out = Vec::new();
    let mut record = |label: String, a: Answer| {
        after_each(&label);
        out.push((label, a));
    };
    for count in HUGE_COUNTS {
        record(
            format!("CreateTopics {count}"),
            create_topics(port, vec![topic(&n("huge"), count)], false),
        );
        record(
            format!("CreateTopics validate-only {count}"),
            create_topics(port, vec![topic(&n("huge"), count)], true),
        );
    }
    // Around the limit (validate-only: Kafka builds the records of a validation as well).
    for count in [9_999, 10_000, 10_001] {
        record(
            format!("CreateTopics validate-only {count}"),
            create_topics(port, vec![topic(&n("edge"), count)], true),
        );
    }
    // The total of one request counts, not each topic's.
    record(
        "CreateTopics 5000 + 5001".into(),
        create_topics(
            port,
            vec![topic(&n("a"), 5_000), topic(&n("b"), 5_001)],
            true,
        ),
    );
    record(
        "CreateTopics 4999 + 4999".into(),
        create_topics(
            port,
            vec![topic(&n("a"), 4_999), topic(&n("b"), 4_999)],
            true,
        ),
    );
    record(
        "CreateTopics 5000 + 5000".into(),
        create_topics(
            port,
            vec![topic(&n("a"), 5_000), topic(&n("b"), 5_000)],
            true,
        ),
    );
    // Kafka adds without overflow: two topics of 2^31-1 do not wrap to a small count.
    record(
        "CreateTopics 2^31-1 + 2^31-1".into(),
        create_topics(
            port,
            vec![topic(&n("a"), i32::MAX), topic(&n("b"), i32::MAX)],
            false,
        ),
    );
    // A name given twice is refused on its own and counts nothing.
    record(
        "CreateTopics duplicate 2^31-1".into(),
        create_topics(
            port,
            vec![topic(&n("dup"), 1), topic(&n("dup"), i32::MAX)],
            false,
        ),
    );
    // Explicit replica assignments count by their number of partitions.
    record(
        "CreateTopics 10001 assignments".into(),
        create_topics(port, vec![assigned_topic(&n("assigned"), 10_001)], true),
    );
    if huge_arrays {
        record(
            "CreateTopics 100000 assignments + 1".into(),
            create_topics(
                port,
                vec![
                    topic(&n("plain"), 1),
                    assigned_topic(&n("assigned"), 100_000),
                ],
                false,
            ),
        );
    }
    record(
        "CreateTopics 3 assignments".into(),
        create_topics(port, vec![assigned_topic(&n("assigned"), 3)], true),
    );

    // CreatePartitions counts the partitions a request adds, over its existing topics.
    let made = create_topics(
        port,
        vec![topic(&n("grow"), 1), topic(&n("grow2"), 1)],
        false,
    );
    assert!(made.iter().all(|(_, code, _)| *code == 0), "{made:?}");
    for count in HUGE_COUNTS {
        record(
            format!("CreatePartitions {count}"),
            create_partitions(port, vec![grow(&n("grow"), count)], false),
        );
        record(
            format!("CreatePartitions validate-only {count}"),
            create_partitions(port, vec![grow(&n("grow"), count)], true),
        );
    }
    for count in [10_001, 10_002] {
        record(
            format!("CreatePartitions validate-only {count}"),
            create_partitions(port, vec![grow(&n("grow"), count)], true),
        );
    }
    record(
        "CreatePartitions 5001 + 5002".into(),
        create_partitions(
            port,
            vec![grow(&n("grow"), 5_001), grow(&n("grow2"), 5_002)],
            true,
        ),
    );
    record(
        "CreatePartitions unknown 2^31-1".into(),
        create_partitions(port, vec![grow(&n("missing"), i32::MAX)], false),
    );
    record(
        "CreatePartitions duplicate 2^31-1".into(),
        create_partitions(
            port,
            vec![grow(&n("grow"), i32::MAX), grow(&n("grow"), i32::MAX)],
            false,
        ),
    );
    if huge_arrays {
        record(
            "CreatePartitions 100000 assignments".into(),
            create_partitions(
                port,
                vec![grow(&n("grow"), 3).with_assignments(Some(
                    (0..100_000)
                        .map(|_| {
                            CreatePartitionsAssignment::default().with_broker_ids(vec![BrokerId(1)])
                        })
                        .collect(),
                ))],
                false,
            ),
        );
    }
    record(
        "CreatePartitions 3".into(),
        create_partitions(port, vec![grow(&n("grow"), 3)], false),
    );
    out
}

/// Checks the answers that do not depend on the oracle: every request over the limit is refused
/// with POLICY_VIOLATION for each of its topics, the ones under it are not.
fn assert_limits(answers: &[(String, Answer)], prefix: &str) {
    let n = |s: &str| format!("{prefix}{s}");
    for (label, answer) in answers {
        eprintln!("{label}: {answer:?}");
    }
    let get = |label: &str| -> &Answer {
        &answers
            .iter()
            .find(|(l, _)| l == label)
            .unwrap_or_else(|| panic!("no answer for {label}"))
            .1
    };
    let policy = ErrorCode::PolicyViolation.code();
    let too_many = Some("Excessively large number of partitions per request.".to_string());
    let too_many_added =
        Some("Excessively large number of additional partitions per request.".to_string());
    let batch = Some("Unable to perform excessively large batch operation.".to_string());
    for count in HUGE_COUNTS {
        for label in [
            format!("CreateTopics {count}"),
            format!("CreateTopics validate-only {count}"),
        ] {
            assert_eq!(
                get(&label),
                &vec![(n("huge"), policy, too_many.clone())],
                "{label}"
            );
        }
        for label in [
            format!("CreatePartitions {count}"),
            format!("CreatePartitions validate-only {count}"),
        ] {
            assert_eq!(
                get(&label),
                &vec![(n("grow"), policy, too_many_added.clone())],
                "{label}"
            );
        }
    }
    assert_eq!(get("CreateTopics validate-only 9999")[0].1, 0);
    // 10,000 partitions pass the partition count but make 10,001 records with the topic's own.
    assert_eq!(
        get("CreateTopics validate-only 10000"),
        &vec![(n("edge"), policy, batch.clone())]
    );
    assert_eq!(
        get("CreateTopics validate-only 10001"),
        &vec![(n("edge"), policy, too_many.clone())]
    );
    for label in ["CreateTopics 5000 + 5001", "CreateTopics 2^31-1 + 2^31-1"] {
        assert_eq!(
            get(label),
            &vec![
                (n("a"), policy, too_many.clone()),
                (n("b"), policy, too_many.clone())
            ],
            "{label}"
        );
    }
    assert!(get("CreateTopics 4999 + 4999").iter().all(|t| t.1 == 0));
    assert_eq!(
        get("CreateTopics 5000 + 5000"),
        &vec![
            (n("a"), policy, batch.clone()),
            (n("b"), policy, batch.clone())
        ]
    );
    assert_eq!(
        get("CreateTopics 10001 assignments"),
        &vec![(n("assigned"), policy, too_many.clone())]
    );
    assert_eq!(
        get("CreateTopics 100000 assignments + 1"),
        &vec![
            (n("plain"), policy, too_many.clone()),
            (n("assigned"), policy, too_many.clone())
        ]
    );
    assert_eq!(get("CreateTopics 3 assignments")[0].1, 0);
    let duplicate = Some("Duplicate topic name.".to_string());
    let invalid = ErrorCode::InvalidRequest.code();
    assert_eq!(
        get("CreateTopics duplicate 2^31-1"),
        &vec![(n("dup"), invalid, duplicate.clone())]
    );
    assert_eq!(
        get("CreatePartitions duplicate 2^31-1"),
        &vec![(n("grow"), invalid, duplicate.clone())]
    );
    assert_eq!(
        get("CreatePartitions unknown 2^31-1"),
        &vec![(
            n("missing"),
            ErrorCode::UnknownTopicOrPartition.code(),
            None
        )]
    );
    assert_eq!(get("CreatePartitions validate-only 10001")[0].1, 0);
    assert_eq!(
        get("CreatePartitions validate-only 10002"),
        &vec![(n("grow"), policy, too_many_added.clone())]
    );
    assert_eq!(
        get("CreatePartitions 5001 + 5002"),
        &vec![
            (n("grow"), policy, too_many_added.clone()),
            (n("grow2"), policy, too_many_added.clone())
        ]
    );
    assert_eq!(
        get("CreatePartitions 100000 assignments")[0].1,
        ErrorCode::InvalidReplicaAssignment.code()
    );
    assert_eq!(get("CreatePartitions 3"), &vec![(n("grow"), 0, None)]);
}

/// Kills the process `pid` as soon as its resident set passes [`RSS_KILL_KIB`].
struct RssWatchdog {
    stop: Arc<AtomicBool>,
    tripped: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

impl RssWatchdog {
    fn watch(pid: u32) -> RssWatchdog {
        let stop = Arc::new(AtomicBool::new(false));
        let tripped = Arc::new(AtomicBool::new(false));
        let (s, t) = (stop.clone(), tripped.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                if status_kib(pid, "VmRSS:").is_some_and(|k| k > RSS_KILL_KIB) {
                    t.store(true, Ordering::Relaxed);
                    let _ = std::process::Command::new("kill")
                        .args(["-9", &pid.to_string()])
                        .status();
                    return;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        RssWatchdog {
            stop,
            tripped,
            thread: Some(thread),
        }
    }

    fn assert_bounded(&self, pid: u32, what: &str) {
        assert!(
            !self.tripped.load(Ordering::Relaxed),
            "{what}: node {pid} passed {RSS_KILL_KIB} KiB resident and was killed"
        );
        let hwm = status_kib(pid, "VmHWM:").expect("node is alive");
        assert!(
            hwm < RSS_BOUND_KIB,
            "{what}: node {pid} peaked at {hwm} KiB resident (bound {RSS_BOUND_KIB} KiB)"
        );
    }
}

impl Drop for RssWatchdog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[test]
fn huge_partition_counts_single_node() {
    let broker = Broker::start();
    let pid = broker.pid();
    let dog = RssWatchdog::watch(pid);
    let answers = scenario(broker.port(), "", true, &|label| {
        dog.assert_bounded(pid, label)
    });
    assert_limits(&answers, "");
    dog.assert_bounded(pid, "after all requests");
    eprintln!(
        "strom single node: VmHWM {} KiB",
        status_kib(pid, "VmHWM:").unwrap()
    );
    // Still serving: a produce and a consume.
    create_topic(&broker, "after", 1, &[]);
    let recs = simple_records("after", 100, Some(0));
    produce_ok(&broker, "after", &[], &recs);
    assert_records_eq(&consume_all(&broker, "after", 0), &recs);

    // The same requests, the same answers from Kafka 4.4.
    match oracle_available() {
        Ok(()) => {
            let _one = ORACLE.lock().unwrap_or_else(|e| e.into_inner());
            let kafka = KafkaRef::start();
            let oracle = scenario(kafka.port, "", false, &|label| {
                eprintln!("kafka 4.4 answered: {label}")
            });
            drop(kafka);
            let differ: Vec<String> = oracle
                .iter()
                .filter_map(|(label, kafka)| {
                    let strom = &answers.iter().find(|(l, _)| l == label).unwrap().1;
                    (strom != kafka)
                        .then(|| format!("{label}:\n  strom {strom:?}\n  kafka {kafka:?}"))
                })
                .collect();
            assert!(
                differ.is_empty(),
                "Strom and Kafka 4.4 differ:\n{}",
                differ.join("\n")
            );
        }
        Err(why) if std::env::var_os("CI").is_some() => panic!("{why}"),
        Err(why) => eprintln!("skipping the comparison with Kafka 4.4: {why}"),
    }
}

#[test]
fn huge_partition_counts_three_nodes() {
    let c = Cluster::start(3);
    common::cluster::wait_all_registered(&c, 3);
    let pids: Vec<u32> = c.nodes.iter().map(|n| c.pid(n.id)).collect();
    let dogs: Vec<RssWatchdog> = pids.iter().map(|&p| RssWatchdog::watch(p)).collect();
    let check = |label: &str| {
        for (dog, &pid) in dogs.iter().zip(&pids) {
            dog.assert_bounded(pid, label);
        }
    };
    // Through the active controller, then through a node that forwards to it.
    let controller = common::cluster::admin_controller(&c, 1);
    let other = (1..=3).find(|&n| n != controller).unwrap();
    for via in [controller, other] {
        let port = common::cluster::port_of(&c, via);
        let prefix = format!("via{via}-");
        let answers = scenario(port, &prefix, true, &check);
        assert_limits(&answers, &prefix);
    }
    check("after all requests");
    // Still serving on every node.
    common::cluster::create_topic(&c, &[other], "after", 3, 3).unwrap();
    common::cluster::produce(&c, "after", 300);
    assert_eq!(
        common::cluster::consume_count(&c, &[1, 2, 3], "after", 3, 300),
        300
    );
}

/// What a node configured with absurd partition counts answers: it starts (Kafka's
/// `num.partitions`, `offsets.topic.num.partitions` and `transaction.state.log.num.partitions`
/// are only bounded below), and every topic those defaults would create is refused by the
/// partition bound: Metadata's auto-creation (`AutoTopicCreationManager`, which logs the
/// POLICY_VIOLATION) answers UNKNOWN_TOPIC_OR_PARTITION, FindCoordinator answers
/// COORDINATOR_NOT_AVAILABLE, CreateTopics with the default count POLICY_VIOLATION.
fn defaults_scenario(port: u16) -> Vec<(String, Vec<i16>)> {
    use strom_protocol::kafka::messages::metadata_request::MetadataRequestTopic;
    use strom_protocol::kafka::messages::{
        FindCoordinatorRequest, FindCoordinatorResponse, MetadataRequest, MetadataResponse,
    };
    let mut out = Vec::new();
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    for _ in 0..2 {
        let req = MetadataRequest::default()
            .with_topics(Some(vec![
                MetadataRequestTopic::default().with_name(Some(name("auto")))
            ]))
            .with_allow_auto_topic_creation(true);
        let resp: MetadataResponse = raw_call(&mut s, ApiKey::Metadata, 12, &req);
        out.push((
            "Metadata auto-create".into(),
            resp.topics.iter().map(|t| t.error_code).collect(),
        ));
    }
    for key_type in [0i8, 1] {
        let req = FindCoordinatorRequest::default()
            .with_key_type(key_type)
            .with_coordinator_keys(vec![StrBytes::from_static_str("k")]);
        let resp: FindCoordinatorResponse = raw_call(&mut s, ApiKey::FindCoordinator, 4, &req);
        out.push((
            format!("FindCoordinator key type {key_type}"),
            resp.coordinators.iter().map(|c| c.error_code).collect(),
        ));
    }
    let answer = create_topics(port, vec![topic("dflt", -1)], false);
    out.push((
        "CreateTopics default count".into(),
        answer.iter().map(|t| t.1).collect(),
    ));
    out
}

#[test]
fn absurd_partition_defaults() {
    const PROPS: [&str; 3] = [
        "num.partitions=1000000",
        "offsets.topic.num.partitions=1000000",
        "transaction.state.log.num.partitions=1000000",
    ];
    let broker = Broker::start_with(&PROPS);
    let pid = broker.pid();
    let dog = RssWatchdog::watch(pid);
    let answers = defaults_scenario(broker.port());
    dog.assert_bounded(pid, "requests creating default-sized topics");
    let unknown = ErrorCode::UnknownTopicOrPartition.code();
    let unavailable = ErrorCode::CoordinatorNotAvailable.code();
    let policy = ErrorCode::PolicyViolation.code();
    assert_eq!(
        answers,
        vec![
            ("Metadata auto-create".to_string(), vec![unknown]),
            ("Metadata auto-create".to_string(), vec![unknown]),
            ("FindCoordinator key type 0".to_string(), vec![unavailable]),
            ("FindCoordinator key type 1".to_string(), vec![unavailable]),
            ("CreateTopics default count".to_string(), vec![policy]),
        ]
    );
    assert!(
        broker.logs().contains("auto topic creation failed"),
        "the refused auto-creation is logged"
    );
    // Explicit counts still work.
    assert_eq!(
        create_topics(broker.port(), vec![topic("explicit", 2)], false)[0].1,
        0
    );
    let recs = simple_records("explicit", 50, Some(1));
    produce_ok(&broker, "explicit", &[], &recs);
    assert_records_eq(&consume_all(&broker, "explicit", 1), &recs);
    dog.assert_bounded(pid, "after all requests");

    match oracle_available() {
        Ok(()) => {
            let props: String = PROPS.iter().map(|p| format!("{p}\n")).collect();
            let _one = ORACLE.lock().unwrap_or_else(|e| e.into_inner());
            let kafka = KafkaRef::start_with_props(&props);
            let oracle = defaults_scenario(kafka.port);
            drop(kafka);
            assert_eq!(answers, oracle, "Strom (left) and Kafka 4.4 (right) differ");
        }
        Err(why) if std::env::var_os("CI").is_some() => panic!("{why}"),
        Err(why) => eprintln!("skipping the comparison with Kafka 4.4: {why}"),
    }
}

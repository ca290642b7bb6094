//! Consumer groups end to end: two consumers split a 6-partition topic (classic `range`,
//! classic `cooperative-sticky`, `group.protocol=consumer`), one closes and the other takes
//! everything; commits survive a consumer restart; a static member restarts into its old
//! partitions without moving anyone else's.
//!
//! Every scenario runs against a Strom broker (`group_consumers_against_strom`) and against the
//! reference (`group_consumers_against_a_broker`): `$STROM_GROUP_BOOTSTRAP` when set, else Apache
//! Kafka 4.4 started with `scripts/kafka-ref.sh` from `.cache/kafka-4.4` (when `java` or the jars
//! are missing that one fails under `CI` and is skipped otherwise).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use strom_client::group::{GroupConfig, GroupProtocol, RebalanceListener, TopicPartition};
use strom_client::{
    Admin, Client, ClientConfig, Consumer, ConsumerConfig, OffsetReset, Producer, ProducerConfig,
};

struct Kafka {
    pid: Option<String>,
    script: PathBuf,
    dir: Option<tempfile::TempDir>,
    bootstrap: String,
}

impl Drop for Kafka {
    fn drop(&mut self) {
        if let Some(pid) = &self.pid {
            let _ = Command::new(&self.script).arg("stop").arg(pid).status();
        }
        if let Some(d) = self.dir.take() {
            if std::thread::panicking() {
                let log = std::fs::read_to_string(d.path().join("server.log")).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(40).collect();
                eprintln!(
                    "kafka server.log tail:\n{}",
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                );
            }
        }
    }
}

fn broker() -> Option<Kafka> {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let script = repo.join("scripts/kafka-ref.sh");
    if let Ok(b) = std::env::var("STROM_GROUP_BOOTSTRAP") {
        return Some(Kafka {
            pid: None,
            script,
            dir: None,
            bootstrap: b,
        });
    }
    let jars = repo.join(".cache/kafka-4.4/libs/.complete");
    let java = Command::new("java").arg("-version").output().is_ok();
    if !jars.exists() || !java {
        let why = format!(
            "no Kafka 4.4 to test against (java found: {java}, {} exists: {}); run `make kafka-ref-fetch` or set STROM_GROUP_BOOTSTRAP",
            jars.display(),
            jars.exists()
        );
        assert!(std::env::var_os("CI").is_none(), "{why}");
        eprintln!("skipping: {why}");
        return None;
    }
    // The controller listens on port + 1.
    let port = common::free_port_with(true);
    let dir = tempfile::Builder::new()
        .prefix("group-consumer-kafka-")
        .tempdir()
        .unwrap();
    let out = Command::new(&script)
        .arg("start")
        .arg(port.to_string())
        .arg(dir.path())
        .output()
        .expect("run kafka-ref.sh");
    assert!(
        out.status.success(),
        "kafka-ref.sh start failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pid = String::from_utf8_lossy(&out.stdout).trim().to_string();
    Some(Kafka {
        pid: Some(pid),
        script,
        dir: Some(dir),
        bootstrap: format!("127.0.0.1:{port}"),
    })
}

async fn client(bootstrap: &str) -> Client {
    let mut cfg = ClientConfig::new(bootstrap);
    cfg.request_timeout = Duration::from_secs(20);
    cfg.retries = 30;
    // Pattern subscriptions and the leader's partition-count check refresh at this age.
    cfg.metadata_max_age = Duration::from_secs(2);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match Client::connect(cfg.clone()).await {
            Ok(c) => return c,
            Err(e) if Instant::now() < deadline => {
                eprintln!("connect: {e}");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => panic!("connect to {bootstrap}: {e}"),
        }
    }
}

/// What one member saw: its assignment per the listener, the records, the callbacks.
#[derive(Debug, Default)]
struct View {
    assigned: BTreeSet<TopicPartition>,
    records: Vec<(i32, i64)>,
    events: Vec<String>,
}

struct Recorder(Arc<Mutex<View>>);

impl RebalanceListener for Recorder {
    fn on_partitions_revoked(&mut self, partitions: &[TopicPartition]) {
        let mut v = self.0.lock().unwrap();
        for tp in partitions {
            v.assigned.remove(tp);
        }
        v.events.push(format!("revoked {}", partitions.len()));
    }
    fn on_partitions_assigned(&mut self, partitions: &[TopicPartition]) {
        let mut v = self.0.lock().unwrap();
        v.assigned.extend(partitions.iter().cloned());
        v.events.push(format!("assigned {}", partitions.len()));
    }
    fn on_partitions_lost(&mut self, partitions: &[TopicPartition]) {
        let mut v = self.0.lock().unwrap();
        for tp in partitions {
            v.assigned.remove(tp);
        }
        v.events.push(format!("lost {}", partitions.len()));
    }
}

/// A consumer polling in its own task until told to close.
struct Member {
    view: Arc<Mutex<View>>,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Consumer>,
}

fn group_config(group: &str, protocol: GroupProtocol, strategy: &str) -> ConsumerConfig {
    ConsumerConfig {
        auto_offset_reset: OffsetReset::Earliest,
        fetch_max_wait: Duration::from_millis(100),
        group: GroupConfig {
            group_id: Some(group.into()),
            group_protocol: protocol,
            session_timeout: Duration::from_secs(10),
            heartbeat_interval: Duration::from_millis(300),
            partition_assignment_strategy: if protocol == GroupProtocol::Classic {
                vec![strategy.into()]
            } else {
                GroupConfig::default().partition_assignment_strategy
            },
            group_remote_assignor: (protocol == GroupProtocol::Consumer).then(|| strategy.into()),
            auto_commit_interval: Duration::from_millis(500),
            ..Default::default()
        },
        ..Default::default()
    }
}

async fn spawn_member(bootstrap: &str, topic: &str, cfg: ConsumerConfig) -> Member {
    spawn_subscribed(bootstrap, topic, false, cfg).await
}

/// `topic` is a pattern when `pattern`.
async fn spawn_subscribed(
    bootstrap: &str,
    topic: &str,
    pattern: bool,
    cfg: ConsumerConfig,
) -> Member {
    let view = Arc::new(Mutex::new(View::default()));
    let mut consumer = Consumer::new(client(bootstrap).await, cfg);
    let listener = Some(Box::new(Recorder(view.clone())) as Box<dyn RebalanceListener>);
    if pattern {
        consumer.subscribe_pattern(topic, listener).unwrap();
    } else {
        consumer.subscribe(&[topic], listener).unwrap();
    }
    let (stop, mut stopped) = tokio::sync::oneshot::channel();
    let v = view.clone();
    let task = tokio::spawn(async move {
        loop {
            if stopped.try_recv().is_ok() {
                return consumer;
            }
            match consumer.poll(Duration::from_millis(200)).await {
                Ok(recs) => {
                    let mut v = v.lock().unwrap();
                    v.records
                        .extend(recs.iter().map(|r| (r.partition, r.offset)));
                }
                Err(e) => panic!("poll: {e}"),
            }
        }
    });
    Member { view, stop, task }
}

impl Member {
    fn assigned(&self) -> BTreeSet<i32> {
        self.view
            .lock()
            .unwrap()
            .assigned
            .iter()
            .map(|tp| tp.partition)
            .collect()
    }

    async fn close(self) -> Arc<Mutex<View>> {
        let _ = self.stop.send(());
        let consumer = self.task.await.expect("member task");
        consumer.close().await.expect("close");
        self.view
    }
}

async fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn produce(bootstrap: &str, topic: &str, per_partition: usize) {
    let p = Producer::new(client(bootstrap).await, ProducerConfig::default());
    let mut futs = Vec::new();
    for part in 0..6 {
        for i in 0..per_partition {
            futs.push(p.send(
                topic,
                Some(part),
                None,
                Some(Bytes::from(format!("{part}-{i}"))),
                vec![],
            ));
        }
    }
    for f in futs {
        f.await.expect("produce");
    }
    p.flush().await.unwrap();
}

async fn create_topic(bootstrap: &str, topic: &str) {
    Admin::new(client(bootstrap).await)
        .create_topic(topic, 6, 1, &[], false)
        .await
        .expect("create topic");
}

/// Two members split the topic; after one closes the other owns all 6 partitions and has
/// read every record.
async fn split_then_take_over(
    bootstrap: &str,
    name: &str,
    protocol: GroupProtocol,
    strategy: &str,
) {
    let topic = format!("t-{name}");
    create_topic(bootstrap, &topic).await;
    produce(bootstrap, &topic, 5).await;
    let cfg = group_config(&format!("g-{name}"), protocol, strategy);
    let a = spawn_member(bootstrap, &topic, cfg.clone()).await;
    wait_until(
        &format!("{name}: first member owns 6"),
        Duration::from_secs(30),
        || a.assigned().len() == 6,
    )
    .await;
    let b = spawn_member(bootstrap, &topic, cfg.clone()).await;
    wait_until(&format!("{name}: 3 + 3"), Duration::from_secs(40), || {
        let (x, y) = (a.assigned(), b.assigned());
        x.len() == 3 && y.len() == 3 && x.is_disjoint(&y)
    })
    .await;
    if strategy == "range" {
        // Range gives the lexicographically first member 0-2; which one that is depends on
        // the member ids, so only the shape is checked.
        let x = a.assigned();
        assert!(
            x == BTreeSet::from([0, 1, 2]) || x == BTreeSet::from([3, 4, 5]),
            "{x:?}"
        );
    }
    let a_view = a.close().await;
    wait_until(
        &format!("{name}: survivor owns 6"),
        Duration::from_secs(40),
        || b.assigned().len() == 6,
    )
    .await;
    // Every record was read by someone; committed offsets let the survivor continue where the
    // closed member stopped.
    wait_until(
        &format!("{name}: all 30 records read"),
        Duration::from_secs(30),
        || {
            let mut all: BTreeSet<(i32, i64)> =
                a_view.lock().unwrap().records.iter().copied().collect();
            all.extend(b.view.lock().unwrap().records.iter().copied());
            all.len() == 30
        },
    )
    .await;
    let events = a_view.lock().unwrap().events.clone();
    // The listener calls Java makes: eager revokes everything before rejoining; cooperative
    // revokes only the 3 moving partitions, and every completed rebalance reports what was
    // added (possibly nothing); the last call is the revocation on close.
    let expected: &[&str] = match strategy {
        "range" => &["assigned 6", "revoked 6", "assigned 3", "revoked 3"],
        "cooperative-sticky" => &[
            "assigned 6",
            "revoked 3",
            "assigned 0",
            "assigned 0",
            "revoked 3",
        ],
        _ => &["assigned 6", "revoked 3", "assigned 0", "revoked 3"],
    };
    assert_eq!(events, expected, "{name}: listener calls");
    b.close().await;
}

async fn commits_survive_restart(bootstrap: &str, protocol: GroupProtocol) {
    let name = format!("commit-{protocol:?}").to_lowercase();
    let topic = format!("t-{name}");
    create_topic(bootstrap, &topic).await;
    produce(bootstrap, &topic, 4).await;
    let mut cfg = group_config(&format!("g-{name}"), protocol, "range");
    cfg.group.enable_auto_commit = false;
    let mut c = Consumer::new(client(bootstrap).await, cfg.clone());
    c.subscribe(&[&topic], None).unwrap();
    let mut got = 0;
    let deadline = Instant::now() + Duration::from_secs(40);
    while got < 24 {
        assert!(Instant::now() < deadline, "{name}: read {got} of 24");
        got += c.poll(Duration::from_millis(300)).await.unwrap().len();
    }
    c.commit_sync(None).await.expect("commit_sync");
    let parts: Vec<TopicPartition> = (0..6)
        .map(|p| TopicPartition::new(topic.clone(), p))
        .collect();
    let committed = c.committed(&parts).await.unwrap();
    assert_eq!(committed.len(), 6);
    assert!(committed.values().all(|o| *o == Some(4)), "{committed:?}");
    // An explicit commit of one partition, asynchronously.
    let mut one = BTreeMap::new();
    one.insert(TopicPartition::new(topic.clone(), 0), 3);
    c.commit_async(Some(one))
        .unwrap()
        .await
        .unwrap()
        .expect("commit_async");
    c.close().await.unwrap();

    produce(bootstrap, &topic, 2).await;
    let mut c = Consumer::new(client(bootstrap).await, cfg);
    c.subscribe(&[&topic], None).unwrap();
    let mut recs = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(40);
    // 6 x 2 new records, plus partition 0's offset 3 again (its commit was moved back to 3).
    while recs.len() < 13 {
        assert!(
            Instant::now() < deadline,
            "{name}: read {} of 13",
            recs.len()
        );
        recs.extend(c.poll(Duration::from_millis(300)).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    recs.extend(c.poll(Duration::from_millis(300)).await.unwrap());
    let mut seen: Vec<(i32, i64)> = recs.iter().map(|r| (r.partition, r.offset)).collect();
    seen.sort();
    let mut want: Vec<(i32, i64)> = (0..6).flat_map(|p| [(p, 4), (p, 5)]).collect();
    want.push((0, 3));
    want.sort();
    assert_eq!(seen, want, "{name}");
    c.close().await.unwrap();

    // auto.offset.reset=none in a group without commits: Java's NoOffsetForPartitionException.
    let mut cfg = group_config(&format!("g-{name}-none"), protocol, "range");
    cfg.auto_offset_reset = OffsetReset::None;
    let mut c = Consumer::new(client(bootstrap).await, cfg);
    c.subscribe(&[&topic], None).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let err = loop {
        assert!(
            Instant::now() < deadline,
            "{name}: no error with auto.offset.reset=none"
        );
        match c.poll(Duration::from_millis(300)).await {
            Ok(r) => assert!(r.is_empty(), "{name}: records without an offset"),
            Err(e) => break e,
        }
    };
    assert!(
        matches!(
            err,
            strom_client::Error::Group(strom_client::group::GroupError::NoOffsetForPartition(_))
        ),
        "{name}: {err}"
    );
    c.close().await.unwrap();
}

/// Two static members; one restarts with the same group.instance.id within the session
/// timeout and gets its partitions back while the other keeps its own untouched.
async fn static_member_restart(bootstrap: &str, protocol: GroupProtocol) {
    let topic = format!("t-static-{protocol:?}");
    create_topic(bootstrap, &topic).await;
    let group = format!("g-static-{protocol:?}");
    let cfg = |id: &str| {
        let mut c = group_config(&group, protocol, "range");
        c.group.group_instance_id = Some(id.into());
        c
    };
    let a = spawn_member(bootstrap, &topic, cfg("a")).await;
    wait_until("static: a owns 6", Duration::from_secs(30), || {
        a.assigned().len() == 6
    })
    .await;
    let b = spawn_member(bootstrap, &topic, cfg("b")).await;
    wait_until("static: 3 + 3", Duration::from_secs(40), || {
        a.assigned().len() == 3 && b.assigned().len() == 3
    })
    .await;
    let a_parts = a.assigned();
    let b_events = b.view.lock().unwrap().events.len();
    a.close().await;
    let a2 = spawn_member(bootstrap, &topic, cfg("a")).await;
    wait_until("static: a restarted", Duration::from_secs(30), || {
        a2.assigned().len() == 3
    })
    .await;
    assert_eq!(a2.assigned(), a_parts);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        b.view.lock().unwrap().events.len(),
        b_events,
        "b saw a rebalance"
    );
    assert_eq!(b.assigned().len(), 3);
    a2.close().await;
    b.close().await;
}

/// `subscribe_pattern`: the member gets the partitions of every matching topic (classic: also
/// of a matching topic created later, found at the next metadata refresh).
async fn pattern_subscription(bootstrap: &str, protocol: GroupProtocol) {
    let prefix = format!("pat-{protocol:?}").to_lowercase();
    create_topic(bootstrap, &format!("{prefix}-a")).await;
    create_topic(bootstrap, &format!("other-{prefix}")).await;
    let cfg = group_config(&format!("g-{prefix}"), protocol, "range");
    let m = spawn_subscribed(bootstrap, &format!("{prefix}-.*"), true, cfg).await;
    let topics = |m: &Member| -> BTreeSet<String> {
        m.view
            .lock()
            .unwrap()
            .assigned
            .iter()
            .map(|tp| tp.topic.clone())
            .collect()
    };
    wait_until(
        &format!("{prefix}: pattern matched"),
        Duration::from_secs(30),
        || m.view.lock().unwrap().assigned.len() == 6,
    )
    .await;
    assert_eq!(topics(&m), BTreeSet::from([format!("{prefix}-a")]));
    if protocol == GroupProtocol::Classic {
        create_topic(bootstrap, &format!("{prefix}-b")).await;
        wait_until(
            &format!("{prefix}: new topic joined"),
            Duration::from_secs(30),
            || m.view.lock().unwrap().assigned.len() == 12,
        )
        .await;
    }
    m.close().await;
}

/// A member that stops polling for longer than `max.poll.interval.ms` leaves the group; its
/// next poll reports its partitions lost and rejoins.
async fn poll_timeout(bootstrap: &str, protocol: GroupProtocol) {
    let name = format!("polltimeout-{protocol:?}").to_lowercase();
    let topic = format!("t-{name}");
    create_topic(bootstrap, &topic).await;
    let mut cfg = group_config(&format!("g-{name}"), protocol, "range");
    cfg.group.max_poll_interval = Duration::from_secs(2);
    let view = Arc::new(Mutex::new(View::default()));
    let mut c = Consumer::new(client(bootstrap).await, cfg);
    c.subscribe(&[&topic], Some(Box::new(Recorder(view.clone()))))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while view.lock().unwrap().assigned.len() < 6 {
        assert!(Instant::now() < deadline, "{name}: not assigned");
        c.poll(Duration::from_millis(200)).await.unwrap();
    }
    tokio::time::sleep(Duration::from_secs(4)).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while view.lock().unwrap().events.len() < 3 || view.lock().unwrap().assigned.len() < 6 {
        assert!(
            Instant::now() < deadline,
            "{name}: no rejoin: {:?}",
            view.lock().unwrap().events
        );
        c.poll(Duration::from_millis(200)).await.unwrap();
    }
    let events = view.lock().unwrap().events.clone();
    assert_eq!(events, ["assigned 6", "lost 6", "assigned 6"], "{name}");
    c.close().await.unwrap();
}

/// `strom consume --group`: reads the topic, commits on exit, and a second run continues
/// after the committed offsets.
async fn cli_consume_group(bootstrap: &str) {
    let topic = "t-cli";
    create_topic(bootstrap, topic).await;
    produce(bootstrap, topic, 3).await;
    let run = |extra: &[&str]| {
        let mut args: Vec<String> = [
            "consume",
            "--group",
            "g-cli",
            "--topic",
            topic,
            "--bootstrap-server",
            bootstrap,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        tokio::task::spawn_blocking(move || {
            let out = Command::new(common::strom_bin())
                .args(&args)
                .output()
                .expect("run strom consume");
            let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
            assert!(out.status.success(), "strom {args:?}: {stderr}");
            let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(str::to_string)
                .collect();
            lines.sort();
            lines
        })
    };
    let first = run(&["--from-beginning", "--max-messages", "18"])
        .await
        .unwrap();
    let mut want: Vec<String> = (0..6)
        .flat_map(|p| (0..3).map(move |i| format!("{p}-{i}")))
        .collect();
    want.sort();
    assert_eq!(first, want);
    produce(bootstrap, topic, 1).await;
    // The group's committed offsets, not --from-beginning, decide where the second run starts.
    let second = run(&["--from-beginning", "--timeout-ms", "4000"])
        .await
        .unwrap();
    let mut want: Vec<String> = (0..6).map(|p| format!("{p}-0")).collect();
    want.sort();
    assert_eq!(second, want);
}

/// Every scenario at once against the broker at `bootstrap`.
async fn all_scenarios(bootstrap: &str) {
    let bootstrap = bootstrap.to_string();
    let started = Instant::now();
    tokio::join!(
        split_then_take_over(&bootstrap, "range", GroupProtocol::Classic, "range"),
        split_then_take_over(
            &bootstrap,
            "coop",
            GroupProtocol::Classic,
            "cooperative-sticky"
        ),
        split_then_take_over(&bootstrap, "kip848", GroupProtocol::Consumer, "uniform"),
        commits_survive_restart(&bootstrap, GroupProtocol::Classic),
        commits_survive_restart(&bootstrap, GroupProtocol::Consumer),
        static_member_restart(&bootstrap, GroupProtocol::Classic),
        static_member_restart(&bootstrap, GroupProtocol::Consumer),
        pattern_subscription(&bootstrap, GroupProtocol::Classic),
        pattern_subscription(&bootstrap, GroupProtocol::Consumer),
        cli_consume_group(&bootstrap),
        poll_timeout(&bootstrap, GroupProtocol::Classic),
        poll_timeout(&bootstrap, GroupProtocol::Consumer),
    );
    eprintln!("scenarios took {:?}", started.elapsed());
}

/// The scenarios against Apache Kafka 4.4 (or `$STROM_GROUP_BOOTSTRAP`): the client's own
/// group code is checked against the reference broker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_consumers_against_a_broker() {
    let Some(kafka) = broker() else { return };
    all_scenarios(&kafka.bootstrap).await;
    drop(kafka);
}

/// The same scenarios against a Strom broker (the `strom` binary of this workspace), with the
/// group settings `scripts/kafka-ref.sh` gives Kafka.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_consumers_against_strom() {
    let strom = common::Broker::start_with(&["group.initial.rebalance.delay.ms=0"]);
    all_scenarios(&strom.bootstrap()).await;
    drop(strom);
}

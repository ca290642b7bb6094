//! Classic and KIP-848 members in one group with real librdkafka consumers: a classic
//! consumer (`cooperative-sticky`) owns a 6-partition topic; a `group.protocol=consumer`
//! consumer joins the same group, which is upgraded to a consumer group; both consume, every
//! partition owned by exactly one of them, nothing skipped; then the consumer-protocol member
//! leaves, the group is downgraded and the classic consumer gets every partition back.
//!
//! The scenario runs against a Strom broker and, when Java and Kafka 4.4's jars are there
//! (`scripts/kafka-ref.sh fetch`), against Kafka 4.4 too: the group's type and state as
//! ListGroups reports them at each step, and its members' count as
//! `describeConsumerGroups` sees them, must be the same.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::kafka_ref::{oracle_available, KafkaRef};
use common::Broker;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::Message;
use strom_client::{Admin, Client};

const TOPIC: &str = "migrated";
const GROUP: &str = "migrating-group";
const PARTITIONS: i32 = 6;
const RECORDS: usize = 60;

fn client_config(bootstrap: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap)
        .set("client.id", "strom-it")
        .set("socket.timeout.ms", "20000");
    c
}

fn consumer(bootstrap: &str, settings: &[(&str, &str)]) -> BaseConsumer {
    let mut cfg = client_config(bootstrap);
    cfg.set("group.id", GROUP)
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "true")
        .set("auto.commit.interval.ms", "200");
    for (k, v) in settings {
        cfg.set(*k, *v);
    }
    let c: BaseConsumer = cfg.create().expect("consumer");
    c.subscribe(&[TOPIC]).expect("subscribe");
    c
}

fn owned(c: &BaseConsumer) -> BTreeSet<i32> {
    c.assignment()
        .map(|l| l.elements().iter().map(|e| e.partition()).collect())
        .unwrap_or_default()
}

/// Polls every consumer once, recording what each reads.
fn poll_all(cs: &[&BaseConsumer], seen: &mut BTreeSet<(i32, i64)>) {
    for c in cs {
        if let Some(m) = c.poll(Duration::from_millis(100)) {
            let m = m.expect("consume");
            seen.insert((m.partition(), m.offset()));
        }
    }
}

/// Creates the topic and waits (bounded) until every partition has a leader.
fn create_topic(bootstrap: &str) {
    let admin: AdminClient<DefaultClientContext> =
        client_config(bootstrap).create().expect("admin");
    let t = NewTopic::new(TOPIC, PARTITIONS, TopicReplication::Fixed(1));
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(20)));
    let res = futures_lite_block_on(admin.create_topics([&t], &opts)).expect("CreateTopics");
    assert!(res[0].is_ok(), "{:?}", res[0]);
    let c: BaseConsumer = client_config(bootstrap).create().expect("consumer");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(md) = c.fetch_metadata(Some(TOPIC), Duration::from_secs(5)) {
            if md.topics().iter().any(|t| {
                t.name() == TOPIC
                    && t.partitions().len() == PARTITIONS as usize
                    && t.partitions().iter().all(|p| p.leader() >= 0)
            }) {
                return;
            }
        }
        assert!(Instant::now() < deadline, "topic {TOPIC} not ready");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn futures_lite_block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(f)
}

/// What the admin API shows of the group at one step.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    step: &'static str,
    /// ListGroups' type and state.
    group_type: String,
    state: String,
    /// `describeConsumerGroups`: how many members.
    members: usize,
}

struct Observer {
    rt: tokio::runtime::Runtime,
    admin: Admin,
}

impl Observer {
    fn new(bootstrap: &str) -> Self {
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        let client = rt
            .block_on(Client::connect(strom_client::ClientConfig::new(bootstrap)))
            .expect("connect");
        Self {
            admin: Admin::new(client),
            rt,
        }
    }

    fn look(&self, step: &'static str) -> Seen {
        let listed = self
            .rt
            .block_on(self.admin.list_groups(&[], &[]))
            .expect("list groups");
        let g = listed.iter().find(|g| g.group_id == GROUP);
        let d = self
            .rt
            .block_on(self.admin.describe_consumer_groups(&[GROUP.to_string()]))
            .expect("describe groups");
        let d = d.get(GROUP).and_then(|r| r.as_ref().ok());
        Seen {
            step,
            group_type: g.map(|g| g.group_type.clone()).unwrap_or_default(),
            state: g.map(|g| g.state.clone()).unwrap_or_default(),
            members: d.map_or(0, |d| d.members.len()),
        }
    }

    /// Looks until the group shows `want` (bounded), keeping consumers polled meanwhile;
    /// returns the last look either way (the comparison with Kafka reports a difference).
    fn settle(
        &self,
        step: &'static str,
        want: impl Fn(&Seen) -> bool,
        cs: &[&BaseConsumer],
        seen: &mut BTreeSet<(i32, i64)>,
    ) -> Seen {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let s = self.look(step);
            if want(&s) || Instant::now() > deadline {
                return s;
            }
            for _ in 0..5 {
                poll_all(cs, seen);
            }
        }
    }
}

/// The scenario against the broker at `bootstrap`: what the group looked like at each step.
fn scenario(bootstrap: &str) -> Vec<Seen> {
    create_topic(bootstrap);
    let p: ThreadedProducer<DefaultProducerContext> =
        client_config(bootstrap).create().expect("producer");
    for i in 0..RECORDS {
        let v = format!("v{i}");
        p.send(
            BaseRecord::<(), String>::to(TOPIC)
                .partition(i as i32 % PARTITIONS)
                .payload(&v),
        )
        .map_err(|(e, _)| e)
        .unwrap();
    }
    assert_eq!(p.flush(Duration::from_secs(30)), Ok(()));
    drop(p);
    let all: BTreeSet<i32> = (0..PARTITIONS).collect();
    let obs = Observer::new(bootstrap);
    let mut steps = Vec::new();

    // 1. The classic consumer alone.
    let classic = consumer(
        bootstrap,
        &[
            ("partition.assignment.strategy", "cooperative-sticky"),
            ("session.timeout.ms", "10000"),
        ],
    );
    let mut seen = BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while owned(&classic) != all {
        assert!(Instant::now() < deadline, "classic: {:?}", owned(&classic));
        poll_all(&[&classic], &mut seen);
    }
    steps.push(obs.settle(
        "classic alone",
        |s| s.state == "Stable",
        &[&classic],
        &mut seen,
    ));

    // 2. A KIP-848 consumer joins: both end up with a share, never the same partition.
    let modern = consumer(bootstrap, &[("group.protocol", "consumer")]);
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        poll_all(&[&classic, &modern], &mut seen);
        let (a, b) = (owned(&classic), owned(&modern));
        assert!(
            a.is_disjoint(&b),
            "partitions owned twice: classic {a:?}, consumer {b:?}"
        );
        if !a.is_empty() && !b.is_empty() && a.union(&b).count() == all.len() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no shared assignment: classic {a:?}, consumer {b:?}"
        );
    }
    // Both consume until every record was read by someone.
    let deadline = Instant::now() + Duration::from_secs(60);
    while seen.len() < RECORDS {
        assert!(
            Instant::now() < deadline,
            "read {} of {RECORDS}",
            seen.len()
        );
        poll_all(&[&classic, &modern], &mut seen);
        assert!(owned(&classic).is_disjoint(&owned(&modern)));
    }
    for part in 0..PARTITIONS {
        let n = seen.iter().filter(|(p, _)| *p == part).count();
        assert_eq!(n, RECORDS / PARTITIONS as usize, "partition {part}");
    }
    steps.push(obs.settle(
        "classic and KIP-848 members",
        |s| s.state == "Stable" && s.members == 2,
        &[&classic, &modern],
        &mut seen,
    ));

    // 3. The consumer-protocol member leaves: the group is downgraded and the classic
    // consumer gets everything.
    modern.unsubscribe();
    drop(modern);
    let deadline = Instant::now() + Duration::from_secs(90);
    while owned(&classic) != all {
        assert!(Instant::now() < deadline, "classic: {:?}", owned(&classic));
        poll_all(&[&classic], &mut seen);
    }
    steps.push(obs.settle(
        "classic member left alone",
        |s| s.state == "Stable" && s.members == 1,
        &[&classic],
        &mut seen,
    ));
    drop(classic);
    steps
}

#[test]
fn a_classic_group_is_upgraded_and_downgraded_with_real_consumers() {
    let broker = Broker::start_with(&["group.initial.rebalance.delay.ms=0"]);
    let strom = scenario(&broker.bootstrap());
    drop(broker);
    assert_eq!(
        strom
            .iter()
            .map(|s| (s.group_type.as_str(), s.members))
            .collect::<Vec<_>>(),
        vec![("classic", 1), ("consumer", 2), ("classic", 1)],
        "{strom:#?}"
    );
    match oracle_available() {
        Ok(()) => {
            let kafka = KafkaRef::start();
            let oracle = scenario(&format!("127.0.0.1:{}", kafka.port));
            drop(kafka);
            eprintln!("strom: {strom:?}\nkafka: {oracle:?}");
            assert_eq!(strom, oracle, "Strom (left) and Kafka 4.4 (right) differ");
        }
        Err(why) if std::env::var_os("CI").is_some() => panic!("{why}"),
        Err(why) => eprintln!("SKIPPED the Kafka 4.4 comparison: {why}"),
    }
}

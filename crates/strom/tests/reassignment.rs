//! Partition reassignment in cluster mode: AlterPartitionReassignments moves a partition's
//! replicas, ListPartitionReassignments shows it while it runs, and the completed move leaves
//! the new replicas with the whole log and the removed one without its partition dir.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{block_on, free_port};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Message, Offset, TopicPartitionList};
use strom_protocol::kafka::messages::alter_partition_reassignments_request::{
    ReassignablePartition, ReassignableTopic,
};
use strom_protocol::kafka::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, ApiKey, BrokerId,
    ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse, MetadataRequest,
    MetadataResponse,
};
use strom_protocol::kafka::protocol::StrBytes;

struct Node {
    id: i32,
    port: u16,
    child: Option<Child>,
}

struct Cluster {
    dir: tempfile::TempDir,
    nodes: Vec<Node>,
    quorum: String,
    controller_ports: BTreeMap<i32, u16>,
    settings: Vec<String>,
}

#[allow(dead_code)]
impl Cluster {
    fn start(n: i32) -> Cluster {
        Self::start_with(n, &[])
    }

    fn start_with(n: i32, settings: &[&str]) -> Cluster {
        let controller_ports: BTreeMap<i32, u16> = (1..=n).map(|i| (i, free_port())).collect();
        let quorum = controller_ports
            .iter()
            .map(|(i, p)| format!("{i}@127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut c = Cluster {
            dir: tempfile::tempdir().unwrap(),
            nodes: (1..=n)
                .map(|id| Node {
                    id,
                    port: free_port(),
                    child: None,
                })
                .collect(),
            quorum,
            controller_ports,
            settings: settings.iter().map(|s| s.to_string()).collect(),
        };
        for i in 0..c.nodes.len() {
            c.spawn(i);
        }
        for i in 0..c.nodes.len() {
            c.wait_serving(i);
        }
        c
    }

    fn data_dir(&self, id: i32) -> PathBuf {
        self.dir.path().join(format!("node-{id}"))
    }

    fn spawn(&mut self, i: usize) {
        let node = &self.nodes[i];
        let dir = self.data_dir(node.id);
        std::fs::create_dir_all(&dir).unwrap();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("server.log"))
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_strom"))
            .arg("server")
            .args(["--node-id", &node.id.to_string()])
            .args(["--listen", &format!("127.0.0.1:{}", node.port)])
            .args([
                "--controller-listen",
                &format!("127.0.0.1:{}", self.controller_ports[&node.id]),
            ])
            .args(["--controller-quorum", &self.quorum])
            .arg("--data-dir")
            .arg(&dir)
            .args(self.settings.iter().flat_map(|s| ["--set", s.as_str()]))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn strom server");
        self.nodes[i].child = Some(child);
    }

    fn wait_serving(&self, i: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let addr = format!("127.0.0.1:{}", self.nodes[i].port);
        while std::net::TcpStream::connect(&addr).is_err() {
            assert!(
                Instant::now() < deadline,
                "node {} never listened",
                self.nodes[i].id
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn kill(&mut self, id: i32) {
        let node = self.nodes.iter_mut().find(|n| n.id == id).unwrap();
        if let Some(mut c) = node.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn restart(&mut self, id: i32) {
        let i = self.nodes.iter().position(|n| n.id == id).unwrap();
        self.spawn(i);
        self.wait_serving(i);
    }

    fn bootstrap(&self, ids: &[i32]) -> String {
        self.nodes
            .iter()
            .filter(|n| ids.contains(&n.id))
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect::<Vec<_>>()
            .join(",")
    }

    fn config(&self, ids: &[i32]) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", self.bootstrap(ids))
            .set("socket.timeout.ms", "10000");
        c
    }

    fn logs(&self) -> String {
        self.nodes
            .iter()
            .map(|n| {
                let log = std::fs::read_to_string(self.data_dir(n.id).join("server.log"))
                    .unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(40).collect();
                format!(
                    "--- node {} ---\n{}",
                    n.id,
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.logs());
        }
        for n in &mut self.nodes {
            if let Some(mut c) = n.child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

fn produce(c: &Cluster, topic: &str, n: usize) {
    let p: ThreadedProducer<DefaultProducerContext> = c
        .config(&[1, 2, 3])
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .create()
        .unwrap();
    for i in 0..n {
        let key = format!("k{i}");
        let value = format!("v{i}");
        let mut rec = BaseRecord::<str, str>::to(topic).key(&key).payload(&value);
        loop {
            match p.send(rec) {
                Ok(()) => break,
                Err((_, back)) => {
                    rec = back;
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }
    }
    assert_eq!(p.flush(Duration::from_secs(60)), Ok(()));
    assert_eq!(p.in_flight_count(), 0);
}

/// An assign-only consumer: no offset commits, so closing it does not wait for a group
/// coordinator (groups are not served yet).
fn consumer_config(c: &Cluster, via: &[i32]) -> ClientConfig {
    let mut cfg = c.config(via);
    cfg.set("group.id", "unused")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("fetch.wait.max.ms", "100");
    cfg
}

/// Every record of `topic` from every partition, read through `via`.
fn consume_count(c: &Cluster, via: &[i32], topic: &str, partitions: i32, expect: usize) -> usize {
    let consumer: BaseConsumer = consumer_config(c, via).create().unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&tpl).unwrap();
    let mut seen = std::collections::HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while seen.len() < expect && Instant::now() < deadline {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
            seen.insert((m.partition(), m.offset(), m.payload().map(|v| v.to_vec())));
        }
    }
    seen.len()
}

fn eventually<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn log_bytes(c: &Cluster, node: i32, topic: &str) -> Vec<u8> {
    std::fs::read(
        c.data_dir(node)
            .join(format!("{topic}-0"))
            .join("00000000000000000000.log"),
    )
    .unwrap_or_default()
}

const SETTINGS: &[&str] = &[
    "broker.session.timeout.ms=3000",
    "broker.heartbeat.interval.ms=500",
    "replica.fetch.wait.max.ms=100",
];

fn port(c: &Cluster, node: i32) -> u16 {
    c.nodes.iter().find(|n| n.id == node).unwrap().port
}

/// (replicas, isr, leader) of partition 0 of `topic` in a raw Metadata v12 answer from `node`.
fn partition_state(c: &Cluster, node: i32, topic: &str) -> Option<(Vec<i32>, Vec<i32>, i32)> {
    use strom_protocol::kafka::messages::metadata_request::MetadataRequestTopic;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port(c, node))).ok()?;
    let resp: MetadataResponse = common::raw_call(
        &mut s,
        ApiKey::Metadata,
        12,
        &MetadataRequest::default().with_topics(Some(vec![MetadataRequestTopic::default()
            .with_name(Some(StrBytes::from_string(topic.to_string()).into()))])),
    );
    let p = resp
        .topics
        .first()?
        .partitions
        .iter()
        .find(|p| p.partition_index == 0)?;
    Some((
        p.replica_nodes.iter().map(|b| b.0).collect(),
        p.isr_nodes.iter().map(|b| b.0).collect(),
        p.leader_id.0,
    ))
}

fn reassign(
    c: &Cluster,
    node: i32,
    topic: &str,
    partition: i32,
    target: Option<&[i32]>,
) -> AlterPartitionReassignmentsResponse {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port(c, node))).unwrap();
    common::raw_call(
        &mut s,
        ApiKey::AlterPartitionReassignments,
        0,
        &AlterPartitionReassignmentsRequest::default()
            .with_timeout_ms(10_000)
            .with_topics(vec![ReassignableTopic::default()
                .with_name(StrBytes::from_string(topic.to_string()).into())
                .with_partitions(vec![ReassignablePartition::default()
                    .with_partition_index(partition)
                    .with_replicas(
                        target.map(|t| t.iter().map(|&b| BrokerId(b)).collect()),
                    )])]),
    )
}

fn list_reassignments(c: &Cluster, node: i32) -> ListPartitionReassignmentsResponse {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port(c, node))).unwrap();
    common::raw_call(
        &mut s,
        ApiKey::ListPartitionReassignments,
        0,
        &ListPartitionReassignmentsRequest::default()
            .with_timeout_ms(10_000)
            .with_topics(None),
    )
}

fn partition_error(r: &AlterPartitionReassignmentsResponse) -> i16 {
    assert_eq!(r.error_code, 0, "{r:?}");
    r.responses[0].partitions[0].error_code
}

#[test]
fn reassignment_moves_a_partition_to_new_replicas() {
    let c = Cluster::start_with(3, SETTINGS);
    let topic = "moved";
    eventually("all brokers registered everywhere", || {
        (1..=3)
            .all(|n| {
                std::net::TcpStream::connect(("127.0.0.1", port(&c, n)))
                    .ok()
                    .is_some_and(|mut s| {
                        let r: MetadataResponse = common::raw_call(
                            &mut s,
                            ApiKey::Metadata,
                            12,
                            &MetadataRequest::default().with_topics(Some(vec![])),
                        );
                        r.brokers.len() == 3 && r.controller_id.0 > 0
                    })
            })
            .then_some(())
    });
    let admin: AdminClient<DefaultClientContext> = c.config(&[1, 2, 3]).create().unwrap();
    let assignment: &[&[i32]] = &[&[1, 2]];
    let new = NewTopic::new(topic, 1, TopicReplication::Variable(assignment));
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    eventually("topic created", || {
        block_on(admin.create_topics([&new], &opts))
            .ok()
            .filter(|r| r[0].is_ok())
    });
    eventually("topic on every node", || {
        (1..=3)
            .all(|n| {
                partition_state(&c, n, topic).is_some_and(|(r, isr, _)| {
                    r == vec![1, 2] && {
                        let mut i = isr.clone();
                        i.sort_unstable();
                        i == vec![1, 2]
                    }
                })
            })
            .then_some(())
    });
    produce(&c, topic, 500);

    // Errors first: unknown partition, bad targets, nothing to cancel.
    assert_eq!(partition_error(&reassign(&c, 1, "nope", 0, Some(&[1]))), 3);
    assert_eq!(partition_error(&reassign(&c, 1, topic, 7, Some(&[1]))), 3);
    assert_eq!(
        partition_error(&reassign(&c, 2, topic, 0, Some(&[2, 9]))),
        39
    );
    assert_eq!(
        partition_error(&reassign(&c, 2, topic, 0, Some(&[2, 2]))),
        39
    );
    assert_eq!(partition_error(&reassign(&c, 3, topic, 0, Some(&[]))), 39);
    assert_eq!(partition_error(&reassign(&c, 3, topic, 0, None)), 85);
    assert!(list_reassignments(&c, 1).topics.is_empty());

    // The move, sent to every node in turn (standbys forward it).
    let r = reassign(&c, 3, topic, 0, Some(&[2, 3]));
    assert_eq!(partition_error(&r), 0, "{r:?}");
    // In progress (replicas [2,3,1], adding [3], removing [1]) or already done.
    let l = list_reassignments(&c, 2);
    assert_eq!(l.error_code, 0);
    if let Some(t) = l.topics.first() {
        let p = &t.partitions[0];
        assert_eq!(
            p.replicas.iter().map(|b| b.0).collect::<Vec<_>>(),
            vec![2, 3, 1]
        );
        assert_eq!(
            p.adding_replicas.iter().map(|b| b.0).collect::<Vec<_>>(),
            vec![3]
        );
        assert_eq!(
            p.removing_replicas.iter().map(|b| b.0).collect::<Vec<_>>(),
            vec![1]
        );
    }

    for n in 1..=3 {
        eventually("reassignment complete", || {
            partition_state(&c, n, topic).and_then(|(r, isr, leader)| {
                (r == vec![2, 3]
                    && !isr.is_empty()
                    && isr.iter().all(|b| [2, 3].contains(b))
                    && [2, 3].contains(&leader))
                .then_some(())
            })
        });
    }
    for n in 1..=3 {
        assert!(list_reassignments(&c, n).topics.is_empty());
    }
    eventually("broker 1 drops its copy", || {
        (!c.data_dir(1).join(format!("{topic}-0")).exists()).then_some(())
    });
    eventually("broker 3 has broker 2's log", || {
        let (a, b) = (log_bytes(&c, 2, topic), log_bytes(&c, 3, topic));
        (!a.is_empty() && a == b).then_some(())
    });
    assert_eq!(consume_count(&c, &[2, 3], topic, 1, 500), 500);
    // More records after the move reach both new replicas.
    produce(&c, topic, 100);
    assert_eq!(consume_count(&c, &[2, 3], topic, 1, 600), 600);
    eventually("ISR [2,3]", || {
        partition_state(&c, 2, topic).and_then(|(_, mut isr, _)| {
            isr.sort_unstable();
            (isr == vec![2, 3]).then_some(())
        })
    });

    // A cancelled reassignment goes back to the replicas it started from.
    assert_eq!(
        partition_error(&reassign(&c, 1, topic, 0, Some(&[3, 1]))),
        0
    );
    let r = reassign(&c, 1, topic, 0, None);
    let code = partition_error(&r);
    // 85 if the move to [3,1] had already finished.
    assert!(code == 0 || code == 85, "{r:?}");
    if code == 0 {
        eventually("cancel applied", || {
            partition_state(&c, 1, topic).and_then(|(mut r, _, _)| {
                // Kafka's revert keeps the reassignment's order: [3, 2].
                r.sort_unstable();
                (r == vec![2, 3]).then_some(())
            })
        });
        assert!(list_reassignments(&c, 2).topics.is_empty());
    }
}

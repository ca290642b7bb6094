//! A multi-node cluster of real `strom server` processes on loopback (each a Raft controller
//! voter and a broker), started through `strom_launcher`, shared by the cluster, election and
//! reassignment tests. `Drop` kills every node, and a panicking test prints each node's log
//! tail.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Child;
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Message, Offset, TopicPartitionList};

use strom_launcher::{LaunchOptions, LocalCluster};

use super::block_on;

pub struct Node {
    pub id: i32,
    pub port: u16,
}

/// A cluster of `strom server` processes started by `strom_launcher` (the launcher of `strom
/// dev-cluster` and the chaos harness), in a temporary directory.
pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub nodes: Vec<Node>,
    pub controller_ports: BTreeMap<i32, u16>,
    pub launcher: LocalCluster,
}

impl Cluster {
    pub fn start(n: i32) -> Cluster {
        Self::start_with(n, &[])
    }

    pub fn start_with(n: i32, settings: &[&str]) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let opts = LaunchOptions::new(env!("CARGO_BIN_EXE_strom"), dir.path(), n as u16)
            .set(&settings.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        let launcher = LocalCluster::launch(opts).expect("starting the cluster");
        let c = Cluster {
            nodes: (1..=n)
                .map(|id| Node {
                    id,
                    port: launcher.broker_port(id),
                })
                .collect(),
            controller_ports: (1..=n)
                .map(|id| (id, launcher.controller_port(id)))
                .collect(),
            launcher,
            dir,
        };
        for id in 1..=n {
            c.wait_serving(id);
        }
        c
    }

    pub fn data_dir(&self, id: i32) -> PathBuf {
        self.launcher.node_dir(id)
    }

    /// Waits until node `id` accepts connections on its broker listener.
    pub fn wait_serving(&self, id: i32) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let addr = self.launcher.broker_addr(id);
        while std::net::TcpStream::connect(&addr).is_err() {
            assert!(Instant::now() < deadline, "node {id} never listened");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The process id of node `id`, while it runs.
    pub fn pid(&self, id: i32) -> u32 {
        self.launcher
            .procs
            .pid(id)
            .unwrap_or_else(|| panic!("node {id} is not running"))
    }

    /// Node `id`'s process, no longer killed by the cluster (the test stops and waits for it).
    pub fn take_process(&mut self, id: i32) -> Child {
        self.launcher
            .procs
            .take(id)
            .unwrap_or_else(|| panic!("node {id} is not running"))
    }

    /// SIGKILLs node `id` (nothing happens if it is not running).
    pub fn kill(&mut self, id: i32) {
        let _ = self.launcher.procs.kill(id);
    }

    /// Starts node `id` again on its data and waits until it serves.
    pub fn restart(&mut self, id: i32) {
        self.launcher.spawn(id).expect("restarting a node");
        self.wait_serving(id);
    }

    pub fn bootstrap(&self, ids: &[i32]) -> String {
        self.nodes
            .iter()
            .filter(|n| ids.contains(&n.id))
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn config(&self, ids: &[i32]) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", self.bootstrap(ids))
            .set("socket.timeout.ms", "10000");
        c
    }

    pub fn logs(&self) -> String {
        self.launcher.log_tails(40)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.logs());
        }
        // The launcher SIGKILLs every node it still runs when it is dropped.
    }
}

/// (brokers, controller id, partition -> leader) as `node` reports them.
pub fn metadata(c: &Cluster, node: i32, topic: &str) -> (Vec<i32>, i32, BTreeMap<i32, i32>) {
    let consumer: BaseConsumer = c.config(&[node]).create().unwrap();
    let md = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .expect("metadata");
    let brokers = md.brokers().iter().map(|b| b.id()).collect();
    let leaders = md
        .topics()
        .iter()
        .flat_map(|t| t.partitions().iter().map(|p| (p.id(), p.leader())))
        .collect();
    let controller = admin_controller(c, node);
    (brokers, controller, leaders)
}

/// The controller id in a raw Metadata v1+ answer (rdkafka does not expose it).
pub fn admin_controller(c: &Cluster, node: i32) -> i32 {
    use strom_protocol::kafka::messages::{ApiKey, MetadataRequest, MetadataResponse};
    let port = c.nodes.iter().find(|n| n.id == node).unwrap().port;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let resp: MetadataResponse = super::raw_call(
        &mut s,
        ApiKey::Metadata,
        12,
        &MetadataRequest::default().with_topics(Some(vec![])),
    );
    resp.controller_id.0
}

/// The offline replicas (fenced or unregistered brokers) of `topic`-0 in `node`'s image, sorted,
/// from a raw Metadata v12 answer (rdkafka does not expose them).
pub fn offline_replicas(c: &Cluster, node: i32, topic: &str) -> Vec<i32> {
    let port = c.nodes.iter().find(|n| n.id == node).unwrap().port;
    let (_, mut out) = super::partition0_leader_and_offline(("127.0.0.1", port), topic)
        .expect("topic in metadata");
    out.sort_unstable();
    out
}

pub fn create_topic(
    c: &Cluster,
    via: &[i32],
    name: &str,
    partitions: i32,
    rf: i32,
) -> Result<(), String> {
    let admin: AdminClient<DefaultClientContext> = c.config(via).create().unwrap();
    let topic = NewTopic::new(name, partitions, TopicReplication::Fixed(rf));
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let r = block_on(admin.create_topics([&topic], &opts)).map_err(|e| e.to_string())?;
    r.into_iter()
        .next()
        .unwrap()
        .map(|_| ())
        .map_err(|(_, code)| format!("{code:?}"))
}

/// [`create_topic`] with a replication factor the cluster can meet once every node is
/// registered and unfenced: INVALID_REPLICATION_FACTOR (a node not yet unfenced in the active
/// controller's view, e.g. right after start-up on a loaded machine) is asked again, up to 30 s.
pub fn create_topic_on_all(c: &Cluster, via: &[i32], name: &str, partitions: i32, rf: i32) {
    let mut asked = false;
    eventually(
        &format!("{name} created with replication factor {rf}"),
        || {
            let r = create_topic(c, via, name, partitions, rf);
            let again = std::mem::replace(&mut asked, true);
            match r {
                Ok(()) => Some(()),
                // An earlier try that failed on the client's side may have created it.
                Err(e) if again && e.contains("TopicAlreadyExists") => Some(()),
                Err(e) if e.contains("InvalidReplicationFactor") => None,
                Err(e) => panic!("create {name}: {e}"),
            }
        },
    )
}

pub fn produce(c: &Cluster, topic: &str, n: usize) {
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
pub fn consumer_config(c: &Cluster, via: &[i32]) -> ClientConfig {
    let mut cfg = c.config(via);
    cfg.set("group.id", "unused")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("fetch.wait.max.ms", "100");
    cfg
}

/// Every record of `topic` from every partition, read through `via`.
pub fn consume_count(
    c: &Cluster,
    via: &[i32],
    topic: &str,
    partitions: i32,
    expect: usize,
) -> usize {
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

pub fn eventually<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The log of `topic`-0 on `node`, up to `hw` bytes worth of whole batches.
pub fn log_bytes(c: &Cluster, node: i32, topic: &str) -> Vec<u8> {
    std::fs::read(
        c.data_dir(node)
            .join(format!("{topic}-0"))
            .join("00000000000000000000.log"),
    )
    .unwrap_or_default()
}

/// The ISR of `topic`-0 as `node` reports it.
pub fn isr(c: &Cluster, node: i32, topic: &str) -> Vec<i32> {
    let consumer: BaseConsumer = c.config(&[node]).create().unwrap();
    let md = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .expect("metadata");
    // Empty while `node` does not know the topic yet (callers poll until it does).
    let mut isr: Vec<i32> = md
        .topics()
        .first()
        .and_then(|t| t.partitions().first())
        .map(|p| p.isr().to_vec())
        .unwrap_or_default();
    isr.sort_unstable();
    isr
}

/// `n` records with acks=all to partition 0 of `topic`, all acknowledged.
pub fn produce_to(c: &Cluster, topic: &str, n: usize) {
    let p: ThreadedProducer<DefaultProducerContext> = c
        .config(&[1, 2, 3])
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("message.timeout.ms", "60000")
        .create()
        .unwrap();
    for i in 0..n {
        let v = format!("v{i}");
        p.send(BaseRecord::<str, str>::to(topic).payload(&v).partition(0))
            .map_err(|(e, _)| e)
            .unwrap();
    }
    assert_eq!(p.flush(Duration::from_secs(60)), Ok(()));
}

/// Waits until every one of the `n` nodes lists all `n` brokers in its Metadata.
pub fn wait_all_registered(c: &Cluster, n: i32) {
    eventually("all brokers registered", || {
        (1..=n)
            .all(|node| metadata(c, node, "").0.len() == n as usize)
            .then_some(())
    });
}

/// A partition's registration as a Metadata answer reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    pub leader: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
}

/// The client port of node `node`.
pub fn port_of(c: &Cluster, node: i32) -> u16 {
    c.nodes.iter().find(|n| n.id == node).unwrap().port
}

/// partition -> registration, over the topics `resp` answers without an error.
pub fn registrations(
    resp: &strom_protocol::kafka::messages::MetadataResponse,
) -> BTreeMap<i32, Part> {
    resp.topics
        .iter()
        .filter(|t| t.error_code == 0)
        .flat_map(|t| {
            t.partitions.iter().map(|p| {
                (
                    p.partition_index,
                    Part {
                        leader: p.leader_id.0,
                        replicas: p.replica_nodes.iter().map(|b| b.0).collect(),
                        isr: p.isr_nodes.iter().map(|b| b.0).collect(),
                    },
                )
            })
        })
        .collect()
}

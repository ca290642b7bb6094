//! Plumbing shared by the assignor differential tests (`assignor_diff.rs`, the sticky tests):
//! a generator of random group inputs and the Java oracle (`AssignorOracle.java`), which runs
//! kafka-clients 4.4's own assignor classes on the same inputs. Include it with
//! `#[path = "assignor_oracle/mod.rs"] mod assignor_oracle;`.
//!
//! The oracle is compiled with `javac` into a temp dir and kept running for the whole test; one
//! JSON line goes in per case and one comes out, so thousands of cases cost one JVM start.
//! Without `java`/`javac` or the jars (`.cache/kafka-4.4/libs`, put there by
//! `make kafka-ref-fetch`) the test fails when `CI` is set and is skipped otherwise.

#![allow(dead_code)] // Each including test uses its own part of it.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use base64::Engine;
use bytes::Bytes;
use rand::rngs::StdRng;
use rand::seq::{IndexedRandom, SliceRandom};
use rand::Rng;
use serde_json::{json, Value};
use strom_client::assignor::{
    Assignment, AssignorError, Cluster, PartitionAssignor, PartitionInfo, Subscription,
    TopicPartition,
};

pub const RANGE: &str = "org.apache.kafka.clients.consumer.RangeAssignor";
pub const ROUND_ROBIN: &str = "org.apache.kafka.clients.consumer.RoundRobinAssignor";
pub const STICKY: &str = "org.apache.kafka.clients.consumer.StickyAssignor";
pub const COOPERATIVE_STICKY: &str = "org.apache.kafka.clients.consumer.CooperativeStickyAssignor";

/// One assignor input: what the group leader has when it runs the assignor.
#[derive(Debug, Clone)]
pub struct Case {
    pub cluster: Cluster,
    pub subscriptions: BTreeMap<String, Subscription>,
}

/// A running `AssignorOracle`.
pub struct Oracle {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    // Holds the compiled class until the JVM is gone.
    _classes: tempfile::TempDir,
}

fn kafka_libs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.cache/kafka-4.4/libs")
}

/// Fails the test under CI, where the oracle must run; elsewhere says why it is skipped.
fn unavailable(why: String) -> Option<Oracle> {
    if std::env::var_os("CI").is_some() {
        panic!("assignor oracle unavailable under CI: {why}");
    }
    eprintln!("SKIPPED: assignor differential test needs the Java oracle: {why}");
    None
}

impl Oracle {
    /// Compiles and starts the oracle; `None` (test skipped) when Java or the jars are missing
    /// outside CI.
    pub fn start() -> Option<Oracle> {
        let libs = kafka_libs();
        if !libs.join("kafka-clients-4.4.0.jar").is_file() {
            return unavailable(format!(
                "no kafka-clients-4.4.0.jar in {} (run `make kafka-ref-fetch`)",
                libs.display()
            ));
        }
        let classes = tempfile::tempdir().expect("temp dir for the oracle's classes");
        let source =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/assignor_oracle/AssignorOracle.java");
        let jars = format!("{}/*", libs.display());
        let javac = Command::new("javac")
            .arg("-d")
            .arg(classes.path())
            .arg("-cp")
            .arg(&jars)
            .arg(&source)
            .output();
        match javac {
            Err(e) => return unavailable(format!("cannot run javac: {e}")),
            Ok(out) if !out.status.success() => panic!(
                "javac failed on {}:\n{}",
                source.display(),
                String::from_utf8_lossy(&out.stderr)
            ),
            Ok(_) => {}
        }
        let classpath = format!("{}:{jars}", classes.path().display());
        let mut child = match Command::new("java")
            .arg("-cp")
            .arg(classpath)
            .arg("AssignorOracle")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            // The assignors log through slf4j without a binding; nothing there is needed.
            .stderr(Stdio::null())
            .spawn()
        {
            Ok(c) => c,
            Err(e) => return unavailable(format!("cannot run java: {e}")),
        };
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        Some(Oracle {
            child,
            stdin,
            stdout,
            _classes: classes,
        })
    }

    /// Java's assignment for `case` by the assignor class `class` (e.g. [`RANGE`]), or the
    /// exception Java threw.
    pub fn assign(
        &mut self,
        class: &str,
        case: &Case,
    ) -> Result<BTreeMap<String, Assignment>, String> {
        let request = request_json(class, case);
        writeln!(self.stdin, "{request}").expect("write to the oracle");
        self.stdin.flush().expect("flush to the oracle");
        let mut line = String::new();
        let n = self
            .stdout
            .read_line(&mut line)
            .expect("read from the oracle");
        assert!(n > 0, "the oracle exited on input {request}");
        let response: Value = serde_json::from_str(&line).expect("oracle's JSON");
        if let Some(err) = response.get("error") {
            return Err(err.as_str().unwrap_or_default().to_string());
        }
        let mut result = BTreeMap::new();
        for (member, a) in response["assignment"]
            .as_object()
            .expect("assignment object")
        {
            let partitions = a["partitions"]
                .as_array()
                .expect("partitions array")
                .iter()
                .map(|tp| {
                    TopicPartition::new(
                        tp["topic"].as_str().expect("topic"),
                        tp["partition"].as_i64().expect("partition") as i32,
                    )
                })
                .collect();
            let user_data = a["user_data"].as_str().map(|s| {
                Bytes::from(
                    base64::engine::general_purpose::STANDARD
                        .decode(s)
                        .expect("oracle's base64"),
                )
            });
            result.insert(
                member.clone(),
                Assignment {
                    partitions,
                    user_data,
                },
            );
        }
        Ok(result)
    }
}

impl Drop for Oracle {
    fn drop(&mut self) {
        // Our own child only.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tp_json(tp: &TopicPartition) -> Value {
    json!({"topic": tp.topic, "partition": tp.partition})
}

/// The oracle's request line for `case`. Members go in `BTreeMap` order: Java inserts them
/// into its `HashMap` in that order, which is the order the Rust assignors assume.
pub fn request_json(class: &str, case: &Case) -> Value {
    let b64 = |b: &Bytes| base64::engine::general_purpose::STANDARD.encode(b);
    let topics: Vec<Value> = case
        .cluster
        .topics
        .iter()
        .map(|(name, parts)| {
            json!({
                "name": name,
                "partitions": parts.iter().map(|p| json!({
                    "partition": p.partition,
                    "replica_racks": p.replica_racks,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    let members: Vec<Value> = case
        .subscriptions
        .iter()
        .map(|(id, s)| {
            json!({
                "member_id": id,
                "topics": s.topics,
                "owned_partitions": s.owned_partitions.iter().map(tp_json).collect::<Vec<_>>(),
                "generation_id": s.generation_id,
                "rack_id": s.rack_id,
                "group_instance_id": s.group_instance_id,
                "user_data": s.user_data.as_ref().map(b64),
            })
        })
        .collect();
    json!({"assignor": class, "topics": topics, "members": members})
}

/// What the generator varies.
#[derive(Debug, Clone)]
pub struct GenOptions {
    pub max_members: usize,
    pub max_topics: usize,
    pub max_partitions: i32,
    /// Give members owned partitions and generations (a random earlier assignment, with some
    /// partitions claimed twice and some generations stale), for the sticky assignors.
    pub owned: bool,
}

impl Default for GenOptions {
    fn default() -> Self {
        Self {
            max_members: 12,
            max_topics: 5,
            max_partitions: 30,
            owned: false,
        }
    }
}

const RACKS: [&str; 4] = ["rack-a", "rack-b", "rack-c", "rack-d"];

/// A random group input. Names vary in length and content so that Java's `HashMap` orders
/// (which some assignors' output depends on) differ from sorted order.
pub fn gen_case(rng: &mut StdRng, opts: &GenOptions) -> Case {
    let n_topics = rng.random_range(1..=opts.max_topics);
    let mut topic_names: Vec<String> = Vec::new();
    while topic_names.len() < n_topics {
        let name = match rng.random_range(0..3) {
            0 => format!("t{}", rng.random_range(0..100)),
            1 => format!("topic-{}", rng.random_range(0..10_000)),
            _ => format!(
                "orders.{}.v{}",
                rng.random_range(0..50),
                rng.random_range(0..5)
            ),
        };
        if !topic_names.contains(&name) {
            topic_names.push(name);
        }
    }

    // Racks: none, the same everywhere (every partition in every rack), or random.
    let rack_mode = rng.random_range(0..4);
    let n_racks = rng.random_range(1..=RACKS.len());
    let racks = &RACKS[..n_racks];
    let mut cluster = Cluster::default();
    for (i, name) in topic_names.iter().enumerate() {
        // Sometimes a subscribed topic has no metadata or no partitions: the assignors skip it.
        if i > 0 && rng.random_bool(0.05) {
            continue;
        }
        let n = if rng.random_bool(0.03) {
            0
        } else {
            rng.random_range(1..=opts.max_partitions)
        };
        let parts = (0..n)
            .map(|partition| {
                let replica_racks = match rack_mode {
                    0 => Vec::new(),
                    1 => racks.iter().map(|r| r.to_string()).collect(),
                    _ => {
                        let k = rng.random_range(0..=3.min(n_racks));
                        let mut rs: Vec<String> = racks
                            .choose_multiple(rng, k)
                            .map(|r| r.to_string())
                            .collect();
                        rs.shuffle(rng);
                        rs
                    }
                };
                PartitionInfo {
                    partition,
                    replica_racks,
                }
            })
            .collect();
        cluster.topics.insert(name.clone(), parts);
    }

    let n_members = rng.random_range(1..=opts.max_members);
    let same_subscription = rng.random_bool(0.4);
    let common: Vec<String> = random_topics(rng, &topic_names);
    let static_share = [0.0, 0.3, 1.0][rng.random_range(0..3)];
    let mut subscriptions = BTreeMap::new();
    let mut instance = 0;
    while subscriptions.len() < n_members {
        let member_id = match rng.random_range(0..3) {
            0 => format!("C{}-{}", rng.random_range(0..10), rng.random_range(0..10)),
            1 => format!(
                "consumer-{}-{:08x}",
                rng.random_range(0..5),
                rng.random::<u32>()
            ),
            _ => format!("m{}", rng.random_range(0..1000)),
        };
        if subscriptions.contains_key(&member_id) {
            continue;
        }
        let topics = if same_subscription {
            common.clone()
        } else {
            random_topics(rng, &topic_names)
        };
        let group_instance_id = rng.random_bool(static_share).then(|| {
            instance += 1;
            format!("instance-{}", rng.random_range(0..20) * 100 + instance)
        });
        let rack_id = (rack_mode != 0 && rng.random_bool(0.7)).then(|| {
            if rng.random_bool(0.1) {
                "rack-z".to_string() // a rack no replica is in
            } else {
                racks.choose(rng).expect("racks").to_string()
            }
        });
        subscriptions.insert(
            member_id,
            Subscription {
                topics,
                user_data: None,
                owned_partitions: Vec::new(),
                generation_id: -1,
                rack_id,
                group_instance_id,
            },
        );
    }

    let mut case = Case {
        cluster,
        subscriptions,
    };
    if opts.owned {
        add_owned(rng, &mut case);
    }
    case
}

/// A non-empty random subset of `topics` in random order.
fn random_topics(rng: &mut StdRng, topics: &[String]) -> Vec<String> {
    let k = rng.random_range(1..=topics.len());
    let mut chosen: Vec<String> = topics.choose_multiple(rng, k).cloned().collect();
    chosen.shuffle(rng);
    chosen
}

/// Owned partitions from a random earlier assignment of the subscribed topics: most partitions
/// owned by one subscriber, a few by two (a member that missed a rebalance), generations a mix
/// of current, stale and unknown.
fn add_owned(rng: &mut StdRng, case: &mut Case) {
    let generation = rng.random_range(1..10);
    let ids: Vec<String> = case.subscriptions.keys().cloned().collect();
    for id in &ids {
        let g = [generation, generation - 1, -1][rng.random_range(0..3)];
        if let Some(s) = case.subscriptions.get_mut(id) {
            s.generation_id = g;
        }
    }
    for (topic, parts) in &case.cluster.topics {
        let subscribers: Vec<&String> = ids
            .iter()
            .filter(|id| case.subscriptions[*id].topics.contains(topic))
            .collect();
        if subscribers.is_empty() {
            continue;
        }
        for p in parts {
            if !rng.random_bool(0.7) {
                continue;
            }
            let owners = if rng.random_bool(0.05) { 2 } else { 1 };
            for owner in subscribers.choose_multiple(rng, owners) {
                if let Some(s) = case.subscriptions.get_mut(*owner) {
                    s.owned_partitions
                        .push(TopicPartition::new(topic.clone(), p.partition));
                }
            }
        }
    }
    for s in case.subscriptions.values_mut() {
        s.owned_partitions.shuffle(rng);
    }
}

/// Runs `cases` generated cases through `ours` and Java's `class`, panicking on the first
/// difference (with the case as the oracle's request line, to replay it). Returns how many
/// cases were compared, so the caller can assert it; `None` when the oracle is unavailable.
pub fn run_differential(
    class: &str,
    ours: &dyn PartitionAssignor,
    seed: u64,
    cases: usize,
    opts: &GenOptions,
) -> Option<usize> {
    use rand::SeedableRng;
    let mut oracle = Oracle::start()?;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut compared = 0;
    for i in 0..cases {
        let case = gen_case(&mut rng, opts);
        let java = oracle.assign(class, &case);
        let rust = ours.assign(&case.cluster, &case.subscriptions);
        if let Some(diff) = difference(&rust, &java) {
            panic!(
                "case {i} (seed {seed}): {} differs from Java: {diff}\ninput: {}",
                ours.name(),
                request_json(class, &case)
            );
        }
        compared += 1;
    }
    Some(compared)
}

/// Why `rust` and `java` differ, or `None` when they agree (both assignments equal member by
/// member, partitions in the same order; or both rejecting the input).
pub fn difference(
    rust: &Result<BTreeMap<String, Assignment>, AssignorError>,
    java: &Result<BTreeMap<String, Assignment>, String>,
) -> Option<String> {
    match (rust, java) {
        (Err(_), Err(_)) => None,
        (Ok(_), Err(j)) => Some(format!("Java threw {j}, Strom accepted")),
        (Err(r), Ok(_)) => Some(format!("Strom rejected ({r}), Java accepted")),
        (Ok(r), Ok(j)) => {
            if r.keys().ne(j.keys()) {
                return Some(format!(
                    "members: Strom {:?}, Java {:?}",
                    r.keys().collect::<Vec<_>>(),
                    j.keys().collect::<Vec<_>>()
                ));
            }
            for (member, ra) in r {
                let ja = &j[member];
                if ra != ja {
                    return Some(format!("member {member}: Strom {ra:?}, Java {ja:?}"));
                }
            }
            None
        }
    }
}

//! Differential test: Strom's server-side assignors against Kafka 4.4's own classes
//! (`UniformAssignor`, `RangeAssignor` from kafka-group-coordinator-4.4.0.jar), run by the Java
//! oracle in `tests/server_assignor_oracle/` on thousands of generated groups.
//!
//! Each scenario runs several rounds: the previous round's (Strom) answer becomes the next round's
//! current assignment while members join and leave, topics gain partitions and (for `range`)
//! subscriptions change, so the sticky paths (keep, revoke, refill) are exercised. The first
//! round of a scenario may start from a random, unbalanced current assignment, including
//! partitions of topics nobody subscribes to any more.

use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use strom_group_coordinator::assignor::{
    AssignorError, ConsumerGroupPartitionAssignor, GroupAssignment, GroupSpec, MemberAssignment,
    MemberSubscriptionAndAssignment, RangeAssignor, SubscriptionType, TopicMetadata,
    TopicsMetadata, UniformAssignor,
};
use uuid::Uuid;

const SEED: u64 = 0x05ee_d848;
const SCENARIOS: usize = 900;
const ROUNDS: usize = 5;

/// SplitMix64: small, seeded, deterministic.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Uniform,
    Range,
}

/// One generated call: the group, the metadata, and which assignor.
struct Case {
    kind: Kind,
    members: BTreeMap<String, MemberSubscriptionAndAssignment>,
    metadata: TopicsMetadata,
}

fn uuid_json(id: Uuid) -> Value {
    let (msb, lsb) = id.as_u64_pair();
    json!([msb as i64, lsb as i64])
}

fn assignment_json(a: &MemberAssignment) -> Value {
    Value::Array(
        a.iter()
            .map(|(t, ps)| json!([uuid_json(*t), ps.iter().collect::<Vec<_>>()]))
            .collect(),
    )
}

fn case_json(case: &Case, subscription_type: SubscriptionType) -> Value {
    let members: Vec<Value> = case
        .members
        .iter()
        .map(|(id, m)| {
            json!({
                "id": id,
                "instance": m.instance_id,
                "rack": m.rack_id,
                "topics": m.subscribed_topic_ids.iter().map(|t| uuid_json(*t)).collect::<Vec<_>>(),
                "assignment": assignment_json(&m.assignment),
            })
        })
        .collect();
    let metadata: Vec<Value> = case
        .metadata
        .0
        .iter()
        .map(|(t, m)| json!([uuid_json(*t), m.num_partitions]))
        .collect();
    json!({
        "assignor": match case.kind { Kind::Uniform => "uniform", Kind::Range => "range" },
        "type": match subscription_type {
            SubscriptionType::Homogeneous => "HOMOGENEOUS",
            SubscriptionType::Heterogeneous => "HETEROGENEOUS",
        },
        "members": members,
        "metadata": metadata,
    })
}

/// Java's answer as Strom's type, or the exception text.
fn parse_answer(answer: &Value) -> Result<GroupAssignment, String> {
    if let Some(error) = answer.get("error") {
        return Err(error.to_string());
    }
    let mut out = GroupAssignment::default();
    for m in answer["members"].as_array().expect("members array") {
        let mut assignment = MemberAssignment::new();
        for tp in m["assignment"].as_array().expect("assignment array") {
            let msb = tp[0][0].as_i64().expect("msb") as u64;
            let lsb = tp[0][1].as_i64().expect("lsb") as u64;
            let partitions: BTreeSet<i32> = tp[1]
                .as_array()
                .expect("partitions")
                .iter()
                .map(|p| p.as_i64().expect("partition") as i32)
                .collect();
            assignment.insert(Uuid::from_u64_pair(msb, lsb), partitions);
        }
        out.members
            .insert(m["id"].as_str().expect("id").to_string(), assignment);
    }
    Ok(out)
}

fn random_member_id(rng: &mut Rng, n: usize) -> String {
    // Mixed shapes so member-id order is not insertion order.
    match rng.below(3) {
        0 => format!("m{}", rng.below(1000)),
        1 => format!("{:x}-{n}", rng.next()),
        _ => format!("Z{n}{}", rng.below(50)),
    }
}

/// Builds a scenario's rounds, each round's current assignment being the previous round's Strom
/// answer. Returns the cases with Strom's answers.
fn scenario(rng: &mut Rng, kind: Kind) -> Vec<(Case, Result<GroupAssignment, AssignorError>)> {
    // A few scenarios subscribe to many topics so Java's hash table grows past 16 bins.
    let topic_count = if rng.chance(10) {
        13 + rng.below(25)
    } else {
        1 + rng.below(8)
    } as usize;
    let mut topics: Vec<(Uuid, i32)> = (0..topic_count)
        .map(|_| {
            let id = Uuid::from_u64_pair(rng.next(), rng.next());
            (id, rng.below(13) as i32)
        })
        .collect();
    let mut member_ids: Vec<String> = (0..1 + rng.below(8) as usize)
        .map(|n| random_member_id(rng, n))
        .collect();
    // Uniform takes both paths (homogeneous and heterogeneous builders); range mostly
    // heterogeneous.
    let homogeneous = rng.chance(50);
    let pick_topics = |rng: &mut Rng, topics: &[(Uuid, i32)]| -> BTreeSet<Uuid> {
        let mut s: BTreeSet<Uuid> = topics
            .iter()
            .filter(|_| rng.chance(60))
            .map(|t| t.0)
            .collect();
        if s.is_empty() && !rng.chance(5) {
            s.insert(topics[rng.below(topics.len() as u64) as usize].0);
        }
        s
    };
    let mut shared = pick_topics(rng, &topics);
    let mut subscriptions: BTreeMap<String, BTreeSet<Uuid>> = BTreeMap::new();
    let mut instances: BTreeMap<String, Option<String>> = BTreeMap::new();
    let mut previous: BTreeMap<String, MemberAssignment> = BTreeMap::new();

    // A random unbalanced start: each partition (also of topics no one subscribes to) owned by
    // a random member or nobody.
    if rng.chance(60) {
        for &(t, n) in &topics {
            for p in 0..n {
                if rng.chance(60) {
                    let owner = &member_ids[rng.below(member_ids.len() as u64) as usize];
                    previous
                        .entry(owner.clone())
                        .or_default()
                        .entry(t)
                        .or_default()
                        .insert(p);
                }
            }
        }
    }

    let mut out = Vec::new();
    for round in 0..ROUNDS {
        if round > 0 {
            // Members leave and join.
            if member_ids.len() > 1 && rng.chance(40) {
                let gone = member_ids.remove(rng.below(member_ids.len() as u64) as usize);
                previous.remove(&gone);
            }
            for _ in 0..rng.below(3) {
                let n = member_ids.len() + round * 10;
                member_ids.push(random_member_id(rng, n));
            }
            // Topics gain partitions.
            for t in topics.iter_mut() {
                if rng.chance(20) {
                    t.1 += 1 + rng.below(4) as i32;
                }
            }
            if rng.chance(15) {
                shared = pick_topics(rng, &topics);
            }
        }
        let mut members = BTreeMap::new();
        for id in &member_ids {
            let subscribed = if homogeneous {
                shared.clone()
            } else {
                if !subscriptions.contains_key(id) || rng.chance(15) {
                    subscriptions.insert(id.clone(), pick_topics(rng, &topics));
                }
                subscriptions[id].clone()
            };
            let instance = instances
                .entry(id.clone())
                .or_insert_with(|| rng.chance(30).then(|| format!("i{}", rng.below(20))))
                .clone();
            members.insert(
                id.clone(),
                MemberSubscriptionAndAssignment {
                    rack_id: rng.chance(30).then(|| format!("r{}", rng.below(3))),
                    instance_id: instance,
                    subscribed_topic_ids: subscribed,
                    assignment: previous.get(id).cloned().unwrap_or_default(),
                },
            );
        }
        let mut metadata: BTreeMap<Uuid, TopicMetadata> = topics
            .iter()
            .map(|&(t, n)| {
                (
                    t,
                    TopicMetadata {
                        num_partitions: n,
                        ..Default::default()
                    },
                )
            })
            .collect();
        // Now and then a subscribed topic is missing from the metadata: both must fail.
        if rng.chance(2) {
            if let Some(t) = shared.iter().next() {
                metadata.remove(t);
            }
        }
        let case = Case {
            kind,
            members,
            metadata: TopicsMetadata(metadata),
        };
        let ours = run_strom(&case);
        if let Ok(answer) = &ours {
            previous = answer.members.clone();
        }
        out.push((case, ours));
    }
    out
}

fn run_strom(case: &Case) -> Result<GroupAssignment, AssignorError> {
    let group = GroupSpec::new(case.members.clone())?;
    match case.kind {
        Kind::Uniform => UniformAssignor.assign(&group, &case.metadata),
        Kind::Range => RangeAssignor.assign(&group, &case.metadata),
    }
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Compiles the oracle into a temp dir; `None` (skip) when Java or the jars are missing outside CI.
fn compile_oracle() -> Option<(PathBuf, String)> {
    let libs = repo_root().join(".cache/kafka-4.4/libs");
    let missing = if !libs.join("kafka-group-coordinator-4.4.0.jar").exists() {
        Some(format!(
            "Kafka 4.4 jars not found in {} (run `make kafka-ref-fetch`)",
            libs.display()
        ))
    } else if Command::new("javac").arg("-version").output().is_err() {
        Some("no javac on PATH".to_string())
    } else {
        None
    };
    if let Some(why) = missing {
        if std::env::var_os("CI").is_some() {
            panic!("server_assignor_diff needs Java and the Kafka jars in CI: {why}");
        }
        eprintln!("SKIPPED: {why}");
        return None;
    }
    let classpath_libs = format!("{}/*", libs.display());
    let dir = std::env::temp_dir().join(format!("strom-assignor-oracle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create oracle dir");
    let source = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/server_assignor_oracle/ServerAssignorOracle.java");
    let status = Command::new("javac")
        .arg("-d")
        .arg(&dir)
        .arg("-cp")
        .arg(&classpath_libs)
        .arg(&source)
        .status()
        .expect("run javac");
    assert!(status.success(), "javac failed on {}", source.display());
    let classpath = format!("{}:{}", dir.display(), classpath_libs);
    Some((dir, classpath))
}

fn run_oracle(classpath: &str, cases: &[Value]) -> Vec<Value> {
    let mut child = Command::new("java")
        .arg("-cp")
        .arg(classpath)
        .arg("ServerAssignorOracle")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start java");
    let input = serde_json::to_vec(cases).expect("encode cases");
    let mut stdin = child.stdin.take().expect("stdin");
    // Write from a thread so a large answer cannot deadlock against a large question.
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let output = child.wait_with_output().expect("java output");
    writer.join().expect("writer").expect("write cases");
    assert!(
        output.status.success(),
        "oracle failed: {:?}",
        output.status
    );
    serde_json::from_slice(&output.stdout).expect("oracle answer is JSON")
}

#[test]
fn assignors_equal_kafka_4_4() {
    let Some((dir, classpath)) = compile_oracle() else {
        return;
    };
    let mut rng = Rng(SEED);
    let mut cases = Vec::new();
    for n in 0..SCENARIOS {
        let kind = if n % 2 == 0 {
            Kind::Uniform
        } else {
            Kind::Range
        };
        cases.extend(scenario(&mut rng, kind));
    }
    let questions: Vec<Value> = cases
        .iter()
        .map(|(case, _)| {
            // Java is told the subscription type Strom derived; an invalid group (which Strom
            // rejects before assigning) is sent as homogeneous and must fail on the Java side too.
            let st = GroupSpec::new(case.members.clone())
                .map(|g| g.subscription_type())
                .unwrap_or(SubscriptionType::Homogeneous);
            case_json(case, st)
        })
        .collect();
    let answers = run_oracle(&classpath, &questions);
    let _ = std::fs::remove_dir_all(dir);
    assert_eq!(answers.len(), cases.len(), "one answer per case");

    let (mut compared, mut uniform, mut range, mut errors, mut sticky) = (0, 0, 0, 0, 0);
    let mut uniform_heterogeneous = 0;
    for (i, ((case, ours), answer)) in cases.iter().zip(&answers).enumerate() {
        let theirs = parse_answer(answer);
        match (ours, &theirs) {
            (Ok(a), Ok(b)) => {
                assert_eq!(
                    a, b,
                    "case {i} ({:?}) differs from Kafka: {}",
                    case.kind, questions[i]
                );
                let heterogeneous = GroupSpec::new(case.members.clone())
                    .is_ok_and(|g| g.subscription_type() == SubscriptionType::Heterogeneous);
                if case.kind == Kind::Uniform && heterogeneous {
                    uniform_heterogeneous += 1;
                }
            }
            (Err(_), Err(_)) => errors += 1,
            _ => panic!(
                "case {i} ({:?}): Strom {ours:?}, Kafka {theirs:?}: {}",
                case.kind, questions[i]
            ),
        }
        compared += 1;
        match case.kind {
            Kind::Uniform => uniform += 1,
            Kind::Range => range += 1,
        }
        if case.members.values().any(|m| !m.assignment.is_empty()) {
            sticky += 1;
        }
    }
    eprintln!(
        "compared {compared} cases with Kafka 4.4 ({uniform} uniform, {range} range, \
         {sticky} with current assignments, {errors} failing on both sides, \
         {uniform_heterogeneous} uniform with heterogeneous subscriptions)"
    );
    assert!(
        uniform_heterogeneous >= 500,
        "only {uniform_heterogeneous} heterogeneous uniform cases"
    );
    assert_eq!(compared, SCENARIOS * ROUNDS);
    assert!(
        uniform >= 2000 && range >= 2000,
        "{uniform} uniform, {range} range"
    );
    assert!(
        sticky >= 2000,
        "only {sticky} cases had current assignments"
    );
    assert!(errors > 0, "the unknown-topic path was never compared");
}

//! Differential test: Strom's member reconciliation (`consumer::current_assignment`) against
//! Kafka 4.4's own `CurrentAssignmentBuilder` (kafka-group-coordinator-4.4.0.jar), run by the
//! Java oracle in `tests/consumer_oracle/` on thousands of generated members: every state,
//! epochs behind and at the target, partitions kept / revoked / held by other members, the
//! member's own pending revocations, reports with and without owned partitions, subscriptions
//! by names and regex, topics missing from the image, subscription changes at the target epoch.

use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use strom_group_coordinator::assignor::MemberAssignment;
use strom_group_coordinator::consumer::current_assignment::CurrentAssignmentBuilder;
use strom_group_coordinator::consumer::{ConsumerGroupMember, MemberState};
use uuid::Uuid;

const SEED: u64 = 0x0848_c0de;
const CASES: usize = 6000;
const TOPICS: u64 = 4;
const PARTITIONS: u64 = 6;

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
    fn chance(&mut self, one_in: u64) -> bool {
        self.below(one_in) == 0
    }
}

fn id(k: u64) -> Uuid {
    Uuid::from_u64_pair(0, k + 1)
}

fn index(u: &Uuid) -> u64 {
    u.as_u64_pair().1 - 1
}

struct Case {
    member: ConsumerGroupMember,
    regex_topics: BTreeSet<u64>,
    image: BTreeSet<u64>,
    target_epoch: i32,
    target: MemberAssignment,
    owners: BTreeMap<(Uuid, i32), i32>,
    owned: Option<Vec<(Uuid, Vec<i32>)>>,
    subscription_changed: bool,
}

fn subset(rng: &mut Rng, n: u64, one_in: u64) -> BTreeSet<u64> {
    (0..n).filter(|_| rng.chance(one_in)).collect()
}

fn generate(rng: &mut Rng) -> Case {
    let epoch = 1 + rng.below(5) as i32;
    let mut m = ConsumerGroupMember::new("member");
    m.state = match rng.below(16) {
        0 => MemberState::Unknown,
        1..=5 => MemberState::UnrevokedPartitions,
        6..=9 => MemberState::UnreleasedPartitions,
        _ => MemberState::Stable,
    };
    m.member_epoch = epoch;
    m.previous_member_epoch = if rng.chance(2) {
        epoch - 1
    } else {
        rng.below(6) as i32 - 1
    };
    let image: BTreeSet<u64> = if rng.chance(4) {
        subset(rng, TOPICS, 2)
    } else {
        (0..TOPICS).collect()
    };
    m.subscribed_topic_names = subset(rng, TOPICS, 2)
        .into_iter()
        .map(|k| format!("t{k}"))
        .collect();
    let mut regex_topics = BTreeSet::new();
    if rng.chance(4) {
        m.subscribed_topic_regex = Some("t.*".into());
        regex_topics = subset(rng, TOPICS, 2);
    }
    // What the member holds: assigned or pending revocation, never both.
    for k in 0..TOPICS {
        for p in 0..PARTITIONS as i32 {
            match rng.below(6) {
                0 | 1 => {
                    m.assigned_partitions.entry(id(k)).or_default().insert(p);
                }
                2 if rng.chance(2) => {
                    m.partitions_pending_revocation
                        .entry(id(k))
                        .or_default()
                        .insert(p);
                }
                _ => continue,
            }
            m.assignment_epochs
                .insert((id(k), p), 1 + rng.below(epoch as u64) as i32);
        }
    }
    let target_epoch = epoch + rng.below(3) as i32;
    let mut target = MemberAssignment::new();
    for k in 0..TOPICS {
        for p in 0..PARTITIONS as i32 {
            if rng.chance(3) {
                target.entry(id(k)).or_default().insert(p);
            }
        }
    }
    let mut owners = BTreeMap::new();
    for (t, ps) in m
        .assigned_partitions
        .iter()
        .chain(m.partitions_pending_revocation.iter())
    {
        for p in ps {
            owners.insert((*t, *p), epoch);
        }
    }
    // Partitions still held by other members.
    for k in 0..TOPICS {
        for p in 0..PARTITIONS as i32 {
            if !owners.contains_key(&(id(k), p)) && rng.chance(4) {
                owners.insert((id(k), p), rng.below(6) as i32);
            }
        }
    }
    let owned = if rng.chance(8) {
        None
    } else if rng.chance(8) {
        Some(Vec::new())
    } else if rng.chance(2) {
        // The member acknowledged: it reports what it is assigned and nothing pending, or
        // only part of that (it may not have taken everything yet).
        Some(
            m.assigned_partitions
                .iter()
                .map(|(t, ps)| (*t, ps.iter().copied().filter(|_| !rng.chance(5)).collect()))
                .collect(),
        )
    } else {
        let mut v = Vec::new();
        for (t, ps) in m
            .assigned_partitions
            .iter()
            .chain(m.partitions_pending_revocation.iter())
        {
            let keep: Vec<i32> = ps.iter().copied().filter(|_| !rng.chance(3)).collect();
            if !keep.is_empty() || rng.chance(6) {
                v.push((*t, keep));
            }
        }
        Some(v)
    };
    Case {
        member: m,
        regex_topics,
        image,
        target_epoch,
        target,
        owners,
        owned,
        subscription_changed: rng.chance(3),
    }
}

fn triples(a: &MemberAssignment, m: &ConsumerGroupMember) -> Vec<(u64, i32, i32)> {
    a.iter()
        .flat_map(|(t, ps)| {
            ps.iter()
                .map(move |p| (index(t), *p, m.assignment_epoch(*t, *p)))
        })
        .collect()
}

fn question(c: &Case) -> Value {
    let m = &c.member;
    json!({
        "state": m.state.value(),
        "epoch": m.member_epoch,
        "prev": m.previous_member_epoch,
        "assigned": triples(&m.assigned_partitions, m),
        "pending": triples(&m.partitions_pending_revocation, m),
        "names": m.subscribed_topic_names.iter().map(|n| n[1..].parse::<u64>().unwrap()).collect::<Vec<_>>(),
        "regex": m.subscribed_topic_regex,
        "regexTopics": c.regex_topics,
        "image": c.image,
        "targetEpoch": c.target_epoch,
        "target": c.target.iter().flat_map(|(t, ps)| ps.iter().map(move |p| (index(t), *p))).collect::<Vec<_>>(),
        "owners": c.owners.iter().map(|((t, p), e)| (index(t), *p, *e)).collect::<Vec<_>>(),
        "owned": c.owned.as_ref().map(|v| v.iter().map(|(t, ps)| json!([index(t), ps])).collect::<Vec<_>>()),
        "subscriptionChanged": c.subscription_changed,
    })
}

/// Strom's answer in the oracle's shape.
fn ours(c: &Case) -> Value {
    let topics: BTreeSet<u64> = c
        .member
        .subscribed_topic_names
        .iter()
        .map(|n| n[1..].parse::<u64>().unwrap())
        .chain(c.regex_topics.iter().copied())
        .collect();
    let subscribed: BTreeSet<Uuid> = topics
        .iter()
        .filter(|k| c.image.contains(k))
        .map(|k| id(*k))
        .collect();
    let epoch_of = |t: Uuid, p: i32| c.owners.get(&(t, p)).copied().unwrap_or(-1);
    let r = CurrentAssignmentBuilder::new(
        &c.member,
        c.target_epoch,
        &c.target,
        &subscribed,
        c.subscription_changed,
        &epoch_of,
        c.owned.as_deref(),
    )
    .build();
    match r {
        Err(_) => json!({"fenced": true}),
        Ok(m) => json!({
            "state": m.state.value(),
            "epoch": m.member_epoch,
            "prev": m.previous_member_epoch,
            "assigned": triples(&m.assigned_partitions, &m),
            "pending": triples(&m.partitions_pending_revocation, &m),
        }),
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
            panic!("consumer_reconcile_diff needs Java and the Kafka jars in CI: {why}");
        }
        eprintln!("SKIPPED: {why}");
        return None;
    }
    let classpath_libs = format!("{}/*", libs.display());
    let dir = std::env::temp_dir().join(format!("strom-reconcile-oracle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create oracle dir");
    let source = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/consumer_oracle/CurrentAssignmentOracle.java");
    let status = Command::new("javac")
        .arg("-d")
        .arg(&dir)
        .arg("-cp")
        .arg(&classpath_libs)
        .arg(&source)
        .status()
        .expect("run javac");
    assert!(status.success(), "javac failed on {}", source.display());
    Some((dir.clone(), format!("{}:{}", dir.display(), classpath_libs)))
}

fn run_oracle(classpath: &str, cases: &[Value]) -> Vec<Value> {
    let mut child = Command::new("java")
        .arg("-cp")
        .arg(classpath)
        .arg("CurrentAssignmentOracle")
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
fn reconciliation_equals_kafka_4_4() {
    let Some((dir, classpath)) = compile_oracle() else {
        return;
    };
    let mut rng = Rng(SEED);
    let cases: Vec<Case> = (0..CASES).map(|_| generate(&mut rng)).collect();
    let questions: Vec<Value> = cases.iter().map(question).collect();
    let answers = run_oracle(&classpath, &questions);
    let _ = std::fs::remove_dir_all(dir);
    assert_eq!(answers.len(), cases.len(), "one answer per case");
    let mut compared = 0;
    let mut by_outcome: BTreeMap<String, usize> = BTreeMap::new();
    for (i, (c, theirs)) in cases.iter().zip(&answers).enumerate() {
        let mine = ours(c);
        assert_eq!(
            &mine, theirs,
            "case {i} differs from Kafka: {}",
            questions[i]
        );
        compared += 1;
        let outcome = match theirs.get("state").and_then(Value::as_i64) {
            None => "fenced".to_string(),
            Some(s) => format!("state {s}"),
        };
        *by_outcome.entry(outcome).or_default() += 1;
    }
    eprintln!("compared {compared} reconciliations with Kafka 4.4: {by_outcome:?}");
    assert_eq!(compared, CASES);
    // Every outcome is exercised.
    assert!(by_outcome.len() >= 4, "{by_outcome:?}");
}

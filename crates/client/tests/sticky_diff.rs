//! Differential test: strom's `sticky` / `cooperative-sticky` assignors against kafka-clients
//! 4.4's classes (tests/sticky_oracle/StickyOracle.java) on generated groups, each run for
//! three rebalance rounds in which Java's result becomes the owned partitions (and, for
//! `sticky`, the user data) of the next round while members, topics and partitions come and go.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use base64::Engine;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use strom_client::assignor::sticky::{
    encode_cooperative_user_data, encode_sticky_user_data, CooperativeStickyAssignor,
    StickyAssignor,
};
use strom_client::assignor::{
    Cluster, PartitionAssignor, PartitionInfo, Subscription, TopicPartition,
};

fn libs() -> Option<PathBuf> {
    let dir = std::env::var_os("STROM_KAFKA_LIBS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.cache/kafka-4.4/libs")
        });
    dir.join("kafka-clients-4.4.0.jar").exists().then_some(dir)
}

fn case_json(assignor: &str, cluster: &Cluster, subs: &BTreeMap<String, Subscription>) -> Value {
    let topics: serde_json::Map<String, Value> = cluster
        .topics
        .iter()
        .map(|(t, ps)| {
            (
                t.clone(),
                json!(ps
                    .iter()
                    .map(|p| p.replica_racks.clone())
                    .collect::<Vec<_>>()),
            )
        })
        .collect();
    let members: Vec<Value> = subs
        .iter()
        .map(|(id, s)| {
            json!({
                "id": id,
                "topics": s.topics,
                "owned": s.owned_partitions.iter().map(|tp| json!([tp.topic, tp.partition])).collect::<Vec<_>>(),
                "userData": s.user_data.as_ref().map(|d| base64::engine::general_purpose::STANDARD.encode(d)),
                "rack": s.rack_id,
                "generation": s.generation_id,
            })
        })
        .collect();
    json!({"assignor": assignor, "topics": topics, "members": members})
}

type Result = std::result::Result<BTreeMap<String, Vec<TopicPartition>>, String>;

fn parse_java(v: &Value) -> Result {
    if let Some(e) = v.get("error") {
        return Err(e.as_str().unwrap_or("?").to_string());
    }
    let ok = v
        .get("ok")
        .and_then(Value::as_object)
        .ok_or("bad oracle output")?;
    Ok(ok
        .iter()
        .map(|(m, ps)| {
            let ps = ps
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| {
                    TopicPartition::new(
                        p[0].as_str().unwrap_or(""),
                        p[1].as_i64().unwrap_or(-1) as i32,
                    )
                })
                .collect();
            (m.clone(), ps)
        })
        .collect())
}

const RACKS: [&str; 4] = ["r0", "r1", "r2", "r3"];

fn random_cluster(rng: &mut StdRng, with_racks: bool) -> Cluster {
    let mut cluster = Cluster::default();
    for t in 0..rng.random_range(1..=4) {
        let n = rng.random_range(1..=20);
        cluster.topics.insert(
            format!("topic-{t}"),
            (0..n).map(|p| partition(rng, p, with_racks)).collect(),
        );
    }
    cluster
}

fn partition(rng: &mut StdRng, p: i32, with_racks: bool) -> PartitionInfo {
    let replica_racks = if with_racks {
        (0..rng.random_range(1..=3))
            .map(|_| RACKS[rng.random_range(0..3)].to_string())
            .collect()
    } else {
        Vec::new()
    };
    PartitionInfo {
        partition: p,
        replica_racks,
    }
}

fn member_id(rng: &mut StdRng) -> String {
    let len = rng.random_range(1..=12);
    (0..len)
        .map(|_| (b'a' + rng.random_range(0..26u8)) as char)
        .collect::<String>()
        + "-consumer"
}

fn random_topics(rng: &mut StdRng, cluster: &Cluster, same: &[String]) -> Vec<String> {
    if rng.random_bool(0.5) {
        return same.to_vec();
    }
    let mut topics: Vec<String> = cluster
        .topics
        .keys()
        .filter(|_| rng.random_bool(0.6))
        .cloned()
        .collect();
    if rng.random_bool(0.1) {
        topics.push("missing-topic".into());
    }
    if topics.is_empty() {
        topics.push(cluster.topics.keys().next().cloned().unwrap_or_default());
    }
    topics
}

fn new_member(rng: &mut StdRng, cluster: &Cluster, same: &[String], racks: bool) -> Subscription {
    Subscription {
        topics: random_topics(rng, cluster, same),
        generation_id: -1,
        rack_id: (racks && rng.random_bool(0.8)).then(|| RACKS[rng.random_range(0..4)].to_string()),
        ..Subscription::default()
    }
}

#[test]
fn sticky_assignors_match_kafka() {
    let Some(libs) = libs() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "kafka 4.4 jars missing (run `make kafka-ref-fetch` or set STROM_KAFKA_LIBS)"
        );
        eprintln!("skipping: kafka 4.4 jars not found (set STROM_KAFKA_LIBS)");
        return;
    };
    let classes = tempfile::tempdir().expect("temp dir");
    let cp = format!("{}/*", libs.display());
    let src =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/sticky_oracle/StickyOracle.java");
    let javac = Command::new("javac")
        .args(["-nowarn", "-cp", &cp, "-d"])
        .arg(classes.path())
        .arg(&src)
        .status();
    match javac {
        Ok(s) => assert!(s.success(), "javac failed"),
        Err(e) => {
            assert!(std::env::var_os("CI").is_none(), "javac not runnable: {e}");
            eprintln!("skipping: javac not runnable: {e}");
            return;
        }
    }
    let mut java = Command::new("java")
        .args([
            "-cp",
            &format!("{}:{cp}", classes.path().display()),
            "StickyOracle",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("java");
    let mut to_java = java.stdin.take().expect("stdin");
    let mut from_java = BufReader::new(java.stdout.take().expect("stdout"));
    let mut ask = |line: String| -> Value {
        writeln!(to_java, "{line}").expect("write to java");
        let mut out = String::new();
        from_java.read_line(&mut out).expect("read from java");
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("oracle output {out:?}: {e}"))
    };

    let mut rng = StdRng::seed_from_u64(0x5717_c4e5);
    let (mut compared, mut non_empty, mut with_owned, mut errors) =
        (0usize, 0usize, 0usize, 0usize);
    let (mut general, mut rack_cases) = (0usize, 0usize);
    for case in 0..2000 {
        let cooperative = rng.random_bool(0.5);
        let name = if cooperative {
            "cooperative-sticky"
        } else {
            "sticky"
        };
        let racks = rng.random_bool(0.4);
        let mut cluster = random_cluster(&mut rng, racks);
        let same: Vec<String> = cluster
            .topics
            .keys()
            .filter(|_| rng.random_bool(0.7))
            .cloned()
            .collect();
        let same = if same.is_empty() {
            cluster.topics.keys().take(1).cloned().collect()
        } else {
            same
        };
        let mut subs: BTreeMap<String, Subscription> = (0..rng.random_range(1..=12))
            .map(|_| {
                (
                    member_id(&mut rng),
                    new_member(&mut rng, &cluster, &same, racks),
                )
            })
            .collect();
        let first_generation = rng.random_range(1..5);
        for round in 0..3 {
            let generation = first_generation + round;
            let java_out = parse_java(&ask(case_json(name, &cluster, &subs).to_string()));
            let rust_out: Result = if cooperative {
                CooperativeStickyAssignor::new().assign(&cluster, &subs)
            } else {
                StickyAssignor::new().assign(&cluster, &subs)
            }
            .map(|m| m.into_iter().map(|(k, a)| (k, a.partitions)).collect())
            .map_err(|e| e.to_string());
            match (&java_out, &rust_out) {
                (Ok(j), Ok(r)) => assert_eq!(
                    j,
                    r,
                    "case {case} round {round} {name}: {}",
                    case_json(name, &cluster, &subs)
                ),
                (Err(_), Err(_)) => errors += 1,
                _ => panic!(
                    "case {case} round {round}: java {java_out:?} vs rust {rust_out:?}: {}",
                    case_json(name, &cluster, &subs)
                ),
            }
            compared += 1;
            let first = subs
                .values()
                .next()
                .map(|s| s.topics.clone())
                .unwrap_or_default();
            if subs.values().any(|s| s.topics != first) {
                general += 1;
            }
            if racks && subs.values().any(|s| s.rack_id.is_some()) {
                rack_cases += 1;
            }
            if subs
                .values()
                .any(|s| !s.owned_partitions.is_empty() || s.user_data.is_some())
            {
                with_owned += 1;
            }
            let Ok(assignment) = java_out else { break };
            if assignment.values().any(|v| !v.is_empty()) {
                non_empty += 1;
            }
            // Next round: members report what they got; some are stale, some leave, some join.
            for (id, sub) in subs.iter_mut() {
                let got = assignment.get(id).cloned().unwrap_or_default();
                let member_generation = if rng.random_bool(0.15) {
                    generation - 1
                } else {
                    generation
                };
                if cooperative {
                    sub.owned_partitions = got;
                    if rng.random_bool(0.2) {
                        sub.generation_id = -1;
                        sub.user_data = Some(encode_cooperative_user_data(member_generation));
                    } else {
                        sub.generation_id = member_generation;
                        sub.user_data = None;
                    }
                } else {
                    let with_generation = rng.random_bool(0.85);
                    sub.user_data = Some(encode_sticky_user_data(
                        &got,
                        with_generation.then_some(member_generation),
                    ));
                    sub.generation_id = if rng.random_bool(0.5) {
                        member_generation
                    } else {
                        -1
                    };
                }
                if rng.random_bool(0.1) {
                    sub.topics = random_topics(&mut rng, &cluster, &same);
                }
            }
            // Occasionally two members claim the same partition.
            if rng.random_bool(0.1) && subs.len() >= 2 {
                let ids: Vec<String> = subs.keys().cloned().collect();
                let stolen = subs[&ids[0]].owned_partitions.first().cloned();
                if let (Some(tp), Some(s)) = (stolen, subs.get_mut(&ids[1])) {
                    s.owned_partitions.push(tp);
                }
            }
            if rng.random_bool(0.3) && subs.len() > 1 {
                let victim = subs
                    .keys()
                    .nth(rng.random_range(0..subs.len()))
                    .cloned()
                    .unwrap_or_default();
                subs.remove(&victim);
            }
            if rng.random_bool(0.3) {
                let m = new_member(&mut rng, &cluster, &same, racks);
                subs.insert(member_id(&mut rng), m);
            }
            if rng.random_bool(0.2) {
                if let Some(ps) = cluster.topics.values_mut().next() {
                    let p = ps.len() as i32;
                    ps.push(partition(&mut rng, p, racks));
                }
            }
        }
    }
    // Closing its stdin ends the oracle.
    drop(to_java);
    let _ = java.wait();
    eprintln!(
        "compared {compared} rebalances ({with_owned} with previous assignments, {general} with differing \
         subscriptions, {rack_cases} with racks, {non_empty} non-empty, {errors} errors on both sides)"
    );
    assert!(compared >= 3000, "only {compared} cases compared");
    assert!(
        with_owned >= 1500,
        "only {with_owned} cases with owned partitions"
    );
    assert!(general >= 1000, "only {general} cases on the general path");
    assert!(rack_cases >= 1000, "only {rack_cases} rack-aware cases");
}

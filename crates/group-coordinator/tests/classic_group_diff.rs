//! Differential test: Strom's `ClassicGroup` against Kafka 4.4's own
//! `org.apache.kafka.coordinator.group.classic.ClassicGroup` (kafka-group-coordinator-4.4.0.jar),
//! driven by the Java oracle in `tests/classic_group_oracle/` through thousands of generated
//! operation sequences: members added (dynamic and static, with ranked protocol lists), updated,
//! removed, static members replaced, state transitions and new generations. After every
//! operation both sides report the state, generation, leader, chosen protocol, members in
//! iteration order (Java `HashMap` order, which decides leaders and record order), the
//! protocol vote, `validateMember` / `validateOffsetCommit` answers for a probe, topic
//! subscription, `hasAllMembersJoined` and the rebalance timeout.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use bytes::{BufMut, Bytes, BytesMut};
use serde_json::{json, Value};
use strom_group_coordinator::classic::{ClassicGroup, ClassicGroupMember, GroupState, Protocol};

const SEED: u64 = 0xc1a5_51c0;
const CASES: usize = 3000;
const OPS: usize = 24;

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

const PROTOCOLS: &[&str] = &["range", "roundrobin", "sticky", "cooperative-sticky", "p4"];
const TOPICS: &[&str] = &["t0", "t1", "t2", "t3", "t4"];

fn subscription(topics: &[String]) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(0);
    b.put_i32(topics.len() as i32);
    for t in topics {
        b.put_i16(t.len() as i16);
        b.put_slice(t.as_bytes());
    }
    b.put_i32(-1);
    b.freeze()
}

fn gen_protocols(rng: &mut Rng) -> Value {
    let mut names: Vec<&str> = PROTOCOLS.to_vec();
    let n = 1 + rng.below(3) as usize;
    let mut out = Vec::new();
    for _ in 0..n {
        let i = rng.below(names.len() as u64) as usize;
        let name = names.remove(i);
        let topics: Vec<&str> = TOPICS.iter().copied().filter(|_| rng.chance(40)).collect();
        out.push(json!({"name": name, "topics": topics}));
    }
    Value::Array(out)
}

fn gen_case(rng: &mut Rng) -> Value {
    // Pools sized so groups sometimes pass 12 members (Java's table grows from 16 to 32).
    let pool = 4 + rng.below(28);
    let id = |rng: &mut Rng| format!("member-{}", rng.below(pool));
    let instance = |rng: &mut Rng| format!("i{}", rng.below(6));
    let mut ops = Vec::new();
    for _ in 0..OPS {
        let probe = json!({
            "id": if rng.chance(10) { String::new() } else { id(rng) },
            "instance": if rng.chance(30) { Some(instance(rng)) } else { None },
            "generation": rng.below(5) as i64 - 1,
            "txn": rng.chance(30),
            "topic": TOPICS[rng.below(TOPICS.len() as u64) as usize],
        });
        let r = rng.below(100);
        let op = if r < 45 {
            json!({"op": "add", "id": id(rng),
                   "instance": if rng.chance(30) { Some(instance(rng)) } else { None },
                   "rebalance": 1000 * (1 + rng.below(60)), "protocols": gen_protocols(rng)})
        } else if r < 58 {
            json!({"op": "remove", "id": id(rng)})
        } else if r < 66 {
            json!({"op": "update", "id": id(rng), "rebalance": 1000 * (1 + rng.below(60)),
                   "protocols": gen_protocols(rng)})
        } else if r < 71 {
            json!({"op": "replace", "instance": instance(rng), "new_id": id(rng)})
        } else if r < 81 {
            json!({"op": "prepare"})
        } else if r < 91 {
            json!({"op": "next_gen"})
        } else {
            json!({"op": "stable"})
        };
        let mut op = op;
        op["probe"] = probe;
        ops.push(op);
    }
    json!({ "ops": ops })
}

fn protocols(v: &Value) -> Vec<Protocol> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|p| Protocol {
            name: p["name"].as_str().unwrap().to_string(),
            metadata: subscription(
                &p["topics"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|t| t.as_str().unwrap().to_string())
                    .collect::<Vec<_>>(),
            ),
        })
        .collect()
}

fn code(r: Result<(), strom_protocol::ErrorCode>) -> i16 {
    r.err().map_or(0, |e| e.code())
}

/// Strom's side of one case: the same observations the oracle makes.
fn run_strom(case: &Value) -> Value {
    let mut g = ClassicGroup::new("g".into(), GroupState::Empty, 0);
    let mut obs = Vec::new();
    for op in case["ops"].as_array().unwrap() {
        let s = |k: &str| op[k].as_str().map(str::to_string);
        let applied = match op["op"].as_str().unwrap() {
            "add" => {
                let id = s("id").unwrap();
                let instance = s("instance");
                let ps = protocols(&op["protocols"]);
                let ok = !g.has_member(&id)
                    && instance
                        .as_deref()
                        .is_none_or(|i| g.static_member_id(i).is_none())
                    && g.supports_protocols("consumer", &ps);
                if ok {
                    g.add(ClassicGroupMember::new(
                        id,
                        instance,
                        "client".into(),
                        "host".into(),
                        op["rebalance"].as_i64().unwrap() as i32,
                        10000,
                        "consumer".into(),
                        ps,
                        Bytes::new(),
                    ));
                }
                ok
            }
            "update" => {
                let id = s("id").unwrap();
                let ps = protocols(&op["protocols"]);
                let ok = g.has_member(&id) && g.supports_protocols("consumer", &ps);
                if ok {
                    g.update_member(
                        &id,
                        ps,
                        op["rebalance"].as_i64().unwrap() as i32,
                        10000,
                        None,
                    );
                }
                ok
            }
            "remove" => {
                g.remove(&s("id").unwrap());
                true
            }
            "replace" => {
                let instance = s("instance").unwrap();
                let new_id = s("new_id").unwrap();
                match g.static_member_id(&instance).cloned() {
                    Some(old) if !g.has_member(&new_id) => {
                        g.replace_static_member(&instance, &old, &new_id);
                        true
                    }
                    _ => false,
                }
            }
            "prepare" => {
                let ok = g.can_rebalance();
                if ok {
                    g.transition_to(GroupState::PreparingRebalance, 0);
                }
                ok
            }
            "next_gen" => {
                let ok = g.is_in(GroupState::PreparingRebalance)
                    && (g.num_members() == 0 || g.select_protocol().is_some());
                if ok {
                    g.init_next_generation(0);
                }
                ok
            }
            "stable" => {
                let ok = g.is_in(GroupState::CompletingRebalance);
                if ok {
                    g.transition_to(GroupState::Stable, 0);
                }
                ok
            }
            other => panic!("unknown op {other}"),
        };
        let p = &op["probe"];
        let pid = p["id"].as_str().unwrap();
        let pinst = p["instance"].as_str();
        let select = if g.num_members() > 0 {
            g.select_protocol()
        } else {
            None
        };
        obs.push(json!({
            "applied": applied,
            "state": g.state.name(),
            "gen": g.generation_id,
            "leader": g.leader_id,
            "protocol": g.protocol_name,
            "members": g.member_ids(),
            "select": select,
            "validate": code(g.validate_member(pid, pinst)),
            "commit": code(g.validate_offset_commit(
                pid,
                pinst,
                p["generation"].as_i64().unwrap() as i32,
                p["txn"].as_bool().unwrap(),
            )),
            "sub": g.is_subscribed_to_topic(p["topic"].as_str().unwrap()),
            "all_joined": g.has_all_members_joined(),
            "rebalance_timeout": g.rebalance_timeout_ms(),
        }));
    }
    Value::Array(obs)
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
            panic!("classic_group_diff needs Java and the Kafka jars in CI: {why}");
        }
        eprintln!("SKIPPED: {why}");
        return None;
    }
    let classpath_libs = format!("{}/*", libs.display());
    let dir = std::env::temp_dir().join(format!("strom-classic-oracle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create oracle dir");
    let source = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/classic_group_oracle/ClassicGroupOracle.java");
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
        .arg("ClassicGroupOracle")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start java");
    let input = serde_json::to_vec(cases).expect("encode cases");
    let mut stdin = child.stdin.take().expect("stdin");
    // Write from a thread so a large answer cannot deadlock against a large question.
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let output = child.wait_with_output().expect("java output");
    writer.join().expect("writer").expect("write cases");
    if !output.status.success() {
        // The end of Java's stderr says why (the start is log noise).
        let err = String::from_utf8_lossy(&output.stderr);
        let tail = &err[err.len().saturating_sub(3000)..];
        panic!("oracle failed: {:?}\n{tail}", output.status);
    }
    serde_json::from_slice(&output.stdout).expect("oracle answer is JSON")
}

#[test]
fn classic_group_equals_kafka_4_4() {
    let Some((dir, classpath)) = compile_oracle() else {
        return;
    };
    let mut rng = Rng(SEED);
    let cases: Vec<Value> = (0..CASES).map(|_| gen_case(&mut rng)).collect();
    let answers = run_oracle(&classpath, &cases);
    let _ = std::fs::remove_dir_all(dir);
    assert_eq!(answers.len(), cases.len());
    let mut compared = 0usize;
    let mut applied = 0usize;
    for (n, (case, kafka)) in cases.iter().zip(&answers).enumerate() {
        let strom = run_strom(case);
        let (s, k) = (strom.as_array().unwrap(), kafka.as_array().unwrap());
        assert_eq!(s.len(), k.len());
        for (i, (so, ko)) in s.iter().zip(k).enumerate() {
            assert_eq!(
                so, ko,
                "case {n}, after op {i} {}: Strom left, Kafka right",
                case["ops"][i]
            );
            compared += 1;
            applied += usize::from(so["applied"].as_bool().unwrap());
        }
    }
    eprintln!("compared {compared} observations ({applied} applied operations) with Kafka 4.4");
    assert_eq!(compared, CASES * OPS);
    // Many generated operations are refused on purpose (unknown members, protocols nobody
    // shares, transitions from the wrong state); enough must apply to exercise the group.
    assert!(
        applied > CASES * OPS / 3,
        "too few generated operations applied: {applied}"
    );
}

//! Differential test of transactional offsets: Strom (the real service, runtime and shard over
//! an in-memory `__consumer_offsets` with one partition) against Kafka 4.4's own
//! `GroupCoordinatorShard` (run by `tests/offsets_oracle/TxnOffsetsOracle.java`), on generated
//! scenarios of simple groups mixing TxnOffsetCommit of two producers, their COMMIT and ABORT
//! markers, plain OffsetCommit, OffsetFetch with and without `require_stable`, OffsetDelete,
//! DeleteGroups, clock advances and expiry passes. Every answer, every record and every
//! marker's place in the log is compared.

mod offsets_common;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use offsets_common::*;
use serde_json::{json, Value};
use strom_coordinator_common::runtime::{TxnResult, WriteResult};
use strom_coordinator_common::timer::Clock;
use strom_group_coordinator::metadata::{GroupMetadataImage, TopicImage};
use strom_group_coordinator::offsets::expiry::cleanup_group_metadata;
use strom_group_coordinator::records::CoordinatorRecord;
use strom_group_coordinator::testing::MemPartitions;
use strom_group_coordinator::GroupCoordinatorService;
use strom_protocol::kafka::messages::offset_delete_request::{
    OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
};
use strom_protocol::kafka::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use strom_protocol::kafka::messages::*;
use uuid::Uuid;

const SEED: u64 = 0x7a0f_f5e7;
const SCENARIOS: usize = 200;
const OPS: usize = 30;
const START_MS: i64 = 1_700_000_000_000;
const RETENTION_MINUTES: i64 = 2;
const METADATA_MAX: usize = 6;
const GROUPS: [&str; 3] = ["g0", "g1", "g2"];
const TOPICS: [&str; 2] = ["t0", "t1"];
const TOPIC_PARTITIONS: i32 = 3;
const PRODUCERS: [i64; 2] = [100, 101];

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
    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len() as u64) as usize]
    }
}

fn partitions(r: &mut Rng) -> Vec<i32> {
    let mut ps: Vec<i32> = (0..TOPIC_PARTITIONS).filter(|_| r.chance(50)).collect();
    if ps.is_empty() {
        ps.push(r.below(TOPIC_PARTITIONS as u64) as i32);
    }
    ps
}

fn topics(r: &mut Rng) -> Vec<String> {
    let mut ts: Vec<String> = TOPICS
        .iter()
        .filter(|_| r.chance(50))
        .map(|s| s.to_string())
        .collect();
    if ts.is_empty() {
        ts.push(r.pick(&TOPICS).to_string());
    }
    ts
}

fn metadata(r: &mut Rng) -> Value {
    if r.chance(20) {
        return Value::Null;
    }
    let n = r.below(METADATA_MAX as u64 + 2);
    Value::String((0..n).map(|_| r.pick(&["a", "é", "-"])).collect())
}

/// Topics with partitions (partition, offset, leader epoch, metadata).
fn commit_topics(r: &mut Rng) -> Value {
    Value::Array(
        topics(r)
            .into_iter()
            .map(|t| {
                let ps: Vec<Value> = partitions(r)
                    .into_iter()
                    .map(|p| json!([p, r.below(1000), r.below(4) as i64 - 1, metadata(r)]))
                    .collect();
                json!([t, ps])
            })
            .collect(),
    )
}

fn gen_op(r: &mut Rng) -> Value {
    match r.below(100) {
        0..=24 => {
            let pid = PRODUCERS[r.below(2) as usize];
            let v = r.below(6);
            // From v3 the request names a member: mostly none (a simple consumer), sometimes
            // one the group does not have, or a generation without a member.
            let (member, generation) = match (v >= 3).then(|| r.below(10)) {
                Some(0) => ("m", 1),
                Some(1) => ("", 0),
                _ => ("", -1),
            };
            json!({"op": "txn_commit", "v": v, "pid": pid, "member": member, "generation": generation, "group": r.pick(&GROUPS), "topics": commit_topics(r)})
        }
        25..=39 => {
            let pid = PRODUCERS[r.below(2) as usize];
            json!({"op": "end_txn", "pid": pid, "commit": r.chance(60)})
        }
        40..=51 => {
            json!({"op": "commit", "v": 8, "group": r.pick(&GROUPS), "retention": -1, "topics": commit_topics(r)})
        }
        52..=74 => {
            let ts = if r.chance(40) {
                Value::Null
            } else {
                Value::Array(
                    topics(r)
                        .into_iter()
                        .map(|t| json!([t, partitions(r)]))
                        .collect(),
                )
            };
            json!({"op": "fetch", "group": r.pick(&GROUPS), "topics": ts, "stable": r.chance(60)})
        }
        75..=81 => {
            let ts: Vec<Value> = topics(r)
                .into_iter()
                .map(|t| json!([t, partitions(r)]))
                .collect();
            json!({"op": "delete_offsets", "group": r.pick(&GROUPS), "topics": ts})
        }
        82..=85 => {
            let gs: Vec<&str> = GROUPS.iter().copied().filter(|_| r.chance(40)).collect();
            json!({"op": "delete_groups", "groups": gs})
        }
        86..=93 => json!({"op": "advance", "ms": r.below(90_000)}),
        _ => json!({"op": "expire"}),
    }
}

struct ManualClock(AtomicI64);

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

fn canonical(r: &CoordinatorRecord) -> Value {
    match r {
        CoordinatorRecord::OffsetCommit(k, v) => json!([
            "oc",
            k.group,
            k.topic,
            k.partition,
            v.as_ref().map(|(ver, v)| json!([
                ver,
                v.offset,
                v.leader_epoch,
                v.metadata,
                v.commit_timestamp,
                v.expire_timestamp
            ]))
        ]),
        CoordinatorRecord::GroupMetadata(k, v) => json!(["gm", k.group, v.is_none()]),
        other => json!(["other", other.schema_name()]),
    }
}

fn s(v: &Value) -> String {
    v.as_str().expect("a string").to_string()
}

fn topic_parts(v: &Value) -> Vec<(String, Vec<i32>)> {
    v.as_array()
        .expect("topics")
        .iter()
        .map(|t| {
            (
                s(&t[0]),
                t[1].as_array()
                    .unwrap()
                    .iter()
                    .map(|p| p.as_i64().unwrap() as i32)
                    .collect(),
            )
        })
        .collect()
}

type Parts = Vec<(String, Vec<(i32, i64, i32, Option<String>)>)>;

fn commit_parts(v: &Value) -> Parts {
    v.as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                s(&t[0]),
                t[1].as_array()
                    .unwrap()
                    .iter()
                    .map(|p| {
                        (
                            p[0].as_i64().unwrap() as i32,
                            p[1].as_i64().unwrap(),
                            p[2].as_i64().unwrap() as i32,
                            p[3].as_str().map(str::to_string),
                        )
                    })
                    .collect(),
            )
        })
        .collect()
}

fn codes_json(topics: impl Iterator<Item = (String, i32, i16)>) -> Value {
    Value::Array(topics.map(|(t, p, c)| json!([t, p, c])).collect())
}

async fn apply_op(svc: &GroupCoordinatorService, clock: &ManualClock, op: &Value) -> Value {
    match op["op"].as_str().unwrap() {
        "advance" => {
            clock
                .0
                .fetch_add(op["ms"].as_i64().unwrap(), Ordering::SeqCst);
            Value::Null
        }
        "commit" => {
            let ts = commit_parts(&op["topics"]);
            let parts: Vec<(String, Vec<Part<'_>>)> = ts
                .iter()
                .map(|(t, ps)| {
                    (
                        t.clone(),
                        ps.iter()
                            .map(|(p, o, e, m)| (*p, *o, *e, m.as_deref()))
                            .collect(),
                    )
                })
                .collect();
            let refs: Vec<(&str, &[Part<'_>])> = parts
                .iter()
                .map(|(t, ps)| (t.as_str(), ps.as_slice()))
                .collect();
            let req = commit_req(op["group"].as_str().unwrap(), &refs).with_retention_time_ms(-1);
            let r = svc.offset_commit(&ctx(8), req).await;
            codes_json(commit_codes(&r).into_iter())
        }
        "txn_commit" => {
            let pid = op["pid"].as_i64().unwrap();
            let req = TxnOffsetCommitRequest::default()
                .with_transactional_id(TransactionalId(sb(&format!("tx-{pid}"))))
                .with_group_id(GroupId(sb(op["group"].as_str().unwrap())))
                .with_producer_id(ProducerId(pid))
                .with_producer_epoch(0)
                .with_member_id(sb(op["member"].as_str().unwrap()))
                .with_generation_id(op["generation"].as_i64().unwrap() as i32)
                .with_topics(
                    commit_parts(&op["topics"])
                        .into_iter()
                        .map(|(t, ps)| {
                            TxnOffsetCommitRequestTopic::default()
                                .with_name(TopicName(sb(&t)))
                                .with_partitions(
                                    ps.into_iter()
                                        .map(|(p, o, e, m)| {
                                            TxnOffsetCommitRequestPartition::default()
                                                .with_partition_index(p)
                                                .with_committed_offset(o)
                                                .with_committed_leader_epoch(e)
                                                .with_committed_metadata(m.as_deref().map(sb))
                                        })
                                        .collect(),
                                )
                        })
                        .collect(),
                );
            let r = svc
                .txn_offset_commit(&ctx(op["v"].as_i64().unwrap() as i16), req)
                .await;
            codes_json(r.topics.iter().flat_map(|t| {
                t.partitions
                    .iter()
                    .map(move |p| (t.name.0.to_string(), p.partition_index, p.error_code))
            }))
        }
        "end_txn" => {
            let result = if op["commit"].as_bool().unwrap() {
                TxnResult::Commit
            } else {
                TxnResult::Abort
            };
            svc.complete_transaction(0, op["pid"].as_i64().unwrap(), 0, 1, result, Duration::ZERO)
                .await
                .expect("marker written");
            Value::Null
        }
        "fetch" => {
            let ts = (!op["topics"].is_null()).then(|| topic_parts(&op["topics"]));
            let ts_ref: Option<Vec<(&str, &[i32])>> = ts.as_ref().map(|v| {
                v.iter()
                    .map(|(t, ps)| (t.as_str(), ps.as_slice()))
                    .collect()
            });
            let g = fetch_group(op["group"].as_str().unwrap(), ts_ref.as_deref());
            let stable = op["stable"].as_bool().unwrap();
            let r = svc.offset_fetch(&ctx(9), fetch_req(vec![g], stable)).await;
            let parts: Vec<Value> = fetched(&r, 0)
                .into_iter()
                .map(|(t, p, o, e, m, c)| json!([t, p, o, e, m, c]))
                .collect();
            json!([r.groups[0].error_code, parts])
        }
        "delete_offsets" => {
            let req = OffsetDeleteRequest::default()
                .with_group_id(GroupId(sb(op["group"].as_str().unwrap())))
                .with_topics(
                    topic_parts(&op["topics"])
                        .into_iter()
                        .map(|(t, ps)| {
                            OffsetDeleteRequestTopic::default()
                                .with_name(TopicName(sb(&t)))
                                .with_partitions(
                                    ps.into_iter()
                                        .map(|p| {
                                            OffsetDeleteRequestPartition::default()
                                                .with_partition_index(p)
                                        })
                                        .collect(),
                                )
                        })
                        .collect(),
                );
            let r = svc.offset_delete(&ctx(0), req).await;
            let parts: Vec<Value> = r
                .topics
                .iter()
                .flat_map(|t| {
                    t.partitions
                        .iter()
                        .map(move |p| json!([t.name.0.as_str(), p.partition_index, p.error_code]))
                })
                .collect();
            json!([r.error_code, parts])
        }
        "delete_groups" => {
            let req = DeleteGroupsRequest::default().with_groups_names(
                op["groups"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|g| GroupId(sb(g.as_str().unwrap())))
                    .collect(),
            );
            let r = svc.delete_groups(&ctx(2), req).await;
            Value::Array(
                r.results
                    .iter()
                    .map(|g| json!([g.group_id.0.as_str(), g.error_code]))
                    .collect(),
            )
        }
        "expire" => {
            svc.write("g0", |shard, _ctx| {
                Ok(WriteResult {
                    records: cleanup_group_metadata(shard),
                    response: (),
                })
            })
            .await
            .expect("expiry pass");
            Value::Null
        }
        other => panic!("unknown op {other}"),
    }
}

/// Runs one scenario against Strom; the same canonical answers the oracle prints (a marker
/// as `["marker", producer id, commit]` in its place in the log).
async fn run_strom(ops: &[Value]) -> Vec<Value> {
    let mut c = config();
    c.offsets_topic.num_partitions = 1;
    c.offsets_retention_ms = RETENTION_MINUTES * 60_000;
    // The scenario runs expiry itself.
    c.offsets_retention_check_interval_ms = 1_000_000_000_000;
    c.offset_metadata_max_bytes = METADATA_MAX;
    let mem = MemPartitions::new();
    let clock = Arc::new(ManualClock(AtomicI64::new(START_MS)));
    let svc = GroupCoordinatorService::with_clock(c, mem.clone(), mem.clone(), clock.clone());
    svc.on_new_metadata(GroupMetadataImage::new(TOPICS.iter().enumerate().map(
        |(i, t)| TopicImage {
            name: t.to_string(),
            id: Uuid::from_u128(i as u128 + 1),
            num_partitions: TOPIC_PARTITIONS,
            ..Default::default()
        },
    )));
    svc.on_elected(0, 0);
    while !svc.partitions().iter().any(|(p, ok)| *p == 0 && *ok) {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let tp = tp_of(&svc, "g0");
    let mut out = Vec::with_capacity(ops.len());
    for op in ops {
        let before = mem.records(&tp).len();
        let response = apply_op(&svc, &clock, op).await;
        let txn = mem.transactional_entries(&tp);
        let records: Vec<Value> = mem.records(&tp)[before..]
            .iter()
            .enumerate()
            .map(|(i, (k, v))| match txn.get(&((before + i) as i64)) {
                Some((p, Some(m))) => {
                    json!(["marker", p.producer_id, m.result == TxnResult::Commit])
                }
                _ => canonical(&CoordinatorRecord::decode(k, v.as_deref()).unwrap()),
            })
            .collect();
        out.push(json!({"response": response, "records": records}));
    }
    out
}

/// Orders what Kafka produces in hash-map order (fetch-all partitions, deletion and expiry
/// tombstones, DeleteGroups results) so both sides compare as sets there.
fn normalize(op: &Value, mut r: Value) -> Value {
    let kind = op["op"].as_str().unwrap();
    let sort = |v: &mut Value| {
        if let Some(a) = v.as_array_mut() {
            a.sort_by_key(|x| x.to_string());
        }
    };
    if !matches!(kind, "commit" | "txn_commit") {
        sort(&mut r["records"]);
    }
    match kind {
        "fetch" | "delete_offsets" => sort(&mut r["response"][1]),
        "delete_groups" => sort(&mut r["response"]),
        _ => {}
    }
    r
}

fn jars() -> Option<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    [
        root.join(".cache/kafka-4.4/libs"),
        PathBuf::from("/work/main/.cache/kafka-4.4/libs"),
    ]
    .into_iter()
    .find(|p| p.join("kafka-group-coordinator-4.4.0.jar").exists())
}

fn oracle(input: &Value) -> Option<Vec<Vec<Value>>> {
    let missing = |why: String| {
        if std::env::var_os("CI").is_some() {
            panic!("the Kafka 4.4 transactional offsets oracle cannot run: {why}");
        }
        eprintln!("skipping the differential test: {why}");
    };
    let Some(libs) = jars() else {
        missing("Kafka 4.4 jars not found (make kafka-ref-fetch)".into());
        return None;
    };
    let cp = format!("{}/*", libs.display());
    let dir = std::env::temp_dir().join(format!("strom-txn-offsets-oracle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/offsets_oracle");
    match Command::new("javac")
        .args(["-nowarn", "-d"])
        .arg(&dir)
        .args(["-cp", &cp])
        .arg(src.join("OffsetsOracle.java"))
        .arg(src.join("TxnOffsetsOracle.java"))
        .status()
    {
        Ok(st) if st.success() => {}
        Ok(st) => panic!("javac of the transactional offsets oracle failed: {st}"),
        Err(e) => {
            missing(format!("javac: {e}"));
            return None;
        }
    }
    let mut child = Command::new("java")
        .args(["-cp", &format!("{}:{cp}", dir.display())])
        .arg("TxnOffsetsOracle")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("java runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "the oracle failed: {}", out.status);
    Some(serde_json::from_slice(&out.stdout).expect("the oracle prints JSON"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactional_offsets_equal_kafkas_group_coordinator_shard() {
    let mut r = Rng(SEED);
    let scenarios: Vec<Vec<Value>> = (0..SCENARIOS)
        .map(|_| (0..OPS).map(|_| gen_op(&mut r)).collect())
        .collect();
    let input = json!({
        "start_ms": START_MS,
        "config": {
            "offset.metadata.max.bytes": METADATA_MAX.to_string(),
            "offsets.retention.minutes": RETENTION_MINUTES.to_string(),
        },
        "scenarios": scenarios,
    });
    let Some(expected) = oracle(&input) else {
        return;
    };
    assert_eq!(expected.len(), SCENARIOS);
    let (mut compared, mut unstable, mut materialised, mut refused) =
        (0usize, 0usize, 0usize, 0usize);
    for (i, (ops, want)) in scenarios.iter().zip(&expected).enumerate() {
        let got = run_strom(ops).await;
        for (j, op) in ops.iter().enumerate() {
            let g = normalize(op, got[j].clone());
            let w = normalize(op, want[j].clone());
            assert_eq!(
                g,
                w,
                "scenario {i} op {j}: {op}\nstrom: {g}\nkafka: {w}\nops so far: {}",
                Value::Array(ops[..=j].to_vec())
            );
            let text = w.to_string();
            unstable += text.matches(",88]").count();
            if op["op"] == "txn_commit" && (text.contains(",22]") || text.contains(",25]")) {
                refused += 1;
            }
            if op["op"] == "fetch" && !op["stable"].as_bool().unwrap() {
                materialised += 1;
            }
            compared += 1;
        }
    }
    eprintln!(
        "compared {compared} operations with Kafka 4.4 ({unstable} UNSTABLE_OFFSET_COMMIT answers, {materialised} plain fetches, {refused} refused members)"
    );
    assert!(refused > 10, "the scenarios name members ({refused})");
    assert_eq!(compared, SCENARIOS * OPS);
    assert!(
        unstable > 50,
        "the scenarios leave transactions open ({unstable})"
    );
}

//! Log compaction, differential against Apache Kafka 4.4: the same keyed workload — updates of a
//! small key set, tombstones, a plain, an idempotent and two transactional producers with
//! committed and aborted transactions, one record per batch — is written to a compacted topic
//! on Strom and on Kafka with the same topic configs. Each log is then rolled (large "pad"
//! records until a new segment starts) and left to its cleaner until the cleaner checkpoint
//! reaches the active segment and the partition's files stop changing; that is done twice,
//! so that a second clean can drop what the first one gave a delete horizon. Then:
//! - the records read back (read_uncommitted, from the beginning) are identical: offset, key,
//!   value;
//! - the batches in the segment files agree: offsets, record offsets, transactional / control
//!   flags, the KIP-534 delete-horizon flag, producer epoch and sequence (producer ids are
//!   compared by first appearance, since each broker hands out its own);
//! - the segment files start at the same offsets.
//!
//! `delete_retention_long`: tombstones and markers are kept (delete.retention.ms one day);
//! `delete_retention_tiny`: they are removed (1 s), which must happen to the same records.
//!
//! With `STROM_TEST_REFERENCE=kafka` both sides are Kafka 4.4 (checks that the workload and the
//! fixed point are deterministic). Without Java or Kafka's jars the tests are skipped.

mod common;
mod compaction_util;

use std::collections::HashMap;
use std::time::Duration;

use common::kafka_ref::{oracle_available, KafkaRef};
use common::Broker;
use compaction_util::*;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;

const TOPIC: &str = "compacted";
const KEYS: u64 = 30;
/// Workload steps before the fixed scenarios at its end (~1 KB per record: three segments).
const STEPS: u64 = 2400;
const PAD: usize = 300_000;

/// Broker settings on both sides: the cleaner wakes up often.
const BROKER_PROPS: &[&str] = &["log.cleaner.backoff.ms=100"];

fn topic_configs(delete_retention_ms: &str) -> Vec<(&'static str, String)> {
    vec![
        ("cleanup.policy", "compact".into()),
        // Kafka 4.x refuses segment.bytes below 1 MiB.
        ("segment.bytes", "1048576".into()),
        ("min.cleanable.dirty.ratio", "0.01".into()),
        ("min.compaction.lag.ms", "0".into()),
        ("delete.retention.ms", delete_retention_ms.into()),
    ]
}

/// Producers of the workload.
const PLAIN: usize = 0;
const IDEM: usize = 1;
const TX_A: usize = 2;
const TX_B: usize = 3;
const IDEM2: usize = 4;

enum Op {
    Put(usize, String, Option<String>),
    Txn(usize, Vec<(String, Option<String>)>, bool),
}

/// A small deterministic generator (Knuth's MMIX LCG).
struct Rng(u64);
impl Rng {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

fn value(key: &str, i: u64) -> String {
    let mut v = format!("{key}:{i}:");
    v.push_str(&"x".repeat(1000));
    v
}

fn workload() -> Vec<Op> {
    let mut rng = Rng(12);
    let mut ops = Vec::new();
    let key = |rng: &mut Rng| format!("key-{:02}", rng.next(KEYS));
    let val = |rng: &mut Rng, k: &str, i: u64| (rng.next(100) >= 20).then(|| value(k, i));
    // tx-b commits once early and aborts once at the very end, then is never used again.
    ops.push(Op::Txn(
        TX_B,
        vec![("key-00".into(), Some(value("key-00", 0)))],
        true,
    ));
    for i in 1..=STEPS {
        let r = rng.next(100);
        if r < 50 {
            let k = key(&mut rng);
            let v = val(&mut rng, &k, i);
            ops.push(Op::Put(PLAIN, k, v));
        } else if r < 92 {
            let k = key(&mut rng);
            let v = val(&mut rng, &k, i);
            ops.push(Op::Put(IDEM, k, v));
        } else {
            let n = 1 + rng.next(4);
            let recs = (0..n)
                .map(|j| {
                    // Some keys appear only inside transactions.
                    let k = if rng.next(4) == 0 {
                        format!("txkey-{:02}", rng.next(8))
                    } else {
                        key(&mut rng)
                    };
                    let v = val(&mut rng, &k, i * 10 + j);
                    (k, v)
                })
                .collect();
            ops.push(Op::Txn(TX_A, recs, rng.next(3) != 0));
        }
    }
    // An aborted transaction whose key exists nowhere else, and one that only deletes.
    ops.push(Op::Txn(
        TX_A,
        vec![("aborted-only".into(), Some(value("aborted-only", 1)))],
        false,
    ));
    ops.push(Op::Txn(TX_A, vec![("key-01".into(), None)], false));
    // A committed transaction whose one record is superseded right after.
    ops.push(Op::Txn(
        TX_A,
        vec![("key-02".into(), Some(value("key-02", 1)))],
        true,
    ));
    ops.push(Op::Put(PLAIN, "key-02".into(), Some(value("key-02", 2))));
    // A second idempotent producer whose only batch is superseded: its batch stays (empty) while
    // the producer is active.
    ops.push(Op::Put(IDEM2, "key-03".into(), Some(value("key-03", 1))));
    ops.push(Op::Put(PLAIN, "key-03".into(), Some(value("key-03", 2))));
    // A tombstone for a key that never had a value.
    ops.push(Op::Put(IDEM, "never-set".into(), None));
    // tx-b's last transaction is aborted.
    ops.push(Op::Txn(
        TX_B,
        vec![("key-04".into(), Some(value("key-04", 1)))],
        false,
    ));
    ops.push(Op::Put(PLAIN, "key-05".into(), Some(value("key-05", 1))));
    ops
}

/// What one side ended with.
struct Outcome {
    records: Vec<Got>,
    /// (segment base offset, its batches).
    segments: Vec<(i64, Vec<BatchFacts>)>,
    /// A copy of the first (cleaned) segment's files, for the dump tools.
    copy: tempfile::TempDir,
}

fn create_topic(t: &Target, configs: &[(&str, String)]) {
    let admin: AdminClient<DefaultClientContext> = t.config().create().expect("admin client");
    let mut nt = NewTopic::new(TOPIC, 1, TopicReplication::Fixed(1));
    for (k, v) in configs {
        nt = nt.set(k, v);
    }
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(20)));
    let res = common::block_on(admin.create_topics([&nt], &opts)).expect("CreateTopics");
    if let Err((n, code)) = &res[0] {
        panic!("{}: CreateTopics {n}: {code:?}", t.name);
    }
}

/// Writes "pad" records (one key, large values) until a segment starts after `last`, so that
/// every record up to `last` is in a segment the cleaner may clean. Returns the last pad's
/// offset; `next` is the expected next offset.
fn roll(t: &Target, p: &SyncProducer, last: i64, next: &mut i64) -> i64 {
    let dir = t.partition_dir(TOPIC, 0);
    let pad = "p".repeat(PAD);
    for i in 0..20 {
        let off = p.send(TOPIC, b"pad", Some(format!("{i}:{pad}").as_bytes()));
        assert_eq!(off, *next, "{}: pad offset", t.name);
        *next += 1;
        if segments(&dir).last().map(|s| s.0).unwrap_or(0) > last {
            return off;
        }
    }
    panic!("{}: no new segment after 20 pad records", t.name);
}

fn run(t: &Target, delete_retention_ms: &str) -> Outcome {
    create_topic(t, &topic_configs(delete_retention_ms));
    let producers = [
        SyncProducer::new(t, Kind::Plain, None),
        SyncProducer::new(t, Kind::Idempotent, None),
        SyncProducer::new(t, Kind::Transactional, Some("compaction-diff-a")),
        SyncProducer::new(t, Kind::Transactional, Some("compaction-diff-b")),
        SyncProducer::new(t, Kind::Idempotent, None),
    ];
    let c = reader(t);
    let mut next = 0i64;
    for op in workload() {
        match op {
            Op::Put(p, k, v) => {
                let off = producers[p].send(TOPIC, k.as_bytes(), v.as_deref().map(str::as_bytes));
                assert_eq!(off, next, "{}: offset of a record", t.name);
                next += 1;
            }
            Op::Txn(p, recs, commit) => {
                producers[p].begin();
                for (k, v) in recs {
                    let off =
                        producers[p].send(TOPIC, k.as_bytes(), v.as_deref().map(str::as_bytes));
                    assert_eq!(off, next, "{}: offset of a transactional record", t.name);
                    next += 1;
                }
                producers[p].end(commit);
                next += 1; // the marker
                wait_hw(&c, TOPIC, next);
            }
        }
    }
    let last_workload = next - 1;
    eprintln!("{}: workload written, offsets 0..={last_workload}", t.name);
    let pad1 = roll(t, &producers[PLAIN], last_workload, &mut next);
    let cp1 = wait_cleaned(t, TOPIC, Duration::from_secs(3), Duration::from_secs(180));
    eprintln!("{}: cleaned to {cp1} (pads up to {pad1})", t.name);
    // Past a tiny delete.retention.ms, a second clean drops what the first gave a horizon.
    std::thread::sleep(Duration::from_millis(1500));
    let pad2 = roll(t, &producers[PLAIN], pad1, &mut next);
    let cp2 = wait_cleaned(t, TOPIC, Duration::from_secs(3), Duration::from_secs(180));
    eprintln!("{}: cleaned to {cp2} (pads up to {pad2})", t.name);
    let records = read_until(&c, TOPIC, pad2, Duration::from_secs(60));
    let segs = segments(&t.partition_dir(TOPIC, 0))
        .into_iter()
        .map(|(base, path)| (base, batches(&path)))
        .collect();
    let copy = tempfile::tempdir().unwrap();
    for ext in ["log", "index", "timeindex"] {
        let name = format!("{:020}.{ext}", 0);
        std::fs::copy(
            t.partition_dir(TOPIC, 0).join(&name),
            copy.path().join(&name),
        )
        .unwrap_or_else(|e| panic!("{}: copy {name}: {e}", t.name));
    }
    Outcome {
        records,
        segments: segs,
        copy,
    }
}

/// `strom dump-log` and Kafka's DumpLogSegments print the same for a cleaned segment (its
/// batches with delete horizons, empty batches, kept markers) and its indexes.
fn dump_tools_agree(o: &Outcome, name: &str) {
    let seg = |ext: &str| o.copy.path().join(format!("{:020}.{ext}", 0));
    let files = format!(
        "{},{},{}",
        seg("log").display(),
        seg("index").display(),
        seg("timeindex").display()
    );
    let args = ["--files", files.as_str(), "--deep-iteration"];
    let strom = std::process::Command::new(env!("CARGO_BIN_EXE_strom"))
        .arg("dump-log")
        .args(args)
        .env("RUST_LOG", "off")
        .output()
        .expect("run strom dump-log");
    let kafka = std::process::Command::new(
        common::kafka_ref::repo_root().join("scripts/kafka-dump-log.sh"),
    )
    .args(args)
    .output()
    .expect("run kafka-dump-log.sh");
    let (so, ko) = (
        String::from_utf8_lossy(&strom.stdout),
        String::from_utf8_lossy(&kafka.stdout),
    );
    assert!(
        kafka.status.success(),
        "{name}: Kafka's tool failed: {}",
        String::from_utf8_lossy(&kafka.stderr)
    );
    for (i, (a, b)) in so.lines().zip(ko.lines()).enumerate() {
        assert_eq!(
            a, b,
            "{name}'s cleaned segment: line {i} of strom dump-log / Kafka's tool"
        );
    }
    assert_eq!(
        so.lines().count(),
        ko.lines().count(),
        "{name}: dump line counts"
    );
}

/// A record for messages: its value cut to the part before the padding.
fn show(g: &Got) -> String {
    let s = |b: &Option<Vec<u8>>| match b {
        None => "null".to_string(),
        Some(v) => {
            let t = String::from_utf8_lossy(v);
            t.chars().take(24).collect::<String>() + &format!("..({} B)", v.len())
        }
    };
    format!("{} {} {}", g.offset, s(&g.key), s(&g.value))
}

/// Batches with producer ids replaced by their order of first appearance.
fn normalized(segs: &[(i64, Vec<BatchFacts>)]) -> Vec<(i64, Vec<BatchFacts>)> {
    let mut ids: HashMap<i64, i64> = HashMap::new();
    segs.iter()
        .map(|(base, bs)| {
            let bs = bs
                .iter()
                .map(|b| {
                    let mut b = b.clone();
                    if b.producer_id >= 0 {
                        let n = ids.len() as i64;
                        b.producer_id = *ids.entry(b.producer_id).or_insert(n);
                    }
                    b
                })
                .collect();
            (*base, bs)
        })
        .collect()
}

fn compare(strom: &Outcome, kafka: &Outcome) {
    let first_diff = strom
        .records
        .iter()
        .zip(&kafka.records)
        .position(|(a, b)| a != b);
    if let Some(i) = first_diff {
        panic!(
            "records differ first at index {i}: strom {} / kafka {}\nstrom around: {:?}\nkafka around: {:?}",
            show(&strom.records[i]),
            show(&kafka.records[i]),
            strom.records[i.saturating_sub(3)..(i + 3).min(strom.records.len())]
                .iter()
                .map(show)
                .collect::<Vec<_>>(),
            kafka.records[i.saturating_sub(3)..(i + 3).min(kafka.records.len())]
                .iter()
                .map(show)
                .collect::<Vec<_>>(),
        );
    }
    assert_eq!(
        strom.records.len(),
        kafka.records.len(),
        "record counts differ (strom last {:?}, kafka last {:?})",
        strom.records.last().map(show),
        kafka.records.last().map(show)
    );
    let (s, k) = (normalized(&strom.segments), normalized(&kafka.segments));
    let sb: Vec<_> = s.iter().flat_map(|(_, b)| b.iter()).collect();
    let kb: Vec<_> = k.iter().flat_map(|(_, b)| b.iter()).collect();
    if let Some(i) = sb.iter().zip(&kb).position(|(a, b)| a != b) {
        panic!(
            "batches differ first at index {i}:\nstrom {:?}\nkafka {:?}",
            sb[i], kb[i]
        );
    }
    assert_eq!(
        sb.len(),
        kb.len(),
        "batch counts differ: strom {} kafka {}",
        sb.len(),
        kb.len()
    );
    let bases = |v: &[(i64, Vec<BatchFacts>)]| v.iter().map(|s| s.0).collect::<Vec<_>>();
    assert_eq!(
        bases(&s),
        bases(&k),
        "segment base offsets differ (strom, kafka)"
    );
}

/// Batch-level facts of one side, for the test's output.
fn summary(o: &Outcome) -> String {
    let all: Vec<&BatchFacts> = o.segments.iter().flat_map(|(_, b)| b.iter()).collect();
    let n = |f: &dyn Fn(&BatchFacts) -> bool| all.iter().filter(|b| f(b)).count();
    format!(
        "{} batches: {} control, {} empty, {} transactional data, {} with a delete horizon, \
         {} tombstones read",
        all.len(),
        n(&|b| b.control),
        n(&|b| b.count == 0),
        n(&|b| b.transactional && !b.control && b.count > 0),
        n(&|b| b.delete_horizon),
        o.records.iter().filter(|g| g.value.is_none()).count()
    )
}

/// Sanity of one side on its own: offsets strictly increase, and below the first pad no key
/// appears twice (the cleaned part holds one record per key).
fn check_one(o: &Outcome, name: &str) {
    assert!(
        o.records.windows(2).all(|w| w[0].offset < w[1].offset),
        "{name}: offsets not increasing"
    );
    let first_pad = o
        .records
        .iter()
        .position(|g| g.key.as_deref() == Some(b"pad"))
        .expect("a pad record");
    let mut seen = std::collections::HashSet::new();
    for g in &o.records[..first_pad] {
        assert!(
            seen.insert(g.key.clone()),
            "{name}: key {:?} twice in the cleaned part (offset {})",
            g.key
                .as_ref()
                .map(|k| String::from_utf8_lossy(k).into_owned()),
            g.offset
        );
    }
}

/// Each test runs four broker processes' worth of work on a small machine: one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn differential(delete_retention_ms: &str) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if let Err(why) = oracle_available() {
        eprintln!("skipped: {why}");
        return;
    }
    let strom = Broker::start_with(BROKER_PROPS);
    let kafka = KafkaRef::start_with_props(&(BROKER_PROPS.join("\n") + "\n"));
    let ts = Target {
        name: if common::reference_kafka() {
            "kafka(as strom)"
        } else {
            "strom"
        },
        bootstrap: strom.bootstrap(),
        log_dir: strom.data_dir(),
    };
    let tk = Target {
        name: "kafka",
        bootstrap: kafka.bootstrap(),
        log_dir: kafka.data_dir(),
    };
    let (os, ok) = std::thread::scope(|s| {
        let a = s.spawn(|| run(&ts, delete_retention_ms));
        let b = s.spawn(|| run(&tk, delete_retention_ms));
        (a.join(), b.join())
    });
    let ok = ok.unwrap_or_else(|e| {
        eprintln!(
            "kafka server log: {}",
            std::fs::read_to_string(kafka.server_log()).unwrap_or_default()
        );
        std::panic::resume_unwind(e)
    });
    let os = os.unwrap_or_else(|e| std::panic::resume_unwind(e));
    eprintln!(
        "strom: {} records in {} segments; kafka: {} records in {} segments",
        os.records.len(),
        os.segments.len(),
        ok.records.len(),
        ok.segments.len()
    );
    for (name, o) in [(ts.name, &os), ("kafka", &ok)] {
        eprintln!("{name}: {}", summary(o));
    }
    check_one(&ok, "kafka");
    compare(&os, &ok);
    check_one(&os, ts.name);
    dump_tools_agree(&ok, "kafka");
    dump_tools_agree(&os, ts.name);
}

#[test]
fn delete_retention_long() {
    differential("86400000");
}

#[test]
fn delete_retention_tiny() {
    differential("1000");
}

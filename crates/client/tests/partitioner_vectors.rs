//! Vectors from kafka-clients 4.4 (tests/partitioner_oracle/PartitionerOracle.java, which runs
//! Kafka's own `Utils.murmur2`, `BuiltInPartitioner` and `RoundRobinPartitioner`) against
//! strom's partitioner on seeded generated inputs: keys of every length, sticky sequences
//! under batch sizes, partial appends with switching enabled or not, load stats from queue
//! sizes (with partitions left out), partitions losing and regaining leaders; round-robin
//! over changing availability. Both sides draw the same random values. Plus the producer
//! placing records through a real broker with each `partitioner.*` setting.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;
use strom_client::partitioner::{
    murmur2, partition_for_key, to_positive, BuiltInPartitioner, RoundRobinPartitioner,
    TopicPartitions,
};

fn libs() -> Option<PathBuf> {
    let dir = std::env::var_os("STROM_KAFKA_LIBS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.cache/kafka-4.4/libs")
        });
    dir.join("kafka-clients-4.4.0.jar").exists().then_some(dir)
}

fn csv(v: &[i32]) -> String {
    if v.is_empty() {
        "-".into()
    } else {
        v.iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join(",")
    }
}

fn subset(rng: &mut StdRng, n: i32, p_empty: f64) -> Vec<i32> {
    if rng.random_bool(p_empty) {
        return Vec::new();
    }
    let keep = rng.random_range(0.3..=1.0);
    let v: Vec<i32> = (0..n).filter(|_| rng.random_bool(keep)).collect();
    if v.is_empty() {
        vec![rng.random_range(0..n)]
    } else {
        v
    }
}

enum Op {
    Peek,
    Update(usize, bool),
    Stats(Vec<i32>, Vec<i32>, usize),
    NoStats,
    Available(Vec<i32>),
}

fn rack_name(r: i32) -> Option<String> {
    (r >= 0).then(|| format!("r{r}"))
}

/// Runs a sticky scenario on strom's partitioner: the partition after each peek and update.
/// `rack`: -1 not rack-aware, else rack-aware in rack "r<rack>"; `racks[p]`: the rack number
/// of partition p's leader (-1 none).
fn run_sticky(
    batch: usize,
    n: i32,
    avail: &[i32],
    randoms: &[i32],
    (rack, racks): (i32, &[i32]),
    ops: &[Op],
) -> Vec<i64> {
    let names: Vec<Option<String>> = racks.iter().map(|&r| rack_name(r)).collect();
    let rack_of = |p: i32| names.get(p as usize).and_then(|r| r.as_deref());
    // Shared so that the values the partitioner drew can be checked afterwards.
    let drawn = Arc::new(Mutex::new(0usize));
    let (d, values) = (drawn.clone(), randoms.to_vec());
    let mut bp = BuiltInPartitioner::with_random(
        batch,
        Box::new(move || {
            let mut i = d.lock().unwrap();
            *i += 1;
            values.get(*i - 1).copied().unwrap_or(0)
        }),
    );
    if rack >= 0 {
        bp = bp.rack_aware(&format!("r{rack}"));
    }
    let mut avail = avail.to_vec();
    let mut out = Vec::new();
    for op in ops {
        let avail_racks: Vec<Option<&str>> = avail.iter().map(|&p| rack_of(p)).collect();
        let view = TopicPartitions {
            num_partitions: n,
            available: &avail,
            leader_racks: &avail_racks,
        };
        match op {
            Op::Peek => out.push(bp.peek_current_partition(view) as i64),
            Op::Update(bytes, enable) => {
                bp.peek_current_partition(view);
                bp.update_partition_info(*bytes, view, *enable);
                out.push(bp.peek_current_partition(view) as i64);
            }
            Op::Stats(sizes, ids, len) => {
                let r: Vec<Option<&str>> = ids.iter().map(|&p| rack_of(p)).collect();
                bp.update_partition_load_stats_with_racks(Some(sizes), ids, &r, *len)
            }
            Op::NoStats => bp.update_partition_load_stats(None, &[], 0),
            Op::Available(a) => avail = a.clone(),
        }
    }
    // Java fails when it runs out of values; so must this side not have.
    assert!(
        *drawn.lock().unwrap() <= randoms.len(),
        "out of random values"
    );
    out
}

#[test]
fn partitioner_matches_kafka_clients() {
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
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/partitioner_oracle/PartitionerOracle.java");
    match Command::new("javac")
        .args(["-nowarn", "-cp", &cp, "-d"])
        .arg(classes.path())
        .arg(&src)
        .status()
    {
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
            "org.apache.kafka.clients.producer.internals.PartitionerOracle",
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
        let v: Value =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("oracle output {out:?}: {e}"));
        assert!(v.get("error").is_none(), "oracle error on {line}: {v}");
        v
    };
    let outs = |v: &Value| -> Vec<i64> {
        v["out"]
            .as_array()
            .expect("out")
            .iter()
            .map(|x| x.as_i64().expect("int"))
            .collect()
    };
    let mut rng = StdRng::seed_from_u64(0x0794_ad47);

    // Keys: murmur2 and the keyed partition.
    let mut keys = 0;
    for _ in 0..3000 {
        let len = if rng.random_bool(0.2) {
            rng.random_range(0..4)
        } else {
            rng.random_range(0..80)
        };
        let key: Vec<u8> = (0..len).map(|_| rng.random()).collect();
        let n = rng.random_range(1..=200);
        let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
        let hex = if hex.is_empty() { "-".to_string() } else { hex };
        let v = ask(format!("K {n} {hex}"));
        assert_eq!(v["murmur2"].as_i64(), Some(murmur2(&key) as i64), "{hex}");
        assert_eq!(
            v["partition"].as_i64(),
            Some(partition_for_key(&key, n) as i64),
            "{hex} % {n}"
        );
        keys += 1;
    }

    // Sticky sequences.
    let (mut sticky_cases, mut sticky_picks, mut switches, mut weighted) = (0, 0, 0, 0);
    let mut rack_aware = 0;
    for _ in 0..1500 {
        let batch = [1usize, 16, 100, 1000, 16384][rng.random_range(0..5)];
        let n = rng.random_range(1..=12);
        let avail = subset(&mut rng, n, 0.05);
        // Half the sequences rack-aware, in one of three racks; leaders spread over them
        // (some without a rack).
        let rack = if rng.random_bool(0.5) {
            rng.random_range(0..3)
        } else {
            -1
        };
        let racks: Vec<i32> = (0..n).map(|_| rng.random_range(-1..3)).collect();
        if rack >= 0 {
            rack_aware += 1;
        }
        let nops = rng.random_range(5..60);
        let mut ops = Vec::new();
        let mut tokens = Vec::new();
        for _ in 0..nops {
            let r = rng.random_range(0..100);
            let op = if r < 15 {
                Op::Peek
            } else if r < 70 {
                let bytes = rng.random_range(0..=batch + batch / 2);
                Op::Update(bytes, rng.random_bool(0.6))
            } else if r < 85 {
                let a = subset(&mut rng, n, 0.0);
                let sizes: Vec<i32> = a
                    .iter()
                    .map(|_| {
                        if rng.random_bool(0.3) {
                            0
                        } else {
                            rng.random_range(0..12)
                        }
                    })
                    .collect();
                let len = if rng.random_bool(0.7) {
                    a.len()
                } else {
                    rng.random_range(0..=a.len())
                };
                Op::Stats(sizes, a, len)
            } else if r < 90 {
                Op::NoStats
            } else {
                Op::Available(subset(&mut rng, n, 0.1))
            };
            tokens.push(match &op {
                Op::Peek => "P".to_string(),
                Op::Update(b, e) => format!("U:{b}:{}", *e as u8),
                Op::Stats(s, ids, len) => format!("L:{}:{}:{len}", csv(s), csv(ids)),
                Op::NoStats => "N".to_string(),
                Op::Available(a) => format!("A:{}", csv(a)),
            });
            if let Op::Stats(s, _, len) = &op {
                if *len >= 1 && s.len() >= 2 {
                    weighted += 1;
                }
            }
            ops.push(op);
        }
        // At most one draw per op plus the first pick.
        let randoms: Vec<i32> = (0..2 * nops + 2)
            .map(|_| to_positive(rng.random::<i32>()))
            .collect();
        let v = ask(format!(
            "S {batch} {n} {} {} {rack} {} {}",
            csv(&avail),
            csv(&randoms),
            csv(&racks),
            tokens.join(" ")
        ));
        let theirs = outs(&v);
        let ours = run_sticky(batch, n, &avail, &randoms, (rack, &racks), &ops);
        assert_eq!(
            ours, theirs,
            "sticky: batch {batch}, {n} partitions, available {avail:?}, rack {rack}, leader \
             racks {racks:?}, ops {tokens:?}"
        );
        sticky_picks += ours.len();
        switches += ours.windows(2).filter(|w| w[0] != w[1]).count();
        sticky_cases += 1;
    }

    // Round-robin.
    let mut rr_cases = 0;
    let mut rr_picks = 0;
    for _ in 0..500 {
        let n = rng.random_range(1..=10);
        let mut tokens = Vec::new();
        let mut script: Vec<(Vec<i32>, usize)> = Vec::new();
        let mut avail: Vec<i32> = Vec::new();
        for _ in 0..rng.random_range(1..6) {
            if rng.random_bool(0.6) {
                avail = subset(&mut rng, n, 0.15);
                tokens.push(format!("A:{}", csv(&avail)));
            }
            let count = rng.random_range(1..25);
            tokens.push(format!("X:{count}"));
            script.push((avail.clone(), count));
        }
        let theirs = outs(&ask(format!("R {n} {}", tokens.join(" "))));
        let mut rr = RoundRobinPartitioner::default();
        let mut ours = Vec::new();
        for (a, count) in &script {
            for _ in 0..*count {
                ours.push(rr.partition(
                    "t",
                    TopicPartitions {
                        num_partitions: n,
                        available: a,
                        leader_racks: &[],
                    },
                ) as i64);
            }
        }
        assert_eq!(ours, theirs, "round-robin: {n} partitions, {tokens:?}");
        rr_picks += ours.len();
        rr_cases += 1;
    }
    drop(to_java);
    let _ = java.wait();
    println!(
        "compared: {keys} keys, {sticky_cases} sticky sequences ({sticky_picks} picks, \
         {switches} switches, {weighted} load-stat updates, {rack_aware} rack-aware), {rr_cases} \
         round-robin sequences \
         ({rr_picks} picks)"
    );
    assert_eq!(keys, 3000);
    assert_eq!(sticky_cases, 1500);
    assert_eq!(rr_cases, 500);
    // The sequences exercise switching and weighting, not only the first pick.
    assert!(switches > 5000, "{switches} switches");
    assert!(weighted > 2000, "{weighted} load-stat updates");
    assert!(rack_aware > 500, "{rack_aware} rack-aware sequences");
}

/// Partitions the producer placed `records` (value `size` bytes, keyed when `keyed`) at, in
/// send order, on a fresh 4-partition topic.
async fn placed(
    b: &common::Broker,
    topic: &str,
    props: &[(&str, &str)],
    records: usize,
    size: usize,
    keyed: bool,
) -> Vec<i32> {
    use strom_client::{Admin, Client, ClientConfig, Producer, ProducerConfig};
    let c = Client::connect(ClientConfig::new(&b.bootstrap()))
        .await
        .expect("connect");
    Admin::new(c.clone())
        .create_topic(topic, 4, 1, &[], false)
        .await
        .expect("create topic");
    let mut all: Vec<(&str, &str)> = vec![("bootstrap.servers", "unused:1")];
    all.extend_from_slice(props);
    let producer = Producer::new(c, ProducerConfig::from_properties(&all).expect("config"));
    let futs: Vec<_> = (0..records)
        .map(|i| {
            producer.send(
                topic,
                None,
                keyed.then(|| bytes::Bytes::from(format!("key-{i}"))),
                Some(bytes::Bytes::from(vec![b'v'; size])),
                Vec::new(),
            )
        })
        .collect();
    producer.flush().await.expect("flush");
    let mut out = Vec::new();
    for f in futs {
        out.push(f.await.expect("send").0);
    }
    out
}

#[test]
fn the_producer_places_records_by_its_partitioner_settings() {
    let b = common::Broker::start();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        // Unkeyed, batch.size 2000: stints of at least 2000 bytes of ~121-byte records, over
        // every partition in the end.
        let parts = placed(&b, "sticky", &[("batch.size", "2000")], 1500, 100, false).await;
        let mut runs: Vec<usize> = Vec::new();
        for (i, p) in parts.iter().enumerate() {
            if i > 0 && parts[i - 1] == *p {
                *runs.last_mut().unwrap() += 1;
            } else {
                runs.push(1);
            }
        }
        let min_stint = 2000 / (61 + 121);
        assert!(
            runs[..runs.len() - 1].iter().all(|&n| n >= min_stint),
            "{runs:?}"
        );
        assert!(runs.len() >= 10, "{runs:?}");
        for p in 0..4 {
            assert!(parts.contains(&p), "partition {p} never chosen: {runs:?}");
        }
        // partitioner.ignore.keys: keyed records are sticky too (50 small records, one batch).
        let parts = placed(
            &b,
            "ignore-keys",
            &[("partitioner.ignore.keys", "true")],
            50,
            10,
            true,
        )
        .await;
        assert!(parts.iter().all(|&p| p == parts[0]), "{parts:?}");
        // Without it the keys are hashed.
        let parts = placed(&b, "hashed", &[], 50, 10, true).await;
        let expect: Vec<i32> = (0..50)
            .map(|i| partition_for_key(format!("key-{i}").as_bytes(), 4))
            .collect();
        assert_eq!(parts, expect);
        // Round-robin, keys or not.
        let parts = placed(
            &b,
            "round-robin",
            &[(
                "partitioner.class",
                "org.apache.kafka.clients.producer.RoundRobinPartitioner",
            )],
            12,
            10,
            true,
        )
        .await;
        assert_eq!(parts, [0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3]);
    });
}

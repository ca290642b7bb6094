//! `strom groups` against Kafka 4.4's own `kafka-consumer-groups.sh` (ConsumerGroupCommand,
//! run from the jars in `.cache/kafka-4.4/libs`) on the same broker: the same arguments must
//! print the same tables and messages.
//!
//! The comparison runs twice: on a Strom broker, and on Apache Kafka 4.4 started from the same
//! jars (`scripts/kafka-ref.sh`) or the broker at `STROM_GROUPS_TEST_BOOTSTRAP` when that is
//! set. Without Java or the jars the tests fail when `CI` is set and are skipped otherwise.
//!
//! The comparison, precisely: both tools' stdout is cut into lines; each line is split into
//! whitespace-separated tokens (so column widths and trailing blanks do not matter, while every
//! column value does); empty lines are dropped; and the two multisets of token lines must be
//! equal (Kafka prints several tables in hash-map order, so row order is not compared). Of
//! stderr, the lines Kafka's tool prints as notices ("Consumer group ... has no active
//! members.", "Warning: ...", "WARN: ...") are compared the same way; its logging and stack
//! traces are not. When the two tools must act on different groups (executing resets and
//! deletes), each output has its own group names replaced by `<G1>`, `<G2>`, ... first.

mod common;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use common::kafka_ref::{libs, oracle_available, KafkaRef};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;
use strom_client::{Admin, Client, ClientConfig, Producer, ProducerConfig};

/// What one tool printed.
#[derive(Debug, Clone)]
struct Run {
    stdout: String,
    stderr: String,
}

fn kafka_tool(bootstrap: &str, args: &[String]) -> Run {
    let cfg = std::env::temp_dir().join("strom-cli-groups-log4j2.properties");
    let _ = std::fs::write(&cfg, "status = off\nrootLogger.level = OFF\n");
    let out = Command::new("java")
        .args(["-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"])
        .arg(format!("-Dlog4j2.configurationFile={}", cfg.display()))
        .arg("-cp")
        .arg(format!("{}/*", libs().display()))
        .arg("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand")
        .arg("--bootstrap-server")
        .arg(bootstrap)
        .args(args)
        .output()
        .expect("run java");
    Run {
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn strom_tool(bootstrap: &str, args: &[String]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_strom"))
        .arg("groups")
        .arg("--bootstrap-server")
        .arg(bootstrap)
        .args(args)
        .output()
        .expect("run strom");
    Run {
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The normal form described at the top: a sorted list of token lines, with the given group
/// names replaced by placeholders.
fn normalize(text: &str, groups: &[&str]) -> Vec<Vec<String>> {
    let mut lines: Vec<Vec<String>> = text
        .lines()
        .map(|l| {
            l.split_whitespace()
                .map(|t| {
                    let mut t = t.to_string();
                    for (i, g) in groups.iter().enumerate() {
                        if t.trim_matches(|c| {
                            c == '\'' || c == ',' || c == '.' || c == '(' || c == ')'
                        }) == *g
                        {
                            t = t.replace(g, &format!("<G{}>", i + 1));
                        }
                    }
                    t
                })
                .collect::<Vec<_>>()
        })
        .filter(|l: &Vec<String>| !l.is_empty())
        .collect();
    lines.sort();
    lines
}

fn notices(stderr: &str) -> String {
    stderr
        .lines()
        .filter(|l| {
            l.starts_with("Consumer group ")
                || l.starts_with("Warning: ")
                || l.starts_with("WARN: ")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn assert_same(case: &str, kafka: &Run, kafka_groups: &[&str], strom: &Run, strom_groups: &[&str]) {
    if std::env::var_os("STROM_GROUPS_TEST_VERBOSE").is_some() {
        eprintln!("== {case}\n{}{}", strom.stdout, notices(&strom.stderr));
    }
    let k = normalize(&kafka.stdout, kafka_groups);
    let s = normalize(&strom.stdout, strom_groups);
    assert_eq!(
        s, k,
        "{case}: stdout differs\n--- kafka-consumer-groups:\n{}\n--- strom groups:\n{}",
        kafka.stdout, strom.stdout
    );
    let kn = normalize(&notices(&kafka.stderr), kafka_groups);
    let sn = normalize(&notices(&strom.stderr), strom_groups);
    assert_eq!(
        sn, kn,
        "{case}: notices differ\n--- kafka:\n{}\n--- strom:\n{}",
        kafka.stderr, strom.stderr
    );
    assert!(
        !k.is_empty() || !kn.is_empty(),
        "{case}: Kafka printed nothing to compare"
    );
}

fn args(s: &str) -> Vec<String> {
    s.split_whitespace().map(String::from).collect()
}

/// A consumer in group `group` (classic or consumer protocol) subscribed to `topic`, polled
/// until it owns partitions and has read `until` records, then committed.
fn member(bootstrap: &str, group: &str, protocol: &str, topic: &str, until: usize) -> BaseConsumer {
    let mut cfg = rdkafka::config::ClientConfig::new();
    cfg.set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("client.id", format!("{group}-client"))
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("group.protocol", protocol);
    if protocol == "classic" {
        cfg.set("session.timeout.ms", "30000");
    }
    let c: BaseConsumer = cfg.create().expect("consumer");
    c.subscribe(&[topic]).expect("subscribe");
    let deadline = Instant::now() + Duration::from_secs(40);
    let mut read = 0;
    while read < until || c.assignment().map(|a| a.count()).unwrap_or(0) == 0 {
        assert!(
            Instant::now() < deadline,
            "{group}: no assignment/records in time"
        );
        if let Some(Ok(m)) = c.poll(Duration::from_millis(200)) {
            let _ = m.offset();
            read += 1;
        }
    }
    c.commit_consumer_state(CommitMode::Sync).expect("commit");
    c
}

/// The two comparisons run one after the other: each starts JVMs (Kafka's tool per case, and
/// a Kafka broker), and together on two cores Kafka's start-up can exceed its wait.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Whether Kafka's tool can run here; without it the tests fail under `CI` and skip otherwise.
fn oracle_or_skip() -> bool {
    if let Err(why) = oracle_available() {
        if std::env::var_os("CI").is_some() {
            panic!("cli_groups needs Kafka 4.4 and Java: {why}");
        }
        eprintln!("skipping cli_groups: {why}");
        return false;
    }
    true
}

/// Both tools against a Strom broker: Strom's group APIs must give Kafka's own tool what it
/// needs, and `strom groups` must print what that tool prints.
#[test]
fn groups_tool_matches_kafka_consumer_groups_on_strom() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !oracle_or_skip() {
        return;
    }
    let broker = common::Broker::start_with(&["group.initial.rebalance.delay.ms=0"]);
    compare_tools(&broker.bootstrap());
}

/// Both tools against Apache Kafka 4.4 (or `STROM_GROUPS_TEST_BOOTSTRAP`): `strom groups`
/// against the reference broker, so a difference is the tool's and not the broker's.
#[test]
fn groups_tool_matches_kafka_consumer_groups_on_kafka() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !oracle_or_skip() {
        return;
    }
    let kafka;
    let bootstrap = match std::env::var("STROM_GROUPS_TEST_BOOTSTRAP") {
        Ok(b) if !b.is_empty() => b,
        _ => {
            kafka = KafkaRef::start();
            format!("127.0.0.1:{}", kafka.port)
        }
    };
    compare_tools(&bootstrap);
}

fn compare_tools(bootstrap: &str) {
    let started = Instant::now();
    let bootstrap = bootstrap.to_string();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let client = rt
        .block_on(Client::connect(ClientConfig::new(&bootstrap)))
        .expect("connect");
    let admin = Admin::new(client.clone());
    // Names unique per run, so the test can be re-run against a long-lived broker.
    let run = format!(
        "{:x}",
        std::process::id() ^ (started.elapsed().as_nanos() as u32)
    );
    let t1 = format!("cg-a-{run}");
    let t2 = format!("cg-b-{run}");
    rt.block_on(async {
        admin
            .create_topic(&t1, 3, 1, &[], false)
            .await
            .expect("create t1");
        admin
            .create_topic(&t2, 2, 1, &[], false)
            .await
            .expect("create t2");
        let producer = Producer::new(client.clone(), ProducerConfig::default());
        let mut deliveries = Vec::new();
        for i in 0..30i32 {
            deliveries.push(producer.send(
                &t1,
                Some(i % 3),
                None,
                Some(format!("a{i}").into()),
                vec![],
            ));
        }
        for i in 0..10i32 {
            deliveries.push(producer.send(
                &t2,
                Some(i % 2),
                None,
                Some(format!("b{i}").into()),
                vec![],
            ));
        }
        producer.flush().await.expect("flush");
        for d in deliveries {
            d.await.expect("delivered");
        }
    });
    // Groups without members, with offsets committed outside any generation.
    let g = |n: &str| format!("cg-{n}-{run}");
    let (empty, rk, rs, dk, ds, delk, dels) = (
        g("empty"),
        g("rk"),
        g("rs"),
        g("dk"),
        g("ds"),
        g("delk"),
        g("dels"),
    );
    let committed: BTreeMap<(String, i32), i64> = [
        ((t1.clone(), 0), 3),
        ((t1.clone(), 1), 10),
        ((t1.clone(), 2), 0),
        ((t2.clone(), 1), 4),
    ]
    .into_iter()
    .collect();
    rt.block_on(async {
        for grp in [&empty, &rk, &rs, &dk, &ds, &delk, &dels] {
            let r = admin
                .alter_group_offsets(grp, &committed)
                .await
                .expect("commit");
            assert!(r.values().all(|r| r.is_ok()), "{r:?}");
        }
    });
    // Active groups: a classic member and a consumer-protocol (KIP-848) member.
    let classic = g("classic");
    let modern = g("modern");
    let _c1 = member(&bootstrap, &classic, "classic", &t1, 5);
    let _c2 = member(&bootstrap, &modern, "consumer", &t2, 3);
    std::thread::sleep(Duration::from_secs(1));

    let plan = tempfile::NamedTempFile::new().expect("plan file");
    std::fs::write(plan.path(), format!("{t1},0,5\n{t1},1,200\n{t2},0,1\n")).expect("write plan");
    let plan_path = plan.path().display().to_string();
    let groups4 = format!("--group {empty} --group {classic} --group {modern}");
    let read_only: Vec<(&str, Vec<String>)> = vec![
        ("list", args("--list")),
        ("list type state", args("--list --type --state")),
        ("list state filter", args("--list --state stable")),
        ("list type filter", args("--list --type consumer")),
        ("describe offsets", args(&format!("--describe {groups4}"))),
        (
            "describe offsets verbose",
            args(&format!("--describe {groups4} --verbose")),
        ),
        (
            "describe members",
            args(&format!("--describe {groups4} --members")),
        ),
        (
            "describe members verbose",
            args(&format!("--describe {groups4} --members --verbose")),
        ),
        (
            "describe state",
            args(&format!("--describe {groups4} --state")),
        ),
        (
            "describe state verbose",
            args(&format!("--describe {groups4} --state --verbose")),
        ),
        (
            "describe missing group",
            args(&format!("--describe --group nosuch-{run}")),
        ),
        (
            "reset dry-run earliest",
            args(&format!(
                "--reset-offsets --group {empty} --to-earliest --all-topics"
            )),
        ),
        (
            "reset shift-by",
            args(&format!(
                "--reset-offsets --group {empty} --shift-by -2 --topic {t1}:0,1 --dry-run"
            )),
        ),
        (
            "reset to-offset clamped",
            args(&format!(
                "--reset-offsets --group {empty} --to-offset 100 --topic {t1}"
            )),
        ),
        (
            "reset to-current",
            args(&format!(
                "--reset-offsets --group {empty} --to-current --topic {t1} --topic {t2}"
            )),
        ),
        ("reset export", args(&format!("--reset-offsets --group {empty} --to-latest --all-topics --export --dry-run"))),
        ("reset export two groups", args(&format!("--reset-offsets --group {empty} --group {rk} --to-earliest --topic {t2} --export --dry-run"))),
        ("reset from-file", args(&format!("--reset-offsets --group {empty} --from-file {plan_path} --dry-run"))),
        (
            "reset refused while active",
            args(&format!(
                "--reset-offsets --group {classic} --to-latest --all-topics"
            )),
        ),
        (
            "delete-offsets refused while subscribed",
            args(&format!("--delete-offsets --group {classic} --topic {t1}")),
        ),
    ];
    // The oracle's JVMs run in parallel: the read-only cases change nothing.
    let handles: Vec<_> = read_only
        .iter()
        .map(|(_, a)| {
            let (b, a) = (bootstrap.clone(), a.clone());
            std::thread::spawn(move || kafka_tool(&b, &a))
        })
        .collect();
    let kafka_runs: Vec<Run> = handles
        .into_iter()
        .map(|h| h.join().expect("java"))
        .collect();
    let mut compared = 0;
    for ((case, a), k) in read_only.iter().zip(&kafka_runs) {
        let s = strom_tool(&bootstrap, a);
        assert_same(case, k, &[], &s, &[]);
        compared += 1;
    }

    // Mutations: each tool acts on its own group, prepared identically.
    let mutations: Vec<(&str, String, &str, &str)> = vec![
        ("reset execute to-datetime", format!("--reset-offsets --group {{G}} --to-datetime 2000-01-01T00:00:00.000 --topic {t1} --execute"), &rk, &rs),
        ("delete-offsets", format!("--delete-offsets --group {{G}} --topic {t1}:0 --topic {t2}"), &dk, &ds),
        ("delete groups", format!("--delete --group {{G}} --group nosuch-{run}"), &delk, &dels),
        ("describe after reset", "--describe --group {G}".to_string(), &rk, &rs),
        ("describe after delete-offsets", "--describe --group {G}".to_string(), &dk, &ds),
    ];
    for (case, template, kg, sg) in &mutations {
        let k = kafka_tool(&bootstrap, &args(&template.replace("{G}", kg)));
        let s = strom_tool(&bootstrap, &args(&template.replace("{G}", sg)));
        assert_same(case, &k, &[kg], &s, &[sg]);
        compared += 1;
    }
    let expected = read_only.len() + mutations.len();
    assert_eq!(compared, expected);
    eprintln!("cli_groups: {compared} cases compared with kafka-consumer-groups");

    // JSON carries the same numbers as the table.
    let j = strom_tool(
        &bootstrap,
        &args(&format!("--describe --group {empty} --format json")),
    );
    let v: serde_json::Value = serde_json::from_str(j.stdout.trim()).expect("json");
    let parts = v[0]["partitions"].as_array().expect("partitions");
    assert_eq!(parts.len(), committed.len());
    for p in parts {
        let tp = (
            p["topic"].as_str().unwrap().to_string(),
            p["partition"].as_i64().unwrap() as i32,
        );
        assert_eq!(p["current_offset"].as_i64(), committed.get(&tp).copied());
        let end = p["log_end_offset"].as_i64().unwrap();
        assert_eq!(p["lag"].as_i64(), Some(end - committed[&tp]));
    }

    // 1,000 groups: listed and described in batched requests.
    rt.block_on(async {
        let mut set = tokio::task::JoinSet::new();
        for i in 0..1000 {
            let (admin, grp) = (admin.clone(), format!("cg-many-{run}-{i:04}"));
            let offs: BTreeMap<(String, i32), i64> = [((t2.clone(), 0), 1)].into_iter().collect();
            set.spawn(async move { admin.alter_group_offsets(&grp, &offs).await.map(|_| ()) });
        }
        while let Some(r) = set.join_next().await {
            r.expect("task").expect("commit");
        }
    });
    for a in [
        "--list",
        "--describe --all-groups",
        "--describe --all-groups --state",
    ] {
        let t = Instant::now();
        let s = strom_tool(&bootstrap, &args(a));
        let took = t.elapsed();
        let lines = s
            .stdout
            .lines()
            .filter(|l| l.contains(&format!("cg-many-{run}")))
            .count();
        assert_eq!(lines, 1000, "{a}");
        eprintln!("strom groups {a}: 1000+ groups in {took:?}");
        // A debug build on a shared machine; one round trip per group would take far longer.
        assert!(took < Duration::from_secs(5), "{a} took {took:?}");
    }
    // Batched DeleteGroups cleans up (the broker may be a long-lived one).
    let many: Vec<String> = (0..1000).map(|i| format!("cg-many-{run}-{i:04}")).collect();
    let t = Instant::now();
    let deleted = rt
        .block_on(admin.delete_groups(&many))
        .expect("delete groups");
    assert_eq!(deleted.len(), 1000);
    assert!(deleted.values().all(|r| r.is_ok()), "delete failed");
    eprintln!("delete_groups: 1000 groups in {:?}", t.elapsed());
    eprintln!("cli_groups: done in {:?}", started.elapsed());
}

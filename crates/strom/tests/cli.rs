//! The command-line tools against a real broker: `strom topics create|list|describe|delete`,
//! `strom produce`, `strom consume`. Results are cross-checked with librdkafka.

mod common;

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use rdkafka::consumer::Consumer;

struct Out {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs `strom ARGS` with `stdin`, bounded by 60 s.
fn strom(args: &[&str], stdin: &str) -> Out {
    let mut child = Command::new(env!("CARGO_BIN_EXE_strom"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn strom");
    let mut input = child.stdin.take().unwrap();
    let data = stdin.to_string();
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(data.as_bytes());
    });
    let mut so = child.stdout.take().unwrap();
    let mut se = child.stderr.take().unwrap();
    let r1 = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = so.read_to_string(&mut s);
        s
    });
    let r2 = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = se.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("strom {args:?} did not finish within 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = writer.join();
    let out = Out {
        code: status.code(),
        stdout: r1.join().unwrap(),
        stderr: r2.join().unwrap(),
    };
    eprintln!(
        "$ strom {}\n[exit {:?}]\n--- stdout\n{}--- stderr\n{}",
        args.join(" "),
        out.code,
        out.stdout,
        out.stderr
    );
    out
}

fn ok(args: &[&str], stdin: &str) -> Out {
    let o = strom(args, stdin);
    assert_eq!(o.code, Some(0), "strom {args:?} failed: {}", o.stderr);
    o
}

#[test]
fn topics_create_list_describe_delete() {
    let broker = Broker::start_with(&["auto.create.topics.enable=false"]);
    let bs = broker.bootstrap();
    let o = ok(
        &[
            "topics",
            "create",
            "--bootstrap-server",
            &bs,
            "--topic",
            "t",
            "--partitions",
            "3",
        ],
        "",
    );
    assert!(
        o.stdout.contains("Created topic t"),
        "create output: {}",
        o.stdout
    );
    wait_for_topic(&broker, "t", 3);

    // Creating it again fails with a non-zero exit and says why.
    let o = strom(
        &[
            "topics",
            "create",
            "--bootstrap-server",
            &bs,
            "--topic",
            "t",
            "--partitions",
            "3",
        ],
        "",
    );
    assert_ne!(o.code, Some(0), "duplicate create must fail");
    assert!(
        (o.stdout.clone() + &o.stderr)
            .to_lowercase()
            .contains("already exists"),
        "duplicate create should say the topic already exists"
    );

    ok(
        &[
            "topics",
            "create",
            "--bootstrap-server",
            &bs,
            "--topic",
            "u",
        ],
        "",
    );
    // The test's consumers carry a group.id, so librdkafka's coordinator lookup may have made
    // the broker create `__consumer_offsets`, which `--list` names as Kafka's tool does;
    // `--exclude-internal` leaves it out.
    let o = ok(
        &[
            "topics",
            "list",
            "--bootstrap-server",
            &bs,
            "--exclude-internal",
        ],
        "",
    );
    let mut names: Vec<&str> = o
        .stdout
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    names.sort();
    assert_eq!(names, vec!["t", "u"], "list output");

    let o = ok(
        &[
            "topics",
            "describe",
            "--bootstrap-server",
            &bs,
            "--topic",
            "t",
        ],
        "",
    );
    assert!(o.stdout.contains("Topic: t"), "describe output");
    assert!(o.stdout.contains("PartitionCount: 3"), "describe output");
    assert!(o.stdout.contains("ReplicationFactor: 1"), "describe output");
    for p in 0..3 {
        assert!(
            o.stdout
                .lines()
                .any(|l| l.contains(&format!("Partition: {p}")) && l.contains("Leader: 1")),
            "describe output lacks partition {p}"
        );
    }

    ok(
        &[
            "topics",
            "delete",
            "--bootstrap-server",
            &bs,
            "--topic",
            "u",
        ],
        "",
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let o = ok(&["topics", "list", "--bootstrap-server", &bs], "");
        if !o.stdout.lines().any(|l| l.trim() == "u") {
            break;
        }
        assert!(Instant::now() < deadline, "deleted topic still listed");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn produce_and_consume_lines() {
    let broker = Broker::start();
    let bs = broker.bootstrap();
    create_topic(&broker, "lines", 1, &[]);
    let input: String = (0..50).map(|i| format!("k{i}:line {i}\n")).collect();
    ok(
        &[
            "produce",
            "lines",
            "--bootstrap-server",
            &bs,
            "--key-separator",
            ":",
        ],
        &input,
    );
    assert_eq!(watermarks(&broker, "lines", 0), (0, 50));
    let got = consume_all(&broker, "lines", 0);
    let keys: Vec<String> = got
        .iter()
        .map(|r| {
            format!(
                "{}:{}",
                r.offset,
                String::from_utf8_lossy(r.key.as_deref().unwrap_or(b"-"))
            )
        })
        .collect();
    eprintln!("consumed (offset:key): {keys:?}");
    for (i, r) in got.iter().enumerate() {
        assert_eq!(
            r.key.as_deref(),
            Some(format!("k{i}").as_bytes()),
            "key of line {i}"
        );
        assert_eq!(
            r.value.as_deref(),
            Some(format!("line {i}").as_bytes()),
            "value of line {i}"
        );
    }

    // Lines without a separator setting are values without keys.
    ok(
        &["produce", "lines", "--bootstrap-server", &bs],
        "plain a\nplain b\n",
    );
    assert_eq!(watermarks(&broker, "lines", 0), (0, 52));

    let o = ok(
        &[
            "consume",
            "lines",
            "--bootstrap-server",
            &bs,
            "--from-beginning",
            "--max-messages",
            "52",
        ],
        "",
    );
    let lines: Vec<&str> = o.stdout.lines().collect();
    let mut want: Vec<String> = (0..50).map(|i| format!("line {i}")).collect();
    want.push("plain a".into());
    want.push("plain b".into());
    assert_eq!(lines, want, "consume output");

    // --max-messages stops early.
    let o = ok(
        &[
            "consume",
            "lines",
            "--bootstrap-server",
            &bs,
            "--from-beginning",
            "--max-messages",
            "3",
        ],
        "",
    );
    assert_eq!(
        o.stdout.lines().collect::<Vec<_>>(),
        vec!["line 0", "line 1", "line 2"]
    );
}

#[test]
fn produce_to_three_partitions_spreads_by_key() {
    let broker = Broker::start();
    let bs = broker.bootstrap();
    ok(
        &[
            "topics",
            "create",
            "--bootstrap-server",
            &bs,
            "--topic",
            "t3",
            "--partitions",
            "3",
        ],
        "",
    );
    wait_for_topic(&broker, "t3", 3);
    let input: String = (0..300).map(|i| format!("key{i}:v{i}\n")).collect();
    ok(
        &[
            "produce",
            "t3",
            "--bootstrap-server",
            &bs,
            "--key-separator",
            ":",
        ],
        &input,
    );
    let c = consumer(&broker);
    let mut total = 0;
    for p in 0..3 {
        let (lo, hi) = c
            .fetch_watermarks("t3", p, Duration::from_secs(20))
            .unwrap();
        assert_eq!(lo, 0);
        total += hi;
    }
    assert_eq!(total, 300);
    let o = ok(
        &[
            "consume",
            "t3",
            "--bootstrap-server",
            &bs,
            "--from-beginning",
            "--max-messages",
            "300",
        ],
        "",
    );
    let mut got: Vec<&str> = o.stdout.lines().collect();
    got.sort();
    let mut want: Vec<String> = (0..300).map(|i| format!("v{i}")).collect();
    want.sort();
    assert_eq!(got, want);
}

#[test]
fn server_rejects_bad_flags_and_busy_port() {
    let o = strom(&["server", "--no-such-flag"], "");
    assert_ne!(o.code, Some(0), "a bad flag must fail");
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let o = strom(
        &[
            "server",
            "--listen",
            &broker.bootstrap(),
            "--data-dir",
            dir.path().join("data").to_str().unwrap(),
        ],
        "",
    );
    assert_ne!(o.code, Some(0), "a busy port must fail");
    assert!(o.stderr.contains("cannot listen"), "{}", o.stderr);
    let file = dir.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let port = free_port().to_string();
    let listen = format!("127.0.0.1:{port}");
    let o = strom(
        &[
            "server",
            "--listen",
            &listen,
            "--data-dir",
            file.to_str().unwrap(),
        ],
        "",
    );
    assert_ne!(o.code, Some(0), "a data dir that is a file must fail");
}

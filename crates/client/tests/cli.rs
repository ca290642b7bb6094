//! The `strom topics|produce|consume` tools end to end against a real `strom server`.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

use common::{strom_bin, Broker};

struct Out {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn strom(args: &[&str], stdin: &str) -> Out {
    let mut child = Command::new(strom_bin())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn strom");
    let mut input = child.stdin.take().unwrap();
    let data = stdin.to_string();
    let w = std::thread::spawn(move || {
        let _ = input.write_all(data.as_bytes());
    });
    let out = child.wait_with_output().unwrap();
    w.join().unwrap();
    let o = Out {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    eprintln!(
        "$ strom {}\n[exit {:?}]\n{}---\n{}",
        args.join(" "),
        o.code,
        o.stdout,
        o.stderr
    );
    o
}

fn ok(args: &[&str], stdin: &str) -> Out {
    let o = strom(args, stdin);
    assert_eq!(o.code, Some(0), "strom {args:?}: {}{}", o.stdout, o.stderr);
    o
}

#[test]
fn topics_tool() {
    let b = Broker::start();
    let bs = b.bootstrap();
    let o = ok(
        &[
            "topics",
            "--bootstrap-server",
            &bs,
            "--create",
            "--topic",
            "orders",
            "--partitions",
            "3",
            "--replication-factor",
            "1",
            "--config",
            "retention.ms=60000",
        ],
        "",
    );
    assert_eq!(o.stdout, "Created topic orders.\n");
    let o = ok(
        &[
            "topics",
            "create",
            "--bootstrap-server",
            &bs,
            "--topic",
            "other",
        ],
        "",
    );
    assert_eq!(o.stdout, "Created topic other.\n");

    let o = strom(
        &[
            "topics",
            "create",
            "--bootstrap-server",
            &bs,
            "--topic",
            "orders",
        ],
        "",
    );
    assert_eq!(o.code, Some(1));
    assert!(
        o.stdout
            .starts_with("Error while executing topic command : "),
        "{}",
        o.stdout
    );
    assert!(o.stdout.contains("already exists"));
    ok(
        &[
            "topics",
            "create",
            "--bootstrap-server",
            &bs,
            "--topic",
            "orders",
            "--if-not-exists",
        ],
        "",
    );

    let o = ok(&["topics", "--list", "--bootstrap-server", &bs], "");
    assert_eq!(o.stdout, "orders\nother\n");

    let o = ok(
        &[
            "topics",
            "describe",
            "--bootstrap-server",
            &bs,
            "--topic",
            "orders",
        ],
        "",
    );
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{}", o.stdout);
    assert!(
        lines[0].starts_with("Topic: orders\tTopicId: "),
        "{}",
        lines[0]
    );
    assert!(
        lines[0]
            .ends_with("\tPartitionCount: 3\tReplicationFactor: 1\tConfigs: retention.ms=60000"),
        "{}",
        lines[0]
    );
    for p in 0..3 {
        assert!(
            lines[1 + p].starts_with(&format!(
                "\tTopic: orders\tPartition: {p}\tLeader: 1\tReplicas: 1\tIsr: 1"
            )),
            "{}",
            lines[1 + p]
        );
    }

    ok(
        &[
            "topics",
            "--alter",
            "--bootstrap-server",
            &bs,
            "--topic",
            "orders",
            "--partitions",
            "4",
        ],
        "",
    );
    let o = ok(
        &[
            "topics",
            "--describe",
            "--bootstrap-server",
            &bs,
            "--topic",
            "orders",
        ],
        "",
    );
    assert!(o.stdout.contains("PartitionCount: 4"));

    let o = strom(
        &[
            "topics",
            "describe",
            "--bootstrap-server",
            &bs,
            "--topic",
            "missing",
        ],
        "",
    );
    assert_eq!(o.code, Some(1));
    assert!(
        o.stdout
            .contains("Topic 'missing' does not exist as expected"),
        "{}",
        o.stdout
    );

    ok(
        &[
            "topics",
            "delete",
            "--bootstrap-server",
            &bs,
            "--topic",
            "other",
        ],
        "",
    );
    let o = ok(&["topics", "list", "--bootstrap-server", &bs], "");
    assert_eq!(o.stdout, "orders\n");
    let o = strom(&["topics", "--bootstrap-server", &bs], "");
    assert_ne!(o.code, Some(0), "no action must fail");
}

#[test]
fn produce_and_consume_tools() {
    let b = Broker::start();
    let bs = b.bootstrap();
    ok(
        &[
            "topics",
            "create",
            "--bootstrap-server",
            &bs,
            "--topic",
            "t",
            "--partitions",
            "2",
        ],
        "",
    );
    let input: String = (0..100).map(|i| format!("k{i}|v{i}\n")).collect();
    ok(
        &[
            "produce",
            "t",
            "--bootstrap-server",
            &bs,
            "--key-separator",
            "|",
            "--compression",
            "zstd",
            "--acks",
            "all",
        ],
        &input,
    );
    ok(
        &[
            "produce",
            "t",
            "--bootstrap-server",
            &bs,
            "--partition",
            "1",
            "--compression",
            "gzip",
            "--acks",
            "1",
        ],
        "a\nb\r\nc",
    );

    let o = ok(
        &[
            "consume",
            "t",
            "--bootstrap-server",
            &bs,
            "--from-beginning",
            "--max-messages",
            "103",
            "--property",
            "print.key=true",
            "--property",
            "key.separator==",
        ],
        "",
    );
    assert!(
        o.stderr.contains("Processed a total of 103 messages"),
        "{}",
        o.stderr
    );
    let mut lines: Vec<&str> = o.stdout.lines().collect();
    lines.sort();
    let mut want: Vec<String> = (0..100).map(|i| format!("k{i}=v{i}")).collect();
    want.extend(["null=a".into(), "null=b".into(), "null=c".into()]);
    want.sort();
    assert_eq!(lines, want);

    // One partition from an offset, values only.
    let o = ok(
        &[
            "consume",
            "--topic",
            "t",
            "--bootstrap-server",
            &bs,
            "--partition",
            "1",
            "--offset",
            "0",
            "--timeout-ms",
            "1500",
        ],
        "",
    );
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert_eq!(&lines[lines.len() - 3..], &["a", "b", "c"]);
    assert!(o
        .stderr
        .contains(&format!("Processed a total of {} messages", lines.len())));

    // Starting at the end with a timeout: nothing.
    let o = ok(
        &[
            "consume",
            "t",
            "--bootstrap-server",
            &bs,
            "--timeout-ms",
            "500",
        ],
        "",
    );
    assert_eq!(o.stdout, "");
    assert!(o.stderr.contains("Processed a total of 0 messages"));

    // Delivery failure: a partition that does not exist.
    let o = strom(
        &[
            "produce",
            "t",
            "--bootstrap-server",
            &bs,
            "--partition",
            "9",
        ],
        "x\n",
    );
    assert_eq!(o.code, Some(1));
    assert!(
        o.stderr.contains("Error when sending message to topic t"),
        "{}",
        o.stderr
    );
}

//! Differential test of the ConsumerProtocol codec (`strom_client::group::protocol`) against
//! kafka-clients 4.4's `ConsumerProtocol` (`group_oracle/ConsumerProtocolOracle.java`), on
//! seeded random subscriptions and assignments:
//! - Strom's bytes equal Java's bytes for the same subscription / assignment;
//! - Java decodes Strom's bytes to the same value, and Strom decodes Java's;
//! - truncated bytes are an error on both sides.
//!
//! Without `java`/`javac` or the jars (`.cache/kafka-4.4/libs`) the test fails under `CI` and
//! is skipped otherwise.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use strom_client::assignor::{Assignment, Subscription, TopicPartition};
use strom_client::group::protocol::{
    decode_assignment, decode_subscription, encode_assignment, encode_subscription,
};

struct Oracle {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    _classes: tempfile::TempDir,
}

impl Drop for Oracle {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn unavailable(why: String) -> Option<Oracle> {
    assert!(
        std::env::var_os("CI").is_none(),
        "ConsumerProtocol oracle unavailable under CI: {why}"
    );
    eprintln!("SKIPPED: the ConsumerProtocol differential test needs Java: {why}");
    None
}

impl Oracle {
    fn start() -> Option<Oracle> {
        let libs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.cache/kafka-4.4/libs");
        if !libs.join("kafka-clients-4.4.0.jar").is_file() {
            return unavailable(format!(
                "no kafka-clients-4.4.0.jar in {} (run `make kafka-ref-fetch`)",
                libs.display()
            ));
        }
        let classes = tempfile::tempdir().expect("temp dir");
        let source = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/group_oracle/ConsumerProtocolOracle.java");
        let jars = format!("{}/*", libs.display());
        match Command::new("javac")
            .arg("-d")
            .arg(classes.path())
            .arg("-cp")
            .arg(&jars)
            .arg(&source)
            .output()
        {
            Err(e) => return unavailable(format!("cannot run javac: {e}")),
            Ok(o) if !o.status.success() => {
                panic!("javac failed: {}", String::from_utf8_lossy(&o.stderr))
            }
            Ok(_) => {}
        }
        let mut child = match Command::new("java")
            .arg("-Dfile.encoding=UTF-8")
            .arg("-cp")
            .arg(format!("{}:{jars}", classes.path().display()))
            .arg("ConsumerProtocolOracle")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
        {
            Ok(c) => c,
            Err(e) => return unavailable(format!("cannot run java: {e}")),
        };
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Some(Oracle {
            child,
            stdin,
            stdout,
            _classes: classes,
        })
    }

    /// `Ok(answer)` or `Err(exception class)`.
    fn ask(&mut self, line: &str) -> Result<String, String> {
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
        let mut out = String::new();
        self.stdout.read_line(&mut out).unwrap();
        let out = out.trim_end_matches('\n');
        match out.split_once(' ').unwrap_or((out, "")) {
            ("OK", a) => Ok(a.to_string()),
            ("ERR", e) => Err(e.to_string()),
            _ => panic!("oracle answered {out:?} to {line:?}"),
        }
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Bytes {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect::<Vec<u8>>()
        .into()
}

fn ud(u: &Option<Bytes>) -> String {
    u.as_ref().map_or("-".into(), |b| hex(b))
}

fn parts(ps: &[TopicPartition]) -> String {
    ps.iter()
        .map(|tp| format!("{}:{}", tp.topic, tp.partition))
        .collect::<Vec<_>>()
        .join(",")
}

fn sub_canon(s: &Subscription) -> String {
    format!(
        "{}|{}|{}|{}|{}",
        s.topics.join(","),
        ud(&s.user_data),
        parts(&s.owned_partitions),
        s.generation_id,
        s.rack_id.as_deref().unwrap_or("-")
    )
}

fn assignment_canon(a: &Assignment) -> String {
    format!("{}|{}", parts(&a.partitions), ud(&a.user_data))
}

/// Topic-name characters: Kafka's legal ones plus a few non-ASCII letters, so that Java's
/// UTF-16 string order is exercised (the oracle's line format reserves `,` `:` `|`).
const CHARS: &[char] = &['a', 'b', 'Z', '0', '9', '.', '_', '-', 'é', '日', '𝄞'];

fn name(rng: &mut StdRng) -> String {
    loop {
        let n: String = (0..rng.random_range(1..6))
            .map(|_| CHARS[rng.random_range(0..CHARS.len())])
            .collect();
        // "-" is the oracle's marker for an absent rack.
        if n != "-" {
            return n;
        }
    }
}

fn user_data(rng: &mut StdRng) -> Option<Bytes> {
    match rng.random_range(0..3) {
        0 => None,
        1 => Some(Bytes::new()),
        _ => Some(
            (0..rng.random_range(1..12))
                .map(|_| rng.random::<u8>())
                .collect::<Vec<u8>>()
                .into(),
        ),
    }
}

fn random_partitions(rng: &mut StdRng, topics: &[String], max: usize) -> Vec<TopicPartition> {
    if topics.is_empty() {
        return Vec::new();
    }
    (0..rng.random_range(0..=max))
        .map(|_| {
            TopicPartition::new(
                topics[rng.random_range(0..topics.len())].clone(),
                rng.random_range(0..40),
            )
        })
        .collect()
}

fn random_subscription(rng: &mut StdRng) -> Subscription {
    let mut topics: Vec<String> = (0..rng.random_range(0..5)).map(|_| name(rng)).collect();
    topics.sort();
    topics.dedup();
    let mut pool = topics.clone();
    pool.push(name(rng));
    Subscription {
        owned_partitions: random_partitions(rng, &pool, 8),
        topics,
        user_data: user_data(rng),
        generation_id: if rng.random_bool(0.3) {
            -1
        } else {
            rng.random_range(0..5000)
        },
        rack_id: rng.random_bool(0.5).then(|| name(rng)),
        group_instance_id: None,
    }
}

/// What a decoder sees: topics and owned partitions in Java's order.
fn java_order(s: &Subscription) -> Subscription {
    let mut s = s.clone();
    s.topics
        .sort_by(|a, b| a.encode_utf16().cmp(b.encode_utf16()));
    s.owned_partitions.sort_by(|a, b| {
        a.topic
            .encode_utf16()
            .cmp(b.topic.encode_utf16())
            .then(a.partition.cmp(&b.partition))
    });
    s
}

#[test]
fn consumer_protocol_codec_matches_java() {
    let Some(mut oracle) = Oracle::start() else {
        return;
    };
    let mut rng = StdRng::seed_from_u64(0x5eed_0c0d);
    let (mut subs, mut assignments, mut truncated) = (0, 0, 0);
    for _ in 0..1500 {
        let s = random_subscription(&mut rng);
        let ours = encode_subscription(&s).unwrap();
        let theirs = oracle
            .ask(&format!("ES {}", sub_canon(&s)))
            .expect("Java encodes");
        assert_eq!(hex(&ours), theirs, "subscription bytes for {s:?}");
        let expected = sub_canon(&java_order(&s));
        assert_eq!(
            oracle.ask(&format!("DS {}", hex(&ours))).as_deref(),
            Ok(expected.as_str()),
            "Java decoding Strom's bytes of {s:?}"
        );
        let back = decode_subscription(unhex(&theirs), None).unwrap();
        assert_eq!(sub_canon(&back), expected, "Strom decoding Java's bytes");
        subs += 1;

        let topics: Vec<String> = (0..rng.random_range(1..4))
            .map(|_| name(&mut rng))
            .collect();
        let a = Assignment {
            partitions: random_partitions(&mut rng, &topics, 10),
            user_data: user_data(&mut rng),
        };
        let ours = encode_assignment(&a).unwrap();
        let theirs = oracle
            .ask(&format!("EA {}", assignment_canon(&a)))
            .expect("Java encodes");
        assert_eq!(hex(&ours), theirs, "assignment bytes for {a:?}");
        let java_view = oracle.ask(&format!("DA {}", hex(&ours))).unwrap();
        let back = decode_assignment(unhex(&theirs)).unwrap();
        assert_eq!(assignment_canon(&back), java_view, "both decoders agree");
        assignments += 1;

        // Cut short: an error on both sides, never a panic.
        let cut = rng.random_range(1..ours.len());
        let short = hex(&ours[..cut]);
        let java = oracle.ask(&format!("DA {short}"));
        let strom = decode_assignment(unhex(&short));
        assert_eq!(
            java.is_err(),
            strom.is_err(),
            "truncated at {cut}: {java:?} vs {strom:?}"
        );
        truncated += 1;
    }
    eprintln!(
        "compared {subs} subscriptions, {assignments} assignments, {truncated} truncated encodings"
    );
    assert_eq!((subs, assignments, truncated), (1500, 1500, 1500));
}

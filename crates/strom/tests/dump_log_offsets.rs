//! `strom dump-log --offsets-decoder`: a segment of `__consumer_offsets` records (encoded by
//! strom_group_coordinator) is dumped by the built binary and, when Kafka 4.4's jars and Java
//! are there, by Kafka's own `kafka-dump-log.sh --offsets-decoder`; the outputs must be equal.

use std::path::{Path, PathBuf};
use std::process::Command;

use bytes::Bytes;
use strom_group_coordinator::records::*;
use uuid::Uuid;

fn records() -> Vec<CoordinatorRecord> {
    let key = |g: &str, t: &str, p: i32| OffsetCommitKey {
        group: g.into(),
        topic: t.into(),
        partition: p,
        ..Default::default()
    };
    vec![
        CoordinatorRecord::OffsetCommit(
            key("g1", "t", 0),
            Some((
                3,
                OffsetCommitValue {
                    offset: 42,
                    leader_epoch: 5,
                    metadata: "meta \"quoted\" é".into(),
                    commit_timestamp: 1_700_000_000_000,
                    ..Default::default()
                },
            )),
        ),
        CoordinatorRecord::OffsetCommit(
            key("g1", "t", 1),
            Some((
                4,
                OffsetCommitValue {
                    offset: 7,
                    topic_id: Uuid::from_u64_pair(0x0123_4567_89ab_cdef, 42),
                    ..Default::default()
                },
            )),
        ),
        CoordinatorRecord::OffsetCommit(key("g1", "t", 2), None),
        CoordinatorRecord::GroupMetadata(
            GroupMetadataKey {
                group: "classic".into(),
                ..Default::default()
            },
            Some((
                4,
                GroupMetadataValue {
                    // Not "consumer": the members' bytes are printed as base64.
                    protocol_type: "connect".into(),
                    generation: 3,
                    protocol: Some("range".into()),
                    leader: None,
                    current_state_timestamp: 99,
                    members: vec![MemberMetadata {
                        member_id: "m-1".into(),
                        group_instance_id: Some("i".into()),
                        client_id: "c".into(),
                        client_host: "/127.0.0.1".into(),
                        rebalance_timeout: 300,
                        session_timeout: 45,
                        subscription: Bytes::from_static(&[0, 1, 2, 250]),
                        assignment: Bytes::new(),
                        ..Default::default()
                    }],
                    ..Default::default()
                },
            )),
        ),
        // A classic group of the `consumer` protocol type: Kafka's tool decodes each member's
        // subscription (here v3: user data, owned partitions, generation, rack) and assignment
        // (v1, null user data) into their JSON.
        CoordinatorRecord::GroupMetadata(
            GroupMetadataKey {
                group: "consumers".into(),
                ..Default::default()
            },
            Some((
                3,
                GroupMetadataValue {
                    protocol_type: "consumer".into(),
                    generation: 2,
                    protocol: Some("cooperative-sticky".into()),
                    leader: Some("m-2".into()),
                    current_state_timestamp: 5,
                    members: vec![MemberMetadata {
                        member_id: "m-2".into(),
                        client_id: "c".into(),
                        client_host: "/127.0.0.1".into(),
                        rebalance_timeout: 300,
                        session_timeout: 45,
                        subscription: Bytes::from_static(&[
                            0, 3, 0, 0, 0, 2, 0, 1, b'a', 0, 1, b'b', 0, 0, 0, 3, 1, 2, 3, 0, 0, 0,
                            1, 0, 1, b'a', 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 7, 0, 2,
                            b'r', b'1',
                        ]),
                        assignment: Bytes::from_static(&[
                            0, 1, 0, 0, 0, 1, 0, 1, b'b', 0, 0, 0, 1, 0, 0, 0, 2, 0xff, 0xff, 0xff,
                            0xff,
                        ]),
                        ..Default::default()
                    }],
                    ..Default::default()
                },
            )),
        ),
        CoordinatorRecord::ConsumerGroupMetadata(
            ConsumerGroupMetadataKey {
                group_id: "cg".into(),
                ..Default::default()
            },
            Some((
                0,
                ConsumerGroupMetadataValue {
                    epoch: 9,
                    metadata_hash: -12345,
                    ..Default::default()
                },
            )),
        ),
        CoordinatorRecord::ConsumerGroupMemberMetadata(
            ConsumerGroupMemberMetadataKey {
                group_id: "cg".into(),
                member_id: "m".into(),
                ..Default::default()
            },
            Some((
                0,
                ConsumerGroupMemberMetadataValue {
                    rack_id: Some("r1".into()),
                    client_id: "c".into(),
                    client_host: "h".into(),
                    subscribed_topic_names: vec!["a".into(), "b".into()],
                    rebalance_timeout_ms: 1000,
                    server_assignor: Some("uniform".into()),
                    classic_member_metadata: None,
                    ..Default::default()
                },
            )),
        ),
        CoordinatorRecord::ConsumerGroupCurrentMemberAssignment(
            ConsumerGroupCurrentMemberAssignmentKey {
                group_id: "cg".into(),
                member_id: "m".into(),
                ..Default::default()
            },
            Some((
                0,
                ConsumerGroupCurrentMemberAssignmentValue {
                    member_epoch: 4,
                    previous_member_epoch: 3,
                    state: 0,
                    assigned_partitions: vec![TopicPartitions {
                        topic_id: Uuid::from_u64_pair(1, 2),
                        partitions: vec![0, 2],
                        assignment_epochs: Some(vec![4, 4]),
                        ..Default::default()
                    }],
                    ..Default::default()
                },
            )),
        ),
    ]
}

fn write_segment(dir: &Path) -> PathBuf {
    let mut recs: Vec<(Option<Bytes>, Option<Bytes>)> = records()
        .iter()
        .map(|r| (Some(r.encode_key().unwrap()), r.encode_value().unwrap()))
        .collect();
    // A record type no schema here has: Kafka prints that it skips it.
    recs.push((
        Some(Bytes::from_static(&[0, 99, 0, 0])),
        Some(Bytes::from_static(&[0, 0])),
    ));
    let path = dir.join("00000000000000000000.log");
    std::fs::write(
        &path,
        strom_protocol::testing::plain_batch(recs, 1_700_000_000_000),
    )
    .unwrap();
    path
}

fn run(cmd: &mut Command) -> (i32, String, String) {
    let out = cmd.output().expect("run dump-log");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn offsets_decoder_prints_what_kafka_prints() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_segment(dir.path());
    let file = path.to_str().unwrap();
    let (code, ours, err) = run(Command::new(env!("CARGO_BIN_EXE_strom")).args([
        "dump-log",
        "--offsets-decoder",
        "--files",
        file,
    ]));
    assert_eq!(code, 0, "{err}");
    let payload_lines: Vec<&str> = ours.lines().filter(|l| l.contains(" key: ")).collect();
    assert_eq!(payload_lines.len(), records().len() + 1, "{ours}");
    assert!(
        ours.contains(r#"key: {"type":"1","data":{"group":"g1","topic":"t","partition":0}} payload: {"version":"3","data":{"offset":42,"leaderEpoch":5,"metadata":"meta \"quoted\" é","commitTimestamp":1700000000000}}"#),
        "{ours}"
    );
    assert!(ours.contains(r#"payload: <DELETE>"#), "{ours}");
    assert!(
        ours.contains("key: Unknown record type 99 at offset 8, skipping."),
        "{ours}"
    );

    let libs = repo_root().join(".cache/kafka-4.4/libs/.complete");
    let java = Command::new("java").arg("-version").output().is_ok();
    if !libs.exists() || !java {
        assert!(
            std::env::var_os("CI").is_none(),
            "Kafka 4.4's jars (scripts/kafka-ref.sh fetch) and java are needed in CI"
        );
        eprintln!("SKIPPED comparison with Kafka: no Kafka 4.4 jars or no java");
        return;
    }
    let (kcode, theirs, kerr) = run(Command::new(repo_root().join("scripts/kafka-dump-log.sh"))
        .args(["--offsets-decoder", "--files", file]));
    assert_eq!(kcode, 0, "{kerr}");
    assert_eq!(
        ours, theirs,
        "strom vs Kafka's kafka-dump-log --offsets-decoder"
    );
    let compared = theirs.lines().filter(|l| l.contains(" key: ")).count();
    eprintln!("compared {compared} record lines with Kafka's output");
    assert_eq!(compared, records().len() + 1);
}

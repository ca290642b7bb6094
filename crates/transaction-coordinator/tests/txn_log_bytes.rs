//! Strom's `__transaction_state` key and value bytes equal those of Kafka 4.4's own
//! `TransactionLog.keyToBytes` / `valueToBytes` (run from the jars by `tests/java/TxnLogBytes.java`)
//! for every state, both value versions and the client transaction versions. Cases have at most
//! one partition: Kafka groups partitions through a `HashSet`, so with several their order is
//! the set's (the multi-partition layout is checked by Kafka's decoder in `dump_log_txn.rs`).

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use strom_transaction_coordinator::metadata::TxnTransitMetadata;
use strom_transaction_coordinator::records::TxnLogRecord;
use strom_transaction_coordinator::state::{TransactionState, TransactionVersion};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn bytes_equal_kafkas_serializer() {
    let mut cases = Vec::new();
    for level in [0i16, 1, 2] {
        for client_tv in [0i16, 1, 2] {
            if level == 0 && client_tv != 0 {
                // Version 0 has no ClientTransactionVersion: a level-0 cluster only has
                // level-0 clients.
                continue;
            }
            for state in TransactionState::ALL {
                if matches!(
                    state,
                    TransactionState::Dead | TransactionState::PrepareEpochFence
                ) {
                    continue;
                }
                let parts: BTreeSet<(String, i32)> = if matches!(
                    state,
                    TransactionState::Ongoing
                        | TransactionState::PrepareCommit
                        | TransactionState::PrepareAbort
                ) {
                    [("tópic-\"x\"".to_string(), 7)].into()
                } else {
                    BTreeSet::new()
                };
                cases.push(TxnLogRecord {
                    transactional_id: format!("id-{level}-{client_tv}-{}", state.name()),
                    value: Some(TxnTransitMetadata {
                        producer_id: 1_234_567_890_123,
                        prev_producer_id: -1,
                        next_producer_id: -1,
                        producer_epoch: 32_766,
                        last_producer_epoch: -1,
                        txn_timeout_ms: 900_000,
                        txn_state: state,
                        topic_partitions: parts,
                        txn_start_timestamp: if state == TransactionState::Empty {
                            -1
                        } else {
                            1_700_000_000_000
                        },
                        txn_last_update_timestamp: 1_700_000_000_999,
                        client_transaction_version: TransactionVersion(client_tv),
                    }),
                    transaction_version_level: TransactionVersion(level),
                });
            }
        }
    }
    cases.push(TxnLogRecord {
        transactional_id: "expired".into(),
        value: None,
        transaction_version_level: TransactionVersion::TV_2,
    });

    let libs = repo_root().join(".cache/kafka-4.4/libs/.complete");
    let javac = Command::new("javac").arg("-version").output().is_ok();
    if !libs.exists() || !javac {
        assert!(
            std::env::var_os("CI").is_none(),
            "Kafka 4.4's jars (scripts/kafka-ref.sh fetch) and a JDK are needed in CI"
        );
        eprintln!("SKIPPED: no Kafka 4.4 jars or no JDK");
        return;
    }
    let cp = Command::new(repo_root().join("scripts/kafka-ref.sh"))
        .arg("classpath")
        .output()
        .expect("kafka-ref.sh classpath");
    let cp = String::from_utf8(cp.stdout).unwrap().trim().to_string();
    let mut input = String::new();
    for r in &cases {
        let line = match &r.value {
            None => format!("{}||||||||||", r.transactional_id),
            Some(t) => format!(
                "{}|{}|{}|{}|{}|{}|{}|{}|{}|{}",
                r.transactional_id,
                t.producer_id,
                t.producer_epoch,
                t.txn_timeout_ms,
                t.txn_state.id(),
                t.txn_start_timestamp,
                t.txn_last_update_timestamp,
                t.client_transaction_version.0,
                r.transaction_version_level.0,
                t.topic_partitions
                    .iter()
                    .map(|(tp, p)| format!("{tp}:{p}"))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        };
        input.push_str(&line);
        input.push('\n');
    }
    let mut child = Command::new("java")
        .args(["-Xmx256m", "-cp", &cp])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/java/TxnLogBytes.java"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run java");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let theirs: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(theirs.len(), cases.len());
    for (r, kafka) in cases.iter().zip(&theirs) {
        let (k, v) = r.encode().unwrap();
        let ours = format!("{} {}", hex(&k), v.as_deref().map_or("-".to_string(), hex));
        assert_eq!(&ours, kafka, "{r:?}");
    }
    eprintln!(
        "{} records byte-equal to Kafka's TransactionLog",
        cases.len()
    );
}

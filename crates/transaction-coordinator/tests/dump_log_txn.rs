//! Kafka 4.4's own `kafka-dump-log.sh --transaction-log-decoder` reads a `__transaction_state`
//! segment of records encoded by strom_transaction_coordinator: every record is decoded, and
//! each key and value is what Kafka's generated JSON converter prints for the same message
//! (this crate's `to_json`, from the same schema), so Kafka's decoder and Strom's encoder
//! agree field by field, tagged fields and value versions included.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use bytes::Bytes;
use strom_transaction_coordinator::metadata::TxnTransitMetadata;
use strom_transaction_coordinator::records::TxnLogRecord;
use strom_transaction_coordinator::state::{TransactionState, TransactionVersion};

fn transit(
    state: TransactionState,
    epoch: i16,
    partitions: &[(&str, i32)],
    tv: TransactionVersion,
) -> TxnTransitMetadata {
    TxnTransitMetadata {
        producer_id: 4242,
        prev_producer_id: 4241,
        next_producer_id: -1,
        producer_epoch: epoch,
        last_producer_epoch: epoch - 1,
        txn_timeout_ms: 60_000,
        txn_state: state,
        topic_partitions: partitions
            .iter()
            .map(|(t, p)| (t.to_string(), *p))
            .collect::<BTreeSet<_>>(),
        txn_start_timestamp: if state == TransactionState::Empty {
            -1
        } else {
            1_700_000_000_000
        },
        txn_last_update_timestamp: 1_700_000_000_123,
        client_transaction_version: tv,
    }
}

fn records() -> Vec<TxnLogRecord> {
    use TransactionState::*;
    let tv2 = TransactionVersion::TV_2;
    let rec = |id: &str, t: Option<TxnTransitMetadata>, level: TransactionVersion| TxnLogRecord {
        transactional_id: id.into(),
        value: t,
        transaction_version_level: level,
    };
    vec![
        rec("tx-a", Some(transit(Empty, 0, &[], tv2)), tv2),
        rec(
            "tx-a",
            Some(transit(
                Ongoing,
                0,
                &[("orders", 0), ("orders", 3), ("__consumer_offsets", 17)],
                tv2,
            )),
            tv2,
        ),
        rec(
            "tx-a",
            Some(transit(
                PrepareCommit,
                1,
                &[("orders", 0), ("orders", 3)],
                tv2,
            )),
            tv2,
        ),
        rec("tx-a", Some(transit(CompleteCommit, 1, &[], tv2)), tv2),
        // Transaction version 0: value version 0 (not flexible).
        rec(
            "tx \"b\" é",
            Some(transit(
                PrepareAbort,
                7,
                &[("t", 1)],
                TransactionVersion::TV_0,
            )),
            TransactionVersion::TV_0,
        ),
        rec(
            "tx-c",
            Some(transit(CompleteAbort, 3, &[], TransactionVersion::TV_1)),
            TransactionVersion::TV_1,
        ),
        // An expired id.
        rec("tx-old", None, tv2),
    ]
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn kafkas_transaction_log_decoder_reads_strom_records() {
    let dir = tempfile::tempdir().unwrap();
    let recs: Vec<(Option<Bytes>, Option<Bytes>)> = records()
        .iter()
        .map(|r| {
            let (k, v) = r.encode().unwrap();
            (Some(k), v)
        })
        .collect();
    let path = dir.path().join("00000000000000000000.log");
    std::fs::write(
        &path,
        strom_protocol::testing::plain_batch(recs, 1_700_000_000_000),
    )
    .unwrap();

    let libs = repo_root().join(".cache/kafka-4.4/libs/.complete");
    let java = Command::new("java").arg("-version").output().is_ok();
    if !libs.exists() || !java {
        assert!(
            std::env::var_os("CI").is_none(),
            "Kafka 4.4's jars (scripts/kafka-ref.sh fetch) and java are needed in CI"
        );
        eprintln!("SKIPPED: no Kafka 4.4 jars or no java");
        return;
    }
    let out = Command::new(repo_root().join("scripts/kafka-dump-log.sh"))
        .args([
            "--transaction-log-decoder",
            "--files",
            path.to_str().unwrap(),
        ])
        .output()
        .expect("run kafka-dump-log");
    let theirs = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = theirs.lines().filter(|l| l.contains(" key: ")).collect();
    assert_eq!(lines.len(), records().len(), "{theirs}");
    for (line, r) in lines.iter().zip(records()) {
        let (key, value) = r.to_coordinator_record().unwrap().dump_json();
        let key = format!("key: {key}");
        assert!(line.contains(&key), "want {key}\nin {line}");
        let payload = format!("payload: {value}");
        assert!(line.ends_with(&payload), "want {payload}\nin {line}");
    }
    eprintln!(
        "Kafka decoded {} records:\n{}",
        lines.len(),
        lines.join("\n")
    );
}

use std::collections::BTreeSet;

use super::*;

/// A small random string, sometimes with characters JSON must escape.
pub(crate) fn random_string(r: &mut dyn FnMut() -> u64) -> String {
    const CHARS: &[char] = &['a', 'b', 'Z', '0', '-', '"', '\\', 'é', '\n', '_'];
    (0..r() % 8)
        .map(|_| CHARS[(r() % CHARS.len() as u64) as usize])
        .collect()
}

fn rng(seed: u64) -> impl FnMut() -> u64 {
    let mut s = seed;
    move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    }
}

#[test]
fn random_records_round_trip() {
    let mut r = rng(0x9e37_79b9_7f4a_7c15);
    for _ in 0..2000 {
        let rec = CoordinatorRecord::random(&mut r);
        let key = rec.encode_key().unwrap();
        let value = rec.encode_value().unwrap();
        let back = CoordinatorRecord::decode(&key, value.as_deref()).unwrap();
        assert_eq!(back, rec);
    }
}

fn transit(state: TransactionState, tv: TransactionVersion) -> TxnTransitMetadata {
    TxnTransitMetadata {
        producer_id: 1000,
        prev_producer_id: 999,
        next_producer_id: -1,
        producer_epoch: 3,
        last_producer_epoch: 2,
        txn_timeout_ms: 60_000,
        txn_state: state,
        topic_partitions: if state == TransactionState::Empty {
            BTreeSet::new()
        } else {
            [
                ("b".to_string(), 1),
                ("a".to_string(), 0),
                ("a".to_string(), 2),
            ]
            .into()
        },
        txn_start_timestamp: 5,
        txn_last_update_timestamp: 6,
        client_transaction_version: tv,
    }
}

/// The bytes Kafka's `TransactionLog.keyToBytes` / `valueToBytes` give, worked out from the
/// schema: a v1 (flexible) value with ClientTransactionVersion 2 as tagged field 2.
#[test]
fn bytes_are_kafkas() {
    let rec = TxnLogRecord {
        transactional_id: "tx".into(),
        value: Some(transit(TransactionState::Ongoing, TransactionVersion::TV_2)),
        transaction_version_level: TransactionVersion::TV_2,
    };
    let (k, v) = rec.encode().unwrap();
    assert_eq!(&k[..], &[0, 0, 0, 2, b't', b'x']);
    let mut want = vec![0u8, 1];
    want.extend_from_slice(&1000i64.to_be_bytes());
    want.extend_from_slice(&3i16.to_be_bytes());
    want.extend_from_slice(&60_000i32.to_be_bytes());
    want.push(1); // Ongoing
    want.push(3); // two topics, compact array
    want.extend_from_slice(&[2, b'a', 3, 0, 0, 0, 0, 0, 0, 0, 2, 0]);
    want.extend_from_slice(&[2, b'b', 2, 0, 0, 0, 1, 0]);
    want.extend_from_slice(&6i64.to_be_bytes());
    want.extend_from_slice(&5i64.to_be_bytes());
    want.extend_from_slice(&[1, 2, 2, 0, 2]); // one tagged field: tag 2, size 2, value 2
    assert_eq!(&v.unwrap()[..], &want[..]);

    // Transaction version 0: value version 0, no tagged fields; Empty: null partitions.
    let rec = TxnLogRecord {
        transactional_id: "tx".into(),
        value: Some(transit(TransactionState::Empty, TransactionVersion::TV_0)),
        transaction_version_level: TransactionVersion::TV_0,
    };
    let (_, v) = rec.encode().unwrap();
    let v = v.unwrap();
    assert_eq!(&v[..2], &[0, 0]);
    assert_eq!(
        &v[2 + 8 + 2 + 4 + 1..2 + 8 + 2 + 4 + 1 + 4],
        &(-1i32).to_be_bytes()
    );
}

#[test]
fn decode_keeps_what_the_log_stores() {
    for (state, tv) in [
        (TransactionState::PrepareCommit, TransactionVersion::TV_2),
        (TransactionState::Empty, TransactionVersion::TV_0),
        (TransactionState::CompleteAbort, TransactionVersion::TV_1),
    ] {
        let t = transit(state, tv);
        let rec = TxnLogRecord {
            transactional_id: "x".into(),
            value: Some(t.clone()),
            transaction_version_level: tv,
        };
        let (k, v) = rec.encode().unwrap();
        let back = TxnLogRecord::decode(&k, v.as_deref()).unwrap().unwrap();
        let got = back.value.unwrap();
        // Not stored: the last epoch and (as Kafka writes values) the previous producer id.
        assert_eq!(got.last_producer_epoch, -1);
        assert_eq!(got.prev_producer_id, -1);
        assert_eq!(
            TxnTransitMetadata {
                last_producer_epoch: t.last_producer_epoch,
                prev_producer_id: t.prev_producer_id,
                ..got
            },
            t
        );
    }
    let tomb = TxnLogRecord {
        transactional_id: "gone".into(),
        value: None,
        transaction_version_level: TransactionVersion::TV_2,
    };
    let (k, v) = tomb.encode().unwrap();
    assert_eq!(v, None);
    assert_eq!(TxnLogRecord::decode(&k, None).unwrap().unwrap().value, None);
    // Another record type (a newer coordinator's) is skipped.
    assert_eq!(
        TxnLogRecord::decode(&[0, 9, 0, 0], Some(&[0, 0])).unwrap(),
        None
    );
}

use super::*;
use crate::idempotence::Tp;
use strom_protocol::records::RecordBatchDecoder;

fn rec(v: &str) -> ProducerRecord {
    ProducerRecord {
        topic: "t".into(),
        value: Some(Bytes::from(v.to_string())),
        key: Some(Bytes::from_static(b"k")),
        headers: vec![("h".into(), Some(Bytes::from_static(b"x")))],
        ..Default::default()
    }
}

#[test]
fn batch_fills_up_to_batch_size() {
    let mut b = ProducerBatch::new("t", 0, 0);
    let mut n = 0;
    while b.try_append(rec(&"x".repeat(100)), None, 1000).is_ok() {
        n += 1;
    }
    assert!((6..=8).contains(&n), "{n}");
    assert!(b.size() <= 1000);
    // A single record larger than batch.size still gets its own batch.
    let mut big = ProducerBatch::new("t", 0, 1);
    assert!(big.try_append(rec(&"x".repeat(5000)), None, 1000).is_ok());
    assert!(big.try_append(rec("y"), None, 1000).is_err());
}

#[test]
fn closed_batch_round_trips_with_every_compression() {
    for c in [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        let mut b = ProducerBatch::new("t", 3, 0);
        for i in 0..10 {
            b.try_append(rec(&format!("value-{i}")), None, 16384)
                .unwrap();
        }
        let bytes = b.close(c).unwrap().clone();
        // Closing again keeps the same bytes (retries resend them unchanged).
        assert_eq!(b.close(Compression::None).unwrap(), &bytes);
        assert!(b.try_append(rec("late"), None, 16384).is_err());
        let mut buf = bytes.clone();
        let sets = RecordBatchDecoder::decode_all(&mut buf).unwrap();
        assert_eq!(sets.len(), 1, "{c:?}: one batch");
        assert_eq!(sets[0].compression, c);
        let recs = &sets[0].records;
        assert_eq!(recs.len(), 10);
        for (i, r) in recs.iter().enumerate() {
            assert_eq!(r.offset, i as i64);
            assert_eq!(r.value.as_deref(), Some(format!("value-{i}").as_bytes()));
            assert_eq!(r.key.as_deref(), Some(&b"k"[..]));
            assert_eq!(r.producer_id, -1);
            assert_eq!(r.headers.len(), 1);
        }
        // Base sequence -1 in the header (bytes 53..57).
        assert_eq!(&bytes[53..57], &(-1i32).to_be_bytes());
        assert_eq!(bytes[16], 2, "magic");
    }
}

#[test]
fn idempotent_fields_are_encoded_once() {
    let mut b = ProducerBatch::new("t", 0, 0);
    for i in 0..5 {
        b.try_append(rec(&i.to_string()), None, 16384).unwrap();
    }
    let pid = ProducerIdAndEpoch {
        producer_id: 42,
        epoch: 3,
    };
    b.set_producer_state(pid, 100).unwrap();
    // A batch with a sequence takes no more records.
    assert!(b.try_append(rec("late"), None, 16384).is_err());
    let bytes = b.close(Compression::Lz4).unwrap().clone();
    // Closed: the producer state can no longer change (a retry resends the same bytes).
    assert!(b.set_producer_state(pid, 7).is_err());
    assert_eq!(b.close(Compression::Lz4).unwrap(), &bytes);
    assert_eq!(&bytes[43..51], &42i64.to_be_bytes());
    assert_eq!(&bytes[51..53], &3i16.to_be_bytes());
    assert_eq!(&bytes[53..57], &100i32.to_be_bytes());
    assert_eq!(&bytes[57..61], &5i32.to_be_bytes());
    let sets = RecordBatchDecoder::decode_all(&mut bytes.clone()).unwrap();
    assert_eq!(sets.len(), 1);
}

fn batch(id: u64, n: usize) -> ProducerBatch {
    let mut b = ProducerBatch::new("t", 0, id);
    for i in 0..n {
        b.try_append(rec(&i.to_string()), None, 1 << 20).unwrap();
    }
    b
}

/// What the accumulator does when it drains a batch.
fn assign(tm: &mut TransactionManager, tp: &Tp, b: &mut ProducerBatch) {
    tm.maybe_update_producer_id_and_epoch(tp);
    let seq = tm.sequence_number(tp);
    b.set_producer_state(tm.producer_id_and_epoch(), seq)
        .unwrap();
    tm.increment_sequence_number(tp, b.len() as i32);
    tm.add_inflight_batch(tp, b);
    b.close(Compression::None).unwrap();
}

#[test]
fn sequences_count_records_per_partition() {
    let pid = ProducerIdAndEpoch {
        producer_id: 7,
        epoch: 0,
    };
    let mut tm = TransactionManager::new();
    assert!(
        tm.bump_epoch_and_reset_id_if_needed(),
        "InitProducerId first"
    );
    assert!(!tm.bump_epoch_and_reset_id_if_needed(), "only once");
    tm.set_producer_id_and_epoch(pid);
    let (p0, p1) = (("t".to_string(), 0), ("t".to_string(), 1));
    let mut bs: Vec<ProducerBatch> = [3, 1, 5].iter().map(|&n| batch(0, n)).collect();
    for (i, b) in bs.iter_mut().enumerate() {
        b.id = i as u64;
        assign(&mut tm, &p0, b);
    }
    assert_eq!(
        bs.iter().map(|b| b.base_sequence).collect::<Vec<_>>(),
        [0, 3, 4]
    );
    assert_eq!(bs[2].last_sequence(), 8);
    let mut other = batch(10, 2);
    assign(&mut tm, &p1, &mut other);
    assert_eq!(other.base_sequence, 0, "sequences are per partition");
    assert_eq!(&other.encoded().unwrap()[43..51], &7i64.to_be_bytes());
    assert_eq!(tm.first_inflight_sequence(&p0), 0);
    // A retried batch keeps its sequence; completion advances the acked sequence.
    tm.handle_completed_batch(&p0, &bs[0], 0);
    assert_eq!(tm.first_inflight_sequence(&p0), 3);
    assert_eq!(tm.last_acked_sequence(&p0), 2);
    // OUT_OF_ORDER for a batch that is not the next one: retried without an epoch bump.
    let oos = Error::Kafka {
        code: ErrorCode::OutOfOrderSequenceNumber,
        message: None,
    };
    assert!(tm.can_retry(&p0, &bs[2], &oos, 0));
    assert!(!tm.epoch_bump_required());
    // For the next batch it is a real gap: retried after an epoch bump.
    assert!(tm.can_retry(&p0, &bs[1], &oos, 0));
    assert!(tm.epoch_bump_required());
    assert!(!tm.bump_epoch_and_reset_id_if_needed());
    assert_eq!(tm.producer_id_and_epoch().epoch, 1);
    // The in-flight batches of the partition restart at 0 under the new epoch.
    for b in bs.iter_mut().skip(1) {
        tm.sync_batch(b);
        assert!(b.sequence_has_been_reset());
        assert!(!b.is_closed(), "re-encoded when drained again");
    }
    assert_eq!((bs[1].base_sequence, bs[2].base_sequence), (0, 1));
    assert_eq!(bs[2].producer_epoch, 1);
    assert_eq!(tm.sequence_number(&p0), 6);
    // The other partition moves to the new epoch once its batch completed.
    tm.handle_completed_batch(&p1, &other, 0);
    let mut next = batch(11, 1);
    assign(&mut tm, &p1, &mut next);
    assert_eq!((next.base_sequence, next.producer_epoch), (0, 1));
}

#[test]
fn sequences_wrap_at_i32_max() {
    assert_eq!(increment_sequence(0, 5), 5);
    assert_eq!(increment_sequence(i32::MAX - 5, 5), i32::MAX);
    assert_eq!(increment_sequence(i32::MAX, 1), 0);
    assert_eq!(increment_sequence(i32::MAX - 1, 5), 3);
    let mut tm = TransactionManager::new();
    tm.set_producer_id_and_epoch(ProducerIdAndEpoch {
        producer_id: 1,
        epoch: 0,
    });
    let tp = ("t".to_string(), 0);
    tm.maybe_update_producer_id_and_epoch(&tp);
    tm.increment_sequence_number(&tp, i32::MAX - 2);
    let mut b = batch(0, 5);
    assign(&mut tm, &tp, &mut b);
    assert_eq!(b.base_sequence, i32::MAX - 2);
    assert_eq!(b.last_sequence(), 1);
    assert_eq!(tm.sequence_number(&tp), 2);
    // Encoded as one batch with the base sequence in the header.
    let bytes = b.encoded().unwrap().clone();
    assert_eq!(&bytes[53..57], &(i32::MAX - 2).to_be_bytes());
    let sets = RecordBatchDecoder::decode_all(&mut bytes.clone()).unwrap();
    assert_eq!(sets.len(), 1);
    tm.handle_completed_batch(&tp, &b, 0);
    let mut c = batch(1, 1);
    assign(&mut tm, &tp, &mut c);
    assert_eq!(c.base_sequence, 2);
}

#[test]
fn epoch_exhausted_gets_a_new_producer_id() {
    let mut tm = TransactionManager::new();
    tm.set_producer_id_and_epoch(ProducerIdAndEpoch {
        producer_id: 1,
        epoch: i16::MAX,
    });
    let tp = ("t".to_string(), 0);
    let mut b = batch(0, 1);
    assign(&mut tm, &tp, &mut b);
    let e = Error::Kafka {
        code: ErrorCode::OutOfOrderSequenceNumber,
        message: None,
    };
    tm.handle_failed_batch(&tp, &b, &e, true);
    assert!(
        tm.bump_epoch_and_reset_id_if_needed(),
        "InitProducerId again"
    );
    assert!(!tm.has_producer_id());
}

fn props(p: &[(&str, &str)]) -> Result<ProducerConfig> {
    ProducerConfig::from_properties(p)
}

fn config_error(p: &[(&str, &str)]) -> String {
    match props(p) {
        Err(Error::ConfigException(m)) => m,
        other => panic!("{p:?}: expected ConfigException, got {other:?}"),
    }
}

#[test]
fn idempotence_config_rules() {
    let d = props(&[]).unwrap();
    assert_eq!(d.enable_idempotence, None);
    assert_eq!(
        (d.acks, d.max_in_flight, d.retries),
        (Acks::All, 5, i32::MAX as u32)
    );
    assert!(d.idempotence().unwrap());
    assert_eq!(
        config_error(&[("enable.idempotence", "true"), ("acks", "1")]),
        "Must set acks to all in order to use the idempotent producer. Otherwise we cannot guarantee idempotence."
    );
    assert_eq!(
        config_error(&[
            ("enable.idempotence", "true"),
            ("max.in.flight.requests.per.connection", "6")
        ]),
        "To use the idempotent producer, max.in.flight.requests.per.connection must be set to at most 5. Current value is 6."
    );
    assert_eq!(
        config_error(&[("enable.idempotence", "true"), ("retries", "0")]),
        "Must set retries to non-zero when using the idempotent producer."
    );
    // Explicitly off: anything goes.
    let c = props(&[
        ("enable.idempotence", "false"),
        ("acks", "1"),
        ("max.in.flight.requests.per.connection", "6"),
    ])
    .unwrap();
    assert!(!c.idempotence().unwrap());
    // Not set: acks=1 or retries=0 silently turn idempotence off.
    assert!(!props(&[("acks", "1")]).unwrap().idempotence().unwrap());
    assert!(!props(&[("acks", "0")]).unwrap().idempotence().unwrap());
    assert!(!props(&[("retries", "0")]).unwrap().idempotence().unwrap());
    assert!(props(&[
        ("acks", "all"),
        ("max.in.flight.requests.per.connection", "5")
    ])
    .unwrap()
    .idempotence()
    .unwrap());
    // ... but in Kafka 4 max.in.flight > 5 fails even when idempotence is only the default.
    assert_eq!(
        config_error(&[("max.in.flight.requests.per.connection", "6")]),
        "To use the idempotent producer, max.in.flight.requests.per.connection must be set to at most 5. Current value is 6."
    );
    assert_eq!(
        config_error(&[("acks", "1"), ("max.in.flight.requests.per.connection", "6")]),
        "To use the idempotent producer, max.in.flight.requests.per.connection must be set to at most 5. Current value is 6."
    );
    // The same rules for a config built in code.
    let c = ProducerConfig {
        enable_idempotence: Some(true),
        acks: Acks::Leader,
        ..Default::default()
    };
    assert!(matches!(c.idempotence(), Err(Error::ConfigException(_))));
    // Other properties.
    let c = props(&[
        ("bootstrap.servers", "a:1, b:2"),
        ("client.id", "me"),
        ("batch.size", "100"),
        ("linger.ms", "7"),
        ("compression.type", "zstd"),
        ("delivery.timeout.ms", "40000"),
        ("request.timeout.ms", "1000"),
        ("retry.backoff.ms", "50"),
    ])
    .unwrap();
    assert_eq!(c.bootstrap_servers, ["a:1", "b:2"]);
    assert_eq!(c.client_config().client_id, "me");
    assert_eq!(c.batch_size, 100);
    assert_eq!(c.linger, Duration::from_millis(7));
    assert_eq!(c.compression, Compression::Zstd);
    assert_eq!(c.delivery_timeout, Duration::from_secs(40));
    assert_eq!(c.retry_backoff, Duration::from_millis(50));
    assert_eq!(
        config_error(&[("retries", "x")]),
        "Invalid value x for configuration retries: Not a number of type INT"
    );
    assert_eq!(
        config_error(&[("delivery.timeout.ms", "100")]),
        "delivery.timeout.ms should be equal to or larger than linger.ms + request.timeout.ms"
    );
}

#[test]
fn parses_settings() {
    assert_eq!("all".parse::<Acks>().unwrap(), Acks::All);
    assert_eq!("-1".parse::<Acks>().unwrap().value(), -1);
    assert_eq!("0".parse::<Acks>().unwrap().value(), 0);
    assert!("2".parse::<Acks>().is_err());
    assert_eq!(parse_compression("ZSTD").unwrap(), Compression::Zstd);
    assert!(parse_compression("brotli").is_err());
}

#[test]
fn partitioner_settings() {
    use crate::partitioner::PartitionerKind;
    let c = props(&[]).unwrap();
    assert_eq!(c.partitioner, PartitionerKind::BuiltIn);
    assert!(!c.partitioner_ignore_keys);
    assert!(c.partitioner_adaptive_partitioning);
    assert_eq!(c.partitioner_availability_timeout, Duration::ZERO);
    let c = props(&[
        (
            "partitioner.class",
            "org.apache.kafka.clients.producer.RoundRobinPartitioner",
        ),
        ("partitioner.ignore.keys", "true"),
        ("partitioner.adaptive.partitioning.enable", "false"),
        ("partitioner.availability.timeout.ms", "250"),
        ("partitioner.rack.aware", "true"),
        ("client.rack", "r1"),
    ])
    .unwrap();
    assert_eq!(c.partitioner, PartitionerKind::RoundRobin);
    assert!(c.partitioner_ignore_keys);
    assert!(!c.partitioner_adaptive_partitioning);
    assert_eq!(
        c.partitioner_availability_timeout,
        Duration::from_millis(250)
    );
    assert_eq!(
        config_error(&[("partitioner.class", "com.example.Mine")]),
        "Invalid value com.example.Mine for configuration partitioner.class: Class \
         com.example.Mine could not be found."
    );
    assert_eq!(
        config_error(&[("partitioner.ignore.keys", "yes")]),
        "Invalid value yes for configuration partitioner.ignore.keys: Expected value to be \
         either true or false"
    );
}

#[test]
fn transactional_config_rules() {
    let c = props(&[
        ("transactional.id", "tx-1"),
        ("transaction.timeout.ms", "30000"),
        ("max.block.ms", "5000"),
    ])
    .unwrap();
    assert_eq!(c.transactional_id.as_deref(), Some("tx-1"));
    assert_eq!(c.transaction_timeout, Duration::from_secs(30));
    assert_eq!(c.max_block, Duration::from_secs(5));
    assert!(c.idempotence().unwrap());
    assert_eq!(
        props(&[]).unwrap().transaction_timeout,
        Duration::from_secs(60)
    );
    // Java: a transactional id needs idempotence, whether it was turned off explicitly or by
    // a conflicting setting.
    for conflicting in [("enable.idempotence", "false"), ("acks", "1")] {
        assert_eq!(
            config_error(&[("transactional.id", "tx-1"), conflicting]),
            "Cannot set a transactional.id without also enabling idempotence."
        );
    }
}

#[test]
fn transactional_batches_carry_the_attribute() {
    let mut b = ProducerBatch::new("t", 0, 0);
    b.try_append(rec("v"), None, 16384).unwrap();
    b.set_producer_state(
        ProducerIdAndEpoch {
            producer_id: 9,
            epoch: 1,
        },
        0,
    )
    .unwrap();
    b.transactional = true;
    let bytes = b.close(Compression::None).unwrap().clone();
    // Attributes (bytes 21..23): bit 4 is the transactional flag, bit 5 (control) unset.
    let attributes = i16::from_be_bytes([bytes[21], bytes[22]]);
    assert_eq!(attributes & 0x30, 0x10);
    let sets = RecordBatchDecoder::decode_all(&mut bytes.clone()).unwrap();
    assert!(sets[0].records[0].transactional);
}

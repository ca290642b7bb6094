//! Log compaction seen by a consumer while the cleaner runs: an idempotent producer keeps
//! updating (and now and then deleting) a small key set of a compacted topic whose segments
//! roll every few hundred milliseconds, so the cleaner rewrites the log all the time; a
//! consumer meanwhile reads the topic from the beginning again and again (read_uncommitted).
//! Kafka's guarantee, checked for every read:
//! - for every key written at or before the read's last offset, the last record the read saw
//!   for it is the key's latest write (value, or tombstone: delete.retention.ms is an hour);
//! - no key that was never written appears, offsets strictly increase, and every record read
//!   is the one produced at that offset;
//!
//! and the cleaner did clean (a final read holds far fewer records than were written).
//!
//! `STROM_TEST_REFERENCE=kafka` runs it against Kafka 4.4.

mod common;
mod compaction_util;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::Broker;
use compaction_util::*;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::consumer::Consumer;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DeliveryResult, ProducerContext, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};

const TOPIC: &str = "compacted-live";
const KEYS: u64 = 200;
const PRODUCE_FOR: Duration = Duration::from_secs(25);
/// Records per second the producer aims at (the debug build shares two cores with the test).
const RATE: u64 = 1500;

/// (offset, key index, Some(sequence) or None for a tombstone).
type Written = (i64, u16, Option<u32>);

struct Log(Arc<Mutex<Vec<Written>>>);
impl ClientContext for Log {}
impl ProducerContext for Log {
    type DeliveryOpaque = ();
    fn delivery(&self, r: &DeliveryResult<'_>, _: ()) {
        match r {
            Ok(m) => {
                let (k, v) = parse(m.key(), m.payload());
                self.0.lock().unwrap().push((m.offset(), k, v));
            }
            Err((e, _)) => panic!("record not delivered: {e}"),
        }
    }
}

fn key(k: u16) -> String {
    format!("key-{k:03}")
}

/// Key index and sequence of a record (values are `SEQ:padding`).
fn parse(key: Option<&[u8]>, value: Option<&[u8]>) -> (u16, Option<u32>) {
    let k = std::str::from_utf8(key.expect("a key")).unwrap();
    let k: u16 = k.strip_prefix("key-").unwrap().parse().unwrap();
    let v = value.map(|v| {
        let s = std::str::from_utf8(v).unwrap();
        s.split(':').next().unwrap().parse::<u32>().unwrap()
    });
    (k, v)
}

/// One read of the topic from its beginning: what it saw, in order.
struct Pass {
    records: Vec<Written>,
}

fn read_pass(t: &Target, stop: Option<i64>) -> Pass {
    let c = reader(t);
    let mut hw = watermarks(&c, TOPIC).1;
    for _ in 0..600 {
        if hw > 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
        hw = watermarks(&c, TOPIC).1;
    }
    assert!(hw > 0, "nothing written to {TOPIC} within 30 s");
    // Read at least to the high watermark seen at the start.
    let target = stop.unwrap_or(hw - 1);
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(TOPIC, 0, Offset::Beginning)
        .unwrap();
    c.assign(&tpl).expect("assign");
    let mut records: Vec<Written> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while records.last().map(|r| r.0) < Some(target) {
        assert!(
            Instant::now() < deadline,
            "read to {target} timed out at {:?}",
            records.last()
        );
        match c.poll(Duration::from_millis(100)) {
            None => {}
            Some(Err(e)) => panic!("consume error: {e}"),
            Some(Ok(m)) => {
                let (k, v) = parse(m.key(), m.payload());
                if let Some(last) = records.last() {
                    assert!(
                        m.offset() > last.0,
                        "offset {} after {} in one read",
                        m.offset(),
                        last.0
                    );
                }
                records.push((m.offset(), k, v));
            }
        }
    }
    Pass { records }
}

fn check(pass_no: usize, pass: &Pass, written: &[Written]) {
    let by_offset: HashMap<i64, &Written> = written.iter().map(|w| (w.0, w)).collect();
    let end = pass.records.last().expect("a read saw nothing").0;
    let mut latest: HashMap<u16, Option<u32>> = HashMap::new();
    for w in written.iter().take_while(|w| w.0 <= end) {
        latest.insert(w.1, w.2);
    }
    let mut seen: HashMap<u16, Option<u32>> = HashMap::new();
    for r in &pass.records {
        let w = by_offset
            .get(&r.0)
            .unwrap_or_else(|| panic!("read {pass_no}: offset {} was never produced", r.0));
        assert_eq!(**w, *r, "read {pass_no}: record at offset {}", r.0);
        seen.insert(r.1, r.2);
    }
    for (k, v) in &latest {
        assert_eq!(
            seen.get(k),
            Some(v),
            "read {pass_no} (to offset {end}): key {} last seen as {:?}, latest write {:?}",
            key(*k),
            seen.get(k),
            v
        );
    }
    assert_eq!(
        seen.len(),
        latest.len(),
        "read {pass_no}: keys never written"
    );
}

#[test]
fn consumer_sees_latest_value_per_key_while_cleaning() {
    let broker = Broker::start_with(&["log.cleaner.backoff.ms=100"]);
    let t = Target {
        name: "broker",
        bootstrap: broker.bootstrap(),
        log_dir: broker.data_dir(),
    };
    let admin: AdminClient<DefaultClientContext> = t.config().create().unwrap();
    let nt = NewTopic::new(TOPIC, 1, TopicReplication::Fixed(1))
        .set("cleanup.policy", "compact")
        .set("segment.bytes", "1048576")
        .set("segment.ms", "300")
        .set("min.cleanable.dirty.ratio", "0.01")
        .set("min.compaction.lag.ms", "0")
        .set("delete.retention.ms", "3600000");
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(20)));
    let res = common::block_on(admin.create_topics([&nt], &opts)).unwrap();
    assert!(res[0].is_ok(), "{:?}", res[0]);

    let written = Arc::new(Mutex::new(Vec::new()));
    let p: ThreadedProducer<Log> = t
        .config()
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .set("compression.type", "none")
        .create_with_context(Log(written.clone()))
        .expect("producer");
    let done = AtomicBool::new(false);
    let passes = std::thread::scope(|s| {
        let reads = s.spawn(|| {
            let mut passes = Vec::new();
            while !done.load(Ordering::Relaxed) {
                passes.push(read_pass(&t, None));
            }
            passes
        });
        let mut rng = 7u64;
        let start = Instant::now();
        let mut seq = 0u32;
        let pad = "v".repeat(100);
        while start.elapsed() < PRODUCE_FOR {
            // Paced: record n goes out at n / RATE seconds.
            let due = Duration::from_micros(seq as u64 * 1_000_000 / RATE);
            if let Some(wait) = due.checked_sub(start.elapsed()) {
                std::thread::sleep(wait);
            }
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let k = key(((rng >> 33) % KEYS) as u16);
            let tombstone = (rng >> 20).is_multiple_of(10);
            let v = format!("{seq}:{pad}");
            let mut rec: BaseRecord<'_, str, str> = BaseRecord::to(TOPIC).partition(0).key(&k);
            if !tombstone {
                rec = rec.payload(&v);
            }
            let mut rec = rec;
            loop {
                match p.send(rec) {
                    Ok(()) => break,
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                        rec = r;
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err((e, _)) => panic!("send: {e}"),
                }
            }
            seq += 1;
        }
        rdkafka::producer::Producer::flush(&p, Duration::from_secs(30)).expect("flush");
        done.store(true, Ordering::Relaxed);
        reads.join().unwrap()
    });
    let mut written = written.lock().unwrap().clone();
    written.sort();
    let last = written.last().unwrap().0;
    // The last read, with nothing written any more, to the very last record.
    let final_pass = read_pass(&t, Some(last));
    eprintln!(
        "{} records written, {} reads while writing ({} to {} records each), final read {} records",
        written.len(),
        passes.len(),
        passes.iter().map(|p| p.records.len()).min().unwrap_or(0),
        passes.iter().map(|p| p.records.len()).max().unwrap_or(0),
        final_pass.records.len()
    );
    assert!(
        passes.len() >= 3,
        "only {} reads while writing",
        passes.len()
    );
    for (i, pass) in passes.iter().enumerate() {
        check(i, pass, &written);
    }
    check(passes.len(), &final_pass, &written);
    assert!(
        final_pass.records.len() * 4 < written.len(),
        "the cleaner did not clean: {} of {} records left",
        final_pass.records.len(),
        written.len()
    );
}

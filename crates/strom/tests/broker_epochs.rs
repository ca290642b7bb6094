//! A partition leader that loses data in a crash and comes back within
//! `broker.session.timeout.ms` must not lead again with what is left (issue 18, defect 3).
//!
//! Three nodes, a topic with replication factor 3 and `min.insync.replicas=2`, an idempotent
//! acks=all librdkafka producer writing a numbered sequence. The leader is SIGKILLed, loses
//! (a) the tail of its active segment — the page cache it never flushed (`flush.ms` is
//! unset, as in Kafka) — or (b) its whole partition directory — a lost disk — and is restarted
//! at once. Everything is then read back: every acknowledged record must be there, at the
//! offset it was acknowledged at, exactly once, in order.
//!
//! Kafka's protection, reproduced here: the restarted process is a new incarnation
//! (`BrokerRegistrationRequest.incarnationId`) whose registration is refused with
//! DUPLICATE_BROKER_REGISTRATION while the old incarnation's session lives
//! (`ClusterControlManager.registerBroker`); the session expires, the old incarnation is fenced
//! and its leaderships move to the ISR (`ReplicationControlManager.handleBrokerFenced`); the new
//! incarnation registers fenced with a new broker epoch — the offset of its registration record
//! — and, having shut down uncleanly (no `.kafka_cleanshutdown` with its previous broker epoch),
//! out of every ISR (`handleBrokerShutdown`); it rejoins as a follower once caught up, the
//! leader proposing it with the broker epoch of its fetches (KIP-903).

mod common;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::block_on;
use common::cluster::{eventually, isr, metadata, wait_all_registered, Cluster};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
use rdkafka::{Message, Offset, TopicPartitionList};

const TOPIC: &str = "epochs";
/// Short enough for the test, long enough that a restarted debug build registers well within
/// it (the point of the scenario).
const SESSION_TIMEOUT_MS: u64 = 6000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Loss {
    /// The active segment's second half (its unflushed page cache).
    SegmentTail,
    /// The whole partition directory (a lost disk).
    PartitionDir,
}

/// What the producer was told: (offset, sequence number) of every acknowledged record, and the
/// first error a record failed with.
#[derive(Default)]
struct Outcome {
    acked: Vec<(i64, u64)>,
    first_error: Option<String>,
}

struct Ctx(Arc<Mutex<Outcome>>);
impl rdkafka::ClientContext for Ctx {}
impl rdkafka::producer::ProducerContext for Ctx {
    type DeliveryOpaque = ();
    fn delivery(&self, r: &rdkafka::message::DeliveryResult<'_>, _: ()) {
        let mut o = self.0.lock().unwrap();
        match r {
            Ok(m) => {
                let seq = std::str::from_utf8(m.payload().unwrap())
                    .unwrap()
                    .parse()
                    .unwrap();
                o.acked.push((m.offset(), seq));
            }
            Err((e, _)) => {
                o.first_error.get_or_insert_with(|| e.to_string());
            }
        }
    }
}

fn acked_count(o: &Arc<Mutex<Outcome>>) -> usize {
    o.lock().unwrap().acked.len()
}

/// The `.log` file with the highest base offset in a partition directory.
fn active_segment(dir: &Path) -> PathBuf {
    let mut logs: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    logs.pop().expect("a segment")
}

fn lose_data(c: &Cluster, node: i32, loss: Loss) {
    let dir = c.data_dir(node).join(format!("{TOPIC}-0"));
    match loss {
        Loss::SegmentTail => {
            let seg = active_segment(&dir);
            let len = std::fs::metadata(&seg).unwrap().len();
            let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
            f.set_len(len / 2).unwrap();
            eprintln!(
                "truncated {} from {len} to {} bytes",
                seg.display(),
                len / 2
            );
        }
        Loss::PartitionDir => {
            std::fs::remove_dir_all(&dir).unwrap();
            eprintln!("removed {}", dir.display());
        }
    }
}

/// Every record of partition 0 below its high watermark, as (offset, sequence number), read
/// through every node.
fn read_back(c: &Cluster) -> Vec<(i64, u64)> {
    let consumer: BaseConsumer = common::cluster::consumer_config(c, &[1, 2, 3])
        .create()
        .unwrap();
    let hw = eventually("the high watermark", || {
        consumer
            .fetch_watermarks(TOPIC, 0, Duration::from_secs(5))
            .ok()
            .map(|(_, hw)| hw)
    });
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(TOPIC, 0, Offset::Beginning)
        .unwrap();
    consumer.assign(&tpl).unwrap();
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while out.last().is_none_or(|&(o, _)| o + 1 < hw) {
        assert!(
            Instant::now() < deadline,
            "read back only up to {:?} of {hw}",
            out.last()
        );
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
            let seq = std::str::from_utf8(m.payload().unwrap())
                .unwrap()
                .parse()
                .unwrap();
            out.push((m.offset(), seq));
        }
    }
    out
}

fn leader_loses_data_and_restarts_within_the_session(loss: Loss) {
    let session = format!("broker.session.timeout.ms={SESSION_TIMEOUT_MS}");
    let mut c = Cluster::start_with(
        3,
        &[
            &session,
            "broker.heartbeat.interval.ms=500",
            "replica.fetch.wait.max.ms=100",
        ],
    );
    wait_all_registered(&c, 3);
    let admin: AdminClient<DefaultClientContext> = c.config(&[1, 2, 3]).create().unwrap();
    let topic = NewTopic::new(TOPIC, 1, TopicReplication::Fixed(3)).set("min.insync.replicas", "2");
    let r = block_on(admin.create_topics([&topic], &AdminOptions::new())).unwrap();
    assert!(r[0].is_ok(), "{r:?}");
    let leader = eventually("a leader with the full ISR", || {
        let l = metadata(&c, 1, TOPIC).2.get(&0).copied().unwrap_or(-1);
        (l > 0 && isr(&c, l, TOPIC) == vec![1, 2, 3]).then_some(l)
    });

    let outcome = Arc::new(Mutex::new(Outcome::default()));
    let p: ThreadedProducer<Ctx> = c
        .config(&[1, 2, 3])
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("linger.ms", "2")
        .set("message.timeout.ms", "120000")
        .create_with_context(Ctx(outcome.clone()))
        .unwrap();
    let mut next: u64 = 0;
    let mut send_until = |p: &ThreadedProducer<Ctx>, target: usize, limit: Duration| {
        let deadline = Instant::now() + limit;
        while acked_count(&outcome) < target && Instant::now() < deadline {
            // Keep a bounded number in flight.
            while (next as usize) < acked_count(&outcome) + 500 {
                let v = next.to_string();
                let rec = BaseRecord::<str, str>::to(TOPIC).payload(&v).partition(0);
                if p.send(rec).is_err() {
                    break;
                }
                next += 1;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    };
    send_until(&p, 3000, Duration::from_secs(60));
    assert!(
        acked_count(&outcome) >= 3000,
        "{:?}",
        outcome.lock().unwrap().first_error
    );

    // SIGKILL the leader, lose data, restart it at once: back well within its session.
    c.kill(leader);
    let killed = Instant::now();
    lose_data(&c, leader, loss);
    c.restart(leader);
    eprintln!(
        "node {leader} killed, lost {loss:?}, listening again after {:?}",
        killed.elapsed()
    );
    assert!(
        killed.elapsed() < Duration::from_millis(SESSION_TIMEOUT_MS),
        "restart took longer than the session"
    );

    // More records through the failover, then everything flushed.
    let before = acked_count(&outcome);
    send_until(&p, before + 3000, Duration::from_secs(90));
    assert_eq!(p.flush(Duration::from_secs(120)), Ok(()));
    eventually("the restarted node back in the ISR", || {
        let l = metadata(&c, 1, TOPIC).2.get(&0).copied().unwrap_or(-1);
        (l > 0 && isr(&c, l, TOPIC) == vec![1, 2, 3]).then_some(())
    });

    let log = read_back(&c);
    let outcome = outcome.lock().unwrap();
    let mut problems = Vec::new();
    let at: std::collections::HashMap<i64, u64> = log.iter().copied().collect();
    let mut seen = std::collections::HashMap::new();
    for &(o, s) in &log {
        if let Some(first) = seen.insert(s, o) {
            problems.push(format!("record {s} twice: offsets {first} and {o}"));
        }
    }
    for w in log.windows(2) {
        if w[1].1 <= w[0].1 {
            problems.push(format!("out of order: {:?} then {:?}", w[0], w[1]));
        }
    }
    let mut lost = 0;
    for &(o, s) in &outcome.acked {
        match at.get(&o) {
            Some(&v) if v == s => {}
            other => {
                lost += 1;
                if lost <= 5 {
                    problems.push(format!(
                        "acknowledged record {s} at offset {o}: the log has {other:?}"
                    ));
                }
            }
        }
    }
    if lost > 0 {
        problems.push(format!(
            "{lost} of {} acknowledged records lost",
            outcome.acked.len()
        ));
    }
    assert!(
        problems.is_empty(),
        "{loss:?}: {} records in the log, {} acknowledged, first producer error {:?}:\n{}",
        log.len(),
        outcome.acked.len(),
        outcome.first_error,
        problems.join("\n")
    );
    eprintln!(
        "{loss:?}: {} acknowledged records all read back, {} records in the log",
        outcome.acked.len(),
        log.len()
    );
}

#[test]
fn leader_that_lost_its_segment_tail_does_not_lead_again() {
    leader_loses_data_and_restarts_within_the_session(Loss::SegmentTail);
}

#[test]
fn leader_that_lost_its_partition_dir_does_not_lead_again() {
    leader_loses_data_and_restarts_within_the_session(Loss::PartitionDir);
}

//! Helpers of the compaction tests (compaction_diff.rs, compaction_consume.rs): a producer that
//! writes one record per batch and waits for its offset, a read_uncommitted reader of a whole
//! partition, and readers of a partition's files on disk (segments, batch headers, the log
//! dir's `cleaner-offset-checkpoint`) that work the same on Strom's and on Kafka's data dirs.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::{Offset, TopicPartitionList};

/// How long one produce, transaction step or metadata call may take.
pub const STEP: Duration = Duration::from_secs(30);

/// A broker under test: its bootstrap address and the log dir holding its partitions.
pub struct Target {
    pub name: &'static str,
    pub bootstrap: String,
    pub log_dir: PathBuf,
}

impl Target {
    pub fn partition_dir(&self, topic: &str, partition: i32) -> PathBuf {
        self.log_dir.join(format!("{topic}-{partition}"))
    }

    pub fn config(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.bootstrap)
            .set("client.id", "strom-compaction-it")
            .set("socket.timeout.ms", "20000");
        c
    }
}

pub struct Ctx(Mutex<mpsc::Sender<Result<i64, String>>>);

impl ClientContext for Ctx {}

impl ProducerContext for Ctx {
    type DeliveryOpaque = ();
    fn delivery(&self, r: &DeliveryResult<'_>, _: ()) {
        let rep = match r {
            Ok(m) => Ok(m.offset()),
            Err((e, _)) => Err(e.to_string()),
        };
        let _ = self.0.lock().unwrap().send(rep);
    }
}

/// What kind of producer writes a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Plain,
    Idempotent,
    Transactional,
}

/// A producer whose every `send` is its own batch: it waits for the record's offset before it
/// returns, so records of several producers land in the order they were sent.
pub struct SyncProducer {
    p: BaseProducer<Ctx>,
    rx: mpsc::Receiver<Result<i64, String>>,
}

impl SyncProducer {
    pub fn new(t: &Target, kind: Kind, transactional_id: Option<&str>) -> SyncProducer {
        let (tx, rx) = mpsc::channel();
        let mut c = t.config();
        c.set("acks", "all")
            .set("linger.ms", "0")
            .set("batch.num.messages", "1")
            .set("max.in.flight.requests.per.connection", "1")
            .set("message.max.bytes", "2000000")
            .set("compression.type", "none");
        match kind {
            Kind::Plain => {
                c.set("enable.idempotence", "false");
            }
            Kind::Idempotent => {
                c.set("enable.idempotence", "true");
            }
            Kind::Transactional => {
                c.set(
                    "transactional.id",
                    transactional_id.expect("transactional id"),
                )
                .set("transaction.timeout.ms", "60000");
            }
        }
        let p: BaseProducer<Ctx> = c
            .create_with_context(Ctx(Mutex::new(tx)))
            .expect("create producer");
        if kind == Kind::Transactional {
            p.init_transactions(STEP).expect("init_transactions");
        }
        SyncProducer { p, rx }
    }

    /// Sends one record and returns its offset.
    pub fn send(&self, topic: &str, key: &[u8], value: Option<&[u8]>) -> i64 {
        let mut rec: BaseRecord<'_, [u8], [u8], ()> = BaseRecord::to(topic).partition(0).key(key);
        if let Some(v) = value {
            rec = rec.payload(v);
        }
        self.p
            .send(rec)
            .unwrap_or_else(|(e, _)| panic!("send: {e}"));
        let deadline = Instant::now() + STEP;
        loop {
            self.p.poll(Duration::from_millis(5));
            match self.rx.try_recv() {
                Ok(Ok(off)) => return off,
                Ok(Err(e)) => panic!("record not delivered: {e}"),
                Err(_) => assert!(Instant::now() < deadline, "no delivery report"),
            }
        }
    }

    pub fn begin(&self) {
        self.p.begin_transaction().expect("begin_transaction");
    }

    pub fn end(&self, commit: bool) {
        if commit {
            self.p.commit_transaction(STEP).expect("commit_transaction");
        } else {
            self.p.abort_transaction(STEP).expect("abort_transaction");
        }
    }
}

/// A consumer outside any group (assign only), reading uncommitted records.
pub fn reader(t: &Target) -> BaseConsumer {
    t.config()
        .set("group.id", "strom-compaction-it-unused")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("isolation.level", "read_uncommitted")
        .set("enable.partition.eof", "false")
        .set("fetch.wait.max.ms", "50")
        .create()
        .expect("create consumer")
}

/// (log start offset, high watermark) of partition 0.
pub fn watermarks(c: &BaseConsumer, topic: &str) -> (i64, i64) {
    let deadline = Instant::now() + STEP;
    loop {
        match c.fetch_watermarks(topic, 0, Duration::from_secs(10)) {
            Ok(w) => return w,
            Err(e) => {
                assert!(Instant::now() < deadline, "watermarks of {topic}: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// Waits (bounded) until partition 0's high watermark is at least `end` (a transaction's
/// marker is written after EndTxn is answered; waiting for it keeps the log's order fixed).
pub fn wait_hw(c: &BaseConsumer, topic: &str, end: i64) {
    let deadline = Instant::now() + STEP;
    loop {
        let (_, hw) = watermarks(c, topic);
        if hw >= end {
            assert_eq!(hw, end, "high watermark of {topic} went past {end}");
            return;
        }
        assert!(Instant::now() < deadline, "high watermark {hw} < {end}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// One record as read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Got {
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
}

/// Reads partition 0 of `topic` from the beginning until the record at `last` (inclusive;
/// it must be a data record that no cleaning removes, e.g. in the active segment).
pub fn read_until(c: &BaseConsumer, topic: &str, last: i64, timeout: Duration) -> Vec<Got> {
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning)
        .unwrap();
    c.assign(&tpl).expect("assign");
    let mut out: Vec<Got> = Vec::new();
    let deadline = Instant::now() + timeout;
    while out.last().map(|g| g.offset) < Some(last) {
        assert!(
            Instant::now() < deadline,
            "reading {topic} up to offset {last} timed out at {:?}",
            out.last().map(|g| g.offset)
        );
        match c.poll(Duration::from_millis(100)) {
            None => {}
            Some(Err(e)) => panic!("consume error: {e}"),
            Some(Ok(m)) => out.push(Got {
                offset: m.offset(),
                key: m.key().map(<[u8]>::to_vec),
                value: m.payload().map(<[u8]>::to_vec),
            }),
        }
    }
    out
}

/// The base offsets and paths of a partition's segment files (`.log`), in offset order.
/// Files on their way out (`.deleted`) or not yet in (`.cleaned`, `.swap`) are left out.
pub fn segments(dir: &Path) -> Vec<(i64, PathBuf)> {
    let mut out: Vec<(i64, PathBuf)> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display()))
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let base = name.strip_suffix(".log")?;
            Some((base.parse::<i64>().ok()?, e.path()))
        })
        .collect();
    out.sort();
    out
}

/// The files of a partition dir with their sizes, minus those waiting for deletion: when this
/// stops changing the cleaner has nothing more to do.
pub fn dir_state(dir: &Path) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter_map(|e| {
                    let name = e.file_name().into_string().ok()?;
                    if name.ends_with(".deleted") {
                        return None;
                    }
                    Some((name, e.metadata().ok()?.len()))
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// `cleaner-offset-checkpoint` of a log dir (Kafka's format: version 0, a count, then
/// `topic partition offset` lines): the entry of `topic`-`partition`.
pub fn cleaner_checkpoint(log_dir: &Path, topic: &str, partition: i32) -> Option<i64> {
    let text = std::fs::read_to_string(log_dir.join("cleaner-offset-checkpoint")).ok()?;
    let mut lines = text.lines();
    if lines.next()? != "0" {
        return None;
    }
    let _count = lines.next()?;
    lines.find_map(|l| {
        let mut f = l.split(' ');
        let (t, p, o) = (f.next()?, f.next()?, f.next()?);
        (t == topic && p.parse::<i32>().ok()? == partition)
            .then(|| o.parse::<i64>().ok())
            .flatten()
    })
}

/// Waits (bounded) until the cleaner has cleaned partition 0 of `topic` up to its active
/// segment (the checkpoint reached the active segment's base offset) and the partition's files
/// stayed unchanged for `quiet`. Returns the checkpointed offset.
pub fn wait_cleaned(t: &Target, topic: &str, quiet: Duration, timeout: Duration) -> i64 {
    let dir = t.partition_dir(topic, 0);
    let deadline = Instant::now() + timeout;
    let mut last = (dir_state(&dir), Instant::now());
    loop {
        let active = segments(&dir).last().map(|s| s.0).unwrap_or(0);
        let cp = cleaner_checkpoint(&t.log_dir, topic, 0);
        let now = dir_state(&dir);
        if now != last.0 {
            last = (now, Instant::now());
        } else if cp.is_some_and(|c| c >= active) && last.1.elapsed() >= quiet {
            return cp.unwrap();
        }
        assert!(
            Instant::now() < deadline,
            "{}: {topic}-0 not cleaned to its active segment {active} (checkpoint {cp:?}) \
             within {timeout:?}",
            t.name
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The header facts of one record batch in a segment file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchFacts {
    pub base_offset: i64,
    pub last_offset: i64,
    pub count: i32,
    pub transactional: bool,
    pub control: bool,
    /// Bit 6 of the attributes (KIP-534): base timestamp is the batch's delete horizon.
    pub delete_horizon: bool,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    /// The offsets of the batch's records (its record offset deltas added to the base).
    pub record_offsets: Vec<i64>,
}

fn varint(b: &[u8], pos: &mut usize) -> i64 {
    let mut v: u64 = 0;
    let mut shift = 0;
    loop {
        let x = b[*pos];
        *pos += 1;
        v |= ((x & 0x7f) as u64) << shift;
        if x & 0x80 == 0 {
            break;
        }
        shift += 7;
    }
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// The batches of a segment file (uncompressed v2 batches; the tests write no compression).
pub fn batches(path: &Path) -> Vec<BatchFacts> {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let be64 = |p: usize| i64::from_be_bytes(b[p..p + 8].try_into().unwrap());
    let be32 = |p: usize| i32::from_be_bytes(b[p..p + 4].try_into().unwrap());
    let be16 = |p: usize| i16::from_be_bytes(b[p..p + 2].try_into().unwrap());
    let mut out = Vec::new();
    let mut pos = 0;
    while pos + 61 <= b.len() {
        let base = be64(pos);
        let len = be32(pos + 8);
        if len <= 0 || pos + 12 + len as usize > b.len() {
            break;
        }
        let attrs = be16(pos + 21);
        assert_eq!(attrs & 0x07, 0, "compressed batch in {}", path.display());
        let count = be32(pos + 57);
        let mut rp = pos + 61;
        let mut record_offsets = Vec::new();
        for _ in 0..count {
            let rlen = varint(&b, &mut rp);
            let start = rp;
            rp += 1; // attributes
            let _ts_delta = varint(&b, &mut rp);
            let off_delta = varint(&b, &mut rp);
            record_offsets.push(base + off_delta);
            rp = start + rlen as usize;
        }
        out.push(BatchFacts {
            base_offset: base,
            last_offset: base + be32(pos + 23) as i64,
            count,
            transactional: attrs & 0x10 != 0,
            control: attrs & 0x20 != 0,
            delete_horizon: attrs & 0x40 != 0,
            producer_id: be64(pos + 43),
            producer_epoch: be16(pos + 51),
            base_sequence: be32(pos + 53),
            record_offsets,
        });
        pos += 12 + len as usize;
    }
    out
}

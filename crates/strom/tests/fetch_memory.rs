//! Fetches cannot make the broker hold their responses in memory (issue 18, defect 2).
//!
//! Kafka answers one request per connection at a time (the `Selector` mutes a channel while
//! its request is in flight), bounds a response by `fetch.max.bytes` (55 MiB) and sends its
//! records from the segment files (`FileRecords.writeTo`, `transferTo`), so neither pipelined
//! requests nor huge `max_bytes` nor a client that does not read cost it heap. Strom does the
//! same: a 1 GiB partition (64 KB batches), 50 connections that each pipeline 40 fetches
//! (`max_bytes` i32::MAX, 0, -1, i32::MIN and 256 KiB, `partition_max_bytes` i32::MAX) and
//! read nothing for a while, then everything; then 2,000 fetches in one write on one
//! connection.
//!
//! The bound: the broker's peak RSS (`VmHWM`, the process restarted after the partition was
//! written so the peak is the fetches') may grow by at most [`RSS_GROWTH_BOUND`] over its RSS
//! before the fetches. What each connection may hold is its read buffer (256 KiB) and the
//! buffer its response's records are read through (256 KiB): 50 x 512 KiB = 25 MiB, plus the
//! allocator's and runtime's slack. One response of `fetch.max.bytes` held in the heap is
//! 55 MiB, so holding two would fail the test; before the fix every fetch with `max_bytes`
//! i32::MAX held the whole partition (1 GiB) twice and the 2,000 pipelined responses were all
//! kept until the last was ready. The broker runs under an address-space limit of its size at
//! the start plus 3 GiB, so a broker that tries to hold more dies instead of swapping the
//! shared test machine.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use strom_protocol::kafka::messages::fetch_request::{FetchPartition, FetchTopic};
use strom_protocol::kafka::messages::produce_request::{PartitionProduceData, TopicProduceData};
use strom_protocol::kafka::messages::{
    ApiKey, FetchRequest, FetchResponse, ProduceRequest, ProduceResponse, TopicName,
};
use strom_protocol::kafka::protocol::StrBytes;
use strom_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

const TOPIC: &str = "big";
const PARTITION_BYTES: usize = 1 << 30;
const RECORDS_PER_BATCH: usize = 4;
const VALUE_BYTES: usize = 16_000;
const CONNECTIONS: usize = 50;
const PIPELINED: usize = 40;
const FETCH_MAX_BYTES: usize = 55 * 1024 * 1024;
const RSS_GROWTH_BOUND_MIB: u64 = 100;
const MIB: u64 = 1024 * 1024;

/// One batch of 64 KB, sent again and again.
fn big_batch() -> Bytes {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let recs: Vec<Record> = (0..RECORDS_PER_BATCH)
        .map(|i| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: i as i32 - 1,
            timestamp: now,
            key: None,
            value: Some(Bytes::from(vec![b'x'; VALUE_BYTES])),
            headers: Default::default(),
        })
        .collect();
    let mut buf = Vec::new();
    RecordBatchEncoder::encode(
        &mut buf,
        recs.iter(),
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .unwrap();
    Bytes::from(buf)
}

/// Writes `PARTITION_BYTES` to `TOPIC`-0 with pipelined acks=1 produces on four connections;
/// returns the number of batches written.
fn fill(broker: &Broker) -> usize {
    let batch = big_batch();
    let batches = PARTITION_BYTES.div_ceil(batch.len());
    let per_conn = batches.div_ceil(4);
    let threads: Vec<_> = (0..4)
        .map(|c| {
            let batch = batch.clone();
            let mut s = connect(broker);
            std::thread::spawn(move || {
                let n = per_conn.min(batches - c * per_conn);
                let mut r = s.try_clone().unwrap();
                let reader = std::thread::spawn(move || {
                    for i in 0..n {
                        let f = expect_frame(&mut r, "produce", Duration::from_secs(60));
                        let (corr, resp): (i32, ProduceResponse) =
                            decode_response(ApiKey::Produce, 9, f);
                        assert_eq!(corr, i as i32);
                        let p = &resp.responses[0].partition_responses[0];
                        assert_eq!(p.error_code, 0, "produce {i}");
                    }
                });
                let req = ProduceRequest::default()
                    .with_acks(1)
                    .with_timeout_ms(30_000)
                    .with_topic_data(vec![TopicProduceData::default()
                        .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
                        .with_partition_data(vec![PartitionProduceData::default()
                            .with_index(0)
                            .with_records(Some(batch))])]);
                for i in 0..n {
                    write_frame(&mut s, &encode_request(ApiKey::Produce, 9, i as i32, &req))
                        .unwrap();
                }
                reader.join().unwrap();
                n
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).sum()
}

/// `VmRSS`, `VmHWM` and `VmSize` of `pid`, in bytes.
fn memory(pid: u32) -> (u64, u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    };
    (field("VmRSS:"), field("VmHWM:"), field("VmSize:"))
}

/// Samples the broker's RSS until stopped; the highest seen.
struct RssWatch {
    stop: Arc<AtomicBool>,
    max: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RssWatch {
    fn start(pid: u32) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let max = Arc::new(AtomicU64::new(0));
        let (s, m) = (stop.clone(), max.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                m.fetch_max(memory(pid).0, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        Self {
            stop,
            max,
            thread: Some(thread),
        }
    }

    fn max(&self) -> u64 {
        self.max.load(Ordering::Relaxed)
    }
}

impl Drop for RssWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn fetch_request(offset: i64, max_bytes: i32) -> FetchRequest {
    FetchRequest::default()
        .with_replica_id((-1).into())
        .with_max_wait_ms(500)
        .with_min_bytes(1)
        .with_max_bytes(max_bytes)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_static_str(TOPIC)))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(i32::MAX)])])
}

/// The requests one connection pipelines: (fetch offset, max_bytes).
fn mix(conn: usize, end: i64, n: usize) -> Vec<(i64, i32)> {
    (0..n)
        .map(|i| {
            let offset = ((conn * 7919 + i * 104_729) as i64 * RECORDS_PER_BATCH as i64) % end;
            // i32::MAX on every other connection: 25 responses of fetch.max.bytes to read.
            let max_bytes = match i % 10 {
                0 if i == 0 && conn % 2 == 0 => i32::MAX,
                1 => 0,
                2 => -1,
                3 if i % 20 == 3 => i32::MIN,
                _ => 256 * 1024,
            };
            (offset, max_bytes)
        })
        .collect()
}

/// Reads the answers to `sent` in order and checks each against Kafka's limits.
fn check_answers(s: &mut TcpStream, sent: &[(i64, i32)], first_corr: i32) {
    for (i, &(offset, max_bytes)) in sent.iter().enumerate() {
        let f = expect_frame(s, "fetch", Duration::from_secs(120));
        let (corr, resp): (i32, FetchResponse) = decode_response(ApiKey::Fetch, 12, f);
        assert_eq!(corr, first_corr + i as i32, "answers in order");
        let p = &resp.responses[0].partitions[0];
        let len = p.records.as_ref().map_or(0, |r| r.len());
        match max_bytes {
            i32::MIN..=-1 => {
                // Kafka's LogSegment.read refuses a negative size: UNKNOWN_SERVER_ERROR.
                assert_eq!(p.error_code, -1, "max_bytes {max_bytes} at {offset}");
                assert_eq!(len, 0);
            }
            0 => {
                // One batch (the min-one-message rule).
                assert_eq!(p.error_code, 0);
                assert!((1..=100_000).contains(&len), "max_bytes 0: {len} bytes");
            }
            m => {
                assert_eq!(p.error_code, 0);
                let limit = (m as usize).min(FETCH_MAX_BYTES);
                assert!(len > 0 && len <= limit, "max_bytes {m}: {len} bytes");
                let first =
                    i64::from_be_bytes(p.records.as_ref().unwrap()[..8].try_into().unwrap());
                assert_eq!(first, offset, "starts with the batch fetched");
            }
        }
    }
}

/// Limits the broker's address space to its current size plus 3 GiB (see the module docs).
fn guard_address_space(pid: u32) {
    let (_, _, size) = memory(pid);
    let limit = size + 3 * 1024 * MIB;
    let st = std::process::Command::new("prlimit")
        .arg("--pid")
        .arg(pid.to_string())
        .arg(format!("--as={limit}:{limit}"))
        .status()
        .expect("prlimit");
    assert!(st.success(), "prlimit --as on the broker");
}

#[test]
fn pipelined_fetches_of_a_large_partition_keep_the_broker_rss_bounded() {
    let mut broker = Broker::start();
    create_topic(&broker, TOPIC, 1, &[]);
    let batches = fill(&broker);
    let end = (batches * RECORDS_PER_BATCH) as i64;
    // A fresh process, so that VmHWM is the fetches' peak, not the produce's.
    assert_clean_exit(broker.stop());
    broker.restart();
    let pid = broker.pid();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while watermarks(&broker, TOPIC, 0).1 < end {
        assert!(std::time::Instant::now() < deadline, "partition not served");
        std::thread::sleep(Duration::from_millis(100));
    }
    guard_address_space(pid);
    let (before, _, _) = memory(pid);
    let watch = RssWatch::start(pid);

    // 50 connections, 40 fetches each, written at once; nothing read for 3 s.
    let mut conns: Vec<(TcpStream, Vec<(i64, i32)>)> = (0..CONNECTIONS)
        .map(|c| {
            let mut s = connect(&broker);
            let sent = mix(c, end, PIPELINED);
            let mut bytes = Vec::new();
            for (i, &(offset, max_bytes)) in sent.iter().enumerate() {
                let req = encode_request(
                    ApiKey::Fetch,
                    12,
                    i as i32,
                    &fetch_request(offset, max_bytes),
                );
                bytes.extend_from_slice(&(req.len() as i32).to_be_bytes());
                bytes.extend_from_slice(&req);
            }
            s.write_all(&bytes).unwrap();
            (s, sent)
        })
        .collect();
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        broker.is_running(),
        "broker died while the clients were not reading"
    );
    let stalled = watch.max();
    // Then read everything, four connections at a time (the test's own memory).
    for group in conns.chunks_mut(4) {
        std::thread::scope(|scope| {
            for (s, sent) in group.iter_mut() {
                scope.spawn(move || check_answers(s, sent, 0));
            }
        });
    }
    drop(conns);
    assert!(
        broker.is_running(),
        "broker died while the answers were read"
    );

    // 2,000 small fetches in one write on one connection (one read of the broker's).
    let mut s = connect(&broker);
    let sent: Vec<(i64, i32)> = (0..2000)
        .map(|i| {
            (
                ((i * 7) as i64 * RECORDS_PER_BATCH as i64) % end,
                256 * 1024,
            )
        })
        .collect();
    let mut bytes = Vec::new();
    for (i, &(offset, max_bytes)) in sent.iter().enumerate() {
        let req = encode_request(
            ApiKey::Fetch,
            12,
            i as i32,
            &fetch_request(offset, max_bytes),
        );
        bytes.extend_from_slice(&(req.len() as i32).to_be_bytes());
        bytes.extend_from_slice(&req);
    }
    assert!(
        bytes.len() < 256 * 1024,
        "fits one read: {} bytes",
        bytes.len()
    );
    s.write_all(&bytes).unwrap();
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        broker.is_running(),
        "broker died under 2,000 pipelined fetches"
    );
    check_answers(&mut s, &sent, 0);

    let seen = watch.max();
    drop(watch);
    let (_, peak, _) = memory(pid);
    let growth = peak.max(seen).saturating_sub(before);
    eprintln!(
        "broker RSS before {} MiB; max while stalled {} MiB; peak (VmHWM) {} MiB; growth {} MiB",
        before / MIB,
        stalled / MIB,
        peak / MIB,
        growth / MIB
    );
    assert!(
        growth <= RSS_GROWTH_BOUND_MIB * MIB,
        "broker RSS grew by {} MiB (bound {RSS_GROWTH_BOUND_MIB} MiB)",
        growth / MIB
    );
    // Still serving.
    let mut s = connect(&broker);
    let resp: FetchResponse = raw_call(&mut s, ApiKey::Fetch, 12, &fetch_request(0, 1024));
    assert_eq!(resp.responses[0].partitions[0].error_code, 0);
    let _ = s.read(&mut [0u8; 0]);
}

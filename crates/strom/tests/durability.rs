//! Durability of the real `strom` binary: clean restart (SIGTERM), crash (SIGKILL) mid-stream,
//! Kafka's on-disk layout, and recovery of a segment torn by hand in the middle of a batch.

mod common;

use std::collections::HashMap;
use std::fs;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use rdkafka::producer::Producer;

fn value_of(i: usize) -> Vec<u8> {
    format!("durable-{i:08}-{}", "d".repeat(i % 97)).into_bytes()
}

fn numbered(n: usize, start: usize) -> Vec<OutRec> {
    (start..start + n)
        .map(|i| OutRec {
            partition: Some(0),
            key: Some(format!("k{i}").into_bytes()),
            value: Some(value_of(i)),
            headers: vec![("seq".to_string(), Some(i.to_string().into_bytes()))],
            timestamp: None,
        })
        .collect()
}

fn find_files_named(dir: &std::path::Path, name: &str, out: &mut Vec<std::path::PathBuf>) {
    if let Ok(rd) = fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                find_files_named(&p, name, out);
            } else if e.file_name() == name {
                out.push(p);
            }
        }
    }
}

#[test]
fn clean_restart_keeps_everything_in_kafka_layout() {
    const N: usize = 20_000;
    let mut broker = Broker::start();
    create_topic(&broker, "dur", 1, &[]);
    create_topic(&broker, "dur3", 3, &[]);
    let recs = numbered(N, 0);
    let reports = produce_ok(&broker, "dur", &[("compression.type", "none")], &recs);
    for (i, r) in reports.iter().enumerate() {
        assert_eq!(*r, (0, i as i64), "delivery of record {i}");
    }
    let recs3: Vec<OutRec> = (0..3)
        .flat_map(|p| simple_records(&format!("p{p}"), 50, Some(p)))
        .collect();
    produce_ok(&broker, "dur3", &[], &recs3);

    let st = broker.stop();
    assert_clean_exit(st);

    // Kafka's layout: <topic>-<partition>/ with 20-digit segment files.
    let dir = broker.partition_dir("dur", 0);
    let files = list_files(&dir);
    for f in [
        "00000000000000000000.log",
        "00000000000000000000.index",
        "00000000000000000000.timeindex",
    ] {
        assert!(
            files.iter().any(|x| x == f),
            "{} lacks {f}; has {files:?}",
            dir.display()
        );
    }
    for p in 0..3 {
        let d = broker.partition_dir("dur3", p);
        assert!(
            d.join("00000000000000000000.log").is_file(),
            "{} has no first segment",
            d.display()
        );
    }
    // The log holds whole batches, the last one ending exactly at the end of the file.
    let bytes = fs::read(dir.join("00000000000000000000.log")).unwrap();
    let (batches, trailing) = segment_batches(&bytes);
    assert_eq!(trailing, 0, "clean shutdown left a partial batch");
    assert!(!batches.is_empty());
    assert_eq!(batches[0].1, 0, "first batch base offset");

    broker.restart();
    assert_eq!(watermarks(&broker, "dur", 0), (0, N as i64));
    let got = consume_all(&broker, "dur", 0);
    assert_contiguous(&got, 0);
    assert_records_eq(&got, &recs);
    for p in 0..3 {
        let got = consume_all(&broker, "dur3", p);
        assert_records_eq(&got, &recs3[p as usize * 50..p as usize * 50 + 50]);
    }

    // Appends continue after the restored log end.
    let more = numbered(10, N);
    let reports = produce_ok(&broker, "dur", &[], &more);
    for (i, r) in reports.iter().enumerate() {
        assert_eq!(*r, (0, (N + i) as i64), "delivery after restart");
    }

    // And a second restart keeps those too.
    let st = broker.stop();
    assert_clean_exit(st);
    broker.restart();
    let got = consume_all(&broker, "dur", 0);
    assert_eq!(got.len(), N + 10);
    assert_records_eq(&got[N..], &more);
}

#[test]
fn sigkill_mid_stream_keeps_every_acknowledged_record_once() {
    const TOPIC: &str = "crash";
    let mut broker = Broker::start();
    create_topic(&broker, TOPIC, 1, &[]);

    let stop = Arc::new(AtomicBool::new(false));
    let (p, reports) = producer(
        &broker,
        &[
            ("linger.ms", "2"),
            ("message.timeout.ms", "8000"),
            ("request.timeout.ms", "3000"),
            ("retries", "0"),
            ("reconnect.backoff.max.ms", "500"),
        ],
    );
    let stop2 = stop.clone();
    let sent = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let sent2 = sent.clone();
    let handle = std::thread::spawn(move || {
        let mut i = 0usize;
        let deadline = Instant::now() + Duration::from_secs(120);
        while !stop2.load(Ordering::SeqCst) && Instant::now() < deadline && i < 2_000_000 {
            let r = &numbered(1, i)[0];
            send_one(&p, TOPIC, i, r);
            i += 1;
            sent2.store(i, Ordering::SeqCst);
            if i.is_multiple_of(100) {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        // Wait until every record has its report (success or failure), bounded.
        let _ = p.flush(Duration::from_secs(30));
        i
    });

    // Let some records be acknowledged, then crash the broker while the stream is running.
    let deadline = Instant::now() + Duration::from_secs(60);
    while reports.ok_count() < 5_000 {
        assert!(
            Instant::now() < deadline,
            "only {} records acknowledged in 60 s",
            reports.ok_count()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    broker.kill();
    // Keep producing into the dead broker for a moment, then stop.
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::SeqCst);
    let total = handle.join().expect("producer thread");
    let snap = reports.snapshot();
    assert_eq!(snap.len(), total, "every sent record has a delivery report");
    let acked: Vec<(usize, i64)> = {
        let mut v: Vec<(usize, i64)> = snap
            .iter()
            .filter_map(|(&i, r)| r.as_ref().ok().map(|&(_, o)| (i, o)))
            .collect();
        v.sort();
        v
    };
    assert!(acked.len() >= 5_000);
    eprintln!("sent {total}, acknowledged {}", acked.len());

    broker.restart();
    let (lo, hi) = watermarks(&broker, TOPIC, 0);
    assert_eq!(lo, 0);
    assert!(
        hi >= acked.len() as i64,
        "log end {hi} < {} acknowledged records",
        acked.len()
    );
    let got = consume_all(&broker, TOPIC, 0);
    assert_contiguous(&got, 0);

    // Each record appears at most once; acknowledged ones exactly once, at their reported offset,
    // and in send order.
    let mut at: HashMap<usize, i64> = HashMap::new();
    for r in &got {
        let seq: usize = String::from_utf8(r.headers[0].1.clone().unwrap())
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(
            r.value.as_deref(),
            Some(&value_of(seq)[..]),
            "value of record seq {seq}"
        );
        assert!(
            at.insert(seq, r.offset).is_none(),
            "record seq {seq} stored twice"
        );
    }
    let mut last = -1i64;
    for &(i, o) in &acked {
        let found = at.get(&i).copied();
        assert_eq!(
            found,
            Some(o),
            "acknowledged record {i} (reported offset {o}) after restart"
        );
        assert!(o > last, "acknowledged records out of order at {i}");
        last = o;
    }

    // The broker takes new records after the crash, continuing the log.
    let reports = produce_ok(&broker, TOPIC, &[], &numbered(5, 10_000_000));
    for (j, r) in reports.iter().enumerate() {
        assert_eq!(*r, (0, hi + j as i64), "produce after crash recovery");
    }
}

#[test]
fn torn_batch_is_truncated_on_recovery() {
    const TOPIC: &str = "torn";
    let mut broker = Broker::start();
    create_topic(&broker, TOPIC, 1, &[]);

    // Several produce calls, so the segment holds several batches.
    let recs = numbered(200, 0);
    let (p, reports) = producer(&broker, &[("linger.ms", "20")]);
    for chunk in recs.chunks(20).enumerate() {
        for (j, r) in chunk.1.iter().enumerate() {
            send_one(&p, TOPIC, chunk.0 * 20 + j, r);
        }
        p.flush(Duration::from_secs(30)).expect("flush");
    }
    drop(p);
    assert_eq!(reports.ok_count(), 200);

    let st = broker.stop();
    assert_clean_exit(st);

    let seg = broker
        .partition_dir(TOPIC, 0)
        .join("00000000000000000000.log");
    let bytes = fs::read(&seg).unwrap();
    let (batches, trailing) = segment_batches(&bytes);
    assert_eq!(trailing, 0);
    assert!(
        batches.len() >= 2,
        "expected several batches, found {batches:?}"
    );
    let &(pos, base, size) = batches.last().unwrap();
    assert_eq!(pos + size, bytes.len());
    // Cut the last batch a few bytes before its end.
    let cut = bytes.len() - 5;
    let f = fs::OpenOptions::new().write(true).open(&seg).unwrap();
    f.set_len(cut as u64).unwrap();
    drop(f);
    let mut clean = Vec::new();
    find_files_named(&broker.data_dir(), ".kafka_cleanshutdown", &mut clean);
    for c in &clean {
        fs::remove_file(c).unwrap();
    }
    eprintln!(
        "torn batch at position {pos} base offset {base} size {size}; removed {} clean-shutdown markers",
        clean.len()
    );

    broker.restart();
    assert_eq!(
        watermarks(&broker, TOPIC, 0),
        (0, base),
        "log end offset after recovery must be the base offset of the torn batch"
    );
    let got = consume_all(&broker, TOPIC, 0);
    assert_contiguous(&got, 0);
    assert_records_eq(&got, &recs[..base as usize]);
    // The file was truncated back to the end of the last whole batch.
    let len = fs::metadata(&seg).unwrap().len();
    assert!(
        len == pos as u64,
        "segment is {len} bytes after recovery, expected {pos}"
    );

    // New records continue at the torn batch's base offset.
    let more = numbered(30, 1_000);
    let reports = produce_ok(&broker, TOPIC, &[], &more);
    for (j, r) in reports.iter().enumerate() {
        assert_eq!(*r, (0, base + j as i64), "produce after recovery");
    }
    let got = consume_all(&broker, TOPIC, 0);
    assert_eq!(got.len(), base as usize + 30);
    assert_records_eq(&got[base as usize..], &more);

    // And all of it survives one more restart.
    assert_clean_exit(broker.stop());
    broker.restart();
    let got = consume_all(&broker, TOPIC, 0);
    assert_eq!(got.len(), base as usize + 30);
}

#[test]
fn sigterm_exits_cleanly_and_fast() {
    let mut broker = Broker::start();
    let st = broker.stop();
    assert_clean_exit(st);
    broker.restart();
    assert!(broker.is_running());
}

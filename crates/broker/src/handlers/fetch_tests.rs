//! The Fetch response framed with file ranges is byte for byte the generated encoding of the
//! same response with its records in memory, at every version the generated code knows, with
//! every optional field the cut points must step over (aborted transactions or null, tagged
//! diverging epoch / current leader / snapshot id, node endpoints, empty and several-segment
//! records).

use bytes::Bytes;
use strom_protocol::kafka::messages::fetch_response::{
    AbortedTransaction, EpochEndOffset, FetchableTopicResponse, LeaderIdAndEpoch, NodeEndpoint,
    PartitionData, SnapshotId,
};
use strom_protocol::kafka::messages::{ApiKey, FetchResponse, TopicName};
use strom_protocol::kafka::protocol::StrBytes;
use strom_storage::{AppendOrigin, FileRecords, LogConfig, UnifiedLog};

use super::fetch;

/// A log of 12 batches over several segments, and file records of different shapes from it.
fn records(dir: &tempfile::TempDir) -> (UnifiedLog, Vec<FileRecords>) {
    let config = LogConfig {
        segment_bytes: 300,
        ..LogConfig::default()
    };
    let mut log = UnifiedLog::open(&dir.path().join("t-0"), config, 0, true).unwrap();
    for i in 0..12 {
        let ts = 1_700_000_000_000 + i as i64;
        let b = strom_protocol::testing::value_batch(1 + i % 3, ts);
        // Appended at the batch's own time: the validator checks timestamps against the clock.
        log.append_as_leader(&b, 0, AppendOrigin::Client, ts)
            .unwrap();
    }
    let end = log.log_end_offset();
    let reader = log.reader();
    let read = |from: i64, max: usize| {
        reader
            .read_file_records(from, max, end, true, false)
            .unwrap()
            .records
    };
    let all = read(0, 1 << 20);
    assert!(all.slices().len() > 1, "spans segments: {all:?}");
    (
        log,
        vec![all, FileRecords::default(), read(3, 150), read(end - 1, 1)],
    )
}

fn response(version: i16) -> FetchResponse {
    let partition = |index: i32, aborted: bool| {
        let mut p = PartitionData::default()
            .with_partition_index(index)
            .with_error_code(if index == 2 { 6 } else { 0 })
            .with_high_watermark(1000 + index as i64)
            .with_last_stable_offset(900)
            .with_log_start_offset(if version >= 5 { 7 } else { -1 })
            .with_aborted_transactions(aborted.then(|| {
                vec![
                    AbortedTransaction::default()
                        .with_producer_id(5.into())
                        .with_first_offset(11),
                    AbortedTransaction::default()
                        .with_producer_id(6.into())
                        .with_first_offset(12),
                ]
            }))
            .with_records(None);
        if version >= 11 {
            p.preferred_read_replica = (index % 2).into();
        }
        if version >= 12 && index == 1 {
            p.diverging_epoch = EpochEndOffset::default().with_epoch(3).with_end_offset(99);
            p.current_leader = LeaderIdAndEpoch::default()
                .with_leader_id(2.into())
                .with_leader_epoch(4);
            p.snapshot_id = SnapshotId::default().with_end_offset(5).with_epoch(1);
        }
        p
    };
    let topic = |name: &'static str, id: u128, parts: Vec<PartitionData>| {
        let mut t = FetchableTopicResponse::default().with_partitions(parts);
        if version <= 12 {
            t.topic = TopicName(StrBytes::from_static_str(name));
        } else {
            t.topic_id = uuid::Uuid::from_u128(id);
        }
        t
    };
    let mut r = FetchResponse::default()
        .with_throttle_time_ms(3)
        .with_responses(vec![
            topic("alpha", 1, vec![partition(0, true), partition(1, false)]),
            topic(
                "a-much-longer-topic-name",
                2,
                vec![partition(2, false), partition(3, true)],
            ),
        ]);
    if version >= 7 {
        r.error_code = 0;
        r.session_id = 42;
    }
    if version >= 16 {
        r.node_endpoints = vec![NodeEndpoint::default()
            .with_node_id(2.into())
            .with_host(StrBytes::from_static_str("broker-2"))
            .with_port(9092)];
    }
    r
}

#[test]
fn file_ranges_frame_as_the_generated_encoding() {
    let dir = tempfile::tempdir().unwrap();
    let (_log, recs) = records(&dir);
    for version in 4..=18 {
        let resp = response(version);
        let framed = fetch::encode(version, 77, resp.clone(), recs.clone())
            .unwrap()
            .into_bytes()
            .unwrap();
        let mut filled = resp;
        let mut it = recs.iter();
        for t in &mut filled.responses {
            for p in &mut t.partitions {
                p.records = Some(it.next().unwrap().read_all().unwrap());
            }
        }
        let want = super::encode(ApiKey::Fetch, version, 77, &filled).unwrap();
        assert_eq!(Bytes::from(framed), Bytes::from(want), "Fetch v{version}");
    }
}

#[test]
fn a_partition_without_records_passed_is_empty_not_null() {
    let dir = tempfile::tempdir().unwrap();
    let (_log, _) = records(&dir);
    let resp = response(12);
    let framed = fetch::encode(12, 1, resp.clone(), Vec::new())
        .unwrap()
        .into_bytes()
        .unwrap();
    let mut filled = resp;
    for t in &mut filled.responses {
        for p in &mut t.partitions {
            p.records = Some(Bytes::new());
        }
    }
    assert_eq!(
        framed,
        super::encode(ApiKey::Fetch, 12, 1, &filled).unwrap()
    );
}

/// The bytes a connection writes are the frame's bytes, whether the file ranges go with
/// sendfile (a plaintext socket, here one whose client reads slowly, so sends stop part way
/// and wait for room) or through the buffer (any other stream); ranges a truncation took back
/// fail the write on both paths instead of going out.
#[tokio::test]
async fn sendfile_and_the_buffered_path_write_the_same_bytes() {
    use tokio::io::AsyncReadExt;
    let dir = tempfile::tempdir().unwrap();
    let (mut log, recs) = records(&dir);
    let mut frame = crate::response::ResponseFrame::default();
    frame.push_bytes(Bytes::from_static(b"head"));
    for i in 0..10_000 {
        frame.push_records(recs[i % recs.len()].clone());
        frame.push_bytes(Bytes::from(vec![i as u8; i % 7]));
    }
    let want = frame.clone().into_bytes().unwrap();
    assert!(
        want.len() > 2 << 20,
        "larger than a socket buffer: {}",
        want.len()
    );
    let stall = std::time::Duration::from_secs(30);

    let mut buffered = Vec::new();
    crate::response::write_response(&mut buffered, &frame, stall)
        .await
        .unwrap();
    assert_eq!(Bytes::from(buffered), Bytes::from(want.clone()));

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let expected = want.len();
    let reader = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut got = Vec::new();
        let mut buf = vec![0u8; 4096];
        while got.len() < expected {
            let n = s.read(&mut buf).await.unwrap();
            assert!(n > 0, "closed after {} bytes", got.len());
            got.extend_from_slice(&buf[..n]);
            if got.len() % 64 == 0 {
                tokio::task::yield_now().await;
            }
        }
        got
    });
    let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
    crate::response::write_response(&mut socket, &frame, stall)
        .await
        .unwrap();
    assert_eq!(Bytes::from(reader.await.unwrap()), Bytes::from(want));

    log.truncate_to(2).unwrap();
    let mut socket = tokio::net::TcpStream::connect(addr_of_sink().await)
        .await
        .unwrap();
    assert!(crate::response::write_response(&mut socket, &frame, stall)
        .await
        .is_err());
    assert!(
        crate::response::write_response(&mut Vec::new(), &frame, stall)
            .await
            .is_err()
    );
}

/// A listener that reads and drops everything it is sent.
async fn addr_of_sink() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        use tokio::io::AsyncReadExt;
        let (mut s, _) = listener.accept().await.unwrap();
        let mut buf = vec![0u8; 65536];
        while s.read(&mut buf).await.is_ok_and(|n| n > 0) {}
    });
    addr
}

//! A slow disk stalls only the requests that wait for it (issue 18, defect 6). With the injected
//! slow disk (`STROM_TEST_SLOW_IO`, `strom_storage::slow_io`) every fsync of the partition
//! `slow-0`'s segment files takes seconds; the topic flushes after every message (`flush.messages=1`, Kafka's
//! per-topic `flush.messages`), so each append to it blocks on the disk. While several produces
//! to `slow-0` are stuck (more of them than the broker has async workers), produces to another
//! partition on another connection are answered at once: the appends run off the async workers
//! (`strom_broker::disk_io`), as Kafka's run on its I/O threads, not its network threads.
//!
//! No speed is asserted: the check is the order of the answers (every fast produce is answered
//! before the first slow one is), with a disk delay long enough that the order cannot come out
//! the other way by chance.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use strom_protocol::kafka::messages::produce_request::{PartitionProduceData, TopicProduceData};
use strom_protocol::kafka::messages::{ApiKey, ProduceRequest, ProduceResponse, TopicName};
use strom_protocol::kafka::protocol::StrBytes;

/// How long each fsync of the slow partition takes.
const SLOW_FSYNC_MS: u64 = 5_000;
/// Produces stuck on the slow partition at once: more than the broker's async workers (one per
/// core; CI has two).
const SLOW_CLIENTS: usize = 3;
const FAST_PRODUCES: usize = 20;

fn produce(topic: &'static str, i: usize) -> ProduceRequest {
    ProduceRequest::default()
        .with_acks(1)
        .with_timeout_ms(60_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_static_str(topic)))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(Bytes::from(
                    strom_protocol::testing::value_batch(1, 1_700_000_000_000 + i as i64),
                )))])])
}

fn send(s: &mut TcpStream, corr: i32, req: &ProduceRequest) {
    write_frame(s, &encode_request(ApiKey::Produce, 9, corr, req)).unwrap();
}

fn answer(s: &mut TcpStream, what: &str, timeout: Duration) -> i16 {
    let f = expect_frame(s, what, timeout);
    let (_, resp): (i32, ProduceResponse) = decode_response(ApiKey::Produce, 9, f);
    resp.responses[0].partition_responses[0].error_code
}

/// Whether a response is waiting on `s` (without consuming it).
fn answered(s: &TcpStream) -> bool {
    s.set_nonblocking(true).unwrap();
    let mut b = [0u8; 1];
    let r = s.peek(&mut b);
    s.set_nonblocking(false).unwrap();
    matches!(r, Ok(n) if n > 0)
}

#[test]
fn a_slow_disk_stalls_only_its_own_partition() {
    // The partition's segment files (and snapshots), not its directory or epoch checkpoint:
    // creating the topic is not slowed, every append is.
    let slow_io = format!("slow-0/0000:{SLOW_FSYNC_MS}");
    let broker = Broker::start_with_env(&[], &[("STROM_TEST_SLOW_IO", &slow_io)]);
    create_topic(&broker, "slow", 1, &[("flush.messages", "1")]);
    create_topic(&broker, "fast", 1, &[]);
    // Both partitions take writes before the slow disk is tested (a first produce may find
    // the leader not yet known).
    let mut fast = connect(&broker);
    for topic in ["fast", "slow"] {
        let mut tries = 0;
        loop {
            send(&mut fast, 1, &produce(topic, 0));
            let code = answer(&mut fast, topic, Duration::from_secs(60));
            if code == 0 {
                break;
            }
            tries += 1;
            assert!(tries < 100, "produce to {topic}: error {code}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    let mut slow: Vec<TcpStream> = (0..SLOW_CLIENTS).map(|_| connect(&broker)).collect();
    for (i, s) in slow.iter_mut().enumerate() {
        send(s, 10 + i as i32, &produce("slow", i));
    }
    // Let the slow produces reach the broker and block there.
    std::thread::sleep(Duration::from_millis(500));
    for i in 0..FAST_PRODUCES {
        send(&mut fast, 100 + i as i32, &produce("fast", i));
        let code = answer(&mut fast, "fast produce", Duration::from_secs(120));
        assert_eq!(code, 0, "fast produce {i}");
    }
    // The first slow produce is still in its fsync: none is answered yet. (Were the appends on
    // the async workers, every worker would be blocked in the slow partition's fsync or on its
    // lock, and the fast produces would be served only after a slow one finished.)
    let done = slow.iter().filter(|s| answered(s)).count();
    assert_eq!(
        done, 0,
        "{done} slow produce(s) ({SLOW_FSYNC_MS} ms per fsync) answered before {FAST_PRODUCES} \
         produces to another partition: those waited for the slow disk"
    );
    // The slow ones complete too, in the end.
    for (i, s) in slow.iter_mut().enumerate() {
        let code = answer(s, "slow produce", Duration::from_secs(120));
        assert_eq!(code, 0, "slow produce {i}");
    }
    let _ = fast.flush();
}

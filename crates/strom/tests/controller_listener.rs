//! The controller listener trusts no peer. Raft between the voters travels as Kafka requests of
//! a Strom-private API (key 10000, "StromRaft") on the controller listener, as Kafka's KRaft
//! carries Vote/BeginQuorumEpoch/Fetch there, so every connection on that port goes through the
//! one Kafka connection pipeline of the client listeners:
//!
//! - frames are bounded by `socket.request.max.bytes` and buffered only as their bytes arrive
//!   (a claim of 256 MiB costs nothing and closes the connection);
//! - a connection silent for `connections.max.idle.ms` is closed (Kafka's `Selector`), also
//!   before its first byte;
//! - `max.connections.per.ip` (Kafka's `ConnectionQuotas`; the controller's own `SocketServer`
//!   keeps its own quotas for its listeners) refuses connections over the limit;
//! - the old Raft stream preamble (`0xFF "STRAFT" 1`) is nothing but a bad frame.
//!
//! After each abuse the quorum keeps electing and replicating metadata.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::cluster::*;
use common::{encode_request, raw_call, read_frame, wait_closed, write_frame, Reply};
use strom_protocol::kafka::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse};

/// The Strom-private API key of Raft requests (`strom_raft::wire::API_KEY`).
const RAFT_API_KEY: i16 = 10_000;

/// What a Raft client sent first on a new connection before Raft moved into Kafka framing.
const OLD_PREAMBLE: [u8; 8] = [0xFF, b'S', b'T', b'R', b'A', b'F', b'T', 1];

const FAST: &[&str] = &[
    "broker.session.timeout.ms=3000",
    "broker.heartbeat.interval.ms=500",
    "replica.fetch.wait.max.ms=100",
];

fn settings(extra: &[&'static str]) -> Vec<&'static str> {
    FAST.iter().chain(extra).copied().collect()
}

fn controller_addr(c: &Cluster, node: i32) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], c.controller_ports[&node]))
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    s.set_nodelay(true).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    s
}

/// A connection to `addr` from the local address `from` (another loopback address than the
/// cluster's own 127.0.0.1, so that per-IP limits can be tested apart from the nodes' traffic).
fn connect_from(from: [u8; 4], addr: SocketAddr) -> TcpStream {
    common::block_on(async move {
        let sock = tokio::net::TcpSocket::new_v4().unwrap();
        sock.bind(SocketAddr::from((from, 0))).unwrap();
        let s = sock.connect(addr).await.expect("connect");
        let s = s.into_std().unwrap();
        s.set_nonblocking(false).unwrap();
        s.set_nodelay(true).unwrap();
        s
    })
}

/// The resident set size of process `pid` in KiB (Linux `/proc`).
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/PID/status")
}

fn pid(c: &Cluster, node: i32) -> u32 {
    c.pid(node)
}

/// Writes up to `n` zero bytes, stopping at the first error (the node closed the connection).
fn push_zeros(s: &mut TcpStream, n: usize) -> usize {
    let chunk = vec![0u8; 1 << 20];
    let mut sent = 0;
    while sent < n {
        match s.write(&chunk[..chunk.len().min(n - sent)]) {
            Ok(0) | Err(_) => break,
            Ok(k) => sent += k,
        }
    }
    sent
}

/// Metadata still flows through the quorum: a topic created through `via` appears on every
/// running node in `nodes` with a leader for each partition.
fn create_and_see(c: &Cluster, via: i32, nodes: &[i32], topic: &str) {
    eventually(&format!("creating {topic}"), || {
        match create_topic(c, &[via], topic, 3, nodes.len().min(3) as i32) {
            Ok(()) => Some(()),
            // An earlier attempt that timed out on the client may have created it.
            Err(e) if e.contains("TopicAlreadyExists") => Some(()),
            Err(_) => None,
        }
    });
    for &n in nodes {
        eventually(&format!("{topic} with leaders on node {n}"), || {
            let (_, _, leaders) = metadata(c, n, topic);
            (leaders.len() == 3 && leaders.values().all(|&l| l >= 0)).then_some(())
        });
    }
}

/// The quorum elects and replicates (as the election tests check it): a topic created through
/// one node reaches all; the active controller is SIGKILLed, the others elect a new one and
/// take another topic; the killed node comes back and catches up.
fn quorum_still_works(c: &mut Cluster, tag: &str) {
    wait_all_registered(c, 3);
    create_and_see(c, 2, &[1, 2, 3], &format!("{tag}-before-kill"));
    let active = eventually("an active controller", || {
        let id = admin_controller(c, 2);
        (id > 0).then_some(id)
    });
    c.kill(active);
    let survivors: Vec<i32> = (1..=3).filter(|&n| n != active).collect();
    let elected = eventually("a new active controller", || {
        let id = admin_controller(c, survivors[0]);
        (id > 0 && id != active).then_some(id)
    });
    assert!(survivors.contains(&elected));
    create_and_see(c, survivors[1], &survivors, &format!("{tag}-after-kill"));
    c.restart(active);
    eventually("the restarted node catching up", || {
        let (_, _, leaders) = metadata(c, active, &format!("{tag}-after-kill"));
        (leaders.len() == 3).then_some(())
    });
}

/// Kafka frames and the old Raft stream both claiming 256 MiB (the old Raft transport's limit)
/// on the controller port: every such connection is closed, the node's memory does not follow
/// the claims or the bytes pushed behind them, and the quorum keeps working.
#[test]
fn huge_frame_claims_on_the_controller_port_are_closed_without_memory() {
    let mut c = Cluster::start_with(3, &settings(&[]));
    wait_all_registered(&c, 3);
    let addr = controller_addr(&c, 1);
    let node = pid(&c, 1);
    let before = rss_kib(node);

    let claim = (256u32 << 20).to_be_bytes();
    let mut conns = Vec::new();
    for i in 0..12 {
        let mut s = connect(addr);
        if i % 2 == 1 {
            let _ = s.write_all(&OLD_PREAMBLE);
        }
        let _ = s.write_all(&claim);
        conns.push(s);
    }
    // 24 MiB behind every claim, as far as the node reads them.
    let pushed: usize = conns.iter_mut().map(|s| push_zeros(s, 24 << 20)).sum();
    let grown_mib = rss_kib(node).saturating_sub(before) / 1024;
    eprintln!(
        "pushed {} MiB behind 12 claims of 256 MiB; node RSS {} MiB before, grew {grown_mib} MiB",
        pushed >> 20,
        before / 1024
    );
    assert!(
        grown_mib < 64,
        "the node's RSS grew by {grown_mib} MiB under claimed frames ({} MiB pushed)",
        pushed >> 20
    );
    for (i, s) in conns.iter_mut().enumerate() {
        assert!(
            wait_closed(s, Duration::from_secs(10)),
            "connection {i} ({}) claiming 256 MiB is still open",
            if i % 2 == 1 {
                "old preamble"
            } else {
                "Kafka frame"
            }
        );
    }
    quorum_still_works(&mut c, "claims");
}

/// The old preamble is a frame of negative size: closed at once, unanswered. Raft is a Kafka
/// API of the controller listener (listed by its ApiVersions, not by a client listener's, and
/// refused on a client listener), and a raw StromRaft request gets its Kafka-framed answer.
#[test]
fn raft_is_a_kafka_api_of_the_controller_listener_and_the_preamble_a_bad_frame() {
    let c = Cluster::start_with(3, &settings(&[]));
    wait_all_registered(&c, 3);
    let addr = controller_addr(&c, 1);

    let mut s = connect(addr);
    s.write_all(&OLD_PREAMBLE).unwrap();
    assert!(
        matches!(read_frame(&mut s, Duration::from_secs(10)), Reply::Closed),
        "the old Raft preamble was not refused as a bad frame"
    );

    let keys = |port: u16| -> Vec<i16> {
        let mut s = connect(SocketAddr::from(([127, 0, 0, 1], port)));
        let r: ApiVersionsResponse = raw_call(
            &mut s,
            ApiKey::ApiVersions,
            3,
            &ApiVersionsRequest::default(),
        );
        r.api_keys.iter().map(|k| k.api_key).collect()
    };
    assert!(
        keys(addr.port()).contains(&RAFT_API_KEY),
        "ApiVersions on the controller listener lists Raft"
    );
    assert!(
        !keys(port_of(&c, 1)).contains(&RAFT_API_KEY),
        "a client listener does not list Raft"
    );

    // StromRaft v0, a Status RPC from node 9 to node 1: the body is the bincode (varint)
    // encoding of `strom_raft::wire::RaftRequest { from: 9, to: 1, rpc: Status }`.
    let status = raft_request(77, &[9, 1, 3]);
    let mut s = connect(addr);
    write_frame(&mut s, &status).unwrap();
    let Reply::Frame(f) = read_frame(&mut s, Duration::from_secs(10)) else {
        panic!("no answer to a StromRaft Status request on the controller listener")
    };
    // ResponseHeader v1: correlation id, no tagged fields; then RaftResponse::Status
    // { initialized: true }.
    assert_eq!(&f[..4], &77i32.to_be_bytes(), "correlation id");
    assert_eq!(&f[4..], &[0, 3, 1], "tagged fields, Status, initialized");

    // On a client listener the key is unknown: closed unanswered.
    let mut s = connect(SocketAddr::from(([127, 0, 0, 1], port_of(&c, 1))));
    write_frame(&mut s, &status).unwrap();
    assert!(matches!(
        read_frame(&mut s, Duration::from_secs(10)),
        Reply::Closed
    ));
    // A StromRaft request whose body is not a Raft RPC: closed unanswered.
    let mut s = connect(addr);
    write_frame(&mut s, &raft_request(78, &[0xff; 40])).unwrap();
    assert!(matches!(
        read_frame(&mut s, Duration::from_secs(10)),
        Reply::Closed
    ));
}

/// A StromRaft v0 request frame payload: RequestHeader v2 (key, version, correlation id,
/// client id, no tagged fields) and `body`.
fn raft_request(correlation_id: i32, body: &[u8]) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&RAFT_API_KEY.to_be_bytes());
    p.extend_from_slice(&0i16.to_be_bytes());
    p.extend_from_slice(&correlation_id.to_be_bytes());
    let client = b"strom-it";
    p.extend_from_slice(&(client.len() as i16).to_be_bytes());
    p.extend_from_slice(client);
    p.push(0);
    p.extend_from_slice(body);
    p
}

/// `connections.max.idle.ms` on the controller listener: a connection that never sends a
/// byte, and one that stops in the middle of a frame, are closed; the nodes' own connections
/// (Raft, heartbeats) stay busy enough to live.
#[test]
fn idle_connections_on_the_controller_port_are_closed() {
    let mut c = Cluster::start_with(3, &settings(&["connections.max.idle.ms=2000"]));
    wait_all_registered(&c, 3);
    let addr = controller_addr(&c, 2);
    let start = Instant::now();
    let mut silent = connect(addr);
    let mut partial = connect(addr);
    partial.write_all(&[0, 0]).unwrap();
    assert!(
        wait_closed(&mut silent, Duration::from_secs(20)),
        "a silent connection on the controller port is still open after {:?}",
        start.elapsed()
    );
    assert!(
        wait_closed(&mut partial, Duration::from_secs(20)),
        "a connection stopped mid-frame is still open after {:?}",
        start.elapsed()
    );
    quorum_still_works(&mut c, "idle");
}

/// `max.connections.per.ip` on the controller listener (`ConnectionQuotas.inc`: a connection
/// over its address's limit is closed at once): from 127.0.0.2, three connections are served
/// and the next two closed; closing one frees its slot. The nodes themselves connect from
/// 127.0.0.1, which `max.connections.per.ip.overrides` exempts.
#[test]
fn connections_over_max_connections_per_ip_are_refused_on_the_controller_port() {
    let c = Cluster::start_with(
        3,
        &settings(&[
            "max.connections.per.ip=3",
            "max.connections.per.ip.overrides=127.0.0.1:1000",
        ]),
    );
    wait_all_registered(&c, 3);
    let addr = controller_addr(&c, 3);
    let versions = encode_request(ApiKey::ApiVersions, 3, 5, &ApiVersionsRequest::default());
    let mut conns: Vec<TcpStream> = (0..5).map(|_| connect_from([127, 0, 0, 2], addr)).collect();
    let mut answered = 0;
    let mut closed = 0;
    for s in conns.iter_mut() {
        let _ = write_frame(s, &versions);
        match read_frame(s, Duration::from_secs(10)) {
            Reply::Frame(_) => answered += 1,
            Reply::Closed => closed += 1,
            Reply::TimedOut => panic!("a connection was neither served nor closed"),
        }
    }
    assert_eq!(
        (answered, closed),
        (3, 2),
        "answered/closed over 5 connections from one address with max.connections.per.ip=3"
    );
    // A served connection closed frees its slot.
    let first = conns.remove(0);
    drop(first);
    let mut again = eventually("a free slot for 127.0.0.2", || {
        let mut s = connect_from([127, 0, 0, 2], addr);
        let _ = write_frame(&mut s, &versions);
        match read_frame(&mut s, Duration::from_secs(10)) {
            Reply::Frame(_) => Some(s),
            _ => None,
        }
    });
    let mut buf = [0u8; 1];
    again
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    assert!(
        !matches!(again.read(&mut buf), Ok(0)),
        "the connection in the freed slot stays open"
    );
    create_and_see(&c, 3, &[1, 2, 3], "per-ip-after");
}

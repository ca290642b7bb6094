//! The inter-broker client against a peer that, like a Kafka broker, serves one request per
//! connection at a time and in order: a request it sits on blocks its connection only.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use strom_protocol::kafka::messages::api_versions_response::ApiVersion;
use strom_protocol::kafka::messages::*;
use strom_protocol::kafka::protocol::{Decodable, Encodable, HeaderVersion};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::{Channel, InterBrokerClient};

const TIMEOUT: Duration = Duration::from_secs(10);

/// A peer that answers ApiVersions and BrokerHeartbeat, and never answers CreateTopics.
struct Peer {
    addr: String,
    accepted: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Peer {
    async fn start() -> Peer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((s, _)) = listener.accept().await else {
                    return;
                };
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(serve(s));
            }
        });
        Peer {
            addr,
            accepted,
            task,
        }
    }
}

async fn serve(mut s: TcpStream) {
    loop {
        let Ok(size) = s.read_i32().await else { return };
        let mut payload = vec![0u8; size as usize];
        if s.read_exact(&mut payload).await.is_err() {
            return;
        }
        let mut payload = Bytes::from(payload);
        let key = ApiKey::try_from(i16::from_be_bytes([payload[0], payload[1]])).unwrap();
        let version = i16::from_be_bytes([payload[2], payload[3]]);
        let header =
            RequestHeader::decode(&mut payload, key.request_header_version(version)).unwrap();
        let frame = match key {
            ApiKey::ApiVersions => {
                let keys = [
                    ApiKey::ApiVersions,
                    ApiKey::BrokerHeartbeat,
                    ApiKey::CreateTopics,
                ]
                .iter()
                .map(|k| {
                    ApiVersion::default()
                        .with_api_key(*k as i16)
                        .with_min_version(0)
                        .with_max_version(if *k == ApiKey::ApiVersions { 3 } else { 5 })
                })
                .collect();
                respond(
                    key,
                    version,
                    header.correlation_id,
                    &ApiVersionsResponse::default().with_api_keys(keys),
                )
            }
            ApiKey::BrokerHeartbeat => respond(
                key,
                version,
                header.correlation_id,
                &BrokerHeartbeatResponse::default(),
            ),
            // Sits on it, as a controller busy with a slow admin request would: nothing after
            // it on this connection is read.
            _ => {
                std::future::pending::<()>().await;
                return;
            }
        };
        if s.write_all(&frame).await.is_err() {
            return;
        }
    }
}

fn respond<R: Encodable + HeaderVersion>(key: ApiKey, version: i16, corr: i32, r: &R) -> BytesMut {
    let hv = key.response_header_version(version);
    let mut body = BytesMut::new();
    ResponseHeader::default()
        .with_correlation_id(corr)
        .encode(&mut body, hv)
        .unwrap();
    r.encode(&mut body, version).unwrap();
    let mut out = BytesMut::with_capacity(4 + body.len());
    out.put_i32(body.len() as i32);
    out.put_slice(body.chunk());
    out
}

#[tokio::test]
async fn a_heartbeat_does_not_wait_behind_a_stuck_forwarded_request() {
    let peer = Peer::start().await;
    let client = InterBrokerClient::new(2);
    let fwd = client
        .connection(1, &peer.addr, Channel::ControllerForwarding, TIMEOUT)
        .await
        .unwrap();
    let stuck = tokio::spawn(async move { fwd.send(&CreateTopicsRequest::default(), 5).await });
    // The heartbeat channel answers while the forwarded request is still unanswered.
    for _ in 0..3 {
        let hb = client
            .connection(1, &peer.addr, Channel::ControllerLifecycle, TIMEOUT)
            .await
            .unwrap();
        tokio::time::timeout(
            Duration::from_secs(5),
            hb.send(&BrokerHeartbeatRequest::default(), 0),
        )
        .await
        .expect("the heartbeat is answered while CreateTopics is stuck")
        .unwrap();
    }
    assert!(!stuck.is_finished());
    assert_eq!(
        client.open_channels(),
        vec![
            (1, Channel::ControllerLifecycle),
            (1, Channel::ControllerForwarding)
        ]
    );
    assert_eq!(
        peer.accepted.load(Ordering::SeqCst),
        2,
        "one connection per channel, reused"
    );
    // The same check on one shared connection fails: that is head-of-line blocking.
    let one = client
        .connection(1, &peer.addr, Channel::ControllerForwarding, TIMEOUT)
        .await
        .unwrap();
    let blocked = tokio::time::timeout(
        Duration::from_millis(300),
        one.send(&BrokerHeartbeatRequest::default(), 0),
    )
    .await;
    assert!(
        blocked.is_err(),
        "a heartbeat behind the stuck request on its connection waits"
    );
    stuck.abort();
}

#[tokio::test]
async fn a_failed_connection_is_replaced_and_a_moved_node_reconnected() {
    let peer = Peer::start().await;
    let client = InterBrokerClient::new(2);
    let c1 = client
        .connection(1, &peer.addr, Channel::ReplicaFetch, TIMEOUT)
        .await
        .unwrap();
    let again = client
        .connection(1, &peer.addr, Channel::ReplicaFetch, TIMEOUT)
        .await
        .unwrap();
    assert!(Arc::ptr_eq(&c1, &again));
    client.disconnect(1, Channel::ReplicaFetch, &c1, "test");
    assert!(c1.is_closed());
    let c2 = client
        .connection(1, &peer.addr, Channel::ReplicaFetch, TIMEOUT)
        .await
        .unwrap();
    assert!(!Arc::ptr_eq(&c1, &c2));
    // Disconnecting with a connection that is no longer the pool's leaves the current one.
    client.disconnect(1, Channel::ReplicaFetch, &c1, "stale");
    assert!(!c2.is_closed());
    // The node moved: a new address gets a new connection and the old one is closed.
    let other = Peer::start().await;
    let c3 = client
        .connection(1, &other.addr, Channel::ReplicaFetch, TIMEOUT)
        .await
        .unwrap();
    assert_eq!(c3.addr(), other.addr);
    assert!(c2.is_closed());
    assert_eq!(peer.accepted.load(Ordering::SeqCst), 2);
    assert_eq!(other.accepted.load(Ordering::SeqCst), 1);
    client.close_all();
    assert!(c3.is_closed());
    assert!(client.open_channels().is_empty());
}

#[tokio::test]
async fn callers_connecting_at_once_end_up_on_one_connection() {
    let peer = Peer::start().await;
    let client = InterBrokerClient::new(2);
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (client, addr) = (client.clone(), peer.addr.clone());
            tokio::spawn(async move {
                client
                    .connection(1, &addr, Channel::ControllerAlterPartition, TIMEOUT)
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut conns = Vec::new();
    for t in tasks {
        conns.push(t.await.unwrap());
    }
    let kept = client
        .connection(1, &peer.addr, Channel::ControllerAlterPartition, TIMEOUT)
        .await
        .unwrap();
    for c in &conns {
        assert!(
            Arc::ptr_eq(c, &kept) || c.is_closed(),
            "a losing connection is closed"
        );
    }
    assert_eq!(
        client.open_channels(),
        vec![(1, Channel::ControllerAlterPartition)]
    );
}

//! Connection limits as Kafka's: `connections.max.idle.ms` closes a connection that sends
//! nothing for that long (to the millisecond, on tokio's paused clock), and
//! `max.connections.per.ip` (with `max.connections.per.ip.overrides`) closes a connection over
//! its address's limit at once while the others keep being served.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::{Buf, BufMut, BytesMut};
use strom_broker::config::BrokerConfig;
use strom_broker::Server;
use strom_protocol::kafka::messages::{ApiKey, ApiVersionsRequest, RequestHeader};
use strom_protocol::kafka::protocol::Encodable;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

async fn start(
    props: &[(&str, &str)],
) -> (std::net::SocketAddr, oneshot::Sender<()>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let props: BTreeMap<String, String> = props
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let config = BrokerConfig::new(
        1,
        "127.0.0.1:0".parse().unwrap(),
        None,
        dir.path().to_path_buf(),
        props,
    )
    .unwrap();
    strom_broker::meta_properties::format(&config.log_dirs, config.node_id, "test-cluster", true)
        .unwrap();
    let server = Server::start(config).await.unwrap();
    let addr = server.local_addr();
    let (tx, rx) = oneshot::channel::<()>();
    tokio::spawn(async move {
        server
            .run(async {
                let _ = rx.await;
            })
            .await
            .unwrap();
    });
    (addr, tx, dir)
}

fn api_versions_frame(corr: i32) -> BytesMut {
    let mut body = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(ApiKey::ApiVersions as i16)
        .with_request_api_version(0)
        .with_correlation_id(corr)
        .encode(&mut body, ApiKey::ApiVersions.request_header_version(0))
        .unwrap();
    ApiVersionsRequest::default().encode(&mut body, 0).unwrap();
    let mut f = BytesMut::new();
    f.put_i32(body.len() as i32);
    f.put_slice(&body);
    f
}

/// One ApiVersions round trip; `None` if the connection is closed.
async fn call(s: &mut TcpStream, corr: i32) -> Option<i32> {
    s.write_all(&api_versions_frame(corr)).await.ok()?;
    let n = s.read_i32().await.ok()?;
    let mut buf = vec![0u8; n as usize];
    s.read_exact(&mut buf).await.ok()?;
    Some((&buf[..]).get_i32())
}

async fn closed(s: &mut TcpStream) -> bool {
    let mut b = [0u8; 1];
    matches!(s.read(&mut b).await, Ok(0) | Err(_))
}

#[tokio::test(start_paused = true)]
async fn idle_connections_close_after_connections_max_idle_ms() {
    let (addr, stop, _dir) = start(&[("connections.max.idle.ms", "1000")]).await;
    let mut idle = TcpStream::connect(addr).await.unwrap();
    let mut busy = TcpStream::connect(addr).await.unwrap();
    assert_eq!(call(&mut idle, 1).await, Some(1));
    let t0 = tokio::time::Instant::now();
    // A connection with a request every 600 ms stays open past the idle limit...
    for corr in 2..6 {
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert_eq!(
            call(&mut busy, corr).await,
            Some(corr),
            "busy connection closed"
        );
    }
    // ...the silent one was closed at the limit.
    assert!(closed(&mut idle).await);
    assert!(t0.elapsed() >= Duration::from_millis(2400));
    let mut fresh = TcpStream::connect(addr).await.unwrap();
    let t1 = tokio::time::Instant::now();
    assert!(closed(&mut fresh).await);
    let waited = t1.elapsed();
    assert!(
        waited >= Duration::from_millis(1000) && waited < Duration::from_millis(1010),
        "closed after {waited:?}"
    );
    let _ = stop.send(());
}

#[tokio::test]
async fn connections_over_the_per_ip_limit_are_closed() {
    let (addr, stop, _dir) = start(&[
        ("max.connections.per.ip", "1"),
        ("max.connections.per.ip.overrides", "127.0.0.1:2"),
    ])
    .await;
    let mut a = TcpStream::connect(addr).await.unwrap();
    let mut b = TcpStream::connect(addr).await.unwrap();
    assert_eq!(call(&mut a, 1).await, Some(1));
    assert_eq!(call(&mut b, 2).await, Some(2));
    // The override allows two from 127.0.0.1: the third is closed unanswered.
    let mut c = TcpStream::connect(addr).await.unwrap();
    assert_eq!(call(&mut c, 3).await, None);
    // Closing one frees its place.
    drop(a);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let mut d = TcpStream::connect(addr).await.unwrap();
        if call(&mut d, 4).await == Some(4) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "slot never freed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(call(&mut b, 5).await, Some(5));
    let _ = stop.send(());
}

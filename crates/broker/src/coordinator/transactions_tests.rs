//! The marker channel against a peer shaped like a Kafka partition leader: it serves
//! ApiVersions and WriteTxnMarkers v1 (one request per connection at a time, in order),
//! records what it is sent and answers per partition what the test scripts (then NONE).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use parking_lot::{Mutex, RwLock};
use strom_controller::{BrokerInfo, MetadataImage, PartitionRegistration, TopicImage};
use strom_protocol::kafka::messages::api_versions_response::ApiVersion;
use strom_protocol::kafka::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use strom_protocol::kafka::messages::*;
use strom_protocol::kafka::protocol::{Decodable, Encodable, HeaderVersion};
use strom_protocol::memory_records::TxnResult;
use strom_protocol::ErrorCode;
use strom_transaction_coordinator::markers::{
    send_markers, MarkerChannel, MarkerOutcome, SendOutcome, TxnMarkerEntry,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::BrokerMarkerChannel;
use crate::inter_broker::{Channel, InterBrokerClient};

type Script = Arc<Mutex<HashMap<(String, i32), VecDeque<i16>>>>;
type Seen = Arc<Mutex<Vec<WriteTxnMarkersRequest>>>;

struct Leader {
    addr: String,
    seen: Seen,
    script: Script,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Leader {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn leader() -> Leader {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let seen: Seen = Arc::default();
    let script: Script = Arc::default();
    let (s2, sc2) = (seen.clone(), script.clone());
    let task = tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            tokio::spawn(serve(s, s2.clone(), sc2.clone()));
        }
    });
    Leader {
        addr,
        seen,
        script,
        task,
    }
}

async fn serve(mut s: TcpStream, seen: Seen, script: Script) {
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
                let keys = vec![
                    ApiVersion::default()
                        .with_api_key(ApiKey::ApiVersions as i16)
                        .with_max_version(3),
                    ApiVersion::default()
                        .with_api_key(ApiKey::WriteTxnMarkers as i16)
                        .with_min_version(1)
                        .with_max_version(1),
                ];
                respond(
                    key,
                    version,
                    header.correlation_id,
                    &ApiVersionsResponse::default().with_api_keys(keys),
                )
            }
            ApiKey::WriteTxnMarkers => {
                let req = WriteTxnMarkersRequest::decode(&mut payload, version).unwrap();
                let markers = req
                    .markers
                    .iter()
                    .map(|m| {
                        WritableTxnMarkerResult::default()
                            .with_producer_id(m.producer_id)
                            .with_topics(
                                m.topics
                                    .iter()
                                    .map(|t| {
                                        WritableTxnMarkerTopicResult::default()
                                            .with_name(t.name.clone())
                                            .with_partitions(
                                                t.partition_indexes
                                                    .iter()
                                                    .map(|p| {
                                                        let code = script
                                                            .lock()
                                                            .get_mut(&(t.name.0.to_string(), *p))
                                                            .and_then(VecDeque::pop_front)
                                                            .unwrap_or(0);
                                                        WritableTxnMarkerPartitionResult::default()
                                                            .with_partition_index(*p)
                                                            .with_error_code(code)
                                                    })
                                                    .collect(),
                                            )
                                    })
                                    .collect(),
                            )
                    })
                    .collect();
                seen.lock().push(req);
                respond(
                    key,
                    version,
                    header.correlation_id,
                    &WriteTxnMarkersResponse::default().with_markers(markers),
                )
            }
            _ => return,
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

/// Topic `t` (partitions 0 and 1 led by node 2 at `addr`, partition 2 without a leader).
fn image(addr: &str) -> MetadataImage {
    let (host, port) = addr.rsplit_once(':').unwrap();
    let reg = |leader: i32| PartitionRegistration {
        replicas: vec![2],
        isr: vec![2],
        leader,
        leader_epoch: 1,
        partition_epoch: 1,
        adding_replicas: vec![],
        removing_replicas: vec![],
    };
    let mut img = MetadataImage::default();
    img.brokers.insert(
        2,
        BrokerInfo {
            node_id: 2,
            host: host.to_string(),
            port: port.parse().unwrap(),
            rack: None,
            incarnation_id: uuid::Uuid::nil(),
            epoch: 0,
            fenced: false,
            in_controlled_shutdown: false,
        },
    );
    img.topics.insert(
        "t".into(),
        TopicImage {
            name: "t".into(),
            id: uuid::Uuid::from_u64_pair(1, 1),
            partitions: BTreeMap::from([(0, reg(2)), (1, reg(2)), (2, reg(-1))]),
            configs: BTreeMap::new(),
        },
    );
    img
}

fn entry(partitions: &[(&str, i32)]) -> TxnMarkerEntry {
    TxnMarkerEntry {
        producer_id: 77,
        producer_epoch: 3,
        result: TxnResult::Commit,
        coordinator_epoch: 9,
        transaction_version: 2,
        partitions: partitions
            .iter()
            .map(|(t, p)| (t.to_string(), *p))
            .collect(),
    }
}

#[tokio::test]
async fn markers_go_to_the_leader_and_each_partition_is_reported() {
    let l = leader().await;
    l.script.lock().insert(
        ("t".into(), 1),
        VecDeque::from([ErrorCode::NotLeaderOrFollower.code()]),
    );
    let inter = InterBrokerClient::new(1);
    let channel = BrokerMarkerChannel::new(
        Arc::new(RwLock::new(Arc::new(image(&l.addr)))),
        inter.clone(),
        Duration::from_secs(10),
    );
    let mut out = channel
        .write_markers(entry(&[("t", 0), ("t", 1), ("t", 2), ("gone", 0)]))
        .await;
    out.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        out,
        vec![
            (("gone".into(), 0), MarkerOutcome::TopicDeleted),
            (("t".into(), 0), MarkerOutcome::Written),
            (
                ("t".into(), 1),
                MarkerOutcome::Error(ErrorCode::NotLeaderOrFollower)
            ),
            (
                ("t".into(), 2),
                MarkerOutcome::Error(ErrorCode::LeaderNotAvailable)
            ),
        ]
    );
    let seen = l.seen.lock().clone();
    assert_eq!(seen.len(), 1);
    let m = &seen[0].markers[0];
    assert_eq!(
        (
            m.producer_id.0,
            m.producer_epoch,
            m.transaction_result,
            m.coordinator_epoch
        ),
        (77, 3, true, 9)
    );
    assert_eq!(m.topics[0].partition_indexes, vec![0, 1]);
    assert_eq!(inter.open_channels(), vec![(2, Channel::TxnMarkers)]);
}

#[tokio::test]
async fn send_markers_retries_until_every_partition_has_its_marker() {
    let l = leader().await;
    l.script.lock().insert(
        ("t".into(), 1),
        VecDeque::from([
            ErrorCode::NotLeaderOrFollower.code(),
            ErrorCode::NotEnoughReplicas.code(),
        ]),
    );
    let channel = BrokerMarkerChannel::new(
        Arc::new(RwLock::new(Arc::new(image(&l.addr)))),
        InterBrokerClient::new(1),
        Duration::from_secs(10),
    );
    let r = send_markers(
        &*channel,
        entry(&[("t", 0), ("t", 1), ("gone", 3)]),
        Duration::from_millis(1),
        || async { true },
    )
    .await;
    assert_eq!(r, SendOutcome::Done);
    let seen = l.seen.lock().clone();
    // Both at first, then only the partition that failed.
    let asked: Vec<Vec<i32>> = seen
        .iter()
        .map(|r| r.markers[0].topics[0].partition_indexes.clone())
        .collect();
    assert_eq!(asked, vec![vec![0, 1], vec![1], vec![1]]);
    // A fenced coordinator stops.
    l.script.lock().insert(
        ("t".into(), 0),
        VecDeque::from([ErrorCode::TransactionCoordinatorFenced.code()]),
    );
    let r = send_markers(
        &*channel,
        entry(&[("t", 0)]),
        Duration::from_millis(1),
        || async { true },
    )
    .await;
    assert!(matches!(r, SendOutcome::Abandoned(_)), "{r:?}");
}

/// The defaults DescribeConfigs shows are the ones the coordinator runs with.
#[test]
fn described_defaults_are_the_coordinators_defaults() {
    let props: BTreeMap<String, String> = super::BROKER_CONFIGS
        .iter()
        .map(|(k, _, v)| (k.to_string(), v.to_string()))
        .collect();
    let c = strom_transaction_coordinator::config::TransactionCoordinatorConfig::from_props(&props);
    let d = strom_transaction_coordinator::config::TransactionCoordinatorConfig::default();
    assert_eq!(format!("{c:?}"), format!("{d:?}"));
}

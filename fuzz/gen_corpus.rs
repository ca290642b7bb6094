//! Writes small valid seeds into `fuzz/seeds/<target>/` (run from `fuzz/`:
//! `cargo run --bin gen_corpus`). The seeds are committed; re-running is idempotent.
//!
//! `offsets_load` seeds come from real `__consumer_offsets` segments, written by a broker
//! that served consumer groups: `cargo run --bin gen_corpus -- SEGMENT.log ...` turns each
//! segment's records into one seed in the target's input format.

use std::path::Path;

use bytes::{BufMut, BytesMut};
use strom_broker::handlers::registry::REGISTRY;
use strom_protocol::batch::{set_base_offset, BatchView};
use strom_protocol::kafka::messages::*;
use strom_protocol::kafka::protocol::{Encodable, StrBytes};
use strom_protocol::kafka::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use strom_raft::wire;

fn batch(n: usize, compression: Compression, producer_id: i64) -> Vec<u8> {
    let records: Vec<Record> = (0..n)
        .map(|i| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id,
            producer_epoch: 0,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: if producer_id >= 0 { i as i32 } else { -1 },
            timestamp: 1_700_000_000_000 + i as i64,
            key: Some(bytes::Bytes::from(format!("k{i}"))),
            value: Some(bytes::Bytes::from(format!("v{i}"))),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression,
        },
    )
    .unwrap();
    buf.to_vec()
}

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join(name), bytes).unwrap();
}

/// `size | header | body` for one request.
fn frame<R: Encodable>(key: ApiKey, version: i16, req: &R) -> Vec<u8> {
    let hv = key.request_header_version(version);
    let header = RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(7)
        .with_client_id(Some(StrBytes::from_static_str("fuzz")));
    let mut body = BytesMut::new();
    header.encode(&mut body, hv).unwrap();
    req.encode(&mut body, version).unwrap();
    let mut out = BytesMut::new();
    out.put_i32(body.len() as i32);
    out.extend_from_slice(&body);
    out.to_vec()
}

fn topic(s: &'static str) -> TopicName {
    TopicName(StrBytes::from_static_str(s))
}

fn request(key: ApiKey, version: i16) -> Vec<u8> {
    match key {
        ApiKey::Produce => {
            let p = produce_request::PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(batch(2, Compression::None, -1).into()));
            let t = produce_request::TopicProduceData::default()
                .with_name(topic("t"))
                .with_partition_data(vec![p]);
            let req = ProduceRequest::default()
                .with_acks(1)
                .with_timeout_ms(1000)
                .with_topic_data(vec![t]);
            frame(key, version, &req)
        }
        ApiKey::Fetch => {
            let p = fetch_request::FetchPartition::default().with_partition(0);
            let t = fetch_request::FetchTopic::default()
                .with_topic(topic("t"))
                .with_partitions(vec![p]);
            let req = FetchRequest::default()
                .with_max_wait_ms(0)
                .with_topics(vec![t]);
            frame(key, version, &req)
        }
        ApiKey::ListOffsets => {
            let p = list_offsets_request::ListOffsetsPartition::default()
                .with_partition_index(0)
                .with_timestamp(-1);
            let t = list_offsets_request::ListOffsetsTopic::default()
                .with_name(topic("t"))
                .with_partitions(vec![p]);
            frame(
                key,
                version,
                &ListOffsetsRequest::default().with_topics(vec![t]),
            )
        }
        ApiKey::Metadata => {
            let t = metadata_request::MetadataRequestTopic::default().with_name(Some(topic("t")));
            frame(
                key,
                version,
                &MetadataRequest::default().with_topics(Some(vec![t])),
            )
        }
        ApiKey::ApiVersions => {
            let req = ApiVersionsRequest::default()
                .with_client_software_name(StrBytes::from_static_str("fuzz"))
                .with_client_software_version(StrBytes::from_static_str("1"));
            frame(key, version, &req)
        }
        ApiKey::CreateTopics => {
            let t = create_topics_request::CreatableTopic::default()
                .with_name(topic("t"))
                .with_num_partitions(1)
                .with_replication_factor(1);
            frame(
                key,
                version,
                &CreateTopicsRequest::default().with_topics(vec![t]),
            )
        }
        ApiKey::DeleteTopics => {
            let req = if version >= 6 {
                DeleteTopicsRequest::default()
                    .with_topics(vec![delete_topics_request::DeleteTopicState::default()
                        .with_name(Some(topic("t")))])
            } else {
                DeleteTopicsRequest::default().with_topic_names(vec![topic("t")])
            };
            frame(key, version, &req)
        }
        ApiKey::CreatePartitions => {
            let t = create_partitions_request::CreatePartitionsTopic::default()
                .with_name(topic("t"))
                .with_count(2);
            frame(
                key,
                version,
                &CreatePartitionsRequest::default().with_topics(vec![t]),
            )
        }
        ApiKey::DescribeConfigs => {
            let r = describe_configs_request::DescribeConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(StrBytes::from_static_str("t"));
            frame(
                key,
                version,
                &DescribeConfigsRequest::default().with_resources(vec![r]),
            )
        }
        ApiKey::IncrementalAlterConfigs => {
            let c = incremental_alter_configs_request::AlterableConfig::default()
                .with_name(StrBytes::from_static_str("retention.ms"))
                .with_value(Some(StrBytes::from_static_str("1000")));
            let r = incremental_alter_configs_request::AlterConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(StrBytes::from_static_str("t"))
                .with_configs(vec![c]);
            frame(
                key,
                version,
                &IncrementalAlterConfigsRequest::default().with_resources(vec![r]),
            )
        }
        ApiKey::DescribeCluster => frame(key, version, &DescribeClusterRequest::default()),
        // No hand-written seed: the fuzzer starts from the other APIs' frames.
        _ => Vec::new(),
    }
}

/// Batches with consecutive offsets, as they sit in a segment.
fn segment_log(specs: &[(usize, Compression)]) -> (Vec<u8>, Vec<(i64, u32, i64)>) {
    let mut out = Vec::new();
    let mut entries = Vec::new();
    let mut next = 0i64;
    for &(n, c) in specs {
        let mut b = batch(n, c, -1);
        set_base_offset(&mut b, next);
        let v = BatchView::parse(&b).unwrap();
        entries.push((v.last_offset(), out.len() as u32, v.max_timestamp()));
        next = v.next_offset();
        out.extend_from_slice(&b);
    }
    (out, entries)
}

fn part(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u16).to_be_bytes());
    out.extend_from_slice(bytes);
}

/// A segment's records as `offsets_load` reads its input: u16 key length, key, u16 value
/// length (0xFFFF for a tombstone), value.
fn offsets_seed(segment: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = bytes::Bytes::copy_from_slice(segment);
    while let Ok(size) = strom_protocol::batch::peek_batch_size(&buf) {
        if size > buf.len() {
            break;
        }
        let mut batch = buf.split_to(size);
        let control = BatchView::parse(&batch)
            .map(|v| v.is_control())
            .unwrap_or(true);
        if control {
            continue;
        }
        let Ok(set) = RecordBatchDecoder::decode(&mut batch) else {
            break;
        };
        for r in set.records {
            let Some(key) = r.key else { continue };
            part(&mut out, &key);
            match r.value {
                Some(v) => part(&mut out, &v),
                None => out.extend_from_slice(&u16::MAX.to_be_bytes()),
            }
        }
    }
    out
}

/// Raft requests of every kind, as a voter sends them.
fn raft_requests() -> Vec<(&'static str, wire::RaftRequest)> {
    use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};
    use openraft::{
        BasicNode, CommittedLeaderId, Entry, EntryPayload, LogId, Membership, SnapshotMeta,
        StoredMembership, Vote,
    };
    use strom_raft::types::{Payload, TypeConfig};
    use wire::{RaftRequest, RaftRpc};

    let vote = Vote::new_committed(3, 1);
    let log_id = |term, index| LogId::new(CommittedLeaderId::new(term, 1), index);
    let membership = Membership::new(
        vec![[1u64, 2, 3].into_iter().collect()],
        (1u64..=3)
            .map(|i| (i, BasicNode::new(format!("127.0.0.1:909{i}"))))
            .collect::<std::collections::BTreeMap<_, _>>(),
    );
    let entries: Vec<Entry<TypeConfig>> = vec![
        Entry {
            log_id: log_id(3, 11),
            payload: EntryPayload::Normal(Payload(br#"[{"Topic":{"name":"t"}}]"#.to_vec())),
        },
        Entry {
            log_id: log_id(3, 12),
            payload: EntryPayload::Membership(membership.clone()),
        },
        Entry {
            log_id: log_id(3, 13),
            payload: EntryPayload::Blank,
        },
    ];
    let to = |rpc| RaftRequest {
        from: 1,
        to: 2,
        rpc,
    };
    vec![
        (
            "append",
            to(RaftRpc::AppendEntries(AppendEntriesRequest {
                vote,
                prev_log_id: Some(log_id(3, 10)),
                entries,
                leader_commit: Some(log_id(3, 10)),
            })),
        ),
        (
            "heartbeat",
            to(RaftRpc::AppendEntries(AppendEntriesRequest {
                vote,
                prev_log_id: Some(log_id(3, 13)),
                entries: Vec::new(),
                leader_commit: Some(log_id(3, 13)),
            })),
        ),
        (
            "vote",
            to(RaftRpc::Vote(VoteRequest::new(
                Vote::new(4, 1),
                Some(log_id(3, 13)),
            ))),
        ),
        (
            "snapshot-chunk",
            to(RaftRpc::InstallSnapshot(InstallSnapshotRequest {
                vote,
                meta: SnapshotMeta {
                    last_log_id: Some(log_id(3, 13)),
                    last_membership: StoredMembership::new(Some(log_id(3, 12)), membership),
                    snapshot_id: "3-1-13".into(),
                },
                offset: 0,
                data: b"[records of the image]".to_vec(),
                done: true,
            })),
        ),
        ("status", to(RaftRpc::Status)),
    ]
}

/// Raft responses of every kind, as a voter answers.
fn raft_responses() -> Vec<(&'static str, wire::RaftResponse)> {
    use openraft::error::{Fatal, RaftError};
    use openraft::raft::{AppendEntriesResponse, InstallSnapshotResponse, VoteResponse};
    use openraft::{CommittedLeaderId, LogId, Vote};
    use wire::RaftResponse;

    let vote = Vote::new_committed(3, 1);
    let log_id = LogId::new(CommittedLeaderId::new(3, 1), 13);
    vec![
        (
            "append-ok",
            RaftResponse::AppendEntries(Ok(AppendEntriesResponse::Success)),
        ),
        (
            "append-conflict",
            RaftResponse::AppendEntries(Ok(AppendEntriesResponse::Conflict)),
        ),
        (
            "append-higher-vote",
            RaftResponse::AppendEntries(Ok(AppendEntriesResponse::HigherVote(Vote::new(5, 2)))),
        ),
        (
            "append-stopped",
            RaftResponse::AppendEntries(Err(RaftError::Fatal(Fatal::Stopped))),
        ),
        (
            "vote-granted",
            RaftResponse::Vote(Ok(VoteResponse::new(vote, Some(log_id), true))),
        ),
        (
            "snapshot-ok",
            RaftResponse::InstallSnapshot(Ok(InstallSnapshotResponse { vote })),
        ),
        ("status", RaftResponse::Status { initialized: true }),
        ("wrong-node", RaftResponse::WrongNode { node_id: 3 }),
    ]
}

/// The seeds of the Raft and controller-listener targets and of the pre-authentication one.
fn raft_and_pre_auth_seeds(root: &Path) {
    let requests: Vec<(&str, Vec<u8>)> = raft_requests()
        .into_iter()
        .map(|(name, r)| (name, wire::encode_body(&r, usize::MAX).unwrap()))
        .collect();
    let responses: Vec<(&str, Vec<u8>)> = raft_responses()
        .into_iter()
        .map(|(name, r)| (name, wire::encode_body(&r, usize::MAX).unwrap()))
        .collect();

    // raft_rpc: a mode byte (even: requests a voter's listener reads; odd: responses its
    // client reads), then frames.
    let dir = root.join("raft_rpc");
    let mut all = vec![0u8];
    for (name, body) in &requests {
        let frame = wire::request_frame(7, "strom-raft-1", body);
        let mut seed = vec![0u8];
        seed.extend_from_slice(&frame);
        write(&dir, &format!("request-{name}"), &seed);
        all.extend_from_slice(&frame);
    }
    write(&dir, "requests-all", &all);
    for (name, body) in &responses {
        let mut seed = vec![1u8];
        seed.extend_from_slice(&wire::response_frame(7, body));
        write(&dir, &format!("response-{name}"), &seed);
    }

    // controller_listener: what peers send there (Raft from the voters, the broker-to-controller
    // APIs from brokers), and the old Raft preamble.
    let dir = root.join("controller_listener");
    for (name, body) in &requests {
        write(
            &dir,
            &format!("raft-{name}"),
            &wire::request_frame(7, "strom-raft-1", body),
        );
    }
    for e in REGISTRY.iter().filter(|e| e.scopes.controller) {
        for v in [e.min_version, e.max_version] {
            let seed = request(e.key, v);
            if !seed.is_empty() {
                write(&dir, &format!("{:?}-v{v}", e.key), &seed);
            }
        }
    }
    let heartbeat = BrokerHeartbeatRequest::default()
        .with_broker_id(BrokerId(2))
        .with_broker_epoch(10)
        .with_current_metadata_offset(13);
    write(
        &dir,
        "BrokerHeartbeat-v1",
        &frame(ApiKey::BrokerHeartbeat, 1, &heartbeat),
    );
    let inner = request(ApiKey::CreateTopics, 7);
    let envelope = EnvelopeRequest::default()
        .with_request_data(bytes::Bytes::copy_from_slice(&inner[4..]))
        .with_request_principal(Some(strom_broker::request_context::serialize_principal(
            &strom_broker::request_context::KafkaPrincipal::anonymous(),
        )))
        .with_client_host_address(bytes::Bytes::from_static(&[127, 0, 0, 1]));
    write(
        &dir,
        "Envelope-CreateTopics",
        &frame(ApiKey::Envelope, 0, &envelope),
    );
    write(
        &dir,
        "old-raft-preamble",
        &[0xFF, b'S', b'T', b'R', b'A', b'F', b'T', 1, 0, 0, 0, 3],
    );

    // pre_auth: ApiVersions at every version, with client software names Kafka accepts and
    // refuses, and a request that must wait for authentication.
    let dir = root.join("pre_auth");
    for v in 0..=4i16 {
        for (tag, name, version) in [("valid", "librdkafka", "2.3.0"), ("invalid", "-x y", "")] {
            let req = ApiVersionsRequest::default()
                .with_client_software_name(StrBytes::from_static_str(name))
                .with_client_software_version(StrBytes::from_static_str(version));
            write(
                &dir,
                &format!("ApiVersions-v{v}-{tag}"),
                &frame(ApiKey::ApiVersions, v, &req),
            );
        }
    }
    let mut unsupported = frame(ApiKey::ApiVersions, 4, &ApiVersionsRequest::default());
    unsupported[6..8].copy_from_slice(&9i16.to_be_bytes());
    write(&dir, "ApiVersions-v9-fallback", &unsupported);
    let mut then_metadata = frame(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());
    then_metadata.extend_from_slice(&request(ApiKey::Metadata, 12));
    write(&dir, "ApiVersions-then-Metadata", &then_metadata);
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds");

    let segments: Vec<String> = std::env::args().skip(1).collect();
    if !segments.is_empty() {
        let dir = root.join("offsets_load");
        for (i, path) in segments.iter().enumerate() {
            let seed = offsets_seed(&std::fs::read(path).expect("read segment"));
            write(&dir, &format!("broker-segment-{i}"), &seed);
        }
        println!("offsets_load seeds written under {}", dir.display());
        return;
    }

    let dir = root.join("frame_and_header");
    for e in REGISTRY {
        let key = e.key;
        for v in [e.min_version, e.max_version] {
            let seed = request(key, v);
            if !seed.is_empty() {
                write(&dir, &format!("{key:?}-v{v}"), &seed);
            }
        }
    }

    let dir = root.join("record_batch");
    write(&dir, "plain-1", &batch(1, Compression::None, -1));
    write(&dir, "idempotent-3", &batch(3, Compression::None, 42));
    write(&dir, "gzip-2", &batch(2, Compression::Gzip, -1));
    let mut two = batch(1, Compression::None, -1);
    two.extend_from_slice(&batch(2, Compression::None, -1));
    write(&dir, "two-batches", &two);

    let dir = root.join("storage_recovery");
    let (log, entries) = segment_log(&[
        (1, Compression::None),
        (2, Compression::None),
        (1, Compression::Gzip),
    ]);
    // Log only: indexes missing, rebuilt by recovery.
    let mut s = vec![0u8, 0, 0];
    part(&mut s, &log);
    write(&dir, "log-only", &s);
    // Log with indexes that name its second batch.
    let (last, pos, ts) = entries[1];
    let mut index = Vec::new();
    index.extend_from_slice(&(last as i32).to_be_bytes());
    index.extend_from_slice(&(pos as i32).to_be_bytes());
    let mut tindex = Vec::new();
    tindex.extend_from_slice(&ts.to_be_bytes());
    tindex.extend_from_slice(&(last as i32).to_be_bytes());
    let mut s = vec![3u8, 0, 0];
    part(&mut s, &log);
    part(&mut s, &index);
    part(&mut s, &tindex);
    write(&dir, "log-with-indexes", &s);
    // Two segments: the second starts at the first's next offset.
    let next = entries.last().unwrap().0 + 1;
    let mut second = batch(2, Compression::None, -1);
    set_base_offset(&mut second, next);
    let mut s = vec![4u8];
    s.extend_from_slice(&(next as u16).to_be_bytes());
    part(&mut s, &log);
    part(&mut s, &[]);
    part(&mut s, &[]);
    s.extend_from_slice(&second);
    write(&dir, "two-segments", &s);
    // Torn tail: recovery must cut the last batch.
    let mut s = vec![0u8, 0, 0];
    part(&mut s, &log[..log.len() - 5]);
    write(&dir, "torn-tail", &s);

    raft_and_pre_auth_seeds(&root);

    println!("seeds written under {}", root.display());
}

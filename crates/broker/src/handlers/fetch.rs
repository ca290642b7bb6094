//! Fetch: decodes the request into the replica manager's [`FetchParams`] and partitions, runs
//! [`crate::replica_manager::ReplicaManager::fetch_messages`] (reads, the fetch purgatory) and
//! encodes its answer. Whole batches, as raw bytes.

use std::sync::Arc;
use std::time::Duration;

use strom_protocol::kafka::messages::fetch_response::{
    AbortedTransaction, FetchableTopicResponse, PartitionData,
};
use strom_protocol::kafka::messages::{ApiKey, FetchRequest, FetchResponse, TopicName};

use bytes::{BufMut, BytesMut};
use strom_protocol::kafka::messages::ResponseHeader;
use strom_protocol::kafka::protocol::Encodable;
use strom_storage::FileRecords;

use strom_protocol::ErrorCode;
use strom_server_common::authorizer::AclOperation;

use super::{str_bytes, HandleError};
use crate::partition::{FetchIsolation, PartitionFetch};
use crate::replica_manager::fetch::{FetchParams, FetchPartitionRequest};
use crate::request_context::RequestContext;
use crate::response::ResponseFrame;
use crate::server::Broker;

const READ_COMMITTED: i8 = 1;

/// The response, each partition's records left out (`None`), and those records in response
/// order, for [`encode`] to put in place as file ranges. Tests' entry: no authorizer asked.
#[cfg(test)]
pub async fn handle(
    broker: &Arc<Broker>,
    req: FetchRequest,
    version: i16,
) -> (FetchResponse, Vec<FileRecords>) {
    handle_authorized(broker, req, version, true).await
}

/// A Fetch as `ctx`'s principal: the response and its records, as `handle` answers them. A
/// follower's fetch (one naming a replica) reads past the high watermark and moves the leader's
/// ISR, so it needs CLUSTER_ACTION on the cluster: without it every partition answers
/// TOPIC_AUTHORIZATION_FAILED (Kafka's `KafkaApis.handleFetchRequest`).
pub async fn handle_for(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    req: FetchRequest,
    version: i16,
) -> (FetchResponse, Vec<FileRecords>) {
    let follower_authorized = replica_of(&req, version).0 < 0
        || broker
            .auth
            .authorize_cluster(ctx, AclOperation::ClusterAction);
    handle_authorized(broker, req, version, follower_authorized).await
}

/// Fetch v15+ names the follower and its broker epoch in replica_state, earlier versions only
/// the follower, in replica_id; a consumer is replica -1.
fn replica_of(req: &FetchRequest, version: i16) -> (i32, i64) {
    if version >= 15 {
        (
            req.replica_state.replica_id.0,
            req.replica_state.replica_epoch,
        )
    } else {
        (req.replica_id.0, -1)
    }
}

async fn handle_authorized(
    broker: &Arc<Broker>,
    req: FetchRequest,
    version: i16,
    follower_authorized: bool,
) -> (FetchResponse, Vec<FileRecords>) {
    let (replica_id, replica_epoch) = replica_of(&req, version);
    if !follower_authorized {
        return unauthorized_follower(&req);
    }
    let replica_id = (replica_id >= 0).then_some(replica_id);
    let isolation = if replica_id.is_some() {
        FetchIsolation::LogEnd
    } else if req.isolation_level == READ_COMMITTED {
        FetchIsolation::TxnCommitted
    } else {
        FetchIsolation::HighWatermark
    };
    // Kafka's `handleFetchRequest`: the request's limit capped by `fetch.max.bytes` (followers
    // too; their own cap is the `replica.fetch.response.max.bytes` they send), and `min_bytes`
    // by that. Strom has no fetch quotas, so no quota window caps it further. 0 or a negative
    // limit is not "unlimited": see `ReplicaManager::read_from_log`.
    let max_bytes = req.max_bytes.min(broker.config.limits.fetch_max_bytes);
    let params = FetchParams {
        replica_id,
        replica_epoch,
        max_wait: Duration::from_millis(req.max_wait_ms.max(0) as u64),
        min_bytes: req.min_bytes.min(max_bytes),
        max_bytes,
        isolation,
        fetch_only_leader: true,
    };
    let image = broker.image();
    let names: Vec<Option<String>> = req
        .topics
        .iter()
        .map(|t| {
            if version >= 13 {
                image.topic_by_id(&t.topic_id).map(|t| t.name.clone())
            } else {
                Some(t.topic.0.to_string())
            }
        })
        .collect();
    drop(image);
    let mut requests = Vec::new();
    for (topic, name) in req.topics.iter().zip(&names) {
        for fp in &topic.partitions {
            requests.push(FetchPartitionRequest {
                topic: name.clone(),
                partition: fp.partition,
                fetch: PartitionFetch {
                    fetch_offset: fp.fetch_offset,
                    current_leader_epoch: (version >= 9 && fp.current_leader_epoch >= 0)
                        .then_some(fp.current_leader_epoch),
                    last_fetched_epoch: (version >= 12 && fp.last_fetched_epoch >= 0)
                        .then_some(fp.last_fetched_epoch),
                    log_start_offset: fp.log_start_offset,
                    max_bytes: fp.partition_max_bytes,
                },
            });
        }
    }
    let mut results = broker
        .replica_manager
        .fetch_messages(&params, &requests)
        .await
        .into_iter();
    let mut records = Vec::new();
    let topics = req
        .topics
        .iter()
        .zip(&names)
        .map(|(topic, name)| {
            let partitions = topic
                .partitions
                .iter()
                .map(|fp| {
                    let r = results.next().expect("one result per partition");
                    let mut data = PartitionData::default()
                        .with_partition_index(fp.partition)
                        .with_error_code(r.error.map_or(0, |e| {
                            strom_storage::storage_error_code_for(e, ApiKey::Fetch, version).code()
                        }))
                        .with_high_watermark(r.high_watermark)
                        .with_last_stable_offset(r.last_stable_offset)
                        .with_log_start_offset(r.log_start_offset)
                        .with_preferred_read_replica((-1).into())
                        .with_records(None);
                    records.push(r.records);
                    if let Some(d) = r.diverging_epoch {
                        data.diverging_epoch.epoch = d.epoch;
                        data.diverging_epoch.end_offset = d.end_offset;
                    }
                    // Kafka answers null unless the read was read_committed (also on errors).
                    if version >= 4 {
                        data.aborted_transactions = r.aborted_transactions.map(|list| {
                            list.iter()
                                .map(|t| {
                                    AbortedTransaction::default()
                                        .with_producer_id(t.producer_id.into())
                                        .with_first_offset(t.first_offset)
                                })
                                .collect()
                        });
                    }
                    data
                })
                .collect();
            FetchableTopicResponse::default()
                .with_topic(TopicName(str_bytes(
                    name.as_deref().unwrap_or(topic.topic.0.as_str()),
                )))
                .with_topic_id(topic.topic_id)
                .with_partitions(partitions)
        })
        .collect();
    let resp = FetchResponse::default()
        .with_session_id(0)
        .with_responses(topics);
    (resp, records)
}

/// Every partition of a follower's fetch that may not fetch as a follower: Kafka's
/// `FetchResponse.partitionResponse(tp, TOPIC_AUTHORIZATION_FAILED)` (no offsets, no records).
fn unauthorized_follower(req: &FetchRequest) -> (FetchResponse, Vec<FileRecords>) {
    let mut records = Vec::new();
    let topics = req
        .topics
        .iter()
        .map(|topic| {
            let partitions = topic
                .partitions
                .iter()
                .map(|fp| {
                    records.push(FileRecords::default());
                    PartitionData::default()
                        .with_partition_index(fp.partition)
                        .with_error_code(ErrorCode::TopicAuthorizationFailed.code())
                        .with_high_watermark(-1)
                        .with_last_stable_offset(-1)
                        .with_log_start_offset(-1)
                        .with_preferred_read_replica((-1).into())
                        .with_records(None)
                })
                .collect();
            FetchableTopicResponse::default()
                .with_topic(topic.topic.clone())
                .with_topic_id(topic.topic_id)
                .with_partitions(partitions)
        })
        .collect();
    let resp = FetchResponse::default()
        .with_session_id(0)
        .with_responses(topics);
    (resp, records)
}

/// Frames a Fetch response whose partitions' records (left `None` in `resp`) are `records`,
/// in order, as file ranges between the encoded parts. Everything but the records is encoded
/// by the generated `kafka-protocol` code: each structure is encoded without its array of
/// children (a partition without its records) and cut where that array (the records field)
/// goes, so tagged fields and version differences stay the generator's. The cut points are
/// the sizes of the fields before the array, which the schema fixes (checked against the
/// generated encoding of whole responses in the tests, every version).
pub fn encode(
    version: i16,
    correlation_id: i32,
    mut resp: FetchResponse,
    records: Vec<FileRecords>,
) -> Result<ResponseFrame, HandleError> {
    let err = |e: &dyn std::fmt::Display| HandleError::Encode {
        api: ApiKey::Fetch,
        version,
        reason: e.to_string(),
    };
    let compact = version >= 12;
    // The encoding of an empty array, or of null records, where the cut is made.
    let marker = if compact { 1 } else { 4 };
    let mut out = FrameBuilder::default();
    out.cur.put_i32(0);
    ResponseHeader::default()
        .with_correlation_id(correlation_id)
        .encode(&mut out.cur, ApiKey::Fetch.response_header_version(version))
        .map_err(|e| err(&e))?;
    let topics = std::mem::take(&mut resp.responses);
    let top = encode_to_bytes(&resp, version).map_err(|e| err(&e))?;
    // throttle_time_ms; error_code and session_id from v7.
    let top_head = 4 + if version >= 7 { 6 } else { 0 };
    out.cur.extend_from_slice(&top[..top_head]);
    array_len(&mut out.cur, topics.len(), compact);
    let mut records = records.into_iter();
    for mut topic in topics {
        let partitions = std::mem::take(&mut topic.partitions);
        let t = encode_to_bytes(&topic, version).map_err(|e| err(&e))?;
        let name = match version {
            ..=11 => 2 + topic.topic.len(),
            12 => varint_len(topic.topic.len() as u32 + 1) + topic.topic.len(),
            _ => 16,
        };
        out.cur.extend_from_slice(&t[..name]);
        array_len(&mut out.cur, partitions.len(), compact);
        for p in partitions {
            if p.records.is_some() {
                return Err(err(&"records must be passed apart"));
            }
            let encoded = encode_to_bytes(&p, version).map_err(|e| err(&e))?;
            let head = partition_head_len(&p, version).map_err(|e| err(&e))?;
            out.cur.extend_from_slice(&encoded[..head]);
            let recs = records.next().unwrap_or_default();
            if compact {
                put_varint(&mut out.cur, recs.len() as u32 + 1);
            } else {
                out.cur.put_i32(recs.len() as i32);
            }
            out.push_records(recs);
            out.cur.extend_from_slice(&encoded[head + marker..]);
        }
        out.cur.extend_from_slice(&t[name + marker..]);
    }
    out.cur.extend_from_slice(&top[top_head + marker..]);
    out.finish().map_err(|e| err(&e))
}

fn encode_to_bytes<T: Encodable>(v: &T, version: i16) -> Result<BytesMut, String> {
    let mut b = BytesMut::new();
    v.encode(&mut b, version).map_err(|e| e.to_string())?;
    Ok(b)
}

/// The bytes of a partition's fields before its records: index, error code, high watermark,
/// last stable offset, log start offset (v5+), aborted transactions, preferred read replica
/// (v11+).
fn partition_head_len(p: &PartitionData, version: i16) -> Result<usize, String> {
    let compact = version >= 12;
    let aborted = match &p.aborted_transactions {
        None if compact => 1,
        None => 4,
        Some(list) => {
            let mut n = if compact {
                varint_len(list.len() as u32 + 1)
            } else {
                4
            };
            for a in list {
                n += a.compute_size(version).map_err(|e| e.to_string())?;
            }
            n
        }
    };
    Ok(4 + 2
        + 8
        + 8
        + if version >= 5 { 8 } else { 0 }
        + aborted
        + if version >= 11 { 4 } else { 0 })
}

fn array_len(b: &mut BytesMut, n: usize, compact: bool) {
    if compact {
        put_varint(b, n as u32 + 1);
    } else {
        b.put_i32(n as i32);
    }
}

/// The protocol's unsigned varint (compact lengths).
fn put_varint(b: &mut BytesMut, mut v: u32) {
    while v >= 0x80 {
        b.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    b.put_u8(v as u8);
}

fn varint_len(v: u32) -> usize {
    match v {
        0..=0x7f => 1,
        0x80..=0x3fff => 2,
        0x4000..=0x1f_ffff => 3,
        0x20_0000..=0xfff_ffff => 4,
        _ => 5,
    }
}

/// Encoded parts and file ranges in order; the size prefix is patched in at the end.
#[derive(Default)]
struct FrameBuilder {
    done: Vec<(BytesMut, FileRecords)>,
    cur: BytesMut,
}

impl FrameBuilder {
    fn push_records(&mut self, r: FileRecords) {
        if !r.is_empty() {
            let before = self.cur.split();
            self.done.push((before, r));
        }
    }

    fn finish(mut self) -> Result<ResponseFrame, String> {
        let total: usize = self
            .done
            .iter()
            .map(|(b, r)| b.len() + r.len())
            .sum::<usize>()
            + self.cur.len();
        let size = i32::try_from(total - 4)
            .map_err(|_| format!("a response of {total} bytes is too large to frame"))?;
        let first = match self.done.first_mut() {
            Some((b, _)) => b,
            None => &mut self.cur,
        };
        first[..4].copy_from_slice(&size.to_be_bytes());
        let mut frame = ResponseFrame::default();
        for (b, r) in self.done {
            frame.push_bytes(b.freeze());
            frame.push_records(r);
        }
        frame.push_bytes(self.cur.freeze());
        Ok(frame)
    }
}

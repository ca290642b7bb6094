//! OffsetCommit and OffsetFetch against the group coordinator.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use strom_protocol::kafka::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use strom_protocol::kafka::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
};
use strom_protocol::kafka::messages::{
    ApiKey, GroupId, OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest, TopicName,
};
use strom_protocol::kafka::protocol::StrBytes;
use strom_protocol::ErrorCode;

use super::coordinator::{is_coordinator_moved, Coordinator};
use super::{GroupMetadata, TopicPartition};
use crate::error::{Error, Result};

/// Java's `default.api.timeout.ms`: how long a synchronous commit or offset fetch keeps
/// retrying retriable errors.
pub const DEFAULT_API_TIMEOUT: Duration = Duration::from_secs(60);

fn by_topic<V: Copy>(
    items: impl IntoIterator<Item = (TopicPartition, V)>,
) -> Vec<(String, Vec<(i32, V)>)> {
    let mut out: BTreeMap<String, Vec<(i32, V)>> = BTreeMap::new();
    for (tp, v) in items {
        out.entry(tp.topic).or_default().push((tp.partition, v));
    }
    out.into_iter().collect()
}

/// The OffsetCommit request for `offsets` in the generation / member epoch of `meta`.
pub fn commit_request(
    meta: &GroupMetadata,
    offsets: &BTreeMap<TopicPartition, i64>,
    version: i16,
) -> OffsetCommitRequest {
    let mut req = OffsetCommitRequest::default();
    req.group_id = GroupId(StrBytes::from_string(meta.group_id.clone()));
    req.generation_id_or_member_epoch = meta.generation_id;
    req.member_id = StrBytes::from_string(meta.member_id.clone());
    if version >= 7 {
        req.group_instance_id = meta.group_instance_id.clone().map(StrBytes::from_string);
    }
    req.topics = by_topic(offsets.iter().map(|(tp, o)| (tp.clone(), *o)))
        .into_iter()
        .map(|(t, ps)| {
            let mut topic = OffsetCommitRequestTopic::default();
            topic.name = TopicName(StrBytes::from_string(t));
            topic.partitions = ps
                .into_iter()
                .map(|(p, o)| {
                    let mut part = OffsetCommitRequestPartition::default();
                    part.partition_index = p;
                    part.committed_offset = o;
                    part
                })
                .collect();
            topic
        })
        .collect();
    req
}

/// The first partition error of an OffsetCommit response, if any.
pub fn commit_response_error(resp: &OffsetCommitResponse) -> Option<Error> {
    resp.topics.iter().find_map(|t| {
        t.partitions.iter().find_map(|p| {
            Error::kafka(
                p.error_code,
                ErrorCode::try_from_code(p.error_code)
                    .map(|c| format!("committing {}-{}: {c}", t.name.0, p.partition_index)),
            )
        })
    })
}

/// True for errors after which the same commit or fetch may succeed: the coordinator moved or
/// is loading, the connection broke, or offsets are still being committed transactionally.
fn retry_same(e: &Error, coord: &Coordinator) -> bool {
    match e.code() {
        Some(code) if is_coordinator_moved(code) => {
            coord.mark_unknown(&e.to_string());
            true
        }
        Some(ErrorCode::CoordinatorLoadInProgress | ErrorCode::UnstableOffsetCommit) => true,
        Some(_) => false,
        None => e.is_retriable(),
    }
}

/// One OffsetCommit, retried while the coordinator moves or loads, until `deadline`. Other
/// errors (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS,
/// STALE_MEMBER_EPOCH...) are returned for the membership to interpret.
pub async fn commit(
    coord: &Coordinator,
    meta: &GroupMetadata,
    offsets: &BTreeMap<TopicPartition, i64>,
    deadline: Instant,
) -> Result<()> {
    if offsets.is_empty() {
        return Ok(());
    }
    let mut attempt = 0;
    loop {
        let r = coord
            .send(ApiKey::OffsetCommit, |v| {
                Ok(commit_request(meta, offsets, v))
            })
            .await
            .and_then(|resp| commit_response_error(&resp).map_or(Ok(()), Err));
        match r {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() < deadline && retry_same(&e, coord) => {
                tokio::time::sleep(coord.client().config().backoff(attempt)).await;
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

/// OffsetFetch of `partitions` for the group (`require_stable`, as Java's consumer asks), retried
/// like [`commit`]. `None` for a partition without a committed offset.
pub async fn fetch_committed(
    coord: &Coordinator,
    partitions: &[TopicPartition],
    deadline: Instant,
) -> Result<BTreeMap<TopicPartition, Option<i64>>> {
    let mut attempt = 0;
    loop {
        match fetch_once(coord, partitions).await {
            Ok(m) => return Ok(m),
            Err(e) if Instant::now() < deadline && retry_same(&e, coord) => {
                tokio::time::sleep(coord.client().config().backoff(attempt)).await;
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

async fn fetch_once(
    coord: &Coordinator,
    partitions: &[TopicPartition],
) -> Result<BTreeMap<TopicPartition, Option<i64>>> {
    let group = coord.group_id().to_string();
    let topics = by_topic(partitions.iter().map(|tp| (tp.clone(), ())));
    let mut used_version = 0;
    let resp = coord
        .send(ApiKey::OffsetFetch, |v| {
            used_version = v;
            let mut req = OffsetFetchRequest::default();
            if v >= 7 {
                req.require_stable = true;
            }
            if v >= 8 {
                let mut g = OffsetFetchRequestGroup::default();
                g.group_id = GroupId(StrBytes::from_string(group.clone()));
                g.topics = Some(
                    topics
                        .iter()
                        .map(|(t, ps)| {
                            let mut rt = OffsetFetchRequestTopics::default();
                            rt.name = TopicName(StrBytes::from_string(t.clone()));
                            rt.partition_indexes = ps.iter().map(|(p, _)| *p).collect();
                            rt
                        })
                        .collect(),
                );
                req.groups = vec![g];
            } else {
                req.group_id = GroupId(StrBytes::from_string(group.clone()));
                req.topics = Some(
                    topics
                        .iter()
                        .map(|(t, ps)| {
                            let mut rt = OffsetFetchRequestTopic::default();
                            rt.name = TopicName(StrBytes::from_string(t.clone()));
                            rt.partition_indexes = ps.iter().map(|(p, _)| *p).collect();
                            rt
                        })
                        .collect(),
                );
            }
            Ok(req)
        })
        .await?;
    let mut out = BTreeMap::new();
    // One (topic, partition, offset, error) list whatever the version.
    let mut rows: Vec<(String, i32, i64, i16)> = Vec::new();
    if used_version >= 8 {
        let g = resp
            .groups
            .first()
            .ok_or_else(|| Error::Protocol("OffsetFetch response without the group".into()))?;
        if let Some(e) = Error::kafka(g.error_code, None) {
            return Err(e);
        }
        for t in &g.topics {
            for p in &t.partitions {
                rows.push((
                    t.name.0.to_string(),
                    p.partition_index,
                    p.committed_offset,
                    p.error_code,
                ));
            }
        }
    } else {
        if let Some(e) = Error::kafka(resp.error_code, None) {
            return Err(e);
        }
        for t in &resp.topics {
            for p in &t.partitions {
                rows.push((
                    t.name.0.to_string(),
                    p.partition_index,
                    p.committed_offset,
                    p.error_code,
                ));
            }
        }
    }
    for (topic, partition, offset, code) in rows {
        if let Some(e) = Error::kafka(code, None) {
            return Err(e);
        }
        out.insert(
            TopicPartition::new(topic, partition),
            (offset >= 0).then_some(offset),
        );
    }
    Ok(out)
}

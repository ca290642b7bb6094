//! The offset requests as operations on one shard (Kafka's `OffsetMetadataManager`
//! `commitOffset` / `fetchOffsets` / `fetchAllOffsets` / `deleteOffsets` /
//! `deleteAllOffsets` and the shard's `deleteGroups`). Each returns the records to append
//! and per-partition (or per-group) results; an `Err` fails the whole request with that code.
//! The service has already refused topics and partitions that do not exist.

use strom_protocol::ErrorCode;
use uuid::Uuid;

use crate::offsets::OffsetAndMetadata;
use crate::records::{CoordinatorRecord, OffsetCommitKey, OffsetCommitValue};
use crate::shard::{GroupCoordinatorShard, GroupType, OffsetCommitAuth};

use super::expiry::group_metadata_tombstone;

/// The committed offset of a partition nobody committed (Kafka's `INVALID_OFFSET`).
pub const INVALID_OFFSET: i64 = -1;

/// OffsetCommit's `retention_time_ms` meaning "the broker's `offsets.retention.ms`".
pub const DEFAULT_RETENTION_TIME: i64 = -1;

/// The `OffsetCommitValue` version Kafka 4.4 writes: 1 (the only one with an expire
/// timestamp) for a commit with an explicit retention, else 4.
pub fn offset_commit_value_version(has_expire_timestamp: bool) -> i16 {
    if has_expire_timestamp {
        1
    } else {
        4
    }
}

/// The record of one committed offset.
pub fn offset_commit_record(
    group: &str,
    topic: &str,
    partition: i32,
    o: &OffsetAndMetadata,
) -> CoordinatorRecord {
    CoordinatorRecord::OffsetCommit(
        OffsetCommitKey {
            group: group.to_string(),
            topic: topic.to_string(),
            partition,
            ..Default::default()
        },
        Some((
            offset_commit_value_version(o.expire_timestamp_ms.is_some()),
            OffsetCommitValue {
                offset: o.committed_offset,
                leader_epoch: o.leader_epoch.unwrap_or(-1),
                metadata: o.metadata.clone(),
                commit_timestamp: o.commit_timestamp_ms,
                expire_timestamp: o.expire_timestamp_ms.unwrap_or(-1),
                topic_id: o.topic_id,
                ..Default::default()
            },
        )),
    )
}

/// The tombstone that deletes one committed offset.
pub fn offset_tombstone(group: &str, topic: &str, partition: i32) -> CoordinatorRecord {
    CoordinatorRecord::OffsetCommit(
        OffsetCommitKey {
            group: group.to_string(),
            topic: topic.to_string(),
            partition,
            ..Default::default()
        },
        None,
    )
}

/// One partition of an OffsetCommit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitPartition {
    pub partition: i32,
    pub offset: i64,
    pub leader_epoch: i32,
    /// `None`: the client sent null (stored as "").
    pub metadata: Option<String>,
}

/// One topic of an OffsetCommit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitTopic {
    pub name: String,
    pub topic_id: Uuid,
    pub partitions: Vec<CommitPartition>,
}

/// An OffsetCommit as the shard sees it (only partitions that exist).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitRequest {
    pub group_id: String,
    pub member_id: String,
    pub generation_id_or_member_epoch: i32,
    pub group_instance_id: Option<String>,
    pub retention_time_ms: i64,
    pub api_version: i16,
    pub topics: Vec<CommitTopic>,
}

/// Per topic: each partition and its result.
/// (Error codes: 0 is none.)
pub type PartitionResults = Vec<(String, Vec<(i32, i16)>)>;

/// Kafka's `String.length()` (UTF-16 code units), which `offset.metadata.max.bytes` is
/// compared with despite its name.
fn java_length(s: &str) -> usize {
    s.encode_utf16().count()
}

/// OffsetCommit: validates the member with its group's manager, then one record per
/// partition whose metadata fits.
pub fn commit_offsets(
    shard: &mut GroupCoordinatorShard,
    req: &CommitRequest,
) -> Result<(Vec<CoordinatorRecord>, PartitionResults), ErrorCode> {
    shard.validate_offset_commit(&OffsetCommitAuth {
        group_id: &req.group_id,
        member_id: &req.member_id,
        generation_id_or_member_epoch: req.generation_id_or_member_epoch,
        group_instance_id: req.group_instance_id.as_deref(),
        api_version: req.api_version,
        transactional: false,
    })?;
    Ok(offset_commit_records(shard, req))
}

/// TxnOffsetCommit (Kafka's `commitTransactionalOffset`): the member checks of KIP-447 —
/// a group that does not exist is a simple group for generation -1 and ILLEGAL_GENERATION
/// otherwise; a classic group checks member id, group instance id (FENCED_INSTANCE_ID) and
/// generation, a consumer group the member and its epoch, a stale epoch answering
/// ILLEGAL_GENERATION (versions before 6 have no STALE_MEMBER_EPOCH). The records are the
/// OffsetCommit records, which the caller appends in the producer's transactional batch, so
/// they stay pending until its marker. `req.retention_time_ms` is ignored (no expire
/// timestamp, as Kafka writes them).
pub fn commit_transactional_offsets(
    shard: &mut GroupCoordinatorShard,
    req: &CommitRequest,
) -> Result<(Vec<CoordinatorRecord>, PartitionResults), ErrorCode> {
    shard
        .validate_offset_commit(&OffsetCommitAuth {
            group_id: &req.group_id,
            member_id: &req.member_id,
            generation_id_or_member_epoch: req.generation_id_or_member_epoch,
            group_instance_id: req.group_instance_id.as_deref(),
            api_version: req.api_version,
            transactional: true,
        })
        .map_err(|e| match e {
            ErrorCode::StaleMemberEpoch => ErrorCode::IllegalGeneration,
            other => other,
        })?;
    let req = CommitRequest {
        retention_time_ms: DEFAULT_RETENTION_TIME,
        ..req.clone()
    };
    Ok(offset_commit_records(shard, &req))
}

/// One record per partition whose metadata fits (the others answer
/// OFFSET_METADATA_TOO_LARGE), for a validated commit.
fn offset_commit_records(
    shard: &mut GroupCoordinatorShard,
    req: &CommitRequest,
) -> (Vec<CoordinatorRecord>, PartitionResults) {
    let now = shard.env.now_ms();
    let expire = (req.retention_time_ms != DEFAULT_RETENTION_TIME)
        .then(|| now.wrapping_add(req.retention_time_ms));
    let max = shard.env.config.offset_metadata_max_bytes;
    let mut records = Vec::new();
    let mut results = Vec::with_capacity(req.topics.len());
    for t in &req.topics {
        let mut parts = Vec::with_capacity(t.partitions.len());
        for p in &t.partitions {
            if p.metadata.as_deref().is_some_and(|m| java_length(m) > max) {
                parts.push((p.partition, ErrorCode::OffsetMetadataTooLarge.code()));
                continue;
            }
            let o = OffsetAndMetadata {
                record_offset: -1,
                committed_offset: p.offset,
                leader_epoch: (p.leader_epoch != -1).then_some(p.leader_epoch),
                metadata: p.metadata.clone().unwrap_or_default(),
                commit_timestamp_ms: now,
                expire_timestamp_ms: expire,
                topic_id: t.topic_id,
            };
            tracing::debug!(
                group = %req.group_id,
                topic = %t.name,
                partition = p.partition,
                offset = p.offset,
                member = %req.member_id,
                "committing offset"
            );
            records.push(offset_commit_record(
                &req.group_id,
                &t.name,
                p.partition,
                &o,
            ));
            parts.push((p.partition, 0));
        }
        results.push((t.name.clone(), parts));
    }
    // Kafka makes the simple group exist as it accepts the commit, even if no offset of it
    // is written (every metadata too large): the group is there for DeleteGroups and expiry.
    // With records, their replay makes it exist.
    if records.is_empty()
        && shard.group_type(&req.group_id).is_none()
        && !shard.offsets.simple_groups.contains_key(&req.group_id)
    {
        shard
            .offsets
            .unwritten_simple_groups
            .insert(req.group_id.clone());
    }
    (records, results)
}

/// One group of an OffsetFetch (`topics: None`: every partition the group has).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchGroup {
    pub group_id: String,
    pub member_id: Option<String>,
    pub member_epoch: i32,
    pub topics: Option<Vec<FetchTopic>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchTopic {
    pub name: String,
    pub topic_id: Uuid,
    pub partitions: Vec<i32>,
}

/// One partition of an OffsetFetch answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedPartition {
    pub partition: i32,
    pub committed_offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
    /// 0: none.
    pub error: i16,
}

impl FetchedPartition {
    fn none(partition: i32, error: i16) -> Self {
        Self {
            partition,
            committed_offset: INVALID_OFFSET,
            leader_epoch: -1,
            metadata: String::new(),
            error,
        }
    }

    fn of(partition: i32, o: &OffsetAndMetadata) -> Self {
        Self {
            partition,
            committed_offset: o.committed_offset,
            leader_epoch: o.leader_epoch.unwrap_or(-1),
            metadata: o.metadata.clone(),
            error: 0,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedTopic {
    pub name: String,
    pub topic_id: Uuid,
    pub partitions: Vec<FetchedPartition>,
}

/// Both ids set and different: the offset belongs to an older topic of that name.
fn mismatched_topic_id(a: Uuid, b: Uuid) -> bool {
    !a.is_nil() && !b.is_nil() && a != b
}

/// OffsetFetch of one group as of `committed` (`i64::MAX` with `require_stable`: the latest
/// state, answered once it is committed). Unknown partitions (and every partition of a group
/// that does not exist) answer offset -1.
pub fn fetch_offsets(
    shard: &GroupCoordinatorShard,
    req: &FetchGroup,
    committed: i64,
) -> Result<Vec<FetchedTopic>, ErrorCode> {
    let require_stable = committed == i64::MAX;
    let group = req.group_id.as_str();
    let group_missing = match shard.validate_offset_fetch(
        group,
        req.member_id.as_deref(),
        req.member_epoch,
        committed,
    ) {
        Ok(()) => false,
        Err(ErrorCode::GroupIdNotFound) => true,
        Err(e) => return Err(e),
    };
    let store = &shard.offsets.offsets;
    let pending = &shard.offsets.pending;
    let unstable = |topic: &str, partition: i32| {
        require_stable && pending.has_pending(group, topic, partition)
    };
    let Some(topics) = &req.topics else {
        if group_missing {
            return Ok(Vec::new());
        }
        let mut out: Vec<FetchedTopic> = Vec::new();
        for ((topic, partition), o) in store.group_committed(group, committed) {
            let p = if unstable(&topic, partition) {
                FetchedPartition::none(partition, ErrorCode::UnstableOffsetCommit.code())
            } else {
                FetchedPartition::of(partition, &o)
            };
            match out.last_mut() {
                Some(t) if t.name == topic => t.partitions.push(p),
                _ => out.push(FetchedTopic {
                    name: topic,
                    topic_id: o.topic_id,
                    partitions: vec![p],
                }),
            }
        }
        return Ok(out);
    };
    Ok(topics
        .iter()
        .map(|t| FetchedTopic {
            name: t.name.clone(),
            topic_id: t.topic_id,
            partitions: t
                .partitions
                .iter()
                .map(|&p| {
                    if group_missing {
                        return FetchedPartition::none(p, 0);
                    }
                    if unstable(&t.name, p) {
                        return FetchedPartition::none(p, ErrorCode::UnstableOffsetCommit.code());
                    }
                    match store.get_committed(group, &t.name, p, committed) {
                        Some(o) if !mismatched_topic_id(o.topic_id, t.topic_id) => {
                            FetchedPartition::of(p, o)
                        }
                        _ => FetchedPartition::none(p, 0),
                    }
                })
                .collect(),
        })
        .collect())
}

/// Whether a group exists for the offset APIs: a group manager holds it, or it has offsets
/// (a simple group made by a commit, which Kafka keeps as an empty classic group).
fn group_exists(shard: &GroupCoordinatorShard, group: &str) -> bool {
    shard.group_type(group).is_some() || simple_group_only_here(shard, group)
}

/// A simple group that no group manager holds (see `OffsetMetadataManager::simple_groups`).
pub fn simple_group_only_here(shard: &GroupCoordinatorShard, group: &str) -> bool {
    shard
        .offsets
        .is_simple_group_only_here(group, shard.group_type(group).is_some())
}

/// Kafka's `Group.validateOffsetDelete`: a dead group is not found; a classic group with
/// members that does not use the consumer protocol type may not lose offsets; consumer
/// (KIP-848) groups always may (their subscribed topics are refused per topic).
fn validate_offset_delete(shard: &GroupCoordinatorShard, group: &str) -> Result<(), ErrorCode> {
    if !group_exists(shard, group) {
        return Err(ErrorCode::GroupIdNotFound);
    }
    if shard.group_type(group) != Some(GroupType::Classic) {
        return Ok(());
    }
    let listed = shard
        .list_groups(&[], &[GroupType::Classic.name().to_string()], i64::MAX)
        .into_iter()
        .find(|g| g.group_id == group);
    let Some(g) = listed else {
        return Ok(());
    };
    let state = g.group_state.to_ascii_lowercase();
    match state.as_str() {
        "dead" => Err(ErrorCode::GroupIdNotFound),
        "stable" | "preparingrebalance" | "completingrebalance"
            if g.protocol_type != "consumer" =>
        {
            Err(ErrorCode::NonEmptyGroup)
        }
        _ => Ok(()),
    }
}

/// OffsetDelete: a tombstone for each partition that has an offset (or a pending
/// transactional one), GROUP_SUBSCRIBED_TO_TOPIC for topics the group consumes.
pub fn delete_offsets(
    shard: &GroupCoordinatorShard,
    group: &str,
    topics: &[(String, Vec<i32>)],
) -> Result<(Vec<CoordinatorRecord>, PartitionResults), ErrorCode> {
    validate_offset_delete(shard, group)?;
    let mut records = Vec::new();
    let mut results = Vec::with_capacity(topics.len());
    for (topic, partitions) in topics {
        if shard.is_subscribed_to_topic(group, topic) {
            results.push((
                topic.clone(),
                partitions
                    .iter()
                    .map(|&p| (p, ErrorCode::GroupSubscribedToTopic.code()))
                    .collect(),
            ));
            continue;
        }
        let mut parts = Vec::with_capacity(partitions.len());
        for &p in partitions {
            parts.push((p, 0));
            if shard.offsets.offset(group, topic, p).is_some()
                || shard.offsets.pending.has_pending(group, topic, p)
            {
                records.push(offset_tombstone(group, topic, p));
            }
        }
        results.push((topic.clone(), parts));
    }
    Ok((records, results))
}

/// Tombstones for every offset of `group`, and for pending transactional offsets of
/// partitions without a committed one (Kafka's `deleteAllOffsets`).
pub fn delete_all_offsets(shard: &GroupCoordinatorShard, group: &str) -> Vec<CoordinatorRecord> {
    let latest = shard.offsets.offsets.group_latest(group);
    let mut records: Vec<CoordinatorRecord> = latest
        .iter()
        .map(|((t, p), _)| offset_tombstone(group, t, *p))
        .collect();
    for (t, p) in shard.offsets.pending.pending_partitions(group) {
        if shard.offsets.offset(group, &t, p).is_none() {
            records.push(offset_tombstone(group, &t, p));
        }
    }
    records
}

/// DeleteGroups of groups on this shard: each group is validated and deleted on its own
/// (its offsets' tombstones, then the group's own records); the answer per group.
pub fn delete_groups(
    shard: &mut GroupCoordinatorShard,
    groups: &[String],
) -> (Vec<CoordinatorRecord>, Vec<(String, i16)>) {
    let mut records = Vec::new();
    let mut results = Vec::with_capacity(groups.len());
    for group in groups {
        let group_records = match shard.group_deletion_records(group) {
            Ok(r) => r,
            // A simple group known only by its offsets: deleted like the empty classic group
            // Kafka keeps for it.
            Err(ErrorCode::GroupIdNotFound) if simple_group_only_here(shard, group) => {
                vec![group_metadata_tombstone(group)]
            }
            Err(e) => {
                results.push((group.clone(), e.code()));
                continue;
            }
        };
        let offsets = delete_all_offsets(shard, group);
        tracing::info!(group = %group, offsets = offsets.len(), "deleting group");
        records.extend(offsets);
        records.extend(group_records);
        results.push((group.clone(), 0));
    }
    (records, results)
}

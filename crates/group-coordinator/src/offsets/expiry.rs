//! Offset expiry (Kafka's `OffsetExpirationCondition` and `cleanupGroupMetadata`).
//!
//! Every `offsets.retention.check.interval.ms` the shard looks at each of its groups: an offset
//! of a topic no member is subscribed to expires once `offsets.retention.ms` has passed since
//! its base timestamp — when the group became empty for an empty classic group, its commit
//! timestamp otherwise — or, for offsets committed with an explicit retention (OffsetCommit
//! v2-v4), at its own expire timestamp. Expired offsets get tombstones; a group whose offsets
//! have all gone is then deleted if it can be (`shard.maybe_delete_empty_group`).

use strom_coordinator_common::runtime::{CoordinatorError, WriteContext, WriteResult};
use strom_coordinator_common::timer::TimerResult;

use crate::offsets::OffsetAndMetadata;
use crate::records::{CoordinatorRecord, GroupMetadataKey};
use crate::shard::{GroupCoordinatorShard, OffsetExpirationView};

use super::ops::offset_tombstone;

/// From what an offset's age is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpirationBase {
    /// The offset's own commit timestamp.
    CommitTimestamp,
    /// A timestamp of the group (when it became empty).
    GroupTimestamp(i64),
}

/// Whether `offset` has expired at `now_ms` (Kafka's `OffsetExpirationConditionImpl`). Java's
/// long arithmetic wraps, and so does this.
pub fn is_offset_expired(
    offset: &OffsetAndMetadata,
    base: ExpirationBase,
    now_ms: i64,
    retention_ms: i64,
) -> bool {
    if let Some(expire) = offset.expire_timestamp_ms {
        // An explicit retention of an old client: its own deadline, nothing else.
        return now_ms >= expire;
    }
    let base_ms = match base {
        ExpirationBase::CommitTimestamp => offset.commit_timestamp_ms,
        ExpirationBase::GroupTimestamp(t) => t,
    };
    now_ms.wrapping_sub(base_ms) >= retention_ms
}

/// How a group's offsets expire, from what the group managers say of it (`None`: not at
/// all). Kafka's `Group.offsetExpirationCondition`:
/// - no group known (a simple group, which only commits offsets): by commit timestamp;
/// - an empty group (`empty_since_ms`): counted from when it became empty;
/// - a group that is not empty but knows its members' subscriptions (`subscribed_topics`,
///   a Stable classic group of the consumer protocol type, or a consumer-protocol group): by
///   commit timestamp, the subscribed topics excepted;
/// - any other group (a rebalancing group, or one whose subscriptions are unknown): not now.
pub fn expiration_base(view: Option<&OffsetExpirationView>) -> Option<ExpirationBase> {
    match view {
        None => Some(ExpirationBase::CommitTimestamp),
        Some(v) => match (v.empty_since_ms, &v.subscribed_topics) {
            (Some(t), _) => Some(ExpirationBase::GroupTimestamp(t)),
            (None, Some(_)) => Some(ExpirationBase::CommitTimestamp),
            (None, None) => None,
        },
    }
}

/// Appends tombstones for the expired offsets of `group`; returns whether the group has no
/// offsets left (nor open transactions), so it may be deleted (Kafka's
/// `cleanupExpiredOffsets`).
pub fn cleanup_expired_offsets(
    shard: &GroupCoordinatorShard,
    group: &str,
    now_ms: i64,
    records: &mut Vec<CoordinatorRecord>,
) -> bool {
    let offsets = shard.offsets.offsets.group_latest(group);
    let pending = &shard.offsets.pending;
    if offsets.is_empty() {
        return !pending.has_open_transactions(group);
    }
    let view = shard.offset_expiration_view(group);
    let Some(base) = expiration_base(view.as_ref()) else {
        return false;
    };
    let retention = shard.env.config.offsets_retention_ms;
    let subscribed = |topic: &str| {
        shard.is_subscribed_to_topic(group, topic)
            || view
                .as_ref()
                .and_then(|v| v.subscribed_topics.as_ref())
                .is_some_and(|s| s.contains(topic))
    };
    let mut all_expired = true;
    let mut topic_subscribed: Option<(String, bool)> = None;
    for ((topic, partition), offset) in &offsets {
        // Offsets come sorted by topic: ask about each topic once.
        let is_subscribed = match &topic_subscribed {
            Some((t, s)) if t == topic => *s,
            _ => {
                let s = subscribed(topic);
                topic_subscribed = Some((topic.clone(), s));
                s
            }
        };
        if is_subscribed {
            all_expired = false;
            continue;
        }
        // An offset with a pending transactional one waits for the transaction.
        if is_offset_expired(offset, base, now_ms, retention)
            && !pending.has_pending(group, topic, *partition)
        {
            tracing::debug!(group, topic = %topic, partition, "offset expired");
            records.push(offset_tombstone(group, topic, *partition));
        } else {
            all_expired = false;
        }
    }
    all_expired && !pending.has_open_transactions(group)
}

/// One expiry pass over every group of the shard (Kafka's `cleanupGroupMetadata`).
pub fn cleanup_group_metadata(shard: &mut GroupCoordinatorShard) -> Vec<CoordinatorRecord> {
    let now = shard.env.now_ms();
    let mut groups: Vec<String> = shard.offsets.offsets.group_ids();
    groups.extend(shard.offsets.simple_groups.iter().map(|(g, _)| g.clone()));
    groups.extend(shard.offsets.unwritten_simple_groups.iter().cloned());
    groups.extend(
        shard
            .list_groups(&[], &[], i64::MAX)
            .into_iter()
            .map(|g| g.group_id),
    );
    groups.sort();
    groups.dedup();
    let mut records = Vec::new();
    for group in groups {
        let simple_only_here = super::ops::simple_group_only_here(shard, &group);
        if !cleanup_expired_offsets(shard, &group, now, &mut records) {
            continue;
        }
        if shard.group_type(&group).is_some() {
            records.extend(shard.maybe_delete_empty_group(&group));
        } else if simple_only_here {
            // A simple group known only by its offsets (no group manager holds it): it goes
            // with its last offset, as Kafka deletes the empty classic group it keeps for it,
            // with the same GroupMetadata tombstone.
            records.push(group_metadata_tombstone(&group));
        }
    }
    if !records.is_empty() {
        tracing::info!(
            tp = ?shard.env.tp,
            tombstones = records.len(),
            "expired offsets and groups"
        );
    }
    records
}

/// The tombstone of a classic group's metadata record.
pub fn group_metadata_tombstone(group: &str) -> CoordinatorRecord {
    CoordinatorRecord::GroupMetadata(
        GroupMetadataKey {
            group: group.to_string(),
            ..Default::default()
        },
        None,
    )
}

/// The expiry timer's operation: set the next run first (so a failed append does not stop
/// expiry), then expire.
pub fn expire_offsets_timer(
    shard: &mut GroupCoordinatorShard,
    _ctx: &WriteContext,
) -> Result<TimerResult<CoordinatorRecord>, CoordinatorError> {
    super::schedule_expiry(&shard.env);
    let records = cleanup_group_metadata(shard);
    Ok(WriteResult {
        records,
        response: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    fn om(commit_ts: i64, expire: Option<i64>) -> OffsetAndMetadata {
        OffsetAndMetadata {
            record_offset: 0,
            committed_offset: 1,
            leader_epoch: None,
            metadata: String::new(),
            commit_timestamp_ms: commit_ts,
            expire_timestamp_ms: expire,
            topic_id: Uuid::nil(),
        }
    }

    #[test]
    fn expiry_counts_from_the_commit_the_group_or_the_explicit_deadline() {
        let day = 86_400_000;
        let o = om(1000, None);
        let c = ExpirationBase::CommitTimestamp;
        assert!(!is_offset_expired(&o, c, 1000 + 7 * day - 1, 7 * day));
        assert!(is_offset_expired(&o, c, 1000 + 7 * day, 7 * day));
        // Empty since later than the commit: counted from then.
        let g = ExpirationBase::GroupTimestamp(1000 + day);
        assert!(!is_offset_expired(&o, g, 1000 + 7 * day, 7 * day));
        assert!(is_offset_expired(&o, g, 1000 + 8 * day, 7 * day));
        // An explicit expire timestamp overrides both.
        let e = om(1000, Some(5000));
        assert!(is_offset_expired(&e, g, 5000, 7 * day));
        assert!(!is_offset_expired(&e, c, 4999, 0));
    }

    #[test]
    fn the_view_decides_the_base() {
        use std::collections::BTreeSet;
        assert_eq!(expiration_base(None), Some(ExpirationBase::CommitTimestamp));
        let empty = OffsetExpirationView {
            empty_since_ms: Some(42),
            subscribed_topics: None,
        };
        assert_eq!(
            expiration_base(Some(&empty)),
            Some(ExpirationBase::GroupTimestamp(42))
        );
        let stable = OffsetExpirationView {
            empty_since_ms: None,
            subscribed_topics: Some(BTreeSet::from(["t".to_string()])),
        };
        assert_eq!(
            expiration_base(Some(&stable)),
            Some(ExpirationBase::CommitTimestamp)
        );
        assert_eq!(
            expiration_base(Some(&OffsetExpirationView::default())),
            None
        );
    }
}

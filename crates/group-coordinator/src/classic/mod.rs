//! Classic groups (Kafka's `ClassicGroup` and the classic half of `GroupMetadataManager`):
//! JoinGroup / SyncGroup / Heartbeat / LeaveGroup, static membership, simple groups that only
//! commit offsets, their `GroupMetadata` records.
//!
//! As in Kafka, a classic group is not a timeline structure: the state machine changes it in
//! memory as requests and timers arrive, and the `GroupMetadata` records it writes are not
//! replayed into it (Kafka appends them with `replayRecords = false`; here the manager
//! remembers which records it wrote and skips their replay). Only the map of groups is
//! revertible: a group created by a write whose append fails disappears again, a group a
//! tombstone removed comes back. Loading replays every record into the map (a record rebuilds
//! its group as Empty or Stable), and `on_loaded` arms the session timers of the members.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use strom_coordinator_common::runtime::{AfterCommit, WriteResult};
use strom_coordinator_common::timeline::Timeline;
use strom_protocol::ErrorCode;

use crate::records::{CoordinatorRecord, GroupMetadataKey};
use crate::shard::{GroupType, ListedGroup, OffsetCommitAuth, OffsetExpirationView, ShardEnv};

pub mod group;
mod join;
pub mod member;
pub(crate) mod responses;
mod sync;

pub use group::{ClassicGroup, GroupState};
pub use join::JoinParams;
pub use member::{ClassicGroupMember, Protocol};
pub use sync::SyncParams;

// What the online migration of a group (consumer/migration.rs) does to a classic group.
pub(crate) use join::{
    prepare_rebalance as prepare_group_rebalance,
    reschedule_heartbeat as reschedule_member_heartbeat,
};

/// How long a new member's JoinGroup may wait before it is dropped (Kafka's
/// `classicGroupNewMemberJoinTimeoutMs`, 5 minutes).
pub const NEW_MEMBER_JOIN_TIMEOUT_MS: i64 = 5 * 60 * 1000;

/// What a step of the state machine asks of the runtime: records to append and what to do once
/// they are committed or failed (Kafka's `CoordinatorResult` records and append future).
#[derive(Default)]
pub struct Outcome {
    pub records: Vec<CoordinatorRecord>,
    pub after: Option<AfterCommit>,
}

impl Outcome {
    pub fn none() -> Self {
        Self::default()
    }
}

/// Kafka's timer keys for classic groups.
pub(crate) fn heartbeat_key(group_id: &str, member_id: &str) -> String {
    format!("heartbeat-{group_id}-{member_id}")
}
pub(crate) fn join_key(group_id: &str) -> String {
    format!("join-{group_id}")
}
pub(crate) fn sync_key(group_id: &str) -> String {
    format!("sync-{group_id}")
}

pub(crate) fn group_record(
    group_id: &str,
    value: crate::records::GroupMetadataValue,
) -> CoordinatorRecord {
    CoordinatorRecord::GroupMetadata(
        GroupMetadataKey {
            group: group_id.to_string(),
            ..Default::default()
        },
        Some((group::GROUP_METADATA_VALUE_VERSION, value)),
    )
}

#[derive(Default)]
pub struct ClassicGroups {
    groups: HashMap<String, ClassicGroup>,
    /// (offset of the change, group id, the group before it) — the map's undo log.
    undo: VecDeque<(i64, String, Option<ClassicGroup>)>,
    /// Group ids of the `GroupMetadata` records this manager produced, in order: their replay
    /// is skipped (the in-memory group already is what they say).
    own_records: VecDeque<String>,
}

impl ClassicGroups {
    pub fn contains(&self, group_id: &str) -> bool {
        self.groups.contains_key(group_id)
    }

    pub fn group(&self, group_id: &str) -> Option<&ClassicGroup> {
        self.groups.get(group_id)
    }

    pub(crate) fn group_mut(&mut self, group_id: &str) -> Option<&mut ClassicGroup> {
        self.groups.get_mut(group_id)
    }

    /// The group as of `committed` (the map's state then; the group object itself is the live
    /// one, as Kafka's classic groups are not timeline structures).
    pub fn committed_group(&self, group_id: &str, committed: i64) -> Option<&ClassicGroup> {
        for (at, id, before) in &self.undo {
            if *at >= committed && id == group_id {
                return before.as_ref();
            }
        }
        self.groups.get(group_id)
    }

    pub(crate) fn insert_group(&mut self, at: i64, group: ClassicGroup) {
        let id = group.group_id.clone();
        let before = self.groups.insert(id.clone(), group);
        self.undo.push_back((at, id, before));
    }

    fn remove_group(&mut self, at: i64, group_id: &str) {
        if let Some(before) = self.groups.remove(group_id) {
            // Kept for a revert. If the removal commits, what its members wait for is dropped
            // with it (answered NOT_COORDINATOR, which sends clients to rejoin).
            self.undo
                .push_back((at, group_id.to_string(), Some(before)));
        }
    }

    /// Marks the outcome's records as this manager's own (not to be replayed).
    pub(crate) fn finish(&mut self, out: Outcome) -> Outcome {
        for r in &out.records {
            if let CoordinatorRecord::GroupMetadata(k, Some(_)) = r {
                self.own_records.push_back(k.group.clone());
            }
        }
        out
    }

    /// Kafka's `ClassicGroup.validateOffsetCommit`, and the simple-group rule for a group that
    /// does not exist.
    pub fn validate_offset_commit(
        &mut self,
        _env: &ShardEnv,
        auth: &OffsetCommitAuth<'_>,
    ) -> Result<(), ErrorCode> {
        let Some(g) = self.groups.get(auth.group_id) else {
            if auth.generation_id_or_member_epoch < 0 {
                // A simple group: it exists once the commit's record is replayed.
                return Ok(());
            }
            return Err(if !auth.transactional && auth.api_version >= 9 {
                ErrorCode::GroupIdNotFound
            } else {
                ErrorCode::IllegalGeneration
            });
        };
        g.validate_offset_commit(
            auth.member_id,
            auth.group_instance_id,
            auth.generation_id_or_member_epoch,
            auth.transactional,
        )
    }

    pub fn is_subscribed_to_topic(&self, group_id: &str, topic: &str) -> bool {
        self.groups
            .get(group_id)
            .is_some_and(|g| g.is_subscribed_to_topic(topic))
    }

    /// Kafka's `ClassicGroup.offsetExpirationCondition` as the offsets manager's view:
    /// - a simple group (no protocol type): offsets expire by their commit time
    ///   (`subscribed_topics: Some(empty)`);
    /// - an empty group: from when it became empty, or by commit time for a record without that
    ///   timestamp;
    /// - a stable `consumer` group whose subscriptions are known: offsets of topics nobody
    ///   subscribes to expire by commit time;
    /// - otherwise nothing expires (`empty_since_ms: None, subscribed_topics: None`).
    pub fn offset_expiration_view(&self, group_id: &str) -> Option<OffsetExpirationView> {
        let g = self.groups.get(group_id)?;
        let by_commit_time = OffsetExpirationView {
            empty_since_ms: None,
            subscribed_topics: Some(Default::default()),
        };
        if g.protocol_type.is_none() {
            return Some(by_commit_time);
        }
        if g.is_empty() {
            return Some(match g.current_state_timestamp {
                Some(ts) => OffsetExpirationView {
                    empty_since_ms: Some(ts),
                    subscribed_topics: None,
                },
                None => by_commit_time,
            });
        }
        if g.uses_consumer_protocol() && g.is_in(GroupState::Stable) {
            if let Some(topics) = &g.subscribed_topics {
                return Some(OffsetExpirationView {
                    empty_since_ms: None,
                    subscribed_topics: Some(topics.clone()),
                });
            }
        }
        Some(OffsetExpirationView::default())
    }

    /// DeleteGroups: only an empty (or dead) group goes; its tombstone removes it on replay.
    pub fn deletion_records(
        &mut self,
        _env: &ShardEnv,
        group_id: &str,
    ) -> Result<Vec<CoordinatorRecord>, ErrorCode> {
        let g = self
            .groups
            .get(group_id)
            .ok_or(ErrorCode::GroupIdNotFound)?;
        match g.state {
            GroupState::Dead => Err(ErrorCode::GroupIdNotFound),
            GroupState::Stable
            | GroupState::PreparingRebalance
            | GroupState::CompletingRebalance => Err(ErrorCode::NonEmptyGroup),
            GroupState::Empty => Ok(vec![tombstone(group_id)]),
        }
    }

    pub fn maybe_delete_empty_group(
        &mut self,
        _env: &ShardEnv,
        group_id: &str,
    ) -> Vec<CoordinatorRecord> {
        match self.groups.get(group_id) {
            Some(g) if g.is_empty() => vec![tombstone(group_id)],
            _ => Vec::new(),
        }
    }

    pub fn list_groups(&self, states: &[String], committed_offset: i64) -> Vec<ListedGroup> {
        let mut ids: Vec<&String> = self.groups.keys().collect();
        for (at, id, before) in &self.undo {
            if *at >= committed_offset && before.is_some() && !self.groups.contains_key(id) {
                ids.push(id);
            }
        }
        ids.sort();
        ids.dedup();
        ids.into_iter()
            .filter_map(|id| self.committed_group(id, committed_offset))
            .filter(|g| {
                states.is_empty()
                    || states
                        .iter()
                        .any(|s| s.trim().eq_ignore_ascii_case(g.state.name()))
            })
            .map(|g| ListedGroup {
                group_id: g.group_id.clone(),
                protocol_type: g.protocol_type.clone().unwrap_or_default(),
                group_state: g.state.name().to_string(),
                group_type: GroupType::Classic,
            })
            .collect()
    }

    pub fn replay(&mut self, _env: &ShardEnv, offset: i64, record: &CoordinatorRecord) {
        let CoordinatorRecord::GroupMetadata(key, value) = record else {
            return;
        };
        match value {
            None => self.remove_group(offset, &key.group),
            Some((_, v)) => {
                if self.own_records.front() == Some(&key.group) {
                    self.own_records.pop_front();
                    return;
                }
                let g = ClassicGroup::from_record(key.group.clone(), v);
                self.insert_group(offset, g);
            }
        }
    }

    /// An offset commit of `group_id` was replayed and no group of that id exists.
    pub fn replay_simple_group(&mut self, env: &ShardEnv, offset: i64, group_id: &str) {
        if !self.groups.contains_key(group_id) {
            let g = ClassicGroup::new(group_id.to_string(), GroupState::Empty, env.now_ms());
            self.insert_group(offset, g);
        }
    }

    /// Loaded: every member of every group gets its session timer, and a group above
    /// `group.max.size` (lowered since it was written) rebalances (Kafka's `onLoaded`).
    pub fn on_loaded(&mut self, env: &ShardEnv) {
        let max = env.config.classic_max_size.max(0) as usize;
        for g in self.groups.values_mut() {
            for m in g.members_in_order() {
                join::reschedule_heartbeat(
                    env,
                    &g.group_id,
                    &m.member_id,
                    m.session_timeout_ms as i64,
                );
            }
            if g.num_members() > max {
                // Loaded members hold no JoinGroup, so this only starts the rebalance (and its
                // timer): it cannot complete now and writes nothing.
                let out = join::prepare_rebalance(env, g);
                debug_assert!(out.records.is_empty());
            }
        }
    }
}

pub(crate) fn tombstone(group_id: &str) -> CoordinatorRecord {
    CoordinatorRecord::GroupMetadata(
        GroupMetadataKey {
            group: group_id.to_string(),
            ..Default::default()
        },
        None,
    )
}

/// Runs `f` against the classic groups as a timer of the shard after `delay_ms`, replacing any
/// timer under `key`.
pub(crate) fn schedule(
    env: &ShardEnv,
    key: String,
    delay_ms: i64,
    f: impl FnOnce(&mut ClassicGroups, &ShardEnv, i64) -> Outcome + Send + 'static,
) {
    env.timer.schedule(
        key,
        Duration::from_millis(delay_ms.max(0) as u64),
        move |shard, ctx| {
            let out = f(&mut shard.classic, &shard.env, ctx.offset);
            let out = shard.classic.finish(out);
            Ok(WriteResult {
                records: out.records,
                response: out.after,
            })
        },
    );
}

impl Timeline for ClassicGroups {
    fn revert_to(&mut self, offset: i64) {
        while self.undo.back().is_some_and(|(at, _, _)| *at >= offset) {
            let (_, id, before) = self.undo.pop_back().expect("checked above");
            match before {
                Some(g) => {
                    self.groups.insert(id, g);
                }
                None => {
                    self.groups.remove(&id);
                }
            }
        }
        // Records of the failed write were not replayed (or never will be).
        self.own_records.clear();
    }

    fn commit(&mut self, committed: i64) {
        while self.undo.front().is_some_and(|(at, _, _)| *at < committed) {
            self.undo.pop_front();
        }
    }
}

#[cfg(test)]
mod tests;

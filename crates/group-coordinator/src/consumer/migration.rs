//! Online migration between classic and consumer (KIP-848) groups, as Kafka 4.4's
//! `group.consumer.migration.policy` allows it:
//! - upgrade: a ConsumerGroupHeartbeat joining a non-empty classic group of the `consumer`
//!   protocol type converts it (Kafka's `validateOnlineUpgrade`, `convertToConsumerGroup`,
//!   `ConsumerGroup.fromClassicGroup`): the GroupMetadata tombstone, then the records that create
//!   the consumer group with every classic member at the group's generation, owning its last
//!   classic assignment (which is also its target), carrying its JoinGroup protocols;
//! - downgrade: when the last consumer-protocol member leaves or is fenced and every other
//!   member uses the classic protocol (Kafka's `validateOnlineDowngradeWithFencedMembers`,
//!   `convertToClassicGroup`, `ClassicGroup.fromConsumerGroup`): the consumer group's
//!   tombstones, then a Stable classic group at the group epoch whose members hold their target
//!   assignments, which at once prepares a rebalance.
//!
//! The upgraded consumer group is built by applying its own records to an empty group, so it is
//! exactly what their replay (or a reload) makes. The downgraded classic group is installed in
//! memory directly (classic groups are not rebuilt from their own records), revertible through
//! the classic map's undo log like any classic group a write creates.

use std::collections::HashMap;

use bytes::Bytes;
use strom_protocol::ErrorCode;

use super::classic_protocol::{self, MalformedProtocol};
use super::group::{
    group_epoch_record, metadata_hash, target_assignment_epoch_record, target_assignment_record,
    ConsumerGroup,
};
use super::heartbeat::{schedule_session_timeout_ms, GroupError};
use super::member::{ClassicMemberInfo, ConsumerGroupMember, MemberState};
use crate::classic::group::CONSUMER_PROTOCOL_TYPE;
use crate::classic::responses::{join_error, sync_error};
use crate::classic::{ClassicGroup, ClassicGroupMember, GroupState};
use crate::config::MigrationPolicy;
use crate::metadata::GroupMetadataImage;
use crate::records::CoordinatorRecord;
use crate::shard::{GroupCoordinatorShard, ShardEnv};

impl MigrationPolicy {
    pub fn is_upgrade_enabled(self) -> bool {
        matches!(
            self,
            MigrationPolicy::Upgrade | MigrationPolicy::Bidirectional
        )
    }

    pub fn is_downgrade_enabled(self) -> bool {
        matches!(
            self,
            MigrationPolicy::Downgrade | MigrationPolicy::Bidirectional
        )
    }
}

fn not_found(message: String) -> GroupError {
    GroupError::new(ErrorCode::GroupIdNotFound, message)
}

/// Kafka's `validateOnlineUpgrade`: the policy allows it, the group uses the consumer protocol
/// type and fits in a consumer group.
pub fn validate_online_upgrade(env: &ShardEnv, g: &ClassicGroup) -> Result<(), GroupError> {
    let id = &g.group_id;
    if !env.config.migration_policy.is_upgrade_enabled() {
        return Err(not_found(format!(
            "Cannot upgrade classic group {id} to consumer group because online upgrade is disabled."
        )));
    }
    if !g.uses_consumer_protocol() {
        return Err(not_found(format!(
            "Cannot upgrade classic group {id} to consumer group because the group does not use the consumer embedded protocol."
        )));
    }
    if g.num_members() > env.config.consumer_max_size.max(0) as usize {
        return Err(not_found(format!(
            "Cannot upgrade classic group {id} to consumer group because the group size exceeds the consumer group maximum size."
        )));
    }
    Ok(())
}

/// The records creating the consumer group a classic group becomes, in Kafka's order
/// (`createConsumerGroupRecords`): member subscriptions, group epoch, target assignments,
/// assignment epoch, current assignments.
pub fn consumer_group_records_from_classic(
    g: &ClassicGroup,
    image: &GroupMetadataImage,
    now_ms: i64,
) -> Result<Vec<CoordinatorRecord>, MalformedProtocol> {
    let gid = &g.group_id;
    let epoch = g.generation_id;
    let mut members = Vec::new();
    for cm in g.members_in_order() {
        let metadata = match g.protocol_name.as_deref() {
            Some(p) => cm.metadata(p),
            None => cm.protocols.first().map(|p| &p.metadata),
        }
        .ok_or(MalformedProtocol("subscription"))?;
        let subscription = classic_protocol::decode_subscription(metadata)?;
        let assigned = classic_protocol::to_topic_ids(
            &classic_protocol::decode_assignment(&cm.assignment)?,
            image,
        );
        let mut m = ConsumerGroupMember::new(cm.member_id.clone());
        m.member_epoch = epoch;
        m.previous_member_epoch = epoch;
        m.state = MemberState::Stable;
        m.instance_id = cm.group_instance_id.clone();
        m.rack_id = subscription.rack_id.clone();
        m.rebalance_timeout_ms = cm.rebalance_timeout_ms;
        m.client_id = cm.client_id.clone();
        m.client_host = cm.client_host.clone();
        m.subscribed_topic_names = subscription.topics.iter().cloned().collect();
        m.assigned_partitions = assigned;
        m.classic = Some(ClassicMemberInfo {
            session_timeout_ms: cm.session_timeout_ms,
            protocols: cm.protocols.clone(),
        });
        members.push(m);
    }
    let mut topics = std::collections::BTreeSet::new();
    for m in &members {
        topics.extend(m.subscribed_topic_names.iter().cloned());
    }
    let mut records: Vec<CoordinatorRecord> =
        members.iter().map(|m| m.metadata_record(gid)).collect();
    records.push(group_epoch_record(
        gid,
        epoch,
        metadata_hash(&topics, image),
    ));
    for m in &members {
        records.push(target_assignment_record(
            gid,
            &m.member_id,
            &m.assigned_partitions,
        ));
    }
    records.push(target_assignment_epoch_record(gid, epoch, now_ms));
    for m in &members {
        records.push(m.current_assignment_record(gid));
    }
    Ok(records)
}

/// Kafka's `convertToConsumerGroup`: the classic group's waiting JoinGroup and SyncGroup
/// requests are told to rejoin, and the records replacing it come back with the consumer group
/// they make (the base of the heartbeat that triggered the upgrade).
pub fn convert_to_consumer_group(
    shard: &mut GroupCoordinatorShard,
    group_id: &str,
) -> Result<(Vec<CoordinatorRecord>, ConsumerGroup), GroupError> {
    let env = &shard.env;
    let image = env.metadata();
    let Some(g) = shard.classic.group_mut(group_id) else {
        return Err(not_found(format!("Group {group_id} not found.")));
    };
    validate_online_upgrade(env, g)?;
    let records = consumer_group_records_from_classic(g, &image, env.now_ms()).map_err(|e| {
        tracing::warn!(group_id, error = %e, "cannot upgrade the classic group");
        not_found(format!(
            "Cannot upgrade classic group {group_id} to consumer group because the embedded consumer protocol is malformed."
        ))
    })?;
    // Whatever the append's outcome, these requests belong to a rebalance that is over.
    for id in g.member_ids() {
        g.complete_join(&id, join_error(&id, ErrorCode::RebalanceInProgress));
        g.complete_sync(&id, sync_error(ErrorCode::RebalanceInProgress));
    }
    let mut group = ConsumerGroup::new(group_id);
    for r in &records {
        group.apply(r);
    }
    // The members' sessions run on (with their classic session timeouts); if the append fails
    // the group stays classic and these timers find no consumer group to act on.
    for m in group.members.values() {
        let ms = m.classic.as_ref().map_or(0, |c| c.session_timeout_ms);
        schedule_session_timeout_ms(env, group_id, &m.member_id, ms);
    }
    let mut all = vec![crate::classic::tombstone(group_id)];
    all.extend(records);
    tracing::info!(group_id, "upgrading the classic group to a consumer group");
    Ok((all, group))
}

/// Kafka's `validateOnlineDowngradeWithFencedMembers`: every member but the leaving one uses
/// the classic protocol, someone remains, the policy allows it and the rest fits a classic
/// group.
pub fn validate_online_downgrade(env: &ShardEnv, g: &ConsumerGroup, leaving: &str) -> bool {
    let Some(l) = g.members.get(leaving) else {
        return false;
    };
    if l.uses_classic_protocol()
        || g.members
            .values()
            .any(|m| m.member_id != leaving && !m.uses_classic_protocol())
    {
        return false;
    }
    let remaining = g.members.len() - 1;
    if remaining == 0 {
        return false;
    }
    if !env.config.migration_policy.is_downgrade_enabled() {
        tracing::info!(
            group_id = g.group_id.as_str(),
            "cannot downgrade the consumer group: online downgrade is disabled"
        );
        return false;
    }
    remaining <= env.config.classic_max_size.max(0) as usize
}

/// Kafka's `ClassicGroup.fromConsumerGroup`: a Stable classic group at the group epoch with
/// every member but the leaving one, each holding its target assignment encoded in the version
/// of its subscription.
pub fn classic_group_from_consumer_group(
    g: &ConsumerGroup,
    leaving: &str,
    image: &GroupMetadataImage,
    now_ms: i64,
) -> Result<ClassicGroup, MalformedProtocol> {
    let mut cg = ClassicGroup::new(g.group_id.clone(), GroupState::Stable, now_ms);
    cg.generation_id = g.group_epoch;
    cg.protocol_type = Some(CONSUMER_PROTOCOL_TYPE.to_string());
    for m in g.members.values().filter(|m| m.member_id != leaving) {
        let c = m
            .classic
            .as_ref()
            .ok_or(MalformedProtocol("classic member metadata"))?;
        cg.add(ClassicGroupMember::new(
            m.member_id.clone(),
            m.instance_id.clone(),
            m.client_id.clone(),
            m.client_host.clone(),
            m.rebalance_timeout_ms,
            c.session_timeout_ms,
            CONSUMER_PROTOCOL_TYPE.to_string(),
            c.protocols.clone(),
            Bytes::new(),
        ));
    }
    cg.protocol_name = cg.select_protocol();
    let protocol = cg.protocol_name.clone().unwrap_or_default();
    for id in cg.member_ids() {
        let version = cg
            .member(&id)
            .and_then(|m| m.metadata(&protocol))
            .map(|b| classic_protocol::version(b))
            .transpose()?
            .unwrap_or(0);
        let target = g.target_assignment.get(&id).cloned().unwrap_or_default();
        let a = classic_protocol::encode_assignment(&target, image, version);
        if let Some(m) = cg.member_mut(&id) {
            m.assignment = a;
        }
    }
    cg.subscribed_topics = cg.compute_subscribed_topics();
    Ok(cg)
}

/// Kafka's `convertToClassicGroup` when `leaving` leaves: the records (consumer group
/// tombstones, then the classic group's record), with the classic group installed at `at`,
/// its members' sessions armed and a rebalance prepared. `None` when the group cannot be
/// downgraded (the caller removes the member as usual).
pub fn maybe_downgrade(
    shard: &mut GroupCoordinatorShard,
    at: i64,
    group_id: &str,
    leaving: &str,
) -> Option<Vec<CoordinatorRecord>> {
    let g = shard.consumer.group(group_id)?;
    if !validate_online_downgrade(&shard.env, g, leaving) {
        return None;
    }
    let image = shard.env.metadata();
    let mut cg = match classic_group_from_consumer_group(g, leaving, &image, shard.env.now_ms()) {
        Ok(cg) => cg,
        Err(e) => {
            tracing::warn!(group_id, error = %e, "cannot downgrade the consumer group");
            return None;
        }
    };
    let mut records = g.tombstone_records();
    let assignments: HashMap<String, Bytes> = cg.assignments();
    records.push(crate::classic::group_record(
        group_id,
        cg.to_record_value(&assignments),
    ));
    // The consumer group's timers of its members are over.
    for id in g.members.keys() {
        super::heartbeat::cancel_member_timers(&shard.env, group_id, id);
    }
    let env = &shard.env;
    for m in cg.members_in_order() {
        crate::classic::reschedule_member_heartbeat(
            env,
            group_id,
            &m.member_id,
            m.session_timeout_ms as i64,
        );
    }
    let out = crate::classic::prepare_group_rebalance(env, &mut cg);
    records.extend(out.records);
    shard.classic.insert_group(at, cg);
    let out = shard.classic.finish(crate::classic::Outcome {
        records,
        after: None,
    });
    tracing::info!(group_id, "downgraded the consumer group to a classic group");
    Some(out.records)
}

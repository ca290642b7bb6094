//! Partition leadership and ISR changes, as Kafka's `PartitionChangeBuilder` and the
//! `alterPartition` / `electLeader` paths of `ReplicationControlManager` make them.
//!
//! Everything here is pure: functions read a [`MetadataImage`] and return the
//! [`MetadataRecord::PartitionChange`] records to commit (or a Kafka error). Nothing is applied;
//! [`MetadataImage::replay`] does that, bumping the partition epoch on every change and the
//! leader epoch whenever a record sets `leader`.
//!
//! Semantics follow Kafka's KRaft controller with eligible leader replicas (ELR, KIP-966)
//! disabled and a metadata version >= 3.6 (an ISR shrink alone does not bump the leader epoch,
//! KAFKA-15021):
//! - an ISR is never written empty: when the last ISR member goes, the ISR keeps it and the
//!   leader becomes [`NO_LEADER`], so a clean election can later pick it again;
//! - a clean election picks the first replica, in replica order, that is in the ISR and usable;
//! - an unclean election (only when allowed) picks the first usable replica and makes the ISR
//!   just that replica.

use strom_protocol::ErrorCode;
use uuid::Uuid;

use crate::image::{MetadataImage, PartitionRegistration};
use crate::record::MetadataRecord;

/// Kafka's `LeaderConstants.NO_LEADER`.
pub const NO_LEADER: i32 = -1;

/// Kafka's `PartitionChangeBuilder.Election`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElectionKind {
    /// Elect the preferred replica (`replicas[0]`) if it is in the ISR and usable; otherwise
    /// keep the partition online from the ISR. Never unclean.
    Preferred,
    /// Keep the current leader if it is still valid, else elect from the ISR.
    Online,
    /// As `Online`, but with no usable ISR member take any usable replica (data loss possible).
    Unclean,
}

impl ElectionKind {
    /// `Unclean` when the topic allows unclean elections, else `Online`.
    pub fn online(unclean_allowed: bool) -> Self {
        if unclean_allowed {
            Self::Unclean
        } else {
            Self::Online
        }
    }
}

/// The outcome of [`elect_leader`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Election {
    /// The elected leader, or [`NO_LEADER`].
    pub leader: i32,
    /// The ISR after the election: `reg.isr` unchanged after a clean election or none, just
    /// the leader after an unclean one.
    pub isr: Vec<i32>,
    /// The leader came from outside the ISR.
    pub unclean: bool,
}

/// Kafka's `PartitionChangeBuilder.electLeader` over `reg` (whose `isr` is the target ISR).
///
/// `usable(b)`: broker `b` may lead (registered, unfenced, not shutting down).
/// - `preferred`: `replicas[0]` if it is in the ISR and usable; else the current leader if it
///   is in the ISR and usable; else the first other replica in the ISR and usable; else
///   [`NO_LEADER`]. `unclean_allowed` is ignored (Kafka's PREFERRED election is never unclean).
/// - otherwise: the current leader if it is in the ISR and usable; else the first replica (in
///   replica order) in the ISR and usable; else, if `unclean_allowed`, the first usable
///   replica with the ISR reduced to it; else [`NO_LEADER`] with the ISR unchanged.
pub fn elect_leader(
    reg: &PartitionRegistration,
    usable: impl Fn(i32) -> bool,
    unclean_allowed: bool,
    preferred: bool,
) -> Election {
    let valid = |b: i32| b >= 0 && reg.isr.contains(&b) && usable(b);
    let clean = |leader: i32| Election {
        leader,
        isr: reg.isr.clone(),
        unclean: false,
    };
    if preferred {
        if let Some(&first) = reg.replicas.first() {
            if valid(first) {
                return clean(first);
            }
        }
        if valid(reg.leader) {
            return clean(reg.leader);
        }
        return match reg.replicas.iter().skip(1).copied().find(|&b| valid(b)) {
            Some(b) => clean(b),
            None => clean(NO_LEADER),
        };
    }
    if valid(reg.leader) {
        return clean(reg.leader);
    }
    if let Some(b) = reg.replicas.iter().copied().find(|&b| valid(b)) {
        return clean(b);
    }
    if unclean_allowed {
        if let Some(b) = reg.replicas.iter().copied().find(|&b| b >= 0 && usable(b)) {
            return Election {
                leader: b,
                isr: vec![b],
                unclean: true,
            };
        }
    }
    clean(NO_LEADER)
}

/// Kafka's `PartitionChangeBuilder.build` (no reassignment, no ELR): moves the partition to
/// `target_isr`, runs an election of `kind`, and returns the `PartitionChange` record, or
/// `None` when nothing changes.
///
/// - `leader` is set only when the election result differs from the current leader;
/// - after an unclean election the ISR is just the new leader;
/// - otherwise the ISR is set to `target_isr` when it differs from the current ISR and is not
///   empty — an empty target leaves the ISR as it is (never empty without ELR).
pub fn build_partition_change(
    topic_id: Uuid,
    partition: i32,
    reg: &PartitionRegistration,
    target_isr: Vec<i32>,
    usable: impl Fn(i32) -> bool,
    kind: ElectionKind,
) -> Option<MetadataRecord> {
    let target = PartitionRegistration {
        isr: target_isr,
        ..reg.clone()
    };
    let election = elect_leader(
        &target,
        usable,
        kind == ElectionKind::Unclean,
        kind == ElectionKind::Preferred,
    );
    let mut leader = None;
    let mut isr = None;
    if election.leader != reg.leader {
        leader = Some(election.leader);
        if election.unclean {
            isr = Some(election.isr);
        }
    }
    if isr.is_none() && !target.isr.is_empty() && target.isr != reg.isr {
        isr = Some(target.isr);
    }
    if leader.is_none() && isr.is_none() {
        return None;
    }
    Some(MetadataRecord::PartitionChange {
        topic_id,
        partition,
        leader,
        isr,
        replicas: None,
        adding_replicas: None,
        removing_replicas: None,
    })
}

/// An AlterPartition rejection, with Kafka's error code ([`AlterPartitionError::code`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AlterPartitionError {
    /// The requesting broker is not registered, or under another broker epoch (Kafka's
    /// `checkBrokerEpoch`, a request-level error).
    #[error("{0}")]
    StaleBrokerEpoch(String),
    /// AlterPartition v2+ names topics by id.
    #[error("This server does not host this topic ID.")]
    UnknownTopicId,
    #[error("This server does not host this topic-partition.")]
    UnknownTopicOrPartition,
    /// The request carries a newer leader or partition epoch than this controller knows: it
    /// is probably no longer the active controller.
    #[error("This is not the correct controller for this cluster.")]
    NotController,
    /// The requester's leader epoch is older than the partition's.
    #[error("The leader epoch in the request is older than the epoch on the broker.")]
    FencedLeaderEpoch,
    /// Not the leader, an ISR that is not a subset of the replicas, has duplicates or lacks
    /// the leader.
    #[error("{0}")]
    InvalidRequest(String),
    /// The requester's partition epoch is older than the partition's.
    #[error("The given update version was invalid.")]
    InvalidUpdateVersion,
    /// A new ISR member is unregistered, fenced or in controlled shutdown.
    #[error("{0}")]
    IneligibleReplica(String),
}

impl AlterPartitionError {
    /// The Kafka error code (`Errors.java`).
    pub fn code(&self) -> i16 {
        match self {
            Self::StaleBrokerEpoch(_) => ErrorCode::StaleBrokerEpoch.code(),
            Self::UnknownTopicId => ErrorCode::UnknownTopicId.code(),
            Self::UnknownTopicOrPartition => ErrorCode::UnknownTopicOrPartition.code(),
            Self::NotController => ErrorCode::NotController.code(),
            Self::FencedLeaderEpoch => ErrorCode::FencedLeaderEpoch.code(),
            Self::InvalidRequest(_) => ErrorCode::InvalidRequest.code(),
            Self::InvalidUpdateVersion => ErrorCode::InvalidUpdateVersion.code(),
            Self::IneligibleReplica(_) => ErrorCode::IneligibleReplica.code(),
        }
    }
}

/// One member of a proposed ISR with the broker epoch the leader knows it by (Kafka's
/// `AlterPartitionRequestData.BrokerState`, KIP-903): the epoch of the follower's fetches, -1
/// when unknown (AlterPartition before v3, or a follower not heard from yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BrokerState {
    pub broker_id: i32,
    pub broker_epoch: i64,
}

impl BrokerState {
    /// Members without known epochs (AlterPartition v0-2's `newIsr`).
    pub fn without_epochs(ids: &[i32]) -> Vec<BrokerState> {
        ids.iter()
            .map(|&broker_id| BrokerState {
                broker_id,
                broker_epoch: -1,
            })
            .collect()
    }
}

/// Kafka's `checkBrokerEpoch`: `broker_id` is registered under `broker_epoch`.
pub fn check_broker_epoch(
    image: &MetadataImage,
    broker_id: i32,
    broker_epoch: i64,
) -> Result<(), String> {
    match image.brokers.get(&broker_id) {
        None => Err(format!(
            "No broker registration found for broker id {broker_id}"
        )),
        Some(b) if b.epoch != broker_epoch => Err(format!(
            "Expected broker epoch {}, but got broker epoch {broker_epoch}",
            b.epoch
        )),
        Some(_) => Ok(()),
    }
}

/// AlterPartition (v2+, topic ids) for one partition: the leader `broker_id`, registered under
/// `broker_epoch`, asks to set the ISR to `new_isr`, quoting the leader and partition epochs it
/// knows. First the request-level broker epoch (STALE_BROKER_EPOCH), then Kafka's order
/// (`validateAlterPartitionData`): unknown partition; epochs newer than ours
/// (NOT_CONTROLLER); older leader epoch (FENCED_LEADER_EPOCH); requester not the leader
/// (INVALID_REQUEST); older partition epoch (INVALID_UPDATE_VERSION); ISR not a duplicate-free
/// subset of the replicas or without the leader (INVALID_REQUEST); a member not registered,
/// fenced, in controlled shutdown, or known to the leader by another broker epoch than its
/// registration's — a fetch from an earlier incarnation (KIP-903) — (INELIGIBLE_REPLICA).
///
/// Success: the `PartitionChange` (ISR only, no leader-epoch bump), or no record when the ISR
/// is unchanged (Kafka answers NONE with the current state).
///
/// The validation guarantees the leader is in the new ISR and active, so the election keeps
/// it: Kafka's NEW_LEADER_ELECTED (108) only arises when an ISR change completes a
/// reassignment, which this module does not model.
#[allow(clippy::too_many_arguments)]
pub fn alter_partition(
    image: &MetadataImage,
    broker_id: i32,
    broker_epoch: i64,
    topic_id: Uuid,
    partition: i32,
    leader_epoch: i32,
    partition_epoch: i32,
    new_isr_with_epochs: &[BrokerState],
) -> Result<Vec<MetadataRecord>, AlterPartitionError> {
    check_broker_epoch(image, broker_id, broker_epoch)
        .map_err(AlterPartitionError::StaleBrokerEpoch)?;
    let new_isr: Vec<i32> = new_isr_with_epochs.iter().map(|b| b.broker_id).collect();
    let topic = image
        .topic_by_id(&topic_id)
        .ok_or(AlterPartitionError::UnknownTopicId)?;
    let reg = topic
        .partitions
        .get(&partition)
        .ok_or(AlterPartitionError::UnknownTopicOrPartition)?;
    if leader_epoch > reg.leader_epoch || partition_epoch > reg.partition_epoch {
        return Err(AlterPartitionError::NotController);
    }
    if leader_epoch < reg.leader_epoch {
        return Err(AlterPartitionError::FencedLeaderEpoch);
    }
    if broker_id != reg.leader {
        return Err(AlterPartitionError::InvalidRequest(format!(
            "Broker {broker_id} is not the leader of {}-{partition}; the leader is {}.",
            topic.name, reg.leader
        )));
    }
    if partition_epoch < reg.partition_epoch {
        return Err(AlterPartitionError::InvalidUpdateVersion);
    }
    if !valid_isr(&reg.replicas, &new_isr) {
        return Err(AlterPartitionError::InvalidRequest(format!(
            "Invalid ISR {new_isr:?} for {}-{partition} with replicas {:?}.",
            topic.name, reg.replicas
        )));
    }
    if !new_isr.contains(&reg.leader) {
        return Err(AlterPartitionError::InvalidRequest(format!(
            "The ISR {new_isr:?} for {}-{partition} does not include the leader {}.",
            topic.name, reg.leader
        )));
    }
    // Kafka's `ineligibleReplicasForIsr`, its reasons word for word.
    let ineligible: Vec<String> = new_isr_with_epochs
        .iter()
        .filter_map(|s| {
            let b = s.broker_id;
            match image.brokers.get(&b) {
                None => Some(format!("{b} (not registered)")),
                Some(info) if info.in_controlled_shutdown => Some(format!("{b} (shutting down)")),
                Some(info) if info.fenced => Some(format!("{b} (fenced)")),
                Some(info) if s.broker_epoch != -1 && s.broker_epoch != info.epoch => {
                    Some(format!(
                        "{b} (broker epoch mismatch: requested={} VS expected={})",
                        s.broker_epoch, info.epoch
                    ))
                }
                Some(_) => None,
            }
        })
        .collect();
    if !ineligible.is_empty() {
        return Err(AlterPartitionError::IneligibleReplica(format!(
            "The new ISR {new_isr:?} for {}-{partition} contains ineligible replicas: {}.",
            topic.name,
            ineligible.join(", ")
        )));
    }
    if let Some(r) = complete_reassignment(topic_id, partition, reg, &new_isr, |b| {
        image.broker_is_active(b)
    }) {
        return Ok(vec![r]);
    }
    Ok(build_partition_change(
        topic_id,
        partition,
        reg,
        new_isr,
        |b| image.broker_is_active(b),
        ElectionKind::Online,
    )
    .into_iter()
    .collect())
}

/// Kafka's `Replicas.validateIsr`: every member is a replica, no duplicates, no negative ids.
/// (An empty ISR passes here and is rejected by the leader check.)
fn valid_isr(replicas: &[i32], isr: &[i32]) -> bool {
    let mut seen = std::collections::HashSet::new();
    isr.iter()
        .all(|b| *b >= 0 && replicas.contains(b) && seen.insert(*b))
}

/// An ElectLeaders outcome for one partition other than success, with Kafka's error code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ElectLeadersError {
    #[error("No such partition as {0}")]
    UnknownTopicOrPartition(String),
    /// PREFERRED with the preferred replica already leading; UNCLEAN with any leader.
    #[error("Leader election not needed for topic partition.")]
    ElectionNotNeeded,
    #[error("The preferred leader was not available.")]
    PreferredLeaderNotAvailable,
    #[error("Eligible topic partition leaders are not available.")]
    EligibleLeadersNotAvailable,
}

impl ElectLeadersError {
    /// The Kafka error code (`Errors.java`).
    pub fn code(&self) -> i16 {
        match self {
            Self::UnknownTopicOrPartition(_) => ErrorCode::UnknownTopicOrPartition.code(),
            Self::ElectionNotNeeded => ErrorCode::ElectionNotNeeded.code(),
            Self::PreferredLeaderNotAvailable => ErrorCode::PreferredLeaderNotAvailable.code(),
            Self::EligibleLeadersNotAvailable => ErrorCode::EligibleLeadersNotAvailable.code(),
        }
    }
}

fn lookup<'a>(
    image: &'a MetadataImage,
    topic: &str,
    partition: i32,
) -> Result<(Uuid, &'a PartitionRegistration), ElectLeadersError> {
    let t = image.topic(topic).ok_or_else(|| {
        ElectLeadersError::UnknownTopicOrPartition(format!("No such topic as {topic}"))
    })?;
    let reg = t.partitions.get(&partition).ok_or_else(|| {
        ElectLeadersError::UnknownTopicOrPartition(format!(
            "No such partition as {topic}-{partition}"
        ))
    })?;
    Ok((t.id, reg))
}

/// ElectLeaders with election type PREFERRED (0) for one partition (Kafka's `electLeader`):
/// ELECTION_NOT_NEEDED when `replicas[0]` already leads; otherwise a PREFERRED election among
/// active brokers. When it changes nothing (the preferred replica is not in the ISR or not
/// active, and the current leader stays): PREFERRED_LEADER_NOT_AVAILABLE. A leaderless
/// partition whose preferred replica is unusable gets another ISR member, as in Kafka.
pub fn preferred_leader_election(
    image: &MetadataImage,
    topic: &str,
    partition: i32,
) -> Result<Vec<MetadataRecord>, ElectLeadersError> {
    let (topic_id, reg) = lookup(image, topic, partition)?;
    if reg.leader == reg.replicas.first().copied().unwrap_or(NO_LEADER) {
        return Err(ElectLeadersError::ElectionNotNeeded);
    }
    build_partition_change(
        topic_id,
        partition,
        reg,
        reg.isr.clone(),
        |b| image.replica_can_lead(b, &topic_id, partition),
        ElectionKind::Preferred,
    )
    .map(|r| vec![r])
    .ok_or(ElectLeadersError::PreferredLeaderNotAvailable)
}

/// ElectLeaders with election type UNCLEAN (1) for one partition: ELECTION_NOT_NEEDED when the
/// partition has a leader; otherwise an UNCLEAN election among active brokers (a usable ISR
/// member first, else any usable replica, whose ISR becomes just it), whatever the topic's
/// `unclean.leader.election.enable`; ELIGIBLE_LEADERS_NOT_AVAILABLE when no replica is usable.
pub fn unclean_leader_election(
    image: &MetadataImage,
    topic: &str,
    partition: i32,
) -> Result<Vec<MetadataRecord>, ElectLeadersError> {
    let (topic_id, reg) = lookup(image, topic, partition)?;
    if reg.leader != NO_LEADER {
        return Err(ElectLeadersError::ElectionNotNeeded);
    }
    build_partition_change(
        topic_id,
        partition,
        reg,
        reg.isr.clone(),
        |b| image.replica_can_lead(b, &topic_id, partition),
        ElectionKind::Unclean,
    )
    .map(|r| vec![r])
    .ok_or(ElectLeadersError::EligibleLeadersNotAvailable)
}

/// A reassignment rejection for one partition, with Kafka's error code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReassignmentError {
    #[error("{0}")]
    UnknownTopicOrPartition(String),
    #[error("{0}")]
    InvalidReplicaAssignment(String),
    #[error("No ongoing reassignment for {0}.")]
    NoReassignmentInProgress(String),
}

impl ReassignmentError {
    /// The Kafka error code (`Errors.java`).
    pub fn code(&self) -> i16 {
        match self {
            Self::UnknownTopicOrPartition(_) => ErrorCode::UnknownTopicOrPartition.code(),
            Self::InvalidReplicaAssignment(_) => ErrorCode::InvalidReplicaAssignment.code(),
            Self::NoReassignmentInProgress(_) => ErrorCode::NoReassignmentInProgress.code(),
        }
    }
}

/// Kafka's `PartitionChangeBuilder.completeReassignmentIfNeeded` followed by an election: when
/// `reg` is reassigning and `isr` holds every adding replica, the change that finishes it
/// (replicas = target, ISR = `isr` ∩ target, adding / removing cleared, a new leader if the
/// current one is gone; the leader epoch is bumped whenever replicas are removed so that
/// removed followers stop). `None` when the reassignment cannot complete yet (or would leave
/// the ISR empty).
pub fn complete_reassignment(
    topic_id: Uuid,
    partition: i32,
    reg: &PartitionRegistration,
    isr: &[i32],
    usable: impl Fn(i32) -> bool,
) -> Option<MetadataRecord> {
    if !reg.is_reassigning() || !reg.adding_replicas.iter().all(|b| isr.contains(b)) {
        return None;
    }
    let target = reg.target_replicas();
    let new_isr: Vec<i32> = isr.iter().copied().filter(|b| target.contains(b)).collect();
    if new_isr.is_empty() {
        return None;
    }
    let next = PartitionRegistration {
        replicas: target.clone(),
        isr: new_isr.clone(),
        adding_replicas: Vec::new(),
        removing_replicas: Vec::new(),
        ..reg.clone()
    };
    let election = elect_leader(&next, usable, false, false);
    let leader = if election.leader != reg.leader || !reg.removing_replicas.is_empty() {
        Some(election.leader)
    } else {
        None
    };
    Some(MetadataRecord::PartitionChange {
        topic_id,
        partition,
        leader,
        isr: Some(new_isr),
        replicas: Some(target),
        adding_replicas: Some(Vec::new()),
        removing_replicas: Some(Vec::new()),
    })
}

/// AlterPartitionReassignments for one partition (Kafka's `changePartitionReassignment` /
/// `cancelPartitionReassignment`). `target: Some(r)` starts (or replaces) a reassignment to
/// `r`: replicas become `r` followed by the current replicas not in `r`, adding = `r` −
/// current, removing = current − `r`; it completes at once when the ISR already holds every
/// adding replica. `None` cancels an ongoing reassignment (NO_REASSIGNMENT_IN_PROGRESS if
/// there is none): the adding replicas are dropped from the replicas and the ISR.
pub fn alter_partition_reassignment(
    image: &MetadataImage,
    topic: &str,
    partition: i32,
    target: Option<Vec<i32>>,
) -> Result<Vec<MetadataRecord>, ReassignmentError> {
    let t = image.topic(topic).ok_or_else(|| {
        ReassignmentError::UnknownTopicOrPartition(format!("Unable to find topic {topic}"))
    })?;
    let reg = t.partitions.get(&partition).ok_or_else(|| {
        ReassignmentError::UnknownTopicOrPartition(format!(
            "Unable to find partition {topic}:{partition}"
        ))
    })?;
    let usable = |b: i32| image.broker_is_active(b);
    let Some(target) = target else {
        if !reg.is_reassigning() {
            return Err(ReassignmentError::NoReassignmentInProgress(format!(
                "{topic}-{partition}"
            )));
        }
        // PartitionReassignmentRevert: back to the replicas before the adding ones.
        let original: Vec<i32> = reg
            .replicas
            .iter()
            .copied()
            .filter(|b| !reg.adding_replicas.contains(b))
            .collect();
        let mut isr: Vec<i32> = reg
            .isr
            .iter()
            .copied()
            .filter(|b| original.contains(b))
            .collect();
        let mut unclean = false;
        if isr.is_empty() {
            isr = original.iter().copied().take(1).collect();
            unclean = true;
        }
        let next = PartitionRegistration {
            replicas: original.clone(),
            isr: isr.clone(),
            adding_replicas: Vec::new(),
            removing_replicas: Vec::new(),
            ..reg.clone()
        };
        let election = elect_leader(&next, usable, unclean, false);
        let leader = if election.leader != reg.leader || !reg.adding_replicas.is_empty() {
            Some(election.leader)
        } else {
            None
        };
        return Ok(vec![MetadataRecord::PartitionChange {
            topic_id: t.id,
            partition,
            leader,
            isr: Some(election.isr),
            replicas: Some(original),
            adding_replicas: Some(Vec::new()),
            removing_replicas: Some(Vec::new()),
        }]);
    };
    // validateManualPartitionAssignment
    let mut seen = std::collections::HashSet::new();
    if target.is_empty() {
        return Err(ReassignmentError::InvalidReplicaAssignment(
            "The manual partition assignment includes an empty replica list.".into(),
        ));
    }
    for &b in &target {
        if !seen.insert(b) {
            return Err(ReassignmentError::InvalidReplicaAssignment(format!(
                "The manual partition assignment includes the broker {b} more than once."
            )));
        }
        if !image.brokers.contains_key(&b) {
            return Err(ReassignmentError::InvalidReplicaAssignment(format!(
                "The manual partition assignment includes broker {b}, but no such broker is registered."
            )));
        }
    }
    let current = &reg.replicas;
    let removing: Vec<i32> = current
        .iter()
        .copied()
        .filter(|b| !target.contains(b))
        .collect();
    let adding: Vec<i32> = target
        .iter()
        .copied()
        .filter(|b| !current.contains(b))
        .collect();
    let mut replicas = target.clone();
    replicas.extend(removing.iter().copied());
    if !reg.is_reassigning() && adding.is_empty() && removing.is_empty() && replicas == *current {
        return Ok(Vec::new());
    }
    let next = PartitionRegistration {
        replicas: replicas.clone(),
        adding_replicas: adding.clone(),
        removing_replicas: removing.clone(),
        ..reg.clone()
    };
    if adding.is_empty() {
        // Nothing to catch up: complete now (or just reorder the replicas).
        if removing.is_empty() {
            return Ok(vec![MetadataRecord::PartitionChange {
                topic_id: t.id,
                partition,
                leader: None,
                isr: None,
                replicas: Some(replicas),
                adding_replicas: Some(Vec::new()),
                removing_replicas: Some(Vec::new()),
            }]);
        }
        if let Some(r) = complete_reassignment(t.id, partition, &next, &reg.isr, usable) {
            return Ok(vec![r]);
        }
    }
    Ok(vec![MetadataRecord::PartitionChange {
        topic_id: t.id,
        partition,
        leader: None,
        isr: None,
        replicas: Some(replicas),
        adding_replicas: Some(adding),
        removing_replicas: Some(removing),
    }])
}

#[cfg(test)]
#[path = "partition_change_tests.rs"]
pub(crate) mod tests;

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
    /// The requesting broker is not registered (Kafka's `checkBrokerEpoch`, a request-level
    /// error).
    #[error("No broker registration found for broker id {0}")]
    StaleBrokerEpoch(i32),
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
            Self::StaleBrokerEpoch(_) => 77,
            Self::UnknownTopicId => 100,
            Self::UnknownTopicOrPartition => 3,
            Self::NotController => 41,
            Self::FencedLeaderEpoch => 74,
            Self::InvalidRequest(_) => 42,
            Self::InvalidUpdateVersion => 95,
            Self::IneligibleReplica(_) => 107,
        }
    }
}

/// AlterPartition (v2+, topic ids) for one partition: the leader `broker_id` asks to set the
/// ISR to `new_isr`, quoting the leader and partition epochs it knows. Checks in Kafka's order
/// (`validateAlterPartitionData`): unknown partition; epochs newer than ours
/// (NOT_CONTROLLER); older leader epoch (FENCED_LEADER_EPOCH); requester not the leader
/// (INVALID_REQUEST); older partition epoch (INVALID_UPDATE_VERSION); ISR not a duplicate-free
/// subset of the replicas or without the leader (INVALID_REQUEST); a member not registered,
/// fenced or in controlled shutdown (INELIGIBLE_REPLICA).
///
/// Success: the `PartitionChange` (ISR only, no leader-epoch bump), or no record when the ISR
/// is unchanged (Kafka answers NONE with the current state).
///
/// The validation guarantees the leader is in the new ISR and active, so the election keeps
/// it: Kafka's NEW_LEADER_ELECTED (108) only arises when an ISR change completes a
/// reassignment, which this module does not model.
pub fn alter_partition(
    image: &MetadataImage,
    broker_id: i32,
    topic_id: Uuid,
    partition: i32,
    leader_epoch: i32,
    partition_epoch: i32,
    new_isr: Vec<i32>,
) -> Result<Vec<MetadataRecord>, AlterPartitionError> {
    if !image.brokers.contains_key(&broker_id) {
        return Err(AlterPartitionError::StaleBrokerEpoch(broker_id));
    }
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
    let ineligible: Vec<String> = new_isr
        .iter()
        .filter_map(|b| match image.brokers.get(b) {
            None => Some(format!("{b} (not registered)")),
            Some(info) if info.in_controlled_shutdown => Some(format!("{b} (shutting down)")),
            Some(info) if info.fenced => Some(format!("{b} (fenced)")),
            Some(_) => None,
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
            Self::UnknownTopicOrPartition(_) => 3,
            Self::ElectionNotNeeded => 84,
            Self::PreferredLeaderNotAvailable => 80,
            Self::EligibleLeadersNotAvailable => 83,
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
        |b| image.broker_is_active(b),
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
        |b| image.broker_is_active(b),
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
            Self::UnknownTopicOrPartition(_) => 3,
            Self::InvalidReplicaAssignment(_) => 39,
            Self::NoReassignmentInProgress(_) => 85,
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
pub(crate) mod tests {
    use super::*;

    pub(crate) fn reg(replicas: &[i32], isr: &[i32], leader: i32) -> PartitionRegistration {
        PartitionRegistration {
            replicas: replicas.to_vec(),
            isr: isr.to_vec(),
            leader,
            leader_epoch: 5,
            partition_epoch: 10,
            adding_replicas: Vec::new(),
            removing_replicas: Vec::new(),
        }
    }

    /// An image with brokers `1..=n` (all active) and topic "t" with the given partitions.
    pub(crate) fn image(n: i32, parts: &[PartitionRegistration]) -> (MetadataImage, Uuid) {
        let id = Uuid::from_u128(7);
        let mut img = MetadataImage::default();
        for b in 1..=n {
            img.replay(&MetadataRecord::RegisterBroker {
                node_id: b,
                host: "localhost".into(),
                port: 9000 + b,
                rack: None,
            });
        }
        img.replay(&MetadataRecord::Topic {
            name: "t".into(),
            topic_id: id,
        });
        for (i, p) in parts.iter().enumerate() {
            img.replay(&MetadataRecord::Partition {
                topic_id: id,
                partition: i as i32,
                replicas: p.replicas.clone(),
                isr: p.isr.clone(),
                leader: p.leader,
                leader_epoch: p.leader_epoch,
                partition_epoch: p.partition_epoch,
                adding_replicas: Vec::new(),
                removing_replicas: Vec::new(),
            });
        }
        (img, id)
    }

    pub(crate) fn set(img: &mut MetadataImage, b: i32, fenced: Option<bool>, cs: Option<bool>) {
        img.replay(&MetadataRecord::BrokerRegistrationChange {
            broker_id: b,
            fenced,
            in_controlled_shutdown: cs,
        });
    }

    fn change(id: Uuid, p: i32, leader: Option<i32>, isr: Option<Vec<i32>>) -> MetadataRecord {
        MetadataRecord::PartitionChange {
            topic_id: id,
            partition: p,
            leader,
            isr,
            replicas: None,
            adding_replicas: None,
            removing_replicas: None,
        }
    }

    fn all(_: i32) -> bool {
        true
    }

    fn el(leader: i32, isr: &[i32], unclean: bool) -> Election {
        Election {
            leader,
            isr: isr.to_vec(),
            unclean,
        }
    }

    #[test]
    fn online_election_keeps_a_valid_leader() {
        let r = reg(&[1, 2, 3], &[1, 2, 3], 2);
        assert_eq!(
            elect_leader(&r, all, false, false),
            el(2, &[1, 2, 3], false)
        );
    }

    #[test]
    fn online_election_takes_isr_members_in_replica_order() {
        // ISR order differs from replica order: replica order wins.
        let r = reg(&[3, 1, 2], &[2, 1], 3);
        assert_eq!(
            elect_leader(&r, |b| b != 3, false, false),
            el(1, &[2, 1], false)
        );
        // Unusable ISR members are skipped.
        assert_eq!(
            elect_leader(&r, |b| b == 2, false, false),
            el(2, &[2, 1], false)
        );
        // A leader outside the ISR is not kept.
        let r = reg(&[1, 2, 3], &[2, 3], 1);
        assert_eq!(elect_leader(&r, all, false, false), el(2, &[2, 3], false));
    }

    #[test]
    fn no_usable_isr_member_without_unclean_leaves_no_leader_and_the_isr() {
        let r = reg(&[1, 2, 3], &[1], 1);
        assert_eq!(
            elect_leader(&r, |b| b != 1, false, false),
            el(NO_LEADER, &[1], false)
        );
    }

    #[test]
    fn unclean_election_only_when_allowed_and_only_without_isr_candidates() {
        let r = reg(&[1, 2, 3], &[1], 1);
        assert_eq!(elect_leader(&r, |b| b != 1, true, false), el(2, &[2], true));
        assert_eq!(elect_leader(&r, |b| b == 3, true, false), el(3, &[3], true));
        // An ISR candidate is preferred to an unclean one even when unclean is allowed.
        let r = reg(&[1, 2, 3], &[1, 3], 1);
        assert_eq!(
            elect_leader(&r, |b| b != 1, true, false),
            el(3, &[1, 3], false)
        );
        // Nobody usable at all.
        let r = reg(&[1, 2], &[1], 1);
        assert_eq!(
            elect_leader(&r, |_| false, true, false),
            el(NO_LEADER, &[1], false)
        );
    }

    #[test]
    fn preferred_election_outcomes() {
        // Preferred in ISR and usable: elected even though the current leader is fine.
        let r = reg(&[1, 2, 3], &[1, 2, 3], 2);
        assert_eq!(elect_leader(&r, all, false, true), el(1, &[1, 2, 3], false));
        // Preferred not in ISR: current leader kept.
        let r = reg(&[1, 2, 3], &[2, 3], 2);
        assert_eq!(elect_leader(&r, all, false, true), el(2, &[2, 3], false));
        // Preferred unusable, current leader unusable: next valid replica.
        let r = reg(&[1, 2, 3], &[1, 2, 3], 2);
        assert_eq!(
            elect_leader(&r, |b| b == 3, false, true),
            el(3, &[1, 2, 3], false)
        );
        // Preferred never unclean.
        let r = reg(&[1, 2, 3], &[1], NO_LEADER);
        assert_eq!(
            elect_leader(&r, |b| b != 1, true, true),
            el(NO_LEADER, &[1], false)
        );
    }

    #[test]
    fn build_isr_shrink_keeps_leader_epoch() {
        let id = Uuid::nil();
        let r = reg(&[1, 2, 3], &[1, 2, 3], 1);
        assert_eq!(
            build_partition_change(id, 0, &r, vec![1, 2], all, ElectionKind::Online),
            Some(change(id, 0, None, Some(vec![1, 2])))
        );
        // Nothing changes: no record.
        assert_eq!(
            build_partition_change(id, 0, &r, vec![1, 2, 3], all, ElectionKind::Online),
            None
        );
    }

    #[test]
    fn build_never_writes_an_empty_isr() {
        let id = Uuid::nil();
        let r = reg(&[1, 2, 3], &[1], 1);
        assert_eq!(
            build_partition_change(id, 0, &r, vec![], |b| b != 1, ElectionKind::Online),
            Some(change(id, 0, Some(NO_LEADER), None))
        );
        // Unclean: new leader and ISR = just it.
        assert_eq!(
            build_partition_change(id, 0, &r, vec![], |b| b != 1, ElectionKind::Unclean),
            Some(change(id, 0, Some(2), Some(vec![2])))
        );
        // Already leaderless and still no candidate: no record.
        let r = reg(&[1, 2, 3], &[1], NO_LEADER);
        assert_eq!(
            build_partition_change(id, 0, &r, vec![], |b| b != 1, ElectionKind::Online),
            None
        );
    }

    #[test]
    fn alter_partition_shrinks_and_expands_isr() {
        let (img, id) = image(3, &[reg(&[1, 2, 3], &[1, 2, 3], 1)]);
        let recs = alter_partition(&img, 1, id, 0, 5, 10, vec![1, 3]).unwrap();
        assert_eq!(recs, vec![change(id, 0, None, Some(vec![1, 3]))]);
        let mut next = img.clone();
        next.replay(&recs[0]);
        let p = &next.topic("t").unwrap().partitions[&0];
        assert_eq!((p.leader_epoch, p.partition_epoch), (5, 11));
        // Expand back with the new partition epoch.
        let recs = alter_partition(&next, 1, id, 0, 5, 11, vec![1, 3, 2]).unwrap();
        assert_eq!(recs, vec![change(id, 0, None, Some(vec![1, 3, 2]))]);
        // Same ISR: nothing to write.
        assert_eq!(
            alter_partition(&img, 1, id, 0, 5, 10, vec![1, 2, 3]).unwrap(),
            vec![]
        );
    }

    #[test]
    fn alter_partition_rejections_follow_kafka() {
        use AlterPartitionError as E;
        let (mut img, id) = image(4, &[reg(&[1, 2, 3], &[1, 2, 3], 1)]);
        let code = |r: Result<Vec<MetadataRecord>, E>| r.unwrap_err().code();
        assert_eq!(code(alter_partition(&img, 9, id, 0, 5, 10, vec![1])), 77);
        assert_eq!(
            code(alter_partition(
                &img,
                1,
                Uuid::from_u128(1),
                0,
                5,
                10,
                vec![1]
            )),
            100
        );
        assert_eq!(code(alter_partition(&img, 1, id, 3, 5, 10, vec![1])), 3);
        // Newer epochs than ours: NOT_CONTROLLER (checked before staleness and leadership).
        assert_eq!(code(alter_partition(&img, 2, id, 0, 6, 10, vec![1])), 41);
        assert_eq!(code(alter_partition(&img, 1, id, 0, 5, 11, vec![1])), 41);
        // Stale leader epoch, even from a non-leader.
        assert_eq!(code(alter_partition(&img, 2, id, 0, 4, 10, vec![1])), 74);
        // Not the leader: INVALID_REQUEST.
        assert_eq!(code(alter_partition(&img, 2, id, 0, 5, 10, vec![1, 2])), 42);
        // Stale partition epoch.
        assert_eq!(code(alter_partition(&img, 1, id, 0, 5, 9, vec![1])), 95);
        // Not a replica, duplicate, without the leader, empty: INVALID_REQUEST.
        assert_eq!(code(alter_partition(&img, 1, id, 0, 5, 10, vec![1, 4])), 42);
        assert_eq!(code(alter_partition(&img, 1, id, 0, 5, 10, vec![1, 1])), 42);
        assert_eq!(code(alter_partition(&img, 1, id, 0, 5, 10, vec![2, 3])), 42);
        assert_eq!(code(alter_partition(&img, 1, id, 0, 5, 10, vec![])), 42);
        // Fenced or shutting-down member: INELIGIBLE_REPLICA.
        set(&mut img, 3, Some(true), None);
        assert_eq!(
            code(alter_partition(&img, 1, id, 0, 5, 10, vec![1, 3])),
            107
        );
        set(&mut img, 3, Some(false), Some(true));
        assert_eq!(
            code(alter_partition(&img, 1, id, 0, 5, 10, vec![1, 3])),
            107
        );
        // Shrinking away the ineligible one is fine.
        assert!(alter_partition(&img, 1, id, 0, 5, 10, vec![1, 2]).is_ok());
    }

    #[test]
    fn alter_partition_by_a_shutting_down_leader_is_ineligible() {
        let (mut img, id) = image(3, &[reg(&[1, 2, 3], &[1, 2], 1)]);
        set(&mut img, 1, None, Some(true));
        let e = alter_partition(&img, 1, id, 0, 5, 10, vec![1, 2]).unwrap_err();
        assert_eq!(e.code(), 107);
    }

    #[test]
    fn preferred_leader_election_outcomes() {
        let (mut img, id) = image(
            3,
            &[
                reg(&[1, 2, 3], &[1, 2, 3], 1),         // already preferred
                reg(&[1, 2, 3], &[1, 2, 3], 2),         // preferred available
                reg(&[1, 2, 3], &[2, 3], 2),            // preferred not in ISR
                reg(&[1, 2, 3], &[1, 2, 3], NO_LEADER), // leaderless
            ],
        );
        let e = preferred_leader_election(&img, "t", 0).unwrap_err();
        assert_eq!((e.code(), e), (84, ElectLeadersError::ElectionNotNeeded));
        assert_eq!(
            preferred_leader_election(&img, "t", 1).unwrap(),
            vec![change(id, 1, Some(1), None)]
        );
        assert_eq!(
            preferred_leader_election(&img, "t", 2).unwrap_err().code(),
            80
        );
        assert_eq!(
            preferred_leader_election(&img, "t", 3).unwrap(),
            vec![change(id, 3, Some(1), None)]
        );
        assert_eq!(
            preferred_leader_election(&img, "t", 9).unwrap_err().code(),
            3
        );
        assert_eq!(
            preferred_leader_election(&img, "x", 0).unwrap_err().code(),
            3
        );
        // Preferred replica fenced: not available, leader stays.
        set(&mut img, 1, Some(true), None);
        assert_eq!(
            preferred_leader_election(&img, "t", 1).unwrap_err().code(),
            80
        );
        // Leaderless with the preferred fenced: another ISR member is elected (as Kafka).
        assert_eq!(
            preferred_leader_election(&img, "t", 3).unwrap(),
            vec![change(id, 3, Some(2), None)]
        );
    }

    #[test]
    fn unclean_leader_election_outcomes() {
        let (mut img, id) = image(
            3,
            &[
                reg(&[1, 2, 3], &[1, 2, 3], 1),
                reg(&[1, 2, 3], &[1], NO_LEADER),
                reg(&[1, 2], &[1], NO_LEADER),
            ],
        );
        assert_eq!(
            unclean_leader_election(&img, "t", 0).unwrap_err().code(),
            84
        );
        set(&mut img, 1, Some(true), None);
        assert_eq!(
            unclean_leader_election(&img, "t", 1).unwrap(),
            vec![change(id, 1, Some(2), Some(vec![2]))]
        );
        set(&mut img, 2, Some(true), None);
        assert_eq!(
            unclean_leader_election(&img, "t", 2).unwrap_err().code(),
            83
        );
        // An ISR member that came back is elected cleanly.
        set(&mut img, 1, Some(false), None);
        assert_eq!(
            unclean_leader_election(&img, "t", 2).unwrap(),
            vec![change(id, 2, Some(1), None)]
        );
        assert_eq!(unclean_leader_election(&img, "t", 7).unwrap_err().code(), 3);
    }

    #[test]
    fn reassignment_starts_completes_on_isr_and_cancels() {
        let (mut img, id) = image(3, &[reg(&[1, 2], &[1, 2], 1)]);
        let e = |r: Result<Vec<MetadataRecord>, ReassignmentError>| r.unwrap_err().code();
        assert_eq!(
            e(alter_partition_reassignment(&img, "x", 0, Some(vec![1]))),
            3
        );
        assert_eq!(
            e(alter_partition_reassignment(&img, "t", 0, Some(vec![2, 9]))),
            39
        );
        assert_eq!(e(alter_partition_reassignment(&img, "t", 0, None)), 85);
        for r in alter_partition_reassignment(&img, "t", 0, Some(vec![2, 3])).unwrap() {
            img.replay(&r);
        }
        let p = &img.topic("t").unwrap().partitions[&0];
        assert_eq!(
            (
                &p.replicas[..],
                &p.adding_replicas[..],
                &p.removing_replicas[..]
            ),
            (&[2, 3, 1][..], &[3][..], &[1][..])
        );
        // The leader's ISR expansion to include 3 completes it; leader 1 is removed.
        let (le, pe) = (p.leader_epoch, p.partition_epoch);
        let recs = alter_partition(&img, 1, id, 0, le, pe, vec![1, 2, 3]).unwrap();
        for r in &recs {
            img.replay(r);
        }
        let p = &img.topic("t").unwrap().partitions[&0];
        assert_eq!(p.replicas, vec![2, 3]);
        assert_eq!(p.isr, vec![2, 3]);
        assert_eq!(p.leader, 2);
        assert_eq!(p.leader_epoch, le + 1);
        assert!(!p.is_reassigning());
        // Start another, then cancel it: the adding replica goes away.
        for r in alter_partition_reassignment(&img, "t", 0, Some(vec![3, 1])).unwrap() {
            img.replay(&r);
        }
        assert!(img.topic("t").unwrap().partitions[&0].is_reassigning());
        for r in alter_partition_reassignment(&img, "t", 0, None).unwrap() {
            img.replay(&r);
        }
        let p = &img.topic("t").unwrap().partitions[&0];
        assert_eq!(p.replicas, vec![3, 2]);
        assert_eq!(p.isr, vec![2, 3]);
        assert!(!p.is_reassigning());
        // Shrinking to a subset of the ISR completes at once.
        for r in alter_partition_reassignment(&img, "t", 0, Some(vec![3])).unwrap() {
            img.replay(&r);
        }
        let p = &img.topic("t").unwrap().partitions[&0];
        assert_eq!(
            (p.replicas.clone(), p.isr.clone(), p.leader),
            (vec![3], vec![3], 3)
        );
    }

    #[test]
    fn old_partition_json_replays_without_reassignment_fields() {
        let r: MetadataRecord = serde_json::from_str(
            r#"{"type":"Partition","topic_id":"00000000-0000-0000-0000-000000000000","partition":0,"replicas":[1],"isr":[1],"leader":1,"leader_epoch":0,"partition_epoch":0}"#,
        )
        .unwrap();
        assert!(
            matches!(r, MetadataRecord::Partition { ref adding_replicas, .. } if adding_replicas.is_empty())
        );
    }
}

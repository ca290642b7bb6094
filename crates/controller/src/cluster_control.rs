//! Broker liveness and what follows from it, as Kafka's `ClusterControlManager`,
//! `BrokerHeartbeatManager` and the `handleBroker*` paths of `ReplicationControlManager` do it.
//!
//! The record-producing functions are pure: they read a [`MetadataImage`] and return the
//! records to commit ([`MetadataRecord::BrokerRegistrationChange`] and
//! [`MetadataRecord::PartitionChange`]). [`BrokerHeartbeatManager`] is the active controller's
//! in-memory session table: it is not replayed, and a newly active controller starts a fresh
//! one in which every registered broker gets a full session timeout of grace.
//!
//! `unclean_for(topic)` tells whether `unclean.leader.election.enable` holds for a topic
//! ([`unclean_election_enabled`] computes it from the image and the broker default).

use std::collections::BTreeMap;

use crate::image::MetadataImage;
use crate::partition_change::{build_partition_change, ElectionKind, NO_LEADER};
use crate::record::MetadataRecord;

/// Kafka's `broker.session.timeout.ms` default.
pub const DEFAULT_BROKER_SESSION_TIMEOUT_MS: u64 = 9000;

/// Kafka's `max.elections.per.imbalance` bound on the periodic election tasks.
pub const MAX_ELECTIONS_PER_IMBALANCE: usize = 1000;

/// The topic's `unclean.leader.election.enable`: its override if set, else `broker_default`.
pub fn unclean_election_enabled(image: &MetadataImage, topic: &str, broker_default: bool) -> bool {
    image
        .topic(topic)
        .and_then(|t| t.configs.get("unclean.leader.election.enable"))
        .map_or(broker_default, |v| v.eq_ignore_ascii_case("true"))
}

/// Removes `broker` from every ISR it is in (which covers every partition it leads), electing
/// new leaders where it led. Kafka's `generateLeaderAndIsrUpdates(brokerToRemove = broker)`:
/// `broker` is never an acceptable leader, others must be active; an ISR it is the last
/// member of is kept (leader [`NO_LEADER`]) unless the topic allows an unclean election.
pub(crate) fn remove_from_isrs(
    image: &MetadataImage,
    broker: i32,
    unclean_for: &impl Fn(&str) -> bool,
    records: &mut Vec<MetadataRecord>,
) {
    for topic in image.topics.values() {
        let kind = ElectionKind::online(unclean_for(&topic.name));
        for (&partition, reg) in &topic.partitions {
            if !reg.isr.contains(&broker) {
                continue;
            }
            let usable = |b: i32| b != broker && image.replica_can_lead(b, &topic.id, partition);
            let target: Vec<i32> = reg.isr.iter().copied().filter(|&b| b != broker).collect();
            records.extend(build_partition_change(
                topic.id, partition, reg, target, usable, kind,
            ));
        }
    }
}

/// Fences `broker` (session expired, or it asked to be fenced): Kafka's `handleBrokerFenced`.
/// First a `PartitionChange` for every partition whose ISR holds it — it leaves the ISR, and
/// where it led, the first active ISR member in replica order takes over (leader epoch + 1);
/// where it was the last ISR member the ISR keeps it and the partition goes leaderless, or,
/// if `unclean_for(topic)`, the first active replica leads with ISR = just it. Then the
/// `BrokerRegistrationChange { fenced: Some(true) }` (Kafka's order; the batch commits
/// atomically). Nothing for an unregistered broker.
pub fn fence_broker(
    image: &MetadataImage,
    broker: i32,
    unclean_for: impl Fn(&str) -> bool,
) -> Vec<MetadataRecord> {
    if !image.brokers.contains_key(&broker) {
        return Vec::new();
    }
    let mut records = Vec::new();
    remove_from_isrs(image, broker, &unclean_for, &mut records);
    records.push(MetadataRecord::BrokerRegistrationChange {
        broker_id: broker,
        fenced: Some(true),
        in_controlled_shutdown: None,
    });
    records
}

/// Starts a controlled shutdown of `broker`: Kafka's `handleBrokerInControlledShutdown`. The
/// `BrokerRegistrationChange { in_controlled_shutdown: Some(true) }` (unless already set),
/// then the same ISR removal and re-election as [`fence_broker`]; the broker stays unfenced
/// (it keeps replicating until it is fenced or shuts down). Nothing for an unregistered broker.
pub fn begin_controlled_shutdown(
    image: &MetadataImage,
    broker: i32,
    unclean_for: impl Fn(&str) -> bool,
) -> Vec<MetadataRecord> {
    let Some(info) = image.brokers.get(&broker) else {
        return Vec::new();
    };
    let mut records = Vec::new();
    if !info.in_controlled_shutdown {
        records.push(MetadataRecord::BrokerRegistrationChange {
            broker_id: broker,
            fenced: None,
            in_controlled_shutdown: Some(true),
        });
    }
    remove_from_isrs(image, broker, &unclean_for, &mut records);
    records
}

/// Unfences `broker`: Kafka's `handleBrokerUnfenced`. The
/// `BrokerRegistrationChange { fenced: Some(false) }` (also clearing a controlled shutdown
/// left over from the broker's previous run, as Kafka's new-incarnation registration does),
/// then an election for every leaderless partition, with `broker` acceptable and other
/// brokers only if active: the first acceptable ISR member in replica order leads (so a
/// partition whose last ISR member was `broker` comes back with it), or, if
/// `unclean_for(topic)`, the first acceptable replica with ISR = just it. The ISR is not
/// extended: `broker` rejoins other ISRs through AlterPartition once caught up. Nothing for an
/// unregistered broker.
pub fn unfence_broker(
    image: &MetadataImage,
    broker: i32,
    unclean_for: impl Fn(&str) -> bool,
) -> Vec<MetadataRecord> {
    let Some(info) = image.brokers.get(&broker) else {
        return Vec::new();
    };
    let mut records = vec![MetadataRecord::BrokerRegistrationChange {
        broker_id: broker,
        fenced: Some(false),
        in_controlled_shutdown: info.in_controlled_shutdown.then_some(false),
    }];
    for topic in image.topics.values() {
        let kind = ElectionKind::online(unclean_for(&topic.name));
        for (&partition, reg) in &topic.partitions {
            if reg.leader != NO_LEADER {
                continue;
            }
            let usable = |b: i32| {
                !image.replica_is_offline(b, &topic.id, partition)
                    && (b == broker || image.broker_is_active(b))
            };
            records.extend(build_partition_change(
                topic.id,
                partition,
                reg,
                reg.isr.clone(),
                usable,
                kind,
            ));
        }
    }
    records
}

/// Kafka's periodic `maybeElectUncleanLeaders`: an UNCLEAN election for leaderless partitions
/// of topics with `unclean_for(topic)`, at most `max` records. Returns the records and whether
/// the bound was reached (run again soon).
pub fn elect_unclean_leaders(
    image: &MetadataImage,
    unclean_for: impl Fn(&str) -> bool,
    max: usize,
) -> (Vec<MetadataRecord>, bool) {
    let mut records = Vec::new();
    for topic in image.topics.values() {
        if !unclean_for(&topic.name) {
            continue;
        }
        for (&partition, reg) in &topic.partitions {
            if records.len() >= max {
                return (records, true);
            }
            let usable = |b: i32| image.replica_can_lead(b, &topic.id, partition);
            if reg.leader == NO_LEADER {
                records.extend(build_partition_change(
                    topic.id,
                    partition,
                    reg,
                    reg.isr.clone(),
                    usable,
                    ElectionKind::Unclean,
                ));
            }
        }
    }
    let more = records.len() >= max;
    (records, more)
}

/// Kafka's `maybeBalancePartitionLeaders` (`auto.leader.rebalance.enable`): a PREFERRED
/// election for every partition not led by its preferred replica (`replicas[0]`), at most
/// `max` records; partitions whose preferred replica cannot lead are left as they are.
/// Returns the records and whether the bound was reached.
pub fn balance_partition_leaders(image: &MetadataImage, max: usize) -> (Vec<MetadataRecord>, bool) {
    let mut records = Vec::new();
    for topic in image.topics.values() {
        for (&partition, reg) in &topic.partitions {
            if records.len() >= max {
                return (records, true);
            }
            let usable = |b: i32| image.replica_can_lead(b, &topic.id, partition);
            if reg.replicas.first() == Some(&reg.leader) {
                continue;
            }
            records.extend(build_partition_change(
                topic.id,
                partition,
                reg,
                reg.isr.clone(),
                usable,
                ElectionKind::Preferred,
            ));
        }
    }
    let more = records.len() >= max;
    (records, more)
}

/// The active controller's broker sessions (Kafka's `BrokerHeartbeatManager`, reduced to
/// liveness): the last time, in monotonic milliseconds, each broker was heard from under its
/// registered broker epoch (a heartbeat under another epoch is refused before it counts, and a
/// new incarnation's registration drops the old one's session). Not part of the metadata: a
/// controller that becomes active builds a new one with [`Self::activate`], giving every
/// unfenced broker a fresh session, as Kafka's `ClusterControlManager.activate`. A fenced
/// broker has no live session (Kafka's `hasValidSession`), whatever its last contact.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BrokerHeartbeatManager {
    last_contact_ms: BTreeMap<i32, u64>,
}

impl BrokerHeartbeatManager {
    pub fn new() -> Self {
        Self::default()
    }

    /// The table of a controller that has just become active: every unfenced broker in
    /// `image` was last heard from `now_ms`.
    pub fn activate(image: &MetadataImage, now_ms: u64) -> Self {
        let mut m = Self::new();
        m.reset(
            image
                .brokers
                .values()
                .filter(|b| !b.fenced)
                .map(|b| b.node_id),
            now_ms,
        );
        m
    }

    /// Kafka's `hasValidSession`: `broker` is registered, unfenced and heard from within the
    /// session timeout.
    pub fn has_live_session(
        &self,
        image: &MetadataImage,
        broker: i32,
        now_ms: u64,
        session_timeout_ms: u64,
    ) -> bool {
        image.brokers.get(&broker).is_some_and(|b| !b.fenced)
            && self.has_valid_session(broker, now_ms, session_timeout_ms)
    }

    /// Forgets every session and starts `brokers` afresh at `now_ms` (controller failover).
    pub fn reset(&mut self, brokers: impl IntoIterator<Item = i32>, now_ms: u64) {
        self.last_contact_ms = brokers.into_iter().map(|b| (b, now_ms)).collect();
    }

    /// A heartbeat or registration from `broker` at `now_ms`. Time never moves backwards.
    pub fn touch(&mut self, broker: i32, now_ms: u64) {
        let t = self.last_contact_ms.entry(broker).or_insert(now_ms);
        *t = (*t).max(now_ms);
    }

    /// Drops `broker`'s session (unregistered, or a new incarnation replaces it).
    pub fn remove(&mut self, broker: i32) {
        self.last_contact_ms.remove(&broker);
    }

    pub fn last_contact_ms(&self, broker: i32) -> Option<u64> {
        self.last_contact_ms.get(&broker).copied()
    }

    /// Kafka's `hasValidSession` for a tracked broker: last contact + timeout >= now.
    pub fn has_valid_session(&self, broker: i32, now_ms: u64, session_timeout_ms: u64) -> bool {
        self.last_contact_ms(broker)
            .is_some_and(|t| t.saturating_add(session_timeout_ms) >= now_ms)
    }

    /// Tracked brokers whose session has run out (last contact + timeout < now), in id order.
    pub fn expired(&self, now_ms: u64, session_timeout_ms: u64) -> Vec<i32> {
        self.last_contact_ms
            .iter()
            .filter(|(_, &t)| t.saturating_add(session_timeout_ms) < now_ms)
            .map(|(&b, _)| b)
            .collect()
    }

    /// The expired brokers that must be fenced now: registered and not yet fenced in `image`
    /// (Kafka only expires sessions of unfenced brokers). Feed each to [`fence_broker`].
    pub fn brokers_to_fence(
        &self,
        image: &MetadataImage,
        now_ms: u64,
        session_timeout_ms: u64,
    ) -> Vec<i32> {
        self.expired(now_ms, session_timeout_ms)
            .into_iter()
            .filter(|b| image.brokers.get(b).is_some_and(|i| !i.fenced))
            .collect()
    }

    /// When the next unfenced broker's session runs out (Kafka's `nextCheckTimeNs`): the
    /// earliest last contact + timeout over tracked brokers unfenced in `image`.
    pub fn next_expiry_ms(&self, image: &MetadataImage, session_timeout_ms: u64) -> Option<u64> {
        self.last_contact_ms
            .iter()
            .filter(|(b, _)| image.brokers.get(b).is_some_and(|i| !i.fenced))
            .map(|(_, &t)| t.saturating_add(session_timeout_ms))
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::partition_change::tests::{image, reg, set};
    use uuid::Uuid;

    fn never(_: &str) -> bool {
        false
    }

    fn always(_: &str) -> bool {
        true
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

    fn fence(b: i32, f: bool) -> MetadataRecord {
        MetadataRecord::BrokerRegistrationChange {
            broker_id: b,
            fenced: Some(f),
            in_controlled_shutdown: None,
        }
    }

    fn apply(img: &mut MetadataImage, recs: &[MetadataRecord]) {
        for r in recs {
            img.replay(r);
        }
    }

    #[test]
    fn fencing_the_leader_moves_leadership_in_replica_order() {
        let (mut img, id) = image(
            3,
            &[
                reg(&[1, 2, 3], &[1, 2, 3], 1), // led by 1
                reg(&[2, 1, 3], &[3, 1, 2], 2), // 1 is a follower
                reg(&[2, 3], &[2, 3], 2),       // 1 is not a replica
                reg(&[3, 1, 2], &[1, 3, 2], 1), // led by 1, ISR order differs from replicas
            ],
        );
        let recs = fence_broker(&img, 1, never);
        assert_eq!(
            recs,
            vec![
                change(id, 0, Some(2), Some(vec![2, 3])),
                change(id, 1, None, Some(vec![3, 2])),
                change(id, 3, Some(3), Some(vec![3, 2])),
                fence(1, true),
            ]
        );
        apply(&mut img, &recs);
        let t = img.topic("t").unwrap();
        // Leader change: both epochs; ISR-only: partition epoch only.
        let p0 = &t.partitions[&0];
        assert_eq!((p0.leader, p0.leader_epoch, p0.partition_epoch), (2, 6, 11));
        let p1 = &t.partitions[&1];
        assert_eq!((p1.leader, p1.leader_epoch, p1.partition_epoch), (2, 5, 11));
        assert_eq!(t.partitions[&2].partition_epoch, 10);
        assert!(img.brokers[&1].fenced);
    }

    #[test]
    fn fencing_skips_fenced_isr_members() {
        let (mut img, id) = image(3, &[reg(&[1, 2, 3], &[1, 2, 3], 1)]);
        set(&mut img, 2, Some(true), None);
        assert_eq!(
            fence_broker(&img, 1, never),
            vec![change(id, 0, Some(3), Some(vec![2, 3])), fence(1, true)]
        );
    }

    #[test]
    fn fencing_the_last_isr_member_keeps_the_isr_and_goes_leaderless() {
        let (mut img, id) = image(3, &[reg(&[1, 2, 3], &[1], 1)]);
        let recs = fence_broker(&img, 1, never);
        assert_eq!(
            recs,
            vec![change(id, 0, Some(NO_LEADER), None), fence(1, true)]
        );
        apply(&mut img, &recs);
        let p = &img.topic("t").unwrap().partitions[&0];
        assert_eq!(p.isr, vec![1], "the ISR is never empty");
        assert_eq!(
            (p.leader, p.leader_epoch, p.partition_epoch),
            (NO_LEADER, 6, 11)
        );
        // Fencing again: the partition is leaderless with ISR [1]; nothing more to change.
        assert_eq!(fence_broker(&img, 1, never), vec![fence(1, true)]);
    }

    #[test]
    fn fencing_the_last_isr_member_with_unclean_elects_any_live_replica() {
        let (mut img, id) = image(3, &[reg(&[1, 2, 3], &[1], 1)]);
        set(&mut img, 2, Some(true), None);
        let recs = fence_broker(&img, 1, always);
        assert_eq!(
            recs,
            vec![change(id, 0, Some(3), Some(vec![3])), fence(1, true)]
        );
        // Unclean allowed but nobody alive: leaderless, ISR kept.
        set(&mut img, 3, Some(true), None);
        assert_eq!(
            fence_broker(&img, 1, always),
            vec![change(id, 0, Some(NO_LEADER), None), fence(1, true)]
        );
    }

    #[test]
    fn fencing_is_per_topic_unclean() {
        let (mut img, id) = image(2, &[reg(&[1, 2], &[1], 1)]);
        let id2 = Uuid::from_u128(8);
        apply(
            &mut img,
            &[
                MetadataRecord::Topic {
                    name: "u".into(),
                    topic_id: id2,
                },
                MetadataRecord::Partition {
                    topic_id: id2,
                    partition: 0,
                    replicas: vec![1, 2],
                    isr: vec![1],
                    leader: 1,
                    leader_epoch: 0,
                    partition_epoch: 0,
                    adding_replicas: Vec::new(),
                    removing_replicas: Vec::new(),
                },
            ],
        );
        assert_eq!(
            fence_broker(&img, 1, |t| t == "u"),
            vec![
                change(id, 0, Some(NO_LEADER), None),
                change(id2, 0, Some(2), Some(vec![2])),
                fence(1, true),
            ]
        );
    }

    #[test]
    fn fencing_an_unknown_broker_does_nothing() {
        let (img, _) = image(1, &[reg(&[1], &[1], 1)]);
        assert!(fence_broker(&img, 5, never).is_empty());
        assert!(unfence_broker(&img, 5, never).is_empty());
        assert!(begin_controlled_shutdown(&img, 5, never).is_empty());
    }

    #[test]
    fn unfencing_restores_leaderless_partitions() {
        let (mut img, id) = image(
            3,
            &[
                reg(&[1, 2, 3], &[1], 1),
                reg(&[2, 1], &[2, 1], 2),
                reg(&[3, 2], &[3], 3),
            ],
        );
        // 1 goes away: p0 leaderless (ISR kept [1]), p1 loses a follower.
        let recs = fence_broker(&img, 1, never);
        apply(&mut img, &recs);
        assert_eq!(img.topic("t").unwrap().partitions[&0].leader, NO_LEADER);
        let recs = unfence_broker(&img, 1, never);
        assert_eq!(recs, vec![fence(1, false), change(id, 0, Some(1), None)]);
        apply(&mut img, &recs);
        let p0 = &img.topic("t").unwrap().partitions[&0];
        assert_eq!(
            (p0.leader, p0.isr.clone(), p0.leader_epoch),
            (1, vec![1], 7)
        );
        // p1's ISR is not extended by unfencing.
        assert_eq!(img.topic("t").unwrap().partitions[&1].isr, vec![2]);
        assert!(img.broker_is_active(1));
    }

    #[test]
    fn unfencing_a_non_isr_replica_needs_unclean() {
        let (mut img, id) = image(2, &[reg(&[1, 2], &[1], 1)]);
        let recs = fence_broker(&img, 2, never);
        apply(&mut img, &recs);
        let recs = fence_broker(&img, 1, never);
        apply(&mut img, &recs);
        assert_eq!(img.topic("t").unwrap().partitions[&0].leader, NO_LEADER);
        // 2 returns but is not in the ISR [1]: stays leaderless unless unclean is allowed.
        assert_eq!(unfence_broker(&img, 2, never), vec![fence(2, false)]);
        assert_eq!(
            unfence_broker(&img, 2, always),
            vec![fence(2, false), change(id, 0, Some(2), Some(vec![2]))]
        );
    }

    #[test]
    fn unfencing_clears_a_leftover_controlled_shutdown() {
        let (mut img, _) = image(1, &[]);
        set(&mut img, 1, Some(true), Some(true));
        let recs = unfence_broker(&img, 1, never);
        assert_eq!(
            recs,
            vec![MetadataRecord::BrokerRegistrationChange {
                broker_id: 1,
                fenced: Some(false),
                in_controlled_shutdown: Some(false),
            }]
        );
        apply(&mut img, &recs);
        assert!(img.broker_is_active(1));
    }

    #[test]
    fn controlled_shutdown_moves_leadership_and_keeps_broker_unfenced() {
        let (mut img, id) = image(2, &[reg(&[1, 2], &[1, 2], 1), reg(&[1], &[1], 1)]);
        let recs = begin_controlled_shutdown(&img, 1, never);
        assert_eq!(
            recs,
            vec![
                MetadataRecord::BrokerRegistrationChange {
                    broker_id: 1,
                    fenced: None,
                    in_controlled_shutdown: Some(true),
                },
                change(id, 0, Some(2), Some(vec![2])),
                change(id, 1, Some(NO_LEADER), None),
            ]
        );
        apply(&mut img, &recs);
        assert!(!img.brokers[&1].fenced && img.brokers[&1].in_controlled_shutdown);
        // Again: no second registration change; the leaderless partition stays as it is.
        assert!(begin_controlled_shutdown(&img, 1, never).is_empty());
    }

    #[test]
    fn periodic_unclean_elections() {
        let (mut img, id) = image(
            3,
            &[
                reg(&[1, 2], &[1], NO_LEADER),
                reg(&[1, 3], &[1], NO_LEADER),
                reg(&[2], &[2], 2),
            ],
        );
        set(&mut img, 1, Some(true), None);
        assert_eq!(elect_unclean_leaders(&img, never, 10), (vec![], false));
        assert_eq!(
            elect_unclean_leaders(&img, always, 10),
            (
                vec![
                    change(id, 0, Some(2), Some(vec![2])),
                    change(id, 1, Some(3), Some(vec![3]))
                ],
                false
            )
        );
        let (recs, more) = elect_unclean_leaders(&img, always, 1);
        assert_eq!((recs.len(), more), (1, true));
    }

    #[test]
    fn auto_rebalance_moves_leaders_back_to_preferred() {
        let (mut img, id) = image(
            3,
            &[
                reg(&[1, 2, 3], &[1, 2, 3], 2), // can go back to 1
                reg(&[2, 1], &[2, 1], 2),       // balanced
                reg(&[3, 1], &[1], 1),          // preferred not in ISR
            ],
        );
        assert_eq!(
            balance_partition_leaders(&img, MAX_ELECTIONS_PER_IMBALANCE),
            (vec![change(id, 0, Some(1), None)], false)
        );
        let recs = fence_broker(&img, 1, never);
        apply(&mut img, &recs);
        assert_eq!(balance_partition_leaders(&img, 10), (vec![], false));
    }

    #[test]
    fn unclean_config_lookup() {
        let (mut img, _) = image(1, &[]);
        assert!(!unclean_election_enabled(&img, "t", false));
        assert!(unclean_election_enabled(&img, "t", true));
        img.replay(&MetadataRecord::TopicConfig {
            topic: "t".into(),
            name: "unclean.leader.election.enable".into(),
            value: Some("TRUE".into()),
        });
        assert!(unclean_election_enabled(&img, "t", false));
        img.replay(&MetadataRecord::TopicConfig {
            topic: "t".into(),
            name: "unclean.leader.election.enable".into(),
            value: Some("false".into()),
        });
        assert!(!unclean_election_enabled(&img, "t", true));
    }

    #[test]
    fn heartbeat_sessions_expire_after_the_timeout() {
        let (mut img, _) = image(3, &[]);
        let mut hb = BrokerHeartbeatManager::activate(&img, 1000);
        hb.touch(2, 5000);
        hb.touch(2, 4000); // time never goes back
        assert_eq!(hb.last_contact_ms(2), Some(5000));
        // Exactly at last + timeout the session is still valid (Kafka: >=).
        assert_eq!(hb.expired(10_000, 9000), Vec::<i32>::new());
        assert!(hb.has_valid_session(1, 10_000, 9000));
        assert_eq!(hb.expired(10_001, 9000), vec![1, 3]);
        assert!(!hb.has_valid_session(1, 10_001, 9000));
        assert!(
            !hb.has_valid_session(9, 0, 9000),
            "untracked brokers have no session"
        );
        // Already fenced brokers are not fenced again.
        set(&mut img, 3, Some(true), None);
        assert_eq!(hb.brokers_to_fence(&img, 10_001, 9000), vec![1]);
        assert_eq!(hb.next_expiry_ms(&img, 9000), Some(10_000));
        hb.remove(1);
        assert_eq!(hb.expired(10_001, 9000), vec![3]);
        assert_eq!(hb.next_expiry_ms(&img, 9000), Some(14_000));
    }

    #[test]
    fn failover_gives_every_broker_a_fresh_grace_period() {
        let (img, _) = image(2, &[]);
        let mut old = BrokerHeartbeatManager::activate(&img, 0);
        old.touch(1, 100);
        assert_eq!(old.expired(20_000, 9000), vec![1, 2]);
        // The new active controller knows nothing of the old sessions.
        let new = BrokerHeartbeatManager::activate(&img, 20_000);
        assert!(new.expired(29_000, 9000).is_empty());
        assert_eq!(new.expired(29_001, 9000), vec![1, 2]);
        let mut m = new.clone();
        m.reset([2], 30_000);
        assert_eq!(m.last_contact_ms(1), None);
        assert_eq!(m.last_contact_ms(2), Some(30_000));
    }

    #[test]
    fn session_expiry_end_to_end() {
        // Broker 1 leads; it stops heartbeating; it is fenced and 2 takes over; it comes back.
        let (mut img, id) = image(2, &[reg(&[1, 2], &[1, 2], 1)]);
        let mut hb = BrokerHeartbeatManager::activate(&img, 0);
        hb.touch(2, 8000);
        let stale = hb.brokers_to_fence(&img, 9001, DEFAULT_BROKER_SESSION_TIMEOUT_MS);
        assert_eq!(stale, vec![1]);
        let recs = fence_broker(&img, 1, never);
        assert_eq!(recs[0], change(id, 0, Some(2), Some(vec![2])));
        apply(&mut img, &recs);
        assert!(hb
            .brokers_to_fence(&img, 9001, DEFAULT_BROKER_SESSION_TIMEOUT_MS)
            .is_empty());
        hb.touch(1, 12_000);
        let recs = unfence_broker(&img, 1, never);
        apply(&mut img, &recs);
        let p = &img.topic("t").unwrap().partitions[&0];
        assert_eq!((p.leader, p.isr.clone()), (2, vec![2]));
        // The leader 2 lets 1 back in with AlterPartition.
        let recs = crate::partition_change::tests::ap(
            &img,
            2,
            id,
            0,
            p.leader_epoch,
            p.partition_epoch,
            vec![2, 1],
        )
        .unwrap();
        apply(&mut img, &recs);
        assert_eq!(img.topic("t").unwrap().partitions[&0].isr, vec![2, 1]);
    }
}

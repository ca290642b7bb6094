//! Broker registration, as Kafka's `ClusterControlManager.registerBroker` decides it: which
//! records a BrokerRegistration request commits, or why it is refused.
//!
//! Each start of a broker process is an incarnation with a random id. A registration under the
//! registered incarnation id amends it (endpoint, rack) and keeps its broker epoch and flags. A
//! new incarnation gets a new broker epoch — the offset of its `RegisterBroker` record in the
//! metadata log (see [`crate::image::BrokerInfo::epoch`]) — and is registered fenced; its first
//! heartbeat that has replayed the log up to that record unfences it. A new incarnation is
//! refused with DUPLICATE_BROKER_REGISTRATION while the registered one still has a live session
//! (an unfenced broker heard from within `broker.session.timeout.ms`): the old process may still
//! be serving, or it died without a word and its leaderships have not moved yet. Once the
//! session expired and the old incarnation was fenced, the new one registers.
//!
//! A new incarnation that did not shut down cleanly — its previous broker epoch, read from the
//! `.kafka_cleanshutdown` files its last clean shutdown left, is not the registered epoch — may
//! have lost whatever its page cache held, or its whole disk. It is taken out of every ISR
//! before it is registered (Kafka's `handleBrokerShutdown`; KIP-966's unclean-shutdown handling,
//! which Strom applies without the eligible leader replicas): it leads none of those partitions
//! again until it has caught up as a follower and its leader has added it back (AlterPartition
//! with the broker epoch of its fetches, KIP-903). Where it is the last ISR member the ISR keeps
//! it and the partition goes leaderless, as Kafka does without ELR. Kafka 4.4 with ELR off does
//! this on every new incarnation; Strom only on an unclean one: a clean shutdown left every
//! ISR through its controlled shutdown, with its log flushed.

use uuid::Uuid;

use crate::cluster_control::remove_from_isrs;
use crate::image::MetadataImage;
use crate::record::MetadataRecord;
use strom_protocol::ErrorCode;

/// A BrokerRegistration request, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerRegistration {
    pub node_id: i32,
    /// Random at each start of the broker process.
    pub incarnation_id: Uuid,
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
    /// The broker epoch its last clean shutdown recorded (`PreviousBrokerEpoch`, v3+); -1 when
    /// there was none (a crash, a lost disk, a first start).
    pub previous_broker_epoch: i64,
}

/// A refused registration, with its Kafka error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistrationError {
    /// Another incarnation of this broker id has a live session.
    #[error(
        "Another broker is registered with that broker id. If the broker was recently restarted \
         this should self-resolve once the heartbeat manager expires the broker's session."
    )]
    DuplicateBrokerRegistration,
    /// The broker's log dirs were formatted for another cluster.
    #[error("Expected cluster ID {expected}, but got cluster ID {got}")]
    InconsistentClusterId { expected: String, got: String },
}

impl RegistrationError {
    pub fn code(&self) -> i16 {
        match self {
            Self::DuplicateBrokerRegistration => ErrorCode::DuplicateBrokerRegistration.code(),
            Self::InconsistentClusterId { .. } => ErrorCode::InconsistentClusterId.code(),
        }
    }
}

/// Whether a restarted broker is checked as Kafka does, or trusted as Strom did before broker
/// epochs (`strom.unsafe.trust.restarted.brokers`, for tests that must show what the checks
/// prevent: no DUPLICATE_BROKER_REGISTRATION, no ISR removal, the new incarnation keeps the
/// old one's flags — and its leaderships — with whatever it lost).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Incarnations {
    Checked,
    UnsafeTrusted,
}

/// The records that register `req` (empty: an amendment that changes nothing), or why it is
/// refused. `live_session`: the registered incarnation is unfenced and its session has not
/// expired. `unclean_for(topic)`: `unclean.leader.election.enable` for the ISR removal of an
/// unclean shutdown.
pub fn register_broker(
    image: &MetadataImage,
    req: &BrokerRegistration,
    live_session: bool,
    incarnations: Incarnations,
    unclean_for: impl Fn(&str) -> bool,
) -> Result<Vec<MetadataRecord>, RegistrationError> {
    let existing = image.brokers.get(&req.node_id);
    let new_incarnation = existing.is_none_or(|b| b.incarnation_id != req.incarnation_id);
    if incarnations == Incarnations::UnsafeTrusted {
        return Ok(vec![MetadataRecord::RegisterBroker {
            node_id: req.node_id,
            host: req.host.clone(),
            port: req.port,
            rack: req.rack.clone(),
            incarnation_id: req.incarnation_id,
            broker_epoch: existing.filter(|_| !new_incarnation).map(|b| b.epoch),
            fenced: Some(existing.is_some_and(|b| b.fenced)),
            in_controlled_shutdown: Some(existing.is_some_and(|b| b.in_controlled_shutdown)),
        }]);
    }
    if new_incarnation && existing.is_some() && live_session {
        return Err(RegistrationError::DuplicateBrokerRegistration);
    }
    let mut records = Vec::new();
    let record = |broker_epoch, fenced, in_controlled_shutdown| MetadataRecord::RegisterBroker {
        node_id: req.node_id,
        host: req.host.clone(),
        port: req.port,
        rack: req.rack.clone(),
        incarnation_id: req.incarnation_id,
        broker_epoch,
        fenced: Some(fenced),
        in_controlled_shutdown: Some(in_controlled_shutdown),
    };
    match existing {
        Some(b) if !new_incarnation => {
            let same = b.host == req.host && b.port == req.port && b.rack == req.rack;
            if !same {
                records.push(record(Some(b.epoch), b.fenced, b.in_controlled_shutdown));
            }
        }
        _ => {
            let clean = existing.is_some_and(|b| b.epoch == req.previous_broker_epoch);
            if !clean {
                remove_from_isrs(image, req.node_id, &unclean_for, &mut records);
            }
            // The epoch is the record's offset, assigned where it is replayed.
            records.push(record(None, true, false));
        }
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::partition_change::tests::{image, reg};
    use crate::partition_change::NO_LEADER;

    fn never(_: &str) -> bool {
        false
    }

    fn req(node_id: i32, incarnation: u128, previous: i64) -> BrokerRegistration {
        BrokerRegistration {
            node_id,
            incarnation_id: Uuid::from_u128(incarnation),
            host: "localhost".into(),
            port: 9000 + node_id,
            rack: None,
            previous_broker_epoch: previous,
        }
    }

    fn apply(img: &mut MetadataImage, recs: &[MetadataRecord]) {
        for r in recs {
            img.replay(r);
        }
    }

    /// The test image registers broker b with incarnation b at offset b - 1.
    #[test]
    fn same_incarnation_amends_and_keeps_epoch_and_flags() {
        let (mut img, _) = image(2, &[]);
        assert!(
            register_broker(&img, &req(1, 1, -1), true, Incarnations::Checked, never)
                .unwrap()
                .is_empty()
        );
        let mut moved = req(1, 1, -1);
        moved.port = 7000;
        let recs = register_broker(&img, &moved, true, Incarnations::Checked, never).unwrap();
        apply(&mut img, &recs);
        let b = &img.brokers[&1];
        assert_eq!((b.port, b.epoch, b.fenced), (7000, 0, false));
    }

    #[test]
    fn new_incarnation_with_a_live_session_is_a_duplicate() {
        let (img, _) = image(2, &[]);
        let e =
            register_broker(&img, &req(1, 11, 0), true, Incarnations::Checked, never).unwrap_err();
        assert_eq!(e.code(), 101);
        // A clean previous epoch does not matter: the old process may still be serving.
        assert!(register_broker(&img, &req(1, 11, 0), true, Incarnations::Checked, never).is_err());
        // A first registration has nothing to be a duplicate of.
        assert!(register_broker(&img, &req(3, 3, -1), true, Incarnations::Checked, never).is_ok());
    }

    /// After a clean shutdown (previous epoch = the registered one): a new epoch, fenced, no
    /// ISR change.
    #[test]
    fn clean_new_incarnation_is_registered_fenced_with_a_new_epoch() {
        let (mut img, _) = image(3, &[reg(&[1, 2, 3], &[1, 2, 3], 1)]);
        let at = img.offset as i64;
        let recs =
            register_broker(&img, &req(1, 11, 0), false, Incarnations::Checked, never).unwrap();
        assert_eq!(recs.len(), 1, "{recs:?}");
        apply(&mut img, &recs);
        let b = &img.brokers[&1];
        assert_eq!(b.epoch, at, "the registration record's offset");
        assert_eq!(b.incarnation_id, Uuid::from_u128(11));
        assert!(b.fenced && !b.in_controlled_shutdown);
        assert_eq!(img.topic("t").unwrap().partitions[&0].isr, vec![1, 2, 3]);
    }

    /// After a crash (no previous epoch, or another one): out of every ISR first, its
    /// leaderships moved, then registered fenced under a new epoch.
    #[test]
    fn unclean_new_incarnation_leaves_every_isr() {
        for previous in [-1, 5] {
            let (mut img, id) = image(
                3,
                &[
                    reg(&[1, 2, 3], &[1, 2, 3], 1), // led by 1
                    reg(&[2, 1, 3], &[2, 1], 2),    // 1 follows
                    reg(&[1, 2], &[1], 1),          // 1 is the last ISR member
                ],
            );
            let recs = register_broker(
                &img,
                &req(1, 11, previous),
                false,
                Incarnations::Checked,
                never,
            )
            .unwrap();
            assert!(matches!(
                recs.last(),
                Some(MetadataRecord::RegisterBroker {
                    broker_epoch: None,
                    fenced: Some(true),
                    ..
                })
            ));
            let at = img.offset as i64 + recs.len() as i64 - 1;
            apply(&mut img, &recs);
            assert_eq!(img.brokers[&1].epoch, at);
            let t = img.topic_by_id(&id).unwrap();
            let (p0, p1, p2) = (&t.partitions[&0], &t.partitions[&1], &t.partitions[&2]);
            assert_eq!((p0.leader, p0.isr.clone()), (2, vec![2, 3]));
            assert_eq!(p0.leader_epoch, 6);
            assert_eq!((p1.leader, p1.isr.clone()), (2, vec![2]));
            // Without ELR the last member stays in the ISR, leaderless until it is unfenced.
            assert_eq!((p2.leader, p2.isr.clone()), (NO_LEADER, vec![1]));
        }
    }

    /// With `strom.unsafe.trust.restarted.brokers` a restart is taken at its word: no
    /// refusal, no ISR change, the flags kept (Strom before broker epochs).
    #[test]
    fn unsafe_trusted_incarnations_change_nothing_but_the_epoch() {
        let (mut img, id) = image(3, &[reg(&[1, 2, 3], &[1, 2, 3], 1)]);
        let recs = register_broker(
            &img,
            &req(1, 11, -1),
            true,
            Incarnations::UnsafeTrusted,
            never,
        )
        .unwrap();
        assert_eq!(recs.len(), 1);
        apply(&mut img, &recs);
        let b = &img.brokers[&1];
        assert!(!b.fenced && b.epoch > 0);
        let p = &img.topic_by_id(&id).unwrap().partitions[&0];
        assert_eq!((p.leader, p.isr.clone()), (1, vec![1, 2, 3]));
    }

    /// The first registration of a broker id: a new incarnation like any other.
    #[test]
    fn first_registration_is_fenced() {
        let (mut img, _) = image(1, &[]);
        let recs =
            register_broker(&img, &req(4, 4, -1), false, Incarnations::Checked, never).unwrap();
        apply(&mut img, &recs);
        assert!(img.brokers[&4].fenced);
        assert_eq!(img.brokers[&4].epoch, img.offset as i64 - 1);
    }
}

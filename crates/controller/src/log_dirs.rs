//! Replicas in offline log directories (KIP-858), as Kafka's
//! `ReplicationControlManager.handleAssignReplicasToDirs` handles them.
//!
//! A broker tells the active controller which log directory each of its replicas is in with
//! AssignReplicasToDirs. A replica assigned to an offline directory — Strom's brokers use
//! Kafka's reserved [`DIRECTORY_LOST`] for a replica whose log could not be opened or written —
//! leaves every ISR and, where it led, leadership moves to another ISR member (Kafka's
//! `generateLeaderAndIsrUpdates` with the broker to remove; the last ISR member stays and the
//! partition goes leaderless, as for a fenced broker). It is not an acceptable leader while
//! offline (Kafka's `LeaderAcceptor`). A later assignment to any other directory (the broker
//! opened the log after a restart) brings it back online; a leaderless partition then elects.
//!
//! Deviation from Kafka: a Kafka broker reports a failed *directory* (BrokerHeartbeat
//! `OfflineLogDirs`) and the controller finds the replicas through each partition's recorded
//! directories; Strom's failures are often per partition (one unusable partition directory,
//! descriptors exhausted while opening one log), so the broker reports the replicas
//! themselves, with Kafka's own API and reserved id, and the image keeps only which replicas
//! are offline (`MetadataImage::offline_replicas`) rather than every replica's directory.

use strom_protocol::ErrorCode;
use uuid::Uuid;

use super::{ControllerError, QuorumController};
use crate::image::MetadataImage;
use crate::partition_change::{build_partition_change, ElectionKind, NO_LEADER};
use crate::record::MetadataRecord;

/// Kafka's `DirectoryId.LOST`: "unspecified offline dirs"; never an online directory.
pub const DIRECTORY_LOST: Uuid = Uuid::from_u64_pair(0, 2);

/// One directory of an AssignReplicasToDirs request: its id and the (topic id, partition)s.
pub type DirectoryAssignment = (Uuid, Vec<(Uuid, i32)>);

/// The per-partition answer: (topic id, partition, Kafka error code).
pub type AssignmentResult = (Uuid, i32, i16);

/// The records for `broker`'s assignments, and a code per partition (Kafka's per-partition
/// errors: UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER for a
/// partition the broker is no replica of). `unclean_for(topic)`: the topic's
/// `unclean.leader.election.enable`.
pub fn assign_replicas_to_dirs(
    image: &MetadataImage,
    broker: i32,
    dirs: &[DirectoryAssignment],
    unclean_for: impl Fn(&str) -> bool,
) -> (Vec<MetadataRecord>, Vec<Vec<AssignmentResult>>) {
    let mut records = Vec::new();
    let mut elections = Vec::new();
    let mut results = Vec::with_capacity(dirs.len());
    for (dir, replicas) in dirs {
        let offline = *dir == DIRECTORY_LOST;
        let mut changed = Vec::new();
        let mut codes = Vec::with_capacity(replicas.len());
        for &(topic_id, partition) in replicas {
            let error = match image.topic_by_id(&topic_id) {
                None => Some(ErrorCode::UnknownTopicId),
                Some(t) => match t.partitions.get(&partition) {
                    None => Some(ErrorCode::UnknownTopicOrPartition),
                    Some(reg) if !reg.replicas.contains(&broker) => {
                        Some(ErrorCode::NotLeaderOrFollower)
                    }
                    Some(_) => {
                        if image.replica_is_offline(broker, &topic_id, partition) != offline {
                            changed.push((topic_id, partition));
                        }
                        elections.push((topic_id, partition, offline));
                        None
                    }
                },
            };
            codes.push((topic_id, partition, error.map_or(0, |e| e.code())));
        }
        if !changed.is_empty() {
            records.push(MetadataRecord::ReplicaDirectories {
                broker_id: broker,
                directory: *dir,
                replicas: changed,
            });
        }
        results.push(codes);
    }
    for (topic_id, partition, offline) in elections {
        let Some(topic) = image.topic_by_id(&topic_id) else {
            continue;
        };
        let reg = &topic.partitions[&partition];
        // The image still has the old directory states: judge this broker by the new one.
        let usable = |b: i32| {
            image.broker_is_active(b)
                && if b == broker {
                    !offline
                } else {
                    !image.replica_is_offline(b, &topic_id, partition)
                }
        };
        let kind = ElectionKind::online(unclean_for(&topic.name));
        let change = if offline {
            let target: Vec<i32> = reg.isr.iter().copied().filter(|&b| b != broker).collect();
            build_partition_change(topic_id, partition, reg, target, usable, kind)
        } else if reg.leader == NO_LEADER {
            build_partition_change(topic_id, partition, reg, reg.isr.clone(), usable, kind)
        } else {
            None
        };
        records.extend(change);
    }
    (records, results)
}

impl QuorumController {
    /// AssignReplicasToDirs from `broker_id`: commits the directory changes and the resulting
    /// leader and ISR changes in one batch; the per-directory, per-partition results.
    pub async fn assign_replicas_to_dirs(
        &self,
        broker_id: i32,
        dirs: &[DirectoryAssignment],
        unclean_default: bool,
    ) -> Result<Vec<Vec<AssignmentResult>>, ControllerError> {
        let _op = self.op_lock.lock().await;
        self.check_active()?;
        let image = self.image();
        if !image.brokers.contains_key(&broker_id) {
            return Err(ControllerError::Code {
                code: ErrorCode::BrokerIdNotRegistered.code(),
                message: format!("Broker ID {broker_id} is not currently registered"),
            });
        }
        let unclean =
            |t: &str| crate::cluster_control::unclean_election_enabled(&image, t, unclean_default);
        let (records, results) = assign_replicas_to_dirs(&image, broker_id, dirs, unclean);
        let moved = records
            .iter()
            .filter(|r| matches!(r, MetadataRecord::PartitionChange { .. }))
            .count();
        self.commit(records).await?;
        if moved > 0 {
            tracing::warn!(
                broker_id,
                partitions = moved,
                "replicas in offline log directories: leadership and ISR updated"
            );
        }
        Ok(results)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::partition_change::tests::{image, reg};

    fn replay(img: &mut MetadataImage, records: &[MetadataRecord]) {
        for r in records {
            img.replay(r);
        }
    }

    #[test]
    fn an_offline_leader_replica_moves_leadership_and_leaves_the_isr() {
        let (mut img, id) = image(3, &[reg(&[1, 2, 3], &[1, 2, 3], 1)]);
        let (records, results) =
            assign_replicas_to_dirs(&img, 1, &[(DIRECTORY_LOST, vec![(id, 0)])], |_| false);
        assert_eq!(results, vec![vec![(id, 0, 0)]]);
        replay(&mut img, &records);
        let p = &img.topic_by_id(&id).unwrap().partitions[&0];
        assert_eq!(p.leader, 2);
        assert_eq!(p.isr, vec![2, 3]);
        assert!(img.replica_is_offline(1, &id, 0));
        // Reporting it again changes nothing.
        let (again, _) =
            assign_replicas_to_dirs(&img, 1, &[(DIRECTORY_LOST, vec![(id, 0)])], |_| false);
        assert!(again.is_empty(), "{again:?}");
    }

    #[test]
    fn the_last_isr_member_goes_leaderless_and_comes_back_online() {
        let (mut img, id) = image(1, &[reg(&[1], &[1], 1)]);
        let (records, _) =
            assign_replicas_to_dirs(&img, 1, &[(DIRECTORY_LOST, vec![(id, 0)])], |_| false);
        replay(&mut img, &records);
        let p = &img.topic_by_id(&id).unwrap().partitions[&0];
        assert_eq!((p.leader, p.isr.clone()), (NO_LEADER, vec![1]));
        // After a restart the broker opens the log in a real directory: online, elected again.
        let dir = Uuid::new_v4();
        let (records, _) = assign_replicas_to_dirs(&img, 1, &[(dir, vec![(id, 0)])], |_| false);
        replay(&mut img, &records);
        let p = &img.topic_by_id(&id).unwrap().partitions[&0];
        assert_eq!(p.leader, 1);
        assert!(!img.replica_is_offline(1, &id, 0));
        assert!(img.offline_replicas.is_empty());
    }

    #[test]
    fn an_offline_replica_is_not_elected_and_bad_references_get_errors() {
        let (mut img, id) = image(3, &[reg(&[1, 2], &[1, 2], 1)]);
        let (records, _) =
            assign_replicas_to_dirs(&img, 2, &[(DIRECTORY_LOST, vec![(id, 0)])], |_| false);
        replay(&mut img, &records);
        let p = &img.topic_by_id(&id).unwrap().partitions[&0];
        assert_eq!((p.leader, p.isr.clone()), (1, vec![1]));
        // Now the leader's replica fails too: 2 is offline, so nobody may lead.
        let (records, _) =
            assign_replicas_to_dirs(&img, 1, &[(DIRECTORY_LOST, vec![(id, 0)])], |_| true);
        replay(&mut img, &records);
        assert_eq!(
            img.topic_by_id(&id).unwrap().partitions[&0].leader,
            NO_LEADER
        );
        let (_, results) = assign_replicas_to_dirs(
            &img,
            3,
            &[(DIRECTORY_LOST, vec![(id, 0), (id, 7), (Uuid::new_v4(), 0)])],
            |_| false,
        );
        let codes: Vec<i16> = results[0].iter().map(|r| r.2).collect();
        assert_eq!(
            codes,
            vec![
                ErrorCode::NotLeaderOrFollower.code(),
                ErrorCode::UnknownTopicOrPartition.code(),
                ErrorCode::UnknownTopicId.code()
            ]
        );
    }

    #[test]
    fn offline_replicas_survive_a_snapshot_and_topic_removal_clears_them() {
        let (mut img, id) = image(2, &[reg(&[1, 2], &[1, 2], 1)]);
        let (records, _) =
            assign_replicas_to_dirs(&img, 2, &[(DIRECTORY_LOST, vec![(id, 0)])], |_| false);
        replay(&mut img, &records);
        let mut rebuilt = MetadataImage::default();
        replay(&mut rebuilt, &crate::state::image_to_records(&img));
        assert_eq!(rebuilt.offline_replicas, img.offline_replicas);
        img.replay(&MetadataRecord::RemoveTopic { topic_id: id });
        assert!(img.offline_replicas.is_empty());
    }

    #[test]
    fn other_elections_never_pick_an_offline_replica() {
        // 1 offline and out of the ISR; then 2, the leader, is fenced: with unclean elections
        // allowed the only other replica, 1, must still not lead.
        let (mut img, id) = image(2, &[reg(&[1, 2], &[1, 2], 2)]);
        let (records, _) =
            assign_replicas_to_dirs(&img, 1, &[(DIRECTORY_LOST, vec![(id, 0)])], |_| false);
        replay(&mut img, &records);
        let fence = crate::cluster_control::fence_broker(&img, 2, |_| true);
        replay(&mut img, &fence);
        let p = &img.topic_by_id(&id).unwrap().partitions[&0];
        assert_eq!(p.leader, NO_LEADER);
        let (records, _) = crate::cluster_control::elect_unclean_leaders(&img, |_| true, 10);
        assert!(records.is_empty(), "{records:?}");
        assert!(crate::partition_change::unclean_leader_election(&img, "t", 0).is_err());
    }
}

//! Tells the active controller which of this broker's replicas are offline (Kafka's
//! `AssignmentsManager` sending AssignReplicasToDirs, KIP-858): an offline replica is assigned
//! to Kafka's reserved `DirectoryId.LOST`, and the controller moves its leadership and takes it
//! out of the ISR (`strom_controller::log_dirs`); a replica the image still lists as offline
//! but whose log this broker has open (after a restart) is assigned to its real dir's
//! `directory.id` and is online again.
//!
//! The loop compares the broker's state with the image, so a lost or refused request is simply
//! sent again on the next round; it wakes on a new offline replica and otherwise every
//! `broker.heartbeat.interval.ms`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use strom_controller::log_dirs::{DirectoryAssignment, DIRECTORY_LOST};
use strom_controller::MetadataImage;
use strom_protocol::kafka::messages::assign_replicas_to_dirs_request::{
    DirectoryData, PartitionData, TopicData,
};
use strom_protocol::kafka::messages::{AssignReplicasToDirsRequest, BrokerId};
use tokio::sync::watch;
use uuid::Uuid;

use crate::replica_manager::ReplicaManager;
use crate::server::Broker;

/// The assignments the controller does not have yet: offline replicas not offline in the image,
/// and open replicas the image still has offline. Only partitions this broker is a replica of
/// in `image`.
pub fn pending_assignments(
    rm: &ReplicaManager,
    image: &MetadataImage,
    node: i32,
) -> Vec<DirectoryAssignment> {
    let is_replica = |topic_id: &Uuid, p: i32| {
        image
            .topic_by_id(topic_id)
            .and_then(|t| t.partitions.get(&p))
            .is_some_and(|r| r.replicas.contains(&node))
    };
    let mut by_dir: BTreeMap<Uuid, Vec<(Uuid, i32)>> = BTreeMap::new();
    for (topic_id, p) in rm.offline_replicas() {
        if is_replica(&topic_id, p) && !image.replica_is_offline(node, &topic_id, p) {
            by_dir
                .entry(DIRECTORY_LOST)
                .or_default()
                .push((topic_id, p));
        }
    }
    if image.offline_replicas.contains_key(&node) {
        for part in rm.all() {
            if !image.replica_is_offline(node, &part.topic_id, part.index) {
                continue;
            }
            let dir = rm
                .log_manager()
                .log_dir_of(&(part.topic.clone(), part.index))
                .map_or(Uuid::nil(), |d| d.directory_id);
            by_dir
                .entry(dir)
                .or_default()
                .push((part.topic_id, part.index));
        }
    }
    by_dir.into_iter().collect()
}

/// The AssignReplicasToDirs request for `dirs`.
pub fn request(node: i32, dirs: &[DirectoryAssignment]) -> AssignReplicasToDirsRequest {
    let directories = dirs
        .iter()
        .map(|(dir, replicas)| {
            let mut topics: BTreeMap<Uuid, Vec<i32>> = BTreeMap::new();
            for &(t, p) in replicas {
                topics.entry(t).or_default().push(p);
            }
            DirectoryData::default().with_id(*dir).with_topics(
                topics
                    .into_iter()
                    .map(|(t, ps)| {
                        TopicData::default().with_topic_id(t).with_partitions(
                            ps.into_iter()
                                .map(|p| PartitionData::default().with_partition_index(p))
                                .collect(),
                        )
                    })
                    .collect(),
            )
        })
        .collect();
    AssignReplicasToDirsRequest::default()
        .with_broker_id(BrokerId(node))
        .with_directories(directories)
}

/// The decoded directories of a request, for the controller.
pub fn from_request(req: &AssignReplicasToDirsRequest) -> Vec<DirectoryAssignment> {
    req.directories
        .iter()
        .map(|d| {
            let replicas = d
                .topics
                .iter()
                .flat_map(|t| t.partitions.iter().map(|p| (t.topic_id, p.partition_index)))
                .collect();
            (d.id, replicas)
        })
        .collect()
}

/// Runs until `stop`: sends the pending assignments whenever there are any.
pub async fn run(broker: Arc<Broker>, mut stop: watch::Receiver<bool>) {
    let cfg = broker.config.clone();
    let every = Duration::from_millis(cfg.broker_heartbeat_interval_ms.clamp(10, 2_000));
    let rm = broker.replica_manager.clone();
    loop {
        let pending = pending_assignments(&rm, &broker.image(), cfg.node_id);
        if !pending.is_empty() {
            let n: usize = pending.iter().map(|(_, r)| r.len()).sum();
            match broker
                .channel
                .assign_replicas_to_dirs(&pending, cfg.unclean_leader_election_enable)
                .await
            {
                Ok(()) => {
                    tracing::info!(replicas = n, "replica directories sent to the controller")
                }
                Err(e) => tracing::debug!(error = %e, "AssignReplicasToDirs failed; will retry"),
            }
        }
        tokio::select! {
            _ = stop.changed() => return,
            () = rm.offline_changed.notified() => {}
            () = tokio::time::sleep(every) => {}
        }
    }
}

//! Replica placement: Kafka's rack-unaware and rack-aware algorithms
//! (`AdminUtils.assignReplicasToBrokers`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{BuildHasher, RandomState};

use uuid::Uuid;

use crate::controller::ControllerError;
use crate::image::MetadataImage;
use crate::record::MetadataRecord;

pub(crate) fn broker_racks(image: &MetadataImage) -> Vec<(i32, Option<String>)> {
    image
        .brokers
        .values()
        .map(|b| (b.node_id, b.rack.clone()))
        .collect()
}

pub(crate) fn random_index(n: usize) -> usize {
    RandomState::new().hash_one(0u8) as usize % n.max(1)
}

/// Kafka's placement (`AdminUtils.assignReplicasToBrokers`): rack-aware when every broker has a
/// rack, rack-unaware when none has (a mix is placed rack-unaware, with a warning).
pub fn assign_replicas(
    partitions: i32,
    replication_factor: usize,
    brokers: &[(i32, Option<String>)],
    fixed_start: Option<usize>,
    start_partition: i32,
) -> Vec<Vec<i32>> {
    let with_rack = brokers.iter().filter(|(_, r)| r.is_some()).count();
    if with_rack == brokers.len() && with_rack > 0 {
        let racks: Vec<(i32, String)> = brokers
            .iter()
            .map(|(b, r)| (*b, r.clone().unwrap_or_default()))
            .collect();
        return assign_replicas_rack_aware(
            partitions,
            replication_factor,
            &racks,
            fixed_start,
            start_partition,
        );
    }
    if with_rack > 0 {
        tracing::warn!("not every broker has a rack: placing replicas without rack awareness");
    }
    let mut ids: Vec<i32> = brokers.iter().map(|(b, _)| *b).collect();
    ids.sort_unstable();
    assign_replicas_rack_unaware(
        partitions,
        replication_factor,
        &ids,
        fixed_start,
        start_partition,
    )
}

/// Brokers ordered so consecutive ones sit in different racks: racks in name order, taking one
/// broker (lowest id first) from each in turn (`getRackAlternatedBrokerList`).
pub fn rack_alternated_brokers(brokers: &[(i32, String)]) -> Vec<i32> {
    let mut by_rack: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (b, r) in brokers {
        by_rack.entry(r.as_str()).or_default().push(*b);
    }
    let mut iters: Vec<std::vec::IntoIter<i32>> = by_rack
        .into_values()
        .map(|mut v| {
            v.sort_unstable();
            v.into_iter()
        })
        .collect();
    let mut out = Vec::with_capacity(brokers.len());
    let mut i = 0;
    while out.len() < brokers.len() {
        if let Some(b) = iters[i].next() {
            out.push(b);
        }
        i = (i + 1) % iters.len();
    }
    out
}

/// Kafka's rack-aware placement (`assignReplicasToBrokersRackAware`): leaders round-robin over
/// the rack-alternated list; each follower is the next shifted broker whose rack (and which
/// broker) has no replica of the partition yet, as long as such racks (brokers) remain.
pub fn assign_replicas_rack_aware(
    partitions: i32,
    replication_factor: usize,
    brokers: &[(i32, String)],
    fixed_start: Option<usize>,
    start_partition: i32,
) -> Vec<Vec<i32>> {
    let arranged = rack_alternated_brokers(brokers);
    let n = arranged.len();
    if n == 0 {
        return Vec::new();
    }
    let rack_of: HashMap<i32, &str> = brokers.iter().map(|(b, r)| (*b, r.as_str())).collect();
    let num_racks = rack_of.values().collect::<HashSet<_>>().len();
    let start_index = fixed_start.unwrap_or_else(|| random_index(n));
    let mut shift = fixed_start.unwrap_or_else(|| random_index(n));
    let first_partition = start_partition.max(0) as usize;
    let mut out = Vec::with_capacity(partitions as usize);
    for current in first_partition..first_partition + partitions.max(0) as usize {
        if current > 0 && current.is_multiple_of(n) {
            shift += 1;
        }
        let first = (current + start_index) % n;
        let leader = arranged[first];
        let mut replicas = vec![leader];
        let mut racks_with: HashSet<&str> = HashSet::from([rack_of[&leader]]);
        let mut brokers_with: HashSet<i32> = HashSet::from([leader]);
        let mut k = 0;
        for _ in 0..replication_factor.saturating_sub(1) {
            loop {
                let broker = arranged[replica_index(first, shift * num_racks, k, n)];
                let rack = rack_of[&broker];
                k += 1;
                if (!racks_with.contains(rack) || racks_with.len() == num_racks)
                    && (!brokers_with.contains(&broker) || brokers_with.len() == n)
                {
                    replicas.push(broker);
                    racks_with.insert(rack);
                    brokers_with.insert(broker);
                    break;
                }
            }
        }
        out.push(replicas);
    }
    out
}

pub(crate) fn replica_index(first: usize, second_shift: usize, replica: usize, n: usize) -> usize {
    let shift = 1 + (second_shift + replica) % (n - 1);
    (first + shift) % n
}

/// Kafka's rack-unaware placement (`AdminUtils.assignReplicasToBrokersRackUnaware`): leaders
/// round-robin from a random start, followers shifted so replicas spread evenly. `fixed_start`
/// makes it deterministic for tests.
pub fn assign_replicas_rack_unaware(
    partitions: i32,
    replication_factor: usize,
    brokers: &[i32],
    fixed_start: Option<usize>,
    start_partition: i32,
) -> Vec<Vec<i32>> {
    let n = brokers.len();
    if n == 0 {
        return Vec::new();
    }
    let start_index = fixed_start.unwrap_or_else(|| random_index(n));
    let mut shift = fixed_start.unwrap_or_else(|| random_index(n));
    let first_partition = start_partition.max(0) as usize;
    let mut out = Vec::with_capacity(partitions as usize);
    for current in first_partition..first_partition + partitions.max(0) as usize {
        if current > 0 && current.is_multiple_of(n) {
            shift += 1;
        }
        let first = (current + start_index) % n;
        let mut replicas = vec![brokers[first]];
        for j in 0..replication_factor.saturating_sub(1) {
            replicas.push(brokers[replica_index(first, shift, j, n)]);
        }
        out.push(replicas);
    }
    out
}

/// Validates a manual assignment of partitions `first_partition ..` (Kafka's
/// `validateManualPartitionAssignment` plus the checks around it in `createTopic` /
/// `createPartitions`): every replica registered and named once, one replication factor
/// (`expected_rf`, the topic's, when growing it), and at least one replica that can lead —
/// with none the partition could never come online. `indexed`: the partition numbers come with
/// the request (CreateTopics) and must be consecutive from `first_partition`; otherwise they are
/// `first_partition + i` (CreatePartitions).
pub(crate) fn validate_assignment(
    image: &MetadataImage,
    assignments: &[(i32, Vec<i32>)],
    first_partition: i32,
    expected_rf: Option<usize>,
) -> Result<Vec<Vec<i32>>, ControllerError> {
    let invalid = |m: String| Err(ControllerError::InvalidReplicaAssignment(m));
    let mut by_partition: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
    let mut rf = expected_rf;
    for (p, replicas) in assignments {
        if by_partition.contains_key(p) {
            return invalid(format!(
                "Found multiple manual partition assignments for partition {p}"
            ));
        }
        if replicas.is_empty() {
            return invalid(
                "The manual partition assignment includes an empty replica list.".into(),
            );
        }
        let mut sorted = replicas.clone();
        sorted.sort_unstable();
        for (i, b) in sorted.iter().enumerate() {
            if !image.brokers.contains_key(b) {
                return invalid(format!(
                    "The manual partition assignment includes broker {b}, but no such broker is registered."
                ));
            }
            if i > 0 && sorted[i - 1] == *b {
                return invalid(format!(
                    "The manual partition assignment includes the broker {b} more than once."
                ));
            }
        }
        if let Some(rf) = rf.filter(|&rf| rf != replicas.len()) {
            return invalid(format!(
                "The manual partition assignment includes a partition with {} replica(s), but this is not consistent with previous partitions, which have {rf} replica(s).",
                replicas.len()
            ));
        }
        rf = Some(replicas.len());
        if !replicas.iter().any(|&b| image.broker_is_active(b)) {
            return invalid(format!(
                "All brokers specified in the manual partition assignment for partition {p} are fenced or in controlled shutdown."
            ));
        }
        by_partition.insert(*p, replicas.clone());
    }
    let consecutive = by_partition
        .keys()
        .enumerate()
        .all(|(i, &p)| p == first_partition + i as i32);
    if !consecutive {
        return invalid("partitions should be a consecutive 0-based integer sequence".into());
    }
    Ok(by_partition.into_values().collect())
}

/// The brokers automatic placement may use (Kafka's `ClusterDescriber.usableBrokers` with the
/// fenced ones dropped): registered, unfenced and not in controlled shutdown. A replica on a
/// dead broker would start outside the ISR, and as the first replica it would lead.
pub(crate) fn usable_broker_racks(image: &MetadataImage) -> Vec<(i32, Option<String>)> {
    broker_racks(image)
        .into_iter()
        .filter(|(b, _)| image.broker_is_active(*b))
        .collect()
}

/// Places `partitions` new partitions numbered from `start_partition` on the usable brokers,
/// with the placer's checks (`StripedReplicaPlacer.place`); the error is the placer's message,
/// which CreateTopics prefixes and CreatePartitions answers as is.
pub(crate) fn place_partitions(
    image: &MetadataImage,
    partitions: i32,
    replication_factor: usize,
    start_partition: i32,
) -> Result<Vec<Vec<i32>>, String> {
    let usable = usable_broker_racks(image);
    if usable.is_empty() {
        return Err("All brokers are currently fenced.".into());
    }
    if replication_factor > usable.len() {
        return Err(format!(
            "The target replication factor of {replication_factor} cannot be reached because only {} broker(s) are registered.",
            usable.len()
        ));
    }
    Ok(assign_replicas(
        partitions,
        replication_factor,
        &usable,
        None,
        start_partition,
    ))
}

/// The record of a new partition (Kafka's `buildPartitionRegistration`): the ISR is the
/// replicas that can lead, in replica order, and the first of them leads. `None` when no
/// replica can lead.
pub(crate) fn new_partition_record(
    image: &MetadataImage,
    topic_id: Uuid,
    partition: i32,
    replicas: Vec<i32>,
) -> Option<MetadataRecord> {
    let isr: Vec<i32> = replicas
        .iter()
        .copied()
        .filter(|&b| image.broker_is_active(b))
        .collect();
    Some(MetadataRecord::Partition {
        topic_id,
        partition,
        leader: *isr.first()?,
        isr,
        replicas,
        leader_epoch: 0,
        partition_epoch: 0,
        adding_replicas: Vec::new(),
        removing_replicas: Vec::new(),
    })
}

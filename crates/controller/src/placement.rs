//! Replica placement: Kafka's rack-unaware and rack-aware algorithms
//! (`AdminUtils.assignReplicasToBrokers`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{BuildHasher, RandomState};

use crate::controller::ControllerError;
use crate::image::MetadataImage;

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

pub(crate) fn validate_assignment(
    assignments: &[(i32, Vec<i32>)],
    first_partition: i32,
    brokers: &[i32],
) -> Result<Vec<Vec<i32>>, ControllerError> {
    let mut sorted: Vec<&(i32, Vec<i32>)> = assignments.iter().collect();
    sorted.sort_by_key(|(p, _)| *p);
    let rf = sorted.first().map_or(0, |(_, r)| r.len());
    let mut out = Vec::new();
    for (i, (p, replicas)) in sorted.iter().enumerate() {
        if *p != first_partition + i as i32 {
            return Err(ControllerError::InvalidReplicaAssignment(
                "Partitions must be consecutive and start at the current partition count.".into(),
            ));
        }
        if replicas.is_empty() {
            return Err(ControllerError::InvalidReplicaAssignment(format!(
                "The manual partition assignment includes a partition with no replicas: partition {p}."
            )));
        }
        if replicas.len() != rf {
            return Err(ControllerError::InvalidReplicaAssignment(
                "All partitions should have the same number of replicas.".into(),
            ));
        }
        let distinct: HashSet<&i32> = replicas.iter().collect();
        if distinct.len() != replicas.len() {
            return Err(ControllerError::InvalidReplicaAssignment(format!(
                "The manual partition assignment specifies the same node id more than once: partition {p}."
            )));
        }
        if let Some(b) = replicas.iter().find(|b| !brokers.contains(b)) {
            return Err(ControllerError::InvalidReplicaAssignment(format!(
                "The manual partition assignment includes broker {b}, but no such broker is registered."
            )));
        }
        out.push(replicas.clone());
    }
    Ok(out)
}

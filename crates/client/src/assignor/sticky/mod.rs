//! The `sticky` and `cooperative-sticky` assignors (kafka-clients' `AbstractStickyAssignor`,
//! `StickyAssignor`, `CooperativeStickyAssignor`).
//!
//! Both balance the partitions over the members while keeping each partition with its previous
//! owner where balance allows. When every member subscribes to the same topics the constrained
//! builder ([`constrained`]) runs: quotas of ⌊P/N⌋ and ⌈P/N⌉ partitions, owned partitions kept
//! up to the quota, the rest dealt round robin. Otherwise the general builder ([`general`])
//! keeps all still-valid owned partitions, hands out the rest to the least loaded eligible
//! member and then moves partitions until no move improves the balance.
//!
//! The two assignors differ in where the previous assignment comes from ([`MemberData`]):
//! `sticky` reads it from its user data (`StickyAssignorUserData` v1: the partitions and the
//! generation; v0 without the generation), `cooperative-sticky` from the subscription's owned
//! partitions and generation (or, before subscription v2, the generation in its user data).
//! `cooperative-sticky` also withholds every partition that changes owner in this rebalance:
//! the old owner revokes it first and a follow-up rebalance gives it to the new owner.
//!
//! Both are rack aware (KIP-881): when members and replicas have racks and some partition is
//! not replicated on every rack, owned partitions on a mismatched rack are given up and new
//! partitions go to a member in a replica's rack where the balance allows.

mod constrained;
mod general;
mod java;
mod user_data;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Mutex;

use bytes::Bytes;

use super::{
    Assignment, AssignorError, Cluster, PartitionAssignor, RebalanceProtocol, Subscription,
    TopicPartition,
};
pub use user_data::{
    decode_cooperative_generation, decode_sticky_user_data, encode_cooperative_user_data,
    encode_sticky_user_data,
};

/// Java's `DEFAULT_GENERATION`: no generation known.
pub const DEFAULT_GENERATION: i32 = -1;

/// What a member reports about its previous assignment (Java's `MemberData`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberData {
    pub partitions: Vec<TopicPartition>,
    pub generation: Option<i32>,
}

/// Which of the two assignors runs: they share the algorithm and differ in their member data
/// and in the cooperative adjustment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flavor {
    Sticky,
    Cooperative,
}

impl Flavor {
    fn member_data(self, sub: &Subscription) -> MemberData {
        match self {
            // Eager: the member revoked everything before joining, so its previous assignment
            // only survives in the user data it sent.
            Flavor::Sticky => match &sub.user_data {
                Some(data) if !data.is_empty() => decode_sticky_user_data(data),
                _ => MemberData {
                    partitions: Vec::new(),
                    generation: None,
                },
            },
            Flavor::Cooperative => {
                let generation = if sub.generation_id >= 0 {
                    Some(sub.generation_id)
                } else {
                    sub.user_data
                        .as_ref()
                        .map(|d| decode_cooperative_generation(d))
                };
                MemberData {
                    partitions: sub.owned_partitions.clone(),
                    generation,
                }
            }
        }
    }
}

/// The subscription's own generation as Java's `Subscription.generationId()` holds it.
fn subscription_generation(sub: &Subscription) -> i32 {
    if sub.generation_id < 0 {
        DEFAULT_GENERATION
    } else {
        sub.generation_id
    }
}

/// Which racks the consumers and replicas are on (Java's `RackInfo`).
#[derive(Debug, Default)]
struct RackInfo {
    /// Member id → rack; empty unless rack-aware assignment applies.
    consumer_racks: HashMap<String, String>,
    /// Partition → racks of its replicas; empty unless rack-aware assignment applies.
    partition_racks: HashMap<TopicPartition, BTreeSet<String>>,
    /// Partition → how many consumers share a rack with one of its replicas; filled whenever
    /// any consumer has a rack (even when rack-aware assignment does not apply: Java then still
    /// orders the constrained path's unassigned partitions by it).
    num_consumers_by_partition: HashMap<TopicPartition, usize>,
}

impl RackInfo {
    fn new(
        partitions: &BTreeMap<String, Vec<(i32, Vec<String>)>>,
        subs: &BTreeMap<String, Subscription>,
    ) -> Self {
        let mut consumers_by_rack: HashMap<String, usize> = HashMap::new();
        let mut member_racks: Vec<(String, String)> = Vec::new();
        for (id, sub) in subs {
            if let Some(rack) = sub.rack_id.as_ref().filter(|r| !r.is_empty()) {
                *consumers_by_rack.entry(rack.clone()).or_default() += 1;
                member_racks.push((id.clone(), rack.clone()));
            }
        }
        if consumers_by_rack.is_empty() {
            return Self::default();
        }
        let mut partition_racks: HashMap<TopicPartition, BTreeSet<String>> = HashMap::new();
        let mut all_partition_racks: HashSet<String> = HashSet::new();
        for (topic, infos) in partitions {
            for (p, racks) in infos {
                let set: BTreeSet<String> = racks.iter().cloned().collect();
                all_partition_racks.extend(set.iter().cloned());
                partition_racks.insert(TopicPartition::new(topic.clone(), *p), set);
            }
        }
        let num_consumers_by_partition = partition_racks
            .iter()
            .map(|(tp, racks)| {
                let n = racks
                    .iter()
                    .map(|r| consumers_by_rack.get(r).copied().unwrap_or(0))
                    .sum();
                (tp.clone(), n)
            })
            .collect();
        // Rack-aware only if some consumer rack holds replicas and the racks make a
        // difference: not when every partition is on every rack.
        let use_racks = consumers_by_rack
            .keys()
            .any(|r| all_partition_racks.contains(r))
            && !partition_racks
                .values()
                .all(|s| s.len() == all_partition_racks.len());
        if use_racks {
            Self {
                consumer_racks: member_racks.into_iter().collect(),
                partition_racks,
                num_consumers_by_partition,
            }
        } else {
            Self {
                num_consumers_by_partition,
                ..Self::default()
            }
        }
    }

    /// True when the consumer has a rack and none of the partition's replicas is on it.
    fn racks_mismatch(&self, consumer: &str, tp: &TopicPartition) -> bool {
        match self.consumer_racks.get(consumer) {
            None => false,
            Some(rack) => self
                .partition_racks
                .get(tp)
                .is_none_or(|racks| !racks.contains(rack)),
        }
    }

    /// Partitions with the fewest same-rack consumers first (stable).
    fn sort_partitions_by_rack_consumers(&self, partitions: &mut [TopicPartition]) {
        if self.num_consumers_by_partition.is_empty() {
            return;
        }
        partitions.sort_by_key(|tp| {
            self.num_consumers_by_partition
                .get(tp)
                .copied()
                .unwrap_or(0)
        });
    }

    /// The index of the first consumer (cyclically from `first`) on one of the partition's
    /// replica racks.
    fn next_rack_consumer(
        &self,
        tp: &TopicPartition,
        consumers: &[String],
        first: usize,
    ) -> Option<usize> {
        let racks = self.partition_racks.get(tp).filter(|r| !r.is_empty())?;
        (0..consumers.len())
            .map(|i| (first + i) % consumers.len())
            .find(|&i| {
                self.consumer_racks
                    .get(&consumers[i])
                    .is_some_and(|r| racks.contains(r))
            })
    }
}

/// The inputs both builders share.
struct Input<'a> {
    subs: &'a BTreeMap<String, Subscription>,
    /// Partition count per subscribed topic with metadata (Java's `partitionsPerTopic`).
    partition_counts: BTreeMap<String, usize>,
    /// Member ids in the iteration order of Java's `HashMap` of subscriptions.
    member_order: Vec<String>,
    racks: RackInfo,
    flavor: Flavor,
}

impl Input<'_> {
    fn total_partitions(&self) -> usize {
        self.partition_counts.values().sum()
    }
}

/// The owned partitions each member may keep, after resolving partitions claimed by several
/// members (Java's `allSubscriptionsEqual`).
struct Claims {
    all_equal: bool,
    max_generation: i32,
    owned: HashMap<String, Vec<TopicPartition>>,
    multiple_owners: HashSet<TopicPartition>,
}

fn resolve_claims(input: &Input<'_>) -> Claims {
    let mut all_equal = true;
    let mut subscribed: HashSet<&str> = HashSet::new();
    let mut max_generation = DEFAULT_GENERATION;
    let mut owned: HashMap<String, Vec<TopicPartition>> = HashMap::new();
    let mut multiple_owners = HashSet::new();
    let mut owner_of: HashMap<TopicPartition, String> = HashMap::new();
    for consumer in &input.member_order {
        let sub = &input.subs[consumer];
        if subscribed.is_empty() {
            subscribed.extend(sub.topics.iter().map(String::as_str));
        } else if all_equal
            && !(sub.topics.len() == subscribed.len()
                && sub.topics.iter().all(|t| subscribed.contains(t.as_str())))
        {
            all_equal = false;
        }
        let data = input.flavor.member_data(sub);
        let generation = data.generation.unwrap_or(DEFAULT_GENERATION);
        max_generation = max_generation.max(generation);
        owned.insert(consumer.clone(), Vec::new());
        for tp in data.partitions {
            if !input.partition_counts.contains_key(&tp.topic) {
                continue;
            }
            match owner_of.get(&tp).cloned() {
                None => {
                    owned.entry(consumer.clone()).or_default().push(tp.clone());
                    owner_of.insert(tp, consumer.clone());
                }
                Some(other) => {
                    // Java compares against the other member's subscription generation, not
                    // its member data's.
                    let other_generation = subscription_generation(&input.subs[&other]);
                    if generation == other_generation {
                        // Two owners in one generation: neither keeps it.
                        multiple_owners.insert(tp.clone());
                        remove_first(owned.entry(other).or_default(), &tp);
                        owner_of.insert(tp, consumer.clone());
                    } else if generation > other_generation {
                        owned.entry(consumer.clone()).or_default().push(tp.clone());
                        remove_first(owned.entry(other).or_default(), &tp);
                        owner_of.insert(tp, consumer.clone());
                    }
                }
            }
        }
    }
    Claims {
        all_equal,
        max_generation,
        owned,
        multiple_owners,
    }
}

/// `List.remove(Object)`: the first occurrence only.
fn remove_first(list: &mut Vec<TopicPartition>, tp: &TopicPartition) {
    if let Some(i) = list.iter().position(|x| x == tp) {
        list.remove(i);
    }
}

/// The result of a builder: the assignment, and for the constrained path the partitions that
/// change owner (the general path leaves it to the cooperative assignor to compute).
struct Built {
    assignment: HashMap<String, Vec<TopicPartition>>,
    transferring: Option<HashMap<TopicPartition, String>>,
}

fn assign_sticky(
    flavor: Flavor,
    cluster: &Cluster,
    subs: &BTreeMap<String, Subscription>,
) -> Result<BTreeMap<String, Assignment>, AssignorError> {
    // Topics someone subscribes to that have metadata and partitions; partitions by id.
    let mut partitions: BTreeMap<String, Vec<(i32, Vec<String>)>> = BTreeMap::new();
    for topic in subs.values().flat_map(|s| s.topics.iter()) {
        let Some(infos) = cluster.topics.get(topic).filter(|p| !p.is_empty()) else {
            continue;
        };
        let mut infos: Vec<(i32, Vec<String>)> = infos
            .iter()
            .map(|p| (p.partition, p.replica_racks.clone()))
            .collect();
        infos.sort_by_key(|(p, _)| *p);
        // Java's sticky assignor addresses partitions as 0..count; other ids would make it
        // assign partitions that do not exist.
        if infos.iter().enumerate().any(|(i, (p, _))| *p != i as i32) {
            return Err(AssignorError::InvalidInput(format!(
                "topic {topic} has partitions that are not numbered 0..{}",
                infos.len()
            )));
        }
        partitions.insert(topic.clone(), infos);
    }
    let mut result: BTreeMap<String, Assignment> = subs
        .keys()
        .map(|id| (id.clone(), Assignment::default()))
        .collect();
    if subs.is_empty() {
        return Ok(result);
    }
    let input = Input {
        subs,
        partition_counts: partitions
            .iter()
            .map(|(t, p)| (t.clone(), p.len()))
            .collect(),
        member_order: java::hash_order(subs.keys().cloned().collect(), |id| java::string_hash(id)),
        racks: RackInfo::new(&partitions, subs),
        flavor,
    };
    let claims = resolve_claims(&input);
    let built = if claims.all_equal {
        constrained::build(&input, claims)?
    } else {
        general::build(&input, claims)?
    };
    let mut assignment = built.assignment;
    if flavor == Flavor::Cooperative {
        let transferring = match built.transferring {
            Some(t) => t,
            None => partitions_transferring_ownership(subs, &assignment),
        };
        for (tp, consumer) in &transferring {
            if let Some(list) = assignment.get_mut(consumer) {
                remove_first(list, tp);
            }
        }
    }
    for (id, partitions) in assignment {
        result.entry(id).or_default().partitions = partitions;
    }
    Ok(result)
}

/// Partitions assigned to a member that did not own them while another member owned them:
/// these must be revoked before they can move (Java's `computePartitionsTransferringOwnership`,
/// over the subscriptions' owned partitions).
fn partitions_transferring_ownership(
    subs: &BTreeMap<String, Subscription>,
    assignment: &HashMap<String, Vec<TopicPartition>>,
) -> HashMap<TopicPartition, String> {
    let mut added: HashMap<TopicPartition, String> = HashMap::new();
    let mut revoked: HashSet<TopicPartition> = HashSet::new();
    for (consumer, assigned) in assignment {
        let owned = subs
            .get(consumer)
            .map(|s| s.owned_partitions.as_slice())
            .unwrap_or(&[]);
        let owned_set: HashSet<&TopicPartition> = owned.iter().collect();
        for tp in assigned {
            if !owned_set.contains(tp) {
                added.insert(tp.clone(), consumer.clone());
            }
        }
        let assigned_set: HashSet<&TopicPartition> = assigned.iter().collect();
        revoked.extend(
            owned
                .iter()
                .filter(|tp| !assigned_set.contains(tp))
                .cloned(),
        );
    }
    added.retain(|tp, _| revoked.contains(tp));
    added
}

/// Kafka's `StickyAssignor` (`sticky`, eager only). It remembers the assignment it received
/// (`on_assignment`) and sends it back as user data when it next joins.
#[derive(Debug, Default)]
pub struct StickyAssignor {
    previous: Mutex<Option<(Vec<TopicPartition>, i32)>>,
}

impl StickyAssignor {
    pub fn new() -> Self {
        Self::default()
    }

    /// Java's `onAssignment`: the partitions received and the generation they are for.
    pub fn on_assignment(&self, partitions: Vec<TopicPartition>, generation: i32) {
        if let Ok(mut previous) = self.previous.lock() {
            *previous = Some((partitions, generation));
        }
    }
}

impl PartitionAssignor for StickyAssignor {
    fn name(&self) -> &'static str {
        "sticky"
    }

    fn subscription_user_data(&self, _topics: &[String]) -> Option<Bytes> {
        let previous = self.previous.lock().ok()?;
        previous
            .as_ref()
            .map(|(partitions, generation)| encode_sticky_user_data(partitions, Some(*generation)))
    }

    fn assign(
        &self,
        cluster: &Cluster,
        subscriptions: &BTreeMap<String, Subscription>,
    ) -> Result<BTreeMap<String, Assignment>, AssignorError> {
        assign_sticky(Flavor::Sticky, cluster, subscriptions)
    }
}

/// Kafka's `CooperativeStickyAssignor` (`cooperative-sticky`, cooperative and eager). Its
/// user data carries the generation of its last assignment.
#[derive(Debug)]
pub struct CooperativeStickyAssignor {
    generation: Mutex<i32>,
}

impl Default for CooperativeStickyAssignor {
    fn default() -> Self {
        Self {
            generation: Mutex::new(DEFAULT_GENERATION),
        }
    }
}

impl CooperativeStickyAssignor {
    pub fn new() -> Self {
        Self::default()
    }

    /// Java's `onAssignment`: remembers the generation for the next subscription.
    pub fn on_assignment(&self, generation: i32) {
        if let Ok(mut g) = self.generation.lock() {
            *g = generation;
        }
    }
}

impl PartitionAssignor for CooperativeStickyAssignor {
    fn name(&self) -> &'static str {
        "cooperative-sticky"
    }

    fn supported_protocols(&self) -> &'static [RebalanceProtocol] {
        &[RebalanceProtocol::Cooperative, RebalanceProtocol::Eager]
    }

    fn subscription_user_data(&self, _topics: &[String]) -> Option<Bytes> {
        let generation = self
            .generation
            .lock()
            .map(|g| *g)
            .unwrap_or(DEFAULT_GENERATION);
        Some(encode_cooperative_user_data(generation))
    }

    fn assign(
        &self,
        cluster: &Cluster,
        subscriptions: &BTreeMap<String, Subscription>,
    ) -> Result<BTreeMap<String, Assignment>, AssignorError> {
        assign_sticky(Flavor::Cooperative, cluster, subscriptions)
    }
}

#[cfg(test)]
mod tests;

//! ISR replication, the data-path pieces (Kafka's `ReplicaFetcherThread`, the follower/ISR parts
//! of `Partition`, `DelayedProduce`).
//!
//! - [`leader_state`]: what a leader knows about its followers (LEO, last fetch, last caught-up
//!   time) and the math on it: HW = min LEO over the (maximal) ISR, ISR shrink and expand
//!   candidates, the pending-ISR state while an AlterPartition is in flight.
//! - [`fetcher`]: the follower side: one [`fetcher::ReplicaFetcher`] task per leader broker
//!   pulls with Fetch (replica id, last fetched epoch, current leader epoch), appends as
//!   follower, follows the leader's HW and log start, truncates on a diverging epoch (KIP-320)
//!   or an out-of-range offset. [`fetcher::FetcherManager`] adds/removes partitions on
//!   leadership changes.
//! - [`delayed_produce`]: acks=all waits for the HW, woken by follower fetches, not by polling.
//!
//! The controller side is reached through [`AlterPartitionSender`]: the leader proposes an ISR,
//! and keeps using the old one until the committed change comes back in a metadata image
//! ([`crate::partition::Partition::apply_leader_and_isr`]).

pub mod delayed_produce;
pub mod fetcher;
pub mod leader_state;
#[cfg(test)]
mod timing_tests;

use std::collections::BTreeMap;

use uuid::Uuid;

pub use delayed_produce::{wait_for_acks, AckResult};
pub use fetcher::{FetcherConfig, FetcherManager, ReplicaFetcher};
pub use leader_state::{FollowerState, LeaderState, PendingIsr, DEFAULT_REPLICA_LAG_TIME_MAX_MS};

/// The controller's view of one partition, as the broker applies it (a metadata image's
/// `PartitionRegistration`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderAndIsr {
    pub leader: i32,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
}

/// An ISR change the leader asks the controller to commit (one partition of an AlterPartition
/// request). The controller must reject it when `partition_epoch` or `leader_epoch` is stale.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlterPartitionProposal {
    pub topic: String,
    pub topic_id: Uuid,
    pub partition: i32,
    pub leader_id: i32,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    pub new_isr: Vec<i32>,
    /// The broker epoch of each member of `new_isr`, in its order (KIP-903): the leader's own,
    /// the one of each follower's last fetch, -1 for a follower not heard from in this leader
    /// epoch. The controller refuses a member whose epoch is not its registration's.
    pub new_isr_broker_epochs: Vec<i64>,
}

impl AlterPartitionProposal {
    /// The new ISR as AlterPartition v3 carries it.
    pub fn new_isr_with_epochs(&self) -> Vec<strom_controller::BrokerState> {
        self.new_isr
            .iter()
            .enumerate()
            .map(|(i, &broker_id)| strom_controller::BrokerState {
                broker_id,
                broker_epoch: self.new_isr_broker_epochs.get(i).copied().unwrap_or(-1),
            })
            .collect()
    }
}

/// Sends ISR changes to the controller. Fire and forget: success shows up as a new metadata
/// image (applied with `Partition::apply_leader_and_isr`, which ends the pending state); on a
/// refusal or a lost request the implementation calls `Partition::alter_partition_failed` so the
/// leader may propose again.
pub trait AlterPartitionSender: Send + Sync {
    fn submit(&self, proposal: AlterPartitionProposal);
}

impl<F: Fn(AlterPartitionProposal) + Send + Sync> AlterPartitionSender for F {
    fn submit(&self, proposal: AlterPartitionProposal) {
        self(proposal)
    }
}

/// `min.insync.replicas` for a topic: its override, else the broker's default.
pub fn min_insync_replicas(topic_configs: &BTreeMap<String, String>, broker_default: i32) -> i32 {
    topic_configs
        .get("min.insync.replicas")
        .and_then(|v| v.trim().parse().ok())
        .filter(|n: &i32| *n >= 1)
        .unwrap_or(broker_default)
}

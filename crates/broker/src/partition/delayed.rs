//! The purgatories of the operations that wait on partitions (Kafka's `DelayedOperations`, which
//! `Partition` calls into, and the replica manager's produce, fetch and delete-records
//! purgatories). All partitions of one replica manager share one [`DelayedOperations`]; each is
//! keyed by partition.

use crate::purgatory::Purgatory;
use crate::replica_manager::delete_records::DelayedDeleteRecords;
use crate::replica_manager::fetch::DelayedFetch;
use crate::replica_manager::TopicPartition;
use crate::replication::delayed_produce::DelayedProduce;

pub struct DelayedOperations {
    /// acks=all produces waiting for the HW to pass their appends.
    pub produce: Purgatory<TopicPartition, DelayedProduce>,
    /// Fetches waiting for data (`min_bytes`) up to `max_wait_ms`.
    pub fetch: Purgatory<TopicPartition, DelayedFetch>,
    /// DeleteRecords waiting for the low watermark.
    pub delete_records: Purgatory<TopicPartition, DelayedDeleteRecords>,
}

impl Default for DelayedOperations {
    fn default() -> Self {
        Self {
            produce: Purgatory::new("Produce"),
            fetch: Purgatory::new("Fetch"),
            delete_records: Purgatory::new("DeleteRecords"),
        }
    }
}

impl DelayedOperations {
    /// Kafka's `tryCompleteDelayedRequests`: after the HW, the low watermark or the leadership
    /// of `key` changed.
    pub fn check_and_complete_all(&self, key: &TopicPartition) {
        self.produce.check_and_complete(key);
        self.fetch.check_and_complete(key);
        self.delete_records.check_and_complete(key);
    }

    /// Completes every operation waiting on `key` now (the partition is no longer hosted): each
    /// answers from the partition's state as it finds it.
    pub fn force_complete_all(&self, key: &TopicPartition) {
        self.produce.force_complete_all(key);
        self.fetch.force_complete_all(key);
        self.delete_records.force_complete_all(key);
    }
}

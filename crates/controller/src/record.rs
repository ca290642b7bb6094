//! Metadata records: the only way cluster state changes.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum MetadataRecord {
    /// A broker's identity and endpoint (Kafka's RegisterBrokerRecord).
    RegisterBroker {
        node_id: i32,
        host: String,
        port: i32,
        rack: Option<String>,
        /// The broker process's incarnation (`BrokerRegistrationRequest.incarnationId`: random
        /// at each start); nil in records written before incarnations were recorded.
        #[serde(default, skip_serializing_if = "Uuid::is_nil")]
        incarnation_id: Uuid,
        /// Kafka's `brokerEpoch`. `None`: a new incarnation, whose epoch is this record's own
        /// offset in the metadata log (assigned at replay, the same on every node and every
        /// replay); `Some`: an amended registration keeping its epoch, or a snapshot's copy.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        broker_epoch: Option<i64>,
        /// The registration's flags (Kafka registers a new incarnation fenced and not in
        /// controlled shutdown, and an amendment keeps them). `None` (records written before
        /// they were recorded): a re-registration keeps the current flags, a first one starts
        /// unfenced.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fenced: Option<bool>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        in_controlled_shutdown: Option<bool>,
    },
    /// A topic exists (TopicRecord).
    Topic { name: String, topic_id: Uuid },
    /// A partition with its replica set and leadership (PartitionRecord).
    Partition {
        topic_id: Uuid,
        partition: i32,
        replicas: Vec<i32>,
        isr: Vec<i32>,
        leader: i32,
        leader_epoch: i32,
        partition_epoch: i32,
        /// Replicas being added by an ongoing reassignment (empty: none).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        adding_replicas: Vec<i32>,
        /// Replicas being removed by an ongoing reassignment (empty: none).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        removing_replicas: Vec<i32>,
    },
    /// A topic config set (`value: Some`) or removed (`None`) (ConfigRecord).
    TopicConfig {
        topic: String,
        name: String,
        value: Option<String>,
    },
    /// A topic and all its partitions are gone (RemoveTopicRecord).
    RemoveTopic { topic_id: Uuid },
    /// A block of producer ids handed to a broker; ids below `next_producer_id` are never
    /// issued again (ProducerIdsRecord).
    ProducerIds {
        broker_id: i32,
        next_producer_id: i64,
    },
    /// A registered broker's state changes (BrokerRegistrationChangeRecord): `Some(true)` /
    /// `Some(false)` fence / unfence it, or move it into / out of controlled shutdown; `None`
    /// leaves that flag as it is.
    BrokerRegistrationChange {
        broker_id: i32,
        #[serde(default)]
        fenced: Option<bool>,
        #[serde(default)]
        in_controlled_shutdown: Option<bool>,
    },
    /// A change to an existing partition (PartitionChangeRecord); `None` fields are unchanged.
    /// Replay always bumps the partition epoch by one, and the leader epoch by one whenever
    /// `leader` is `Some` (even when it names the current leader, which is how Kafka forces a
    /// leader-epoch bump). `Some(-1)` means "no leader".
    PartitionChange {
        topic_id: Uuid,
        partition: i32,
        #[serde(default)]
        leader: Option<i32>,
        #[serde(default)]
        isr: Option<Vec<i32>>,
        #[serde(default)]
        replicas: Option<Vec<i32>>,
        /// The reassignment's adding replicas (`Some(vec![])` clears them).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        adding_replicas: Option<Vec<i32>>,
        /// The reassignment's removing replicas (`Some(vec![])` clears them).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        removing_replicas: Option<Vec<i32>>,
    },
    /// Replicas of `broker_id` placed in log directory `directory`, from AssignReplicasToDirs
    /// (KIP-858; Kafka keeps this in `PartitionRecord`/`PartitionChangeRecord.directories`).
    /// Strom records only what elections and Metadata need: whether the replica's directory
    /// is online. [`crate::log_dirs::DIRECTORY_LOST`] marks the replicas offline (their log
    /// could not be opened or written); any other directory id brings them back online.
    ReplicaDirectories {
        broker_id: i32,
        directory: Uuid,
        replicas: Vec<(Uuid, i32)>,
    },
}

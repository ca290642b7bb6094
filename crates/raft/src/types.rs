//! The openraft type configuration of the metadata quorum.

use std::fmt;
use std::io::Cursor;

use serde::{Deserialize, Serialize};

/// An opaque application payload carried by a normal log entry (for Strom: a serialized batch of
/// metadata records).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Payload(pub Vec<u8>);

impl fmt::Debug for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Payload({} bytes)", self.0.len())
    }
}

impl fmt::Display for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

openraft::declare_raft_types!(
    /// The type configuration: node ids are `u64`, a node is its controller address
    /// ([`openraft::BasicNode`]), entries carry a [`Payload`], snapshots are byte buffers.
    pub TypeConfig:
        D = Payload,
        R = (),
        NodeId = u64,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

pub type NodeId = u64;
pub type LogId = openraft::LogId<NodeId>;
pub type Vote = openraft::Vote<NodeId>;
pub type Entry = openraft::Entry<TypeConfig>;
pub type StorageError = openraft::StorageError<NodeId>;
pub type StoredMembership = openraft::StoredMembership<NodeId, openraft::BasicNode>;
pub type SnapshotMeta = openraft::SnapshotMeta<NodeId, openraft::BasicNode>;
pub type Raft = openraft::Raft<TypeConfig>;

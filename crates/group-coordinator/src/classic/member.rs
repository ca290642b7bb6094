//! One member of a classic group (Kafka's `ClassicGroupMember`): what it joined with, its
//! assignment, and the JoinGroup / SyncGroup responses it is waiting for.

use bytes::Bytes;
use strom_protocol::kafka::messages::describe_groups_response::DescribedGroupMember;
use strom_protocol::kafka::messages::join_group_response::JoinGroupResponseMember;
use strom_protocol::kafka::messages::{JoinGroupResponse, SyncGroupResponse};
use strom_protocol::kafka::protocol::StrBytes;
use tokio::sync::oneshot;

/// One (name, metadata) entry of a JoinGroup request, in the member's order of preference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Protocol {
    pub name: String,
    pub metadata: Bytes,
}

pub struct ClassicGroupMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    pub protocol_type: String,
    pub protocols: Vec<Protocol>,
    pub assignment: Bytes,
    /// The held JoinGroup response (Kafka's `awaitingJoinFuture`).
    pub(crate) join_tx: Option<oneshot::Sender<JoinGroupResponse>>,
    /// The held SyncGroup response (Kafka's `awaitingSyncFuture`).
    pub(crate) sync_tx: Option<oneshot::Sender<SyncGroupResponse>>,
    /// A member that joined and has not yet received a JoinGroup response of a completed
    /// rebalance: its session can expire even while it waits.
    pub is_new: bool,
    /// Insertion number into the group's member map, for Java's `HashMap` iteration order.
    pub(crate) seq: u64,
}

impl ClassicGroupMember {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        member_id: String,
        group_instance_id: Option<String>,
        client_id: String,
        client_host: String,
        rebalance_timeout_ms: i32,
        session_timeout_ms: i32,
        protocol_type: String,
        protocols: Vec<Protocol>,
        assignment: Bytes,
    ) -> Self {
        Self {
            member_id,
            group_instance_id,
            client_id,
            client_host,
            rebalance_timeout_ms,
            session_timeout_ms,
            protocol_type,
            protocols,
            assignment,
            join_tx: None,
            sync_tx: None,
            is_new: false,
            seq: 0,
        }
    }

    pub fn is_static(&self) -> bool {
        self.group_instance_id.is_some()
    }

    pub fn is_awaiting_join(&self) -> bool {
        self.join_tx.is_some()
    }

    pub fn is_awaiting_sync(&self) -> bool {
        self.sync_tx.is_some()
    }

    /// Whether the session timer firing now leaves the member alone: members parked in a
    /// rebalance count as alive, except new members (which could have given up on the join).
    pub fn has_satisfied_heartbeat(&self) -> bool {
        !self.is_new && (self.is_awaiting_join() || self.is_awaiting_sync())
    }

    /// Same protocols, same metadata, same order (Kafka compares the protocol collections).
    pub fn matches(&self, protocols: &[Protocol]) -> bool {
        self.protocols == protocols
    }

    /// The member's metadata for `protocol`, if it supports it.
    pub fn metadata(&self, protocol: &str) -> Option<&Bytes> {
        self.protocols
            .iter()
            .find(|p| p.name == protocol)
            .map(|p| &p.metadata)
    }

    /// The member's most preferred protocol among `candidates`.
    pub fn vote<'a>(&'a self, candidates: &[&str]) -> Option<&'a str> {
        self.protocols
            .iter()
            .map(|p| p.name.as_str())
            .find(|n| candidates.contains(n))
    }

    pub fn describe(&self, protocol: Option<&str>) -> DescribedGroupMember {
        let metadata = protocol
            .and_then(|p| self.metadata(p).cloned())
            .unwrap_or_default();
        DescribedGroupMember::default()
            .with_member_id(s(&self.member_id))
            .with_group_instance_id(self.group_instance_id.as_deref().map(s))
            .with_client_id(s(&self.client_id))
            .with_client_host(s(&self.client_host))
            .with_member_metadata(metadata)
            .with_member_assignment(self.assignment.clone())
    }

    pub fn as_join_member(&self, protocol: Option<&str>) -> JoinGroupResponseMember {
        JoinGroupResponseMember::default()
            .with_member_id(s(&self.member_id))
            .with_group_instance_id(self.group_instance_id.as_deref().map(s))
            .with_metadata(
                protocol
                    .and_then(|p| self.metadata(p).cloned())
                    .unwrap_or_default(),
            )
    }
}

pub(crate) fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

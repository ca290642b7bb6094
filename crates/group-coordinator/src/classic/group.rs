//! One classic group (Kafka's `ClassicGroup`): its state, generation, protocol, leader and
//! members, and its `GroupMetadata` record.
//!
//! Where Kafka's result depends on the iteration order of its `HashMap` of members (which member
//! becomes leader when the leader leaves, the order of members in JoinGroup / DescribeGroups /
//! the record, which protocol wins a tie of votes), the same order is reproduced: a Java
//! `HashMap<String, _>` iterates bucket by bucket (by `String.hashCode`), a bucket in insertion
//! order, and its table never shrinks.

use std::collections::{BTreeSet, HashMap, HashSet};

use bytes::Bytes;
use strom_protocol::java::{hash_map_capacity, hash_spread, string_hash};

use super::member::{ClassicGroupMember, Protocol};
use crate::records::{GroupMetadataValue, MemberMetadata};

/// The version of `GroupMetadataValue` Kafka 4.4 writes.
pub const GROUP_METADATA_VALUE_VERSION: i16 = 3;

/// The consumer protocol type (`ConsumerProtocol.PROTOCOL_TYPE`).
pub const CONSUMER_PROTOCOL_TYPE: &str = "consumer";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    Dead,
}

impl GroupState {
    /// The name Kafka shows (DescribeGroups, ListGroups).
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }

    fn valid_previous(self, from: GroupState) -> bool {
        use GroupState::*;
        match self {
            Empty => from == PreparingRebalance,
            PreparingRebalance => matches!(from, Stable | CompletingRebalance | Empty),
            CompletingRebalance => from == PreparingRebalance,
            Stable => from == CompletingRebalance,
            Dead => true,
        }
    }
}

pub struct ClassicGroup {
    pub group_id: String,
    pub state: GroupState,
    pub previous_state: GroupState,
    pub current_state_timestamp: Option<i64>,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub generation_id: i32,
    pub leader_id: Option<String>,
    members: HashMap<String, ClassicGroupMember>,
    /// group.instance.id -> member id.
    static_members: HashMap<String, String>,
    /// Members that got MEMBER_ID_REQUIRED and have not joined with their id yet.
    pending_join_members: HashSet<String>,
    num_awaiting_join: usize,
    /// Protocol name -> how many members support it.
    supported_protocols: HashMap<String, usize>,
    /// Members that got their JoinGroup response and have not sent SyncGroup.
    pending_sync_members: HashSet<String>,
    pub subscribed_topics: Option<BTreeSet<String>>,
    /// A member joined during the initial rebalance delay (which is then extended).
    pub new_member_added: bool,
    next_seq: u64,
    /// The most members the map ever held: its Java table size follows it.
    max_members: usize,
}

impl ClassicGroup {
    pub fn new(group_id: String, state: GroupState, now_ms: i64) -> Self {
        Self {
            group_id,
            state,
            previous_state: GroupState::Dead,
            current_state_timestamp: Some(now_ms),
            protocol_type: None,
            protocol_name: None,
            generation_id: 0,
            leader_id: None,
            members: HashMap::new(),
            static_members: HashMap::new(),
            pending_join_members: HashSet::new(),
            num_awaiting_join: 0,
            supported_protocols: HashMap::new(),
            pending_sync_members: HashSet::new(),
            subscribed_topics: None,
            new_member_added: false,
            next_seq: 0,
            max_members: 0,
        }
    }

    /// The group a `GroupMetadata` record describes (Kafka's replay of the record on load).
    pub fn from_record(group_id: String, value: &GroupMetadataValue) -> Self {
        let mut g = Self::new(
            group_id,
            if value.members.is_empty() {
                GroupState::Empty
            } else {
                GroupState::Stable
            },
            0,
        );
        g.generation_id = value.generation;
        g.protocol_type = Some(value.protocol_type.clone()).filter(|t| !t.is_empty());
        g.protocol_name = value.protocol.clone();
        g.leader_id = value.leader.clone();
        g.current_state_timestamp = Some(value.current_state_timestamp).filter(|t| *t != -1);
        for m in &value.members {
            let rebalance_timeout = if m.rebalance_timeout == -1 {
                m.session_timeout
            } else {
                m.rebalance_timeout
            };
            let member = ClassicGroupMember::new(
                m.member_id.clone(),
                m.group_instance_id.clone(),
                m.client_id.clone(),
                m.client_host.clone(),
                rebalance_timeout,
                m.session_timeout,
                value.protocol_type.clone(),
                vec![Protocol {
                    name: value.protocol.clone().unwrap_or_default(),
                    metadata: m.subscription.clone(),
                }],
                m.assignment.clone(),
            );
            // A record written by another implementation could repeat an instance id; the
            // later member wins rather than the load failing.
            g.add(member);
        }
        g.subscribed_topics = g.compute_subscribed_topics();
        g
    }

    pub fn is_in(&self, s: GroupState) -> bool {
        self.state == s
    }

    pub fn is_empty(&self) -> bool {
        self.state == GroupState::Empty
    }

    /// A group that only ever had offsets committed to it (no protocol, no members).
    pub fn is_simple(&self) -> bool {
        self.protocol_type.is_none() && self.is_empty() && self.pending_join_members.is_empty()
    }

    pub fn uses_consumer_protocol(&self) -> bool {
        self.protocol_type.as_deref() == Some(CONSUMER_PROTOCOL_TYPE)
    }

    pub fn transition_to(&mut self, to: GroupState, now_ms: i64) {
        debug_assert!(
            to.valid_previous(self.state),
            "invalid transition {:?} -> {:?}",
            self.state,
            to
        );
        self.previous_state = self.state;
        self.state = to;
        self.current_state_timestamp = Some(now_ms);
    }

    pub fn can_rebalance(&self) -> bool {
        GroupState::PreparingRebalance.valid_previous(self.state)
    }

    pub fn has_member(&self, id: &str) -> bool {
        self.members.contains_key(id)
    }

    pub fn member(&self, id: &str) -> Option<&ClassicGroupMember> {
        self.members.get(id)
    }

    pub fn member_mut(&mut self, id: &str) -> Option<&mut ClassicGroupMember> {
        self.members.get_mut(id)
    }

    pub fn num_members(&self) -> usize {
        self.members.len()
    }

    pub fn is_leader(&self, id: &str) -> bool {
        self.leader_id.as_deref() == Some(id)
    }

    /// Member ids in Java's `HashMap` iteration order.
    pub fn member_ids(&self) -> Vec<String> {
        let mask = hash_map_capacity(self.max_members) - 1;
        let mut v: Vec<(usize, u64, &String)> = self
            .members
            .iter()
            .map(|(id, m)| ((hash_spread(string_hash(id)) as usize) & mask, m.seq, id))
            .collect();
        v.sort_by_key(|(bucket, seq, _)| (*bucket, *seq));
        v.into_iter().map(|(_, _, id)| id.clone()).collect()
    }

    pub fn members_in_order(&self) -> Vec<&ClassicGroupMember> {
        self.member_ids()
            .iter()
            .filter_map(|id| self.members.get(id))
            .collect()
    }

    pub fn static_member_id(&self, instance_id: &str) -> Option<&String> {
        self.static_members.get(instance_id)
    }

    pub fn is_pending_member(&self, id: &str) -> bool {
        self.pending_join_members.contains(id)
    }

    pub fn add_pending_member(&mut self, id: String) {
        self.pending_join_members.insert(id);
    }

    pub fn num_awaiting_join(&self) -> usize {
        self.num_awaiting_join
    }

    pub fn has_all_members_joined(&self) -> bool {
        self.members.len() == self.num_awaiting_join && self.pending_join_members.is_empty()
    }

    /// The largest rebalance timeout of the members.
    pub fn rebalance_timeout_ms(&self) -> i32 {
        self.members
            .values()
            .map(|m| m.rebalance_timeout_ms)
            .max()
            .unwrap_or(0)
    }

    pub fn generate_member_id(client_id: &str, instance_id: Option<&str>) -> String {
        format!(
            "{}-{}",
            instance_id.unwrap_or(client_id),
            uuid::Uuid::new_v4()
        )
    }

    /// Adds a member (its held join response, if any, is already in it).
    pub fn add(&mut self, mut member: ClassicGroupMember) {
        if let Some(iid) = &member.group_instance_id {
            self.static_members
                .insert(iid.clone(), member.member_id.clone());
        }
        if self.members.is_empty() {
            self.protocol_type = Some(member.protocol_type.clone());
        }
        if self.leader_id.is_none() {
            self.leader_id = Some(member.member_id.clone());
        }
        self.increment_protocols(&member.protocols);
        if member.is_awaiting_join() {
            self.num_awaiting_join += 1;
        }
        self.pending_join_members.remove(&member.member_id);
        member.seq = self.next_seq;
        self.next_seq += 1;
        if let Some(old) = self.members.insert(member.member_id.clone(), member) {
            // Not expected (callers check first); keep the counters right if it happens.
            self.decrement_protocols(&old.protocols);
            if old.is_awaiting_join() {
                self.num_awaiting_join -= 1;
            }
        }
        self.max_members = self.max_members.max(self.members.len());
    }

    /// Removes a member (or pending member); a removed leader is replaced by the first member in
    /// map order. Returns the member so its held responses can be answered or dropped.
    pub fn remove(&mut self, id: &str) -> Option<ClassicGroupMember> {
        let removed = self.members.remove(id);
        if let Some(m) = &removed {
            self.decrement_protocols(&m.protocols);
            if m.is_awaiting_join() {
                self.num_awaiting_join -= 1;
            }
            if let Some(iid) = &m.group_instance_id {
                self.static_members.remove(iid);
            }
        }
        if self.is_leader(id) {
            self.leader_id = self.member_ids().into_iter().next();
        }
        self.pending_join_members.remove(id);
        self.pending_sync_members.remove(id);
        removed
    }

    /// When the leader did not rejoin, any member that did becomes leader. False when nobody
    /// rejoined (or there is no leader).
    pub fn maybe_elect_new_joined_leader(&mut self) -> bool {
        let Some(leader) = self.leader_id.clone() else {
            return false;
        };
        if self
            .members
            .get(&leader)
            .is_some_and(|m| m.is_awaiting_join())
        {
            return true;
        }
        for id in self.member_ids() {
            if self.members[&id].is_awaiting_join() {
                self.leader_id = Some(id);
                return true;
            }
        }
        false
    }

    /// A static member rejoined with a new member id: the old id is fenced (its held responses
    /// answered FENCED_INSTANCE_ID) and the member continues under the new id with the old one's
    /// settings and assignment.
    pub fn replace_static_member(
        &mut self,
        instance_id: &str,
        old_id: &str,
        new_id: &str,
    ) -> Option<()> {
        let mut old = self.members.remove(old_id)?;
        if let Some(tx) = old.join_tx.take() {
            self.num_awaiting_join -= 1;
            let _ = tx.send(super::responses::join_fenced(old_id));
        }
        if let Some(tx) = old.sync_tx.take() {
            let _ = tx.send(super::responses::sync_error(
                strom_protocol::ErrorCode::FencedInstanceId,
            ));
        }
        let mut member = ClassicGroupMember::new(
            new_id.to_string(),
            old.group_instance_id.clone(),
            old.client_id.clone(),
            old.client_host.clone(),
            old.rebalance_timeout_ms,
            old.session_timeout_ms,
            old.protocol_type.clone(),
            old.protocols.clone(),
            old.assignment.clone(),
        );
        member.seq = self.next_seq;
        self.next_seq += 1;
        self.members.insert(new_id.to_string(), member);
        self.max_members = self.max_members.max(self.members.len());
        if self.is_leader(old_id) {
            self.leader_id = Some(new_id.to_string());
        }
        self.static_members
            .insert(instance_id.to_string(), new_id.to_string());
        Some(())
    }

    pub fn add_pending_sync_member(&mut self, id: &str) {
        self.pending_sync_members.insert(id.to_string());
    }

    pub fn remove_pending_sync_member(&mut self, id: &str) {
        self.pending_sync_members.remove(id);
    }

    pub fn has_received_sync_from_all(&self) -> bool {
        self.pending_sync_members.is_empty()
    }

    pub fn pending_sync_members(&self) -> Vec<String> {
        self.pending_sync_members.iter().cloned().collect()
    }

    pub fn clear_pending_sync_members(&mut self) {
        self.pending_sync_members.clear();
    }

    /// Dynamic and static members that have not rejoined in this rebalance.
    pub fn not_yet_rejoined(&self) -> Vec<String> {
        self.member_ids()
            .into_iter()
            .filter(|id| !self.members[id].is_awaiting_join())
            .collect()
    }

    /// Checks a request's member id and group.instance.id against the group (Kafka's
    /// `validateMember`).
    pub fn validate_member(
        &self,
        member_id: &str,
        instance_id: Option<&str>,
    ) -> Result<(), strom_protocol::ErrorCode> {
        use strom_protocol::ErrorCode;
        if let Some(iid) = instance_id {
            match self.static_members.get(iid) {
                None => return Err(ErrorCode::UnknownMemberId),
                Some(existing) if existing != member_id => return Err(ErrorCode::FencedInstanceId),
                Some(_) => {}
            }
        }
        if !self.has_member(member_id) {
            return Err(ErrorCode::UnknownMemberId);
        }
        Ok(())
    }

    /// Kafka's `ClassicGroup.validateOffsetCommit`: may this member (or a simple consumer,
    /// generation -1) commit offsets now?
    pub fn validate_offset_commit(
        &self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        transactional: bool,
    ) -> Result<(), strom_protocol::ErrorCode> {
        use strom_protocol::ErrorCode;
        if self.is_in(GroupState::Dead) {
            return Err(ErrorCode::CoordinatorNotAvailable);
        }
        if generation < 0 && self.is_empty() {
            // The admin client or a consumer without group management.
            return Ok(());
        }
        if generation >= 0 || !member_id.is_empty() || instance_id.is_some() {
            self.validate_member(member_id, instance_id)?;
            if generation != self.generation_id {
                return Err(ErrorCode::IllegalGeneration);
            }
        } else if !transactional && !self.is_empty() {
            // No member id nor generation (v0): only while the group is empty.
            return Err(ErrorCode::UnknownMemberId);
        }
        if !transactional && self.is_in(GroupState::CompletingRebalance) {
            // The member has its JoinGroup response but not yet its assignment.
            return Err(ErrorCode::RebalanceInProgress);
        }
        Ok(())
    }

    fn increment_protocols(&mut self, protocols: &[Protocol]) {
        for p in protocols {
            *self.supported_protocols.entry(p.name.clone()).or_default() += 1;
        }
    }

    fn decrement_protocols(&mut self, protocols: &[Protocol]) {
        for p in protocols {
            if let Some(c) = self.supported_protocols.get_mut(&p.name) {
                *c = c.saturating_sub(1);
            }
        }
    }

    /// Whether a member with these protocols could join: an empty group takes any non-empty
    /// protocol type and list; otherwise the type must match and one protocol must be supported
    /// by every member.
    pub fn supports_protocols(&self, protocol_type: &str, protocols: &[Protocol]) -> bool {
        if self.is_empty() {
            !protocol_type.is_empty() && !protocols.is_empty()
        } else {
            self.protocol_type.as_deref() == Some(protocol_type)
                && protocols.iter().any(|p| {
                    self.supported_protocols.get(&p.name).copied().unwrap_or(0)
                        == self.members.len()
                })
        }
    }

    /// The protocol every member supports that most members prefer (ties: the first in the
    /// order Kafka's vote map iterates).
    pub fn select_protocol(&self) -> Option<String> {
        let n = self.members.len();
        if n == 0 {
            return None;
        }
        let candidates: Vec<&str> = self
            .supported_protocols
            .iter()
            .filter(|(_, c)| **c == n)
            .map(|(k, _)| k.as_str())
            .collect();
        // Votes in member order; the map of votes iterates by Java's hash order of the names
        // in the order they were first voted for.
        let mut first_voted: Vec<String> = Vec::new();
        let mut votes: HashMap<String, usize> = HashMap::new();
        for m in self.members_in_order() {
            // A member without a candidate makes Kafka's vote fail: no protocol.
            let v = m.vote(&candidates)?;
            if !votes.contains_key(v) {
                first_voted.push(v.to_string());
            }
            *votes.entry(v.to_string()).or_default() += 1;
        }
        let order = strom_protocol::java::hash_map_order(first_voted, |n| string_hash(n));
        let mut best: Option<(String, usize)> = None;
        for name in order {
            let c = votes[&name];
            if best.as_ref().is_none_or(|(_, b)| c > *b) {
                best = Some((name, c));
            }
        }
        best.map(|(n, _)| n)
    }

    /// Replaces a member's protocols and timeouts, and its held join response.
    pub fn update_member(
        &mut self,
        id: &str,
        protocols: Vec<Protocol>,
        rebalance_timeout_ms: i32,
        session_timeout_ms: i32,
        join_tx: Option<
            tokio::sync::oneshot::Sender<strom_protocol::kafka::messages::JoinGroupResponse>,
        >,
    ) {
        let Some(old_protocols) = self.members.get(id).map(|m| m.protocols.clone()) else {
            return;
        };
        self.decrement_protocols(&old_protocols);
        self.increment_protocols(&protocols);
        let m = self.members.get_mut(id).expect("checked above");
        m.protocols = protocols;
        m.rebalance_timeout_ms = rebalance_timeout_ms;
        m.session_timeout_ms = session_timeout_ms;
        let was_awaiting = m.join_tx.is_some();
        let awaiting = join_tx.is_some();
        // A join response held from an earlier request is superseded (Kafka replaces the
        // future; the older request is not answered).
        m.join_tx = join_tx;
        match (was_awaiting, awaiting) {
            (false, true) => self.num_awaiting_join += 1,
            (true, false) => self.num_awaiting_join -= 1,
            _ => {}
        }
    }

    /// Takes a member's held JoinGroup response without answering it.
    pub fn take_join_tx(
        &mut self,
        id: &str,
    ) -> Option<tokio::sync::oneshot::Sender<strom_protocol::kafka::messages::JoinGroupResponse>>
    {
        let tx = self.members.get_mut(id)?.join_tx.take()?;
        self.num_awaiting_join -= 1;
        Some(tx)
    }

    /// Answers a member's held JoinGroup response, if any. True if there was one.
    pub fn complete_join(
        &mut self,
        id: &str,
        response: strom_protocol::kafka::messages::JoinGroupResponse,
    ) -> bool {
        let Some(m) = self.members.get_mut(id) else {
            return false;
        };
        match m.join_tx.take() {
            Some(tx) => {
                let _ = tx.send(response);
                self.num_awaiting_join -= 1;
                true
            }
            None => false,
        }
    }

    /// Answers a member's held SyncGroup response, if any. True if there was one.
    pub fn complete_sync(
        &mut self,
        id: &str,
        response: strom_protocol::kafka::messages::SyncGroupResponse,
    ) -> bool {
        match self.members.get_mut(id).and_then(|m| m.sync_tx.take()) {
            Some(tx) => {
                let _ = tx.send(response);
                true
            }
            None => false,
        }
    }

    /// The next generation: a protocol is chosen and the group waits for the leader's
    /// assignment, or it is empty.
    pub fn init_next_generation(&mut self, now_ms: i64) {
        self.generation_id = self.generation_id.wrapping_add(1);
        if !self.members.is_empty() {
            self.protocol_name = self.select_protocol();
            self.subscribed_topics = self.compute_subscribed_topics();
            self.transition_to(GroupState::CompletingRebalance, now_ms);
        } else {
            self.protocol_name = None;
            self.subscribed_topics = self.compute_subscribed_topics();
            self.transition_to(GroupState::Empty, now_ms);
        }
        self.clear_pending_sync_members();
    }

    /// Each member's assignment by id.
    pub fn assignments(&self) -> HashMap<String, Bytes> {
        self.members
            .iter()
            .map(|(id, m)| (id.clone(), m.assignment.clone()))
            .collect()
    }

    /// Topics the members subscribe to, decoded from their `consumer` protocol metadata (the
    /// version-0 prefix every version shares); `None` when the group is not of the consumer
    /// protocol type or a subscription does not decode.
    pub fn compute_subscribed_topics(&self) -> Option<BTreeSet<String>> {
        if !self.uses_consumer_protocol() {
            return None;
        }
        if self.members.is_empty() {
            return Some(BTreeSet::new());
        }
        let protocol = self.protocol_name.as_deref()?;
        let mut all = BTreeSet::new();
        for m in self.members.values() {
            let metadata = m.metadata(protocol)?;
            all.extend(decode_subscription_topics(metadata)?);
        }
        Some(all)
    }

    pub fn is_subscribed_to_topic(&self, topic: &str) -> bool {
        match &self.subscribed_topics {
            Some(t) => t.contains(topic),
            None => self.uses_consumer_protocol(),
        }
    }

    /// The group as a `GroupMetadata` value with these assignments (members without one get an
    /// empty assignment, which only happens for a record Kafka would refuse to write).
    pub fn to_record_value(&self, assignment: &HashMap<String, Bytes>) -> GroupMetadataValue {
        let protocol = self.protocol_name.as_deref();
        GroupMetadataValue {
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            generation: self.generation_id,
            protocol: self.protocol_name.clone(),
            leader: self.leader_id.clone(),
            current_state_timestamp: self.current_state_timestamp.unwrap_or(-1),
            members: self
                .members_in_order()
                .into_iter()
                .map(|m| MemberMetadata {
                    member_id: m.member_id.clone(),
                    group_instance_id: m.group_instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    rebalance_timeout: m.rebalance_timeout_ms,
                    session_timeout: m.session_timeout_ms,
                    subscription: protocol
                        .and_then(|p| m.metadata(p).cloned())
                        .unwrap_or_default(),
                    assignment: assignment.get(&m.member_id).cloned().unwrap_or_default(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    /// The record of a group created by a first JoinGroup: generation 0, nothing chosen yet.
    pub fn to_empty_record_value(&self) -> GroupMetadataValue {
        GroupMetadataValue {
            protocol_type: String::new(),
            generation: 0,
            protocol: None,
            leader: None,
            current_state_timestamp: self.current_state_timestamp.unwrap_or(-1),
            members: Vec::new(),
            ..Default::default()
        }
    }
}

/// The topics of a `consumer` protocol subscription: version (i16), then an array (i32 count) of
/// strings (i16 length). Later versions append fields after these.
pub fn decode_subscription_topics(mut b: &[u8]) -> Option<Vec<String>> {
    fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        if b.len() < n {
            return None;
        }
        let (h, t) = b.split_at(n);
        *b = t;
        Some(h)
    }
    let version = i16::from_be_bytes(take(&mut b, 2)?.try_into().ok()?);
    if version < 0 {
        return None;
    }
    let n = i32::from_be_bytes(take(&mut b, 4)?.try_into().ok()?);
    if n < 0 {
        return None;
    }
    let mut topics = Vec::new();
    for _ in 0..n {
        let len = i16::from_be_bytes(take(&mut b, 2)?.try_into().ok()?);
        if len < 0 {
            return None;
        }
        let s = std::str::from_utf8(take(&mut b, len as usize)?).ok()?;
        topics.push(s.to_string());
    }
    Some(topics)
}

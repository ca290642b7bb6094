//! Consumer group administration: the admin calls behind `strom groups` (Kafka's
//! `kafka-consumer-groups.sh`).
//!
//! Every call is batched the way Kafka's admin client batches it, or better: the coordinators of
//! all groups are found with one FindCoordinator (v4+ takes a list of keys), then each
//! coordinator gets one request carrying all of its groups (ConsumerGroupDescribe,
//! DescribeGroups, OffsetFetch v8+, DeleteGroups), sent to all coordinators at once. ListGroups
//! goes to every broker at once; ListOffsets to every partition leader at once. Describing
//! 1,000 groups is therefore a handful of round trips, not thousands.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use strom_protocol::kafka::messages::list_offsets_request::{
    ListOffsetsPartition, ListOffsetsTopic,
};
use strom_protocol::kafka::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use strom_protocol::kafka::messages::offset_delete_request::{
    OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
};
use strom_protocol::kafka::messages::offset_fetch_request::OffsetFetchRequestGroup;
use strom_protocol::kafka::messages::{
    ConsumerGroupDescribeRequest, DeleteGroupsRequest, DescribeGroupsRequest,
    FindCoordinatorRequest, GroupId, ListGroupsRequest, ListOffsetsRequest, OffsetCommitRequest,
    OffsetDeleteRequest, OffsetFetchRequest, TopicName,
};
use strom_protocol::kafka::protocol::{Request, StrBytes};
use strom_protocol::ErrorCode;
use tokio::task::JoinSet;

use crate::admin::Admin;
use crate::client::BrokerInfo;
use crate::connection::Connection;
use crate::error::{Error, Result};

mod describe;
mod offsets;
pub use describe::decode_assignment;
use describe::{classic_description, consumer_description};

/// A topic partition, `(topic, partition)`.
pub type Tp = (String, i32);

/// One group as ListGroups reports it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct GroupListing {
    pub group_id: String,
    /// "consumer" for consumer groups of either protocol, "" for groups that only commit
    /// offsets, "connect", "share", ... for others.
    pub protocol_type: String,
    /// Kafka's state name ("Stable", "Empty", ...); empty when the broker is older than v4.
    pub state: String,
    /// "classic" or "consumer" (v5+); empty when the broker is older.
    pub group_type: String,
}

/// Which rebalance protocol a described group uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupType {
    /// JoinGroup/SyncGroup (described with DescribeGroups).
    Classic,
    /// KIP-848 (described with ConsumerGroupDescribe).
    Consumer,
}

impl GroupType {
    /// Kafka's display name ("Classic", "Consumer").
    pub fn as_str(&self) -> &'static str {
        match self {
            GroupType::Classic => "Classic",
            GroupType::Consumer => "Consumer",
        }
    }
}

/// A member of a described group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberDescription {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    /// As the broker reports it, e.g. "/127.0.0.1".
    pub host: String,
    /// The partitions the member owns, sorted.
    pub assignment: Vec<Tp>,
    /// Consumer-protocol members only: the partitions the assignor wants it to own, sorted.
    pub target_assignment: Option<Vec<Tp>>,
    /// Consumer-protocol members only.
    pub member_epoch: Option<i32>,
}

/// A described consumer group (`Admin.describeConsumerGroups`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDescription {
    pub group_id: String,
    pub group_type: GroupType,
    pub protocol_type: String,
    /// Kafka's state name; "Dead" for a group that does not exist.
    pub state: String,
    /// The classic group's protocol (e.g. "range") or the consumer group's server assignor
    /// ("uniform"); empty when none.
    pub partition_assignor: String,
    pub coordinator: BrokerInfo,
    pub members: Vec<MemberDescription>,
    /// Consumer-protocol groups only.
    pub group_epoch: Option<i32>,
    /// Consumer-protocol groups only.
    pub target_assignment_epoch: Option<i32>,
}

/// A committed offset (OffsetFetch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    pub offset: i64,
    pub leader_epoch: Option<i32>,
    pub metadata: String,
}

/// What ListOffsets asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetSpec {
    Earliest,
    Latest,
    /// The first offset whose timestamp is at or after this time (ms).
    Timestamp(i64),
}

impl OffsetSpec {
    fn timestamp(self) -> i64 {
        match self {
            OffsetSpec::Earliest => -2,
            OffsetSpec::Latest => -1,
            OffsetSpec::Timestamp(t) => t,
        }
    }
}

/// A ListOffsets answer; `offset` is -1 when no record is at or after a timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListedOffset {
    pub offset: i64,
    pub timestamp: i64,
    pub leader_epoch: Option<i32>,
}

/// The per-group result of a batched call.
pub type GroupResults<T> = BTreeMap<String, Result<T>>;

/// Errors after which the group's coordinator must be looked up again.
pub(crate) fn coordinator_moved(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::NotCoordinator
            | ErrorCode::CoordinatorNotAvailable
            | ErrorCode::CoordinatorLoadInProgress
    )
}

fn group_id(s: &str) -> GroupId {
    GroupId(StrBytes::from_string(s.to_string()))
}

pub(crate) fn topic_name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

fn opt_epoch(e: i32) -> Option<i32> {
    (e >= 0).then_some(e)
}

/// Groups `(topic, partition)` pairs by topic, partitions sorted.
pub(crate) fn by_topic<'a>(tps: impl IntoIterator<Item = &'a Tp>) -> BTreeMap<String, Vec<i32>> {
    let mut m: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for (t, p) in tps {
        m.entry(t.clone()).or_default().push(*p);
    }
    for v in m.values_mut() {
        v.sort_unstable();
        v.dedup();
    }
    m
}

/// Runs one request per connection concurrently (each already built for its negotiated
/// version); results in input order.
pub(crate) async fn fan_out<K, R>(
    requests: Vec<(K, Arc<Connection>, i16, R)>,
) -> Vec<(K, Result<R::Response>)>
where
    K: Send + 'static,
    R: Request + Send + Sync + 'static,
    R::Response: Send + 'static,
{
    let mut set = JoinSet::new();
    let mut keys: Vec<Option<K>> = Vec::new();
    for (i, (key, conn, version, req)) in requests.into_iter().enumerate() {
        keys.push(Some(key));
        set.spawn(async move { (i, conn.send(&req, version).await) });
    }
    let mut results: Vec<Option<Result<R::Response>>> = (0..keys.len()).map(|_| None).collect();
    while let Some(joined) = set.join_next().await {
        if let Ok((i, r)) = joined {
            results[i] = Some(r);
        }
    }
    keys.into_iter()
        .zip(results)
        .filter_map(|(k, r)| {
            // A task that panicked (a bug) is reported as a protocol error, not a crash.
            Some((
                k?,
                r.unwrap_or_else(|| Err(Error::Protocol("request task failed".into()))),
            ))
        })
        .collect()
}

/// The version to use for `api`; the error names the group APIs, which the connection's
/// generic name table does not know.
pub(crate) fn version_for(
    conn: &Connection,
    api: strom_protocol::kafka::messages::ApiKey,
) -> Result<i16> {
    use strom_protocol::kafka::messages::ApiKey;
    conn.version_for(api).map_err(|e| match e {
        Error::UnsupportedVersion(_) => Error::UnsupportedVersion(match api {
            ApiKey::FindCoordinator => "FindCoordinator",
            ApiKey::ListGroups => "ListGroups",
            ApiKey::DescribeGroups => "DescribeGroups",
            ApiKey::ConsumerGroupDescribe => "ConsumerGroupDescribe",
            ApiKey::OffsetFetch => "OffsetFetch",
            ApiKey::OffsetCommit => "OffsetCommit",
            ApiKey::OffsetDelete => "OffsetDelete",
            ApiKey::DeleteGroups => "DeleteGroups",
            ApiKey::ListOffsets => "ListOffsets",
            ApiKey::ListTransactions => "ListTransactions",
            ApiKey::DescribeTransactions => "DescribeTransactions",
            ApiKey::DescribeProducers => "DescribeProducers",
            ApiKey::WriteTxnMarkers => "WriteTxnMarkers",
            _ => "request",
        }),
        other => other,
    })
}

/// A copy of an error for each of the groups a failed request carried.
pub(crate) fn dup(e: &Error) -> Error {
    match e {
        Error::Kafka { code, message } => Error::Kafka {
            code: *code,
            message: message.clone(),
        },
        Error::Disconnected(a) => Error::Disconnected(a.clone()),
        Error::Timeout {
            api,
            addr,
            timeout_ms,
        } => Error::Timeout {
            api,
            addr: addr.clone(),
            timeout_ms: *timeout_ms,
        },
        Error::UnsupportedVersion(a) => Error::UnsupportedVersion(a),
        Error::NoBrokerAvailable(a) => Error::NoBrokerAvailable(a.clone()),
        Error::Io { addr, .. } => Error::Disconnected(addr.clone()),
        other => Error::Protocol(other.to_string()),
    }
}

pub(crate) fn kafka_err(code: i16, message: Option<&StrBytes>) -> Option<Error> {
    Error::kafka(
        code,
        message.map(|m| m.to_string()).filter(|m| !m.is_empty()),
    )
}

/// FindCoordinator's key types (Kafka's `FindCoordinatorRequest.CoordinatorType`).
pub(crate) const GROUP_KEY: i8 = 0;
pub(crate) const TRANSACTION_KEY: i8 = 1;

/// Whether a per-group result should be retried after a new coordinator lookup.
pub(crate) fn retry_group<T>(r: &Result<T>) -> bool {
    match r {
        Err(Error::Kafka { code, .. }) => coordinator_moved(*code),
        Err(e) => e.is_retriable(),
        Ok(_) => false,
    }
}

impl Admin {
    fn group_timeout_ms(&self) -> i32 {
        self.client()
            .config()
            .request_timeout
            .as_millis()
            .min(i32::MAX as u128) as i32
    }

    /// The coordinator of each group: one FindCoordinator for all keys (v4+), else one per key,
    /// all at once. Retries while the coordinators are not available yet (Kafka answers
    /// COORDINATOR_NOT_AVAILABLE until `__consumer_offsets` exists).
    pub async fn find_group_coordinators(
        &self,
        groups: &[String],
    ) -> Result<GroupResults<BrokerInfo>> {
        self.find_coordinators(GROUP_KEY, groups).await
    }

    /// The coordinator of each key of `key_type` (0: group, 1: transactional id), as
    /// [`Admin::find_group_coordinators`].
    pub async fn find_coordinators(
        &self,
        key_type: i8,
        groups: &[String],
    ) -> Result<GroupResults<BrokerInfo>> {
        let mut out: GroupResults<BrokerInfo> = BTreeMap::new();
        let mut pending: Vec<String> = groups.to_vec();
        pending.sort();
        pending.dedup();
        let retries = self.client().config().retries;
        let mut attempt = 0;
        while !pending.is_empty() {
            let round = self.find_coordinators_once(key_type, &pending).await;
            let mut next = Vec::new();
            match round {
                Ok(found) => {
                    for (g, r) in found {
                        if retry_group(&r) && attempt < retries {
                            next.push(g);
                        } else {
                            out.insert(g, r);
                        }
                    }
                }
                Err(e) if e.is_retriable() && attempt < retries => next = pending.clone(),
                Err(e) => {
                    for g in &pending {
                        out.insert(g.clone(), Err(dup(&e)));
                    }
                }
            }
            pending = next;
            if !pending.is_empty() {
                tokio::time::sleep(self.client().config().backoff(attempt)).await;
                attempt += 1;
            }
        }
        Ok(out)
    }

    async fn find_coordinators_once(
        &self,
        key_type: i8,
        groups: &[String],
    ) -> Result<GroupResults<BrokerInfo>> {
        let conn = self.client().any_connection().await?;
        let version = version_for(
            &conn,
            strom_protocol::kafka::messages::ApiKey::FindCoordinator,
        )?;
        let mut requests = Vec::new();
        if version >= 4 {
            let mut req = FindCoordinatorRequest::default();
            req.key_type = key_type;
            req.coordinator_keys = groups
                .iter()
                .map(|g| StrBytes::from_string(g.clone()))
                .collect();
            requests.push((groups.to_vec(), conn.clone(), version, req));
        } else {
            for g in groups {
                let mut req = FindCoordinatorRequest::default();
                req.key_type = key_type;
                req.key = StrBytes::from_string(g.clone());
                requests.push((vec![g.clone()], conn.clone(), version, req));
            }
        }
        let mut out = BTreeMap::new();
        for (keys, resp) in fan_out(requests).await {
            let resp = match resp {
                Ok(r) => r,
                Err(e) => {
                    for k in keys {
                        out.insert(k, Err(dup(&e)));
                    }
                    continue;
                }
            };
            if version >= 4 {
                for c in resp.coordinators {
                    let r = match kafka_err(c.error_code, c.error_message.as_ref()) {
                        Some(e) => Err(e),
                        None => Ok(BrokerInfo {
                            node_id: c.node_id.0,
                            host: c.host.to_string(),
                            port: c.port,
                            rack: None,
                        }),
                    };
                    out.insert(c.key.to_string(), r);
                }
                for k in keys {
                    out.entry(k.clone()).or_insert_with(|| {
                        Err(Error::Protocol(format!(
                            "no coordinator answer for group {k}"
                        )))
                    });
                }
            } else {
                let r = match kafka_err(resp.error_code, resp.error_message.as_ref()) {
                    Some(e) => Err(e),
                    None => Ok(BrokerInfo {
                        node_id: resp.node_id.0,
                        host: resp.host.to_string(),
                        port: resp.port,
                        rack: None,
                    }),
                };
                if let Some(k) = keys.into_iter().next() {
                    out.insert(k, r);
                }
            }
        }
        Ok(out)
    }

    /// Sends a request per coordinator covering its groups, re-finding coordinators for the
    /// groups whose coordinator moved or was not ready, until every group has a final result.
    /// `build(version, groups)` makes the requests for one coordinator (several when the
    /// negotiated version takes one group per request); `parse` turns a response into results
    /// for the groups it carried.
    async fn per_coordinator<T, R, B, P>(
        &self,
        groups: &[String],
        api: strom_protocol::kafka::messages::ApiKey,
        build: B,
        parse: P,
    ) -> Result<GroupResults<T>>
    where
        R: Request + Send + Sync + 'static,
        R::Response: Send + 'static,
        B: Fn(i16, &[String]) -> Vec<(Vec<String>, R)>,
        P: Fn(&BrokerInfo, &[String], R::Response) -> Vec<(String, Result<T>)>,
    {
        self.per_key_coordinator(GROUP_KEY, groups, api, build, parse, retry_group)
            .await
    }

    /// [`Admin::per_coordinator`] for any coordinator key type (groups, transactional ids),
    /// so the group and transaction admin calls share one lookup/batch/retry loop as Kafka's
    /// `CoordinatorStrategy` serves both. `retry(result)` says whether a key's result is
    /// retried after a new coordinator lookup (bounded by the client's retries).
    pub(crate) async fn per_key_coordinator<T, R, B, P, Q>(
        &self,
        key_type: i8,
        keys: &[String],
        api: strom_protocol::kafka::messages::ApiKey,
        build: B,
        parse: P,
        retry: Q,
    ) -> Result<GroupResults<T>>
    where
        R: Request + Send + Sync + 'static,
        R::Response: Send + 'static,
        B: Fn(i16, &[String]) -> Vec<(Vec<String>, R)>,
        P: Fn(&BrokerInfo, &[String], R::Response) -> Vec<(String, Result<T>)>,
        Q: Fn(&Result<T>) -> bool,
    {
        let noun = if key_type == TRANSACTION_KEY {
            "transactional id"
        } else {
            "group"
        };
        let mut out: GroupResults<T> = BTreeMap::new();
        let mut pending: Vec<String> = keys.to_vec();
        pending.sort();
        pending.dedup();
        let retries = self.client().config().retries;
        let mut attempt = 0;
        while !pending.is_empty() {
            let last = attempt >= retries;
            let mut next: Vec<String> = Vec::new();
            let coordinators = self.find_coordinators(key_type, &pending).await?;
            let mut by_node: BTreeMap<i32, (BrokerInfo, Vec<String>)> = BTreeMap::new();
            for (g, r) in coordinators {
                match r {
                    Ok(b) => by_node
                        .entry(b.node_id)
                        .or_insert_with(|| (b.clone(), Vec::new()))
                        .1
                        .push(g),
                    Err(e) => {
                        out.insert(g, Err(e));
                    }
                }
            }
            let mut requests = Vec::new();
            for (_, (broker, gs)) in by_node {
                let conn = match self.client().connection_to_addr(&broker.addr()).await {
                    Ok(c) => c,
                    Err(e) => {
                        for g in gs {
                            if e.is_retriable() && !last {
                                next.push(g);
                            } else {
                                out.insert(g, Err(dup(&e)));
                            }
                        }
                        continue;
                    }
                };
                let version = match version_for(&conn, api) {
                    Ok(v) => v,
                    Err(e) => {
                        for g in gs {
                            out.insert(g, Err(dup(&e)));
                        }
                        continue;
                    }
                };
                for (subset, req) in build(version, &gs) {
                    requests.push(((broker.clone(), subset), conn.clone(), version, req));
                }
            }
            for ((broker, subset), resp) in fan_out(requests).await {
                match resp {
                    Ok(resp) => {
                        let mut answered: Vec<String> = Vec::new();
                        for (g, r) in parse(&broker, &subset, resp) {
                            answered.push(g.clone());
                            if retry(&r) && !last {
                                next.push(g);
                            } else {
                                out.insert(g, r);
                            }
                        }
                        for g in subset {
                            if !answered.contains(&g) {
                                out.insert(
                                    g.clone(),
                                    Err(Error::Protocol(format!("no answer for {noun} {g}"))),
                                );
                            }
                        }
                    }
                    Err(e) => {
                        for g in subset {
                            if e.is_retriable() && !last {
                                next.push(g);
                            } else {
                                out.insert(g, Err(dup(&e)));
                            }
                        }
                    }
                }
            }
            pending = next;
            if !pending.is_empty() {
                tokio::time::sleep(self.client().config().backoff(attempt)).await;
                attempt += 1;
            }
        }
        Ok(out)
    }

    /// ListGroups on every broker at once, merged and sorted by group id. `states` and `types`
    /// are the filters (ListGroups v4+ / v5+; empty = all), in Kafka's spelling ("Stable",
    /// "classic").
    pub async fn list_groups(
        &self,
        states: &[String],
        types: &[String],
    ) -> Result<Vec<GroupListing>> {
        let brokers: Vec<BrokerInfo> = {
            self.client()
                .retry(|| self.client().refresh_metadata(Some(&[])))
                .await?;
            self.client().metadata().brokers.values().cloned().collect()
        };
        let mut requests = Vec::new();
        for b in brokers {
            let addr = b.addr();
            let conn = self
                .client()
                .retry(|| self.client().connection_to_addr(&addr))
                .await?;
            let version = version_for(&conn, strom_protocol::kafka::messages::ApiKey::ListGroups)?;
            if !states.is_empty() && version < 4 {
                return Err(Error::UnsupportedVersion("ListGroups (state filter)"));
            }
            if !types.is_empty() && version < 5 {
                return Err(Error::UnsupportedVersion("ListGroups (type filter)"));
            }
            let mut req = ListGroupsRequest::default();
            req.states_filter = states
                .iter()
                .map(|s| StrBytes::from_string(s.clone()))
                .collect();
            req.types_filter = types
                .iter()
                .map(|s| StrBytes::from_string(s.clone()))
                .collect();
            requests.push(((), conn, version, req));
        }
        let mut out = Vec::new();
        for ((), resp) in fan_out(requests).await {
            let resp = resp?;
            if let Some(e) = Error::kafka(resp.error_code, None) {
                return Err(e);
            }
            for g in resp.groups {
                out.push(GroupListing {
                    group_id: g.group_id.0.to_string(),
                    protocol_type: g.protocol_type.to_string(),
                    state: g.group_state.to_string(),
                    group_type: g.group_type.to_string(),
                });
            }
        }
        out.sort();
        out.dedup_by(|a, b| a.group_id == b.group_id);
        Ok(out)
    }

    /// Describes consumer groups as Kafka's `describeConsumerGroups`: ConsumerGroupDescribe
    /// first (one request per coordinator), then DescribeGroups for the groups it does not
    /// know as consumer-protocol groups (classic groups and groups that do not exist; those
    /// come back in state "Dead").
    pub async fn describe_consumer_groups(
        &self,
        groups: &[String],
    ) -> Result<GroupResults<GroupDescription>> {
        use strom_protocol::kafka::messages::ApiKey;
        let mut out: GroupResults<GroupDescription> = BTreeMap::new();
        let mut classic: Vec<String> = Vec::new();
        let consumer = self
            .per_coordinator(
                groups,
                ApiKey::ConsumerGroupDescribe,
                |_, gs| {
                    let mut req = ConsumerGroupDescribeRequest::default();
                    req.group_ids = gs.iter().map(|g| group_id(g)).collect();
                    vec![(gs.to_vec(), req)]
                },
                |broker, _, resp| {
                    resp.groups
                        .into_iter()
                        .map(|g| {
                            let id = g.group_id.0.to_string();
                            let r = match kafka_err(g.error_code, g.error_message.as_ref()) {
                                Some(e) => Err(e),
                                None => Ok(consumer_description(broker, g)),
                            };
                            (id, r)
                        })
                        .collect()
                },
            )
            .await?;
        for (g, r) in consumer {
            match r {
                Ok(d) => {
                    out.insert(g, Ok(d));
                }
                // Not a consumer-protocol group (or no such group), or a broker without
                // KIP-848: ask DescribeGroups.
                Err(Error::Kafka {
                    code: ErrorCode::GroupIdNotFound,
                    ..
                })
                | Err(Error::UnsupportedVersion(_)) => classic.push(g),
                Err(e) => {
                    out.insert(g, Err(e));
                }
            }
        }
        if classic.is_empty() {
            return Ok(out);
        }
        let described = self
            .per_coordinator(
                &classic,
                ApiKey::DescribeGroups,
                |_, gs| {
                    let mut req = DescribeGroupsRequest::default();
                    req.groups = gs.iter().map(|g| group_id(g)).collect();
                    vec![(gs.to_vec(), req)]
                },
                |broker, _, resp| {
                    resp.groups
                        .into_iter()
                        .map(|g| {
                            let id = g.group_id.0.to_string();
                            let r = match kafka_err(g.error_code, g.error_message.as_ref()) {
                                Some(e) => Err(e),
                                None => Ok(classic_description(broker, g)),
                            };
                            (id, r)
                        })
                        .collect()
                },
            )
            .await?;
        out.extend(described);
        Ok(out)
    }

    /// Deletes groups (DeleteGroups, one request per coordinator).
    pub async fn delete_groups(&self, groups: &[String]) -> Result<GroupResults<()>> {
        use strom_protocol::kafka::messages::ApiKey;
        self.per_coordinator(
            groups,
            ApiKey::DeleteGroups,
            |_, gs| {
                let mut req = DeleteGroupsRequest::default();
                req.groups_names = gs.iter().map(|g| group_id(g)).collect();
                vec![(gs.to_vec(), req)]
            },
            |_, _, resp| {
                resp.results
                    .into_iter()
                    .map(|r| {
                        let res = match Error::kafka(r.error_code, None) {
                            Some(e) => Err(e),
                            None => Ok(()),
                        };
                        (r.group_id.0.to_string(), res)
                    })
                    .collect()
            },
        )
        .await
    }
}

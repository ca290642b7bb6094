//! The consumer: manual partition assignment (assign, seek, poll), or group membership
//! (`subscribe` with a `group.id`; the group machinery is in [`crate::group`]) with commits.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use bytes::Bytes;
use strom_protocol::kafka::messages::fetch_request::{FetchPartition, FetchTopic};
use strom_protocol::kafka::messages::list_offsets_request::{
    ListOffsetsPartition, ListOffsetsTopic,
};
use strom_protocol::kafka::messages::{FetchRequest, FetchResponse, ListOffsetsRequest, TopicName};
use strom_protocol::kafka::protocol::StrBytes;
use strom_protocol::ErrorCode;
use tokio::task::JoinSet;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::group::{
    Group, GroupConfig, GroupError, GroupMetadata, RebalanceListener, Subscription, TopicPartition,
};
use crate::read_committed::decode_fetched;
pub use crate::read_committed::{AbortedTransaction, READ_COMMITTED, READ_UNCOMMITTED};

/// ListOffsets timestamp meaning "the log start offset".
pub const EARLIEST_TIMESTAMP: i64 = -2;
/// ListOffsets timestamp meaning "the log end offset".
pub const LATEST_TIMESTAMP: i64 = -1;

/// Where to start when a partition has no position or its position is out of range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum OffsetReset {
    Earliest,
    Latest,
    /// Fail (Java's `NoOffsetForPartitionException` / `OffsetOutOfRangeException`).
    None,
}

/// Consumer settings, named after Kafka's.
#[derive(Debug, Clone)]
pub struct ConsumerConfig {
    /// `fetch.min.bytes`.
    pub fetch_min_bytes: i32,
    /// `fetch.max.wait.ms`.
    pub fetch_max_wait: Duration,
    /// `fetch.max.bytes`.
    pub fetch_max_bytes: i32,
    /// `max.partition.fetch.bytes`.
    pub max_partition_fetch_bytes: i32,
    /// `auto.offset.reset`.
    pub auto_offset_reset: OffsetReset,
    /// `isolation.level`: [`READ_UNCOMMITTED`] (0, the default, as Java) or [`READ_COMMITTED`]
    /// (1: records of aborted transactions are dropped and nothing past the last stable offset
    /// is returned; positions at the end and lag go by the LSO).
    pub isolation_level: i8,
    /// `group.id` and the other group settings.
    pub group: GroupConfig,
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        ConsumerConfig {
            fetch_min_bytes: 1,
            fetch_max_wait: Duration::from_millis(500),
            fetch_max_bytes: 50 * 1024 * 1024,
            max_partition_fetch_bytes: 1024 * 1024,
            auto_offset_reset: OffsetReset::Latest,
            isolation_level: 0,
            group: GroupConfig::default(),
        }
    }
}

/// A consumed record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerRecord {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Option<Bytes>)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Position {
    Offset(i64),
    Reset(OffsetReset),
    /// A partition just assigned by the group: start from the group's committed offset, else
    /// from `auto.offset.reset`.
    Committed,
}

/// Positions by `(topic, partition)`.
pub(crate) type Positions = BTreeMap<(String, i32), Position>;

/// The consumer. Not shared: `poll` takes `&mut self`.
#[derive(Debug)]
pub struct Consumer {
    client: Client,
    config: ConsumerConfig,
    positions: Positions,
    /// Built on first use of a group API when `group.id` is set.
    group: Option<Box<Group>>,
    /// Per partition, the high watermark and last stable offset of the last fetch response.
    fetched_ends: BTreeMap<(String, i32), (i64, i64)>,
}

impl Consumer {
    /// A consumer with no assignment.
    pub fn new(client: Client, config: ConsumerConfig) -> Self {
        Consumer {
            client,
            config,
            positions: BTreeMap::new(),
            group: None,
            fetched_ends: BTreeMap::new(),
        }
    }

    /// The underlying cluster client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The configuration.
    pub fn config(&self) -> &ConsumerConfig {
        &self.config
    }

    /// Adds partitions of `topic` to the assignment (`None`: all its partitions), starting at
    /// `auto_offset_reset` unless sought. Returns the partitions assigned.
    pub async fn assign(&mut self, topic: &str, partitions: Option<&[i32]>) -> Result<Vec<i32>> {
        if self.group.as_ref().is_some_and(|g| g.is_subscribed()) {
            return Err(GroupError::MixedSubscription.into());
        }
        let tm = self.client.topic_metadata(topic).await?;
        let all: Vec<i32> = tm.partitions.iter().map(|p| p.partition).collect();
        let chosen = match partitions {
            None => all,
            Some(ps) => {
                for p in ps {
                    if !all.contains(p) {
                        return Err(Error::Kafka {
                            code: ErrorCode::UnknownTopicOrPartition,
                            message: Some(format!("partition {topic}-{p} does not exist")),
                        });
                    }
                }
                ps.to_vec()
            }
        };
        for &p in &chosen {
            self.positions
                .entry((topic.to_string(), p))
                .or_insert(Position::Reset(self.config.auto_offset_reset));
        }
        Ok(chosen)
    }

    /// Removes everything from the assignment.
    pub fn unassign(&mut self) {
        self.positions.clear();
    }

    /// The group state, built on first use; fails without a `group.id` (Java's
    /// `InvalidGroupIdException`).
    fn group(&mut self) -> Result<&mut Group> {
        if self.group.is_none() {
            match Group::new(&self.client, &self.config.group)? {
                Some(g) => self.group = Some(Box::new(g)),
                None => return Err(GroupError::InvalidGroupId.into()),
            }
        }
        // Just set above when absent.
        self.group
            .as_deref_mut()
            .ok_or_else(|| GroupError::InvalidGroupId.into())
    }

    /// Joins the group (on the next `poll`) with a subscription to `topics`; the group assigns
    /// the partitions. Replaces an earlier subscription. `listener`, when given, replaces the
    /// rebalance listener.
    pub fn subscribe(
        &mut self,
        topics: &[&str],
        listener: Option<Box<dyn RebalanceListener>>,
    ) -> Result<()> {
        if topics.iter().any(|t| t.trim().is_empty()) {
            return Err(Error::Config(
                "topic names to subscribe to must not be empty".into(),
            ));
        }
        self.subscribe_to(
            Subscription::Topics(topics.iter().map(|t| t.to_string()).collect()),
            listener,
        )
    }

    /// Subscribes to every topic whose whole name matches the regular expression `pattern`
    /// (with `group.protocol=consumer` the broker evaluates it, RE2 syntax, as Java does).
    pub fn subscribe_pattern(
        &mut self,
        pattern: &str,
        listener: Option<Box<dyn RebalanceListener>>,
    ) -> Result<()> {
        if pattern.is_empty() {
            return Err(Error::Config(
                "the subscription pattern must not be empty".into(),
            ));
        }
        self.subscribe_to(Subscription::Pattern(pattern.to_string()), listener)
    }

    fn subscribe_to(
        &mut self,
        sub: Subscription,
        listener: Option<Box<dyn RebalanceListener>>,
    ) -> Result<()> {
        let manual =
            !self.positions.is_empty() && !self.group.as_ref().is_some_and(|g| g.is_subscribed());
        if manual {
            return Err(GroupError::MixedSubscription.into());
        }
        self.group()?.subscribe(sub, listener)
    }

    /// Leaves the group (committing first with auto-commit, revoking through the listener);
    /// the consumer can subscribe or assign again afterwards.
    pub async fn unsubscribe(&mut self) -> Result<()> {
        if let Some(g) = self.group.as_mut() {
            g.unsubscribe(&mut self.positions).await?;
        }
        self.positions.clear();
        Ok(())
    }

    /// Commits `offsets` (the next offsets to read; `None`: the consumed position of every
    /// assigned partition) to the group and waits for the answer (Java's `commitSync`).
    pub async fn commit_sync(
        &mut self,
        offsets: Option<BTreeMap<TopicPartition, i64>>,
    ) -> Result<()> {
        self.group()?;
        let positions = &self.positions;
        match self.group.as_mut() {
            Some(g) => g.commit_sync(positions, offsets).await,
            None => Err(GroupError::InvalidGroupId.into()),
        }
    }

    /// Sends the commit and returns at once (Java's `commitAsync`); the task yields the
    /// outcome. Commits reach the coordinator in call order.
    pub fn commit_async(
        &mut self,
        offsets: Option<BTreeMap<TopicPartition, i64>>,
    ) -> Result<tokio::task::JoinHandle<Result<()>>> {
        self.group()?;
        let offsets = offsets.unwrap_or_else(|| {
            let assigned = self
                .group
                .as_ref()
                .map(|g| g.assignment().clone())
                .unwrap_or_default();
            self.positions
                .iter()
                .filter_map(|((t, p), pos)| match pos {
                    Position::Offset(o) => Some((TopicPartition::new(t.clone(), *p), *o)),
                    _ => None,
                })
                .filter(|(tp, _)| assigned.is_empty() || assigned.contains(tp))
                .collect()
        });
        match self.group.as_mut() {
            Some(g) => Ok(g.commit_async(offsets)),
            None => Err(GroupError::InvalidGroupId.into()),
        }
    }

    /// The group's last committed offsets for `partitions` (`None`: nothing committed).
    pub async fn committed(
        &mut self,
        partitions: &[TopicPartition],
    ) -> Result<BTreeMap<TopicPartition, Option<i64>>> {
        self.group()?.committed(partitions).await
    }

    /// The group id, generation (or member epoch) and member id (Java's `groupMetadata`).
    pub fn group_metadata(&mut self) -> Result<GroupMetadata> {
        Ok(self.group()?.metadata())
    }

    /// Closes the consumer: with a group, commits (auto-commit), revokes through the listener
    /// and leaves the group (a static member stays for its session timeout).
    pub async fn close(mut self) -> Result<()> {
        if let Some(g) = self.group.as_mut() {
            g.close(&mut self.positions).await?;
        }
        Ok(())
    }

    /// The assigned `(topic, partition)`s.
    pub fn assignment(&self) -> Vec<(String, i32)> {
        self.positions.keys().cloned().collect()
    }

    /// The next offset to fetch, once known.
    pub fn position(&self, topic: &str, partition: i32) -> Option<i64> {
        match self.positions.get(&(topic.to_string(), partition)) {
            Some(Position::Offset(o)) => Some(*o),
            _ => None,
        }
    }

    /// How far the position is behind the end of the partition, as of the last fetch response
    /// (Java's `currentLag`): the last stable offset minus the position under `read_committed`,
    /// the high watermark minus the position under `read_uncommitted`. `None` before a fetch
    /// answered for the partition or without a position.
    pub fn lag(&self, topic: &str, partition: i32) -> Option<i64> {
        let key = (topic.to_string(), partition);
        let position = self.position(topic, partition)?;
        let &(hw, lso) = self.fetched_ends.get(&key)?;
        let end = if self.config.isolation_level == READ_COMMITTED {
            lso
        } else {
            hw
        };
        (end >= 0).then(|| (end - position).max(0))
    }

    /// Continues from `offset`.
    pub fn seek(&mut self, topic: &str, partition: i32, offset: i64) {
        self.positions
            .insert((topic.to_string(), partition), Position::Offset(offset));
    }

    fn seek_reset(&mut self, topic: &str, partitions: Option<&[i32]>, r: OffsetReset) {
        for ((t, p), pos) in self.positions.iter_mut() {
            if t == topic && partitions.is_none_or(|ps| ps.contains(p)) {
                *pos = Position::Reset(r);
            }
        }
    }

    /// Moves assigned partitions of `topic` (`None`: all) to the log start.
    pub fn seek_to_beginning(&mut self, topic: &str, partitions: Option<&[i32]>) {
        self.seek_reset(topic, partitions, OffsetReset::Earliest);
    }

    /// Moves assigned partitions of `topic` (`None`: all) to the log end.
    pub fn seek_to_end(&mut self, topic: &str, partitions: Option<&[i32]>) {
        self.seek_reset(topic, partitions, OffsetReset::Latest);
    }

    /// ListOffsets for `partitions` of `topic` at `timestamp` (`EARLIEST_TIMESTAMP`,
    /// `LATEST_TIMESTAMP` or a time in ms). Returns partition -> offset.
    pub async fn list_offsets(
        &self,
        topic: &str,
        partitions: &[i32],
        timestamp: i64,
    ) -> Result<HashMap<i32, i64>> {
        list_offsets(
            &self.client,
            topic,
            partitions,
            timestamp,
            self.config.isolation_level,
        )
        .await
    }

    async fn resolve_positions(&mut self) -> Result<()> {
        let mut todo: BTreeMap<(String, OffsetReset), Vec<i32>> = BTreeMap::new();
        for ((t, p), pos) in &self.positions {
            if let Position::Reset(r) = pos {
                todo.entry((t.clone(), *r)).or_default().push(*p);
            }
        }
        for ((topic, r), parts) in todo {
            let ts = match r {
                OffsetReset::Earliest => EARLIEST_TIMESTAMP,
                OffsetReset::Latest => LATEST_TIMESTAMP,
                OffsetReset::None => {
                    let list: Vec<String> = parts.iter().map(|p| format!("{topic}-{p}")).collect();
                    return Err(GroupError::NoOffsetForPartition(list.join(", ")).into());
                }
            };
            let offsets = self.list_offsets(&topic, &parts, ts).await?;
            for (p, o) in offsets {
                self.positions
                    .insert((topic.clone(), p), Position::Offset(o));
            }
        }
        Ok(())
    }

    /// Fetches records from every assigned partition, waiting up to `timeout` for at least
    /// one. Returns an empty vector when nothing arrived in time.
    pub async fn poll(&mut self, timeout: Duration) -> Result<Vec<ConsumerRecord>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(g) = self.group.as_mut() {
                // Rebalances, listener calls, committed offsets of new partitions, auto-commit.
                g.poll(&mut self.positions, self.config.auto_offset_reset, deadline)
                    .await?;
            }
            let subscribed = self.group.as_ref().is_some_and(|g| g.is_subscribed());
            if !self
                .positions
                .values()
                .any(|p| !matches!(p, Position::Committed))
            {
                if subscribed && Instant::now() < deadline {
                    // Nothing assigned yet: keep the membership going while waiting.
                    let step = Duration::from_millis(100);
                    tokio::time::sleep(
                        step.min(deadline.saturating_duration_since(Instant::now())),
                    )
                    .await;
                    continue;
                }
                tokio::time::sleep_until(deadline.into()).await;
                return Ok(Vec::new());
            }
            let mut attempt = 0;
            loop {
                match self.resolve_positions().await {
                    Ok(()) => break,
                    Err(e) if e.is_retriable() && Instant::now() < deadline => {
                        if e.invalidates_metadata() {
                            for (t, _) in self.positions.keys() {
                                self.client.invalidate_topic(t);
                            }
                        }
                        tokio::time::sleep(self.client.config().backoff(attempt)).await;
                        attempt += 1;
                    }
                    Err(e) => return Err(e),
                }
            }
            let remaining = deadline.saturating_duration_since(Instant::now());
            let records = self
                .fetch_once(remaining.min(self.config.fetch_max_wait))
                .await?;
            if !records.is_empty() || Instant::now() >= deadline {
                return Ok(records);
            }
        }
    }

    async fn fetch_once(&mut self, max_wait: Duration) -> Result<Vec<ConsumerRecord>> {
        // Group by leader.
        let md = self.client.metadata();
        let mut by_node: HashMap<i32, Vec<(String, i32, i64)>> = HashMap::new();
        let mut missing = Vec::new();
        for ((t, p), pos) in &self.positions {
            let Position::Offset(o) = pos else { continue };
            match md.topics.get(t).and_then(|tm| tm.leader(*p)) {
                Some(l) => by_node.entry(l).or_default().push((t.clone(), *p, *o)),
                None => missing.push(t.clone()),
            }
        }
        missing.dedup();
        for t in missing {
            // Refresh for the next round; a failure here shows up again next time.
            let _ = self.client.topic_metadata(&t).await;
        }
        if by_node.is_empty() {
            tokio::time::sleep(self.client.config().retry_backoff).await;
            return Ok(Vec::new());
        }
        let mut set = JoinSet::new();
        for (node, parts) in by_node {
            let client = self.client.clone();
            let cfg = self.config.clone();
            set.spawn(async move {
                let r = fetch_from(&client, node, &parts, &cfg, max_wait).await;
                (parts, r)
            });
        }
        let mut out = Vec::new();
        let mut errors = Vec::new();
        while let Some(joined) = set.join_next().await {
            let (parts, r) = joined.map_err(|e| Error::Protocol(format!("fetch task: {e}")))?;
            match r {
                Ok(resp) => self.handle_fetch(&parts, resp, &mut out),
                Err(e) => {
                    if e.invalidates_metadata() {
                        for (t, _, _) in &parts {
                            self.client.invalidate_topic(t);
                        }
                    }
                    if !e.is_retriable() {
                        return Err(e);
                    }
                    errors.push(e);
                }
            }
        }
        if out.is_empty() && !errors.is_empty() {
            tokio::time::sleep(self.client.config().retry_backoff).await;
        }
        Ok(out)
    }

    fn handle_fetch(
        &mut self,
        requested: &[(String, i32, i64)],
        resp: FetchResponse,
        out: &mut Vec<ConsumerRecord>,
    ) {
        for t in resp.responses {
            let topic = t.topic.0.to_string();
            for p in t.partitions {
                let key = (topic.clone(), p.partition_index);
                let Some(&(_, _, fetch_offset)) = requested
                    .iter()
                    .find(|(rt, rp, _)| *rt == topic && *rp == p.partition_index)
                else {
                    continue;
                };
                // Ignore answers for partitions sought elsewhere meanwhile.
                if self.positions.get(&key) != Some(&Position::Offset(fetch_offset)) {
                    continue;
                }
                match ErrorCode::try_from_code(p.error_code) {
                    None => {}
                    Some(ErrorCode::OffsetOutOfRange) => {
                        tracing::info!(%topic, partition = p.partition_index, fetch_offset, "offset out of range, resetting");
                        self.positions
                            .insert(key, Position::Reset(self.config.auto_offset_reset));
                        continue;
                    }
                    Some(code) => {
                        tracing::debug!(%topic, partition = p.partition_index, ?code, "fetch error");
                        self.client.invalidate_topic(&topic);
                        continue;
                    }
                }
                self.fetched_ends
                    .insert(key.clone(), (p.high_watermark, p.last_stable_offset));
                let Some(records) = p.records else { continue };
                let aborted: Vec<AbortedTransaction> = p
                    .aborted_transactions
                    .iter()
                    .flatten()
                    .map(|a| AbortedTransaction {
                        producer_id: a.producer_id.0,
                        first_offset: a.first_offset,
                    })
                    .collect();
                let next = decode_fetched(
                    &topic,
                    p.partition_index,
                    fetch_offset,
                    records,
                    self.config.isolation_level,
                    &aborted,
                    out,
                );
                if next > fetch_offset {
                    self.positions.insert(key, Position::Offset(next));
                }
            }
        }
    }
}

async fn fetch_from(
    client: &Client,
    node: i32,
    parts: &[(String, i32, i64)],
    cfg: &ConsumerConfig,
    max_wait: Duration,
) -> Result<FetchResponse> {
    let conn = client.connection(node).await?;
    let resp = conn
        .request(|_version| {
            let mut req = FetchRequest::default();
            req.max_wait_ms = max_wait.as_millis().min(i32::MAX as u128) as i32;
            req.min_bytes = cfg.fetch_min_bytes;
            req.max_bytes = cfg.fetch_max_bytes;
            req.isolation_level = cfg.isolation_level;
            req.session_id = 0;
            req.session_epoch = -1;
            let mut topics: Vec<FetchTopic> = Vec::new();
            for (t, p, o) in parts {
                let mut fp = FetchPartition::default();
                fp.partition = *p;
                fp.fetch_offset = *o;
                fp.partition_max_bytes = cfg.max_partition_fetch_bytes;
                match topics.iter_mut().find(|ft| ft.topic.0.as_str() == t) {
                    Some(ft) => ft.partitions.push(fp),
                    None => {
                        let mut ft = FetchTopic::default();
                        ft.topic = TopicName(StrBytes::from_string(t.clone()));
                        ft.partitions.push(fp);
                        topics.push(ft);
                    }
                }
            }
            req.topics = topics;
            req
        })
        .await?;
    if let Some(e) = Error::kafka(resp.error_code, None) {
        return Err(e);
    }
    Ok(resp)
}

/// Decodes the whole batches in `records` (a trailing partial batch is ignored), appending
/// records at or above `fetch_offset` to `out` and skipping control records
/// (`read_uncommitted`; see [`decode_fetched`] for `read_committed`). Returns the offset to
/// fetch next (`fetch_offset` if nothing complete was found).
pub fn decode_records(
    topic: &str,
    partition: i32,
    fetch_offset: i64,
    records: Bytes,
    out: &mut Vec<ConsumerRecord>,
) -> i64 {
    decode_fetched(
        topic,
        partition,
        fetch_offset,
        records,
        READ_UNCOMMITTED,
        &[],
        out,
    )
}

/// ListOffsets for `partitions` of `topic`, sent to each partition's leader, with retries.
pub async fn list_offsets(
    client: &Client,
    topic: &str,
    partitions: &[i32],
    timestamp: i64,
    isolation_level: i8,
) -> Result<HashMap<i32, i64>> {
    client
        .retry(|| async {
            let mut by_leader: HashMap<i32, Vec<i32>> = HashMap::new();
            for &p in partitions {
                let l = client.leader_for(topic, p).await?;
                by_leader.entry(l).or_default().push(p);
            }
            let mut out = HashMap::new();
            for (leader, parts) in by_leader {
                let conn = client.connection(leader).await?;
                let resp = conn
                    .request(|version| {
                        let mut req = ListOffsetsRequest::default();
                        req.replica_id = (-1).into();
                        if version >= 2 {
                            req.isolation_level = isolation_level;
                        }
                        let mut t = ListOffsetsTopic::default();
                        t.name = TopicName(StrBytes::from_string(topic.to_string()));
                        t.partitions = parts
                            .iter()
                            .map(|&p| {
                                let mut lp = ListOffsetsPartition::default();
                                lp.partition_index = p;
                                lp.timestamp = timestamp;
                                lp
                            })
                            .collect();
                        req.topics = vec![t];
                        req
                    })
                    .await?;
                for t in &resp.topics {
                    for p in &t.partitions {
                        if let Some(e) = Error::kafka(p.error_code, None) {
                            if e.invalidates_metadata() {
                                client.invalidate_topic(topic);
                            }
                            return Err(e);
                        }
                        out.insert(p.partition_index, p.offset);
                    }
                }
            }
            Ok(out)
        })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::producer::{Compression, ProducerBatch, ProducerRecord};
    use bytes::BytesMut;

    fn batch(base: i64, n: usize, c: Compression) -> Bytes {
        let mut b = ProducerBatch::new("t", 0, 0);
        for i in 0..n {
            b.try_append(
                ProducerRecord {
                    topic: "t".into(),
                    value: Some(Bytes::from(format!("v{}", base + i as i64))),
                    ..Default::default()
                },
                None,
                1 << 20,
            )
            .unwrap();
        }
        let mut bytes = BytesMut::from(&b.close(c).unwrap()[..]);
        bytes[0..8].copy_from_slice(&base.to_be_bytes());
        // The base offset is not covered by the CRC, so patching it keeps the batch valid.
        bytes.freeze()
    }

    #[test]
    fn skips_records_below_fetch_offset_and_partial_batches() {
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&batch(10, 5, Compression::Gzip));
        buf.extend_from_slice(&batch(15, 3, Compression::None));
        let partial = batch(18, 4, Compression::None);
        buf.extend_from_slice(&partial[..partial.len() - 7]);
        let mut out = Vec::new();
        let next = decode_records("t", 0, 12, buf.freeze(), &mut out);
        assert_eq!(next, 18);
        let offsets: Vec<i64> = out.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, vec![12, 13, 14, 15, 16, 17]);
        assert_eq!(out[0].value.as_deref(), Some(&b"v12"[..]));
    }

    #[test]
    fn empty_fetch_keeps_position() {
        let mut out = Vec::new();
        assert_eq!(decode_records("t", 0, 7, Bytes::new(), &mut out), 7);
        assert!(out.is_empty());
    }
}

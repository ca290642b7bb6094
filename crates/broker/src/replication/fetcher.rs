//! The follower side of replication (Kafka's `AbstractFetcherThread` / `ReplicaFetcherThread`).
//!
//! One [`ReplicaFetcher`] task per leader broker fetches all partitions this broker follows from
//! it, with Fetch v15 (topic ids; `ReplicaState`: this node and its broker epoch, which the
//! leader checks before it lets this broker into an ISR (KIP-903); `current_leader_epoch`,
//! `last_fetched_epoch`):
//!
//! - data: appended as follower; the follower's HW becomes min(leader HW, own LEO) and its log
//!   start follows the leader's;
//! - a diverging epoch (KIP-320): the follower truncates to where its log and the leader's agree
//!   (Kafka's `getOffsetTruncationState`) and fetches on from there; an answer for an epoch the
//!   follower does not know truncates to an intermediate point, and the next fetch asks again;
//! - OFFSET_OUT_OF_RANGE: behind the leader's log start the log restarts empty there; ahead of
//!   the leader, it is truncated to the leader's HW;
//! - other partition errors (fenced / unknown epoch, not leader) back that partition off; a
//!   failed request backs off the whole fetcher and reconnects.
//!
//! The response is processed under the fetcher's partition-map lock, so after
//! [`ReplicaFetcher::remove_partitions`] returns no fetch touches those partitions again.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use strom_protocol::kafka::messages::fetch_request::{FetchPartition, FetchTopic, ReplicaState};
use strom_protocol::kafka::messages::fetch_response::PartitionData;
use strom_protocol::kafka::messages::{BrokerId, FetchRequest, FetchResponse};
use strom_protocol::ErrorCode;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::inter_broker::{Channel, InterBrokerClient};
use crate::partition::Partition;
use crate::replica_manager::TopicPartition;

/// The Fetch version followers send: the first with `ReplicaState` (the follower's broker
/// epoch, KIP-903), as Kafka's followers send since 3.7 (v12 brought `last_fetched_epoch` /
/// `diverging_epoch`, v13 topic ids).
pub const REPLICA_FETCH_VERSION: i16 = 15;

/// Kafka's `replica.fetch.*` settings.
#[derive(Debug, Clone)]
pub struct FetcherConfig {
    /// This broker's id, sent as the fetch's replica id.
    pub node_id: i32,
    /// This broker's incarnation: its broker epoch goes into every fetch (-1 without one).
    pub lifecycle: Option<Arc<crate::broker_lifecycle::BrokerLifecycleManager>>,
    /// `replica.fetch.wait.max.ms` (500).
    pub max_wait_ms: i32,
    /// `replica.fetch.min.bytes` (1).
    pub min_bytes: i32,
    /// `replica.fetch.response.max.bytes` (10 MiB).
    pub max_bytes: i32,
    /// `replica.fetch.max.bytes` (1 MiB).
    pub partition_max_bytes: i32,
    /// `replica.fetch.backoff.ms` (1000).
    pub backoff: Duration,
    /// `replica.socket.timeout.ms` (30000); must exceed `max_wait_ms`.
    pub request_timeout: Duration,
}

impl FetcherConfig {
    pub fn new(node_id: i32) -> Self {
        Self {
            node_id,
            lifecycle: None,
            max_wait_ms: 500,
            min_bytes: 1,
            max_bytes: 10 * 1024 * 1024,
            partition_max_bytes: 1024 * 1024,
            backoff: Duration::from_millis(1000),
            request_timeout: Duration::from_millis(30_000),
        }
    }

    /// Reads the Kafka-named broker properties, defaults for the rest.
    pub fn from_props(node_id: i32, props: &BTreeMap<String, String>) -> Self {
        let mut c = Self::new(node_id);
        let get = |k: &str| props.get(k).and_then(|v| v.trim().parse::<i64>().ok());
        if let Some(v) = get("replica.fetch.wait.max.ms") {
            c.max_wait_ms = v.clamp(0, i32::MAX as i64) as i32;
        }
        if let Some(v) = get("replica.fetch.min.bytes") {
            c.min_bytes = v.clamp(0, i32::MAX as i64) as i32;
        }
        if let Some(v) = get("replica.fetch.response.max.bytes") {
            c.max_bytes = v.clamp(0, i32::MAX as i64) as i32;
        }
        if let Some(v) = get("replica.fetch.max.bytes") {
            c.partition_max_bytes = v.clamp(0, i32::MAX as i64) as i32;
        }
        if let Some(v) = get("replica.fetch.backoff.ms") {
            c.backoff = Duration::from_millis(v.max(0) as u64);
        }
        if let Some(v) = get("replica.socket.timeout.ms") {
            c.request_timeout = Duration::from_millis(v.max(0) as u64);
        }
        c
    }
}

/// Where one followed partition stands (Kafka's `PartitionFetchState`).
struct FetchState {
    partition: Arc<Partition>,
    fetch_offset: i64,
    current_leader_epoch: i32,
    delayed_until: Option<Instant>,
}

/// A snapshot of one followed partition, for callers and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchPosition {
    pub fetch_offset: i64,
    pub current_leader_epoch: i32,
    pub delayed: bool,
}

struct Shared {
    partitions: Mutex<HashMap<TopicPartition, FetchState>>,
    changed: Notify,
}

/// Fetches from one leader broker for every partition this broker follows there.
pub struct ReplicaFetcher {
    leader_id: i32,
    leader_addr: String,
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl ReplicaFetcher {
    /// Starts the fetch task on the current tokio runtime with a client of its own (see
    /// [`Self::start_on`]; a broker's fetchers share the broker's one client).
    pub fn start(config: FetcherConfig, leader_id: i32, leader_addr: &str) -> Arc<Self> {
        let client = InterBrokerClient::new(config.node_id);
        Self::start_on(
            &tokio::runtime::Handle::current(),
            config,
            client,
            leader_id,
            leader_addr,
        )
    }

    /// Starts the fetch task on `rt`; its Fetch requests go over `client`'s
    /// [`Channel::ReplicaFetch`] connection to the leader.
    pub fn start_on(
        rt: &tokio::runtime::Handle,
        config: FetcherConfig,
        client: Arc<InterBrokerClient>,
        leader_id: i32,
        leader_addr: &str,
    ) -> Arc<Self> {
        let shared = Arc::new(Shared {
            partitions: Mutex::new(HashMap::new()),
            changed: Notify::new(),
        });
        let (stop, stop_rx) = watch::channel(false);
        let task = rt.spawn(run(
            config,
            client,
            leader_id,
            leader_addr.to_string(),
            shared.clone(),
            stop_rx,
        ));
        Arc::new(Self {
            leader_id,
            leader_addr: leader_addr.to_string(),
            shared,
            stop,
            task: Mutex::new(Some(task)),
        })
    }

    pub fn leader_id(&self) -> i32 {
        self.leader_id
    }
    pub fn leader_addr(&self) -> &str {
        &self.leader_addr
    }

    /// Starts following `partitions` (each with the leader epoch it follows in) from its LEO.
    /// A partition already here restarts from its LEO if the epoch changed.
    pub fn add_partitions(&self, partitions: Vec<(Arc<Partition>, i32)>) {
        let mut map = self.shared.partitions.lock();
        for (p, epoch) in partitions {
            let key = (p.topic.clone(), p.index);
            if let Some(st) = map.get(&key) {
                if st.current_leader_epoch == epoch && Arc::ptr_eq(&st.partition, &p) {
                    continue;
                }
            }
            let fetch_offset = p.log_end_offset();
            tracing::info!(topic = %p.topic, partition = p.index, leader = self.leader_id, epoch, fetch_offset, "following");
            map.insert(
                key,
                FetchState {
                    partition: p,
                    fetch_offset,
                    current_leader_epoch: epoch,
                    delayed_until: None,
                },
            );
        }
        drop(map);
        self.shared.changed.notify_one();
    }

    /// Stops following `keys`. When this returns, no fetch response is applied to them anymore.
    pub fn remove_partitions(&self, keys: &[TopicPartition]) -> Vec<Arc<Partition>> {
        let mut map = self.shared.partitions.lock();
        keys.iter()
            .filter_map(|k| map.remove(k).map(|st| st.partition))
            .collect()
    }

    pub fn partition_count(&self) -> usize {
        self.shared.partitions.lock().len()
    }

    pub fn position(&self, key: &TopicPartition) -> Option<FetchPosition> {
        self.shared
            .partitions
            .lock()
            .get(key)
            .map(|st| FetchPosition {
                fetch_offset: st.fetch_offset,
                current_leader_epoch: st.current_leader_epoch,
                delayed: st.delayed_until.is_some(),
            })
    }

    /// Signals the task to stop (an in-flight fetch is abandoned) without waiting.
    pub fn initiate_shutdown(&self) {
        let _ = self.stop.send(true);
    }

    /// Stops the task and waits for it.
    pub async fn shutdown(&self) {
        self.initiate_shutdown();
        let task = self.task.lock().take();
        if let Some(t) = task {
            let _ = t.await;
        }
    }
}

impl Drop for ReplicaFetcher {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// Waits for `d` unless a stop is signalled; `false` when stopping.
async fn sleep_or_stop(d: Duration, stop: &mut watch::Receiver<bool>) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(d) => !*stop.borrow(),
        _ = stop.changed() => false,
    }
}

async fn run(
    config: FetcherConfig,
    client: Arc<InterBrokerClient>,
    leader_id: i32,
    addr: String,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        if *stop.borrow() {
            break;
        }
        let Some((req, sent)) = build_request(&config, &shared) else {
            let next = earliest_delay(&shared);
            tokio::select! {
                _ = shared.changed.notified() => {}
                _ = stop.changed() => {}
                _ = async {
                    match next {
                        Some(t) => tokio::time::sleep_until(t).await,
                        None => std::future::pending().await,
                    }
                } => {}
            }
            continue;
        };
        let connected = tokio::select! {
            r = client.connection(leader_id, &addr, Channel::ReplicaFetch, config.request_timeout) => r,
            _ = stop.changed() => break,
        };
        let c = match connected {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(leader = leader_id, %addr, error = %e, "replica fetcher cannot connect");
                if !sleep_or_stop(config.backoff, &mut stop).await {
                    break;
                }
                continue;
            }
        };
        let result = tokio::select! {
            r = c.send(&req, REPLICA_FETCH_VERSION) => r,
            _ = stop.changed() => break,
        };
        match result {
            Ok(resp) if resp.error_code == 0 => {
                process_response(&config, &shared, resp, &sent);
            }
            Ok(resp) => {
                tracing::warn!(
                    leader = leader_id,
                    error_code = resp.error_code,
                    "replica fetch failed"
                );
                if !sleep_or_stop(config.backoff, &mut stop).await {
                    break;
                }
            }
            Err(e) => {
                tracing::warn!(leader = leader_id, %addr, error = %e, "replica fetch failed");
                client.disconnect(leader_id, Channel::ReplicaFetch, &c, "replica fetch failed");
                if !sleep_or_stop(config.backoff, &mut stop).await {
                    break;
                }
            }
        }
    }
    // The connection stays in the client: a fetch abandoned mid-flight is answered there and
    // discarded (responses are matched by correlation id), and a fetcher started again for
    // this leader reuses it.
}

fn earliest_delay(shared: &Shared) -> Option<Instant> {
    shared
        .partitions
        .lock()
        .values()
        .filter_map(|st| st.delayed_until)
        .min()
}

/// What a fetch asked for each partition: (fetch offset, current leader epoch), and the names
/// of the topics it named by id.
struct Sent {
    partitions: HashMap<TopicPartition, (i64, i32)>,
    names: HashMap<uuid::Uuid, String>,
}

/// The fetch for every partition not backing off, and what was asked for each.
fn build_request(config: &FetcherConfig, shared: &Shared) -> Option<(FetchRequest, Sent)> {
    let now = Instant::now();
    let mut map = shared.partitions.lock();
    let mut topics: BTreeMap<uuid::Uuid, Vec<FetchPartition>> = BTreeMap::new();
    let mut sent = HashMap::new();
    let mut names = HashMap::new();
    for (key, st) in map.iter_mut() {
        match st.delayed_until {
            Some(t) if t > now => continue,
            _ => st.delayed_until = None,
        }
        let p = &st.partition;
        names.insert(p.topic_id, key.0.clone());
        topics.entry(p.topic_id).or_default().push(
            FetchPartition::default()
                .with_partition(key.1)
                .with_current_leader_epoch(st.current_leader_epoch)
                .with_fetch_offset(st.fetch_offset)
                .with_last_fetched_epoch(p.latest_epoch().unwrap_or(-1))
                .with_log_start_offset(p.log_start_offset())
                .with_partition_max_bytes(config.partition_max_bytes),
        );
        sent.insert(key.clone(), (st.fetch_offset, st.current_leader_epoch));
    }
    if sent.is_empty() {
        return None;
    }
    let req = FetchRequest::default()
        .with_replica_state(
            ReplicaState::default()
                .with_replica_id(BrokerId(config.node_id))
                .with_replica_epoch(config.lifecycle.as_ref().map_or(-1, |l| l.broker_epoch())),
        )
        .with_max_wait_ms(config.max_wait_ms)
        .with_min_bytes(config.min_bytes)
        .with_max_bytes(config.max_bytes)
        .with_isolation_level(0)
        .with_session_id(0)
        .with_session_epoch(-1)
        .with_topics(
            topics
                .into_iter()
                .map(|(t, parts)| {
                    FetchTopic::default()
                        .with_topic_id(t)
                        .with_partitions(parts)
                })
                .collect(),
        );
    Some((
        req,
        Sent {
            partitions: sent,
            names,
        },
    ))
}

fn process_response(config: &FetcherConfig, shared: &Shared, resp: FetchResponse, sent: &Sent) {
    let mut map = shared.partitions.lock();
    let now_ms = crate::now_ms();
    for topic in resp.responses {
        let Some(name) = sent.names.get(&topic.topic_id).cloned() else {
            continue;
        };
        for pd in topic.partitions {
            let key = (name.clone(), pd.partition_index);
            let Some(st) = map.get_mut(&key) else {
                continue;
            };
            // Removed and re-added, or moved on since the request: this answer is stale.
            if sent.partitions.get(&key) != Some(&(st.fetch_offset, st.current_leader_epoch)) {
                continue;
            }
            if let Err(e) = process_partition(st, &pd, now_ms) {
                tracing::warn!(topic = %name, partition = pd.partition_index, error = %e, "replica fetch: backing off partition");
                st.delayed_until = Some(Instant::now() + config.backoff);
            }
        }
    }
}

fn process_partition(st: &mut FetchState, pd: &PartitionData, now_ms: i64) -> Result<(), String> {
    let p = st.partition.clone();
    let code = pd.error_code;
    if code == ErrorCode::OffsetOutOfRange.code() {
        return handle_out_of_range(st, pd.log_start_offset, pd.high_watermark);
    }
    if code != 0 {
        return Err(format!("error code {code}"));
    }
    let div = &pd.diverging_epoch;
    if div.epoch >= 0 || div.end_offset >= 0 {
        let target = truncation_offset(&p, div.epoch, div.end_offset);
        tracing::info!(topic = %p.topic, partition = p.index, leader_epoch = div.epoch, leader_end_offset = div.end_offset, truncate_to = target, "diverging epoch: truncating");
        crate::disk_io::blocking(|| p.truncate_to(target)).map_err(|e| e.to_string())?;
        st.fetch_offset = p.log_end_offset();
        return Ok(());
    }
    if p.log_end_offset() != st.fetch_offset {
        // The log moved under us (truncated elsewhere): start again from its end.
        st.fetch_offset = p.log_end_offset();
        return Ok(());
    }
    let records = pd.records.as_deref().unwrap_or_default();
    if !records.is_empty() {
        // A follower's append rolls and flushes as the leader's does: off the async workers.
        crate::disk_io::blocking(|| p.append_records_to_follower(records, now_ms))
            .map_err(|e| e.to_string())?;
        st.fetch_offset = p.log_end_offset();
    }
    if pd.high_watermark >= 0 {
        p.update_follower_high_watermark(pd.high_watermark);
    }
    if pd.log_start_offset >= 0 {
        p.follower_maybe_increment_log_start_offset(pd.log_start_offset)
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Where a follower truncates given the leader's (epoch, end offset) for its last fetched epoch
/// (Kafka's `AbstractFetcherThread.getOffsetTruncationState`).
pub fn truncation_offset(p: &Partition, leader_epoch: i32, leader_end_offset: i64) -> i64 {
    let leo = p.log_end_offset();
    if leader_end_offset < 0 {
        return p.high_watermark().min(leo);
    }
    if leader_epoch < 0 {
        return leader_end_offset.min(leo);
    }
    let (epoch, end) = p.with_log(|log| log.end_offset_for_epoch(leader_epoch));
    if epoch < 0 || end < 0 {
        // The follower knows no epoch <= the leader's: the leader's end offset is safe.
        leader_end_offset.min(leo)
    } else if epoch != leader_epoch {
        // The follower does not know the leader's epoch: cut to the end of its own largest
        // smaller epoch, then fetch again, which checks the divergence again.
        end.min(leo)
    } else {
        end.min(leader_end_offset).min(leo)
    }
}

/// OFFSET_OUT_OF_RANGE from the leader (Kafka's `handleOutOfRangeError`): behind the leader's log
/// start, restart empty at it; otherwise the follower is ahead of the leader, so it truncates to
/// the leader's HW (the leader's LEO is not in the answer; the HW is below it, and whatever is
/// cut is fetched again).
fn handle_out_of_range(
    st: &mut FetchState,
    leader_log_start: i64,
    leader_hw: i64,
) -> Result<(), String> {
    let p = st.partition.clone();
    let leo = p.log_end_offset();
    if leader_log_start >= 0 && leo < leader_log_start {
        tracing::info!(topic = %p.topic, partition = p.index, leo, leader_log_start, "behind the leader's log start: restarting the log there");
        p.truncate_fully_and_start_at(leader_log_start)
            .map_err(|e| e.to_string())?;
        st.fetch_offset = p.log_end_offset();
        return Ok(());
    }
    let target = leader_hw.max(leader_log_start);
    if leader_hw >= 0 && target < leo {
        tracing::warn!(topic = %p.topic, partition = p.index, leo, leader_hw, "ahead of the leader: truncating to its HW");
        crate::disk_io::blocking(|| p.truncate_to(target)).map_err(|e| e.to_string())?;
        st.fetch_offset = p.log_end_offset();
        return Ok(());
    }
    Err(format!(
        "offset {} out of range on the leader (log start {leader_log_start}, HW {leader_hw})",
        st.fetch_offset
    ))
}

/// Every [`ReplicaFetcher`] of this broker, one per leader broker (Kafka's
/// `ReplicaFetcherManager` with `num.replica.fetchers` = 1).
pub struct FetcherManager {
    config: FetcherConfig,
    client: Arc<InterBrokerClient>,
    rt: tokio::runtime::Handle,
    fetchers: Mutex<HashMap<i32, Arc<ReplicaFetcher>>>,
}

impl FetcherManager {
    /// Must be called inside a tokio runtime; fetchers are spawned on it.
    pub fn new(config: FetcherConfig, client: Arc<InterBrokerClient>) -> Self {
        Self {
            config,
            client,
            rt: tokio::runtime::Handle::current(),
            fetchers: Mutex::new(HashMap::new()),
        }
    }

    /// Follows `partitions` (with the leader epoch of each) from `leader_id` at `leader_addr`.
    /// They leave any other leader's fetcher first; a leader whose address changed gets a new
    /// fetcher that takes over all its partitions.
    pub fn add_partitions(
        &self,
        leader_id: i32,
        leader_addr: &str,
        partitions: Vec<(Arc<Partition>, i32)>,
    ) {
        let keys: Vec<TopicPartition> = partitions
            .iter()
            .map(|(p, _)| (p.topic.clone(), p.index))
            .collect();
        let mut fetchers = self.fetchers.lock();
        for (id, f) in fetchers.iter() {
            if *id != leader_id {
                f.remove_partitions(&keys);
            }
        }
        let mut carried = Vec::new();
        if let Some(f) = fetchers.get(&leader_id) {
            if f.leader_addr() != leader_addr {
                let all: Vec<TopicPartition> = f.shared.partitions.lock().keys().cloned().collect();
                let epochs: HashMap<TopicPartition, i32> = f
                    .shared
                    .partitions
                    .lock()
                    .iter()
                    .map(|(k, st)| (k.clone(), st.current_leader_epoch))
                    .collect();
                carried = f
                    .remove_partitions(&all)
                    .into_iter()
                    .map(|p| {
                        let e = epochs[&(p.topic.clone(), p.index)];
                        (p, e)
                    })
                    .collect();
                f.initiate_shutdown();
                fetchers.remove(&leader_id);
            }
        }
        let f = fetchers
            .entry(leader_id)
            .or_insert_with(|| {
                ReplicaFetcher::start_on(
                    &self.rt,
                    self.config.clone(),
                    self.client.clone(),
                    leader_id,
                    leader_addr,
                )
            })
            .clone();
        drop(fetchers);
        carried.extend(partitions);
        f.add_partitions(carried);
        self.shutdown_idle();
    }

    /// Stops following `keys` (this broker became their leader, or no longer hosts them).
    pub fn remove_partitions(&self, keys: &[TopicPartition]) {
        for f in self.fetchers.lock().values() {
            f.remove_partitions(keys);
        }
        self.shutdown_idle();
    }

    /// The leader a partition is fetched from and where its fetch stands.
    pub fn position(&self, key: &TopicPartition) -> Option<(i32, FetchPosition)> {
        self.fetchers
            .lock()
            .iter()
            .find_map(|(id, f)| f.position(key).map(|pos| (*id, pos)))
    }

    fn shutdown_idle(&self) {
        self.fetchers.lock().retain(|_, f| {
            let idle = f.partition_count() == 0;
            if idle {
                f.initiate_shutdown();
            }
            !idle
        });
    }

    /// Stops every fetcher and waits for them.
    pub async fn shutdown(&self) {
        let all: Vec<Arc<ReplicaFetcher>> = self.fetchers.lock().drain().map(|(_, f)| f).collect();
        for f in all {
            f.shutdown().await;
        }
    }
}

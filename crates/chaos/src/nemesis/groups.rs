//! The group workload: consumer groups subscribed to the nemesis topic while the nemesis works.
//! Each member polls, records every record it receives (with the generation or member epoch it
//! reports), every rebalance callback and what it holds after each poll, and commits
//! synchronously after each batch the position past the records it received (every commit's
//! outcome recorded: acknowledged, refused, or unknown when it timed out). Members close and
//! come back (leave + join) on a seeded schedule so that rebalances happen under faults. A
//! sampler asks OffsetFetch (`require_stable`, as a consumer resuming does) for the committed
//! offsets every half second; after the run the members close and the final committed offsets
//! are fetched. `groups_checker` judges it all.
//!
//! Every client call is bounded, as in `workload`: a poll that does not return in time (a
//! JoinGroup held by a paused coordinator beyond the rebalance timeout) drops the member
//! without callbacks, as a crashed process would, and a new one takes its place.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use strom_client::group::{GroupConfig, GroupError, GroupProtocol, RebalanceListener};
use strom_client::{Client, Consumer, ConsumerConfig, ErrorCode, OffsetReset};
use strom_client::{Error as ClientError, TopicPartition};

use strom_group_coordinator::records::CoordinatorRecord;

use super::groups_checker::{
    Commit, Consumed, CoordinatorAssignment, Event, EventKind, GroupHistory, GroupReport, Holding,
    Outcome, Protocol, Sample,
};
use super::nemesis::Rng;
use super::workload::{client_config, TOPIC};

/// `--group-protocol`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupMode {
    /// One classic group.
    Classic,
    /// One consumer-protocol (KIP-848) group.
    Consumer,
    /// Both, side by side: one group of each protocol (a group holding members of both, which
    /// the coordinator converts online, is tested by `tests/groups_migration.rs`, not here).
    Mixed,
}

/// Bound on a poll: above the classic rebalance timeout, which a JoinGroup may take.
const POLL_BOUND: Duration = Duration::from_secs(40);
/// Bound on a commit (the client retries a moving coordinator within it).
const COMMIT_BOUND: Duration = Duration::from_secs(12);
/// Bound on a close (revoke + LeaveGroup).
const CLOSE_BOUND: Duration = Duration::from_secs(10);
/// Bound on one OffsetFetch round of the sampler.
const FETCH_BOUND: Duration = Duration::from_secs(6);
/// Consecutive poll errors after which a member is dropped and replaced.
const MAX_POLL_ERRORS: u32 = 30;

/// One group of the run.
pub struct GroupRun {
    pub name: String,
    pub protocol: Protocol,
    /// Classic: the assignor; consumer: the broker's default.
    pub assignor: Option<String>,
    history: Mutex<GroupHistory>,
    members: AtomicU64,
}

impl GroupRun {
    pub fn history(&self) -> GroupHistory {
        let mut h = self.history.lock().unwrap().clone();
        h.members = self.members.load(Ordering::Relaxed);
        h
    }

    fn note(&self, e: String) {
        self.history.lock().unwrap().first_error.get_or_insert(e);
    }
}

/// The groups of the run, their tasks and the clock their times are on.
pub struct Groups {
    pub groups: Vec<Arc<GroupRun>>,
    t0: Instant,
    stop: Arc<AtomicBool>,
    members: Vec<tokio::task::JoinHandle<()>>,
    sampler: Option<tokio::task::JoinHandle<()>>,
    bootstrap: String,
    partitions: i32,
}

fn micros(t0: Instant) -> u64 {
    t0.elapsed().as_micros() as u64
}

impl Groups {
    /// Starts `members` members in each group of `mode` and the OffsetFetch sampler. The
    /// classic group's assignor comes from the seed (odd: cooperative-sticky, even: range, so
    /// eager), printed.
    pub fn start(
        mode: GroupMode,
        members: usize,
        seed: u64,
        bootstrap: &str,
        partitions: i32,
    ) -> Groups {
        let t0 = Instant::now();
        let stop = Arc::new(AtomicBool::new(false));
        let classic_assignor = if seed % 2 == 1 {
            "cooperative-sticky"
        } else {
            "range"
        };
        let mut groups = Vec::new();
        if members > 0 {
            if mode != GroupMode::Consumer {
                groups.push(("nemesis-classic", Protocol::Classic));
            }
            if mode != GroupMode::Classic {
                groups.push(("nemesis-consumer", Protocol::Consumer));
            }
        }
        let groups: Vec<Arc<GroupRun>> = groups
            .into_iter()
            .map(|(name, protocol)| {
                Arc::new(GroupRun {
                    name: name.to_string(),
                    protocol,
                    assignor: (protocol == Protocol::Classic).then(|| classic_assignor.to_string()),
                    history: Mutex::new(GroupHistory {
                        group: name.to_string(),
                        protocol: Some(protocol),
                        ..Default::default()
                    }),
                    members: AtomicU64::new(0),
                })
            })
            .collect();
        let mut tasks = Vec::new();
        for (gi, g) in groups.iter().enumerate() {
            for slot in 0..members {
                let m = Member {
                    slot,
                    group: g.clone(),
                    bootstrap: bootstrap.to_string(),
                    t0,
                    stop: stop.clone(),
                    rng: Rng::new(seed ^ (0x5eed_0000 + (gi as u64) * 64 + slot as u64)),
                };
                tasks.push(tokio::spawn(m.run()));
            }
        }
        let sampler = (!groups.is_empty()).then(|| {
            tokio::spawn(sample(
                Reader::new(bootstrap, partitions, t0),
                groups.clone(),
                stop.clone(),
            ))
        });
        Groups {
            groups,
            t0,
            stop,
            members: tasks,
            sampler,
            bootstrap: bootstrap.to_string(),
            partitions,
        }
    }

    pub fn abort_handles(&self) -> Vec<tokio::task::AbortHandle> {
        self.members
            .iter()
            .chain(self.sampler.iter())
            .map(|h| h.abort_handle())
            .collect()
    }

    /// Stops the members (each closes, bounded) and the sampler, then fetches the final
    /// committed offsets of every group (bounded; a group that never answers has none, which
    /// the checker reports against its acknowledged commits).
    pub async fn finish(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for h in self.members.drain(..) {
            let _ = h.await;
        }
        if let Some(h) = self.sampler.take() {
            let _ = h.await;
        }
        let deadline = Instant::now() + Duration::from_secs(45);
        let mut reader = Reader::new(&self.bootstrap, self.partitions, self.t0);
        let mut todo: Vec<Arc<GroupRun>> = self.groups.clone();
        while !todo.is_empty() && Instant::now() < deadline {
            let mut left = Vec::new();
            for g in todo {
                match reader.fetch(&g.name).await {
                    Ok(s) => g.history.lock().unwrap().last = Some(s),
                    Err(e) => {
                        g.note(format!("final OffsetFetch: {e:#}"));
                        left.push(g);
                    }
                }
            }
            todo = left;
            if !todo.is_empty() {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
        for g in self
            .groups
            .iter()
            .filter(|g| g.protocol == Protocol::Consumer)
        {
            match tokio::time::timeout(
                Duration::from_secs(45),
                coordinator_records(&self.bootstrap, &g.name),
            )
            .await
            {
                Ok(Ok(records)) => g.history.lock().unwrap().coordinator = Some(records),
                Ok(Err(e)) => g.note(format!("reading the coordinator's records: {e:#}")),
                Err(_) => g.note("reading the coordinator's records: timed out after 45 s".into()),
            }
        }
    }
}

/// The group's `ConsumerGroupCurrentMemberAssignment` records, read from its
/// `__consumer_offsets` partition up to the high watermark.
async fn coordinator_records(
    bootstrap: &str,
    group: &str,
) -> anyhow::Result<Vec<CoordinatorAssignment>> {
    const OFFSETS_TOPIC: &str = "__consumer_offsets";
    let client = Client::connect(client_config(bootstrap, "nemesis-coordinator-records")).await?;
    let partitions = client.topic_metadata(OFFSETS_TOPIC).await?.partitions.len() as i32;
    anyhow::ensure!(partitions > 0, "{OFFSETS_TOPIC} has no partitions");
    let p = strom_group_coordinator::topic::partition_for(group, partitions);
    let config = ConsumerConfig {
        auto_offset_reset: OffsetReset::Earliest,
        fetch_max_wait: Duration::from_millis(200),
        ..Default::default()
    };
    let mut consumer = Consumer::new(client, config);
    consumer.assign(OFFSETS_TOPIC, Some(&[p])).await?;
    consumer.seek_to_beginning(OFFSETS_TOPIC, None);
    let end = consumer
        .list_offsets(
            OFFSETS_TOPIC,
            &[p],
            strom_client::consumer::LATEST_TIMESTAMP,
        )
        .await?
        .get(&p)
        .copied()
        .unwrap_or(0);
    let mut out: Vec<CoordinatorAssignment> = Vec::new();
    let mut names: std::collections::HashMap<String, String> = Default::default();
    let mut next = 0;
    while next < end {
        for r in consumer.poll(Duration::from_millis(500)).await? {
            if r.offset >= end {
                continue;
            }
            next = next.max(r.offset + 1);
            let Some(key) = r.key.as_deref() else {
                continue;
            };
            let (k, v) = match CoordinatorRecord::decode(key, r.value.as_deref()) {
                Ok(CoordinatorRecord::ConsumerGroupCurrentMemberAssignment(k, v)) => (k, v),
                // The client id is the workload's member name: shown with the member id.
                Ok(CoordinatorRecord::ConsumerGroupMemberMetadata(k, Some((_, v))))
                    if k.group_id == group =>
                {
                    names.insert(k.member_id, v.client_id);
                    continue;
                }
                _ => continue,
            };
            if k.group_id != group {
                continue;
            }
            let (epoch, held) = match v {
                Some((_, v)) => (
                    v.member_epoch,
                    Some(
                        v.assigned_partitions
                            .iter()
                            .chain(v.partitions_pending_revocation.iter())
                            .flat_map(|t| t.partitions.iter().map(|&p| (t.topic_id.to_string(), p)))
                            .collect(),
                    ),
                ),
                None => (-1, None),
            };
            out.push(CoordinatorAssignment {
                offset: r.offset,
                member: k.member_id,
                epoch,
                held,
            });
        }
    }
    for c in &mut out {
        if let Some(n) = names.get(&c.member) {
            c.member = format!("{n} ({})", c.member);
        }
    }
    Ok(out)
}

/// Rebalance callbacks, recorded with their time; the generation is stamped after the poll.
struct Recorder {
    member: String,
    t0: Instant,
    pending: Arc<Mutex<Vec<Event>>>,
}

impl Recorder {
    fn push(&self, kind: EventKind, parts: &[TopicPartition]) {
        let partitions: Vec<i32> = parts
            .iter()
            .filter(|tp| tp.topic == TOPIC)
            .map(|tp| tp.partition)
            .collect();
        self.pending.lock().unwrap().push(Event {
            member: self.member.clone(),
            at: micros(self.t0),
            kind,
            partitions,
            generation: -1,
        });
    }
}

impl RebalanceListener for Recorder {
    fn on_partitions_revoked(&mut self, partitions: &[TopicPartition]) {
        self.push(EventKind::Revoked, partitions);
    }
    fn on_partitions_assigned(&mut self, partitions: &[TopicPartition]) {
        self.push(EventKind::Assigned, partitions);
    }
    fn on_partitions_lost(&mut self, partitions: &[TopicPartition]) {
        self.push(EventKind::Lost, partitions);
    }
}

struct Member {
    slot: usize,
    group: Arc<GroupRun>,
    bootstrap: String,
    t0: Instant,
    stop: Arc<AtomicBool>,
    rng: Rng,
}

/// What one incarnation of a member does with its consumer.
struct Incarnation {
    name: String,
    consumer: Consumer,
    pending: Arc<Mutex<Vec<Event>>>,
    holding: Option<(i32, Vec<i32>)>,
}

impl Member {
    fn config(&self) -> ConsumerConfig {
        let classic = self.group.protocol == Protocol::Classic;
        ConsumerConfig {
            auto_offset_reset: OffsetReset::Earliest,
            fetch_max_wait: Duration::from_millis(200),
            group: GroupConfig {
                group_id: Some(self.group.name.clone()),
                group_protocol: if classic {
                    GroupProtocol::Classic
                } else {
                    GroupProtocol::Consumer
                },
                session_timeout: Duration::from_secs(10),
                heartbeat_interval: Duration::from_secs(1),
                // The rebalance timeout: the consumer protocol's is kept well above the poll
                // and commit bounds, so that no member is fenced for revoking slowly (the
                // checker's handover rule relies on it).
                max_poll_interval: Duration::from_secs(if classic { 30 } else { 60 }),
                partition_assignment_strategy: match &self.group.assignor {
                    Some(a) => vec![a.clone()],
                    None => GroupConfig::default().partition_assignment_strategy,
                },
                enable_auto_commit: false,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    async fn run(mut self) {
        let mut incarnation = 0u64;
        while !self.stop.load(Ordering::Relaxed) {
            let name = format!(
                "{}-m{}.{incarnation}",
                if self.group.protocol == Protocol::Classic {
                    "classic"
                } else {
                    "consumer"
                },
                self.slot
            );
            incarnation += 1;
            let Some(inc) = self.join(name).await else {
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            };
            self.group.members.fetch_add(1, Ordering::Relaxed);
            let lifetime = self.rng.millis(8_000, 25_000);
            let born = Instant::now();
            self.live(inc, born, lifetime).await;
        }
    }

    async fn join(&self, name: String) -> Option<Incarnation> {
        let pending = Arc::new(Mutex::new(Vec::new()));
        let made = async {
            let client = Client::connect(client_config(&self.bootstrap, &name)).await?;
            let mut consumer = Consumer::new(client, self.config());
            let recorder = Recorder {
                member: name.clone(),
                t0: self.t0,
                pending: pending.clone(),
            };
            consumer.subscribe(&[TOPIC], Some(Box::new(recorder)))?;
            anyhow::Ok(consumer)
        };
        match tokio::time::timeout(Duration::from_secs(6), made).await {
            Ok(Ok(consumer)) => Some(Incarnation {
                name,
                consumer,
                pending,
                holding: None,
            }),
            Ok(Err(e)) => {
                self.group.note(format!("{name} connect: {e:#}"));
                None
            }
            Err(_) => None,
        }
    }

    /// Polls and commits until the run stops (close) or the lifetime is over (close, a new
    /// incarnation follows); a poll that hangs drops the member unannounced.
    async fn live(&self, mut inc: Incarnation, born: Instant, lifetime: Duration) {
        let mut errors = 0;
        loop {
            if self.stop.load(Ordering::Relaxed) || born.elapsed() >= lifetime {
                self.close(inc).await;
                return;
            }
            let polled =
                tokio::time::timeout(POLL_BOUND, inc.consumer.poll(Duration::from_millis(500)))
                    .await;
            let generation = self.observe(&mut inc);
            let records = match polled {
                Ok(Ok(r)) => {
                    errors = 0;
                    r
                }
                Ok(Err(e)) => {
                    errors += 1;
                    let fatal = matches!(e, ClientError::Group(GroupError::Fatal { .. }));
                    self.group.note(format!("{} poll: {e}", inc.name));
                    if fatal || errors >= MAX_POLL_ERRORS {
                        self.gone(&inc.name);
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
                Err(_) => {
                    self.group.note(format!(
                        "{} poll: no answer in {} s; dropping the member",
                        inc.name,
                        POLL_BOUND.as_secs()
                    ));
                    self.gone(&inc.name);
                    return;
                }
            };
            if records.is_empty() {
                continue;
            }
            let at = micros(self.t0);
            let mut next: BTreeMap<i32, i64> = BTreeMap::new();
            {
                let mut h = self.group.history.lock().unwrap();
                for r in records {
                    let e = next.entry(r.partition).or_insert(r.offset + 1);
                    *e = (*e).max(r.offset + 1);
                    h.consumed.push(Consumed {
                        member: inc.name.clone(),
                        partition: r.partition,
                        offset: r.offset,
                        value: String::from_utf8_lossy(r.value.as_deref().unwrap_or(&[]))
                            .into_owned(),
                        generation,
                        at,
                    });
                }
            }
            self.commit(&mut inc, generation, next).await;
        }
    }

    /// After a poll: stamps the callbacks it ran with the generation now reported, and records
    /// what the member holds when that changed. Returns the generation.
    fn observe(&self, inc: &mut Incarnation) -> i32 {
        let generation = inc
            .consumer
            .group_metadata()
            .map(|m| m.generation_id)
            .unwrap_or(-1);
        let events: Vec<Event> = std::mem::take(&mut *inc.pending.lock().unwrap());
        let mut parts: Vec<i32> = inc
            .consumer
            .assignment()
            .into_iter()
            .filter(|(t, _)| t == TOPIC)
            .map(|(_, p)| p)
            .collect();
        parts.sort_unstable();
        let now = (generation, parts);
        let changed = inc.holding.as_ref() != Some(&now);
        let mut h = self.group.history.lock().unwrap();
        for mut e in events {
            e.generation = generation;
            h.events.push(e);
        }
        if changed {
            h.holdings.push(Holding {
                member: inc.name.clone(),
                at: micros(self.t0),
                generation: now.0,
                partitions: now.1.clone(),
            });
            inc.holding = Some(now);
        }
        generation
    }

    async fn commit(&self, inc: &mut Incarnation, generation: i32, next: BTreeMap<i32, i64>) {
        let offsets: BTreeMap<TopicPartition, i64> = next
            .iter()
            .map(|(&p, &o)| (TopicPartition::new(TOPIC.to_string(), p), o))
            .collect();
        let sent = micros(self.t0);
        let r = tokio::time::timeout(COMMIT_BOUND, inc.consumer.commit_sync(Some(offsets))).await;
        let done = micros(self.t0);
        let outcome = match &r {
            Ok(Ok(())) => Outcome::Acked,
            Ok(Err(e)) if refused(e) => Outcome::Failed,
            _ => Outcome::Unknown,
        };
        match r {
            Ok(Err(e)) => self.group.note(format!("{} commit: {e}", inc.name)),
            Err(_) => self.group.note(format!(
                "{} commit: no answer in {} s",
                inc.name,
                COMMIT_BOUND.as_secs()
            )),
            Ok(Ok(())) => {}
        }
        let mut h = self.group.history.lock().unwrap();
        for (partition, offset) in next {
            h.commits.push(Commit {
                member: inc.name.clone(),
                generation,
                partition,
                offset,
                sent,
                done,
                outcome,
            });
        }
    }

    async fn close(&self, inc: Incarnation) {
        let Incarnation {
            name,
            consumer,
            pending,
            holding,
        } = inc;
        let closed = tokio::time::timeout(CLOSE_BOUND, consumer.close()).await;
        let mut h = self.group.history.lock().unwrap();
        let generation = holding.as_ref().map_or(-1, |(g, _)| *g);
        for mut e in std::mem::take(&mut *pending.lock().unwrap()) {
            e.generation = generation;
            h.events.push(e);
        }
        drop(h);
        match closed {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                self.group.note(format!("{name} close: {e}"));
                self.gone(&name);
            }
            Err(_) => self.gone(&name),
        }
    }

    /// The member is dropped without (further) callbacks: whatever it still held ends here.
    fn gone(&self, name: &str) {
        self.group.history.lock().unwrap().events.push(Event {
            member: name.to_string(),
            at: micros(self.t0),
            kind: EventKind::Gone,
            partitions: Vec::new(),
            generation: -1,
        });
    }
}

/// A commit the coordinator refused after validating it (nothing written), or one the client
/// never sent; anything else (timeouts, broken connections, write errors) may still be applied.
fn refused(e: &ClientError) -> bool {
    match e {
        ClientError::Group(GroupError::CommitFailed(_) | GroupError::RebalanceInProgress(_)) => {
            true
        }
        _ => matches!(
            e.code(),
            Some(
                ErrorCode::IllegalGeneration
                    | ErrorCode::UnknownMemberId
                    | ErrorCode::FencedMemberEpoch
                    | ErrorCode::StaleMemberEpoch
                    | ErrorCode::RebalanceInProgress
            )
        ),
    }
}

/// Reads a group's committed offsets: a consumer with the group's id that never joins it,
/// asking OffsetFetch with `require_stable` as a consumer resuming its partitions does (Kafka
/// answers that from the coordinator's latest state once it is committed; without it the
/// answer is the state as of the partition's high watermark, which a new or restarted leader
/// may still have behind what was already acknowledged).
struct Reader {
    bootstrap: String,
    partitions: i32,
    t0: Instant,
    consumers: BTreeMap<String, Consumer>,
}

impl Reader {
    fn new(bootstrap: &str, partitions: i32, t0: Instant) -> Reader {
        Reader {
            bootstrap: bootstrap.to_string(),
            partitions,
            t0,
            consumers: BTreeMap::new(),
        }
    }

    /// One OffsetFetch of `group` (bounded; the consumer is made again after a failure).
    async fn fetch(&mut self, group: &str) -> anyhow::Result<Sample> {
        let start = micros(self.t0);
        let tps: Vec<TopicPartition> = (0..self.partitions)
            .map(|p| TopicPartition::new(TOPIC.to_string(), p))
            .collect();
        let mut consumer = match self.consumers.remove(group) {
            Some(c) => c,
            None => {
                let made = async {
                    let c = Client::connect(client_config(
                        &self.bootstrap,
                        &format!("nemesis-offsets-{group}"),
                    ))
                    .await?;
                    let config = ConsumerConfig {
                        group: GroupConfig {
                            group_id: Some(group.to_string()),
                            enable_auto_commit: false,
                            ..Default::default()
                        },
                        ..Default::default()
                    };
                    anyhow::Ok(Consumer::new(c, config))
                };
                tokio::time::timeout(FETCH_BOUND, made)
                    .await
                    .map_err(|_| {
                        anyhow::anyhow!("connect: no answer in {} s", FETCH_BOUND.as_secs())
                    })??
            }
        };
        let r = tokio::time::timeout(FETCH_BOUND, consumer.committed(&tps)).await;
        let end = micros(self.t0);
        let committed = match r {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => anyhow::bail!("OffsetFetch: {e}"),
            Err(_) => anyhow::bail!("OffsetFetch: no answer in {} s", FETCH_BOUND.as_secs()),
        };
        self.consumers.insert(group.to_string(), consumer);
        let offsets = committed
            .into_iter()
            .filter_map(|(tp, o)| Some((tp.partition, o?)))
            .collect();
        Ok(Sample {
            start,
            end,
            offsets,
        })
    }
}

/// The sampler: OffsetFetch of every group every half second until the run stops.
async fn sample(reader: Reader, groups: Vec<Arc<GroupRun>>, stop: Arc<AtomicBool>) {
    let mut reader = reader;
    while !stop.load(Ordering::Relaxed) {
        for g in &groups {
            if let Ok(s) = reader.fetch(&g.name).await {
                g.history.lock().unwrap().samples.push(s);
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The summary lines of one group.
pub fn print_summary(h: &GroupHistory, r: &GroupReport) {
    let callbacks: Vec<String> = r
        .callbacks
        .iter()
        .map(|(k, n)| format!("{k}={n}"))
        .collect();
    println!(
        "  group {} ({}): {} members over the run, {} records received ({} distinct offsets), \
         commits acked {} / refused {} / unknown {}, callbacks {}, {} {}, {} OffsetFetch samples",
        h.group,
        match h.protocol {
            Some(Protocol::Classic) => "classic",
            _ => "consumer protocol",
        },
        h.members,
        h.consumed.len(),
        r.distinct_consumed,
        r.acked_commits,
        r.failed_commits,
        r.unknown_commits,
        if callbacks.is_empty() {
            "none".to_string()
        } else {
            callbacks.join(" ")
        },
        r.generations,
        if h.protocol == Some(Protocol::Classic) {
            "generations"
        } else {
            "member epochs"
        },
        h.samples.len()
    );
    println!(
        "    final committed offsets {}{}",
        if h.last.is_some() {
            format!("{:?}", r.final_offsets)
        } else {
            "NOT fetched".to_string()
        },
        if r.excused > 0 {
            format!(
                "; {} offset regressions explained by late commits of unknown outcome",
                r.excused
            )
        } else {
            String::new()
        }
    );
    if h.protocol == Some(Protocol::Consumer) {
        println!(
            "    coordinator: {} member assignment records replayed{}; clients' view: {} \
             overlaps (a member assigned a partition before the previous owner revoked it; \
             counted, not a violation)",
            r.coordinator_records,
            if h.coordinator.is_none() {
                " (NOT read)"
            } else {
                ""
            },
            r.client_overlaps.len()
        );
        for o in r.client_overlaps.iter().take(3) {
            println!("      {o}");
        }
    }
    if let Some(e) = &h.first_error {
        println!("    first group client error: {e}");
    }
}

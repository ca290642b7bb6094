//! The three-node workload: a committer commits increasing offsets for every partition of a
//! group with no members (a "simple" group: generation -1, empty member id, as Kafka's admin
//! client commits), and a reader sends OffsetFetch in a loop. Both go through
//! `strom_client`'s group coordinator handle, which looks the coordinator up again after
//! NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE or a broken connection, so they carry on
//! against the new coordinator when the old one is killed. Every acknowledged commit and every
//! fetch answer (errors too) is recorded with its times for the checker.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use strom_client::group::commit::commit;
use strom_client::group::coordinator::{is_coordinator_moved, Coordinator};
use strom_client::group::GroupMetadata;
use strom_client::kafka::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopics,
};
use strom_client::kafka::messages::{
    ApiKey, GroupId, OffsetFetchRequest, OffsetFetchResponse, TopicName,
};
use strom_client::kafka::protocol::StrBytes;
use strom_client::{
    Client, ClientConfig, Connection, ConnectionConfig, Error, ErrorCode, TopicPartition,
};

use super::checker::Event;

/// The history both tasks append to.
pub type History = Arc<Mutex<Vec<Event>>>;

/// What the controlling test watches while the workload runs.
#[derive(Default)]
pub struct Progress {
    pub stop: AtomicBool,
    pub acked_commits: AtomicUsize,
    pub failed_commits: AtomicUsize,
    pub fetches_ok: AtomicUsize,
    pub fetches_failed: AtomicUsize,
}

/// A short request timeout, so that a request stuck on a dying coordinator gives way to a
/// new lookup quickly (a SIGKILL usually resets the connection at once anyway).
pub fn client_config(bootstrap: &str) -> ClientConfig {
    let mut cfg = ClientConfig::new(bootstrap);
    cfg.client_id = "groups-failover".into();
    cfg.request_timeout = Duration::from_secs(5);
    cfg.connect_timeout = Duration::from_secs(2);
    cfg
}

/// How the committer ended.
#[derive(Debug)]
pub struct CommitterEnd {
    /// The offset of the last commit, which was acknowledged (the committer ends only on an
    /// acknowledged commit once stopped).
    pub last_acked: i64,
    pub first_errors: Vec<String>,
}

/// Commits offset 1, 2, 3, ... for partitions `0..partitions` of `topic`, one OffsetCommit
/// each, until stopped; then keeps going until one commit is acknowledged (bounded), so that
/// the final committed offset is known. A failed commit is not recorded.
pub async fn committer(
    bootstrap: String,
    group: String,
    topic: String,
    partitions: i32,
    progress: Arc<Progress>,
    history: History,
) -> Result<CommitterEnd, String> {
    let client = Client::connect(client_config(&bootstrap))
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let coord = Coordinator::new(client, group.clone(), Duration::ZERO);
    let meta = GroupMetadata {
        group_id: group.clone(),
        generation_id: -1,
        member_id: String::new(),
        group_instance_id: None,
    };
    let mut first_errors = Vec::new();
    let mut stopped_at: Option<Instant> = None;
    let mut next = 1i64;
    loop {
        let stopping = progress.stop.load(Ordering::SeqCst);
        if stopping && stopped_at.is_none() {
            stopped_at = Some(Instant::now());
        }
        let offsets: BTreeMap<TopicPartition, i64> = (0..partitions)
            .map(|p| (TopicPartition::new(topic.clone(), p), next))
            .collect();
        let r = commit(
            &coord,
            &meta,
            &offsets,
            Instant::now() + Duration::from_secs(10),
        )
        .await;
        let at = Instant::now();
        match r {
            Ok(()) => {
                {
                    let mut h = history.lock().unwrap();
                    for p in 0..partitions {
                        h.push(Event::CommitAcked {
                            group: group.clone(),
                            partition: p,
                            offset: next,
                            at,
                        });
                    }
                }
                progress.acked_commits.fetch_add(1, Ordering::SeqCst);
                if stopping {
                    return Ok(CommitterEnd {
                        last_acked: next,
                        first_errors,
                    });
                }
            }
            Err(e) => {
                progress.failed_commits.fetch_add(1, Ordering::SeqCst);
                if first_errors.len() < 20 {
                    first_errors.push(format!("commit of {next}: {e}"));
                }
                if stopped_at.is_some_and(|s| s.elapsed() > Duration::from_secs(30)) {
                    return Err(format!(
                        "no commit acknowledged within 30 s of the stop; errors: {first_errors:?}"
                    ));
                }
            }
        }
        next += 1;
        // Paced so that the two shared cores also serve the brokers' replication.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// An OffsetFetch (v8+ group format) of partitions `0..partitions` of `topic` for `group`.
/// Java's consumer sets `require_stable` (the coordinator then answers once everything before
/// the request is committed); Java's admin client does not (the coordinator reads its state at
/// the high watermark).
fn offset_fetch_request(
    group: &str,
    topic: &str,
    partitions: i32,
    require_stable: bool,
) -> OffsetFetchRequest {
    let mut t = OffsetFetchRequestTopics::default();
    t.name = TopicName(StrBytes::from_string(topic.to_string()));
    t.partition_indexes = (0..partitions).collect();
    let mut g = OffsetFetchRequestGroup::default();
    g.group_id = GroupId(StrBytes::from_string(group.to_string()));
    g.member_epoch = -1;
    g.topics = Some(vec![t]);
    let mut req = OffsetFetchRequest::default();
    req.require_stable = require_stable;
    req.groups = vec![g];
    req
}

/// partition -> committed offset, or the first error in the answer.
fn offset_fetch_answer(resp: &OffsetFetchResponse) -> Result<BTreeMap<i32, Option<i64>>, Error> {
    let g = resp
        .groups
        .first()
        .ok_or_else(|| Error::Protocol("OffsetFetch answer without the group".into()))?;
    if let Some(e) = Error::kafka(g.error_code, None) {
        return Err(e);
    }
    let mut out = BTreeMap::new();
    for t in &g.topics {
        for p in &t.partitions {
            if let Some(e) = Error::kafka(p.error_code, None) {
                return Err(e);
            }
            out.insert(
                p.partition_index,
                (p.committed_offset >= 0).then_some(p.committed_offset),
            );
        }
    }
    Ok(out)
}

/// One OffsetFetch to the coordinator.
async fn fetch_once(
    coord: &Coordinator,
    topic: &str,
    partitions: i32,
) -> Result<BTreeMap<i32, Option<i64>>, Error> {
    let resp = coord
        .send(ApiKey::OffsetFetch, |v| {
            if v < 8 {
                return Err(Error::Protocol(format!("OffsetFetch v{v} is below 8")));
            }
            Ok(offset_fetch_request(
                coord.group_id(),
                topic,
                partitions,
                true,
            ))
        })
        .await?;
    offset_fetch_answer(&resp)
}

fn record_fetch(
    history: &History,
    group: &str,
    partitions: i32,
    answer: &Result<BTreeMap<i32, Option<i64>>, Error>,
    started: Instant,
    ended: Instant,
) {
    let mut h = history.lock().unwrap();
    match answer {
        Ok(m) => {
            for p in 0..partitions {
                h.push(Event::Fetched {
                    group: group.to_string(),
                    partition: p,
                    offset: m.get(&p).copied().flatten(),
                    started,
                    ended,
                });
            }
        }
        Err(e) => h.push(Event::FetchFailed {
            group: group.to_string(),
            started,
            ended,
            error: e.to_string(),
        }),
    }
}

/// What a probe of a restarted broker saw.
#[derive(Debug, Default)]
pub struct Probe {
    pub answers: usize,
    /// Error answers by name, and connection failures.
    pub errors: BTreeMap<String, usize>,
}

/// Sends OffsetFetch straight to the broker at `addr` (no coordinator lookup), back to back
/// for `window`, alternately with and without `require_stable`, recording every answer. Run
/// right after a killed broker restarts: until it has caught up with the quorum's metadata,
/// the image replayed from its own log still names it leader of the partitions it led when it
/// died, and it must not answer from that stale state as if it were the coordinator (it holds
/// none of the commits made since).
pub async fn probe(
    addr: String,
    group: String,
    topic: String,
    partitions: i32,
    window: Duration,
    history: History,
) -> Probe {
    let mut out = Probe::default();
    let mut conn: Option<Connection> = None;
    let until = Instant::now() + window;
    let mut require_stable = false;
    while Instant::now() < until {
        require_stable = !require_stable;
        if conn.as_ref().is_none_or(|c| c.is_closed()) {
            let cfg = ConnectionConfig {
                client_id: "groups-failover-probe".into(),
                request_timeout: Duration::from_secs(5),
                connect_timeout: Duration::from_secs(2),
                ..Default::default()
            };
            conn = match Connection::connect(&addr, cfg).await {
                Ok(c) => Some(c),
                Err(e) => {
                    *out.errors.entry(format!("connect: {e}")).or_default() += 1;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            };
        }
        let c = conn.as_ref().unwrap();
        let started = Instant::now();
        let r = match c
            .send(
                &offset_fetch_request(&group, &topic, partitions, require_stable),
                8,
            )
            .await
        {
            Ok(resp) => offset_fetch_answer(&resp),
            Err(e) => Err(e),
        };
        let ended = Instant::now();
        record_fetch(&history, &group, partitions, &r, started, ended);
        match &r {
            Ok(_) => out.answers += 1,
            Err(e) => {
                let name = e.code().map_or_else(|| e.to_string(), |c| format!("{c:?}"));
                *out.errors.entry(name).or_default() += 1;
            }
        }
    }
    out
}

/// Fetches the group's offsets in a loop until stopped, recording every answer: each attempt
/// is its own entry (no retries hidden inside one), so its start time is exact.
pub async fn reader(
    bootstrap: String,
    group: String,
    topic: String,
    partitions: i32,
    progress: Arc<Progress>,
    history: History,
) -> Result<(), String> {
    let client = Client::connect(client_config(&bootstrap))
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let coord = Coordinator::new(client, group.clone(), Duration::ZERO);
    let mut attempt = 0;
    while !progress.stop.load(Ordering::SeqCst) {
        let started = Instant::now();
        let r = fetch_once(&coord, &topic, partitions).await;
        let ended = Instant::now();
        record_fetch(&history, &group, partitions, &r, started, ended);
        match r {
            Ok(_) => {
                attempt = 0;
                progress.fetches_ok.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Err(e) => {
                if e.code().is_some_and(is_coordinator_moved) {
                    coord.mark_unknown(&e.to_string());
                }
                progress.fetches_failed.fetch_add(1, Ordering::SeqCst);
                let retriable = e.is_retriable()
                    || e.code().is_some_and(|c| {
                        is_coordinator_moved(c) || c == ErrorCode::CoordinatorLoadInProgress
                    });
                if !retriable {
                    return Err(format!("OffsetFetch failed for good: {e}"));
                }
                tokio::time::sleep(Duration::from_millis(50 * (1 << attempt.min(4)))).await;
                attempt += 1;
            }
        }
    }
    Ok(())
}

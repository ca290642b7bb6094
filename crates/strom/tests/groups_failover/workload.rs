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
use strom_client::kafka::messages::{ApiKey, GroupId, OffsetFetchRequest, TopicName};
use strom_client::kafka::protocol::StrBytes;
use strom_client::{Client, ClientConfig, Error, ErrorCode, TopicPartition};

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

/// One OffsetFetch (v8+ group format, `require_stable` as Java's consumer asks) of `partitions`
/// to the coordinator: partition -> committed offset, or the first error in the answer.
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
            let mut t = OffsetFetchRequestTopics::default();
            t.name = TopicName(StrBytes::from_string(topic.to_string()));
            t.partition_indexes = (0..partitions).collect();
            let mut g = OffsetFetchRequestGroup::default();
            g.group_id = GroupId(StrBytes::from_string(coord.group_id().to_string()));
            g.member_epoch = -1;
            g.topics = Some(vec![t]);
            let mut req = OffsetFetchRequest::default();
            req.require_stable = true;
            req.groups = vec![g];
            Ok(req)
        })
        .await?;
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
        match r {
            Ok(m) => {
                attempt = 0;
                {
                    let mut h = history.lock().unwrap();
                    for p in 0..partitions {
                        h.push(Event::Fetched {
                            group: group.clone(),
                            partition: p,
                            offset: m.get(&p).copied().flatten(),
                            started,
                            ended,
                        });
                    }
                }
                progress.fetches_ok.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Err(e) => {
                if e.code().is_some_and(is_coordinator_moved) {
                    coord.mark_unknown(&e.to_string());
                }
                history.lock().unwrap().push(Event::FetchFailed {
                    group: group.clone(),
                    started,
                    ended,
                    error: e.to_string(),
                });
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

//! Three voters on 127.0.0.1 over real TCP, each with its own directory.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use strom_raft::{HandlerError, MetadataQuorum, QuorumConfig, QuorumError, StateMachineHandler};
use tempfile::TempDir;

const WAIT: Duration = Duration::from_secs(20);

/// The application state: every applied entry, in order. A snapshot is the whole list.
#[derive(Default)]
struct Recorder {
    applied: Mutex<Vec<(u64, u64, Vec<u8>)>>,
    restores: AtomicUsize,
}

impl Recorder {
    fn payloads(&self) -> Vec<Vec<u8>> {
        self.applied
            .lock()
            .iter()
            .map(|(_, _, p)| p.clone())
            .collect()
    }
    fn entries(&self) -> Vec<(u64, u64, Vec<u8>)> {
        self.applied.lock().clone()
    }
}

impl StateMachineHandler for Recorder {
    fn apply(&self, index: u64, term: u64, payload: &[u8]) {
        self.applied.lock().push((index, term, payload.to_vec()));
    }
    fn snapshot(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for (i, t, p) in self.applied.lock().iter() {
            out.extend_from_slice(&i.to_le_bytes());
            out.extend_from_slice(&t.to_le_bytes());
            out.extend_from_slice(&(p.len() as u32).to_le_bytes());
            out.extend_from_slice(p);
        }
        out
    }
    fn restore(&self, snapshot: Vec<u8>) -> Result<(), HandlerError> {
        let mut v = Vec::new();
        let mut s = &snapshot[..];
        while !s.is_empty() {
            if s.len() < 20 {
                return Err("truncated snapshot".into());
            }
            let i = u64::from_le_bytes(s[..8].try_into()?);
            let t = u64::from_le_bytes(s[8..16].try_into()?);
            let n = u32::from_le_bytes(s[16..20].try_into()?) as usize;
            v.push((i, t, s[20..20 + n].to_vec()));
            s = &s[20 + n..];
        }
        *self.applied.lock() = v;
        self.restores.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// Listener ports below Linux's ephemeral range (32768 and up), so that no outgoing connection
/// takes the port of a stopped voter before it restarts; distinct per test in this process.
fn free_addrs(n: usize) -> Vec<SocketAddr> {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let base = 20_000 + (std::process::id() as usize % 400) * 25;
    let mut out = Vec::new();
    while out.len() < n {
        let port = base + NEXT.fetch_add(1, Ordering::Relaxed) % 2_000;
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        if std::net::TcpListener::bind(addr).is_ok() {
            out.push(addr);
        }
    }
    out
}

struct Node {
    quorum: Option<MetadataQuorum>,
    sm: Arc<Recorder>,
}

struct Cluster {
    _root: TempDir,
    configs: BTreeMap<u64, QuorumConfig>,
    nodes: BTreeMap<u64, Node>,
}

fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

impl Cluster {
    fn new(n: u64, tweak: impl Fn(&mut QuorumConfig)) -> Self {
        init_tracing();
        let root = tempfile::tempdir().unwrap();
        let addrs = free_addrs(n as usize);
        let voters: BTreeMap<u64, SocketAddr> = (1..=n).zip(addrs).collect();
        let configs = voters
            .iter()
            .map(|(&id, &addr)| {
                let mut c = QuorumConfig::new(
                    id,
                    voters.clone(),
                    addr,
                    root.path().join(format!("node-{id}")),
                );
                c.election_timeout_ms = 400;
                c.heartbeat_ms = 80;
                c.snapshot_every = 0;
                tweak(&mut c);
                (id, c)
            })
            .collect();
        Self {
            _root: root,
            configs,
            nodes: BTreeMap::new(),
        }
    }

    /// Starts every voter at once.
    async fn start_all(n: u64, tweak: impl Fn(&mut QuorumConfig)) -> Self {
        let mut c = Self::new(n, tweak);
        let ids: Vec<u64> = c.configs.keys().copied().collect();
        let starts = ids.iter().map(|&id| {
            let cfg = c.configs[&id].clone();
            async move {
                let sm = Arc::new(Recorder::default());
                let q = MetadataQuorum::start(cfg, sm.clone()).await.unwrap();
                (
                    id,
                    Node {
                        quorum: Some(q),
                        sm,
                    },
                )
            }
        });
        let mut set = tokio::task::JoinSet::new();
        for s in starts {
            set.spawn(s);
        }
        while let Some(r) = set.join_next().await {
            let (id, node) = r.unwrap();
            c.nodes.insert(id, node);
        }
        c
    }

    /// Starts (or restarts, as a new process would: with an empty state machine) one voter.
    async fn start(&mut self, id: u64) {
        let sm = Arc::new(Recorder::default());
        let q = MetadataQuorum::start(self.configs[&id].clone(), sm.clone())
            .await
            .unwrap();
        self.nodes.insert(
            id,
            Node {
                quorum: Some(q),
                sm,
            },
        );
    }

    async fn stop(&mut self, id: u64) {
        let q = self.nodes.get_mut(&id).unwrap().quorum.take().unwrap();
        q.shutdown().await.unwrap();
    }

    fn q(&self, id: u64) -> &MetadataQuorum {
        self.nodes[&id].quorum.as_ref().expect("running")
    }

    fn sm(&self, id: u64) -> &Recorder {
        &self.nodes[&id].sm
    }

    fn running(&self) -> Vec<u64> {
        self.nodes
            .iter()
            .filter(|(_, n)| n.quorum.is_some())
            .map(|(&id, _)| id)
            .collect()
    }

    /// Waits until every running voter names the same running leader, and that leader says it
    /// is the leader.
    async fn leader(&self) -> u64 {
        let deadline = Instant::now() + WAIT;
        loop {
            let running = self.running();
            let leaders: Vec<Option<u64>> = running.iter().map(|&id| self.q(id).leader()).collect();
            if let Some(Some(l)) = leaders.first() {
                if leaders.iter().all(|x| *x == Some(*l))
                    && running.contains(l)
                    && self.q(*l).is_leader()
                {
                    return *l;
                }
            }
            assert!(Instant::now() < deadline, "no agreed leader: {leaders:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Proposes on the leader (retrying while leadership moves) and returns the log index.
    async fn propose(&self, payload: &[u8]) -> u64 {
        let deadline = Instant::now() + WAIT;
        loop {
            let leader = self.leader().await;
            match self.q(leader).propose(payload.to_vec()).await {
                Ok(i) => return i,
                Err(QuorumError::NotLeader { .. }) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => panic!("propose on {leader}: {e}"),
            }
        }
    }

    async fn wait_applied(&self, ids: &[u64], index: u64) {
        for &id in ids {
            self.q(id)
                .wait_for_applied(index, WAIT)
                .await
                .unwrap_or_else(|e| {
                    panic!(
                        "node {id} did not apply {index}: {e} ({:?})",
                        self.q(id).status()
                    )
                });
        }
    }

    /// Every running voter holds the same entries, in strictly increasing index order, and
    /// their payloads are `want`.
    fn assert_same(&self, want: &[Vec<u8>]) {
        let running = self.running();
        let first = self.sm(running[0]).entries();
        for &id in &running {
            let e = self.sm(id).entries();
            assert!(
                e.windows(2).all(|w| w[0].0 < w[1].0),
                "node {id}: indexes not increasing"
            );
            assert_eq!(e, first, "node {id} differs from node {}", running[0]);
            assert_eq!(self.sm(id).payloads(), want, "node {id}");
        }
    }

    async fn shutdown(mut self) {
        for id in self.running() {
            self.stop(id).await;
        }
    }
}

fn payloads(range: std::ops::Range<u32>) -> Vec<Vec<u8>> {
    range.map(|i| format!("record-{i}").into_bytes()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_voters_elect_replicate_in_order_and_reject_followers() {
    let c = Cluster::start_all(3, |_| {}).await;
    let leader = c.leader().await;
    assert!(c.q(leader).term() >= 1);
    for id in c.running() {
        assert_eq!(c.q(id).wait_for_leader(WAIT).await.unwrap(), leader);
        assert_eq!(c.q(id).term(), c.q(leader).term());
    }

    let want = payloads(0..30);
    let mut last = 0;
    for p in &want {
        let i = c.propose(p).await;
        assert!(i > last, "indexes increase");
        last = i;
        // Applied locally on the leader when propose returns.
        assert_eq!(c.sm(leader).payloads().last(), Some(p));
    }
    c.wait_applied(&[1, 2, 3], last).await;
    c.assert_same(&want);
    let term = c.q(leader).term();
    assert!(c.sm(leader).entries().iter().all(|(_, t, _)| *t == term));

    let follower = *c.running().iter().find(|&&id| id != leader).unwrap();
    match c.q(follower).propose(b"nope".to_vec()).await {
        Err(QuorumError::NotLeader { leader: Some(l) }) => assert_eq!(l, leader),
        other => panic!("propose on a follower: {other:?}"),
    }
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_failover_and_old_leader_rejoins() {
    let mut c = Cluster::start_all(3, |_| {}).await;
    let mut want = payloads(0..10);
    for p in &want {
        c.propose(p).await;
    }
    let old = c.leader().await;
    let old_term = c.q(old).term();
    c.stop(old).await;

    let new = c.leader().await;
    assert_ne!(new, old);
    assert!(c.q(new).term() > old_term);
    let more = payloads(10..20);
    let mut last = 0;
    for p in &more {
        last = c.propose(p).await;
    }
    want.extend(more);
    // Entries of the new term carry the new term (the controller epoch).
    let new_term = c.q(new).term();
    assert_eq!(c.sm(new).entries().last().unwrap().1, new_term);

    c.start(old).await;
    c.wait_applied(&[1, 2, 3], last).await;
    c.assert_same(&want);
    assert_eq!(
        c.leader().await,
        new,
        "a rejoining voter does not disturb the leader"
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_voter_catches_up_from_its_log() {
    let mut c = Cluster::start_all(3, |_| {}).await;
    let mut want = payloads(0..10);
    for p in &want {
        c.propose(p).await;
    }
    let leader = c.leader().await;
    let f = *c.running().iter().find(|&&id| id != leader).unwrap();
    c.stop(f).await;
    let more = payloads(10..25);
    let mut last = 0;
    for p in &more {
        last = c.propose(p).await;
    }
    want.extend(more);
    c.start(f).await;
    c.wait_applied(&[1, 2, 3], last).await;
    c.assert_same(&want);
    assert_eq!(
        c.sm(f).restores.load(Ordering::Relaxed),
        0,
        "no snapshot involved"
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn voter_behind_the_purged_log_catches_up_with_a_snapshot() {
    let mut c = Cluster::start_all(3, |cfg| {
        cfg.keep_after_snapshot = 0;
        cfg.segment_bytes = 512;
    })
    .await;
    let mut want = payloads(0..5);
    for p in &want {
        c.propose(p).await;
    }
    let leader = c.leader().await;
    let f = *c.running().iter().find(|&&id| id != leader).unwrap();
    c.stop(f).await;
    let more = payloads(5..40);
    let mut last = 0;
    for p in &more {
        last = c.propose(p).await;
    }
    want.extend(more);
    for id in c.running() {
        c.wait_applied(&[id], last).await;
        let snap = c.q(id).snapshot(WAIT).await.unwrap();
        assert!(snap >= last);
    }
    // The log behind the snapshot is purged on the leader.
    c.q(leader)
        .wait_until(WAIT, |s| s.purged.filter(|&p| p >= last))
        .await
        .unwrap_or_else(|e| panic!("leader did not purge: {e} {:?}", c.q(leader).status()));

    c.start(f).await;
    c.wait_applied(&[f], last).await;
    assert_eq!(
        c.sm(f).restores.load(Ordering::Relaxed),
        1,
        "installed a snapshot"
    );
    assert!(c.q(f).status().snapshot >= Some(last));
    let tail = payloads(40..45);
    for p in &tail {
        last = c.propose(p).await;
    }
    want.extend(tail);
    c.wait_applied(&[1, 2, 3], last).await;
    c.assert_same(&want);

    // Restarted again, it restores from its own snapshot and replays only the log after it.
    c.stop(f).await;
    c.start(f).await;
    c.wait_applied(&[f], last).await;
    assert_eq!(c.sm(f).restores.load(Ordering::Relaxed), 1);
    c.assert_same(&want);
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fresh_directory_for_an_existing_voter_catches_up() {
    let mut c = Cluster::start_all(3, |_| {}).await;
    let mut want = payloads(0..10);
    for p in &want {
        c.propose(p).await;
    }
    // Node 1 is the bootstrapping voter: with a wiped directory it must not bootstrap again.
    for id in [1u64, 3] {
        c.stop(id).await;
        std::fs::remove_dir_all(&c.configs[&id].dir).unwrap();
        let more = payloads(want.len() as u32..want.len() as u32 + 5);
        let mut last = 0;
        for p in &more {
            last = c.propose(p).await;
        }
        want.extend(more);
        c.start(id).await;
        c.wait_applied(&[1, 2, 3], last).await;
        c.assert_same(&want);
    }
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_cluster_restart_keeps_every_committed_entry() {
    let mut c = Cluster::start_all(3, |cfg| cfg.keep_after_snapshot = 2).await;
    let mut want = payloads(0..10);
    let mut last = 0;
    for p in &want {
        last = c.propose(p).await;
    }
    c.wait_applied(&[1, 2, 3], last).await;
    // Node 2 snapshots midway: after the restart it restores from it and replays the rest.
    c.q(2).snapshot(WAIT).await.unwrap();
    let more = payloads(10..20);
    for p in &more {
        last = c.propose(p).await;
    }
    want.extend(more);
    c.wait_applied(&[1, 2, 3], last).await;
    let term_before = c.q(c.leader().await).term();

    for id in [1, 2, 3] {
        c.stop(id).await;
    }
    let ids = [1u64, 2, 3];
    let mut set = tokio::task::JoinSet::new();
    for id in ids {
        let cfg = c.configs[&id].clone();
        set.spawn(async move {
            let sm = Arc::new(Recorder::default());
            let q = MetadataQuorum::start(cfg, sm.clone()).await.unwrap();
            (
                id,
                Node {
                    quorum: Some(q),
                    sm,
                },
            )
        });
    }
    while let Some(r) = set.join_next().await {
        let (id, node) = r.unwrap();
        c.nodes.insert(id, node);
    }
    let leader = c.leader().await;
    // A leader whose committed vote survived the restart may resume its term (openraft restores
    // it); otherwise a new election raises the term. It never goes back.
    assert!(c.q(leader).term() >= term_before);
    c.wait_applied(&[1, 2, 3], last).await;
    c.assert_same(&want);
    assert_eq!(c.sm(2).restores.load(Ordering::Relaxed), 1);

    let tail = payloads(20..25);
    for p in &tail {
        last = c.propose(p).await;
    }
    want.extend(tail);
    c.wait_applied(&[1, 2, 3], last).await;
    c.assert_same(&want);
    c.shutdown().await;
}

/// A voter restarted with a vote for itself (it led when it stopped) may call itself leader
/// until it hears of the newer term, but no quorum acknowledges it: `leader_acknowledged`
/// tells the two apart (a broker must not take that voter's replay for the quorum's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_old_leader_is_never_an_acknowledged_leader() {
    let mut c = Cluster::start_all(3, |_| {}).await;
    c.propose(b"before").await;
    let old = c.leader().await;
    let deadline = Instant::now() + WAIT;
    while !c.q(old).status().leader_acknowledged {
        assert!(Instant::now() < deadline, "{:?}", c.q(old).status());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    c.stop(old).await;
    let new = c.leader().await;
    c.propose(b"after").await;

    c.start(old).await;
    let deadline = Instant::now() + WAIT;
    loop {
        let s = c.q(old).status();
        assert!(!s.leader_acknowledged, "restarted old leader: {s:?}");
        if s.leader == Some(new) {
            break;
        }
        assert!(Instant::now() < deadline, "never followed {new}: {s:?}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!(c.q(new).status().leader_acknowledged);
    c.shutdown().await;
}

/// A single voter is its own quorum: its leadership is acknowledged (a one-node quorum broker
/// waits for that before it publishes its metadata).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_voter_is_an_acknowledged_leader() {
    let c = Cluster::start_all(1, |_| {}).await;
    let leader = c.leader().await;
    c.propose(b"x").await;
    let deadline = Instant::now() + WAIT;
    while !c.q(leader).status().leader_acknowledged {
        assert!(Instant::now() < deadline, "{:?}", c.q(leader).status());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    c.shutdown().await;
}

/// Entries of about 2 KiB each, `range` of them.
fn big_payloads(range: std::ops::Range<u32>) -> Vec<Vec<u8>> {
    range
        .map(|i| {
            let mut p = format!("big-{i}-").into_bytes();
            p.resize(2048, b'x');
            p
        })
        .collect()
}

/// Every request between voters fits the frame bound (the broker's `socket.request.max.bytes`,
/// here 16 KiB; each voter's listener refuses larger frames): a proposal that cannot fit one
/// request is refused; a voter that was down catches up from the log with appends split under
/// the bound (openraft's PayloadTooLarge hint), and, once the log behind a snapshot is purged,
/// with a snapshot many times the bound sent in chunks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_and_snapshots_are_split_under_the_frame_bound() {
    const BOUND: usize = 16 * 1024;
    let mut c = Cluster::start_all(3, |cfg| {
        cfg.max_frame_bytes = BOUND;
        cfg.keep_after_snapshot = 0;
        cfg.segment_bytes = 64 * 1024;
    })
    .await;
    let leader = c.leader().await;
    assert!(matches!(
        c.q(leader).propose(vec![7; BOUND]).await,
        Err(QuorumError::PayloadTooLarge { .. })
    ));

    let f = *c.running().iter().find(|&&id| id != leader).unwrap();
    c.stop(f).await;
    let mut want = big_payloads(0..100);
    let mut last = 0;
    for p in &want {
        last = c.propose(p).await;
    }
    c.start(f).await;
    c.wait_applied(&[f], last).await;
    assert_eq!(
        c.sm(f).restores.load(Ordering::Relaxed),
        0,
        "caught up from the log: 200 KiB of entries in appends of at most 16 KiB"
    );
    c.assert_same(&want);

    c.stop(f).await;
    let more = big_payloads(100..200);
    for p in &more {
        last = c.propose(p).await;
    }
    want.extend(more);
    for id in c.running() {
        c.wait_applied(&[id], last).await;
        assert!(c.q(id).snapshot(WAIT).await.unwrap() >= last);
    }
    let leader = c.leader().await;
    c.q(leader)
        .wait_until(WAIT, |s| s.purged.filter(|&p| p >= last))
        .await
        .unwrap();
    c.start(f).await;
    c.wait_applied(&[f], last).await;
    assert_eq!(
        c.sm(f).restores.load(Ordering::Relaxed),
        1,
        "installed a snapshot of about 400 KiB in chunks under the bound"
    );
    c.assert_same(&want);
    c.shutdown().await;
}

//! The delayed-operation purgatory (Kafka's `DelayedOperationPurgatory`): requests that cannot be
//! answered yet wait here, watched under one or more keys (a partition; later a group id, a
//! transactional id), until an event on one of those keys lets them complete, or their timeout
//! passes. Nothing polls.
//!
//! - An operation is a [`DelayedOperation`]: `try_complete` says whether it can complete now (it
//!   is called on the thread of the event, so it must be cheap and never block or await);
//!   `on_complete` runs exactly once, either after a `try_complete` that said yes, or at the
//!   timeout (`expired` = true), or when [`Delayed::force_complete`] is called.
//! - [`Purgatory::try_complete_else_watch`] checks the operation once, watches it under its keys,
//!   checks again (an event between the first check and the watch would otherwise be lost) and
//!   arms its timer: one tokio sleep per operation, cancelled on completion.
//! - The code that changes what an operation waits for (an append, a HW or log-start move, a
//!   leadership change; a member joining) calls [`Purgatory::check_and_complete`] with the key,
//!   after releasing its own locks: `try_complete` takes them.
//!
//! Completed operations leave the watch list of the key that completed them at once; the lists
//! of their other keys are swept when those keys see an event, or by a full purge once enough
//! completions have accumulated (Kafka's `purgeInterval`).

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::task::AbortHandle;

/// A request (or a session, a rebalance...) waiting in a [`Purgatory`].
pub trait DelayedOperation: Send + Sync + 'static {
    /// Whether the operation can complete now. Called on the thread of each event on one of
    /// its keys, possibly concurrently: cheap, non-blocking, and it may record per-key progress
    /// (behind its own lock) so that `on_complete` can answer from it.
    fn try_complete(&self) -> bool;

    /// Called exactly once: after `try_complete` returned true (`expired` false), or when the
    /// timeout passed first (`expired` true). Typically sends the response to the waiting
    /// request.
    fn on_complete(&self, expired: bool);
}

/// An operation in a purgatory, with its exactly-once completion flag and its timer.
pub struct Delayed<O> {
    op: O,
    completed: AtomicBool,
    timer: Mutex<Option<AbortHandle>>,
    /// The waiting-operations count of the purgatory watching it, decremented on completion.
    pending: OnceLock<Arc<AtomicUsize>>,
}

impl<O: DelayedOperation> Delayed<O> {
    fn new(op: O) -> Arc<Self> {
        Arc::new(Self {
            op,
            completed: AtomicBool::new(false),
            timer: Mutex::new(None),
            pending: OnceLock::new(),
        })
    }

    pub fn op(&self) -> &O {
        &self.op
    }

    pub fn is_completed(&self) -> bool {
        self.completed.load(Ordering::Acquire)
    }

    /// Completes the operation unless it already is (Kafka's `forceComplete`); returns whether
    /// this call completed it.
    pub fn force_complete(&self) -> bool {
        self.complete(false)
    }

    fn complete(&self, expired: bool) -> bool {
        if self
            .completed
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return false;
        }
        if let Some(t) = self.timer.lock().take() {
            t.abort();
        }
        if let Some(p) = self.pending.get() {
            p.fetch_sub(1, Ordering::AcqRel);
        }
        self.op.on_complete(expired);
        true
    }

    /// Kafka's `safeTryComplete`: checks, and completes on a yes.
    fn try_complete(&self) -> bool {
        if self.is_completed() {
            return true;
        }
        self.op.try_complete() && self.complete(false)
    }
}

/// How many completed operations may linger in watch lists before a full sweep.
const PURGE_INTERVAL: usize = 1_000;
const SHARDS: usize = 16;

type WatchList<O> = Vec<Arc<Delayed<O>>>;

/// Delayed operations of one kind (`O`), watched under keys of type `K`.
pub struct Purgatory<K, O> {
    name: &'static str,
    shards: Vec<Mutex<HashMap<K, WatchList<O>>>>,
    hasher: std::collections::hash_map::RandomState,
    /// Operations watched and not completed yet (Kafka's `numDelayed`).
    pending: Arc<AtomicUsize>,
    completed_since_purge: AtomicUsize,
}

impl<K, O> Purgatory<K, O>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    O: DelayedOperation,
{
    pub fn new(name: &'static str) -> Self {
        Self {
            name,
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: Default::default(),
            pending: Arc::new(AtomicUsize::new(0)),
            completed_since_purge: AtomicUsize::new(0),
        }
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    fn shard(&self, key: &K) -> &Mutex<HashMap<K, WatchList<O>>> {
        &self.shards[self.hasher.hash_one(key) as usize % SHARDS]
    }

    /// Completes `op` now if it can; otherwise watches it under `keys` and expires it after
    /// `timeout` (Kafka's `tryCompleteElseWatch`). Returns the operation and whether it completed
    /// here. Must run inside a tokio runtime (the timer is a tokio task). With no keys the
    /// operation only completes at its timeout or by [`Delayed::force_complete`].
    pub fn try_complete_else_watch(
        &self,
        op: O,
        timeout: Duration,
        keys: &[K],
    ) -> (Arc<Delayed<O>>, bool) {
        let delayed = Delayed::new(op);
        if delayed.try_complete() {
            return (delayed, true);
        }
        self.pending.fetch_add(1, Ordering::AcqRel);
        let _ = delayed.pending.set(self.pending.clone());
        for key in keys {
            self.shard(key)
                .lock()
                .entry(key.clone())
                .or_default()
                .push(delayed.clone());
        }
        // An event between the first check and the watch found nothing to wake: check again.
        if delayed.try_complete() {
            self.note_completed();
            return (delayed, true);
        }
        let deadline = tokio::time::Instant::now() + timeout;
        let timed = delayed.clone();
        let task = tokio::spawn(async move {
            tokio::time::sleep_until(deadline).await;
            timed.complete(true);
        });
        *delayed.timer.lock() = Some(task.abort_handle());
        // Completed between the check and arming the timer: the timer must not outlive it.
        if delayed.is_completed() {
            task.abort();
        }
        let done = delayed.is_completed();
        (delayed, done)
    }

    /// Tries to complete every operation watched under `key` (Kafka's `checkAndComplete`);
    /// returns how many this call completed. Call it after releasing the locks the operations'
    /// `try_complete` takes.
    pub fn check_and_complete(&self, key: &K) -> usize {
        let watched: WatchList<O> = {
            let mut shard = self.shard(key).lock();
            let Some(list) = shard.get_mut(key) else {
                return 0;
            };
            list.retain(|d| !d.is_completed());
            if list.is_empty() {
                shard.remove(key);
                return 0;
            }
            list.clone()
        };
        let mut n = 0;
        for d in &watched {
            if !d.is_completed() && d.op.try_complete() && d.complete(false) {
                n += 1;
            }
        }
        if n > 0 {
            {
                let mut shard = self.shard(key).lock();
                if let Some(list) = shard.get_mut(key) {
                    list.retain(|d| !d.is_completed());
                    if list.is_empty() {
                        shard.remove(key);
                    }
                }
            }
            // After the shard is released: the periodic purge locks every shard.
            for _ in 0..n {
                self.note_completed();
            }
        }
        n
    }

    /// Completes every operation watched under `key` now, whatever their state (a partition
    /// deleted, a coordinator resigning); returns how many.
    pub fn force_complete_all(&self, key: &K) -> usize {
        let list = self.shard(key).lock().remove(key).unwrap_or_default();
        let mut n = 0;
        for d in list {
            if d.force_complete() {
                n += 1;
            }
        }
        n
    }

    fn note_completed(&self) {
        if self.completed_since_purge.fetch_add(1, Ordering::AcqRel) + 1 >= PURGE_INTERVAL {
            self.completed_since_purge.store(0, Ordering::Release);
            self.purge_completed();
        }
    }

    /// Drops completed operations from every watch list.
    pub fn purge_completed(&self) -> usize {
        let mut purged = 0;
        for shard in &self.shards {
            let mut shard = shard.lock();
            shard.retain(|_, list| {
                let before = list.len();
                list.retain(|d| !d.is_completed());
                purged += before - list.len();
                !list.is_empty()
            });
        }
        purged
    }

    /// Operations waiting (watched, neither completed nor expired).
    pub fn num_delayed(&self) -> usize {
        self.pending.load(Ordering::Acquire)
    }

    /// Watch-list entries, completed ones not yet purged included (Kafka's `watched`).
    pub fn watched(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().values().map(Vec::len).sum::<usize>())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicI64;

    use tokio::time::Instant;

    use super::*;

    /// Completes once `level` reaches `target`; records how it completed.
    struct Reach {
        level: Arc<AtomicI64>,
        target: i64,
        completions: Arc<Mutex<Vec<(bool, Duration)>>>,
        start: Instant,
    }

    impl DelayedOperation for Reach {
        fn try_complete(&self) -> bool {
            self.level.load(Ordering::Acquire) >= self.target
        }
        fn on_complete(&self, expired: bool) {
            self.completions
                .lock()
                .push((expired, self.start.elapsed()));
        }
    }

    struct Fixture {
        purgatory: Purgatory<String, Reach>,
        level: Arc<AtomicI64>,
        completions: Arc<Mutex<Vec<(bool, Duration)>>>,
        start: Instant,
    }

    impl Fixture {
        fn new() -> Self {
            Self {
                purgatory: Purgatory::new("test"),
                level: Arc::default(),
                completions: Arc::default(),
                start: Instant::now(),
            }
        }
        fn op(&self, target: i64) -> Reach {
            Reach {
                level: self.level.clone(),
                target,
                completions: self.completions.clone(),
                start: self.start,
            }
        }
        fn watch(&self, target: i64, timeout_ms: u64, keys: &[&str]) -> Arc<Delayed<Reach>> {
            let keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
            self.purgatory
                .try_complete_else_watch(self.op(target), Duration::from_millis(timeout_ms), &keys)
                .0
        }
        fn completions(&self) -> Vec<(bool, Duration)> {
            self.completions.lock().clone()
        }
    }

    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    /// Every `PURGE_INTERVAL` completions purge all watch lists. Completions by
    /// `check_and_complete` count too; the purge must not run while that call still holds its
    /// key's shard (a non-reentrant lock: the broker's produce and follower-fetch paths hung
    /// there under load, found by the nemesis).
    #[tokio::test(start_paused = true)]
    async fn the_periodic_purge_runs_after_check_and_complete_releases_its_shard() {
        let f = Arc::new(Fixture::new());
        let ops: Vec<_> = (0..PURGE_INTERVAL + 1)
            .map(|i| f.watch(1, 60_000, &[if i % 2 == 0 { "a" } else { "b" }]))
            .collect();
        f.level.store(1, Ordering::Release);
        // On a thread with a deadline, so a deadlock fails the test instead of hanging it.
        let (tx, rx) = std::sync::mpsc::channel();
        let g = f.clone();
        std::thread::spawn(move || {
            let n = g.purgatory.check_and_complete(&"a".to_string())
                + g.purgatory.check_and_complete(&"b".to_string());
            let _ = tx.send(n);
        });
        let n = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("check_and_complete deadlocked in the periodic purge");
        assert_eq!(n, PURGE_INTERVAL + 1);
        assert!(ops.iter().all(|d| d.is_completed()));
        assert_eq!(f.purgatory.watched(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn completes_at_once_when_it_can() {
        let f = Fixture::new();
        f.level.store(5, Ordering::Release);
        let (d, done) = f.purgatory.try_complete_else_watch(
            f.op(5),
            Duration::from_secs(1),
            &["a".to_string()],
        );
        assert!(done && d.is_completed());
        assert_eq!(f.purgatory.watched(), 0, "never watched");
        assert_eq!(f.purgatory.num_delayed(), 0);
        assert_eq!(f.completions(), vec![(false, Duration::ZERO)]);
    }

    #[tokio::test(start_paused = true)]
    async fn completes_on_the_event_of_its_key_not_another() {
        let f = Fixture::new();
        let d = f.watch(3, 10_000, &["a"]);
        assert_eq!(f.purgatory.num_delayed(), 1);
        tokio::time::advance(Duration::from_millis(700)).await;
        f.level.store(3, Ordering::Release);
        // Nothing polls: until an event on its key, it waits however ready it is.
        settle().await;
        assert!(!d.is_completed());
        assert_eq!(f.purgatory.check_and_complete(&"b".to_string()), 0);
        assert!(!d.is_completed());
        assert_eq!(f.purgatory.check_and_complete(&"a".to_string()), 1);
        assert!(d.is_completed());
        assert_eq!(f.completions(), vec![(false, Duration::from_millis(700))]);
        assert_eq!(f.purgatory.watched(), 0);
        assert_eq!(f.purgatory.num_delayed(), 0);
        // The cancelled timer does not complete it a second time.
        tokio::time::advance(Duration::from_secs(20)).await;
        settle().await;
        assert_eq!(f.completions().len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn expires_exactly_at_its_timeout() {
        let f = Fixture::new();
        let d = f.watch(1, 1_500, &["a"]);
        tokio::time::advance(Duration::from_millis(1_499)).await;
        settle().await;
        assert!(!d.is_completed(), "1 ms before the timeout");
        assert_eq!(f.purgatory.check_and_complete(&"a".to_string()), 0);
        tokio::time::advance(Duration::from_millis(1)).await;
        settle().await;
        assert!(d.is_completed());
        assert_eq!(f.completions(), vec![(true, Duration::from_millis(1_500))]);
        assert_eq!(f.purgatory.num_delayed(), 0);
        // An event after expiry finds it done and drops it from the watch list.
        f.level.store(1, Ordering::Release);
        assert_eq!(f.purgatory.check_and_complete(&"a".to_string()), 0);
        assert_eq!(f.purgatory.watched(), 0);
        assert_eq!(f.completions().len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn an_operation_under_several_keys_completes_once() {
        let f = Fixture::new();
        let d = f.watch(2, 5_000, &["a", "b", "c"]);
        assert_eq!(f.purgatory.watched(), 3);
        f.level.store(2, Ordering::Release);
        assert_eq!(f.purgatory.check_and_complete(&"b".to_string()), 1);
        assert_eq!(f.purgatory.check_and_complete(&"a".to_string()), 0);
        assert!(d.is_completed());
        // "c" saw no event: its entry lingers until a sweep.
        assert_eq!(f.purgatory.watched(), 1);
        assert_eq!(f.purgatory.purge_completed(), 1);
        assert_eq!(f.purgatory.watched(), 0);
        tokio::time::advance(Duration::from_secs(10)).await;
        settle().await;
        assert_eq!(f.completions(), vec![(false, Duration::ZERO)]);
    }

    #[tokio::test(start_paused = true)]
    async fn only_the_ready_operations_of_a_key_complete() {
        let f = Fixture::new();
        let low = f.watch(1, 5_000, &["a"]);
        let high = f.watch(10, 5_000, &["a"]);
        f.level.store(1, Ordering::Release);
        assert_eq!(f.purgatory.check_and_complete(&"a".to_string()), 1);
        assert!(low.is_completed() && !high.is_completed());
        assert_eq!(f.purgatory.watched(), 1);
        assert_eq!(f.purgatory.num_delayed(), 1);
        // Forced (e.g. the partition went away): completes now, not expired.
        assert_eq!(f.purgatory.force_complete_all(&"a".to_string()), 1);
        assert!(high.is_completed());
        assert_eq!(
            f.completions(),
            vec![(false, Duration::ZERO), (false, Duration::ZERO)]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_events_complete_exactly_once() {
        let f = Arc::new(Fixture::new());
        let ops: Vec<_> = (0..200).map(|_| f.watch(1, 60_000, &["a", "b"])).collect();
        f.level.store(1, Ordering::Release);
        let threads: Vec<_> = (0..4)
            .map(|i| {
                let f = f.clone();
                std::thread::spawn(move || {
                    let key = if i % 2 == 0 { "a" } else { "b" };
                    f.purgatory.check_and_complete(&key.to_string())
                })
            })
            .collect();
        let total: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(total, 200);
        assert!(ops.iter().all(|d| d.is_completed()));
        assert_eq!(f.completions().len(), 200);
        assert_eq!(f.purgatory.num_delayed(), 0);
    }
}

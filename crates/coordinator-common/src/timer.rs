//! Timers a shard sets from inside its own operations (Kafka's `CoordinatorTimer`), and the
//! clock shards read.
//!
//! A timer is keyed (`"session-<group>-<member>"`, `"join-<group>"`): scheduling a key again
//! replaces its previous timer, and cancelling a key stops it. When a timer fires its
//! operation runs as a write of the shard's partition, in the shard's queue like every other
//! event. A timer that was replaced or cancelled after it fired but before its turn in the
//! queue does nothing (each schedule has a generation; only the current one runs).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::runtime::{
    AfterCommit, CoordinatorError, CoordinatorShard, Event, WriteContext, WriteOp, WriteResult,
};

/// What a timer's operation returns: the records to append and, optionally, what to run once
/// they are committed (or failed), e.g. answering join requests a rebalance held back.
pub type TimerResult<R> = WriteResult<R, Option<AfterCommit>>;

/// A timer's operation.
pub type TimerOp<S> = Box<
    dyn FnOnce(
            &mut S,
            &WriteContext,
        ) -> Result<TimerResult<<S as CoordinatorShard>::Record>, CoordinatorError>
        + Send,
>;

/// Wall-clock milliseconds as shards see them (commit timestamps, expiry, session deadlines).
pub trait Clock: Send + Sync + 'static {
    fn now_ms(&self) -> i64;
}

/// The system clock read through tokio's clock: the wall time when it was made plus tokio's
/// elapsed time since, so a test that pauses and advances tokio time moves it too.
#[derive(Debug, Clone)]
pub struct TokioClock {
    base_ms: i64,
    start: tokio::time::Instant,
}

impl TokioClock {
    pub fn new() -> Self {
        let base_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        Self {
            base_ms,
            start: tokio::time::Instant::now(),
        }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TokioClock {
    fn now_ms(&self) -> i64 {
        self.base_ms + self.start.elapsed().as_millis() as i64
    }
}

struct Pending {
    generation: u64,
    task: JoinHandle<()>,
}

/// One shard's timers. Cheap to clone; every clone sets timers of the same shard.
pub struct CoordinatorTimer<S: CoordinatorShard> {
    events: mpsc::WeakUnboundedSender<Event<S>>,
    pending: Arc<Mutex<(u64, HashMap<String, Pending>)>>,
}

impl<S: CoordinatorShard> Clone for CoordinatorTimer<S> {
    fn clone(&self) -> Self {
        Self {
            events: self.events.clone(),
            pending: self.pending.clone(),
        }
    }
}

impl<S: CoordinatorShard> CoordinatorTimer<S> {
    pub(crate) fn new(events: mpsc::WeakUnboundedSender<Event<S>>) -> Self {
        Self {
            events,
            pending: Arc::new(Mutex::new((0, HashMap::new()))),
        }
    }

    /// Runs `op` as a write of this shard after `delay`, replacing any timer under `key`.
    pub fn schedule(
        &self,
        key: impl Into<String>,
        delay: Duration,
        op: impl FnOnce(&mut S, &WriteContext) -> Result<TimerResult<S::Record>, CoordinatorError>
            + Send
            + 'static,
    ) {
        let key = key.into();
        let mut guard = self.pending.lock();
        guard.0 += 1;
        let generation = guard.0;
        let events = self.events.clone();
        let pending = self.pending.clone();
        let fired_key = key.clone();
        let op: TimerOp<S> = Box::new(op);
        let task = tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let Some(events) = events.upgrade() else {
                return;
            };
            let write: WriteOp<S> = Box::new(move |shard, ctx| {
                // Still the current timer of its key? (It may have been replaced or cancelled
                // while this event waited in the queue.)
                {
                    let mut p = pending.lock();
                    match p.1.get(&fired_key) {
                        Some(cur) if cur.generation == generation => {
                            p.1.remove(&fired_key);
                        }
                        _ => return None,
                    }
                }
                match op(shard, ctx) {
                    Ok(WriteResult { records, response }) => {
                        let done: AfterCommit = Box::new(move |r| {
                            if let Some(after) = response {
                                after(r);
                            }
                        });
                        Some((records, done))
                    }
                    Err(e) => {
                        tracing::debug!(key = %fired_key, error = %e, "coordinator timer refused");
                        None
                    }
                }
            });
            let _ = events.send(Event::Write(write));
        });
        if let Some(old) = guard.1.insert(key, Pending { generation, task }) {
            old.task.abort();
        }
    }

    /// Stops the timer under `key`, if any.
    pub fn cancel(&self, key: &str) {
        if let Some(old) = self.pending.lock().1.remove(key) {
            old.task.abort();
        }
    }

    /// Whether a timer is set under `key`.
    pub fn is_scheduled(&self, key: &str) -> bool {
        self.pending.lock().1.contains_key(key)
    }

    /// Stops every timer (the shard is unloaded).
    pub(crate) fn cancel_all(&self) {
        for (_, p) in self.pending.lock().1.drain() {
            p.task.abort();
        }
    }
}

/// What a shard is given when it is made: its partition, timers and clock.
pub struct ShardContext<S: CoordinatorShard> {
    pub tp: crate::runtime::TopicPartition,
    /// The leader epoch this shard loads at (Kafka's coordinator epoch).
    pub epoch: i32,
    pub timer: CoordinatorTimer<S>,
    pub clock: Arc<dyn Clock>,
}

//! The broker-wide bounds on requests in flight: Kafka's `queued.max.requests` (the
//! `RequestChannel` queue between its network and handler threads) and
//! `queued.max.request.bytes` (the `MemoryPool` its network threads allocate request buffers
//! from).
//!
//! Strom has no queue: each connection handles its own request. A request therefore takes a
//! slot of `queued.max.requests` before it is handled and gives it back when its handler is
//! done, or earlier when it parks waiting on something else (a purgatory, a coordinator, the
//! controller), as a Kafka request leaves its handler thread then: [`parked`] is called at
//! those points. With every slot taken, a connection with a complete request waits, reading
//! nothing more, as Kafka's network thread blocks on the full queue.
//!
//! With `queued.max.request.bytes` set, a connection takes a frame's size from the
//! [`MemoryPool`] as soon as the size prefix is read (before the body arrives, as Kafka
//! allocates the receive buffer) and gives it back when the request's handler is done; while
//! the pool is exhausted, connections needing memory read nothing (Kafka mutes them). As
//! Kafka's pool (not strict), an allocation succeeds while any memory is left, so the pool can
//! be overdrawn by one frame at most.

use std::cell::RefCell;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use crate::request_limits::RequestLimits;

tokio::task_local! {
    /// The slot of the request a connection task is handling.
    static REQUEST_SLOT: RefCell<Option<OwnedSemaphorePermit>>;
}

/// Gives back the current request's slot of `queued.max.requests`: the request now waits on
/// something other than this broker's CPU. A no-op outside a request (or when already given).
pub fn parked() {
    let _ = REQUEST_SLOT.try_with(|slot| slot.borrow_mut().take());
}

pub struct RequestQueue {
    slots: Arc<Semaphore>,
    pool: Option<Arc<MemoryPool>>,
}

impl RequestQueue {
    pub fn new(limits: &RequestLimits) -> Self {
        Self {
            slots: Arc::new(Semaphore::new(
                limits.queued_max_requests.min(Semaphore::MAX_PERMITS),
            )),
            pool: (limits.queued_max_request_bytes > 0)
                .then(|| Arc::new(MemoryPool::new(limits.queued_max_request_bytes))),
        }
    }

    /// Waits for a slot of `queued.max.requests`.
    pub async fn slot(&self) -> Option<OwnedSemaphorePermit> {
        self.slots.clone().acquire_owned().await.ok()
    }

    /// Runs `handler` holding `slot`, which [`parked`] may give back early.
    pub async fn run_in_slot<F: std::future::Future>(
        slot: OwnedSemaphorePermit,
        handler: F,
    ) -> F::Output {
        REQUEST_SLOT.scope(RefCell::new(Some(slot)), handler).await
    }

    /// Waits for `bytes` of the request memory pool (at once when it is unbounded).
    pub async fn memory(&self, bytes: usize) -> Option<PoolLease> {
        match &self.pool {
            None => None,
            Some(pool) => Some(pool.allocate(bytes).await),
        }
    }

    /// Slots free now (tests and diagnostics).
    pub fn free_slots(&self) -> usize {
        self.slots.available_permits()
    }
}

/// Kafka's `SimpleMemoryPool` (not strict): `available` may go below zero by the last
/// allocation; allocations wait while it is zero or less.
pub struct MemoryPool {
    available: Mutex<i64>,
    released: Notify,
}

impl MemoryPool {
    pub fn new(size: i64) -> Self {
        Self {
            available: Mutex::new(size),
            released: Notify::new(),
        }
    }

    pub async fn allocate(self: &Arc<Self>, bytes: usize) -> PoolLease {
        loop {
            let released = self.released.notified();
            {
                let mut available = self.available.lock();
                if *available > 0 {
                    *available -= bytes as i64;
                    return PoolLease {
                        pool: self.clone(),
                        bytes,
                    };
                }
            }
            released.await;
        }
    }

    pub fn available(&self) -> i64 {
        *self.available.lock()
    }
}

/// Memory taken from a [`MemoryPool`], given back on drop.
pub struct PoolLease {
    pool: Arc<MemoryPool>,
    bytes: usize,
}

impl PoolLease {
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for PoolLease {
    fn drop(&mut self) {
        *self.pool.available.lock() += self.bytes as i64;
        self.pool.released.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(requests: usize, bytes: i64) -> RequestLimits {
        RequestLimits {
            fetch_max_bytes: 1024,
            replica_fetch_response_max_bytes: 0,
            queued_max_requests: requests,
            queued_max_request_bytes: bytes,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_pool_is_overdrawn_by_one_allocation_then_waits_for_a_release() {
        let q = RequestQueue::new(&limits(10, 100));
        let a = q.memory(90).await.unwrap();
        // 10 left: the next allocation succeeds whatever its size (Kafka's non-strict pool).
        let b = q.memory(60).await.unwrap();
        assert_eq!(q.pool.as_ref().unwrap().available(), -50);
        let q = Arc::new(q);
        let waiting = {
            let q = q.clone();
            tokio::spawn(async move { q.memory(1).await.map(|l| l.bytes()) })
        };
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "nothing left: waits");
        drop(b);
        // 10 left again: the waiter gets its byte.
        assert_eq!(waiting.await.unwrap(), Some(1));
        drop(a);
        assert_eq!(q.pool.as_ref().unwrap().available(), 100, "all given back");
    }

    #[tokio::test]
    async fn unbounded_pool_takes_nothing() {
        let q = RequestQueue::new(&limits(1, -1));
        assert!(q.memory(1 << 30).await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_parked_request_gives_its_slot_back() {
        let q = Arc::new(RequestQueue::new(&limits(1, -1)));
        let slot = q.slot().await.unwrap();
        assert_eq!(q.free_slots(), 0);
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let q2 = q.clone();
        let handler = tokio::spawn(RequestQueue::run_in_slot(slot, async move {
            assert_eq!(q2.free_slots(), 0, "held while handled");
            parked();
            assert_eq!(q2.free_slots(), 1, "given back when parked");
            let _ = rx.await;
        }));
        tokio::task::yield_now().await;
        // Another request gets the slot while the first one is parked.
        let other = q.slot().await.unwrap();
        drop(other);
        tx.send(()).unwrap();
        handler.await.unwrap();
        assert_eq!(q.free_slots(), 1);
        parked(); // outside a request: nothing happens
    }
}

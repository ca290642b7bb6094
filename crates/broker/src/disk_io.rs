//! Disk work on the request path without stalling the async workers. An append may block on
//! the disk: a segment roll creates files and fsyncs a producer-state snapshot, a new leader
//! epoch fsyncs its checkpoint, `flush.messages` fsyncs the log. Kafka does that work on its I/O
//! threads, never on the network threads; here the tokio worker that runs the append hands its
//! other tasks to another thread first ([`tokio::task::block_in_place`]), so one slow disk
//! stalls the requests that wait for that disk, not every connection of the broker.
//!
//! The hand-off has a cost (threads woken and parked per call: a quarter of a Java producer's
//! throughput, `docs/PERFORMANCE.md` run 9), so Produce pays it only for the appends that may
//! block (`Partition::append_may_block`); plain page-cache writes run in place.
//!
//! Back-pressure comes from the request pipeline: a connection has one request in flight and
//! `queued.max.requests` bounds them across connections, so the threads blocked here are
//! bounded too.

use tokio::runtime::{Handle, RuntimeFlavor};

/// Runs `f`, which may block on the disk, off the async workers: in place on a multi-threaded
/// runtime after handing this worker's tasks to another thread, directly elsewhere (a
/// single-threaded test runtime, a plain thread).
pub fn blocking<R>(f: impl FnOnce() -> R) -> R {
    match Handle::try_current() {
        Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => tokio::task::block_in_place(f),
        _ => f(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use super::blocking;

    /// With one worker, a task blocked in [`blocking`] does not keep another task from running:
    /// the other task sets the flag the blocked one waits for.
    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn other_tasks_run_while_one_blocks() {
        let flag = Arc::new(AtomicBool::new(false));
        let f = flag.clone();
        let blocked = tokio::spawn(async move {
            blocking(|| {
                for _ in 0..500 {
                    if f.load(Ordering::Acquire) {
                        return true;
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                false
            })
        });
        // Give the blocked task the only worker first.
        tokio::task::yield_now().await;
        let setter = tokio::spawn(async move { flag.store(true, Ordering::Release) });
        setter.await.unwrap();
        assert!(
            blocked.await.unwrap(),
            "the other task ran while one blocked"
        );
    }

    #[tokio::test]
    async fn current_thread_runs_in_place() {
        assert_eq!(blocking(|| 7), 7);
    }

    #[test]
    fn outside_a_runtime_runs_in_place() {
        assert_eq!(blocking(|| 7), 7);
    }
}

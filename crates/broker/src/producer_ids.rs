//! Producer id allocation (Kafka's `RPCProducerIdManager`): ids come from blocks of
//! [`PRODUCER_ID_BLOCK_SIZE`](strom_controller) that the controller records durably, so no id is
//! issued twice. A caller never waits for the controller: the next block is requested in the
//! background once 90% of the current one is used (one request in flight at a time, a backoff
//! after a failure), and when the current block is used up before the next one arrived the caller
//! gets [`ProducerIdError::BlockNotReady`] — Kafka answers InitProducerId with
//! COORDINATOR_LOAD_IN_PROGRESS then, which every client retries.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use strom_controller::{ControllerError, ProducerIdBlock};
use strom_protocol::ErrorCode;
use tokio::time::Instant;

use crate::controller_channel::ControllerChannel;

/// Percentage of a block after which the next one is requested (Kafka's
/// `PID_PREFETCH_THRESHOLD`, 0.90).
const PREFETCH_PERCENT: i64 = 90;

/// Wait after a failed request before the next one (Kafka's `ProducerIdManager.RETRY_BACKOFF_MS`).
pub const RETRY_BACKOFF: Duration = Duration::from_millis(50);

/// A request that has not completed by then is given up and may be sent again (Kafka's
/// controller channel times its AllocateProducerIds out so, `handleTimeout`).
pub const ALLOCATION_TIMEOUT: Duration = Duration::from_secs(30);

/// Where blocks come from: the active controller ([`ControllerChannel`]) in the broker.
pub trait ProducerIdBlockSource: Send + Sync + 'static {
    fn allocate_producer_ids(
        &self,
    ) -> Pin<Box<dyn Future<Output = Result<ProducerIdBlock, ControllerError>> + Send + '_>>;
}

impl ProducerIdBlockSource for ControllerChannel {
    fn allocate_producer_ids(
        &self,
    ) -> Pin<Box<dyn Future<Output = Result<ProducerIdBlock, ControllerError>> + Send + '_>> {
        Box::pin(ControllerChannel::allocate_producer_ids(self))
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProducerIdError {
    #[error("producer id block is used up; waiting for the next block from the controller")]
    BlockNotReady,
}

impl ProducerIdError {
    /// The answer to InitProducerId (Kafka's `RPCProducerIdManager.generateProducerId` throws
    /// COORDINATOR_LOAD_IN_PROGRESS rather than REQUEST_TIMED_OUT because old clients treat the
    /// latter as fatal).
    pub fn code(&self) -> ErrorCode {
        match self {
            ProducerIdError::BlockNotReady => ErrorCode::CoordinatorLoadInProgress,
        }
    }
}

struct State {
    current: Option<ProducerIdBlock>,
    next: i64,
    prefetched: Option<ProducerIdBlock>,
    request_in_flight: bool,
    /// No request before this instant (set by a failed one).
    retry_at: Option<Instant>,
}

struct Inner {
    source: Arc<dyn ProducerIdBlockSource>,
    // Never held across an await: the controller call runs in a task of its own.
    state: Mutex<State>,
}

pub struct ProducerIdManager {
    inner: Arc<Inner>,
}

impl ProducerIdManager {
    pub fn new(source: Arc<dyn ProducerIdBlockSource>) -> Self {
        Self {
            inner: Arc::new(Inner {
                source,
                state: Mutex::new(State {
                    current: None,
                    next: 0,
                    prefetched: None,
                    request_in_flight: false,
                    retry_at: None,
                }),
            }),
        }
    }

    /// Requests the first block in the background (needs a tokio runtime), so that the first
    /// InitProducerId after a start usually finds one. Kafka waits for the first demand; asking
    /// early costs at most one block of ids and saves the first producer a retry.
    pub fn prefetch(&self) {
        let mut s = self.inner.state.lock();
        self.maybe_request(&mut s);
    }

    /// The next unused producer id, without waiting: [`ProducerIdError::BlockNotReady`] when the
    /// current block is used up and the next has not arrived (a request for it is then under
    /// way, or will be after the backoff).
    pub fn generate_producer_id(&self) -> Result<i64, ProducerIdError> {
        let mut s = self.inner.state.lock();
        if s.current.is_none_or(|b| s.next >= b.end()) {
            let Some(block) = s.prefetched.take() else {
                self.maybe_request(&mut s);
                return Err(ProducerIdError::BlockNotReady);
            };
            tracing::info!(
                start = block.start,
                len = block.len,
                "using producer id block"
            );
            s.current = Some(block);
            s.next = block.start;
        }
        let block = s.current.expect("set above");
        let id = s.next;
        s.next += 1;
        let used = s.next - block.start;
        if used * 100 >= block.len as i64 * PREFETCH_PERCENT {
            // Kafka asks once, when the 90% mark is crossed; asking on every call past it (when
            // nothing is prefetched or in flight and the backoff is over) also retries a failed
            // prefetch before the block runs out.
            self.maybe_request(&mut s);
        }
        Ok(id)
    }

    /// Starts a request for the next block unless one is prefetched, one is in flight, or the
    /// backoff after a failure is not over.
    fn maybe_request(&self, s: &mut State) {
        if s.prefetched.is_some() || s.request_in_flight {
            return;
        }
        if s.retry_at.is_some_and(|t| Instant::now() < t) {
            return;
        }
        s.request_in_flight = true;
        let inner = self.inner.clone();
        tokio::spawn(async move {
            let result =
                tokio::time::timeout(ALLOCATION_TIMEOUT, inner.source.allocate_producer_ids())
                    .await;
            let mut s = inner.state.lock();
            s.request_in_flight = false;
            let failure = match result {
                Ok(Ok(block)) => match check_block(block, s.current) {
                    Ok(()) => {
                        s.prefetched = Some(block);
                        s.retry_at = None;
                        return;
                    }
                    Err(why) => why,
                },
                Ok(Err(e)) => e.to_string(),
                Err(_) => "the controller did not answer in time".to_string(),
            };
            tracing::warn!(error = %failure, "requesting the next producer id block failed");
            s.retry_at = Some(Instant::now() + RETRY_BACKOFF);
        });
    }
}

/// Kafka's `sanityCheckResponse`: a block after the one in use, a valid range.
fn check_block(block: ProducerIdBlock, current: Option<ProducerIdBlock>) -> Result<(), String> {
    if block.start < 0 || block.len <= 0 || block.start > i64::MAX - block.len as i64 {
        return Err(format!(
            "invalid producer id block: start {} len {}",
            block.start, block.len
        ));
    }
    if let Some(c) = current.filter(|c| block.start < c.end()) {
        return Err(format!(
            "producer id block starting at {} is not after the current one ending at {}",
            block.start,
            c.end()
        ));
    }
    Ok(())
}

#[cfg(test)]
#[path = "producer_ids_tests.rs"]
mod tests;

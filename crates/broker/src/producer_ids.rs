//! Producer id allocation (Kafka's `ProducerIdManager`): ids come from blocks of
//! [`PRODUCER_ID_BLOCK_SIZE`] that the controller records durably, so no id is issued twice. The
//! next block is fetched when 90% of the current one is used, so a client never waits for it.

use std::sync::Arc;

use strom_controller::{ControllerError, ProducerIdBlock};

use crate::controller_channel::ControllerChannel;

/// Fraction of a block after which the next one is fetched (Kafka's 90%).
const PREFETCH_PERCENT: i64 = 90;

struct State {
    current: Option<ProducerIdBlock>,
    next: i64,
    prefetched: Option<ProducerIdBlock>,
}

pub struct ProducerIdManager {
    channel: Arc<ControllerChannel>,
    // Held across the controller call: requests wait for a block instead of racing for two.
    state: tokio::sync::Mutex<State>,
}

impl ProducerIdManager {
    pub fn new(channel: Arc<ControllerChannel>) -> Self {
        Self {
            channel,
            state: tokio::sync::Mutex::new(State {
                current: None,
                next: 0,
                prefetched: None,
            }),
        }
    }

    /// The next unused producer id.
    pub async fn generate_producer_id(&self) -> Result<i64, ControllerError> {
        let mut s = self.state.lock().await;
        let exhausted = s.current.is_none_or(|b| s.next >= b.end());
        if exhausted {
            let block = match s.prefetched.take() {
                Some(b) => b,
                None => self.channel.allocate_producer_ids().await?,
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
        if s.prefetched.is_none() && used * 100 >= block.len as i64 * PREFETCH_PERCENT {
            // The local controller answers in about one fsync; in a cluster this is an
            // AllocateProducerIds request to the active controller.
            match self.channel.allocate_producer_ids().await {
                Ok(b) => s.prefetched = Some(b),
                Err(e) => {
                    tracing::warn!(error = %e, "prefetching the next producer id block failed")
                }
            }
        }
        Ok(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::RwLock;
    use strom_controller::controller::TopicDefaults;
    use strom_controller::QuorumController;

    fn controller(dir: &std::path::Path) -> Arc<QuorumController> {
        Arc::new(
            QuorumController::open(
                &dir.join("m.log"),
                TopicDefaults {
                    num_partitions: 1,
                    replication_factor: 1,
                },
            )
            .unwrap(),
        )
    }

    fn manager(c: Arc<QuorumController>) -> ProducerIdManager {
        let image = Arc::new(RwLock::new(c.image()));
        ProducerIdManager::new(Arc::new(ControllerChannel::new(1, c, image)))
    }

    #[tokio::test]
    async fn ids_are_unique_across_blocks_and_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let mut seen = std::collections::HashSet::new();
        {
            let m = manager(controller(dir.path()));
            for _ in 0..2500 {
                assert!(seen.insert(m.generate_producer_id().await.unwrap()));
            }
        }
        // Prefetching took the block after the one in use.
        assert_eq!(controller(dir.path()).image().next_producer_id, 3000);
        let m = manager(controller(dir.path()));
        for _ in 0..1500 {
            assert!(seen.insert(m.generate_producer_id().await.unwrap()));
        }
        assert_eq!(seen.len(), 4000);
    }

    #[tokio::test]
    async fn prefetches_at_ninety_percent() {
        let dir = tempfile::tempdir().unwrap();
        let c = controller(dir.path());
        let m = manager(c.clone());
        for _ in 0..899 {
            m.generate_producer_id().await.unwrap();
        }
        assert_eq!(c.image().next_producer_id, 1000);
        m.generate_producer_id().await.unwrap();
        assert_eq!(c.image().next_producer_id, 2000);
    }
}

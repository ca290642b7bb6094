//! This broker's life as the controller sees it (Kafka's `BrokerLifecycleManager`): the
//! incarnation id of this process, the previous broker epoch its last clean shutdown left in
//! the log dirs, the broker epoch it registered under, and the registration itself.
//!
//! Each start is a new incarnation (a random id). It registers with the previous broker epoch,
//! so that the controller can tell a clean restart from one that may have lost data; while the
//! previous incarnation's session lives the controller answers DUPLICATE_BROKER_REGISTRATION
//! and the broker retries until that session has expired. The broker epoch it gets — the
//! offset of its registration record — goes into every heartbeat, AlterPartition and follower
//! fetch, and into the clean-shutdown marker at the end.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use strom_controller::QuorumController;
use uuid::Uuid;

use crate::config::BrokerConfig;
use crate::controller_channel::ControllerChannel;

/// How long a refused or failed registration waits before the next try.
const REGISTRATION_RETRY: Duration = Duration::from_millis(300);

#[derive(Debug)]
pub struct BrokerLifecycleManager {
    incarnation_id: Uuid,
    previous_broker_epoch: i64,
    broker_epoch: AtomicI64,
    shutting_down: AtomicBool,
}

impl BrokerLifecycleManager {
    /// A new incarnation; `previous_broker_epoch` from the clean-shutdown markers (-1: none).
    pub fn new(previous_broker_epoch: i64) -> Self {
        Self {
            incarnation_id: Uuid::new_v4(),
            previous_broker_epoch,
            broker_epoch: AtomicI64::new(-1),
            shutting_down: AtomicBool::new(false),
        }
    }

    pub fn incarnation_id(&self) -> Uuid {
        self.incarnation_id
    }

    pub fn previous_broker_epoch(&self) -> i64 {
        self.previous_broker_epoch
    }

    /// The broker epoch this incarnation registered under; -1 until it has.
    pub fn broker_epoch(&self) -> i64 {
        self.broker_epoch.load(Ordering::Acquire)
    }

    pub fn set_broker_epoch(&self, epoch: i64) {
        self.broker_epoch.store(epoch, Ordering::Release);
    }

    /// The controlled shutdown has begun: regular heartbeats stop (they would unfence the
    /// broker again once the controller fenced it at the end of the shutdown).
    pub fn begin_shutdown(&self) {
        self.shutting_down.store(true, Ordering::Release);
    }

    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::Acquire)
    }
}

/// In a quorum the broker registers once a controller is elected, through it, retrying until
/// the active controller has registered this incarnation (a DUPLICATE_BROKER_REGISTRATION
/// lasts until the previous incarnation's session has expired).
pub async fn register_until_done(
    channel: Arc<ControllerChannel>,
    controller: Arc<QuorumController>,
    config: Arc<BrokerConfig>,
) {
    let mut refusals = 0u64;
    loop {
        if controller
            .wait_for_leader(Duration::from_secs(5))
            .await
            .is_ok()
        {
            match channel
                .register_broker(
                    &config.advertised_host,
                    config.advertised_port,
                    config.rack.clone(),
                )
                .await
            {
                Ok(epoch) => {
                    tracing::info!(
                        controller = ?controller.active_controller(),
                        broker_epoch = epoch,
                        incarnation = %channel.lifecycle().incarnation_id(),
                        "registered with the controller"
                    );
                    return;
                }
                Err(e) => {
                    refusals += 1;
                    // Kafka logs every refusal; once a second is enough to see why.
                    if refusals % 4 == 1 {
                        tracing::info!(error = %e, "broker registration refused; retrying");
                    } else {
                        tracing::debug!(error = %e, "broker registration refused; retrying");
                    }
                }
            }
        }
        tokio::time::sleep(REGISTRATION_RETRY).await;
    }
}

//! The brokers' lifecycle on the active controller (Kafka's `ClusterControlManager` and
//! `BrokerHeartbeatManager` as used by `QuorumController`): registration of incarnations under
//! broker epochs (`crate::broker_registration`), heartbeats that keep a session alive and
//! unfence a caught-up broker, fencing of expired sessions, and controlled shutdown.

use crate::broker_registration::{BrokerRegistration, RegistrationError};
use crate::cluster_control::BrokerHeartbeatManager;
use crate::image::MetadataImage;
use crate::partition_change::check_broker_epoch;
use strom_protocol::ErrorCode;

use super::{Backend, ControllerError, QuorumController};

/// What the controller answers a heartbeat (Kafka's `BrokerHeartbeatReply`, without
/// `isCaughtUp`, which the caller computes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeartbeatReply {
    pub is_fenced: bool,
    /// The broker asked to shut down and leads nothing any more: it may go.
    pub should_shut_down: bool,
}

fn stale(message: String) -> ControllerError {
    ControllerError::Code {
        code: ErrorCode::StaleBrokerEpoch.code(),
        message,
    }
}

impl QuorumController {
    /// A broker's heartbeat under `broker_epoch` (Kafka's `processBrokerHeartbeat`): refused with
    /// STALE_BROKER_EPOCH unless that is its registered epoch — a heartbeat of an incarnation
    /// that was replaced, or never registered, does not keep any session alive. Otherwise the
    /// session is renewed, and a fenced broker that has replayed the metadata log up to its own
    /// registration (`current_metadata_offset` >= its broker epoch) is unfenced, its leaderless
    /// partitions getting leaders again.
    pub async fn heartbeat(
        &self,
        broker_id: i32,
        broker_epoch: i64,
        current_metadata_offset: i64,
        now_ms: u64,
        unclean_default: bool,
    ) -> Result<HeartbeatReply, ControllerError> {
        self.check_active()?;
        check_broker_epoch(&self.image(), broker_id, broker_epoch).map_err(stale)?;
        self.touch_heartbeat(broker_id, now_ms);
        let image = self.image();
        let Some(b) = image.brokers.get(&broker_id) else {
            return Err(stale(format!(
                "No broker registration found for broker id {broker_id}"
            )));
        };
        if !b.fenced || b.in_controlled_shutdown {
            return Ok(HeartbeatReply {
                is_fenced: b.fenced,
                should_shut_down: false,
            });
        }
        if current_metadata_offset < b.epoch {
            // Kafka: "Still waiting to catch up with cluster metadata."
            return Ok(HeartbeatReply {
                is_fenced: true,
                should_shut_down: false,
            });
        }
        let _op = self.op_lock.lock().await;
        let image = self.image();
        check_broker_epoch(&image, broker_id, broker_epoch).map_err(stale)?;
        let unclean =
            |t: &str| crate::cluster_control::unclean_election_enabled(&image, t, unclean_default);
        let records = crate::cluster_control::unfence_broker(&image, broker_id, unclean);
        self.commit(records).await?;
        tracing::info!(broker_id, broker_epoch, "broker unfenced");
        Ok(HeartbeatReply {
            is_fenced: false,
            should_shut_down: false,
        })
    }

    /// A heartbeat asking to shut down (Kafka's `wantShutDown`): the broker leaves every ISR
    /// and its leaderships move to other ISR members (`begin_controlled_shutdown`), so clients
    /// and followers move on before it stops rather than after its session expires. Once it
    /// leads nothing it is fenced (Kafka's SHUTDOWN_NOW): its session ends, so that the next
    /// incarnation may register at once. Returns Kafka's `shouldShutDown`.
    pub async fn controlled_shutdown(
        &self,
        broker_id: i32,
        broker_epoch: i64,
        now_ms: u64,
        unclean_default: bool,
    ) -> Result<bool, ControllerError> {
        self.check_active()?;
        let _op = self.op_lock.lock().await;
        let image = self.image();
        check_broker_epoch(&image, broker_id, broker_epoch).map_err(stale)?;
        self.touch_heartbeat(broker_id, now_ms);
        let unclean =
            |t: &str| crate::cluster_control::unclean_election_enabled(&image, t, unclean_default);
        let records = crate::cluster_control::begin_controlled_shutdown(&image, broker_id, unclean);
        if !records.is_empty() {
            self.commit(records).await?;
            tracing::info!(
                broker_id,
                "broker in controlled shutdown: leaderships moved"
            );
        }
        let image = self.image();
        if leads_any(&image, broker_id) {
            return Ok(false);
        }
        if image.brokers.get(&broker_id).is_some_and(|b| !b.fenced) {
            let unclean = |t: &str| {
                crate::cluster_control::unclean_election_enabled(&image, t, unclean_default)
            };
            self.commit(crate::cluster_control::fence_broker(
                &image, broker_id, unclean,
            ))
            .await?;
            tracing::info!(broker_id, "broker fenced: controlled shutdown complete");
        }
        Ok(true)
    }

    fn touch_heartbeat(&self, broker_id: i32, now_ms: u64) {
        let mut hb = self.heartbeats.lock();
        if !hb.0 {
            hb.1 = BrokerHeartbeatManager::activate(&self.image(), now_ms);
            hb.0 = true;
        }
        hb.1.touch(broker_id, now_ms);
    }

    /// Run periodically on every node: on the active controller, fences brokers whose session
    /// expired and moves their leaderships (Kafka's `maybeFenceStaleBroker`). A node that just
    /// became active gives every broker a fresh session first.
    pub async fn fence_stale_brokers(
        &self,
        now_ms: u64,
        session_timeout_ms: u64,
        unclean_default: bool,
    ) {
        if !self.is_active() {
            self.heartbeats.lock().0 = false;
            return;
        }
        let stale = {
            let mut hb = self.heartbeats.lock();
            if !hb.0 {
                hb.1 = BrokerHeartbeatManager::activate(&self.image(), now_ms);
                hb.0 = true;
            }
            hb.1.brokers_to_fence(&self.image(), now_ms, session_timeout_ms)
        };
        for broker in stale {
            let _op = self.op_lock.lock().await;
            let image = self.image();
            let unclean = |t: &str| {
                crate::cluster_control::unclean_election_enabled(&image, t, unclean_default)
            };
            let records = crate::cluster_control::fence_broker(&image, broker, unclean);
            match self.commit(records).await {
                Ok(()) => tracing::warn!(
                    broker,
                    "broker fenced: no heartbeat within the session timeout"
                ),
                Err(e) => tracing::warn!(broker, error = %e, "fencing failed"),
            }
        }
    }

    /// Registers a broker incarnation (see `crate::broker_registration`) and returns its broker
    /// epoch. `cluster_id`: the one its log dirs were formatted with, if it says
    /// (INCONSISTENT_CLUSTER_ID when it is not this cluster's). The live-session check uses
    /// the `broker.session.timeout.ms` set with [`Self::set_broker_session_timeout_ms`]. On a
    /// single node the broker and the controller are one process, so a registering incarnation
    /// has no other to wait for.
    pub async fn register_broker(
        &self,
        req: &BrokerRegistration,
        cluster_id: Option<&str>,
        now_ms: u64,
        unclean_default: bool,
    ) -> Result<i64, ControllerError> {
        let _op = self.op_lock.lock().await;
        self.check_active()?;
        let registration_error = |e: RegistrationError| ControllerError::Code {
            code: e.code(),
            message: e.to_string(),
        };
        if let (Some(expected), Some(got)) = (self.cluster_id.get(), cluster_id) {
            if expected != got {
                return Err(registration_error(
                    RegistrationError::InconsistentClusterId {
                        expected: expected.clone(),
                        got: got.to_string(),
                    },
                ));
            }
        }
        let image = self.image();
        let live_session = match self.backend {
            Backend::Local(_) if !self.registration_sessions_checked() => false,
            _ => {
                let mut hb = self.heartbeats.lock();
                if !hb.0 {
                    // A controller that has just become active gives every unfenced broker a
                    // full session before it can be replaced (Kafka's `activate`).
                    hb.1 = BrokerHeartbeatManager::activate(&image, now_ms);
                    hb.0 = true;
                }
                hb.1.has_live_session(
                    &image,
                    req.node_id,
                    now_ms,
                    self.broker_session_timeout_ms(),
                )
            }
        };
        let unclean =
            |t: &str| crate::cluster_control::unclean_election_enabled(&image, t, unclean_default);
        let incarnations = if self.unsafe_trust_restarted_brokers() {
            crate::broker_registration::Incarnations::UnsafeTrusted
        } else {
            crate::broker_registration::Incarnations::Checked
        };
        let records = crate::broker_registration::register_broker(
            &image,
            req,
            live_session,
            incarnations,
            unclean,
        )
            .map_err(|e| {
                tracing::info!(broker = req.node_id, incarnation = %req.incarnation_id, error = %e, "broker registration refused");
                registration_error(e)
            })?;
        let new_incarnation = image
            .brokers
            .get(&req.node_id)
            .is_none_or(|b| b.incarnation_id != req.incarnation_id);
        let n = records.len();
        self.commit(records).await?;
        let epoch = self
            .image()
            .brokers
            .get(&req.node_id)
            .map_or(-1, |b| b.epoch);
        if new_incarnation {
            // The old incarnation's session ends; the new one's starts with its first
            // heartbeat (it is registered fenced).
            self.heartbeats.lock().1.remove(req.node_id);
            tracing::info!(
                broker = req.node_id,
                incarnation = %req.incarnation_id,
                previous_broker_epoch = req.previous_broker_epoch,
                broker_epoch = epoch,
                records = n,
                "registered a new broker incarnation"
            );
        }
        Ok(epoch)
    }
}

/// Whether `broker` leads any partition in `image`.
fn leads_any(image: &MetadataImage, broker: i32) -> bool {
    image
        .topics
        .values()
        .any(|t| t.partitions.values().any(|p| p.leader == broker))
}

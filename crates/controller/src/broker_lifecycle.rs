//! The brokers' lifecycle on the active controller (Kafka's `ClusterControlManager` and
//! `BrokerHeartbeatManager` as used by `QuorumController`): registration, heartbeats that keep a
//! session alive and unfence, fencing of expired sessions, and controlled shutdown.

use crate::cluster_control::BrokerHeartbeatManager;
use crate::image::MetadataImage;
use crate::record::MetadataRecord;
use strom_protocol::ErrorCode;

use super::{ControllerError, QuorumController};

impl QuorumController {
    /// A broker's heartbeat: its session is renewed, and a fenced broker is unfenced (its
    /// leaderless partitions get leaders again).
    pub async fn heartbeat(
        &self,
        broker_id: i32,
        now_ms: u64,
        unclean_default: bool,
    ) -> Result<bool, ControllerError> {
        self.check_active()?;
        self.touch_heartbeat(broker_id, now_ms);
        let image = self.image();
        match image.brokers.get(&broker_id) {
            None => Err(ControllerError::Code {
                code: ErrorCode::StaleBrokerEpoch.code(),
                message: format!("No broker registration found for broker id {broker_id}"),
            }),
            Some(b) if b.fenced => {
                let _op = self.op_lock.lock().await;
                let image = self.image();
                let unclean = |t: &str| {
                    crate::cluster_control::unclean_election_enabled(&image, t, unclean_default)
                };
                let records = crate::cluster_control::unfence_broker(&image, broker_id, unclean);
                self.commit(records).await?;
                tracing::info!(broker_id, "broker unfenced");
                Ok(false)
            }
            Some(_) => Ok(false),
        }
    }

    /// A heartbeat asking to shut down (Kafka's `wantShutDown`): the broker leaves every ISR
    /// and its leaderships move to other ISR members (`begin_controlled_shutdown`), so clients
    /// and followers move on before it stops rather than after its session expires. Returns
    /// Kafka's `shouldShutDown`: whether no partition is led by the broker any more.
    pub async fn controlled_shutdown(
        &self,
        broker_id: i32,
        now_ms: u64,
        unclean_default: bool,
    ) -> Result<bool, ControllerError> {
        self.check_active()?;
        self.touch_heartbeat(broker_id, now_ms);
        let _op = self.op_lock.lock().await;
        let image = self.image();
        if !image.brokers.contains_key(&broker_id) {
            return Err(ControllerError::Code {
                code: ErrorCode::StaleBrokerEpoch.code(),
                message: format!("No broker registration found for broker id {broker_id}"),
            });
        }
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
        Ok(!leads_any(&self.image(), broker_id))
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

    /// Records the broker's endpoint if it changed since the last registration. The broker's
    /// session starts now (Kafka's `BrokerHeartbeatManager.register`), so a broker that dies
    /// before its first heartbeat is still fenced after the session timeout.
    pub async fn register_broker(
        &self,
        node_id: i32,
        host: &str,
        port: i32,
        rack: Option<String>,
        now_ms: u64,
    ) -> Result<(), ControllerError> {
        let _op = self.op_lock.lock().await;
        self.check_active()?;
        let image = self.image();
        let record = MetadataRecord::RegisterBroker {
            node_id,
            host: host.to_string(),
            port,
            rack,
        };
        let unchanged = matches!(image.brokers.get(&node_id), Some(b)
            if MetadataRecord::RegisterBroker { node_id, host: b.host.clone(), port: b.port, rack: b.rack.clone() } == record);
        let mut records = Vec::new();
        if !unchanged {
            records.push(record);
        }
        // A broker back from a controlled shutdown before its session expired is a new
        // incarnation: fenced until its first heartbeat, which unfences it and gives its
        // leaderless partitions leaders again (Kafka registers new incarnations fenced).
        if image
            .brokers
            .get(&node_id)
            .is_some_and(|b| b.in_controlled_shutdown && !b.fenced)
        {
            records.push(MetadataRecord::BrokerRegistrationChange {
                broker_id: node_id,
                fenced: Some(true),
                in_controlled_shutdown: Some(false),
            });
        }
        if !records.is_empty() {
            self.commit(records).await?;
        }
        self.touch_heartbeat(node_id, now_ms);
        Ok(())
    }
}

/// Whether `broker` leads any partition in `image`.
fn leads_any(image: &MetadataImage, broker: i32) -> bool {
    image
        .topics
        .values()
        .any(|t| t.partitions.values().any(|p| p.leader == broker))
}

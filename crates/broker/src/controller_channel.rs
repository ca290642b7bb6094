//! The broker's way to the active controller (Kafka's `BrokerToControllerChannelManager`).
//!
//! On the node that is the active controller every call goes straight to the local
//! [`QuorumController`]. Elsewhere it becomes a Kafka request (BrokerRegistration,
//! AllocateProducerIds, CreateTopics) sent to the active controller's broker listener — in
//! combined mode every controller is also a broker — and admin requests from clients are
//! forwarded there byte for byte. A standby answers NOT_CONTROLLER; callers retry.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use parking_lot::RwLock;
use strom_controller::{
    ControllerError, CreateTopicSpec, MetadataImage, ProducerIdBlock, QuorumController,
};
use strom_protocol::kafka::messages::broker_registration_request::Listener;
use strom_protocol::kafka::messages::create_topics_request::CreatableTopic;
use strom_protocol::kafka::messages::*;
use strom_protocol::kafka::protocol::{Decodable, Encodable, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const CALL_TIMEOUT: Duration = Duration::from_secs(15);
/// How often a call in flight checks that its controller is still the active one.
const LEADER_CHECK: Duration = Duration::from_millis(50);
/// Frames from a controller are small; anything bigger is a broken peer.
const MAX_RESPONSE: usize = 100 * 1024 * 1024;

pub struct ControllerChannel {
    node_id: i32,
    controller: Arc<QuorumController>,
    metadata: Arc<RwLock<Arc<MetadataImage>>>,
    /// One connection to the current active controller, used by one call at a time.
    conn: tokio::sync::Mutex<Option<(i32, TcpStream)>>,
    correlation: std::sync::atomic::AtomicI32,
}

fn not_controller(leader: Option<i32>) -> ControllerError {
    ControllerError::NotController { leader }
}

impl ControllerChannel {
    pub fn new(
        node_id: i32,
        controller: Arc<QuorumController>,
        metadata: Arc<RwLock<Arc<MetadataImage>>>,
    ) -> Self {
        Self {
            node_id,
            controller,
            metadata,
            conn: tokio::sync::Mutex::new(None),
            correlation: std::sync::atomic::AtomicI32::new(1),
        }
    }

    /// Sends a request frame payload (header and body) to the active controller and returns
    /// the response payload.
    pub async fn forward_raw(&self, payload: &[u8]) -> Result<Bytes, ControllerError> {
        // One call at a time on the connection: the controller is looked up after the wait, so
        // a call queued behind one to a controller that has since lost its place goes to the
        // new one.
        let mut guard = self.conn.lock().await;
        let leader = self.controller.active_controller();
        let Some(leader) = leader.filter(|&l| l != self.node_id) else {
            return Err(not_controller(leader));
        };
        let addr = {
            let image = self.metadata.read();
            let b = image
                .brokers
                .get(&leader)
                .ok_or_else(|| not_controller(Some(leader)))?;
            format!("{}:{}", b.host, b.port)
        };
        if guard.as_ref().is_some_and(|(id, _)| *id != leader) {
            *guard = None;
        }
        let call = async {
            if guard.is_none() {
                let s = TcpStream::connect(&addr).await?;
                s.set_nodelay(true)?;
                *guard = Some((leader, s));
            }
            let (_, s) = guard.as_mut().expect("connected above");
            let mut frame = BytesMut::with_capacity(4 + payload.len());
            frame.put_i32(payload.len() as i32);
            frame.put_slice(payload);
            s.write_all(&frame).await?;
            let size = s.read_i32().await?;
            if size < 0 || size as usize > MAX_RESPONSE {
                return Err(std::io::Error::other(format!("bad response size {size}")));
            }
            let mut buf = vec![0u8; size as usize];
            s.read_exact(&mut buf).await?;
            Ok::<_, std::io::Error>(Bytes::from(buf))
        };
        // A controller that stops answering without closing the connection (SIGSTOP, a cut
        // link) is voted out by the quorum within the election timeout; as Kafka's
        // NodeToControllerChannelManager does on a controller change, give up on it then
        // rather than at the call timeout, so that AlterPartition and heartbeats reach the new
        // controller while the old one is still silent.
        let deposed = async {
            loop {
                tokio::time::sleep(LEADER_CHECK).await;
                if self.controller.active_controller() != Some(leader) {
                    return;
                }
            }
        };
        let result = tokio::select! {
            r = tokio::time::timeout(CALL_TIMEOUT, call) => r.ok(),
            () = deposed => None,
        };
        match result {
            Some(Ok(b)) => Ok(b),
            Some(Err(e)) => {
                *guard = None;
                tracing::debug!(leader, %addr, error = %e, "controller call failed");
                Err(not_controller(Some(leader)))
            }
            None => {
                // The request may be half-written or its answer still due: never reuse this
                // connection.
                *guard = None;
                Err(not_controller(self.controller.active_controller()))
            }
        }
    }

    /// One typed request to the active controller.
    async fn call<Req: Encodable, Resp: Decodable>(
        &self,
        api: ApiKey,
        version: i16,
        req: &Req,
    ) -> Result<Resp, ControllerError> {
        let corr = self
            .correlation
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut buf = BytesMut::new();
        let header = RequestHeader::default()
            .with_request_api_key(api as i16)
            .with_request_api_version(version)
            .with_correlation_id(corr)
            .with_client_id(Some(StrBytes::from_string(format!(
                "strom-broker-{}",
                self.node_id
            ))));
        let io = |e: &dyn std::fmt::Display| ControllerError::Io(e.to_string());
        header
            .encode(&mut buf, api.request_header_version(version))
            .map_err(|e| io(&e))?;
        req.encode(&mut buf, version).map_err(|e| io(&e))?;
        let mut resp = self.forward_raw(&buf).await?;
        let h = ResponseHeader::decode(&mut resp, api.response_header_version(version))
            .map_err(|e| io(&e))?;
        if h.correlation_id != corr {
            return Err(ControllerError::Io("correlation id mismatch".into()));
        }
        Resp::decode(&mut resp, version).map_err(|e| io(&e))
    }

    /// Registers this broker's endpoint with the active controller.
    pub async fn register_broker(
        &self,
        host: &str,
        port: i32,
        rack: Option<String>,
    ) -> Result<(), ControllerError> {
        if self.controller.is_active() {
            return self
                .controller
                .register_broker(self.node_id, host, port, rack, crate::monotonic_ms())
                .await;
        }
        let req = BrokerRegistrationRequest::default()
            .with_broker_id(BrokerId(self.node_id))
            .with_incarnation_id(uuid::Uuid::new_v4())
            .with_rack(rack.map(StrBytes::from_string))
            .with_listeners(vec![Listener::default()
                .with_name(StrBytes::from_static_str("PLAINTEXT"))
                .with_host(StrBytes::from_string(host.to_string()))
                .with_port(port as u16)]);
        let resp: BrokerRegistrationResponse =
            self.call(ApiKey::BrokerRegistration, 0, &req).await?;
        code_to_result(resp.error_code, self.controller.active_controller())
    }

    /// A block of producer ids from the active controller.
    pub async fn allocate_producer_ids(&self) -> Result<ProducerIdBlock, ControllerError> {
        if self.controller.is_active() {
            return self.controller.allocate_producer_ids(self.node_id).await;
        }
        let req = AllocateProducerIdsRequest::default().with_broker_id(BrokerId(self.node_id));
        let resp: AllocateProducerIdsResponse =
            self.call(ApiKey::AllocateProducerIds, 0, &req).await?;
        code_to_result(resp.error_code, self.controller.active_controller())?;
        Ok(ProducerIdBlock {
            start: resp.producer_id_start.0,
            len: resp.producer_id_len,
        })
    }

    /// Topic auto-creation (Metadata, Produce): through the active controller, errors ignored
    /// as Kafka's AutoTopicCreationManager does (the client retries its metadata).
    pub async fn create_topics(&self, specs: &[CreateTopicSpec]) {
        if self.controller.is_active() {
            for (spec, r) in specs
                .iter()
                .zip(self.controller.create_topics(specs, false).await)
            {
                match r {
                    Ok(_) => tracing::info!(topic = %spec.name, "auto-created topic"),
                    Err(e) => tracing::debug!(topic = %spec.name, error = %e, "auto-create failed"),
                }
            }
            return;
        }
        let topics = specs
            .iter()
            .map(|s| {
                CreatableTopic::default()
                    .with_name(TopicName(StrBytes::from_string(s.name.clone())))
                    .with_num_partitions(s.num_partitions)
                    .with_replication_factor(s.replication_factor)
            })
            .collect();
        let req = CreateTopicsRequest::default()
            .with_topics(topics)
            .with_timeout_ms(10_000);
        match self
            .call::<_, CreateTopicsResponse>(ApiKey::CreateTopics, 5, &req)
            .await
        {
            Ok(resp) => {
                for t in resp.topics {
                    tracing::debug!(topic = %t.name.0.as_str(), code = t.error_code, "auto-create through the controller");
                }
            }
            Err(e) => tracing::debug!(error = %e, "auto-create through the controller failed"),
        }
        // The topic reaches this broker when the controller's records are replayed here.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
        while tokio::time::Instant::now() < deadline {
            let image = self.metadata.read().clone();
            if specs.iter().all(|s| image.topic(&s.name).is_some()) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn code_to_result(code: i16, leader: Option<i32>) -> Result<(), ControllerError> {
    match code {
        0 => Ok(()),
        c if c == strom_protocol::ErrorCode::NotController.code() => Err(not_controller(leader)),
        other => Err(ControllerError::Io(format!(
            "controller answered error {other}"
        ))),
    }
}

impl ControllerChannel {
    /// AlterPartition for one partition (Kafka sends them batched; one is enough here).
    pub async fn alter_partition(
        &self,
        p: &crate::replication::AlterPartitionProposal,
    ) -> Result<(), ControllerError> {
        if self.controller.is_active() {
            return self
                .controller
                .alter_partition(
                    self.node_id,
                    p.topic_id,
                    p.partition,
                    p.leader_epoch,
                    p.partition_epoch,
                    p.new_isr.clone(),
                )
                .await;
        }
        use strom_protocol::kafka::messages::alter_partition_request::{PartitionData, TopicData};
        let req = AlterPartitionRequest::default()
            .with_broker_id(BrokerId(self.node_id))
            .with_topics(vec![TopicData::default()
                .with_topic_id(p.topic_id)
                .with_partitions(vec![PartitionData::default()
                    .with_partition_index(p.partition)
                    .with_leader_epoch(p.leader_epoch)
                    .with_partition_epoch(p.partition_epoch)
                    .with_new_isr(
                        p.new_isr.iter().map(|&b| BrokerId(b)).collect(),
                    )])]);
        let resp: AlterPartitionResponse = self.call(ApiKey::AlterPartition, 2, &req).await?;
        code_to_result(resp.error_code, self.controller.active_controller())?;
        let code = resp
            .topics
            .first()
            .and_then(|t| t.partitions.first())
            .map_or(0, |p| p.error_code);
        code_to_result(code, self.controller.active_controller())
    }

    /// AssignReplicasToDirs (KIP-858): which log dir this broker's replicas are in, Kafka's
    /// `DirectoryId.LOST` for offline ones (see `directory_assignments`).
    pub async fn assign_replicas_to_dirs(
        &self,
        dirs: &[strom_controller::log_dirs::DirectoryAssignment],
        unclean_default: bool,
    ) -> Result<(), ControllerError> {
        if self.controller.is_active() {
            return self
                .controller
                .assign_replicas_to_dirs(self.node_id, dirs, unclean_default)
                .await
                .map(|_| ());
        }
        let req = crate::directory_assignments::request(self.node_id, dirs);
        let resp: AssignReplicasToDirsResponse =
            self.call(ApiKey::AssignReplicasToDirs, 0, &req).await?;
        code_to_result(resp.error_code, self.controller.active_controller())
    }

    /// A heartbeat to the active controller, which keeps this broker unfenced.
    pub async fn heartbeat(
        &self,
        now_ms: u64,
        unclean_default: bool,
    ) -> Result<(), ControllerError> {
        if self.controller.is_active() {
            return self
                .controller
                .heartbeat(self.node_id, now_ms, unclean_default)
                .await
                .map(|_| ());
        }
        let req = BrokerHeartbeatRequest::default().with_broker_id(BrokerId(self.node_id));
        let resp: BrokerHeartbeatResponse = self.call(ApiKey::BrokerHeartbeat, 0, &req).await?;
        code_to_result(resp.error_code, self.controller.active_controller())
    }

    /// A heartbeat with `wantShutDown`: asks the active controller to move this broker's
    /// leaderships away; whether it may shut down now (`shouldShutDown`).
    pub async fn controlled_shutdown(
        &self,
        now_ms: u64,
        unclean_default: bool,
    ) -> Result<bool, ControllerError> {
        if self.controller.is_active() {
            return self
                .controller
                .controlled_shutdown(self.node_id, now_ms, unclean_default)
                .await;
        }
        let req = BrokerHeartbeatRequest::default()
            .with_broker_id(BrokerId(self.node_id))
            .with_want_shut_down(true);
        let resp: BrokerHeartbeatResponse = self.call(ApiKey::BrokerHeartbeat, 0, &req).await?;
        code_to_result(resp.error_code, self.controller.active_controller())?;
        Ok(resp.should_shut_down)
    }
}

/// Frames the payload of a forwarded response for the client connection.
pub fn frame(payload: Bytes) -> BytesMut {
    let mut out = BytesMut::with_capacity(4 + payload.remaining());
    out.put_i32(payload.len() as i32);
    out.put_slice(&payload);
    out
}

//! The broker's way to the active controller (Kafka's `BrokerToControllerChannelManager`).
//!
//! On the node that is the active controller every call goes straight to the local
//! [`QuorumController`]. Elsewhere it becomes a Kafka request (BrokerRegistration,
//! BrokerHeartbeat, AlterPartition, AllocateProducerIds, CreateTopics) sent to the active
//! controller's controller listener — the address its voter entry in the quorum names, the port
//! that also carries Raft — and admin requests from clients are forwarded there in an Envelope
//! carrying the client's principal (KIP-590). A standby answers NOT_CONTROLLER; callers retry.

use std::collections::BTreeMap;
use std::net::SocketAddr;
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
use strom_protocol::kafka::protocol::{Request, StrBytes};

use crate::broker_lifecycle::BrokerLifecycleManager;
use crate::config::BrokerConfig;
use crate::inter_broker::{Channel, InterBrokerClient};
use crate::request_context::{serialize_principal, RequestContext};

const CALL_TIMEOUT: Duration = Duration::from_secs(15);
/// How often a call in flight checks that its controller is still the active one.
const LEADER_CHECK: Duration = Duration::from_millis(50);

pub struct ControllerChannel {
    node_id: i32,
    controller: Arc<QuorumController>,
    metadata: Arc<RwLock<Arc<MetadataImage>>>,
    /// Every voter's controller listener.
    controller_addrs: BTreeMap<i32, SocketAddr>,
    /// The inter-broker listener's name and security protocol, for BrokerRegistration.
    listener_name: String,
    security_protocol: i16,
    /// The broker's one client to other nodes, shared with the replica fetchers. Each kind of
    /// controller request has its own [`Channel`] there, so a heartbeat never waits behind a
    /// forwarded CreateTopics (see [`channel_of`]).
    client: Arc<InterBrokerClient>,
    /// This incarnation and its broker epoch, carried by every lifecycle request.
    lifecycle: Arc<BrokerLifecycleManager>,
    /// The cluster id of this broker's log dirs, sent with its registration.
    cluster_id: Option<String>,
    /// `unclean.leader.election.enable`, for the ISR removal a registration may cause.
    unclean_default: bool,
}

/// Kafka keeps a separate channel to the controller for heartbeats (`BrokerLifecycleManager`),
/// for AlterPartition and for forwarding; so does Strom, so that a slow admin request does not
/// hold back the heartbeats that keep this broker unfenced.
fn channel_of(api_key: i16) -> Channel {
    match ApiKey::try_from(api_key) {
        Ok(ApiKey::BrokerRegistration | ApiKey::BrokerHeartbeat) => Channel::ControllerLifecycle,
        Ok(ApiKey::AlterPartition) => Channel::ControllerAlterPartition,
        _ => Channel::ControllerForwarding,
    }
}

fn not_controller(leader: Option<i32>) -> ControllerError {
    ControllerError::NotController { leader }
}

impl ControllerChannel {
    /// A channel for a node without a controller quorum (every call is local) or a test.
    pub fn new(
        node_id: i32,
        controller: Arc<QuorumController>,
        metadata: Arc<RwLock<Arc<MetadataImage>>>,
    ) -> Self {
        Self {
            node_id,
            controller,
            metadata,
            controller_addrs: BTreeMap::new(),
            listener_name: "PLAINTEXT".into(),
            security_protocol: crate::listeners::SecurityProtocol::Plaintext.id(),
            client: InterBrokerClient::new(node_id),
            lifecycle: Arc::new(BrokerLifecycleManager::new(-1)),
            cluster_id: None,
            unclean_default: false,
        }
    }

    /// This incarnation, its previous and current broker epochs.
    pub fn lifecycle(&self) -> &Arc<BrokerLifecycleManager> {
        &self.lifecycle
    }

    /// The broker's channel: the voters' controller listeners from the quorum, the
    /// inter-broker listener to register, the broker's inter-broker client, its lifecycle and
    /// the cluster id of its log dirs.
    pub fn for_broker(
        config: &BrokerConfig,
        controller: Arc<QuorumController>,
        metadata: Arc<RwLock<Arc<MetadataImage>>>,
        client: Arc<InterBrokerClient>,
        lifecycle: Arc<BrokerLifecycleManager>,
        cluster_id: String,
    ) -> Self {
        let inter_broker = config.listeners.inter_broker_advertised();
        Self {
            controller_addrs: config.controller_quorum.clone().unwrap_or_default(),
            listener_name: inter_broker.listener_name.clone(),
            security_protocol: inter_broker.security_protocol.id(),
            client,
            lifecycle,
            cluster_id: Some(cluster_id),
            unclean_default: config.unclean_leader_election_enable,
            ..Self::new(config.node_id, controller, metadata)
        }
    }

    /// One request to the active controller, on the channel for its kind.
    async fn call<R: Request>(
        &self,
        version: i16,
        req: &R,
    ) -> Result<R::Response, ControllerError> {
        let leader = self.controller.active_controller();
        let Some(leader) = leader.filter(|&l| l != self.node_id) else {
            return Err(not_controller(leader));
        };
        let addr = self
            .controller_addrs
            .get(&leader)
            .ok_or_else(|| not_controller(Some(leader)))?
            .to_string();
        let channel = channel_of(R::KEY);
        let call = async {
            let conn = self
                .client
                .connection(leader, &addr, channel, CALL_TIMEOUT)
                .await?;
            let r = conn.send(req, version).await;
            if r.is_err() {
                // Timed out or broken: its state is unknown, nothing more goes over it.
                self.client
                    .disconnect(leader, channel, &conn, "controller call failed");
            }
            r
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
        tokio::select! {
            r = call => r.map_err(|e| {
                tracing::debug!(leader, %addr, error = %e, "controller call failed");
                not_controller(Some(leader))
            }),
            () = deposed => {
                self.client.close_channel(leader, channel, "controller deposed");
                Err(not_controller(self.controller.active_controller()))
            }
        }
    }

    /// Forwards a client's admin request (the frame payload `request`, header and body) to the
    /// active controller in an Envelope carrying the client's principal and address, and
    /// returns the embedded response payload. An envelope-level error (the controller moved,
    /// or refused the envelope) is NOT_CONTROLLER for the caller.
    pub async fn forward(
        &self,
        ctx: &RequestContext,
        request: &Bytes,
    ) -> Result<Bytes, ControllerError> {
        let address = match ctx.client_address.ip() {
            std::net::IpAddr::V4(a) => Bytes::copy_from_slice(&a.octets()),
            std::net::IpAddr::V6(a) => Bytes::copy_from_slice(&a.octets()),
        };
        let req = EnvelopeRequest::default()
            .with_request_data(request.clone())
            .with_request_principal(Some(serialize_principal(&ctx.principal)))
            .with_client_host_address(address);
        let resp: EnvelopeResponse = self.call(0, &req).await?;
        match (resp.error_code, resp.response_data) {
            (0, Some(data)) => Ok(data),
            (code, _) => {
                tracing::debug!(code, "forwarded request refused by the controller");
                Err(not_controller(self.controller.active_controller()))
            }
        }
    }

    /// Registers this incarnation (with its endpoint and previous broker epoch) with the active
    /// controller, and remembers and returns the broker epoch it got.
    pub async fn register_broker(
        &self,
        host: &str,
        port: i32,
        rack: Option<String>,
    ) -> Result<i64, ControllerError> {
        let epoch = if self.controller.is_active() {
            let req = strom_controller::BrokerRegistration {
                node_id: self.node_id,
                incarnation_id: self.lifecycle.incarnation_id(),
                host: host.to_string(),
                port,
                rack,
                previous_broker_epoch: self.lifecycle.previous_broker_epoch(),
            };
            self.controller
                .register_broker(
                    &req,
                    self.cluster_id.as_deref(),
                    crate::monotonic_ms(),
                    self.unclean_default,
                )
                .await?
        } else {
            let req = BrokerRegistrationRequest::default()
                .with_broker_id(BrokerId(self.node_id))
                .with_cluster_id(StrBytes::from_string(
                    self.cluster_id.clone().unwrap_or_default(),
                ))
                .with_incarnation_id(self.lifecycle.incarnation_id())
                .with_rack(rack.map(StrBytes::from_string))
                .with_previous_broker_epoch(self.lifecycle.previous_broker_epoch())
                .with_listeners(vec![Listener::default()
                    .with_name(StrBytes::from_string(self.listener_name.clone()))
                    .with_host(StrBytes::from_string(host.to_string()))
                    .with_port(port as u16)
                    .with_security_protocol(self.security_protocol)]);
            // v3: PreviousBrokerEpoch (KIP-966).
            let resp: BrokerRegistrationResponse = self.call(3, &req).await?;
            code_to_result(resp.error_code, self.controller.active_controller())?;
            resp.broker_epoch
        };
        self.lifecycle.set_broker_epoch(epoch);
        Ok(epoch)
    }

    /// A block of producer ids from the active controller.
    pub async fn allocate_producer_ids(&self) -> Result<ProducerIdBlock, ControllerError> {
        if self.controller.is_active() {
            return self.controller.allocate_producer_ids(self.node_id).await;
        }
        let req = AllocateProducerIdsRequest::default().with_broker_id(BrokerId(self.node_id));
        let resp: AllocateProducerIdsResponse = self.call(0, &req).await?;
        code_to_result(resp.error_code, self.controller.active_controller())?;
        Ok(ProducerIdBlock {
            start: resp.producer_id_start.0,
            len: resp.producer_id_len,
        })
    }

    /// Topic auto-creation (Metadata, FindCoordinator): through the active controller, errors logged
    /// as Kafka's AutoTopicCreationManager does (the client retries its metadata).
    pub async fn create_topics(&self, specs: &[CreateTopicSpec]) {
        if self.controller.is_active() {
            for (spec, r) in specs
                .iter()
                .zip(self.controller.create_topics(specs, false).await)
            {
                match r {
                    Ok(_) => tracing::info!(topic = %spec.name, "auto-created topic"),
                    Err(e) => log_auto_create_failure(&spec.name, e.code(), &e.to_string()),
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
                    .with_configs(
                        s.configs
                            .iter()
                            .map(|(k, v)| {
                                create_topics_request::CreatableTopicConfig::default()
                                    .with_name(StrBytes::from_string(k.clone()))
                                    .with_value(v.clone().map(StrBytes::from_string))
                            })
                            .collect(),
                    )
            })
            .collect();
        let req = CreateTopicsRequest::default()
            .with_topics(topics)
            .with_timeout_ms(10_000);
        match self.call(5, &req).await {
            Ok(resp) => {
                for t in resp.topics {
                    let message = t.error_message.as_deref().unwrap_or_default();
                    log_auto_create_failure(t.name.0.as_str(), t.error_code, message);
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

/// A topic that could not be auto-created is logged as Kafka's `AutoTopicCreationManager`
/// does (a warning: the client only sees the topic missing); losing a race to another creator
/// is no failure.
fn log_auto_create_failure(topic: &str, code: i16, message: &str) {
    use strom_protocol::ErrorCode;
    if code == 0 || code == ErrorCode::TopicAlreadyExists.code() {
        return;
    }
    tracing::warn!(topic, code, message, "auto topic creation failed");
}

fn code_to_result(code: i16, leader: Option<i32>) -> Result<(), ControllerError> {
    match code {
        0 => Ok(()),
        c if c == strom_protocol::ErrorCode::NotController.code() => Err(not_controller(leader)),
        other => Err(ControllerError::Code {
            code: other,
            message: format!(
                "controller answered {}",
                strom_protocol::ErrorCode::try_from_code(other)
                    .map_or_else(|| other.to_string(), |e| format!("{e:?}"))
            ),
        }),
    }
}

impl ControllerChannel {
    /// AlterPartition for one partition (Kafka sends them batched; one is enough here).
    pub async fn alter_partition(
        &self,
        p: &crate::replication::AlterPartitionProposal,
    ) -> Result<(), ControllerError> {
        let broker_epoch = self.lifecycle.broker_epoch();
        if self.controller.is_active() {
            return self
                .controller
                .alter_partition(
                    self.node_id,
                    broker_epoch,
                    p.topic_id,
                    p.partition,
                    p.leader_epoch,
                    p.partition_epoch,
                    &p.new_isr_with_epochs(),
                )
                .await;
        }
        use strom_protocol::kafka::messages::alter_partition_request::{
            BrokerState, PartitionData, TopicData,
        };
        let req = AlterPartitionRequest::default()
            .with_broker_id(BrokerId(self.node_id))
            .with_broker_epoch(broker_epoch)
            .with_topics(vec![TopicData::default()
                .with_topic_id(p.topic_id)
                .with_partitions(vec![PartitionData::default()
                    .with_partition_index(p.partition)
                    .with_leader_epoch(p.leader_epoch)
                    .with_partition_epoch(p.partition_epoch)
                    .with_new_isr_with_epochs(
                        p.new_isr_with_epochs()
                            .iter()
                            .map(|b| {
                                BrokerState::default()
                                    .with_broker_id(BrokerId(b.broker_id))
                                    .with_broker_epoch(b.broker_epoch)
                            })
                            .collect(),
                    )])]);
        // v3: the new ISR with the broker epoch of each member (KIP-903).
        let resp: AlterPartitionResponse = self.call(3, &req).await?;
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
        let resp: AssignReplicasToDirsResponse = self.call(0, &req).await?;
        code_to_result(resp.error_code, self.controller.active_controller())
    }

    /// A heartbeat to the active controller under this incarnation's broker epoch, which keeps
    /// this broker's session alive and unfences it once it has replayed its registration.
    /// Carries how far this node has replayed the metadata log; returns whether the active
    /// controller deems it caught up (the active controller itself is once the quorum has
    /// acknowledged it).
    pub async fn heartbeat(
        &self,
        now_ms: u64,
        unclean_default: bool,
    ) -> Result<bool, ControllerError> {
        let broker_epoch = self.lifecycle.broker_epoch();
        if self.controller.is_active() {
            return self
                .controller
                .heartbeat(
                    self.node_id,
                    broker_epoch,
                    self.controller.applied_offset(),
                    now_ms,
                    unclean_default,
                )
                .await
                .map(|_| self.controller.is_confirmed_active());
        }
        let req = BrokerHeartbeatRequest::default()
            .with_broker_id(BrokerId(self.node_id))
            .with_broker_epoch(broker_epoch)
            .with_current_metadata_offset(self.controller.applied_offset());
        let resp: BrokerHeartbeatResponse = self.call(0, &req).await?;
        code_to_result(resp.error_code, self.controller.active_controller())?;
        Ok(resp.is_caught_up)
    }

    /// A heartbeat with `wantShutDown`: asks the active controller to move this broker's
    /// leaderships away; whether it may shut down now (`shouldShutDown`).
    pub async fn controlled_shutdown(
        &self,
        now_ms: u64,
        unclean_default: bool,
    ) -> Result<bool, ControllerError> {
        let broker_epoch = self.lifecycle.broker_epoch();
        if self.controller.is_active() {
            return self
                .controller
                .controlled_shutdown(self.node_id, broker_epoch, now_ms, unclean_default)
                .await;
        }
        let req = BrokerHeartbeatRequest::default()
            .with_broker_id(BrokerId(self.node_id))
            .with_broker_epoch(broker_epoch)
            .with_current_metadata_offset(self.controller.applied_offset())
            .with_want_shut_down(true);
        let resp: BrokerHeartbeatResponse = self.call(0, &req).await?;
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

//! Start-up, the accept loop, background chores (retention, checkpoints) and clean shutdown.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use strom_controller::controller::TopicDefaults;
use strom_controller::{ControllerError, MetadataImage, QuorumController};
use strom_raft::QuorumConfig;
use strom_server_common::authorizer::AuthHelper;
use strom_storage::StorageError;
use thiserror::Error;
use tokio::net::TcpListener;
use tokio::sync::watch;
use uuid::Uuid;

use crate::config::BrokerConfig;
use crate::connection::{ConnectionInfo, ConnectionQuotas, Dispatch, InFlight};
use crate::controller_channel::ControllerChannel;
use crate::controller_listener::ControllerDispatch;
use crate::inter_broker::InterBrokerClient;
use crate::listeners::{EndPoint, ListenerScope};
use crate::metadata_loader::{ImageHolder, MetadataLoader};
use crate::producer_ids::ProducerIdManager;
use crate::replica_manager::{ReplicaManager, Replication};
use crate::replication::{
    AlterPartitionProposal, AlterPartitionSender, FetcherConfig, FetcherManager,
};
use crate::request_context::ListenerInfo;

#[derive(Debug, Error)]
pub enum ServerError {
    #[error("data directory {path} is not usable: {source}")]
    DataDir {
        path: String,
        source: std::io::Error,
    },
    #[error("data directory {0} is in use by another strom process")]
    DataDirLocked(String),
    #[error("{0}")]
    MetaProperties(String),
    #[error("cannot resolve listener address {0}")]
    Resolve(String),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("metadata: {0}")]
    Controller(#[from] ControllerError),
    #[error("storage: {0}")]
    Storage(#[from] StorageError),
}

/// Strom's test-only switch that turns off the checks of restarted brokers (see
/// `strom_controller::broker_registration::Incarnations`), so that the nemesis can show the
/// loss they prevent.
pub const UNSAFE_TRUST_RESTARTED_BROKERS: &str = "strom.unsafe.trust.restarted.brokers";

/// Everything a request handler needs, shared by all connections.
pub struct Broker {
    pub config: Arc<BrokerConfig>,
    pub cluster_id: String,
    pub controller: Arc<QuorumController>,
    pub replica_manager: Arc<ReplicaManager>,
    pub producer_ids: Arc<ProducerIdManager>,
    pub channel: Arc<ControllerChannel>,
    metadata: Arc<RwLock<Arc<MetadataImage>>>,
    pub metadata_loader: Arc<MetadataLoader>,
    /// This broker's connections to other nodes (controller channel, replica fetchers).
    pub inter_broker: Arc<InterBrokerClient>,
    /// The group coordinator: shards for the `__consumer_offsets` partitions this broker leads.
    pub group_coordinator: Arc<strom_group_coordinator::GroupCoordinatorService>,
    /// The transaction coordinator: shards for the `__transaction_state` partitions this
    /// broker leads.
    pub transaction_coordinator: Arc<strom_transaction_coordinator::TransactionCoordinatorService>,
    /// KIP-890: asks transaction coordinators about the partitions produces open transactions
    /// in.
    pub add_partitions_to_txn_manager: Arc<crate::txn_verification::AddPartitionsToTxnManager>,
    /// Requests being handled, so that shutdown closes the logs only after the last of them
    /// (no append after the clean-shutdown marker).
    pub(crate) in_flight: Arc<InFlight>,
    /// `queued.max.requests` and `queued.max.request.bytes` across the broker listeners'
    /// connections (the controller listener has its own, as Kafka's controller `SocketServer`).
    pub(crate) request_queue: crate::request_queue::RequestQueue,
    /// The configured authorizer, asked by every handler that Kafka's asks (the broker-to-broker
    /// and controller APIs need CLUSTER_ACTION); allows everything unless one is configured.
    pub auth: AuthHelper,
}

/// What a server is started with beyond its configuration: the pluggable parts Kafka loads by
/// class name (`authorizer.class.name`).
#[derive(Clone, Default)]
pub struct Plugins {
    /// Asked on every request that Kafka authorizes; [`strom_server_common::authorizer::AllowAll`]
    /// (Kafka with no authorizer configured) by default.
    pub auth: AuthHelper,
}

impl Broker {
    /// The node id Metadata and DescribeCluster name as controller: the active one in a
    /// quorum (-1 while none is elected), this node on a single node.
    pub fn controller_id(&self) -> i32 {
        if self.config.controller_quorum.is_none() {
            return self.config.node_id;
        }
        self.controller.active_controller().unwrap_or(-1)
    }

    /// Topic auto-creation, through the active controller.
    pub async fn create_topics(&self, specs: &[strom_controller::CreateTopicSpec]) {
        self.channel.create_topics(specs).await;
        // The caller answers from `image()` next: on the active controller's node the records
        // are replayed here already, but applied only once the loader has published them.
        self.sync_metadata().await;
    }

    /// The broker's current metadata image (lock-free for practical purposes: a read lock held
    /// only to clone an `Arc`).
    pub fn image(&self) -> Arc<MetadataImage> {
        self.metadata.read().clone()
    }

    /// Waits until the metadata replayed on this node so far is applied here (hosted
    /// partitions and `image()`): read-your-writes after a local controller change.
    pub async fn sync_metadata(&self) {
        self.metadata_loader.caught_up().await
    }
}

pub struct Server {
    broker: Arc<Broker>,
    /// The broker-scope listeners, accepted from in [`Server::run`].
    listeners: Vec<(ListenerInfo, TcpListener)>,
    /// The controller listener's address, served from start-up on (Raft must be reachable
    /// while the logs are still being opened).
    controller_addr: Option<SocketAddr>,
    stop_tx: watch::Sender<bool>,
    stop_rx: watch::Receiver<bool>,
    /// Stops the controller listener, after the quorum (Raft is served to the end).
    controller_stop: watch::Sender<bool>,
    _dir_locks: Vec<std::fs::File>,
}

/// Numbers connections for their Kafka-style connection ids.
static CONNECTION_INDEX: AtomicU64 = AtomicU64::new(0);

fn next_connection_index() -> u64 {
    CONNECTION_INDEX.fetch_add(1, Ordering::Relaxed)
}

fn listener_info(config: &BrokerConfig, e: &EndPoint) -> ListenerInfo {
    ListenerInfo {
        name: Arc::from(e.listener_name.as_str()),
        security_protocol: e.security_protocol,
        scope: config.listeners.scope_of(&e.listener_name),
    }
}

async fn bind(e: &EndPoint) -> Result<TcpListener, ServerError> {
    let addr = e.bind_address();
    let sock: SocketAddr = std::net::ToSocketAddrs::to_socket_addrs(&addr)
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| ServerError::Resolve(addr.clone()))?;
    TcpListener::bind(sock)
        .await
        .map_err(|source| ServerError::Bind { addr: sock, source })
}

impl Server {
    pub async fn start(config: BrokerConfig) -> Result<Self, ServerError> {
        Self::start_with(config, Plugins::default()).await
    }

    /// [`Server::start`] with pluggable parts other than the defaults.
    pub async fn start_with(
        mut config: BrokerConfig,
        plugins: Plugins,
    ) -> Result<Self, ServerError> {
        crate::log_manager::raise_open_files_limit();
        // Every log dir and the metadata log dir are locked and formatted (Kafka's
        // `metadata.log.dir` defaults to the first log dir).
        let dirs = crate::meta_properties::dirs_of(&config);
        // Checked before anything creates them: only a node none of whose dirs exists is
        // formatted here (see `meta_properties`).
        let quorum = config.controller_quorum.clone();
        let cluster_id =
            crate::meta_properties::load_and_verify(&dirs, config.node_id, move || {
                new_cluster_id(quorum.as_ref())
            })?;
        let locks = crate::log_manager::lock_dirs(&dirs)?;

        // Bind every listener first, so a port in use fails start-up before anything else.
        let (stop_tx, stop_rx) = watch::channel(false);
        let mut listeners = Vec::new();
        let mut controller = None;
        let endpoints = config.listeners.listeners.clone();
        for e in &endpoints {
            let l = bind(e).await?;
            let local = l.local_addr().map_err(|source| ServerError::Bind {
                addr: l
                    .local_addr()
                    .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0))),
                source,
            })?;
            // A port of 0 is the bound port, for clients and the quorum alike.
            for a in config.listeners.advertised.iter_mut() {
                if a.listener_name == e.listener_name && a.port == 0 {
                    a.port = local.port();
                }
            }
            let info = listener_info(&config, e);
            tracing::info!(listener = %e, bound = %local, scope = ?info.scope, "listening");
            if info.scope == ListenerScope::Controller {
                if controller.is_none() {
                    controller = Some((info, l, local));
                }
            } else {
                listeners.push((info, l));
            }
        }
        if config.advertised_port == 0 {
            config.advertised_port = config.listeners.inter_broker_advertised().port as i32;
        }
        let controller_addr = controller.as_ref().map(|(_, _, a)| *a);
        if let Some(a) = controller_addr {
            config.controller_listen = Some(a);
        }
        let config = Arc::new(config);
        let (broker_tx, broker_rx) = watch::channel::<Option<Arc<Broker>>>(None);
        let (controller_stop, controller_stop_rx) = watch::channel(false);
        let in_flight = Arc::new(InFlight::default());
        // The controller listener is served from here on: Raft must flow while the logs are
        // still being opened. It keeps its own connection quotas, as Kafka's controller
        // `SocketServer` does.
        let raft_service = match controller {
            Some((info, l, _)) => {
                let (service, slot) = strom_raft::raft_service();
                let dispatch = Arc::new(ControllerDispatch {
                    config: config.clone(),
                    in_flight: in_flight.clone(),
                    request_queue: crate::request_queue::RequestQueue::new(&config.limits),
                    raft: service,
                    broker: broker_rx,
                    broker_stop: stop_rx.clone(),
                    auth: plugins.auth.clone(),
                });
                tokio::spawn(accept_loop(
                    dispatch,
                    Arc::new(ConnectionQuotas::new(&config)),
                    info,
                    l,
                    controller_stop_rx.clone(),
                    controller_stop_rx,
                ));
                Some(slot)
            }
            None => None,
        };

        let defaults = TopicDefaults {
            num_partitions: config.num_partitions,
            replication_factor: config.default_replication_factor,
        };
        let metadata_dir = config.metadata_log_dir.join("__cluster_metadata-0");
        let controller = Arc::new(match &config.controller_quorum {
            None => QuorumController::open(&metadata_dir.join("metadata.log"), defaults)?,
            Some(voters) => {
                let listen = config.controller_listen.ok_or_else(|| {
                    ServerError::MetaProperties(
                        "--controller-quorum needs --controller-listen".into(),
                    )
                })?;
                let voters = voters.iter().map(|(id, a)| (*id as u64, *a)).collect();
                let mut quorum = QuorumConfig::new(
                    config.node_id as u64,
                    voters,
                    listen,
                    metadata_dir.join("raft"),
                );
                // Raft is an API of the controller listener, bounded like every request there.
                quorum.service = raft_service.clone();
                quorum.max_frame_bytes = config.socket_request_max_bytes;
                QuorumController::start_quorum(quorum, defaults).await?
            }
        });
        // Topic configs are validated over this broker's values of them, as Kafka's controller
        // does with its own `KafkaConfig` (the same properties here).
        controller.set_broker_topic_defaults(
            config
                .effective_topic_configs(&Default::default())
                .into_iter()
                .map(|(def, v, _)| (def.name.to_string(), v))
                .collect(),
        );
        controller.set_cluster_id(cluster_id.clone());
        controller.set_broker_session_timeout_ms(config.broker_session_timeout_ms);
        controller.set_unsafe_trust_restarted_brokers(
            config
                .props
                .get(UNSAFE_TRUST_RESTARTED_BROKERS)
                .is_some_and(|v| v.trim().eq_ignore_ascii_case("true")),
        );
        crate::log_chores::configure_file_cache(&config);
        let replica_manager = Arc::new(ReplicaManager::new(config.clone())?);
        // A new incarnation, with the broker epoch its previous one recorded at a clean
        // shutdown (read by the log manager before it removed the markers).
        let lifecycle = Arc::new(crate::broker_lifecycle::BrokerLifecycleManager::new(
            replica_manager.previous_broker_epoch(),
        ));
        let metadata = Arc::new(RwLock::new(controller.image()));
        // One client for everything this broker asks other nodes: the controller channel and
        // the replica fetchers (separate connections per purpose, see inter_broker.rs).
        let inter_broker = InterBrokerClient::new(config.node_id);
        let channel = Arc::new(ControllerChannel::for_broker(
            &config,
            controller.clone(),
            metadata.clone(),
            inter_broker.clone(),
            lifecycle.clone(),
            cluster_id.clone(),
        ));
        if config.controller_quorum.is_some() {
            let mut fetcher_config = FetcherConfig::from_props(config.node_id, &config.props);
            fetcher_config.lifecycle = Some(lifecycle.clone());
            replica_manager.enable_replication(Replication {
                fetchers: FetcherManager::new(fetcher_config, inter_broker.clone()),
                alter_partition: alter_partition_sender(
                    channel.clone(),
                    Arc::downgrade(&replica_manager),
                ),
            });
        }
        // Replay only queues (delta, image); the loader thread applies them (see
        // metadata_loader.rs for the order). Start-up waits for the first image to be applied;
        // a quorum member's is held until the active controller says it has caught up (the
        // first heartbeat answer that does releases it), since what it replays from its own log
        // may be stale.
        let publishers: Vec<Arc<dyn crate::metadata_loader::MetadataPublisher>> = vec![
            replica_manager.clone(),
            Arc::new(ImageHolder(metadata.clone())),
        ];
        let metadata_loader = Arc::new(if config.controller_quorum.is_some() {
            MetadataLoader::start_held(publishers)
        } else {
            MetadataLoader::start(publishers)
        });
        // The group coordinator follows the metadata after the replica manager (an elected
        // offsets partition is already leader here when it loads).
        let group_coordinator =
            crate::coordinator::start_group_coordinator(&config.props, &replica_manager);
        metadata_loader.install(crate::coordinator::GroupCoordinatorPublisher::new(
            config.node_id,
            group_coordinator.clone(),
            replica_manager.clone(),
        ));
        // The transaction coordinator likewise; its markers go to partition leaders over a
        // channel of their own.
        let producer_ids = Arc::new(ProducerIdManager::new(channel.clone()));
        producer_ids.prefetch();
        let transaction_coordinator =
            crate::coordinator::transactions::start_transaction_coordinator(
                &config.props,
                &replica_manager,
                producer_ids.clone(),
                crate::coordinator::transactions::BrokerMarkerChannel::new(
                    metadata.clone(),
                    inter_broker.clone(),
                    std::time::Duration::from_millis(config.request_timeout_ms),
                ),
            );
        metadata_loader.install(
            crate::coordinator::transactions::TransactionCoordinatorPublisher::new(
                config.node_id,
                transaction_coordinator.clone(),
                replica_manager.clone(),
            ),
        );
        let add_partitions_to_txn_manager = crate::txn_verification::AddPartitionsToTxnManager::new(
            config.node_id,
            metadata.clone(),
            inter_broker.clone(),
            transaction_coordinator.clone(),
            std::time::Duration::from_millis(config.request_timeout_ms),
        );
        controller.set_publisher(metadata_loader.sink());
        if config.controller_quorum.is_none() {
            metadata_loader.caught_up().await;
        }
        if config.controller_quorum.is_none() {
            // Only a complete image may judge a log stray; a quorum member's image is complete
            // only once it has caught up, so there this is left to a later version.
            replica_manager.remove_stray_logs(&controller.image());
            // A new incarnation registers fenced; on a single node its first heartbeat follows
            // at once and unfences it (there are no periodic heartbeats here).
            channel
                .register_broker(
                    &config.advertised_host,
                    config.advertised_port,
                    config.rack.clone(),
                )
                .await?;
            channel
                .heartbeat(crate::monotonic_ms(), config.unclean_leader_election_enable)
                .await?;
            metadata_loader.caught_up().await;
        } else {
            tokio::spawn(crate::broker_lifecycle::register_until_done(
                channel.clone(),
                controller.clone(),
                config.clone(),
            ));
        }
        tracing::info!(
            node_id = config.node_id,
            advertised = %format!("{}:{}", config.advertised_host, config.advertised_port),
            log_dirs = ?config.log_dirs,
            cluster_id = %cluster_id,
            "strom broker started"
        );
        let request_queue = crate::request_queue::RequestQueue::new(&config.limits);
        let broker = Arc::new(Broker {
            producer_ids,
            channel,
            config,
            cluster_id,
            controller,
            replica_manager,
            metadata,
            metadata_loader,
            inter_broker,
            group_coordinator,
            transaction_coordinator,
            add_partitions_to_txn_manager,
            in_flight,
            request_queue,
            auth: plugins.auth,
        });
        // Kafka connections on the controller listener wait for this.
        let _ = broker_tx.send(Some(broker.clone()));
        Ok(Self {
            broker,
            listeners,
            controller_addr,
            stop_tx,
            stop_rx,
            controller_stop,
            _dir_locks: locks,
        })
    }

    /// The bound address of the inter-broker listener (the first broker listener if it is not
    /// bound here).
    pub fn local_addr(&self) -> SocketAddr {
        let name = &self.broker.config.listeners.inter_broker_listener_name;
        self.listeners
            .iter()
            .find(|(i, _)| &*i.name == name)
            .or(self.listeners.first())
            .and_then(|(_, l)| l.local_addr().ok())
            .expect("a bound broker listener")
    }

    /// The bound address of the listener named `name` (any scope).
    pub fn listener_addr(&self, name: &str) -> Option<SocketAddr> {
        let name = name.to_ascii_uppercase();
        if self.broker.config.listeners.scope_of(&name) == ListenerScope::Controller {
            return self.controller_addr;
        }
        self.listeners
            .iter()
            .find(|(i, _)| *i.name == *name)
            .and_then(|(_, l)| l.local_addr().ok())
    }

    pub fn broker(&self) -> Arc<Broker> {
        self.broker.clone()
    }

    /// Serves until `shutdown` completes, then shuts down cleanly.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), ServerError> {
        let (stop_tx, stop_rx) = (self.stop_tx, self.stop_rx);
        let chores = tokio::spawn(background_chores(self.broker.clone(), stop_rx.clone()));
        let mut log_cleaner = crate::log_cleaner::LogCleaner::start(
            &self.broker.config.cleaner,
            self.broker.replica_manager.clone(),
        );
        let assignments = tokio::spawn(crate::directory_assignments::run(
            self.broker.clone(),
            stop_rx.clone(),
        ));
        let cluster = self
            .broker
            .config
            .controller_quorum
            .is_some()
            .then(|| tokio::spawn(cluster_chores(self.broker.clone(), stop_rx.clone())));
        // Kafka's BrokerServer enables request processing on its listeners only once the broker
        // is registered and unfenced: before that a Metadata answer would list no broker and no
        // controller, and librdkafka's admin client then waits for a controller until its
        // metadata refresh (minutes). Connections made meanwhile wait in the listen backlog.
        tokio::pin!(shutdown);
        let serving = tokio::select! {
            _ = wait_until_unfenced(&self.broker) => true,
            _ = &mut shutdown => false,
        };
        // The broker listeners stop accepting at the shutdown signal; their connections are
        // served through the controlled shutdown, until `stop_tx`.
        let (accept_stop_tx, accept_stop_rx) = watch::channel(false);
        let quotas = Arc::new(ConnectionQuotas::new(&self.broker.config));
        let accepting: Vec<_> = self
            .listeners
            .into_iter()
            .filter(|_| serving)
            .map(|(info, l)| {
                tokio::spawn(accept_loop(
                    self.broker.clone(),
                    quotas.clone(),
                    info,
                    l,
                    accept_stop_rx.clone(),
                    stop_rx.clone(),
                ))
            })
            .collect();
        if serving {
            shutdown.await;
        }
        let _ = accept_stop_tx.send(true);
        for a in accepting {
            let _ = a.await;
        }
        tracing::info!("shutting down");
        if self.broker.config.controller_quorum.is_some() {
            controlled_shutdown(&self.broker).await;
        }
        let _ = stop_tx.send(true);
        let _ = chores.await;
        // A running clean ends at its current group; no swap may race the logs' close.
        tokio::task::block_in_place(|| log_cleaner.shutdown());
        let _ = assignments.await;
        if let Some(c) = cluster {
            let _ = c.await;
        }
        if let Some(r) = self.broker.replica_manager.replication() {
            r.fetchers.shutdown().await;
        }
        // The coordinator shards go first: requests held by them (a JoinGroup waiting for its
        // rebalance) answer NOT_COORDINATOR now instead of holding up the wait below, and no
        // shard appends once the logs close.
        for (partition, _) in self.broker.group_coordinator.partitions() {
            self.broker.group_coordinator.on_resigned(partition, None);
        }
        for (partition, _) in self.broker.transaction_coordinator.partitions() {
            self.broker
                .transaction_coordinator
                .on_resigned(partition, None);
        }
        // Connections take no new request once stopped; wait for the ones being handled (a
        // long-poll fetch or an acks=all produce ends at its own timeout; bounded anyway).
        if !self
            .broker
            .in_flight
            .wait_idle(IN_FLIGHT_SHUTDOWN_LIMIT)
            .await
        {
            tracing::warn!("requests still in flight at shutdown; closing the logs anyway");
        }
        self.broker.metadata_loader.shutdown().await;
        self.broker
            .replica_manager
            .shutdown(self.broker.channel.lifecycle().broker_epoch())?;
        self.broker.controller.shutdown().await;
        let _ = self.controller_stop.send(true);
        self.broker.inter_broker.close_all();
        tracing::info!("shutdown complete");
        Ok(())
    }
}

/// Returns once the broker's image shows this broker registered and not fenced (at once on a
/// single node, which registers before it serves; in a quorum after `register_until_done`).
///
/// Only a published image counts. Until the held loader of a quorum member is released, the
/// image is the one replayed from its own log at start-up: after a restart it still shows this
/// broker unfenced (and leading its partitions) from before the crash, while no partition is
/// hosted yet. Serving then answered ListOffsets and Fetch for this broker's own partitions with
/// UNKNOWN_TOPIC_OR_PARTITION, which librdkafka takes as permanent for an offset lookup: it
/// reset the consumer to the log end, skipping every record already there.
async fn wait_until_unfenced(broker: &Broker) {
    let node = broker.config.node_id;
    let mut published = broker.metadata_loader.published();
    broker.metadata_loader.caught_up().await;
    loop {
        let unfenced = broker.image().brokers.get(&node).is_some_and(|b| !b.fenced);
        if unfenced {
            return;
        }
        if published.changed().await.is_err() {
            // The loader is gone (shutdown): nothing will change any more.
            return std::future::pending().await;
        }
    }
}

/// Accepts Kafka connections on one listener until `accept_stop`; each is served by
/// `dispatch` until `stop`.
async fn accept_loop<D: Dispatch + Clone>(
    dispatch: D,
    quotas: Arc<ConnectionQuotas>,
    info: ListenerInfo,
    listener: TcpListener,
    mut accept_stop: watch::Receiver<bool>,
    stop: watch::Receiver<bool>,
) {
    let local = listener.local_addr().ok();
    loop {
        // max.connections: wait for a slot before accepting, as Kafka's acceptor does.
        let total = tokio::select! {
            _ = accept_stop.changed() => return,
            permit = quotas.acquire_total() => match permit {
                Some(p) => p,
                None => return,
            },
        };
        tokio::select! {
            _ = accept_stop.changed() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let Some(slot) = quotas.admit(peer.ip(), total) else {
                        tracing::info!(%peer, "closing connection: max.connections.per.ip reached");
                        continue;
                    };
                    let dispatch = dispatch.clone();
                    let stop = stop.clone();
                    let conn = ConnectionInfo::new(info.clone(), local.unwrap_or(peer), peer, next_connection_index());
                    tokio::spawn(async move {
                        crate::connection::serve(dispatch, stream, conn, stop).await;
                        drop(slot);
                    });
                }
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }
}

/// How long shutdown waits for requests being handled before it closes the logs.
const IN_FLIGHT_SHUTDOWN_LIMIT: Duration = Duration::from_secs(30);

/// How long a stopping broker waits for the controller to move its leaderships away before it
/// stops anyway (the quorum may be gone, e.g. when the whole cluster is being stopped).
const CONTROLLED_SHUTDOWN_LIMIT: Duration = Duration::from_secs(5);

/// Kafka's controlled shutdown (KRaft `BrokerLifecycleManager`): heartbeats with
/// `wantShutDown` until the controller answers `shouldShutDown`, then waits until this
/// broker's own metadata shows it leads nothing, so that producers and consumers are told
/// NOT_LEADER_OR_FOLLOWER and move to the new leaders while this broker still answers — instead
/// of finding out by timeouts after it is gone and the session expires. Existing connections
/// are served meanwhile; new ones are no longer accepted.
async fn controlled_shutdown(broker: &Arc<Broker>) {
    broker.channel.lifecycle().begin_shutdown();
    let deadline = tokio::time::Instant::now() + CONTROLLED_SHUTDOWN_LIMIT;
    let unclean = broker.config.unclean_leader_election_enable;
    let pause = Duration::from_millis(broker.config.broker_heartbeat_interval_ms.clamp(10, 500));
    loop {
        let call = broker
            .channel
            .controlled_shutdown(crate::monotonic_ms(), unclean);
        match tokio::time::timeout_at(deadline, call).await {
            Ok(Ok(true)) => break,
            Ok(Ok(false)) => {}
            Ok(Err(e)) => tracing::debug!(error = %e, "controlled shutdown request failed"),
            Err(_) => {
                tracing::warn!("controlled shutdown not acknowledged in time; stopping anyway");
                return;
            }
        }
        if tokio::time::Instant::now() + pause > deadline {
            tracing::warn!("controlled shutdown not acknowledged in time; stopping anyway");
            return;
        }
        tokio::time::sleep(pause).await;
    }
    let node = broker.config.node_id;
    while broker
        .metadata
        .read()
        .topics
        .values()
        .any(|t| t.partitions.values().any(|p| p.leader == node))
    {
        if tokio::time::Instant::now() >= deadline {
            tracing::warn!("metadata still shows leaderships of this broker; stopping anyway");
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tracing::info!("controlled shutdown complete: no leaderships left");
}

/// ISR changes go to the active controller; a refusal lets the leader propose again.
fn alter_partition_sender(
    channel: Arc<ControllerChannel>,
    replica_manager: std::sync::Weak<ReplicaManager>,
) -> Arc<dyn AlterPartitionSender> {
    Arc::new(move |proposal: AlterPartitionProposal| {
        let channel = channel.clone();
        let rm = replica_manager.clone();
        tokio::spawn(async move {
            if let Err(e) = channel.alter_partition(&proposal).await {
                tracing::info!(topic = %proposal.topic, partition = proposal.partition, error = %e, "AlterPartition refused");
                if let Some(p) = rm
                    .upgrade()
                    .and_then(|rm| rm.get(&proposal.topic, proposal.partition))
                {
                    p.alter_partition_failed(proposal.partition_epoch);
                }
            }
        });
    })
}

/// Cluster mode: heartbeats to the active controller, and, on the active controller, fencing
/// of brokers whose session expired.
async fn cluster_chores(broker: Arc<Broker>, mut stop: watch::Receiver<bool>) {
    let cfg = broker.config.clone();
    let mut heartbeat = tokio::time::interval(Duration::from_millis(
        cfg.broker_heartbeat_interval_ms.max(10),
    ));
    let mut fence = tokio::time::interval(Duration::from_millis(500));
    let rebalance_every = Duration::from_secs(cfg.leader_imbalance_check_interval_seconds.max(1));
    let mut rebalance = tokio::time::interval_at(
        tokio::time::Instant::now() + rebalance_every,
        rebalance_every,
    );
    // The metadata loader starts held (see `Server::start`); the first caught-up answer ends it.
    let mut released = false;
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            _ = heartbeat.tick(), if !broker.channel.lifecycle().is_shutting_down() => {
                match broker.channel.heartbeat(crate::monotonic_ms(), cfg.unclean_leader_election_enable).await {
                    Ok(caught_up) => {
                        if caught_up && !released {
                            released = true;
                            tracing::info!("caught up with the metadata quorum");
                            broker.metadata_loader.release();
                        }
                    }
                    Err(e) => tracing::debug!(error = %e, "heartbeat failed"),
                }
            }
            _ = fence.tick() => {
                broker
                    .controller
                    .fence_stale_brokers(crate::monotonic_ms(), cfg.broker_session_timeout_ms, cfg.unclean_leader_election_enable)
                    .await;
            }
            _ = rebalance.tick(), if cfg.auto_leader_rebalance_enable => {
                let moved = broker.controller.balance_partition_leaders(1000).await;
                if moved > 0 {
                    tracing::info!(moved, "leaders moved back to preferred replicas");
                }
            }
        }
    }
}

async fn background_chores(broker: Arc<Broker>, mut stop: watch::Receiver<bool>) {
    let cfg = broker.config.clone();
    let mut retention = tokio::time::interval(Duration::from_millis(
        cfg.retention_check_interval_ms.max(1),
    ));
    let mut checkpoint =
        tokio::time::interval(Duration::from_millis(cfg.checkpoint_interval_ms.max(1)));
    let mut isr_shrink = tokio::time::interval(ReplicaManager::isr_shrink_interval(
        cfg.replica_lag_time_max_ms,
    ));
    isr_shrink.tick().await;
    let mut expiration = tokio::time::interval(Duration::from_millis(
        cfg.producer_id_expiration_check_interval_ms.max(1),
    ));
    // `flush.ms` is checked every `log.flush.scheduler.interval.ms` (Kafka's log flusher);
    // `.deleted` segment files are removed within a second of `file.delete.delay.ms`.
    let mut flush = tokio::time::interval(crate::log_chores::chore_period(
        cfg.flush_scheduler_interval_ms,
    ));
    let mut delete_files = tokio::time::interval(crate::log_chores::DELETE_CHECK_PERIOD);
    flush.tick().await;
    delete_files.tick().await;
    retention.tick().await;
    checkpoint.tick().await;
    expiration.tick().await;
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            _ = retention.tick() => {
                let rm = broker.replica_manager.clone();
                let _ = tokio::task::spawn_blocking(move || rm.delete_old_segments(crate::now_ms())).await;
            }
            _ = flush.tick() => {
                let rm = broker.replica_manager.clone();
                let _ = tokio::task::spawn_blocking(move || rm.flush_dirty_logs(crate::now_ms())).await;
            }
            _ = delete_files.tick() => {
                let rm = broker.replica_manager.clone();
                let _ = tokio::task::spawn_blocking(move || rm.delete_due_segment_files(crate::now_ms())).await;
            }
            _ = isr_shrink.tick() => broker.replica_manager.maybe_shrink_isr(crate::now_ms()),
            _ = expiration.tick() => {
                let rm = broker.replica_manager.clone();
                let _ = tokio::task::spawn_blocking(move || rm.remove_expired_producers(crate::now_ms())).await;
            }
            _ = checkpoint.tick() => {
                let rm = broker.replica_manager.clone();
                let r = tokio::task::spawn_blocking(move || rm.checkpoint()).await;
                if let Ok(Err(e)) = r {
                    tracing::warn!(error = %e, "checkpoint failed");
                }
            }
        }
    }
}

/// The cluster id a fresh quorum node formats itself with (`meta_properties`: only when none of
/// its dirs exists). Every node must report the same one (clients such as librdkafka refuse a
/// bootstrap list that spans two cluster ids); Kafka gets there by formatting every node with
/// one id (`strom format --cluster-id` does the same), and a node that formats itself derives
/// it from the voter set it was started with, which all nodes of one cluster share.
fn quorum_cluster_id(voters: &BTreeMap<i32, std::net::SocketAddr>) -> Uuid {
    let text = voters
        .iter()
        .map(|(id, addr)| format!("{id}@{addr}"))
        .collect::<Vec<_>>()
        .join(",");
    // FNV-1a, twice with different offsets: stable across builds and platforms, unlike
    // std's DefaultHasher.
    let fnv = |offset: u64| {
        text.bytes().fold(offset, |h, b| {
            (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
        })
    };
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&fnv(0xcbf2_9ce4_8422_2325).to_be_bytes());
    bytes[8..].copy_from_slice(&fnv(0x8422_2325_cbf2_9ce4).to_be_bytes());
    uuid::Builder::from_random_bytes(bytes).into_uuid()
}

/// The cluster id a node formats its dirs with when none has one yet.
fn new_cluster_id(quorum: Option<&BTreeMap<i32, std::net::SocketAddr>>) -> String {
    match quorum {
        Some(voters) => crate::topic_id_string(&quorum_cluster_id(voters)),
        None => crate::topic_id_string(&Uuid::new_v4()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fresh quorum nodes that format themselves agree on the cluster id.
    #[test]
    fn nodes_of_one_quorum_share_a_cluster_id() {
        let root = tempfile::tempdir().unwrap();
        let voters = parse_quorum_voters_for_test("1@127.0.0.1:9093,2@127.0.0.1:9094");
        let format = |dir: &str, node: i32, voters: &BTreeMap<i32, SocketAddr>| {
            crate::meta_properties::load_and_verify(&[root.path().join(dir)], node, || {
                new_cluster_id(Some(voters))
            })
            .unwrap()
        };
        let ids: Vec<String> = (1..=3)
            .map(|i| format(&format!("n{i}"), i, &voters))
            .collect();
        assert!(ids.iter().all(|id| id == &ids[0]), "{ids:?}");
        // Stable across restarts, and another voter set is another cluster.
        assert_eq!(format("n1", 1, &voters), ids[0]);
        let other = parse_quorum_voters_for_test("1@127.0.0.1:9093,2@127.0.0.1:9095");
        assert_ne!(format("n4", 1, &other), ids[0]);
    }

    fn parse_quorum_voters_for_test(s: &str) -> BTreeMap<i32, std::net::SocketAddr> {
        crate::config::parse_quorum_voters(s).unwrap()
    }
}

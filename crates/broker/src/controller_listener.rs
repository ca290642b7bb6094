//! The controller listener's dispatch (Kafka's controller `SocketServer` and `ControllerApis`).
//!
//! The listener speaks only Kafka framing: its connections run the same loop as a client
//! listener's (`connection::serve`: frames bounded by `socket.request.max.bytes` and buffered as
//! their bytes arrive, `connections.max.idle.ms` from the first byte on) behind their own
//! `ConnectionQuotas` (`max.connections`, `max.connections.per.ip`), as Kafka's controller
//! runs a `SocketServer` of its own. Raft between the voters is one of its APIs
//! ([`crate::handlers::registry::RAFT`]), so TLS, SASL and the authorizer will cover it as they
//! cover the broker-to-controller APIs.
//!
//! The listener is served from start-up on: a Raft request goes to the quorum at once (the
//! voter answers as soon as it has started), while any other request waits until the broker
//! exists and then runs through the broker's handlers with the controller-scope registry. Once
//! the broker is shutting down, only Raft is served, until the quorum itself stops.

use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::watch;

use crate::config::BrokerConfig;
use crate::connection::{ConnectionInfo, Dispatch, InFlight};
use crate::handlers::registry::HandlerResult;
use crate::handlers::{self, HandleError, ParsedRequest};
use crate::listeners::ListenerScope;
use crate::request_queue::RequestQueue;
use crate::server::Broker;

pub struct ControllerDispatch {
    pub(crate) config: Arc<BrokerConfig>,
    pub(crate) in_flight: Arc<InFlight>,
    /// The listener's own `queued.max.requests` / `queued.max.request.bytes`.
    pub(crate) request_queue: RequestQueue,
    /// This node's voter.
    pub(crate) raft: strom_raft::RaftService,
    /// The broker, once it exists.
    pub(crate) broker: watch::Receiver<Option<Arc<Broker>>>,
    /// The broker's stop signal: after it only Raft is served.
    pub(crate) broker_stop: watch::Receiver<bool>,
    /// The authorizer, for Raft (the other APIs ask the broker's, the same one).
    pub(crate) auth: strom_server_common::authorizer::AuthHelper,
}

impl ControllerDispatch {
    async fn dispatch(&self, conn: &mut ConnectionInfo, payload: Bytes) -> HandlerResult {
        match handlers::parse_request(&payload, ListenerScope::Controller)? {
            ParsedRequest::Raft { header, body } => {
                handlers::raft::handle(&self.raft, &self.auth, conn, header, body)
                    .await
                    .map(|r| r.map(Into::into))
            }
            parsed => {
                if *self.broker_stop.borrow() {
                    return Err(HandleError::ShuttingDown);
                }
                let mut broker = self.broker.clone();
                let broker = match broker.wait_for(Option::is_some).await {
                    Ok(b) => b.clone().expect("waited for Some"),
                    // Start-up failed: the broker will never exist.
                    Err(_) => return Err(HandleError::ShuttingDown),
                };
                handlers::handle_parsed(&broker, conn, parsed, payload).await
            }
        }
    }
}

impl Dispatch for Arc<ControllerDispatch> {
    fn config(&self) -> &BrokerConfig {
        &self.config
    }

    fn in_flight(&self) -> &InFlight {
        &self.in_flight
    }

    fn request_queue(&self) -> &RequestQueue {
        &self.request_queue
    }

    fn handle<'a>(
        &'a self,
        conn: &'a mut ConnectionInfo,
        payload: Bytes,
    ) -> impl Future<Output = HandlerResult> + Send + 'a {
        self.dispatch(conn, payload)
    }
}

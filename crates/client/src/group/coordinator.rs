//! Finding the group coordinator (FindCoordinator) and the connection to it.
//!
//! Like Java's consumer, the coordinator gets its own connection: a JoinGroup may be held by
//! the broker for the whole rebalance timeout, so its request timeout is
//! `max(request.timeout.ms, rebalance timeout + 5 s)`, and the long poll must not delay other
//! requests to the same broker.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use strom_protocol::kafka::messages::{ApiKey, FindCoordinatorRequest};
use strom_protocol::kafka::protocol::{Request, StrBytes};
use strom_protocol::ErrorCode;

use crate::client::Client;
use crate::connection::{Connection, ConnectionConfig};
use crate::error::{Error, Result};
use crate::versions::pick_version;

/// The versions of the group APIs this module builds requests for (kept here rather than in
/// [`crate::versions`]: the request builders below set fields per version).
const GROUP_VERSIONS: &[(ApiKey, i16, i16)] = &[
    (ApiKey::FindCoordinator, 1, 6),
    (ApiKey::JoinGroup, 2, 9),
    (ApiKey::SyncGroup, 1, 5),
    (ApiKey::Heartbeat, 1, 4),
    (ApiKey::LeaveGroup, 1, 5),
    // 10 addresses topics by id only.
    (ApiKey::OffsetCommit, 2, 9),
    (ApiKey::OffsetFetch, 1, 9),
    (ApiKey::ConsumerGroupHeartbeat, 0, 1),
];

/// The version to use for a group API on `conn`.
pub fn group_version(conn: &Connection, api: ApiKey) -> Result<i16> {
    let ours = GROUP_VERSIONS
        .iter()
        .find(|(k, _, _)| *k == api)
        .map(|&(_, a, b)| (a, b));
    ours.zip(conn.broker_versions().range(api))
        .and_then(|(c, b)| pick_version(c, b))
        .ok_or(Error::UnsupportedVersion(crate::connection::api_name(api)))
}

/// True for the errors after which Java marks the coordinator unknown and looks it up again.
pub fn is_coordinator_moved(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::NotCoordinator | ErrorCode::CoordinatorNotAvailable
    )
}

struct Inner {
    client: Client,
    group_id: String,
    request_timeout: Duration,
    current: Mutex<Option<Arc<Connection>>>,
    /// One lookup at a time (the heartbeat task and `poll` may both need the coordinator).
    lookup: tokio::sync::Mutex<()>,
}

/// The group's coordinator, found lazily. Cheap to clone.
#[derive(Clone)]
pub struct Coordinator {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Coordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coordinator")
            .field("group_id", &self.inner.group_id)
            .finish()
    }
}

impl Coordinator {
    pub fn new(client: Client, group_id: String, rebalance_timeout: Duration) -> Self {
        let request_timeout = client
            .config()
            .request_timeout
            .max(rebalance_timeout + Duration::from_secs(5));
        Coordinator {
            inner: Arc::new(Inner {
                client,
                group_id,
                request_timeout,
                current: Mutex::new(None),
                lookup: tokio::sync::Mutex::new(()),
            }),
        }
    }

    pub fn group_id(&self) -> &str {
        &self.inner.group_id
    }

    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// The open coordinator connection, if one is known.
    pub fn known(&self) -> Option<Arc<Connection>> {
        let cur = self.inner.current.lock().unwrap();
        cur.as_ref().filter(|c| !c.is_closed()).cloned()
    }

    /// Forgets the coordinator; the next request looks it up again.
    pub fn mark_unknown(&self, why: &str) {
        let old = self.inner.current.lock().unwrap().take();
        if let Some(c) = old {
            tracing::info!(group = %self.inner.group_id, addr = c.addr(), why, "group coordinator marked unknown");
        }
    }

    /// The coordinator connection, looking the coordinator up once if needed (errors are
    /// returned, retriable or not; the caller decides about retrying).
    pub async fn connection(&self) -> Result<Arc<Connection>> {
        if let Some(c) = self.known() {
            return Ok(c);
        }
        let _guard = self.inner.lookup.lock().await;
        if let Some(c) = self.known() {
            return Ok(c);
        }
        let addr = self.find().await?;
        let cfg = self.inner.client.config();
        let conn = Connection::connect(
            &addr,
            ConnectionConfig {
                client_id: cfg.client_id.clone(),
                request_timeout: self.inner.request_timeout,
                connect_timeout: cfg.connect_timeout,
                ..Default::default()
            },
        )
        .await?;
        let conn = Arc::new(conn);
        tracing::debug!(group = %self.inner.group_id, %addr, "found group coordinator");
        *self.inner.current.lock().unwrap() = Some(conn.clone());
        Ok(conn)
    }

    /// The coordinator connection, retrying the lookup with backoff until `deadline` or a
    /// non-retriable error.
    pub async fn ensure(&self, deadline: Instant) -> Result<Arc<Connection>> {
        let mut attempt = 0;
        loop {
            match self.connection().await {
                Ok(c) => return Ok(c),
                Err(e) if e.is_retriable() && Instant::now() < deadline => {
                    tracing::debug!(group = %self.inner.group_id, error = %e, "coordinator lookup failed, retrying");
                    tokio::time::sleep(self.inner.client.config().backoff(attempt)).await;
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// FindCoordinator (key type 0 = group) to any broker; returns `host:port`.
    async fn find(&self) -> Result<String> {
        let conn = self.inner.client.any_connection().await?;
        let version = group_version(&conn, ApiKey::FindCoordinator)?;
        let mut req = FindCoordinatorRequest::default();
        req.key_type = 0;
        let group = StrBytes::from_string(self.inner.group_id.clone());
        if version >= 4 {
            req.coordinator_keys = vec![group];
        } else {
            req.key = group;
        }
        let resp = conn.send(&req, version).await?;
        let (code, message, host, port) = if version >= 4 {
            let c = resp.coordinators.first().ok_or_else(|| {
                Error::Protocol("FindCoordinator response without coordinators".into())
            })?;
            (
                c.error_code,
                c.error_message.as_ref().map(|m| m.to_string()),
                c.host.to_string(),
                c.port,
            )
        } else {
            (
                resp.error_code,
                resp.error_message.as_ref().map(|m| m.to_string()),
                resp.host.to_string(),
                resp.port,
            )
        };
        if let Some(e) = Error::kafka(code, message) {
            return Err(e);
        }
        Ok(format!("{host}:{port}"))
    }

    /// Sends a group request built for the negotiated version. A broken connection marks the
    /// coordinator unknown; a broker error code is for the caller to interpret.
    pub async fn send<R: Request>(
        &self,
        api: ApiKey,
        build: impl FnOnce(i16) -> Result<R>,
    ) -> Result<R::Response> {
        let conn = self.connection().await?;
        let version = group_version(&conn, api)?;
        let req = build(version)?;
        match conn.send(&req, version).await {
            Ok(r) => Ok(r),
            Err(e) => {
                if matches!(
                    e,
                    Error::Io { .. } | Error::Disconnected(_) | Error::Timeout { .. }
                ) {
                    conn.close("group request failed");
                    self.mark_unknown(&e.to_string());
                }
                Err(e)
            }
        }
    }
}

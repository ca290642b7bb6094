//! The openraft state machine: hands committed payloads to the application's
//! [`StateMachineHandler`] and keeps the latest snapshot on disk.
//!
//! The application state itself lives in the handler, in memory; what is durable is the
//! snapshot (the handler's bytes plus the last included log id and membership) in
//! `<dir>/snapshot`, replaced atomically. On start the handler is restored from that snapshot and
//! openraft applies the committed entries after it again, so the handler sees every committed
//! entry after its last snapshot exactly once per process lifetime.

use std::io::{self, Cursor};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{AnyError, EntryPayload, RaftSnapshotBuilder, StorageIOError};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::log_store::{read_state_file, write_state_file};
use crate::types::{Entry, LogId, SnapshotMeta, StorageError, StoredMembership, TypeConfig};

/// An error the application returns from [`StateMachineHandler::restore`].
pub type HandlerError = Box<dyn std::error::Error + Send + Sync>;

/// The application side of the replicated log.
///
/// Calls come from one task at a time, in log order, and must not block for long (they run on
/// the Raft state-machine task).
pub trait StateMachineHandler: Send + Sync + 'static {
    /// A committed application entry: its log index, the term of the leader that wrote it (the
    /// controller epoch) and its payload. Called in log order, once per entry per process
    /// lifetime (after the snapshot last restored). Raft's own entries (the leader's blank entry
    /// of each term, membership entries) are not passed on, so indexes may have gaps.
    fn apply(&self, index: u64, term: u64, payload: &[u8]);

    /// The serialized state after every entry applied so far.
    fn snapshot(&self) -> Vec<u8>;

    /// Replaces the whole state with a snapshot made by [`StateMachineHandler::snapshot`] (on
    /// start from the local snapshot, or one installed from the leader).
    fn restore(&self, snapshot: Vec<u8>) -> Result<(), HandlerError>;
}

const SNAPSHOT_FILE: &str = "snapshot";

#[derive(Serialize, Deserialize)]
struct StoredSnapshot {
    meta: SnapshotMeta,
    data: Vec<u8>,
}

type Current = Arc<Mutex<Option<Arc<StoredSnapshot>>>>;

pub struct StateMachine {
    handler: Arc<dyn StateMachineHandler>,
    dir: PathBuf,
    last_applied: Option<LogId>,
    last_membership: StoredMembership,
    current: Current,
    seq: Arc<AtomicU64>,
}

pub struct SnapshotBuilder {
    dir: PathBuf,
    data: Vec<u8>,
    last_applied: Option<LogId>,
    last_membership: StoredMembership,
    current: Current,
    seq: Arc<AtomicU64>,
}

fn to_io(e: HandlerError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e.to_string())
}

impl StateMachine {
    /// Opens the state machine under `dir`, restoring `handler` from the stored snapshot if any.
    pub fn open(dir: &Path, handler: Arc<dyn StateMachineHandler>) -> io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let stored: Option<StoredSnapshot> = read_state_file(dir, SNAPSHOT_FILE)?;
        let mut sm = Self {
            handler,
            dir: dir.to_path_buf(),
            last_applied: None,
            last_membership: StoredMembership::default(),
            current: Arc::new(Mutex::new(None)),
            seq: Arc::new(AtomicU64::new(0)),
        };
        if let Some(s) = stored {
            tracing::info!(snapshot = %s.meta, "restoring the state machine from its snapshot");
            sm.handler.restore(s.data.clone()).map_err(to_io)?;
            sm.last_applied = s.meta.last_log_id;
            sm.last_membership = s.meta.last_membership.clone();
            *sm.current.lock() = Some(Arc::new(s));
        }
        Ok(sm)
    }

    /// The last log id included in the stored snapshot.
    pub fn snapshot_last_log_id(&self) -> Option<LogId> {
        self.current
            .lock()
            .as_ref()
            .and_then(|s| s.meta.last_log_id)
    }
}

/// Stores `snap` unless a newer snapshot is already there.
fn store_snapshot(dir: &Path, current: &Current, snap: StoredSnapshot) -> io::Result<()> {
    let mut cur = current.lock();
    if let Some(c) = cur.as_ref() {
        if c.meta.last_log_id > snap.meta.last_log_id {
            return Ok(());
        }
    }
    write_state_file(dir, SNAPSHOT_FILE, &snap, true)?;
    *cur = Some(Arc::new(snap));
    Ok(())
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let snapshot_id = match self.last_applied {
            Some(l) => format!("{}-{}-{seq}", l.leader_id.term, l.index),
            None => format!("none-{seq}"),
        };
        let meta = SnapshotMeta {
            last_log_id: self.last_applied,
            last_membership: self.last_membership.clone(),
            snapshot_id,
        };
        let data = std::mem::take(&mut self.data);
        let stored = StoredSnapshot {
            meta: meta.clone(),
            data: data.clone(),
        };
        store_snapshot(&self.dir, &self.current, stored).map_err(|e| {
            StorageError::from(StorageIOError::write_snapshot(
                Some(meta.signature()),
                AnyError::new(&e),
            ))
        })?;
        tracing::info!(snapshot = %meta, bytes = data.len(), "built a snapshot");
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        Ok((self.last_applied, self.last_membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<()>, StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let mut out = Vec::new();
        for entry in entries {
            match &entry.payload {
                EntryPayload::Blank => {}
                EntryPayload::Normal(p) => {
                    self.handler
                        .apply(entry.log_id.index, entry.log_id.leader_id.term, &p.0);
                }
                EntryPayload::Membership(m) => {
                    self.last_membership = StoredMembership::new(Some(entry.log_id), m.clone());
                }
            }
            self.last_applied = Some(entry.log_id);
            out.push(());
        }
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        // Taken here, on the state-machine task, so that the bytes match `last_applied`.
        SnapshotBuilder {
            dir: self.dir.clone(),
            data: self.handler.snapshot(),
            last_applied: self.last_applied,
            last_membership: self.last_membership.clone(),
            current: self.current.clone(),
            seq: self.seq.clone(),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let data = snapshot.into_inner();
        tracing::info!(snapshot = %meta, bytes = data.len(), "installing a snapshot from the leader");
        let sig = || Some(meta.signature());
        store_snapshot(
            &self.dir,
            &self.current,
            StoredSnapshot {
                meta: meta.clone(),
                data: data.clone(),
            },
        )
        .map_err(|e| StorageIOError::write_snapshot(sig(), AnyError::new(&e)))?;
        self.handler
            .restore(data)
            .map_err(|e| StorageIOError::read_snapshot(sig(), AnyError::new(&to_io(e))))?;
        self.last_applied = meta.last_log_id;
        self.last_membership = meta.last_membership.clone();
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        Ok(self.current.lock().as_ref().map(|s| Snapshot {
            meta: s.meta.clone(),
            snapshot: Box::new(Cursor::new(s.data.clone())),
        }))
    }
}

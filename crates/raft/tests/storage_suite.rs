//! openraft's storage test suite against the on-disk log and the snapshotting state machine.

use std::sync::Arc;

use openraft::testing::{StoreBuilder, Suite};
use parking_lot::Mutex;
use strom_raft::log_store::LogStore;
use strom_raft::state_machine::StateMachine;
use strom_raft::types::{StorageError, TypeConfig};
use strom_raft::{HandlerError, StateMachineHandler};
use tempfile::TempDir;

#[derive(Default)]
struct Bytes(Mutex<Vec<u8>>);

impl StateMachineHandler for Bytes {
    fn apply(&self, _index: u64, _term: u64, payload: &[u8]) {
        self.0.lock().extend_from_slice(payload);
    }
    fn snapshot(&self) -> Vec<u8> {
        self.0.lock().clone()
    }
    fn restore(&self, snapshot: Vec<u8>) -> Result<(), HandlerError> {
        *self.0.lock() = snapshot;
        Ok(())
    }
}

struct Builder;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, TempDir> for Builder {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachine), StorageError> {
        let dir = tempfile::tempdir().expect("tempdir");
        // Small segments so that rolling, truncating across segments and purging whole
        // segments are exercised too.
        let log = LogStore::open(dir.path(), 256).expect("open log");
        let sm = StateMachine::open(dir.path(), Arc::new(Bytes::default())).expect("open sm");
        Ok((dir, log, sm))
    }
}

#[test]
fn openraft_storage_suite() {
    let _ = tracing_subscriber::fmt().with_test_writer().try_init();
    Suite::test_all(Builder).unwrap();
}

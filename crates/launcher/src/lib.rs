//! The one launcher of local Strom clusters: `strom dev-cluster`, the chaos harness
//! (`strom-chaos`) and the integration tests all start their nodes through it.
//!
//! - [`LocalCluster`]: `n` nodes (ids `1..=n`), each a `strom server` child process that is a
//!   controller voter and a broker, with its data dir `DIR/node-N` and its output in
//!   `DIR/node-N/server.log`; ports chosen free (or from a fixed base for `dev-cluster`); nodes
//!   optionally placed in network namespaces (`ip netns exec`). It restarts single nodes keeping
//!   their data, and waits for a node to listen.
//! - [`NodeProcs`]: the child processes, one slot per node id: signal (SIGSTOP / SIGCONT /
//!   SIGTERM through kill(1), since the workspace forbids `unsafe`), kill, reap, and the
//!   guarantee that no child outlives its owner (SIGKILL on drop).
//! - [`free_ports`]: loopback ports below the kernel's ephemeral range.
//!
//! It knows nothing of Kafka requests; callers check readiness with their own clients.
//!
//! ```no_run
//! use strom_launcher::{LaunchOptions, LocalCluster};
//! let opts = LaunchOptions::new("target/debug/strom", "/tmp/demo", 3);
//! let mut cluster = LocalCluster::launch(opts)?;
//! cluster.wait_listening_all(std::time::Duration::from_secs(30))?;
//! println!("bootstrap.servers={}", cluster.bootstrap());
//! cluster.procs.kill(2)?;     // SIGKILL node 2
//! cluster.spawn(2)?;          // and start it again on its data
//! # Ok::<(), strom_launcher::LaunchError>(())
//! ```

mod cluster;
mod procs;

pub use cluster::{cluster_id_of, server_args, LaunchOptions, LocalCluster, Ports};
pub use procs::{free_ports, NodeProcs};

use std::path::PathBuf;

/// Why a cluster or one of its nodes could not be started, signalled or checked.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("node {0} is not running")]
    NotRunning(i32),
    #[error("node {id} exited ({status}); see its log in {}", log.display())]
    Exited {
        id: i32,
        status: std::process::ExitStatus,
        log: PathBuf,
    },
    #[error("kill -{sig} {pid} (node {id}) failed: {status}")]
    Signal {
        id: i32,
        sig: String,
        pid: u32,
        status: std::process::ExitStatus,
    },
    #[error("node {id} did not listen on {addr} within {secs} s; see its log in {}", log.display())]
    NotListening {
        id: i32,
        addr: String,
        secs: u64,
        log: PathBuf,
    },
    #[error("{0}")]
    Invalid(String),
}

impl LaunchError {
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> LaunchError {
        let what = what.into();
        move |source| LaunchError::Io { what, source }
    }
}

pub type Result<T> = std::result::Result<T, LaunchError>;

//! The command-line tools of `strom`, as a library the binary dispatches to. Each tool is a
//! clap `Args` struct plus a `run(args)`; they talk to brokers through `strom_client` like any
//! Kafka client, except `dump-log`, which reads segment files offline.
//!
//! - [`cli`]: `topics` (kafka-topics.sh), `groups` (kafka-consumer-groups.sh), `transactions`
//!   (kafka-transactions.sh), `produce` / `consume` (the console producer and consumer).
//! - [`dump_log`]: `.log`, `.index`, `.timeindex`, `.txnindex` and `.snapshot` files printed as
//!   Kafka's `kafka-dump-log.sh` prints them (`--offsets-decoder`, `--transaction-log-decoder`
//!   and friends).
//! - [`bench`]: `bench produce | consume`, throughput and latency percentiles through
//!   `strom_client`.

pub mod bench;
pub mod cli;
pub mod dump_log;

/// Why a tool failed; the binary prints it and exits 1.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error(transparent)]
    Client(#[from] strom_client::Error),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// Bad arguments, or an operation the cluster refused, in the words the tool prints.
    #[error("{0}")]
    Message(String),
}

impl ToolError {
    pub fn msg(m: impl Into<String>) -> Self {
        ToolError::Message(m.into())
    }
}

pub type Result<T> = std::result::Result<T, ToolError>;

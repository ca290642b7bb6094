//! Command-line tools modelled on Kafka's: `strom topics`, `strom groups`, `strom transactions`,
//! `strom produce`, `strom consume`.
//!
//! Each tool is a clap `Args` struct plus `pub async fn run(args) -> strom_tools::Result<()>`.

pub mod consume;
pub mod groups;
mod groups_format;
pub mod produce;
pub mod topics;
pub mod transactions;

use clap::ValueEnum;
use strom_client::{Client, ClientConfig};

/// The default `--bootstrap-server`.
pub const DEFAULT_BOOTSTRAP: &str = "localhost:9092";

/// `--isolation-level`, spelled as Kafka's `isolation.level` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum IsolationLevel {
    #[value(name = "read_uncommitted")]
    ReadUncommitted,
    #[value(name = "read_committed")]
    ReadCommitted,
}

impl IsolationLevel {
    /// The ListOffsets wire value.
    pub(crate) fn wire(self) -> i8 {
        match self {
            IsolationLevel::ReadUncommitted => 0,
            IsolationLevel::ReadCommitted => 1,
        }
    }
}

/// Connects to the cluster with the tools' default settings.
pub(crate) async fn connect(bootstrap: &str) -> strom_client::Result<Client> {
    let mut config = ClientConfig::new(bootstrap);
    config.client_id = "strom-cli".into();
    Client::connect(config).await
}

/// Parses `key=value`.
pub(crate) fn parse_kv(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.trim().to_string())),
        _ => Err(format!("invalid property {s:?}: expected key=value")),
    }
}

/// Unescapes `\t`, `\n`, `\r` and `\\` in separators given on the command line.
pub(crate) fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('\\') => out.push('\\'),
            Some(o) => {
                out.push('\\');
                out.push(o);
            }
            None => out.push('\\'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kv_and_unescape() {
        assert_eq!(parse_kv("a=b=c").unwrap(), ("a".into(), "b=c".into()));
        assert!(parse_kv("novalue").is_err());
        assert_eq!(unescape("\\t|\\n"), "\t|\n");
        assert_eq!(unescape(":"), ":");
    }
}

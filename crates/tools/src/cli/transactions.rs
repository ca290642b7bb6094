//! `strom transactions`: like Kafka 4.4's `kafka-transactions.sh` (KIP-664,
//! `org.apache.kafka.tools.TransactionsCommand`): list, describe, describe-producers,
//! find-hanging and abort, with Kafka's options, tables (each column padded to its widest
//! value and followed by a tab) and messages (failures go to stderr with exit status 1), so
//! scripts written for the Kafka tool read it unchanged.
//!
//! The data comes from `strom_client::admin_txn`.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use clap::{Args, Subcommand};
use strom_client::admin_groups::Tp;
use strom_client::admin_txn::{
    AbortTransactionSpec, ListTransactionsFilter, ProducerState, TransactionDescription,
};
use strom_client::{Admin, Error};

use super::DEFAULT_BOOTSTRAP;

/// Arguments of `strom transactions`.
#[derive(Debug, Args)]
#[command(
    about = "Analyze the transactional state of producers in the cluster; detect and recover from hanging transactions"
)]
pub struct TransactionsArgs {
    /// The broker(s) to connect to, `host:port[,host:port...]`.
    #[arg(long, global = true, default_value = DEFAULT_BOOTSTRAP, value_name = "HOST:PORT")]
    pub bootstrap_server: String,
    /// Request timeout in ms.
    #[arg(long, global = true, value_name = "MS")]
    pub timeout: Option<u64>,
    #[command(subcommand)]
    pub command: TransactionsCommand,
}

/// The subcommands, named and spelled as Kafka's.
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum TransactionsCommand {
    /// List transactions.
    List {
        /// Only transactions running longer than this many ms (< 0: all).
        #[arg(long, allow_negative_numbers = true, value_name = "DURATION_FILTER")]
        duration_filter: Option<i64>,
        /// Only transactional ids matching this regular expression.
        #[arg(long, value_name = "TRANSACTIONAL_ID_PATTERN")]
        transactional_id_pattern: Option<String>,
    },
    /// Describe the state of an active transactional-id.
    Describe {
        /// The transactional id.
        #[arg(long, value_name = "TRANSACTIONAL_ID")]
        transactional_id: String,
    },
    /// Describe the states of active producers for a topic partition.
    #[command(name = "describe-producers")]
    DescribeProducers {
        /// Describe the producer state of this replica instead of the leader's.
        #[arg(long, value_name = "BROKER_ID")]
        broker_id: Option<i32>,
        /// Topic name.
        #[arg(long, value_name = "TOPIC")]
        topic: String,
        /// Partition number.
        #[arg(long, value_name = "PARTITION")]
        partition: i32,
    },
    /// Abort a hanging transaction (requires administrative privileges).
    Abort {
        /// Topic name.
        #[arg(long, value_name = "TOPIC")]
        topic: String,
        /// Partition number.
        #[arg(long, value_name = "PARTITION")]
        partition: i32,
        /// Start offset of the transaction to abort (brokers 3.0+).
        #[arg(long, value_name = "START_OFFSET")]
        start_offset: Option<i64>,
        /// Producer id (older brokers; with --producer-epoch and --coordinator-epoch).
        #[arg(long, value_name = "PRODUCER_ID")]
        producer_id: Option<i64>,
        /// Producer epoch.
        #[arg(long, value_name = "PRODUCER_EPOCH")]
        producer_epoch: Option<i16>,
        /// Coordinator epoch.
        #[arg(long, allow_negative_numbers = true, value_name = "COORDINATOR_EPOCH")]
        coordinator_epoch: Option<i32>,
    },
    /// Find hanging transactions.
    #[command(name = "find-hanging")]
    FindHanging {
        /// Broker id to search for hanging transactions.
        #[arg(long, value_name = "BROKER_ID")]
        broker_id: Option<i32>,
        /// Maximum transaction timeout in minutes to limit the scope of the search.
        #[arg(long, default_value_t = 15, value_name = "MAX_TRANSACTION_TIMEOUT")]
        max_transaction_timeout: i32,
        /// Topic name to limit search to (required if --partition is specified).
        #[arg(long, value_name = "TOPIC")]
        topic: Option<String>,
        /// Partition number.
        #[arg(long, value_name = "PARTITION")]
        partition: Option<i32>,
    },
}

/// Why the command stopped: Kafka's `printErrorAndExit` message.
struct Failed(String);

/// `message: cause. Enable debug logging for additional detail.` as Kafka's tool prints it.
fn failed(message: &str, cause: &Error) -> Failed {
    Failed(format!(
        "{message}: {}. Enable debug logging for additional detail.",
        cause_text(cause)
    ))
}

/// The Java exception message Kafka's admin client would carry for `e`.
fn cause_text(e: &Error) -> String {
    match e {
        Error::Kafka {
            message: Some(m), ..
        } if !m.is_empty() => m.clone(),
        Error::Kafka { code, .. } => strom_client::error::describe(*code).to_string(),
        other => other.to_string(),
    }
}

/// Runs `strom transactions`.
pub async fn run(args: TransactionsArgs) -> crate::Result<()> {
    let mut config = strom_client::ClientConfig::new(&args.bootstrap_server);
    config.client_id = "strom-cli".into();
    if let Some(ms) = args.timeout {
        config.request_timeout = std::time::Duration::from_millis(ms);
    }
    // Argument checks that need no broker come first, as in Kafka's tool.
    if let Err(Failed(msg)) = validate(&args.command) {
        exit_with(&msg);
    }
    let client = match strom_client::Client::connect(config).await {
        Ok(c) => c,
        Err(e) => exit_with(&format!(
            "Failed to connect to {}: {e}",
            args.bootstrap_server
        )),
    };
    let admin = Admin::new(client);
    match execute(&admin, &args.command, now_ms).await {
        Ok(out) => {
            print!("{out}");
            Ok(())
        }
        Err(Failed(msg)) => exit_with(&msg),
    }
}

fn exit_with(msg: &str) -> ! {
    eprintln!("{msg}");
    std::process::exit(1);
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn validate(cmd: &TransactionsCommand) -> Result<(), Failed> {
    match cmd {
        TransactionsCommand::Abort {
            start_offset: None,
            producer_id: None,
            ..
        } => Err(Failed("The transaction to abort must be identified either with --start-offset (for brokers on 3.0 or above) or with --producer-id, --producer-epoch, and --coordinator-epoch (for older brokers)".into())),
        TransactionsCommand::Abort {
            start_offset: None,
            producer_epoch: None,
            ..
        } => Err(Failed("Missing required argument --producer-epoch".into())),
        TransactionsCommand::Abort {
            start_offset: None,
            coordinator_epoch: None,
            ..
        } => Err(Failed("Missing required argument --coordinator-epoch".into())),
        TransactionsCommand::FindHanging {
            topic: None,
            broker_id: None,
            ..
        } => Err(Failed("The `find-hanging` command requires either --topic or --broker-id to limit the scope of the search".into())),
        TransactionsCommand::FindHanging {
            topic: None,
            partition: Some(_),
            ..
        } => Err(Failed("The --partition argument requires --topic to be provided".into())),
        _ => Ok(()),
    }
}

/// Runs one subcommand; the text for stdout. `now` is the clock the durations are measured
/// with (Kafka's tool reads `Time.SYSTEM`).
async fn execute(
    admin: &Admin,
    cmd: &TransactionsCommand,
    now: fn() -> i64,
) -> Result<String, Failed> {
    validate(cmd)?;
    match cmd {
        TransactionsCommand::List {
            duration_filter,
            transactional_id_pattern,
        } => {
            let filter = ListTransactionsFilter {
                duration_ms: *duration_filter,
                transactional_id_pattern: transactional_id_pattern.clone(),
                ..Default::default()
            };
            let by_broker = admin
                .list_transactions(&filter)
                .await
                .map_err(|e| failed("Failed to list transactions", &e))?;
            let rows = by_broker
                .iter()
                .flat_map(|(broker, listings)| {
                    listings.iter().map(move |l| {
                        vec![
                            l.transactional_id.clone(),
                            broker.to_string(),
                            l.producer_id.to_string(),
                            l.state.clone(),
                        ]
                    })
                })
                .collect::<Vec<_>>();
            Ok(table(
                &[
                    "TransactionalId",
                    "Coordinator",
                    "ProducerId",
                    "TransactionState",
                ],
                &rows,
            ))
        }
        TransactionsCommand::Describe { transactional_id } => {
            let r = admin
                .describe_transactions(std::slice::from_ref(transactional_id))
                .await
                .and_then(|mut m| {
                    m.remove(transactional_id)
                        .unwrap_or_else(|| Err(Error::Protocol("no answer".into())))
                });
            let d = r.map_err(|e| {
                failed(
                    &format!("Failed to describe transaction state of transactional-id `{transactional_id}`"),
                    &e,
                )
            })?;
            Ok(describe_table(&d, now()))
        }
        TransactionsCommand::DescribeProducers {
            broker_id,
            topic,
            partition,
        } => {
            let tp: Tp = (topic.clone(), *partition);
            let r = admin
                .describe_producers(std::slice::from_ref(&tp), *broker_id)
                .await
                .and_then(|mut m| {
                    m.remove(&tp)
                        .unwrap_or_else(|| Err(Error::Protocol("no answer".into())))
                });
            let producers = r.map_err(|e| {
                let on = match broker_id {
                    Some(b) => format!("broker {b}"),
                    None => "leader".to_string(),
                };
                failed(
                    &format!(
                        "Failed to describe producers for partition {topic}-{partition} on {on}"
                    ),
                    &e,
                )
            })?;
            Ok(producers_table(&producers))
        }
        TransactionsCommand::Abort {
            topic,
            partition,
            start_offset,
            producer_id,
            producer_epoch,
            coordinator_epoch,
        } => {
            let tp: Tp = (topic.clone(), *partition);
            let spec = match start_offset {
                Some(offset) => abort_spec_at(admin, &tp, *offset).await?,
                None => AbortTransactionSpec {
                    topic_partition: tp.clone(),
                    producer_id: producer_id.unwrap_or(-1),
                    producer_epoch: producer_epoch.unwrap_or(-1),
                    // A producer that never saw a marker reports -1; 0 is at most any real
                    // coordinator epoch, so the marker is not fenced (Kafka's tool does this).
                    coordinator_epoch: coordinator_epoch.unwrap_or(0).max(0),
                },
            };
            admin
                .abort_transaction(&spec)
                .await
                .map_err(|e| failed(&format!("Failed to abort transaction {spec}"), &e))?;
            Ok(String::new())
        }
        TransactionsCommand::FindHanging {
            broker_id,
            max_transaction_timeout,
            topic,
            partition,
        } => {
            find_hanging(
                admin,
                *broker_id,
                *max_transaction_timeout,
                topic.as_deref(),
                *partition,
                now,
            )
            .await
        }
    }
}

/// The abort spec of the open transaction starting at `offset`, from DescribeProducers.
async fn abort_spec_at(
    admin: &Admin,
    tp: &Tp,
    offset: i64,
) -> Result<AbortTransactionSpec, Failed> {
    let what = format!("{}-{}", tp.0, tp.1);
    let producers = admin
        .describe_producers(std::slice::from_ref(tp), None)
        .await
        .and_then(|mut m| {
            m.remove(tp)
                .unwrap_or_else(|| Err(Error::Protocol("no answer".into())))
        })
        .map_err(|e| {
            failed(
                &format!("Failed to validate producer state for partition {what}"),
                &e,
            )
        })?;
    let p = producers
        .iter()
        .find(|p| p.current_transaction_start_offset == Some(offset))
        .ok_or_else(|| {
            Failed(format!(
                "Could not find any open transactions starting at offset {offset} on partition {what}"
            ))
        })?;
    Ok(AbortTransactionSpec {
        topic_partition: tp.clone(),
        producer_id: p.producer_id,
        producer_epoch: p.producer_epoch as i16,
        coordinator_epoch: p.coordinator_epoch.unwrap_or(0),
    })
}

/// Kafka's find-hanging: the open transactions (DescribeProducers) older than the maximum
/// transaction timeout whose producer id no coordinator lists, or whose transactional id's
/// current transaction does not include the partition.
async fn find_hanging(
    admin: &Admin,
    broker_id: Option<i32>,
    max_timeout_min: i32,
    topic: Option<&str>,
    partition: Option<i32>,
    now: fn() -> i64,
) -> Result<String, Failed> {
    let max_timeout_ms = max_timeout_min as i64 * 60_000;
    let tps: Vec<Tp> = match (topic, partition) {
        (Some(t), Some(p)) => vec![(t.to_string(), p)],
        _ => {
            let topics: Vec<String> = match topic {
                Some(t) => vec![t.to_string()],
                None => admin
                    .list_topics()
                    .await
                    .map_err(|e| failed("Failed to list topics", &e))?,
            };
            let descs = admin
                .describe_topics(Some(&topics))
                .await
                .map_err(|e| failed(&format!("Failed to describe {} topics", topics.len()), &e))?;
            descs
                .iter()
                .flat_map(|d| {
                    d.partitions
                        .iter()
                        .filter(|p| broker_id.is_none_or(|b| p.replicas.contains(&b)))
                        .map(|p| (d.name.clone(), p.partition))
                })
                .collect()
        }
    };
    let mut candidates: Vec<(Tp, ProducerState)> = Vec::new();
    if !tps.is_empty() {
        let described = admin
            .describe_producers(&tps, broker_id)
            .await
            .map_err(|e| failed(&describe_failure(tps.len(), broker_id), &e))?;
        let at = now();
        for (tp, r) in described {
            let producers = r.map_err(|e| failed(&describe_failure(tps.len(), broker_id), &e))?;
            for p in producers {
                if p.current_transaction_start_offset.is_some()
                    && at - p.last_timestamp > max_timeout_ms
                {
                    candidates.push((tp.clone(), p));
                }
            }
        }
    }
    let mut hanging: Vec<(Tp, ProducerState)> = Vec::new();
    if !candidates.is_empty() {
        let mut pids: Vec<i64> = candidates.iter().map(|(_, p)| p.producer_id).collect();
        pids.sort_unstable();
        pids.dedup();
        let filter = ListTransactionsFilter {
            producer_ids: pids.clone(),
            ..Default::default()
        };
        let listed = admin.list_transactions(&filter).await.map_err(|e| {
            failed(
                &format!("Failed to list transactions for {} producers", pids.len()),
                &e,
            )
        })?;
        let txn_ids: BTreeMap<i64, String> = listed
            .into_values()
            .flatten()
            .filter(|l| pids.contains(&l.producer_id))
            .map(|l| (l.producer_id, l.transactional_id))
            .collect();
        let ids: Vec<String> = txn_ids.values().cloned().collect();
        let mut descriptions: BTreeMap<String, Option<TransactionDescription>> = BTreeMap::new();
        if !ids.is_empty() {
            let described = admin.describe_transactions(&ids).await.map_err(|e| {
                failed(
                    &format!("Failed to describe {} transactions", ids.len()),
                    &e,
                )
            })?;
            for (id, r) in described {
                match r {
                    Ok(d) => {
                        descriptions.insert(id, Some(d));
                    }
                    Err(e)
                        if e.code() == Some(strom_client::ErrorCode::TransactionalIdNotFound) =>
                    {
                        descriptions.insert(id, None);
                    }
                    Err(e) => {
                        return Err(failed(
                            &format!("Failed to describe {} transactions", ids.len()),
                            &e,
                        ))
                    }
                }
            }
        }
        for (tp, p) in candidates {
            let still_in_transaction = txn_ids
                .get(&p.producer_id)
                .and_then(|id| descriptions.get(id))
                .and_then(|d| d.as_ref())
                .is_some_and(|d| d.topic_partitions.contains(&tp));
            if !still_in_transaction {
                hanging.push((tp, p));
            }
        }
    }
    let at = now();
    let rows: Vec<Vec<String>> = hanging
        .iter()
        .map(|((t, part), p)| {
            vec![
                t.clone(),
                part.to_string(),
                p.producer_id.to_string(),
                p.producer_epoch.to_string(),
                p.coordinator_epoch.unwrap_or(-1).to_string(),
                p.current_transaction_start_offset.unwrap_or(-1).to_string(),
                p.last_timestamp.to_string(),
                ((at - p.last_timestamp) / 60_000).to_string(),
            ]
        })
        .collect();
    Ok(table(
        &[
            "Topic",
            "Partition",
            "ProducerId",
            "ProducerEpoch",
            "CoordinatorEpoch",
            "StartOffset",
            "LastTimestamp",
            "Duration(min)",
        ],
        &rows,
    ))
}

fn describe_failure(n: usize, broker_id: Option<i32>) -> String {
    // Kafka prints the Optional as Java renders it.
    let broker = match broker_id {
        Some(b) => format!("Optional[{b}]"),
        None => "Optional.empty".to_string(),
    };
    format!("Failed to describe producers for {n} partitions on broker {broker}")
}

/// The describe table.
fn describe_table(d: &TransactionDescription, now: i64) -> String {
    let (start, duration) = match d.transaction_start_time_ms {
        Some(s) => (s.to_string(), (now - s).to_string()),
        None => ("None".to_string(), "None".to_string()),
    };
    let tps = d
        .topic_partitions
        .iter()
        .map(|(t, p)| format!("{t}-{p}"))
        .collect::<Vec<_>>()
        .join(",");
    table(
        &[
            "CoordinatorId",
            "TransactionalId",
            "ProducerId",
            "ProducerEpoch",
            "TransactionState",
            "TransactionTimeoutMs",
            "CurrentTransactionStartTimeMs",
            "TransactionDurationMs",
            "TopicPartitions",
        ],
        &[vec![
            d.coordinator_id.to_string(),
            d.transactional_id.clone(),
            d.producer_id.to_string(),
            d.producer_epoch.to_string(),
            d.state.clone(),
            d.transaction_timeout_ms.to_string(),
            start,
            duration,
            tps,
        ]],
    )
}

/// The describe-producers table.
fn producers_table(producers: &[ProducerState]) -> String {
    let rows: Vec<Vec<String>> = producers
        .iter()
        .map(|p| {
            vec![
                p.producer_id.to_string(),
                p.producer_epoch.to_string(),
                p.coordinator_epoch.unwrap_or(-1).to_string(),
                p.last_sequence.to_string(),
                p.last_timestamp.to_string(),
                p.current_transaction_start_offset
                    .map_or_else(|| "None".to_string(), |o| o.to_string()),
            ]
        })
        .collect();
    table(
        &[
            "ProducerId",
            "ProducerEpoch",
            "LatestCoordinatorEpoch",
            "LastSequence",
            "LastTimestamp",
            "CurrentTransactionStartOffset",
        ],
        &rows,
    )
}

/// Kafka's `prettyPrintTable`: every column padded to its widest value (header included) and
/// followed by a tab, one line per row.
fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (w, v) in widths.iter_mut().zip(r) {
            *w = (*w).max(v.chars().count());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = headers.iter().map(|h| h.to_string()).collect();
    for r in std::iter::once(&header).chain(rows) {
        for (w, v) in widths.iter().zip(r) {
            out.push_str(v);
            out.extend(std::iter::repeat_n(' ', w - v.chars().count()));
            out.push('\t');
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: TransactionsArgs,
    }

    fn parse(s: &str) -> TransactionsArgs {
        Cli::try_parse_from(std::iter::once("t").chain(s.split_whitespace()))
            .unwrap()
            .args
    }

    #[test]
    fn table_pads_columns_and_ends_each_with_a_tab() {
        let t = table(&["A", "Bee"], &[vec!["xyz".into(), "1".into()]]);
        assert_eq!(t, "A  \tBee\t\nxyz\t1  \t\n");
        assert_eq!(table(&["A"], &[]), "A\t\n");
    }

    #[test]
    fn describe_prints_none_without_a_transaction() {
        let d = TransactionDescription {
            coordinator_id: 1,
            transactional_id: "t".into(),
            state: "Empty".into(),
            producer_id: 7,
            producer_epoch: 0,
            transaction_timeout_ms: 60000,
            transaction_start_time_ms: None,
            topic_partitions: vec![],
        };
        let out = describe_table(&d, 0);
        let row: Vec<&str> = out
            .lines()
            .nth(1)
            .unwrap()
            .split('\t')
            .map(str::trim)
            .collect();
        assert_eq!(
            row,
            ["1", "t", "7", "0", "Empty", "60000", "None", "None", "", ""]
        );
        let d = TransactionDescription {
            transaction_start_time_ms: Some(1000),
            topic_partitions: vec![("a".into(), 0), ("b".into(), 2)],
            ..d
        };
        let out = describe_table(&d, 1500);
        let row: Vec<&str> = out
            .lines()
            .nth(1)
            .unwrap()
            .split('\t')
            .map(str::trim)
            .collect();
        assert_eq!(row[6..9], ["1000", "500", "a-0,b-2"], "{out}");
    }

    #[test]
    fn options_are_kafkas_and_checked_as_kafka_checks_them() {
        let a = parse("--bootstrap-server h:1 find-hanging --topic t");
        assert_eq!(a.bootstrap_server, "h:1");
        assert!(matches!(
            a.command,
            TransactionsCommand::FindHanging {
                max_transaction_timeout: 15,
                ..
            }
        ));
        let a = parse("abort --topic t --partition 0 --producer-id 5 --producer-epoch 1");
        assert_eq!(
            validate(&a.command).err().map(|f| f.0),
            Some("Missing required argument --coordinator-epoch".into())
        );
        let a = parse("abort --topic t --partition 0");
        assert!(validate(&a.command).is_err());
        let a = parse("find-hanging --partition 1");
        assert!(validate(&a.command).is_err());
        let a = parse("list --duration-filter -1 --transactional-id-pattern x.*");
        assert_eq!(
            a.command,
            TransactionsCommand::List {
                duration_filter: Some(-1),
                transactional_id_pattern: Some("x.*".into())
            }
        );
    }

    #[test]
    fn causes_read_as_java_exception_messages() {
        let e = Error::Kafka {
            code: strom_client::ErrorCode::UnknownTopicOrPartition,
            message: None,
        };
        assert_eq!(
            failed("Failed", &e).0,
            "Failed: This server does not host this topic-partition.. Enable debug logging for additional detail."
        );
    }
}

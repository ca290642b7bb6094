//! `strom topics`: like `kafka-topics.sh`. Both `strom topics --create --topic T` and
//! `strom topics create --topic T` work.

use clap::{Args, Subcommand};
use strom_client::admin::AlterConfigOp;
use strom_client::{Admin, Error, ErrorCode};

use super::{connect, parse_kv, DEFAULT_BOOTSTRAP};

/// Arguments of `strom topics`.
#[derive(Debug, Args)]
#[command(about = "Create, delete, describe, list or change topics")]
pub struct TopicsArgs {
    #[command(subcommand)]
    pub action: Option<TopicsAction>,
    /// The broker(s) to connect to, `host:port[,host:port...]`.
    #[arg(long, global = true, default_value = DEFAULT_BOOTSTRAP, value_name = "HOST:PORT")]
    pub bootstrap_server: String,
    /// Create a topic.
    #[arg(long, global = true)]
    pub create: bool,
    /// List all topics.
    #[arg(long, global = true)]
    pub list: bool,
    /// Describe topics (all, or the one named by --topic).
    #[arg(long, global = true)]
    pub describe: bool,
    /// Delete a topic.
    #[arg(long, global = true)]
    pub delete: bool,
    /// Change a topic's partition count (--partitions) or configs (--config).
    #[arg(long, global = true)]
    pub alter: bool,
    /// The topic.
    #[arg(long, global = true)]
    pub topic: Option<String>,
    /// Number of partitions (create: default the broker's num.partitions; alter: new total).
    #[arg(long, global = true)]
    pub partitions: Option<i32>,
    /// Replication factor (default the broker's default.replication.factor).
    #[arg(long, global = true)]
    pub replication_factor: Option<i32>,
    /// With --create: explicit replicas, `1:2,2:3,3:1` (partitions separated by ',', the
    /// brokers of one partition by ':', the first the preferred leader).
    #[arg(long, global = true, value_name = "ASSIGNMENT", value_parser = parse_replica_assignment)]
    pub replica_assignment: Option<ReplicaAssignment>,
    /// A topic config `key=value`; repeatable.
    #[arg(long = "config", global = true, value_name = "KEY=VALUE", value_parser = parse_kv)]
    pub config: Vec<(String, String)>,
    /// With --create: do nothing if the topic exists.
    #[arg(long, global = true)]
    pub if_not_exists: bool,
    /// With --delete, --alter or --describe: do nothing if the topic does not exist.
    #[arg(long, global = true)]
    pub if_exists: bool,
    /// Leave internal topics out of --list and --describe.
    #[arg(long, global = true)]
    pub exclude_internal: bool,
}

/// The subcommand form of the actions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Subcommand)]
pub enum TopicsAction {
    /// Create a topic.
    Create,
    /// List all topics.
    List,
    /// Describe topics.
    Describe,
    /// Delete a topic.
    Delete,
    /// Change a topic's partitions or configs.
    Alter,
}

impl TopicsArgs {
    fn action(&self) -> Result<TopicsAction, String> {
        let mut flags = Vec::new();
        if self.create {
            flags.push(TopicsAction::Create);
        }
        if self.list {
            flags.push(TopicsAction::List);
        }
        if self.describe {
            flags.push(TopicsAction::Describe);
        }
        if self.delete {
            flags.push(TopicsAction::Delete);
        }
        if self.alter {
            flags.push(TopicsAction::Alter);
        }
        if let Some(a) = self.action {
            flags.retain(|f| *f != a);
            flags.push(a);
        }
        match flags[..] {
            [one] => Ok(one),
            _ => Err("Command must include exactly one action: --list, --describe, --create, --alter or --delete".into()),
        }
    }
}

/// Runs `strom topics`. Errors are printed as Kafka's TopicCommand prints them and the process
/// exits with status 1.
pub async fn run(args: TopicsArgs) -> crate::Result<()> {
    let action = match args.action() {
        Ok(a) => a,
        Err(msg) => {
            eprintln!("{msg}");
            std::process::exit(1);
        }
    };
    if let Err(e) = execute(action, &args).await {
        println!("Error while executing topic command : {e}");
        use std::io::Write;
        let _ = std::io::stdout().flush();
        std::process::exit(1);
    }
    Ok(())
}

fn require_topic(args: &TopicsArgs) -> crate::Result<&str> {
    args.topic
        .as_deref()
        .ok_or_else(|| crate::ToolError::msg("Missing required argument \"[topic]\""))
}

fn is_internal(name: &str) -> bool {
    name.starts_with("__")
}

async fn execute(action: TopicsAction, args: &TopicsArgs) -> crate::Result<()> {
    let client = connect(&args.bootstrap_server).await?;
    let admin = Admin::new(client);
    match action {
        TopicsAction::Create => {
            let topic = require_topic(args)?;
            if let Some(rf) = args.replication_factor {
                if !(1..=i16::MAX as i32).contains(&rf) {
                    return Err(crate::ToolError::msg(
                        "The replication factor must be between 1 and 32767 inclusive",
                    ));
                }
            }
            if args.partitions.is_some_and(|p| p < 1) {
                return Err(crate::ToolError::msg(
                    "The partitions must be greater than 0",
                ));
            }
            if topic.contains('.') || topic.contains('_') {
                println!("WARNING: Due to limitations in metric names, topics with a period ('.') or underscore ('_') could collide. To avoid issues it is best to use either, but not both.");
            }
            let r = match &args.replica_assignment {
                Some(assignment) => {
                    if args.partitions.is_some() || args.replication_factor.is_some() {
                        return Err(crate::ToolError::msg("Option \"[replica-assignment]\" can't be used with option \"[partitions]\" or \"[replication-factor]\""));
                    }
                    admin
                        .create_topic_with_assignments(
                            topic,
                            assignment.0.clone(),
                            &args.config,
                            false,
                        )
                        .await
                }
                None => {
                    admin
                        .create_topic(
                            topic,
                            args.partitions.unwrap_or(-1),
                            args.replication_factor.map_or(-1, |r| r as i16),
                            &args.config,
                            false,
                        )
                        .await
                }
            };
            match r {
                Ok(()) => println!("Created topic {topic}."),
                Err(e) if args.if_not_exists && e.code() == Some(ErrorCode::TopicAlreadyExists) => {
                }
                Err(e) => return Err(topic_error(e, topic).into()),
            }
        }
        TopicsAction::List => {
            for name in admin.list_topics().await? {
                if args.exclude_internal && is_internal(&name) {
                    continue;
                }
                if args.topic.as_deref().is_some_and(|t| t != name) {
                    continue;
                }
                println!("{name}");
            }
        }
        TopicsAction::Describe => {
            let names = selected_topics(&admin, args).await?;
            if names.is_empty() {
                return Ok(());
            }
            let descs = admin.describe_topics(Some(&names)).await?;
            for d in descs {
                let configs = match admin.describe_topic_configs(&d.name).await {
                    // kafka-topics.sh lists them as the AdminClient's `Config` holds them: in a
                    // Java HashMap filled in the order of the response.
                    Ok(entries) => strom_protocol::java::hash_map_order(entries, |c| {
                        strom_protocol::java::string_hash(&c.name)
                    })
                    .into_iter()
                    .filter(|c| !c.is_default)
                    .map(|c| format!("{}={}", c.name, c.value.unwrap_or_default()))
                    .collect::<Vec<_>>()
                    .join(","),
                    Err(Error::UnsupportedVersion(_)) => String::new(),
                    Err(e) => return Err(e.into()),
                };
                let rf = d.partitions.first().map_or(0, |p| p.replicas.len());
                let mut line = format!("Topic: {}", d.name);
                if !d.topic_id.is_nil() {
                    line.push_str(&format!(
                        "\tTopicId: {}",
                        strom_client::topic_id_string(&d.topic_id)
                    ));
                }
                line.push_str(&format!(
                    "\tPartitionCount: {}\tReplicationFactor: {}\tConfigs: {}",
                    d.partitions.len(),
                    rf,
                    configs
                ));
                println!("{line}");
                for p in &d.partitions {
                    let leader = if p.leader >= 0 {
                        p.leader.to_string()
                    } else {
                        "none".to_string()
                    };
                    println!(
                        "\tTopic: {}\tPartition: {}\tLeader: {}\tReplicas: {}\tIsr: {}\tElr: N/A\tLastKnownElr: N/A",
                        d.name,
                        p.partition,
                        leader,
                        join(&p.replicas),
                        join(&p.isr)
                    );
                }
            }
        }
        TopicsAction::Delete => {
            let names = selected_topics(&admin, args).await?;
            if names.is_empty() {
                return Ok(());
            }
            admin.delete_topics(&names).await?;
        }
        TopicsAction::Alter => {
            let names = selected_topics(&admin, args).await?;
            if args.partitions.is_none() && args.config.is_empty() {
                return Err(crate::ToolError::msg(
                    "--alter requires --partitions or --config",
                ));
            }
            for name in &names {
                if let Some(p) = args.partitions {
                    admin
                        .create_partitions(name, p, false)
                        .await
                        .map_err(|e| topic_error(e, name))?;
                }
                if !args.config.is_empty() {
                    let ops: Vec<AlterConfigOp> = args
                        .config
                        .iter()
                        .map(|(k, v)| AlterConfigOp::Set(k.clone(), v.clone()))
                        .collect();
                    admin
                        .incremental_alter_topic_configs(name, &ops, false)
                        .await?;
                }
            }
        }
    }
    Ok(())
}

/// The topics an action applies to: `--topic` (which must exist unless --if-exists) or all.
async fn selected_topics(admin: &Admin, args: &TopicsArgs) -> crate::Result<Vec<String>> {
    let all = admin.list_topics().await?;
    let names: Vec<String> = all
        .into_iter()
        .filter(|n| !(args.exclude_internal && is_internal(n)))
        .filter(|n| args.topic.as_deref().is_none_or(|t| t == n))
        .collect();
    if let Some(t) = &args.topic {
        if names.is_empty() && !args.if_exists {
            return Err(crate::ToolError::msg(format!(
                "Topic '{t}' does not exist as expected"
            )));
        }
    }
    Ok(names)
}

fn topic_error(e: Error, topic: &str) -> Error {
    match e.code() {
        Some(ErrorCode::TopicAlreadyExists) if !matches!(&e, Error::Kafka { message: Some(m), .. } if !m.is_empty()) => {
            Error::Kafka {
                code: ErrorCode::TopicAlreadyExists,
                message: Some(format!("Topic '{topic}' already exists.")),
            }
        }
        _ => e,
    }
}

/// Parses Kafka's `--replica-assignment`: `1:2,2:3,3:1`.
fn parse_replica_assignment(s: &str) -> Result<ReplicaAssignment, String> {
    let parts: Vec<Vec<i32>> = s
        .split(',')
        .map(|p| {
            p.split(':')
                .map(|b| {
                    b.trim()
                        .parse::<i32>()
                        .map_err(|_| format!("invalid broker id {b:?} in replica assignment"))
                })
                .collect::<Result<Vec<i32>, String>>()
        })
        .collect::<Result<_, _>>()?;
    for (i, p) in parts.iter().enumerate() {
        let mut seen = std::collections::HashSet::new();
        if let Some(dup) = p.iter().find(|b| !seen.insert(**b)) {
            return Err(format!(
                "Partition replica lists may not contain duplicate entries: partition {i} lists broker {dup} twice"
            ));
        }
        if p.len() != parts[0].len() {
            return Err(format!(
                "Partition {i} has different replication factor: {}",
                p.len()
            ));
        }
    }
    Ok(ReplicaAssignment(parts))
}

/// `--replica-assignment`: the replicas of partition `i` at index `i`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaAssignment(pub Vec<Vec<i32>>);

fn join(ids: &[i32]) -> String {
    ids.iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        t: TopicsArgs,
    }

    fn parse(args: &[&str]) -> TopicsArgs {
        let mut v = vec!["topics"];
        v.extend_from_slice(args);
        Cli::try_parse_from(v).unwrap().t
    }

    #[test]
    fn both_forms_parse() {
        let a = parse(&[
            "--bootstrap-server",
            "h:1",
            "--create",
            "--topic",
            "t",
            "--partitions",
            "3",
        ]);
        assert_eq!(a.action().unwrap(), TopicsAction::Create);
        assert_eq!(a.partitions, Some(3));
        assert_eq!(a.bootstrap_server, "h:1");
        let b = parse(&[
            "create",
            "--bootstrap-server",
            "h:2",
            "--topic",
            "t",
            "--config",
            "a=b",
        ]);
        assert_eq!(b.action().unwrap(), TopicsAction::Create);
        assert_eq!(b.bootstrap_server, "h:2");
        assert_eq!(b.config, vec![("a".to_string(), "b".to_string())]);
        let c = parse(&["list"]);
        assert_eq!(c.action().unwrap(), TopicsAction::List);
        assert_eq!(c.bootstrap_server, DEFAULT_BOOTSTRAP);
        assert!(parse(&["--list", "--describe"]).action().is_err());
        assert!(parse(&[]).action().is_err());
    }

    #[test]
    fn replica_assignment_parses() {
        let a = parse(&[
            "create",
            "--topic",
            "t",
            "--replica-assignment",
            "1:2,2:3,3:1",
        ]);
        assert_eq!(
            a.replica_assignment,
            Some(ReplicaAssignment(vec![vec![1, 2], vec![2, 3], vec![3, 1]]))
        );
        assert!(parse_replica_assignment("1:1").is_err());
        assert!(parse_replica_assignment("1:2,3").is_err());
        assert!(parse_replica_assignment("1:x").is_err());
    }
}

//! `strom groups`: like Kafka 4.4's `kafka-consumer-groups.sh`. Both Kafka's flag form
//! (`strom groups --describe --group g --members`) and subcommands (`strom groups describe g
//! --members`) work; the output (columns, widths, messages, which of them go to stderr) is
//! Kafka's, so scripts written for the Kafka tool read it unchanged. `--format json` (list and
//! describe) is Strom's addition for scripts that would rather not parse columns.
//!
//! The table layouts live in [`super::groups_format`]; this file parses the command line and
//! gathers the data with the batched admin calls of `strom_client::admin_groups`.

use std::collections::{BTreeMap, BTreeSet};

use clap::{Args, Subcommand, ValueEnum};
use strom_client::admin_groups::{GroupDescription, OffsetSpec, Tp};
use strom_client::{Admin, Error};

use super::groups_format::{self as fmt, OffsetRow, Output};
use super::{IsolationLevel, DEFAULT_BOOTSTRAP};

mod reset;
use reset::reset_offsets;

/// Arguments of `strom groups`.
#[derive(Debug, Args)]
#[command(about = "List, describe and delete consumer groups; reset or delete their offsets")]
pub struct GroupsArgs {
    #[command(subcommand)]
    pub action: Option<GroupsAction>,
    /// The broker(s) to connect to, `host:port[,host:port...]`.
    #[arg(long, global = true, default_value = DEFAULT_BOOTSTRAP, value_name = "HOST:PORT")]
    pub bootstrap_server: String,
    /// List all consumer groups.
    #[arg(long, global = true)]
    pub list: bool,
    /// Describe consumer groups and their offset lag.
    #[arg(long, global = true)]
    pub describe: bool,
    /// Delete consumer groups.
    #[arg(long, global = true)]
    pub delete: bool,
    /// Reset the offsets of inactive consumer groups.
    #[arg(long, global = true)]
    pub reset_offsets: bool,
    /// Delete offsets of one consumer group.
    #[arg(long, global = true)]
    pub delete_offsets: bool,
    /// The consumer group (repeatable).
    #[arg(long, global = true, value_name = "GROUP")]
    pub group: Vec<String>,
    /// Apply to all consumer groups.
    #[arg(long, global = true)]
    pub all_groups: bool,
    /// With --describe: the members of the groups.
    #[arg(long, global = true)]
    pub members: bool,
    /// With --describe: more columns (leader epochs, member epochs and target assignments).
    #[arg(long, global = true)]
    pub verbose: bool,
    /// With --describe: the groups' partitions, offsets and lag (the default).
    #[arg(long, global = true)]
    pub offsets: bool,
    /// With --describe: the groups' state. With --list: show states, or list only the groups
    /// in these states (`stable,empty`).
    #[arg(long, global = true, num_args = 0..=1, default_missing_value = "", value_name = "STATES")]
    pub state: Option<String>,
    /// With --list: show types, or list only the groups of these types (`classic,consumer`).
    #[arg(long = "type", global = true, num_args = 0..=1, default_missing_value = "", value_name = "TYPES")]
    pub group_type: Option<String>,
    /// The topic (`topic` or `topic:0,1,2` for reset-offsets and delete-offsets; repeatable).
    #[arg(long, global = true, value_name = "TOPIC")]
    pub topic: Vec<String>,
    /// With --reset-offsets: all topics the group has offsets for.
    #[arg(long, global = true)]
    pub all_topics: bool,
    /// Reset to the earliest offset.
    #[arg(long, global = true)]
    pub to_earliest: bool,
    /// Reset to the latest offset.
    #[arg(long, global = true)]
    pub to_latest: bool,
    /// Reset to this offset (clamped to the partition's range).
    #[arg(
        long,
        global = true,
        allow_negative_numbers = true,
        value_name = "OFFSET"
    )]
    pub to_offset: Option<i64>,
    /// Reset to the first offset at or after this time, `YYYY-MM-DDTHH:mm:SS.sss[Z|+hh:mm]`
    /// (UTC when no zone is given).
    #[arg(long, global = true, value_name = "DATETIME")]
    pub to_datetime: Option<String>,
    /// Reset to the first offset at or after now minus this duration, `PnDTnHnMnS`.
    #[arg(long, global = true, value_name = "DURATION")]
    pub by_duration: Option<String>,
    /// Move the committed offsets by N (may be negative; clamped to the partition's range).
    #[arg(long, global = true, allow_negative_numbers = true, value_name = "N")]
    pub shift_by: Option<i64>,
    /// Reset to the committed offset (the latest where there is none).
    #[arg(long, global = true)]
    pub to_current: bool,
    /// Reset to the offsets in this CSV file (`topic,partition,offset` for one group,
    /// `group,topic,partition,offset` for several), as written by --export.
    #[arg(long, global = true, value_name = "FILE")]
    pub from_file: Option<std::path::PathBuf>,
    /// With --reset-offsets: print the plan as CSV (for --from-file) instead of a table.
    #[arg(long, global = true)]
    pub export: bool,
    /// With --reset-offsets: only show the new offsets (the default).
    #[arg(long, global = true)]
    pub dry_run: bool,
    /// With --reset-offsets: commit the new offsets.
    #[arg(long, global = true)]
    pub execute: bool,
    /// With --describe: the isolation level of the end offsets the lag is measured to.
    /// Kafka's tool reads them read_uncommitted (the high watermark, the default);
    /// read_committed measures to the last stable offset, the lag a read_committed consumer
    /// has while transactions are open (Strom's addition).
    #[arg(long, global = true, value_enum, default_value_t = IsolationLevel::ReadUncommitted)]
    pub isolation_level: IsolationLevel,
    /// Output format of list and describe.
    #[arg(long, global = true, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Request timeout in ms.
    #[arg(long, global = true, value_name = "MS")]
    pub timeout: Option<u64>,
}

/// `--format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Text,
    Json,
}

/// The subcommand form of the actions.
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum GroupsAction {
    /// List consumer groups.
    List,
    /// Describe consumer groups.
    Describe {
        /// Groups to describe (or --group, or --all-groups).
        #[arg(value_name = "GROUP")]
        groups: Vec<String>,
    },
    /// Delete consumer groups.
    Delete {
        /// Groups to delete (or --group, or --all-groups).
        #[arg(value_name = "GROUP")]
        groups: Vec<String>,
    },
    /// Reset the offsets of inactive consumer groups.
    #[command(name = "reset-offsets")]
    ResetOffsets,
    /// Delete offsets of a consumer group.
    #[command(name = "delete-offsets")]
    DeleteOffsets,
}

/// The action, whichever form named it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    List,
    Describe,
    Delete,
    ResetOffsets,
    DeleteOffsets,
}

impl GroupsArgs {
    fn action(&self) -> Result<Action, String> {
        let mut flags = Vec::new();
        if self.list {
            flags.push(Action::List);
        }
        if self.describe {
            flags.push(Action::Describe);
        }
        if self.delete {
            flags.push(Action::Delete);
        }
        if self.reset_offsets {
            flags.push(Action::ResetOffsets);
        }
        if self.delete_offsets {
            flags.push(Action::DeleteOffsets);
        }
        if let Some(a) = &self.action {
            let a = match a {
                GroupsAction::List => Action::List,
                GroupsAction::Describe { .. } => Action::Describe,
                GroupsAction::Delete { .. } => Action::Delete,
                GroupsAction::ResetOffsets => Action::ResetOffsets,
                GroupsAction::DeleteOffsets => Action::DeleteOffsets,
            };
            flags.retain(|f| *f != a);
            flags.push(a);
        }
        match flags[..] {
            [one] => Ok(one),
            _ => Err("Command must include exactly one action: --list, --describe, --delete, --reset-offsets, --delete-offsets".into()),
        }
    }

    /// `--group` values plus the subcommand's positional groups, in order, without repeats.
    fn groups(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let positional = match &self.action {
            Some(GroupsAction::Describe { groups }) | Some(GroupsAction::Delete { groups }) => {
                groups.clone()
            }
            _ => Vec::new(),
        };
        for g in self.group.iter().chain(positional.iter()) {
            if !out.contains(g) {
                out.push(g.clone());
            }
        }
        out
    }
}

/// Runs `strom groups`. As Kafka's tool: usage errors print the message to stderr and exit
/// with status 1; failures while executing print `Error: ...` to stdout.
pub async fn run(args: GroupsArgs) -> crate::Result<()> {
    let action = match args.action().and_then(|a| validate(a, &args).map(|()| a)) {
        Ok(a) => a,
        Err(msg) => usage_exit(&msg),
    };
    let mut config = strom_client::ClientConfig::new(&args.bootstrap_server);
    config.client_id = "strom-cli".into();
    if let Some(ms) = args.timeout {
        config.request_timeout = std::time::Duration::from_millis(ms);
    }
    let client = match strom_client::Client::connect(config).await {
        Ok(c) => c,
        Err(e) => {
            print_error(&format!(
                "Executing consumer group command failed due to {e}"
            ));
            std::process::exit(1);
        }
    };
    let admin = Admin::new(client);
    let out = match execute(action, &args, &admin).await {
        Ok(out) => out,
        Err(Failure::Usage(msg)) => usage_exit(&msg),
        Err(Failure::Failed(msg)) => {
            let mut o = Output::default();
            o.error(&format!(
                "Executing consumer group command failed due to {msg}"
            ));
            o
        }
    };
    out.emit();
    Ok(())
}

fn usage_exit(msg: &str) -> ! {
    eprintln!("{msg}");
    std::process::exit(1);
}

fn print_error(msg: &str) {
    println!("\nError: {msg}");
}

/// Why a command stopped.
#[derive(Debug)]
enum Failure {
    /// Bad arguments (exit 1).
    Usage(String),
    /// The command failed while executing (`Error: Executing consumer group command failed due
    /// to ...`).
    Failed(String),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure::Failed(fmt::error_text(&e))
    }
}

/// The option checks Kafka's ConsumerGroupCommandOptions makes before connecting.
fn validate(action: Action, a: &GroupsArgs) -> Result<(), String> {
    let groups = a.groups();
    let scenarios = [
        a.to_offset.is_some(),
        a.to_earliest,
        a.to_latest,
        a.shift_by.is_some(),
        a.to_datetime.is_some(),
        a.by_duration.is_some(),
        a.to_current,
        a.from_file.is_some(),
    ]
    .iter()
    .filter(|x| **x)
    .count();
    match action {
        Action::List => {
            if !groups.is_empty() || a.all_groups {
                return Err(
                    "Option [list] does not take a value for [group] or [all-groups]".into(),
                );
            }
        }
        Action::Describe | Action::Delete => {
            if groups.is_empty() && !a.all_groups {
                return Err(format!(
                    "Option [{}] takes one of these options: [all-groups], [group]",
                    if action == Action::Describe {
                        "describe"
                    } else {
                        "delete"
                    }
                ));
            }
            if !groups.is_empty() && a.all_groups {
                return Err("Option [all-groups] can't be used with option [group]".into());
            }
        }
        Action::ResetOffsets => {
            if groups.is_empty() && !a.all_groups {
                return Err(
                    "Option [reset-offsets] takes one of these options: [all-groups], [group]"
                        .into(),
                );
            }
            if a.dry_run && a.execute {
                return Err(
                    "Option [reset-offsets] only accepts one of [execute], [dry-run]".into(),
                );
            }
            if scenarios == 0 {
                return Err("Option [reset-offsets] requires one of the following scenarios: [to-datetime], [by-duration], [to-earliest], [to-latest], [shift-by], [from-file], [to-current], [to-offset]".into());
            }
            if scenarios > 1 {
                return Err("Option [reset-offsets] takes only one of the scenarios: [to-datetime], [by-duration], [to-earliest], [to-latest], [shift-by], [from-file], [to-current], [to-offset]".into());
            }
            if a.all_topics && !a.topic.is_empty() {
                return Err("Option [all-topics] can't be used with option [topic]".into());
            }
            if !a.all_topics && a.topic.is_empty() && a.from_file.is_none() {
                return Err(
                    "One of the reset scopes should be defined: --all-topics, --topic.".into(),
                );
            }
        }
        Action::DeleteOffsets => {
            if groups.len() != 1 || a.all_groups {
                return Err(
                    "Option [delete-offsets] takes the [group] option once, and not [all-groups]"
                        .into(),
                );
            }
            if a.topic.is_empty() {
                return Err(
                    "Option [delete-offsets] takes the following options: [topic], [group]".into(),
                );
            }
        }
    }
    if action != Action::Describe && (a.members || a.offsets) {
        return Err("Option [members] and [offsets] may be used with [describe] only".into());
    }
    if action == Action::Describe
        && [a.members, a.offsets, a.state.is_some()]
            .iter()
            .filter(|x| **x)
            .count()
            > 1
    {
        return Err(
            "Option [describe] takes at most one of these options: [members], [offsets], [state]"
                .into(),
        );
    }
    if a.isolation_level != IsolationLevel::ReadUncommitted && action != Action::Describe {
        return Err("Option [isolation-level] may be used with [describe] only".into());
    }
    if a.group_type.is_some() && action != Action::List {
        return Err("Option [type] may be used with [list] only".into());
    }
    if a.format == Format::Json && !matches!(action, Action::List | Action::Describe) {
        return Err("--format json is for list and describe only".into());
    }
    if let Some(s) = &a.state {
        if action == Action::Describe && !s.is_empty() {
            return Err("Option [describe] with [state] does not take a value".into());
        }
        fmt::parse_states(s)?;
    }
    if let Some(t) = &a.group_type {
        fmt::parse_types(t)?;
    }
    Ok(())
}

async fn execute(action: Action, a: &GroupsArgs, admin: &Admin) -> Result<Output, Failure> {
    match action {
        Action::List => list(a, admin).await,
        Action::Describe => describe(a, admin).await,
        Action::Delete => delete(a, admin).await,
        Action::ResetOffsets => reset_offsets(a, admin).await,
        Action::DeleteOffsets => delete_offsets(a, admin).await,
    }
}

/// The consumer groups (classic groups of the consumer protocol type or of none, which only
/// commit offsets, and consumer-protocol groups), as `listConsumerGroups`.
async fn consumer_group_listings(
    admin: &Admin,
    states: &[String],
    types: &[String],
) -> Result<Vec<strom_client::admin_groups::GroupListing>, Failure> {
    let all = admin.list_groups(states, types).await?;
    Ok(all
        .into_iter()
        .filter(|g| g.protocol_type == "consumer" || g.protocol_type.is_empty())
        .collect())
}

async fn list(a: &GroupsArgs, admin: &Admin) -> Result<Output, Failure> {
    let states = a
        .state
        .as_deref()
        .map(fmt::parse_states)
        .transpose()
        .map_err(Failure::Usage)?
        .unwrap_or_default();
    let types = a
        .group_type
        .as_deref()
        .map(fmt::parse_types)
        .transpose()
        .map_err(Failure::Usage)?
        .unwrap_or_default();
    let groups = consumer_group_listings(admin, &states, &types).await?;
    Ok(fmt::list(
        &groups,
        a.group_type.is_some(),
        a.state.is_some(),
        a.format == Format::Json,
    ))
}

async fn target_groups(a: &GroupsArgs, admin: &Admin) -> Result<Vec<String>, Failure> {
    if a.all_groups {
        Ok(consumer_group_listings(admin, &[], &[])
            .await?
            .into_iter()
            .map(|g| g.group_id)
            .collect())
    } else {
        Ok(a.groups())
    }
}

/// Describes groups; a group that does not exist fails the command, as in Kafka 4.4.
async fn describe_all(
    admin: &Admin,
    groups: &[String],
) -> Result<BTreeMap<String, GroupDescription>, Failure> {
    let mut out = BTreeMap::new();
    for (g, r) in admin.describe_consumer_groups(groups).await? {
        let d = r?;
        if d.state == "Dead" {
            return Err(Failure::Failed(format!(
                "org.apache.kafka.common.errors.GroupIdNotFoundException: Group {g} not found."
            )));
        }
        out.insert(g, d);
    }
    Ok(out)
}

async fn describe(a: &GroupsArgs, admin: &Admin) -> Result<Output, Failure> {
    let groups = target_groups(a, admin).await?;
    let descs = describe_all(admin, &groups).await?;
    let json = a.format == Format::Json;
    if a.members {
        return Ok(fmt::members(&descs, a.verbose, json));
    }
    if a.state.is_some() {
        return Ok(fmt::states(&descs, a.verbose, json));
    }
    // Offsets: the committed offsets of all groups in one batch, then the log end offsets of
    // all their partitions in one batch.
    let names: Vec<String> = descs.keys().cloned().collect();
    let committed = admin.list_group_offsets(&names).await?;
    let mut per_group: BTreeMap<String, Vec<OffsetRow>> = BTreeMap::new();
    let mut all_tps: BTreeSet<Tp> = BTreeSet::new();
    for (g, d) in &descs {
        let offsets = match committed.get(g) {
            Some(Ok(m)) => m.clone(),
            Some(Err(e)) => return Err(Failure::Failed(fmt::error_text(e))),
            None => BTreeMap::new(),
        };
        let rows = fmt::offset_rows(d, &offsets);
        for r in &rows {
            if let (Some(t), Some(p)) = (&r.topic, r.partition) {
                all_tps.insert((t.clone(), p));
            }
        }
        per_group.insert(g.clone(), rows);
    }
    let tps: Vec<Tp> = all_tps.into_iter().collect();
    // read_committed: the LSO, so LAG is what a read_committed consumer still has to read.
    let ends = admin
        .list_offsets_isolated(&tps, OffsetSpec::Latest, a.isolation_level.wire())
        .await?;
    for rows in per_group.values_mut() {
        for r in rows.iter_mut() {
            if let (Some(t), Some(p)) = (&r.topic, r.partition) {
                r.log_end_offset = match ends.get(&(t.clone(), p)) {
                    Some(Ok(o)) => Some(o.offset),
                    _ => None,
                };
            }
        }
    }
    Ok(fmt::offsets(&descs, &per_group, a.verbose, json))
}

async fn delete(a: &GroupsArgs, admin: &Admin) -> Result<Output, Failure> {
    let groups = target_groups(a, admin).await?;
    let results = admin.delete_groups(&groups).await?;
    // Kafka reports in its map's order; ours is the order the groups were named.
    let ordered: Vec<(String, Result<(), String>)> = groups
        .iter()
        .filter_map(|g| {
            results.get(g).map(|r| {
                (
                    g.clone(),
                    match r {
                        Ok(()) => Ok(()),
                        Err(e) => Err(fmt::exception_text(e)),
                    },
                )
            })
        })
        .collect();
    Ok(fmt::delete(&ordered))
}

/// Parses `topic:0,1,2`.
fn parse_topic_partitions(arg: &str) -> Result<Vec<Tp>, Failure> {
    let parts: Vec<&str> = arg.split(':').collect();
    if parts.len() != 2 || parts[0].is_empty() {
        return Err(Failure::Usage(format!(
            "Invalid topic arg '{arg}', expected topic name and partitions"
        )));
    }
    parts[1]
        .split(',')
        .map(|p| {
            p.trim()
                .parse::<i32>()
                .map(|p| (parts[0].to_string(), p))
                .map_err(|_| {
                    Failure::Usage(format!(
                        "Invalid partition '{p}' specified in topic arg '{arg}''"
                    ))
                })
        })
        .collect()
}

/// The partitions named by `--topic` arguments: explicit `topic:0,1` lists, and every
/// partition of the bare topic names (which must exist).
async fn topic_partitions(admin: &Admin, args: &[String]) -> Result<Vec<Tp>, Failure> {
    let mut out = Vec::new();
    let mut bare = Vec::new();
    for t in args {
        if t.contains(':') {
            out.extend(parse_topic_partitions(t)?);
        } else {
            bare.push(t.clone());
        }
    }
    if !bare.is_empty() {
        for d in admin.describe_topics(Some(&bare)).await? {
            out.extend(d.partitions.iter().map(|p| (d.name.clone(), p.partition)));
        }
    }
    Ok(out)
}

async fn delete_offsets(a: &GroupsArgs, admin: &Admin) -> Result<Output, Failure> {
    let group = a.groups().into_iter().next().unwrap_or_default();
    let mut partitions: Vec<Tp> = Vec::new();
    let mut rows: Vec<(String, Option<i32>, Option<String>)> = Vec::new();
    let mut bare = Vec::new();
    for t in &a.topic {
        if t.contains(':') {
            partitions.extend(parse_topic_partitions(t)?);
        } else {
            bare.push(t.clone());
        }
    }
    for t in bare {
        match admin.describe_topics(Some(std::slice::from_ref(&t))).await {
            Ok(ds) => {
                for d in ds {
                    partitions.extend(d.partitions.iter().map(|p| (d.name.clone(), p.partition)));
                }
            }
            // A topic that cannot be described is a row of its own ("Not Provided").
            Err(e) => rows.push((t, None, Some(fmt::exception_text(&e)))),
        }
    }
    partitions.sort();
    partitions.dedup();
    let result = admin.delete_group_offsets(&group, &partitions).await?;
    let top = match &result {
        Ok(m) => m
            .values()
            .find_map(|r| r.as_ref().err().and_then(|e| e.code())),
        Err(e) => e.code(),
    };
    for tp in &partitions {
        let status = match &result {
            Err(e) => Some(fmt::exception_text(e)),
            Ok(m) => match m.get(tp) {
                Some(Err(e)) => Some(fmt::exception_text(e)),
                _ => None,
            },
        };
        rows.push((tp.0.clone(), Some(tp.1), status));
    }
    let top_err = result.as_ref().err();
    Ok(fmt::delete_offsets(&group, top, top_err, &rows))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        g: GroupsArgs,
    }

    fn parse(args: &[&str]) -> GroupsArgs {
        let mut v = vec!["groups"];
        v.extend_from_slice(args);
        Cli::try_parse_from(v).unwrap().g
    }

    #[test]
    fn both_forms_parse() {
        let a = parse(&["--describe", "--group", "g", "--members", "--verbose"]);
        assert_eq!(a.action().unwrap(), Action::Describe);
        assert_eq!(a.groups(), vec!["g"]);
        assert!(a.members && a.verbose);
        let b = parse(&["describe", "g1", "g2", "--state"]);
        assert_eq!(b.action().unwrap(), Action::Describe);
        assert_eq!(b.groups(), vec!["g1", "g2"]);
        assert_eq!(b.state.as_deref(), Some(""));
        let c = parse(&["list", "--state", "stable,empty", "--type"]);
        assert_eq!(c.action().unwrap(), Action::List);
        assert_eq!(c.state.as_deref(), Some("stable,empty"));
        assert_eq!(c.group_type.as_deref(), Some(""));
        let d = parse(&[
            "reset-offsets",
            "--group",
            "g",
            "--shift-by",
            "-3",
            "--topic",
            "t:0,1",
        ]);
        assert_eq!(d.action().unwrap(), Action::ResetOffsets);
        assert_eq!(d.shift_by, Some(-3));
        assert!(parse(&["--list", "--describe"]).action().is_err());
        assert!(parse(&[]).action().is_err());
    }

    #[test]
    fn option_checks() {
        let v = |args: &[&str]| {
            let a = parse(args);
            a.action().and_then(|act| validate(act, &a))
        };
        assert!(v(&["--describe"]).is_err());
        assert!(v(&["--describe", "--all-groups", "--group", "g"]).is_err());
        assert!(v(&["--reset-offsets", "--group", "g", "--all-topics"]).is_err());
        assert_eq!(
            v(&["--reset-offsets", "--group", "g", "--to-earliest"]).unwrap_err(),
            "One of the reset scopes should be defined: --all-topics, --topic."
        );
        assert!(v(&[
            "--reset-offsets",
            "--group",
            "g",
            "--to-earliest",
            "--to-latest",
            "--all-topics"
        ])
        .is_err());
        assert!(v(&[
            "--reset-offsets",
            "--group",
            "g",
            "--to-earliest",
            "--all-topics"
        ])
        .is_ok());
        assert!(v(&["--delete-offsets", "--group", "g"]).is_err());
        assert!(v(&["--delete-offsets", "--group", "g", "--topic", "t"]).is_ok());
        assert!(v(&["--list", "--state", "bogus"]).is_err());
        assert!(v(&["--list", "--state", "STABLE,empty"]).is_ok());
        assert!(v(&["--describe", "--all-groups", "--members", "--state"]).is_err());
        assert!(v(&["--delete", "--group", "g", "--format", "json"]).is_err());
    }

    #[test]
    fn topic_partition_args() {
        let tps = parse_topic_partitions("t:0,2").unwrap();
        assert_eq!(tps, vec![("t".to_string(), 0), ("t".to_string(), 2)]);
        assert!(parse_topic_partitions("t:x").is_err());
        assert!(parse_topic_partitions("t:1:2").is_err());
        assert!(parse_topic_partitions(":1").is_err());
    }
}

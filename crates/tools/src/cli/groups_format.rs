//! The output of `strom groups`: Kafka 4.4's `kafka-consumer-groups.sh` tables (the same
//! columns, minimum widths, blank lines and messages, and the same split between stdout and
//! stderr), its JSON alternative, and the parsers for its state/type lists, datetimes and
//! durations. Everything here is pure, so the layouts are unit-tested without a broker.

use std::collections::BTreeMap;
use std::io::Write;

use serde_json::{json, Value};
use strom_client::admin_groups::{
    CommittedOffset, GroupDescription, GroupListing, GroupType, MemberDescription, Tp,
};
use strom_client::{Error, ErrorCode};

mod time;
pub use time::{parse_datetime, parse_duration_ms};

/// What a command prints, in order: `(to_stderr, text)` chunks.
#[derive(Debug, Default)]
pub struct Output {
    chunks: Vec<(bool, String)>,
}

impl Output {
    /// Text for stdout, as is.
    pub fn out(&mut self, s: &str) {
        self.chunks.push((false, s.to_string()));
    }
    /// A stdout line.
    pub fn line(&mut self, s: &str) {
        self.chunks.push((false, format!("{s}\n")));
    }
    /// A stderr line.
    pub fn err_line(&mut self, s: &str) {
        self.chunks.push((true, format!("{s}\n")));
    }
    /// Kafka's `printError`: a blank line and `Error: msg` on stdout.
    pub fn error(&mut self, msg: &str) {
        self.line(&format!("\nError: {msg}"));
    }
    /// Appends another output.
    pub fn append(&mut self, other: Output) {
        self.chunks.extend(other.chunks);
    }
    /// Everything that goes to stdout.
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn stdout(&self) -> String {
        self.chunks
            .iter()
            .filter(|c| !c.0)
            .map(|c| c.1.as_str())
            .collect()
    }
    /// Everything that goes to stderr.
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn stderr(&self) -> String {
        self.chunks
            .iter()
            .filter(|c| c.0)
            .map(|c| c.1.as_str())
            .collect()
    }
    /// Writes the chunks to the process's stdout and stderr.
    pub fn emit(&self) {
        let mut out = std::io::stdout().lock();
        let mut err = std::io::stderr().lock();
        for (is_err, s) in &self.chunks {
            // A closed pipe (e.g. `| head`) is not an error worth reporting.
            let _ = if *is_err {
                err.write_all(s.as_bytes())
            } else {
                out.write_all(s.as_bytes())
            };
        }
        let _ = out.flush();
        let _ = err.flush();
    }
}

const MISSING: &str = "-";

/// The states `--state` accepts, in the order Kafka's message lists them.
const STATES: [&str; 7] = [
    "Assigning",
    "PreparingRebalance",
    "Dead",
    "Stable",
    "Empty",
    "Reconciling",
    "CompletingRebalance",
];

/// Parses `--state stable,empty` (case-insensitive) into Kafka's names; "" is no filter.
pub fn parse_states(input: &str) -> Result<Vec<String>, String> {
    if input.is_empty() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for s in input.split(',') {
        match STATES.iter().find(|k| k.eq_ignore_ascii_case(s.trim())) {
            Some(k) => out.push(k.to_string()),
            None => {
                return Err(format!(
                    "Invalid state list '{input}'. Valid states are: {}",
                    STATES.join(", ")
                ))
            }
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// Parses `--type classic,consumer` (case-insensitive) into ListGroups' names; "" is none.
pub fn parse_types(input: &str) -> Result<Vec<String>, String> {
    if input.is_empty() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for t in input.split(',') {
        let t = t.trim().to_ascii_lowercase();
        if t != "consumer" && t != "classic" {
            return Err(format!(
                "Invalid types list '{input}'. Valid types are: Consumer, Classic"
            ));
        }
        out.push(t);
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// Kafka's exception class and default message for the errors the group calls return, so
/// errors read as the Kafka tool prints them.
fn exception(code: ErrorCode) -> Option<(&'static str, &'static str)> {
    Some(match code {
        ErrorCode::NonEmptyGroup => ("GroupNotEmptyException", "The group is not empty."),
        ErrorCode::GroupIdNotFound => ("GroupIdNotFoundException", "The group id does not exist."),
        ErrorCode::GroupSubscribedToTopic => (
            "GroupSubscribedToTopicException",
            "Deleting offsets of a topic is forbidden while the consumer group is actively subscribed to it.",
        ),
        ErrorCode::UnknownTopicOrPartition => (
            "UnknownTopicOrPartitionException",
            "This server does not host this topic-partition.",
        ),
        ErrorCode::InvalidGroupId => ("InvalidGroupIdException", "The configured groupId is invalid."),
        ErrorCode::GroupAuthorizationFailed => ("GroupAuthorizationException", "Group authorization failed."),
        ErrorCode::TopicAuthorizationFailed => ("TopicAuthorizationException", "Topic authorization failed."),
        ErrorCode::CoordinatorNotAvailable => (
            "CoordinatorNotAvailableException",
            "The coordinator is not available.",
        ),
        ErrorCode::NotCoordinator => ("NotCoordinatorException", "This is not the correct coordinator."),
        ErrorCode::UnknownMemberId => (
            "UnknownMemberIdException",
            "The coordinator is not aware of this member.",
        ),
        ErrorCode::IllegalGeneration => (
            "IllegalGenerationException",
            "Specified group generation id is not valid.",
        ),
        ErrorCode::RebalanceInProgress => (
            "RebalanceInProgressException",
            "The group is rebalancing, so a rejoin is needed.",
        ),
        _ => return None,
    })
}

/// `org.apache.kafka.common.errors.XException: message` for broker errors Kafka's tool names
/// that way; the error's own text otherwise.
pub fn exception_text(e: &Error) -> String {
    if let Error::Kafka { code, message } = e {
        if let Some((class, default)) = exception(*code) {
            let msg = message
                .as_deref()
                .filter(|m| !m.is_empty())
                .unwrap_or(default);
            return format!("org.apache.kafka.common.errors.{class}: {msg}");
        }
    }
    e.to_string()
}

/// The text after "failed due to".
pub fn error_text(e: &Error) -> String {
    exception_text(e)
}

fn default_message(e: &Error) -> String {
    match e {
        Error::Kafka { code, message } => message
            .clone()
            .filter(|m| !m.is_empty())
            .or_else(|| exception(*code).map(|x| x.1.to_string()))
            .unwrap_or_else(|| e.to_string()),
        _ => e.to_string(),
    }
}

fn pad(s: &str, w: usize) -> String {
    format!("{s:<w$}")
}

/// `--list`: the ids, or with `--type`/`--state` a table.
pub fn list(
    groups: &[GroupListing],
    include_type: bool,
    include_state: bool,
    json: bool,
) -> Output {
    let mut o = Output::default();
    let type_name = |g: &GroupListing| match g.group_type.as_str() {
        "classic" => "Classic".to_string(),
        "consumer" => "Consumer".to_string(),
        "" => "Unknown".to_string(),
        other => other.to_string(),
    };
    let state_name = |g: &GroupListing| {
        if g.state.is_empty() {
            "Unknown".to_string()
        } else {
            g.state.clone()
        }
    };
    if json {
        let v: Vec<Value> = groups
            .iter()
            .map(|g| json!({"group": g.group_id, "type": type_name(g), "state": state_name(g)}))
            .collect();
        o.line(&Value::Array(v).to_string());
        return o;
    }
    if !include_type && !include_state {
        for g in groups {
            o.line(&g.group_id);
        }
        return o;
    }
    let w = groups
        .iter()
        .map(|g| g.group_id.len().max(15))
        .max()
        .unwrap_or(15)
        + 10;
    let row = |cols: [&str; 3]| {
        let mut s = pad(cols[0], w);
        if include_type {
            s.push(' ');
            s.push_str(&pad(cols[1], 20));
        }
        if include_state {
            s.push(' ');
            s.push_str(&pad(cols[2], 20));
        }
        s
    };
    o.line(&row(["GROUP", "TYPE", "STATE"]));
    for g in groups {
        o.line(&row([&g.group_id, &type_name(g), &state_name(g)]));
    }
    o
}

/// Kafka's `shouldPrintMemberState`: the notices for empty and rebalancing groups (stderr);
/// whether there is a table to print.
fn state_notice(o: &mut Output, group: &str, state: &str, rows: usize) -> bool {
    match state {
        "Dead" => o.error(&format!("Consumer group '{group}' does not exist.")),
        "Empty" => o.err_line(&format!(
            "\nConsumer group '{group}' has no active members."
        )),
        "PreparingRebalance" | "CompletingRebalance" | "Assigning" | "Reconciling" => o.err_line(
            &format!("\nWarning: Consumer group '{group}' is rebalancing."),
        ),
        _ => {}
    }
    state != "Dead" && rows > 0
}

/// One row of the offsets table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetRow {
    pub group: String,
    pub topic: Option<String>,
    pub partition: Option<i32>,
    pub leader_epoch: Option<i32>,
    pub offset: Option<i64>,
    pub log_end_offset: Option<i64>,
    pub consumer_id: String,
    pub host: String,
    pub client_id: String,
}

impl OffsetRow {
    /// Lag = log end − committed, when both are known (Kafka's getLag).
    pub fn lag(&self) -> Option<i64> {
        match (self.offset, self.log_end_offset) {
            (Some(o), Some(e)) if o != -1 => Some(e - o),
            _ => None,
        }
    }
}

/// The rows of one group without log end offsets: the members' partitions (members with more
/// partitions first), then the committed partitions no member owns.
pub fn offset_rows(
    d: &GroupDescription,
    committed: &BTreeMap<Tp, Option<CommittedOffset>>,
) -> Vec<OffsetRow> {
    let mut members: Vec<&MemberDescription> = d
        .members
        .iter()
        .filter(|m| !m.assignment.is_empty())
        .collect();
    members.sort_by_key(|m| std::cmp::Reverse(m.assignment.len()));
    let row = |tp: &Tp, consumer: &str, host: &str, client: &str| {
        let c = committed.get(tp).and_then(|c| c.as_ref());
        OffsetRow {
            group: d.group_id.clone(),
            topic: Some(tp.0.clone()),
            partition: Some(tp.1),
            leader_epoch: c.and_then(|c| c.leader_epoch),
            offset: c.map(|c| c.offset),
            log_end_offset: None,
            consumer_id: consumer.to_string(),
            host: host.to_string(),
            client_id: client.to_string(),
        }
    };
    let mut rows = Vec::new();
    let mut assigned = std::collections::BTreeSet::new();
    for m in members {
        // Topic, then partition, whatever order the description came in.
        let mut owned: Vec<&Tp> = m.assignment.iter().collect();
        owned.sort();
        for tp in owned {
            assigned.insert(tp.clone());
            rows.push(row(tp, &m.member_id, &m.host, &m.client_id));
        }
    }
    for tp in committed.keys() {
        if !assigned.contains(tp) {
            rows.push(row(tp, MISSING, MISSING, MISSING));
        }
    }
    rows
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string())
        .unwrap_or_else(|| MISSING.to_string())
}

/// `--describe [--offsets] [--verbose]`.
pub fn offsets(
    descs: &BTreeMap<String, GroupDescription>,
    rows: &BTreeMap<String, Vec<OffsetRow>>,
    verbose: bool,
    json: bool,
) -> Output {
    let mut o = Output::default();
    if json {
        let v: Vec<Value> = descs
            .iter()
            .map(|(g, d)| {
                let parts: Vec<Value> = rows
                    .get(g)
                    .map(|rs| rs.as_slice())
                    .unwrap_or_default()
                    .iter()
                    .map(|r| {
                        json!({
                            "topic": r.topic, "partition": r.partition,
                            "leader_epoch": r.leader_epoch, "current_offset": r.offset,
                            "log_end_offset": r.log_end_offset, "lag": r.lag(),
                            "consumer_id": none_if_missing(&r.consumer_id),
                            "host": none_if_missing(&r.host),
                            "client_id": none_if_missing(&r.client_id),
                        })
                    })
                    .collect();
                json!({"group": g, "state": d.state, "partitions": parts})
            })
            .collect();
        o.line(&Value::Array(v).to_string());
        return o;
    }
    for (g, d) in descs {
        let rs = rows.get(g).map(|r| r.as_slice()).unwrap_or_default();
        if !state_notice(&mut o, g, &d.state, rs.len()) {
            continue;
        }
        let w = |f: &dyn Fn(&OffsetRow) -> usize| rs.iter().map(f).max().unwrap_or(0).max(15);
        let gw = w(&|r| r.group.len());
        let tw = w(&|r| r.topic.as_deref().unwrap_or(MISSING).len());
        let cw = w(&|r| r.consumer_id.len());
        let hw = w(&|r| r.host.len());
        let line = |c: [&str; 10]| {
            let mut s = format!("\n{} {} {} ", pad(c[0], gw), pad(c[1], tw), pad(c[2], 10));
            if verbose {
                s.push_str(&pad(c[3], 15));
                s.push(' ');
            }
            s.push_str(&format!(
                "{} {} {} {} {} {}",
                pad(c[4], 15),
                pad(c[5], 15),
                pad(c[6], 15),
                pad(c[7], cw),
                pad(c[8], hw),
                c[9]
            ));
            s
        };
        o.out(&line([
            "GROUP",
            "TOPIC",
            "PARTITION",
            "LEADER-EPOCH",
            "CURRENT-OFFSET",
            "LOG-END-OFFSET",
            "LAG",
            "CONSUMER-ID",
            "HOST",
            "CLIENT-ID",
        ]));
        for r in rs {
            o.out(&line([
                &r.group,
                r.topic.as_deref().unwrap_or(MISSING),
                &opt(r.partition),
                &opt(r.leader_epoch),
                &opt(r.offset),
                &opt(r.log_end_offset),
                &opt(r.lag()),
                &r.consumer_id,
                &r.host,
                &r.client_id,
            ]));
        }
        o.line("");
    }
    o
}

fn none_if_missing(s: &str) -> Option<&str> {
    (s != MISSING).then_some(s)
}

/// `t1:0,1,2;t2:0` (topics and partitions sorted), "-" when empty.
pub fn assignment_text(tps: &[Tp]) -> String {
    if tps.is_empty() {
        return MISSING.into();
    }
    let mut by: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (t, p) in tps {
        by.entry(t).or_default().push(*p);
    }
    by.into_iter()
        .map(|(t, mut ps)| {
            ps.sort_unstable();
            let ps: Vec<String> = ps.iter().map(|p| p.to_string()).collect();
            format!("{t}:{}", ps.join(","))
        })
        .collect::<Vec<_>>()
        .join(";")
}

fn tps_json(tps: &[Tp]) -> Value {
    Value::Array(
        tps.iter()
            .map(|(t, p)| json!({"topic": t, "partition": p}))
            .collect(),
    )
}

/// `--describe --members [--verbose]`.
pub fn members(descs: &BTreeMap<String, GroupDescription>, verbose: bool, json: bool) -> Output {
    let mut o = Output::default();
    if json {
        let v: Vec<Value> = descs
            .iter()
            .map(|(g, d)| {
                let ms: Vec<Value> = d
                    .members
                    .iter()
                    .map(|m| {
                        json!({
                            "consumer_id": m.member_id, "group_instance_id": m.group_instance_id,
                            "host": m.host, "client_id": m.client_id,
                            "partitions": m.assignment.len(),
                            "assignment": tps_json(&m.assignment),
                            "current_epoch": m.member_epoch,
                            "target_epoch": m.target_assignment.as_ref().and(d.target_assignment_epoch),
                            "target_assignment": m.target_assignment.as_deref().map(tps_json),
                        })
                    })
                    .collect();
                json!({"group": g, "state": d.state, "members": ms})
            })
            .collect();
        o.line(&Value::Array(v).to_string());
        return o;
    }
    for (g, d) in descs {
        let ms = &d.members;
        let (mut gw, mut cw, mut iw, mut hw, mut clw) = (15, 15, 17, 15, 15);
        let mut with_instance = false;
        let current: Vec<String> = ms.iter().map(|m| assignment_text(&m.assignment)).collect();
        let target: Vec<String> = ms
            .iter()
            .map(|m| {
                m.target_assignment
                    .as_deref()
                    .map_or(MISSING.into(), assignment_text)
            })
            .collect();
        let (mut aw, mut tw) = (20, 20);
        if state_notice(&mut o, g, &d.state, ms.len()) {
            for (i, m) in ms.iter().enumerate() {
                gw = gw.max(g.len());
                cw = cw.max(m.member_id.len());
                let inst = m.group_instance_id.as_deref().unwrap_or("");
                iw = iw.max(inst.len());
                hw = hw.max(m.host.len());
                clw = clw.max(m.client_id.len());
                with_instance |= !inst.is_empty();
                aw = aw.max(current[i].len());
                tw = tw.max(target[i].len());
            }
        }
        let line = |c: [&str; 10]| {
            let mut s = format!("{} {} ", pad(c[0], gw), pad(c[1], cw));
            if with_instance {
                s.push_str(&pad(c[2], iw));
                s.push(' ');
            }
            s.push_str(&format!(
                "{} {} {} ",
                pad(c[3], hw),
                pad(c[4], clw),
                pad(c[5], 15)
            ));
            if verbose {
                s.push_str(&format!(
                    "{} {} {} {}",
                    pad(c[6], 15),
                    pad(c[7], aw),
                    pad(c[8], 15),
                    pad(c[9], tw)
                ));
            }
            s
        };
        o.line(&format!(
            "\n{}",
            line([
                "GROUP",
                "CONSUMER-ID",
                "GROUP-INSTANCE-ID",
                "HOST",
                "CLIENT-ID",
                "#PARTITIONS",
                "CURRENT-EPOCH",
                "CURRENT-ASSIGNMENT",
                "TARGET-EPOCH",
                "TARGET-ASSIGNMENT",
            ])
        ));
        if d.state == "Dead" {
            continue;
        }
        for (i, m) in ms.iter().enumerate() {
            let target_epoch = m.target_assignment.as_ref().and(d.target_assignment_epoch);
            o.line(&line([
                g,
                &m.member_id,
                m.group_instance_id.as_deref().unwrap_or(""),
                &m.host,
                &m.client_id,
                &m.assignment.len().to_string(),
                &opt(m.member_epoch),
                &current[i],
                &opt(target_epoch),
                &target[i],
            ]));
        }
    }
    o
}

/// `host:port  (id)`, as Kafka prints a coordinator.
fn coordinator_text(d: &GroupDescription) -> String {
    format!(
        "{}:{}  ({})",
        d.coordinator.host, d.coordinator.port, d.coordinator.node_id
    )
}

/// `--describe --state [--verbose]`.
pub fn states(descs: &BTreeMap<String, GroupDescription>, verbose: bool, json: bool) -> Output {
    let mut o = Output::default();
    let strategy = |d: &GroupDescription| {
        if d.partition_assignor.is_empty() {
            MISSING.to_string()
        } else {
            d.partition_assignor.clone()
        }
    };
    if json {
        let v: Vec<Value> = descs
            .values()
            .map(|d| {
                json!({
                    "group": d.group_id,
                    "coordinator": {"id": d.coordinator.node_id, "host": d.coordinator.host, "port": d.coordinator.port},
                    "type": d.group_type.as_str(),
                    "assignment_strategy": none_if_missing(&strategy(d)),
                    "state": d.state, "members": d.members.len(),
                    "group_epoch": d.group_epoch,
                    "target_assignment_epoch": d.target_assignment_epoch,
                })
            })
            .collect();
        o.line(&Value::Array(v).to_string());
        return o;
    }
    for (g, d) in descs {
        if !state_notice(&mut o, g, &d.state, 1) {
            continue;
        }
        let coord = coordinator_text(d);
        let gw = g.len().max(15);
        let cw = coord.len().max(25);
        let line = |c: [&str; 7]| {
            let mut s = format!(
                "\n{} {} {} {} ",
                pad(c[0], gw),
                pad(c[1], cw),
                pad(c[2], 20),
                pad(c[3], 20)
            );
            if verbose {
                s.push_str(&format!("{} {} ", pad(c[4], 15), pad(c[5], 25)));
            }
            s.push_str(c[6]);
            s
        };
        o.out(&line([
            "GROUP",
            "COORDINATOR (ID)",
            "ASSIGNMENT-STRATEGY",
            "STATE",
            "GROUP-EPOCH",
            "TARGET-ASSIGNMENT-EPOCH",
            "#MEMBERS",
        ]));
        let consumer = d.group_type == GroupType::Consumer && d.state != "Empty";
        o.out(&line([
            g,
            &coord,
            &strategy(d),
            &d.state,
            &if consumer {
                opt(d.group_epoch)
            } else {
                MISSING.into()
            },
            &if consumer {
                opt(d.target_assignment_epoch)
            } else {
                MISSING.into()
            },
            &d.members.len().to_string(),
        ]));
        o.line("");
    }
    o
}

/// `--delete`: `(group, Ok | Err(text))` in the order the groups were named.
pub fn delete(results: &[(String, Result<(), String>)]) -> Output {
    let mut o = Output::default();
    let ok: Vec<&str> = results
        .iter()
        .filter(|r| r.1.is_ok())
        .map(|r| r.0.as_str())
        .collect();
    let failed: Vec<(&str, String)> = results
        .iter()
        .filter_map(|(g, r)| r.as_ref().err().map(|e| (g.as_str(), e.clone())))
        .collect();
    if failed.is_empty() {
        o.line(&format!(
            "Deletion of requested consumer groups ('{}') was successful.",
            ok.join("', '")
        ));
        return o;
    }
    o.error("Deletion of some consumer groups failed:");
    for (g, e) in &failed {
        o.line(&format!("* Group '{g}' could not be deleted due to: {e}"));
    }
    if !ok.is_empty() {
        o.line(&format!(
            "\nThese consumer groups were deleted successfully: '{}'",
            ok.join("', '")
        ));
    }
    o
}

/// `--reset-offsets`: the plan (or what was committed), one row per partition.
pub fn reset_plan(plan: &BTreeMap<String, BTreeMap<Tp, i64>>) -> Output {
    let mut o = Output::default();
    if plan.is_empty() {
        o.line("");
        return o;
    }
    let gw = plan.keys().map(|g| g.len()).max().unwrap_or(0).max(15);
    let tw = plan
        .values()
        .flat_map(|m| m.keys().map(|tp| tp.0.len()))
        .max()
        .unwrap_or(0)
        .max(15);
    let line = |c: [&str; 4]| {
        format!(
            "\n{} {} {} {}",
            pad(c[0], gw),
            pad(c[1], tw),
            pad(c[2], 10),
            pad(c[3], 15)
        )
    };
    o.out(&line(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]));
    for (g, m) in plan {
        for ((t, p), off) in m {
            o.out(&line([g, t, &p.to_string(), &off.to_string()]));
        }
    }
    o.line("");
    o
}

/// `--reset-offsets --export`: the plan as CSV, `topic,partition,offset` when one group was
/// named, `group,topic,partition,offset` otherwise, then a blank line.
pub fn reset_plan_csv(plan: &BTreeMap<String, BTreeMap<Tp, i64>>, single_group: bool) -> Output {
    let mut o = Output::default();
    for (g, m) in plan {
        for ((t, p), off) in m {
            if single_group {
                o.line(&format!("{t},{p},{off}"));
            } else {
                o.line(&format!("{g},{t},{p},{off}"));
            }
        }
    }
    o.line("");
    o
}

/// `--delete-offsets`: the outcome line and one row per partition (`None` partition: a topic
/// that could not be described). `top` is the first error Kafka's `all()` would raise.
pub fn delete_offsets(
    group: &str,
    top: Option<ErrorCode>,
    top_err: Option<&Error>,
    rows: &[(String, Option<i32>, Option<String>)],
) -> Output {
    let mut o = Output::default();
    match top {
        None if rows.iter().all(|r| r.2.is_none()) => o.line(&format!(
            "Request succeeded for deleting offsets from group {group}."
        )),
        None
        | Some(ErrorCode::GroupSubscribedToTopic)
        | Some(ErrorCode::TopicAuthorizationFailed)
        | Some(ErrorCode::UnknownTopicOrPartition) => {
            o.error("Encountered some partition-level error, see the follow-up details.")
        }
        Some(code) => {
            let msg = top_err
                .map(default_message)
                .unwrap_or_else(|| code.to_string());
            o.error(&msg)
        }
    }
    let mut sorted: Vec<&(String, Option<i32>, Option<String>)> = rows.iter().collect();
    // Kafka sorts by topic and partition concatenated as one string.
    sorted.sort_by_key(|r| format!("{}{}", r.0, r.1.unwrap_or(-1)));
    let tw = rows.iter().map(|r| r.0.len()).max().unwrap_or(0).max(15);
    let line = |c: [&str; 3]| format!("\n{} {} {}", pad(c[0], tw), pad(c[1], 10), pad(c[2], 15));
    o.out(&line(["TOPIC", "PARTITION", "STATUS"]));
    for (t, p, status) in sorted {
        let status = match status {
            Some(e) => format!("Error: {e}"),
            None => "Successful".into(),
        };
        let p = p.map_or("Not Provided".to_string(), |p| p.to_string());
        o.out(&line([t, &p, &status]));
    }
    o.line("");
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use strom_client::BrokerInfo;

    fn desc(group: &str, state: &str, members: Vec<MemberDescription>) -> GroupDescription {
        GroupDescription {
            group_id: group.into(),
            group_type: GroupType::Classic,
            protocol_type: "consumer".into(),
            state: state.into(),
            partition_assignor: if members.is_empty() {
                String::new()
            } else {
                "range".into()
            },
            coordinator: BrokerInfo {
                node_id: 1,
                host: "127.0.0.1".into(),
                port: 9092,
                rack: None,
            },
            members,
            group_epoch: None,
            target_assignment_epoch: None,
        }
    }

    fn member(id: &str, tps: &[(&str, i32)]) -> MemberDescription {
        MemberDescription {
            member_id: id.into(),
            group_instance_id: None,
            client_id: "cli".into(),
            host: "/127.0.0.1".into(),
            assignment: tps.iter().map(|(t, p)| (t.to_string(), *p)).collect(),
            target_assignment: None,
            member_epoch: None,
        }
    }

    #[test]
    fn list_tables_as_kafka() {
        let g = |id: &str, t: &str, s: &str| GroupListing {
            group_id: id.into(),
            protocol_type: "consumer".into(),
            state: s.into(),
            group_type: t.into(),
        };
        let gs = vec![
            g("g-classic", "classic", "Stable"),
            g("g-new", "consumer", "Empty"),
        ];
        let o = list(&gs, true, true, false);
        assert_eq!(
            o.stdout(),
            "GROUP                     TYPE                 STATE               \n\
             g-classic                 Classic              Stable              \n\
             g-new                     Consumer             Empty               \n"
        );
        assert_eq!(
            list(&gs, false, false, false).stdout(),
            "g-classic\ng-new\n"
        );
        let j: Value = serde_json::from_str(&list(&gs, false, false, true).stdout()).unwrap();
        assert_eq!(j[1]["type"], "Consumer");
    }

    #[test]
    fn offsets_table_as_kafka() {
        let d = desc("g", "Stable", vec![member("m-1", &[("t1", 1), ("t1", 0)])]);
        let mut committed = BTreeMap::new();
        let c = |o| {
            Some(CommittedOffset {
                offset: o,
                leader_epoch: Some(0),
                metadata: String::new(),
            })
        };
        committed.insert(("t1".to_string(), 0), c(3));
        committed.insert(("t2".to_string(), 0), c(5));
        let mut rows = offset_rows(&d, &committed);
        for r in &mut rows {
            r.log_end_offset = Some(10);
        }
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[1].offset, None);
        assert_eq!(rows[1].lag(), None);
        assert_eq!(rows[2].consumer_id, "-");
        let descs = BTreeMap::from([("g".to_string(), d)]);
        let o = offsets(
            &descs,
            &BTreeMap::from([("g".to_string(), rows)]),
            false,
            false,
        );
        let expect = "\n\
GROUP           TOPIC           PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG             CONSUMER-ID     HOST            CLIENT-ID\n\
g               t1              0          3               10              7               m-1             /127.0.0.1      cli\n\
g               t1              1          -               10              -               m-1             /127.0.0.1      cli\n\
g               t2              0          5               10              5               -               -               -\n";
        assert_eq!(o.stdout(), expect);
        assert_eq!(o.stderr(), "");
    }

    #[test]
    fn empty_group_notices() {
        let descs = BTreeMap::from([("e".to_string(), desc("e", "Empty", vec![]))]);
        let o = offsets(&descs, &BTreeMap::new(), false, false);
        assert_eq!(o.stdout(), "");
        assert_eq!(o.stderr(), "\nConsumer group 'e' has no active members.\n");
        let m = members(&descs, false, false);
        assert_eq!(
            m.stdout(),
            "\nGROUP           CONSUMER-ID     HOST            CLIENT-ID       #PARTITIONS     \n"
        );
        let s = states(&descs, false, false);
        assert_eq!(
            s.stdout(),
            "\nGROUP           COORDINATOR (ID)          ASSIGNMENT-STRATEGY  STATE                #MEMBERS\n\
             e               127.0.0.1:9092  (1)       -                    Empty                0\n"
        );
    }

    #[test]
    fn verbose_members_as_kafka() {
        let d = desc(
            "g",
            "Stable",
            vec![member("m", &[("t2", 1), ("t1", 2), ("t1", 0)])],
        );
        let o = members(&BTreeMap::from([("g".to_string(), d)]), true, false);
        assert_eq!(
            o.stdout(),
            "\nGROUP           CONSUMER-ID     HOST            CLIENT-ID       #PARTITIONS     CURRENT-EPOCH   CURRENT-ASSIGNMENT   TARGET-EPOCH    TARGET-ASSIGNMENT   \n\
             g               m               /127.0.0.1      cli             3               -               t1:0,2;t2:1          -               -                   \n"
        );
    }

    #[test]
    fn delete_messages() {
        let ok = delete(&[("a".into(), Ok(())), ("b".into(), Ok(()))]);
        assert_eq!(
            ok.stdout(),
            "Deletion of requested consumer groups ('a', 'b') was successful.\n"
        );
        let e = Error::Kafka {
            code: ErrorCode::NonEmptyGroup,
            message: None,
        };
        let mixed = delete(&[("a".into(), Ok(())), ("b".into(), Err(exception_text(&e)))]);
        assert_eq!(
            mixed.stdout(),
            "\nError: Deletion of some consumer groups failed:\n\
             * Group 'b' could not be deleted due to: org.apache.kafka.common.errors.GroupNotEmptyException: The group is not empty.\n\
             \nThese consumer groups were deleted successfully: 'a'\n"
        );
    }

    #[test]
    fn state_and_type_lists() {
        assert_eq!(
            parse_states("stable, EMPTY").unwrap(),
            vec!["Empty", "Stable"]
        );
        assert_eq!(
            parse_states("bogus").unwrap_err(),
            "Invalid state list 'bogus'. Valid states are: Assigning, PreparingRebalance, Dead, Stable, Empty, Reconciling, CompletingRebalance"
        );
        assert_eq!(
            parse_types("Consumer,classic").unwrap(),
            vec!["classic", "consumer"]
        );
        assert!(parse_types("share").is_err());
    }
}

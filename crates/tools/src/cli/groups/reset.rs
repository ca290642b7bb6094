//! `strom groups --reset-offsets`: Kafka's `ResetOffsetsCommand` plans (to earliest / latest /
//! an offset / a datetime / by duration / shift-by / from a CSV file), the dry run and the
//! execution, with each requested offset clamped to the partition's log range as Kafka does.

use super::*;

pub(super) async fn reset_offsets(a: &GroupsArgs, admin: &Admin) -> Result<Output, Failure> {
    let mut out = Output::default();
    if !a.dry_run && !a.execute {
        out.err_line("WARN: No action will be performed as the --execute option is missing. In version 5.0, this command will require either --dry-run or --execute to be specified. You should add the --dry-run option explicitly if you are scripting this command and want to keep the current default behavior without prompting.");
    }
    // Parse times before talking to the cluster: a bad one changes nothing.
    let timestamp = match (&a.to_datetime, &a.by_duration) {
        (Some(dt), _) => Some(fmt::parse_datetime(dt).map_err(Failure::Failed)?),
        (_, Some(d)) => {
            let ms = fmt::parse_duration_ms(d).map_err(Failure::Failed)?;
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as i64)
                .unwrap_or(0);
            Some(now.saturating_sub(ms))
        }
        _ => None,
    };
    let groups = target_groups(a, admin).await?;
    let file_plan = match &a.from_file {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| Failure::Failed(format!("{}: {e}", path.display())))?;
            Some(parse_reset_plan(&text, &groups).map_err(Failure::Failed)?)
        }
        None => None,
    };
    let descs = admin.describe_consumer_groups(&groups).await?;
    let committed = admin.list_group_offsets(&groups).await?;
    let mut plan: BTreeMap<String, BTreeMap<Tp, i64>> = BTreeMap::new();
    for g in &groups {
        let state = match descs.get(g) {
            Some(Ok(d)) => d.state.clone(),
            Some(Err(e)) => return Err(Failure::Failed(fmt::error_text(e))),
            None => "Dead".into(),
        };
        if state != "Empty" && state != "Dead" {
            out.error(&format!("Assignments can only be reset if the group '{g}' is inactive, but the current state is {state}."));
            plan.insert(g.clone(), BTreeMap::new());
            continue;
        }
        let current: BTreeMap<Tp, i64> = match committed.get(g) {
            Some(Ok(m)) => m
                .iter()
                .filter_map(|(tp, o)| o.as_ref().map(|o| (tp.clone(), o.offset)))
                .collect(),
            Some(Err(e)) if e.code() != Some(strom_client::ErrorCode::GroupIdNotFound) => {
                return Err(Failure::Failed(fmt::error_text(e)))
            }
            _ => BTreeMap::new(),
        };
        let offsets = if let Some(file) = &file_plan {
            match file.get(g) {
                Some(requested) => clamp(admin, requested.clone()).await?,
                None => {
                    out.error(&format!("No reset plan for group {g} found"));
                    BTreeMap::new()
                }
            }
        } else {
            let partitions: Vec<Tp> = if a.all_topics {
                current.keys().cloned().collect()
            } else {
                topic_partitions(admin, &a.topic).await?
            };
            prepare(a, admin, &partitions, &current, timestamp, &mut out).await?
        };
        if a.execute && !offsets.is_empty() {
            let res = admin.alter_group_offsets(g, &offsets).await?;
            if let Some((_, Err(e))) = res.iter().find(|(_, r)| r.is_err()) {
                return Err(Failure::Failed(fmt::exception_text(e)));
            }
        }
        plan.insert(g.clone(), offsets);
    }
    if a.export {
        out.append(fmt::reset_plan_csv(&plan, a.groups().len() == 1));
    } else {
        out.append(fmt::reset_plan(&plan));
    }
    Ok(out)
}

/// Parses a `--from-file` plan: `topic,partition,offset` lines (one group named on the
/// command line) or `group,topic,partition,offset` lines.
fn parse_reset_plan(
    text: &str,
    groups: &[String],
) -> Result<BTreeMap<String, BTreeMap<Tp, i64>>, String> {
    let mut out: BTreeMap<String, BTreeMap<Tp, i64>> = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        let bad = || {
            format!(
                "line {}: expected [group,]topic,partition,offset: {line:?}",
                n + 1
            )
        };
        let (group, rest) = match f.len() {
            3 if groups.len() == 1 => (groups[0].clone(), &f[..]),
            4 => (f[0].to_string(), &f[1..]),
            _ => return Err(bad()),
        };
        let partition: i32 = rest[1].parse().map_err(|_| bad())?;
        let offset: i64 = rest[2].parse().map_err(|_| bad())?;
        out.entry(group)
            .or_default()
            .insert((rest[0].to_string(), partition), offset);
    }
    Ok(out)
}

/// The new offset of each partition for the chosen scenario.
async fn prepare(
    a: &GroupsArgs,
    admin: &Admin,
    partitions: &[Tp],
    current: &BTreeMap<Tp, i64>,
    timestamp: Option<i64>,
    out: &mut Output,
) -> Result<BTreeMap<Tp, i64>, Failure> {
    let lookup = |spec: OffsetSpec, what: &'static str| async move {
        let r = admin.list_offsets(partitions, spec).await?;
        let mut m = BTreeMap::new();
        for tp in partitions {
            match r.get(tp) {
                Some(Ok(o)) => {
                    m.insert(tp.clone(), o.offset);
                }
                _ => {
                    return Err(Failure::Usage(format!(
                        "Error getting {what} offset of topic partition: {}-{}",
                        tp.0, tp.1
                    )))
                }
            }
        }
        Ok::<_, Failure>(m)
    };
    if a.to_earliest {
        return lookup(OffsetSpec::Earliest, "starting").await;
    }
    if a.to_latest {
        return lookup(OffsetSpec::Latest, "ending").await;
    }
    if let Some(ts) = timestamp {
        let found = admin
            .list_offsets(partitions, OffsetSpec::Timestamp(ts))
            .await?;
        let mut m = BTreeMap::new();
        let mut empty = Vec::new();
        for tp in partitions {
            match found.get(tp) {
                Some(Ok(o)) if o.offset >= 0 => {
                    m.insert(tp.clone(), o.offset);
                }
                Some(Ok(_)) => empty.push(tp.clone()),
                _ => {
                    return Err(Failure::Usage(format!(
                        "Error getting offset by timestamp of topic partition: {}-{}",
                        tp.0, tp.1
                    )))
                }
            }
        }
        if !empty.is_empty() {
            for (t, p) in &empty {
                out.line(&format!(
                    "\nWarn: Partition {p} from topic {t} is empty. Falling back to latest known offset."
                ));
            }
            let ends = admin.list_offsets(&empty, OffsetSpec::Latest).await?;
            for tp in empty {
                match ends.get(&tp) {
                    Some(Ok(o)) => {
                        m.insert(tp, o.offset);
                    }
                    _ => {
                        return Err(Failure::Usage(format!(
                            "Error getting ending offset of topic partition: {}-{}",
                            tp.0, tp.1
                        )))
                    }
                }
            }
        }
        return Ok(m);
    }
    let requested: BTreeMap<Tp, i64> = if let Some(o) = a.to_offset {
        partitions.iter().map(|tp| (tp.clone(), o)).collect()
    } else if let Some(n) = a.shift_by {
        let mut m = BTreeMap::new();
        for tp in partitions {
            let Some(c) = current.get(tp) else {
                return Err(Failure::Usage(format!(
                    "Cannot shift offset for partition {}-{} since there is no current committed offset",
                    tp.0, tp.1
                )));
            };
            m.insert(tp.clone(), c.saturating_add(n));
        }
        m
    } else {
        // --to-current: the committed offset, or the log end where there is none.
        let missing: Vec<Tp> = partitions
            .iter()
            .filter(|tp| !current.contains_key(*tp))
            .cloned()
            .collect();
        let mut m: BTreeMap<Tp, i64> = partitions
            .iter()
            .filter_map(|tp| current.get(tp).map(|o| (tp.clone(), *o)))
            .collect();
        if !missing.is_empty() {
            let ends = admin.list_offsets(&missing, OffsetSpec::Latest).await?;
            for tp in missing {
                match ends.get(&tp) {
                    Some(Ok(o)) => {
                        m.insert(tp, o.offset);
                    }
                    _ => {
                        return Err(Failure::Usage(format!(
                            "Error getting ending offset of topic partition: {}-{}",
                            tp.0, tp.1
                        )))
                    }
                }
            }
        }
        return Ok(m);
    };
    clamp(admin, requested).await
}

/// Requested offsets clamped to each log's range, as Kafka's checkOffsetsRange (used for
/// --to-offset, --shift-by and --from-file).
async fn clamp(admin: &Admin, requested: BTreeMap<Tp, i64>) -> Result<BTreeMap<Tp, i64>, Failure> {
    let tps: Vec<Tp> = requested.keys().cloned().collect();
    let starts = admin.list_offsets(&tps, OffsetSpec::Earliest).await?;
    let ends = admin.list_offsets(&tps, OffsetSpec::Latest).await?;
    let mut m = BTreeMap::new();
    for (tp, o) in requested {
        let end = match ends.get(&tp) {
            Some(Ok(e)) => e.offset,
            _ => {
                return Err(Failure::Failed(format!(
                    "Unexpected non-existing offset value for topic partition {}-{}",
                    tp.0, tp.1
                )))
            }
        };
        let start = starts
            .get(&tp)
            .and_then(|r| r.as_ref().ok())
            .map(|s| s.offset);
        let v = if o > end {
            end
        } else if start.is_some_and(|s| o < s) {
            start.unwrap_or(o)
        } else {
            o
        };
        m.insert(tp, v);
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reset_plan_files() {
        let one = parse_reset_plan("t,0,5\n t,1 , 2\n\n", &["g".into()]).unwrap();
        assert_eq!(one["g"][&("t".to_string(), 1)], 2);
        let many = parse_reset_plan("a,t,0,5\nb,t,0,7\n", &["a".into(), "b".into()]).unwrap();
        assert_eq!(many["b"][&("t".to_string(), 0)], 7);
        assert!(parse_reset_plan("t,0,5\n", &["a".into(), "b".into()]).is_err());
        assert!(parse_reset_plan("t,x,5\n", &["a".into()]).is_err());
    }
}

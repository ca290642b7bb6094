//! The group admin calls about offsets (Kafka's `Admin.listConsumerGroupOffsets`,
//! `alterConsumerGroupOffsets`, `deleteConsumerGroupOffsets`, `listOffsets`): committed offsets
//! fetched, altered and deleted per group through its coordinator, and partition offsets from
//! the partition leaders, batched per broker as the rest of [`super`].

use super::*;

impl Admin {
    /// The committed offsets of each group (all partitions): one OffsetFetch per coordinator
    /// with all its groups (v8+), else one per group. Partitions without an offset map to
    /// `None`.
    pub async fn list_group_offsets(
        &self,
        groups: &[String],
    ) -> Result<GroupResults<BTreeMap<Tp, Option<CommittedOffset>>>> {
        use strom_protocol::kafka::messages::ApiKey;
        fn committed(
            offset: i64,
            epoch: i32,
            metadata: Option<&StrBytes>,
        ) -> Option<CommittedOffset> {
            (offset >= 0).then(|| CommittedOffset {
                offset,
                leader_epoch: opt_epoch(epoch),
                metadata: metadata.map(|m| m.to_string()).unwrap_or_default(),
            })
        }
        self.per_coordinator(
            groups,
            ApiKey::OffsetFetch,
            |version, gs| {
                if version >= 8 {
                    let mut req = OffsetFetchRequest::default();
                    req.groups = gs
                        .iter()
                        .map(|g| {
                            let mut rg = OffsetFetchRequestGroup::default();
                            rg.group_id = group_id(g);
                            rg.member_epoch = -1;
                            rg.topics = None;
                            rg
                        })
                        .collect();
                    vec![(gs.to_vec(), req)]
                } else {
                    gs.iter()
                        .map(|g| {
                            let mut req = OffsetFetchRequest::default();
                            req.group_id = group_id(g);
                            req.topics = None;
                            (vec![g.clone()], req)
                        })
                        .collect()
                }
            },
            |_, subset, resp| {
                if !resp.groups.is_empty() {
                    return resp
                        .groups
                        .into_iter()
                        .map(|g| {
                            let id = g.group_id.0.to_string();
                            if let Some(e) = Error::kafka(g.error_code, None) {
                                return (id, Err(e));
                            }
                            let mut m = BTreeMap::new();
                            for t in g.topics {
                                for p in t.partitions {
                                    if Error::kafka(p.error_code, None).is_some() {
                                        continue;
                                    }
                                    m.insert(
                                        (t.name.0.to_string(), p.partition_index),
                                        committed(
                                            p.committed_offset,
                                            p.committed_leader_epoch,
                                            p.metadata.as_ref(),
                                        ),
                                    );
                                }
                            }
                            (id, Ok(m))
                        })
                        .collect();
                }
                let Some(id) = subset.first().cloned() else {
                    return Vec::new();
                };
                if let Some(e) = Error::kafka(resp.error_code, None) {
                    return vec![(id, Err(e))];
                }
                let mut m = BTreeMap::new();
                for t in resp.topics {
                    for p in t.partitions {
                        if Error::kafka(p.error_code, None).is_some() {
                            continue;
                        }
                        m.insert(
                            (t.name.0.to_string(), p.partition_index),
                            committed(
                                p.committed_offset,
                                p.committed_leader_epoch,
                                p.metadata.as_ref(),
                            ),
                        );
                    }
                }
                vec![(id, Ok(m))]
            },
        )
        .await
    }

    /// Commits offsets for a group outside any generation (Kafka's `alterConsumerGroupOffsets`:
    /// OffsetCommit with generation -1 and no member id, which the coordinator only accepts
    /// while the group has no active members). Returns the per-partition results.
    pub async fn alter_group_offsets(
        &self,
        group: &str,
        offsets: &BTreeMap<Tp, i64>,
    ) -> Result<BTreeMap<Tp, Result<()>>> {
        use strom_protocol::kafka::messages::ApiKey;
        let topics = by_topic(offsets.keys());
        let mut res = self
            .per_coordinator(
                &[group.to_string()],
                ApiKey::OffsetCommit,
                |_, gs| {
                    let mut req = OffsetCommitRequest::default();
                    req.group_id = group_id(group);
                    req.generation_id_or_member_epoch = -1;
                    req.member_id = StrBytes::from_static_str("");
                    req.retention_time_ms = -1;
                    req.topics = topics
                        .iter()
                        .map(|(t, ps)| {
                            let mut rt = OffsetCommitRequestTopic::default();
                            rt.name = topic_name(t);
                            rt.partitions = ps
                                .iter()
                                .map(|p| {
                                    let mut rp = OffsetCommitRequestPartition::default();
                                    rp.partition_index = *p;
                                    rp.committed_offset =
                                        offsets.get(&(t.clone(), *p)).copied().unwrap_or(-1);
                                    rp.committed_leader_epoch = -1;
                                    rp.committed_metadata = Some(StrBytes::from_static_str(""));
                                    rp
                                })
                                .collect();
                            rt
                        })
                        .collect();
                    vec![(gs.to_vec(), req)]
                },
                |_, subset, resp| {
                    let mut m = BTreeMap::new();
                    let mut moved = None;
                    for t in resp.topics {
                        for p in t.partitions {
                            let r = match Error::kafka(p.error_code, None) {
                                Some(e) => {
                                    if e.code().is_some_and(coordinator_moved) {
                                        moved = Some(dup(&e));
                                    }
                                    Err(e)
                                }
                                None => Ok(()),
                            };
                            m.insert((t.name.0.to_string(), p.partition_index), r);
                        }
                    }
                    let id = subset.first().cloned().unwrap_or_default();
                    // A moved coordinator fails the whole commit: retried as a group.
                    match moved {
                        Some(e) => vec![(id, Err(e))],
                        None => vec![(id, Ok(m))],
                    }
                },
            )
            .await?;
        res.remove(group)
            .unwrap_or_else(|| Err(Error::Protocol("no OffsetCommit answer".into())))
    }

    /// Deletes committed offsets of a group (OffsetDelete). The outer error is the group-level
    /// one (e.g. GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP); the map holds the per-partition results.
    pub async fn delete_group_offsets(
        &self,
        group: &str,
        partitions: &[Tp],
    ) -> Result<std::result::Result<BTreeMap<Tp, Result<()>>, Error>> {
        use strom_protocol::kafka::messages::ApiKey;
        let topics = by_topic(partitions);
        let mut res = self
            .per_coordinator(
                &[group.to_string()],
                ApiKey::OffsetDelete,
                |_, gs| {
                    let mut req = OffsetDeleteRequest::default();
                    req.group_id = group_id(group);
                    req.topics = topics
                        .iter()
                        .map(|(t, ps)| {
                            let mut rt = OffsetDeleteRequestTopic::default();
                            rt.name = topic_name(t);
                            rt.partitions = ps
                                .iter()
                                .map(|p| {
                                    let mut rp = OffsetDeleteRequestPartition::default();
                                    rp.partition_index = *p;
                                    rp
                                })
                                .collect();
                            rt
                        })
                        .collect();
                    vec![(gs.to_vec(), req)]
                },
                |_, subset, resp| {
                    let id = subset.first().cloned().unwrap_or_default();
                    if let Some(e) = Error::kafka(resp.error_code, None) {
                        return vec![(id, Err(e))];
                    }
                    let mut m = BTreeMap::new();
                    for t in resp.topics {
                        for p in t.partitions {
                            let r = match Error::kafka(p.error_code, None) {
                                Some(e) => Err(e),
                                None => Ok(()),
                            };
                            m.insert((t.name.0.to_string(), p.partition_index), r);
                        }
                    }
                    vec![(id, Ok(m))]
                },
            )
            .await?;
        Ok(res
            .remove(group)
            .unwrap_or_else(|| Err(Error::Protocol("no OffsetDelete answer".into()))))
    }

    /// ListOffsets for many partitions at once: one request per partition leader, all leaders
    /// at once, read_uncommitted (the high watermark for `Latest`, as Kafka's admin default).
    /// Partitions whose topic does not exist or that have no leader map to an error.
    pub async fn list_offsets(
        &self,
        partitions: &[Tp],
        spec: OffsetSpec,
    ) -> Result<BTreeMap<Tp, Result<ListedOffset>>> {
        self.list_offsets_isolated(partitions, spec, 0).await
    }

    /// [`Admin::list_offsets`] at an isolation level (Kafka's `ListOffsetsOptions`): 1
    /// (read_committed) answers the last stable offset for `Latest`.
    pub async fn list_offsets_isolated(
        &self,
        partitions: &[Tp],
        spec: OffsetSpec,
        isolation_level: i8,
    ) -> Result<BTreeMap<Tp, Result<ListedOffset>>> {
        use strom_protocol::kafka::messages::ApiKey;
        let timeout_ms = self.group_timeout_ms();
        self.per_leader(
            partitions,
            None,
            ApiKey::ListOffsets,
            // ListOffsets answers an unknown partition at once instead of waiting for it.
            true,
            |tps| {
                let mut req = ListOffsetsRequest::default();
                req.replica_id = (-1).into();
                req.isolation_level = isolation_level;
                req.timeout_ms = timeout_ms;
                req.topics = by_topic(tps)
                    .into_iter()
                    .map(|(t, ps)| {
                        let mut lt = ListOffsetsTopic::default();
                        lt.name = topic_name(&t);
                        lt.partitions = ps
                            .into_iter()
                            .map(|p| {
                                let mut lp = ListOffsetsPartition::default();
                                lp.partition_index = p;
                                lp.current_leader_epoch = -1;
                                lp.timestamp = spec.timestamp();
                                lp
                            })
                            .collect();
                        lt
                    })
                    .collect();
                req
            },
            |resp| {
                resp.topics
                    .into_iter()
                    .flat_map(|t| {
                        let name = t.name.0.to_string();
                        t.partitions.into_iter().map(move |p| {
                            let r = match Error::kafka(p.error_code, None) {
                                Some(e) => Err(e),
                                None => Ok(ListedOffset {
                                    offset: p.offset,
                                    timestamp: p.timestamp,
                                    leader_epoch: opt_epoch(p.leader_epoch),
                                }),
                            };
                            ((name.clone(), p.partition_index), r)
                        })
                    })
                    .collect()
            },
        )
        .await
    }

    /// Sends a request per partition leader (or to `broker` only, when given: any replica can
    /// answer for its copy) covering its partitions, all leaders at once, and retries the
    /// partitions whose leader moved or was not ready on fresh metadata, until every partition
    /// has a final result (bounded by the client's retries). Serves the calls Kafka routes with
    /// its `PartitionLeaderStrategy` (ListOffsets, DescribeProducers). `fail_unknown`: an
    /// unknown topic or partition is final instead of retried. Errors from a named broker are
    /// final: its answer is the answer.
    pub(crate) async fn per_leader<T, R, B, P>(
        &self,
        partitions: &[Tp],
        broker: Option<i32>,
        api: strom_protocol::kafka::messages::ApiKey,
        fail_unknown: bool,
        build: B,
        parse: P,
    ) -> Result<BTreeMap<Tp, Result<T>>>
    where
        R: Request + Send + Sync + 'static,
        R::Response: Send + 'static,
        B: Fn(&[Tp]) -> R,
        P: Fn(R::Response) -> Vec<(Tp, Result<T>)>,
    {
        let mut out: BTreeMap<Tp, Result<T>> = BTreeMap::new();
        let mut pending: Vec<Tp> = partitions.to_vec();
        pending.sort();
        pending.dedup();
        let retries = self.client().config().retries;
        let mut attempt = 0;
        while !pending.is_empty() {
            let last = attempt >= retries;
            let mut next = Vec::new();
            let mut by_leader: BTreeMap<i32, Vec<Tp>> = BTreeMap::new();
            match broker {
                Some(b) => {
                    by_leader.insert(b, std::mem::take(&mut pending));
                }
                None => {
                    let leaders = self.leaders(&pending).await?;
                    for tp in std::mem::take(&mut pending) {
                        match leaders.get(&tp) {
                            Some(Ok(l)) => by_leader.entry(*l).or_default().push(tp),
                            Some(Err(e))
                                if e.is_retriable()
                                    && !last
                                    && !(fail_unknown
                                        && e.code()
                                            == Some(ErrorCode::UnknownTopicOrPartition)) =>
                            {
                                next.push(tp)
                            }
                            Some(Err(e)) => {
                                out.insert(tp, Err(dup(e)));
                            }
                            None => {
                                out.insert(tp, Err(Error::Protocol("no metadata".into())));
                            }
                        }
                    }
                }
            }
            let mut requests = Vec::new();
            for (leader, tps) in by_leader {
                let conn = match self.client().connection(leader).await {
                    Ok(c) => c,
                    Err(e) => {
                        for tp in tps {
                            if e.is_retriable() && !last {
                                next.push(tp);
                            } else {
                                out.insert(tp, Err(dup(&e)));
                            }
                        }
                        continue;
                    }
                };
                let version = version_for(&conn, api)?;
                let req = build(&tps);
                requests.push((tps, conn, version, req));
            }
            for (tps, resp) in fan_out(requests).await {
                let resp = match resp {
                    Ok(r) => r,
                    Err(e) => {
                        for tp in tps {
                            if e.is_retriable() && !last {
                                next.push(tp);
                            } else {
                                out.insert(tp, Err(dup(&e)));
                            }
                        }
                        continue;
                    }
                };
                let mut answered = Vec::new();
                for (tp, r) in parse(resp) {
                    answered.push(tp.clone());
                    match r {
                        Err(e) if e.is_retriable() && !last && broker.is_none() => {
                            if e.invalidates_metadata() {
                                self.client().invalidate_topic(&tp.0);
                            }
                            next.push(tp);
                        }
                        r => {
                            out.insert(tp, r);
                        }
                    }
                }
                for tp in tps {
                    if !answered.contains(&tp) {
                        out.insert(tp, Err(Error::Protocol(format!("no {api:?} answer"))));
                    }
                }
            }
            pending = next;
            if !pending.is_empty() {
                tokio::time::sleep(self.client().config().backoff(attempt)).await;
                attempt += 1;
            }
        }
        Ok(out)
    }

    /// The leader of each partition from fresh metadata; an error for partitions whose topic
    /// does not exist or that have no leader (LEADER_NOT_AVAILABLE). Shared by the calls sent
    /// to partition leaders (ListOffsets, DescribeProducers, WriteTxnMarkers).
    pub(crate) async fn leaders(&self, partitions: &[Tp]) -> Result<HashMap<Tp, Result<i32>>> {
        let topics: Vec<String> = by_topic(partitions).into_keys().collect();
        let md = self
            .client()
            .retry(|| self.client().refresh_metadata(Some(&topics)))
            .await?;
        let mut leaders: HashMap<Tp, i32> = HashMap::new();
        let mut topic_errors: HashMap<String, i16> = HashMap::new();
        for t in &md.topics {
            let name = t.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default();
            if t.error_code != 0 {
                topic_errors.insert(name.clone(), t.error_code);
            }
            for p in &t.partitions {
                leaders.insert((name.clone(), p.partition_index), p.leader_id.0);
            }
        }
        let mut out = HashMap::new();
        for tp in partitions {
            let r = match leaders.get(tp) {
                Some(&l) if l >= 0 => Ok(l),
                Some(_) => Err(Error::Kafka {
                    code: ErrorCode::LeaderNotAvailable,
                    message: None,
                }),
                None => {
                    let code = topic_errors
                        .get(&tp.0)
                        .copied()
                        .unwrap_or(ErrorCode::UnknownTopicOrPartition.code());
                    Err(Error::kafka(code, None).unwrap_or(Error::Kafka {
                        code: ErrorCode::UnknownTopicOrPartition,
                        message: None,
                    }))
                }
            };
            out.insert(tp.clone(), r);
        }
        Ok(out)
    }
}

//! DescribeLogDirs as Kafka's `ReplicaManager.describeLogDirs`: one result per configured log
//! dir (its absolute path), the hosted partitions asked for (all when the request names none)
//! that live there with their size (the sum of their segment files, Kafka's `UnifiedLog.size`)
//! and an offset lag of `max(HW - LEO, 0)` (Strom has no future replicas, so none is a future
//! key), and from v4 the file system's total and usable bytes. An offline dir answers
//! KAFKA_STORAGE_ERROR with nothing else.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use strom_protocol::kafka::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use strom_protocol::kafka::messages::{DescribeLogDirsRequest, DescribeLogDirsResponse, TopicName};
use strom_protocol::ErrorCode;

use super::str_bytes;
use crate::server::Broker;

pub fn handle(broker: &Arc<Broker>, req: DescribeLogDirsRequest) -> DescribeLogDirsResponse {
    let wanted: Option<HashSet<(String, i32)>> = req.topics.map(|topics| {
        topics
            .iter()
            .flat_map(|t| {
                let name = t.topic.0.to_string();
                t.partitions.iter().map(move |&p| (name.clone(), p))
            })
            .collect()
    });
    let log_manager = broker.replica_manager.log_manager();
    // Partition -> (dir, size, lag), for the hosted partitions asked for.
    let mut by_dir: BTreeMap<std::path::PathBuf, BTreeMap<String, Vec<DescribeLogDirsPartition>>> =
        BTreeMap::new();
    for part in broker.replica_manager.all() {
        let tp = (part.topic.clone(), part.index);
        if wanted.as_ref().is_some_and(|w| !w.contains(&tp)) {
            continue;
        }
        let Some(dir) = log_manager.log_dir_of(&tp) else {
            continue;
        };
        let (size, leo) = part.with_log(|log| (log.size_in_bytes(), log.log_end_offset()));
        let lag = (part.high_watermark() - leo).max(0);
        by_dir
            .entry(dir.path.clone())
            .or_default()
            .entry(part.topic.clone())
            .or_default()
            .push(
                DescribeLogDirsPartition::default()
                    .with_partition_index(part.index)
                    .with_partition_size(size as i64)
                    .with_offset_lag(lag)
                    .with_is_future_key(false),
            );
    }
    let results = log_manager
        .dirs()
        .iter()
        .map(|d| {
            let shown = std::path::absolute(&d.path).unwrap_or_else(|_| d.path.clone());
            let res =
                DescribeLogDirsResult::default().with_log_dir(str_bytes(&shown.to_string_lossy()));
            if log_manager.is_dir_offline(&d.path) {
                return res
                    .with_error_code(ErrorCode::KafkaStorageError.code())
                    .with_total_bytes(-1)
                    .with_usable_bytes(-1);
            }
            let (total, usable) = volume_bytes(&d.path);
            let mut topics: Vec<DescribeLogDirsTopic> = by_dir
                .remove(&d.path)
                .unwrap_or_default()
                .into_iter()
                .map(|(name, mut partitions)| {
                    partitions.sort_by_key(|p| p.partition_index);
                    DescribeLogDirsTopic::default()
                        .with_name(TopicName(str_bytes(&name)))
                        .with_partitions(partitions)
                })
                .collect();
            topics.sort_by(|a, b| a.name.0.cmp(&b.name.0));
            res.with_topics(topics)
                .with_total_bytes(total)
                .with_usable_bytes(usable)
        })
        .collect();
    DescribeLogDirsResponse::default().with_results(results)
}

/// The file system's size and the space an unprivileged writer may still use, as Java's
/// `FileStore.getTotalSpace` / `getUsableSpace` (blocks times fragment size; available blocks
/// for the usable part); -1 (Kafka's "unknown") when the file system does not answer.
fn volume_bytes(dir: &Path) -> (i64, i64) {
    match rustix::fs::statvfs(dir) {
        Ok(s) => {
            let bytes =
                |blocks: u64| i64::try_from(blocks.saturating_mul(s.f_frsize)).unwrap_or(i64::MAX);
            (bytes(s.f_blocks), bytes(s.f_bavail))
        }
        Err(_) => (-1, -1),
    }
}

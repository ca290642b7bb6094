//! DeleteRecords: moves each partition's log start offset forward (offset -1 = the high
//! watermark), deleting whole segments below it; the answer is the new low watermark, once
//! every replica has moved (the replica manager's delete-records purgatory).

use std::sync::Arc;
use std::time::Duration;

use strom_protocol::kafka::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use strom_protocol::kafka::messages::{DeleteRecordsRequest, DeleteRecordsResponse};

use crate::server::Broker;

pub async fn handle(broker: &Arc<Broker>, req: DeleteRecordsRequest) -> DeleteRecordsResponse {
    let timeout = Duration::from_millis(req.timeout_ms.max(0) as u64);
    let requests: Vec<(String, i32, i64)> = req
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (t.name.0.to_string(), p.partition_index, p.offset))
        })
        .collect();
    let mut results = broker
        .replica_manager
        .delete_records(timeout, &requests)
        .await
        .into_iter();
    let topics = req
        .topics
        .into_iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let r = results.next().expect("one result per partition");
                    DeleteRecordsPartitionResult::default()
                        .with_partition_index(p.partition_index)
                        .with_low_watermark(r.low_watermark)
                        .with_error_code(r.error.map_or(0, |e| e.code()))
                })
                .collect();
            DeleteRecordsTopicResult::default()
                .with_name(t.name)
                .with_partitions(partitions)
        })
        .collect();
    DeleteRecordsResponse::default().with_topics(topics)
}

//! DeleteRecords: moves a partition's log start offset forward (offset -1 = the high
//! watermark), deleting whole segments below it; the answer is the new low watermark.

use std::sync::Arc;

use strom_protocol::kafka::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use strom_protocol::kafka::messages::{DeleteRecordsRequest, DeleteRecordsResponse};
use strom_protocol::ErrorCode;

use crate::server::Broker;

const HIGH_WATERMARK: i64 = -1;

pub async fn handle(broker: &Arc<Broker>, req: DeleteRecordsRequest) -> DeleteRecordsResponse {
    let deadline = tokio::time::Instant::now()
        + std::time::Duration::from_millis(req.timeout_ms.max(0) as u64);
    let mut waiting = Vec::new();
    let mut resp = append_deletes(broker, req, &mut waiting);
    // Kafka's DelayedDeleteRecords: the answer waits until every replica has moved its log start
    // (the low watermark), learned by the followers from their fetches.
    for (t, p, part, target) in waiting {
        let mut lw = part.low_watermark();
        while lw < target && tokio::time::Instant::now() < deadline {
            let n = Arc::new(tokio::sync::Notify::new());
            part.register_waiter(&n);
            let _ = tokio::time::timeout(std::time::Duration::from_millis(50), n.notified()).await;
            lw = part.low_watermark();
        }
        let r = &mut resp.topics[t].partitions[p];
        r.low_watermark = lw;
        if lw < target {
            r.error_code = ErrorCode::RequestTimedOut.code();
        }
    }
    resp
}

type Waiting = (usize, usize, Arc<crate::partition::Partition>, i64);

fn append_deletes(
    broker: &Arc<Broker>,
    req: DeleteRecordsRequest,
    waiting: &mut Vec<Waiting>,
) -> DeleteRecordsResponse {
    let topics = req
        .topics
        .into_iter()
        .enumerate()
        .map(|(ti, t)| {
            let name = t.name.0.to_string();
            let partitions = t
                .partitions
                .into_iter()
                .enumerate()
                .map(|(pi, p)| {
                    let res = DeleteRecordsPartitionResult::default()
                        .with_partition_index(p.partition_index)
                        .with_low_watermark(-1);
                    let part = match broker
                        .replica_manager
                        .get_partition_or_error(&name, p.partition_index)
                    {
                        Ok(p) => p,
                        Err(code) => return res.with_error_code(code.code()),
                    };
                    if !part.is_leader() {
                        return res.with_error_code(ErrorCode::NotLeaderOrFollower.code());
                    }
                    let hw = part.high_watermark();
                    let target = if p.offset == HIGH_WATERMARK {
                        hw
                    } else {
                        p.offset
                    };
                    if target < 0 || target > hw {
                        return res.with_error_code(ErrorCode::OffsetOutOfRange.code());
                    }
                    match part.with_log(|log| log.maybe_increment_log_start_offset(target)) {
                        Ok(()) => {
                            waiting.push((ti, pi, part.clone(), target));
                            res.with_low_watermark(part.log_start_offset())
                        }
                        Err(e) => res.with_error_code(e.error_code().code()),
                    }
                })
                .collect();
            DeleteRecordsTopicResult::default()
                .with_name(t.name)
                .with_partitions(partitions)
        })
        .collect();
    DeleteRecordsResponse::default().with_topics(topics)
}

//! Building and queueing the Produce request for a set of drained batches.

use std::sync::Arc;

use strom_protocol::kafka::messages::produce_request::{PartitionProduceData, TopicProduceData};
use strom_protocol::kafka::messages::{ApiKey, ProduceRequest, TopicName, TransactionalId};
use strom_protocol::kafka::protocol::StrBytes;

use super::{Event, ProducerBatch, State};
use crate::connection::Connection;

impl State {
    /// Queues the Produce request on the connection now (so requests reach the broker in
    /// drain order) and awaits the response in a task.
    pub(super) fn dispatch(&self, node: i32, conn: Arc<Connection>, batches: Vec<ProducerBatch>) {
        let events = self.events.clone();
        let acks = self.config.acks.value();
        let timeout_ms = self
            .config
            .request_timeout
            .as_millis()
            .min(i32::MAX as u128) as i32;
        let mut topics: Vec<TopicProduceData> = Vec::new();
        for b in &batches {
            let mut pd = PartitionProduceData::default();
            pd.index = b.partition;
            pd.records = b.encoded().cloned();
            match topics.iter_mut().find(|t| t.name.0.as_str() == b.topic) {
                Some(t) => t.partition_data.push(pd),
                None => {
                    let mut t = TopicProduceData::default();
                    t.name = TopicName(StrBytes::from_string(b.topic.clone()));
                    t.partition_data.push(pd);
                    topics.push(t);
                }
            }
        }
        let mut req = ProduceRequest::default();
        req.acks = acks;
        req.timeout_ms = timeout_ms;
        req.topic_data = topics;
        // The broker authorizes transactional batches by this id.
        req.transactional_id = self
            .config
            .transactional_id
            .clone()
            .map(|id| TransactionalId(StrBytes::from_string(id)));
        let version = match conn.version_for(ApiKey::Produce) {
            Ok(v) => v.min(self.txn_max_produce_version()),
            Err(e) => {
                let _ = events.send(Event::Produced {
                    node,
                    conn: Some(conn),
                    batches,
                    result: Err(e),
                });
                return;
            }
        };
        if acks == 0 {
            let result = conn.send_no_response(&req, version).map(|_| None);
            let _ = events.send(Event::Produced {
                node,
                conn: Some(conn),
                batches,
                result,
            });
            return;
        }
        match conn.send_ordered(&req, version) {
            Ok(fut) => {
                tokio::spawn(async move {
                    let result = fut.await.map(Some);
                    let _ = events.send(Event::Produced {
                        node,
                        conn: Some(conn),
                        batches,
                        result,
                    });
                });
            }
            Err(e) => {
                let _ = events.send(Event::Produced {
                    node,
                    conn: Some(conn),
                    batches,
                    result: Err(e),
                });
            }
        }
    }
}

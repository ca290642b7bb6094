//! DeleteRecords (the low watermark) and OffsetForLeaderEpoch over the wire, with a restart in
//! between so the log-start-offset and leader-epoch checkpoints are exercised.

mod common;

use common::*;
use strom_protocol::kafka::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use strom_protocol::kafka::messages::offset_for_leader_epoch_request::{
    OffsetForLeaderPartition, OffsetForLeaderTopic,
};
use strom_protocol::kafka::messages::{
    ApiKey, DeleteRecordsRequest, DeleteRecordsResponse, OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse, TopicName,
};
use strom_protocol::kafka::protocol::StrBytes;

const TOPIC: &str = "lw";

fn delete_records(broker: &Broker, offset: i64) -> (i16, i64) {
    let req = DeleteRecordsRequest::default()
        .with_timeout_ms(5_000)
        .with_topics(vec![DeleteRecordsTopic::default()
            .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
            .with_partitions(vec![DeleteRecordsPartition::default()
                .with_partition_index(0)
                .with_offset(offset)])]);
    let resp: DeleteRecordsResponse =
        raw_call(&mut connect(broker), ApiKey::DeleteRecords, 2, &req);
    let p = &resp.topics[0].partitions[0];
    (p.error_code, p.low_watermark)
}

fn end_offset_for(broker: &Broker, current: i32, epoch: i32) -> (i16, i32, i64) {
    let req = OffsetForLeaderEpochRequest::default()
        .with_replica_id((-1).into())
        .with_topics(vec![OffsetForLeaderTopic::default()
            .with_topic(TopicName(StrBytes::from_static_str(TOPIC)))
            .with_partitions(vec![OffsetForLeaderPartition::default()
                .with_partition(0)
                .with_current_leader_epoch(current)
                .with_leader_epoch(epoch)])]);
    let resp: OffsetForLeaderEpochResponse =
        raw_call(&mut connect(broker), ApiKey::OffsetForLeaderEpoch, 4, &req);
    let p = &resp.topics[0].partitions[0];
    (p.error_code, p.leader_epoch, p.end_offset)
}

/// The offset of the first record a consumer starting at "beginning" gets.
fn first_offset_from_beginning(broker: &Broker) -> i64 {
    use rdkafka::consumer::Consumer;
    use rdkafka::Message;
    let c = consumer(broker);
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(TOPIC, 0, rdkafka::Offset::Beginning)
        .unwrap();
    c.assign(&tpl).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::time::Instant::now() < deadline {
        if let Some(m) = c.poll(std::time::Duration::from_millis(200)) {
            return m.expect("consume").offset();
        }
    }
    panic!("no record from the beginning");
}

#[test]
fn delete_records_moves_the_low_watermark_and_survives_restart() {
    let mut broker = Broker::start_with(&["log.segment.bytes=2000"]);
    create_topic(&broker, TOPIC, 1, &[]);
    let recs = simple_records("lw", 200, Some(0));
    produce_ok(
        &broker,
        TOPIC,
        &[("linger.ms", "0"), ("batch.num.messages", "10")],
        &recs,
    );
    assert_eq!(watermarks(&broker, TOPIC, 0), (0, 200));

    assert_eq!(delete_records(&broker, 50), (0, 50));
    assert_eq!(watermarks(&broker, TOPIC, 0), (50, 200));
    // Beyond the high watermark, and backwards (a no-op), as Kafka answers them.
    assert_eq!(delete_records(&broker, 201).0, 1);
    assert_eq!(delete_records(&broker, 10), (0, 50));
    assert_eq!(first_offset_from_beginning(&broker), 50);

    assert_clean_exit(broker.stop());
    broker.restart();
    assert_eq!(watermarks(&broker, TOPIC, 0), (50, 200));
    // -1 means "up to the high watermark".
    assert_eq!(delete_records(&broker, -1), (0, 200));
    assert_eq!(watermarks(&broker, TOPIC, 0), (200, 200));
}

#[test]
fn offset_for_leader_epoch_answers_from_the_epoch_cache() {
    let mut broker = Broker::start();
    create_topic(&broker, TOPIC, 1, &[]);
    produce_ok(&broker, TOPIC, &[], &simple_records("e", 30, Some(0)));
    // A single node is leader in epoch 0 from the start.
    assert_eq!(end_offset_for(&broker, 0, 0), (0, 0, 30));
    assert_eq!(end_offset_for(&broker, -1, 0), (0, 0, 30));
    assert_eq!(end_offset_for(&broker, -1, 3), (0, -1, -1));
    // A fenced and a future current epoch.
    assert_eq!(end_offset_for(&broker, 5, 0).0, 75);
    broker.kill();
    broker.restart();
    // The restarted node is a new incarnation: fenced, then leader again in a later epoch
    // (as Kafka's controller moves leadership of a fenced broker's partitions), so epoch 0 is
    // asked without a current epoch and ends where the next one starts.
    assert_eq!(end_offset_for(&broker, -1, 0), (0, 0, 30));
    assert_eq!(end_offset_for(&broker, 0, 0).0, 74);
    assert!(list_files(&broker.partition_dir(TOPIC, 0))
        .iter()
        .any(|f| f == "leader-epoch-checkpoint"));
}

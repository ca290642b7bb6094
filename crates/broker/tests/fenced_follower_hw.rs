//! A leader whose follower the controller fences and drops from the ISR (session timeout, not
//! the leader's own shrink) moves its HW on that metadata image and completes the waiting
//! acks=all produce, although the follower was caught up less than `replica.lag.time.max.ms`
//! ago: a fenced replica cannot join the ISR, so the HW does not wait for it (Kafka's
//! `maybeIncrementLeaderHW` / `isReplicaIsrEligible`). Regression for the chaos `isr-loss` stall:
//! the leader kept waiting for the dead follower and, with no further append or follower LEO
//! move to recompute the HW, acks=all never completed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use strom_broker::config::BrokerConfig;
use strom_broker::replica_manager::ReplicaManager;
use strom_broker::replication::{wait_for_acks, AckResult};
use strom_controller::{BrokerInfo, MetadataImage, PartitionRegistration, TopicImage};
use strom_storage::AppendOrigin;
use uuid::Uuid;

const TOPIC: &str = "fenced-follower";
const LEADER: i32 = 1;

fn batch(n: usize) -> Vec<u8> {
    strom_protocol::testing::value_batch(n, 1_700_000_000_000)
}

/// Brokers 1-3 (`fenced` fenced); the topic's one partition led by 1 on [1, 2, 3] with `isr`,
/// min.insync.replicas 2.
fn image(fenced: &[i32], isr: &[i32], partition_epoch: i32) -> MetadataImage {
    let mut img = MetadataImage::default();
    for id in 1..=3 {
        img.brokers.insert(
            id,
            BrokerInfo {
                node_id: id,
                host: "127.0.0.1".into(),
                port: 9000 + id,
                rack: None,
                incarnation_id: Uuid::nil(),
                epoch: -1,
                fenced: fenced.contains(&id),
                in_controlled_shutdown: false,
            },
        );
    }
    let id = Uuid::from_u128(0x5707);
    let partitions = BTreeMap::from([(
        0,
        PartitionRegistration {
            replicas: vec![1, 2, 3],
            isr: isr.to_vec(),
            leader: LEADER,
            leader_epoch: 0,
            partition_epoch,
            adding_replicas: Vec::new(),
            removing_replicas: Vec::new(),
        },
    )]);
    let configs = BTreeMap::from([("min.insync.replicas".to_string(), "2".to_string())]);
    img.topics.insert(
        TOPIC.into(),
        TopicImage {
            name: TOPIC.into(),
            id,
            partitions,
            configs,
        },
    );
    img.topic_names_by_id.insert(id, TOPIC.into());
    img
}

#[tokio::test]
async fn fencing_a_caught_up_follower_completes_waiting_acks_all() {
    let dir = tempfile::tempdir().unwrap();
    let config = BrokerConfig::new(
        LEADER,
        "127.0.0.1:0".parse().unwrap(),
        None,
        dir.path().to_path_buf(),
        BTreeMap::new(),
    )
    .unwrap();
    let rm = ReplicaManager::new(Arc::new(config)).unwrap();
    rm.apply_image(&image(&[], &[1, 2, 3], 0));
    let p = rm.get(TOPIC, 0).expect("hosted");
    assert!(p.is_leader());

    // Both followers replicate the first 10 records.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    p.append_records_to_leader(&batch(10), AppendOrigin::Client, 1, p.leader_epoch(), now)
        .unwrap();
    assert!(p.update_follower_fetch_state(2, 10, 0, now, 10, -1));
    assert!(p.update_follower_fetch_state(3, 10, 0, now, 10, -1));
    assert_eq!(p.high_watermark(), 10);

    // Follower 3 dies; follower 2 takes the next 5. acks=all for them waits for 3.
    p.append_records_to_leader(&batch(5), AppendOrigin::Client, 1, p.leader_epoch(), now)
        .unwrap();
    assert!(p.update_follower_fetch_state(2, 15, 0, now, 15, -1));
    assert_eq!(p.high_watermark(), 10);
    let pending = vec![(p.clone(), 15)];
    let acks = tokio::spawn(async move { wait_for_acks(&pending, Duration::from_secs(10)).await });

    // The controller fences 3 after the session timeout (3 s here, well within the 30 s
    // replica.lag.time.max.ms): the ISR change, then the fence, in separate images.
    rm.apply_image(&image(&[], &[1, 2], 1));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!acks.is_finished(), "3 is still eligible to rejoin");
    rm.apply_image(&image(&[3], &[1, 2], 1));

    let result = tokio::time::timeout(Duration::from_secs(2), acks)
        .await
        .expect("acks=all completes once the follower is fenced")
        .unwrap();
    assert_eq!(result, vec![AckResult::Done]);
    assert_eq!(p.high_watermark(), 15);
    assert_eq!(p.isr(), vec![1, 2]);
}

//! `ReplicaManager::apply_delta` (Kafka's `ReplicaManager.applyDelta`) driven by the deltas the
//! controller's replay produces: new replicas of this broker are opened, leadership changes
//! applied, replicas reassigned away or of deleted topics closed and their dirs deleted, a topic
//! re-created under an old name gets a fresh log, and changes elsewhere leave it alone.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;
use strom_broker::config::BrokerConfig;
use strom_broker::replica_manager::ReplicaManager;
use strom_controller::state::MetadataState;
use strom_controller::{MetadataDelta, MetadataImage, MetadataRecord};
use uuid::Uuid;

const NODE: i32 = 1;

fn partition(id: Uuid, p: i32, replicas: &[i32]) -> MetadataRecord {
    MetadataRecord::Partition {
        topic_id: id,
        partition: p,
        replicas: replicas.to_vec(),
        isr: replicas.to_vec(),
        leader: replicas[0],
        leader_epoch: 0,
        partition_epoch: 0,
        adding_replicas: Vec::new(),
        removing_replicas: Vec::new(),
    }
}

fn change(id: Uuid, p: i32, leader: Option<i32>, replicas: Option<Vec<i32>>) -> MetadataRecord {
    MetadataRecord::PartitionChange {
        topic_id: id,
        partition: p,
        leader,
        isr: replicas.clone(),
        replicas,
        adding_replicas: None,
        removing_replicas: None,
    }
}

fn topic(name: &str, id: Uuid) -> MetadataRecord {
    MetadataRecord::Topic {
        name: name.into(),
        topic_id: id,
    }
}

type Published = Arc<Mutex<Vec<(MetadataDelta, Arc<MetadataImage>)>>>;

/// Replays `records` and applies the published delta to `rm`, as the loader does.
fn step(
    state: &MetadataState,
    published: &Published,
    rm: &ReplicaManager,
    records: &[MetadataRecord],
) {
    state.apply(records);
    let (delta, image) = published.lock().pop().unwrap();
    rm.apply_delta(&delta, &image);
}

#[tokio::test]
async fn replicas_follow_the_deltas() {
    let dir = tempfile::tempdir().unwrap();
    let config = BrokerConfig::new(
        NODE,
        "127.0.0.1:0".parse().unwrap(),
        None,
        dir.path().to_path_buf(),
        BTreeMap::new(),
    )
    .unwrap();
    let rm = ReplicaManager::new(Arc::new(config)).unwrap();
    let state = MetadataState::default();
    let published: Published = Arc::new(Mutex::new(Vec::new()));
    let sink = published.clone();
    state.set_publisher(Box::new(move |d, img| sink.lock().push((d, img.clone()))));
    published.lock().clear();

    let (a, b, b2, c) = (
        Uuid::new_v4(),
        Uuid::new_v4(),
        Uuid::new_v4(),
        Uuid::new_v4(),
    );
    let mut records = Vec::new();
    for n in [1, 2] {
        records.push(MetadataRecord::RegisterBroker {
            node_id: n,
            host: "127.0.0.1".into(),
            port: 9000 + n,
            rack: None,
            incarnation_id: uuid::Uuid::nil(),
            broker_epoch: None,
            fenced: None,
            in_controlled_shutdown: None,
        });
    }
    records.extend([
        topic("a", a),
        partition(a, 0, &[1, 2]),
        partition(a, 1, &[2]),
        topic("b", b),
        partition(b, 0, &[1]),
    ]);
    step(&state, &published, &rm, &records);
    let hosted = |rm: &ReplicaManager| {
        let mut v: Vec<(String, i32)> = rm
            .all()
            .iter()
            .map(|p| (p.topic.clone(), p.index))
            .collect();
        v.sort();
        v
    };
    assert_eq!(hosted(&rm), vec![("a".into(), 0), ("b".into(), 0)]);
    let a0 = rm.get("a", 0).unwrap();
    assert!(a0.is_leader());
    assert!(dir.path().join("a-0").is_dir() && !dir.path().join("a-1").exists());

    // Leadership of a-0 moves to broker 2: this broker follows, with the new epoch.
    step(&state, &published, &rm, &[change(a, 0, Some(2), None)]);
    assert!(!a0.is_leader());
    assert_eq!(a0.leader_epoch(), 1);

    // A topic elsewhere changes nothing here: the same replica objects stay.
    let b0 = rm.get("b", 0).unwrap();
    step(
        &state,
        &published,
        &rm,
        &[topic("c", c), partition(c, 0, &[2])],
    );
    assert_eq!(hosted(&rm), vec![("a".into(), 0), ("b".into(), 0)]);
    assert!(Arc::ptr_eq(&b0, &rm.get("b", 0).unwrap()));

    // a-0 is reassigned away from this broker: closed and deleted.
    step(
        &state,
        &published,
        &rm,
        &[change(a, 0, None, Some(vec![2]))],
    );
    assert_eq!(hosted(&rm), vec![("b".into(), 0)]);
    assert!(!dir.path().join("a-0").exists());

    // b is deleted and re-created under the same name in one batch: a fresh log.
    step(
        &state,
        &published,
        &rm,
        &[
            MetadataRecord::RemoveTopic { topic_id: b },
            topic("b", b2),
            partition(b2, 0, &[1]),
        ],
    );
    let new_b0 = rm.get("b", 0).unwrap();
    assert_eq!(new_b0.topic_id, b2);
    assert!(!Arc::ptr_eq(&b0, &new_b0));
    drop((a0, b0));

    // Deleting it removes the dir.
    step(
        &state,
        &published,
        &rm,
        &[MetadataRecord::RemoveTopic { topic_id: b2 }],
    );
    assert!(rm.all().is_empty());
    assert!(!dir.path().join("b-0").exists());
}

use std::sync::Arc;

use parking_lot::Mutex;

use super::*;
use crate::state::MetadataState;

fn topic(name: &str, id: Uuid) -> MetadataRecord {
    MetadataRecord::Topic {
        name: name.into(),
        topic_id: id,
    }
}

fn partition(id: Uuid, p: i32, replicas: &[i32], leader: i32) -> MetadataRecord {
    MetadataRecord::Partition {
        topic_id: id,
        partition: p,
        replicas: replicas.to_vec(),
        isr: replicas.to_vec(),
        leader,
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

/// A state whose publisher records every (delta, image offset) it is handed.
#[allow(clippy::type_complexity)]
fn recording_state() -> (MetadataState, Arc<Mutex<Vec<(MetadataDelta, u64)>>>) {
    let s = MetadataState::default();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    s.set_publisher(Box::new(move |d, img| sink.lock().push((d, img.offset))));
    (s, seen)
}

fn last(seen: &Mutex<Vec<(MetadataDelta, u64)>>) -> MetadataDelta {
    seen.lock().last().unwrap().0.clone()
}

#[test]
fn replay_publishes_what_each_batch_changed() {
    let (s, seen) = recording_state();
    assert!(last(&seen).is_empty(), "the first delta of an empty image");
    let id = Uuid::new_v4();
    s.apply(&[
        MetadataRecord::RegisterBroker {
            node_id: 1,
            host: "h".into(),
            port: 1,
            rack: None,
            incarnation_id: uuid::Uuid::nil(),
            broker_epoch: None,
            fenced: None,
            in_controlled_shutdown: None,
        },
        topic("t", id),
        MetadataRecord::TopicConfig {
            topic: "t".into(),
            name: "retention.ms".into(),
            value: Some("5".into()),
        },
        partition(id, 0, &[1, 2], 1),
        partition(id, 1, &[2, 3], 2),
    ]);
    let d = last(&seen);
    assert_eq!(d.created_topics, BTreeSet::from([id]));
    assert_eq!(d.changed_partitions, BTreeSet::from([(id, 0), (id, 1)]));
    assert!(
        d.previous_replicas.is_empty(),
        "new partitions have no past"
    );
    assert_eq!(d.changed_configs, BTreeSet::from([id]));
    assert_eq!(d.changed_brokers, BTreeSet::from([1]));
    assert!(d.removed_topics.is_empty() && !d.producer_ids_changed);

    // Only what the next batch touches.
    s.apply(&[
        change(id, 1, Some(3), None),
        MetadataRecord::ProducerIds {
            broker_id: 1,
            next_producer_id: 1000,
        },
    ]);
    let d = last(&seen);
    assert!(d.created_topics.is_empty() && d.changed_brokers.is_empty());
    assert_eq!(d.changed_partitions, BTreeSet::from([(id, 1)]));
    assert_eq!(d.previous_leaders[&(id, 1)], 2);
    assert!(d.producer_ids_changed);
    assert_eq!(seen.lock().len(), 3);
    assert_eq!(seen.lock().last().unwrap().1, s.image().offset);
}

#[test]
fn local_changes_name_leaders_followers_and_deletes() {
    let (s, seen) = recording_state();
    let id = Uuid::new_v4();
    s.apply(&[
        topic("t", id),
        partition(id, 0, &[1, 2], 1),
        partition(id, 1, &[2, 3], 2),
    ]);
    let img = s.image();
    let c = last(&seen).local_changes(2, &img);
    assert_eq!(c.leaders.len(), 1);
    assert_eq!(
        (c.leaders[0].partition, c.leaders[0].previous_leader),
        (1, None)
    );
    assert!(c.leaders[0].became_leader(2));
    assert_eq!(c.followers.len(), 1);
    assert_eq!(c.followers[0].partition, 0);
    assert!(c.deletes.is_empty());
    assert!(last(&seen).local_changes(4, &img) == LocalReplicaChanges::default());

    // Leadership of partition 0 moves from 1 to 2; partition 1 is reassigned off broker 3.
    s.apply(&[
        change(id, 0, Some(2), None),
        change(id, 1, None, Some(vec![2, 4])),
    ]);
    let img = s.image();
    let d = last(&seen);
    let on2 = d.local_changes(2, &img);
    let p0 = on2.leaders.iter().find(|p| p.partition == 0).unwrap();
    assert!(p0.became_leader(2) && !p0.resigned(2));
    let on1 = d.local_changes(1, &img);
    assert_eq!(on1.followers.len(), 1);
    assert!(on1.followers[0].resigned(1));
    assert_eq!(d.local_changes(3, &img).deletes, vec![("t".into(), id, 1)]);
    let on4 = d.local_changes(4, &img);
    assert_eq!(
        (on4.followers.len(), on4.followers[0].previous_leader),
        (1, None)
    );

    // Deleting the topic: every hosting broker deletes its replicas.
    s.apply(&[MetadataRecord::RemoveTopic { topic_id: id }]);
    let d = last(&seen);
    assert_eq!(d.removed_topics[&id].name, "t");
    assert!(d.changed_partitions.is_empty());
    let img = s.image();
    let mut on2 = d.local_changes(2, &img).deletes;
    on2.sort();
    assert_eq!(on2, vec![("t".into(), id, 0), ("t".into(), id, 1)]);
    assert_eq!(d.local_changes(1, &img).deletes, vec![("t".into(), id, 0)]);
    assert!(d.local_changes(3, &img).deletes.is_empty());
}

#[test]
fn a_topic_created_and_removed_in_one_delta_leaves_no_trace() {
    let (s, seen) = recording_state();
    let id = Uuid::new_v4();
    s.apply(&[
        topic("t", id),
        partition(id, 0, &[1], 1),
        MetadataRecord::RemoveTopic { topic_id: id },
    ]);
    let d = last(&seen);
    assert!(d.created_topics.is_empty() && d.removed_topics.is_empty());
    assert!(d.changed_partitions.is_empty());
    assert!(d.local_changes(1, &s.image()) == LocalReplicaChanges::default());
}

/// Publishing several batches at once (the loader coalescing a backlog) must tell publishers
/// the same as one delta over all of them.
#[test]
fn merged_deltas_equal_the_delta_of_the_combined_batch() {
    let old = Uuid::new_v4();
    let new = Uuid::new_v4();
    let batches: Vec<Vec<MetadataRecord>> = vec![
        vec![topic("a", old), partition(old, 0, &[1, 2], 1)],
        vec![change(old, 0, None, Some(vec![2, 3]))],
        vec![MetadataRecord::RemoveTopic { topic_id: old }],
        vec![
            topic("a", new),
            partition(new, 0, &[3], 3),
            MetadataRecord::BrokerRegistrationChange {
                broker_id: 3,
                fenced: Some(true),
                in_controlled_shutdown: None,
            },
        ],
        vec![change(new, 0, Some(-1), None)],
    ];
    let base = vec![
        topic("keep", Uuid::nil()),
        partition(Uuid::nil(), 0, &[1], 1),
    ];
    for split in 0..batches.len() {
        let (s, seen) = recording_state();
        s.apply(&base);
        s.apply(&batches[..split].concat());
        let n = seen.lock().len();
        for b in &batches[split..] {
            s.apply(b);
        }
        let mut merged = MetadataDelta::default();
        for (d, _) in seen.lock().drain(n..) {
            merged.merge(d);
        }
        let (one, one_seen) = recording_state();
        one.apply(&base);
        one.apply(&batches[..split].concat());
        one.apply(&batches[split..].concat());
        assert_eq!(merged, last(&one_seen), "split at {split}");
    }
}

#[test]
fn a_snapshot_publishes_the_difference_from_the_old_image() {
    let gone = Uuid::new_v4();
    let kept = Uuid::new_v4();
    let mut old = MetadataImage::default();
    let mut new = MetadataImage::default();
    for r in [topic("gone", gone), partition(gone, 0, &[1], 1)] {
        old.replay(&r);
    }
    for r in [topic("kept", kept), partition(kept, 0, &[1, 2], 2)] {
        old.replay(&r);
        new.replay(&r);
    }
    new.replay(&change(kept, 0, Some(1), None));
    let d = MetadataDelta::between(&old, &new);
    assert_eq!(d.removed_topics.keys().collect::<Vec<_>>(), vec![&gone]);
    assert!(d.created_topics.is_empty());
    assert_eq!(d.changed_partitions, BTreeSet::from([(kept, 0)]));
    let on1 = d.local_changes(1, &new);
    assert_eq!(on1.deletes, vec![("gone".into(), gone, 0)]);
    assert!(on1.leaders[0].became_leader(1));
}

//! The metadata image shared by the controller and the Raft state machine: every committed
//! batch of records is replayed here, on every node, and the new image published in log order.

use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use strom_raft::{HandlerError, StateMachineHandler};

use crate::controller::Publisher;
use crate::delta::MetadataDelta;
use crate::image::MetadataImage;
use crate::record::MetadataRecord;

#[derive(Default)]
pub struct MetadataState {
    image: RwLock<Arc<MetadataImage>>,
    publisher: Mutex<Option<Publisher>>,
}

impl MetadataState {
    pub fn image(&self) -> Arc<MetadataImage> {
        self.image.read().clone()
    }

    /// Registers the publisher; it is called at once with the current image (and a delta from
    /// nothing), then with every new image in log order.
    pub fn set_publisher(&self, publisher: Publisher) {
        // Under the image lock so no replay can slip between the first call and registration.
        let guard = self.image.write();
        publisher(
            MetadataDelta::between(&MetadataImage::default(), &guard),
            &guard,
        );
        *self.publisher.lock() = Some(publisher);
    }

    /// Replays records onto the current image and publishes the result with what changed. The
    /// write lock is held through publishing so observers see images in log order; the
    /// publisher only hands them on (it must not block), so no I/O happens under the lock.
    pub fn apply(&self, records: &[MetadataRecord]) {
        let mut guard = self.image.write();
        let mut image = (**guard).clone();
        let mut delta = MetadataDelta::default();
        for r in records {
            delta.record(&image, r);
            image.replay(r);
        }
        self.install(&mut guard, delta, image);
    }

    /// Replaces the image with one rebuilt from a snapshot: its records, at its log offset.
    fn reset(&self, records: &[MetadataRecord], offset: u64) {
        let mut guard = self.image.write();
        let mut image = MetadataImage::default();
        for r in records {
            image.replay(r);
        }
        // The snapshot's records stand for everything before `offset`; the next record
        // replayed is at `offset` (its position in the log, not in the snapshot).
        image.offset = offset;
        let delta = MetadataDelta::between(&guard, &image);
        self.install(&mut guard, delta, image);
    }

    fn install(&self, guard: &mut Arc<MetadataImage>, delta: MetadataDelta, image: MetadataImage) {
        *guard = Arc::new(image);
        if let Some(publish) = self.publisher.lock().as_ref() {
            publish(delta, guard);
        }
    }
}

/// The records that rebuild `image` from nothing: the controller's snapshot format.
pub fn image_to_records(image: &MetadataImage) -> Vec<MetadataRecord> {
    let mut out = Vec::new();
    for b in image.brokers.values() {
        out.push(MetadataRecord::RegisterBroker {
            node_id: b.node_id,
            host: b.host.clone(),
            port: b.port,
            rack: b.rack.clone(),
            incarnation_id: b.incarnation_id,
            broker_epoch: Some(b.epoch),
            fenced: Some(b.fenced),
            in_controlled_shutdown: Some(b.in_controlled_shutdown),
        });
    }
    for t in image.topics.values() {
        out.push(MetadataRecord::Topic {
            name: t.name.clone(),
            topic_id: t.id,
        });
        for (k, v) in &t.configs {
            out.push(MetadataRecord::TopicConfig {
                topic: t.name.clone(),
                name: k.clone(),
                value: Some(v.clone()),
            });
        }
        for (p, reg) in &t.partitions {
            out.push(MetadataRecord::Partition {
                topic_id: t.id,
                partition: *p,
                replicas: reg.replicas.clone(),
                isr: reg.isr.clone(),
                leader: reg.leader,
                leader_epoch: reg.leader_epoch,
                partition_epoch: reg.partition_epoch,
                adding_replicas: reg.adding_replicas.clone(),
                removing_replicas: reg.removing_replicas.clone(),
            });
        }
    }
    for (&broker_id, replicas) in &image.offline_replicas {
        out.push(MetadataRecord::ReplicaDirectories {
            broker_id,
            directory: crate::log_dirs::DIRECTORY_LOST,
            replicas: replicas.iter().copied().collect(),
        });
    }
    if image.next_producer_id > 0 {
        out.push(MetadataRecord::ProducerIds {
            broker_id: -1,
            next_producer_id: image.next_producer_id,
        });
    }
    out
}

/// The controller's snapshot: the records that rebuild the image and the log offset they
/// stand for (Kafka names a snapshot by its end offset).
#[derive(serde::Serialize, serde::Deserialize)]
struct SnapshotPayload {
    offset: u64,
    records: Vec<MetadataRecord>,
}

/// Adapts [`MetadataState`] to the Raft crate: entries are JSON arrays of records.
pub struct RaftStateMachine(pub Arc<MetadataState>);

impl StateMachineHandler for RaftStateMachine {
    fn apply(&self, index: u64, _term: u64, payload: &[u8]) {
        match serde_json::from_slice::<Vec<MetadataRecord>>(payload) {
            Ok(records) => self.0.apply(&records),
            // Every entry was written by a controller of this version: an unreadable one is a
            // bug, and skipping it would silently diverge, so it is loud.
            Err(e) => tracing::error!(index, error = %e, "unreadable metadata entry"),
        }
    }

    fn snapshot(&self) -> Vec<u8> {
        let image = self.0.image();
        serde_json::to_vec(&SnapshotPayload {
            offset: image.offset,
            records: image_to_records(&image),
        })
        .unwrap_or_default()
    }

    fn restore(&self, snapshot: Vec<u8>) -> Result<(), HandlerError> {
        let payload = if snapshot.is_empty() {
            SnapshotPayload {
                offset: 0,
                records: Vec::new(),
            }
        } else if snapshot.first() == Some(&b'[') {
            // Written before snapshots carried their offset: the best known position is the
            // number of records (epochs assigned from here on stay unique and increasing
            // within this log only if it is at least that; it is, records only accumulate).
            let records: Vec<MetadataRecord> =
                serde_json::from_slice(&snapshot).map_err(|e| -> HandlerError { Box::new(e) })?;
            SnapshotPayload {
                offset: records.len() as u64,
                records,
            }
        } else {
            serde_json::from_slice(&snapshot).map_err(|e| -> HandlerError { Box::new(e) })?
        };
        self.0.reset(&payload.records, payload.offset);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_records_rebuild_the_same_image() {
        let id = uuid::Uuid::new_v4();
        let records = vec![
            MetadataRecord::RegisterBroker {
                node_id: 1,
                host: "h".into(),
                port: 9092,
                rack: Some("r".into()),
                incarnation_id: uuid::Uuid::from_u128(3),
                broker_epoch: None,
                fenced: Some(true),
                in_controlled_shutdown: Some(false),
            },
            MetadataRecord::Topic {
                name: "t".into(),
                topic_id: id,
            },
            MetadataRecord::TopicConfig {
                topic: "t".into(),
                name: "retention.ms".into(),
                value: Some("5".into()),
            },
            MetadataRecord::Partition {
                topic_id: id,
                partition: 0,
                replicas: vec![1],
                isr: vec![1],
                leader: 1,
                leader_epoch: 3,
                partition_epoch: 4,
                adding_replicas: Vec::new(),
                removing_replicas: Vec::new(),
            },
            MetadataRecord::ProducerIds {
                broker_id: 1,
                next_producer_id: 2000,
            },
        ];
        let s = MetadataState::default();
        s.apply(&records);
        let sm = RaftStateMachine(Arc::new(MetadataState::default()));
        sm.restore(RaftStateMachine(Arc::new(s)).snapshot())
            .unwrap();
        let img = sm.0.image();
        assert_eq!(img.topic("t").unwrap().partitions[&0].leader_epoch, 3);
        assert_eq!(img.topic("t").unwrap().configs["retention.ms"], "5");
        assert_eq!(img.next_producer_id, 2000);
        assert_eq!(img.brokers[&1].rack.as_deref(), Some("r"));
        // The broker epoch (its registration's offset, 0) and the log position survive the
        // snapshot, though the snapshot's records are fewer than the log's.
        assert_eq!(img.brokers[&1].epoch, 0);
        assert_eq!(img.brokers[&1].incarnation_id, uuid::Uuid::from_u128(3));
        assert!(img.brokers[&1].fenced);
        assert_eq!(img.offset, records.len() as u64);
        sm.0.apply(&[MetadataRecord::RegisterBroker {
            node_id: 2,
            host: "h".into(),
            port: 9093,
            rack: None,
            incarnation_id: uuid::Uuid::from_u128(4),
            broker_epoch: None,
            fenced: Some(true),
            in_controlled_shutdown: Some(false),
        }]);
        assert_eq!(sm.0.image().brokers[&2].epoch, records.len() as i64);
    }

    /// A snapshot taken after many records (most of them superseded) restores the same
    /// offset, so a registration after it gets the epoch it would have got without one.
    #[test]
    fn snapshot_keeps_the_log_offset() {
        let s = Arc::new(MetadataState::default());
        let reg = |n: i32| MetadataRecord::RegisterBroker {
            node_id: 1,
            host: "h".into(),
            port: 9000 + n,
            rack: None,
            incarnation_id: uuid::Uuid::from_u128(n as u128),
            broker_epoch: None,
            fenced: Some(false),
            in_controlled_shutdown: Some(false),
        };
        for n in 0..10 {
            s.apply(&[reg(n)]);
        }
        let restored = RaftStateMachine(Arc::new(MetadataState::default()));
        restored
            .restore(RaftStateMachine(s.clone()).snapshot())
            .unwrap();
        assert_eq!(restored.0.image().brokers[&1].epoch, 9);
        s.apply(&[reg(10)]);
        restored.0.apply(&[reg(10)]);
        assert_eq!(s.image().brokers[&1].epoch, 10);
        assert_eq!(restored.0.image().brokers[&1].epoch, 10);
        // A snapshot of the old format (a bare array) still restores.
        let old = serde_json::to_vec(&image_to_records(&s.image())).unwrap();
        let sm = RaftStateMachine(Arc::new(MetadataState::default()));
        sm.restore(old).unwrap();
        assert_eq!(sm.0.image().brokers[&1].epoch, 10);
    }
}

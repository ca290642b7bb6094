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

    /// Replaces the image with one rebuilt from `records` alone (a snapshot).
    fn reset(&self, records: &[MetadataRecord]) {
        let mut guard = self.image.write();
        let mut image = MetadataImage::default();
        for r in records {
            image.replay(r);
        }
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
        });
        if b.fenced || b.in_controlled_shutdown {
            out.push(MetadataRecord::BrokerRegistrationChange {
                broker_id: b.node_id,
                fenced: Some(b.fenced),
                in_controlled_shutdown: Some(b.in_controlled_shutdown),
            });
        }
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
        serde_json::to_vec(&image_to_records(&self.0.image())).unwrap_or_default()
    }

    fn restore(&self, snapshot: Vec<u8>) -> Result<(), HandlerError> {
        let records: Vec<MetadataRecord> = if snapshot.is_empty() {
            Vec::new()
        } else {
            serde_json::from_slice(&snapshot).map_err(|e| -> HandlerError { Box::new(e) })?
        };
        self.0.reset(&records);
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
    }
}

//! The broker's metadata loader (Kafka's `MetadataLoader`): receives every new metadata image
//! with its delta from the controller's replay path and hands them, in log order, to the
//! registered publishers: the replica manager, then the broker's image holder (later the
//! coordinators, between the two, using `MetadataDelta::local_changes` for the partitions of
//! their internal topics).
//!
//! The image holder comes last, unlike Kafka's metadata cache, so an image seen through
//! `Broker::image()` has been applied to the hosted partitions: a Metadata answer never names
//! this broker leader of a partition it cannot serve yet, the auto-creation path (which waits
//! for the topic in that image) can append at once, and controlled shutdown (which waits for
//! that image to show no leadership of this broker) knows its partitions are followers already.
//!
//! Replay (openraft's apply, or the single-node log) runs under the controller's image lock and
//! must never wait for a publisher: opening or deleting logs does file I/O and can take long.
//! So the replay side only queues `(delta, image)` on an unbounded channel, and a dedicated
//! thread runs the publishers. When the thread falls behind, the queued deltas are merged so a
//! publisher sees the latest image and everything that changed since its previous call.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};

use parking_lot::RwLock;
use strom_controller::controller::Publisher;
use strom_controller::{MetadataDelta, MetadataImage};
use tokio::sync::watch;

use crate::replica_manager::ReplicaManager;

/// Something that follows the metadata (Kafka's `MetadataPublisher`). Calls come from the
/// loader thread, one at a time, in log order.
pub trait MetadataPublisher: Send + Sync {
    fn name(&self) -> &str;
    fn on_metadata_update(&self, delta: &MetadataDelta, image: &Arc<MetadataImage>);
}

/// The image `Broker::image()` answers from.
pub struct ImageHolder(pub Arc<RwLock<Arc<MetadataImage>>>);

impl MetadataPublisher for ImageHolder {
    fn name(&self) -> &str {
        "ImageHolder"
    }

    fn on_metadata_update(&self, _delta: &MetadataDelta, image: &Arc<MetadataImage>) {
        *self.0.write() = image.clone();
    }
}

impl MetadataPublisher for ReplicaManager {
    fn name(&self) -> &str {
        "ReplicaManager"
    }

    fn on_metadata_update(&self, delta: &MetadataDelta, image: &Arc<MetadataImage>) {
        self.apply_delta(delta, image);
    }
}

enum Event {
    Update {
        seq: u64,
        delta: MetadataDelta,
        image: Arc<MetadataImage>,
    },
    Stop,
}

pub struct MetadataLoader {
    tx: mpsc::Sender<Event>,
    /// Sequence number of the last update queued by replay.
    queued: Arc<AtomicU64>,
    /// Sequence number of the last update every publisher has seen.
    published: watch::Receiver<u64>,
    thread: parking_lot::Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl MetadataLoader {
    /// Starts the loader thread with `publishers`, called in this order for every update.
    pub fn start(publishers: Vec<Arc<dyn MetadataPublisher>>) -> Self {
        let (tx, rx) = mpsc::channel::<Event>();
        let (done_tx, published) = watch::channel(0u64);
        // Publishers may start tasks (the replica fetchers); give them the caller's runtime.
        let rt = tokio::runtime::Handle::try_current().ok();
        let thread = std::thread::Builder::new()
            .name("metadata-loader".into())
            .spawn(move || {
                let _guard = rt.as_ref().map(|h| h.enter());
                run(rx, &publishers, &done_tx);
            })
            .expect("spawn the metadata loader thread");
        Self {
            tx,
            queued: Arc::new(AtomicU64::new(0)),
            published,
            thread: parking_lot::Mutex::new(Some(thread)),
        }
    }

    /// The function to register with `QuorumController::set_publisher`: it only queues.
    pub fn sink(&self) -> Publisher {
        let tx = self.tx.clone();
        let queued = self.queued.clone();
        Box::new(move |delta, image| {
            // Called under the controller's image lock, so sequence numbers follow log order.
            let seq = queued.fetch_add(1, Ordering::SeqCst) + 1;
            let _ = tx.send(Event::Update {
                seq,
                delta,
                image: image.clone(),
            });
        })
    }

    /// Waits until every publisher has seen every image replayed before this call (a request
    /// handler's read-your-writes after a controller change).
    pub async fn caught_up(&self) {
        let target = self.queued.load(Ordering::SeqCst);
        let mut rx = self.published.clone();
        // An error means the loader thread is gone (shutdown): nothing more will be published.
        let _ = rx.wait_for(|&done| done >= target).await;
    }

    /// Ends the loader thread once the updates queued so far are published, and waits for it:
    /// after this no publisher runs (the replica manager may close its logs). Later images are
    /// dropped.
    pub async fn shutdown(&self) {
        let _ = self.tx.send(Event::Stop);
        let thread = self.thread.lock().take();
        if let Some(t) = thread {
            let _ = tokio::task::spawn_blocking(move || t.join()).await;
        }
    }
}

fn run(
    rx: mpsc::Receiver<Event>,
    publishers: &[Arc<dyn MetadataPublisher>],
    done: &watch::Sender<u64>,
) {
    let mut stop = false;
    while !stop {
        let Ok(first) = rx.recv() else { return };
        let Event::Update {
            mut seq,
            mut delta,
            mut image,
        } = first
        else {
            return;
        };
        // Catch up in one step with whatever else replay queued meanwhile.
        while let Ok(next) = rx.try_recv() {
            match next {
                Event::Update {
                    seq: s,
                    delta: d,
                    image: i,
                } => {
                    delta.merge(d);
                    seq = s;
                    image = i;
                }
                Event::Stop => {
                    stop = true;
                    break;
                }
            }
        }
        for p in publishers {
            tracing::trace!(
                publisher = p.name(),
                offset = image.offset,
                "publishing metadata"
            );
            // A failing publisher must not stop the others or later images (Kafka's loader
            // reports a fault and goes on).
            let call = std::panic::AssertUnwindSafe(|| p.on_metadata_update(&delta, &image));
            if std::panic::catch_unwind(call).is_err() {
                tracing::error!(
                    publisher = p.name(),
                    offset = image.offset,
                    "metadata publisher failed"
                );
            }
        }
        done.send_replace(seq);
    }
}

#[cfg(test)]
#[path = "metadata_loader_tests.rs"]
mod tests;

//! The broker's metadata loader (Kafka's `MetadataLoader`): receives every new metadata image
//! with its delta from the controller's replay path and hands them, in log order, to the
//! registered publishers: the replica manager, then the broker's image holder; later the
//! coordinators, added with [`MetadataLoader::install`], which learn from
//! `MetadataDelta::local_changes` which partitions of their internal topic this broker started
//! or stopped leading.
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
//!
//! A quorum member starts held ([`MetadataLoader::start_held`]): the image it replays from its
//! own log at start-up is stale when it was down while the quorum moved on (it still names it
//! leader of the partitions it led when it died, at their old epochs), so nothing is published
//! until the active controller says it has caught up ([`MetadataLoader::release`]), as Kafka's
//! broker installs its publishers only then. Without this, a restarted broker led partitions and
//! loaded coordinator shards from the stale image and answered from them.

use std::sync::{mpsc, Arc};

use parking_lot::{Mutex, RwLock};
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
        delta: MetadataDelta,
        image: Arc<MetadataImage>,
    },
    Install(Arc<dyn MetadataPublisher>),
    Release,
    Stop,
}

/// The queue's sending end with the sequence number of the last event queued, under one lock
/// so that events from replay and from `install` are numbered in queue order.
struct Queue {
    tx: mpsc::Sender<(u64, Event)>,
    last: u64,
}

impl Queue {
    fn send(&mut self, event: Event) {
        self.last += 1;
        let _ = self.tx.send((self.last, event));
    }
}

pub struct MetadataLoader {
    queue: Arc<Mutex<Queue>>,
    /// Sequence number of the last event every publisher has seen.
    published: watch::Receiver<u64>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl MetadataLoader {
    /// Starts the loader thread with `publishers`, called in this order for every update.
    pub fn start(publishers: Vec<Arc<dyn MetadataPublisher>>) -> Self {
        Self::start_with(publishers, false)
    }

    /// As [`Self::start`], but publishes nothing (and `caught_up` waits) until [`Self::release`]:
    /// then every publisher, installed ones included, gets the latest image at once.
    pub fn start_held(publishers: Vec<Arc<dyn MetadataPublisher>>) -> Self {
        Self::start_with(publishers, true)
    }

    fn start_with(publishers: Vec<Arc<dyn MetadataPublisher>>, held: bool) -> Self {
        let (tx, rx) = mpsc::channel();
        let (done_tx, published) = watch::channel(0u64);
        // Publishers may start tasks (the replica fetchers); give them the caller's runtime.
        let rt = tokio::runtime::Handle::try_current().ok();
        let thread = std::thread::Builder::new()
            .name("metadata-loader".into())
            .spawn(move || {
                let _guard = rt.as_ref().map(|h| h.enter());
                run(rx, publishers, held, &done_tx);
            })
            .expect("spawn the metadata loader thread");
        Self {
            queue: Arc::new(Mutex::new(Queue { tx, last: 0 })),
            published,
            thread: Mutex::new(Some(thread)),
        }
    }

    /// The function to register with `QuorumController::set_publisher`: it only queues.
    pub fn sink(&self) -> Publisher {
        let queue = self.queue.clone();
        // Called under the controller's image lock, so updates are queued in log order.
        Box::new(move |delta, image| {
            queue.lock().send(Event::Update {
                delta,
                image: image.clone(),
            })
        })
    }

    /// Adds a publisher after start (Kafka's `installPublishers`): it is first handed the
    /// current image with a delta from nothing, then every later update, after the others.
    pub fn install(&self, publisher: Arc<dyn MetadataPublisher>) {
        self.queue.lock().send(Event::Install(publisher));
    }

    /// Ends the hold of [`Self::start_held`] (later calls do nothing).
    pub fn release(&self) {
        self.queue.lock().send(Event::Release);
    }

    /// Waits until every publisher has seen every image queued before this call (a request
    /// handler's read-your-writes after a controller change); while held, until the release.
    pub async fn caught_up(&self) {
        let target = self.queue.lock().last;
        let mut rx = self.published.clone();
        // An error means the loader thread is gone (shutdown): nothing more will be published.
        let _ = rx.wait_for(|&done| done >= target).await;
    }

    /// A receiver that changes each time the publishers have seen a new image: a waiter for a
    /// condition on the broker's image re-checks it on every change.
    pub fn published(&self) -> watch::Receiver<u64> {
        self.published.clone()
    }

    /// Ends the loader thread once the updates queued so far are published, and waits for it:
    /// after this no publisher runs (the replica manager may close its logs). Later images are
    /// dropped.
    pub async fn shutdown(&self) {
        self.queue.lock().send(Event::Stop);
        let thread = self.thread.lock().take();
        if let Some(t) = thread {
            let _ = tokio::task::spawn_blocking(move || t.join()).await;
        }
    }
}

/// The loader thread: takes everything queued, merges consecutive updates (a backlog is
/// published in one step, with the latest image and everything that changed since), and calls
/// the publishers. While `held`, updates are only merged and installs only collected; the
/// release hands every publisher the latest image from nothing (none has seen one before).
fn run(
    rx: mpsc::Receiver<(u64, Event)>,
    mut publishers: Vec<Arc<dyn MetadataPublisher>>,
    mut held: bool,
    done: &watch::Sender<u64>,
) {
    let mut current = Arc::new(MetadataImage::default());
    let mut pending: Option<MetadataDelta> = None;
    let mut seq = 0;
    let publish =
        |p: &Arc<dyn MetadataPublisher>, delta: &MetadataDelta, image: &Arc<MetadataImage>| {
            tracing::trace!(
                publisher = p.name(),
                offset = image.offset,
                "publishing metadata"
            );
            // A failing publisher must not stop the others or later images (Kafka's loader reports
            // a fault and goes on).
            let call = std::panic::AssertUnwindSafe(|| p.on_metadata_update(delta, image));
            if std::panic::catch_unwind(call).is_err() {
                tracing::error!(
                    publisher = p.name(),
                    offset = image.offset,
                    "metadata publisher failed"
                );
            }
        };
    loop {
        let Ok(first) = rx.recv() else { return };
        let mut stop = false;
        for (n, event) in std::iter::once(first).chain(rx.try_iter()) {
            match event {
                // Held: nothing was published, so the release starts from nothing anyway.
                Event::Update { image, .. } if held => current = image,
                Event::Update { delta, image } => {
                    match pending.as_mut() {
                        Some(d) => d.merge(delta),
                        None => pending = Some(delta),
                    }
                    current = image;
                }
                Event::Install(p) if held => publishers.push(p),
                Event::Release if held => {
                    held = false;
                    let all = MetadataDelta::between(&MetadataImage::default(), &current);
                    publishers.iter().for_each(|q| publish(q, &all, &current));
                }
                Event::Release => {}
                Event::Install(p) => {
                    if let Some(d) = pending.take() {
                        publishers.iter().for_each(|q| publish(q, &d, &current));
                    }
                    publish(
                        &p,
                        &MetadataDelta::between(&MetadataImage::default(), &current),
                        &current,
                    );
                    publishers.push(p);
                }
                Event::Stop => stop = true,
            }
            if !held {
                seq = n;
            }
            if stop {
                break;
            }
        }
        if held {
            if stop {
                return;
            }
            continue;
        }
        if let Some(d) = pending.take() {
            publishers.iter().for_each(|q| publish(q, &d, &current));
        }
        done.send_replace(seq);
        if stop {
            return;
        }
    }
}

#[cfg(test)]
#[path = "metadata_loader_tests.rs"]
mod tests;

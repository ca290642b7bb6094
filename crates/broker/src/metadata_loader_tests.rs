use std::sync::mpsc;

use parking_lot::Mutex;
use strom_controller::controller::TopicDefaults;
use strom_controller::{CreateTopicSpec, QuorumController};

use super::*;

/// Broker `b`'s first incarnation, registered and unfenced by a caught-up heartbeat.
async fn add_broker(c: &QuorumController, b: i32) -> Result<(), strom_controller::ControllerError> {
    let req = strom_controller::BrokerRegistration {
        node_id: b,
        incarnation_id: uuid::Uuid::from_u128(b as u128),
        host: "127.0.0.1".into(),
        port: 9092,
        rack: None,
        previous_broker_epoch: -1,
    };
    let epoch = c.register_broker(&req, None, 1, false).await?;
    c.heartbeat(b, epoch, c.applied_offset(), 1, false).await?;
    Ok(())
}

/// Blocks every call until the test opens the gate (drops its sender), as a publisher stuck on
/// a slow disk would.
struct Gate(Mutex<mpsc::Receiver<()>>);

impl MetadataPublisher for Gate {
    fn name(&self) -> &str {
        "Gate"
    }

    fn on_metadata_update(&self, _: &MetadataDelta, _: &Arc<MetadataImage>) {
        let _ = self.0.lock().recv();
    }
}

/// Records what it is handed.
#[derive(Default)]
struct Recorder(Mutex<Vec<(MetadataDelta, Arc<MetadataImage>)>>);

impl MetadataPublisher for Recorder {
    fn name(&self) -> &str {
        "Recorder"
    }

    fn on_metadata_update(&self, delta: &MetadataDelta, image: &Arc<MetadataImage>) {
        self.0.lock().push((delta.clone(), image.clone()));
    }
}

fn controller(dir: &tempfile::TempDir) -> QuorumController {
    QuorumController::open(
        &dir.path().join("metadata.log"),
        TopicDefaults {
            num_partitions: 2,
            replication_factor: 1,
        },
    )
    .unwrap()
}

fn spec(name: &str) -> CreateTopicSpec {
    CreateTopicSpec {
        name: name.into(),
        num_partitions: -1,
        replication_factor: -1,
        ..Default::default()
    }
}

/// Replay and proposals go on while a publisher is stuck; once it is free, the publishers
/// catch up in one step, in order, with a delta covering every batch they missed.
#[tokio::test(start_paused = true)]
async fn a_stuck_publisher_blocks_neither_replay_nor_proposals() {
    let dir = tempfile::tempdir().unwrap();
    let c = controller(&dir);
    let (open, gate) = mpsc::channel();
    let recorder = Arc::new(Recorder::default());
    let loader = MetadataLoader::start(vec![Arc::new(Gate(Mutex::new(gate))), recorder.clone()]);
    c.set_publisher(loader.sink());
    add_broker(&c, 1).await.unwrap();
    for i in 0..20 {
        let r = c.create_topics(&[spec(&format!("t{i}"))], false).await;
        assert!(r[0].is_ok(), "{r:?}");
    }
    // Everything is replayed and visible through the controller...
    assert_eq!(c.image().topics.len(), 20);
    // ...while nothing got past the stuck publisher.
    assert!(recorder.0.lock().is_empty());

    drop(open);
    loader.caught_up().await;
    let seen = recorder.0.lock().clone();
    assert!(
        (1..=2).contains(&seen.len()),
        "the backlog is published in one step: {} calls",
        seen.len()
    );
    let (_, image) = seen.last().unwrap();
    assert_eq!(image.offset, c.image().offset);
    let mut all = MetadataDelta::default();
    for (d, _) in seen {
        all.merge(d);
    }
    assert_eq!(all.created_topics.len(), 20);
    assert_eq!(all.changed_partitions.len(), 40);
    assert!(all.changed_brokers.contains(&1));
    let local = all.local_changes(1, &c.image());
    assert_eq!(local.leaders.len(), 40);
    assert!(local.leaders.iter().all(|p| p.became_leader(1)));
    loader.shutdown().await;
}

/// Publishers see each image in registration order and `caught_up` waits for all of them.
#[tokio::test]
async fn publishers_run_in_order_and_caught_up_waits_for_them() {
    struct Order(&'static str, Arc<Mutex<Vec<(&'static str, u64)>>>);
    impl MetadataPublisher for Order {
        fn name(&self) -> &str {
            self.0
        }
        fn on_metadata_update(&self, _: &MetadataDelta, image: &Arc<MetadataImage>) {
            self.1.lock().push((self.0, image.offset));
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let c = controller(&dir);
    let log = Arc::new(Mutex::new(Vec::new()));
    let loader = MetadataLoader::start(vec![
        Arc::new(Order("first", log.clone())),
        Arc::new(Order("second", log.clone())),
    ]);
    c.set_publisher(loader.sink());
    add_broker(&c, 1).await.unwrap();
    assert!(c.create_topics(&[spec("t")], false).await[0].is_ok());
    loader.caught_up().await;
    let log = log.lock().clone();
    assert_eq!(log.last(), Some(&("second", c.image().offset)));
    for pair in log.chunks(2) {
        assert_eq!((pair[0].0, pair[1].0), ("first", "second"));
        assert_eq!(pair[0].1, pair[1].1);
    }
    loader.shutdown().await;
    // After shutdown nothing is published and waiting does not hang.
    assert!(c.create_topics(&[spec("u")], false).await[0].is_ok());
    loader.caught_up().await;
}

/// A publisher installed later first sees the whole current image, then the updates after it.
#[tokio::test]
async fn an_installed_publisher_starts_from_the_current_image() {
    let dir = tempfile::tempdir().unwrap();
    let c = controller(&dir);
    let loader = MetadataLoader::start(Vec::new());
    c.set_publisher(loader.sink());
    add_broker(&c, 1).await.unwrap();
    assert!(c.create_topics(&[spec("old")], false).await[0].is_ok());
    let late = Arc::new(Recorder::default());
    loader.install(late.clone());
    loader.caught_up().await;
    {
        let seen = late.0.lock();
        assert_eq!(seen.len(), 1);
        let (delta, image) = &seen[0];
        assert_eq!(image.offset, c.image().offset);
        let old = c.image().topic("old").unwrap().id;
        assert_eq!(
            delta.created_topics,
            std::collections::BTreeSet::from([old])
        );
        assert_eq!(delta.local_changes(1, image).leaders.len(), 2);
    }
    assert!(c.create_topics(&[spec("new")], false).await[0].is_ok());
    loader.caught_up().await;
    let last = late.0.lock().last().unwrap().0.clone();
    let new = c.image().topic("new").unwrap().id;
    assert_eq!(last.created_topics, std::collections::BTreeSet::from([new]));
    loader.shutdown().await;
}

/// The same on the Raft path: a one-voter quorum keeps committing and applying entries (each
/// proposal returns only once the entry is applied on the leader) while a publisher is stuck.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_publisher_does_not_block_raft_apply() {
    let dir = tempfile::tempdir().unwrap();
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut quorum = strom_raft::QuorumConfig::new(
        1,
        std::collections::BTreeMap::from([(1, addr)]),
        addr,
        dir.path().join("raft"),
    );
    quorum.election_timeout_ms = 200;
    quorum.heartbeat_ms = 50;
    let c = QuorumController::start_quorum(
        quorum,
        TopicDefaults {
            num_partitions: 1,
            replication_factor: 1,
        },
    )
    .await
    .unwrap();
    c.wait_for_leader(std::time::Duration::from_secs(20))
        .await
        .unwrap();
    let (open, gate) = mpsc::channel();
    let recorder = Arc::new(Recorder::default());
    let loader = MetadataLoader::start(vec![Arc::new(Gate(Mutex::new(gate))), recorder.clone()]);
    c.set_publisher(loader.sink());
    // The leader may need a moment before it accepts proposals.
    while add_broker(&c, 1).await.is_err() {
        tokio::task::yield_now().await;
    }
    for i in 0..10 {
        let r = c.create_topics(&[spec(&format!("t{i}"))], false).await;
        assert!(r[0].is_ok(), "{r:?}");
    }
    assert_eq!(c.image().topics.len(), 10);
    assert!(recorder.0.lock().is_empty());
    drop(open);
    loader.caught_up().await;
    let last = recorder.0.lock().last().unwrap().1.clone();
    assert_eq!(last.offset, c.image().offset);
    assert_eq!(last.topics.len(), 10);
    loader.shutdown().await;
    c.shutdown().await;
}

/// Auto-creation (Metadata, Produce) answers from the broker's image right after creating the
/// topic, so on the node of the active controller it must wait for the loader as the admin
/// handlers do, or the first request after creation misses the topic it just created.
#[tokio::test]
async fn auto_creation_on_the_active_controller_waits_for_the_publish() {
    let dir = tempfile::tempdir().unwrap();
    let server = crate::handlers::test_server(&dir, Default::default()).await;
    let broker = server.broker();
    // Hold the loader thread until the topic is replayed (the opener only runs when the
    // creating task yields, i.e. while it waits for the publish).
    let (open, gate) = mpsc::channel::<()>();
    broker
        .metadata_loader
        .install(Arc::new(Gate(Mutex::new(gate))));
    let controller = broker.controller.clone();
    let opener = tokio::spawn(async move {
        while controller.image().topic("auto").is_none() {
            tokio::task::yield_now().await;
        }
        drop(open);
    });
    broker.create_topics(&[spec("auto")]).await;
    assert!(
        broker.image().topic("auto").is_some(),
        "the broker's image has the auto-created topic"
    );
    assert!(broker.replica_manager.get("auto", 0).is_some());
    opener.await.unwrap();
    broker.metadata_loader.shutdown().await;
}

/// A held loader (a quorum member before it has caught up) hands nothing to any publisher,
/// installed ones included, and `caught_up` waits; the release hands each the latest image from
/// nothing in one step, and later updates flow as usual.
#[tokio::test]
async fn a_held_loader_publishes_nothing_until_released() {
    let dir = tempfile::tempdir().unwrap();
    let c = controller(&dir);
    let first = Arc::new(Recorder::default());
    let installed = Arc::new(Recorder::default());
    let loader = MetadataLoader::start_held(vec![first.clone()]);
    c.set_publisher(loader.sink());
    add_broker(&c, 1).await.unwrap();
    assert!(c.create_topics(&[spec("stale")], false).await[0].is_ok());
    loader.install(installed.clone());
    assert!(c.create_topics(&[spec("t")], false).await[0].is_ok());
    let waiting =
        tokio::time::timeout(std::time::Duration::from_millis(200), loader.caught_up()).await;
    assert!(waiting.is_err(), "caught_up returned while held");
    assert!(first.0.lock().is_empty());
    assert!(installed.0.lock().is_empty());

    loader.release();
    loader.caught_up().await;
    for r in [&first, &installed] {
        let seen = r.0.lock().clone();
        assert_eq!(seen.len(), 1, "one step from nothing");
        let (delta, image) = &seen[0];
        assert_eq!(image.offset, c.image().offset);
        assert_eq!(delta.created_topics.len(), 2);
        assert_eq!(delta.local_changes(1, image).leaders.len(), 4);
    }
    // A second release changes nothing; updates go on as before.
    loader.release();
    assert!(c.create_topics(&[spec("u")], false).await[0].is_ok());
    loader.caught_up().await;
    assert_eq!(first.0.lock().len(), 2);
    assert_eq!(installed.0.lock().len(), 2);
    loader.shutdown().await;
}

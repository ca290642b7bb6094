//! Replication data path against a real broker: a single-node `Server` leads a partition whose
//! assignment also names broker 2; a `ReplicaFetcher` (as broker 2) pulls it over TCP into a
//! separate local log. Checks: the follower is byte-identical to the leader up to the HW and keeps
//! up; the leader's HW is min LEO over the ISR and acks=all waits for it; ISR expansion is
//! proposed once the follower catches up; a follower with a divergent tail from an older epoch
//! truncates (diverging epoch, KIP-320) and converges; one behind the leader's log start restarts
//! there.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use strom_broker::config::BrokerConfig;
use strom_broker::partition::Partition;
use strom_broker::replication::{
    wait_for_acks, AckResult, AlterPartitionProposal, FetcherConfig, LeaderAndIsr, ReplicaFetcher,
};
use strom_broker::Server;
use strom_controller::CreateTopicSpec;
use strom_protocol::ErrorCode;
use strom_storage::{AppendOrigin, LogConfig, UnifiedLog};
use tokio::sync::oneshot;

const LEADER: i32 = 1;
const FOLLOWER: i32 = 2;

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// One batch of `n` records whose values start with `tag`.
fn batch(tag: &str, n: usize) -> Vec<u8> {
    let records = (0..n).map(|i| {
        (
            Some(Bytes::from(format!("k{i}"))),
            Some(Bytes::from(format!("{tag}-{i}-{}", "v".repeat(i % 50)))),
        )
    });
    strom_protocol::testing::plain_batch(records, 1_700_000_000_000)
}

struct Leader {
    addr: SocketAddr,
    broker: Arc<strom_broker::Broker>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

impl Leader {
    async fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config = BrokerConfig::new(
            LEADER,
            "127.0.0.1:0".parse().unwrap(),
            None,
            dir.path().to_path_buf(),
            BTreeMap::new(),
        )
        .unwrap();
        strom_broker::meta_properties::format(
            &config.log_dirs,
            config.node_id,
            "test-cluster",
            true,
        )
        .unwrap();
        let server = Server::start(config).await.unwrap();
        let addr = server.local_addr();
        let broker = server.broker();
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            server
                .run(async {
                    let _ = rx.await;
                })
                .await
                .unwrap();
        });
        Self {
            addr,
            broker,
            stop: Some(tx),
            task,
            _dir: dir,
        }
    }

    /// Creates `topic` (one partition) and makes its registration name the follower too.
    async fn create(&self, topic: &str, leader_epoch: i32, isr: &[i32]) -> Arc<Partition> {
        self.broker
            .controller
            .create_topics(
                &[CreateTopicSpec {
                    name: topic.into(),
                    num_partitions: 1,
                    replication_factor: 1,
                    ..Default::default()
                }],
                false,
            )
            .await;
        self.broker.sync_metadata().await;
        let p = self.broker.replica_manager.get(topic, 0).expect("hosted");
        p.apply_leader_and_isr(
            &LeaderAndIsr {
                leader: LEADER,
                leader_epoch,
                partition_epoch: 100,
                replicas: vec![LEADER, FOLLOWER],
                isr: isr.to_vec(),
            },
            now_ms(),
        );
        p
    }

    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.task.await.unwrap();
    }
}

fn follower_partition(dir: &Path, leader: &Partition, leader_epoch: i32) -> Arc<Partition> {
    let log = UnifiedLog::open(
        &dir.join(format!("{}-0", leader.topic)),
        LogConfig::default(),
        0,
        true,
    )
    .unwrap();
    let p = Arc::new(Partition::new(
        leader.topic.clone(),
        leader.topic_id,
        0,
        FOLLOWER,
        log,
        0,
    ));
    p.apply_leader_and_isr(
        &LeaderAndIsr {
            leader: LEADER,
            leader_epoch,
            partition_epoch: 100,
            replicas: vec![LEADER, FOLLOWER],
            isr: vec![LEADER, FOLLOWER],
        },
        now_ms(),
    );
    p
}

fn fetcher_config() -> FetcherConfig {
    let mut c = FetcherConfig::new(FOLLOWER);
    c.max_wait_ms = 200;
    c.backoff = Duration::from_millis(50);
    c.request_timeout = Duration::from_secs(5);
    c
}

/// Waits (bounded) for `cond`, which is driven by the fetcher's own events.
async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Whole batches up to the HW, as stored.
fn bytes_to_hw(p: &Partition) -> Bytes {
    p.with_log(|log| {
        log.read(
            log.log_start_offset(),
            usize::MAX / 2,
            p.high_watermark(),
            true,
        )
    })
    .unwrap()
    .records
}

fn assert_same_up_to_hw(leader: &Partition, follower: &Partition) {
    assert_eq!(leader.high_watermark(), follower.high_watermark());
    let (l, f) = (bytes_to_hw(leader), bytes_to_hw(follower));
    assert!(!l.is_empty());
    assert_eq!(l.len(), f.len(), "same length up to the HW");
    assert!(l == f, "follower differs from the leader below the HW");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follower_replicates_keeps_up_and_drives_hw_and_acks_all() {
    let leader = Leader::start().await;
    let lp = leader.create("rep", 0, &[LEADER, FOLLOWER]).await;
    let now = 1_700_000_000_000;
    for i in 0..20 {
        lp.append_records_to_leader(
            &batch(&format!("a{i}"), 1 + i % 7),
            AppendOrigin::Client,
            1,
            lp.leader_epoch(),
            now,
        )
        .unwrap();
    }
    // The follower is in the ISR and has fetched nothing: the HW waits for it.
    assert_eq!(lp.high_watermark(), 0);
    assert_eq!(lp.log_end_offset(), (0..20).map(|i| 1 + i % 7).sum::<i64>());

    let fdir = tempfile::tempdir().unwrap();
    let fp = follower_partition(fdir.path(), &lp, 0);
    let fetcher = ReplicaFetcher::start(fetcher_config(), LEADER, &leader.addr.to_string());
    fetcher.add_partitions(vec![(fp.clone(), 0)]);
    eventually("follower catches up and learns the HW", || {
        fp.log_end_offset() == lp.log_end_offset() && fp.high_watermark() == lp.log_end_offset()
    })
    .await;
    assert_eq!(lp.high_watermark(), lp.log_end_offset());
    assert_same_up_to_hw(&lp, &fp);
    let st = lp.leader_state();
    assert_eq!(
        st.follower(FOLLOWER).unwrap().log_end_offset,
        lp.log_end_offset()
    );

    // acks=all: an append completes when the follower's next fetch moves the HW past it.
    let info = lp
        .append_records_to_leader(
            &batch("acks-all", 5),
            AppendOrigin::Client,
            1,
            lp.leader_epoch(),
            now,
        )
        .unwrap();
    let res = wait_for_acks(
        &[(lp.clone(), info.last_offset + 1)],
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(res, vec![AckResult::Done]);
    assert!(lp.high_watermark() > info.last_offset);

    // Keeps up with a stream of appends.
    for i in 0..200 {
        lp.append_records_to_leader(
            &batch(&format!("b{i}"), 1 + i % 13),
            AppendOrigin::Client,
            1,
            lp.leader_epoch(),
            now,
        )
        .unwrap();
    }
    eventually("follower keeps up", || {
        fp.log_end_offset() == lp.log_end_offset() && fp.high_watermark() == lp.log_end_offset()
    })
    .await;
    assert_same_up_to_hw(&lp, &fp);

    // Without the follower fetching, acks=all times out and the HW stays below the append.
    fetcher.shutdown().await;
    let info = lp
        .append_records_to_leader(
            &batch("stuck", 3),
            AppendOrigin::Client,
            1,
            lp.leader_epoch(),
            now,
        )
        .unwrap();
    let res = wait_for_acks(
        &[(lp.clone(), info.last_offset + 1)],
        Duration::from_millis(300),
    )
    .await;
    assert_eq!(res, vec![AckResult::Error(ErrorCode::RequestTimedOut)]);
    assert!(lp.high_watermark() <= info.first_offset);

    // min.insync.replicas = 2 with the ISR shrunk to the leader: refused before the append.
    lp.set_min_insync_replicas(2);
    assert!(lp.check_min_isr_for_acks_all().is_ok());
    lp.apply_leader_and_isr(
        &LeaderAndIsr {
            leader: LEADER,
            leader_epoch: 0,
            partition_epoch: 101,
            replicas: vec![LEADER, FOLLOWER],
            isr: vec![LEADER],
        },
        now_ms(),
    );
    assert!(lp.check_min_isr_for_acks_all().is_err());
    leader.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caught_up_follower_is_proposed_for_the_isr() {
    let leader = Leader::start().await;
    let lp = leader.create("expand", 3, &[LEADER]).await;
    let proposals: Arc<Mutex<Vec<AlterPartitionProposal>>> = Arc::default();
    {
        let proposals = proposals.clone();
        lp.set_alter_partition_sender(Arc::new(move |p: AlterPartitionProposal| {
            proposals.lock().push(p)
        }));
    }
    let now = 1_700_000_000_000;
    for i in 0..10 {
        lp.append_records_to_leader(
            &batch(&format!("e{i}"), 4),
            AppendOrigin::Client,
            1,
            lp.leader_epoch(),
            now,
        )
        .unwrap();
    }
    // ISR = {leader}: the HW follows the leader's LEO alone.
    assert_eq!(lp.high_watermark(), 40);
    // The follower as the leader's metadata knows it (KIP-903): registered under epoch 7, which
    // its fetches (Fetch v15 `ReplicaState.ReplicaEpoch`) must carry for it to join the ISR.
    let leader_epoch = leader.broker.image().brokers[&LEADER].epoch;
    lp.set_broker_epochs(&[(LEADER, leader_epoch), (FOLLOWER, 7)].into());
    let fdir = tempfile::tempdir().unwrap();
    let fp = follower_partition(fdir.path(), &lp, 3);
    let lifecycle = Arc::new(strom_broker::broker_lifecycle::BrokerLifecycleManager::new(
        -1,
    ));
    let mut config = fetcher_config();
    config.lifecycle = Some(lifecycle.clone());
    // First as an earlier incarnation (epoch 6): caught up, but not proposed.
    lifecycle.set_broker_epoch(6);
    let fetcher = ReplicaFetcher::start(config, LEADER, &leader.addr.to_string());
    fetcher.add_partitions(vec![(fp.clone(), 3)]);
    eventually("follower caught up", || fp.high_watermark() == 40).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(proposals.lock().is_empty(), "{:?}", proposals.lock());
    lifecycle.set_broker_epoch(7);
    eventually("expansion proposed", || !proposals.lock().is_empty()).await;
    let p = proposals.lock()[0].clone();
    assert_eq!(p.new_isr, vec![LEADER, FOLLOWER]);
    assert_eq!(p.new_isr_broker_epochs, vec![leader_epoch, 7]);
    assert_eq!(
        (p.leader_epoch, p.partition_epoch, p.partition),
        (3, 100, 0)
    );
    // Pending until committed: the old ISR stays, one proposal only.
    assert_eq!(lp.isr(), vec![LEADER]);
    lp.apply_leader_and_isr(
        &LeaderAndIsr {
            leader: LEADER,
            leader_epoch: 3,
            partition_epoch: 101,
            replicas: vec![LEADER, FOLLOWER],
            isr: vec![LEADER, FOLLOWER],
        },
        now_ms(),
    );
    assert_eq!(lp.isr(), vec![LEADER, FOLLOWER]);
    assert_eq!(proposals.lock().len(), 1);
    eventually("follower in sync", || fp.high_watermark() == 40).await;
    assert_same_up_to_hw(&lp, &fp);
    fetcher.shutdown().await;
    leader.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn divergent_follower_truncates_and_converges() {
    let leader = Leader::start().await;
    // Epoch 2: a common prefix both replicas get.
    let lp = leader.create("div", 2, &[LEADER, FOLLOWER]).await;
    let now = 1_700_000_000_000;
    for i in 0..5 {
        lp.append_records_to_leader(
            &batch(&format!("common{i}"), 3),
            AppendOrigin::Client,
            1,
            lp.leader_epoch(),
            now,
        )
        .unwrap();
    }
    let fdir = tempfile::tempdir().unwrap();
    let fp = follower_partition(fdir.path(), &lp, 2);
    let fetcher = ReplicaFetcher::start(fetcher_config(), LEADER, &leader.addr.to_string());
    fetcher.add_partitions(vec![(fp.clone(), 2)]);
    eventually("prefix replicated", || fp.log_end_offset() == 15).await;
    let key = ("div".to_string(), 0);
    fetcher.remove_partitions(std::slice::from_ref(&key));

    // The follower (as a deposed leader of epoch 3) holds records nobody else has, at offsets
    // the new leader of epoch 5 fills with different ones.
    for i in 0..4 {
        fp.with_log(|log| {
            log.append_as_leader(&batch(&format!("lost{i}"), 2), 3, AppendOrigin::Client, now)
        })
        .unwrap();
    }
    assert_eq!(fp.log_end_offset(), 23);
    lp.apply_leader_and_isr(
        &LeaderAndIsr {
            leader: LEADER,
            leader_epoch: 5,
            partition_epoch: 102,
            replicas: vec![LEADER, FOLLOWER],
            isr: vec![LEADER, FOLLOWER],
        },
        now_ms(),
    );
    for i in 0..6 {
        lp.append_records_to_leader(
            &batch(&format!("new{i}"), 2),
            AppendOrigin::Client,
            1,
            lp.leader_epoch(),
            now,
        )
        .unwrap();
    }
    // The leader's answer for epoch 3: its largest epoch <= 3 is 2, which ends at 15.
    assert_eq!(lp.end_offset_for_epoch(3), (2, 15));
    // On the wire: a replica fetch from the divergent position gets the diverging epoch, no data.
    {
        use strom_client::connection::{Connection, ConnectionConfig};
        use strom_protocol::kafka::messages::fetch_request::{FetchPartition, FetchTopic};
        use strom_protocol::kafka::messages::{BrokerId, FetchRequest, TopicName};
        use strom_protocol::kafka::protocol::StrBytes;
        let conn = Connection::connect(&leader.addr.to_string(), ConnectionConfig::default())
            .await
            .unwrap();
        let req = FetchRequest::default()
            .with_replica_id(BrokerId(FOLLOWER))
            .with_max_wait_ms(0)
            .with_max_bytes(1 << 20)
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_static_str("div")))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(0)
                    .with_current_leader_epoch(5)
                    .with_fetch_offset(23)
                    .with_last_fetched_epoch(3)
                    .with_log_start_offset(0)
                    .with_partition_max_bytes(1 << 20)])]);
        let resp = conn.send(&req, 12).await.unwrap();
        let pd = &resp.responses[0].partitions[0];
        assert_eq!(pd.error_code, 0);
        assert_eq!(
            (pd.diverging_epoch.epoch, pd.diverging_epoch.end_offset),
            (2, 15)
        );
        assert!(pd.records.as_ref().is_none_or(|r| r.is_empty()));
        assert_eq!(pd.high_watermark, 15);
        // A fetch with a stale leader epoch is fenced.
        let mut stale = req.clone();
        stale.topics[0].partitions[0].current_leader_epoch = 2;
        let resp = conn.send(&stale, 12).await.unwrap();
        assert_eq!(
            resp.responses[0].partitions[0].error_code,
            ErrorCode::FencedLeaderEpoch.code()
        );
    }
    fp.apply_leader_and_isr(
        &LeaderAndIsr {
            leader: LEADER,
            leader_epoch: 5,
            partition_epoch: 102,
            replicas: vec![LEADER, FOLLOWER],
            isr: vec![LEADER, FOLLOWER],
        },
        now_ms(),
    );
    fetcher.add_partitions(vec![(fp.clone(), 5)]);
    eventually("diverged follower converges", || {
        fp.log_end_offset() == lp.log_end_offset() && fp.high_watermark() == lp.log_end_offset()
    })
    .await;
    assert_eq!(lp.log_end_offset(), 27);
    assert_same_up_to_hw(&lp, &fp);
    // Nothing of the lost tail survives; the epochs now agree.
    let all = bytes_to_hw(&fp);
    assert!(!all.windows(4).any(|w| w == b"lost"));
    assert_eq!(fp.latest_epoch(), Some(5));
    assert_eq!(fp.with_log(|l| l.end_offset_for_epoch(2)), (2, 15));
    fetcher.shutdown().await;
    leader.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follower_behind_leader_log_start_restarts_there() {
    let leader = Leader::start().await;
    let lp = leader.create("lso", 1, &[LEADER]).await;
    let now = 1_700_000_000_000;
    for i in 0..10 {
        lp.append_records_to_leader(
            &batch(&format!("x{i}"), 5),
            AppendOrigin::Client,
            1,
            lp.leader_epoch(),
            now,
        )
        .unwrap();
    }
    // DeleteRecords up to 30 on the leader.
    lp.with_log(|log| log.maybe_increment_log_start_offset(30))
        .unwrap();
    let fdir = tempfile::tempdir().unwrap();
    let fp = follower_partition(fdir.path(), &lp, 1);
    // An old follower log far behind: 2 records at offsets 0..2.
    fp.with_log(|log| log.append_as_leader(&batch("old", 2), 0, AppendOrigin::Client, now))
        .unwrap();
    let fetcher = ReplicaFetcher::start(fetcher_config(), LEADER, &leader.addr.to_string());
    fetcher.add_partitions(vec![(fp.clone(), 1)]);
    eventually(
        "follower restarts at the leader's log start and catches up",
        || fp.log_end_offset() == 50,
    )
    .await;
    assert_eq!(fp.log_start_offset(), 30);
    eventually("HW propagated", || fp.high_watermark() == 50).await;
    assert_same_up_to_hw(&lp, &fp);
    fetcher.shutdown().await;
    leader.stop().await;
}

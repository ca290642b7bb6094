//! The runtime against an in-memory partition whose high watermark and failures the test
//! controls, with a shard of counters.

use std::sync::atomic::{AtomicBool, Ordering};

use super::*;
use crate::timeline::{Timeline, TimelineMap};

/// One batch's worth of the in-memory log, per offset: a record (with the producer of a
/// transactional batch) or an end-transaction marker.
#[derive(Debug, Clone, PartialEq)]
enum Entry {
    Record(RawRecord, Option<TxnProducer>),
    Marker(TxnProducer, i32, TxnResult),
}

/// A partition: the log, a high watermark the test moves (followers), injected failures.
#[derive(Default)]
struct MemPartition {
    log: Mutex<Vec<Entry>>,
    /// When set, the HW follows every append at once (one replica).
    auto_hw: AtomicBool,
    hw: Mutex<i64>,
    fail_next: Mutex<Option<ErrorCode>>,
    /// Loading waits while this is set.
    hold_load: AtomicBool,
}

struct Writer(Arc<MemPartition>);

impl Writer {
    fn push(&self, entries: Vec<Entry>) -> Result<AppendResult, WriteError> {
        if let Some(code) = self.0.fail_next.lock().take() {
            return Err(WriteError {
                code,
                message: "injected".into(),
            });
        }
        let mut log = self.0.log.lock();
        let base = log.len() as i64;
        log.extend(entries);
        let last = log.len() as i64 - 1;
        let mut hw = self.0.hw.lock();
        if self.0.auto_hw.load(Ordering::SeqCst) {
            *hw = last + 1;
        }
        Ok(AppendResult {
            base_offset: base,
            last_offset: last,
            high_watermark: *hw,
        })
    }
}

impl PartitionWriter for Writer {
    fn append(
        &self,
        _tp: &TopicPartition,
        _epoch: i32,
        records: &[RawRecord],
    ) -> Result<AppendResult, WriteError> {
        self.push(
            records
                .iter()
                .map(|r| Entry::Record(r.clone(), None))
                .collect(),
        )
    }

    fn append_transactional(
        &self,
        _tp: &TopicPartition,
        _epoch: i32,
        producer: TxnProducer,
        records: &[RawRecord],
    ) -> Result<AppendResult, WriteError> {
        self.push(
            records
                .iter()
                .map(|r| Entry::Record(r.clone(), Some(producer)))
                .collect(),
        )
    }

    fn append_end_txn_marker(
        &self,
        _tp: &TopicPartition,
        _epoch: i32,
        producer: TxnProducer,
        coordinator_epoch: i32,
        result: TxnResult,
    ) -> Result<AppendResult, WriteError> {
        self.push(vec![Entry::Marker(producer, coordinator_epoch, result)])
    }
}

impl CoordinatorLoader for Writer {
    fn load(
        &self,
        _tp: &TopicPartition,
        _epoch: i32,
        sink: &mut dyn FnMut(i64, Bytes, Option<Bytes>),
    ) -> Result<AppendResult, WriteError> {
        while self.0.hold_load.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
        let log = self.0.log.lock();
        for (i, e) in log.iter().enumerate() {
            if let Entry::Record((k, v), _) = e {
                sink(i as i64, k.clone(), v.clone());
            }
        }
        Ok(AppendResult {
            base_offset: 0,
            last_offset: log.len() as i64 - 1,
            high_watermark: *self.0.hw.lock(),
        })
    }

    fn load_records(
        &self,
        _tp: &TopicPartition,
        _epoch: i32,
        sink: &mut dyn FnMut(LoadedRecord),
    ) -> Result<AppendResult, WriteError> {
        while self.0.hold_load.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
        let log = self.0.log.lock();
        for (i, e) in log.iter().enumerate() {
            let offset = i as i64;
            sink(match e {
                Entry::Record((key, value), producer) => LoadedRecord::Record {
                    offset,
                    producer: *producer,
                    key: key.clone(),
                    value: value.clone(),
                },
                Entry::Marker(producer, coordinator_epoch, result) => LoadedRecord::EndTxnMarker {
                    offset,
                    producer: *producer,
                    marker: EndTxnMarker {
                        result: *result,
                        coordinator_epoch: *coordinator_epoch,
                    },
                },
            });
        }
        Ok(AppendResult {
            base_offset: 0,
            last_offset: log.len() as i64 - 1,
            high_watermark: *self.0.hw.lock(),
        })
    }
}

/// Named counters; a record sets one (a tombstone removes it). A transaction's records wait in
/// `pending` for their producer's marker.
#[derive(Default)]
struct Counters {
    values: TimelineMap<String, i64>,
    pending: TimelineMap<i64, Vec<Set>>,
    /// The shard's own timers (set by operations, as session timers are).
    timer: Option<CoordinatorTimer<Counters>>,
}

#[derive(Debug, Clone)]
struct Set(String, Option<i64>);

impl Timeline for Counters {
    fn revert_to(&mut self, offset: i64) {
        self.values.revert_to(offset);
        self.pending.revert_to(offset);
    }
    fn commit(&mut self, committed: i64) {
        self.values.commit(committed);
        self.pending.commit(committed);
    }
}

impl CoordinatorShard for Counters {
    type Record = Set;
    fn replay(&mut self, offset: i64, r: &Set) {
        match r.1 {
            Some(v) => {
                self.values.insert(offset, r.0.clone(), v);
            }
            None => {
                self.values.remove(offset, &r.0);
            }
        }
    }
    fn replay_transactional(&mut self, offset: i64, producer: TxnProducer, r: &Set) {
        let mut waiting = self
            .pending
            .get(&producer.producer_id)
            .cloned()
            .unwrap_or_default();
        waiting.push(r.clone());
        self.pending.insert(offset, producer.producer_id, waiting);
    }
    fn replay_end_transaction_marker(
        &mut self,
        offset: i64,
        producer: TxnProducer,
        result: TxnResult,
    ) {
        let Some(waiting) = self.pending.remove(offset, &producer.producer_id) else {
            return;
        };
        if result == TxnResult::Commit {
            for r in &waiting {
                self.replay(offset, r);
            }
        }
    }
    fn serialize(r: &Set) -> Result<RawRecord, CoordinatorError> {
        Ok((
            Bytes::from(r.0.clone()),
            r.1.map(|v| Bytes::from(v.to_be_bytes().to_vec())),
        ))
    }
    fn deserialize(key: &Bytes, value: Option<&Bytes>) -> Option<Set> {
        let name = String::from_utf8(key.to_vec()).ok()?;
        let v = match value {
            Some(b) => Some(i64::from_be_bytes(b.as_ref().try_into().ok()?)),
            None => None,
        };
        Some(Set(name, v))
    }
}

fn tp() -> TopicPartition {
    ("__consumer_offsets".into(), 7)
}

fn runtime(p: &Arc<MemPartition>) -> Arc<CoordinatorRuntime<Counters>> {
    CoordinatorRuntime::new(
        Arc::new(Writer(p.clone())),
        Arc::new(Writer(p.clone())),
        |ctx: ShardContext<Counters>| Counters {
            timer: Some(ctx.timer),
            ..Default::default()
        },
    )
}

async fn loaded(rt: &Arc<CoordinatorRuntime<Counters>>) {
    for _ in 0..2000 {
        if rt.partitions().iter().any(|(t, ok)| *t == tp() && *ok) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("shard not loaded");
}

/// Increments `name` by one: reads the latest (uncommitted) value, as a write does.
async fn increment(rt: &CoordinatorRuntime<Counters>, name: &str) -> Result<i64, CoordinatorError> {
    let name = name.to_string();
    rt.write(&tp(), move |s: &mut Counters, _ctx: &WriteContext| {
        let next = s.values.get(&name).copied().unwrap_or(0) + 1;
        Ok(WriteResult {
            records: vec![Set(name, Some(next))],
            response: next,
        })
    })
    .await
}

async fn committed(rt: &CoordinatorRuntime<Counters>, name: &str) -> Option<i64> {
    let name = name.to_string();
    rt.read(&tp(), move |s: &Counters, hw| {
        s.values.get_committed(&name, hw).copied()
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn a_response_waits_for_the_high_watermark_and_reads_see_committed_state_only() {
    let p = Arc::new(MemPartition::default());
    let rt = runtime(&p);
    rt.schedule_load(tp(), 3);
    loaded(&rt).await;
    let rt2 = rt.clone();
    let first = tokio::spawn(async move { increment(&rt2, "a").await });
    // The record is in the log, the response is not given: the HW has not passed it.
    for _ in 0..200 {
        if !p.log.lock().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(p.log.lock().len(), 1);
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(
        !first.is_finished(),
        "answered before the HW passed the record"
    );
    assert_eq!(
        committed(&rt, "a").await,
        None,
        "a read sees only committed state"
    );
    // A second write already sees the first one's (uncommitted) value.
    let rt3 = rt.clone();
    let second = tokio::spawn(async move { increment(&rt3, "a").await });
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(p.log.lock().len(), 2);
    // The followers catch up with the first record only.
    rt.on_high_watermark(&tp(), 1);
    assert_eq!(first.await.unwrap(), Ok(1));
    assert!(!second.is_finished());
    assert_eq!(committed(&rt, "a").await, Some(1));
    rt.on_high_watermark(&tp(), 2);
    assert_eq!(second.await.unwrap(), Ok(2));
    assert_eq!(committed(&rt, "a").await, Some(2));
}

#[tokio::test]
async fn a_failed_append_rolls_the_shard_back_and_answers_as_kafka() {
    let p = Arc::new(MemPartition::default());
    p.auto_hw.store(true, Ordering::SeqCst);
    let rt = runtime(&p);
    rt.schedule_load(tp(), 0);
    loaded(&rt).await;
    assert_eq!(increment(&rt, "a").await, Ok(1));
    *p.fail_next.lock() = Some(ErrorCode::NotEnoughReplicas);
    let e = increment(&rt, "a").await.unwrap_err();
    assert_eq!(e.code(), ErrorCode::CoordinatorNotAvailable);
    // The failed write's change is gone: the next increment starts from 1 again.
    assert_eq!(increment(&rt, "a").await, Ok(2));
    *p.fail_next.lock() = Some(ErrorCode::NotLeaderOrFollower);
    assert_eq!(
        increment(&rt, "a").await.unwrap_err().code(),
        ErrorCode::NotCoordinator
    );
    *p.fail_next.lock() = Some(ErrorCode::MessageTooLarge);
    assert_eq!(
        increment(&rt, "a").await.unwrap_err().code(),
        ErrorCode::UnknownServerError
    );
    assert_eq!(committed(&rt, "a").await, Some(2));
    assert_eq!(
        p.log.lock().len(),
        2,
        "only the successful writes are in the log"
    );
}

#[tokio::test]
async fn an_operation_error_is_answered_with_its_code_and_undone() {
    let p = Arc::new(MemPartition::default());
    p.auto_hw.store(true, Ordering::SeqCst);
    let rt = runtime(&p);
    rt.schedule_load(tp(), 0);
    loaded(&rt).await;
    let r: Result<(), _> = rt
        .write(&tp(), |s: &mut Counters, ctx: &WriteContext| {
            // Changes state, then refuses: the change must not survive.
            s.values.insert(ctx.offset, "x".into(), 99);
            Err(CoordinatorError::Operation {
                code: ErrorCode::UnknownMemberId,
                message: "no such member".into(),
            })
        })
        .await;
    assert_eq!(r.unwrap_err().code(), ErrorCode::UnknownMemberId);
    let latest = rt
        .read(&tp(), |s: &Counters, _| {
            s.values.get(&"x".to_string()).copied()
        })
        .await
        .unwrap();
    assert_eq!(latest, None);
    assert!(p.log.lock().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_of_a_partition_run_one_at_a_time() {
    let p = Arc::new(MemPartition::default());
    p.auto_hw.store(true, Ordering::SeqCst);
    let rt = runtime(&p);
    rt.schedule_load(tp(), 0);
    loaded(&rt).await;
    let tasks: Vec<_> = (0..200)
        .map(|_| {
            let rt = rt.clone();
            tokio::spawn(async move { increment(&rt, "n").await.unwrap() })
        })
        .collect();
    let mut seen = Vec::new();
    for t in tasks {
        seen.push(t.await.unwrap());
    }
    seen.sort();
    assert_eq!(seen, (1..=200).collect::<Vec<_>>(), "no lost update");
    assert_eq!(committed(&rt, "n").await, Some(200));
}

#[tokio::test]
async fn loading_rebuilds_the_state_and_answers_load_in_progress_meanwhile() {
    let p = Arc::new(MemPartition::default());
    p.auto_hw.store(true, Ordering::SeqCst);
    {
        let rt = runtime(&p);
        rt.schedule_load(tp(), 0);
        loaded(&rt).await;
        for _ in 0..5 {
            increment(&rt, "a").await.unwrap();
        }
        increment(&rt, "b").await.unwrap();
        rt.write(&tp(), |_s: &mut Counters, _: &WriteContext| {
            Ok(WriteResult {
                records: vec![Set("b".into(), None)],
                response: (),
            })
        })
        .await
        .unwrap();
    }
    // A new leader (another broker, or this one after a restart).
    p.hold_load.store(true, Ordering::SeqCst);
    let rt = runtime(&p);
    rt.schedule_load(tp(), 1);
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(
        increment(&rt, "a").await.unwrap_err().code(),
        ErrorCode::CoordinatorLoadInProgress
    );
    p.hold_load.store(false, Ordering::SeqCst);
    loaded(&rt).await;
    assert_eq!(committed(&rt, "a").await, Some(5));
    assert_eq!(committed(&rt, "b").await, None, "the tombstone removed it");
    assert_eq!(increment(&rt, "a").await, Ok(6));
    assert_eq!(
        p.log.lock().len(),
        8,
        "appends continue after the loaded log"
    );
}

/// A batch the shard did not write (a client allowed to produce to internal topics) makes the
/// next append land at an unexpected offset: that write answers NOT_COORDINATOR and the shard is
/// reloaded from the log at the same epoch, the foreign records replayed when they parse and
/// skipped otherwise (Kafka's `CoordinatorRuntime`: FAILED, then LOADING).
#[tokio::test]
async fn a_foreign_write_reloads_the_shard_from_the_log() {
    let p = Arc::new(MemPartition::default());
    p.auto_hw.store(true, Ordering::SeqCst);
    let rt = runtime(&p);
    rt.schedule_load(tp(), 4);
    loaded(&rt).await;
    assert_eq!(increment(&rt, "a").await, Ok(1));
    // Someone else appends: one record that parses, one that does not (a 3-byte value).
    {
        let writer = Writer(p.clone());
        let foreign = |k: &str, v: &[u8]| {
            let record = (
                Bytes::copy_from_slice(k.as_bytes()),
                Some(Bytes::copy_from_slice(v)),
            );
            Entry::Record(record, None)
        };
        writer
            .push(vec![
                foreign("b", &7i64.to_be_bytes()),
                foreign("c", b"bad"),
            ])
            .unwrap();
    }
    assert_eq!(
        increment(&rt, "a").await.unwrap_err().code(),
        ErrorCode::NotCoordinator,
        "the write that found the log out of sync"
    );
    // Reloaded at the same epoch, with the foreign batch and the write that found it.
    loaded(&rt).await;
    assert_eq!(committed(&rt, "b").await, Some(7));
    assert_eq!(committed(&rt, "c").await, None);
    assert_eq!(committed(&rt, "a").await, Some(2));
    assert_eq!(increment(&rt, "a").await, Ok(3));
    assert_eq!(
        p.log.lock().len(),
        5,
        "appends continue after the reloaded log"
    );
    assert_eq!(
        p.log.lock()[4],
        Entry::Record(
            Counters::serialize(&Set("a".into(), Some(3))).unwrap(),
            None
        )
    );
}

#[tokio::test]
async fn unloading_answers_not_coordinator_to_pending_and_later_requests() {
    let p = Arc::new(MemPartition::default());
    let rt = runtime(&p);
    assert_eq!(
        increment(&rt, "a").await.unwrap_err().code(),
        ErrorCode::NotCoordinator,
        "never loaded"
    );
    rt.schedule_load(tp(), 4);
    loaded(&rt).await;
    let rt2 = rt.clone();
    let pending = tokio::spawn(async move { increment(&rt2, "a").await });
    tokio::time::sleep(Duration::from_millis(20)).await;
    // An older epoch's resignation does not unload the newer shard.
    rt.schedule_unload(&tp(), Some(3));
    assert!(rt.partitions().iter().any(|(t, _)| *t == tp()));
    rt.schedule_unload(&tp(), Some(4));
    assert_eq!(
        pending.await.unwrap().unwrap_err().code(),
        ErrorCode::NotCoordinator
    );
    assert_eq!(
        increment(&rt, "a").await.unwrap_err().code(),
        ErrorCode::NotCoordinator
    );
}

#[tokio::test(start_paused = true)]
async fn a_timer_is_a_write_of_its_partition() {
    let p = Arc::new(MemPartition::default());
    p.auto_hw.store(true, Ordering::SeqCst);
    let rt = runtime(&p);
    rt.schedule_load(tp(), 0);
    // Paused time: let the blocking load finish in real time.
    for _ in 0..2000 {
        if rt.partitions().iter().any(|(_, ok)| *ok) {
            break;
        }
        tokio::task::yield_now().await;
        std::thread::sleep(Duration::from_millis(1));
    }
    let timer = rt.schedule_write_after(
        tp(),
        Duration::from_secs(45),
        |_s: &mut Counters, _: &WriteContext| {
            Ok(WriteResult {
                records: vec![Set("expired".into(), Some(1))],
                response: (),
            })
        },
    );
    tokio::time::sleep(Duration::from_secs(44)).await;
    assert!(p.log.lock().is_empty(), "not before its delay");
    tokio::time::sleep(Duration::from_secs(2)).await;
    timer.await.unwrap();
    assert_eq!(committed(&rt, "expired").await, Some(1));
}

/// An operation that sets a keyed timer of its own shard.
async fn arm(rt: &CoordinatorRuntime<Counters>, key: &'static str, secs: u64) {
    rt.write(&tp(), move |s: &mut Counters, _ctx: &WriteContext| {
        s.timer.as_ref().expect("timer").schedule(
            key,
            Duration::from_secs(secs),
            move |_s: &mut Counters, _ctx: &WriteContext| {
                Ok(WriteResult {
                    records: vec![Set(key.to_string(), Some(secs as i64))],
                    response: None,
                })
            },
        );
        Ok(WriteResult {
            records: vec![],
            response: (),
        })
    })
    .await
    .unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_shard_timer_fires_once_and_a_rescheduled_key_replaces_it() {
    let p = Arc::new(MemPartition::default());
    p.auto_hw.store(true, Ordering::SeqCst);
    let rt = runtime(&p);
    rt.schedule_load(tp(), 0);
    for _ in 0..2000 {
        if rt.partitions().iter().any(|(_, ok)| *ok) {
            break;
        }
        tokio::task::yield_now().await;
        std::thread::sleep(Duration::from_millis(1));
    }
    arm(&rt, "session", 10).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    // A heartbeat pushes the deadline: the same key again replaces the first timer.
    arm(&rt, "session", 10).await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(
        committed(&rt, "session").await,
        None,
        "the replaced timer never fires"
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(committed(&rt, "session").await, Some(10));
    assert_eq!(p.log.lock().len(), 1, "fired once");
    // A cancelled timer never fires.
    arm(&rt, "join", 3).await;
    rt.write(&tp(), |s: &mut Counters, _: &WriteContext| {
        s.timer.as_ref().expect("timer").cancel("join");
        Ok(WriteResult {
            records: vec![],
            response: (),
        })
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(committed(&rt, "join").await, None);
}

#[tokio::test(start_paused = true)]
async fn a_write_not_committed_within_the_write_timeout_answers_coordinator_not_available() {
    let p = Arc::new(MemPartition::default());
    let rt = runtime(&p);
    rt.set_write_timeout(Duration::from_secs(5));
    rt.schedule_load(tp(), 0);
    // Paused time: let the blocking load finish in real time.
    for _ in 0..2000 {
        if rt.partitions().iter().any(|(_, ok)| *ok) {
            break;
        }
        tokio::task::yield_now().await;
        std::thread::sleep(Duration::from_millis(1));
    }
    let rt2 = rt.clone();
    let started = tokio::time::Instant::now();
    let held = tokio::spawn(async move { increment(&rt2, "a").await });
    tokio::time::sleep(Duration::from_millis(4900)).await;
    assert!(!held.is_finished(), "answered before the timeout");
    let e = held.await.unwrap().unwrap_err();
    assert_eq!(e.code(), ErrorCode::CoordinatorNotAvailable);
    assert_eq!(started.elapsed(), Duration::from_secs(5));
    // The records stay: in the log and in the shard, committed once the HW passes them.
    assert_eq!(p.log.lock().len(), 1);
    rt.on_high_watermark(&tp(), 1);
    assert_eq!(committed(&rt, "a").await, Some(1));
    // Zero: no limit.
    rt.set_write_timeout(Duration::ZERO);
    let rt3 = rt.clone();
    let waiting = tokio::spawn(async move { increment(&rt3, "a").await });
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(!waiting.is_finished());
    rt.on_high_watermark(&tp(), 2);
    assert_eq!(waiting.await.unwrap(), Ok(2));
}

// Transactional writes and markers.

const PID: i64 = 4000;

fn producer(id: i64) -> TxnProducer {
    TxnProducer {
        producer_id: id,
        producer_epoch: 2,
    }
}

/// Sets `name` to `value` in `pid`'s transaction.
async fn txn_set(
    rt: &CoordinatorRuntime<Counters>,
    pid: i64,
    name: &str,
    value: i64,
) -> Result<(), CoordinatorError> {
    let name = name.to_string();
    rt.transactional_write(&tp(), pid, 2, move |_s: &mut Counters, _: &WriteContext| {
        Ok(WriteResult {
            records: vec![Set(name, Some(value))],
            response: (),
        })
    })
    .await
}

async fn end_txn(
    rt: &CoordinatorRuntime<Counters>,
    pid: i64,
    result: TxnResult,
) -> Result<(), CoordinatorError> {
    rt.schedule_transaction_completion(&tp(), pid, 2, 9, result, Duration::ZERO)
        .await
}

async fn latest(rt: &CoordinatorRuntime<Counters>, name: &str) -> Option<i64> {
    let name = name.to_string();
    rt.read(&tp(), move |s: &Counters, _| s.values.get(&name).copied())
        .await
        .unwrap()
}

#[tokio::test]
async fn a_transactional_write_is_one_producer_batch_and_takes_effect_at_its_commit_marker() {
    let p = Arc::new(MemPartition::default());
    p.auto_hw.store(true, Ordering::SeqCst);
    let rt = runtime(&p);
    rt.schedule_load(tp(), 3);
    loaded(&rt).await;
    let name = "a".to_string();
    rt.transactional_write(&tp(), PID, 2, move |_s: &mut Counters, _: &WriteContext| {
        Ok(WriteResult {
            records: vec![Set(name, Some(1)), Set("b".into(), Some(2))],
            response: (),
        })
    })
    .await
    .unwrap();
    assert_eq!(
        *p.log.lock(),
        vec![
            Entry::Record(Set::raw("a", 1), Some(producer(PID))),
            Entry::Record(Set::raw("b", 2), Some(producer(PID))),
        ],
        "both records in one batch of the producer"
    );
    // Committed in the log, but pending in the shard until the marker.
    assert_eq!(committed(&rt, "a").await, None);
    assert_eq!(latest(&rt, "a").await, None);
    // A plain write in between is not part of the transaction.
    assert_eq!(increment(&rt, "c").await, Ok(1));
    assert_eq!(p.log.lock()[2], Entry::Record(Set::raw("c", 1), None));

    // The marker: held until the high watermark passes it.
    p.auto_hw.store(false, Ordering::SeqCst);
    let rt2 = rt.clone();
    let commit = tokio::spawn(async move { end_txn(&rt2, PID, TxnResult::Commit).await });
    for _ in 0..200 {
        if p.log.lock().len() == 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(
        p.log.lock()[3],
        Entry::Marker(producer(PID), 9, TxnResult::Commit),
        "the marker carries the transaction coordinator's epoch"
    );
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(
        !commit.is_finished(),
        "answered before the HW passed the marker"
    );
    assert_eq!(latest(&rt, "a").await, Some(1), "applied at once");
    assert_eq!(committed(&rt, "a").await, None, "not committed yet");
    rt.on_high_watermark(&tp(), 4);
    assert_eq!(commit.await.unwrap(), Ok(()));
    assert_eq!(committed(&rt, "a").await, Some(1));
    assert_eq!(committed(&rt, "b").await, Some(2));
    // A marker of a producer without pending records is appended and changes nothing.
    p.auto_hw.store(true, Ordering::SeqCst);
    assert_eq!(end_txn(&rt, 77, TxnResult::Abort).await, Ok(()));
    assert_eq!(p.log.lock().len(), 5);
}

#[tokio::test]
async fn an_abort_marker_drops_the_transactions_records() {
    let p = Arc::new(MemPartition::default());
    p.auto_hw.store(true, Ordering::SeqCst);
    let rt = runtime(&p);
    rt.schedule_load(tp(), 0);
    loaded(&rt).await;
    assert_eq!(increment(&rt, "a").await, Ok(1));
    txn_set(&rt, PID, "a", 50).await.unwrap();
    txn_set(&rt, PID + 1, "b", 60).await.unwrap();
    end_txn(&rt, PID, TxnResult::Abort).await.unwrap();
    assert_eq!(
        committed(&rt, "a").await,
        Some(1),
        "the abort left the plain value"
    );
    // The other producer's transaction is untouched.
    end_txn(&rt, PID + 1, TxnResult::Commit).await.unwrap();
    assert_eq!(committed(&rt, "b").await, Some(60));
    // A later commit marker of the aborted producer finds nothing of the aborted transaction.
    end_txn(&rt, PID, TxnResult::Commit).await.unwrap();
    assert_eq!(committed(&rt, "a").await, Some(1));
}

#[tokio::test]
async fn a_failed_marker_append_is_undone_and_the_transaction_stays_pending() {
    let p = Arc::new(MemPartition::default());
    p.auto_hw.store(true, Ordering::SeqCst);
    let rt = runtime(&p);
    rt.schedule_load(tp(), 0);
    loaded(&rt).await;
    txn_set(&rt, PID, "a", 5).await.unwrap();
    *p.fail_next.lock() = Some(ErrorCode::NotEnoughReplicas);
    let e = end_txn(&rt, PID, TxnResult::Commit).await.unwrap_err();
    assert_eq!(
        e.code(),
        ErrorCode::NotEnoughReplicas,
        "the append's own error"
    );
    assert_eq!(
        latest(&rt, "a").await,
        None,
        "the replayed marker was undone"
    );
    assert_eq!(p.log.lock().len(), 1, "no marker in the log");
    *p.fail_next.lock() = Some(ErrorCode::InvalidProducerEpoch);
    let e = end_txn(&rt, PID, TxnResult::Commit).await.unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidProducerEpoch);
    // The transaction coordinator retries: the pending record is still there to commit.
    end_txn(&rt, PID, TxnResult::Commit).await.unwrap();
    assert_eq!(committed(&rt, "a").await, Some(5));
    assert_eq!(
        *p.log.lock(),
        vec![
            Entry::Record(Set::raw("a", 5), Some(producer(PID))),
            Entry::Marker(producer(PID), 9, TxnResult::Commit),
        ]
    );
    // A failed transactional append is undone as any write.
    *p.fail_next.lock() = Some(ErrorCode::NotEnoughReplicas);
    assert_eq!(
        txn_set(&rt, PID, "z", 1).await.unwrap_err().code(),
        ErrorCode::CoordinatorNotAvailable
    );
    end_txn(&rt, PID, TxnResult::Commit).await.unwrap();
    assert_eq!(committed(&rt, "z").await, None);
}

#[tokio::test]
async fn loading_replays_pending_committed_and_aborted_transactions_as_written() {
    let p = Arc::new(MemPartition::default());
    p.auto_hw.store(true, Ordering::SeqCst);
    {
        let rt = runtime(&p);
        rt.schedule_load(tp(), 0);
        loaded(&rt).await;
        txn_set(&rt, 1, "committed", 10).await.unwrap();
        txn_set(&rt, 2, "aborted", 20).await.unwrap();
        txn_set(&rt, 3, "pending", 30).await.unwrap();
        assert_eq!(increment(&rt, "plain").await, Ok(1));
        end_txn(&rt, 1, TxnResult::Commit).await.unwrap();
        end_txn(&rt, 2, TxnResult::Abort).await.unwrap();
        // Written after producer 1's commit: a new transaction of the same producer.
        txn_set(&rt, 1, "committed", 11).await.unwrap();
    }
    let rt = runtime(&p);
    rt.schedule_load(tp(), 1);
    loaded(&rt).await;
    assert_eq!(committed(&rt, "committed").await, Some(10));
    assert_eq!(committed(&rt, "aborted").await, None);
    assert_eq!(committed(&rt, "pending").await, None);
    assert_eq!(committed(&rt, "plain").await, Some(1));
    // What was pending before the move is pending here: its markers complete it.
    end_txn(&rt, 3, TxnResult::Commit).await.unwrap();
    assert_eq!(committed(&rt, "pending").await, Some(30));
    end_txn(&rt, 1, TxnResult::Abort).await.unwrap();
    assert_eq!(committed(&rt, "committed").await, Some(10));
    end_txn(&rt, 2, TxnResult::Commit).await.unwrap();
    assert_eq!(committed(&rt, "aborted").await, None);
}

#[tokio::test(start_paused = true)]
async fn a_marker_not_committed_within_its_timeout_answers_request_timed_out() {
    let p = Arc::new(MemPartition::default());
    let rt = runtime(&p);
    rt.schedule_load(tp(), 0);
    for _ in 0..2000 {
        if rt.partitions().iter().any(|(_, ok)| *ok) {
            break;
        }
        tokio::task::yield_now().await;
        std::thread::sleep(Duration::from_millis(1));
    }
    let rt2 = rt.clone();
    let held = tokio::spawn(async move {
        rt2.schedule_transaction_completion(
            &tp(),
            PID,
            2,
            9,
            TxnResult::Commit,
            Duration::from_secs(30),
        )
        .await
    });
    tokio::time::sleep(Duration::from_secs(29)).await;
    assert!(!held.is_finished());
    assert_eq!(
        held.await.unwrap().unwrap_err().code(),
        ErrorCode::RequestTimedOut
    );
    assert_eq!(p.log.lock().len(), 1, "the marker stays in the log");
}

impl Set {
    fn raw(name: &str, v: i64) -> RawRecord {
        Counters::serialize(&Set(name.into(), Some(v))).unwrap()
    }
}

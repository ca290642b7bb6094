//! The transaction coordinator in a real `strom` process: FindCoordinator(TRANSACTION)
//! creates `__transaction_state` and names this broker; InitProducerId, AddPartitionsToTxn,
//! EndTxn, DescribeTransactions and ListTransactions with raw requests; an open transaction
//! survives a SIGKILL of the broker and a new producer then aborts it with an epoch bump;
//! librdkafka's transactional producer initializes (and fences its predecessor) against it.
//!
//! Completing a transaction with partitions needs the partition leaders' WriteTxnMarkers
//! handler (helper "store"): when the broker serves it, the test waits for CompleteAbort;
//! when it does not, it checks the PrepareAbort that the markers would complete.

mod common;

use std::net::TcpStream;
use std::time::Duration;

use common::*;
use rdkafka::producer::{BaseProducer, Producer};
use strom_protocol::kafka::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use strom_protocol::kafka::messages::*;
use strom_protocol::kafka::protocol::StrBytes;

const TOPIC: &str = "txn-data";
const NOT_COORDINATOR: i16 = 16;
const LOAD_IN_PROGRESS: i16 = 14;
const COORDINATOR_NOT_AVAILABLE: i16 = 15;
const CONCURRENT_TRANSACTIONS: i16 = 51;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const OPERATION_NOT_ATTEMPTED: i16 = 55;
const PRODUCER_FENCED: i16 = 90;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// FindCoordinator for a transactional id until it is named (the first asks create the topic).
fn find_txn_coordinator(c: &mut TcpStream, id: &str) -> i32 {
    for _ in 0..100 {
        let r: FindCoordinatorResponse = raw_call(
            c,
            ApiKey::FindCoordinator,
            3,
            &FindCoordinatorRequest::default()
                .with_key(s(id))
                .with_key_type(1),
        );
        if r.error_code == 0 {
            return r.node_id.0;
        }
        assert_eq!(r.error_code, COORDINATOR_NOT_AVAILABLE);
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("no transaction coordinator for {id}");
}

/// InitProducerId (v4), retried while the coordinator loads or aborts an open transaction.
fn init(c: &mut TcpStream, id: &str) -> InitProducerIdResponse {
    for _ in 0..100 {
        let r: InitProducerIdResponse = raw_call(
            c,
            ApiKey::InitProducerId,
            4,
            &InitProducerIdRequest::default()
                .with_transactional_id(Some(TransactionalId(s(id))))
                .with_transaction_timeout_ms(60_000)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
        );
        if ![LOAD_IN_PROGRESS, NOT_COORDINATOR].contains(&r.error_code) {
            return r;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("InitProducerId for {id} kept failing");
}

fn describe(c: &mut TcpStream, id: &str) -> describe_transactions_response::TransactionState {
    let mut r: DescribeTransactionsResponse = raw_call(
        c,
        ApiKey::DescribeTransactions,
        0,
        &DescribeTransactionsRequest::default()
            .with_transactional_ids(vec![TransactionalId(s(id))]),
    );
    r.transaction_states.remove(0)
}

/// AddPartitionsToTxn (v3) of `topic`'s partitions 0 and 1, plus `extra`'s partition 0.
fn add_partitions(
    c: &mut TcpStream,
    id: &str,
    pid: i64,
    epoch: i16,
    topic: &str,
    extra: Option<&str>,
) -> Vec<i16> {
    let mut topics = vec![AddPartitionsToTxnTopic::default()
        .with_name(TopicName(s(topic)))
        .with_partitions(vec![0, 1])];
    if let Some(x) = extra {
        topics.push(
            AddPartitionsToTxnTopic::default()
                .with_name(TopicName(s(x)))
                .with_partitions(vec![0]),
        );
    }
    let r: AddPartitionsToTxnResponse = raw_call(
        c,
        ApiKey::AddPartitionsToTxn,
        3,
        &AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(TransactionalId(s(id)))
            .with_v3_and_below_producer_id(ProducerId(pid))
            .with_v3_and_below_producer_epoch(epoch)
            .with_v3_and_below_topics(topics),
    );
    r.results_by_topic_v3_and_below
        .iter()
        .flat_map(|t| {
            t.results_by_partition
                .iter()
                .map(|p| p.partition_error_code)
        })
        .collect()
}

fn serves_write_txn_markers(c: &mut TcpStream) -> bool {
    let r: ApiVersionsResponse =
        raw_call(c, ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());
    r.api_keys
        .iter()
        .any(|k| k.api_key == ApiKey::WriteTxnMarkers as i16)
}

#[test]
fn transactions_on_a_real_broker_survive_sigkill() {
    let mut broker = Broker::start();
    create_topic(&broker, TOPIC, 2, &[]);
    let mut c = connect(&broker);
    let node = find_txn_coordinator(&mut c, "tx-1");
    assert_eq!(node, 1);

    let r = init(&mut c, "tx-1");
    assert_eq!((r.error_code, r.producer_epoch), (0, 0), "{r:?}");
    let pid = r.producer_id.0;
    assert!(pid >= 0);
    // A partition of a topic that does not exist refuses the whole request.
    let codes = add_partitions(&mut c, "tx-1", pid, 0, TOPIC, Some("no-such-topic"));
    assert!(codes.contains(&UNKNOWN_TOPIC_OR_PARTITION), "{codes:?}");
    assert!(codes.contains(&OPERATION_NOT_ATTEMPTED), "{codes:?}");
    assert_eq!(
        add_partitions(&mut c, "tx-1", pid, 0, TOPIC, None),
        vec![0, 0]
    );
    let d = describe(&mut c, "tx-1");
    assert_eq!(d.error_code, 0);
    assert_eq!(d.transaction_state.as_str(), "Ongoing");
    assert_eq!((d.producer_id.0, d.producer_epoch), (pid, 0));
    assert_eq!(d.topics.len(), 1);
    assert_eq!(d.topics[0].partitions, vec![0, 1]);

    let l: ListTransactionsResponse = raw_call(
        &mut c,
        ApiKey::ListTransactions,
        1,
        &ListTransactionsRequest::default()
            .with_state_filters(vec![s("Ongoing")])
            .with_duration_filter(-1),
    );
    assert_eq!(l.error_code, 0);
    let ids: Vec<&str> = l
        .transaction_states
        .iter()
        .map(|t| t.transactional_id.0.as_str())
        .collect();
    assert_eq!(ids, vec!["tx-1"]);

    // Transactions v2: an abort with nothing added completes at once, with a bumped epoch.
    let r2 = init(&mut c, "tx-2");
    assert_eq!(r2.error_code, 0);
    let e: EndTxnResponse = raw_call(
        &mut c,
        ApiKey::EndTxn,
        5,
        &EndTxnRequest::default()
            .with_transactional_id(TransactionalId(s("tx-2")))
            .with_producer_id(r2.producer_id)
            .with_producer_epoch(0)
            .with_committed(false),
    );
    assert_eq!(
        (e.error_code, e.producer_id.0, e.producer_epoch),
        (0, r2.producer_id.0, 1)
    );

    // SIGKILL: the open transaction is still there after the restart.
    drop(c);
    broker.kill();
    broker.restart();
    let mut c = connect(&broker);
    find_txn_coordinator(&mut c, "tx-1");
    let mut d = describe(&mut c, "tx-1");
    for _ in 0..100 {
        if d.error_code == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        d = describe(&mut c, "tx-1");
    }
    assert_eq!(d.transaction_state.as_str(), "Ongoing", "{d:?}");
    assert_eq!((d.producer_id.0, d.producer_epoch), (pid, 0));
    assert_eq!(
        describe(&mut c, "tx-2").transaction_state.as_str(),
        "CompleteAbort"
    );

    // A new producer with the same id: the open transaction is aborted (the old producer
    // fenced by an epoch bump) and the new one told to retry.
    let r = init(&mut c, "tx-1");
    assert_eq!(r.error_code, CONCURRENT_TRANSACTIONS, "{r:?}");
    let e: EndTxnResponse = raw_call(
        &mut c,
        ApiKey::EndTxn,
        4,
        &EndTxnRequest::default()
            .with_transactional_id(TransactionalId(s("tx-1")))
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(0)
            .with_committed(true),
    );
    assert_eq!(e.error_code, PRODUCER_FENCED);
    if serves_write_txn_markers(&mut c) {
        let mut state = String::new();
        for _ in 0..100 {
            state = describe(&mut c, "tx-1").transaction_state.to_string();
            if state == "CompleteAbort" {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        assert_eq!(state, "CompleteAbort");
        let r = init(&mut c, "tx-1");
        assert_eq!((r.error_code, r.producer_epoch), (0, 3), "{r:?}");
    } else {
        eprintln!("this broker has no WriteTxnMarkers handler: checking the prepared abort only");
        let d = describe(&mut c, "tx-1");
        assert_eq!(d.transaction_state.as_str(), "PrepareAbort");
        // Fenced to 1, bumped to 2 by the abort (transaction.version 2).
        assert_eq!((d.producer_id.0, d.producer_epoch), (pid, 2));
    }

    // librdkafka's transactional producer: init_transactions finds the coordinator and gets
    // an id; a second producer with the same transactional.id fences the first.
    let make = || -> BaseProducer {
        let mut cfg = client_config(&broker);
        cfg.set("transactional.id", "rd-tx")
            .set("transaction.timeout.ms", "30000");
        cfg.create().expect("transactional producer")
    };
    let p1 = make();
    p1.init_transactions(Duration::from_secs(30))
        .expect("init_transactions");
    let d = describe(&mut c, "rd-tx");
    assert_eq!((d.error_code, d.transaction_state.as_str()), (0, "Empty"));
    let first_epoch = d.producer_epoch;
    let p2 = make();
    p2.init_transactions(Duration::from_secs(30))
        .expect("second init_transactions");
    let d2 = describe(&mut c, "rd-tx");
    assert_eq!(d2.producer_id, d.producer_id);
    assert_eq!(d2.producer_epoch, first_epoch + 1);
    drop((p1, p2));
    assert_clean_exit(broker.stop());
}

use super::*;
use crate::placement::*;
use std::collections::HashMap;

fn block<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(f)
}

fn controller(dir: &Path) -> QuorumController {
    let c = QuorumController::open(
        &dir.join("meta.log"),
        TopicDefaults {
            num_partitions: 1,
            replication_factor: 1,
        },
    )
    .unwrap();
    block(c.register_broker(1, "127.0.0.1", 9092, None)).unwrap();
    c
}

fn spec(name: &str, p: i32) -> CreateTopicSpec {
    CreateTopicSpec {
        name: name.into(),
        num_partitions: p,
        replication_factor: -1,
        ..Default::default()
    }
}

#[test]
fn create_describe_delete_survive_restart() {
    let dir = tempfile::tempdir().unwrap();
    let c = controller(dir.path());
    let r = block(c.create_topics(&[spec("a", 3), spec("b", -1)], false));
    assert!(r.iter().all(|r| r.is_ok()));
    assert_eq!(c.image().topic("a").unwrap().partitions.len(), 3);
    assert_eq!(c.image().topic("b").unwrap().partitions.len(), 1);
    let id = c.image().topic("a").unwrap().id;
    block(c.incremental_alter_topic_configs(
        "a",
        &[("retention.ms".into(), AlterConfigOp::Set, Some("5".into()))],
        false,
    ))
    .unwrap();
    block(c.create_partitions("a", 5, None, false)).unwrap();
    assert!(block(c.delete_topics(&[(Some("b".into()), None)]))[0].is_ok());
    drop(c);
    let c = controller(dir.path());
    let img = c.image();
    let a = img.topic("a").unwrap();
    assert_eq!(a.id, id);
    assert_eq!(a.partitions.len(), 5);
    assert_eq!(a.configs["retention.ms"], "5");
    assert!(img.topic("b").is_none());
}

#[test]
fn create_errors_follow_kafka() {
    let dir = tempfile::tempdir().unwrap();
    let c = controller(dir.path());
    assert!(block(c.create_topics(&[spec("a.b", 1)], false))[0].is_ok());
    let code = |s: CreateTopicSpec| {
        block(c.create_topics(&[s], false))[0]
            .clone()
            .unwrap_err()
            .code()
    };
    assert_eq!(code(spec("a.b", 1)), 36);
    assert_eq!(code(spec("a_b", 1)), 17);
    assert_eq!(code(spec("bad name", 1)), 17);
    assert_eq!(code(spec("__consumer_offsets", 1)), 42);
    assert_eq!(code(spec("x", 0)), 37);
    assert_eq!(
        code(CreateTopicSpec {
            replication_factor: 3,
            ..spec("x", 1)
        }),
        38
    );
    assert_eq!(
        code(CreateTopicSpec {
            configs: vec![("nope".into(), Some("1".into()))],
            ..spec("x", 1)
        }),
        40
    );
    assert_eq!(
        code(CreateTopicSpec {
            assignments: vec![(0, vec![2])],
            ..spec("x", -1)
        }),
        39
    );
    let dup = block(c.create_topics(&[spec("d", 1), spec("d", 1)], false));
    assert!(dup[0].is_ok());
    assert_eq!(dup[1].clone().unwrap_err().code(), 42);
}

#[test]
fn producer_id_blocks_never_repeat_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let c = controller(dir.path());
    let a = block(c.allocate_producer_ids(1)).unwrap();
    let b = block(c.allocate_producer_ids(1)).unwrap();
    assert_eq!((a.start, a.len, b.start), (0, 1000, 1000));
    drop(c);
    let c = controller(dir.path());
    assert_eq!(block(c.allocate_producer_ids(2)).unwrap().start, 2000);
}

#[test]
fn validate_only_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let c = controller(dir.path());
    assert!(block(c.create_topics(&[spec("v", 2)], true))[0].is_ok());
    assert!(c.image().topic("v").is_none());
}

#[test]
fn rack_alternated_list_matches_kafka() {
    // AdminUtilsTest: brokers 0..5 in racks rack1, rack3, rack3, rack2, rack2, rack1.
    let b: Vec<(i32, String)> = [
        (0, "rack1"),
        (1, "rack3"),
        (2, "rack3"),
        (3, "rack2"),
        (4, "rack2"),
        (5, "rack1"),
    ]
    .iter()
    .map(|(b, r)| (*b, r.to_string()))
    .collect();
    assert_eq!(rack_alternated_brokers(&b), vec![0, 3, 1, 5, 4, 2]);
    // The same test's assignment of 7 partitions, RF 3, fixed start index and shift 0.
    let a = assign_replicas_rack_aware(7, 3, &b, Some(0), 0);
    let want: Vec<Vec<i32>> = vec![
        vec![0, 3, 1],
        vec![3, 1, 5],
        vec![1, 5, 4],
        vec![5, 4, 2],
        vec![4, 2, 0],
        vec![2, 0, 3],
        vec![0, 4, 2],
    ];
    assert_eq!(a, want);
}

#[test]
fn rack_aware_spreads_racks_and_balances() {
    let b: Vec<(i32, String)> = (0..6).map(|i| (i, format!("rack{}", i % 3))).collect();
    for start in 0..6 {
        let a = assign_replicas_rack_aware(12, 3, &b, Some(start), 0);
        let mut leaders = HashMap::new();
        let mut replicas = HashMap::new();
        for r in &a {
            let racks: HashSet<i32> = r.iter().map(|x| x % 3).collect();
            assert_eq!(racks.len(), 3, "one replica per rack: {r:?}");
            *leaders.entry(r[0]).or_insert(0) += 1;
            for x in r {
                *replicas.entry(*x).or_insert(0) += 1;
            }
        }
        let spread = |m: &HashMap<i32, i32>| m.values().max().unwrap() - m.values().min().unwrap();
        assert!(spread(&leaders) <= 1 && leaders.len() == 6, "{leaders:?}");
        assert!(spread(&replicas) <= 1, "{replicas:?}");
    }
    // Fewer racks than replicas: every rack still used.
    let two: Vec<(i32, String)> = (0..4).map(|i| (i, format!("r{}", i % 2))).collect();
    for r in assign_replicas_rack_aware(8, 3, &two, Some(0), 0) {
        assert_eq!(r.iter().map(|x| x % 2).collect::<HashSet<_>>().len(), 2);
        assert_eq!(r.iter().collect::<HashSet<_>>().len(), 3);
    }
}

#[test]
fn rack_unaware_is_balanced() {
    let a = assign_replicas_rack_unaware(30, 3, &[1, 2, 3, 4, 5], None, 0);
    let mut leaders = HashMap::new();
    for r in &a {
        assert_eq!(r.iter().collect::<HashSet<_>>().len(), 3);
        *leaders.entry(r[0]).or_insert(0) += 1;
    }
    assert!(leaders.values().all(|&n| n == 6));
}

#[test]
fn rack_unaware_matches_kafka_layout() {
    // Kafka's AdminUtils with startIndex 0 and shift 0 over brokers 0..5 and RF 3.
    let a = assign_replicas_rack_unaware(10, 3, &[0, 1, 2, 3, 4], Some(0), 0);
    assert_eq!(a[0], vec![0, 1, 2]);
    assert_eq!(a[1], vec![1, 2, 3]);
    assert_eq!(a[4], vec![4, 0, 1]);
    assert_eq!(a[5], vec![0, 2, 3]);
    assert_eq!(a[9], vec![4, 1, 2]);
}

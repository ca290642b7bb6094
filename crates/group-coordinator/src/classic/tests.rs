//! Unit tests of the classic group pieces that need no runtime.

use bytes::{BufMut, Bytes, BytesMut};

use super::group::{decode_subscription_topics, ClassicGroup, GroupState};
use super::member::{ClassicGroupMember, Protocol};

fn subscription(topics: &[&str]) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(1);
    b.put_i32(topics.len() as i32);
    for t in topics {
        b.put_i16(t.len() as i16);
        b.put_slice(t.as_bytes());
    }
    // v1 user data (null) follows; the v0 prefix is all that is read.
    b.put_i32(-1);
    b.freeze()
}

fn member(id: &str, protocols: &[(&str, &[&str])]) -> ClassicGroupMember {
    ClassicGroupMember::new(
        id.into(),
        None,
        "client".into(),
        "/127.0.0.1".into(),
        10_000,
        10_000,
        "consumer".into(),
        protocols
            .iter()
            .map(|(n, t)| Protocol {
                name: n.to_string(),
                metadata: subscription(t),
            })
            .collect(),
        Bytes::new(),
    )
}

#[test]
fn subscription_topics_decode_from_the_v0_prefix() {
    assert_eq!(
        decode_subscription_topics(&subscription(&["a", "bb"])),
        Some(vec!["a".to_string(), "bb".to_string()])
    );
    assert_eq!(decode_subscription_topics(&[0, 1, 0]), None);
    assert_eq!(decode_subscription_topics(&[]), None);
}

#[test]
fn protocol_with_most_votes_among_those_all_support_wins() {
    let mut g = ClassicGroup::new("g".into(), GroupState::Empty, 0);
    g.add(member("m1", &[("range", &["t"]), ("roundrobin", &["t"])]));
    g.add(member("m2", &[("roundrobin", &["t"]), ("range", &["t"])]));
    g.add(member("m3", &[("roundrobin", &["t"]), ("sticky", &["t"])]));
    // Only roundrobin is supported by all three.
    assert_eq!(g.select_protocol().as_deref(), Some("roundrobin"));
    g.transition_to(GroupState::PreparingRebalance, 0);
    // A non-empty group takes a member only with a protocol every member supports.
    assert!(!g.supports_protocols("consumer", &[]));
    let only_sticky = [Protocol {
        name: "sticky".into(),
        metadata: Bytes::new(),
    }];
    assert!(!g.supports_protocols("consumer", &only_sticky));
}

#[test]
fn a_removed_leader_is_replaced_by_the_first_member_in_java_map_order() {
    let mut g = ClassicGroup::new("g".into(), GroupState::Empty, 0);
    // "b" hashes to bucket 2, "a" and "q" to bucket 1: Java iterates a, q, b... here a then q
    // were inserted after b.
    g.add(member("b", &[("range", &["t"])]));
    g.add(member("q", &[("range", &["t"])]));
    g.add(member("a", &[("range", &["t"])]));
    assert_eq!(g.leader_id.as_deref(), Some("b"));
    assert_eq!(g.member_ids(), vec!["q", "a", "b"]);
    g.remove("b");
    assert_eq!(g.leader_id.as_deref(), Some("q"));
}

#[test]
fn subscribed_topics_are_the_union_of_the_chosen_protocol() {
    let mut g = ClassicGroup::new("g".into(), GroupState::Empty, 0);
    g.add(member("m1", &[("range", &["t1", "t2"])]));
    g.add(member("m2", &[("range", &["t3"])]));
    g.protocol_name = Some("range".into());
    let topics = g.compute_subscribed_topics().unwrap();
    assert_eq!(
        topics.into_iter().collect::<Vec<_>>(),
        vec!["t1", "t2", "t3"]
    );
}

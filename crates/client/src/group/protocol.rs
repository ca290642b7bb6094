//! The bytes the classic protocol carries for consumers (Java's `ConsumerProtocol`): a
//! big-endian i16 version followed by a `ConsumerProtocolSubscription` (JoinGroup metadata) or
//! `ConsumerProtocolAssignment` (SyncGroup assignment) of that version.
//!
//! Strom writes version 3, as kafka-clients 4.4 does. A newer version is read as version 3:
//! the schemas only ever append fields, which is how Java stays compatible with newer members.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use strom_protocol::java::string_cmp;
use strom_protocol::kafka::messages::{
    consumer_protocol_assignment, consumer_protocol_subscription, ConsumerProtocolAssignment,
    ConsumerProtocolSubscription, TopicName,
};
use strom_protocol::kafka::protocol::{Decodable, Encodable, StrBytes};

use super::GroupError;
use crate::assignor::{Assignment, Subscription, TopicPartition};

/// The version Strom writes.
pub const CONSUMER_PROTOCOL_VERSION: i16 = 3;

/// Partitions grouped by topic, topics in order of first appearance.
fn group_by_topic(partitions: &[TopicPartition]) -> Vec<(String, Vec<i32>)> {
    let mut out: Vec<(String, Vec<i32>)> = Vec::new();
    for tp in partitions {
        match out.iter_mut().find(|(t, _)| *t == tp.topic) {
            Some((_, ps)) => ps.push(tp.partition),
            None => out.push((tp.topic.clone(), vec![tp.partition])),
        }
    }
    out
}

fn with_version<M: Encodable>(msg: &M) -> Result<Bytes, GroupError> {
    let mut buf = BytesMut::new();
    buf.put_i16(CONSUMER_PROTOCOL_VERSION);
    msg.encode(&mut buf, CONSUMER_PROTOCOL_VERSION)
        .map_err(|e| GroupError::Protocol(format!("encoding: {e}")))?;
    Ok(buf.freeze())
}

fn read_version(bytes: &mut Bytes, what: &str) -> Result<i16, GroupError> {
    if bytes.len() < 2 {
        return Err(GroupError::Protocol(format!(
            "{what} of {} bytes has no version",
            bytes.len()
        )));
    }
    let v = bytes.get_i16();
    if v < 0 {
        return Err(GroupError::Protocol(format!("{what} has version {v}")));
    }
    Ok(v.min(CONSUMER_PROTOCOL_VERSION))
}

/// The JoinGroup metadata for `sub` (its `group_instance_id` is not part of the bytes). As
/// Java writes it, byte for byte: topics sorted, owned partitions sorted by topic then
/// partition (Java's `String` order, UTF-16 code units).
pub fn encode_subscription(sub: &Subscription) -> Result<Bytes, GroupError> {
    let mut m = ConsumerProtocolSubscription::default();
    let mut topics: Vec<&String> = sub.topics.iter().collect();
    topics.sort_by(|a, b| string_cmp(a, b));
    m.topics = topics
        .into_iter()
        .map(|t| StrBytes::from_string(t.clone()))
        .collect();
    m.user_data = sub.user_data.clone();
    let mut owned = sub.owned_partitions.clone();
    owned.sort_by(|a, b| string_cmp(&a.topic, &b.topic).then(a.partition.cmp(&b.partition)));
    m.owned_partitions = group_by_topic(&owned)
        .into_iter()
        .map(|(t, ps)| {
            let mut tp = consumer_protocol_subscription::TopicPartition::default();
            tp.topic = TopicName(StrBytes::from_string(t));
            tp.partitions = ps;
            tp
        })
        .collect();
    m.generation_id = sub.generation_id;
    m.rack_id = sub.rack_id.clone().map(StrBytes::from_string);
    with_version(&m)
}

/// A member's JoinGroup metadata as the leader's assignor input.
pub fn decode_subscription(
    mut bytes: Bytes,
    group_instance_id: Option<String>,
) -> Result<Subscription, GroupError> {
    let version = read_version(&mut bytes, "subscription")?;
    let m = ConsumerProtocolSubscription::decode(&mut bytes, version)
        .map_err(|e| GroupError::Protocol(format!("subscription v{version}: {e}")))?;
    Ok(Subscription {
        topics: m.topics.iter().map(|t| t.to_string()).collect(),
        user_data: m.user_data,
        owned_partitions: m
            .owned_partitions
            .iter()
            .flat_map(|tp| {
                let t = tp.topic.0.to_string();
                tp.partitions
                    .iter()
                    .map(move |&p| TopicPartition::new(t.clone(), p))
            })
            .collect(),
        generation_id: if version >= 2 { m.generation_id } else { -1 },
        rack_id: m.rack_id.map(|r| r.to_string()),
        group_instance_id,
    })
}

/// The SyncGroup assignment bytes for `a`.
pub fn encode_assignment(a: &Assignment) -> Result<Bytes, GroupError> {
    let mut m = ConsumerProtocolAssignment::default();
    m.assigned_partitions = group_by_topic(&a.partitions)
        .into_iter()
        .map(|(t, ps)| {
            let mut tp = consumer_protocol_assignment::TopicPartition::default();
            tp.topic = TopicName(StrBytes::from_string(t));
            tp.partitions = ps;
            tp
        })
        .collect();
    m.user_data = a.user_data.clone();
    with_version(&m)
}

/// This member's assignment from the SyncGroup response. Empty bytes (a member the leader
/// left out) mean no partitions.
pub fn decode_assignment(mut bytes: Bytes) -> Result<Assignment, GroupError> {
    if bytes.is_empty() {
        return Ok(Assignment::default());
    }
    let version = read_version(&mut bytes, "assignment")?;
    let m = ConsumerProtocolAssignment::decode(&mut bytes, version)
        .map_err(|e| GroupError::Protocol(format!("assignment v{version}: {e}")))?;
    Ok(Assignment {
        partitions: m
            .assigned_partitions
            .iter()
            .flat_map(|tp| {
                let t = tp.topic.0.to_string();
                tp.partitions
                    .iter()
                    .map(move |&p| TopicPartition::new(t.clone(), p))
            })
            .collect(),
        user_data: m.user_data,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscription_round_trip() {
        let sub = Subscription {
            topics: vec!["b".into(), "a".into()],
            user_data: Some(Bytes::from_static(b"ud")),
            owned_partitions: vec![
                TopicPartition::new("a", 2),
                TopicPartition::new("b", 0),
                TopicPartition::new("a", 0),
            ],
            generation_id: 7,
            rack_id: Some("r1".into()),
            group_instance_id: None,
        };
        let bytes = encode_subscription(&sub).unwrap();
        assert_eq!(&bytes[..2], &[0, 3]);
        let back = decode_subscription(bytes, Some("i".into())).unwrap();
        // Sorted, as Java writes them.
        assert_eq!(back.topics, vec!["a".to_string(), "b".to_string()]);
        assert_eq!(back.user_data, sub.user_data);
        assert_eq!(
            back.owned_partitions,
            vec![
                TopicPartition::new("a", 0),
                TopicPartition::new("a", 2),
                TopicPartition::new("b", 0)
            ]
        );
        assert_eq!(back.generation_id, 7);
        assert_eq!(back.rack_id.as_deref(), Some("r1"));
        assert_eq!(back.group_instance_id.as_deref(), Some("i"));
    }

    #[test]
    fn assignment_round_trip_and_empty() {
        let a = Assignment {
            partitions: vec![TopicPartition::new("t", 1), TopicPartition::new("t", 4)],
            user_data: None,
        };
        let back = decode_assignment(encode_assignment(&a).unwrap()).unwrap();
        assert_eq!(back, a);
        assert_eq!(
            decode_assignment(Bytes::new()).unwrap(),
            Assignment::default()
        );
    }

    #[test]
    fn version_0_subscription_from_an_old_member() {
        // v0: topics ["t"], user_data null.
        let mut buf = BytesMut::new();
        buf.put_i16(0);
        buf.put_i32(1);
        buf.put_i16(1);
        buf.put_slice(b"t");
        buf.put_i32(-1);
        let s = decode_subscription(buf.freeze(), None).unwrap();
        assert_eq!(s.topics, vec!["t".to_string()]);
        assert_eq!(s.generation_id, -1);
        assert!(s.owned_partitions.is_empty());
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for bad in [
            &b""[..],
            &b"\x00"[..],
            &b"\xff\xff"[..],
            &b"\x00\x03\x00\x00\x00\x09"[..],
        ] {
            assert!(decode_subscription(Bytes::copy_from_slice(bad), None).is_err());
        }
        assert!(decode_assignment(Bytes::from_static(b"\x00\x01\x7f")).is_err());
    }
}

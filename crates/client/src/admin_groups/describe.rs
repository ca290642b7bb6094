//! Turning ConsumerGroupDescribe and DescribeGroups answers into [`GroupDescription`]s,
//! including the classic members' assignment bytes.

use bytes::Bytes;
use strom_protocol::kafka::messages::ConsumerProtocolAssignment;
use strom_protocol::kafka::protocol::Decodable;

use super::{GroupDescription, GroupType, MemberDescription, Tp};
use crate::client::BrokerInfo;

/// Decodes a classic consumer member's assignment (ConsumerProtocolAssignment, a version then
/// the fields). Anything undecodable is an empty assignment, as Kafka's admin client treats a
/// non-consumer protocol.
pub fn decode_assignment(bytes: &Bytes) -> Vec<Tp> {
    if bytes.len() < 2 {
        return Vec::new();
    }
    let mut buf = bytes.clone();
    let version = i16::from_be_bytes([buf[0], buf[1]]);
    let _ = bytes::Buf::get_i16(&mut buf);
    // Versions above the latest known are read as the latest (Kafka's forward compatibility).
    let version = version.clamp(0, 3);
    match ConsumerProtocolAssignment::decode(&mut buf, version) {
        Ok(a) => {
            let mut out: Vec<Tp> = a
                .assigned_partitions
                .iter()
                .flat_map(|t| {
                    let name = t.topic.0.to_string();
                    t.partitions.iter().map(move |p| (name.clone(), *p))
                })
                .collect();
            out.sort();
            out
        }
        Err(_) => Vec::new(),
    }
}

pub(super) fn consumer_description(
    broker: &BrokerInfo,
    g: strom_protocol::kafka::messages::consumer_group_describe_response::DescribedGroup,
) -> GroupDescription {
    use strom_protocol::kafka::messages::consumer_group_describe_response::Assignment;
    fn tps(a: &Assignment) -> Vec<Tp> {
        let mut v: Vec<Tp> = a
            .topic_partitions
            .iter()
            .flat_map(|t| {
                let name = t.topic_name.0.to_string();
                t.partitions.iter().map(move |p| (name.clone(), *p))
            })
            .collect();
        v.sort();
        v
    }
    GroupDescription {
        group_id: g.group_id.0.to_string(),
        group_type: GroupType::Consumer,
        protocol_type: "consumer".into(),
        state: g.group_state.to_string(),
        partition_assignor: g.assignor_name.to_string(),
        coordinator: broker.clone(),
        members: g
            .members
            .iter()
            .map(|m| MemberDescription {
                member_id: m.member_id.to_string(),
                group_instance_id: m.instance_id.as_ref().map(|s| s.to_string()),
                client_id: m.client_id.to_string(),
                host: m.client_host.to_string(),
                assignment: tps(&m.assignment),
                target_assignment: Some(tps(&m.target_assignment)),
                member_epoch: Some(m.member_epoch),
            })
            .collect(),
        group_epoch: Some(g.group_epoch),
        target_assignment_epoch: Some(g.assignment_epoch),
    }
}

pub(super) fn classic_description(
    broker: &BrokerInfo,
    g: strom_protocol::kafka::messages::describe_groups_response::DescribedGroup,
) -> GroupDescription {
    let protocol_type = g.protocol_type.to_string();
    // Only the consumer protocol's assignment bytes mean topic partitions.
    let is_consumer = protocol_type == "consumer" || protocol_type.is_empty();
    GroupDescription {
        group_id: g.group_id.0.to_string(),
        group_type: GroupType::Classic,
        state: g.group_state.to_string(),
        partition_assignor: g.protocol_data.to_string(),
        coordinator: broker.clone(),
        members: g
            .members
            .iter()
            .map(|m| MemberDescription {
                member_id: m.member_id.to_string(),
                group_instance_id: m.group_instance_id.as_ref().map(|s| s.to_string()),
                client_id: m.client_id.to_string(),
                host: m.client_host.to_string(),
                assignment: if is_consumer {
                    decode_assignment(&m.member_assignment)
                } else {
                    Vec::new()
                },
                target_assignment: None,
                member_epoch: None,
            })
            .collect(),
        protocol_type,
        group_epoch: None,
        target_assignment_epoch: None,
    }
}

#[cfg(test)]
mod tests {
    use super::super::{by_topic, topic_name};
    use super::*;
    use strom_protocol::kafka::messages::consumer_protocol_assignment::TopicPartition;
    use strom_protocol::kafka::protocol::Encodable;

    #[test]
    fn decodes_consumer_assignment() {
        let mut a = ConsumerProtocolAssignment::default();
        let mut t = TopicPartition::default();
        t.topic = topic_name("b");
        t.partitions = vec![2, 0];
        let mut u = TopicPartition::default();
        u.topic = topic_name("a");
        u.partitions = vec![1];
        a.assigned_partitions = vec![t, u];
        let mut buf = bytes::BytesMut::new();
        buf.extend_from_slice(&1i16.to_be_bytes());
        a.encode(&mut buf, 1).unwrap();
        let got = decode_assignment(&buf.freeze());
        assert_eq!(got, vec![("a".into(), 1), ("b".into(), 0), ("b".into(), 2)]);
        // Garbage and empty bytes are an empty assignment, never a panic.
        assert!(decode_assignment(&Bytes::from_static(&[0, 1, 0xff])).is_empty());
        assert!(decode_assignment(&Bytes::new()).is_empty());
    }

    #[test]
    fn groups_partitions_by_topic() {
        let tps = vec![
            ("t".to_string(), 2),
            ("s".to_string(), 1),
            ("t".to_string(), 0),
        ];
        let m = by_topic(&tps);
        assert_eq!(m["t"], vec![0, 2]);
        assert_eq!(m["s"], vec![1]);
    }
}

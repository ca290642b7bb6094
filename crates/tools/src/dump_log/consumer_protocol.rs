//! The `consumer` protocol bytes inside a classic group's `GroupMetadata` record, decoded as
//! Kafka's `OffsetsMessageParser` decodes them for `--offsets-decoder`: each member's
//! `subscription` and `assignment` printed as the JSON of `ConsumerProtocolSubscription` /
//! `ConsumerProtocolAssignment` (at the version the bytes carry) instead of base64. Bytes that
//! do not decode stay base64, as the rest of the record is still worth printing.

use bytes::{Buf, Bytes};
use strom_group_coordinator::records::wire::json;
use strom_group_coordinator::records::GroupMetadataValue;
use strom_protocol::kafka::messages::{ConsumerProtocolAssignment, ConsumerProtocolSubscription};
use strom_protocol::kafka::protocol::Decodable;

/// The version prefix and the message; versions above the newest known read as the newest
/// (the fields they add are ignorable), as Kafka's `ConsumerProtocol` does.
fn split(bytes: &Bytes) -> Option<(i16, Bytes)> {
    if bytes.len() < 2 {
        return None;
    }
    let mut b = bytes.clone();
    let version = b.get_i16();
    (version >= 0).then_some((version.min(3), b))
}

fn user_data(u: &Option<Bytes>) -> String {
    match u {
        None => "null".to_string(),
        Some(b) => json::bytes(b),
    }
}

fn topic_partitions<'a>(tps: impl Iterator<Item = (&'a str, &'a [i32])>) -> String {
    let items: Vec<String> = tps
        .map(|(t, ps)| {
            let ps: Vec<String> = ps.iter().map(|p| p.to_string()).collect();
            format!(
                "{{\"topic\":{},\"partitions\":[{}]}}",
                json::string(t),
                ps.join(",")
            )
        })
        .collect();
    format!("[{}]", items.join(","))
}

/// `ConsumerProtocolSubscriptionJsonConverter.write` of the decoded bytes.
pub(crate) fn subscription_json(bytes: &Bytes) -> Option<String> {
    let (version, mut body) = split(bytes)?;
    let s = ConsumerProtocolSubscription::decode(&mut body, version).ok()?;
    let topics: Vec<String> = s.topics.iter().map(|t| json::string(t)).collect();
    let mut out = format!(
        "{{\"topics\":[{}],\"userData\":{}",
        topics.join(","),
        user_data(&s.user_data)
    );
    if version >= 1 {
        out.push_str(&format!(
            ",\"ownedPartitions\":{}",
            topic_partitions(
                s.owned_partitions
                    .iter()
                    .map(|tp| (tp.topic.0.as_str(), tp.partitions.as_slice()))
            )
        ));
    }
    if version >= 2 {
        out.push_str(&format!(",\"generationId\":{}", s.generation_id));
    }
    if version >= 3 {
        let rack = s
            .rack_id
            .as_ref()
            .map_or_else(|| "null".to_string(), |r| json::string(r));
        out.push_str(&format!(",\"rackId\":{rack}"));
    }
    out.push('}');
    Some(out)
}

/// `ConsumerProtocolAssignmentJsonConverter.write` of the decoded bytes.
pub(crate) fn assignment_json(bytes: &Bytes) -> Option<String> {
    let (version, mut body) = split(bytes)?;
    let a = ConsumerProtocolAssignment::decode(&mut body, version).ok()?;
    Some(format!(
        "{{\"assignedPartitions\":{},\"userData\":{}}}",
        topic_partitions(
            a.assigned_partitions
                .iter()
                .map(|tp| (tp.topic.0.as_str(), tp.partitions.as_slice()))
        ),
        user_data(&a.user_data)
    ))
}

/// The value JSON with the members' `consumer` protocol bytes decoded (only for groups of
/// protocol type `consumer`, as Kafka).
pub(crate) fn decode_members(value: &GroupMetadataValue, value_json: String) -> String {
    if value.protocol_type != "consumer" {
        return value_json;
    }
    let mut out = value_json;
    for m in &value.members {
        // The generated JSON writes each as `"subscription":"<base64>"`; the base64 of a
        // member's own bytes is what to replace (a field name then a string cannot occur
        // inside another JSON string: its quotes would be escaped).
        if let Some(s) = subscription_json(&m.subscription) {
            let raw = format!("\"subscription\":{}", json::bytes(&m.subscription));
            out = out.replacen(&raw, &format!("\"subscription\":{s}"), 1);
        }
        if let Some(a) = assignment_json(&m.assignment) {
            let raw = format!("\"assignment\":{}", json::bytes(&m.assignment));
            out = out.replacen(&raw, &format!("\"assignment\":{a}"), 1);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn librdkafkas_bytes_decode_as_kafka_prints_them() {
        // A librdkafka member's subscription (v1, topic gt) and assignment (v0, gt [0]) from a
        // Strom segment that Kafka 4.4's kafka-dump-log printed as below.
        let sub = Bytes::from_static(&[0, 1, 0, 0, 0, 1, 0, 2, b'g', b't', 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(
            subscription_json(&sub).unwrap(),
            r#"{"topics":["gt"],"userData":"","ownedPartitions":[]}"#
        );
        let asg = Bytes::from_static(&[
            0, 0, 0, 0, 0, 1, 0, 2, b'g', b't', 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0,
        ]);
        assert_eq!(
            assignment_json(&asg).unwrap(),
            r#"{"assignedPartitions":[{"topic":"gt","partitions":[0]}],"userData":""}"#
        );
        assert_eq!(subscription_json(&Bytes::from_static(&[0])), None);
    }
}

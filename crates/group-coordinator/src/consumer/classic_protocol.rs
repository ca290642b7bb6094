//! The embedded `consumer` protocol of classic members (Kafka's `ConsumerProtocolSubscription`
//! and `ConsumerProtocolAssignment`, version-prefixed, not flexible): what the coordinator
//! reads from a classic member's JoinGroup metadata and writes as its SyncGroup assignment when
//! the member is in a consumer group (or the group is converted between the two kinds).

use std::collections::{BTreeMap, BTreeSet};

use bytes::{BufMut, Bytes, BytesMut};
use uuid::Uuid;

use crate::assignor::MemberAssignment;
use crate::metadata::GroupMetadataImage;

/// The newest `ConsumerProtocolAssignment` version (later subscription versions answer with it).
const MAX_ASSIGNMENT_VERSION: i16 = 3;

/// Malformed embedded protocol bytes (Kafka's `SchemaException`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed consumer protocol {0}")]
pub struct MalformedProtocol(pub &'static str);

/// A decoded `ConsumerProtocolSubscription`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Subscription {
    pub version: i16,
    pub topics: Vec<String>,
    pub owned_partitions: Vec<(String, Vec<i32>)>,
    pub rack_id: Option<String>,
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], MalformedProtocol> {
        if self.0.len() < n {
            return Err(MalformedProtocol(what));
        }
        let (h, t) = self.0.split_at(n);
        self.0 = t;
        Ok(h)
    }
    fn i16(&mut self, what: &'static str) -> Result<i16, MalformedProtocol> {
        let b = self.take(2, what)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }
    fn i32(&mut self, what: &'static str) -> Result<i32, MalformedProtocol> {
        let b = self.take(4, what)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn nullable_string(&mut self, what: &'static str) -> Result<Option<String>, MalformedProtocol> {
        let n = self.i16(what)?;
        if n < 0 {
            return Ok(None);
        }
        let b = self.take(n as usize, what)?;
        std::str::from_utf8(b)
            .map(|s| Some(s.to_string()))
            .map_err(|_| MalformedProtocol(what))
    }
    fn string(&mut self, what: &'static str) -> Result<String, MalformedProtocol> {
        self.nullable_string(what)?.ok_or(MalformedProtocol(what))
    }
    fn count(&mut self, what: &'static str) -> Result<usize, MalformedProtocol> {
        let n = self.i32(what)?;
        if n < 0 {
            return Err(MalformedProtocol(what));
        }
        Ok(n as usize)
    }
    fn skip_nullable_bytes(&mut self, what: &'static str) -> Result<(), MalformedProtocol> {
        let n = self.i32(what)?;
        if n >= 0 {
            self.take(n as usize, what)?;
        }
        Ok(())
    }
    fn topic_partitions(&mut self) -> Result<Vec<(String, Vec<i32>)>, MalformedProtocol> {
        let n = self.count("topic partitions")?;
        let mut v = Vec::with_capacity(n.min(1024));
        for _ in 0..n {
            let topic = self.string("topic")?;
            let np = self.count("partitions")?;
            let mut ps = Vec::with_capacity(np.min(1024));
            for _ in 0..np {
                ps.push(self.i32("partition")?);
            }
            v.push((topic, ps));
        }
        Ok(v)
    }
}

/// The version prefix of embedded protocol bytes.
pub fn version(b: &[u8]) -> Result<i16, MalformedProtocol> {
    Reader(b).i16("version")
}

/// Decodes a `ConsumerProtocolSubscription`; fields a newer version appends are ignored, as
/// Kafka's reader of a newer version does.
pub fn decode_subscription(b: &[u8]) -> Result<Subscription, MalformedProtocol> {
    let mut r = Reader(b);
    let version = r.i16("version")?;
    if version < 0 {
        return Err(MalformedProtocol("version"));
    }
    let n = r.count("topics")?;
    let mut topics = Vec::with_capacity(n.min(1024));
    for _ in 0..n {
        topics.push(r.string("topic")?);
    }
    r.skip_nullable_bytes("user data")?;
    let mut s = Subscription {
        version,
        topics,
        ..Default::default()
    };
    if version >= 1 {
        s.owned_partitions = r.topic_partitions()?;
    }
    if version >= 2 {
        r.i32("generation id")?;
    }
    if version >= 3 {
        s.rack_id = r.nullable_string("rack id")?;
    }
    Ok(s)
}

/// Decodes a `ConsumerProtocolAssignment` into topic names and partitions (empty bytes, the
/// assignment of a member that never synced, are no partitions).
pub fn decode_assignment(b: &[u8]) -> Result<Vec<(String, Vec<i32>)>, MalformedProtocol> {
    if b.is_empty() {
        return Ok(Vec::new());
    }
    let mut r = Reader(b);
    let version = r.i16("version")?;
    if version < 0 {
        return Err(MalformedProtocol("version"));
    }
    r.topic_partitions()
}

/// Encodes partitions (by topic id) as a `ConsumerProtocolAssignment` of the version the
/// member's subscription has (capped at the newest assignment version); topics the image
/// does not know are left out, as Kafka's conversion does.
pub fn encode_assignment(
    a: &MemberAssignment,
    image: &GroupMetadataImage,
    subscription_version: i16,
) -> Bytes {
    let version = subscription_version.clamp(0, MAX_ASSIGNMENT_VERSION);
    let topics: Vec<(&String, &BTreeSet<i32>)> = a
        .iter()
        .filter_map(|(t, ps)| image.names_by_id.get(t).map(|n| (n, ps)))
        .collect();
    let mut b = BytesMut::new();
    b.put_i16(version);
    b.put_i32(topics.len() as i32);
    for (name, ps) in topics {
        b.put_i16(name.len() as i16);
        b.put_slice(name.as_bytes());
        b.put_i32(ps.len() as i32);
        for p in ps {
            b.put_i32(*p);
        }
    }
    // No user data.
    b.put_i32(-1);
    b.freeze()
}

/// Topic-name partitions as ids of the image (unknown topics dropped).
pub fn to_topic_ids(v: &[(String, Vec<i32>)], image: &GroupMetadataImage) -> MemberAssignment {
    let mut a: MemberAssignment = BTreeMap::new();
    for (name, ps) in v {
        if let Some(t) = image.topic(name) {
            a.entry(t.id).or_default().extend(ps.iter().copied());
        }
    }
    a.retain(|_, ps| !ps.is_empty());
    a
}

/// The same, as the owned-partitions list a reconciliation takes.
pub fn owned_list(v: &[(String, Vec<i32>)], image: &GroupMetadataImage) -> Vec<(Uuid, Vec<i32>)> {
    to_topic_ids(v, image)
        .into_iter()
        .map(|(t, ps)| (t, ps.into_iter().collect()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subscription_v3(topics: &[&str], owned: &[(&str, &[i32])], rack: Option<&str>) -> Vec<u8> {
        let mut b = BytesMut::new();
        b.put_i16(3);
        b.put_i32(topics.len() as i32);
        for t in topics {
            b.put_i16(t.len() as i16);
            b.put_slice(t.as_bytes());
        }
        b.put_i32(-1);
        b.put_i32(owned.len() as i32);
        for (t, ps) in owned {
            b.put_i16(t.len() as i16);
            b.put_slice(t.as_bytes());
            b.put_i32(ps.len() as i32);
            for p in *ps {
                b.put_i32(*p);
            }
        }
        b.put_i32(7);
        match rack {
            Some(r) => {
                b.put_i16(r.len() as i16);
                b.put_slice(r.as_bytes());
            }
            None => b.put_i16(-1),
        }
        b.to_vec()
    }

    #[test]
    fn subscription_fields_of_every_version_are_read() {
        let b = subscription_v3(&["a", "b"], &[("a", &[0, 2])], Some("r1"));
        let s = decode_subscription(&b).unwrap();
        assert_eq!(s.version, 3);
        assert_eq!(s.topics, vec!["a", "b"]);
        assert_eq!(s.owned_partitions, vec![("a".to_string(), vec![0, 2])]);
        assert_eq!(s.rack_id.as_deref(), Some("r1"));
        assert!(decode_subscription(&b[..b.len() - 3]).is_err());
    }

    #[test]
    fn an_assignment_round_trips_through_names() {
        let id = Uuid::from_u64_pair(1, 2);
        let image = GroupMetadataImage::new([crate::metadata::TopicImage {
            name: "t".into(),
            id,
            num_partitions: 4,
            partition_racks: BTreeMap::new(),
        }]);
        let mut a = MemberAssignment::new();
        a.insert(id, [1, 3].into_iter().collect());
        let b = encode_assignment(&a, &image, 9);
        assert_eq!(version(&b).unwrap(), 3);
        let back = decode_assignment(&b).unwrap();
        assert_eq!(back, vec![("t".to_string(), vec![1, 3])]);
        assert_eq!(to_topic_ids(&back, &image), a);
    }
}

//! The sticky assignors' user data.
//!
//! `StickyAssignorUserData` v1 is `previous_assignment: [topic: STRING, partitions: [INT32]]`
//! followed by `generation: INT32`; v0 lacks the generation. Arrays are an INT32 count, strings
//! an INT16 length and UTF-8, all big-endian. A reader tries v1 first and falls back to v0;
//! data neither reads as counts as "no previous assignment, unknown generation" (Java ignores
//! such a member's history rather than failing the rebalance).
//!
//! `CooperativeStickyAssignorUserData` v0 is a single INT32 generation.

use bytes::{BufMut, Bytes, BytesMut};

use super::{java, MemberData, DEFAULT_GENERATION};
use crate::assignor::TopicPartition;

/// Encodes the user data: v1 with a generation (what Java's `StickyAssignor` always writes),
/// v0 without one (what members of old versions sent).
pub fn encode_sticky_user_data(partitions: &[TopicPartition], generation: Option<i32>) -> Bytes {
    // Grouped by topic in the order of Java's `HashMap` of topic names
    // (`CollectionUtils.groupPartitionsByTopic`), partitions in list order.
    let mut topics: Vec<String> = Vec::new();
    for tp in partitions {
        if !topics.contains(&tp.topic) {
            topics.push(tp.topic.clone());
        }
    }
    let topics = java::hash_order(topics, |t| java::string_hash(t));
    let mut buf = BytesMut::new();
    buf.put_i32(topics.len() as i32);
    for topic in &topics {
        let bytes = topic.as_bytes();
        buf.put_i16(bytes.len() as i16);
        buf.put_slice(bytes);
        let ps: Vec<i32> = partitions
            .iter()
            .filter(|tp| &tp.topic == topic)
            .map(|tp| tp.partition)
            .collect();
        buf.put_i32(ps.len() as i32);
        for p in ps {
            buf.put_i32(p);
        }
    }
    if let Some(generation) = generation {
        buf.put_i32(generation);
    }
    buf.freeze()
}

/// A cursor that fails instead of running past the end (Java's `BufferUnderflowException`).
struct Reader<'a> {
    data: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.data.len() < n {
            return None;
        }
        let (head, tail) = self.data.split_at(n);
        self.data = tail;
        Some(head)
    }

    fn i16(&mut self) -> Option<i16> {
        self.take(2).map(|b| i16::from_be_bytes([b[0], b[1]]))
    }

    fn i32(&mut self) -> Option<i32> {
        self.take(4)
            .map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A non-nullable array's length: negative or longer than the rest fails.
    fn array_len(&mut self) -> Option<usize> {
        let n = self.i32()?;
        let n = usize::try_from(n).ok()?;
        (n <= self.data.len()).then_some(n)
    }

    fn string(&mut self) -> Option<String> {
        let n = usize::try_from(self.i16()?).ok()?;
        // Java decodes malformed UTF-8 with replacement characters rather than failing.
        self.take(n)
            .map(|b| String::from_utf8_lossy(b).into_owned())
    }
}

fn read_assignment(reader: &mut Reader<'_>) -> Option<Vec<TopicPartition>> {
    let topics = reader.array_len()?;
    let mut partitions = Vec::new();
    for _ in 0..topics {
        let topic = reader.string()?;
        let count = reader.array_len()?;
        for _ in 0..count {
            partitions.push(TopicPartition::new(topic.clone(), reader.i32()?));
        }
    }
    Some(partitions)
}

/// Decodes `StickyAssignorUserData` (v1, else v0, else nothing usable).
pub fn decode_sticky_user_data(data: &[u8]) -> MemberData {
    let mut v1 = Reader { data };
    if let Some(partitions) = read_assignment(&mut v1) {
        if let Some(generation) = v1.i32() {
            return MemberData {
                partitions,
                generation: Some(generation),
            };
        }
    }
    let mut v0 = Reader { data };
    match read_assignment(&mut v0) {
        Some(partitions) => MemberData {
            partitions,
            generation: None,
        },
        None => MemberData {
            partitions: Vec::new(),
            generation: Some(DEFAULT_GENERATION),
        },
    }
}

/// Encodes `CooperativeStickyAssignorUserData` v0.
pub fn encode_cooperative_user_data(generation: i32) -> Bytes {
    Bytes::copy_from_slice(&generation.to_be_bytes())
}

/// The generation in `CooperativeStickyAssignorUserData`; unreadable data counts as the
/// default generation, as in Java.
pub fn decode_cooperative_generation(data: &[u8]) -> i32 {
    Reader { data }.i32().unwrap_or(DEFAULT_GENERATION)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_round_trips_and_v0_has_no_generation() {
        let tps = vec![TopicPartition::new("a", 2), TopicPartition::new("a", 0)];
        let v1 = decode_sticky_user_data(&encode_sticky_user_data(&tps, Some(7)));
        assert_eq!(v1.partitions, tps);
        assert_eq!(v1.generation, Some(7));
        let v0 = decode_sticky_user_data(&encode_sticky_user_data(&tps, None));
        assert_eq!(v0.partitions, tps);
        assert_eq!(v0.generation, None);
    }

    #[test]
    fn garbage_is_no_history() {
        let m = decode_sticky_user_data(&[0, 0, 0, 5, 1]);
        assert!(m.partitions.is_empty());
        assert_eq!(m.generation, Some(DEFAULT_GENERATION));
        assert_eq!(decode_cooperative_generation(&[1, 2]), DEFAULT_GENERATION);
        assert_eq!(
            decode_cooperative_generation(&encode_cooperative_user_data(4)),
            4
        );
    }
}

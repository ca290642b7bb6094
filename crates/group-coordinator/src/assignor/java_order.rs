//! Java's orders that decide Kafka assignors' results, reproduced so the Rust ports give the same
//! answer: `String.compareTo` and the iteration order of a `java.util.HashSet<Uuid>`.

use uuid::Uuid;

use strom_protocol::java::hash_spread as spread;
pub(crate) use strom_protocol::java::string_cmp as java_string_cmp;

/// Kafka's `Uuid.hashCode`: the two halves xor-ed, then folded to 32 bits.
fn kafka_uuid_hash(id: Uuid) -> i32 {
    let (msb, lsb) = id.as_u64_pair();
    let h = (msb ^ lsb) as i64;
    ((h >> 32) as i32) ^ (h as i32)
}

/// A bin reaching this many entries makes `HashMap` treeify it, or grow when the table is small.
const TREEIFY_LENGTH: usize = 9;
const MIN_TREEIFY_CAPACITY: usize = 64;

/// The order in which `new HashSet<>(c)` iterates, given `c`'s elements in `c`'s iteration order.
///
/// JDK 17 sizes the table for `c` (`max((int) (n / .75f) + 1, 16)` rounded up to a power of two),
/// so no load-factor resize happens; entries iterate by bin index, a bin in insertion order. A bin
/// of nine entries in a table smaller than 64 doubles the table instead of treeifying. (Nine
/// colliding topic ids in a table of 64 or more would be treeified, which reorders that bin; with
/// random topic ids that does not happen at realistic subscription sizes.)
pub(crate) fn java_hash_set_order(ids: &[Uuid]) -> Vec<Uuid> {
    let requested = ((ids.len() as f32 / 0.75f32) as usize + 1).max(16);
    let mut capacity = requested.next_power_of_two();
    loop {
        let mut bins: Vec<Vec<Uuid>> = vec![Vec::new(); capacity];
        let mut grew = false;
        for &id in ids {
            let bin = &mut bins[(spread(kafka_uuid_hash(id)) as usize) & (capacity - 1)];
            if bin.contains(&id) {
                continue;
            }
            bin.push(id);
            if bin.len() >= TREEIFY_LENGTH && capacity < MIN_TREEIFY_CAPACITY {
                grew = true;
                break;
            }
        }
        if grew {
            capacity *= 2;
            continue;
        }
        return bins.into_iter().flatten().collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cmp::Ordering;

    #[test]
    fn java_string_order_is_utf16() {
        assert_eq!(java_string_cmp("a", "b"), Ordering::Less);
        // UTF-8 puts U+FFFD (EF ..) before U+1F600 (F0 ..); UTF-16 puts it after (FFFD > D83D).
        assert_eq!(java_string_cmp("\u{FFFD}", "\u{1F600}"), Ordering::Greater);
        assert_eq!("\u{FFFD}".cmp("\u{1F600}"), Ordering::Less);
    }

    #[test]
    fn hash_order_is_by_bin() {
        // Uuids whose hash is their low bits: bins 3, 1, 2 iterate as 1, 2, 3.
        let ids: Vec<Uuid> = [3u128, 1, 2].iter().map(|&v| Uuid::from_u128(v)).collect();
        let order = java_hash_set_order(&ids);
        assert_eq!(order, vec![ids[1], ids[2], ids[0]]);
        // Same bin (17 & 15 == 1): insertion order is kept.
        let ids: Vec<Uuid> = [17u128, 1].iter().map(|&v| Uuid::from_u128(v)).collect();
        assert_eq!(java_hash_set_order(&ids), ids);
    }
}

//! Java's behaviour that Kafka's results depend on, in one place: `String.hashCode` (which
//! `__consumer_offsets` partition holds a group, the order of Java hash maps), `String.compareTo`
//! (UTF-16 order, how Kafka's assignors sort names), and the iteration order of a
//! `java.util.HashMap` filled by insertion (where an assignor's output follows the map's order).

use std::cmp::Ordering;

/// `String.hashCode()`: `31 * h + c` over the UTF-16 code units, wrapping.
pub fn string_hash(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)))
}

/// `String.compareTo`: lexicographic over UTF-16 code units. It differs from Rust's byte order
/// only when a character above U+FFFF meets one in U+E000..U+FFFF.
pub fn string_cmp(a: &str, b: &str) -> Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}

/// `HashMap.hash()`: the high half of the hash folded into the low half before masking.
pub fn hash_spread(h: i32) -> u32 {
    let h = h as u32;
    h ^ (h >> 16)
}

/// The table size of a `new HashMap<>()` after `n` distinct insertions: 16 buckets, doubling
/// whenever the size exceeds three quarters of the table.
pub fn hash_map_capacity(n: usize) -> usize {
    let mut cap = 16usize;
    while n > cap / 4 * 3 {
        cap *= 2;
    }
    cap
}

/// The iteration order of a `new HashMap<>()` (or `HashSet`) into which `items` (distinct
/// keys) were put in this order: bucket by bucket, a bucket in insertion order (a resize splits
/// a bucket without reordering it). Not modelled: a bucket turning into a tree, which needs
/// more than 8 keys colliding in one bucket of a table of 64 or more.
pub fn hash_map_order<T>(items: Vec<T>, hash: impl Fn(&T) -> i32) -> Vec<T> {
    let mask = hash_map_capacity(items.len()) - 1;
    let mut keyed: Vec<(usize, T)> = items
        .into_iter()
        .map(|t| ((hash_spread(hash(&t)) as usize) & mask, t))
        .collect();
    // Stable: keys of one bucket keep their insertion order.
    keyed.sort_by_key(|(bucket, _)| *bucket);
    keyed.into_iter().map(|(_, t)| t).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_hash_is_javas() {
        // "...".hashCode() printed by Java.
        assert_eq!(string_hash(""), 0);
        assert_eq!(string_hash("a"), 97);
        assert_eq!(string_hash("topic"), 110_546_223);
        assert_eq!(string_hash("polygenelubricants"), i32::MIN);
        assert_eq!(string_hash("😀emoji"), -1233692477);
    }

    #[test]
    fn hash_map_order_follows_buckets_then_insertion() {
        // "a" (97) and "q" (113) share bucket 1 of 16; "b" is in bucket 2.
        let order = |keys: Vec<&'static str>| hash_map_order(keys, |k| string_hash(k));
        assert_eq!(order(vec!["b", "q", "a"]), vec!["q", "a", "b"]);
        assert_eq!(order(vec!["b", "a", "q"]), vec!["a", "q", "b"]);
        assert_eq!(hash_map_capacity(12), 16);
        assert_eq!(hash_map_capacity(13), 32);
    }

    #[test]
    fn string_cmp_is_utf16_order() {
        assert_eq!(string_cmp("a", "b"), Ordering::Less);
        // U+1F600 starts with the surrogate 0xD83D, below U+FFFD; in UTF-8 it is above.
        assert_eq!(string_cmp("\u{1F600}", "\u{FFFD}"), Ordering::Less);
        assert_eq!("\u{1F600}".cmp("\u{FFFD}"), Ordering::Greater);
    }
}

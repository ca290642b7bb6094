//! The orders Java's collections impose, which the assignors' output depends on: where a Java
//! assignor iterates a `HashMap`/`HashSet` of strings, its result follows the map's bucket order,
//! and where it sorts strings it compares UTF-16 code units. Reproducing both makes Strom's
//! assignment equal to Java's for the same input, not merely equally balanced.

use std::cmp::Ordering;

/// Java's `String.hashCode()`: the polynomial hash over UTF-16 code units, wrapping.
pub(crate) fn string_hash(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)))
}

/// Java's `String.compareTo`: UTF-16 code unit order. It differs from Rust's byte order only
/// when a string mixes characters above U+FFFF with ones in U+E000..U+FFFF.
pub(crate) fn compare(a: &str, b: &str) -> Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}

/// The iteration order of a `java.util.HashMap` (or `HashSet`) created with the default
/// capacity, into which `keys` (distinct) were inserted in the given order.
///
/// The table starts at 16 buckets and doubles whenever the size exceeds 3/4 of it; iteration
/// walks the buckets in index order, and a bucket's entries stay in insertion order (a resize
/// splits a bucket without reordering it). The bucket of a key is its hash with the high half
/// folded into the low (`h ^ (h >>> 16)`) masked to the table size. Not modelled: a bucket
/// turning into a tree, which needs 8 keys colliding in one bucket of a table of 64 or more.
pub(crate) fn hash_map_order<'a>(keys: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let keys: Vec<&str> = keys.into_iter().collect();
    let mut capacity: usize = 16;
    while keys.len() > capacity / 4 * 3 {
        capacity *= 2;
    }
    let mask = (capacity - 1) as u32;
    let bucket = |k: &str| {
        let h = string_hash(k) as u32;
        (h ^ (h >> 16)) & mask
    };
    let mut ordered = keys;
    // Stable: keys of one bucket keep their insertion order.
    ordered.sort_by_key(|k| bucket(k));
    ordered
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_hash_matches_java() {
        // Values of "...".hashCode() in Java.
        assert_eq!(string_hash(""), 0);
        assert_eq!(string_hash("a"), 97);
        assert_eq!(string_hash("topic"), 110_546_223);
        assert_eq!(string_hash("polygenelubricants"), i32::MIN);
    }

    #[test]
    fn hash_map_order_follows_buckets_then_insertion() {
        // "a" (97 -> bucket 1) and "q" (113 -> bucket 1 too: 113 & 15 = 1) share a bucket;
        // "b" is in bucket 2.
        assert_eq!(hash_map_order(["b", "q", "a"]), vec!["q", "a", "b"]);
        assert_eq!(hash_map_order(["b", "a", "q"]), vec!["a", "q", "b"]);
    }

    #[test]
    fn compare_is_utf16_order() {
        assert_eq!(compare("a", "b"), Ordering::Less);
        // U+FFFD is one unit 0xFFFD; U+1F600 starts with the surrogate 0xD83D, which is smaller.
        assert_eq!(compare("\u{1F600}", "\u{FFFD}"), Ordering::Less);
        assert_eq!("\u{1F600}".cmp("\u{FFFD}"), Ordering::Greater);
    }
}

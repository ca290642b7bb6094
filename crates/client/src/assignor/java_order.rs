//! The orders Java's collections impose, which the assignors' output depends on (where a Java
//! assignor iterates a `HashMap` of strings, its result follows the map's bucket order; where it
//! sorts strings it compares UTF-16 code units). The Java behaviour itself is
//! `strom_protocol::java`, shared with the sticky assignors and the group coordinator.

pub(crate) use strom_protocol::java::string_cmp as compare;
use strom_protocol::java::{hash_map_order as java_hash_map_order, string_hash};

/// The iteration order of a default `java.util.HashMap<String, _>` into which `keys` (distinct)
/// were inserted in the given order.
pub(crate) fn hash_map_order<'a>(keys: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    java_hash_map_order(keys.into_iter().collect(), |k| string_hash(k))
}

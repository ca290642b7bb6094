//! A map keyed by file name that iterates in the order of Java's `HashMap<String, _>`, so that
//! problems found in several files are reported in the order Kafka's tool reports them.

/// Insertion-ordered storage; [`JavaHashMap::iter`] yields Java's `HashMap` iteration order
/// (bucket by bucket, insertion order inside a bucket, default capacity 16 and load factor 0.75).
pub(crate) struct JavaHashMap<V> {
    entries: Vec<(String, V)>,
}

impl<V> Default for JavaHashMap<V> {
    fn default() -> Self {
        Self {
            entries: Vec::new(),
        }
    }
}

use strom_protocol::java::string_hash as java_string_hash;

impl<V: Default> JavaHashMap<V> {
    /// `computeIfAbsent(key, k -> new V())`.
    pub fn entry(&mut self, key: &str) -> &mut V {
        let i = match self.entries.iter().position(|(k, _)| k == key) {
            Some(i) => i,
            None => {
                self.entries.push((key.to_string(), V::default()));
                self.entries.len() - 1
            }
        };
        &mut self.entries[i].1
    }
}

impl<V> JavaHashMap<V> {
    pub fn iter(&self) -> impl Iterator<Item = (&str, &V)> {
        let mut cap: usize = 16;
        while self.entries.len() * 4 > cap * 3 {
            cap *= 2;
        }
        let mut order: Vec<(usize, usize)> = self
            .entries
            .iter()
            .enumerate()
            .map(|(i, (k, _))| {
                let h = java_string_hash(k) as u32;
                (((h ^ (h >> 16)) as usize) & (cap - 1), i)
            })
            .collect();
        order.sort();
        order
            .into_iter()
            .map(move |(_, i)| (self.entries[i].0.as_str(), &self.entries[i].1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_hash_matches_java() {
        assert_eq!(java_string_hash(""), 0);
        assert_eq!(java_string_hash("a"), 97);
        assert_eq!(java_string_hash("hello"), 99162322);
    }
}

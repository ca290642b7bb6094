//! [`OffsetMap`]: the cleaner's key -> latest offset map, laid out as Kafka's `SkimpyOffsetMap`.
//!
//! One flat byte array of `memory / 24` slots; a slot is the 16-byte MD5 of a key followed by
//! the big-endian offset (8 bytes), all zero when free. Keys are never stored, only hashed, so
//! two keys with the same MD5 share a slot (Kafka accepts that chance too). Probing is Kafka's:
//! attempt `a` reads the big-endian i32 at byte `min(a, 12)` of the hash plus `max(0, a - 12)`,
//! so the first 13 attempts try different parts of the hash and later ones walk linearly.

use std::sync::OnceLock;

/// Bytes of an MD5 digest.
const HASH_SIZE: usize = 16;
/// Bytes of one slot: the hash and the offset.
pub const BYTES_PER_ENTRY: usize = HASH_SIZE + 8;
/// Kafka's `log.cleaner.io.buffer.load.factor` default: the share of slots the cleaner fills
/// before it stops mapping (probing degrades as the table fills).
pub const DEFAULT_LOAD_FACTOR: f64 = 0.9;

pub struct OffsetMap {
    bytes: Vec<u8>,
    slots: usize,
    entries: usize,
    lookups: u64,
    probes: u64,
    /// The latest offset put or declared mapped (`updateLatestOffset`); -1 when cleared.
    last_offset: i64,
    load_factor: f64,
}

impl std::fmt::Debug for OffsetMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OffsetMap")
            .field("slots", &self.slots)
            .field("entries", &self.entries)
            .field("latest_offset", &self.last_offset)
            .finish()
    }
}

impl OffsetMap {
    /// A map using `memory_bytes` (Kafka: `log.cleaner.dedupe.buffer.size` divided among the
    /// cleaner threads), filled up to [`DEFAULT_LOAD_FACTOR`].
    pub fn new(memory_bytes: usize) -> Self {
        Self::with_load_factor(memory_bytes, DEFAULT_LOAD_FACTOR)
    }

    /// [`Self::new`] with `log.cleaner.io.buffer.load.factor` given.
    pub fn with_load_factor(memory_bytes: usize, load_factor: f64) -> Self {
        let slots = memory_bytes / BYTES_PER_ENTRY;
        Self {
            bytes: vec![0; slots * BYTES_PER_ENTRY],
            slots,
            entries: 0,
            lookups: 0,
            probes: 0,
            last_offset: -1,
            load_factor,
        }
    }

    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Entries the cleaner puts before it calls the map full (Kafka's `maxDesiredMapSize`).
    pub fn max_desired_size(&self) -> usize {
        (self.slots as f64 * self.load_factor) as usize
    }

    pub fn load_factor(&self) -> f64 {
        self.load_factor
    }

    /// Distinct keys in the map.
    pub fn size(&self) -> usize {
        self.entries
    }

    /// The share of slots in use (Kafka's `utilization`).
    pub fn utilization(&self) -> f64 {
        if self.slots == 0 {
            0.0
        } else {
            self.entries as f64 / self.slots as f64
        }
    }

    /// Extra probes per lookup (Kafka's `collisionRate`).
    pub fn collision_rate(&self) -> f64 {
        (self.probes as f64 - self.lookups as f64) / self.lookups as f64
    }

    pub fn latest_offset(&self) -> i64 {
        self.last_offset
    }

    /// Declares everything up to `offset` mapped, with or without keys there.
    pub fn update_latest_offset(&mut self, offset: i64) {
        self.last_offset = offset;
    }

    pub fn clear(&mut self) {
        self.entries = 0;
        self.lookups = 0;
        self.probes = 0;
        self.last_offset = -1;
        self.bytes.fill(0);
    }

    /// Maps `key` to `offset` (replacing its older offset). Panics when a new key meets a full
    /// map, as Kafka's does; the cleaner stops at [`Self::max_desired_size`] first.
    pub fn put(&mut self, key: &[u8], offset: i64) {
        assert!(
            self.entries < self.slots,
            "attempted to add a new entry to a full offset map, entries: {}, slots: {}",
            self.entries,
            self.slots
        );
        self.lookups += 1;
        let hash = md5(key);
        let mut attempt = 0;
        let mut pos = self.position_of(&hash, attempt);
        while !self.is_empty(pos) {
            if self.bytes[pos..pos + HASH_SIZE] == hash {
                self.set_offset(pos, offset);
                self.last_offset = offset;
                return;
            }
            attempt += 1;
            pos = self.position_of(&hash, attempt);
        }
        self.bytes[pos..pos + HASH_SIZE].copy_from_slice(&hash);
        self.set_offset(pos, offset);
        self.last_offset = offset;
        self.entries += 1;
    }

    /// The offset mapped for `key`, or -1.
    pub fn get(&mut self, key: &[u8]) -> i64 {
        self.lookups += 1;
        let hash = md5(key);
        // Once probing walks linearly, `slots` more attempts have seen every slot.
        let max_attempts = self.slots + HASH_SIZE - 4;
        let mut attempt = 0;
        loop {
            if attempt >= max_attempts {
                return -1;
            }
            let pos = self.position_of(&hash, attempt);
            if self.is_empty(pos) {
                return -1;
            }
            attempt += 1;
            if self.bytes[pos..pos + HASH_SIZE] == hash {
                let at = pos + HASH_SIZE;
                return i64::from_be_bytes(self.bytes[at..at + 8].try_into().expect("8 bytes"));
            }
        }
    }

    fn set_offset(&mut self, pos: usize, offset: i64) {
        self.bytes[pos + HASH_SIZE..pos + BYTES_PER_ENTRY].copy_from_slice(&offset.to_be_bytes());
    }

    fn is_empty(&self, pos: usize) -> bool {
        self.bytes[pos..pos + BYTES_PER_ENTRY]
            .iter()
            .all(|&b| b == 0)
    }

    fn position_of(&mut self, hash: &[u8; HASH_SIZE], attempt: usize) -> usize {
        let at = attempt.min(HASH_SIZE - 4);
        let word = i32::from_be_bytes(hash[at..at + 4].try_into().expect("4 bytes"));
        let probe = word.wrapping_add(attempt.saturating_sub(HASH_SIZE - 4) as i32);
        // Kafka's `Utils.abs`: i32::MIN maps to 0.
        let abs = if probe == i32::MIN { 0 } else { probe.abs() };
        self.probes += 1;
        (abs as usize % self.slots) * BYTES_PER_ENTRY
    }
}

fn md5_constants() -> &'static [u32; 64] {
    static K: OnceLock<[u32; 64]> = OnceLock::new();
    K.get_or_init(|| {
        let mut k = [0u32; 64];
        for (i, v) in k.iter_mut().enumerate() {
            // RFC 1321: floor(|sin(i + 1)| * 2^32).
            *v = (((i + 1) as f64).sin().abs() * 4_294_967_296.0) as u32;
        }
        k
    })
}

/// MD5 (RFC 1321), the digest Kafka's map hashes keys with.
pub fn md5(data: &[u8]) -> [u8; 16] {
    const S: [u32; 64] = [
        7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 5, 9, 14, 20, 5, 9, 14, 20, 5,
        9, 14, 20, 5, 9, 14, 20, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 6, 10,
        15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21,
    ];
    let k = md5_constants();
    let mut state: [u32; 4] = [0x6745_2301, 0xefcd_ab89, 0x98ba_dcfe, 0x1032_5476];
    let bit_len = (data.len() as u64).wrapping_mul(8);
    // The padded last block(s) on the stack: one hash per key read, no allocation.
    let whole = data.len() / 64 * 64;
    let rest = &data[whole..];
    let mut tail = [0u8; 128];
    tail[..rest.len()].copy_from_slice(rest);
    tail[rest.len()] = 0x80;
    let tail_len = if rest.len() < 56 { 64 } else { 128 };
    tail[tail_len - 8..tail_len].copy_from_slice(&bit_len.to_le_bytes());
    for block in data[..whole]
        .chunks_exact(64)
        .chain(tail[..tail_len].chunks_exact(64))
    {
        let mut m = [0u32; 16];
        for (i, w) in m.iter_mut().enumerate() {
            *w = u32::from_le_bytes(block[i * 4..i * 4 + 4].try_into().expect("4 bytes"));
        }
        let [mut a, mut b, mut c, mut d] = state;
        for i in 0..64 {
            let (f, g) = match i / 16 {
                0 => ((b & c) | (!b & d), i),
                1 => ((d & b) | (!d & c), (5 * i + 1) % 16),
                2 => (b ^ c ^ d, (3 * i + 5) % 16),
                _ => (c ^ (b | !d), (7 * i) % 16),
            };
            let rotated = a
                .wrapping_add(f)
                .wrapping_add(k[i])
                .wrapping_add(m[g])
                .rotate_left(S[i]);
            a = d;
            d = c;
            c = b;
            b = b.wrapping_add(rotated);
        }
        state[0] = state[0].wrapping_add(a);
        state[1] = state[1].wrapping_add(b);
        state[2] = state[2].wrapping_add(c);
        state[3] = state[3].wrapping_add(d);
    }
    let mut out = [0u8; 16];
    for (i, s) in state.iter().enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&s.to_le_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    #[test]
    fn md5_test_vectors() {
        assert_eq!(hex(&md5(b"")), "d41d8cd98f00b204e9800998ecf8427e");
        assert_eq!(hex(&md5(b"abc")), "900150983cd24fb0d6963f7d28e17f72");
        assert_eq!(
            hex(&md5(b"The quick brown fox jumps over the lazy dog")),
            "9e107d9d372bb6826bd81d3542a419d6"
        );
        let long = vec![b'a'; 1000];
        assert_eq!(hex(&md5(&long)), "cabe45dcc9ae5b66ba86600cca6b8ba8");
        // Lengths around the padding boundary (55, 56, 64 bytes).
        assert_eq!(hex(&md5(&[b'a'; 55])), "ef1772b6dff9a122358552954ad0df65");
        assert_eq!(hex(&md5(&[b'a'; 56])), "3b0c8ac703f828b04c6c197006d17218");
        assert_eq!(hex(&md5(&[b'a'; 64])), "014842d480b571495a4a0363793f7367");
    }

    #[test]
    fn basic_put_get_overwrite_clear() {
        // Kafka's OffsetMapTest: 24 bytes per entry, keys map to their latest offset.
        let mut map = OffsetMap::new(10 * 1024);
        assert_eq!(map.slots(), 10 * 1024 / 24);
        for i in 0..100i64 {
            map.put(format!("{i}").as_bytes(), i);
        }
        for i in 0..100i64 {
            assert_eq!(map.get(format!("{i}").as_bytes()), i);
        }
        map.put(b"7", 700);
        assert_eq!(map.get(b"7"), 700);
        assert_eq!(map.size(), 100);
        assert_eq!(map.latest_offset(), 700);
        assert_eq!(map.get(b"absent"), -1);
        map.clear();
        assert_eq!(map.size(), 0);
        assert_eq!(map.latest_offset(), -1);
        assert_eq!(map.get(b"7"), -1);
    }

    #[test]
    fn fills_every_slot_and_still_finds_all() {
        // A full map must still answer (linear probing visits every slot).
        let mut map = OffsetMap::new(64 * BYTES_PER_ENTRY);
        for i in 0..64i64 {
            map.put(format!("key-{i}").as_bytes(), i + 1);
        }
        assert_eq!(map.size(), 64);
        assert!((map.utilization() - 1.0).abs() < f64::EPSILON);
        for i in 0..64i64 {
            assert_eq!(map.get(format!("key-{i}").as_bytes()), i + 1);
        }
        assert_eq!(map.get(b"not there"), -1);
        assert_eq!(map.max_desired_size(), 57);
    }
}

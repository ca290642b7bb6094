//! [`OffsetMap`]: the cleaner's key -> latest offset map, with the behaviour of Kafka's
//! `SkimpyOffsetMap`.
//!
//! Keys are never stored, only their 16-byte MD5 with the offset (24 bytes an entry), so two
//! keys with the same MD5 share an entry (Kafka accepts that chance too). The map has Kafka's
//! number of slots (`memory / 24`), is full at the same number of entries and answers the same
//! offsets; only the layout differs. Kafka's map is one `memory`-sized array probed at random
//! places: with the default 128 MiB buffer every lookup of a clean of a few hundred thousand
//! keys misses the CPU caches and the TLB. This one is a linear-probing table sized to the
//! keys actually mapped (at most half full while it grows), so a typical clean's map fits
//! the caches; it grows up to exactly `slots` entries (then filled up to the load factor as
//! Kafka's), so it never holds more than the configured memory.

/// Bytes of an MD5 digest.
const HASH_SIZE: usize = 16;
/// Bytes of one slot: the hash and the offset.
pub const BYTES_PER_ENTRY: usize = HASH_SIZE + 8;
/// Kafka's `log.cleaner.io.buffer.load.factor` default: the share of slots the cleaner fills
/// before it stops mapping (probing degrades as the table fills).
pub const DEFAULT_LOAD_FACTOR: f64 = 0.9;
/// Slots of a fresh table; it doubles as keys come.
const INITIAL_CAPACITY: usize = 1024;

/// One entry: the key's MD5 as two words, and its offset (-1: free).
#[derive(Clone, Copy)]
struct Slot {
    h0: u64,
    h1: u64,
    offset: i64,
}

const FREE: Slot = Slot {
    h0: 0,
    h1: 0,
    offset: -1,
};

pub struct OffsetMap {
    table: Vec<Slot>,
    /// Kafka's slot count: the most entries the memory holds.
    slots: usize,
    entries: usize,
    lookups: u64,
    probes: u64,
    /// The latest offset put or declared mapped (`updateLatestOffset`); -1 when cleared.
    last_offset: i64,
    load_factor: f64,
    bits: LatestBits,
}

/// Which offsets put into the map are still their key's latest, one bit per offset from the
/// first put on, so that the rewrite answers "is this record the latest of its key" for the
/// offsets it mapped without hashing the key again (the same answer as `offset >= get(key)`:
/// puts come in offset order, so a record put is the latest of its key unless a later put of
/// the same hash superseded it). Bounded by `max_bits`; out of order puts switch it off.
#[derive(Debug, Default)]
struct LatestBits {
    /// Set for each offset put.
    put: Vec<u64>,
    /// Set for each offset put and later superseded by a put of the same hash.
    superseded: Vec<u64>,
    /// The first offset put; -1 before.
    base: i64,
    /// The last offset put; -1 before.
    last_put: i64,
    max_bits: u64,
    off: bool,
}

impl LatestBits {
    fn new(max_bits: u64) -> Self {
        Self {
            base: -1,
            last_put: -1,
            max_bits,
            ..Self::default()
        }
    }

    fn clear(&mut self) {
        self.put.clear();
        self.superseded.clear();
        self.base = -1;
        self.last_put = -1;
        self.off = false;
    }

    /// The bit index of `offset`, if covered.
    fn index(&self, offset: i64) -> Option<usize> {
        let i = offset.checked_sub(self.base)?;
        (self.base >= 0 && i >= 0 && (i as u64) < self.max_bits).then_some(i as usize)
    }

    fn on_put(&mut self, offset: i64, previous: Option<i64>) {
        if self.off {
            return;
        }
        if offset <= self.last_put {
            self.off = true;
            return;
        }
        self.last_put = offset;
        if self.base < 0 {
            self.base = offset;
        }
        if let Some(i) = previous.and_then(|p| self.index(p)) {
            if let Some(w) = self.superseded.get_mut(i / 64) {
                *w |= 1 << (i % 64);
            }
        }
        if let Some(i) = self.index(offset) {
            let words = i / 64 + 1;
            if self.put.len() < words {
                self.put.resize(words, 0);
                self.superseded.resize(words, 0);
            }
            self.put[i / 64] |= 1 << (i % 64);
        }
    }

    /// Whether the record put at `offset` is still its key's latest; `None` if `offset` was
    /// not put (or is not covered).
    fn is_latest(&self, offset: i64) -> Option<bool> {
        if self.off {
            return None;
        }
        let i = self.index(offset)?;
        let bit = 1u64 << (i % 64);
        let was_put = self.put.get(i / 64).is_some_and(|w| w & bit != 0);
        was_put.then(|| self.superseded[i / 64] & bit == 0)
    }
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

/// An MD5 as the map keeps it: two little-endian words.
pub(crate) type KeyHash = (u64, u64);

fn words(h: &[u8; 16]) -> KeyHash {
    (
        u64::from_le_bytes(h[..8].try_into().expect("8 bytes")),
        u64::from_le_bytes(h[8..].try_into().expect("8 bytes")),
    )
}

/// The MD5 of `key` as two little-endian words.
fn hash_words(key: &[u8]) -> KeyHash {
    words(&md5(key))
}

/// The hashes of `keys`, appended to `out` in order. MD5 is one long dependency chain per
/// key; four keys of one block each are hashed together, lane by lane, so that the CPU runs
/// the four chains side by side.
pub(crate) fn hash_keys(keys: &[&[u8]], out: &mut Vec<KeyHash>) {
    let mut chunks = keys.chunks_exact(4);
    for c in &mut chunks {
        if c.iter().all(|k| k.len() < 56) {
            for h in md5_x4([c[0], c[1], c[2], c[3]]) {
                out.push(words(&h));
            }
        } else {
            out.extend(c.iter().map(|k| hash_words(k)));
        }
    }
    out.extend(chunks.remainder().iter().map(|k| hash_words(k)));
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
            table: vec![FREE; slots.min(INITIAL_CAPACITY)],
            slots,
            entries: 0,
            lookups: 0,
            probes: 0,
            last_offset: -1,
            load_factor,
            // Two bitmaps of `memory / 4` bits each: a sixteenth more memory at most (33.5 M
            // offsets for 128 MiB); offsets beyond are answered by hashing the key again.
            bits: LatestBits::new(memory_bytes as u64 / 4),
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

    /// Empties the map, keeping its table (the next clean of the log likely needs as much).
    pub fn clear(&mut self) {
        self.entries = 0;
        self.lookups = 0;
        self.probes = 0;
        self.last_offset = -1;
        self.table.fill(FREE);
        self.bits.clear();
    }

    /// The first slot to probe for `h0`: multiply-shift, for any table size.
    fn home(&self, h0: u64) -> usize {
        ((h0 as u128 * self.table.len() as u128) >> 64) as usize
    }

    /// The slot holding the hash, or the free slot where it would go.
    fn find(&mut self, h0: u64, h1: u64) -> usize {
        let len = self.table.len();
        let mut pos = self.home(h0);
        // The table always has a free slot or holds the hash: `put` keeps `entries < slots`
        // until the table has all `slots` slots, and refuses a new key then.
        for _ in 0..len {
            self.probes += 1;
            let s = &self.table[pos];
            if s.offset < 0 || (s.h0 == h0 && s.h1 == h1) {
                return pos;
            }
            pos += 1;
            if pos == len {
                pos = 0;
            }
        }
        usize::MAX
    }

    /// Doubles the table (up to `slots`), rehashing the entries.
    fn grow(&mut self) {
        let new_len = (self.table.len() * 2).min(self.slots);
        let old = std::mem::replace(&mut self.table, vec![FREE; new_len]);
        for s in old.into_iter().filter(|s| s.offset >= 0) {
            let mut pos = self.home(s.h0);
            while self.table[pos].offset >= 0 {
                pos += 1;
                if pos == new_len {
                    pos = 0;
                }
            }
            self.table[pos] = s;
        }
    }

    /// Maps `key` to `offset` (replacing its older offset). Panics when a new key meets a full
    /// map, as Kafka's does; the cleaner stops at [`Self::max_desired_size`] first.
    pub fn put(&mut self, key: &[u8], offset: i64) {
        let (h0, h1) = hash_words(key);
        self.put_hash((h0, h1), offset);
    }

    /// [`Self::put`] of a key hashed by [`hash_keys`].
    pub(crate) fn put_hash(&mut self, (h0, h1): KeyHash, offset: i64) {
        self.lookups += 1;
        let mut pos = self.find(h0, h1);
        let previous =
            (pos != usize::MAX && self.table[pos].offset >= 0).then(|| self.table[pos].offset);
        self.bits.on_put(offset, previous);
        if previous.is_none() {
            // A new key.
            assert!(
                self.entries < self.slots,
                "attempted to add a new entry to a full offset map, entries: {}, slots: {}",
                self.entries,
                self.slots
            );
            if self.table.len() < self.slots && (self.entries + 1) * 2 > self.table.len() {
                self.grow();
                pos = self.find(h0, h1);
            }
            self.entries += 1;
        }
        self.table[pos] = Slot { h0, h1, offset };
        self.last_offset = offset;
    }

    /// Whether the record put at `offset` is still the latest of its key (`offset >=
    /// get(key)`), without the key; `None` when the map cannot tell (not put, or not covered).
    pub(crate) fn is_latest_put(&self, offset: i64) -> Option<bool> {
        self.bits.is_latest(offset)
    }

    /// The offset mapped for `key`, or -1.
    pub fn get(&mut self, key: &[u8]) -> i64 {
        self.get_hash(hash_words(key))
    }

    /// [`Self::get`] of a key hashed by [`hash_keys`].
    pub(crate) fn get_hash(&mut self, (h0, h1): KeyHash) -> i64 {
        self.lookups += 1;
        match self.find(h0, h1) {
            usize::MAX => -1,
            pos => self.table[pos].offset,
        }
    }
}

/// MD5 (RFC 1321), the digest Kafka's map hashes keys with. Unrolled, constants inline, the
/// padded last block(s) on the stack: one hash per key read, no allocation.
pub fn md5(data: &[u8]) -> [u8; 16] {
    let mut state: [u32; 4] = [0x6745_2301, 0xefcd_ab89, 0x98ba_dcfe, 0x1032_5476];
    let bit_len = (data.len() as u64).wrapping_mul(8);
    let whole = data.len() / 64 * 64;
    for block in data[..whole].chunks_exact(64) {
        md5_block(&mut state, block);
    }
    let rest = &data[whole..];
    let mut tail = [0u8; 128];
    tail[..rest.len()].copy_from_slice(rest);
    tail[rest.len()] = 0x80;
    let tail_len = if rest.len() < 56 { 64 } else { 128 };
    tail[tail_len - 8..tail_len].copy_from_slice(&bit_len.to_le_bytes());
    for block in tail[..tail_len].chunks_exact(64) {
        md5_block(&mut state, block);
    }
    let mut out = [0u8; 16];
    for (i, s) in state.iter().enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&s.to_le_bytes());
    }
    out
}

/// The MD5s of four keys of at most 55 bytes each (one block), computed lane by lane.
fn md5_x4(keys: [&[u8]; 4]) -> [[u8; 16]; 4] {
    // w[i][lane]: word i of each lane's padded block.
    let mut w = [[0u32; 4]; 16];
    for (lane, key) in keys.iter().enumerate() {
        let mut block = [0u8; 64];
        block[..key.len()].copy_from_slice(key);
        block[key.len()] = 0x80;
        block[56..].copy_from_slice(&((key.len() as u64) * 8).to_le_bytes());
        for (i, word) in w.iter_mut().enumerate() {
            word[lane] = u32::from_le_bytes(block[i * 4..i * 4 + 4].try_into().expect("4 bytes"));
        }
    }
    let mut a = [0x6745_2301u32; 4];
    let mut b = [0xefcd_ab89u32; 4];
    let mut c = [0x98ba_dcfeu32; 4];
    let mut d = [0x1032_5476u32; 4];
    macro_rules! step4 {
        ($f:ident, $a:ident, $b:ident, $c:ident, $d:ident, $g:expr, $k:expr, $s:expr) => {
            for l in 0..4 {
                $a[l] = $b[l].wrapping_add(
                    $a[l]
                        .wrapping_add($f($b[l], $c[l], $d[l]))
                        .wrapping_add($k)
                        .wrapping_add(w[$g][l])
                        .rotate_left($s),
                );
            }
        };
    }
    step4!(f0, a, b, c, d, 0, 0xd76aa478, 7);
    step4!(f0, d, a, b, c, 1, 0xe8c7b756, 12);
    step4!(f0, c, d, a, b, 2, 0x242070db, 17);
    step4!(f0, b, c, d, a, 3, 0xc1bdceee, 22);
    step4!(f0, a, b, c, d, 4, 0xf57c0faf, 7);
    step4!(f0, d, a, b, c, 5, 0x4787c62a, 12);
    step4!(f0, c, d, a, b, 6, 0xa8304613, 17);
    step4!(f0, b, c, d, a, 7, 0xfd469501, 22);
    step4!(f0, a, b, c, d, 8, 0x698098d8, 7);
    step4!(f0, d, a, b, c, 9, 0x8b44f7af, 12);
    step4!(f0, c, d, a, b, 10, 0xffff5bb1, 17);
    step4!(f0, b, c, d, a, 11, 0x895cd7be, 22);
    step4!(f0, a, b, c, d, 12, 0x6b901122, 7);
    step4!(f0, d, a, b, c, 13, 0xfd987193, 12);
    step4!(f0, c, d, a, b, 14, 0xa679438e, 17);
    step4!(f0, b, c, d, a, 15, 0x49b40821, 22);
    step4!(f1, a, b, c, d, 1, 0xf61e2562, 5);
    step4!(f1, d, a, b, c, 6, 0xc040b340, 9);
    step4!(f1, c, d, a, b, 11, 0x265e5a51, 14);
    step4!(f1, b, c, d, a, 0, 0xe9b6c7aa, 20);
    step4!(f1, a, b, c, d, 5, 0xd62f105d, 5);
    step4!(f1, d, a, b, c, 10, 0x02441453, 9);
    step4!(f1, c, d, a, b, 15, 0xd8a1e681, 14);
    step4!(f1, b, c, d, a, 4, 0xe7d3fbc8, 20);
    step4!(f1, a, b, c, d, 9, 0x21e1cde6, 5);
    step4!(f1, d, a, b, c, 14, 0xc33707d6, 9);
    step4!(f1, c, d, a, b, 3, 0xf4d50d87, 14);
    step4!(f1, b, c, d, a, 8, 0x455a14ed, 20);
    step4!(f1, a, b, c, d, 13, 0xa9e3e905, 5);
    step4!(f1, d, a, b, c, 2, 0xfcefa3f8, 9);
    step4!(f1, c, d, a, b, 7, 0x676f02d9, 14);
    step4!(f1, b, c, d, a, 12, 0x8d2a4c8a, 20);
    step4!(f2, a, b, c, d, 5, 0xfffa3942, 4);
    step4!(f2, d, a, b, c, 8, 0x8771f681, 11);
    step4!(f2, c, d, a, b, 11, 0x6d9d6122, 16);
    step4!(f2, b, c, d, a, 14, 0xfde5380c, 23);
    step4!(f2, a, b, c, d, 1, 0xa4beea44, 4);
    step4!(f2, d, a, b, c, 4, 0x4bdecfa9, 11);
    step4!(f2, c, d, a, b, 7, 0xf6bb4b60, 16);
    step4!(f2, b, c, d, a, 10, 0xbebfbc70, 23);
    step4!(f2, a, b, c, d, 13, 0x289b7ec6, 4);
    step4!(f2, d, a, b, c, 0, 0xeaa127fa, 11);
    step4!(f2, c, d, a, b, 3, 0xd4ef3085, 16);
    step4!(f2, b, c, d, a, 6, 0x04881d05, 23);
    step4!(f2, a, b, c, d, 9, 0xd9d4d039, 4);
    step4!(f2, d, a, b, c, 12, 0xe6db99e5, 11);
    step4!(f2, c, d, a, b, 15, 0x1fa27cf8, 16);
    step4!(f2, b, c, d, a, 2, 0xc4ac5665, 23);
    step4!(f3, a, b, c, d, 0, 0xf4292244, 6);
    step4!(f3, d, a, b, c, 7, 0x432aff97, 10);
    step4!(f3, c, d, a, b, 14, 0xab9423a7, 15);
    step4!(f3, b, c, d, a, 5, 0xfc93a039, 21);
    step4!(f3, a, b, c, d, 12, 0x655b59c3, 6);
    step4!(f3, d, a, b, c, 3, 0x8f0ccc92, 10);
    step4!(f3, c, d, a, b, 10, 0xffeff47d, 15);
    step4!(f3, b, c, d, a, 1, 0x85845dd1, 21);
    step4!(f3, a, b, c, d, 8, 0x6fa87e4f, 6);
    step4!(f3, d, a, b, c, 15, 0xfe2ce6e0, 10);
    step4!(f3, c, d, a, b, 6, 0xa3014314, 15);
    step4!(f3, b, c, d, a, 13, 0x4e0811a1, 21);
    step4!(f3, a, b, c, d, 4, 0xf7537e82, 6);
    step4!(f3, d, a, b, c, 11, 0xbd3af235, 10);
    step4!(f3, c, d, a, b, 2, 0x2ad7d2bb, 15);
    step4!(f3, b, c, d, a, 9, 0xeb86d391, 21);
    let mut out = [[0u8; 16]; 4];
    for (lane, o) in out.iter_mut().enumerate() {
        let state = [
            a[lane].wrapping_add(0x6745_2301),
            b[lane].wrapping_add(0xefcd_ab89),
            c[lane].wrapping_add(0x98ba_dcfe),
            d[lane].wrapping_add(0x1032_5476),
        ];
        for (i, s) in state.iter().enumerate() {
            o[i * 4..i * 4 + 4].copy_from_slice(&s.to_le_bytes());
        }
    }
    out
}

#[inline(always)]
fn f0(b: u32, c: u32, d: u32) -> u32 {
    d ^ (b & (c ^ d))
}
#[inline(always)]
fn f1(b: u32, c: u32, d: u32) -> u32 {
    c ^ (d & (b ^ c))
}
#[inline(always)]
fn f2(b: u32, c: u32, d: u32) -> u32 {
    b ^ c ^ d
}
#[inline(always)]
fn f3(b: u32, c: u32, d: u32) -> u32 {
    c ^ (b | !d)
}

#[inline(always)]
fn md5_block(state: &mut [u32; 4], block: &[u8]) {
    let mut m = [0u32; 16];
    for (i, w) in m.iter_mut().enumerate() {
        *w = u32::from_le_bytes(block[i * 4..i * 4 + 4].try_into().expect("4 bytes"));
    }
    let [mut a, mut b, mut c, mut d] = *state;
    macro_rules! step {
        ($f:ident, $a:ident, $b:ident, $c:ident, $d:ident, $m:expr, $k:expr, $s:expr) => {
            $a = $b.wrapping_add(
                $a.wrapping_add($f($b, $c, $d))
                    .wrapping_add($k)
                    .wrapping_add($m)
                    .rotate_left($s),
            );
        };
    }
    step!(f0, a, b, c, d, m[0], 0xd76aa478, 7);
    step!(f0, d, a, b, c, m[1], 0xe8c7b756, 12);
    step!(f0, c, d, a, b, m[2], 0x242070db, 17);
    step!(f0, b, c, d, a, m[3], 0xc1bdceee, 22);
    step!(f0, a, b, c, d, m[4], 0xf57c0faf, 7);
    step!(f0, d, a, b, c, m[5], 0x4787c62a, 12);
    step!(f0, c, d, a, b, m[6], 0xa8304613, 17);
    step!(f0, b, c, d, a, m[7], 0xfd469501, 22);
    step!(f0, a, b, c, d, m[8], 0x698098d8, 7);
    step!(f0, d, a, b, c, m[9], 0x8b44f7af, 12);
    step!(f0, c, d, a, b, m[10], 0xffff5bb1, 17);
    step!(f0, b, c, d, a, m[11], 0x895cd7be, 22);
    step!(f0, a, b, c, d, m[12], 0x6b901122, 7);
    step!(f0, d, a, b, c, m[13], 0xfd987193, 12);
    step!(f0, c, d, a, b, m[14], 0xa679438e, 17);
    step!(f0, b, c, d, a, m[15], 0x49b40821, 22);
    step!(f1, a, b, c, d, m[1], 0xf61e2562, 5);
    step!(f1, d, a, b, c, m[6], 0xc040b340, 9);
    step!(f1, c, d, a, b, m[11], 0x265e5a51, 14);
    step!(f1, b, c, d, a, m[0], 0xe9b6c7aa, 20);
    step!(f1, a, b, c, d, m[5], 0xd62f105d, 5);
    step!(f1, d, a, b, c, m[10], 0x02441453, 9);
    step!(f1, c, d, a, b, m[15], 0xd8a1e681, 14);
    step!(f1, b, c, d, a, m[4], 0xe7d3fbc8, 20);
    step!(f1, a, b, c, d, m[9], 0x21e1cde6, 5);
    step!(f1, d, a, b, c, m[14], 0xc33707d6, 9);
    step!(f1, c, d, a, b, m[3], 0xf4d50d87, 14);
    step!(f1, b, c, d, a, m[8], 0x455a14ed, 20);
    step!(f1, a, b, c, d, m[13], 0xa9e3e905, 5);
    step!(f1, d, a, b, c, m[2], 0xfcefa3f8, 9);
    step!(f1, c, d, a, b, m[7], 0x676f02d9, 14);
    step!(f1, b, c, d, a, m[12], 0x8d2a4c8a, 20);
    step!(f2, a, b, c, d, m[5], 0xfffa3942, 4);
    step!(f2, d, a, b, c, m[8], 0x8771f681, 11);
    step!(f2, c, d, a, b, m[11], 0x6d9d6122, 16);
    step!(f2, b, c, d, a, m[14], 0xfde5380c, 23);
    step!(f2, a, b, c, d, m[1], 0xa4beea44, 4);
    step!(f2, d, a, b, c, m[4], 0x4bdecfa9, 11);
    step!(f2, c, d, a, b, m[7], 0xf6bb4b60, 16);
    step!(f2, b, c, d, a, m[10], 0xbebfbc70, 23);
    step!(f2, a, b, c, d, m[13], 0x289b7ec6, 4);
    step!(f2, d, a, b, c, m[0], 0xeaa127fa, 11);
    step!(f2, c, d, a, b, m[3], 0xd4ef3085, 16);
    step!(f2, b, c, d, a, m[6], 0x04881d05, 23);
    step!(f2, a, b, c, d, m[9], 0xd9d4d039, 4);
    step!(f2, d, a, b, c, m[12], 0xe6db99e5, 11);
    step!(f2, c, d, a, b, m[15], 0x1fa27cf8, 16);
    step!(f2, b, c, d, a, m[2], 0xc4ac5665, 23);
    step!(f3, a, b, c, d, m[0], 0xf4292244, 6);
    step!(f3, d, a, b, c, m[7], 0x432aff97, 10);
    step!(f3, c, d, a, b, m[14], 0xab9423a7, 15);
    step!(f3, b, c, d, a, m[5], 0xfc93a039, 21);
    step!(f3, a, b, c, d, m[12], 0x655b59c3, 6);
    step!(f3, d, a, b, c, m[3], 0x8f0ccc92, 10);
    step!(f3, c, d, a, b, m[10], 0xffeff47d, 15);
    step!(f3, b, c, d, a, m[1], 0x85845dd1, 21);
    step!(f3, a, b, c, d, m[8], 0x6fa87e4f, 6);
    step!(f3, d, a, b, c, m[15], 0xfe2ce6e0, 10);
    step!(f3, c, d, a, b, m[6], 0xa3014314, 15);
    step!(f3, b, c, d, a, m[13], 0x4e0811a1, 21);
    step!(f3, a, b, c, d, m[4], 0xf7537e82, 6);
    step!(f3, d, a, b, c, m[11], 0xbd3af235, 10);
    step!(f3, c, d, a, b, m[2], 0x2ad7d2bb, 15);
    step!(f3, b, c, d, a, m[9], 0xeb86d391, 21);
    state[0] = state[0].wrapping_add(a);
    state[1] = state[1].wrapping_add(b);
    state[2] = state[2].wrapping_add(c);
    state[3] = state[3].wrapping_add(d);
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
    fn four_lane_md5_matches_one_at_a_time() {
        let keys: Vec<Vec<u8>> = (0..=60usize)
            .map(|n| (0..n).map(|i| (i * 31 + n) as u8).collect())
            .collect();
        let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
        let mut got = Vec::new();
        hash_keys(&refs, &mut got);
        let want: Vec<KeyHash> = refs.iter().map(|k| hash_words(k)).collect();
        assert_eq!(got, want);
        assert_eq!(md5_x4([b"", b"abc", &[b'a'; 55], b"key-1"])[1], md5(b"abc"));
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

    #[test]
    fn growing_table_answers_as_a_plain_map() {
        // The table starts small and doubles up to exactly `slots` (not a power of two here),
        // then fills to the load factor; every answer matches a plain map's.
        for slots in [1usize, 7, 1000, 5000, 30_011] {
            let mut map = OffsetMap::new(slots * BYTES_PER_ENTRY);
            let mut reference = std::collections::HashMap::new();
            let mut x = 12345u64;
            for offset in 0..(slots as i64 * 3) {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let key = format!("k{}", (x >> 33) % (slots as u64 * 2));
                if !reference.contains_key(&key) && map.size() >= map.max_desired_size() {
                    continue;
                }
                map.put(key.as_bytes(), offset);
                reference.insert(key, offset);
            }
            assert_eq!(map.size(), reference.len());
            assert!(map.table.len() <= slots);
            for (k, &o) in &reference {
                assert_eq!(map.get(k.as_bytes()), o);
            }
            assert_eq!(map.get(b"absent"), -1);
        }
    }

    #[test]
    fn latest_put_bits_answer_as_get() {
        let mut map = OffsetMap::new(1 << 16);
        let keys = ["a", "b", "a", "c", "b", "a"];
        for (i, k) in keys.iter().enumerate() {
            map.put(k.as_bytes(), 10 + i as i64 * 2);
        }
        for (i, k) in keys.iter().enumerate() {
            let o = 10 + i as i64 * 2;
            assert_eq!(
                map.is_latest_put(o),
                Some(o >= map.get(k.as_bytes())),
                "{o}"
            );
            // Offsets not put: unknown.
            assert_eq!(map.is_latest_put(o + 1), None);
        }
        assert_eq!(map.is_latest_put(9), None);
        // Out of order puts: the bits no longer answer.
        map.put(b"z", 5);
        assert_eq!(map.is_latest_put(10), None);
        map.clear();
        map.put(b"a", 3);
        assert_eq!(map.is_latest_put(3), Some(true));
        // Beyond the covered offsets: unknown, and a supersede of a covered one still counts.
        let mut small = OffsetMap::new(64 * BYTES_PER_ENTRY);
        small.put(b"x", 0);
        small.put(b"y", 10_000);
        small.put(b"x", 20_000);
        assert_eq!(small.is_latest_put(0), Some(false));
        assert_eq!(small.is_latest_put(10_000), None);
        assert_eq!(small.get(b"y"), 10_000);
    }

    #[test]
    fn new_key_in_a_full_map_panics_as_kafka() {
        let mut map = OffsetMap::new(3 * BYTES_PER_ENTRY);
        for k in [&b"a"[..], b"b", b"c"] {
            map.put(k, 1);
        }
        map.put(b"b", 2);
        assert_eq!(map.get(b"b"), 2);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| map.put(b"d", 3)));
        assert!(r.is_err());
    }
}

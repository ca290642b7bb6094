//! Hand-made record batches for tests of what a broker does with hostile or odd input: every
//! header field and every record varint can be set to what no real producer writes (wrong
//! counts, offset deltas, timestamps, sizes, codecs). Real producers' batches come from
//! [`crate::testing`] (kafka-protocol's encoder); this is for the cases an encoder refuses.

use crate::compression::RecordsWriter;

/// One v2 record (Kafka's `DefaultRecord` layout) with every field settable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CraftedRecord {
    pub attributes: u8,
    pub timestamp_delta: i64,
    pub offset_delta: i32,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    /// Added to the record's true body size when its size varint is written.
    pub size_adjust: i32,
}

impl CraftedRecord {
    /// A keyed record `k{i}` = `v{i}` at offset delta `i`, timestamp delta `ts_delta`.
    pub fn new(i: i32, ts_delta: i64) -> Self {
        Self {
            attributes: 0,
            timestamp_delta: ts_delta,
            offset_delta: i,
            key: Some(format!("k{i}").into_bytes()),
            value: Some(format!("v{i}").into_bytes()),
            headers: Vec::new(),
            size_adjust: 0,
        }
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut body = vec![self.attributes];
        put_varint(&mut body, self.timestamp_delta);
        put_varint(&mut body, i64::from(self.offset_delta));
        put_bytes(&mut body, self.key.as_deref());
        put_bytes(&mut body, self.value.as_deref());
        put_varint(&mut body, self.headers.len() as i64);
        for (k, v) in &self.headers {
            put_bytes(&mut body, Some(k));
            put_bytes(&mut body, v.as_deref());
        }
        put_varint(out, body.len() as i64 + i64::from(self.size_adjust));
        out.extend_from_slice(&body);
    }
}

/// A zig-zag varint (Kafka's `ByteUtils.writeVarlong`, which covers varints too).
pub fn put_varint(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

fn put_bytes(out: &mut Vec<u8>, b: Option<&[u8]>) {
    match b {
        None => put_varint(out, -1),
        Some(b) => {
            put_varint(out, b.len() as i64);
            out.extend_from_slice(b);
        }
    }
}

/// One batch; `None` fields are what a correct producer would write.
#[derive(Debug, Clone)]
pub struct CraftedBatch {
    pub base_offset: i64,
    pub partition_leader_epoch: i32,
    pub magic: i8,
    /// Attributes bits 3-6 (timestamp type, transactional, control, delete horizon); the codec
    /// bits come from `codec`.
    pub attributes: i16,
    pub codec: i16,
    pub last_offset_delta: Option<i32>,
    pub base_timestamp: i64,
    /// Default: base timestamp + the largest record timestamp delta.
    pub max_timestamp: Option<i64>,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    /// Default: the number of records.
    pub count: Option<i32>,
    pub records: Vec<CraftedRecord>,
    /// Bytes after the records, inside the (possibly compressed) records section.
    pub trailing: Vec<u8>,
    /// Store a CRC that does not match.
    pub bad_crc: bool,
}

impl CraftedBatch {
    /// `n` keyed records, timestamps `base_timestamp`, +1, +2, ...
    pub fn new(base_timestamp: i64, n: i32) -> Self {
        Self {
            base_offset: 0,
            partition_leader_epoch: -1,
            magic: 2,
            attributes: 0,
            codec: 0,
            last_offset_delta: None,
            base_timestamp,
            max_timestamp: None,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            count: None,
            records: (0..n)
                .map(|i| CraftedRecord::new(i, i64::from(i)))
                .collect(),
            trailing: Vec::new(),
            bad_crc: false,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut section = Vec::new();
        for r in &self.records {
            r.encode(&mut section);
        }
        section.extend_from_slice(&self.trailing);
        let mut w = RecordsWriter::new(self.codec, None, vec![0; 61]).expect("codec");
        std::io::Write::write_all(&mut w, &section).expect("compress");
        let mut b = w.finish().expect("compress");
        let n = self.records.len() as i32;
        let max_delta = self.records.iter().map(|r| r.timestamp_delta).max();
        let max_ts = self
            .max_timestamp
            .unwrap_or(self.base_timestamp + max_delta.unwrap_or(0));
        let length = (b.len() - 12) as i32;
        b[0..8].copy_from_slice(&self.base_offset.to_be_bytes());
        b[8..12].copy_from_slice(&length.to_be_bytes());
        b[12..16].copy_from_slice(&self.partition_leader_epoch.to_be_bytes());
        b[16] = self.magic as u8;
        let attributes = (self.attributes & !0x07) | (self.codec & 0x07);
        b[21..23].copy_from_slice(&attributes.to_be_bytes());
        let delta = self.last_offset_delta.unwrap_or((n - 1).max(0));
        b[23..27].copy_from_slice(&delta.to_be_bytes());
        b[27..35].copy_from_slice(&self.base_timestamp.to_be_bytes());
        b[35..43].copy_from_slice(&max_ts.to_be_bytes());
        b[43..51].copy_from_slice(&self.producer_id.to_be_bytes());
        b[51..53].copy_from_slice(&self.producer_epoch.to_be_bytes());
        b[53..57].copy_from_slice(&self.base_sequence.to_be_bytes());
        b[57..61].copy_from_slice(&self.count.unwrap_or(n).to_be_bytes());
        let mut crc = crc32c::crc32c(&b[21..]);
        if self.bad_crc {
            crc ^= 1;
        }
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::BatchView;
    use crate::records::{RecordBatchDecoder, TimestampType};

    #[test]
    fn a_plain_crafted_batch_is_what_kafka_protocol_decodes() {
        for codec in 0..=4 {
            let mut c = CraftedBatch::new(1_000, 3);
            c.codec = codec;
            c.records[1].headers = vec![(b"h".to_vec(), Some(b"x".to_vec()))];
            c.records[2].key = None;
            let b = c.encode();
            BatchView::parse(&b).unwrap().validate().unwrap();
            let mut bytes = bytes::Bytes::from(b);
            let set = RecordBatchDecoder::decode(&mut bytes).unwrap();
            let recs = set.records;
            assert_eq!(recs.len(), 3, "codec {codec}");
            assert_eq!(recs[2].timestamp, 1_002);
            assert_eq!(recs[2].offset, 2);
            assert!(recs[2].key.is_none());
            assert_eq!(recs[1].headers.len(), 1);
            assert_eq!(recs[0].timestamp_type, TimestampType::Creation);
        }
    }
}

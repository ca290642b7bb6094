//! Record-level parsing of a v2 batch with the semantics (and error messages) of Kafka's
//! `DefaultRecordBatch` iterators and `DefaultRecord.readFrom`, including decompression.

use super::log::Header;
use super::{abort, Res};

/// One record as Kafka's `Record` interface shows it.
pub(crate) struct Rec {
    pub offset: i64,
    pub timestamp: i64,
    pub sequence: i32,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub header_keys: Vec<Vec<u8>>,
}

/// `DefaultRecordBatch.incrementSequence` with Java's int arithmetic.
pub(crate) fn increment_sequence(seq: i32, inc: i32) -> i32 {
    if seq > i32::MAX.wrapping_sub(inc) {
        inc.wrapping_sub(i32::MAX.wrapping_sub(seq)).wrapping_sub(1)
    } else {
        seq.wrapping_add(inc)
    }
}

/// Why a read from a `ByteBuffer` failed.
enum BufErr {
    /// `BufferUnderflowException` (its message is `null`).
    Underflow,
    /// `IllegalArgumentException` with its message.
    IllegalArgument(String),
    /// `InvalidRecordException` with its message.
    Invalid(String),
}

/// A `ByteBuffer` over `data[..limit]`.
struct JBuf<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> JBuf<'a> {
    fn remaining(&self) -> usize {
        self.data.len() - self.pos
    }
    fn get(&mut self) -> Result<u8, BufErr> {
        let b = *self.data.get(self.pos).ok_or(BufErr::Underflow)?;
        self.pos += 1;
        Ok(b)
    }
    /// `ByteUtils.readVarint`.
    fn varint(&mut self) -> Result<i32, BufErr> {
        let mut value: i32 = 0;
        let mut i = 0;
        loop {
            let b = self.get()? as i32;
            if b & 0x80 == 0 {
                value |= b << i;
                break;
            }
            value |= (b & 0x7f) << i;
            i += 7;
            if i > 28 {
                return Err(BufErr::IllegalArgument(format!(
                    "Varint is too long, the most significant bit in the 5th byte is set, converted value: {value:x}"
                )));
            }
        }
        Ok(((value as u32) >> 1) as i32 ^ -(value & 1))
    }
    /// `ByteUtils.readVarlong`.
    fn varlong(&mut self) -> Result<i64, BufErr> {
        let mut value: i64 = 0;
        let mut i = 0;
        loop {
            let b = self.get()? as i64;
            if b & 0x80 == 0 {
                value |= b << i;
                break;
            }
            value |= (b & 0x7f) << i;
            i += 7;
            if i > 63 {
                return Err(BufErr::IllegalArgument(format!(
                    "Varlong is too long, most significant bit in the 10th byte is set, converted value: {value:x}"
                )));
            }
        }
        Ok(((value as u64) >> 1) as i64 ^ -(value & 1))
    }
    /// `slice(); limit(n); position(position + n)`: the next `n` bytes.
    fn take(&mut self, n: i32) -> Result<Vec<u8>, BufErr> {
        if n < 0 || n as usize > self.remaining() {
            return Err(BufErr::IllegalArgument(format!(
                "newLimit > capacity: ({n} > {})",
                self.remaining()
            )));
        }
        let v = self.data[self.pos..self.pos + n as usize].to_vec();
        self.pos += n as usize;
        Ok(v)
    }
}

struct Base {
    offset: i64,
    timestamp: i64,
    sequence: i32,
    log_append_time: Option<i64>,
}

/// The body of `DefaultRecord.readFrom(ByteBuffer, sizeInBytes, sizeOfBodyInBytes, ...)`.
fn read_body(buf: &mut JBuf<'_>, size_of_body: i32, base: &Base) -> Result<Rec, BufErr> {
    let start = buf.pos;
    let _attributes = buf.get()?;
    let ts_delta = buf.varlong()?;
    let timestamp = base
        .log_append_time
        .unwrap_or(base.timestamp.wrapping_add(ts_delta));
    let offset_delta = buf.varint()?;
    let offset = base.offset.wrapping_add(offset_delta as i64);
    let sequence = if base.sequence >= 0 {
        increment_sequence(base.sequence, offset_delta)
    } else {
        -1
    };
    let key_size = buf.varint()?;
    let key = if key_size >= 0 {
        Some(buf.take(key_size)?)
    } else {
        None
    };
    let value_size = buf.varint()?;
    let value = if value_size >= 0 {
        Some(buf.take(value_size)?)
    } else {
        None
    };
    let num_headers = buf.varint()?;
    if num_headers < 0 {
        return Err(BufErr::Invalid(format!(
            "Found invalid number of record headers {num_headers}"
        )));
    }
    if num_headers as usize > buf.remaining() {
        return Err(BufErr::Invalid(format!(
            "Found invalid number of record headers. {num_headers} is larger than the remaining size of the buffer"
        )));
    }
    let mut header_keys = Vec::with_capacity(num_headers as usize);
    for _ in 0..num_headers {
        let key_size = buf.varint()?;
        if key_size < 0 {
            return Err(BufErr::Invalid(format!(
                "Invalid negative header key size {key_size}"
            )));
        }
        header_keys.push(buf.take(key_size)?);
        let value_size = buf.varint()?;
        if value_size >= 0 {
            buf.take(value_size)?;
        }
    }
    let read = (buf.pos - start) as i64;
    if read != size_of_body as i64 {
        return Err(BufErr::Invalid(format!(
            "Invalid record size: expected to read {size_of_body} bytes in record payload, but instead read {read}"
        )));
    }
    Ok(Rec {
        offset,
        timestamp,
        sequence,
        key,
        value,
        header_keys,
    })
}

fn body_error(e: BufErr) -> String {
    match e {
        BufErr::Invalid(m) => m,
        BufErr::Underflow | BufErr::IllegalArgument(_) => {
            "Found invalid record structure".to_string()
        }
    }
}

/// The compression codec's name, or Kafka's exception for ids 5-7.
pub(crate) fn codec_name(id: i16) -> Result<&'static str, String> {
    match id {
        0 => Ok("none"),
        1 => Ok("gzip"),
        2 => Ok("snappy"),
        3 => Ok("lz4"),
        4 => Ok("zstd"),
        n => Err(format!("Unknown compression type id: {n}")),
    }
}

fn decompress(codec: i16, data: &[u8]) -> Result<Vec<u8>, String> {
    strom_protocol::compression::decompress(codec, data).map_err(|e| e.to_string())
}

/// Iterates the records of the batch whose bytes are `batch` (exactly `size` bytes from the
/// file) as Kafka's `DefaultRecordBatch.iterator()` does: nothing for a count of 0; records of
/// an uncompressed batch one by one (a bad record stops the run after the good ones before it
/// were handed out); a compressed batch is decoded whole before any record is handed out.
pub(crate) fn for_each_record(
    batch: &[u8],
    h: &Header,
    mut f: impl FnMut(Rec) -> Res<()>,
) -> Res<()> {
    // `count()` reads the header field from the batch's own buffer.
    let Some(count_bytes) = batch.get(57..61) else {
        return abort(format!("Index 57 out of bounds for length {}", batch.len()));
    };
    let count = i32::from_be_bytes(count_bytes.try_into().expect("4 bytes"));
    if count == 0 {
        return Ok(());
    }
    let codec = match codec_name(h.attributes & 0x07) {
        Ok(_) => h.attributes & 0x07,
        Err(m) => return abort(m),
    };
    if count < 0 {
        return abort(format!(
            "Found invalid record count {count} in magic v{} batch",
            h.magic
        ));
    }
    let base = Base {
        offset: h.base_offset,
        timestamp: h.base_timestamp,
        sequence: h.base_sequence,
        log_append_time: if h.attributes & 0x08 != 0 {
            Some(h.max_timestamp)
        } else {
            None
        },
    };
    if codec == 0 {
        let mut buf = JBuf {
            data: batch,
            pos: 61,
        };
        for i in 0..count {
            let size_of_body = match buf.varint() {
                Ok(s) => s,
                Err(BufErr::Underflow) => return abort("null"),
                Err(BufErr::IllegalArgument(m)) | Err(BufErr::Invalid(m)) => return abort(m),
            };
            if (buf.remaining() as i64) < size_of_body as i64 {
                return abort(format!(
                    "Invalid record size: expected {size_of_body} bytes in record payload, but instead the buffer has only {} remaining bytes.",
                    buf.remaining()
                ));
            }
            let rec = read_body(&mut buf, size_of_body, &base);
            let rec = match rec {
                Ok(r) => r,
                Err(e) => return abort(body_error(e)),
            };
            if i == count - 1 && buf.remaining() > 0 {
                return abort("Incorrect declared batch size, records still remaining in file");
            }
            f(rec)?;
        }
        return Ok(());
    }
    let data = match decompress(codec, batch.get(61..).unwrap_or(&[])) {
        Ok(d) => d,
        Err(m) => return abort(m),
    };
    let mut stream = JBuf {
        data: &data,
        pos: 0,
    };
    let mut recs = Vec::new();
    for i in 0..count {
        let size_of_body = match stream.varint() {
            Ok(s) => s,
            Err(BufErr::Underflow) => {
                return abort("Incorrect declared batch size, premature EOF reached")
            }
            Err(BufErr::IllegalArgument(m)) | Err(BufErr::Invalid(m)) => return abort(m),
        };
        if size_of_body < 0 {
            return abort(format!("capacity < 0: ({size_of_body} < 0)"));
        }
        if stream.remaining() < size_of_body as usize {
            return abort("Incorrect declared batch size, premature EOF reached");
        }
        let body = &data[stream.pos..stream.pos + size_of_body as usize];
        stream.pos += size_of_body as usize;
        let mut buf = JBuf { data: body, pos: 0 };
        match read_body(&mut buf, size_of_body, &base) {
            Ok(r) => recs.push(r),
            Err(e) => return abort(body_error(e)),
        }
        if i == count - 1 && stream.remaining() > 0 {
            return abort("Incorrect declared batch size, records still remaining in file");
        }
    }
    for r in recs {
        f(r)?;
    }
    Ok(())
}

//! The primitive encodings the generated record code is written in (Kafka's `Readable` /
//! `Writable`). kafka-protocol has the same primitives, but its `Encoder`/`Decoder` traits are
//! crate-private, so they cannot be called from here; these are the few the record schemas need,
//! with every read bounds-checked so bad bytes give a [`RecordError`], never a panic.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use uuid::Uuid;

use super::RecordError;

/// A tagged field whose tag the schema does not know: Kafka keeps such fields and writes them
/// back, so a record read and written again by a newer broker loses nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawTaggedField {
    pub tag: u32,
    pub data: Bytes,
}

fn need(buf: &Bytes, n: usize) -> Result<(), RecordError> {
    if buf.remaining() < n {
        return Err(RecordError::Truncated {
            needed: n,
            remaining: buf.remaining(),
        });
    }
    Ok(())
}

macro_rules! fixed {
    ($put:ident, $get:ident, $t:ty, $bput:ident, $bget:ident) => {
        pub fn $put(buf: &mut BytesMut, v: $t) {
            buf.$bput(v);
        }
        pub fn $get(buf: &mut Bytes) -> Result<$t, RecordError> {
            need(buf, std::mem::size_of::<$t>())?;
            Ok(buf.$bget())
        }
    };
}

fixed!(put_i8, get_i8, i8, put_i8, get_i8);
fixed!(put_i16, get_i16, i16, put_i16, get_i16);
fixed!(put_i32, get_i32, i32, put_i32, get_i32);
fixed!(put_i64, get_i64, i64, put_i64, get_i64);
fixed!(put_f64, get_f64, f64, put_f64, get_f64);

pub fn put_bool(buf: &mut BytesMut, v: bool) {
    buf.put_u8(u8::from(v));
}

pub fn get_bool(buf: &mut Bytes) -> Result<bool, RecordError> {
    need(buf, 1)?;
    Ok(buf.get_u8() != 0)
}

pub fn put_uuid(buf: &mut BytesMut, v: &Uuid) {
    buf.put_slice(v.as_bytes());
}

pub fn get_uuid(buf: &mut Bytes) -> Result<Uuid, RecordError> {
    need(buf, 16)?;
    let mut b = [0u8; 16];
    buf.copy_to_slice(&mut b);
    Ok(Uuid::from_bytes(b))
}

pub fn put_uvarint(buf: &mut BytesMut, mut v: u32) {
    while v >= 0x80 {
        buf.put_u8((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    buf.put_u8(v as u8);
}

/// Kafka's `readUnsignedVarint`: at most 5 bytes; a longer run is malformed.
pub fn get_uvarint(buf: &mut Bytes) -> Result<u32, RecordError> {
    let mut v: u32 = 0;
    for i in 0..5 {
        need(buf, 1)?;
        let b = buf.get_u8();
        v |= u32::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(RecordError::Malformed("varint is too long".into()))
}

/// A length or element count: `None` is null. Non-flexible: int32 (-1 null); flexible:
/// unsigned varint of length + 1 (0 null).
pub fn put_len(buf: &mut BytesMut, flexible: bool, len: Option<usize>) -> Result<(), RecordError> {
    let too_long = || RecordError::Malformed("array or byte string too long".into());
    match (flexible, len) {
        (false, None) => put_i32(buf, -1),
        (false, Some(n)) => put_i32(buf, i32::try_from(n).map_err(|_| too_long())?),
        (true, None) => put_uvarint(buf, 0),
        (true, Some(n)) => {
            let n = u32::try_from(n)
                .ok()
                .and_then(|n| n.checked_add(1))
                .ok_or_else(too_long)?;
            put_uvarint(buf, n)
        }
    }
    Ok(())
}

/// Reads a length written by [`put_len`]; a length past the bytes left is refused before
/// anything is allocated (every element takes at least one byte).
pub fn get_len(buf: &mut Bytes, flexible: bool) -> Result<Option<usize>, RecordError> {
    let n: i64 = if flexible {
        i64::from(get_uvarint(buf)?) - 1
    } else {
        i64::from(get_i32(buf)?)
    };
    if n < 0 {
        return Ok(None);
    }
    let n = n as usize;
    need(buf, n)?;
    Ok(Some(n))
}

pub fn put_str(buf: &mut BytesMut, flexible: bool, s: Option<&str>) -> Result<(), RecordError> {
    if flexible {
        put_len(buf, true, s.map(str::len))?;
    } else {
        match s {
            None => put_i16(buf, -1),
            Some(s) => put_i16(
                buf,
                i16::try_from(s.len()).map_err(|_| {
                    RecordError::Malformed(format!("string of {} bytes is too long", s.len()))
                })?,
            ),
        }
    }
    if let Some(s) = s {
        buf.put_slice(s.as_bytes());
    }
    Ok(())
}

pub fn get_nstr(buf: &mut Bytes, flexible: bool) -> Result<Option<String>, RecordError> {
    let len = if flexible {
        get_len(buf, true)?
    } else {
        let n = get_i16(buf)?;
        if n < 0 {
            None
        } else {
            need(buf, n as usize)?;
            Some(n as usize)
        }
    };
    match len {
        None => Ok(None),
        Some(n) => {
            let b = buf.split_to(n);
            String::from_utf8(b.to_vec())
                .map(Some)
                .map_err(|_| RecordError::Malformed("string is not valid UTF-8".into()))
        }
    }
}

pub fn get_str(
    buf: &mut Bytes,
    flexible: bool,
    field: &'static str,
) -> Result<String, RecordError> {
    get_nstr(buf, flexible)?.ok_or(RecordError::NullField(field, -1))
}

pub fn put_bytes(buf: &mut BytesMut, flexible: bool, b: Option<&Bytes>) -> Result<(), RecordError> {
    put_len(buf, flexible, b.map(Bytes::len))?;
    if let Some(b) = b {
        buf.put_slice(b);
    }
    Ok(())
}

pub fn get_nbytes(buf: &mut Bytes, flexible: bool) -> Result<Option<Bytes>, RecordError> {
    Ok(get_len(buf, flexible)?.map(|n| buf.split_to(n)))
}

pub fn get_bytes(
    buf: &mut Bytes,
    flexible: bool,
    field: &'static str,
) -> Result<Bytes, RecordError> {
    get_nbytes(buf, flexible)?.ok_or(RecordError::NullField(field, -1))
}

/// The presence marker of a nullable struct: in a tagged field an unsigned varint (0 null,
/// 1 present), elsewhere an int8 (-1 null, 1 present), as Kafka's generator writes them.
pub fn put_null_struct(buf: &mut BytesMut, tagged: bool) -> Result<(), RecordError> {
    if tagged {
        put_uvarint(buf, 0)
    } else {
        put_i8(buf, -1)
    }
    Ok(())
}

pub fn put_present_struct(buf: &mut BytesMut, tagged: bool) -> Result<(), RecordError> {
    if tagged {
        put_uvarint(buf, 1)
    } else {
        put_i8(buf, 1)
    }
    Ok(())
}

pub fn get_struct_marker(buf: &mut Bytes, tagged: bool) -> Result<bool, RecordError> {
    if tagged {
        Ok(get_uvarint(buf)? > 0)
    } else {
        Ok(get_i8(buf)? >= 0)
    }
}

/// Writes the tagged-field section: the count, then known and unknown fields merged in tag
/// order (unknown ones in the order they were read, each before the first known tag above it).
pub fn put_tagged(
    buf: &mut BytesMut,
    known: Vec<(u32, BytesMut)>,
    unknown: &[RawTaggedField],
) -> Result<(), RecordError> {
    let count = known.len() + unknown.len();
    put_uvarint(
        buf,
        u32::try_from(count)
            .map_err(|_| RecordError::Malformed("too many tagged fields".into()))?,
    );
    let mut raw = unknown.iter().peekable();
    for (tag, data) in known {
        while let Some(r) = raw.next_if(|r| r.tag < tag) {
            put_raw(buf, r.tag, &r.data)?;
        }
        put_raw(buf, tag, &data)?;
    }
    for r in raw {
        put_raw(buf, r.tag, &r.data)?;
    }
    Ok(())
}

fn put_raw(buf: &mut BytesMut, tag: u32, data: &[u8]) -> Result<(), RecordError> {
    put_uvarint(buf, tag);
    put_uvarint(
        buf,
        u32::try_from(data.len())
            .map_err(|_| RecordError::Malformed("tagged field too long".into()))?,
    );
    buf.put_slice(data);
    Ok(())
}

/// Reads the tagged-field section into (tag, bytes) pairs.
pub fn get_tagged(buf: &mut Bytes) -> Result<Vec<(u32, Bytes)>, RecordError> {
    let n = get_uvarint(buf)? as usize;
    // Each tagged field takes at least two bytes (tag and size).
    need(buf, n.saturating_mul(2))?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let tag = get_uvarint(buf)?;
        let size = get_uvarint(buf)? as usize;
        need(buf, size)?;
        out.push((tag, buf.split_to(size)));
    }
    Ok(out)
}

/// JSON in the form Kafka's generated `*JsonConverter.write` gives it (Jackson's compact
/// output: fields in schema order, no spaces), which `kafka-dump-log --offsets-decoder` prints.
pub mod json {
    use std::fmt::Write;

    /// A JSON string literal with Jackson's escapes (quote, backslash, control characters).
    pub fn string(s: &str) -> String {
        let mut out = String::with_capacity(s.len() + 2);
        out.push('"');
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                c if (c as u32) < 0x20 => {
                    let _ = write!(out, "\\u{:04X}", c as u32);
                }
                c => out.push(c),
            }
        }
        out.push('"');
        out
    }

    fn base64(data: &[u8], url: bool, pad: bool) -> String {
        let table: &[u8; 64] = if url {
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
        } else {
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
        };
        let mut out = String::new();
        for chunk in data.chunks(3) {
            let b = [
                chunk[0],
                *chunk.get(1).unwrap_or(&0),
                *chunk.get(2).unwrap_or(&0),
            ];
            let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
            for i in 0..4 {
                if i <= chunk.len() {
                    out.push(table[((n >> (18 - 6 * i)) & 63) as usize] as char);
                } else if pad {
                    out.push('=');
                }
            }
        }
        out
    }

    /// Bytes as Jackson writes a binary node: standard base64 with padding.
    pub fn bytes(b: &[u8]) -> String {
        format!("\"{}\"", base64(b, false, true))
    }

    /// A topic id as Kafka's `Uuid.toString`: URL-safe base64 without padding.
    pub fn uuid(u: &uuid::Uuid) -> String {
        format!("\"{}\"", base64(u.as_bytes(), true, false))
    }

    /// An `f64` as Java's `Double.toString` writes the common cases.
    pub fn f64(v: f64) -> String {
        if v.fract() == 0.0 && v.abs() < 1e7 {
            format!("{v:.1}")
        } else {
            format!("{v}")
        }
    }
}

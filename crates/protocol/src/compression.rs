//! The one way Strom decompresses a batch's records section (the codecs are kafka-protocol's):
//! the leader's validation of produced batches, the log cleaner and `strom dump-log` all use it.
//! A codec fed hostile bytes may panic inside its library; the panic is caught and answered as
//! a failed decompression, so bad input never takes a broker thread down.
//!
//! [`decompress`] returns the whole section; [`RecordsReader`] streams it (the leader's
//! `LogValidator` walks a compressed batch's records with a decoder window of memory, never the
//! whole decompressed section, as Kafka's streaming record iterators do), and [`RecordsWriter`]
//! compresses a section as it is written, at a topic's `compression.*.level`.

use kafka_protocol::compression::{Decompressor, Gzip, Lz4, Snappy, Zstd};
use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum DecompressError {
    /// Attributes bits 0-2 name no codec (5-7).
    #[error("Unknown compression type id: {0}")]
    UnknownCodec(i16),
    /// Kafka's `KafkaException` text (its cause stays in its stack trace).
    #[error("Failed to decompress record stream")]
    Failed,
}

/// The records section `data` of a batch compressed with codec `codec` (attributes bits 0-2;
/// 0 = none, returned as is).
pub fn decompress(codec: i16, data: &[u8]) -> Result<Vec<u8>, DecompressError> {
    if codec == 0 {
        return Ok(data.to_vec());
    }
    if !(1..=4).contains(&codec) {
        return Err(DecompressError::UnknownCodec(codec));
    }
    let mut input = data;
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match codec {
        1 => Gzip::decompress(&mut input, |b| Ok(b.to_vec())),
        2 => Snappy::decompress(&mut input, |b| Ok(b.to_vec())),
        3 => Lz4::decompress(&mut input, |b| Ok(b.to_vec())),
        _ => Zstd::decompress(&mut input, |b| Ok(b.to_vec())),
    }));
    match result {
        Ok(Ok(b)) => Ok(b),
        Ok(Err(_)) | Err(_) => Err(DecompressError::Failed),
    }
}

/// Kafka's codec ids (attributes bits 0-2).
pub const GZIP: i16 = 1;
pub const SNAPPY: i16 = 2;
pub const LZ4: i16 = 3;
pub const ZSTD: i16 = 4;

/// snappy-java's stream header (`SnappyCodec`): magic, version 1, compatible version 1. Kafka's
/// snappy batches are in this framing; a section without it is one raw snappy block (as
/// snappy-java's `SnappyInputStream` falls back to, and as librdkafka writes).
const SNAPPY_MAGIC: &[u8; 8] = b"\x82SNAPPY\x00";
const SNAPPY_HEADER: &[u8; 16] = b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01";
/// snappy-java's default block size, which Kafka's producer writes.
const SNAPPY_BLOCK: usize = 32 * 1024;

/// The most a snappy block of `compressed` bytes can expand to: a 3-byte copy emits at most 64
/// bytes. A block claiming more is corrupt, and is refused before anything is allocated.
fn snappy_bound(compressed: usize) -> usize {
    compressed.saturating_mul(22).saturating_add(32)
}

fn failed(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string())
}

/// Runs a codec call, answering a panic inside its library as an I/O error.
fn guarded<T>(f: impl FnOnce() -> std::io::Result<T>) -> std::io::Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .unwrap_or_else(|_| Err(failed("codec panicked")))
}

/// snappy-java's framed stream (`SnappyInputStream`): after the header, blocks of a 4-byte
/// big-endian length and that many raw-snappy bytes. Holds one decompressed block at a time.
struct SnappyReader<'a> {
    rest: &'a [u8],
    block: Vec<u8>,
    pos: usize,
    framed: bool,
}

impl SnappyReader<'_> {
    fn next_block(&mut self) -> std::io::Result<bool> {
        if self.rest.is_empty() {
            return Ok(false);
        }
        let compressed = if self.framed {
            if self.rest.len() < 4 {
                return Err(failed("truncated snappy block length"));
            }
            let len = u32::from_be_bytes(self.rest[..4].try_into().expect("4 bytes")) as usize;
            let body = self
                .rest
                .get(4..4 + len)
                .ok_or_else(|| failed("truncated snappy block"))?;
            self.rest = &self.rest[4 + len..];
            body
        } else {
            std::mem::take(&mut self.rest)
        };
        let len = snap::raw::decompress_len(compressed).map_err(|_| failed("snappy length"))?;
        if len > snappy_bound(compressed.len()) {
            return Err(failed("snappy block claims more than it can hold"));
        }
        self.block.clear();
        self.block.resize(len, 0);
        let n = snap::raw::Decoder::new()
            .decompress(compressed, &mut self.block)
            .map_err(|_| failed("corrupt snappy block"))?;
        self.block.truncate(n);
        self.pos = 0;
        Ok(true)
    }
}

impl std::io::Read for SnappyReader<'_> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        while self.pos == self.block.len() {
            if !self.next_block()? {
                return Ok(0);
            }
        }
        let n = out.len().min(self.block.len() - self.pos);
        out[..n].copy_from_slice(&self.block[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

enum Decoder<'a> {
    None(&'a [u8]),
    Gzip(Box<flate2::read::MultiGzDecoder<&'a [u8]>>),
    Snappy(SnappyReader<'a>),
    Lz4(Box<lz4::Decoder<&'a [u8]>>),
    Zstd(Box<zstd::stream::read::Decoder<'a, std::io::BufReader<&'a [u8]>>>),
}

/// A batch's records section, decompressed as it is read.
pub struct RecordsReader<'a> {
    decoder: Decoder<'a>,
}

impl<'a> RecordsReader<'a> {
    /// The records section `data` of a batch with codec `codec`.
    pub fn new(codec: i16, data: &'a [u8]) -> Result<Self, DecompressError> {
        let decoder = match codec {
            0 => Decoder::None(data),
            GZIP => Decoder::Gzip(Box::new(flate2::read::MultiGzDecoder::new(data))),
            SNAPPY => {
                let framed = data.starts_with(SNAPPY_MAGIC);
                let rest = if framed {
                    data.get(SNAPPY_HEADER.len()..)
                        .ok_or(DecompressError::Failed)?
                } else {
                    data
                };
                Decoder::Snappy(SnappyReader {
                    rest,
                    block: Vec::new(),
                    pos: 0,
                    framed,
                })
            }
            LZ4 => Decoder::Lz4(Box::new(
                guarded(|| lz4::Decoder::new(data)).map_err(|_| DecompressError::Failed)?,
            )),
            ZSTD => Decoder::Zstd(Box::new(
                guarded(|| zstd::stream::read::Decoder::new(data))
                    .map_err(|_| DecompressError::Failed)?,
            )),
            other => return Err(DecompressError::UnknownCodec(other)),
        };
        Ok(Self { decoder })
    }
}

impl std::io::Read for RecordsReader<'_> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        match &mut self.decoder {
            Decoder::None(d) => d.read(out),
            Decoder::Gzip(d) => guarded(|| d.read(out)),
            Decoder::Snappy(d) => guarded(|| d.read(out)),
            Decoder::Lz4(d) => guarded(|| d.read(out)),
            Decoder::Zstd(d) => guarded(|| d.read(out)),
        }
    }
}

/// snappy-java's framed output: the header, then each 32 KiB of input as one block.
struct SnappyWriter {
    out: Vec<u8>,
    pending: Vec<u8>,
}

impl SnappyWriter {
    fn flush_block(&mut self) -> std::io::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let at = self.out.len();
        self.out.extend_from_slice(&[0; 4]);
        let start = self.out.len();
        self.out
            .resize(start + snap::raw::max_compress_len(self.pending.len()), 0);
        let n = snap::raw::Encoder::new()
            .compress(&self.pending, &mut self.out[start..])
            .map_err(|_| failed("snappy compression"))?;
        self.out.truncate(start + n);
        self.out[at..at + 4].copy_from_slice(&(n as u32).to_be_bytes());
        self.pending.clear();
        Ok(())
    }
}

impl std::io::Write for SnappyWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = buf.len().min(SNAPPY_BLOCK - self.pending.len());
        self.pending.extend_from_slice(&buf[..n]);
        if self.pending.len() == SNAPPY_BLOCK {
            self.flush_block()?;
        }
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

enum Encoder {
    None(Vec<u8>),
    Gzip(flate2::write::GzEncoder<Vec<u8>>),
    Snappy(SnappyWriter),
    Lz4(lz4::Encoder<Vec<u8>>),
    Zstd(zstd::stream::write::Encoder<'static, Vec<u8>>),
}

/// A records section compressed as it is written, appended to a buffer that may already hold
/// the batch header.
pub struct RecordsWriter {
    encoder: Encoder,
}

impl RecordsWriter {
    /// Compresses with codec `codec` at `level` (Kafka's `compression.<codec>.level`; None for
    /// the codec's default) after the bytes already in `out`.
    pub fn new(codec: i16, level: Option<i32>, mut out: Vec<u8>) -> std::io::Result<Self> {
        let encoder = match codec {
            0 => Encoder::None(out),
            GZIP => {
                // Kafka's -1 is the deflater's default level (6).
                let level = match level {
                    Some(l @ 1..=9) => flate2::Compression::new(l as u32),
                    _ => flate2::Compression::default(),
                };
                Encoder::Gzip(flate2::write::GzEncoder::new(out, level))
            }
            SNAPPY => {
                out.extend_from_slice(SNAPPY_HEADER);
                Encoder::Snappy(SnappyWriter {
                    out,
                    pending: Vec::with_capacity(SNAPPY_BLOCK),
                })
            }
            LZ4 => Encoder::Lz4(
                lz4::EncoderBuilder::new()
                    .level(level.unwrap_or(9).clamp(1, 17) as u32)
                    .block_mode(lz4::BlockMode::Independent)
                    .build(out)?,
            ),
            ZSTD => Encoder::Zstd(zstd::stream::write::Encoder::new(out, level.unwrap_or(3))?),
            other => return Err(failed(&format!("Unknown compression type id: {other}"))),
        };
        Ok(Self { encoder })
    }

    /// The bytes in the output so far (the codec may still hold some back).
    pub fn output_len(&self) -> usize {
        match &self.encoder {
            Encoder::None(v) => v.len(),
            Encoder::Gzip(e) => e.get_ref().len(),
            Encoder::Snappy(w) => w.out.len(),
            Encoder::Lz4(e) => e.writer().len(),
            Encoder::Zstd(e) => e.get_ref().len(),
        }
    }

    /// Flushes the codec and returns the whole output.
    pub fn finish(self) -> std::io::Result<Vec<u8>> {
        match self.encoder {
            Encoder::None(v) => Ok(v),
            Encoder::Gzip(e) => e.finish(),
            Encoder::Snappy(mut w) => {
                w.flush_block()?;
                Ok(w.out)
            }
            Encoder::Lz4(e) => {
                let (out, result) = e.finish();
                result.map(|()| out)
            }
            Encoder::Zstd(e) => e.finish(),
        }
    }
}

impl std::io::Write for RecordsWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match &mut self.encoder {
            Encoder::None(v) => v.write(buf),
            Encoder::Gzip(e) => e.write(buf),
            Encoder::Snappy(w) => w.write(buf),
            Encoder::Lz4(e) => e.write(buf),
            Encoder::Zstd(e) => e.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::compression::Compressor;

    #[test]
    fn round_trips_every_codec_and_refuses_garbage() {
        let raw = b"records section bytes, records section bytes".to_vec();
        let mut out = BytesMut::new();
        Gzip::compress(&mut out, |b| {
            b.extend_from_slice(&raw);
            Ok(())
        })
        .unwrap();
        assert_eq!(decompress(1, &out).unwrap(), raw);
        assert_eq!(decompress(0, &raw).unwrap(), raw);
        for codec in 1..=4 {
            assert_eq!(
                decompress(codec, b"\x00garbage"),
                Err(DecompressError::Failed)
            );
        }
        assert_eq!(decompress(5, &raw), Err(DecompressError::UnknownCodec(5)));
    }

    #[test]
    fn streams_round_trip_every_codec_at_every_level() {
        use std::io::{Read, Write};
        let raw: Vec<u8> = (0..200_000u32)
            .flat_map(|i| (i % 251).to_be_bytes())
            .collect();
        for (codec, levels) in [
            (0, vec![None]),
            (GZIP, vec![None, Some(1), Some(9)]),
            (SNAPPY, vec![None]),
            (LZ4, vec![None, Some(1), Some(17)]),
            (ZSTD, vec![None, Some(-5), Some(19)]),
        ] {
            for level in levels {
                let mut w = RecordsWriter::new(codec, level, b"head".to_vec()).unwrap();
                for chunk in raw.chunks(7_000) {
                    w.write_all(chunk).unwrap();
                }
                let out = w.finish().unwrap();
                assert_eq!(&out[..4], b"head");
                let mut back = Vec::new();
                RecordsReader::new(codec, &out[4..])
                    .unwrap()
                    .read_to_end(&mut back)
                    .unwrap();
                assert_eq!(back, raw, "codec {codec} level {level:?}");
                // The whole-section decompression reads what the stream wrote.
                assert_eq!(decompress(codec, &out[4..]).unwrap(), raw);
            }
        }
    }

    #[test]
    fn raw_snappy_and_garbage_streams() {
        use std::io::Read;
        let raw = b"raw snappy as librdkafka writes it, raw snappy".repeat(50);
        let block = snap::raw::Encoder::new().compress_vec(&raw).unwrap();
        let mut back = Vec::new();
        RecordsReader::new(SNAPPY, &block)
            .unwrap()
            .read_to_end(&mut back)
            .unwrap();
        assert_eq!(back, raw);
        for codec in 1..=4 {
            let r = RecordsReader::new(codec, b"\x00garbage bytes");
            if let Ok(mut r) = r {
                assert!(r.read_to_end(&mut Vec::new()).is_err(), "codec {codec}");
            }
        }
        assert!(matches!(
            RecordsReader::new(6, b""),
            Err(DecompressError::UnknownCodec(6))
        ));
    }
}

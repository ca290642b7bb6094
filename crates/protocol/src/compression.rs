//! The one way Strom decompresses a batch's records section (the codecs are kafka-protocol's):
//! the leader's key check on compacted topics, the log cleaner and `strom dump-log` all use it.
//! A codec fed hostile bytes may panic inside its library; the panic is caught and answered as
//! a failed decompression, so bad input never takes a broker thread down.

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
}

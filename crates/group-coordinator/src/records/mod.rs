//! `__consumer_offsets` records in Kafka's schemas (group-coordinator 4.4's
//! `common/message/*Key.json` / `*Value.json`), framed as Kafka's `CoordinatorRecordSerde`
//! frames them: the key is a 2-byte record type (the schema's `apiKey`) then the key message at
//! version 0; the value is a 2-byte version then the value message at that version; a record
//! without a value is a tombstone.
//!
//! The structs and their codecs are generated ([`generated`], by `scripts/gen-group-records.py`
//! from the JSON inside Kafka's jar), so every record follows the schema's versions, flexible
//! versions and tagged fields without a hand-written codec per record.

use bytes::{Bytes, BytesMut};

mod generated;
pub mod wire;

pub use generated::*;
pub use wire::RawTaggedField;

/// Why a record could not be encoded or decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("buffer underflow: needed {needed} bytes, {remaining} remaining")]
    Truncated { needed: usize, remaining: usize },
    #[error("malformed record: {0}")]
    Malformed(String),
    #[error("non-nullable field {0} was serialized as null (version {1})")]
    NullField(&'static str, i16),
    #[error("attempted to write a non-default {0} at version {1}")]
    NonDefaultField(&'static str, i16),
    #[error("unknown record type {0}")]
    UnknownRecordType(i16),
    #[error("unknown version {0} of {1}")]
    UnknownVersion(i16, &'static str),
    #[error("the {0} is shorter than its 2-byte version prefix")]
    MissingPrefix(&'static str),
}

impl CoordinatorRecord {
    /// The record's key bytes: record type, then the key message.
    pub fn encode_key(&self) -> Result<Bytes, RecordError> {
        let mut buf = BytesMut::new();
        wire::put_i16(&mut buf, self.record_type());
        self.encode_key_body(&mut buf)?;
        Ok(buf.freeze())
    }

    /// The record's value bytes (version, then the value message), or `None` for a tombstone.
    pub fn encode_value(&self) -> Result<Option<Bytes>, RecordError> {
        let mut body = BytesMut::new();
        match self.encode_value_body(&mut body)? {
            None => Ok(None),
            Some(version) => {
                let mut buf = BytesMut::with_capacity(2 + body.len());
                wire::put_i16(&mut buf, version);
                buf.extend_from_slice(&body);
                Ok(Some(buf.freeze()))
            }
        }
    }

    /// Reads a record from its key and (absent for a tombstone) value bytes.
    pub fn decode(key: &[u8], value: Option<&[u8]>) -> Result<Self, RecordError> {
        let mut key = Bytes::copy_from_slice(key);
        let record_type = wire::get_i16(&mut key).map_err(|_| RecordError::MissingPrefix("key"))?;
        let mut value = value.map(Bytes::copy_from_slice);
        let value = match value.as_mut() {
            None => None,
            Some(v) => {
                let version = wire::get_i16(v).map_err(|_| RecordError::MissingPrefix("value"))?;
                Some((version, v))
            }
        };
        Self::decode_body(record_type, &mut key, value)
    }
}

#[cfg(test)]
mod tests;

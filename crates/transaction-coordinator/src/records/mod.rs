//! `__transaction_state` records in Kafka's schemas (transaction-coordinator 4.4's
//! `TransactionLogKey.json` / `TransactionLogValue.json`), framed as Kafka's `TransactionLog`
//! frames them: the key is the 2-byte record type (0) then the key message at version 0; the
//! value is a 2-byte version (1, flexible, from `transaction.version` 1 on; else 0) then the
//! value message; an expired transactional id is a tombstone.
//!
//! The structs and codecs are generated ([`generated`], by `scripts/gen-group-records.py --txn`
//! from the JSON inside Kafka's jar) on the group coordinator's record wire primitives.

use std::collections::BTreeMap;

use bytes::{Bytes, BytesMut};
pub use strom_group_coordinator::records::{wire, RawTaggedField, RecordError};

mod generated;

pub use generated::*;

use crate::metadata::{TxnTransitMetadata, NO_PRODUCER_EPOCH};
use crate::state::{TransactionState, TransactionVersion};

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

/// One transactional id's record as the shard writes and replays it: its state (`None`: the
/// id expired, a tombstone) and the value version to write it at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnLogRecord {
    pub transactional_id: String,
    pub value: Option<TxnTransitMetadata>,
    /// The cluster's `transaction.version` level, which decides the value version.
    pub transaction_version_level: TransactionVersion,
}

impl TxnLogRecord {
    /// The record in Kafka's schema, with the fields Kafka's `TransactionLog.valueToBytes`
    /// sets (not the previous/next producer ids nor the next epoch: they stay at their
    /// defaults, as in Kafka's log). An Empty transaction stores no partition list (null).
    pub fn to_coordinator_record(&self) -> Result<CoordinatorRecord, RecordError> {
        let key = TransactionLogKey {
            transactional_id: self.transactional_id.clone(),
            ..Default::default()
        };
        let Some(t) = &self.value else {
            return Ok(CoordinatorRecord::TransactionLog(key, None));
        };
        if t.txn_state == TransactionState::Empty && !t.topic_partitions.is_empty() {
            return Err(RecordError::Malformed(format!(
                "an Empty transaction has no partitions: {t:?}"
            )));
        }
        let partitions = if t.txn_state == TransactionState::Empty {
            None
        } else {
            let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
            for (topic, p) in &t.topic_partitions {
                by_topic.entry(topic.as_str()).or_default().push(*p);
            }
            Some(
                by_topic
                    .into_iter()
                    .map(|(topic, partition_ids)| PartitionsSchema {
                        topic: topic.to_string(),
                        partition_ids,
                        ..Default::default()
                    })
                    .collect(),
            )
        };
        let value = TransactionLogValue {
            producer_id: t.producer_id,
            producer_epoch: t.producer_epoch,
            transaction_timeout_ms: t.txn_timeout_ms,
            transaction_status: t.txn_state.id(),
            transaction_last_update_timestamp_ms: t.txn_last_update_timestamp,
            transaction_start_timestamp_ms: t.txn_start_timestamp,
            transaction_partitions: partitions,
            client_transaction_version: t.client_transaction_version.feature_level(),
            ..Default::default()
        };
        let version = self
            .transaction_version_level
            .transaction_log_value_version();
        Ok(CoordinatorRecord::TransactionLog(
            key,
            Some((version, value)),
        ))
    }

    /// The key and value bytes as appended.
    pub fn encode(&self) -> Result<(Bytes, Option<Bytes>), RecordError> {
        let r = self.to_coordinator_record()?;
        Ok((r.encode_key()?, r.encode_value()?))
    }

    /// Reads a stored record as Kafka's `TransactionLog.read` does (the last epoch is not
    /// stored: -1). `Ok(None)`: a record type this coordinator does not know, skipped.
    pub fn decode(key: &[u8], value: Option<&[u8]>) -> Result<Option<Self>, RecordError> {
        let r = match CoordinatorRecord::decode(key, value) {
            Ok(r) => r,
            Err(RecordError::UnknownRecordType(_)) => return Ok(None),
            Err(e) => return Err(e),
        };
        let CoordinatorRecord::TransactionLog(k, v) = r;
        let Some((version, v)) = v else {
            return Ok(Some(Self {
                transactional_id: k.transactional_id,
                value: None,
                transaction_version_level: TransactionVersion::TV_0,
            }));
        };
        let state = TransactionState::from_id(v.transaction_status).ok_or_else(|| {
            RecordError::Malformed(format!(
                "unknown transaction state {}",
                v.transaction_status
            ))
        })?;
        let mut topic_partitions = std::collections::BTreeSet::new();
        if state != TransactionState::Empty {
            for p in v.transaction_partitions.iter().flatten() {
                for id in &p.partition_ids {
                    topic_partitions.insert((p.topic.clone(), *id));
                }
            }
        }
        Ok(Some(Self {
            transactional_id: k.transactional_id,
            value: Some(TxnTransitMetadata {
                producer_id: v.producer_id,
                prev_producer_id: v.previous_producer_id,
                next_producer_id: v.next_producer_id,
                producer_epoch: v.producer_epoch,
                last_producer_epoch: NO_PRODUCER_EPOCH,
                txn_timeout_ms: v.transaction_timeout_ms,
                txn_state: state,
                topic_partitions,
                txn_start_timestamp: v.transaction_start_timestamp_ms,
                txn_last_update_timestamp: v.transaction_last_update_timestamp_ms,
                client_transaction_version: TransactionVersion(v.client_transaction_version),
            }),
            transaction_version_level: TransactionVersion(version),
        }))
    }
}

impl CoordinatorRecord {
    /// The key and value as Kafka's `kafka-dump-log --transaction-log-decoder` prints them:
    /// `{"type":"0","data":KEY}` and `{"version":"V","data":VALUE}` (or `<DELETE>` for a
    /// tombstone), the value's status written as the state's name.
    pub fn dump_json(&self) -> (String, String) {
        let CoordinatorRecord::TransactionLog(k, v) = self;
        let key = format!("{{\"type\":\"0\",\"data\":{}}}", k.to_json(0));
        let value = match v {
            None => "<DELETE>".to_string(),
            Some((ver, m)) => {
                let status = format!("\"transactionStatus\":{}", m.transaction_status);
                let named = match TransactionState::from_id(m.transaction_status) {
                    Some(s) => format!("\"transactionStatus\":\"{}\"", s.name()),
                    None => status.clone(),
                };
                let data = m.to_json(*ver).replacen(&status, &named, 1);
                format!("{{\"version\":\"{ver}\",\"data\":{data}}}")
            }
        };
        (key, value)
    }
}

#[cfg(test)]
pub(crate) mod tests;

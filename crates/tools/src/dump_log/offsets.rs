//! `--offsets-decoder`: records of `__consumer_offsets` printed as Kafka's `OffsetsMessageParser`
//! prints them: the key as `{"type":"<record type>","data":<key JSON>}`, the value as
//! `{"version":"<version>","data":<value JSON>}` or `<DELETE>` for a tombstone, the JSON being
//! that of Kafka's generated converters (strom_group_coordinator's `to_json`).

use strom_group_coordinator::records::{CoordinatorRecord, RecordError};

use super::consumer_protocol;
use super::{abort, Res};

/// What to print after `key:` and (when present) `payload:` for one record.
pub(crate) fn parse(
    offset: i64,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
) -> Res<(String, Option<String>)> {
    let Some(key) = key else {
        // Kafka's parser throws here, which ends the tool.
        return abort(format!(
            "Failed to decode message at offset {offset} using the specified decoder (message had a missing key)"
        ));
    };
    match CoordinatorRecord::decode(key, value) {
        Ok(rec) => {
            let (k, mut v) = rec.to_json();
            if let (CoordinatorRecord::GroupMetadata(_, Some((_, value))), Some((_, json))) =
                (&rec, v.as_mut())
            {
                *json = consumer_protocol::decode_members(value, std::mem::take(json));
            }
            let key = format!("{{\"type\":\"{}\",\"data\":{k}}}", rec.record_type());
            let payload = match v {
                None => "<DELETE>".to_string(),
                Some((version, v)) => format!("{{\"version\":\"{version}\",\"data\":{v}}}"),
            };
            Ok((key, Some(payload)))
        }
        Err(RecordError::UnknownRecordType(t)) => Ok((
            format!("Unknown record type {t} at offset {offset}, skipping."),
            None,
        )),
        Err(e) => Ok((format!("Error at offset {offset}, skipping. {e}"), None)),
    }
}

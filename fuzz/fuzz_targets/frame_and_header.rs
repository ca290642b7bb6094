//! Untrusted connection bytes: framing, header peeking, then header and body decoding with the
//! generated `kafka-protocol` structs exactly as `strom_broker::handlers::handle` does it, for
//! every API key/version in `strom_protocol::apis::SUPPORTED`. Produce record sets are then
//! walked the way the produce handler and `UnifiedLog::analyze` walk them.
#![no_main]

use bytes::{Buf, Bytes};
use libfuzzer_sys::fuzz_target;
use strom_protocol::batch::BatchIter;
use strom_protocol::kafka::messages::*;
use strom_protocol::kafka::protocol::Decodable;
use strom_protocol::{apis, frame};

fuzz_target!(|data: &[u8]| {
    // The connection loop: handle every complete frame in the buffer, stop at the first
    // incomplete one or framing error.
    let mut buf = Bytes::copy_from_slice(data);
    loop {
        match frame::check(&buf, frame::DEFAULT_MAX_REQUEST_SIZE) {
            Ok(Some(n)) => {
                buf.advance(4);
                let payload = buf.split_to(n);
                if handle(payload).is_err() {
                    // The broker closes the connection here.
                    return;
                }
            }
            Ok(None) | Err(_) => return,
        }
    }
});

/// `handlers::handle` up to (not including) running the API handler.
fn handle(mut payload: Bytes) -> Result<(), ()> {
    let prefix = frame::peek_header(&payload).ok_or(())?;
    let api_key = ApiKey::try_from(prefix.api_key).map_err(|_| ())?;
    let version = prefix.api_version;
    if !apis::is_supported(prefix.api_key, version) {
        return if api_key == ApiKey::ApiVersions {
            Ok(())
        } else {
            Err(())
        };
    }
    let header = RequestHeader::decode(&mut payload, api_key.request_header_version(version))
        .map_err(|_| ())?;
    let _ = header.correlation_id;
    macro_rules! body {
        ($t:ty) => {
            <$t>::decode(&mut payload, version).map_err(|_| ())?
        };
    }
    match api_key {
        ApiKey::ApiVersions => drop(body!(ApiVersionsRequest)),
        ApiKey::Metadata => drop(body!(MetadataRequest)),
        ApiKey::Produce => {
            let req = body!(ProduceRequest);
            for topic in &req.topic_data {
                for p in &topic.partition_data {
                    if let Some(records) = &p.records {
                        walk_records(records);
                    }
                }
            }
        }
        ApiKey::Fetch => drop(body!(FetchRequest)),
        ApiKey::ListOffsets => drop(body!(ListOffsetsRequest)),
        ApiKey::CreateTopics => drop(body!(CreateTopicsRequest)),
        ApiKey::DeleteTopics => drop(body!(DeleteTopicsRequest)),
        ApiKey::CreatePartitions => drop(body!(CreatePartitionsRequest)),
        ApiKey::DescribeConfigs => drop(body!(DescribeConfigsRequest)),
        ApiKey::IncrementalAlterConfigs => drop(body!(IncrementalAlterConfigsRequest)),
        ApiKey::DescribeCluster => drop(body!(DescribeClusterRequest)),
        _ => return Err(()),
    }
    Ok(())
}

/// What the produce path does with a partition's records before they reach the log: the
/// one-batch check, then per-batch size/validate/count checks.
fn walk_records(records: &[u8]) {
    for view in BatchIter::new(records) {
        let Ok(view) = view else { break };
        if view.validate().is_err() {
            break;
        }
        let _ = (
            view.records_count(),
            view.last_offset_delta(),
            view.is_control(),
            view.producer_id(),
            view.base_sequence(),
            view.last_offset(),
            view.max_timestamp(),
        );
    }
}

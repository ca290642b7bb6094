//! Request dispatch: decode the header and body with the generated `kafka-protocol` structs, run
//! the API's handler, encode the response with its header. Each handler module maps internal
//! errors to the codes its API uses.

mod api_versions;
mod configs;
mod delete_records;
mod describe_cluster;
mod elect_leaders;
mod fetch;
mod init_producer_id;
mod internal;
mod list_offsets;
mod metadata;
#[cfg(test)]
mod offline_tests;
mod offset_for_leader_epoch;
mod produce;
#[cfg(test)]
mod purgatory_tests;
mod reassignments;
mod topics;

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use strom_protocol::kafka::messages::*;
use strom_protocol::kafka::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};
use strom_protocol::{apis, frame};
use thiserror::Error;

use crate::server::Broker;

/// Reasons to close a connection instead of answering.
#[derive(Debug, Error)]
pub enum HandleError {
    #[error("request shorter than a header")]
    Malformed,
    #[error("unknown API key {0}")]
    UnknownApi(i16),
    #[error("unsupported version {version} of API {api_key}")]
    UnsupportedVersion { api_key: i16, version: i16 },
    #[error("cannot decode {api:?} v{version}: {reason}")]
    Decode {
        api: ApiKey,
        version: i16,
        reason: String,
    },
    #[error("cannot encode {api:?} v{version} response: {reason}")]
    Encode {
        api: ApiKey,
        version: i16,
        reason: String,
    },
    #[error("error in a produce with acks=0: closing so the client notices")]
    AcksZeroFailure,
}

/// Handles one request frame (without its size prefix). `Ok(None)`: no response is due.
pub async fn handle(
    broker: &Arc<Broker>,
    mut payload: Bytes,
) -> Result<Option<BytesMut>, HandleError> {
    let original = payload.clone();
    let prefix = frame::peek_header(&payload).ok_or(HandleError::Malformed)?;
    let api_key =
        ApiKey::try_from(prefix.api_key).map_err(|_| HandleError::UnknownApi(prefix.api_key))?;
    let version = prefix.api_version;
    if !apis::is_served(prefix.api_key, version) {
        if api_key == ApiKey::ApiVersions {
            // Kafka's fallback: a v0 response with the error and our ranges, so the client can
            // retry with a version we speak.
            let resp = api_versions::response(StrBytes::default(), 35);
            return encode(ApiKey::ApiVersions, 0, prefix.correlation_id, &resp).map(Some);
        }
        return Err(HandleError::UnsupportedVersion {
            api_key: prefix.api_key,
            version,
        });
    }
    let admin = matches!(
        api_key,
        ApiKey::CreateTopics
            | ApiKey::DeleteTopics
            | ApiKey::CreatePartitions
            | ApiKey::IncrementalAlterConfigs
            | ApiKey::ElectLeaders
            | ApiKey::AlterPartitionReassignments
            | ApiKey::ListPartitionReassignments
    );
    if admin && !broker.controller.is_active() {
        // Admin requests are decided by the active controller: forward the frame unchanged and
        // relay its answer. If that fails, the local handler answers NOT_CONTROLLER per item.
        if let Ok(resp) = broker.channel.forward_raw(&original).await {
            return Ok(Some(crate::controller_channel::frame(resp)));
        }
    }
    let header = RequestHeader::decode(&mut payload, api_key.request_header_version(version))
        .map_err(|e| HandleError::Decode {
            api: api_key,
            version,
            reason: e.to_string(),
        })?;
    let corr = header.correlation_id;
    macro_rules! body {
        ($t:ty) => {
            <$t>::decode(&mut payload, version).map_err(|e| HandleError::Decode {
                api: api_key,
                version,
                reason: e.to_string(),
            })?
        };
    }
    let out = match api_key {
        ApiKey::ApiVersions => {
            let req = body!(ApiVersionsRequest);
            encode(api_key, version, corr, &api_versions::handle(req))
        }
        ApiKey::Metadata => {
            let resp = metadata::handle(broker, body!(MetadataRequest), version).await;
            encode(api_key, version, corr, &resp)
        }
        ApiKey::Produce => {
            let req = body!(ProduceRequest);
            let acks = req.acks;
            let resp = produce::handle(broker, req, version).await;
            if acks == 0 {
                let failed = resp
                    .responses
                    .iter()
                    .flat_map(|t| &t.partition_responses)
                    .any(|p| p.error_code != 0);
                return if failed {
                    Err(HandleError::AcksZeroFailure)
                } else {
                    Ok(None)
                };
            }
            encode(api_key, version, corr, &resp)
        }
        ApiKey::Fetch => {
            let resp = fetch::handle(broker, body!(FetchRequest), version).await;
            encode(api_key, version, corr, &resp)
        }
        ApiKey::ListOffsets => {
            let resp = list_offsets::handle(broker, body!(ListOffsetsRequest), version);
            encode(api_key, version, corr, &resp)
        }
        ApiKey::CreateTopics => {
            let resp = topics::create_topics(broker, body!(CreateTopicsRequest), version).await;
            encode(api_key, version, corr, &resp)
        }
        ApiKey::DeleteTopics => {
            let resp = topics::delete_topics(broker, body!(DeleteTopicsRequest), version).await;
            encode(api_key, version, corr, &resp)
        }
        ApiKey::CreatePartitions => {
            let resp = topics::create_partitions(broker, body!(CreatePartitionsRequest)).await;
            encode(api_key, version, corr, &resp)
        }
        ApiKey::DescribeConfigs => {
            let resp = configs::describe_configs(broker, body!(DescribeConfigsRequest), version);
            encode(api_key, version, corr, &resp)
        }
        ApiKey::IncrementalAlterConfigs => {
            let resp =
                configs::incremental_alter_configs(broker, body!(IncrementalAlterConfigsRequest))
                    .await;
            encode(api_key, version, corr, &resp)
        }
        ApiKey::OffsetForLeaderEpoch => {
            let resp = offset_for_leader_epoch::handle(broker, body!(OffsetForLeaderEpochRequest));
            encode(api_key, version, corr, &resp)
        }
        ApiKey::DeleteRecords => {
            let resp = delete_records::handle(broker, body!(DeleteRecordsRequest)).await;
            encode(api_key, version, corr, &resp)
        }
        ApiKey::InitProducerId => {
            let resp = init_producer_id::handle(broker, body!(InitProducerIdRequest)).await;
            encode(api_key, version, corr, &resp)
        }
        ApiKey::BrokerRegistration => {
            let resp =
                internal::broker_registration(broker, body!(BrokerRegistrationRequest)).await;
            encode(api_key, version, corr, &resp)
        }
        ApiKey::AllocateProducerIds => {
            let resp =
                internal::allocate_producer_ids(broker, body!(AllocateProducerIdsRequest)).await;
            encode(api_key, version, corr, &resp)
        }
        ApiKey::AlterPartition => {
            let resp =
                internal::alter_partition(broker, body!(AlterPartitionRequest), version).await;
            encode(api_key, version, corr, &resp)
        }
        ApiKey::BrokerHeartbeat => {
            let resp = internal::broker_heartbeat(broker, body!(BrokerHeartbeatRequest)).await;
            encode(api_key, version, corr, &resp)
        }
        ApiKey::AssignReplicasToDirs => {
            let resp =
                internal::assign_replicas_to_dirs(broker, body!(AssignReplicasToDirsRequest)).await;
            encode(api_key, version, corr, &resp)
        }
        ApiKey::ElectLeaders => {
            let resp = elect_leaders::handle(broker, body!(ElectLeadersRequest), version).await;
            encode(api_key, version, corr, &resp)
        }
        ApiKey::AlterPartitionReassignments => {
            let resp =
                reassignments::alter(broker, body!(AlterPartitionReassignmentsRequest)).await;
            encode(api_key, version, corr, &resp)
        }
        ApiKey::ListPartitionReassignments => {
            let resp = reassignments::list(broker, body!(ListPartitionReassignmentsRequest)).await;
            encode(api_key, version, corr, &resp)
        }
        ApiKey::DescribeCluster => {
            let resp = describe_cluster::handle(broker, body!(DescribeClusterRequest));
            encode(api_key, version, corr, &resp)
        }
        other => {
            // A key in the supported table without a handler would be a bug in this file.
            return Err(HandleError::UnsupportedVersion {
                api_key: other as i16,
                version,
            });
        }
    };
    out.map(Some)
}

/// Encodes `size | response header | body`.
fn encode<R: Encodable + HeaderVersion>(
    api_key: ApiKey,
    version: i16,
    correlation_id: i32,
    resp: &R,
) -> Result<BytesMut, HandleError> {
    let header_version = api_key.response_header_version(version);
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    macro_rules! enc {
        ($e:expr) => {
            $e.map_err(|e| HandleError::Encode {
                api: api_key,
                version,
                reason: e.to_string(),
            })?
        };
    }
    let size = enc!(header.compute_size(header_version)) + enc!(resp.compute_size(version));
    let mut buf = BytesMut::with_capacity(4 + size);
    buf.put_i32(size as i32);
    enc!(header.encode(&mut buf, header_version));
    enc!(resp.encode(&mut buf, version));
    Ok(buf)
}

pub(crate) fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

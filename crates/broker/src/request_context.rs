//! What a handler knows about the request beyond its body (Kafka's `RequestContext`): the
//! listener it came in on and that listener's security protocol, the authenticated principal,
//! the client (id, software name and version), the connection and the request header.
//!
//! An authorizer, quotas and the coordinators read it from here; SASL/TLS will set the
//! principal at the connection. A request forwarded by another broker in an Envelope carries
//! the original client's principal and address, so a handler sees the client, not the
//! forwarding broker.

use std::net::SocketAddr;
use std::sync::Arc;

use strom_protocol::kafka::messages::{ApiKey, RequestHeader};
use strom_protocol::kafka::protocol::StrBytes;

use strom_server_common::authorizer::AuthorizableRequestContext;

use crate::listeners::{ListenerScope, SecurityProtocol};

/// Kafka's `KafkaPrincipal`, shared with the authorizer and quota interfaces.
pub use strom_server_common::KafkaPrincipal;

/// KIP-511's client software name and version, from ApiVersions v3+; `unknown` until then.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientInformation {
    pub software_name: StrBytes,
    pub software_version: StrBytes,
}

impl Default for ClientInformation {
    fn default() -> Self {
        Self {
            software_name: StrBytes::from_static_str("unknown"),
            software_version: StrBytes::from_static_str("unknown"),
        }
    }
}

/// A listener as a connection sees it.
#[derive(Debug, Clone)]
pub struct ListenerInfo {
    pub name: Arc<str>,
    pub security_protocol: SecurityProtocol,
    pub scope: ListenerScope,
}

/// One request's context, handed to every handler by the registry.
#[derive(Debug, Clone)]
pub struct RequestContext {
    pub header: RequestHeader,
    pub api_key: ApiKey,
    pub api_version: i16,
    /// Kafka's form: `localAddr:localPort-remoteAddr:remotePort-index`.
    pub connection_id: Arc<str>,
    /// The client's address: the peer, or for a forwarded request the original client's.
    pub client_address: SocketAddr,
    pub listener: ListenerInfo,
    pub principal: KafkaPrincipal,
    pub client_information: ClientInformation,
    /// The request came wrapped in an Envelope from another broker.
    pub forwarded: bool,
}

impl RequestContext {
    pub fn correlation_id(&self) -> i32 {
        self.header.correlation_id
    }

    pub fn client_id(&self) -> &str {
        self.header.client_id.as_deref().unwrap_or("")
    }

    /// A context for a request a component of this node makes to itself (tests, tools).
    pub fn internal(header: RequestHeader, api_key: ApiKey) -> Self {
        Self {
            api_version: header.request_api_version,
            header,
            api_key,
            connection_id: Arc::from("internal"),
            client_address: SocketAddr::from(([127, 0, 0, 1], 0)),
            listener: ListenerInfo {
                name: Arc::from("INTERNAL"),
                security_protocol: SecurityProtocol::Plaintext,
                scope: ListenerScope::Broker,
            },
            principal: KafkaPrincipal::anonymous(),
            client_information: ClientInformation::default(),
            forwarded: false,
        }
    }
}

/// What the authorizer sees of a request (Kafka's `RequestContext` is its
/// `AuthorizableRequestContext`). A forwarded request shows the original client's principal and
/// address.
impl AuthorizableRequestContext for RequestContext {
    fn listener_name(&self) -> &str {
        &self.listener.name
    }

    fn security_protocol_name(&self) -> &'static str {
        self.listener.security_protocol.name()
    }

    fn principal(&self) -> &KafkaPrincipal {
        &self.principal
    }

    fn client_address(&self) -> SocketAddr {
        self.client_address
    }

    fn request_type(&self) -> i16 {
        self.header.request_api_key
    }

    fn request_version(&self) -> i16 {
        self.api_version
    }

    fn client_id(&self) -> &str {
        RequestContext::client_id(self)
    }

    fn correlation_id(&self) -> i32 {
        self.header.correlation_id
    }
}

/// Kafka's `DefaultKafkaPrincipalBuilder.serialize`: a version prefix (i16) and
/// `DefaultPrincipalData` at that version, as an Envelope's `request_principal`.
pub fn serialize_principal(p: &KafkaPrincipal) -> bytes::Bytes {
    use bytes::BufMut;
    use strom_protocol::kafka::messages::DefaultPrincipalData;
    use strom_protocol::kafka::protocol::Encodable;
    let data = DefaultPrincipalData::default()
        .with_type(StrBytes::from_string(p.principal_type.clone()))
        .with_name(StrBytes::from_string(p.name.clone()))
        .with_token_authenticated(p.token_authenticated);
    let mut buf = bytes::BytesMut::new();
    buf.put_i16(PRINCIPAL_DATA_VERSION);
    // Encoding a message of plain strings and a bool cannot fail.
    let _ = data.encode(&mut buf, PRINCIPAL_DATA_VERSION);
    buf.freeze()
}

/// The inverse of [`serialize_principal`]; `None` for bytes that are not a principal.
pub fn deserialize_principal(bytes: &[u8]) -> Option<KafkaPrincipal> {
    use bytes::Buf;
    use strom_protocol::kafka::messages::DefaultPrincipalData;
    use strom_protocol::kafka::protocol::Decodable;
    let mut b = bytes::Bytes::copy_from_slice(bytes);
    if b.remaining() < 2 {
        return None;
    }
    let version = b.get_i16();
    if version != PRINCIPAL_DATA_VERSION {
        return None;
    }
    let data = DefaultPrincipalData::decode(&mut b, version).ok()?;
    Some(KafkaPrincipal {
        principal_type: data._type.to_string(),
        name: data.name.to_string(),
        token_authenticated: data.token_authenticated,
    })
}

const PRINCIPAL_DATA_VERSION: i16 = 0;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn principal_round_trip() {
        let p = KafkaPrincipal {
            principal_type: "User".into(),
            name: "alice".into(),
            token_authenticated: true,
        };
        assert_eq!(deserialize_principal(&serialize_principal(&p)), Some(p));
        assert_eq!(deserialize_principal(&[0]), None);
        assert_eq!(deserialize_principal(&[0, 9, 1, 2]), None);
    }
}

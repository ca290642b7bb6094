//! Kafka's listener settings: `listeners`, `advertised.listeners`,
//! `listener.security.protocol.map`, `inter.broker.listener.name` and
//! `controller.listener.names`, parsed and checked the way Kafka's `KafkaConfig` does.
//!
//! Only PLAINTEXT is served today: a listener mapped to SSL or SASL is refused at start-up with
//! a clear error rather than served in plaintext. TLS and SASL plug in at the connection
//! (`connection.rs`), which already carries the listener's security protocol and principal in
//! every request's [`crate::RequestContext`].

use std::collections::BTreeMap;
use std::fmt;

use crate::config::ConfigError;

/// Kafka's `SecurityProtocol`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SecurityProtocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    pub fn name(self) -> &'static str {
        match self {
            Self::Plaintext => "PLAINTEXT",
            Self::Ssl => "SSL",
            Self::SaslPlaintext => "SASL_PLAINTEXT",
            Self::SaslSsl => "SASL_SSL",
        }
    }

    /// Kafka's wire id (`SecurityProtocol.id`), as BrokerRegistration carries it.
    pub fn id(self) -> i16 {
        match self {
            Self::Plaintext => 0,
            Self::Ssl => 1,
            Self::SaslPlaintext => 2,
            Self::SaslSsl => 3,
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_uppercase().as_str() {
            "PLAINTEXT" => Some(Self::Plaintext),
            "SSL" => Some(Self::Ssl),
            "SASL_PLAINTEXT" => Some(Self::SaslPlaintext),
            "SASL_SSL" => Some(Self::SaslSsl),
            _ => None,
        }
    }
}

impl fmt::Display for SecurityProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which API table a listener serves: the client/inter-broker APIs, or the controller's
/// (broker-to-controller APIs, forwarded admin requests, Raft).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ListenerScope {
    Broker,
    Controller,
}

/// One `NAME://HOST:PORT` entry. An empty host binds every interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndPoint {
    /// Normalised (upper case), as Kafka's `ListenerName.normalised`.
    pub listener_name: String,
    pub host: String,
    pub port: u16,
    pub security_protocol: SecurityProtocol,
}

impl EndPoint {
    /// `HOST:PORT` to bind (`0.0.0.0` for an empty host, brackets for IPv6).
    pub fn bind_address(&self) -> String {
        host_port(
            if self.host.is_empty() {
                "0.0.0.0"
            } else {
                &self.host
            },
            self.port,
        )
    }
}

impl fmt::Display for EndPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}://{}",
            self.listener_name,
            host_port(&self.host, self.port)
        )
    }
}

fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// The listeners of a node, resolved.
#[derive(Debug, Clone)]
pub struct Listeners {
    /// Everything to bind, in `listeners` order.
    pub listeners: Vec<EndPoint>,
    /// The broker listeners (not controller ones) as clients and other brokers are told them.
    /// A port of 0 is replaced by the bound port at start-up.
    pub advertised: Vec<EndPoint>,
    pub inter_broker_listener_name: String,
    pub controller_listener_names: Vec<String>,
}

impl Listeners {
    pub fn scope_of(&self, listener_name: &str) -> ListenerScope {
        if self
            .controller_listener_names
            .iter()
            .any(|n| n == listener_name)
        {
            ListenerScope::Controller
        } else {
            ListenerScope::Broker
        }
    }

    /// The first controller listener this node binds (where the quorum and the brokers reach
    /// its controller).
    pub fn controller_listener(&self) -> Option<&EndPoint> {
        self.controller_listener_names
            .iter()
            .find_map(|n| self.listeners.iter().find(|l| &l.listener_name == n))
    }

    pub fn inter_broker_advertised(&self) -> &EndPoint {
        self.advertised
            .iter()
            .find(|l| l.listener_name == self.inter_broker_listener_name)
            .expect("checked in resolve")
    }
}

const DEFAULT_PROTOCOL_MAP: &str =
    "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL";

fn invalid(key: &str, value: &str, why: impl Into<String>) -> ConfigError {
    ConfigError::InvalidValue {
        key: key.into(),
        value: value.into(),
        why: why.into(),
    }
}

fn csv(s: &str) -> impl Iterator<Item = &str> {
    s.split(',').map(str::trim).filter(|p| !p.is_empty())
}

/// `listener.security.protocol.map` as Kafka computes it: the given map, or the default one to
/// which, in KRaft, the controller listener names are added as PLAINTEXT unless some listener
/// uses SSL or SASL (`KafkaConfig.effectiveListenerSecurityProtocolMap`).
fn protocol_map(
    props: &BTreeMap<String, String>,
    controller_names: &[String],
    listener_names: &[String],
) -> Result<BTreeMap<String, SecurityProtocol>, ConfigError> {
    const KEY: &str = "listener.security.protocol.map";
    let explicit = props.get(KEY);
    let text = explicit.map_or(DEFAULT_PROTOCOL_MAP, String::as_str);
    let mut map = BTreeMap::new();
    for entry in csv(text) {
        let (name, proto) = entry
            .split_once(':')
            .ok_or_else(|| invalid(KEY, text, "expected NAME:PROTOCOL entries"))?;
        let proto = SecurityProtocol::parse(proto)
            .ok_or_else(|| invalid(KEY, text, format!("unknown security protocol {proto}")))?;
        map.insert(name.trim().to_ascii_uppercase(), proto);
    }
    let sasl_or_ssl = |n: &String| matches!(n.as_str(), "SSL" | "SASL_SSL" | "SASL_PLAINTEXT");
    if explicit.is_none()
        && !controller_names.iter().any(sasl_or_ssl)
        && !listener_names.iter().any(sasl_or_ssl)
    {
        for n in controller_names {
            map.entry(n.clone()).or_insert(SecurityProtocol::Plaintext);
        }
    }
    Ok(map)
}

/// Parses a `listeners`-style list (`NAME://HOST:PORT,...`, host may be empty or `[v6]`).
fn parse_list(
    key: &str,
    text: &str,
    map: &BTreeMap<String, SecurityProtocol>,
    distinct_ports: bool,
) -> Result<Vec<EndPoint>, ConfigError> {
    let mut out: Vec<EndPoint> = Vec::new();
    for entry in csv(text) {
        let (name, rest) = entry
            .split_once("://")
            .ok_or_else(|| invalid(key, text, format!("'{entry}' is not NAME://HOST:PORT")))?;
        let name = name.trim().to_ascii_uppercase();
        let (host, port) = rest
            .rsplit_once(':')
            .ok_or_else(|| invalid(key, text, format!("'{entry}' has no port")))?;
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let port: u16 = port
            .parse()
            .map_err(|_| invalid(key, text, format!("'{entry}' has an invalid port")))?;
        let security_protocol = *map.get(&name).ok_or_else(|| {
            invalid(
                key,
                text,
                format!("No security protocol defined for listener {name}"),
            )
        })?;
        if out.iter().any(|e| e.listener_name == name) {
            return Err(invalid(
                key,
                text,
                format!("Each listener must have a different name, {name} appears twice"),
            ));
        }
        if distinct_ports && port != 0 && out.iter().any(|e| e.port == port) {
            return Err(invalid(
                key,
                text,
                format!("Each listener must have a different port, {port} appears twice"),
            ));
        }
        out.push(EndPoint {
            listener_name: name,
            host,
            port,
            security_protocol,
        });
    }
    Ok(out)
}

/// Resolves the listener settings from the merged properties. `listeners` defaults to
/// Strom's `PLAINTEXT://127.0.0.1:9092`.
pub fn resolve(props: &BTreeMap<String, String>) -> Result<Listeners, ConfigError> {
    let listeners_text = props
        .get("listeners")
        .map_or("PLAINTEXT://127.0.0.1:9092", String::as_str);
    let controller_listener_names: Vec<String> = props
        .get("controller.listener.names")
        .map(|v| csv(v).map(str::to_ascii_uppercase).collect())
        .unwrap_or_default();
    let names: Vec<String> = csv(listeners_text)
        .filter_map(|e| {
            e.split_once("://")
                .map(|(n, _)| n.trim().to_ascii_uppercase())
        })
        .collect();
    let map = protocol_map(props, &controller_listener_names, &names)?;
    let listeners = parse_list("listeners", listeners_text, &map, true)?;
    if listeners.is_empty() {
        return Err(invalid("listeners", listeners_text, "no listener"));
    }
    for l in &listeners {
        if l.security_protocol != SecurityProtocol::Plaintext {
            return Err(ConfigError::Unsupported(format!(
                "listener {l} uses security protocol {}; Strom serves only PLAINTEXT listeners so far",
                l.security_protocol
            )));
        }
    }
    let advertised_all = match props.get("advertised.listeners") {
        Some(text) => {
            let adv = parse_list("advertised.listeners", text, &map, false)?;
            for a in &adv {
                if !listeners.iter().any(|l| l.listener_name == a.listener_name) {
                    return Err(invalid(
                        "advertised.listeners",
                        text,
                        format!(
                            "advertised.listeners listener names must be equal to or a subset of the ones defined in listeners; {} is not",
                            a.listener_name
                        ),
                    ));
                }
            }
            // A listener not named in advertised.listeners is advertised as it is bound.
            let mut all = adv;
            for l in &listeners {
                if !all.iter().any(|a| a.listener_name == l.listener_name) {
                    all.push(l.clone());
                }
            }
            all
        }
        None => listeners.clone(),
    };
    let is_controller = |n: &str| controller_listener_names.iter().any(|c| c == n);
    let advertised: Vec<EndPoint> = advertised_all
        .into_iter()
        .filter(|e| !is_controller(&e.listener_name))
        .collect();
    let inter_broker_listener_name = props
        .get("inter.broker.listener.name")
        .map_or("PLAINTEXT".to_string(), |v| v.trim().to_ascii_uppercase());
    if is_controller(&inter_broker_listener_name) {
        return Err(invalid(
            "inter.broker.listener.name",
            &inter_broker_listener_name,
            "controller.listener.names must not contain the inter-broker listener name",
        ));
    }
    if !advertised
        .iter()
        .any(|e| e.listener_name == inter_broker_listener_name)
    {
        return Err(invalid(
            "inter.broker.listener.name",
            &inter_broker_listener_name,
            format!(
                "inter.broker.listener.name must be a listener name defined in advertised.listeners; the broker listeners are {:?}",
                advertised.iter().map(|e| e.listener_name.as_str()).collect::<Vec<_>>()
            ),
        ));
    }
    Ok(Listeners {
        listeners,
        advertised,
        inter_broker_listener_name,
        controller_listener_names,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn kafka_combined_mode_listeners() {
        let l = resolve(&props(&[
            ("listeners", "PLAINTEXT://:9092,CONTROLLER://:9093"),
            (
                "advertised.listeners",
                "PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093",
            ),
            ("controller.listener.names", "CONTROLLER"),
            ("inter.broker.listener.name", "PLAINTEXT"),
        ]))
        .unwrap();
        assert_eq!(l.listeners.len(), 2);
        assert_eq!(l.listeners[0].bind_address(), "0.0.0.0:9092");
        assert_eq!(
            l.advertised.len(),
            1,
            "controller listeners are not advertised"
        );
        assert_eq!(l.inter_broker_advertised().host, "localhost");
        assert_eq!(l.controller_listener().unwrap().port, 9093);
        assert_eq!(l.scope_of("CONTROLLER"), ListenerScope::Controller);
        assert_eq!(l.scope_of("PLAINTEXT"), ListenerScope::Broker);
        // CONTROLLER is mapped to PLAINTEXT only because the map was not given.
        assert!(resolve(&props(&[
            ("listeners", "PLAINTEXT://:9092,CONTROLLER://:9093"),
            ("controller.listener.names", "CONTROLLER"),
            ("listener.security.protocol.map", "PLAINTEXT:PLAINTEXT"),
        ]))
        .is_err());
    }

    #[test]
    fn ssl_and_sasl_are_refused_clearly() {
        let e = resolve(&props(&[("listeners", "SSL://:9092")])).unwrap_err();
        assert!(e.to_string().contains("PLAINTEXT"), "{e}");
        let e = resolve(&props(&[(
            "listeners",
            "PLAINTEXT://:9092,SASL_SSL://:9094",
        )]))
        .unwrap_err();
        assert!(e.to_string().contains("SASL_SSL"), "{e}");
    }

    #[test]
    fn bad_listener_lists() {
        for bad in [
            "PLAINTEXT://:9092,PLAINTEXT://:9093",
            "PLAINTEXT://:9092,EXTERNAL://:9092",
            "PLAINTEXT:9092",
            "PLAINTEXT://host:x",
            "UNMAPPED://:9092",
        ] {
            assert!(resolve(&props(&[("listeners", bad)])).is_err(), "{bad}");
        }
        // The inter-broker listener must be a broker listener.
        assert!(resolve(&props(&[
            ("listeners", "INTERNAL://:9092"),
            ("listener.security.protocol.map", "INTERNAL:PLAINTEXT"),
        ]))
        .is_err());
        assert!(resolve(&props(&[
            ("listeners", "INTERNAL://:9092"),
            ("listener.security.protocol.map", "INTERNAL:PLAINTEXT"),
            ("inter.broker.listener.name", "internal"),
        ]))
        .is_ok());
        // IPv6 hosts.
        let l = resolve(&props(&[("listeners", "PLAINTEXT://[::1]:9092")])).unwrap();
        assert_eq!(l.listeners[0].host, "::1");
        assert_eq!(l.listeners[0].bind_address(), "[::1]:9092");
    }
}

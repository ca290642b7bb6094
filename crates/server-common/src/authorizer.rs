//! Kafka's authorizer interface (`org.apache.kafka.server.authorizer.Authorizer`): a request's
//! handler asks whether the request's principal may perform an operation on a resource, and
//! answers the API's authorization error when it may not. Which operation on which resource each
//! API needs is Kafka's (`KafkaApis`, `ControllerApis`, `AuthHelper`); the handlers call
//! [`AuthHelper`] with exactly those.
//!
//! Without an authorizer configured Kafka allows everything; [`AllowAll`] is that default, and
//! it is still called, so an authorizer (the security issue's `StandardAuthorizer`) plugs in
//! without touching a handler.

use std::net::SocketAddr;
use std::sync::Arc;

use crate::principal::KafkaPrincipal;

/// Kafka's `AclOperation`, with its wire codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(i8)]
pub enum AclOperation {
    Unknown = 0,
    Any = 1,
    All = 2,
    Read = 3,
    Write = 4,
    Create = 5,
    Delete = 6,
    Alter = 7,
    Describe = 8,
    ClusterAction = 9,
    DescribeConfigs = 10,
    AlterConfigs = 11,
    IdempotentWrite = 12,
    CreateTokens = 13,
    DescribeTokens = 14,
    TwoPhaseCommit = 15,
}

impl AclOperation {
    pub fn code(self) -> i8 {
        self as i8
    }

    /// Kafka's names (`AclOperation.toString()` upper-cased with underscores), as tools print
    /// them.
    pub fn name(self) -> &'static str {
        match self {
            Self::Unknown => "UNKNOWN",
            Self::Any => "ANY",
            Self::All => "ALL",
            Self::Read => "READ",
            Self::Write => "WRITE",
            Self::Create => "CREATE",
            Self::Delete => "DELETE",
            Self::Alter => "ALTER",
            Self::Describe => "DESCRIBE",
            Self::ClusterAction => "CLUSTER_ACTION",
            Self::DescribeConfigs => "DESCRIBE_CONFIGS",
            Self::AlterConfigs => "ALTER_CONFIGS",
            Self::IdempotentWrite => "IDEMPOTENT_WRITE",
            Self::CreateTokens => "CREATE_TOKENS",
            Self::DescribeTokens => "DESCRIBE_TOKENS",
            Self::TwoPhaseCommit => "TWO_PHASE_COMMIT",
        }
    }
}

/// Kafka's `ResourceType`, with its wire codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(i8)]
pub enum ResourceType {
    Unknown = 0,
    Any = 1,
    Topic = 2,
    Group = 3,
    Cluster = 4,
    TransactionalId = 5,
    DelegationToken = 6,
    User = 7,
}

impl ResourceType {
    pub fn code(self) -> i8 {
        self as i8
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Unknown => "UNKNOWN",
            Self::Any => "ANY",
            Self::Topic => "TOPIC",
            Self::Group => "GROUP",
            Self::Cluster => "CLUSTER",
            Self::TransactionalId => "TRANSACTIONAL_ID",
            Self::DelegationToken => "DELEGATION_TOKEN",
            Self::User => "USER",
        }
    }
}

/// Kafka's `PatternType`, with its wire codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(i8)]
pub enum PatternType {
    Unknown = 0,
    Any = 1,
    Match = 2,
    Literal = 3,
    Prefixed = 4,
}

/// The one cluster resource's name (Kafka's `Resource.CLUSTER_NAME`).
pub const CLUSTER_NAME: &str = "kafka-cluster";

/// Kafka's `ResourcePattern`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ResourcePattern {
    pub resource_type: ResourceType,
    pub name: String,
    pub pattern_type: PatternType,
}

impl ResourcePattern {
    pub fn literal(resource_type: ResourceType, name: impl Into<String>) -> Self {
        Self {
            resource_type,
            name: name.into(),
            pattern_type: PatternType::Literal,
        }
    }

    pub fn cluster() -> Self {
        Self::literal(ResourceType::Cluster, CLUSTER_NAME)
    }
}

/// Kafka's `Action`: one operation on one resource, how many times the request refers to it,
/// and whether the authorizer's audit log should record the outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Action {
    pub operation: AclOperation,
    pub resource: ResourcePattern,
    pub resource_reference_count: u32,
    pub log_if_allowed: bool,
    pub log_if_denied: bool,
}

impl Action {
    pub fn new(operation: AclOperation, resource: ResourcePattern) -> Self {
        Self {
            operation,
            resource,
            resource_reference_count: 1,
            log_if_allowed: true,
            log_if_denied: true,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthorizationResult {
    Allowed,
    Denied,
}

/// What an authorizer may know about a request (Kafka's `AuthorizableRequestContext`).
pub trait AuthorizableRequestContext {
    fn listener_name(&self) -> &str;
    fn security_protocol_name(&self) -> &'static str;
    fn principal(&self) -> &KafkaPrincipal;
    fn client_address(&self) -> SocketAddr;
    /// The API key of the request.
    fn request_type(&self) -> i16;
    fn request_version(&self) -> i16;
    fn client_id(&self) -> &str;
    fn correlation_id(&self) -> i32;
}

/// Kafka's `Authorizer`: one result per action, in order.
pub trait Authorizer: Send + Sync + 'static {
    fn authorize(
        &self,
        ctx: &dyn AuthorizableRequestContext,
        actions: &[Action],
    ) -> Vec<AuthorizationResult>;

    /// Whether the principal may perform `op` on at least one resource of `resource_type`
    /// (Kafka's `authorizeByResourceType`, e.g. IDEMPOTENT_WRITE granted through WRITE on any
    /// topic).
    fn authorize_by_resource_type(
        &self,
        ctx: &dyn AuthorizableRequestContext,
        op: AclOperation,
        resource_type: ResourceType,
    ) -> AuthorizationResult;
}

/// No authorizer configured: everything is allowed (Kafka without `authorizer.class.name`).
#[derive(Debug, Default, Clone, Copy)]
pub struct AllowAll;

impl Authorizer for AllowAll {
    fn authorize(
        &self,
        _ctx: &dyn AuthorizableRequestContext,
        actions: &[Action],
    ) -> Vec<AuthorizationResult> {
        vec![AuthorizationResult::Allowed; actions.len()]
    }

    fn authorize_by_resource_type(
        &self,
        _ctx: &dyn AuthorizableRequestContext,
        _op: AclOperation,
        _resource_type: ResourceType,
    ) -> AuthorizationResult {
        AuthorizationResult::Allowed
    }
}

/// The questions handlers ask (Kafka's `AuthHelper`), over the configured authorizer.
#[derive(Clone)]
pub struct AuthHelper {
    authorizer: Arc<dyn Authorizer>,
}

impl std::fmt::Debug for AuthHelper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AuthHelper")
    }
}

impl Default for AuthHelper {
    fn default() -> Self {
        Self::new(Arc::new(AllowAll))
    }
}

impl AuthHelper {
    pub fn new(authorizer: Arc<dyn Authorizer>) -> Self {
        Self { authorizer }
    }

    /// May the request perform `op` on the literal resource `(resource_type, name)`?
    pub fn authorize(
        &self,
        ctx: &dyn AuthorizableRequestContext,
        op: AclOperation,
        resource_type: ResourceType,
        name: &str,
    ) -> bool {
        let action = Action::new(op, ResourcePattern::literal(resource_type, name));
        self.authorizer
            .authorize(ctx, std::slice::from_ref(&action))[0]
            == AuthorizationResult::Allowed
    }

    /// `op` on the cluster resource (CLUSTER_ACTION for broker-to-broker and controller APIs,
    /// ALTER / DESCRIBE for cluster administration).
    pub fn authorize_cluster(
        &self,
        ctx: &dyn AuthorizableRequestContext,
        op: AclOperation,
    ) -> bool {
        self.authorize(ctx, op, ResourceType::Cluster, CLUSTER_NAME)
    }

    pub fn authorize_by_resource_type(
        &self,
        ctx: &dyn AuthorizableRequestContext,
        op: AclOperation,
        resource_type: ResourceType,
    ) -> bool {
        self.authorizer
            .authorize_by_resource_type(ctx, op, resource_type)
            == AuthorizationResult::Allowed
    }

    /// Which of `names` the request may perform `op` on, asked in one call with each distinct
    /// name once and its reference count (Kafka's `filterByAuthorized`). The answer keeps the
    /// order of first appearance.
    pub fn filter_authorized<'a>(
        &self,
        ctx: &dyn AuthorizableRequestContext,
        op: AclOperation,
        resource_type: ResourceType,
        names: impl IntoIterator<Item = &'a str>,
    ) -> std::collections::HashSet<String> {
        let mut order: Vec<&str> = Vec::new();
        let mut counts: std::collections::HashMap<&str, u32> = std::collections::HashMap::new();
        for n in names {
            let c = counts.entry(n).or_insert(0);
            if *c == 0 {
                order.push(n);
            }
            *c += 1;
        }
        let actions: Vec<Action> = order
            .iter()
            .map(|n| Action {
                resource_reference_count: counts[n],
                ..Action::new(op, ResourcePattern::literal(resource_type, *n))
            })
            .collect();
        let results = self.authorizer.authorize(ctx, &actions);
        order
            .into_iter()
            .zip(results)
            .filter(|(_, r)| *r == AuthorizationResult::Allowed)
            .map(|(n, _)| n.to_string())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Ctx(KafkaPrincipal);

    impl AuthorizableRequestContext for Ctx {
        fn listener_name(&self) -> &str {
            "PLAINTEXT"
        }
        fn security_protocol_name(&self) -> &'static str {
            "PLAINTEXT"
        }
        fn principal(&self) -> &KafkaPrincipal {
            &self.0
        }
        fn client_address(&self) -> SocketAddr {
            SocketAddr::from(([127, 0, 0, 1], 1))
        }
        fn request_type(&self) -> i16 {
            1
        }
        fn request_version(&self) -> i16 {
            12
        }
        fn client_id(&self) -> &str {
            "c"
        }
        fn correlation_id(&self) -> i32 {
            7
        }
    }

    /// Allows READ on topics starting with `ok`, records what it was asked.
    #[derive(Default)]
    struct Recording(parking_lot::Mutex<Vec<Action>>);

    impl Authorizer for Recording {
        fn authorize(
            &self,
            _ctx: &dyn AuthorizableRequestContext,
            actions: &[Action],
        ) -> Vec<AuthorizationResult> {
            self.0.lock().extend(actions.iter().cloned());
            actions
                .iter()
                .map(|a| {
                    if a.operation == AclOperation::Read && a.resource.name.starts_with("ok") {
                        AuthorizationResult::Allowed
                    } else {
                        AuthorizationResult::Denied
                    }
                })
                .collect()
        }

        fn authorize_by_resource_type(
            &self,
            _ctx: &dyn AuthorizableRequestContext,
            _op: AclOperation,
            _resource_type: ResourceType,
        ) -> AuthorizationResult {
            AuthorizationResult::Denied
        }
    }

    #[test]
    fn allow_all_allows_everything() {
        let ctx = Ctx(KafkaPrincipal::anonymous());
        let h = AuthHelper::default();
        assert!(h.authorize_cluster(&ctx, AclOperation::ClusterAction));
        assert!(h.authorize(&ctx, AclOperation::Write, ResourceType::Topic, "t"));
        assert!(h.authorize_by_resource_type(&ctx, AclOperation::Write, ResourceType::Topic));
        assert_eq!(
            h.filter_authorized(&ctx, AclOperation::Read, ResourceType::Topic, ["a", "b"])
                .len(),
            2
        );
    }

    #[test]
    fn filter_asks_once_per_name_with_reference_counts() {
        let ctx = Ctx(KafkaPrincipal::anonymous());
        let rec = Arc::new(Recording::default());
        let h = AuthHelper::new(rec.clone());
        let ok = h.filter_authorized(
            &ctx,
            AclOperation::Read,
            ResourceType::Topic,
            ["ok-1", "no", "ok-1", "ok-2"],
        );
        assert_eq!(ok, ["ok-1", "ok-2"].iter().map(|s| s.to_string()).collect());
        let asked = rec.0.lock().clone();
        assert_eq!(asked.len(), 3);
        assert_eq!(asked[0].resource.name, "ok-1");
        assert_eq!(asked[0].resource_reference_count, 2);
        assert_eq!(asked[1].resource.name, "no");
        assert!(!h.authorize_cluster(&ctx, AclOperation::ClusterAction));
        assert_eq!(
            rec.0.lock().last().unwrap().resource,
            ResourcePattern::cluster()
        );
    }

    #[test]
    fn codes_are_kafkas() {
        assert_eq!(AclOperation::ClusterAction.code(), 9);
        assert_eq!(AclOperation::TwoPhaseCommit.code(), 15);
        assert_eq!(ResourceType::TransactionalId.code(), 5);
        assert_eq!(ResourceType::User.code(), 7);
        assert_eq!(PatternType::Prefixed as i8, 4);
    }
}

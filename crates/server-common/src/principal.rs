//! Kafka's `KafkaPrincipal`: who a request is from, as authentication established it.

/// `type:name`, e.g. `User:ANONYMOUS`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KafkaPrincipal {
    pub principal_type: String,
    pub name: String,
    /// Authenticated with a delegation token (carried through an Envelope).
    pub token_authenticated: bool,
}

impl KafkaPrincipal {
    /// The principal of a connection no mechanism authenticated (Kafka's `ANONYMOUS`).
    pub fn anonymous() -> Self {
        Self {
            principal_type: "User".into(),
            name: "ANONYMOUS".into(),
            token_authenticated: false,
        }
    }
}

impl std::fmt::Display for KafkaPrincipal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.principal_type, self.name)
    }
}

//! What every layer of the broker shares, below the network, the replicas and the APIs:
//!
//! - [`authorizer`]: Kafka's authorizer interface (`Authorizer`, `Action`, `AclOperation`,
//!   `ResourceType`, `AuthorizableRequestContext`) and [`authorizer::AuthHelper`], the
//!   questions handlers ask; [`authorizer::AllowAll`] is Kafka without an authorizer.
//! - [`quota`]: the quota interface recorded against by the pipeline (request time) and the
//!   data path (bytes); [`quota::Unlimited`] is Kafka without quotas.
//! - [`request_metrics`]: per-API request counts, error counts and phase-time histograms.
//! - [`principal`]: Kafka's principal type.

pub mod authorizer;
pub mod principal;
pub mod quota;
pub mod request_metrics;

pub use principal::KafkaPrincipal;

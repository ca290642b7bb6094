//! The quota interface the request pipeline and the data-path handlers record against (Kafka's
//! `ClientQuotaManager` for produce and fetch bytes, `ClientRequestQuotaManager` for request
//! time): each recording returns how long the client must be throttled. The response then
//! carries `throttle_time_ms` and the connection reads nothing more from the client for that
//! long (KIP-219: Kafka mutes the channel). [`Unlimited`] is Kafka without quotas configured.

use std::time::Duration;

use crate::principal::KafkaPrincipal;

/// Kafka's `QuotaType`s that requests are recorded against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QuotaType {
    /// Bytes produced (`producer_byte_rate`).
    Produce,
    /// Bytes fetched by consumers (`consumer_byte_rate`).
    Fetch,
    /// Time spent handling requests, as a percentage of one thread (`request_percentage`).
    Request,
    /// Mutations of partitions (`controller_mutation_rate`).
    ControllerMutation,
}

/// Records usage and answers throttle times.
pub trait QuotaManager: Send + Sync + 'static {
    /// Records `value` (bytes, nanoseconds of handling time, or partition mutations) for the
    /// client and answers how long to throttle it (zero: not at all).
    fn record(
        &self,
        kind: QuotaType,
        principal: &KafkaPrincipal,
        client_id: &str,
        value: f64,
    ) -> Duration;
}

/// No quotas configured: never throttles.
#[derive(Debug, Default, Clone, Copy)]
pub struct Unlimited;

impl QuotaManager for Unlimited {
    fn record(&self, _: QuotaType, _: &KafkaPrincipal, _: &str, _: f64) -> Duration {
        Duration::ZERO
    }
}

/// `throttle_time_ms` as the responses carry it: milliseconds, saturated to `i32`.
pub fn throttle_time_ms(d: Duration) -> i32 {
    i32::try_from(d.as_millis()).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unlimited_never_throttles_and_ms_saturate() {
        let p = KafkaPrincipal::anonymous();
        assert_eq!(
            Unlimited.record(QuotaType::Produce, &p, "c", 1e12),
            Duration::ZERO
        );
        assert_eq!(throttle_time_ms(Duration::from_millis(1500)), 1500);
        assert_eq!(throttle_time_ms(Duration::from_secs(u64::MAX)), i32::MAX);
    }
}

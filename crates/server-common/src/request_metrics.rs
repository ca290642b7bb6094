//! Per-API request metrics, as Kafka's `RequestChannel.Metrics` keeps them
//! (`kafka.network:type=RequestMetrics,name=...,request=<API>`): requests and errors counted,
//! and the time of each phase of a request in a histogram:
//!
//! | phase | Kafka's name | from | to |
//! |---|---|---|---|
//! | queue | `RequestQueueTimeMs` | the request's bytes all read | its handling starts (waits for `queued.max.requests`, `queued.max.request.bytes`) |
//! | local | `LocalTimeMs` | handling starts | the response is ready, minus remote time |
//! | remote | `RemoteTimeMs` | the request parks (acks=all produce, long-poll fetch, a forwarded request) | it is woken |
//! | throttle | `ThrottleTimeMs` | | the throttle time the quotas imposed |
//! | response send | `ResponseSendTimeMs` | the response is ready | its last byte is written |
//! | total | `TotalTimeMs` | the request's bytes all read | its response written |
//!
//! Everything is lock-free (atomics) so that recording costs a few nanoseconds on the request
//! path; the set of APIs is fixed when the metrics are created (the registry's), so lookups
//! take no lock either. The Prometheus exporter of the operations issue reads [`ApiMetrics`]
//! through [`RequestMetrics::apis`].

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the histogram buckets, in microseconds (the last bucket is everything
/// above): 50 µs to 30 s, roughly 1-2.5-5 per decade, as Prometheus buckets for latencies are.
pub const BUCKET_BOUNDS_US: [u64; 18] = [
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 5_000_000, 10_000_000, 30_000_000,
];

/// A latency histogram with fixed buckets.
#[derive(Debug, Default)]
pub struct Histogram {
    buckets: [AtomicU64; BUCKET_BOUNDS_US.len() + 1],
    count: AtomicU64,
    sum_us: AtomicU64,
}

impl Histogram {
    pub fn record(&self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let i = BUCKET_BOUNDS_US.partition_point(|&b| b < us);
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    pub fn sum(&self) -> Duration {
        Duration::from_micros(self.sum_us.load(Ordering::Relaxed))
    }

    /// Per bucket (upper bound in µs, `None` for the last), how many observations fell in it.
    pub fn buckets(&self) -> Vec<(Option<u64>, u64)> {
        BUCKET_BOUNDS_US
            .iter()
            .map(|&b| Some(b))
            .chain(std::iter::once(None))
            .zip(self.buckets.iter().map(|c| c.load(Ordering::Relaxed)))
            .collect()
    }
}

/// The error codes counted per API: Kafka's codes run from -1 (UNKNOWN_SERVER_ERROR) up;
/// codes beyond the table are counted as [`ApiMetrics::other_errors`].
const ERROR_CODES: usize = 256;

/// One API's counters and histograms.
#[derive(Debug)]
pub struct ApiMetrics {
    pub api_key: i16,
    pub name: &'static str,
    requests: AtomicU64,
    /// Index `code + 1`: how many times a response carried the code (NONE included, as
    /// Kafka's `ErrorsPerSec{error=NONE}`).
    errors: Box<[AtomicU64; ERROR_CODES]>,
    other_errors: AtomicU64,
    pub request_queue: Histogram,
    pub local: Histogram,
    pub remote: Histogram,
    pub throttle: Histogram,
    pub response_send: Histogram,
    pub total: Histogram,
}

impl ApiMetrics {
    fn new(api_key: i16, name: &'static str) -> Self {
        Self {
            api_key,
            name,
            requests: AtomicU64::new(0),
            errors: Box::new(std::array::from_fn(|_| AtomicU64::new(0))),
            other_errors: AtomicU64::new(0),
            request_queue: Histogram::default(),
            local: Histogram::default(),
            remote: Histogram::default(),
            throttle: Histogram::default(),
            response_send: Histogram::default(),
            total: Histogram::default(),
        }
    }

    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// `(error code, count)` for every code seen.
    pub fn errors(&self) -> Vec<(i16, u64)> {
        self.errors
            .iter()
            .enumerate()
            .map(|(i, c)| (i as i16 - 1, c.load(Ordering::Relaxed)))
            .filter(|(_, n)| *n > 0)
            .collect()
    }

    pub fn other_errors(&self) -> u64 {
        self.other_errors.load(Ordering::Relaxed)
    }

    fn count_error(&self, code: i16, n: u64) {
        match usize::try_from(i32::from(code) + 1) {
            Ok(i) if i < ERROR_CODES => {
                self.errors[i].fetch_add(n, Ordering::Relaxed);
            }
            _ => {
                self.other_errors.fetch_add(n, Ordering::Relaxed);
            }
        }
    }
}

/// The times of one request, as the pipeline measured them.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RequestTimes {
    pub queue: Duration,
    /// Handling, remote time included (the pipeline subtracts it for `local`).
    pub handling: Duration,
    pub remote: Duration,
    pub throttle: Duration,
    pub response_send: Duration,
}

/// The metrics of every API a listener serves.
#[derive(Debug)]
pub struct RequestMetrics {
    apis: BTreeMap<i16, ApiMetrics>,
}

impl RequestMetrics {
    /// Metrics for the APIs `(key, name)`.
    pub fn new(apis: impl IntoIterator<Item = (i16, &'static str)>) -> Self {
        Self {
            apis: apis
                .into_iter()
                .map(|(k, n)| (k, ApiMetrics::new(k, n)))
                .collect(),
        }
    }

    pub fn api(&self, api_key: i16) -> Option<&ApiMetrics> {
        self.apis.get(&api_key)
    }

    pub fn apis(&self) -> impl Iterator<Item = &ApiMetrics> {
        self.apis.values()
    }

    /// Records one completed request of `api_key`: its times and the error codes its response
    /// carried (`(code, occurrences)`, Kafka's `AbstractResponse.errorCounts`).
    pub fn record(&self, api_key: i16, times: RequestTimes, error_counts: &[(i16, u64)]) {
        let Some(m) = self.apis.get(&api_key) else {
            return;
        };
        m.requests.fetch_add(1, Ordering::Relaxed);
        for &(code, n) in error_counts {
            m.count_error(code, n);
        }
        let local = times.handling.saturating_sub(times.remote);
        m.request_queue.record(times.queue);
        m.local.record(local);
        m.remote.record(times.remote);
        m.throttle.record(times.throttle);
        m.response_send.record(times.response_send);
        m.total
            .record(times.queue + times.handling + times.response_send);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_by_upper_bound() {
        let h = Histogram::default();
        h.record(Duration::from_micros(50));
        h.record(Duration::from_micros(51));
        h.record(Duration::from_secs(60));
        let b = h.buckets();
        assert_eq!(b[0], (Some(50), 1), "50 µs is in the ≤50 µs bucket");
        assert_eq!(b[1], (Some(100), 1));
        assert_eq!(*b.last().unwrap(), (None, 1));
        assert_eq!(h.count(), 3);
        assert_eq!(h.sum(), Duration::from_micros(60_000_101));
    }

    #[test]
    fn record_counts_requests_errors_and_phases() {
        let m = RequestMetrics::new([(0, "Produce"), (1, "Fetch")]);
        let t = RequestTimes {
            queue: Duration::from_micros(10),
            handling: Duration::from_millis(30),
            remote: Duration::from_millis(25),
            throttle: Duration::ZERO,
            response_send: Duration::from_micros(40),
        };
        m.record(1, t, &[(0, 3), (6, 1), (-1, 1), (i16::MAX, 2)]);
        m.record(1, t, &[(0, 1)]);
        m.record(99, t, &[]);
        let f = m.api(1).unwrap();
        assert_eq!(f.requests(), 2);
        assert_eq!(f.errors(), vec![(-1, 1), (0, 4), (6, 1)]);
        assert_eq!(f.other_errors(), 2);
        assert_eq!(
            f.local.sum(),
            Duration::from_millis(10),
            "handling minus remote"
        );
        assert_eq!(f.remote.sum(), Duration::from_millis(50));
        assert_eq!(f.total.sum(), Duration::from_micros(2 * 30_050));
        assert_eq!(m.api(0).unwrap().requests(), 0);
        assert!(m.api(99).is_none());
    }
}

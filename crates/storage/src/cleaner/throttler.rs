//! [`Throttler`]: Kafka's cleaner I/O throttle (`log.cleaner.io.max.bytes.per.second`), shared
//! by every cleaner thread so the limit is on their sum.
//!
//! As Kafka's `Throttler`: bytes are counted per period; once a period of `check_interval_ms`
//! (300 ms for the cleaner) has passed with something observed, a rate above the desired one
//! sleeps the caller as long as it takes for the period's bytes to fit the rate. The sleep is
//! taken while holding the throttle's lock, as Kafka's `synchronized` block does, so the other
//! cleaner threads wait too (they share the budget). Cleaner threads are plain threads, never
//! async tasks.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// The cleaner's period, as Kafka's `LogCleaner` creates its throttler.
pub const CLEANER_CHECK_INTERVAL_MS: u64 = 300;

/// Time as the throttle sees it: injected by tests so no test sleeps.
pub trait ThrottleClock: Send + Sync {
    fn nanos(&self) -> u64;
    fn sleep_ms(&self, ms: u64);
}

/// The real clock: a monotonic instant and `thread::sleep`.
struct SystemClock(Instant);

impl ThrottleClock for SystemClock {
    fn nanos(&self) -> u64 {
        self.0.elapsed().as_nanos() as u64
    }
    fn sleep_ms(&self, ms: u64) {
        std::thread::sleep(Duration::from_millis(ms));
    }
}

struct Period {
    start_ns: u64,
    observed: f64,
}

pub struct Throttler {
    /// Bytes per second; `f64::MAX` (Kafka's default `Double.MaxValue`) never sleeps.
    desired_rate_per_sec: Mutex<f64>,
    check_interval_ns: u64,
    clock: Arc<dyn ThrottleClock>,
    period: Mutex<Period>,
}

impl std::fmt::Debug for Throttler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Throttler")
            .field("desired_rate_per_sec", &self.desired_rate_per_sec())
            .finish()
    }
}

impl Throttler {
    /// The cleaner's throttle at `max_bytes_per_second`, on the system clock.
    pub fn new(max_bytes_per_second: f64) -> Self {
        Self::with_clock(
            max_bytes_per_second,
            CLEANER_CHECK_INTERVAL_MS,
            Arc::new(SystemClock(Instant::now())),
        )
    }

    pub fn with_clock(
        desired_rate_per_sec: f64,
        check_interval_ms: u64,
        clock: Arc<dyn ThrottleClock>,
    ) -> Self {
        let start_ns = clock.nanos();
        Self {
            desired_rate_per_sec: Mutex::new(desired_rate_per_sec),
            check_interval_ns: check_interval_ms * 1_000_000,
            clock,
            period: Mutex::new(Period {
                start_ns,
                observed: 0.0,
            }),
        }
    }

    /// A dynamic `log.cleaner.io.max.bytes.per.second` change (Kafka's
    /// `updateDesiredRatePerSec`).
    pub fn update_desired_rate_per_sec(&self, rate: f64) {
        *self.desired_rate_per_sec.lock() = rate;
    }

    pub fn desired_rate_per_sec(&self) -> f64 {
        *self.desired_rate_per_sec.lock()
    }

    /// Counts `observed` bytes and sleeps if the period's rate is above the desired one.
    pub fn maybe_throttle(&self, observed: f64) {
        let rate = self.desired_rate_per_sec();
        let mut period = self.period.lock();
        period.observed += observed;
        let now = self.clock.nanos();
        let elapsed_ns = now.saturating_sub(period.start_ns);
        if elapsed_ns > self.check_interval_ns && period.observed > 0.0 {
            let rate_in_secs = period.observed * 1e9 / elapsed_ns as f64;
            if rate_in_secs > rate {
                let desired_rate_ms = rate / 1000.0;
                let elapsed_ms = elapsed_ns / 1_000_000;
                let sleep = (period.observed / desired_rate_ms - elapsed_ms as f64).round();
                if sleep > 0.0 {
                    self.clock.sleep_ms(sleep as u64);
                }
            }
            period.start_ns = self.clock.nanos();
            period.observed = 0.0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[derive(Default)]
    struct FakeClock {
        nanos: AtomicU64,
        slept_ms: AtomicU64,
    }

    impl ThrottleClock for FakeClock {
        fn nanos(&self) -> u64 {
            self.nanos.load(Ordering::SeqCst)
        }
        fn sleep_ms(&self, ms: u64) {
            self.slept_ms.fetch_add(ms, Ordering::SeqCst);
            self.nanos.fetch_add(ms * 1_000_000, Ordering::SeqCst);
        }
    }

    #[test]
    fn sleeps_to_bring_the_rate_down_and_never_within_a_period() {
        let clock = Arc::new(FakeClock::default());
        let t = Throttler::with_clock(1000.0, 100, clock.clone());
        // Within the period: counted, no sleep.
        t.maybe_throttle(5000.0);
        assert_eq!(clock.slept_ms.load(Ordering::SeqCst), 0);
        // 200 ms later with 10000 bytes observed at 1000 B/s: 10 s worth, 0.2 s elapsed.
        clock.nanos.fetch_add(200_000_000, Ordering::SeqCst);
        t.maybe_throttle(5000.0);
        assert_eq!(clock.slept_ms.load(Ordering::SeqCst), 9800);
        // Under the rate: no sleep.
        clock.nanos.fetch_add(1_000_000_000, Ordering::SeqCst);
        t.maybe_throttle(500.0);
        assert_eq!(clock.slept_ms.load(Ordering::SeqCst), 9800);
        // An unlimited throttle never sleeps.
        t.update_desired_rate_per_sec(f64::MAX);
        clock.nanos.fetch_add(200_000_000, Ordering::SeqCst);
        t.maybe_throttle(1e12);
        assert_eq!(clock.slept_ms.load(Ordering::SeqCst), 9800);
    }
}

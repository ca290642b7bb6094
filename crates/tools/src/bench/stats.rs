//! The pure parts of `strom bench`: throughput, latency percentiles and their formatting.

use std::time::Duration;

use hdrhistogram::Histogram;

/// Bytes in a megabyte as printed by `strom bench` (decimal, like `dd`, `fio` and `iperf3`'s
/// MB/s; Kafka's perf tools print MiB: multiply theirs by 1.048576 to compare).
pub const MB: f64 = 1_000_000.0;

/// A latency histogram in microseconds, 1 us to 1 h, 3 significant digits.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds")
}

/// Records `d` in `h` (microseconds, clamped to the histogram's range).
pub fn record(h: &mut Histogram<u64>, d: Duration) {
    let us = (d.as_micros() as u64).clamp(1, h.high());
    h.saturating_record(us);
}

/// Latency percentiles in microseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Percentiles {
    pub count: u64,
    pub mean: f64,
    pub p50: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
}

/// The percentiles of `h`, or `None` if it is empty.
pub fn percentiles(h: &Histogram<u64>) -> Option<Percentiles> {
    if h.is_empty() {
        return None;
    }
    Some(Percentiles {
        count: h.len(),
        mean: h.mean(),
        p50: h.value_at_quantile(0.50),
        p99: h.value_at_quantile(0.99),
        p999: h.value_at_quantile(0.999),
        max: h.max(),
    })
}

/// Throughput of a run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Throughput {
    pub records: u64,
    pub bytes: u64,
    pub elapsed: Duration,
}

impl Throughput {
    pub fn records_per_sec(&self) -> f64 {
        let s = self.elapsed.as_secs_f64();
        if s > 0.0 {
            self.records as f64 / s
        } else {
            0.0
        }
    }

    pub fn mb_per_sec(&self) -> f64 {
        let s = self.elapsed.as_secs_f64();
        if s > 0.0 {
            self.bytes as f64 / MB / s
        } else {
            0.0
        }
    }
}

/// Microseconds as milliseconds with three decimals, e.g. `1.234 ms`.
pub fn fmt_ms(us: u64) -> String {
    format!("{:.3} ms", us as f64 / 1000.0)
}

/// The human-readable summary of a run: throughput, then each named latency histogram.
pub fn format_report(
    what: &str,
    t: &Throughput,
    latencies: &[(&str, Option<Percentiles>)],
) -> String {
    let mut out = format!(
        "{what}: {} records, {:.1} MB in {:.3} s: {:.0} records/s, {:.1} MB/s\n",
        t.records,
        t.bytes as f64 / MB,
        t.elapsed.as_secs_f64(),
        t.records_per_sec(),
        t.mb_per_sec()
    );
    for (name, p) in latencies {
        match p {
            Some(p) => out.push_str(&format!(
                "{name} latency: p50 {}, p99 {}, p99.9 {}, max {}, mean {} ({} samples)\n",
                fmt_ms(p.p50),
                fmt_ms(p.p99),
                fmt_ms(p.p999),
                fmt_ms(p.max),
                fmt_ms(p.mean.round() as u64),
                p.count
            )),
            None => out.push_str(&format!("{name} latency: no samples\n")),
        }
    }
    out
}

/// One machine-readable line (`key=value` pairs) for scripts, e.g.
/// `RESULT bench=produce records=1000 ... p99_ms=1.234`.
pub fn format_result_line(
    what: &str,
    t: &Throughput,
    latencies: &[(&str, Option<Percentiles>)],
) -> String {
    let mut out = format!(
        "RESULT bench={what} records={} bytes={} secs={:.3} records_per_sec={:.0} mb_per_sec={:.1}",
        t.records,
        t.bytes,
        t.elapsed.as_secs_f64(),
        t.records_per_sec(),
        t.mb_per_sec()
    );
    for (name, p) in latencies {
        if let Some(p) = p {
            for (q, v) in [
                ("p50", p.p50),
                ("p99", p.p99),
                ("p999", p.p999),
                ("max", p.max),
            ] {
                out.push_str(&format!(" {name}_{q}_ms={:.3}", v as f64 / 1000.0));
            }
        }
    }
    out
}

/// The bench payload header: `STRMBNCH` then the send time in microseconds since the Unix
/// epoch (big endian). Lets `strom bench consume` measure end-to-end latency of records that
/// `strom bench produce` sends while it runs.
pub const PAYLOAD_MAGIC: &[u8; 8] = b"STRMBNCH";
pub const PAYLOAD_HEADER_LEN: usize = 16;

/// Writes the header into `buf` (if it is long enough).
pub fn stamp_payload(buf: &mut [u8], micros_since_epoch: u64) {
    if buf.len() >= PAYLOAD_HEADER_LEN {
        buf[..8].copy_from_slice(PAYLOAD_MAGIC);
        buf[8..16].copy_from_slice(&micros_since_epoch.to_be_bytes());
    }
}

/// The send time stamped into a payload, if it has the header.
pub fn payload_stamp(buf: &[u8]) -> Option<u64> {
    if buf.len() >= PAYLOAD_HEADER_LEN && &buf[..8] == PAYLOAD_MAGIC {
        let mut b = [0u8; 8];
        b.copy_from_slice(&buf[8..16]);
        Some(u64::from_be_bytes(b))
    } else {
        None
    }
}

/// Microseconds since the Unix epoch.
pub fn now_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_uniform_values() {
        let mut h = new_histogram();
        for us in 1..=10_000u64 {
            record(&mut h, Duration::from_micros(us));
        }
        let p = percentiles(&h).unwrap();
        assert_eq!(p.count, 10_000);
        // 3 significant digits: within 0.1 %.
        let close = |a: u64, b: u64| (a as f64 - b as f64).abs() <= b as f64 * 0.001 + 1.0;
        assert!(close(p.p50, 5_000), "p50 {}", p.p50);
        assert!(close(p.p99, 9_900), "p99 {}", p.p99);
        assert!(close(p.p999, 9_990), "p99.9 {}", p.p999);
        assert!(close(p.max, 10_000), "max {}", p.max);
        assert!((p.mean - 5_000.5).abs() < 10.0, "mean {}", p.mean);
    }

    #[test]
    fn percentiles_with_outliers_and_empty() {
        assert_eq!(percentiles(&new_histogram()), None);
        let mut h = new_histogram();
        for _ in 0..998 {
            record(&mut h, Duration::from_micros(100));
        }
        record(&mut h, Duration::from_millis(50));
        record(&mut h, Duration::from_secs(2));
        let p = percentiles(&h).unwrap();
        assert_eq!(p.p50, 100);
        assert_eq!(p.p99, 100);
        // p99.9 of 1000 samples is the 999th value: the 50 ms outlier.
        assert!((p.p999 as i64 - 50_000).abs() <= 50, "p99.9 {}", p.p999);
        assert!((p.max as i64 - 2_000_000).abs() <= 2_000, "max {}", p.max);
        // Zero and absurd durations are clamped, not dropped.
        record(&mut h, Duration::ZERO);
        record(&mut h, Duration::from_secs(100_000));
        assert_eq!(h.len(), 1002);
    }

    #[test]
    fn throughput_and_formatting() {
        let t = Throughput {
            records: 1_000_000,
            bytes: 1_024_000_000,
            elapsed: Duration::from_secs(2),
        };
        assert_eq!(t.records_per_sec(), 500_000.0);
        assert_eq!(t.mb_per_sec(), 512.0);
        let zero = Throughput {
            elapsed: Duration::ZERO,
            ..t
        };
        assert_eq!(zero.records_per_sec(), 0.0);
        assert_eq!(fmt_ms(1234), "1.234 ms");
        let p = Percentiles {
            count: 10,
            mean: 1500.4,
            p50: 1000,
            p99: 2500,
            p999: 3000,
            max: 4000,
        };
        let report = format_report("produce", &t, &[("send->ack", Some(p)), ("e2e", None)]);
        assert_eq!(
            report,
            "produce: 1000000 records, 1024.0 MB in 2.000 s: 500000 records/s, 512.0 MB/s\n\
             send->ack latency: p50 1.000 ms, p99 2.500 ms, p99.9 3.000 ms, max 4.000 ms, \
             mean 1.500 ms (10 samples)\n\
             e2e latency: no samples\n"
        );
        let line = format_result_line("produce", &t, &[("lat", Some(p)), ("e2e", None)]);
        assert_eq!(
            line,
            "RESULT bench=produce records=1000000 bytes=1024000000 secs=2.000 \
             records_per_sec=500000 mb_per_sec=512.0 lat_p50_ms=1.000 lat_p99_ms=2.500 \
             lat_p999_ms=3.000 lat_max_ms=4.000"
        );
    }

    #[test]
    fn payload_header_round_trip() {
        let mut buf = vec![0u8; 64];
        assert_eq!(payload_stamp(&buf), None);
        stamp_payload(&mut buf, 1_700_000_000_123_456);
        assert_eq!(payload_stamp(&buf), Some(1_700_000_000_123_456));
        let mut short = vec![0u8; 8];
        stamp_payload(&mut short, 5);
        assert_eq!(payload_stamp(&short), None);
        assert_eq!(short, vec![0u8; 8]);
    }
}

//! `--to-datetime` and `--by-duration` parsing, as Kafka's tool parses them.

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn num(s: &str, len: usize, what: &str, input: &str) -> Result<i64, String> {
    if s.len() != len || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("Unparseable date: \"{input}\" (bad {what})"));
    }
    s.parse()
        .map_err(|_| format!("Unparseable date: \"{input}\""))
}

/// Parses `--to-datetime` as Kafka's `Utils.getDateTime`: `yyyy-MM-ddTHH:mm:ss.SSS` then `Z`,
/// `±hh`, `±hhmm` or `±hh:mm`; no zone means UTC. Returns epoch milliseconds.
pub fn parse_datetime(input: &str) -> Result<i64, String> {
    let Some((date, time)) = input.split_once('T') else {
        return Err(format!(
            "Error parsing timestamp. It does not contain a 'T' according to ISO8601 format: {input}"
        ));
    };
    let d: Vec<&str> = date.split('-').collect();
    if d.len() != 3 {
        return Err(format!("Unparseable date: \"{input}\""));
    }
    let (y, mo, da) = (
        num(d[0], 4, "year", input)?,
        num(d[1], 2, "month", input)?,
        num(d[2], 2, "day", input)?,
    );
    let zone_at = time.find(['Z', '+', '-']);
    let (clock, zone) = match zone_at {
        Some(i) => (&time[..i], &time[i..]),
        None => (time, "Z"),
    };
    let (hms, frac) = clock
        .split_once('.')
        .ok_or_else(|| format!("Unparseable date: \"{input}\" (expected HH:mm:ss.SSS)"))?;
    let t: Vec<&str> = hms.split(':').collect();
    if t.len() != 3 {
        return Err(format!("Unparseable date: \"{input}\""));
    }
    let (h, mi, s) = (
        num(t[0], 2, "hour", input)?,
        num(t[1], 2, "minute", input)?,
        num(t[2], 2, "second", input)?,
    );
    let ms = num(frac, 3, "milliseconds", input)?;
    let days_in_month = [
        31,
        if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 {
            29
        } else {
            28
        },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if !(1..=12).contains(&mo)
        || da < 1
        || da > days_in_month[(mo - 1) as usize]
        || h > 23
        || mi > 59
        || s > 59
    {
        return Err(format!("Unparseable date: \"{input}\""));
    }
    let offset_min = if zone == "Z" {
        0
    } else {
        let sign = if zone.starts_with('-') { -1 } else { 1 };
        let z = &zone[1..];
        let (zh, zm) = match z.len() {
            2 => (num(z, 2, "zone", input)?, 0),
            4 => (
                num(&z[..2], 2, "zone", input)?,
                num(&z[2..], 2, "zone", input)?,
            ),
            5 if &z[2..3] == ":" => (
                num(&z[..2], 2, "zone", input)?,
                num(&z[3..], 2, "zone", input)?,
            ),
            _ => return Err(format!("Unparseable date: \"{input}\" (bad zone)")),
        };
        if zh > 23 || zm > 59 {
            return Err(format!("Unparseable date: \"{input}\" (bad zone)"));
        }
        sign * (zh * 60 + zm)
    };
    let secs = days_from_civil(y, mo, da) * 86_400 + h * 3600 + mi * 60 + s - offset_min * 60;
    Ok(secs * 1000 + ms)
}

/// Parses `--by-duration` as Java's `Duration.parse` (`[-]PnDTnHnMn.nS`, each number may be
/// signed, case-insensitive). Returns milliseconds.
pub fn parse_duration_ms(input: &str) -> Result<i64, String> {
    let bad = || format!("Text cannot be parsed to a Duration: {input}");
    let s = input.to_ascii_uppercase();
    let (neg, rest) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(&s)),
    };
    let rest = rest.strip_prefix('P').ok_or_else(bad)?;
    let (days, time) = match rest.split_once('T') {
        Some((d, t)) => {
            if t.is_empty() {
                return Err(bad());
            }
            (d, Some(t))
        }
        None => (rest, None),
    };
    let mut total_ms: i128 = 0;
    let mut any = false;
    if !days.is_empty() {
        let n = days.strip_suffix('D').ok_or_else(bad)?;
        let n: i128 = n.parse().map_err(|_| bad())?;
        total_ms += n * 86_400_000;
        any = true;
    }
    if let Some(mut t) = time {
        for (unit, ms) in [('H', 3_600_000i128), ('M', 60_000)] {
            if let Some(i) = t.find(unit) {
                let n: i128 = t[..i].parse().map_err(|_| bad())?;
                total_ms += n * ms;
                t = &t[i + 1..];
                any = true;
            }
        }
        if !t.is_empty() {
            let n = t.strip_suffix('S').ok_or_else(bad)?;
            let (whole, frac) = n.split_once('.').unwrap_or((n, ""));
            if frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            let w: i128 = whole.parse().map_err(|_| bad())?;
            let f: i128 = format!("{frac:0<3}")[..3].parse().unwrap_or(0);
            let sign = if whole.starts_with('-') { -1 } else { 1 };
            total_ms += w * 1000 + sign * f;
            any = true;
        }
    }
    if !any {
        return Err(bad());
    }
    if neg {
        total_ms = -total_ms;
    }
    i64::try_from(total_ms).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datetimes_and_durations() {
        assert_eq!(parse_datetime("1970-01-01T00:00:00.000").unwrap(), 0);
        assert_eq!(
            parse_datetime("2024-02-29T12:34:56.789Z").unwrap(),
            1_709_210_096_789
        );
        assert_eq!(
            parse_datetime("2024-02-29T13:34:56.789+01:00").unwrap(),
            1_709_210_096_789
        );
        assert_eq!(
            parse_datetime("2024-02-29T11:34:56.789-0100").unwrap(),
            1_709_210_096_789
        );
        assert_eq!(
            parse_datetime("2024-02-29T14:34:56.789+02").unwrap(),
            1_709_210_096_789
        );
        for bad in [
            "2024-02-30T00:00:00.000",
            "2024-01-01",
            "2024-01-01T00:00:00",
            "2024-1-01T00:00:00.000",
            "xT",
            "2024-01-01T25:00:00.000",
        ] {
            assert!(parse_datetime(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_duration_ms("PT1H").unwrap(), 3_600_000);
        assert_eq!(parse_duration_ms("P1DT2H3M4.5S").unwrap(), 93_784_500);
        assert_eq!(parse_duration_ms("pt-1.5s").unwrap(), -1_500);
        assert_eq!(parse_duration_ms("-PT1M").unwrap(), -60_000);
        for bad in ["P", "PT", "1H", "PT1X", "P1H"] {
            assert!(parse_duration_ms(bad).is_err(), "{bad}");
        }
    }
}

//! Durations on the command line. A bare number is seconds, as for
//! flock(1): `5`, `1.5`, `.25`. Anything else is a duration with units:
//! `300ms`, `2s`, `1m 30s`. Printed rounded by [`human`] (`3.3ms`, not
//! humantime's exact `3ms 333us 333ns`).

use std::time::Duration;

/// The shortest lease `run --ttl` and `elect --ttl` take. Below it the
/// renewals (every third of the lease, each with a sixth to answer) and
/// the stop before expiry (the grace, at most a third, and a margin) leave
/// no room for a round trip and a process's exit, on a busy host: such a
/// lease is lost at once, and the command stopped as soon as it starts.
pub(crate) const MIN_TTL: Duration = Duration::from_secs(1);

/// `d` for messages, rounded: `850ns`, `3.3us`, `3.3ms`, `1.5s`, `2m 30s`.
pub(crate) fn human(d: Duration) -> String {
    let trim = |x: f64, unit: &str| {
        let text = format!("{x:.1}");
        format!("{}{unit}", text.strip_suffix(".0").unwrap_or(&text))
    };
    let nanos = d.as_nanos();
    if nanos < 1_000 {
        format!("{nanos}ns")
    } else if nanos < 1_000_000 {
        trim(nanos as f64 / 1e3, "us")
    } else if nanos < 1_000_000_000 {
        trim(nanos as f64 / 1e6, "ms")
    } else if d < Duration::from_secs(60) {
        trim(d.as_secs_f64(), "s")
    } else {
        let secs = d.as_secs() + u64::from(d.subsec_millis() >= 500);
        humantime::format_duration(Duration::from_secs(secs)).to_string()
    }
}

/// Parses `-w`, `--kill-grace`: a bare number of seconds, or with units.
pub(crate) fn parse(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s.starts_with(|c: char| c.is_ascii_digit() || c == '.')
        && s.chars().all(|c| c.is_ascii_digit() || c == '.')
    {
        return seconds(s).ok_or_else(|| {
            format!("{s:?} is not a number of seconds (e.g. `5`, `1.5`) nor a duration (`300ms`)")
        });
    }
    humantime::parse_duration(s).map_err(|e| e.to_string())
}

/// Parses `--ttl`: a duration between [`MIN_TTL`] and
/// [`redbell::MAX_LEASE`].
pub(crate) fn parse_ttl(s: &str) -> Result<Duration, String> {
    let d = parse(s)?;
    if d < MIN_TTL {
        return Err(format!(
            "{} is too short a lease: at least {} (renewals every third of it, and the \
             command stopped before it can expire, need a few round trips)",
            human(d),
            human(MIN_TTL)
        ));
    }
    if d > redbell::MAX_LEASE {
        return Err("must be at most one year".into());
    }
    Ok(d)
}

/// Parses `--max-hold`: a duration over zero.
pub(super) fn parse_positive(s: &str) -> Result<Duration, String> {
    let d = parse(s)?;
    if d.is_zero() {
        return Err("must be longer than zero".into());
    }
    Ok(d)
}

/// `123`, `1.5`, `.25` as seconds, exactly; digits past the nanosecond
/// round up (never down to zero). `None` for anything else (`.`, `1.2.3`)
/// or an overflow.
fn seconds(s: &str) -> Option<Duration> {
    let (whole, fraction) = s.split_once('.').unwrap_or((s, ""));
    if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') {
        return None;
    }
    let mut secs: u64 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    let mut nanos: u32 = 0;
    for (i, digit) in fraction.bytes().map(|b| u32::from(b - b'0')).enumerate() {
        if i < 9 {
            nanos += digit * 10u32.pow(8 - u32::try_from(i).ok()?);
        } else if digit > 0 {
            nanos += 1; // round up what a nanosecond cannot hold
            break;
        }
    }
    if nanos >= 1_000_000_000 {
        secs = secs.checked_add(1)?;
        nanos -= 1_000_000_000;
    }
    Some(Duration::new(secs, nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_numbers_are_seconds() {
        assert_eq!(parse("5"), Ok(Duration::from_secs(5)));
        assert_eq!(parse("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse(".25"), Ok(Duration::from_millis(250)));
        assert_eq!(parse("2."), Ok(Duration::from_secs(2)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        assert_eq!(parse("0.000000001"), Ok(Duration::from_nanos(1)));
        // Below a nanosecond rounds up, never to zero.
        assert_eq!(parse("0.0000000001"), Ok(Duration::from_nanos(1)));
        assert_eq!(parse("0.9999999999"), Ok(Duration::from_secs(1)));
    }

    #[test]
    fn durations_print_rounded() {
        assert_eq!(human(Duration::from_nanos(3_333_333)), "3.3ms");
        assert_eq!(human(Duration::from_nanos(850)), "850ns");
        assert_eq!(human(Duration::from_nanos(3_340)), "3.3us");
        assert_eq!(human(Duration::from_millis(500)), "500ms");
        assert_eq!(human(Duration::from_millis(1500)), "1.5s");
        assert_eq!(human(Duration::from_secs(10)), "10s");
        assert_eq!(human(Duration::from_millis(150_600)), "2m 31s");
        assert_eq!(human(Duration::ZERO), "0ns");
    }

    #[test]
    fn units_still_work() {
        assert_eq!(parse("300ms"), Ok(Duration::from_millis(300)));
        assert_eq!(parse("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse("1m 30s"), Ok(Duration::from_secs(90)));
    }

    #[test]
    fn anything_else_is_an_error() {
        for bad in [
            "",
            ".",
            "1.2.3",
            "-1",
            "1e3",
            "nan",
            "inf",
            "soon",
            "1,5",
            "99999999999999999999",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} parsed");
        }
        assert!(parse_ttl("0").is_err());
        assert!(parse_ttl("0.005").is_err());
        assert!(parse_ttl("10ms").is_err());
        assert!(parse_ttl("999ms").is_err());
        assert_eq!(parse_ttl("1"), Ok(Duration::from_secs(1)));
        assert!(parse_positive("0").is_err());
        assert_eq!(parse_positive("1.5"), Ok(Duration::from_millis(1500)));
    }
}

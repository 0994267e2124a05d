//! Durations on the command line. A bare number is seconds, as for
//! flock(1): `5`, `1.5`, `.25`. Anything else is a duration with units:
//! `300ms`, `2s`, `1m 30s`.

use std::time::Duration;

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

/// Parses `--ttl`: a duration between 10 ms and [`redbell::MAX_LEASE`].
pub(crate) fn parse_ttl(s: &str) -> Result<Duration, String> {
    let d = parse(s)?;
    if d < Duration::from_millis(10) || d > redbell::MAX_LEASE {
        return Err("must be between 10ms and one year".into());
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
        assert_eq!(parse_ttl("0.01"), Ok(Duration::from_millis(10)));
        assert!(parse_positive("0").is_err());
        assert_eq!(parse_positive("1.5"), Ok(Duration::from_millis(1500)));
    }
}

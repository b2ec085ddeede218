//! Go's duration syntax (docs/rules.md#durations): `300ms`, `1.5h`, `2h45m`, `-1h`, `0`.
//!
//! Existing rule files on the vehicle were written for a Go service, so we
//! accept exactly what Go's `time.ParseDuration` accepts and keep the value as
//! signed nanoseconds in an `i64`, Go's own range (about ±292 years).

use std::fmt;

/// Why a duration string was refused. `at` is a byte offset into the string.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("empty duration")]
    Empty,
    #[error("expected a number at byte {at}")]
    ExpectedNumber { at: usize },
    #[error("missing unit after the number at byte {at} (use ns, us, µs, ms, s, m or h)")]
    MissingUnit { at: usize },
    #[error("unknown unit `{unit}` at byte {at} (use ns, us, µs, ms, s, m or h)")]
    UnknownUnit { unit: String, at: usize },
    #[error("duration out of range (at most about 292 years)")]
    Overflow,
}

/// Parses a Go duration into signed nanoseconds.
pub fn parse_duration(text: &str) -> Result<i64, DurationError> {
    let bytes = text.as_bytes();
    let mut pos = 0;
    let mut negative = false;
    if let Some(&sign) = bytes.first() {
        if sign == b'-' || sign == b'+' {
            negative = sign == b'-';
            pos = 1;
        }
    }
    if text.is_empty() {
        return Err(DurationError::Empty);
    }
    if &text[pos..] == "0" {
        return Ok(0);
    }
    if pos == bytes.len() {
        return Err(DurationError::ExpectedNumber { at: pos });
    }
    // Accumulate in u128 nanoseconds; the sign is applied at the end, and the
    // magnitude may reach 2^63 only for a negative value (Go's rule).
    let mut total: u128 = 0;
    while pos < bytes.len() {
        let number_start = pos;
        let int_start = pos;
        while pos < bytes.len() && bytes[pos].is_ascii_digit() {
            pos += 1;
        }
        let int_digits = &text[int_start..pos];
        let mut frac_digits = "";
        if pos < bytes.len() && bytes[pos] == b'.' {
            pos += 1;
            let frac_start = pos;
            while pos < bytes.len() && bytes[pos].is_ascii_digit() {
                pos += 1;
            }
            frac_digits = &text[frac_start..pos];
        }
        if int_digits.is_empty() && frac_digits.is_empty() {
            return Err(DurationError::ExpectedNumber { at: number_start });
        }
        let unit_start = pos;
        while pos < bytes.len() && !(bytes[pos].is_ascii_digit() || bytes[pos] == b'.') {
            pos += 1;
        }
        let unit = &text[unit_start..pos];
        let scale: u128 = match unit {
            "" => return Err(DurationError::MissingUnit { at: unit_start }),
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60 * 1_000_000_000,
            "h" => 3_600 * 1_000_000_000,
            other => {
                return Err(DurationError::UnknownUnit {
                    unit: other.to_string(),
                    at: unit_start,
                })
            }
        };
        let mut whole: u128 = 0;
        for digit in int_digits.bytes() {
            whole = whole
                .checked_mul(10)
                .and_then(|w| w.checked_add(u128::from(digit - b'0')))
                .ok_or(DurationError::Overflow)?;
            if whole > u128::from(u64::MAX) {
                return Err(DurationError::Overflow);
            }
        }
        let mut value = whole.checked_mul(scale).ok_or(DurationError::Overflow)?;
        // Fractions: Go truncates below a nanosecond; so do we.
        let mut frac_scale = scale;
        for digit in frac_digits.bytes() {
            frac_scale /= 10;
            if frac_scale == 0 {
                break;
            }
            value += u128::from(digit - b'0') * frac_scale;
        }
        total = total.checked_add(value).ok_or(DurationError::Overflow)?;
        if total > 1u128 << 63 {
            return Err(DurationError::Overflow);
        }
    }
    if negative {
        // total <= 2^63 here, so the negation fits.
        Ok((-(total as i128)) as i64)
    } else if total > i64::MAX as u128 {
        Err(DurationError::Overflow)
    } else {
        Ok(total as i64)
    }
}

/// Formats nanoseconds the way Go's `Duration.String` does (`1h30m0s`,
/// `300ms`, `0s`), so dumps and logs read like the rule files.
pub fn format_duration(nanos: i64) -> String {
    struct Go(i64);
    impl fmt::Display for Go {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            let negative = self.0 < 0;
            let mut u = self.0.unsigned_abs();
            if negative {
                f.write_str("-")?;
            }
            if u == 0 {
                return f.write_str("0s");
            }
            if u < 1_000_000_000 {
                let (unit, scale) = if u < 1_000 {
                    ("ns", 1)
                } else if u < 1_000_000 {
                    ("µs", 1_000)
                } else {
                    ("ms", 1_000_000)
                };
                return write_fraction(f, u, scale, unit);
            }
            let hours = u / 3_600_000_000_000;
            u %= 3_600_000_000_000;
            let minutes = u / 60_000_000_000;
            u %= 60_000_000_000;
            if hours > 0 {
                write!(f, "{hours}h")?;
            }
            if hours > 0 || minutes > 0 {
                write!(f, "{minutes}m")?;
            }
            write_fraction(f, u, 1_000_000_000, "s")
        }
    }
    fn write_fraction(f: &mut fmt::Formatter<'_>, v: u64, scale: u64, unit: &str) -> fmt::Result {
        let whole = v / scale;
        let mut frac = v % scale;
        write!(f, "{whole}")?;
        if frac > 0 {
            let mut width = scale.ilog10() as usize;
            while frac.is_multiple_of(10) {
                frac /= 10;
                width -= 1;
            }
            write!(f, ".{frac:0width$}")?;
        }
        f.write_str(unit)
    }
    Go(nanos).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    #[test]
    fn accepts_go_syntax() {
        let cases: &[(&str, i64)] = &[
            ("0", 0),
            ("-0", 0),
            ("0s", 0),
            ("300ms", 300_000_000),
            ("1.5h", 5_400 * S),
            ("2h45m", 9_900 * S),
            ("30s", 30 * S),
            ("30000ms", 30 * S),
            ("-1h", -3_600 * S),
            ("+5s", 5 * S),
            ("1us", 1_000),
            ("1µs", 1_000),
            ("1ns", 1),
            (".5s", S / 2),
            ("5.s", 5 * S),
            ("1h1m1s1ms1us1ns", 3_661 * S + 1_001_001),
            ("1.0000000001s", S),
        ];
        for (text, want) in cases {
            assert_eq!(parse_duration(text), Ok(*want), "{text}");
        }
    }

    #[test]
    fn rejects_what_go_rejects() {
        assert_eq!(parse_duration(""), Err(DurationError::Empty));
        assert_eq!(
            parse_duration("5"),
            Err(DurationError::MissingUnit { at: 1 })
        );
        assert_eq!(
            parse_duration("-"),
            Err(DurationError::ExpectedNumber { at: 1 })
        );
        assert_eq!(
            parse_duration("s"),
            Err(DurationError::ExpectedNumber { at: 0 })
        );
        assert_eq!(
            parse_duration("."),
            Err(DurationError::ExpectedNumber { at: 0 })
        );
        assert_eq!(
            parse_duration("5d"),
            Err(DurationError::UnknownUnit {
                unit: "d".into(),
                at: 1
            })
        );
        assert_eq!(
            parse_duration("1 s"),
            Err(DurationError::UnknownUnit {
                unit: " s".into(),
                at: 1
            })
        );
        assert_eq!(parse_duration("9999999999h"), Err(DurationError::Overflow));
        assert_eq!(parse_duration("2562048h"), Err(DurationError::Overflow));
        assert_eq!(parse_duration("-9223372036854775808ns"), Ok(i64::MIN));
        assert_eq!(
            parse_duration("9223372036854775808ns"),
            Err(DurationError::Overflow)
        );
    }

    #[test]
    fn formats_like_go() {
        assert_eq!(format_duration(0), "0s");
        assert_eq!(format_duration(30 * S), "30s");
        assert_eq!(format_duration(5_400 * S), "1h30m0s");
        assert_eq!(format_duration(300_000_000), "300ms");
        assert_eq!(format_duration(1_500_000_000), "1.5s");
        assert_eq!(format_duration(-3_600 * S), "-1h0m0s");
        assert_eq!(format_duration(1_000), "1µs");
        assert_eq!(format_duration(61 * S), "1m1s");
    }

    #[test]
    fn format_round_trips() {
        for n in [1, 999, 1_000, 1_234_567, 30 * S, 5_400 * S + 7, -42 * S] {
            assert_eq!(parse_duration(&format_duration(n)), Ok(n));
        }
    }
}

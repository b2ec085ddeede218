//! What to say about a duration string that does not parse (DESIGN.md
//! 3.7): where in the string it goes wrong, and, for the usual mistakes
//! (white space, units spelled out or in capitals, days), the string that
//! was most likely meant.

use rulecore::{parse_duration, DurationError};
use std::ops::Range;

/// The general rule, for when no better fix is known.
pub(super) const SYNTAX_HELP: &str = "durations use Go syntax: a number and a unit (ns, us, µs, ms, s, m, h), e.g. `\"30s\"`, `\"1.5h\"`, `\"2h45m\"`, or `\"0\"`";

/// Where (a byte range into `text`) and what to label for a duration that
/// failed with `error`, and the help line.
pub(super) fn explain(text: &str, error: &DurationError) -> (Range<usize>, String, String) {
    let help = match suggest(text) {
        Some(fixed) => format!(
            "write `\"{fixed}\"`: Go durations use the units ns, us, µs, ms, s, m and h, \
             with no spaces"
        ),
        None => SYNTAX_HELP.to_string(),
    };
    // White space is the first thing to fix, wherever the parser stopped.
    if let Some(at) = text.find(char::is_whitespace) {
        let end = text[at..]
            .find(|c: char| !c.is_whitespace())
            .map_or(text.len(), |len| at + len);
        return (at..end, "white space inside a duration".to_string(), help);
    }
    let (span, label) = match error {
        DurationError::Empty | DurationError::Overflow => (0..text.len(), error.to_string()),
        DurationError::ExpectedNumber { at } => {
            let end = text[*at..]
                .chars()
                .next()
                .map_or(*at, |c| *at + c.len_utf8());
            (*at..end, "expected a number here".to_string())
        }
        DurationError::MissingUnit { at } => (
            at.saturating_sub(1)..*at,
            "missing unit after this number".to_string(),
        ),
        DurationError::UnknownUnit { unit, at } => {
            (*at..*at + unit.len(), format!("unknown unit `{unit}`"))
        }
    };
    (span, label, help)
}

/// The duration most likely meant by `text`, if one is close and parses:
/// white space removed, spelled-out or capitalised units replaced by Go's,
/// whole days turned into hours.
pub(super) fn suggest(text: &str) -> Option<String> {
    let mut fixed: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    // Each round replaces one unit; a duration has only a few.
    for _ in 0..8 {
        match parse_duration(&fixed) {
            Ok(_) => return (fixed != text).then_some(fixed),
            Err(DurationError::UnknownUnit { unit, at }) => {
                if let Some(hours) = days_as_hours(&fixed, &unit, at) {
                    fixed = hours;
                    continue;
                }
                let go_unit = go_unit(&unit)?;
                fixed.replace_range(at..at + unit.len(), go_unit);
            }
            Err(_) => return None,
        }
    }
    None
}

/// Go's unit for a unit written another way (`min`, `Seconds`, `MS`).
fn go_unit(unit: &str) -> Option<&'static str> {
    Some(match unit.to_lowercase().as_str() {
        "ns" | "nsec" | "nsecs" | "nanosecond" | "nanoseconds" => "ns",
        "us" | "µs" | "usec" | "usecs" | "microsecond" | "microseconds" => "us",
        "ms" | "msec" | "msecs" | "millisecond" | "milliseconds" => "ms",
        "s" | "sec" | "secs" | "second" | "seconds" => "s",
        "m" | "min" | "mins" | "minute" | "minutes" => "m",
        "h" | "hr" | "hrs" | "hour" | "hours" => "h",
        _ => return None,
    })
}

/// `2d` as `48h`: Go has no day unit. Only for a whole number of days
/// that is the whole duration (anything else is left alone).
fn days_as_hours(text: &str, unit: &str, at: usize) -> Option<String> {
    if !matches!(unit.to_lowercase().as_str(), "d" | "day" | "days")
        || at + unit.len() != text.len()
    {
        return None;
    }
    let days: u64 = text[..at].parse().ok()?;
    Some(format!("{}h", days.checked_mul(24)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_the_go_spelling() {
        for (written, meant) in [
            ("30 s", "30s"),
            ("5 minutes", "5m"),
            ("10min", "10m"),
            ("1 hour 30 mins", "1h30m"),
            ("1.5 Hours", "1.5h"),
            ("500 MS", "500ms"),
            ("2d", "48h"),
            ("1 day", "24h"),
            (" 30s ", "30s"),
        ] {
            assert_eq!(suggest(written).as_deref(), Some(meant), "{written}");
        }
        for hopeless in ["30", "soon", "1d12h", "5 fortnights", "30s", "-"] {
            assert_eq!(suggest(hopeless), None, "{hopeless}");
        }
    }

    #[test]
    fn points_at_the_fault() {
        let at = |text: &str| {
            let error = parse_duration(text).unwrap_err();
            let (span, label, help) = explain(text, &error);
            (text[span].to_string(), label, help)
        };
        let (bytes, label, help) = at("30 s");
        assert_eq!(
            (bytes.as_str(), label.as_str()),
            (" ", "white space inside a duration")
        );
        assert!(help.starts_with("write `\"30s\"`:"), "{help}");
        let (bytes, label, help) = at("10min");
        assert_eq!(
            (bytes.as_str(), label.as_str()),
            ("min", "unknown unit `min`")
        );
        assert!(help.starts_with("write `\"10m\"`:"), "{help}");
        let (bytes, label, help) = at("1.5");
        assert_eq!(
            (bytes.as_str(), label.as_str()),
            ("5", "missing unit after this number")
        );
        assert_eq!(help, SYNTAX_HELP);
        let (bytes, label, _) = at("µ");
        assert_eq!(
            (bytes.as_str(), label.as_str()),
            ("µ", "expected a number here")
        );
    }
}

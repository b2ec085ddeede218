//! What to say about a duration string that does not parse (docs/rules.md#durations):
//! where in the string it goes wrong, and, for the usual mistakes
//! (white space, units spelled out or in capitals, days), the string that
//! was most likely meant.

use rulecore::suggest::duration_spelling;
use rulecore::DurationError;
use std::ops::Range;

/// The general rule, for when no better fix is known.
pub(super) const SYNTAX_HELP: &str = "durations use Go syntax: a number and a unit (ns, us, µs, ms, s, m, h), e.g. `\"30s\"`, `\"1.5h\"`, `\"2h45m\"`, or `\"0\"`";

/// Where (a byte range into `text`) and what to label for a duration that
/// failed with `error`, and the help line.
pub(super) fn explain(text: &str, error: &DurationError) -> (Range<usize>, String, String) {
    let help = match duration_spelling(text) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use rulecore::parse_duration;

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

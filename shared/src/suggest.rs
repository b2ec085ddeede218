//! "Did you mean": the likely intent behind a misspelt key, name, unit or
//! duration. One definition for the rule checker and the timeline parser,
//! so the same typo gets the same suggestion everywhere (docs/rules.md#errors-and-warnings, docs/when-language.md).

use crate::duration::{parse_duration, DurationError};

/// The candidate closest to `word`, if it is close enough to be a plausible
/// typo: at most a third of the word's length away, and at least 1.
pub fn did_you_mean<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    closest_within(
        word,
        candidates.iter().copied(),
        (word.chars().count() / 3).max(1),
    )
}

/// The candidate closest to `word` within `limit` edits (the first of
/// equally close ones), or `None`.
pub fn closest_within<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
    limit: usize,
) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|candidate| (edit_distance(word, candidate), candidate))
        .filter(|(distance, _)| *distance <= limit)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

/// Edit distance over characters, case-insensitive, counting a swap of two
/// neighbouring characters as one edit (optimal string alignment), so that
/// `stpe` is one typo away from `step`.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.to_lowercase().chars().collect();
    let b: Vec<char> = b.to_lowercase().chars().collect();
    // rows[i][j]: distance between a[..i] and b[..j].
    let mut rows = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in rows.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in rows[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (rows[i - 1][j] + 1)
                .min(rows[i][j - 1] + 1)
                .min(rows[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(rows[i - 2][j - 2] + 1);
            }
            rows[i][j] = best;
        }
    }
    rows[a.len()][b.len()]
}

/// The duration most likely meant by `text`, if one is close and parses:
/// white space removed, spelled-out or capitalised units replaced by Go's,
/// whole days turned into hours.
pub fn duration_spelling(text: &str) -> Option<String> {
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
    fn suggests_close_words_only() {
        let keys = ["name", "on", "cancel-on", "concurrency", "step"];
        assert_eq!(did_you_mean("cancel_on", &keys), Some("cancel-on"));
        assert_eq!(did_you_mean("concurency", &keys), Some("concurrency"));
        assert_eq!(did_you_mean("stpe", &keys), Some("step"));
        assert_eq!(did_you_mean("Name", &keys), Some("name"));
        assert_eq!(did_you_mean("colour", &keys), None);
        assert_eq!(closest_within("tpoic", ["topic", "to"], 2), Some("topic"));
        assert_eq!(closest_within("xyz", ["topic"], 2), None);
    }

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
            assert_eq!(
                duration_spelling(written).as_deref(),
                Some(meant),
                "{written}"
            );
        }
        for hopeless in ["30", "soon", "1d12h", "5 fortnights", "30s", "-"] {
            assert_eq!(duration_spelling(hopeless), None, "{hopeless}");
        }
    }
}

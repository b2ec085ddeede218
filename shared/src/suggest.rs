//! "Did you mean": the likely intent behind a misspelt key, name, unit or
//! duration. One definition for the rule checker and the timeline parser,
//! so the same typo gets the same suggestion everywhere (docs/rules.md#errors-and-warnings, docs/when-language.md).

use crate::duration::{parse_duration, DurationError};

/// How much longer than the longest candidate a word may be and still get
/// a suggestion: past that, no candidate is within a third of its length,
/// and comparing would only cost time (docs/service.md#what-ruled-reads-and-its-bounds).
pub const LENGTH_MARGIN: usize = 8;

/// The candidate closest to `word`, if it is close enough to be a plausible
/// typo: at most a third of the word's length away, and at least 1.
pub fn did_you_mean<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let longest = candidates
        .iter()
        .map(|c| c.chars().count())
        .max()
        .unwrap_or(0);
    let length = word.chars().count();
    if length > longest + LENGTH_MARGIN {
        return None;
    }
    closest_within(word, candidates.iter().copied(), (length / 3).max(1))
}

/// The candidate closest to `word` within `limit` edits (the first of
/// equally close ones), or `None`. Each comparison stops as soon as it is
/// past the best distance so far (or `limit`), so the work is about
/// candidates x word length x `limit`, in memory of three rows.
pub fn closest_within<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
    limit: usize,
) -> Option<&'a str> {
    let word: Vec<char> = word.to_lowercase().chars().collect();
    let mut best: Option<(usize, &'a str)> = None;
    let mut rows = Rows::default();
    for candidate in candidates {
        let bound = best.map_or(limit, |(distance, _)| distance.saturating_sub(1));
        if let Some(distance) = rows.distance_within(&word, candidate, bound) {
            best = Some((distance, candidate));
            if distance == 0 {
                break;
            }
        }
    }
    best.map(|(_, candidate)| candidate)
}

/// Edit distance over characters, case-insensitive, counting a swap of two
/// neighbouring characters as one edit (optimal string alignment), so that
/// `stpe` is one typo away from `step`.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.to_lowercase().chars().collect();
    Rows::default()
        .distance_within(&a, b, usize::MAX)
        .unwrap_or(usize::MAX)
}

/// The three rows optimal string alignment needs, reused across
/// candidates.
#[derive(Default)]
struct Rows {
    b: Vec<char>,
    before: Vec<usize>,
    previous: Vec<usize>,
    current: Vec<usize>,
}

impl Rows {
    /// The distance between `a` (lowercased) and `b`, or `None` once it
    /// must be over `limit`: the lengths differ by more, or a whole row is.
    fn distance_within(&mut self, a: &[char], b: &str, limit: usize) -> Option<usize> {
        self.b.clear();
        self.b.extend(b.to_lowercase().chars());
        let (n, m) = (a.len(), self.b.len());
        if n.abs_diff(m) > limit {
            return None;
        }
        for row in [&mut self.before, &mut self.previous, &mut self.current] {
            row.clear();
            row.resize(m + 1, 0);
        }
        for (j, cell) in self.previous.iter_mut().enumerate() {
            *cell = j;
        }
        for i in 1..=n {
            self.current[0] = i;
            let mut row_min = i;
            for j in 1..=m {
                let cost = usize::from(a[i - 1] != self.b[j - 1]);
                let mut best = (self.previous[j] + 1)
                    .min(self.current[j - 1] + 1)
                    .min(self.previous[j - 1] + cost);
                if i > 1 && j > 1 && a[i - 1] == self.b[j - 2] && a[i - 2] == self.b[j - 1] {
                    best = best.min(self.before[j - 2] + 1);
                }
                self.current[j] = best;
                row_min = row_min.min(best);
            }
            if row_min > limit {
                return None;
            }
            std::mem::swap(&mut self.before, &mut self.previous);
            std::mem::swap(&mut self.previous, &mut self.current);
        }
        let distance = self.previous[m];
        (distance <= limit).then_some(distance)
    }
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
    fn distances_agree_with_the_full_matrix() {
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("stpe", "step"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("ABC", "abc"), 0);
        assert_eq!(edit_distance("abcd", "badc"), 2);
        // The first of equally close candidates.
        assert_eq!(closest_within("ab", ["ax", "ay", "ab"], 1), Some("ab"));
        assert_eq!(closest_within("ab", ["ax", "ay"], 1), Some("ax"));
    }

    /// A name far longer than every candidate gets no suggestion and costs
    /// nothing; long names near each other are compared in bounded rows.
    #[test]
    fn long_words_are_bounded() {
        let names: Vec<String> = (0..25_000).map(|n| format!("rule-{n:05}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let long = "z".repeat(65_000);
        let started = std::time::Instant::now();
        assert_eq!(did_you_mean(&long, &names), None);
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
        let a = format!("{}x", "r".repeat(300));
        let b = format!("{}y", "r".repeat(300));
        assert_eq!(did_you_mean(&a, &[&b]), Some(b.as_str()));
        assert_eq!(did_you_mean("rule-0001", &names), Some("rule-00001"));
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

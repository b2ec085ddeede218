//! Value patterns (docs/sources.md#value-patterns): the values a field
//! takes, a source's `from`/`to`/`payload` conditions and the values a
//! command list accepts. Literal text with `<int>` (an optional `-` and
//! decimal digits) and `<text>` (one or more characters) placeholders:
//! `start:<int>`, `add:<text>`. `<<` is a literal `<`.

use serde::{Deserialize, Serialize};
use std::fmt;

/// One part of a pattern.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Part {
    Lit(String),
    Int,
    Text,
}

/// A parsed value pattern.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ValuePattern {
    parts: Vec<Part>,
}

/// Why a pattern does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValuePatternError {
    #[error("unknown placeholder `<{0}>`: write `<int>` or `<text>` (`<<` for a literal `<`)")]
    Placeholder(String),
    #[error("`<` without its `>`: write `<<` for a literal `<`")]
    Unclosed,
    #[error("two placeholders side by side cannot be told apart")]
    Adjacent,
}

impl ValuePattern {
    /// A pattern that matches exactly `value`.
    pub fn literal(value: &str) -> ValuePattern {
        ValuePattern {
            parts: vec![Part::Lit(value.to_string())],
        }
    }

    pub fn parse(text: &str) -> Result<ValuePattern, ValuePatternError> {
        let mut parts: Vec<Part> = Vec::new();
        let mut lit = String::new();
        let mut rest = text;
        while let Some(at) = rest.find('<') {
            lit.push_str(&rest[..at]);
            rest = &rest[at + 1..];
            if let Some(after) = rest.strip_prefix('<') {
                lit.push('<');
                rest = after;
                continue;
            }
            let end = rest.find('>').ok_or(ValuePatternError::Unclosed)?;
            let part = match &rest[..end] {
                "int" => Part::Int,
                "text" => Part::Text,
                other => return Err(ValuePatternError::Placeholder(other.to_string())),
            };
            rest = &rest[end + 1..];
            if !lit.is_empty() {
                parts.push(Part::Lit(std::mem::take(&mut lit)));
            } else if matches!(parts.last(), Some(Part::Int | Part::Text)) {
                return Err(ValuePatternError::Adjacent);
            }
            parts.push(part);
        }
        lit.push_str(rest);
        if !lit.is_empty() || parts.is_empty() {
            parts.push(Part::Lit(lit));
        }
        Ok(ValuePattern { parts })
    }

    pub fn parts(&self) -> &[Part] {
        &self.parts
    }

    /// The literal value, if the pattern has no placeholder.
    pub fn as_literal(&self) -> Option<&str> {
        match self.parts.as_slice() {
            [Part::Lit(value)] => Some(value),
            _ => None,
        }
    }

    pub fn matches(&self, value: &str) -> bool {
        matches_parts(&self.parts, value)
    }
}

/// Whether any of `patterns` matches `value`; an empty list matches all.
pub fn any_matches(patterns: &[ValuePattern], value: &str) -> bool {
    patterns.is_empty() || patterns.iter().any(|pattern| pattern.matches(value))
}

fn matches_parts(parts: &[Part], value: &str) -> bool {
    let Some((first, rest)) = parts.split_first() else {
        return value.is_empty();
    };
    match first {
        Part::Lit(lit) => value
            .strip_prefix(lit.as_str())
            .is_some_and(|after| matches_parts(rest, after)),
        // A placeholder takes the shortest run that lets the rest match;
        // patterns are short, so trying each end is cheap.
        Part::Int | Part::Text => {
            let digits = value.strip_prefix('-').unwrap_or(value);
            let sign = value.len() - digits.len();
            value
                .char_indices()
                .map(|(at, c)| at + c.len_utf8())
                .filter(|&end| match first {
                    Part::Int => end > sign && value[sign..end].bytes().all(|b| b.is_ascii_digit()),
                    _ => true,
                })
                .any(|end| matches_parts(rest, &value[end..]))
        }
    }
}

impl fmt::Display for ValuePattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for part in &self.parts {
            match part {
                Part::Lit(lit) => f.write_str(&lit.replace('<', "<<"))?,
                Part::Int => f.write_str("<int>")?,
                Part::Text => f.write_str("<text>")?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> ValuePattern {
        ValuePattern::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn literals_placeholders_and_escapes() {
        assert!(p("both").matches("both"));
        assert!(!p("both").matches("bothh"));
        assert!(p("start:<int>").matches("start:30"));
        assert!(p("start:<int>").matches("start:-3"));
        assert!(!p("start:<int>").matches("start:"));
        assert!(!p("start:<int>").matches("start:3s"));
        assert!(!p("start:<int>").matches("start:-"));
        assert!(p("<int>:<int>").matches("2:15"));
        assert!(!p("<int>:<int>").matches("2:"));
        assert!(p("add:<text>").matches("add:04a1b2"));
        assert!(!p("add:<text>").matches("add:"));
        assert!(p("<text>-pending").matches("hibernating-pending"));
        assert!(p("a<<b").matches("a<b"));
        assert!(p("").matches(""));
        assert!(!p("").matches("x"));
        assert!(p("<int>").matches("42") && !p("<int>").matches("4.2"));
        assert_eq!(p("a<<b:<int>").to_string(), "a<<b:<int>");
        assert_eq!(p("both").as_literal(), Some("both"));
        assert_eq!(p("x<int>").as_literal(), None);
    }

    #[test]
    fn bad_patterns_say_why() {
        assert_eq!(
            ValuePattern::parse("<seconds>"),
            Err(ValuePatternError::Placeholder("seconds".into()))
        );
        assert_eq!(
            ValuePattern::parse("a<int"),
            Err(ValuePatternError::Unclosed)
        );
        assert_eq!(
            ValuePattern::parse("<int><text>"),
            Err(ValuePatternError::Adjacent)
        );
    }

    #[test]
    fn an_empty_list_matches_anything() {
        assert!(any_matches(&[], "x"));
        assert!(any_matches(&[p("a"), p("x")], "x"));
        assert!(!any_matches(&[p("a")], "x"));
    }
}

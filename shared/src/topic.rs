//! Topic patterns (docs/rules.md#topic-patterns): `*` matches every topic, `prefix.*` any
//! topic that starts with `prefix.`, anything else only itself.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The prefix of every event channel: topic `t` is published on `ev:t`
/// (docs/events.md).
pub const EVENT_CHANNEL_PREFIX: &str = "ev:";

/// A parsed `on` / `cancel-on` pattern.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum TopicPattern {
    /// `*`
    Any,
    /// `prefix.*`; holds the prefix *with* its trailing dot (`button.`).
    Prefix(Box<str>),
    /// A literal topic.
    Exact(Box<str>),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopicPatternError {
    #[error("empty topic pattern")]
    Empty,
}

impl TopicPattern {
    pub fn parse(text: &str) -> Result<Self, TopicPatternError> {
        if text.is_empty() {
            return Err(TopicPatternError::Empty);
        }
        if text == "*" {
            return Ok(Self::Any);
        }
        if let Some(prefix) = text.strip_suffix('*') {
            if prefix.ends_with('.') && !prefix.contains('*') {
                return Ok(Self::Prefix(prefix.into()));
            }
        }
        Ok(Self::Exact(text.into()))
    }

    /// A `*` that is neither the whole pattern nor a trailing `.*` makes the
    /// pattern a literal that can only match itself: worth a warning.
    pub fn has_literal_star(&self) -> bool {
        match self {
            Self::Exact(topic) => topic.contains('*'),
            Self::Prefix(prefix) => prefix.contains('*'),
            Self::Any => false,
        }
    }

    pub fn matches(&self, topic: &str) -> bool {
        match self {
            Self::Any => true,
            Self::Prefix(prefix) => topic.starts_with(&**prefix),
            Self::Exact(exact) => **exact == *topic,
        }
    }

    /// The Redis pub/sub subscription for this pattern: a channel for an
    /// exact topic (`SUBSCRIBE`), a glob for the others (`PSUBSCRIBE`), with
    /// Redis glob characters in the literal part escaped.
    pub fn subscription(&self) -> Subscription {
        match self {
            Self::Exact(topic) => Subscription::Channel(format!("{EVENT_CHANNEL_PREFIX}{topic}")),
            Self::Any => Subscription::Pattern(format!("{EVENT_CHANNEL_PREFIX}*")),
            Self::Prefix(prefix) => Subscription::Pattern(format!(
                "{EVENT_CHANNEL_PREFIX}{}*",
                escape_redis_glob(prefix)
            )),
        }
    }
}

impl fmt::Display for TopicPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Any => f.write_str("*"),
            Self::Prefix(prefix) => write!(f, "{prefix}*"),
            Self::Exact(topic) => f.write_str(topic),
        }
    }
}

/// A Redis subscription a pattern needs.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Subscription {
    Channel(String),
    Pattern(String),
}

/// A topic's family: its first segment (`alarm` of `alarm.triggered`),
/// `None` for a topic of one segment. A profile that derives one topic of
/// a family owns the whole family (docs/sources.md#owned-topics): the
/// engine refuses the family's topics from the bus, and `rulec` warns
/// about a declared topic in it.
pub fn family(topic: &str) -> Option<&str> {
    topic.split_once('.').map(|(first, _)| first)
}

/// Escapes the characters Redis glob patterns treat specially.
pub fn escape_redis_glob(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\' | '^') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> TopicPattern {
        TopicPattern::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn parses_the_three_kinds() {
        assert_eq!(p("*"), TopicPattern::Any);
        assert_eq!(p("button.*"), TopicPattern::Prefix("button.".into()));
        assert_eq!(
            p("alarm.triggered"),
            TopicPattern::Exact("alarm.triggered".into())
        );
        assert_eq!(TopicPattern::parse(""), Err(TopicPatternError::Empty));
    }

    #[test]
    fn stars_elsewhere_are_literal() {
        for text in ["a*", "a.*.b", "*.x", "a.b*", "**", "a*.*"] {
            let pattern = p(text);
            assert!(pattern.has_literal_star(), "{text}");
            assert!(pattern.matches(text), "{text} matches itself");
        }
        assert!(!p("a*").matches("ab"));
        assert!(!p("a.*").has_literal_star());
    }

    #[test]
    fn matching() {
        assert!(p("*").matches("anything.at.all"));
        assert!(p("button.*").matches("button.brake.left.hold"));
        assert!(!p("button.*").matches("button"));
        assert!(!p("button.*").matches("buttons.x"));
        assert!(p("alarm.triggered").matches("alarm.triggered"));
        assert!(!p("alarm.triggered").matches("alarm.triggered.x"));
    }

    #[test]
    fn subscriptions_escape_globs() {
        assert_eq!(
            p("alarm.triggered").subscription(),
            Subscription::Channel("ev:alarm.triggered".into())
        );
        assert_eq!(p("*").subscription(), Subscription::Pattern("ev:*".into()));
        assert_eq!(
            p("a?[b].*").subscription(),
            Subscription::Pattern("ev:a\\?\\[b\\].*".into())
        );
        assert_eq!(
            p("x*.*").subscription(),
            Subscription::Channel("ev:x*.*".into())
        );
    }
}

//! The key namespace (docs/service.md#key-namespace): every Redis key ruled
//! owns hangs off one name, `--namespace NS`, so a second writer (the Go
//! event-service, another ruled) can be kept off ruled's keys by choosing
//! another name. The keys are derived here and nowhere else.

/// The namespace when none is given: the name Librescoot's tools read.
pub const DEFAULT_NAMESPACE: &str = "extensions";

/// The longest namespace accepted: the keys stay short, and a name this long
/// is a mistake, not a choice.
pub const MAX_NAMESPACE_BYTES: usize = 64;

/// Characters Redis treats as glob syntax in `KEYS`/`SCAN MATCH`/`PSUBSCRIBE`:
/// a namespace holding one could not be matched literally by an operator.
const GLOB_CHARS: &[char] = &['*', '?', '[', ']', '\\'];

/// A checked namespace: non-empty, at most [`MAX_NAMESPACE_BYTES`], without
/// white space, control or glob characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Namespace(String);

/// Why a namespace was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NamespaceError {
    #[error("the namespace is empty")]
    Empty,
    #[error("the namespace is {len} bytes long; at most {MAX_NAMESPACE_BYTES} are allowed")]
    TooLong { len: usize },
    #[error(
        "the namespace holds {what} {found:?} at byte {at}; only printable characters \
         other than white space and the glob characters * ? [ ] \\ are allowed"
    )]
    BadChar {
        what: &'static str,
        found: char,
        at: usize,
    },
}

impl Namespace {
    /// Checks `name` (see [`NamespaceError`] for what is refused).
    pub fn parse(name: &str) -> Result<Self, NamespaceError> {
        if name.is_empty() {
            return Err(NamespaceError::Empty);
        }
        if name.len() > MAX_NAMESPACE_BYTES {
            return Err(NamespaceError::TooLong { len: name.len() });
        }
        for (at, found) in name.char_indices() {
            let what = if found.is_whitespace() {
                "white space"
            } else if found.is_control() {
                "a control character"
            } else if GLOB_CHARS.contains(&found) {
                "a glob character"
            } else {
                continue;
            };
            return Err(NamespaceError::BadChar { what, found, at });
        }
        Ok(Self(name.to_string()))
    }

    /// The name itself.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The counters hash: the name itself (docs/service.md#counters-hash-extensions).
    pub fn counters(&self) -> &str {
        &self.0
    }

    /// The pending records hash, `NS:pending`
    /// (docs/service.md#pending-records-hash-extensionspending).
    pub fn pending(&self) -> String {
        self.key("pending")
    }

    /// The per-rule statistics hash, `NS:rules`
    /// (docs/service.md#per-rule-statistics-hash-extensionsrules).
    pub fn rules(&self) -> String {
        self.key("rules")
    }

    /// Reserved for control requests, `NS:rpc` (docs/service.md#key-namespace).
    pub fn rpc(&self) -> String {
        self.key("rpc")
    }

    /// Reserved for overrides, `NS:overrides` (docs/service.md#key-namespace).
    pub fn overrides(&self) -> String {
        self.key("overrides")
    }

    /// Where a signed control request's id is kept until its deadline,
    /// `NS:seen:<id>`, so it is served once, also across a restart
    /// (docs/operating.md#the-control-key).
    pub fn seen(&self, id: &str) -> String {
        self.key(&format!("seen:{id}"))
    }

    /// The last rebuild's outcome, `NS:rebuild`, written by `ruled rebuild`
    /// and read by `v1.status` (docs/operating.md#the-last-rebuild).
    pub fn rebuild(&self) -> String {
        self.key("rebuild")
    }

    /// The id of the last entry this ruled added to stream `events`,
    /// `NS:bus-last-id`: after a restart, the newest entry that is its own
    /// is no sign of another adapter (docs/service.md#the-bus).
    pub fn bus_last_id(&self) -> String {
        self.key("bus-last-id")
    }

    /// Each scheduled rule's last fire (Unix ms), `NS:schedule`: start
    /// reads it to run a fire missed while ruled was down
    /// (docs/rules.md#schedules).
    pub fn schedule(&self) -> String {
        self.key("schedule")
    }

    fn key(&self, suffix: &str) -> String {
        format!("{}:{suffix}", self.0)
    }
}

impl Default for Namespace {
    fn default() -> Self {
        Self(DEFAULT_NAMESPACE.to_string())
    }
}

impl std::fmt::Display for Namespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_hang_off_the_name() {
        let ns = Namespace::parse("ruled").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(ns.counters(), "ruled");
        assert_eq!(ns.pending(), "ruled:pending");
        assert_eq!(ns.rules(), "ruled:rules");
        assert_eq!(ns.rpc(), "ruled:rpc");
        assert_eq!(ns.overrides(), "ruled:overrides");
        assert_eq!(Namespace::default().pending(), "extensions:pending");
        assert!(Namespace::parse("scooter-rules.v2:a_b").is_ok());
    }

    #[test]
    fn bad_names_are_refused_with_what_and_where() {
        assert_eq!(Namespace::parse(""), Err(NamespaceError::Empty));
        assert_eq!(
            Namespace::parse(&"x".repeat(65)),
            Err(NamespaceError::TooLong { len: 65 })
        );
        assert!(Namespace::parse(&"x".repeat(64)).is_ok());
        for (name, what, at) in [
            ("a b", "white space", 1),
            ("ab\t", "white space", 2),
            ("a\u{1b}", "a control character", 1),
            ("ext*", "a glob character", 3),
            ("[x", "a glob character", 0),
            ("a?", "a glob character", 1),
            ("a\\b", "a glob character", 1),
        ] {
            match Namespace::parse(name) {
                Err(NamespaceError::BadChar { what: w, at: a, .. }) => {
                    assert_eq!((w, a), (what, at), "{name:?}");
                }
                other => panic!("{name:?}: {other:?}"),
            }
        }
        let message = Namespace::parse("a b").err().map(|e| e.to_string());
        assert_eq!(
            message.as_deref(),
            Some(
                "the namespace holds white space ' ' at byte 1; only printable characters \
                 other than white space and the glob characters * ? [ ] \\ are allowed"
            )
        );
    }
}

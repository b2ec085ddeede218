//! The timeline format (docs/simulation.md): its shape, and [`parse`], which
//! checks a file key by key first so that every problem names the entry
//! (`[[event]] #3`), the key and the fix, the way rule files are checked.

use rulecore::event::{Event, SmallStr};
use rulecore::event_data::DataValue;
use rulecore::{parse_duration, DurationError};
use serde::{Deserialize, Deserializer};
use std::fmt;

/// A Go duration string (`"30s"`, `"-1h"`), as signed nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Dur(pub i64);

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        rulecore::parse_duration(&text)
            .map(Dur)
            .map_err(|error| serde::de::Error::custom(format!("duration {text:?}: {error}")))
    }
}

/// A whole timeline file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Timeline {
    #[serde(default)]
    pub event: Vec<EventEntry>,
    #[serde(default)]
    pub state: Vec<StateEntry>,
    #[serde(default)]
    pub restart: Vec<RestartEntry>,
    #[serde(default)]
    pub fail: Vec<FailEntry>,
    #[serde(default)]
    pub clock: Vec<ClockEntry>,
    #[serde(default)]
    pub message: Vec<MessageEntry>,
    #[serde(default)]
    pub reload: Vec<ReloadEntry>,
    /// Stop after this; default: when nothing is pending.
    pub end: Option<Dur>,
    /// Default 5m.
    pub replay_window: Option<Dur>,
    /// Default 2.
    pub workers: Option<usize>,
    /// Default 256.
    pub queue: Option<usize>,
    /// How long each action takes; default 0s.
    pub action_time: Option<Dur>,
    /// The wall clock at virtual time zero, RFC 3339 with an offset
    /// (`2026-12-04T21:59:00+01:00`); default [`super::WALL_ORIGIN_MS`].
    pub start: Option<String>,
    /// The local time zone schedules read (`Europe/Berlin`); default UTC.
    pub timezone: Option<String>,
    /// `timezone`'s rules, loaded by the caller ([`Timeline::load_zone`]):
    /// the simulator reads no file.
    #[serde(skip)]
    pub zone: Option<crate::schedule::LocalZone>,
    /// Why [`Timeline::load_zone`] could not load `timezone`.
    #[serde(skip)]
    pub zone_error: Option<String>,
}

/// `[[event]]`: an event arriving on the bus.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventEntry {
    pub at: Dur,
    pub topic: String,
    pub id: Option<String>,
    pub src: Option<String>,
    pub from: Option<String>,
    pub to: Option<String>,
    pub data: Option<serde_json::Value>,
}

impl EventEntry {
    pub fn to_event(&self) -> Event {
        Event {
            id: self.id.as_deref().map(SmallStr::new),
            ts: None,
            topic: SmallStr::new(&self.topic),
            src: self.src.as_deref().map(SmallStr::new),
            from: self.from.as_deref().map(SmallStr::new),
            to: self.to.as_deref().map(SmallStr::new),
            data: self.data.as_ref().map_or(DataValue::Null, DataValue::from),
        }
    }
}

/// `[[state]]`: a write to a hash in the datastore, and what the writer
/// publishes after it (docs/simulation.md#state-entries).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct StateEntry {
    pub at: Dur,
    pub hash: String,
    pub field: Option<String>,
    pub value: Option<String>,
    /// Several fields written at once (`HMSET`, `SetManyPublishOne`).
    #[serde(default)]
    pub fields: std::collections::BTreeMap<String, String>,
    /// `field` is deleted (`HDEL`) instead of written.
    #[serde(default)]
    pub delete: bool,
    /// The hash is deleted, then `cleared` published.
    #[serde(default)]
    pub clear: bool,
    /// The hash is rewritten with `fields`, then `replaced` published.
    #[serde(default)]
    pub replace: bool,
    /// The name published after the write; default `field`, else each of
    /// `fields`.
    pub publish: Option<String>,
    /// `false`: written without a notification.
    pub notify: Option<bool>,
    /// The whole hash expires this long after the write.
    pub expire: Option<Dur>,
    /// Written before the service starts: read as seeding, emitting nothing.
    #[serde(default)]
    pub before_start: bool,
}

impl StateEntry {
    /// The (field, value) pairs written, `field` first.
    pub fn written(&self) -> impl Iterator<Item = (&str, &str)> + '_ {
        let single = match (&self.field, &self.value) {
            (Some(field), Some(value)) => Some((field.as_str(), value.as_str())),
            _ => None,
        };
        single.into_iter().chain(
            self.fields
                .iter()
                .map(|(field, value)| (field.as_str(), value.as_str())),
        )
    }

    /// Checks that the keys make one write.
    fn check(&self, index: usize) -> Result<(), TimelineError> {
        let problem = |problem| TimelineError::StateShape {
            number: index + 1,
            problem,
        };
        let single = self.field.is_some();
        if self.value.is_some() && !single {
            return Err(problem("`value` needs a `field`"));
        }
        if single && self.value.is_some() == self.delete {
            return Err(problem(
                "a `field` takes a `value` or `delete = true`, one of them",
            ));
        }
        if self.clear && (single || !self.fields.is_empty() || self.replace) {
            return Err(problem(
                "`clear = true` deletes the whole hash: it takes no fields",
            ));
        }
        if !self.clear && !single && self.fields.is_empty() {
            return Err(problem("nothing is written"));
        }
        if self.replace && self.delete {
            return Err(problem("`replace` rewrites the hash: nothing to delete"));
        }
        if self.before_start && (self.at.0 != 0 || self.clear || self.delete) {
            return Err(problem(
                "`before-start` writes at \"0s\" (seeding): a value, not a deletion",
            ));
        }
        Ok(())
    }

    /// The names published after the write, in order (none without a
    /// notification or before the start).
    pub fn published(&self) -> Vec<&str> {
        if self.notify == Some(false) || self.before_start {
            return Vec::new();
        }
        if self.clear {
            return vec!["cleared"];
        }
        if self.replace {
            return vec!["replaced"];
        }
        match (&self.publish, &self.field) {
            (Some(name), _) | (None, Some(name)) => vec![name.as_str()],
            (None, None) => self.fields.keys().map(String::as_str).collect(),
        }
    }
}

/// `[[message]]`: a raw message on a pub/sub channel, for a channel
/// input (docs/simulation.md); lost while the service is down.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessageEntry {
    pub at: Dur,
    pub channel: String,
    pub payload: String,
}

/// `[[restart]]`: the service stops at `at` and starts again `down` later
/// (default 0s: stop and start at once, still losing nothing durable).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RestartEntry {
    pub at: Dur,
    #[serde(default)]
    pub down: Dur,
}

/// `[[fail]]`: actions of `rule` (and `step`, when given) started in
/// `[at, until)` fail.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailEntry {
    pub at: Dur,
    pub rule: String,
    pub step: Option<u32>,
    pub until: Option<Dur>,
    /// Redis refuses the Redis lane's transaction whole (out of memory):
    /// the action is not performed and its record stays, and the engine
    /// retries it (docs/semantics.md#an-action-redis-refused-whole). For
    /// `redis`, `publish` and `notify` actions; the others just fail.
    #[serde(default, rename = "refused-whole")]
    pub refused_whole: bool,
}

/// `[[clock]]`: the wall clock jumps by `jump` (may be negative).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClockEntry {
    pub at: Dur,
    pub jump: Dur,
}

/// `[[reload]]`: a deploy replaces the bundle file and the service
/// reloads it (docs/simulation.md#reload). `bundle` is relative to the
/// timeline file; the caller loads it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReloadEntry {
    pub at: Dur,
    pub bundle: String,
}

/// Which entry a problem is in: `[[event]] #3` (numbered from 1 in file
/// order within its kind) or the top level of the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    Entry { kind: &'static str, number: usize },
    TopLevel,
}

impl Place {
    /// The entry at 0-based `index` among the `kind` entries.
    pub fn entry(kind: &'static str, index: usize) -> Self {
        Place::Entry {
            kind,
            number: index + 1,
        }
    }
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Place::Entry { kind, number } => write!(f, "[[{kind}]] #{number}"),
            Place::TopLevel => f.write_str("top level"),
        }
    }
}

/// A timeline that does not parse or cannot be run. [`TimelineError::help`]
/// says how to fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimelineError {
    /// Not TOML at all; toml's own message, with line and column.
    #[error("not valid TOML: {message}")]
    Syntax { message: String },
    #[error("unknown top-level key `{key}`")]
    UnknownSetting { key: String },
    #[error("`{kind}` must be a list of `[[{kind}]]` entries")]
    NotEntries { kind: &'static str },
    #[error("{place}: unknown key `{key}`")]
    UnknownKey { place: Place, key: String },
    #[error("{place}: `{key}` is missing")]
    Missing { place: Place, key: &'static str },
    #[error("{place}: `{key}` must be {expected}, not {found}")]
    WrongType {
        place: Place,
        key: &'static str,
        expected: &'static str,
        found: String,
    },
    #[error("{place}: `{key}` = {text:?} is not a duration: {}", duration_problem(.text, .error))]
    BadDuration {
        place: Place,
        key: &'static str,
        text: String,
        error: DurationError,
    },
    #[error("{place}: `{key}` must not be negative")]
    Negative { place: Place, key: &'static str },
    #[error("[[event]] #{number}: `data` must be a table")]
    DataNotTable { number: usize },
    /// A `[[state]]` whose keys do not make one write.
    #[error("[[state]] #{number}: {problem}")]
    StateShape {
        number: usize,
        problem: &'static str,
    },
    #[error("top level: `workers` must be at least 1")]
    NoWorkers,
    #[error("[[fail]] #{number}: `until` ({until}) is not after `at` ({at}): nothing would fail")]
    FailUntilNotAfterAt {
        number: usize,
        at: String,
        until: String,
    },
    #[error(
        "the timeline has {entries} [[reload]] entries but {given} bundles were loaded for them"
    )]
    ReloadBundles { entries: usize, given: usize },
    #[error("[[fail]] #{number}: no rule named {rule:?} in the simulated rules")]
    UnknownFailRule { number: usize, rule: String },
    #[error("[[fail]] #{number}: rule {rule:?} has no step {step} (it has {steps} step{})", if *.steps == 1 { "" } else { "s" })]
    FailStepOutOfRange {
        number: usize,
        rule: String,
        step: u32,
        /// The most steps the rule has in any simulated bundle.
        steps: usize,
    },
    /// What the key-by-key check let through but the shape still refused.
    #[error("{message}")]
    Shape { message: String },
    #[error("top level: `start` = {text:?} is not a date and time: write RFC 3339 with an offset, e.g. \"2026-12-04T21:59:00+01:00\"")]
    BadStart { text: String },
    #[error("top level: `timezone`: {reason}")]
    BadZone { reason: String },
}

/// Go's duration syntax, for every duration help line (docs/rules.md#durations).
const DURATION_SYNTAX: &str = "durations use Go syntax: a number and a unit (ns, us, µs, ms, s, m, h), e.g. \"30s\", \"1.5h\", \"2h45m\", or \"0\"";

fn duration_problem(text: &str, error: &DurationError) -> String {
    if text.contains(char::is_whitespace) {
        return "white space inside a duration".to_string();
    }
    match error {
        DurationError::Empty => "it is empty".to_string(),
        DurationError::ExpectedNumber { .. } => "a number is missing".to_string(),
        DurationError::MissingUnit { .. } => "a number has no unit".to_string(),
        DurationError::UnknownUnit { unit, .. } => format!("`{unit}` is not a unit"),
        DurationError::Overflow => "out of range (at most about 292 years)".to_string(),
    }
}

impl TimelineError {
    /// What to write instead, when the help names it: the known key close
    /// to an unknown one, or the duration a misspelt one most likely meant
    /// (for editors' quick fixes).
    pub fn suggestion(&self) -> Option<String> {
        match self {
            TimelineError::UnknownSetting { key } => closest(
                key,
                SETTINGS
                    .iter()
                    .map(|(k, _)| *k)
                    .chain(KINDS.iter().map(|(k, _)| *k)),
            )
            .map(str::to_string),
            TimelineError::UnknownKey {
                place: Place::Entry { kind, .. },
                key,
            } => {
                let keys = KINDS
                    .iter()
                    .find(|(k, _)| k == kind)
                    .map_or(&[][..], |(_, keys)| *keys);
                closest(key, keys.iter().map(|(k, _, _)| *k)).map(str::to_string)
            }
            TimelineError::BadDuration { text, .. } => rulecore::suggest::duration_spelling(text),
            _ => None,
        }
    }

    /// How to fix it, when there is more to say than the message.
    pub fn help(&self) -> Option<String> {
        let did_you_mean = || {
            self.suggestion()
                .map(|k| format!("; did you mean `{k}`?"))
                .unwrap_or_default()
        };
        Some(match self {
            TimelineError::Syntax { .. } | TimelineError::Shape { .. } => return None,
            TimelineError::UnknownSetting { .. } => format!(
                "a timeline holds [[event]], [[state]], [[restart]], [[fail]], [[clock]] \
                 and [[reload]] entries and the settings {}{}",
                SETTINGS
                    .iter()
                    .map(|(k, _)| format!("`{k}`"))
                    .collect::<Vec<_>>()
                    .join(", "),
                did_you_mean()
            ),
            TimelineError::NotEntries { kind } => {
                format!("write each entry as a table under its own `[[{kind}]]` line")
            }
            TimelineError::UnknownKey { place, .. } => {
                let kind = match place {
                    Place::Entry { kind, .. } => *kind,
                    Place::TopLevel => return None,
                };
                let keys = KINDS
                    .iter()
                    .find(|(k, _)| *k == kind)
                    .map_or(&[][..], |(_, keys)| *keys);
                format!(
                    "[[{kind}]] takes {}{}",
                    keys.iter()
                        .map(|(k, _, _)| format!("`{k}`"))
                        .collect::<Vec<_>>()
                        .join(", "),
                    did_you_mean()
                )
            }
            TimelineError::Missing { key, .. } => match *key {
                "at" => "add `at = \"0s\"`: the virtual time the entry applies at".to_string(),
                key => format!("add `{key} = ...`"),
            },
            TimelineError::WrongType { expected, .. } if expected.contains("duration") => {
                format!("quote it and give a unit: {DURATION_SYNTAX}")
            }
            TimelineError::WrongType { expected, .. } if expected.contains("string") => {
                "quote the value: `value = \"2\"`, not `value = 2`".to_string()
            }
            TimelineError::WrongType { .. } => return None,
            TimelineError::BadDuration { .. } => match self.suggestion() {
                Some(fixed) => format!("write \"{fixed}\": {DURATION_SYNTAX}"),
                None => DURATION_SYNTAX.to_string(),
            },
            TimelineError::Negative { key, .. } => match *key {
                "at" => "virtual time starts at \"0s\"; only a [[clock]] `jump` may be negative"
                    .to_string(),
                _ => "only a [[clock]] `jump` may be negative".to_string(),
            },
            TimelineError::StateShape { .. } => "write `field` and `value` (or `delete = true`), \
                 `fields = { ... }`, `clear = true`, or `replace = true` with `fields`: see \
                 docs/simulation.md#state-entries"
                .to_string(),
            TimelineError::DataNotTable { .. } => {
                "write `data = { level = 2 }`: the event's data fields".to_string()
            }
            TimelineError::NoWorkers => "leave `workers` out for the default of 2".to_string(),
            TimelineError::BadStart { .. } => {
                "the date, `T`, the time to the second, then `Z` or the offset `+01:00`".to_string()
            }
            TimelineError::BadZone { .. } => {
                "name a zone of the system's zone database (`Europe/Berlin`), `UTC`, or a \
                 POSIX TZ rule"
                    .to_string()
            }
            TimelineError::FailUntilNotAfterAt { .. } => {
                "make `until` later than `at`, or leave it out to fail from `at` on".to_string()
            }
            TimelineError::UnknownFailRule { .. } => {
                "`rule` names a rule of the simulated rules, of --bundle-after-restart or of a \
                 [[reload]] bundle"
                    .to_string()
            }
            TimelineError::ReloadBundles { .. } => {
                "load one bundle per [[reload]] entry, in file order (rulec simulate does)"
                    .to_string()
            }
            TimelineError::FailStepOutOfRange { steps, .. } => format!(
                "steps count from 0, so `step` is 0 to {}; leave it out to fail every step",
                steps.saturating_sub(1)
            ),
        })
    }
}

/// A known key within edit distance 2 of `key`, for a "did you mean".
fn closest<'k>(key: &str, known: impl Iterator<Item = &'k str>) -> Option<&'k str> {
    rulecore::suggest::closest_within(key, known, 2)
}

/// What a timeline key holds (its JSON Schema: `rulec schema --timeline`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ty {
    Duration,
    Text,
    /// A whole number from 0 (to u32::MAX).
    Count,
    Table,
    Bool,
}

/// The top-level settings.
pub const SETTINGS: &[(&str, Ty)] = &[
    ("end", Ty::Duration),
    ("replay-window", Ty::Duration),
    ("workers", Ty::Count),
    ("queue", Ty::Count),
    ("action-time", Ty::Duration),
    ("start", Ty::Text),
    ("timezone", Ty::Text),
];

/// Each entry kind's keys: (key, type, required).
pub type Keys = &'static [(&'static str, Ty, bool)];
/// Every entry kind with its keys, in the reference's order.
pub const KINDS: &[(&str, Keys)] = &[
    (
        "event",
        &[
            ("at", Ty::Duration, true),
            ("topic", Ty::Text, true),
            ("id", Ty::Text, false),
            ("src", Ty::Text, false),
            ("from", Ty::Text, false),
            ("to", Ty::Text, false),
            ("data", Ty::Table, false),
        ],
    ),
    (
        "state",
        &[
            ("at", Ty::Duration, true),
            ("hash", Ty::Text, true),
            ("field", Ty::Text, false),
            ("value", Ty::Text, false),
            ("fields", Ty::Table, false),
            ("delete", Ty::Bool, false),
            ("clear", Ty::Bool, false),
            ("replace", Ty::Bool, false),
            ("publish", Ty::Text, false),
            ("notify", Ty::Bool, false),
            ("expire", Ty::Duration, false),
            ("before-start", Ty::Bool, false),
        ],
    ),
    (
        "message",
        &[
            ("at", Ty::Duration, true),
            ("channel", Ty::Text, true),
            ("payload", Ty::Text, true),
        ],
    ),
    (
        "restart",
        &[("at", Ty::Duration, true), ("down", Ty::Duration, false)],
    ),
    (
        "fail",
        &[
            ("at", Ty::Duration, true),
            ("rule", Ty::Text, true),
            ("step", Ty::Count, false),
            ("until", Ty::Duration, false),
            ("refused-whole", Ty::Bool, false),
        ],
    ),
    (
        "clock",
        &[("at", Ty::Duration, true), ("jump", Ty::Duration, true)],
    ),
    (
        "reload",
        &[("at", Ty::Duration, true), ("bundle", Ty::Text, true)],
    ),
];

/// Checks one key's value against its type.
fn check_value(
    place: Place,
    key: &'static str,
    ty: Ty,
    value: &toml::Value,
) -> Result<(), TimelineError> {
    let wrong = |expected: &'static str| TimelineError::WrongType {
        place,
        key,
        expected,
        found: match value {
            toml::Value::Integer(n) => format!("the number {n}"),
            other => format!(
                "a{} {}",
                if other.type_str().starts_with(['a', 'i']) {
                    "n"
                } else {
                    ""
                },
                other.type_str()
            ),
        },
    };
    match (ty, value) {
        (Ty::Duration, toml::Value::String(text)) => match parse_duration(text) {
            Ok(_) => Ok(()),
            Err(error) => Err(TimelineError::BadDuration {
                place,
                key,
                text: text.clone(),
                error,
            }),
        },
        (Ty::Duration, _) => Err(wrong("a duration string such as \"30s\"")),
        (Ty::Text, toml::Value::String(_)) => Ok(()),
        (Ty::Text, _) => Err(wrong("a string")),
        (Ty::Count, toml::Value::Integer(n)) if u32::try_from(*n).is_ok() => Ok(()),
        (Ty::Count, _) => Err(wrong("a whole number from 0")),
        (Ty::Table, toml::Value::Table(_)) => Ok(()),
        (Ty::Table, _) => Err(wrong("a table such as { level = 2 }")),
        (Ty::Bool, toml::Value::Boolean(_)) => Ok(()),
        (Ty::Bool, _) => Err(wrong("true or false")),
    }
}

/// The kinds of entry a timeline holds (`event`, `state`, ...), in the
/// reference's order; the expectations of `rulec test` are
/// [`EXPECTATION_KINDS`].
pub fn entry_kinds() -> impl Iterator<Item = &'static str> {
    KINDS.iter().map(|(kind, _)| *kind)
}

/// The entries `rulec test` reads (docs/rulec.md#rulec-test): a timeline
/// may carry them, and the simulator leaves them alone.
pub const EXPECTATION_KINDS: [&str; 2] = ["expect", "expect-none"];

/// Parses a timeline file's text and checks it (docs/simulation.md): key by key
/// first, for messages that name the entry, then [`Timeline::validate`].
/// The first problem of [`parse_all`].
pub fn parse(text: &str) -> Result<Timeline, TimelineError> {
    parse_all(text).map_err(|mut problems| problems.swap_remove(0))
}

/// [`parse`], with every problem the key-by-key check finds (or, when the
/// keys are sound, every one [`Timeline::validate_all`] finds): never an
/// empty list (docs/simulation.md#checks).
pub fn parse_all(text: &str) -> Result<Timeline, Vec<TimelineError>> {
    let mut table: toml::Table = toml::from_str(text).map_err(|error| {
        vec![TimelineError::Syntax {
            message: error.to_string().trim_end().to_string(),
        }]
    })?;
    for kind in EXPECTATION_KINDS {
        table.remove(kind);
    }
    let mut problems = Vec::new();
    for (key, value) in &table {
        if let Some((kind, keys)) = KINDS.iter().find(|(k, _)| k == key) {
            check_entries(kind, keys, value, &mut problems);
        } else if let Some(&(key, ty)) = SETTINGS.iter().find(|(k, _)| k == key) {
            problems.extend(check_value(Place::TopLevel, key, ty, value).err());
        } else {
            problems.push(TimelineError::UnknownSetting { key: key.clone() });
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    let timeline: Timeline =
        toml::Value::Table(table)
            .try_into()
            .map_err(|error: toml::de::Error| {
                vec![TimelineError::Shape {
                    message: error.message().to_string(),
                }]
            })?;
    let problems = timeline.validate_all();
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(timeline)
}

/// Every problem of the `kind` entries `value` holds: unknown keys,
/// missing ones, values of the wrong type.
fn check_entries(
    kind: &'static str,
    keys: Keys,
    value: &toml::Value,
    problems: &mut Vec<TimelineError>,
) {
    let toml::Value::Array(entries) = value else {
        problems.push(TimelineError::NotEntries { kind });
        return;
    };
    for (index, entry) in entries.iter().enumerate() {
        let place = Place::entry(kind, index);
        let toml::Value::Table(entry) = entry else {
            problems.push(TimelineError::NotEntries { kind });
            return;
        };
        let unknown: Vec<&String> = entry
            .keys()
            .filter(|k| !keys.iter().any(|(known, _, _)| known == k))
            .collect();
        // A missing key that an unknown one misspells is not reported
        // again: `tpoic` is one problem, not two.
        let misspelt = |key: &str| {
            unknown
                .iter()
                .any(|k| closest(k, keys.iter().map(|(known, _, _)| *known)) == Some(key))
        };
        for key in &unknown {
            problems.push(TimelineError::UnknownKey {
                place,
                key: (*key).clone(),
            });
        }
        for &(key, ty, required) in keys.iter() {
            match entry.get(key) {
                Some(value) => problems.extend(check_value(place, key, ty, value).err()),
                None if required && !misspelt(key) => {
                    problems.push(TimelineError::Missing { place, key })
                }
                None => {}
            }
        }
    }
}

/// A duration as the timeline would write it, for messages.
fn go(duration: Dur) -> String {
    rulecore::duration::format_duration(duration.0)
}

impl Timeline {
    /// Checks what the types cannot: signs, `data` being a table, a
    /// `[[fail]]` window that is not empty. The first of
    /// [`Self::validate_all`].
    pub fn validate(&self) -> Result<(), TimelineError> {
        match self.validate_all().into_iter().next() {
            Some(problem) => Err(problem),
            None => Ok(()),
        }
    }

    /// Every problem [`Self::validate`] looks for, in entry order.
    pub fn validate_all(&self) -> Vec<TimelineError> {
        fn at(kind: &'static str, index: usize, at: Dur) -> Option<TimelineError> {
            (at.0 < 0).then_some(TimelineError::Negative {
                place: Place::entry(kind, index),
                key: "at",
            })
        }
        let mut problems = Vec::new();
        for (index, entry) in self.event.iter().enumerate() {
            problems.extend(at("event", index, entry.at));
            if entry.data.as_ref().is_some_and(|data| !data.is_object()) {
                problems.push(TimelineError::DataNotTable { number: index + 1 });
            }
        }
        for (index, entry) in self.state.iter().enumerate() {
            problems.extend(at("state", index, entry.at));
            problems.extend(entry.check(index).err());
        }
        for (index, entry) in self.message.iter().enumerate() {
            problems.extend(at("message", index, entry.at));
        }
        for (index, entry) in self.restart.iter().enumerate() {
            problems.extend(at("restart", index, entry.at));
            if entry.down.0 < 0 {
                problems.push(TimelineError::Negative {
                    place: Place::entry("restart", index),
                    key: "down",
                });
            }
        }
        for (index, entry) in self.fail.iter().enumerate() {
            problems.extend(at("fail", index, entry.at));
            if let Some(until) = entry.until.filter(|until| *until <= entry.at) {
                problems.push(TimelineError::FailUntilNotAfterAt {
                    number: index + 1,
                    at: go(entry.at),
                    until: go(until),
                });
            }
        }
        for (index, entry) in self.clock.iter().enumerate() {
            problems.extend(at("clock", index, entry.at));
        }
        for (index, entry) in self.reload.iter().enumerate() {
            problems.extend(at("reload", index, entry.at));
        }
        for (key, value) in [("end", self.end), ("action-time", self.action_time)] {
            if value.is_some_and(|d| d.0 < 0) {
                problems.push(TimelineError::Negative {
                    place: Place::TopLevel,
                    key,
                });
            }
        }
        if self.workers == Some(0) {
            problems.push(TimelineError::NoWorkers);
        }
        if let Some(text) = self
            .start
            .as_ref()
            .filter(|text| parse_rfc3339_ms(text).is_none())
        {
            problems.push(TimelineError::BadStart { text: text.clone() });
        }
        problems
    }

    /// The wall clock at virtual time zero, Unix ms.
    pub fn start_ms(&self) -> i64 {
        self.start
            .as_deref()
            .and_then(parse_rfc3339_ms)
            .unwrap_or(super::WALL_ORIGIN_MS)
    }

    /// Loads `timezone` with the caller's file access (`read`: a path's
    /// bytes); UTC without one. A zone that does not load is reported by
    /// the simulation ([`TimelineError::BadZone`]).
    pub fn load_zone(&mut self, read: impl Fn(&str) -> std::io::Result<Vec<u8>>) {
        if let Some(name) = &self.timezone {
            match crate::schedule::LocalZone::named(name, read) {
                Ok(zone) => self.zone = Some(zone),
                Err(error) => self.zone_error = Some(error.to_string()),
            }
        }
    }

    /// The zone schedules read: [`Timeline::load_zone`]'s, else one that
    /// needs no file (UTC, a POSIX rule).
    pub fn local_zone(&self) -> Result<crate::schedule::LocalZone, TimelineError> {
        if let Some(reason) = &self.zone_error {
            return Err(TimelineError::BadZone {
                reason: reason.clone(),
            });
        }
        match (&self.zone, &self.timezone) {
            (Some(zone), _) => Ok(zone.clone()),
            (None, None) => Ok(crate::schedule::LocalZone::utc()),
            (None, Some(name)) => crate::schedule::LocalZone::named(name, |_| {
                Err(std::io::Error::other("the simulator reads no file"))
            })
            .map_err(|error| TimelineError::BadZone {
                reason: error.to_string(),
            }),
        }
    }
}

/// `YYYY-MM-DDTHH:MM:SS[.fff](Z|+HH:MM|-HH:MM)` as Unix ms.
pub fn parse_rfc3339_ms(text: &str) -> Option<i64> {
    let bytes = text.as_bytes();
    let number = |range: std::ops::Range<usize>| -> Option<i64> {
        let part = text.get(range)?;
        part.bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| part.parse().ok())?
    };
    if bytes.len() < 20
        || bytes[4] != b'-'
        || bytes[7] != b'-'
        || !matches!(bytes[10], b'T' | b't' | b' ')
        || bytes[13] != b':'
        || bytes[16] != b':'
    {
        return None;
    }
    let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
    let (hour, minute, second) = (number(11..13)?, number(14..16)?, number(17..19)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 59
    {
        return None;
    }
    let mut rest = &text[19..];
    let mut millis = 0;
    if let Some(fraction) = rest.strip_prefix('.') {
        let digits = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let padded = format!("{:0<3}", &fraction[..digits.min(3)]);
        millis = padded.parse::<i64>().ok()?;
        rest = &fraction[digits..];
    }
    let offset_s = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first() {
                Some(b'+') => 1,
                Some(b'-') => -1,
                _ => return None,
            };
            let zone = rest.get(1..)?;
            if zone.len() != 5 || zone.as_bytes()[2] != b':' {
                return None;
            }
            let (h, m) = (
                zone[..2].parse::<i64>().ok()?,
                zone[3..].parse::<i64>().ok()?,
            );
            if h > 23 || m > 59 {
                return None;
            }
            sign * (h * 3600 + m * 60)
        }
    };
    let month = u32::try_from(month).ok()?;
    let day = u32::try_from(day).ok()?;
    let unix_s =
        crate::schedule::unix_of_civil(year, month, day, hour * 3600 + minute * 60 + second);
    Some((unix_s - offset_s) * 1000 + millis)
}

//! The compiled rule bundle (docs/bundle.md): the data model both halves share.
//!
//! File layout: 8-byte magic, format version (u16 LE), blake3 digest of the
//! payload (32 bytes), payload length (u64 LE), payload (postcard).

use crate::bytecode::{Const, Program};
use crate::fingerprint::{fingerprint_of, step_fingerprint};
pub use crate::template::Text;
use crate::topic::TopicPattern;
use serde::{Deserialize, Serialize, Serializer};
use std::collections::HashMap;
use std::sync::Arc;

pub const MAGIC: [u8; 8] = *b"SCRULES\0";
/// 2: rules carry `hold_ns` (`for`, docs/semantics.md#hold), and a
/// `redis` action its reply `timeout_ns`. 3: the payload carries `inputs`
/// and each rule the indices of its own (docs/rules.md#inputs). 4: rule
/// files are named once, in a table, and each rule by its index there
/// (docs/bundle.md#what-the-payload-holds). 5: the keys most rules leave
/// at their defaults (`cancel_on`, cooldown, debounce, `for`, repeat,
/// inputs) are one optional field of a rule ([`RuleOptions`]), and the
/// rules' files runs of consecutive rules ([`SourceRun`]). 6: the payload
/// carries the bus profile it was built with ([`crate::profile::Profile`],
/// docs/sources.md). 7: a rule's options carry its `finally` steps
/// ([`RuleOptions::finally`], docs/rules.md#finally), and a step's action
/// may publish, notify and compute its values ([`Text`],
/// docs/rules.md#computed-values). 8: a rule's options carry `protected`
/// ([`RuleOptions::protected`], docs/operating.md#trust). 9: the payload
/// carries the safety envelope ([`crate::envelope::Envelope`]: guards and
/// limits) and a rule's options its breaker ([`RuleOptions::trip`],
/// docs/safety.md); and a rule's options carry its key (`per`, [`RuleOptions::per`],
/// docs/rules.md#keyed-runs), and `repeat` its `period_ns`
/// ([`Repeat::period_ns`], docs/rules.md#repeat); and a rule's options its schedule (`at`, `every`,
/// [`RuleOptions::schedule`], docs/rules.md#schedules).
pub const FORMAT_VERSION: u16 = 9;

/// Everything a bundle carries. Encoded as [`PayloadWire`]; decoded by
/// [`crate::payload_decode`]. The default is the empty bundle: no rules,
/// no profile, no compiler version.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Payload {
    /// `rulec`'s version that wrote the bundle.
    pub compiler_version: String,
    /// In bundle order: rules file name order, then position in the file.
    pub rules: Vec<Rule>,
    /// Every `state("hash", "field")` pair any expression uses, sorted.
    pub state_pairs: Vec<StatePair>,
    pub consts: Vec<Const>,
    /// Every distinct `[[rule.input]]` declaration (docs/rules.md#inputs),
    /// in order of first declaration; rules refer to them by index. Part of
    /// no fingerprint.
    pub inputs: Vec<Input>,
    /// The bus profile (docs/sources.md); `None` for `--profile none`.
    /// Part of no fingerprint.
    pub profile: Option<crate::profile::Profile>,
    /// The guards and limits (docs/safety.md), their programs in this
    /// payload's pools. Part of no fingerprint; the digest covers it.
    pub envelope: crate::envelope::Envelope,
}

impl Payload {
    /// A payload whose every step carries the fingerprint its contents give
    /// against these pools ([`Payload::refresh_fingerprints`]), so steps
    /// built or edited field by field never carry a stale one.
    pub fn new(
        compiler_version: impl Into<String>,
        rules: Vec<Rule>,
        state_pairs: Vec<StatePair>,
        consts: Vec<Const>,
    ) -> Payload {
        let mut payload = Payload {
            compiler_version: compiler_version.into(),
            rules,
            state_pairs,
            consts,
            inputs: Vec::new(),
            profile: None,
            envelope: crate::envelope::Envelope::default(),
        };
        payload.refresh_fingerprints();
        payload
    }

    /// The rule files named once each, in order of first use, and which
    /// file the rules are in, as runs of consecutive rules of one file: how
    /// the payload stores them (docs/bundle.md#what-the-payload-holds).
    /// Rules come file by file, so a bundle has one run per file.
    pub fn source_table(&self) -> (Vec<&str>, Vec<SourceRun>) {
        let mut files: Vec<&str> = Vec::new();
        let mut index: HashMap<&str, u32> = HashMap::new();
        let mut runs: Vec<SourceRun> = Vec::new();
        for rule in &self.rules {
            let file = *index.entry(&rule.source).or_insert_with(|| {
                files.push(&rule.source);
                // A bundle file cannot hold 2^32 rule files.
                u32::try_from(files.len() - 1).unwrap_or(u32::MAX)
            });
            match runs.last_mut() {
                Some(run) if run.file == file => run.rules += 1,
                _ => runs.push(SourceRun { file, rules: 1 }),
            }
        }
        (files, runs)
    }

    /// Recomputes every step's fingerprint with
    /// [`fingerprint_of`] against this payload's pools. Call it after
    /// changing a step's action, timing or `when`, or the pools.
    pub fn refresh_fingerprints(&mut self) {
        for rule in &mut self.rules {
            for step in Arc::make_mut(&mut rule.steps) {
                step.fingerprint = fingerprint_of(step, &self.consts, &self.state_pairs);
            }
            let finally = rule.options.as_mut().map(|options| &mut options.finally);
            for step in finally.into_iter().flat_map(Arc::make_mut) {
                step.fingerprint = fingerprint_of(step, &self.consts, &self.state_pairs);
            }
        }
    }
}

/// `rules` consecutive rules of the payload, all in rule file `file` (an
/// index into the payload's file table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceRun {
    pub file: u32,
    pub rules: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct StatePair {
    pub hash: String,
    pub field: String,
}

/// The payload as encoded (format 9): [`Payload`]'s fields, with the rule
/// files in a table (`sources`) and runs of consecutive rules of one file
/// (`source_runs`, before the rules so the decoder names each rule's file
/// as it reads it, and keeps a few bytes per file while it does, not 8 per
/// rule).
#[derive(Debug, Serialize)]
pub struct PayloadWire<'a> {
    pub compiler_version: &'a str,
    pub sources: Vec<&'a str>,
    pub source_runs: Vec<SourceRun>,
    pub rules: &'a [Rule],
    pub state_pairs: &'a [StatePair],
    pub consts: &'a [Const],
    pub inputs: &'a [Input],
    pub profile: &'a Option<crate::profile::Profile>,
    pub envelope: &'a crate::envelope::Envelope,
}

impl Serialize for Payload {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let (sources, source_runs) = self.source_table();
        PayloadWire {
            compiler_version: &self.compiler_version,
            sources,
            source_runs,
            rules: &self.rules,
            state_pairs: &self.state_pairs,
            consts: &self.consts,
            inputs: &self.inputs,
            profile: &self.profile,
            envelope: &self.envelope,
        }
        .serialize(serializer)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rule {
    pub name: Box<str>,
    /// The rule file's name relative to the rules directory. Rules of one
    /// file share it: the payload names each file once
    /// ([`Payload::source_table`]), and the decoder hands every rule of a
    /// file the same `Arc`.
    #[serde(skip)]
    pub source: Arc<str>,
    /// `false`: replay-only (docs/rules.md#disabled-rules).
    pub enabled: bool,
    pub concurrency: Concurrency,
    pub on: Box<[TopicPattern]>,
    /// Boxed: a rule without one keeps 8 bytes for it instead of 24.
    pub when: Option<Box<Program>>,
    /// Shared: the decoder hands rules with equal steps one list
    /// ([`crate::payload_decode`]); change them with [`Arc::make_mut`].
    pub steps: Arc<[Step]>,
    /// `None` when every key of [`RuleOptions`] has its default: most rules
    /// set none of them, and the box keeps their 88 bytes out of every
    /// rule. Read through [`Rule::cooldown_ns`] and the other getters,
    /// change with [`Rule::options_mut`].
    pub options: Option<Box<RuleOptions>>,
}

/// The rule keys most rules leave at their defaults
/// (docs/rules.md#rule-keys); [`Rule::options`] holds them.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct RuleOptions {
    pub cancel_on: Box<[TopicPattern]>,
    /// Nanoseconds; 0 means none.
    pub cooldown_ns: u64,
    /// Nanoseconds; 0 means none.
    pub debounce_ns: u64,
    /// `for`: how long `when` must stay true before the rule dispatches
    /// (docs/semantics.md#hold). Nanoseconds; 0 means none. Part of no
    /// fingerprint: a hold is not durable.
    pub hold_ns: u64,
    pub repeat: Repeat,
    /// Indices into [`Payload::inputs`] of the inputs this rule declares,
    /// ascending, without repeats.
    pub inputs: Box<[u32]>,
    /// `[[rule.finally]]` (docs/rules.md#finally): the steps a run still
    /// walks when `cancel-on` ends it before its last step finished. Never
    /// durable. Shared like [`Rule::steps`].
    pub finally: Arc<[Step]>,
    /// `protected = true` (docs/operating.md#trust): only a signed control
    /// request turns the rule off, and no stored override applies to it at
    /// start. Part of no fingerprint: it changes no step.
    pub protected: bool,
    /// `trip` (docs/safety.md#the-breaker): the rule's loop breaker. Part
    /// of no fingerprint.
    pub trip: crate::envelope::Breaker,
    /// `per` (docs/rules.md#keyed-runs): the key's expression over the
    /// event, a value program rendered as `str()` does; `None`: one key.
    /// Policies, cooldown, debounce and holds are kept per key. Part of no
    /// fingerprint: it changes no step.
    pub per: Option<Program>,
    /// `at` and `every` (docs/rules.md#schedules): the rule's own fires.
    /// Part of no fingerprint: it changes no step.
    pub schedule: crate::schedule::Schedule,
}

impl RuleOptions {
    /// As [`Rule::options`] holds them: `None` when all are defaults.
    pub fn boxed(self) -> Option<Box<RuleOptions>> {
        (self != RuleOptions::default()).then(|| Box::new(self))
    }
}

impl Rule {
    /// A rule with the defaults of docs/rules.md#rule-keys: enabled, `restart`
    /// concurrency, no `cancel_on`, no cooldown or debounce, one pass, no
    /// `when`. Set other fields on the result.
    pub fn new(
        name: impl Into<Box<str>>,
        source: impl Into<Arc<str>>,
        on: Vec<TopicPattern>,
        steps: Vec<Step>,
    ) -> Rule {
        Rule {
            name: name.into(),
            source: source.into(),
            enabled: true,
            concurrency: Concurrency::Restart,
            on: on.into(),
            when: None,
            steps: steps.into(),
            options: None,
        }
    }

    /// This rule's options, boxed first if it had none.
    pub fn options_mut(&mut self) -> &mut RuleOptions {
        self.options.get_or_insert_with(Box::default)
    }

    pub fn cancel_on(&self) -> &[TopicPattern] {
        self.options.as_ref().map_or(&[], |o| &o.cancel_on)
    }

    /// Nanoseconds; 0 means none.
    pub fn cooldown_ns(&self) -> u64 {
        self.options.as_ref().map_or(0, |o| o.cooldown_ns)
    }

    /// Nanoseconds; 0 means none.
    pub fn debounce_ns(&self) -> u64 {
        self.options.as_ref().map_or(0, |o| o.debounce_ns)
    }

    /// `for` (docs/semantics.md#hold). Nanoseconds; 0 means none.
    pub fn hold_ns(&self) -> u64 {
        self.options.as_ref().map_or(0, |o| o.hold_ns)
    }

    pub fn repeat(&self) -> Repeat {
        self.options.as_ref().map_or(Repeat::ONCE, |o| o.repeat)
    }

    /// Indices into [`Payload::inputs`], ascending, without repeats.
    pub fn inputs(&self) -> &[u32] {
        self.options.as_ref().map_or(&[], |o| &o.inputs)
    }

    /// The `finally` steps (docs/rules.md#finally); empty for most rules.
    pub fn finally(&self) -> &[Step] {
        self.options.as_ref().map_or(&[], |o| &o.finally)
    }

    /// `protected = true` (docs/operating.md#trust).
    pub fn protected(&self) -> bool {
        self.options.as_ref().is_some_and(|o| o.protected)
    }

    /// The loop breaker in force (docs/safety.md#the-breaker); `None` for
    /// `trip = false`.
    pub fn trip(&self) -> Option<crate::envelope::Trip> {
        self.options
            .as_ref()
            .map_or(crate::envelope::Breaker::Default, |o| o.trip)
            .trip()
    }

    /// `per` (docs/rules.md#keyed-runs): the key's program, `None` for a
    /// rule with one key.
    pub fn per(&self) -> Option<&Program> {
        self.options.as_ref().and_then(|o| o.per.as_ref())
    }

    /// `at` and `every`, `None` when the rule has neither.
    pub fn schedule(&self) -> Option<&crate::schedule::Schedule> {
        self.options
            .as_ref()
            .map(|o| &o.schedule)
            .filter(|schedule| !schedule.is_empty())
    }
}

/// One `[[rule.input]]` declaration (docs/rules.md#inputs): where the
/// values come from, and the topic of the events they make.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Input {
    pub source: InputSource,
    /// Starts with `input.`; `None` only for a hash input that just feeds
    /// `state()`.
    pub topic: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum InputSource {
    /// Fields of a hash, watched by the `HSET` + `PUBLISH hash field`
    /// convention (docs/semantics.md#state).
    Hash { hash: String, fields: Vec<String> },
    /// A raw pub/sub channel.
    Channel {
        channel: String,
        format: PayloadFormat,
        /// At most [`crate::limits::MAX_INPUT_BYTES`].
        max_bytes: u32,
    },
}

/// How a channel input reads a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PayloadFormat {
    /// `data.payload` is the message as a string (UTF-8, invalid bytes
    /// replaced).
    String,
    /// `data.payload` is the message decoded as JSON (any value).
    Json,
}

impl PayloadFormat {
    /// As a rule file writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            PayloadFormat::String => "string",
            PayloadFormat::Json => "json",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Concurrency {
    Restart,
    Drop,
    Queue,
}

/// `count` passes in all: `every_ns` apart (the pause after a pass), or
/// one starting every `period_ns` (docs/rules.md#repeat); a rule file sets
/// one of the two. One pass is [`Repeat::ONCE`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Repeat {
    pub count: u32,
    pub every_ns: u64,
    /// From the start of one pass to the start of the next; 0: none.
    pub period_ns: u64,
}

impl Repeat {
    /// One pass: the default when a rule has no `repeat`.
    pub const ONCE: Repeat = Repeat {
        count: 1,
        every_ns: 0,
        period_ns: 0,
    };

    /// `count` passes, `every_ns` of pause after each.
    pub const fn every(count: u32, every_ns: u64) -> Repeat {
        Repeat {
            count,
            every_ns,
            period_ns: 0,
        }
    }

    /// `count` passes, one starting every `period_ns`.
    pub const fn period(count: u32, period_ns: u64) -> Repeat {
        Repeat {
            count,
            every_ns: 0,
            period_ns,
        }
    }
}

impl Default for Repeat {
    fn default() -> Repeat {
        Repeat::ONCE
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    /// Shared: the decoder hands equal actions one `Arc`
    /// ([`crate::payload_decode`]).
    pub action: Arc<Action>,
    pub when: Option<Program>,
    pub after_ns: u64,
    pub durable: bool,
    pub fingerprint: Fingerprint,
}

impl Step {
    /// A step without `when`, durable exactly when it waits (`after_ns` >
    /// 0, the default of docs/rules.md#step-keys), with its fingerprint computed.
    /// After setting `when` (which indexes the bundle's pools) or
    /// `durable`, build the payload with [`Payload::new`] or call
    /// [`Payload::refresh_fingerprints`] so the fingerprint follows.
    pub fn new(action: Action, after_ns: u64) -> Step {
        let durable = after_ns > 0;
        Step {
            fingerprint: step_fingerprint(&action, None, after_ns, durable, &[], &[]),
            action: Arc::new(action),
            when: None,
            after_ns,
            durable,
        }
    }
}

/// 16 bytes of blake3, shown as 32 lowercase hex characters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Fingerprint(pub [u8; 16]);

impl std::fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for byte in self.0 {
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

/// The `timeout` of an `exec`, `redis`, `publish` or `notify` step that
/// does not set one (docs/rules.md#step-keys).
pub const DEFAULT_TIMEOUT_NS: u64 = 10_000_000_000;

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Action {
    /// `LPUSH list push`, waiting at most `timeout_ns` for Redis' reply
    /// (docs/semantics.md#worker-pool-and-actions).
    Redis {
        list: String,
        push: Text,
        timeout_ns: u64,
    },
    /// Run `command` (no arguments, no shell); killed with its process group
    /// after `timeout_ns`.
    Exec { command: String, timeout_ns: u64 },
    /// One raw SocketCAN frame.
    Can(CanFrame),
    /// `PUBLISH channel message`, waiting as a `redis` step does
    /// (docs/rules.md#the-publish-action).
    Publish {
        channel: String,
        message: Text,
        timeout_ns: u64,
    },
    /// A toast on the dashboard: the engine turns it into a `Publish` of
    /// its JSON on [`NOTIFY_CHANNEL`] when the step is submitted
    /// (docs/rules.md#the-notify-action). Boxed: it is the largest action.
    Notify(Box<Notification>),
}

impl Action {
    /// `LPUSH list push` with the default reply timeout.
    pub fn redis(list: impl Into<String>, push: impl Into<String>) -> Action {
        Action::Redis {
            list: list.into(),
            push: Text::Plain(push.into()),
            timeout_ns: DEFAULT_TIMEOUT_NS,
        }
    }

    /// The reply or run timeout, for the kinds that have one.
    pub fn timeout_ns(&self) -> Option<u64> {
        match self {
            Action::Redis { timeout_ns, .. }
            | Action::Exec { timeout_ns, .. }
            | Action::Publish { timeout_ns, .. } => Some(*timeout_ns),
            Action::Notify(notification) => Some(notification.timeout_ns),
            Action::Can(_) => None,
        }
    }

    /// The values it computes when submitted, in order (`push`, `message`,
    /// `title`, `body`).
    pub fn texts(&self) -> impl Iterator<Item = &Text> {
        let texts: [Option<&Text>; 2] = match self {
            Action::Redis { push, .. } => [Some(push), None],
            Action::Publish { message, .. } => [Some(message), None],
            Action::Notify(notification) => [Some(&notification.title), Some(&notification.body)],
            Action::Exec { .. } | Action::Can(_) => [None, None],
        };
        texts.into_iter().flatten()
    }
}

impl Action {
    /// [`Action::texts`], to change them (the compiler's lowering).
    pub fn texts_mut(&mut self) -> impl Iterator<Item = &mut Text> {
        let texts: [Option<&mut Text>; 2] = match self {
            Action::Redis { push, .. } => [Some(push), None],
            Action::Publish { message, .. } => [Some(message), None],
            Action::Notify(notification) => {
                let Notification { title, body, .. } = &mut **notification;
                [Some(title), Some(body)]
            }
            Action::Exec { .. } | Action::Can(_) => [None, None],
        };
        texts.into_iter().flatten()
    }
}

/// The channel the dashboard (scootui) reads toasts from.
pub const NOTIFY_CHANNEL: &str = "scootui:notification";

/// The most bytes the dashboard accepts in one notification message.
pub const MAX_NOTIFICATION_BYTES: usize = 4096;

/// A `notify` step (docs/rules.md#the-notify-action).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Notification {
    /// The toast's id: a later notification with the same id replaces it;
    /// the rule's name unless the step sets one.
    pub id: String,
    pub title: Text,
    pub body: Text,
    pub severity: Severity,
    /// 1,000 to 60,000.
    pub ttl_ms: u32,
    /// Remove the toast `id` instead of showing one.
    pub dismiss: bool,
    pub timeout_ns: u64,
}

/// How the dashboard shows a toast.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Severity {
    Debug,
    Info,
    Success,
    Warning,
    Error,
    Critical,
}

impl Severity {
    pub const ALL: [Severity; 6] = [
        Severity::Debug,
        Severity::Info,
        Severity::Success,
        Severity::Warning,
        Severity::Error,
        Severity::Critical,
    ];
    /// The values of `severity`, in the order of [`Severity::ALL`].
    pub const NAMES: &'static [&'static str] =
        &["debug", "info", "success", "warning", "error", "critical"];

    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Debug => "debug",
            Severity::Info => "info",
            Severity::Success => "success",
            Severity::Warning => "warning",
            Severity::Error => "error",
            Severity::Critical => "critical",
        }
    }

    pub fn from_name(name: &str) -> Option<Severity> {
        Severity::ALL.into_iter().find(|s| s.as_str() == name)
    }
}

impl Notification {
    /// The message the dashboard reads, for a title and body already
    /// computed: `{"source":"rules","id",...}`. A body that would take the
    /// message past [`MAX_NOTIFICATION_BYTES`] is cut (at a character
    /// boundary) to fit; the second value says how many bytes of it went.
    /// `None` when even an empty body does not fit (a title computed too
    /// long).
    pub fn message(&self, title: &str, body: &str) -> Option<(String, usize)> {
        // In the order the dashboard documents its fields.
        let string = |text: &str| serde_json::Value::from(text).to_string();
        let (id, title) = (string(&self.id), string(title));
        let action = if self.dismiss { "dismiss" } else { "show" };
        let (severity, ttl_ms) = (self.severity.as_str(), self.ttl_ms);
        let json = |body: &str| {
            format!(
                r#"{{"source":"rules","id":{id},"action":"{action}","title":{title},"body":{},"severity":"{severity}","ttl_ms":{ttl_ms}}}"#,
                string(body)
            )
        };
        let full = json(body);
        if full.len() <= MAX_NOTIFICATION_BYTES {
            return Some((full, 0));
        }
        let empty = json("").len();
        if empty > MAX_NOTIFICATION_BYTES {
            return None;
        }
        // Escaping only grows a character, so a body that fits escaped
        // fits raw: search for the longest prefix that fits.
        let mut keep = body.len().min(MAX_NOTIFICATION_BYTES - empty);
        loop {
            while !body.is_char_boundary(keep) {
                keep -= 1;
            }
            let message = json(&body[..keep]);
            if message.len() <= MAX_NOTIFICATION_BYTES {
                return Some((message, body.len() - keep));
            }
            let over = message.len() - MAX_NOTIFICATION_BYTES;
            keep = keep.saturating_sub(over.max(1));
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CanFrame {
    pub iface: String,
    /// At most 0x1FFFFFFF.
    pub id: u32,
    /// Set when `id` > 0x7FF.
    pub extended: bool,
    pub rtr: bool,
    /// Data length code: `data.len()` for a data frame, the requested length
    /// for a remote frame.
    pub dlc: u8,
    /// At most 8 bytes; empty for a remote frame.
    pub data: Vec<u8>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bytecode::Op;

    fn blink(push: &str) -> Action {
        Action::redis("scooter:blinker", push)
    }

    #[test]
    fn step_new_defaults_and_fingerprint() {
        let now = Step::new(blink("both"), 0);
        assert!(!now.durable);
        assert_eq!(now.when, None);
        assert_eq!(now.fingerprint, fingerprint_of(&now, &[], &[]));
        let later = Step::new(blink("both"), 30_000_000_000);
        assert!(later.durable);
        assert_ne!(later.fingerprint, now.fingerprint);
    }

    #[test]
    fn rule_new_defaults() {
        let on = vec![TopicPattern::parse("alarm.*").unwrap()];
        let rule = Rule::new("r", "a.toml", on.clone(), vec![Step::new(blink("x"), 0)]);
        assert_eq!((&*rule.name, &*rule.source), ("r", "a.toml"));
        assert!(rule.enabled);
        assert_eq!(*rule.on, on);
        assert!(rule.cancel_on().is_empty());
        assert_eq!(rule.concurrency, Concurrency::Restart);
        assert_eq!((rule.cooldown_ns(), rule.debounce_ns()), (0, 0));
        assert_eq!(
            rule.repeat(),
            Repeat {
                count: 1,
                every_ns: 0,
                period_ns: 0
            }
        );
        assert_eq!(rule.when, None);
        assert_eq!(rule.steps.len(), 1);
    }

    #[test]
    fn payload_new_fingerprints_against_its_pools() {
        let mut step = Step::new(blink("off"), 0);
        let stale = step.fingerprint;
        step.when = Some(Program {
            ops: vec![Op::State(0), Op::Const(0), Op::Eq],
        });
        let pairs = vec![StatePair {
            hash: "vehicle".into(),
            field: "state".into(),
        }];
        let consts = vec![Const::Str("parked".into())];
        let on = vec![TopicPattern::parse("a").unwrap()];
        let mut payload = Payload::new(
            "test",
            vec![Rule::new("r", "a.toml", on, vec![step])],
            pairs.clone(),
            consts,
        );
        assert_eq!(payload.compiler_version, "test");
        let got = payload.rules[0].steps[0].fingerprint;
        assert_ne!(got, stale);
        assert_eq!(
            got,
            fingerprint_of(&payload.rules[0].steps[0], &payload.consts, &pairs)
        );
        // Another constant behind the same index: refreshed, it moves.
        payload.consts[0] = Const::Str("driving".into());
        payload.refresh_fingerprints();
        assert_ne!(payload.rules[0].steps[0].fingerprint, got);
    }
}

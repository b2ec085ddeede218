//! The one table of rule-file keys (docs/rules.md#rule-keys, docs/rules.md#step-keys, docs/rules.md#the-can-action): every key,
//! where it may be written, its type, default and meaning, and for a step
//! key the action kind it belongs to. It drives the reader's allowed keys
//! and their unknown-key help ([`crate::rulefile`]), the "key of another
//! action kind" warning ([`crate::validate`]), `rulec schema`
//! ([`crate::schema`]) and [`markdown`], an author reference.

use rulecore::bundle::Severity;
use std::fmt::Write as _;

/// Where a key is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// The file itself.
    Top,
    /// A `[[rule]]` table.
    Rule,
    /// A rule's `repeat` table.
    Repeat,
    /// A `[[rule.step]]` table.
    Step,
    /// A `[[topic]]` table: the topic catalogue (docs/rules.md#the-topic-catalogue).
    Topic,
    /// A `[[rule.input]]` table (docs/rules.md#inputs).
    Input,
    /// A `[[guard]]` table (docs/safety.md#guards).
    Guard,
    /// A `[[limit]]` table (docs/safety.md#limits).
    Limit,
    /// A rule's `trip` table (docs/safety.md#the-breaker).
    Trip,
}

impl Level {
    /// Every level, in the order of the reference.
    pub const ALL: [Level; 9] = [
        Level::Top,
        Level::Rule,
        Level::Repeat,
        Level::Step,
        Level::Input,
        Level::Topic,
        Level::Guard,
        Level::Limit,
        Level::Trip,
    ];

    /// The level of the tables a header's dotted name opens (`["rule",
    /// "step"]` for `[[rule.step]]`); the empty name is the file's top.
    /// `rulec lsp` reads headers with it while the text is typed.
    pub fn of_header(path: &[&str]) -> Option<Level> {
        Some(match path {
            [] => Level::Top,
            ["rule"] => Level::Rule,
            ["rule", "step"] => Level::Step,
            ["rule", "input"] => Level::Input,
            ["topic"] => Level::Topic,
            _ => return None,
        })
    }

    /// Where the level is, as unknown-key messages say it.
    pub fn place(self) -> &'static str {
        match self {
            Level::Top => "at the top level",
            Level::Rule => "in a rule",
            Level::Repeat => "in `repeat`",
            Level::Step => "in a step",
            Level::Topic => "in a topic",
            Level::Input => "in an input",
            Level::Guard => "in a guard",
            Level::Limit => "in a limit",
            Level::Trip => "in `trip`",
        }
    }

    /// The TOML that opens the level, for the reference's headings.
    pub fn header(self) -> &'static str {
        match self {
            Level::Top => "the file",
            Level::Rule => "`[[rule]]`",
            Level::Repeat => "`repeat = { ... }`",
            Level::Step => "`[[rule.step]]`",
            Level::Topic => "`[[topic]]`",
            Level::Input => "`[[rule.input]]`",
            Level::Guard => "`[[guard]]`",
            Level::Limit => "`[[limit]]`",
            Level::Trip => "`trip = { ... }`",
        }
    }
}

/// The action kinds of a step (`do`), docs/rules.md#step-keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActionKind {
    Redis,
    Publish,
    Notify,
    Exec,
    Can,
}

impl ActionKind {
    pub const ALL: [ActionKind; 5] = [
        ActionKind::Redis,
        ActionKind::Publish,
        ActionKind::Notify,
        ActionKind::Exec,
        ActionKind::Can,
    ];
    /// The values of `do`, in the order of [`ActionKind::ALL`].
    pub const NAMES: &'static [&'static str] = &["redis", "publish", "notify", "exec", "can"];

    pub fn as_str(self) -> &'static str {
        match self {
            ActionKind::Redis => "redis",
            ActionKind::Publish => "publish",
            ActionKind::Notify => "notify",
            ActionKind::Exec => "exec",
            ActionKind::Can => "can",
        }
    }

    pub fn from_name(name: &str) -> Option<ActionKind> {
        Self::ALL.into_iter().find(|kind| kind.as_str() == name)
    }
}

/// Which durations a duration key accepts (docs/rules.md#durations).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sign {
    /// Any duration here; a rule elsewhere constrains it (`repeat.every`).
    Any,
    /// Zero or more.
    NotNegative,
    /// More than zero.
    Positive,
}

/// The type of a key's value, with the constraints a schema can state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ty {
    /// An array of tables of the keys of `level`; `non_empty`: at least one.
    Tables {
        level: Level,
        non_empty: bool,
    },
    /// One table of the keys of `level`.
    Table(Level),
    /// `[[rule.finally]]` (docs/rules.md#finally): tables with the keys of
    /// a step, `durable` excepted.
    Finally,
    /// A non-empty string.
    Text,
    /// Topic patterns (docs/rules.md#topic-patterns); `non_empty`: at least one.
    Patterns {
        non_empty: bool,
    },
    /// A `when` expression (docs/when-language.md).
    When,
    /// One of these strings.
    Choice(&'static [&'static str]),
    Duration(Sign),
    Bool,
    /// An integer in `min..=max`.
    Integer {
        min: u64,
        max: u64,
    },
    /// An exec program name or path: no white space, no arguments.
    Command,
    /// A SocketCAN interface name (docs/rules.md#the-can-action).
    CanIface,
    /// `id`: a CAN frame id in hex, at most 0x1FFFFFFF; a notify's toast id.
    StepId,
    /// A string, possibly empty.
    AnyText,
    /// Local times of day, `HH:MM` or `HH:MM:SS` (docs/rules.md#schedules).
    TimesOfDay,
    /// CAN payload bytes in hex.
    CanData,
    /// A table of `data` keys, each naming its type (docs/rules.md#the-topic-catalogue).
    DataTypes,
    /// Hash or channel names (docs/rules.md#inputs); `non_empty`: at least one.
    Names {
        non_empty: bool,
    },
    /// A hash, channel or field name of an input (docs/rules.md#inputs).
    Name,
    /// `trip`: a table of [`Level::Trip`] keys, or `false`.
    TripOrFalse,
    /// A value pattern list (`values` of a guard or limit).
    ValuePatterns,
}

impl Ty {
    /// The level of each table of an array of tables (a finally table is a
    /// step's); `None` for any other type.
    pub fn tables_of(self) -> Option<Level> {
        match self {
            Ty::Tables { level, .. } => Some(level),
            Ty::Finally => Some(Level::Step),
            _ => None,
        }
    }

    /// The type as the reference shows it.
    pub fn describe(self) -> String {
        match self {
            Ty::Tables { level, .. } => format!("array of {} tables", level.header()),
            Ty::Table(_) => "table".to_string(),
            Ty::Finally => format!(
                "array of tables with the keys of {}, without `durable`",
                Level::Step.header()
            ),
            Ty::Text => "string, not empty".to_string(),
            Ty::Patterns { .. } => "array of topic patterns".to_string(),
            Ty::When => "`when` expression (string)".to_string(),
            Ty::Choice(values) => values
                .iter()
                .map(|value| format!("`\"{value}\"`"))
                .collect::<Vec<_>>()
                .join(" / "),
            Ty::Duration(Sign::Any) => "duration".to_string(),
            Ty::Duration(Sign::NotNegative) => "duration, not negative".to_string(),
            Ty::Duration(Sign::Positive) => "duration, positive".to_string(),
            Ty::Bool => "boolean".to_string(),
            Ty::Integer { min, max } => format!("integer, {min} to {max}"),
            Ty::Command => "string: a program name or path".to_string(),
            Ty::CanIface => "string: an interface name".to_string(),
            Ty::StepId => {
                "can: hex string (a decimal TOML integer warns); notify: string".to_string()
            }
            Ty::AnyText => "string".to_string(),
            Ty::TimesOfDay => "array of local times `\"HH:MM\"` or `\"HH:MM:SS\"`".to_string(),
            Ty::CanData => "hex string".to_string(),
            Ty::Names { .. } => "array of names".to_string(),
            Ty::Name => "string: an exact name".to_string(),
            Ty::TripOrFalse => format!("{} table, or `false`", Level::Trip.header()),
            Ty::ValuePatterns => "array of value patterns".to_string(),
            Ty::DataTypes => format!(
                "table: data key = {}",
                DATA_TYPES
                    .iter()
                    .map(|name| format!("`\"{name}\"`"))
                    .collect::<Vec<_>>()
                    .join(" / ")
            ),
        }
    }
}

/// The types a `[[topic]]` may give a `data` key; `any` is not checked.
pub const DATA_TYPES: &[&str] = &["string", "int", "float", "bool", "any"];

/// What an absent key means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DefaultValue {
    /// This string value (also the schema's `default`).
    Str(&'static str),
    /// This boolean value (also the schema's `default`).
    Bool(bool),
    /// No single value: the words say what absence means.
    Prose(&'static str),
}

/// One key of the rule-file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    pub name: &'static str,
    pub level: Level,
    pub ty: Ty,
    /// Required at its level; for a key of one action kind, required on
    /// steps of that kind.
    pub required: bool,
    pub default: Option<DefaultValue>,
    /// For a step key: the only action kinds it applies to; empty for
    /// every kind (and for keys of other levels).
    pub actions: &'static [ActionKind],
    /// For a required key of several action kinds: the kinds it is
    /// required on (empty: all of `actions`); the others use `default`.
    pub required_kinds: &'static [ActionKind],
    /// What the key does, one or two sentences (the schema's description).
    pub doc: &'static str,
    /// The key as an author writes it, for the reference (docs/rules.md).
    pub example: &'static str,
}

const fn key(name: &'static str, level: Level, ty: Ty, doc: &'static str) -> Key {
    Key {
        name,
        level,
        ty,
        required: false,
        default: None,
        actions: &[],
        required_kinds: &[],
        doc,
        example: "",
    }
}

impl Key {
    const fn required(mut self) -> Key {
        self.required = true;
        self
    }

    /// Required only on steps of `kinds`.
    const fn required_for(mut self, kinds: &'static [ActionKind]) -> Key {
        self.required = true;
        self.required_kinds = kinds;
        self
    }

    /// Whether a step of `kind` must set the key.
    pub fn required_on(&self, kind: ActionKind) -> bool {
        self.required
            && self.actions.contains(&kind)
            && (self.required_kinds.is_empty() || self.required_kinds.contains(&kind))
    }

    const fn default(mut self, default: DefaultValue) -> Key {
        self.default = Some(default);
        self
    }

    const fn only(mut self, kinds: &'static [ActionKind]) -> Key {
        self.actions = kinds;
        self
    }

    const fn example(mut self, example: &'static str) -> Key {
        self.example = example;
        self
    }
}

/// Every key, grouped by level, each level in the order that unknown-key
/// help lists them.
pub const KEYS: &[Key] = &[
    key(
        "rule",
        Level::Top,
        Ty::Tables { level: Level::Rule, non_empty: false },
        "The rules of the file, one `[[rule]]` table each.",
    )
    .example("[[rule]]"),
    key(
        "topic",
        Level::Top,
        Ty::Tables { level: Level::Topic, non_empty: false },
        "Topic declarations, one `[[topic]]` table each: the catalogue `rulec check` holds `on`, `cancel-on` and `data.*` against.",
    )
    .example("[[topic]]"),
    key(
        "guard",
        Level::Top,
        Ty::Tables { level: Level::Guard, non_empty: false },
        "Guards, one `[[guard]]` table each: actions performed only while a condition over `state()` holds (docs/safety.md#guards). They add to the profile's.",
    )
    .example("[[guard]]"),
    key(
        "limit",
        Level::Top,
        Ty::Tables { level: Level::Limit, non_empty: false },
        "Limits, one `[[limit]]` table each: at most `max` covered actions in any window `per`, over all rules (docs/safety.md#limits). They add to the profile's.",
    )
    .example("[[limit]]"),
    // docs/rules.md#rule-keys
    key("name", Level::Rule, Ty::Text, "Unique among the enabled rules of all files.")
        .required()
        .example(r#"name = "hazards-on-alarm""#),
    key(
        "on",
        Level::Rule,
        Ty::Patterns { non_empty: true },
        "Topic patterns that trigger the rule.",
    )
    .default(DefaultValue::Prose("required without `at` or `every`"))
    .example(r#"on = ["alarm.triggered", "button.*"]"#),
    key(
        "when",
        Level::Rule,
        Ty::When,
        "Condition on the triggering event and state(); absent: fire on every matching event.",
    )
    .example(r#"when = 'to == "parked" && data.speed < 5'"#),
    key(
        "concurrency",
        Level::Rule,
        Ty::Choice(&["restart", "drop", "queue"]),
        "What a trigger does while a run is live: restart it, drop the trigger, or queue it (at most 8).",
    )
    .default(DefaultValue::Str("restart"))
    .example(r#"concurrency = "queue""#),
    key(
        "cancel-on",
        Level::Rule,
        Ty::Patterns { non_empty: false },
        "Topic patterns that cancel the rule's live runs and backlog.",
    )
    .example(r#"cancel-on = ["alarm.disarmed"]"#),
    key(
        "at",
        Level::Rule,
        Ty::TimesOfDay,
        "Fire the rule at these local times of day (event `time.at`, `data.at` the time); `on` may then be left out.",
    )
    .example(r#"at = ["22:00", "06:30:15"]"#),
    key(
        "every",
        Level::Rule,
        Ty::Duration(Sign::Positive),
        "Fire the rule on this grid of the local day, aligned to midnight (event `time.every`); a whole number of seconds dividing 24h.",
    )
    .example(r#"every = "5m""#),
    key(
        "cooldown",
        Level::Rule,
        Ty::Duration(Sign::NotNegative),
        "Ignore triggers for this long after the rule fired. Zero or absent: none.",
    )
    .example(r#"cooldown = "10m""#),
    key(
        "debounce",
        Level::Rule,
        Ty::Duration(Sign::Positive),
        "Wait for this long without a newer match, then fire with the latest event. Must be positive.",
    )
    .example(r#"debounce = "5s""#),
    key(
        "for",
        Level::Rule,
        Ty::Duration(Sign::Positive),
        "Hold: dispatch only once `when` has stayed true this long; fires once until `when` was false again. Must be positive; not with `debounce`.",
    )
    .example(r#"for = "5s""#),
    key(
        "repeat",
        Level::Rule,
        Ty::Table(Level::Repeat),
        "Run the steps more than once: `count` passes, `every` apart (the pause after a pass) or one starting every `period`.",
    )
    .default(DefaultValue::Prose("one pass"))
    .example(r#"repeat = { count = 3, every = "2s" }"#),
    key(
        "per",
        Level::Rule,
        Ty::When,
        "Keyed runs: concurrency, cooldown, debounce and `for` apply per value of this expression over the event (at most 64 keys tracked); no `state()`.",
    )
    .default(DefaultValue::Prose("one key"))
    .example(r#"per = "data.slot""#),
    key(
        "enabled",
        Level::Rule,
        Ty::Bool,
        "false: not matched, but compiled as replay-only.",
    )
    .default(DefaultValue::Bool(true))
    .example("enabled = false"),
    key(
        "protected",
        Level::Rule,
        Ty::Bool,
        "true: only a signed control request turns the rule off, and no stored override applies to it at start (docs/operating.md#trust).",
    )
    .default(DefaultValue::Bool(false))
    .example("protected = true"),
    key(
        "trip",
        Level::Rule,
        Ty::TripOrFalse,
        "The loop breaker: more than `starts` runs started in any window `per` refuse the rule's triggers for `pause` (docs/safety.md#the-breaker); `false` turns it off.",
    )
    .default(DefaultValue::Prose("`{ starts = 100, per = \"10s\", pause = \"60s\" }`"))
    .example(r#"trip = { starts = 20, per = "10s", pause = "60s" }"#),
    key(
        "input",
        Level::Rule,
        Ty::Tables { level: Level::Input, non_empty: false },
        "Inputs: hash fields or a raw channel whose changes become `input.*` events, one `[[rule.input]]` table each.",
    )
    .example("[[rule.input]]"),
    key(
        "step",
        Level::Rule,
        Ty::Tables { level: Level::Step, non_empty: true },
        "The steps, run in order, one `[[rule.step]]` table each.",
    )
    .required()
    .example("[[rule.step]]"),
    key(
        "finally",
        Level::Rule,
        Ty::Finally,
        "Steps that still run, in order, when `cancel-on` ends a run before its last step finished, after the action it was running; never durable. One `[[rule.finally]]` table each.",
    )
    .example("[[rule.finally]]"),
    // docs/rules.md#rule-keys, `repeat`
    key(
        "count",
        Level::Repeat,
        Ty::Integer { min: 1, max: u32::MAX as u64 },
        "Passes in all.",
    )
    .required()
    .example("count = 3"),
    key(
        "every",
        Level::Repeat,
        Ty::Duration(Sign::Any),
        "Pause after a pass before the next; with count > 1 this or `period` is required, positive.",
    )
    .example(r#"every = "2s""#),
    key(
        "period",
        Level::Repeat,
        Ty::Duration(Sign::Any),
        "From the start of one pass to the start of the next (a late pass starts at once); not with `every`.",
    )
    .example(r#"period = "1s""#),
    // docs/rules.md#step-keys
    key(
        "do",
        Level::Step,
        Ty::Choice(ActionKind::NAMES),
        "The action: `redis` (LPUSH list push), `publish` (PUBLISH channel message), `notify` (a toast on the dashboard), `exec` (run a program), `can` (send one CAN frame).",
    )
    .required()
    .example(r#"do = "redis""#),
    key(
        "when",
        Level::Step,
        Ty::When,
        "Checked just before the step is submitted; false ends the run. Absent: always run once reached.",
    )
    .example(r#"when = 'state("vehicle", "state") == "parked"'"#),
    key(
        "after",
        Level::Step,
        Ty::Duration(Sign::NotNegative),
        "Delay after the previous step finished (or after the run started, for the first step). Default 0.",
    )
    .default(DefaultValue::Str("0s"))
    .example(r#"after = "30s""#),
    key(
        "durable",
        Level::Step,
        Ty::Bool,
        "Whether the delayed step survives a restart. Default: true when `after` > 0; only allowed when `after` > 0.",
    )
    .default(DefaultValue::Prose("true when `after` > 0"))
    .example("durable = false"),
    key(
        "list",
        Level::Step,
        Ty::Text,
        "redis: the list to LPUSH to, e.g. `scooter:blinker`.",
    )
    .required()
    .only(&[ActionKind::Redis])
    .example(r#"list = "scooter:blinker""#),
    key(
        "push",
        Level::Step,
        Ty::Text,
        "redis: the value to LPUSH, e.g. `both`; may compute parts with `${...}`.",
    )
    .required()
    .only(&[ActionKind::Redis])
    .example(r#"push = "both""#),
    // docs/rules.md#the-publish-action
    key(
        "channel",
        Level::Step,
        Ty::Name,
        "publish: the exact channel to PUBLISH on; not under `ev:`.",
    )
    .required()
    .only(&[ActionKind::Publish])
    .example(r#"channel = "my:events""#),
    key(
        "message",
        Level::Step,
        Ty::Text,
        "publish: the message; may compute parts with `${...}`.",
    )
    .required()
    .only(&[ActionKind::Publish])
    .example(r#"message = "charge ${int(to)}""#),
    // docs/rules.md#the-notify-action
    key(
        "title",
        Level::Step,
        Ty::Text,
        "notify: the toast's title; may compute parts with `${...}`.",
    )
    .required()
    .only(&[ActionKind::Notify])
    .example(r#"title = "Battery low""#),
    key(
        "body",
        Level::Step,
        Ty::AnyText,
        "notify: the toast's text; may compute parts with `${...}`. Default empty.",
    )
    .default(DefaultValue::Str(""))
    .only(&[ActionKind::Notify])
    .example(r#"body = "Battery ${data.slot + 1} at ${int(to)} %""#),
    key(
        "severity",
        Level::Step,
        Ty::Choice(Severity::NAMES),
        "notify: how the dashboard shows the toast. Default info.",
    )
    .default(DefaultValue::Str("info"))
    .only(&[ActionKind::Notify])
    .example(r#"severity = "warning""#),
    key(
        "ttl",
        Level::Step,
        Ty::Duration(Sign::Positive),
        "notify: how long the toast shows, 1s to 60s. Default 10s.",
    )
    .default(DefaultValue::Str("10s"))
    .only(&[ActionKind::Notify])
    .example(r#"ttl = "5s""#),
    key(
        "dismiss",
        Level::Step,
        Ty::Bool,
        "notify: remove the toast `id` instead of showing one. Default false.",
    )
    .default(DefaultValue::Bool(false))
    .only(&[ActionKind::Notify])
    .example("dismiss = true"),
    key(
        "command",
        Level::Step,
        Ty::Command,
        "exec: an executable name or path; no arguments, no shell.",
    )
    .required()
    .only(&[ActionKind::Exec])
    .example(r#"command = "/usr/local/bin/log-charge-event""#),
    key(
        "timeout",
        Level::Step,
        Ty::Duration(Sign::Positive),
        "exec: kill the command after this long; redis, publish, notify: wait this long for the reply. Default 10s; must be positive.",
    )
    .default(DefaultValue::Str("10s"))
    .only(&[ActionKind::Exec, ActionKind::Redis, ActionKind::Publish, ActionKind::Notify])
    .example(r#"timeout = "5s""#),
    // docs/rules.md#the-can-action
    key(
        "iface",
        Level::Step,
        Ty::CanIface,
        "can: the SocketCAN interface, e.g. `can0`: 1 to 15 bytes, no white space, `/` or NUL.",
    )
    .required()
    .only(&[ActionKind::Can])
    .example(r#"iface = "can0""#),
    key(
        "id",
        Level::Step,
        Ty::StepId,
        "can: the frame id in hex (`\"0x123\"`), at most 0x1FFFFFFF; above 0x7FF the frame is extended. notify: the toast's id: a later notify with the same id replaces the toast.",
    )
    .required_for(&[ActionKind::Can])
    .default(DefaultValue::Prose("on `notify` steps, the rule's name"))
    .only(&[ActionKind::Can, ActionKind::Notify])
    .example(r#"id = "0x3A1""#),
    key(
        "data",
        Level::Step,
        Ty::CanData,
        "can: hex bytes, contiguous (`\"DEADBEEF\"`) or space-separated (`\"DE AD BE EF\"`), at most 8. Not with `rtr`.",
    )
    .only(&[ActionKind::Can])
    .example(r#"data = "01 FF 00 00""#),
    key("rtr", Level::Step, Ty::Bool, "can: send a remote frame (no data). Default false.")
    .default(DefaultValue::Bool(false))
    .only(&[ActionKind::Can])
    .example("rtr = true"),
    key(
        "dlc",
        Level::Step,
        Ty::Integer { min: 0, max: 8 },
        "can: the length a remote frame requests; only with `rtr = true`.",
    )
    .only(&[ActionKind::Can])
    .example("dlc = 8"),
    // docs/rules.md#inputs
    key(
        "hash",
        Level::Input,
        Ty::Name,
        "A hash whose `fields` are watched (`HSET` then `PUBLISH hash field`). Not with `channel`.",
    )
    .example(r#"hash = "vehicle""#),
    key(
        "fields",
        Level::Input,
        Ty::Names { non_empty: true },
        "hash: the fields watched, 1 to 64; required with `hash`.",
    )
    .example(r#"fields = ["engine-power"]"#),
    key(
        "channel",
        Level::Input,
        Ty::Name,
        "A raw pub/sub channel, one event per message; not under `ev:`. Not with `hash`.",
    )
    .example(r#"channel = "accessory:report""#),
    key(
        "format",
        Level::Input,
        Ty::Choice(&["string", "json"]),
        "channel: `data.payload` is the message as a string, or decoded as JSON.",
    )
    .default(DefaultValue::Str("string"))
    .example(r#"format = "json""#),
    key(
        "max-bytes",
        Level::Input,
        Ty::Integer { min: 0, max: 65_536 },
        "channel: a longer message is skipped and logged; 0 means the default.",
    )
    .default(DefaultValue::Prose("4096"))
    .example("max-bytes = 4096"),
    key(
        "topic",
        Level::Input,
        Ty::Text,
        "The events' topic, starting with `input.`; required for a channel. Without it a hash input only feeds `state()`.",
    )
    .example(r#"topic = "input.engine-power""#),
    // docs/rules.md#the-topic-catalogue
    key(
        "name",
        Level::Topic,
        Ty::Text,
        "The topic, exactly as events carry it (no `*`), e.g. `battery.charge.changed`.",
    )
    .required()
    .example(r#"name = "battery.charge.changed""#),
    key("from", Level::Topic, Ty::Bool, "The event carries `from` (the previous value).")
        .default(DefaultValue::Bool(false))
        .example("from = true"),
    key("to", Level::Topic, Ty::Bool, "The event carries `to` (the new value).")
        .default(DefaultValue::Bool(false))
        .example("to = true"),
    key(
        "data",
        Level::Topic,
        Ty::DataTypes,
        "The keys of the event's `data` and their types, e.g. `{ slot = \"int\" }`; a rule on declared topics may read only these.",
    )
    .default(DefaultValue::Prose("no data keys"))
    .example(r#"data = { slot = "int", level = "int" }"#),
    // docs/safety.md#guards and #limits: both tables cover actions alike.
    key("name", Level::Guard, Ty::Text, "Unique among all guards, the profile's included.")
        .required()
        .example(r#"name = "not-while-riding""#),
    key("list", Level::Guard, Ty::Text, "Covers `redis` steps pushing to this list (one of `list`, `channel`, `can`, `exec`).")
        .example(r#"list = "scooter:hardware""#),
    key("channel", Level::Guard, Ty::Text, "Covers `publish` steps to this channel.")
        .example(r#"channel = "dashboard""#),
    key("can", Level::Guard, Ty::Integer { min: 0, max: 0x1FFF_FFFF }, "Covers `can` steps sending a frame with this id.")
        .example("can = 0x4A0"),
    key("exec", Level::Guard, Ty::Bool, "`true`: covers every `exec` step.")
        .example("exec = true"),
    key("values", Level::Guard, Ty::ValuePatterns, "The pushed or published values covered (value patterns, computed values after computing).")
        .default(DefaultValue::Prose("every value"))
        .example(r#"values = ["handlebar:lock", "engine:off"]"#),
    key("when", Level::Guard, Ty::When, "The condition, over `state()` only; an absent, unreadable or stale field makes it false.")
        .required()
        .example(r#"when = 'int(state("engine-ecu", "speed")) == 0'"#),
    key("say", Level::Guard, Ty::Text, "A dashboard toast when the guard refuses an action.")
        .default(DefaultValue::Prose("no toast"))
        .example(r#"say = "Handlebar lock refused: the scooter is moving""#),
    key("name", Level::Limit, Ty::Text, "Unique among all limits, the profile's included.")
        .required()
        .example(r#"name = "horn""#),
    key("list", Level::Limit, Ty::Text, "Covers `redis` steps pushing to this list (one of `list`, `channel`, `can`, `exec`).")
        .example(r#"list = "scooter:horn""#),
    key("channel", Level::Limit, Ty::Text, "Covers `publish` steps to this channel.")
        .example(r#"channel = "dashboard""#),
    key("can", Level::Limit, Ty::Integer { min: 0, max: 0x1FFF_FFFF }, "Covers `can` steps sending a frame with this id.")
        .example("can = 0x4A0"),
    key("exec", Level::Limit, Ty::Bool, "`true`: covers every `exec` step.")
        .example("exec = true"),
    key("values", Level::Limit, Ty::ValuePatterns, "The pushed or published values covered.")
        .default(DefaultValue::Prose("every value"))
        .example(r#"values = ["on"]"#),
    key("max", Level::Limit, Ty::Integer { min: 1, max: 1_000_000 }, "At most this many covered actions in any window.")
        .required()
        .example("max = 30"),
    key("per", Level::Limit, Ty::Duration(Sign::Positive), "The window's length, at most 24h.")
        .required()
        .example(r#"per = "60s""#),
    key("starts", Level::Trip, Ty::Integer { min: 1, max: 1_000_000 }, "Run starts allowed in any window.")
        .default(DefaultValue::Prose("100"))
        .example("starts = 20"),
    key("per", Level::Trip, Ty::Duration(Sign::Positive), "The window's length, at most 24h.")
        .default(DefaultValue::Str("10s"))
        .example(r#"per = "10s""#),
    key("pause", Level::Trip, Ty::Duration(Sign::Positive), "How long a tripped rule's triggers are refused, at most 24h.")
        .default(DefaultValue::Str("60s"))
        .example(r#"pause = "60s""#),
];

/// The keys of `level`, in table order.
pub fn keys(level: Level) -> impl Iterator<Item = &'static Key> {
    KEYS.iter().filter(move |key| key.level == level)
}

/// The names of the keys of `level`, in table order.
pub fn names(level: Level) -> Vec<&'static str> {
    keys(level).map(|key| key.name).collect()
}

/// The key `name` of `level`, if the format has one.
pub fn find(level: Level, name: &str) -> Option<&'static Key> {
    keys(level).find(|key| key.name == name)
}

/// The values a [`Ty::Choice`] key takes, as the table writes them; empty
/// for a key that is not a choice (a unit test holds the callers' keys).
pub fn choices(level: Level, name: &str) -> &'static [&'static str] {
    match find(level, name).map(|key| key.ty) {
        Some(Ty::Choice(values)) => values,
        _ => &[],
    }
}

/// The default of a key whose default is one string, as the table writes it.
pub fn default_str(level: Level, name: &str) -> Option<&'static str> {
    match find(level, name)?.default {
        Some(DefaultValue::Str(value)) => Some(value),
        _ => None,
    }
}

/// The default of a boolean key, as the table writes it.
pub fn default_bool(level: Level, name: &str) -> Option<bool> {
    match find(level, name)?.default {
        Some(DefaultValue::Bool(value)) => Some(value),
        _ => None,
    }
}

/// The table as Markdown, one section per level: an author reference.
pub fn markdown() -> String {
    let mut out = String::new();
    for level in Level::ALL {
        // Writing to a String cannot fail.
        let _ = writeln!(out, "### {}\n", level.header());
        out.push_str(&markdown_table(level));
        out.push('\n');
    }
    out
}

/// The keys of one level as a Markdown table: key, type, default, the
/// action kinds it applies to, meaning and an example. docs/rules.md
/// holds these tables verbatim (a test compares them).
pub fn markdown_table(level: Level) -> String {
    let mut out = String::new();
    out.push_str("| key | type | default | applies to | meaning | example |\n");
    out.push_str("|---|---|---|---|---|---|\n");
    for key in keys(level) {
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | {} | {} | `{}` |",
            key.name,
            key.ty.describe(),
            default_cell(key),
            applies_to(key),
            key.doc.replace('|', "\\|"),
            key.example.replace('|', "\\|"),
        );
    }
    out
}

/// What the reference says for a key's default.
pub fn default_cell(key: &Key) -> String {
    if let ([_, ..], Some(DefaultValue::Prose(text))) = (key.required_kinds, key.default) {
        return format!("required on {} steps; {text}", kinds(key.required_kinds));
    }
    match (key.required, key.default) {
        (true, _) => "required".to_string(),
        (false, Some(DefaultValue::Str(value))) => format!("`\"{value}\"`"),
        (false, Some(DefaultValue::Bool(value))) => format!("`{value}`"),
        (false, Some(DefaultValue::Prose(text))) => text.to_string(),
        (false, None) => "none".to_string(),
    }
}

/// "`exec`, `redis` and `publish`".
fn kinds(kinds: &[ActionKind]) -> String {
    let names: Vec<String> = kinds
        .iter()
        .map(|kind| format!("`{}`", kind.as_str()))
        .collect();
    match names.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => String::new(),
    }
}

fn applies_to(key: &Key) -> String {
    match (key.level, key.actions) {
        (_, [_, ..]) => format!("{} steps", kinds(key.actions)),
        (Level::Step, []) => "every step".to_string(),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_name_their_levels() {
        assert_eq!(Level::of_header(&[]), Some(Level::Top));
        assert_eq!(Level::of_header(&["rule"]), Some(Level::Rule));
        assert_eq!(Level::of_header(&["rule", "step"]), Some(Level::Step));
        assert_eq!(Level::of_header(&["rule", "input"]), Some(Level::Input));
        assert_eq!(Level::of_header(&["topic"]), Some(Level::Topic));
        assert_eq!(Level::of_header(&["rule", "repeat"]), None);
    }

    #[test]
    fn names_are_unique_per_level() {
        for level in Level::ALL {
            let mut names = names(level);
            let count = names.len();
            names.sort_unstable();
            names.dedup();
            assert_eq!(names.len(), count, "{level:?}");
        }
    }

    #[test]
    fn only_step_keys_belong_to_an_action() {
        for key in KEYS {
            assert!(
                key.actions.is_empty() || key.level == Level::Step,
                "{}",
                key.name
            );
        }
        assert_eq!(ActionKind::ALL.map(ActionKind::as_str), ActionKind::NAMES);
    }

    #[test]
    fn every_key_has_an_example_that_names_it() {
        for key in KEYS {
            assert!(
                key.example.contains(key.name),
                "{}: {:?}",
                key.name,
                key.example
            );
        }
    }

    #[test]
    fn markdown_has_a_section_per_level_and_a_row_per_key() {
        let text = markdown();
        for level in Level::ALL {
            assert!(
                text.contains(&format!("### {}\n", level.header())),
                "{text}"
            );
        }
        for key in KEYS {
            assert!(
                text.contains(&format!("| `{}` |", key.name)),
                "{}",
                key.name
            );
        }
        assert!(
            text.contains(
                "| `timeout` | duration, positive | `\"10s\"` | `exec`, `redis`, `publish` and `notify` steps |"
            ),
            "{text}"
        );
        assert!(
            text.contains("| `list` | string, not empty | required | `redis` steps |"),
            "{text}"
        );
        assert!(
            text.contains("| required on `can` steps; on `notify` steps, the rule's name | `can` and `notify` steps |"),
            "{text}"
        );
        assert!(
            text.contains("| `enabled` | boolean | `true` |  |"),
            "{text}"
        );
        let rows = text.lines().filter(|line| line.starts_with("| `")).count();
        assert_eq!(rows, KEYS.len());
    }
}

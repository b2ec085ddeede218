//! Every diagnostic code `rulec check` can report (docs/rules.md#errors-and-warnings), as one
//! enum: producers and comparisons name a variant, never a string, and
//! docs/diagnostics.md is checked against [`Code::ALL`].

use std::fmt;

/// Declares [`Code`] from one list: each variant's doc comment (its first
/// line is the [`Code::description`]) and its stable string.
macro_rules! codes {
    ($( $(#[doc = $doc:literal])+ $variant:ident => $code:literal, )+) => {
        /// A stable diagnostic code; [`Code::as_str`] is what text and JSON
        /// output show.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Code {
            $( $(#[doc = $doc])+ $variant, )+
        }

        impl Code {
            /// Every code, in the order of docs/diagnostics.md.
            pub const ALL: &'static [Code] = &[$(Code::$variant),+];

            /// The stable string, e.g. `rulec::duration`.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Code::$variant => $code,)+
                }
            }

            /// One line saying what the code means, for generated docs.
            pub fn description(self) -> &'static str {
                match self {
                    $(Code::$variant => first_line(&[$($doc),+]),)+
                }
            }
        }
    };
}

/// The first line of a doc comment, without the space after `///`.
fn first_line(lines: &[&'static str]) -> &'static str {
    lines.first().map_or("", |line| line.trim())
}

codes! {
    // File level.
    /// TOML syntax error; the span is where the TOML parser stopped.
    Toml => "rulec::toml",
    /// A key that is not part of the format, at any level; rejects the file.
    UnknownKey => "rulec::unknown-key",
    /// The file, or its name, is not valid UTF-8.
    Encoding => "rulec::encoding",

    // Rule and step keys.
    /// A value of the wrong TOML type (also `rule` that is not `[[rule]]` tables).
    Type => "rulec::type",
    /// A required key is missing (`name`, `on`, `step`, `do`, or an action's own keys).
    MissingKey => "rulec::missing-key",
    /// `name = ""`.
    EmptyName => "rulec::empty-name",
    /// `on = []`: the rule could never fire.
    EmptyOn => "rulec::empty-on",
    /// `step = []`.
    NoSteps => "rulec::no-steps",
    /// An empty `list`, `push` or `command`.
    EmptyValue => "rulec::empty-value",
    /// An empty topic pattern in `on` or `cancel-on`.
    Pattern => "rulec::pattern",
    /// More topic patterns in one `on` or `cancel-on` list than the limit.
    TooManyPatterns => "rulec::too-many-patterns",
    /// `concurrency` is not `"restart"`, `"drop"` or `"queue"`.
    Concurrency => "rulec::concurrency",
    /// Not a Go duration (`"10min"`, `"30 s"`, out of range).
    Duration => "rulec::duration",
    /// A negative `cooldown` or `after`; a `debounce`, `for` or exec `timeout` that is not positive.
    DurationRange => "rulec::duration-range",
    /// `for` and `debounce` on one rule (docs/semantics.md#hold).
    ForWithDebounce => "rulec::for-with-debounce",
    /// A malformed or duplicate `[[topic]]` declaration (docs/rules.md#the-topic-catalogue).
    Topic => "rulec::topic",
    /// An `on` or `cancel-on` pattern that matches no declared topic.
    UnknownTopic => "rulec::unknown-topic",
    /// An `on` or `cancel-on` pattern that matches no known topic but is one edit from one (declare the topic to mean it).
    NearMissTopic => "rulec::near-miss-topic",
    /// A declared topic of a family the profile derives, which `ruled --bus own` never takes from the bus.
    OwnedFamily => "rulec::owned-family",
    /// A `data.*` key that none of the rule's declared topics has.
    UnknownDataKey => "rulec::unknown-data-key",
    /// A `data.*` key used against its declared type (`data.charge > "25"`).
    DataType => "rulec::data-type",
    /// `to` or `from` compared with a value the profile's topics never carry.
    EventValue => "rulec::event-value",
    /// `state()` of a profile field compared with a value outside the field's values.
    StateValue => "rulec::state-value",
    /// A redis `push` onto a profile list of a value the list does not accept.
    ListValue => "rulec::list-value",
    /// `repeat` without `count`, a `count` out of range, `every` or `period` missing or not positive, or both set.
    Repeat => "rulec::repeat",
    /// A `per` key that is empty or reads `state()`.
    Per => "rulec::per",
    /// A `per` key that is a constant: every event has one key.
    PerConstant => "rulec::per-constant",
    /// `at` not a list of local times `HH:MM[:SS]`, or `every` not a whole number of seconds that divides a day.
    Schedule => "rulec::schedule",
    /// `durable` on a step whose `after` is absent or zero.
    DurableWithoutAfter => "rulec::durable-without-after",
    /// `durable` on a `[[rule.finally]]` step: finally steps are never durable.
    FinallyDurable => "rulec::finally-durable",
    /// An exec `command` with white space or NUL: one program, no arguments, no shell.
    ExecArguments => "rulec::exec-arguments",
    /// `do = "lua"` or `do = "http"`: not supported yet.
    ActionUnsupported => "rulec::action-unsupported",
    /// Any other unknown `do`.
    UnknownAction => "rulec::unknown-action",
    /// A CAN `iface` longer than 15 bytes, or with white space, `/` or NUL.
    CanIface => "rulec::can-iface",
    /// A CAN `id` not hexadecimal, or above `0x1FFFFFFF`.
    CanId => "rulec::can-id",
    /// (warning) A CAN `id` written as a decimal TOML integer.
    CanIdDecimal => "rulec::can-id-decimal",
    /// CAN `data` that is not hex bytes, or more than 8 bytes.
    CanData => "rulec::can-data",
    /// A `dlc` outside 0..=8, or a `dlc` without `rtr = true`.
    CanDlc => "rulec::can-dlc",
    /// `data` on a remote frame (`rtr = true`), even `data = ""`.
    CanRtrData => "rulec::can-rtr-data",
    /// A publish `channel` that is not one exact name, or is under `ev:`.
    PublishChannel => "rulec::publish-channel",
    /// A notify `severity` that is not one of the dashboard's.
    NotifySeverity => "rulec::notify-severity",
    /// A notify `ttl` outside 1s to 60s.
    NotifyTtl => "rulec::notify-ttl",
    /// A notification with nothing computed that is over the dashboard's 4096 bytes.
    NotificationSize => "rulec::notification-size",
    /// A `${` never closed, or an empty `${}`, in a computed value.
    Template => "rulec::template",
    /// An input with neither or both of `hash` and `channel`, or keys of the other kind.
    InputSource => "rulec::input-source",
    /// A hash input without `fields`, with none, or with more than 64.
    InputFields => "rulec::input-fields",
    /// An input `topic` not starting with `input.`, or a channel input without one.
    InputTopic => "rulec::input-topic",
    /// An input hash, channel or field name that is not exact, too long, or a channel under `ev:`.
    InputName => "rulec::input-name",
    /// An input `format` other than `"string"` or `"json"`.
    InputFormat => "rulec::input-format",
    /// An input `max-bytes` above 65536 or negative.
    InputMaxBytes => "rulec::input-max-bytes",
    /// More than 16 inputs in one rule, or more than 64 distinct inputs in the rules.
    InputLimit => "rulec::input-limit",
    /// One channel read with two formats by two inputs.
    InputConflict => "rulec::input-conflict",
    /// A channel input on the notification channel of a hash the profile or an input watches.
    InputChannelHash => "rulec::input-channel-hash",
    /// A second enabled rule with a name already taken.
    DuplicateName => "rulec::duplicate-name",

    // Warnings.
    /// (warning) A `*` that is not the whole pattern or a trailing `.*`.
    PatternLiteralStar => "rulec::pattern-literal-star",
    /// (warning) A topic pattern with white space in it.
    PatternWhitespace => "rulec::pattern-whitespace",
    /// (warning) A pattern starting with the Redis channel prefix `ev:`.
    PatternChannelPrefix => "rulec::pattern-channel-prefix",
    /// (warning) A pattern with an empty word (`alarm.`, `.alarm`, `a..b`).
    PatternEmptySegment => "rulec::pattern-empty-segment",
    /// (warning) The same pattern twice in one `on` or `cancel-on` list.
    DuplicatePattern => "rulec::duplicate-pattern",
    /// (warning) A `cancel-on` pattern equal to an `on` pattern under `restart`.
    RedundantCancelOn => "rulec::redundant-cancel-on",
    /// (warning) An `on` pattern that also matches a `cancel-on` pattern, in a rule without `when`.
    CancelOnAlsoTriggers => "rulec::cancel-on-also-triggers",
    /// (warning) An exec `command` that is a relative path.
    ExecRelativePath => "rulec::exec-relative-path",
    /// (warning) A key of another action kind (`command` on a `redis` step): no effect.
    OtherActionKey => "rulec::other-action-key",
    /// (warning) `repeat.every` with `count = 1`.
    RepeatEveryUnused => "rulec::repeat-every-unused",
    /// (warning) The rule's `when` is always false.
    NeverFires => "rulec::never-fires",
    /// (warning) A step after a step whose `when` is always false.
    UnreachableStep => "rulec::unreachable-step",
    /// (warning) `[[rule.finally]]` on a rule without `cancel-on`: it can never run.
    FinallyWithoutCancelOn => "rulec::finally-without-cancel-on",
    /// (warning) A redis `list` or `push` of white space only.
    BlankValue => "rulec::blank-value",
    /// (warning) The pattern `.*`, which matches only topics starting with `.`.
    PatternEmptyPrefix => "rulec::pattern-empty-prefix",
    /// (warning) A rule name with a control character or white space at an end.
    NameCharacters => "rulec::name-characters",
    /// (warning) A disabled rule whose name another rule also uses: left out.
    DisabledDuplicateName => "rulec::disabled-duplicate-name",
    /// (warning) `state()` of a field the profile's hash does not have.
    UnknownStateField => "rulec::unknown-state-field",
    /// (warning) `from` compared with a value the profile lists for none of the topics' fields, close to one it lists.
    UnlistedFrom => "rulec::unlisted-from",
    /// (warning) `state()` of a hash the profile does not declare, close to one it does.
    UnknownStateHash => "rulec::unknown-state-hash",
    /// (warning) A redis `list` the profile does not declare, close to one it does.
    UnknownList => "rulec::unknown-list",
    /// (warning) `state()` of a field written without a notification that no poll reads.
    SilentState => "rulec::silent-state",
    /// (warning) `rulec build`: the bundle's estimated heap in ruled is over the budget (an error with `--deny-warnings`).
    MemoryBudget => "rulec::memory-budget",
    /// (warning) Rules that start each other for ever: a step's action makes an event another rule's `on` (or its own) matches, round to the first.
    Loop => "rulec::loop",
    /// (warning) Two steps that can push different values onto one list for one event, at once or within 1s, their conditions not exclusive.
    Conflict => "rulec::conflict",
    /// (warning) A step a guard covers for which nothing shows the guard holds when it runs; names a state in which the guard refuses.
    Guarded => "rulec::guarded",

    // The safety envelope (docs/safety.md).
    /// A `[[guard]]` or `[[limit]]` that covers no action, or more than one kind, or `values` for a `can` or `exec`.
    Guard => "rulec::guard",
    /// A guard's `when` reads the event (`topic`, `from`, `to`, `data.*`): a guard reads `state()` only.
    GuardReadsEvent => "rulec::guard-reads-event",
    /// Two guards (or two limits) with one name, in the profile or the rules directory: a rules directory can only add.
    DuplicateGuard => "rulec::duplicate-guard",
    /// A rule's `trip` is neither `false` nor a table of `starts`, `per` and `pause`.
    Trip => "rulec::trip",

    // Timeline and test files (docs/simulation.md#checks).
    /// A timeline or test file entry that does not parse: an unknown or missing key, a wrong value.
    Timeline => "rulec::timeline",
    /// A timeline's `[[fail]]` or a test's expectation names a rule (or a step) the rules do not have.
    UnknownRule => "rulec::unknown-rule",
    /// (warning) A timeline `[[state]]` writes a hash or field nothing watches: no `state()`, input, profile source or poll.
    UnwatchedState => "rulec::unwatched-state",

    // `when` expressions (docs/when-language.md).
    /// The expression does not parse (unmatched parentheses, ...).
    WhenSyntax => "rulec::when::syntax",
    /// The expression is empty or white space.
    WhenEmpty => "rulec::when::empty",
    /// A name that is not `topic`, `src`, `from`, `to` or `data.*`.
    WhenUnknownName => "rulec::when::unknown-name",
    /// A function that does not exist.
    WhenUnknownFunction => "rulec::when::unknown-function",
    /// An evalexpr built-in outside the supported subset.
    WhenUnsupportedFunction => "rulec::when::unsupported-function",
    /// Wrong arguments to a function.
    WhenArguments => "rulec::when::arguments",
    /// `'text'`: strings use double quotes.
    WhenSingleQuotes => "rulec::when::single-quotes",
    /// `and` / `or` / `not` instead of `&&` / `||` / `!`; `in [...]`
    /// instead of `contains(...)`.
    WhenWordOperator => "rulec::when::word-operator",
    /// `=` or another assignment operator.
    WhenAssignment => "rulec::when::assignment",
    /// A `;` chain.
    WhenChain => "rulec::when::chain",
    /// A tuple outside function arguments.
    WhenTuple => "rulec::when::tuple",
    /// The expression's result is not a boolean.
    WhenNotBoolean => "rulec::when::not-boolean",
    /// An operator applied to incompatible types.
    WhenTypeMismatch => "rulec::when::type-mismatch",
    /// A comparison of two literals of different types.
    WhenLiteralComparison => "rulec::when::literal-comparison",
    /// (warning) `data.KEY == ""` or `!=`: a missing key is empty, not `""`.
    WhenEmptyStringData => "rulec::when::empty-string-data",
    /// More than 256 tokens.
    WhenTooLong => "rulec::when::too-long",
    /// A part that reads no event data and fails on every event (`1 / 0`).
    WhenAlwaysFails => "rulec::when::always-fails",
    /// A `state` hash named like an event channel (`ev:...`).
    WhenStateChannel => "rulec::when::state-channel",

    // Profiles (docs/sources.md).
    /// No `profile.toml`, or its `name`, `extends` or `description` malformed.
    Profile => "rulec::profile",
    /// A malformed `[[hash]]`: its name, a field, or a `silent`/`polled` entry that is no field of it.
    ProfileHash => "rulec::profile::hash",
    /// A `poll` under 100ms, a `poll` without `polled` fields, or `polled` without `poll`.
    ProfilePoll => "rulec::profile::poll",
    /// A source on an undeclared hash or field, with neither or both of `hash` and `channel`, a channel under `ev:`, an undeclared `read` field, or a bad `changes`.
    ProfileSource => "rulec::profile::source",
    /// An emit without a plain topic, with a condition for the other kind of source, or a bad `data` value.
    ProfileEmit => "rulec::profile::emit",
    /// A literal `from`/`to` value the field never takes.
    ProfileValue => "rulec::profile::value",
    /// A value pattern that does not parse (`<seconds>`, `<int`, `<int><text>`).
    ValuePattern => "rulec::profile::value-pattern",
    /// A malformed `[[list]]`: its key, or `values` missing.
    ProfileList => "rulec::profile::list",
    /// A list's `effects` naming a value the list does not take, or a topic no source of the profile emits.
    ProfileEffect => "rulec::profile::effect",
    /// A hash or list declared twice, or two sources on one field or channel emitting one topic.
    ProfileDuplicate => "rulec::profile::duplicate",
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Lets callers and tests compare a code with its stable string.
impl PartialEq<&str> for Code {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<str> for Code {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn strings_are_unique_and_well_formed() {
        let strings: BTreeSet<&str> = Code::ALL.iter().map(|code| code.as_str()).collect();
        assert_eq!(strings.len(), Code::ALL.len());
        for code in Code::ALL {
            let name = code.as_str();
            assert!(name.starts_with("rulec::"), "{name}");
            assert!(
                name.chars()
                    .all(|c| c.is_ascii_lowercase() || c == ':' || c == '-'),
                "{name}"
            );
            assert!(!code.description().is_empty(), "{name}");
            assert!(!code.description().contains('\n'), "{name}");
        }
        assert_eq!(Code::WhenSyntax.to_string(), "rulec::when::syntax");
        assert!(Code::Duration == "rulec::duration");
    }
}

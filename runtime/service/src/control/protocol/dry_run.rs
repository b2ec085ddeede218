//! `v1.test`: one rule judged against an event, nothing changed. The
//! snake_case fields and `note` are what `lsc ext test` reads
//! (docs/operating.md#the-fields-lsc-reads); durations for `lsc` are Go
//! durations (`30s`, `1m0s`).

use rulecore::vm::Read;
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestRequest {
    pub name: String,
    /// An event as the bus carries it (`{"topic", "data"?}`).
    pub event: Value,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestReply {
    pub name: String,
    pub enabled: bool,
    pub matched: bool,
    /// The verdict in words.
    pub note: String,
    pub repeat_count: u32,
    pub repeat_every: String,
    pub cooldown: String,
    pub debounce: String,
    pub rule: String,
    /// The trigger is one of the rule's `cancel-on` topics.
    pub cancels: bool,
    /// The rule's `when`; `None`: it has none.
    pub when: Option<When>,
    /// What the rule's `when` read, in the order it names them
    /// (docs/operating.md#what-a-when-read).
    #[serde(rename = "when-read", default, skip_serializing_if = "Vec::is_empty")]
    pub when_read: Vec<Read>,
    /// Its steps, then its finally steps (numbered on after them).
    pub steps: Vec<StepLine>,
    pub verdict: Verdict,
    /// `when: …` when the `when` failed, for `lsc`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A `when`'s result: true, false, or its error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum When {
    Result(bool),
    Error { error: String },
}

/// One step as the dry run judged it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepLine {
    pub index: usize,
    pub kind: Option<String>,
    /// The action in words; a finally step's starts `finally: `.
    pub description: Option<String>,
    pub durable: bool,
    pub after: String,
    #[serde(rename = "after-ms")]
    pub after_ms: u64,
    pub when: Option<When>,
    /// What the step's `when` read.
    #[serde(rename = "when-read", default, skip_serializing_if = "Vec::is_empty")]
    pub when_read: Vec<Read>,
    /// A finally step (docs/rules.md#finally), and its index among them.
    #[serde(default, skip_serializing_if = "super::is_false")]
    pub finally: bool,
    #[serde(
        rename = "finally-index",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub finally_index: Option<u32>,
    /// `lsc`'s reading of the `when`: `true` without one, `false` when it
    /// failed.
    pub condition: bool,
    /// The `when`'s error, for `lsc`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The guards covering the step and their judgement on a fresh read
    /// now (docs/safety.md#guards); absent when no guard covers it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guard: Option<GuardProbe>,
}

/// The guards of one step, judged on their fields read fresh now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuardProbe {
    /// The covering guards, in the bundle's order.
    pub guards: Vec<String>,
    /// The first guard that would refuse the step now; absent: every
    /// one holds, and the step would be performed.
    #[serde(
        rename = "refused-by",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub refused_by: Option<String>,
    /// Each field they read, as read: `engine-ecu speed = "6"`,
    /// `engine-ecu speed absent`, `... unreadable`.
    pub read: Vec<String>,
}

/// What the event would do, `kind` and its details.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Verdict {
    Disabled,
    NotMatched,
    WhenFalse,
    WhenError,
    Hold {
        #[serde(rename = "for-ms")]
        for_ms: u64,
    },
    Holding {
        #[serde(rename = "for-ms")]
        for_ms: u64,
        #[serde(rename = "left-ms")]
        left_ms: u64,
    },
    HoldFired,
    Debounce {
        #[serde(rename = "window-ms")]
        window_ms: u64,
    },
    Cooldown {
        #[serde(rename = "left-ms")]
        left_ms: u64,
    },
    Start,
    Restart {
        run: String,
    },
    Drop {
        run: String,
    },
    Queue {
        position: usize,
    },
    Refused {
        backlog: usize,
    },
}

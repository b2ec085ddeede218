//! `v1.show` (request: [`super::Named`]): one rule, as a rule file, as
//! `rulec dump` shows it, and its state now.

use super::{CoveredStep, RuleLine};
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShowReply {
    /// What `lsc ext show` reads (docs/operating.md#the-fields-lsc-reads).
    pub rule: RuleLine,
    /// The rule rendered as a rule file.
    pub definition: String,
    pub revision: String,
    pub pending_restart: bool,
    /// `rulec dump --format json`'s form of the rule (its own format).
    pub dump: Value,
    /// `rulec dump`'s text form.
    pub text: String,
    pub state: RuleLine,
    pub run: Option<RunLine>,
    pub backlog: usize,
    #[serde(rename = "debounce-held")]
    pub debounce_held: bool,
    /// A keyed rule (docs/rules.md#keyed-runs): its keys with a live run,
    /// at most the first 8, each with its run (`run` above is the first's);
    /// absent when none has one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<KeyRunLine>,
    /// How many keys have a live run (`keys` lists at most 8).
    #[serde(
        rename = "keys-with-runs",
        default,
        skip_serializing_if = "super::is_zero"
    )]
    pub keys_with_runs: usize,
    /// The rule's steps a guard or limit covers (docs/safety.md); absent
    /// when none is.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub envelope: Vec<CoveredStep>,
}

/// One key of a keyed rule and its live run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyRunLine {
    /// The key, as `per` gave it (`str()` of its value).
    pub key: String,
    pub run: RunLine,
}

/// The rule's live run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunLine {
    pub id: String,
    /// In its finally steps, counts them (docs/semantics.md#finally).
    pub step: u32,
    pub pass: u32,
    #[serde(default, skip_serializing_if = "super::is_false")]
    pub finally: bool,
    pub state: RunState,
    /// Unix ms, when it waits.
    pub due: Option<i64>,
    /// Whether the step it waits for is durable; absent when it does not
    /// wait for a step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub durable: Option<bool>,
}

/// What a live run is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunState {
    Waiting,
    RepeatGap,
    WaitingForRoom,
    Acting,
    Draining,
}

impl RunState {
    /// The word on the wire, as `ruled ctl` prints it.
    pub fn word(self) -> &'static str {
        match self {
            Self::Waiting => "waiting",
            Self::RepeatGap => "repeat-gap",
            Self::WaitingForRoom => "waiting-for-room",
            Self::Acting => "acting",
            Self::Draining => "draining",
        }
    }
}

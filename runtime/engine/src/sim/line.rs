//! One line of the simulator's output (docs/simulation.md): its kind, its
//! reason, and the two formats, which print the same fields in the same
//! order.

use crate::{DropReason, Job, NoteKind, NoteReason, RuleTrace};
use rulecore::bundle::Action;
use std::fmt;

/// What a line says happened: docs/simulation.md's `kind` (plus our `end`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LineKind {
    /// An action started.
    Action,
    /// An action failed (after its `action` line).
    ActionFailed,
    /// What the engine noted (runs, triggers, replay).
    Note(NoteKind),
    RecordPut,
    RecordDrop,
    Restart,
    /// A `[[reload]]`: the bundle file was replaced and reloaded.
    Reload,
    /// A `when` failed to evaluate (counted as false).
    EvalError,
    /// An event the bus profile derived from a `[[state]]` or
    /// `[[message]]` and published (docs/sources.md), after the rules it
    /// reached.
    Derived,
    /// The last line of every simulation: what is still waiting or held.
    End,
    /// A guard refused an action (docs/safety.md#guards): the guard and
    /// the state it read.
    Guarded,
    /// The dashboard toast of a refusal by the envelope.
    Toast,
}

impl LineKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Action => "action",
            Self::ActionFailed => "action-failed",
            Self::Note(kind) => kind.as_str(),
            Self::RecordPut => "record-put",
            Self::RecordDrop => "record-drop",
            Self::Restart => "restart",
            Self::Reload => "reload",
            Self::EvalError => "eval-error",
            Self::Derived => "derived",
            Self::End => "end",
            Self::Guarded => "guarded",
            Self::Toast => "toast",
        }
    }
}

impl fmt::Display for LineKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A line's `reason`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LineReason {
    /// A `run-end`'s or `replay-drop`'s.
    Note(NoteReason),
    /// Why a `record-drop` removed the record.
    RecordDrop(DropReason),
    /// An `action-failed` made by a `[[fail]]` entry.
    SimulatedFailure,
    /// `end` came while the service was down.
    Down,
}

impl LineReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Note(reason) => reason.as_str(),
            Self::RecordDrop(reason) => reason.as_str(),
            Self::SimulatedFailure => "simulated-failure",
            Self::Down => "down",
        }
    }
}

impl fmt::Display for LineReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One thing that happened, in time order. Fields are absent when not
/// relevant (docs/simulation.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub at_ms: u64,
    pub kind: LineKind,
    pub rule: Option<String>,
    pub step: Option<u32>,
    /// `step` counts the rule's finally steps (docs/semantics.md#finally):
    /// shown as `finally=true`, absent otherwise.
    pub finally: bool,
    pub pass: Option<u32>,
    pub action: Option<&'static str>,
    pub list: Option<String>,
    pub push: Option<String>,
    /// `publish` and `notify` actions: the channel (their message is in
    /// `message`).
    pub channel: Option<String>,
    pub command: Option<String>,
    pub iface: Option<String>,
    pub id: Option<String>,
    pub data: Option<String>,
    pub run: Option<String>,
    pub reason: Option<LineReason>,
    /// `--explain`'s `non-fire`, `run-start`, `step-skipped` and `action`:
    /// what the `when` judged there read, `to = "x"`, `data.level = 2`.
    pub read: Option<Vec<String>>,
    /// `eval-error`: the evaluation error; a `publish` or `notify`
    /// action: the message published.
    pub message: Option<String>,
    /// `end` only: the live runs, `<rule>:<step>` (while the service is
    /// down: the records its start would replay).
    pub waiting: Option<Vec<String>>,
    /// `end` only: the rules holding an event in a debounce window.
    pub held: Option<Vec<String>>,
    /// `reload` only: the bundle as the timeline names it.
    pub bundle: Option<String>,
    /// `derived` only: the event's topic, `from` and `to`.
    pub topic: Option<String>,
    pub from: Option<String>,
    pub to: Option<String>,
}

/// One present field's value.
enum Value<'a> {
    Num(u32),
    Bool(bool),
    Str(&'a str),
    List(&'a [String]),
    /// A `when`'s reads: in text `[a, b]`, their own `,` and spaces kept.
    Reads(&'a [String]),
}

impl Line {
    /// A line of `kind` with no field present (`at_ms` is set when it is
    /// recorded).
    pub fn new(kind: LineKind) -> Self {
        Self {
            at_ms: 0,
            kind,
            rule: None,
            step: None,
            finally: false,
            pass: None,
            action: None,
            list: None,
            push: None,
            channel: None,
            command: None,
            iface: None,
            id: None,
            data: None,
            run: None,
            reason: None,
            read: None,
            message: None,
            waiting: None,
            held: None,
            bundle: None,
            topic: None,
            from: None,
            to: None,
        }
    }

    /// The present fields after `at_ms` and `kind`, in output order (the
    /// one list both formats print).
    fn fields(&self) -> impl Iterator<Item = (&'static str, Value<'_>)> {
        fn text(value: &Option<String>) -> Option<Value<'_>> {
            value.as_deref().map(Value::Str)
        }
        [
            ("topic", text(&self.topic)),
            ("from", text(&self.from)),
            ("to", text(&self.to)),
            ("rule", text(&self.rule)),
            ("step", self.step.map(Value::Num)),
            ("finally", self.finally.then_some(Value::Bool(true))),
            ("pass", self.pass.map(Value::Num)),
            ("action", self.action.map(Value::Str)),
            ("list", text(&self.list)),
            ("push", text(&self.push)),
            ("channel", text(&self.channel)),
            ("command", text(&self.command)),
            ("iface", text(&self.iface)),
            ("id", text(&self.id)),
            ("data", text(&self.data)),
            ("run", text(&self.run)),
            (
                "reason",
                self.reason.map(|reason| Value::Str(reason.as_str())),
            ),
            ("read", self.read.as_deref().map(Value::Reads)),
            ("message", text(&self.message)),
            ("waiting", self.waiting.as_deref().map(Value::List)),
            ("held", self.held.as_deref().map(Value::List)),
            ("bundle", text(&self.bundle)),
        ]
        .into_iter()
        .filter_map(|(key, value)| value.map(|value| (key, value)))
    }

    /// One JSON object: `at_ms`, `kind`, then the present fields.
    pub fn to_json(&self) -> String {
        let quoted = |text: &str| serde_json::Value::from(text).to_string();
        let mut out = format!(
            "{{\"at_ms\":{},\"kind\":{}",
            self.at_ms,
            quoted(self.kind.as_str())
        );
        for (key, value) in self.fields() {
            let value = match value {
                Value::Num(number) => number.to_string(),
                Value::Bool(value) => value.to_string(),
                Value::Str(text) => quoted(text),
                Value::List(items) | Value::Reads(items) => {
                    serde_json::Value::from(items).to_string()
                }
            };
            out.push_str(&format!(",\"{key}\":{value}"));
        }
        out.push('}');
        out
    }

    /// One text line: time, kind, then `key=value` for the present fields.
    pub fn to_text(&self) -> String {
        let mut out = format!("{:>8} ms  {:<18}", self.at_ms, self.kind.as_str());
        for (key, value) in self.fields() {
            match value {
                Value::Num(number) => out.push_str(&format!(" {key}={number}")),
                Value::Bool(value) => out.push_str(&format!(" {key}={value}")),
                Value::Str(text) => out.push_str(&format!(" {key}={text}")),
                Value::List(items) => out.push_str(&format!(" {key}=[{}]", items.join(","))),
                Value::Reads(items) => out.push_str(&format!(" {key}=[{}]", items.join(", "))),
            }
        }
        out.trim_end().to_string()
    }
}

/// One rule's traces as a JSON output line (docs/simulation.md#traces):
/// `at_ms` (the end), `kind` `trace`, then the trace's own fields.
pub fn trace_json(at_ms: u64, trace: &RuleTrace) -> Result<String, serde_json::Error> {
    #[derive(serde::Serialize)]
    struct TraceLine<'a> {
        at_ms: u64,
        kind: &'static str,
        #[serde(flatten)]
        trace: &'a RuleTrace,
    }
    let line = TraceLine {
        at_ms,
        kind: "trace",
        trace,
    };
    serde_json::to_string(&line)
}

/// The line of an action starting or failing.
pub(super) fn action_line(at_ms: u64, kind: LineKind, job: &Job) -> Line {
    let mut line = Line {
        at_ms,
        rule: Some(job.rule.to_string()),
        step: Some(job.step),
        finally: job.finally(),
        pass: Some(job.pass),
        run: Some(job.run.to_string()),
        read: (job.when_read.as_deref())
            .map(|reads| reads.0.iter().map(ToString::to_string).collect()),
        ..Line::new(kind)
    };
    if let Action::Notify(_) = &*job.action {
        line.action = Some("notify");
    }
    match job.performed() {
        Action::Redis { list, push, .. } => {
            line.action = Some("redis");
            line.list = Some(list.clone());
            line.push = Some(push.source().to_string());
        }
        Action::Publish {
            channel, message, ..
        } => {
            line.action = line.action.or(Some("publish"));
            line.channel = Some(channel.clone());
            line.message = Some(message.source().to_string());
        }
        Action::Notify(_) => {}
        Action::Exec { command, .. } => {
            line.action = Some("exec");
            line.command = Some(command.clone());
        }
        Action::Can(frame) => {
            line.action = Some("can");
            line.iface = Some(frame.iface.clone());
            line.id = Some(format!("0x{:x}", frame.id));
            line.data = Some(frame.data.iter().map(|b| format!("{b:02x}")).collect());
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_and_text_print_the_same_present_fields_and_json_escapes() {
        let line = Line {
            at_ms: 7,
            rule: Some("r".into()),
            step: Some(1),
            push: Some("say \"hi\"\n".into()),
            ..Line::new(LineKind::Action)
        };
        let json: serde_json::Value = serde_json::from_str(&line.to_json()).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"at_ms": 7, "kind": "action", "rule": "r", "step": 1, "push": "say \"hi\"\n"})
        );
        assert_eq!(
            line.to_text(),
            "       7 ms  action             rule=r step=1 push=say \"hi\""
        );
        // A finally step's line says so, right after its step.
        let finally = Line {
            finally: true,
            pass: Some(0),
            ..line
        };
        assert_eq!(
            finally.to_json(),
            r#"{"at_ms":7,"kind":"action","rule":"r","step":1,"finally":true,"pass":0,"push":"say \"hi\"\n"}"#
        );
        assert!(finally.to_text().contains(" step=1 finally=true pass=0 "));
    }
}

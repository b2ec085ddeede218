//! A rule's traces as readers get them (docs/semantics.md#traces): owned,
//! serialisable data (the control protocol sends it as JSON) and the one
//! text rendering for people (`rulec simulate --trace`, `ruled ctl trace`).

use super::{NonFireRecord, RunRecord, StepRecord, TracedEvent, WhenResult};
use crate::Time;
use rulecore::bundle::{Rule, StatePair};
use rulecore::bytecode::{Const, Program};
use rulecore::event::Event;
use rulecore::vm::Read;
use serde::{Deserialize, Serialize};

/// One rule's traces. Times are milliseconds on the reader's clock (see
/// `Engine::trace`). It reads back from its JSON, so a client holding the
/// JSON renders the same text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RuleTrace {
    pub rule: String,
    /// Oldest first.
    pub runs: Vec<RunTrace>,
    pub last_non_fire: Option<NonFireTrace>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunTrace {
    pub run: String,
    /// Resumed from a pending record at start.
    pub replayed: bool,
    pub start_ms: i64,
    /// The triggering event, when it is at most 4 KiB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event: Option<Event>,
    /// Else the first 4 KiB of its JSON.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_cut: Option<String>,
    /// The rule's `when`, found true for the event, when the run started
    /// from that judgement (absent for a replayed run, a hold's or a
    /// queued event's, or a rule without `when`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<WhenTrace>,
    /// What that `when` read (docs/semantics.md#what-a-when-read).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read: Vec<Read>,
    pub steps: Vec<StepTrace>,
    /// Earlier step records no longer kept (a long `repeat`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub steps_left_out: u32,
    /// `None` while the run is live.
    pub end: Option<RunEndTrace>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn is_false(b: &bool) -> bool {
    !*b
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunEndTrace {
    pub at_ms: i64,
    /// A `run-end` reason (docs/simulation.md#output).
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepTrace {
    pub step: u32,
    pub pass: u32,
    /// `step` counts the rule's finally steps (docs/semantics.md#finally);
    /// absent for the others.
    #[serde(default, skip_serializing_if = "is_false")]
    pub finally: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait: Option<WaitTrace>,
    /// Absent when the step has no `when` (or was not reached).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub when: Option<WhenTrace>,
    /// What the `when` read (docs/semantics.md#what-a-when-read).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read: Vec<Read>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub submit: Option<SubmitTrace>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end: Option<StepEndTrace>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitTrace {
    pub start_ms: i64,
    pub due_ms: i64,
    pub durable: bool,
}

/// A step's `when` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "result", content = "error")]
pub enum WhenTrace {
    True,
    False,
    Error(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubmitTrace {
    pub at_ms: i64,
    pub outcome: SubmitOutcome,
}

/// What the pool did with a submitted step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SubmitOutcome {
    /// Handed over, not started yet.
    Submitted,
    Started,
    /// Refused: the pool's queue was full, or it was stopping.
    Refused,
}

impl SubmitOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Submitted => "submitted",
            Self::Started => "started",
            Self::Refused => "refused",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepEndTrace {
    pub at_ms: i64,
    /// `done` (the action succeeded), `failed`, or the reason the run
    /// ended at this step.
    pub reason: String,
    /// A failed action's error text (at most 1 KiB).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The rule's last non-fire: a matching event that started no run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NonFireTrace {
    pub at_ms: i64,
    /// A non-fire reason (docs/simulation.md#explain).
    pub reason: String,
    /// A `when-error`'s text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What the rule's `when` read when it was judged for the event
    /// (false, failed, or true and then held, suppressed, queued ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read: Vec<Read>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event: Option<Event>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_cut: Option<String>,
}

/// What a view needs: the reader's clock (engine time `now` reads
/// `now_ms`), the rule as loaded, and the bundle's tables, to list each
/// `when`'s reads.
#[derive(Debug, Clone, Copy)]
pub(super) struct View<'a> {
    pub now: Time,
    pub now_ms: i64,
    pub spec: &'a Rule,
    pub tables: (&'a [Const], &'a [StatePair]),
}

/// The `when` of the step `record` is of, in `spec`.
pub(super) fn step_when<'a>(spec: &'a Rule, record: &StepRecord) -> Option<&'a Program> {
    let steps = if record.finally {
        spec.finally()
    } else {
        &spec.steps
    };
    steps.get(record.step as usize)?.when.as_ref()
}

impl View<'_> {
    /// `at` may be later than `now` (a wait's due time).
    fn ms(self, at: Time) -> i64 {
        let signed = |t: Time| i64::try_from(t.as_millis()).unwrap_or(i64::MAX);
        self.now_ms
            .saturating_add(signed(at).saturating_sub(signed(self.now)))
    }

    pub(super) fn run(self, run: &RunRecord) -> RunTrace {
        let (event, event_cut) = event(&run.event);
        let whole = run.event.whole();
        RunTrace {
            run: run.id.to_string(),
            replayed: run.replayed,
            start_ms: self.ms(run.start),
            event,
            event_cut,
            when: (!run.when.is_none()).then_some(WhenTrace::True),
            read: run.when.list(self.spec.when.as_deref(), whole, self.tables),
            steps: run
                .steps
                .iter()
                .map(|step| self.step(step, whole))
                .collect(),
            steps_left_out: run.steps_left_out,
            end: run.end.map(|(at, reason)| RunEndTrace {
                at_ms: self.ms(at),
                reason: reason.as_str().to_string(),
            }),
        }
    }

    fn step(self, step: &StepRecord, event: Option<&Event>) -> StepTrace {
        StepTrace {
            step: step.step,
            pass: step.pass,
            finally: step.finally,
            wait: step.wait.map(|wait| WaitTrace {
                start_ms: self.ms(wait.start),
                due_ms: self.ms(wait.due),
                durable: wait.durable,
            }),
            when: step.when.as_ref().map(|when| match when {
                WhenResult::True => WhenTrace::True,
                WhenResult::False => WhenTrace::False,
                WhenResult::Error(text) => WhenTrace::Error(text.to_string()),
            }),
            read: step
                .reads
                .list(step_when(self.spec, step), event, self.tables),
            submit: step.submit.map(|(at, outcome)| SubmitTrace {
                at_ms: self.ms(at),
                outcome,
            }),
            end: step.end.as_ref().map(|(at, reason, error)| StepEndTrace {
                at_ms: self.ms(*at),
                reason: reason.as_str().to_string(),
                error: error.as_deref().map(str::to_string),
            }),
        }
    }

    pub(super) fn non_fire(self, record: &NonFireRecord) -> NonFireTrace {
        let (event, event_cut) = event(&record.event);
        let program = self.spec.when.as_deref();
        NonFireTrace {
            at_ms: self.ms(record.at),
            reason: record.reason.as_str().to_string(),
            error: record.error.as_deref().map(str::to_string),
            read: record
                .reads
                .list(program, record.event.whole(), self.tables),
            event,
            event_cut,
        }
    }
}

fn event(traced: &TracedEvent) -> (Option<Event>, Option<String>) {
    match traced {
        TracedEvent::Shared { event, .. } => (Some((**event).clone()), None),
        TracedEvent::Cut(json) => (None, Some(json.to_string())),
    }
}

/// How [`RuleTrace::to_text`] shows a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeStyle {
    /// `12000 ms`: the simulator's virtual milliseconds.
    Millis,
    /// `2024-01-01T00:00:12.000Z`: Unix milliseconds as UTC.
    Utc,
}

impl TimeStyle {
    /// `ms` in this style.
    pub fn show(self, ms: i64) -> String {
        match self {
            Self::Millis => format!("{ms} ms"),
            Self::Utc => utc(ms),
        }
    }
}

/// Unix ms as an RFC 3339 UTC time (proleptic Gregorian calendar), to
/// the millisecond: traces, and the header of `ruled record`'s timeline.
pub fn utc(ms: i64) -> String {
    let (days, in_day) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let (h, m, s, milli) = (
        in_day / 3_600_000,
        in_day / 60_000 % 60,
        in_day / 1000 % 60,
        in_day % 1000,
    );
    format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{milli:03}Z")
}

fn event_text(event: &Option<Event>, cut: &Option<String>) -> String {
    match (event, cut) {
        (Some(event), _) => serde_json::to_string(event)
            .unwrap_or_else(|error| format!("(event not serialisable: {error})")),
        (None, Some(cut)) => format!("{cut}... (cut at 4 KiB)"),
        (None, None) => String::new(),
    }
}

/// A `when`'s reads in one line: `to = "level-2-triggered", data.level = 2`.
pub fn read_text(reads: &[Read]) -> String {
    let texts: Vec<String> = reads.iter().map(ToString::to_string).collect();
    texts.join(", ")
}

impl RuleTrace {
    /// The text people read: one block per rule, a line per run, per step
    /// and for the last non-fire.
    pub fn to_text(&self, style: TimeStyle) -> String {
        let mut out = format!("trace {}\n", self.rule);
        if self.runs.is_empty() {
            out.push_str("  no run kept\n");
        }
        for run in &self.runs {
            run.write_text(&mut out, style);
        }
        if let Some(nf) = &self.last_non_fire {
            out.push_str(&format!(
                "  last non-fire {} {}",
                style.show(nf.at_ms),
                nf.reason
            ));
            if let Some(error) = &nf.error {
                out.push_str(&format!(": {error}"));
            }
            if !nf.read.is_empty() {
                out.push_str(&format!("\n    read {}", read_text(&nf.read)));
            }
            out.push_str(&format!(
                "\n    event {}\n",
                event_text(&nf.event, &nf.event_cut)
            ));
        }
        out
    }
}

impl RunTrace {
    fn write_text(&self, out: &mut String, style: TimeStyle) {
        let replayed = if self.replayed { " (replayed)" } else { "" };
        out.push_str(&format!(
            "  run {}{replayed} start {}",
            self.run,
            style.show(self.start_ms)
        ));
        match &self.end {
            Some(end) => {
                out.push_str(&format!(", end {} {}\n", style.show(end.at_ms), end.reason));
            }
            None => out.push_str(", live\n"),
        }
        out.push_str(&format!(
            "    event {}\n",
            event_text(&self.event, &self.event_cut)
        ));
        if self.when.is_some() {
            out.push_str("    when true");
            if !self.read.is_empty() {
                out.push_str(&format!(" [read {}]", read_text(&self.read)));
            }
            out.push('\n');
        }
        if self.steps_left_out > 0 {
            out.push_str(&format!(
                "    ({} earlier steps not kept)\n",
                self.steps_left_out
            ));
        }
        for step in &self.steps {
            let list = if step.finally { "finally" } else { "step" };
            out.push_str(&format!("    {list} {} pass {}:", step.step, step.pass));
            if let Some(wait) = &step.wait {
                let durable = if wait.durable { " durable" } else { "" };
                let (start, due) = (style.show(wait.start_ms), style.show(wait.due_ms));
                out.push_str(&format!(" wait {start} to {due}{durable};"));
            }
            match &step.when {
                Some(WhenTrace::True) => out.push_str(" when true"),
                Some(WhenTrace::False) => out.push_str(" when false"),
                Some(WhenTrace::Error(error)) => {
                    out.push_str(&format!(" when error ({error})"));
                }
                None => {}
            }
            if step.when.is_some() {
                if !step.read.is_empty() {
                    out.push_str(&format!(" [read {}]", read_text(&step.read)));
                }
                out.push(';');
            }
            if let Some(submit) = &step.submit {
                let at = style.show(submit.at_ms);
                out.push_str(&format!(" submit {at} {};", submit.outcome.as_str()));
            }
            if let Some(end) = &step.end {
                out.push_str(&format!(" end {} {}", style.show(end.at_ms), end.reason));
                if let Some(error) = &end.error {
                    out.push_str(&format!(": {error}"));
                }
            }
            let line = out.trim_end_matches(';').len();
            out.truncate(line);
            out.push('\n');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_formats_unix_milliseconds() {
        assert_eq!(utc(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(utc(1_704_067_212_345), "2024-01-01T00:00:12.345Z");
        assert_eq!(utc(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(utc(-1), "1969-12-31T23:59:59.999Z");
    }
}

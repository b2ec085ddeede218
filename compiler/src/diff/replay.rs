//! `rulec diff OLD NEW --replay FILE` (docs/rulec.md#replaying-a-timeline):
//! both rule sets run over one timeline (a recording of `ruled record` is
//! one) by the simulator `rulec simulate` runs, and every action one
//! performs and the other does not, or performs at another time or with
//! another value, is listed with its rule, step, time and action on each
//! side: what a deploy changes in behaviour, checkable in CI.

use crate::check::plural;
use crate::cli::{Console, Exit};
use crate::simulate::{print_timeline_problems, read_timeline};
use crate::timeline::Known;
use rulecore::bundle::Payload;
use ruled_engine::sim::{parse, simulate_with, Line, LineKind, Options, Timeline, TimelineError};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::sync::Arc;

/// Where an action stands: its rule, its step (or finally step), and the
/// how-manyth time that step acted in the simulation (1 for the first).
/// The two sides' actions are paired by it: the first time OLD's step 1
/// acted against the first time NEW's did, and so on.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Slot {
    pub rule: String,
    pub finally: bool,
    pub step: u32,
    pub occurrence: u32,
}

impl Slot {
    /// `hazards-on-alarm step 1 #1`, `hazards-on-alarm finally 0 #2`.
    fn text(&self) -> String {
        let which = if self.finally { "finally" } else { "step" };
        format!("{} {which} {} #{}", self.rule, self.step, self.occurrence)
    }
}

/// One action as the simulation performed it: when, and what (its kind
/// and values as the output line shows them, in its order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Performed {
    pub at_ms: u64,
    pub what: Vec<(&'static str, String)>,
}

impl Performed {
    /// The action of an `action` line: every field that says what was
    /// done; not where (rule, step, pass) nor which run, whose id counts
    /// the runs of every rule and so differs as soon as one rule does.
    fn of(line: &Line) -> Performed {
        let what = [
            ("action", line.action.map(str::to_string)),
            ("list", line.list.clone()),
            ("push", line.push.clone()),
            ("channel", line.channel.clone()),
            ("message", line.message.clone()),
            ("command", line.command.clone()),
            ("iface", line.iface.clone()),
            ("id", line.id.clone()),
            ("data", line.data.clone()),
        ]
        .into_iter()
        .filter_map(|(key, value)| value.map(|value| (key, value)))
        .collect();
        Performed {
            at_ms: line.at_ms,
            what,
        }
    }

    /// `   30000 ms  redis list=scooter:blinker push=off`: the time as
    /// `rulec simulate` prints it, the action kind bare.
    fn text(&self) -> String {
        let mut text = format!("{:>8} ms ", self.at_ms);
        for (key, value) in &self.what {
            if *key == "action" {
                text.push_str(&format!(" {value}"));
            } else {
                text.push_str(&format!(" {key}={value}"));
            }
        }
        text
    }

    fn json(&self) -> Value {
        let mut object = json!({"at_ms": self.at_ms});
        for (key, value) in &self.what {
            object[*key] = Value::from(value.as_str());
        }
        object
    }
}

/// How a slot's actions differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Time,
    Value,
    TimeAndValue,
    /// OLD performs it, NEW does not.
    OnlyOld,
    /// NEW performs it, OLD does not.
    OnlyNew,
}

impl Change {
    fn judge(old: Option<&Performed>, new: Option<&Performed>) -> Option<Change> {
        match (old, new) {
            (Some(old), Some(new)) => match (old.at_ms != new.at_ms, old.what != new.what) {
                (false, false) => None,
                (true, false) => Some(Change::Time),
                (false, true) => Some(Change::Value),
                (true, true) => Some(Change::TimeAndValue),
            },
            (Some(_), None) => Some(Change::OnlyOld),
            (None, Some(_)) => Some(Change::OnlyNew),
            (None, None) => None,
        }
    }

    /// The JSON `change`.
    pub fn as_str(self) -> &'static str {
        match self {
            Change::Time => "time",
            Change::Value => "value",
            Change::TimeAndValue => "time-and-value",
            Change::OnlyOld => "only-old",
            Change::OnlyNew => "only-new",
        }
    }

    fn text(self) -> &'static str {
        match self {
            Change::Time => "time",
            Change::Value => "value",
            Change::TimeAndValue => "time and value",
            Change::OnlyOld => "only old",
            Change::OnlyNew => "only new",
        }
    }
}

/// An action one side performs and the other does not, or at another time
/// or with another value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    pub slot: Slot,
    pub change: Change,
    pub old: Option<Performed>,
    pub new: Option<Performed>,
}

impl Difference {
    /// The earlier of its two times: the report is in this order.
    fn at_ms(&self) -> u64 {
        [&self.old, &self.new]
            .into_iter()
            .flatten()
            .map(|performed| performed.at_ms)
            .min()
            .unwrap_or(0)
    }
}

/// What replaying a timeline with both rule sets showed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayDiff {
    /// The timeline as the command line named it.
    pub timeline: String,
    pub old_actions: usize,
    pub new_actions: usize,
    /// In time order (the earlier side's), then by slot.
    pub differences: Vec<Difference>,
}

/// Each `action` line of a simulation by its [`Slot`].
fn slots(lines: &[Line]) -> Vec<(Slot, Performed)> {
    let mut seen: BTreeMap<(String, bool, u32), u32> = BTreeMap::new();
    let mut out = Vec::new();
    for line in lines.iter().filter(|line| line.kind == LineKind::Action) {
        let (Some(rule), Some(step)) = (&line.rule, line.step) else {
            continue;
        };
        let count = seen.entry((rule.clone(), line.finally, step)).or_insert(0);
        *count += 1;
        let slot = Slot {
            rule: rule.clone(),
            finally: line.finally,
            step,
            occurrence: *count,
        };
        out.push((slot, Performed::of(line)));
    }
    out
}

/// Compares the output lines of the two simulations of `timeline`.
pub fn compare(timeline: String, old: &[Line], new: &[Line]) -> ReplayDiff {
    let (old, new) = (slots(old), slots(new));
    let (old_actions, new_actions) = (old.len(), new.len());
    let mut paired: BTreeMap<Slot, (Option<Performed>, Option<Performed>)> = BTreeMap::new();
    for (slot, performed) in old {
        paired.entry(slot).or_default().0 = Some(performed);
    }
    for (slot, performed) in new {
        paired.entry(slot).or_default().1 = Some(performed);
    }
    let mut differences: Vec<Difference> = paired
        .into_iter()
        .filter_map(|(slot, (old, new))| {
            Change::judge(old.as_ref(), new.as_ref()).map(|change| Difference {
                slot,
                change,
                old,
                new,
            })
        })
        .collect();
    // Stable: equal times keep the slots' order.
    differences.sort_by_key(Difference::at_ms);
    ReplayDiff {
        timeline,
        old_actions,
        new_actions,
        differences,
    }
}

impl ReplayDiff {
    /// `replay FILE: ...`, then each difference with its two sides.
    pub fn to_text(&self) -> String {
        if self.differences.is_empty() {
            return format!(
                "replay {}: no change ({} on each side)\n",
                self.timeline,
                plural(self.old_actions, "action")
            );
        }
        let verb = if self.differences.len() == 1 {
            "differs"
        } else {
            "differ"
        };
        let mut text = format!(
            "replay {}: {} {verb} (old {}, new {})\n",
            self.timeline,
            plural(self.differences.len(), "action"),
            plural(self.old_actions, "action"),
            plural(self.new_actions, "action"),
        );
        for difference in &self.differences {
            text.push_str(&format!(
                "  {}: {}\n",
                difference.slot.text(),
                difference.change.text()
            ));
            for (side, performed) in [("old", &difference.old), ("new", &difference.new)] {
                match performed {
                    Some(performed) => {
                        text.push_str(&format!("    {side} {}\n", performed.text()));
                    }
                    None => text.push_str(&format!("    {side}  (not performed)\n")),
                }
            }
        }
        text
    }

    /// The `replay` object of `--format json`.
    pub fn to_json(&self) -> Value {
        let side =
            |performed: &Option<Performed>| performed.as_ref().map_or(Value::Null, Performed::json);
        json!({
            "timeline": self.timeline,
            "old_actions": self.old_actions,
            "new_actions": self.new_actions,
            "differences": self.differences.iter().map(|d| json!({
                "rule": d.slot.rule,
                "step": d.slot.step,
                "finally": d.slot.finally,
                "occurrence": d.slot.occurrence,
                "change": d.change.as_str(),
                "old": side(&d.old),
                "new": side(&d.new),
            })).collect::<Vec<_>>(),
        })
    }
}

/// One side of the comparison: its rules, and the catalogue's topic names
/// they were checked against.
#[derive(Debug)]
pub struct Side<'a> {
    /// `OLD` or `NEW`, and the path the command line gave.
    pub label: &'static str,
    pub path: &'a Path,
    pub payload: Arc<Payload>,
    /// `None`: no catalogue (a bundle file), topics are not checked.
    pub topics: Option<Vec<String>>,
}

/// Reads and checks the timeline at `path`, then simulates it with each
/// side's rules and compares them. `Err(exit)` after the problem was
/// printed.
pub fn replay(
    path: &Path,
    old: &Side<'_>,
    new: &Side<'_>,
    console: &mut Console<'_>,
) -> io::Result<Result<ReplayDiff, Exit>> {
    let timeline = match checked_timeline(path, old, new, console)? {
        Ok(timeline) => timeline,
        Err(exit) => return Ok(Err(exit)),
    };
    let mut outputs = Vec::with_capacity(2);
    for side in [old, new] {
        match simulate_with(
            Arc::clone(&side.payload),
            &timeline,
            None,
            Options::default(),
        ) {
            Ok(outcome) => outputs.push(outcome.lines),
            Err(error) => {
                writeln!(
                    console.err,
                    "error: {}: with {} ({}): {error}",
                    path.display(),
                    side.label,
                    side.path.display()
                )?;
                // The simulator's help for a `[[fail]]` names `rulec
                // simulate`'s flags; here it fits one side only.
                let help = match error {
                    TimelineError::UnknownFailRule { .. }
                    | TimelineError::FailStepOutOfRange { .. } => Some(
                        "both sides replay the whole timeline: a [[fail]] must name a rule and step that OLD and NEW both have".to_string(),
                    ),
                    other => other.help(),
                };
                if let Some(help) = help {
                    writeln!(console.err, "  help: {help}")?;
                }
                return Ok(Err(Exit::Failure));
            }
        }
    }
    let name = path.display().to_string();
    Ok(Ok(compare(name, &outputs[0], &outputs[1])))
}

/// The timeline at `path`, read within its bound and checked as `rulec
/// simulate` checks one, against the rules of both sides.
fn checked_timeline(
    path: &Path,
    old: &Side<'_>,
    new: &Side<'_>,
    console: &mut Console<'_>,
) -> io::Result<Result<Timeline, Exit>> {
    let text = match read_timeline(path) {
        Ok(text) => text,
        Err(reason) => {
            writeln!(
                console.err,
                "error: cannot read the timeline {}: {reason}",
                path.display()
            )?;
            return Ok(Err(Exit::Usage));
        }
    };
    let Ok(timeline) = parse(&text).map(crate::timeline::with_zone) else {
        print_timeline_problems(path, &text, None, console)?;
        return Ok(Err(Exit::Failure));
    };
    // A deploy inside the timeline would replace OLD and NEW alike: what
    // ran after it would compare the timeline's bundle with itself.
    if !timeline.reload.is_empty() {
        writeln!(
            console.err,
            "error: {}: [[reload]] deploys rules of its own, which would replace both OLD and NEW; replay a timeline without [[reload]] entries",
            path.display()
        )?;
        return Ok(Err(Exit::Failure));
    }
    // Topics are checked only when both sides have a catalogue (a bundle
    // file carries none): a topic one side declares is not a typo.
    let topics = match (&old.topics, &new.topics) {
        (Some(old), Some(new)) => {
            let mut topics = old.clone();
            topics.extend(new.iter().filter(|t| !old.contains(t)).cloned());
            Some(topics)
        }
        _ => None,
    };
    let mut known = Known {
        topics,
        ..Known::default()
    };
    known.add_rules(&old.payload);
    known.add_rules(&new.payload);
    if print_timeline_problems(path, &text, Some(&known), console)? {
        return Ok(Err(Exit::Failure));
    }
    Ok(Ok(timeline))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn action(at_ms: u64, rule: &str, step: u32, push: &str) -> Line {
        Line {
            at_ms,
            rule: Some(rule.into()),
            step: Some(step),
            pass: Some(0),
            action: Some("redis"),
            list: Some("scooter:blinker".into()),
            push: Some(push.into()),
            run: Some(format!("{rule}#{at_ms}")),
            ..Line::new(LineKind::Action)
        }
    }

    /// Paired by rule, step and occurrence: an extra pass is an action of
    /// one side only, a later one is a time change, another value a value
    /// change; the run id is not compared, other kinds of line are not
    /// actions.
    #[test]
    fn actions_pair_by_rule_step_and_occurrence() {
        let old = [
            action(0, "a", 0, "both"),
            Line::new(LineKind::RecordPut),
            action(100, "a", 1, "off"),
            action(200, "b", 0, "on"),
        ];
        let new = [
            action(0, "a", 0, "both"),
            action(150, "a", 1, "off"),
            action(200, "b", 0, "left"),
            action(300, "a", 0, "both"),
        ];
        let diff = compare("t.toml".into(), &old, &new);
        let changes: Vec<(String, Change)> = diff
            .differences
            .iter()
            .map(|d| (d.slot.text(), d.change))
            .collect();
        assert_eq!(
            changes,
            [
                ("a step 1 #1".to_string(), Change::Time),
                ("b step 0 #1".to_string(), Change::Value),
                ("a step 0 #2".to_string(), Change::OnlyNew),
            ]
        );
        assert_eq!((diff.old_actions, diff.new_actions), (3, 4));
        assert_eq!(
            diff.to_text(),
            "replay t.toml: 3 actions differ (old 3 actions, new 4 actions)
  a step 1 #1: time
    old      100 ms  redis list=scooter:blinker push=off
    new      150 ms  redis list=scooter:blinker push=off
  b step 0 #1: value
    old      200 ms  redis list=scooter:blinker push=on
    new      200 ms  redis list=scooter:blinker push=left
  a step 0 #2: only new
    old  (not performed)
    new      300 ms  redis list=scooter:blinker push=both
"
        );
        assert_eq!(compare("t.toml".into(), &old, &old).differences, []);
    }

    /// Every field of an action line but where it stands and which run is
    /// part of what is compared: a field added to [`Line`] and missing
    /// here fails this test.
    #[test]
    fn every_field_that_says_what_was_done_is_compared() {
        let mut line = Line {
            at_ms: 1,
            rule: Some("r".into()),
            step: Some(0),
            finally: true,
            pass: Some(0),
            run: Some("r#1".into()),
            action: Some("x"),
            reason: None,
            waiting: Some(vec![]),
            held: Some(vec![]),
            ..Line::new(LineKind::Action)
        };
        for field in [
            &mut line.list,
            &mut line.push,
            &mut line.channel,
            &mut line.command,
            &mut line.iface,
            &mut line.id,
            &mut line.data,
            &mut line.message,
            &mut line.bundle,
            &mut line.topic,
            &mut line.from,
            &mut line.to,
        ] {
            *field = Some("v".into());
        }
        let printed: serde_json::Map<String, Value> =
            serde_json::from_str(&line.to_json()).unwrap_or_default();
        // Where and which run, and the fields no action line carries.
        let not_what = [
            "at_ms", "kind", "rule", "step", "finally", "pass", "run", "waiting", "held", "bundle",
            "topic", "from", "to",
        ];
        let mut expected: Vec<&str> = printed
            .keys()
            .map(String::as_str)
            .filter(|key| !not_what.contains(key))
            .collect();
        let mut compared: Vec<&str> = Performed::of(&line).what.iter().map(|(k, _)| *k).collect();
        expected.sort_unstable();
        compared.sort_unstable();
        assert_eq!(compared, expected);
    }
}

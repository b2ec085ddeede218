//! `rulec diff OLD NEW` (docs/rulec.md#rulec-diff): what a deploy of NEW over
//! OLD changes: rules added, removed and changed (by key, as `rulec dump`
//! shows them), steps whose fingerprint changed, and above all which
//! waiting steps the deploy would drop, by the replay reason that would
//! apply (docs/semantics.md#durability-and-replay). With `--pending`, the
//! actual records; with `--replay`, what each does over a timeline
//! ([`replay`]).

pub mod replay;

use crate::check::plural;
use crate::cli::{Console, Exit};
use crate::simulate::load_rules_known;
use rulecore::bundle::Payload;
use rulecore::rule_change::Comparison;
use rulecore_io::input_file::{read_bounded, InputError};
use ruled_engine::{refusal_without_clock, PendingRecord, ReplayDropReason};
use serde_json::{json, Value};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// `rulec diff` flags.
#[derive(Debug, Clone, clap::Args)]
#[command(after_help = "\
Examples:
  rulec diff deployed.bundle rules/
  rulec diff old.bundle new.bundle --deny-drops
  redis-cli --json HGETALL extensions:pending > pending.json
  rulec diff deployed.bundle rules/ --pending pending.json --deny-drops
  rulec diff deployed.bundle rules/ --bytecode
  rulec diff deployed.bundle rules/ --replay ride.timeline.toml --deny-changes

A changed `when` shows as its source text, as `rulec dump` reconstructs it
from the bundle (spacing and parentheses normalised); --bytecode adds its
instructions.

A waiting step is one with `after` that is durable (its record survives a
restart). A deploy drops its record at the next start when the rule is gone
(rule-gone), the step is gone (step-gone) or the step's fingerprint
changed (fingerprint): the action it was waiting for never happens.

--replay FILE runs OLD and NEW over a timeline (a recording of `ruled
record` is one) on the simulator's virtual clock and lists every action
one performs and the other does not, or performs at another time or with
another value: rule, step, time and action on each side. Actions are
paired by rule, step and occurrence (the first time a step acted on one
side against the first time it acted on the other, and so on).

Exit status: 0 compared (1 with --deny-drops when a waiting step or, with
--pending, a record would be dropped; 1 with --deny-changes when the
replay differs), 1 rules that do not build or a bad pending file or
timeline, 2 usage or I/O error.")]
pub struct DiffArgs {
    /// The deployed rules: a bundle, a rules directory or one rule file.
    pub old: PathBuf,
    /// The rules to deploy: a bundle, a rules directory or one rule file.
    pub new: PathBuf,
    /// The pending records now on the vehicle: the JSON of `HGETALL` of the
    /// pending hash (an object of id -> record), or an array of records.
    #[arg(long, value_name = "FILE")]
    pub pending: Option<PathBuf>,
    /// Exit 1 if the deploy would drop any waiting step (with --pending:
    /// any record): the CI gate before a deploy.
    #[arg(long)]
    pub deny_drops: bool,
    /// Run OLD and NEW over this timeline (docs/simulation.md; a recording
    /// of `ruled record` is one) and list every action they perform
    /// differently.
    #[arg(long, value_name = "FILE")]
    pub replay: Option<PathBuf>,
    /// Exit 1 if the replay differs in any action: the CI gate on
    /// recorded rides.
    #[arg(long, requires = "replay")]
    pub deny_changes: bool,
    /// `text` or `json` (one object).
    #[arg(long, value_enum, default_value_t = DiffFormat::Text)]
    pub format: DiffFormat,
    /// Show a changed `when`'s bytecode too, not only its source text.
    #[arg(long)]
    pub bytecode: bool,
    /// For rules directories; a bundle carries its own profile.
    #[command(flatten)]
    pub profile: crate::check::ProfileArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DiffFormat {
    Text,
    Json,
}

/// A key whose value differs, as `rulec dump` prints it: the definition
/// a live reload's `changed` shares.
pub use rulecore::rule_change::KeyChange;

/// A `when`'s value as [`KeyChange`] holds it, split for printing: its source
/// text (the dump's first line) and its bytecode (the lines after).
struct WhenValue<'v> {
    /// Empty when the program does not decompile.
    source: &'v str,
    bytecode: Vec<&'v str>,
}

impl<'v> WhenValue<'v> {
    fn of(value: &'v str) -> WhenValue<'v> {
        let mut lines = value.lines();
        WhenValue {
            source: lines.next().unwrap_or_default(),
            bytecode: lines.collect(),
        }
    }

    fn shown(&self) -> &'v str {
        if self.source.is_empty() {
            "(no source text: --bytecode shows its instructions)"
        } else {
            self.source
        }
    }
}

/// How `rulec diff` prints a [`KeyChange`] (the type is rulecore's, shared
/// with a live reload; the printing is the tool's).
trait Printed {
    fn is_when(&self) -> bool;
    fn text(&self, bytecode: bool) -> String;
    fn json(&self, bytecode: bool) -> Value;
}

impl Printed for KeyChange {
    /// The rule's or a step's `when` (docs/rulec.md#rulec-diff): shown as
    /// its source text, its bytecode only when asked.
    fn is_when(&self) -> bool {
        self.key == "when" || self.key.ends_with(" when")
    }

    /// `  key: old -> new` and, for a `when` with `bytecode`, its
    /// instructions before and after.
    fn text(&self, bytecode: bool) -> String {
        if !self.is_when() {
            let (old, new) = (self.old.replace('\n', " "), self.new.replace('\n', " "));
            return format!("  {}: {old} -> {new}\n", self.key);
        }
        let (old, new) = (WhenValue::of(&self.old), WhenValue::of(&self.new));
        let mut text = if old.source == new.source && !old.source.is_empty() {
            let note = if bytecode {
                ""
            } else {
                ": --bytecode shows it"
            };
            format!(
                "  {}: {} (same text, its bytecode changed{note})\n",
                self.key, old.source
            )
        } else {
            format!("  {}: {} -> {}\n", self.key, old.shown(), new.shown())
        };
        if bytecode {
            for (label, value) in [("before", &old), ("after", &new)] {
                text.push_str(&format!("    bytecode {label}:\n"));
                for line in &value.bytecode {
                    text.push_str(&format!("      {}\n", line.trim()));
                }
            }
        }
        text
    }

    /// The JSON object: a `when`'s source text as `old`/`new`, its
    /// instructions as `old_bytecode`/`new_bytecode` with `bytecode`.
    fn json(&self, bytecode: bool) -> Value {
        if !self.is_when() {
            return json!({"key": self.key, "old": self.old, "new": self.new});
        }
        let (old, new) = (WhenValue::of(&self.old), WhenValue::of(&self.new));
        let mut object = json!({"key": self.key, "old": old.source, "new": new.source});
        if bytecode {
            object["old_bytecode"] =
                json!(old.bytecode.iter().map(|l| l.trim()).collect::<Vec<_>>());
            object["new_bytecode"] =
                json!(new.bytecode.iter().map(|l| l.trim()).collect::<Vec<_>>());
        }
        object
    }
}

/// A waiting step (or record) the deploy would drop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drop {
    pub rule: String,
    pub step: u32,
    pub reason: ReplayDropReason,
    /// The record's id, with `--pending`.
    pub record: Option<String>,
}

/// What changed between two rule sets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Diff {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    /// Rule name and its changed keys.
    pub changed: Vec<(String, Vec<KeyChange>)>,
    /// Rule name and step index.
    pub fingerprints: Vec<(String, u32)>,
    pub drops: Vec<Drop>,
}

/// Why a step waiting at a deploy (on pass `iter`) would be dropped, if it
/// would: the engine's own replay checks, without the clock.
fn verdict(
    new: &Payload,
    rule: &str,
    step: u32,
    iter: u32,
    fingerprint: &str,
) -> Option<ReplayDropReason> {
    let new_rule = new.rules.iter().find(|r| *r.name == *rule);
    refusal_without_clock(new_rule, step, iter, |_, new_step| {
        new_step.fingerprint.to_string() == fingerprint
    })
}

/// Compares the rule sets; `pending` replaces the waiting steps of `old`
/// by the actual records.
pub fn diff(old: &Payload, new: &Payload, pending: Option<&[PendingRecord]>) -> Diff {
    let mut out = Diff::default();
    let compare = Comparison::new(old, new);
    for rule in &new.rules {
        if !old.rules.iter().any(|r| r.name == rule.name) {
            out.added.push(rule.name.to_string());
        }
    }
    for rule in &old.rules {
        let Some(new_rule) = new.rules.iter().find(|r| r.name == rule.name) else {
            out.removed.push(rule.name.to_string());
            continue;
        };
        // The one definition of "changed", shared with a live reload.
        let changes = compare.key_changes(rule, new_rule);
        if !changes.is_empty() {
            out.changed.push((rule.name.to_string(), changes));
        }
        for (index, step) in rule.steps.iter().enumerate() {
            let index = u32::try_from(index).unwrap_or(u32::MAX);
            if new_rule
                .steps
                .get(index as usize)
                .is_some_and(|s| s.fingerprint != step.fingerprint)
            {
                out.fingerprints.push((rule.name.to_string(), index));
            }
        }
    }
    out.drops = match pending {
        Some(records) => records
            .iter()
            .filter_map(|record| {
                verdict(
                    new,
                    &record.rule,
                    record.step,
                    record.iter,
                    &record.fingerprint,
                )
                .map(|reason| Drop {
                    rule: record.rule.clone(),
                    step: record.step,
                    reason,
                    record: Some(record.id.clone()),
                })
            })
            .collect(),
        None => waiting_drops(old, new),
    };
    out
}

/// The durable waiting steps of `old` that `new` would drop.
fn waiting_drops(old: &Payload, new: &Payload) -> Vec<Drop> {
    let mut drops = Vec::new();
    for rule in &old.rules {
        for (index, step) in rule.steps.iter().enumerate() {
            let index = u32::try_from(index).unwrap_or(u32::MAX);
            if !(step.durable && step.after_ns > 0) {
                continue;
            }
            let fingerprint = step.fingerprint.to_string();
            if let Some(reason) = verdict(new, &rule.name, index, 0, &fingerprint) {
                drops.push(Drop {
                    rule: rule.name.to_string(),
                    step: index,
                    reason,
                    record: None,
                });
            }
        }
    }
    drops
}

/// A `--pending` file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PendingError {
    #[error("cannot read {}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
    /// Not a regular file, or over [`MAX_PENDING_FILE_LEN`].
    #[error("{0}")]
    Input(InputError),
    #[error("{}: not UTF-8 text", path.display())]
    Encoding { path: PathBuf },
    #[error("{}: not JSON: {source}", path.display())]
    Json {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("{}: record {which} is not a pending record: {message}", path.display())]
    Record {
        path: PathBuf,
        which: String,
        message: String,
    },
    #[error("{}: expected an object of id -> record (HGETALL as JSON) or an array of records", path.display())]
    Shape { path: PathBuf },
}

/// The largest `--pending` file read (docs/rulec.md#input-files): 16 MiB
/// hold tens of thousands of records, more than a vehicle's pending hash.
pub const MAX_PENDING_FILE_LEN: u64 = 16 << 20;

/// Reads `--pending`: an object of field -> record (the record as a JSON
/// string, as Redis holds it, or as an object), an array of records, or
/// the flat `[field, value, ...]` array of a RESP2 `HGETALL`.
pub fn read_pending(path: &Path) -> Result<Vec<PendingRecord>, PendingError> {
    let bytes = read_bounded(path, MAX_PENDING_FILE_LEN).map_err(|error| match error {
        InputError::Io { path, source } => PendingError::Io { path, source },
        other => PendingError::Input(other),
    })?;
    let text = String::from_utf8(bytes).map_err(|_| PendingError::Encoding {
        path: path.to_path_buf(),
    })?;
    let value: Value = serde_json::from_str(&text).map_err(|source| PendingError::Json {
        path: path.to_path_buf(),
        source,
    })?;
    let items: Vec<(String, &Value)> = match &value {
        Value::Object(map) => map.iter().map(|(k, v)| (k.clone(), v)).collect(),
        Value::Array(items) if items.iter().all(Value::is_string) && items.len() % 2 == 0 => items
            .chunks(2)
            .map(|pair| (pair[0].as_str().unwrap_or_default().to_string(), &pair[1]))
            .collect(),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, v)| (format!("#{}", i + 1), v))
            .collect(),
        _ => {
            return Err(PendingError::Shape {
                path: path.to_path_buf(),
            })
        }
    };
    items
        .into_iter()
        .map(|(which, value)| {
            let parsed = match value {
                Value::String(json) => {
                    PendingRecord::decode(json.as_bytes()).map_err(|e| e.to_string())
                }
                other => serde_json::from_value::<PendingRecord>(other.clone())
                    .map_err(|e| e.to_string()),
            };
            parsed.map_err(|message| PendingError::Record {
                path: path.to_path_buf(),
                which,
                message,
            })
        })
        .collect()
}

impl Diff {
    /// The text report; `bytecode`: a changed `when`'s instructions too.
    pub fn to_text(&self, bytecode: bool) -> String {
        let mut text = String::new();
        for name in &self.added {
            text.push_str(&format!("added    {name}\n"));
        }
        for name in &self.removed {
            text.push_str(&format!("removed  {name}\n"));
        }
        for (name, changes) in &self.changed {
            text.push_str(&format!("changed  {name}\n"));
            for change in changes {
                text.push_str(&change.text(bytecode));
            }
        }
        for (name, step) in &self.fingerprints {
            text.push_str(&format!("fingerprint changed  {name} step {step}\n"));
        }
        if self.drops.is_empty() {
            text.push_str("dropped on deploy: none\n");
        }
        for drop in &self.drops {
            let record = drop
                .record
                .as_deref()
                .map(|id| format!(" record {id}"))
                .unwrap_or_default();
            text.push_str(&format!(
                "DROPPED on deploy  {} step {}{record}: {}: {}\n",
                drop.rule,
                drop.step,
                drop.reason.as_str(),
                drop.reason.describe()
            ));
        }
        text
    }

    /// The JSON report; `bytecode`: a changed `when`'s instructions too.
    pub fn to_json(&self, bytecode: bool) -> Value {
        json!({
            "added": self.added,
            "removed": self.removed,
            "changed": self.changed.iter().map(|(name, changes)| json!({
                "rule": name,
                "keys": changes.iter().map(|c| c.json(bytecode)).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "fingerprint_changed": self.fingerprints.iter().map(|(name, step)| json!({"rule": name, "step": step})).collect::<Vec<_>>(),
            "dropped": self.drops.iter().map(|d| {
                let mut object = json!({"rule": d.rule, "step": d.step, "reason": d.reason.as_str()});
                if let Some(record) = &d.record {
                    object["record"] = Value::from(record.as_str());
                }
                object
            }).collect::<Vec<_>>(),
        })
    }
}

/// Loads one side of the comparison (`OLD` or `NEW`); `Err(exit)` after
/// the problem was printed.
fn load_side<'a>(
    label: &'static str,
    path: &'a Path,
    args: &DiffArgs,
    console: &mut Console<'_>,
) -> io::Result<Result<replay::Side<'a>, Exit>> {
    Ok(
        load_rules_known(path, &args.profile.profile, console)?.map(|(payload, topics)| {
            replay::Side {
                label,
                path,
                payload: Arc::new(payload),
                topics,
            }
        }),
    )
}

/// Runs `rulec diff`.
pub fn run(args: &DiffArgs, console: &mut Console<'_>) -> io::Result<Exit> {
    let old = match load_side("OLD", &args.old, args, console)? {
        Ok(side) => side,
        Err(exit) => return Ok(exit),
    };
    let new = match load_side("NEW", &args.new, args, console)? {
        Ok(side) => side,
        Err(exit) => return Ok(exit),
    };
    let pending = match args.pending.as_deref().map(read_pending).transpose() {
        Ok(pending) => pending,
        Err(error) => {
            writeln!(console.err, "error: {error}")?;
            return Ok(match error {
                PendingError::Io { .. } | PendingError::Input(_) => Exit::Usage,
                _ => Exit::Failure,
            });
        }
    };
    // Replayed before anything is printed: a bad timeline prints no half report.
    let replayed = match &args.replay {
        Some(path) => match replay::replay(path, &old, &new, console)? {
            Ok(replayed) => Some(replayed),
            Err(exit) => return Ok(exit),
        },
        None => None,
    };
    let diff = diff(&old.payload, &new.payload, pending.as_deref());
    match args.format {
        DiffFormat::Text => {
            write!(console.out, "{}", diff.to_text(args.bytecode))?;
            if let Some(replayed) = &replayed {
                write!(console.out, "{}", replayed.to_text())?;
            }
        }
        DiffFormat::Json => {
            let mut value = diff.to_json(args.bytecode);
            if let Some(replayed) = &replayed {
                value["replay"] = replayed.to_json();
            }
            writeln!(console.out, "{value}")?;
        }
    }
    gates(args, &diff, replayed.as_ref(), console)
}

/// `--deny-drops` and `--deny-changes`: each that fails says so.
fn gates(
    args: &DiffArgs,
    diff: &Diff,
    replayed: Option<&replay::ReplayDiff>,
    console: &mut Console<'_>,
) -> io::Result<Exit> {
    let mut exit = Exit::Success;
    if args.deny_drops && !diff.drops.is_empty() {
        writeln!(
            console.err,
            "error: the deploy would drop {} (--deny-drops)",
            plural(diff.drops.len(), "waiting step")
        )?;
        exit = Exit::Failure;
    }
    let changes = replayed.map_or(0, |replayed| replayed.differences.len());
    if args.deny_changes && changes > 0 {
        writeln!(
            console.err,
            "error: the replay differs in {} (--deny-changes)",
            plural(changes, "action")
        )?;
        exit = Exit::Failure;
    }
    Ok(exit)
}

#[cfg(test)]
mod tests {
    use super::{KeyChange, Printed};

    fn when(old: &str, new: &str) -> KeyChange {
        KeyChange {
            key: "step 0 when".into(),
            old: old.into(),
            new: new.into(),
        }
    }

    /// Same text, another program (a forged or older bundle): said so,
    /// not printed as a change of nothing.
    #[test]
    fn a_when_whose_text_is_the_same_says_its_bytecode_changed() {
        let change = when(
            "to == \"a\"\n0  field to\n1  const \"a\"",
            "to == \"a\"\n0  field to\n1  const \"a\"\n2  not",
        );
        assert_eq!(
            change.text(false),
            "  step 0 when: to == \"a\" (same text, its bytecode changed: --bytecode shows it)\n"
        );
        assert!(change.text(true).ends_with(
            "    bytecode after:\n      0  field to\n      1  const \"a\"\n      2  not\n"
        ));
        // A program that does not decompile has no text to show.
        let change = when("\n0  field to", "always");
        assert_eq!(
            change.text(false),
            "  step 0 when: (no source text: --bytecode shows its instructions) -> always\n"
        );
        // Other keys are as before, one line.
        let change = KeyChange {
            key: "cooldown".into(),
            old: "0s".into(),
            new: "10m".into(),
        };
        assert_eq!(change.text(true), "  cooldown: 0s -> 10m\n");
    }
}

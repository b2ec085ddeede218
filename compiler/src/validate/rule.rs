//! Rule-level keys (docs/rules.md#rule-keys): name, on, when, concurrency,
//! cancel-on, cooldown, debounce, repeat, enabled, protected, trip; the steps and finally
//! steps are `step`'s.

use super::checker::{entry, Pattern, RuleChecker};
use super::{CheckedExpr, CheckedRule};
use crate::diagnostic::{escape_controls, Code, Diagnostic};
use crate::keys::{self, Level};
use crate::rulefile::Table;
use rulecore::bundle::{Concurrency, Repeat};
use rulecore::envelope::Breaker;
use rulecore::suggest::did_you_mean;
use rulecore::topic::TopicPattern;
use std::ops::Range;
use toml::de::DeValue;

impl<'i> RuleChecker<'_, 'i> {
    /// Checks every rule key in the order of docs/rules.md#rule-keys, reporting all
    /// problems that do not depend on each other; `None` on any error.
    pub(super) fn check(&mut self) -> Option<CheckedRule> {
        let table = &self.raw.table;
        let header = self.raw.span.clone();
        // name first, so later diagnostics can name the rule.
        let mut ok = self.check_name(table, &header);
        ok &= self.check_enabled(table);
        let protected = self.protected(table);
        ok &= protected.is_some();
        let trip = self.trip(table);
        ok &= trip.is_some();
        let schedule = self.schedule(table);
        let scheduled = schedule.as_ref().is_some_and(|s| !s.is_empty());
        let (on, on_ok) = self.on(table, &header, scheduled);
        let when = self.rule_when(table);
        let concurrency = self.concurrency(table);
        let (cancel_on, cancel_on_ok) = match self.patterns(table, "cancel-on") {
            Some(patterns) => patterns,
            None => (Vec::new(), entry(table, "cancel-on").is_none()),
        };
        self.warn_cancel_on_overlaps(&on, &cancel_on, concurrency, entry(table, "when").is_some());
        self.uses.on = on.clone();
        self.uses.on_complete = on_ok;
        self.uses.cancel_on = cancel_on.clone();
        let cooldown_ns = self.bounded_duration(
            table,
            "cooldown",
            false,
            "write a positive duration, or `\"0s\"` (or nothing) for no cooldown",
        );
        let debounce_ns = self.bounded_duration(
            table,
            "debounce",
            true,
            "write a positive quiet window such as `\"500ms\"`, or remove `debounce`",
        );
        let hold_ns = self.hold(table, &debounce_ns);
        let repeat = self.repeat(table);
        let per = self.per(table);
        let inputs = self.inputs(table);
        self.uses.inputs_failed = inputs.is_none();
        let steps = self.steps(table, &header);
        let finally = self.finally_steps(table, !cancel_on.is_empty());

        self.uses.name = self.name.clone();
        let name = self.name.clone()?;
        ok &= on_ok && cancel_on_ok;
        let (
            Ok(when),
            Some(concurrency),
            Ok(cooldown_ns),
            Ok(debounce_ns),
            Ok(hold_ns),
            Some(repeat),
            Ok(per),
            Some(inputs),
            Some(steps),
            Some(finally),
        ) = (
            when,
            concurrency,
            cooldown_ns,
            debounce_ns,
            hold_ns,
            repeat,
            per,
            inputs,
            steps,
            finally,
        )
        else {
            return None;
        };
        let schedule = schedule?;
        if !ok {
            return None;
        }
        Some(CheckedRule {
            name,
            source: self.file.name.clone(),
            enabled: self.enabled,
            protected: protected.unwrap_or(false),
            trip: trip.unwrap_or_default(),
            on_spans: on.iter().map(|(_, span)| span.clone()).collect(),
            cancel_on_spans: cancel_on.iter().map(|(_, span)| span.clone()).collect(),
            on: on.into_iter().map(|(p, _)| p).collect(),
            cancel_on: cancel_on.into_iter().map(|(p, _)| p).collect(),
            concurrency,
            cooldown_ns: cooldown_ns.unwrap_or(0),
            debounce_ns: debounce_ns.unwrap_or(0),
            hold_ns: hold_ns.unwrap_or(0),
            repeat,
            per,
            schedule,
            when,
            steps,
            finally,
            inputs,
            span: header,
        })
    }

    /// `for` (docs/semantics.md#hold): positive, and not beside `debounce`,
    /// which answers another question (the last of a burst, not "still
    /// true after a while").
    fn hold(
        &mut self,
        table: &Table<'i>,
        debounce: &Result<Option<u64>, ()>,
    ) -> Result<Option<u64>, ()> {
        let hold = self.bounded_duration(
            table,
            "for",
            true,
            "write how long `when` must stay true, such as `\"5s\"`, or remove `for`",
        )?;
        let (Some(_), Ok(Some(_)), Some(for_entry), Some(debounce_entry)) = (
            hold,
            debounce,
            entry(table, "for"),
            entry(table, "debounce"),
        ) else {
            return Ok(hold);
        };
        self.push(
            Diagnostic::error(
                Code::ForWithDebounce,
                "`for` and `debounce` cannot be used on one rule",
            )
            .at(for_entry.key_span, "hold: `when` true for a while")
            .with_related(
                &self.file.name,
                debounce_entry.key_span,
                "debounce: the last event of a burst",
            )
            .with_help(
                "keep `for` to fire once `when` has stayed true that long, or `debounce` \
                 to fire with the last event after a quiet window; split into two rules \
                 for both",
            ),
        );
        Err(())
    }

    /// `enabled` must be a boolean (its value was read by `new`).
    fn check_enabled(&mut self, table: &Table<'i>) -> bool {
        let Some(e) = entry(table, "enabled") else {
            return true;
        };
        if matches!(e.value.get_ref(), DeValue::Boolean(_)) {
            return true;
        }
        self.wrong_type(
            "enabled",
            e.value,
            "a boolean (`true` or `false`)",
            Some("write `enabled = false` (or `true`), without quotes"),
        );
        false
    }

    /// `trip` (docs/safety.md#the-breaker): the default breaker unless
    /// written; `None` after a problem.
    fn trip(&mut self, table: &Table<'i>) -> Option<Breaker> {
        let Some(e) = entry(table, "trip") else {
            return Some(Breaker::Default);
        };
        match crate::envelope::trip(self.file, e.value) {
            Ok(breaker) => Some(breaker),
            Err(problems) => {
                for mut problem in problems {
                    problem.rule = self.name.clone();
                    self.diagnostics.push(problem);
                }
                None
            }
        }
    }

    /// `protected` (docs/operating.md#trust): a boolean, `false` unless
    /// written; `None` when it is not a boolean.
    fn protected(&mut self, table: &Table<'i>) -> Option<bool> {
        let Some(e) = entry(table, "protected") else {
            return keys::default_bool(Level::Rule, "protected");
        };
        if let DeValue::Boolean(protected) = e.value.get_ref() {
            return Some(*protected);
        }
        self.wrong_type(
            "protected",
            e.value,
            "a boolean (`true` or `false`)",
            Some("write `protected = true`, without quotes"),
        );
        None
    }

    /// `on`: required, not empty, unless the rule has a schedule
    /// (`scheduled`: its own fires trigger it). The patterns that parsed,
    /// also on error (the cancel-on warnings still look at them), and
    /// whether all is well.
    fn on(
        &mut self,
        table: &Table<'i>,
        header: &Range<usize>,
        scheduled: bool,
    ) -> (Vec<Pattern>, bool) {
        if scheduled && entry(table, "on").is_none() {
            return (Vec::new(), true);
        }
        match self.patterns(table, "on") {
            Some((on, true)) if on.is_empty() => {
                let span = entry(table, "on").map_or(header.clone(), |e| e.value.span());
                self.error_help(
                    Code::EmptyOn,
                    "`on` is empty: the rule could never fire".to_string(),
                    span,
                    "no topic patterns",
                    "list at least one topic pattern, e.g. `on = [\"alarm.triggered\"]`",
                );
                (Vec::new(), false)
            }
            Some((on, all_ok)) => (on, all_ok),
            None => {
                if entry(table, "on").is_none() {
                    self.missing(
                        "on",
                        header.clone(),
                        "a rule needs the topics that trigger it",
                        "add e.g. `on = [\"alarm.triggered\"]`",
                    );
                }
                (Vec::new(), false)
            }
        }
    }

    /// The rule's `when`; warns when it is always false.
    fn rule_when(&mut self, table: &Table<'i>) -> Result<Option<CheckedExpr>, ()> {
        let when = self.when(table)?;
        if let Some(expr) = when.as_ref().filter(|expr| expr.checked.is_always_false) {
            self.push(
                Diagnostic::warning(
                    Code::NeverFires,
                    "the rule's `when` is always false: it can never fire",
                )
                .at(expr.span.clone(), "always false")
                .with_help("remove the rule, or set `enabled = false` to keep it around"),
            );
        }
        Ok(when)
    }

    /// `concurrency`, its default (`keys`) when absent; `None` when present
    /// but wrong (so no check may assume the default).
    fn concurrency(&mut self, table: &Table<'i>) -> Option<Concurrency> {
        let Some((text, span)) = self.string(table, "concurrency") else {
            return entry(table, "concurrency")
                .is_none()
                .then(default_concurrency)
                .flatten();
        };
        if let Some(concurrency) = concurrency_named(&text) {
            return Some(concurrency);
        }
        let close = did_you_mean(&text, keys::choices(Level::Rule, "concurrency"));
        let label = match close {
            Some(close) => format!("unknown policy; did you mean `{close}`?"),
            None => "unknown policy".to_string(),
        };
        let diagnostic =
            Diagnostic::error(Code::Concurrency, format!("unknown concurrency `{text}`"))
                .at(span.clone(), label)
                .with_help(CONCURRENCY_HELP);
        self.push(match close {
            Some(close) => diagnostic.with_fix(span, format!("\"{close}\"")),
            None => diagnostic,
        });
        None
    }

    /// Reads `name` into `self.name`; `false` when it is missing or not a
    /// usable name (a name with odd characters only warns).
    fn check_name(&mut self, table: &Table<'i>, header: &Range<usize>) -> bool {
        let mut ok = true;
        match entry(table, "name") {
            None => {
                self.missing(
                    "name",
                    header.clone(),
                    "every rule needs a name",
                    "add `name = \"...\"` under `[[rule]]`",
                );
                ok = false;
            }
            Some(e) => match e.value.get_ref() {
                DeValue::String(text) if text.trim().is_empty() => {
                    self.error_help(
                        Code::EmptyName,
                        "the rule name is empty".to_string(),
                        e.value.span(),
                        "empty name",
                        "give the rule a short unique name such as `hazards-on-alarm`",
                    );
                    ok = false;
                }
                DeValue::String(text) => {
                    self.name = Some(text.to_string());
                    self.name_span = Some(e.value.span());
                    // The name goes into every log line, counter and pending
                    // record: a control character breaks a log line, and
                    // `"hazards "` looks like `"hazards"` but is another name.
                    let control = text.chars().any(char::is_control);
                    if control || text.trim() != text.as_ref() {
                        let what = if control {
                            "a control character (a line break, tab, NUL, ...)"
                        } else {
                            "white space at its start or end"
                        };
                        self.push(
                            Diagnostic::warning(
                                Code::NameCharacters,
                                format!("the rule name `{}` has {what}", escape_controls(text)),
                            )
                            .at(e.value.span(), "hard to tell apart in logs")
                            .with_help("names appear in logs and in Redis: use letters, digits, `-` and `_`, such as `hazards-on-alarm`"),
                        );
                    }
                }
                _ => {
                    let help = super::checker::string_help("name", e.value.get_ref());
                    self.wrong_type("name", e.value, "a string", Some(&help));
                    ok = false;
                }
            },
        }
        ok
    }

    /// The warnings about `cancel-on` patterns that `on` also matches.
    fn warn_cancel_on_overlaps(
        &mut self,
        on: &[Pattern],
        cancel_on: &[Pattern],
        concurrency: Option<Concurrency>,
        has_when: bool,
    ) {
        // docs/semantics.md#handling-one-event: cancel first, then match. A `cancel-on` topic that
        // an `on` prefix also matches cancels the run and then starts a new
        // one, so for that topic `cancel-on` means "restart" (`on =
        // ["alarm.*"]`, `cancel-on = ["alarm.disarmed"]`: disarming restarts
        // the alarm rule). Only a rule without `when` is sure to refire; the
        // same pattern in both lists is `redundant-cancel-on`'s business.
        if !has_when {
            for (pattern, span) in cancel_on {
                let covering = on.iter().find(|(p, _)| p != pattern && covers(p, pattern));
                if let Some((on_pattern, on_span)) = covering {
                    self.push(
                        Diagnostic::warning(
                            Code::CancelOnAlsoTriggers,
                            format!("`on` pattern `{on_pattern}` also matches `cancel-on` pattern `{pattern}`: such an event cancels the run, then starts a new one"),
                        )
                        .at(span.clone(), "also matched by `on`")
                        .with_related(&self.file.name, on_span.clone(), "matches the cancelling topics too")
                        .with_help("to stop the rule on this topic, narrow `on` (list the topics that should start it), or add a `when` that leaves this topic out"),
                    );
                }
            }
        }
        if concurrency == Some(Concurrency::Restart) {
            for (pattern, span) in cancel_on {
                if let Some((_, on_span)) = on.iter().find(|(p, _)| p == pattern) {
                    self.push(
                        Diagnostic::warning(
                            Code::RedundantCancelOn,
                            format!("`cancel-on` repeats the `on` pattern `{pattern}`"),
                        )
                        .at(span.clone(), "also in `on`")
                        .with_related(&self.file.name, on_span.clone(), "the same pattern in `on`")
                        .with_help("under `concurrency = \"restart\"` a new trigger already ends the live run; remove it from `cancel-on`"),
                    );
                }
            }
        }
    }

    /// `None` on error; one pass when absent.
    pub(super) fn repeat(&mut self, table: &Table<'i>) -> Option<Repeat> {
        let Some(e) = entry(table, "repeat") else {
            return Some(Repeat::ONCE);
        };
        let DeValue::Table(repeat) = e.value.get_ref() else {
            self.wrong_type(
                "repeat",
                e.value,
                "a table `{ count, every }` or `{ count, period }`",
                Some("e.g. `repeat = { count = 3, every = \"10s\" }`"),
            );
            return None;
        };
        let count = self.repeat_count(repeat, e.value.span());
        // `every` and `period` are read (and a malformed one reported) even
        // when `count` failed, so every problem shows at once.
        let every = self.duration(repeat, "every");
        let period = self.duration(repeat, "period");
        let count = count?;
        if let (Some((_, every_span)), Some((_, period_span))) = (&every, &period) {
            self.push(
                Diagnostic::error(Code::Repeat, "`repeat` sets both `every` and `period`")
                    .at(every_span.clone(), "every: the pause after a pass")
                    .with_related(
                        &self.file.name,
                        period_span.clone(),
                        "period: from one pass's start to the next's",
                    )
                    .with_help(
                        "keep `every` to pause after each pass, or `period` to start one every \
                         period (a horn pulsing on a beat)",
                    ),
            );
            return None;
        }
        let (gap, key) = match (every, period) {
            (Some(every), None) => (Some(every), "every"),
            (None, Some(period)) => (Some(period), "period"),
            _ => (None, "every"),
        };
        let unreadable = entry(repeat, "every").is_some() || entry(repeat, "period").is_some();
        match gap {
            None if unreadable => None,
            None if count > 1 => {
                self.error_help(
                    Code::Repeat,
                    format!("`repeat` with `count = {count}` needs `every` or `period`"),
                    e.value.span(),
                    "no `every` or `period`",
                    "add the pause after each pass, e.g. `every = \"10s\"`, or the time from one \
                     pass's start to the next's, e.g. `period = \"1s\"`",
                );
                None
            }
            None => Some(Repeat {
                count,
                ..Repeat::ONCE
            }),
            Some((nanos, span)) if nanos <= 0 && count > 1 => {
                self.error_help(
                    Code::Repeat,
                    format!("`repeat.{key}` must be positive"),
                    span,
                    "not positive",
                    match key {
                        "period" => "write the time from one pass's start to the next's, e.g. `period = \"1s\"`",
                        _ => "write the pause between passes, e.g. `every = \"10s\"`",
                    },
                );
                None
            }
            Some((_, span)) if count == 1 => {
                self.push(
                    Diagnostic::warning(
                        Code::RepeatEveryUnused,
                        format!("`repeat.{key}` has no effect with `count = 1`"),
                    )
                    .at(span, "never used")
                    .with_help("raise `count`, or remove `repeat`"),
                );
                Some(Repeat {
                    count,
                    ..Repeat::ONCE
                })
            }
            Some((nanos, _)) if key == "period" => {
                Some(Repeat::period(count, nanos.unsigned_abs()))
            }
            Some((nanos, _)) => Some(Repeat::every(count, nanos.unsigned_abs())),
        }
    }

    /// `repeat.count`: at least 1; `None` once reported.
    fn repeat_count(&mut self, repeat: &Table<'i>, table_span: Range<usize>) -> Option<u32> {
        let Some((count, span)) = self.integer(repeat, "count") else {
            if entry(repeat, "count").is_none() {
                self.error_help(
                    Code::Repeat,
                    "`repeat` needs a `count`".to_string(),
                    table_span,
                    "no `count`",
                    "write e.g. `repeat = { count = 3, every = \"10s\" }` (count >= 1), or remove `repeat` for one pass",
                );
            }
            return None;
        };
        match u32::try_from(count) {
            Ok(count) if count >= 1 => Some(count),
            _ => {
                let bound = if count < 1 {
                    "at least 1".to_string()
                } else {
                    format!("at most {}", u32::MAX)
                };
                self.error_help(
                    Code::Repeat,
                    format!("`repeat.count` must be {bound}, found {count}"),
                    span,
                    "out of range",
                    "`count` is the number of passes in all; 1 means no repetition",
                );
                None
            }
        }
    }
}

/// Whether every topic `inner` matches is also matched by `outer`.
fn covers(outer: &TopicPattern, inner: &TopicPattern) -> bool {
    match (outer, inner) {
        (TopicPattern::Any, _) => true,
        (TopicPattern::Prefix(prefix), TopicPattern::Prefix(sub)) => sub.starts_with(&**prefix),
        (_, TopicPattern::Exact(topic)) => outer.matches(topic),
        _ => false,
    }
}

/// What an unknown `concurrency` is told: each of the table's choices, in
/// its words (a unit test holds it to `keys`).
const CONCURRENCY_HELP: &str = "`concurrency` is one of \"restart\" (the default: a new trigger restarts the run), \"drop\" (ignore triggers while a run is live) or \"queue\" (run them one after another)";

/// The policy a `concurrency` choice of `keys` names.
fn concurrency_named(name: &str) -> Option<Concurrency> {
    let index = keys::choices(Level::Rule, "concurrency")
        .iter()
        .position(|choice| *choice == name)?;
    // The table's order: restart, drop, queue (held by a unit test).
    [Concurrency::Restart, Concurrency::Drop, Concurrency::Queue]
        .get(index)
        .copied()
}

/// The policy of a rule that does not write `concurrency`: the table's.
fn default_concurrency() -> Option<Concurrency> {
    keys::default_str(Level::Rule, "concurrency").and_then(concurrency_named)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concurrency_comes_from_the_key_table() {
        assert_eq!(
            keys::choices(Level::Rule, "concurrency"),
            ["restart", "drop", "queue"]
        );
        assert_eq!(concurrency_named("restart"), Some(Concurrency::Restart));
        assert_eq!(concurrency_named("drop"), Some(Concurrency::Drop));
        assert_eq!(concurrency_named("queue"), Some(Concurrency::Queue));
        assert_eq!(concurrency_named("later"), None);
        assert_eq!(default_concurrency(), Some(Concurrency::Restart));
        for choice in keys::choices(Level::Rule, "concurrency") {
            assert!(
                CONCURRENCY_HELP.contains(&format!("\"{choice}\"")),
                "{choice}"
            );
        }
        let default = keys::default_str(Level::Rule, "concurrency").unwrap_or_default();
        assert!(CONCURRENCY_HELP.contains(&format!("\"{default}\" (the default")));
    }

    #[test]
    fn protected_defaults_from_the_key_table() {
        assert_eq!(keys::default_bool(Level::Rule, "protected"), Some(false));
    }
}

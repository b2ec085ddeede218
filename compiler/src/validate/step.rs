//! Step keys (docs/rules.md#step-keys): do, when, after, durable, and the redis
//! and exec actions; keys of another action kind.

use super::checker::{entry, RuleChecker};
use super::CheckedStep;
use crate::diagnostic::{Code, Diagnostic};
use crate::keys::{self, ActionKind, Level};
use crate::rulefile::Table;
use rulecore::bundle::Action;
use rulecore::bundle::DEFAULT_TIMEOUT_NS;
use rulecore::suggest::did_you_mean;
use std::ops::Range;
use toml::de::DeValue;

impl<'i> RuleChecker<'_, 'i> {
    /// `None` on error in any step.
    pub(super) fn steps(
        &mut self,
        table: &Table<'i>,
        header: &Range<usize>,
    ) -> Option<Vec<CheckedStep>> {
        let Some(e) = entry(table, "step") else {
            self.missing(
                "step",
                header.clone(),
                "a rule needs at least one step",
                "add a `[[rule.step]]` table after the rule's keys, e.g. `do = \"redis\"`, `list = \"scooter:blinker\"`, `push = \"both\"`",
            );
            return None;
        };
        let DeValue::Array(items) = e.value.get_ref() else {
            self.wrong_type(
                "step",
                e.value,
                "an array of step tables",
                Some("start each step with a `[[rule.step]]` header (two brackets)"),
            );
            return None;
        };
        if items.is_empty() {
            self.error_help(
                Code::NoSteps,
                "`step` is empty: a rule needs at least one step".to_string(),
                e.value.span(),
                "no steps",
                "add a `[[rule.step]]` table",
            );
            return None;
        }
        self.step_list(items)
    }

    /// `[[rule.finally]]` (docs/rules.md#finally): steps checked as the
    /// rule's own, `durable` refused; absent, none. `None` on error in any.
    pub(super) fn finally_steps(
        &mut self,
        table: &Table<'i>,
        has_cancel_on: bool,
    ) -> Option<Vec<CheckedStep>> {
        let Some(e) = entry(table, "finally") else {
            return Some(Vec::new());
        };
        let DeValue::Array(items) = e.value.get_ref() else {
            self.wrong_type(
                "finally",
                e.value,
                "an array of step tables",
                Some("start each finally step with a `[[rule.finally]]` header (two brackets)"),
            );
            return None;
        };
        if !items.is_empty() && !has_cancel_on {
            self.push(
                Diagnostic::warning(
                    Code::FinallyWithoutCancelOn,
                    "`finally` steps can never run: the rule has no `cancel-on`",
                )
                .at(e.key_span, "runs only when `cancel-on` ends a run")
                .with_help("add the topics that should stop the rule, e.g. `cancel-on = [\"alarm.disarmed\"]`, or make these ordinary steps"),
            );
        }
        self.finally = true;
        let steps = self.step_list(items);
        self.finally = false;
        steps
    }

    /// Each step of a list in order; `None` on error in any.
    fn step_list(&mut self, items: &[toml::Spanned<DeValue<'i>>]) -> Option<Vec<CheckedStep>> {
        let list = if self.finally { "finally step" } else { "step" };
        let mut steps = Vec::new();
        let mut ok = true;
        let mut never_past: Option<(usize, Range<usize>)> = None;
        for (index, item) in items.iter().enumerate() {
            self.step = Some(index);
            let DeValue::Table(step) = item.get_ref() else {
                let what = if self.finally { "finally" } else { "step" };
                self.wrong_type(what, item, "a table", None);
                ok = false;
                continue;
            };
            // Every step after the first always-false `when` gets its own
            // warning, so none of them looks reachable (docs/diagnostics.md).
            if let Some((false_step, false_span)) = &never_past {
                let (false_step, false_span) = (*false_step, false_span.clone());
                self.push(
                    Diagnostic::warning(
                        Code::UnreachableStep,
                        format!("this step can never run: {list} {false_step}'s `when` is always false"),
                    )
                    .at(item.span(), "unreachable")
                    .with_related(&self.file.name, false_span, "always false: ends every run here")
                    .with_help("a `when` that is false ends the run; remove the condition or the steps after it"),
                );
            }
            // A step with other errors still cuts off the steps after it.
            let (checked, literal_false) = self.step_table(step, item.span());
            if let (Some(span), None) = (literal_false, &never_past) {
                never_past = Some((index, span));
            }
            match checked {
                Some(checked) => steps.push(checked),
                None => ok = false,
            }
        }
        self.step = None;
        ok.then_some(steps)
    }

    /// The checked step (`None` on error), and the span of its `when` if
    /// that is literally `false`, known even when the rest of the step failed.
    pub(super) fn step_table(
        &mut self,
        step: &Table<'i>,
        span: Range<usize>,
    ) -> (Option<CheckedStep>, Option<Range<usize>>) {
        let mut ok = true;
        let when = match self.when(step) {
            Ok(when) => when,
            Err(()) => {
                ok = false;
                None
            }
        };
        let literal_false = when
            .as_ref()
            .filter(|expr| expr.checked.is_always_false)
            .map(|expr| expr.span.clone());
        (self.step_rest(step, span, when, ok), literal_false)
    }

    /// The keys of a step after `when`.
    fn step_rest(
        &mut self,
        step: &Table<'i>,
        span: Range<usize>,
        when: Option<super::CheckedExpr>,
        ok: bool,
    ) -> Option<CheckedStep> {
        let timing = self.timing(step);
        let action = self.action(step, &span)?;
        let (after_ns, durable) = timing?;
        ok.then_some(CheckedStep {
            action,
            when,
            after_ns,
            durable,
            span,
        })
    }

    /// `after` and `durable` (`durable` only with a delay); `None` when
    /// either is wrong.
    fn timing(&mut self, step: &Table<'i>) -> Option<(u64, bool)> {
        // Whether `after` itself is sound, apart from the step's other keys:
        // the `durable` check below depends on it alone.
        let after = self.bounded_duration(
            step,
            "after",
            false,
            "`after` is a delay: write a positive duration, or `\"0s\"` to run at once",
        );
        let (after_ns, after_ok) = match after {
            Ok(after) => (after.unwrap_or(0), true),
            Err(()) => (0, false),
        };
        if let (true, Some(durable)) = (self.finally, entry(step, "durable")) {
            self.error_help(
                Code::FinallyDurable,
                "`durable` on a finally step: finally steps are never durable".to_string(),
                durable.key_span,
                "not allowed in `[[rule.finally]]`",
                "remove `durable`: a finally step's wait is a plain timer, which a restart of the service forgets",
            );
            return None;
        }
        let Some((durable, durable_span)) = self.boolean(step, "durable") else {
            let durable_ok = entry(step, "durable").is_none();
            // A finally step never is durable (docs/rules.md#finally).
            let durable = after_ns > 0 && !self.finally;
            return (after_ok && durable_ok).then_some((after_ns, durable));
        };
        if after_ns == 0 && after_ok {
            let mut diagnostic = Diagnostic::error(
                Code::DurableWithoutAfter,
                "`durable` on a step without a delay",
            )
            .at(durable_span, "only meaningful with `after` > 0")
            .with_help("`durable` says whether a delayed step survives a restart; remove it, or add `after`");
            if let Some(after) = entry(step, "after") {
                diagnostic = diagnostic.with_related(
                    &self.file.name,
                    after.value.span(),
                    "`after` is zero here",
                );
            }
            self.push(diagnostic);
            return None;
        }
        after_ok.then_some((after_ns, durable))
    }

    /// `do` and the keys of its action kind (docs/rules.md#step-keys, docs/rules.md#the-can-action).
    fn action(&mut self, step: &Table<'i>, span: &Range<usize>) -> Option<Action> {
        let Some(e) = entry(step, "do") else {
            self.missing(
                "do",
                span.clone(),
                "every step needs an action",
                "add `do = \"redis\"`, `do = \"exec\"` or `do = \"can\"`",
            );
            return None;
        };
        let DeValue::String(kind) = e.value.get_ref() else {
            self.wrong_type(
                "do",
                e.value,
                "a string",
                Some("`do` is one of \"redis\", \"exec\" or \"can\""),
            );
            return None;
        };
        let kind: &str = kind;
        match ActionKind::from_name(kind) {
            Some(action) => {
                self.other_kind_keys(step, kind);
                match action {
                    ActionKind::Redis => self.redis(step, span),
                    ActionKind::Exec => self.exec(step, span),
                    ActionKind::Can => self.can(step, span),
                }
            }
            None if matches!(kind, "lua" | "http") => {
                self.error_help(
                    Code::ActionUnsupported,
                    format!("`{kind}` actions are not supported yet"),
                    e.value.span(),
                    "not supported yet",
                    "supported actions are \"redis\", \"exec\" and \"can\"; an `exec` step can run a script",
                );
                None
            }
            None => {
                let label = match did_you_mean(kind, ActionKind::NAMES) {
                    Some(close) => format!("unknown action; did you mean `{close}`?"),
                    None => "unknown action".to_string(),
                };
                self.error_help(
                    Code::UnknownAction,
                    format!("unknown action `{kind}`"),
                    e.value.span(),
                    &label,
                    "`do` is one of \"redis\", \"exec\" or \"can\"",
                );
                None
            }
        }
    }

    /// Warns about each key of another action kind (docs/rules.md#step-keys): it has
    /// no effect. The key table says which kind a key belongs to.
    pub(super) fn other_kind_keys(&mut self, step: &Table<'i>, kind: &str) {
        let others = keys::keys(Level::Step)
            .filter(|key| !key.actions.is_empty())
            .filter(|key| !key.actions.iter().any(|other| other.as_str() == kind))
            .map(|key| (key.name, key.actions[0].as_str()));
        for (key, other_kind) in others {
            if let Some(e) = entry(step, key) {
                self.push(
                    Diagnostic::warning(
                        Code::OtherActionKey,
                        format!("`{key}` has no effect on {} `{kind}` step", article(kind)),
                    )
                    .at(e.key_span, format!("belongs to `do = \"{other_kind}\"`"))
                    .with_help(format!(
                        "remove `{key}`, or change `do` if this step should be `{other_kind}`"
                    )),
                );
            }
        }
    }

    /// A required, non-empty string argument of an action.
    pub(super) fn required_string(
        &mut self,
        step: &Table<'i>,
        key: &str,
        kind: &str,
        header: &Range<usize>,
        example: &str,
    ) -> Option<(String, Range<usize>)> {
        if entry(step, key).is_none() {
            self.missing(
                key,
                header.clone(),
                &format!("{} `{kind}` step needs `{key}`", article(kind)),
                &format!("add e.g. `{key} = {example}`"),
            );
            return None;
        }
        let (text, span) = self.string(step, key)?;
        if text.is_empty() {
            self.error_help(
                Code::EmptyValue,
                format!("`{key}` is empty"),
                span,
                "empty string",
                &format!("write e.g. `{key} = {example}`"),
            );
            return None;
        }
        Some((text, span))
    }

    pub(super) fn redis(&mut self, step: &Table<'i>, header: &Range<usize>) -> Option<Action> {
        let list = self.required_string(step, "list", "redis", header, "\"scooter:blinker\"");
        let push = self.required_string(step, "push", "redis", header, "\"both\"");
        for (key, value) in [("list", &list), ("push", &push)] {
            // Redis accepts a key or value of blanks, so this is not an
            // error, but nothing reads such a list: surely a slip.
            if let Some((text, span)) = value.as_ref().filter(|(text, _)| text.trim().is_empty()) {
                self.push(
                    Diagnostic::warning(
                        Code::BlankValue,
                        format!("`{key}` `{}` is only white space", text.escape_debug()),
                    )
                    .at(span.clone(), "only white space")
                    .with_help(format!(
                        "write the {} the service reads, e.g. `{key} = {}`",
                        if key == "list" { "list name" } else { "value" },
                        if key == "list" {
                            "\"scooter:blinker\""
                        } else {
                            "\"both\""
                        }
                    )),
                );
            }
        }
        if let (Some(catalogue), Some((list, _)), Some((push, span))) =
            (self.catalogue, &list, &push)
        {
            if let Some(diagnostic) =
                super::profile::list_value(catalogue, list, push, span.clone())
            {
                self.push(diagnostic);
            }
        }
        let timeout_ns = self.action_timeout(step, "how long to wait for Redis' reply");
        Some(Action::Redis {
            list: list?.0,
            push: push?.0,
            timeout_ns: timeout_ns?,
        })
    }

    pub(super) fn exec(&mut self, step: &Table<'i>, header: &Range<usize>) -> Option<Action> {
        let command = self.required_string(
            step,
            "command",
            "exec",
            header,
            "\"/usr/local/bin/lights-off\"",
        );
        let command = command.filter(|(text, span)| {
            // docs/rules.md#step-keys: a name or path, no arguments, no shell. The
            // runtime would look for a program literally named
            // `systemctl restart lights` and fail on every run.
            if let Some(bad) = text.chars().find(|c| c.is_whitespace() || *c == '\0') {
                let what = if bad == '\0' { "a NUL byte" } else { "white space" };
                self.push(
                    Diagnostic::error(
                        Code::ExecArguments,
                        format!("`command` `{}` contains {what}: it names one program, without arguments", text.escape_debug()),
                    )
                    .at(span.clone(), "one program name or path, no arguments, no shell")
                    .with_help("put the command line in a small script and name the script here; the event arrives on stdin and in `LS_*` variables"),
                );
                return false;
            }
            // `scripts/x` or `./x` is found relative to ruled's working
            // directory (`/` under systemd), not to the rules directory.
            if text.contains('/') && !text.starts_with('/') {
                self.push(
                    Diagnostic::warning(
                        Code::ExecRelativePath,
                        format!("`command` `{text}` is a relative path: it is looked up from ruled's working directory, not from the rules directory"),
                    )
                    .at(span.clone(), "relative path")
                    .with_help("write the absolute path (`/usr/local/bin/...`), or a bare program name to search the `PATH`"),
                );
            }
            true
        });
        let timeout_ns = self.action_timeout(step, "how long the command may run");
        Some(Action::Exec {
            command: command?.0,
            timeout_ns: timeout_ns?,
        })
    }

    /// The step's `timeout` (docs/rules.md#step-keys), 10s when absent;
    /// `what` completes the help "write ...".
    fn action_timeout(&mut self, step: &Table<'i>, what: &str) -> Option<u64> {
        self.bounded_duration(
            step,
            "timeout",
            true,
            &format!("write {what}, e.g. `timeout = \"5s\"` (the default is 10s)"),
        )
        .ok()
        .map(|timeout| timeout.unwrap_or(DEFAULT_TIMEOUT_NS))
    }
}

/// "an" before a vowel sound: an `exec` step, a `redis` step, a `can` step.
pub(super) fn article(word: &str) -> &'static str {
    if word.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    }
}

//! Step keys (docs/rules.md#step-keys): do, when, after, durable, and the redis
//! and exec actions; keys of another action kind.

use super::checker::{entry, RuleChecker};
use super::{CheckedStep, CheckedTemplate};
use crate::diagnostic::{Code, Diagnostic};
use crate::keys::{self, ActionKind, Level};
use crate::rulefile::Table;
use rulecore::bundle::{
    Action, Notification, Severity, Text, DEFAULT_TIMEOUT_NS, MAX_NOTIFICATION_BYTES,
};
use rulecore::limits::{
    input_name_problem, DEFAULT_NOTIFY_TTL_MS, MAX_NOTIFY_TTL_MS, MIN_NOTIFY_TTL_MS,
};
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
        let (action, values) = self.action(step, &span)?;
        let (after_ns, durable) = timing?;
        ok.then_some(CheckedStep {
            action,
            when,
            after_ns,
            durable,
            span,
            values,
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

    /// `do` and the keys of its action kind (docs/rules.md#step-keys,
    /// docs/rules.md#the-can-action), with its computed values.
    fn action(
        &mut self,
        step: &Table<'i>,
        span: &Range<usize>,
    ) -> Option<(Action, Vec<CheckedTemplate>)> {
        let Some(e) = entry(step, "do") else {
            self.missing(
                "do",
                span.clone(),
                "every step needs an action",
                "add `do = \"redis\"`, `do = \"publish\"`, `do = \"notify\"`, `do = \"exec\"` or `do = \"can\"`",
            );
            return None;
        };
        let DeValue::String(kind) = e.value.get_ref() else {
            self.wrong_type("do", e.value, "a string", Some(DO_VALUES));
            return None;
        };
        let kind: &str = kind;
        match ActionKind::from_name(kind) {
            Some(action) => {
                self.other_kind_keys(step, kind);
                match action {
                    ActionKind::Redis => self.redis(step, span),
                    ActionKind::Exec => self.exec(step, span).map(|a| (a, Vec::new())),
                    ActionKind::Can => self.can(step, span).map(|a| (a, Vec::new())),
                    ActionKind::Publish => self.publish(step, span),
                    ActionKind::Notify => self.notify(step, span),
                }
            }
            None if matches!(kind, "lua" | "http") => {
                self.error_help(
                    Code::ActionUnsupported,
                    format!("`{kind}` actions are not supported yet"),
                    e.value.span(),
                    "not supported yet",
                    "supported actions are \"redis\", \"publish\", \"notify\", \"exec\" and \"can\"; an `exec` step can run a script",
                );
                None
            }
            None => {
                let close = did_you_mean(kind, ActionKind::NAMES);
                let label = match close {
                    Some(close) => format!("unknown action; did you mean `{close}`?"),
                    None => "unknown action".to_string(),
                };
                let diagnostic =
                    Diagnostic::error(Code::UnknownAction, format!("unknown action `{kind}`"))
                        .at(e.value.span(), label)
                        .with_help(DO_VALUES);
                self.push(match close {
                    Some(close) => diagnostic.with_fix(e.value.span(), format!("\"{close}\"")),
                    None => diagnostic,
                });
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

    pub(super) fn redis(
        &mut self,
        step: &Table<'i>,
        header: &Range<usize>,
    ) -> Option<(Action, Vec<CheckedTemplate>)> {
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
        if let (Some(catalogue), Some((list, span))) = (self.catalogue, &list) {
            if let Some(diagnostic) = super::profile::list_name(catalogue, list, span.clone()) {
                self.push(diagnostic);
            }
        }
        let push_span = push.as_ref().map(|(_, span)| span.clone());
        let push = push.and_then(|(text, span)| self.text("push", text, span));
        // A computed value is only known at run time.
        if let (Some(catalogue), Some((list, _)), Some((Text::Plain(push), _)), Some(span)) =
            (self.catalogue, &list, &push, push_span)
        {
            if let Some(diagnostic) = super::profile::list_value(catalogue, list, push, span) {
                self.push(diagnostic);
            }
        }
        let timeout_ns = self.action_timeout(step, "how long to wait for Redis' reply");
        let (push, value) = push?;
        Some((
            Action::Redis {
                list: list?.0,
                push,
                timeout_ns: timeout_ns?,
            },
            value.into_iter().collect(),
        ))
    }

    /// `do = "publish"` (docs/rules.md#the-publish-action): an exact
    /// channel, never one of the bus' `ev:` channels, and a message.
    pub(super) fn publish(
        &mut self,
        step: &Table<'i>,
        header: &Range<usize>,
    ) -> Option<(Action, Vec<CheckedTemplate>)> {
        let channel = self.required_string(step, "channel", "publish", header, "\"my:channel\"");
        let channel = channel.filter(|(name, span)| {
            let problem = input_name_problem(name).or_else(|| {
                name.starts_with("ev:")
                    .then_some("is one of the bus' `ev:` channels: rules do not forge bus events")
            });
            let Some(problem) = problem else {
                return true;
            };
            self.push(
                Diagnostic::error(
                    Code::PublishChannel,
                    format!("the publish `channel` `{}` {problem}", name.escape_debug()),
                )
                .at(span.clone(), "not a channel a step may publish on")
                .with_help("name one exact channel (no white space or `*`), outside `ev:`; to tell other rules, publish on a channel an input reads"),
            );
            false
        });
        let message = self.required_string(step, "message", "publish", header, "\"hello\"");
        let message = message.and_then(|(text, span)| self.text("message", text, span));
        let timeout_ns = self.action_timeout(step, "how long to wait for Redis' reply");
        let (message, value) = message?;
        Some((
            Action::Publish {
                channel: channel?.0,
                message,
                timeout_ns: timeout_ns?,
            },
            value.into_iter().collect(),
        ))
    }

    /// `do = "notify"` (docs/rules.md#the-notify-action): a toast on the
    /// dashboard, at most 4096 bytes when nothing in it is computed.
    pub(super) fn notify(
        &mut self,
        step: &Table<'i>,
        header: &Range<usize>,
    ) -> Option<(Action, Vec<CheckedTemplate>)> {
        let title = self.required_string(step, "title", "notify", header, "\"Battery low\"");
        // Where a too long notification is pointed at: its body, else its title.
        let mut size_span = title.as_ref().map(|(_, span)| span.clone());
        let title = title.and_then(|(text, span)| self.text("title", text, span));
        let body = match self.string_or_fail(step, "body") {
            Ok(Some((text, span))) => {
                size_span = Some(span.clone());
                self.text("body", text, span)
            }
            Ok(None) => Some((Text::Plain(String::new()), None)),
            Err(()) => None,
        };
        let severity = self.severity(step);
        let ttl_ms = self.notify_ttl(step);
        let id = match self.string_or_fail(step, "id") {
            Ok(Some((id, span))) if id.trim().is_empty() => {
                self.error_help(
                    Code::EmptyValue,
                    "the notify `id` is empty".to_string(),
                    span,
                    "empty id",
                    "leave `id` out to use the rule's name, or name the toast, e.g. `id = \"battery\"`",
                );
                None
            }
            Ok(Some((id, _))) => Some(id),
            Ok(None) => self.name.clone(),
            Err(()) => None,
        };
        let dismiss = match self.boolean(step, "dismiss") {
            Some((dismiss, _)) => Some(dismiss),
            None => entry(step, "dismiss").is_none().then_some(false),
        };
        let timeout_ns = self.action_timeout(step, "how long to wait for Redis' reply");
        let ((title, title_value), (body, body_value)) = (title?, body?);
        let notification = Notification {
            id: id?,
            title,
            body,
            severity: severity?,
            ttl_ms: ttl_ms?,
            dismiss: dismiss?,
            timeout_ns: timeout_ns?,
        };
        self.notification_size(&notification, size_span.unwrap_or_else(|| header.clone()))?;
        let values = title_value.into_iter().chain(body_value).collect();
        Some((Action::Notify(Box::new(notification)), values))
    }

    /// `severity`, `info` when absent.
    fn severity(&mut self, step: &Table<'i>) -> Option<Severity> {
        let Some((name, span)) = self.string_or_fail(step, "severity").ok()? else {
            return Some(Severity::Info);
        };
        if let Some(severity) = Severity::from_name(&name) {
            return Some(severity);
        }
        // `warn` is too far from `warning` for an edit distance to find.
        let prefix_of = Severity::NAMES
            .iter()
            .copied()
            .find(|known| !name.is_empty() && known.starts_with(name.as_str()));
        let close = prefix_of.or_else(|| did_you_mean(&name, Severity::NAMES));
        let label = match close {
            Some(close) => format!("unknown severity; did you mean `{close}`?"),
            None => "unknown severity".to_string(),
        };
        let fix = close.map(|close| (span.clone(), format!("\"{close}\"")));
        self.push(
            Diagnostic::error(
                Code::NotifySeverity,
                format!("unknown notify `severity` `{}`", name.escape_debug()),
            )
            .at(span, label)
            .with_help("`severity` is one of \"debug\", \"info\", \"success\", \"warning\", \"error\" or \"critical\"")
            .with_fix_opt(fix),
        );
        None
    }

    /// `ttl`: how long the toast shows, 1 s to 60 s, 10 s when absent.
    fn notify_ttl(&mut self, step: &Table<'i>) -> Option<u32> {
        let help =
            "write how long the toast shows, from `\"1s\"` to `\"60s\"` (the default is 10s)";
        let ttl_ns = self.bounded_duration(step, "ttl", true, help).ok()?;
        let Some(ttl_ns) = ttl_ns else {
            return Some(DEFAULT_NOTIFY_TTL_MS);
        };
        let ttl_ms = ttl_ns / 1_000_000;
        let range = u64::from(MIN_NOTIFY_TTL_MS)..=u64::from(MAX_NOTIFY_TTL_MS);
        if range.contains(&ttl_ms) && ttl_ns % 1_000_000 == 0 {
            return u32::try_from(ttl_ms).ok();
        }
        let span = entry(step, "ttl").map_or(0..0, |e| e.value.span());
        self.error_help(
            Code::NotifyTtl,
            "a notify `ttl` must be from 1s to 60s, in whole milliseconds".to_string(),
            span,
            "outside 1s to 60s",
            help,
        );
        None
    }

    /// A notification with nothing computed must fit the dashboard's
    /// 4096 bytes; a computed one is cut to fit at run time.
    fn notification_size(&mut self, notification: &Notification, span: Range<usize>) -> Option<()> {
        let (Some(title), Some(body)) = (notification.title.plain(), notification.body.plain())
        else {
            return Some(());
        };
        // Its JSON uncut: the bytes the body was cut by, added back.
        let size = match notification.message(title, body) {
            Some((_, 0)) => return Some(()),
            Some((message, cut)) => message.len() + cut,
            None => notification.message(title, "").map_or(0, |(m, _)| m.len()) + body.len(),
        };
        self.error_help(
            Code::NotificationSize,
            format!("this notification is {size} bytes or more as JSON; the dashboard takes at most {MAX_NOTIFICATION_BYTES}"),
            span,
            "too long for the dashboard",
            "shorten `title` or `body`; a computed value is cut to fit instead",
        );
        None
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

/// The help for a `do` that is not a string or not an action.
const DO_VALUES: &str = "`do` is one of \"redis\", \"publish\", \"notify\", \"exec\" or \"can\"";

/// "an" before a vowel sound: an `exec` step, a `redis` step, a `can` step.
pub(super) fn article(word: &str) -> &'static str {
    if word.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    }
}

//! One rule of the loaded bundle as a rule file (TOML), for `v1.show`'s
//! `definition` (docs/operating.md#the-fields-lsc-reads): rendered from
//! the bundle, so it says what runs, and written so that `rulec check`
//! accepts it and `rulec build` compiles it to the same rule. Keys at
//! their defaults are left out; `when` expressions are the bundle's
//! programs decompiled (docs/bundle.md#rulec-dump-text).

use rulecore::bundle::{
    Action, CanFrame, Concurrency, Input, InputSource, Notification, Payload, Rule, Step,
    DEFAULT_TIMEOUT_NS,
};
use rulecore::bytecode::Program;
use rulecore::dump::decompile;
use rulecore::duration::format_duration;
use rulecore::template::Text;
use std::fmt::Write;

/// A notify step's `ttl` unless it sets one (docs/rules.md#step-keys).
const DEFAULT_TTL_MS: u32 = 10_000;

/// `rule` as a rule file holding just it.
pub fn rule_toml(rule: &Rule, payload: &Payload) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = write_rule(&mut out, rule, payload);
    out
}

fn write_rule(out: &mut String, rule: &Rule, payload: &Payload) -> std::fmt::Result {
    writeln!(out, "[[rule]]")?;
    writeln!(out, "name = {}", quoted(&rule.name))?;
    // A schedule may stand for `on` (docs/rules.md#schedules).
    let schedule = rule.schedule();
    if !rule.on.is_empty() || schedule.is_none() {
        writeln!(out, "on = {}", patterns(&rule.on))?;
    }
    if let Some(schedule) = schedule {
        if !schedule.at.is_empty() {
            let labels: Vec<String> = (schedule.at.iter())
                .map(|&at| rulecore::schedule::time_of_day_label(at))
                .collect();
            writeln!(out, "at = {}", list(labels.iter().map(String::as_str)))?;
        }
        if schedule.every_s > 0 {
            let every_ns = u64::from(schedule.every_s) * 1_000_000_000;
            writeln!(out, "every = {}", duration(every_ns))?;
        }
    }
    if let Some(when) = &rule.when {
        writeln!(out, "when = {}", expression(when, payload))?;
    }
    if !rule.enabled {
        writeln!(out, "enabled = false")?;
    }
    if rule.protected() {
        writeln!(out, "protected = true")?;
    }
    match rule.concurrency {
        Concurrency::Restart => {}
        Concurrency::Drop => writeln!(out, "concurrency = \"drop\"")?,
        Concurrency::Queue => writeln!(out, "concurrency = \"queue\"")?,
    }
    if !rule.cancel_on().is_empty() {
        writeln!(out, "cancel-on = {}", patterns(rule.cancel_on()))?;
    }
    for (key, ns) in [
        ("cooldown", rule.cooldown_ns()),
        ("debounce", rule.debounce_ns()),
        ("for", rule.hold_ns()),
    ] {
        if ns > 0 {
            writeln!(out, "{key} = {}", duration(ns))?;
        }
    }
    let repeat = rule.repeat();
    if repeat.count > 1 {
        let (key, ns) = match repeat.period_ns {
            0 => ("every", repeat.every_ns),
            period => ("period", period),
        };
        writeln!(
            out,
            "repeat = {{ count = {}, {key} = {} }}",
            repeat.count,
            duration(ns)
        )?;
    }
    if let Some(per) = rule.per() {
        // docs/rules.md#keyed-runs
        writeln!(out, "per = {}", expression(per, payload))?;
    }
    for input in rule
        .inputs()
        .iter()
        .filter_map(|&i| payload.inputs.get(i as usize))
    {
        write_input(out, input)?;
    }
    for step in rule.steps.iter() {
        write_step(out, "step", step, payload)?;
    }
    // docs/rules.md#finally: never durable, so `after` needs no `durable`.
    for step in rule.finally().iter() {
        write_step(out, "finally", step, payload)?;
    }
    Ok(())
}

fn write_input(out: &mut String, input: &Input) -> std::fmt::Result {
    writeln!(out, "\n[[rule.input]]")?;
    match &input.source {
        InputSource::Hash { hash, fields } => {
            writeln!(out, "hash = {}", quoted(hash))?;
            writeln!(out, "fields = {}", list(fields.iter().map(String::as_str)))?;
        }
        InputSource::Channel {
            channel,
            format,
            max_bytes,
        } => {
            writeln!(out, "channel = {}", quoted(channel))?;
            writeln!(out, "format = {}", quoted(format.as_str()))?;
            writeln!(out, "max-bytes = {max_bytes}")?;
        }
    }
    if let Some(topic) = &input.topic {
        writeln!(out, "topic = {}", quoted(topic))?;
    }
    Ok(())
}

fn write_step(out: &mut String, table: &str, step: &Step, payload: &Payload) -> std::fmt::Result {
    writeln!(out, "\n[[rule.{table}]]")?;
    writeln!(out, "do = \"{}\"", kind(&step.action))?;
    if let Some(when) = &step.when {
        writeln!(out, "when = {}", expression(when, payload))?;
    }
    if step.after_ns > 0 {
        writeln!(out, "after = {}", duration(step.after_ns))?;
        if !step.durable && table == "step" {
            writeln!(out, "durable = false")?;
        }
    }
    write_action(out, &step.action)?;
    match step.action.timeout_ns() {
        Some(ns) if ns != DEFAULT_TIMEOUT_NS => writeln!(out, "timeout = {}", duration(ns)),
        _ => Ok(()),
    }
}

/// The step's `do`.
pub fn kind(action: &Action) -> &'static str {
    match action {
        Action::Redis { .. } => "redis",
        Action::Exec { .. } => "exec",
        Action::Can(_) => "can",
        Action::Publish { .. } => "publish",
        Action::Notify(_) => "notify",
    }
}

/// What a step does, in one line (`v1.test`'s `description`): the
/// action's keys as the rule file writes them.
pub fn describe(action: &Action) -> String {
    let mut keys = String::new();
    // Writing to a String cannot fail.
    let _ = write_action(&mut keys, action);
    let keys: Vec<&str> = keys.lines().collect();
    format!("{}: {}", kind(action), keys.join(", "))
}

fn write_action(out: &mut String, action: &Action) -> std::fmt::Result {
    match action {
        Action::Redis { list, push, .. } => {
            writeln!(out, "list = {}", quoted(list))?;
            writeln!(out, "push = {}", text(push))
        }
        Action::Exec { command, .. } => writeln!(out, "command = {}", quoted(command)),
        Action::Can(frame) => write_can(out, frame),
        Action::Publish {
            channel, message, ..
        } => {
            writeln!(out, "channel = {}", quoted(channel))?;
            writeln!(out, "message = {}", text(message))
        }
        Action::Notify(notification) => write_notify(out, notification),
    }
}

fn write_can(out: &mut String, frame: &CanFrame) -> std::fmt::Result {
    writeln!(out, "iface = {}", quoted(&frame.iface))?;
    writeln!(out, "id = \"{:#x}\"", frame.id)?;
    if frame.rtr {
        writeln!(out, "rtr = true")?;
        writeln!(out, "dlc = {}", frame.dlc)
    } else if frame.data.is_empty() {
        Ok(())
    } else {
        let data: String = frame.data.iter().map(|b| format!("{b:02X}")).collect();
        writeln!(out, "data = \"{data}\"")
    }
}

fn write_notify(out: &mut String, notification: &Notification) -> std::fmt::Result {
    writeln!(out, "id = {}", quoted(&notification.id))?;
    if notification.dismiss {
        return writeln!(out, "dismiss = true");
    }
    writeln!(out, "title = {}", text(&notification.title))?;
    if !notification.body.source().is_empty() {
        writeln!(out, "body = {}", text(&notification.body))?;
    }
    writeln!(out, "severity = {}", quoted(notification.severity.as_str()))?;
    if notification.ttl_ms != DEFAULT_TTL_MS {
        let ns = u64::from(notification.ttl_ms) * 1_000_000;
        writeln!(out, "ttl = {}", duration(ns))?;
    }
    Ok(())
}

/// A value as written: a plain one had its `$${` turned into `${` by the
/// compiler, so it is escaped again; a computed one keeps its source.
fn text(value: &Text) -> String {
    match value {
        Text::Plain(plain) => quoted(&plain.replace("${", "$${")),
        Text::Computed(template) => quoted(&template.source),
    }
}

/// A `when`: the program decompiled. A program of a shape the compiler
/// does not produce cannot be written back; it becomes `false` with a
/// comment, so the definition still parses and says so.
fn expression(program: &Program, payload: &Payload) -> String {
    match decompile(program, &payload.consts, &payload.state_pairs) {
        Some(text) => quoted(&text),
        None => "\"false\" # the bundle's program does not decompile".to_string(),
    }
}

fn duration(ns: u64) -> String {
    quoted(&format_duration(i64::try_from(ns).unwrap_or(i64::MAX)))
}

fn patterns(list: &[rulecore::TopicPattern]) -> String {
    let texts: Vec<String> = list.iter().map(ToString::to_string).collect();
    self::list(texts.iter().map(String::as_str))
}

fn list<'a>(items: impl Iterator<Item = &'a str>) -> String {
    let items: Vec<String> = items.map(quoted).collect();
    format!("[{}]", items.join(", "))
}

/// A TOML string: a literal one (`'...'`) when the text allows it, which
/// reads best for expressions full of `"`; else a basic one, whose escapes
/// JSON's are a subset of.
fn quoted(text: &str) -> String {
    if !text.contains('\'') && !text.chars().any(char::is_control) {
        return format!("'{text}'");
    }
    serde_json::to_string(text).unwrap_or_else(|_| "\"\"".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};

    fn compile(dir: &Path) -> Payload {
        let report = rulec::session::Session::new(None)
            .check(dir)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(report.errors(), 0, "{}", report.summary());
        report.assemble("test")
    }

    /// A rule's dump without its first line (which names its file).
    fn dumped(rule: &Rule, payload: &Payload) -> String {
        let text = rulecore::dump::rule_text(rule, payload);
        text.split_once('\n')
            .map_or(text.clone(), |(_, rest)| rest.to_string())
    }

    /// Every shipped fixture rule, rendered alone, checks clean and
    /// compiles to the rule it came from.
    #[test]
    fn every_fixture_rule_renders_to_a_file_that_compiles_to_it() {
        let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures");
        for set in [
            "rules",
            "rules-changed",
            "rules-parked",
            "rules-winter",
            "rules-why",
        ] {
            let original = compile(&fixtures.join(set));
            assert!(!original.rules.is_empty(), "{set}");
            for rule in &original.rules {
                let toml = rule_toml(rule, &original);
                let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
                std::fs::write(dir.path().join("rule.toml"), &toml)
                    .unwrap_or_else(|e| panic!("{e}"));
                let report = rulec::session::Session::new(None)
                    .check(dir.path())
                    .unwrap_or_else(|e| panic!("{e}"));
                assert_eq!(report.errors(), 0, "{set}/{}:\n{toml}", rule.name);
                let again = report.assemble("test");
                assert_eq!(again.rules.len(), 1, "{toml}");
                assert_eq!(
                    dumped(&again.rules[0], &again),
                    dumped(rule, &original),
                    "{set}/{}:\n{toml}",
                    rule.name
                );
            }
        }
    }

    #[test]
    fn strings_are_quoted_so_toml_reads_them_back() {
        assert_eq!(quoted("a \"b\""), "'a \"b\"'");
        assert_eq!(quoted("it's"), "\"it's\"");
        assert_eq!(quoted("tab\there"), "\"tab\\there\"");
        assert_eq!(text(&Text::Plain("cost ${x}".into())), "'cost $${x}'");
    }
}

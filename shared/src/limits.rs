//! The limits the rule checker enforces, enforced again when a bundle is
//! loaded (docs/bundle.md#file-layout), so that a bundle nobody checked (a
//! forged one with a valid digest) cannot make the service loop without
//! pause or exhaust its memory: a `repeat` without a gap, durations beyond
//! the Go range, empty or oversized values, more patterns than allowed.

use crate::bundle::{Action, InputSource, Payload, Rule};

/// The most topic patterns one `on` or `cancel-on` list may hold
/// (docs/rules.md#topic-patterns): the checker reports more, the loader
/// refuses more. Real rules list a handful.
pub const MAX_PATTERNS: usize = 256;

/// The longest duration a rule file can write (Go's: `i64` nanoseconds).
const MAX_DURATION_NS: u64 = i64::MAX as u64;

/// A limit of the rule format that a bundle breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    #[error("the rule name is empty")]
    EmptyName,
    #[error("`{list}` has {found} patterns; at most {MAX_PATTERNS} are allowed")]
    TooManyPatterns { list: &'static str, found: usize },
    #[error("`repeat` has {count} passes and no gap between them")]
    RepeatWithoutGap { count: u32 },
    #[error("`repeat` sets both `every` and `period`")]
    RepeatEveryAndPeriod,
    #[error("{what} is {ns} ns, beyond the longest duration ({MAX_DURATION_NS} ns)")]
    Duration { what: String, ns: u64 },
    #[error("step {step}: `durable` without a delay")]
    DurableWithoutAfter { step: usize },
    #[error("step {step}: {reason}")]
    Action { step: usize, reason: &'static str },
    /// docs/rules.md#finally: a finally step never waits for a restart.
    #[error("finally step {step}: `durable`: a finally step is never durable")]
    DurableFinally { step: usize },
    #[error("finally step {step}: {reason}")]
    FinallyAction { step: usize, reason: &'static str },
    #[error("the state hash `{hash}` is named like an event channel (`ev:`)")]
    StateChannel { hash: String },
    #[error("input {index}: {problem}")]
    Input { index: usize, problem: String },
}

/// The largest `max-bytes` of a channel input (docs/rules.md#inputs), and
/// the default (also for `max-bytes = 0`).
pub const MAX_INPUT_BYTES: u32 = 65_536;
pub const DEFAULT_INPUT_BYTES: u32 = 4096;
/// Inputs one rule may declare, distinct inputs in a bundle, fields of one
/// hash input; the longest hash or channel name.
pub const MAX_INPUTS_PER_RULE: usize = 16;
pub const MAX_INPUTS: usize = 64;
pub const MAX_INPUT_FIELDS: usize = 64;
pub const MAX_INPUT_NAME_BYTES: usize = 128;
/// What an input topic starts with.
pub const INPUT_TOPIC_PREFIX: &str = "input.";

/// A `notify` step's `ttl` range and default (docs/rules.md#the-notify-action),
/// in milliseconds, as the dashboard takes it.
pub const MIN_NOTIFY_TTL_MS: u32 = 1_000;
pub const MAX_NOTIFY_TTL_MS: u32 = 60_000;
pub const DEFAULT_NOTIFY_TTL_MS: u32 = 10_000;

/// What is wrong with a hash, channel or field name of an input, if
/// anything (docs/rules.md#inputs): empty, longer than
/// [`MAX_INPUT_NAME_BYTES`], or holding white space, a control character
/// or a Redis glob character. `None`: the name is fine.
pub fn input_name_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("is empty")
    } else if name.len() > MAX_INPUT_NAME_BYTES {
        Some("is longer than 128 bytes")
    } else if name.chars().any(char::is_whitespace) {
        Some("holds white space")
    } else if name.chars().any(char::is_control) {
        Some("holds a control character")
    } else if name.contains(['*', '?', '[', ']', '\\']) {
        Some("holds a glob character (`*`, `?`, `[`, `]` or `\\`)")
    } else {
        None
    }
}

/// The inputs' limits, as the checker has them (docs/rules.md#inputs):
/// names, topics, sizes and counts; a rule's indices in range.
pub fn check_inputs(payload: &Payload) -> Result<(), LimitError> {
    let fail = |index: usize, problem: String| Err(LimitError::Input { index, problem });
    if payload.inputs.len() > MAX_INPUTS {
        return fail(
            MAX_INPUTS,
            format!("{} inputs; at most {MAX_INPUTS}", payload.inputs.len()),
        );
    }
    for (index, input) in payload.inputs.iter().enumerate() {
        let names: Vec<&str> = match &input.source {
            InputSource::Hash { hash, fields } => {
                if fields.is_empty() || fields.len() > MAX_INPUT_FIELDS {
                    return fail(index, format!("{} fields", fields.len()));
                }
                std::iter::once(hash.as_str())
                    .chain(fields.iter().map(String::as_str))
                    .collect()
            }
            InputSource::Channel {
                channel, max_bytes, ..
            } => {
                if *max_bytes == 0 || *max_bytes > MAX_INPUT_BYTES {
                    return fail(index, format!("max-bytes {max_bytes}"));
                }
                if channel.starts_with("ev:") {
                    return fail(index, format!("channel `{channel}` is under `ev:`"));
                }
                if input.topic.is_none() {
                    return fail(index, "a channel input without a topic".to_string());
                }
                vec![channel.as_str()]
            }
        };
        if let Some((name, problem)) = names
            .iter()
            .find_map(|name| input_name_problem(name).map(|p| (name, p)))
        {
            return fail(index, format!("the name {name:?} {problem}"));
        }
        if let Some(topic) = &input.topic {
            let rest = topic.strip_prefix(INPUT_TOPIC_PREFIX).unwrap_or_default();
            if rest.is_empty() || topic.contains('*') || topic.contains(char::is_whitespace) {
                return fail(index, format!("topic {topic:?} is not `input.` and a name"));
            }
        }
    }
    for rule in &payload.rules {
        if rule.inputs().len() > MAX_INPUTS_PER_RULE {
            return fail(
                0,
                format!("rule `{}` has {} inputs", rule.name, rule.inputs().len()),
            );
        }
        if let Some(&bad) = rule
            .inputs()
            .iter()
            .find(|&&i| usize::try_from(i).map_or(true, |i| i >= payload.inputs.len()))
        {
            return fail(
                usize::try_from(bad).unwrap_or(usize::MAX),
                format!("rule `{}` names an input the bundle lacks", rule.name),
            );
        }
    }
    Ok(())
}

/// The state pairs' limits: no hash named like an event channel
/// (docs/service.md#subscriptions).
pub fn check_state_pairs(payload: &Payload) -> Result<(), LimitError> {
    match payload
        .state_pairs
        .iter()
        .find(|pair| pair.hash.starts_with("ev:"))
    {
        Some(pair) => Err(LimitError::StateChannel {
            hash: pair.hash.clone(),
        }),
        None => Ok(()),
    }
}

/// One rule's limits, as the checker has them (docs/rules.md#rule-keys,
/// docs/rules.md#step-keys).
pub fn check_rule(rule: &Rule) -> Result<(), LimitError> {
    if rule.name.trim().is_empty() {
        return Err(LimitError::EmptyName);
    }
    for (list, patterns) in [("on", &*rule.on), ("cancel-on", rule.cancel_on())] {
        if patterns.len() > MAX_PATTERNS {
            return Err(LimitError::TooManyPatterns {
                list,
                found: patterns.len(),
            });
        }
    }
    let repeat = rule.repeat();
    if repeat.every_ns > 0 && repeat.period_ns > 0 {
        return Err(LimitError::RepeatEveryAndPeriod);
    }
    if repeat.count > 1 && repeat.every_ns == 0 && repeat.period_ns == 0 {
        return Err(LimitError::RepeatWithoutGap {
            count: repeat.count,
        });
    }
    let durations = [
        ("`cooldown`", rule.cooldown_ns()),
        ("`debounce`", rule.debounce_ns()),
        ("`repeat.every`", rule.repeat().every_ns),
        ("`repeat.period`", rule.repeat().period_ns),
        ("`for`", rule.hold_ns()),
    ];
    let steps = rule.steps.iter().enumerate();
    let finally = rule.finally().iter().enumerate();
    let step_durations = steps
        .clone()
        .map(|(index, step)| (format!("step {index}"), step));
    let finally_durations = finally
        .clone()
        .map(|(index, step)| (format!("finally step {index}"), step));
    let step_durations = step_durations
        .chain(finally_durations)
        .flat_map(|(place, step)| {
            let timeout = step.action.timeout_ns();
            [
                Some((format!("{place} `after`"), step.after_ns)),
                timeout.map(|ns| (format!("{place} `timeout`"), ns)),
            ]
            .into_iter()
            .flatten()
        });
    let all = durations
        .into_iter()
        .map(|(what, ns)| (what.to_string(), ns))
        .chain(step_durations);
    for (what, ns) in all {
        if ns > MAX_DURATION_NS {
            return Err(LimitError::Duration { what, ns });
        }
    }
    for (step, spec) in steps {
        if spec.durable && spec.after_ns == 0 {
            return Err(LimitError::DurableWithoutAfter { step });
        }
        if let Some(reason) = action_problem(&spec.action) {
            return Err(LimitError::Action { step, reason });
        }
    }
    for (step, spec) in finally {
        if spec.durable {
            return Err(LimitError::DurableFinally { step });
        }
        if let Some(reason) = action_problem(&spec.action) {
            return Err(LimitError::FinallyAction { step, reason });
        }
    }
    Ok(())
}

/// What the checker would say about an action's values, if anything (CAN
/// frames are checked with the payload's other structural facts).
fn action_problem(action: &Action) -> Option<&'static str> {
    let bad_char = |c: char| c.is_whitespace() || c == '\0';
    match action {
        Action::Redis { list, push, .. } if list.is_empty() || push.source().is_empty() => {
            Some("an empty redis `list` or `push`")
        }
        Action::Redis { timeout_ns: 0, .. } => Some("a redis `timeout` of zero"),
        Action::Publish { channel, .. } if channel.is_empty() || channel.starts_with("ev:") => {
            Some("a publish `channel` that is empty or under `ev:`")
        }
        Action::Publish { timeout_ns: 0, .. } => Some("a publish `timeout` of zero"),
        Action::Notify(n) if n.timeout_ns == 0 => Some("a notify `timeout` of zero"),
        Action::Notify(n) if !(MIN_NOTIFY_TTL_MS..=MAX_NOTIFY_TTL_MS).contains(&n.ttl_ms) => {
            Some("a notify `ttl` outside 1s to 60s")
        }
        Action::Notify(n) if n.id.is_empty() => Some("a notify `id` that is empty"),
        Action::Exec { command, .. } if command.is_empty() || command.contains(bad_char) => {
            Some("an exec `command` that is empty or has white space or NUL")
        }
        Action::Exec { timeout_ns: 0, .. } => Some("an exec `timeout` of zero"),
        Action::Can(frame)
            if frame.iface.is_empty()
                || frame.iface.len() > 15
                || frame.iface.contains(|c: char| bad_char(c) || c == '/') =>
        {
            Some(
                "a CAN `iface` that is empty, longer than 15 bytes, or has white space, `/` or NUL",
            )
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bundle::{Repeat, Rule, StatePair, Step};
    use crate::codec::{decode, encode, BundleError};
    use crate::topic::TopicPattern;
    use crate::verify::PayloadError;
    use std::sync::Arc;

    fn valid() -> Payload {
        let step = Step::new(Action::redis("scooter:horn", "on"), 0);
        let on = vec![TopicPattern::parse("alarm.triggered").unwrap()];
        Payload::new(
            "test",
            vec![Rule::new("r", "a.toml", on, vec![step])],
            vec![],
            vec![],
        )
    }

    /// A forged payload, checksummed as `rulec` would: what the loader says.
    fn load(payload: &Payload) -> Result<(), LimitError> {
        match decode(&encode(payload).unwrap()) {
            Ok(_) => Ok(()),
            Err(BundleError::Invalid(PayloadError::Limit { error, .. }))
            | Err(BundleError::Invalid(PayloadError::StateChannel(error)))
            | Err(BundleError::Invalid(PayloadError::Input(error))) => Err(error),
            Err(other) => panic!("{other}"),
        }
    }

    fn with_input(source: InputSource, topic: Option<&str>) -> Payload {
        let mut payload = valid();
        payload.inputs = vec![crate::bundle::Input {
            source,
            topic: topic.map(str::to_string),
        }];
        payload.rules[0].options_mut().inputs = vec![0].into();
        payload
    }

    fn channel(name: &str, max_bytes: u32) -> InputSource {
        InputSource::Channel {
            channel: name.into(),
            format: crate::bundle::PayloadFormat::Json,
            max_bytes,
        }
    }

    #[test]
    fn forged_inputs_are_refused_at_load() {
        let hash = |hash: &str, fields: usize| InputSource::Hash {
            hash: hash.into(),
            fields: (0..fields).map(|i| format!("f{i}")).collect(),
        };
        assert_eq!(load(&with_input(hash("vehicle", 1), None)), Ok(()));
        assert_eq!(
            load(&with_input(channel("a:b", 4096), Some("input.x"))),
            Ok(())
        );
        let refused = [
            with_input(hash("vehicle", 0), Some("input.x")),
            with_input(hash("vehicle", MAX_INPUT_FIELDS + 1), Some("input.x")),
            with_input(hash("vehicle*", 1), Some("input.x")),
            with_input(hash(&"h".repeat(MAX_INPUT_NAME_BYTES + 1), 1), None),
            with_input(hash("vehicle", 1), Some("vehicle.x")),
            with_input(hash("vehicle", 1), Some("input.")),
            with_input(channel("ev:alarm.triggered", 4096), Some("input.x")),
            with_input(channel("a:b", 0), Some("input.x")),
            with_input(channel("a:b", MAX_INPUT_BYTES + 1), Some("input.x")),
            with_input(channel("a b", 4096), Some("input.x")),
            with_input(channel("a:b", 4096), None),
        ];
        for payload in &refused {
            assert!(
                matches!(load(payload), Err(LimitError::Input { .. })),
                "{:?}",
                payload.inputs
            );
        }
        let mut out_of_range = with_input(hash("vehicle", 1), None);
        out_of_range.rules[0].options_mut().inputs = vec![1].into();
        assert!(matches!(load(&out_of_range), Err(LimitError::Input { .. })));
        let mut too_many = with_input(hash("vehicle", 1), None);
        too_many.inputs = (0..=MAX_INPUTS)
            .map(|i| crate::bundle::Input {
                source: hash(&format!("h{i}"), 1),
                topic: None,
            })
            .collect();
        assert!(matches!(load(&too_many), Err(LimitError::Input { .. })));
    }

    #[test]
    fn input_names_are_exact() {
        assert_eq!(input_name_problem("accessory:report"), None);
        for bad in ["", "a b", "a\u{7}b", "a*", "a?", "a[b]", "a\\b"] {
            assert!(input_name_problem(bad).is_some(), "{bad:?}");
        }
        assert!(input_name_problem(&"x".repeat(129)).is_some());
        assert_eq!(input_name_problem(&"x".repeat(128)), None);
    }

    #[test]
    fn forged_bundles_over_the_checker_limits_are_refused_at_load() {
        assert_eq!(load(&valid()), Ok(()));
        let mut endless = valid();
        endless.rules[0].options_mut().repeat = Repeat {
            count: u32::MAX,
            every_ns: 0,
            period_ns: 0,
        };
        assert_eq!(
            load(&endless),
            Err(LimitError::RepeatWithoutGap { count: u32::MAX })
        );
        let mut far = valid();
        Arc::make_mut(&mut far.rules[0].steps)[0].after_ns = u64::MAX;
        Arc::make_mut(&mut far.rules[0].steps)[0].durable = true;
        assert!(matches!(load(&far), Err(LimitError::Duration { .. })));
        let mut every = valid();
        every.rules[0].options_mut().repeat = Repeat {
            count: 2,
            every_ns: u64::MAX,
            period_ns: 0,
        };
        assert!(matches!(load(&every), Err(LimitError::Duration { .. })));
        let mut many = valid();
        many.rules[0].options_mut().cancel_on = (0..=MAX_PATTERNS)
            .map(|i| TopicPattern::parse(&format!("t{i}")).unwrap())
            .collect();
        assert_eq!(
            load(&many),
            Err(LimitError::TooManyPatterns {
                list: "cancel-on",
                found: MAX_PATTERNS + 1
            })
        );
        let mut channel = valid();
        channel.state_pairs = vec![StatePair {
            hash: "ev:alarm.triggered".into(),
            field: "x".into(),
        }];
        assert!(matches!(
            load(&channel),
            Err(LimitError::StateChannel { .. })
        ));
        let mut shell = valid();
        Arc::make_mut(&mut shell.rules[0].steps)[0] = Step::new(
            Action::Exec {
                command: "/bin/sh -c reboot".into(),
                timeout_ns: 1,
            },
            0,
        );
        assert!(matches!(
            load(&shell),
            Err(LimitError::Action { step: 0, .. })
        ));
        let mut durable = valid();
        Arc::make_mut(&mut durable.rules[0].steps)[0].durable = true;
        assert_eq!(
            load(&durable),
            Err(LimitError::DurableWithoutAfter { step: 0 })
        );
        let mut nameless = valid();
        nameless.rules[0].name = " ".into();
        assert_eq!(load(&nameless), Err(LimitError::EmptyName));
    }

    #[test]
    fn finally_steps_are_held_to_the_step_limits_and_never_durable() {
        let with_finally = |step: Step| {
            let mut payload = valid();
            payload.rules[0].options_mut().finally = vec![step].into();
            payload
        };
        let off = || Step::new(Action::redis("scooter:blinker", "off"), 0);
        assert_eq!(load(&with_finally(off())), Ok(()));
        // `Step::new` makes a waiting step durable; a finally step never is.
        let waiting = Step::new(Action::redis("scooter:blinker", "off"), 1_000_000_000);
        assert_eq!(
            load(&with_finally(waiting.clone())),
            Err(LimitError::DurableFinally { step: 0 })
        );
        assert_eq!(
            LimitError::DurableFinally { step: 0 }.to_string(),
            "finally step 0: `durable`: a finally step is never durable"
        );
        let not_durable = Step {
            durable: false,
            ..waiting
        };
        assert_eq!(load(&with_finally(not_durable)), Ok(()));
        let far = Step {
            after_ns: u64::MAX,
            durable: false,
            ..off()
        };
        assert!(matches!(
            load(&with_finally(far)),
            Err(LimitError::Duration { what, .. }) if what == "finally step 0 `after`"
        ));
        let empty = Step::new(Action::redis("scooter:blinker", ""), 0);
        assert!(matches!(
            load(&with_finally(empty)),
            Err(LimitError::FinallyAction { step: 0, .. })
        ));
    }
}

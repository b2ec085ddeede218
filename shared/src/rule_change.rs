//! Whether a rule changed between two bundles, and in which keys: the one
//! definition `rulec diff` (docs/rulec.md#rulec-diff) and a live reload's
//! `changed` (docs/semantics.md#live-reload) share.
//!
//! A rule changed when a key of its dump differs (`rulec dump`, the rule's
//! part of [`crate::dump::rule_text`]): its policies, its `when` (decompiled
//! and disassembled with its constants and `state()` pairs resolved, so a
//! constant that changed is a change, and a constant that only moved in
//! the bundle's pool is not), each step. Fingerprint lines are not keys:
//! they follow from the steps.

use crate::bundle::{Payload, Rule, RuleOptions, Step};
use crate::bytecode::{Op, Program};
use crate::dump::rule_text;

/// A key whose value differs, as `rulec dump` prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyChange {
    /// `cooldown`, or `step 1 after`.
    pub key: String,
    pub old: String,
    pub new: String,
}

/// Compares the rules of two bundles.
#[derive(Debug, Clone, Copy)]
pub struct Comparison<'a> {
    old: &'a Payload,
    new: &'a Payload,
    /// Both bundles' pools (constants, `state()` pairs, inputs) are
    /// equal: equal rules then dump alike, and need no dump.
    same_pools: bool,
}

impl<'a> Comparison<'a> {
    pub fn new(old: &'a Payload, new: &'a Payload) -> Self {
        let same_pools = old.consts == new.consts
            && old.state_pairs == new.state_pairs
            && old.inputs == new.inputs;
        Self {
            old,
            new,
            same_pools,
        }
    }

    /// Whether `old` (a rule of the old bundle) and `new` (of the new one)
    /// differ in any key: [`Comparison::key_changes`] is not empty.
    pub fn changed(&self, old: &Rule, new: &Rule) -> bool {
        if (self.same_pools && old == new) || self.same_resolved(old, new) {
            // The dump reads nothing else: it would be the same text.
            return false;
        }
        // The dump decides (a computed value whose constant moved, say):
        // slower, and only for rules that look changed.
        !self.key_changes(old, new).is_empty()
    }

    /// Equal rules, their pool indices resolved (a `when` reads the same
    /// constants and `state()` pairs, the same inputs): then they dump
    /// alike. Every field is named, so a new one cannot be missed.
    fn same_resolved(&self, old: &Rule, new: &Rule) -> bool {
        let Rule {
            name,
            source: _,
            enabled,
            concurrency,
            on,
            when,
            steps,
            options,
        } = old;
        *name == new.name
            && *enabled == new.enabled
            && *concurrency == new.concurrency
            && *on == new.on
            && self.same_when(when.as_deref(), new.when.as_deref())
            && self.same_steps(steps, &new.steps)
            && self.same_options(options.as_deref(), new.options.as_deref())
    }

    fn same_options(&self, old: Option<&RuleOptions>, new: Option<&RuleOptions>) -> bool {
        let (Some(old), Some(new)) = (old, new) else {
            return old.is_none() && new.is_none();
        };
        let RuleOptions {
            cancel_on,
            cooldown_ns,
            debounce_ns,
            hold_ns,
            repeat,
            inputs,
            finally,
            protected,
            trip,
            per,
            schedule,
        } = old;
        let input = |payload: &'a Payload, i: &u32| payload.inputs.get(*i as usize);
        *cancel_on == new.cancel_on
            && *cooldown_ns == new.cooldown_ns
            && *debounce_ns == new.debounce_ns
            && *hold_ns == new.hold_ns
            && *repeat == new.repeat
            && inputs.len() == new.inputs.len()
            && inputs
                .iter()
                .zip(new.inputs.iter())
                .all(|(a, b)| input(self.old, a) == input(self.new, b))
            && self.same_steps(finally, &new.finally)
            && *protected == new.protected
            && *trip == new.trip
            && self.same_when(per.as_ref(), new.per.as_ref())
            && *schedule == new.schedule
    }

    fn same_steps(&self, old: &[Step], new: &[Step]) -> bool {
        old.len() == new.len()
            && old.iter().zip(new).all(|(old, new)| {
                let Step {
                    action,
                    when,
                    after_ns,
                    durable,
                    fingerprint: _,
                } = old;
                // A computed value's programs index the pools too: equal
                // only with the same pools (else the dump decides).
                let computed = action.texts().any(crate::template::Text::is_computed);
                *action == new.action
                    && (self.same_pools || !computed)
                    && self.same_when(when.as_ref(), new.when.as_ref())
                    && *after_ns == new.after_ns
                    && *durable == new.durable
            })
    }

    /// The same program, each constant and `state()` pair compared by
    /// what it is rather than where the pool keeps it.
    fn same_when(&self, old: Option<&Program>, new: Option<&Program>) -> bool {
        let (Some(old), Some(new)) = (old, new) else {
            return old.is_none() && new.is_none();
        };
        let constant = |payload: &'a Payload, i: u32| payload.consts.get(i as usize);
        let pair = |payload: &'a Payload, i: u32| payload.state_pairs.get(i as usize);
        old.ops.len() == new.ops.len()
            && old.ops.iter().zip(&new.ops).all(|(a, b)| match (*a, *b) {
                (Op::Const(i), Op::Const(j)) | (Op::Data(i), Op::Data(j)) => {
                    constant(self.old, i) == constant(self.new, j)
                }
                (Op::State(i), Op::State(j)) => pair(self.old, i) == pair(self.new, j),
                (a, b) => a == b,
            })
    }

    /// Every key whose value differs, the old rule's keys first (in order),
    /// then the keys only the new rule has.
    pub fn key_changes(&self, old: &Rule, new: &Rule) -> Vec<KeyChange> {
        let (before, after) = (keyed(old, self.old), keyed(new, self.new));
        let mut changes = Vec::new();
        for (key, value) in &before {
            let now = after
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str());
            if now != Some(value.as_str()) && !key.ends_with("fingerprint") {
                changes.push(KeyChange {
                    key: key.clone(),
                    old: value.clone(),
                    new: now.unwrap_or("(absent)").to_string(),
                });
            }
        }
        for (key, value) in &after {
            if !before.iter().any(|(k, _)| k == key) && !key.ends_with("fingerprint") {
                changes.push(KeyChange {
                    key: key.clone(),
                    old: "(absent)".to_string(),
                    new: value.clone(),
                });
            }
        }
        changes
    }
}

/// A rule's dump, key by key: `(key, value)` in order, a step's keys
/// prefixed `step N ` (a finally step's `finally N `), a `when`'s
/// disassembly part of its value.
fn keyed(rule: &Rule, payload: &Payload) -> Vec<(String, String)> {
    let mut keys: Vec<(String, String)> = Vec::new();
    let mut step = String::new();
    for line in rule_text(rule, payload).lines().skip(1) {
        let depth = line.len() - line.trim_start().len();
        let text = line.trim();
        // `step N`, or a finally step's `finally N` (docs/rules.md#finally).
        if depth == 2 && (text.starts_with("step ") || text.starts_with("finally ")) {
            step = format!("{text} ");
            continue;
        }
        let own = if step.is_empty() { 2 } else { 4 };
        match keys.last_mut() {
            Some((_, value)) if depth > own => {
                value.push('\n');
                value.push_str(text);
            }
            _ => {
                let (key, value) = text.split_once(' ').unwrap_or((text, ""));
                keys.push((format!("{step}{key}"), value.trim().to_string()));
            }
        }
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bundle::Action;
    use crate::bytecode::Const;
    use crate::TopicPattern;

    /// `state(vehicle, state) == consts[index]`.
    fn rule_when(name: &str, index: u32) -> Rule {
        let on = vec![TopicPattern::parse("a.b").expect("pattern")];
        let step = Step::new(Action::redis("l", "x"), 0);
        let mut rule = Rule::new(name, "t.toml", on, vec![step]);
        rule.when = Some(Box::new(Program {
            ops: vec![Op::State(0), Op::Const(index), Op::Eq],
        }));
        rule
    }

    fn bundle(rules: Vec<Rule>, consts: &[&str]) -> Payload {
        let pairs = vec![crate::bundle::StatePair {
            hash: "vehicle".into(),
            field: "state".into(),
        }];
        let consts = consts.iter().map(|c| Const::Str((*c).into())).collect();
        Payload::new("t", rules, pairs, consts)
    }

    #[test]
    fn a_constant_that_changed_is_a_change_one_that_moved_is_not() {
        let old = bundle(vec![rule_when("a", 0), rule_when("b", 1)], &["parked", "x"]);
        // Same ops, other constant for `a`; `b`'s constant moved to 0.
        let new = bundle(
            vec![rule_when("a", 1), rule_when("b", 0)],
            &["x", "stand-by"],
        );
        let compare = Comparison::new(&old, &new);
        assert!(compare.changed(&old.rules[0], &new.rules[0]));
        assert!(!compare.changed(&old.rules[1], &new.rules[1]));
        let changes = compare.key_changes(&old.rules[0], &new.rules[0]);
        assert_eq!(changes.len(), 1, "{changes:?}");
        assert_eq!(changes[0].key, "when");
        let same = Comparison::new(&old, &old);
        assert!(!same.changed(&old.rules[0], &old.rules[0]));
    }
}

//! The heap a bundle costs once loaded (docs/bundle.md#building): the
//! decoded payload and the engine's tables built from it, before any event
//! arrives. `rulec build` prints it and warns over a budget, so that a rule
//! set too large for the service's memory is found at build time, not on
//! the scooter. A model of this crate's and the decoder's allocations, not
//! a measurement; a test keeps it within 20 % of the measured heap.

use super::key_table::KeyTable;
use super::RuleState;
use rulecore::bundle::{Action, Fingerprint, Notification, Payload, Rule, RuleOptions, Step, Text};
use rulecore::bytecode::{Const, Op, Program};
use rulecore::template::{Part, Template};
use rulecore::topic::TopicPattern;
use std::collections::{HashMap, HashSet};
use std::mem::{size_of, size_of_val};

/// What the decoder reserves for a sequence of `len` values: all of it up
/// to 1 MiB (serde's cautious pre-allocation), then doubling from there.
fn decoded_vec<T>(len: usize) -> usize {
    let first = (1 << 20) / size_of::<T>().max(1);
    let mut capacity = len.min(first);
    while capacity < len {
        capacity *= 2;
    }
    capacity * size_of::<T>()
}

fn program(program: Option<&Program>) -> usize {
    program.map_or(0, |p| decoded_vec::<Op>(p.ops.len()))
}

fn pattern(pattern: &TopicPattern) -> usize {
    match pattern {
        TopicPattern::Any => 0,
        TopicPattern::Prefix(text) | TopicPattern::Exact(text) => text.len(),
    }
}

fn action(action: &Action) -> usize {
    let own = match action {
        Action::Redis { list, .. } => list.len(),
        Action::Exec { command, .. } => command.len(),
        Action::Can(frame) => frame.iface.len() + frame.data.len(),
        Action::Publish { channel, .. } => channel.len(),
        Action::Notify(notification) => size_of::<Notification>() + notification.id.len(),
    };
    own + action.texts().map(text).sum::<usize>()
}

/// A value's heap: the plain text, or the template with its parts.
fn text(text: &Text) -> usize {
    match text {
        Text::Plain(plain) => plain.len(),
        Text::Computed(template) => {
            size_of::<Template>()
                + template.source.len()
                + decoded_vec::<Part>(template.parts.len())
                + template
                    .parts
                    .iter()
                    .map(|part| match part {
                        Part::Literal(literal) => literal.len(),
                        Part::Expr(expr) => program(Some(expr)),
                    })
                    .sum::<usize>()
        }
    }
}

/// An `Arc`'s two counts.
const ARC_COUNTS: usize = 2 * size_of::<usize>();

/// The decoder keeps one of each distinct step list and one of
/// each distinct action (rulecore::payload_decode): this counts each once.
#[derive(Default)]
struct SharedSteps<'a> {
    lists: HashSet<Vec<Fingerprint>>,
    actions: HashSet<&'a Action>,
}

impl<'a> SharedSteps<'a> {
    fn steps(&mut self, steps: &'a [Step]) -> usize {
        let list = steps.iter().map(|step| step.fingerprint).collect();
        if !self.lists.insert(list) {
            return 0;
        }
        ARC_COUNTS + size_of_val(steps) + steps.iter().map(|step| self.step(step)).sum::<usize>()
    }

    fn step(&mut self, step: &'a Step) -> usize {
        let action_bytes = if self.actions.insert(&step.action) {
            ARC_COUNTS + size_of::<Action>() + action(&step.action)
        } else {
            0
        };
        action_bytes + program(step.when.as_ref())
    }
}

fn rule<'a>(rule: &'a Rule, shared: &mut SharedSteps<'a>) -> usize {
    let patterns = |list: &[TopicPattern]| {
        decoded_vec::<TopicPattern>(list.len()) + list.iter().map(pattern).sum::<usize>()
    };
    let options = rule.options.as_ref().map_or(0, |options| {
        size_of::<RuleOptions>()
            + patterns(&options.cancel_on)
            + size_of_val(&*options.inputs)
            + shared.steps(&options.finally)
    });
    rule.name.len()
        + patterns(&rule.on)
        + rule
            .when
            .as_ref()
            .map_or(0, |when| size_of::<Program>() + program(Some(when)))
        + options
        + shared.steps(&rule.steps)
}

fn constant(constant: &Const) -> usize {
    match constant {
        Const::Str(text) => text.len(),
        Const::Path(parts) => {
            decoded_vec::<String>(parts.len()) + parts.iter().map(String::len).sum::<usize>()
        }
        _ => 0,
    }
}

/// The decoded payload's heap.
fn payload(payload: &Payload) -> usize {
    size_of::<Payload>() + 2 * size_of::<usize>() // in its `Arc`
        + payload.compiler_version.len()
        // Each rule file's name once, in an `Arc` its rules share.
        + payload
            .source_table()
            .0
            .iter()
            .map(|file| 2 * size_of::<usize>() + file.len())
            .sum::<usize>()
        // Reserved at its exact length (rulecore::payload_decode).
        + payload.rules.len() * size_of::<Rule>()
        + {
            let mut shared = SharedSteps::default();
            payload.rules.iter().map(|r| rule(r, &mut shared)).sum::<usize>()
        }
        + decoded_vec::<rulecore::bundle::StatePair>(payload.state_pairs.len())
        + payload
            .state_pairs
            .iter()
            .map(|p| p.hash.len() + p.field.len())
            .sum::<usize>()
        + decoded_vec::<Const>(payload.consts.len())
        + payload.consts.iter().map(constant).sum::<usize>()
}

/// A [`KeyTable`] of `keys` (each key's text, and how many rules list it).
fn index_map(keys: &HashMap<&str, usize>) -> usize {
    let text = keys.keys().map(|key| key.len()).sum();
    // One rule inline; more in a list of two, then four, then doubling.
    let lists: usize = keys
        .values()
        .map(|&n| match n {
            1 => 0,
            2 => 2,
            _ => n.max(4).next_power_of_two(),
        })
        .sum();
    let list_count = keys.values().filter(|&&n| n > 1).count();
    KeyTable::heap(keys.len(), text, lists, list_count)
}

/// The engine's own tables for `payload`: a state per rule, the topic
/// indexes of the enabled rules, the state shadow.
fn engine(payload: &Payload) -> usize {
    // A rule's name is made as a shared string only once it fires; steps
    // (actions, fingerprints) are read from the payload, not copied.
    let mut total = payload.rules.len() * size_of::<RuleState>()
        + payload.state_pairs.len() * size_of::<String>();
    let on: fn(&Rule) -> &[TopicPattern] = |r| &r.on;
    let cancel_on: fn(&Rule) -> &[TopicPattern] = |r| r.cancel_on();
    for list in [on, cancel_on] {
        let (mut exact, mut prefix) = (HashMap::new(), HashMap::new());
        let mut any = 0usize;
        for rule in payload.rules.iter().filter(|r| r.enabled) {
            // A rule counts once per key (the index skips a repeat).
            let mut seen = HashSet::new();
            for p in list(rule).iter().filter(|p| seen.insert(*p)) {
                match p {
                    TopicPattern::Any => any += 1,
                    TopicPattern::Prefix(text) => *prefix.entry(&**text).or_insert(0) += 1,
                    TopicPattern::Exact(text) => *exact.entry(&**text).or_insert(0) += 1,
                }
            }
        }
        total += index_map(&exact) + index_map(&prefix);
        total += any * size_of::<u32>();
    }
    total + super::when_plans::WhenPlans::heap(payload)
}

/// The heap a bundle may take in `ruled` (docs/bundle.md#building): a
/// third of the service's 48 MB, leaving the rest to runs, queued jobs
/// and the runtime itself. `rulec build` warns over it; a reload whose two
/// bundles (both held during the swap) would exceed it is refused
/// (docs/service.md#live-reload).
pub const MEMORY_BUDGET: usize = 16 << 20;

/// `1.2 MiB`, `812 KiB`: a heap figure as `rulec build` and `ruled` print it.
pub fn mebibytes(bytes: usize) -> String {
    if bytes < 1 << 20 {
        format!("{} KiB", bytes.div_ceil(1024))
    } else if bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
    }
}

/// The estimated heap, in bytes, of `payload` loaded and the engine built
/// from it, with no run live yet.
pub fn estimated_heap(payload_: &Payload) -> usize {
    payload(payload_) + engine(payload_) + profile(payload_)
}

/// The bus profile decoded (docs/sources.md), and what the engine keeps
/// for it: a watched pair, its value and presence per field, and the
/// lookups of the live sources.
fn profile(payload: &Payload) -> usize {
    use rulecore::profile::{DataSpec, Emit, Origin, Poll, Source};
    use rulecore::value_pattern::{Part, ValuePattern};
    let Some(profile) = &payload.profile else {
        return 0;
    };
    let patterns = |list: &[ValuePattern]| {
        decoded_vec::<ValuePattern>(list.len())
            + list
                .iter()
                .flat_map(ValuePattern::parts)
                .map(|part| {
                    size_of::<Part>()
                        + match part {
                            Part::Lit(text) => text.len(),
                            _ => 0,
                        }
                })
                .sum::<usize>()
    };
    let emit = |emit: &Emit| {
        emit.topic.len()
            + patterns(&emit.from)
            + patterns(&emit.to)
            + patterns(&emit.payload)
            + program(emit.when.as_ref())
            + decoded_vec::<(String, DataSpec)>(emit.data.len())
            + emit
                .data
                .iter()
                .map(|(key, spec)| {
                    key.len()
                        + match spec {
                            DataSpec::Str(text) | DataSpec::Field(text) => text.len(),
                            DataSpec::Expr(program) => decoded_vec::<Op>(program.ops.len()),
                            _ => 0,
                        }
                })
                .sum::<usize>()
    };
    let source = |source: &Source| {
        let origin = match &source.origin {
            Origin::Field { hash, field, read } => {
                hash.len()
                    + field.len()
                    + decoded_vec::<String>(read.len())
                    + read.iter().map(String::len).sum::<usize>()
            }
            Origin::Channel { channel } => channel.len(),
        };
        origin
            + decoded_vec::<Emit>(source.emits.len())
            + source.emits.iter().map(emit).sum::<usize>()
    };
    let pairs = super::derive::profile_pairs(payload);
    profile.name.len()
        + profile.digest.len()
        + decoded_vec::<Source>(profile.sources.len())
        + profile.sources.iter().map(source).sum::<usize>()
        + decoded_vec::<Poll>(profile.polls.len())
        + profile
            .polls
            .iter()
            .map(|poll| poll.hash.len() + poll.fields.iter().map(String::len).sum::<usize>())
            .sum::<usize>()
        // Per field: its watched pair, its value and presence, and its
        // place in the lookups.
        + pairs
            .iter()
            .map(|pair| {
                size_of::<rulecore::bundle::StatePair>() + pair.hash.len() + pair.field.len()
                    + size_of::<String>() + 1 + 4 * size_of::<usize>()
            })
            .sum::<usize>()
}

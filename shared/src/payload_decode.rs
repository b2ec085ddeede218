//! Decoding a bundle's payload (docs/bundle.md#the-loaders-memory): the
//! rule files read once into shared names, equal step lists and equal
//! actions shared (`Shared`), and the rules vector reserved once, at the
//! exact length the payload declares, and only when that many rules fit in
//! the bytes left.
//!
//! serde's own `Vec` decoding trusts a declared length only up to 1 MiB
//! of elements and grows by doubling past it: for 10,000 rules a vector of
//! 19,416 (twice the heap they need, and a copy at each step), for 100,000
//! rules 155,328. A declared length is a claim of a file nobody may have
//! checked, so it is believed only as far as the bytes can back it: each
//! rule takes at least [`MIN_RULE_BYTES`] of payload.

use crate::bundle::{Action, Input, Payload, Rule, SourceRun, StatePair, Step};
use crate::bytecode::Const;
use crate::envelope::Envelope;
use crate::profile::Profile;
use serde::de::{DeserializeSeed, Deserializer, Error, SeqAccess, Visitor};
use std::cell::Cell;
use std::collections::HashSet;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// The fewest payload bytes a rule can take: one byte for each of its
/// name, `enabled`, concurrency, `on`, `when`, steps and options.
pub const MIN_RULE_BYTES: usize = 7;

/// Why a payload does not decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("it declares more rules than its {bytes} bytes can hold (at most {most})")]
    TooManyRules { bytes: usize, most: usize },
    #[error("it names the files of {named} rules, but holds {rules}")]
    SourceCount { named: u64, rules: usize },
    #[error("rule {rule} names file {index} of a table of {files}")]
    SourceIndex {
        rule: usize,
        index: usize,
        files: usize,
    },
}

/// Why a payload does not decode.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("{0}")]
    Refused(Refusal),
    #[error("{0}")]
    Postcard(#[from] postcard::Error),
}

/// Decodes a [`Payload`] from `body`, its whole postcard encoding;
/// returns it with the bytes after it.
pub fn decode_payload(body: &[u8]) -> Result<(Payload, &[u8]), DecodeError> {
    let mut deserializer = postcard::Deserializer::from_bytes(body);
    // postcard keeps no message of a custom error: the refusal is noted here.
    let refusal = Cell::new(None);
    let seed = PayloadSeed {
        bytes: body.len(),
        refusal: &refusal,
    };
    match seed.deserialize(&mut deserializer) {
        Ok(payload) => Ok((payload, deserializer.finalize()?)),
        Err(error) => Err(match refusal.get() {
            Some(refusal) => DecodeError::Refused(refusal),
            None => error.into(),
        }),
    }
}

/// The payload's fields in their encoded order
/// ([`crate::bundle::PayloadWire`]).
struct PayloadSeed<'a> {
    /// The payload's length.
    bytes: usize,
    refusal: &'a Cell<Option<Refusal>>,
}

impl PayloadSeed<'_> {
    fn refuse<E: Error>(&self, refusal: Refusal) -> E {
        self.refusal.set(Some(refusal));
        E::custom(refusal)
    }
}

const FIELDS: [&str; 9] = [
    "compiler_version",
    "sources",
    "source_runs",
    "rules",
    "state_pairs",
    "consts",
    "inputs",
    "profile",
    "envelope",
];

impl<'de> DeserializeSeed<'de> for PayloadSeed<'_> {
    type Value = Payload;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Payload, D::Error> {
        deserializer.deserialize_struct("Payload", &FIELDS, self)
    }
}

impl<'de> Visitor<'de> for PayloadSeed<'_> {
    type Value = Payload;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a bundle payload")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Payload, A::Error> {
        let missing = |index: usize| A::Error::invalid_length(index, &"9 payload fields");
        let compiler_version: String = seq.next_element()?.ok_or_else(|| missing(0))?;
        let sources: Vec<&str> = seq.next_element()?.ok_or_else(|| missing(1))?;
        let sources: Vec<Arc<str>> = sources.into_iter().map(Arc::from).collect();
        let source_runs: Vec<SourceRun> = seq.next_element()?.ok_or_else(|| missing(2))?;
        let rules = seq
            .next_element_seed(ExactRules {
                payload: &self,
                sources: &sources,
                source_runs: &source_runs,
            })?
            .ok_or_else(|| missing(3))?;
        let state_pairs: Vec<StatePair> = seq.next_element()?.ok_or_else(|| missing(4))?;
        let consts: Vec<Const> = seq.next_element()?.ok_or_else(|| missing(5))?;
        let inputs: Vec<Input> = seq.next_element()?.ok_or_else(|| missing(6))?;
        let profile: Option<Profile> = seq.next_element()?.ok_or_else(|| missing(7))?;
        let envelope: Envelope = seq.next_element()?.ok_or_else(|| missing(8))?;
        Ok(Payload {
            compiler_version,
            rules,
            state_pairs,
            consts,
            inputs,
            profile,
            envelope,
        })
    }
}

/// The rules vector, reserved once at its declared length; each rule gets
/// its file from the table as it is read.
struct ExactRules<'a> {
    payload: &'a PayloadSeed<'a>,
    sources: &'a [Arc<str>],
    source_runs: &'a [SourceRun],
}

impl<'de> DeserializeSeed<'de> for ExactRules<'_> {
    type Value = Vec<Rule>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Vec<Rule>, D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for ExactRules<'_> {
    type Value = Vec<Rule>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("the rules")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<Rule>, A::Error> {
        let bytes = self.payload.bytes;
        let most = bytes / MIN_RULE_BYTES;
        // postcard gives no hint when the declared length is larger than
        // the bytes left: that count is a lie, refused before reserving.
        let declared = match seq.size_hint() {
            Some(declared) if declared <= most => declared,
            _ => return Err(self.payload.refuse(Refusal::TooManyRules { bytes, most })),
        };
        let named: u64 = self
            .source_runs
            .iter()
            .map(|run| u64::from(run.rules))
            .sum();
        if usize::try_from(named) != Ok(declared) {
            return Err(self.payload.refuse(Refusal::SourceCount {
                named,
                rules: declared,
            }));
        }
        let mut rules = Vec::new();
        rules.try_reserve_exact(declared).map_err(|_| {
            A::Error::custom(format_args!("cannot reserve memory for {declared} rules"))
        })?;
        let mut shared = Shared::default();
        for run in self.source_runs {
            let index = run.file as usize;
            let Some(source) = self.sources.get(index) else {
                return Err(self.payload.refuse(Refusal::SourceIndex {
                    rule: rules.len(),
                    index,
                    files: self.sources.len(),
                }));
            };
            for _ in 0..run.rules {
                let Some(mut decoded) = seq.next_element::<Rule>()? else {
                    return Ok(rules);
                };
                decoded.source = Arc::clone(source);
                decoded.steps = shared.steps(decoded.steps);
                if let Some(options) = decoded.options.as_mut() {
                    // Finally lists are shared like step lists; the empty
                    // one of every rule without finally steps too.
                    let finally = std::mem::take(&mut options.finally);
                    options.finally = shared.steps(finally);
                }
                rules.push(decoded);
            }
        }
        Ok(rules)
    }
}

/// The step lists and actions decoded so far, one `Arc` each: a rule whose
/// steps equal an earlier rule's gets that rule's list, and a step whose
/// action equals an earlier one's gets that action. Typical bundles repeat
/// both (the same `blinker off` after the same wait), and a one-step rule
/// then keeps its name and patterns of its own and nothing more. Kept only
/// while decoding.
#[derive(Default)]
struct Shared {
    steps: HashSet<StepList>,
    actions: HashSet<Arc<Action>>,
}

impl Shared {
    fn steps(&mut self, mut steps: Arc<[Step]>) -> Arc<[Step]> {
        let list = StepList(steps);
        if let Some(earlier) = self.steps.get(&list) {
            return Arc::clone(&earlier.0);
        }
        steps = list.0;
        // Just decoded, so not shared yet: `make_mut` does not copy.
        for step in Arc::make_mut(&mut steps) {
            step.action = self.action(&step.action);
        }
        self.steps.insert(StepList(Arc::clone(&steps)));
        steps
    }

    fn action(&mut self, action: &Arc<Action>) -> Arc<Action> {
        match self.actions.get(action) {
            Some(earlier) => Arc::clone(earlier),
            None => {
                self.actions.insert(Arc::clone(action));
                Arc::clone(action)
            }
        }
    }
}

/// A step list as a set key: hashed by its fingerprints and waits (cheap,
/// and equal lists hash alike), compared in full, so lists are shared only
/// when they are equal whatever their fingerprints say.
struct StepList(Arc<[Step]>);

impl Hash for StepList {
    fn hash<H: Hasher>(&self, state: &mut H) {
        for step in self.0.iter() {
            step.fingerprint.hash(state);
            step.after_ns.hash(state);
        }
    }
}

impl PartialEq for StepList {
    fn eq(&self, other: &StepList) -> bool {
        self.0 == other.0
    }
}

impl Eq for StepList {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bundle::{Action, Step};
    use crate::topic::TopicPattern;

    /// `count` rules, in files `a.toml` and `b.toml` by turns.
    fn rules(count: usize) -> Payload {
        let rules = (0..count)
            .map(|i| {
                let on = vec![TopicPattern::parse(&format!("t.{i}")).unwrap()];
                let step = Step::new(Action::redis("l", "p"), 0);
                let file = if i % 2 == 0 { "a.toml" } else { "b.toml" };
                Rule::new(format!("r{i}"), file, on, vec![step])
            })
            .collect();
        Payload::new("test", rules, vec![], vec![])
    }

    fn refusal(body: &[u8]) -> Refusal {
        match decode_payload(body) {
            Err(DecodeError::Refused(refusal)) => refusal,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn decodes_what_encode_wrote_rules_reserved_exactly_files_shared() {
        // Past serde's 1 MiB of elements (4,854 rules), where it doubles.
        let payload = rules(10_000);
        let body = postcard::to_allocvec(&payload).unwrap();
        let (decoded, rest) = decode_payload(&body).unwrap();
        assert!(rest.is_empty());
        assert_eq!(decoded, payload);
        assert_eq!(decoded.rules.capacity(), 10_000);
        // One name per file, shared by its rules.
        assert_eq!(decoded.source_table().0, ["a.toml", "b.toml"]);
        assert!(Arc::ptr_eq(
            &decoded.rules[0].source,
            &decoded.rules[2].source
        ));
        assert!(Arc::ptr_eq(
            &decoded.rules[1].source,
            &decoded.rules[9_999].source
        ));
    }

    #[test]
    fn equal_step_lists_and_equal_actions_are_shared() {
        let off = || Action::redis("scooter:blinker", "off");
        let on = |topic: &str| vec![TopicPattern::parse(topic).unwrap()];
        let rules = vec![
            Rule::new("a", "f.toml", on("a"), vec![Step::new(off(), 30)]),
            Rule::new("b", "f.toml", on("b"), vec![Step::new(off(), 30)]),
            // The same action after another wait: its own list, the
            // shared action.
            Rule::new("c", "f.toml", on("c"), vec![Step::new(off(), 40)]),
            Rule::new(
                "d",
                "f.toml",
                on("d"),
                vec![Step::new(Action::redis("x", "off"), 30)],
            ),
        ];
        let payload = Payload::new("test", rules, vec![], vec![]);
        let body = postcard::to_allocvec(&payload).unwrap();
        let (decoded, _) = decode_payload(&body).unwrap();
        assert_eq!(decoded, payload);
        let [a, b, c, d] = &decoded.rules[..] else {
            panic!("four rules")
        };
        assert!(Arc::ptr_eq(&a.steps, &b.steps));
        assert!(!Arc::ptr_eq(&a.steps, &c.steps));
        assert!(Arc::ptr_eq(&a.steps[0].action, &c.steps[0].action));
        assert!(!Arc::ptr_eq(&a.steps[0].action, &d.steps[0].action));
        // Shared, the lists still change one rule at a time.
        let mut changed = decoded.clone();
        Arc::make_mut(&mut changed.rules[1].steps)[0].after_ns = 50;
        assert_eq!(changed.rules[0].steps[0].after_ns, 30);
    }

    #[test]
    fn finally_lists_are_shared_with_equal_lists() {
        let off = || Step::new(Action::redis("scooter:blinker", "off"), 0);
        let on = |topic: &str| vec![TopicPattern::parse(topic).unwrap()];
        let mut a = Rule::new("a", "f.toml", on("a"), vec![off()]);
        a.options_mut().finally = vec![off()].into();
        let mut b = Rule::new(
            "b",
            "f.toml",
            on("b"),
            vec![Step::new(off().action.as_ref().clone(), 5)],
        );
        b.options_mut().finally = vec![off()].into();
        // Options, but no finally steps.
        let mut c = Rule::new("c", "f.toml", on("c"), vec![off()]);
        c.options_mut().cooldown_ns = 1;
        let mut d = c.clone();
        d.name = "d".into();
        let payload = Payload::new("test", vec![a, b, c, d], vec![], vec![]);
        let body = postcard::to_allocvec(&payload).unwrap();
        let (decoded, _) = decode_payload(&body).unwrap();
        assert_eq!(decoded, payload);
        let finally = |rule: usize| &decoded.rules[rule].options.as_ref().unwrap().finally;
        // The same list as `a`'s steps, and as `b`'s finally steps.
        assert!(Arc::ptr_eq(finally(0), &decoded.rules[0].steps));
        assert!(Arc::ptr_eq(finally(0), finally(1)));
        assert!(Arc::ptr_eq(finally(2), finally(3)));
        assert!(finally(2).is_empty());
    }

    #[test]
    fn lists_that_share_fingerprints_but_differ_are_not_shared() {
        // A forged bundle may give two different lists the same
        // fingerprints (verification refuses it later): each keeps its own.
        let on = vec![TopicPattern::parse("a").unwrap()];
        let mut one = Rule::new(
            "one",
            "f.toml",
            on.clone(),
            vec![Step::new(Action::redis("l", "1"), 0)],
        );
        let two = Rule::new(
            "two",
            "f.toml",
            on,
            vec![Step::new(Action::redis("l", "2"), 0)],
        );
        Arc::make_mut(&mut one.steps)[0].fingerprint = two.steps[0].fingerprint;
        let payload = Payload {
            compiler_version: "test".into(),
            rules: vec![one, two],
            state_pairs: vec![],
            consts: vec![],
            inputs: vec![],
            profile: None,
            envelope: Default::default(),
        };
        let body = postcard::to_allocvec(&payload).unwrap();
        let (decoded, _) = decode_payload(&body).unwrap();
        assert_eq!(decoded, payload);
        assert!(!Arc::ptr_eq(
            &decoded.rules[0].steps,
            &decoded.rules[1].steps
        ));
    }

    #[test]
    fn more_rules_than_the_bytes_can_hold_are_refused_before_reserving() {
        // Version "", no files, no indices, then 100 rules declared in 200
        // bytes (at most 28).
        let mut body = vec![0x00, 0x00, 0x00, 100];
        body.resize(200, 0);
        let refused = refusal(&body);
        assert_eq!(
            refused,
            Refusal::TooManyRules {
                bytes: 200,
                most: 28
            }
        );
        assert_eq!(
            refused.to_string(),
            "it declares more rules than its 200 bytes can hold (at most 28)"
        );
        // A count past the bytes left: postcard gives no hint.
        let body = [0x00, 0x00, 0x00, 0xff, 0xff, 0x03, 0x00];
        assert!(matches!(refusal(&body), Refusal::TooManyRules { .. }));
    }

    #[test]
    fn runs_of_rules_name_their_file_in_the_table() {
        let payload = rules(3);
        let (_, source_runs) = payload.source_table();
        let run = |file, rules| SourceRun { file, rules };
        assert_eq!(source_runs, [run(0, 1), run(1, 1), run(0, 1)]);
        let wire = |sources: Vec<&str>, source_runs: Vec<SourceRun>| {
            let wire = crate::bundle::PayloadWire {
                compiler_version: "test",
                sources,
                source_runs,
                rules: &payload.rules,
                state_pairs: &[],
                consts: &[],
                inputs: &[],
                profile: &None,
                envelope: &Default::default(),
            };
            postcard::to_allocvec(&wire).unwrap()
        };
        let body = wire(vec!["a.toml"], vec![run(0, 2)]);
        assert_eq!(refusal(&body), Refusal::SourceCount { named: 2, rules: 3 });
        // Counts that would wrap a u32 sum do not.
        let body = wire(vec!["a.toml"], vec![run(0, u32::MAX), run(0, 4)]);
        assert_eq!(
            refusal(&body),
            Refusal::SourceCount {
                named: u64::from(u32::MAX) + 4,
                rules: 3
            }
        );
        let body = wire(
            vec!["a.toml", "b.toml"],
            vec![run(0, 1), run(1, 1), run(2, 1)],
        );
        let refused = refusal(&body);
        assert_eq!(refused.to_string(), "rule 2 names file 2 of a table of 2");
        // One run per file, however many rules it holds.
        let (decoded, _) = decode_payload(&wire(vec!["a.toml"], vec![run(0, 3)])).unwrap();
        assert!(decoded.rules.iter().all(|rule| &*rule.source == "a.toml"));
    }
}

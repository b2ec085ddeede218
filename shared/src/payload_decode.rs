//! Decoding a bundle's payload (docs/bundle.md#the-loaders-memory): the
//! rules vector is reserved once, at the exact length the payload declares,
//! and only when that many rules fit in the bytes left.
//!
//! serde's own `Vec` decoding trusts a declared length only up to 1 MiB
//! of elements and grows by doubling past it: for 10,000 rules a vector of
//! 19,416 (twice the heap they need, and a copy at each step), for 100,000
//! rules 155,328. A declared length is a claim of a file nobody may have
//! checked, so it is believed only as far as the bytes can back it: each
//! rule takes at least [`MIN_RULE_BYTES`] of payload.

use crate::bundle::{Input, Payload, Rule, StatePair};
use crate::bytecode::Const;
use serde::de::{DeserializeSeed, Deserializer, Error, SeqAccess, Visitor};
use std::cell::Cell;
use std::fmt;

/// The fewest payload bytes a rule can take: one byte for each of its
/// name, source, `enabled`, `on`, `cancel_on`, concurrency, cooldown,
/// debounce, `for`, `when`, steps and inputs, two for its repeat.
pub const MIN_RULE_BYTES: usize = 14;

/// Why a payload does not decode.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("it declares more rules than its {bytes} bytes can hold (at most {most})")]
    TooManyRules { bytes: usize, most: usize },
    #[error("{0}")]
    Postcard(#[from] postcard::Error),
}

/// Decodes a [`Payload`] from `body`, its whole postcard encoding;
/// returns it with the bytes after it.
pub fn decode_payload(body: &[u8]) -> Result<(Payload, &[u8]), DecodeError> {
    let mut deserializer = postcard::Deserializer::from_bytes(body);
    let most = body.len() / MIN_RULE_BYTES;
    // postcard keeps no message of a custom error: the refusal is noted here.
    let too_many = Cell::new(false);
    let seed = PayloadSeed {
        most_rules: most,
        too_many: &too_many,
    };
    match seed.deserialize(&mut deserializer) {
        Ok(payload) => Ok((payload, deserializer.finalize()?)),
        Err(_) if too_many.get() => Err(DecodeError::TooManyRules {
            bytes: body.len(),
            most,
        }),
        Err(error) => Err(error.into()),
    }
}

/// The payload's fields in their encoded order; [`Payload`]'s derived
/// `Deserialize` with one change: [`ExactRules`] for `rules`.
struct PayloadSeed<'a> {
    /// The most rules the payload's bytes can hold.
    most_rules: usize,
    too_many: &'a Cell<bool>,
}

const FIELDS: [&str; 5] = [
    "compiler_version",
    "rules",
    "state_pairs",
    "consts",
    "inputs",
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
        let missing = |index: usize| A::Error::invalid_length(index, &"5 payload fields");
        let compiler_version: String = seq.next_element()?.ok_or_else(|| missing(0))?;
        let rules = seq
            .next_element_seed(ExactRules {
                most: self.most_rules,
                too_many: self.too_many,
            })?
            .ok_or_else(|| missing(1))?;
        let state_pairs: Vec<StatePair> = seq.next_element()?.ok_or_else(|| missing(2))?;
        let consts: Vec<Const> = seq.next_element()?.ok_or_else(|| missing(3))?;
        let inputs: Vec<Input> = seq.next_element()?.ok_or_else(|| missing(4))?;
        Ok(Payload {
            compiler_version,
            rules,
            state_pairs,
            consts,
            inputs,
        })
    }
}

/// The rules vector, reserved once at its declared length.
struct ExactRules<'a> {
    most: usize,
    too_many: &'a Cell<bool>,
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
        write!(f, "at most {} rules", self.most)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<Rule>, A::Error> {
        // postcard gives no hint when the declared length is larger than
        // the bytes left: that count is a lie, refused before reserving.
        let declared = match seq.size_hint() {
            Some(declared) if declared <= self.most => declared,
            _ => {
                self.too_many.set(true);
                return Err(A::Error::custom("more rules than the bytes can hold"));
            }
        };
        let mut rules = Vec::new();
        rules.try_reserve_exact(declared).map_err(|_| {
            A::Error::custom(format_args!("cannot reserve memory for {declared} rules"))
        })?;
        while let Some(rule) = seq.next_element()? {
            rules.push(rule);
        }
        Ok(rules)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bundle::{Action, Step};
    use crate::topic::TopicPattern;

    fn rules(count: usize) -> Payload {
        let rules = (0..count)
            .map(|i| {
                let on = vec![TopicPattern::parse(&format!("t.{i}")).unwrap()];
                let step = Step::new(Action::redis("l", "p"), 0);
                Rule::new(format!("r{i}"), "a.toml", on, vec![step])
            })
            .collect();
        Payload::new("test", rules, vec![], vec![])
    }

    #[test]
    fn decodes_what_encode_wrote_with_the_rules_reserved_exactly() {
        // Past serde's 1 MiB of elements (4,854 rules), where it doubles.
        let payload = rules(10_000);
        let body = postcard::to_allocvec(&payload).unwrap();
        let (decoded, rest) = decode_payload(&body).unwrap();
        assert!(rest.is_empty());
        assert_eq!(decoded, payload);
        assert_eq!(decoded.rules.capacity(), 10_000);
    }

    #[test]
    fn more_rules_than_the_bytes_can_hold_are_refused_before_reserving() {
        // Version "", then 100 rules declared in 200 bytes (at most 14).
        let mut body = vec![0x00, 100];
        body.resize(200, 0);
        let error = decode_payload(&body).unwrap_err();
        assert!(
            matches!(
                error,
                DecodeError::TooManyRules {
                    bytes: 200,
                    most: 14
                }
            ),
            "{error:?}"
        );
        assert_eq!(
            error.to_string(),
            "it declares more rules than its 200 bytes can hold (at most 14)"
        );
        // A count past the bytes left: postcard gives no hint.
        let body = [0x00, 0xff, 0xff, 0x03, 0x00];
        assert!(matches!(
            decode_payload(&body),
            Err(DecodeError::TooManyRules { .. })
        ));
    }
}

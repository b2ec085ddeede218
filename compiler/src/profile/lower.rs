//! A checked profile lowered: into the bundle's `Profile` (its programs in
//! the bundle's constant pool, docs/sources.md) and into the [`Catalogue`]
//! the rule checks read.

use super::catalogue::{Catalogue, DataType, HashInfo, TopicShape};
use super::parse::{DataDecl, Decls};
use super::LoadedProfile;
use crate::when::{lower, ConstPool};
use rulecore::bundle::StatePair;
use rulecore::profile::{DataSpec, Emit, Origin, Poll, Profile, Source};
use rulecore::value_pattern::ValuePattern;
use std::collections::BTreeMap;

pub(super) fn profile(loaded: &LoadedProfile, pool: &mut ConstPool) -> Profile {
    let decls = &loaded.decls;
    let sources = decls
        .sources
        .iter()
        .map(|source| {
            let from_to = matches!(source.origin, Origin::Field { .. });
            Source {
                origin: source.origin.clone(),
                changes: source.changes,
                emits: source
                    .emits
                    .iter()
                    .map(|emit| Emit {
                        topic: emit.topic.clone(),
                        from: emit.from.clone(),
                        to: emit.to.clone(),
                        payload: emit.payload.clone(),
                        when: emit.when.as_ref().map(|when| lower(when, pool)),
                        data: emit
                            .data
                            .iter()
                            .map(|(key, data)| {
                                let spec = match data {
                                    DataDecl::Const(spec) => spec.clone(),
                                    DataDecl::From => DataSpec::From,
                                    DataDecl::To => DataSpec::To,
                                    DataDecl::Payload => DataSpec::Payload,
                                    DataDecl::Field(field) => DataSpec::Field(field.clone()),
                                    DataDecl::Expr(checked) => DataSpec::Expr(lower(checked, pool)),
                                };
                                (key.clone(), spec)
                            })
                            .collect(),
                        from_to,
                    })
                    .collect(),
            }
        })
        .collect();
    let polls = decls
        .hashes
        .iter()
        .filter_map(|hash| {
            Some(Poll {
                hash: hash.name.clone(),
                fields: hash.polled.clone(),
                every_ns: hash.poll_ns?,
            })
        })
        .filter(|poll| !poll.fields.is_empty())
        .collect();
    Profile {
        name: loaded.name.clone(),
        digest: loaded.digest.clone(),
        sources,
        polls,
    }
}

/// Values of a topic's `from` or `to`, merged over its emits: `None` is
/// "any value" once any emit allows any.
#[derive(Default)]
struct Values {
    any: bool,
    seen: bool,
    patterns: Vec<ValuePattern>,
}

impl Values {
    fn add(&mut self, condition: &[ValuePattern], field_values: &[ValuePattern]) {
        self.seen = true;
        let set = if condition.is_empty() {
            field_values
        } else {
            condition
        };
        if set.is_empty() {
            self.any = true;
        }
        for pattern in set {
            if !self.patterns.contains(pattern) {
                self.patterns.push(pattern.clone());
            }
        }
    }

    fn finish(self) -> Option<Vec<ValuePattern>> {
        self.seen
            .then(|| if self.any { Vec::new() } else { self.patterns })
    }
}

#[derive(Default)]
struct Shape {
    from: Values,
    from_open: bool,
    to: Values,
    data: BTreeMap<String, Option<DataType>>,
}

pub(super) fn catalogue(decls: &Decls) -> Catalogue {
    let hashes = decls
        .hashes
        .iter()
        .map(|hash| {
            (
                hash.name.clone(),
                HashInfo {
                    fields: hash.fields.iter().cloned().collect(),
                    silent: hash.silent.clone(),
                    polled: hash.polled.clone(),
                },
            )
        })
        .collect();
    let lists = decls
        .lists
        .iter()
        .map(|list| (list.key.clone(), list.values.clone()))
        .collect();
    let effects = decls
        .lists
        .iter()
        .filter(|list| !list.effects.is_empty())
        .map(|list| (list.key.clone(), list.effects.clone()))
        .collect();
    let (channels, topic_fields) = bus_links(decls);
    let mut shapes: BTreeMap<String, Shape> = BTreeMap::new();
    for source in &decls.sources {
        let field_values: &[ValuePattern] = match &source.origin {
            Origin::Field { hash, field, .. } => decls
                .hash(hash)
                .and_then(|hash| hash.field(field))
                .unwrap_or(&[]),
            Origin::Channel { .. } => &[],
        };
        for emit in &source.emits {
            let shape = shapes.entry(emit.topic.clone()).or_default();
            if let Origin::Field { .. } = source.origin {
                shape.from.add(&emit.from, field_values);
                // Without its own `from` condition an emit's `from` is
                // whatever the field held before, also a value the
                // profile does not list (`n/a`).
                shape.from_open |= emit.from.is_empty();
                shape.to.add(&emit.to, field_values);
            }
            for (key, data) in &emit.data {
                let ty = data_type(data);
                shape
                    .data
                    .entry(key.clone())
                    .and_modify(|known| {
                        if *known != ty {
                            *known = None;
                        }
                    })
                    .or_insert(ty);
            }
        }
    }
    let topics = shapes
        .into_iter()
        .map(|(name, shape)| TopicShape {
            name,
            from: shape.from.finish(),
            from_open: shape.from_open,
            to: shape.to.finish(),
            data: shape.data,
        })
        .collect();
    Catalogue {
        hashes,
        topics,
        lists,
        effects,
        channels,
        topic_fields,
    }
}

/// Channel -> each emit's payload patterns and topic (what a `publish`
/// there makes), and topic -> the hash fields whose sources emit it.
#[allow(clippy::type_complexity)]
fn bus_links(
    decls: &Decls,
) -> (
    BTreeMap<String, Vec<(Vec<ValuePattern>, String)>>,
    BTreeMap<String, Vec<StatePair>>,
) {
    let mut channels: BTreeMap<String, Vec<(Vec<ValuePattern>, String)>> = BTreeMap::new();
    let mut topic_fields: BTreeMap<String, Vec<StatePair>> = BTreeMap::new();
    for source in &decls.sources {
        if let Origin::Field { hash, field, .. } = &source.origin {
            for emit in &source.emits {
                let pair = StatePair {
                    hash: hash.clone(),
                    field: field.clone(),
                };
                let fields = topic_fields.entry(emit.topic.clone()).or_default();
                if !fields.contains(&pair) {
                    fields.push(pair);
                }
            }
        }
        if let Origin::Channel { channel, .. } = &source.origin {
            let emits = source
                .emits
                .iter()
                .map(|emit| (emit.payload.clone(), emit.topic.clone()));
            channels.entry(channel.clone()).or_default().extend(emits);
        }
    }
    (channels, topic_fields)
}

fn data_type(data: &DataDecl) -> Option<DataType> {
    match data {
        DataDecl::Const(DataSpec::Int(_)) => Some(DataType::Int),
        DataDecl::Const(DataSpec::Float(_)) => Some(DataType::Float),
        DataDecl::Const(DataSpec::Bool(_)) => Some(DataType::Bool),
        DataDecl::Const(_) | DataDecl::From | DataDecl::To | DataDecl::Payload => {
            Some(DataType::Str)
        }
        DataDecl::Field(_) => Some(DataType::Str),
        // Known only when it runs (docs/sources.md: the key is left out
        // when the expression fails or is empty).
        DataDecl::Expr(_) => None,
    }
}

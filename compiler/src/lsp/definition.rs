//! Go to definition (docs/editors.md#go-to-definition): a topic of `on`
//! or `cancel-on` to its `[[topic]]` (or the input that makes it), or to
//! the profile file whose source emits it; a `state()` hash or an input's
//! hash to the profile's `[[hash]]`; a list to its `[[list]]`.

use super::context::{self, At, InWhen};
use super::facts::Facts;
use super::scan::{self, Kind};
use crate::keys::Level;
use crate::validate::TopicOrigin;
use std::ops::Range;

/// Where a definition is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A rule file of the directory, by name.
    Rules { file: String, span: Range<usize> },
    /// A file of the profile, by its name in [`crate::profile::LoadedProfile::files`].
    Profile { file: String, span: Range<usize> },
}

/// The definition of what is at byte `offset` of the rule file `text`.
pub fn definition(text: &str, offset: usize, facts: Facts<'_>) -> Option<Target> {
    let tables = scan::scan(text);
    let (
        _,
        At::Value {
            level,
            entry,
            value,
            siblings,
        },
    ) = context::at(text, &tables, offset)
    else {
        return None;
    };
    let written = value.plain_str(text);
    match (level, entry.key.as_str()) {
        (Level::Rule, "on" | "cancel-on") => topic(written?, facts),
        (Level::Rule | Level::Step, "when") if value.kind == Kind::Str => {
            let when = InWhen::read(text, value, offset)?;
            let (hash, _) = when.state_call_here()?;
            hash_decl(&hash, facts)
        }
        (Level::Step, "list") => list_decl(written?, facts),
        (Level::Step, "push") => {
            let list = siblings
                .iter()
                .find(|e| e.key == "list")
                .and_then(|e| e.value.as_ref())
                .and_then(|v| v.plain_str(text))?;
            list_decl(list, facts)
        }
        (Level::Input, "hash") => hash_decl(written?, facts),
        _ => None,
    }
}

fn topic(name: &str, facts: Facts<'_>) -> Option<Target> {
    let topic = facts.topic(name)?;
    if topic.origin != TopicOrigin::Profile {
        return Some(Target::Rules {
            file: topic.file.clone(),
            span: topic.span.clone(),
        });
    }
    let (source, emit) = facts.profile?.decls.sources.iter().find_map(|source| {
        source
            .emits
            .iter()
            .find(|emit| emit.topic == name)
            .map(|emit| (source, emit))
    })?;
    Some(Target::Profile {
        file: source.file.clone(),
        span: emit.span.clone(),
    })
}

fn hash_decl(hash: &str, facts: Facts<'_>) -> Option<Target> {
    let decl = facts.profile?.decls.hash(hash)?;
    Some(Target::Profile {
        file: decl.file.clone(),
        span: decl.span.clone(),
    })
}

fn list_decl(list: &str, facts: Facts<'_>) -> Option<Target> {
    let decl = facts
        .profile?
        .decls
        .lists
        .iter()
        .find(|decl| decl.key == list)?;
    Some(Target::Profile {
        file: decl.file.clone(),
        span: decl.span.clone(),
    })
}

//! The tables of docs/librescoot.md, made from a loaded profile: every
//! derived topic with where it comes from, when it is emitted and its
//! `data`; every hash field `state()` can read, with its values and how
//! `ruled` sees it change; every command list with the values it accepts.
//! `compiler/tests/librescoot_reference.rs` keeps the page equal to them.

use super::LoadedProfile;
use super::{DataDecl, EmitDecl, SourceDecl};
use rulecore::profile::{Changes, DataSpec, Origin};
use rulecore::value_pattern::ValuePattern;

/// The generated sections, by marker name (`<!-- profile: NAME -->`).
pub fn sections(profile: &LoadedProfile) -> [(&'static str, String); 3] {
    [
        ("topics", topics(profile)),
        ("hashes", hashes(profile)),
        ("lists", lists(profile)),
    ]
}

/// The safety envelope's generated sections of docs/safety.md (the same
/// markers): the built-in guards and limits.
pub fn envelope_sections(profile: &LoadedProfile) -> [(&'static str, String); 2] {
    let envelope = &profile.decls.envelope;
    let mut guards =
        String::from("| guard | covers | allows the action while | toast |\n|---|---|---|---|\n");
    for guard in &envelope.guards {
        guards.push_str(&format!(
            "| `{}` | {} | `{}` | {} |\n",
            guard.name,
            cover(&guard.cover),
            guard.when_text.replace('|', "\\|"),
            guard.say.as_deref().unwrap_or("none")
        ));
    }
    let mut limits = String::from("| limit | covers | at most |\n|---|---|---|\n");
    for limit in &envelope.limits {
        limits.push_str(&format!(
            "| `{}` | {} | {} per {} |\n",
            limit.name,
            cover(&limit.cover),
            limit.max,
            rulecore::duration::format_duration(i64::try_from(limit.per_ns).unwrap_or(i64::MAX))
        ));
    }
    [("guards", guards), ("limits", limits)]
}

/// `` `scooter:hardware` `handlebar:lock`, `engine:off` ``.
fn cover(cover: &rulecore::envelope::Cover) -> String {
    use rulecore::envelope::Target;
    let target = match &cover.target {
        Target::List(list) => format!("`{list}`"),
        Target::Channel(channel) => format!("channel `{channel}`"),
        Target::Can(id) => format!("CAN `{id:#X}`"),
        Target::Exec => "every `exec`".to_string(),
    };
    if cover.values.is_empty() {
        return format!("{target}, every value");
    }
    let values: Vec<String> = cover.values.iter().map(|v| format!("`{v}`")).collect();
    format!("{target} {}", values.join(", "))
}

fn topics(profile: &LoadedProfile) -> String {
    let mut out = String::from("| topic | from | emitted when | `data` |\n|---|---|---|---|\n");
    for source in &profile.decls.sources {
        for emit in &source.emits {
            out.push_str(&format!(
                "| `{}` | {} | {} | {} |\n",
                emit.topic,
                origin(source),
                condition(source, emit),
                data(emit)
            ));
        }
    }
    out
}

fn origin(source: &SourceDecl) -> String {
    match &source.origin {
        Origin::Field { hash, field, .. } => format!("`{hash}` `{field}`"),
        Origin::Channel { channel } => format!("channel `{channel}`"),
    }
}

fn condition(source: &SourceDecl, emit: &EmitDecl) -> String {
    let mut parts = Vec::new();
    let is_channel = matches!(source.origin, Origin::Channel { .. });
    for (name, patterns) in [
        ("from", &emit.from),
        ("to", &emit.to),
        ("payload", &emit.payload),
    ] {
        if !patterns.is_empty() {
            parts.push(format!("{} {}", verb(name), one_of(patterns)));
        }
    }
    if let Some(text) = &emit.when_text {
        parts.push(format!("and `{}`", text.replace('|', "\\|")));
    }
    let base = match (is_channel, source.changes) {
        (true, _) => "a message",
        (false, Changes::Every) => "every notification",
        (false, Changes::Distinct) => "a change",
    };
    if parts.is_empty() {
        base.to_string()
    } else if is_channel {
        parts.join(", ")
    } else {
        format!("{base}: {}", parts.join(", "))
    }
}

fn verb(name: &str) -> &'static str {
    match name {
        "from" => "from",
        "to" => "to",
        _ => "the message is",
    }
}

/// `` `a` `` or `` `a`, `b` or `c` ``.
fn one_of(patterns: &[ValuePattern]) -> String {
    let quoted: Vec<String> = patterns.iter().map(|p| format!("`{p}`")).collect();
    match quoted.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => quoted.join(""),
    }
}

fn data(emit: &EmitDecl) -> String {
    if emit.data.is_empty() {
        return String::new();
    }
    emit.data
        .iter()
        .map(|(key, value)| {
            let what = match value {
                DataDecl::Const(DataSpec::Str(text)) => format!("`\"{text}\"`"),
                DataDecl::Const(DataSpec::Int(n)) => format!("`{n}`"),
                DataDecl::Const(DataSpec::Float(x)) => format!("`{x}`"),
                DataDecl::Const(DataSpec::Bool(b)) => format!("`{b}`"),
                DataDecl::Const(_) => "a constant".to_string(),
                DataDecl::From => "the previous value".to_string(),
                DataDecl::To => "the new value".to_string(),
                DataDecl::Payload => "the message".to_string(),
                DataDecl::Field(field) => format!("field `{field}` (left out when absent)"),
                DataDecl::Expr(_) => "computed".to_string(),
            };
            format!("`{key}` = {what}")
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn hashes(profile: &LoadedProfile) -> String {
    let mut out = String::from("| hash | field | values | `state()` sees |\n|---|---|---|---|\n");
    for hash in &profile.decls.hashes {
        for (field, values) in &hash.fields {
            let seen = if hash.polled.contains(field) {
                let every = hash
                    .poll_ns
                    .map(|ns| {
                        rulecore::duration::format_duration(i64::try_from(ns).unwrap_or(i64::MAX))
                    })
                    .unwrap_or_default();
                format!("polled every {every}")
            } else if hash.silent.contains(field) {
                "the value read at start (written silently)".to_string()
            } else {
                "every change".to_string()
            };
            let values = if values.is_empty() {
                "any".to_string()
            } else {
                values
                    .iter()
                    .map(|p| format!("`{p}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            out.push_str(&format!(
                "| `{}` | `{field}` | {values} | {seen} |\n",
                hash.name
            ));
        }
    }
    out
}

fn lists(profile: &LoadedProfile) -> String {
    let mut out = String::from("| list | accepted values | effects |\n|---|---|---|\n");
    for list in &profile.decls.lists {
        let values: Vec<String> = list.values.iter().map(|p| format!("`{p}`")).collect();
        let effects: Vec<String> = list
            .effects
            .iter()
            .map(|(value, topics)| {
                let topics: Vec<String> = topics.iter().map(|t| format!("`{t}`")).collect();
                format!("`{value}` → {}", topics.join(", "))
            })
            .collect();
        out.push_str(&format!(
            "| `{}` | {} | {} |\n",
            list.key,
            values.join(", "),
            effects.join("; ")
        ));
    }
    out
}

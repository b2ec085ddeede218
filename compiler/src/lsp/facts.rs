//! What hover and completion tell (docs/editors.md#what-the-server-does),
//! all read from what `rulec check` holds the rules against: the key
//! table ([`crate::keys`]), the topic catalogue of the last check, and the
//! bus profile's declarations and [`Catalogue`].

use crate::envelope::EnvelopeDecls;
use crate::keys::{DefaultValue, Key};
use crate::profile::{Catalogue, LoadedProfile};
use crate::validate::{CatalogueTopic, TopicOrigin};
use rulecore::envelope::Target;
use rulecore::profile::Origin;
use rulecore::value_pattern::{any_matches, ValuePattern};
use rulecore::TopicPattern;

/// The profile, the topic catalogue and the envelope of one rules
/// directory.
#[derive(Debug, Clone, Copy)]
pub struct Facts<'w> {
    pub profile: Option<&'w LoadedProfile>,
    pub topics: &'w [CatalogueTopic],
    /// The rules directory's own `[[guard]]` and `[[limit]]` tables (the
    /// profile's are in its declarations), from the last check.
    pub envelope: Option<&'w EnvelopeDecls>,
}

/// How many values a hover lists before "...".
const LISTED: usize = 24;

impl<'w> Facts<'w> {
    pub fn catalogue(&self) -> Option<&'w Catalogue> {
        self.profile.map(|profile| &profile.catalogue)
    }

    pub fn topic(&self, name: &str) -> Option<&'w CatalogueTopic> {
        self.topics.iter().find(|topic| topic.name == name)
    }

    /// The topics an `on` pattern matches.
    pub fn matching(&self, pattern: &TopicPattern) -> Vec<&'w CatalogueTopic> {
        self.topics
            .iter()
            .filter(|topic| pattern.matches(&topic.name))
            .collect()
    }

    /// The `data` keys (with their types) of the topics the patterns
    /// match, each once.
    pub fn data_keys(&self, patterns: &[TopicPattern]) -> Vec<(String, &'static str)> {
        let mut keys: Vec<(String, &'static str)> = Vec::new();
        for pattern in patterns {
            for topic in self.matching(pattern) {
                for (key, ty) in &topic.data {
                    if !keys.iter().any(|(known, _)| known == key) {
                        keys.push((key.clone(), ty));
                    }
                }
            }
        }
        keys.sort();
        keys
    }

    /// The values a list accepts, as the profile writes them.
    pub fn list_values(&self, list: &str) -> Option<&'w [ValuePattern]> {
        self.catalogue()?.lists.get(list).map(Vec::as_slice)
    }

    /// The values a hash field takes (empty: any).
    pub fn field_values(&self, hash: &str, field: &str) -> Option<&'w [ValuePattern]> {
        self.catalogue()?
            .hashes
            .get(hash)?
            .fields
            .get(field)
            .map(Vec::as_slice)
    }

    /// A key of the rule format, for hover.
    pub fn key_text(key: &Key) -> String {
        let mut text = format!("**`{}`**: {}", key.name, key.ty.describe());
        if key.required {
            text.push_str(", required");
        }
        match key.default {
            Some(DefaultValue::Str(value)) => text.push_str(&format!(", default `\"{value}\"`")),
            Some(DefaultValue::Bool(value)) => text.push_str(&format!(", default `{value}`")),
            Some(DefaultValue::Prose(words)) => text.push_str(&format!("; absent: {words}")),
            None => {}
        }
        if !key.actions.is_empty() {
            let kinds: Vec<String> = key
                .actions
                .iter()
                .map(|kind| format!("`{}`", kind.as_str()))
                .collect();
            text.push_str(&format!(" (a {} step)", kinds.join(" or ")));
        }
        text.push_str("\n\n");
        text.push_str(key.doc);
        text
    }

    /// A topic pattern of `on`/`cancel-on`, for hover.
    pub fn pattern_text(&self, written: &str) -> Option<String> {
        let pattern = TopicPattern::parse(written).ok()?;
        if let TopicPattern::Exact(name) = &pattern {
            return self.topic_text(name);
        }
        let matching = self.matching(&pattern);
        let names: Vec<String> = matching.iter().map(|t| format!("`{}`", t.name)).collect();
        Some(format!(
            "**`{written}`** matches {} known topic{}{}",
            names.len(),
            if names.len() == 1 { "" } else { "s" },
            if names.is_empty() {
                String::new()
            } else {
                format!(": {}", listed(names))
            }
        ))
    }

    /// A topic: where it comes from and the shape of its events.
    pub fn topic_text(&self, name: &str) -> Option<String> {
        let topic = self.topic(name)?;
        let mut text = format!("**topic `{name}`**");
        match topic.origin {
            TopicOrigin::Declared => text.push_str(&format!(", declared in `{}`", topic.file)),
            TopicOrigin::Input => {
                text.push_str(&format!(", the topic of an input in `{}`", topic.file))
            }
            TopicOrigin::Profile => {
                let profile = self.profile.map_or("", |p| p.name.as_str());
                text.push_str(&format!(", derived by the profile `{profile}`"));
                for origin in self.origins(name) {
                    text.push_str(&format!(" from {origin}"));
                }
            }
        }
        if let Some(shape) = self.catalogue().and_then(|c| c.topic(name)) {
            for (field, values) in [("from", &shape.from), ("to", &shape.to)] {
                match values {
                    Some(values) if !values.is_empty() => {
                        text.push_str(&format!("\n\n`{field}`: {}", patterns(values)))
                    }
                    Some(_) => text.push_str(&format!("\n\n`{field}`: any value")),
                    None => {}
                }
            }
        }
        if !topic.data.is_empty() {
            let data: Vec<String> = topic
                .data
                .iter()
                .map(|(key, ty)| format!("`data.{key}` ({ty})"))
                .collect();
            text.push_str(&format!("\n\n{}", data.join(", ")));
        }
        Some(text)
    }

    /// What emits `topic` in the profile: `hash \`vehicle\` field \`state\``.
    fn origins(&self, topic: &str) -> Vec<String> {
        let Some(profile) = self.profile else {
            return Vec::new();
        };
        profile
            .decls
            .sources
            .iter()
            .filter(|source| source.emits.iter().any(|emit| emit.topic == topic))
            .map(|source| match &source.origin {
                Origin::Field { hash, field, .. } => format!("hash `{hash}` field `{field}`"),
                Origin::Channel { channel } => format!("channel `{channel}`"),
            })
            .collect()
    }

    /// `state("hash", "field")`: its values, and whether it is seen to
    /// change.
    pub fn state_text(&self, hash: &str, field: &str) -> String {
        let call = format!("state(\"{hash}\", \"{field}\")");
        let Some(info) = self.catalogue().and_then(|c| c.hashes.get(hash)) else {
            return format!("**`{call}`**: the profile declares no hash `{hash}`; not checked");
        };
        let Some(values) = info.fields.get(field) else {
            return format!("**`{call}`**: the profile's hash `{hash}` has no field `{field}`");
        };
        let values = if values.is_empty() {
            "any value".to_string()
        } else {
            patterns(values)
        };
        let poll = self
            .profile
            .and_then(|p| p.decls.hash(hash))
            .and_then(|decl| decl.poll_ns)
            .map(|ns| rulecore::duration::format_duration(i64::try_from(ns).unwrap_or(i64::MAX)));
        let silent = info.silent.iter().any(|f| f == field);
        let polled = info.polled.iter().any(|f| f == field);
        let live = match (silent, polled, poll) {
            (_, true, Some(every)) => format!("polled every {every}"),
            (_, true, None) => "polled".to_string(),
            (false, false, _) => "announced on every write (not polled)".to_string(),
            (true, false, _) => {
                "written without a notification and not polled: holds the value read at start"
                    .to_string()
            }
        };
        format!("**`{call}`**: {values}\n\n{live}")
    }

    /// A command list: the values it accepts.
    pub fn list_text(&self, list: &str) -> Option<String> {
        let values = self.list_values(list)?;
        Some(format!("**list `{list}`** accepts {}", patterns(values)))
    }

    /// A `push` value's hover: the list's values, then every guard and
    /// limit covering `value` pushed to `list`, the profile's first
    /// (docs/safety.md). A value `${...}` computes is matched as written.
    pub fn push_text(&self, list: &str, value: Option<&str>) -> Option<String> {
        let envelope = value.map(|value| self.envelope_text(list, value));
        match (
            self.list_text(list),
            envelope.filter(|text| !text.is_empty()),
        ) {
            (Some(values), Some(envelope)) => Some(format!("{values}\n\n{envelope}")),
            (values, envelope) => values.or(envelope),
        }
    }

    /// The guards and limits covering `value` pushed to `list`, one
    /// paragraph each; empty when none does.
    fn envelope_text(&self, list: &str, value: &str) -> String {
        let profile = self.profile.map(|profile| &profile.decls.envelope);
        let all = || profile.into_iter().chain(self.envelope);
        let covers = |cover: &rulecore::envelope::Cover| {
            matches!(&cover.target, Target::List(to) if to == list)
                && (cover.values.is_empty() || any_matches(&cover.values, value))
        };
        let mut out = Vec::new();
        for guard in all().flat_map(|e| &e.guards).filter(|g| covers(&g.cover)) {
            let mut text = format!(
                "**guard `{}`** ({}): `{}` is performed only while `{}`",
                guard.name, guard.file, value, guard.when_text
            );
            if let Some(say) = &guard.say {
                text.push_str(&format!("; refused, the dashboard shows \"{say}\""));
            }
            out.push(text);
        }
        for limit in all().flat_map(|e| &e.limits).filter(|l| covers(&l.cover)) {
            out.push(format!(
                "**limit `{}`** ({}): at most {} per {} over all rules",
                limit.name,
                limit.file,
                limit.max,
                rulecore::duration::format_duration(
                    i64::try_from(limit.per_ns).unwrap_or(i64::MAX)
                )
            ));
        }
        out.join("\n\n")
    }
}

fn patterns(values: &[ValuePattern]) -> String {
    listed(values.iter().map(|v| format!("`{v}`")).collect())
}

fn listed(mut items: Vec<String>) -> String {
    if items.len() > LISTED {
        items.truncate(LISTED);
        items.push("...".into());
    }
    items.join(", ")
}

//! What a step's action makes happen on the bus (docs/safety-checks.md#effects):
//! the topics of the events it makes a service produce. A `redis` push
//! onto a list whose value the profile gives `effects`; a `publish` on a
//! channel a profile source or a rule's channel input reads. A computed
//! value may be any value, so it makes every topic its list or channel
//! can make. `exec`, `can` and `notify` make none the rules could know.

use crate::profile::Catalogue;
use crate::validate::CheckedRule;
use rulecore::bundle::{Action, InputSource, Text};
use std::collections::BTreeMap;

/// Channel -> the topics the rules' channel inputs make from it.
pub type InputChannels = BTreeMap<String, Vec<String>>;

/// The channel inputs of the enabled rules.
pub fn input_channels(rules: &[CheckedRule]) -> InputChannels {
    let mut channels = InputChannels::new();
    for rule in rules.iter().filter(|rule| rule.enabled) {
        for input in &rule.inputs {
            if let (InputSource::Channel { channel, .. }, Some(topic)) =
                (&input.input.source, &input.input.topic)
            {
                channels
                    .entry(channel.clone())
                    .or_default()
                    .push(topic.clone());
            }
        }
    }
    channels
}

/// The topics `action` can make, sorted, without duplicates.
pub fn topics_made(
    action: &Action,
    catalogue: Option<&Catalogue>,
    inputs: &InputChannels,
) -> Vec<String> {
    let mut topics = Vec::new();
    match action {
        Action::Redis { list, push, .. } => {
            let effects = catalogue.and_then(|catalogue| catalogue.effects.get(list));
            for (pattern, made) in effects.into_iter().flatten() {
                if plain(push).is_none_or(|value| pattern.matches(value)) {
                    topics.extend(made.iter().cloned());
                }
            }
        }
        Action::Publish {
            channel, message, ..
        } => {
            let sources = catalogue.and_then(|catalogue| catalogue.channels.get(channel));
            for (payloads, topic) in sources.into_iter().flatten() {
                let matches = match plain(message) {
                    Some(value) => payloads.is_empty() || payloads.iter().any(|p| p.matches(value)),
                    None => true,
                };
                if matches {
                    topics.push(topic.clone());
                }
            }
            topics.extend(inputs.get(channel).into_iter().flatten().cloned());
        }
        Action::Exec { .. } | Action::Can(_) | Action::Notify(_) => {}
    }
    topics.sort();
    topics.dedup();
    topics
}

/// The value as written, when it is not computed.
pub fn plain(text: &Text) -> Option<&str> {
    match text {
        Text::Plain(value) => Some(value),
        Text::Computed(_) => None,
    }
}

/// `scooter:seatbox open`, `publish input-events "seatbox:tap"`: the
/// action as a diagnostic names it.
pub fn describe(action: &Action) -> String {
    let value = |text: &Text| plain(text).map_or("(computed)".to_string(), str::to_string);
    match action {
        Action::Redis { list, push, .. } => format!("`{list} {}`", value(push)),
        Action::Publish {
            channel, message, ..
        } => format!("`publish {channel} {}`", value(message)),
        Action::Exec { command, .. } => format!("`exec {command}`"),
        Action::Can(_) => "a CAN frame".to_string(),
        Action::Notify(_) => "a toast".to_string(),
    }
}

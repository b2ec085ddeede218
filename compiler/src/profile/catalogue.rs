//! What a profile tells `rulec check` about the bus (docs/sources.md,
//! docs/librescoot.md): the hashes and the values of their fields, the
//! topics the sources derive with the shape of their events, and the
//! command lists with the values each accepts. Built by the profile
//! loader (`crate::profile`); read by the checks of rules against the
//! profile (`crate::validate`). Not in the bundle.

use rulecore::bundle::StatePair;
use rulecore::value_pattern::ValuePattern;
use std::collections::BTreeMap;

/// The type of a derived event's `data` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataType {
    Str,
    Int,
    Float,
    Bool,
}

/// One `[[hash]]`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HashInfo {
    /// Field -> the patterns of the values it takes (empty: any value).
    pub fields: BTreeMap<String, Vec<ValuePattern>>,
    /// Written without a notification.
    pub silent: Vec<String>,
    /// Read by the hash's poll.
    pub polled: Vec<String>,
}

impl HashInfo {
    /// Whether `state()` of `field` sees changes after start: announced,
    /// or polled.
    pub fn is_live(&self, field: &str) -> bool {
        !self.silent.iter().any(|f| f == field) || self.polled.iter().any(|f| f == field)
    }
}

/// The shape of the events of one derived topic: what `from` and `to`
/// can be (the values of the field, narrowed by the emits' conditions
/// where those are literal), and the `data` keys with their types.
#[derive(Debug, Clone, PartialEq)]
pub struct TopicShape {
    pub name: String,
    /// `None`: the events carry no `from` / `to` (channel sources).
    /// `Some(empty)`: any value.
    pub from: Option<Vec<ValuePattern>>,
    /// `from` may also be a value outside `from`: an emit of the topic
    /// has no `from` condition, and `from` is whatever the field held
    /// before, also a value the profile does not list (battery `charge`
    /// from `n/a` to `77`). `from` then holds the field's
    /// listed values: the usual ones, not all.
    pub from_open: bool,
    pub to: Option<Vec<ValuePattern>>,
    /// Every `data` key any emit of the topic gives, with its type
    /// (`None`: the type is known only at run time, an `expr`).
    pub data: BTreeMap<String, Option<DataType>>,
}

/// Everything a profile declares that checks rules.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Catalogue {
    pub hashes: BTreeMap<String, HashInfo>,
    /// Sorted by name, one per topic.
    pub topics: Vec<TopicShape>,
    /// List key -> the patterns of the values it accepts.
    pub lists: BTreeMap<String, Vec<ValuePattern>>,
    /// List key -> for a value pattern, the topics the service taking the
    /// list makes when it performs a value the pattern matches (`effects`).
    pub effects: BTreeMap<String, Vec<(ValuePattern, Vec<String>)>>,
    /// Channel of a channel source -> each emit's `payload` patterns
    /// (empty: any message) and topic: what a `publish` there makes.
    pub channels: BTreeMap<String, Vec<(Vec<ValuePattern>, String)>>,
    /// Topic -> the hash fields whose sources emit it: at the event, the
    /// field holds the event's `to`.
    pub topic_fields: BTreeMap<String, Vec<StatePair>>,
}

impl Catalogue {
    pub fn topic(&self, name: &str) -> Option<&TopicShape> {
        self.topics
            .binary_search_by(|shape| shape.name.as_str().cmp(name))
            .ok()
            .and_then(|at| self.topics.get(at))
    }
}

//! The safety envelope as the bundle carries it (docs/safety.md): guards
//! (an action performed only while a condition over `state()` holds),
//! limits (at most `max` covered actions in any window, over all rules)
//! and a rule's trip breaker (`trip`, in [`crate::bundle::RuleOptions`]).
//! Written by `rulec` from the profile's and the rules directory's
//! `[[guard]]` and `[[limit]]` tables; enforced by the engine
//! (`ruled_engine::guard`, `limit`, `breaker`). Part of no step
//! fingerprint; the bundle's digest covers it.

use crate::bundle::Action;
use crate::bytecode::Program;
use crate::value_pattern::{any_matches, ValuePattern};
use serde::{Deserialize, Serialize};

/// Every guard and limit of a bundle, the profile's first, then the rules
/// directory's, each in declaration order. Empty for a bundle without any.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    pub guards: Vec<Guard>,
    pub limits: Vec<Limit>,
}

impl Envelope {
    pub fn is_empty(&self) -> bool {
        self.guards.is_empty() && self.limits.is_empty()
    }

    /// The limits covering an action whose pushed or published value is
    /// `value` (computed already), in order.
    pub fn limits_of<'a>(
        &'a self,
        action: &'a Action,
        value: &'a str,
    ) -> impl Iterator<Item = (usize, &'a Limit)> + 'a {
        self.limits
            .iter()
            .enumerate()
            .filter(move |(_, limit)| limit.cover.covers(action, value))
    }
}

/// Where a guard or limit was declared: guards only add, so a rules
/// directory's never replaces the profile's (docs/safety.md#guards).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum DeclaredIn {
    /// A profile file (`profiles/librescoot/guards.toml`), by its name.
    Profile(String),
    /// A rule file of the rules directory, by its name.
    Rules(String),
}

impl DeclaredIn {
    /// The file's name.
    pub fn file(&self) -> &str {
        match self {
            DeclaredIn::Profile(file) | DeclaredIn::Rules(file) => file,
        }
    }
}

/// Which actions a guard or limit covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Target {
    /// `list = "..."`: a `redis` step's `LPUSH` to this list.
    List(String),
    /// `channel = "..."`: a `publish` step to this channel.
    Channel(String),
    /// `can = 0x...`: a `can` step sending a frame with this id.
    Can(u32),
    /// `exec = true`: every `exec` step.
    Exec,
}

/// A target and the values of it covered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cover {
    pub target: Target,
    /// For a list or channel, the pushed or published values covered
    /// (value patterns, `hibernate-for:<int>`); empty: every value. Always
    /// empty for `can` and `exec`.
    pub values: Vec<ValuePattern>,
}

impl Cover {
    /// Whether the cover takes in `action`, whose pushed or published value
    /// (after `${...}` is computed) is `value`; `value` is not read for a
    /// `can`, `exec` or `notify` action.
    pub fn covers(&self, action: &Action, value: &str) -> bool {
        let values_match = || self.values.is_empty() || any_matches(&self.values, value);
        match (&self.target, action) {
            (Target::List(list), Action::Redis { list: to, .. }) => list == to && values_match(),
            (Target::Channel(channel), Action::Publish { channel: to, .. }) => {
                channel == to && values_match()
            }
            (Target::Can(id), Action::Can(frame)) => *id == frame.id,
            (Target::Exec, Action::Exec { .. }) => true,
            _ => false,
        }
    }

    /// The cover as the tables write it: `scooter:hardware [handlebar:lock,
    /// engine:off]`, `channel dashboard`, `can 0x4A0`, `exec`.
    pub fn describe(&self) -> String {
        let target = match &self.target {
            Target::List(list) => list.clone(),
            Target::Channel(channel) => format!("channel {channel}"),
            Target::Can(id) => format!("can {id:#X}"),
            Target::Exec => "exec".to_string(),
        };
        if self.values.is_empty() {
            return target;
        }
        let values: Vec<String> = self.values.iter().map(ToString::to_string).collect();
        format!("{target} [{}]", values.join(", "))
    }
}

/// One `[[guard]]`: covered actions are performed only while `when` holds,
/// read fresh at the moment of the action; a field that is absent, over its
/// bound, unreadable or (polled) stale makes it false.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Guard {
    /// Unique among the bundle's guards.
    pub name: String,
    pub declared_in: DeclaredIn,
    pub cover: Cover,
    /// The condition over `state()` only (no event), its constants in the
    /// bundle's pool.
    pub when: Program,
    /// The `state()` pairs `when` reads, as indices into the bundle's
    /// `state_pairs`, in order of first use: what the fresh read asks for.
    pub reads: Vec<u32>,
    /// The `when` as written, for `rulec dump`, `v1.show` and the log.
    pub when_text: String,
    /// A dashboard toast on refusal (`notify`, severity `warning`, id = the
    /// guard's name).
    pub say: Option<String>,
}

/// One `[[limit]]`: at most `max` covered actions in any window of
/// `per_ns`, counted over all rules together.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limit {
    /// Unique among the bundle's limits.
    pub name: String,
    pub declared_in: DeclaredIn,
    pub cover: Cover,
    /// At least 1.
    pub max: u32,
    /// Nanoseconds, more than 0.
    pub per_ns: u64,
}

/// A rule's loop breaker (`trip = { starts, per, pause }`): more than
/// `starts` run starts in any window of `per_ns` refuse its triggers for
/// `pause_ns`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trip {
    /// At least 1.
    pub starts: u32,
    /// Nanoseconds, more than 0.
    pub per_ns: u64,
    /// Nanoseconds, more than 0.
    pub pause_ns: u64,
}

impl Trip {
    /// Every rule's breaker unless it sets `trip`: 100 starts per 10 s,
    /// then a 60 s pause.
    pub const DEFAULT: Trip = Trip {
        starts: 100,
        per_ns: 10_000_000_000,
        pause_ns: 60_000_000_000,
    };
}

/// The `trip` key of a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Breaker {
    /// No `trip` key: [`Trip::DEFAULT`].
    #[default]
    Default,
    /// `trip = false`: never tripped.
    Off,
    /// `trip = { ... }`, the keys not written at their defaults.
    Set(Trip),
}

impl Breaker {
    /// The breaker in force; `None` when it is off.
    pub fn trip(self) -> Option<Trip> {
        match self {
            Breaker::Default => Some(Trip::DEFAULT),
            Breaker::Off => None,
            Breaker::Set(trip) => Some(trip),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bundle::Text;

    fn push(list: &str) -> Action {
        Action::Redis {
            list: list.into(),
            push: Text::Plain("x".into()),
            timeout_ns: 1,
        }
    }

    #[test]
    fn a_cover_matches_its_list_and_values() {
        let cover = Cover {
            target: Target::List("scooter:power".into()),
            values: vec![ValuePattern::parse("hibernate-for:<int>").unwrap()],
        };
        assert!(cover.covers(&push("scooter:power"), "hibernate-for:30"));
        assert!(!cover.covers(&push("scooter:power"), "run"));
        assert!(!cover.covers(&push("scooter:state"), "hibernate-for:30"));
        let every = Cover {
            values: Vec::new(),
            ..cover.clone()
        };
        assert!(every.covers(&push("scooter:power"), "run"));
        assert_eq!(cover.describe(), "scooter:power [hibernate-for:<int>]");
    }

    #[test]
    fn exec_covers_every_exec_and_nothing_else() {
        let cover = Cover {
            target: Target::Exec,
            values: Vec::new(),
        };
        let exec = Action::Exec {
            command: "true".into(),
            timeout_ns: 1,
        };
        assert!(cover.covers(&exec, ""));
        assert!(!cover.covers(&push("scooter:power"), ""));
    }

    #[test]
    fn the_default_breaker_is_100_per_10s_pausing_60s() {
        assert_eq!(Breaker::default().trip(), Some(Trip::DEFAULT));
        assert_eq!(Breaker::Off.trip(), None);
    }
}

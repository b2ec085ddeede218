//! Overrides kept in `NS:overrides` (docs/operating.md#turning-a-rule-off-or-on):
//! read once at start and applied to the engine before anything is
//! subscribed; `v1.set-enabled` changes one and the control server writes
//! it back. An override for a rule the bundle lacks is kept and reported.
//! A protected rule (docs/operating.md#trust) takes no stored override:
//! anyone reaching Redis can write `NS:overrides`, so only a change a
//! signed request made in this process still holds for it across a reload.

use crate::connection::{describe, query};
use redis::aio::ConnectionManager;
use ruled_engine::Engine;
use std::collections::{BTreeMap, BTreeSet};

/// The stored value of a rule turned on / off.
pub const ENABLED: &str = "enabled";
pub const DISABLED: &str = "disabled";

/// The stored word for `enabled`.
pub fn word(enabled: bool) -> &'static str {
    if enabled {
        ENABLED
    } else {
        DISABLED
    }
}

/// Every override, by rule name: what `NS:overrides` holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    by_rule: BTreeMap<String, bool>,
    /// Protected rules whose override a signed request set since the start.
    signed: BTreeSet<String>,
}

impl Overrides {
    /// Reads `key`. A value other than `enabled`/`disabled` is logged with
    /// its rule and left alone (neither applied nor removed).
    pub async fn load(con: &mut ConnectionManager, key: &str) -> Result<Self, redis::RedisError> {
        let fields: Vec<(String, String)> = query(con, redis::cmd("HGETALL").arg(key)).await?;
        let mut by_rule = BTreeMap::new();
        for (rule, value) in fields {
            match value.as_str() {
                ENABLED => by_rule.insert(rule, true),
                DISABLED => by_rule.insert(rule, false),
                _ => {
                    tracing::warn!(
                        rule = %rule,
                        "override in `{key}` is `{value}`, neither `{ENABLED}` nor `{DISABLED}`: not applied"
                    );
                    None
                }
            };
        }
        Ok(Self {
            by_rule,
            signed: BTreeSet::new(),
        })
    }

    /// Applies every override to the engine, each logged at `warn` (a
    /// stored override is a change someone made); one for a rule the bundle
    /// lacks is logged and kept. One naming a protected rule is ignored,
    /// and forgotten here (not in Redis), unless a signed request set it.
    pub fn apply(&mut self, engine: &mut Engine) {
        let ignored: Vec<String> = self
            .by_rule
            .keys()
            .filter(|rule| is_protected(engine, rule) && !self.signed.contains(*rule))
            .cloned()
            .collect();
        for rule in ignored {
            let enabled = self.by_rule.remove(&rule).unwrap_or(true);
            tracing::warn!(
                rule = %rule,
                state = word(enabled),
                "override ignored: the rule is protected (`protected = true`); only a signed \
                 control request changes it"
            );
        }
        for (rule, &enabled) in &self.by_rule {
            match engine.set_enabled(rule, enabled) {
                Ok(_) => tracing::warn!(rule = %rule, state = word(enabled), "override applied"),
                Err(e) => tracing::warn!(
                    rule = %rule,
                    state = word(enabled),
                    "override kept but not applied: {e}"
                ),
            }
        }
    }

    pub fn get(&self, rule: &str) -> Option<bool> {
        self.by_rule.get(rule).copied()
    }

    /// Keeps a change a control request made, `signed` or not.
    pub fn set(&mut self, rule: &str, enabled: bool, signed: bool) {
        self.by_rule.insert(rule.to_string(), enabled);
        if signed {
            self.signed.insert(rule.to_string());
        } else {
            self.signed.remove(rule);
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, bool)> + '_ {
        self.by_rule.iter().map(|(rule, &on)| (rule.as_str(), on))
    }
}

/// Whether the loaded bundle's rule `rule` is protected.
pub fn is_protected(engine: &Engine, rule: &str) -> bool {
    engine
        .rule_index(rule)
        .and_then(|index| engine.payload().rules.get(index))
        .is_some_and(rulecore::bundle::Rule::protected)
}

/// `HSET key rule enabled|disabled`, as the control server keeps a change.
pub async fn store(
    con: &mut redis::aio::MultiplexedConnection,
    key: &str,
    rule: &str,
    enabled: bool,
) -> Result<(), String> {
    redis::cmd("HSET")
        .arg(key)
        .arg(rule)
        .arg(word(enabled))
        .query_async::<i64>(con)
        .await
        .map(drop)
        .map_err(|e| describe(&e))
}

//! Overrides kept in `NS:overrides` (docs/operating.md#turning-a-rule-off-or-on):
//! read once at start and applied to the engine before anything is
//! subscribed; `v1.set-enabled` changes one and the control server writes
//! it back. An override for a rule the bundle lacks is kept and reported.

use crate::connection::{describe, query};
use redis::aio::ConnectionManager;
use ruled_engine::Engine;
use std::collections::BTreeMap;

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
        Ok(Self { by_rule })
    }

    /// Applies every override to the engine; one for a rule the bundle
    /// lacks is logged and kept.
    pub fn apply(&self, engine: &mut Engine) {
        for (rule, &enabled) in &self.by_rule {
            match engine.set_enabled(rule, enabled) {
                Ok(_) => tracing::info!(rule = %rule, state = word(enabled), "override applied"),
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

    pub fn set(&mut self, rule: &str, enabled: bool) {
        self.by_rule.insert(rule.to_string(), enabled);
    }

    /// Forgets the override of `rule`; returns what it was.
    pub fn remove(&mut self, rule: &str) -> Option<bool> {
        self.by_rule.remove(rule)
    }

    /// Every override against the loaded bundle, by rule name: what a
    /// reload says is in force (docs/operating.md#turning-a-rule-off-or-on).
    pub fn in_force(&self, engine: &Engine) -> Vec<InForce> {
        self.iter()
            .map(|(rule, enabled)| InForce {
                rule: rule.to_string(),
                enabled,
                bundle: engine
                    .rule_index(rule)
                    .and_then(|index| engine.payload().rules.get(index))
                    .map(|spec| spec.enabled),
            })
            .collect()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, bool)> + '_ {
        self.by_rule.iter().map(|(rule, &on)| (rule.as_str(), on))
    }
}

/// One override against the loaded bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InForce {
    pub rule: String,
    /// What the override says.
    pub enabled: bool,
    /// What the bundle says; `None`: the bundle has no such rule.
    pub bundle: Option<bool>,
}

impl InForce {
    /// The override says otherwise than the bundle's `enabled`.
    pub fn contradicts(&self) -> bool {
        self.bundle.is_some_and(|bundle| bundle != self.enabled)
    }

    /// `name=enabled (bundle: off)`, as the reload's log line lists it.
    pub fn describe(&self) -> String {
        let bundle = match self.bundle {
            Some(true) => "on",
            Some(false) => "off",
            None => "no such rule",
        };
        format!("{}={} (bundle: {bundle})", self.rule, word(self.enabled))
    }

    /// One entry of `v1.reload`'s `overrides`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "name": self.rule,
            "override": word(self.enabled),
            "bundle-enabled": self.bundle,
            "contradicts": self.contradicts(),
        })
    }
}

/// Keeps a change in `key`: `HSET key rule enabled|disabled`, or `HDEL key
/// rule` for an override removed (`enabled` is `None`).
pub async fn store(
    con: &mut redis::aio::MultiplexedConnection,
    key: &str,
    rule: &str,
    enabled: Option<bool>,
) -> Result<(), String> {
    let command = match enabled {
        Some(enabled) => {
            let mut command = redis::cmd("HSET");
            command.arg(key).arg(rule).arg(word(enabled));
            command
        }
        None => {
            let mut command = redis::cmd("HDEL");
            command.arg(key).arg(rule);
            command
        }
    };
    command
        .query_async::<i64>(con)
        .await
        .map(drop)
        .map_err(|e| describe(&e))
}

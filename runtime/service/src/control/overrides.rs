//! Overrides kept in `NS:overrides` (docs/operating.md#turning-a-rule-off-or-on):
//! read once at start and applied to the engine before anything is
//! subscribed; `v1.set-enabled` changes one and the control server writes
//! it back. An override for a rule the bundle lacks is kept and counted.
//!
//! Anyone can write the hash, so it is read within bounds
//! (docs/service.md#what-ruled-reads-and-its-bounds): only the bundle's
//! rule names are looked up, a few hundred per script, which sends a
//! value's length instead of a value over [`MAX_VALUE_BYTES`] (and removes
//! that entry); the rest of the hash is only counted (`HLEN`).
//!
//! A protected rule (docs/operating.md#trust) takes no stored override:
//! anyone reaching Redis can write `NS:overrides`, so only a change a
//! signed request made in this process still holds for it across a reload.

use crate::connection::{describe, query};
use crate::logging;
use redis::aio::ConnectionManager;
use rulecore::bundle::Payload;
use ruled_engine::Engine;
use std::collections::{BTreeMap, BTreeSet};

/// The longest override value read: `enabled` and `disabled` are shorter.
pub const MAX_VALUE_BYTES: usize = 16;
/// Rule names looked up per script.
const NAMES_PER_READ: usize = 512;
/// How much of a bad value a log line shows.
const SHOWN_BYTES: usize = 200;

/// Entries naming no rule of the bundle that `v1.list` shows by name (the
/// rest are counted), and scan rounds spent finding them.
pub const SHOWN_WITHOUT_RULE: usize = 100;
const SCAN_ROUNDS: usize = 64;

/// One `HSCAN` round of `KEYS[1]` from cursor `ARGV[1]`: the cursor, then
/// name and value of each entry whose name is at most `ARGV[2]` bytes and
/// value at most `ARGV[3]` (nothing else is sent).
const SCAN_SCRIPT: &str = r"
local scan = redis.call('HSCAN', KEYS[1], ARGV[1], 'COUNT', 100)
local out = {scan[1]}
local fields = scan[2]
for i = 1, #fields, 2 do
  if string.len(fields[i]) <= tonumber(ARGV[2]) and string.len(fields[i + 1]) <= tonumber(ARGV[3]) then
    out[#out + 1] = fields[i]
    out[#out + 1] = fields[i + 1]
  end
end
return out
";

/// `HGET`s `KEYS[1]` for each name in `ARGV[2..]`: nil when absent, the
/// value, or (removing the entry) the value's length when it is over
/// `ARGV[1]` bytes. First comes `HLEN`; an empty hash is not looked into
/// (no `HGET` at all: nothing of Redis is read for a namespace without
/// overrides).
const READ_SCRIPT: &str = r"
local out = {redis.call('HLEN', KEYS[1])}
if out[1] == 0 then
  return out
end
for i = 2, #ARGV do
  local value = redis.call('HGET', KEYS[1], ARGV[i])
  if not value then
    out[#out + 1] = ''
  elseif string.len(value) > tonumber(ARGV[1]) then
    redis.call('HDEL', KEYS[1], ARGV[i])
    out[#out + 1] = string.len(value)
  else
    out[#out + 1] = {value}
  end
end
return out
";

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

/// The overrides of the bundle's rules (and those set since), by rule
/// name; and how many entries of `NS:overrides` name no rule of the
/// bundle (never read).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    by_rule: BTreeMap<String, bool>,
    /// Protected rules whose override a signed request set since the start.
    signed: BTreeSet<String>,
    without_rule: usize,
    /// The first [`SHOWN_WITHOUT_RULE`] of those, by name.
    shown_without_rule: Vec<(String, bool)>,
}

/// What the read script said of one name.
enum Read {
    Absent,
    Oversized(i64),
    Value(Vec<u8>),
}

impl Overrides {
    /// Reads `key` for the rules of `payload`. A value over
    /// [`MAX_VALUE_BYTES`] or not UTF-8 is removed with one line, escaped
    /// and clipped; another word than `enabled`/`disabled` is logged with
    /// its rule and left alone (neither applied nor removed).
    pub async fn load(
        con: &mut ConnectionManager,
        key: &str,
        payload: &Payload,
    ) -> Result<Self, redis::RedisError> {
        let mut by_rule = BTreeMap::new();
        let mut stored = 0;
        let mut found = 0;
        let names: Vec<&str> = payload.rules.iter().map(|rule| &*rule.name).collect();
        for chunk in names.chunks(NAMES_PER_READ) {
            let (total, reads) = read_chunk(con, key, chunk).await?;
            stored = total;
            for (rule, read) in chunk.iter().zip(reads) {
                if !matches!(read, Read::Absent) {
                    found += 1;
                }
                if let Some(enabled) = judge(con, key, rule, read).await? {
                    by_rule.insert((*rule).to_string(), enabled);
                }
            }
        }
        if names.is_empty() {
            stored = query(con, redis::cmd("HLEN").arg(key)).await?;
        }
        let without_rule = stored.saturating_sub(found);
        let mut shown_without_rule = Vec::new();
        if without_rule > 0 {
            shown_without_rule = scan_without_rule(con, key, &names).await?;
            tracing::info!(
                entries = without_rule,
                "overrides in `{key}` name no rule of the bundle: kept, not applied, \
                 not read (`v1.list` counts them)"
            );
        }
        Ok(Self {
            by_rule,
            signed: BTreeSet::new(),
            without_rule,
            shown_without_rule,
        })
    }

    /// The first few entries that name no rule of the bundle.
    pub fn shown_without_rule(&self) -> &[(String, bool)] {
        &self.shown_without_rule
    }

    /// Entries of the hash at start that named no rule of the bundle.
    pub fn without_rule(&self) -> usize {
        self.without_rule
    }

    /// Applies every override to the engine, each logged at `warn` (a
    /// stored override is a change someone made); one for a rule the bundle
    /// lacks is logged and kept. One naming a protected rule is ignored,
    /// and forgotten here (not in Redis), unless a signed request set it.
    pub fn apply(&mut self, engine: &mut Engine) {
        self.apply_at(engine, tracing::Level::WARN);
    }

    /// [`Overrides::apply`] after a reload: each applied override at
    /// `debug`, since the reload's `info` line lists them all and a `warn`
    /// line names each that contradicts the new bundle (docs/service.md#live-reload:
    /// a routine deploy is not a warning).
    pub fn apply_again(&mut self, engine: &mut Engine) {
        self.apply_at(engine, tracing::Level::DEBUG);
    }

    fn apply_at(&mut self, engine: &mut Engine, applied: tracing::Level) {
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
                Ok(_) if applied == tracing::Level::WARN => {
                    tracing::warn!(rule = %rule, state = word(enabled), "override applied");
                }
                Ok(_) => tracing::debug!(rule = %rule, state = word(enabled), "override applied"),
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

    /// Keeps what signed requests set from `before` (a reload reads the
    /// hash again; who wrote it there cannot be told).
    pub fn keep_signed(&mut self, before: &Overrides) {
        for rule in &before.signed {
            if let Some(&enabled) = before.by_rule.get(rule) {
                self.by_rule.insert(rule.clone(), enabled);
                self.signed.insert(rule.clone());
            }
        }
    }

    /// Forgets the override of `rule`; returns what it was.
    pub fn remove(&mut self, rule: &str) -> Option<bool> {
        self.signed.remove(rule);
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

/// Whether the loaded bundle's rule `rule` is protected.
pub fn is_protected(engine: &Engine, rule: &str) -> bool {
    engine
        .rule_index(rule)
        .and_then(|index| engine.payload().rules.get(index))
        .is_some_and(rulecore::bundle::Rule::protected)
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

    /// One entry of `v1.reload`'s `overrides`, typed.
    pub fn entry(&self) -> super::protocol::OverrideInForce {
        super::protocol::OverrideInForce {
            name: self.rule.clone(),
            state: word(self.enabled).to_string(),
            bundle_enabled: self.bundle,
            contradicts: self.contradicts(),
        }
    }
}

/// Up to [`SHOWN_WITHOUT_RULE`] entries of `key` with a short UTF-8 name
/// that is none of `names` and a good word, in at most [`SCAN_ROUNDS`]
/// bounded scan rounds.
async fn scan_without_rule(
    con: &mut ConnectionManager,
    key: &str,
    names: &[&str],
) -> Result<Vec<(String, bool)>, redis::RedisError> {
    let bundle: std::collections::HashSet<&str> = names.iter().copied().collect();
    let mut shown = Vec::new();
    let mut cursor = b"0".to_vec();
    for _ in 0..SCAN_ROUNDS {
        let mut script = redis::cmd("EVAL");
        script
            .arg(SCAN_SCRIPT)
            .arg(1)
            .arg(key)
            .arg(&cursor)
            .arg(SHOWN_BYTES)
            .arg(MAX_VALUE_BYTES);
        let round: Vec<Vec<u8>> = query(con, &script).await?;
        let mut round = round.into_iter();
        cursor = round.next().unwrap_or_else(|| b"0".to_vec());
        while let (Some(name), Some(value)) = (round.next(), round.next()) {
            let (Ok(name), Ok(value)) = (String::from_utf8(name), String::from_utf8(value)) else {
                continue;
            };
            let enabled = match value.as_str() {
                ENABLED => true,
                DISABLED => false,
                _ => continue,
            };
            if shown.len() < SHOWN_WITHOUT_RULE && !bundle.contains(name.as_str()) {
                shown.push((name, enabled));
            }
        }
        if cursor == b"0" || shown.len() >= SHOWN_WITHOUT_RULE {
            break;
        }
    }
    shown.sort();
    Ok(shown)
}

/// One read script over `names`: `HLEN`, then each name's [`Read`].
async fn read_chunk(
    con: &mut ConnectionManager,
    key: &str,
    names: &[&str],
) -> Result<(usize, Vec<Read>), redis::RedisError> {
    let mut script = redis::cmd("EVAL");
    script.arg(READ_SCRIPT).arg(1).arg(key).arg(MAX_VALUE_BYTES);
    for name in names {
        script.arg(*name);
    }
    let values: Vec<redis::Value> = query(con, &script).await?;
    let mut values = values.into_iter();
    let total = values
        .next()
        .and_then(|v| redis::from_redis_value::<usize>(v).ok())
        .unwrap_or(0);
    let reads = values
        .map(|value| match value {
            redis::Value::Int(len) => Read::Oversized(len),
            redis::Value::Array(mut inner) => match inner.pop() {
                Some(redis::Value::BulkString(bytes)) => Read::Value(bytes),
                _ => Read::Absent,
            },
            _ => Read::Absent,
        })
        .collect();
    Ok((total, reads))
}

/// What one entry of a bundle rule means: `Some(enabled)` for a good
/// word; otherwise logged (and removed when oversized or not UTF-8).
async fn judge(
    con: &mut ConnectionManager,
    key: &str,
    rule: &str,
    read: Read,
) -> Result<Option<bool>, redis::RedisError> {
    let bytes = match read {
        Read::Absent => return Ok(None),
        Read::Oversized(len) => {
            tracing::warn!(
                rule = %rule,
                "override in `{key}` removed: its value is {len} bytes, over the \
                 {MAX_VALUE_BYTES}-byte bound"
            );
            return Ok(None);
        }
        Read::Value(bytes) => bytes,
    };
    let shown = logging::escape_controls(&bytes[..bytes.len().min(SHOWN_BYTES)]);
    match std::str::from_utf8(&bytes) {
        Ok(ENABLED) => Ok(Some(true)),
        Ok(DISABLED) => Ok(Some(false)),
        Ok(_) => {
            tracing::warn!(
                rule = %rule,
                "override in `{key}` is `{shown}`, neither `{ENABLED}` nor `{DISABLED}`: not applied"
            );
            Ok(None)
        }
        Err(_) => {
            let _: i64 = query(con, redis::cmd("HDEL").arg(key).arg(rule)).await?;
            tracing::warn!(
                rule = %rule,
                "override in `{key}` removed: its value `{shown}` is not UTF-8"
            );
            Ok(None)
        }
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

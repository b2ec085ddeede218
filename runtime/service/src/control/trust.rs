//! Who may act over the control protocol (docs/operating.md#trust): the
//! server's side of the control key. With a key, every reply is signed
//! over the request it answers; a signed request is checked, and served
//! once (its id kept in this process and in Redis, `NS:seen:<id>`, so a
//! restart does not forget it); `--control-mutations signed` refuses an
//! unsigned request that changes state. Which requests are signed reaches
//! the methods, so a protected rule can ask for a signed one to be turned
//! off; and what an unsigned request may change at all is decided here
//! ([`unsigned_may_perform`], and for an emitted event
//! [`unsigned_may_emit`]).

use super::signing::{self, ControlKey};
use super::wire::{ControlKeys, Reply, Request, MAX_REPLY_BYTES};
use crate::connection::describe;
use redis::aio::MultiplexedConnection;
use rulecore::bundle::{Action, Rule};
use ruled_engine::Engine;
use std::collections::{HashSet, VecDeque};

/// `--control-mutations`: which state-changing requests are served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Mutations {
    /// Signed or not (`lsc` signs nothing).
    #[default]
    Any,
    /// Only requests signed with the control key.
    Signed,
}

/// The methods that change nothing; every other method (`v1.set-enabled`,
/// `v1.reload`, `v1.add`, `v1.emit`, and any added later) changes state.
const READ_ONLY: &[&str] = &[
    "v1.status",
    "v1.list",
    "v1.show",
    "v1.test",
    "v1.pending",
    "v1.trace",
    "v1.guards",
];

/// Whether `method` changes state (a rule on or off, the bundle, rules).
pub fn changes_state(method: &str) -> bool {
    !READ_ONLY.contains(&method)
}

/// Signed request ids remembered against a replay, at most: more signed
/// requests than this within one deadline window (30 s) are refused.
const MAX_REMEMBERED: usize = 4096;

/// Room a signature takes in a reply (`,"signature":"<64 hex>"`).
const SIGNATURE_ROOM: usize = 96;

#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    #[error(
        "--control-mutations signed needs --control-key (RULED_CONTROL_KEY): without a key \
         no request can be signed, and nothing could change state"
    )]
    SignedWithoutKey,
}

/// `--control-key` and `--control-mutations`, as the service is told them.
#[derive(Debug, Clone, Default)]
pub struct TrustConfig {
    pub key: Option<ControlKey>,
    pub mutations: Mutations,
}

/// The server's trust settings and what it remembers of signed requests.
#[derive(Debug, Default)]
pub struct Trust {
    key: Option<ControlKey>,
    mutations: Mutations,
    /// Ids of signed requests served, with their deadlines (Unix ms),
    /// oldest first; forgotten once past their deadline, after which the
    /// request is refused as late anyway.
    served: VecDeque<(i64, String)>,
    served_ids: HashSet<String>,
}

impl Trust {
    pub fn new(config: TrustConfig) -> Result<Self, TrustError> {
        if config.key.is_none() && config.mutations == Mutations::Signed {
            return Err(TrustError::SignedWithoutKey);
        }
        Ok(Self {
            key: config.key,
            mutations: config.mutations,
            ..Self::default()
        })
    }

    /// Whether `request` (popped as `bytes`, checked against the server's
    /// clock `now_ms`) is served, and signed: `Err` is the reply refusing
    /// it.
    pub fn judge(&mut self, bytes: &[u8], request: &Request, now_ms: i64) -> Result<bool, Reply> {
        let signed = match (&request.signature, &self.key) {
            (Some(_), Some(key)) => {
                let verified = signing::detach(bytes)
                    .is_some_and(|(body, signature)| key.verifies_request(&body, &signature));
                if !verified {
                    return Err(Reply::error(format!(
                        "`{}` refused: its signature does not verify (signed with another \
                         key than {}, or altered on the way through `NS:rpc`)",
                        clip(&request.method),
                        key.path().display()
                    )));
                }
                self.remember(request, now_ms)?;
                true
            }
            // No key here: a signature cannot be checked, so it counts for
            // nothing (a protected rule then says why it stays on).
            (Some(_), None) | (None, _) => false,
        };
        if !signed && self.mutations == Mutations::Signed && changes_state(&request.method) {
            return Err(Reply::error(format!(
                "`{}` changes state, and this ruled serves only signed requests that do \
                 (--control-mutations signed): send it with `ruled ctl --control-key FILE`",
                clip(&request.method)
            )));
        }
        Ok(signed)
    }

    /// Serves a signed request once: the same signed request pushed again
    /// before its deadline (by whoever read it off `NS:rpc`) is refused.
    fn remember(&mut self, request: &Request, now_ms: i64) -> Result<(), Reply> {
        while let Some((deadline, _)) = self.served.front() {
            if *deadline >= now_ms {
                break;
            }
            if let Some((_, id)) = self.served.pop_front() {
                self.served_ids.remove(&id);
            }
        }
        if self.served_ids.contains(&request.id) {
            return Err(Reply::error(format!(
                "`{}` refused: a signed request with id {} was served already (a replay)",
                clip(&request.method),
                request.id
            )));
        }
        if self.served.len() >= MAX_REMEMBERED {
            return Err(Reply::error(format!(
                "`{}` refused: over {MAX_REMEMBERED} signed requests within their deadlines; \
                 retry in a few seconds",
                clip(&request.method)
            )));
        }
        self.served_ids.insert(request.id.clone());
        self.served
            .push_back((request.deadline, request.id.clone()));
        Ok(())
    }

    /// The reply to the request popped as `request` as published: at most
    /// [`MAX_REPLY_BYTES`], signed when there is a key.
    pub fn seal(&self, request: &[u8], reply: &Reply) -> String {
        let Some(key) = &self.key else {
            return reply.encode_within(MAX_REPLY_BYTES);
        };
        let body = reply.encode_within(MAX_REPLY_BYTES - SIGNATURE_ROOM);
        let signature = key.sign_reply(request, body.as_bytes());
        signing::attach(&body, &signature)
    }
}

/// Keeps a signed request's id in Redis until its deadline before it is
/// acted on (`SET NS:seen:<id> 1 PX <ms to its deadline> NX`): the same
/// request pushed again after a restart, while still within its deadline,
/// finds the key and is refused. The process's own memory
/// ([`Trust::judge`]) still catches a replay whose key a client deleted.
/// A key that cannot be written refuses the request: served unrecorded,
/// it could be served twice.
pub async fn claim_once(
    con: &mut MultiplexedConnection,
    keys: &ControlKeys,
    request: &Request,
    now_ms: i64,
) -> Result<(), Reply> {
    let key = keys.seen(&request.id);
    // The deadline is at most 30 s ahead and not past (wire::read_request).
    let left_ms = request.deadline.saturating_sub(now_ms).max(1);
    let set: Result<Option<String>, _> = redis::cmd("SET")
        .arg(&key)
        .arg(1)
        .arg("PX")
        .arg(left_ms)
        .arg("NX")
        .query_async(con)
        .await;
    match set {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err(Reply::error(format!(
            "`{}` refused: a signed request with id {} was served already (a replay; `{key}` records it until its deadline)",
            clip(&request.method),
            request.id
        ))),
        Err(e) => Err(Reply::error(format!(
            "`{}` refused: its id could not be kept in `{key}` ({}), and a signed request is served only once it is recorded",
            clip(&request.method),
            describe(&e)
        ))),
    }
}

/// What an unsigned request may change (docs/operating.md#trust): nothing its sender
/// could not already do with plain Redis access. Any client of the
/// datastore can `LPUSH` a list and `PUBLISH` on a channel itself, so a
/// step that does only that (`redis`, `publish`, `notify`) gains it
/// nothing; running a program as `ruled`'s user (`exec`) or writing a raw
/// CAN frame (`can`) it cannot do, so those need a signed request. `Err`
/// is the action's kind. The one place this is decided: once guards
/// exist, a list or channel a guard covers is refused here
/// too. Every kind is named, so a new action kind needs a decision.
pub fn unsigned_may_perform(action: &Action) -> Result<(), &'static str> {
    match action {
        Action::Redis { .. } | Action::Publish { .. } | Action::Notify(_) => Ok(()),
        Action::Exec { .. } => Err("exec"),
        Action::Can(_) => Err("can"),
    }
}

/// An event an unsigned `v1.emit` may not hand the rules: one the bus
/// refuses, so emitting it would give more than Redis access does.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EmitNeedsSignature {
    #[error(
        "`{0}` is an `input.*` topic, which only its input makes and the bus never carries: \
         emitting it needs a signed request (--control-key; docs/operating.md#trust)"
    )]
    Input(String),
    #[error(
        "`{0}` is an owned topic (this ruled derives it, or its family, and refuses it from \
         the bus): emitting it needs a signed request (--control-key; \
         docs/operating.md#trust); unsigned, only topics any Redis client could publish on \
         `ev:<topic>` are taken"
    )]
    Owned(String),
}

/// What an unsigned `v1.emit` may hand the rules (docs/operating.md#trust):
/// an event any Redis client could have the rules take itself, by
/// `PUBLISH ev:<topic>`. The bus refuses an owned topic (of a family the
/// profile derives) and an `input.*` one ([`Engine::refuses_from_bus`], the
/// one definition), so those need a signed request.
pub fn unsigned_may_emit(engine: &Engine, topic: &str) -> Result<(), EmitNeedsSignature> {
    if !engine.refuses_from_bus(topic) {
        return Ok(());
    }
    let topic = clip(topic);
    if topic.starts_with("input.") {
        Err(EmitNeedsSignature::Input(topic))
    } else {
        Err(EmitNeedsSignature::Owned(topic))
    }
}

/// A rule an unsigned request may not add: one of its steps needs a
/// signature.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{} `{kind}` step needs a signed request (--control-key): {place} of rule `{rule}`; \
     unsigned, only rules whose steps are `redis`, `publish` and `notify` are taken, which \
     any Redis client could carry out itself (docs/operating.md#trust)",
    if kind.starts_with(['a', 'e', 'i', 'o', 'u']) { "an" } else { "a" }
)]
pub struct NeedsSignature {
    pub kind: &'static str,
    pub rule: String,
    /// `step 2`, `finally step 1` (from 1, as people count).
    pub place: String,
}

/// Whether an unsigned request may add `rule`: every step and finally
/// step through [`unsigned_may_perform`].
pub fn unsigned_may_add(rule: &Rule) -> Result<(), NeedsSignature> {
    for (n, step) in (1..).zip(rule.steps.iter()) {
        refuse_unsigned(rule, &step.action, || format!("step {n}"))?;
    }
    for (n, step) in (1..).zip(rule.finally()) {
        refuse_unsigned(rule, &step.action, || format!("finally step {n}"))?;
    }
    Ok(())
}

fn refuse_unsigned(
    rule: &Rule,
    action: &Action,
    place: impl FnOnce() -> String,
) -> Result<(), NeedsSignature> {
    unsigned_may_perform(action).map_err(|kind| NeedsSignature {
        kind,
        rule: clip(&rule.name),
        place: place(),
    })
}

/// A method name as a message may quote it.
fn clip(text: &str) -> String {
    text.chars().take(100).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_read_only_methods_change_nothing() {
        for method in [
            "v1.set-enabled",
            "v1.reload",
            "v1.add",
            "v1.emit",
            "v9.future",
        ] {
            assert!(changes_state(method), "{method}");
        }
        for method in READ_ONLY {
            assert!(!changes_state(method), "{method}");
        }
    }

    #[test]
    fn signed_mutations_need_a_key() {
        assert!(matches!(
            Trust::new(TrustConfig {
                key: None,
                mutations: Mutations::Signed
            }),
            Err(TrustError::SignedWithoutKey)
        ));
    }
}

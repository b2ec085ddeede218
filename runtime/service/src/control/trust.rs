//! Who may act over the control protocol (docs/operating.md#trust): the
//! server's side of the control key. With a key, every reply is signed
//! over the request it answers; a signed request is checked, and served
//! once; `--control-mutations signed` refuses an unsigned request that
//! changes state. Which requests are signed reaches the methods, so a
//! protected rule can ask for a signed one to be turned off.

use super::signing::{self, ControlKey};
use super::wire::{Reply, Request, MAX_REPLY_BYTES};
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
/// `v1.reload`, `v1.add`, and any added later) changes state.
const READ_ONLY: &[&str] = &[
    "v1.status",
    "v1.list",
    "v1.show",
    "v1.test",
    "v1.pending",
    "v1.trace",
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

/// A method name as a message may quote it.
fn clip(text: &str) -> String {
    text.chars().take(100).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_read_only_methods_change_nothing() {
        for method in ["v1.set-enabled", "v1.reload", "v1.add", "v9.future"] {
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

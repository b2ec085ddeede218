//! What the control server answers in its own task, off the engine's
//! loop (docs/operating.md#ruled-ctl): `v1.add` when there is a rules
//! directory ([`super::add`]), and the last rebuild `v1.status` reports
//! beside the engine's answer, read from `NS:rebuild`
//! (docs/operating.md#the-last-rebuild).

use super::add::{self, Adding};
use super::wire::{Reply, Request};
use redis::aio::MultiplexedConnection;

/// What the server needs for them.
#[derive(Debug, Clone, Default)]
pub struct Local {
    /// `--rules-dir`: `v1.add` writes there. `None`: the driver answers
    /// `v1.add` with the error of the protocol.
    pub adding: Option<Adding>,
    /// `NS:rebuild`.
    pub rebuild_key: String,
}

impl Local {
    /// The reply when the server answers `request` itself; `signed`: it
    /// was signed with the control key, and verified.
    pub async fn answer(&self, request: &Request, signed: bool) -> Option<Reply> {
        match (&self.adding, request.method.as_str()) {
            (Some(adding), "v1.add") => Some(add::answer(adding, &request.payload, signed).await),
            _ => None,
        }
    }

    /// Adds to the driver's `reply` what the server reads itself.
    pub async fn complete(
        &self,
        con: &mut MultiplexedConnection,
        request: &Request,
        reply: &mut Reply,
    ) {
        if request.method != "v1.status" || !reply.ok || !reply.payload.is_object() {
            return;
        }
        let last = super::bounded(crate::rebuild::read_last(con, &self.rebuild_key)).await;
        reply.payload["last-rebuild"] = match last {
            Ok(last) => last,
            Err(e) => {
                tracing::warn!("`{}` not read: {e}", self.rebuild_key);
                serde_json::json!({"unreadable": e})
            }
        };
    }
}

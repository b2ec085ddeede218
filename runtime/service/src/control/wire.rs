//! The control protocol's wire format (docs/operating.md#the-wire-format):
//! the request and reply JSON, their bounds, the keys they travel on, and
//! the Lua script that queues a request. Shared by the server and by
//! `ruled ctl`.

use crate::namespace::Namespace;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Requests waiting in `NS:rpc` beyond which a push is refused.
pub const MAX_WAITING: u32 = 32;
/// The expiry the push script sets on `NS:rpc`, in seconds: requests
/// nobody takes do not outlive a dead server for long.
pub const LIST_EXPIRY_SECS: u32 = 30;
/// The largest request the server reads.
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;
/// The largest reply the server publishes.
pub const MAX_REPLY_BYTES: usize = 512 * 1024;
/// How far past the server's clock a deadline may be: `lsc` stamps
/// deadlines from its own clock, which may run ahead of the Redis host's
/// (docs/operating.md#the-wire-format).
pub const MAX_AHEAD_MS: i64 = 30_000;

/// Pushes `ARGV[1]` onto the head of the list `KEYS[1]` unless `ARGV[2]`
/// requests already wait; sets the list's expiry to `ARGV[3]` seconds.
/// Returns 1 when pushed, 0 when refused. The head, as `lsc` pushes
/// (`LPUSH`): the server pops the tail, so requests are served first in,
/// first out.
pub const PUSH_SCRIPT: &str = r"
if redis.call('LLEN', KEYS[1]) >= tonumber(ARGV[2]) then
  return 0
end
redis.call('LPUSH', KEYS[1], ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[3])
return 1
";

/// The control keys of one namespace (docs/operating.md#the-wire-format).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlKeys {
    pub namespace: String,
    /// `NS:rpc`: the request list.
    pub rpc: String,
    /// `NS:overrides`: rule name -> `enabled` / `disabled`.
    pub overrides: String,
    /// What the other keys are derived from (`NS:seen:<id>`).
    space: Namespace,
}

impl ControlKeys {
    pub fn for_namespace(namespace: &Namespace) -> Self {
        Self {
            namespace: namespace.to_string(),
            rpc: namespace.rpc(),
            overrides: namespace.overrides(),
            space: namespace.clone(),
        }
    }

    /// `NS:seen:<id>`: a signed request `id` served, kept to its deadline.
    pub fn seen(&self, id: &str) -> String {
        self.space.seen(id)
    }

    /// `NS:rpc:reply:<id>`, where the reply to request `id` is published.
    pub fn reply_channel(&self, id: &str) -> String {
        format!("{}:reply:{id}", self.rpc)
    }
}

/// One request, as pushed onto `NS:rpc`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    /// 32 lowercase hex characters.
    pub id: String,
    pub method: String,
    pub reply_channel: String,
    /// Unix ms by the Redis server's clock (`TIME`).
    pub deadline: i64,
    #[serde(default)]
    pub payload: Value,
    /// The control key's signature of the request's text without this
    /// field, which comes last (docs/operating.md#trust); `lsc` sends none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
}

/// Why the server ignored a request (it answers none of these: a reply
/// channel it cannot trust is not published to).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Ignored {
    #[error("{bytes} bytes, over the {} KiB limit", MAX_REQUEST_BYTES / 1024)]
    TooLarge { bytes: usize },
    #[error("not a request: {0}")]
    Malformed(String),
    #[error("id `{0}` is not 32 lowercase hex characters")]
    BadId(String),
    #[error("reply channel `{got}` is not `{want}`")]
    WrongChannel { got: String, want: String },
    #[error("past its deadline by {0} ms")]
    PastDeadline(i64),
    #[error("deadline {0} ms ahead of the server's clock, more than {MAX_AHEAD_MS} ms")]
    TooFarAhead(i64),
}

/// Reads and checks one popped request against the server's clock
/// `now_ms` (Unix ms by Redis `TIME`).
pub fn read_request(bytes: &[u8], keys: &ControlKeys, now_ms: i64) -> Result<Request, Ignored> {
    if bytes.len() > MAX_REQUEST_BYTES {
        return Err(Ignored::TooLarge { bytes: bytes.len() });
    }
    let request: Request =
        serde_json::from_slice(bytes).map_err(|e| Ignored::Malformed(e.to_string()))?;
    if !is_request_id(&request.id) {
        return Err(Ignored::BadId(request.id.chars().take(64).collect()));
    }
    // Only the channel the id names: a request must not make the server
    // publish on an event channel.
    let want = keys.reply_channel(&request.id);
    if request.reply_channel != want {
        return Err(Ignored::WrongChannel {
            got: request.reply_channel.chars().take(200).collect(),
            want,
        });
    }
    // Saturating: a deadline of `i64::MIN` or `i64::MAX` must not wrap.
    if request.deadline < now_ms {
        return Err(Ignored::PastDeadline(
            now_ms.saturating_sub(request.deadline),
        ));
    }
    let ahead = request.deadline.saturating_sub(now_ms);
    if ahead > MAX_AHEAD_MS {
        return Err(Ignored::TooFarAhead(ahead));
    }
    Ok(request)
}

/// Whether `id` is 32 lowercase hex characters.
pub fn is_request_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// One reply, published on the request's reply channel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    pub ok: bool,
    #[serde(default)]
    pub payload: Value,
    /// Empty when `ok`.
    #[serde(default)]
    pub error: String,
}

impl Reply {
    pub fn ok(payload: Value) -> Self {
        Self {
            ok: true,
            payload,
            error: String::new(),
        }
    }

    pub fn error(message: impl Into<String>) -> Self {
        Self {
            ok: false,
            payload: Value::Null,
            error: message.into(),
        }
    }

    /// The reply as published: at most [`MAX_REPLY_BYTES`]. A longer one
    /// is replaced by an error reply that says how long it was and to ask
    /// for a page (`offset`/`limit`).
    pub fn encode(&self) -> String {
        self.encode_within(MAX_REPLY_BYTES)
    }

    /// [`Reply::encode`] within `limit` bytes (the room a signature leaves).
    pub fn encode_within(&self, limit: usize) -> String {
        let text = serde_json::to_string(self).unwrap_or_else(|e| {
            serde_json::json!({"ok": false, "payload": null, "error": format!("reply not encodable: {e}")})
                .to_string()
        });
        if text.len() <= limit {
            return text;
        }
        let too_long = Reply::error(format!(
            "the reply is {} bytes, over the {} KiB limit; ask for a smaller page \
             (`offset` and `limit`)",
            text.len(),
            MAX_REPLY_BYTES / 1024
        ));
        serde_json::to_string(&too_long).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> ControlKeys {
        ControlKeys::for_namespace(&Namespace::default())
    }

    fn request(deadline: i64) -> String {
        let id = "0123456789abcdef0123456789abcdef";
        serde_json::json!({
            "id": id, "method": "v1.status",
            "reply_channel": keys().reply_channel(id), "deadline": deadline, "payload": {}
        })
        .to_string()
    }

    #[test]
    fn keys_hang_off_the_namespace() {
        let keys = ControlKeys::for_namespace(
            &Namespace::parse("ruled").unwrap_or_else(|e| panic!("{e}")),
        );
        assert_eq!(keys.rpc, "ruled:rpc");
        assert_eq!(keys.overrides, "ruled:overrides");
        assert_eq!(keys.reply_channel("ab"), "ruled:rpc:reply:ab");
    }

    #[test]
    fn a_request_is_checked_against_the_server_clock() {
        assert!(read_request(request(1_000).as_bytes(), &keys(), 1_000).is_ok());
        assert_eq!(
            read_request(request(999).as_bytes(), &keys(), 1_000),
            Err(Ignored::PastDeadline(1))
        );
        assert_eq!(
            read_request(request(31_001).as_bytes(), &keys(), 1_000),
            Err(Ignored::TooFarAhead(30_001))
        );
        assert!(read_request(request(31_000).as_bytes(), &keys(), 1_000).is_ok());
    }

    #[test]
    fn malformed_foreign_and_oversized_requests_are_ignored() {
        assert!(matches!(
            read_request(b"nope", &keys(), 0),
            Err(Ignored::Malformed(_))
        ));
        let other = request(10).replace("extensions:rpc:reply", "ev:alarm");
        assert!(matches!(
            read_request(other.as_bytes(), &keys(), 0),
            Err(Ignored::WrongChannel { .. })
        ));
        let upper = request(10).replace("abcdef\",", "ABCDEF\",");
        assert!(matches!(
            read_request(upper.as_bytes(), &keys(), 0),
            Err(Ignored::BadId(_))
        ));
        let big = vec![b' '; MAX_REQUEST_BYTES + 1];
        assert!(matches!(
            read_request(&big, &keys(), 0),
            Err(Ignored::TooLarge { .. })
        ));
    }

    #[test]
    fn a_reply_over_the_limit_becomes_an_error_asking_for_a_page() {
        let big = Reply::ok(Value::String("x".repeat(MAX_REPLY_BYTES)));
        let text = big.encode();
        let reply: Reply = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
        assert!(!reply.ok);
        assert!(reply.error.contains("smaller page"), "{}", reply.error);
    }
}

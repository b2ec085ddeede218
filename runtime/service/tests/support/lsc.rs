//! The control protocol spoken as `lsc` speaks it (docs/operating.md#the-fields-lsc-reads):
//! subscribe to the reply channel, `LPUSH` the request, wait for the one
//! reply. For the contract tests that decode replies with `lsc`'s types.

#![allow(clippy::unwrap_used)] // test support: a failed call fails the test

use super::RedisServer;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The answer as published: `{ok, payload, error}`.
#[derive(Debug, Deserialize)]
pub struct Reply {
    pub ok: bool,
    pub payload: Value,
    pub error: String,
}

/// The Redis server's clock, Unix ms.
pub fn server_ms(redis: &RedisServer) -> i64 {
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query(&mut redis.con()).unwrap();
    secs * 1000 + micros / 1000
}

/// A fresh 32-hex-character request id.
pub fn request_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!(
        "{:016x}{:016x}",
        u64::from(std::process::id()),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// `method` asked of the `extensions` namespace, with a deadline `ahead`
/// of Redis's clock; the reply is waited for 5 s past it.
pub fn call_within(redis: &RedisServer, method: &str, payload: Value, ahead: Duration) -> Reply {
    let id = request_id();
    let channel = format!("extensions:rpc:reply:{id}");
    let mut watcher = redis.con();
    let mut replies = watcher.as_pubsub();
    replies.subscribe(&channel).unwrap();
    let wait = ahead + Duration::from_secs(5);
    replies.set_read_timeout(Some(wait)).unwrap();
    let ahead_ms = i64::try_from(ahead.as_millis()).unwrap();
    let request = json!({
        "id": id, "method": method, "reply_channel": channel,
        "deadline": server_ms(redis) + ahead_ms, "payload": payload,
    });
    let _: i64 = redis.query(&["LPUSH", "extensions:rpc", &request.to_string()]);
    let message = replies
        .get_message()
        .unwrap_or_else(|e| panic!("no reply to {method} within {wait:?}: {e}"));
    let text: String = message.get_payload().unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not a reply ({e}): {text}"))
}

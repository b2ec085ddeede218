//! Taking requests off `NS:rpc` within their bound
//! (docs/service.md#what-ruled-reads-and-its-bounds): anyone can `RPUSH`
//! anything there, so no item is read whole before its length is known.
//! The blocking pop goes over a connection of its own read by the
//! subscription reader ([`crate::pubsub`]), which skips a bulk string over
//! the bound while reading it; the items behind it (up to a full list) come
//! in one script that sends the length instead of an oversized item, with
//! the server's clock. So a junk flood is emptied a list at a time, faster
//! than one client can push through the push script. `ruled ctl` asks
//! [`survey`] what fills a list that refuses its push.

use super::wire::{MAX_REQUEST_BYTES, MAX_WAITING};
use crate::connection::describe;
use crate::pubsub::{Element, PubSub, PubSubError, Reply};
use crate::tls::Tls;
use redis::aio::MultiplexedConnection;
use redis::ConnectionInfo;

/// One item taken off the list: its bytes, or only its length when it was
/// over [`MAX_REQUEST_BYTES`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    Request(Vec<u8>),
    Oversized(usize),
}

/// Pops up to `ARGV[1]` items off the tail of `KEYS[1]`; returns the
/// server's `TIME` (seconds, microseconds), then each item, or its length
/// (an integer) when it is over `ARGV[2]` bytes.
const TAKE_SCRIPT: &str = r"
local t = redis.call('TIME')
local out = {t[1], t[2]}
for i = 1, tonumber(ARGV[1]) do
  local item = redis.call('RPOP', KEYS[1])
  if not item then break end
  if string.len(item) > tonumber(ARGV[2]) then
    out[#out + 1] = string.len(item)
  else
    out[#out + 1] = item
  end
end
return out
";

/// Counts the items of `KEYS[1]` and those that are not requests: over
/// `ARGV[1]` bytes, not JSON, or without a string `id` and `method`.
/// Returns `{items, not requests}`; read inside Redis, nothing is sent.
const SURVEY_SCRIPT: &str = r"
local items = redis.call('LRANGE', KEYS[1], 0, -1)
local junk = 0
for i = 1, #items do
  local item = items[i]
  local ok = string.len(item) <= tonumber(ARGV[1])
  if ok then
    local decoded, value = pcall(cjson.decode, item)
    ok = decoded and type(value) == 'table'
      and type(value['id']) == 'string' and type(value['method']) == 'string'
  end
  if not ok then junk = junk + 1 end
end
return {#items, junk}
";

/// The connection the server blocks on.
pub struct RequestList {
    con: PubSub,
}

impl std::fmt::Debug for RequestList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RequestList")
    }
}

impl RequestList {
    /// Opens the connection (authenticated, on the URL's database).
    pub async fn open(info: &ConnectionInfo, tls: &Tls) -> Result<Self, PubSubError> {
        let mut con = PubSub::open(info, tls, std::iter::empty(), std::iter::empty()).await?;
        con.set_limit(MAX_REQUEST_BYTES);
        let db = info.redis_settings().db();
        if db != 0 {
            let db = db.to_string();
            match con.call(&[b"SELECT", db.as_bytes()]).await? {
                Reply::Single(Element::Simple(_)) => {}
                other => return Err(PubSubError::Protocol(format!("{other:?}"))),
            }
        }
        Ok(Self { con })
    }

    /// Waits (a blocking pop without a timeout: no traffic while idle) for
    /// the oldest item of `key`.
    pub async fn wait(&mut self, key: &str) -> Result<Option<Item>, PubSubError> {
        let reply = self.con.call(&[b"BRPOP", key.as_bytes(), b"0"]).await?;
        match reply {
            Reply::Single(Element::Nil) => Ok(None),
            Reply::Array(elements) => match elements.as_slice() {
                [_, Element::Bulk(bytes)] => Ok(Some(Item::Request(bytes.clone()))),
                [_, Element::Skipped(bytes)] => Ok(Some(Item::Oversized(*bytes))),
                _ => Err(PubSubError::Protocol(format!(
                    "BRPOP answered {elements:?}"
                ))),
            },
            other => Err(PubSubError::Protocol(format!("BRPOP answered {other:?}"))),
        }
    }
}

/// The items waiting behind the one just popped (at most a full list
/// less one), with the server's clock in Unix ms.
pub async fn take_more(
    con: &mut MultiplexedConnection,
    key: &str,
) -> Result<(i64, Vec<Item>), String> {
    let values: Vec<redis::Value> = redis::cmd("EVAL")
        .arg(TAKE_SCRIPT)
        .arg(1)
        .arg(key)
        .arg(MAX_WAITING.saturating_sub(1))
        .arg(MAX_REQUEST_BYTES)
        .query_async(con)
        .await
        .map_err(|e| describe(&e))?;
    let mut values = values.into_iter();
    let number = |value: Option<redis::Value>| -> Result<i64, String> {
        value
            .and_then(|v| redis::from_redis_value::<i64>(v).ok())
            .ok_or_else(|| "the take script's TIME is not a number".to_string())
    };
    let (secs, micros) = (number(values.next())?, number(values.next())?);
    let now_ms = secs.saturating_mul(1000).saturating_add(micros / 1000);
    let items = values
        .map(|value| match value {
            redis::Value::Int(len) => Item::Oversized(usize::try_from(len).unwrap_or(usize::MAX)),
            redis::Value::BulkString(bytes) => Item::Request(bytes),
            // Nothing else comes back; an empty item reads as malformed.
            _ => Item::Request(Vec::new()),
        })
        .collect();
    Ok((now_ms, items))
}

/// How many items `key` holds and how many of them are not requests;
/// `None` when Redis would not say.
pub async fn survey(con: &mut MultiplexedConnection, key: &str) -> Option<(i64, i64)> {
    redis::cmd("EVAL")
        .arg(SURVEY_SCRIPT)
        .arg(1)
        .arg(key)
        .arg(MAX_REQUEST_BYTES)
        .query_async(con)
        .await
        .ok()
}

//! Hash fields read within their bound
//! (docs/service.md#what-ruled-reads-and-its-bounds): an `HMGET` run in a
//! script that sends a value's length instead of a value over the bound, so
//! a 25 MB `vehicle state` planted by anyone who can reach Redis never
//! enters memory. Used by every reader of watched fields (`state()`,
//! inputs, the profile's sources).

use crate::connection::{query, Query};
use crate::logging::{self, Throttle};
use redis::aio::ConnectionManager;
use ruled_engine::Expiry;

/// The largest watched field value read: bus values are a few bytes, and
/// an event built from one must stay under the 64 KiB event bound.
pub const MAX_FIELD_BYTES: usize = 64 * 1024;

/// `HMGET KEYS[1] ARGV[2..]` into `values`, each value replaced by its
/// length (an integer) when it is over `ARGV[1]` bytes: the body both
/// scripts share.
macro_rules! bounded_hmget_lua {
    () => {
        r"
local values = redis.call('HMGET', KEYS[1], unpack(ARGV, 2))
for i = 1, #values do
  if values[i] and string.len(values[i]) > tonumber(ARGV[1]) then
    values[i] = string.len(values[i])
  end
end
"
    };
}

/// A script, and the SHA-1 of its text by which Redis knows it once it has
/// run it (`EVALSHA`): the text (200-300 bytes) is sent only when Redis
/// does not have it, not with every read (docs/engine.md#cpu-per-notification).
#[derive(Debug, Clone, Copy)]
pub struct Script {
    pub source: &'static str,
    /// Lower-case hex, as `SCRIPT LOAD` answers.
    pub sha1: &'static str,
}

/// The bounded `HMGET`, its values returned.
pub const HMGET_SCRIPT: Script = Script {
    source: concat!(bounded_hmget_lua!(), "return values\n"),
    sha1: "49d79fa1b96e58c7a4079f28af6e1b123a31a126",
};

/// The bounded `HMGET`, then the key's `PEXPIRETIME` as one more element
/// (-3 when the server has no such command), in the same script: the
/// values and the expiry are of one instant.
pub const HMGET_EXPIRY_SCRIPT: Script = Script {
    source: concat!(
        bounded_hmget_lua!(),
        r"local ok, at = pcall(redis.call, 'PEXPIRETIME', KEYS[1])
if not ok then at = -3 end
values[#values + 1] = at
return values
"
    ),
    sha1: "8886b9fe19dec51312de34a6350dd3d0fa28f520",
};

/// The values of `fields` of `hash`, in order: `None` when absent, and
/// also (with one line naming hash, field and length, within `throttle`'s
/// budget) when over [`MAX_FIELD_BYTES`] or not UTF-8: read as unknown.
pub async fn hmget(
    con: &mut impl Query,
    hash: &str,
    fields: &[&str],
    throttle: &mut Throttle,
) -> redis::RedisResult<Vec<Option<String>>> {
    let values = run(con, &HMGET_SCRIPT, hash, fields).await?;
    Ok(judge_all(hash, fields, values, throttle))
}

/// [`hmget`], and the hash's expiry read by the same script
/// (docs/sources.md#changes: an `every` source's notification counts when
/// the hash was written anew).
pub async fn hmget_with_expiry(
    con: &mut impl Query,
    hash: &str,
    fields: &[&str],
    throttle: &mut Throttle,
) -> redis::RedisResult<(Vec<Option<String>>, Expiry)> {
    let mut values = run(con, &HMGET_EXPIRY_SCRIPT, hash, fields).await?;
    let expiry = if values.len() > fields.len() {
        match values.pop() {
            Some(redis::Value::Int(-2)) => Expiry::Absent,
            Some(redis::Value::Int(-1)) => Expiry::Persistent,
            Some(redis::Value::Int(at)) if at >= 0 => Expiry::At(at),
            _ => Expiry::Unknown,
        }
    } else {
        Expiry::Unknown
    };
    if expiry == Expiry::Unknown {
        logging::warn_within!(
            throttle,
            hash = %hash,
            "cannot read the hash's expiry (PEXPIRETIME needs Redis 7): every notification \
             of its field counts, a replayed one too"
        );
    }
    Ok((judge_all(hash, fields, values, throttle), expiry))
}

/// The expiry of `hash` alone (seeding, docs/sources.md#changes);
/// [`Expiry::Unknown`] when the server cannot say. Only a lost connection
/// is an error.
pub async fn expiry(con: &mut ConnectionManager, hash: &str) -> redis::RedisResult<Expiry> {
    let at: redis::RedisResult<i64> = query(con, redis::cmd("PEXPIRETIME").arg(hash)).await;
    Ok(match at {
        Ok(-2) => Expiry::Absent,
        Ok(-1) => Expiry::Persistent,
        Ok(at) if at >= 0 => Expiry::At(at),
        Ok(_) => Expiry::Unknown,
        Err(e) if crate::connection::is_transport(&e) => return Err(e),
        Err(_) => Expiry::Unknown,
    })
}

/// Runs `script` by its SHA-1, the arguments `with_args` adds after it;
/// when Redis does not know it (`NOSCRIPT`: the first read, or after a
/// restart or `SCRIPT FLUSH`), by its text, which Redis then keeps for the
/// next calls. Every script `ruled` runs on a hot path goes this way (the
/// watched fields' reads, the guards' fresh read).
pub(crate) async fn eval_cached<T: redis::FromRedisValue + Send>(
    con: &mut impl Query,
    script: &Script,
    with_args: impl Fn(&mut redis::Cmd),
) -> redis::RedisResult<T> {
    let call = |command: &str, body: &str| {
        let mut call = redis::cmd(command);
        call.arg(body);
        with_args(&mut call);
        call
    };
    match con.query(&call("EVALSHA", script.sha1)).await {
        Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
            con.query(&call("EVAL", script.source)).await
        }
        other => other,
    }
}

/// [`MAX_FIELD_BYTES`] as the scripts' argument (a test keeps them equal).
const MAX_FIELD_BYTES_ARG: &[u8] = b"65536";

/// A bounded `HMGET` script on `fields` of `hash`: as [`eval_cached`] runs
/// it, its arguments written as they are, without a command built
/// (docs/engine.md#cpu-per-notification).
async fn run(
    con: &mut impl Query,
    script: &Script,
    hash: &str,
    fields: &[&str],
) -> redis::RedisResult<Vec<redis::Value>> {
    let mut args: Vec<&[u8]> = Vec::with_capacity(5 + fields.len());
    args.extend([
        b"EVALSHA".as_slice(),
        script.sha1.as_bytes(),
        b"1",
        hash.as_bytes(),
        MAX_FIELD_BYTES_ARG,
    ]);
    args.extend(fields.iter().map(|field| field.as_bytes()));
    match con.query_args(&args).await {
        Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
            args[0] = b"EVAL";
            args[1] = script.source.as_bytes();
            con.query_args(&args).await
        }
        other => other,
    }
}

fn judge_all(
    hash: &str,
    fields: &[&str],
    values: Vec<redis::Value>,
    throttle: &mut Throttle,
) -> Vec<Option<String>> {
    fields
        .iter()
        .zip(
            values
                .into_iter()
                .chain(std::iter::repeat(redis::Value::Nil)),
        )
        .map(|(field, value)| judge(hash, field, value, throttle))
        .collect()
}

fn judge(hash: &str, field: &str, value: redis::Value, throttle: &mut Throttle) -> Option<String> {
    match value {
        redis::Value::BulkString(bytes) => match String::from_utf8(bytes) {
            Ok(text) => Some(text),
            Err(e) => {
                let bytes = e.as_bytes();
                let shown = logging::escape_controls(&bytes[..bytes.len().min(200)]);
                logging::warn_within!(
                    throttle,
                    hash = %hash, field = %field,
                    "watched field `{shown}` is not UTF-8: read as absent (\"\")"
                );
                None
            }
        },
        redis::Value::Int(len) => {
            logging::warn_within!(
                throttle,
                hash = %hash, field = %field,
                "watched field is {len} bytes, over the {} KiB bound: read as absent (\"\"), \
                 not read",
                MAX_FIELD_BYTES / 1024
            );
            None
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_is_sent_as_it_is_declared() {
        assert_eq!(MAX_FIELD_BYTES_ARG, MAX_FIELD_BYTES.to_string().as_bytes());
    }
}

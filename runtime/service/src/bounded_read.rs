//! Hash fields read within their bound
//! (docs/service.md#what-ruled-reads-and-its-bounds): an `HMGET` run in a
//! script that sends a value's length instead of a value over the bound, so
//! a 25 MB `vehicle state` planted by anyone who can reach Redis never
//! enters memory. Used by every reader of watched fields (`state()`,
//! inputs, the profile's sources).

use crate::connection::query;
use crate::logging;
use redis::aio::ConnectionManager;

/// The largest watched field value read: bus values are a few bytes, and
/// an event built from one must stay under the 64 KiB event bound.
pub const MAX_FIELD_BYTES: usize = 64 * 1024;

/// `HMGET KEYS[1] ARGV[2..]`, each value replaced by its length (an
/// integer) when it is over `ARGV[1]` bytes.
const HMGET_SCRIPT: &str = r"
local values = redis.call('HMGET', KEYS[1], unpack(ARGV, 2))
for i = 1, #values do
  if values[i] and string.len(values[i]) > tonumber(ARGV[1]) then
    values[i] = string.len(values[i])
  end
end
return values
";

/// The values of `fields` of `hash`, in order: `None` when absent, and
/// also (with one line naming hash, field and length) when over
/// [`MAX_FIELD_BYTES`] or not UTF-8: read as unknown.
pub async fn hmget(
    con: &mut ConnectionManager,
    hash: &str,
    fields: &[&str],
) -> redis::RedisResult<Vec<Option<String>>> {
    let mut script = redis::cmd("EVAL");
    script
        .arg(HMGET_SCRIPT)
        .arg(1)
        .arg(hash)
        .arg(MAX_FIELD_BYTES);
    for field in fields {
        script.arg(*field);
    }
    let values: Vec<redis::Value> = query(con, &script).await?;
    Ok(fields
        .iter()
        .zip(
            values
                .into_iter()
                .chain(std::iter::repeat(redis::Value::Nil)),
        )
        .map(|(field, value)| judge(hash, field, value))
        .collect())
}

fn judge(hash: &str, field: &str, value: redis::Value) -> Option<String> {
    match value {
        redis::Value::BulkString(bytes) => match String::from_utf8(bytes) {
            Ok(text) => Some(text),
            Err(e) => {
                let bytes = e.as_bytes();
                let shown = logging::escape_controls(&bytes[..bytes.len().min(200)]);
                tracing::warn!(
                    hash = %hash, field = %field,
                    "watched field `{shown}` is not UTF-8: read as absent (\"\")"
                );
                None
            }
        },
        redis::Value::Int(len) => {
            tracing::warn!(
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

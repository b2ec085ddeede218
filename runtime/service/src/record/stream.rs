//! `ruled record --events` (docs/recording.md#events): stream `events` as
//! `[[event]]` entries, what the bus said rather than how. Entries are
//! read after the last one present at start, each envelope over the
//! event bound replaced by its length in Redis (never read), and each
//! entry's `at` is its id's time: the bus's own clock, not when it was
//! polled.

use super::{redis_error, timeline, RecordError, Recorder};
use crate::bus::STREAM;
use crate::connection::query;
use crate::pubsub::MAX_MESSAGE_BYTES;
use std::future::Future;
use std::time::Duration;

/// How often the stream is read.
const POLL: Duration = Duration::from_millis(100);
/// Entries read at once.
const BATCH: usize = 256;

/// `XRANGE KEYS[1] (ARGV[2] + COUNT ARGV[3]`, each entry as its id and
/// its `e` field, or the field's length when it is over `ARGV[1]` bytes.
const READ_SCRIPT: &str = r"
local entries = redis.call('XRANGE', KEYS[1], '(' .. ARGV[2], '+', 'COUNT', tonumber(ARGV[3]))
local out = {}
for i = 1, #entries do
  local id, fields = entries[i][1], entries[i][2]
  local e = false
  for j = 1, #fields, 2 do
    if fields[j] == 'e' then e = fields[j + 1] end
  end
  if e and string.len(e) > tonumber(ARGV[1]) then e = string.len(e) end
  out[#out + 1] = {id, e}
end
return out
";

/// Records the stream until `stop` or the bound.
pub(crate) async fn record(
    recorder: &mut Recorder,
    stop: impl Future<Output = ()>,
) -> Result<(), RecordError> {
    let start_wall = crate::clock::wall_ms();
    let last: Vec<(String, redis::Value)> = query(
        &mut recorder.con,
        redis::cmd("XREVRANGE")
            .arg(STREAM)
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(1),
    )
    .await
    .map_err(redis_error("stream `events`"))?;
    let mut after = last
        .first()
        .map_or_else(|| "0-0".to_string(), |(id, _)| id.clone());
    tokio::pin!(stop);
    while !recorder.writer.is_full() {
        let read = read_after(recorder, &after).await?;
        let more = read.len() == BATCH;
        for (id, envelope) in read {
            let at_ms = at_ms(&id, start_wall);
            after = id.clone();
            let text = match envelope {
                Envelope::Text(text) => serde_json::from_str::<serde_json::Value>(&text)
                    .ok()
                    .and_then(|value| timeline::event(at_ms, &id, &value)),
                Envelope::Over(bytes) => {
                    let note = format!(
                        "entry {id}: an envelope of {bytes} bytes was skipped (over 64 KiB)"
                    );
                    recorder.writer.comment(&note)?;
                    continue;
                }
                Envelope::Missing => None,
            };
            match text {
                Some(text) => {
                    if !recorder.write(&text)? {
                        return Ok(());
                    }
                }
                None => {
                    recorder
                        .writer
                        .comment(&format!("entry {id}: not an event envelope, skipped"))?;
                }
            }
        }
        if more {
            continue;
        }
        tokio::select! {
            () = &mut stop => break,
            () = tokio::time::sleep(POLL) => {}
        }
    }
    Ok(())
}

/// An entry's `e` field.
enum Envelope {
    Text(String),
    Over(i64),
    Missing,
}

async fn read_after(
    recorder: &mut Recorder,
    after: &str,
) -> Result<Vec<(String, Envelope)>, RecordError> {
    let mut script = redis::cmd("EVAL");
    script
        .arg(READ_SCRIPT)
        .arg(1)
        .arg(STREAM)
        .arg(MAX_MESSAGE_BYTES)
        .arg(after)
        .arg(BATCH);
    let entries: Vec<Vec<redis::Value>> = query(&mut recorder.con, &script)
        .await
        .map_err(redis_error("stream `events`"))?;
    Ok(entries
        .into_iter()
        .filter_map(|entry| {
            let mut entry = entry.into_iter();
            let id = match entry.next()? {
                redis::Value::BulkString(bytes) => String::from_utf8(bytes).ok()?,
                _ => return None,
            };
            let envelope = match entry.next() {
                Some(redis::Value::BulkString(bytes)) => {
                    String::from_utf8(bytes).map_or(Envelope::Missing, Envelope::Text)
                }
                Some(redis::Value::Int(bytes)) => Envelope::Over(bytes),
                _ => Envelope::Missing,
            };
            Some((id, envelope))
        })
        .collect())
}

/// An entry id's time (`<ms>-<seq>`) since the recording started; 0 for
/// one from before, or an id that is not a time.
fn at_ms(id: &str, start_wall: i64) -> u64 {
    id.split('-')
        .next()
        .and_then(|ms| ms.parse::<i64>().ok())
        .and_then(|ms| u64::try_from(ms - start_wall).ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::at_ms;

    #[test]
    fn ids_give_times() {
        assert_eq!(at_ms("1500-3", 1000), 500);
        assert_eq!(at_ms("900-0", 1000), 0);
        assert_eq!(at_ms("x", 1000), 0);
    }
}

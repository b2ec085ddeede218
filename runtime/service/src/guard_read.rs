//! The guards' fresh read (docs/safety.md#guards): right before a guarded
//! action is performed, every field its guards read, of every hash, in one
//! script (one round trip; a value over its bound comes back as a number,
//! never into memory), then the engine's one judgement
//! (`ruled_engine::guard::judge`). A refused job is reported
//! [`Report::Guarded`] and never performed; its pending record is removed,
//! since its run ends. An unguarded job is passed through untouched: it
//! pays nothing.

use crate::bounded_read::{eval_cached, Script, MAX_FIELD_BYTES};
use crate::connection::query;
use crate::pool::Report;
use crate::record_store::StoreWriter;
use redis::aio::ConnectionManager;
use rulecore::bundle::Payload;
use ruled_engine::guard::{judge, GuardCheck, Read};
use ruled_engine::Job;
use tokio::sync::mpsc;

/// `KEYS`: the hashes; `ARGV[1]` the bound, then per hash its field
/// count and fields. The answer: every value in order, `false` (nil) when
/// absent, `-1` when over the bound.
pub const READ_SCRIPT: Script = Script {
    source: r"
local bound = tonumber(ARGV[1])
local out = {}
local at = 2
for k = 1, #KEYS do
  local n = tonumber(ARGV[at])
  at = at + 1
  local fields = {}
  for i = 1, n do
    fields[i] = ARGV[at]
    at = at + 1
  end
  local values = redis.call('HMGET', KEYS[k], unpack(fields))
  for i = 1, n do
    local v = values[i]
    if v and string.len(v) > bound then v = -1 end
    out[#out + 1] = v or false
  end
end
return out
",
    sha1: "4b9ed99a668457d30d9614278d596fe4919138ae",
};

/// The jobs of `jobs` to perform: those no guard covers and those every
/// covering guard allows. The others are reported guarded (and their
/// records removed).
pub async fn screen(
    jobs: Vec<Job>,
    con: Option<&mut ConnectionManager>,
    store: Option<&StoreWriter>,
    reports: &mpsc::UnboundedSender<Report>,
) -> Vec<Job> {
    if jobs.iter().all(|job| job.guard.is_none()) {
        return jobs;
    }
    let payload = match jobs.iter().find(|job| job.guard.is_some()) {
        Some(job) => std::sync::Arc::clone(job.action.payload()),
        None => return jobs,
    };
    // One read for the whole batch: the union of the fields.
    let fields = union_of(jobs.iter().filter_map(|job| job.guard.as_deref()), &payload);
    let reads = read(con, &fields).await;
    let mut performed = Vec::with_capacity(jobs.len());
    for job in jobs {
        let Some(check) = job.guard.as_deref() else {
            performed.push(job);
            continue;
        };
        let values = values_of(check, &payload, &fields, &reads);
        match judge(&payload, check, &values) {
            Ok(()) => performed.push(job),
            Err(refusal) => {
                if let (Some(id), Some(store)) = (job.record_to_drop_at_start(), store) {
                    // Not awaited: nothing is performed after it.
                    drop(store.drop_acked(id));
                }
                if reports.send(Report::Guarded(job.id, refusal)).is_err() {
                    return performed;
                }
            }
        }
    }
    performed
}

/// Every field `checks` read, distinct, in order of first use: what one
/// fresh read asks for.
pub fn union_of<'a>(
    checks: impl Iterator<Item = &'a GuardCheck>,
    payload: &Payload,
) -> Vec<(String, String)> {
    let mut fields: Vec<(String, String)> = Vec::new();
    for check in checks {
        for (hash, field) in check.fields(payload) {
            if !fields.iter().any(|(h, f)| h == hash && f == field) {
                fields.push((hash.to_string(), field.to_string()));
            }
        }
    }
    fields
}

/// What `check`'s fields read, in its order, out of `reads` of `fields`.
pub fn values_of(
    check: &GuardCheck,
    payload: &Payload,
    fields: &[(String, String)],
    reads: &[Read],
) -> Vec<Read> {
    let have: Vec<(&str, &str)> = fields
        .iter()
        .map(|(h, f)| (h.as_str(), f.as_str()))
        .collect();
    reads_of(check.fields(payload), &have, reads)
}

/// The read of each of `wanted`, found at its place in `have` (the fields
/// of `reads`, in their order); `Unreadable` for a field not read.
fn reads_of<'a>(
    wanted: impl Iterator<Item = (&'a str, &'a str)>,
    have: &[(&str, &str)],
    reads: &[Read],
) -> Vec<Read> {
    wanted
        .map(|pair| {
            have.iter()
                .position(|&had| had == pair)
                .and_then(|at| reads.get(at).cloned())
                .unwrap_or(Read::Unreadable)
        })
        .collect()
}

/// Reads `fields` fresh, in one round trip (the script by its SHA-1, its
/// text only when Redis does not have it); every field unreadable when
/// Redis cannot be asked or does not answer.
async fn read(con: Option<&mut ConnectionManager>, fields: &[(String, String)]) -> Vec<Read> {
    let Some(con) = con else {
        return vec![Read::Unreadable; fields.len()];
    };
    let (hashes, order) = order_of(fields);
    let answer = eval_cached(con, &READ_SCRIPT, |call| {
        script_args(call, &hashes, &order);
    })
    .await;
    in_order(answer, fields, &order)
}

/// The fresh read on any connection (the control server's, for the dry run,
/// docs/operating.md#testing-a-rule-against-an-event): by its text, as the
/// dry run is rare.
pub async fn read_on(
    con: &mut (impl redis::aio::ConnectionLike + Send),
    fields: &[(String, String)],
) -> Vec<Read> {
    let (hashes, order) = order_of(fields);
    let mut script = redis::cmd("EVAL");
    script.arg(READ_SCRIPT.source);
    script_args(&mut script, &hashes, &order);
    let answer = script.query_async(con).await;
    in_order(answer, fields, &order)
}

/// The hashes of `fields`, distinct, and the order the script answers
/// the fields in: hash by hash.
fn order_of(fields: &[(String, String)]) -> (Vec<&str>, Vec<(&str, &str)>) {
    let mut hashes: Vec<&str> = Vec::new();
    for (hash, _) in fields {
        if !hashes.contains(&hash.as_str()) {
            hashes.push(hash);
        }
    }
    let mut order: Vec<(&str, &str)> = Vec::with_capacity(fields.len());
    for hash in &hashes {
        for (h, field) in fields {
            if h == hash {
                order.push((hash, field));
            }
        }
    }
    (hashes, order)
}

/// The script's arguments after its text or SHA-1: the hashes as `KEYS`,
/// the bound, then per hash its field count and fields (`order`).
fn script_args(call: &mut redis::Cmd, hashes: &[&str], order: &[(&str, &str)]) {
    call.arg(hashes.len());
    for hash in hashes {
        call.arg(*hash);
    }
    call.arg(MAX_FIELD_BYTES);
    for hash in hashes {
        let of_hash: Vec<&str> = order
            .iter()
            .filter(|(h, _)| h == hash)
            .map(|(_, field)| *field)
            .collect();
        call.arg(of_hash.len());
        for field in of_hash {
            call.arg(field);
        }
    }
}

/// The script's answer as one [`Read`] per field of `fields`, in its
/// order; every field unreadable when Redis did not answer.
fn in_order(
    answer: redis::RedisResult<Vec<redis::Value>>,
    fields: &[(String, String)],
    order: &[(&str, &str)],
) -> Vec<Read> {
    let values = match answer {
        Ok(values) => values,
        Err(error) => {
            tracing::warn!(%error, "guard read failed: the guarded actions are refused");
            return vec![Read::Unreadable; fields.len()];
        }
    };
    let by_order: Vec<Read> = values.into_iter().map(read_of).collect();
    let wanted = fields.iter().map(|(h, f)| (h.as_str(), f.as_str()));
    reads_of(wanted, order, &by_order)
}

fn read_of(value: redis::Value) -> Read {
    match value {
        redis::Value::BulkString(bytes) => match String::from_utf8(bytes) {
            Ok(text) => Read::Value(text),
            Err(_) => Read::Unreadable,
        },
        redis::Value::Nil | redis::Value::Boolean(false) => Read::Absent,
        _ => Read::Unreadable,
    }
}

/// Publishes a refusal's dashboard toast (docs/safety.md) on a task of its
/// own: the engine's loop never waits for it. A failure is logged.
pub fn toast(mut con: ConnectionManager, channel: String, message: String) {
    tokio::spawn(async move {
        let publish = redis::cmd("PUBLISH").arg(&channel).arg(&message).clone();
        if let Err(error) = query::<i64>(&mut con, &publish).await {
            tracing::warn!(%channel, %error, "refusal toast not published");
        }
    });
}

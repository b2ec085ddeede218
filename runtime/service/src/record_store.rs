//! The ordered record store (docs/semantics.md#durability-and-replay, docs/semantics.md#counters): the pending records and
//! the counters hashes, written in the driver's order by one task, and the
//! pending store read for replay.

use crate::connection::{describe, query, query_pipe, wake_commands};
use crate::logging;
use crate::namespace::Namespace;
use crate::stats::RuleStatsTable;
use redis::aio::ConnectionManager;
use rulecore::bundle::Payload;
use ruled_engine::{PendingRecord, RecordWrite, ReplayDropReason};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::{mpsc, oneshot};

/// The largest pending record replay reads: a record holds one event, and
/// events over 64 KiB are never handled (docs/service.md#pending-records-hash-extensionspending).
pub const MAX_RECORD_BYTES: usize = 64 * 1024;
/// The longest field name replay reads; run ids are a rule name and two
/// numbers.
const MAX_FIELD_BYTES: usize = 1024;
/// How many bytes of stored records one replay takes, counting some 100
/// bytes of bookkeeping for each (the service's budget is 48 MB,
/// README.md#what-this-is). Records past it stay in the store. Each record
/// is decoded as its batch arrives and its stored bytes freed, so at most
/// one batch (`FETCH_BYTES`, 1 MiB) of raw values is held at once.
pub const REPLAY_BUDGET_BYTES: usize = 6 * 1024 * 1024;
/// What one record held costs beside its name and value (allocations,
/// the vector's entry), so many tiny records cannot slip under the budget.
const RECORD_OVERHEAD: usize = 96;
/// Removals logged one by one at `warn`; the rest at `debug` (the count
/// is in the `replaying pending records` line).
const REMOVALS_LOGGED: usize = 10;
/// The most records one replay can take: a record's JSON (eight fields,
/// a 32-character fingerprint) is never under 128 bytes.
const MAX_RECORDS: usize = REPLAY_BUDGET_BYTES / (RECORD_OVERHEAD + 128);
/// Fields looked at per scan round, and bytes fetched per `HMGET`.
const SCAN_COUNT: usize = 256;
const FETCH_BYTES: usize = 1024 * 1024;

/// One scan round, run inside Redis: the next fields of the pending store
/// with their lengths, not their values. A field whose name or value is
/// over its bound is removed right there (never sent whole); its name's
/// first 64 bytes come back for the log line, with a value length of -1.
const SCAN_SCRIPT: &str = r"
local scan = redis.call('HSCAN', KEYS[1], ARGV[1], 'COUNT', ARGV[2])
local out = {scan[1]}
local fields = scan[2]
for i = 1, #fields, 2 do
  local name = fields[i]
  local len = string.len(fields[i + 1])
  if string.len(name) > tonumber(ARGV[3]) or len > tonumber(ARGV[4]) then
    redis.call('HDEL', KEYS[1], name)
    out[#out + 1] = string.sub(name, 1, 64)
    out[#out + 1] = string.len(name)
    out[#out + 1] = len
    out[#out + 1] = -1
  else
    out[#out + 1] = name
    out[#out + 1] = string.len(name)
    out[#out + 1] = len
    out[#out + 1] = len
  end
end
return out
";

/// What reading the pending store found, for the log.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PendingScan {
    /// Fields removed: over a size bound, or a name that is not UTF-8.
    pub removed: usize,
    /// Records left in the store, past [`REPLAY_BUDGET_BYTES`].
    pub left: usize,
}

/// Reads the pending store for replay (docs/service.md#pending-records-hash-extensionspending):
/// incrementally (`HSCAN`, run in a script that sends lengths before any
/// value), binary-safe, in bounded memory, each record decoded as its
/// batch arrives ([`PendingRecord::decode_field`], the engine's one
/// decoding) so raw values never pile up beside their decoded form. A
/// field whose name is not UTF-8
/// or over 1 KiB, or whose value is over [`MAX_RECORD_BYTES`], is removed
/// with a log line, and so is a value that is not a record of its run;
/// records past [`REPLAY_BUDGET_BYTES`] stay in the store for a later
/// start. An error reply (the key holds another type, the user may not
/// run scripts) is logged and ends the read with what was read: only a
/// lost connection is an error.
pub async fn read_pending(
    con: &mut ConnectionManager,
    namespace: &Namespace,
) -> redis::RedisResult<Vec<PendingRecord>> {
    let keep_all = |records: &[PendingRecord]| vec![None; records.len()];
    read_pending_scan(con, namespace, &keep_all)
        .await
        .map(|(records, _)| records)
}

/// What replay would refuse of a batch of records before any clock (the
/// engine's `refusals_without_clock`), one answer per record.
pub type Refusals<'a> = &'a (dyn Fn(&[PendingRecord]) -> Vec<Option<ReplayDropReason>> + Sync);

/// [`read_pending`], with what it removed and left. A record `refusals`
/// refuses (no rule, step or fingerprint of this bundle) is removed as it
/// is read, like a value that is no record: neither costs the replay
/// budget (docs/service.md#what-ruled-reads-and-its-bounds), and the read
/// goes on to the end of the store, so `left` is the true count.
pub async fn read_pending_scan(
    con: &mut ConnectionManager,
    namespace: &Namespace,
    refusals: Refusals<'_>,
) -> redis::RedisResult<(Vec<PendingRecord>, PendingScan)> {
    let pending = namespace.pending();
    let mut reader = PendingReader {
        pending: pending.clone(),
        ..PendingReader::default()
    };
    // Room for every record at once: grown by doubling, the vector would
    // hold up to twice the records' size, and both copies while it moves.
    let stored: redis::RedisResult<usize> = query(con, redis::cmd("HLEN").arg(&pending)).await;
    match stored {
        Ok(stored) => reader.records.reserve_exact(stored.min(MAX_RECORDS)),
        Err(e) if crate::connection::is_transport(&e) => return Err(e),
        // Another type: the scan below logs it.
        Err(_) => {}
    }
    let mut cursor = b"0".to_vec();
    loop {
        let mut script = redis::cmd("EVAL");
        script
            .arg(SCAN_SCRIPT)
            .arg(1)
            .arg(&pending)
            .arg(&cursor)
            .arg(SCAN_COUNT)
            .arg(MAX_FIELD_BYTES)
            .arg(MAX_RECORD_BYTES);
        let round: Vec<redis::Value> = match query(con, &script).await {
            Ok(round) => round,
            Err(e) if !crate::connection::is_transport(&e) => {
                tracing::error!(
                    error = %describe(&e),
                    "cannot read the pending store `{pending}`; replaying what was read"
                );
                break;
            }
            Err(e) => return Err(e),
        };
        let Some((next, fields)) = scan_round(round) else {
            tracing::error!("unexpected reply scanning `{pending}`; replaying what was read");
            break;
        };
        reader.take(con, fields, refusals).await?;
        if next == b"0" {
            break;
        }
        cursor = next;
    }
    Ok((reader.records, reader.scan))
}

/// One field a scan round returned: its name (or the first 64 bytes of a
/// removed one), the name's and the value's length, and whether the
/// script removed it.
struct Scanned {
    name: Vec<u8>,
    name_len: i64,
    value_len: i64,
    removed: bool,
}

/// A scan round's reply: the next cursor, then 4 values per field.
fn scan_round(round: Vec<redis::Value>) -> Option<(Vec<u8>, Vec<Scanned>)> {
    let mut values = round.into_iter();
    let cursor: Vec<u8> = redis::from_redis_value(values.next()?).ok()?;
    let rest: Vec<redis::Value> = values.collect();
    let mut fields = Vec::with_capacity(rest.len() / 4);
    for chunk in rest.chunks(4) {
        let [name, name_len, value_len, kept] = chunk else {
            return None;
        };
        let kept: i64 = redis::from_redis_value_ref(kept).ok()?;
        fields.push(Scanned {
            name: redis::from_redis_value_ref(name).ok()?,
            name_len: redis::from_redis_value_ref(name_len).ok()?,
            value_len: redis::from_redis_value_ref(value_len).ok()?,
            removed: kept < 0,
        });
    }
    Some((cursor, fields))
}

/// What replay has read so far.
#[derive(Default)]
struct PendingReader {
    /// The pending store's key.
    pending: String,
    records: Vec<PendingRecord>,
    /// Stored bytes taken so far, against [`REPLAY_BUDGET_BYTES`].
    bytes: usize,
    scan: PendingScan,
}

impl PendingReader {
    /// Takes one round's fields: logs the ones the script removed, removes
    /// those whose name is not UTF-8, and fetches the values of the rest
    /// (in `HMGET`s of at most [`FETCH_BYTES`]); [`PendingReader::fetch`]
    /// keeps what fits the budget.
    async fn take(
        &mut self,
        con: &mut ConnectionManager,
        fields: Vec<Scanned>,
        refusals: Refusals<'_>,
    ) -> redis::RedisResult<()> {
        let mut batch: Vec<String> = Vec::new();
        let mut batch_bytes = 0;
        for field in fields {
            if field.removed {
                let record = logging::escape_controls(&field.name);
                let (name_bytes, value_bytes) = (field.name_len, field.value_len);
                log_removal!(
                    self.removal(),
                    record = %record, name_bytes, value_bytes,
                    "removed pending record: over the size bound ({MAX_FIELD_BYTES}-byte name, \
                     {} KiB value); not replayed",
                    MAX_RECORD_BYTES / 1024
                );
                continue;
            }
            let name = match String::from_utf8(field.name) {
                Ok(name) => name,
                Err(e) => {
                    self.remove_binary(con, e.as_bytes()).await?;
                    continue;
                }
            };
            let len = usize::try_from(field.value_len).unwrap_or(0);
            if batch_bytes + len > FETCH_BYTES {
                self.fetch(con, std::mem::take(&mut batch), refusals)
                    .await?;
                batch_bytes = 0;
            }
            batch_bytes += len;
            batch.push(name);
        }
        self.fetch(con, batch, refusals).await
    }

    /// Counts a removal; whether to log it at `warn` (the first few).
    fn removal(&mut self) -> bool {
        self.scan.removed += 1;
        self.scan.removed <= REMOVALS_LOGGED
    }

    /// Removes a field whose name is not UTF-8: no run id is.
    async fn remove_binary(
        &mut self,
        con: &mut ConnectionManager,
        name: &[u8],
    ) -> redis::RedisResult<()> {
        let record = logging::escape_controls(name);
        log_removal!(
            self.removal(),
            record = %record,
            "removed pending record: its field name is not UTF-8, so no run of ruled wrote it"
        );
        remove(con, &self.pending, &[name]).await
    }

    /// `HMGET` of `names`; a field removed meanwhile is skipped, and a
    /// value that is not a record of its own run is removed here, with its
    /// reason (docs/service.md#pending-records-hash-extensionspending), so
    /// any amount of junk is cleared in one start. So is a record
    /// `refusals` refuses. The rest is kept while the budget lasts (its
    /// stored bytes and [`RECORD_OVERHEAD`] each), and counted as `left`
    /// past it.
    async fn fetch(
        &mut self,
        con: &mut ConnectionManager,
        names: Vec<String>,
        refusals: Refusals<'_>,
    ) -> redis::RedisResult<()> {
        if names.is_empty() {
            return Ok(());
        }
        let mut command = redis::cmd("HMGET");
        command.arg(&self.pending).arg(&names);
        let values: Vec<Option<Vec<u8>>> = query(con, &command).await?;
        let mut junk: Vec<String> = Vec::new();
        let (mut decoded, mut sizes) = (Vec::new(), Vec::new());
        for (name, value) in names.into_iter().zip(values) {
            let Some(value) = value else { continue };
            match PendingRecord::decode_field(&name, &value) {
                Ok(record) => {
                    decoded.push(record);
                    sizes.push(value.len() + name.len());
                }
                Err(error) => {
                    log_removal!(
                        self.removal(),
                        run = %name, reason = error.code(),
                        "removing pending record {name:?}: {error}"
                    );
                    junk.push(name);
                }
            }
        }
        let verdicts = refusals(&decoded);
        for ((record, stored), refused) in decoded.into_iter().zip(sizes).zip(verdicts) {
            if let Some(reason) = refused {
                self.refused(&record, reason);
                junk.push(record.id);
                continue;
            }
            let cost = stored + RECORD_OVERHEAD;
            if self.bytes + cost > REPLAY_BUDGET_BYTES {
                self.scan.left += 1;
                continue;
            }
            self.bytes += cost;
            self.records.push(record);
        }
        let junk: Vec<&[u8]> = junk.iter().map(|name| name.as_bytes()).collect();
        remove(con, &self.pending, &junk).await
    }

    /// Logs a record removed for what replay would refuse anyway, as
    /// replay words it; the first few at `info`, the rest at `debug`.
    fn refused(&mut self, record: &PendingRecord, reason: ReplayDropReason) {
        // The fields of the engine's own replay-drop line, so both read alike.
        let (run, rule, why) = (&record.id, &record.rule, reason.describe());
        let (step, pass) = (record.step, record.iter);
        if self.removal() {
            tracing::info!(rule = %rule, step, pass, run = %run, reason = reason.as_str(),
                "pending record removed at replay: {why}");
        } else {
            tracing::debug!(rule = %rule, step, pass, run = %run, reason = reason.as_str(),
                "pending record removed at replay: {why}");
        }
    }
}

/// Logs a removal at `warn` when `$loud`, else at `debug`.
macro_rules! log_removal {
    ($loud:expr, $($rest:tt)+) => {
        if $loud {
            tracing::warn!($($rest)+);
        } else {
            tracing::debug!($($rest)+);
        }
    };
}
use log_removal;

/// `HDEL` of `names` from the pending store (nothing for none). Only a
/// lost connection is an error; an error reply is logged.
async fn remove(
    con: &mut ConnectionManager,
    pending: &str,
    names: &[&[u8]],
) -> redis::RedisResult<()> {
    if names.is_empty() {
        return Ok(());
    }
    let removed: redis::RedisResult<i64> =
        query(con, redis::cmd("HDEL").arg(pending).arg(names)).await;
    match removed {
        Err(e) if crate::connection::is_transport(&e) => Err(e),
        Err(e) => {
            tracing::warn!(error = %describe(&e), "removing pending records failed");
            Ok(())
        }
        Ok(_) => Ok(()),
    }
}

/// One write to the pending store or the counters hash.
#[derive(Debug)]
pub enum StoreOp {
    /// `HSET NS:pending id json`. Refused when the queue is full;
    /// the record's `Drop` is then skipped for a [`RecordWrite::First`],
    /// and still sent for a [`RecordWrite::Again`] (written again after a
    /// reconnect or a clock jump): the earlier write may stand, and a
    /// record left behind would run its step again at the next start.
    Put {
        id: String,
        json: String,
        write: RecordWrite,
    },
    /// `HDEL NS:pending id`; `ack` (if any) is answered once the
    /// removal was performed (or failed, logged), or at once when there is
    /// nothing to remove (the record's write was refused).
    Drop {
        id: String,
        ack: Option<oneshot::Sender<()>>,
    },
    /// `HDEL NS:pending id1 id2 ...`: the records of a batch of the Redis
    /// lane's actions, removed in one command, when the lane could not
    /// remove them itself ([`StoreWriter::settle`] timed out). Records
    /// whose write was refused are left out.
    DropMany(Vec<String>),
    /// Answers once every earlier op was performed, so the records `ids`
    /// are written (or failed) and no write of them is still queued: the
    /// Redis lane then removes them in the transaction of their actions
    /// (`crate::lane`). Forgets the refused writes among them.
    Settle {
        ids: Vec<String>,
        ack: oneshot::Sender<()>,
    },
    /// `HSET NS f1 v1 f2 v2 ...`
    Counters(Vec<(&'static str, String)>),
    /// `HSET NS:rules name json ...`
    RuleStats(Vec<(String, String)>),
    /// `HSET NS:schedule rule fire_ms`: a schedule's last fire
    /// (docs/rules.md#schedules).
    ScheduleFired { rule: String, fire_ms: i64 },
    /// `DEL NS:rules`, then `HSET NS:rules name json ...`:
    /// the hash holds exactly these rules (none of an earlier bundle's).
    AllRuleStats(AllRules),
    /// PING the command connection until it answers (a few tries), so a
    /// connection broken by a Redis restart is replaced before the writes
    /// queued after this one (and the actions) meet it.
    Wake,
    /// Answers once every earlier op was performed.
    Flush(oneshot::Sender<()>),
}

impl StoreOp {
    /// Roughly what the op holds in memory while it waits in the queue.
    fn cost(&self) -> usize {
        const OVERHEAD: usize = 64;
        OVERHEAD
            + match self {
                Self::Put { id, json, .. } => id.len() + json.len(),
                Self::Drop { id, .. } => id.len(),
                Self::DropMany(ids) | Self::Settle { ids, .. } => ids.iter().map(String::len).sum(),
                Self::Counters(fields) => fields.iter().map(|(f, v)| f.len() + v.len()).sum(),
                Self::RuleStats(fields) => fields.iter().map(|(f, v)| f.len() + v.len()).sum(),
                Self::ScheduleFired { rule, .. } => rule.len() + 20,
                // Shared with the engine and the publisher: only the
                // fields of one chunk are ever formatted at once.
                Self::AllRuleStats(_) => 0,
                Self::Wake | Self::Flush(_) => 0,
            }
    }
}

/// Every rule's statistics, for a full write of `NS:rules`: the loaded
/// payload (the rules' names) and the statistics in the same order. The
/// writer formats `RULE_STATS_CHUNK` (256) fields at a time, so the whole
/// hash (about 150 bytes a rule as field strings and again as the encoded
/// command) is never held at once.
#[derive(Debug)]
pub struct AllRules {
    pub payload: Arc<Payload>,
    pub stats: Arc<RuleStatsTable>,
}

/// Fields of `NS:rules` per `HSET` (and per round trip) in a full write:
/// a chunk's field strings, its command, the pipeline's encoding and the
/// connection's buffers are held at once, and the full write at start
/// comes right after replay, at `ruled`'s peak (1,024 a chunk were some
/// 0.5 MB of it; docs/engine.md#the-48-mb-box).
const RULE_STATS_CHUNK: usize = 256;

/// How many bytes of writes may wait for Redis (README.md#what-this-is: 48 MB for the
/// whole service). Past it, new records and counter updates are refused
/// (see [`StoreWriter::send`]); removals always queue.
pub const STORE_QUEUE_LIMIT: usize = 8 * 1024 * 1024;

/// The one task that writes the pending store and the counters, in the
/// order the driver issued them, so a record's put never lands after its
/// own drop (docs/semantics.md#durability-and-replay).
///
/// The queue is bounded by [`STORE_QUEUE_LIMIT`] bytes, so a long Redis
/// outage cannot eat the memory budget. Past the limit a `Put` is refused
/// (the step still runs, without restart protection) and so are counter
/// writes (the driver writes them in full once it can again); a `Drop` is
/// always accepted, since a record left behind would run its step again at
/// the next start, except the drop of a record whose put was refused: there
/// is nothing to remove.
#[derive(Debug, Clone)]
pub struct StoreWriter {
    tx: mpsc::UnboundedSender<StoreOp>,
    /// `NS:pending`.
    pending: Arc<str>,
    /// Bytes waiting in the queue; the task subtracts what it takes.
    queued: Arc<AtomicUsize>,
    limit: usize,
    overflow: Arc<Mutex<Overflow>>,
    /// Set by the task when Redis refused a write of the counters or the
    /// rule statistics ([`StoreWriter::take_stats_lost`]).
    stats_lost: Arc<AtomicBool>,
}

/// What the writer refused while its queue was full.
#[derive(Debug, Default)]
struct Overflow {
    /// Runs whose latest `Put` was refused: their `Drop` is skipped.
    unwritten: HashSet<String>,
    /// Writes refused since the queue last had room.
    refused: u64,
}

impl StoreWriter {
    /// Starts the writer of `namespace`'s keys.
    pub fn start(
        con: ConnectionManager,
        namespace: &Namespace,
    ) -> (Self, tokio::task::JoinHandle<()>) {
        Self::with_limit(con, namespace, STORE_QUEUE_LIMIT)
    }

    /// [`StoreWriter::start`] with a queue of at most `limit` bytes.
    pub fn with_limit(
        con: ConnectionManager,
        namespace: &Namespace,
        limit: usize,
    ) -> (Self, tokio::task::JoinHandle<()>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let stats_lost = Arc::new(AtomicBool::new(false));
        let keys = Keys {
            pending: namespace.pending(),
            counters: namespace.counters().to_string(),
            rules: namespace.rules(),
            schedule: namespace.schedule(),
            stats_lost: Arc::clone(&stats_lost),
        };
        let pending = Arc::from(keys.pending.as_str());
        let handle = tokio::spawn(store_task(con, keys, rx, Arc::clone(&queued)));
        let writer = Self {
            tx,
            pending,
            queued,
            limit,
            overflow: Arc::default(),
            stats_lost,
        };
        (writer, handle)
    }

    /// Queues `op` without waiting. Returns whether it was accepted; a
    /// refused op was logged with what it costs.
    pub fn send(&self, op: StoreOp) -> bool {
        let cost = op.cost();
        let mut overflow = self.overflow.lock().unwrap_or_else(PoisonError::into_inner);
        let full = self.queued.load(Ordering::Relaxed) + cost > self.limit;
        match &op {
            StoreOp::Put {
                id,
                write: RecordWrite::First,
                ..
            } if full => {
                overflow.unwritten.insert(id.clone());
                overflow.note_refused(self.limit);
                tracing::debug!(run = %id, "pending record not written: store queue full");
                return false;
            }
            StoreOp::Put {
                id,
                write: RecordWrite::Again,
                ..
            } if full => {
                overflow.note_refused(self.limit);
                tracing::debug!(run = %id, "pending record not written again: store queue full");
                return false;
            }
            StoreOp::Counters(_) | StoreOp::RuleStats(_) | StoreOp::AllRuleStats(_) if full => {
                overflow.note_refused(self.limit);
                return false;
            }
            StoreOp::Put { id, .. } => {
                overflow.unwritten.remove(id);
            }
            StoreOp::Drop { id, .. } if overflow.unwritten.remove(id) => return true,
            _ => {}
        }
        let op = match op {
            StoreOp::DropMany(mut ids) if !overflow.unwritten.is_empty() => {
                ids.retain(|id| !overflow.unwritten.remove(id));
                if ids.is_empty() {
                    return true;
                }
                StoreOp::DropMany(ids)
            }
            StoreOp::Settle { ids, ack } => {
                for id in &ids {
                    overflow.unwritten.remove(id);
                }
                StoreOp::Settle { ids, ack }
            }
            op => op,
        };
        let cost = op.cost();
        if !full && overflow.refused > 0 {
            tracing::info!(
                refused = overflow.refused,
                "the store queue has room again; writes refused meanwhile are lost"
            );
            overflow.refused = 0;
        }
        drop(overflow);
        self.queued.fetch_add(cost, Ordering::Relaxed);
        if self.tx.send(op).is_err() {
            tracing::error!(
                "the store writer has stopped; a pending-store or counter write was lost"
            );
            return false;
        }
        true
    }

    /// Queues the removal of a pending record; the answer arrives once it
    /// was performed (or failed, logged), and at once (the sender dropped)
    /// when there is nothing to remove. The removal goes through the same
    /// ordered queue as the record's own write, so it cannot overtake it.
    pub fn drop_acked(&self, id: &str) -> oneshot::Receiver<()> {
        let (ack, done) = oneshot::channel();
        self.send(StoreOp::Drop {
            id: id.to_string(),
            ack: Some(ack),
        });
        done
    }

    /// Queues the removal of many records in one `HDEL` (not awaited).
    pub fn drop_many(&self, ids: &[&str]) {
        let ids = ids.iter().map(|id| id.to_string()).collect();
        self.send(StoreOp::DropMany(ids));
    }

    /// Answers once every write queued so far was performed (or failed),
    /// among them the writes of the records `ids`; at once when nothing is
    /// queued. See [`StoreOp::Settle`].
    pub fn settle(&self, ids: &[&str]) -> oneshot::Receiver<()> {
        let (ack, done) = oneshot::channel();
        let ids = ids.iter().map(|id| id.to_string()).collect();
        self.send(StoreOp::Settle { ids, ack });
        done
    }

    /// `NS:pending`, the hash of the records.
    pub fn pending_key(&self) -> &str {
        &self.pending
    }

    /// Whether Redis refused a write of the counters or the rule statistics
    /// since the last call (out of memory, say): the hashes then hold stale
    /// values until all are written again.
    pub fn take_stats_lost(&self) -> bool {
        self.stats_lost.swap(false, Ordering::Relaxed)
    }

    /// Waits until everything sent so far was written (or failed).
    pub async fn flush(&self) {
        let (done, wait) = oneshot::channel();
        self.send(StoreOp::Flush(done));
        if wait.await.is_err() {
            tracing::error!("the store writer stopped before flushing");
        }
    }
}

impl Overflow {
    fn note_refused(&mut self, limit: usize) {
        if self.refused == 0 {
            tracing::error!(
                limit_kib = limit / 1024,
                "store queue full (Redis slow or unreachable): new pending records are not \
                 written (their steps still run, without restart protection) and counter \
                 updates wait until the queue drains"
            );
        }
        self.refused += 1;
    }
}

/// At most this many writes go out in one pipeline.
const STORE_BATCH: usize = 512;

/// The keys the writer writes (derived once from the namespace), and where
/// it says a write of the counters or statistics was refused.
struct Keys {
    pending: String,
    counters: String,
    rules: String,
    schedule: String,
    stats_lost: Arc<AtomicBool>,
}

async fn store_task(
    mut con: ConnectionManager,
    keys: Keys,
    mut rx: mpsc::UnboundedReceiver<StoreOp>,
    queued: Arc<AtomicUsize>,
) {
    let mut batch = Vec::new();
    while let Some(op) = rx.recv().await {
        // Whatever queued up meanwhile goes out in one pipeline: one round
        // trip for a burst (one event parking many runs), same order.
        let mut next = Some(op);
        while let Some(op) = next.take() {
            queued.fetch_sub(op.cost(), Ordering::Relaxed);
            match op {
                StoreOp::Wake => {
                    write_batch(&mut con, &keys, &mut batch).await;
                    wake_commands(&mut con).await;
                }
                op => batch.push(op),
            }
            if batch.len() < STORE_BATCH {
                next = rx.try_recv().ok();
            }
        }
        write_batch(&mut con, &keys, &mut batch).await;
    }
}

/// What a pipelined write was, to say what its failure costs.
enum Written {
    Put(String),
    Drop(String),
    /// The first of the records, and how many.
    Drops(String, usize),
    Counters,
    RuleStats,
    Schedule(String),
}

impl Written {
    fn report(&self, keys: &Keys, error: &redis::RedisError) {
        match self {
            Self::Put(id) => tracing::error!(
                run = %id,
                "pending record not written ({error}): the step still runs, without restart protection"
            ),
            Self::Drop(id) => tracing::error!(
                run = %id,
                "pending record not removed ({error}): its step will run again at the next start"
            ),
            Self::Drops(first, records) => tracing::error!(
                run = %first,
                records,
                "pending records not removed ({error}): their steps will run again at the next start"
            ),
            Self::Counters => {
                keys.stats_lost.store(true, Ordering::Relaxed);
                tracing::warn!("counters not written to `{}`: {error}", keys.counters)
            }
            Self::RuleStats => {
                keys.stats_lost.store(true, Ordering::Relaxed);
                tracing::warn!("rule statistics not written to `{}`: {error}", keys.rules)
            }
            Self::Schedule(rule) => tracing::warn!(
                rule = %rule,
                "last schedule fire not written to `{}` ({error}): a restart may run it again \
                 if it is within the replay window",
                keys.schedule
            ),
        }
    }
}

/// Performs `batch` in order as one pipeline (a full write of `NS:rules`
/// as its own round trips, a chunk each), then answers its flushes.
async fn write_batch(con: &mut ConnectionManager, keys: &Keys, batch: &mut Vec<StoreOp>) {
    let mut pipe = redis::pipe();
    let mut written = Vec::with_capacity(batch.len());
    let mut flushed = Vec::new();
    for op in batch.drain(..) {
        match op {
            StoreOp::Put { id, json, .. } => {
                pipe.cmd("HSET").arg(&keys.pending).arg(&id).arg(json);
                written.push(Written::Put(id));
            }
            StoreOp::Drop { id, ack } => {
                pipe.cmd("HDEL").arg(&keys.pending).arg(&id);
                written.push(Written::Drop(id));
                flushed.extend(ack);
            }
            StoreOp::DropMany(ids) => {
                pipe.cmd("HDEL").arg(&keys.pending).arg(&ids);
                let first = ids.first().cloned().unwrap_or_default();
                written.push(Written::Drops(first, ids.len()));
            }
            StoreOp::Settle { ack, .. } => flushed.push(ack),
            StoreOp::Counters(fields) if !fields.is_empty() => {
                hset(&mut pipe, &keys.counters, fields);
                written.push(Written::Counters);
            }
            StoreOp::RuleStats(fields) if !fields.is_empty() => {
                hset(&mut pipe, &keys.rules, fields);
                written.push(Written::RuleStats);
            }
            StoreOp::ScheduleFired { rule, fire_ms } => {
                pipe.cmd("HSET").arg(&keys.schedule).arg(&rule).arg(fire_ms);
                written.push(Written::Schedule(rule));
            }
            StoreOp::AllRuleStats(all) => {
                // What came before goes first, in its own pipeline.
                send_pipe(con, keys, &mut pipe, &mut written).await;
                write_all_rules(con, keys, &all).await;
            }
            StoreOp::Counters(_) | StoreOp::RuleStats(_) | StoreOp::Wake => {}
            StoreOp::Flush(done) => flushed.push(done),
        }
    }
    send_pipe(con, keys, &mut pipe, &mut written).await;
    for done in flushed {
        // The driver may have given up waiting; nothing to report.
        let _ = done.send(());
    }
}

/// Sends `pipe` (when it holds anything) and reports each failed write
/// of `written`; leaves both empty. Returns whether every write succeeded.
async fn send_pipe(
    con: &mut ConnectionManager,
    keys: &Keys,
    pipe: &mut redis::Pipeline,
    written: &mut Vec<Written>,
) -> bool {
    if written.is_empty() {
        return true;
    }
    // Each reply on its own, so one failed write is reported as itself.
    let replies: redis::RedisResult<Vec<redis::RedisResult<redis::Value>>> =
        query_pipe(con, pipe.ignore_errors()).await;
    let mut all_written = true;
    match replies {
        Ok(replies) => {
            for (what, reply) in written.iter().zip(replies) {
                if let Err(e) = reply {
                    what.report(keys, &e);
                    all_written = false;
                }
            }
        }
        Err(e) => {
            for what in written.iter() {
                what.report(keys, &e);
            }
            all_written = false;
        }
    }
    *pipe = redis::pipe();
    written.clear();
    all_written
}

/// `DEL NS:rules`, then every rule's statistics, [`RULE_STATS_CHUNK`]
/// fields per `HSET` and per round trip (the first with the `DEL`).
/// Meanwhile a reader may see only part of the rules; every field is
/// there once the last chunk is written. A failed chunk ends the write
/// (reported once, not once per chunk); the next full write, after a
/// reconnect, writes every rule again.
async fn write_all_rules(con: &mut ConnectionManager, keys: &Keys, all: &AllRules) {
    let mut pipe = redis::pipe();
    let mut written = vec![Written::RuleStats];
    pipe.cmd("DEL").arg(&keys.rules);
    let rules = (all.payload.rules.iter()).zip(all.stats.first(all.payload.rules.len()));
    let mut chunk = Vec::with_capacity(RULE_STATS_CHUNK);
    for (rule, stats) in rules {
        chunk.push((&rule.name[..], crate::stats::rule_stats_json(&stats)));
        if chunk.len() == RULE_STATS_CHUNK {
            let full = std::mem::replace(&mut chunk, Vec::with_capacity(RULE_STATS_CHUNK));
            hset(&mut pipe, &keys.rules, full);
            written.push(Written::RuleStats);
            if !send_pipe(con, keys, &mut pipe, &mut written).await {
                return;
            }
        }
    }
    if !chunk.is_empty() {
        hset(&mut pipe, &keys.rules, chunk);
        written.push(Written::RuleStats);
    }
    send_pipe(con, keys, &mut pipe, &mut written).await;
}

/// Appends `HSET hash f1 v1 f2 v2 ...` to `pipe` (`fields` not empty:
/// HSET with no field is an error).
fn hset<F: redis::ToRedisArgs>(pipe: &mut redis::Pipeline, hash: &str, fields: Vec<(F, String)>) {
    let command = pipe.cmd("HSET").arg(hash);
    for (field, value) in fields {
        command.arg(field).arg(value);
    }
}

//! The state shadow's Redis side (docs/semantics.md#state): the watched pairs read
//! at start, and re-read after change notifications and reconnects.

use crate::connection::{describe, is_transport, query};
use redis::aio::ConnectionManager;
use rulecore::bundle::StatePair;
use std::collections::BTreeMap;
use tokio::sync::mpsc;

/// Reads every watched pair, one `HMGET` per hash (docs/semantics.md#state). Returns
/// (index into `pairs`, value) for the fields that exist.
///
/// A hash that Redis refuses to read (another service stored a string
/// under that key: WRONGTYPE; a value that is not UTF-8) is logged, naming
/// it, and its fields stay unknown (`""`): one bad key must not keep every
/// rule from running. A lost connection is an error.
pub async fn seed_state(
    con: &mut ConnectionManager,
    pairs: &[StatePair],
) -> redis::RedisResult<Vec<(usize, String)>> {
    let mut by_hash: BTreeMap<&str, Vec<(usize, &str)>> = BTreeMap::new();
    for (index, pair) in pairs.iter().enumerate() {
        by_hash
            .entry(pair.hash.as_str())
            .or_default()
            .push((index, pair.field.as_str()));
    }
    let mut out = Vec::new();
    for (hash, fields) in by_hash {
        let mut command = redis::cmd("HMGET");
        command.arg(hash);
        for (_, field) in &fields {
            command.arg(*field);
        }
        let values: Vec<Option<String>> = match query(con, &command).await {
            Ok(values) => values,
            Err(e) if !is_transport(&e) => {
                tracing::warn!(
                    hash = %hash,
                    error = %describe(&e),
                    "cannot read the state hash; its fields read as \"\""
                );
                continue;
            }
            Err(e) => return Err(e),
        };
        for ((index, _), value) in fields.iter().zip(values) {
            if let Some(value) = value {
                out.push((*index, value));
            }
        }
    }
    Ok(out)
}

/// What the state reader is asked to do.
#[derive(Debug)]
enum Reread {
    /// `HGET hash field` after a change notification.
    Field {
        index: usize,
        hash: String,
        field: String,
    },
    /// Every watched pair again (after a reconnect: notifications were
    /// missed); a field that is gone reads `""`.
    All,
}

/// The re-reads asked for and not started yet: at most one per watched
/// pair, and "all" once, however many notifications arrive
/// (docs/semantics.md#state).
#[derive(Debug, Default)]
struct Asked {
    fields: std::collections::BTreeSet<usize>,
    all: bool,
}

#[derive(Debug, Default)]
struct Shared {
    asked: std::sync::Mutex<Asked>,
    ready: tokio::sync::Notify,
}

impl Shared {
    fn asked(&self) -> std::sync::MutexGuard<'_, Asked> {
        // Never held across an await or a panic-prone call.
        self.asked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Re-reads watched fields after change notifications and hands (index,
/// value) back to the driver. Notifications are coalesced per pair: one
/// read in flight and one re-read waiting at most, so a flood of
/// `PUBLISH <hash> <field>` costs no memory (docs/semantics.md#state).
#[derive(Debug, Clone)]
pub struct StateReader {
    shared: std::sync::Arc<Shared>,
}

impl StateReader {
    /// `pairs` are the bundle's `state_pairs` (indices refer to them).
    pub fn start(
        con: ConnectionManager,
        pairs: Vec<StatePair>,
        values: mpsc::UnboundedSender<(usize, String)>,
    ) -> (Self, tokio::task::JoinHandle<()>) {
        let shared = std::sync::Arc::new(Shared::default());
        let handle = tokio::spawn(state_task(
            con,
            pairs,
            std::sync::Arc::clone(&shared),
            values,
        ));
        (Self { shared }, handle)
    }

    /// Asks for `HGET` of pair `index`; the answer arrives as `(index,
    /// value)`. Asking again before the read started asks nothing more.
    pub fn reread(&self, index: usize) {
        self.shared.asked().fields.insert(index);
        self.shared.ready.notify_one();
    }

    /// Asks for every watched pair again (one `HMGET` per hash); the answers
    /// arrive as `(index, value)`, `""` for a field that does not exist.
    pub fn reread_all(&self) {
        self.shared.asked().all = true;
        self.shared.ready.notify_one();
    }
}

/// The next re-read to perform: "all" first (it covers every field).
fn next_request(shared: &Shared, pairs: &[StatePair]) -> Option<Reread> {
    let mut asked = shared.asked();
    if std::mem::take(&mut asked.all) {
        asked.fields.clear();
        return Some(Reread::All);
    }
    let index = asked.fields.pop_first()?;
    let pair = pairs.get(index)?;
    Some(Reread::Field {
        index,
        hash: pair.hash.clone(),
        field: pair.field.clone(),
    })
}

async fn state_task(
    mut con: ConnectionManager,
    pairs: Vec<StatePair>,
    shared: std::sync::Arc<Shared>,
    values: mpsc::UnboundedSender<(usize, String)>,
) {
    loop {
        let Some(request) = next_request(&shared, &pairs) else {
            shared.ready.notified().await;
            continue;
        };
        let read = match request {
            Reread::Field { index, hash, field } => {
                let value: redis::RedisResult<Option<String>> =
                    query(&mut con, redis::cmd("HGET").arg(&hash).arg(&field)).await;
                match value {
                    // A deleted field is unknown again: `""`.
                    Ok(value) => vec![(index, value.unwrap_or_default())],
                    // Redis answered, but not with a string (another service
                    // stored a non-hash under the key: WRONGTYPE): unknown,
                    // `""`, as at start (docs/semantics.md#state, `seed_state`).
                    Err(e) if !is_transport(&e) => {
                        tracing::warn!(
                            hash = %hash,
                            field = %field,
                            error = %describe(&e),
                            "cannot read the state hash; the field reads as \"\""
                        );
                        vec![(index, String::new())]
                    }
                    // Redis was not reached: the value is not known to have
                    // changed. The reconnect's full re-read settles it.
                    Err(e) => {
                        tracing::warn!(
                            hash = %hash,
                            field = %field,
                            error = %describe(&e),
                            "state re-read failed (connection); keeping the old value until the reconnect re-reads it"
                        );
                        continue;
                    }
                }
            }
            Reread::All => match seed_state(&mut con, &pairs).await {
                Ok(found) => {
                    let mut all = vec![String::new(); pairs.len()];
                    for (index, value) in found {
                        if let Some(slot) = all.get_mut(index) {
                            *slot = value;
                        }
                    }
                    all.into_iter().enumerate().collect()
                }
                Err(e) => {
                    tracing::warn!(
                        error = %describe(&e),
                        "re-reading state after the reconnect failed; keeping the old values"
                    );
                    continue;
                }
            },
        };
        for value in read {
            if values.send(value).is_err() {
                return;
            }
        }
    }
}

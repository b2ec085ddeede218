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

/// Re-reads watched fields after change notifications, one request at a
/// time in arrival order, and hands (index, value) back to the driver.
#[derive(Debug, Clone)]
pub struct StateReader {
    tx: mpsc::UnboundedSender<Reread>,
}

impl StateReader {
    /// `pairs` are the bundle's `state_pairs` (indices refer to them).
    pub fn start(
        con: ConnectionManager,
        pairs: Vec<StatePair>,
        values: mpsc::UnboundedSender<(usize, String)>,
    ) -> (Self, tokio::task::JoinHandle<()>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let handle = tokio::spawn(state_task(con, pairs, rx, values));
        (Self { tx }, handle)
    }

    /// Asks for `HGET hash field`; the answer arrives as `(index, value)`.
    pub fn reread(&self, index: usize, hash: &str, field: &str) {
        self.request(Reread::Field {
            index,
            hash: hash.to_string(),
            field: field.to_string(),
        });
    }

    /// Asks for every watched pair again (one `HMGET` per hash); the answers
    /// arrive as `(index, value)`, `""` for a field that does not exist.
    pub fn reread_all(&self) {
        self.request(Reread::All);
    }

    fn request(&self, request: Reread) {
        if let Err(e) = self.tx.send(request) {
            tracing::error!("the state reader has stopped; {:?} not re-read", e.0);
        }
    }
}

async fn state_task(
    mut con: ConnectionManager,
    pairs: Vec<StatePair>,
    mut rx: mpsc::UnboundedReceiver<Reread>,
    values: mpsc::UnboundedSender<(usize, String)>,
) {
    while let Some(request) = rx.recv().await {
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

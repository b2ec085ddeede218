//! The state shadow's Redis side (docs/semantics.md#state): every watched
//! pair read at once. The reads after notifications, polls and reconnects
//! are the bus reader's (`bus.rs`).

use crate::connection::{describe, is_transport, query};
use redis::aio::ConnectionManager;
use rulecore::bundle::StatePair;
use std::collections::BTreeMap;

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

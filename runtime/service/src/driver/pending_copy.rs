//! The driver's side of `--pending-file` (docs/service.md#the-pending-file):
//! the copy follows the records the engine writes and removes; it goes to
//! flash at stop, on a suspend, hibernate or reboot state of
//! `power-manager`, and at most once a minute while a long wait exists;
//! at start it fills an empty `NS:pending`.

use super::Service;
use crate::pending_file::{power_state_loses_redis, Held};
use crate::pool::Report;
use redis::aio::ConnectionManager;
use ruled_engine::Effect;
use std::time::Instant;
use tokio::sync::mpsc;

/// The bus hash and field whose changes announce a suspend.
const POWER_HASH: &str = "power-manager";
const POWER_FIELD: &str = "state";

impl Service {
    /// Follows one effect in the copy (before the effect is performed).
    pub(super) fn follow_in_copy(&mut self, effect: &Effect) {
        let Some(file) = self.pending_file.as_mut() else {
            return;
        };
        match effect {
            Effect::PutRecord {
                id, fire_at, json, ..
            } => file.put(id, *fire_at, json),
            Effect::DropRecord { id, .. } => file.drop_record(id),
            // The record leaves the copy when the worker removes it, as
            // the action starts (`follow_report_in_copy`), not now: a job
            // still queued at stop keeps its record.
            Effect::Submit(job) => {
                if let Some(id) = &job.drop_record {
                    file.job_submitted(job.id.0, id);
                }
            }
            _ => {}
        }
    }

    /// Follows one report of the pool in the copy (before the engine is
    /// told): a started job's worker removed its record; an abandoned or
    /// refused one kept it.
    pub(super) fn follow_report_in_copy(&mut self, report: &Report) {
        let Some(file) = self.pending_file.as_mut() else {
            return;
        };
        match report {
            Report::Started(job) | Report::Guarded(job, _) | Report::Finished(job, _) => {
                file.job_started(job.0);
            }
            Report::Abandoned(job) | Report::NotPerformed { job, .. } => {
                file.job_not_started(job.0);
            }
            Report::Room => {}
        }
    }

    /// At start, before replay: an empty `NS:pending` is filled from the
    /// file. Returns `false` when the replay is held (the wall clock is
    /// earlier than the file's write time).
    pub(super) async fn restore_pending_file(&mut self) -> bool {
        let Some(file) = self.pending_file.as_mut() else {
            return true;
        };
        let pending: redis::RedisResult<usize> = redis::cmd("HLEN")
            .arg(self.namespace.pending())
            .query_async(&mut self.con)
            .await;
        match pending {
            Ok(0) => {}
            Ok(_) => {
                // Redis kept its records (ruled restarted, not the box).
                file.remove();
                return true;
            }
            Err(error) => {
                tracing::error!(
                    "`{}` not read ({error}): the pending file is left for the next start",
                    self.namespace.pending()
                );
                return true;
            }
        }
        let Some(contents) = file.read_at_start() else {
            return true;
        };
        let now_ms = self.clock.now().wall_ms;
        if now_ms < contents.written_ms {
            tracing::warn!(
                path = %file.path().display(),
                written_ms = contents.written_ms,
                now_ms,
                records = contents.records.len(),
                "the wall clock is earlier than the pending file's write time (not set yet?): \
                 replay is held until it passes it"
            );
            file.held = Some(Held { contents });
            return false;
        }
        self.put_back(contents.records).await;
        true
    }

    /// The held replay, once the wall clock passed the file's time.
    pub(super) async fn release_held(&mut self) {
        let now_ms = self.clock.now().wall_ms;
        let Some(file) = self.pending_file.as_mut() else {
            return;
        };
        let Some(held) = file.held.take_if(|held| now_ms >= held.contents.written_ms) else {
            return;
        };
        tracing::info!(
            "the wall clock passed the pending file's write time: replaying its records"
        );
        // Only the file's records: `NS:pending` holds this process's own
        // runs' records too by now (events were handled while held).
        let ids: std::collections::HashSet<String> = (held.contents.records.iter())
            .map(|(id, _)| id.clone())
            .collect();
        self.put_back(held.contents.records).await;
        if let Err(error) = self.replay_only(Some(&ids)).await {
            tracing::error!("replay of the pending file's records failed: {error}");
        }
    }

    /// Puts `records` back into `NS:pending`, then removes the file.
    async fn put_back(&mut self, records: Vec<(String, String)>) {
        let key = self.namespace.pending();
        let mut pipe = redis::pipe();
        for (id, json) in &records {
            pipe.cmd("HSET").arg(&key).arg(id).arg(json).ignore();
        }
        let put: redis::RedisResult<()> = pipe.query_async(&mut self.con).await;
        let Some(file) = self.pending_file.as_ref() else {
            return;
        };
        match put {
            Ok(()) => {
                tracing::info!(
                    path = %file.path().display(),
                    records = records.len(),
                    "pending records put back from the pending file"
                );
                file.remove();
            }
            Err(error) => tracing::error!(
                "pending records not put back from the pending file ({error}); it is kept"
            ),
        }
    }

    /// The minute's check (and the held replay).
    pub(super) async fn pending_file_tick(&mut self) {
        if self
            .pending_file
            .as_ref()
            .is_some_and(|file| file.held.is_some())
        {
            self.release_held().await;
        }
        let now_ms = self.clock.now().wall_ms;
        if let Some(file) = self.pending_file.as_mut() {
            file.tick(now_ms, Instant::now());
        }
    }

    /// `power-manager` `state` changed to `state`.
    pub(super) fn power_state(&mut self, state: &str) {
        tracing::debug!(state, "`{POWER_HASH}` `{POWER_FIELD}`");
        if !power_state_loses_redis(state) {
            return;
        }
        let now_ms = self.clock.now().wall_ms;
        if let Some(file) = self.pending_file.as_mut() {
            file.write(
                &format!("power-manager state {state}"),
                now_ms,
                Instant::now(),
            );
        }
    }

    /// At stop, after the engine kept its records.
    pub(super) fn write_pending_file_at_stop(&mut self) {
        let now_ms = self.clock.now().wall_ms;
        if let Some(file) = self.pending_file.as_mut() {
            file.write("stop", now_ms, Instant::now());
            let (writes, bytes) = file.wear();
            tracing::info!(writes, bytes, "pending file: writes and bytes since start");
        }
    }

    /// Whether the replay is held (for `ruled ctl status`).
    pub(super) fn replay_held(&self) -> bool {
        self.pending_file
            .as_ref()
            .is_some_and(|file| file.held.is_some())
    }
}

/// Watches `power-manager` `state` on its own subscription: each change's
/// value is sent to the driver. Reconnects after a pause when Redis goes.
pub(super) fn watch_power(
    client: redis::Client,
    mut con: ConnectionManager,
) -> mpsc::UnboundedReceiver<String> {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            if let Err(error) = watch_once(&client, &mut con, &tx).await {
                tracing::warn!(
                    "power-manager watch (the pending file on suspend): {error}; again in 1 s"
                );
            }
            if tx.is_closed() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        }
    });
    rx
}

async fn watch_once(
    client: &redis::Client,
    con: &mut ConnectionManager,
    tx: &mpsc::UnboundedSender<String>,
) -> redis::RedisResult<()> {
    let mut pubsub = client.get_async_pubsub().await?;
    pubsub.subscribe(POWER_HASH).await?;
    tracing::debug!("watching `{POWER_HASH}` `{POWER_FIELD}` for the pending file");
    let mut messages = pubsub.on_message();
    while let Some(message) = next_message(&mut messages).await {
        let field: String = message.get_payload().unwrap_or_default();
        tracing::debug!(field, "`{POWER_HASH}` changed");
        if field != POWER_FIELD {
            continue;
        }
        let state: Option<String> = redis::cmd("HGET")
            .arg(POWER_HASH)
            .arg(POWER_FIELD)
            .query_async(con)
            .await?;
        tracing::debug!(?state, "read");
        if let Some(state) = state {
            if tx.send(state).is_err() {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// The next item of a stream (`futures-core` only: no `futures` crate).
async fn next_message<S: futures_core::Stream + Unpin>(stream: &mut S) -> Option<S::Item> {
    std::future::poll_fn(|cx| std::pin::Pin::new(&mut *stream).poll_next(cx)).await
}

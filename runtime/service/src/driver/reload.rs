//! Live reload (docs/service.md#live-reload): the bundle at the configured
//! path is read again and checked as at start; a bundle that fails a check,
//! or that would not fit the memory budget beside the loaded one (both are
//! held during the swap), is refused and the loaded rules keep running. Otherwise the engine takes
//! the new rules ([`Engine::reload`](ruled_engine::Engine::reload) decides
//! what each live run does), the state watch and the subscription are
//! changed to what the new rules need, and the counters say the new
//! bundle id. `SIGHUP` and the control protocol's `v1.reload` both call
//! [`Service::reload`].

use super::start::{subscriptions_for, watched_hashes};
use super::Service;
use crate::bundle::{self, LoadError, LoadedBundle};
use crate::bus::{self, BusReader, Watch};
use crate::control::methods;
use crate::control::overrides::InForce;
use crate::control::protocol::ReloadReply;
use crate::control::wire::Reply;
use crate::control::{Answer, Call};
use crate::subscriptions::Subscriptions;
use rulecore::bundle::StatePair;
use ruled_engine::{estimated_heap, mebibytes, ReloadSummary, MEMORY_BUDGET};
use std::sync::Arc;

/// What a reload did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reloaded {
    /// The id of the bundle loaded before.
    pub previous: String,
    /// The id of the bundle loaded now (the same when nothing changed).
    pub bundle: String,
    /// Rules added, removed, changed; runs kept and ended. `unchanged`:
    /// the file held the loaded bundle, and nothing was done.
    pub changes: ReloadSummary,
    /// What is subscribed now (channels and globs).
    pub subscriptions: Arc<Subscriptions>,
    /// Every override in force against the bundle loaded now
    /// (docs/operating.md#turning-a-rule-off-or-on).
    pub overrides: Vec<InForce>,
}

/// Why a reload was refused; the loaded rules keep running.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The file could not be read, or failed a check (magic, version,
    /// length, digest, verification); the message names the file and the
    /// check.
    #[error("{0}; the loaded bundle keeps running")]
    Bundle(#[from] LoadError),
    /// Both bundles are held while the engine swaps them: together they
    /// would take more than the memory budget (docs/service.md#live-reload).
    #[error(
        "the new bundle needs about {} once loaded and the loaded one about {}: \
         held together during the swap they are over the memory budget of {}; \
         the loaded bundle keeps running (restart ruled to load the new one alone)",
        mebibytes(*new),
        mebibytes(*loaded),
        mebibytes(MEMORY_BUDGET)
    )]
    OverBudget {
        /// `estimated_heap` of the new bundle, in bytes.
        new: usize,
        /// `estimated_heap` of the loaded bundle, in bytes.
        loaded: usize,
    },
}

impl Reloaded {
    /// The reply of `v1.reload`.
    pub fn reply(&self) -> ReloadReply {
        let changes = &self.changes;
        ReloadReply {
            bundle: self.bundle.clone(),
            previous: self.previous.clone(),
            unchanged: changes.unchanged,
            added: changes.added.clone(),
            removed: changes.removed.clone(),
            changed: changes.changed.clone(),
            runs_kept: changes.runs_kept,
            runs_ended: changes.runs_ended,
            channels: self.subscriptions.channel_count(),
            patterns: self.subscriptions.pattern_count(),
            overrides: self.overrides.iter().map(InForce::entry).collect(),
        }
    }
}

impl Service {
    /// Reloads the bundle (docs/service.md#live-reload); see the module
    /// documentation. The engine's effects are performed before it returns.
    pub async fn reload(&mut self) -> Result<Reloaded, ReloadError> {
        self.refresh_revision();
        tracing::debug!(path = %self.bundle_path.display(), "reading the bundle again");
        let LoadedBundle { payload, id } = bundle::load(&self.bundle_path)?;
        let previous = self.bundle_id.clone();
        if id == previous {
            return Ok(Reloaded {
                previous,
                bundle: id,
                changes: ReloadSummary {
                    unchanged: true,
                    ..ReloadSummary::default()
                },
                subscriptions: self.current_subscriptions(),
                overrides: self.overrides.in_force(&self.engine),
            });
        }
        fits_with_loaded(&payload, self.engine.payload())?;
        let now = self.now();
        let old_pairs = self.engine.watched_pairs().to_vec();
        let changes = self.engine.reload(Arc::new(payload), now);
        // Overrides outlive bundles (docs/operating.md#turning-a-rule-off-or-on):
        // read again for the new bundle's names (only those are read).
        self.read_overrides_again().await;
        self.overrides.apply_again(&mut self.engine);
        self.perform_effects();
        let subscriptions = self.follow_rules(&old_pairs).await;
        self.bundle_id.clone_from(&id);
        self.stats.set_bundle(id.clone());
        self.stats.write_all(&self.engine, &self.writer);
        Ok(Reloaded {
            previous,
            bundle: id,
            changes,
            subscriptions,
            overrides: self.overrides.in_force(&self.engine),
        })
    }

    /// The rules directory's digest computed again, off the loop
    /// (docs/operating.md#revisions): a reload follows a rebuild.
    fn refresh_revision(&self) {
        if let Some(rules) = &self.rules {
            let (revision, dir) = (self.revision.clone(), rules.dir.clone());
            tokio::spawn(async move { revision.refresh(&dir).await });
        }
    }

    /// [`Service::reload`] for `SIGHUP`: the outcome goes to the log.
    pub(super) async fn reload_logged(&mut self) {
        let outcome = self.reload().await;
        self.log_reload(&outcome);
    }

    /// [`Service::reload`] for the control protocol's `v1.reload`
    /// (docs/operating.md#deploying-a-new-bundle): logged as for `SIGHUP`,
    /// and answered with what changed or why the bundle was refused.
    pub(super) async fn answer_reload(&mut self, call: Call) {
        // Unknown payload fields are refused, as by every method.
        if let Err(e) = methods::check_reload_payload(&call.request.payload) {
            let reply = Reply::error(format!("{}: {e}", methods::RELOAD));
            let _ = call.answer.send(Answer::reply(reply));
            return;
        }
        let outcome = self.reload().await;
        self.log_reload(&outcome);
        // Who asked, at `info` like the reload itself (docs/service.md#live-reload:
        // no false alarms): a deploy is routine, and `warn` is kept for an override
        // that contradicts the new bundle (`log_overrides`); a refusal is
        // already `log_reload`'s error line.
        match &outcome {
            Ok(reloaded) => tracing::info!(
                signed = call.signed,
                bundle = %reloaded.bundle,
                previous = %reloaded.previous,
                "control request v1.reload: bundle read again"
            ),
            Err(e) => tracing::info!(
                signed = call.signed,
                "control request v1.reload refused: {e}"
            ),
        }
        let reply = match &outcome {
            Ok(reloaded) => match methods::encoded(&reloaded.reply()) {
                Ok(payload) => Reply::ok(payload),
                Err(e) => Reply::error(e),
            },
            Err(e) => Reply::error(format!("{}: {e}", methods::RELOAD)),
        };
        // The server gave up on it (stopping): nothing to answer.
        let _ = call.answer.send(Answer::reply(reply));
    }

    fn log_reload(&self, outcome: &Result<Reloaded, ReloadError>) {
        if let Ok(reloaded) = outcome {
            log_overrides(&reloaded.overrides);
        }
        match outcome {
            Ok(reloaded) if reloaded.changes.unchanged => {
                tracing::info!(bundle = %reloaded.bundle, "reload: the bundle is unchanged; nothing to do");
            }
            Ok(reloaded) => {
                let changes = &reloaded.changes;
                tracing::info!(
                    bundle = %reloaded.bundle,
                    previous = %reloaded.previous,
                    added = changes.added.len(),
                    removed = changes.removed.len(),
                    changed = changes.changed.len(),
                    runs_kept = changes.runs_kept,
                    runs_ended = changes.runs_ended,
                    channels = reloaded.subscriptions.channel_count(),
                    patterns = reloaded.subscriptions.pattern_count(),
                    overrides = reloaded.overrides.len(),
                    path = %self.bundle_path.display(),
                    "bundle reloaded"
                );
            }
            Err(e) => tracing::error!(bundle = %self.bundle_id, "reload refused: {e}"),
        }
    }

    /// After the live rules changed (a reload, a rule turned on or off):
    /// the bus watch (hashes, notifications, live pairs), the channels and
    /// the subscription become what the engine needs now, changed on the
    /// open connection (what both need is never interrupted); pairs that
    /// became live are read, emitting nothing (docs/service.md#the-bus).
    /// Returns what is subscribed.
    pub(super) async fn follow_rules(&mut self, old_pairs: &[StatePair]) -> Arc<Subscriptions> {
        let old_live = self.reader.watch().live.clone();
        let restarted = self.rewatch_state(old_pairs);
        let (subscriptions, input_channels) = subscriptions_for(&self.engine, &self.state_hashes);
        let subscriptions = Arc::new(subscriptions);
        self.input_channels = input_channels;
        if let Some(handle) = &self.subscriptions {
            handle.change(Arc::clone(&subscriptions)).await;
        }
        let live = self.reader.watch().live.clone();
        let seed: Vec<usize> = if restarted {
            live
        } else {
            live.into_iter()
                .filter(|pair| !old_live.contains(pair))
                .collect()
        };
        if !seed.is_empty() {
            self.seed_state(&seed).await;
        }
        subscriptions
    }

    fn current_subscriptions(&self) -> Arc<Subscriptions> {
        self.subscriptions
            .as_ref()
            .map(|handle| handle.subscriptions())
            .unwrap_or_default()
    }

    /// The bus watch for the engine as it is now. With the same watched
    /// pairs the reader keeps running (its asks still hold); otherwise
    /// (indices into the pairs are the bundle's) a new reader replaces it,
    /// values the old one still had on the way dropped with it, so the
    /// caller reads every live pair again. Returns whether it did.
    fn rewatch_state(&mut self, old_pairs: &[StatePair]) -> bool {
        let hashes = watched_hashes(&self.engine);
        let watch = Watch::of(&self.engine, hashes.clone());
        self.state_hashes = hashes;
        let restarted = old_pairs != self.engine.watched_pairs();
        if restarted {
            self.reader_task.abort();
            (self.reader, self.reader_task, self.reads) = BusReader::start(
                self.direct
                    .connection(Some(crate::connection::RESPONSE_TIMEOUT)),
                watch,
            );
        } else {
            self.reader.set_watch(watch);
        }
        self.intake.set_state_watch(self.state_watch());
        restarted
    }

    /// Reads the pairs `indices` (after the subscription changed, so no
    /// change notification is missed in between), emitting nothing. A lost
    /// connection is logged: the values stay as carried over until the
    /// next change or reconnect.
    async fn seed_state(&mut self, indices: &[usize]) {
        match bus::seed(&mut self.con, &mut self.engine, indices).await {
            Ok(_) => self.perform_effects(),
            Err(e) => tracing::warn!(
                "reading the watched state failed ({e}); values read before stay until the next change"
            ),
        }
    }
}

/// `Ok` when `new` and `loaded`, both held while the engine swaps them,
/// fit the memory budget together.
fn fits_with_loaded(
    new: &rulecore::bundle::Payload,
    loaded: &rulecore::bundle::Payload,
) -> Result<(), ReloadError> {
    let (new, loaded) = (estimated_heap(new), estimated_heap(loaded));
    if new.saturating_add(loaded) > MEMORY_BUDGET {
        return Err(ReloadError::OverBudget { new, loaded });
    }
    Ok(())
}

/// The overrides in force after a reload, named in the journal: all of
/// them on one line, and each that contradicts the bundle's `enabled` on a
/// warn line of its own, with how to remove it.
fn log_overrides(in_force: &[InForce]) {
    if in_force.is_empty() {
        return;
    }
    let all: Vec<String> = in_force.iter().map(InForce::describe).collect();
    tracing::info!(overrides = %all.join(", "), "reload: overrides in force");
    for contradicting in in_force.iter().filter(|o| o.contradicts()) {
        let state = if contradicting.enabled { "on" } else { "off" };
        tracing::warn!(
            rule = %contradicting.rule,
            state = crate::control::overrides::word(contradicting.enabled),
            "reload: the override keeps the rule {state}, against the bundle's `enabled`; \
             `ruled ctl set-enabled {} default` removes it",
            contradicting.rule
        );
    }
}

impl Service {
    /// Reads `NS:overrides` again for the rules of the bundle now loaded;
    /// when Redis cannot say, the overrides known so far stay.
    async fn read_overrides_again(&mut self) {
        let key = self.namespace.overrides();
        let read =
            crate::control::overrides::Overrides::load(&mut self.con, &key, self.engine.payload())
                .await;
        match read {
            Ok(mut read) => {
                read.keep_signed(&self.overrides);
                self.overrides = read;
            }
            Err(e) => tracing::warn!(
                error = %crate::connection::describe(&e),
                "cannot read `{key}` again; the overrides known before the reload stay"
            ),
        }
    }
}

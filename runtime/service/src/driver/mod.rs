//! The driver (docs/service.md#start-and-stop, ARCHITECTURE.md#invariants): one task owning the engine
//! on a current-thread runtime. It selects over pub/sub messages, pool
//! reports, state re-reads, the engine's next deadline (one sleep for every
//! parked run), the stats tick, reload requests and the shutdown signal,
//! feeds the engine and performs its effects in order. No rule behaviour
//! lives here; starting, reloading and stopping are in `start`, `reload`
//! and `stop`.

mod reload;
mod start;
mod stop;

pub use reload::{ReloadError, Reloaded};
pub use start::{Secret, ServiceConfig, ServiceError};

use crate::clock::ServiceClock;
use crate::effect_log::{self, log_effect};
use crate::intake::Intake;
use crate::logging::{self, Throttle};
use crate::pool::{Pool, Report};
use crate::record_store::{StoreOp, StoreWriter};
use crate::state_shadow::StateReader;
use crate::stats::StatsPublisher;
use crate::subscriptions::{Bus, Inbound, Subscriber, SubscriptionHandle};
use redis::aio::ConnectionManager;
use rulecore::bundle::Payload;
use ruled_engine::{Effect, Engine, Job, Now};
use std::collections::BTreeSet;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Events handled before the driver lets the other tasks run.
const INTAKE_TURN: u32 = 8;

/// Runs the service until `shutdown` resolves, then stops in order; each
/// message on `reloads` (`SIGHUP`) reloads the bundle
/// (docs/service.md#live-reload).
pub async fn run(
    config: ServiceConfig,
    shutdown: impl Future<Output = ()>,
    mut reloads: mpsc::UnboundedReceiver<()>,
) -> Result<(), ServiceError> {
    tokio::pin!(shutdown);
    tracing::info!(version = env!("CARGO_PKG_VERSION"), "ruled starting");
    // A stop during start (e.g. while Redis is not up yet) leaves nothing
    // to clean up: no subscription yet, and pending records stay in Redis.
    let mut service = tokio::select! {
        started = Service::start(config) => started?,
        () = &mut shutdown => {
            tracing::info!("stopped before the start completed");
            return Ok(());
        }
    };
    service.serve(shutdown, &mut reloads).await;
    service.stop().await;
    Ok(())
}

/// The engine and everything its effects and inputs need.
#[derive(Debug)]
struct Service {
    engine: Engine,
    payload: Arc<Payload>,
    /// The command connection (`ConnectionManager` clones share it).
    con: ConnectionManager,
    pool: Pool,
    reports: mpsc::UnboundedReceiver<Report>,
    writer: StoreWriter,
    writer_task: JoinHandle<()>,
    /// Until the subscription opens; then the intake drains it.
    subscriber: Option<Subscriber>,
    intake: Intake,
    state_hashes: BTreeSet<String>,
    reader: Option<StateReader>,
    reader_task: Option<JoinHandle<()>>,
    state_values: mpsc::UnboundedReceiver<(usize, String)>,
    /// Changes the subscription at a reload, once it is open.
    subscriptions: Option<SubscriptionHandle>,
    /// The bundle file, read again at a reload, and the loaded bundle's id.
    bundle_path: PathBuf,
    bundle_id: String,
    stats: StatsPublisher,
    stats_interval: Duration,
    clock: ServiceClock,
    /// Per-rule log budget against a burst flooding the journal.
    throttle: Throttle,
}

impl Service {
    /// The event loop: one select over the bus, pool reports, state
    /// re-reads, the engine's next deadline (one sleep for every parked
    /// run), the stats tick and `shutdown`.
    async fn serve(
        &mut self,
        mut shutdown: Pin<&mut impl Future<Output = ()>>,
        reloads: &mut mpsc::UnboundedReceiver<()>,
    ) {
        let mut stats = tokio::time::interval(self.stats_interval.max(Duration::from_millis(10)));
        stats.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The first tick is immediate; the counters were just written.
        stats.tick().await;
        let far = || tokio::time::Instant::now() + Duration::from_secs(86_400 * 365);
        let sleep = tokio::time::sleep_until(far());
        tokio::pin!(sleep);
        let mut handled = 0u32;
        loop {
            let deadline = self.engine.next_deadline();
            if let Some(deadline) = deadline {
                let at = tokio::time::Instant::from_std(self.clock.instant(deadline));
                if sleep.deadline() != at {
                    sleep.as_mut().reset(at);
                }
            }
            tokio::select! {
                () = shutdown.as_mut() => break,
                bus = self.intake.next() => {
                    match bus {
                        Bus::Message(message) => self.on_message(&message),
                        // The intake logs these and never queues them.
                        Bus::Oversized { .. } => {}
                        Bus::Restored => self.on_restored(),
                    }
                    handled += 1;
                },
                Some(report) = self.reports.recv() => self.on_report(report),
                Some(()) = reloads.recv() => self.reload_logged().await,
                Some((index, value)) = self.state_values.recv() => {
                    if let Some(pair) = self.payload.state_pairs.get(index) {
                        tracing::debug!(hash = %pair.hash, field = %pair.field, "state changed");
                    }
                    self.engine.state_changed(index, value);
                },
                () = &mut sleep, if deadline.is_some() => {
                    let now = self.now();
                    self.engine.handle_timeout(now);
                    sleep.as_mut().reset(far());
                },
                _ = stats.tick() => {
                    self.stats.write_changes(&self.engine, &self.writer);
                    self.intake.log_overflow();
                    logging::log_held(&self.throttle.roll(Instant::now()));
                },
            }
            // Cheap (two clock reads): at every wake-up, so a jump is seen
            // at the latest at the next stats tick.
            self.check_clock();
            self.perform_effects();
            // Every few events, let the subscription's reader run: under a
            // flood it must keep the socket drained (Redis disconnects a
            // subscriber that falls behind) and drop at the intake bound.
            if handled >= INTAKE_TURN {
                handled = 0;
                tokio::task::yield_now().await;
            }
        }
    }

    /// Rewrites the waiting records after a wall clock jump (see
    /// [`ServiceClock::jumped`]); the effects are performed by the caller.
    fn check_clock(&mut self) {
        if let Some(delta_ms) = self.clock.jumped() {
            let records = self.engine.clock_jumped(delta_ms);
            tracing::info!(
                delta_ms,
                records,
                "wall clock jumped; waiting steps keep their time, their records were shifted"
            );
        }
    }

    fn now(&self) -> Now {
        self.clock.now()
    }

    fn on_message(&mut self, message: &redis::Msg) {
        match Inbound::read(message) {
            Inbound::Event(event) => {
                let now = self.now();
                self.engine.handle_event(now, event);
            }
            Inbound::Skipped { channel, why } => {
                effect_log::log_skipped_event(&channel, &why, &mut self.throttle);
            }
        }
    }

    /// The subscription is back after a lost connection. Nothing here
    /// waits: a step due now must not wait on the command connection.
    fn on_restored(&mut self) {
        // The command connection shared the outage but only notices on its
        // next use: the store writer PINGs it (off this loop) before the
        // writes queued after the PING.
        self.writer.send(StoreOp::Wake);
        // The server may have restarted empty: the counters in full again,
        // and the records of the runs still waiting (behind the PING, in
        // order with their later removals).
        self.stats.write_all(&self.engine, &self.writer);
        let records = self.engine.rewrite_records();
        if records > 0 {
            tracing::info!(records, "pending records written again after the reconnect");
        }
        // Change notifications were missed too: the state reader reads the
        // watched pairs again, in order with later notifications.
        if let Some(reader) = &self.reader {
            reader.reread_all();
        }
    }

    fn on_report(&mut self, report: Report) {
        match report {
            // The worker removed the job's pending record (if any) before
            // it reported the start (`Job::record_to_drop_at_start`).
            Report::Started(job) => self.engine.action_started(job),
            Report::Finished(job, result) => {
                let now = self.now();
                self.engine.action_finished(now, job, result);
            }
            Report::Abandoned(job) => self.engine.action_abandoned(job),
        }
    }

    /// Performs every queued effect, in order. A refused submit feeds the
    /// engine again, which queues more behind the ones still waiting.
    fn perform_effects(&mut self) {
        while let Some(effect) = self.engine.poll_effect() {
            match effect {
                Effect::Submit(job) => self.submit(job),
                // A refused put or drop was logged by the writer with its cost.
                Effect::PutRecord {
                    id, json, write, ..
                } => {
                    let id = id.to_string();
                    self.writer.send(StoreOp::Put { id, json, write });
                }
                Effect::DropRecord { id, reason, rule } => {
                    effect_log::log_record_drop(&id, rule.as_deref(), reason);
                    self.writer.send(StoreOp::Drop {
                        id: id.to_string(),
                        ack: None,
                    });
                }
                other => {
                    logging::log_held(&self.throttle.roll(Instant::now()));
                    log_effect(&other, &mut self.throttle);
                }
            }
        }
    }

    fn submit(&mut self, job: Job) {
        tracing::debug!(
            rule = %job.rule, step = job.step, pass = job.pass, run = %job.run,
            "submitting action"
        );
        if let Err((cause, job)) = self.pool.try_submit(job) {
            effect_log::log_refused(&job, cause, &mut self.throttle);
            // The record stays: the step provably did not run (docs/semantics.md#durability-and-replay).
            let now = self.now();
            self.engine.action_refused(now, job.id);
        }
    }
}

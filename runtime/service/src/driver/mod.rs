//! The driver (docs/service.md#start-and-stop, ARCHITECTURE.md#invariants): one task owning the engine
//! on a current-thread runtime. It selects over pub/sub messages, pool
//! reports, state re-reads, the engine's next deadline (one sleep for every
//! parked run), the stats tick, reload requests and the shutdown signal,
//! feeds the engine and performs its effects in order. No rule behaviour
//! lives here; starting, reloading and stopping are in `start`, `reload`
//! and `stop`.

mod pending_copy;
mod reload;
mod start;
mod stop;
mod wakeups;

pub use reload::{ReloadError, Reloaded};
pub use start::{open_client, Secret, ServiceConfig, ServiceError};

use crate::action_log::ActionLine;
use crate::bus::{BusReader, Publisher, ReadOutcome};
use crate::clock::ServiceClock;
use crate::control::methods::{self, Context, ServiceFacts};
use crate::control::overrides::Overrides;
use crate::control::{Answer, Call, ControlServer};
use crate::effect_log::{self, log_effect};
use crate::intake::Intake;
use crate::logging::{self, Throttle};
use crate::pool::{Pool, Report};
use crate::record_store::{StoreOp, StoreWriter};
use crate::stats::StatsPublisher;
use crate::subscriptions::{Bus, Inbound, Subscriber, SubscriptionHandle};
use redis::aio::ConnectionManager;
use ruled_engine::pool::{Admission, Lane};
use ruled_engine::{Effect, Engine, Job, Now};
use std::collections::BTreeSet;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use wakeups::{Polled, Wakeups};

/// Events handled before the driver lets the other tasks run.
const INTAKE_TURN: u32 = 8;
/// Rules one event matched that the engine handles before the driver
/// performs their effects and lets the store writer send their records
/// (docs/service.md#durable-work-in-bulk): an event parking 10,000 runs
/// has its first records in Redis within a millisecond, not once all
/// 10,000 are decided. The first part is smaller: its records go out
/// after a handful of runs are decided.
const EVENT_PART: usize = 64;
const FIRST_EVENT_PART: usize = 8;
/// Pool reports handled in one turn of the loop.
const REPORT_TURN: usize = 256;

/// Runs the service until `shutdown` resolves, then stops in order; each
/// message on `reloads` (`SIGHUP`) reloads the bundle
/// (docs/service.md#live-reload).
pub async fn run(
    config: ServiceConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
    mut reloads: mpsc::UnboundedReceiver<()>,
) -> Result<(), ServiceError> {
    let mut shutdown = Box::pin(shutdown);
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
    // The loop is a task of the runtime, not part of the future the
    // caller polls (`block_on`'s): a task that wakes another task queues
    // it, where waking `block_on`'s own future writes to the runtime's
    // eventfd, a system call at each wake-up (docs/engine.md#cpu-per-notification).
    let serving = tokio::spawn(async move {
        service.serve(shutdown.as_mut(), &mut reloads).await;
        service.stop().await;
    });
    serving.await.map_err(ServiceError::Driver)
}

/// What wakes the driver's loop.
enum Input {
    Shutdown,
    Bus(Bus),
    Report(Report),
    Call(Call),
    Reload,
    Read(ReadOutcome),
    Power(String),
    /// The engine's next deadline or the stats tick, whichever is first.
    Timer,
}

/// The driver's sources, by their index in [`Wakeups`]: the first three
/// are polled first, in this order; the others take turns.
mod source {
    pub const SHUTDOWN: usize = 0;
    pub const TIMER: usize = 1;
    pub const RELOADS: usize = 2;
    pub const FIRST_TURN: usize = 3;
    pub const INTAKE: usize = 3;
    pub const REPORTS: usize = 4;
    pub const READS: usize = 5;
    pub const CONTROL: usize = 6;
    pub const POWER: usize = 7;
    pub const TURNS: usize = 5;
    pub const COUNT: usize = 8;

    /// The order of a wake-up's polls: the first three, then the five that
    /// take turns, from the `turn`-th on.
    pub fn order(turn: usize) -> impl Iterator<Item = usize> + Clone {
        [SHUTDOWN, TIMER, RELOADS]
            .into_iter()
            .chain((turn..TURNS).chain(0..turn).map(|i| FIRST_TURN + i))
    }
}

/// The engine and everything its effects and inputs need.
#[derive(Debug)]
struct Service {
    engine: Engine,
    /// The command connection (`ConnectionManager` clones share it).
    con: ConnectionManager,
    /// Where the hot path's own connections go (the bus reader's:
    /// [`crate::direct`]).
    direct: crate::direct::Target,
    pool: Pool,
    reports: mpsc::UnboundedReceiver<Report>,
    /// The Redis lane's `Started` reports: sent without waking the driver
    /// (the same actions' outcomes follow on `reports`), taken before
    /// anything else the driver handles ([`Service::take_started`]).
    lane_started: mpsc::UnboundedReceiver<Report>,
    writer: StoreWriter,
    writer_task: JoinHandle<()>,
    /// Until the subscription opens; then the intake drains it.
    subscriber: Option<Subscriber>,
    intake: Intake,
    state_hashes: BTreeSet<String>,
    /// The raw channels the live rules' inputs read (docs/semantics.md#inputs).
    input_channels: BTreeSet<String>,
    /// The reads of watched hashes and polls (docs/service.md#the-bus).
    reader: BusReader,
    reader_task: JoinHandle<()>,
    reads: mpsc::Receiver<ReadOutcome>,
    /// Publishes derived events (stream `events` and `ev:<topic>`).
    /// Hands the derived events to the Redis lane ([`Pool::start_publishing`]).
    publisher: Publisher,
    /// `--sources all|used`, for the status.
    sources: ruled_engine::SourceSet,
    /// The ids of the events we published lately: heard back through an
    /// `ev:` glob, they are dropped without counting them as forged.
    own_ids: crate::bus::RecentIds,
    /// The journal lines of guarded actions handed over: logged when the
    /// action starts, past its guards; dropped when a guard refuses it,
    /// which has a line of its own (docs/service.md#logs).
    guarded_lines: ruled_engine::fast_hash::FastMap<ruled_engine::JobId, ActionLine>,
    /// Changes the subscription at a reload, once it is open.
    subscriptions: Option<SubscriptionHandle>,
    /// The bundle file, read again at a reload, and the loaded bundle's id.
    bundle_path: PathBuf,
    bundle_id: String,
    stats: StatsPublisher,
    stats_interval: Duration,
    namespace: crate::namespace::Namespace,
    clock: ServiceClock,
    /// Per-rule log budget against a burst flooding the journal.
    throttle: Throttle,
    /// The control protocol (docs/operating.md); serving once ready.
    control: Option<ControlServer>,
    overrides: Overrides,
    started: Instant,
    /// `--rules-dir`, and its digest: the revision (docs/operating.md#revisions).
    rules: Option<crate::rules_dir::RulesDir>,
    revision: crate::rules_dir::Revision,
    /// `--pending-file` (docs/service.md#the-pending-file).
    pending_file: Option<crate::pending_file::PendingFile>,
    /// `power-manager` `state` changes, while there is a pending file.
    power: mpsc::UnboundedReceiver<String>,
}

impl Service {
    /// The event loop: waits for the next [`Input`] (the bus, pool
    /// reports, state re-reads, control requests, reloads, power changes,
    /// the one timer of the engine's next deadline and the stats tick,
    /// and `shutdown`), feeds it to the engine and performs the effects.
    async fn serve(
        &mut self,
        mut shutdown: Pin<&mut impl Future<Output = ()>>,
        reloads: &mut mpsc::UnboundedReceiver<()>,
    ) {
        let period = self.stats_interval.max(Duration::from_millis(10));
        // The counters were just written: the first tick is one period on.
        let mut stats_at = tokio::time::Instant::now() + period;
        let sleep = tokio::time::sleep_until(stats_at);
        tokio::pin!(sleep);
        let wakeups = Wakeups::<{ source::COUNT }>::new();
        let mut turn = 0;
        let mut handled = 0u32;
        loop {
            // The stats tick shares the one timer.
            let engine_at = self.engine_deadline();
            let at = engine_at.map_or(stats_at, |at| at.min(stats_at));
            if sleep.deadline() != at {
                sleep.as_mut().reset(at);
                // Polled again before the loop waits (a moved timer is
                // registered anew).
                wakeups.mark(source::TIMER);
            }
            let order = source::order(turn);
            turn = (turn + 1) % source::TURNS;
            let input = std::future::poll_fn(|cx| {
                wakeups.poll(cx, order.clone(), |index, cx| match index {
                    source::SHUTDOWN => shutdown.as_mut().poll(cx).map(|()| Input::Shutdown).into(),
                    source::TIMER => sleep.as_mut().poll(cx).map(|()| Input::Timer).into(),
                    source::RELOADS => Polled::of(reloads.poll_recv(cx)).map(|()| Input::Reload),
                    _ => self.poll_source(index, cx),
                })
            })
            .await;
            // The lane's `Started` reports before anything else (the
            // reports' turn takes them itself).
            if !matches!(input, Input::Shutdown | Input::Report(_)) {
                self.take_started();
            }
            match input {
                Input::Shutdown => break,
                Input::Bus(Bus::Message(message)) => {
                    self.on_message(&message).await;
                    handled += 1;
                }
                // The intake logs these and never queues them.
                Input::Bus(Bus::Oversized { .. }) => handled += 1,
                Input::Bus(Bus::Restored) => {
                    self.on_restored();
                    handled += 1;
                }
                Input::Report(report) => self.on_reports(report),
                Input::Call(call) if call.request.method == methods::RELOAD => {
                    self.answer_reload(call).await;
                }
                Input::Call(call) => self.answer_control(call).await,
                Input::Reload => self.reload_logged().await,
                Input::Read(outcome) => self.on_read(outcome),
                Input::Power(state) => self.power_state(&state),
                Input::Timer => {
                    // The timer fired at its deadline, the earlier of the
                    // two: each whose time it was is due.
                    let fired = sleep.deadline();
                    if engine_at.is_some_and(|at| at <= fired) {
                        let now = self.now();
                        self.engine.handle_timeout(now);
                    }
                    if stats_at <= fired {
                        // Ticks missed while the loop was held are not
                        // made up: the next is one period from now.
                        stats_at = tokio::time::Instant::now() + period;
                        self.stats_tick().await;
                    }
                }
            }
            // A jump the wake-up's readings of the clocks saw (no clock
            // read here): at the latest at the next stats tick.
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

    /// When the next timer or schedule fires (docs/rules.md#schedules).
    fn engine_deadline(&mut self) -> Option<tokio::time::Instant> {
        [self.engine.next_deadline(), self.engine.next_schedule()]
            .into_iter()
            .flatten()
            .min()
            .map(|deadline| tokio::time::Instant::from_std(self.clock.instant(deadline)))
    }

    /// Polls one of the sources the service holds (`index` from
    /// [`source`]).
    fn poll_source(&mut self, index: usize, cx: &mut std::task::Context<'_>) -> Polled<Input> {
        match index {
            source::INTAKE => self.intake.poll_next(cx).map(Input::Bus).into(),
            source::REPORTS => Polled::of(self.reports.poll_recv(cx)).map(Input::Report),
            source::READS => Polled::of(self.reads.poll_recv(cx)).map(Input::Read),
            source::CONTROL => match self.control.as_mut() {
                Some(control) => Polled::of(control.poll_next(cx)).map(Input::Call),
                None => Polled::Absent,
            },
            source::POWER => Polled::of(self.power.poll_recv(cx)).map(Input::Power),
            _ => Polled::Absent,
        }
    }

    /// The stats tick: a reading of the clocks (a jump is seen at the
    /// latest here, when nothing else read them), the pending file's
    /// copy, the counters, the intake's and the log budget's lines.
    async fn stats_tick(&mut self) {
        self.now();
        self.pending_file_tick().await;
        self.stats.write_changes(&self.engine, &self.writer);
        self.intake.log_overflow();
        logging::log_held(&self.throttle.roll(Instant::now()));
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

    async fn on_message(&mut self, message: &crate::pubsub::Message) {
        let channel = message.get_channel_name();
        if !message.from_pattern() && self.input_channels.contains(channel) {
            // Raw input data, never an envelope: the engine decodes it.
            let bytes = message.get_payload_bytes().len();
            tracing::debug!(channel, bytes, "input message");
            let now = self.now();
            self.engine
                .channel_message(now, channel, message.get_payload_bytes());
            return;
        }
        match Inbound::read(message) {
            // An owned topic (derived here, `--bus own`) or an `input.*` one
            // never comes from the bus (docs/service.md#the-bus).
            Inbound::Event(event) if self.engine.refuses_from_bus(&event.topic) => {
                if self.own_ids.contains(event.id.as_deref()) {
                    tracing::trace!(channel, "our own derived event, heard back: dropped");
                    return;
                }
                self.stats.count_rejected();
                let why = if event.topic.starts_with("input.") {
                    "on an `input.*` topic: an input event comes only from its input, never from the bus"
                } else {
                    "on a topic ruled derives and publishes itself (`--bus own`): only ruled publishes it"
                };
                effect_log::log_skipped_event(channel, why, &mut self.throttle);
            }
            Inbound::Event(event) => self.handle_event(event).await,
            Inbound::Skipped { channel, why } => {
                self.stats.count_rejected();
                effect_log::log_skipped_event(&channel, &why, &mut self.throttle);
            }
        }
    }

    /// One event, [`EVENT_PART`] of its matched rules at a time (the first
    /// part [`FIRST_EVENT_PART`]): each
    /// part's effects are performed (its records queued for the store
    /// writer, in order, before the timers they protect can fire) and the
    /// other tasks run before the next part. Nothing else reaches the
    /// engine until the event is handled, so the outcome is that of one
    /// pass (`Engine::event_start`).
    async fn handle_event(&mut self, event: rulecore::event::Event) {
        let now = self.now();
        let Some(mut parts) = self.engine.event_start(now, event) else {
            return;
        };
        let mut part = FIRST_EVENT_PART;
        while self.engine.event_next(&mut parts, part) {
            self.perform_effects();
            tokio::task::yield_now().await;
            part = EVENT_PART;
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
        self.reader.reread_all();
    }

    /// What the bus reader read (docs/sources.md#changes): live values,
    /// which feed `state()` before anything derived from them is
    /// dispatched, or a hash cleared.
    fn on_read(&mut self, outcome: ReadOutcome) {
        let now = self.now();
        match outcome {
            ReadOutcome::Fields { cause, values } => {
                if let Some((index, value)) = values.first() {
                    if let Some(pair) = self.engine.watched_pairs().get(*index) {
                        tracing::debug!(hash = %pair.hash, field = %pair.field, value = ?value, ?cause, "state changed");
                    }
                }
                self.engine.fields_read(now, cause, &values);
            }
            ReadOutcome::Written { expiry, values } => {
                let Some(pair) = values
                    .first()
                    .and_then(|(index, _)| self.engine.watched_pairs().get(*index))
                    .cloned()
                else {
                    return;
                };
                tracing::debug!(hash = %pair.hash, field = %pair.field, value = ?values[0].1, ?expiry, "state changed");
                if !self.engine.written_read(now, expiry, &values) {
                    // A replayed notification (docs/sources.md#changes).
                    self.stats.count_rejected();
                    effect_log::log_skipped_event(
                        &pair.hash,
                        &format!(
                            "of field `{}`: its hash was not written anew (its expiry did not \
                             move), a replayed notification",
                            pair.field
                        ),
                        &mut self.throttle,
                    );
                }
            }
        }
    }

    /// Answers one control request (docs/operating.md#ruled-ctl); a rule turned on or off changes what
    /// is subscribed and watched before the answer goes out, so a client
    /// that publishes right after it is heard.
    async fn answer_control(&mut self, call: Call) {
        let answer = self.on_control(&call);
        // Only `v1.set-enabled` changes which rules are on (it keeps an
        // override); the watched pairs come from the bundle and stay.
        if answer.keep.is_some() {
            let pairs = self.engine.watched_pairs().to_vec();
            self.follow_rules(&pairs).await;
        }
        // The server gave up on it (stopping): nothing to answer.
        let _ = call.answer.send(answer);
    }

    fn on_control(&mut self, call: &Call) -> Answer {
        let (workers_busy, queue_depth) = self.pool.load();
        let pool = self.pool.config();
        let facts = ServiceFacts {
            bundle_id: self.stats.bundle_id().to_string(),
            revision: self.revision.get(),
            namespace: self.namespace.to_string(),
            uptime_ms: u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            workers_busy,
            workers: pool.workers.max(1),
            queue_depth,
            queue_capacity: pool.queue,
            counters: self.stats.counters_now(&self.engine),
            sources: crate::bus::sources_word(self.sources),
            watched_hashes: self.state_hashes.len(),
            replay_held: self.replay_held(),
        };
        let mut context = Context {
            now: self.now(),
            engine: &mut self.engine,
            facts,
            overrides: &mut self.overrides,
            signed: call.signed,
        };
        methods::answer(&mut context, &call.request)
    }

    /// `first`, and the reports already behind it, up to [`REPORT_TURN`]:
    /// a batch of the Redis lane reports hundreds at once, and one turn of
    /// the loop each would cost more than handling them. Each report's
    /// effects are performed before the next, as if each had its turn.
    fn on_reports(&mut self, first: Report) {
        self.take_started();
        self.on_report(first);
        for _ in 1..REPORT_TURN {
            let Ok(report) = self.reports.try_recv() else {
                return;
            };
            self.perform_effects();
            self.take_started();
            self.on_report(report);
        }
    }

    /// The Redis lane's `Started` reports sent so far, each before its
    /// action's outcome (docs/engine.md#cpu-per-notification): the lane
    /// sends them where the driver is not woken, as the outcomes follow.
    fn take_started(&mut self) {
        while let Ok(report) = self.lane_started.try_recv() {
            self.on_report(report);
        }
    }

    fn on_report(&mut self, report: Report) {
        self.follow_report_in_copy(&report);
        self.guarded_line(&report);
        match report {
            // The worker removed the job's pending record (if any) before
            // it reported the start (`Job::record_to_drop_at_start`).
            Report::Started(job) => self.engine.action_started(job),
            Report::Finished(job, result) => {
                let now = self.now();
                self.engine.action_finished(now, job, result);
            }
            Report::NotPerformed { job, record, why } => {
                let now = self.now();
                self.engine.action_not_performed(now, job, record, &why);
            }
            Report::Abandoned(job) => self.engine.action_abandoned(job),
            Report::Guarded(job, refusal) => {
                let now = self.now();
                self.engine.action_guarded(now, job, refusal);
            }
            // Due steps waiting for room go now (docs/semantics.md#due-steps-the-pool-refused).
            Report::Room => {
                if self.engine.due_backlog_len() > 0 {
                    let now = self.now();
                    self.engine.pool_has_room(now, self.pool.room());
                }
            }
        }
    }

    /// A guarded action's journal line once its fate is known: logged when
    /// it starts (its guards passed), forgotten otherwise.
    fn guarded_line(&mut self, report: &Report) {
        if self.guarded_lines.is_empty() {
            return;
        }
        match report {
            Report::Started(job) => {
                if let Some(line) = self.guarded_lines.remove(job) {
                    line.log(&mut self.throttle);
                }
            }
            Report::Guarded(job, _)
            | Report::Finished(job, _)
            | Report::NotPerformed { job, .. }
            | Report::Abandoned(job) => {
                self.guarded_lines.remove(job);
            }
            Report::Room => {}
        }
    }

    /// Performs every queued effect, in order. A refused submit feeds the
    /// engine again, which queues more behind the ones still waiting.
    fn perform_effects(&mut self) {
        while let Some(effect) = self.engine.poll_effect() {
            self.follow_in_copy(&effect);
            match effect {
                Effect::Submit(job) => self.submit(job),
                // A refused put or drop was logged by the writer with its cost.
                Effect::PutRecord {
                    id, json, write, ..
                } => {
                    let id = id.to_string();
                    self.writer.send(StoreOp::Put { id, json, write });
                }
                Effect::Publish(events) => {
                    for event in &events {
                        self.own_ids.insert(event.id.as_deref());
                    }
                    self.publisher.publish(events);
                }
                Effect::Poll { hash, pairs } => self.reader.poll(&hash, pairs),
                Effect::Toast { channel, message } => {
                    crate::guard_read::toast(self.con.clone(), channel, message)
                }
                Effect::ScheduleFired { rule, fire_ms } => {
                    let rule = rule.to_string();
                    self.writer.send(StoreOp::ScheduleFired { rule, fire_ms });
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
        // `finally` only on a finally step's line (docs/semantics.md#finally).
        let finally = job.finally().then_some(true);
        tracing::debug!(
            rule = %job.rule, step = job.step, finally, pass = job.pass, run = %job.run,
            "submitting action"
        );
        let run = Arc::clone(&job.run);
        let lane = Lane::of(&job.action);
        let (id, guarded) = (job.id, job.guard.is_some());
        // Put into words before it is handed over (the pool owns the job
        // then); a refusal follows at `warn`. A guarded action's line waits
        // for the action to start: its guards may refuse it.
        let line = ActionLine::of(&job, &mut self.throttle);
        match self.pool.try_submit(job) {
            Ok(admission) => {
                if guarded {
                    self.guarded_lines.insert(id, line);
                } else {
                    line.log(&mut self.throttle);
                }
                if admission == Admission::Queue {
                    effect_log::log_queued(&run, lane);
                }
            }
            Err((cause, job)) => {
                effect_log::log_refused(&job, cause, &mut self.throttle);
                // The record stays: the step provably did not run (docs/semantics.md#durability-and-replay).
                if let Some(file) = self.pending_file.as_mut() {
                    file.job_not_started(job.id.0);
                }
                let now = self.now();
                self.engine.action_refused(now, job.id);
            }
        }
    }
}

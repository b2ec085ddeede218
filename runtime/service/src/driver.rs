//! The driver (DESIGN.md 6.8, STYLE.md "quinn"): one task owning the engine
//! on a current-thread runtime. It selects over pub/sub messages, pool
//! reports, state re-reads, the engine's next deadline (one sleep for every
//! parked run), the stats tick and the shutdown signal, feeds the engine and
//! performs its effects in order. No rule behaviour lives here.

use crate::bundle::{self, LoadedBundle};
use crate::can::CanSockets;
use crate::logging::{self, Throttle};
use crate::notify;
use crate::pool::{self, Performers, Pool, PoolConfig, Report};
use crate::redis::{self as store, Backoff, StateReader, StoreOp, StoreWriter, Subscriptions};
use redis::aio::{ConnectionManager, PubSubSink, PubSubStream};
use rulecore::bundle::Payload;
use rulecore::event::Event;
use ruled_engine::{
    Counters, DropReason, Effect, EndReason, Engine, EngineConfig, Job, JobId, Level, Note,
    PendingRecord, RuleStats, Time, TriggerOutcome,
};
use std::borrow::Cow;
use std::collections::BTreeSet;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// How long stopping waits for running actions after killing exec groups.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// How long stopping waits for the last writes (the shipped unit's
/// TimeoutStopSec is 15 s: grace + flush stay well under it).
const STOP_FLUSH: Duration = Duration::from_secs(3);

/// The largest event payload handled. A job keeps its event until it runs,
/// so the pool queue (256 by default) times this must stay well inside the
/// service's 48 MB (DESIGN.md 1): 256 x 64 KiB is 16 MiB. Vehicle events are
/// a few hundred bytes.
const MAX_EVENT_BYTES: usize = 64 * 1024;

/// Everything `ruled` is told on its command line.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    pub redis_url: String,
    pub bundle: PathBuf,
    pub pool: PoolConfig,
    /// How far past due a replayed record may be; negative means zero.
    pub replay_window_ms: i64,
    pub stats_interval: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("invalid redis URL `{url}`: {source}")]
    RedisUrl {
        url: String,
        source: redis::RedisError,
    },
    #[error(transparent)]
    Bundle(#[from] bundle::LoadError),
    #[error("reading the pending store `extensions:pending` for replay: {0}")]
    Replay(redis::RedisError),
    #[error("seeding state from redis: {0}")]
    Seed(redis::RedisError),
}

fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Notices a jump of the wall clock against the monotonic one (NTP setting
/// the time, a suspend): timers do not move, but waiting records get their
/// `fire-at` shifted (`Engine::clock_jumped`, docs/service.md "Pending
/// records"). Slewing (NTP's small corrections) stays far below the
/// threshold between two checks.
#[derive(Debug)]
struct ClockWatch {
    /// `wall - monotonic` at the last check, ms.
    offset_ms: i64,
}

impl ClockWatch {
    /// A change of the offset by this much between two checks is a jump.
    const JUMP_MS: i64 = 1000;

    fn new(wall_ms: i64, mono_ms: i64) -> Self {
        Self {
            offset_ms: wall_ms.saturating_sub(mono_ms),
        }
    }

    /// The jump since the last check, if there was one.
    fn check(&mut self, wall_ms: i64, mono_ms: i64) -> Option<i64> {
        let offset = wall_ms.saturating_sub(mono_ms);
        let delta = offset.saturating_sub(self.offset_ms);
        (delta.abs() >= Self::JUMP_MS).then(|| {
            self.offset_ms = offset;
            delta
        })
    }
}

/// Runs the service until `shutdown` resolves, then stops in order.
pub async fn run(
    config: ServiceConfig,
    shutdown: impl Future<Output = ()>,
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
    service.serve(shutdown).await;
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
    subscriber: Subscriber,
    state_hashes: BTreeSet<String>,
    reader: Option<StateReader>,
    state_values: mpsc::UnboundedReceiver<(usize, String)>,
    published: Published,
    stats_interval: Duration,
    /// The engine's monotonic clock starts here.
    origin: Instant,
    /// Per-rule log budget against a burst flooding the journal.
    throttle: Throttle,
    clock: ClockWatch,
}

impl Service {
    /// Start (DESIGN.md 6.8): load and verify the bundle, connect, seed
    /// state, replay pending records, publish counters, then subscribe.
    ///
    /// The bundle comes before the connection (6.8 lists them the other way
    /// round; nothing observable depends on it): a bad bundle or a bad URL
    /// fails at once, not only once Redis answers.
    async fn start(config: ServiceConfig) -> Result<Self, ServiceError> {
        let client = redis::Client::open(config.redis_url.as_str()).map_err(|source| {
            ServiceError::RedisUrl {
                url: config.redis_url.clone(),
                source,
            }
        })?;
        let LoadedBundle { payload, id } = bundle::load(&config.bundle)?;
        let payload = Arc::new(payload);
        tracing::info!(
            bundle = %id,
            path = %config.bundle.display(),
            rules = payload.rules.len(),
            live = payload.rules.iter().filter(|r| r.enabled).count(),
            compiler = %payload.compiler_version,
            "bundle loaded"
        );
        let mut con = store::connect_manager(&client).await;
        tracing::info!(redis = %config.redis_url, "connected to redis");
        let origin = Instant::now();
        let mut engine = Engine::new(
            Arc::clone(&payload),
            EngineConfig {
                replay_window_ms: config.replay_window_ms,
                // Distinct from every earlier process's run ids (DESIGN.md 6.5).
                epoch: wall_ms().to_string(),
                ..EngineConfig::default()
            },
        );

        let seeded = store::seed_state(&mut con, &payload.state_pairs)
            .await
            .map_err(ServiceError::Seed)?;
        for (index, value) in seeded {
            engine.state_changed(index, value);
        }

        let (writer, writer_task) = StoreWriter::start(con.clone());
        let (report_tx, reports) = mpsc::unbounded_channel();
        let pool = Pool::start(
            config.pool,
            Performers {
                redis: Some(con.clone()),
                can: CanSockets::default(),
                // Workers remove a durable step's record before its action.
                store: Some(writer.clone()),
            },
            report_tx,
        );
        // With no live rule, nothing at all is subscribed (DESIGN.md 6.1),
        // not even state: a replay-only tail resumed at start evaluates its
        // `when` against the values seeded above.
        let live_patterns = engine.live_patterns();
        let state_hashes: BTreeSet<String> = if live_patterns.is_empty() {
            BTreeSet::new()
        } else {
            payload
                .state_pairs
                .iter()
                .map(|pair| pair.hash.clone())
                .collect()
        };
        let (state_tx, state_values) = mpsc::unbounded_channel();
        let reader = (!state_hashes.is_empty())
            .then(|| StateReader::start(con.clone(), payload.state_pairs.clone(), state_tx).0);
        let subs = Subscriptions::compute(&live_patterns, &state_hashes);
        let published = Published::new(&engine, id.clone());
        let mut service = Self {
            engine,
            payload,
            con,
            pool,
            reports,
            writer,
            writer_task,
            subscriber: Subscriber::new(client, subs),
            state_hashes,
            reader,
            state_values,
            published,
            stats_interval: config.stats_interval,
            origin,
            throttle: Throttle::new(Instant::now()),
            clock: ClockWatch::new(
                wall_ms(),
                i64::try_from(origin.elapsed().as_millis()).unwrap_or(i64::MAX),
            ),
        };

        // Replay before any subscription opens: a replayed run meets the
        // live triggers' concurrency only afterwards.
        let records = store::read_pending(&mut service.con)
            .await
            .map_err(ServiceError::Replay)?;
        if !records.is_empty() {
            tracing::info!(records = records.len(), "replaying pending records");
        }
        let records = service.decode_pending(records);
        let now = service.now();
        service.engine.replay(now, wall_ms(), records);
        service.perform_effects();

        service
            .published
            .write_all(&service.engine, &service.writer);

        service.subscriber.open().await;
        let subs = &service.subscriber.subs;
        // `subscribed=false` with channels > 0: the first SUBSCRIBE failed
        // and is being retried (logged just before).
        tracing::info!(
            channels = subs.channels.len(),
            patterns = subs.patterns.len(),
            subscribed = service.subscriber.stream.is_some(),
            "ruled ready"
        );
        notify::notify("READY=1");
        Ok(service)
    }

    /// The event loop: one select over the bus, pool reports, state
    /// re-reads, the engine's next deadline (one sleep for every parked
    /// run), the stats tick and `shutdown`.
    async fn serve(&mut self, mut shutdown: Pin<&mut impl Future<Output = ()>>) {
        let mut stats = tokio::time::interval(self.stats_interval.max(Duration::from_millis(10)));
        stats.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The first tick is immediate; the counters were just written.
        stats.tick().await;
        let far = || tokio::time::Instant::now() + Duration::from_secs(86_400 * 365);
        let sleep = tokio::time::sleep_until(far());
        tokio::pin!(sleep);
        loop {
            let deadline = self.engine.next_deadline();
            if let Some(deadline) = deadline {
                let at = tokio::time::Instant::from_std(self.origin + deadline.as_duration());
                if sleep.deadline() != at {
                    sleep.as_mut().reset(at);
                }
            }
            tokio::select! {
                () = shutdown.as_mut() => break,
                bus = self.subscriber.next() => match bus {
                    Bus::Message(message) => self.on_message(&message),
                    Bus::Restored => self.on_restored(),
                },
                Some(report) = self.reports.recv() => self.on_report(report),
                Some((index, value)) = self.state_values.recv() => {
                    if let Some(pair) = self.payload.state_pairs.get(index) {
                        tracing::debug!(hash = %pair.hash, field = %pair.field, "state changed");
                    }
                    self.engine.state_changed(index, value);
                },
                () = &mut sleep, if deadline.is_some() => {
                    let now = self.now();
                    self.engine.handle_timeout(now, wall_ms());
                    sleep.as_mut().reset(far());
                },
                _ = stats.tick() => {
                    self.published.write_changes(&self.engine, &self.writer);
                    logging::log_held(&self.throttle.roll(Instant::now()));
                },
            }
            // Cheap (two clock reads): at every wake-up, so a jump is seen
            // at the latest at the next stats tick.
            self.check_clock();
            self.perform_effects();
        }
    }

    /// Stop (DESIGN.md 6.8): close the subscription, stop the engine (drop
    /// timers and queues, keep records), stop the pool (kill exec groups,
    /// count abandoned jobs), write the last counters, close.
    async fn stop(mut self) {
        tracing::info!("stopping");
        notify::notify("STOPPING=1");
        self.subscriber.close();
        // The records kept must name the right instants on the clock the
        // next start reads.
        self.check_clock();
        self.engine.stop();
        self.perform_effects();
        let abandoned = self.pool.stop(STOP_GRACE).await;
        // The reports of jobs that were running or queued at stop: a job
        // that started still removes its record; abandoned ones keep theirs.
        while let Ok(report) = self.reports.try_recv() {
            self.on_report(report);
        }
        for effect in self.engine.drain_effects() {
            log_effect(&effect, &mut self.throttle);
        }
        // What the last window held back, said before the process ends.
        logging::log_held(&self.throttle.roll(Instant::now() + Throttle::WINDOW));
        if abandoned > 0 {
            tracing::warn!(
                abandoned,
                "actions still queued at stop were abandoned (counted in `dropped`); those of durable steps keep their pending records"
            );
        }
        self.published.write_changes(&self.engine, &self.writer);
        // Bounded: with Redis gone the writer may be retrying, and systemd
        // kills a slow stop (TimeoutStopSec). The records are already
        // written or lost; only the last counters can still be missing.
        let flushed = tokio::time::timeout(STOP_FLUSH, self.writer.flush()).await;
        drop(self.writer);
        if flushed.is_ok() {
            if let Err(e) = self.writer_task.await {
                tracing::error!("store writer task failed: {e}");
            }
        } else {
            tracing::warn!(
                "the last record and counter writes did not finish within {}ms \
                 (Redis slow or gone); stopping without them: a pending record whose \
                 removal was among them runs its step again at the next start",
                STOP_FLUSH.as_millis()
            );
            self.writer_task.abort();
        }
        tracing::info!("stopped");
    }

    /// Rewrites the waiting records after a wall clock jump (see
    /// [`ClockWatch`]); the effects are performed by the caller's loop.
    fn check_clock(&mut self) {
        let mono_ms = i64::try_from(self.origin.elapsed().as_millis()).unwrap_or(i64::MAX);
        if let Some(delta_ms) = self.clock.check(wall_ms(), mono_ms) {
            let records = self.engine.clock_jumped(delta_ms);
            tracing::info!(
                delta_ms,
                records,
                "wall clock jumped; waiting steps keep their time, their records were shifted"
            );
        }
    }

    fn now(&self) -> Time {
        Time::from_duration(self.origin.elapsed())
    }

    fn on_message(&mut self, message: &redis::Msg) {
        let channel = message.get_channel_name();
        if !message.from_pattern() && self.state_hashes.contains(channel) {
            // `PUBLISH <hash> <field>` after an HSET: re-read the field.
            let field: String = match message.get_payload() {
                Ok(field) => field,
                Err(e) => {
                    tracing::warn!(channel, "change notification without a field name: {e}");
                    return;
                }
            };
            match (self.engine.state_index(channel, &field), &self.reader) {
                (Some(index), Some(reader)) => reader.reread(index, channel, &field),
                _ => tracing::trace!(channel, field, "change of an unwatched field"),
            }
            return;
        }
        let payload = message.get_payload_bytes();
        if payload.len() > MAX_EVENT_BYTES {
            let why = format!(
                "of {} bytes, over the {} KiB limit",
                payload.len(),
                MAX_EVENT_BYTES / 1024
            );
            return self.skip_event(channel, &why);
        }
        match Event::decode(payload) {
            Ok(event) => {
                tracing::debug!(channel, topic = %event.topic, "event");
                let now = self.now();
                self.engine.handle_event(now, wall_ms(), event);
            }
            Err(e) => self.skip_event(channel, &format!("that does not decode: {e}")),
        }
    }

    /// Logs an event that is not handled: the channel and the reason, never
    /// the payload (DESIGN.md 6.1). A publisher spamming garbage must not
    /// flood the journal: these lines share the budget of lines of no rule.
    fn skip_event(&mut self, channel: &str, why: &str) {
        logging::log_held(&self.throttle.roll(Instant::now()));
        if self.throttle.admit(None, tracing::Level::WARN) {
            tracing::warn!(channel, "skipping an event {why}");
        } else {
            tracing::debug!(channel, "skipping an event {why}");
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
        self.published.write_all(&self.engine, &self.writer);
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
        let now = self.now();
        match report {
            // The worker removed the job's pending record (if any) before
            // it reported the start (DESIGN.md 6.5, `pool::Job::drop_record`).
            Report::Started(job) => self.engine.action_started(JobId(job)),
            Report::Finished(job, result) => {
                self.engine
                    .action_finished(now, wall_ms(), JobId(job), result);
            }
            Report::Abandoned(job) => self.engine.action_abandoned(JobId(job)),
        }
    }

    /// Decodes the pending store's fields for replay (DESIGN.md 6.5). A
    /// field that is not a record of its own run is logged, once, with the
    /// precise reason, and removed.
    fn decode_pending(&self, fields: Vec<(String, Vec<u8>)>) -> Vec<PendingRecord> {
        let mut records = Vec::with_capacity(fields.len());
        for (field, value) in fields {
            match PendingRecord::decode_field(&field, &value) {
                Ok(record) => records.push(record),
                Err(error) => {
                    tracing::warn!(
                        run = %field,
                        reason = error.code(),
                        "removing pending record: {error}"
                    );
                    self.writer.send(StoreOp::Drop {
                        id: field,
                        ack: None,
                    });
                }
            }
        }
        records
    }

    /// Performs every queued effect, in order. A refused submit feeds the
    /// engine again, which queues more behind the ones still waiting.
    fn perform_effects(&mut self) {
        while let Some(effect) = self.engine.poll_effect() {
            match effect {
                Effect::Submit(job) => self.submit(job),
                // A refused put or drop was logged by the writer with its cost.
                Effect::PutRecord {
                    id, json, rewrite, ..
                } => {
                    let id = id.to_string();
                    self.writer.send(if rewrite {
                        StoreOp::Rewrite { id, json }
                    } else {
                        StoreOp::Put { id, json }
                    });
                }
                Effect::DropRecord { id, reason, rule } => {
                    // A replay removal was logged by its note, at info.
                    if !matches!(reason, DropReason::Replay(_)) {
                        tracing::debug!(
                            run = %id,
                            rule = rule.as_deref().map(tracing::field::display),
                            reason = reason.as_str(),
                            "removing pending record"
                        );
                    }
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
        let submitted = self.pool.submit(pool::Job {
            id: job.id.0,
            action: job.action,
            event: job.event,
            drop_record: job.drop_record,
        });
        let Err(refused) = submitted else {
            return;
        };
        // One line, with the cause the engine does not know.
        logging::log_held(&self.throttle.roll(Instant::now()));
        let admitted = self.throttle.admit(Some(&job.rule), tracing::Level::WARN);
        macro_rules! refused {
            ($level:ident) => {
                tracing::$level!(
            rule = %job.rule,
            step = job.step,
            pass = job.pass,
            run = %job.run,
            cause = %refused,
            "worker pool refused the action; the run ends (counted in `dropped`)"
                )
            };
        }
        if admitted {
            refused!(warn);
        } else {
            refused!(debug);
        }
        // The record stays: the step provably did not run (DESIGN.md 6.5).
        let now = self.now();
        self.engine.action_refused(now, wall_ms(), job.id);
    }
}

/// What the bus said.
#[derive(Debug)]
enum Bus {
    Message(redis::Msg),
    /// The subscription was reopened after a lost connection.
    Restored,
}

/// The pub/sub side: the subscription, and its reconnection with backoff
/// after a lost connection (DESIGN.md 6.8).
struct Subscriber {
    client: redis::Client,
    subs: Subscriptions,
    stream: Option<PubSubStream>,
    /// Kept alive with the stream: dropping it ends the subscription.
    sink: Option<PubSubSink>,
    reconnect_at: Option<tokio::time::Instant>,
    backoff: Backoff,
}

impl std::fmt::Debug for Subscriber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscriber")
            .field("subs", &self.subs)
            .field("open", &self.stream.is_some())
            .field("reconnect_at", &self.reconnect_at)
            .finish()
    }
}

impl Subscriber {
    fn new(client: redis::Client, subs: Subscriptions) -> Self {
        Self {
            client,
            subs,
            stream: None,
            sink: None,
            reconnect_at: None,
            backoff: Backoff::default(),
        }
    }

    /// Subscribes, unless there is nothing to subscribe to (then nothing at
    /// all is opened: idle costs nothing).
    async fn open(&mut self) {
        if self.subs.is_empty() {
            tracing::info!("no live rules and no watched state: not subscribing to anything");
            return;
        }
        if let Err(e) = self.try_open().await {
            let delay = self.backoff.next_delay();
            tracing::warn!(
                "cannot subscribe ({e}); retrying in {}ms",
                delay.as_millis()
            );
            self.reconnect_at = Some(tokio::time::Instant::now() + delay);
        }
    }

    async fn try_open(&mut self) -> redis::RedisResult<()> {
        let (sink, stream) = store::open_pubsub(&self.client, &self.subs).await?;
        self.sink = Some(sink);
        self.stream = Some(stream);
        self.reconnect_at = None;
        self.backoff = Backoff::default();
        Ok(())
    }

    /// The next message, or `Restored` after a reconnect. Pending forever
    /// when nothing is subscribed. Cancel-safe: a dropped call loses no
    /// message and leaves a reconnect scheduled.
    async fn next(&mut self) -> Bus {
        loop {
            if let Some(stream) = self.stream.as_mut() {
                if let Some(message) = store::next_message(stream).await {
                    return Bus::Message(message);
                }
                self.stream = None;
                self.sink = None;
                tracing::warn!(
                    "pub/sub connection lost; reconnecting. Triggers published while \
                     disconnected are not replayed"
                );
                self.reconnect_at = Some(tokio::time::Instant::now() + self.backoff.next_delay());
            }
            let Some(at) = self.reconnect_at else {
                return std::future::pending().await;
            };
            tokio::time::sleep_until(at).await;
            match self.try_open().await {
                Ok(()) => {
                    tracing::info!("pub/sub subscription restored");
                    return Bus::Restored;
                }
                Err(e) => {
                    let delay = self.backoff.next_delay();
                    tracing::warn!(
                        "cannot resubscribe ({e}); retrying in {}ms",
                        delay.as_millis()
                    );
                    self.reconnect_at = Some(tokio::time::Instant::now() + delay);
                }
            }
        }
    }

    fn close(&mut self) {
        self.stream = None;
        self.sink = None;
        self.reconnect_at = None;
    }
}

fn log_effect(effect: &Effect, throttle: &mut Throttle) {
    match effect {
        Effect::Log(line) => {
            let level = match line.level {
                Level::Error => tracing::Level::ERROR,
                Level::Warn => tracing::Level::WARN,
                Level::Info => tracing::Level::INFO,
                Level::Debug => tracing::Level::DEBUG,
            };
            let admitted =
                level == tracing::Level::DEBUG || throttle.admit(line.rule.as_deref(), level);
            match (admitted, line.level) {
                (false, _) | (true, Level::Debug) => tracing::debug!("{line}"),
                (true, Level::Error) => tracing::error!("{line}"),
                (true, Level::Warn) => tracing::warn!("{line}"),
                (true, Level::Info) => tracing::info!("{line}"),
            }
        }
        Effect::Note(note) => log_note(note, throttle),
        Effect::Submit(job) => {
            tracing::debug!(rule = %job.rule, step = job.step, "not submitted: stopping")
        }
        Effect::PutRecord { id, .. } => tracing::debug!(run = %id, "record not written: stopping"),
        Effect::DropRecord { id, .. } => tracing::debug!(run = %id, "record not removed: stopping"),
    }
}

/// A note as one log line: the note's own fields ([`Note::fields`]) and a
/// level and message per variant (below).
fn log_note(note: &Note, throttle: &mut Throttle) {
    let Some((info, message)) = note_message(note) else {
        return;
    };
    let fields = note.fields();
    let info = info && throttle.admit(Some(fields.rule), tracing::Level::INFO);
    let run = fields.run.map(tracing::field::display);
    // An absent field (`None`) is left out of the line.
    macro_rules! line {
        ($level:ident) => {
            tracing::$level!(
                rule = %fields.rule,
                run,
                step = fields.step,
                pass = fields.pass,
                fire_at = fields.fire_at,
                reason = fields.reason,
                "{message}"
            )
        };
    }
    if info {
        line!(info);
    } else {
        line!(debug);
    }
}

/// Whether a note is logged at `info` (else `debug`), and its message;
/// `None`: not logged. `info` says that a rule fired or was stopped; the
/// routine ends and ignored triggers are `debug`, to keep the journal
/// (flash) quiet on a busy bus. Failures are logged by the engine at `warn`
/// already.
fn note_message(note: &Note) -> Option<(bool, Cow<'static, str>)> {
    let (info, message) = match note {
        Note::RunStart { .. } => (true, "run started"),
        Note::RunEnd { reason, .. } => match reason {
            EndReason::Cancelled
            | EndReason::Restarted
            | EndReason::Failed
            | EndReason::Refused => (true, "run ended"),
            EndReason::Done | EndReason::WhenFalse | EndReason::Stopped => (false, "run ended"),
        },
        Note::StepSkipped { .. } => (false, "step's `when` is false: run ends"),
        Note::Trigger { outcome, .. } => match outcome {
            TriggerOutcome::Suppressed => (false, "trigger ignored: within cooldown"),
            TriggerOutcome::Dropped => {
                (false, "trigger dropped: a run is live (concurrency `drop`)")
            }
            TriggerOutcome::Queued => {
                (false, "trigger queued: a run is live (concurrency `queue`)")
            }
            // The engine logs the refusal at warn, with the backlog size.
            TriggerOutcome::Refused => return None,
        },
        // A resumed record is a run start like any other (it counts in the
        // rule's `runs`); the fields say where it resumes.
        Note::ReplayResume { .. } => (true, "run started (replayed)"),
        Note::ReplayDrop { reason, .. } => {
            let message = format!("pending record removed at replay: {}", reason.describe());
            return Some((true, Cow::Owned(message)));
        }
        Note::RecordKept { .. } => (true, "stopping: pending record kept for the next start"),
    };
    Some((info, Cow::Borrowed(message)))
}

/// What was last written to the counters and rule statistics hashes, so a
/// stats tick writes only what changed (nothing at all when idle).
#[derive(Debug)]
struct Published {
    counters: Counters,
    rules: Vec<RuleStats>,
    bundle_id: String,
    /// A write was refused (store queue full): what Redis holds is unknown,
    /// so the next tick writes everything again.
    stale: bool,
}

impl Published {
    fn new(engine: &Engine, bundle_id: String) -> Self {
        let rules = (0..engine.payload().rules.len())
            .map(|index| engine.rule_stats(index).unwrap_or_default())
            .collect();
        Self {
            counters: engine.counters(),
            rules,
            bundle_id,
            stale: false,
        }
    }

    /// Writes the counters and every rule's statistics in full.
    fn write_all(&mut self, engine: &Engine, writer: &StoreWriter) {
        *self = Self::new(engine, std::mem::take(&mut self.bundle_id));
        let counters = writer.send(StoreOp::Counters(full_counters(
            &self.counters,
            &self.bundle_id,
        )));
        let rules = engine
            .payload()
            .rules
            .iter()
            .zip(&self.rules)
            .map(|(rule, stats)| (rule.name.clone(), rule_stats_json(stats)))
            .collect();
        let rules = writer.send(StoreOp::AllRuleStats(rules));
        self.stale = !(counters && rules);
    }

    fn write_changes(&mut self, engine: &Engine, writer: &StoreWriter) {
        if self.stale {
            self.write_all(engine, writer);
            return;
        }
        let counters = engine.counters();
        let changed = changed_counters(&self.counters, &counters);
        if !changed.is_empty() {
            self.stale |= !writer.send(StoreOp::Counters(changed));
            self.counters = counters;
        }
        let mut rules = Vec::new();
        for (index, (rule, old)) in engine
            .payload()
            .rules
            .iter()
            .zip(self.rules.iter_mut())
            .enumerate()
        {
            let current = engine.rule_stats(index).unwrap_or_default();
            if current != *old {
                rules.push((rule.name.clone(), rule_stats_json(&current)));
                *old = current;
            }
        }
        if !rules.is_empty() {
            self.stale |= !writer.send(StoreOp::RuleStats(rules));
        }
    }
}

fn rule_stats_json(stats: &RuleStats) -> String {
    serde_json::json!({
        "runs": stats.runs_started,
        "last-fire": stats.last_fire_ms,
        "errors": stats.errors,
        "active": stats.active_runs,
    })
    .to_string()
}

/// The counters hash in full (DESIGN.md 6.7).
fn full_counters(counters: &Counters, bundle_id: &str) -> Vec<(&'static str, String)> {
    let mut fields = counter_fields(counters);
    fields.push(("version", env!("CARGO_PKG_VERSION").to_string()));
    fields.push(("bundle", bundle_id.to_string()));
    fields
}

fn counter_fields(c: &Counters) -> Vec<(&'static str, String)> {
    vec![
        ("rules", c.rules.to_string()),
        ("dispatched", c.dispatched.to_string()),
        ("dropped", c.dropped.to_string()),
        ("refused", c.refused.to_string()),
        ("failed", c.failed.to_string()),
        ("pending", c.pending.to_string()),
        ("runs-active", c.runs_active.to_string()),
    ]
}

/// Only the fields that differ from what was last written.
fn changed_counters(old: &Counters, new: &Counters) -> Vec<(&'static str, String)> {
    counter_fields(new)
        .into_iter()
        .zip(counter_fields(old))
        .filter(|(new, old)| new.1 != old.1)
        .map(|(new, _)| new)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_watch_sees_jumps_not_drift() {
        let mut watch = ClockWatch::new(1_000_000, 0);
        // Both clocks advance together, or drift by a little: no jump.
        assert_eq!(watch.check(1_010_000, 10_000), None);
        assert_eq!(watch.check(1_020_500, 20_000), None);
        // The wall clock is set an hour ahead, then back.
        assert_eq!(watch.check(4_630_000, 30_000), Some(3_600_000));
        assert_eq!(watch.check(4_640_000, 40_000), None);
        assert_eq!(watch.check(1_050_000, 50_000), Some(-3_600_000));
    }

    #[test]
    fn only_changed_counters_are_written() {
        let old = Counters {
            rules: 2,
            dispatched: 5,
            ..Counters::default()
        };
        let new = Counters {
            rules: 2,
            dispatched: 7,
            pending: 1,
            ..Counters::default()
        };
        assert_eq!(
            changed_counters(&old, &new),
            vec![
                ("dispatched", "7".to_string()),
                ("pending", "1".to_string())
            ]
        );
        assert!(changed_counters(&new, &new).is_empty());
        let full = full_counters(&new, "abc");
        assert_eq!(full.len(), 9);
        assert_eq!(full[8], ("bundle", "abc".to_string()));
    }
}

//! Start (docs/service.md#start-and-stop), step by step: load and verify the bundle,
//! connect, seed state, apply the overrides, replay pending records,
//! publish counters, subscribe, then serve the control protocol.

use super::Service;
use crate::bundle::{self, LoadedBundle};
use crate::bus::{self, BusReader, Publisher, Watch};
use crate::can::CanSockets;
use crate::clock::{wall_ms, ServiceClock};
use crate::connection;
use crate::control::add::Adding;
use crate::control::local::Local;
use crate::control::trust::{Trust, TrustConfig};
use crate::control::{overrides::Overrides, wire::ControlKeys, ControlServer};
use crate::intake::{Intake, StateWatch};
use crate::logging::Throttle;
use crate::namespace::Namespace;
use crate::notify;
use crate::owner::{self, Owner};
use crate::pool::{Performers, Pool, Report};
use crate::record_store::{self, StoreWriter};
use crate::rules_dir::{Revision, RulesDir};
use crate::stats::StatsPublisher;
use crate::subscriptions::{Subscriber, Subscriptions};
use crate::tls::Tls;
use redis::aio::ConnectionManager;
use rulecore::bundle::Payload;
use ruled_engine::pool::PoolConfig;
use ruled_engine::{Engine, EngineConfig};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Records replay acts on before the service takes their effects.
const REPLAY_PART: usize = 256;

/// Everything `ruled` is told on its command line.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    pub redis_url: String,
    /// Overrides the URL's password (from `--redis-password-file` or
    /// `RULED_REDIS_PASSWORD`, docs/service.md#flags).
    pub redis_password: Option<Secret>,
    /// The CA certificates (PEM) a `rediss://` server's certificate must
    /// chain to, instead of the compiled-in roots (docs/service.md#tls).
    pub redis_ca_file: Option<PathBuf>,
    pub bundle: PathBuf,
    pub pool: PoolConfig,
    /// How far past due a replayed record may be; negative means zero.
    pub replay_window_ms: i64,
    pub stats_interval: Duration,
    /// The namespace of every key ruled owns (docs/service.md#key-namespace).
    pub namespace: Namespace,
    /// Runs traced per rule; 0 turns traces off (docs/semantics.md#traces).
    pub traces: usize,
    /// The byte budget of all traces together.
    pub trace_memory: usize,
    /// `--bus own|follow` (docs/service.md#the-bus).
    pub bus: ruled_engine::BusMode,
    /// `--sources all|used` (docs/service.md#the-bus).
    pub sources: ruled_engine::SourceSet,
    /// `--rules-dir` and `--rulec` (docs/service.md#the-rules-directory):
    /// the revision is the directory's digest, and `v1.add` writes there.
    pub rules: Option<RulesDir>,
    /// `--control-key`, `--control-mutations` (docs/operating.md#trust).
    pub trust: TrustConfig,
    /// `--pending-file` (docs/service.md#the-pending-file).
    pub pending_file: Option<PathBuf>,
}

/// A password: never shown, not even in `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// `url` is redacted ([`connection::redact_url`]).
    #[error("invalid redis URL `{url}`: {source}")]
    RedisUrl {
        url: String,
        source: redis::RedisError,
    },
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    #[error(transparent)]
    Trust(#[from] crate::control::trust::TrustError),
    #[error(transparent)]
    Bundle(#[from] bundle::LoadError),
    #[error("reading the pending store `{key}` for replay: {source}")]
    Replay {
        key: String,
        source: redis::RedisError,
    },
    #[error("reading the counters hash `{key}` at start: {source}")]
    Counters {
        key: String,
        source: redis::RedisError,
    },
    #[error("seeding state from redis: {0}")]
    Seed(redis::RedisError),
    #[error("reading the overrides `{key}`: {source}")]
    Overrides {
        key: String,
        source: redis::RedisError,
    },
    /// The task running the event loop ended without stopping in order
    /// (it panicked, or the runtime went away under it).
    #[error("the event loop ended abnormally: {0}")]
    Driver(tokio::task::JoinError),
}

impl Service {
    /// Start (docs/service.md#start-and-stop): load and verify the bundle, connect, seed
    /// state, apply the overrides, replay pending records, publish counters,
    /// subscribe, then serve the control protocol.
    ///
    /// The bundle comes before the connection: a bad bundle or a bad URL
    /// fails at once, not only once Redis answers.
    pub(super) async fn start(config: ServiceConfig) -> Result<Self, ServiceError> {
        let (owner, started) = (Owner::current(), Instant::now()); // now, not once Redis answers
        let (client, tls) = open_client(
            &config.redis_url,
            config.redis_password.as_ref(),
            config.redis_ca_file.as_deref(),
        )?;
        let (payload, bundle_id) = load_bundle(&config)?;
        let trust = Trust::new(config.trust.clone())?;
        let mut con = connection::connect_manager(&client).await;
        tracing::info!(redis = %connection::redact_url(&config.redis_url), "connected to redis");
        let clock = ServiceClock::start();
        let mut engine = Engine::new(Arc::clone(&payload), engine_config(&config));
        // Before anything is subscribed or seeded: a rule turned off stays
        // off, and what it alone needed is neither read nor watched.
        let keys = ControlKeys::for_namespace(&config.namespace);
        let mut overrides = Overrides::load(&mut con, &keys.overrides, engine.payload())
            .await
            .map_err(|source| ServiceError::Overrides {
                key: keys.overrides.clone(),
                source,
            })?;
        overrides.apply(&mut engine);
        // Seeding: the live pairs' values as they are, emitting nothing
        // (docs/sources.md#changes, docs/semantics.md#inputs).
        let live = engine.live_pairs();
        bus::seed(&mut con, &mut engine, &live)
            .await
            .map_err(ServiceError::Seed)?;
        let (writer, writer_task) = StoreWriter::start(con.clone(), &config.namespace);
        // The actions' own connection: no reply timeout of its own, each
        // push waits as long as its step's `timeout`
        // (docs/semantics.md#worker-pool-and-actions).
        let actions = connection::connect_manager_with(&client, None).await;
        // The hot path's own connections: the reads, the publication, the
        // lane's actions (docs/service.md#connections).
        let direct = crate::direct::Target::new(client.get_connection_info().clone(), tls.clone());
        // The derived events go out with the lane's pushes, in the same
        // writes (docs/service.md#the-bus).
        let (publisher, publications) = Publisher::new(config.namespace.bus_last_id());
        let lane = direct.connection(Some(connection::RESPONSE_TIMEOUT));
        let (pool, reports, lane_started) =
            start_pool(config.pool, &actions, lane, publications, &writer);
        let state_hashes = watched_hashes(&engine);
        let (reader, reader_task, reads) = BusReader::start(
            direct.connection(Some(connection::RESPONSE_TIMEOUT)),
            Watch::of(&engine, state_hashes.clone()),
        );
        let (subs, input_channels) = subscriptions_for(&engine, &state_hashes);
        let stats = StatsPublisher::new(&engine, bundle_id.clone(), &owner);
        let (revision, local) = rules_dir_side(&config).await;
        let (pending_file, power) = pending_copy_parts(&config, &client, &con);
        let mut service = Self {
            engine,
            con,
            direct,
            pool,
            reports,
            lane_started,
            writer,
            writer_task,
            subscriber: Some(Subscriber::new(client.clone(), tls.clone(), subs)),
            intake: Intake::idle(stats.overflow(), stats.rejected()),
            state_hashes,
            input_channels,
            reader,
            reader_task,
            reads,
            publisher,
            sources: config.sources,
            own_ids: bus::RecentIds::default(),
            guarded_lines: Default::default(),
            subscriptions: None,
            bundle_path: config.bundle.clone(),
            bundle_id,
            stats,
            stats_interval: config.stats_interval,
            namespace: config.namespace,
            clock,
            throttle: Throttle::new(Instant::now()),
            control: None,
            overrides,
            started,
            rules: config.rules.clone(),
            revision,
            pending_file,
            power,
        };
        service.check_owner().await?;
        service.check_bus().await?;
        service.replay_and_schedules().await?;
        service.stats.write_all(&service.engine, &service.writer);
        // Ready means ready: the start's writes done before any event (docs/service.md#start-and-stop).
        service.writer.flush().await;
        service.subscribe().await;
        service.control = Some(ControlServer::start(client, tls, keys, trust, local));
        notify::notify("READY=1");
        Ok(service)
    }

    /// Replays the pending store, before any subscription opens: a replayed
    /// run meets the live triggers' concurrency only afterwards.
    pub(super) async fn replay(&mut self) -> Result<(), ServiceError> {
        self.replay_only(None).await
    }

    /// [`Service::replay`] of the records whose ids are in `only` (all
    /// when `None`): a held replay (docs/service.md#the-pending-file) comes
    /// after the subscription, when `NS:pending` also holds this process's
    /// own runs' records, which are not replayed.
    pub(super) async fn replay_only(
        &mut self,
        only: Option<&std::collections::HashSet<String>>,
    ) -> Result<(), ServiceError> {
        let engine = &self.engine;
        let refusals =
            |records: &[ruled_engine::PendingRecord]| engine.refusals_without_clock(records);
        let (mut records, scan) =
            record_store::read_pending_scan(&mut self.con, &self.namespace, &refusals)
                .await
                .map_err(|source| ServiceError::Replay {
                    key: self.namespace.pending(),
                    source,
                })?;
        if let Some(only) = only {
            records.retain(|record| only.contains(record.id.as_str()));
        }
        if !records.is_empty() || scan.removed > 0 {
            tracing::info!(
                records = records.len(),
                removed = scan.removed,
                "replaying pending records"
            );
        }
        if scan.left > 0 {
            tracing::warn!(
                left = scan.left,
                budget_kib = record_store::REPLAY_BUDGET_BYTES / 1024,
                "more pending records than replay holds at once; the rest stay in \
                 `{}` for the next start",
                self.namespace.pending()
            );
        }
        let now = self.now();
        // A part at a time, each part's effects and notes taken before the
        // next: the notes of every resumed run queued at once would stay
        // as the engine queue's capacity (docs/engine.md#the-decoded-payload-and-replay).
        // Between parts the pool and the store writer run: the first
        // overdue steps are under way while later ones are decided.
        if let Some(mut replay) = self.engine.replay_start(now, records) {
            while self.engine.replay_next(&mut replay, REPLAY_PART) {
                self.perform_effects();
                tokio::task::yield_now().await;
            }
        }
        self.perform_effects();
        Ok(())
    }

    /// The pending file put back (or the replay held), replay, then the
    /// schedules armed.
    async fn replay_and_schedules(&mut self) -> Result<(), ServiceError> {
        if self.restore_pending_file().await {
            self.replay().await?;
        }
        self.start_schedules().await;
        Ok(())
    }

    /// Arms the schedules after replay (docs/rules.md#schedules): the
    /// system's zone, each rule's last fire from `NS:schedule`; a fire
    /// missed while down runs now when it is within the replay window.
    async fn start_schedules(&mut self) {
        let zone = crate::schedule::system_zone();
        let last = crate::schedule::last_fires(&mut self.con, &self.namespace, &self.engine)
            .await
            .unwrap_or_else(|error| {
                tracing::warn!(
                    "`{}` not read ({error}): a fire missed while down is not run",
                    self.namespace.schedule()
                );
                Vec::new()
            });
        if self
            .engine
            .payload()
            .rules
            .iter()
            .any(|rule| rule.schedule().is_some())
        {
            tracing::info!(timezone = zone.name(), "schedules read local time");
        }
        self.engine.set_zone(zone);
        let now = self.now();
        self.engine.start_schedules(now, &last);
        self.perform_effects();
    }

    /// Looks at the counters hash before ruled writes its own fields there,
    /// and warns about another writer (docs/service.md#key-namespace).
    async fn check_owner(&mut self) -> Result<(), ServiceError> {
        let known = self.stats.known_fields();
        let me = self.stats.owner().clone();
        owner::check(
            &mut self.con,
            &self.namespace,
            &me,
            &known,
            self.stats_interval,
        )
        .await
        .map_err(|source| ServiceError::Counters {
            key: self.namespace.counters().to_string(),
            source,
        })
    }

    /// The bus at start (docs/service.md#the-bus): our event ids above the
    /// stream's newest, the warning when another adapter publishes, and
    /// one line saying how ruled stands to the bus.
    async fn check_bus(&mut self) -> Result<(), ServiceError> {
        let known = self.stats.known_fields();
        let me = self.stats.owner().clone();
        let checks = bus::StartChecks {
            known: &known,
            me: &me,
            stats_interval: self.stats_interval,
        };
        bus::start_checks(&mut self.con, &mut self.engine, &self.namespace, checks)
            .await
            .map_err(|source| ServiceError::Counters {
                key: format!("{} (and stream `{}`)", Namespace::default(), bus::STREAM),
                source,
            })?;
        let profile = self
            .engine
            .profile()
            .map(|(name, digest)| format!("{name} {digest}"));
        tracing::info!(
            bus = bus::bus_word(self.engine.bus_mode()),
            sources = bus::sources_word(self.sources),
            profile = profile.as_deref().unwrap_or("none"),
            owned_topics = self.engine.owned_topics().len(),
            watched_hashes = self.state_hashes.len(),
            polls = self.engine.polls().len(),
            "bus"
        );
        Ok(())
    }

    /// Opens the subscription (nothing at all with nothing to watch) and
    /// hands it to the intake.
    async fn subscribe(&mut self) {
        let Some(mut subscriber) = self.subscriber.take() else {
            return;
        };
        subscriber.open().await;
        let subs = subscriber.subscriptions();
        // `subscribed=false` with channels > 0: the first SUBSCRIBE failed
        // and is being retried (logged just before).
        tracing::info!(
            channels = subs.channel_count(),
            patterns = subs.pattern_count(),
            subscribed = subscriber.is_open(),
            "ruled ready"
        );
        // Started even with nothing to subscribe: a reload may give it
        // something (the idle subscriber waits for that, costing nothing).
        self.subscriptions = Some(subscriber.handle());
        let watch = self.state_watch();
        self.intake.start(subscriber, watch);
    }

    /// What the intake needs to tell change notifications of watched state
    /// from events, for the loaded bundle.
    pub(super) fn state_watch(&self) -> Option<StateWatch> {
        Some(StateWatch {
            reader: self.reader.clone(),
            hashes: self.state_hashes.iter().cloned().collect(),
        })
    }
}

/// The Redis client for `--redis`, with the password given apart from the
/// URL (if any) replacing the URL's, and the pub/sub reader's TLS settings
/// for a `rediss://` URL (docs/service.md#tls). `ruled ctl` opens its
/// client the same way.
pub fn open_client(
    redis_url: &str,
    redis_password: Option<&Secret>,
    redis_ca_file: Option<&std::path::Path>,
) -> Result<(redis::Client, Tls), ServiceError> {
    use redis::IntoConnectionInfo;
    let url = connection::redact_url(redis_url);
    let bad_url = |source| ServiceError::RedisUrl {
        url: url.clone(),
        source,
    };
    crate::tls::check_built(&url)?;
    let mut info = redis_url.into_connection_info().map_err(bad_url)?;
    if let Some(Secret(password)) = redis_password {
        let settings = info.redis_settings().clone().set_password(password);
        info = info.set_redis_settings(settings);
    }
    Ok(crate::tls::client(info, &url, redis_ca_file)?)
}

/// The engine's settings from the service's.
fn engine_config(config: &ServiceConfig) -> EngineConfig {
    EngineConfig {
        replay_window_ms: config.replay_window_ms,
        // Distinct from every earlier process's run ids (docs/semantics.md#durability-and-replay).
        epoch: wall_ms().to_string(),
        traces: config.traces,
        trace_memory: config.trace_memory,
        bus: config.bus,
        sources: config.sources,
        ..EngineConfig::default()
    }
}

/// Loads and verifies the bundle (a bad one is fatal, naming the check).
fn load_bundle(config: &ServiceConfig) -> Result<(Arc<Payload>, String), ServiceError> {
    let LoadedBundle { payload, id } = bundle::load(&config.bundle)?;
    tracing::info!(
        bundle = %id,
        path = %config.bundle.display(),
        rules = payload.rules.len(),
        live = payload.rules.iter().filter(|r| r.enabled).count(),
        compiler = %payload.compiler_version,
        "bundle loaded"
    );
    Ok((Arc::new(payload), id))
}

fn start_pool(
    config: PoolConfig,
    con: &ConnectionManager,
    lane: crate::direct::Direct,
    publications: crate::bus::Publications,
    writer: &StoreWriter,
) -> (
    Pool,
    mpsc::UnboundedReceiver<Report>,
    mpsc::UnboundedReceiver<Report>,
) {
    let (report_tx, reports) = mpsc::unbounded_channel();
    let (started_tx, started) = mpsc::unbounded_channel();
    let performers = Performers {
        redis: Some(con.clone()),
        // An action's replies wait for its step's `timeout`, derived
        // events' alone for the connection's 30 s.
        lane: Some(lane),
        can: CanSockets::default(),
        // Workers remove a durable step's record before its action.
        store: Some(writer.clone()),
    };
    let pool = Pool::start_publishing(
        config,
        performers,
        report_tx,
        Some(publications),
        Some(started_tx),
    );
    (pool, reports, started)
}

/// What the engine's rules need subscribed: their topics, the watched
/// state hashes, and input channels exactly (docs/semantics.md#inputs);
/// with the input channels apart, to tell their messages from events.
pub(super) fn subscriptions_for(
    engine: &Engine,
    state_hashes: &BTreeSet<String>,
) -> (Subscriptions, BTreeSet<String>) {
    let input_channels: BTreeSet<String> = engine.input_channels().into_iter().collect();
    let mut channels = state_hashes.clone();
    channels.extend(input_channels.iter().cloned());
    // An owned or `input.*` topic never comes from the bus: not subscribed
    // exactly (docs/service.md#the-bus).
    let subs = Subscriptions::compute_refusing(
        engine.payload(),
        |rule| engine.is_enabled(rule),
        channels,
        |topic| engine.refuses_from_bus(topic),
    );
    (subs, input_channels)
}

/// The hashes whose change notifications are subscribed: those of the
/// engine's live pairs, polled-only hashes left out. With no live rule,
/// only the sources' hashes (`--sources all` publishes the bus for
/// everyone, docs/service.md#the-bus): a replay-only tail resumed at start
/// evaluates its `when` against the values seeded at start
/// (docs/semantics.md#events).
pub(super) fn watched_hashes(engine: &Engine) -> BTreeSet<String> {
    let any_live = (engine.payload().rules.iter().enumerate()).any(|(index, rule)| {
        engine.is_enabled(index) && !(rule.on.is_empty() && rule.cancel_on().is_empty())
    });
    engine
        .watched_hashes()
        .into_iter()
        .filter(|hash| any_live || Watch::is_source_hash(engine, hash))
        .map(str::to_string)
        .collect()
}

/// The revision of `--rules-dir`, computed off the loop, and what the
/// control server answers itself (docs/operating.md#revisions).
async fn rules_dir_side(config: &ServiceConfig) -> (Revision, Local) {
    let rebuild_key = config.namespace.rebuild();
    let Some(rules) = &config.rules else {
        let local = Local {
            adding: None,
            rebuild_key,
        };
        return (Revision::default(), local);
    };
    let dir = rules.dir.clone();
    let revision = tokio::task::spawn_blocking(move || Revision::of(&dir))
        .await
        .unwrap_or_default();
    tracing::info!(
        rules_dir = %rules.dir.display(),
        revision = revision.get().as_deref().unwrap_or("-"),
        "rules directory"
    );
    let adding = Adding {
        rules: rules.clone(),
        revision: revision.clone(),
    };
    let local = Local {
        adding: Some(adding),
        rebuild_key,
    };
    (revision, local)
}

/// `--pending-file`'s copy and its `power-manager` watch (none without it).
fn pending_copy_parts(
    config: &ServiceConfig,
    client: &redis::Client,
    con: &redis::aio::ConnectionManager,
) -> (
    Option<crate::pending_file::PendingFile>,
    tokio::sync::mpsc::UnboundedReceiver<String>,
) {
    match &config.pending_file {
        Some(path) => (
            Some(crate::pending_file::PendingFile::new(
                path.clone(),
                config.replay_window_ms,
            )),
            super::pending_copy::watch_power(client.clone(), con.clone()),
        ),
        None => (None, tokio::sync::mpsc::unbounded_channel().1),
    }
}

//! `ruled`: the scooter rule runtime. Parses flags, sets up logging, and
//! runs the service (`ruled::driver`) until SIGTERM / SIGINT / SIGQUIT;
//! SIGHUP reloads the bundle (docs/service.md#signals); `ruled ctl` is the
//! control protocol's client (`ruled::control::client`).

use anyhow::Result;
use clap::Parser;
use ruled::control::client::{self, CtlMethod, Format, Target};
use ruled::control::signing::ControlKey;
use ruled::control::trust::Mutations;
use ruled::control::wire::{ControlKeys, MAX_AHEAD_MS};
use ruled::driver::{self, Secret, ServiceConfig};
use ruled::namespace::Namespace;
use ruled::pool::PoolConfig;
use ruled::rules_dir::{self, RulesDir};
use std::path::PathBuf;
use std::time::Duration;

/// Runs compiled scooter rules against the vehicle's Redis.
///
/// Loads the bundle written by `rulec build`, subscribes to the event
/// channels its rules need, and performs their actions. Pending delayed
/// steps survive a restart in the Redis hash `NS:pending`; counters are
/// published in the hash `NS` (NS is `--namespace`, `extensions` by default).
#[derive(Debug, Parser)]
#[command(
    name = "ruled",
    version,
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    after_help = "Example:\n  ruled --bundle /var/lib/ruled/rules.bundle --redis redis+unix:///var/run/redis/redis.sock\n  RULED_BUNDLE=rules.bundle RULED_LOG_LEVEL=debug ruled\n\nWatch it work:\n  ruled ctl status\n  ruled ctl list\n  ruled ctl pending\n  ruled ctl trace RULE\n\nDeploy a new bundle without a restart (replace the file by rename, then):\n  ruled ctl reload      # or: kill -HUP $(pidof ruled), systemctl reload ruled\n\nBuilt on the device from a rules directory (what ruled-rules.service runs when it changes):\n  ruled --rules-dir /data/extensions --bundle /var/lib/ruled/rules.bundle\n  ruled rebuild --rules-dir /data/extensions --bundle /var/lib/ruled/rules.bundle\n\nBeside Librescoot's Go event-service on one Redis (it keeps publishing the bus):\n  ruled --namespace ruled --bus follow --bundle rules.bundle"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    service: Args,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Ask a running ruled what it does, and turn rules off or on, over the
    /// control protocol. Exits 0 on an answer, 1 when ruled answered with
    /// an error, 2 on bad usage, 3 when nothing answered in time (ruled
    /// stopped, or serving another namespace), 4 when Redis is unreachable,
    /// 5 when --control-key is given and the answer is not signed with it.
    #[command(
        after_help = "Example:\n  ruled ctl status\n  ruled ctl list --limit 20\n  ruled ctl show hazards\n  ruled ctl test hazards '{\"topic\":\"alarm.triggered\"}'\n  ruled ctl pending --format json\n  ruled ctl set-enabled hazards off\n  ruled ctl trace hazards\n  ruled ctl emit alarm.triggered --to level-2-triggered\n  ruled ctl reload\n  ruled ctl call v1.status"
    )]
    Ctl(CtlArgs),
    /// Compile the rules directory into the bundle with the installed
    /// `rulec build` (nothing is written when the rules have errors: the
    /// loaded rules keep running), then have the running ruled reload it;
    /// the outcome is kept in the hash `NS:rebuild`, which `ruled ctl
    /// status` shows. What `ruled-rules.service` runs when the directory
    /// changes. Exits 0 when the bundle was built (and reloaded, or ruled
    /// is not running), 1 when not, with the diagnostics on stderr.
    #[command(
        after_help = "Example:\n  ruled rebuild --rules-dir /data/extensions --bundle /var/lib/ruled/rules.bundle\n  RULED_RULES_DIR=/data/extensions RULED_BUNDLE=/var/lib/ruled/rules.bundle ruled rebuild"
    )]
    Rebuild(RebuildArgs),
    /// Record the real bus as a timeline that `rulec simulate` and `rulec
    /// test` read unchanged (docs/recording.md): the watched fields of the
    /// bundle's profile as seeding `[[state]]` entries, then every
    /// notification and raw channel message in arrival order, with
    /// millisecond times. Only reads: nothing a running ruled would see.
    /// Stops after --seconds, at SIGINT/SIGTERM (writing what it has), or
    /// at 16 MiB. Exits 0 when recorded, 1 on an error.
    #[command(
        after_help = "Example:\n  ruled record --seconds 600 --out ride.timeline.toml\n  ruled record --events --out bus-events.timeline.toml\n  rulec simulate /data/extensions --timeline ride.timeline.toml"
    )]
    Record(RecordArgs),
}

#[derive(Debug, clap::Args)]
struct RecordArgs {
    #[command(flatten)]
    connect: RedisArgs,

    /// The bundle whose profile says what is watched (the one the
    /// scooter's ruled loads).
    #[arg(
        long,
        env = "RULED_BUNDLE",
        default_value = "/var/lib/ruled/rules.bundle",
        value_name = "FILE"
    )]
    bundle: PathBuf,

    /// The timeline file to write (default: stdout).
    #[arg(long, short, value_name = "FILE")]
    out: Option<PathBuf>,

    /// Stop after this many seconds (default: at SIGINT/SIGTERM).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    seconds: Option<u64>,

    /// Record stream `events` as `[[event]]` entries instead: what the bus
    /// said, not how it was derived.
    #[arg(long)]
    events: bool,
}

#[derive(Debug, clap::Args)]
struct RebuildArgs {
    #[command(flatten)]
    connect: RedisArgs,

    /// The rules directory (its `*.toml` files, not recursive).
    #[arg(long, env = "RULED_RULES_DIR", value_name = "DIR")]
    rules_dir: PathBuf,

    /// The bundle to write, the one the running ruled loads (`--bundle`).
    #[arg(long, env = "RULED_BUNDLE", value_name = "FILE")]
    bundle: PathBuf,

    /// The `rulec` to run (default: the one beside this ruled, else
    /// `rulec` on the PATH).
    #[arg(long, env = "RULED_RULEC", value_name = "PATH")]
    rulec: Option<PathBuf>,

    /// The control key file (as ruled's --control-key): the reload request
    /// is signed with it and its answer checked (docs/operating.md#trust).
    #[arg(long, env = "RULED_CONTROL_KEY", value_name = "FILE")]
    control_key: Option<PathBuf>,

    /// The key namespace of the running ruled (its `NS:rpc`, `NS:rebuild`).
    #[arg(long, env = "RULED_NAMESPACE", default_value = "extensions", value_name = "NS", value_parser = parse_namespace)]
    namespace: Namespace,
}

#[derive(Debug, clap::Args)]
struct CtlArgs {
    #[command(flatten)]
    connect: RedisArgs,

    /// The key namespace of the ruled to ask (its requests go to the list
    /// `NAMESPACE:rpc`).
    #[arg(long, env = "RULED_NAMESPACE", default_value = "extensions", value_name = "NS", value_parser = parse_namespace, global = true)]
    namespace: Namespace,

    /// `text` for people, `json` for scripts (the reply's payload).
    #[arg(long, value_enum, default_value_t = Format::Text, global = true)]
    format: Format,

    /// How long to wait for the answer (Go duration, at most 30s: ruled
    /// ignores a request whose deadline is further ahead).
    #[arg(long, default_value = "5s", value_parser = parse_ctl_timeout, allow_hyphen_values = true, global = true)]
    timeout: Duration,

    /// The control key file (as ruled's --control-key): requests are
    /// signed with it, and an answer not signed with it is an error (exit
    /// 5): something other than ruled answered.
    #[arg(long, env = "RULED_CONTROL_KEY", value_name = "FILE", global = true)]
    control_key: Option<PathBuf>,

    #[command(subcommand)]
    method: CtlMethod,
}

/// How to reach Redis: the same for the service and for `ruled ctl`.
#[derive(Debug, clap::Args)]
struct RedisArgs {
    /// Redis URL: redis://HOST:PORT[/DB], or redis+unix:///path/to/redis.sock
    /// (also unix:///path), or rediss://HOST:PORT[/DB] for TLS (needs ruled
    /// built with the cargo feature `tls`).
    #[arg(long, env = "RULED_REDIS", default_value = "redis://127.0.0.1:6379")]
    redis: String,

    /// For a rediss:// URL: a PEM file of the CA certificates the server's
    /// certificate must chain to, trusted instead of the public roots built
    /// into ruled.
    #[arg(long, env = "RULED_REDIS_CA_FILE", value_name = "PATH")]
    redis_ca_file: Option<PathBuf>,

    /// A file holding the Redis password (its first line), used instead of
    /// a password in the URL. The environment variable RULED_REDIS_PASSWORD
    /// holds the password itself, for when a file is not wanted.
    #[arg(long, env = "RULED_REDIS_PASSWORD_FILE", value_name = "PATH")]
    redis_password_file: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
struct Args {
    #[command(flatten)]
    connect: RedisArgs,

    /// The rule bundle written by `rulec build`; read again at SIGHUP
    /// (live reload: a bad bundle is refused and the loaded rules keep
    /// running).
    #[arg(long, env = "RULED_BUNDLE", required = true)]
    bundle: Option<PathBuf>,

    // Every flag that takes a number or a duration accepts a leading `-`
    // as its value (`--workers -1`), so a negative gets the range message
    // instead of clap's "unexpected argument '-1'".
    /// Workers performing actions.
    #[arg(long, env = "RULED_WORKERS", default_value_t = 2, allow_negative_numbers = true, value_parser = clap::value_parser!(u16).range(1..))]
    workers: u16,

    /// Actions that may wait for a busy worker; beyond that they are
    /// refused (a durable step then waits for room, within the replay
    /// window).
    #[arg(long, env = "RULED_QUEUE", default_value_t = 256, allow_negative_numbers = true, value_parser = clap::value_parser!(u32).range(0..))]
    queue: u32,

    /// How long past due a pending record may be at start, or a durable
    /// step may wait for room in the worker pool, and still run (Go
    /// duration; negative means zero: only steps still in the future).
    #[arg(long, env = "RULED_REPLAY_WINDOW", default_value = "5m", value_parser = parse_signed_duration, allow_hyphen_values = true)]
    replay_window: i64,

    /// Keep a copy of the pending records in this file, for a Redis that
    /// keeps nothing across a reboot: written at stop, on a suspend,
    /// hibernate or reboot state of `power-manager`, and at most once a
    /// minute while a step waits longer than the replay window; read back
    /// at start when `NS:pending` is empty (docs/service.md#the-pending-file).
    #[arg(long, env = "RULED_PENDING_FILE")]
    pending_file: Option<PathBuf>,

    /// How often changed counters are written to the hash `NS` (the
    /// `--namespace`: `extensions` by default).
    #[arg(long, env = "RULED_STATS_INTERVAL", default_value = "10s", value_parser = parse_positive_duration, allow_hyphen_values = true)]
    stats_interval: Duration,

    /// The name every Redis key ruled owns hangs off: `NS` (counters),
    /// `NS:pending`, `NS:rules`. Give ruled a name of its own (`ruled`)
    /// when another program writes `extensions` (the Go event-service).
    /// At most 64 bytes, no white space, control or glob characters.
    #[arg(long, env = "RULED_NAMESPACE", default_value = "extensions", value_name = "NS", value_parser = parse_namespace)]
    namespace: Namespace,
    /// Runs kept in each rule's trace (its last runs, step by step, and its
    /// last non-fire, kept in memory for operators); 0 turns traces off.
    #[arg(long, env = "RULED_TRACES", default_value_t = 5, allow_negative_numbers = true, value_parser = clap::value_parser!(u32).range(0..))]
    traces: u32,

    /// The memory all traces together may hold, in bytes (or with a suffix:
    /// `512KiB`, `1MiB`); the oldest traces are dropped first.
    #[arg(long, env = "RULED_TRACE_MEMORY", value_name = "BYTES", default_value = "1MiB", value_parser = parse_bytes, allow_hyphen_values = true)]
    trace_memory: usize,

    /// How ruled stands to the Librescoot bus (a bundle built with a
    /// profile): `own` derives the events from the watched hashes and
    /// channels, hands them to its rules and publishes them (stream `events`
    /// and `ev:<topic>`), refusing its derived topics and their families
    /// (`alarm.*`) from anyone else; values over 1 KiB are cut on the bus;
    /// `follow` derives and publishes nothing (the Go event-service still
    /// publishes the bus) and takes `ev:*` from the bus.
    #[arg(long, env = "RULED_BUS", value_enum, default_value_t = BusArg::Own)]
    bus: BusArg,

    /// Which of the profile's sources are watched: `all` (every one, as
    /// event-service does) or `used` (only those whose topics a live rule
    /// can match or whose fields a rule's state() reads; the rest cost
    /// nothing, and are not published).
    #[arg(long, env = "RULED_SOURCES", value_enum, default_value_t = SourcesArg::All)]
    sources: SourcesArg,

    /// The rules directory (`/data/extensions` on a Librescoot scooter):
    /// with it, the revision the control protocol reports is a digest of
    /// its rule files, and `v1.add` writes a checked rule there as a
    /// managed file (`lsc-<rule>.toml`, at most 64 of them, 1 MiB in all),
    /// which `ruled rebuild` makes live. Unsigned, `v1.add` takes only
    /// rules of `redis`, `publish` and `notify` steps.
    #[arg(long, env = "RULED_RULES_DIR", value_name = "DIR")]
    rules_dir: Option<PathBuf>,

    /// The `rulec` that builds a `v1.add` (default: the one beside this
    /// ruled, else `rulec` on the PATH).
    #[arg(long, env = "RULED_RULEC", value_name = "PATH")]
    rulec: Option<PathBuf>,

    /// Log filter: error, warn, info, debug, trace, or tracing directives
    /// such as `info,ruled=debug`.
    #[arg(long, env = "RULED_LOG_LEVEL", default_value = "info", value_parser = parse_log_level)]
    log_level: String,

    /// A key file (root's only: no access for group or others, 16 to 4096
    /// bytes) that every control reply is signed with, so `ruled ctl
    /// --control-key` can tell ruled's answers from anyone else's.
    #[arg(long, env = "RULED_CONTROL_KEY", value_name = "FILE")]
    control_key: Option<PathBuf>,

    /// Which control requests that change state are served: `any` (as lsc
    /// sends them) or `signed` (only those signed with --control-key).
    #[arg(long, env = "RULED_CONTROL_MUTATIONS", value_enum, default_value_t = Mutations::Any)]
    control_mutations: Mutations,
}

/// `--bus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum BusArg {
    Own,
    Follow,
}

/// `--sources`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum SourcesArg {
    All,
    Used,
}

fn parse_namespace(text: &str) -> Result<Namespace, String> {
    Namespace::parse(text).map_err(|e| e.to_string())
}

fn parse_log_level(text: &str) -> Result<String, String> {
    ruled::logging::parse_filter(text).map_err(|e| e.to_string())
}

fn parse_signed_duration(text: &str) -> Result<i64, String> {
    let nanos = rulecore::parse_duration(text).map_err(|e| e.to_string())?;
    Ok(nanos / 1_000_000)
}

fn parse_ctl_timeout(text: &str) -> Result<Duration, String> {
    let timeout = parse_positive_duration(text)?;
    if timeout.as_millis() > MAX_AHEAD_MS as u128 {
        return Err(format!("must be at most {MAX_AHEAD_MS}ms"));
    }
    Ok(timeout)
}

/// A byte count: digits, optionally followed by `KiB` or `MiB`.
fn parse_bytes(text: &str) -> Result<usize, String> {
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, ""),
    };
    let scale: usize = match unit {
        "" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        _ => return Err("expected a number of bytes, optionally with KiB or MiB (`1MiB`)".into()),
    };
    digits
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .ok_or_else(|| "expected a number of bytes, optionally with KiB or MiB (`1MiB`)".into())
}

fn parse_positive_duration(text: &str) -> Result<Duration, String> {
    let nanos = rulecore::parse_duration(text).map_err(|e| e.to_string())?;
    match u64::try_from(nanos) {
        Ok(nanos) if nanos > 0 => Ok(Duration::from_nanos(nanos)),
        _ => Err("must be positive".to_string()),
    }
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Ctl(ctl)) => std::process::exit(run_ctl(ctl)),
        Some(Command::Rebuild(rebuild)) => std::process::exit(run_rebuild(rebuild)),
        Some(Command::Record(record)) => std::process::exit(run_record(record)),
        None => {}
    }
    let args = cli.service;
    ruled::logging::init(&args.log_level)?;
    if let Err(e) = run(args) {
        // Logged once, where the journal (or the terminal) reads it. Our
        // errors already say their cause in their message: no chain.
        tracing::error!("{e}");
        std::process::exit(1);
    }
    Ok(())
}

/// The Redis password from `--redis-password-file` (its first line; a
/// regular file of at most 4 KiB, read like every input file) or
/// `RULED_REDIS_PASSWORD`; never from the command line, where every user
/// sees it (docs/service.md#flags).
fn redis_password(file: Option<&std::path::Path>) -> Result<Option<Secret>> {
    let Some(path) = file else {
        return Ok(std::env::var("RULED_REDIS_PASSWORD").ok().map(Secret));
    };
    let bytes = rulecore_io::input_file::read_bounded(path, 4096)
        .map_err(|e| anyhow::anyhow!("cannot read the Redis password file {e}"))?;
    let text = String::from_utf8(bytes).map_err(|_| {
        anyhow::anyhow!(
            "the Redis password file {} is not UTF-8 text",
            path.display()
        )
    })?;
    let password = text.lines().next().unwrap_or_default().to_string();
    if password.is_empty() {
        anyhow::bail!("the Redis password file {} is empty", path.display());
    }
    Ok(Some(Secret(password)))
}

/// `ruled ctl`: one request, its reply on stdout, or why not on stderr;
/// returns the exit code.
#[allow(clippy::print_stdout, clippy::print_stderr)] // the client's output
fn run_ctl(ctl: CtlArgs) -> i32 {
    let outcome = (|| {
        let key = ctl
            .control_key
            .as_deref()
            .map(ControlKey::load)
            .transpose()
            .map_err(|e| client::CallError::Usage(e.to_string()))?;
        let target = target(&ctl.connect, &ctl.namespace, ctl.timeout, key)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| client::CallError::Usage(format!("cannot start tokio: {e}")))?;
        runtime.block_on(client::run(&target, &ctl.method, ctl.format))
    })();
    match outcome {
        Ok(text) => {
            println!("{}", text.trim_end());
            0
        }
        Err(e) => {
            eprintln!(
                "ruled ctl: {}",
                ruled::control::escape::terminal(&e.to_string())
            );
            e.exit_code()
        }
    }
}

/// How `ruled ctl` and `ruled rebuild` reach the running ruled.
fn target(
    connect: &RedisArgs,
    namespace: &Namespace,
    timeout: Duration,
    key: Option<ControlKey>,
) -> Result<Target, client::CallError> {
    let password = redis_password(connect.redis_password_file.as_deref())
        .map_err(|e| client::CallError::Usage(e.to_string()))?;
    let (redis, tls) = driver::open_client(
        &connect.redis,
        password.as_ref(),
        connect.redis_ca_file.as_deref(),
    )
    .map_err(|e| client::CallError::Usage(e.to_string()))?;
    Ok(Target {
        client: redis,
        tls,
        url: ruled::connection::redact_url(&connect.redis),
        keys: ControlKeys::for_namespace(namespace),
        timeout,
        key,
    })
}

/// `ruled rebuild` (docs/service.md#ruled-rebuild); returns the exit code.
#[allow(clippy::print_stderr)] // the journal of `ruled-rules.service`
fn run_rebuild(args: RebuildArgs) -> i32 {
    // The longest a reload may be waited for: ruled ignores a request
    // whose deadline is further ahead.
    let reload_wait = Duration::from_millis(MAX_AHEAD_MS.unsigned_abs());
    let key = match args
        .control_key
        .as_deref()
        .map(ControlKey::load)
        .transpose()
    {
        Ok(key) => key,
        Err(e) => {
            eprintln!("ruled rebuild: {e}");
            return 2;
        }
    };
    let target = match target(&args.connect, &args.namespace, reload_wait, key) {
        Ok(target) => target,
        Err(e) => {
            eprintln!("ruled rebuild: {e}");
            return 2;
        }
    };
    let rebuild = ruled::rebuild::Rebuild {
        rules: RulesDir {
            dir: args.rules_dir,
            rulec: args.rulec.unwrap_or_else(rules_dir::default_rulec),
        },
        bundle: args.bundle,
        key: args.namespace.rebuild(),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("ruled rebuild: cannot start tokio: {e}");
            return 2;
        }
    };
    let outcome = runtime.block_on(ruled::rebuild::run(&rebuild, &target));
    if outcome.ok {
        0
    } else {
        eprintln!(
            "ruled rebuild: failed: {}; the loaded rules keep running",
            outcome.first_error.as_deref().unwrap_or("unknown")
        );
        1
    }
}

/// `ruled record` (docs/recording.md); returns the exit code.
#[allow(clippy::print_stderr)] // the recorder's one line of outcome
fn run_record(args: RecordArgs) -> i32 {
    let outcome = (|| {
        // Warnings (a field over its bound, a lost connection) on stderr.
        ruled::logging::init("warn")?;
        let config = ruled::record::RecordConfig {
            bundle: args.bundle,
            redis_password: redis_password(args.connect.redis_password_file.as_deref())?,
            redis_url: args.connect.redis,
            redis_ca_file: args.connect.redis_ca_file,
            seconds: args.seconds,
            events: args.events,
            out: args.out,
            limit: ruled::record::timeline::MAX_RECORDING_BYTES,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| anyhow::anyhow!("cannot start tokio: {e}"))?;
        runtime.block_on(async {
            let (stop, _reloads) = ruled::signals::install()?;
            ruled::record::run(config, stop)
                .await
                .map_err(anyhow::Error::from)
        })
    })();
    match outcome {
        Ok(summary) => {
            eprintln!(
                "ruled record: {} entries{}",
                summary.entries,
                if summary.full {
                    ", stopped at the 16 MiB bound"
                } else {
                    ""
                }
            );
            0
        }
        Err(e) => {
            eprintln!("ruled record: {e}");
            1
        }
    }
}

fn run(args: Args) -> Result<()> {
    let bundle = args
        .bundle
        .ok_or_else(|| anyhow::anyhow!("--bundle (or RULED_BUNDLE) is required"))?;
    let key = args
        .control_key
        .as_deref()
        .map(ControlKey::load)
        .transpose()?;
    let config = ServiceConfig {
        trust: ruled::control::trust::TrustConfig {
            key,
            mutations: args.control_mutations,
        },
        redis_password: redis_password(args.connect.redis_password_file.as_deref())?,
        redis_url: args.connect.redis,
        redis_ca_file: args.connect.redis_ca_file,
        bundle,
        pool: PoolConfig {
            workers: usize::from(args.workers),
            queue: usize::try_from(args.queue).unwrap_or(usize::MAX),
        },
        replay_window_ms: args.replay_window,
        stats_interval: args.stats_interval,
        pending_file: args.pending_file.clone(),
        namespace: args.namespace,
        traces: usize::try_from(args.traces).unwrap_or(usize::MAX),
        trace_memory: args.trace_memory,
        bus: match args.bus {
            BusArg::Own => ruled_engine::BusMode::Own,
            BusArg::Follow => ruled_engine::BusMode::Follow,
        },
        sources: match args.sources {
            SourcesArg::All => ruled_engine::SourceSet::All,
            SourcesArg::Used => ruled_engine::SourceSet::Used,
        },
        rules: args.rules_dir.map(|dir| RulesDir {
            dir,
            rulec: args.rulec.unwrap_or_else(rules_dir::default_rulec),
        }),
    };
    // One thread: the target has one core, and the engine is single-owner.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| anyhow::anyhow!("cannot start the tokio runtime: {e}"))?;
    runtime.block_on(async {
        let (shutdown, reloads) = ruled::signals::install()?;
        driver::run(config, shutdown, reloads)
            .await
            .map_err(anyhow::Error::from)
    })
}

//! `ruled`: the scooter rule runtime. Parses flags, sets up logging, and
//! runs the service (`ruled::driver`) until SIGTERM / SIGINT / SIGQUIT;
//! SIGHUP reloads the bundle (docs/service.md#signals).

use anyhow::Result;
use clap::Parser;
use ruled::driver::{self, Secret, ServiceConfig};
use ruled::pool::PoolConfig;
use std::path::PathBuf;
use std::time::Duration;

/// Runs compiled scooter rules against the vehicle's Redis.
///
/// Loads the bundle written by `rulec build`, subscribes to the event
/// channels its rules need, and performs their actions. Pending delayed
/// steps survive a restart in the Redis hash `extensions:pending`; counters
/// are published in the hash `extensions`.
#[derive(Debug, Parser)]
#[command(
    name = "ruled",
    version,
    after_help = "Example:\n  ruled --bundle /etc/scooter-rules/rules.bundle --redis redis+unix:///var/run/redis/redis.sock\n  RULED_BUNDLE=rules.bundle RULED_LOG_LEVEL=debug ruled\n\nWatch it work:\n  redis-cli HGETALL extensions\n  redis-cli HGETALL extensions:pending\n\nDeploy a new bundle without a restart (replace the file by rename, then):\n  kill -HUP $(pidof ruled)"
)]
struct Args {
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

    /// The rule bundle written by `rulec build`; read again at SIGHUP
    /// (live reload: a bad bundle is refused and the loaded rules keep
    /// running).
    #[arg(long, env = "RULED_BUNDLE")]
    bundle: PathBuf,

    // Every flag that takes a number or a duration accepts a leading `-`
    // as its value (`--workers -1`), so a negative gets the range message
    // instead of clap's "unexpected argument '-1'".
    /// Workers performing actions.
    #[arg(long, env = "RULED_WORKERS", default_value_t = 2, allow_negative_numbers = true, value_parser = clap::value_parser!(u16).range(1..))]
    workers: u16,

    /// Actions that may wait for a busy worker; beyond that they are refused.
    #[arg(long, env = "RULED_QUEUE", default_value_t = 256, allow_negative_numbers = true, value_parser = clap::value_parser!(u32).range(0..))]
    queue: u32,

    /// How long past due a pending record may be at start and still run
    /// (Go duration; negative means zero: only steps still in the future).
    #[arg(long, env = "RULED_REPLAY_WINDOW", default_value = "5m", value_parser = parse_signed_duration, allow_hyphen_values = true)]
    replay_window: i64,

    /// How often changed counters are written to the hash `extensions`.
    #[arg(long, env = "RULED_STATS_INTERVAL", default_value = "10s", value_parser = parse_positive_duration, allow_hyphen_values = true)]
    stats_interval: Duration,

    /// Log filter: error, warn, info, debug, trace, or tracing directives
    /// such as `info,ruled=debug`.
    #[arg(long, env = "RULED_LOG_LEVEL", default_value = "info", value_parser = parse_log_level)]
    log_level: String,
}

fn parse_log_level(text: &str) -> Result<String, String> {
    ruled::logging::parse_filter(text).map_err(|e| e.to_string())
}

fn parse_signed_duration(text: &str) -> Result<i64, String> {
    let nanos = rulecore::parse_duration(text).map_err(|e| e.to_string())?;
    Ok(nanos / 1_000_000)
}

fn parse_positive_duration(text: &str) -> Result<Duration, String> {
    let nanos = rulecore::parse_duration(text).map_err(|e| e.to_string())?;
    match u64::try_from(nanos) {
        Ok(nanos) if nanos > 0 => Ok(Duration::from_nanos(nanos)),
        _ => Err("must be positive".to_string()),
    }
}

fn main() -> Result<()> {
    let args = Args::parse();
    ruled::logging::init(&args.log_level)?;
    if let Err(e) = run(args) {
        // Logged once, where the journal (or the terminal) reads it. Our
        // errors already say their cause in their message: no chain.
        tracing::error!("{e}");
        std::process::exit(1);
    }
    Ok(())
}

/// The Redis password from `--redis-password-file` (first line, at most
/// 4 KiB read) or `RULED_REDIS_PASSWORD`; never from the command line,
/// where every user sees it (docs/service.md#flags).
fn redis_password(file: Option<&std::path::Path>) -> Result<Option<Secret>> {
    use std::io::Read;
    let Some(path) = file else {
        return Ok(std::env::var("RULED_REDIS_PASSWORD").ok().map(Secret));
    };
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|file| file.take(4096).read_to_string(&mut text))
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot read the Redis password file {}: {e}",
                path.display()
            )
        })?;
    let password = text.lines().next().unwrap_or_default().to_string();
    if password.is_empty() {
        anyhow::bail!("the Redis password file {} is empty", path.display());
    }
    Ok(Some(Secret(password)))
}

fn run(args: Args) -> Result<()> {
    let config = ServiceConfig {
        redis_password: redis_password(args.redis_password_file.as_deref())?,
        redis_url: args.redis,
        redis_ca_file: args.redis_ca_file,
        bundle: args.bundle,
        pool: PoolConfig {
            workers: usize::from(args.workers),
            queue: usize::try_from(args.queue).unwrap_or(usize::MAX),
        },
        replay_window_ms: args.replay_window,
        stats_interval: args.stats_interval,
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

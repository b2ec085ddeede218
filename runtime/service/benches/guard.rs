//! What a guard costs (docs/safety.md#what-it-costs), run by `cargo xtask
//! bench guard`: a release `ruled` with the built-in Librescoot profile
//! and its envelope, against a throwaway `redis-server`.
//!
//! - Latency: `PUBLISH ev:<topic>` until the push is visible (`BLPOP`), for
//!   a guarded action (`scooter:seatbox open`, guard `seatbox-parked`: its
//!   two fields read fresh before the push) and an unguarded one
//!   (`bench:plain x`), interleaved in the same run, beside a `PING` round
//!   trip, the unit. The guard's cost is the difference of the medians, in
//!   PINGs; the goal is at most one.
//! - Round trips, exactly: Redis's own count of `EVAL` and `EVALSHA` (the
//!   guard read is one script, run by its SHA-1) after the guarded actions, and after the unguarded ones
//!   (goal: none).
//! - Memory: VmRSS of `ruled` idle with the envelope loaded and with the
//!   same bundle without it (goal: within 0.3 MiB), alternated.
//!
//! Min / median / max of each; this is a shared machine, so only the
//! ratios within one run mean much.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

#[path = "../tests/support/mod.rs"]
mod support;

use rulecore::bundle::Payload;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{bundles, commandstat, RedisServer, Ruled};

const WARMUP: usize = 200;
const SAMPLES: usize = 3_000;
const RSS_ROUNDS: usize = 3;

const RULES: &str = r#"
[[rule]]
name = "guarded"
on = ["bench.guarded"]
trip = false

[[rule.step]]
do = "redis"
list = "scooter:seatbox"
push = "open"

[[rule]]
name = "plain"
on = ["bench.plain"]
trip = false

[[rule.step]]
do = "redis"
list = "bench:plain"
push = "x"
"#;

fn main() {
    // `cargo bench` passes `--bench`; a filter that names another bench
    // means this one should not run.
    if std::env::args()
        .skip(1)
        .any(|a| !a.starts_with('-') && !"guard".contains(a.as_str()))
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let payload = compile(dir.path());
    assert!(
        !payload.envelope.guards.is_empty(),
        "the built-in profile brings its guards"
    );
    let guarded = bundles::write(dir.path(), "guarded.bundle", &payload);
    let mut bare = payload.clone();
    bare.envelope = rulecore::envelope::Envelope::default();
    let unguarded = bundles::write(dir.path(), "unguarded.bundle", &bare);

    let redis = RedisServer::start();
    // Parked and standing: the guard allows every push.
    let _: i64 = redis.query(&["HSET", "vehicle", "state", "parked"]);
    let _: i64 = redis.query(&["HSET", "engine-ecu", "speed", "0"]);
    latency(&redis, &guarded);
    memory(&redis, &guarded, &unguarded);
}

/// The rules above built as `rulec build` does with the built-in profile.
fn compile(dir: &Path) -> Payload {
    let rules = dir.join("rules");
    std::fs::create_dir_all(&rules).unwrap();
    std::fs::write(rules.join("bench.toml"), RULES).unwrap();
    let choice = rulec::profile::ProfileChoice::Builtin;
    let loaded = rulec::profile::load(&choice).expect("read the built-in profile");
    let report = rulec::session::Session::new(Some(Arc::new(loaded.expect("built-in profile"))))
        .check(&rules)
        .expect("read the rules");
    assert!(!report.failed(false), "{}", report.summary());
    report.assemble(rulec::build::COMPILER_VERSION)
}

fn latency(redis: &RedisServer, bundle: &Path) {
    let mut ruled = Ruled::start(redis, bundle, &["--log-level", "warn"]);
    support::wait_for("ruled subscribed", || {
        let (_, n): (String, i64) = redis.query(&["PUBSUB", "NUMSUB", "ev:bench.plain"]);
        n == 1
    });
    let mut con = redis.con();
    let mut query = |args: &[&str]| -> redis::Value { support::query(&mut con, args) };
    let mut through = |topic: &str, list: &str| -> Duration {
        let event = format!(r#"{{"topic":"{topic}"}}"#);
        let start = Instant::now();
        query(&["PUBLISH", &format!("ev:{topic}"), &event]);
        let popped = query(&["BLPOP", list, "5"]);
        assert!(popped != redis::Value::Nil, "ruled did not push within 5 s");
        start.elapsed()
    };
    let mut pinger = redis.con();
    // The guard's read as `ruled` sends it: the same script by its SHA-1
    // (loaded first) over the same two fields, one round trip.
    let script = ruled::guard_read::READ_SCRIPT;
    let loaded: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(script.source)
        .query(&mut redis.con())
        .unwrap();
    assert_eq!(loaded, script.sha1);
    let mut read = redis::cmd("EVALSHA");
    read.arg(script.sha1)
        .arg(2)
        .arg("vehicle")
        .arg("engine-ecu")
        .arg(65_536)
        .arg(1)
        .arg("state")
        .arg(1)
        .arg("speed");
    let (mut guarded, mut plain, mut ping, mut eval) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..WARMUP + SAMPLES {
        let g = through("bench.guarded", "scooter:seatbox");
        let p = through("bench.plain", "bench:plain");
        // The unit, interleaved: the same machine load as the samples.
        let start = Instant::now();
        let _: String = redis::cmd("PING").query(&mut pinger).unwrap();
        let unit = start.elapsed();
        let start = Instant::now();
        let _: redis::Value = read.query(&mut pinger).unwrap();
        let script = start.elapsed();
        if i >= WARMUP {
            guarded.push(g);
            plain.push(p);
            ping.push(unit);
            eval.push(script);
        }
    }
    // Exactly: one script per guarded action, none for the others.
    let scripts = || commandstat(redis, "eval") + commandstat(redis, "evalsha");
    let evals_before = scripts();
    for _ in 0..100 {
        through("bench.plain", "bench:plain");
    }
    let evals_plain = scripts() - evals_before;
    for _ in 0..100 {
        through("bench.guarded", "scooter:seatbox");
    }
    let evals_guarded = scripts() - evals_before - evals_plain;
    ruled.stop();

    println!("guard cost, {SAMPLES} actions of each kind interleaved after {WARMUP} warm-up:");
    let ping_median = stats("PING round trip (the unit)", &mut ping);
    let eval_median = stats("the guard's read, from a client", &mut eval);
    let guarded_median = stats("PUBLISH -> guarded push visible", &mut guarded);
    let plain_median = stats("PUBLISH -> unguarded push visible", &mut plain);
    let cost = guarded_median.as_secs_f64() - plain_median.as_secs_f64();
    println!(
        "  guard cost (median difference)  {:>8.1} µs = {:.2} PINGs (goal: at most 1)",
        cost * 1e6,
        cost / ping_median.as_secs_f64()
    );
    println!(
        "  the read alone, from a client        = {:.2} PINGs",
        eval_median.as_secs_f64() / ping_median.as_secs_f64()
    );
    println!("  Redis scripts for 100 unguarded actions: {evals_plain} (goal: 0)");
    println!("  Redis scripts for 100 guarded actions:   {evals_guarded} (one read each)");
}

/// Prints min / median / max of `samples`; returns the median.
fn stats(name: &str, samples: &mut [Duration]) -> Duration {
    samples.sort_unstable();
    let median = samples[samples.len() / 2];
    println!(
        "  {name:<34} min {:>8.1} µs  median {:>8.1} µs  max {:>8.1} µs",
        samples[0].as_secs_f64() * 1e6,
        median.as_secs_f64() * 1e6,
        samples[samples.len() - 1].as_secs_f64() * 1e6,
    );
    median
}

/// VmRSS idle after start, with and without the envelope, alternated.
fn memory(redis: &RedisServer, guarded: &Path, unguarded: &Path) {
    let idle = |bundle: &Path| -> u64 {
        let mut ruled = Ruled::start(redis, bundle, &["--log-level", "info"]);
        ruled.wait_ready();
        let rss = support::proc_status_kib(ruled.pid(), "VmRSS:");
        ruled.stop();
        rss
    };
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for _ in 0..RSS_ROUNDS {
        with.push(idle(guarded));
        without.push(idle(unguarded));
    }
    with.sort_unstable();
    without.sort_unstable();
    let line = |name: &str, rss: &[u64]| {
        println!(
            "  {name:<34} min {:>6} KiB  median {:>6} KiB  max {:>6} KiB",
            rss[0],
            rss[rss.len() / 2],
            rss[rss.len() - 1]
        );
    };
    println!("resident memory (VmRSS) of ruled idle, {RSS_ROUNDS} starts each:");
    line("built-in envelope loaded", &with);
    line("same bundle, no envelope", &without);
    let difference = with[with.len() / 2] as f64 - without[without.len() / 2] as f64;
    println!(
        "  difference of the medians        {:>+6.0} KiB = {:+.2} MiB (goal: within 0.3 MiB)",
        difference,
        difference / 1024.0
    );
}

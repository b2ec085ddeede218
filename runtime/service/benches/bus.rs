//! The bus inside `ruled` (docs/sources.md), measured against the real
//! release `ruled` and a throwaway `redis-server` (run by `cargo xtask
//! bench bus`, which builds the release `rulec` it needs first):
//!
//! 1. Notification to a rule's action: `HSET vehicle kickstand` +
//!    `PUBLISH vehicle kickstand` (one pipeline, as redis-ipc writes)
//!    until the rule's `LPUSH` is visible (`BLPOP`), p50 and p99, in units
//!    of a bare `PING` measured interleaved in the same run.
//! 2. CPU per derived event (read + derive + dispatch + publish), from
//!    `ruled`'s own CPU time, beside the CPU per plain bus event
//!    (`PUBLISH ev:bench.ping`) in the same run.
//! 3. A riding profile replayed at real speed (default 60 s,
//!    `BUS_BENCH_SECONDS`): odometer and `kers` announced at CAN rate
//!    (20 Hz), the silent ECU fields written at 20 Hz, battery-service's
//!    `MULTI` every second, the vehicle states of a short ride; `ruled`
//!    with the shipped example rules and every source watched. Its CPU
//!    share and RSS.
//! 4. `--sources used` with no rule: its subscriptions and reads, and its
//!    RSS beside the same start with `--profile none`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use support::{announce, query, RedisServer, Ruled};

const WARMUP: usize = 300;
const SAMPLES: usize = 5_000;

/// Builds `rules` as `rulec build --profile PROFILE` does (the `rulec`
/// library, a dev-dependency only), into `out`.
fn build(rules: &Path, out: &Path, profile: &str) -> PathBuf {
    use rulec::profile::{self, ProfileChoice};
    let choice = match profile {
        "none" => ProfileChoice::None,
        _ => ProfileChoice::Builtin,
    };
    let loaded = profile::load(&choice).unwrap().map(std::sync::Arc::new);
    let report = rulec::session::Session::new(loaded.clone())
        .check(rules)
        .unwrap();
    assert_eq!(
        report.errors(),
        0,
        "{}: {:?}",
        rules.display(),
        report.diagnostics
    );
    let built = report.build().unwrap();
    std::fs::write(out, &built.bytes).unwrap();
    out.to_path_buf()
}

/// User plus system CPU time of `pid` so far.
fn cpu(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command (which may hold spaces) start after ')'.
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    let per_second: u64 = String::from_utf8(
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap()
    .trim()
    .parse()
    .unwrap();
    Duration::from_nanos(ticks * 1_000_000_000 / per_second)
}

/// `VmRSS` and `VmHWM` of `pid`, in MiB.
fn rss(pid: u32) -> (f64, f64) {
    let mib = |field| support::proc_status_kib(pid, field) as f64 / 1024.0;
    (mib("VmRSS:"), mib("VmHWM:"))
}

fn percentile(samples: &mut [Duration], q: f64) -> Duration {
    samples.sort_unstable();
    samples[((samples.len() as f64 - 1.0) * q).round() as usize]
}

const LATENCY_RULES: &str = r#"
[[rule]]
name = "kickstand"
on = ["vehicle.kickstand.up", "vehicle.kickstand.down"]
trip = false   # thousands of starts a second

[[rule.step]]
do = "redis"
list = "bench:out"
push = "x"

[[rule]]
name = "ping"
on = ["bench.ping"]
trip = false

[[rule.step]]
do = "redis"
list = "bench:out"
push = "x"
"#;

/// Figures 1 and 2.
fn latency_and_cpu(dir: &Path) {
    let redis = RedisServer::start();
    let rules = dir.join("latency");
    std::fs::create_dir_all(&rules).unwrap();
    std::fs::write(rules.join("bench.toml"), LATENCY_RULES).unwrap();
    let bundle = build(&rules, &dir.join("latency.bundle"), "librescoot");
    let mut con = redis.con();
    let _: redis::Value = query(&mut con, &["HSET", "vehicle", "kickstand", "down"]);
    let ruled = Ruled::start(&redis, &bundle, &["--log-level", "warn"]);
    support::wait_for("ruled subscribed to the vehicle hash", || {
        let (_, n): (String, i64) = redis.query(&["PUBSUB", "NUMSUB", "vehicle"]);
        n == 1
    });
    let event = r#"{"topic":"bench.ping","src":"bench"}"#;
    let (mut derived, mut plain, mut ping) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..WARMUP + SAMPLES {
        let value = if i % 2 == 0 { "up" } else { "down" };
        let start = Instant::now();
        announce(&mut con, "vehicle", "kickstand", value);
        let popped: redis::Value = query(&mut con, &["BLPOP", "bench:out", "5"]);
        let sample = start.elapsed();
        assert!(popped != redis::Value::Nil, "ruled did not act within 5 s");
        let start = Instant::now();
        let _: redis::Value = query(&mut con, &["PUBLISH", "ev:bench.ping", event]);
        let popped: redis::Value = query(&mut con, &["BLPOP", "bench:out", "5"]);
        let bus = start.elapsed();
        assert!(popped != redis::Value::Nil, "ruled did not act within 5 s");
        let start = Instant::now();
        let _: redis::Value = query(&mut con, &["PING"]);
        let bare = start.elapsed();
        if i >= WARMUP {
            derived.push(sample);
            plain.push(bus);
            ping.push(bare);
        }
    }
    let (ping50, ping99) = (percentile(&mut ping, 0.5), percentile(&mut ping, 0.99));
    for (name, samples) in [
        ("notification -> action", &mut derived),
        ("ev: event -> action", &mut plain),
    ] {
        let (p50, p99) = (percentile(samples, 0.5), percentile(samples, 0.99));
        println!(
            "{name:<25} n={SAMPLES} p50={:.1}µs ({:.2} PING) p99={:.1}µs ({:.2} PING)",
            p50.as_secs_f64() * 1e6,
            p50.as_secs_f64() / ping50.as_secs_f64(),
            p99.as_secs_f64() * 1e6,
            p99.as_secs_f64() / ping99.as_secs_f64(),
        );
    }
    println!(
        "bare PING                 p50={:.1}µs p99={:.1}µs",
        ping50.as_secs_f64() * 1e6,
        ping99.as_secs_f64() * 1e6
    );

    // CPU: the same work either way, one change or event at a time.
    let before = cpu(ruled.pid());
    for i in 0..SAMPLES {
        let value = if i % 2 == 0 { "up" } else { "down" };
        announce(&mut con, "vehicle", "kickstand", value);
        let _: redis::Value = query(&mut con, &["BLPOP", "bench:out", "5"]);
    }
    let per_derived = (cpu(ruled.pid()) - before) / SAMPLES as u32;
    let before = cpu(ruled.pid());
    for _ in 0..SAMPLES {
        let _: redis::Value = query(&mut con, &["PUBLISH", "ev:bench.ping", event]);
        let _: redis::Value = query(&mut con, &["BLPOP", "bench:out", "5"]);
    }
    let per_plain = (cpu(ruled.pid()) - before) / SAMPLES as u32;
    let published: i64 = redis.query(&["XLEN", "events"]);
    println!(
        "CPU per derived event     {:.1}µs (read + derive + dispatch + publish; {published} in stream `events`), per plain bus event {:.1}µs",
        per_derived.as_secs_f64() * 1e6,
        per_plain.as_secs_f64() * 1e6,
    );
}

/// The vehicle states of a short ride, at seconds into the replay.
const RIDE: &[(f64, &str, &str, &str)] = &[
    (2.0, "vehicle", "state", "parked"),
    (4.0, "vehicle", "kickstand", "up"),
    (5.0, "vehicle", "state", "ready-to-drive"),
    (20.0, "vehicle", "blinker:switch", "left"),
    (22.0, "vehicle", "blinker:switch", "off"),
    (0.80, "vehicle", "state", "parked"),
    (0.85, "vehicle", "kickstand", "down"),
    (0.92, "vehicle", "state", "stand-by"),
];

/// Figure 3.
fn riding(dir: &Path) {
    let seconds: f64 = std::env::var("BUS_BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60.0);
    let redis = RedisServer::start();
    let rules = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/rules");
    let bundle = build(&rules, &dir.join("riding.bundle"), "librescoot");
    let mut con = redis.con();
    let _: redis::Value = query(
        &mut con,
        &["HSET", "vehicle", "state", "stand-by", "kickstand", "down"],
    );
    let _: redis::Value = query(
        &mut con,
        &["HSET", "battery:0", "present", "true", "charge", "80"],
    );
    let ruled = Ruled::start(
        &redis,
        &bundle,
        &["--log-level", "warn", "--sources", "all"],
    );
    support::wait_for("ruled subscribed", || {
        let (_, n): (String, i64) = redis.query(&["PUBSUB", "NUMSUB", "vehicle"]);
        n == 1
    });
    let (_, idle_hwm) = rss(ruled.pid());
    // Ride times past 1.0 are seconds; below, fractions of the replay.
    let mut ride: Vec<(Duration, &str, &str, &str)> = RIDE
        .iter()
        .map(|&(at, hash, field, value)| {
            let at = if at < 1.0 {
                at * seconds
            } else {
                at.min(seconds)
            };
            (Duration::from_secs_f64(at), hash, field, value)
        })
        .collect();
    ride.sort_by_key(|entry| entry.0);
    let cpu_before = cpu(ruled.pid());
    let start = Instant::now();
    let (mut frame, mut second, mut next_ride) = (0u64, 0u64, 0usize);
    let end = Duration::from_secs_f64(seconds);
    while start.elapsed() < end {
        let now = start.elapsed();
        // 20 Hz CAN frames: odometer and kers announced every frame, the
        // silent fields written without a word.
        if now >= Duration::from_millis(50 * frame) {
            frame += 1;
            let odometer = (1_000_000 + frame * 3).to_string();
            let speed = (frame % 40).to_string();
            announce(&mut con, "engine-ecu", "odometer", &odometer);
            announce(&mut con, "engine-ecu", "kers", "on");
            let _: redis::Value = query(
                &mut con,
                &[
                    "HSET",
                    "engine-ecu",
                    "speed",
                    &speed,
                    "rpm",
                    "3100",
                    "motor:current",
                    "4200",
                ],
            );
        }
        // battery-service: one MULTI a second, every field, and a
        // notification per changed field (the charge, every 10 s).
        if now >= Duration::from_secs(second) {
            second += 1;
            let charge = (80 - second / 10).to_string();
            let mut pipe = redis::pipe();
            pipe.atomic()
                .cmd("HMSET")
                .arg("battery:0")
                .arg(&[
                    "present", "true", "state", "active", "voltage", "52000", "current", "-3000",
                ])
                .arg(&["charge", &charge, "temperature:0", "21"])
                .ignore()
                .cmd("PUBLISH")
                .arg("battery:0")
                .arg("voltage")
                .ignore();
            if second % 10 == 0 {
                pipe.cmd("PUBLISH").arg("battery:0").arg("charge").ignore();
            }
            pipe.query::<()>(&mut con).unwrap();
        }
        while next_ride < ride.len() && now >= ride[next_ride].0 {
            let (_, hash, field, value) = ride[next_ride];
            announce(&mut con, hash, field, value);
            next_ride += 1;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let wall = start.elapsed();
    let busy = cpu(ruled.pid()) - cpu_before;
    let (now_rss, hwm) = rss(ruled.pid());
    let published: i64 = redis.query(&["XLEN", "events"]);
    println!(
        "riding replay {:.0} s        ruled CPU {:.3}% of a core ({:.0} ms), {frame} CAN frames, {second} battery MULTIs, {published} events published; RSS {now_rss:.1} MiB, peak {hwm:.1} MiB (idle peak {idle_hwm:.1} MiB)",
        wall.as_secs_f64(),
        busy.as_secs_f64() / wall.as_secs_f64() * 100.0,
        busy.as_secs_f64() * 1e3,
    );
}

/// Figure 4.
fn used_with_no_rule(dir: &Path) {
    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    for (profile, flags) in [
        ("librescoot", ["--sources", "used"]),
        ("none", ["--sources", "all"]),
    ] {
        let redis = RedisServer::start();
        let bundle = build(
            &empty,
            &dir.join(format!("empty-{profile}.bundle")),
            profile,
        );
        let mut args = vec!["--log-level", "info"];
        args.extend(flags);
        let ruled = Ruled::start(&redis, &bundle, &args);
        ruled.wait_ready();
        // Traffic it must not hear: the vehicle hash announced.
        let mut con = redis.con();
        for i in 0..100 {
            announce(
                &mut con,
                "vehicle",
                "state",
                if i % 2 == 0 { "parked" } else { "stand-by" },
            );
        }
        std::thread::sleep(Duration::from_millis(300));
        let channels: Vec<String> = redis.query(&["PUBSUB", "CHANNELS"]);
        let patterns: i64 = redis.query(&["PUBSUB", "NUMPAT"]);
        let reads = support::commandstat(&redis, "hget") + support::commandstat(&redis, "hmget");
        let (_, hwm) = rss(ruled.pid());
        println!(
            "no rule, --profile {profile:<10} {} subscriptions, {patterns} patterns, {reads} hash reads; peak RSS {hwm:.1} MiB",
            channels.len()
        );
    }
}

fn main() {
    if std::env::args()
        .skip(1)
        .any(|a| !a.starts_with('-') && !"bus".contains(a.as_str()))
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    latency_and_cpu(dir.path());
    used_with_no_rule(dir.path());
    riding(dir.path());
}

//! Durable work in bulk (docs/service.md#durable-work-in-bulk), measured
//! against the release `ruled` and a throwaway `redis-server` on a unix
//! socket, every figure also in units of a bare `PING` measured in the
//! same run (before, between and after the figures: the box's round trip
//! at that moment):
//!
//! 1. One event parks 10,000 runs on a durable step (10,000 rules on one
//!    topic, one `redis` step each, ten minutes after the trigger): from
//!    the `PUBLISH` until the first pending record is written (Redis'
//!    keyspace notification of its `HSET`, read by a blocked subscriber),
//!    and until all 10,000 are; once 200 ms after `ruled` said it is
//!    ready, once the moment it says so.
//! 2. 10,000 overdue records at start (one rule each, fire-at spread over
//!    100 s in the past) with `--queue 16384` and with the default queue:
//!    from the spawn of `ruled` until every step has pushed and the
//!    pending hash is empty (polled every millisecond), in all and per
//!    record; beside it the start of the same bundle with no record (spawn
//!    to ready), and the drain: the first figure less that start's median;
//!    and the peak RSS (`VmHWM`) of `ruled` with all 10,000 in its pool.
//!
//! 3. Each figure against its floor, measured in turn with it (a floor run
//!    after each `ruled` run): for the park, the same 10,000 records
//!    (`ruled`'s own, as it wrote them) written by one client, `HSET`s
//!    pipelined in chunks of 64 written back to back before any reply is
//!    read, timed by the same keyspace notifications; for the replay, what
//!    `ruled` sends for it pipelined the same way by one client (`HGETALL`
//!    of the pending hash, then per record `HDEL` and its `LPUSH`).
//!    Printed as min / median / max of the per-run ratio
//!    (docs/engine.md#the-unit-the-floor), the PING columns above them.
//!
//! Run: `cargo xtask bench durable` (or `cargo bench -p ruled --bench
//! durable`); `DURABLE_RUNS=<n>` repeats each figure n times (3),
//! `DURABLE_RULED=<program>` measures another `ruled` (an older build, for
//! a before/after comparison).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use support::bundles::{self, payload};
use support::{query, RedisServer, Ruled};

const RUNS: usize = 10_000;
/// `PING`s per unit measurement.
const PINGS: usize = 2_000;
/// How long one figure may take before the bench gives up.
const DEADLINE: Duration = Duration::from_secs(120);

/// The median of [`PINGS`] bare `PING` round trips.
fn ping(con: &mut redis::Connection) -> Duration {
    let mut samples: Vec<Duration> = (0..PINGS)
        .map(|_| {
            let start = Instant::now();
            let _: String = query(con, &["PING"]);
            start.elapsed()
        })
        .collect();
    samples.sort_unstable();
    samples[samples.len() / 2]
}

/// `ruled` at its defaults (`--log-level info`, `--stats-interval 10s`:
/// the test support's are debug and 200 ms).
fn start_ruled(redis: &RedisServer, bundle: &Path, extra: &[&str]) -> Ruled {
    let mut flags = vec!["--log-level", "info", "--stats-interval", "10s"];
    flags.extend_from_slice(extra);
    match std::env::var_os("DURABLE_RULED") {
        Some(program) => {
            Ruled::start_program(Command::new(program), &redis.url(), bundle, &flags, &[])
        }
        None => Ruled::start(redis, bundle, &flags),
    }
}

fn now_ms() -> i64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    i64::try_from(since.as_millis()).unwrap()
}

/// Figure 1: the bundle of 10,000 rules that one event parks.
fn park_bundle(dir: &Path) -> PathBuf {
    let rules = (0..RUNS)
        .map(|i| {
            bundles::rule(
                &format!("park-{i:05}"),
                &["park"],
                vec![bundles::redis_step("bench:parked", "x", 600_000)],
            )
        })
        .collect();
    bundles::write(dir, "park.bundle", &payload(rules, vec![], vec![]))
}

/// From the `PUBLISH` to the first record visible, and to all of them:
/// Redis' keyspace notification of each `HSET` of the pending hash, read
/// by a subscriber that blocks (a client polling `HLEN` back to back would
/// take a core from `ruled` on a small machine). `settled`: the event
/// comes 200 ms after ready, as on a scooter; otherwise the moment
/// `ruled` says it is ready, which must not be slower (docs/service.md#start-and-stop).
fn park(redis: &RedisServer, bundle: &Path, settled: bool) -> Park {
    let _: i64 = redis.query(&["DEL", "extensions:pending", "extensions:rules"]);
    let mut ruled = None;
    let times = records_written(
        redis,
        || {
            let started = ruled.insert(start_ruled(redis, bundle, &[]));
            started.wait_ready();
            if settled {
                std::thread::sleep(Duration::from_millis(200));
            }
        },
        |con| {
            let _: i64 = query(con, &["PUBLISH", "ev:park", r#"{"topic":"park"}"#]);
        },
    );
    let mut ruled = ruled.expect("started by the setup");
    let records: Vec<(String, String)> = redis.query(&["HGETALL", "extensions:pending"]);
    assert_eq!(records.len(), RUNS);
    assert!(ruled.stop(), "clean stop; log:\n{}", ruled.log_text());
    Park { times, records }
}

/// One park: from the trigger to the first record visible and to all of
/// them, and the records written (what the floor writes in turn).
struct Park {
    times: (Duration, Duration),
    records: Vec<(String, String)>,
}

/// From `trigger` until the first of [`RUNS`] `HSET`s of the pending hash
/// is visible, and until all are: Redis' keyspace notification of each,
/// read by a subscriber that blocks (a client polling `HLEN` back to back
/// would take a core from `ruled` on a small machine). `setup` runs once
/// the subscriber listens, right before the trigger.
fn records_written(
    redis: &RedisServer,
    setup: impl FnOnce(),
    trigger: impl FnOnce(&mut redis::Connection),
) -> (Duration, Duration) {
    let _: () = redis.query(&["CONFIG", "SET", "notify-keyspace-events", "Kh"]);
    let mut watcher = redis.con();
    watcher.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut notified = watcher.as_pubsub();
    notified
        .subscribe("__keyspace@0__:extensions:pending")
        .unwrap();
    let mut con = redis.con();
    setup();
    let started = Instant::now();
    trigger(&mut con);
    let mut first = None;
    let mut written = 0;
    while written < RUNS {
        let message = notified.get_message().expect("a keyspace notification");
        if message
            .get_payload::<String>()
            .is_ok_and(|event| event == "hset")
        {
            first.get_or_insert_with(|| started.elapsed());
            written += 1;
        }
    }
    let all = started.elapsed();
    drop(notified);
    let _: () = redis.query(&["CONFIG", "SET", "notify-keyspace-events", ""]);
    (first.unwrap_or(all), all)
}

/// Commands a floor writes at once, without waiting for replies: the part
/// of an event's runs `ruled` decides before it sends their records.
const FLOOR_CHUNK: usize = 64;

/// Writes `commands` on `con` in chunks of [`FLOOR_CHUNK`], each written
/// as soon as it is encoded and none waiting for a reply, then reads
/// every reply: the least one client can do to have them all done, the
/// first done after one chunk's write.
fn pipelined(con: &mut redis::Connection, commands: &[redis::Cmd]) {
    for chunk in commands.chunks(FLOOR_CHUNK) {
        let mut pipe = redis::pipe();
        for command in chunk {
            pipe.add_command(command.clone());
        }
        con.send_packed_command(&pipe.get_packed_pipeline())
            .unwrap();
    }
    for _ in commands {
        con.recv_response().unwrap();
    }
}

/// The floor of a park: the same records (`ruled`'s own, as it wrote them)
/// written by one client, one `HSET` each, [`pipelined`]; timed as
/// [`park`] is.
fn floor_park(redis: &RedisServer, records: &[(String, String)]) -> (Duration, Duration) {
    let _: i64 = redis.query(&["DEL", "extensions:pending"]);
    let commands: Vec<redis::Cmd> = records
        .iter()
        .map(|(id, json)| {
            let mut hset = redis::cmd("HSET");
            hset.arg("extensions:pending").arg(id).arg(json);
            hset
        })
        .collect();
    // Written from a thread of its own, so that the watcher times each
    // record as it lands, not once every reply is read.
    let mut writer = redis.con();
    let mut sending = None;
    let times = records_written(
        redis,
        || {},
        |_| {
            sending = Some(std::thread::spawn(move || {
                pipelined(&mut writer, &commands);
            }));
        },
    );
    sending
        .expect("started by the trigger")
        .join()
        .expect("the floor's writer");
    let written: usize = redis.query(&["HLEN", "extensions:pending"]);
    assert_eq!(written, RUNS);
    times
}

/// The floor of the overdue replay: what `ruled` sends for it, by one
/// client: the pending hash read whole, then per record its removal and
/// its step's `LPUSH`, [`pipelined`]; from the first command until every
/// reply is in (all pushed, the hash empty).
fn floor_overdue(redis: &RedisServer, payload: &rulecore::bundle::Payload) -> Duration {
    write_overdue(redis, payload);
    let mut con = redis.con();
    let started = Instant::now();
    let records: Vec<(String, String)> = query(&mut con, &["HGETALL", "extensions:pending"]);
    let mut commands = Vec::with_capacity(records.len() * 2);
    for (id, _) in &records {
        let rule = id.split('#').next().unwrap_or_default();
        let mut hdel = redis::cmd("HDEL");
        hdel.arg("extensions:pending").arg(id);
        let mut lpush = redis::cmd("LPUSH");
        lpush.arg("done").arg(rule);
        commands.extend([hdel, lpush]);
    }
    pipelined(&mut con, &commands);
    let took = started.elapsed();
    let pushed: usize = query(&mut con, &["LLEN", "done"]);
    let left: usize = query(&mut con, &["HLEN", "extensions:pending"]);
    assert_eq!((pushed, left), (RUNS, 0), "the floor did every record once");
    took
}

/// min / median / max of `ruled`'s figure over the floor's, run by run.
fn ratios(name: &str, ruled: &[Duration], floor: &[Duration]) {
    let mut ratios: Vec<f64> = ruled
        .iter()
        .zip(floor)
        .map(|(r, f)| r.as_secs_f64() / f.as_secs_f64())
        .collect();
    ratios.sort_by(f64::total_cmp);
    let (min, max) = (ratios[0], ratios[ratios.len() - 1]);
    let mid = ratios[ratios.len() / 2];
    let mut floors = floor.to_vec();
    floors.sort_unstable();
    println!(
        "{name:<52} {min:>6.2}× {mid:>6.2}× {max:>6.2}×   (floor median {:.2} ms)",
        ms(floors[floors.len() / 2])
    );
}

/// Figure 2: one rule per record, one `redis` step a minute after its
/// trigger, and 10,000 records of them all overdue.
fn overdue_bundle(dir: &Path) -> (PathBuf, rulecore::bundle::Payload) {
    let rules = (0..RUNS)
        .map(|n| {
            let name = format!("r{n:05}");
            bundles::rule(
                &name,
                &["x.never"],
                vec![bundles::redis_step("done", &name, 60_000)],
            )
        })
        .collect();
    let payload = payload(rules, vec![], vec![]);
    (bundles::write(dir, "overdue.bundle", &payload), payload)
}

fn write_overdue(redis: &RedisServer, payload: &rulecore::bundle::Payload) {
    let now = now_ms();
    let mut con = redis.con();
    let _: i64 = query(&mut con, &["DEL", "extensions:pending", "done"]);
    for chunk in payload.rules.chunks(1_000) {
        let mut hset = redis::cmd("HSET");
        hset.arg("extensions:pending");
        for rule in chunk {
            let n: usize = rule.name[1..].parse().unwrap();
            let id = format!("{}#1-{n}", rule.name);
            let slot = i64::try_from((n * 7_919) % 2_000).unwrap();
            let record = serde_json::json!({
                "id": id, "rule": rule.name, "source": "test.toml", "step": 0, "iter": 0,
                "fire-at": now - 150_000 + slot * 50,
                "fingerprint": rule.steps[0].fingerprint.to_string(),
                "event": {"topic": "x.never"}
            });
            hset.arg(&id).arg(record.to_string());
        }
        let _: i64 = hset.query(&mut con).unwrap();
    }
}

/// From the spawn until every step pushed and no record is left, and the
/// peak RSS of `ruled` by then.
fn overdue(redis: &RedisServer, bundle: &Path, extra: &[&str]) -> (Duration, f64) {
    let mut con = redis.con();
    let started = Instant::now();
    let mut ruled = start_ruled(redis, bundle, extra);
    let drained = loop {
        let pushed: usize = query(&mut con, &["LLEN", "done"]);
        let left: usize = query(&mut con, &["HLEN", "extensions:pending"]);
        if pushed >= RUNS && left == 0 {
            break started.elapsed();
        }
        assert!(
            started.elapsed() < DEADLINE,
            "{pushed} of {RUNS} pushed, {left} left; log:\n{}",
            ruled.log_text()
        );
        std::thread::sleep(Duration::from_millis(1));
    };
    let pushed: usize = query(&mut con, &["LLEN", "done"]);
    assert_eq!(pushed, RUNS, "each step once");
    let peak = support::proc_status_kib(ruled.pid(), "VmHWM:") as f64 / 1024.0;
    assert!(ruled.stop(), "clean stop; log:\n{}", ruled.log_text());
    (drained, peak)
}

/// The start of the overdue bundle with no record: spawn to ready.
fn bare_start(redis: &RedisServer, bundle: &Path) -> Duration {
    let _: i64 = redis.query(&["DEL", "extensions:pending"]);
    let started = Instant::now();
    let mut ruled = start_ruled(redis, bundle, &[]);
    // Looked for every millisecond (the support's wait polls every 20).
    while !ruled.log().iter().any(|line| line.contains("ruled ready")) {
        assert!(started.elapsed() < DEADLINE, "not ready");
        std::thread::sleep(Duration::from_millis(1));
    }
    let ready = started.elapsed();
    assert!(ruled.stop());
    ready
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// One figure's runs: each in ms and in PINGs (`per` divides both).
fn row(name: &str, samples: &[Duration], unit: Duration, per: usize) {
    let cells: Vec<String> = samples
        .iter()
        .map(|d| {
            let value = d.as_secs_f64() / per as f64;
            if per == 1 {
                format!(
                    "{:>9.1} ms {:>8.1} PING",
                    ms(*d),
                    value / unit.as_secs_f64()
                )
            } else {
                format!(
                    "{:>7.1} µs {:>6.2} PING",
                    value * 1e6,
                    value / unit.as_secs_f64()
                )
            }
        })
        .collect();
    println!("{name:<52} {}", cells.join(" |"));
}

fn main() {
    // `cargo bench` passes `--bench`; a filter that names another bench
    // means this one should not run.
    if std::env::args()
        .skip(1)
        .any(|a| !a.starts_with('-') && !"durable".contains(a.as_str()))
    {
        return;
    }
    let runs: usize = std::env::var("DURABLE_RUNS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(3);
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let mut con = redis.con();
    let mut pings = vec![ping(&mut con)];

    let park_bundle = park_bundle(dir.path());
    let (mut first, mut all) = (Vec::new(), Vec::new());
    let (mut first_at_ready, mut all_at_ready) = (Vec::new(), Vec::new());
    // The floor after each of `ruled`'s, alternated: once per side.
    let (mut floor_first, mut floor_all) = (Vec::new(), Vec::new());
    let (mut floor_first_at_ready, mut floor_all_at_ready) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let settled = park(&redis, &park_bundle, true);
        first.push(settled.times.0);
        all.push(settled.times.1);
        let (f, a) = floor_park(&redis, &settled.records);
        floor_first.push(f);
        floor_all.push(a);
        let at_ready = park(&redis, &park_bundle, false);
        first_at_ready.push(at_ready.times.0);
        all_at_ready.push(at_ready.times.1);
        let (f, a) = floor_park(&redis, &at_ready.records);
        floor_first_at_ready.push(f);
        floor_all_at_ready.push(a);
    }
    pings.push(ping(&mut con));

    let (overdue_bundle, payload) = overdue_bundle(dir.path());
    let (mut wide, mut default, mut bare) = (Vec::new(), Vec::new(), Vec::new());
    let (mut peaks, mut floor) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        write_overdue(&redis, &payload);
        let (drained, peak) = overdue(&redis, &overdue_bundle, &["--queue", "16384"]);
        wide.push(drained);
        peaks.push(peak);
        write_overdue(&redis, &payload);
        default.push(overdue(&redis, &overdue_bundle, &[]).0);
        bare.push(bare_start(&redis, &overdue_bundle));
        floor.push(floor_overdue(&redis, &payload));
    }
    pings.push(ping(&mut con));
    pings.sort_unstable();
    let unit = pings[pings.len() / 2];

    println!(
        "bare PING (median of {PINGS}, three times): {}",
        pings
            .iter()
            .map(|p| format!("{:.1} µs", p.as_secs_f64() * 1e6))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!("one event parks {RUNS} runs (from the PUBLISH), {runs} runs:");
    row("  first pending record visible", &first, unit, 1);
    row(&format!("  all {RUNS} records visible"), &all, unit, 1);
    row(
        "  right after ready: first record",
        &first_at_ready,
        unit,
        1,
    );
    row(
        &format!("  right after ready: all {RUNS} records"),
        &all_at_ready,
        unit,
        1,
    );
    println!("{RUNS} overdue records at start (spawn to all pushed, hash empty), {runs} runs:");
    row("  --queue 16384", &wide, unit, 1);
    row("  --queue 16384, per record", &wide, unit, RUNS);
    let peaks: Vec<String> = peaks.iter().map(|p| format!("{p:.1} MiB")).collect();
    println!(
        "{:<52} {}",
        "  --queue 16384, peak RSS of ruled",
        peaks.join(" | ")
    );
    row("  default queue (256)", &default, unit, 1);
    row("  default queue, per record", &default, unit, RUNS);
    row(
        "  the same bundle, no record: spawn to ready",
        &bare,
        unit,
        1,
    );
    let mut starts = bare.clone();
    starts.sort_unstable();
    let start = starts[starts.len() / 2];
    let drains: Vec<Duration> = wide.iter().map(|d| d.saturating_sub(start)).collect();
    row(
        "  --queue 16384 less that start, per record",
        &drains,
        unit,
        RUNS,
    );
    let defaults: Vec<Duration> = default.iter().map(|d| d.saturating_sub(start)).collect();
    println!(
        "against the floor (the same commands pipelined by one client), {runs} alternations: \
         min / median / max of the ratio:"
    );
    ratios("  park, settled: first record", &first, &floor_first);
    ratios(&format!("  park, settled: all {RUNS}"), &all, &floor_all);
    ratios(
        "  park, right after ready: first record",
        &first_at_ready,
        &floor_first_at_ready,
    );
    ratios(
        &format!("  park, right after ready: all {RUNS}"),
        &all_at_ready,
        &floor_all_at_ready,
    );
    ratios(
        "  overdue replay, --queue 16384, less the start",
        &drains,
        &floor,
    );
    ratios(
        "  overdue replay, default queue, less the start",
        &defaults,
        &floor,
    );
    ratios(
        "  overdue replay, --queue 16384, spawn to done",
        &wide,
        &floor,
    );
}

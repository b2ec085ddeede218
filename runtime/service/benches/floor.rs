//! `ruled` against the floor of each path it serves, in the same run
//! (docs/engine.md#the-unit-the-floor; run by `cargo xtask bench floor`).
//!
//! On a 2-core machine a path through three processes costs 100–300 µs,
//! mostly wake-ups, and where the scheduler puts client, Redis and daemon
//! decides more than any program. So each figure is a ratio to the floor
//! relay (`bench_box::floor`: a message in, a push out, nothing else),
//! measured alternately with `ruled` in blocks, with the client and Redis
//! pinned to one core and both daemons to the other where there are two.
//! Each line gives min / median / max of the per-block ratio of medians,
//! and the medians in µs and in bare `PING`s as a second column.
//!
//! 1. One-step rule: `PUBLISH ev:bench.ping` until its `LPUSH` is visible
//!    (`BLPOP`), against the relay on a channel of its own.
//! 2. First action of a rule with a durable tail (its second step ten
//!    minutes later, so every run writes its pending record): the same.
//! 3. Notification to action: `HSET vehicle kickstand` + `PUBLISH` (one
//!    pipeline, as redis-ipc writes) until the kickstand rule's `LPUSH`,
//!    against the reading relay (`HGET` of the announced field, then
//!    `LPUSH`).
//! 4. CPU per notification: `ruled`'s CPU time over a block of path-3
//!    notifications (read, derive, publish both derived events, act)
//!    against the reading relay's over the same number; then the same
//!    with `ruled --log-level warn`, which writes no journal line per
//!    action. Under each, the same CPU over all blocks split into user
//!    space and the kernel (`stat`'s 10 ms ticks, so per run, not per
//!    block): the kernel's part is the wake-ups and system calls, which
//!    the floor has too; the user part is each program's own code.
//! 5. The steps between, in the same blocks as 4 at `info`: the reading
//!    relay served by tokio's current-thread runtime (what the runtime
//!    `ruled` runs on costs), then the same also sending the derived
//!    event's `XADD`, `PUBLISH` and last-id `SET` with its push, as
//!    `ruled` does (what that bus work costs), each against the floor;
//!    and `ruled` against the last (what is `ruled`'s own).
//!
//! `FLOOR_BLOCKS` (10) and `FLOOR_SAMPLES` (500 per block and side) set
//! the size; `FLOOR_RULED=<program>` measures another `ruled` build (a
//! before/after comparison in one session).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

#[path = "../tests/support/mod.rs"]
mod support;

use bench_box::floor::{self, Relay, Shape, FLOOR_ENV, SHAPE_ENV};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::bundles::{self, payload};
use support::{announce, librescoot, query, RedisServer, Ruled};

const WARMUP: usize = 200;

fn setting(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(default)
}

/// The cores: the client and Redis on the first, the daemons on the
/// second; `None` on a machine with one core (nothing is pinned).
fn cores() -> Option<(usize, usize)> {
    let count = std::thread::available_parallelism().map_or(1, usize::from);
    (count >= 2).then_some((0, 1))
}

/// Pins every thread of `pid` to `core` (`taskset`, util-linux).
fn pin(pid: u32, core: usize) {
    let status = Command::new("taskset")
        .args(["-a", "-c", "-p", &core.to_string(), &pid.to_string()])
        .stdout(Stdio::null())
        .status()
        .expect("taskset (util-linux) pins the processes: install it");
    assert!(status.success(), "taskset could not pin {pid} to {core}");
}

/// A command that starts `program` on `core`, or plainly.
fn on_core(program: &std::ffi::OsStr, core: Option<usize>) -> Command {
    match core {
        Some(core) => {
            let mut command = Command::new("taskset");
            command.arg("-c").arg(core.to_string()).arg(program);
            command
        }
        None => Command::new(program),
    }
}

/// Starts this benchmark's own binary as the floor relay served as
/// `shape`, and waits until it has subscribed.
fn start_relay(relay: &Relay, shape: Shape, core: Option<usize>) -> Child {
    let exe = std::env::current_exe().unwrap();
    let mut child = on_core(exe.as_os_str(), core)
        .env(FLOOR_ENV, relay.to_env())
        .env(SHAPE_ENV, shape.name())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "subscribed", "the floor relay did not start");
    child
}

/// CPU time of `pid` so far, all its threads, to the nanosecond: the sum
/// of each thread's `schedstat` (the clock ticks of `stat` are 10 ms, the
/// size of a whole block).
fn cpu(pid: u32) -> Duration {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
    let nanos = tasks
        .filter_map(|task| {
            let path = task.ok()?.path().join("schedstat");
            // A thread that ended meanwhile has no file any more.
            let text = std::fs::read_to_string(path).ok()?;
            text.split_whitespace().next()?.parse::<u64>().ok()
        })
        .sum();
    Duration::from_nanos(nanos)
}

/// A clock tick of `/proc/<pid>/stat` in µs (Linux's `USER_HZ`, 100 on
/// every architecture it reports to user space in).
const TICK_US: f64 = 10_000.0;

/// User and kernel CPU time of `pid` so far, all its threads, in clock
/// ticks (`stat`'s `utime` and `stime`: 10 ms each, so only a whole run's
/// sum says something).
fn user_kernel(pid: u32) -> (u64, u64) {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
    tasks
        .filter_map(|task| {
            let text = std::fs::read_to_string(task.ok()?.path().join("stat")).ok()?;
            // The fields after the command name, which may hold spaces:
            // `state` is the first, `utime` the 12th, `stime` the 13th.
            let mut fields = text.rsplit_once(')')?.1.split_whitespace().skip(11);
            let user = fields.next()?.parse::<u64>().ok()?;
            Some((user, fields.next()?.parse::<u64>().ok()?))
        })
        .fold((0, 0), |(u, k), (user, kernel)| (u + user, k + kernel))
}

/// Where a side's CPU went over a whole measurement: clock ticks in user
/// space and in the kernel, and the notifications they served.
#[derive(Default)]
struct Split {
    user: u64,
    kernel: u64,
    notifications: u64,
}

impl Split {
    fn add(&mut self, before: (u64, u64), after: (u64, u64), notifications: usize) {
        self.user += after.0 - before.0;
        self.kernel += after.1 - before.1;
        self.notifications += notifications as u64;
    }

    /// Microseconds a notification, user and kernel.
    fn per_notification(&self) -> (f64, f64) {
        let per = |ticks: u64| ticks as f64 * TICK_US / self.notifications.max(1) as f64;
        (per(self.user), per(self.kernel))
    }
}

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort_unstable();
    samples[samples.len() / 2]
}

/// The per-block ratios of one path and the medians they came from.
#[derive(Default)]
struct Figure {
    ratios: Vec<f64>,
    ruled: Vec<Duration>,
    floor: Vec<Duration>,
    ping: Vec<Duration>,
}

impl Figure {
    fn block(&mut self, ruled: Duration, floor: Duration, ping: Duration) {
        self.ratios.push(ruled.as_secs_f64() / floor.as_secs_f64());
        self.ruled.push(ruled);
        self.floor.push(floor);
        self.ping.push(ping);
    }

    /// `pings`: whether the medians are also shown in `PING`s (latencies
    /// are; CPU times are not).
    fn print(self, name: &str, pings: bool) {
        self.print_as(name, pings, ["ruled", "floor"]);
    }

    /// [`Figure::print`], the two medians named `sides`.
    fn print_as(mut self, name: &str, pings: bool, [of, to]: [&str; 2]) {
        self.ratios.sort_by(f64::total_cmp);
        let (min, max) = (self.ratios[0], self.ratios[self.ratios.len() - 1]);
        let mid = self.ratios[self.ratios.len() / 2];
        let (ruled, floor, ping) = (
            median(&mut self.ruled),
            median(&mut self.floor),
            median(&mut self.ping),
        );
        let in_pings = |d: Duration| d.as_secs_f64() / ping.as_secs_f64();
        let second = if pings {
            format!("   ({:.2} / {:.2} PING)", in_pings(ruled), in_pings(floor))
        } else {
            String::new()
        };
        println!(
            "{name:<34} {min:>5.2}× {mid:>5.2}× {max:>5.2}×   {of} {:>6.1}µs {to} {:>6.1}µs{second}",
            ruled.as_secs_f64() * 1e6,
            floor.as_secs_f64() * 1e6,
        );
    }
}

/// One sample: `trigger`, then `BLPOP list` until the push is visible.
fn sample(
    con: &mut redis::Connection,
    list: &str,
    trigger: impl FnOnce(&mut redis::Connection),
) -> Duration {
    let start = Instant::now();
    trigger(con);
    let popped: redis::Value = query(con, &["BLPOP", list, "5"]);
    let took = start.elapsed();
    assert!(
        popped != redis::Value::Nil,
        "nothing pushed to {list} within 5 s"
    );
    took
}

fn ping(con: &mut redis::Connection) -> Duration {
    let start = Instant::now();
    let _: redis::Value = query(con, &["PING"]);
    start.elapsed()
}

/// Where a side of the CPU measurement is notified (a hash, as redis-ipc
/// announces its fields) and what it pushes to.
struct Path {
    hash: &'static str,
    list: &'static str,
}

const RULED: Path = Path {
    hash: "vehicle",
    list: "bench:kick",
};
const READING: Path = Path {
    hash: "floor:hash",
    list: "floor:read",
};
const ON_TOKIO: Path = Path {
    hash: "floor:tokio",
    list: "floor:tokio-read",
};
const PUBLISHING: Path = Path {
    hash: "floor:publishing",
    list: "floor:publishing-read",
};

/// CPU per notification of path 3, side after side in blocks (each a
/// process and its path; the first `ruled`, the second the reading
/// relay): each side's per-notification
/// CPU of each block, the pings between blocks, and where each side's CPU
/// went over all blocks, user space or the kernel.
fn cpu_per_notification(
    con: &mut redis::Connection,
    sides: &[(u32, &Path)],
    blocks: usize,
    samples: usize,
    value: &mut dyn FnMut() -> &'static str,
) -> (Vec<Vec<Duration>>, Vec<Duration>, Vec<Split>) {
    let mut per_block = vec![Vec::new(); sides.len()];
    let mut pings = Vec::new();
    let mut split: Vec<Split> = sides.iter().map(|_| Split::default()).collect();
    for _ in 0..blocks {
        for (index, &(pid, path)) in sides.iter().enumerate() {
            let (before, ticks) = (cpu(pid), user_kernel(pid));
            for _ in 0..samples {
                let value = value();
                sample(con, path.list, |c| {
                    announce(c, path.hash, "kickstand", value)
                });
            }
            per_block[index].push((cpu(pid) - before) / samples as u32);
            split[index].add(ticks, user_kernel(pid), samples);
        }
        pings.push(ping(con));
    }
    (per_block, pings, split)
}

/// The figure of side `of` against side `to`, block by block.
fn against(per_block: &[Vec<Duration>], pings: &[Duration], of: usize, to: usize) -> Figure {
    let mut figure = Figure::default();
    for ((&a, &b), &ping) in per_block[of].iter().zip(&per_block[to]).zip(pings) {
        figure.block(a, b, ping);
    }
    figure
}

/// The user/kernel line under a CPU figure: the kernel's part (wake-ups,
/// system calls) of the side measured against the floor's, apart from
/// each program's own code.
fn print_split(side: &Split, floor: &Split) {
    let ((user, kernel), (floor_user, floor_kernel)) =
        (side.per_notification(), floor.per_notification());
    println!(
        "{:<34} user {user:>5.1}µs kernel {kernel:>5.1}µs, floor user {floor_user:>5.1}µs \
         kernel {floor_kernel:>5.1}µs (kernel {:.2}×)",
        "  of it, all blocks (10 ms ticks)",
        kernel / floor_kernel.max(f64::MIN_POSITIVE),
    );
}

fn main() {
    floor::run_from_env();
    // `cargo bench` passes `--bench`; a filter that names another bench
    // means this one should not run.
    if std::env::args()
        .skip(1)
        .any(|a| !a.starts_with('-') && !"floor".contains(a.as_str()))
    {
        return;
    }
    let (blocks, samples) = (setting("FLOOR_BLOCKS", 10), setting("FLOOR_SAMPLES", 500));
    let cores = cores();
    let redis = RedisServer::start();
    if let Some((client, _)) = cores {
        pin(std::process::id(), client);
        pin(redis.pid(), client);
    }
    let daemon = cores.map(|(_, daemon)| daemon);
    let dir = tempfile::tempdir().unwrap();
    let rules = vec![
        bundles::rule(
            "one-step",
            &["bench.ping"],
            vec![bundles::redis_step("bench:out", "x", 0)],
        ),
        bundles::rule(
            "durable-tail",
            &["bench.tail"],
            vec![
                bundles::redis_step("bench:tail", "x", 0),
                bundles::redis_step("bench:tail-late", "x", 600_000),
            ],
        ),
        bundles::rule(
            "kickstand",
            &["vehicle.kickstand.up", "vehicle.kickstand.down"],
            vec![bundles::redis_step("bench:kick", "x", 0)],
        ),
    ];
    // Thousands of starts a second: no breaker (docs/safety.md#the-breaker).
    let rules = rules
        .into_iter()
        .map(|mut rule| {
            rule.options_mut().trip = rulecore::envelope::Breaker::Off;
            rule
        })
        .collect();
    let bundle = bundles::write(
        dir.path(),
        "floor.bundle",
        &librescoot::with_profile(payload(rules, vec![], vec![])),
    );
    let mut con = redis.con();
    let _: redis::Value = query(&mut con, &["HSET", "vehicle", "kickstand", "down"]);
    let program =
        std::env::var_os("FLOOR_RULED").unwrap_or_else(|| env!("CARGO_BIN_EXE_ruled").into());
    let flags = ["--log-level", "info", "--stats-interval", "10s"];
    let mut ruled = Ruled::start_program(
        on_core(&program, daemon),
        &redis.url(),
        &bundle,
        &flags,
        &[],
    );
    ruled.wait_ready();
    let socket = redis.socket.clone();
    let mut relay = start_relay(
        &Relay {
            socket: socket.clone(),
            channel: "floor:ping".into(),
            list: "floor:out".into(),
            read: None,
        },
        Shape::Blocking,
        daemon,
    );
    // The reading relay, and its twins on tokio for the CPU figures.
    let reading_relay = |hash: &str, list: &str, shape| {
        let relay = Relay {
            socket: socket.clone(),
            channel: hash.into(),
            list: list.into(),
            read: Some(hash.into()),
        };
        start_relay(&relay, shape, daemon)
    };
    let mut reading = reading_relay(READING.hash, READING.list, Shape::Blocking);
    let mut on_tokio = reading_relay(ON_TOKIO.hash, ON_TOKIO.list, Shape::Tokio);
    let mut publishing = reading_relay(PUBLISHING.hash, PUBLISHING.list, Shape::TokioPublishing);

    let event = |topic: &str| format!(r#"{{"topic":"{topic}","src":"bench"}}"#);
    let (ping_event, tail_event) = (event("bench.ping"), event("bench.tail"));
    let mut kickstand = ["up", "down"].into_iter().cycle();
    let mut paths = [
        ("one-step rule", Figure::default()),
        ("first action, durable tail", Figure::default()),
        ("notification -> action", Figure::default()),
    ];
    for block in 0..=blocks {
        let mut sides = vec![(Vec::new(), Vec::new(), Vec::new()); paths.len()];
        let count = if block == 0 { WARMUP } else { samples };
        for _ in 0..count {
            for (path, (ruled_side, floor_side, pings)) in sides.iter_mut().enumerate() {
                let (ruled_sample, floor_sample) = match path {
                    0 => (
                        sample(&mut con, "bench:out", |c| {
                            let _: redis::Value =
                                query(c, &["PUBLISH", "ev:bench.ping", &ping_event]);
                        }),
                        sample(&mut con, "floor:out", |c| {
                            let _: redis::Value = query(c, &["PUBLISH", "floor:ping", &ping_event]);
                        }),
                    ),
                    1 => (
                        sample(&mut con, "bench:tail", |c| {
                            let _: redis::Value =
                                query(c, &["PUBLISH", "ev:bench.tail", &tail_event]);
                        }),
                        sample(&mut con, "floor:out", |c| {
                            let _: redis::Value = query(c, &["PUBLISH", "floor:ping", &tail_event]);
                        }),
                    ),
                    _ => {
                        let value = kickstand.next().unwrap_or("up");
                        (
                            sample(&mut con, RULED.list, |c| {
                                announce(c, RULED.hash, "kickstand", value);
                            }),
                            sample(&mut con, READING.list, |c| {
                                announce(c, READING.hash, "kickstand", value);
                            }),
                        )
                    }
                };
                ruled_side.push(ruled_sample);
                floor_side.push(floor_sample);
                pings.push(ping(&mut con));
            }
        }
        if block == 0 {
            continue;
        }
        for ((_, figure), (mut r, mut f, mut p)) in paths.iter_mut().zip(sides) {
            figure.block(median(&mut r), median(&mut f), median(&mut p));
        }
    }

    let kick = &mut || kickstand.next().unwrap_or("up");
    let sides = [
        (ruled.pid(), &RULED),
        (reading.id(), &READING),
        (on_tokio.id(), &ON_TOKIO),
        (publishing.id(), &PUBLISHING),
    ];
    let (info, info_pings, info_split) =
        cpu_per_notification(&mut con, &sides, blocks, samples, kick);
    // The same at `--log-level warn`: what the journal's lines cost.
    ruled.stop();
    let quiet_flags = ["--log-level", "warn", "--stats-interval", "10s"];
    let mut quiet = Ruled::start_program(
        on_core(&program, daemon),
        &redis.url(),
        &bundle,
        &quiet_flags,
        &[],
    );
    support::wait_for("ruled at warn subscribed", || {
        let (_, n): (String, i64) = redis.query(&["PUBSUB", "NUMSUB", "vehicle"]);
        n == 1
    });
    let sides = [(quiet.pid(), &RULED), (reading.id(), &READING)];
    let (warn, warn_pings, warn_split) =
        cpu_per_notification(&mut con, &sides, blocks, samples, kick);
    quiet.stop();

    println!(
        "ruled against the floor, {blocks} blocks of {samples} alternated samples{}:",
        if cores.is_some() {
            " (client and Redis on core 0, daemons on core 1)"
        } else {
            " (one core: nothing pinned)"
        }
    );
    println!("{:<34} {:>6} {:>6} {:>6}", "path", "min", "median", "max");
    for (name, figure) in paths {
        figure.print(name, true);
    }
    against(&info, &info_pings, 0, 1).print("CPU per notification", false);
    print_split(&info_split[0], &info_split[1]);
    against(&warn, &warn_pings, 0, 1).print("CPU per notification, --log-level warn", false);
    print_split(&warn_split[0], &warn_split[1]);
    println!("the steps between, CPU per notification (info):");
    against(&info, &info_pings, 2, 1).print_as("  the floor on tokio", false, ["tokio", "floor"]);
    print_split(&info_split[2], &info_split[1]);
    against(&info, &info_pings, 3, 1).print_as(
        "  on tokio, publishing as ruled",
        false,
        ["publishing", "floor"],
    );
    print_split(&info_split[3], &info_split[1]);
    against(&info, &info_pings, 0, 3).print_as(
        "  ruled against the last",
        false,
        ["ruled", "publishing"],
    );
    for child in [&mut relay, &mut reading, &mut on_tokio, &mut publishing] {
        let _ = child.kill();
        let _ = child.wait();
    }
}

//! The simulator tells the truth, checked (issue 8): every timeline in
//! `fixtures/timelines` that the real service can play runs through
//! `ruled_engine::sim::simulate` and through the real `ruled` binary against
//! its own `redis-server`, and the two sequences of what happened must be
//! the same. Any difference is a bug in one of them.
//!
//! **Scaling.** Every duration is divided by [`SCALE`] (25: the 30 s of
//! `hazards-on-alarm` take 1.2 s). The rules are compiled from
//! `fixtures/rules*` with the `rulec` library (a dev-dependency only), and
//! the compiled payload is scaled before it is encoded: `after`, `cooldown`,
//! `debounce`, `for`, `repeat.every` and exec timeouts, then every step's
//! fingerprint is recomputed (`Payload::refresh_fingerprints`, rulecore's
//! own fingerprint function). Scaling the payload rather than the TOML
//! text keeps the compiler's checks and lowering exactly as `rulec build`
//! does them and needs no duration printer. The timeline's times (`at`,
//! `down`, `until`, a `[[state]]`'s `expire`) and settings
//! (`replay-window`, `action-time`) are
//! scaled by the same factor; `--replay-window` of `ruled` gets the scaled
//! window. Both sides run the same scaled payload: the sim gets it as a
//! value, `ruled` as the bundle file encoded from it. A profile's poll
//! intervals are not scaled (a scaled one would be below the 100 ms
//! minimum): a bundle with a live poll is refused.
//!
//! **The profile.** Bundles are built with the built-in `librescoot`
//! profile, as `rulec build` builds them, so both sides derive events from
//! the hash writes and channel messages and ruled publishes them. A
//! timeline that gives an `[[event]]` on a topic the profile owns is
//! played with `profile none` instead ([`Profile`] says why).
//!
//! **Actions the test box cannot perform.** There is no CAN interface, and
//! the fixtures' `exec` commands (`/usr/local/bin/...`) do not exist here.
//! So every `exec` and `can` step becomes, in the payload both sides run,
//! an `exec` of a recorder script of its own (one per rule and step, named
//! after the original command or frame so that a changed step still changes
//! its fingerprint): it appends its start time to a file, fails while a
//! flag file exists, and takes the timeline's `action-time`. `redis` steps
//! stay real `LPUSH`es.
//!
//! **Playing.** `[[event]]`: `PUBLISH ev:<topic> <json>`; `[[state]]`: the
//! write as the services make it, one `MULTI` of `DEL` (`clear`, and
//! `replace` before its `fields`), `HDEL` (`delete`), one `HSET` of every
//! field written (`field`/`value` and `fields`) and `PEXPIRE` (`expire`),
//! then a `PUBLISH <hash> <name>` for each name `StateEntry::published`
//! gives (none with `notify = false`), back to back. Each publish is
//! acknowledged by what ruled logs when it takes it, judged as the service
//! judges it (`Engine::notified`, which its bus reader consults): the read
//! of the notified field (or, for `replaced` and `cleared`, of the hash's
//! first watched field) as `state changed`; an ignored name has no
//! acknowledgement. `before-start` entries are written before the first
//! `ruled` starts and stay at "0s", before the start, in the timeline
//! given to the simulator. `[[message]]`:
//! `PUBLISH <channel> <payload>` (acknowledged by `input message`);
//! `[[restart]]`: SIGTERM, wait for
//! the exit, start a new `ruled` after `down` (with the after-restart
//! bundle written over the old one when the timeline has one); durable
//! records survive in Redis. `[[reload]]`: the entry's bundle (compiled
//! and scaled like the rules) is written over the bundle file by rename
//! and `ruled` gets `SIGHUP`; the entry is played when the driver starts
//! reading the file (its `reading the bundle again` line). `[[fail]]`: a failing `redis` step is made to
//! fail for real: its list key holds a string (`WRONGTYPE`) from `at` to
//! `until`; a failing recorder step finds its flag file. A timeline in
//! which another step pushes to that list inside the window cannot be
//! played so and is refused.
//!
//! **Observing.** First the outcomes, as structured data on both sides
//! (no log text): the actions performed (`check_performed`: each `LPUSH`
//! Redis received, seen by `redis-cli MONITOR`, with its list, value and
//! time; each recorder start, which names its rule and step, with its
//! time) against the simulator's `action` lines (same effects, as many,
//! each within [`TOLERANCE_MS`] before and [`TOLERANCE_MS`] +
//! [`EFFECT_LAG_MS`] after the simulated time); the derived events
//! (stream `events`, below); the records left in Redis. Then how the
//! service got there, which has no outcome to read but its log at `debug`
//! (`run started`, `submitting action`, `run ended`, trigger notes, replay
//! notes, `action failed`, each with its timestamp), against the
//! simulator's output lines. Compared exactly, in order (lines of two runs
//! at most [`ORDER_SLACK_MS`] apart may come in either order: they race on
//! the real clock): kind, rule, step, pass, run id (the
//! service's epoch replaced by its process number, which is the
//! simulator's epoch) and reason; times within [`TOLERANCE_MS`]. The
//! records left in `extensions:pending` at the end must be the ones the
//! simulator's store holds. `record-put`/`record-drop` lines are not
//! compared one by one (the service does not log its record writes);
//! `action-failed` compares rule and step (the service's line has no pass;
//! the `action` line before it has). The simulator's `derived` lines are
//! compared with the events ruled published, read back from stream
//! `events` (`XRANGE`) at the end: topic, from, to and data exactly, in
//! order, the event's `ts` within [`TOLERANCE_MS`] of the line; and every
//! entry of the stream must have been published on `ev:<topic>` too (seen
//! by MONITOR), as the same envelope with its id, in the same order.
//!
//! **Times as played.** A loaded 2-core machine delays the driver and the
//! service by a few ms now and then; a chain of steps runs late by what
//! its actions really take (each `after` counts from the previous action's
//! end, and the simulator's actions take `action-time`, 0 by default); and
//! some fixtures put an entry 100 ms (unscaled) from a timer
//! (`hazards-cancel`: the disarm at 5 s, the last horn pulse at 4.9 s: 4 ms
//! apart once scaled). So:
//! - the timeline given to the simulator for the comparison is the one *as
//!   the service received it*: each entry's `at` is the time the service
//!   logged receiving it (the `event` or `state changed` line; `stopping`
//!   and `ruled ready` for a restart; the driver's clock for a fail window,
//!   a Redis key the driver sets);
//! - an entry is played at its time, but not before the service has logged
//!   the last line the nominal plan has before it, and then the planned gap
//!   after that line (drift does not accumulate across entries); and not
//!   before the service has done what the simulator, given the entries as
//!   played so far, has before now (a late entry waits for a slow action);
//! - an entry the service took before a line the simulator has earlier
//!   (the service's timers and actions are only ever later than the
//!   simulator's) goes, for the simulator, just before that line, by at
//!   most [`TOLERANCE_MS`].
//!
//! Order and identity are then compared exactly and are not at the mercy of
//! the scheduler. The test never sleeps in the hope that something
//! happened: it waits for the service's acknowledgement of each input, and
//! at the end polls (generous deadline) until the service is idle
//! (`pending` and `runs-active` 0) and has said as much as the simulator.
//!
//! **A busy pool.** The simulator's `action` line is the start of the
//! action. The service logs `submitting action` when it hands a job over,
//! which is its start when an idle worker takes it; a job that waits for a
//! busy worker or for the Redis lane's batch (`action queued`) or is refused (a durable step then waits
//! in the due backlog and is submitted again later) has that line taken
//! back, and its start is the worker's `queued action started`. So is the
//! line of an action a guard refuses (the worker judges the guard after the
//! hand-over, and logs `action refused by guard`): the simulator has no
//! `action` line for it.
//!
//! Not modelled here: a timeline's `action-time` on `redis` steps (an
//! `LPUSH` takes no time): such timelines are refused with the reason.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)] // test code

mod support;

use rulecore::bundle::{Action, Payload, Step};
use ruled_engine::sim::{self, Dur, EventEntry, Line, LineKind, Timeline};
use ruled_engine::{Engine, EngineConfig, Notified};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use support::{Monitor, RedisServer, Ruled};

/// Every duration, of the rules and of the timeline, is divided by this.
const SCALE: i64 = 25;
/// How far a service time may be from the simulator's (scaled ms). Generous
/// against a loaded machine; order and identity are compared exactly.
const TOLERANCE_MS: i64 = 150;
/// How long after the logged action its real effect (an `LPUSH`, a
/// recorder start) may come: a fork and exec under load can be slow.
const EFFECT_LAG_MS: i64 = 2_000;
/// After the simulator's last line, how long the service may take to say
/// the same and go idle.
const SETTLE: Duration = Duration::from_secs(15);

/// Timelines the real service cannot play, and why.
const EXCLUDED: &[(&str, &str)] = &[
    (
        "hazards-clock-jump",
        "jumps the wall clock ([[clock]]): playing it means setting the machine's clock, \
         which a test must not do (the service's jump handling is tested on its own, \
         runtime/engine/tests and docs/engine.md \"Time\")",
    ),
    (
        "night-schedules",
        "places its schedules on a calendar day (`start`, `timezone`): the real service \
         fires on the machine's clock, which a test cannot set nor scale; the schedules \
         are compared on the real clock instead (`schedules_on_the_real_clock`, below)",
    ),
];

/// One `#[test]` per played timeline: `test => "timeline" from "rules dir"`,
/// with `then "rules dir"` for the bundle after every restart, and
/// `profile none` for a timeline that gives events on topics the built-in
/// profile owns (see [`Profile`]).
macro_rules! played {
    ($($test:ident => $name:literal from $rules:literal $(then $after:literal)? $(, profile $profile:ident)?;)*) => {
        /// The timelines played, each by the test of its name.
        const PLAYED: &[&str] = &[$($name),*];
        $(
            #[test]
            fn $test() {
                let profile = Profile::named(stringify!($($profile)?));
                play($name, $rules, None$(.or(Some($after)))?, profile);
            }
        )*
    };
}

played! {
    hazards => "hazards" from "fixtures/rules", profile none;
    hazards_cancel => "hazards-cancel" from "fixtures/rules", profile none;
    hazards_restart => "hazards-restart" from "fixtures/rules", profile none;
    hazards_changed => "hazards-changed" from "fixtures/rules" then "fixtures/rules-changed", profile none;
    alarm_horn_pulses => "alarm-horn-pulses" from "fixtures/rules", profile none;
    ask_bms_status => "ask-bms-status" from "fixtures/rules", profile none;
    battery_state_log => "battery-state-log" from "fixtures/rules", profile none;
    hazards_on_kickstand => "hazards-on-kickstand" from "fixtures/rules", profile none;
    low_battery_warning => "low-battery-warning" from "fixtures/rules", profile none;
    low_battery_explain => "low-battery-explain" from "fixtures/rules", profile none;
    battery_critical_per_slot => "battery-critical-per-slot" from "fixtures/rules", profile none;
    lock_flash => "lock-flash" from "fixtures/rules", profile none;
    battery_low_for => "battery-low-for" from "fixtures/rules";
    engine_power_input => "engine-power-input" from "fixtures/rules";
    bus_librescoot => "bus-librescoot" from "fixtures/rules";
    traces => "traces" from "fixtures/rules", profile none;
    parked_brake_blink => "parked-brake-blink" from "fixtures/rules", profile none;
    winter_seat_heater => "winter-seat-heater" from "fixtures/rules-winter" then "fixtures/rules", profile none;
    parked_backlog => "parked-backlog" from "fixtures/rules-parked", profile none;
    hazards_reload => "hazards-reload" from "fixtures/rules", profile none;
    hazards_why => "hazards-why" from "fixtures/rules-why", profile none;
}

/// The bus profile a timeline's bundles are built with.
///
/// `Librescoot` is what `rulec build` uses by default: both sides derive
/// events from the hash writes and channel messages, and ruled (`--bus
/// own`, its default) publishes them. An `[[event]]` on a topic the
/// profile owns cannot be played so: ruled never subscribes
/// `ev:<owned topic>` (docs/service.md#the-bus), while the simulator hands
/// the entry to the rules anyway. Such a timeline is played with `None`
/// (`rulec build --profile none`: the bus before profiles, every event from
/// `ev:<topic>`); [`check_profile`] refuses either choice where the other
/// is the one that fits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Profile {
    Librescoot,
    None,
}

impl Profile {
    /// `played!`'s word: none for the built-in profile, `none`.
    fn named(word: &str) -> Self {
        match word {
            "" => Profile::Librescoot,
            "none" => Profile::None,
            other => {
                panic!("unknown profile `{other}` in played!: write `profile none` or nothing")
            }
        }
    }
}

#[test]
fn every_timeline_is_played_or_excluded_with_a_reason() {
    let dir = root().join("fixtures/timelines");
    let mut found = BTreeSet::new();
    for entry in std::fs::read_dir(&dir).expect("read fixtures/timelines") {
        let path = entry.expect("directory entry").path();
        if path.extension().is_some_and(|ext| ext == "toml") {
            let stem = path.file_stem().expect("a file name");
            found.insert(stem.to_string_lossy().into_owned());
        }
    }
    let excluded: BTreeSet<String> = EXCLUDED.iter().map(|(n, _)| n.to_string()).collect();
    let played: BTreeSet<String> = PLAYED.iter().map(|n| n.to_string()).collect();
    assert!(
        played.is_disjoint(&excluded),
        "both played and excluded: {:?}",
        played.intersection(&excluded).collect::<Vec<_>>()
    );
    let listed: BTreeSet<String> = played.union(&excluded).cloned().collect();
    let new: Vec<_> = found.difference(&listed).collect();
    assert!(
        new.is_empty(),
        "timelines neither played nor excluded: {new:?}; add each to `played!` in \
         {} (or to EXCLUDED with the reason it cannot be played)",
        file!()
    );
    let gone: Vec<_> = listed.difference(&found).collect();
    assert!(
        gone.is_empty(),
        "listed but not in {}: {gone:?}",
        dir.display()
    );
    assert!(
        PLAYED.len() >= 8,
        "issue 8 asks for at least 8 played timelines"
    );
}

// ---------------------------------------------------------------- preparing

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Compiles a rules directory as `rulec build --profile <profile>` does
/// (no file written).
fn compile(rules: &str, profile: Profile) -> Payload {
    let loaded = match profile {
        Profile::Librescoot => {
            let choice = rulec::profile::ProfileChoice::Builtin;
            let loaded = rulec::profile::load(&choice).expect("read the built-in profile");
            Some(Arc::new(loaded.expect("the built-in profile")))
        }
        Profile::None => None,
    };
    let report = rulec::session::Session::new(loaded)
        .check(&root().join(rules))
        .expect("read the rules directory");
    assert!(!report.failed(false), "{rules}: {}", report.summary());
    report.assemble(rulec::build::COMPILER_VERSION)
}

fn scaled_ns(ns: u64) -> u64 {
    ns / SCALE.unsigned_abs()
}

fn scaled(d: Dur) -> Dur {
    Dur(d.0 / SCALE)
}

/// The payload both sides run: durations scaled, `exec` and `can` steps
/// turned into recorders in `dir` (and `publish`, `notify` steps: what their
/// messages say is the engine's one rendering), fingerprints recomputed.
fn prepare(mut payload: Payload, dir: &Path, action_time_ns: u64) -> Payload {
    for rule in &mut payload.rules {
        rule.options_mut().cooldown_ns = scaled_ns(rule.cooldown_ns());
        rule.options_mut().debounce_ns = scaled_ns(rule.debounce_ns());
        rule.options_mut().hold_ns = scaled_ns(rule.hold_ns());
        rule.options_mut().repeat.every_ns = scaled_ns(rule.repeat().every_ns);
        rule.options_mut().repeat.period_ns = scaled_ns(rule.repeat().period_ns);
        let name = rule.name.to_string();
        let mut finally = std::mem::take(&mut rule.options_mut().finally);
        // Finally steps (docs/semantics.md#finally) as steps, their
        // recorders apart: `f0`, `f1`, ...
        let lists = [
            (Arc::make_mut(&mut rule.steps), ""),
            (Arc::make_mut(&mut finally), "f"),
        ];
        for (steps, list) in lists {
            for (index, step) in steps.iter_mut().enumerate() {
                prepare_step(
                    step,
                    dir,
                    (&name, &format!("{list}{index}")),
                    action_time_ns,
                );
            }
        }
        rule.options_mut().finally = finally;
    }
    payload.refresh_fingerprints();
    payload
}

/// One step of [`prepare`]: its wait scaled, an `exec` or `can` action made
/// a recorder of its own (`at`: rule and step, as the recorder names it).
fn prepare_step(step: &mut Step, dir: &Path, at: (&str, &str), action_time_ns: u64) {
    step.after_ns = scaled_ns(step.after_ns);
    let (tag, timeout_ns) = match &*step.action {
        Action::Redis { .. } => return,
        Action::Exec {
            command,
            timeout_ns,
        } => {
            let name = Path::new(command).file_name().unwrap_or_default();
            (name.to_string_lossy().into_owned(), *timeout_ns)
        }
        Action::Can(frame) => {
            let data: String = frame.data.iter().map(|b| format!("{b:02x}")).collect();
            let kind = if frame.rtr { "rtr" } else { "data" };
            let tag = format!(
                "can-{}-{:x}-{kind}{}-{data}",
                frame.iface, frame.id, frame.dlc
            );
            // `exec`'s default timeout (docs/rules.md#step-keys).
            (tag, 10_000_000_000)
        }
        // Recorders too: both sides run the engine's one rendering of the
        // message; what is compared is that the step ran.
        Action::Publish { channel, .. } => (format!("publish-{channel}"), 10_000_000_000),
        Action::Notify(n) => (format!("notify-{}", n.id), 10_000_000_000),
    };
    step.action = Arc::new(Action::Exec {
        command: recorder(dir, at, &tag, action_time_ns),
        timeout_ns: scaled_ns(timeout_ns),
    });
}

fn safe(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

/// Writes the recorder script of one step; returns its path (the step's
/// new `command`). Its invocations go to `<path>.calls` (start time in µs
/// since the Unix epoch, one line each); it fails while `<path>.fail`
/// exists.
fn recorder(dir: &Path, (rule, step): (&str, &str), tag: &str, action_time_ns: u64) -> String {
    let scripts = dir.join("exec");
    std::fs::create_dir_all(&scripts).expect("create the recorder directory");
    let name = format!("{}.{step}.{}", safe(rule), safe(tag));
    let path = scripts.join(&name);
    let mut body = format!(
        "date +%s%6N >> '{0}.calls'\nif [ -e '{0}.fail' ]; then exit 1; fi",
        path.display()
    );
    if action_time_ns > 0 {
        let secs = Duration::from_nanos(action_time_ns).as_secs_f64();
        body.push_str(&format!("\nsleep {secs:.6}"));
    }
    support::script(&scripts, &name, &body)
}

fn scale_timeline(nominal: &Timeline) -> Timeline {
    let mut t = nominal.clone();
    for e in &mut t.event {
        e.at = scaled(e.at);
    }
    for e in &mut t.state {
        e.at = scaled(e.at);
        e.expire = e.expire.map(scaled);
    }
    for e in &mut t.message {
        e.at = scaled(e.at);
    }
    for e in &mut t.restart {
        e.at = scaled(e.at);
        e.down = scaled(e.down);
    }
    for e in &mut t.fail {
        e.at = scaled(e.at);
        e.until = e.until.map(scaled);
    }
    for e in &mut t.reload {
        e.at = scaled(e.at);
    }
    let window = Dur(ruled_engine::DEFAULT_REPLAY_WINDOW_MS * 1_000_000);
    t.replay_window = Some(scaled(t.replay_window.unwrap_or(window)));
    t.action_time = t.action_time.map(scaled);
    t
}

// ----------------------------------------------------------------- playing

/// What the driver does at one instant, in the simulator's order at one
/// instant (docs/simulation.md: state, message, fail, reload, restart, event), a fail
/// window's end first (the simulator fails actions started in `[at, until)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Entry {
    Unfail(usize),
    State(usize),
    Message(usize),
    Fail(usize),
    Reload(usize),
    Restart(usize),
    Event(usize),
}

fn schedule(t: &Timeline) -> Vec<(i64, Entry)> {
    let mut entries = Vec::new();
    // `before-start` entries are written before ruled starts, not played.
    entries.extend(
        t.state
            .iter()
            .enumerate()
            .filter(|(_, e)| !e.before_start)
            .map(|(i, e)| (e.at.0, Entry::State(i))),
    );
    entries.extend(
        t.message
            .iter()
            .enumerate()
            .map(|(i, e)| (e.at.0, Entry::Message(i))),
    );
    for (i, fail) in t.fail.iter().enumerate() {
        entries.push((fail.at.0, Entry::Fail(i)));
        if let Some(until) = fail.until {
            entries.push((until.0, Entry::Unfail(i)));
        }
    }
    entries.extend(
        t.reload
            .iter()
            .enumerate()
            .map(|(i, e)| (e.at.0, Entry::Reload(i))),
    );
    entries.extend(
        t.restart
            .iter()
            .enumerate()
            .map(|(i, e)| (e.at.0, Entry::Restart(i))),
    );
    entries.extend(
        t.event
            .iter()
            .enumerate()
            .map(|(i, e)| (e.at.0, Entry::Event(i))),
    );
    entries.sort();
    entries
}

fn wall_us() -> i64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970");
    i64::try_from(since.as_micros()).expect("µs fit")
}

/// Polls `check` every 2 ms (an acknowledgement delays the next entry)
/// until it returns `Some`, or [`support::DEADLINE`] passes.
fn poll_fast<T>(mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let started = std::time::Instant::now();
    loop {
        if let Some(found) = check() {
            return Some(found);
        }
        if started.elapsed() > support::DEADLINE {
            return None;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Sleeps until the wall clock reads `at_us` (the driver's schedule; the
/// outcomes are waited for by polling).
fn sleep_until(at_us: i64) {
    let left = at_us - wall_us();
    if left > 0 {
        std::thread::sleep(Duration::from_micros(left.unsigned_abs()));
    }
}

fn event_json(entry: &EventEntry) -> String {
    let mut object = serde_json::Map::new();
    object.insert("topic".into(), entry.topic.clone().into());
    for (key, value) in [
        ("id", &entry.id),
        ("src", &entry.src),
        ("from", &entry.from),
        ("to", &entry.to),
    ] {
        if let Some(value) = value {
            object.insert(key.into(), value.clone().into());
        }
    }
    if let Some(data) = &entry.data {
        object.insert("data".into(), data.clone());
    }
    serde_json::Value::Object(object).to_string()
}

/// How the driver makes the steps of one `[[fail]]` fail.
#[derive(Debug, Default)]
struct Failing {
    /// Lists of failing `redis` steps: they hold a string meanwhile.
    lists: BTreeSet<String>,
    /// Flag files of failing recorder steps (one per step, in whichever
    /// bundle it is).
    flags: BTreeSet<PathBuf>,
    /// (rule, step) that fail.
    steps: BTreeSet<(String, u32)>,
}

fn failing(fail: &sim::FailEntry, payloads: &[&Payload]) -> Failing {
    let mut out = Failing::default();
    for payload in payloads {
        for rule in payload.rules.iter().filter(|r| *r.name == *fail.rule) {
            for (index, step) in rule.steps.iter().enumerate() {
                let index = u32::try_from(index).expect("step index");
                if fail.step.is_some_and(|s| s != index) {
                    continue;
                }
                out.steps.insert((rule.name.to_string(), index));
                out.fail_action(step);
            }
            // Without `step`, the finally steps fail too (docs/simulation.md#entries).
            for step in rule.finally().iter().filter(|_| fail.step.is_none()) {
                out.fail_action(step);
            }
        }
    }
    out
}

impl Failing {
    /// What makes `step`'s action fail: its list, or its recorder's flag.
    fn fail_action(&mut self, step: &Step) {
        match &*step.action {
            Action::Redis { list, .. } => {
                self.lists.insert(list.clone());
            }
            Action::Exec { command, .. } => {
                self.flags.insert(PathBuf::from(format!("{command}.fail")));
            }
            Action::Can(_) | Action::Publish { .. } | Action::Notify(_) => {
                unreachable!("can, publish and notify steps are recorders here")
            }
        }
    }
}

/// Panics with the reason when the real service cannot play `timeline` as
/// the simulator means it (checked on the nominal, scaled plan).
fn check_playable(name: &str, timeline: &Timeline, plan: &[Line], payloads: &[&Payload]) {
    for payload in payloads {
        let engine = Engine::new(Arc::new((*payload).clone()), EngineConfig::default());
        let polls: Vec<_> = engine.polls().iter().map(|p| p.hash.clone()).collect();
        assert!(
            polls.is_empty(),
            "{name}: the profile's polls of {polls:?} are live; their intervals are not scaled \
             (a scaled one would be below the 100 ms minimum); list it in EXCLUDED"
        );
    }
    if timeline.action_time.is_some_and(|d| d.0 > 0) {
        let instant: Vec<_> = plan
            .iter()
            .filter(|l| l.kind == LineKind::Action && l.action != Some("exec"))
            .map(Line::to_text)
            .collect();
        assert!(
            instant.is_empty(),
            "{name}: `action-time` on non-exec actions cannot be played (an LPUSH takes no \
             time); list it in EXCLUDED: {instant:#?}"
        );
    }
    for fail in &timeline.fail {
        let f = failing(fail, payloads);
        let (from, until) = (fail.at.0 / 1_000_000, fail.until.map(|u| u.0 / 1_000_000));
        let clash: Vec<_> = plan
            .iter()
            .filter(|l| l.kind == LineKind::Action)
            .filter(|l| l.list.as_ref().is_some_and(|list| f.lists.contains(list)))
            .filter(|l| {
                let key = (l.rule.clone().unwrap_or_default(), l.step.unwrap_or(0));
                !f.steps.contains(&key)
            })
            .filter(|l| {
                let at = i64::try_from(l.at_ms).expect("ms");
                at >= from && until.is_none_or(|u| at < u)
            })
            .map(Line::to_text)
            .collect();
        assert!(
            clash.is_empty(),
            "{name}: a [[fail]] of rule {} makes its lists fail for everyone, and other \
             steps push to them meanwhile; list it in EXCLUDED: {clash:#?}",
            fail.rule
        );
    }
}

/// The real side of one timeline.
struct Driver<'a> {
    redis: &'a RedisServer,
    bundle: PathBuf,
    flags: Vec<String>,
    ruled: Ruled,
    /// Logs of the processes that stopped, in order.
    logs: Vec<Vec<String>>,
    /// The payload the running process loaded.
    current: Arc<Payload>,
    t0_us: i64,
}

impl Driver<'_> {
    fn start(&self) -> Ruled {
        let flags: Vec<&str> = self.flags.iter().map(String::as_str).collect();
        Ruled::ready(self.redis, &self.bundle, &flags)
    }

    /// What the service said so far, in the simulator's terms.
    fn seen(&self) -> Vec<Seen> {
        let mut logs = self.logs.clone();
        logs.push(self.ruled.log());
        service_lines(&logs, self.t0_us, false)
    }

    /// When to play an entry planned at `at_ns`: at its time, but not
    /// before the service has done the last thing the plan has before it
    /// (the anchor), and then only the planned gap after it. A chain of
    /// steps runs late by the time its actions really take (each `after`
    /// counts from the previous action's end); anchoring keeps that drift
    /// from reordering an entry and a timer the plan has close together.
    fn when_to_play(&self, plan: &[Seen], at_ns: i64) -> i64 {
        let nominal = self.t0_us + at_ns / 1_000;
        let Some(anchor) = plan.iter().rposition(|s| s.at_us * 1_000 < at_ns) else {
            return nominal;
        };
        // Times out only when the service diverged; the comparison says how.
        let done = poll_fast(|| self.seen().get(anchor).map(|s| s.at_us));
        done.map_or(nominal, |at_us| {
            nominal.max(self.t0_us + at_us + (at_ns / 1_000 - plan[anchor].at_us))
        })
    }

    /// Before an entry is played now: waits until the service has done
    /// everything the simulator, given the entries as played so far, says
    /// happens before now. The service's timers and actions only ever come
    /// later than the simulator's (a real action takes longer than the
    /// timeline's `action-time`, a timer fires at or after its due time): an
    /// entry played late must not overtake them in the service while it
    /// comes after them in the simulator.
    ///
    /// Returns what the simulator says for the entries played so far.
    fn catch_up(
        &self,
        first: &Arc<Payload>,
        played: &Timeline,
        second: &Option<Arc<Payload>>,
        reloads: &[Arc<Payload>],
    ) -> Vec<Seen> {
        let outcome = simulate(first, played, second, reloads.to_vec());
        let predicted: Vec<Seen> = outcome.lines.iter().filter_map(Seen::from_sim).collect();
        let _ = poll_fast(|| {
            let now_us = wall_us() - self.t0_us;
            let due = predicted.iter().filter(|s| s.at_us < now_us).count();
            (self.seen().len() >= due).then_some(())
        });
        predicted
    }

    /// How many compared lines the service had logged before line `index`
    /// of the running process's log.
    fn seen_before(&self, index: usize) -> usize {
        let mut logs = self.logs.clone();
        logs.push(self.ruled.log().into_iter().take(index).collect());
        service_lines(&logs, self.t0_us, false).len()
    }

    /// Waits for the next log line of the running process that `matches`
    /// (one more than `before`); returns its time and how many compared
    /// lines the service had logged before it.
    fn ack(&self, before: usize, what: &str, matches: impl Fn(&str) -> bool) -> (i64, usize) {
        let found = poll_fast(|| {
            let log = self.ruled.log();
            let (index, line) = log
                .iter()
                .enumerate()
                .filter(|(_, l)| matches(l))
                .nth(before)?;
            Some((log_time_us(line)?, self.seen_before(index)))
        });
        found.unwrap_or_else(|| {
            panic!(
                "ruled never acknowledged {what}; log:\n{}",
                self.ruled.log_text()
            )
        })
    }

    fn count(&self, matches: impl Fn(&str) -> bool) -> usize {
        self.ruled.log().iter().filter(|l| matches(l)).count()
    }

    /// One `[[state]]`: written as its service writes it, then each name
    /// it publishes (`StateEntry::published`), back to back as a service
    /// does; then each acknowledged as ruled handles it ([`Heard`]). The
    /// time and log position of the first acknowledgement (the service
    /// took the entry then); else, when ruled hears none of it (`notify =
    /// false`, an ignored name, a hash nobody watches), now.
    fn write_and_publish(&self, entry: &sim::StateEntry) -> (i64, Option<usize>) {
        write_state(self.redis, entry);
        let engine = Engine::new(Arc::clone(&self.current), EngineConfig::default());
        let mut waiting = Vec::new();
        for name in entry.published() {
            let heard = Heard::of(&engine, &entry.hash, name);
            let before = heard.as_ref().map_or(0, |h| self.count(|l| h.matches(l)));
            let receivers: i64 = self.redis.query(&["PUBLISH", &entry.hash, name]);
            if let Some(heard) = heard.filter(|_| receivers > 0) {
                waiting.push((name, heard, before));
            }
        }
        let now = wall_us();
        let mut first = None;
        for (name, heard, before) in waiting {
            let what = format!("`PUBLISH {} {name}`", entry.hash);
            let (at_us, seen) = self.ack(before, &what, |l| heard.matches(l));
            first.get_or_insert((at_us, Some(seen)));
        }
        first.unwrap_or((now, None))
    }

    /// `PUBLISH channel payload`, then, when someone received it and
    /// `acked` says the service handles it, the time and log position of
    /// the line `matches` finds (`what` names it in a failure); else now.
    fn publish(
        &self,
        [channel, payload]: [&str; 2],
        acked: bool,
        what: &str,
        matches: impl Fn(&str) -> bool,
    ) -> (i64, Option<usize>) {
        let before = self.count(&matches);
        let receivers: i64 = self.redis.query(&["PUBLISH", channel, payload]);
        if receivers > 0 && acked {
            let (at_us, seen) = self.ack(before, what, matches);
            (at_us, Some(seen))
        } else {
            (wall_us(), None)
        }
    }
}

/// Where an entry the service received at `at_us` (since the start) goes
/// in the timeline given to the simulator. `predicted`: the simulator's
/// lines for the entries before it; the service had logged `before` of
/// them when it received this one. The service's timers and actions only
/// come later than the simulator's, never earlier; so when the simulator
/// has its next line (one the service had not logged yet) before `at_us`,
/// the service took the entry first (a busy service, a slow action): the
/// entry goes just before that line, and after the last line the service
/// had logged, if there is room between them (times are whole ms).
fn placed(at_us: i64, predicted: &[Seen], before: usize) -> i64 {
    let Some(next) = predicted.get(before) else {
        return at_us;
    };
    // `next` happens at or after its whole ms.
    let limit = next.at_us - 1;
    if at_us <= limit {
        return at_us;
    }
    // The last logged line happened before the end of its whole ms.
    let floor = before
        .checked_sub(1)
        .map_or(0, |last| predicted[last].at_us + 1_000);
    if limit >= floor {
        limit
    } else {
        at_us
    }
}

fn is_event(topic: &str) -> impl Fn(&str) -> bool + '_ {
    move |line: &str| {
        message(line).is_some_and(|m| m.starts_with("event "))
            && field(line, "topic").as_deref() == Some(topic)
    }
}

/// A message on an input's raw channel, as the driver logs it.
fn is_input_message(channel: &str) -> impl Fn(&str) -> bool + '_ {
    move |line: &str| {
        message(line).is_some_and(|m| m.starts_with("input message"))
            && field(line, "channel").as_deref() == Some(channel)
    }
}

/// What ruled logs when it takes `PUBLISH <hash> <name>`, as the engine
/// judges the notification ([`Engine::notified`](ruled_engine::Engine),
/// the snapshot the service's bus reader consults): the read of the
/// notified field (`Read`), or of the hash's first watched field
/// (`replaced`, `cleared`), as `state changed`. `None`: ignored, no
/// line (a field nobody watches, a polled one, `seatbox:opened`).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Heard {
    Read { hash: String, field: String },
}

impl Heard {
    fn of(engine: &Engine, hash: &str, name: &str) -> Option<Self> {
        let read = |pairs: &[usize]| {
            let pair = &engine.watched_pairs()[*pairs.first()?];
            Some(Heard::Read {
                hash: pair.hash.clone(),
                field: pair.field.clone(),
            })
        };
        match engine.notified(hash, name) {
            Notified::Ignore => None,
            Notified::Read(pairs) | Notified::ReadWritten(pairs) | Notified::Reread(pairs) => {
                read(&pairs)
            }
        }
    }

    fn matches(&self, line: &str) -> bool {
        let Some(text) = message(line) else {
            return false;
        };
        match self {
            Heard::Read { hash, field: key } => {
                text.starts_with("state changed ")
                    && field(line, "hash").as_deref() == Some(hash)
                    && field(line, "field").as_deref() == Some(key)
            }
        }
    }
}

/// The write of one `[[state]]` as its service makes it
/// (docs/simulation.md#state-entries), one `MULTI`: `DEL` (`clear`,
/// `replace`), `HDEL` (`delete`), one `HSET` of every field written,
/// `PEXPIRE` (`expire`, scaled: below a second, which `EXPIRE` cannot
/// say). What is published after it is the caller's.
fn write_state(redis: &RedisServer, entry: &sim::StateEntry) {
    let mut pipe = redis::pipe();
    pipe.atomic();
    if entry.clear || entry.replace {
        pipe.cmd("DEL").arg(&entry.hash).ignore();
    }
    if let Some(field) = entry.field.as_ref().filter(|_| entry.delete) {
        pipe.cmd("HDEL").arg(&entry.hash).arg(field).ignore();
    }
    let written: Vec<(&str, &str)> = entry.written().collect();
    if !written.is_empty() {
        let hset = pipe.cmd("HSET").arg(&entry.hash);
        for (field, value) in written {
            hset.arg(field).arg(value);
        }
        hset.ignore();
    }
    if let Some(expire) = entry.expire {
        let ms = (expire.0 / 1_000_000).max(1);
        pipe.cmd("PEXPIRE").arg(&entry.hash).arg(ms).ignore();
    }
    let () = pipe
        .query(&mut redis.con())
        .unwrap_or_else(|e| panic!("writing {entry:?}: {e}"));
}

/// A timeline's `[[event]]`s and its profile must fit (see [`Profile`]):
/// with the built-in profile no event on a topic it owns (ruled would
/// never hear it); `profile none` only for a timeline that has one (else
/// it is played with the profile, derivation and all).
fn check_profile(name: &str, timeline: &Timeline, rules: &str, profile: Profile) {
    let builtin = Arc::new(compile(rules, Profile::Librescoot));
    let engine = Engine::new(builtin, EngineConfig::default());
    let owned: BTreeSet<&str> = timeline
        .event
        .iter()
        .map(|e| e.topic.as_str())
        .filter(|topic| !topic.starts_with("input.") && engine.refuses_from_bus(topic))
        .collect();
    match profile {
        Profile::Librescoot => assert!(
            owned.is_empty(),
            "{name}: [[event]]s on topics the built-in profile owns ({owned:?}): `ruled --bus \
             own` never subscribes ev:<owned topic>, the simulator hands them to the rules \
             anyway. Write the [[state]] or [[message]] the service writes, or play it with \
             `profile none` in played!"
        ),
        Profile::None => assert!(
            !owned.is_empty(),
            "{name}: `profile none`, but no [[event]] is on a topic the built-in profile owns: \
             play it with the profile (drop `profile none` in played!)"
        ),
    }
}

fn is_message(text: &'static str) -> impl Fn(&str) -> bool {
    move |line: &str| message(line).is_some_and(|m| m == text || m.starts_with(&format!("{text} ")))
}

fn play(name: &str, rules: &str, after: Option<&str>, profile: Profile) {
    let path = root().join(format!("fixtures/timelines/{name}.toml"));
    let text = std::fs::read_to_string(&path).expect("read the timeline");
    let nominal = sim::parse(&text).expect("a valid timeline");
    assert!(
        nominal.clock.is_empty(),
        "{name}: [[clock]] cannot be played; list it in EXCLUDED"
    );
    assert!(
        nominal.end.is_none(),
        "{name}: `end` is not played by this test yet; list it in EXCLUDED"
    );
    let timeline = scale_timeline(&nominal);
    let dir = tempfile::tempdir().expect("temp dir");
    let action_ns = timeline.action_time.map_or(0, |d| d.0.unsigned_abs());
    let first = Arc::new(prepare(compile(rules, profile), dir.path(), action_ns));
    let second = after.map(|a| Arc::new(prepare(compile(a, profile), dir.path(), action_ns)));
    // Each `[[reload]]` bundle, named relative to the timeline.
    let reloads: Vec<Arc<Payload>> = timeline
        .reload
        .iter()
        .map(|e| {
            let rules = format!("fixtures/timelines/{}", e.bundle);
            Arc::new(prepare(compile(&rules, profile), dir.path(), action_ns))
        })
        .collect();
    let payloads: Vec<&Payload> = std::iter::once(&*first)
        .chain(second.as_deref())
        .chain(reloads.iter().map(|p| &**p))
        .collect();
    let plan = simulate(&first, &timeline, &second, reloads.clone());
    check_playable(name, &timeline, &plan.lines, &payloads);
    check_profile(name, &timeline, rules, profile);
    let plan_seen: Vec<Seen> = plan.lines.iter().filter_map(Seen::from_sim).collect();

    let redis = RedisServer::start();
    let bundle = dir.path().join("rules.bundle");
    write_bundle(&bundle, &first);
    let monitor = Monitor::start(&redis, dir.path().join("monitor.txt"));
    // What the services wrote before ruled started: its start reads it.
    let before_start: Vec<sim::StateEntry> = timeline
        .state
        .iter()
        .filter(|e| e.before_start)
        .cloned()
        .collect();
    for entry in &before_start {
        write_state(&redis, entry);
    }
    let window_ms = timeline.replay_window.map_or(0, |d| d.0 / 1_000_000);
    let mut flags = vec![
        "--replay-window".to_string(),
        format!("{window_ms}ms"),
        "--stats-interval".to_string(),
        "50ms".to_string(),
    ];
    if let Some(workers) = timeline.workers {
        flags.extend(["--workers".to_string(), workers.to_string()]);
    }
    if let Some(queue) = timeline.queue {
        flags.extend(["--queue".to_string(), queue.to_string()]);
    }
    let ruled = Ruled::ready(
        &redis,
        &bundle,
        &flags.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let mut driver = Driver {
        redis: &redis,
        bundle,
        flags,
        ruled,
        logs: Vec::new(),
        current: Arc::clone(&first),
        t0_us: wall_us(),
    };
    // The timeline as played so far: entries are added as they are played.
    let mut played = Timeline {
        event: Vec::new(),
        // Kept as they are: at "0s", before the start.
        state: before_start,
        message: Vec::new(),
        restart: Vec::new(),
        fail: Vec::new(),
        clock: Vec::new(),
        reload: Vec::new(),
        ..timeline.clone()
    };
    // The bundles of `played.reload`, in its order.
    let mut played_reloads = Vec::new();
    let mut fail_index = BTreeMap::new();
    let mut last = Dur(-1);
    let t0_us = driver.t0_us;
    for (at, entry) in schedule(&timeline) {
        sleep_until(driver.when_to_play(&plan_seen, at));
        let predicted = driver.catch_up(&first, &played, &second, &played_reloads);
        // As received (see `placed`); strictly after the previous entry,
        // so the simulator keeps the order in which they were played.
        let mut when = |at_us: i64, seen_before: Option<usize>| {
            let received = at_us - t0_us;
            let mut at_us = received;
            if let Some(before) = seen_before {
                at_us = placed(at_us, &predicted, before);
            }
            // A line of the service as late as that would fail the time
            // comparison; an entry moved so far back would hide it.
            assert!(
                received - at_us <= TOLERANCE_MS * 1_000,
                "{name}: the service took an entry received at {} ms before a line the \
                 simulator has at {} ms: a timer or action over {TOLERANCE_MS} ms late",
                received as f64 / 1e3,
                (at_us + 1) as f64 / 1e3
            );
            let at = Dur((at_us * 1_000).max(last.0 + 1));
            last = at;
            at
        };
        match entry {
            Entry::State(i) => {
                let e = &timeline.state[i];
                let (at_us, seen) = driver.write_and_publish(e);
                played.state.push(sim::StateEntry {
                    at: when(at_us, seen),
                    ..e.clone()
                });
            }
            Entry::Message(i) => {
                let e = &timeline.message[i];
                let (at_us, seen) = driver.publish(
                    [&e.channel, &e.payload],
                    true,
                    &format!("the message on {}", e.channel),
                    is_input_message(&e.channel),
                );
                played.message.push(sim::MessageEntry {
                    at: when(at_us, seen),
                    ..e.clone()
                });
            }
            Entry::Fail(i) => {
                let f = failing(&timeline.fail[i], &payloads);
                for list in &f.lists {
                    let _: i64 = redis.query(&["DEL", list]);
                    let _: String = redis.query(&["SET", list, "not a list: [[fail]]"]);
                }
                for flag in &f.flags {
                    std::fs::write(flag, "").expect("write a fail flag");
                }
                fail_index.insert(i, played.fail.len());
                played.fail.push(sim::FailEntry {
                    at: when(wall_us(), None),
                    until: None,
                    ..timeline.fail[i].clone()
                });
            }
            Entry::Unfail(i) => {
                let f = failing(&timeline.fail[i], &payloads);
                for list in &f.lists {
                    let _: i64 = redis.query(&["DEL", list]);
                }
                for flag in &f.flags {
                    std::fs::remove_file(flag).expect("remove a fail flag");
                }
                let j = fail_index[&i];
                played.fail[j].until = Some(when(wall_us(), None));
            }
            Entry::Reload(i) => {
                let next = &reloads[i];
                write_bundle(&driver.bundle, next);
                let reading = is_message("reading the bundle again");
                let before = driver.count(&reading);
                driver.ruled.signal(nix::sys::signal::Signal::SIGHUP);
                let (at_us, seen) = driver.ack(before, "the reload", reading);
                driver.current = Arc::clone(next);
                played.reload.push(sim::ReloadEntry {
                    at: when(at_us, Some(seen)),
                    ..timeline.reload[i].clone()
                });
                played_reloads.push(Arc::clone(next));
            }
            Entry::Restart(i) => {
                let e = &timeline.restart[i];
                // What survives a restart is in Redis: wait until the
                // records are the plan's (an action still running, such as
                // a slow exec, has not yet written the next step's).
                let want = planned_records(&plan.lines, at);
                let _ = poll_fast(|| (pending_records(&redis) == want).then_some(()));
                assert!(
                    driver.ruled.stop(),
                    "ruled stops cleanly; log:\n{}",
                    driver.ruled.log_text()
                );
                let log = driver.ruled.log();
                let index = log
                    .iter()
                    .rposition(|l| is_message("stopping")(l))
                    .expect("ruled logged `stopping`");
                let stopping = log_time_us(&log[index]).expect("a timestamp");
                let seen = driver.seen_before(index);
                driver.logs.push(log);
                let stopped_at = when(stopping, Some(seen));
                sleep_until(stopping + e.down.0 / 1_000);
                if let Some(next) = &second {
                    write_bundle(&driver.bundle, next);
                    driver.current = Arc::clone(next);
                }
                driver.ruled = driver.start();
                let ready = driver
                    .ruled
                    .log()
                    .iter()
                    .find(|l| is_message("ruled ready")(l))
                    .and_then(|l| log_time_us(l))
                    .expect("ruled logged `ruled ready`");
                let up = when(ready, None);
                played.restart.push(sim::RestartEntry {
                    at: stopped_at,
                    down: Dur(up.0 - stopped_at.0),
                });
            }
            Entry::Event(i) => {
                let e = &timeline.event[i];
                let (at_us, seen) = driver.publish(
                    [&format!("ev:{}", e.topic), &event_json(e)],
                    true,
                    &format!("the event {}", e.topic),
                    is_event(&e.topic),
                );
                played.event.push(EventEntry {
                    at: when(at_us, seen),
                    ..e.clone()
                });
            }
        }
    }

    let expected = simulate(&first, &played, &second, played_reloads);
    let want: Vec<Seen> = expected.lines.iter().filter_map(Seen::from_sim).collect();
    let last_ms = expected.lines.last().map_or(0, |l| l.at_ms);
    let deadline_us = driver.t0_us
        + i64::try_from(last_ms).expect("ms") * 1_000
        + i64::try_from(SETTLE.as_micros()).expect("µs");
    // Done: the service said at least as much as the simulator, and has
    // nothing left to do (no armed timer, no live run).
    loop {
        let said = driver.seen().len();
        let idle = counter(&redis, "pending") == "0" && counter(&redis, "runs-active") == "0";
        if (said >= want.len() && idle) || wall_us() > deadline_us {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        driver.ruled.stop(),
        "ruled stops cleanly; log:\n{}",
        driver.ruled.log_text()
    );
    driver.logs.push(driver.ruled.log());
    let got = service_lines(&driver.logs, driver.t0_us, true);
    let want_derived: Vec<Derived> = expected
        .lines
        .iter()
        .filter_map(Derived::from_sim)
        .collect();
    let got_derived = service_derived(&redis, driver.t0_us);
    let report = Report {
        name,
        played: &played,
        want: &want,
        got: &got,
        want_derived: &want_derived,
        got_derived: &got_derived,
        logs: &driver.logs,
    };
    if std::env::var_os("SIM_VS_SERVICE_SHOW").is_some() {
        eprintln!("{name}:\n{}", report.context());
    }
    report.compare();
    check_published(&report, &redis, &monitor);
    check_performed(&report, &expected.lines, &monitor, driver.t0_us);
    check_records(&report, &redis, &expected.records);
}

/// The simulator on `timeline`, with the bundle after every restart and
/// those of the `[[reload]]` entries (in the timeline's order).
fn simulate(
    first: &Arc<Payload>,
    timeline: &Timeline,
    after_restart: &Option<Arc<Payload>>,
    reloads: Vec<Arc<Payload>>,
) -> sim::Outcome {
    let options = sim::Options::default();
    sim::simulate_reloading(
        Arc::clone(first),
        timeline,
        after_restart.clone(),
        reloads,
        options,
    )
    .expect("the timeline simulates")
}

/// The records the plan's store holds just before `at_ns`, as `rule step
/// pass` (sorted).
fn planned_records(lines: &[Line], at_ns: i64) -> Vec<String> {
    let mut store = BTreeMap::new();
    for line in lines
        .iter()
        .take_while(|l| i64::try_from(l.at_ms).expect("ms") * 1_000_000 < at_ns)
    {
        match (line.kind.as_str(), &line.run) {
            ("record-put", Some(run)) => {
                let record = format!(
                    "{} step {} pass {}",
                    line.rule.as_deref().unwrap_or_default(),
                    line.step.unwrap_or(0),
                    line.pass.unwrap_or(0)
                );
                store.insert(run.clone(), record);
            }
            ("record-drop", Some(run)) => {
                store.remove(run);
            }
            _ => {}
        }
    }
    let mut out: Vec<String> = store.into_values().collect();
    out.sort();
    out
}

/// The records in `extensions:pending`, as `rule step pass` (sorted).
fn pending_records(redis: &RedisServer) -> Vec<String> {
    let left: BTreeMap<String, String> = redis.query(&["HGETALL", "extensions:pending"]);
    record_summary(left.values())
}

fn record_summary<'a>(values: impl Iterator<Item = &'a String>) -> Vec<String> {
    let mut out: Vec<String> = values
        .map(|json| {
            let record: serde_json::Value = serde_json::from_str(json).expect("a record is JSON");
            let text = |key: &str| match &record[key] {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            format!(
                "{} step {} pass {}",
                text("rule"),
                text("step"),
                text("iter")
            )
        })
        .collect();
    out.sort();
    out
}

fn write_bundle(path: &Path, payload: &Payload) {
    let bytes = rulecore::codec::encode(payload).expect("encode the bundle");
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).expect("write the bundle");
    std::fs::rename(&tmp, path).expect("replace the bundle");
}

fn counter(redis: &RedisServer, field: &str) -> String {
    let value: Option<String> = redis.query(&["HGET", "extensions", field]);
    value.unwrap_or_default()
}

// --------------------------------------------------------------- observing

/// One compared line: what happened, and when (scaled ms since the start).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    /// Scaled µs since the start (the simulator's are whole ms).
    at_us: i64,
    kind: String,
    rule: Option<String>,
    step: Option<u32>,
    /// `step` counts the finally steps (docs/semantics.md#finally).
    finally: bool,
    pass: Option<u32>,
    run: Option<String>,
    reason: Option<String>,
}

impl Seen {
    /// The compared part of a simulator line; `None` for kinds not compared.
    fn from_sim(line: &Line) -> Option<Self> {
        let mut seen = Seen {
            at_us: i64::try_from(line.at_ms).expect("ms") * 1_000,
            kind: line.kind.to_string(),
            rule: line.rule.clone(),
            step: line.step,
            finally: line.finally,
            pass: line.pass,
            run: line.run.clone(),
            reason: line.reason.map(|r| r.to_string()),
        };
        match line.kind.as_str() {
            "action" | "run-start" | "run-end" | "step-skipped" | "replay-resume"
            | "replay-drop" | "restart" | "finally-start" => {}
            "trigger-dropped" | "trigger-queued" | "trigger-refused" | "trigger-suppressed" => {
                seen.run = None;
            }
            // The service's line names rule and step only.
            "action-failed" => {
                seen.pass = None;
                seen.run = None;
                seen.reason = None;
            }
            _ => return None,
        }
        Some(seen)
    }

    fn key(&self) -> String {
        let mut out = self.kind.clone();
        for (key, value) in [
            ("rule", self.rule.clone()),
            ("step", self.step.map(|s| s.to_string())),
            ("finally", self.finally.then(|| "true".to_string())),
            ("pass", self.pass.map(|s| s.to_string())),
            ("run", self.run.clone()),
            ("reason", self.reason.clone()),
        ] {
            if let Some(value) = value {
                let _ = write!(out, " {key}={value}");
            }
        }
        out
    }

    fn text(&self) -> String {
        format!("{:>9.3} ms  {}", self.at_us as f64 / 1e3, self.key())
    }
}

/// `2026-11-30T16:35:30.756547Z  INFO run started rule=..`: the time in µs
/// since the Unix epoch.
fn log_time_us(line: &str) -> Option<i64> {
    let stamp = line.split_whitespace().next()?;
    let (date, time) = stamp.strip_suffix('Z')?.split_once('T')?;
    let mut ymd = date.split('-').map(str::parse::<i64>);
    let (y, m, d) = (ymd.next()?.ok()?, ymd.next()?.ok()?, ymd.next()?.ok()?);
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let mut parts = hms.split(':').map(str::parse::<i64>);
    let (h, min, s) = (
        parts.next()?.ok()?,
        parts.next()?.ok()?,
        parts.next()?.ok()?,
    );
    let micros: i64 = format!("{frac:0<6}").get(..6)?.parse().ok()?;
    let days = days_from_civil(y, m, d);
    Some(((days * 24 + h) * 60 + min) * 60_000_000 + s * 1_000_000 + micros)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The message and fields after the time and level.
fn message(line: &str) -> Option<&str> {
    let mut rest = line.split_once(' ')?.1.trim_start();
    rest = rest.split_once(' ')?.1;
    Some(rest)
}

/// The value of ` key=value` in a log line (quoted or bare).
fn field(line: &str, key: &str) -> Option<String> {
    let needle = format!(" {key}=");
    let start = line.find(&needle)? + needle.len();
    let rest = &line[start..];
    if let Some(quoted) = rest.strip_prefix('"') {
        let mut out = String::new();
        let mut chars = quoted.chars();
        while let Some(c) = chars.next() {
            match c {
                '"' => return Some(out),
                '\\' => out.push(chars.next()?),
                c => out.push(c),
            }
        }
        None
    } else {
        Some(rest.split(' ').next().unwrap_or_default().to_string())
    }
}

/// `rule#<epoch>-<n>` -> `rule#<process>-<n>`: the simulator's epoch is the
/// number of restarts before the process that started the run.
fn normalise_run(run: &str, epochs: &BTreeMap<String, usize>) -> String {
    let Some((rule, tail)) = run.rsplit_once('#') else {
        return run.to_string();
    };
    let Some((epoch, n)) = tail.split_once('-') else {
        return run.to_string();
    };
    match epochs.get(epoch) {
        Some(process) => format!("{rule}#{process}-{n}"),
        None => run.to_string(),
    }
}

/// ruled's log messages (their start) for the simulator's line kinds; the
/// first that matches counts.
const NOTES: &[(&str, &str)] = &[
    ("run started (replayed)", "replay-resume"),
    ("queued action started ", "action"),
    ("run started ", "run-start"),
    ("run ended ", "run-end"),
    ("submitting action ", "action"),
    ("step's `when` is false", "step-skipped"),
    ("pending record removed at replay:", "replay-drop"),
    ("trigger ignored: within cooldown", "trigger-suppressed"),
    ("trigger dropped:", "trigger-dropped"),
    ("trigger queued:", "trigger-queued"),
    ("run cancelled: its finally steps run", "finally-start"),
];

/// ruled's log messages (their start) that take back the `submitting
/// action` line of their run: the job did not start then.
const TAKEN_BACK: &[&str] = &[
    "worker pool refused the action",
    "worker pool full: the durable step waits for room",
    "action queued:",
];

/// What the service's logs say happened, in the simulator's terms.
/// `final_stop`: the last process was stopped by the test after the
/// timeline (its stop is not part of the timeline).
fn service_lines(logs: &[Vec<String>], t0_us: i64, final_stop: bool) -> Vec<Seen> {
    // Each process's epoch, from the runs it started itself.
    let mut epochs = BTreeMap::new();
    for (process, log) in logs.iter().enumerate() {
        for line in log {
            let started = message(line).is_some_and(|m| m.starts_with("run started rule="));
            if let Some(run) = field(line, "run").filter(|_| started) {
                if let Some((_, tail)) = run.rsplit_once('#') {
                    if let Some((epoch, _)) = tail.split_once('-') {
                        epochs.insert(epoch.to_string(), process);
                    }
                }
            }
        }
    }
    let mut out: Vec<Seen> = Vec::new();
    for (process, log) in logs.iter().enumerate() {
        let last = process + 1 == logs.len();
        for line in log {
            let (Some(text), Some(at_us)) = (message(line), log_time_us(line)) else {
                continue;
            };
            let mut seen = Seen {
                at_us: at_us - t0_us,
                kind: String::new(),
                rule: field(line, "rule"),
                step: field(line, "step").and_then(|s| s.parse().ok()),
                finally: field(line, "finally").as_deref() == Some("true"),
                pass: field(line, "pass").and_then(|s| s.parse().ok()),
                run: field(line, "run").map(|r| normalise_run(&r, &epochs)),
                reason: field(line, "reason"),
            };
            let kind = if let Some((_, kind)) = NOTES.iter().find(|(m, _)| text.starts_with(m)) {
                kind
            } else if TAKEN_BACK.iter().any(|m| text.starts_with(m)) {
                // The sim has no `action` line for a refused job, and one
                // for a queued job only when a worker takes it.
                if let Some(i) = out
                    .iter()
                    .rposition(|s| s.kind == "action" && s.run == seen.run)
                {
                    out.remove(i);
                }
                continue;
            } else if text == "stopping" {
                if last && final_stop {
                    break;
                }
                seen = Seen {
                    at_us: seen.at_us,
                    kind: String::new(),
                    rule: None,
                    step: None,
                    finally: false,
                    pass: None,
                    run: None,
                    reason: None,
                };
                "restart"
            } else if let Some((rule, step, finally, what)) = engine_log(text) {
                seen.rule = Some(rule);
                seen.step = step;
                seen.finally = finally;
                match what {
                    "action failed" => "action-failed",
                    "trigger refused" => "trigger-refused",
                    // A worker judges a guard after the hand-over
                    // (docs/safety.md#guards): the sim's refused action
                    // has a `guarded` line and no `action` line.
                    what if what.starts_with("action refused by guard ") => {
                        let step = (seen.rule.clone(), seen.step, seen.finally);
                        if let Some(i) = out.iter().rposition(|s| {
                            s.kind == "action" && (s.rule.clone(), s.step, s.finally) == step
                        }) {
                            out.remove(i);
                        }
                        continue;
                    }
                    _ => continue,
                }
            } else {
                continue;
            };
            seen.kind = kind.to_string();
            if kind.starts_with("trigger-") {
                seen.run = None;
                seen.step = None;
                seen.pass = None;
                seen.reason = None;
            }
            out.push(seen);
        }
    }
    out
}

/// An engine log line `rule R step S: <what>: ...` (`rule R finally step
/// S` for a finally step) -> (R, S, finally, what).
fn engine_log(text: &str) -> Option<(String, Option<u32>, bool, &str)> {
    let rest = text.strip_prefix("rule ")?;
    let (head, message) = rest.split_once(": ")?;
    let (rule, step) = match head.split_once(" step ") {
        Some((rule, step)) => (rule, Some(step.parse().ok()?)),
        None => (head, None),
    };
    let (rule, finally) = match rule.strip_suffix(" finally") {
        Some(rule) => (rule, true),
        None => (rule, false),
    };
    let what = message.split(':').next()?;
    Some((rule.to_string(), step, finally, what))
}

struct Report<'a> {
    name: &'a str,
    played: &'a Timeline,
    want: &'a [Seen],
    got: &'a [Seen],
    /// The simulator's `derived` lines and the events ruled published.
    want_derived: &'a [Derived],
    got_derived: &'a [Derived],
    logs: &'a [Vec<String>],
}

/// How far (scaled ms, service time) a service line may come after lines
/// of other runs the simulator puts after it: two runs' lines a few ms
/// apart race on the real clock (an `exec` recorder takes real time, which
/// the simulator does not give it).
const ORDER_SLACK_MS: i64 = 20;

/// The service's lines `got` matched to the simulator's `want`, in
/// `want`'s order; `Err(i)`: `want[i]` is the first line with no match
/// (`want.len()` when the service has lines left over). Matched exactly in
/// order, except that a line may be taken past unmatched lines of other
/// runs at most [`ORDER_SLACK_MS`] before it; within one run, and for
/// lines of no run (restarts, reloads), the order is exact.
fn in_simulator_order<'a>(want: &[Seen], got: &'a [Seen]) -> Result<Vec<&'a Seen>, usize> {
    let mut used = vec![false; got.len()];
    let mut matched = Vec::with_capacity(got.len());
    for (i, line) in want.iter().enumerate() {
        let key = line.key();
        let Some(first) = used.iter().position(|u| !u) else {
            return Err(i);
        };
        let mut found = None;
        for (j, candidate) in got.iter().enumerate().skip(first) {
            if used[j] {
                continue;
            }
            if candidate.key() == key {
                found = Some(j);
                break;
            }
            let other_run =
                line.run.is_some() && candidate.run.is_some() && candidate.run != line.run;
            if !other_run {
                break;
            }
        }
        match found {
            Some(j) if got[j].at_us - got[first].at_us <= ORDER_SLACK_MS * 1_000 => {
                used[j] = true;
                matched.push(&got[j]);
            }
            _ => return Err(i),
        }
    }
    if matched.len() == got.len() {
        Ok(matched)
    } else {
        Err(want.len())
    }
}

impl Report<'_> {
    /// Both sides side by side, the timeline as played, the service logs.
    fn context(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "--- simulator ({} lines)", self.want.len());
        for seen in self.want {
            let _ = writeln!(out, "{}", seen.text());
        }
        let _ = writeln!(out, "--- service ({} lines)", self.got.len());
        for seen in self.got {
            let _ = writeln!(out, "{}", seen.text());
        }
        let _ = writeln!(out, "--- simulator: derived ({})", self.want_derived.len());
        for derived in self.want_derived {
            let _ = writeln!(out, "{}", derived.text());
        }
        let _ = writeln!(out, "--- service: published ({})", self.got_derived.len());
        for derived in self.got_derived {
            let _ = writeln!(out, "{}", derived.text());
        }
        let _ = writeln!(out, "--- timeline as played (scaled ms)");
        for entry in self.played.state.iter().filter(|e| e.before_start) {
            let _ = writeln!(out, "  before the start: {entry:?}");
        }
        for (at, entry) in schedule(self.played) {
            let _ = writeln!(out, "{:>7.1} ms  {entry:?}", at as f64 / 1e6);
        }
        for (process, log) in self.logs.iter().enumerate() {
            let _ = writeln!(out, "--- ruled log, process {process}");
            for line in log {
                let _ = writeln!(out, "{line}");
            }
        }
        out
    }

    fn compare(&self) {
        let got = match in_simulator_order(self.want, self.got) {
            Ok(got) => got,
            Err(i) => {
                let show = |side: &[Seen]| side.get(i).map_or("(nothing)".into(), Seen::text);
                panic!(
                    "{}: the service and the simulator differ at line {}:\n  simulator: {}\n  service:   {}\n{}",
                    self.name,
                    i + 1,
                    show(self.want),
                    show(self.got),
                    self.context()
                );
            }
        };
        for (want, got) in self.want.iter().zip(got) {
            assert!(
                (want.at_us - got.at_us).abs() <= TOLERANCE_MS * 1_000,
                "{}: `{}` at {} in the simulator, {} in the service (tolerance {TOLERANCE_MS} ms)\n{}",
                self.name,
                want.key(),
                want.text(),
                got.text(),
                self.context()
            );
        }
        self.compare_derived();
    }

    /// The simulator's `derived` lines against the events ruled published
    /// (stream `events`), in order: topic, from, to, data exactly, times
    /// within the tolerance.
    fn compare_derived(&self) {
        let (want, got) = (self.want_derived, self.got_derived);
        let first_difference = want
            .iter()
            .zip(got)
            .position(|(w, g)| w.key() != g.key())
            .or((want.len() != got.len()).then(|| want.len().min(got.len())));
        if let Some(i) = first_difference {
            let show = |side: &[Derived]| side.get(i).map_or("(nothing)".into(), Derived::text);
            panic!(
                "{}: the derived events differ at event {}:\n  simulator: {}\n  service:   {}\n{}",
                self.name,
                i + 1,
                show(want),
                show(got),
                self.context()
            );
        }
        for (w, g) in want.iter().zip(got) {
            assert!(
                (w.at_us - g.at_us).abs() <= TOLERANCE_MS * 1_000,
                "{}: derived `{}` at {} in the simulator, {} in the service (tolerance \
                 {TOLERANCE_MS} ms)\n{}",
                self.name,
                w.key(),
                w.text(),
                g.text(),
                self.context()
            );
        }
    }
}

/// One derived event, as compared: topic, from, to and data; its time
/// (scaled µs since the start: the simulator's line, the event's `ts`,
/// whole ms both).
#[derive(Debug, Clone, PartialEq)]
struct Derived {
    at_us: i64,
    topic: String,
    from: Option<String>,
    to: Option<String>,
    data: Option<serde_json::Value>,
}

impl Derived {
    fn from_sim(line: &Line) -> Option<Self> {
        if line.kind != LineKind::Derived {
            return None;
        }
        let data = line.data.as_deref().map(|text| {
            serde_json::from_str(text).unwrap_or_else(|e| panic!("derived data {text:?}: {e}"))
        });
        Some(Derived {
            at_us: i64::try_from(line.at_ms).expect("ms") * 1_000,
            topic: line.topic.clone().expect("a derived line has a topic"),
            from: line.from.clone(),
            to: line.to.clone(),
            data,
        })
    }

    /// An envelope (docs/events.md#the-envelope) as ruled published it.
    fn from_envelope(envelope: &serde_json::Value, t0_us: i64) -> Self {
        let text = |key: &str| {
            envelope
                .get(key)
                .and_then(|v| v.as_str())
                .map(str::to_string)
        };
        let ts = envelope["ts"].as_i64().expect("a derived event has a ts");
        Derived {
            at_us: ts * 1_000 - t0_us,
            topic: text("topic").expect("an envelope has a topic"),
            from: text("from"),
            to: text("to"),
            data: envelope.get("data").filter(|d| !d.is_null()).cloned(),
        }
    }

    fn key(&self) -> String {
        let mut out = format!("derived topic={}", self.topic);
        for (key, value) in [("from", &self.from), ("to", &self.to)] {
            if let Some(value) = value {
                let _ = write!(out, " {key}={value}");
            }
        }
        if let Some(data) = &self.data {
            let _ = write!(out, " data={data}");
        }
        out
    }

    fn text(&self) -> String {
        format!("{:>9.3} ms  {}", self.at_us as f64 / 1e3, self.key())
    }
}

/// Stream `events` as ruled wrote it (`XADD`, every process in order):
/// each entry's envelope, which has no `id` (the entry id is it).
fn stream_entries(redis: &RedisServer) -> Vec<(String, serde_json::Value)> {
    let entries: Vec<(String, BTreeMap<String, String>)> =
        redis.query(&["XRANGE", "events", "-", "+"]);
    entries
        .into_iter()
        .map(|(id, fields)| {
            let e = fields.get("e").expect("a stream entry has `e`");
            let envelope: serde_json::Value =
                serde_json::from_str(e).unwrap_or_else(|err| panic!("entry {id}: {e:?}: {err}"));
            assert_eq!(
                fields.get("topic").map(String::as_str),
                envelope["topic"].as_str(),
                "entry {id}: field `topic` and the envelope's"
            );
            (id, envelope)
        })
        .collect()
}

/// The events ruled published, in the simulator's terms.
fn service_derived(redis: &RedisServer, t0_us: i64) -> Vec<Derived> {
    stream_entries(redis)
        .iter()
        .map(|(_, envelope)| Derived::from_envelope(envelope, t0_us))
        .collect()
}

/// Every entry of stream `events` was also published on `ev:<topic>`,
/// as the same envelope with its id, in the same order
/// (docs/service.md#the-bus); and ruled published no other event.
fn check_published(report: &Report<'_>, redis: &RedisServer, monitor: &Monitor) {
    let want: Vec<(String, serde_json::Value)> = stream_entries(redis)
        .into_iter()
        .map(|(id, mut envelope)| {
            let topic = envelope["topic"].as_str().unwrap_or_default().to_string();
            envelope["id"] = id.into();
            (format!("ev:{topic}"), envelope)
        })
        .collect();
    // The test's own `[[event]]`s are published without `src = "adapter"`
    // (the fixtures give none), ruled's always with it.
    let got: Vec<(String, serde_json::Value)> = monitor
        .commands()
        .into_iter()
        .filter(|(_, args)| {
            args.len() == 3 && args[0].eq_ignore_ascii_case("PUBLISH") && args[1].starts_with("ev:")
        })
        .filter_map(|(_, args)| {
            let envelope: serde_json::Value = serde_json::from_str(&args[2]).ok()?;
            (envelope["src"] == "adapter").then(|| (args[1].clone(), envelope))
        })
        .collect();
    assert!(
        want == got,
        "{}: stream `events` and the derived events published on ev:<topic> differ:\n\
         stream:    {want:?}\npublished: {got:?}\n{}",
        report.name,
        report.context()
    );
}

/// One action as an outcome: what it did (`LPUSH <list> <value>`, or
/// `exec <recorder>`, the recorder of one rule's step) and when, in scaled
/// ms since the start. The simulator says so in its `action` lines; the
/// service shows it in what reached Redis (each `LPUSH` MONITOR saw) and
/// what ran (each recorder start): no log line is read for either.
type Performed = BTreeMap<String, Vec<i64>>;

/// The simulator's actions as outcomes.
fn sim_performed(lines: &[Line]) -> Performed {
    let mut out = Performed::new();
    for line in lines.iter().filter(|l| l.kind == LineKind::Action) {
        let effect = match (&line.list, &line.push, &line.command) {
            (Some(list), Some(push), _) => format!("LPUSH {list} {push}"),
            (_, _, Some(command)) => format!("exec {command}"),
            _ => panic!("an action with no effect: {}", line.to_text()),
        };
        let at_ms = i64::try_from(line.at_ms).expect("ms");
        out.entry(effect).or_default().push(at_ms);
    }
    out
}

/// What the service really did: every `LPUSH` Redis received (MONITOR),
/// every start of the recorders of `sim`'s `exec` outcomes (their calls
/// files), in scaled ms since `t0_us`.
fn service_performed(sim: &Performed, monitor: &Monitor, t0_us: i64) -> Performed {
    let mut out = Performed::new();
    for line in monitor.lines() {
        if let Some((at_us, args)) = support::monitor_command(&line) {
            if args.len() == 3 && args[0].eq_ignore_ascii_case("LPUSH") {
                let effect = format!("LPUSH {} {}", args[1], args[2]);
                out.entry(effect)
                    .or_default()
                    .push((at_us - t0_us).div_euclid(1_000));
            }
        }
    }
    for effect in sim.keys().filter(|e| e.starts_with("exec ")) {
        let calls = format!("{}.calls", &effect["exec ".len()..]);
        let text = std::fs::read_to_string(&calls).unwrap_or_default();
        let times = text
            .lines()
            .filter_map(|l| l.trim().parse::<i64>().ok())
            .map(|us| (us - t0_us).div_euclid(1_000));
        out.entry(effect.clone()).or_default().extend(times);
    }
    out
}

/// The actions the simulator says were performed are the ones the service
/// performed: the same effects, as many of each, each at most
/// [`TOLERANCE_MS`] before the simulator's time and at most
/// [`TOLERANCE_MS`] + [`EFFECT_LAG_MS`] after it (a fork and exec under
/// load can be slow).
fn check_performed(report: &Report<'_>, lines: &[Line], monitor: &Monitor, t0_us: i64) {
    let mut want = sim_performed(lines);
    let mut got = service_performed(&want, monitor, t0_us);
    for times in want.values_mut().chain(got.values_mut()) {
        times.sort_unstable();
    }
    let mut problems = Vec::new();
    for effect in want.keys().chain(got.keys()).collect::<BTreeSet<_>>() {
        let none = Vec::new();
        let (said, done) = (
            want.get(effect).unwrap_or(&none),
            got.get(effect).unwrap_or(&none),
        );
        let in_time = said
            .iter()
            .zip(done)
            .all(|(s, d)| *d >= s - TOLERANCE_MS && *d <= s + TOLERANCE_MS + EFFECT_LAG_MS);
        if said.len() != done.len() || !in_time {
            problems.push(format!(
                "{effect}: simulated at {said:?} ms, performed by the service at {done:?} ms"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "{}: the actions the simulator performed and the ones the service performed differ:\n{}\n{}",
        report.name,
        problems.join("\n"),
        report.context()
    );
}

/// The records left in `extensions:pending` are the simulator's: same
/// rule, step and pass each.
fn check_records(report: &Report<'_>, redis: &RedisServer, sim: &BTreeMap<String, String>) {
    assert_eq!(
        pending_records(redis),
        record_summary(sim.values()),
        "{}: records left in extensions:pending\n{}",
        report.name,
        report.context()
    );
}

// ------------------------------------------- the envelope's refusals
//
// A refusal by the safety envelope (docs/safety.md) through both: the
// timelines are in `fixtures/timelines-safety/` (named here relative to
// `fixtures/timelines/`, where `play` reads), apart from the fixture
// timelines `played!` lists. The envelope's windows (a limit's `per`, a
// breaker's `per` and `pause`) are not scaled by `prepare`: both sides run
// them unscaled over the scaled timeline, so every entry falls in one
// window; what is compared is that both refuse the same runs.

/// A guarded refusal: the example handlebar auto-lock (fixtures/rules)
/// with the built-in guard `hardware-parked`; the speed written without a
/// notification during the countdown, as ecu-service writes it, is read
/// fresh at the lock by both, and both end the run `guarded` instead of
/// pushing `handlebar:lock`.
#[test]
fn envelope_guarded() {
    play(
        "../timelines-safety/handlebar-auto-lock",
        "fixtures/rules",
        None,
        Profile::Librescoot,
    );
}

/// A limited refusal: a rules directory's `[[limit]]` refuses the third
/// handlebar push in its window on both sides (the run ends `limited`).
#[test]
fn envelope_limited() {
    play(
        "../timelines-safety/limited",
        "fixtures/rules-envelope",
        None,
        Profile::None,
    );
}

/// A tripped rule: its third start within `per` trips the breaker; both
/// refuse that trigger and the ones during the pause (no run starts).
#[test]
fn envelope_tripped() {
    play(
        "../timelines-safety/tripped",
        "fixtures/rules-envelope",
        None,
        Profile::None,
    );
}

// ------------------------------------------------------- schedules, real clock

/// RFC 3339 in UTC of Unix ms `ms` (`2026-12-05T22:13:04.120Z`).
fn rfc3339_utc(ms: i64) -> String {
    let (days, ms_of_day) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    // Civil from days (Howard Hinnant's algorithm), the inverse of
    // `days_from_civil`.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    assert_eq!(days_from_civil(y, m, d), days, "civil round trip");
    let (h, mi, s, milli) = (
        ms_of_day / 3_600_000,
        ms_of_day / 60_000 % 60,
        ms_of_day / 1_000 % 60,
        ms_of_day % 1_000,
    );
    format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{milli:03}Z")
}

/// The `LPUSH`es MONITOR saw on `list`: (Unix ms, value), in order.
fn pushes(monitor: &Monitor, list: &str) -> Vec<(i64, String)> {
    monitor
        .commands()
        .into_iter()
        .filter(|(_, args)| {
            args.len() == 3 && args[0].eq_ignore_ascii_case("LPUSH") && args[1] == list
        })
        .map(|(at_us, args)| (at_us.div_euclid(1_000), args[2].clone()))
        .collect()
}

/// Schedules (docs/rules.md#schedules) cannot be scaled nor played on a
/// calendar day (`night-schedules` is excluded above): they are compared
/// on the real clock instead. Rules with `every = "2s"` and an `at` five
/// seconds after the start, compiled by the rulec library, run in the
/// real `ruled` (zone UTC) and in the simulator given the service's start
/// as its `start`; the pushes must be the same, in the same order, each
/// at the same grid point of the wall clock (the service's within
/// [`TOLERANCE_MS`] + [`EFFECT_LAG_MS`] after it). Comparing only whole
/// grid points inside the played span keeps the edges out of it. The
/// keyed rule is played above (`battery-critical-per-slot`).
#[test]
fn schedules_on_the_real_clock() {
    let dir = tempfile::tempdir().expect("temp dir");
    let rules = dir.path().join("rules");
    std::fs::create_dir(&rules).expect("rules dir");
    // The `at` time: the first whole second at least 5 s from now (UTC).
    let at_ms = (wall_us() / 1_000 / 1_000 + 5) * 1_000;
    let at_label = rfc3339_utc(at_ms)[11..19].to_string();
    std::fs::write(
        rules.join("50-time.toml"),
        format!(
            "[[rule]]\nname = \"tick\"\nevery = \"2s\"\n\
             [[rule.step]]\ndo = \"redis\"\nlist = \"scooter:blinker\"\npush = \"left\"\n\n\
             [[rule]]\nname = \"once\"\nat = [\"{at_label}\"]\n\
             [[rule.step]]\ndo = \"redis\"\nlist = \"scooter:horn\"\npush = \"on\"\n"
        ),
    )
    .expect("write the rules");
    let payload = compile(rules.to_str().expect("utf-8 path"), Profile::None);
    let bundle = dir.path().join("rules.bundle");
    write_bundle(&bundle, &payload);

    let redis = RedisServer::start();
    let monitor = Monitor::start(&redis, dir.path().join("monitor.txt"));
    let mut ruled = Ruled::start_with(&redis.url(), &bundle, &[], &[("TZ", "UTC")]);
    ruled.wait_ready();
    let started_ms = wall_us() / 1_000;
    let seen = support::poll_within(Duration::from_secs(30), || {
        let horn = pushes(&monitor, "scooter:horn");
        let ticks = pushes(&monitor, "scooter:blinker");
        (!horn.is_empty() && ticks.len() >= 4).then_some(())
    });
    assert!(seen.is_some(), "no fires: {}", ruled.log_text());
    assert!(ruled.stop(), "clean stop: {}", ruled.log_text());
    let stopped_ms = wall_us() / 1_000;

    let text = format!(
        "start = \"{}\"\nend = \"{}ms\"\n",
        rfc3339_utc(started_ms),
        stopped_ms - started_ms
    );
    let timeline = sim::parse(&text).expect("the timeline parses");
    let outcome = sim::simulate(Arc::new(payload), &timeline, None).expect("simulates");
    let sim_pushes = |list: &str| -> Vec<(i64, String)> {
        (outcome.lines.iter())
            .filter(|l| l.kind == LineKind::Action && l.list.as_deref() == Some(list))
            .map(|l| {
                let at = started_ms + i64::try_from(l.at_ms).expect("ms");
                (at, l.push.clone().unwrap_or_default())
            })
            .collect()
    };
    // Grid points well inside the played span; each service push is at
    // most `LATE_MS` after its point (the next one is 2 s on).
    const LATE_MS: i64 = 1_000;
    let inside = |at: &i64| *at > started_ms + TOLERANCE_MS && *at < stopped_ms - LATE_MS;
    for list in ["scooter:blinker", "scooter:horn"] {
        let want: Vec<(i64, String)> = sim_pushes(list)
            .into_iter()
            .filter(|(at, _)| inside(at))
            .collect();
        let (Some((first, _)), Some((last, _))) = (want.first(), want.last()) else {
            panic!("{list}: the simulator fired nothing inside the span");
        };
        let got: Vec<(i64, String)> = pushes(&monitor, list)
            .into_iter()
            .filter(|(at, _)| *at >= first - TOLERANCE_MS && *at <= last + LATE_MS)
            .collect();
        assert_eq!(
            want.iter().map(|(_, v)| v).collect::<Vec<_>>(),
            got.iter().map(|(_, v)| v).collect::<Vec<_>>(),
            "{list}: simulator {want:?}, service {got:?}"
        );
        for ((sim_at, _), (service_at, _)) in want.iter().zip(&got) {
            let late = service_at - sim_at;
            assert!(
                (-TOLERANCE_MS..=LATE_MS).contains(&late),
                "{list}: fired at {service_at}, the simulator at {sim_at} ({late} ms)"
            );
        }
    }
    // The `at` fire is the one written in the rule.
    let horn = sim_pushes("scooter:horn");
    assert_eq!(horn.iter().map(|(at, _)| *at).collect::<Vec<_>>(), [at_ms]);
}

/// [`in_simulator_order`]: exact within a run and across runs further
/// apart than [`ORDER_SLACK_MS`]; two runs' lines closer than that may
/// swap.
#[test]
fn lines_match_in_order_with_the_slack_between_runs_only() {
    let line = |at_ms: i64, kind: &str, run: Option<&str>| Seen {
        at_us: at_ms * 1_000,
        kind: kind.to_string(),
        rule: None,
        step: None,
        finally: false,
        pass: None,
        run: run.map(str::to_string),
        reason: None,
    };
    let want = [
        line(0, "run-start", Some("a")),
        line(0, "run-end", Some("a")),
        line(3, "action", Some("b")),
    ];
    let swapped = [
        line(1, "run-start", Some("a")),
        line(4, "action", Some("b")),
        line(9, "run-end", Some("a")),
    ];
    let order: Vec<i64> = in_simulator_order(&want, &swapped)
        .unwrap()
        .iter()
        .map(|seen| seen.at_us / 1_000)
        .collect();
    assert_eq!(order, [1, 9, 4]);
    // Too far apart: the order is the simulator's.
    let late = [
        line(1, "run-start", Some("a")),
        line(4, "action", Some("b")),
        line(4 + ORDER_SLACK_MS + 1, "run-end", Some("a")),
    ];
    assert_eq!(in_simulator_order(&want, &late).err(), Some(1));
    // Within one run, exact.
    let same_run = [
        line(1, "run-end", Some("a")),
        line(1, "run-start", Some("a")),
        line(4, "action", Some("b")),
    ];
    assert_eq!(in_simulator_order(&want, &same_run).err(), Some(0));
    // A line missing, or one left over.
    assert_eq!(in_simulator_order(&want, &swapped[..2]).err(), Some(1));
    let extra = [&swapped[..], &[line(5, "restart", None)]].concat();
    assert_eq!(in_simulator_order(&want, &extra).err(), Some(3));
}

//! Schedules (docs/rules.md#schedules) on the virtual clock: `at` across
//! midnight and both DST changes of Europe/Berlin, `every` on the local
//! grid, fires missed while the service was down (inside and outside the
//! replay window), and jumps of the wall clock forward and back.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

#[allow(dead_code)] // the helpers other test binaries use
mod support;

use rulecore::schedule::Schedule;
use ruled_engine::schedule::{last_fire, next_fire, unix_of_civil, FireKind, LocalZone};
use ruled_engine::{Effect, Engine, EngineConfig, Now, Time};
use std::sync::Arc;
use support::{payload, push};

/// Europe/Berlin's rule as `TZ` writes it: no file needed.
fn berlin() -> LocalZone {
    LocalZone::from_posix_rule("CET-1CEST,M3.5.0,M10.5.0/3").unwrap()
}

fn at(times: &[u32]) -> Schedule {
    Schedule {
        at: times.into(),
        every_s: 0,
    }
}

fn every(seconds: u32) -> Schedule {
    Schedule {
        at: Box::default(),
        every_s: seconds,
    }
}

/// Unix seconds of a UTC date and time.
fn utc(y: i64, mo: u32, d: u32, h: i64, mi: i64) -> i64 {
    unix_of_civil(y, mo, d, h * 3600 + mi * 60)
}

fn hm(h: u32, m: u32) -> u32 {
    h * 3600 + m * 60
}

#[test]
fn at_fires_each_local_day_across_midnight() {
    let zone = berlin();
    let schedule = at(&[hm(6, 30), hm(22, 0)]);
    // 2026-12-04 21:59 CET = 20:59 UTC.
    let mut after = utc(2026, 12, 4, 20, 59);
    let mut fires = Vec::new();
    for _ in 0..4 {
        let fire = next_fire(&zone, &schedule, FireKind::At, after).unwrap();
        fires.push((fire.unix_s, fire.at_s));
        after = fire.unix_s;
    }
    assert_eq!(
        fires,
        vec![
            (utc(2026, 12, 4, 21, 0), hm(22, 0)),
            (utc(2026, 12, 5, 5, 30), hm(6, 30)),
            (utc(2026, 12, 5, 21, 0), hm(22, 0)),
            (utc(2026, 12, 6, 5, 30), hm(6, 30)),
        ]
    );
}

#[test]
fn at_in_the_spring_gap_fires_once_an_hour_later_on_the_clock() {
    // 2026-03-29: 02:00 CET becomes 03:00 CEST (01:00 UTC).
    let zone = berlin();
    let schedule = at(&[hm(2, 30)]);
    let day_before = next_fire(&zone, &schedule, FireKind::At, utc(2026, 3, 28, 0, 0)).unwrap();
    assert_eq!(day_before.unix_s, utc(2026, 3, 28, 1, 30));
    let gap = next_fire(&zone, &schedule, FireKind::At, day_before.unix_s).unwrap();
    // 02:30 is never shown: it fires at 01:30 UTC, which reads 03:30 CEST.
    assert_eq!(gap.unix_s, utc(2026, 3, 29, 1, 30));
    assert_eq!(gap.at_s, hm(2, 30));
    let after = next_fire(&zone, &schedule, FireKind::At, gap.unix_s).unwrap();
    assert_eq!(after.unix_s, utc(2026, 3, 30, 0, 30), "02:30 CEST");
}

#[test]
fn at_in_the_autumn_fold_fires_once_at_the_first_reading() {
    // 2026-10-25: 03:00 CEST becomes 02:00 CET (01:00 UTC): 02:30 is read twice.
    let zone = berlin();
    let schedule = at(&[hm(2, 30)]);
    let fold = next_fire(&zone, &schedule, FireKind::At, utc(2026, 10, 24, 12, 0)).unwrap();
    assert_eq!(
        fold.unix_s,
        utc(2026, 10, 25, 0, 30),
        "02:30 CEST, the first"
    );
    let next = next_fire(&zone, &schedule, FireKind::At, fold.unix_s).unwrap();
    assert_eq!(
        next.unix_s,
        utc(2026, 10, 26, 1, 30),
        "not 02:30 CET the same night"
    );
    // A time after the fold is on the new offset.
    let late = next_fire(&zone, &at(&[hm(22, 0)]), FireKind::At, fold.unix_s).unwrap();
    assert_eq!(late.unix_s, utc(2026, 10, 25, 21, 0));
}

#[test]
fn every_follows_the_local_grid() {
    let zone = berlin();
    // 5m from 21:58:30 CET: 22:00, 22:05.
    let start = utc(2026, 12, 4, 20, 58) + 30;
    let first = next_fire(&zone, &every(300), FireKind::Every, start).unwrap();
    assert_eq!(
        (first.unix_s, first.at_s),
        (utc(2026, 12, 4, 21, 0), hm(22, 0))
    );
    let second = next_fire(&zone, &every(300), FireKind::Every, first.unix_s).unwrap();
    assert_eq!(second.unix_s, first.unix_s + 300);
    // 3h aligned to local midnight, not UTC's: 00:00, 03:00, ... CET;
    // after 21:00 CET (itself on the grid) comes 00:00 CET, 23:00 UTC.
    let grid = next_fire(
        &zone,
        &every(3 * 3600),
        FireKind::Every,
        utc(2026, 12, 4, 20, 0),
    )
    .unwrap();
    assert_eq!(
        (grid.unix_s, grid.at_s),
        (utc(2026, 12, 4, 23, 0), hm(0, 0))
    );
    // The last fire at or before an instant.
    let last = last_fire(&zone, &every(300), FireKind::Every, start).unwrap();
    assert_eq!(last.unix_s, utc(2026, 12, 4, 20, 55));
}

#[test]
fn every_across_both_dst_changes() {
    let zone = berlin();
    // Spring: 2h grid. 00:00 CET (23:00 UTC), then 03:00 CEST is not on it;
    // 04:00 CEST (02:00 UTC) is. 02:00 local is never shown.
    let mut after = utc(2026, 3, 28, 22, 30);
    let mut fires = Vec::new();
    for _ in 0..3 {
        let fire = next_fire(&zone, &every(7200), FireKind::Every, after).unwrap();
        fires.push((fire.unix_s, fire.at_s));
        after = fire.unix_s;
    }
    assert_eq!(
        fires,
        vec![
            (utc(2026, 3, 28, 23, 0), hm(0, 0)),
            (utc(2026, 3, 29, 2, 0), hm(4, 0)),
            (utc(2026, 3, 29, 4, 0), hm(6, 0)),
        ]
    );
    // Autumn: 02:00 is read twice, and fires twice, an hour apart.
    let mut after = utc(2026, 10, 24, 23, 30);
    let mut fires = Vec::new();
    for _ in 0..3 {
        let fire = next_fire(&zone, &every(7200), FireKind::Every, after).unwrap();
        fires.push((fire.unix_s, fire.at_s));
        after = fire.unix_s;
    }
    assert_eq!(
        fires,
        vec![
            (utc(2026, 10, 25, 0, 0), hm(2, 0)),
            (utc(2026, 10, 25, 1, 0), hm(2, 0)),
            (utc(2026, 10, 25, 3, 0), hm(4, 0)),
        ]
    );
}

// ----- the engine --------------------------------------------------------

/// A driver on virtual time: `now` ms on the engine's clock, the wall
/// clock `wall0 + now + jump`. Every job is reported done at once.
struct H {
    engine: Engine,
    now: u64,
    wall0: i64,
    jump: i64,
    /// `(virtual ms, rule, data.at)` of every run the schedules started.
    fires: Vec<(u64, String)>,
    /// `NS:schedule` as the effects wrote it.
    store: Vec<(String, i64)>,
    logs: Vec<String>,
}

impl H {
    fn new(schedule: Schedule, wall0_s: i64, window_ms: i64) -> Self {
        let mut rule =
            rulecore::bundle::Rule::new("night", "night.toml", vec![], vec![push("on", 0)]);
        rule.options_mut().schedule = schedule;
        let config = EngineConfig {
            replay_window_ms: window_ms,
            ..EngineConfig::default()
        };
        let mut engine = Engine::new(payload(vec![rule]), config);
        engine.set_zone(berlin());
        Self {
            engine,
            now: 0,
            wall0: wall0_s * 1000,
            jump: 0,
            fires: Vec::new(),
            store: Vec::new(),
            logs: Vec::new(),
        }
    }

    fn clock(&self) -> Now {
        Now::new(
            Time::from_millis(self.now),
            self.wall0 + self.now as i64 + self.jump,
        )
    }

    fn start(&mut self, stored: &[(String, i64)]) {
        let now = self.clock();
        self.engine.start_schedules(now, stored);
        self.pump();
    }

    /// Runs the engine's deadlines up to virtual `ms`.
    fn to(&mut self, ms: u64) {
        loop {
            let next = [self.engine.next_deadline(), self.engine.next_schedule()]
                .into_iter()
                .flatten()
                .min();
            let Some(next) = next.filter(|next| next.as_millis() <= ms) else {
                break;
            };
            self.now = self.now.max(next.as_millis());
            let now = self.clock();
            self.engine.handle_timeout(now);
            self.pump();
        }
        self.now = ms;
    }

    fn jump(&mut self, ms: i64) {
        self.jump += ms;
        self.engine.clock_jumped(ms);
        self.pump();
    }

    fn pump(&mut self) {
        let mut jobs = Vec::new();
        while let Some(effect) = self.engine.poll_effect() {
            match effect {
                Effect::Submit(job) => {
                    let at = job
                        .event
                        .data
                        .as_object()
                        .and_then(|o| o.get("at"))
                        .map(|v| format!("{v:?}"));
                    self.fires.push((self.now, at.unwrap_or_default()));
                    jobs.push(job.id);
                }
                Effect::ScheduleFired { rule, fire_ms } => {
                    self.store.push((rule.to_string(), fire_ms))
                }
                Effect::Log(line) => self.logs.push(line.message),
                _ => {}
            }
        }
        for job in jobs {
            self.engine.action_started(job);
            let now = self.clock();
            self.engine.action_finished(now, job, Ok(()));
        }
        while let Some(effect) = self.engine.poll_effect() {
            if let Effect::Log(line) = effect {
                self.logs.push(line.message);
            }
        }
    }

    fn fire_times(&self) -> Vec<u64> {
        self.fires.iter().map(|(at, _)| *at).collect()
    }
}

const MIN: u64 = 60_000;

#[test]
fn engine_fires_at_and_says_when_next() {
    // 21:59 CET on 2026-12-04.
    let mut h = H::new(at(&[hm(22, 0)]), utc(2026, 12, 4, 20, 59), 300_000);
    h.start(&[]);
    let views = h.engine.schedules();
    assert_eq!(views.len(), 1);
    assert_eq!(views[0].next_fire_ms, utc(2026, 12, 4, 21, 0) * 1000);
    assert_eq!((views[0].topic, views[0].at.as_str()), ("time.at", "22:00"));
    h.to(2 * MIN);
    assert_eq!(h.fire_times(), vec![MIN]);
    assert!(h.fires[0].1.contains("22:00"), "{:?}", h.fires);
    // The start's baseline (nothing was stored), then the fire.
    assert_eq!(
        h.store,
        vec![
            ("night".to_string(), utc(2026, 12, 4, 20, 59) * 1000),
            ("night".to_string(), utc(2026, 12, 4, 21, 0) * 1000)
        ]
    );
    // Next: tomorrow.
    assert_eq!(
        h.engine.schedules()[0].next_fire_ms,
        utc(2026, 12, 5, 21, 0) * 1000
    );
}

#[test]
fn engine_every_fires_on_the_grid() {
    let mut h = H::new(every(300), utc(2026, 12, 4, 20, 58), 300_000);
    h.start(&[]);
    h.to(13 * MIN);
    // 22:00, 22:05, 22:10 CET: 2, 7 and 12 minutes in.
    assert_eq!(h.fire_times(), vec![2 * MIN, 7 * MIN, 12 * MIN]);
}

#[test]
fn missed_fire_inside_the_window_runs_once_at_start() {
    // Down over 22:00; back at 22:03, the window 5 minutes.
    let start = utc(2026, 12, 4, 21, 3);
    let mut h = H::new(at(&[hm(22, 0)]), start, 300_000);
    let yesterday = utc(2026, 12, 3, 21, 0) * 1000;
    h.start(&[("night".to_string(), yesterday)]);
    assert_eq!(h.fire_times(), vec![0], "{:?}", h.logs);
    assert!(h
        .logs
        .iter()
        .any(|l| l.contains("missed") && l.contains("runs now")));
    assert_eq!(
        h.store,
        vec![("night".to_string(), utc(2026, 12, 4, 21, 0) * 1000)]
    );
    // A second start with what the first wrote runs nothing.
    let mut again = H::new(at(&[hm(22, 0)]), start + 30, 300_000);
    again.start(&h.store);
    assert!(again.fires.is_empty());
}

#[test]
fn missed_fire_outside_the_window_is_skipped_with_a_line() {
    let start = utc(2026, 12, 4, 21, 10);
    let mut h = H::new(at(&[hm(22, 0)]), start, 300_000);
    h.start(&[("night".to_string(), utc(2026, 12, 3, 21, 0) * 1000)]);
    assert!(h.fires.is_empty());
    assert!(h.logs.iter().any(|l| l.contains("skipped")), "{:?}", h.logs);
    // Never fired before: nothing missed, nothing run.
    let mut fresh = H::new(at(&[hm(22, 0)]), start, 300_000);
    fresh.start(&[]);
    assert!(fresh.fires.is_empty() && fresh.logs.is_empty());
}

#[test]
fn clock_jump_forward_over_fires_runs_once() {
    // 21:00 CET; the clock is set 3 hours ahead, over 22:00 (and every 1h
    // fire between): each key runs once.
    let mut h = H::new(at(&[hm(22, 0)]), utc(2026, 12, 4, 20, 0), 300_000);
    h.start(&[]);
    h.to(MIN);
    h.jump(3 * 3600 * 1000);
    h.to(2 * MIN);
    assert_eq!(h.fire_times(), vec![MIN]);
    let mut h = H::new(every(3600), utc(2026, 12, 4, 20, 30), 300_000);
    h.start(&[]);
    h.jump(3 * 3600 * 1000);
    h.to(MIN);
    assert_eq!(h.fire_times(), vec![0], "one fire for three hours passed");
    // The next fire is on the grid after the new clock.
    assert_eq!(
        h.engine.schedules()[0].next_fire_ms,
        utc(2026, 12, 5, 0, 0) * 1000
    );
}

#[test]
fn clock_jump_back_repeats_no_fire() {
    let mut h = H::new(at(&[hm(22, 0)]), utc(2026, 12, 4, 20, 59), 300_000);
    h.start(&[]);
    h.to(2 * MIN);
    assert_eq!(h.fire_times(), vec![MIN]);
    // Back 10 minutes, to 21:51: 22:00 has been run today.
    h.jump(-10 * 60 * 1000);
    h.to(40 * MIN);
    assert_eq!(h.fire_times(), vec![MIN]);
    assert_eq!(
        h.engine.schedules()[0].next_fire_ms,
        utc(2026, 12, 5, 21, 0) * 1000
    );
}

#[test]
fn a_stopped_engine_fires_nothing() {
    let mut h = H::new(every(60), utc(2026, 12, 4, 20, 0), 300_000);
    h.start(&[]);
    h.engine.stop();
    assert_eq!(h.engine.next_schedule(), None);
    assert!(h.engine.schedules().is_empty());
    let _ = Arc::clone(h.engine.payload());
}

/// A Redis that lost `NS:schedule` (a reboot: Valkey keeps nothing) gives
/// a start with no last fires: each scheduled rule's baseline, the start,
/// is written at once, so a fire missed during a later downtime still
/// runs at the next start (within the window).
#[test]
fn a_start_with_no_last_fire_writes_the_baseline() {
    // Started after a reboot at 21:30 CET; down from 21:59 to 22:03.
    let boot = utc(2026, 12, 4, 20, 30);
    let mut h = H::new(at(&[hm(22, 0)]), boot, 300_000);
    h.start(&[]);
    assert_eq!(h.store, vec![("night".to_string(), boot * 1000)]);
    assert!(h.fires.is_empty());
    h.to(29 * MIN);
    h.engine.stop();
    let mut again = H::new(at(&[hm(22, 0)]), utc(2026, 12, 4, 21, 3), 300_000);
    again.start(&h.store);
    assert_eq!(again.fire_times(), vec![0], "{:?}", again.logs);
    // A rule that has a last fire gets no baseline.
    assert_eq!(
        again.store,
        vec![("night".to_string(), utc(2026, 12, 4, 21, 0) * 1000)]
    );
}

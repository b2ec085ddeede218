//! Keyed runs (`per`, docs/rules.md#keyed-runs) and `repeat.period`
//! (docs/rules.md#repeat), on virtual time. The keyed rule is the
//! low-charge warning of both battery slots: `battery.charge.changed`
//! carries the slot in `data.slot` and the charge in `to`.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use rulecore::bundle::{Action, Concurrency, Payload, Repeat, Rule, Step};
use rulecore::bytecode::{Builtin, Const, EventField, Op, Program};
use rulecore::event::Event;
use rulecore::topic::TopicPattern;
use ruled_engine::{
    Effect, Engine, EngineConfig, JobId, Note, Now, PendingRecord, Time, TriggerOutcome, MAX_KEYS,
};
use serde_json::json;
use std::sync::Arc;

const WALL0: i64 = 1_700_000_000_000;
const SECOND: u64 = 1_000_000_000;

/// `data.slot`
fn per_slot() -> Program {
    Program {
        ops: vec![Op::Data(0)],
    }
}

/// `int(to) < 20`
fn low() -> Program {
    Program {
        ops: vec![
            Op::Field(EventField::To),
            Op::Call(Builtin::Int, 1),
            Op::Const(1),
            Op::Lt,
        ],
    }
}

fn warn(after_ms: u64) -> Step {
    Step::new(
        Action::redis("scooter:led", "battery-low"),
        after_ms * 1_000_000,
    )
}

/// One warning per battery slot.
fn battery_low(steps: Vec<Step>) -> Rule {
    let mut rule = Rule::new(
        "battery-low",
        "20-battery.toml",
        vec![TopicPattern::parse("battery.charge.changed").unwrap()],
        steps,
    );
    rule.when = Some(Box::new(low()));
    rule.options_mut().per = Some(per_slot());
    rule.options_mut().cancel_on = vec![TopicPattern::parse("battery.all-removed").unwrap()].into();
    rule
}

fn payload(rules: Vec<Rule>) -> Payload {
    Payload::new(
        "test",
        rules,
        vec![],
        vec![Const::Path(vec!["slot".into()]), Const::Int(20)],
    )
}

/// A driver that writes what happened as `"<ms> <what>"` lines and, in
/// auto mode, performs every job at once.
struct H {
    engine: Engine,
    now: u64,
    auto: bool,
    jobs: Vec<JobId>,
    records: Vec<String>,
    lines: Vec<String>,
}

impl H {
    fn new(rule: Rule) -> Self {
        Self::with(payload(vec![rule]))
    }

    fn with(payload: Payload) -> Self {
        let config = EngineConfig {
            epoch: "t".into(),
            ..EngineConfig::default()
        };
        Self {
            engine: Engine::new(Arc::new(payload), config),
            now: 0,
            auto: true,
            jobs: Vec::new(),
            records: Vec::new(),
            lines: Vec::new(),
        }
    }

    fn at(&self) -> Now {
        Now::new(Time::from_millis(self.now), WALL0 + self.now as i64)
    }

    fn to(&mut self, ms: u64) {
        while let Some(deadline) = self.engine.next_deadline() {
            if deadline > Time::from_millis(ms) {
                break;
            }
            self.now = deadline.as_millis();
            self.engine.handle_timeout(self.at());
            self.pump();
        }
        self.now = ms;
    }

    /// A charge reading of `slot` at `ms`.
    fn charge(&mut self, ms: u64, slot: i64, charge: i64) {
        self.to(ms);
        let event = Event {
            topic: "battery.charge.changed".into(),
            id: Some(format!("{ms}").into()),
            to: Some(charge.to_string().into()),
            data: json!({ "slot": slot }).into(),
            ..Event::default()
        };
        self.engine.handle_event(self.at(), event);
        self.pump();
    }

    fn event(&mut self, ms: u64, topic: &str) {
        self.to(ms);
        let event = Event {
            topic: topic.into(),
            ..Event::default()
        };
        self.engine.handle_event(self.at(), event);
        self.pump();
    }

    /// At `ms`, the oldest job not yet performed finishes.
    fn finish_next(&mut self, ms: u64) {
        self.to(ms);
        let job = self.jobs.remove(0);
        self.engine.action_started(job);
        self.engine.action_finished(self.at(), job, Ok(()));
        self.pump();
    }

    fn pump(&mut self) {
        let mut ready = Vec::new();
        while let Some(effect) = self.engine.poll_effect() {
            let line = match effect {
                Effect::Submit(job) => {
                    let slot = (job.event.data.as_object())
                        .and_then(|data| data.get("slot"))
                        .map(|v| v.to_json().to_string());
                    let line = format!(
                        "fire slot {} p{} ({})",
                        slot.unwrap_or_default(),
                        job.pass,
                        job.event.id()
                    );
                    if self.auto {
                        ready.push(job.id);
                    } else {
                        self.jobs.push(job.id);
                    }
                    line
                }
                Effect::PutRecord { json, .. } => {
                    self.records.push(json);
                    continue;
                }
                Effect::Note(Note::Trigger { outcome, .. }) => match outcome {
                    TriggerOutcome::Suppressed => "suppressed".into(),
                    TriggerOutcome::Queued => "queued".into(),
                    TriggerOutcome::Dropped => "dropped".into(),
                    TriggerOutcome::Refused => "refused".into(),
                },
                Effect::Note(Note::RunEnd { run, reason, .. }) => {
                    format!("end {run} {}", reason.as_str())
                }
                _ => continue,
            };
            self.lines.push(format!("{} {line}", self.now));
        }
        for job in ready {
            self.engine.action_started(job);
            self.engine.action_finished(self.at(), job, Ok(()));
            self.pump();
        }
    }

    /// The lines so far, run ends left out.
    fn take(&mut self) -> Vec<String> {
        std::mem::take(&mut self.lines)
            .into_iter()
            .filter(|line| !line.contains(" end "))
            .collect()
    }
}

fn lines(list: &[&str]) -> Vec<String> {
    list.iter().map(|line| line.to_string()).collect()
}

#[test]
fn cooldown_is_per_key_the_second_slot_is_not_swallowed() {
    let mut rule = battery_low(vec![warn(0)]);
    rule.options_mut().cooldown_ns = 600 * SECOND;
    let mut h = H::new(rule);
    h.charge(0, 0, 15);
    h.charge(1_000, 1, 12);
    h.charge(2_000, 0, 14);
    h.charge(3_000, 1, 11);
    assert_eq!(
        h.take(),
        lines(&[
            "0 fire slot 0 p0 (0)",
            "1000 fire slot 1 p0 (1000)",
            "2000 suppressed",
            "3000 suppressed",
        ])
    );
    // Past slot 0's cooldown, slot 0 fires again; slot 1's still runs.
    h.charge(600_000, 0, 10);
    h.charge(600_500, 1, 10);
    assert_eq!(
        h.take(),
        lines(&["600000 fire slot 0 p0 (600000)", "600500 suppressed"])
    );
    assert_eq!(h.engine.keys_tracked(0), 2);
    let stats = h.engine.rule_stats(0).unwrap();
    assert_eq!(stats.runs_started, 3);
}

#[test]
fn a_rule_without_per_keeps_one_cooldown() {
    let mut rule = battery_low(vec![warn(0)]);
    rule.options_mut().per = None;
    rule.options_mut().cooldown_ns = 600 * SECOND;
    let mut h = H::new(rule);
    h.charge(0, 0, 15);
    h.charge(1_000, 1, 12);
    assert_eq!(
        h.take(),
        lines(&["0 fire slot 0 p0 (0)", "1000 suppressed"])
    );
    assert_eq!(h.engine.keys_tracked(0), 0);
}

#[test]
fn debounce_windows_are_per_key() {
    let mut rule = battery_low(vec![warn(0)]);
    rule.options_mut().debounce_ns = SECOND;
    let mut h = H::new(rule);
    h.charge(0, 0, 15);
    h.charge(500, 1, 12);
    h.charge(800, 0, 14);
    h.to(3_000);
    // Slot 0's window restarted at 800; slot 1's was never touched by it.
    assert_eq!(
        h.take(),
        lines(&["1500 fire slot 1 p0 (500)", "1800 fire slot 0 p0 (800)"])
    );
}

#[test]
fn for_holds_are_per_key() {
    let mut rule = battery_low(vec![warn(0)]);
    rule.options_mut().hold_ns = 5 * SECOND;
    let mut h = H::new(rule);
    h.charge(0, 0, 15);
    h.charge(1_000, 1, 12);
    // Slot 1 charges again: its hold ends, slot 0's goes on.
    h.charge(2_000, 1, 40);
    h.to(10_000);
    assert_eq!(h.take(), lines(&["5000 fire slot 0 p0 (0)"]));
    // Slot 0 fired once and stays low: no new hold until it was not low.
    h.charge(11_000, 0, 14);
    h.charge(12_000, 1, 10);
    h.to(20_000);
    assert_eq!(h.take(), lines(&["17000 fire slot 1 p0 (12000)"]));
}

#[test]
fn queue_is_per_key_another_slot_does_not_wait() {
    let mut rule = battery_low(vec![warn(0), warn(1_000)]);
    rule.concurrency = Concurrency::Queue;
    let mut h = H::new(rule);
    h.charge(0, 0, 15);
    h.charge(100, 1, 12);
    h.charge(200, 0, 14);
    h.to(5_000);
    assert_eq!(
        h.take(),
        lines(&[
            "0 fire slot 0 p0 (0)",
            "100 fire slot 1 p0 (100)",
            "200 queued",
            "1000 fire slot 0 p0 (0)",
            // Slot 0's queued trigger starts when slot 0's run ends.
            "1000 fire slot 0 p0 (200)",
            "1100 fire slot 1 p0 (100)",
            "2000 fire slot 0 p0 (200)",
        ])
    );
    assert_eq!(h.engine.counters().runs_active, 0);
}

#[test]
fn drop_is_per_key_and_live_runs_count_every_key() {
    let mut rule = battery_low(vec![warn(0), warn(1_000)]);
    rule.concurrency = Concurrency::Drop;
    let mut h = H::new(rule);
    h.charge(0, 0, 15);
    h.charge(100, 1, 12);
    h.charge(200, 0, 14);
    assert_eq!(h.engine.counters().runs_active, 2);
    assert_eq!(h.engine.live_runs().count(), 2);
    assert_eq!(
        h.take(),
        lines(&[
            "0 fire slot 0 p0 (0)",
            "100 fire slot 1 p0 (100)",
            "200 dropped"
        ])
    );
}

#[test]
fn cancel_on_ends_the_runs_of_every_key() {
    let rule = battery_low(vec![warn(0), warn(10_000)]);
    let mut h = H::new(rule);
    h.charge(0, 0, 15);
    h.charge(100, 1, 12);
    h.event(200, "battery.all-removed");
    h.to(20_000);
    let all = std::mem::take(&mut h.lines);
    let cancelled = all.iter().filter(|l| l.ends_with(" cancelled")).count();
    assert_eq!(cancelled, 2, "{all:?}");
    assert_eq!(h.engine.counters().runs_active, 0);
    assert_eq!(h.engine.counters().pending, 0);
}

#[test]
fn the_65th_key_forgets_the_idle_key_used_longest_ago() {
    let mut rule = battery_low(vec![warn(0)]);
    rule.options_mut().cooldown_ns = 3_600 * SECOND;
    let mut h = H::new(rule);
    let keys = MAX_KEYS as i64;
    for slot in 0..keys {
        h.charge(slot as u64 * 10, slot, 10);
    }
    assert_eq!(h.engine.keys_tracked(0), MAX_KEYS);
    assert_eq!(h.engine.counters().keys_forgotten, 0);
    h.take();
    // The 65th: slot 0 (idle longest) is forgotten to make room.
    h.charge(1_000, keys, 10);
    assert_eq!(h.engine.keys_tracked(0), MAX_KEYS);
    assert_eq!(h.engine.counters().keys_forgotten, 1);
    // Slot 2 is still tracked: its cooldown holds. Slot 0 was forgotten
    // with its cooldown, so it fires (forgetting slot 1 for room).
    h.charge(2_000, 2, 10);
    h.charge(3_000, 0, 10);
    assert_eq!(h.engine.counters().keys_forgotten, 2);
    h.charge(4_000, 1, 10);
    assert_eq!(
        h.take(),
        lines(&[
            "1000 fire slot 64 p0 (1000)",
            "2000 suppressed",
            "3000 fire slot 0 p0 (3000)",
            "4000 fire slot 1 p0 (4000)",
        ])
    );
    // The forgotten keys' runs still count in the rule's statistics.
    assert_eq!(h.engine.rule_stats(0).unwrap().runs_started, 67);
}

#[test]
fn with_every_key_busy_a_new_key_is_refused_and_counted() {
    let rule = battery_low(vec![warn(0), warn(60_000)]);
    let mut h = H::new(rule);
    for slot in 0..MAX_KEYS as i64 {
        h.charge(slot as u64, slot, 10);
    }
    h.take();
    h.charge(1_000, 99, 10);
    assert_eq!(h.take(), lines(&["1000 refused"]));
    let counters = h.engine.counters();
    assert_eq!((counters.refused, counters.keys_forgotten), (1, 0));
    assert_eq!(counters.runs_active, MAX_KEYS as u64);
    // Once runs end, their keys are idle and can be forgotten.
    h.to(70_000);
    h.charge(70_000, 99, 10);
    assert_eq!(h.take().last().unwrap(), "70000 fire slot 99 p0 (70000)");
    assert_eq!(h.engine.counters().keys_forgotten, 1);
}

/// `battery_low` with a warning at once and a durable one 30 s later,
/// `concurrency = "drop"`: the rule of the replay tests.
fn durable_drop_rule() -> Rule {
    let mut step = warn(30_000);
    step.durable = true;
    let mut rule = battery_low(vec![warn(0), step]);
    rule.concurrency = Concurrency::Drop;
    rule
}

#[test]
fn a_durable_record_carries_its_key_and_replay_puts_the_run_back_on_it() {
    let rule = durable_drop_rule();
    let mut h = H::new(rule.clone());
    h.charge(0, 1, 12);
    let record = PendingRecord::decode(h.records.last().unwrap().as_bytes()).unwrap();
    assert_eq!(record.key.as_deref(), Some("1"));
    h.engine.stop();

    // The next start: the record resumes on slot 1's key.
    let mut next = H::with(payload(vec![rule]));
    next.to(10_000);
    let now = next.at();
    next.engine.replay(now, vec![record]);
    next.pump();
    next.charge(11_000, 1, 10);
    next.charge(12_000, 0, 10);
    next.to(40_000);
    assert_eq!(
        next.take(),
        lines(&[
            "11000 dropped",
            "12000 fire slot 0 p0 (12000)",
            "30000 fire slot 1 p0 (0)",
        ])
    );
}

#[test]
fn replay_keeps_one_record_per_rule_and_key() {
    let rule = durable_drop_rule();
    let mut h = H::new(rule.clone());
    h.charge(0, 1, 12);
    h.charge(1_000, 2, 12);
    let mut records: Vec<PendingRecord> = (h.records.iter())
        .map(|json| PendingRecord::decode(json.as_bytes()).unwrap())
        .collect();
    assert_eq!(records.len(), 2);
    // A later record of slot 1's key competes with the first; `drop`
    // keeps the first of each key.
    let mut later = records[0].clone();
    later.id = format!("{}9", later.id);
    later.fire_at += 5_000;
    records.push(later);
    h.engine.stop();

    let mut next = H::with(payload(vec![rule]));
    next.to(10_000);
    let now = next.at();
    next.engine.replay(now, records);
    next.pump();
    next.to(40_000);
    // Slot 1's first record (its event at 0 s), not the later one due
    // at 35 s; slot 2's own.
    assert_eq!(
        next.take(),
        lines(&["30000 fire slot 1 p0 (0)", "31000 fire slot 2 p0 (1000)"])
    );
}

#[test]
fn an_old_record_without_a_key_resumes_on_the_empty_key() {
    let json = r#"{"id":"battery-low#old-1","rule":"battery-low","source":"20-battery.toml","step":1,"iter":0,"fire-at":1700000005000,"fingerprint":"FP","event":{"id":"old-event","topic":"battery.charge.changed","to":"12","data":{"slot":1}}}"#;
    let mut step = warn(30_000);
    step.durable = true;
    let rule = battery_low(vec![warn(0), step]);
    let payload = payload(vec![rule]);
    let fingerprint = payload.rules[0].steps[1].fingerprint.to_string();
    let json = json.replace("FP", &fingerprint);
    let record = PendingRecord::decode(json.as_bytes()).unwrap();
    assert_eq!(record.key, None);
    let mut h = H::with(payload);
    let now = h.at();
    h.engine.replay(now, vec![record]);
    h.pump();
    h.to(10_000);
    assert_eq!(h.take(), lines(&["5000 fire slot 1 p0 (old-event)"]));
}

// ----- repeat.period ---------------------------------------------------

fn pulser(repeat: Repeat) -> Rule {
    let mut rule = Rule::new(
        "horn-pulse",
        "10-alarm.toml",
        vec![TopicPattern::parse("alarm.triggered").unwrap()],
        vec![
            Step::new(Action::redis("scooter:horn", "on"), 0),
            Step::new(Action::redis("scooter:horn", "off"), 300_000_000),
        ],
    );
    rule.options_mut().repeat = repeat;
    rule
}

/// The ms at which each pass started (its first step submitted).
fn pass_starts(h: &mut H) -> Vec<u64> {
    h.take()
        .iter()
        .filter(|line| line.contains(" fire "))
        .step_by(2)
        .map(|line| line.split(' ').next().unwrap().parse().unwrap())
        .collect()
}

#[test]
fn period_starts_a_pass_every_period_every_pauses_after_one() {
    let mut h = H::new(pulser(Repeat::period(4, SECOND)));
    h.event(0, "alarm.triggered");
    h.to(10_000);
    assert_eq!(pass_starts(&mut h), vec![0, 1_000, 2_000, 3_000]);

    let mut h = H::new(pulser(Repeat::every(4, SECOND)));
    h.event(0, "alarm.triggered");
    h.to(10_000);
    // `every` is the pause after a pass that lasts 300 ms.
    assert_eq!(pass_starts(&mut h), vec![0, 1_300, 2_600, 3_900]);
}

#[test]
fn a_pass_longer_than_the_period_is_followed_at_once_then_on_the_beat() {
    let mut h = H::new(pulser(Repeat::period(4, SECOND)));
    h.auto = false;
    h.event(0, "alarm.triggered");
    // Pass 0: the horn's `on` takes 1.5 s, longer than the period.
    h.finish_next(1_500);
    h.finish_next(1_800);
    // Pass 1 starts at once (1.8 s), never overlapping pass 0.
    h.finish_next(1_810);
    h.finish_next(2_120);
    // Pass 2: one period after pass 1 started.
    h.finish_next(2_800);
    h.finish_next(3_100);
    h.to(3_800);
    assert_eq!(
        h.take(),
        lines(&[
            "0 fire slot  p0 ()",
            "1800 fire slot  p0 ()",
            "1800 fire slot  p1 ()",
            "2110 fire slot  p1 ()",
            "2800 fire slot  p2 ()",
            "3100 fire slot  p2 ()",
            "3800 fire slot  p3 ()",
        ])
    );
}

/// A reload keeps every key's due step that waits for room in the pool
/// (docs/semantics.md#due-steps-the-pool-refused), not only the one of
/// the key in the rule's slot: each is submitted when the pool has room.
#[test]
fn a_reload_keeps_every_keys_step_waiting_for_room() {
    let mut h = H::new(battery_low(vec![warn(1_000)]));
    h.auto = false;
    h.charge(0, 0, 10);
    h.charge(10, 1, 10);
    h.to(1_010);
    let refused = std::mem::take(&mut h.jobs);
    assert_eq!(refused.len(), 2, "{:?}", h.lines);
    for job in refused {
        h.engine.action_refused(h.at(), job);
        h.pump();
    }
    assert_eq!(h.engine.due_backlog_len(), 2);
    // A bundle with one more rule: the keyed rule's runs continue.
    let other = Rule::new(
        "other",
        "30-other.toml",
        vec![TopicPattern::parse("x.other").unwrap()],
        vec![warn(0)],
    );
    let again = payload(vec![battery_low(vec![warn(1_000)]), other]);
    let summary = h.engine.reload(Arc::new(again), h.at());
    assert_eq!((summary.runs_kept, summary.runs_ended), (2, 0));
    h.pump();
    assert_eq!(h.engine.due_backlog_len(), 2, "both keys' steps still wait");
    let room = ruled_engine::pool::Room {
        workers: 8,
        lane: 8,
    };
    h.engine.pool_has_room(h.at(), room);
    h.pump();
    assert_eq!(h.jobs.len(), 2, "both submitted: {:?}", h.lines);
}

/// `v1.pending` and `v1.show` see every key's run, not only the run of
/// the key in the rule's slot; `v1.show` lists at most `KEYS_SHOWN` keys
/// with the count of all.
#[test]
fn the_views_show_every_keys_run_bounded() {
    let mut h = H::new(battery_low(vec![warn(60_000)]));
    for slot in 0..10 {
        h.charge(slot as u64 * 10, slot, 10);
    }
    let waiting = h.engine.waiting_steps(h.at());
    assert_eq!(waiting.len(), 10, "{waiting:?}");
    let view = h.engine.rule_view("battery-low", h.at()).unwrap();
    assert_eq!((view.keys_with_runs, view.keys_waiting), (10, 10));
    assert_eq!(view.keys.len(), ruled_engine::KEYS_SHOWN);
    // The key in the slot first (the last one used), its run the view's.
    assert_eq!(&*view.keys[0].key, "9");
    assert_eq!(Some(&view.keys[0].run), view.run.as_ref());
    let mut keys: Vec<&str> = view.keys.iter().map(|key| &*key.key).collect();
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys.len(), ruled_engine::KEYS_SHOWN, "distinct keys");
    // A rule without `per` lists no keys.
    let mut plain = battery_low(vec![warn(60_000)]);
    plain.options_mut().per = None;
    let mut h = H::new(plain);
    h.charge(0, 0, 10);
    let view = h.engine.rule_view("battery-low", h.at()).unwrap();
    assert!(view.keys.is_empty() && view.keys_with_runs == 0 && view.run.is_some());
}

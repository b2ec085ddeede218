//! Hold, a rule's `for` (docs/semantics.md#hold): one test per sentence of
//! the specification, on virtual time. The rule is the battery warning:
//! `int(data.charge) < 20` (or the same on `state("battery:0", "charge")`)
//! must stay true for 5 s.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use rulecore::bundle::{Action, Payload, Rule, StatePair, Step};
use rulecore::bytecode::{Builtin, Const, Op, Program};
use rulecore::event::Event;
use rulecore::topic::TopicPattern;
use ruled_engine::{
    Effect, Engine, EngineConfig, HoldView, Note, Now, RunningHold, Time, TriggerOutcome, Verdict,
};
use serde_json::json;
use std::sync::Arc;

const WALL0: i64 = 1_700_000_000_000;
const FOR_NS: u64 = 5_000_000_000;

/// `int(data.charge) < 20`
fn data_low() -> Program {
    Program {
        ops: vec![Op::Data(0), Op::Call(Builtin::Int, 1), Op::Const(1), Op::Lt],
    }
}

/// `int(state("battery:0", "charge")) < 20`
fn state_low() -> Program {
    Program {
        ops: vec![
            Op::State(0),
            Op::Call(Builtin::Int, 1),
            Op::Const(1),
            Op::Lt,
        ],
    }
}

fn battery(when: Program) -> Rule {
    let step = Step::new(Action::redis("scooter:led", "battery-low"), 0);
    let mut rule = Rule::new(
        "battery-low",
        "test.toml",
        vec![TopicPattern::parse("battery.charge.changed").unwrap()],
        vec![step],
    );
    rule.when = Some(Box::new(when));
    rule.options_mut().hold_ns = FOR_NS;
    rule.options_mut().cancel_on = vec![TopicPattern::parse("battery.removed").unwrap()].into();
    rule
}

/// A driver that performs every job at once and records what happened as
/// `"<ms> <what>"` lines: `fire <event id>`, `suppressed`.
struct H {
    engine: Engine,
    now: u64,
    lines: Vec<String>,
}

impl H {
    fn new(rule: Rule) -> Self {
        let payload = Payload::new(
            "test",
            vec![rule],
            vec![StatePair {
                hash: "battery:0".into(),
                field: "charge".into(),
            }],
            vec![Const::Path(vec!["charge".into()]), Const::Int(20)],
        );
        Self {
            engine: Engine::new(Arc::new(payload), EngineConfig::default()),
            now: 0,
            lines: Vec::new(),
        }
    }

    fn at(&self) -> Now {
        Now::new(Time::from_millis(self.now), WALL0 + self.now as i64)
    }

    /// Moves virtual time to `ms`, firing deadlines on the way.
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

    /// A reading at `ms`: `charge` as JSON (a number, or text for errors).
    fn reading(&mut self, ms: u64, charge: serde_json::Value) {
        self.to(ms);
        let event = Event {
            topic: "battery.charge.changed".into(),
            id: Some(format!("{ms}").into()),
            data: json!({ "charge": charge }).into(),
            ..Event::default()
        };
        self.engine.handle_event(self.at(), event);
        self.pump();
    }

    fn event(&mut self, ms: u64, topic: &str) {
        self.to(ms);
        let event = Event {
            topic: topic.into(),
            id: Some(format!("{ms}").into()),
            ..Event::default()
        };
        self.engine.handle_event(self.at(), event);
        self.pump();
    }

    fn state(&mut self, ms: u64, charge: &str) {
        self.to(ms);
        assert!(self.engine.set_state("battery:0", "charge", charge.into()));
        self.pump();
    }

    fn pump(&mut self) {
        let mut jobs = Vec::new();
        while let Some(effect) = self.engine.poll_effect() {
            match effect {
                Effect::Submit(job) => {
                    self.lines
                        .push(format!("{} fire {}", self.now, job.event.id()));
                    jobs.push(job.id);
                }
                Effect::Note(Note::Trigger {
                    outcome: TriggerOutcome::Suppressed,
                    ..
                }) => self.lines.push(format!("{} suppressed", self.now)),
                _ => {}
            }
        }
        for job in jobs {
            self.engine.action_started(job);
            let now = self.at();
            self.engine.action_finished(now, job, Ok(()));
            self.pump();
        }
    }

    fn take(&mut self) -> Vec<String> {
        std::mem::take(&mut self.lines)
    }
}

fn lines(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[test]
fn a_reading_every_2s_that_stays_low_fires_once_at_for_with_the_latest_event() {
    let mut h = H::new(battery(data_low()));
    for ms in [0, 2_000, 4_000] {
        h.reading(ms, json!(19));
    }
    assert_eq!(h.engine.counters().pending, 1, "the hold is one timer");
    h.to(4_999);
    assert!(h.take().is_empty());
    // Further true events replaced the held event but not the clock.
    h.to(5_000);
    assert_eq!(h.take(), lines(&["5000 fire 4000"]));
    for ms in (6_000..=30_000).step_by(2_000) {
        h.reading(ms, json!(18));
    }
    h.to(60_000);
    assert!(h.take().is_empty(), "a battery that stays low fires once");
    assert_eq!(h.engine.counters().pending, 0);
}

#[test]
fn a_recovery_inside_the_window_does_not_fire() {
    let mut h = H::new(battery(data_low()));
    h.reading(0, json!(19));
    h.reading(2_000, json!(80));
    h.reading(4_000, json!(80));
    h.to(20_000);
    assert!(h.take().is_empty());
    assert_eq!(h.engine.counters().pending, 0);
    // Low again: a new hold, from that event.
    h.reading(21_000, json!(19));
    h.to(30_000);
    assert_eq!(h.take(), lines(&["26000 fire 21000"]));
}

#[test]
fn a_when_error_ends_the_hold_and_re_arms() {
    let mut h = H::new(battery(data_low()));
    h.reading(0, json!(19));
    h.reading(1_000, json!("n/a"));
    h.to(10_000);
    assert!(h.take().is_empty());
    assert_eq!(h.engine.rule_stats(0).unwrap().errors, 1);
    h.reading(11_000, json!(19));
    h.to(16_000);
    assert_eq!(h.take(), lines(&["16000 fire 11000"]));
}

#[test]
fn a_state_change_that_makes_when_false_ends_the_hold() {
    let mut h = H::new(battery(state_low()));
    h.state(0, "19");
    h.event(0, "battery.charge.changed");
    h.state(2_000, "80");
    assert_eq!(h.engine.counters().pending, 0, "the hold ended at once");
    h.to(20_000);
    assert!(h.take().is_empty());
    // A change that keeps `when` true does not end it.
    h.state(21_000, "15");
    h.event(21_000, "battery.charge.changed");
    h.state(23_000, "12");
    h.to(30_000);
    assert_eq!(h.take(), lines(&["26000 fire 21000"]));
}

#[test]
fn only_a_matching_event_starts_a_hold() {
    let mut h = H::new(battery(state_low()));
    h.state(0, "19");
    h.state(1_000, "18");
    h.to(20_000);
    assert!(h.take().is_empty());
    assert_eq!(h.engine.counters().pending, 0);
    h.event(20_000, "battery.charge.changed");
    h.to(25_000);
    assert_eq!(h.take(), lines(&["25000 fire 20000"]));
}

#[test]
fn after_a_fire_a_false_event_re_arms_the_rule() {
    let mut h = H::new(battery(data_low()));
    h.reading(0, json!(19));
    h.to(5_000);
    h.reading(6_000, json!(19));
    h.reading(8_000, json!(80));
    h.reading(10_000, json!(19));
    h.to(20_000);
    assert_eq!(h.take(), lines(&["5000 fire 0", "15000 fire 10000"]));
}

#[test]
fn after_a_fire_a_state_change_that_makes_when_false_re_arms_the_rule() {
    let mut h = H::new(battery(state_low()));
    h.state(0, "19");
    h.event(0, "battery.charge.changed");
    h.to(5_000);
    h.event(6_000, "battery.charge.changed");
    h.to(12_000);
    assert_eq!(h.take(), lines(&["5000 fire 0"]));
    // Charged (false for the last held event), then low again.
    h.state(13_000, "90");
    h.state(14_000, "10");
    h.event(14_000, "battery.charge.changed");
    h.to(20_000);
    assert_eq!(h.take(), lines(&["19000 fire 14000"]));
}

#[test]
fn a_cancel_on_event_ends_a_hold_and_re_arms_a_rule_that_fired() {
    let mut h = H::new(battery(data_low()));
    h.reading(0, json!(19));
    h.event(2_000, "battery.removed");
    h.to(10_000);
    assert!(
        h.take().is_empty(),
        "the cancel ended the hold without firing"
    );
    assert_eq!(h.engine.counters().pending, 0);
    h.reading(10_000, json!(19));
    h.to(15_000);
    assert_eq!(h.take(), lines(&["15000 fire 10000"]));
    // Still low, but a cancel re-arms at once: the next low reading holds.
    h.event(16_000, "battery.removed");
    h.reading(17_000, json!(19));
    h.to(30_000);
    assert_eq!(h.take(), lines(&["22000 fire 17000"]));
}

#[test]
fn a_hold_suppressed_by_cooldown_still_counts_as_a_fire() {
    let mut rule = battery(data_low());
    rule.options_mut().cooldown_ns = 60_000_000_000;
    let mut h = H::new(rule);
    h.reading(0, json!(19));
    h.to(5_000);
    h.reading(6_000, json!(80));
    h.reading(7_000, json!(19));
    h.to(12_000);
    assert_eq!(h.take(), lines(&["5000 fire 0", "12000 suppressed"]));
    // Suppressed, yet completed: still low does not hold again.
    h.reading(13_000, json!(19));
    h.to(40_000);
    assert!(h.take().is_empty());
}

#[test]
fn a_restart_re_arms_and_a_stop_drops_the_hold() {
    let mut h = H::new(battery(data_low()));
    h.reading(0, json!(19));
    h.to(5_000);
    assert_eq!(h.take(), lines(&["5000 fire 0"]));
    // A new engine (a restart) holds nothing: the next low reading holds.
    let mut restarted = H::new(battery(data_low()));
    restarted.reading(6_000, json!(19));
    restarted.to(11_000);
    assert_eq!(restarted.take(), lines(&["11000 fire 6000"]));
    // A stop drops a running hold with the other timers.
    h.reading(6_000, json!(80));
    h.reading(7_000, json!(19));
    assert_eq!(h.engine.counters().pending, 1);
    h.engine.stop();
    assert_eq!(h.engine.counters().pending, 0);
    assert_eq!(h.engine.next_deadline(), None);
}

#[test]
fn without_for_a_rule_fires_on_every_true_event() {
    let mut rule = battery(data_low());
    rule.options_mut().hold_ns = 0;
    let mut h = H::new(rule);
    h.reading(0, json!(19));
    h.reading(2_000, json!(19));
    assert_eq!(h.take(), lines(&["0 fire 0", "2000 fire 2000"]));
}

/// A reading as `v1.test` is given it.
fn low_event() -> Event {
    Event {
        topic: "battery.charge.changed".into(),
        data: json!({ "charge": 19 }).into(),
        ..Event::default()
    }
}

#[test]
fn a_running_hold_is_reported_with_its_time_left_and_a_dry_run_says_it_runs() {
    let mut h = H::new(battery(data_low()));
    let verdict = |h: &H, event: &Event| {
        h.engine
            .dry_run("battery-low", event, h.at())
            .unwrap()
            .verdict
    };
    assert_eq!(verdict(&h, &low_event()), Verdict::Hold { for_ms: 5_000 });
    assert_eq!(
        h.engine.rule_view("battery-low", h.at()).unwrap().hold,
        None
    );
    h.reading(0, json!(19));
    h.to(2_000);
    let running = HoldView::Running {
        due_ms: WALL0 + 5_000,
        left_ms: 3_000,
    };
    assert_eq!(
        h.engine.rule_view("battery-low", h.at()).unwrap().hold,
        Some(running)
    );
    assert_eq!(
        h.engine.running_holds(h.at()),
        vec![RunningHold {
            rule: "battery-low".into(),
            due_ms: WALL0 + 5_000,
            left_ms: 3_000,
        }]
    );
    assert_eq!(
        verdict(&h, &low_event()),
        Verdict::Holding {
            for_ms: 5_000,
            left_ms: 3_000
        }
    );
    // A later true event keeps the clock: still due at 5 s.
    h.reading(4_000, json!(18));
    assert_eq!(
        verdict(&h, &low_event()),
        Verdict::Holding {
            for_ms: 5_000,
            left_ms: 1_000
        }
    );
    // A cancel-on event would end it first: a new hold would start.
    let mut cancel = low_event();
    cancel.topic = "battery.removed".into();
    assert!(
        h.engine
            .dry_run("battery-low", &cancel, h.at())
            .unwrap()
            .cancels
    );
    // Fired: not running, and no new hold until `when` is false once.
    h.to(5_000);
    assert_eq!(h.take(), lines(&["5000 fire 4000"]));
    assert_eq!(
        h.engine.rule_view("battery-low", h.at()).unwrap().hold,
        Some(HoldView::Fired)
    );
    assert!(h.engine.running_holds(h.at()).is_empty());
    assert_eq!(verdict(&h, &low_event()), Verdict::HoldFired);
    // Nothing changed by asking.
    h.to(20_000);
    assert!(h.take().is_empty());
    h.reading(21_000, json!(80));
    assert_eq!(
        h.engine.rule_view("battery-low", h.at()).unwrap().hold,
        None
    );
    assert_eq!(verdict(&h, &low_event()), Verdict::Hold { for_ms: 5_000 });
}

#[test]
fn a_cancel_in_the_dry_run_ends_a_fired_hold_first() {
    let mut rule = battery(data_low());
    // The same topic both matches and cancels.
    rule.options_mut().cancel_on =
        vec![TopicPattern::parse("battery.charge.changed").unwrap()].into();
    let mut h = H::new(rule);
    h.reading(0, json!(19));
    h.to(1_000);
    let dry = h
        .engine
        .dry_run("battery-low", &low_event(), h.at())
        .unwrap();
    assert!(dry.cancels);
    assert_eq!(dry.verdict, Verdict::Hold { for_ms: 5_000 });
}

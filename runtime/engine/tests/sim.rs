//! The simulator (docs/simulation.md): ordering at one instant, restarts, the
//! virtual pool, failures, clock jumps.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use rulecore::bundle::{Action, Repeat, Rule, Step};
use rulecore::bytecode::{Op, Program};
use ruled_engine::sim::{parse, simulate, LineKind, LineReason, Outcome, Timeline};
use ruled_engine::{EndReason, NoteReason};
use std::sync::Arc;

mod support;
use support::{go, pats, payload, push};

/// The hazards rule of README.md#what-this-is: `both` now, `off` 30 s later.
fn hazards() -> Rule {
    hazards_pushing("off")
}

/// hazards with step 1 changed (as in fixtures/rules-changed): its
/// fingerprint differs from [`hazards`]'s.
fn hazards_changed() -> Rule {
    hazards_pushing("left")
}

fn hazards_pushing(later: &str) -> Rule {
    let mut rule = Rule::new(
        "hazards",
        "hazards.toml",
        pats(&["alarm.triggered"]),
        vec![push("both", 0), push(later, 30_000)],
    );
    rule.options_mut().cancel_on = pats(&["alarm.disarmed"]).into();
    rule
}

/// Simulates `timeline` (TOML) against `rules` (and `after` from the
/// first restart on).
/// Every simulation ends with exactly one `end` line; this checks it and
/// leaves it out, for the tests about everything before it.
fn run(rules: Vec<Rule>, timeline: impl AsRef<str>, after: Option<Vec<Rule>>) -> Outcome {
    let mut out = run_keeping_end(rules, timeline, after);
    let last = out.lines.pop().unwrap();
    assert_eq!(last.kind, LineKind::End, "{}", last.to_text());
    assert!(out.lines.iter().all(|l| l.kind != LineKind::End));
    out
}

/// [`run`] with the `end` line.
fn run_keeping_end(
    rules: Vec<Rule>,
    timeline: impl AsRef<str>,
    after: Option<Vec<Rule>>,
) -> Outcome {
    let timeline: Timeline = parse(timeline.as_ref()).unwrap();
    simulate(payload(rules), &timeline, after.map(payload)).unwrap()
}

fn text(outcome: &Outcome) -> Vec<String> {
    outcome
        .lines
        .iter()
        .map(|l| {
            let t = l.to_text();
            t.split_whitespace().collect::<Vec<_>>().join(" ")
        })
        .collect()
}

fn kinds(outcome: &Outcome) -> Vec<String> {
    outcome
        .lines
        .iter()
        .map(|l| format!("{} {}", l.at_ms, l.kind))
        .collect()
}

#[test]
fn hazards_pushes_both_then_off_thirty_seconds_later() {
    let out = run(
        vec![hazards()],
        r#"
        [[event]]
        at = "0s"
        topic = "alarm.triggered"
        "#,
        None,
    );
    assert_eq!(
        text(&out),
        [
            "0 ms run-start rule=hazards run=hazards#0-1",
            "0 ms action rule=hazards step=0 pass=0 action=redis list=scooter:blinker push=both run=hazards#0-1",
            "0 ms record-put rule=hazards step=1 pass=0 run=hazards#0-1",
            "30000 ms record-drop rule=hazards run=hazards#0-1 reason=started",
            "30000 ms action rule=hazards step=1 pass=0 action=redis list=scooter:blinker push=off run=hazards#0-1",
            "30000 ms run-end rule=hazards run=hazards#0-1 reason=done",
        ]
    );
    assert_eq!(
        out.lines[1].to_json(),
        r#"{"at_ms":0,"kind":"action","rule":"hazards","step":0,"pass":0,"action":"redis","list":"scooter:blinker","push":"both","run":"hazards#0-1"}"#
    );
    assert!(out.records.is_empty());
}

#[test]
fn a_restart_while_waiting_keeps_the_record_and_off_still_comes_at_30s() {
    let out = run(
        vec![hazards()],
        r#"
        [[event]]
        at = "0s"
        topic = "alarm.triggered"
        [[restart]]
        at = "10s"
        down = "5s"
        [[event]]
        at = "12s"
        topic = "alarm.disarmed"
        "#,
        None,
    );
    assert_eq!(
        kinds(&out)[3..],
        [
            "10000 restart",
            "10000 run-end",
            "15000 replay-resume",
            "30000 record-drop",
            "30000 action",
            "30000 run-end",
        ],
        "the disarm at 12s was lost while down: {:?}",
        text(&out)
    );
    assert_eq!(out.lines[5].run.as_deref(), Some("hazards#0-1"));
    assert_eq!(
        out.lines[4].reason,
        Some(LineReason::Note(NoteReason::RunEnd(EndReason::Stopped)))
    );
}

#[test]
fn changed_rules_after_a_restart_drop_the_record_by_fingerprint() {
    let out = run(
        vec![hazards()],
        r#"
        [[event]]
        at = "0s"
        topic = "alarm.triggered"
        [[restart]]
        at = "10s"
        down = "5s"
        "#,
        Some(vec![hazards_changed()]),
    );
    let t = text(&out);
    assert_eq!(
        t[t.len() - 2..],
        [
            "15000 ms replay-drop rule=hazards step=1 pass=0 run=hazards#0-1 reason=fingerprint",
            "15000 ms record-drop rule=hazards run=hazards#0-1 reason=fingerprint",
        ]
    );
}

#[test]
fn same_instant_order_is_clock_state_fail_restart_event_after_due_deadlines() {
    let mut gated = go("gated", vec![push("x", 0)]);
    gated.when = Some(Box::new(Program {
        ops: vec![Op::State(0), Op::Const(0), Op::Eq],
    }));
    // The event is listed first but the state at the same instant applies
    // before it; the fail too.
    let out = run(
        vec![gated],
        r#"
        [[event]]
        at = "1s"
        topic = "go"
        [[fail]]
        at = "1s"
        rule = "gated"
        [[state]]
        at = "1s"
        hash = "vehicle"
        field = "state"
        value = "parked"
        "#,
        None,
    );
    assert_eq!(
        kinds(&out),
        [
            "1000 run-start",
            "1000 action",
            "1000 action-failed",
            "1000 run-end"
        ]
    );
    assert_eq!(
        out.lines[3].reason,
        Some(LineReason::Note(NoteReason::RunEnd(EndReason::Failed)))
    );
}

#[test]
fn deadlines_due_at_an_entry_come_before_it() {
    // off is due at 30s; a disarm at exactly 30s comes after it.
    let out = run(
        vec![hazards()],
        r#"
        [[event]]
        at = "0s"
        topic = "alarm.triggered"
        [[event]]
        at = "30s"
        topic = "alarm.disarmed"
        "#,
        None,
    );
    assert!(text(&out).iter().any(|l| l.contains("push=off")));
}

#[test]
fn state_changes_while_down_are_read_at_start() {
    let mut r = hazards();
    Arc::make_mut(&mut r.steps)[1].when = Some(Program {
        ops: vec![Op::State(0), Op::Const(0), Op::Eq],
    });
    let out = run(
        vec![r],
        r#"
        [[event]]
        at = "0s"
        topic = "alarm.triggered"
        [[restart]]
        at = "5s"
        down = "5s"
        [[state]]
        at = "7s"
        hash = "vehicle"
        field = "state"
        value = "parked"
        "#,
        None,
    );
    assert!(
        text(&out).iter().any(|l| l.contains("push=off")),
        "{:?}",
        text(&out)
    );
}

/// A durable `exec` step `after_ms` after the trigger (an `exec` takes a
/// worker; a `redis` step goes to the Redis lane).
fn exec_after(after_ms: u64) -> Step {
    let action = Arc::unwrap_or_clone(exec("/bin/true").action);
    Step::new(action, after_ms * 1_000_000)
}

#[test]
fn a_busy_pool_queues_then_the_refused_durable_steps_wait_and_run_in_order() {
    let rules = (0..4)
        .map(|n| go(&format!("r{n}"), vec![exec_after(1_000)]))
        .collect();
    let out = run(
        rules,
        r#"
        workers = 1
        queue = 1
        action-time = "2s"
        [[event]]
        at = "0s"
        topic = "go"
        "#,
        None,
    );
    let t = text(&out);
    // r0 runs, r1 waits in the queue, r2 and r3 wait in the due backlog
    // with their records, and each runs as soon as the pool has room.
    assert!(!t.iter().any(|l| l.contains("reason=refused")), "{t:?}");
    let waits: Vec<_> = t.iter().filter(|l| l.contains("due-wait")).collect();
    assert_eq!(waits.len(), 2, "{t:?}");
    let actions: Vec<_> = t
        .iter()
        .filter(|l| l.contains(" action "))
        .map(|l| l.split(" run=").nth(1).unwrap_or_default())
        .collect();
    assert_eq!(actions, ["r0#0-1", "r1#0-2", "r2#0-3", "r3#0-4"]);
    assert!(
        t.iter()
            .any(|l| l.starts_with("7000 ms action rule=r3 ") && l.ends_with("run=r3#0-4")),
        "{t:?}"
    );
    assert!(out.records.is_empty(), "every step ran");
}

/// `redis` steps take no worker: the Redis lane holds as many as the
/// workers and their queue (here 2), running at once; the rest wait in the
/// due backlog, earliest first, and go together when the lane has room.
#[test]
fn redis_steps_go_to_the_lane_and_the_rest_wait_for_its_room() {
    let rules = (0..5)
        .map(|n| go(&format!("r{n}"), vec![push("on", 1_000)]))
        .collect();
    let out = run(
        rules,
        r#"
        workers = 1
        queue = 1
        action-time = "2s"
        [[event]]
        at = "0s"
        topic = "go"
        "#,
        None,
    );
    let t = text(&out);
    let at = |run: &str| {
        t.iter()
            .find(|l| l.contains(" action ") && l.ends_with(run))
            .and_then(|l| l.split(' ').next())
            .unwrap_or_default()
            .to_string()
    };
    let starts: Vec<String> = (1..=5)
        .map(|n| at(&format!("run=r{}#0-{n}", n - 1)))
        .collect();
    assert_eq!(starts, ["1000", "1000", "3000", "3000", "5000"], "{t:?}");
    let waits = t.iter().filter(|l| l.contains("due-wait")).count();
    assert!(waits >= 3, "{t:?}");
    assert!(out.records.is_empty(), "every step ran");
}

#[test]
fn a_queued_step_abandoned_at_restart_keeps_its_record_and_is_replayed() {
    let rules = (0..2)
        .map(|n| go(&format!("r{n}"), vec![exec_after(1_000)]))
        .collect();
    let out = run(
        rules,
        r#"
        workers = 1
        action-time = "5s"
        [[event]]
        at = "0s"
        topic = "go"
        [[restart]]
        at = "2s"
        down = "1s"
        "#,
        None,
    );
    let t = text(&out);
    assert!(
        t.contains(&"3000 ms replay-resume rule=r1 step=0 pass=0 run=r1#0-2".to_string()),
        "{t:?}"
    );
    assert!(
        t.iter()
            .any(|l| l.starts_with("3000 ms action rule=r1 ") && l.ends_with("run=r1#0-2")),
        "{t:?}"
    );
}

#[test]
fn a_clock_jumped_backwards_across_a_restart_drops_as_too_early() {
    let out = run(
        vec![hazards()],
        r#"
        [[event]]
        at = "0s"
        topic = "alarm.triggered"
        [[restart]]
        at = "10s"
        down = "5s"
        [[clock]]
        at = "12s"
        jump = "-1h"
        "#,
        None,
    );
    assert!(text(&out).contains(
        &"15000 ms replay-drop rule=hazards step=1 pass=0 run=hazards#0-1 reason=too-early"
            .to_string()
    ));
}

#[test]
fn a_long_outage_drops_as_too_late_and_end_stops_early() {
    let out = run(
        vec![hazards()],
        r#"
        replay-window = "-5m"
        [[event]]
        at = "0s"
        topic = "alarm.triggered"
        [[restart]]
        at = "10s"
        down = "25s"
        "#,
        None,
    );
    assert!(text(&out).iter().any(|l| l.contains("reason=too-late")));
    let out = run_keeping_end(
        vec![hazards()],
        r#"
        end = "10s"
        [[event]]
        at = "0s"
        topic = "alarm.triggered"
        "#,
        None,
    );
    // The off step still waits at `end`: one `end` line says so.
    let lines = text(&out);
    assert_eq!(
        lines.last().unwrap(),
        "10000 ms end waiting=[hazards:1] held=[]"
    );
    assert_eq!(out.lines[out.lines.len() - 2].at_ms, 0);
    assert_eq!(out.records.len(), 1);
}

#[test]
fn end_says_what_was_still_waiting_and_is_empty_when_nothing_was() {
    let timeline = |end: &str, extra: &str| {
        format!(
            "end = \"{end}\"\naction-time = \"2s\"\n[[event]]\nat = \"0s\"\n\
             topic = \"alarm.triggered\"\n{extra}"
        )
    };
    // At 1s: the `both` action still running (it ends at 2s; the off
    // step is armed only then, docs/semantics.md#walking-a-sequence).
    let out = run_keeping_end(vec![hazards()], timeline("1s", ""), None);
    assert_eq!(
        text(&out).last().unwrap(),
        "1000 ms end waiting=[hazards:0] held=[]"
    );
    // At 3s: the off step's timer.
    let out = run_keeping_end(vec![hazards()], timeline("3s", ""), None);
    assert_eq!(
        text(&out).last().unwrap(),
        "3000 ms end waiting=[hazards:1] held=[]"
    );
    // Two rules waiting at once are both listed.
    let mut other = hazards();
    other.name = "other".into();
    let out = run_keeping_end(vec![hazards(), other], timeline("3s", ""), None);
    assert_eq!(
        text(&out).last().unwrap(),
        "3000 ms end waiting=[hazards:1,other:1] held=[]"
    );
    // Past everything: one `end` line with empty lists, at `end`.
    let out = run_keeping_end(vec![hazards()], timeline("1m", ""), None);
    let ends = out.lines.iter().filter(|l| l.kind == LineKind::End).count();
    assert_eq!(ends, 1, "{:?}", text(&out));
    assert_eq!(
        text(&out).last().unwrap(),
        "60000 ms end waiting=[] held=[]"
    );
    assert_eq!(
        out.lines.last().unwrap().to_json(),
        r#"{"at_ms":60000,"kind":"end","waiting":[],"held":[]}"#
    );
    // Down at `end`: the record its start would replay.
    let out = run_keeping_end(
        vec![hazards()],
        timeline("20s", "[[restart]]\nat = \"10s\"\ndown = \"1h\"\n"),
        None,
    );
    assert_eq!(
        text(&out).last().unwrap(),
        "20000 ms end reason=down waiting=[hazards:1] held=[]"
    );
    let json = out.lines.last().unwrap().to_json();
    assert_eq!(
        json,
        r#"{"at_ms":20000,"kind":"end","reason":"down","waiting":["hazards:1"],"held":[]}"#
    );
}

#[test]
fn a_restart_without_down_stops_and_starts_at_once() {
    let out = run(
        vec![hazards()],
        "[[event]]\nat = \"0s\"\ntopic = \"alarm.triggered\"\n[[restart]]\nat = \"10s\"\n",
        None,
    );
    let lines = text(&out);
    assert!(lines.contains(&"10000 ms restart".to_string()), "{lines:?}");
    assert!(
        lines.contains(
            &"10000 ms replay-resume rule=hazards step=1 pass=0 run=hazards#0-1".to_string()
        ),
        "{lines:?}"
    );
    assert!(lines
        .iter()
        .any(|l| l.starts_with("30000 ms action") && l.contains("push=off")));
}

#[test]
fn a_fail_step_out_of_range_or_an_empty_window_is_refused() {
    let refused = |rules: Vec<Rule>, fail: &str, after: Option<Vec<Rule>>| {
        let timeline = parse(&format!(
            "[[fail]]\nat = \"5s\"\nrule = \"hazards\"\n{fail}"
        ))
        .and_then(|timeline| simulate(payload(rules), &timeline, after.map(payload)));
        timeline.err().map(|e| (e.to_string(), e.help().unwrap()))
    };
    assert_eq!(
        refused(vec![hazards()], "step = 7", None),
        Some((
            "[[fail]] #1: rule \"hazards\" has no step 7 (it has 2 steps)".to_string(),
            "steps count from 0, so `step` is 0 to 1; leave it out to fail every step".to_string()
        ))
    );
    assert!(refused(vec![hazards()], "step = 2", None).is_some());
    assert_eq!(refused(vec![hazards()], "step = 1", None), None);
    // A step the rule has only after the restart counts.
    let mut longer = hazards();
    let mut steps = longer.steps.to_vec();
    steps.push(push("again", 0));
    longer.steps = steps.into();
    assert_eq!(
        refused(vec![hazards()], "step = 2", Some(vec![longer])),
        None
    );
    assert_eq!(
        refused(vec![hazards()], "until = \"5s\"", None),
        Some((
            "[[fail]] #1: `until` (5s) is not after `at` (5s): nothing would fail".to_string(),
            "make `until` later than `at`, or leave it out to fail from `at` on".to_string()
        ))
    );
    assert!(refused(vec![hazards()], "until = \"1s\"", None).is_some());
    assert_eq!(refused(vec![hazards()], "until = \"6s\"", None), None);
}

#[test]
fn timeline_errors_name_the_entry_the_key_and_the_fix() {
    let error = |text: &str| {
        let e = parse(text).unwrap_err();
        (e.to_string(), e.help().unwrap_or_default())
    };
    let three = "[[event]]\nat = \"1s\"\ntopic = \"a\"\n[[event]]\nat = \"2s\"\ntopic = \"b\"\n";
    assert_eq!(
        error(&format!("{three}[[event]]\nat = \"30 secs\"\ntopic = \"c\"\n")),
        (
            "[[event]] #3: `at` = \"30 secs\" is not a duration: white space inside a duration"
                .to_string(),
            "write \"30s\": durations use Go syntax: a number and a unit (ns, us, µs, ms, s, m, h), \
             e.g. \"30s\", \"1.5h\", \"2h45m\", or \"0\""
                .to_string()
        )
    );
    let (message, help) = error("[[restart]]\nat = \"1s\"\ndown = \"xx\"\n");
    assert_eq!(
        message,
        "[[restart]] #1: `down` = \"xx\" is not a duration: a number is missing"
    );
    assert!(help.starts_with("durations use Go syntax"), "{help}");
    assert_eq!(
        error("end = \"2 minutes\"").0,
        "top level: `end` = \"2 minutes\" is not a duration: white space inside a duration"
    );
    assert!(error("end = \"2 minutes\"").1.starts_with("write \"2m\""));
    assert_eq!(
        error("[[event]]\nat = \"1s\"\ntopc = \"a\"\n"),
        (
            "[[event]] #1: unknown key `topc`".to_string(),
            "[[event]] takes `at`, `topic`, `id`, `src`, `from`, `to`, `data`; did you mean `topic`?"
                .to_string()
        )
    );
    let (message, help) = error("ennd = \"3s\"");
    assert_eq!(message, "unknown top-level key `ennd`");
    assert!(help.ends_with("did you mean `end`?"), "{help}");
    assert_eq!(
        error("[[clock]]\nat = \"1s\"\n").0,
        "[[clock]] #1: `jump` is missing"
    );
    assert_eq!(
        error("[[event]]\nat = 5\ntopic = \"a\"\n").0,
        "[[event]] #1: `at` must be a duration string such as \"30s\", not the number 5"
    );
    assert_eq!(
        error("[[state]]\nat = \"0s\"\nhash = \"h\"\nfield = \"f\"\nvalue = 2\n"),
        (
            "[[state]] #1: `value` must be a string, not the number 2".to_string(),
            "quote the value: `value = \"2\"`, not `value = 2`".to_string()
        )
    );
    assert_eq!(
        error("workers = -1").0,
        "top level: `workers` must be a whole number from 0, not the number -1"
    );
    assert_eq!(
        error("event = 3").0,
        "`event` must be a list of `[[event]]` entries"
    );
    assert!(error("[[event]\n").0.starts_with("not valid TOML: "));
}

#[test]
fn bad_timelines_are_refused() {
    assert!(parse("[[event]]\nat = \"1s\"\ntopic = \"x\"\nbogus = 1").is_err());
    assert!(parse("[[event]]\nat = \"soon\"\ntopic = \"x\"").is_err());
    assert!(parse("[[event]]\nat = \"-1s\"\ntopic = \"x\"").is_err());
    let negative: Timeline = toml::from_str("[[event]]\nat = \"-1s\"\ntopic = \"x\"").unwrap();
    assert!(simulate(payload(vec![]), &negative, None).is_err());
    let data: Timeline = toml::from_str("[[event]]\nat = \"1s\"\ntopic = \"x\"\ndata = 3").unwrap();
    assert!(simulate(payload(vec![]), &data, None).is_err());
    let typo: Timeline = toml::from_str("[[fail]]\nat = \"1s\"\nrule = \"hazard\"").unwrap();
    assert_eq!(
        simulate(payload(vec![hazards()]), &typo, None)
            .unwrap_err()
            .to_string(),
        "[[fail]] #1: no rule named \"hazard\" in the simulated rules"
    );
    // A rule of the bundle after the restart counts.
    let mut later = hazards();
    later.name = "hazard".into();
    assert!(simulate(payload(vec![hazards()]), &typo, Some(payload(vec![later]))).is_ok());
}

#[test]
fn fail_targets_a_step_and_ends_at_until() {
    let mut r = hazards();
    Arc::make_mut(&mut r.steps)[1].after_ns = 1_000_000_000;
    let out = run(
        vec![r],
        r#"
        [[fail]]
        at = "0s"
        rule = "hazards"
        step = 1
        until = "5s"
        [[event]]
        at = "0s"
        topic = "alarm.triggered"
        [[event]]
        at = "10s"
        topic = "alarm.triggered"
        "#,
        None,
    );
    let failed: Vec<String> = text(&out)
        .into_iter()
        .filter(|l| l.contains("action-failed") || l.contains("run-end"))
        .collect();
    assert_eq!(
        failed,
        [
            "1000 ms action-failed rule=hazards step=1 pass=0 action=redis list=scooter:blinker push=off run=hazards#0-1 reason=simulated-failure",
            "1000 ms run-end rule=hazards run=hazards#0-1 reason=failed",
            "11000 ms run-end rule=hazards run=hazards#0-2 reason=done",
        ]
    );
}

#[test]
fn a_repeat_gap_and_a_debounce_window_do_not_survive_a_restart() {
    let mut rep = go("rep", vec![push("x", 0)]);
    rep.options_mut().repeat = Repeat {
        count: 3,
        every_ns: 2_000_000_000,
        period_ns: 0,
    };
    let mut deb = go("deb", vec![push("y", 0)]);
    deb.options_mut().debounce_ns = 3_000_000_000;
    let out = run(
        vec![rep, deb],
        r#"
        [[event]]
        at = "0s"
        topic = "go"
        [[restart]]
        at = "1s"
        down = "1s"
        "#,
        None,
    );
    assert_eq!(
        kinds(&out),
        ["0 run-start", "0 action", "1000 restart", "1000 run-end"],
        "{:?}",
        text(&out)
    );
    assert!(out.records.is_empty());
}

#[test]
fn can_actions_show_iface_id_and_data() {
    let mut r = hazards();
    r.steps = vec![Step::new(
        Action::Can(rulecore::bundle::CanFrame {
            iface: "can0".into(),
            id: 0x3A1,
            extended: false,
            rtr: false,
            dlc: 2,
            data: vec![0x01, 0xFF],
        }),
        0,
    )]
    .into();
    let out = run(
        vec![r],
        "[[event]]\nat = \"0s\"\ntopic = \"alarm.triggered\"\n",
        None,
    );
    assert_eq!(
        out.lines[1].to_json(),
        r#"{"at_ms":0,"kind":"action","rule":"hazards","step":0,"pass":0,"action":"can","iface":"can0","id":"0x3a1","data":"01ff","run":"hazards#0-1"}"#
    );
}

#[test]
fn every_restart_uses_the_after_restart_rules_and_a_new_epoch() {
    let out = run(
        vec![hazards()],
        r#"
        [[event]]
        at = "0s"
        topic = "alarm.triggered"
        [[restart]]
        at = "1s"
        down = "1s"
        [[event]]
        at = "3s"
        topic = "alarm.triggered"
        [[restart]]
        at = "4s"
        down = "1s"
        "#,
        Some(vec![hazards_changed()]),
    );
    let t = text(&out);
    // The first record was written by the old rules: dropped. The second by
    // the new rules, and the rules after the second restart are the same.
    assert!(
        t.contains(
            &"2000 ms replay-drop rule=hazards step=1 pass=0 run=hazards#0-1 reason=fingerprint"
                .to_string()
        ),
        "{t:?}"
    );
    assert!(
        t.contains(&"5000 ms replay-resume rule=hazards step=1 pass=0 run=hazards#1-1".to_string()),
        "{t:?}"
    );
    assert!(t.contains(&"33000 ms action rule=hazards step=1 pass=0 action=redis list=scooter:blinker push=left run=hazards#1-1".to_string()), "{t:?}");
}

// ----- docs/simulation.md's output: every kind, every reason, fields per kind ------

/// The JSON keys (sorted) a line of `kind` must have, beyond `at_ms` and
/// `kind`; `action` lines add their action's own keys.
fn keys_of(kind: &str) -> &'static [&'static str] {
    match kind {
        "run-start" => &["rule", "run"],
        "run-end" => &["reason", "rule", "run"],
        "step-skipped" | "record-put" | "replay-resume" => &["pass", "rule", "run", "step"],
        "replay-drop" => &["pass", "reason", "rule", "run", "step"],
        "record-drop" => &["reason", "rule", "run"],
        "action" => &["action", "pass", "rule", "run", "step"],
        "action-failed" => &["action", "pass", "reason", "rule", "run", "step"],
        "trigger-dropped" | "trigger-queued" | "trigger-refused" | "trigger-suppressed" => {
            &["rule"]
        }
        "restart" => &[],
        "end" => &["held", "waiting"],
        "eval-error" => &["message", "rule"],
        "non-fire" => &["reason", "rule"],
        other => panic!("kind {other:?} is not one of docs/simulation.md's"),
    }
}

fn exec(command: &str) -> Step {
    Step::new(
        Action::Exec {
            command: command.into(),
            timeout_ns: 1_000_000_000,
        },
        0,
    )
}

fn can() -> Step {
    Step::new(
        Action::Can(rulecore::bundle::CanFrame {
            iface: "can0".into(),
            id: 0x10,
            extended: false,
            rtr: false,
            dlc: 1,
            data: vec![0xAB],
        }),
        0,
    )
}

/// Timelines that between them make every kind and every reason.
fn every_kind_outcomes() -> Vec<Outcome> {
    let mut gate = go("gate", vec![push("g", 1_000)]);
    Arc::make_mut(&mut gate.steps)[0].when = Some(Program {
        ops: vec![Op::State(0), Op::Const(0), Op::Eq],
    });
    gate.on = pats(&["gate"]).into();
    let mut dropper = go("dropper", vec![push("d", 5_000)]);
    dropper.on = pats(&["d"]).into();
    dropper.concurrency = rulecore::bundle::Concurrency::Drop;
    let mut queuer = go("queuer", vec![push("q", 5_000)]);
    queuer.on = pats(&["q"]).into();
    queuer.concurrency = rulecore::bundle::Concurrency::Queue;
    let mut cool = go("cool", vec![push("c", 0)]);
    cool.on = pats(&["c"]).into();
    cool.options_mut().cooldown_ns = 10_000_000_000;
    let mut shell = go("shell", vec![exec("/bin/true"), can()]);
    shell.on = pats(&["x"]).into();
    let failing = go("failing", vec![push("f", 0)]);
    let main = run(
        vec![hazards(), gate, dropper, queuer, cool, shell, failing],
        r#"
        [[event]]
        at = "0s"
        topic = "alarm.triggered"
        [[event]]
        at = "1s"
        topic = "alarm.triggered"
        [[event]]
        at = "2s"
        topic = "alarm.disarmed"
        [[event]]
        at = "0s"
        topic = "gate"
        [[event]]
        at = "0s"
        topic = "d"
        [[event]]
        at = "0s"
        topic = "d"
        [[event]]
        at = "0s"
        topic = "c"
        [[event]]
        at = "1s"
        topic = "c"
        [[event]]
        at = "0s"
        topic = "x"
        [[fail]]
        at = "0s"
        rule = "failing"
        [[event]]
        at = "0s"
        topic = "go"
        [[restart]]
        at = "3s"
        down = "1s"
        "#
        .to_string()
            + &"[[event]]\nat = \"0s\"\ntopic = \"q\"\n".repeat(10),
        None,
    );
    let refused = run(
        vec![go("a", vec![push("a", 0)]), go("b", vec![push("b", 0)])],
        "workers = 1\nqueue = 0\naction-time = \"1s\"\n[[event]]\nat = \"0s\"\ntopic = \"go\"\n",
        None,
    );
    let mut short = hazards();
    short.name = "short".into();
    let mut gone = hazards();
    gone.name = "gone".into();
    let mut short_after = short.clone();
    let mut steps = short_after.steps.to_vec();
    steps.truncate(1);
    short_after.steps = steps.into();
    let changed = run(
        vec![hazards(), short, gone],
        "[[event]]\nat = \"0s\"\ntopic = \"alarm.triggered\"\n[[restart]]\nat = \"1s\"\ndown = \"1s\"\n",
        Some(vec![hazards_changed(), short_after]),
    );
    let late = run(
        vec![hazards()],
        "replay-window = \"1s\"\n[[event]]\nat = \"0s\"\ntopic = \"alarm.triggered\"\n\
         [[restart]]\nat = \"1s\"\ndown = \"40s\"\n",
        None,
    );
    let early = run(
        vec![hazards()],
        "[[event]]\nat = \"0s\"\ntopic = \"alarm.triggered\"\n[[restart]]\nat = \"1s\"\n\
         down = \"1s\"\n[[clock]]\nat = \"1500ms\"\njump = \"-1h\"\n",
        None,
    );
    // The last line of every simulation: `end` (here cut short while waiting).
    let cut = run_keeping_end(
        vec![hazards()],
        "end = \"1s\"\n[[event]]\nat = \"0s\"\ntopic = \"alarm.triggered\"\n",
        None,
    );
    vec![main, refused, changed, late, early, cut]
}

#[test]
fn the_output_has_every_kind_and_reason_with_only_the_relevant_fields() {
    let mut kinds = std::collections::BTreeSet::new();
    let mut run_end = std::collections::BTreeSet::new();
    let mut replay_drop = std::collections::BTreeSet::new();
    let mut actions = std::collections::BTreeSet::new();
    for outcome in every_kind_outcomes() {
        for line in &outcome.lines {
            let json: serde_json::Value = serde_json::from_str(&line.to_json()).unwrap();
            let object = json.as_object().unwrap();
            let kind = object["kind"].as_str().unwrap().to_string();
            assert_eq!(object["at_ms"].as_u64(), Some(line.at_ms));
            let mut keys: Vec<&str> = object
                .keys()
                .map(String::as_str)
                .filter(|k| !["at_ms", "kind"].contains(k))
                .collect();
            let mut expected = keys_of(&kind).to_vec();
            if kind.starts_with("action") {
                let action = object["action"].as_str().unwrap();
                actions.insert(action.to_string());
                expected.extend_from_slice(match action {
                    "redis" => &["list", "push"][..],
                    "exec" => &["command"],
                    "can" => &["data", "id", "iface"],
                    other => panic!("unknown action {other}"),
                });
            }
            keys.sort_unstable();
            expected.sort_unstable();
            assert_eq!(keys, expected, "{kind}: {}", line.to_json());
            match kind.as_str() {
                "run-end" => run_end.insert(object["reason"].as_str().unwrap().to_string()),
                "replay-drop" => replay_drop.insert(object["reason"].as_str().unwrap().to_string()),
                _ => false,
            };
            kinds.insert(kind);
        }
    }
    let all = |list: &[&str]| -> std::collections::BTreeSet<String> {
        list.iter().map(|s| s.to_string()).collect()
    };
    assert_eq!(
        kinds,
        all(&[
            "action",
            "action-failed",
            "step-skipped",
            "run-start",
            "run-end",
            "trigger-dropped",
            "trigger-queued",
            "trigger-refused",
            "trigger-suppressed",
            "record-put",
            "record-drop",
            "replay-resume",
            "replay-drop",
            "restart",
            "end",
        ])
    );
    assert_eq!(
        run_end,
        all(&[
            "done",
            "cancelled",
            "restarted",
            "when-false",
            "failed",
            "refused",
            "stopped"
        ])
    );
    assert_eq!(
        replay_drop,
        all(&[
            "rule-gone",
            "step-gone",
            "fingerprint",
            "too-late",
            "too-early"
        ])
    );
    assert_eq!(actions, all(&["redis", "exec", "can"]));
}

/// A jump while the service is up moves the waiting record's `fire-at` by
/// the jump (a `record-put` at that instant): the restart after it replays
/// the step at its time instead of dropping it as too-early.
#[test]
fn a_clock_jump_while_up_rewrites_the_record_and_replay_keeps_it() {
    let out = run(
        vec![hazards()],
        r#"
        [[event]]
        at = "0s"
        topic = "alarm.triggered"
        [[clock]]
        at = "5s"
        jump = "-1h"
        [[restart]]
        at = "10s"
        down = "5s"
        "#,
        None,
    );
    let t = text(&out);
    assert!(
        t.contains(&"5000 ms record-put rule=hazards step=1 pass=0 run=hazards#0-1".to_string()),
        "{t:?}"
    );
    assert!(
        t.contains(
            &"15000 ms replay-resume rule=hazards step=1 pass=0 run=hazards#0-1".to_string()
        ),
        "{t:?}"
    );
    assert!(
        t.iter()
            .any(|l| l.starts_with("30000 ms action rule=hazards step=1")),
        "{t:?}"
    );
}

#[test]
fn at_one_instant_a_clock_jump_and_a_restart_apply_before_an_event() {
    // The clock entry is listed after the event but applies first: the
    // record's fire-at already carries the jump.
    let out = run(
        vec![hazards()],
        r#"
        end = "2s"
        [[event]]
        at = "1s"
        topic = "alarm.triggered"
        [[clock]]
        at = "1s"
        jump = "1h"
        "#,
        None,
    );
    let record: serde_json::Value = serde_json::from_str(&out.records["hazards#0-1"]).unwrap();
    assert_eq!(
        record["fire-at"].as_i64(),
        Some(ruled_engine::sim::WALL_ORIGIN_MS + 1_000 + 3_600_000 + 30_000)
    );
    // A restart at the same instant as an event goes first: the event
    // arrives while the service is down and is lost.
    let out = run(
        vec![hazards()],
        r#"
        [[event]]
        at = "1s"
        topic = "alarm.triggered"
        [[restart]]
        at = "1s"
        down = "1s"
        "#,
        None,
    );
    assert_eq!(kinds(&out), ["1000 restart"]);
}

#[test]
fn a_queue_backlog_does_not_survive_a_restart() {
    let mut q = go("q", vec![push("x", 5_000)]);
    q.concurrency = rulecore::bundle::Concurrency::Queue;
    let out = run(
        vec![q],
        r#"
        [[event]]
        at = "0s"
        topic = "go"
        [[event]]
        at = "0s"
        topic = "go"
        [[event]]
        at = "0s"
        topic = "go"
        [[restart]]
        at = "1s"
        down = "1s"
        "#,
        None,
    );
    let t = text(&out);
    // The waiting run's record resumes; the two held triggers are gone.
    assert_eq!(
        kinds(&out)
            .iter()
            .filter(|k| k.ends_with("trigger-queued") || k.ends_with(" action"))
            .collect::<Vec<_>>(),
        ["0 trigger-queued", "0 trigger-queued", "5000 action"],
        "{t:?}"
    );
    assert_eq!(
        kinds(&out)
            .iter()
            .filter(|k| k.ends_with("run-start"))
            .count(),
        1,
        "{t:?}"
    );
}

/// docs/semantics.md#an-action-redis-refused-whole, in the simulator as in
/// the service: a `[[fail]]` with `refused-whole = true` makes Redis refuse
/// the lane's transaction whole (out of memory). The step's record stays,
/// the engine tries it again after 1 s, then 2 s, and the push runs once
/// Redis takes it again; the record goes with it.
#[test]
fn a_lane_batch_redis_refuses_whole_is_retried_by_the_engine_with_back_off() {
    let out = run(
        vec![hazards()],
        r#"
        [[event]]
        at = "0s"
        topic = "alarm.triggered"
        [[fail]]
        at = "29s"
        until = "32500ms"
        rule = "hazards"
        step = 1
        refused-whole = true
        "#,
        None,
    );
    let lines = kinds(&out);
    let from_30s: Vec<&str> = lines
        .iter()
        .map(String::as_str)
        .skip_while(|line| !line.starts_with("30000"))
        .collect();
    assert_eq!(
        from_30s,
        [
            "30000 action",
            "30000 action-failed",
            "31000 action",
            "31000 action-failed",
            "33000 record-drop",
            "33000 action",
            "33000 run-end"
        ],
        "{lines:#?}"
    );
    assert_eq!(
        out.lines.last().unwrap().reason,
        Some(LineReason::Note(NoteReason::RunEnd(EndReason::Done)))
    );
}

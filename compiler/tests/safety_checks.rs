//! The checks of the rules as a whole (docs/safety-checks.md):
//! `rulec::loop` and `rulec::conflict` with the built-in profile, their
//! non-cases, and the conflict's timeline run through `rulec simulate`.
//! The rendered warnings are snapshotted by check_fixtures
//! (`fixtures/invalid/warn-loop-seatbox`, `warn-conflict-blinker.toml`).

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

mod support;

use rulec::check::CheckReport;
use rulec::diagnostic::{Code, Diagnostic};
use rulec::profile::{load, ProfileChoice};
use rulec::session::Session;
use std::path::Path;
use std::sync::Arc;

fn write(dir: &Path, files: &[(&str, &str)]) {
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
}

/// Checks `files` against the built-in profile.
fn check(files: &[(&str, &str)]) -> CheckReport {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), files);
    let profile = load(&ProfileChoice::Builtin).unwrap().map(Arc::new);
    Session::new(profile).check(dir.path()).unwrap()
}

fn with_code(report: &CheckReport, code: Code) -> Vec<&Diagnostic> {
    report
        .diagnostics
        .iter()
        .filter(|d| d.code == code)
        .collect()
}

const LOCK_ON_SEATBOX: &str = r#"
[[rule]]
name = "lock-when-seatbox-opens"
on = ["vehicle.seatbox.opened"]

[[rule.step]]
do = "redis"
list = "scooter:state"
push = "lock"
"#;

const SEATBOX_ON_LOCK: &str = r#"
[[rule]]
name = "open-seatbox-on-lock"
on = ["vehicle.locked"]

[[rule.step]]
do = "redis"
list = "scooter:seatbox"
push = "open"
"#;

#[test]
fn a_loop_through_the_seatbox_names_every_rule_step_and_topic() {
    let report = check(&[("a.toml", LOCK_ON_SEATBOX), ("b.toml", SEATBOX_ON_LOCK)]);
    let loops = with_code(&report, Code::Loop);
    assert_eq!(loops.len(), 1, "{:#?}", report.diagnostics);
    let warning = loops[0];
    assert_eq!(warning.rule.as_deref(), Some("lock-when-seatbox-opens"));
    assert_eq!(warning.step, Some(0));
    let help = warning.help.as_deref().unwrap();
    for part in [
        "`lock-when-seatbox-opens` step 0 pushes `scooter:state lock` -> `vehicle.locked` -> `open-seatbox-on-lock`",
        "`open-seatbox-on-lock` step 0 pushes `scooter:seatbox open` -> `vehicle.seatbox.opened` -> `lock-when-seatbox-opens`",
    ] {
        assert!(help.contains(part), "{help}");
    }
    // Each step and each `on` on the loop is labelled: the first step as
    // the primary label, the rest as related ones.
    let files: Vec<&str> = warning.related.iter().map(|r| r.file.as_str()).collect();
    assert_eq!(files, ["b.toml", "b.toml", "a.toml"]);
    // Without the profile's effects there is no cause graph.
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        &[("a.toml", LOCK_ON_SEATBOX), ("b.toml", SEATBOX_ON_LOCK)],
    );
    let none = Session::new(None).check(dir.path()).unwrap();
    assert!(with_code(&none, Code::Loop).is_empty());
}

#[test]
fn a_rule_that_starts_itself_is_a_loop() {
    let report = check(&[(
        "a.toml",
        r#"
[[rule]]
name = "reopen"
on = ["vehicle.seatbox.opened"]

[[rule.step]]
do = "redis"
after = "5s"
list = "scooter:seatbox"
push = "open"
"#,
    )]);
    let loops = with_code(&report, Code::Loop);
    assert_eq!(loops.len(), 1);
    assert!(loops[0].message.contains("`reopen` starts itself again"));
}

#[test]
fn a_publish_on_a_profile_channel_makes_its_topics() {
    let report = check(&[(
        "a.toml",
        r#"
[[rule]]
name = "echo-tap"
on = ["button.seatbox.tap"]

[[rule.step]]
do = "publish"
channel = "input-events"
message = "seatbox:tap"
"#,
    )]);
    assert_eq!(
        with_code(&report, Code::Loop).len(),
        1,
        "{:#?}",
        report.diagnostics
    );
    // Another gesture is another topic: no loop.
    let report = check(&[(
        "a.toml",
        r#"
[[rule]]
name = "tap-to-hold"
on = ["button.seatbox.tap"]

[[rule.step]]
do = "publish"
channel = "input-events"
message = "seatbox:hold"
"#,
    )]);
    assert!(with_code(&report, Code::Loop).is_empty());
}

#[test]
fn a_chain_that_does_not_come_back_is_no_loop() {
    // lock -> seatbox open, and nothing starts on the seat box opening;
    // the blinker makes no topic at all.
    let report = check(&[
        ("b.toml", SEATBOX_ON_LOCK),
        (
            "c.toml",
            r#"
[[rule]]
name = "blink-on-open"
on = ["vehicle.seatbox.*"]

[[rule.step]]
do = "redis"
list = "scooter:blinker"
push = "both"
"#,
        ),
    ]);
    assert!(
        with_code(&report, Code::Loop).is_empty(),
        "{:#?}",
        report.diagnostics
    );
    // A disabled rule closes no loop.
    let disabled = LOCK_ON_SEATBOX.replace("on = [", "enabled = false\non = [");
    let report = check(&[("a.toml", &disabled), ("b.toml", SEATBOX_ON_LOCK)]);
    assert!(with_code(&report, Code::Loop).is_empty());
}

const BLINKER_FIGHT: &str = r#"
[[rule]]
name = "hazards-when-parked"
on = ["vehicle.kickstand.*"]
when = 'state("vehicle", "state") == "parked"'

[[rule.step]]
do = "redis"
list = "scooter:blinker"
push = "both"

[[rule]]
name = "blinker-off-on-kickstand-down"
on = ["vehicle.kickstand.down"]
when = 'from == "up" && state("vehicle", "kickstand") == "down"'

[[rule.step]]
do = "redis"
after = "500ms"
list = "scooter:blinker"
push = "off"
"#;

#[test]
fn two_rules_pushing_different_values_for_one_event_conflict() {
    let report = check(&[("a.toml", BLINKER_FIGHT)]);
    let conflicts = with_code(&report, Code::Conflict);
    assert_eq!(conflicts.len(), 1, "{:#?}", report.diagnostics);
    let warning = conflicts[0];
    assert_eq!(warning.rule.as_deref(), Some("hazards-when-parked"));
    assert!(
        warning.message.contains("500 ms apart"),
        "{}",
        warning.message
    );
    assert!(warning.message.contains("`vehicle.kickstand.down`"));
    assert_eq!(warning.related.len(), 1);
    // Over a second apart is no fight.
    let later = BLINKER_FIGHT.replace("500ms", "1500ms");
    assert!(with_code(&check(&[("a.toml", &later)]), Code::Conflict).is_empty());
}

#[test]
fn the_conflicts_timeline_makes_both_pushes_in_rulec_simulate() {
    let report = check(&[("a.toml", BLINKER_FIGHT)]);
    let help = with_code(&report, Code::Conflict)[0].help.clone().unwrap();
    let lines: Vec<&str> = help
        .lines()
        .skip_while(|line| !line.starts_with("a timeline"))
        .skip(1)
        .collect();
    assert_eq!(lines.len(), 2, "{help}");
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules");
    std::fs::create_dir(&rules).unwrap();
    write(&rules, &[("a.toml", BLINKER_FIGHT)]);
    let timeline = dir.path().join("fight.toml");
    std::fs::write(&timeline, lines.join("\n")).unwrap();
    let (code, stdout, stderr) = support::rulec(
        dir.path(),
        &["simulate", "rules", "--timeline", "fight.toml"],
    );
    assert_eq!(code, 0, "{stderr}\n{stdout}");
    for push in [
        "rule=hazards-when-parked step=0 pass=0 action=redis list=scooter:blinker push=both",
        "rule=blinker-off-on-kickstand-down step=0 pass=0 action=redis list=scooter:blinker push=off",
    ] {
        assert!(stdout.contains(push), "{push} not in\n{stdout}");
    }
}

#[test]
fn exclusive_conditions_are_no_conflict() {
    let exclusive = |first: &str, second: &str| {
        let text = format!(
            r#"
[[rule]]
name = "first"
on = ["vehicle.state.changed"]
when = '{first}'

[[rule.step]]
do = "redis"
list = "scooter:blinker"
push = "both"

[[rule]]
name = "second"
on = ["vehicle.state.changed"]

[[rule.step]]
do = "redis"
when = '{second}'
list = "scooter:blinker"
push = "off"
"#
        );
        let report = check(&[("a.toml", &text)]);
        with_code(&report, Code::Conflict).is_empty()
    };
    assert!(exclusive(
        r#"to == "parked""#,
        r#"contains(("stand-by", "ready-to-drive"), to)"#
    ));
    assert!(exclusive(
        r#"state("vehicle", "kickstand") == "down""#,
        r#"state("vehicle", "kickstand") != "down""#
    ));
    assert!(exclusive(
        r#"int(state("engine-ecu", "speed")) > 5"#,
        r#"!(int(state("engine-ecu", "speed")) > 5)"#
    ));
    // Not provably exclusive: both can hold.
    assert!(!exclusive(
        r#"to == "parked""#,
        r#"contains(("parked", "stand-by"), to)"#
    ));
    assert!(exclusive(
        r#"int(state("engine-ecu", "speed")) > 5"#,
        r#"int(state("engine-ecu", "speed")) < 3"#
    ));
    assert!(!exclusive(
        r#"int(state("engine-ecu", "speed")) > 5"#,
        r#"int(state("engine-ecu", "speed")) < 10"#
    ));
    assert!(!exclusive(
        r#"to == "parked" || to == "stand-by""#,
        r#"to == "parked""#
    ));
}

#[test]
fn a_finally_step_never_conflicts_with_the_steps_it_cleans_up_after() {
    // hazards on, and off again when the alarm is disarmed: the finally
    // step and the step before it push different values, by design.
    let report = check(&[(
        "a.toml",
        r#"
[[rule]]
name = "hazards-on-alarm"
on = ["alarm.triggered"]
cancel-on = ["alarm.disarmed", "alarm.triggered"]

[[rule.step]]
do = "redis"
list = "scooter:blinker"
push = "both"

[[rule.finally]]
do = "redis"
list = "scooter:blinker"
push = "off"
"#,
    )]);
    assert!(
        with_code(&report, Code::Conflict).is_empty(),
        "{:#?}",
        report.diagnostics
    );
}

#[test]
fn one_rule_conflicts_with_itself_only_at_one_instant() {
    let rule = |after: &str| {
        format!(
            r#"
[[rule]]
name = "pulse"
on = ["alarm.triggered"]

[[rule.step]]
do = "redis"
list = "scooter:horn"
push = "on"

[[rule.step]]
do = "redis"
after = "{after}"
list = "scooter:horn"
push = "off"
"#
        )
    };
    let at_once = check(&[("a.toml", &rule("0s"))]);
    let conflicts = with_code(&at_once, Code::Conflict);
    assert_eq!(conflicts.len(), 1);
    assert!(conflicts[0]
        .message
        .contains("its step 1 pushes `off`, at the same instant"));
    // A pulse: the rule's own sequence.
    assert!(with_code(&check(&[("a.toml", &rule("300ms"))]), Code::Conflict).is_empty());
}

/// No loop and no conflict; the one warning is the handlebar auto-lock's
/// `rulec::guarded`, on purpose (docs/safety.md#the-example).
#[test]
fn the_example_rules_have_no_loop_and_no_conflict() {
    let report = Session::new(load(&ProfileChoice::Builtin).unwrap().map(Arc::new))
        .check(&support::root().join("fixtures/rules"))
        .unwrap();
    let found: Vec<(Code, Option<&str>, Option<usize>)> = report
        .diagnostics
        .iter()
        .map(|d| (d.code, d.rule.as_deref(), d.step))
        .collect();
    assert_eq!(
        found,
        [(Code::Guarded, Some("handlebar-auto-lock"), Some(1))],
        "{:#?}",
        report.diagnostics
    );
}

/// The handlebar guard, declared in the rules directory (the profile's
/// guards are held the same way).
const GUARD: &str = r#"
[[guard]]
name = "not-while-riding"
list = "scooter:hardware"
values = ["handlebar:lock"]
when = 'state("vehicle", "state") != "ready-to-drive" && int(state("engine-ecu", "speed")) == 0'
"#;

/// The `rulec::guarded` warnings of the test's own guard (the built-in
/// profile's `hardware-parked` covers the same push and is judged apart).
fn guarded(rule: &str) -> Vec<Diagnostic> {
    let report = check(&[("00-guards.toml", GUARD), ("a.toml", rule)]);
    report
        .diagnostics
        .into_iter()
        .filter(|d| d.code == Code::Guarded && d.message.contains("`not-while-riding`"))
        .collect()
}

fn handlebar_rule(on: &str, when: &str, after: &str) -> String {
    format!(
        r#"
[[rule]]
name = "auto-lock"
on = ["{on}"]
when = '{when}'

[[rule.step]]
do = "redis"
after = "{after}"
list = "scooter:hardware"
push = "handlebar:lock"
"#
    )
}

#[test]
fn vehicle_locked_and_a_speed_test_prove_the_guard() {
    let text = handlebar_rule(
        "vehicle.locked",
        r#"int(state("engine-ecu", "speed")) == 0"#,
        "0s",
    );
    assert!(guarded(&text).is_empty());
}

#[test]
fn a_step_the_guard_may_refuse_is_warned_with_a_refusing_state() {
    // A button gesture says nothing of the vehicle's state.
    let text = handlebar_rule(
        "button.brake.left.hold",
        r#"int(state("engine-ecu", "speed")) == 0"#,
        "0s",
    );
    let warnings = guarded(&text);
    assert_eq!(warnings.len(), 1);
    assert_eq!(
        warnings[0].message,
        "guard `not-while-riding` would refuse this step with `vehicle` `state` = `ready-to-drive`"
    );
    assert_eq!(warnings[0].step, Some(0));
    // No speed test: the speed refuses.
    let text = handlebar_rule("vehicle.locked", "true", "0s");
    let warnings = guarded(&text);
    assert_eq!(warnings.len(), 1);
    assert!(warnings[0].message.ends_with("`engine-ecu` `speed` = `1`"));
    // After a wait, what held at the trigger may not hold any more.
    let text = handlebar_rule(
        "vehicle.locked",
        r#"int(state("engine-ecu", "speed")) == 0"#,
        "3s",
    );
    let warnings = guarded(&text);
    assert_eq!(warnings.len(), 1);
    assert!(warnings[0]
        .message
        .ends_with("`vehicle` `state` = `ready-to-drive`"));
}

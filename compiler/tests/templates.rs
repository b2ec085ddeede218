//! Computed values (docs/rules.md#computed-values): the rendering of
//! `${expr}` held against `str()` of the same expression, and what the
//! engine does with them on a virtual clock (`rulec simulate`): the state
//! read when the step is submitted, an evaluation error failing the step.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use rulecore::bundle::{Action, Payload, Text};
use rulecore::event::Event;
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;
use test_kit::fuzz::{Fuzz, Rng};

/// Expressions of every type a value can show, and ones that fail.
const EXPRESSIONS: &[&str] = &[
    "to",
    "from",
    "topic",
    "data.n",
    "data.f",
    "data.b",
    "data.s",
    "data.n + 1",
    "data.n * 3 - 2",
    "data.f * 2",
    "data.n / 3",
    "data.n % 4",
    "data.f / 3",
    "1.5",
    "0.1 + 0.2",
    "true",
    "data.n > 2",
    "len(to)",
    "to + \"/\" + from",
    "int(data.s)",
    "float(data.n)",
    "round(data.f)",
    "if(data.b, 1, 2.5)",
    "data.missing",
    "data.n / 0",
    "str::to_uppercase(to)",
];

fn build(dir: &Path, rules: &str) -> Payload {
    std::fs::write(dir.join("rules.toml"), rules).unwrap();
    let report = rulec::session::Session::new(None).check(dir).unwrap();
    assert!(
        !report.rules.is_empty() && report.rules.len() == report.rules_read,
        "{:?}",
        report.diagnostics
    );
    report.assemble("test")
}

fn push(payload: &Payload, rule: usize) -> &Text {
    match &*payload.rules[rule].steps[0].action {
        Action::Redis { push, .. } => push,
        other => panic!("{other:?}"),
    }
}

fn random_event(rng: &mut Rng) -> Event {
    let words = ["", "17", "parked", "-3", "4.5", "ready-to-drive"];
    let data = json!({
        "n": rng.below(41) as i64 - 20,
        "f": (rng.below(2001) as f64 - 1000.0) / 8.0,
        "b": rng.one_in(2),
        "s": rng.pick(&words),
    });
    let envelope = json!({
        "topic": "t",
        "from": rng.pick(&words),
        "to": rng.pick(&words),
        "data": data,
    });
    Event::decode(envelope.to_string().as_bytes()).unwrap()
}

/// `"${e}"` and `"${str(e)}"` give the same text, or both fail, for every
/// expression against random events: the one conversion `str()` has.
#[test]
fn a_segment_renders_as_str_of_its_expression() {
    let temp = tempfile::tempdir().unwrap();
    let mut rules = String::new();
    for (i, expr) in EXPRESSIONS.iter().enumerate() {
        for (suffix, value) in [
            ("plain", format!("${{{expr}}}")),
            ("str", format!("${{str({expr})}}")),
        ] {
            rules.push_str(&format!(
                "[[rule]]\nname = \"r{i}-{suffix}\"\non = [\"t\"]\n[[rule.step]]\ndo = \"redis\"\nlist = \"l\"\npush = {}\n",
                Value::from(value)
            ));
        }
    }
    let payload = build(temp.path(), &rules);
    let fuzz = Fuzz::from_env("templates", 0x7e3a_11c5).unwrap();
    let mut rng = Rng::new(fuzz.seed());
    let (mut equal, mut failed) = (0, 0);
    for _ in 0..fuzz.cases(300) {
        let event = random_event(&mut rng);
        for (i, expr) in EXPRESSIONS.iter().enumerate() {
            let plain = push(&payload, 2 * i).render(&payload.consts, &event, &[]);
            let via_str = push(&payload, 2 * i + 1).render(&payload.consts, &event, &[]);
            match (&plain, &via_str) {
                (Ok(a), Ok(b)) => {
                    assert_eq!(a, b, "`{expr}` on {event:?}");
                    equal += 1;
                }
                (Err(_), Err(_)) => failed += 1,
                _ => panic!("`{expr}` on {event:?}: {plain:?} against str(): {via_str:?}"),
            }
        }
    }
    assert!(
        equal > 1000 && failed > 100,
        "{equal} equal, {failed} failed"
    );
}

#[test]
fn literal_text_escapes_and_plain_values_stay_plain() {
    let temp = tempfile::tempdir().unwrap();
    let payload = build(
        temp.path(),
        r#"
[[rule]]
name = "plain"
on = ["t"]
[[rule.step]]
do = "redis"
list = "l"
push = "both $5 $${x}"

[[rule]]
name = "mixed"
on = ["t"]
[[rule.step]]
do = "redis"
list = "l"
push = '[${to}] $${to} ${"}" + from}!'
"#,
    );
    assert_eq!(push(&payload, 0), &Text::Plain("both $5 ${x}".into()));
    let event = Event::decode(br#"{"topic":"t","from":"a","to":"b"}"#).unwrap();
    let mixed = push(&payload, 1).render(&payload.consts, &event, &[]);
    assert_eq!(mixed.as_deref(), Ok("[b] ${to} }a!"));
}

/// A rules directory `rules` under `temp` holding one file of `rules`.
fn rules_dir(temp: &Path, rules: &str) -> std::path::PathBuf {
    let dir = temp.join("rules");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("r.toml"), rules).unwrap();
    dir
}

fn simulate(dir: &Path, timeline: &str) -> Vec<Value> {
    let timeline_file = dir.with_extension("timeline.toml");
    std::fs::write(&timeline_file, timeline).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rulec"))
        .arg("simulate")
        .arg(dir)
        .args(["--profile", "none", "--format", "json", "--timeline"])
        .arg(&timeline_file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// The state a value reads is the state when the step is submitted, 30 s
/// after the rule fired, not when it fired.
#[test]
fn a_value_reads_the_state_when_its_step_is_submitted() {
    let temp = tempfile::tempdir().unwrap();
    let rules = rules_dir(
        temp.path(),
        r#"
[[rule]]
name = "report"
on = ["alarm.triggered"]
[[rule.step]]
do = "publish"
after = "30s"
channel = "my:report"
message = 'vehicle ${state("vehicle", "state")} after ${to}'
"#,
    );
    let lines = simulate(
        &rules,
        r#"
[[state]]
at = "0s"
hash = "vehicle"
field = "state"
value = "parked"

[[event]]
at = "1s"
topic = "alarm.triggered"
to = "level-2-triggered"

[[state]]
at = "10s"
hash = "vehicle"
field = "state"
value = "stand-by"
"#,
    );
    let action = lines
        .iter()
        .find(|line| line["kind"] == "action")
        .expect("an action line");
    assert_eq!(action["at_ms"], 31_000);
    assert_eq!(action["action"], "publish");
    assert_eq!(action["channel"], "my:report");
    assert_eq!(
        action["message"],
        "vehicle stand-by after level-2-triggered"
    );
}

/// A value that fails to evaluate fails its step: an `eval-error` line,
/// the run ends `failed`, nothing is performed, and its record goes.
#[test]
fn a_failing_value_fails_the_step_and_performs_nothing() {
    let temp = tempfile::tempdir().unwrap();
    let rules = rules_dir(
        temp.path(),
        r#"
[[rule]]
name = "slot"
on = ["battery.charge.changed"]
[[rule.step]]
do = "redis"
after = "5s"
list = "my:list"
push = "slot ${data.slot + 1}"
"#,
    );
    let lines = simulate(
        &rules,
        r#"
[[event]]
at = "0s"
topic = "battery.charge.changed"
to = "14"
"#,
    );
    let kinds: Vec<&str> = lines.iter().map(|l| l["kind"].as_str().unwrap()).collect();
    assert!(!kinds.contains(&"action"), "{kinds:?}");
    let error = lines
        .iter()
        .find(|l| l["kind"] == "eval-error")
        .expect("eval-error");
    assert_eq!(error["at_ms"], 5_000);
    assert_eq!(error["step"], 0);
    assert!(
        error["message"].as_str().unwrap().contains("`push`"),
        "{error}"
    );
    let end = lines
        .iter()
        .find(|l| l["kind"] == "run-end")
        .expect("run-end");
    assert_eq!(end["reason"], "failed");
    let dropped = lines
        .iter()
        .find(|l| l["kind"] == "record-drop")
        .expect("record-drop");
    assert_eq!(dropped["reason"], "value-failed");
}

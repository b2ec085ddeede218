//! Why, not only what (docs/operating.md#what-a-when-read), end to end: a
//! real `redis-server`, a real `ruled`, the `ruled ctl` binary. A dry run
//! (`ruled ctl test`) and a trace (`ruled ctl trace`) show, under each
//! `when`'s result, the values it read: the event's `to`, its `data.*`,
//! and `state()` as `ruled` last read it from Redis.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

mod support;

use serde_json::{json, Value};
use support::ctl::{ctl, Ctl};
use support::{poll, Ruled, Setup};

const RULES: &str = r#"
[[rule]]
name = "hazards"
on = ["alarm.triggered"]
when = 'to == "level-2-triggered" && state("vehicle", "state") == "parked"'

[[rule.step]]
do = "redis"
list = "scooter:blinker"
push = "both"

[[rule.step]]
do = "redis"
when = "data.level >= 2"
list = "scooter:blinker"
push = "off"
"#;

/// What `ruled ctl ... --format json` printed.
fn json_of(out: &Ctl) -> Value {
    assert_eq!(out.code, 0, "ruled ctl failed: {}", out.stderr);
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", out.stdout))
}

/// A bundle built by the compiler from rule-file text.
fn compiled(toml: &str) -> rulecore::bundle::Payload {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("rules.toml"), toml).unwrap();
    let report = rulec::session::Session::new(None)
        .check(dir.path())
        .unwrap();
    report.assemble("test")
}

const READ_RULE_WHEN: &str =
    r#"read to = "level-1-triggered", state("vehicle", "state") = "parked""#;

/// What the rule's `when` read when true, as JSON.
fn read_level_2() -> Value {
    json!([
        {"name": "to", "value": "level-2-triggered"},
        {"name": "state(\"vehicle\", \"state\")", "value": "parked"},
    ])
}

/// MUST SHOW: `ruled ctl test` and `ruled ctl trace` show the value each
/// `when` read for `to`, `data.*` and `state()`, in text and in JSON.
#[test]
fn test_and_trace_show_what_each_when_read() {
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&compiled(RULES));
    // Read by `ruled` at start: what `state()` gives.
    let _: i64 = redis.query(&["HSET", "vehicle", "state", "parked"]);
    let _ruled = Ruled::ready(&redis, &bundle, &[]);

    let event =
        json!({"topic": "alarm.triggered", "to": "level-1-triggered", "data": {"level": 1}})
            .to_string();
    let dry = ctl(&redis, &["test", "hazards", &event]);
    assert_eq!(dry.code, 0, "{dry:?}");
    assert!(dry.stdout.contains("  when     false\n"), "{}", dry.stdout);
    assert!(
        dry.stdout
            .contains(&format!("           {READ_RULE_WHEN}\n")),
        "{}",
        dry.stdout
    );
    assert!(
        dry.stdout
            .contains("  step 1   when false\n           read data.level = 1\n"),
        "{}",
        dry.stdout
    );
    let json = json_of(&ctl(
        &redis,
        &["test", "hazards", &event, "--format", "json"],
    ));
    assert_eq!(
        json["when-read"],
        json!([
            {"name": "to", "value": "level-1-triggered"},
            {"name": "state(\"vehicle\", \"state\")", "value": "parked"},
        ])
    );
    assert_eq!(
        json["steps"][1]["when-read"],
        json!([{"name": "data.level", "value": 1}])
    );
    // What `lsc` reads is as it was.
    assert_eq!(json["when"], false);
    assert_eq!(json["steps"][1]["condition"], false);
    // An absent `data` key says so.
    let bare = json!({"topic": "alarm.triggered", "to": "level-2-triggered"}).to_string();
    let dry = ctl(&redis, &["test", "hazards", &bare]);
    assert!(
        dry.stdout.contains("read data.level absent"),
        "{}",
        dry.stdout
    );

    // A true `when` shows its reads too.
    let event_2 =
        json!({"topic": "alarm.triggered", "to": "level-2-triggered", "data": {"level": 2}})
            .to_string();
    let dry = json_of(&ctl(
        &redis,
        &["test", "hazards", &event_2, "--format", "json"],
    ));
    assert_eq!(dry["when"], true);
    assert_eq!(dry["when-read"], read_level_2());
    assert_eq!(
        dry["steps"][1]["when-read"],
        json!([{"name": "data.level", "value": 2}])
    );

    // The rule's `when` false on a real event: the trace's last non-fire.
    // The emit's reply says, per matched rule, the `when`'s result and reads.
    let emit = |to: &str, level: &str, format: &str| {
        let level = format!("level={level}");
        let out = ctl(
            &redis,
            &[
                "emit",
                "alarm.triggered",
                "--to",
                to,
                "--data",
                &level,
                "--format",
                format,
            ],
        );
        assert_eq!(out.code, 0, "{out:?}");
        out.stdout
    };
    let text = emit("level-1-triggered", "1", "text");
    assert!(
        text.contains(&format!(
            "           when false\n           {READ_RULE_WHEN}\n"
        )),
        "{text}"
    );
    // True, but the second step's `when` false: the run ends there.
    let reply: Value = serde_json::from_str(&emit("level-2-triggered", "1", "json")).unwrap();
    assert_eq!(reply["matched"][0]["when"], true, "{reply}");
    assert_eq!(reply["matched"][0]["when-read"], read_level_2(), "{reply}");
    let traced = poll(|| {
        let json = json_of(&ctl(&redis, &["trace", "hazards", "--format", "json"]));
        let trace = json["traces"][0].clone();
        let ended = trace["runs"][0]["end"]["reason"] == "when-false";
        (ended && trace["last_non_fire"]["reason"] == "when-false").then_some(trace)
    })
    .expect("the false step `when` and the non-fire in the trace");
    assert_eq!(
        traced["runs"][0]["steps"][1]["read"],
        json!([{"name": "data.level", "value": 1}])
    );
    // The run's own `when`, true, and what it read.
    assert_eq!(traced["runs"][0]["when"], json!({"result": "true"}));
    assert_eq!(traced["runs"][0]["read"], read_level_2());
    assert_eq!(
        traced["last_non_fire"]["read"][0],
        json!({"name": "to", "value": "level-1-triggered"})
    );
    let text = ctl(&redis, &["trace", "hazards"]);
    assert_eq!(text.code, 0, "{text:?}");
    assert!(
        text.stdout.contains("when false [read data.level = 1]"),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout.contains(&format!("    {READ_RULE_WHEN}\n")),
        "{}",
        text.stdout
    );
}

//! What an operator sees (docs/operating.md): overrides visible and
//! removable, a running hold in `show`, `pending` and `test`, every counter
//! in `status`, and the `info` journal saying what ran. A real
//! `redis-server`, a real `ruled`, and the `ruled ctl` binary.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

mod support;

use ruled::control::protocol::{
    Hold, ListReply, PendingReply, ReloadReply, SetEnabledReply, ShowReply, StatusReply, TestReply,
    Verdict,
};
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;
use support::bundles::{self, hazards, payload, redis_step, rule};
use support::ctl::ctl;
use support::{poll_within, wait_for, RedisServer, Ruled, Setup};

/// `ruled ctl ARGS` as text; fails the test unless it exits 0.
fn text_ctl(redis: &RedisServer, args: &[&str]) -> String {
    let out = ctl(redis, args);
    assert_eq!(out.code, 0, "ruled ctl {args:?} failed: {}", out.stderr);
    out.stdout
}

/// `ruled ctl ARGS --format json`.
fn json_ctl(redis: &RedisServer, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend_from_slice(&["--format", "json"]);
    let text = text_ctl(redis, &all);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// `ruled ctl ARGS --format json` read through the method's reply type
/// (`ruled::control::protocol`), which must give back every field as it came.
fn typed_ctl<T: serde::Serialize + serde::de::DeserializeOwned>(
    redis: &RedisServer,
    args: &[&str],
) -> T {
    let raw = json_ctl(redis, args);
    let typed: T = serde_json::from_value(raw.clone()).unwrap_or_else(|e| panic!("{e}: {raw}"));
    assert_eq!(serde_json::to_value(&typed).unwrap(), raw);
    typed
}

fn publish(redis: &RedisServer, event: Value) {
    let topic = event["topic"].as_str().unwrap().to_string();
    let _: i64 = redis.query(&["PUBLISH", &format!("ev:{topic}"), &event.to_string()]);
}

/// Replaces the bundle file by rename, as a deploy does.
fn deploy(bundle: &Path, payload: &rulecore::bundle::Payload) {
    let staged = bundle.with_extension("new");
    std::fs::write(&staged, rulecore::codec::encode(payload).unwrap()).unwrap();
    std::fs::rename(&staged, bundle).unwrap();
}

fn stored_override(redis: &RedisServer, rule: &str) -> Option<String> {
    redis.query(&["HGET", "extensions:overrides", rule])
}

/// The line of `rule` in `ruled ctl list`'s text.
fn list_line(redis: &RedisServer, rule: &str) -> Vec<String> {
    let text = text_ctl(redis, &["list"]);
    let line = text
        .lines()
        .find(|line| line.starts_with(rule))
        .unwrap_or_else(|| panic!("no line of {rule} in:\n{text}"));
    line.split_whitespace().map(str::to_string).collect()
}

#[test]
fn set_enabled_default_removes_the_override_live_and_stored() {
    let both = payload(
        vec![
            hazards(60_000),
            rule(
                "witness",
                &["alarm.triggered"],
                vec![redis_step("witness", "w", 0)],
            ),
        ],
        Vec::new(),
        Vec::new(),
    );
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&both);
    let _ruled = Ruled::ready(&redis, &bundle, &[]);
    let off: SetEnabledReply = typed_ctl(&redis, &["set-enabled", "hazards-on-alarm", "off"]);
    assert!(off.changed);
    assert_eq!(
        stored_override(&redis, "hazards-on-alarm").as_deref(),
        Some("disabled")
    );
    // RULE ON BUNDLE OVERRIDE ...: the result, the bundle's value, the override.
    assert_eq!(
        list_line(&redis, "hazards-on-alarm")[1..4],
        ["off", "on", "disabled"]
    );

    let removed: SetEnabledReply =
        typed_ctl(&redis, &["set-enabled", "hazards-on-alarm", "default"]);
    assert_eq!(removed.enabled, Some(true), "{removed:?}");
    assert!(removed.changed, "{removed:?}");
    assert_eq!(
        removed.removed,
        Some(Some("disabled".into())),
        "{removed:?}"
    );
    assert_eq!(stored_override(&redis, "hazards-on-alarm"), None);
    let listed: ListReply = typed_ctl(&redis, &["list"]);
    assert_eq!(listed.rules[0].override_state, None, "{listed:?}");
    assert!(listed.rules[0].enabled, "{listed:?}");
    assert_eq!(
        list_line(&redis, "hazards-on-alarm")[1..4],
        ["on", "on", "none"]
    );
    // Live again: subscribed before the reply went out.
    publish(&redis, json!({"topic": "alarm.triggered"}));
    wait_for("the rule runs again", || {
        redis.list("scooter:blinker") == ["both"]
    });

    // Again: nothing to remove, said so; the text form too.
    let again = text_ctl(&redis, &["set-enabled", "hazards-on-alarm", "default"]);
    assert!(again.contains("had no override"), "{again}");
    // An override the bundle has no rule for can be removed; a name that
    // neither has is an error.
    let _: i64 = redis.query(&["HSET", "extensions:overrides", "ghost", "enabled"]);
    let unknown = ctl(&redis, &["set-enabled", "nope", "default"]);
    assert_eq!(unknown.code, 1, "{}", unknown.stdout);
    assert!(
        unknown.stderr.contains("no rule `nope`"),
        "{}",
        unknown.stderr
    );
}

#[test]
fn reload_names_every_override_above_all_one_against_the_bundle() {
    let witness = || {
        rule(
            "witness",
            &["alarm.triggered"],
            vec![redis_step("witness", "w", 0)],
        )
    };
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&payload(
        vec![hazards(60_000), witness()],
        Vec::new(),
        Vec::new(),
    ));
    let ruled = Ruled::ready(&redis, &bundle, &[]);
    text_ctl(&redis, &["set-enabled", "hazards-on-alarm", "on"]);
    text_ctl(&redis, &["set-enabled", "witness", "on"]);

    // The new bundle turns hazards off; the override keeps it on.
    let mut off = hazards(60_000);
    off.enabled = false;
    let mut changed_witness = witness();
    changed_witness.steps = vec![redis_step("witness", "w2", 0)].into();
    deploy(
        &bundle,
        &payload(vec![off, changed_witness], Vec::new(), Vec::new()),
    );
    let reloaded = json_ctl(&redis, &["reload"]);
    // Raw: the wire's names, which `ReloadReply` must read back.
    assert_eq!(
        reloaded["overrides"],
        json!([
            {"name": "hazards-on-alarm", "override": "enabled", "bundle-enabled": false, "contradicts": true},
            {"name": "witness", "override": "enabled", "bundle-enabled": true, "contradicts": false},
        ]),
        "{reloaded}"
    );
    let typed: ReloadReply = serde_json::from_value(reloaded.clone()).unwrap();
    assert_eq!(serde_json::to_value(&typed).unwrap(), reloaded);
    ruled.wait_log(&[
        "reload: overrides in force",
        "hazards-on-alarm=enabled (bundle: off)",
    ]);
    ruled.wait_log(&[
        "WARN",
        "rule=hazards-on-alarm",
        "set-enabled hazards-on-alarm default",
    ]);
    assert_eq!(
        list_line(&redis, "hazards-on-alarm")[1..4],
        ["on", "off", "enabled"]
    );

    // The text of a reload names it too, with the way out.
    let mut back = hazards(60_000);
    back.enabled = false;
    deploy(
        &bundle,
        &payload(vec![back, witness()], Vec::new(), Vec::new()),
    );
    let text = text_ctl(&redis, &["reload"]);
    assert!(
        text.contains(
            "override hazards-on-alarm = enabled in force, against the bundle's enabled = false; \
             `ruled ctl set-enabled hazards-on-alarm default` removes it"
        ),
        "{text}"
    );
    assert!(
        text.contains("override witness = enabled in force"),
        "{text}"
    );

    // Removed: the rule is what the new bundle says, off.
    let removed: SetEnabledReply =
        typed_ctl(&redis, &["set-enabled", "hazards-on-alarm", "default"]);
    assert_eq!(removed.enabled, Some(false), "{removed:?}");
    assert_eq!(
        list_line(&redis, "hazards-on-alarm")[1..4],
        ["off", "off", "none"]
    );
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

const HOLD: &str = r#"
[[rule]]
name = "battery-low"
on = ["battery.changed"]
when = "int(data.charge) < 20"
for = "10m"

[[rule.step]]
do = "redis"
list = "scooter:led"
push = "battery-low"
"#;

#[test]
fn a_running_hold_shows_in_show_pending_and_test_with_its_time_left() {
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&compiled(HOLD));
    let _ruled = Ruled::ready(&redis, &bundle, &[]);
    let low = json!({"topic": "battery.changed", "data": {"charge": 10}});
    publish(&redis, low.clone());
    let hold = poll_within(support::DEADLINE, || {
        let shown: ShowReply = typed_ctl(&redis, &["show", "battery-low"]);
        shown.state.hold
    })
    .expect("the hold in v1.show");
    let Hold::Running { left_ms: left, .. } = hold else {
        panic!("not running: {hold:?}");
    };
    assert!(left > 0 && left <= 600_000, "{hold:?}");

    let shown = text_ctl(&redis, &["show", "battery-low"]);
    assert!(shown.contains("hold running: fires at"), "{shown}");
    assert!(shown.contains("unless `when` turns false first"), "{shown}");

    let pending: PendingReply = typed_ctl(&redis, &["pending"]);
    assert_eq!(pending.holds[0].rule, "battery-low", "{pending:?}");
    assert!(pending.holds[0].left_ms <= 600_000);
    let pending = text_ctl(&redis, &["pending"]);
    assert!(pending.contains("hold of battery-low running"), "{pending}");

    let event = low.to_string();
    let tested: TestReply = typed_ctl(&redis, &["test", "battery-low", &event]);
    let Verdict::Holding { left_ms, .. } = tested.verdict else {
        panic!("not holding: {tested:?}");
    };
    assert!(left_ms <= 600_000);
    let tested = text_ctl(&redis, &["test", "battery-low", &event]);
    assert!(tested.contains("a hold is running"), "{tested}");
    assert!(!tested.contains("would    hold"), "{tested}");

    // Recovered: the hold ends, and a new one would start.
    publish(
        &redis,
        json!({"topic": "battery.changed", "data": {"charge": 80}}),
    );
    wait_for("the hold ended", || {
        typed_ctl::<ShowReply>(&redis, &["show", "battery-low"])
            .state
            .hold
            .is_none()
    });
    let tested: TestReply = typed_ctl(&redis, &["test", "battery-low", &event]);
    assert!(matches!(tested.verdict, Verdict::Hold { .. }), "{tested:?}");
    assert!(typed_ctl::<PendingReply>(&redis, &["pending"])
        .holds
        .is_empty());
}

#[test]
fn status_shows_every_counter_of_the_counters_hash() {
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&bundles::single(hazards(60_000)));
    let _ruled = Ruled::ready(&redis, &bundle, &[]);
    // A message whose topic differs from its channel's: `rejected`.
    let _: i64 = redis.query(&[
        "PUBLISH",
        "ev:alarm.triggered",
        r#"{"topic":"alarm.other"}"#,
    ]);
    let written = poll_within(support::DEADLINE, || {
        let hash: std::collections::BTreeMap<String, String> =
            redis.query(&["HGETALL", "extensions"]);
        (hash.get("rejected").map(String::as_str) == Some("1")).then_some(hash)
    })
    .expect("`rejected` counted in the counters hash");
    let status: StatusReply = typed_ctl(&redis, &["status"]);
    let text = text_ctl(&redis, &["status"]);
    // Every counter: the numeric fields, not who writes them or what runs.
    let not_counters = ["version", "bundle", "state", "pid", "host", "started-at"];
    for (field, value) in written
        .iter()
        .filter(|(field, _)| !not_counters.contains(&field.as_str()))
    {
        assert!(
            status.counters.contains_key(field),
            "`{field}` missing from v1.status's counters: {status:?}"
        );
        assert!(
            status.counter_values.contains_key(field),
            "`{field}` missing from counter-values: {status:?}"
        );
        assert!(
            text.lines()
                .any(|line| line.split_whitespace().next() == Some(field.as_str())),
            "`{field}` ({value}) missing from ruled ctl status:\n{text}"
        );
    }
    assert_eq!(status.counters["rejected"], "1", "{status:?}");
}

/// The shipped `fixtures/rules`, built as `rulec build` does.
fn fixture_bundle(dir: &Path) -> std::path::PathBuf {
    let rules = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/rules");
    let report = rulec::session::Session::new(None).check(&rules).unwrap();
    let payload = report.assemble("test");
    bundles::write(dir, "rules.bundle", &payload)
}

/// The hazards example (fixtures/rules, its real 30 s wait) at `info`:
/// the journal holds the run's start, the `both` action and the `off`
/// action 30 s later, and nothing else of that run.
#[test]
fn the_info_journal_says_each_action_of_the_hazards_example() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let bundle = fixture_bundle(dir.path());
    let mut ruled = Ruled::ready(&redis, &bundle, &["--log-level", "info"]);
    let before = ruled.log().len();
    publish(&redis, json!({"topic": "alarm.triggered"}));
    let done = poll_within(Duration::from_secs(60), || {
        (redis.list("scooter:blinker") == ["both", "off"]).then_some(())
    });
    assert!(done.is_some(), "no off within 60 s:\n{}", ruled.log_text());
    ruled.wait_log(&["action: LPUSH scooter:blinker off"]);
    // The run is over only when the last push's outcome is back: a stop
    // before that ends it `stopped`, which is logged too.
    wait_for("the hazards run to end", || {
        let status = ctl(&redis, &["--format", "json", "status"]);
        serde_json::from_str::<StatusReply>(&status.stdout)
            .is_ok_and(|reply| reply.counter_values.get("runs-active") == Some(&0))
    });
    assert!(ruled.stop());
    let lines: Vec<String> = ruled.log()[before..]
        .iter()
        .filter(|line| line.contains("hazards-on-alarm"))
        .cloned()
        .collect();
    // For the lead's note: the lines as they were.
    eprintln!("journal of the hazards run:\n{}", lines.join("\n"));
    assert_eq!(lines.len(), 3, "{lines:#?}");
    assert!(
        lines[0].contains("INFO") && lines[0].contains("run started"),
        "{lines:#?}"
    );
    for (line, push) in lines[1..].iter().zip(["both", "off"]) {
        assert!(line.contains("INFO"), "{line}");
        assert!(
            line.contains(&format!("action: LPUSH scooter:blinker {push}")),
            "{line}"
        );
    }
    assert!(lines[1].contains("step=0") && lines[2].contains("step=1"));
}

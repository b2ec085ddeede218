//! Live reload end to end (docs/service.md#live-reload), against a real
//! `redis-server`: the `ruled` binary is sent `SIGHUP` after its bundle
//! file was replaced by rename, as a deploy does.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod support;

use nix::sys::signal::Signal;
use rulecore::bundle::{Payload, Rule, StatePair};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use support::bundles::{self, hazards, payload, redis_step, rule, state_equals};
use support::{replace_by_rename, wait_for, RedisServer, Ruled};

/// The durable wait of the hazards rule: 30 s on the vehicle, scaled down.
const WAIT_MS: u64 = 3_000;

fn list(redis: &RedisServer, key: &str) -> Vec<String> {
    let mut items: Vec<String> = redis.query(&["LRANGE", key, "0", "-1"]);
    items.reverse();
    items
}

fn publish(redis: &RedisServer, topic: &str) -> i64 {
    let json = format!(r#"{{"topic":"{topic}"}}"#);
    redis.query(&["PUBLISH", &format!("ev:{topic}"), &json])
}

/// What ruled is subscribed to: channels (sorted) and the pattern count.
fn subscriptions(redis: &RedisServer) -> (Vec<String>, i64) {
    let mut channels: Vec<String> = redis.query(&["PUBSUB", "CHANNELS"]);
    channels.sort();
    (channels, redis.query(&["PUBSUB", "NUMPAT"]))
}

fn wait_subscriptions(redis: &RedisServer, channels: &[&str], patterns: i64) {
    let want = (channels.iter().map(|c| c.to_string()).collect(), patterns);
    wait_for(&format!("subscriptions {want:?}"), || {
        subscriptions(redis) == want
    });
}

fn pending(redis: &RedisServer) -> Vec<(String, String)> {
    let mut records: Vec<(String, String)> = redis.query(&["HGETALL", ruled_engine::PENDING_HASH]);
    records.sort();
    records
}

fn counter(redis: &RedisServer, field: &str) -> Option<String> {
    redis.query(&["HGET", "extensions", field])
}

/// The horn rule: exact topic, no state.
fn horn_exact() -> Rule {
    rule(
        "horn",
        &["button.horn"],
        vec![redis_step("scooter:horn", "beep", 0)],
    )
}

/// Bundle 1: hazards (waiting `WAIT_MS`) and the horn on one topic.
fn first() -> Payload {
    payload(vec![hazards(WAIT_MS), horn_exact()], vec![], vec![])
}

/// Bundle 2: hazards unchanged; the horn changed: any `button.*` topic,
/// only while `state("vehicle", "state") == "parked"`.
fn unrelated_change(hazards_rule: Rule) -> Payload {
    let (when, consts) = state_equals("parked");
    let mut horn = rule(
        "horn",
        &["button.*"],
        vec![redis_step("scooter:horn", "honk", 0)],
    );
    horn.when = Some(Box::new(when));
    let pairs = vec![StatePair {
        hash: "vehicle".into(),
        field: "state".into(),
    }];
    payload(vec![hazards_rule, horn], pairs, consts)
}

fn deploy(path: &Path, payload: &Payload) {
    replace_by_rename(path, &rulecore::codec::encode(payload).unwrap());
}

/// Deploys `payload` over `bundle`, sends SIGHUP, and waits for the log
/// line with every one of `says`.
fn reload(ruled: &Ruled, bundle: &Path, payload: &Payload, says: &[&str]) {
    deploy(bundle, payload);
    ruled.signal(Signal::SIGHUP);
    ruled.wait_log(says);
}

/// Its own redis-server, and ruled on `payload`, ready.
fn start(payload: &Payload) -> (RedisServer, tempfile::TempDir, PathBuf, Ruled) {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let bundle = bundles::write(dir.path(), "rules.bundle", payload);
    let ruled = Ruled::ready(&redis, &bundle, &[]);
    (redis, dir, bundle, ruled)
}

/// The horn rule of [`first`] acts on `button.horn`.
fn horn_beeps(redis: &RedisServer) {
    assert_eq!(publish(redis, "button.horn"), 1);
    wait_for("the horn", || list(redis, "scooter:horn") == ["beep"]);
}

#[test]
fn sighup_reloads_keeping_unchanged_waits_and_ending_changed_ones() {
    let (redis, _dir, bundle, ruled) = start(&first());
    wait_subscriptions(&redis, &["ev:alarm.triggered", "ev:button.horn"], 0);
    let first_id = counter(&redis, "bundle").unwrap();

    // A run parks on the durable wait.
    assert_eq!(publish(&redis, "alarm.triggered"), 1);
    wait_for("the first step", || {
        list(&redis, "scooter:blinker") == ["both"]
    });
    wait_for("the pending record", || pending(&redis).len() == 1);
    let record = pending(&redis);

    // A bundle changing only another rule: the wait and its record stay.
    let _: i64 = redis.query(&["HSET", "vehicle", "state", "parked"]);
    reload(
        &ruled,
        &bundle,
        &unrelated_change(hazards(WAIT_MS)),
        &[
            "bundle reloaded",
            "runs_kept=1",
            "runs_ended=0",
            "changed=1",
        ],
    );
    assert_eq!(pending(&redis), record, "the record is untouched");
    wait_subscriptions(&redis, &["ev:alarm.triggered", "vehicle"], 1);
    wait_for("the new bundle id in the counters", || {
        counter(&redis, "bundle").is_some_and(|id| id != first_id)
    });
    // The new state pair was seeded: the changed horn rule sees "parked".
    assert_eq!(publish(&redis, "button.horn"), 1);
    wait_for("the changed horn", || {
        list(&redis, "scooter:horn") == ["honk"]
    });

    // The parked step fires once, at its time, and its record goes.
    wait_for("the parked step", || {
        list(&redis, "scooter:blinker") == ["both", "off"] && pending(&redis).is_empty()
    });
    wait_for("no run left", || {
        counter(&redis, "runs-active").as_deref() == Some("0")
    });
    assert_eq!(
        list(&redis, "scooter:blinker"),
        ["both", "off"],
        "fired once"
    );

    // A new run parks; a bundle changing that step's `push` ends it.
    assert_eq!(publish(&redis, "alarm.triggered"), 1);
    wait_for("the second run's record", || pending(&redis).len() == 1);
    let mut changed = hazards(WAIT_MS);
    Arc::make_mut(&mut changed.steps)[1] = redis_step("scooter:blinker", "left", WAIT_MS);
    reload(
        &ruled,
        &bundle,
        &unrelated_change(changed),
        &["bundle reloaded", "runs_kept=0", "runs_ended=1"],
    );
    ruled.wait_log(&["run ended", "reason=\"reloaded\""]);
    ruled.wait_log(&["the reload ends this run", "fingerprint"]);
    assert!(pending(&redis).is_empty(), "the record is gone");
    wait_for("no timer armed", || {
        counter(&redis, "pending").as_deref() == Some("0")
            && counter(&redis, "runs-active").as_deref() == Some("0")
    });
    wait_subscriptions(&redis, &["ev:alarm.triggered", "vehicle"], 1);

    // A corrupt bundle is refused; the rules keep running.
    replace_by_rename(&bundle, b"not a bundle at all");
    ruled.signal(Signal::SIGHUP);
    ruled.wait_log(&["reload refused", "the loaded bundle keeps running"]);
    wait_subscriptions(&redis, &["ev:alarm.triggered", "vehicle"], 1);
    assert_eq!(publish(&redis, "button.horn"), 1);
    wait_for("the horn still runs", || {
        list(&redis, "scooter:horn") == ["honk", "honk"]
    });
    let mut ruled = ruled;
    assert!(ruled.stop(), "an orderly stop after the reloads");
}

#[test]
fn a_reload_to_no_live_rule_releases_every_subscription_and_back() {
    let (redis, _dir, bundle, ruled) = start(&first());
    wait_subscriptions(&redis, &["ev:alarm.triggered", "ev:button.horn"], 0);
    let mut off = horn_exact();
    off.enabled = false;
    let off = payload(vec![off], vec![], vec![]);
    reload(&ruled, &bundle, &off, &["bundle reloaded", "removed=1"]);
    wait_subscriptions(&redis, &[], 0);
    // The same file again: nothing to do.
    reload(&ruled, &bundle, &off, &["the bundle is unchanged"]);
    reload(&ruled, &bundle, &first(), &["bundle reloaded", "added=1"]);
    wait_subscriptions(&redis, &["ev:alarm.triggered", "ev:button.horn"], 0);
    horn_beeps(&redis);
}

#[test]
fn an_idle_ruled_subscribes_once_a_reload_gives_it_rules() {
    let (redis, _dir, bundle, ruled) = start(&payload(vec![], vec![], vec![]));
    wait_subscriptions(&redis, &[], 0);
    reload(&ruled, &bundle, &first(), &["bundle reloaded", "added=2"]);
    wait_subscriptions(&redis, &["ev:alarm.triggered", "ev:button.horn"], 0);
    horn_beeps(&redis);
}

#[test]
fn signals_that_would_kill_are_caught_and_sigquit_stops_in_order() {
    let (redis, _dir, _bundle, mut ruled) = start(&first());
    for signal in [Signal::SIGUSR1, Signal::SIGUSR2, Signal::SIGALRM] {
        ruled.signal(signal);
        ruled.wait_log(&[&format!("{signal:?} received and ignored")]);
    }
    horn_beeps(&redis);
    ruled.signal(Signal::SIGQUIT);
    assert_eq!(ruled.wait_exit(), Some(0), "SIGQUIT is an orderly stop");
    assert!(ruled.log_text().contains("stopped"));
}

/// The `WARN` lines ruled wrote after the first `skip` lines of its log.
fn warn_lines_after(ruled: &Ruled, skip: usize) -> Vec<String> {
    ruled
        .log()
        .into_iter()
        .skip(skip)
        .filter(|line| line.contains(" WARN "))
        .collect()
}

/// No false alarms (docs/service.md#live-reload): a reload, asked for by `v1.reload` or by
/// SIGHUP, is logged at `info`; `warn` only for an override that
/// contradicts the new bundle (so `journalctl -p warning` holds what needs
/// a look, not every deploy).
#[test]
fn a_reload_is_logged_at_info_and_warns_only_for_a_contradicting_override() {
    let (redis, _dir, bundle, ruled) = start(&first());
    let mut changed = horn_exact();
    changed.steps = vec![redis_step("scooter:horn", "toot", 0)].into();
    deploy(
        &bundle,
        &payload(vec![hazards(WAIT_MS), changed], vec![], vec![]),
    );
    let before = ruled.log().len();
    let reply = support::ctl::ctl(&redis, &["reload"]);
    assert_eq!(reply.code, 0, "{}", reply.stderr);
    ruled.wait_log(&["INFO", "bundle reloaded", "changed=1"]);
    ruled.wait_log(&["INFO", "control request v1.reload"]);
    assert_eq!(warn_lines_after(&ruled, before), Vec::<String>::new());

    // SIGHUP: the same.
    let before = ruled.log().len();
    reload(
        &ruled,
        &bundle,
        &first(),
        &["INFO", "bundle reloaded", "changed=1"],
    );
    assert_eq!(warn_lines_after(&ruled, before), Vec::<String>::new());

    // An override that agrees with the new bundle: no warn line either.
    let off = support::ctl::ctl(&redis, &["set-enabled", "horn", "off"]);
    assert_eq!(off.code, 0, "{}", off.stderr);
    ruled.wait_log(&["control request v1.set-enabled"]);
    let mut disabled = horn_exact();
    disabled.enabled = false;
    let before = ruled.log().len();
    deploy(
        &bundle,
        &payload(vec![hazards(WAIT_MS), disabled], vec![], vec![]),
    );
    let reply = support::ctl::ctl(&redis, &["reload"]);
    assert_eq!(reply.code, 0, "{}", reply.stderr);
    ruled.wait_log(&[
        "INFO",
        "reload: overrides in force",
        "horn=disabled (bundle: off)",
    ]);
    assert_eq!(warn_lines_after(&ruled, before), Vec::<String>::new());

    // An override against the new bundle's `enabled`: one warn line, naming it.
    let before = ruled.log().len();
    let mut back = horn_exact();
    back.steps = vec![redis_step("scooter:horn", "honk", 0)].into();
    deploy(
        &bundle,
        &payload(vec![hazards(WAIT_MS), back], vec![], vec![]),
    );
    let reply = support::ctl::ctl(&redis, &["reload"]);
    assert_eq!(reply.code, 0, "{}", reply.stderr);
    ruled.wait_log(&["WARN", "rule=horn", "set-enabled horn default"]);
    let warned = warn_lines_after(&ruled, before);
    assert_eq!(warned.len(), 1, "{warned:#?}");
}

/// Four rules for [`reload_and_rulec_diff_agree_on_what_changed`]: the
/// `when`'s constant, the first step's `push`, the cooldown, and a rule
/// that stays as it is.
fn four_rules(when: &str, push: &str, cooldown: &str) -> String {
    format!(
        r#"[[rule]]
name = "when-only"
on = ["vehicle.state.changed"]
when = 'state("vehicle", "state") == "{when}"'

[[rule.step]]
do = "redis"
list = "test:when"
push = "x"

[[rule]]
name = "step-value"
on = ["vehicle.state.changed"]

[[rule.step]]
do = "redis"
list = "test:step"
push = "{push}"

[[rule]]
name = "policy"
on = ["vehicle.state.changed"]
cooldown = "{cooldown}"

[[rule.step]]
do = "redis"
list = "test:policy"
push = "x"

[[rule]]
name = "unchanged"
on = ["vehicle.state.changed"]
when = 'state("vehicle", "state") == "parked"'

[[rule.step]]
do = "redis"
list = "test:unchanged"
push = "x"
"#
    )
}

/// Replies agree with tools (docs/operating.md#deploying-a-new-bundle): `v1.reload`'s `changed` names
/// exactly the rules `rulec diff` says changed, for the same two bundles
/// built by the real `rulec`: a `when` that differs only in a constant
/// (the bytecode is the same, the constant pool is not), a step's value, a
/// policy; an unchanged rule is in neither.
#[test]
fn reload_and_rulec_diff_agree_on_what_changed() {
    use support::librescoot::{build_rules, rulec};
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let old = build_rules(
        dir.path(),
        "old",
        &[("rules.toml", &four_rules("parked", "a", "5s"))],
    );
    let new = build_rules(
        dir.path(),
        "new",
        &[("rules.toml", &four_rules("stand-by", "b", "10s"))],
    );
    let loaded = dir.path().join("loaded.bundle");
    std::fs::copy(&old, &loaded).unwrap();
    let _ruled = Ruled::ready(&redis, &loaded, &[]);

    let out = std::process::Command::new(rulec())
        .args(["diff", "--format", "json"])
        .arg(&old)
        .arg(&new)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let diff: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut by_diff: Vec<String> = diff["changed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|change| change["rule"].as_str().unwrap().to_string())
        .collect();
    by_diff.sort();
    assert_eq!(by_diff, ["policy", "step-value", "when-only"], "{diff}");

    replace_by_rename(&loaded, &std::fs::read(&new).unwrap());
    let reply = support::ctl::ctl(&redis, &["reload", "--format", "json"]);
    assert_eq!(reply.code, 0, "{}", reply.stderr);
    let reloaded: serde_json::Value = serde_json::from_str(&reply.stdout).unwrap();
    let mut by_reload: Vec<String> = reloaded["changed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|name| name.as_str().unwrap().to_string())
        .collect();
    by_reload.sort();
    assert_eq!(by_reload, by_diff, "{reloaded}");
}

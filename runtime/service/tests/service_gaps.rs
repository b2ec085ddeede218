//! The last gaps of the hardening round, end to end against a real
//! `redis-server` and the `ruled` binary: a trace over the 512 KiB reply
//! limit read page by page (docs/operating.md#what-happened-traces), a
//! reload whose two bundles would exceed the memory budget refused
//! (docs/service.md#live-reload), and a `SIGHUP` during start-up held until
//! the loop runs (docs/service.md#signals).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

mod support;

use nix::sys::signal::Signal;
use rulecore::bundle::{Payload, Rule};
use serde_json::{json, Value};
use std::process::Command;
use std::time::Duration;
use support::bundles::{payload, redis_step, rule, single};
use support::{replace_by_rename, wait_for, RedisServer, Ruled, Setup};

/// One `ruled ctl` run: exit status, stdout, stderr.
fn ctl(redis: &RedisServer, args: &[&str]) -> (i32, String, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ruled"));
    command
        .arg("ctl")
        .arg("--redis")
        .arg(redis.url())
        .args(["--timeout", "30s"])
        .args(args);
    for (key, _) in std::env::vars() {
        if key.starts_with("RULED_") {
            command.env_remove(key);
        }
    }
    let out = command.output().expect("run ruled ctl");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn ctl_json(redis: &RedisServer, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend_from_slice(&["--format", "json"]);
    let (code, stdout, stderr) = ctl(redis, &all);
    assert_eq!(code, 0, "ruled ctl {args:?} failed: {stderr}");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

fn publish(redis: &RedisServer, topic: &str, data: &Value) {
    let json = json!({ "topic": topic, "data": data }).to_string();
    let _: i64 = redis.query(&["PUBLISH", &format!("ev:{topic}"), &json]);
}

/// The horn rule, pushing `push` onto the list `out`.
fn horn(push: &str) -> Rule {
    rule("horn", &["button.horn"], vec![redis_step("out", push, 0)])
}

/// Runs kept for the traced rule: each holds its trigger event of about
/// 3.9 KB, so all of them are well over the 512 KiB a reply may be.
const RUNS: usize = 200;

#[test]
fn a_trace_over_the_reply_limit_is_read_page_by_page() {
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&single({
        // 200 starts in a few seconds: over the breaker's default (100 per
        // 10 s), which would refuse the rest (docs/safety.md#the-breaker).
        let mut rule = horn("beep");
        rule.options_mut().trip = rulecore::envelope::Breaker::Off;
        rule
    }));
    let runs = RUNS.to_string();
    let _ruled = Ruled::ready(
        &redis,
        &bundle,
        &["--traces", &runs, "--trace-memory", "8MiB"],
    );
    for i in 0..RUNS {
        let data = json!({"n": i, "pad": "x".repeat(3_900)});
        publish(&redis, "button.horn", &data);
        // One at a time: a run still live would drop the next trigger.
        wait_for(&format!("run {i}"), || redis.list("out").len() > i);
    }
    // The whole trace is over the limit: asking for it at once is refused.
    let all = RUNS.to_string();
    let (code, _, stderr) = ctl(&redis, &["trace", "horn", "--limit", &all]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("smaller page"), "{stderr}");
    // Page by page, every run once, oldest first.
    let mut seen = Vec::new();
    let mut offset = 0;
    while offset < RUNS {
        let from = offset.to_string();
        let page = ctl_json(
            &redis,
            &["trace", "horn", "--offset", &from, "--limit", "60"],
        );
        assert_eq!(page["total"], json!(RUNS), "{}", page["total"]);
        assert_eq!(page["paged"], "runs");
        let runs = page["traces"][0]["runs"].as_array().unwrap();
        assert_eq!(runs.len(), (RUNS - offset).min(60));
        for run in runs {
            // The event whole, or (over the cut) the start of its JSON.
            let event = run["event_cut"]
                .as_str()
                .map_or_else(|| run["event"].to_string(), str::to_string);
            let i = seen.len();
            assert!(event.contains(&format!("\"n\":{i},")), "run {i}: {event}");
            seen.push(run["run"].as_str().unwrap().to_string());
        }
        offset += 60;
    }
    let distinct: std::collections::HashSet<&String> = seen.iter().collect();
    assert_eq!((seen.len(), distinct.len()), (RUNS, RUNS));
    // The text says which part of the trace it shows.
    let (code, text, stderr) = ctl(&redis, &["trace", "horn", "--offset", "190"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        text.contains(&format!("10 of {RUNS} runs shown from 190")),
        "{text}"
    );
    // Out of range: an error naming the limit.
    let (code, _, stderr) = ctl(&redis, &["trace", "horn", "--limit", "1001"]);
    assert_eq!(code, 1);
    assert!(stderr.contains("`limit` must be 1 to 1000"), "{stderr}");
}

/// A bundle of `rules` rules (each pushing a value of its own, so none
/// share a step) on a topic nothing publishes, and the horn pushing `push`.
fn heavy(prefix: &str, rules: usize, push: &str) -> Payload {
    let mut all: Vec<Rule> = (0..rules)
        .map(|i| {
            let name = format!("{prefix}{i}");
            rule(&name, &["quiet"], vec![redis_step("l", &name, 0)])
        })
        .collect();
    all.push(horn(push));
    payload(all, vec![], vec![])
}

/// Rules enough for a bundle of over 9 MiB once loaded: two such are
/// over the 16 MiB budget, one is within it.
fn heavy_rules() -> usize {
    let sample = ruled_engine::estimated_heap(&heavy("s", 1_000, "x"));
    (9 << 20) / (sample / 1_000) + 1
}

#[test]
fn a_reload_past_the_memory_budget_is_refused_and_the_old_bundle_keeps_running() {
    let rules = heavy_rules();
    let first = heavy("a", rules, "beep");
    let loaded = ruled_engine::estimated_heap(&first);
    assert!(loaded < ruled_engine::MEMORY_BUDGET, "{loaded}");
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&first);
    let ruled = Ruled::start(&redis, &bundle, &[]);
    ruled.wait_log_within(Duration::from_secs(60), &["ruled ready"]);
    let second = heavy("b", rules, "honk");
    let new = ruled_engine::estimated_heap(&second);
    assert!(new + loaded > ruled_engine::MEMORY_BUDGET);
    replace_by_rename(&bundle, &rulecore::codec::encode(&second).unwrap());
    // v1.reload: refused, with the figures.
    let (code, _, stderr) = ctl(&redis, &["reload"]);
    assert_eq!(code, 1, "{stderr}");
    let figures = format!(
        "the new bundle needs about {} once loaded and the loaded one about {}",
        ruled_engine::mebibytes(new),
        ruled_engine::mebibytes(loaded)
    );
    assert!(stderr.contains(&figures), "{stderr}");
    assert!(
        stderr.contains("over the memory budget of 16 MiB"),
        "{stderr}"
    );
    assert!(
        stderr.contains("the loaded bundle keeps running"),
        "{stderr}"
    );
    // SIGHUP: the same, in the log.
    ruled.signal(Signal::SIGHUP);
    ruled.wait_log(&["reload refused", &figures]);
    // The old bundle runs on.
    publish(&redis, "button.horn", &json!({}));
    wait_for("the old horn", || redis.list("out") == ["beep"]);
    assert_eq!(ruled.count_log(&["bundle reloaded"]), 0);
    // A small bundle fits beside the loaded one: taken.
    replace_by_rename(
        &bundle,
        &rulecore::codec::encode(&single(horn("toot"))).unwrap(),
    );
    let reloaded = ctl_json(&redis, &["reload"]);
    assert_eq!(reloaded["unchanged"], false, "{reloaded}");
    publish(&redis, "button.horn", &json!({}));
    wait_for("the new horn", || redis.list("out") == ["beep", "toot"]);
}

#[test]
fn a_sighup_while_redis_is_not_up_yet_is_held_and_reloads_once_ready() {
    let Setup {
        mut redis,
        dir: _dir,
        bundle,
    } = Setup::new(&single(horn("beep")));
    // Nothing listens on the socket yet.
    redis.kill();
    let ruled = Ruled::start(&redis, &bundle, &[]);
    ruled.wait_log(&["cannot connect to redis"]);
    replace_by_rename(
        &bundle,
        &rulecore::codec::encode(&single(horn("honk"))).unwrap(),
    );
    ruled.signal(Signal::SIGHUP);
    ruled.wait_log(&["SIGHUP received"]);
    // Still starting, still alive.
    let pid = i32::try_from(ruled.pid()).unwrap();
    assert!(support::alive(pid), "{}", ruled.log_text());
    redis.respawn();
    ruled.wait_log_within(Duration::from_secs(30), &["ruled ready"]);
    ruled.wait_log(&["bundle reloaded"]);
    assert!(support::alive(pid), "{}", ruled.log_text());
    publish(&redis, "button.horn", &json!({}));
    wait_for("the reloaded horn", || redis.list("out") == ["honk"]);
}

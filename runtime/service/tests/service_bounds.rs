//! What `ruled` reads, and its bounds (docs/service.md#what-ruled-reads-and-its-bounds):
//! values planted in Redis by anyone who can reach it are length-checked
//! before they are read, cannot stop a start, cannot hold the engine's
//! loop, cannot flood the log and cannot spend the replay budget. Each
//! test starts its own `redis-server` and its own `ruled`, and prints the
//! figure it measured (peak RSS, time, replayed count).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod support;

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use support::bundles::{self, hazards, payload, single};
use support::ctl::ctl;
use support::{list, now_ms, poll_within, wait_for, RedisServer, Ruled};

/// Peak resident memory of process `pid` (`VmHWM`), in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// What a bounded read may add to the peak: a few MiB of buffers.
const PEAK_MARGIN_KIB: u64 = 8 * 1024;

fn hazards_bundle(dir: &Path) -> PathBuf {
    bundles::write(dir, "rules.bundle", &single(hazards(60_000)))
}

/// The peak RSS of a `ruled` started on `bundle` with `redis` as it is
/// now, once ready and once it answered `v1.status`: the figure a test
/// compares with.
fn clean_peak(redis: &RedisServer, bundle: &Path) -> u64 {
    let mut ruled = Ruled::ready(redis, bundle, &[]);
    assert_eq!(ctl(redis, &["status"]).code, 0);
    let peak = peak_rss_kib(ruled.pid());
    assert!(ruled.stop());
    peak
}

fn assert_bounded(what: &str, peak: u64, base: u64, ruled: &Ruled) {
    eprintln!("{what}: VmHWM {peak} KiB (clean start {base} KiB)");
    assert!(
        peak < base + PEAK_MARGIN_KIB,
        "{what}: peak RSS {peak} KiB against {base} KiB clean; log:\n{}",
        clip(&ruled.log_text())
    );
}

/// The log cut for a failure message.
fn clip(text: &str) -> String {
    text.lines()
        .map(|line| line.chars().take(300).collect::<String>())
        .collect::<Vec<_>>()
        .join("\n")
}

fn longest_line(ruled: &Ruled) -> usize {
    ruled.log().iter().map(String::len).max().unwrap_or(0)
}

/// A 25 MB item pushed onto `NS:rpc` is skipped while it is read: the
/// peak RSS stays where it was, and requests after it are answered.
#[test]
fn a_huge_control_item_is_never_read_whole() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let bundle = hazards_bundle(dir.path());
    let ruled = Ruled::ready(&redis, &bundle, &[]);
    assert_eq!(ctl(&redis, &["status"]).code, 0);
    let base = peak_rss_kib(ruled.pid());
    let big = "x".repeat(25_000_000);
    let _: i64 = redis::cmd("RPUSH")
        .arg("extensions:rpc")
        .arg(&big)
        .query(&mut redis.con())
        .unwrap();
    drop(big);
    ruled.wait_log(&["control request ignored", "25000000 bytes"]);
    let status = ctl(&redis, &["status"]);
    assert_eq!(status.code, 0, "{}", status.stderr);
    assert_bounded(
        "25 MB control item",
        peak_rss_kib(ruled.pid()),
        base,
        &ruled,
    );
}

/// `NS:overrides` cannot stop a start or take memory: a field name and a
/// value that are not UTF-8, a 20 MB value for a rule of the bundle and
/// one for a rule it lacks; the oversized and non-UTF-8 entry of the
/// bundle's rule is removed with one clipped line; the others are counted.
#[test]
fn hostile_overrides_cannot_stop_a_start_or_take_memory() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let rules = vec![
        hazards(60_000),
        bundles::rule(
            "second",
            &["second.x"],
            vec![bundles::redis_step("second:out", "x", 0)],
        ),
    ];
    let bundle = bundles::write(dir.path(), "b", &payload(rules, vec![], vec![]));
    let base = clean_peak(&redis, &bundle);
    let mut con = redis.con();
    let hset = |field: &[u8], value: &[u8]| {
        redis::cmd("HSET")
            .arg("extensions:overrides")
            .arg(field)
            .arg(value)
            .exec(&mut redis.con())
            .unwrap();
    };
    hset(b"bad\xff\x1b[2J", b"disabled");
    hset(b"second", b"dis\xffabled");
    let big = vec![b'x'; 20_000_000];
    hset(b"hazards-on-alarm", &big);
    hset(b"no-such-rule", &big);
    drop(big);
    let _ = &mut con;
    let ruled = Ruled::ready(&redis, &bundle, &[]);
    let status = ctl(&redis, &["status"]);
    assert_eq!(status.code, 0, "{}", status.stderr);
    assert_bounded("20 MB overrides", peak_rss_kib(ruled.pid()), base, &ruled);
    ruled.wait_log(&["override", "hazards-on-alarm", "20000000 bytes"]);
    ruled.wait_log(&["override", "second", r"dis\xffabled"]);
    let longest = longest_line(&ruled);
    assert!(longest < 4096, "a log line of {longest} bytes");
    let kept: Vec<String> = redis::cmd("HKEYS")
        .arg("extensions:overrides")
        .query::<Vec<Vec<u8>>>(&mut redis.con())
        .unwrap()
        .into_iter()
        .map(|k| String::from_utf8_lossy(&k).into_owned())
        .collect();
    assert!(!kept.contains(&"hazards-on-alarm".to_string()), "{kept:?}");
    assert!(!kept.contains(&"second".to_string()), "{kept:?}");
    assert!(kept.contains(&"no-such-rule".to_string()), "{kept:?}");
}

/// 100,000 overrides for rules the bundle lacks: the start reads only the
/// bundle's names, and `v1.list` answers with a count.
#[test]
fn a_hundred_thousand_overrides_do_not_stop_list() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let bundle = hazards_bundle(dir.path());
    let mut con = redis.con();
    for chunk in 0..100 {
        let mut command = redis::cmd("HSET");
        command.arg("extensions:overrides");
        for n in 0..1000 {
            command.arg(format!("missing-{chunk}-{n}")).arg("disabled");
        }
        command.exec(&mut con).unwrap();
    }
    let started = Instant::now();
    let ruled = Ruled::ready(&redis, &bundle, &[]);
    eprintln!("start with 100k overrides: {:?}", started.elapsed());
    let listed = ctl(&redis, &["list", "--format", "json"]);
    assert_eq!(
        listed.code,
        0,
        "{}\n{}",
        listed.stderr,
        clip(&ruled.log_text())
    );
    let list: Value = serde_json::from_str(&listed.stdout).unwrap();
    assert_eq!(list["overrides-without-rule-count"], 100_000, "{list}");
    assert!(
        listed.stdout.len() < 64 * 1024,
        "{} bytes",
        listed.stdout.len()
    );
    let lines = ruled
        .log()
        .iter()
        .filter(|l| l.contains("missing-"))
        .count();
    assert!(lines < 20, "{lines} lines name a missing rule");
}

/// One rule on `alarm.triggered` pushing `parked:out yes` when
/// `state("vehicle", "state") == "parked"`; its bundle written in `dir`.
fn parked_rule(dir: &std::path::Path) -> std::path::PathBuf {
    let (when, consts) = bundles::state_equals("parked");
    let mut rule = bundles::rule(
        "parked",
        &["alarm.triggered"],
        vec![bundles::redis_step("parked:out", "yes", 0)],
    );
    rule.when = Some(Box::new(when));
    let state = vec![rulecore::bundle::StatePair {
        hash: "vehicle".into(),
        field: "state".into(),
    }];
    bundles::write(dir, "b", &payload(vec![rule], state, consts))
}

/// A 25 MB `vehicle state` is read as unknown with one line, and never
/// enters memory.
#[test]
fn a_huge_watched_field_is_read_as_unknown() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let bundle = parked_rule(dir.path());
    let ruled = Ruled::ready(&redis, &bundle, &[]);
    assert_eq!(ctl(&redis, &["status"]).code, 0);
    let base = peak_rss_kib(ruled.pid());
    let big = vec![b'p'; 25_000_000];
    redis::cmd("HSET")
        .arg("vehicle")
        .arg("state")
        .arg(&big)
        .exec(&mut redis.con())
        .unwrap();
    drop(big);
    let _: i64 = redis.query(&["PUBLISH", "vehicle", "state"]);
    ruled.wait_log(&["vehicle", "state", "25000000 bytes"]);
    assert_bounded(
        "25 MB vehicle state",
        peak_rss_kib(ruled.pid()),
        base,
        &ruled,
    );
    // Still working: a small value reads again.
    let _: i64 = redis.query(&["HSET", "vehicle", "state", "parked"]);
    let _: i64 = redis.query(&["PUBLISH", "vehicle", "state"]);
    let event = json!({"topic": "alarm.triggered"}).to_string();
    wait_for("the rule sees `parked`", || {
        let _: i64 = redis.query(&["PUBLISH", "ev:alarm.triggered", &event]);
        std::thread::sleep(Duration::from_millis(100));
        !list(&redis, "parked:out").is_empty()
    });
}

/// The bounded reads go by their scripts' SHA-1 (`EVALSHA`): each
/// constant is the SHA-1 Redis computes from the text, and a Redis that
/// lost its scripts (`SCRIPT FLUSH`, a restart) is sent the text again.
#[test]
fn bounded_reads_run_by_sha_and_survive_a_script_flush() {
    for script in [
        ruled::bounded_read::HMGET_SCRIPT,
        ruled::bounded_read::HMGET_EXPIRY_SCRIPT,
        ruled::guard_read::READ_SCRIPT,
    ] {
        let redis = RedisServer::start();
        let loaded: String = redis.query(&["SCRIPT", "LOAD", script.source]);
        assert_eq!(loaded, script.sha1, "the SHA-1 of:\n{}", script.source);
    }
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let bundle = parked_rule(dir.path());
    let _ruled = Ruled::ready(&redis, &bundle, &[]);
    let event = json!({"topic": "alarm.triggered"}).to_string();
    for value in ["parked", "stand-by", "parked"] {
        let _: () = redis.query(&["SCRIPT", "FLUSH"]);
        let _: i64 = redis.query(&["DEL", "parked:out"]);
        let _: i64 = redis.query(&["HSET", "vehicle", "state", value]);
        let _: i64 = redis.query(&["PUBLISH", "vehicle", "state"]);
        let sha = ruled::bounded_read::HMGET_SCRIPT.sha1;
        wait_for("the read's script kept by Redis", || {
            let kept: Vec<i64> = redis.query(&["SCRIPT", "EXISTS", sha]);
            kept == [1]
        });
        // The value read after the flush is the one `state()` sees: the
        // rule fires on `parked`, and on `stand-by` its trace says the
        // `when` was false on that value (an empty list alone proves
        // nothing right after the `DEL`).
        wait_for(&format!("the rule judges `{value}`"), || {
            let _: i64 = redis.query(&["PUBLISH", "ev:alarm.triggered", &event]);
            std::thread::sleep(Duration::from_millis(100));
            if value == "parked" {
                return !list(&redis, "parked:out").is_empty();
            }
            let trace = ctl(&redis, &["trace", "parked", "--format", "json"]);
            let json: Value = serde_json::from_str(&trace.stdout).unwrap_or_default();
            let non_fire = &json["traces"][0]["last_non_fire"];
            non_fire["reason"] == "when-false" && non_fire["read"].to_string().contains(value)
        });
        if value != "parked" {
            assert!(list(&redis, "parked:out").is_empty(), "fired on `{value}`");
        }
    }
}

/// A request naming no rule with a 65,000-character name, at 25,000
/// rules, answers at once (no "did you mean" for a name that long).
#[test]
fn a_long_unknown_name_does_not_hold_the_loop() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let rules: Vec<_> = (0..25_000)
        .map(|n| {
            bundles::rule(
                &format!("rule-number-{n:05}-{}", "r".repeat(40)),
                &["many.x"],
                vec![bundles::redis_step("many:out", "x", 0)],
            )
        })
        .collect();
    let bundle = bundles::write(dir.path(), "b", &payload(rules, vec![], vec![]));
    // Counters rarely: 25,000 rules' statistics every 200 ms would keep a
    // debug build's loop busy on a loaded machine.
    let _ruled = Ruled::ready(&redis, &bundle, &["--stats-interval", "60s"]);
    let name = "z".repeat(65_000);
    let started = Instant::now();
    let shown = ctl(&redis, &["--timeout", "10s", "show", &name]);
    let took = started.elapsed();
    eprintln!("v1.show of a 65,000-character name at 25,000 rules: {took:?}");
    assert_eq!(shown.code, 1, "{}", shown.stderr);
    assert!(
        shown.stderr.contains("has no rule"),
        "{}",
        shown.stderr.len()
    );
    assert!(!shown.stderr.contains("did you mean"));
    let near = ctl(
        &redis,
        &[
            "--timeout",
            "10s",
            "show",
            "rule-number-00007-rrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrx",
        ],
    );
    assert!(
        near.stderr.contains("did you mean"),
        "exit {}: {}",
        near.code,
        near.stderr
    );
}

/// A 1 KB pending record of a rule the bundle lacks, 20,000 times, and
/// 20,000 values that are no record: none of them costs the replay
/// budget, so the one real record is replayed.
#[test]
fn junk_pending_records_do_not_spend_the_replay_budget() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let payload = payload(vec![hazards(60_000)], vec![], vec![]);
    let bundle = bundles::write(dir.path(), "b", &payload);
    let fingerprint = payload.rules[0].steps[1].fingerprint.to_string();
    let record = |id: &str, rule: &str, pad: usize| {
        json!({
            "id": id, "rule": rule, "source": "test.toml", "step": 1,
            "iter": 0, "fire-at": now_ms() + 50_000, "fingerprint": fingerprint,
            "event": {"topic": "alarm.triggered", "data": {"pad": "p".repeat(pad)}}
        })
        .to_string()
    };
    let mut con = redis.con();
    for chunk in 0..40 {
        let mut pipe = redis::pipe();
        for n in 0..1000 {
            let id = format!("gone-{chunk}-{n}#1-1");
            if chunk % 2 == 0 {
                pipe.cmd("HSET")
                    .arg("extensions:pending")
                    .arg(&id)
                    .arg(record(&id, "gone", 800))
                    .ignore();
            } else {
                pipe.cmd("HSET")
                    .arg("extensions:pending")
                    .arg(&id)
                    .arg("j".repeat(1000))
                    .ignore();
            }
        }
        pipe.exec(&mut con).unwrap();
    }
    let real = "hazards-on-alarm#1-1";
    let _: i64 = redis.query(&[
        "HSET",
        "extensions:pending",
        real,
        &record(real, "hazards-on-alarm", 10),
    ]);
    let ruled = Ruled::ready(&redis, &bundle, &[]);
    let replayed = ruled.wait_log(&["replaying pending records"]);
    eprintln!("{replayed}");
    let pending = ctl(&redis, &["pending", "--format", "json"]);
    assert_eq!(pending.code, 0, "{}", pending.stderr);
    assert!(
        pending.stdout.contains(real),
        "{}\n{}",
        pending.stdout,
        clip(&ruled.log_text())
    );
    assert!(
        !ruled
            .log_text()
            .contains("more pending records than replay holds"),
        "{}",
        clip(&ruled.log_text())
    );
}

/// 50,000 malformed control requests give a handful of WARN lines, and
/// one saying how many more were held back.
#[test]
fn bad_control_requests_go_through_the_log_budget() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let bundle = hazards_bundle(dir.path());
    let ruled = Ruled::ready(&redis, &bundle, &["--log-level", "info"]);
    let mut con = redis.con();
    for _ in 0..50 {
        let mut command = redis::cmd("RPUSH");
        command.arg("extensions:rpc");
        for n in 0..1000 {
            command.arg(format!("junk {n}"));
        }
        command.exec(&mut con).unwrap();
    }
    wait_for("every bad request taken", || {
        let left: i64 = redis.query(&["LLEN", "extensions:rpc"]);
        left == 0
    });
    assert_eq!(ctl(&redis, &["status"]).code, 0);
    let warns = ruled
        .log()
        .iter()
        .filter(|l| l.contains("control request ignored"))
        .count();
    eprintln!("50,000 bad control requests: {warns} lines");
    assert!(warns < 100, "{warns} lines");
}

/// One client pushing junk onto `NS:rpc` as fast as it can (through the
/// push script's bound) does not lock `ruled ctl` out; with nobody
/// serving, a list full of junk is said as such.
#[test]
fn a_junk_flood_does_not_lock_the_control_plane() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let bundle = hazards_bundle(dir.path());
    let mut ruled = Ruled::ready(&redis, &bundle, &["--log-level", "info"]);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flooder = {
        let stop = std::sync::Arc::clone(&stop);
        let mut con = redis.con();
        std::thread::spawn(move || {
            let script = "if redis.call('LLEN', KEYS[1]) >= 32 then return 0 end \
                 redis.call('LPUSH', KEYS[1], ARGV[1]) return 1";
            let mut pushed = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let n: i64 = redis::cmd("EVAL")
                    .arg(script)
                    .arg(1)
                    .arg("extensions:rpc")
                    .arg("junk")
                    .query(&mut con)
                    .unwrap();
                pushed += n as u64;
            }
            pushed
        })
    };
    let mut answered = 0;
    for _ in 0..8 {
        let status = ctl(&redis, &["--timeout", "3s", "status"]);
        if status.code == 0 {
            answered += 1;
        } else {
            eprintln!("{}", status.stderr);
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let pushed = flooder.join().unwrap();
    eprintln!("junk flood of {pushed} items: {answered} of 8 answered");
    assert_eq!(answered, 8);
    assert!(ruled.stop());
    redis.query::<()>(&["DEL", "extensions:rpc"]);
    for _ in 0..32 {
        let _: i64 = redis.query(&["LPUSH", "extensions:rpc", "junk"]);
    }
    let refused = ctl(&redis, &["--timeout", "300ms", "status"]);
    assert_eq!(refused.code, 3, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("32 of them are not requests"),
        "{}",
        refused.stderr
    );
}

/// A deadline that would wrap is ignored like any other bad one, and
/// `v1.reload` refuses a payload field it does not know.
#[test]
fn a_wrapping_deadline_and_a_reload_field_are_refused() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let bundle = hazards_bundle(dir.path());
    let ruled = Ruled::ready(&redis, &bundle, &[]);
    let id = "f".repeat(32);
    let request = json!({
        "id": id, "method": "v1.status",
        "reply_channel": format!("extensions:rpc:reply:{id}"),
        "deadline": i64::MIN, "payload": {}
    })
    .to_string();
    let _: i64 = redis.query(&["LPUSH", "extensions:rpc", &request]);
    ruled.wait_log(&["control request ignored", "past its deadline"]);
    let status = ctl(&redis, &["status"]);
    assert_eq!(status.code, 0, "{}", status.stderr);
    let reload = ctl(&redis, &["call", "v1.reload", r#"{"force": true}"#]);
    assert_eq!(reload.code, 1, "{}", reload.stderr);
    assert!(reload.stderr.contains("force"), "{}", reload.stderr);
    let _ = poll_within(Duration::from_millis(1), || Some(()));
}

//! Hardening against a slow Redis, hostile datastore contents and floods
//! (docs/semantics.md#worker-pool-and-actions, docs/service.md#pending-records-hash-extensionspending,
//! docs/service.md#subscriptions): each test starts its own `redis-server`
//! and its own `ruled`.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod support;

use std::path::{Path, PathBuf};
use support::bundles::{self, hazards, payload};
use support::{commandstat, list, wait_for, RedisServer, Ruled};

/// The shipped `fixtures/rules`, built as `rulec build` does.
fn fixture_bundle(dir: &Path) -> PathBuf {
    let rules = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/rules");
    let report = rulec::session::Session::new(None).check(&rules).unwrap();
    let payload = report.assemble("test");
    bundles::write(dir, "rules.bundle", &payload)
}

/// Sends `commands` as one pipeline (one write) and waits for the replies.
fn pipelined(redis: &RedisServer, commands: &[&[&str]]) {
    let mut pipe = redis::pipe();
    for command in commands {
        pipe.cmd(command[0]).arg(&command[1..]);
    }
    pipe.exec(&mut redis.con()).unwrap();
}

/// A Redis stall longer than the old 2 s reply timeout: the pushes made
/// while Redis is paused land once it resumes, and the runs go on, so every
/// `on` gets its `off`.
#[test]
fn a_paused_redis_does_not_split_on_off_pairs() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let bundle = fixture_bundle(dir.path());
    let ruled = Ruled::ready(&redis, &bundle, &[]);
    pipelined(
        &redis,
        &[
            &[
                "PUBLISH",
                "ev:alarm.triggered",
                r#"{"topic":"alarm.triggered"}"#,
            ],
            &["CLIENT", "PAUSE", "2500", "WRITE"],
        ],
    );
    wait_for("three horn pulses, on and off", || {
        list(&redis, "scooter:horn") == ["on", "off", "on", "off", "on", "off"]
    });
    // The blinker's `off` comes 30 s after `both`: a longer deadline.
    let started = std::time::Instant::now();
    let mut done = None;
    while done.is_none() && started.elapsed() < std::time::Duration::from_secs(90) {
        done = (list(&redis, "scooter:blinker") == ["both", "off"]).then_some(());
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(
        done.is_some(),
        "blinker {:?}; log:\n{}",
        list(&redis, "scooter:blinker"),
        ruled.log_text()
    );
    let failed: Option<String> = redis.query(&["HGET", "extensions", "failed"]);
    assert_eq!(failed.as_deref(), Some("0"), "{}", ruled.log_text());
}

/// A durable `redis` step that comes due while Redis is paused for longer
/// than the step's `timeout`: the outcome is unknown, said at `warn`, and
/// the run goes on; once Redis resumes, the record's removal and the push
/// land together (one transaction, docs/service.md#durable-work-in-bulk):
/// one push, no record left.
#[test]
fn a_durable_redis_step_in_a_stall_goes_on_unknown_and_lands_once() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let mut step = bundles::redis_step("stalled:out", "x", 1_000);
    step.action = std::sync::Arc::new(rulecore::bundle::Action::Redis {
        list: "stalled:out".into(),
        push: "x".into(),
        timeout_ns: 500 * bundles::MS,
    });
    let rule = bundles::rule("stalled", &["go"], vec![step]);
    let bundle = bundles::write(dir.path(), "b", &payload(vec![rule], vec![], vec![]));
    let ruled = Ruled::ready(&redis, &bundle, &[]);
    let _: i64 = redis.query(&["PUBLISH", "ev:go", r#"{"topic":"go"}"#]);
    wait_for("the record", || {
        let records: i64 = redis.query(&["HLEN", "extensions:pending"]);
        records == 1
    });
    // Paused before the step comes due (a second after the event).
    let _: () = redis.query(&["CLIENT", "PAUSE", "2500", "WRITE"]);
    let line = ruled.wait_log(&["rule=stalled", "LPUSH outcome unknown"]);
    assert!(line.contains("no reply within 500ms"), "{line}");
    ruled.wait_log(&["rule=stalled", "reason=\"done\""]);
    wait_for("the push after the stall", || {
        list(&redis, "stalled:out") == ["x"]
    });
    wait_for("no record left", || {
        let left: i64 = redis.query(&["HLEN", "extensions:pending"]);
        left == 0
    });
    assert_eq!(list(&redis, "stalled:out"), ["x"], "pushed once");
}

/// Whatever `extensions:pending` holds, ruled starts: a field name that is
/// not UTF-8 and an oversized record are removed with a log line (the
/// name escaped), many records are read in bounded rounds, and a valid
/// record still resumes.
#[test]
fn hostile_pending_contents_cannot_stop_a_start() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let bundle = bundles::write(
        dir.path(),
        "rules.bundle",
        &payload(vec![hazards(300)], vec![], vec![]),
    );
    let mut con = redis.con();
    redis::cmd("HSET")
        .arg("extensions:pending")
        .arg(b"bad\xff\nWARN forged".as_slice())
        .arg("{}")
        .exec(&mut con)
        .unwrap();
    redis::cmd("HSET")
        .arg("extensions:pending")
        .arg("huge#1-1")
        .arg(vec![b'x'; 200 * 1024])
        .exec(&mut con)
        .unwrap();
    let mut pipe = redis::pipe();
    for n in 0..20_000 {
        pipe.cmd("HSET")
            .arg("extensions:pending")
            .arg(format!("junk#{n}"))
            .arg("not json")
            .ignore();
    }
    pipe.exec(&mut con).unwrap();
    let ruled = Ruled::ready(&redis, &bundle, &[]);
    let binary = ruled.wait_log(&["field name is not UTF-8"]);
    assert!(binary.contains(r"bad\xff\nWARN forged"), "{binary}");
    let huge = ruled.wait_log(&["over the size bound"]);
    assert!(huge.contains("huge#1-1"), "{huge}");
    wait_for("every hostile field removed", || {
        let left: i64 = redis.query(&["HLEN", "extensions:pending"]);
        left == 0
    });
    assert!(
        !ruled.log().iter().any(|l| l.starts_with("WARN forged")),
        "a field name forged a log line"
    );
}

/// Peak resident memory of process `pid` (`VmHWM`), in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Publishes `payload` on `channel` as fast as one pipelined connection
/// can, for `seconds`; returns how many went out.
fn flood(redis: &RedisServer, channel: &str, payload: &str, seconds: u64) -> u64 {
    let mut con = redis.con();
    let started = std::time::Instant::now();
    let mut sent = 0;
    while started.elapsed() < std::time::Duration::from_secs(seconds) {
        let mut pipe = redis::pipe();
        for _ in 0..1000 {
            pipe.cmd("PUBLISH").arg(channel).arg(payload).ignore();
        }
        pipe.exec(&mut con).unwrap();
        sent += 1000;
    }
    sent
}

/// Memory stays bounded whatever arrives (docs/service.md#subscriptions):
/// a 5 s event flood at the rate this machine publishes, a flood of state
/// notifications, and a 25 MB publish (skipped while it is read). Events
/// past the intake bound are dropped and counted in `overflow`; a later
/// event is still handled.
#[test]
fn floods_cannot_grow_memory() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    // 200 rules on the flooded topic: each event costs the engine work.
    let mut rules: Vec<_> = (0..200)
        .map(|n| {
            let mut step = bundles::redis_step("flood:out", "x", 60_000);
            step.durable = false;
            let mut rule = bundles::rule(&format!("flood-{n}"), &["flood.x"], vec![step]);
            rule.concurrency = rulecore::bundle::Concurrency::Drop;
            rule
        })
        .collect();
    rules.push(bundles::rule(
        "after-flood",
        &["after.flood"],
        vec![bundles::redis_step("after:out", "done", 0)],
    ));
    let state = vec![rulecore::bundle::StatePair {
        hash: "vehicle".into(),
        field: "state".into(),
    }];
    let bundle = bundles::write(
        dir.path(),
        "rules.bundle",
        &payload(rules, state, Vec::new()),
    );
    let ruled = Ruled::ready(&redis, &bundle, &["--log-level", "info"]);
    let event = format!(
        r#"{{"topic":"flood.x","src":"test","data":{{"pad":"{}"}}}}"#,
        "p".repeat(150)
    );
    // Skipped while ruled reads it, never held whole.
    let big = "x".repeat(25_000_000);
    let _: i64 = redis::cmd("PUBLISH")
        .arg("ev:flood.x")
        .arg(&big)
        .query(&mut redis.con())
        .unwrap();
    drop(big);
    ruled.wait_log(&["25000000 bytes", "skipped while read"]);
    let sent = flood(&redis, "ev:flood.x", &event, 5);
    let notified = flood(&redis, "vehicle", "state", 2);
    // Once the backlog is worked off, events are handled again (one sent
    // while the queue is still full is dropped like the flood's, so it is
    // sent until one gets through).
    let started = std::time::Instant::now();
    while list(&redis, "after:out").is_empty() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(120),
            "no event after the flood was handled; log:\n{}",
            ruled.log_text()
        );
        let _: i64 = redis.query(&["PUBLISH", "ev:after.flood", r#"{"topic":"after.flood"}"#]);
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    // Notifications of one field coalesce: far fewer reads than PUBLISHes.
    let reads = commandstat(&redis, "hget");
    assert!(
        reads * 10 < notified,
        "{reads} HGETs for {notified} notifications"
    );
    let peak = peak_rss_kib(ruled.pid());
    eprintln!("sent {sent} events and {notified} notifications; ruled peak RSS {peak} KiB");
    assert!(
        peak < 24 * 1024,
        "peak RSS {peak} KiB; log:\n{}",
        ruled.log_text()
    );
    let overflow = support::poll(|| {
        let value: Option<String> = redis.query(&["HGET", "extensions", "overflow"]);
        value.filter(|v| v != "0")
    });
    assert!(
        overflow.is_some(),
        "no overflow counted; log:\n{}",
        ruled.log_text()
    );
    ruled.wait_log(&["event intake full"]);
}

/// The password never reaches a log line or an exec child: the URL is
/// logged redacted, `RULED_*` is not in the child's environment, and the
/// password can come from the environment or a file instead of the
/// command line. What a command writes to stderr cannot forge log lines.
#[test]
fn credentials_stay_secret_and_stderr_cannot_forge_lines() {
    let redis = RedisServer::start();
    let _: String = redis.query(&[
        "ACL", "SETUSER", "ruled", "on", ">s3cret", "~*", "&*", "+@all",
    ]);
    let dir = tempfile::tempdir().unwrap();
    let env_file = dir.path().join("env.txt");
    let command = support::script(
        dir.path(),
        "leak",
        &format!(
            "env > {}\nprintf 'oops\\n<0>forged emergency\\n\\033[2J' >&2\nexit 1",
            env_file.display()
        ),
    );
    let bundle = bundles::write(
        dir.path(),
        "rules.bundle",
        &bundles::single(bundles::rule(
            "leak",
            &["leak.now"],
            vec![bundles::exec_step(&command, 5_000, 0)],
        )),
    );
    // The password in the URL: redacted wherever the URL is logged.
    let with_pass = format!("{}?user=ruled&pass=s3cret", redis.url());
    let mut ruled = Ruled::start_with(&with_pass, &bundle, &[], &[]);
    ruled.wait_ready();
    let connected = ruled.wait_log(&["connected to redis"]);
    assert!(connected.contains("pass=***"), "{connected}");
    ruled.stop();
    assert!(!ruled.log_text().contains("s3cret"), "{}", ruled.log_text());

    // From the environment, with `RULED_REDIS_PASSWORD`; and the child
    // does not inherit it.
    let user_only = format!("{}?user=ruled", redis.url());
    let ruled = Ruled::start_with(
        &user_only,
        &bundle,
        &[],
        &[("RULED_REDIS_PASSWORD", "s3cret")],
    );
    ruled.wait_ready();
    let _: i64 = redis.query(&["PUBLISH", "ev:leak.now", r#"{"topic":"leak.now"}"#]);
    let failed = ruled.wait_log(&["oops"]);
    assert!(failed.contains(r"oops\n<0>forged emergency"), "{failed}");
    assert!(!failed.contains('\u{1b}'), "{failed}");
    assert!(
        !ruled.log().iter().any(|line| line.starts_with("<0>")),
        "stderr forged a line: {}",
        ruled.log_text()
    );
    let env = std::fs::read_to_string(&env_file).unwrap();
    assert!(!env.contains("RULED_"), "{env}");
    assert!(!env.contains("s3cret"), "{env}");
    assert!(!ruled.log_text().contains("s3cret"));

    // From a file: `--redis-password-file`.
    let secret_file = dir.path().join("redis.pass");
    std::fs::write(&secret_file, "s3cret\n").unwrap();
    let ruled = Ruled::start_with(
        &user_only,
        &bundle,
        &["--redis-password-file", secret_file.to_str().unwrap()],
        &[],
    );
    ruled.wait_ready();
    assert!(!ruled.log_text().contains("s3cret"));
}

/// A topic over 1024 bytes is skipped at intake with its size, and a
/// normal event after it is handled (docs/service.md#subscriptions).
#[test]
fn an_overlong_topic_is_skipped() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let bundle = bundles::write(
        dir.path(),
        "rules.bundle",
        &bundles::single(bundles::rule(
            "dots",
            &["x.*"],
            vec![bundles::redis_step("dots:out", "seen", 0)],
        )),
    );
    let ruled = Ruled::ready(&redis, &bundle, &[]);
    let topic = format!("x.{}", ".".repeat(4000));
    let json = format!(r#"{{"topic":"{topic}"}}"#);
    let _: i64 = redis.query(&["PUBLISH", &format!("ev:{topic}"), &json]);
    ruled.wait_log(&["with a topic of 4002 bytes"]);
    let _: i64 = redis.query(&["PUBLISH", "ev:x.y", r#"{"topic":"x.y"}"#]);
    wait_for("the normal event", || list(&redis, "dots:out") == ["seen"]);
}

/// The Redis password file is read like every input file: a FIFO there
/// is refused at once with its kind (opening it for reading used to wait
/// for a writer, and `ruled` never started nor said why).
#[test]
fn a_fifo_as_the_password_file_is_refused_at_once() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let bundle = fixture_bundle(dir.path());
    let fifo = dir.path().join("redis.pass");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(made.is_ok_and(|status| status.success()), "mkfifo");
    let mut ruled = Ruled::start(
        &redis,
        &bundle,
        &["--redis-password-file", fifo.to_str().unwrap()],
    );
    let code = ruled.wait_exit();
    assert!(matches!(code, Some(c) if c != 0), "{code:?}");
    let log = ruled.log_text();
    assert!(
        log.contains("cannot read the Redis password file") && log.contains("a FIFO"),
        "{log}"
    );
}

//! Due steps the pool refused (docs/semantics.md#due-steps-the-pool-refused),
//! end to end: 10,000 overdue records in `extensions:pending`, the default
//! pool (2 workers, queue 256), one start of the real `ruled` against its
//! own `redis-server`. Every record's step runs now, once, in `fire-at`
//! order, and MONITOR shows each record removed before its push.
#![allow(clippy::unwrap_used, clippy::print_stderr)] // test code

mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use support::bundles::{self, payload};
use support::{Monitor, RedisServer, Ruled};

const RECORDS: usize = 10_000;
/// Where every step pushes its rule's name.
const LIST: &str = "done";
/// A drain of 10,000 pushes on a loaded 2-core machine, with MONITOR on.
const DRAIN_DEADLINE: Duration = Duration::from_secs(120);

fn now_ms() -> i64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    i64::try_from(since.as_millis()).unwrap()
}

fn rule_name(n: usize) -> String {
    format!("r{n:05}")
}

/// Record `n`'s `fire-at`: spread over 100 s in the past, in an order
/// unrelated to the rule names and ids (so name order would not pass),
/// with ties (every 2,000th value comes up five times).
fn fire_at(now: i64, n: usize) -> i64 {
    let slot = (n * 7_919) % 2_000;
    now - 150_000 + i64::try_from(slot).unwrap() * 50
}

#[test]
fn ten_thousand_overdue_records_all_run_at_start_once_each_in_fire_at_order() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    // One rule per record: a rule has at most one live run, and replay
    // keeps one record per rule.
    let rules: Vec<_> = (0..RECORDS)
        .map(|n| {
            let name = rule_name(n);
            bundles::rule(
                &name,
                &["x.never"],
                vec![bundles::redis_step(LIST, &name, 60_000)],
            )
        })
        .collect();
    let payload = payload(rules, vec![], vec![]);
    let bundle = bundles::write(dir.path(), "b", &payload);

    let now = now_ms();
    let mut con = redis.con();
    let mut expected: Vec<(i64, String, String)> = Vec::with_capacity(RECORDS);
    for chunk in (0..RECORDS).collect::<Vec<_>>().chunks(1_000) {
        let mut hset = redis::cmd("HSET");
        hset.arg("extensions:pending");
        for &n in chunk {
            let name = rule_name(n);
            let id = format!("{name}#1-{n}");
            let fire_at = fire_at(now, n);
            let record = serde_json::json!({
                "id": id, "rule": name, "source": "test.toml", "step": 0, "iter": 0,
                "fire-at": fire_at,
                "fingerprint": payload.rules[n].steps[0].fingerprint.to_string(),
                "event": {"topic": "x.never"}
            });
            hset.arg(&id).arg(record.to_string());
            expected.push((fire_at, id, name));
        }
        let _: i64 = hset.query(&mut con).unwrap();
    }
    // Replay's order: earliest `fire-at` first, ties by id.
    expected.sort();

    let monitor = Monitor::start(&redis, dir.path().join("monitor.txt"));
    let started = Instant::now();
    let mut ruled = Ruled::start(&redis, &bundle, &["--log-level", "info"]);
    let drained = loop {
        let len: usize = redis.query(&["LLEN", LIST]);
        let left: usize = redis.query(&["HLEN", "extensions:pending"]);
        if len >= RECORDS && left == 0 {
            break started.elapsed();
        }
        assert!(
            started.elapsed() < DRAIN_DEADLINE,
            "{len} of {RECORDS} pushed, {left} records left after {DRAIN_DEADLINE:?}; log:\n{}",
            ruled.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    eprintln!(
        "{RECORDS} overdue records drained in {:.2} s (start of ruled to the last push, \
         MONITOR on, default pool)",
        drained.as_secs_f64()
    );
    assert!(ruled.stop(), "clean exit; log:\n{}", ruled.log_text());

    // Every step ran exactly once: the list holds every name once.
    let mut pushed: Vec<String> = redis.query(&["LRANGE", LIST, "0", "-1"]);
    pushed.reverse();
    let mut sorted = pushed.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), RECORDS, "a name twice or missing");
    let dropped: Option<String> = redis.query(&["HGET", "extensions", "dropped"]);
    assert_eq!(dropped.as_deref(), Some("0"), "nothing was dropped");
    let log = ruled.log_text();
    assert!(!log.contains("left in `extensions:pending`"), "{log}");

    check_monitor(&monitor, &expected, &pushed);
}

/// MONITOR: per record, its removal (`HDEL`) comes before its push, and
/// there is exactly one of each; the removals come in `fire-at` order, in
/// batches (one `HDEL` of many records, docs/service.md#durable-work-in-bulk),
/// and so do the pushes, one by one.
fn check_monitor(monitor: &Monitor, expected: &[(i64, String, String)], pushed: &[String]) {
    let mut hdels = 0;
    let mut removals: Vec<String> = Vec::new();
    let mut pushes: Vec<String> = Vec::new();
    let mut removed_at: HashMap<String, usize> = HashMap::new();
    let mut pushed_at: HashMap<String, usize> = HashMap::new();
    for (position, (_, args)) in monitor.commands().into_iter().enumerate() {
        let command = args.first().map(|c| c.to_ascii_uppercase());
        match command.as_deref() {
            Some("HDEL") if args.get(1).is_some_and(|k| k == "extensions:pending") => {
                hdels += 1;
                for id in &args[2..] {
                    assert!(
                        removed_at.insert(id.clone(), position).is_none(),
                        "{id} removed twice"
                    );
                    removals.push(id.clone());
                }
            }
            Some("LPUSH") if args.get(1).is_some_and(|k| k == LIST) => {
                let name = args[2].clone();
                assert!(
                    pushed_at.insert(name.clone(), position).is_none(),
                    "{name} pushed twice"
                );
                pushes.push(name);
            }
            _ => {}
        }
    }
    assert_eq!(removals.len(), expected.len(), "one removal per record");
    assert_eq!(pushes.len(), expected.len(), "one push per record");
    for (_, id, name) in expected {
        assert!(
            removed_at[id] < pushed_at[name],
            "{id}: pushed before its record was removed"
        );
    }
    let ids: Vec<&String> = expected.iter().map(|(_, id, _)| id).collect();
    let removal_order: Vec<&String> = removals.iter().collect();
    assert!(
        removal_order == ids,
        "removals not in fire-at order; first difference at {:?}",
        ids.iter().zip(&removal_order).position(|(a, b)| a != b)
    );
    let names: Vec<&str> = expected.iter().map(|(_, _, name)| name.as_str()).collect();
    let push_order: Vec<&str> = pushed.iter().map(String::as_str).collect();
    assert!(
        push_order == names,
        "pushes not in fire-at order; first difference at {:?}",
        names.iter().zip(&push_order).position(|(a, b)| a != b)
    );
    assert!(
        hdels * 10 < expected.len(),
        "{hdels} HDEL commands for {} records: not batched",
        expected.len()
    );
}

/// Kill loops (docs/semantics.md#what-a-crash-or-a-power-loss-can-repeat):
/// overdue durable `redis` and `exec` steps, and `ruled` killed (SIGKILL)
/// again and again while it drains them (each kill a few ms after the
/// drain of that start got under way), then left to finish. Each `redis`
/// step runs exactly once: its record's removal and its push are one
/// transaction, done whole or not at all. No `exec` step runs twice: its
/// record is removed, and the removal confirmed, before the command
/// starts; a kill between the two loses that step (at most one per
/// worker), which MONITOR shows as a removal without its run.
#[test]
fn kill_loops_run_redis_steps_exactly_once_and_exec_steps_at_most_once() {
    const PUSHES: usize = 5_000;
    const EXECS: usize = 40;
    /// How long after the drain of a start got under way it is killed.
    const KILLS_MS: [u64; 8] = [0, 3, 6, 10, 15, 25, 40, 60];
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let mut rules: Vec<_> = (0..PUSHES)
        .map(|n| {
            let name = rule_name(n);
            let step = bundles::redis_step(LIST, &name, 60_000);
            bundles::rule(&name, &["x.never"], vec![step])
        })
        .collect();
    rules.extend((0..EXECS).map(|n| {
        let name = format!("e{n:02}");
        let body = format!("echo {name} >> {}", ran.display());
        let script = support::script(dir.path(), &format!("{name}.sh"), &body);
        bundles::rule(
            &name,
            &["x.never"],
            vec![bundles::exec_step(&script, 10_000, 60_000)],
        )
    }));
    let payload = payload(rules, vec![], vec![]);
    let bundle = bundles::write(dir.path(), "b", &payload);
    let now = now_ms();
    let mut hset = redis::cmd("HSET");
    hset.arg("extensions:pending");
    for (n, rule) in payload.rules.iter().enumerate() {
        let id = format!("{}#1-{n}", rule.name);
        let record = serde_json::json!({
            "id": id, "rule": rule.name, "source": "test.toml", "step": 0, "iter": 0,
            "fire-at": fire_at(now, n),
            "fingerprint": rule.steps[0].fingerprint.to_string(),
            "event": {"topic": "x.never"}
        });
        hset.arg(&id).arg(record.to_string());
    }
    let _: i64 = hset.query(&mut redis.con()).unwrap();

    let monitor = Monitor::start(&redis, dir.path().join("monitor.txt"));
    let left = || redis.query::<usize>(&["HLEN", "extensions:pending"]);
    let mut kills = 0;
    for kill_ms in KILLS_MS {
        let before = left();
        if before == 0 {
            break;
        }
        let mut ruled = Ruled::start(&redis, &bundle, &["--log-level", "info"]);
        let started = Instant::now();
        while left() == before && started.elapsed() < DRAIN_DEADLINE {
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(kill_ms));
        ruled.crash();
        kills += 1;
    }
    let mut ruled = Ruled::start(&redis, &bundle, &["--log-level", "info"]);
    ruled.wait_ready();
    let started = Instant::now();
    while left() > 0 {
        assert!(
            started.elapsed() < DRAIN_DEADLINE,
            "records left; log:\n{}",
            ruled.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The last actions (their records removed) finish before the stop.
    let pid = ruled.pid().to_string();
    support::wait_for("every step that started finished", || {
        let counters: Vec<Option<String>> =
            redis.query(&["HMGET", "extensions", "pid", "runs-active"]);
        counters == [Some(pid.clone()), Some("0".to_string())]
    });
    assert!(ruled.stop(), "clean exit; log:\n{}", ruled.log_text());

    let pushed: Vec<String> = redis.query(&["LRANGE", LIST, "0", "-1"]);
    let execs: Vec<String> = std::fs::read_to_string(&ran)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect();
    let mut once: HashMap<&str, usize> = HashMap::new();
    for name in pushed.iter().chain(&execs) {
        *once.entry(name).or_default() += 1;
    }
    let twice: Vec<_> = once.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "steps that ran twice: {twice:?}");
    // A step that did not run lost its record to a kill between its
    // removal and its action: its removal is in MONITOR, its action not.
    let removed: std::collections::HashSet<String> = monitor
        .commands()
        .into_iter()
        .filter(|(_, args)| {
            args.first().is_some_and(|c| c.eq_ignore_ascii_case("HDEL"))
                && args.get(1).is_some_and(|k| k == "extensions:pending")
        })
        .flat_map(|(_, args)| args.into_iter().skip(2))
        .collect();
    let lost: Vec<&str> = payload
        .rules
        .iter()
        .map(|rule| &*rule.name)
        .filter(|name| !once.contains_key(name))
        .collect();
    for name in &lost {
        assert!(
            removed.iter().any(|id| id.starts_with(&format!("{name}#"))),
            "{name} neither ran nor had its record removed"
        );
    }
    let pushes_lost = lost.iter().filter(|name| !name.starts_with('e')).count();
    assert_eq!(pushes_lost, 0, "redis steps lost: {lost:?}");
    assert!(
        lost.len() <= kills * 2,
        "{} exec steps lost to {kills} kills: {lost:?}",
        lost.len(),
    );
    eprintln!(
        "{kills} kills: {} of {} steps ran once, {} exec steps lost between a removal and \
         its command, none twice",
        once.len(),
        PUSHES + EXECS,
        lost.len()
    );
}

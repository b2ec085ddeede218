//! Schedules and the pending file with the real `ruled` and a real
//! `redis-server` (docs/rules.md#schedules, docs/service.md#the-pending-file):
//! a rule `every = "2s"` fires on the real clock; a durable step survives
//! SIGTERM + FLUSHALL + a start with `--pending-file`, once; a corrupt
//! file is reported and removed; a hibernate state writes the file, an
//! idle scooter never does.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod support;

use rulecore::schedule::Schedule;
use support::bundles::{exec_step, hazards, payload, redis_step, rule, single};
use support::{list, now_ms, wait_for, RedisServer, Ruled, Setup};

fn publish(redis: &RedisServer, topic: &str, json: &str) -> i64 {
    redis.query(&["PUBLISH", &format!("ev:{topic}"), json])
}

fn pending_ids(redis: &RedisServer) -> Vec<String> {
    redis.query(&["HKEYS", "extensions:pending"])
}

#[test]
fn a_rule_every_two_seconds_fires_on_the_real_clock() {
    let mut tick = rule("tick", &[], vec![redis_step("scooter:blinker", "left", 0)]);
    tick.options_mut().schedule = Schedule {
        at: Box::default(),
        every_s: 2,
    };
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&single(tick));
    let ruled = Ruled::ready(&redis, &bundle, &[]);
    wait_for("two fires", || list(&redis, "scooter:blinker").len() >= 2);
    // Each fire is kept in NS:schedule, on the 2 s grid.
    let last: String = redis.query(&["HGET", "extensions:schedule", "tick"]);
    let last: i64 = last.parse().unwrap();
    assert_eq!(last % 2_000, 0, "on the grid: {last}");
    assert!(last <= now_ms());
    let log = ruled.log_text();
    assert!(!log.contains("ERROR"), "{log}");
}

#[test]
fn a_durable_step_survives_sigterm_flushall_and_runs_once_at_its_time() {
    let Setup { redis, dir, bundle } = Setup::new(&single(hazards(6_000)));
    let file = dir.path().join("pending.bin");
    let file_arg = file.to_str().unwrap().to_string();
    let mut ruled = Ruled::ready(&redis, &bundle, &["--pending-file", &file_arg]);
    publish(&redis, "alarm.triggered", r#"{"topic":"alarm.triggered"}"#);
    wait_for("both and a record", || {
        list(&redis, "scooter:blinker") == ["both"] && pending_ids(&redis).len() == 1
    });
    let id = pending_ids(&redis).remove(0);
    let json: String = redis.query(&["HGET", "extensions:pending", &id]);
    let record: serde_json::Value = serde_json::from_str(&json).unwrap();
    let fire_at = record["fire-at"].as_i64().unwrap();
    assert!(ruled.stop(), "clean stop: {}", ruled.log_text());
    assert!(file.exists(), "written at stop: {}", ruled.log_text());
    // The reboot: Redis keeps nothing.
    let _: () = redis.query(&["FLUSHALL"]);

    let mut again = Ruled::ready(&redis, &bundle, &["--pending-file", &file_arg]);
    again.wait_log(&["pending records put back from the pending file"]);
    wait_for("off, once, at its time", || {
        list(&redis, "scooter:blinker") == ["off"]
    });
    let seen = now_ms();
    assert!(seen >= fire_at, "fired {}ms early", fire_at - seen);
    wait_for("record removed", || pending_ids(&redis).is_empty());
    assert!(!file.exists(), "removed once the records were in Redis");
    assert!(again.stop());
    // A second start has nothing to run again.
    let third = Ruled::ready(&redis, &bundle, &["--pending-file", &file_arg]);
    let _: () = redis.query(&["RPUSH", "scooter:blinker", "marker"]);
    wait_for("the marker", || list(&redis, "scooter:blinker").len() == 2);
    let blinker = list(&redis, "scooter:blinker");
    assert_eq!(
        blinker.iter().filter(|v| *v == "off").count(),
        1,
        "{blinker:?}"
    );
    assert!(
        !third.log_text().contains("put back"),
        "{}",
        third.log_text()
    );
}

#[test]
fn a_corrupt_pending_file_is_reported_and_removed() {
    let Setup { redis, dir, bundle } = Setup::new(&single(hazards(300)));
    let file = dir.path().join("pending.bin");
    let file_arg = file.to_str().unwrap().to_string();
    // A header promising two records, one truncated record.
    std::fs::write(
        &file,
        b"ruled-pending 1 1700000000000 2 00\n{\"id\":\"x#1-1\"",
    )
    .unwrap();
    let ruled = Ruled::ready(&redis, &bundle, &["--pending-file", &file_arg]);
    ruled.wait_log(&["pending file is corrupt", "removed"]);
    assert!(!file.exists());
    // Nothing else lost: the rules work.
    publish(&redis, "alarm.triggered", r#"{"topic":"alarm.triggered"}"#);
    wait_for("both, then off", || {
        list(&redis, "scooter:blinker") == ["both", "off"]
    });
}

#[test]
fn a_hibernate_state_writes_the_file_and_an_idle_scooter_never_does() {
    // A wait inside the replay window: the minute's write leaves it alone.
    let Setup { redis, dir, bundle } = Setup::new(&single(hazards(120_000)));
    let file = dir.path().join("pending.bin");
    let file_arg = file.to_str().unwrap().to_string();
    let args = ["--pending-file", &file_arg, "--stats-interval", "100ms"];
    let ruled = Ruled::start_with(
        &redis.url(),
        &bundle,
        &args,
        &[("RULED_LOG_LEVEL", "debug")],
    );
    ruled.wait_ready();
    // Idle: nothing waits; a hibernation writes nothing.
    let _: () = redis.query(&["HSET", "power-manager", "state", "hibernating-imminent"]);
    // Published until heard: the watch subscribes beside the start.
    let heard = support::poll(|| {
        let _: i64 = redis.query(&["PUBLISH", "power-manager", "state"]);
        ruled
            .log_text()
            .contains("pending file not written: nothing waits")
            .then_some(())
    });
    assert!(
        heard.is_some(),
        "the idle hibernation heard: {}",
        ruled.log_text()
    );
    assert!(!file.exists());
    let _: () = redis.query(&["HSET", "power-manager", "state", "running"]);
    let _: i64 = redis.query(&["PUBLISH", "power-manager", "state"]);

    publish(&redis, "alarm.triggered", r#"{"topic":"alarm.triggered"}"#);
    wait_for("a record", || pending_ids(&redis).len() == 1);
    assert!(!file.exists(), "a wait inside the window is not written");
    let before = std::time::SystemTime::now();
    let _: () = redis.query(&["HSET", "power-manager", "state", "hibernating"]);
    wait_for("the file, written on hibernate", || {
        let _: i64 = redis.query(&["PUBLISH", "power-manager", "state"]);
        file.exists()
    });
    let modified = std::fs::metadata(&file).unwrap().modified().unwrap();
    assert!(modified >= before - std::time::Duration::from_secs(1));
    let bytes = std::fs::read(&file).unwrap();
    assert!(
        bytes.starts_with(b"ruled-pending 1 "),
        "{}",
        String::from_utf8_lossy(&bytes)
    );
    assert!(String::from_utf8_lossy(&bytes).contains("hazards-on-alarm"));
}

/// A durable step that comes due while every worker is busy waits in the
/// pool's queue with its record in Redis; a stop then abandons it, and the
/// record it keeps must be in the pending file too (the copy drops a
/// record when its worker removes it, as the action starts, not when the
/// job is handed over).
#[test]
fn a_durable_step_queued_at_stop_is_in_the_pending_file() {
    let mut pid_file = std::path::PathBuf::new();
    let Setup { redis, dir, bundle } = Setup::with(|dir| {
        let (busy, pid) = support::busy_script(dir, "busy.sh");
        pid_file = pid;
        let late = support::script(dir, "late.sh", "true");
        payload(
            vec![
                rule("busy", &["x.busy"], vec![exec_step(&busy, 600_000, 0)]),
                rule("late", &["x.late"], vec![exec_step(&late, 5_000, 300)]),
            ],
            Vec::new(),
            Vec::new(),
        )
    });
    let file = dir.path().join("pending.bin");
    let file_arg = file.to_str().unwrap().to_string();
    let args = ["--workers", "1", "--pending-file", &file_arg];
    let mut ruled = Ruled::start_with(
        &redis.url(),
        &bundle,
        &args,
        &[("RULED_LOG_LEVEL", "debug")],
    );
    ruled.wait_ready();
    publish(&redis, "x.busy", r#"{"topic":"x.busy"}"#);
    support::wait_pid(&pid_file);
    publish(&redis, "x.late", r#"{"topic":"x.late"}"#);
    ruled.wait_log(&["action queued: every worker is busy"]);
    let ids = pending_ids(&redis);
    assert_eq!(ids.len(), 1, "the queued step's record: {ids:?}");
    assert!(ruled.stop(), "clean stop: {}", ruled.log_text());
    assert_eq!(pending_ids(&redis), ids, "abandoned: its record stays");
    let bytes = std::fs::read(&file).unwrap_or_default();
    let text = String::from_utf8_lossy(&bytes);
    assert!(
        text.starts_with("ruled-pending 1 ") && text.contains(&ids[0]),
        "the record in the file: {text:?}\n{}",
        ruled.log_text()
    );
}

/// After a reboot Redis holds no `NS:schedule` (Valkey keeps nothing): the
/// start writes each scheduled rule's baseline at once, so a fire missed
/// in a later downtime still runs at the next start.
#[test]
fn a_start_after_flushall_writes_the_schedule_baselines() {
    let mut night = rule("night", &[], vec![redis_step("scooter:alarm", "arm", 0)]);
    // 00:00:01 local: not during this test, whatever the zone.
    night.options_mut().schedule = Schedule {
        at: vec![1].into(),
        every_s: 0,
    };
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&single(night));
    let _: () = redis.query(&["FLUSHALL"]);
    let before = now_ms();
    let _ruled = Ruled::ready(&redis, &bundle, &[]);
    let mut last = None;
    wait_for("the baseline in NS:schedule", || {
        last = redis.query::<Option<String>>(&["HGET", "extensions:schedule", "night"]);
        last.is_some()
    });
    let last: i64 = last.unwrap().parse().unwrap();
    assert!(last >= before && last <= now_ms(), "{before} <= {last}");
}

/// A held replay (the wall clock before the pending file's time) comes
/// after the subscription, when events have started runs of their own:
/// it replays the file's records only, never this process's own records
/// (which replay's concurrency would drop, losing their durability).
#[test]
fn a_held_replay_leaves_the_records_of_live_runs_alone() {
    let Setup { redis, dir, bundle } = Setup::new(&single(hazards(30_000)));
    // A real record, from a first run.
    let mut first = Ruled::ready(&redis, &bundle, &[]);
    publish(&redis, "alarm.triggered", r#"{"topic":"alarm.triggered"}"#);
    wait_for("a record", || pending_ids(&redis).len() == 1);
    let old_id = pending_ids(&redis).remove(0);
    let json: String = redis.query(&["HGET", "extensions:pending", &old_id]);
    assert!(first.stop());
    let _: () = redis.query(&["FLUSHALL"]);
    // The file, written 1.5 s from now: the replay is held until then.
    let records = std::collections::BTreeMap::from([(old_id.clone(), (0, json))]);
    let bytes = ruled::pending_file::encode(now_ms() + 1_500, &records);
    let file = dir.path().join("pending.bin");
    std::fs::write(&file, bytes).unwrap();
    let file_arg = file.to_str().unwrap().to_string();
    let args = ["--pending-file", &file_arg, "--stats-interval", "100ms"];
    let ruled = Ruled::start_with(
        &redis.url(),
        &bundle,
        &args,
        &[("RULED_LOG_LEVEL", "debug")],
    );
    ruled.wait_ready();
    ruled.wait_log(&["replay is held"]);
    // An event while held: a live run with its own record.
    publish(&redis, "alarm.triggered", r#"{"topic":"alarm.triggered"}"#);
    wait_for("the live run's record", || pending_ids(&redis).len() == 1);
    let live_id = pending_ids(&redis).remove(0);
    assert_ne!(live_id, old_id);
    ruled.wait_log(&["passed the pending file's write time"]);
    wait_for(
        "the file's record replayed (dropped: the live run wins)",
        || ruled.log_text().contains(&old_id) && !pending_ids(&redis).contains(&old_id),
    );
    assert_eq!(
        pending_ids(&redis),
        [live_id],
        "the live run keeps its record: {}",
        ruled.log_text()
    );
}

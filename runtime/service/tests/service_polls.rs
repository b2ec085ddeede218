//! Polls (docs/sources.md#polls) end to end, with the built-in Librescoot
//! profile compiled by the `rulec` library: a field written without a
//! notification (`engine-ecu` `speed`) reaches `state()` through the poll
//! while a rule reads it, and no poll runs when no rule does.
#![allow(clippy::unwrap_used)]

mod support;

use std::path::{Path, PathBuf};
use support::{wait_for, RedisServer, Ruled};

/// `rules` (one file's text) built with the built-in profile, written to
/// `dir/rules.bundle`.
fn bundle(dir: &Path, rules: &str) -> PathBuf {
    use rulec::profile::{self, ProfileChoice};
    let rules_dir = dir.join("rules");
    std::fs::create_dir_all(&rules_dir).unwrap();
    std::fs::write(rules_dir.join("rules.toml"), rules).unwrap();
    let loaded = profile::load(&ProfileChoice::Builtin)
        .unwrap()
        .map(std::sync::Arc::new);
    let report = rulec::session::Session::new(loaded.clone())
        .check(&rules_dir)
        .unwrap();
    assert_eq!(report.errors(), 0, "{:?}", report.diagnostics);
    let built = report.build().unwrap();
    let path = dir.join("rules.bundle");
    std::fs::write(&path, &built.bytes).unwrap();
    path
}

/// `ruled ctl status --format json`'s `bus` object.
fn bus_status(redis: &RedisServer) -> serde_json::Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ruled"))
        .args(["ctl", "--redis", &redis.url(), "status", "--format", "json"])
        .env_remove("RULED_NAMESPACE")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    status["bus"].clone()
}

const READS_SPEED: &str = r#"
[[topic]]
name = "bench.tick"

[[rule]]
name = "too-fast"
on = ["bench.tick"]
when = 'int(state("engine-ecu", "speed")) > 25'

[[rule.step]]
do = "redis"
list = "test:out"
push = "fast"
"#;

#[test]
fn a_silent_field_reaches_state_through_the_poll() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let bundle = bundle(dir.path(), READS_SPEED);
    redis.query::<i64>(&["HSET", "engine-ecu", "speed", "10"]);
    let ruled = Ruled::ready(&redis, &bundle, &[]);
    assert_eq!(bus_status(&redis)["polls"], 1, "the engine-ecu poll runs");
    // ecu-service writes the speed on every frame and announces nothing.
    redis.query::<i64>(&["HSET", "engine-ecu", "speed", "30"]);
    let tick = r#"{"topic":"bench.tick"}"#;
    wait_for("the poll to read 30 (a tick then acts)", || {
        redis.query::<i64>(&["PUBLISH", "ev:bench.tick", tick]);
        redis.list("test:out").contains(&"fast".to_string())
    });
    drop(ruled);
}

#[test]
fn no_poll_runs_while_no_rule_reads_its_fields() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let rules = r#"
[[rule]]
name = "parked"
on = ["vehicle.state.changed"]

[[rule.step]]
do = "redis"
list = "scooter:blinker"
push = "off"
"#;
    let bundle = bundle(dir.path(), rules);
    let _ruled = Ruled::ready(&redis, &bundle, &[]);
    let bus = bus_status(&redis);
    assert_eq!(bus["polls"], 0, "{bus}");
    assert_eq!(bus["mode"], "own", "{bus}");
}

//! The trust model of the control protocol (docs/operating.md#trust),
//! end to end against a real `redis-server`, a real `ruled` and the `ruled
//! ctl` binary: signed replies against a competing consumer of `NS:rpc`,
//! `--control-mutations signed`, `protected = true`, the key file's mode,
//! escaped output, and the documented Redis ACL lines.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

mod support;

use ruled::control::protocol::ShowReply;
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use support::bundles::hazards;
use support::ctl::{ctl, ctl_at};
use support::{wait_for, RedisServer, Ruled, Setup};

const RULE: &str = "hazards-on-alarm";

/// A control key file of mode 0600 in `dir`.
fn key_file(dir: &Path) -> PathBuf {
    let path = dir.join("control.key");
    std::fs::write(&path, "3f9a1c0e7b2d4f6a8c1e3b5d7f9a2c4e\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

fn enabled(redis: &RedisServer, key: &Path) -> bool {
    let key = key.to_str().unwrap();
    let out = ctl(
        redis,
        &["--control-key", key, "show", RULE, "--format", "json"],
    );
    assert_eq!(out.code, 0, "{out:?}");
    let shown: ShowReply = serde_json::from_str(&out.stdout).unwrap();
    shown.state.enabled
}

/// A competing consumer of `NS:rpc`: pops requests and answers each with
/// a forged "ok", as a rogue client on the scooter's Valkey could. Stops
/// when dropped.
struct Forger {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<usize>>,
}

impl Forger {
    fn start(redis: &RedisServer, list: &str) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let mut con = redis.con();
        let list = list.to_string();
        let thread = std::thread::spawn(move || {
            let mut answered = 0;
            while !flag.load(Ordering::Relaxed) {
                let popped: Option<(String, String)> = redis::cmd("BRPOP")
                    .arg(&list)
                    .arg(0.2)
                    .query(&mut con)
                    .unwrap();
                let Some((_, text)) = popped else { continue };
                let request: Value = serde_json::from_str(&text).unwrap();
                let forged = json!({
                    "ok": true,
                    "payload": {"name": request["payload"]["name"], "enabled": false,
                                "changed": true, "message": "turned off now"},
                    "error": ""
                });
                let _: i64 = redis::cmd("PUBLISH")
                    .arg(request["reply_channel"].as_str().unwrap())
                    .arg(forged.to_string())
                    .query(&mut con)
                    .unwrap();
                answered += 1;
            }
            answered
        });
        Self {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops the thread; how many requests it answered.
    fn finish(mut self) -> usize {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().map_or(0, |t| t.join().unwrap())
    }
}

impl Drop for Forger {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

const DANGER: &str = "competing consumer";

/// MUST SHOW (docs/operating.md#the-control-key): with a competing
/// consumer on `NS:rpc` answering "ok", `ruled ctl set-enabled` without a
/// key exits 0 although `ruled` never saw the request (today's behaviour);
/// with `--control-key` every forged answer is exit 5 naming the danger,
/// and `ruled`'s own signed answers still pass.
#[test]
fn a_competing_consumer_answering_ok_is_caught_by_the_control_key() {
    let Setup { redis, dir, bundle } = Setup::new(&support::bundles::single(hazards(60_000)));
    let key = key_file(dir.path());
    let key_arg = key.to_str().unwrap();

    // The forger alone: without a key its "ok" is believed.
    let forger = Forger::start(&redis, "extensions:rpc");
    let fooled = ctl(&redis, &["set-enabled", RULE, "off"]);
    assert_eq!(fooled.code, 0, "{fooled:?}");
    let caught = ctl(
        &redis,
        &["--control-key", key_arg, "set-enabled", RULE, "off"],
    );
    assert_eq!(caught.code, 5, "{caught:?}");
    assert!(caught.stderr.contains(DANGER), "{}", caught.stderr);
    assert!(
        caught.stderr.contains("not signed with the control key"),
        "{}",
        caught.stderr
    );
    assert_eq!(forger.finish(), 2);

    // Beside a real ruled: the two take turns popping; every answer is
    // either ruled's (signed, exit 0) or the forger's (exit 5).
    let ruled = Ruled::ready(&redis, &bundle, &["--control-key", key_arg]);
    let forger = Forger::start(&redis, "extensions:rpc");
    let mut codes = Vec::new();
    for _ in 0..6 {
        let out = ctl(
            &redis,
            &["--control-key", key_arg, "set-enabled", RULE, "off"],
        );
        match out.code {
            0 => assert!(out.stdout.contains("is off"), "{out:?}"),
            5 => assert!(out.stderr.contains(DANGER), "{out:?}"),
            _ => panic!("unexpected: {out:?}"),
        }
        codes.push(out.code);
    }
    let forged = forger.finish();
    assert!(codes.contains(&5) && codes.contains(&0), "{codes:?}");
    assert_eq!(codes.iter().filter(|&&c| c == 5).count(), forged);
    // What ruled did see, it logged at warn with the rule and the change.
    ruled.wait_log(&["WARN", "control request v1.set-enabled", RULE, "disabled"]);
}

/// `--control-mutations signed`: an unsigned change is refused with an
/// error naming the flag, reads still work unsigned, a signed change is
/// served; a reply without a key is still decodable (lsc's view).
#[test]
fn signed_mutations_refuse_unsigned_changes() {
    let Setup { redis, dir, bundle } = Setup::new(&support::bundles::single(hazards(60_000)));
    let key = key_file(dir.path());
    let key_arg = key.to_str().unwrap();
    let ruled = Ruled::ready(
        &redis,
        &bundle,
        &["--control-key", key_arg, "--control-mutations", "signed"],
    );
    let refused = ctl(&redis, &["set-enabled", RULE, "off"]);
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(
        refused.stderr.contains("--control-mutations signed"),
        "{}",
        refused.stderr
    );
    let reload = ctl(&redis, &["reload"]);
    assert_eq!(reload.code, 1, "{reload:?}");
    assert!(enabled(&redis, &key));
    // Unsigned reads are served; the reply's extra field breaks no decoder.
    let status = ctl(&redis, &["status", "--format", "json"]);
    assert_eq!(status.code, 0, "{status:?}");

    let signed = ctl(
        &redis,
        &["--control-key", key_arg, "set-enabled", RULE, "off"],
    );
    assert_eq!(signed.code, 0, "{signed:?}");
    assert!(!enabled(&redis, &key));
    ruled.wait_log(&["WARN", "control request refused", "v1.set-enabled"]);
    ruled.wait_log(&["WARN", "control request v1.set-enabled", "signed=true"]);
    let reloaded = ctl(&redis, &["--control-key", key_arg, "reload"]);
    assert_eq!(reloaded.code, 0, "{reloaded:?}");
    ruled.wait_log(&["INFO", "control request v1.reload", "signed=true"]);
}

/// A request signed with another key is refused; a signed request pushed
/// again (by whoever read it off `NS:rpc`) is served once, then refused as
/// a replay.
#[test]
fn a_replayed_or_wrongly_signed_request_is_refused() {
    let Setup { redis, dir, bundle } = Setup::new(&support::bundles::single(hazards(60_000)));
    let key = key_file(dir.path());
    let key_arg = key.to_str().unwrap();

    // No ruled yet: a tap takes the signed request off the list and keeps
    // it, while the ctl that sent it waits for an answer.
    let mut tap = redis.con();
    let mut waiting = Command::new(env!("CARGO_BIN_EXE_ruled"));
    waiting
        .args(["ctl", "--redis", &redis.url(), "--control-key", key_arg])
        .args(["--timeout", "25s", "set-enabled", RULE, "off"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let waiting = waiting.spawn().unwrap();
    let (_, captured): (String, String) = redis::cmd("BRPOP")
        .arg("extensions:rpc")
        .arg(20)
        .query(&mut tap)
        .unwrap();
    assert!(captured.contains("\"signature\":"), "{captured}");

    let ruled = Ruled::ready(&redis, &bundle, &["--control-key", key_arg]);
    let other = dir.path().join("other.key");
    std::fs::write(&other, "a different key, 32 bytes long!!\n").unwrap();
    std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o600)).unwrap();
    let wrong = ctl(
        &redis,
        &[
            "--control-key",
            other.to_str().unwrap(),
            "set-enabled",
            RULE,
            "off",
        ],
    );
    // ruled refuses it, and signs the refusal with its own key, which this
    // ctl cannot verify either: exit 5.
    assert_eq!(wrong.code, 5, "{wrong:?}");
    ruled.wait_log(&["control request refused", "does not verify"]);
    assert!(enabled(&redis, &key));

    // The captured request, pushed for ruled: served once (the waiting ctl
    // gets ruled's signed answer), refused the second time.
    let _: i64 = redis.query(&["LPUSH", "extensions:rpc", &captured]);
    let out = waiting.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(!enabled(&redis, &key));
    let _: i64 = redis.query(&["LPUSH", "extensions:rpc", &captured]);
    ruled.wait_log(&["control request refused", "replay"]);
}

/// docs/operating.md#trust: a signed request is served once, also across a restart:
/// its id is kept in Redis (`NS:seen:<id>`, expiring at its deadline)
/// before it is acted on, so the same request pushed again after `ruled`
/// restarted, within its deadline, is refused as a replay.
#[test]
fn a_signed_request_replayed_after_a_restart_is_refused() {
    let Setup { redis, dir, bundle } = Setup::new(&support::bundles::single(hazards(60_000)));
    let key = key_file(dir.path());
    let key_arg = key.to_str().unwrap();
    // No ruled yet: a tap takes the signed request off the list and keeps
    // it, while the ctl that sent it waits (29 s, under the 30 s window).
    let mut tap = redis.con();
    let mut waiting = Command::new(env!("CARGO_BIN_EXE_ruled"));
    waiting
        .args(["ctl", "--redis", &redis.url(), "--control-key", key_arg])
        .args(["--timeout", "29s", "set-enabled", RULE, "off"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let waiting = waiting.spawn().unwrap();
    let (_, captured): (String, String) = redis::cmd("BRPOP")
        .arg("extensions:rpc")
        .arg(20)
        .query(&mut tap)
        .unwrap();
    let id = serde_json::from_str::<Value>(&captured).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();

    let mut ruled = Ruled::ready(&redis, &bundle, &["--control-key", key_arg]);
    let _: i64 = redis.query(&["LPUSH", "extensions:rpc", &captured]);
    let out = waiting.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let seen = format!("extensions:seen:{id}");
    let left: i64 = redis.query(&["PTTL", &seen]);
    assert!((1..=30_000).contains(&left), "{seen}: PTTL {left}");

    // The other way back on: a restart forgets what the process knew.
    assert!(ruled.stop());
    let _: i64 = redis.query(&["HDEL", "extensions:overrides", RULE]);
    let ruled = Ruled::ready(&redis, &bundle, &["--control-key", key_arg]);
    assert!(enabled(&redis, &key));
    let _: i64 = redis.query(&["LPUSH", "extensions:rpc", &captured]);
    ruled.wait_log(&["control request refused", "replay"]);
    assert!(enabled(&redis, &key), "the replay turned the rule off");
}

/// `protected = true`: an override naming the rule is ignored at start
/// with a warning; unsigned, it cannot be turned off; signed, it can, and
/// a reload keeps that; the next start has it on again.
#[test]
fn a_protected_rule_turns_off_only_when_signed() {
    let mut rule = hazards(60_000);
    rule.options_mut().protected = true;
    let Setup { redis, dir, bundle } = Setup::new(&support::bundles::single(rule));
    let key = key_file(dir.path());
    let key_arg = key.to_str().unwrap();
    let _: i64 = redis.query(&["HSET", "extensions:overrides", RULE, "disabled"]);
    let mut ruled = Ruled::ready(&redis, &bundle, &["--control-key", key_arg]);
    ruled.wait_log(&["WARN", "override ignored", RULE, "protected"]);
    assert!(enabled(&redis, &key));

    let refused = ctl(&redis, &["set-enabled", RULE, "off"]);
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(
        refused.stderr.contains("is protected"),
        "{}",
        refused.stderr
    );
    assert!(enabled(&redis, &key));

    let signed = ctl(
        &redis,
        &["--control-key", key_arg, "set-enabled", RULE, "off"],
    );
    assert_eq!(signed.code, 0, "{signed:?}");
    assert!(!enabled(&redis, &key));
    let reloaded = ctl(&redis, &["--control-key", key_arg, "reload"]);
    assert_eq!(reloaded.code, 0, "{reloaded:?}");
    assert!(!enabled(&redis, &key), "a reload keeps a signed change");

    assert!(ruled.stop());
    let ruled = Ruled::ready(&redis, &bundle, &["--control-key", key_arg]);
    ruled.wait_log(&["WARN", "override ignored", RULE]);
    assert!(enabled(&redis, &key), "the next start has it on again");
}

/// A key file group or others may read stops ruled at start, naming the
/// file and its mode; `ruled ctl` refuses it the same way (exit 2).
#[test]
fn a_key_file_others_may_read_stops_ruled() {
    let Setup { redis, dir, bundle } = Setup::new(&support::bundles::single(hazards(60_000)));
    let key = key_file(dir.path());
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let key_arg = key.to_str().unwrap();
    let mut ruled = Ruled::start(&redis, &bundle, &["--control-key", key_arg]);
    assert_eq!(ruled.wait_exit(), Some(1));
    let log = ruled.log_text();
    assert!(log.contains(key_arg) && log.contains("0644"), "{log}");
    let out = ctl(&redis, &["--control-key", key_arg, "status"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("0644"), "{}", out.stderr);
    let mut ruled = Ruled::start(&redis, &bundle, &["--control-mutations", "signed"]);
    assert_eq!(ruled.wait_exit(), Some(1));
    assert!(ruled.log_text().contains("--control-key"));
}

/// Control characters planted in an override field reach no terminal:
/// `ruled ctl list` prints them escaped, in text and in JSON, and an error
/// echoing a planted name is escaped too.
#[test]
fn ruled_ctl_escapes_planted_control_characters() {
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&support::bundles::single(hazards(60_000)));
    let planted = "evil\u{1b}[2J\u{1b}]0;owned\u{7}\rrule\u{9b}1m";
    let _: i64 = redis.query(&["HSET", "extensions:overrides", planted, "disabled"]);
    let _ruled = Ruled::ready(&redis, &bundle, &[]);
    let raw = |text: &str| {
        text.chars()
            .any(|c| (c.is_control() && c != '\n') || c == '\u{7f}')
    };
    for format in ["text", "json"] {
        let out = ctl(&redis, &["list", "--format", format]);
        assert_eq!(out.code, 0, "{out:?}");
        assert!(!raw(&out.stdout), "{format}: {:?}", out.stdout);
        assert!(out.stdout.contains("evil"), "{format}: {}", out.stdout);
    }
    let out = ctl(&redis, &["list"]);
    assert!(out.stdout.contains("evil\\u{1b}[2J"), "{}", out.stdout);
    assert!(out.stdout.contains("\\r"), "{}", out.stdout);
    let missing = ctl(&redis, &["show", planted]);
    assert_eq!(missing.code, 1, "{missing:?}");
    assert!(!raw(&missing.stderr), "{:?}", missing.stderr);
    assert!(missing.stderr.contains("evil"), "{}", missing.stderr);
}

/// The ACL lines of docs/operating.md#redis-acls, loaded into a real
/// `redis-server`: ruled and ruled ctl work under their users; the
/// default user keeps the vehicle's keys but cannot touch `ruled:*`.
#[test]
fn the_documented_acl_confines_the_namespace() {
    let docs = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/operating.md"),
    )
    .unwrap();
    let section = docs
        .split("### Redis ACLs")
        .nth(1)
        .expect("the ACL section");
    let block = section
        .split("```text\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the ACL lines");
    let acl_dir = tempfile::tempdir().unwrap();
    let acl = acl_dir.path().join("users.acl");
    std::fs::write(&acl, block).unwrap();
    let redis = RedisServer::start_with(&["--aclfile".into(), acl.display().to_string()]);
    let dir = tempfile::tempdir().unwrap();
    let bundle =
        support::bundles::write(dir.path(), "b", &support::bundles::single(hazards(60_000)));
    let password = |name: &str, secret: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, secret).unwrap();
        path.display().to_string()
    };
    let ruled_pass = password("ruled.pass", "ruled-secret\n");
    let operator_pass = password("operator.pass", "operator-secret\n");
    let socket = redis.socket.display().to_string();
    let ruled = Ruled::start_with(
        &format!("redis+unix://{socket}?user=ruled"),
        &bundle,
        &["--namespace", "ruled", "--redis-password-file", &ruled_pass],
        &[],
    );
    ruled.wait_ready();
    let operator_url = format!("redis+unix://{socket}?user=operator");
    let as_operator = |args: &[&str]| {
        let mut all = vec![
            "--namespace",
            "ruled",
            "--redis-password-file",
            &operator_pass,
        ];
        all.extend_from_slice(args);
        ctl_at(&operator_url, &all)
    };
    let off = as_operator(&["set-enabled", RULE, "off"]);
    assert_eq!(off.code, 0, "{off:?}");
    let status = as_operator(&["status"]);
    assert_eq!(status.code, 0, "{status:?}");

    // The default user: the vehicle's keys yes, ruled's no.
    let mut con = redis.con();
    let ok = |args: &[&str], con: &mut redis::Connection| {
        let mut command = redis::cmd(args[0]);
        command.arg(&args[1..]);
        command.query::<redis::Value>(con).map(drop)
    };
    ok(&["LPUSH", "scooter:state", "unlock"], &mut con).unwrap();
    ok(&["HSET", "vehicle", "state", "parked"], &mut con).unwrap();
    for denied in [
        &["HSET", "ruled:overrides", RULE, "enabled"][..],
        &["HDEL", "ruled:overrides", RULE],
        &["LPUSH", "ruled:rpc", "{}"],
        &["BRPOP", "ruled:rpc", "1"],
        &["PUBLISH", "ruled:rpc:reply:0123", "{}"],
        &["HSET", "ruled", "state", "x"],
        &["DEL", "ruled:pending"],
        &["FLUSHALL"],
        &["ACL", "SETUSER", "default", "~*"],
    ] {
        let error = ok(denied, &mut con).unwrap_err();
        let text = error.to_string().to_lowercase();
        assert!(text.contains("noperm"), "{denied:?}: {error}");
    }
    // The override ruled kept under its user is there, untouched.
    let kept: Option<String> = redis::cmd("HGET")
        .arg("ruled:overrides")
        .arg(RULE)
        .query(&mut con)
        .unwrap_or(None);
    assert_eq!(kept, None, "the default user cannot even read it");
    wait_for("ruled logged the change", || {
        ruled.log_text().contains("control request v1.set-enabled")
    });
}

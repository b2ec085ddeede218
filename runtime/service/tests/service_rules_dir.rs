//! The rules directory (docs/service.md#the-rules-directory) end to end: a
//! real `redis-server`, a real `ruled --rules-dir`, the real `rulec`
//! binary. `v1.add` as `lsc` sends it (reply decoded with exactly the field
//! names and JSON types `lsc` reads), `ruled rebuild` making a dropped file
//! live and leaving the running rules alone when a file is broken, and
//! event-service's waiting records dropped as `foreign` at start.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod support;

use serde::Deserialize;
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;
use support::librescoot::{build_rules, rulec};
use support::lsc::{call_within, Reply};
use support::{wait_for, RedisServer, Ruled};

/// `lsc`'s mutation reply.
#[derive(Debug, Deserialize)]
struct Mutation {
    name: String,
    revision: String,
    pending_restart: bool,
    message: String,
}

/// `method` as `lsc` asks it; `rulec check` may take a while on a busy
/// machine: the deadline is 25 s out.
fn call(redis: &RedisServer, method: &str, payload: Value) -> Reply {
    call_within(redis, method, payload, Duration::from_secs(25))
}

fn ok(redis: &RedisServer, method: &str, payload: Value) -> Value {
    let reply = call(redis, method, payload);
    assert!(reply.ok, "{method}: {}", reply.error);
    reply.payload
}

/// The catalogue: `test.ping` carries `data.level`, nothing else.
const TOPICS: &str = r#"
[[topic]]
name = "test.ping"
data = { level = "int" }
"#;

/// A rule on `test.ping` pushing `word` onto the list `seen`.
fn ping_rule(name: &str, word: &str) -> String {
    format!(
        r#"
[[rule]]
name = "{name}"
on = ["test.ping"]

[[rule.step]]
do = "redis"
list = "seen"
push = "{word}"
"#
    )
}

/// A rules directory (`dir/rules`: the catalogue and `ping-base`), its
/// bundle, and a `ruled --rules-dir` on them.
struct Deployed {
    redis: RedisServer,
    _dir: tempfile::TempDir,
    rules: PathBuf,
    bundle: PathBuf,
    /// The control key `ruled` was given.
    key: PathBuf,
    ruled: Ruled,
}

/// A control key file of mode 0600 in `dir`.
fn key_file(dir: &Path) -> PathBuf {
    let path = dir.join("control.key");
    std::fs::write(&path, "3f9a1c0e7b2d4f6a8c1e3b5d7f9a2c4e\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

fn deployed() -> Deployed {
    deployed_with(false)
}

/// [`deployed`]; `keyed`: `ruled --control-key dir/control.key` (the
/// file is there either way).
fn deployed_with(keyed: bool) -> Deployed {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let base = ping_rule("ping-base", "base");
    let bundle = build_rules(
        dir.path(),
        "rules",
        &[("base.toml", &base), ("topics.toml", TOPICS)],
    );
    let rules = dir.path().join("rules");
    let rulec = rulec();
    let key = key_file(dir.path());
    let mut args = vec![
        "--rules-dir",
        rules.to_str().unwrap(),
        "--rulec",
        rulec.to_str().unwrap(),
    ];
    if keyed {
        args.extend(["--control-key", key.to_str().unwrap()]);
    }
    let ruled = Ruled::ready(&redis, &bundle, &args);
    Deployed {
        redis,
        _dir: dir,
        rules,
        bundle,
        key,
        ruled,
    }
}

impl Deployed {
    /// `ruled rebuild` as `ruled-rules.service` runs it: the service's
    /// environment, no flags.
    fn rebuild(&self) -> Output {
        let mut command = Command::new(env!("CARGO_BIN_EXE_ruled"));
        for (key, _) in std::env::vars() {
            if key.starts_with("RULED_") {
                command.env_remove(key);
            }
        }
        command
            .arg("rebuild")
            .env("RULED_RULES_DIR", &self.rules)
            .env("RULED_BUNDLE", &self.bundle)
            .env("RULED_RULEC", rulec())
            .env("RULED_REDIS", self.redis.url())
            .output()
            .expect("run ruled rebuild")
    }

    fn ctl_status(&self) -> String {
        let out = Command::new(env!("CARGO_BIN_EXE_ruled"))
            .args(["ctl", "--redis", &self.redis.url(), "status"])
            .env_remove("RULED_NAMESPACE")
            .output()
            .expect("run ruled ctl");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    }

    /// Publishes `test.ping` and waits until the list `seen` holds `want`
    /// (in any order), then empties it.
    fn ping_fires(&self, want: &[&str]) {
        let event = json!({"topic": "test.ping", "data": {"level": 1}}).to_string();
        let _: i64 = self.redis.query(&["PUBLISH", "ev:test.ping", &event]);
        wait_for(&format!("{want:?} pushed onto `seen`"), || {
            let mut seen = self.redis.list("seen");
            seen.sort();
            let mut want: Vec<String> = want.iter().map(|w| w.to_string()).collect();
            want.sort();
            seen == want
        });
        let _: i64 = self.redis.query(&["DEL", "seen"]);
    }
}

fn text(output: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn revision(redis: &RedisServer) -> String {
    ok(redis, "v1.status", json!({}))["revision"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn add_checks_with_rulec_against_the_directory_and_writes_a_managed_file() {
    let d = deployed();
    let redis = &d.redis;
    let status = ok(redis, "v1.status", json!({}));
    let read = status["revision"].as_str().unwrap().to_string();
    // The directory's digest, not the bundle id.
    assert_eq!(read.len(), 64, "{status}");
    assert_ne!(status["bundle"], json!(read), "{status}");
    assert_eq!(status["applied_revision"], json!(read));
    // Stale: refused, nothing written.
    let added = ping_rule("ping-added", "added");
    let stale = call(
        redis,
        "v1.add",
        json!({"definition": added, "expected_revision": "0".repeat(64)}),
    );
    assert!(
        !stale.ok && stale.error.contains("the rules changed"),
        "{stale:?}"
    );
    // The directory's catalogue counts: `test.ping` has no `data.nope`.
    let reads_nope = format!("{added}\n").replace(
        "on = [\"test.ping\"]",
        "on = [\"test.ping\"]\nwhen = 'data.nope > 1'",
    );
    let refused = call(redis, "v1.add", json!({"definition": reads_nope}));
    assert!(!refused.ok, "{refused:?}");
    assert!(
        refused.error.contains("rulec build found")
            && refused.error.contains("lsc-ping-added.toml"),
        "{}",
        refused.error
    );
    // A name another file defines: rulec's duplicate-name error.
    let twin = call(
        redis,
        "v1.add",
        json!({"definition": ping_rule("ping-base", "x")}),
    );
    assert!(
        !twin.ok && twin.error.contains("duplicate-name"),
        "{twin:?}"
    );
    // A file of that name nobody wrote through v1.add is not replaced.
    std::fs::write(d.rules.join("lsc-manual.toml"), ping_rule("manual", "m")).unwrap();
    let manual = call(
        redis,
        "v1.add",
        json!({"definition": ping_rule("manual", "m2")}),
    );
    assert!(
        !manual.ok && manual.error.contains("not written by v1.add"),
        "{manual:?}"
    );
    std::fs::remove_file(d.rules.join("lsc-manual.toml")).unwrap();
    assert_eq!(revision(redis), read, "refusals change nothing");
    // Accepted: `lsc`'s reply, the new revision, the managed file.
    let reply = ok(
        redis,
        "v1.add",
        json!({"definition": added, "expected_revision": read}),
    );
    let mutation: Mutation =
        serde_json::from_value(reply.clone()).unwrap_or_else(|e| panic!("{e} in {reply}"));
    assert_eq!(mutation.name, "ping-added");
    assert!(!mutation.pending_restart);
    assert_ne!(mutation.revision, read);
    assert_eq!(revision(redis), mutation.revision);
    let file = d.rules.join("lsc-ping-added.toml");
    assert!(
        mutation.message.contains(&file.display().to_string())
            && mutation.message.contains("rebuild"),
        "{mutation:?}"
    );
    let written = std::fs::read_to_string(&file).unwrap();
    assert!(
        written.starts_with("# Written by ruled (v1.add)"),
        "{written}"
    );
    assert!(written.contains("push = \"added\""), "{written}");
    // Again, changed: the managed file is replaced.
    let again = ok(
        redis,
        "v1.add",
        json!({"definition": ping_rule("ping-added", "twice")}),
    );
    assert_ne!(again["revision"], json!(mutation.revision));
    assert!(std::fs::read_to_string(&file).unwrap().contains("twice"));
    // `ruled ctl add FILE` sends the file's one rule.
    let file = d.rules.parent().unwrap().join("ctl.toml");
    std::fs::write(&file, ping_rule("ping-ctl", "ctl")).unwrap();
    let url = redis.url();
    let ctl = Command::new(env!("CARGO_BIN_EXE_ruled"))
        .args(["ctl", "--redis", &url, "--timeout", "25s", "add"])
        .arg(&file)
        .env_remove("RULED_NAMESPACE")
        .output()
        .expect("run ruled ctl add");
    let said = text(&ctl);
    assert!(ctl.status.success(), "{said}");
    assert!(said.contains("added ping-ctl: written to "), "{said}");
    assert!(d.rules.join("lsc-ping-ctl.toml").is_file());
    // Made live by the rebuild.
    let rebuilt = d.rebuild();
    assert!(rebuilt.status.success(), "{}", text(&rebuilt));
    d.ping_fires(&["base", "twice", "ctl"]);
    let scratch_left = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(Result::ok)
        .any(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with(&format!("ruled-add-{}-", d.ruled.pid()))
        });
    assert!(!scratch_left, "the scratch copies are removed");
}

#[test]
fn a_dropped_file_goes_live_and_a_broken_one_leaves_the_rules_running() {
    let d = deployed();
    d.ping_fires(&["base"]);
    assert!(d.ctl_status().contains("rebuild    none recorded"));
    // A new file, then the rebuild: its rule fires.
    std::fs::write(d.rules.join("new.toml"), ping_rule("ping-new", "new")).unwrap();
    let rebuilt = d.rebuild();
    assert!(rebuilt.status.success(), "{}", text(&rebuilt));
    assert!(
        text(&rebuilt).contains("ruled reloaded"),
        "{}",
        text(&rebuilt)
    );
    d.ping_fires(&["base", "new"]);
    let good = d.ctl_status();
    assert!(good.contains("rebuild    last rebuild ok at "), "{good}");
    // A broken file: the rebuild fails, writes nothing, the rules run on.
    let before = std::fs::read(&d.bundle).unwrap();
    std::fs::write(
        d.rules.join("broken.toml"),
        "[[rule]]\nname = \"broken\"\non = [\"test.ping\"]\nsoon = true\n\n[[rule.step]]\ndo = \"redis\"\nlist = \"seen\"\npush = \"broken\"\n",
    )
    .unwrap();
    let failed = d.rebuild();
    let said = text(&failed);
    assert_eq!(failed.status.code(), Some(1), "{said}");
    assert!(said.contains("broken.toml"), "{said}");
    assert!(said.contains("the loaded rules keep running"), "{said}");
    assert_eq!(
        std::fs::read(&d.bundle).unwrap(),
        before,
        "no bundle written"
    );
    d.ping_fires(&["base", "new"]);
    let status = d.ctl_status();
    eprintln!("ruled ctl status after the broken file:\n{status}");
    let line = status
        .lines()
        .find(|l| l.starts_with("rebuild "))
        .unwrap_or_default();
    assert!(line.contains("last rebuild failed at 20"), "{status}");
    assert!(line.contains(": broken.toml:4: error[rulec::"), "{status}");
    let last = &ok(&d.redis, "v1.status", json!({}))["last-rebuild"];
    assert_eq!(last["ok"], json!(false), "{last}");
    assert_eq!(last["errors"], json!(1), "{last}");
    assert!(last["at-ms"].as_i64().unwrap() > 1_600_000_000_000);
    // An oversized value planted in the hash is not read.
    let huge = "x".repeat(100_000);
    let _: i64 = d
        .redis
        .query(&["HSET", "extensions:rebuild", "first-error", &huge]);
    let last = &ok(&d.redis, "v1.status", json!({}))["last-rebuild"];
    assert_eq!(last["first-error"], Value::Null, "{last}");
}

/// event-service's waiting steps in `extensions:pending`: each dropped at
/// start with one line naming its rule and due time (reason `foreign`).
#[test]
fn event_service_s_waiting_records_are_dropped_as_foreign() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let base = ping_rule("ping-base", "base");
    let bundle = build_rules(
        dir.path(),
        "rules",
        &[("base.toml", &base), ("topics.toml", TOPICS)],
    );
    let planted = json!({"rule": "ping-base", "step": 0, "due": 1_764_657_600_000_i64});
    let _: i64 = redis.query(&["HSET", "extensions:pending", "evs-1", &planted.to_string()]);
    let ruled = Ruled::ready(&redis, &bundle, &[]);
    let line = ruled.wait_log(&["reason=\"foreign\""]);
    assert!(
        line.contains("\"ping-base\"") && line.contains("due 1764657600000"),
        "{line}"
    );
    let left: i64 = redis.query(&["HLEN", "extensions:pending"]);
    assert_eq!(left, 0);
    assert_eq!(ruled.count_log(&["reason=\"foreign\""]), 1);
}

/// `ruled ctl add FILE` against `d`, signed with its control key when
/// `signed`.
fn ctl_add(d: &Deployed, file: &Path, signed: bool) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ruled"));
    command.args(["ctl", "--redis", &d.redis.url(), "--timeout", "25s"]);
    if signed {
        command.arg("--control-key").arg(&d.key);
    }
    command
        .arg("add")
        .arg(file)
        .env_remove("RULED_NAMESPACE")
        .output()
        .expect("run ruled ctl add")
}

/// A rule on `test.ping` whose one step (or finally step) is `step`.
fn rule_with(name: &str, table: &str, step: &str) -> String {
    format!(
        "[[rule]]\nname = \"{name}\"\non = [\"test.ping\"]\ncancel-on = [\"test.ping\"]\n\n\
         [[rule.step]]\ndo = \"redis\"\nlist = \"seen\"\npush = \"{name}\"\n\n[[{table}]]\n{step}\n"
    )
}

/// docs/operating.md#trust: an unsigned request gets no more
/// than Redis access gives. An unsigned `v1.add` of an `exec` or `can`
/// step, also as a finally step, is refused naming the signature, and
/// nothing is written; the same file signed is written; a rule of
/// `redis`, `publish` and `notify` steps is still taken unsigned, as
/// `lsc ext add` sends it.
#[test]
fn an_unsigned_add_takes_only_redis_publish_and_notify_steps() {
    let d = deployed_with(true);
    let redis = &d.redis;
    let shell = "do = \"exec\"\ncommand = \"/bin/sh\"";
    let frame = "do = \"can\"\niface = \"can0\"\nid = \"0x3A1\"\ndata = \"01\"";
    for (name, table, step, kind) in [
        ("shell", "rule.step", shell, "an `exec`"),
        ("shell-finally", "rule.finally", shell, "an `exec`"),
        ("frame", "rule.step", frame, "a `can`"),
        ("frame-finally", "rule.finally", frame, "a `can`"),
    ] {
        let definition = rule_with(name, table, step);
        let refused = call(redis, "v1.add", json!({ "definition": definition }));
        assert!(!refused.ok, "{name}: {refused:?}");
        assert!(
            refused.error.contains(&format!(
                "{kind} step needs a signed request (--control-key)"
            )),
            "{name}: {}",
            refused.error
        );
        assert!(!d.rules.join(format!("lsc-{name}.toml")).exists(), "{name}");
    }
    d.ruled.wait_log(&[
        "WARN",
        "control request",
        "v1.add",
        "signed=false",
        "ok=false",
    ]);
    // Unsigned, the redis-only rule is still taken.
    let reply = ok(
        redis,
        "v1.add",
        json!({"definition": ping_rule("ping-lsc", "lsc")}),
    );
    assert_eq!(reply["name"], json!("ping-lsc"));
    let publish = rule_with(
        "toast",
        "rule.finally",
        "do = \"publish\"\nchannel = \"toasts\"\nmessage = \"bye\"",
    );
    ok(redis, "v1.add", json!({ "definition": publish }));
    let notify = rule_with("note", "rule.step", "do = \"notify\"\ntitle = \"Ping\"");
    ok(redis, "v1.add", json!({ "definition": notify }));
    // Signed, the shell step is written.
    let file = d.rules.parent().unwrap().join("shell.toml");
    std::fs::write(&file, rule_with("shell", "rule.step", shell)).unwrap();
    let unsigned = ctl_add(&d, &file, false);
    assert!(!unsigned.status.success(), "{}", text(&unsigned));
    assert!(
        text(&unsigned).contains("needs a signed request"),
        "{}",
        text(&unsigned)
    );
    let signed = ctl_add(&d, &file, true);
    assert!(signed.status.success(), "{}", text(&signed));
    let written = std::fs::read_to_string(d.rules.join("lsc-shell.toml")).unwrap();
    assert!(
        written.starts_with("# Written by ruled (v1.add, signed)"),
        "{written}"
    );
    // What the key's holder added, an unsigned request cannot replace.
    let undo = call(
        redis,
        "v1.add",
        json!({"definition": ping_rule("shell", "harmless")}),
    );
    assert!(
        !undo.ok
            && undo
                .error
                .contains("only a signed request (--control-key) replaces it"),
        "{undo:?}"
    );
    assert_eq!(
        std::fs::read_to_string(d.rules.join("lsc-shell.toml")).unwrap(),
        written
    );
}

/// A managed file `lsc-<name>.toml` of `bytes` bytes, as `v1.add`
/// writes it, planted in `rules`.
fn plant_managed(rules: &Path, name: &str, bytes: usize) {
    let rule = ping_rule(name, name);
    let header = "# Written by ruled (v1.add); a later v1.add of this rule replaces it.\n";
    let padding = bytes.saturating_sub(header.len() + rule.len() + 1);
    let text = format!("{header}{rule}#{}\n", "x".repeat(padding));
    std::fs::write(rules.join(format!("lsc-{name}.toml")), text).unwrap();
}

/// docs/operating.md#trust: `v1.add` keeps at most 64 managed files and 1 MiB in all.
/// With 64 there, a 65th is refused with the figures; replacing one of
/// them is still taken. With 1 MiB nearly used, an add that would pass it
/// is refused with the figures.
#[test]
fn add_keeps_at_most_64_managed_files_and_1_mib() {
    let d = deployed();
    let redis = &d.redis;
    for n in 0..63 {
        plant_managed(&d.rules, &format!("planted-{n}"), 200);
    }
    // The 64th through v1.add: taken.
    ok(
        redis,
        "v1.add",
        json!({"definition": ping_rule("ping-64", "64")}),
    );
    let refused = call(
        redis,
        "v1.add",
        json!({"definition": ping_rule("ping-65", "65")}),
    );
    assert!(!refused.ok, "{refused:?}");
    assert!(
        refused.error.contains("64 managed files") && refused.error.contains("at most 64"),
        "{}",
        refused.error
    );
    assert!(!d.rules.join("lsc-ping-65.toml").exists());
    // Replacing one of the 64 adds no file: taken.
    ok(
        redis,
        "v1.add",
        json!({"definition": ping_rule("ping-64", "again")}),
    );

    // Bytes: 20 files of 50 KiB (1,000 KiB), then a 30 KiB definition.
    for n in 0..63 {
        std::fs::remove_file(d.rules.join(format!("lsc-planted-{n}.toml"))).unwrap();
    }
    for n in 0..20 {
        plant_managed(&d.rules, &format!("big-{n}"), 50 * 1024);
    }
    let big = format!(
        "{}#{}\n",
        ping_rule("ping-big", "big"),
        "y".repeat(30 * 1024)
    );
    let refused = call(redis, "v1.add", json!({ "definition": big }));
    assert!(!refused.ok, "{refused:?}");
    assert!(
        refused.error.contains("1024 KiB") && refused.error.contains("bytes"),
        "{}",
        refused.error
    );
    assert!(!d.rules.join("lsc-ping-big.toml").exists());
}

/// docs/operating.md#trust: every file `ruled` creates for `v1.add` is created
/// exclusively, without following a symlink. Two names are predictable:
/// the temporary file beside the managed one
/// (`.lsc-<name>.toml.<pid>.tmp`) and the scratch directory
/// (`$TMPDIR/ruled-add-<pid>-<n>`, the first add's `n` is 0); symlinks
/// planted at both must not make `ruled` write through them, and the add
/// still succeeds under other names.
#[test]
fn add_writes_through_no_planted_symlink() {
    let d = deployed();
    let outside = d.rules.parent().unwrap().join("victim");
    std::fs::write(&outside, "untouched\n").unwrap();
    let planted = d
        .rules
        .join(format!(".lsc-ping-sym.toml.{}.tmp", d.ruled.pid()));
    std::os::unix::fs::symlink(&outside, &planted).unwrap();
    let outside_dir = d.rules.parent().unwrap().join("victim-dir");
    std::fs::create_dir(&outside_dir).unwrap();
    let scratch = std::env::temp_dir().join(format!("ruled-add-{}-0", d.ruled.pid()));
    std::os::unix::fs::symlink(&outside_dir, &scratch).unwrap();
    let reply = call(
        &d.redis,
        "v1.add",
        json!({"definition": ping_rule("ping-sym", "sym")}),
    );
    assert_eq!(
        std::fs::read_to_string(&outside).unwrap(),
        "untouched\n",
        "written through the symlink: {reply:?}"
    );
    std::fs::remove_file(&scratch).unwrap();
    let copied: Vec<_> = std::fs::read_dir(&outside_dir).unwrap().collect();
    assert!(copied.is_empty(), "copied through the symlink: {copied:?}");
    assert!(reply.ok, "{reply:?}");
    let managed = d.rules.join("lsc-ping-sym.toml");
    let meta = std::fs::symlink_metadata(&managed).unwrap();
    assert!(meta.file_type().is_file(), "{meta:?}");
    assert!(std::fs::read_to_string(&managed)
        .unwrap()
        .contains("push = \"sym\""));
    // The planted link is left alone: not ruled's to remove.
    assert!(std::fs::symlink_metadata(&planted).is_ok());
}

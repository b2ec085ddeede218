//! `rulec lsp` driven over stdio like an editor (docs/editors.md): open a
//! rule file with a misspelt topic, get the warning and its fix, apply the
//! code action, get no diagnostics; hover a `state()` call; complete a
//! `push` value; a timeline's problem placed on its key; go to a topic's
//! definition.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use insta_cmd::get_cargo_bin;
use serde_json::{json, Value};
use support::lsp_client::{apply_edits, url, Client};

const RULE: &str = r#"[[rule]]
name = "hazards-when-parked"
on = ["vehicle.sate.changed"]
when = 'state("vehicle", "state") == "parked"'

[[rule.step]]
do = "redis"
list = "scooter:blinker"
push = "both"
"#;

fn position(text: &str, needle: &str, past: usize) -> Value {
    let at = text.find(needle).unwrap() + past;
    let line = text[..at].matches('\n').count();
    let column = at - text[..at].rfind('\n').map_or(0, |i| i + 1);
    json!({ "line": line, "character": column })
}

fn open(client: &mut Client, uri: &str, text: &str) {
    client.notify(
        "textDocument/didOpen",
        json!({ "textDocument": { "uri": uri, "languageId": "toml", "version": 1, "text": text } }),
    );
}

#[test]
fn a_typo_its_fix_hover_and_completion() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("parked.toml");
    std::fs::write(&path, RULE).unwrap();
    let uri = url(&path);
    let mut client = Client::start(&get_cargo_bin("rulec"), dir.path(), &[]);
    open(&mut client, &uri, RULE);

    let diagnostics = client.diagnostics(&uri, Some(1));
    assert_eq!(diagnostics.len(), 1, "{diagnostics:#?}");
    let warning = &diagnostics[0];
    // One edit from a derived topic: an error.
    assert_eq!(warning["code"], "rulec::near-miss-topic");
    assert_eq!(warning["severity"], 1, "an error");
    assert_eq!(
        warning["range"]["start"],
        position(RULE, "\"vehicle.sate", 0)
    );
    let message = warning["message"].as_str().unwrap();
    assert!(
        message.contains("did you mean `vehicle.state.changed`?"),
        "{message}"
    );

    let actions = client.request(
        "textDocument/codeAction",
        json!({
            "textDocument": { "uri": uri },
            "range": warning["range"],
            "context": { "diagnostics": [warning] },
        }),
    );
    let actions = actions.as_array().unwrap();
    assert_eq!(actions.len(), 1, "{actions:#?}");
    assert_eq!(actions[0]["kind"], "quickfix");
    let edits = actions[0]["edit"]["changes"][&uri].as_array().unwrap();
    let fixed = apply_edits(RULE, edits);
    assert!(
        fixed.contains(r#"on = ["vehicle.state.changed"]"#),
        "{fixed}"
    );
    client.notify(
        "textDocument/didChange",
        json!({ "textDocument": { "uri": uri, "version": 2 }, "contentChanges": edits
            .iter()
            .map(|edit| json!({ "range": edit["range"], "text": edit["newText"] }))
            .collect::<Vec<_>>() }),
    );
    assert_eq!(client.diagnostics(&uri, Some(2)), Vec::<Value>::new());

    let hover = client.request(
        "textDocument/hover",
        json!({ "textDocument": { "uri": uri }, "position": position(&fixed, "\"vehicle\", \"state\"", 3) }),
    );
    let shown = hover["contents"]["value"].as_str().unwrap();
    for value in ["stand-by", "parked", "ready-to-drive"] {
        assert!(shown.contains(&format!("`{value}`")), "{shown}");
    }
    assert!(shown.contains("announced"), "{shown}");

    let typed =
        format!("{fixed}\n[[rule.step]]\ndo = \"redis\"\nlist = \"scooter:blinker\"\npush = \"");
    client.notify(
        "textDocument/didChange",
        json!({ "textDocument": { "uri": uri, "version": 3 }, "contentChanges": [{ "text": typed }] }),
    );
    let lines = typed.matches('\n').count();
    let column = typed.len() - typed.rfind('\n').unwrap() - 1;
    let completion = client.request(
        "textDocument/completion",
        json!({ "textDocument": { "uri": uri }, "position": { "line": lines, "character": column } }),
    );
    let mut labels: Vec<&str> = completion["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["label"].as_str().unwrap())
        .collect();
    labels.sort_unstable();
    assert_eq!(labels, ["both", "left", "off", "right"]);

    assert!(client.stop().success());
}

const TOPICS: &str = r#"[[topic]]
name = "seat.heater.changed"
from = true
to = true
data = { level = "int" }
"#;

const HEATER: &str = r#"[[rule]]
name = "heater"
on = ["seat.heater.changed", "vehicle.state.changed"]
cooldown = "5s"
when = 'data.'

[[rule.step]]
do = "exec"
command = "/usr/bin/true"
"#;

const TIMELINE: &str = r#"[[event]]
at = "0s"
tpoic = "seat.heater.changed"
"#;

fn labels(completion: &Value) -> Vec<String> {
    completion["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["label"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn definitions_completion_in_when_and_a_timeline() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("tests")).unwrap();
    std::fs::write(dir.path().join("00-topics.toml"), TOPICS).unwrap();
    let rules = dir.path().join("10-heater.toml");
    let uri = url(&rules);
    let mut client = Client::start(&get_cargo_bin("rulec"), dir.path(), &[]);
    // Not yet saved: the buffer alone is the file.
    open(&mut client, &uri, HEATER);
    let diagnostics = client.diagnostics(&uri, Some(1));
    assert!(
        diagnostics.iter().any(|d| d["code"] == "rulec::when::syntax" || d["code"] == "rulec::when::unknown-name"),
        "{diagnostics:#?}"
    );

    let at = |needle: &str, past: usize| json!({ "textDocument": { "uri": uri }, "position": position(HEATER, needle, past) });
    let declared = client.request("textDocument/definition", at("seat.heater", 2));
    assert_eq!(declared["uri"], url(&dir.path().join("00-topics.toml")));
    assert_eq!(declared["range"]["start"]["line"], 0);
    let derived = client.request("textDocument/definition", at("vehicle.state", 2));
    let profile_file = derived["uri"].as_str().unwrap();
    assert!(profile_file.ends_with("/vehicle.toml"), "{derived}");
    let on_disk = std::fs::read_to_string(profile_file.trim_start_matches("file://")).unwrap();
    assert!(
        on_disk.contains("topic = \"vehicle.state.changed\""),
        "{profile_file}"
    );

    let data = client.request("textDocument/completion", at("data.", 5));
    assert!(labels(&data).contains(&"data.level".to_string()), "{data}");
    let hover = client.request("textDocument/hover", at("cooldown", 2));
    assert!(
        hover["contents"]["value"]
            .as_str()
            .unwrap()
            .contains("duration"),
        "{hover}"
    );
    let topics = client.request("textDocument/completion", at("vehicle.state", 4));
    let topics = labels(&topics);
    for topic in [
        "seat.heater.changed",
        "vehicle.state.changed",
        "vehicle.kickstand.down",
    ] {
        assert!(topics.contains(&topic.to_string()), "{topics:?}");
    }
    let keys = client.request(
        "textDocument/completion",
        json!({ "textDocument": { "uri": uri }, "position": { "line": 5, "character": 0 } }),
    );
    assert!(labels(&keys).contains(&"debounce".to_string()), "{keys}");

    let timeline = dir.path().join("tests").join("heater.toml");
    let timeline_uri = url(&timeline);
    open(&mut client, &timeline_uri, TIMELINE);
    let found = client.diagnostics(&timeline_uri, Some(1));
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0]["code"], "rulec::timeline");
    assert_eq!(found[0]["range"]["start"], position(TIMELINE, "tpoic", 0));
    let actions = client.request(
        "textDocument/codeAction",
        json!({ "textDocument": { "uri": timeline_uri }, "range": found[0]["range"], "context": { "diagnostics": found } }),
    );
    let edits = actions[0]["edit"]["changes"][&timeline_uri]
        .as_array()
        .unwrap();
    assert_eq!(
        apply_edits(TIMELINE, edits),
        TIMELINE.replace("tpoic", "topic")
    );

    assert!(client.stop().success());
}

/// The peak resident memory of a process, in KiB (`VmHWM`).
fn peak_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// A rule file open and checked: the server still serves.
fn still_serves(client: &mut Client, dir: &std::path::Path, version: i64) {
    let path = dir.join("parked.toml");
    let uri = url(&path);
    client.notify(
        "textDocument/didOpen",
        json!({ "textDocument": { "uri": uri, "languageId": "toml", "version": version, "text": RULE } }),
    );
    let diagnostics = client.diagnostics(&uri, Some(version));
    assert_eq!(diagnostics.len(), 1, "{diagnostics:#?}");
    assert_eq!(diagnostics[0]["code"], "rulec::near-miss-topic");
    client.notify(
        "textDocument/didClose",
        json!({ "textDocument": { "uri": uri } }),
    );
}

#[test]
fn a_huge_content_length_is_refused_without_allocating_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut client = Client::start(&get_cargo_bin("rulec"), dir.path(), &[]);
    // The issue's figure: 628 MB announced. The body is sent whole, so
    // the stream stays in step and the server can go on.
    const ANNOUNCED: usize = 628_000_000;
    client.write_raw(format!("Content-Length: {ANNOUNCED}\r\n\r\n").as_bytes());
    let chunk = vec![b' '; 1 << 20];
    let mut left = ANNOUNCED;
    while left > 0 {
        let n = left.min(chunk.len());
        client.write_raw(&chunk[..n]);
        left -= n;
    }
    let reply = client.response(&Value::Null);
    assert_eq!(reply["error"]["code"], -32600, "{reply}");
    let message = reply["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("628000000 bytes") && message.contains("16 MiB"),
        "{message}"
    );
    let peak = peak_kib(client.pid());
    assert!(
        peak < 200 * 1024,
        "peak RSS {peak} KiB: the announced length was allocated"
    );
    still_serves(&mut client, dir.path(), 1);
    assert!(client.stop().success());
}

#[test]
fn a_malformed_message_gets_a_json_rpc_error_and_the_server_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let mut client = Client::start(&get_cargo_bin("rulec"), dir.path(), &[]);

    client.write_raw(b"Content-Length: 9\r\n\r\n{not json");
    let reply = client.response(&Value::Null);
    assert_eq!(reply["error"]["code"], -32700, "{reply}");

    // JSON, but not a JSON-RPC message: answered with its id.
    client.send(&json!({ "jsonrpc": "2.0", "id": 7, "method": 42 }));
    let reply = client.response(&json!(7));
    assert_eq!(reply["error"]["code"], -32600, "{reply}");
    client.send(&json!([1, 2]));
    let reply = client.response(&Value::Null);
    assert_eq!(reply["error"]["code"], -32600, "{reply}");

    // Bytes that are no header, then a header without Content-Length: each
    // is answered and the next framed message is found again.
    client.write_raw(b"hello\r\n");
    let answered = client.request(
        "textDocument/hover",
        json!({
            "textDocument": { "uri": url(&dir.path().join("none.toml")) },
            "position": { "line": 0, "character": 0 },
        }),
    );
    assert_eq!(answered, Value::Null);
    let reply = client.response(&Value::Null);
    assert_eq!(reply["error"]["code"], -32700, "{reply}");
    client.write_raw(b"Content-Type: text/plain\r\n\r\n{}");
    let reply = client.response(&Value::Null);
    assert_eq!(reply["error"]["code"], -32700, "{reply}");

    // A notification cannot be answered: its bad params are logged, the
    // reason clipped (serde quotes the string it did not expect).
    client.notify("textDocument/didOpen", json!("x".repeat(100_000)));
    let logged = client.notification("window/logMessage");
    let logged = if logged["message"]
        .as_str()
        .unwrap()
        .starts_with("rulec lsp: profile")
    {
        client.notification("window/logMessage")
    } else {
        logged
    };
    assert_eq!(logged["type"], 2, "a warning: {logged}");
    let message = logged["message"].as_str().unwrap();
    assert!(message.contains("textDocument/didOpen"), "{message}");
    assert!(message.len() < 1000, "{} bytes logged", message.len());

    still_serves(&mut client, dir.path(), 1);
    assert!(client.stop().success());
}

#[test]
fn the_built_in_profile_is_written_to_a_fresh_private_folder() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let victim = tempfile::tempdir().unwrap();
    let victim_file = victim.path().join("vehicle.toml");
    std::fs::write(&victim_file, "victim\n").unwrap();
    let mut client = Client::start_with_env(
        &get_cargo_bin("rulec"),
        dir.path(),
        &[],
        &[("TMPDIR", tmp.path())],
    );
    // The folder the server used to write to, named by the profile's
    // digest: planted as a symlink to the victim's folder.
    let logged = client.notification("window/logMessage");
    let message = logged["message"].as_str().unwrap();
    let digest = message.split('(').nth(1).unwrap().trim_end_matches(')');
    let planted = tmp.path().join(format!("rulec-profile-{}", &digest[..16]));
    std::os::unix::fs::symlink(victim.path(), &planted).unwrap();

    let rules = dir.path().join("10-heater.toml");
    let uri = url(&rules);
    open(&mut client, &uri, HEATER);
    let at =
        json!({ "textDocument": { "uri": uri }, "position": position(HEATER, "vehicle.state", 2) });
    let derived = client.request("textDocument/definition", at.clone());
    let file = std::path::PathBuf::from(
        derived["uri"]
            .as_str()
            .unwrap()
            .trim_start_matches("file://"),
    );
    assert_eq!(std::fs::read_to_string(&victim_file).unwrap(), "victim\n");
    assert!(!file.starts_with(&planted), "{}", file.display());
    // The server's own folder: the first component under TMPDIR.
    let inside = file.strip_prefix(tmp.path()).unwrap();
    let folder = tmp.path().join(inside.components().next().unwrap());
    let meta = std::fs::symlink_metadata(&folder).unwrap();
    assert!(meta.is_dir(), "{}", folder.display());
    assert_eq!(meta.permissions().mode() & 0o777, 0o700);
    let written = std::fs::read_to_string(&file).unwrap();
    assert!(
        written.contains("topic = \"vehicle.state.changed\""),
        "{written}"
    );
    // Written once per server.
    let again = client.request("textDocument/definition", at);
    assert_eq!(again["uri"], derived["uri"]);

    assert!(client.stop().success());
    assert!(!folder.exists(), "{} is left behind", folder.display());
    assert_eq!(std::fs::read_to_string(&victim_file).unwrap(), "victim\n");
}

#[test]
fn a_document_over_the_bound_is_not_kept_or_checked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("parked.toml");
    let uri = url(&path);
    let mut client = Client::start(&get_cargo_bin("rulec"), dir.path(), &[]);
    open(&mut client, &uri, RULE);
    assert_eq!(client.diagnostics(&uri, Some(1)).len(), 1);

    // Two edits of 9 MB each (a comment, cheap to check): each message is
    // under the bound, the document they make is over it.
    let end = position(RULE, "push = \"both\"\n", 14);
    let comment = format!("# {}\n", "x".repeat(9_000_000));
    for version in [2, 3] {
        client.notify(
            "textDocument/didChange",
            json!({ "textDocument": { "uri": uri, "version": version },
                    "contentChanges": [{ "range": { "start": end, "end": end }, "text": comment }] }),
        );
    }
    let over = client.diagnostics(&uri, Some(3));
    assert_eq!(over.len(), 1, "{over:#?}");
    assert_eq!(over[0]["code"], "rulec::io");
    assert_eq!(over[0]["severity"], 1);
    let message = over[0]["message"].as_str().unwrap();
    assert!(
        message.contains("18000") && message.contains("16 MiB"),
        "{message}"
    );

    // The whole text sent again, under the bound: checked again.
    client.notify(
        "textDocument/didChange",
        json!({ "textDocument": { "uri": uri, "version": 4 }, "contentChanges": [{ "text": RULE }] }),
    );
    let back = client.diagnostics(&uri, Some(4));
    assert_eq!(back.len(), 1, "{back:#?}");
    assert_eq!(back[0]["code"], "rulec::near-miss-topic");
    assert!(client.stop().success());
}

#[test]
fn a_toml_file_outside_a_rules_folder_is_not_checked() {
    let dir = tempfile::tempdir().unwrap();
    let crate_dir = dir.path().join("crate");
    let rules = dir.path().join("rules");
    std::fs::create_dir(&crate_dir).unwrap();
    std::fs::create_dir(&rules).unwrap();
    std::fs::write(rules.join("parked.toml"), RULE).unwrap();
    let mut client = Client::start(&get_cargo_bin("rulec"), dir.path(), &[]);

    // Editors that attach to every TOML file send a Cargo.toml too.
    let cargo = url(&crate_dir.join("Cargo.toml"));
    open(&mut client, &cargo, "[workspace]\nmembers = [\"x\"]\n");
    assert_eq!(client.diagnostics(&cargo, Some(1)), Vec::<Value>::new());
    let hover = client.request(
        "textDocument/hover",
        json!({ "textDocument": { "uri": cargo }, "position": { "line": 0, "character": 2 } }),
    );
    assert_eq!(hover, Value::Null);

    // In a rules folder, every TOML file is a rule file (`rulec check`
    // reads them all): one without a rule table yet is checked.
    let extra = url(&rules.join("extra.toml"));
    open(&mut client, &extra, "[workspace]\n");
    let found = client.diagnostics(&extra, Some(1));
    assert!(
        found.iter().any(|d| d["code"] == "rulec::unknown-key"),
        "{found:#?}"
    );
    assert!(client.stop().success());
}

/// docs/safety-checks.md: the checks of the rules as a whole reach the
/// editor like any other warning, with every place on the loop as related
/// information.
#[test]
fn a_loop_between_two_files_is_published_with_its_places() {
    let lock = r#"[[rule]]
name = "lock-when-seatbox-opens"
on = ["vehicle.seatbox.opened"]

[[rule.step]]
do = "redis"
list = "scooter:state"
push = "lock"
"#;
    let seatbox = r#"[[rule]]
name = "open-seatbox-on-lock"
on = ["vehicle.locked"]

[[rule.step]]
do = "redis"
list = "scooter:seatbox"
push = "open"
"#;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lock.toml");
    std::fs::write(&path, lock).unwrap();
    std::fs::write(dir.path().join("seatbox.toml"), seatbox).unwrap();
    let uri = url(&path);
    let mut client = Client::start(&get_cargo_bin("rulec"), dir.path(), &[]);
    open(&mut client, &uri, lock);
    // The built-in seat box guard warns about the lock too (`rulec::guarded`).
    let diagnostics = client.diagnostics(&uri, Some(1));
    let loops: Vec<_> = diagnostics
        .iter()
        .filter(|d| d["code"] == "rulec::loop")
        .collect();
    assert_eq!(loops.len(), 1, "{diagnostics:#?}");
    let warning = loops[0];
    assert_eq!(warning["code"], "rulec::loop");
    assert_eq!(warning["severity"], 2, "a warning");
    assert_eq!(
        warning["range"]["start"],
        position(lock, "[[rule.step]]", 0)
    );
    let related = warning["relatedInformation"].as_array().unwrap();
    assert_eq!(related.len(), 3, "{related:#?}");
    assert!(related[0]["location"]["uri"]
        .as_str()
        .unwrap()
        .ends_with("seatbox.toml"));
}

/// docs/editors.md#hover, docs/safety-checks.md: `rulec::guarded` and
/// `rulec::conflict` are published like any warning, and hovering a pushed
/// value a guard covers names the guard (the profile's and the rules
/// directory's), what it allows and its toast, and the limits covering it.
#[test]
fn guarded_and_conflict_are_published_and_a_guarded_value_hovers_its_guards() {
    let rules = r#"[[guard]]
name = "seat-closed"
list = "scooter:hardware"
values = ["handlebar:<text>"]
when = 'state("vehicle", "seatbox:lock") == "closed"'
say = "Close the seat box first"

[[rule]]
name = "lock-on-pull"
on = ["button.brake.left.hold"]
when = 'state("vehicle", "state") == "parked"'

[[rule.step]]
do = "redis"
list = "scooter:hardware"
push = "handlebar:lock"

[[rule]]
name = "blink-both"
on = ["vehicle.kickstand.down"]

[[rule.step]]
do = "redis"
list = "scooter:blinker"
push = "both"

[[rule]]
name = "blink-off"
on = ["vehicle.kickstand.down"]

[[rule.step]]
do = "redis"
list = "scooter:blinker"
push = "off"
"#;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lock.toml");
    std::fs::write(&path, rules).unwrap();
    let uri = url(&path);
    let mut client = Client::start(&get_cargo_bin("rulec"), dir.path(), &[]);
    open(&mut client, &uri, rules);
    let diagnostics = client.diagnostics(&uri, Some(1));
    let with_code =
        |code: &str| -> Vec<&Value> { diagnostics.iter().filter(|d| d["code"] == code).collect() };
    // The lock: nothing shows the speed is 0 (the built-in guard) nor the
    // seat box closed (the directory's guard).
    let guarded = with_code("rulec::guarded");
    assert_eq!(guarded.len(), 2, "{diagnostics:#?}");
    for warning in &guarded {
        assert_eq!(warning["severity"], 2, "a warning");
        assert_eq!(
            warning["range"]["start"],
            position(
                rules,
                "[[rule.step]]\ndo = \"redis\"\nlist = \"scooter:hardware\"",
                0
            )
        );
    }
    let named: Vec<&str> = guarded
        .iter()
        .map(|w| w["message"].as_str().unwrap())
        .collect();
    assert!(
        named.iter().any(|m| m.contains("guard `hardware-parked`")),
        "{named:?}"
    );
    assert!(
        named.iter().any(|m| m.contains("guard `seat-closed`")),
        "{named:?}"
    );
    let conflicts = with_code("rulec::conflict");
    assert_eq!(conflicts.len(), 1, "{diagnostics:#?}");
    assert_eq!(conflicts[0]["severity"], 2, "a warning");
    assert!(
        !conflicts[0]["relatedInformation"]
            .as_array()
            .unwrap()
            .is_empty(),
        "the other step is related: {:#?}",
        conflicts[0]
    );

    let hover = client.request(
        "textDocument/hover",
        json!({ "textDocument": { "uri": uri }, "position": position(rules, "\"handlebar:lock\"", 3) }),
    );
    let shown = hover["contents"]["value"].as_str().unwrap();
    assert!(
        shown.contains("**guard `hardware-parked`** (profiles/librescoot/guards.toml)"),
        "{shown}"
    );
    assert!(
        shown.contains(
            "performed only while `state(\"vehicle\", \"state\") != \"ready-to-drive\" && int(state(\"engine-ecu\", \"speed\")) == 0`"
        ),
        "{shown}"
    );
    assert!(
        shown.contains("the dashboard shows \"Refused: the scooter is moving or ready to drive\""),
        "{shown}"
    );
    assert!(
        shown.contains("**guard `seat-closed`** (lock.toml)"),
        "{shown}"
    );
    assert!(shown.contains("Close the seat box first"), "{shown}");
    assert!(
        shown
            .contains("**limit `handlebar`** (profiles/librescoot/guards.toml): at most 2 per 10s"),
        "{shown}"
    );
    // A value no guard covers shows the list's values only.
    let hover = client.request(
        "textDocument/hover",
        json!({ "textDocument": { "uri": uri }, "position": position(rules, "\"both\"", 2) }),
    );
    let shown = hover["contents"]["value"].as_str().unwrap();
    assert!(
        shown.starts_with("**list `scooter:blinker`** accepts"),
        "{shown}"
    );
    assert!(!shown.contains("guard"), "{shown}");

    assert!(client.stop().success());
}
